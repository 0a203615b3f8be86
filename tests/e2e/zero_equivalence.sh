#!/usr/bin/env bash
# ZeRO and deterministic mode under real mpirun (docs/distributed.md):
# - zero1 and zero2 on 1, 2 and 4 ranks save the same weights as 1 rank and
#   as DDP on 4 ranks after 10 steps, within ddp_equivalence.sh's tolerance
#   (1e-4 relative for SGD momentum, 1e-3 for AdamW on the gpt), with
#   gradient accumulation (the global batch is 4 micro-batches: 4 per rank on
#   1 rank, 2 on 2, 1 on 4) and gradient clipping to the global norm; DDP
#   on 2 ranks accumulating 2 micro-steps each matches too.
# - Accumulation syncs only on the last micro-step: the buckets are reduced
#   once per step under ddp and zero1 (grad_syncs in --json), every
#   micro-step under zero2.
# - The memory each rank holds, measured (--json): optimizer state falls as
#   1/N for zero1 and zero2, gradients as 1/N for zero2 (to within one
#   shard's page padding), and each equals the printed formula's prediction.
# - ZeRO's reductions overlap backward (the first starts before it ends).
# - dist.deterministic: 2 and 4 ranks (ddp, zero1, zero2) save the same bits
#   as 1 rank accumulating the 4 micro-batches (cmp of the weight files), for
#   the mlp (dropout, clipping), the cnn (no batch-norm) and the gpt (AdamW,
#   clipping).
# - fp16 under zero2: the overflow check and unscaling touch only the
#   rank's shard, so its resident gradients stay at the formula's 1/N.
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE
common=(--set train.steps=10 --set train.threads=1 --set data.num_workers=0 --set data.val=
        --set dist.bucket_cap_mb=0.02 --set dist.timeout_s=30 --json --quiet)

# run NAME N ARGS...: train on N ranks (1: no mpirun) into $tmp/NAME, JSON in $tmp/NAME.json.
run() {
    local name=$1 n=$2; shift 2
    if [ "$n" -eq 1 ]; then
        timeout 60 "$bin" train "$@" --set train.out_dir="$tmp/$name" >"$tmp/$name.json" 2>&1
    else
        "${mpi[@]}" -np "$n" "$bin" train "$@" --set train.out_dir="$tmp/$name" >"$tmp/$name.json" 2>&1
    fi || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}

# equiv NAME B TOL ARGS...
equiv() {
    local name=$1 b=$2 tol=$3; shift 3
    local args=("${common[@]}" --set train.batch_size=$((4 * b)) --set train.micro_batch_size="$b" "$@")
    run "$name-ref" 1 "${args[@]}"
    run "$name-ddp4" 4 "${args[@]}"
    run "$name-ddp2" 2 "${args[@]}" # 2 micro-steps per rank
    echo -n "$name ddp on 2 ranks, 2 micro-steps each, against ref: "
    /usr/bin/python3 tests/py/weights_diff.py "$tmp/$name-ref/model.safetensors" "$tmp/$name-ddp2/model.safetensors" \
        "$tol" || fail "$name: ddp on 2 ranks with accumulation differs from ref"
    for st in zero1 zero2; do
        for n in 1 2 4; do
            run "$name-$st-$n" "$n" "${args[@]}" --set dist.strategy=$st
            for ref in ref ddp4; do
                echo -n "$name $st on $n rank(s) against $ref: "
                /usr/bin/python3 tests/py/weights_diff.py "$tmp/$name-$ref/model.safetensors" \
                    "$tmp/$name-$st-$n/model.safetensors" "$tol" || fail "$name: $st on $n ranks differs from $ref"
            done
        done
    done
    /usr/bin/python3 - "$tmp" "$name" <<'PY' || fail "$name: memory figures"
import json, sys
tmp, name = sys.argv[1], sys.argv[2]
sys.path.insert(0, "tests/py")
from runs import last as last_of


def last(n):
    return last_of(f"{tmp}/{n}.json")
ok = True
for st in ("zero1", "zero2"):
    r = {n: last(f"{name}-{st}-{n}") for n in (1, 2, 4)}
    for n in (2, 4):
        for key, falls in (("optim_state_bytes", True), ("grad_bytes", st == "zero2")):
            one, mine = r[1][key], r[n][key]
            want = one / n if falls else one
            # one shard's padding: up to 1024 elements of each of 2 moments per rank
            good = abs(mine - want) <= 2 * 4 * 1024 + 4096 and mine > 0
            pred = r[n][key + "_predicted"] if key == "optim_state_bytes" else r[n]["grad_bytes_predicted"]
            good = good and mine == pred
            ok &= good
            print(f"{name} {st} {n} ranks: {key} {mine} (1 rank {one}, 1/N {want:.0f}, formula {pred}):",
                  "ok" if good else "FAIL")
sys.exit(0 if ok else 1)
PY
    # Accumulation syncs only on the last micro-step (ddp, zero1): one
    # reduction of the buckets per step; zero2 reduces every micro-step.
    /usr/bin/python3 - "$tmp" "$name" <<'PY' || fail "$name: gradient syncs per step"
import sys
sys.path.insert(0, "tests/py")
from runs import last as last_of
tmp, name = sys.argv[1], sys.argv[2]
ok = True
for run, micro in (("ddp2", 2), ("ddp4", 1), ("zero1-2", 2), ("zero1-4", 1), ("zero2-2", 2), ("zero2-4", 1)):
    r = last_of(f"{tmp}/{name}-{run}.json")
    want = r["steps"] * (micro if run.startswith("zero2") else 1)
    good = r["grad_syncs"] == want
    ok &= good
    print(f"{name} {run}: {micro} micro-step(s) per rank, {r['steps']} steps, grad_syncs {r['grad_syncs']}",
          f"(want {want}):", "ok" if good else "FAIL")
sys.exit(0 if ok else 1)
PY
}

sgd=(--set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.schedule=constant
     --set optim.grad_clip=0.5)
mlp=(--set model.type=mlp --set model.hidden=[64,32])
equiv mlp 4 1e-4 "${mlp[@]}" "${sgd[@]}"

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set model.n_layer=2
     --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set optim.lr=1e-3 --set optim.grad_clip=1.0)
equiv gpt 2 1e-3 "${gpt[@]}"
# ZeRO keeps DDP's overlap: on the 4-rank gpt the first bucket's reductions
# start before backward ends. zero2's gradient peak during backward is
# reported (it depends on how soon each bucket's reductions finish, so only
# its bounds are checked: at least the shard, at most the padded arena).
/usr/bin/python3 - "$tmp" <<'PY' || fail "gpt: zero overlap and peak"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, "tests/py")
from runs import last as last_of


def last(n):
    return last_of(f"{tmp}/{n}.json")
ok = True
for st in ("zero1", "zero2"):
    r = last(f"gpt-{st}-4")
    good = r["grad_buckets"] > 1 and r["first_bucket_lead_ms"] > 0 and 0 <= r["comm_overlap"] <= 1
    ok &= good
    print(f"gpt {st} 4 ranks:", {k: r[k] for k in ("grad_buckets", "comm_ms", "comm_overlap", "first_bucket_lead_ms")},
          "ok" if good else "FAIL")
r = last("gpt-zero2-4")
good = r["grad_bytes"] <= r["grad_peak_bytes"] <= 4 * r["grad_bytes"]
ok &= good
print(f"gpt zero2 4 ranks: gradient peak during backward {r['grad_peak_bytes']} B, between steps",
      f"{r['grad_bytes']} B:", "ok" if good else "FAIL")
sys.exit(0 if ok else 1)
PY

# Deterministic mode: the same bits whatever the number of ranks.
det() {
    local name=$1 b=$2; shift 2
    local args=("${common[@]}" --set train.batch_size=$((4 * b)) --set train.micro_batch_size="$b"
                --set dist.deterministic=true "$@")
    run "$name-det-1" 1 "${args[@]}"
    for n in 2 4; do
        for st in ddp zero1 zero2; do
            run "$name-det-$st-$n" "$n" "${args[@]}" --set dist.strategy=$st
            if cmp -s "$tmp/$name-det-1/model.safetensors" "$tmp/$name-det-$st-$n/model.safetensors"; then
                echo "$name deterministic $st on $n ranks: the same bits as 1 rank accumulating 4 micro-batches"
            else
                fail "$name deterministic $st on $n ranks: the weights differ from 1 rank's"
                /usr/bin/python3 tests/py/weights_diff.py "$tmp/$name-det-1/model.safetensors" \
                    "$tmp/$name-det-$st-$n/model.safetensors" 0
            fi
        done
    done
}
det mlp 4 "${mlp[@]}" "${sgd[@]}" --set model.dropout=0.1
# (without batch-norm: its running statistics are each rank's own, docs/distributed.md)
det cnn 4 --set model.type=cnn --set model.channels=[8,16] --set model.pool=[1,1] --set model.batchnorm=false \
    "${sgd[@]}"
det gpt 2 "${gpt[@]}"
# fp16 under zero2 on the CPU: the loss scale's overflow check and unscaling
# cover this rank's shard alone, so the released pages stay released (they
# were written back whole every step: grad_bytes was P, not P/N)
run mlp-zero2-fp16 2 "${common[@]}" "${mlp[@]}" "${sgd[@]}" --set train.batch_size=16 --set precision=fp16 \
    --set dist.strategy=zero2
/usr/bin/python3 - "$tmp" <<'PY' || fail "mlp zero2 fp16: resident gradients"
import sys
sys.path.insert(0, "tests/py")
from runs import last
r = last(f"{sys.argv[1]}/mlp-zero2-fp16.json")
good = r["grad_bytes"] == r["grad_bytes_predicted"]
print(f"mlp zero2 fp16 2 ranks: grad_bytes {r['grad_bytes']} (formula {r['grad_bytes_predicted']}):",
      "ok" if good else "FAIL")
sys.exit(0 if good else 1)
PY
e2e_finish
