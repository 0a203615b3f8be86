/* A run's checkpoints as its step loop takes them (run_ckpt.h): the state
 * each records, the weights' check before one, and the rescue save of a
 * failing run. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/atomic_file.h"
#include "core/text.h"
#include "core/ticker.h"
#include "out_dir.h"
#include "run_ckpt.h"

/* The checkpoint's position: after `step` steps, the sampler at pos, the
 * loss scaler as it stands, and whether the evaluation due at the step was
 * left unmade (owed: the step of one that began and did not end). */
void st_run_ckpt_at(st_ckpt_state *ck, int64_t step, st_sampler_pos pos, const st_scaler *sc, int64_t owed) {
    ck->step = step;
    ck->eval_owed = owed > 0 && owed == step;
    ck->pos = pos;
    ck->loss_scale = sc->enabled ? sc->scale : 0;
    ck->scale_good_steps = sc->good_steps;
    ck->skipped_steps = sc->skipped;
}

/* Whether this rank's weights are all finite: its masters (their shard when
 * sharded, where a device's `data` is NULL); and its buffers (batch-norm
 * running statistics, which a load refuses as it refuses weights). */
static st_status own_weights_finite(const st_session *ses, bool *finite, bool *buffers_finite) {
    const st_params *pp = &ses->model->params;
    const int64_t lo = pp->masters_sharded ? pp->master_lo : 0,
                  hi = pp->masters_sharded ? pp->master_hi : pp->arena_count;
    *buffers_finite = true;
    ST_TRY(st_device_all_finite(ses->dev, st_params_master(pp, lo), (size_t)(hi - lo), finite));
    if (pp->buffer_count > 0 && pp->buffers)
        ST_TRY(st_device_all_finite(ses->dev, pp->buffers, (size_t)pp->buffer_count, buffers_finite));
    return ST_OK;
}

/* Before the checkpoint of step `step` (every rank, together): the loss is
 * read before each checkpoint, but it is the loss before the step's update.
 * An update that made a weight non-finite while that loss was finite (a
 * gradient that overflowed) stops the run here, with no checkpoint: saved,
 * it would become `latest`, which a resume's load refuses (weights.c), and
 * train.keep_checkpoints would delete the good ones behind it. Every rank
 * learns it (the shards of ZeRO differ). `last`: the last committed
 * checkpoint, "" if none. */
st_status st_run_weights_finite_at(st_session *ses, int64_t step, const char *last) {
    bool finite = false, stats = false;
    const st_status f = own_weights_finite(ses, &finite, &stats);
    if (ses->world == 1) ST_TRY(f);
    if (ses->world > 1) {
        /* -1: a rank could not look; 0: a weight is not finite; 1: a statistic; 2: neither */
        char why[1024];
        snprintf(why, sizeof why, "%s", f == ST_OK ? "" : st_last_error());
        int64_t v = f != ST_OK ? -1 : !finite ? 0 : !stats ? 1 : 2;
        ST_TRY(st_comm_all_reduce_sync(ses->comm, &v, &v, 1, ST_COMM_I64, ST_COMM_MIN,
                                       "whether the weights are finite"));
        ses->agreed_error = v < 2;
        if (v < 0) /* (every rank here: the one that could not look says why) */
            return f != ST_OK ? st_fail(f, "%s", why)
                              : st_fail(ST_ERR_IO,
                                        "another rank could not look at its weights before the checkpoint of "
                                        "step %lld (its own message says why); no checkpoint of it was saved",
                                        (long long)step);
        finite = v >= 1;
        stats = v == 2;
    }
    if (finite && stats) return ST_OK;
    /* (batch norm's output stays finite with an infinite variance: x / inf is 0) */
    return st_fail(ST_ERR_NUMERIC,
                   "%s %lld, whose loss was finite (%s); no checkpoint of step %lld was saved%s%s%s; %s",
                   finite ? "the batch-norm running statistics became non-finite by step"
                          : "the weights became non-finite in the update of step",
                   (long long)step, finite ? "an activation's square overflowed" : "a gradient overflowed",
                   (long long)step, last[0] ? " (the last one, " : "", last, last[0] ? ", is whole)" : "",
                   st_run_numeric_fix(ses->cfg));
}

/* The st_run_rescue's one writer among ranks that failed together: an flock of
 * lock (waits while another rank writes; released at exit), or on a file
 * system without locks (Lustre mounted without flock) lock.excl, made by one
 * rank alone (any rank, not only rank 0, which may be waiting in a
 * collective), while the others wait, up to limit seconds, for that file to
 * go (its save ended) or for done (the checkpoint's state.json) to appear.
 * The lock's descriptor, lock then naming the file to remove once written;
 * -1 for a rank that waited. */
static int rescue_lock(char *lock, size_t cap, const char *done, double limit) {
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX) == 0) return fd;
    if (fd >= 0) close(fd);
    char excl[ST_CFG_STR + 80];
    snprintf(excl, sizeof excl, "%s.excl", lock);
    fd = open(excl, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    unlink(lock); /* (the file flock could not lock: each rank that made it removes it) */
    if (fd >= 0) {
        snprintf(lock, cap, "%s", excl);
        return fd;
    }
    const double until = st_now() + limit;
    struct stat sb;
    while (stat(excl, &sb) == 0 && stat(done, &sb) != 0 && st_now() < until) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* A run that fails where its weights and optimizer state are whole (a batch
 * that cannot be read, an evaluation, a metrics write, a stop that came
 * while a batch did not; not a non-finite loss or a stop after the step,
 * which saves its own checkpoint) saves them before it stops, so that fixing the cause and
 * `--resume auto` loses no step. The step they hold is `whole` (at sampler
 * position `pos`), saved when it is later than the last checkpoint's
 * (`saved`; one that failed to write is not tried again at its step) and
 * the weights are finite. The message of `s` stays first and says what was
 * saved.
 *
 * On one rank a pending asynchronous checkpoint is committed first. With
 * several ranks the others wait inside a collective (the failing rank then
 * ends the job, st_train), so the failing rank saves alone, as a run of one
 * would: under ddp every rank holds the whole weights and optimizer state
 * (not under ZeRO, whose shards need every rank; nor with batch-norm
 * statistics, rank 0's, on another rank), and the sampler's position is the
 * same on every rank; not after a collective failed. Ranks failing together (one data file shortened under
 * all of them) take a lock (st_run_rescue-step-N.lock's flock, or where the file
 * system has none, st_run_rescue-step-N.lock.excl made by one of them alone), so
 * that one of them writes. A pending asynchronous checkpoint needs every rank to commit: it
 * is dropped, and the later step saved. Where every rank knows of the
 * failure and holds the same whole state (ses->agreed_read: a read the
 * ranks agreed on, train.c agree_read, or a shared evaluation's), they save
 * together, as a checkpoint is saved in the loop (ZeRO's shards too); but
 * where a rank could not look at its weights (its GPU lost, as at rank 0's
 * text sample), under ddp the first rank that could saves alone for all
 * (each holds the whole state; batch-norm statistics: rank 0 only), and
 * the others wait for its outcome. */
st_status st_run_rescue(st_session *ses, st_status s, st_ckpt_async **pending, int64_t whole,
                        st_sampler_pos pos, int64_t saved, st_ckpt_state *ck, const st_scaler *sc,
                        st_optim *opt, const st_ckpt_layout *lay, const st_dist *dd, st_loss_sum *ls,
                        st_run_result *r) {
    if (s == ST_OK || !ses->save || s == ST_ERR_NUMERIC || (s == ST_ERR_INTERRUPTED && !ses->read_stopped) ||
        ses->out_dir_lost)
        return s;
    const st_config *c = ses->cfg;
    const st_model *m = ses->model;
    const bool together = ses->world > 1 && ses->agreed_error && ses->agreed_read;
    const bool alone = ses->world > 1 && !together; /* this rank saves without the others */
    if (alone && (ses->agreed_error || dd->mode != ST_DIST_DDP || m->params.masters_sharded ||
                  (ses->rank != 0 && m->params.buffer_count > 0)))
        return s;
    /* A failed collective: the job ends at once (a device may also hold
     * NCCL work that will never finish, which a save would wait for). */
    if (st_comm_failed(ses->comm) || st_comm_failed(ses->dcomm)) return s;
    char why[2048], note[8192] = "", lock[ST_CFG_STR + 64] = "";
    int lock_fd = -1;
    snprintf(why, sizeof why, "%s", st_last_error());
    size_t at = 0; /* note: what was done, "; "-separated */
#define NOTE(...) st_appendf(note, sizeof note, &at, __VA_ARGS__)
    if (alone && (whole > saved || *pending)) /* (said now: the others wait in a collective, up to
                                                * dist.timeout_s, and their watchdog may end the job
                                                * during the save, before its own message) */
        st_ticker_sayf("scaletrain: error (rank %d of %d, host %s): %s; saving the finished steps alone before "
                       "every rank is ended (the others wait in a collective up to dist.timeout_s)\n",
                       ses->rank, ses->world, st_comm_host(ses->comm), why);
    if (*pending && alone) { /* its commit needs every rank: dropped, and its step saved below */
        const int64_t step = st_ckpt_async_step(*pending);
        st_ckpt_async_abandon(pending);
        if (saved >= step) saved = step - 1; /* (saved: the step loop's mark for it, never committed) */
        NOTE("the checkpoint of step %lld being written needs every rank to commit: dropped",
             (long long)step);
    }
    if (*pending && !alone) {
        const int64_t step = st_ckpt_async_step(*pending);
        char got[sizeof r->checkpoint] = ""; /* (set once committed) */
        const st_status f = st_ckpt_async_finish(pending, got, sizeof got, NULL);
        if (got[0]) snprintf(r->checkpoint, sizeof r->checkpoint, "%s", got);
        if (f == ST_OK || got[0]) { /* committed (a failure after it: `latest` behind) */
            saved = step;
            NOTE("the checkpoint of step %lld being written was committed to %s", (long long)step,
                 r->checkpoint);
        } else {
            NOTE("the checkpoint of step %lld being written was not: %s", (long long)step, st_last_error());
        }
    }
    if (whole > saved) {
        bool finite = false, stats = false, other = false,
             halt_nan = false; /* other: another rank wrote it */
        const st_params *pp = &m->params;
        int64_t halt = 0;
        /* (rank 0: train.out_dir still the run's, as before a checkpoint: removed or replaced since the
         * last one, another run may be there now, whose checkpoints this one's would mix with) */
        st_status f = st_out_dir_held(ses);
        const bool lost = f != ST_OK;
        char lost_why[1024] = "";
        if (lost) snprintf(lost_why, sizeof lost_why, "%s", st_last_error());
        if (f == ST_OK) f = own_weights_finite(ses, &finite, &stats);
        /* (a load refuses either: st_run_weights_finite_at); and updates the device's
         * guard refused since the last read of the loss (optim.h
         * st_optim_update) leave the weights of a step before `whole`: not
         * its checkpoint either */
        if (f == ST_OK) f = st_loss_sum_halted_now(ls, &halt, &halt_nan);
        finite = finite && stats && halt == 0;
        int by = -1; /* together, one rank's GPU lost: the rank that saves for all (ddp: each holds it all) */
        if (together) { /* every rank the same way: 2 finite, 0 not, 1 a rank could not look, -1 out_dir
                         * lost; the first rank that found them finite; and the step whose evaluation is
                         * owed, negated (its largest: rank 0's, where it evaluates alone and another
                         * rank saves) */
            int64_t v[3] = {lost         ? -1
                            : f != ST_OK ? 1
                            : finite     ? 2
                                         : 0,
                            f == ST_OK && finite ? ses->rank : INT64_MAX, -ses->eval_owed_at};
            f = st_comm_all_reduce_sync(ses->comm, v, v, 3, ST_COMM_I64, ST_COMM_MIN,
                                        "whether the weights are finite");
            finite = v[0] == 2;
            if (f == ST_OK) ses->eval_owed_at = -v[2];
            if (f == ST_OK && v[0] == -1) {
                f = lost ? st_fail(ST_ERR_IO, "%s", lost_why)
                         : st_fail(ST_ERR_IO,
                                   "train.out_dir %s is no longer the run's (rank 0's message says why): "
                                   "nothing is saved there",
                                   c->train.out_dir);
            } else if (f == ST_OK && v[0] == 1 && v[1] != INT64_MAX && dd->mode == ST_DIST_DDP &&
                       !pp->masters_sharded && (pp->buffer_count == 0 || v[1] == 0)) {
                by = (int)v[1];
                finite = true;
            } else if (f == ST_OK && v[0] == 1) {
                f = st_fail(ST_ERR_IO, "a rank could not look at its weights");
            }
        }
        if (f == ST_OK && alone) { /* one writer among the ranks that failed (rescue_lock) */
            char dir[ST_CFG_STR + 16], done[ST_CFG_STR + 64];
            snprintf(dir, sizeof dir, "%s/ckpt", c->train.out_dir);
            snprintf(lock, sizeof lock, "%s/st_run_rescue-step-%lld.lock", dir, (long long)whole);
            snprintf(done, sizeof done, "%s/step-%lld/state.json", dir, (long long)whole);
            /* (a rank but 0, which holds no lock of out_dir's to compare: its run.lock still there,
             * so that a folder moved away is not made again here) */
            char held[ST_CFG_STR + 16];
            snprintf(held, sizeof held, "%s/run.lock", c->train.out_dir);
            struct stat sb;
            if (ses->rank != 0 && stat(held, &sb) != 0)
                f = st_fail(ST_ERR_IO,
                            "train.out_dir %s has no run.lock now (moved or removed while the run trained): "
                            "nothing is saved there",
                            c->train.out_dir);
            if (f == ST_OK) f = st_mkdirs(dir);
            if (f == ST_OK) lock_fd = rescue_lock(lock, sizeof lock, done, st_ckpt_wait_limit(c, m, opt, 1));
            if (f == ST_OK && lock_fd < 0 && stat(done, &sb) != 0)
                return s; /* (the other rank's save did not end in a checkpoint's limit) */
            other = f == ST_OK && stat(done, &sb) == 0;
            if (other) snprintf(r->checkpoint, sizeof r->checkpoint, "%s/step-%lld", dir, (long long)whole);
        }
        if (at) NOTE("; ");
        if (other) {
            NOTE("another rank saved the weights and optimizer state after step %lld first, to %s",
                 (long long)whole, r->checkpoint);
        } else if (f == ST_OK && !finite) {
            if (halt > 0)
                NOTE(
                    "no checkpoint of step %lld was saved: the gradients of step %lld were not finite (their "
                    "norm %s), and no update was made from that step on",
                    (long long)whole, (long long)halt, halt_nan ? "NaN" : "inf");
            else
                NOTE("no checkpoint of step %lld was saved: its weights or batch-norm statistics are not "
                     "finite",
                     (long long)whole);
        } else {
            if (f == ST_OK && (by < 0 || ses->rank == by)) {
                st_run_ckpt_at(ck, whole, pos, sc, ses->eval_owed_at);
                const st_ckpt_layout one = {0}; /* rank 0 of 1 */
                char got[sizeof r->checkpoint] = "";
                f = st_ckpt_save(c, m, opt, ck, alone || by >= 0 ? &one : lay, got, sizeof got);
                if (got[0]) snprintf(r->checkpoint, sizeof r->checkpoint, "%s", got);
                if (f != ST_OK && got[0]) { /* committed, whole (`latest` behind: the resume takes it all
                                             * the same, st_ckpt_find) */
                    st_clear_error();
                    f = ST_OK;
                }
            }
            if (by >= 0) { /* every rank learns how the save went (the lost GPU's rank waits for it here) */
                int64_t ok = ses->rank != by || f == ST_OK ? 1 : 0;
                char err[1024];
                snprintf(err, sizeof err, "%s", f == ST_OK ? "" : st_last_error());
                /* (the others waited here while rank `by` wrote: a checkpoint's wait, not dist.timeout_s) */
                st_comm_set_timeout(ses->comm, st_ckpt_wait_limit(c, m, opt, 1),
                                    "train.checkpoint_timeout_s");
                const st_status a = st_comm_all_reduce_sync(ses->comm, &ok, &ok, 1, ST_COMM_I64, ST_COMM_MIN,
                                                            "the st_run_rescue checkpoint's save");
                st_comm_set_timeout(ses->comm, 0, NULL);
                if (ses->rank != by) {
                    f = a != ST_OK ? a
                        : ok
                            ? ST_OK
                            : st_fail(ST_ERR_IO, "rank %d could not write it (its own message says why)", by);
                    snprintf(r->checkpoint, sizeof r->checkpoint, "%s/ckpt/step-%lld", c->train.out_dir,
                             (long long)whole);
                } else if (f != ST_OK) {
                    st_fail(f, "%s", err);
                }
            }
            if (f == ST_OK && by >= 0)
                NOTE("a rank's GPU is lost; rank %d saved the weights and optimizer state after step %lld "
                     "first, to %s",
                     by, (long long)whole, r->checkpoint);
            else if (f == ST_OK && alone)
                NOTE("rank %d saved the weights and optimizer state after step %lld first, to %s", ses->rank,
                     (long long)whole, r->checkpoint);
            else if (f == ST_OK)
                NOTE("the weights and optimizer state after step %lld were saved first, to %s",
                     (long long)whole, r->checkpoint);
            else
                NOTE("a checkpoint of step %lld could not be saved either: %s", (long long)whole,
                     st_last_error());
        }
        if (lock_fd >= 0) { /* (a rank waiting on it finds the checkpoint) */
            unlink(lock);
            close(lock_fd);
        }
    }
#undef NOTE
    if (!at) return s; /* (its message unchanged) */
    return st_fail(s, "%s (%s%s)", why, note,
                   strstr(why, "--resume") ? ""
                                           : "; --resume auto continues from the latest once this is fixed");
}
