#!/usr/bin/env bash
# End to end: `scaletrain plan` on the local machine (probe included) and on
# the GPU presets, as a table and as JSON; an unknown hardware name is an
# error that lists the known ones.
set -euo pipefail
build=${1:-build}
bin=$build/scaletrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# this machine: the probe report and one row for the default cnn
"$bin" plan --probe >"$tmp/local.txt"
cat "$tmp/local.txt"
grep -q "^cpu: " "$tmp/local.txt"
grep -q "^memory: " "$tmp/local.txt"
grep -Eq "^cuda: +(no CUDA device \(|[0-9]+ device)" "$tmp/local.txt"
grep -Eq "^local +1 +128 +1 +ddp +fp32" "$tmp/local.txt"
# log.peak_gflops pins the CPU's rate: no calibration, the same times every run
"$bin" plan --set log.peak_gflops=100 | tee "$tmp/pinned.txt" | grep -q "^cpu: 100.0 GFLOP/s from log.peak_gflops"
for run in 100:a 100:b 50:c; do "$bin" plan --set log.peak_gflops=${run%:*} --json >"$tmp/pin.${run#*:}.json"; done
/usr/bin/python3 - "$tmp"/pin.a.json "$tmp"/pin.b.json "$tmp"/pin.c.json <<'PY'
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:])
assert a["cpu_gflops_set"] == 100 and "cpu_gflops_measured" not in a, a
assert a["plans"][0]["time"] == b["plans"][0]["time"], (a["plans"][0]["time"], b["plans"][0]["time"])
ta, tc = a["plans"][0]["time"]["compute_s"], c["plans"][0]["time"]["compute_s"]
assert 1.3 < tc / ta < 2.0, (ta, tc)  # the products at half the rate, the cnn's elementwise loops unchanged
print("pinned cpu rate ok:", ta, tc)
PY
# GPT-2 124M on the presets
gpt=(--set model.preset=gpt2-124m --set data.type=tokens --set data.val= --set train.batch_size=512)
"$bin" plan "${gpt[@]}" --hw 4xL40S,8xA100-40GB,8xA100-80GB,8xH100,8xH200 --nodes 1 | tee "$tmp/table.txt"
[ "$(grep -Ec '^(4xL40S|8xA100-40GB|8xA100-80GB|8xH100|8xH200) ' "$tmp/table.txt")" -eq 5 ]
"$bin" plan "${gpt[@]}" --hw 4xL40S,8xH100,2x8xH100 --json >"$tmp/plan.json"
/usr/bin/python3 - "$tmp/plan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["model"]["params"] == 124439808, r["model"]
p = {q["hw"]: q for q in r["plans"]}
for q in p.values():
    assert q["ok"] and q["fits"] and q["precision"] == "bf16", q
    assert q["micro_batch_size"] * q["accumulation"] * q["ranks"] == 512, q
    assert 0 < q["memory"]["total"] <= q["memory"]["limit"], q
    assert 0.5 < q["scaling_efficiency"] <= 1.0, q
assert p["8xH100"]["tokens_per_s"] > 2 * p["4xL40S"]["tokens_per_s"]
assert p["2x8xH100"]["ranks"] == 16 and p["2x8xH100"]["nodes"] == 2
# the kernels a gpt's run takes (they were missing): cuDNN's attention from sm_90 in bf16, the flash
# kernels on an L40S (sm_89); the fused head where the logits would take more memory, with why
assert p["8xH100"]["attention_kernel"] == "cudnn" and p["4xL40S"]["attention_kernel"] == "flash", p
assert "sm_89" in p["4xL40S"]["why"]["attention_kernel"], p["4xL40S"]["why"]
for q in p.values():
    assert q["fused_head"] is True and q["why"]["fused_head"].startswith("on: the logits ("), q
print("plan json ok")
PY
# --nodes on an entry that names none: its label says the nodes (it read "8xH100", the same plan as
# "2x8xH100" beside it)
"$bin" plan "${gpt[@]}" --hw 8xH100,2x8xH100 --nodes 2 --json >"$tmp/nodes.json"
/usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["plans"]
assert [q["hw"] for q in p] == ["2x8xH100", "2x8xH100"] and [q["ranks"] for q in p] == [16, 16], p
print("plan --nodes 2: labels", [q["hw"] for q in p])' "$tmp/nodes.json" || exit 1
# a model that cannot fit on 4xL40S gets a warning
"$bin" plan --set model.type=gpt --set model.n_layer=48 --set model.n_embd=6144 --set model.n_head=48 \
    --set model.vocab_size=50257 --set model.block_size=1024 --set data.type=tokens --set data.val= \
    --set train.batch_size=64 --hw 4xL40S | tee "$tmp/big.txt"
grep -q "does not fit" "$tmp/big.txt"
# an unknown name: exit 1, the known ones listed
if "$bin" plan --hw 4xV100 2>"$tmp/err.txt"; then echo "unknown hardware accepted"; exit 1; fi
grep -q "known: L40S, L4, A100-40GB" "$tmp/err.txt"
# a run's auto values come from the planner, each with its reason
head -c 20000 /dev/urandom | base64 >"$tmp/text.txt"
"$bin" data tokenize "$tmp/tok.bin" "$tmp/text.txt" >/dev/null
"$bin" train --set model.type=gpt --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
    --set model.block_size=32 --set data.type=tokens --set data.train="$tmp/tok.bin" --set data.val= \
    --set train.batch_size=8 --set train.steps=2 --set train.out_dir="$tmp/run" --set log.progress=off >"$tmp/train.txt"
grep -Eq "micro_batch_size: +8 +# auto: the whole batch on one rank" "$tmp/train.txt"
grep -Eq "strategy: +ddp +# auto: model states \(.*\) and a sample fit in" "$tmp/train.txt"
# docs/distributed.md explains dist.strategy auto with the reason as the run prints it
# (any figures): "model states \([0-9.]+ [KMGT]?i?B\) and a sample fit in [0-9.]+ [KMGT]?i?B"
why=$(sed -nE 's/^ *strategy: +ddp +# auto: (.*)$/\1/p' "$tmp/train.txt" |
    sed -E 's/[()]/\\&/g; s/[0-9.]+ [KMGT]?i?B/[0-9.]+ [KMGT]?i?B/g')
[ -n "$why" ]
doc=$(tr '\n' ' ' <"$(dirname "$0")/../../docs/distributed.md" | tr -s ' ')
grep -Eq "# auto: $why" <<<"$doc"
grep -Eq "^precision: +fp32 +# auto: fp32 on the CPU" "$tmp/train.txt"
# (every auto key says why, the GPU-only attention kernel's too: it read "auto # default")
grep -Eq "attention_kernel: +auto +# auto: the CPU runs its own attention" "$tmp/train.txt"
# An auto micro-batch the layout refuses (2048 images of 224x224 are more
# elements than the max-pool's int32 argmax indexes) is passed over for a
# smaller divisor; before, the plan (and train) failed with "lower the
# micro-batch size" on a micro-batch the user never set
/usr/bin/python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
open(f"{d}/img.idx", "wb").write(struct.pack(">BBBBIII", 0, 0, 8, 3, 4, 224, 224) + bytes(4 * 224 * 224))
open(f"{d}/lab.idx", "wb").write(struct.pack(">BBBBI", 0, 0, 8, 1, 4) + bytes([0, 1, 2, 3]))
PY
"$bin" plan --set data.train="$tmp/img.idx" --set data.train_labels="$tmp/lab.idx" --set data.val= \
    --set train.batch_size=2048 --hw 1xH200 >"$tmp/big.txt"
grep -Eq "^1xH200 +1 +(1024|512|256|128) " "$tmp/big.txt"
# a batch past train.batch_size's bound is refused at once (a batch of 1e12
# had the planner count down its divisors one by one for minutes)
! "$bin" plan --set train.batch_size=1000000000000 2>"$tmp/huge.txt"
grep -q "train.batch_size=1000000000000: 1000000000000 is out of range; it must be >= 1 and <= 1073741824" "$tmp/huge.txt"
# train.eval_batch_size past the validation set: planned at the whole set, as the run takes it (the
# evaluation's graph was sized at 5000000 samples, "does not fit", micro-batch 1)
small=(--set model.type=gpt --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=32
       --set data.type=tokens --set data.train="$tmp/tok.bin" --set data.val="$tmp/tok.bin" --set train.batch_size=8)
"$bin" plan "${small[@]}" --set train.eval_batch_size=5000000 --json 2>/dev/null >"$tmp/evb.json"
/usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["plans"][0]
assert p["ok"] and p["micro_batch_size"] == 8, p' "$tmp/evb.json" || { echo "eval_batch_size past the validation set: $(head -c 600 "$tmp/evb.json")"; exit 1; }
# train.device cuda where there is no GPU: said (it was planned on the CPU without a word)
"$bin" plan --set model.type=mlp --set train.device=cuda | grep -qF "cuda: train.device cuda names a GPU and this machine has none: a run here refuses to start" ||
    { [ -e /dev/nvidia0 ] || { echo "plan with train.device cuda and no GPU: not said"; exit 1; }; }
# a per-rank batch of few divisors (131, a prime) holds the micro-batch at 1: said, with the batch that
# runs larger ones (it was planned without a word)
"$bin" plan "${gpt[@]}" --hw 8xA100 --set train.batch_size=1048 | grep -qF "micro-batch 1, accumulating 131: the 131 samples per rank have no larger divisor that fits; train.batch_size 1024 would run micro-batches of 64" ||
    { echo "a prime per-rank batch: no hint"; exit 1; }
# --nodes on a bare device: its label reads back as the same plan (2xH100 is two on one node)
"$bin" plan --set model.type=mlp --hw H100 --nodes 2 | grep -q "^2x1xH100 " ||
    { echo "--hw H100 --nodes 2: not labelled 2x1xH100"; exit 1; }
# the CPU keeps float32 activations in bf16 too: the same compute time as fp32 (bf16 was 9% faster)
for p in fp32 bf16; do
    "$bin" plan --set model.type=mlp --set log.peak_gflops=100 --set precision=$p --json 2>/dev/null |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["plans"][0]["time"]["compute_s"])'
done | uniq | [ "$(wc -l)" -eq 1 ] || { echo "a CPU plan in bf16 computes faster than in fp32"; exit 1; }
# the CPU is measured (and the run planned) on the run's threads: train.threads
"$bin" plan --set train.threads=1 | grep -q "^cpu: .* GFLOP/s measured on 1 thread (train.threads;"
echo "plan e2e ok"
