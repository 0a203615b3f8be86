#!/usr/bin/env bash
# Bad input through the command line: each is exit status 1 (or 2 for usage)
# with a message that names the file, line and key, and nothing is written.
set -uo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # exit-code needle command...
    local code=$1 needle=$2; shift 2
    local out; out=$("$@" 2>&1); local rc=$?
    if [ $rc -ne "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
        echo "FAIL: $* -> exit $rc, wanted $code with '$needle'; got:"; echo "$out" | head -5
        fails=$((fails + 1))
    else
        echo "ok: $* -> $(head -1 <<<"$out")"
    fi
}
printf 'train:\n  steps: 5\n  batchsize: 3\n' >"$tmp/unknown.yaml"
expect 1 "unknown.yaml:3" "$bin" train "$tmp/unknown.yaml"
expect 1 "train.batchsize" "$bin" train "$tmp/unknown.yaml"
printf 'optim:\n  lr: fast\n' >"$tmp/type.yaml"
expect 1 "type.yaml:2" "$bin" train "$tmp/type.yaml"
printf 'optim: { schedule: cosin }\n' >"$tmp/enum.yaml"
expect 1 "constant" "$bin" train "$tmp/enum.yaml"
expect 1 "optim.lr" "$bin" train --set optim.lr=-1
expect 1 "no.such" "$bin" train --set no.such=1
expect 1 "missing.yaml" "$bin" train "$tmp/missing.yaml"
expect 1 "apt-get install" "$bin" train --set data.train=/usr/share/datasets/fashion-mnist/nope-idx3-ubyte.gz
expect 2 "unknown option '--bogus' (scaletrain --help lists" "$bin" train --bogus
expect 2 "unknown command" "$bin" nope
expect 2 "--init" "$bin" eval
expect 1 "data.val is empty; set it to the validation data" "$bin" eval --init nowhere.safetensors --set data.val=
# a configuration that evaluates while it trains: the same (it said to set train.eval_every: 0, which eval
# then refused as nothing to evaluate)
expect 1 "scaletrain: error: nothing to evaluate: data.val is empty; set it to the validation data" \
    "$bin" eval --init nowhere.safetensors --set data.val= --set train.eval_every=20
# a token model's too: its evaluation opens no training set, so nothing else would be read
expect 1 "data.val is empty; set it to the validation data" "$bin" eval --init nowhere.safetensors \
    --set model.type=gpt --set data.type=tokens --set data.train="$tmp/none.tokens" --set data.val=
# a token model's shape against its data: each message names the key to change and its bound
cat README.md docs/*.md | head -c 50000 >"$tmp/t.txt"
"$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt" >/dev/null
tok=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/t.tokens" --set data.val=
    --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set train.out_dir="$tmp/run")
expect 1 "has 781 samples of model.block_size tokens, fewer than one batch (train.batch_size 1024): set train.batch_size to 781 or less" \
    "$bin" train "${tok[@]}" --set model.block_size=64 --set train.batch_size=1024
# ... on 2 ranks, a batch they can split (781 was then refused as not a multiple of 2)
expect 1 "set train.batch_size to 780 or less (a multiple of the 2 ranks)" \
    "$bin" launch -n 2 train "${tok[@]}" --set model.block_size=64 --set train.batch_size=1024
# an evaluation of tokens names data.val alone: data.train (left at its Fashion-MNIST default) is not asked
# for, as it is not read (it was refused, naming data.train as the fix)
"$bin" train "${tok[@]}" --set model.block_size=64 --set train.batch_size=8 --set train.steps=2 --quiet \
    --set train.out_dir="$tmp/evalrun" || fail "the tiny gpt for eval"
expect 0 "eval: loss" "$bin" eval --init "$tmp/evalrun" --set model.type=gpt --set data.type=tokens \
    --set data.val="$tmp/t.tokens" --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
    --set model.block_size=64
# nor when data.train is set empty (it was refused: "data.train is empty"); a training run still refuses it,
# and plan, which reads the vocabulary from it, says so
expect 0 "eval: loss" "$bin" eval --init "$tmp/evalrun" --set model.type=gpt --set data.type=tokens \
    --set data.train= --set data.val="$tmp/t.tokens" --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
    --set model.block_size=64
expect 1 'data.train ("", --set) is empty; set it to the training token file' "$bin" train "${tok[@]}" \
    --set data.train= --set data.val="$tmp/t.tokens"
expect 1 "model.vocab_size is auto, so the planner reads it from data.train, and data.train is empty" "$bin" plan \
    "${tok[@]}" --set data.train= --set data.val="$tmp/t.tokens"
# the same weights without their recorded settings (as another program writes them): the mismatch's hint
# gives the settings the tensors' shapes say (it said only "the same model.* settings")
/usr/bin/python3 - "$tmp/evalrun/model.safetensors" "$tmp/nometa.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
# a gpt's weights evaluated as an mlp: the hint gives the gpt's settings, not the mlp's num_classes (the
# gpt's shape keys the user left at their defaults are the weights' already: the type alone differs)
expect 1 "run with those settings (--set model.type=gpt)" "$bin" eval --init "$tmp/evalrun" --set model.type=mlp
expect 1 "run with those settings (--set model.type=gpt --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32" \
    "$bin" eval --init "$tmp/evalrun" --set model.type=mlp --set model.n_layer=12 --set model.n_head=12 \
    --set model.n_embd=768
"$bin" eval --init "$tmp/evalrun" --set model.type=mlp 2>&1 | grep -q "num_classes\|model.hidden" &&
    { echo "FAIL: the hint for a gpt's weights names an mlp's settings"; fails=$((fails + 1)); }
# a setting from the weights' metadata is named as theirs in a message (it said "default")
/usr/bin/python3 - "$tmp/evalrun/model.safetensors" "$tmp/heads5.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h["__metadata__"]["model.n_head"] = "5"
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
expect 1 "model.n_head (5, auto: $tmp/heads5.safetensors's metadata)" "$bin" sample --init "$tmp/heads5.safetensors" \
    --prompt-ids 1,2 --tokens 1
expect 1 "its tensors' shapes say: --set model.n_layer=1 --set model.n_embd=32 --set model.block_size=64 --set model.vocab_size=256 (and model.n_head" \
    "$bin" eval --init "$tmp/nometa.safetensors" --set model.type=gpt --set data.type=tokens --set data.val="$tmp/t.tokens"
# under an address-space limit (ulimit -v), where OpenBLAS's buffers are
# mapped at its first products and wait for ever when they do not fit: a
# limit with no room for them is refused, naming it; one with room plans
# around them, and the run ends (it hung at 100% CPU, no message)
limited() { (ulimit -v "$1" && shift && exec "$@"); }
# (a plan that does not fit under it says an allocation fails there: past a memory limit the kernel's
# OOM killer ends the process, which the hint said here too)
expect 0 "(past this process's address-space limit, ulimit -v, an allocation fails: the run stops with an error)" \
    limited 3000000 "$bin" plan --set model.preset=gpt2-124m --set data.type=tokens --set data.val= \
    --set train.batch_size=4 --set train.micro_batch_size=4 --set train.activation_checkpointing=off
expect 1 "this process's address-space limit (ulimit -v 600000) leaves" \
    limited 600000 "$bin" train "${tok[@]}" --set model.block_size=64 --set train.batch_size=8
expect 0 "done: 2 steps" limited 1000000 timeout -s KILL 300 "$bin" train "${tok[@]}" --set model.n_layer=4 \
    --set model.n_embd=128 --set model.n_head=4 --set model.block_size=256 --set train.batch_size=64 \
    --set train.steps=2 --set train.threads=2 --set train.out_dir="$tmp/as"
# a warmup longer than the steps that train.epochs makes (checked once they are known)
expect 1 "optim.warmup_steps (1000, --set) is longer than train.steps (3, auto: 0.25 epoch(s) of 12 steps)" \
    "$bin" train "${tok[@]}" --set model.block_size=64 --set train.batch_size=64 --set train.epochs=0.25 \
    --set optim.warmup_steps=1000
[ ! -e "$tmp/run" ] || { echo "FAIL: the refused run wrote $tmp/run"; fails=$((fails + 1)); }
expect 1 "model.vocab_size (100, --set) is smaller than the vocabulary of $tmp/t.tokens (256): its tokens would index past the embedding; set model.vocab_size to 256 or more" \
    "$bin" train "${tok[@]}" --set model.vocab_size=100
expect 2 "--profile '5-99999999999999999999': expected FIRST-LAST steps" "$bin" train --profile 5-99999999999999999999
# a long context planned on a GPU (the device's attention keeps no T x T scores): it was refused past
# 46340 tokens as "too long for one T x T sgemm", which no product is
expect 0 "1xH100" "$bin" plan --hw 1xH100 --set model.type=gpt --set data.type=tokens --set model.block_size=65536 --set model.n_head=4 \
    --set model.n_embd=256 --set model.n_layer=2 --set model.vocab_size=256 --set precision=bf16 --set train.batch_size=1
expect 1 "model.num_classes (5, --set) is too small: the labels of data.train_labels (/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz) go up to 9; set model.num_classes to 10 or more (or auto)" \
    "$bin" train --set model.type=mlp --set model.num_classes=5 --set train.steps=1
expect 1 "data.train and data.train_labels: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz holds 60000 images but /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz holds 10000 labels; they must be a pair" \
    "$bin" train --set data.train_labels=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz --set train.steps=1
expect 1 "data.val_split (0.1, --set) holds out validation data from data.train, and data.val (/elsewhere.idx, --set) names other validation data; set one of them" \
    "$bin" train --set data.val=/elsewhere.idx --set data.val_split=0.1
expect 1 "data.val_split (0.1, --set) holds out validation data from data.train, and data.val_labels (/elsewhere.idx, --set) names other validation labels" \
    "$bin" train --set data.val_labels=/elsewhere.idx --set data.val_split=0.1
expect 1 "--set data.val_split=1: 1 is out of range" "$bin" train --set data.val_split=1
# every command takes --help: its usage on standard output, exit 0
for c in "train" "eval" "sample" "data" "data tokenize" "data inspect" "plan" "check" "launch" "bench" "report" "slurm"; do
    # shellcheck disable=SC2086
    expect 0 "usage:" "$bin" $c --help
done
# data tokenize with a text file first (OUT left out, or an input named as
# OUT): refused, the text kept; an existing token file is replaced
cp "$tmp/t.txt" "$tmp/keep.txt"
expect 2 "keep.txt exists and is not a token file (what looks like text); the first path is the token file to write" \
    "$bin" data tokenize "$tmp/keep.txt" "$tmp/t.txt"
cmp -s "$tmp/t.txt" "$tmp/keep.txt" || { echo "FAIL: data tokenize replaced the text file named first"; fails=$((fails + 1)); }
# a file-size limit (ulimit -f 30: 30 KiB) the checkpoint passes: a failed write, said, exit 1, the final
# weights written (SIGXFSZ killed the process without a word: nothing saved, exit 153)
out=$( (ulimit -f 30; timeout 60 "$bin" train --set model.type=mlp --set model.hidden=[8] --set data.val= \
    --set train.steps=3 --set train.out_dir="$tmp/fsize" --quiet) 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot write: File too large; the final weights were written all the same" <<<"$out" &&
    [ -s "$tmp/fsize/model.safetensors" ] && echo "ok: ulimit -f: said, the final weights written" ||
    { echo "FAIL: ulimit -f: exit $rc: $out"; fails=$((fails + 1)); }
# --json whose result cannot be written (standard output a full device): exit 1, said (it exited 0, a
# script reading $? taking the missing result for a success); the weights written all the same
expect 1 "the --json result was not written whole: 1 line of standard output not written (a write failed: No space left on device); the run's checkpoints and final weights are whole" \
    sh -c '"$0" train --set model.type=mlp --set model.hidden=[8] --set data.val= --set train.steps=2 \
        --set train.out_dir="$1" --json --quiet >/dev/full' "$bin" "$tmp/jfull"
[ -s "$tmp/jfull/model.safetensors" ] || { echo "FAIL: --json to /dev/full: no weights"; fails=$((fails + 1)); }
expect 1 "the --json result was not written whole" \
    sh -c '"$0" eval --init "$1" --set model.type=mlp --json --quiet >/dev/full' "$bin" "$tmp/jfull"
# launch with its standard output closed (>&-): the lines lost are said (mpirun's pipe took fd 1, and
# the job's lines went nowhere without a word)
if command -v mpirun >/dev/null; then
    expect 0 "lines of the job's output not written to standard output (a write failed: Bad file descriptor)" \
        sh -c '"$0" launch -n 2 train --set model.type=mlp --set model.hidden=[8] --set data.val= \
            --set train.steps=2 --set train.out_dir="$1" >&-' "$bin" "$tmp/closed"
fi
# train.out_dir a symbolic link loop: said as a loop (it said "make train.out_dir writable")
ln -s "$tmp/loopb" "$tmp/loopa" && ln -s "$tmp/loopa" "$tmp/loopb"
expect 1 "train.out_dir $tmp/loopa: a symbolic link on its path leads back to itself" \
    "$bin" train --set model.type=mlp --set model.hidden=[8] --set data.val= --set train.steps=2 \
    --set train.out_dir="$tmp/loopa"
# data inspect of a safetensors file whose header length is past 2^48 (damaged): its reader's message (it
# was read as an IDX file: "not an IDX file (magic 00 00 00 00 ...)")
printf '\x00\x00\x00\x00\x00\x00\x00\x80{"a":1}' >"$tmp/big.safetensors"
expect 1 "big.safetensors: header says 9223372036854775808 bytes but the file has 7 after the length" \
    "$bin" data inspect "$tmp/big.safetensors"
# and a FIFO (or a device) as OUT: refused (opening it to look waited for a writer for ever; a device
# such as /dev/null, as root, would have been renamed over)
mkfifo "$tmp/pipe.tokens"
expect 2 "pipe.tokens exists and is not a file (a pipe or a device)" \
    timeout 20 "$bin" data tokenize "$tmp/pipe.tokens" "$tmp/t.txt"
[ -p "$tmp/pipe.tokens" ] || { echo "FAIL: data tokenize replaced the FIFO named as OUT"; fails=$((fails + 1)); }
expect 0 "t.tokens: " "$bin" data tokenize "$tmp/t.tokens" "$tmp/t.txt"
# inputs that are not text: refused, nothing written. The command run again
# over a folder that now holds its output (or its shards), a .gz, a program
mkdir -p "$tmp/corpus" && cp "$tmp/t.txt" "$tmp/corpus/a.txt" && cp "$tmp/t.tokens" "$tmp/corpus/all.tokens"
cp "$tmp/corpus/all.tokens" "$tmp/all.before"
expect 1 "corpus/all.tokens: a scaletrain token file, not text: data tokenize reads text files. Leave it out of the inputs (is it the output, or a shard of it, of an earlier tokenize run" \
    "$bin" data tokenize "$tmp/corpus/all.tokens" "$tmp/corpus/a.txt" "$tmp/corpus/all.tokens"
cmp -s "$tmp/corpus/all.tokens" "$tmp/all.before" || { echo "FAIL: data tokenize rewrote its output from itself"; fails=$((fails + 1)); }
gzip -c "$tmp/t.txt" >"$tmp/t.txt.gz"
expect 1 "t.txt.gz: a gzip file, not text: data tokenize reads text files; decompress it first (zcat $tmp/t.txt.gz > FILE.txt)" \
    "$bin" data tokenize "$tmp/new.tokens" "$tmp/t.txt" "$tmp/t.txt.gz"
expect 1 "$bin: an ELF file (a program or shared library), not text" "$bin" data tokenize "$tmp/new.tokens" "$bin"
[ ! -e "$tmp/new.tokens" ] || { echo "FAIL: a refused tokenize wrote its output"; fails=$((fails + 1)); }
/usr/bin/python3 -c 'import lzma, sys, tarfile; open(sys.argv[1] + ".xz", "wb").write(lzma.compress(b"text " * 100)); t = tarfile.open(sys.argv[1] + ".tar", "w"); t.add(sys.argv[2], arcname="t.txt"); t.close()' "$tmp/packed" "$tmp/t.txt"
expect 1 "packed.xz: a compressed file or archive (xz, bzip2, zstd or tar), not text" "$bin" data tokenize "$tmp/new.tokens" "$tmp/packed.xz"
expect 1 "packed.tar: a compressed file or archive (xz, bzip2, zstd or tar), not text" "$bin" data tokenize "$tmp/new.tokens" "$tmp/packed.tar"
# an image, a PDF, another program's zip: refused, saying what to do (they were tokenized as text)
printf '\211PNG\r\n\032\n\000\000\000\rIHDR' >"$tmp/pic.png"
printf '%%PDF-1.7\n%%\342\343\317\323\n1 0 obj\n' >"$tmp/doc.pdf"
/usr/bin/python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], "w"); z.write(sys.argv[2], "t.txt"); z.close()' "$tmp/t.zip" "$tmp/t.txt"
expect 1 "pic.png: an image (PNG, JPEG, GIF or WebP), not text" "$bin" data tokenize "$tmp/new.tokens" "$tmp/pic.png"
expect 1 "doc.pdf: a PDF document, not text: data tokenize reads text files; extract its text first (pdftotext FILE.pdf FILE.txt)" \
    "$bin" data tokenize "$tmp/new.tokens" "$tmp/doc.pdf"
expect 1 "t.zip: a zip archive, not text: data tokenize reads text files; unpack it first (unzip FILE.zip)" \
    "$bin" data tokenize "$tmp/new.tokens" "$tmp/t.zip"
expect 1 "t.zip: a zip archive, which scaletrain does not read; unpack it first" "$bin" data inspect "$tmp/t.zip"
[ ! -e "$tmp/new.tokens" ] || { echo "FAIL: a refused tokenize wrote its output"; fails=$((fails + 1)); }
# bytes of no known format that are not text, and a file given three times (two of them by another
# path): tokenized, each said in a warning (they were taken without a word)
/usr/bin/python3 -c 'import sys; open(sys.argv[1], "wb").write(bytes(range(128, 256)) * 4)' "$tmp/noise.bin"
expect 0 "warning: $tmp/noise.bin does not look like text (its first bytes are not UTF-8, or hold a NUL)" \
    "$bin" data tokenize "$tmp/noisy.tokens" "$tmp/t.txt" "$tmp/noise.bin"
expect 0 "warning: $tmp/t.txt is given 3 times (inputs 1, 3 and 4, by these or other paths): its text is in the stream 3 times" \
    "$bin" data tokenize "$tmp/twice.tokens" "$tmp/t.txt" "$tmp/corpus/a.txt" "$tmp/./t.txt" "$tmp/t.txt"
expect 2 "$tmp/notyet/ is a directory" "$bin" data tokenize "$tmp/notyet/" "$tmp/t.txt"
[ ! -e "$tmp/notyet" ] || { echo "FAIL: data tokenize made a folder it then refused"; fails=$((fails + 1)); }
# OUT a directory: refused before anything is read; OUT in folders not made yet: made (as train.out_dir is)
expect 2 "$tmp/corpus is a directory; the first path is the token file to write: name a file in it ($tmp/corpus/train.tokens)" \
    "$bin" data tokenize "$tmp/corpus" "$tmp/t.txt"
expect 0 "$tmp/new/data/train.tokens: 50000 tokens" "$bin" data tokenize "$tmp/new/data/train.tokens" "$tmp/t.txt"
# data inspect names a file it does not read by what it is, and what to do with it
expect 1 "t.txt: what looks like text, which scaletrain does not read; \`scaletrain data tokenize OUT.tokens FILE\`" \
    "$bin" data inspect "$tmp/t.txt"
# a configuration given where data belongs, and the text files a run writes: what they are, not
# tokenize's hint
expect 1 "unknown.yaml: what looks like a scaletrain configuration (YAML), not data; \`scaletrain check $tmp/unknown.yaml\` checks it" \
    "$bin" data inspect "$tmp/unknown.yaml"
expect 1 "unknown.yaml: not an IDX file but what looks like a scaletrain configuration (YAML); give it as the command's CONFIG" \
    "$bin" train --set data.train="$tmp/unknown.yaml" --set train.steps=1
printf '{"displayTimeUnit":"ms","traceEvents":[\n' >"$tmp/trace.json"
expect 1 "trace.json: what looks like a run's trace.json (a Chrome trace, --profile's), which scaletrain does not read; open it in Perfetto" \
    "$bin" data inspect "$tmp/trace.json"
head -c 64 /dev/zero | tr '\0' '\251' >"$tmp/odd.bin" # (no format's first bytes; nor an empty file)
expect 1 "odd.bin: not a format scaletrain reads (its first bytes: a9 a9 a9 a9 a9 a9 a9 a9 a9); data inspect reads token files" \
    "$bin" data inspect "$tmp/odd.bin"
: >"$tmp/empty.bin"
expect 1 "empty.bin: empty (0 bytes); data inspect reads" "$bin" data inspect "$tmp/empty.bin"
printf 'PK\003\004\024\000\010\010\010\000archive/data.pkl' >"$tmp/model.pt"
expect 1 "model.pt: a zip archive: PyTorch's torch.save (a .pt or .bin checkpoint) or NumPy's .npz, which scaletrain does not read; weights are read from safetensors files" \
    "$bin" data inspect "$tmp/model.pt"
# a file's bytes reach the terminal escaped: a tensor name holding an
# escape sequence, in data inspect's listing and in a load's error
h='{"a\u001b[31mRED":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"model.n_embd":"x\u0007"}}'
{ printf "\\$(printf %03o ${#h})\\000\\000\\000\\000\\000\\000\\000"; printf '%s' "$h"; printf '\000\000\000\000'; } >"$tmp/esc.safetensors"
expect 0 'a\x1b[31mRED' "$bin" data inspect "$tmp/esc.safetensors"
expect 0 'model.n_embd x\x07' "$bin" data inspect "$tmp/esc.safetensors"
expect 1 'a\x1b[31mRED: in the file but not in the model' "$bin" eval --set model.type=mlp --set model.n_embd=32 \
    --init "$tmp/esc.safetensors"
# (the metadata's value, which eval takes for the model's where not set, escaped too)
expect 1 "esc.safetensors's metadata, model.n_embd: 'x\\x07' is not a valid YAML value" "$bin" eval \
    --set model.type=mlp --init "$tmp/esc.safetensors"
if "$bin" data inspect "$tmp/esc.safetensors" 2>&1 | grep -q $'\x1b'; then
    echo "FAIL: data inspect printed a raw escape byte"; fails=$((fails + 1))
fi
# a safetensors header length past any file's size is named as such, not as another format
{ printf '\000\000\000\000\000\001\000\000'; printf '{"a":1}'; } >"$tmp/absurd.safetensors"
expect 1 "absurd.safetensors: header says 1099511627776 bytes but the file has 7 after the length" \
    "$bin" data inspect "$tmp/absurd.safetensors"
# settings that pass their key's range but not what the run makes of them,
# and a data file that does not open, named by its key
expect 1 "train.out_dir (\"\", --set) is empty; set it to the folder the run writes to" "$bin" train --set train.out_dir=
expect 1 "model.dropout (0.99999999999, --set) rounds to 1 in single precision" \
    "$bin" train --set model.dropout=0.99999999999 --set train.out_dir="$tmp/run"
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    expect 1 "model.pool: the max-pool after conv block 4 would halve a 1x1 map (the images are 28x28, and 4 max-pools before it halved them)" \
        "$bin" plan --set model.type=cnn --set model.channels=[2,2,2,2,2] --set model.pool=[1,1,1,1,1]
    expect 1 "data.val_labels: $tmp/none.gz: cannot open" \
        "$bin" train --set data.val_labels="$tmp/none.gz" --set train.out_dir="$tmp/run"
    # an evaluation batch past the validation set: the set in one batch (it
    # was built at the size asked: 3 TiB, and the run died); the plan's hint names the key
    expect 0 "# auto: the whole validation set (train.eval_batch_size 1073741824 asked for more)" \
        "$bin" train --set model.type=mlp --set model.hidden=[8] --set train.steps=1 --set train.batch_size=8 \
        --set train.eval_batch_size=1073741824 --set train.out_dir="$tmp/evb"
    # (plan bounds it by the validation set, as the run does: a plan at micro-batch 1 and "does not fit"
    # no more)
    expect 0 "model: mlp" "$bin" plan --set model.type=mlp --set train.eval_batch_size=100000000
    if "$bin" plan --set model.type=mlp --set train.eval_batch_size=100000000 2>&1 | grep -q "does not fit"; then
        echo "FAIL: plan sized the evaluation at train.eval_batch_size past the validation set"; fails=$((fails + 1))
    fi
fi
# validation data plan cannot count (not there yet): the batch asked for, its hint naming the key
expect 0 "the evaluation's graph takes the most" "$bin" plan --set model.preset=gpt2-124m --set data.type=tokens \
    --set data.val="$tmp/nowhere.tokens" --set train.eval_batch_size=100000
expect 1 "the evaluation's graph, at train.eval_batch_size 100000000: tensor wte.out" "$bin" plan \
    --set model.preset=gpt2-124m --set data.type=tokens --set data.val="$tmp/nowhere.tokens" \
    --set train.eval_batch_size=100000000
[ ! -e "$tmp/run" ] || { echo "FAIL: a refused run wrote $tmp/run"; fails=$((fails + 1)); }
# options given twice, or to a command that has no use for them, and --set without a key
expect 2 "--init given twice ('a' and 'b'); give it once" "$bin" train --init a --init b
expect 2 "--init is an option of train and eval" "$bin" plan --init a
expect 1 "--set =1: no key before the '='" "$bin" plan --set =1
expect 2 "unknown option '--shard'" "$bin" data tokenize "$tmp/o.tokens" "$tmp/t.txt" --shard 100
expect 2 "--jobs writes shards J at a time, and needs --shard-tokens N" "$bin" data tokenize "$tmp/o.tokens" "$tmp/t.txt" --jobs 2
# launch checks its own arguments before mpirun sees them
expect 2 "host 'a' has slot count '0'" "$bin" launch -n 2 --hosts a:0 true
expect 2 "an empty host name" "$bin" launch -n 2 --hosts localhost:2, true
expect 2 "slot count '99999999999999999999'" "$bin" launch -n 2 --hosts localhost:99999999999999999999 true
expect 2 "want a number of ranks >= 1" "$bin" launch -n 4294967297 true
expect 2 "--cores-per-rank 0: want a number of cores >= 1" "$bin" launch -n 2 --cores-per-rank 0 true
expect 2 "-n auto counts this node's GPUs; with --hosts give the ranks" "$bin" launch -n auto --hosts a:2 true
expect 2 "-n foo: want a number of ranks >= 1, or auto" "$bin" launch -n foo true
expect 2 "--output-timeout 0: want seconds > 0" "$bin" launch -n 2 --output-timeout 0 true
# launch's options after a scaletrain command: said once by launch (every rank refused them before)
expect 2 "--max-restarts comes after the command (train), which would take it as its own: launch's options go before the command" \
    "$bin" launch -n 2 train x.yaml --max-restarts 2
expect 2 "unknown option '--max-restarts=2' (launch's options take their value as the next word" \
    "$bin" launch -n 2 --max-restarts=2 train x.yaml
expect 2 "--output-timeout 5x: want seconds > 0" "$bin" launch -n 2 --output-timeout 5x true
# a misspelt command: said before mpirun (which exited 134 in a banner, and was restarted)
expect 2 "scaletrain launch: nosuchprog is neither a scaletrain command launch starts (train, eval, data) nor a program on PATH" \
    "$bin" launch -n 2 --max-restarts 2 nosuchprog
expect 2 "1 to 1024 devices per node" "$bin" plan --hw 4294967297xH100
# plan's numbers whole or refused (atoi had read --nodes 2x as 2 and --nodes abc as the default)
for a in "--nodes abc" "--nodes 2x" "--nodes 0"; do
    expect 2 "--nodes takes a whole number from 1 to 100000" "$bin" plan $a
done
for a in "--efficiency abc" "--efficiency 0" "--efficiency 1.5"; do
    expect 2 "--efficiency takes a number in (0, 1]" "$bin" plan $a
done
# an empty --hw entry (a stray comma) is named as such (it was "unknown hardware ''")
# (--hw's value, as --nodes': a usage error, exit 2)
expect 2 "--hw 8xH100,: entry 2 of 2 is empty" "$bin" plan --set model.type=mlp --hw "8xH100,"
expect 2 "--hw 8xH100,,4xL40S: entry 2 of 3 is empty" "$bin" plan --set model.type=mlp --hw "8xH100,,4xL40S"
expect 2 "--hw T4: unknown hardware 'T4'; known: L40S" "$bin" plan --set model.type=mlp --hw T4
# a micro-batch that does not divide the batch: the nearest divisors named
expect 1 "set train.micro_batch_size to a divisor of 128 (the nearest: 4 or 8), or auto" "$bin" plan \
    --set model.type=mlp --set train.micro_batch_size=5
# --json and --quiet are train's and eval's: elsewhere they were taken and did nothing (check --json printed text)
expect 2 "check: --json is an option of scaletrain train and eval" "$bin" check --json
expect 2 "plan: --quiet is an option of scaletrain train and eval (plan takes --json)" "$bin" plan --quiet
expect 2 "bench: --json is an option of scaletrain train and eval" "$bin" bench --json
# batch-norm on a 1x1 map with one sample a micro-batch: the shape and the ways out named (it said "use a
# batch larger than 1" of a batch of 4)
expect 1 "batchnorm bn.4.out: training needs more than one value per channel, and its input is 1 sample of a 1x1 map" \
    "$bin" train --set model.channels=[4,4,4,4,4] --set model.pool=[1,1,1,1,0] --set train.batch_size=4 \
    --set train.micro_batch_size=1 --set train.steps=1 --set data.val= --set train.out_dir="$tmp/bn1"
# launch of a command that runs as one process: refused by name (it looked for a program "plan" on PATH)
expect 2 "scaletrain launch: scaletrain plan runs as one process" "$bin" launch -n 2 plan
# check too (each rank started its own 2-rank jobs inside the job: "not ready" on a ready machine), and
# as one of several processes of plain mpirun
expect 2 "scaletrain launch: scaletrain check runs as one process a machine and starts its own ranks" "$bin" launch -n 2 check
expect 2 "scaletrain check: error: this process is one of 2 a launcher started (OMPI_COMM_WORLD_SIZE=2)" \
    env OMPI_COMM_WORLD_SIZE=2 "$bin" check
# and as the one rank of mpirun -n 1 (its own mpirun was refused as a recursive call: two FAILs, "not ready")
expect 2 "scaletrain check: error: this process was started by mpirun as an MPI rank" \
    env OMPI_COMM_WORLD_SIZE=1 "$bin" check
# an empty path ('', a shell variable that was not set): said as such (its errors read "error: : cannot open")
expect 2 "scaletrain eval: --init '' names no file" "$bin" eval --init ''
expect 2 "scaletrain train: --resume '' names no file" "$bin" train --resume ''
expect 2 "scaletrain plan: an empty argument ('') where the config file's path goes" "$bin" plan ''
expect 2 "scaletrain data inspect: an empty argument ('')" "$bin" data inspect ''
expect 2 "scaletrain data tokenize: an empty argument ('') where the token file's path goes" "$bin" data tokenize '' "$tmp/t.txt"
expect 2 "scaletrain report: an empty argument ('') where RUN_DIR goes" "$bin" report ''
# --set with more after its value: refused (the parser stopped at the value's end: [16], 32 was [16])
expect 1 "'[16], 32' has ', 32' after its value, which would be dropped" "$bin" plan --set model.type=mlp --set 'model.hidden=[16], 32'
expect 1 "'\"runs/a\" b' has 'b' after its value" "$bin" plan --set 'train.out_dir="runs/a" b'
# brackets nested 200000 deep (400 KB): refused at once (the YAML parser's time grows with the square of the
# depth: it ran for hours)
/usr/bin/python3 -c "import sys; n = 200000; open(sys.argv[1], 'w').write('model: { type: mlp, hidden: ' + '[' * n + ']' * n + ' }\n')" "$tmp/deep.yaml"
expect 1 "deep.yaml:1: brackets nested more than 32 deep" timeout 20 "$bin" plan "$tmp/deep.yaml"
# which of slurm's names is wrong, and a --steps under bench's default warm-up, are said
expect 2 "--partition 'a b': want letters, digits and -_., only" "$bin" slurm "$tmp/unknown.yaml" --nodes 1 --gpus-per-node 1 --partition 'a b'
expect 2 "--steps 0 must be more than --warmup 5 (its default" "$bin" bench --steps 0
# a FIFO named as data (a hung source): refused at once, where the open waited for a writer for ever,
# stop signals and all
mkfifo "$tmp/fifo.tokens"
expect 1 "data.train: $tmp/fifo.tokens: a FIFO, not a regular file: a token file is mapped" \
    timeout 20 "$bin" train "${tok[@]}" --set data.train="$tmp/fifo.tokens"
expect 1 "fifo.tokens: a FIFO, not a regular file; data inspect reads files" \
    timeout 20 "$bin" data inspect "$tmp/fifo.tokens"
expect 1 "data.train: $tmp/fifo.tokens: a FIFO, not a regular file" \
    timeout 20 "$bin" train --set model.type=mlp --set data.train="$tmp/fifo.tokens" --set data.val=
# an option that takes one value, given twice: refused naming both (the last won without a word); a --set
# value that spells one is a value
expect 2 "scaletrain launch: -n given twice ('1' and '2'); give it once" "$bin" launch -n 1 -n 2 true
expect 2 "scaletrain bench: --out given twice ('a' and 'b')" "$bin" bench --out a --set train.steps=3 --out b
expect 2 "scaletrain plan: --hw given twice ('8xH100' and '4xL40S')" "$bin" plan --hw 8xH100 --hw 4xL40S
expect 2 "scaletrain report: --out given twice" "$bin" report "$tmp" --out a --out b
expect 2 "scaletrain slurm: --nodes given twice ('1' and '2')" "$bin" slurm x.yaml --nodes 1 --gpus-per-node 1 --nodes 2
expect 2 "scaletrain data tokenize: --jobs given twice" "$bin" data tokenize "$tmp/o.tokens" --jobs 1 x --jobs 2
expect 1 "--set --hw=1: unknown key --hw" "$bin" plan --hw 8xH100 --set --hw=1
# a path data inspect cannot open: said as an error (it was perror's bare "PATH: No such file...")
expect 1 "scaletrain: error: $tmp/none.npy: cannot open: No such file or directory" "$bin" data inspect "$tmp/none.npy"
# train.epochs set beside train.steps: said to be unused (it was ignored without a word)
expect 0 "warning: train.epochs (2, --set) is not used: train.steps (1, --set) sets the run's length" \
    "$bin" train --set model.type=mlp --set model.hidden=[8] --set train.epochs=2 --set train.steps=1 \
    --set data.val= --set train.out_dir="$tmp/epochs" --set log.progress=off
# --profile with a --set of the keys it sets: refused (--set log.trace=false dropped the profile asked for)
expect 2 "--profile 2 sets log.trace and log.trace_steps, and so does --set log.trace=false; give one of them" \
    "$bin" train --profile 2 --set log.trace=false
# plan's example batch for ranks that do not split it stays within train.batch_size's limit (it offered
# 1126400000, past 2^30)
expect 0 "is not a multiple of 102400000 ranks (choose a multiple of 102400000, e.g. 1024000000)" \
    "$bin" plan --set train.batch_size=1073741824 --hw 100000x1024xH100 --set data.val=
# train.out_dir a file, or under one; a symbolic link to nothing: said so (it was "cannot open
# .../run.lock: Not a directory; make train.out_dir writable", and the link taken as a folder made)
echo x >"$tmp/afile2"
expect 1 "train.out_dir $tmp/afile2/sub is a file, or a path under one, not a directory" \
    "$bin" train --set train.out_dir="$tmp/afile2/sub" --set train.steps=1
ln -sfn "$tmp/nowhere" "$tmp/dangling"
expect 1 "--out: $tmp/dangling: is a symbolic link to a path that does not exist" \
    "$bin" bench -n 1 --steps 3 --warmup 1 --out "$tmp/dangling"
# check names the key of a token file it cannot open, as train does
expect 1 "data.train: $tmp/none.tokens: cannot open" "$bin" check --set model.type=gpt --set data.type=tokens \
    --set data.train="$tmp/none.tokens" --set data.val=
# plan names the key of a data file it cannot open, as train does (it gave the path alone)
expect 1 "scaletrain: error: data.train: nope.gz: cannot open" "$bin" plan --set data.train=nope.gz
# a directory named as data is said to be one (it was called a FIFO, a device or a socket)
mkdir -p "$tmp/adir"
expect 1 "$tmp/adir: a directory, not a regular file: give the data file itself" \
    "$bin" train --set model.type=mlp --set data.type=npy --set data.train="$tmp/adir" \
    --set data.train_labels="$tmp/adir/y.npy" --set data.val=
# labels naming the inputs' own file: said by its key (the labels' error named data.train)
expect 1 "data.train_labels ($tmp/img, --set) names the same file as data.train ($tmp/img, --set)" "$bin" plan \
    --set model.type=mlp --set data.train="$tmp/img" --set data.train_labels="$tmp/img" --set data.val=
# a rank's errors say its rank; a batch script's own shell is one process (SLURM_NTASKS without a step:
# its errors said "rank 0")
expect 1 "scaletrain: error: $tmp/missing.yaml: cannot open" env SLURM_NTASKS=2 SLURM_PROCID=0 "$bin" train "$tmp/missing.yaml"
expect 1 "scaletrain: error (rank 1): $tmp/missing.yaml: cannot open" \
    env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_PROCID=1 "$bin" train "$tmp/missing.yaml"
# sample's --help after a flag without a value (--no-graph was read as taking one: "unknown option '--help'")
expect 0 "--no-graph" "$bin" sample --no-graph --help
# slurm: a batch the job's ranks cannot split fails now, not after the job's wait in the queue
printf 'train: { batch_size: 16, micro_batch_size: 4 }\n' >"$tmp/batch.yaml"
expect 1 "train.batch_size (16, batch.yaml:1) cannot be split over 3 ranks" "$bin" slurm "$tmp/batch.yaml" --nodes 3 --gpus-per-node 1
expect 1 "set train.batch_size to a multiple of 32, or a micro-batch size that divides the 2 samples per rank" \
    "$bin" slurm "$tmp/batch.yaml" --nodes 2 --gpus-per-node 4
# slurm over an out_dir holding a run's checkpoint: the job's --resume auto continues it; where that run
# is at this config's train.steps already, the job would end at once (a new experiment given the same
# out_dir waited in the queue to train nothing): said before the job is queued
"$bin" train --set train.threads=1 --set model.type=mlp --set model.hidden=[8] --set data.val= --set train.steps=3 \
    --set train.out_dir="$tmp/slurm_done" --quiet >/dev/null 2>&1 || fail "the run for slurm's out_dir"
printf 'model: { type: mlp, hidden: [8] }\ntrain: { steps: 3, out_dir: "%s" }\n' "$tmp/slurm_done" >"$tmp/done.yaml"
expect 0 "scaletrain slurm: warning: train.out_dir $tmp/slurm_done holds a run's checkpoint at step 3 ($tmp/slurm_done/ckpt/step-3): the job's --resume auto continues that run, which at train.steps 3 has nothing to train" \
    "$bin" slurm "$tmp/done.yaml" --nodes 1 --gpus-per-node 0
sed -i 's/steps: 3/steps: 6/' "$tmp/done.yaml"
expect 0 "scaletrain slurm: note: train.out_dir $tmp/slurm_done holds a run's checkpoint at step 3 ($tmp/slurm_done/ckpt/step-3): the job's --resume auto continues that run; for a new run" \
    "$bin" slurm "$tmp/done.yaml" --nodes 1 --gpus-per-node 0
# without --cpus-per-task each rank may get one CPU: said, with what to give
expect 0 "scaletrain slurm: note: without --cpus-per-task each rank gets the CPUs the cluster gives a task by default, often one" \
    "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2
out=$("$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2 --cpus-per-task 12 2>&1 >/dev/null)
grep -q "cpus-per-task" <<<"$out" && fail "slurm with --cpus-per-task still notes it: $out"
# --stop-before S: the ranks' stop S s before the limit (a checkpoint that takes longer than 120 s to
# write was cut short by the limit, and the job not requeued); not before half the job's time
expect 0 "#SBATCH --signal=TERM@600" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2 --time 2:00:00 --stop-before 600
expect 0 "#SBATCH --signal=TERM@30" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2 --time 5 --stop-before 30
expect 2 "--stop-before 600 with --time 10:00 (600 s): the ranks would be stopped before half the job's time" \
    "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2 --time 10:00 --stop-before 600
expect 2 "--stop-before 5: want a whole number from 10 to 65535" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 2 --stop-before 5
# slurm --time takes SLURM's forms only (1:2:3:4 and 1-2-3 were written into the script)
for t in 1:2:3:4 1--2 1-2-3 00:-1 1: 99999999999999999999 1-999999999999 ; do
    expect 2 "--time $t: want HH:MM:SS" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 1 --time "$t"
done
# a --time shorter than the stop's lead: refused under a minute, the lead a quarter of it under 8 minutes
expect 2 "--time 0:30 is 30 s: too short" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 1 --time 0:30
expect 0 "#SBATCH --signal=TERM@75" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 1 --time 5
expect 0 "#SBATCH --signal=TERM@120" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 1 --time 1-0
# SLURM's "no limit" forms are taken as SLURM takes them (they were refused as malformed)
for t in 0 UNLIMITED infinite; do
    expect 0 "#SBATCH --time=$t" "$bin" slurm "$tmp/batch.yaml" --nodes 1 --gpus-per-node 1 --time "$t"
done
# a % in the working directory (SLURM reads %j in the log's path, under it): refused
mkdir -p "$tmp/pc%j" && cp "$tmp/batch.yaml" "$tmp/pc%j/"
expect 1 "holds a quote, a backslash, a line end or a %" sh -c "cd \"$tmp/pc%j\" && \"$(realpath "$bin")\" slurm batch.yaml --nodes 1 --gpus-per-node 1"
# and a backslash, which sbatch reads as an escape even inside the quotes (b\sl was written, read as bsl)
mkdir -p "$tmp/b\\sl" && cp "$tmp/batch.yaml" "$tmp/b\\sl/"
expect 1 "holds a quote, a backslash, a line end or a %" sh -c "cd \"$tmp/b\\\\sl\" && \"$(realpath "$bin")\" slurm batch.yaml --nodes 1 --gpus-per-node 1"
# a config path past 255 bytes: the run's path whole (it was cut to 255 bytes, and slurm failed to resolve it)
long="$tmp/$(printf 'd%.0s' $(seq 1 120))/$(printf 'e%.0s' $(seq 1 120))"
mkdir -p "$long" && cp "$tmp/batch.yaml" "$long/"
expect 0 "train '$long/batch.yaml' --resume auto" "$bin" slurm "$long/batch.yaml" --nodes 1 --gpus-per-node 1
# a working directory with a space: --chdir quoted (#SBATCH lines split on blanks)
mkdir -p "$tmp/a dir" && cp "$tmp/batch.yaml" "$tmp/a dir/"
expect 0 "#SBATCH --chdir=\"$tmp/a dir\"" sh -c "cd \"$tmp/a dir\" && \"$(realpath "$bin")\" slurm batch.yaml --nodes 1 --gpus-per-node 1"
if ! nvidia-smi -L >/dev/null 2>&1; then # no GPU here: cuda is refused with the reason and what to do
    expect 1 "use train.device: cpu" "$bin" train --set train.device=cuda --set train.out_dir="$tmp/cuda"
fi
printf 'not weights' >"$tmp/bad.safetensors"
expect 1 "bad.safetensors" "$bin" eval --init "$tmp/bad.safetensors" --set train.eval_steps=1
# a script that could not be written whole is a failure (a full disk under > job.sbatch), not exit 0
expect 1 "writing standard output failed (No space left on device): what it holds is incomplete" sh -c "\"$(realpath "$bin")\" slurm \"$tmp/batch.yaml\" --nodes 1 --gpus-per-node 1 >/dev/full"
expect 1 "writing standard output failed" sh -c "\"$(realpath "$bin")\" plan --json >/dev/full"
# (report wrote its files and lost its line saying so, exit 0)
expect 1 "writing standard output failed" sh -c "\"$(realpath "$bin")\" report \"$tmp/jfull\" --no-png >/dev/full"
# an empty or cut number is not 0, nor a list with a hole
expect 2 "--max-restarts : want a number of restarts" "$bin" launch -n 2 --max-restarts "" train x.yaml
expect 2 "--warmup : want a number of steps" "$bin" bench --warmup ""
expect 2 "-n 1,2,: want rank counts" "$bin" bench -n 1,2,
expect 2 "-n 1,2,1: want rank counts like 1,2,4, each once" "$bin" bench -n 1,2,1 # (the two runs of 1 shared their log)
# an out_dir under /proc: said as such (it said "0.0 MiB free on its filesystem")
[ -d /proc/self ] && expect 1 "train.out_dir /proc/scaletrain-run is on a file system of size 0 (/proc, /sys" \
    "$bin" train --set model.type=mlp --set train.steps=1 --set train.out_dir=/proc/scaletrain-run
expect 2 "--out needs a directory" "$bin" report "$tmp" --out
# sizes each in range whose product is past any memory: refused naming the tensor (they wrapped int64)
for i in $(seq 1 50); do echo "some text $i"; done >"$tmp/s.txt"
"$bin" data tokenize "$tmp/s.tokens" "$tmp/s.txt" >/dev/null
expect 1 "tensor wte.out: its dimensions (1024 in dimension 2) multiply past 2^46 elements, beyond any memory" \
    "$bin" plan --set model.type=gpt --set data.type=tokens --set model.vocab_size=256 --set model.block_size=1048576 \
    --set model.n_head=16 --set model.n_embd=1024 --set train.batch_size=131072 --set train.micro_batch_size=131072 \
    --set data.train="$tmp/s.tokens" --set data.val=
# labels that are all 0: plan refuses them as train does (it planned a one-class head)
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('>II',0x801,60000)+bytes(60000))" "$tmp/zero-labels"
expect 1 "data.train_labels ($tmp/zero-labels) holds only label 0: a classifier needs at least 2 classes" \
    "$bin" plan --set data.train_labels="$tmp/zero-labels" --set data.val=
# the loss scale's floor, 2^-24 (as its documentation says), is accepted
expect 0 "hardware" "$bin" plan --set optim.loss_scale=5.9604644775390625e-08 --set data.val=
[ ! -e runs/default/unknown ] || fails=$((fails + 1))
# data inspect of a run's out_dir before its first checkpoint: said as one (it read "not a run's
# out_dir (no ckpt/)"), in use while a run trains there (exit 0), else no checkpoint (exit 1)
timeout 120 "$bin" train --set train.steps=100000 --set data.val= --set train.checkpoint_every=100000 \
    --set log.progress=off --set train.out_dir="$tmp/early" >/dev/null 2>&1 &
tpid=$!
for _ in $(seq 600); do [ -s "$tmp/early/metrics.jsonl" ] && break; sleep 0.1; done
out=$("$bin" data inspect "$tmp/early" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qx "$tmp/early: a run's out_dir with no checkpoint yet" <<<"$out" &&
    grep -q "^in use: a run on host .*(it holds $tmp/early/run.lock): its first checkpoint comes at train.checkpoint_every$" <<<"$out"; then
    echo "ok: data inspect of a run before its first checkpoint"
else
    echo "FAIL: data inspect of a run before its first checkpoint: exit $rc: $out"
    fails=$((fails + 1))
fi
kill -KILL "$(pgrep -P $tpid)" 2>/dev/null
{ wait $tpid; } 2>/dev/null
expect 1 "$tmp/early: no checkpoint: --resume auto starts the run over" "$bin" data inspect "$tmp/early"
# (its checkpoints removed, its final weights there: those described, --init taking them)
cp "$tmp/jfull/model.safetensors" "$tmp/early/"
expect 0 "$tmp/early: a run's out_dir with no checkpoint (no ckpt/); final weights $tmp/early/model.safetensors: --init takes them" "$bin" data inspect "$tmp/early"
# a relative out_dir where the current directory was deleted: said at the start, nothing written (it
# said "runs: cannot create directory: No such file or directory" once the data had loaded); `bin` in
# full, as the shell's own relative paths went with the directory
full=$(readlink -f "$bin")
mkdir "$tmp/gone"
out=$(cd "$tmp/gone" && rmdir "$tmp/gone" && "$full" train --set train.steps=1 --set data.val= 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "train.out_dir runs/default is relative to the current directory, which no longer exists (deleted or moved while the shell was in it): cd to an existing directory, or give the path in full (nothing was written)" <<<"$out" &&
    ! grep -q "^step " <<<"$out"; then
    echo "ok: a deleted current directory -> $(tail -1 <<<"$out" | cut -c1-120)"
else
    echo "FAIL: a deleted current directory: exit $rc: $(tail -3 <<<"$out")"
    fails=$((fails + 1))
fi
exit $((fails > 0))
