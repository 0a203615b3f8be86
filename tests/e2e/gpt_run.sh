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

# scaletrain eval: the model and data.type from the weights' metadata alone (no CONFIG, no model
# setting; it took the default cnn and refused the tokens), of the final weights and of the last
# checkpoint: the run's final evaluation again
for w in "$tmp/run" "$tmp/run/ckpt/step-60" "$tmp/run/ckpt"; do
    "$bin" eval --init "$w" --set data.val="$tmp/val.tokens" --json >"$tmp/eval.json" 2>"$tmp/eval.err" ||
        { echo "FAIL: eval --init $w"; cat "$tmp/eval.err"; exit 1; }
    /usr/bin/python3 - "$tmp/r.json" "$tmp/eval.json" "$w" <<'PY'
import json, math, sys
run = json.load(open(sys.argv[1]))["loss"]
ev = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]["loss"]
ok = math.isfinite(ev) and abs(ev - run) <= 1e-5 * abs(run)
print(f"eval --init {sys.argv[3]}: loss {ev!r}, the run's final evaluation {run!r}", "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
done
# a setting given wins, and the load names the difference
if "$bin" eval --init "$tmp/run" --set data.val="$tmp/val.tokens" --set model.n_embd=32 2>"$tmp/eval.err"; then
    echo "FAIL: eval with another n_embd ran"; exit 1; fi
grep -q "hint: the file was saved by a model with model.n_embd 64 (this run: 32)" "$tmp/eval.err" ||
    { echo "FAIL: eval with another n_embd:"; cat "$tmp/eval.err"; exit 1; }

# scaletrain sample: the model from the weights' metadata alone (no CONFIG),
# greedy continuations that PyTorch's twin of the model agrees with token by
# token, past the context of 64 (the window slides)
"$bin" sample --init "$tmp/run" --prompt "the quick brown fox 1" --tokens 90 --temperature 0 --samples 2 \
    --json >"$tmp/greedy.json"
/usr/bin/python3 - "$tmp/greedy.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, b = (s["tokens"] for s in r["samples"])
assert len(a) == 90 and a == b, "greedy samples differ or are short"
assert r["prompt"] == list(b"the quick brown fox 1") and r["samples"][0]["text"] == bytes(a).decode("latin-1")
# trained 60 steps on "the quick brown fox N jumps over the lazy dog M": its words come back
assert "jumps" in r["samples"][0]["text"] or "lazy" in r["samples"][0]["text"] or "the " in r["samples"][0]["text"], r
print("ok greedy:", repr(r["samples"][0]["text"]))
PY
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    /usr/bin/python3 tests/py/sample_torch.py "$tmp/run/model.safetensors" "$tmp/greedy.json"
else
    echo "sample against PyTorch skipped: /usr/bin/python3 cannot import torch"
fi
# drawn: the same seed draws the same text; the text streams to stdout, the
# seed to stderr
"$bin" sample --init "$tmp/run/model.safetensors" --prompt "the" --tokens 40 --seed 7 --top-k 20 --top-p 0.95 \
    --temperature 0.8 >"$tmp/s1.txt" 2>"$tmp/s1.err"
"$bin" sample --init "$tmp/run/model.safetensors" --prompt "the" --tokens 40 --seed 7 --top-k 20 --top-p 0.95 \
    --temperature 0.8 --quiet >"$tmp/s2.txt"
cmp "$tmp/s1.txt" "$tmp/s2.txt" || { echo "FAIL: --seed 7 drew other text"; exit 1; }
[ "$(head -c 3 "$tmp/s1.txt")" = "the" ] && [ "$(wc -c <"$tmp/s1.txt")" -eq 44 ] ||
    { echo "FAIL: the sample is not the prompt and 40 bytes: $(od -c "$tmp/s1.txt" | head -3)"; exit 1; }
grep -q "seed 7 (--seed 7 draws them again)" "$tmp/s1.err" || { echo "FAIL: no seed line"; cat "$tmp/s1.err"; exit 1; }
# (said at the start too, before a token is drawn)
head -n 1 "$tmp/s1.err" | grep -qE "^sample: .*: a gpt of [0-9]+ parameters .*, seed 7$" ||
    { echo "FAIL: the first line does not say the seed"; cat "$tmp/s1.err"; exit 1; }
# several samples with a stop token (some end before others); a prompt file's
# every byte, NUL included, and a JSON text that keeps it; weights in a
# folder of their own
mkdir -p "$tmp/plain" && cp "$tmp/run/model.safetensors" "$tmp/plain/"
printf 'the\0 quick' >"$tmp/nul.txt"
"$bin" sample --init "$tmp/plain" --prompt-file "$tmp/nul.txt" --tokens 60 --seed 3 --samples 4 --stop-id 100 \
    --json >"$tmp/stop.json"
/usr/bin/python3 - "$tmp/stop.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["prompt"] == list(b"the\0 quick"), r["prompt"]
lens = [len(s["tokens"]) for s in r["samples"]]
for s in r["samples"]:
    t = s["tokens"]
    assert 100 not in t[:-1] and (len(t) == 60 or t[-1] == 100), t
    assert s["text"] == bytes(t).decode("latin-1") or any(x > 127 for x in t), s
print("ok stop:", lens)
PY
# a prompt longer than the context (model.block_size 64) is cut to its last 64 bytes, said on
# standard error and in the JSON, and continued as that tail alone is; a pipe's read through too
# (a prompt file was read whole into memory, and each sample held a copy of it)
for i in $(seq 1 400); do printf 'the quick brown fox %d ' "$i"; done >"$tmp/long.txt"
tail -c 64 "$tmp/long.txt" >"$tmp/tail.txt"
long=$(stat -c %s "$tmp/long.txt")
"$bin" sample --init "$tmp/plain" --prompt-file "$tmp/long.txt" --tokens 20 --temperature 0 --json \
    >"$tmp/long.json" 2>"$tmp/long.err" || { echo "FAIL: a long prompt file: $(cat "$tmp/long.err")"; exit 1; }
grep -q "^sample: note: the prompt is $long tokens, and the model reads at most its context of 64: it continues the last 64 (the first $((long - 64)) are left out" "$tmp/long.err" ||
    { echo "FAIL: a long prompt file, not said: $(cat "$tmp/long.err")"; exit 1; }
cat "$tmp/long.txt" | "$bin" sample --init "$tmp/plain" --prompt-file /dev/stdin --tokens 20 --temperature 0 \
    --json --quiet >"$tmp/pipe.json" || { echo "FAIL: a long prompt through a pipe"; exit 1; }
"$bin" sample --init "$tmp/plain" --prompt-file "$tmp/tail.txt" --tokens 20 --temperature 0 --json --quiet \
    >"$tmp/tail.json" || { echo "FAIL: the long prompt's tail"; exit 1; }
/usr/bin/python3 - "$tmp" "$long" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
a, p, t = (json.load(open(f"{tmp}/{k}.json")) for k in ("long", "pipe", "tail"))
tail = list(open(f"{tmp}/tail.txt", "rb").read())
assert a["prompt"] == p["prompt"] == t["prompt"] == tail, (a["prompt"], tail)
assert a["prompt_dropped"] == p["prompt_dropped"] == n - 64 and t["prompt_dropped"] == 0
assert a["samples"][0]["tokens"] == p["samples"][0]["tokens"] == t["samples"][0]["tokens"]
assert len(a["samples"][0]["tokens"]) == 20
print(f"ok a prompt of {n} bytes: its last 64 continued, {n - 64} left out and said")
PY
# an llm.c tokenizer file decodes (here: each byte's token as its upper case),
# and with no prompt the sample starts at its end-of-text token (10)
/usr/bin/python3 - "$tmp/tok.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 256, 10, *([0] * 252)))
    for i in range(256):
        p = bytes([i]).upper()
        f.write(bytes([len(p)]) + p)
PY
"$bin" sample --init "$tmp/run" --tokenizer "$tmp/tok.bin" --tokens 30 --temperature 0 --quiet >"$tmp/t1.txt"
"$bin" sample --init "$tmp/run" --prompt-ids 10 --tokens 30 --temperature 0 --quiet >"$tmp/t2.txt"
[ "$(tr a-z A-Z <"$tmp/t2.txt")" = "$(cat "$tmp/t1.txt")" ] && grep -q "[A-Z]" "$tmp/t1.txt" ||
    { echo "FAIL: the tokenizer's text: $(cat "$tmp/t1.txt") against $(cat "$tmp/t2.txt")"; exit 1; }
# ... and in --json its text whole, a piece holding a NUL byte included ('e' as "E\0")
/usr/bin/python3 - "$tmp/tok0.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 256, 10, *([0] * 252)))
    for i in range(256):
        p = b"E\0" if i == ord("e") else bytes([i]).upper()
        f.write(bytes([len(p)]) + p)
PY
"$bin" sample --init "$tmp/run" --tokenizer "$tmp/tok0.bin" --tokens 30 --temperature 0 --json >"$tmp/t0.json"
/usr/bin/python3 - "$tmp/t0.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["samples"][0]
want = "".join("E\0" if t == ord("e") else chr(t).upper() for t in s["tokens"])
assert ord("e") in s["tokens"] and s["text"] == want, (s, want)
print("ok tokenizer text:", repr(s["text"]))
PY
head -c 250 "$tmp/tok.bin" >"$tmp/short.bin"
# mistakes, each refused naming what to do
expect_fail() { # WHAT NEEDLE COMMAND...
    local what=$1 needle=$2; shift 2
    if "$@" >"$tmp/e.out" 2>&1; then echo "FAIL: $what succeeded"; exit 1; fi
    grep -q -- "$needle" "$tmp/e.out" || { echo "FAIL: $what: no '$needle' in:"; cat "$tmp/e.out"; exit 1; }
}
expect_fail "a cut tokenizer file" "is not an llm.c tokenizer file" "$bin" sample --init "$tmp/run" --tokenizer "$tmp/short.bin"
expect_fail "a text prompt with a tokenizer" "cannot encode text into them" "$bin" sample --init "$tmp/run" --tokenizer "$tmp/tok.bin" --prompt hi
expect_fail "no --init" "--init WEIGHTS is required" "$bin" sample --prompt x
expect_fail "a prompt option without its text" "--prompt needs a value" "$bin" sample --init "$tmp/run" --prompt
expect_fail "an option twice" "--tokens given twice" "$bin" sample --init "$tmp/run" --tokens 5 --tokens 6
expect_fail "optimizer state as weights" "is a checkpoint's optimizer state (format scaletrain-optim" \
    "$bin" sample --init "$(ls -d "$tmp"/run/ckpt/step-60)/optim-rank0.safetensors"
expect_fail "a prompt token past the vocabulary" "outside the model's vocabulary of 256" \
    "$bin" sample --init "$tmp/run" --prompt-ids 1,300
expect_fail "two prompts" "give one of --prompt" "$bin" sample --init "$tmp/run" --prompt a --prompt-ids 1
# the prompt's form is a usage error (exit 2, before the weights are read), each saying what is wrong
usage_fail() { # WHAT NEEDLE COMMAND...
    local what=$1 needle=$2; shift 2
    local rc=0
    "$@" >"$tmp/e.out" 2>&1 || rc=$?
    [ $rc -eq 2 ] && grep -q -- "$needle" "$tmp/e.out" || { echo "FAIL: $what: exit $rc, no '$needle' in:"; cat "$tmp/e.out"; exit 1; }
}
usage_fail "a negative prompt id" "--prompt-ids '3,-1': -1 is negative; token ids are 0 or more" \
    "$bin" sample --init "$tmp/run" --prompt-ids 3,-1
usage_fail "a prompt id past int32" "--prompt-ids '99999999999': 99999999999 is past the largest token id, 2147483647" \
    "$bin" sample --init "$tmp/run" --prompt-ids 99999999999
usage_fail "a prompt id list with a hole" "expected token ids separated by commas" \
    "$bin" sample --init "$tmp/run" --prompt-ids 1,,2
usage_fail "an empty prompt" "--prompt is empty: give at least one byte" "$bin" sample --init "$tmp/run" --prompt ''
expect_fail "a bad top-p" "--top-p needs a number > 0" "$bin" sample --init "$tmp/run" --top-p 0
/usr/bin/python3 - "$tmp/mlp.safetensors" <<'PY' # an mlp's weights, as its metadata says
import json, struct, sys
h = json.dumps({"__metadata__": {"format": "scaletrain", "model": "mlp"},
                "head.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(16))
PY
expect_fail "an image model's weights" "holds a mlp's weights: scaletrain sample continues text with a gpt" \
    "$bin" sample --init "$tmp/mlp.safetensors"
echo "ok sample"

# log.sample_every: text samples during training, at steps 15 and 30 (the
# last), each the one `scaletrain sample` draws from the weights then with
# the seed the run printed for that step (train.seed 1: 1 x 1000003 + step)
"$bin" train "$tmp/run.yaml" --set train.steps=30 --set log.sample_every=15 --set log.sample_tokens=50 \
    --set train.eval_every=0 --set train.checkpoint_every=15 --set train.out_dir="$tmp/run5" >"$tmp/s5.txt"
[ "$(grep -c "^sample at step" "$tmp/s5.txt")" -eq 2 ] && grep -q "^sample at step 15 (--seed 1000018):$" "$tmp/s5.txt" ||
    { echo "FAIL: not two samples, at steps 15 and 30: $(grep "^sample at" "$tmp/s5.txt")"; exit 1; }
for at in 15 30; do
    w="$tmp/run5/ckpt/step-$(printf %08d $at)"
    [ -d "$w" ] || w=$(ls -d "$tmp"/run5/ckpt/step-*$at | head -1)
    seed=$(sed -n "s/^sample at step $at (--seed \([0-9]*\)):$/\1/p" "$tmp/s5.txt")
    "$bin" sample --init "$w" --prompt-ids 10 --tokens 50 --temperature 1 --seed "$seed" --json \
        >"$tmp/s5-$at.json"
    /usr/bin/python3 tests/py/train_sample.py "$tmp/s5.txt" $at "$tmp/s5-$at.json"
done
expect_fail "log.sample_every with an mlp" "log.sample_every (5, --set) prints text samples, which only a gpt draws, and this run's model is model.type (cnn, default): set log.sample_every: 0" \
    "$bin" train --set log.sample_every=5 --set train.steps=1
echo "ok log.sample_every"
