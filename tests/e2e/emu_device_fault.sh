#!/usr/bin/env bash
# A GPU that faults mid-run (an illegal address, an uncorrectable ECC error:
# the driver's Xid, and every later CUDA call of the process returns the
# same sticky error) ends the run with a message that says so, writes no
# checkpoint from the lost device, and the run resumes from its latest
# checkpoint to the bits of a run that never faulted. In the CUDA
# emulator's build (make emu), whose ST_CUDAEMU_FAULT=K[:R] makes the K-th
# kernel of a process (of MPI rank R) fault (tests/cudaemu/README.md):
#  1. one emulated GPU, bf16, AdamW with clipping, asynchronous checkpoints
#     every 4 of 20 steps, a fault at 6 points spread over the run's kernels
#     (counted by a run without one): each run exits 1 naming the illegal
#     access, the device and --resume auto, and `--resume auto` then ends
#     with the uninterrupted run's weights, byte for byte (a checkpoint
#     written from the faulted device's memory, or one labelled with a step
#     its weights never reached, would not); with NVML (tests/lib/sick_nvml.c)
#     the driver's Xid errors on the GPU (79, or the GPU lost to NVML) end
#     the message, after the error that stopped the run;
#  2. 2 emulated GPUs under ZeRO-2, rank 1 faulting halfway: the job ends
#     at once (not after dist.timeout_s), rank 1 naming the fault, and
#     resumes to the uninterrupted 2-GPU run's bytes;
#  3. `scaletrain launch -n 2 --max-restarts 1` with rank 0 faulting once
#     (ST_CUDAEMU_FAULT_ONCE): the launcher restarts the job from its
#     checkpoint, saying why, and it ends with the uninterrupted run's bytes.
# Given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_emu
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE

tr=(train --set train.threads=1 --set data.num_workers=0 --set data.val= --set log.progress=off
    --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32 --set optim.type=adamw
    --set optim.lr=0.01 --set optim.grad_clip=1 --set precision=bf16 --set train.device=cuda
    --set train.steps=20 --set train.checkpoint_every=4 --set train.checkpoint_async=true
    --set dist.timeout_s=60 --json --quiet)
# kernels_ran LOG: the kernels a run asked for a fault past its end ran (the emulator says at exit)
kernels_ran() { sed -n 's/^cudaemu: ST_CUDAEMU_FAULT=[0-9]*: no fault, \([0-9]*\) kernels ran$/\1/p' "$1"; }
fault_words=("an illegal memory access was encountered (cudaErrorIllegalAddress)" "a kernel faulted"
             "--resume auto continues from the latest checkpoint")

# 1. one GPU
ST_CUDAEMU_DEVICES=1 timeout 60 "$bin" "${tr[@]}" --set train.out_dir="$tmp/ref1" >"$tmp/ref1.log" 2>&1 ||
    fail "the run without a fault: $(tail -3 "$tmp/ref1.log")"
ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_FAULT=1000000000 timeout 60 "$bin" "${tr[@]}" --set train.out_dir="$tmp/count" \
    >"$tmp/count.log" 2>&1
n=$(kernels_ran "$tmp/count.log")
[ -n "$n" ] && [ "$n" -gt 100 ] || fail "the count of the run's kernels: '$n' ($(tail -2 "$tmp/count.log"))"
for i in 1 2 3 4 5 6; do
    k=$((${n:-0} * i / 7))
    d=$tmp/one-$i
    ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_FAULT=$k timeout 60 "$bin" "${tr[@]}" --set train.out_dir="$d" >"$d.log" 2>&1
    rc=$?
    latest=$(cat "$d/ckpt/latest" 2>/dev/null)
    echo "fault at kernel $k of $n: exit $rc, latest checkpoint ${latest:-none}"
    [ $rc -eq 1 ] || fail "fault at kernel $k: exit $rc, want 1: $(tail -2 "$d.log")"
    grep -q "^cudaemu: .* faulted (ST_CUDAEMU_FAULT=$k)" "$d.log" || fail "fault at kernel $k: no fault happened"
    for w in "${fault_words[@]}" "cuda:0"; do
        grep -qF -- "$w" "$d.log" || fail "fault at kernel $k: no '$w' in: $(grep 'scaletrain:' "$d.log")"
    done
    ST_CUDAEMU_DEVICES=1 timeout 60 "$bin" "${tr[@]}" --set train.out_dir="$d" --resume auto >"$d-resumed.log" 2>&1 ||
        fail "fault at kernel $k: the resumed run: $(tail -2 "$d-resumed.log")"
    cmp -s "$tmp/ref1/model.safetensors" "$d/model.safetensors" ||
        fail "fault at kernel $k: resumed from ${latest:-nothing}, the weights differ from the run without a fault"
done

# 1b. what the driver saw, through NVML (tests/lib/sick_nvml.c): the Xids the GPU reported while the run
# trained end its message, after the error that stopped it (which the failing frees after it do not replace)
mkdir -p "$tmp/nvml"
cc -shared -fPIC -O2 -o "$tmp/nvml/libnvidia-ml.so.1" tests/lib/sick_nvml.c || fail "cannot build the test's NVML"
k=$((${n:-0} * 5 / 7))
for x in "79" "lost"; do
    d=$tmp/xid-$x
    ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_FAULT=$k LD_LIBRARY_PATH="$tmp/nvml" ST_FAKE_NVML_XID=$x timeout 60 "$bin" "${tr[@]}" \
        --set train.out_dir="$d" >"$d.log" 2>&1
    rc=$?
    case $x in
        79) want="a kernel faulted.* \(while it trained, the driver reported on this GPU: Xid 79 \(the GPU has fallen off the bus\)\)$" ;;
        lost) want="a kernel faulted.* \(while it trained, the driver reported on this GPU: the GPU is lost to NVML \(fallen off the bus, or otherwise gone\)\)$" ;;
    esac
    [ $rc -eq 1 ] && grep -qE "^scaletrain: error: .*$want" "$d.log" ||
        fail "Xid $x: exit $rc, the message: $(grep 'scaletrain: error' "$d.log")"
done
echo "Xids: $(grep -o 'the driver reported on this GPU: .*' "$tmp/xid-79.log")"

# 2. two GPUs under ZeRO-2, rank 1 faults
z2=(--set dist.strategy=zero2)
"${mpi[@]}" -np 2 "$bin" "${tr[@]}" "${z2[@]}" --set train.out_dir="$tmp/ref2" >"$tmp/ref2.log" 2>&1 ||
    fail "2 GPUs without a fault: $(tail -3 "$tmp/ref2.log")"
"${mpi[@]}" -x ST_CUDAEMU_FAULT=1000000000:1 -np 2 "$bin" "${tr[@]}" "${z2[@]}" --set train.out_dir="$tmp/count2" \
    >"$tmp/count2.log" 2>&1
n2=$(kernels_ran "$tmp/count2.log")
k=$((${n2:-0} / 2))
t0=$SECONDS
"${mpi[@]}" -x ST_CUDAEMU_FAULT=$k:1 -np 2 "$bin" "${tr[@]}" "${z2[@]}" --set train.out_dir="$tmp/two" \
    >"$tmp/two.log" 2>&1
rc=$? dt=$((SECONDS - t0))
echo "2 GPUs, rank 1's kernel $k of ${n2:-?} faults: exit $rc after ${dt}s, latest checkpoint $(cat "$tmp/two/ckpt/latest" 2>/dev/null)"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "2 GPUs: exit $rc (0: the fault went unseen; 124: hung)"
[ $dt -lt 30 ] || fail "2 GPUs: the job took ${dt}s to end, as if rank 0 waited for dist.timeout_s"
grep -q "rank 1 of 2 .*cuda:1.*a kernel faulted" "$tmp/two.log" || fail "2 GPUs: rank 1 did not name its fault"
"${mpi[@]}" -np 2 "$bin" "${tr[@]}" "${z2[@]}" --set train.out_dir="$tmp/two" --resume auto >"$tmp/two-resumed.log" 2>&1 ||
    fail "2 GPUs: the resumed run: $(tail -3 "$tmp/two-resumed.log")"
cmp -s "$tmp/ref2/model.safetensors" "$tmp/two/model.safetensors" ||
    fail "2 GPUs: resumed, the weights differ from the run without a fault"

# 3. the launcher restarts the job
ST_CUDAEMU_FAULT=$k:0 ST_CUDAEMU_FAULT_ONCE="$tmp/once" timeout 120 "$bin" launch -n 2 --max-restarts 1 "${tr[@]}" \
    "${z2[@]}" --set train.out_dir="$tmp/launch" >"$tmp/launch.log" 2>&1
rc=$?
echo "launch --max-restarts 1, rank 0 faulting once: exit $rc; $(grep -o 'restart 1 of 1 from checkpoint [^ ]*' "$tmp/launch.log")"
[ $rc -eq 0 ] || fail "launch: exit $rc: $(tail -3 "$tmp/launch.log")"
[ -f "$tmp/once" ] || fail "launch: rank 0 never faulted"
grep -q "scaletrain launch: the job failed (exit 1: .*a kernel faulted.*restart 1 of 1 from checkpoint" "$tmp/launch.log" ||
    fail "launch: no restart naming the fault: $(grep 'scaletrain launch' "$tmp/launch.log")"
cmp -s "$tmp/ref2/model.safetensors" "$tmp/launch/model.safetensors" ||
    fail "launch: restarted, the weights differ from the run without a fault"

e2e_finish "a faulting GPU ends its run (one GPU, one of 2 under ZeRO-2) naming the fault, no checkpoint is written from it, and the run resumes, by hand or by launch --max-restarts, to the bytes of a run without the fault"
