#!/usr/bin/env bash
# A checkpoint is the run's, not the device's: a run saved on the CPU goes on
# on a GPU and one saved on GPUs goes on on the CPU, to the weights of the run
# that never stopped. In the CUDA emulator's build (make emu), 4 + 4 steps
# (3 + 3 for the gpt) against 8 (6) uninterrupted on the CPU, within 1e-4 of
# each tensor's largest (the devices differ only in the order of float sums):
#  1. the mlp with AdamW and clipping in fp32: saved on the CPU, resumed on an
#     emulated GPU; and in bf16 (fp32 masters on both), within 1e-3;
#  2. the mlp in fp16: saved by 2 emulated GPUs under ZeRO-2 (an optimizer
#     file per shard, the loss scale in state.json), resumed on 1 CPU rank
#     (DDP): the weights, and the final checkpoint's loss scale (scale, good
#     steps, skipped steps) that of the uninterrupted run;
#  3. a gpt with a vocabulary of 300 and the fused head, whose products a GPU
#     runs on the vocabulary padded to 320 (src/cuda/linear_ce.cu): saved on
#     an emulated GPU, resumed on the CPU, and the other way round (the
#     padding never reaches a checkpoint). SGD with momentum: AdamW's first
#     steps turn the devices' float-order differences in the attention's
#     near-zero bias gradients into 2.5e-4 of its largest between two
#     uninterrupted runs, one on each device.
# Given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_need_emu
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE

common=(--set train.threads=1 --set data.num_workers=0 --set data.val= --set log.progress=off --json --quiet
        --set optim.type=adamw --set optim.lr=0.003 --set optim.schedule=constant --set optim.warmup_steps=2
        --set optim.grad_clip=0.5 --set dist.timeout_s=60)
mlp=(--set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32)

# run NAME N DEVICE ARGS...: train on N ranks (1: no mpirun) into $tmp/NAME, output in $tmp/NAME.json.
run() {
    local name=$1 n=$2 dev=$3; shift 3
    local cmd=("$bin" train "${common[@]}" --set train.device="$dev" --set train.out_dir="$tmp/$name" "$@")
    if [ "$n" -eq 1 ]; then timeout 120 "${cmd[@]}"; else "${mpi[@]}" -np "$n" "${cmd[@]}"; fi \
        >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}
# across NAME STEPS FROM_RUN N DEVICE ARGS...: copy FROM_RUN's output folder to NAME and resume it to STEPS
# on N ranks of DEVICE.
across() {
    local name=$1 steps=$2 from=$3 n=$4 dev=$5; shift 5
    rm -rf "${tmp:?}/$name"
    cp -r "$tmp/$from" "$tmp/$name"
    run "$name" "$n" "$dev" "$@" --set train.steps="$steps" --resume auto
    local ran want=$((steps - $(cat "$tmp/$from/ckpt/latest" | tr -dc 0-9)))
    ran=$(grep -o '"steps_run":[0-9]*' "$tmp/$name.json" | tail -1 | cut -d: -f2)
    [ "$ran" = "$want" ] || fail "$name: ran ${ran:-no} steps after resuming, want $want (did it resume?)"
}
same() { # same REFERENCE RUN TOL WHAT
    echo -n "$4: "
    /usr/bin/python3 tests/py/weights_diff.py "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" "$3" ||
        fail "$4: the weights differ from the uninterrupted run's"
}

# 1. CPU -> GPU, fp32 and bf16
for p in fp32 bf16; do
    tol=1e-4
    [ "$p" = bf16 ] && tol=1e-3
    run "cpu8-$p" 1 cpu "${mlp[@]}" --set precision="$p" --set train.steps=8
    run "cpu4-$p" 1 cpu "${mlp[@]}" --set precision="$p" --set train.steps=4
    across "c2g-$p" 8 "cpu4-$p" 1 cuda "${mlp[@]}" --set precision="$p"
    same "cpu8-$p" "c2g-$p" "$tol" "mlp $p: 4 steps on the CPU + 4 on an emulated GPU"
done

# 2. 2 GPUs under ZeRO-2 -> 1 CPU rank, fp16 with its loss scale
run cpu8-fp16 1 cpu "${mlp[@]}" --set precision=fp16 --set train.steps=8
run gpu4-fp16 2 cuda "${mlp[@]}" --set precision=fp16 --set dist.strategy=zero2 --set train.steps=4
for k in 0 1; do
    [ -f "$tmp/gpu4-fp16/ckpt/step-4/optim-rank$k.safetensors" ] || fail "no optim-rank$k.safetensors in gpu4-fp16's step-4"
done
across g2c-fp16 8 gpu4-fp16 1 cpu "${mlp[@]}" --set precision=fp16
same cpu8-fp16 g2c-fp16 1e-4 "mlp fp16: 4 steps on 2 emulated GPUs (zero2) + 4 on 1 CPU rank"
/usr/bin/python3 - "$tmp/cpu8-fp16/ckpt/step-8/state.json" "$tmp/g2c-fp16/ckpt/step-8/state.json" <<'PY' ||
import json, sys
a, b = (json.load(open(p))["loss_scale"] for p in sys.argv[1:])
print(f"loss scale at step 8: uninterrupted {a}, resumed {b}")
sys.exit(0 if a == b and a["good_steps"] > 0 else 1)
PY
    fail "mlp fp16: the resumed run's loss scale is not the uninterrupted run's"

# 3. a gpt whose vocabulary the GPU pads, both ways
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null || fail "tokenize"
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set model.vocab_size=300
     --set model.fused_head=on --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
     --set model.block_size=32 --set train.batch_size=4 --set precision=fp32
     --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.grad_clip=1.0)
run gpt-cpu6 1 cpu "${gpt[@]}" --set train.steps=6
run gpt-cpu3 1 cpu "${gpt[@]}" --set train.steps=3
run gpt-gpu3 1 cuda "${gpt[@]}" --set train.steps=3
across gpt-c2g 6 gpt-cpu3 1 cuda "${gpt[@]}"
across gpt-g2c 6 gpt-gpu3 1 cpu "${gpt[@]}"
same gpt-cpu6 gpt-c2g 1e-4 "gpt (vocabulary 300): 3 steps on the CPU + 3 on an emulated GPU"
same gpt-cpu6 gpt-g2c 1e-4 "gpt (vocabulary 300): 3 steps on an emulated GPU + 3 on the CPU"

e2e_finish "checkpoints move between the CPU and emulated GPUs (fp32, bf16, fp16 with its loss scale, ZeRO-2 shards to one rank, a padded vocabulary) to the uninterrupted run's weights"
