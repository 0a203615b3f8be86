#!/usr/bin/env bash
# data.type npy end to end, on a tiny dataset NumPy writes: 8x8 uint8 images
# (n, h, w) with a bright patch in the top or bottom half and int64 labels
# 0/1 (which half), train and val pairs.
#  1. An mlp learns it from the config (data.type npy, the four paths):
#     validation accuracy above 0.9.
#     The weights record their inputs' normalisation: evaluated beside
#     another data.train, the same loss and accuracy, and a warning.
#  2. Augmentation (data.augment_crop_pad 1, data.augment_flip true): the
#     same weights, bit for bit, with 0 and 3 loader workers; different
#     weights from the run without augmentation; a run stopped at step 6 and
#     resumed to 12 (past an epoch) ends with the same weights as 12 straight.
#  3. A cnn on (n, h, w, 3) float32 images runs; the header's data line;
#     (n, c, h, w) images (PyTorch's layout) are warned of, with the fix;
#     so is data.val naming data.train's file. data.val_split holds out a
#     fixed quarter: eval of the weights agrees with the run's evaluation.
#  4. Clear errors: data.type npy left on the IDX defaults, image and label
#     counts that disagree, a label past model.num_classes, augmentation of
#     (n, d) features, augmentation of tokens, float validation images
#     against uint8 training images.
#  5. scaletrain data inspect describes .npy files and names a truncated one.
#  6. Floats near 1e6 normalised with their own spread; float64 that float32
#     cannot hold apart refused; a gzipped .npy, 13-band square images in
#     PyTorch's layout and labels as a column, each said with its fix.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_numpy
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

/usr/bin/python3 - "$tmp" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
def make(n):
    x = rng.integers(0, 60, size=(n, 8, 8), dtype=np.uint8)
    y = rng.integers(0, 2, size=n).astype(np.int64)
    for i in range(n):
        r = rng.integers(0, 2) + (4 if y[i] else 0)
        c = rng.integers(0, 6)
        x[i, r:r + 2, c:c + 3] = 250
    return x, y
for name, n in (("train", 256), ("val", 128)):
    x, y = make(n)
    np.save(f"{d}/{name}_x.npy", x)
    np.save(f"{d}/{name}_y.npy", y)
np.save(f"{d}/rgb_x.npy", rng.standard_normal((64, 8, 8, 3)).astype(np.float32))
np.save(f"{d}/rgb_y.npy", rng.integers(0, 3, size=64).astype(np.int32))
np.save(f"{d}/short_y.npy", np.zeros(255, dtype=np.int64))
np.save(f"{d}/one_y.npy", np.zeros(256, dtype=np.int64))  # one class
bad = np.zeros(256, dtype=np.int64); bad[17] = 5
np.save(f"{d}/bad_y.npy", bad)
np.save(f"{d}/feat_x.npy", rng.standard_normal((256, 12)).astype(np.float32))
np.save(f"{d}/nan_mid.npy", np.array([[0, 1, np.nan], [0.5, np.inf, 0.25]], dtype=np.float32))
np.save(f"{d}/nan_first.npy", np.array([np.nan, 2, 3], dtype=np.float64))
np.save(f"{d}/valf_x.npy", np.load(f"{d}/val_x.npy").astype(np.float32))  # the same pixels as floats 0..255
np.save(f"{d}/dim_x.npy", np.load(f"{d}/train_x.npy") // 2)  # other statistics
np.save(f"{d}/r416_x.npy", np.load(f"{d}/train_x.npy").reshape(256, 4, 16))  # as many values, another shape
neg = np.zeros(256, dtype=np.int64); neg[3] = -1
np.save(f"{d}/neg_y.npy", neg)
v5 = np.load(f"{d}/val_y.npy").copy(); v5[7] = 5
np.save(f"{d}/val5_y.npy", v5)
np.save(f"{d}/nchw_x.npy", rng.standard_normal((64, 3, 8, 8)).astype(np.float32))  # PyTorch's layout
np.save(f"{d}/big_y.npy", np.array([0, 16777217, 3], dtype=np.int64))  # %g said 1.67772e+07
np.save(f"{d}/f8big_x.npy", np.array([[1.0, 3e300], [-5e300, 0.0]]))  # finite, past float32
PY

# data inspect reads NPY (it once took every file without another magic for safetensors).
out=$("$bin" data inspect "$tmp/rgb_x.npy" 2>&1) || fail "data inspect rgb_x.npy: $out"
[[ "$out" == *"NPY 1.0, float32, shape [64, 8, 8, 3]"* ]] || fail "data inspect rgb_x.npy: $out"
out=$("$bin" data inspect "$tmp/bad_y.npy" 2>&1) || fail "data inspect bad_y.npy: $out"
[[ "$out" == *"int64, shape [256], values 0..5"* ]] || fail "data inspect bad_y.npy: $out"
echo "data inspect: $out"
# integers exactly; float64 values past float32's range, which training reads as infinite, said
out=$("$bin" data inspect "$tmp/big_y.npy" 2>&1)
[[ "$out" == *"int64, shape [3], values 0..16777217" ]] || fail "data inspect big_y.npy: $out"
out=$("$bin" data inspect "$tmp/f8big_x.npy" 2>&1)
[[ "$out" == *"values -5e+300..3e+300, 2 values past float32's range (+-3.4e38): training reads float32 and refuses them as infinite" ]] ||
    fail "data inspect f8big_x.npy: $out"
# PyTorch's layout said as train says it; a pattern of .npy files describes each (it was taken for token
# shards and refused on the first)
out=$("$bin" data inspect "$tmp/nchw_x.npy" 2>&1) || fail "data inspect nchw_x.npy: $out"
[[ "$out" == *"read as images 3x8x8 (height, width, channels): if the array is (n, channels, height, width)"* ]] ||
    fail "data inspect nchw_x.npy: $out"
out=$("$bin" data inspect "$tmp/rgb_*.npy" 2>&1) || fail "data inspect rgb_*.npy: $out"
grep -q "rgb_x.npy: NPY 1.0, float32, shape \[64, 8, 8, 3\]" <<<"$out" && grep -q "rgb_y.npy: NPY 1.0, int32, shape \[64\]" <<<"$out" ||
    fail "data inspect rgb_*.npy: $out"
# values that are not finite, which training refuses, are said (a NaN inside hid in the range; a first
# one made the range nan..nan)
out=$("$bin" data inspect "$tmp/nan_mid.npy" 2>&1) || fail "data inspect nan_mid.npy: $out"
[[ "$out" == *"shape [2, 3], values 0..1, 2 values not finite (the first, nan, at element 2): training refuses them"* ]] ||
    fail "data inspect nan_mid.npy: $out"
out=$("$bin" data inspect "$tmp/nan_first.npy" 2>&1) || fail "data inspect nan_first.npy: $out"
[[ "$out" == *"values 2..3, 1 value not finite (the first, nan, at element 0)"* ]] || fail "data inspect nan_first.npy: $out"
head -c 100 "$tmp/rgb_x.npy" >"$tmp/cut.npy"
out=$("$bin" data inspect "$tmp/cut.npy" 2>&1) && fail "data inspect of a truncated .npy succeeded"
[[ "$out" == *"cut.npy"*"truncated"* ]] || fail "data inspect cut.npy: $out"

cat >"$tmp/run.yaml" <<EOF
model: { type: mlp, hidden: [32] }
data:
  type: npy
  train: $tmp/train_x.npy
  train_labels: $tmp/train_y.npy
  val: $tmp/val_x.npy
  val_labels: $tmp/val_y.npy
train: { steps: 40, batch_size: 32, threads: 1, seed: 3 }
optim: { lr: 0.01 }
log: { progress: off }
EOF

# labels that are all 0: named, with the fix (it said "needs image data with at least 2 classes")
out=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.train_labels="$tmp/one_y.npy" --set data.val= \
    --set train.out_dir="$tmp/one" 2>&1) && fail "one class: trained"
grep -qF "data.train_labels ($tmp/one_y.npy) holds only label 0: a classifier needs at least 2 classes (check the label file, or set model.num_classes)" <<<"$out" ||
    fail "one class: $out"

# 1. learns
out=$(timeout 60 "$bin" train "$tmp/run.yaml" --set train.out_dir="$tmp/plain" --json --quiet 2>&1) ||
    fail "the npy run: $out"
acc=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1].splitlines()[-1])["accuracy"])' "$out" 2>/dev/null)
echo "npy mlp: validation accuracy $acc"
/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0.9 else 1)' "${acc:-0}" ||
    fail "validation accuracy ${acc:-none} is not above 0.9: $out"

# 1b. The weights record the normalisation they were trained with
# (data.mean, data.std): evaluated beside another data.train, they
# evaluate as beside their own, saying so, where the other set's statistics
# were taken without a word and gave another accuracy
"$bin" data inspect "$tmp/plain/model.safetensors" | grep -qE "trained on inputs normalised with data.mean 0\.[0-9]+, data.std 0\.[0-9]+" ||
    fail "the weights do not record data.mean: $("$bin" data inspect "$tmp/plain/model.safetensors" | tail -5)"
own=$(timeout 60 "$bin" eval "$tmp/run.yaml" --init "$tmp/plain" --json --quiet 2>&1 | tail -n 1)
other=$(timeout 60 "$bin" eval "$tmp/run.yaml" --init "$tmp/plain" --set data.train="$tmp/dim_x.npy" --json --quiet 2>"$tmp/other.err" | tail -n 1)
/usr/bin/python3 -c 'import json,sys; a, b = (json.loads(x) for x in sys.argv[1:]); sys.exit(0 if a["loss"] == b["loss"] and a["accuracy"] == b["accuracy"] else 1)' "$own" "$other" ||
    fail "evaluated beside another data.train: $other, beside its own: $own"
grep -qF "warning: data.train ($tmp/dim_x.npy) has mean" "$tmp/other.err" &&
    grep -qF "were trained on inputs normalised with mean" "$tmp/other.err" || fail "no word of the other statistics: $(cat "$tmp/other.err")"
echo "evaluated beside another data.train: as beside its own ($own)"

# 2. augmentation: workers, effect, resume
aug=(--set data.augment_crop_pad=1 --set data.augment_flip=true --set train.steps=12 --set data.val= --quiet
     --set optim.schedule=constant)  # constant: a 6-step run has the same schedule as a 12-step one
same() { /usr/bin/python3 tests/py/weights_diff.py "$1" "$2" 0 >/dev/null; }
timeout 60 "$bin" train "$tmp/run.yaml" "${aug[@]}" --set data.num_workers=0 --set train.out_dir="$tmp/w0" ||
    fail "augmented run, 0 workers"
timeout 60 "$bin" train "$tmp/run.yaml" "${aug[@]}" --set data.num_workers=3 --set train.out_dir="$tmp/w3" ||
    fail "augmented run, 3 workers"
same "$tmp/w0/model.safetensors" "$tmp/w3/model.safetensors" || fail "augmented runs differ between 0 and 3 workers"
timeout 60 "$bin" train "$tmp/run.yaml" --set train.steps=12 --set data.val= --quiet --set optim.schedule=constant --set data.num_workers=0 \
    --set train.out_dir="$tmp/noaug" || fail "run without augmentation"
same "$tmp/w0/model.safetensors" "$tmp/noaug/model.safetensors" && fail "augmentation changed nothing"
timeout 60 "$bin" train "$tmp/run.yaml" "${aug[@]}" --set train.steps=6 --set data.num_workers=2 \
    --set train.out_dir="$tmp/res" || fail "augmented run to step 6"
timeout 60 "$bin" train "$tmp/run.yaml" "${aug[@]}" --set data.num_workers=1 --set train.out_dir="$tmp/res" \
    --resume auto || fail "augmented run resumed to 12"
same "$tmp/w0/model.safetensors" "$tmp/res/model.safetensors" ||
    fail "the resumed augmented run ends with other weights than the straight one"

# a resume on data of the same count but other contents is told so
# (state.json's data_crc32), where it went on without a word
cp "$tmp/train_x.npy" "$tmp/mut_x.npy"
timeout 60 "$bin" train "$tmp/run.yaml" --set data.train="$tmp/mut_x.npy" --set data.val= --set train.steps=4 \
    --set train.checkpoint_every=2 --set train.out_dir="$tmp/mut" --quiet || fail "the run before its data changes"
cp "$tmp/dim_x.npy" "$tmp/mut_x.npy"
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.train="$tmp/mut_x.npy" --set data.val= --set train.steps=6 \
    --set train.out_dir="$tmp/mut" --resume auto --quiet 2>&1) || fail "the resume on changed data: $o"
grep -qF "resume: warning: data.train and data.train_labels ($tmp/mut_x.npy, $tmp/train_y.npy) hold other data than the run that wrote the checkpoint trained on (the same 256 samples, but their contents differ" <<<"$o" ||
    fail "the resume on changed data: no warning: $o"
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.train="$tmp/mut_x.npy" --set data.val= --set train.steps=8 \
    --set train.out_dir="$tmp/mut" --resume auto --quiet 2>&1) || fail "the resume on the same data: $o"
! grep -q "holds other data" <<<"$o" || fail "a resume on unchanged data was warned: $o"

# 3. a cnn on float32 RGB images
timeout 60 "$bin" train --set model.type=cnn --set model.channels=[4] --set model.pool=[1] --set data.type=npy \
    --set data.train="$tmp/rgb_x.npy" --set data.train_labels="$tmp/rgb_y.npy" --set data.val= \
    --set train.steps=2 --set train.batch_size=16 --set train.threads=1 --set data.augment_flip=true \
    --set train.out_dir="$tmp/cnn" --quiet || fail "cnn on float32 (n, h, w, 3) npy images"
# the header says what the data holds; PyTorch's (n, c, h, w), read channels
# last as 3-pixel-high images of 8 channels, is named with the fix
o=$(timeout 60 "$bin" train --set model.type=mlp --set model.hidden=[8] --set data.type=npy \
    --set data.train="$tmp/nchw_x.npy" --set data.train_labels="$tmp/rgb_y.npy" --set data.val= \
    --set train.steps=1 --set train.batch_size=16 --set train.threads=1 --set log.progress=off \
    --set train.out_dir="$tmp/nchw" 2>&1) || fail "(n, c, h, w) npy images: $o"
grep -qE "^data: 64 images 3x8x8 \(height, width, channels; floats\), 3 classes, normalised with mean" <<<"$o" ||
    fail "the header's data line: $(grep '^data: ' <<<"$o")"
grep -qF "holds 64 images 3x8x8 read as (n, height, width, channels), channels last: 3 pixels high, 8 wide, with 8 channels. If the array is (n, channels, height, width), PyTorch's layout, save it channels last: numpy.save(path, x.transpose(0, 2, 3, 1))" <<<"$o" ||
    fail "(n, c, h, w) npy images: no warning: $o"
o=$(timeout 60 "$bin" train --set model.type=mlp --set model.hidden=[8] --set data.type=npy \
    --set data.train="$tmp/rgb_x.npy" --set data.train_labels="$tmp/rgb_y.npy" --set data.val= \
    --set train.steps=1 --set train.batch_size=16 --set train.threads=1 --set train.out_dir="$tmp/nhwc" --quiet 2>&1)
[ -z "$o" ] || fail "(n, h, w, c) npy images: $o"
# validation data that is the training data's own file: said
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.val="$tmp/train_x.npy" --set data.val_labels="$tmp/train_y.npy" \
    --set train.steps=1 --set train.out_dir="$tmp/sameval" --quiet 2>&1)
grep -qF "warning: data.val ($tmp/train_x.npy) is (or holds) a file of data.train: the evaluation measures the data the model trains on, not held-out data" <<<"$o" ||
    fail "data.val = data.train: no warning: $o"

# 4. errors: exit 1 and a message naming the file or key
err() { # NAME NEEDLE ARGS...
    local name=$1 needle=$2; shift 2
    local o
    o=$(timeout 60 "$bin" train "$@" --set train.threads=1 --set train.steps=1 --set data.val= \
        --set train.out_dir="$tmp/err" --quiet 2>&1)
    local rc=$?
    echo "$name: exit $rc: $o"
    [ $rc -eq 1 ] && grep -qF -- "$needle" <<<"$o" || fail "$name: expected exit 1 mentioning '$needle'"
}
err "npy on the IDX defaults" "data.train (/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, default) is Fashion-MNIST's idx file but data.type (npy, --set); set data.train" \
    --set data.type=npy
err "counts disagree" "short_y.npy" "$tmp/run.yaml" --set data.train_labels="$tmp/short_y.npy"
err "label out of range" "bad_y.npy: label 5 at index 17 is outside [0, 2) (the class count, model.num_classes)" \
    "$tmp/run.yaml" --set data.train_labels="$tmp/bad_y.npy" --set model.num_classes=2
err "weights of images of another shape, every tensor fitting" "trained on 8x8x1 inputs (height x width x channels), and this run's data holds 4x16x1: every tensor fits" \
    "$tmp/run.yaml" --set data.train="$tmp/r416_x.npy" --init "$tmp/plain"
err "weights of other images" "hint: the file was trained on 8x8x1 inputs (height x width x channels), and this run's data holds 8x8x3: the weights need data of their own shape" \
    "$tmp/run.yaml" --set data.train="$tmp/rgb_x.npy" --set data.train_labels="$tmp/rgb_y.npy" --init "$tmp/plain"
err "negative label" "neg_y.npy: label -1 at index 3 is negative; labels are class numbers 0, 1, ..." \
    "$tmp/run.yaml" --set data.train_labels="$tmp/neg_y.npy"
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.val="$tmp/rgb_x.npy" --set data.val_labels="$tmp/rgb_y.npy" \
    --set train.steps=1 --set train.out_dir="$tmp/shape" --quiet 2>&1)
grep -qF "data.val ($tmp/rgb_x.npy) holds 8x8x3 images but data.train ($tmp/train_x.npy) holds 8x8x1: validation images must have the training images' height, width and channels" <<<"$o" ||
    fail "validation images of another shape: $o"
# data.val_split: a quarter of data.train held out (data.val left out of the
# config); eval of the weights with the same config evaluates the same
# samples (the split is fixed), as the run's own last evaluation did
cat >"$tmp/split.yaml" <<EOF
model: { type: mlp, hidden: [32] }
data: { type: npy, train: $tmp/train_x.npy, train_labels: $tmp/train_y.npy, val_split: 0.25 }
train: { steps: 20, batch_size: 32, threads: 1, seed: 3 }
log: { progress: off }
EOF
o=$(timeout 60 "$bin" train "$tmp/split.yaml" --set train.out_dir="$tmp/split" --json 2>&1) || fail "data.val_split: $o"
grep -qE "^data: 192 images 8x8x1 .*; validation: 64 images$" <<<"$o" || fail "data.val_split: the data line: $(grep '^data: ' <<<"$o")"
e=$(timeout 60 "$bin" eval "$tmp/split.yaml" --init "$tmp/split" --json --quiet 2>&1) || fail "eval with data.val_split: $e"
/usr/bin/python3 -c 'import json,sys; a, b = (json.loads(x.splitlines()[-1]) for x in sys.argv[1:]); sys.exit(0 if a["accuracy"] == b["accuracy"] and a["eval_loss"] == b["eval_loss"] else 1)' "$o" "$e" ||
    fail "eval of the held-out part differs from the run's last evaluation: $(tail -n 1 <<<"$e") vs $(tail -n 1 <<<"$o")"
echo "data.val_split 0.25: 192 + 64 samples; eval agrees with the run: $(tail -n 1 <<<"$e")"
# evaluated with another split: said (its held-out set would hold trained samples); an evaluation
# needs no training batch; evaluations with data.val "" and a split are allowed
e=$(timeout 60 "$bin" eval "$tmp/split.yaml" --init "$tmp/split" --set data.val_split=0.5 --set train.batch_size=512 --quiet 2>&1) ||
    fail "eval with another data.val_split: $e"
grep -qF "were trained with data.val_split 0.25, and this evaluation holds out 0.5: more than they did, so it evaluates samples they trained on" <<<"$e" ||
    fail "eval with another data.val_split: no warning: $e"
# another data.val_split_seed: another held-out subset (said; the accuracy on it counts trained samples)
e=$(timeout 60 "$bin" eval "$tmp/split.yaml" --init "$tmp/split" --set data.val_split_seed=5 --json 2>&1) ||
    fail "eval with another data.val_split_seed: $e"
grep -qF "were trained with data.val_split 0.25 (seed 0), and this evaluation holds out 0.25 (seed 5): another subset, so it evaluates samples they trained on; set data.val_split: 0.25 and data.val_split_seed: 0" <<<"$e" ||
    fail "eval with another data.val_split_seed: no warning: $e"
/usr/bin/python3 -c 'import json,sys; a, b = (json.loads(x.splitlines()[-1]) for x in sys.argv[1:]); sys.exit(0 if a["eval_loss"] != b["eval_loss"] else 1)' "$o" "$e" ||
    fail "data.val_split_seed 5 evaluated the same held-out samples as seed 0"
o=$(timeout 60 "$bin" train "$tmp/split.yaml" --set data.val= --set train.eval_every=10 --set train.out_dir="$tmp/split2" --quiet 2>&1) ||
    fail "data.val_split with data.val \"\" and train.eval_every: $o"
# plan counts the validation labels for num_classes auto, as a run does
o=$(timeout 60 "$bin" plan "$tmp/run.yaml" --set data.val_labels="$tmp/val5_y.npy" 2>&1) || fail "plan with validation labels up to 5: $o"
# validation labels beyond the training labels: model.num_classes auto
# counts them, said
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.val_labels="$tmp/val5_y.npy" --set train.steps=1 \
    --set train.out_dir="$tmp/val5" --quiet 2>&1) || fail "validation labels up to 5: $o"
grep -qF "warning: data.val_labels ($tmp/val5_y.npy) holds labels up to 5, but data.train_labels ($tmp/train_y.npy) only up to 1: classes 2..5 have no training sample" <<<"$o" ||
    fail "validation labels up to 5: no warning: $o"
err "augmenting features" "data.augment_crop_pad" "$tmp/run.yaml" --set data.train="$tmp/feat_x.npy" \
    --set data.augment_flip=true
err "augmenting tokens" "data.augment_crop_pad" --set model.type=gpt --set data.type=tokens \
    --set data.augment_crop_pad=2
# a cnn on (n, d) features trains, said: each sample a 1 x d image
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set model.type=cnn --set model.channels=[2] --set model.pool=[0] \
    --set data.train="$tmp/feat_x.npy" --set data.val= --set train.steps=1 --set train.out_dir="$tmp/fcnn" --quiet 2>&1) ||
    fail "a cnn on (n, d) features: $o"
grep -qF "scaletrain: warning: model.type cnn on data.train $tmp/feat_x.npy, flat (n, 12) features: each sample is a 1 x 12 image of one channel, convolved along its row alone; save (n, h, w) or (n, h, w, c) arrays (channels last)" <<<"$o" ||
    fail "a cnn on (n, d) features: no warning: $o"
# (check says it too: it said ready, and the run was refused once its model was built)
o=$(timeout 60 "$bin" check "$tmp/run.yaml" --set data.train="$tmp/feat_x.npy" --set data.val= --set data.augment_flip=true \
    --set train.out_dir="$tmp/chk" 2>&1)
grep -qF "data.augment_crop_pad (0, default) and data.augment_flip (true, --set) are image augmentations, and data.train $tmp/feat_x.npy holds flat (n, d) features; set them to 0 and false, or give images: an (n, h, w) or (n, h, w, c) array (channels last)" <<<"$o" &&
    grep -q "^FAIL  data " <<<"$o" && grep -q "^not ready" <<<"$o" || fail "check, augmenting features: $(grep -E "data|ready" <<<"$o")"
# plan and check read the NPY pair as train does (they had opened it as IDX:
# "not an IDX file but a NumPy .npy array")
o=$(timeout 60 "$bin" plan "$tmp/run.yaml" 2>&1) || fail "plan on NPY data: $o"
o=$(timeout 120 "$bin" check "$tmp/run.yaml" --set train.out_dir="$tmp/chk" 2>&1)
grep -qE "^ok +data +$tmp/train_x.npy: 256 images 8x8x1, 2 classes" <<<"$o" &&
    grep -qE "^ok +val data +$tmp/val_x.npy: 128 images" <<<"$o" || fail "check on NPY data: $(grep data <<<"$o")"
echo "plan and check on NPY data: $(grep -E '^ok +data' <<<"$o")"
# check foresees train's refusal of a batch larger than the data (after the split)
o=$(timeout 120 "$bin" check "$tmp/run.yaml" --set data.val= --set data.val_labels= --set data.val_split=0.5 \
    --set train.batch_size=256 --set train.out_dir="$tmp/chk2" 2>&1)
grep -qE "^FAIL +batch +128 training samples after data.val_split, fewer than one batch \(train.batch_size 256\)" <<<"$o" ||
    fail "check with a batch larger than the data: $(grep -E 'data|batch' <<<"$o")"

# Validation images as floats where the training images are bytes (read
# as value/255): refused before anything is written, where they were
# evaluated 255 times too bright
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.val="$tmp/valf_x.npy" --set train.threads=1 \
    --set train.steps=1 --set train.out_dir="$tmp/mixed" 2>&1); rc=$?
echo "validation floats, training bytes: exit $rc: $(tail -n 1 <<<"$o")"
[ $rc -eq 1 ] && grep -qF "$tmp/valf_x.npy holds floats but $tmp/train_x.npy holds bytes (uint8)" <<<"$o" &&
    [ ! -e "$tmp/mixed" ] || fail "validation floats, training bytes: $o"

# 6. Floats far from 0 against their spread (1e6 + 0.25 per class, float32): normalised with their own
# standard deviation (one pass's sums cancelled: std 1e-06), so the run learns them; float64 that
# float32 cannot hold apart (timestamps near 1.7e9) refused; a gzipped .npy, square images of 13
# bands in PyTorch's layout, labels as a column: each said with its fix
/usr/bin/python3 - "$tmp" <<'PY'
import gzip, shutil, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(3)
x, y = np.load(f"{d}/train_x.npy"), np.load(f"{d}/train_y.npy")
off = (1e6 + (x.astype(np.float64) / 250.0) * 0.25).astype(np.float32)
np.save(f"{d}/off_x.npy", off)
open(f"{d}/off_std.txt", "w").write("%.6g" % off.astype(np.float64).std())
np.save(f"{d}/ts_x.npy", x.astype(np.float64) + 1.7e9)
with open(f"{d}/train_x.npy", "rb") as a, gzip.open(f"{d}/gz_x.npy.gz", "wb") as b:
    shutil.copyfileobj(a, b)
np.save(f"{d}/bands_x.npy", rng.random((64, 13, 16, 16), dtype=np.float32))
np.save(f"{d}/col_y.npy", y.reshape(-1, 1))
PY
o=$(timeout 60 "$bin" train "$tmp/run.yaml" --set data.train="$tmp/off_x.npy" --set data.val= --set train.steps=40 \
    --set train.threads=1 --set log.progress=off --set train.out_dir="$tmp/off" --json 2>&1) || fail "floats near 1e6: $o"
printf '%s\n' "$o" >"$tmp/off.out"
/usr/bin/python3 - "$(cat "$tmp/off_std.txt")" "$tmp/off.out" <<'PY' || fail "floats near 1e6: $(grep '^data: ' <<<"$o")"
import json, re, sys
o = open(sys.argv[2]).read()
std = float(re.search(r"normalised with mean [0-9.e+]+, std ([0-9.e+-]+)", o).group(1))
loss = [json.loads(l) for l in o.splitlines() if l.startswith("{")][-1]["train_loss"]
want = float(sys.argv[1])
print(f"floats near 1e6: std {std} (NumPy's {want}), train loss {loss}")
sys.exit(0 if abs(std - want) <= 1e-3 * want and loss < 0.5 else 1)
PY
err "float64 near 1.7e9" "ts_x.npy: float64 inputs around 17000000" \
    "$tmp/run.yaml" --set data.train="$tmp/ts_x.npy"
err "float64 near 1.7e9" "Subtract one offset (the training inputs' mean, say) from the training and the validation inputs" \
    "$tmp/run.yaml" --set data.train="$tmp/ts_x.npy"
err "a gzipped .npy" "gz_x.npy.gz: a gzipped NumPy .npy array; data.type npy reads .npy files uncompressed: decompress it (gunzip -k $tmp/gz_x.npy.gz)" \
    "$tmp/run.yaml" --set data.train="$tmp/gz_x.npy.gz"
err "a gzipped .npy as IDX" "not an IDX file but a NumPy .npy array (after decompression); decompress it first (gunzip -k $tmp/gz_x.npy.gz)" \
    "$tmp/run.yaml" --set data.type=idx --set data.train="$tmp/gz_x.npy.gz" --set data.train_labels="$tmp/train_y.npy"
err "labels as a column" "col_y.npy: labels must have 1 dimension (n,), class numbers, not 2: save them as numpy.save(path, y.reshape(-1))" \
    "$tmp/run.yaml" --set data.train_labels="$tmp/col_y.npy"
o=$(timeout 60 "$bin" train --set model.type=mlp --set model.hidden=[8] --set data.type=npy \
    --set data.train="$tmp/bands_x.npy" --set data.train_labels="$tmp/rgb_y.npy" --set data.val= \
    --set train.steps=1 --set train.batch_size=16 --set train.threads=1 --set train.out_dir="$tmp/bands" --quiet 2>&1)
grep -qF "holds 64 images 13x16x16 read as (n, height, width, channels), channels last: 13 pixels high, 16 wide, with 16 channels. If the array is (n, channels, height, width)" <<<"$o" ||
    fail "13 bands of 16x16 in PyTorch's layout: no warning: $o"

e2e_finish ok
