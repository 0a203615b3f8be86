#!/usr/bin/env bash
# Data-parallel training is exact (DESIGN invariant 1), under real mpirun: for
# the mlp, a cnn and a tiny gpt, 1 rank with batch 4b, 2 ranks (micro-batch
# 2b) and 4 ranks (micro-batch b) save the same weights after 20 steps, and 1
# rank accumulating 4 micro-batches of b matches 1 rank with batch 4b; the
# mlp with dropout too (its masks are drawn by the sample's place in the
# step's batch, not by micro-batch).
#
# Tolerance: max|a - b| / max|a| <= 1e-4 per tensor. The runs differ only in
# the order of float sums (per-rank means averaged by MPI instead of one mean,
# micro-batch gradients added in turn); SGD with momentum keeps that rounding
# at the 1e-6 level over 20 steps. AdamW divides by sqrt(v) and amplifies
# rounding in near-zero gradients, hence the looser bound for the gpt (1e-3).
#
# The cnn runs without batch-norm (model.batchnorm=false): by default each rank
# normalises with its own micro-batch's statistics, which legitimately differ
# from the whole batch's. With dist.sync_batchnorm they do not: the cnn with
# batch-norm is compared in tests/e2e/sync_batchnorm.sh.
#
# Rank 0's parameters reach every rank (--init on rank 0 alone). Every
# multi-rank run ends with the ranks' parameters compared, bit for bit
# ("replicas_identical" in its JSON line; tests/mpi/replica_check.c shows a
# difference failing).
# `scaletrain launch -n 2` runs a short job. Then a mismatch: two ranks with different model.hidden (an MPMD mpirun) must
# fail before training with a message that names the difference.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE
common=(--set train.steps=20 --set train.threads=1 --set data.num_workers=0 --set data.val=
        --set dist.bucket_cap_mb=0.01 --set dist.timeout_s=30 --json --quiet)

# equiv NAME B TOL ARGS...: the four runs and their comparisons.
equiv() {
    local name=$1 b=$2 tol=$3; shift 3
    local args=("${common[@]}" --set train.batch_size=$((4 * b)) "$@")
    local d=$tmp/$name
    timeout 60 "$bin" train "${args[@]}" --set train.out_dir="$d/n1" >"$d.n1.json" || fail "$name: 1 rank"
    timeout 60 "$bin" train "${args[@]}" --set train.micro_batch_size="$b" --set train.out_dir="$d/acc" \
        >"$d.acc.json" || fail "$name: 1 rank accumulating"
    for n in 2 4; do
        "${mpi[@]}" -np $n "$bin" train "${args[@]}" --set train.out_dir="$d/n$n" >"$d.n$n.json" ||
            fail "$name: $n ranks: $(cat "$d.n$n.json")"
        grep -q '"replicas_identical":true' "$d.n$n.json" || fail "$name: $n ranks: the replicas were not compared"
    done
    for r in acc n2 n4; do
        echo -n "$name $r against 1 rank: "
        /usr/bin/python3 tests/py/weights_diff.py "$d/n1/model.safetensors" "$d/$r/model.safetensors" "$tol" ||
            fail "$name: $r differs"
    done
    echo "$name 4 ranks: $(tail -n 1 "$d.n4.json")"
}

# The replicas' comparison after training finds one ulp on one rank (tests/mpi/replica_check.c).
out=$("${mpi[@]}" -np 2 "$build/tests/mpi/replica_check" 2>&1) || fail "replica_check: $out"

sgd=(--set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.schedule=constant)
# (with dropout: a sample's mask is the same however the batch is split)
equiv mlp 8 1e-4 --set model.type=mlp --set model.hidden=[64,32] --set model.dropout=0.2 "${sgd[@]}"
# Parameters are broadcast from rank 0 at start: rank 0 alone starting from
# weights (--init) trains the same bits as both ranks starting from them
# (without the broadcast rank 1 would start from its own initialisation).
bc=("${common[@]}" --set train.batch_size=32 --set model.type=mlp --set model.hidden=[64,32] "${sgd[@]}")
w=$tmp/mlp/n1/model.safetensors
"${mpi[@]}" -np 2 "$bin" train "${bc[@]}" --init "$w" --set train.out_dir="$tmp/bc-both" >/dev/null ||
    fail "broadcast: both ranks with --init"
"${mpi[@]}" -np 1 "$bin" train "${bc[@]}" --init "$w" --set train.out_dir="$tmp/bc-r0" : \
    -np 1 "$bin" train "${bc[@]}" --set train.out_dir="$tmp/bc-r0" >/dev/null || fail "broadcast: rank 0 with --init"
if cmp -s "$tmp/bc-both/model.safetensors" "$tmp/bc-r0/model.safetensors" &&
    ! cmp -s "$tmp/bc-r0/model.safetensors" "$tmp/mlp/n2/model.safetensors"; then
    echo "broadcast: rank 0's --init reached rank 1 (the same bits as both ranks with --init)"
else
    fail "broadcast: rank 0 alone with --init trains other weights than both ranks with it"
fi
# ... and resumed so (train.c defer_init's all-reduce on every rank, with
# --init or not; the checkpoint's weights, --init not read), at its last
# step: the same bytes
cp "$tmp/bc-r0/model.safetensors" "$tmp/bc-r0.safetensors"
"${mpi[@]}" -np 1 "$bin" train "${bc[@]}" --init "$w" --set train.out_dir="$tmp/bc-r0" --resume auto : \
    -np 1 "$bin" train "${bc[@]}" --set train.out_dir="$tmp/bc-r0" --resume auto >/dev/null ||
    fail "broadcast: rank 0 with --init, resumed"
cmp -s "$tmp/bc-r0.safetensors" "$tmp/bc-r0/model.safetensors" || fail "broadcast: the resume changed the weights"
equiv cnn 4 1e-4 --set model.type=cnn --set model.channels=[8,16] --set model.pool=[1,1] \
    --set model.batchnorm=false "${sgd[@]}"

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
equiv gpt 2 1e-3 --set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" \
    --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 \
    --set optim.lr=1e-3 --set optim.grad_clip=1.0

# The overlap figures are reported and sane on the 4-rank gpt run.
/usr/bin/python3 - "$tmp/gpt.n4.json" <<'PY' || fail "gpt: overlap figures"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ok = r["ranks"] == 4 and r["grad_buckets"] > 1 and r["comm_ms"] >= 0 and 0 <= r["comm_overlap"] <= 1
print("overlap:", "ok" if ok else "FAIL", {k: r[k] for k in ("grad_buckets", "comm_ms", "comm_overlap", "first_bucket_lead_ms")})
sys.exit(0 if ok else 1)
PY

# `scaletrain launch` (mpirun bound to cores: needs 2 cores for 2 ranks) trains on 2 ranks; rank 0 alone speaks.
if [ "$(nproc)" -ge 2 ]; then
    out=$(timeout 60 "$bin" launch -n 2 train --set model.type=mlp \
        --set model.hidden=[16] --set train.batch_size=16 "${common[@]}" --set train.steps=3 \
        --set train.out_dir="$tmp/launch" 2>&1); rc=$?
    echo "launch: exit $rc: $(tail -n 1 <<<"$out")"
    [ $rc -eq 0 ] && [ "$(grep -c '"ranks":2' <<<"$out")" -eq 1 ] && [ -f "$tmp/launch/model.safetensors" ] ||
        fail "launch -n 2: $out"
fi

# Ranks that built different models stop before training, naming the difference.
m=(--set model.type=mlp --set train.batch_size=16 "${common[@]}" --set train.out_dir="$tmp/mm")
out=$("${mpi[@]}" -np 1 "$bin" train "${m[@]}" --set model.hidden=[64] : -np 1 "$bin" train "${m[@]}" \
    --set model.hidden=[32] 2>&1); rc=$?
echo "mismatch: exit $rc: $(grep -m1 'scaletrain: error' <<<"$out")"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "mismatch: exit $rc"
for needle in "the first difference is in model.hidden" "rank 0 has [64]" "rank 1 has [32]"; do
    grep -qF -- "$needle" <<<"$out" || fail "mismatch: no '$needle' in: $out"
done
[ ! -e "$tmp/mm/model.safetensors" ] || fail "mismatch: weights were saved"
e2e_finish
