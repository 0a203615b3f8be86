#!/usr/bin/env bash
# train.activation_checkpointing auto, decided by memory (docs/planner.md):
# GPT-2 124M at micro-batch 192 needs about 60 GiB on an A100-40GB (35 GiB
# usable) without checkpointing, 42 GiB with selective and about 14 GiB with
# blocks, so the plan takes blocks and says why; at micro-batch 16 it stays
# off; an 80 GB H100 holds micro-batch 192 without it (60 GiB). (GPU plans
# count the CUDA backend's flash attention, which saves no P, activations
# and gradients that share memory, and the fused output layer, which keeps
# no logits.) A CPU run prints the choice in its effective configuration.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gpt=(--set model.preset=gpt2-124m --set data.type=tokens --set data.val= --set train.batch_size=192)

"$bin" plan "${gpt[@]}" --set train.micro_batch_size=192 --hw 1xA100-40GB,1xH100 --json >"$tmp/p192.json"
"$bin" plan "${gpt[@]}" --set train.micro_batch_size=16 --hw 1xA100-40GB --json >"$tmp/p16.json"
/usr/bin/python3 - "$tmp/p192.json" "$tmp/p16.json" <<'PY' || fail "plan --json"
import json, sys
a100, h100 = json.load(open(sys.argv[1]))["plans"]
small = json.load(open(sys.argv[2]))["plans"][0]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
check(a100["activation_checkpointing"] == "blocks" and a100["fits"], "A100-40GB, micro 192: blocks, fits")
check(a100["why"]["activation_checkpointing"].startswith("blocks: micro-batch 192 needs"),
      "why: " + a100["why"]["activation_checkpointing"])
check(h100["activation_checkpointing"] == "off", "H100, micro 192: off (" + h100["why"]["activation_checkpointing"] + ")")
check(a100["time"]["step_s"] > 1.2 * small["time"]["step_s"],
      "the recompute costs a forward pass: %.1f ms vs %.1f ms without" % (1e3 * a100["time"]["step_s"], 1e3 * small["time"]["step_s"]))
check(small["activation_checkpointing"] == "off" and
      small["why"]["activation_checkpointing"].startswith("off: micro-batch 16 fits without it"),
      "A100-40GB, micro 16: " + small["why"]["activation_checkpointing"])
sys.exit(0 if ok else 1)
PY
"$bin" plan "${gpt[@]}" --set train.micro_batch_size=192 --hw 1xA100-40GB | tee "$tmp/table.txt"
grep -q "ddp+ckpt" "$tmp/table.txt" || fail "the table does not mark checkpointing"

# a CPU run: the choice and its reason in the effective configuration
head -c 20000 /dev/urandom | base64 >"$tmp/text.txt"
"$bin" data tokenize "$tmp/tok.bin" "$tmp/text.txt" >/dev/null
"$bin" train --set model.type=gpt --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
    --set model.block_size=32 --set data.type=tokens --set data.train="$tmp/tok.bin" --set data.val= \
    --set train.batch_size=8 --set train.steps=1 --set train.threads=1 --set train.out_dir="$tmp/run" \
    --set log.progress=off >"$tmp/train.txt"
grep -Eq "activation_checkpointing: +off +# auto: off: micro-batch 8 fits without it" "$tmp/train.txt" ||
    fail "effective config: $(grep activation_checkpointing "$tmp/train.txt")"
echo "plan_checkpointing: ok"
