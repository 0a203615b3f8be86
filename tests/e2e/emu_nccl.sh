#!/usr/bin/env bash
# NCCL between (emulated) GPUs under real mpirun: the CUDA emulator's build
# (make emu, tests/cudaemu/: kernels on the CPU, NCCL done with MPI) with two
# devices (ST_CUDAEMU_DEVICES=2, one per rank, as NCCL wants). tests/run.sh
# passes it the emulator's build folder (its third argument); given any other
# build it skips.
#  1. tests/mpi/nccl_check on 2 ranks: every collective of
#     src/cuda/comm_nccl.cu between the ranks gives the expected values; and
#     with both ranks on one device the start-up fails on both with NCCL's
#     reason (the emulator refuses it as NCCL does), neither left waiting,
#     each saying its reason as it fails.
#  2. Training, the mlp on Fashion-MNIST, 8 steps of SGD with momentum, global
#     batch 32, small gradient buckets (several per step, all-reduced through
#     NCCL on the communication stream during backward): 2 ranks on 2
#     emulated GPUs against 1 emulated GPU and against 2 CPU ranks (MPI). The
#     weights agree within 1e-4 of each tensor's largest, as
#     tests/e2e/nccl_ddp.sh and ddp_equivalence.sh: the runs differ only in
#     the order of float sums (measured: 2e-7). The 2-rank run reports
#     "replicas_identical": true (every rank's parameters had the same bits
#     after the last step, DESIGN invariant 1; a difference fails the run)
#     and several gradient buckets.
#  3. The same with 16-bit gradient buckets (dist.grad_dtype bf16: divided
#     and rounded on the device, summed in 16 bits by NCCL) against 2 CPU
#     ranks with bf16 buckets (the host's rounding, MPI's sum): within 5e-4
#     (measured 5.9e-5: the fp32 sums' other order, 2e-7 above, can move a
#     value across a bf16 rounding boundary, 4e-3 apart), and not fp32's
#     bits (the option did something). And under zero1 (the 16-bit pieces
#     reduced to their owners through ncclReduce): the same against 2 CPU
#     ranks under zero1.
#  4. `eval` shared by 2 emulated GPUs (each its share of 7 batches) gives 1
#     CPU rank's loss (1e-6 relative) and accuracy; a cnn trained on 2
#     emulated GPUs evaluates (shared, with rank 0's batch-norm statistics)
#     as 1 CPU rank evaluates its saved weights (1e-6, both in fp32).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_need_emu
[ -x "$build/tests/mpi/nccl_check" ] || { echo "FAIL: $build/tests/mpi/nccl_check is not built (make emu)"; exit 1; }
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE

out=$("${mpi[@]}" -np 2 "$build/tests/mpi/nccl_check" 2>&1) || fail "nccl_check on 2 ranks: $out"
grep -q "every collective gave the expected values" <<<"$out" || fail "nccl_check said: $out"
out=$("${mpi[@]}" -np 2 "$build/tests/mpi/nccl_check" same-device 2>&1) || fail "nccl_check same-device: $out"
grep -q "Duplicate GPU detected" <<<"$out" || fail "two ranks on one device refused without NCCL's reason: $out"
# (each says its reason as it fails, before the agreement: where the other ranks wait in NCCL's start for
# it, the agreement comes only with the watchdog's end of the job, and the reason would be lost)
[ "$(grep -c "^scaletrain: rank [01] of 2 (host [^)]*): ncclCommInitRankConfig failed on .*Duplicate GPU detected.*; the other ranks may wait for it in NCCL's start-up until dist.timeout_s$" <<<"$out")" = 2 ] ||
    fail "two ranks on one device: each rank's reason not said as it failed: $out"

common=(--set train.steps=8 --set train.threads=1 --set data.num_workers=0 --set data.val=
        --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32
        --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.schedule=constant
        --set dist.bucket_cap_mb=0.001 --set dist.timeout_s=60 --json --quiet
        --set precision=fp32) # as the CPU runs compared with (auto is bf16 on a GPU)
d=$tmp
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" --set train.device=cuda --set train.out_dir="$d/gpu2" \
    >"$d/gpu2.json" 2>&1 || fail "2 ranks on 2 emulated GPUs: $(cat "$d/gpu2.json")"
timeout 120 "$bin" train "${common[@]}" --set train.device=cuda --set train.out_dir="$d/gpu1" \
    >"$d/gpu1.json" 2>&1 || fail "1 emulated GPU: $(cat "$d/gpu1.json")"
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" --set train.device=cpu --set train.out_dir="$d/cpu2" \
    >"$d/cpu2.json" 2>&1 || fail "2 CPU ranks: $(cat "$d/cpu2.json")"
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" --set train.device=cuda --set dist.grad_dtype=bf16 \
    --set train.out_dir="$d/gpu2-bf16" >"$d/gpu2-bf16.json" 2>&1 ||
    fail "2 emulated GPUs, bf16 buckets: $(cat "$d/gpu2-bf16.json")"
"${mpi[@]}" -np 2 "$bin" train "${common[@]}" --set train.device=cpu --set dist.grad_dtype=bf16 \
    --set train.out_dir="$d/cpu2-bf16" >"$d/cpu2-bf16.json" 2>&1 ||
    fail "2 CPU ranks, bf16 buckets: $(cat "$d/cpu2-bf16.json")"
for dev in cuda cpu; do
    "${mpi[@]}" -np 2 "$bin" train "${common[@]}" --set train.device=$dev --set dist.grad_dtype=bf16 \
        --set dist.strategy=zero1 --set train.out_dir="$d/$dev-bf16-zero1" >"$d/$dev-bf16-zero1.json" 2>&1 ||
        fail "2 ranks on $dev, bf16 buckets under zero1: $(cat "$d/$dev-bf16-zero1.json")"
done
if [ "$fails" -eq 0 ]; then
    echo -n "bf16 pieces under zero1, 2 emulated GPUs against 2 CPU ranks: "
    /usr/bin/python3 tests/py/weights_diff.py "$d/cpu-bf16-zero1/model.safetensors" \
        "$d/cuda-bf16-zero1/model.safetensors" 5e-4 || fail "bf16 pieces under zero1 on the GPUs differ from the CPU's"
    echo -n "bf16 buckets, 2 emulated GPUs against 2 CPU ranks: "
    /usr/bin/python3 tests/py/weights_diff.py "$d/cpu2-bf16/model.safetensors" "$d/gpu2-bf16/model.safetensors" 5e-4 ||
        fail "bf16 gradient buckets on the GPUs differ from the CPU's"
    cmp -s "$d/gpu2-bf16/model.safetensors" "$d/gpu2/model.safetensors" &&
        fail "dist.grad_dtype bf16 on the GPUs gave fp32's bits: the option did nothing"
    for other in gpu1 cpu2; do
        echo -n "2 emulated GPUs (NCCL) against $other: "
        /usr/bin/python3 tests/py/weights_diff.py "$d/$other/model.safetensors" "$d/gpu2/model.safetensors" 1e-4 ||
            fail "the 2-rank NCCL run's weights differ from $other's"
    done
    last=$(tail -n 1 "$d/gpu2.json")
    grep -q '"replicas_identical":true' <<<"$last" || fail "the ranks' weights were not found identical: $last"
    grep -q '"ranks":2' <<<"$last" || fail "not 2 ranks: $last"
    grep -q '"grad_buckets":\([2-9]\|[1-9][0-9]\)' <<<"$last" || fail "fewer than 2 gradient buckets: $last"
    # A shared evaluation on the devices (each rank its 3 of 7 batches, one
    # short): the whole set's result, as 1 CPU rank evaluates it.
    ev=("${common[@]/data.val=/data.val=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz}"
        --set train.eval_steps=7 --set train.eval_batch_size=50 --init "$d/gpu2/model.safetensors")
    "${mpi[@]}" -np 2 "$bin" eval "${ev[@]}" --set train.device=cuda >"$d/eval-gpu2.json" 2>&1 ||
        fail "eval on 2 emulated GPUs: $(cat "$d/eval-gpu2.json")"
    timeout 60 "$bin" eval "${ev[@]}" --set train.device=cpu >"$d/eval-cpu1.json" 2>&1 ||
        fail "eval on 1 CPU rank: $(cat "$d/eval-cpu1.json")"
    # compare NAME A.json B.json REL: loss within REL relative, accuracy within one sample in 100
    compare() {
        /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, a, b, rel = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
g, c = ([json.loads(l) for l in open(p) if l.startswith("{")][-1] for p in (a, b))
ok = abs(g["loss"] - c["loss"]) <= rel * abs(c["loss"]) and abs(g["accuracy"] - c["accuracy"]) <= 0.0101
print(f"{name}: loss {g['loss']!r}, accuracy {g['accuracy']!r}; 1 CPU rank: {c['loss']!r}, {c['accuracy']!r}:",
      "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
    }
    compare "eval on 2 emulated GPUs" "$d/eval-gpu2.json" "$d/eval-cpu1.json" 1e-6 ||
        fail "the shared evaluation on the GPUs"
    # its device memory: the weights (no gradients), the graph, cuBLASLt's 32 MiB workspace
    grep -qE '"device_mem_peak_bytes":3[3-9][0-9]{6}[,}]' "$d/eval-gpu2.json" ||
        fail "eval on 2 emulated GPUs: no device memory peak of 33-40 MB: $(tail -1 "$d/eval-gpu2.json")"
    ! grep -q device_mem_peak_bytes "$d/eval-cpu1.json" || fail "eval on the CPU: a device memory peak"
    # A cnn (batch-norm) trained on 2 emulated GPUs: its final evaluation,
    # shared with rank 0's running statistics (downloaded, broadcast,
    # uploaded), is 1 CPU rank's evaluation of the saved weights.
    # fp32 on both (auto is bf16 on a GPU, whose evaluation differed from
    # the CPU's fp32 one by 1.5e-5 relative; in fp32 they agree to 1e-16)
    cnn=(--set model.type=cnn --set train.batch_size=16 --set train.steps=3 --set train.threads=1
         --set data.num_workers=0 --set train.eval_steps=2 --set train.eval_batch_size=50 --set precision=fp32
         --json --quiet)
    "${mpi[@]}" -np 2 "$bin" train "${cnn[@]}" --set train.device=cuda --set train.out_dir="$d/cnn" \
        >"$d/cnn.json" 2>&1 || fail "a cnn on 2 emulated GPUs: $(tail -n 3 "$d/cnn.json")"
    timeout 60 "$bin" eval "${cnn[@]}" --set train.device=cpu --init "$d/cnn/model.safetensors" \
        >"$d/cnn-cpu1.json" 2>&1 || fail "eval of the cnn on 1 CPU rank: $(tail -n 3 "$d/cnn-cpu1.json")"
    compare "cnn (batch-norm) evaluated by its 2 emulated GPUs" "$d/cnn.json" "$d/cnn-cpu1.json" 1e-6 ||
        fail "the cnn's shared evaluation on the GPUs"
fi
e2e_finish "2 ranks on 2 emulated GPUs through NCCL: every collective right, the same weights as 1 GPU and as 2 CPU ranks, bf16 buckets as the CPU's"
