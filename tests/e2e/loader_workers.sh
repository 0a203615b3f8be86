#!/usr/bin/env bash
# The loader's worker count changes nothing: 0, 1 and 3 workers train the same
# bits (the same losses and the same saved weights), and data wait is reported.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "loader_workers: skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
    exit 77
fi
for w in 0 1 3; do
    "$bin" train --set model.type=mlp --set model.hidden=[64] --set train.steps=25 --set train.batch_size=64 \
        --set data.val= --set data.num_workers=$w --set train.out_dir="$tmp/w$w" --json --quiet | tail -n 1 >"$tmp/w$w.json"
done
cmp "$tmp/w0/model.safetensors" "$tmp/w1/model.safetensors"
cmp "$tmp/w0/model.safetensors" "$tmp/w3/model.safetensors"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
r = [json.load(open(f"{sys.argv[1]}/w{w}.json")) for w in (0, 1, 3)]
ok = r[0]["train_loss"] == r[1]["train_loss"] == r[2]["train_loss"] and all(0 <= x["data_wait_fraction"] < 1 for x in r)
print("ok" if ok else "FAIL", [(x["train_loss"], x["data_wait_fraction"]) for x in r])
sys.exit(0 if ok else 1)
PY
