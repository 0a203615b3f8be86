#!/usr/bin/env bash
# `scaletrain launch` with more ranks than cores (issue 4; `bench -n 1,2,4`
# on a 2-core machine): mpirun refuses to bind two ranks to one core, so the
# launcher starts them unbound and says that they share the cores.
# (a) N = 2 x the CPUs online (always more than the physical cores): every
#     rank runs, the note "N ranks on C cores: the ranks share the cores" is
#     on stderr, and every rank may run on every CPU the launcher may (no
#     binding);
# (b) C ranks (the cores the note named): no note, and each rank is bound to
#     a CPU set of its own;
# (c) a tiny training run on N ranks: exit 0, N ranks;
# (d) `scaletrain bench -n 1,N`: exit 0, a row for N ranks, the note on
#     stdout, and bench.json's cores_per_rank = C / N for N ranks, 1 for one;
# (e) `launch -n 3 --hosts localhost:2`: the hosts' slots stand for cores:
#     unbound, the note, 3 ranks.
# (f) cores per rank (C cores): one rank gets every CPU of the C cores and
#     trains with as many threads (train.threads auto); `--cores-per-rank 1`
#     binds it to one core's CPUs, fewer when C > 1, and it trains with that
#     many; with C >= 4, 2 ranks get half the CPUs each, apart.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
n=$((2 * $(nproc)))
mine=$(grep Cpus_allowed_list /proc/self/status | cut -f2)

cat >"$tmp/cpus.sh" <<'SH'
echo "rank $OMPI_COMM_WORLD_RANK cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)"
SH
# (a)
timeout 60 "$bin" launch -n $n sh "$tmp/cpus.sh" >"$tmp/a.out" 2>"$tmp/a.err"; rc=$?
[ $rc -eq 0 ] || fail "launch -n $n: exit $rc: $(cat "$tmp/a.err")"
note=$(grep "^scaletrain launch: $n ranks on [0-9]* cores\?: the ranks share the cores" "$tmp/a.err")
[ -n "$note" ] || fail "launch -n $n: no note that the ranks share the cores: $(cat "$tmp/a.err")"
echo "launch -n $n: $note"
for r in $(seq 0 $((n - 1))); do
    got=$(grep -oE "rank $r cpus .*" "$tmp/a.out" | cut -d' ' -f4)
    [ "$got" = "$mine" ] || fail "launch -n $n: rank $r may run on '$got', not on every CPU ($mine): bound"
done
c=$(sed -E 's/.* ranks on ([0-9]+) cores?:.*/\1/' <<<"$note")

# (b)
if [ -n "$c" ] && [ "$c" -lt "$n" ]; then
    timeout 60 "$bin" launch -n "$c" sh "$tmp/cpus.sh" >"$tmp/b.out" 2>"$tmp/b.err"; rc=$?
    [ $rc -eq 0 ] || fail "launch -n $c: exit $rc: $(cat "$tmp/b.err")"
    ! grep -q "share the cores" "$tmp/b.err" || fail "launch -n $c: a note about sharing with a core per rank"
    sets=$(grep -oE "cpus .*" "$tmp/b.out" | sort -u | wc -l)
    [ "$sets" -eq "$c" ] || fail "launch -n $c: $sets distinct CPU sets among $c ranks: $(cat "$tmp/b.out")"
    if [ "$c" -gt 1 ]; then
        ! grep -q "cpus $mine\$" "$tmp/b.out" || fail "launch -n $c: a rank is not bound: $(cat "$tmp/b.out")"
    fi
    echo "launch -n $c: bound, $(grep -oE 'cpus .*' "$tmp/b.out" | sort | tr '\n' ' ')"
fi

# (c)
for i in $(seq 1 200); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
out=$(timeout 120 "$bin" launch -n $n train --set model.type=gpt --set data.type=tokens \
    --set data.train="$tmp/t.tokens" --set data.val= --set model.n_layer=1 --set model.n_head=2 \
    --set model.n_embd=16 --set model.block_size=16 --set data.num_workers=0 --set train.batch_size=$((2 * n)) \
    --set train.steps=3 --set log.peak_gflops=10 --set train.out_dir="$tmp/run" --quiet --json 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "\"ranks\":$n" <<<"$out" && [ -f "$tmp/run/model.safetensors" ] ||
    fail "launch -n $n train: exit $rc: $out"
echo "launch -n $n train: exit $rc, $(grep -o "\"ranks\":$n" <<<"$out")"

# (d)
cat >"$tmp/tiny.yaml" <<YAML
model: { type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16 }
data:  { type: tokens, train: $tmp/t.tokens, val: "" }
train: { batch_size: 2, threads: 1 }
log:   { peak_gflops: 10 }
YAML
out=$(timeout 120 "$bin" bench -n 1,$n "$tmp/tiny.yaml" --steps 4 --warmup 1 --out "$tmp/bench" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "bench -n 1,$n: exit $rc: $out"
grep -q "^scaletrain bench: $n ranks on $c cores\?: the ranks share the cores" <<<"$out" ||
    fail "bench -n 1,$n: no note that the ranks share the cores: $out"
grep -qE "^\| $n \| $((2 * n)) \|" <<<"$out" || fail "bench -n 1,$n: no row for $n ranks: $out"
/usr/bin/python3 - "$tmp/bench/bench.json" "$n" "$c" <<'PY' || fail "bench -n 1,$n: bench.json's cores_per_rank"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
n, c = int(sys.argv[2]), int(sys.argv[3])
assert [r["ranks"] for r in runs] == [1, n], runs
assert runs[0]["cores_per_rank"] == 1, runs[0]
assert abs(runs[1]["cores_per_rank"] - c / n) <= 1e-12, runs[1]
PY
echo "bench -n 1,$n: exit $rc, $(grep "^| $n |" <<<"$out" | cut -c1-60)..."

# (e) --hosts with fewer slots than ranks: unbound, said, and the job runs
# (mpirun refused to bind 3 ranks to 2 slots).
out=$(timeout 60 "$bin" launch -n 3 --hosts localhost:2 hostname 2>&1); rc=$?
[ $rc -eq 0 ] || fail "launch -n 3 --hosts localhost:2: exit $rc: $out"
grep -q "^scaletrain launch: 3 ranks on 2 slots: the ranks share the slots" <<<"$out" ||
    fail "launch -n 3 --hosts localhost:2: no note that the ranks share the slots: $out"
[ "$(grep -c "$(hostname)\$" <<<"$out")" -eq 3 ] || fail "launch -n 3 --hosts localhost:2: not 3 ranks: $out"
echo "launch -n 3 --hosts localhost:2: exit 0, 3 ranks sharing 2 slots"

# (f)
all=$(nproc)
cpus_of() { timeout 60 "$bin" launch "$@" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK nproc $(nproc) cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'; }
threads_of() { # the effective train.threads of a tiny run under `launch ARGS`
    timeout 120 "$bin" launch "$@" train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" \
        --set data.val= --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=16 --set model.block_size=16 \
        --set train.batch_size=2 --set train.steps=1 --set log.peak_gflops=10 --set train.out_dir="$tmp/f" 2>&1 |
        sed -nE 's/^ *threads: *([0-9]+) .*/\1/p' | head -n 1
}
got=$(cpus_of -n 1 | sed -nE 's/.*nproc ([0-9]+) .*/\1/p')
[ "$got" = "$all" ] || fail "launch -n 1: the rank has $got CPUs, not every one of the $all"
t=$(threads_of -n 1)
[ "$t" = "$all" ] || fail "launch -n 1 train: train.threads '$t', not the rank's $all CPUs"
echo "launch -n 1: the rank on all $all CPUs, train.threads $t"
if [ "${c:-1}" -gt 1 ]; then
    one=$(cpus_of -n 1 --cores-per-rank 1 | sed -nE 's/.*nproc ([0-9]+) .*/\1/p')
    [ -n "$one" ] && [ "$one" -ge 1 ] && [ "$one" -lt "$all" ] ||
        fail "launch -n 1 --cores-per-rank 1: the rank has '$one' CPUs of $all, not one core's"
    t=$(threads_of -n 1 --cores-per-rank 1)
    [ "$t" = "$one" ] || fail "launch -n 1 --cores-per-rank 1 train: train.threads '$t', not the rank's $one CPUs"
    echo "launch -n 1 --cores-per-rank 1: the rank on $one of $all CPUs, train.threads $t"
fi
if [ "${c:-1}" -ge 4 ]; then
    out=$(cpus_of -n 2)
    [ "$(grep -c "nproc $((all / 2)) " <<<"$out")" -eq 2 ] && [ "$(grep -oE 'cpus .*' <<<"$out" | sort -u | wc -l)" -eq 2 ] ||
        fail "launch -n 2 on $c cores: not half the CPUs each, apart: $out"
    echo "launch -n 2: $(grep -oE 'cpus .*' <<<"$out" | tr '\n' ' ')"
fi

e2e_finish "all passed"
