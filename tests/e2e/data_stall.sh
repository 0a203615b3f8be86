#!/usr/bin/env bash
# data.timeout_s: a loader thread stuck in its batch for good (the loader's
# test knob SCALETRAIN_TEST_LOADER_STALL=40: the worker that takes micro-batch
# 40 stops there, as behind a read of a hung network file system) does not
# hang the run. A tiny GPT (CPU, 1 loader thread, data.timeout_s 1):
#  1. exits 1 with a message naming the batch, the wait and the key, and,
#     its 40 steps whole, saves them first (train.checkpoint_every 0 and
#     train.checkpoint_every_s 0: no other checkpoint); the stuck thread does
#     not keep the process from ending;
#  2. resumed without the stall to step 60, ends with the weights of an
#     uninterrupted 60-step run, bit for bit.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 2000); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
run=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
     --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=16
     --set train.batch_size=4 --set train.device=cpu --set train.threads=1 --set data.num_workers=1
     --set optim.schedule=constant --set train.eval_every=0 --set train.checkpoint_every=0
     --set train.checkpoint_every_s=0 --set log.progress=off)

out=$(SCALETRAIN_TEST_LOADER_STALL=40 timeout 120 "$bin" "${run[@]}" --set data.timeout_s=1 --set train.steps=60 \
    --set train.out_dir="$tmp/o" 2>&1); rc=$?
err=$(grep "error:" <<<"$out")
[ $rc -eq 1 ] || fail "a stalled loader: exit $rc (want 1): $(tail -n 3 <<<"$out")"
grep -q "data loader: batch 40 is not ready after 1 s (data.timeout_s 1): a worker has been assembling it" <<<"$err" ||
    fail "no message naming the batch, the wait and the key: $err"
grep -q "the weights and optimizer state after step 40 were saved first, to $tmp/o/ckpt/step-40" <<<"$err" ||
    fail "the 40 steps were not saved first: $err"
[ "$(ls "$tmp/o/ckpt" 2>/dev/null | tr '\n' ' ')" = "latest step-40 " ] ||
    fail "checkpoints: $(ls "$tmp/o/ckpt" 2>/dev/null | tr '\n' ' ')"
[ "$fails" -ne 0 ] || echo "stalled at batch 40: exit 1 after the 1 s wait, its 40 steps saved"

if [ "$fails" -eq 0 ]; then
    timeout 120 "$bin" "${run[@]}" --set train.steps=60 --set train.out_dir="$tmp/o" --resume auto \
        >"$tmp/resumed.log" 2>&1 || fail "resumed: exit $?: $(grep -i error "$tmp/resumed.log" | head -2)"
    timeout 120 "$bin" "${run[@]}" --set train.steps=60 --set train.out_dir="$tmp/ref" >"$tmp/ref.log" 2>&1 ||
        fail "uninterrupted: exit $?: $(tail -2 "$tmp/ref.log")"
    cmp -s "$tmp/ref/model.safetensors" "$tmp/o/model.safetensors" &&
        echo "resumed from step 40 to 60: the uninterrupted run's weights bit for bit" ||
        fail "resumed from step 40: other weights than the uninterrupted run's"
fi
e2e_finish "a loader thread stuck for good ends the run after data.timeout_s, naming the batch, its steps saved"
