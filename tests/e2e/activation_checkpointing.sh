#!/usr/bin/env bash
# train.activation_checkpointing: blocks (and, for the gpt, selective)
# trains the same weights, bit for bit, as off (a small gpt with dropout and
# a cnn with batch-norm, 5 steps each), reports less activation memory, and
# says which it used; selective on a cnn warns that it recomputes nothing.
# The blocks runs take their batches from 2 loader workers: the graph's
# input is the loader's ring slot (src/train/feed.h), and the recompute in
# backward reads it again, so a slot given back before backward ends would
# be refilled under it.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null || fail tokenize
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set data.val=
     --set model.n_layer=3 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
     --set model.dropout=0.1 --set train.batch_size=4)
cnn=(--set model.type=cnn --set model.channels=[8,8] --set model.pool=[1,0] --set train.batch_size=16 --set data.val=)
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then models="gpt cnn"; else models=gpt; fi
for name in $models; do
    declare -n args=$name
    modes="off blocks"; [ $name = gpt ] && modes="off selective blocks"
    for mode in $modes; do
        workers=0; [ $mode = blocks ] && workers=2
        timeout 120 "$bin" train "${args[@]}" --set train.steps=5 --set train.threads=1 --set data.num_workers=$workers \
            --set train.activation_checkpointing=$mode --set train.out_dir="$tmp/$name-$mode" --json \
            >"$tmp/$name-$mode.out" 2>&1 || fail "$name $mode: $(tail -n 3 "$tmp/$name-$mode.out")"
        grep -q "checkpointing $mode" "$tmp/$name-$mode.out" || fail "$name $mode: not reported"
    done
    for mode in $modes; do
        [ $mode = off ] && continue
        cmp -s "$tmp/$name-off/model.safetensors" "$tmp/$name-$mode/model.safetensors" &&
            echo "$name: $mode and off saved the same weights, bit for bit" || fail "$name $mode: weights differ"
        /usr/bin/python3 - "$tmp/$name-off.out" "$tmp/$name-$mode.out" $mode <<'PY' || fail "$name $mode: activation memory"
import json, sys
a, b = (json.loads(open(p).read().strip().splitlines()[-1])["activation_mib"] for p in sys.argv[1:3])
print(f"activations with their gradients: {a:.3f} MiB off, {b:.3f} MiB {sys.argv[3]}")
sys.exit(0 if 0 < b < a else 1)
PY
    done
done
# selective on a model with nothing to recompute (the cnn's norms are
# batch norms): it trains, and says that blocks is the setting that helps
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    timeout 120 "$bin" train "${cnn[@]}" --set train.steps=1 --set train.threads=1 \
        --set train.activation_checkpointing=selective --set train.out_dir="$tmp/cnn-selective" \
        >"$tmp/cnn-selective.out" 2>&1 || fail "cnn selective: $(tail -n 3 "$tmp/cnn-selective.out")"
    grep -q "warning: train.activation_checkpointing: selective recomputes nothing in this cnn" \
        "$tmp/cnn-selective.out" || fail "cnn selective: no warning"
    echo "cnn: selective trains and warns that it recomputes nothing"
fi
e2e_finish ok
