#!/usr/bin/env bash
# A checkpoint that takes longer to write than dist.timeout_s (a slow or
# loaded filesystem) must not end a multi-rank run: the ranks wait for it
# under train.checkpoint_timeout_s instead, and a write slower than that ends
# the job with a message naming it. Under real mpirun, 2 ranks, a tiny gpt,
# dist.timeout_s=T; the slow disk is tests/lib/slowfs.c (LD_PRELOAD): each
# fsync of model.safetensors returns D ms late (D > T).
# (a) train.checkpoint_timeout_s=30, DDP (rank 0 writes; rank 1 waits): a checkpoint after step 2 (mid-run:
#     rank 1 used to wait for it in step 3's gradient all-reduce) and one at
#     the end: exit 0, replicas identical, both checkpoints verified by a
#     resume of the last one.
# (b) zero1 (every rank writes its shard, rank 0 the model): exit 0.
# (c) train.checkpoint_timeout_s auto (T + 1 s per 10 MB: just over T for
#     this model, below D): the job ends (non-zero), and the watchdog's
#     message names the checkpoint wait, its limit and train.checkpoint_timeout_s.
# tests/run.sh: long (one of the suite's longest: started before the others)
# tests/run.sh: light (it mostly waits: on rank 0's slow writes, its ranks sleeping between polls)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
command -v cc >/dev/null || e2e_skip "no C compiler for the slow-filesystem shim (apt-get install gcc)"
e2e_tmpdir
e2e_mpi 90
export OMP_WAIT_POLICY=PASSIVE
T=2
D=3500
cc -shared -fPIC -O2 -o "$tmp/slowfs.so" tests/lib/slowfs.c -ldl || { echo "FAIL: cannot build the shim"; exit 1; }

for i in $(seq 1 300); do printf 'line %010d\n' $((i * 7919 % 100003)); done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
gpt=(--set model.type=gpt --set data.type=tokens --set data.val= --set model.n_layer=1 --set model.n_head=2
     --set model.n_embd=16 --set model.block_size=16 --set train.threads=1 --set data.num_workers=0
     --set data.train="$tmp/t.tokens" --set train.batch_size=8 --set dist.timeout_s=$T --set optim.lr=1e-3
     --set log.progress=off --json --quiet)
slow=(-x LD_PRELOAD="$tmp/slowfs.so" -x ST_SLOWFS_MATCH=model.safetensors -x ST_SLOWFS_MS=$D)

# run NAME ARGS...: 2 ranks on the slow disk; output in $tmp/NAME.{json,err}, exit status in rc.
run() {
    local name=$1
    shift
    local t0=$SECONDS
    "${mpi[@]}" "${slow[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/$name" "$@" \
        >"$tmp/$name.json" 2>"$tmp/$name.err"
    rc=$?
    echo "--- $name: exit $rc in $((SECONDS - t0)) s"
}
# json_ok NAME: rank 0's --json says 3 steps and identical replicas.
json_ok() {
    /usr/bin/python3 - "$tmp/$1.json" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
print("steps", r["steps"], "replicas_identical", r.get("replicas_identical"))
sys.exit(0 if r["steps"] == 3 and r.get("replicas_identical") is True else 1)
PY
}

run ddp --set train.steps=3 --set train.checkpoint_every=2 --set train.checkpoint_timeout_s=30
[ "$rc" -eq 0 ] || fail "ddp: a slow checkpoint ended the run: $(tail -n 5 "$tmp/ddp.err")"
json_ok ddp || fail "ddp: the run's summary"
for s in 2 3; do [ -f "$tmp/ddp/ckpt/step-$s/state.json" ] || fail "ddp: no checkpoint step-$s"; done
# The final checkpoint is whole: a resume to 5 steps reads it (at full speed).
"${mpi[@]}" -np 2 "$bin" train "${gpt[@]}" --set train.out_dir="$tmp/ddp" --set train.steps=5 --resume auto \
    >"$tmp/resume.json" 2>"$tmp/resume.err" || fail "resume from the slow run's checkpoint: $(tail -n 3 "$tmp/resume.err")"

run zero1 --set train.steps=3 --set dist.strategy=zero1 --set train.checkpoint_timeout_s=30
[ "$rc" -eq 0 ] || fail "zero1: a slow checkpoint ended the run: $(tail -n 5 "$tmp/zero1.err")"
json_ok zero1 || fail "zero1: the run's summary"
[ -f "$tmp/zero1/ckpt/step-3/optim-rank1.safetensors" ] || fail "zero1: no shard of rank 1"

# auto: T plus 1 s per 10 MB, for this checkpoint of a few kB just over T.
run short --set train.steps=3 --set train.checkpoint_every=2
[ "$rc" -ne 0 ] || fail "short: a checkpoint slower than its limit did not end the run"
grep -qE "collective timed out: .*'checkpoint'.* \(its limit: $T\.0[0-9]* s, train.checkpoint_timeout_s\)" \
    "$tmp/short.err" || fail "short: no message naming the checkpoint wait and its limit: $(head -n 5 "$tmp/short.err")"
grep -q "raise train.checkpoint_timeout_s" "$tmp/short.err" ||
    fail "short: the message does not name train.checkpoint_timeout_s: $(head -n 5 "$tmp/short.err")"
[ ! -e "$tmp/short/ckpt/latest" ] || fail "short: a checkpoint was pointed at as latest"
e2e_finish "slow checkpoint writes wait under train.checkpoint_timeout_s (T=$T s, each write $D ms late)"
