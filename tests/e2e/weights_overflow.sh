#!/usr/bin/env bash
# Weights that a step's update made non-finite while the step's loss was
# finite (a gradient that overflowed) are never checkpointed: the loss is
# read before each checkpoint, but it is the loss before the update, and a
# checkpoint of such weights became `latest`, which a resume's load refuses,
# with train.keep_checkpoints deleting the good ones behind it.
# tests/lib/overflow_sgemm.c (LD_PRELOAD) leaves +inf in the output of the
# N-th matrix product, as a product of values near float's range would; a
# tiny GPT on the CPU, a checkpoint after every step, all kept.
#  1. For every product N of step 2 of 3: exit 1 naming step 2, either "the
#     loss became NaN/inf at step 2" (a forward product) or "the weights
#     became non-finite in the update of step 2 ... no checkpoint of step 2
#     was saved (the last one, .../step-1, is whole)" (a backward one; at
#     least one N must give it), or, where the inf vanished (0 x inf taken
#     as 0), exit 0; every checkpoint saved holds finite weights (NumPy),
#     and ckpt/latest is the last of them. Before the check, the backward
#     products' runs saved step-2 with an inf weight.
#  2. --resume auto of such a run (without the overflow) trains on from
#     step 1 to the end. With the norm taken on the host before the update
#     (log.every 1; optim.grad_clip 1), the run stops there, naming the
#     gradients and their norm, the weights not updated.
#  3. Two ranks under zero1 (scaletrain launch), the overflow on rank 1
#     alone: each rank's optimizer shard differs, and every rank names the
#     step; no checkpoint of step 2.
#  4. Batch-norm running statistics made non-finite while the loss was
#     finite (a cnn): no checkpoint of that step either.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_numpy
e2e_tmpdir
source "$(dirname "$0")/../lib/tiny_gpt.sh"
source "$(dirname "$0")/../lib/overflow.sh"
run+=(--set log.peak_gflops=1 --set train.eval_every=0 --set train.checkpoint_every=1
      --set train.keep_checkpoints=0 --quiet)

c1=$(overflow_products 1)
c2=$(overflow_products 2)
[ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] || e2e_skip "could not count the products (got '$c1' and '$c2')"
per=$((c2 - c1))
first=$((c1 + 1)) last=$((c1 + per)) # step 2's products
echo "$per products a step; step 2's are $first..$last"

dirs=() weights_runs=() loss_runs=0 clean_runs=0
for ((n = first; n <= last; n++)); do
    out="$tmp/n$n"
    ST_OVERFLOW_SGEMM_AT=$n LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 60 "$bin" "${run[@]}" \
        --set train.steps=3 --set train.out_dir="$out" >"$out.log" 2>&1
    rc=$?
    have=$(ls "$out/ckpt" 2>/dev/null | grep -E '^step-' | sort -t- -k2 -n | tr '\n' ' ')
    if [ $rc -eq 0 ]; then
        clean_runs=$((clean_runs + 1))
        [ "$have" = "step-1 step-2 step-3 " ] || fail "N=$n: exit 0 with checkpoints $have"
    elif grep -qE "the loss became (NaN|inf|-inf) at step 2; " "$out.log"; then
        loss_runs=$((loss_runs + 1))
        [ "$have" = "step-1 " ] || fail "N=$n: the loss of step 2 not finite, checkpoints $have"
    elif grep -qF "the weights became non-finite in the update of step 2, whose loss was finite (a gradient overflowed); no checkpoint of step 2 was saved (the last one, $out/ckpt/step-1, is whole); lower optim.lr or set optim.grad_clip" "$out.log"; then
        weights_runs+=("$n")
        [ "$have" = "step-1 " ] || fail "N=$n: the weights of step 2 not finite, checkpoints $have"
    else
        fail "N=$n: exit $rc: $(grep -i error "$out.log" | head -2)"
        continue
    fi
    last_ckpt=${have% }
    last_ckpt=${last_ckpt##* }
    grep -q "$last_ckpt\$" <<<"$(cat "$out/ckpt/latest" 2>/dev/null)" || fail "N=$n: ckpt/latest is not $last_ckpt"
    for d in $have; do dirs+=("$out/ckpt/$d/model.safetensors"); done
done
echo "step 2's products overflowed: ${#weights_runs[@]} left the weights non-finite, $loss_runs the loss, $clean_runs nothing"
[ ${#weights_runs[@]} -gt 0 ] || fail "no product left the weights alone non-finite: the check is untested"
/usr/bin/python3 - "${dirs[@]}" <<'PY' || fail "a checkpoint holds weights that are not finite"
import sys
import numpy as np
sys.path.insert(0, "tests/py")
from weights_diff import load_with_metadata
bad = 0
for path in sys.argv[1:]:
    for name, x in load_with_metadata(path)[1].items():
        if not np.isfinite(x).all():
            print(f"{path}: {name}: {int((~np.isfinite(x)).sum())} values not finite")
            bad += 1
sys.exit(1 if bad else 0)
PY

# 2. the resume goes on from step 1
if [ ${#weights_runs[@]} -gt 0 ]; then
    n=${weights_runs[0]}
    o=$(timeout 60 "$bin" "${run[@]}" --set train.steps=3 --set train.out_dir="$tmp/n$n" --resume auto 2>&1) ||
        fail "the resume of N=$n: $o"
    [ "$(ls "$tmp/n$n/ckpt" | grep -E '^step-' | sort -t- -k2 -n | tr '\n' ' ')" = "step-1 step-2 step-3 " ] ||
        fail "the resume of N=$n: checkpoints $(ls "$tmp/n$n/ckpt" | tr '\n' ' ')"
fi

# 2b. Where the gradient norm is taken on the host before the update (a
# logged step, or optim.grad_clip), such gradients stop the run there, the
# weights not updated: the message names the norm, and suggests grad_clip
# only when it is off (the clip made inf gradients NaN, 0 x inf, before)
if [ ${#weights_runs[@]} -gt 0 ]; then
    n=${weights_runs[0]}
    for clip in 0 1; do
        out="$tmp/norm$clip"
        ST_OVERFLOW_SGEMM_AT=$n LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 60 "$bin" "${run[@]}" --set train.steps=3 \
            --set log.every=1 --set optim.grad_clip=$clip --set train.out_dir="$out" >"$out.log" 2>&1
        rc=$?
        fix="lower optim.lr, or set optim.grad_clip (it bounds their growth before an overflow)"
        [ $clip = 0 ] || fix="lower optim.lr"
        [ $rc -eq 1 ] && grep -qE "the gradients of step 2 are not finite \(their norm is (inf|NaN)\) while its loss, [0-9.e+-]+, was: backward overflowed; the weights were not updated and are those after step 1; " "$out.log" &&
            [ "$(sed -n 's/.*are those after step 1; //p' "$out.log")" = "$fix" ] ||
            fail "N=$n, log.every 1, grad_clip $clip: exit $rc: $(grep -i error "$out.log" | head -2)"
        [ "$(ls "$out/ckpt" | grep -E '^step-' | tr '\n' ' ')" = "step-1 " ] ||
            fail "N=$n, log.every 1, grad_clip $clip: checkpoints $(ls "$out/ckpt" | tr '\n' ' ')"
    done
fi

# 3. two ranks, zero1, the overflow on rank 1 alone, in step 2's last
# product (a weight gradient's; each rank's micro-batch is half the batch,
# so it counts its own)
if ! command -v mpirun >/dev/null; then
    echo "two ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
else
    c1=$(overflow_products 1 zero1)
    c2=$(overflow_products 2 zero1)
    [ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] || fail "two ranks: could not count the products (got '$c1' and '$c2')"
    n=${c2:-0}
    ST_OVERFLOW_SGEMM_AT=$n ST_OVERFLOW_SGEMM_RANK=1 LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 120 \
        "$bin" launch -n 2 --cores-per-rank 1 "${run[@]}" --set train.steps=3 --set dist.strategy=zero1 \
        --set train.out_dir="$tmp/two" >"$tmp/two.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] || fail "two ranks, N=$n on rank 1: exit 0"
    for r in 0 1; do
        grep -q "rank $r.*the weights became non-finite in the update of step 2, whose loss was finite" "$tmp/two.log" ||
            fail "two ranks, N=$n on rank 1: rank $r does not name step 2: $(grep -i error "$tmp/two.log" | head -3)"
    done
    [ ! -e "$tmp/two/ckpt/step-2" ] || fail "two ranks: a checkpoint of step 2 was saved"
fi
# 4. Batch-norm running statistics: a cnn whose conv product leaves 1e22
# in one element (finite; its square, in the variance's float sums, is
# not): the variance is inf, so batch norm outputs 0 x (x - mean) + bias
# for that channel and the loss stays finite, while the running variance
# becomes inf. A load refuses it as it refuses a weight (weights.c), so the
# checkpoint would have become a latest that every resume fails on, with
# keep_checkpoints deleting the good ones: for some product of step 2 the
# run stops naming the statistics, no checkpoint of step 2 saved.
cnn=(train --set model.type=cnn --set model.channels=[4] --set model.pool=[1] --set model.batchnorm=true
     --set train.batch_size=4 --set train.threads=1 --set data.num_workers=0 --set data.val= --set train.device=cpu
     --set train.eval_every=0 --set train.checkpoint_every=1 --set train.keep_checkpoints=0 --set log.peak_gflops=1 --quiet)
run=("${cnn[@]}") # (what overflow_products runs)
c1=$(overflow_products 1)
c2=$(overflow_products 2)
if [ -z "$c1" ] || [ -z "$c2" ] || [ "$c2" -le "$c1" ]; then
    fail "cnn: could not count the products (got '$c1' and '$c2')"
else
    stats_runs=0
    for ((n = c1 + 1; n <= c2; n++)); do
        out="$tmp/bn$n"
        ST_OVERFLOW_SGEMM_AT=$n ST_OVERFLOW_SGEMM_VALUE=1e22 LD_PRELOAD="$tmp/overflow_sgemm.so" timeout 60 \
            "$bin" "${cnn[@]}" --set train.steps=3 --set train.out_dir="$out" >"$out.log" 2>&1
        grep -qF "the batch-norm running statistics became non-finite by step 2, whose loss was finite (an activation's square overflowed); no checkpoint of step 2 was saved (the last one, $out/ckpt/step-1, is whole); " "$out.log" || continue
        stats_runs=$((stats_runs + 1))
        [ "$(ls "$out/ckpt" | grep -E '^step-' | tr '\n' ' ')" = "step-1 " ] ||
            fail "cnn N=$n: the statistics named, checkpoints $(ls "$out/ckpt" | tr '\n' ' ')"
    done
    echo "cnn: $stats_runs of step 2's $((c2 - c1)) products, left at 1e22, stopped the run naming the statistics"
    [ $stats_runs -gt 0 ] || fail "cnn: no product's 1e22 made the statistics alone non-finite: the check is untested"
fi
e2e_finish "an update that leaves the weights non-finite is never checkpointed"
