#!/usr/bin/env bash
# tests/e2e/nan_stop.sh on (emulated) GPUs: the CUDA emulator's build (make
# emu); given any other build it skips. On a device the host reads the loss
# only on some steps (the first, logged lines, checkpoint and evaluation
# steps, the last), so the stop comes at the next of them, but it names the
# step whose loss became NaN (the device keeps the first), and no checkpoint
# or weights file holds what followed:
#  1. One GPU (bf16): exit 1, the step named, the checkpoints those before it.
#  2. One GPU, optim.offload (the update on the host, its copies during
#     backward): the same.
#  3. A checkpoint after every step by time (train.checkpoint_every_s 1e-9,
#     train.checkpoint_every 0, all kept): the loss is read before each, so
#     the checkpoints are those of every step before the NaN's.
#  4. Two GPUs (scaletrain launch, NCCL): every rank names the same step (the
#     first whose loss was not finite on any rank: their data differ), the
#     same checkpoints.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
source "$(dirname "$0")/../lib/nan_stop.sh"
run+=(--set train.device=cuda)

ST_CUDAEMU_DEVICES=1 timeout 300 "$bin" "${run[@]}" --set train.out_dir="$tmp/one" >"$tmp/one.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "one GPU: exit $rc, not 1"
check_stop "one GPU" "$tmp/one" "$tmp/one.log"

ST_CUDAEMU_DEVICES=1 timeout 300 "$bin" "${run[@]}" --set optim.offload=true --set train.out_dir="$tmp/off" \
    >"$tmp/off.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "one GPU, offload: exit $rc, not 1"
check_stop "one GPU, offload" "$tmp/off" "$tmp/off.log"

ST_CUDAEMU_DEVICES=1 timeout 300 "$bin" "${run[@]}" --set train.checkpoint_every=0 --set train.checkpoint_every_s=1e-9 \
    --set train.keep_checkpoints=0 --set train.out_dir="$tmp/timed" >"$tmp/timed.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "one GPU, timed checkpoints: exit $rc, not 1"
check_stop "one GPU, timed checkpoints" "$tmp/timed" "$tmp/timed.log" 1

check_two_ranks "two GPUs"
e2e_finish "on GPUs a NaN loss stops the run naming its step, the checkpoints before it kept"
