#!/usr/bin/env bash
# The host code's threads under ThreadSanitizer: `make tsan` builds
# build-tsan/ (CPU only, -fsanitize=thread; about 20 s), then
# tests/tsan.sh [BUILD] (tests/run.sh's fourth argument; about 40 s) runs the unit tests whose
# code has threads of its own (the output queue, the stall and storage
# watches, asynchronous checkpoints, the batch feed, progress, the
# communicators, ZeRO) and tiny GPT runs that start every thread a run has:
# loader workers, asynchronous checkpoints, TensorBoard, the profiler trace,
# a standard output whose reader goes away (| head), a SIGTERM mid-run, and
# `launch -n 2` under ddp and zero2 (the launcher's writer threads, the
# shared-memory all-reduce). Any report fails it.
# OpenMP: where the build has LLVM's OpenMP runtime (clang and libomp-dev:
# see the Makefile's tsan target), its Archer tool shows TSan the parallel
# regions' forks and barriers, so every run here uses 2 OpenMP threads, and
# the layers' unit tests (gradients, parity, optimizers, the models) and a
# 2-thread mlp, cnn and gpt run check the CPU engine's parallel loops too.
# A gcc build's libgomp is not instrumented: there OpenMP and OpenBLAS run
# one thread and those loops go unchecked (the script says so).
# Open MPI's start-up is suppressed (tests/tsan.supp). test_loader and
# test_tokens are left out: they raise SIGBUS on purpose (a file shortened
# under its mapping) inside memcpy, where TSan cannot hand the signal to the
# handler.
cd "$(dirname "$0")/.."
source tests/lib/e2e.sh "${1:-build-tsan}"
[ -x "$bin" ] || { echo "tsan: no $bin (make tsan builds it)"; exit 2; }
# ignore_noninstrumented_modules: libomp's own locking, which TSan cannot
# see into, is not reported as races (Archer tells it what they order)
export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 exitcode=66 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp"
if ldd "$bin" 2>/dev/null | grep -q 'libomp\.so'; then
    omp=2
    echo "OpenMP: LLVM's runtime with Archer; parallel regions checked on $omp threads"
else
    omp=1
    echo "OpenMP: libgomp (not instrumented); parallel regions run on one thread, unchecked (make tsan with clang and libomp-dev checks them)"
fi
export OMP_NUM_THREADS=$omp OMP_WAIT_POLICY=PASSIVE
# TSan's runtime refuses some kernels' address-space layouts at start
# ("unexpected memory mapping": a large vm.mmap_rnd_bits); that is the
# machine, not the code
probe=$("$bin" help 2>&1 >/dev/null)
case "$probe" in *"FATAL: ThreadSanitizer"*) e2e_skip "ThreadSanitizer cannot run here: ${probe%%$'\n'*}" ;; esac
e2e_tmpdir
t0=$SECONDS
check() { # name log rc [expected rc]
    local n=$1 log=$2 rc=$3 want=${4:-0} races s=$((SECONDS - t0))
    t0=$SECONDS
    races=$(grep -c "WARNING: ThreadSanitizer" "$log")
    if [ "$races" -gt 0 ] || [ "$rc" -ne "$want" ]; then
        fail "$n: exit $rc (want $want), $races ThreadSanitizer report(s)"
        grep -A30 "WARNING: ThreadSanitizer" "$log" | head -60
    else
        echo "ok   $n (${s}s)"
    fi
}
for t in test_outq test_watch test_checkpoint test_checkpointing test_feed test_progress test_comm test_sampler \
    test_tensorboard test_zero; do
    timeout 600 "$build/tests/$t" >"$tmp/$t.log" 2>&1
    check "$t" "$tmp/$t.log" $?
done
if [ "$omp" -gt 1 ]; then # the CPU engine's parallel loops, every layer's forward and backward
    for t in "$build"/tests/test_grad_* "$build"/tests/test_{blas,crc,model,optim,scaler,half,precision,parity}; do
        t=$(basename "$t")
        [ "${t%.d}" = "$t" ] || continue # make's dependency lists
        timeout 600 "$build/tests/$t" >"$tmp/$t.log" 2>&1
        check "$t ($omp threads)" "$tmp/$t.log" $?
    done
fi

source tests/lib/tiny_gpt.sh
run+=(--set log.every=1 --set train.checkpoint_async=true --set train.threads=$omp)
if [ "$omp" -gt 1 ]; then # whole steps of each model kind, 2 threads: data, layers, optimizer, evaluation
    base=(train --set train.steps=4 --set train.threads=$omp --set data.num_workers=1 --quiet)
    timeout 600 "$bin" "${base[@]}" --set model.type=mlp --set train.batch_size=64 --set data.val= \
        --set train.out_dir="$tmp/m1" >"$tmp/m1.log" 2>&1
    check "train mlp ($omp threads)" "$tmp/m1.log" $?
    if e2e_have_fmnist; then
        timeout 600 "$bin" "${base[@]}" --set train.batch_size=32 --set train.eval_steps=4 --set train.out_dir="$tmp/c1" >"$tmp/c1.log" 2>&1
        check "train cnn with evaluation ($omp threads)" "$tmp/c1.log" $?
    else
        echo "skip train cnn: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
    fi
    timeout 600 "$bin" "${run[@]}" --set model.n_layer=2 --set model.n_embd=64 --set train.steps=6 \
        --set precision=bf16 --set train.activation_checkpointing=blocks --set train.micro_batch_size=2 \
        --set train.out_dir="$tmp/g1" >"$tmp/g1.log" 2>&1
    check "train gpt bf16, checkpointed blocks, accumulation ($omp threads)" "$tmp/g1.log" $?
fi

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
        timeout 600 "$bin" launch -n 2 "${run[@]}" --set train.threads=1 --set data.num_workers=1 --set train.steps=40 \
            --set train.checkpoint_every=20 --set dist.strategy=$strat --set train.out_dir="$tmp/l-$strat" \
            >"$tmp/l-$strat.log" 2>&1
        check "launch -n 2, $strat" "$tmp/l-$strat.log" $?
    done
else
    echo "skip launch -n 2: mpirun is missing"
fi
e2e_finish "no ThreadSanitizer report"
