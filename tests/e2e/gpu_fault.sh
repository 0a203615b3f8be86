#!/usr/bin/env bash
# A real GPU that faults mid-run: the hardware's side of emu_device_fault.sh,
# whose emulated lost context follows the CUDA documentation. Here a real
# kernel reads an address no allocation holds: tests/lib/fault_cublaslt.c,
# built by the test and put first on LD_LIBRARY_PATH under cuBLASLt's file
# name, passes every call to the real cuBLASLt and gives its N-th matrix
# product an A operand at device address 256; the GPU's memory unit faults
# (Xid 31) and the CUDA context is lost, as after any kernel's bad access.
# A tiny GPT on one GPU in bf16, AdamW with clipping, asynchronous
# checkpoints every 4 of 20 steps:
#  1. the run through the shim without a fault counts its products and is
#     the reference;
#  2. faults at 3 points spread over those products: each run exits 1 in
#     time (no hang in the cleanup after the fault), its message says a
#     kernel faulted, names cuda:0 and --resume auto (and the Xids, where
#     the driver lets NVML report them: printed, not required, since some
#     systems refuse event registration to users), and `--resume auto`
#     ends with the reference's weights, byte for byte (a checkpoint
#     written from the lost device would not);
#  3. with mpirun: `scaletrain launch -n 1 --max-restarts 1`, the rank
#     faulting once (ST_FAULT_ONCE), restarts from the checkpoint and ends
#     with the reference's bytes.
# Skips, saying why, without a GPU (nvidia-smi) or in a build that does not
# load cuBLASLt by its file name (the emulator's, CUDA_LAZY=0, no CUDA).
# scripts/gpu-session.sh runs it on the lent GPU machine.
source "$(dirname "$0")/../lib/e2e.sh"
soname=$(grep -ao 'libcublasLt\.so\.[0-9]*' "$bin" 2>/dev/null | head -n 1)
[ -n "$soname" ] || e2e_skip "$bin does not load cuBLASLt by its file name (no CUDA, the emulator's build or CUDA_LAZY=0)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${gpus:-0}" -ge 1 ] || e2e_skip "no GPU (nvidia-smi lists none): the CUDA emulator's emu_device_fault.sh covers the rest"
# the real cuBLASLt: where the program's loader would find it
e2e_real_lib "$soname"
e2e_tmpdir
mkdir -p "$tmp/lt"
cc -shared -fPIC -O2 -Iinclude -Isrc -o "$tmp/lt/$soname" tests/lib/fault_cublaslt.c -ldl || fail "cannot build the shim"
export LD_LIBRARY_PATH="$tmp/lt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ST_FAULT_CUBLASLT=$real
echo "the shim passes to $real"
source tests/lib/tiny_gpt.sh
run+=(--set train.device=cuda --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4
      --set model.block_size=64 --set train.batch_size=8 --set precision=bf16 --set optim.type=adamw
      --set optim.lr=0.003 --set optim.grad_clip=1 --set train.steps=20 --set train.checkpoint_every=4
      --set train.checkpoint_async=true --set log.progress=off --json --quiet)
# (scaletrain's attention kernels: cuDNN's, auto's choice from sm_90, would load
# cuBLASLt by the same file name and call functions the shim does not pass on)
run+=(--set model.attention_kernel=flash)
# (cuBLASLt's heuristic's algorithms, untimed: the reference and the faulted
# runs are separate runs, which a timing could send to other algorithms, and
# the faulted run's products are counted against the reference's)
run+=(--set model.matmul_tune=off)

# 1. the reference, counting its products
ST_FAULT_MATMUL=1000000000 timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    fail "the run without a fault: $(tail -3 "$tmp/ref.log")"
n=$(sed -n 's/^fault_cublaslt: ST_FAULT_MATMUL=[0-9]*: no fault, \([0-9]*\) products ran$/\1/p' "$tmp/ref.log")
[ -n "$n" ] && [ "$n" -ge 100 ] || fail "the count of the run's products: '$n' ($(tail -2 "$tmp/ref.log"))"
[ "$fails" -eq 0 ] || e2e_finish
echo "the run without a fault: $n matrix products"

# 2. three faults
for i in 1 2 3; do
    k=$((${n:-0} * i / 4))
    d=$tmp/fault-$i
    t0=$SECONDS
    ST_FAULT_MATMUL=$k timeout 120 "$bin" "${run[@]}" --set train.out_dir="$d" >"$d.log" 2>&1
    rc=$? dt=$((SECONDS - t0))
    echo "fault at product $k of $n: exit $rc after ${dt}s, latest checkpoint $(cat "$d/ckpt/latest" 2>/dev/null || echo none)"
    echo "  $(grep -m1 'scaletrain: error' "$d.log" | cut -c1-400)"
    grep -o '(while it trained, the driver reported on this GPU: .*' "$d.log" | sed 's/^/  /'
    grep -q "^fault_cublaslt: product $k reads" "$d.log" || fail "fault at product $k: no fault was made"
    [ $rc -eq 1 ] || fail "fault at product $k: exit $rc, want 1 (124: the run hung after the fault): $(tail -2 "$d.log")"
    for w in "a kernel faulted" "cuda:0" "--resume auto continues from the latest checkpoint"; do
        grep -qF -- "$w" "$d.log" || fail "fault at product $k: no '$w' in: $(grep 'scaletrain:' "$d.log")"
    done
    timeout 120 "$bin" "${run[@]}" --set train.out_dir="$d" --resume auto >"$d-resumed.log" 2>&1 ||
        fail "fault at product $k: the resumed run: $(tail -2 "$d-resumed.log")"
    cmp -s "$tmp/ref/model.safetensors" "$d/model.safetensors" ||
        fail "fault at product $k: resumed, the weights differ from the run without a fault"
done

# 3. the launcher restarts the job
if command -v mpirun >/dev/null; then
    k=$((${n:-0} / 2))
    ST_FAULT_MATMUL=$k ST_FAULT_ONCE="$tmp/once" timeout 180 "$bin" launch -n 1 --max-restarts 1 "${run[@]}" \
        --set train.out_dir="$tmp/launch" >"$tmp/launch.log" 2>&1
    rc=$?
    echo "launch --max-restarts 1, faulting once: exit $rc; $(grep -o 'restart 1 of 1 from checkpoint [^ ]*' "$tmp/launch.log")"
    [ $rc -eq 0 ] || fail "launch: exit $rc: $(tail -3 "$tmp/launch.log")"
    [ -f "$tmp/once" ] || fail "launch: the rank never faulted"
    grep -q "scaletrain launch: the job failed (exit 1: .*a kernel faulted.*restart 1 of 1 from checkpoint" "$tmp/launch.log" ||
        fail "launch: no restart naming the fault: $(grep 'scaletrain launch' "$tmp/launch.log")"
    cmp -s "$tmp/ref/model.safetensors" "$tmp/launch/model.safetensors" ||
        fail "launch: restarted, the weights differ from the run without a fault"
else
    echo "no mpirun: the launcher's restart is left out"
fi

e2e_finish "a real GPU fault (a product reading an unmapped address) ends the run in time naming it, and the run resumes, by hand or by launch --max-restarts, to the bytes of a run without the fault"
