#!/usr/bin/env bash
# dist.grad_dtype on 2 ranks under real mpirun (docs/precision.md):
#  1. tests/mpi/half_sum_check: the 16-bit sums (bf16, fp16) equal
#     round16(a + b) bit for bit, overflow to Inf and subnormals included.
#  2. The mlp and a tiny gpt trained 20 steps (SGD, momentum 0.9, lr 0.05) on
#     2 ranks with gradients all-reduced in bf16 and in fp16 end with weights
#     close to the fp32 all-reduce's, max|a - b| / max|a| per tensor:
#       bf16 <= 3e-2 (measured 9.7e-3 mlp, 3.2e-3 gpt)
#       fp16 <= 3e-3 (measured 3.4e-4 mlp, 3.9e-4 gpt)
#     A 16-bit gradient is off by up to 2^-9 (bf16) / 2^-12 (fp16) of its
#     value per rounding (one step's weight error is that times lr), and 20
#     steps of training amplify the difference of trajectories. SGD, because
#     AdamW divides by each gradient's RMS and turns the rounding of
#     near-cancelling sums into whole-lr differences (5e-2 seen). The weights
#     must also not be bit-identical (the option is in effect), and the
#     --json line still reports the buckets.
#  3. Under dist.strategy zero1 the 16-bit pieces are reduced to their owners
#     instead: on 2 ranks each element's sum is one 16-bit addition either
#     way, so the mlp's weights are the bits of the bf16 all-reduce (cmp);
#     zero2 (running sums across micro-steps) is refused with its reason.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
e2e_mpi 90
mpi+=(-n 2)

"${mpi[@]}" "$build/tests/mpi/half_sum_check" || fail "half_sum_check on 2 ranks"

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
common=(--set train.steps=20 --set optim.type=sgd --set optim.lr=0.05 --set train.threads=1 --set data.num_workers=0 --set data.val=
        --set dist.bucket_cap_mb=0.05 --set dist.timeout_s=60 --set log.peak_gflops=100 --json --quiet)
declare -A cfg
cfg[mlp]="--set model.type=mlp --set model.hidden=[128] --set train.batch_size=64"
cfg[gpt]="--set model.type=gpt --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32
          --set model.block_size=32 --set data.type=tokens --set data.train=$tmp/train.tokens --set train.batch_size=8"
for model in mlp gpt; do
    for g in fp32 bf16 fp16; do
        # shellcheck disable=SC2086
        "${mpi[@]}" "$bin" train "${common[@]}" ${cfg[$model]} --set dist.grad_dtype=$g \
            --set train.out_dir="$tmp/$model-$g" | tail -n 1 >"$tmp/$model-$g.json" || fail "$model $g: the run failed"
    done
    for g in bf16 fp16; do
        tol=3e-2
        [ $g = fp16 ] && tol=3e-3
        echo -n "$model grad_dtype $g against fp32: "
        /usr/bin/python3 tests/py/weights_diff.py "$tmp/$model-fp32/model.safetensors" \
             "$tmp/$model-$g/model.safetensors" $tol || fail "$model: grad_dtype $g drifts from fp32"
        if cmp -s "$tmp/$model-fp32/model.safetensors" "$tmp/$model-$g/model.safetensors"; then
            fail "$model: grad_dtype $g gave fp32's bits: the option did nothing"
        fi
        grep -q '"grad_buckets"' "$tmp/$model-$g.json" || fail "$model $g: no grad_buckets in the --json line"
    done
done
# shellcheck disable=SC2086
"${mpi[@]}" "$bin" train "${common[@]}" ${cfg[mlp]} --set dist.grad_dtype=bf16 --set dist.strategy=zero1 \
    --set train.out_dir="$tmp/mlp-bf16-zero1" | tail -n 1 >"$tmp/mlp-bf16-zero1.json" ||
    fail "mlp bf16 zero1: the run failed"
if cmp -s "$tmp/mlp-bf16/model.safetensors" "$tmp/mlp-bf16-zero1/model.safetensors"; then
    echo "mlp grad_dtype bf16 under zero1: the bits of the bf16 all-reduce"
else
    fail "mlp grad_dtype bf16 under zero1: the weights differ from the bf16 all-reduce's"
fi
# shellcheck disable=SC2086
out=$("${mpi[@]}" "$bin" train "${common[@]}" ${cfg[mlp]} --set dist.grad_dtype=bf16 --set dist.strategy=zero2 \
    --set train.out_dir="$tmp/mlp-bf16-zero2" 2>&1) && fail "grad_dtype bf16 under zero2 was accepted"
grep -q "dist.grad_dtype bf16 works with dist.strategy ddp or zero1, and zero2 on GPUs" <<<"$out" ||
    fail "grad_dtype bf16 under zero2 refused without the reason: $out"
e2e_finish ok
