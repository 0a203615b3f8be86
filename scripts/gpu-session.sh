#!/usr/bin/env bash
# One GPU session on a lent machine (the device tool's `run`), from a fresh
# checkout: probe the machine, unpack the build dependencies carried in
# .debs/ (scripts/gpu-fetch-debs.sh fetches them on the development machine;
# that machine has no registry), build with CUDA, time each layer's kernel
# variants against its default (bench/bench_cuda_kernels: seconds, first,
# in every mode), run every tests/test_cuda_*
# (test_cuda_nccl among them: NCCL from the toolkit or from pip's
# nvidia-nccl package, NCCL_HOME below), tests/test_cudnn_graphs (cuDNN's
# attention graphs against that machine's cuDNN) and tests/test_train_device (then
# again under compute-sanitizer, last and while the budget lasts, small
# cases only: racecheck and synccheck on test_cuda_layers_b (the flash
# kernels' shared memory and barriers), then memcheck on each), the default training run on the GPU in fp32 and bf16
# and `scaletrain check` (its gpu ddp line trains on the GPU against a CPU
# rank), and print a summary table last. Logs go to $OUT (the
# device tool brings back at most 8 files): session.log (everything, in order), summary.txt,
# logs.tar.gz (one log per step), and the benchmark's gpu_bench.md, gpt2_trace.json and gpt2_trace.md, sample_gpu.md (scaletrain sample against PyTorch on the GPU)
# and ncu_kernels.txt (Nsight Compute's counters for the step's memory-bound
# kernels, bench/ncu_kernels.py, after the sampling run while 120 s are
# left; NCU=off leaves it out): eight files, the most that comes back.
#
# Every step runs under `timeout`, its failure is reported and the session
# goes on where that makes sense; the whole session keeps inside BUDGET_S so
# that the device tool's 10-minute limit never cuts off the summary.
#
# Last, when the build finished: the default training run on the GPU
# (`train --set train.device=cuda --set train.steps=100 --json`, precision
# auto: bf16), then the same in fp32, their JSON lines printed in the summary. It reads Fashion-MNIST from
# /usr/share/datasets/fashion-mnist, or from .data/fashion-mnist when that
# is carried (copy the four .gz files there, about 30 MiB).
#
# Then the benchmark, bench/gpu_vs_torch.py (GPT-2 124M, cnn and mlp against
# PyTorch on the same GPU; about 3 minutes, torch.compile included; with
# BENCH_VARIANTS, by default --candidates, --fused-bias-grad,
# --matmul-tune, --kernel-variants, --profile, --flash-attention, --gelu-layer, --offload,
# --selective and --plain-head, run in that order (gpu_vs_torch.py's) while
# the budget lasts: gpt2 again with every candidate for a default at once
# (model.fused_bias_grad=on, model.matmul_tune=on and
# model.kernel_variants=all: what adopting them gives), with each of the
# three alone (the bias gradients in the dW products' epilogues; each
# product's cuBLASLt algorithm timed; the kernel variants: the same bits,
# another speed),
# with the profiler trace (where the step went on the GPU, per stream and
# layer kind: gpt2_trace.json and gpt2_trace.md beside gpu_bench.md,
# bench/trace_summary.py), with model.attention_kernel=flash (the flash
# kernels against cuDNN's fused attention), with model.fused_gelu=off (GELU
# as its own kernels: what the epilogue fusion saves), with optim.offload,
# with selective activation checkpointing and with model.fused_head=off
# (the logits kept), each against its run without, its note with both
# MFUs), with the
# `python3` that imports torch; its table goes into summary.txt and
# gpu_bench.md. GPU_BENCH says when: auto (the default) runs it after the
# tests when at least BENCH_MIN_S (200) seconds of the budget are left, and
# skips it saying so otherwise; only builds scaletrain and runs the benchmark
# alone (no tests: a session for the figures); off never runs it.
#
# On the development machine:  scripts/gpu-fetch-debs.sh
#   (and for the training run: mkdir -p .data && cp -r /usr/share/datasets/fashion-mnist .data/)
# Device tool:  run(command="bash scripts/gpu-session.sh", carry=[".debs", ".data", ".tools/cudnn-frontend"], timeout_s=600)
#   the benchmark alone:  run(command="GPU_BENCH=only bash scripts/gpu-session.sh", carry=[".debs", ".tools/cudnn-frontend"], timeout_s=600)
# Locally (no GPU: the CUDA tests skip): JOBS=1 BUILD=build-gpu OUT=/tmp/gs scripts/gpu-session.sh
# Environment: OUT (default ./gpu-out), BUILD (build), JOBS (16), BUDGET_S
# (560), DEPS (/tmp/st-deps: where .debs/ is unpacked), CP_SEED (random
# inputs of the parity tests; default: the clock, printed by each test),
# GPU_BENCH (auto | only | off), MEMCHECK (auto | off), NCU (auto | off), NCU_ARGS (more options for
# bench/ncu_kernels.py, e.g. "--set model.kernel_variants=all"), BENCH_MIN_S (200), BENCH_ARGS (more
# options for bench/gpu_vs_torch.py, e.g. "--models gpt2 --steps 20"), BENCH_VARIANTS
# (the gpt2 variants it runs, in this order while the budget lasts; default
# "--candidates --fused-bias-grad --matmul-tune --kernel-variants --profile --flash-attention --gelu-layer --offload --selective --plain-head").
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-560}
DEPS=${DEPS:-/tmp/st-deps}
GPU_BENCH=${GPU_BENCH:-auto}
BENCH_MIN_S=${BENCH_MIN_S:-200}
MEMCHECK=${MEMCHECK:-auto}
NCU=${NCU:-auto}
NCU_ARGS=${NCU_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
BENCH_VARIANTS=${BENCH_VARIANTS:---candidates --fused-bias-grad --matmul-tune --kernel-variants --profile --flash-attention --gelu-layer --offload --selective --plain-head}
case $GPU_BENCH in auto | only | off) ;; *) echo "GPU_BENCH=$GPU_BENCH: use auto, only or off" >&2; exit 2 ;; esac
case $NCU in auto | off) ;; *) echo "NCU=$NCU: use auto or off" >&2; exit 2 ;; esac
mkdir -p "$OUT"
LOGDIR=$(mktemp -d /tmp/gpu-session.XXXXXX)
SESSION_LOG=$OUT/session.log
: >"$SESSION_LOG"
START=$SECONDS
rows=()   # summary rows: "name|result|seconds"
failed=0

say() { echo "$*" | tee -a "$SESSION_LOG"; }

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with a timeout clipped to the
# budget left, logs to $LOGDIR/NAME.log and the session log; returns its status.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - (SECONDS - START) - 15))
    ((limit > left)) && limit=$left
    if ((limit < 5)); then
        rows+=("$name|NOT RUN (out of time)|0")
        say "== $name: not run, the session's budget of ${BUDGET_S}s is spent"
        failed=$((failed + 1))
        return 124
    fi
    say "== $name (timeout ${limit}s): $*"
    local t0=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@" >"$LOGDIR/$name.log" 2>&1 </dev/null
    rc=$?
    local dt=$((SECONDS - t0)) result
    case $rc in
        0) result=ok ;;
        77) result=SKIP ;;
        124 | 137) result="TIMEOUT after ${limit}s"; failed=$((failed + 1)) ;;
        *) result="FAIL (exit $rc)"; failed=$((failed + 1)) ;;
    esac
    cat "$LOGDIR/$name.log" >>"$SESSION_LOG"
    tail -n 25 "$LOGDIR/$name.log" | sed 's/^/    /'
    rows+=("$name|$result|$dt")
    say "== $name: $result (${dt}s)"
    return $rc
}

probe() {
    echo "host $(hostname), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
    uname -a
    grep PRETTY_NAME /etc/os-release || true
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || echo "nvidia-smi failed"
    command -v nvcc && nvcc --version | tail -2 || echo "no nvcc on PATH"
    ls -d /usr/local/cuda* 2>/dev/null || echo "no /usr/local/cuda"
    gcc --version | head -1
    for h in cblas.h yaml.h cjson/cJSON.h zlib.h mpi.h; do
        echo "#include <$h>" | gcc -E -x c - >/dev/null 2>&1 && echo "system has $h" || echo "system lacks $h"
    done
    command -v mpicc || echo "no mpicc on PATH"
    git log -1 --format='commit %H %s' 2>/dev/null || true
}

# Unpack every carried .deb into $DEPS (never into /), then point absolute
# symbolic links (e.g. libz.so -> /lib/...) into the prefix.
unpack_debs() {
    ls .debs/*.deb >/dev/null 2>&1 || {
        echo "no .debs/*.deb: run scripts/gpu-fetch-debs.sh on the development machine and carry .debs"
        return 1
    }
    # the packages must be this machine's architecture (a GH200 is arm64)
    local arch
    case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
    ls .debs/*_"$arch".deb >/dev/null 2>&1 || {
        echo "the .debs are for $(ls .debs/*.deb | sed -E 's/.*_([a-z0-9]+)\.deb$/\1/' | grep -vx all | sort -u | tr '\n' ' ')and this machine is $arch:" \
            "run ARCH=$arch scripts/gpu-fetch-debs.sh on the development machine"
        return 1
    }
    rm -rf "$DEPS" && mkdir -p "$DEPS" || return 1
    for f in .debs/*.deb; do
        if command -v dpkg >/dev/null; then
            dpkg -x "$f" "$DEPS" || { echo "dpkg -x $f failed"; return 1; }
        else # a .deb is an ar archive holding data.tar.*
            (d=$(mktemp -d) && cd "$d" && ar x "$OLDPWD/$f" && tar -xf data.tar.* -C "$DEPS" && rm -rf "$d") ||
                { echo "unpacking $f with ar and tar failed"; return 1; }
        fi
    done
    find "$DEPS" -type l | while read -r l; do
        t=$(readlink "$l")
        case $t in /*) ln -sfn "$DEPS$t" "$l" ;; esac
    done
    echo "unpacked $(ls .debs/*.deb | wc -l) packages into $DEPS"
    ls "$DEPS/usr/lib/$MULTIARCH/openblas-openmp" "$DEPS/usr/include" | head -30
}

# the multiarch folder names of this machine (x86_64-linux-gnu, aarch64-linux-gnu), as the Makefile finds them
MULTIARCH=$(gcc -print-multiarch 2>/dev/null)
[ -n "$MULTIARCH" ] || MULTIARCH=$(uname -m)-linux-gnu
export DEPS MULTIARCH
export -f probe unpack_debs # `timeout` runs programs: the steps below call these through bash -c

say "scaletrain GPU session: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${BUDGET_S}s, build $BUILD, -j$JOBS"
step probe 60 bash -c probe
# WERROR=: another compiler's new warnings must not stop the GPU tests (CI
# keeps them errors); they are in the build log.
make_args=(-j"$JOBS" BUILD="$BUILD" CUDA=1 WERROR=)
# The toolkit: /usr/local/cuda, else wherever the nvcc on PATH lives.
if [ ! -x /usr/local/cuda/bin/nvcc ] && command -v nvcc >/dev/null; then
    cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    say "   nvcc is $(command -v nvcc): building with CUDA_HOME=$cuda_home"
    make_args+=(CUDA_HOME="$cuda_home")
fi
# NCCL: the toolkit's when it has nccl.h, else pip's nvidia-nccl package
# (include/ and lib/libnccl.so.2), else none (NCCL=0: test_cuda_nccl skips).
if [ ! -f "${cuda_home:-/usr/local/cuda}/include/nccl.h" ]; then
    nccl_home=$(python3 -c 'import nvidia.nccl as n, os; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null)
    if [ -n "$nccl_home" ] && [ -f "$nccl_home/include/nccl.h" ]; then
        say "   no nccl.h in the toolkit: NCCL from pip, NCCL_HOME=$nccl_home"
        make_args+=(NCCL_HOME="$nccl_home")
        export LD_LIBRARY_PATH="$nccl_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        say "   no nccl.h (neither the toolkit nor pip's nvidia.nccl): building with NCCL=0"
        make_args+=(NCCL=0)
    fi
fi
# cuDNN (model.attention_kernel=cudnn, src/cuda/attention_cudnn.cpp): the
# toolkit's when it has cudnn.h, else pip's nvidia-cudnn package (the folder
# under site-packages/nvidia holding include/cudnn.h), with cudnn-frontend's
# headers carried in .tools/cudnn-frontend (scripts/deps.sh fetches them on
# the development machine); without either, CUDNN=0 and the cuDNN cases and
# benchmark variant say it was left out.
if [ ! -f .tools/cudnn-frontend/include/cudnn_frontend.h ]; then
    say "   no .tools/cudnn-frontend (carry it: scripts/deps.sh fetches it): building without cuDNN attention"
elif [ ! -f "${cuda_home:-/usr/local/cuda}/include/cudnn.h" ]; then
    cudnn_home=$(python3 -c 'import glob, os, nvidia
print(next((os.path.dirname(os.path.dirname(h)) for d in nvidia.__path__
            for h in glob.glob(os.path.join(d, "**", "include", "cudnn.h"), recursive=True)), ""))' 2>/dev/null)
    if [ -n "$cudnn_home" ]; then
        say "   no cudnn.h in the toolkit: cuDNN from pip, CUDNN_HOME=$cudnn_home"
        make_args+=(CUDNN_HOME="$cudnn_home")
        export LD_LIBRARY_PATH="$cudnn_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        say "   no cudnn.h (neither the toolkit nor pip's nvidia packages): building without cuDNN attention"
    fi
else
    say "   cuDNN attention: the toolkit's cuDNN, cudnn-frontend from .tools/cudnn-frontend"
fi
# The parity tests compare fp32 with fp32: no environment-forced TF32.
unset NVIDIA_TF32_OVERRIDE
if step unpack-debs 120 bash -c unpack_debs; then
    make_args+=(DEPS_PREFIX="$DEPS")
    export LD_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH:$DEPS/lib/$MULTIARCH:$DEPS/usr/lib/$MULTIARCH/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPAL_PREFIX="$DEPS/usr" # OpenMPI's tools and plugins, relocated
else
    say "   building against the system's libraries instead"
fi
cuda_tests() { # the CUDA test programs of build folder $1 (and train.device's choice, which passes anywhere)
    local t
    for t in tests/test_cuda_*.c tests/test_cudnn_graphs.c tests/test_train_device.c; do [ -f "$t" ] && echo "$1/tests/$(basename "$t" .c)"; done
}
# The library and the CUDA tests first (what this session is for), then the
# rest of the build if time allows. If that build fails, try once more
# without MPI and cuDNN (the CUDA tests need neither) in a folder of its own, since
# make does not track flags.
# GPU_BENCH=only: scaletrain alone, for the benchmark.
# (and bench/bench_cuda_kernels either way: kernel variants timed, seconds)
first_targets() {
    if [ "$GPU_BENCH" = only ]; then echo "$1/scaletrain $1/bench/bench_cuda_kernels"; else
        echo "$1/libscaletrain.a $1/bench/bench_cuda_kernels $(cuda_tests "$1")"; fi
}
# The benchmark (bench/gpu_vs_torch.py) with the build in folder $1, inside
# what is left of the budget; PyTorch must be importable by python3.
gpu_bench() {
    local left=$((BUDGET_S - (SECONDS - START) - 30))
    if ! python3 -c 'import torch' >/dev/null 2>&1; then
        rows+=("gpu-bench|SKIP (python3 has no torch)|0")
        say "   python3 cannot import torch: the benchmark is left out"
    elif [ "$GPU_BENCH" = auto ] && ((left < BENCH_MIN_S)); then
        rows+=("gpu-bench|SKIP (${left}s left)|0")
        say "   ${left}s of the budget left, the benchmark needs ${BENCH_MIN_S}s: left out (GPU_BENCH=only runs it alone)"
    else
        # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
        step gpu-bench "$left" python3 bench/gpu_vs_torch.py --build "$1" --budget $((left - 10)) \
            --out "$OUT/gpu_bench.md" $BENCH_VARIANTS $BENCH_ARGS
    fi
}
# Nsight Compute's counters for the step's own memory-bound kernels
# (bench/ncu_kernels.py: one GPT-2 step, averaged per kernel) into
# ncu_kernels.txt, with the build in folder $1, when NCU=auto and at least
# 120 s of the budget are left.
ncu_kernels() {
    local left=$((BUDGET_S - (SECONDS - START) - 20))
    if [ "$NCU" = off ]; then
        say "   NCU=off: the ncu profile is left out"
    elif ((left < 120)); then
        rows+=("ncu-kernels|SKIP (${left}s left)|0")
        say "   ${left}s of the budget left, the ncu profile needs 120s: left out"
    else
        # shellcheck disable=SC2086 # NCU_ARGS: more options, e.g. "--set model.kernel_variants=all"
        step ncu-kernels "$left" python3 bench/ncu_kernels.py --build "$1" --out "$OUT/ncu_kernels.txt" \
            --timeout $((left - 10)) $NCU_ARGS
    fi
}
built=
# what the build will use, and where it found it (NCCL, cuDNN: the Makefile's search)
say "$(make --no-print-directory config "${make_args[@]}" 2>&1 | sed 's/^/   /')"
# shellcheck disable=SC2046 # first_targets is a list of targets
if step build 420 make "${make_args[@]}" $(first_targets "$BUILD"); then
    built=$BUILD
elif step build-without-mpi-cudnn 300 make "${make_args[@]}" BUILD="$BUILD-nompi" MPI_CFLAGS=-DST_NO_MPI MPI_LIBS= \
    CUDNN=0 $(first_targets "$BUILD-nompi"); then
    built=$BUILD-nompi
    make_args+=(MPI_CFLAGS=-DST_NO_MPI MPI_LIBS= CUDNN=0)
fi
# each layer's kernel variants against its default, bit for bit and timed
[ -n "$built" ] && step bench-kernels 90 "$built/bench/bench_cuda_kernels"
if [ -n "$built" ] && [ "$GPU_BENCH" = only ]; then
    export OMP_WAIT_POLICY=PASSIVE
    gpu_bench "$built"
    ncu_kernels "$built"
elif [ -n "$built" ]; then
    export OMP_WAIT_POLICY=PASSIVE
    for t in $(cuda_tests "$built"); do
        step "$(basename "$t")" 150 "$t"
    done
    if step build-rest 240 make "${make_args[@]}" BUILD="$built" all; then
        train_args=(--set train.device=cuda --set train.steps=100 --set train.out_dir=/tmp/st-train-cuda --json)
        data_args=()
        fm=/usr/share/datasets/fashion-mnist
        if [ ! -f $fm/train-images-idx3-ubyte.gz ] && [ -f .data/fashion-mnist/train-images-idx3-ubyte.gz ]; then
            fm=$PWD/.data/fashion-mnist
            data_args=(--set data.train=$fm/train-images-idx3-ubyte.gz --set data.train_labels=$fm/train-labels-idx1-ubyte.gz
                       --set data.val=$fm/t10k-images-idx3-ubyte.gz --set data.val_labels=$fm/t10k-labels-idx1-ubyte.gz)
            train_args+=("${data_args[@]}")
        fi
        if [ -f $fm/train-images-idx3-ubyte.gz ]; then
            step train-cuda 120 "$built/scaletrain" train "${train_args[@]}"
            step train-cuda-fp32 90 "$built/scaletrain" train "${train_args[@]}" --set precision=fp32 \
                --set train.out_dir=/tmp/st-train-cuda-fp32
        else
            rows+=("train-cuda|NOT RUN (no Fashion-MNIST)|0")
            say "   no Fashion-MNIST (carry .data/fashion-mnist): the training run is left out"
        fi
        [ "$GPU_BENCH" = auto ] && gpu_bench "$built"
        # the readiness check: its gpu ddp line trains on the GPU against a CPU rank (mpirun needed)
        [ -f $fm/train-images-idx3-ubyte.gz ] &&
            step check 120 "$built/scaletrain" check "${data_args[@]}" --set train.out_dir=/tmp/st-check
        # a real kernel fault (tests/lib/fault_cublaslt.c): the run ends naming it, and resumes to the same bytes
        step gpu-fault 150 bash tests/e2e/gpu_fault.sh "$built"
        # cuDNN that loads but refuses its handle (tests/lib/refuse_cudnn.c): the flash kernels run instead
        step gpu-cudnn-refused 90 bash tests/e2e/gpu_cudnn_refused.sh "$built"
        # `scaletrain sample` on the GPU (its cache there, each token's step a replayed CUDA
        # graph, and with --no-graph) against PyTorch's loops on it, GPT-2 124M's shape with
        # random weights; into sample_gpu.md
        if python3 -c 'import torch' >/dev/null 2>&1; then
            step sample-gpu 120 python3 bench/sample_vs_torch.py --build "$built" --model gpt2 --device cuda \
                --threads 1 --tokens 200 --repeats 2 --out "$OUT/sample_gpu.md"
        fi
        ncu_kernels "$built"
    fi
    # Out-of-bounds and misaligned accesses, on the small cases (CP_SMALL),
    # last and only while at least 60 s of the budget are left (memcheck
    # runs kernels many times slower; the figures come first).
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    if [ "$MEMCHECK" = off ]; then
        say "   MEMCHECK=off: the memcheck runs are left out"
    elif [ -z "$sanitizer" ]; then
        say "   no compute-sanitizer: the memcheck runs are left out"
    else
        # shared-memory races and barrier misuse where the kernels share
        # memory most: the flash attention cases (the emulator's adversary
        # checks the same on the CPU, by chance; racecheck by instrumentation)
        for tool in racecheck synccheck; do
            if ((BUDGET_S - (SECONDS - START) < 60)); then
                rows+=("$tool-test_cuda_layers_b|not run (budget)|0")
                continue
            fi
            # (cuDNN's kernels are its own, and their asynchronous copies read as races to these tools)
            step "$tool-test_cuda_layers_b" 120 env CP_SMALL=1 CP_NO_CUDNN=1 "$sanitizer" --tool $tool --error-exitcode 99 \
                "$built/tests/test_cuda_layers_b"
        done
        for t in $(cuda_tests "$built"); do
            # (NCCL's kernels are its own, and it runs badly under memcheck;
            # test_cuda_libs launches nothing, which compute-sanitizer calls an error)
            case $(basename "$t") in test_cuda_nccl | test_cuda_libs) continue ;; esac
            if ((BUDGET_S - (SECONDS - START) < 60)); then
                rows+=("memcheck-$(basename "$t")|not run (budget)|0")
                continue
            fi
            step "memcheck-$(basename "$t")" 120 env CP_SMALL=1 "$sanitizer" --tool memcheck --leak-check no \
                --error-exitcode 99 "$t"
        done
    fi
else
    say "   the build failed: no test was run (see the build logs above)"
fi

# Summary: the last thing printed (the device tool returns the output's tail).
{
    echo
    echo "== summary ($(date -u '+%H:%M:%S UTC'), $((SECONDS - START))s of ${BUDGET_S}s)"
    printf '%-28s %-28s %6s\n' step result seconds
    for r in "${rows[@]}"; do
        IFS='|' read -r n res dt <<<"$r"
        printf '%-28s %-28s %6s\n' "$n" "$res" "$dt"
    done
    grep -h "^FAIL\|^ok  \|CP_SEED\|^losses:\|^device:\|elements differ\|weights differ\|on the device, \|^CUDA devices" \
        "$LOGDIR"/test_cuda_*.log "$LOGDIR"/test_train_device.log 2>/dev/null | head -100
    grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$LOGDIR"/memcheck-*.log "$LOGDIR"/racecheck-*.log \
        "$LOGDIR"/synccheck-*.log 2>/dev/null | sed "s|$LOGDIR/||"
    if [ -f "$LOGDIR/train-cuda.log" ]; then
        grep -h "^device:\|^done:" "$LOGDIR/train-cuda.log"
        echo "train --set train.device=cuda --set train.steps=100 --json (precision auto: bf16):"
        grep -h '^{' "$LOGDIR/train-cuda.log" | tail -n 1 | grep . || tail -n 3 "$LOGDIR/train-cuda.log"
    fi
    if [ -f "$LOGDIR/train-cuda-fp32.log" ]; then
        echo "the same with --set precision=fp32:"
        grep -h '^{' "$LOGDIR/train-cuda-fp32.log" | tail -n 1 | grep . || tail -n 3 "$LOGDIR/train-cuda-fp32.log"
    fi
    [ -f "$LOGDIR/gpu-fault.log" ] &&
        grep -h "^fault at product\|^  scaletrain: error\|^  (while\|^launch --max\|^FAIL\|^gpu_fault:" "$LOGDIR/gpu-fault.log"
    if [ -f "$LOGDIR/bench-kernels.log" ]; then
        echo "bench/bench_cuda_kernels (each kernel variant against its default):"
        grep -h "^layernorm\|^fused head\|^device:" "$LOGDIR/bench-kernels.log" || tail -n 3 "$LOGDIR/bench-kernels.log"
    fi
    if [ -f "$LOGDIR/ncu-kernels.log" ]; then # the figure lines it printed (the whole report: ncu_kernels.txt)
        echo "bench/ncu_kernels.py (Nsight Compute, one GPT-2 step, per kernel):"
        grep -v '^ncu ' "$LOGDIR/ncu-kernels.log" | tail -n 80
    fi
    if [ -f "$LOGDIR/gpu-bench.log" ]; then # its notes per model and its table (printed last)
        echo "bench/gpu_vs_torch.py (scaletrain against PyTorch on this GPU):"
        grep -h '^- [a-z0-9]*[: ]\|^|' "$LOGDIR/gpu-bench.log" | grep . || tail -n 5 "$LOGDIR/gpu-bench.log"
    fi
    echo "$failed step(s) failed"
} | tee "$OUT/summary.txt" | tee -a "$SESSION_LOG"
tar -czf "$OUT/logs.tar.gz" -C "$LOGDIR" . 2>/dev/null || true
rm -rf "$LOGDIR"
[ "$failed" -eq 0 ]
