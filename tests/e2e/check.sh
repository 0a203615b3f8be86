#!/usr/bin/env bash
# `scaletrain check` on this machine (issue 6):
# - with a config whose data and out_dir are good: every line ok (cpu, mpi,
#   the 2-rank ddp self-test through the launcher, data, out_dir, disk), the
#   all-reduce test ok or warn (its bandwidth is low when the machine is
#   busy) with every element right, cuda and nccl reported as not in this
#   build, "ready", exit 0;
# - a missing training file: its line FAILs naming the file with a fix, the
#   others still run, "not ready: 1 check failed", exit 1; data.train left
#   at Fashion-MNIST's file for tokens: the key to set;
# - an out_dir under a regular file: FAIL; a working directory the user
#   cannot search: FAIL, not a loop;
# - no mpirun on PATH: the mpi line FAILs with the package to install and the
#   self-test is skipped, exit 1.
source "$(dirname "$0")/../lib/e2e.sh"
bin=$(realpath "$build/scaletrain")
e2e_need_mpirun
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE TMPDIR=$tmp

for i in $(seq 1 100); do echo "line $i of a small text"; done >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null || fail "tokenize"
cfg=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.block_size=16)

out=$(timeout 300 "$bin" check "${cfg[@]}" --set train.out_dir="$tmp/out" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "ready machine: exit $rc"
for what in cpu mpi ddp data out_dir; do
    grep -qE "^ok +$what " <<<"$out" || fail "no ok line for $what"
done
grep -qE "^ok +cpu +.*[0-9]+ cores? \([0-9]+ threads, [0-9]+ usable here\), memory [0-9.]+ GiB, [0-9.]+ GiB available$" <<<"$out" ||
    fail "the cpu line does not give cores and memory"
grep -qE "^ok +ddp +2 ranks .*relative difference [0-9.e+-]+, tolerance" <<<"$out" || fail "the ddp line"
# ok, or warn when the shared machine is busy: the bandwidth is reported either way
grep -qE "^(ok|warn) +allreduce +2 ranks, 16 MiB: [0-9.]+ ms, bus bandwidth [0-9.]+ GB/s, every element right" \
    <<<"$out" || fail "the allreduce line"
# ... compared with what the planner assumes for the link (warn below 70% of it)
grep -qE "^ok +allreduce .*; [0-9]+% of the [0-9.]+ GB/s the planner assumes for shared memory \(cpu preset\)$|^warn +allreduce .*; [0-9]+% of the [0-9.]+ GB/s the planner assumes for shared memory \(cpu preset\), below 70%: plans for this machine are optimistic" \
    <<<"$out" || fail "the allreduce line does not compare with the planner's link"
grep -qE "^ok +data +$tmp/t.tokens: [0-9]+ samples of 16 tokens" <<<"$out" || fail "the data line"
grep -qE "^ok +out_dir +$tmp/out will be created in $tmp, which is writable" <<<"$out" || fail "the out_dir line"
grep -qE "^ok +disk +[0-9.]+ GiB free for train.out_dir; a checkpoint of this run takes [0-9.]+ MiB \(weights and optimizer state\), its final weights [0-9.]+ MiB$" <<<"$out" ||
    fail "the disk line: $(grep disk <<<"$out")"
grep -qE "^ok +memory +micro-batch [0-9]+ \(accumulating [0-9]+\) needs [0-9.]+ GiB per rank of [0-9.]+ GiB usable$" <<<"$out" ||
    fail "the memory line: $(grep memory <<<"$out")"
grep -qE "^(skip|ok) +cuda " <<<"$out" && grep -qE "^(skip|ok) +nccl " <<<"$out" || fail "no cuda/nccl lines"
# the cudnn line comes with a usable GPU only (tests/e2e/emu_check.sh)
! grep -qE "^skip +cuda " <<<"$out" || ! grep -qE "^[a-zA-Z]+ +cudnn " <<<"$out" || fail "a cudnn line without a GPU"
[ "$(tail -n 1 <<<"$out")" = "ready" ] || fail "the last line is not 'ready'"
[ -z "$(ls -A "$tmp" | grep scaletrain-check)" ] || fail "the self-test's temporary directory was left"

out=$(timeout 300 "$bin" check "${cfg[@]}" --set data.train="$tmp/missing.tokens" --set train.out_dir="$tmp/out" 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "missing data: exit $rc"
grep -qE "^FAIL +data +.*missing.tokens.*; fix: " <<<"$out" || fail "missing data: no FAIL line with a fix: $out"
grep -qE "^ok +ddp " <<<"$out" || fail "missing data: the other checks did not run"
[ "$(tail -n 1 <<<"$out")" = "not ready: 1 check failed" ] || fail "missing data: last line: $(tail -n 1 <<<"$out")"
echo "missing data: $(grep FAIL <<<"$out")"
# a run the planner knows does not fit this machine's memory: a failed check
# with the run's warning and hint, where check said ready and the run was killed
out=$(timeout 300 "$bin" check "${cfg[@]}" --set model.n_embd=8192 --set model.n_head=64 --set model.n_layer=48 \
    --set train.out_dir="$tmp/out" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -qE "^FAIL +memory +does not fit: [0-9.]+ GiB needed per rank,.*; hint: of the [0-9.]+ GiB: model states" <<<"$out" ||
    fail "a model past the memory: exit $rc, $(grep memory <<<"$out")"
echo "past the memory: $(grep memory <<<"$out" | cut -c1-150)"
# data.type tokens with data.train left at Fashion-MNIST's idx file: the key
# to set, not "install Fashion-MNIST" (before, the hint came from the path)
out=$(timeout 300 "$bin" check --set model.type=gpt --set data.type=tokens --set model.block_size=16 \
    --set data.val= --set train.out_dir="$tmp/out" 2>&1)
grep -qE "^FAIL +data +data.train \(/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, default\) is Fashion-MNIST's idx file but data.type \(tokens, --set\); set data.train to the token file$" <<<"$out" ||
    fail "data.train left at the default for tokens: $(grep data <<<"$out")"

touch "$tmp/plain"
out=$(timeout 300 "$bin" check "${cfg[@]}" --set train.out_dir="$tmp/plain/run" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qE "^FAIL +out_dir +.*plain is not a directory; fix: " <<<"$out" ||
    fail "out_dir under a file: exit $rc: $out"
echo "out_dir under a file: $(grep FAIL <<<"$out")"
# out_dir/ckpt a file: check and train both refuse it at once (train ran to
# its end, then had nowhere to save, and lost every step)
mkdir "$tmp/ckfile" && echo x >"$tmp/ckfile/ckpt"
want="train.out_dir $tmp/ckfile holds $tmp/ckfile/ckpt, which is a file, not a folder: the run's checkpoints go in a folder of that name. Move or remove it, or choose another train.out_dir"
out=$(timeout 300 "$bin" check "${cfg[@]}" --set train.out_dir="$tmp/ckfile" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qxF "FAIL  out_dir   $want" <<<"$out" || fail "out_dir/ckpt a file: check: exit $rc: $(grep out_dir <<<"$out")"
out=$(timeout 300 "$bin" train "${cfg[@]}" --set train.steps=50 --set train.out_dir="$tmp/ckfile" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qxF "scaletrain: error: $want (nothing was written)" <<<"$out" && ! grep -q "^step " <<<"$out" ||
    fail "out_dir/ckpt a file: train: exit $rc, or it trained: $(tail -n 2 <<<"$out")"
[ "$fails" -ne 0 ] || echo "out_dir/ckpt a file: check and train refuse it, naming it"

# a working directory this user cannot search (stat "." fails: it looped
# for ever looking above "."): FAIL naming it, at once. As another user
# than root, who can search any directory.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
    setpriv --reuid 65534 --regid 65534 --clear-groups "$bin" --help >/dev/null 2>&1; then
    mkdir "$tmp/sealed" && chmod 711 "$tmp"
    out=$(cd "$tmp/sealed" && chmod 000 . &&
          timeout 120 setpriv --reuid 65534 --regid 65534 --clear-groups "$bin" check 2>&1); rc=$?
    chmod 755 "$tmp/sealed"
    [ $rc -eq 1 ] && grep -qE "^FAIL +out_dir +train.out_dir runs/default cannot be created: runs/default cannot be looked at \(Permission denied\); fix: " <<<"$out" ||
        fail "an unsearchable working directory: exit $rc: $(grep out_dir <<<"$out")"
else
    echo "an unsearchable working directory: skipped: wants root, setpriv and $bin runnable by another user (its folders searchable)"
fi

mkdir "$tmp/nobin"
out=$(timeout 300 env PATH="$tmp/nobin" "$bin" check "${cfg[@]}" --set train.out_dir="$tmp/out" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "no mpirun: exit $rc"
grep -qE "^FAIL +mpi +mpirun is not on PATH; fix: apt-get install openmpi-bin" <<<"$out" || fail "no mpirun: $out"
grep -qE "^skip +ddp " <<<"$out" && grep -qE "^skip +allreduce " <<<"$out" ||
    fail "no mpirun: the self-test and the all-reduce test were not skipped"
echo "no mpirun: $(grep FAIL <<<"$out")"
# an mpirun that fails after 40 lines of its own: the FAIL lines quote its error, not its first
# 300 bytes (which they did, none of the error in them)
mkdir "$tmp/badmpi"
cat >"$tmp/badmpi/mpirun" <<'SH'
#!/bin/sh
case "$*" in *--version*) echo "mpirun (Open MPI) 4.1.4"; exit 0;; esac
i=0; while [ $i -lt 40 ]; do echo "  setting.$i: a value the run prints first"; i=$((i+1)); done
echo "mpirun: error: this test's mpirun fails here" >&2
exit 1
SH
chmod +x "$tmp/badmpi/mpirun"
out=$(timeout 300 env PATH="$tmp/badmpi:$PATH" "$bin" check "${cfg[@]}" --set train.out_dir="$tmp/out" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qE "^FAIL +ddp +.scaletrain launch -n 2 train. exited 1: mpirun: error: this test's mpirun fails here; fix: " <<<"$out" &&
    grep -qE "^FAIL +allreduce +2-rank all-reduce test exited 1: mpirun: error: this test's mpirun fails here; fix: " <<<"$out" ||
    fail "a failing mpirun: exit $rc: $(grep -E "^FAIL" <<<"$out")"

# What the run itself refuses, said by check (it said "ready"; no mpirun on PATH, to keep it short):
# - the data against the model: a vocabulary past model.vocab_size;
# - train.device cuda without a GPU (this machine has none; the build may have CUDA or not);
# - an out_dir holding an unfinished run: a warning (check does not know whether --resume is meant).
"$bin" train "${cfg[@]}" --set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set train.batch_size=4 \
    --set train.steps=4 --set train.checkpoint_every=2 --set train.out_dir="$tmp/unfinished" --quiet ||
    fail "the 4-step run"
rm -r "$tmp/unfinished/ckpt/step-4" && echo step-2 >"$tmp/unfinished/ckpt/latest"
out=$(timeout 300 env PATH="$tmp/nobin" "$bin" check "${cfg[@]}" --set model.vocab_size=100 --set train.device=cuda \
    --set train.out_dir="$tmp/unfinished" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "the run's refusals: exit $rc: $out"
grep -qE "^FAIL +data +model.vocab_size \(100, --set\) is smaller than the vocabulary of $tmp/t.tokens" <<<"$out" ||
    fail "the vocabulary past model.vocab_size is not a FAIL: $out"
grep -qE "^FAIL +cuda +train.device cuda, and .*; fix: use train.device: cpu \(or auto\)$" <<<"$out" ||
    fail "train.device cuda without a GPU is not a FAIL: $out"
grep -qE "^warn +out_dir +$tmp/unfinished is writable, and a new run there is refused: train.out_dir $tmp/unfinished holds an unfinished run: its latest good checkpoint, .*step-2, is at step 2 of 4\. Continue it with --resume auto" <<<"$out" ||
    fail "the unfinished run in out_dir is not warned of: $out"
echo "the run's refusals: $(grep -E '^(FAIL|warn) +(data|cuda|out_dir)' <<<"$out" | cut -c1-100 | tr '\n' '|')"
# train.device cpu: the GPUs are not checked (a broken one is not this run's to fail)
out=$(timeout 300 env PATH="$tmp/nobin" "$bin" check "${cfg[@]}" --set train.device=cpu --set train.out_dir="$tmp/out" 2>&1)
grep -qE "^skip +cuda +train.device cpu: training runs on the CPU \(the GPUs are not checked\)$" <<<"$out" ||
    fail "train.device cpu: the cuda line: $out"

e2e_finish "all passed"
