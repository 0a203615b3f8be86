#!/usr/bin/env bash
# Gradients that overflowed on a device, where the host does not read their
# norm every step (the clip's norm stays on the device, and the loss is read
# only on some steps): the fused update's guard makes no update from that
# step on, and the next read stops the run naming the step, with the weights
# those of the step before (src/optim/optim.h st_optim_update). The CUDA
# emulator's build (make emu); given any other build it skips.
# tests/lib/overflow_sgemm.c (LD_PRELOAD) leaves +inf in the output of the
# N-th matrix product (the emulated cuBLASLt's products are OpenBLAS's); a
# tiny GPT on one emulated GPU, optim.grad_clip 1, a checkpoint every 4
# steps (read on steps 1, 4 and 8 of 8).
#  1. For step 2's products, from its last (backward's) down, until two
#     have given it: exit 1 and "the gradients of step 2 are not finite
#     (their norm is inf or NaN) while its loss was: backward overflowed; no
#     update was made from that step on, so the weights are those after
#     step 1; lower optim.lr", no checkpoint (step 4's read stops the run);
#     before the guard, such a run went on with NaN weights and stopped at
#     step 4 naming the loss of step 3.
#     With optim.offload the norm is read on the host each step: the run
#     stops before step 2's update, naming it.
#  2. Two GPUs (scaletrain launch, NCCL), zero1, the overflow on rank 1
#     alone: the clip's norm is the global one, so every rank names step 2.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_tmpdir
source "$(dirname "$0")/../lib/tiny_gpt.sh"
source "$(dirname "$0")/../lib/overflow.sh"
run+=(--set train.device=cuda --set optim.grad_clip=1 --set log.every=100 --set train.eval_every=0
      --set train.checkpoint_every=4 --set train.keep_checkpoints=0 --quiet)
want="the gradients of step 2 are not finite \(their norm is (inf|NaN)\) while its loss was: backward overflowed; no update was made from that step on, so the weights are those after step 1; lower optim.lr$"

ST_CUDAEMU_DEVICES=1
c1=$(overflow_products 1)
c2=$(overflow_products 2)
[ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] || fail "could not count the products (got '$c1' and '$c2')"
echo "$((c2 - c1)) products a step; step 2's are $((c1 + 1))..$c2"

halts=()
for ((n = c2; n > c1 && ${#halts[@]} < 2; n--)); do
    out="$tmp/n$n"
    ST_OVERFLOW_SGEMM_AT=$n LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 300 "$bin" "${run[@]}" \
        --set train.steps=8 --set train.out_dir="$out" >"$out.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] || grep -qE "the loss became (NaN|inf|-inf) at step 2; " "$out.log"; then
        continue # (the inf vanished, 0 x inf taken as 0; or a forward product's)
    fi
    grep -qE "$want" "$out.log" || {
        fail "N=$n: exit $rc: $(grep -i error "$out.log" | head -2)"
        continue
    }
    [ $rc -eq 1 ] || fail "N=$n: the gradients named, but exit $rc"
    [ -z "$(ls "$out/ckpt" 2>/dev/null | grep -E '^step-')" ] || fail "N=$n: checkpoints $(ls "$out/ckpt" | tr '\n' ' ')"
    [ ! -e "$out/model.safetensors" ] || fail "N=$n: model.safetensors written"
    halts+=("$n")
done
[ ${#halts[@]} -eq 2 ] || fail "no two of step 2's products gave the guard's stop (${halts[*]}): the guard is untested"
echo "the guard stopped the runs of products ${halts[*]}"
# 1b. optim.offload (the update is the host's): the clip's norm is read on
# the host every step, so the run stops before the update, naming it (the
# host's update made the weights NaN: inf x the clip's factor 0)
if [ ${#halts[@]} -gt 0 ]; then
    n=${halts[0]} out="$tmp/off"
    ST_OVERFLOW_SGEMM_AT=$n LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 300 "$bin" "${run[@]}" --set optim.offload=true \
        --set train.steps=8 --set train.out_dir="$out" >"$out.log" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -qE "the gradients of step 2 are not finite \(their norm is (inf|NaN)\) while its loss, [0-9.e+-]+, was: backward overflowed; the weights were not updated and are those after step 1; lower optim.lr$" "$out.log" ||
        fail "offloaded, N=$n: exit $rc: $(grep -i error "$out.log" | head -2)"
fi

# 2. two ranks, zero1, the overflow on rank 1 alone, in step 2's last product
if ! command -v mpirun >/dev/null; then
    echo "two GPUs: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
else
    export ST_CUDAEMU_DEVICES=2
    c1=$(overflow_products 1 zero1)
    c2=$(overflow_products 2 zero1)
    [ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] ||
        fail "two GPUs: could not count the products (got '$c1' and '$c2')"
    # (from the step's last product down, as above, past those whose inf vanished)
    for ((n = ${c2:-0}, got = 0; n > ${c1:-0} && n > c2 - 6 && !got; n--)); do
        rm -rf "$tmp/two"
        ST_OVERFLOW_SGEMM_AT=$n ST_OVERFLOW_SGEMM_RANK=1 LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 300 \
            "$bin" launch -n 2 --cores-per-rank 1 "${run[@]}" --set train.steps=8 --set dist.strategy=zero1 \
            --set train.out_dir="$tmp/two" >"$tmp/two.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && grep -qE "$want" "$tmp/two.log" || continue
        got=1
        for r in 0 1; do
            grep -qE "rank $r.*$want" "$tmp/two.log" ||
                fail "two GPUs, N=$n on rank 1: rank $r does not name step 2: $(grep -i error "$tmp/two.log" | head -3)"
        done
        [ -z "$(ls "$tmp/two/ckpt" 2>/dev/null | grep -E '^step-')" ] || fail "two GPUs: a checkpoint was saved"
    done
    [ "$got" = 1 ] || fail "two GPUs: none of step 2's last products on rank 1 stopped the run naming it: $(grep -i error "$tmp/two.log" | head -3)"
fi
e2e_finish "on a device, gradients that overflowed stop the updates and the run, naming their step"
