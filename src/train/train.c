/* The training step loop on one process: batches in epoch-seeded order,
 * gradient accumulation over micro-batches, clipping, the optimizer and the
 * schedule, progress, evaluation, the summary and the saved weights.
 *
 * On a CUDA device (ses->dev) the same loop runs with the model there: the
 * loader still assembles batches on the host (in pinned memory) and the feed
 * copies each one into the graph's inputs on the copy stream (feed.h); the
 * loss is summed on the device (loss_sum.h) and read back only on the steps
 * that need it (see read_loss), so the host queues micro-steps without
 * waiting for the GPU; the gradient norm, clipping and the optimizer are the
 * fused kernels (st_optim_clip, st_optim_update), and checkpoints go through
 * the host. docs/cuda.md, "Synchronisation in the step loop", lists every
 * host wait left in the loop and why.
 *
 * Its parts apart: out_dir.c (the run's folder and its lock), resume.c
 * (--resume: the checkpoint loaded, this run's settings set against its
 * run's), run_ckpt.c (what a checkpoint records, the weights' check before
 * one, the rescue save of a failing run), run_report.c (the header, memory,
 * trace and --json summary) and run_sample.c (log.sample_every's text
 * samples). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "core/atomic_file.h"
#include "core/blas.h"
#include "core/device.h"
#include "core/half.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/stats.h"
#include "core/text.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/tokens.h"
#include "dist/agree.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "feed.h"
#include "hw/device.h"
#include "layers/layers.h"
#include "loss_sum.h"
#include "matmul_algos.h"
#include "metrics.h"
#include "model/sample.h"
#include "optim/optim.h"
#include "optim/scaler.h"
#include "out_dir.h"
#include "resume.h"
#include "run_ckpt.h"
#include "run_report.h"
#include "run_sample.h"
#include "session.h"
#include "trace.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

/* step_ms_median is the median of at most this many of the last steps. */
#define STEP_TIMES_KEPT 65536

/* What this rank prints, flushed: into standard output's queue (session.c;
 * its writer thread waits on the write, never the run). */
static void out_flush(st_session *ses) { fflush(ses->out); }

/* While rank 0 evaluates alone (or each rank its share, ses->eval_shared)
 * the others wait in their next collective: that wait may last
 * dist.timeout_s plus this estimate of the evaluation, rank 0's samples at
 * its share of the training rate `rate` (every rank's samples per second; a
 * training sample's forward and backward take about three times its forward
 * alone). */
static double eval_estimate_s(const st_session *ses, double rate) {
    if (!ses->has_val) return 0;
    int64_t lo, hi;
    st_session_eval_share(ses, ses->cfg->train.eval_batch_size, &lo, &hi);
    const double per_rank = rate / (double)(ses->world > 0 ? ses->world : 1);
    return per_rank > 0 && ses->rank == 0 ? (double)(hi - lo) / per_rank : 0;
}

/* ... and of rank 0's text sample (log.sample_every), at 1 GFLOP/s or more
 * on its CPU (a GPU's is far less, but the CPU draws it where the GPU has
 * no room): 2 x parameters FLOPs a token while the sequence fits the
 * block (the cache of keys and values), a window's forward (block_size
 * times that) a token past it, and 10 s to make the sampler. */
static double sample_estimate_s(const st_session *ses) {
    const double flops = 2.0 * (double)ses->model->n_params, n = (double)ses->cfg->log.sample_tokens,
                 block = (double)ses->cfg->model.block_size, cached = n < block ? n : block;
    return 10 + (cached * flops + (n - cached) * flops * block) / 1e9;
}

/* --init's weights into the model: a file, a checkpoint, a checkpoint folder
 * or a run directory (st_ckpt_weights); which file, and its step when it is
 * a checkpoint's, said unless quiet. *step: the checkpoint's step (-1: a
 * weights file), path (size bytes): the file read. */
static st_status load_init(st_session *ses, const st_run_opts *opts, int64_t *step, char *path, size_t size) {
    char what[4200];
    snprintf(what, sizeof what, "reading the weights %s (--init)", opts->init);
    st_watch_begin(ses->store_watch, what);
    /* (its warnings, a damaged checkpoint passed over or stale final
     * weights: rank 0's, on standard error, --quiet or not) */
    /* (resolved by the command already: eval, st_cli_run_args; unless a run
     * still training there has pruned that checkpoint since: found again,
     * a later one of the same run) */
    const bool resolved = opts->init_weights[0] && st_path_is_file(opts->init_weights);
    if (resolved) snprintf(path, size, "%s", opts->init_weights), *step = opts->init_step;
    const st_status s =
        resolved ? ST_OK : st_ckpt_weights(opts->init, ses->rank == 0 ? stderr : NULL, path, size, step);
    st_watch_end(ses->store_watch);
    ST_TRY(s);
    if (!opts->quiet && strcmp(path, opts->init) != 0) {
        if (*step >= 0)
            fprintf(ses->out, "weights: %s (the checkpoint of step %lld)\n", path, (long long)*step);
        else
            fprintf(ses->out, "weights: %s\n", path);
    }
    snprintf(what, sizeof what, "reading the weights %s (--init)", path);
    st_watch_begin(ses->store_watch, what);
    const st_status l = st_model_load(ses->model, path);
    st_watch_end(ses->store_watch);
    if (l == ST_OK) st_session_take_norm(ses, path, ses->eval_only);
    return l;
}

/* A resume that will load a checkpoint replaces every tensor of the model
 * (st_model_load refuses a file that lacks one), so the first weights are
 * neither made nor read (--init, said): for a large model they are much of
 * the start (GPT-2 350M: about 6 of the 12 CPU seconds of a resume for one
 * step), and with several ranks rank 0's are not sent to the others either.
 * Deferred where every rank sees a checkpoint that --resume names (by the
 * names alone). The search then takes a good one or fails (ckpt_read.c
 * find_latest: a folder of checkpoints with none good is an error), and
 * finding none at all where one was seen is an error too (train_loop):
 * the folder was moved or could not be listed, and starting over would set
 * its checkpoints aside once it can be again. The same on every rank. */
static st_status defer_init(st_session *ses, const st_run_opts *opts) {
    int64_t seen = 0;
    if (opts->resume) {
        char what[4200];
        snprintf(what, sizeof what, "looking for the checkpoint to resume from (--resume %s)", opts->resume);
        st_watch_begin(ses->store_watch, what);
        seen = st_ckpt_peek_step(ses->cfg->train.out_dir, opts->resume) >= 0;
        st_watch_end(ses->store_watch);
    }
    if (ses->world > 1) /* (every rank, --resume or not: agree_run_opts made them agree on it) */
        ST_TRY(
            st_comm_all_reduce_sync(ses->comm, &seen, &seen, 1, ST_COMM_I64, ST_COMM_MIN, "checkpoint seen"));
    ses->init_deferred = seen != 0;
    if (ses->init_deferred && opts->init && ses->rank == 0 && !opts->quiet)
        fprintf(ses->out, "weights: --init %s not read: the checkpoint --resume %s names replaces them\n",
                opts->init, opts->resume);
    return ST_OK;
}

/* The command-line options every rank must share, before anything is read:
 * --resume given or not (a rank that resumes alone waits in collectives the
 * others never call), and --init on a rank above 0 only where rank 0 has
 * one (every rank starts from rank 0's weights, sent to the others: another
 * rank's file alone would be passed over; rank 0 alone may have it). */
static st_status agree_run_opts(st_session *ses, const st_run_opts *opts) {
    int64_t v = opts->resume ? 1 : 0;
    int diff;
    ST_TRY(st_agree_first_difference(ses->comm, &v, 1, "--resume given", &diff));
    if (diff >= 0) {
        ses->agreed_error = true;
        return st_agree_report(ses->comm, "the ranks were started with different options", "--resume",
                               opts->resume ? opts->resume : "none",
                               "give every rank the same arguments (launch and srun do)");
    }
    int64_t init0 = opts->init != NULL;
    ST_TRY(st_comm_broadcast_sync(ses->comm, &init0, 1, ST_COMM_I64, 0, "--init given"));
    st_status s = ST_OK;
    if (!init0 && opts->init)
        s = st_fail(ST_ERR_CONFIG,
                    "rank %d was given --init %s, and rank 0 none: every rank starts from rank 0's weights "
                    "(sent to the others), so this file would be passed over; give rank 0 the --init (or "
                    "every rank)",
                    ses->rank, opts->init);
    return st_session_agree_outcome(ses, s, "--init");
}

/* The store watch (core/watch.h): storage that stops answering (a hung
 * network file system) while this rank's own thread reads or writes
 * train.out_dir or weights outside a checkpoint's writes (their own watch)
 * ends the process past train.checkpoint_timeout_s with a message naming
 * the wait, where it would wait without end: the look at out_dir's
 * checkpoints before a run, --init's and --resume's reads, each metrics
 * line, the final weights. Unwatched when the watch cannot start. */
static void start_store_watch(st_session *ses, const char *after) {
    if (st_watch_start(st_ckpt_wait_limit(ses->cfg, ses->model, NULL, 0), ses->who,
                       "train.checkpoint_timeout_s", ST_WATCH_STORAGE, after, &ses->store_watch) != ST_OK) {
        st_clear_error();
        ses->store_watch = NULL;
    }
}

/* step < 0: weights of no known step (scaletrain eval of a weights file). */
static st_status eval_and_report(st_session *ses, const st_run_opts *opts, st_run_result *r, int64_t step,
                                 st_metrics *met) {
    if (!ses->has_val) return ST_OK;
    ST_TRY(st_session_evaluate(ses, &r->eval_loss, &r->eval_accuracy, &r->has_accuracy));
    r->has_eval = true;
    if (ses->rank != 0) return ST_OK; /* (a share of the evaluation: rank 0 reports) */
    /* what it covered: train.eval_steps' batches, or every sample (the count changes with the batch on a
     * resume, which makes two runs' losses not alike) */
    const int64_t B = ses->cfg->train.eval_batch_size, covered = st_session_eval_count(ses, B);
    r->eval_samples = covered;
    if (met)
        ST_TRY(st_metrics_eval_write(met, step, r->eval_loss, r->eval_accuracy, r->has_accuracy, covered));
    if (!opts->quiet) {
        char at[48] = "eval", over[96] = "";
        if (step >= 0) snprintf(at, sizeof at, "eval at step %lld", (long long)step);
        if (ses->eval_only) /* (scaletrain eval: as its JSON says) */
            snprintf(over, sizeof over, " (%lld samples in batches of %lld)", (long long)covered,
                     (long long)B);
        else if (covered < ses->val.n)
            snprintf(over, sizeof over, " (%lld of %lld validation samples)", (long long)covered,
                     (long long)ses->val.n);
        if (!isfinite(r->eval_loss)) /* (weights whose outputs overflow on this data: said, not "-nan") */
            fprintf(ses->out, "%s: loss not finite (%s: the model's outputs overflow on this data)%s\n", at,
                    isnan(r->eval_loss) ? "NaN" : "infinite", over);
        else if (r->has_accuracy)
            fprintf(ses->out, "%s: loss %.4f, accuracy %.2f%%%s\n", at, r->eval_loss,
                    100.0 * r->eval_accuracy, over);
        else
            fprintf(ses->out, "%s: loss %.4f, perplexity %.2f%s\n", at, r->eval_loss, exp(r->eval_loss),
                    over);
        out_flush(ses);
    }
    return ST_OK;
}

/* The graph's allreduce_sum hook (graph.h) for sync batch-norm: a blocking
 * sum of doubles over the job's communicator, under its watchdog. */
static st_status sync_bn_sum(void *ctx, double *buf, int64_t n, const char *name) {
    return st_comm_all_reduce_sync(ctx, buf, buf, (size_t)n, ST_COMM_F64, ST_COMM_SUM, name);
}

/* The same hook on GPUs (graph.h): the sums queued as NCCL's all-reduce
 * on the communication stream, after the compute stream's work so far, and
 * the compute stream made to wait for its end on the device. The requests
 * are the trainer's to release: each is tested at the next call and let go
 * once done (one still pending when the ring is full is waited for; those
 * left at the end go with the communicator, which waits for them). */
static st_status sync_bn_sum_dev(void *ctx, double *buf, int64_t n, const char *name) {
    st_sync_bn_dev *s = ctx;
    for (int i = 0; i < s->n;) {
        bool done = false;
        ST_TRY(st_comm_test(&s->pending[i], &done));
        if (done)
            s->pending[i] = s->pending[--s->n];
        else
            i++;
    }
    if (s->n == ST_SYNC_BN_PENDING) ST_TRY(st_comm_wait(&s->pending[--s->n]));
    st_comm_req *req = NULL;
    ST_TRY(st_comm_all_reduce(s->comm, buf, buf, (size_t)n, ST_COMM_F64, ST_COMM_SUM, name, &req));
    s->pending[s->n++] = req;
    return st_comm_device_wait(req);
}

/* dist.sync_batchnorm: the training graph's batch-norm layers reduce their
 * statistics over every rank (batchnorm.c; on GPUs src/cuda/batchnorm.cu).
 * (With dist.deterministic, whose promise, the same bits on any number of
 * ranks, it would break, the configuration is refused: st_config_validate.) */
static st_status setup_sync_bn(st_session *ses, st_graph *g) {
    const st_config *c = ses->cfg;
    if (!c->dist.sync_batchnorm) return ST_OK;
    const char *why = NULL;
    if (ses->world > 1 && g->dev && !ses->dcomm)
        why = "dist.sync_batchnorm on GPUs reduces the statistics through NCCL, and this run's GPUs have no "
              "NCCL communicator; set dist.sync_batchnorm: false";
    if (why) {
        ses->agreed_error = true; /* every rank has the same config */
        return st_fail(ST_ERR_CONFIG, "%s", why);
    }
    if (ses->world == 1) return ST_OK; /* one rank: its statistics are the global ones */
    if (g->dev) {
        ses->sync_bn.comm = ses->dcomm;
        ses->sync_bn.n = 0;
        g->allreduce_sum = sync_bn_sum_dev;
        g->allreduce_ctx = &ses->sync_bn;
        return ST_OK;
    }
    g->allreduce_sum = sync_bn_sum;
    g->allreduce_ctx = ses->comm;
    return ST_OK;
}

/* A checkpoint that failed (a full disk, say): what is left, and what to do.
 * saved: the checkpoint's folder when it was committed before the failure
 * (st_ckpt_save), else "". last: the run's last step's, after which the
 * final weights are still written (smaller than a checkpoint), and said by
 * the caller. */
static st_status save_failed(st_status s, const st_config *c, int64_t step, const char *saved, bool last) {
    if (saved[0])
        return st_fail_context(s,
                               "the checkpoint of step %lld is whole in %s and --resume auto continues from it, "
                               "but its save did not finish: ",
                               (long long)step, saved);
    /* (whether there are any: a run that fails at its first checkpoint has none to continue from) */
    char ckdir[ST_CFG_STR + 8];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", c->train.out_dir);
    char why[8192]; /* (the error said, after this) */
    snprintf(why, sizeof why, "%s", st_last_error());
    int64_t *steps = NULL;
    int n = 0, before = 0;
    if (st_ckpt_list(ckdir, &steps, &n) == ST_OK)
        for (int i = 0; i < n; i++)
            before += steps[i] < step;
    else
        before = -1; /* (not known: said as before) */
    free(steps);
    st_clear_error();
    if (before == 0 && last)
        return st_fail(
            s, "the checkpoint of step %lld, the run's last, was not saved, and %s holds none before it: %s",
            (long long)step, ckdir, why);
    if (before == 0)
        return st_fail(s,
                       "the checkpoint of step %lld was not saved, and %s holds none before it: the steps "
                       "trained are lost (the final weights were not written either): %s",
                       (long long)step, ckdir, why);
    return st_fail(s,
                   "the checkpoint of step %lld was not saved; those before it in %s are whole (once this is "
                   "fixed, --resume auto continues from the latest): %s",
                   (long long)step, ckdir, why);
}

/* An error of this rank's alone after the step, which the other ranks
 * cannot know (rank 0's metrics lines, a checkpoint's among them, and
 * evaluation report): with several ranks it is kept in *own (its message
 * in why) and the step goes on to the stop all-reduce, or at the last step
 * to the run's end's agreement (train_loop), which tells every rank; they
 * stop there together and, the weights and optimizer state whole
 * everywhere, save them together (st_run_rescue), where the failing rank alone
 * could not under ZeRO. On one rank it is returned. */
static st_status own_error(st_session *ses, st_status e, st_status *own, char *why, size_t why_len) {
    if (e == ST_OK || ses->world == 1) return e;
    if (*own == ST_OK) {
        *own = e;
        snprintf(why, why_len, "%s", st_last_error());
    }
    st_clear_error();
    return ST_OK;
}

/* Whether a stop was asked of any rank, outside the step's stop
 * all-reduce: *sig, the largest signal any rank caught (0: none). Every rank
 * calls it at the same point: before the first step, after a checkpoint
 * that a stop came during, after a final evaluation a stop cut short. */
static st_status agree_stop(st_session *ses, const char *what, int *sig) {
    float f = (float)st_session_stop_signal(ses);
    if (ses->world > 1) ST_TRY(st_comm_all_reduce_sync(ses->comm, &f, &f, 1, ST_COMM_F32, ST_COMM_MAX, what));
    *sig = (int)f;
    return ST_OK;
}

/* "SIGTERM" for the stop signal sig (the ranks' agreed one), or "a signal"
 * where none is known here. */
static const char *stop_name(int sig, char buf[static 16]) {
    return sig > 0 ? st_signal_name(sig, buf) : "a signal";
}

/* The error every rank returns once an agreement said that rank `flag` - 1
 * met its own error (own_error) after step `step`: that rank's own message,
 * the others naming it; agreed, so that they report it alike and save
 * together (st_run_rescue). */
static st_status own_stopped(st_session *ses, st_status own, const char *why, float flag, int64_t step) {
    ses->agreed_error = ses->agreed_read = true;
    if (own != ST_OK) return st_fail(own, "%s", why);
    return st_fail(
        ST_ERR_IO,
        "rank %d met an error after step %lld (a metrics write, or its GPU during the text sample: its "
        "own message says which), so every rank stopped there",
        (int)flag - 1, (long long)step);
}

/* Commit the pending asynchronous checkpoint after step `step` (every rank
 * at the same step: the flags of the "stop" all-reduce, or a checkpoint or
 * the end due). Its metrics line's failure is rank 0's own (own_error:
 * *own, its message in own_why). */
static st_status commit_pending(st_session *ses, const st_run_opts *opts, st_ckpt_async **pending,
                                double *stall, st_run_result *r, int64_t step, st_metrics *met,
                                const st_progress *prog, st_trace *trace, st_status *own, char *own_why,
                                size_t own_why_len) {
    const int64_t saved = st_ckpt_async_step(*pending);
    st_trace_mark mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "checkpoint", "checkpoint commit");
    const double t0 = st_now();
    double write_s = 0;
    char got[sizeof r->checkpoint] = ""; /* (set once committed) */
    st_status s = st_ckpt_async_finish(pending, got, sizeof got, &write_s);
    if (got[0]) snprintf(r->checkpoint, sizeof r->checkpoint, "%s", got);
    if (s != ST_OK) {
        /* Every rank has the outcome (its commit's agreement), and the state
         * of the step just trained: they report it alike, and save that step
         * together (st_run_rescue), rather than each ending the others. */
        ses->agreed_error = ses->agreed_read = ses->world > 1 && !st_comm_failed(ses->comm);
        return save_failed(s, ses->cfg, saved, got, false);
    }
    *stall += st_now() - t0;
    st_trace_end(trace, &mark);
    if (ses->rank != 0) return ST_OK;
    ST_TRY(own_error(ses, st_metrics_checkpoint_write(met, saved, step, true, write_s, *stall), own, own_why,
                     own_why_len));
    if (!opts->quiet && !prog->bar) {
        if (saved + 1 < step)
            fprintf(ses->out, "saved checkpoint %s (written while steps %lld to %lld trained)\n", r->checkpoint,
                    (long long)saved + 1, (long long)step);
        else
            fprintf(ses->out, "saved checkpoint %s (written while step %lld trained)\n", r->checkpoint,
                    (long long)step);
        out_flush(ses);
    }
    return ST_OK;
}

/* The loss of the steps closed since the last read (loss_sum.h), averaged
 * over the ranks (every rank reads at the same steps: the reads are
 * collectives): *loss, their sum, *n how many. A loss that is not finite
 * stops the run, naming the first step whose loss was not on any rank (the
 * ranks' losses differ, their data does: one rank's may overflow a step
 * before the others'), every rank the same step; the range of steps since
 * the last read when no rank kept its first. With finite losses, an update
 * the device's guard refused (optim.h st_optim_update: its gradients' norm
 * was not finite) stops the run as well, naming that step. */
static st_status read_loss(st_session *ses, st_loss_sum *ls, double *loss, int64_t *n) {
    int64_t first, bad, halt;
    bool halt_nan;
    ST_TRY(st_loss_sum_read(ls, loss, n, &first, &bad));
    st_loss_sum_halted(ls, &halt, &halt_nan);
    bool halted = halt > 0;
    if (ses->world > 1) { /* every rank logs, and stops on a NaN or a halt, alike */
        float v[2] = {(float)*loss, halted ? 1.0f : 0.0f};
        ST_TRY(st_comm_all_reduce_sync(ses->comm, v, v, 2, ST_COMM_F32, ST_COMM_AVG, "loss"));
        *loss = v[0];
        halted = v[1] > 0; /* (any rank's: the norm is the global one, so it is every rank's) */
    }
    if (isfinite(*loss) && halted) {
        ses->agreed_error = ses->world > 1;
        if (ses->world > 1) {
            /* (the step and its kind in one: a rank with no part of the arena
             * to update, under ZeRO, has no words of its own) */
            int64_t at = halt > 0 ? 2 * halt + (halt_nan ? 1 : 0) : INT64_MAX;
            ST_TRY(st_comm_all_reduce_sync(ses->comm, &at, &at, 1, ST_COMM_I64, ST_COMM_MIN,
                                           "first refused update"));
            halt = at / 2, halt_nan = at % 2;
        }
        return st_fail(ST_ERR_NUMERIC,
                       "the gradients of step %lld are not finite (their norm is %s) while its loss was: "
                       "backward overflowed; no update was made from that step on, so the weights are "
                       "those after step %lld; %s",
                       (long long)halt, halt_nan ? "NaN" : "inf", (long long)halt - 1,
                       st_run_numeric_fix(ses->cfg));
    }
    if (isfinite(*loss)) return ST_OK;
    ses->agreed_error = ses->world > 1;
    if (ses->world > 1) { /* (every rank is here: the average is the same on all) */
        int64_t at = bad > 0 ? bad : INT64_MAX;
        ST_TRY(st_comm_all_reduce_sync(ses->comm, &at, &at, 1, ST_COMM_I64, ST_COMM_MIN,
                                       "first non-finite loss"));
        bad = at == INT64_MAX ? -1 : at;
    }
    const int64_t last = first + *n - 1;
    const char *what = isnan(*loss) ? "NaN" : *loss > 0 ? "inf" : "-inf"; /* (not printf's "-nan") */
    const char *fix = st_run_numeric_fix(ses->cfg);
    if (bad > 0 || first == last)
        return st_fail(ST_ERR_NUMERIC, "the loss became %s at step %lld; %s", what,
                       (long long)(bad > 0 ? bad : last), fix);
    return st_fail(ST_ERR_NUMERIC, "the loss became %s in steps %lld-%lld; %s", what, (long long)first,
                   (long long)last, fix);
}

/* The gradients of step `step` whose norm (every rank's same value) is not
 * finite, seen on the host before the update (fp32 and bf16: fp16's scaler
 * skips such a step): the run stops with the weights of the step before,
 * untouched; a clip would have made them NaN (0 x inf), and the update
 * without one, inf. A loss that is not finite too is the message (read_loss). */
static st_status grads_not_finite(st_session *ses, st_loss_sum *ls, int64_t step, double norm) {
    double loss;
    int64_t n;
    ST_TRY(read_loss(ses, ls, &loss, &n));
    ses->agreed_error = ses->world > 1;
    return st_fail(ST_ERR_NUMERIC,
                   "the gradients of step %lld are not finite (their norm is %s) while its loss, %.6g, was: "
                   "backward overflowed; the weights were not updated and are those after step %lld; lower "
                   "optim.lr%s",
                   (long long)step, isnan(norm) ? "NaN" : "inf", n > 0 ? loss / (double)n : loss,
                   (long long)step - 1,
                   ses->cfg->optim.grad_clip > 0
                       ? ""
                       : ", or set optim.grad_clip (it bounds their growth before an overflow)");
}

/* Where a rank alone cannot save what the run finished when its data fails
 * (st_run_rescue, run_ckpt.c: under ZeRO, whose shards need every rank, or with
 * batch-norm statistics, rank 0's), the ranks agree on each micro-batch's
 * read before its forward, whose collectives a rank without its batch would
 * never join: the outcome s of this rank's read, the others' in one small
 * all-reduce. Any rank's failure is every rank's (ses->agreed_read): the
 * weights and optimizer state are the last step's on every rank, and
 * st_run_rescue saves them together. A stop that ended a rank's wait for its
 * batch (ST_ERR_INTERRUPTED; a stop reaches every rank) is every rank's stop
 * where no rank failed otherwise, and every rank's error where one did: the
 * same outcome everywhere, so that they end alike (end_failed_ranks: an
 * error's report ends in a barrier, which a rank that only stopped would
 * never join). */
static st_status agree_read(st_session *ses, st_status s, int64_t step) {
    char why[2048] = "";
    if (s != ST_OK) snprintf(why, sizeof why, "%s", st_last_error());
    const bool stopped = s == ST_ERR_INTERRUPTED;
    /* the last failing rank, the last stopped one, and the largest stop signal */
    int64_t v[3] = {s != ST_OK && !stopped ? ses->rank + 1 : 0, stopped ? ses->rank + 1 : 0,
                    st_session_stop_signal(ses)};
    const st_status a =
        st_comm_all_reduce_sync(ses->comm, v, v, 3, ST_COMM_I64, ST_COMM_MAX, "the micro-batch's data read");
    if (a != ST_OK) return s != ST_OK ? st_fail(s, "%s", why) : a;
    if (v[0] == 0 && v[1] == 0) return ST_OK;
    ses->agreed_error = ses->agreed_read = true;
    if (v[0] == 0) { /* stops alone: every rank's, its finished steps saved (st_run_rescue) */
        ses->read_stopped = true;
        ses->read_stop_signal = (int)v[2];
        if (stopped) return st_fail(s, "%s", why);
        char name[16];
        return st_fail(ST_ERR_INTERRUPTED,
                       "stopped by %s while rank %lld waited for its training batch of step %lld",
                       stop_name((int)v[2], name), (long long)v[1] - 1, (long long)step + 1);
    }
    if (s != ST_OK && !stopped) return st_fail(s, "%s", why);
    return st_fail(ST_ERR_IO,
                   "rank %lld could not read its training batch of step %lld (its own message says why), so "
                   "every rank stopped there",
                   (long long)v[0] - 1, (long long)step + 1);
}

/* A GPU slowed by heat or its power supply (NVML's clock event reasons)
 * trains at half its speed or less, and in a data-parallel run every rank
 * waits for it at each step's gradient exchange: its rank says so when the
 * slowdown starts, changes and ends (on logged lines, log.gpu_interval),
 * on standard error, naming its host and GPU. A GPU whose clocks come and
 * go (a power cap at its edge) would say so at every logged line: after
 * SLOW_FREE lines, a change is said at most every SLOW_QUIET_S seconds, as
 * the state then with the changes unsaid since, and the run's end says the
 * state if changes went unsaid. */
enum { SLOW_FREE = 4, SLOW_QUIET_S = 300 };
typedef struct slow_watch {
    unsigned long long last, said; /* the reasons at the last reading, and in the last line (0: none) */
    int64_t since;                 /* the step the slowdown said was first seen */
    int lines;                     /* lines said */
    double said_at;                /* st_now() of the last line */
    int64_t unsaid, unsaid_from;   /* changes not said (rate), the first's step */
    int64_t last_step;             /* of the last reading */
} slow_watch;

/* A reading (now) at `step`; end: the run's end, where the last reading's
 * state is said if a change of it went unsaid. */
static void say_slowdown(const st_session *ses, slow_watch *w, unsigned long long now, int64_t step,
                         bool end) {
    if (!end && now != w->last) {
        if (w->unsaid++ == 0) w->unsaid_from = step;
        w->last = now;
    }
    if (!end) w->last_step = step;
    const double t = st_now();
    const bool quiet = w->lines >= SLOW_FREE && t - w->said_at < SLOW_QUIET_S && !end;
    if (!w->unsaid || quiet || (end && now == w->said)) return;
    char host[64] = "?", by[128], more[160] = "";
    gethostname(host, sizeof host - 1);
    const int64_t at = w->unsaid == 1 ? w->unsaid_from : w->last_step; /* (where this state was seen) */
    if (w->unsaid > 1)
        snprintf(more, sizeof more,
                 " (its clocks changed %lld times since step %lld, said at most every %d s)",
                 (long long)w->unsaid, (long long)w->unsaid_from, (int)SLOW_QUIET_S);
    if (now) {
        if (!w->said) w->since = at;
        st_ticker_sayf("scaletrain: warning: rank %d (host %s, %s): the GPU's clocks are slowed (%s) at step "
                       "%lld%s: %s; nvidia-smi -q -d PERFORMANCE,TEMPERATURE on that host says more (the "
                       "cooling, the power supply)\n",
                       ses->rank, host, st_device_name(ses->dev), st_nvml_slowdown_names(now, by, sizeof by),
                       (long long)at, more,
                       ses->world > 1 ? "every rank waits for it at each step's gradient exchange"
                                      : "the run trains slower while it lasts");
    } else {
        st_ticker_sayf(
            "scaletrain: rank %d (host %s, %s): the GPU's clocks are no longer slowed at step %lld "
            "(first seen slowed at step %lld)%s\n",
            ses->rank, host, st_device_name(ses->dev), (long long)at, (long long)w->since, more);
    }
    w->said = now;
    w->said_at = t;
    w->lines++;
    w->unsaid = 0;
}

/* The steps since metrics.jsonl's last step line (train_loop): their losses
 * summed as read and their count, and the loop's running totals (time in
 * steps, waiting for data, and on a data-parallel run the gradients' waits,
 * the time communication hid and its span) when the window began. */
typedef struct log_window {
    double loss;
    int64_t n;
    double t, wait, comm, hidden, span;
} log_window;

/* What one step line says beside the window's sums. */
typedef struct line_facts {
    int64_t step, steps_per_epoch, tokens_per_sample;
    double lr, grad_norm, flops_step, t_train, wait_total;
    bool lm;
    const st_scaler *sc;
    const st_dist *dd; /* with ddp non-NULL: a data-parallel run */
    const st_ddp *ddp;
    st_gpu_sample gpu;
} line_facts;

/* metrics.jsonl's line for the window ending at f->step (rank 0's, which
 * holds met->f), then the window starts again; r->train_loss becomes the
 * window's loss (every rank's, as it read it). */
static st_status log_step_line(st_session *ses, st_metrics *met, log_window *w, const line_facts *f,
                               st_run_result *r) {
    const st_config *c = ses->cfg;
    st_status s = ST_OK;
    if (met->f && w->n > 0) {
        const double dt = f->t_train - w->t, wait = f->wait_total - w->wait;
        st_metrics_step ms = {0};
        ms.step = f->step;
        ms.epoch = f->steps_per_epoch > 0 ? (f->step - 1) / f->steps_per_epoch : 0;
        ms.loss = w->loss / (double)w->n;
        ms.lr = f->lr;
        ms.grad_norm = f->grad_norm;
        ms.lm = f->lm;
        ms.samples_per_s = dt > 0 ? (double)(w->n * c->train.batch_size) / dt : 0;
        ms.tokens_per_s = ms.samples_per_s * (double)f->tokens_per_sample;
        ms.step_ms = 1e3 * dt / (double)w->n;
        /* Model FLOPs over every rank's peak (log.peak_gflops is per rank). */
        const double peak = c->log.peak_gflops * 1e9 * (double)ses->world;
        ms.mfu = peak <= 0 ? -1 : dt > 0 ? f->flops_step * (double)w->n / dt / peak : 0; /* (-1: left out) */
        ms.data_wait_ms = 1e3 * wait / (double)w->n;
        ms.data_wait_fraction = dt > 0 ? wait / dt : 0;
        ms.skipped_steps = f->sc->skipped;
        ms.has_loss_scale = f->sc->enabled;
        ms.loss_scale = f->sc->scale;
        ms.optim_state_bytes = r->optim_state_bytes;
        ms.grad_bytes = st_dist_grad_nbytes(f->dd);
        ms.gpu = f->gpu;
        if (f->ddp) {
            const double span = f->ddp->span_s - w->span;
            ms.has_comm = true;
            /* per step, as step_ms (zero2 with accumulation syncs every micro-step: per sync
             * it was a fraction of the step's wait) */
            ms.comm_ms = 1e3 * (f->ddp->wait_s - w->comm) / (double)w->n;
            ms.comm_overlap = span > 0 ? (f->ddp->hidden_s - w->hidden) / span : 0;
        }
        s = st_metrics_step_write(met, &ms);
    }
    if (f->ddp) {
        w->comm = f->ddp->wait_s;
        w->hidden = f->ddp->hidden_s;
        w->span = f->ddp->span_s;
    }
    w->t = f->t_train;
    w->wait = f->wait_total;
    if (w->n > 0) r->train_loss = w->loss / (double)w->n;
    w->loss = 0;
    w->n = 0;
    return s;
}

/* A stop's steps since the last line get theirs, as the run's last step
 * does: metrics.jsonl then reaches the checkpoint's step, and a resumed
 * run's lines follow on without a gap. (After the agreement: a failure to
 * write it is said, and the stop saves as it would.) */
static void stop_line(st_session *ses, st_metrics *met, log_window *w, const line_facts *f,
                      st_run_result *r) {
    if (w->n > 0 && log_step_line(ses, met, w, f, r) != ST_OK)
        st_ticker_sayf(
            "scaletrain: warning: metrics.jsonl: the line of step %lld (the stop's) was not written: "
            "%s\n",
            (long long)f->step, st_last_error());
}

static st_status train_loop(st_session *ses, const st_run_opts *opts, st_run_result *r, st_metrics *met) {
    st_config *c = ses->cfg;
    st_model *m = ses->model;
    st_device *dev = ses->dev;
    const int64_t mb = c->train.micro_batch_size, accum = c->train.batch_size / (mb * ses->world);
    const int64_t steps = c->train.steps, n = ses->train.n;
    const bool lm = ses->train.kind == ST_DATA_TOKENS;
    const int64_t tokens_per_sample = lm ? ses->train.seq_len : 0;
    const uint64_t seed = (uint64_t)c->train.seed;
    st_model_graph mg = {0};
    st_optim opt = {0};
    st_sampler *smp = NULL;
    st_feed *feed = NULL; /* the loader, and its batches into mg.x and mg.y */
    st_loss_sum ls = {0}; /* the loss, summed where the model is */
    st_dist dd = {0};
    const st_ddp *ddp = &dd.ddp;
    st_trace tr = {0}, *trace = NULL;
    st_gpu_monitor gm = {0};
    st_scaler sc;
    const bool dist = ses->world > 1;
    st_scaler_init(&sc, strcmp(c->precision, "fp16") == 0, c->optim.loss_scale, c->optim.loss_scale_window);
    /* the last STEP_TIMES_KEPT step times, for the median (a ring: any train.steps fits) */
    const int64_t times_kept = steps < STEP_TIMES_KEPT ? steps : STEP_TIMES_KEPT;
    double *step_times = malloc((size_t)(times_kept > 0 ? times_kept : 1) * sizeof *step_times);
    st_ckpt_state ck = {0};
    bool resumed_owed = false; /* the checkpoint resumed from says its step's evaluation was cut short */
    st_ckpt_layout lay = {0};
    st_ckpt_async *pending = NULL; /* an asynchronous checkpoint being written */
    st_status own = ST_OK;         /* this rank's own error after a step (own_error) */
    char own_why[2048] = "";
    double pending_stall = 0;      /* the step loop's time on it so far */
    /* For st_run_rescue (run_ckpt.c): the step the weights and optimizer state hold
     * while they are whole (-1 while the optimizer writes them, from an
     * offloaded update's start during backward, or once a forward has moved
     * batch-norm statistics on), the sampler's position then, and the last
     * checkpoint's step. */
    int64_t whole = -1, saved_step = 0;
    st_sampler_pos whole_pos = {0};
    st_status s;
    if (!step_times) {
        s = st_fail(ST_ERR_NOMEM, "out of memory for step timings");
        goto fail;
    }
    st_comm *gcomm = ses->dcomm ? ses->dcomm : ses->comm; /* the gradients' (NCCL between CUDA devices) */
    if (dist) { /* the agreement before the strategy's set-up: a rank that differs sets nothing up */
        st_comm_set_step(ses->comm, 0);
        s = st_ddp_agree(ses->comm, gcomm, &m->params, c->train.batch_size, mb, n,
                         ses->has_val ? ses->val.n : -1, !ses->init_deferred);
        if (s != ST_OK) {
            /* (every rank's failure, or the communicator's, which end_failed_ranks sees) */
            ses->agreed_error = true;
            goto fail;
        }
    }
    /* Padded arenas, and under ZeRO with bf16/fp16 the masters sharded,
     * before the activations take their memory. */
    ST_GOTO(st_dist_shard_params(gcomm, c, &m->params));
    ST_GOTO(st_model_graph_build(m, mb, &mg));
    r->activation_mib = (double)(mg.g.act_count + mg.g.grad_count) * sizeof(float) / (1 << 20);
    if (!opts->quiet && ses->rank == 0)
        fprintf(ses->out,
                "activations: %.1f MiB with their gradients for a micro-batch of %lld (checkpointing %s)\n",
                r->activation_mib, (long long)mb, c->train.activation_checkpointing);
    if (ses->rank == 0 && mg.g.selective && mg.g.n_remat == 0)
        st_ticker_sayf(
            "scaletrain: warning: train.activation_checkpointing: selective recomputes nothing in this %s "
            "(it keeps no output of a norm, GELU or ReLU for backward that it could recompute); blocks is "
            "the setting that saves memory here\n",
            c->model.type);
    /* Before the optimizer: ZeRO gives it this rank's shard. */
    ST_GOTO(st_dist_init(&dd, gcomm, c, &m->params, &mg.g, accum));
    int64_t opt_lo, opt_hi;
    st_dist_range(&dd, &opt_lo, &opt_hi);
    ST_GOTO(st_optim_init_range(&opt, c, &m->params, opt_lo, opt_hi));
    st_run_report_memory(ses, opts, &dd, &opt, r);
    lay = (st_ckpt_layout){ses->comm, ses->rank, ses->world, dd.mode != ST_DIST_DDP && ses->world > 1,
                           dd.sh.shard};
    mg.g.training = true;
    ck.seed = seed;
    ck.lr = c->optim.lr_run > 0 ? c->optim.lr_run : c->optim.lr; /* (what its checkpoints record) */
    ck.batch_size = c->train.batch_size;
    ck.samples = ses->train.n;
    /* (rank 0's, which writes state.json and warns) */
    const uint32_t data_crc = ses->rank == 0 && opts->save ? st_dataset_fingerprint(&ses->train) : 0;
    ck.data_crc = data_crc;
    ST_GOTO(st_run_resume(ses, opts, &opt, &lay, &sc, &ck, &resumed_owed, data_crc));
    const int64_t start = ck.step;
    r->start_step = start;
    /* (a scale below 1 shrinks what fp16 stores, and nothing says so: the
     * steps learn less without an overflow; the scale grows back only by
     * doubling) */
    if (sc.enabled && start == 0 && c->optim.loss_scale < 1 && ses->rank == 0)
        st_ticker_sayf("scaletrain: warning: optim.loss_scale %g in fp16 makes the gradients smaller before "
                       "fp16 stores them, whose smallest value is 6e-8: small ones become 0 without an "
                       "overflow to say so, and the scale only doubles every optim.loss_scale_window (%lld) "
                       "clean steps. A scale of 1 or more suits every run (65536, the default, most)\n",
                       c->optim.loss_scale, (long long)c->optim.loss_scale_window);
    /* (its first writes come once the set-up is done: st_out_dir_first_writes) */
    if (ses->rank == 0 && opts->save) st_test_pause("out_dir");
    ST_GOTO(st_session_agree_outcome(ses, ses->rank == 0 && opts->save ? st_out_dir_take(ses, opts) : ST_OK,
                                     "rank 0's lock of train.out_dir"));
    if (lay.sharded && ses->save) ST_GOTO(st_out_dir_shared(ses));
    if (dist) {
        if (strcmp(c->dist.grad_dtype, "fp32") != 0 &&
            ((dd.mode == ST_DIST_ZERO2 && !m->params.grads_sharded) || dd.deterministic)) {
            ses->agreed_error = true; /* every rank has the same config */
            s = st_fail(
                ST_ERR_CONFIG,
                "dist.grad_dtype %s works with dist.strategy ddp or zero1, and zero2 on GPUs, without "
                "dist.deterministic (zero2's running sums on the CPU and the deterministic fold travel in "
                "fp32); set dist.grad_dtype: fp32, or dist.strategy: zero1",
                c->dist.grad_dtype);
            goto fail;
        }
        ST_GOTO(st_ddp_set_grad_dtype(&dd.ddp, st_precision_from_name(c->dist.grad_dtype)));
        r->ranks = ses->world;
        r->grad_buckets = ddp->n_buckets;
        /* (after the padding of st_dist_init) the arena in the shared segment, and its buckets all-reduced
         * from it: not dist.deterministic's fold nor 16-bit buckets, which take the copying path */
        r->grad_zero_copy =
            m->params.grad_hooked && !dd.deterministic && strcmp(c->dist.grad_dtype, "fp32") == 0;
    }
    ST_GOTO(setup_sync_bn(ses, &mg.g));                    /* after the ranks agreed on the configuration */
    const int64_t *tsteps = c->log.trace_steps.v; /* 1-based; this run does start + 1 .. steps */
    const bool in_run = start < tsteps[1] && tsteps[0] <= steps;
    if (c->log.trace && !in_run && ses->rank == 0)
        st_ticker_sayf(
            "scaletrain: warning: log.trace_steps [%lld, %lld]: this run does steps %lld to %lld, so "
            "nothing will be traced (choose --profile FIRST-LAST within them)\n",
            (long long)tsteps[0], (long long)tsteps[1], (long long)start + 1, (long long)steps);
    if (c->log.trace && in_run) { /* the profiler trace (trace.h) */
        if (dist) ST_GOTO(st_comm_barrier_sync(ses->comm, "trace clock"));
        ST_GOTO(st_trace_init(&tr, tsteps[0], tsteps[1], ses->rank));
        trace = &tr;
        /* the GPU's streams as tracks of their own; 16-bit activations on a device in bf16/fp16 */
        st_trace_set_device(trace, dev, dev && strcmp(c->precision, "fp32") != 0 ? 2 : 4);
        mg.g.node_hook = st_trace_node;
        mg.g.span_hook = st_trace_span;
        mg.g.node_hook_ctx = trace;
        dd.ddp.trace = trace;
    }

    st_sampler_opts so = ST_SAMPLER_OPTS_INIT;
    so.n = n;
    so.batch_size = c->train.batch_size;
    so.micro_batch = mb;
    so.rank = ses->rank;
    so.world = ses->world;
    so.seed = seed;
    so.shuffle = c->data.shuffle;
    so.drop_last = c->data.drop_last;
    so.name = c->data.train;
    so.interleave = dd.interleave; /* the fold order, or sync batch-norm's (dist.h) */
    ST_GOTO(st_sampler_init(&so, &smp));
    if (start > 0 && ck.pos.step >= st_sampler_steps_per_epoch(smp) && ck.pos.micro == 0) {
        /* An epoch shorter than the checkpoint's position in it (data.train
         * has fewer samples now, or data.drop_last changed): the next epoch */
        if (ses->rank == 0)
            fprintf(
                stderr,
                "resume: warning: the checkpoint is at step %lld of epoch %lld, but an epoch of data.train "
                "(%s: %lld samples, train.batch_size %lld, data.drop_last %s) is %lld steps now: the run "
                "goes on at the start of epoch %lld\n",
                (long long)ck.pos.step, (long long)ck.pos.epoch, c->data.train, (long long)n,
                (long long)c->train.batch_size, c->data.drop_last ? "true" : "false",
                (long long)st_sampler_steps_per_epoch(smp), (long long)ck.pos.epoch + 1);
        ck.pos = (st_sampler_pos){ck.pos.epoch + 1, 0, 0};
    }
    if (start > 0) ST_GOTO(st_sampler_seek(smp, ck.pos));
    st_loader_opts lo = ST_LOADER_OPTS_INIT;
    lo.num_workers = (int)c->data.num_workers;
    lo.timeout_s = c->data.timeout_s;
    lo.watch = ses->read_watch; /* (0 workers: this thread reads) */
    lo.stop = opts->stop;
    lo.prefetch = lo.num_workers > 0 ? 2 * lo.num_workers : 1;
    lo.crop_pad = (int)c->data.augment_crop_pad; /* training only: evaluation reads st_dataset_batch */
    lo.flip = c->data.augment_flip;
    lo.aug_seed = seed;
    if ((s = st_feed_init(dev, &ses->train, smp, &lo, mg.x, mg.y, &feed)) != ST_OK) {
        if (s == ST_ERR_CONFIG) st_fail_context(s, "data.augment_crop_pad, data.augment_flip: ");
        goto fail;
    }
    st_feed_set_trace(feed, trace);
    ST_GOTO(st_loss_sum_init(&ls, dev, accum));
    if (opt.dev && !opt.off) opt.halt = st_loss_sum_guard(&ls); /* (the offloaded update is the host's) */
    /* (rank 0's: a failure, its storage's, ends every rank with it) */
    ST_GOTO(st_session_agree_outcome(
        ses, ses->rank == 0 && opts->save ? st_out_dir_first_writes(ses, opts, start, met) : ST_OK,
        "rank 0's first writes to train.out_dir"));
    const char *unpinned;
    if (dev && !st_feed_pinned(feed, &unpinned) && !opts->quiet)
        fprintf(ses->out,
                "data: the batch ring is pageable memory, so copies to the device do not overlap "
                "compute (%s)\n",
                unpinned);
    double wait_total = 0;
    st_progress prog;
    st_progress_init(&prog, ses->out, ses->out_tty, opts->quiet ? "silent" : c->log.progress, start, steps);
    /* Rank 0's GPU sampled on logged lines (gpumon.h); every rank's GPU's
     * clocks read there too (slowdown, below). */
    if (dev && c->log.gpu_interval > 0) {
        st_gpu_monitor_open(&gm, dev, NULL);
        if (ses->rank == 0 && !gm.nvml.lib && !opts->quiet)
            fprintf(ses->out, "gpu monitor: memory only, no NVML (%s)\n", gm.why);
    }
    int64_t gpu_last = start;                           /* the step of the last GPU sample */
    slow_watch slow = {0};                              /* the GPU's slowdown reasons, read and said */
    bool slow_known = false;
    double t_train = 0, last_loss = 0; /* last_loss: a step's, at the last read */
    const double flops_step = 3.0 * st_model_flops_per_sample(m) * (double)c->train.batch_size;
    log_window win = {0}; /* since the last logged step, for metrics.jsonl */
    const int64_t skipped0 = sc.skipped; /* (fp16: a resumed run's, before this one) */
    double grad_norm = 0;
    const int64_t steps_per_epoch = st_sampler_steps_per_epoch(smp);
    bool stopped = false;
    bool eval_cut = false; /* the step's evaluation was cut short by the stop */
    r->steps = start;
    saved_step = start;
    const bool fwd_writes = m->params.buffer_count > 0;
    /* (under ddp without batch-norm statistics a rank saves alone: st_run_rescue) */
    const bool agree_reads = dist && (dd.mode != ST_DIST_DDP || m->params.masters_sharded || fwd_writes);
    const int64_t waits0 = st_device_stream_waits(dev);
    double t_saved = st_now(); /* the last checkpoint's end (train.checkpoint_every_s), or the loop's start */
    /* A stop asked during the set-up (the configuration, the data, the
     * model, the CPU's measure): the run ends before its first step, having
     * trained and saved nothing (it trained a step and saved it: a
     * checkpoint that made the corrected run refuse out_dir as an
     * unfinished run's). */
    if (start < steps) {
        /* An evaluation due at the step the run resumes from that its own
         * metrics.jsonl lacks (a stop cut it short in the run that reached
         * the step, or train.eval_every changed): made first, shared as
         * ever. Resumed into another out_dir, whose metrics.jsonl starts
         * here, the checkpoint says whether it was cut short. Rank 0 knows,
         * and tells the others here. */
        const bool owed_here = ses->rank == 0 && start > 0 && ses->has_val && c->train.eval_every > 0 &&
                               start % c->train.eval_every == 0 && met->f &&
                               (ses->resume_elsewhere ? resumed_owed : !met->eval_at_resume);
        float pre[2] = {(float)st_session_stop_signal(ses), owed_here ? 1.0f : 0.0f};
        if (dist)
            ST_GOTO(st_comm_all_reduce_sync(ses->comm, pre, pre, 2, ST_COMM_F32, ST_COMM_MAX,
                                            "stop before the first step"));
        int sig = (int)pre[0];
        char during[96] = "";
        if (!sig && pre[1] > 0) {
            if (ses->rank == 0 && !opts->quiet) {
                if (ses->resume_elsewhere)
                    fprintf(ses->out,
                            "resume: the evaluation due at step %lld was cut short in the run that saved its "
                            "checkpoint: made first\n",
                            (long long)start);
                else
                    fprintf(ses->out,
                            "resume: the evaluation due at step %lld is not in metrics.jsonl (a stop during "
                            "it, or train.eval_every changed): made first\n",
                            (long long)start);
                out_flush(ses);
            }
            s = eval_and_report(ses, opts, r, start, met);
            if (s == ST_ERR_INTERRUPTED) { /* (every rank has it: the evaluation is shared) */
                st_clear_error();
                ST_GOTO(agree_stop(ses, "stop during the resumed step's evaluation", &sig));
                snprintf(during, sizeof during, " (during the evaluation of step %lld's weights)",
                         (long long)start);
            } else {
                if (!ses->agreed_read) s = own_error(ses, s, &own, own_why, sizeof own_why); /* (rank 0's) */
                ST_GOTO(s); /* (a shared evaluation's failure: every rank has it) */
            }
        }
        if (sig) {
            char name[16];
            ses->agreed_error = true;
            r->stop_said = ses->rank != 0;
            r->stop_signal = sig;
            s = st_fail(ST_ERR_INTERRUPTED,
                        "stopped by %s before step %lld%s: nothing was trained or saved%s",
                        stop_name(sig, name), (long long)start + 1, during,
                        start > 0 ? " (the checkpoint it resumed from is as it was)" : "");
            goto fail;
        }
    }
    for (int64_t step = start; step < steps; step++) {
        char step_name[48];
        snprintf(step_name, sizeof step_name, "step %lld", (long long)step + 1);
        st_trace_step(trace, step + 1);
        const st_trace_mark step_mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "step", step_name);
        const double t0 = step_mark.t0;
        st_trace_mark mark;
        if (dist) st_comm_set_step(ses->comm, step + 1);
        st_comm_set_step(ses->dcomm, step + 1); /* (NCCL's errors name the step too; NULL: nothing) */
        st_device_set_step(dev, step + 1);      /* (and the device's stall watch) */
        whole = step;
        whole_pos = st_feed_position(feed); /* (after the last step's micro-batches) */
        ST_GOTO(st_dist_step_begin(&dd));
        for (int64_t k = 0; k < accum; k++) {
            double wait;
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "data", "data wait");
            /* On the host mg.x and mg.y now are the ring slot; on a device the
             * compute stream waits for the batch's copy. */
            s = st_feed_next(feed, &wait);
            ses->read_stopped = s == ST_ERR_INTERRUPTED; /* (a stop while the batch did not come) */
            if (agree_reads) s = agree_read(ses, s, step);
            ST_GOTO(s);
            st_trace_end(trace, &mark);
            wait_total += wait;
            /* The global micro-batch index: rank r's k-th micro-batch is the
             * (r * accum + k)-th of the step, as for 1 rank accumulating
             * (k * world + r in deterministic mode: dist.h). */
            /* dropout: one seed a step, and the micro-batch's place in the
             * step's batch (graph.h), so that a sample's mask does not
             * depend on the micro-batch size (train.micro_batch_size auto
             * follows the memory free) */
            mg.g.dropout_seed = st_mix64(seed ^ st_mix64((uint64_t)step));
            mg.g.dropout_micro = (uint64_t)st_dist_micro_index(&dd, k);
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "step", "forward");
            if (fwd_writes) whole = -1;
            ST_GOTO(st_graph_forward(&mg.g));
            st_trace_end(trace, &mark);
            ST_GOTO(st_dist_micro_begin(&dd, &mg.g, k));
            /* optim.offload on one rank: the gradients' copies during the
             * last micro-step's backward, when nothing but a clip comes
             * between it and the update (no loss scale to check, nothing to
             * reduce) */
            bool early = false;
            if (k == accum - 1 && ses->world == 1 && !sc.enabled && !dd.deterministic)
                ST_GOTO(st_optim_offload_arm(&opt, &m->params, &mg.g, &early));
            if (early) whole = -1; /* (the host's update starts during backward) */
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "step", "backward");
            /* fp16: the loss gradient times the loss scale (1 otherwise). */
            const st_status bs = st_graph_backward(&mg.g, st_dist_backward_seed(&dd) * sc.scale);
            if (early) mg.g.backward_hook = NULL, mg.g.backward_hook_ctx = NULL;
            ST_GOTO(bs);
            st_trace_end(trace, &mark);
            ST_GOTO(st_dist_micro_end(&dd, &mg.g, k));
            ST_GOTO(st_feed_done(feed)); /* after backward (checkpointing reads mg.x again) */
            /* After backward (which leaves it as it is); on a device a
             * kernel queued after it, no wait */
            ST_GOTO(st_loss_sum_add(&ls, mg.loss->data));
        }
        ST_GOTO(st_loss_sum_step_end(&ls, step + 1));
        const bool line = (step + 1) % c->log.every == 0 || step + 1 == steps;
        const bool every = c->train.checkpoint_every > 0 && (step + 1) % c->train.checkpoint_every == 0;
        const bool eval_due =
            c->train.eval_every > 0 && (step + 1) % c->train.eval_every == 0 && step + 1 < steps;
        /* (owed from here until it ends: a checkpoint of the step saved before then, a st_run_rescue after an
         * error in the step's end, says so) */
        if (eval_due && ses->has_val && (ses->rank == 0 || ses->eval_shared)) ses->eval_owed_at = step + 1;
        const bool sample_due =
            c->log.sample_every > 0 && ((step + 1) % c->log.sample_every == 0 || step + 1 == steps);
        whole = -1;
        mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "optim", "optimizer");
        const int32_t optim_span = st_trace_gpu_begin(trace, ST_TRACE_STREAM_COMPUTE);
        bool skip; /* fp16: an overflow on any rank skips the step on every rank */
        int64_t own_lo, own_hi; /* (the host's check and unscale: this rank's gradients under ZeRO) */
        st_dist_range(&dd, &own_lo, &own_hi);
        ST_GOTO(st_scaler_check(&sc, &m->params, own_lo, own_hi, ses->comm, &skip));
        double lr = st_lr_at(c, step, steps);
        bool norm_read = false; /* this step's norm read to the host (a stop's line shows null without) */
        if (!skip) {
            /* The norm before clipping: needed when clipping, else only for a
             * logged line (on every rank: under ZeRO it is a collective). */
            /* On a device the norm and the clip stay there (the whole
             * gradient's, or the shards' summed), outside deterministic mode. */
            if (dev && !dd.deterministic) {
                /* A norm read now that is not finite stops the run before
                 * the update: a logged one, and offloaded with a clip every
                 * one (read anyway, or the host's update waits for it). A
                 * clip's norm not read halts the updates on the device (the
                 * guard: st_optim_update), to be read with the loss.
                 * (Offloaded, armed, without a clip: read after the update,
                 * the weights checked before a checkpoint.) */
                grad_norm = 0;
                const bool want = line || (opt.off && c->optim.grad_clip > 0);
                ST_GOTO(st_optim_clip(&opt, &m->params, c->optim.grad_clip, want ? &grad_norm : NULL,
                                      st_dist_sumsq_across, &dd));
                norm_read = want;
                if (!isfinite(grad_norm)) ST_GOTO(grads_not_finite(ses, &ls, step + 1, grad_norm));
            } else {
                norm_read = c->optim.grad_clip > 0 || line;
                if (norm_read) ST_GOTO(st_dist_grad_norm(&dd, &grad_norm));
                if ((c->optim.grad_clip > 0 || line) && !isfinite(grad_norm))
                    ST_GOTO(grads_not_finite(ses, &ls, step + 1, grad_norm));
                if (c->optim.grad_clip > 0 && grad_norm > c->optim.grad_clip)
                    ST_GOTO(st_dist_grad_scale(&dd, (float)(c->optim.grad_clip / (grad_norm + 1e-6))));
            }
            ST_GOTO(st_optim_update(&opt, &m->params, lr, step + 1));
        } else {
            grad_norm = NAN; /* (its gradients overflowed: a line shows null, not an earlier step's norm) */
        }
        ST_GOTO(st_dist_step_end(&dd)); /* (ZeRO: the weights all-gathered) */
        st_trace_gpu_end(trace, optim_span, ST_TRACE_STREAM_COMPUTE, ST_TRACE_TID_GPU, "optim", "optimizer");
        st_trace_end(trace, &mark);
        /* The loss comes back every step on the host (it is there); on a
         * device on the first step (first_loss), logged lines, checkpoint and
         * evaluation steps, and the last: the same steps on every rank, so a
         * NaN loss stops the run before a checkpoint or an evaluation sees
         * the weights after it (weights this step's update made non-finite
         * while its loss was finite are looked at before a checkpoint,
         * st_run_weights_finite_at). After the update is queued: on a device the host would
         * otherwise wait for backward's end before it, and an offloaded
         * update's host arithmetic would no longer overlap backward. A stop
         * reads before its checkpoint (below). */
        const bool read_now = !dev || step == start || line || every || eval_due || step + 1 == steps;
        double step_loss = 0; /* the steps' loss since the last read, when read */
        int64_t read_n = 0;
        if (read_now) {
            ST_GOTO(read_loss(ses, &ls, &step_loss, &read_n));
            last_loss = read_n > 0 ? step_loss / (double)read_n : last_loss;
        }
        const double dt_step = st_now() - t0;
        step_times[(step - start) % times_kept] = dt_step;
        t_train += dt_step;
        if (step == start) r->first_loss = step_loss; /* (a read of this step alone) */
        win.loss += step_loss;                        /* 0 when not read */
        win.n++;
        r->steps = step + 1;
        whole = step + 1; /* (a non-finite loss was read above) */
        whole_pos = st_feed_position(feed);
        r->samples = (r->steps - start) * c->train.batch_size;
        double rate = (double)r->samples / t_train;
        st_gpu_sample gpu = {0};
        if (line && gm.dev && step + 1 - gpu_last >= c->log.gpu_interval) {
            unsigned long long slowed = 0;
            bool known;
            if (ses->rank == 0) {
                st_gpu_monitor_sample(&gm, &gpu);
                st_gpu_sample_format(&gpu, prog.gpu, sizeof prog.gpu);
                known = gpu.has_clocks, slowed = gpu.slowed;
            } else {
                known = st_gpu_monitor_clocks(&gm, &slowed);
            }
            if (known) say_slowdown(ses, &slow, slowed, step + 1, false);
            slow_known |= known;
            gpu_last = step + 1;
        }
        line_facts facts = {step + 1,
                            steps_per_epoch,
                            tokens_per_sample,
                            lr,
                            norm_read ? grad_norm : NAN,
                            flops_step,
                            t_train,
                            wait_total,
                            lm,
                            &sc,
                            &dd,
                            dist ? ddp : NULL,
                            gpu};
        if (line) ST_GOTO(own_error(ses, log_step_line(ses, met, &win, &facts, r), &own, own_why, sizeof own_why));
        st_progress_step(&prog, step + 1, line ? r->train_loss : last_loss, lr,
                         lm ? rate * (double)tokens_per_sample : rate, lm ? "tok/s" : "samples/s", line);
        if (eval_due && (ses->rank == 0 || ses->eval_shared)) {
            st_progress_end(&prog);
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "eval", "eval");
            s = eval_and_report(ses, opts, r, step + 1, met);
            if (s == ST_OK) ses->eval_owed_at = 0;
            /* A stop during it (every rank that shared it knows): the run
             * stops after this step, below, the asking rank's flag still
             * set; a run resumed from the step's checkpoint makes the
             * evaluation first. */
            eval_cut = s == ST_ERR_INTERRUPTED;
            if (eval_cut) {
                st_clear_error();
                s = ST_OK;
            }
            if (!ses->agreed_read)
                s = own_error(ses, s, &own, own_why, sizeof own_why); /* (rank 0's report) */
            if (s != ST_OK) goto fail; /* (a shared evaluation's failure: every rank has it) */
            st_trace_end(trace, &mark);
        }
        if (sample_due && !eval_cut) { /* (a stop cut the evaluation short: every rank stops below) */
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "sample", "sample");
            st_status fault = ST_OK;
            ST_GOTO(st_run_sample(ses, opts, &prog, step + 1, &fault)); /* (fails only as every rank does) */
            ST_GOTO(own_error(ses, fault, &own, own_why, sizeof own_why));
            st_trace_end(trace, &mark);
        }
        /* A stop asked of any rank stops every rank after the same step
         * (the others wait here for rank 0's evaluation). The same
         * all-reduce says whether any rank is still writing a pending
         * asynchronous checkpoint: when none is, every rank commits it now. */
        /* The third flag: train.checkpoint_every_s has passed since the
         * last checkpoint on some rank's clock (every rank then saves). */
        const bool time_due =
            c->train.checkpoint_every_s > 0 && st_now() - t_saved >= c->train.checkpoint_every_s;
        /* The fourth: a rank's own error after the step (own_error), as its
         * rank + 1: every rank stops here, and they save together. */
        const int asked = st_session_stop_signal(ses); /* (the largest signal: every rank names it) */
        float flags[4] = {(float)asked, st_ckpt_async_busy(pending) ? 1.0f : 0.0f, time_due ? 1.0f : 0.0f,
                          own != ST_OK ? (float)(ses->rank + 1) : 0.0f};
        const double wait_more =
            (eval_due ? eval_estimate_s(ses, rate) : 0) + (sample_due ? sample_estimate_s(ses) : 0);
        if (dist && wait_more > 0)
            st_comm_set_timeout(ses->comm, (double)c->dist.timeout_s + wait_more,
                                "dist.timeout_s (the wait for rank 0's evaluation or text sample adds its "
                                "estimate)");
        if (dist)
            ST_GOTO(st_comm_all_reduce_sync(ses->comm, flags, flags, 4, ST_COMM_F32, ST_COMM_MAX, "stop"));
        if (dist && wait_more > 0) st_comm_set_timeout(ses->comm, 0, NULL);
        if (flags[3] > 0) {
            s = own_stopped(ses, own, own_why, flags[3], step + 1);
            goto fail;
        }
        if (pending && flags[1] == 0)
            ST_GOTO(commit_pending(ses, opts, &pending, &pending_stall, r, step + 1, met, &prog, trace, &own,
                                   own_why, sizeof own_why));
        const float stop = flags[0];
        stopped = stop > 0 && step + 1 < steps;
        if (stopped) r->stop_signal = (int)stop;
        const bool timed = flags[2] > 0;
        if ((stopped || timed) && !read_now) { /* before the checkpoint (every rank agreed on it) */
            ST_GOTO(read_loss(ses, &ls, &step_loss, &read_n));
            win.loss += step_loss;
        }
        if (stopped) stop_line(ses, met, &win, &facts, r); /* (its steps since the last line) */
        /* the algorithms model.matmul_tune timed in this step, kept for a resumed run (before its
         * checkpoint: a run resumed from it finds them) */
        if (ses->save && !ses->out_dir_lost && st_matmul_algos_due(ses->dev)) { /* (watched: storage) */
            char what[ST_CFG_STR + 64];
            snprintf(what, sizeof what, "writing the timed matrix-product algorithms to %s",
                     c->train.out_dir);
            st_watch_begin(ses->store_watch, what);
            st_matmul_algos_write(ses->dev, c->train.out_dir, ses->rank);
            st_watch_end(ses->store_watch);
        }
        /* Under ZeRO every rank writes its optimizer shard; else rank 0 alone
         * while the others wait in st_ckpt_save. A periodic checkpoint with
         * train.checkpoint_async is written while training goes on; one
         * still pending is committed first (waiting for its writer). */
        bool saved_now = false; /* this step's checkpoint written (not asynchronously) */
        if (ses->save && (stopped || every || timed || step + 1 == steps)) { /* every rank: st_ckpt_save */
            if (pending)
                ST_GOTO(commit_pending(ses, opts, &pending, &pending_stall, r, step + 1, met, &prog, trace,
                                       &own, own_why, sizeof own_why));
            ST_GOTO(st_run_weights_finite_at(ses, step + 1, r->checkpoint));
            st_run_ckpt_at(&ck, step + 1, st_feed_position(feed), &sc, ses->eval_owed_at);
            saved_step = step + 1;         /* (a st_run_rescue would not write it again, saved or not) */
            ST_GOTO(st_out_dir_held(ses)); /* (rank 0: the others then wait in the save, ended with it) */
            mark = st_trace_begin(trace, ST_TRACE_TID_STEP, "checkpoint", "checkpoint");
            const double t_ck = st_now();
            if (c->train.checkpoint_async && !stopped && step + 1 < steps) {
                ST_GOTO(st_ckpt_save_async(&pending, c, m, &opt, &ck, &lay));
                pending_stall = st_now() - t_ck;
                st_trace_end(trace, &mark);
            } else {
                char got[sizeof r->checkpoint] = ""; /* (set once committed) */
                s = st_ckpt_save(c, m, &opt, &ck, &lay, got, sizeof got);
                if (got[0]) snprintf(r->checkpoint, sizeof r->checkpoint, "%s", got);
                const bool last = step + 1 == steps;
                if (s != ST_OK) { /* (every rank has the outcome: they report it alike) */
                    save_failed(s, c, ck.step, got, last);
                    ses->agreed_error = ses->world > 1 && !st_comm_failed(ses->comm);
                    if (!last || ses->out_dir_lost || (ses->world > 1 && !ses->agreed_error)) goto fail;
                    /* The last step's: the run ends as it would, its final
                     * evaluation and weights made (a disk too full for a
                     * checkpoint may hold the weights, a third of it under
                     * AdamW), and then this is its error (run's end). */
                    ses->last_ckpt_err = s;
                    snprintf(ses->last_ckpt_why, sizeof ses->last_ckpt_why, "%s", st_last_error());
                    st_clear_error();
                }
                st_trace_end(trace, &mark);
                const double dt = st_now() - t_ck;
                if (ses->rank == 0 && ses->last_ckpt_err == ST_OK)
                    ST_GOTO(own_error(ses,
                                      st_metrics_checkpoint_write(met, step + 1, step + 1, false, dt, dt),
                                      &own, own_why, sizeof own_why));
                if (ses->rank == 0 && ses->last_ckpt_err == ST_OK && !opts->quiet && !prog.bar) {
                    fprintf(ses->out, "saved checkpoint %s\n", r->checkpoint);
                    out_flush(ses);
                }
                saved_now = ses->last_ckpt_err == ST_OK;
            }
            t_saved = st_now(); /* (a save slower than the interval does not make the next step's) */
        }
        /* A stop that came while this step's checkpoint was written: that
         * checkpoint is the stop's (the run trained a step more and saved
         * that again, twice the time to stop). */
        if (saved_now && !stopped && step + 1 < steps) {
            ST_GOTO(agree_stop(ses, "stop after the checkpoint", &r->stop_signal));
            stopped = r->stop_signal > 0;
            if (stopped) stop_line(ses, met, &win, &facts, r);
        }
        st_trace_end(trace, &step_mark);
        if (trace && !tr.written && (step + 1 >= tr.last || step + 1 == steps || stopped)) {
            /* trace.json that cannot be written (rank 0's file), or the memory
             * to gather it (every rank's, agreed: st_trace_write), is not worth
             * the run: a warning */
            s = st_run_write_trace(ses, opts, &tr, &prog, start, step + 1);
            if (s == ST_ERR_IO || s == ST_ERR_NOMEM) {
                st_ticker_sayf("scaletrain: warning: %s; the run goes on without its profiler trace\n",
                               st_last_error());
                st_clear_error();
                s = ST_OK;
            }
            ST_GOTO(s);
        }
        /* Under mpirun, the first rank to exit non-zero gets the others
         * killed: no rank leaves before rank 0's checkpoint is on disk. */
        if (stopped && dist) ST_GOTO(st_comm_barrier_sync(ses->comm, "checkpoint saved"));
        if (stopped) break;
    }
    st_progress_end(&prog);
    /* A rank's own error of the last step (rank 0's checkpoint line), or of
     * the step a stop saved, with no stop all-reduce after it: every rank
     * learns it here, rather than the others waiting in the next
     * collective until the watchdog. */
    if (dist) {
        float flag = own != ST_OK ? (float)(ses->rank + 1) : 0.0f;
        ST_GOTO(
            st_comm_all_reduce_sync(ses->comm, &flag, &flag, 1, ST_COMM_F32, ST_COMM_MAX, "the run's end"));
        if (flag > 0) {
            s = own_stopped(ses, own, own_why, flag, r->steps);
            goto fail;
        }
    }
    if (slow_known) say_slowdown(ses, &slow, slow.last, slow.last_step, true); /* (changes left unsaid) */
    r->device_stream_waits = st_device_stream_waits(dev) - waits0;
    const int64_t ran = r->steps > start ? r->steps - start : 0;
    r->seconds = t_train;
    r->samples_per_s = t_train > 0 ? (double)r->samples / t_train : 0;
    r->tokens = r->samples * tokens_per_sample;
    r->tokens_per_s = r->samples_per_s * (double)tokens_per_sample;
    r->gflops_per_s = t_train > 0 ? flops_step * (double)ran / t_train / 1e9 : 0;
    const int64_t timed = ran < times_kept ? ran : times_kept;
    r->step_ms_median = 1e3 * st_median(step_times, (size_t)timed);
#ifdef ST_HAVE_CUDA
    if (ses->dev) {
        r->attention_cudnn_calls = st_cuda_cudnn_calls(ses->dev);
        r->bias_grad_epilogues = st_cuda_bias_grad_epilogues(ses->dev);
        /* the fusions the products ran (graph.c fuse_gelu; their epilogues' algorithms found), not those
         * the graph marked: where cuBLASLt had none, the unfused products and the layers' own kernels ran
         * (the CPU fuses none) */
        for (int i = 0; i < mg.g.n_nodes; i++) {
            const st_node *nd = &mg.g.nodes[i];
            r->fused_gelu_fwd += nd->fwd_fused_ran && st_node_fuses(&mg.g, nd, "gelu");
            r->fused_residual += nd->fwd_fused_ran && st_node_fuses(&mg.g, nd, "add");
            r->fused_gelu_bwd += nd->bwd_fused_ran;
        }
        st_cuda_tune_stats ts;
        st_cuda_matmul_tune_stats(ses->dev, &ts);
        r->matmul_tuned = ts.tuned;
        r->matmul_tune_switched = ts.switched;
        r->matmul_tune_restored = ts.restored;
        r->matmul_tune_first_ms = ts.first_ms;
        r->matmul_tune_chosen_ms = ts.chosen_ms;
    }
#endif
    r->optim_offload_early = st_optim_offload_early(&opt);
    r->data_wait_s = wait_total;
    r->has_loss_scale = sc.enabled;
    r->loss_scale = sc.scale;
    r->skipped_steps = sc.skipped;
    r->skipped_steps_here = sc.skipped - skipped0;
    r->data_wait_fraction = t_train > 0 ? wait_total / t_train : 0;
    r->grad_bytes = st_dist_grad_nbytes(&dd);
    r->grad_peak_bytes = dd.grad_peak_nbytes > r->grad_bytes ? dd.grad_peak_nbytes : r->grad_bytes;
    if (dist) r->grad_syncs = ddp->syncs;
    if (dist && ddp->syncs) {
        r->comm_ms = r->steps > start ? 1e3 * ddp->wait_s / (double)(r->steps - start) : 0; /* (per step) */
        r->comm_overlap = ddp->span_s > 0 ? ddp->hidden_s / ddp->span_s : 0;
        r->first_bucket_lead_ms = 1e3 * ddp->hidden_s / (double)ddp->syncs;
        r->comm_hidden = ddp->busy_s > 0 ? ddp->busy_hidden_s / ddp->busy_s : 0;
    }
    if (dist && !stopped) { /* the replicas are identical (every rank learns the same answer) */
        bool agreed;
        s = st_agree_replicas(ses->comm, &m->params, r->steps, &agreed);
        ses->agreed_error = agreed;
        ST_GOTO(s);
        r->replicas_identical = true;
    }
    s = ST_OK;
    if (stopped) {
        ses->agreed_error = true; /* every rank stops after the same step */
        r->stop_said = ses->rank != 0; /* (rank 0 says it for all) */
        char name[16];
        s = st_fail(ST_ERR_INTERRUPTED,
                    "stopped by %s after step %lld of %lld%s%s%s; continue with --resume auto",
                    stop_name(r->stop_signal, name), (long long)r->steps, (long long)steps,
                    !eval_cut          ? ""
                    : r->checkpoint[0] ? " (during its evaluation, which the resumed run makes first)"
                                       : " (during its evaluation)",
                    r->checkpoint[0] ? ", checkpoint saved to " : "", r->checkpoint);
    }
fail:
    if (s == ST_ERR_INTERRUPTED && !r->stop_signal)
        r->stop_signal = ses->read_stop_signal; /* (agree_read's) */
    s = st_run_rescue(ses, s, &pending, whole, whole_pos, saved_step, &ck, &sc, &opt, &lay, &dd, &ls, r);
    if (s != ST_OK && s != ST_ERR_INTERRUPTED && gm.dev) { /* what the driver saw on the GPU, if anything */
        char xids[1024], why[4096];
        if (st_gpu_monitor_xids(&gm, xids, sizeof xids) > 0) {
            snprintf(why, sizeof why, "%s", st_last_error());
            s = st_fail(s, "%s (while it trained, the driver reported on this GPU: %s)", why, xids);
        }
    }
    st_error_kept kept; /* (the cleanup below may fail too: after a GPU fault, every free does) */
    st_error_keep(&kept, s);
    st_ckpt_async_abandon(&pending); /* (committed before every normal exit) */
    mg.g.node_hook = NULL;
    st_gpu_monitor_close(&gm);
    st_trace_free(&tr);
    st_dist_free(&dd);
    st_loss_sum_free(&ls);
    /* the loader before its sampler; workers it left waiting on storage
     * keep the training set mapped (st_session_close) */
    if (st_feed_free(feed)) ses->train_in_use = true;
    st_sampler_free(smp);
    free(step_times);
    st_optim_free(&opt);
    st_model_graph_free(&mg);
    return st_error_restore(&kept);
}

/* A run of several ranks that failed, before its session closes. An error
 * this rank alone met would leave the others waiting in a collective (or in
 * MPI_Finalize's fence) until the watchdog, and this rank's message lost:
 * end them all now, naming it. One every rank met alike (agreed_error: a
 * configuration difference) each returns, reported (opts) while the ranks
 * can still wait for each other, so that no rank's line is lost to the
 * launcher ending the others when the first exits. (A stop by a signal is
 * not an error: the caller says it its own way.) */
static void end_failed_ranks(st_session *ses, const st_run_opts *opts, st_status s) {
    if (s == ST_OK || ses->world < 2) return;
    /* (a broken communicator: whatever the ranks agreed before, this rank
     * cannot know that the others learnt of the failure, nor report with
     * them: it ends them) */
    if (!ses->agreed_error || st_comm_failed(ses->comm)) {
        st_comm_abort(ses->comm, st_last_error());
    } else if (s != ST_ERR_INTERRUPTED && ses->comm && opts && opts->report_agreed_error) {
        opts->report_agreed_error(s);
        (void)st_comm_barrier_sync(ses->comm,
                                   "error report"); /* (a failure here: the report is out already) */
    }
}

st_status st_train(st_config *cfg, const st_run_opts *opts, st_run_result *res) {
    st_run_opts dflt = {0}, mine;
    if (!opts) opts = &dflt;
    memset(res, 0, sizeof *res);
    st_session ses;
    st_metrics met = {0};
    st_status s;
    ST_GOTO(st_session_open(&ses, cfg, opts, false));
    char after[ST_CFG_STR + 160];
    snprintf(
        after, sizeof after,
        "the checkpoints in %s/ckpt are whole (each written under a temporary name first) and --resume auto "
        "continues from the latest",
        cfg->train.out_dir);
    start_store_watch(&ses, after);
    /* The ranks share each evaluation: the weights are the same everywhere;
     * batch-norm running statistics are rank 0's, sent to the others first
     * (st_session_evaluate). */
    ses.eval_shared = ses.world > 1;
    ses.save = opts->save;
    if (ses.rank != 0) { /* rank 0 speaks and saves; the others only report errors */
        mine = *opts;
        mine.quiet = true;
        mine.json = false;
        mine.save = false;
        opts = &mine;
    }
    if (ses.world > 1) ST_GOTO(agree_run_opts(&ses, opts));
    ST_GOTO(st_out_dir_check(&ses, opts));
    /* --init's weights replace every tensor (st_model_load refuses a file
     * that lacks one): no random values are made first; and a checkpoint
     * replaces both (defer_init) */
    ST_GOTO(defer_init(&ses, opts));
    int64_t init_step;
    char init_path[4096];
    if (!ses.init_deferred && opts->init)
        ST_GOTO(load_init(&ses, opts, &init_step, init_path, sizeof init_path));
    else if (!ses.init_deferred)
        ST_GOTO(st_params_init(&ses.model->params,
                               (uint64_t)cfg->train.seed)); /* on a device: made on the host, copied */
    /* Only metrics.jsonl's mfu needs it: on a GPU its datasheet or
     * architecture peak for the run's precision, on the CPU a short sgemm. */
    st_device_props dp;
    if (ses.rank == 0 && opts->save && cfg->log.peak_gflops < 0 && ses.dev &&
        st_device_props_get(ses.dev, &dp) == ST_OK) {
        char why[ST_CFG_NOTE];
        const double f = st_gpu_peak(dp.name, dp.cc_major, dp.cc_minor, dp.sms, dp.clock_khz,
                                     strcmp(cfg->precision, "fp32") != 0, why, sizeof why);
        if (f > 0) cfg->log.peak_gflops = round(f / 1e8) / 10;
        st_config_mark_auto(cfg, "log.peak_gflops", why);
    }
    if (ses.rank == 0 && opts->save && cfg->log.peak_gflops < 0 && !ses.dev) {
        char why[ST_CFG_NOTE];
        double f;
        int n;
        /* (the planner's measure of the CPU; one that fails, out of memory
         * for its matrices, costs only the mfu: rank 0 alone here, it must
         * not leave the others waiting in the first step) */
        const st_status cal = st_device_calibrate_cpu(&f, &n);
        if (cal == ST_OK) {
            cfg->log.peak_gflops = round(f / 1e8) / 10;
            snprintf(why, sizeof why, "measured: fastest %d^3 sgemm on %d thread%s", n, ses.threads,
                     ses.threads == 1 ? "" : "s");
            st_config_mark_auto(cfg, "log.peak_gflops", why);
        } else {
            st_ticker_sayf(
                "scaletrain: warning: the CPU's peak was not measured, so metrics.jsonl has no mfu "
                "(set log.peak_gflops to have one): %s\n",
                st_last_error());
        }
    }
    st_run_print_header(&ses, opts);
    ST_GOTO(train_loop(&ses, opts, res, &met));
    /* every st_device_alloc block (the arenas) and the cuBLASLt workspace,
     * at the most; 0 on the host */
    st_device_mem dm;
    if (ses.dev && st_device_memory(ses.dev, &dm) == ST_OK) res->device_mem_peak_bytes = dm.peak;
    snprintf(res->sample_device, sizeof res->sample_device, "%s", ses.sample_device);
    /* The final evaluation (shared by the ranks, or rank 0's), then rank 0
     * writes the weights (the replicas are identical), the others waiting
     * for the outcome, as long as an evaluation and a write of the weights
     * may take. */
    if (ses.world > 1)
        st_comm_set_timeout(
            ses.comm, st_ckpt_wait_limit(cfg, ses.model, NULL, 0) + eval_estimate_s(&ses, res->samples_per_s),
            "train.checkpoint_timeout_s or dist.timeout_s (the wait for rank 0's evaluation and "
            "weights adds an estimate of the evaluation)");
    /* (a run resumed at its last step trained nothing: the evaluation of
     * those weights is printed, and written to the metrics only when the run
     * that reached the step did not write it) */
    const bool evaluated = res->steps == res->start_step && met.eval_at_resume;
    /* (an evaluation that failed, its data or its metrics line: the weights
     * are written all the same, and the error says so) */
    st_status ev = ses.rank == 0 || ses.eval_shared
                       ? eval_and_report(&ses, opts, res, res->steps, evaluated ? NULL : &met)
                       : ST_OK;
    /* A stop during it (every rank has it: the evaluation is shared): the
     * weights are written all the same, and a run resumed at the last step
     * makes the evaluation. */
    const bool ev_stopped = ev == ST_ERR_INTERRUPTED;
    char ev_sig_name[16];
    const char *ev_sig = "a signal";
    if (ev_stopped) {
        st_clear_error();
        int sig = 0;
        ev = agree_stop(&ses, "stop during the final evaluation", &sig);
        ev_sig = stop_name(sig, ev_sig_name);
        res->stop_signal = sig;
    }
    char ev_why[4096] = "", wrote[ST_CFG_STR + 32] = ""; /* (wrote: the weights' path, once written) */
    if (ev != ST_OK) snprintf(ev_why, sizeof ev_why, "%s", st_last_error());
    s = ST_OK;
    float *wdata = NULL, *wbuf = NULL; /* sharded masters: every rank gathers the whole weights */
    if (ses.save && ses.model->params.masters_sharded) { /* (ses.save: every rank's) */
        st_status g = st_zero_copy_arenas(ses.model, ses.comm, &wdata, &wbuf);
        if (s == ST_OK) s = g;
    }
    if (ses.rank == 0) {
        if (s == ST_OK && opts->save) {
            char path[ST_CFG_STR + 32], what[ST_CFG_STR + 64];
            snprintf(path, sizeof path, "%s/model.safetensors", cfg->train.out_dir);
            snprintf(what, sizeof what, "writing the weights to %s", path);
            s = st_out_dir_held(&ses);
            st_watch_begin(ses.store_watch, what);
            if (s == ST_OK && (s = st_mkdirs(cfg->train.out_dir)) != ST_OK)
                st_fail_context(s, "train.out_dir: ");
            if (s == ST_OK)
                s = wdata ? st_model_save_host(ses.model, wdata, wbuf, path) : st_model_save(ses.model, path);
            st_watch_end(ses.store_watch);
            if (s != ST_OK && res->checkpoint[0] && !ses.out_dir_lost &&
                ses.last_ckpt_err == ST_OK) { /* (the last step's checkpoint holds them) */
                char why[4096];
                snprintf(why, sizeof why, "%s", st_last_error());
                s = st_fail(s,
                            "%s; the weights are whole in the checkpoint %s: once this is fixed, --resume "
                            "auto writes them (or --init reads the checkpoint)",
                            why, res->checkpoint);
            }
            if (s == ST_OK && !opts->quiet) fprintf(ses.out, "saved weights to %s\n", path);
            if (s == ST_OK) snprintf(wrote, sizeof wrote, "%s", path);
        }
    }
    /* (a stop during the final evaluation: every rank learns whether rank 0's weights were written
     * before it says how it ended, so that they end alike) */
    if (ev_stopped && ev == ST_OK) s = st_session_agree_outcome(&ses, s, "the final weights");
    /* The error said: the last step's checkpoint's first, then the
     * evaluation's, then where the weights are or what failed after it. */
    if (ses.last_ckpt_err != ST_OK) {
        char then[4096], evs[4200] = "";
        snprintf(then, sizeof then, "%s", s == ST_OK ? "" : st_last_error());
        if (ev != ST_OK) snprintf(evs, sizeof evs, "; the final evaluation failed too: %s", ev_why);
        if (ev == ST_OK && ev_stopped)
            snprintf(evs, sizeof evs, "; the final evaluation was stopped by %s", ev_sig);
        s = s != ST_OK ? st_fail(ses.last_ckpt_err, "%s%s; the final weights were not written either: %s",
                                 ses.last_ckpt_why, evs, then)
            : wrote[0]
                ? st_fail(ses.last_ckpt_err,
                          "%s%s; the final weights were written all the same, to %s (--init reads them)",
                          ses.last_ckpt_why, evs, wrote)
                : st_fail(ses.last_ckpt_err, "%s%s", ses.last_ckpt_why, evs);
    } else if (ev != ST_OK) {
        char then[4096];
        snprintf(then, sizeof then, "%s", s == ST_OK ? "" : st_last_error());
        s = s != ST_OK ? st_fail(ev, "%s (and then the final weights were not written: %s)", ev_why, then)
            : wrote[0] ? st_fail(ev, "%s (the final weights were written all the same, to %s)", ev_why, wrote)
                       : st_fail(ev, "%s", ev_why);
    } else if (ev_stopped && s != ST_OK) {
        char then[4096];
        snprintf(then, sizeof then, "%s", st_last_error());
        s = st_fail(s, "%s (after the final evaluation was stopped by %s)", then, ev_sig);
    } else if (ev_stopped) {
        res->stop_said = ses.rank != 0;
        s = st_fail(ST_ERR_INTERRUPTED,
                    "stopped by %s during the final evaluation, after the last step (%lld)%s%s%s", ev_sig,
                    (long long)res->steps, wrote[0] ? "; the final weights were written to " : "", wrote,
                    /* (the last step's checkpoint: saved, or the one this run resumed at) */
                    res->checkpoint[0] || (res->start_step > 0 && res->steps == res->start_step)
                        ? "; --resume auto makes the evaluation"
                        : "");
    }
    st_free_aligned(wdata);
    st_free_aligned(wbuf);
    s = st_session_agree_outcome(&ses, s, "the final evaluation and weights");
    if (ses.world > 1) st_comm_set_timeout(ses.comm, 0, NULL);
    ST_GOTO(s);
    if (!opts->quiet) {
        const bool lm = ses.train.kind == ST_DATA_TOKENS;
        if (res->steps > 0 && res->steps == res->start_step) /* resumed at its last step: no rates to show */
            fprintf(ses.out,
                    "done: nothing to train, the checkpoint is at step %lld of train.steps %lld "
                    "(raise train.steps to train on)",
                    (long long)res->steps, (long long)cfg->train.steps);
        else {
            /* resumed: the time and rates are this process's steps' */
            char here[96] = "";
            if (res->start_step > 0)
                snprintf(here, sizeof here, " (%lld here, resumed at step %lld)",
                         (long long)(res->steps - res->start_step), (long long)res->start_step);
            fprintf(ses.out, "done: %lld steps%s in %.1f s, %.0f %s, %.1f GFLOP/s, train loss %.4f",
                    (long long)res->steps, here, res->seconds, lm ? res->tokens_per_s : res->samples_per_s,
                    lm ? "tokens/s" : "samples/s", res->gflops_per_s, res->train_loss);
            fprintf(ses.out, ", data wait %.1f%%", 100.0 * res->data_wait_fraction);
            if (res->skipped_steps_here > 0) /* (fp16: the weights did not change at those) */
                fprintf(ses.out, ", %lld of them skipped (fp16 overflow)", (long long)res->skipped_steps_here);
        }
        if (res->has_accuracy)
            fprintf(ses.out, ", test accuracy %.2f%%", 100.0 * res->eval_accuracy);
        else if (res->has_eval)
            fprintf(ses.out, ", eval loss %.4f", res->eval_loss);
        if (res->device_mem_peak_bytes > 0)
            fprintf(ses.out, ", device memory peak %.0f MiB", (double)res->device_mem_peak_bytes / (1 << 20));
        fprintf(ses.out, "\n");
    }
    const int64_t ran = res->steps - res->start_step;
    if (ses.rank == 0 && opts->quiet && res->steps > 0 && res->steps == res->start_step && opts->save)
        /* (said with --quiet too, on standard error: the weights written are the checkpoint's) */
        fprintf(
            stderr,
            "scaletrain: note: nothing to train: the checkpoint is at step %lld of train.steps %lld (raise "
            "train.steps to train on); model.safetensors holds its weights\n",
            (long long)res->steps, (long long)cfg->train.steps);
    if (ses.rank == 0 && ran > 0 && res->skipped_steps_here == ran) /* (said with --quiet too: nothing trained) */
        fprintf(stderr,
                "scaletrain: warning: every one of this run's %lld steps was skipped: its fp16 gradients "
                "overflowed at every loss scale tried (%g at the end), so the weights did not change; lower "
                "optim.loss_scale, or train in bf16 (precision: bf16)\n",
                (long long)ran, res->loss_scale);
    if (opts->json) st_run_print_json(ses.out, res, ses.train.kind == ST_DATA_TOKENS, true);
    ses.json = opts->json;
    out_flush(&ses);
    s = ST_OK;
fail:
    end_failed_ranks(&ses, opts, s);
    st_error_kept kept;
    st_error_keep(&kept, s);
    if (st_metrics_close(&met) != ST_OK) { /* (rank 0's; the run's outcome stays its own) */
        fprintf(stderr, "scaletrain: warning: %s\n", st_last_error());
        st_clear_error();
    }
    const st_status sc = st_session_close(&ses);
    return s != ST_OK ? st_error_restore(&kept) : sc;
}

st_status st_evaluate(st_config *cfg, const st_run_opts *opts, st_run_result *res) {
    st_run_opts mine;
    memset(res, 0, sizeof *res);
    if (!opts || !opts->init) return st_fail(ST_ERR_ARG, "evaluation needs weights: pass --init WEIGHTS");
    st_session ses;
    st_status s;
    ST_GOTO(st_session_open(&ses, cfg, opts, true));
    start_store_watch(&ses, "an evaluation writes nothing");
    ses.eval_shared = ses.world > 1; /* the same weights everywhere: each rank its share (as in training) */
    if (ses.rank != 0) {             /* rank 0 speaks */
        mine = *opts;
        mine.quiet = true;
        mine.json = false;
        opts = &mine;
    }
    int64_t step;
    char loaded[4096];
    ST_GOTO(load_init(&ses, opts, &step, loaded, sizeof loaded));
    if (ses.world > 1) { /* the shares are summed: the ranks must evaluate the same weights and data */
        int64_t vn = ses.val.n;
        int diff;
        ST_GOTO(st_agree_first_difference(ses.comm, &vn, 1, "validation samples", &diff));
        if (diff >= 0) {
            char n[32];
            snprintf(n, sizeof n, "%lld", (long long)vn);
            s = st_agree_report(ses.comm, "the ranks read different validation data",
                                "validation samples (data.val)", n,
                                "every rank must read the same data.val (a node-local copy must be whole)");
            ses.agreed_error = true;
            goto fail;
        }
        char desc[ST_AGREE_DESC_MAX];
        const size_t len = strlen(loaded); /* (a long path: its end says the most) */
        snprintf(desc, sizeof desc, "%s%s", len > 100 ? "..." : "", loaded + (len > 100 ? len - 100 : 0));
        if (step >= 0)
            snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " (step %lld)", (long long)step);
        s = st_agree_weights(ses.comm, &ses.model->params, desc);
        ses.agreed_error = s == ST_ERR_CONFIG; /* a difference: every rank has it */
        ST_GOTO(s);
    }
    double t0 = st_now();
    s = eval_and_report(&ses, opts, res, step, NULL);
    if (s == ST_ERR_INTERRUPTED) { /* a stop (every rank has it: the evaluation is shared) */
        st_clear_error();
        int sig = 0;
        ST_GOTO(agree_stop(&ses, "stop during the evaluation", &sig));
        char name[16];
        ses.agreed_error = true;
        res->stop_said = ses.rank != 0;
        res->stop_signal = sig;
        s = st_fail(ST_ERR_INTERRUPTED, "stopped by %s during the evaluation (an evaluation writes nothing)",
                    stop_name(sig, name));
    }
    ST_GOTO(s);
    double dt = st_now() - t0;
    res->samples = st_session_eval_count(&ses, cfg->train.eval_batch_size); /* (train.eval_steps: fewer) */
    res->eval_batch_size = cfg->train.eval_batch_size;
    res->seconds = dt;
    res->samples_per_s = dt > 0 ? (double)res->samples / dt : 0;
    res->tokens_per_s = res->samples_per_s * (double)(ses.val.kind == ST_DATA_TOKENS ? ses.val.seq_len : 0);
    st_device_mem dm;
    if (ses.dev && st_device_memory(ses.dev, &dm) == ST_OK) res->device_mem_peak_bytes = dm.peak;
    if (opts->json) st_run_print_json(ses.out, res, ses.val.kind == ST_DATA_TOKENS, false);
    ses.json = opts->json;
    out_flush(&ses);
    s = ST_OK;
fail:
    end_failed_ranks(&ses, opts, s);
    st_error_kept kept;
    st_error_keep(&kept, s);
    const st_status sc = st_session_close(&ses);
    return s != ST_OK ? st_error_restore(&kept) : sc;
}
