#!/usr/bin/env bash
# optim.offload (ZeRO-Offload: the optimizer state and its update on the
# host, the gradients copied down and the weights up in chunks that overlap
# the host's arithmetic; src/optim/optim.h) on (emulated) GPUs: the CUDA
# emulator's build (make emu, tests/cudaemu/), whose streams run only when
# the host waits, so a chunk updated before its copy's event would read stale
# gradients and change the weights. tests/run.sh passes it the emulator's
# build folder; given any other build it skips.
#  1. One emulated GPU, the mlp, 8 steps of AdamW clipped to the global norm
#     (0.5, below the norm): with and without offload the same bits (the
#     host's AdamW is the fused kernel's float for float); the offloaded run
#     says so ("optim_offload") and its peak device memory is lower by at
#     least its optimizer state.
#     Each chunk's copy is queued during backward, once backward has
#     written its gradients for the last time; the host clips them as it
#     reads them ("optim_offload_early": 1). Without clipping, and with two
#     micro-batches a step (the copies during the second's backward only),
#     the same bits too, the host's update of a chunk now running while
#     backward goes on, and its weights' upload too; the norm it logs, read
#     after the host's update, the same as without offload.
#     A GPT (tied embedding: the chunks its first node reads come down
#     last; blocks checkpointed: their recompute reads weights during
#     backward; bf16, no clipping): the same bits with and without offload.
#  2. Two emulated GPUs under zero1 (each rank's shard offloaded; the norm on
#     the devices, summed through NCCL): the same bits as zero1 without
#     offload, with half the state per rank.
#     With pinned memory refused (ST_CUDAEMU_PINNED_MB=0: the copies' buffers
#     fall back to pageable memory) still the same bits.
#  3. Checkpoints: 4 steps offloaded on 2 GPUs write the same optimizer
#     shards as without offload; resumed to 8 steps on 2 GPUs (offloaded) the
#     same bits as the uninterrupted 8-step run, and on 1 GPU within 1e-4.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_need_emu
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE

common=(--set train.threads=1 --set data.num_workers=0 --set data.val= --set log.progress=off
        --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32 --set train.device=cuda
        --set optim.type=adamw --set optim.lr=0.003 --set optim.schedule=constant --set optim.warmup_steps=2
        --set optim.grad_clip=0.5 --set dist.bucket_cap_mb=0.001 --set dist.timeout_s=60 --json --quiet)
off=(--set optim.offload=true)

# run NAME N ARGS...: train on N ranks (1: no mpirun) into $tmp/NAME, JSON in $tmp/NAME.json.
run() {
    local name=$1 n=$2; shift 2
    local cmd=("$bin" train "${common[@]}" --set train.out_dir="$tmp/$name" "$@")
    if [ "$n" -eq 1 ]; then timeout 120 "${cmd[@]}"; else "${mpi[@]}" -np "$n" "${cmd[@]}"; fi \
        >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}
same() { # A B WHAT: the same weight bits
    if cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then echo "$3: the same bits"
    else fail "$3: the weights differ"; fi
}

run gpu1 1 --set train.steps=8
run gpu1-off 1 --set train.steps=8 "${off[@]}"
ST_CUDAEMU_PINNED_MB=0 run gpu1-off-pageable 1 --set train.steps=8 "${off[@]}"
noclip=(--set train.steps=8 --set optim.grad_clip=0 --set train.micro_batch_size=16)
run gpu1-noclip 1 "${noclip[@]}"
run gpu1-noclip-off 1 "${noclip[@]}" "${off[@]}"
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7 % 13))"; done >"$tmp/text.txt"
"$bin" data tokenize "$tmp/train.tokens" "$tmp/text.txt" >/dev/null || fail "tokenize"
gpt=(--set model.type=gpt --set data.type=tokens --set data.train="$tmp/train.tokens" --set model.n_layer=2
     --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set train.batch_size=8
     --set train.micro_batch_size=4 --set train.steps=6 --set optim.grad_clip=0 --set precision=bf16
     --set train.activation_checkpointing=blocks)
run gpt1 1 "${gpt[@]}"
run gpt1-off 1 "${gpt[@]}" "${off[@]}"
run gpu2-zero1 2 --set train.steps=8 --set dist.strategy=zero1
run gpu2-zero1-off 2 --set train.steps=8 --set dist.strategy=zero1 "${off[@]}"
[ "$fails" -eq 0 ] || e2e_finish
same gpu1 gpu1-off "1 emulated GPU with and without offload"
same gpu1 gpu1-off-pageable "1 emulated GPU offloaded through pageable memory"
same gpu1-noclip gpu1-noclip-off "1 emulated GPU, 2 micro-batches, no clipping, with and without offload"
same gpt1 gpt1-off "a GPT (tied embedding, blocks checkpointed, bf16) on 1 emulated GPU with and without offload"
same gpu2-zero1 gpu2-zero1-off "zero1 on 2 emulated GPUs with and without offload"
/usr/bin/python3 - "$tmp" <<'PY' || fail "the offloaded runs' memory (above)"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, "tests/py")
from runs import last as last_of
last = lambda name: last_of(f"{tmp}/{name}.json")
plain, off, z, zoff = last("gpu1"), last("gpu1-off"), last("gpu2-zero1"), last("gpu2-zero1-off")
noclip, gpt = last("gpu1-noclip-off"), last("gpt1-off")
print(f"copies queued during backward: {off.get('optim_offload_early')} of the clipped run's, "
      f"{noclip.get('optim_offload_early')} of the unclipped one's, {zoff.get('optim_offload_early')} under zero1")
saved = plain["device_mem_peak_bytes"] - off["device_mem_peak_bytes"]
print(f"1 GPU: peak device memory {plain['device_mem_peak_bytes']} B, offloaded {off['device_mem_peak_bytes']} B "
      f"(saved {saved} B; optimizer state {off['optim_state_bytes']} B on the host)")
print(f"zero1 on 2 GPUs: optimizer state per rank {zoff['optim_state_bytes']} B offloaded, "
      f"{z['optim_state_bytes']} B on the device")
checks = {
    "offload reported": off.get("optim_offload") is True and zoff.get("optim_offload") is True
                        and "optim_offload" not in plain,
    "device memory saved": saved >= off["optim_state_bytes"] > 0,
    "the same state": off["optim_state_bytes"] == plain["optim_state_bytes"]
                      and zoff["optim_state_bytes"] == z["optim_state_bytes"],
    "sharded": 2 * zoff["optim_state_bytes"] <= off["optim_state_bytes"] + 2 * 4 * 2 * 1024,
    "copies during backward (one rank)": off.get("optim_offload_early") == 1 and noclip.get("optim_offload_early") == 1
                                         and gpt.get("optim_offload_early") == 1,
    "copies after backward (two ranks)": zoff.get("optim_offload_early") == 0,
}
# unclipped and offloaded, the logged norm is read after the host's update:
# the same as the device's (metrics.jsonl)
def norms(name):
    return [(r["step"], r["grad_norm"]) for r in map(json.loads, open(f"{tmp}/{name}/metrics.jsonl"))
            if "grad_norm" in r]
for a, b in (("gpu1-noclip", "gpu1-noclip-off"), ("gpt1", "gpt1-off")):
    print(f"{b}: logged norms {norms(b)}")
    checks[f"{b}: the logged norms"] = norms(a) == norms(b) and len(norms(a)) > 0

bad = [k for k, v in checks.items() if not v]
for k in bad:
    print("FAIL:", k)
sys.exit(1 if bad else 0)
PY

run half 2 --set train.steps=4 --set dist.strategy=zero1
run half-off 2 --set train.steps=4 --set dist.strategy=zero1 "${off[@]}"
for k in 0 1; do
    f=ckpt/step-4/optim-rank$k.safetensors
    cmp -s "$tmp/half/$f" "$tmp/half-off/$f" && echo "shard $k: the same file offloaded" ||
        fail "optimizer shard $k: the offloaded run wrote another file"
done
# Asynchronous checkpoints (train.checkpoint_async: host copies of the
# device's weights and of the offloaded shard, written on a thread): a
# checkpoint every 2 steps, the same files as the synchronous run's.
run half-async 2 --set train.steps=4 --set dist.strategy=zero1 "${off[@]}" --set train.checkpoint_every=2 \
    --set train.checkpoint_async=true --set train.keep_checkpoints=0
for f in model.safetensors optim-rank0.safetensors optim-rank1.safetensors; do
    cmp -s "$tmp/half-off/ckpt/step-4/$f" "$tmp/half-async/ckpt/step-4/$f" ||
        fail "checkpoint_async: step-4/$f differs from the synchronous run's"
done
[ -f "$tmp/half-async/ckpt/step-2/optim-rank1.safetensors" ] || fail "checkpoint_async: no step-2 shard of rank 1"
grep -q '"async":true' "$tmp/half-async/metrics.jsonl" || fail "checkpoint_async: no asynchronous checkpoint recorded"
for n in 2 1; do
    rm -rf "${tmp:?}/resume-$n"
    cp -r "$tmp/half-off" "$tmp/resume-$n"
    run "resume-$n" "$n" --set train.steps=8 --set dist.strategy=zero1 "${off[@]}" --resume auto
done
same gpu2-zero1 resume-2 "4 + 4 steps offloaded on 2 emulated GPUs against 8 without"
echo -n "4 steps on 2 emulated GPUs + 4 on 1, offloaded: "
/usr/bin/python3 tests/py/weights_diff.py "$tmp/gpu2-zero1/model.safetensors" "$tmp/resume-1/model.safetensors" 1e-4 ||
    fail "resumed on 1 emulated GPU: differs from the uninterrupted run"
e2e_finish "optim.offload on emulated GPUs: the device optimizer's bits, its state off the device, sharded" \
    "checkpoints resumed"
