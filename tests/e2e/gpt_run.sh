#!/usr/bin/env bash
# End to end: tokenize a text file byte by byte, train a tiny GPT on it from a
# YAML file, and check that the loss falls and tokens/s is reported.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Any text will do: make one that has structure to learn.
for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt"
head -c 4000 "$tmp/text.txt" >"$tmp/val.txt"
"$bin" data tokenize "$tmp/val.tokens" "$tmp/val.txt"
"$bin" data inspect "$tmp/train.tokens" | grep -q "vocabulary 256"
cat >"$tmp/run.yaml" <<YAML
model: { type: gpt, n_layer: 2, n_head: 2, n_embd: 64, block_size: 64 }
data:
  type: tokens
  train: $tmp/train.tokens
  val: $tmp/val.tokens
train: { steps: 60, batch_size: 16, micro_batch_size: 8, out_dir: $tmp/run }
optim: { lr: 3e-3, warmup_steps: 5, grad_clip: 1.0, weight_decay: 0.1 }
log: { every: 20 }
YAML
"$bin" train "$tmp/run.yaml" --json | tee "$tmp/out.txt"
tail -n 1 "$tmp/out.txt" >"$tmp/r.json"
# model.fused_head auto, resolved as the training graph took it, with why
grep -qE "^  fused_head: +(on|off) +# auto: (on|off): the logits \(8 x 64 x 256\) take (more|less) memory than the fused head's chunks$" "$tmp/out.txt" ||
    { echo "FAIL: fused_head is not resolved with its reason: $(grep fused_head "$tmp/out.txt")"; exit 1; }
/usr/bin/python3 - "$tmp/r.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
ok = r["steps"] == 60 and math.isfinite(r["loss"]) and r["train_loss"] < 0.6 * r["first_loss"] \
     and r["tokens_per_s"] > 0 and r["loss"] < math.log(256)
print("ok" if ok else "FAIL: the loss did not fall as expected", r)
sys.exit(0 if ok else 1)
PY
"$bin" data inspect "$tmp/run/model.safetensors" | grep -q "h.1.attn.c_attn.weight"
