#!/usr/bin/env bash
# A GPU another process holds most of (the emulator's ST_CUDAEMU_HELD_MB, as
# on a shared workstation): the CUDA emulator's build (make emu); given any
# other build it skips.
#  1. The automatic micro-batch is planned against what is free: on a 16000
#     MiB device, an mlp's 2048-sample batch runs whole when the device is
#     free, and in micro-batches that fit when another process holds 14700
#     MiB of it (the effective configuration says what fits); both train.
#  2. With the micro-batch set to the whole batch and 15900 MiB held, the run
#     stops before its first step with exit 1 and one message naming what it
#     was allocating, the device (once), what is free and what the run
#     holds, the memory held outside the run (and nvidia-smi), and the
#     settings that need less; it writes nothing.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE ST_CUDAEMU_DEVICES=1 ST_CUDAEMU_MEM_MB=16000
run=(train --set model.type=mlp --set model.hidden=[2048,2048] --set train.batch_size=2048 --set train.steps=1
     --set train.eval_every=0 --set data.val= --set train.device=cuda --set data.num_workers=0)

micro() { sed -nE 's/^  micro_batch_size: +([0-9]+) +#.*/\1/p' "$1"; }
ST_CUDAEMU_HELD_MB=0 timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/free" >"$tmp/free.log" 2>&1 ||
    fail "a free GPU: exit $?: $(grep error "$tmp/free.log")"
ST_CUDAEMU_HELD_MB=14700 timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/held" >"$tmp/held.log" 2>&1 ||
    fail "a GPU 14700 MiB held: exit $?: $(grep error "$tmp/held.log")"
free_micro=$(micro "$tmp/free.log") held_micro=$(micro "$tmp/held.log")
echo "micro-batch on the free GPU: $free_micro; with 14700 of 16000 MiB held: $held_micro"
[ "$free_micro" = 2048 ] || fail "a free GPU: micro-batch '$free_micro', not 2048"
[ -n "$held_micro" ] && [ "$held_micro" -lt 2048 ] || fail "a GPU 14700 MiB held: micro-batch '$held_micro', not below 2048"
grep -qE "^  micro_batch_size: +$held_micro +# auto: the largest divisor of 2048 samples per rank that fits [0-9]+ MiB" \
    "$tmp/held.log" || fail "a GPU 14700 MiB held: the effective configuration does not say what fits"

ST_CUDAEMU_HELD_MB=15900 timeout 120 "$bin" "${run[@]}" --set train.micro_batch_size=2048 \
    --set train.out_dir="$tmp/oom" >"$tmp/oom.log" 2>&1
rc=$?
err=$(grep "^scaletrain: error" "$tmp/oom.log")
echo "$err" | cut -c1-240
[ $rc -eq 1 ] || fail "out of memory: exit $rc, not 1"
[ "$(grep -c "^scaletrain: error" "$tmp/oom.log")" = 1 ] || fail "out of memory: not one error line"
grep -qE "^scaletrain: error: (allocating [0-9.]+ MiB of activations|the [0-9]+ parameters' fp32 weights and gradients)" <<<"$err" ||
    fail "out of memory: the message does not say what it was allocating"
[ "$(grep -o "cuda:0 (" <<<"$err" | wc -l)" = 1 ] || fail "out of memory: the device named other than once"
grep -qE "out of device memory allocating [0-9.]+ MiB \([0-9.]+ of 16000.0 MiB free; this run holds [0-9.]+ MiB; other processes and this one's CUDA context hold 15.[0-9] GiB: nvidia-smi lists them\)" <<<"$err" ||
    fail "out of memory: what is free, held by the run and held outside it"
grep -q "Lower train.micro_batch_size, or set train.activation_checkpointing, optim.offload, or dist.strategy zero2" <<<"$err" ||
    fail "out of memory: the settings that need less"
[ ! -e "$tmp/oom" ] || fail "out of memory: wrote $(ls "$tmp/oom")"
# a device nearly full before the run holds anything (another process's 15990 of 16000 MiB): the
# backend's own allocations as it opens say so, with no advice about the run's settings, which shrink
# nothing there (it gave the micro-batch advice, or a bare cudaMalloc error for the halt flag)
for held in 15990 15968; do
    err=$(ST_CUDAEMU_HELD_MB=$held timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/open$held" 2>&1) &&
        fail "opening a nearly full device ($held MiB held): ran"
    grep -q "out of device memory allocating .* as it opens (.* MiB free.*), before the run's own memory: other processes hold the device (nvidia-smi lists them)" <<<"$err" &&
        ! grep -q "Lower train.micro_batch_size" <<<"$err" || fail "opening a nearly full device ($held MiB held): $err"
done
e2e_finish "the micro-batch fits what another process leaves; out of memory says what, where and why"
