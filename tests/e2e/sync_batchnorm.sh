#!/usr/bin/env bash
# Synchronised batch-norm (dist.sync_batchnorm), under real mpirun:
#  1. tests/mpi/sync_bn_check on 2 and 3 ranks: the layer with its statistics
#     reduced over the ranks matches batch-norm over the whole batch (y, dx,
#     the statistics, the running statistics, dweight and dbias).
#  2. A cnn WITH batch-norm, 6 SGD steps: 1 rank with batch 4b, and 2 and 4
#     ranks with sync batch-norm (micro-batch 2b and b), save the same weights
#     and the same running_mean / running_var, max|a - b| / max|a| <= 1e-4 per
#     tensor (ddp_equivalence.sh's tolerance); 2 ranks with activation
#     checkpointing save the same bits as without (its recompute reduces
#     again, the running statistics move once). Without sync batch-norm 4 ranks must differ by more than
#     that, or the comparison would prove nothing. Why 6 steps: the ranks'
#     results differ from 1 rank's in rounding (their convolutions' products
#     have other shapes, their sums other orders), and max-pooling turns a
#     rounding difference into a different winner now and then, which SGD
#     with momentum amplifies: with the Winograd convolutions the 4-rank
#     difference measured 1.3e-6, 6.8e-6, 1.5e-5, 5.9e-4 and 3.2e-2 after 1, 5,
#     8, 10 and 20 steps (local statistics: 2.21 after 5).
#  3. dist.sync_batchnorm with dist.deterministic is refused with a message.
#  4. With accumulation: 2 ranks of 2 micro-steps of b each (sync) against 1
#     rank of 2 micro-steps of 2b: the same weights and statistics (1e-4), as
#     each rank's micro-step k takes the step's global micro-batch k (the
#     sampler's interleaved order; before, rank r took slices r*accum + k,
#     and the statistics were over other samples than one rank's: 3.3x apart).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE

for n in 2 3; do
    out=$("${mpi[@]}" -np $n "$build/tests/mpi/sync_bn_check" 2>&1) || fail "sync_bn_check on $n ranks: $out"
    echo "sync_bn_check on $n ranks: $(grep -c 'sync batch-norm ok' <<<"$out") of $n ranks ok"
done

b=4
args=(--set train.steps=6 --set train.threads=1 --set data.num_workers=0 --set data.val=
      --set dist.bucket_cap_mb=0.01 --set dist.timeout_s=30 --json --quiet
      --set train.batch_size=$((4 * b)) --set model.type=cnn --set model.channels=[8,16] --set model.pool=[1,1]
      --set model.batchnorm=true --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9
      --set optim.schedule=constant)
timeout 60 "$bin" train "${args[@]}" --set train.micro_batch_size=$((4 * b)) --set train.out_dir="$tmp/n1" \
    >"$tmp/n1.json" 2>&1 || fail "1 rank: $(tail -n 3 "$tmp/n1.json")"
run() { # NAME RANKS ARGS...: one micro-batch of 4b/RANKS per rank and step
    local name=$1 n=$2; shift 2
    "${mpi[@]}" -np "$n" "$bin" train "${args[@]}" --set train.micro_batch_size=$((4 * b / n)) \
        --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}
run sync2 2 --set dist.sync_batchnorm=true
run sync4 4 --set dist.sync_batchnorm=true
run sync2ckpt 2 --set dist.sync_batchnorm=true --set train.activation_checkpointing=blocks
run local4 4 --set dist.sync_batchnorm=false
for r in sync2 sync4 sync2ckpt; do
    echo -n "cnn with batch-norm, $r against 1 rank: "
    /usr/bin/python3 tests/py/weights_diff.py "$tmp/n1/model.safetensors" "$tmp/$r/model.safetensors" 1e-4 ||
        fail "$r differs from 1 rank"
done
# Checkpointing's recompute reduces the same sums again: the same bits, and the running statistics moved once.
cmp -s "$tmp/sync2/model.safetensors" "$tmp/sync2ckpt/model.safetensors" &&
    echo "sync2ckpt: the same bits as sync2" || fail "sync2ckpt: other weights than sync2"
echo -n "cnn with batch-norm, local4 (each rank its own statistics) against 1 rank: "
out=$(/usr/bin/python3 tests/py/weights_diff.py "$tmp/n1/model.safetensors" "$tmp/local4/model.safetensors" 1e-4)
echo "$out"
grep -q "^FAIL: worst relative difference" <<<"$out" || fail "local4 matches 1 rank: the comparison proves nothing"

out=$(timeout 60 "$bin" train "${args[@]}" --set train.steps=1 --set train.out_dir="$tmp/det" \
    --set dist.sync_batchnorm=true --set dist.deterministic=true 2>&1); rc=$?
echo "sync_batchnorm with deterministic: exit $rc: $(grep -m1 'error' <<<"$out")"
[ $rc -ne 0 ] && grep -qF "dist.sync_batchnorm (true, --set) and dist.deterministic (true, --set) exclude each other" <<<"$out" ||
    fail "sync_batchnorm with deterministic: exit $rc: $out"
# 4.
timeout 60 "$bin" train "${args[@]}" --set train.micro_batch_size=$((2 * b)) --set train.out_dir="$tmp/n1acc" \
    >"$tmp/n1acc.json" 2>&1 || fail "1 rank accumulating: $(tail -n 3 "$tmp/n1acc.json")"
"${mpi[@]}" -np 2 "$bin" train "${args[@]}" --set train.micro_batch_size=$b --set dist.sync_batchnorm=true \
    --set train.out_dir="$tmp/sync2acc" >"$tmp/sync2acc.json" 2>&1 || fail "sync2acc: $(tail -n 3 "$tmp/sync2acc.json")"
echo -n "cnn with batch-norm, 2 micro-steps: 2 ranks (sync) against 1 rank: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/n1acc/model.safetensors" "$tmp/sync2acc/model.safetensors" 1e-4 ||
    fail "sync2acc differs from 1 rank accumulating"
e2e_finish
