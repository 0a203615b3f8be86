#!/usr/bin/env bash
# A run that fails with its weights whole saves them first: a tiny GPT (CPU,
# on 1 rank, on 2 under ddp and on 2 under ZeRO-2; emu_rescue_checkpoint.sh:
# on an emulated GPU) trains on a token file that is shortened under it
# (rewritten in place) once its progress reaches step 50; on 1 rank and on 2
# under ddp also its validation file, which the next evaluation reads (the
# body: tests/lib/rescue_checkpoint.sh).
#  1. The run stops with the data error, naming the file, and says it saved
#     (with 2 ranks: that one of them saved) the weights and optimizer state
#     after step N (train.checkpoint_every 0,
#     train.checkpoint_every_s 0: no other checkpoint); ckpt/latest is step N.
#  2. With the file written back, `--resume auto` to step N + 20 ends with the
#     weights of an uninterrupted run of N + 20 steps, bit for bit: nothing
#     was lost and the data order went on where it stopped.
# (The file is read in order, far past its first page when it is shortened:
# a read within the page that holds the new end would see zeros, not fail.)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_tmpdir
dev=(--set train.device=cpu) launch=() label=cpu victim=train
source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
label=val victim=val
source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
if command -v mpirun >/dev/null; then
    echo "2 ranks (ddp; both read the file, one of them saves):"
    e2e_mpi
    launch=("${mpi[@]}" -np 2) label=two victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    echo "2 ranks (ddp; the validation file: the shared evaluation's ranks save together):"
    label=two-val victim=val
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
    echo "2 ranks (ZeRO-2: the ranks agree on each micro-batch's read and save their shards together):"
    dev=(--set train.device=cpu --set dist.strategy=zero2) label=zero2 victim=train
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
else
    echo "2 ranks: skipped: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)"
fi
e2e_finish "a run whose data fails under it saves its steps first (1 rank: training or validation data; 2 ranks: ddp, its evaluation, ZeRO-2), and resumes on the same trajectory"
