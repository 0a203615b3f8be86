#!/usr/bin/env bash
# Ranks given GPUs of their own, as SLURM's srun --gpus-per-task=1 (or a
# wrapper setting CUDA_VISIBLE_DEVICES per rank) leaves them: each rank sees
# one GPU, numbered 0 in its process, while its rank on the node is 0, 1,
# ... In the CUDA emulator's build (make emu) with two devices on the
# machine (ST_CUDAEMU_DEVICES=2), which honours CUDA_VISIBLE_DEVICES as the
# runtime does, under real mpirun:
#  1. each rank sees only the GPU of its rank on the node: 2 ranks with
#     train.device cuda train, each on its own (the emulated NCCL refuses two
#     ranks on one), to the same loss as 2 ranks that both see both GPUs;
#     on two MIG slices of one GPU (the same PCI address, a UUID each:
#     ST_CUDAEMU_MIG=1), which NCCL refuses, cuda fails on both ranks before
#     NCCL starts, naming the slices, and auto trains on the CPU;
#  2. both ranks see only the machine's GPU 1 (a wrong CUDA_VISIBLE_DEVICES):
#     train.device cuda fails on both ranks, naming the two ranks, the GPU
#     and the fix, before NCCL starts; auto trains both on the CPU, its
#     effective configuration saying why;
#  3. more ranks than GPUs (2 ranks, one GPU, both seeing it): the same error;
#  4. train.device set per rank (mpirun's MPMD form): rank 0 cpu, rank 1
#     auto with GPUs: both train on the CPU, to the loss of 2 CPU ranks;
#     rank 1 cuda: both fail, each saying why (before, rank 1 alone agreed
#     on the devices and the ranks' collectives went out of step).
# (dist.sync_batchnorm on GPU ranks, once refused here: emu_sync_batchnorm.sh.)
# Given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_emu
e2e_tmpdir
e2e_mpi 120
export OMP_WAIT_POLICY=PASSIVE
host=$(hostname)

# each rank its own GPU, as srun --gpus-per-task=1 sets it
cat >"$tmp/own_gpu.sh" <<'EOF'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"
EOF
chmod +x "$tmp/own_gpu.sh"

tr=(train --set train.steps=6 --set train.threads=1 --set data.num_workers=0 --set data.val=
    --set model.type=mlp --set model.hidden=[64,32] --set train.batch_size=32 --set optim.lr=0.01
    --set optim.schedule=constant --set dist.timeout_s=60 --set precision=fp32 --json)
last() { tail -1 "$1" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["train_loss"])' 2>/dev/null; }

# 1. a GPU each
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -np 2 "$tmp/own_gpu.sh" "$bin" "${tr[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/own" >"$tmp/own.txt" 2>&1 || fail "2 ranks, a GPU each: $(tail -5 "$tmp/own.txt")"
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -np 2 "$bin" "${tr[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/both" >"$tmp/both.txt" 2>&1 || fail "2 ranks seeing both GPUs: $(tail -5 "$tmp/both.txt")"
own=$(last "$tmp/own.txt") both=$(last "$tmp/both.txt")
[ -n "$own" ] && [ "$own" = "$both" ] ||
    fail "a GPU each: loss '$own'; both GPUs seen: '$both' (the same computation, the same bits expected)"
grep -q "device: *cuda " "$tmp/own.txt" || fail "a GPU each: the run did not say it trains on the GPU"

# 1b. MIG slices of one GPU (one PCI address, a UUID each), a slice each:
# refused on both ranks before NCCL (whose duplicate check compares PCI
# addresses), naming the slices; auto trains on the CPU
ST_CUDAEMU_DEVICES=2 ST_CUDAEMU_MIG=1 "${mpi[@]}" -np 2 "$tmp/own_gpu.sh" "$bin" "${tr[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/mig" >"$tmp/mig.txt" 2>&1 && fail "2 ranks on MIG slices of one GPU trained"
want="ranks 0 and 1 would train on two MIG slices (GPU-[0-9a-f-]* and GPU-[0-9a-f-]*) of the GPU at 0000:00:00.0 of host $host: NCCL connects one rank per physical GPU"
n=$(grep -c "$want" "$tmp/mig.txt")
[ "$n" -eq 2 ] || fail "MIG slices: '$want' said by $n ranks, not both: $(grep -m3 -i error "$tmp/mig.txt")"
grep -q "Duplicate GPU" "$tmp/mig.txt" && fail "MIG slices reached NCCL's own check"
ST_CUDAEMU_DEVICES=2 ST_CUDAEMU_MIG=1 "${mpi[@]}" -np 2 "$tmp/own_gpu.sh" "$bin" "${tr[@]}" --set train.device=auto \
    --set train.out_dir="$tmp/mig_auto" >"$tmp/mig_auto.txt" 2>&1 ||
    fail "auto on MIG slices of one GPU: $(tail -5 "$tmp/mig_auto.txt")"
grep -qE "device: +cpu +# auto: ranks 0 and 1 would share a GPU: every rank trains on the CPU" "$tmp/mig_auto.txt" ||
    fail "auto on MIG slices: not on the CPU, or not saying why: $(grep -m2 "device:" "$tmp/mig_auto.txt")"

# 2. both ranks on the machine's GPU 1
export_vis=(-x CUDA_VISIBLE_DEVICES=1)
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" "${export_vis[@]}" -np 2 "$bin" "${tr[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/same" >"$tmp/same.txt" 2>&1 && fail "2 ranks on one GPU trained: $(tail -3 "$tmp/same.txt")"
want="ranks 0 and 1 would both train on the GPU at 0000:01:00.0 (GPU-[0-9a-f-]*) of host $host"
n=$(grep -c "$want" "$tmp/same.txt")
[ "$n" -eq 2 ] || fail "2 ranks on one GPU: '$want' said by $n ranks, not both: $(grep -m3 -i error "$tmp/same.txt")"
grep -q "srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank" "$tmp/same.txt" ||
    fail "2 ranks on one GPU: no fix given: $(grep -m1 "$want" "$tmp/same.txt")"
grep -q "Duplicate GPU" "$tmp/same.txt" && fail "2 ranks on one GPU reached NCCL's own check"
grep -q "MPI_ABORT" "$tmp/same.txt" && fail "2 ranks on one GPU: an abort, where both ranks return the same error"
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" "${export_vis[@]}" -np 2 "$bin" "${tr[@]}" --set train.device=auto \
    --set train.out_dir="$tmp/same_auto" >"$tmp/same_auto.txt" 2>&1 ||
    fail "auto with 2 ranks on one GPU: $(tail -5 "$tmp/same_auto.txt")"
grep -qE "device: +cpu +# auto: ranks 0 and 1 would share a GPU: every rank trains on the CPU" "$tmp/same_auto.txt" ||
    fail "auto with 2 ranks on one GPU: $(grep -m1 ' device:' "$tmp/same_auto.txt")"
grep -q "note: $want" "$tmp/same_auto.txt" || fail "auto with 2 ranks on one GPU: the reason was not printed"
[ -n "$(last "$tmp/same_auto.txt")" ] || fail "auto with 2 ranks on one GPU did not finish: $(tail -3 "$tmp/same_auto.txt")"

# 3. more ranks than GPUs
ST_CUDAEMU_DEVICES=1 "${mpi[@]}" -np 2 "$bin" "${tr[@]}" --set train.device=cuda \
    --set train.out_dir="$tmp/fewer" >"$tmp/fewer.txt" 2>&1 && fail "2 ranks on 1 GPU trained: $(tail -3 "$tmp/fewer.txt")"
grep -q "ranks 0 and 1 would both train on the GPU at 0000:00:00.0 (GPU-[0-9a-f-]*) of host $host" "$tmp/fewer.txt" ||
    fail "2 ranks, 1 GPU: $(grep -m2 -i error "$tmp/fewer.txt")"

# 4. train.device per rank
"${mpi[@]}" -np 2 "$bin" "${tr[@]}" --set train.device=cpu --set train.out_dir="$tmp/cpu2" >"$tmp/cpu2.txt" 2>&1 ||
    fail "2 CPU ranks: $(tail -3 "$tmp/cpu2.txt")"
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -np 1 "$bin" "${tr[@]}" --set train.device=cpu --set train.out_dir="$tmp/mixed" : \
    -np 1 "$bin" "${tr[@]}" --set train.device=auto --set train.out_dir="$tmp/mixed" >"$tmp/mixed.txt" 2>&1 ||
    fail "rank 0 cpu, rank 1 auto: $(grep -m2 error "$tmp/mixed.txt")"
[ -n "$(last "$tmp/cpu2.txt")" ] && [ "$(last "$tmp/mixed.txt")" = "$(last "$tmp/cpu2.txt")" ] ||
    fail "rank 0 cpu, rank 1 auto: loss $(last "$tmp/mixed.txt"), 2 CPU ranks' $(last "$tmp/cpu2.txt")"
grep -q '"device_mem_peak_bytes":[1-9]' "$tmp/mixed.txt" && fail "rank 0 cpu, rank 1 auto: trained on a GPU"
ST_CUDAEMU_DEVICES=2 "${mpi[@]}" -np 1 "$bin" "${tr[@]}" --set train.device=cpu --set train.out_dir="$tmp/mixedc" : \
    -np 1 "$bin" "${tr[@]}" --set train.device=cuda --set train.out_dir="$tmp/mixedc" >"$tmp/mixedc.txt" 2>&1 &&
    fail "rank 0 cpu, rank 1 cuda: trained"
grep -q "error (rank 1): train.device cuda: another rank is set to train on the CPU (train.device cpu); every rank needs a GPU of its own" "$tmp/mixedc.txt" &&
    grep -q "error (rank 0): another rank is set to train.device cuda, and this rank is set to train on the CPU" "$tmp/mixedc.txt" ||
    fail "rank 0 cpu, rank 1 cuda: $(grep -m3 error "$tmp/mixedc.txt")"
grep -q "out of step" "$tmp/mixedc.txt" && fail "rank 0 cpu, rank 1 cuda: the collectives went out of step"
[ "$fails" -ne 0 ] || echo "train.device per rank: cpu and auto train on the CPU; cpu and cuda fail on both ranks, saying why"

e2e_finish "ranks given a GPU each train on their own; two ranks on one GPU are refused, or auto's CPU, saying why"
