#!/usr/bin/env bash
# `scaletrain sample` on a GPU: the CUDA emulator's build (make emu), its
# kernels run on the CPU. tests/run.sh passes it the emulator's build
# folder; given any other build it skips.
#  1. A tiny gpt trained on the CPU (block 96): greedy samples drawn on the
#     emulated GPU (windows of 64, then 96 tokens, sliding past the block)
#     are the CPU's tokens (its cache of keys and values, then its windows),
#     and the JSON names the device.
#  2. Seeded samples at temperature 1, three of them, with a stop token:
#     the same tokens and lengths on both.
#  3. train.device auto takes the GPU and says so; cuda:N past the devices,
#     and a GPU older than the kernels (ST_CUDAEMU_CC=75), are an error
#     with train.device cuda and the CPU, saying why, with auto.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_tmpdir
export OMP_WAIT_POLICY=PASSIVE

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null || fail "data tokenize"
timeout 600 "$bin" train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" \
    --set data.val= --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=96 \
    --set train.steps=150 --set train.batch_size=16 --set optim.lr=5e-3 --set train.device=cpu \
    --set train.out_dir="$tmp/run" >"$tmp/train.txt" 2>&1 || fail "training: $(tail -3 "$tmp/train.txt")"

# 1. greedy, past the block
for d in cpu cuda; do
    timeout 300 "$bin" sample --init "$tmp/run" --prompt "the quick" --tokens 120 --temperature 0 --json \
        --set train.device=$d >"$tmp/greedy-$d.json" 2>"$tmp/greedy-$d.err" ||
        fail "greedy on $d: $(tail -3 "$tmp/greedy-$d.err")"
done
# 2. seeded, three samples, a stop token (a new line: some end before others)
for d in cpu cuda; do
    timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 100 --samples 3 --seed 11 \
        --stop-id 10 --json --set train.device=$d >"$tmp/seeded-$d.json" 2>"$tmp/seeded-$d.err" ||
        fail "seeded on $d: $(tail -3 "$tmp/seeded-$d.err")"
done
/usr/bin/python3 - "$tmp" <<'PY' || fail "the GPU's samples are not the CPU's"
import json, sys
t = sys.argv[1]
for kind in ("greedy", "seeded"):
    cpu, gpu = (json.load(open(f"{t}/{kind}-{d}.json")) for d in ("cpu", "cuda"))
    assert cpu["device"] == "cpu", cpu["device"]
    assert gpu["device"].startswith("cuda:0 (scaletrain CUDA emulator"), gpu["device"]
    a = [s["tokens"] for s in cpu["samples"]]
    b = [s["tokens"] for s in gpu["samples"]]
    assert a == b, (kind, a, b)
    print(f"ok {kind}: {len(a)} sample(s) of {[len(x) for x in a]} tokens, the same on both;",
          repr(cpu["samples"][0]["text"][:60]))
text = json.load(open(f"{t}/greedy-cpu.json"))["samples"][0]["text"]
assert any(w in text for w in ("fox", "jumps", "lazy")), ("the model did not learn the text", text)
g = json.load(open(f"{t}/greedy-cuda.json"))["samples"][0]["tokens"]
assert len(g) == 120, len(g)  # (the prompt's 9 and 111 more: past the block of 96)
s = json.load(open(f"{t}/seeded-cuda.json"))["samples"]
assert any(x["tokens"][-1] == 10 for x in s), "no sample stopped at its new line"
PY

# 3. the device's choice
out=$(timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 --seed 1 2>&1 >/dev/null) ||
    fail "auto: $out"
grep -qE "^sample: .*: a gpt of [0-9]+ parameters \(vocabulary 256, context 96\), on cuda:0 \(scaletrain CUDA emulator" <<<"$out" ||
    fail "auto does not say it samples on the GPU: $out"
out=$(timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 --set train.device=cuda:7 2>&1 >/dev/null)
rc=$?
[ $rc -ne 0 ] && grep -q "train.device cuda:7: this machine has 2 CUDA device(s), cuda:0 to cuda:1; use train.device: cpu (or auto)" <<<"$out" ||
    fail "cuda:7: exit $rc: $out"
out=$(ST_CUDAEMU_CC=75 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 --set train.device=cuda 2>&1 >/dev/null)
rc=$?
[ $rc -ne 0 ] && grep -q "train.device cuda: .*7.5" <<<"$out" || fail "an old GPU with cuda: exit $rc: $out"
out=$(ST_CUDAEMU_CC=75 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 2>&1 >/dev/null) ||
    fail "an old GPU with auto: $out"
grep -qE "^sample: .*, [0-9]+ CPU threads? \(.*7\.5.*\)$" <<<"$out" || fail "an old GPU with auto: not the CPU, or no reason: $out"
e2e_finish "samples on the emulated GPU are the CPU's"
