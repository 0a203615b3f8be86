#!/usr/bin/env bash
# ZeRO shards the fp32 masters of a bf16/fp16 run (docs/distributed.md,
# "Sharded masters"), under real mpirun on the CPU:
# - dist.deterministic: the gpt in bf16 and the mlp in fp16 (loss scaling),
#   zero1 and zero2 on 2 and 4 ranks, save the same bits as 1 rank
#   accumulating the same micro-batches (cmp of the weight files, which each
#   run writes from the masters gathered over its ranks), and the ranks end
#   with the same compute copy (replicas_identical).
# - Memory: each rank holds 4 B x S of masters (resident pages, measured),
#   the formula's figure and 1/N of one rank's to within a shard's padding;
#   fp32 ZeRO and bf16 DDP keep every master (masters_sharded false).
# - Checkpoints: 4 deterministic bf16 steps under zero1 on 4 ranks, resumed
#   to 8 on 2 ranks (zero2) and on 1 (ddp): the same bits as 8 steps on 1
#   rank; the step-4 checkpoint's weights are those of 1 rank's step 4.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_tmpdir
e2e_mpi 60
export OMP_WAIT_POLICY=PASSIVE

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null || fail "tokenize"
common=(--set train.threads=1 --set data.num_workers=0 --set data.val= --set dist.bucket_cap_mb=0.02
        --set dist.timeout_s=30 --set dist.deterministic=true --set optim.schedule=constant
        --set optim.warmup_steps=2 --json --quiet) # (4 + 4 steps follow the schedule of 8)
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set model.n_layer=2
     --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set optim.lr=1e-3
     --set optim.grad_clip=1.0 --set train.batch_size=8 --set train.micro_batch_size=2 --set precision=bf16)
mlp=(--set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32 --set train.micro_batch_size=8
     --set precision=fp16 --set optim.grad_clip=0.5)

# run NAME N STRATEGY ARGS...: train on N ranks (1: no mpirun) into $tmp/NAME, JSON in $tmp/NAME.json.
run() {
    local name=$1 n=$2 st=$3; shift 3
    local cmd=("$bin" train "${common[@]}" --set dist.strategy="$st" --set train.out_dir="$tmp/$name" "$@")
    if [ "$n" -eq 1 ]; then timeout 60 "${cmd[@]}"; else "${mpi[@]}" -np "$n" "${cmd[@]}"; fi \
        >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}

same() { # REF NAME WHAT
    if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then
        echo "$3: the same bits"
    else
        fail "$3: the weights differ"
    fi
}

for model in gpt mlp; do
    declare -n args=$model
    run "$model-1" 1 ddp --set train.steps=8 "${args[@]}"
    for st in zero1 zero2; do
        for n in 2 4; do
            run "$model-$st-$n" "$n" "$st" --set train.steps=8 "${args[@]}"
            same "$model-1" "$model-$st-$n" "$model $st on $n ranks against 1 rank"
        done
    done
done
run gpt-ddp-2 2 ddp --set train.steps=8 "${gpt[@]}"
run gpt-fp32-zero1-2 2 zero1 --set train.steps=8 "${gpt[@]}" --set precision=fp32
[ "$fails" -eq 0 ] || e2e_finish ""

/usr/bin/python3 - "$tmp" <<'PY' || fail "the masters' memory"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, "tests/py")
from runs import last as last_of


def last(n):
    return last_of(f"{tmp}/{n}.json")
ok = True
for model in ("gpt", "mlp"):
    one = last(f"{model}-1")
    good = not one["masters_sharded"] and one["master_bytes"] == one["master_bytes_predicted"]
    ok &= good
    print(f"{model} 1 rank: {one['master_bytes']} B of masters:", "ok" if good else "FAIL")
    for st in ("zero1", "zero2"):
        for n in (2, 4):
            r = last(f"{model}-{st}-{n}")
            # each rank's shard: 1/N of the arena, to a page (1024 elements) of padding
            good = (r["masters_sharded"] and r["replicas_identical"] and r["master_bytes"] == r["master_bytes_predicted"]
                    and abs(r["master_bytes"] - one["master_bytes"] / n) <= 4 * 1024)
            ok &= good
            print(f"{model} {st} {n} ranks: {r['master_bytes']} B of masters (1 rank {one['master_bytes']},",
                  f"formula {r['master_bytes_predicted']}), replicas identical {r['replicas_identical']}:",
                  "ok" if good else "FAIL")
for name in ("gpt-ddp-2", "gpt-fp32-zero1-2"):
    r = last(name)
    good = not r["masters_sharded"] and r["master_bytes"] == last("gpt-1")["master_bytes"]
    ok &= good
    print(f"{name}: masters whole ({r['master_bytes']} B):", "ok" if good else "FAIL")
sys.exit(0 if ok else 1)
PY

# Checkpoints: saved with sharded masters, resumed elsewhere.
run ck-1-half 1 ddp --set train.steps=4 "${gpt[@]}"
run ck-4-half 4 zero1 --set train.steps=4 "${gpt[@]}"
if cmp -s "$tmp/ck-1-half/ckpt/step-4/model.safetensors" "$tmp/ck-4-half/ckpt/step-4/model.safetensors"; then
    echo "the step-4 checkpoint of zero1 on 4 ranks: the weights of 1 rank's"
else
    fail "the step-4 checkpoint of zero1 on 4 ranks holds other weights than 1 rank's"
fi
for to in "2 zero2" "1 ddp"; do
    set -- $to
    rm -rf "$tmp/ck-to-$1"
    cp -r "$tmp/ck-4-half" "$tmp/ck-to-$1"
    run "ck-to-$1" "$1" "$2" --set train.steps=8 "${gpt[@]}" --resume auto
    same gpt-1 "ck-to-$1" "4 bf16 steps on 4 ranks (zero1) + 4 on $1 ($2) against 8 on 1 rank"
done
e2e_finish
