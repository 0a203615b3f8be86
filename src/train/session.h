/* What a run holds: data, model, graphs and the chosen sizes. Shared by the
 * train and eval paths (train.c, eval.c). Internal to src/train. */
#ifndef ST_TRAIN_SESSION_H
#define ST_TRAIN_SESSION_H

#include <stdio.h>

#include "comm/comm.h"
#include "core/watch.h"
#include "data/dataset.h"
#include "model/model.h"
#include "progress.h"
#include "scaletrain/train.h"

typedef struct st_eval_dev st_eval_dev; /* eval_device.h */
typedef struct st_outq st_outq;         /* core/outq.h */

/* dist.sync_batchnorm on GPUs: the NCCL communicator its all-reduces go
 * through and those not yet seen to end (train.c sync_bn_sum_dev). */
enum { ST_SYNC_BN_PENDING = 64 };
typedef struct st_sync_bn_dev {
    st_comm *comm;
    st_comm_req *pending[ST_SYNC_BN_PENDING];
    int n;
} st_sync_bn_dev;

typedef struct st_session {
    st_config *cfg;
    st_dataset train, val;
    bool train_in_use; /* a data loader worker that never answered may still read it: never freed */
    /* rank 0: train.out_dir/ckpt holds aside_ckpts checkpoints of a run
     * before this one (its latest good one at aside_step, -1: none good),
     * to move to ckpt.previous where this run first writes */
    int aside_ckpts;
    int64_t aside_step;
    bool resume_elsewhere; /* rank 0: --resume named another folder's checkpoint (st_ckpt_resume_source) */
    bool has_train, has_val;
    st_model *model;
    st_model_graph eval_graph;
    st_eval_dev *eval_dev; /* device evaluation's pinned buffers, events and loss sum (eval_device.h) */
    st_model *sampler;  /* rank 0, log.sample_every: a copy of the model on the host, in fp32, that draws the
                           samples where the run's GPU has no room for one (train.c draw_sample) */
    bool sample_failed; /* rank 0: a sample could not be drawn (said): no more this run */
    bool sample_on_host; /* rank 0: the GPU had no room for a sample's sampler (said): the host draws them */
    bool sample_graph_said;  /* rank 0: the GPU sampler's step could not be captured as a CUDA graph (said
                                once) */
    char sample_device[128]; /* rank 0: where the last sample was drawn (st_device_name, "cpu"); "": none */
    st_device *dev; /* train.device: NULL = the CPU, else this rank's GPU (model and graphs live there) */
    FILE *out;      /* standard output: a queue's stream (core/outq.h) when the caller gave none */
    bool out_tty;   /* out is a terminal */
    st_outq *outq;  /* standard output's queue and writer, or NULL (opts->out, or it could not start) */
    int out_lock_fd;    /* rank 0's flock of train.out_dir/run.lock while the run writes there, or -1 */
    int threads;
    st_comm *comm; /* one per process; local (world 1) without a launcher */
    st_comm *dcomm; /* NCCL between the ranks' GPUs (gradients, parameters), or NULL (see uses_nccl) */
    st_sync_bn_dev sync_bn; /* the training graph's sync batch-norm on GPUs (train.c setup_sync_bn) */
    int rank, world;
    bool agreed_error; /* the failure is one every rank saw (no abort needed) */
    bool out_dir_lost; /* train.out_dir's run.lock is no longer this run's (out_dir.c st_out_dir_held):
                          nothing more is written there, a rescue included */
    st_status last_ckpt_err;  /* the checkpoint of the run's last step failed (every rank knows): the final
                               * evaluation and weights are made all the same, then this is returned */
    char last_ckpt_why[8192]; /* ... its message (train.c save_failed) */
    int read_stop_signal;     /* ... the signal the ranks agreed on there (agree_read: the largest) */
    bool read_stopped; /* a stop ended this rank's wait on a training batch that did not come (loader.h
                          ST_LOADER_STOP_GRACE_S): saved as after a failed read (train.c rescue) */
    bool agreed_read;  /* ... and it is a read (a training or validation batch) some rank could not make: the
                        * weights and optimizer state are as whole as before it on every rank */
    bool save;         /* the run saves (--no-save not given): every rank knows, rank 0 writes */
    bool eval_bar;     /* rank 0 draws an evaluation's progress (st_eval_progress): a terminal, not --quiet,
                          log.progress on or auto */
    atomic_int *stop;  /* the run's stop flag (st_run_opts.stop: the signal caught), or NULL: an evaluation
                          ends at its next batch on it (st_session_evaluate) */
    int64_t eval_owed_at; /* the step whose periodic evaluation began and did not end (a stop or an error cut
                             it short): its checkpoint says so (st_ckpt_state.eval_owed); 0: none */
    bool eval_shared;  /* every rank evaluates its share of the batches (st_session_evaluate) */
    bool warned_flat_cnn; /* the warning of a cnn on flat (n, d) features was said (model_input) */
    bool eval_only;    /* scaletrain eval: no training, so train.batch_size need not split over the ranks */
    bool json; /* --json: the result line is the command's product; standard output lost is an error */
    bool init_deferred;   /* the weights were not made at the start: every rank saw a checkpoint for --resume,
                           * whose load replaces them (train.c defer_init) */
    st_watch *read_watch; /* data.timeout_s over the reads in this thread (evaluations, 0 loader workers) */
    st_watch *store_watch; /* train.checkpoint_timeout_s over this thread's other storage (train.c) */
    char who[160];         /* "rank 0 of 2 (host h, pid p)": how every watch's line names this rank */
    char mem_note[320];    /* when less than the host's memory is this process's to use: how much, and
                            * what says so (a cgroup, ulimit -v); "" otherwise */
} st_session;

/* What one rank's evaluation adds up (st_session_evaluate combines the ranks'). */
typedef struct st_eval_sums {
    double loss_sum; /* each batch's mean loss times its valid targets */
    int64_t valid, correct;
    bool stopped; /* a stop was asked before the last batch: the sums are of fewer, and unused */
} st_eval_sums;

/* The signal that asked this rank to stop (s->stop), or 0. */
static inline int st_session_stop_signal(const st_session *s) {
    return s->stop ? atomic_load_explicit(s->stop, memory_order_relaxed) : 0;
}

/* Start the communicator (rank and world), open the device (train.device),
 * open data (train unless eval_only), fill `auto` values, create the model
 * (on the device). */
st_status st_session_open(st_session *s, st_config *cfg, const st_run_opts *opts, bool eval_only);
/* The training run's checks of its data against its model's settings (the
 * data opened as the run opens it, one rank, no device): what
 * `scaletrain check` says of the data, in the run's own words. cfg is not
 * changed. */
st_status st_session_check_data(const st_config *cfg);
/* Free everything and end standard output's queue; ST_OK, or ST_ERR_NOMEM
 * when lines of standard output were lost for want of memory (a --json
 * result among them, perhaps: the command must not say it succeeded). Lines
 * a reader did not take (gone, stalled) are a warning on standard error. */
st_status st_session_close(st_session *s);

/* Evaluate on the validation set (or its first cfg->train.eval_steps batches).
 * With s->eval_shared (several ranks whose models are the same), every rank
 * must call it: each evaluates a contiguous share of the batches and the sums
 * are added up over the ranks (one all-reduce), so every rank returns the
 * whole set's result; else this rank evaluates every batch. A stop asked of
 * a rank (s->stop) ends its share at the next batch: the evaluation then
 * returns ST_ERR_INTERRUPTED on every rank that shares it (the others learn
 * it from the sums' all-reduce), with no result. */
st_status st_session_evaluate(st_session *s, double *loss, double *accuracy, bool *has_accuracy);

/* A shared evaluation's ranks agree every ST_EVAL_AGREE_EVERY batches of
 * their shares (while every rank has batches there) whether one of them was
 * stopped or failed, and all end there if so: a stop that reached some
 * ranks only (one node's) ends every share at once, not when the others'
 * shares end. Ranks that stopped or failed skip their batches' work until
 * the next point (or the last one's passing), so that each joins every
 * agreement. */
enum { ST_EVAL_AGREE_EVERY = 8 };
/* The batches every rank's share has (the shortest share), or 0 when the
 * evaluation is not shared: the agreements are below it. */
int64_t st_session_eval_common(const st_session *s, int64_t B);
/* The head of both evaluation loops (host and device) at this rank's batch
 * `at` of its share: the agreement when one is due (at > 0, a multiple of
 * ST_EVAL_AGREE_EVERY, below common), the test mark, and this rank's stop
 * flag (*stopped set). *st: the loop's status (a failed agreement is put
 * there). Whether the loop evaluates the batch, skips it, or ends. */
typedef enum { ST_EVAL_RUN, ST_EVAL_SKIP, ST_EVAL_END } st_eval_next;
st_eval_next st_eval_batch_begin(st_session *s, int64_t at, int64_t common, st_status *st, bool *stopped);
/* A rank that fails before its loop (its buffers, rank 0's statistics):
 * it joins the first agreement, as failed, where every share then ends. */
void st_eval_agree_failed(st_session *s, st_status failed, int64_t B);

/* For tests of a stop during an evaluation: SCALETRAIN_TEST_EVAL_MARK=FILE:B
 * makes FILE when an evaluation reaches batch B of this rank's share, and
 * waits there until a stop is asked (a minute at most), so that a test's
 * signal comes during the evaluation, neither before nor after it.
 * FILE:B:R holds rank R alone; several, comma-separated. FILE holds the
 * pid of the process that made it. */
void st_eval_test_mark(const st_session *s, int64_t batch);

/* For tests of what may happen at a point of a run (another run in
 * train.out_dir while this one sets up): SCALETRAIN_TEST_PAUSE=POINT:FILE
 * makes FILE, holding this process's pid, where the run reaches POINT, and
 * stops the process (SIGSTOP) until the test continues it (SIGCONT).
 * Points: "out_dir" (train.c, before rank 0 takes train.out_dir once the
 * set-up is done). */
void st_test_pause(const char *point);

/* The samples an evaluation in batches of B covers: the validation set, or
 * train.eval_steps batches on each rank that shares it. */
int64_t st_session_eval_count(const st_session *s, int64_t B);
/* The samples [*lo, *hi) this rank evaluates, whole batches of B. */
void st_session_eval_share(const st_session *s, int64_t B, int64_t *lo, int64_t *hi);

/* After weights were loaded from `path` (--init, a resumed checkpoint):
 * when the file records the inputs' normalisation, the data is normalised
 * with it from now on, as the weights were trained (saying so, rank 0 on
 * standard error, when data.train's own statistics differ: other data, or
 * data changed since). their_data (an evaluation, a resume: the data they
 * trained on is meant): a data.val_split other than theirs is said too. */
void st_session_take_norm(st_session *s, const char *path, bool their_data);

double st_now(void);

/* The run's gradients go through NCCL: a CUDA device and several ranks (or
 * dist.comm nccl). */
bool st_session_uses_nccl(const st_session *s);

/* This rank's outcome s made every rank's (st_agree_status; one rank: its
 * own), a failure then marked agreed (ses->agreed_error): every rank returns
 * one, and they report it together, none aborting the others. */
st_status st_session_agree_outcome(st_session *ses, st_status s, const char *what);

#endif
