#!/usr/bin/env bash
# scaletrain eval takes its model from the weights (docs/commands.md,
# "--init W"): the model.* settings left at their defaults are the ones the
# weights' metadata records, found as the load finds the weights.
# (a) a checkpoint folder whose newest checkpoint is truncated: the older
#     one is evaluated, an mlp's and a gpt's, with no model setting (the
#     model came from the damaged file: the default cnn was built, and the
#     gpt's tokens refused as not IDX).
# (b) final weights cut short, and a checkpoint's optimizer file given as
#     weights: each its own error (the gpt's were "data.type tokens reads
#     it", the settings it would have given missed); the run's out_dir
#     with its final weights cut short: its latest checkpoint, said. (b')
#     one checkpoint: its weights' checksum checked, its optimizer files
#     not read.
# (c) the settings of how a run computed (model.attention_kernel,
#     model.matmul_tune) are not taken: a GPU run's cudnn refused an fp32
#     evaluation, and matmul_tune a deterministic one, for keys never set.
# (d) a run's folder or weights given where the config file goes (--init
#     forgotten): a usage error naming --init (and --resume for train).
# (e) the messages of data that does not fit the weights: a gpt's with
#     data.type idx, an mlp's with tokens, a gpt's without data.val, a cnn's
#     of 3 classes on data of 10: none advises a setting that cannot load the
#     weights (model.type gpt, a larger num_classes, data.val "" to "train
#     without evaluation").
# (f) weights trained with data.val_split 0.1, evaluated on data.val: no
#     warning that the run "trains on samples they held out", nor that the
#     data's statistics differ (theirs left the split out); evaluated with
#     a larger split or another seed: the warning says the evaluation holds
#     samples they trained on; with a smaller split of their seed (within
#     theirs): none.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_fmnist
e2e_need_numpy
[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
quiet=(--set train.threads=1 --set data.num_workers=0 --set log.progress=off)

expect() { # exit-code needle command...
    local code=$1 needle=$2; shift 2
    local out; out=$("$@" 2>&1); local rc=$?
    if [ $rc -ne "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
        fail "$* -> exit $rc, wanted $code with '$needle'; got: $(head -c 600 <<<"$out")"
    else
        echo "ok: ${*: -4} -> $(grep -F -- "$needle" <<<"$out" | head -1 | cut -c1-160)"
    fi
}
absent() { # needle command...: the command runs (exit 0) and never says needle
    local needle=$1; shift
    local out; out=$("$@" 2>&1); local rc=$?
    if [ $rc -ne 0 ] || grep -qF -- "$needle" <<<"$out"; then
        fail "$* -> exit $rc, and/or it said '$needle': $(head -c 600 <<<"$out")"
    else
        echo "ok: no '$needle'"
    fi
}

# the weights: an mlp (a tenth of data.train held out), a gpt, a cnn of 8x8x3 images of 3 classes
"$bin" train "${quiet[@]}" --quiet --set model.type=mlp --set model.hidden=[16] --set train.steps=3 \
    --set train.batch_size=32 --set train.checkpoint_every=1 --set data.val_split=0.1 \
    --set train.out_dir="$tmp/mlp" >/dev/null || fail "the mlp run"
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null
head -c 3000 "$tmp/text.txt" >"$tmp/val.txt" && "$bin" data tokenize "$tmp/val.tokens" "$tmp/val.txt" >/dev/null
gpt=(--set model.type=gpt --set data.type=tokens --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32
     --set model.block_size=32 --set train.batch_size=8)
"$bin" train "${quiet[@]}" --quiet "${gpt[@]}" --set data.train="$tmp/train.tokens" --set data.val= \
    --set train.steps=4 --set train.checkpoint_every=2 --set train.out_dir="$tmp/gpt" >/dev/null || fail "the gpt run"
/usr/bin/python3 - "$tmp" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.integers(0, 256, (64, 8, 8, 3), dtype=np.uint8))
np.save(sys.argv[1] + "/y.npy", rng.integers(0, 3, 64).astype(np.int64))
PY
"$bin" train "${quiet[@]}" --quiet --set model.type=cnn --set model.channels=[4] --set model.pool=[1] \
    --set data.type=npy --set data.train="$tmp/x.npy" --set data.train_labels="$tmp/y.npy" --set data.val= \
    --set data.val_labels= --set train.steps=2 --set train.batch_size=16 --set train.out_dir="$tmp/cnn" >/dev/null ||
    fail "the cnn run"

# (a)
cp -r "$tmp/mlp" "$tmp/mlpd" && rm "$tmp/mlpd/model.safetensors"
truncate -s -100 "$tmp/mlpd/ckpt/step-3/model.safetensors"
expect 0 "eval at step 2: loss" "$bin" eval "${quiet[@]}" --init "$tmp/mlpd/ckpt"
expect 0 "falling back to $tmp/mlpd/ckpt/step-2" "$bin" eval "${quiet[@]}" --init "$tmp/mlpd"
cp -r "$tmp/gpt" "$tmp/gptd" && rm "$tmp/gptd/model.safetensors"
truncate -s -50 "$tmp/gptd/ckpt/step-4/model.safetensors"
expect 0 "eval at step 2: loss" "$bin" eval "${quiet[@]}" --init "$tmp/gptd" --set data.val="$tmp/val.tokens"
# (b)
cp -r "$tmp/gpt" "$tmp/gptt" && truncate -s -100 "$tmp/gptt/model.safetensors"
expect 1 "$tmp/gptt/model.safetensors: " "$bin" eval "${quiet[@]}" --init "$tmp/gptt/model.safetensors" \
    --set data.val="$tmp/val.tokens"
expect 1 "truncated" "$bin" eval "${quiet[@]}" --init "$tmp/gptt/model.safetensors" --set data.val="$tmp/val.tokens"
# (the run's out_dir: its latest good checkpoint stands in for them, said)
expect 0 "--init: the final weights are damaged ($tmp/gptt/model.safetensors: " "$bin" eval "${quiet[@]}" \
    --init "$tmp/gptt" --set data.val="$tmp/val.tokens"
expect 0 "eval at step 4: loss" "$bin" eval "${quiet[@]}" --init "$tmp/gptt" --set data.val="$tmp/val.tokens"
expect 1 "is a checkpoint's optimizer state" "$bin" eval "${quiet[@]}" \
    --init "$tmp/gpt/ckpt/step-4/optim-rank0.safetensors" --set data.val="$tmp/val.tokens"
# (b') one checkpoint named: its weights' checksum is checked, its optimizer files are not read (eval
# reads none: a damaged one is no error here, where the weights' is)
cp -r "$tmp/gpt/ckpt/step-4" "$tmp/gpto" && printf 'XXXXXXXX' | dd of="$tmp/gpto/optim-rank0.safetensors" \
    bs=1 seek=4000 conv=notrunc status=none
expect 0 "eval at step 4: loss" "$bin" eval "${quiet[@]}" --init "$tmp/gpto" --set data.val="$tmp/val.tokens"
cp -r "$tmp/gpt/ckpt/step-4" "$tmp/gptm" && printf 'XXXXXXXX' | dd of="$tmp/gptm/model.safetensors" \
    bs=1 seek=4000 conv=notrunc status=none
expect 1 "$tmp/gptm/model.safetensors: CRC32" "$bin" eval "${quiet[@]}" --init "$tmp/gptm" \
    --set data.val="$tmp/val.tokens"
# (c) a GPU run's kernels in the metadata
/usr/bin/python3 - "$tmp/gpt/model.safetensors" "$tmp/gpu.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"].update({"model.attention_kernel": "cudnn", "model.matmul_tune": "on", "model.fused_gelu": "on"})
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
expect 0 "eval: loss" "$bin" eval "${quiet[@]}" --init "$tmp/gpu.safetensors" --set data.val="$tmp/val.tokens" \
    --set dist.deterministic=true --set precision=fp32
# ... and a list written another way ("[ 1 ]" for [1]) is the same value (it refused the load: "saved
# by a model with model.pool [ 1 ] (this run: [1])... would compute another function")
/usr/bin/python3 - "$tmp/cnn/model.safetensors" "$tmp/spaced.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["__metadata__"]["model.pool"] == "[1]", h["__metadata__"]["model.pool"]
h["__metadata__"]["model.pool"] = "[ 1 ]"
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
# weights another program wrote, with no metadata: tensor names that say another model type get
# --set model.type; names under a wrapper's prefix ("model.") get how to take it off (both got "the
# weights must come from a model with the same model.* settings")
/usr/bin/python3 - "$tmp/mlp/model.safetensors" "$tmp/nometa.safetensors" "$tmp/prefixed.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]
for out, pre in ((sys.argv[2], ""), (sys.argv[3], "model.")):
    j = json.dumps({pre + k: v for k, v in h.items()}).encode(); j += b" " * (-len(j) % 8)
    open(out, "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
expect 1 "its tensor names (fc.0.weight) are an mlp's, not a cnn's: run with --set model.type=mlp" \
    "$bin" eval "${quiet[@]}" --init "$tmp/nometa.safetensors"
expect 1 "every name in the file carries the prefix 'model.' before the model's own (model.fc.0.weight)" \
    "$bin" eval "${quiet[@]}" --init "$tmp/prefixed.safetensors" --set model.type=mlp --set model.hidden=[16]
npy=(--set data.type=npy --set data.train="$tmp/x.npy" --set data.train_labels="$tmp/y.npy" --set data.val="$tmp/x.npy"
     --set data.val_labels="$tmp/y.npy")
expect 0 "eval: loss" "$bin" eval "${quiet[@]}" "${npy[@]}" --init "$tmp/spaced.safetensors"
expect 0 "eval: loss" "$bin" eval "${quiet[@]}" "${npy[@]}" --init "$tmp/spaced.safetensors" --set model.pool=[1]
# (d)
expect 2 "scaletrain eval: $tmp/gpt is a run's folder or checkpoint, not a config file (YAML): give its weights with --init $tmp/gpt" \
    "$bin" eval "$tmp/gpt"
expect 2 "scaletrain eval: $tmp/gpt/model.safetensors is a safetensors file, not a config file (YAML): give weights with --init" \
    "$bin" eval "$tmp/gpt/model.safetensors"
expect 2 "continue that run with --resume $tmp/gpt, or start from its weights with --init $tmp/gpt" "$bin" train "$tmp/gpt"
expect 2 "scaletrain plan: $tmp/val.tokens is a scaletrain token file, not a config file (YAML)" "$bin" plan "$tmp/val.tokens"
expect 2 "scaletrain sample: $tmp/gpt is a run's folder or checkpoint, not a config file (YAML): give its weights with --init" \
    "$bin" sample "$tmp/gpt"
# ... and a config on a pipe is read whole, not looked at first (the look took its bytes: the defaults ran)
expect 0 "model: mlp, 5575 parameters" "$bin" plan <(printf 'model: {type: mlp, hidden: [7]}\n')
printf 'model: {type: mlp, hidden: [7]}\n' >"$tmp/c.yaml"
expect 0 "model: mlp, 5575 parameters" sh -c "cat '$tmp/c.yaml' | '$bin' plan /dev/stdin"
# (e)
expect 1 "model.type (gpt, auto: $tmp/gpt/model.safetensors's metadata) reads tokens but data.type (idx, --set); leave data.type out" \
    "$bin" eval "${quiet[@]}" --init "$tmp/gpt" --set data.type=idx --set data.val="$tmp/val.tokens"
expect 1 "reads images and labels but data.type (tokens, --set); set data.type: idx or npy, the data these weights were trained on" \
    "$bin" eval "${quiet[@]}" --init "$tmp/mlp" --set data.type=tokens --set data.val="$tmp/val.tokens"
expect 1 "data.val (/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz, default) is Fashion-MNIST's idx file but data.type (tokens, auto: $tmp/gpt/model.safetensors's model, a gpt, reads tokens); set data.val to the validation token file" \
    "$bin" eval "${quiet[@]}" --init "$tmp/gpt"
if "$bin" eval "${quiet[@]}" --init "$tmp/gpt" 2>&1 | grep -q "without evaluation"; then
    fail "eval advised data.val \"\" to train without evaluation"
fi
expect 1 "the weights have 3 outputs, so this is other data than they were trained on" \
    "$bin" eval "${quiet[@]}" --init "$tmp/cnn"
# (f)
absent "warning" "$bin" eval "${quiet[@]}" --init "$tmp/mlp"
expect 0 "were trained with data.val_split 0.1, and this evaluation holds out 0.2: more than they did, so it evaluates samples they trained on; set data.val_split: 0.1 to evaluate" \
    "$bin" eval "${quiet[@]}" --init "$tmp/mlp" --set data.val_split=0.2
absent "warning" "$bin" eval "${quiet[@]}" --init "$tmp/mlp" --set data.val_split=0.1
# (a smaller split of the same seed lies within theirs: nothing to say; another seed: another subset)
absent "warning" "$bin" eval "${quiet[@]}" --init "$tmp/mlp" --set data.val_split=0.05
expect 0 "were trained with data.val_split 0.1 (seed 0), and this evaluation holds out 0.1 (seed 3): another subset, so it evaluates samples they trained on; set data.val_split: 0.1 and data.val_split_seed: 0" \
    "$bin" eval "${quiet[@]}" --init "$tmp/mlp" --set data.val_split=0.1 --set data.val_split_seed=3
# ... and a resumed run, which trains on: another split is said either way (eval's rules are not its)
cp -r "$tmp/mlp" "$tmp/mlpr"
expect 0 "were trained with data.val_split 0.1, and this run has 0: this run trains on samples they held out" \
    "$bin" train "${quiet[@]}" --set model.type=mlp --set model.hidden=[16] --set train.steps=4 \
    --set train.batch_size=32 --set data.val_split=0 --set train.out_dir="$tmp/mlpr" --resume auto
# the training samples' count changes with the split, not the data: said so (it said "the data changed
# (shards added or removed?)")
cp -r "$tmp/mlp" "$tmp/mlpr2"
expect 0 "training samples with data.val_split 0; the run that wrote the checkpoint had" \
    "$bin" train "${quiet[@]}" --set model.type=mlp --set model.hidden=[16] --set train.steps=4 \
    --set train.batch_size=32 --set data.val_split=0 --set train.out_dir="$tmp/mlpr2" --resume auto
rm -rf "$tmp/mlpr2" && cp -r "$tmp/mlp" "$tmp/mlpr2"
absent "the data changed" "$bin" train "${quiet[@]}" --set model.type=mlp --set model.hidden=[16] --set train.steps=4 \
    --set train.batch_size=32 --set data.val_split=0 --set train.out_dir="$tmp/mlpr2" --resume auto
e2e_finish "eval takes its model from the weights"
