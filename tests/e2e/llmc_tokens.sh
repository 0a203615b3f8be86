#!/usr/bin/env bash
# llm.c's token files (GPT-2's BPE, as its dev/data scripts write FineWeb or
# TinyShakespeare: 256 int32s of header, then uint16 tokens) train as they
# are: NumPy writes two training shards and a validation file the way
# llm.c's write_datafile does, and the same tokens in scaletrain's own
# format; `data inspect` names the format, the vocabulary (50257) comes from
# the data, and a training run on the llm.c shards by pattern, with
# validation, ends with the same weights, bit for bit, as the run on the
# scaletrain files; the folder itself as data.train is refused with the
# patterns that split it, and so is validation data of another vocabulary.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_numpy
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE
/usr/bin/python3 - "$tmp" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
def llmc(path, toks):  # llm.c's dev/data/data_common.py write_datafile, gpt-2
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, 1, len(toks)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(toks.astype(np.uint16).tobytes())
def ours(path, toks):  # docs/formats.md, "Token files"
    h = bytearray(64)
    h[0:8] = b"STTOKENS"
    h[8:12] = (1).to_bytes(4, "little")
    h[12:16] = (2).to_bytes(4, "little")
    h[16:24] = len(toks).to_bytes(8, "little")
    h[24:32] = (50257).to_bytes(8, "little")
    with open(path, "wb") as f:
        f.write(bytes(h))
        f.write(toks.astype(np.uint16).tobytes())
# a stream with structure to learn, over GPT-2's whole vocabulary
base = rng.integers(0, 50257, size=64)
def stream(n, off):
    return base[(np.arange(n) * 5 + off) % 64]
for i, n in ((1, 30000), (2, 20000)):
    t = stream(n, 11 * i)
    llmc(f"{d}/fineweb_train_{i:06d}.bin", t)
    ours(f"{d}/train-{i:06d}.tokens", t)
v = stream(4000, 3)
llmc(f"{d}/fineweb_val_000000.bin", v)
ours(f"{d}/val.tokens", v)
PY
[ $? -eq 0 ] || fail "NumPy could not write the files"
"$bin" data inspect "$tmp/fineweb_val_000000.bin" >"$tmp/inspect.txt" 2>&1 || fail "inspect: $(cat "$tmp/inspect.txt")"
grep -q "fineweb_val_000000.bin: token file (llm.c GPT-2 format), 4000 tokens of 2 bytes, vocabulary 50257" \
    "$tmp/inspect.txt" || fail "inspect: $(cat "$tmp/inspect.txt")"
"$bin" data inspect "$tmp/fineweb_train_*.bin" >"$tmp/inspect2.txt" 2>&1 || fail "inspect the shards"
grep -q "2 token files read as one stream, 50000 tokens, vocabulary 50257" "$tmp/inspect2.txt" ||
    fail "inspect the shards: $(cat "$tmp/inspect2.txt")"
tr=(train --set model.type=gpt --set data.type=tokens --set model.n_layer=1 --set model.n_embd=32
    --set model.n_head=2 --set model.block_size=32 --set train.batch_size=8 --set train.steps=30
    --set train.threads=1 --set data.num_workers=0 --set train.eval_every=15 --set train.eval_steps=2
    --set log.progress=off --set optim.lr=0.003)
"$bin" "${tr[@]}" --set "data.train=$tmp/fineweb_train_*.bin" --set data.val="$tmp/fineweb_val_000000.bin" \
    --set train.out_dir="$tmp/llmc" >"$tmp/llmc.txt" 2>&1 || fail "training on llm.c's files: $(tail -3 "$tmp/llmc.txt")"
grep -Eq "vocab_size: +50257 +# auto" "$tmp/llmc.txt" || fail "the vocabulary is not the data's: $(grep vocab_size "$tmp/llmc.txt")"
"$bin" "${tr[@]}" --set "data.train=$tmp/train-*.tokens" --set data.val="$tmp/val.tokens" \
    --set train.out_dir="$tmp/ours" >"$tmp/ours.txt" 2>&1 || fail "training on scaletrain's files: $(tail -3 "$tmp/ours.txt")"
cmp -s "$tmp/llmc/model.safetensors" "$tmp/ours/model.safetensors" ||
    fail "the weights trained on llm.c's files differ from those trained on the same tokens in scaletrain's"
grep "^done:" "$tmp/llmc.txt"
# llm.c's folder as a whole is refused (it would train on the validation file
# too), the message giving the patterns that split it
mkdir "$tmp/fineweb10B" && cp "$tmp"/fineweb_*.bin "$tmp/fineweb10B/"
out=$("$bin" "${tr[@]}" --set data.train="$tmp/fineweb10B/" --set data.val="$tmp/val.tokens" --set train.out_dir="$tmp/folder" 2>&1)
[ $? -eq 1 ] && [[ "$out" == *"fineweb10B/: a folder of .bin files, no .tokens files; llm.c's token folders hold training and validation files together, so name each by a pattern (e.g. data.train: \"$tmp/fineweb10B/*train*.bin\", data.val: \"$tmp/fineweb10B/*val*.bin\")"* ]] ||
    fail "training on llm.c's folder: $out"
out=$("$bin" data inspect "$tmp/fineweb10B/" 2>&1)
[ $? -eq 1 ] && [[ "$out" == *"it holds .bin files (llm.c's token files?): name them by a pattern, e.g. '$tmp/fineweb10B/*.bin'"* ]] ||
    fail "inspecting llm.c's folder: $out"
# Validation tokens of another vocabulary (byte-level training text, GPT-2
# validation tokens) are refused at the start, nothing written, where the
# run trained to its end and failed at its first evaluation
printf 'some text to train on\n%.0s' $(seq 1 200) >"$tmp/bytes.txt"
"$bin" data tokenize "$tmp/bytes.tokens" "$tmp/bytes.txt" >/dev/null || fail "tokenize bytes.txt"
out=$("$bin" "${tr[@]}" --set data.train="$tmp/bytes.tokens" --set data.val="$tmp/val.tokens" --set train.out_dir="$tmp/mixed" 2>&1)
[ $? -eq 1 ] && [[ "$out" == *"error: data.val $tmp/val.tokens has vocab_size 50257 but data.train $tmp/bytes.tokens has 256: they were made by different tokenizers"* ]] &&
    [ ! -e "$tmp/mixed" ] || fail "validation tokens of another vocabulary: $out"
e2e_finish "llm.c's GPT-2 token files train as scaletrain's own do, to the same bits"
