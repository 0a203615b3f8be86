#!/usr/bin/env bash
# The store watch: storage that stops answering while a run reads or writes
# train.out_dir or weights outside a checkpoint's own writes (the slow file
# system of tests/lib/slowfs.c, LD_PRELOAD, with a delay of 11 days on the
# named file, as on a hung network file system) ends the process after
# train.checkpoint_timeout_s with a message naming the wait and the key,
# where it would wait without end. A tiny GPT (CPU, one rank, a checkpoint
# every 5 steps, train.checkpoint_timeout_s 1):
#  1. a metrics line (fflush of metrics.jsonl);
#  2. the final weights (fsync of out/model.safetensors' temporary file):
#     the step-20 checkpoint is whole, and `--resume auto` writes the
#     uninterrupted run's weights bit for bit;
#  3. --resume's read of the checkpoint (open of its model.safetensors);
#  4. --init's read of the weights;
#  5. standard output (its writer thread's write, core/outq.h): not a wait
#     of the run, which trains to its end and saves its weights, then gives
#     up on the write after train.checkpoint_timeout_s, saying how many
#     lines were not written;
#  6. standard output and error on the stalled storage (one output file of a
#     job): the same, the last message given up after 5 s;
#  7. standard error that takes no more bytes, and the run warns (a profile
#     of steps it does not run): the warning is given up after 5 s and the
#     run trains to its end, where the write would have held it for good.
# tests/run.sh: light (it mostly waits: on mpirun, or on the timeouts it provokes)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir memory # (tests/lib/e2e.sh: storage limits of 1 s)
source "$(dirname "$0")/../lib/slowfs.sh"
run+=(--set log.every=5)
timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    fail "uninterrupted: exit $?: $(tail -2 "$tmp/ref.log")"

# stalled NAME MATCH WHAT ARGS...: the run exits 1 with the watch's line for WHAT (a regex).
stalled() {
    local name=$1 match=$2 what=$3
    shift 3
    out=$(timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$match" ST_SLOWFS_MS=1000000000 "$bin" "$@" 2>&1)
    local rc=$?
    [ $rc -eq 1 ] || { fail "$name: exit $rc (want 1): $(tail -n 3 <<<"$out")"; return 1; }
    grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): $what has not finished after 1 s \(train\.checkpoint_timeout_s: 1 s\): the storage stopped answering" <<<"$out" ||
        { fail "$name: no message naming the wait and the key: $out"; return 1; }
    echo "$name: exit 1 after the 1 s wait, naming it"
}

o=$tmp/metrics
stalled "a metrics line" /metrics.jsonl "writing to $o/metrics\.jsonl" "${run[@]}" --set train.out_dir="$o"

o=$tmp/final
if stalled "the final weights" "$o/model.safetensors" "writing the weights to $o/model\.safetensors" \
    "${run[@]}" --set train.out_dir="$o"; then
    [ "$(cat "$o/ckpt/latest" 2>/dev/null)" = step-20 ] || fail "the final weights: step-20 is not the latest checkpoint"
    timeout 120 "$bin" "${run[@]}" --set train.out_dir="$o" --resume auto >"$o.log" 2>&1 ||
        fail "the final weights: resumed: exit $?: $(tail -2 "$o.log")"
    cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
        echo "the final weights: --resume auto wrote the uninterrupted run's weights bit for bit" ||
        fail "the final weights: resumed: other weights than the uninterrupted run's"
fi

o=$tmp/resume
cp -r "$tmp/ref" "$o"
stalled "the resume read" "$o/ckpt/step-20/model.safetensors" \
    "reading the checkpoint to resume from \(--resume auto\) in $o/ckpt" \
    "${run[@]}" --set train.out_dir="$o" --set train.steps=25 --resume auto

stalled "the --init read" "/ref/model.safetensors" "reading the weights $tmp/ref/model\.safetensors \(--init\)" \
    "${run[@]}" --set train.out_dir="$tmp/init" --init "$tmp/ref/model.safetensors"
# (The shim is given to scaletrain alone, through env: `timeout` under it
# would stall on its own standard output.)
# 5. Standard output (the progress lines, each logged step's) on the stalled
# storage: its writer thread waits, the run does not; it trains to its end,
# writes the uninterrupted run's weights, and says what was not written.
# (Before, the watch ended the run at the first line: exit 1, the steps
# since the last checkpoint lost.)
o=$tmp/stdout
mkdir -p "$o"
out=$(timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$o/stdout.log" ST_SLOWFS_MS=1000000000 "$bin" \
    "${run[@]}" --set train.out_dir="$o" 2>&1 >"$o/stdout.log"); rc=$?
[ $rc -eq 0 ] || fail "standard output: exit $rc (want 0): $(tail -n 3 <<<"$out")"
grep -qE "^scaletrain: rank 0 of 1 \(host [^,]+, pid [0-9]+\): [0-9]+ lines of standard output not written \(its write has not returned after 1 s: .*train\.checkpoint_timeout_s" <<<"$out" ||
    fail "standard output: no message saying what was not written: $out"
cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
    echo "standard output: trained to the end (the uninterrupted run's weights), $(grep -oE '[0-9]+ lines' <<<"$out") said not written" ||
    fail "standard output: other weights than the uninterrupted run's (or none)"

# 5b. The same with a long limit, and SIGTERM mid-run: the run saves its
# checkpoint and, asked to stop, waits 2 s at most on standard output (not
# train.checkpoint_timeout_s's 600).
o=$tmp/stdout_term
mkdir -p "$o"
t0=$SECONDS
timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$o/stdout.log" ST_SLOWFS_MS=1000000000 "$bin" \
    "${run[@]}" --set train.out_dir="$o" --set train.checkpoint_timeout_s=600 --set train.steps=1000000 \
    >"$o/stdout.log" 2>"$o/stderr.log" &
pid=$!
e2e_wait_ckpt $pid "$o" || fail "standard output stalled, SIGTERM: no checkpoint before the stop"
kill -TERM $pid
wait $pid; rc=$?
[ $rc -eq 143 ] && [ -s "$o/ckpt/latest" ] &&
    grep -qE "[0-9]+ lines of standard output not written \(its write has not returned after 2 s, and a signal asked the process to stop" "$o/stderr.log" &&
    echo "standard output stalled, SIGTERM: exit 143 after $((SECONDS - t0)) s with a checkpoint at $(cat "$o/ckpt/latest"), the output given up 2 s after the stop" ||
    fail "standard output stalled, SIGTERM: exit $rc (want 143): $(cat "$o/stderr.log")"

# 6. Standard error on it too (a job's one output file): the run's last
# message cannot be written either; it is given up after 5 s, and the run
# ends with its weights.
o=$tmp/stdout
t0=$SECONDS
rm -f "$o/model.safetensors"
timeout -k 10 120 env LD_PRELOAD="$tmp/slowfs.so" ST_SLOWFS_MATCH="$o/both.log" ST_SLOWFS_MS=1000000000 "$bin" \
    "${run[@]}" --set train.out_dir="$o" >"$o/both.log" 2>&1; rc=$?
[ $rc -eq 0 ] && cmp -s "$tmp/ref/model.safetensors" "$o/model.safetensors" &&
    echo "standard output and error stalled: exit 0 after $((SECONDS - t0)) s with the weights, the message given up" ||
    fail "standard output and error stalled: exit $rc (want 0, not the 124 of a hang), or other weights"

# 7. Standard error that takes no more bytes (a pipe nobody reads, filled:
# a real write that blocks, as the C library's own writes to a hung file
# do, which the shim does not see), and a warning to print.
o=$tmp/stderr
mkdir -p "$o"
mkfifo "$o/err.fifo"
exec 3<>"$o/err.fifo"
python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
try:
    while True: os.write(fd, b"x" * 4096)
except BlockingIOError:
    pass' "$o/err.fifo" || fail "cannot fill the pipe"
t0=$SECONDS
timeout -k 10 60 "$bin" "${run[@]}" --set train.out_dir="$o" --profile 100-101 --json >"$o/stdout.log" 2>"$o/err.fifo"; rc=$?
exec 3<&-
if [ $rc -eq 0 ] && grep -q '"steps":20' "$o/stdout.log"; then
    echo "standard error blocked, a warning to print: the run trained its 20 steps in $((SECONDS - t0)) s"
else
    fail "standard error blocked, a warning to print: exit $rc (want 0; 124: the warning held the run): $(tail -n 2 "$o/stdout.log")"
fi
e2e_finish "a read or write of train.out_dir or weights that never returns ends the run after train.checkpoint_timeout_s, naming it"
