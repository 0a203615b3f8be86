/* metrics.jsonl: one JSON object per logged step and per evaluation, written
 * by rank 0 into train.out_dir, one write per line and flushed, so `tail -f`
 * follows a run. Also the measured peak of the device that mfu divides by.
 * Not the progress bar (session.h) and not TensorBoard. */
#ifndef ST_TRAIN_METRICS_H
#define ST_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/status.h"

typedef struct st_metrics {
    FILE *f;   /* NULL: not writing (other ranks, or no out_dir) */
    double t0; /* st_now() when opened; "time" counts from here */
} st_metrics;

/* One logged step; the *_ms, rates and fractions are over the window of steps
 * since the previous logged step. comm_* only when has_comm (ranks > 1). */
typedef struct st_metrics_step {
    int64_t step, epoch, skipped_steps;
    double loss, lr, grad_norm;
    double samples_per_s, tokens_per_s; /* tokens_per_s only when lm */
    double step_ms, mfu, data_wait_ms, data_wait_fraction;
    double comm_ms, comm_overlap;
    bool lm, has_comm;
    int64_t optim_state_bytes, grad_bytes; /* rank 0's, measured (docs/distributed.md) */
} st_metrics_step;

/* Open out_dir/metrics.jsonl (creating out_dir's last component if needed):
 * truncated for a new run (resume_step 0); for a run resumed at resume_step,
 * kept up to that step (later lines, from a run that died after its last
 * checkpoint, are dropped) and appended to. */
st_status st_metrics_open(st_metrics *m, const char *out_dir, int64_t resume_step);

/* Append one step line. */
st_status st_metrics_step_write(st_metrics *m, const st_metrics_step *s);

/* Append {"eval": true, "step", "loss", "accuracy" when has_accuracy}. */
st_status st_metrics_eval_write(st_metrics *m, int64_t step, double loss, double accuracy, bool has_accuracy);

/* Close; accepts a zeroed or already closed st_metrics. */
void st_metrics_close(st_metrics *m);

/* The peak resident set of this process in MB (getrusage ru_maxrss). */
double st_metrics_peak_rss_mb(void);

/* Measure this CPU's sgemm rate in GFLOP/s with the current BLAS threads:
 * 1024^3 products repeated for about 0.2 s. */
st_status st_metrics_measure_peak_gflops(double *gflops);

#endif
