#!/usr/bin/env bash
# `scaletrain sample` on a GPU: the CUDA emulator's build (make emu), its
# kernels run on the CPU. tests/run.sh passes it the emulator's build
# folder; given any other build it skips.
#  1. A tiny gpt trained on the CPU (block 96): greedy samples drawn on the
#     emulated GPU (its cache of keys and values in the GPU's memory, then
#     windows of 96 tokens sliding past the block) are the CPU's tokens (its
#     cache, then its windows), and the JSON names the device.
#  2. Seeded samples at temperature 1, three of them, with a stop token:
#     the same tokens and lengths on both. On the GPU the one-position
#     steps after the first are replays of a captured CUDA graph (the JSON's
#     replayed_steps); with --no-graph none is, and where the capture fails
#     (ST_CUDAEMU_CAPTURE_FAIL) a note says so: the same tokens both ways.
#     test_cuda_sample again with every stream run as queued
#     (ST_CUDAEMU_LAZY=0: a staged token written after the replay's launch
#     would be read before it) and with collectives late (2).
#  3. train.device auto takes the GPU and says so; cuda:N past the devices,
#     and a GPU older than the kernels (ST_CUDAEMU_CC=75), are an error
#     with train.device cuda and the CPU, saying why, with auto.
#  4. log.sample_every in a bf16 run on the GPU, and under ZeRO-1 on 2
#     GPUs (the fp32 masters sharded: gathered for the sample): drawn on
#     the GPU (the JSON's sample_device), the last sample is the one
#     `scaletrain sample` draws on the CPU from the saved weights with the
#     run's seed for that step (tests/py/train_sample.py). A wider model
#     (1.7 M parameters) on a GPU with room for its training and less than
#     its sampler's weights beside it: a note says so, the samples come
#     from the CPU, the same ones, and training goes on.
#  5. The GPU faulting while it draws a sample (ST_CUDAEMU_FAULT, past the
#     kernels of the steps before it), or in the step's last kernels before
#     it (the weights' copy for the sample waits for them first): not a
#     warning and training on, but the run's error, exit 1, naming the
#     sample's step and the fault. On 2 ranks under ddp, rank 0's GPU lost
#     there: rank 1 saves step 2 for both (each holds the whole state), and
#     the run resumes to the bytes of one without the fault.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_need_mpirun
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
for kind in ("greedy", "seeded"):
    gpu = json.load(open(f"{t}/{kind}-cuda.json"))
    # (greedy: the prompt's 9 positions in one step, then 86 one at a time up to the block of 96)
    assert gpu["replayed_steps"] == gpu["cached_steps"] - 1 and gpu["cached_steps"] >= 20, (kind, gpu["cached_steps"], gpu["replayed_steps"])
    print(f"ok {kind}: {gpu['replayed_steps']} of {gpu['cached_steps']} one-position steps replayed as a CUDA graph")
PY
# ... without the graph, and with a capture that fails: the same tokens
timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 100 --samples 3 --seed 11 --stop-id 10 --json \
    --set train.device=cuda --no-graph >"$tmp/seeded-nograph.json" 2>"$tmp/seeded-nograph.err" ||
    fail "--no-graph: $(tail -3 "$tmp/seeded-nograph.err")"
ST_CUDAEMU_CAPTURE_FAIL=1 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 100 --samples 3 \
    --seed 11 --stop-id 10 --json --set train.device=cuda >"$tmp/seeded-nocapture.json" \
    2>"$tmp/seeded-nocapture.err" || fail "a failed capture: $(tail -3 "$tmp/seeded-nocapture.err")"
grep -q "^sample: note: the one-token step could not be captured as a CUDA graph (.*cudaErrorStream.*); each token launches its kernels one by one" \
    "$tmp/seeded-nocapture.err" || fail "a failed capture is not said: $(cat "$tmp/seeded-nocapture.err")"
/usr/bin/python3 - "$tmp" <<'PY' || fail "the GPU's samples without a graph are not the graph's"
import json, sys
t = sys.argv[1]
g = json.load(open(f"{t}/seeded-cuda.json"))
for kind in ("nograph", "nocapture"):
    o = json.load(open(f"{t}/seeded-{kind}.json"))
    assert o["replayed_steps"] == 0 and o["cached_steps"] == g["cached_steps"], (kind, o["replayed_steps"], o["cached_steps"])
    assert [s["tokens"] for s in o["samples"]] == [s["tokens"] for s in g["samples"]], kind
    print(f"ok seeded, {kind}: no step replayed, the same tokens")
PY
for lazy in 0 2; do
    ST_CUDAEMU_LAZY=$lazy timeout 300 "$build/tests/test_cuda_sample" >"$tmp/cuda_sample_lazy$lazy.txt" 2>&1 ||
        fail "test_cuda_sample under ST_CUDAEMU_LAZY=$lazy: $(grep -m3 FAIL "$tmp/cuda_sample_lazy$lazy.txt")"
done
echo "ok test_cuda_sample with every stream run as queued, and with collectives late"

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
grep -qE "^sample: .*, [0-9]+ CPU threads? \(.*7\.5.*\), seed [0-9]+$" <<<"$out" || fail "an old GPU with auto: not the CPU, or no reason: $out"
# a GPU without room (4 MiB): cuda says so and how to go on, auto samples on the CPU;
# 40 MiB: the model and 64 samples' cache fit, their windows past the block do not
out=$(ST_CUDAEMU_MEM_MB=4 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 --set train.device=cuda 2>&1 >/dev/null)
grep -q "train.device cuda: cuda:0 has too little free memory to start on (another process holds it?); use train.device: cpu (or auto)" <<<"$out" ||
    fail "a full GPU with cuda: $out"
out=$(ST_CUDAEMU_MEM_MB=4 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 5 2>&1 >/dev/null) ||
    fail "a full GPU with auto: $out"
grep -qE "CPU threads? \(cuda:0 has too little free memory" <<<"$out" || fail "a full GPU with auto: not the CPU: $out"
out=$(ST_CUDAEMU_MEM_MB=40 timeout 300 "$bin" sample --init "$tmp/run" --prompt "the" --tokens 100 --samples 64 2>&1 >/dev/null)
grep -q "the GPU has no room for 64 sample(s)' window of 96 tokens (its logits alone are 6 MiB): draw fewer samples at a time (--samples), or sample on the CPU (--set train.device=cpu)" <<<"$out" ||
    fail "64 samples on a small GPU: $out"

# 4. text samples during training on the GPU, in bf16, one rank and two under ZeRO-1
e2e_mpi 600
tr=(train --set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set data.val=
    --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=96
    --set train.steps=4 --set train.batch_size=4 --set optim.lr=5e-3 --set train.device=cuda --set precision=bf16
    --set log.sample_every=2 --set log.sample_tokens=40 --set train.threads=1 --set data.num_workers=0)
timeout 600 "$bin" "${tr[@]}" --set train.out_dir="$tmp/t1" --json >"$tmp/t1.txt" 2>&1 || fail "bf16 run: $(tail -3 "$tmp/t1.txt")"
"${mpi[@]}" -np 2 "$bin" "${tr[@]}" --set dist.strategy=zero1 --set train.out_dir="$tmp/t2" --json >"$tmp/t2.txt" 2>&1 ||
    fail "zero1 run: $(tail -3 "$tmp/t2.txt")"
tail -1 "$tmp/t2.txt" | grep -q '"masters_sharded":[ ]*true' || fail "zero1 run: the masters are not sharded"
# the wider model: its training's and its sampler's memory measured, then a GPU of 4 MiB less than both
wide=("${tr[@]}" --set model.n_head=1 --set model.n_embd=256 --set train.micro_batch_size=4 --set train.activation_checkpointing=off)
timeout 600 "$bin" "${wide[@]}" --set train.out_dir="$tmp/t3" --json >"$tmp/t3.txt" 2>&1 || fail "wide run: $(tail -3 "$tmp/t3.txt")"
mb=$(tail -1 "$tmp/t3.txt" | /usr/bin/python3 -c 'import json, sys; print(int(json.load(sys.stdin)["device_mem_peak_bytes"] / 2**20) - 4)') ||
    fail "wide run: no device memory peak: $(tail -1 "$tmp/t3.txt")"
ST_CUDAEMU_MEM_MB=$mb timeout 600 "$bin" "${wide[@]}" --set train.out_dir="$tmp/t4" --json >"$tmp/t4.txt" 2>&1 ||
    fail "wide run on $mb MiB: $(tail -3 "$tmp/t4.txt")"
grep -qE "^note: log.sample_every: cuda:0 .* has no room beside training for a sampler \([0-9.]+ MiB free, and its fp32 weights alone are 6.4 MiB\): this run's samples are drawn on rank 0's CPU, slower$" "$tmp/t4.txt" ||
    fail "wide run on $mb MiB: no note, or not once: $(grep -E "^(note|warning)" "$tmp/t4.txt")"
[ "$(grep -c "has no room beside training" "$tmp/t4.txt")" -eq 1 ] || fail "wide run on $mb MiB: the note more than once"
for r in t1 t2 t3 t4; do
    want='"sample_device":"cuda:0 (scaletrain CUDA emulator'
    [ $r = t4 ] && want='"sample_device":"cpu"'
    tail -1 "$tmp/$r.txt" | grep -qF "$want" || fail "$r: not drawn where expected ($want): $(tail -1 "$tmp/$r.txt")"
    [ "$(grep -c "^sample at step" "$tmp/$r.txt")" -eq 2 ] || fail "$r: not two samples: $(grep "^sample at" "$tmp/$r.txt")"
    seed=$(sed -n "s/^sample at step 4 (--seed \([0-9]*\)):$/\1/p" "$tmp/$r.txt")
    timeout 300 "$bin" sample --init "$tmp/$r" --prompt-ids 10 --tokens 40 --seed "$seed" --json \
        --set train.device=cpu >"$tmp/$r.json" 2>"$tmp/$r.err" || fail "$r: sample: $(cat "$tmp/$r.err")"
    /usr/bin/python3 tests/py/train_sample.py "$tmp/$r.txt" 4 "$tmp/$r.json" || fail "$r: the last sample"
done

# 5. a fault of the GPU inside the sample at step 2 (2 steps' kernels counted first, then 30 more), and
#    one in step 2's last kernels, which the copy of the weights for the sample is the first to wait for
timeout 600 env ST_CUDAEMU_FAULT=1000000000 "$bin" "${tr[@]}" --set train.steps=2 --set log.sample_every=0 \
    --set train.out_dir="$tmp/f0" >"$tmp/f0.txt" 2>&1 || fail "the count run: $(tail -3 "$tmp/f0.txt")"
n=$(sed -n 's/^cudaemu: ST_CUDAEMU_FAULT=[0-9]*: no fault, \([0-9]*\) kernels ran$/\1/p' "$tmp/f0.txt")
[ -n "$n" ] && [ "$n" -gt 50 ] || fail "the count of 2 steps' kernels: '$n' ($(tail -2 "$tmp/f0.txt"))"
for k in $((n + 30)) $((n - 10)); do
    timeout 600 env ST_CUDAEMU_FAULT=$k "$bin" "${tr[@]}" --set train.out_dir="$tmp/f$k" >"$tmp/f$k.txt" 2>&1
    rc=$?
    grep -q "^cudaemu: .* faulted (ST_CUDAEMU_FAULT=$k)" "$tmp/f$k.txt" || fail "fault $k: none happened: $(tail -3 "$tmp/f$k.txt")"
    [ $rc -eq 1 ] || fail "fault $k: exit $rc, want 1: $(tail -3 "$tmp/f$k.txt")"
    grep -qE "^scaletrain: error: log.sample_every: cuda:0 .* faulted by the text sample after step 2: .*an illegal memory access was encountered" "$tmp/f$k.txt" ||
        fail "fault $k: the error does not say so: $(grep -E "scaletrain: (error|warning)|^warning" "$tmp/f$k.txt")"
    ! grep -q "training goes on without samples" "$tmp/f$k.txt" || fail "fault $k: taken for a warning"
    echo "ok: a fault at kernel $k (2 steps ran $n) ends the run at the sample after step 2, exit 1"
done
# 5b. two ranks under ddp, rank 0's GPU lost in the sample after step 2: rank 1 (each holds the whole
#     state) saves step 2 for both, and --resume auto ends with the bytes of a run without the fault
ddp=("${tr[@]}" --set dist.strategy=ddp --set log.progress=off)
"${mpi[@]}" -x ST_CUDAEMU_FAULT=1000000000:0 -np 2 "$bin" "${ddp[@]}" --set train.steps=2 --set log.sample_every=0 \
    --set train.out_dir="$tmp/g0" >"$tmp/g0.txt" 2>&1 || fail "the 2-rank count run: $(tail -3 "$tmp/g0.txt")"
n=$(sed -n 's/^cudaemu: ST_CUDAEMU_FAULT=[0-9]*: no fault, \([0-9]*\) kernels ran$/\1/p' "$tmp/g0.txt")
[ -n "$n" ] && [ "$n" -gt 50 ] || fail "the count of rank 0's kernels: '$n' ($(tail -2 "$tmp/g0.txt"))"
"${mpi[@]}" -x ST_CUDAEMU_FAULT=$((n + 30)):0 -np 2 "$bin" "${ddp[@]}" --set train.out_dir="$tmp/g1" >"$tmp/g1.txt" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "2 ranks, rank 0's fault: exit $rc, want 1: $(tail -3 "$tmp/g1.txt")"
grep -qF "a rank's GPU is lost; rank 1 saved the weights and optimizer state after step 2 first" "$tmp/g1.txt" &&
    [ "$(cat "$tmp/g1/ckpt/latest" 2>/dev/null)" = step-2 ] ||
    fail "2 ranks, rank 0's fault: step 2 not saved by rank 1: $(grep -E "scaletrain: error" "$tmp/g1.txt")"
"${mpi[@]}" -np 2 "$bin" "${ddp[@]}" --set train.out_dir="$tmp/g1" --resume auto >"$tmp/g1r.txt" 2>&1 ||
    fail "2 ranks: the resumed run: $(tail -3 "$tmp/g1r.txt")"
"${mpi[@]}" -np 2 "$bin" "${ddp[@]}" --set train.out_dir="$tmp/g2" >"$tmp/g2.txt" 2>&1 ||
    fail "2 ranks without a fault: $(tail -3 "$tmp/g2.txt")"
cmp -s "$tmp/g1/model.safetensors" "$tmp/g2/model.safetensors" ||
    fail "2 ranks: resumed from rank 1's rescue, the weights differ from the run without a fault"
echo "ok: rank 0's GPU lost at the sample after step 2 of 2 ranks: rank 1 saved step 2; resumed, the same bytes"
e2e_finish "samples on the emulated GPU are the CPU's"
