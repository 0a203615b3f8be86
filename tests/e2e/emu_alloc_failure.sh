#!/usr/bin/env bash
# Out of memory at every allocation on the CUDA path: tests/e2e/alloc_failure.sh's
# walk (tests/lib/alloc_walk.sh: each case ends with an out-of-memory error
# saying what the memory was for, and what the process holds and may take
# for host memory, or finishes with the same weights; never a crash, a
# hang or another result) on the CUDA emulator's build (make emu,
# tests/cudaemu/), where the device code's host side runs as on a GPU: the
# device's opening, its arenas, cuBLASLt's plan table, the fused
# optimizer's chunks, the loss read-back, the pinned ring; the emulator's
# own device allocations fail too, as a GPU's cudaMalloc would. Scenarios: a
# tiny gpt on one emulated GPU (bf16, validation, a loader worker,
# checkpoints), the same with optim.offload (the host's optimizer state and
# its pinned copies), and 2 ranks under launch with NCCL between their
# emulated GPUs, rank 1's allocations failing (it must end the job, not
# hang it). CI walks the gpt's first 100 allocations and a drawn 100 of the
# rest, 60 of the offloaded run's, and launch's first 12 and 8 more (each
# about 1.4 s: mpirun's start and its wait after a failed rank);
# ALLOC_FAILURE_ALL=1 walks every one (the first two about 3 minutes; 160
# of launch's 1,304 walked clean in 4 minutes).
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
source tests/lib/alloc_walk.sh
source tests/lib/tiny_gpt.sh

gpu=("$bin" "${run[@]}" --set train.device=cuda --set precision=bf16 --set data.val="$tmp/t.tokens"
     --set train.steps=3 --set train.checkpoint_every=2 --set train.eval_every=2 --set train.eval_steps=2
     --set data.num_workers=1 --set train.out_dir=o)
scenario gpu 100 100 o/model.safetensors "${gpu[@]}"
scenario offload 0 60 o/model.safetensors "${gpu[@]}" --set optim.offload=true
if command -v mpirun >/dev/null; then # rank 1's allocations fail; NCCL between the two emulated GPUs
    export ST_FAILALLOC_RANK=1
    scenario nccl 12 8 o/model.safetensors "$bin" launch -n 2 "${run[@]}" --set train.device=cuda \
        --set precision=bf16 --set train.steps=3 --set train.checkpoint_every=2 --set dist.timeout_s=20 \
        --set train.out_dir=o
    unset ST_FAILALLOC_RANK
else
    echo "nccl: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "each allocation on the CUDA path failing in turn: a clean error or the same result"
