#!/usr/bin/env bash
# End to end: the default run (CNN on Fashion-MNIST) on a reduced number of
# steps: the loss falls, test accuracy is far above chance (10%), the saved
# weights evaluate to the same accuracy, and the last line is JSON. Then
# --init's other forms: the run directory, its checkpoint folder, `latest`
# and one checkpoint give the weights they name (and say which); a damaged
# latest checkpoint is passed over for the one before, saying so, and named
# when asked for directly; `data inspect` of the folder marks it damaged and
# the one before good, and describes a checkpoint.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "default_run: skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
    exit 77
fi
common=(--set train.steps=80 --set train.eval_steps=16 --set train.out_dir="$tmp/run" --set log.every=20
    --set train.checkpoint_every=40)
"$bin" train "${common[@]}" --json >"$tmp/out.txt"
cat "$tmp/out.txt"
tail -n 1 "$tmp/out.txt" >"$tmp/train.json"
"$bin" eval --init "$tmp/run/model.safetensors" --set train.eval_steps=16 --json >"$tmp/eval.txt"
cat "$tmp/eval.txt"
tail -n 1 "$tmp/eval.txt" >"$tmp/eval.json"
/usr/bin/python3 - "$tmp/train.json" "$tmp/eval.json" <<'PY'
import json, math, sys
t = json.load(open(sys.argv[1])); e = json.load(open(sys.argv[2]))
print("train:", t); print("eval:", e)
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
check(t["steps"] == 80, "80 steps ran")
check(math.isfinite(t["train_loss"]) and t["train_loss"] < 0.6 * t["first_loss"], "the loss falls by 40%")
check(t["accuracy"] > 0.70, "accuracy after 80 steps above 70% (chance is 10%)")
check(t["samples_per_s"] > 0, "throughput reported")
check(abs(e["accuracy"] - t["accuracy"]) < 1e-9, "eval of the saved weights gives the same accuracy")
check(abs(e["loss"] - t["loss"]) < 1e-5, "eval of the saved weights gives the same loss")
sys.exit(0 if ok else 1)
PY
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ev() { "$bin" eval --init "$1" --set train.eval_steps=16 2>&1; }
final=$(grep '^eval' "$tmp/eval.txt")
for w in "$tmp/run" "$tmp/run/ckpt" "$tmp/run/ckpt/latest" "$tmp/run/ckpt/step-80"; do
    out=$(ev "$w") || fail "--init $w: $out"
    echo "--init $w:"; grep -E '^(weights|eval)' <<<"$out" || true
    # the final weights are step 80's: the same loss and accuracy
    [ "$(grep '^eval' <<<"$out" | sed 's/^eval at step 80/eval/')" = "$final" ] || fail "--init $w: not the final weights"
    [ "$w" = "$tmp/run" ] || grep -qF "weights: $tmp/run/ckpt/step-80/model.safetensors (the checkpoint of step 80)" \
        <<<"$out" || fail "--init $w: which weights is not said"
done
printf 'XXXX' | dd of="$tmp/run/ckpt/step-80/model.safetensors" bs=1 seek=200 conv=notrunc status=none
out=$(ev "$tmp/run/ckpt") || fail "--init ckpt with the latest damaged: $out"
echo "--init $tmp/run/ckpt, step-80 damaged:"; grep -E '^(--init|weights|eval)' <<<"$out" || true
grep -qF "falling back to $tmp/run/ckpt/step-40" <<<"$out" || fail "the damaged checkpoint is not passed over"
grep -q "^eval at step 40: " <<<"$out" || fail "not step 40's weights"
out=$(ev "$tmp/run/ckpt/step-80") && fail "a damaged checkpoint asked for by name was loaded"
grep -q "step-80/model.safetensors" <<<"$out" || fail "the damaged file is not named: $out"
echo "--init step-80 damaged: $out"
out=$("$bin" data inspect "$tmp/run") || fail "data inspect of the run with a good checkpoint left: $out"
echo "$out"
grep -q "step-80 *DAMAGED: .*step-80/model.safetensors: CRC32" <<<"$out" || fail "inspect: step-80 not marked damaged"
grep -q "step-40 *good" <<<"$out" || fail "inspect: step-40 not marked good"
grep -q "latest -> step-80" <<<"$out" || fail "inspect: latest not shown"
out=$("$bin" data inspect "$tmp/run/ckpt/step-40") || fail "data inspect of step-40: $out"
echo "$out"
grep -q "checkpoint of step 40, every file's size and CRC32" <<<"$out" || fail "inspect: step-40 not described"
grep -q "optimizer state whole, by tensor name (155626 parameters)" <<<"$out" || fail "inspect: the optimizer layout"
out=$(ev "$tmp") && fail "a directory without weights was accepted"
grep -q "a directory without weights" <<<"$out" || fail "no clear error for a directory without weights: $out"
exit $((fails > 0))
