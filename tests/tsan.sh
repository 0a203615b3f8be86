#!/usr/bin/env bash
# The host code's threads under ThreadSanitizer: `make tsan` builds
# build-tsan/ (CPU only, -fsanitize=thread; about 15 s), then
# tests/tsan.sh [BUILD] (tests/run.sh's fourth argument; about 12 s) runs the unit tests whose
# code has threads of its own (the output queue, the stall and storage
# watches, asynchronous checkpoints, the batch feed, progress, the
# communicators, ZeRO) and tiny GPT runs that start every thread a run has:
# loader workers, asynchronous checkpoints, TensorBoard, the profiler trace,
# a standard output whose reader goes away (| head), a SIGTERM mid-run, and
# `launch -n 2` under ddp and zero2 (the launcher's writer threads, the
# shared-memory all-reduce). Any report fails it. OpenMP and OpenBLAS run
# one thread (libgomp is not built with TSan); Open MPI's start-up is
# suppressed (tests/tsan.supp). test_loader and test_tokens are left out:
# they raise SIGBUS on purpose (a file shortened under its mapping) inside
# memcpy, where TSan cannot hand the signal to the handler.
cd "$(dirname "$0")/.."
source tests/lib/e2e.sh "${1:-build-tsan}"
[ -x "$bin" ] || { echo "tsan: no $bin (make tsan builds it)"; exit 2; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 exitcode=66 suppressions=$PWD/tests/tsan.supp"
# TSan's runtime refuses some kernels' address-space layouts at start
# ("unexpected memory mapping": a large vm.mmap_rnd_bits); that is the
# machine, not the code
probe=$("$bin" help 2>&1 >/dev/null)
case "$probe" in *"FATAL: ThreadSanitizer"*) e2e_skip "ThreadSanitizer cannot run here: ${probe%%$'\n'*}" ;; esac
e2e_tmpdir
check() { # name log rc [expected rc]
    local n=$1 log=$2 rc=$3 want=${4:-0} races
    races=$(grep -c "WARNING: ThreadSanitizer" "$log")
    if [ "$races" -gt 0 ] || [ "$rc" -ne "$want" ]; then
        fail "$n: exit $rc (want $want), $races ThreadSanitizer report(s)"
        grep -A30 "WARNING: ThreadSanitizer" "$log" | head -60
    else
        echo "ok   $n"
    fi
}
for t in test_outq test_watch test_checkpoint test_checkpointing test_feed test_progress test_comm test_sampler \
    test_tensorboard test_zero; do
    timeout 600 "$build/tests/$t" >"$tmp/$t.log" 2>&1
    check "$t" "$tmp/$t.log" $?
done

source tests/lib/tiny_gpt.sh
run+=(--set log.every=1 --set train.checkpoint_async=true)

timeout 600 "$bin" "${run[@]}" --set data.num_workers=2 --set train.steps=200 --set train.checkpoint_every=50 \
    --set log.tensorboard=true --profile 10-12 --set train.out_dir="$tmp/o1" >"$tmp/o1.log" 2>&1
check "train: loader workers, async checkpoints, tensorboard, trace" "$tmp/o1.log" $?

timeout 600 "$bin" "${run[@]}" --set data.num_workers=2 --set train.steps=300 \
    --set train.out_dir="$tmp/o2" 2>"$tmp/o2.log" | head -n 3 >/dev/null
check "train | head -n 3" "$tmp/o2.log" "${PIPESTATUS[0]}"

"$bin" "${run[@]}" --set data.num_workers=1 --set train.steps=1000000 --set train.checkpoint_every=20 \
    --set train.out_dir="$tmp/o3" >"$tmp/o3.log" 2>&1 &
pid=$!
e2e_wait_ckpt $pid "$tmp/o3"
kill -TERM $pid 2>/dev/null
wait $pid
check "train, SIGTERM after a checkpoint" "$tmp/o3.log" $? 143

if command -v mpirun >/dev/null; then
    for strat in ddp zero2; do
        timeout 600 "$bin" launch -n 2 "${run[@]}" --set data.num_workers=1 --set train.steps=40 \
            --set train.checkpoint_every=20 --set dist.strategy=$strat --set train.out_dir="$tmp/l-$strat" \
            >"$tmp/l-$strat.log" 2>&1
        check "launch -n 2, $strat" "$tmp/l-$strat.log" $?
    done
else
    echo "skip launch -n 2: mpirun is missing"
fi
e2e_finish "no ThreadSanitizer report"
