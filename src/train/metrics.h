/* metrics.jsonl: one JSON object per logged step and per evaluation, written
 * by rank 0 into train.out_dir, one write per line and flushed, so `tail -f`
 * follows a run. The same numbers go to a TensorBoard event file when asked
 * (tensorboard.h: tags "train/<field>" and "eval/<field>"). Also the measured
 * peak of the device that mfu divides by. Not the progress bar (session.h). */
#ifndef ST_TRAIN_METRICS_H
#define ST_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpumon.h"
#include "scaletrain/status.h"
#include "tensorboard.h"

typedef struct st_watch st_watch;

typedef struct st_metrics {
    FILE *f;   /* NULL: not writing (other ranks, or no out_dir) */
    double t0; /* st_now() when opened; "time" counts from here */
    st_tb tb;  /* tb.f NULL: no TensorBoard file */
    st_watch *watch; /* borrowed: over each open and write (core/watch.h), or NULL */
    char what[4200]; /* the watch's words for a write */
    bool eval_at_resume; /* a run resumed at resume_step: an evaluation at that step is written already */
    int64_t resumed_from; /* resume_step, said on this process's first line ("resumed_from"); then 0 */
} st_metrics;

/* One logged step; the *_ms, rates and fractions are over the window of steps
 * since the previous logged step. comm_* only when has_comm (ranks > 1). */
typedef struct st_metrics_step {
    int64_t step, epoch, skipped_steps;
    double loss, lr, grad_norm;
    double samples_per_s, tokens_per_s; /* tokens_per_s only when lm */
    double step_ms, mfu, data_wait_ms, data_wait_fraction; /* mfu -1: no peak known (left out) */
    double comm_ms, comm_overlap;
    double loss_scale; /* fp16 only (has_loss_scale) */
    bool lm, has_comm, has_loss_scale;
    int64_t optim_state_bytes, grad_bytes; /* rank 0's, measured (docs/distributed.md) */
    st_gpu_sample gpu; /* rank 0's device, on a line that takes a GPU sample (log.gpu_interval); else all absent */
} st_metrics_step;

/* Open out_dir/metrics.jsonl (creating out_dir's last component if needed):
 * truncated for a new run (resume_step 0), and for one resumed from another
 * folder's checkpoint (!own: the lines there are another run's; this run's
 * before resume_step are in its own folder); for a run resumed at
 * resume_step from out_dir's own checkpoints, kept up to that step (later
 * lines, from a run that died after its last checkpoint, are dropped) and
 * appended to. With tensorboard, also start a new
 * event file whose SessionLog START at resume_step + 1 makes TensorBoard drop
 * older files' events from that step on (the same lines dropped here).
 * watch (borrowed, may be NULL): a stall watch over the opening and each
 * line's writes, so that storage that stopped answering ends the run with a
 * message, not a wait without end (train.c's store watch). */
st_status st_metrics_open(st_metrics *m, const char *out_dir, int64_t resume_step, bool own, bool tensorboard,
                          st_watch *watch);

/* Append one step line; to TensorBoard every number but step and time, as
 * "train/<field>". The GPU sample adds gpu_mem_allocated_mb, gpu_mem_peak_mb,
 * gpu_mem_used_mb, gpu_mem_total_mb (MiB) when it has memory, and gpu_util,
 * gpu_mem_util (percent), gpu_power_w, gpu_temp_c when it has NVML's. */
st_status st_metrics_step_write(st_metrics *m, const st_metrics_step *s);

/* Append {"eval": true, "step", "loss", "accuracy" when has_accuracy,
 * "samples" (how many the evaluation covered)}; to TensorBoard "eval/loss"
 * and "eval/accuracy". */
st_status st_metrics_eval_write(st_metrics *m, int64_t step, double loss, double accuracy, bool has_accuracy,
                                int64_t samples);
/* A checkpoint of `step`, committed after step committed_step (later than
 * `step` when it was written asynchronously while training went on):
 * write_s, how long rank 0's files took to write; stall_s, how long the step
 * loop stopped for it. */
st_status st_metrics_checkpoint_write(st_metrics *m, int64_t step, int64_t committed_step, bool async,
                                      double write_s, double stall_s);

/* Close; accepts a zeroed or already closed st_metrics. An error: a close
 * that failed (a network file system's write-back at close), its last lines
 * maybe not on the storage. */
st_status st_metrics_close(st_metrics *m);

/* The peak resident set of this process in MB (getrusage ru_maxrss). */
double st_metrics_peak_rss_mb(void);

#endif
