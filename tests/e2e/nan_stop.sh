#!/usr/bin/env bash
# A loss that becomes NaN stops the run before anything keeps what followed:
# SGD at lr 9.9 with momentum 0.99 on a tiny GPT diverges, its loss NaN at
# a step N between 5 and 20 (6 or 7 on the machines seen).
#  1. One rank: exit 1 and "the loss became NaN at step N; lower optim.lr or
#     set optim.grad_clip" (the value as the user reads it: not "-nan");
#     the checkpoints (train.checkpoint_every 4) are those of the steps
#     before N, ckpt/latest the last of them, no model.safetensors;
#     `scaletrain eval --init` reads that checkpoint.
#  2. Two ranks (scaletrain launch): every rank names the same step, and
#     the checkpoints are as in 1.
# tests/e2e/emu_nan_stop.sh does the same on (emulated) GPUs, where the
# loss is read only on some steps.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
source "$(dirname "$0")/../lib/nan_stop.sh"
run+=(--set train.device=cpu)
timeout 120 "$bin" "${run[@]}" --set train.out_dir="$tmp/one" >"$tmp/one.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "one rank: exit $rc, not 1"
check_stop "one rank" "$tmp/one" "$tmp/one.log"
one_step=$nan_step
out=$(timeout 120 "$bin" eval --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" \
    --set data.val="$tmp/t.tokens" \
    --set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.block_size=32 \
    --set train.device=cpu --init "$tmp/one/ckpt" 2>&1)
grep -qE "the checkpoint of step $((((one_step - 1) / 4) * 4))\)" <<<"$out" || fail "eval --init of the kept checkpoint: $out"

check_two_ranks "two ranks"
e2e_finish "a NaN loss stops the run at its step, the checkpoint before it kept"
