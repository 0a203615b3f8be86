#!/usr/bin/env bash
# tests/e2e/stop_eval.sh's cases (a stop during an evaluation) with the
# model on the emulated GPU: the evaluation's device loop
# (src/train/eval_device.c) ends at its next batch too.
# tests/run.sh: light (it mostly waits on the held evaluations)
source "$(dirname "$0")/../lib/e2e.sh"
e2e_need_emu
ST_STOP_EVAL_DEVICE=cuda exec bash "$(dirname "$0")/stop_eval.sh" "$build"
