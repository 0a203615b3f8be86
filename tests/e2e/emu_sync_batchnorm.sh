#!/usr/bin/env bash
# Synchronised batch-norm on GPUs (dist.sync_batchnorm; src/cuda/batchnorm.cu,
# the statistics all-reduced through NCCL in the compute stream's order), on
# the CUDA emulator (make emu) under real mpirun, sync_batchnorm.sh's checks
# on 2 emulated GPUs:
#  1. a cnn with batch-norm, 6 SGD steps: 1 GPU with batch 4b, and 2 GPUs
#     with sync batch-norm (micro-batch 2b each), save the same weights and
#     running statistics, max|a - b| / max|a| <= 1e-4 per tensor; without
#     sync the 2 GPUs differ by more than that (else the check proves
#     nothing);
#  2. with activation checkpointing (its recompute reduces again, the
#     running statistics move once): the same bits as without;
#  3. under ZeRO-2 (reduce-scatters and all-gathers on the same NCCL
#     communicator as the statistics'): within 1e-4 of DDP's;
#  4. with accumulation: 2 GPUs of 2 micro-steps of b each against 1 GPU of
#     2 micro-steps of 2b, within 1e-4;
#  5. train.device auto with sync batch-norm on 2 ranks trains on the GPUs;
#  6. in bf16 (activations stored in 16 bits, the sums in double as in
#     fp32): 2 GPUs with sync against 1 GPU, within 1e-3 (measured 9e-6);
#  7. under ST_CUDAEMU_LAZY=2 (each collective ends only when a host waits
#     for it: a kernel that read the statistics before their all-reduce
#     wrote them would see other values) and ST_CUDAEMU_LAZY=0 (everything
#     as it is queued): the same bits as 1;
#  8. one row a rank at the last batch-norm (a 1x1 map, micro-batch 1; the
#     global count is 2): trains on the GPUs, as on the CPU, within 5e-3 of
#     1 GPU with both rows (measured 1.6e-3: statistics of 2 values amplify
#     rounding; without sync, 1 GPU's weights and the CPU's differ by 7e-4
#     on such a model); refused before with "got 1 row".
# Given any other build it skips.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
e2e_need_emu
e2e_tmpdir
e2e_mpi 180
export OMP_WAIT_POLICY=PASSIVE

b=4
args=(train --set train.steps=6 --set train.threads=1 --set data.num_workers=0 --set data.val=
      --set dist.bucket_cap_mb=0.01 --set dist.timeout_s=60 --json --quiet
      --set train.batch_size=$((4 * b)) --set model.type=cnn --set model.channels=[8,16] --set model.pool=[1,1]
      --set model.batchnorm=true --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9
      --set optim.schedule=constant --set precision=fp32)
one() { # NAME MICRO ARGS...: one emulated GPU
    local name=$1 micro=$2
    shift 2
    ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${args[@]}" --set train.device=cuda --set train.micro_batch_size="$micro" \
        --set train.out_dir="$tmp/$name" "$@" >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}
two() { # NAME MICRO ARGS...: 2 ranks, an emulated GPU each
    local name=$1 micro=$2
    shift 2
    "${mpi[@]}" -np 2 "$bin" "${args[@]}" --set train.micro_batch_size="$micro" --set train.out_dir="$tmp/$name" \
        "$@" >"$tmp/$name.json" 2>&1 || fail "$name: $(tail -n 3 "$tmp/$name.json")"
}
near() { # REFERENCE RUN WHAT [TOLERANCE]
    echo -n "$3: "
    /usr/bin/python3 tests/py/weights_diff.py "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" "${4:-1e-4}" ||
        fail "$3: the weights or statistics differ"
}

one n1 $((4 * b))
two sync2 $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=true
two local2 $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=false
two sync2ckpt $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=true --set train.activation_checkpointing=blocks
two sync2z2 $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=true --set dist.strategy=zero2
grep -q '"device_mem_peak_bytes":[1-9]' "$tmp/sync2.json" || fail "sync2 did not train on the GPUs (no device memory in its summary)"
near n1 sync2 "1. 2 GPUs with sync batch-norm against 1 GPU with the whole batch"
echo -n "1. 2 GPUs, each its own statistics, against 1 GPU: "
out=$(/usr/bin/python3 tests/py/weights_diff.py "$tmp/n1/model.safetensors" "$tmp/local2/model.safetensors" 1e-4)
echo "$out"
grep -q "^FAIL: worst relative difference" <<<"$out" || fail "local2 matches 1 GPU: the comparison proves nothing"
cmp -s "$tmp/sync2/model.safetensors" "$tmp/sync2ckpt/model.safetensors" &&
    echo "2. with activation checkpointing: the same bits" || fail "2. sync2ckpt: other weights than sync2"
near sync2 sync2z2 "3. under ZeRO-2 against DDP"
one n1acc $((2 * b))
two sync2acc $b --set train.device=cuda --set dist.sync_batchnorm=true
near n1acc sync2acc "4. 2 micro-steps: 2 GPUs (sync) against 1 GPU"
two auto2 $((2 * b)) --set train.device=auto --set dist.sync_batchnorm=true
grep -q '"device_mem_peak_bytes":[1-9]' "$tmp/auto2.json" ||
    fail "5. auto with sync batch-norm did not train on the GPUs (no device memory in its summary)"
one bf1 $((4 * b)) --set precision=bf16
two bfsync2 $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=true --set precision=bf16
near bf1 bfsync2 "6. bf16: 2 GPUs with sync batch-norm against 1 GPU" 1e-3
for lazy in 2 0; do
    ST_CUDAEMU_LAZY=$lazy two "sync2lazy$lazy" $((2 * b)) --set train.device=cuda --set dist.sync_batchnorm=true
    cmp -s "$tmp/sync2/model.safetensors" "$tmp/sync2lazy$lazy/model.safetensors" ||
        fail "7. ST_CUDAEMU_LAZY=$lazy: other weights than sync2 (a kernel ran before the statistics it reads?)"
done
echo "7. collectives ending late, and everything as queued: the same bits"
args1=("${args[@]}" --set train.batch_size=2 --set model.channels=[4,4,4,4,4] --set model.pool=[1,1,1,1,0])
ST_CUDAEMU_DEVICES=1 timeout 120 "$bin" "${args1[@]}" --set train.device=cuda --set train.micro_batch_size=2 \
    --set train.out_dir="$tmp/row1" >"$tmp/row1.json" 2>&1 || fail "row1: $(tail -n 3 "$tmp/row1.json")"
"${mpi[@]}" -np 2 "$bin" "${args1[@]}" --set train.device=cuda --set train.micro_batch_size=1 \
    --set dist.sync_batchnorm=true --set train.out_dir="$tmp/row2" >"$tmp/row2.json" 2>&1 ||
    fail "8. one row a rank: $(grep -m1 error "$tmp/row2.json")"
near row1 row2 "8. one row a rank at the last batch-norm, 2 GPUs with sync against 1 GPU" 5e-3

e2e_finish "sync batch-norm on 2 emulated GPUs: 1 GPU's weights and statistics (local statistics differ), checkpointing's bits, ZeRO-2's, accumulation's, bf16's; auto takes the GPUs; the same bits however the streams run; one row a rank"
