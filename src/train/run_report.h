/* What a run says about itself: the header (the effective configuration,
 * data, model, device), the memory each rank holds against the formulas,
 * the trace of the profiled steps, and the --json summary at the end.
 * Rank 0 prints; not the per-step lines (progress.h, metrics.h). */
#ifndef ST_TRAIN_RUN_REPORT_H
#define ST_TRAIN_RUN_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dist/dist.h"
#include "optim/optim.h"
#include "progress.h"
#include "session.h"
#include "trace.h"

/* The --json summary of a training run (train) or an evaluation; lm: a
 * language model's (perplexity). */
void st_run_print_json(FILE *out, const st_run_result *r, bool lm, bool train);
/* The run's header: its effective configuration, data, model and device
 * (nothing under --quiet). */
void st_run_print_header(st_session *ses, const st_run_opts *opts);
/* The memory this rank holds for optimizer state and gradients, into r and
 * (rank 0, not quiet) printed beside the formulas' figures. */
void st_run_report_memory(st_session *ses, const st_run_opts *opts, const st_dist *dd, const st_optim *o,
                          st_run_result *r);
/* Every rank, after the last traced step (done; the run began after step
 * start): the events gathered, trace.json written by rank 0. */
st_status st_run_write_trace(st_session *ses, const st_run_opts *opts, st_trace *tr, st_progress *prog,
                             int64_t start, int64_t done);

#endif
