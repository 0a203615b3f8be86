#!/usr/bin/env bash
# End to end: the default run (CNN on Fashion-MNIST) on a reduced number of
# steps: the loss falls, test accuracy is far above chance (10%), the saved
# weights evaluate to the same accuracy, and the last line is JSON.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "default_run: skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
    exit 77
fi
common=(--set train.steps=80 --set train.eval_steps=16 --set train.out_dir="$tmp/run" --set log.every=20)
"$bin" train "${common[@]}" --json >"$tmp/out.txt"
cat "$tmp/out.txt"
tail -n 1 "$tmp/out.txt" >"$tmp/train.json"
"$bin" eval --init "$tmp/run/model.safetensors" --set train.eval_steps=16 --json >"$tmp/eval.txt"
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
