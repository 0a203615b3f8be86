#!/usr/bin/env bash
# tests/e2e/rescue_checkpoint.sh on an emulated GPU (the CUDA emulator's
# build, make emu; tests/run.sh passes it, any other build skips), fp32 and
# bf16: the weights checked for finiteness and saved from the device, the
# batch ring's position at the step's start, the same bits after resuming.
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
e2e_tmpdir
for prec in fp32 bf16; do
    dev=(--set train.device=cuda --set precision=$prec) launch=() label=$prec victim=train
    echo "precision $prec:"
    source "$(dirname "$0")/../lib/rescue_checkpoint.sh"
done
e2e_finish "on an emulated GPU, fp32 and bf16: a run whose data fails under it saves its steps first, and resumes on the same trajectory"
