#!/usr/bin/env bash
# NCCL between GPUs under real mpirun (one rank per GPU; NCCL refuses two
# ranks on one GPU, so this needs at least 2): 2 ranks with micro-batch b on
# train.device cuda against 1 rank with batch 2b on one GPU, the mlp and the
# cnn on Fashion-MNIST, 20 steps of SGD with momentum: the same weights
# within 1e-4 of each tensor's largest (as tests/e2e/ddp_equivalence.sh: the
# runs differ only in the order of float sums). Then the 2-rank run says it
# used NCCL's buckets (grad_buckets in its JSON line). Then the mlp under
# dist.strategy zero1 and zero2 on the 2 GPUs (sharded optimizer state, the
# parameters all-gathered through NCCL) against the same 1-GPU run. Skips,
# saying why, with fewer than 2 GPUs, without mpirun or without a CUDA+NCCL
# build (tests/e2e/emu_zero.sh runs the same on 2 emulated GPUs).
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_mpirun
e2e_need_fmnist
e2e_need_numpy
[ -x "$build/tests/test_cuda_nccl" ] || e2e_skip "$build has no test_cuda_nccl (not a CUDA build)"
"$build/tests/test_cuda_nccl" --built >/dev/null 2>&1 || e2e_skip "this build has no NCCL communicator"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${gpus:-0}" -ge 2 ] || e2e_skip "2 ranks need 2 GPUs (NCCL refuses two ranks on one GPU); this machine has ${gpus:-0}"
e2e_tmpdir
e2e_mpi 120
common=(--set train.steps=20 --set train.threads=1 --set data.num_workers=0 --set data.val=
        --set train.device=cuda --set precision=fp32 --set dist.bucket_cap_mb=0.05 --set dist.timeout_s=60 --json --quiet
        --set optim.type=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.schedule=constant)
equiv() { # NAME B ARGS...
    local name=$1 b=$2; shift 2
    local args=("${common[@]}" --set train.batch_size=$((2 * b)) "$@") d=$tmp/$name
    timeout 120 "$bin" train "${args[@]}" --set train.out_dir="$d/n1" >"$d.n1.json" || fail "$name: 1 GPU"
    "${mpi[@]}" -np 2 "$bin" train "${args[@]}" --set train.out_dir="$d/n2" >"$d.n2.json" ||
        fail "$name: 2 ranks: $(cat "$d.n2.json")"
    echo -n "$name 2 ranks against 1: "
    /usr/bin/python3 tests/py/weights_diff.py "$d/n1/model.safetensors" "$d/n2/model.safetensors" 1e-4 ||
        fail "$name: the weights differ"
    grep -q '"grad_buckets":[1-9]' "$d.n2.json" || fail "$name: no gradient buckets in $(tail -n 1 "$d.n2.json")"
}
equiv mlp 32 --set model.type=mlp --set model.hidden=[64,32]
equiv cnn 16 --set model.type=cnn --set model.channels=[8,16] --set model.pool=[1,1] --set model.batchnorm=false
equiv zero1 32 --set model.type=mlp --set model.hidden=[64,32] --set dist.strategy=zero1
equiv zero2 32 --set model.type=mlp --set model.hidden=[64,32] --set dist.strategy=zero2
e2e_finish "2 ranks on 2 GPUs through NCCL match 1 GPU (ddp, zero1, zero2)"
