#!/usr/bin/env bash
# tests/e2e/rescue_checkpoint.sh on an emulated GPU (the CUDA emulator's
# build, make emu; tests/run.sh passes it, any other build skips), fp32 and
# bf16: the weights checked for finiteness and saved from the device, the
# batch ring's position at the step's start, the same bits after resuming;
# and on 2 emulated GPUs under ZeRO-2 in bf16, where the ranks agree on each
# read and save their shards (and the masters') together, also with a
# loader thread taking the next batch during the step.
# tests/run.sh: long (one of the suite's longest: started before the others)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_tmpdir
for prec in fp32 bf16; do
    dev=(--set train.device=cuda --set precision=$prec) launch=() label=$prec victim=train
    echo "precision $prec:"
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
done
if command -v mpirun >/dev/null; then
    echo "2 emulated GPUs, ZeRO-2 in bf16 (the fp32 masters sharded, NCCL): the ranks save together:"
    e2e_mpi
    dev=(--set train.device=cuda --set precision=bf16 --set dist.strategy=zero2) launch=("${mpi[@]}" -np 2)
    label=zero2 victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    # With a loader thread the batch after the current one is taken while
    # the step runs (on a GPU, at the end of the step's read and after its
    # backward); one that failed is reported by the next step's read, where
    # the ranks agree on it. (Taken after backward it had failed that rank
    # alone, which ZeRO cannot save; here the thread is far enough ahead
    # that the failed batch is taken with the read, so this case passes
    # either way: the timing that took it after backward is not forced.)
    echo "the same with a loader thread (the next batch taken during the step):"
    label=zero2w victim=train workers=1
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    workers=0
else
    echo "2 emulated GPUs: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "on an emulated GPU, fp32 and bf16 (and 2 under ZeRO-2 in bf16): a run whose data fails under it saves its steps first, and resumes on the same trajectory"
