#!/usr/bin/env bash
# Mixed precision end to end (docs/precision.md): the mlp on Fashion-MNIST and
# a tiny GPT trained in fp32, bf16 and fp16 from the same seed; the low-
# precision runs must stay finite and track fp32.
#
# Tolerances (measured here, then given room):
#   first-step loss (forward only, the same weights): |low - fp32| <= 0.005
#     (measured: bf16 4e-5 gpt, 2e-4 mlp; fp16 under 1e-5)
#   eval loss after 40 steps: |low - fp32| <= 0.02 + 2% of fp32's (measured:
#     bf16 2e-5 gpt, 4e-4 mlp; fp16 8e-5, 2e-4; bf16 after 60 gpt steps 0.004)
# fp16 at the default scale 65536 must skip no step on these models.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
head -c 4000 "$tmp/text.txt" >"$tmp/val.txt"
"$bin" data tokenize "$tmp/val.tokens" "$tmp/val.txt" >/dev/null
cat >"$tmp/gpt.yaml" <<YAML
model: { type: gpt, n_layer: 2, n_head: 2, n_embd: 64, block_size: 64 }
data: { type: tokens, train: $tmp/train.tokens, val: $tmp/val.tokens }
train: { steps: 40, batch_size: 16, micro_batch_size: 8, threads: 1 }
optim: { lr: 3e-3, warmup_steps: 5, grad_clip: 1.0, weight_decay: 0.1 }
YAML
cat >"$tmp/mlp.yaml" <<YAML
model: { type: mlp, hidden: [128] }
train: { steps: 40, batch_size: 64, eval_steps: 20, threads: 1 }
optim: { lr: 1e-3 }
YAML

for model in gpt mlp; do
    for p in fp32 bf16 fp16; do
        timeout 120 "$bin" train "$tmp/$model.yaml" --set precision=$p --set train.out_dir="$tmp/$model-$p" \
            --set data.num_workers=0 --set log.peak_gflops=100 --json --quiet | tail -n 1 >"$tmp/$model-$p.json" ||
            fail "$model $p: the run failed"
    done
    /usr/bin/python3 - "$tmp" "$model" <<'PY' || fail "$model: low precision does not track fp32"
import json, math, sys
tmp, model = sys.argv[1], sys.argv[2]
r = {p: json.load(open(f"{tmp}/{model}-{p}.json")) for p in ("fp32", "bf16", "fp16")}
ok = True
for p in ("bf16", "fp16"):
    d0 = abs(r[p]["first_loss"] - r["fp32"]["first_loss"])
    d1 = abs(r[p]["eval_loss"] - r["fp32"]["eval_loss"])
    tol1 = 0.02 + 0.02 * r["fp32"]["eval_loss"]
    good = math.isfinite(r[p]["eval_loss"]) and d0 <= 0.005 and d1 <= tol1
    print(f"{model} {p}: first loss {r[p]['first_loss']:.5f} (fp32 {r['fp32']['first_loss']:.5f}, diff {d0:.2g}), "
          f"eval loss {r[p]['eval_loss']:.5f} (fp32 {r['fp32']['eval_loss']:.5f}, diff {d1:.2g} <= {tol1:.2g})"
          f"{'' if good else '  FAIL'}")
    ok &= good
fp16 = r["fp16"]
if not (fp16.get("skipped_steps") == 0 and fp16.get("loss_scale") == 65536):
    print(f"{model} fp16: skipped_steps {fp16.get('skipped_steps')}, loss_scale {fp16.get('loss_scale')}: want 0 and 65536  FAIL")
    ok = False
if "loss_scale" in r["bf16"] or "loss_scale" in r["fp32"]:
    print(f"{model}: bf16/fp32 must not report a loss scale  FAIL")
    ok = False
sys.exit(0 if ok else 1)
PY
done
# metrics.jsonl of an fp16 run carries the scale and the skipped steps.
grep -q '"loss_scale":65536' "$tmp/gpt-fp16/metrics.jsonl" && grep -q '"skipped_steps":0' "$tmp/gpt-fp16/metrics.jsonl" ||
    fail "gpt-fp16/metrics.jsonl lacks loss_scale / skipped_steps"
e2e_finish ok
