/* The threaded loader (see loader.h): a ring of slots, one mutex and two
 * condition variables (a slot became free; a batch became ready). Batch k
 * always lives in slot k mod ring, so the order needs no queue: a worker
 * claims the next batch number when its slot is free, and the consumer waits
 * until its slot holds batch k. No sleeps, no polling. */
#include "data/loader.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/mem.h"
#include "core/rng.h"
#include "core/text.h"
#include "core/ticker.h"

#define MAX_WORKERS 256
#define ERR_MAX 1024

typedef enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct slot {
    st_batch b; /* first: st_loader_release finds the slot from the batch */
    slot_state state;
    st_status status; /* of the assembly; its message in err */
    char err[ERR_MAX];
} slot;

struct st_loader {
    const st_dataset *d;
    st_sampler *s;
    st_loader_opts o;
    st_loader_allocator alloc;
    int64_t mb, in, tg; /* samples per batch; input and target elements per sample */
    int ring;
    slot *slots;
    pthread_t *threads;
    int n_threads; /* started */
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_ready;
    int sync_live; /* 0: none, 1: mutex, 2: + cv_free, 3: + cv_ready */
    /* under mu */
    bool stop;
    int live;           /* workers that have not returned */
    int64_t next_claim; /* the next batch number to assemble */
    int held;
    /* the consumer's own */
    int64_t next_out; /* the next batch number to hand out */
    st_sampler_pos pos_out;
    double wait_total;
    st_status failed;
    char failed_msg[ERR_MAX];
    bool hung; /* a wait timed out: a worker may never return (st_loader_free) */
    /* what d points to: the caller's dataset, copied (it may live on a stack
     * that a worker left running past st_loader_free would find reused; the
     * memory the copy points to is the caller's to keep) */
    st_dataset d_copy;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *host_alloc(void *ctx, size_t nbytes) { return st_alloc_aligned(nbytes); }
static void host_free(void *ctx, void *p) { st_free_aligned(p); }

int st_loader_auto_workers(int cores_per_rank) {
    int w = cores_per_rank / 4;
    return w < 1 ? 1 : w > 8 ? 8 : w;
}

/* The crop and flip of one sample: a function of (aug_seed, epoch, sample)
 * only, so the batch bits do not depend on which worker drew it. */
static void draw_aug(const st_loader *l, int64_t epoch, int64_t sample, st_image_aug *a) {
    st_rng r = st_rng_make(l->o.aug_seed ^ st_mix64(0xa4c0000000ULL + (uint64_t)epoch), (uint64_t)sample);
    const int p = l->o.crop_pad;
    a->pad = p;
    a->dx = p ? (int)st_rng_below(&r, (uint64_t)(2 * p + 1)) : 0;
    a->dy = p ? (int)st_rng_below(&r, (uint64_t)(2 * p + 1)) : 0;
    a->flip = l->o.flip && (st_rng_next(&r) >> 63);
}

static st_status assemble(const st_loader *l, slot *sl) {
    st_batch *b = &sl->b;
    const bool aug = l->o.crop_pad > 0 || l->o.flip;
    for (int64_t j = 0; j < l->mb; j++) {
        st_image_aug a;
        if (aug) draw_aug(l, b->pos.epoch, b->idx[j], &a);
        ST_TRY(st_dataset_sample(l->d, b->idx[j], aug ? &a : NULL, b->x ? b->x + j * l->in : NULL,
                                 b->xi ? b->xi + j * l->in : NULL, b->y + j * l->tg));
    }
    return ST_OK;
}

/* Take the next batch number and its samples (under mu; its slot is free). */
static slot *claim(st_loader *l) {
    slot *sl = &l->slots[l->next_claim % l->ring];
    sl->state = SLOT_FILLING;
    sl->b.seq = l->next_claim++;
    st_sampler_next(l->s, sl->b.idx, &sl->b.pos);
    return sl;
}

/* Assemble outside the lock; record the outcome under it. */
static void fill(st_loader *l, slot *sl) {
    pthread_mutex_unlock(&l->mu);
    st_status st = assemble(l, sl);
    if (st != ST_OK) snprintf(sl->err, sizeof sl->err, "%s", st_last_error());
    pthread_mutex_lock(&l->mu);
    sl->status = st;
    sl->state = SLOT_READY;
}

static void *worker(void *arg) {
    st_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->slots[l->next_claim % l->ring].state != SLOT_FREE)
            pthread_cond_wait(&l->cv_free, &l->mu);
        if (l->stop) break;
        fill(l, claim(l));
        pthread_cond_broadcast(&l->cv_ready);
    }
    l->live--;
    pthread_cond_broadcast(&l->cv_ready); /* (st_loader_free waits for it) */
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static st_status check_opts(const st_dataset *d, const st_sampler *s, const st_loader_opts *o) {
    if (o->num_workers < 0 || o->num_workers > MAX_WORKERS)
        return st_fail(ST_ERR_CONFIG, "data loader: %d workers; use 0 (assemble in the step loop) to %d",
                       o->num_workers, MAX_WORKERS);
    if (o->prefetch < 1 || o->max_held < 1 || o->prefetch > 1024 || o->max_held > 1024)
        return st_fail(ST_ERR_CONFIG, "data loader: prefetch %d and max_held %d must be in 1..1024",
                       o->prefetch, o->max_held);
    if (o->crop_pad < 0 || o->crop_pad > 1024)
        return st_fail(ST_ERR_CONFIG, "data loader: crop padding %d must be in 0..1024", o->crop_pad);
    if ((o->crop_pad > 0 || o->flip) && (d->kind != ST_DATA_IMAGES || d->flat))
        return st_fail(ST_ERR_CONFIG, "data loader: random crop and flip apply to images, not to %s",
                       d->kind == ST_DATA_TOKENS ? "tokens" : "flat (n, d) features");
    if (st_sampler_options(s)->n != d->n)
        return st_fail(ST_ERR_ARG, "data loader: the sampler covers %lld samples but the dataset has %lld",
                       (long long)st_sampler_options(s)->n, (long long)d->n);
    return ST_OK;
}

static st_status alloc_slots(st_loader *l) {
    const bool tokens = l->d->kind == ST_DATA_TOKENS;
    const size_t x_nbytes = (size_t)(l->mb * l->in) * (tokens ? sizeof(int32_t) : sizeof(float));
    const size_t y_nbytes = (size_t)(l->mb * l->tg) * sizeof(int32_t);
    l->slots = calloc((size_t)l->ring, sizeof *l->slots);
    if (!l->slots) return st_fail(ST_ERR_NOMEM, "out of memory for the loader's ring");
    for (int i = 0; i < l->ring; i++) {
        st_batch *b = &l->slots[i].b;
        void *x = l->alloc.alloc(l->alloc.ctx, x_nbytes);
        b->y = l->alloc.alloc(l->alloc.ctx, y_nbytes);
        b->idx = malloc((size_t)l->mb * sizeof *b->idx);
        if (tokens)
            b->xi = x;
        else
            b->x = x;
        if (!x || !b->y || !b->idx)
            return st_fail(ST_ERR_NOMEM, "out of memory for the loader's ring (%d buffers of %zu bytes)",
                           l->ring, x_nbytes + y_nbytes);
        b->size = l->mb;
        b->x_nbytes = x_nbytes;
        b->y_nbytes = y_nbytes;
    }
    return ST_OK;
}

static st_status start_workers(st_loader *l) {
    l->threads = calloc((size_t)l->o.num_workers + 1, sizeof *l->threads);
    if (!l->threads) return st_fail(ST_ERR_NOMEM, "out of memory for the loader's threads");
    /* Workers block every signal (SIGTERM and SIGINT belong to the step
     * loop) but those their own faults raise: a blocked SIGBUS would end the
     * process past the handler that turns a shortened token file's fault
     * into an error (data/tokens.c). */
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    l->live = l->o.num_workers; /* (none returns before the stop; those not started are taken off below) */
    while (l->n_threads < l->o.num_workers &&
           (rc = pthread_create(&l->threads[l->n_threads], NULL, worker, l)) == 0) {
        char name[16];
        snprintf(name, sizeof name, "st-loader-%d", l->n_threads);
        pthread_setname_np(l->threads[l->n_threads], name);
        l->n_threads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_lock(&l->mu);
    l->live -= l->o.num_workers - l->n_threads;
    pthread_mutex_unlock(&l->mu);
    if (rc != 0)
        return st_fail(ST_ERR_NOMEM, "data loader: cannot start worker %d of %d: %s; use fewer workers",
                       l->n_threads + 1, l->o.num_workers, strerror(rc));
    return ST_OK;
}

st_status st_loader_init(const st_dataset *d, st_sampler *smp, const st_loader_opts *opts, st_loader **out) {
    *out = NULL;
    st_loader_opts dflt = ST_LOADER_OPTS_INIT;
    if (!opts) opts = &dflt;
    ST_TRY(check_opts(d, smp, opts));
    st_loader *l = calloc(1, sizeof *l);
    if (!l) return st_fail(ST_ERR_NOMEM, "out of memory for the data loader");
    st_status s;
    l->d_copy = *d;
    l->d = &l->d_copy;
    l->s = smp;
    l->o = *opts;
    l->alloc = opts->allocator ? *opts->allocator : (st_loader_allocator){host_alloc, host_free, NULL};
    l->mb = st_sampler_micro_batch(smp);
    l->in = st_dataset_input_count(d);
    l->tg = st_dataset_target_count(d);
    l->ring = opts->prefetch + opts->max_held;
    l->pos_out = st_sampler_tell(smp);
    ST_GOTO(alloc_slots(l));
    if (pthread_mutex_init(&l->mu, NULL) != 0) goto nosync;
    l->sync_live = 1;
    if (pthread_cond_init(&l->cv_free, NULL) != 0) goto nosync;
    l->sync_live = 2;
    pthread_condattr_t ca; /* cv_ready's timed wait on the monotonic clock */
    if (pthread_condattr_init(&ca) != 0) goto nosync;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    const int rc = pthread_cond_init(&l->cv_ready, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) goto nosync;
    l->sync_live = 3;
    ST_GOTO(start_workers(l));
    *out = l;
    return ST_OK;
nosync:
    s = st_fail(ST_ERR_NOMEM, "data loader: cannot create its mutex or condition variables");
fail:
    st_loader_free(l);
    return s;
}

/* Hand out batch next_out (under mu; its slot is READY). */
static st_status take(st_loader *l, slot *sl, double t0, st_batch **out) {
    if (sl->status != ST_OK) {
        l->failed = sl->status;
        snprintf(l->failed_msg, sizeof l->failed_msg, "%s", sl->err);
        pthread_mutex_unlock(&l->mu);
        return st_fail(l->failed, "%s", l->failed_msg);
    }
    sl->state = SLOT_HELD;
    l->held++;
    pthread_mutex_unlock(&l->mu);
    l->next_out++;
    l->pos_out = st_sampler_advance(l->s, sl->b.pos);
    sl->b.wait_s = now_s() - t0;
    l->wait_total += sl->b.wait_s;
    *out = &sl->b;
    return ST_OK;
}

/* The slot of batch next_out, locked, or an error (unlocked) when the
 * consumer may not take another. */
static st_status lock_next(st_loader *l, slot **out) {
    if (l->failed) return st_fail(l->failed, "%s", l->failed_msg);
    pthread_mutex_lock(&l->mu);
    slot *sl = &l->slots[l->next_out % l->ring];
    if (l->held >= l->o.max_held || sl->state == SLOT_HELD) {
        int held = l->held;
        pthread_mutex_unlock(&l->mu);
        return st_fail(ST_ERR_ARG,
                       "data loader: batch %lld needs a buffer but %d batch(es) are held (at most %d, "
                       "and not batch %lld); call st_loader_release first",
                       (long long)l->next_out, held, l->o.max_held, (long long)(l->next_out - l->ring));
    }
    *out = sl;
    return ST_OK;
}

/* Batch next_out was not ready in time (under mu, released here): the
 * loader fails from now on, and is left to the process's end when freed.
 * The message names the timeout, not the clock's reading of the wait (a
 * loaded machine wakes the wait a few ms late: "after 0.202 s" says
 * nothing more). */
static st_status stalled(st_loader *l, const slot *sl) {
    char what[4400];
    const bool begun = sl->state == SLOT_FILLING && sl->b.seq == l->next_out;
    /* the file it reads (a stream's shard: the one that holds its first sample), where one is known */
    const char *file = st_dataset_source(l->d, begun ? sl->b.idx[0] : -1);
    if (begun)
        snprintf(what, sizeof what, "a worker has been assembling it (samples %lld, ...%s%s) all that time",
                 (long long)sl->b.idx[0], file ? ", from " : "", file ? file : "");
    else
        snprintf(what, sizeof what, "no worker has begun it: all %d are still inside earlier batches%s%s",
                 l->n_threads, file ? ", reading " : "", file ? file : "");
    l->hung = true;
    l->failed = ST_ERR_IO;
    snprintf(
        l->failed_msg, sizeof l->failed_msg,
        "data loader: batch %lld is not ready after %g s (data.timeout_s): %s, so the storage it reads "
        "stopped answering (a hung network file system?); check it, then continue with --resume auto (or "
        "raise data.timeout_s if reads can legitimately take that long)",
        (long long)l->next_out, l->o.timeout_s, what);
    pthread_mutex_unlock(&l->mu);
    return st_fail(l->failed, "%s", l->failed_msg);
}

/* A stop asked while batch next_out did not come (mu held; released): the
 * worker on it may be stuck in a read for good, so it is never joined
 * (st_loader_free), as after a stall. */
static st_status stopped(st_loader *l, const slot *sl, double waited) {
    const bool begun = sl->state == SLOT_FILLING && sl->b.seq == l->next_out;
    const long long batch = (long long)l->next_out;
    l->hung = true;
    pthread_mutex_unlock(&l->mu);
    char name[16];
    return st_fail(ST_ERR_INTERRUPTED,
                   "stopped by %s while waiting %.0f s for training batch %lld (%s: its storage is slow "
                   "or stopped answering)",
                   st_signal_name(atomic_load_explicit(l->o.stop, memory_order_relaxed), name), waited, batch,
                   begun ? "a worker is still reading it" : "no worker has begun it");
}

/* For tests of a stop while the step loop waits on a batch (with
 * SCALETRAIN_TEST_DATA_STALL, dataset.h): SCALETRAIN_TEST_WAIT_MARK=FILE:B
 * makes FILE once the loader waits for batch B or a later one not ready, so
 * that a test signals the process when it is in that wait, not before (a
 * stop before it is taken at the step's end). */
static void test_wait_mark(int64_t batch) {
    const char *v = getenv("SCALETRAIN_TEST_WAIT_MARK"), *colon = v ? strrchr(v, ':') : NULL;
    if (!colon || colon == v || batch < atoll(colon + 1)) return;
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)(colon - v), v);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

st_status st_loader_next(st_loader *l, st_batch **out) {
    *out = NULL;
    const double t0 = now_s();
    slot *sl = NULL;
    ST_TRY(lock_next(l, &sl));
    if (l->n_threads == 0) { /* assemble here: no worker can have claimed it */
        char what[4200];
        slot *c = claim(l);
        const char *file =
            st_dataset_source(l->d, c->b.idx[0]); /* (its first sample's file: a token shard) */
        snprintf(what, sizeof what, "reading training batch %lld%s%s", (long long)c->b.seq,
                 file ? " from " : "", file ? file : "");
        st_watch_begin(l->o.watch, what);
        fill(l, c);
        st_watch_end(l->o.watch);
    } else {
        /* In slices of at most a quarter of a second, between which the
         * stop flag is looked at (a signal wakes no condition variable). */
        const double end = l->o.timeout_s > 0 ? t0 + l->o.timeout_s : 0;
        double stop_seen = 0;
        if (sl->state != SLOT_READY) test_wait_mark(l->next_out);
        while (sl->state != SLOT_READY) {
            const double t = now_s();
            if (l->o.stop && atomic_load_explicit(l->o.stop, memory_order_relaxed)) {
                if (stop_seen == 0) stop_seen = t;
                if (t - stop_seen >= ST_LOADER_STOP_GRACE_S) return stopped(l, sl, t - t0);
            }
            if (end > 0 && t >= end) return stalled(l, sl);
            double wake = t + 0.25;
            if (end > 0 && wake > end) wake = end;
            const struct timespec until = {(time_t)wake, (long)((wake - floor(wake)) * 1e9)};
            pthread_cond_timedwait(&l->cv_ready, &l->mu, &until);
        }
    }
    return take(l, sl, t0, out);
}

st_status st_loader_try_next(st_loader *l, st_batch **out) {
    *out = NULL;
    const double t0 = now_s();
    slot *sl = NULL;
    ST_TRY(lock_next(l, &sl));
    if (l->n_threads == 0 || sl->state != SLOT_READY) {
        pthread_mutex_unlock(&l->mu);
        return ST_OK;
    }
    return take(l, sl, t0, out);
}

void st_loader_release(st_loader *l, st_batch *b) {
    if (!b) return;
    slot *sl = (slot *)b;
    pthread_mutex_lock(&l->mu);
    if (sl->state == SLOT_HELD) {
        sl->state = SLOT_FREE;
        l->held--;
        pthread_cond_broadcast(&l->cv_free);
    }
    pthread_mutex_unlock(&l->mu);
}

st_sampler_pos st_loader_position(const st_loader *l) { return l->pos_out; }
double st_loader_wait_total(const st_loader *l) { return l->wait_total; }

bool st_loader_free(st_loader *l) {
    if (!l) return false;
    if (l->sync_live == 3) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv_free);
        pthread_cond_broadcast(&l->cv_ready);
        /* A worker still reading a batch taken ahead, which nobody waited
         * for (the run ended first), may be stuck in storage that stopped
         * answering: it has data.timeout_s to return, ST_LOADER_STOP_GRACE_S
         * after a stop, as the step loop's own wait has; else it is left
         * (hung), and the run ends without it. */
        double limit = l->o.timeout_s;
        if (l->o.stop && atomic_load_explicit(l->o.stop, memory_order_relaxed) &&
            (limit <= 0 || limit > ST_LOADER_STOP_GRACE_S))
            limit = ST_LOADER_STOP_GRACE_S;
        const double end = now_s() + limit;
        while (!l->hung && l->live > 0) {
            if (limit <= 0) { /* (data.timeout_s 0: for ever, as asked) */
                pthread_cond_wait(&l->cv_ready, &l->mu);
                continue;
            }
            const double t = now_s();
            if (t >= end) {
                l->hung = true;
                int64_t batch = -1;
                for (int i = 0; i < l->ring; i++)
                    if (l->slots[i].state == SLOT_FILLING && (batch < 0 || l->slots[i].b.seq < batch))
                        batch = l->slots[i].b.seq;
                st_ticker_sayf(
                    "scaletrain: warning: data loader: a worker has been reading batch %lld, taken "
                    "ahead and never used, for %g s after the loader was done with (%s): its "
                    "storage may have stopped answering; the process ends without it\n",
                    (long long)batch, limit,
                    limit < l->o.timeout_s || l->o.timeout_s <= 0 ? "a stop's grace" : "data.timeout_s");
                break;
            }
            const struct timespec until = {(time_t)end, (long)((end - floor(end)) * 1e9)};
            pthread_cond_timedwait(&l->cv_ready, &l->mu, &until);
        }
        pthread_mutex_unlock(&l->mu);
    }
    if (l->hung) { /* a worker may be stuck for good, and may yet come back to this memory */
        for (int i = 0; i < l->n_threads; i++)
            pthread_detach(l->threads[i]);
        return l->n_threads > 0;
    }
    for (int i = 0; i < l->n_threads; i++)
        pthread_join(l->threads[i], NULL);
    if (l->sync_live >= 3) pthread_cond_destroy(&l->cv_ready);
    if (l->sync_live >= 2) pthread_cond_destroy(&l->cv_free);
    if (l->sync_live >= 1) pthread_mutex_destroy(&l->mu);
    for (int i = 0; l->slots && i < l->ring; i++) {
        st_batch *b = &l->slots[i].b;
        void *x = b->x ? (void *)b->x : (void *)b->xi;
        if (x) l->alloc.free(l->alloc.ctx, x);
        if (b->y) l->alloc.free(l->alloc.ctx, b->y);
        free(b->idx);
    }
    free(l->slots);
    free(l->threads);
    free(l);
    return false;
}
