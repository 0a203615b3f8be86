/* The batch feed (see feed.h): on the host, graph inputs that are the ring
 * slots themselves; on a CUDA device, a pinned ring and double-buffered
 * asynchronous copies on the copy stream, ordered with compute by events.
 *
 * Device bookkeeping: micro-batch k (k = 0, 1, ... in the loader's order)
 * goes to buffer k % 2. Per buffer: the ring slot whose copy went there and
 * has not been given back, and four events: `copied` (on the copy stream,
 * after its copy), `used` (on the compute stream, after the backward that
 * read it), and t0, t1 (timing, on the compute stream around its wait for
 * `copied`). */
#include "feed.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

enum { NBUF = 2 };

typedef struct pin { /* a ring buffer and how it was allocated */
    void *p;
    bool pinned;
} pin;

struct st_feed {
    st_device *dev;
    const st_sampler *s;
    st_loader *ld;
    st_tensor *x, *y;
    void *own_x, *own_y; /* the tensors' own memory */
    size_t x_nbytes, y_nbytes;
    st_sampler_pos pos; /* after the last micro-batch bound */
    bool in_step;       /* between st_feed_next and st_feed_done */
    st_batch *cur;      /* host: the slot bound now */
    st_batch desc;      /* device: the bound batch's descriptor, buffers NULL */
    /* the ring's allocator (device): pinned when cudaHostAlloc works */
    st_loader_allocator alloc;
    pin *pins;
    int n_pins, cap_pins;
    bool pinned;
    char why[256];
    /* device */
    int64_t k;                 /* micro-batches bound so far: the next one is number k */
    st_batch *ahead;           /* batch k, taken and its copy queued into buffer k % NBUF */
    st_batch *slot[NBUF];      /* the slot copied into buffer i and not given back yet */
    void *dx[NBUF], *dy[NBUF]; /* buffer 0 is the tensors' own memory */
    bool used_recorded[NBUF], stall_pending[NBUF];
    struct st_trace *trace; /* the profiler trace, for the copies' spans */
#ifdef ST_HAVE_CUDA
    st_cuda_event *copied[NBUF], *used[NBUF], *t0[NBUF], *t1[NBUF];
#endif
};

static void bind(st_feed *f, void *x, void *y) {
    if (f->x->dtype == ST_F32)
        f->x->data = x;
    else
        f->x->idata = x;
    f->y->idata = y;
}

static st_status check_tensors(const st_dataset *d, const st_sampler *s, const st_tensor *x,
                               const st_tensor *y) {
    const int64_t mb = st_sampler_micro_batch(s);
    const int64_t nx = mb * st_dataset_input_count(d), ny = mb * st_dataset_target_count(d);
    const st_dtype want = d->kind == ST_DATA_TOKENS ? ST_I32 : ST_F32;
    if (x->dtype != want || x->count != nx || y->dtype != ST_I32 || y->count != ny)
        return st_fail(
            ST_ERR_ARG,
            "batch feed: the graph's inputs %s (%lld %s) and %s (%lld %s) do not hold a micro-batch of "
            "%lld samples (%lld %s inputs, %lld int32 targets)",
            x->name, (long long)x->count, x->dtype == ST_F32 ? "float" : "int32", y->name,
            (long long)y->count, y->dtype == ST_F32 ? "float" : "int32", (long long)mb, (long long)nx,
            want == ST_F32 ? "float" : "int32", (long long)ny);
    return ST_OK;
}

/* --- the ring's allocator on a device: pinned, or pageable as a fallback --- */

static void *ring_alloc(void *ctx, size_t nbytes) {
    st_feed *f = ctx;
    if (f->n_pins == f->cap_pins) return NULL;
    void *p = NULL;
    bool pinned = false;
#ifdef ST_HAVE_CUDA
    if (st_cuda_host_alloc(f->dev, nbytes, &p) == ST_OK)
        pinned = true;
    else if (!f->why[0])
        snprintf(f->why, sizeof f->why, "%s", st_last_error());
#endif
    if (!p) p = st_alloc_aligned(nbytes);
    if (!p) return NULL;
    f->pinned &= pinned;
    f->pins[f->n_pins++] = (pin){p, pinned};
    return p;
}

static void ring_free(void *ctx, void *p) {
    st_feed *f = ctx;
    for (int i = 0; i < f->n_pins; i++) {
        if (f->pins[i].p != p) continue;
#ifdef ST_HAVE_CUDA
        if (f->pins[i].pinned)
            st_cuda_host_free(p);
        else
#endif
            st_free_aligned(p);
        f->pins[i] = f->pins[--f->n_pins];
        return;
    }
}

#ifdef ST_HAVE_CUDA
/* --- the device path -------------------------------------------------------- */

static st_status dev_init(st_feed *f) {
    st_status s = st_device_alloc(f->dev, f->x_nbytes, &f->dx[1]);
    if (s == ST_OK) s = st_device_alloc(f->dev, f->y_nbytes, &f->dy[1]);
    if (s != ST_OK) return st_fail_context(s, "the device's second batch buffer: ");
    f->dx[0] = f->own_x;
    f->dy[0] = f->own_y;
    for (int i = 0; i < NBUF; i++) {
        ST_TRY(st_cuda_event_create(f->dev, false, &f->copied[i]));
        ST_TRY(st_cuda_event_create(f->dev, false, &f->used[i]));
        ST_TRY(st_cuda_event_create(f->dev, true, &f->t0[i]));
        ST_TRY(st_cuda_event_create(f->dev, true, &f->t1[i]));
    }
    return ST_OK;
}

/* Whether event e has completed; `wait`: wait on the host for it (and only
 * it) first, so it has. */
static st_status event_done(st_feed *f, st_cuda_event *e, bool wait, bool *done) {
    *done = true;
    return wait ? st_cuda_event_sync(f->dev, e) : st_cuda_event_query(f->dev, e, done);
}

/* Give buffer i's slot back to the loader once its copy has completed;
 * `wait`: wait on the host for that copy (and only it) first. */
static st_status give_back(st_feed *f, int i, bool wait) {
    if (!f->slot[i]) return ST_OK;
    bool done;
    ST_TRY(event_done(f, f->copied[i], wait, &done));
    if (!done) return ST_OK;
    st_loader_release(f->ld, f->slot[i]);
    f->slot[i] = NULL;
    return ST_OK;
}

/* Add to *stall the seconds compute stood waiting for buffer i's last copy,
 * once its timing events completed (`wait`: wait for them). */
static st_status collect_stall(st_feed *f, int i, bool wait, double *stall) {
    if (!f->stall_pending[i]) return ST_OK;
    bool done;
    ST_TRY(event_done(f, f->t1[i], wait, &done));
    if (!done) return ST_OK;
    double s = 0;
    ST_TRY(st_cuda_event_elapsed(f->dev, f->t0[i], f->t1[i], &s));
    f->stall_pending[i] = false;
    if (s > 0) *stall += s;
    return ST_OK;
}

/* Take batch k from the loader (blocking, or only if it is ready) and queue
 * its copy into buffer k % NBUF, after the backward that last read that
 * buffer. *host_wait: the loader's wait. */
static st_status take_ahead(st_feed *f, bool blocking, double *host_wait) {
    if (f->ahead) return ST_OK;
    const int i = (int)(f->k % NBUF);
    ST_TRY(give_back(f, i, true)); /* batch k - 2: its copy was waited for by compute long ago */
    st_batch *b = NULL;
    const st_status ls = blocking ? st_loader_next(f->ld, &b) : st_loader_try_next(f->ld, &b);
    if (ls != ST_OK && !blocking) {
        /* A batch that failed, taken ahead (inside a step, or after its
         * backward): the loader keeps its failure, so the blocking take of
         * st_feed_next reports it, where the ranks agree on each read
         * (train.c's agree_read) and a rescue can save the step before */
        st_clear_error();
        return ST_OK;
    }
    ST_TRY(ls);
    if (!b) return ST_OK;
    f->slot[i] = b;
    if (host_wait) *host_wait += b->wait_s;
    if (f->used_recorded[i]) ST_TRY(st_cuda_stream_wait_event(f->dev, ST_CUDA_STREAM_COPY, f->used[i]));
    const int32_t span = st_trace_gpu_begin(f->trace, ST_TRACE_STREAM_COPY);
    ST_TRY(st_cuda_memcpy_async(f->dev, f->dx[i], b->x ? (void *)b->x : (void *)b->xi, f->x_nbytes,
                                ST_CUDA_STREAM_COPY));
    ST_TRY(st_cuda_memcpy_async(f->dev, f->dy[i], b->y, f->y_nbytes, ST_CUDA_STREAM_COPY));
    st_trace_gpu_end(f->trace, span, ST_TRACE_STREAM_COPY, ST_TRACE_TID_GPU_COPY, "data", "batch copy");
    ST_TRY(st_cuda_event_record(f->dev, f->copied[i], ST_CUDA_STREAM_COPY));
    f->ahead = b;
    return ST_OK;
}

static st_status dev_next(st_feed *f, double *wait) {
    ST_TRY(take_ahead(f, true, wait));
    const int i = (int)(f->k % NBUF);
    ST_TRY(collect_stall(f, i, true, wait)); /* its events are about to be recorded again */
    ST_TRY(collect_stall(f, 1 - i, false, wait));
    ST_TRY(st_cuda_event_record(f->dev, f->t0[i], ST_CUDA_STREAM_COMPUTE));
    ST_TRY(st_cuda_stream_wait_event(f->dev, ST_CUDA_STREAM_COMPUTE, f->copied[i]));
    ST_TRY(st_cuda_event_record(f->dev, f->t1[i], ST_CUDA_STREAM_COMPUTE));
    f->stall_pending[i] = true;
    bind(f, f->dx[i], f->dy[i]);
    f->desc = *f->ahead;
    f->desc.x = NULL, f->desc.xi = NULL, f->desc.y = NULL, f->desc.idx = NULL;
    f->pos = st_sampler_advance(f->s, f->ahead->pos);
    f->ahead = NULL;
    f->k++;
    f->in_step = true;
    ST_TRY(give_back(f, i, false));
    return take_ahead(f, false, NULL); /* the next copy overlaps this step, if its batch is ready */
}

static st_status dev_done(st_feed *f) {
    const int i = (int)((f->k - 1) % NBUF);
    ST_TRY(st_cuda_event_record(f->dev, f->used[i], ST_CUDA_STREAM_COMPUTE));
    f->used_recorded[i] = true;
    f->in_step = false;
    ST_TRY(give_back(f, i, false));
    return take_ahead(f, false, NULL);
}

static void dev_free(st_feed *f) {
    for (int i = 0; i < NBUF; i++) {
        if (f->slot[i]) {
            (void)st_cuda_event_sync(f->dev, f->copied[i]); /* an error here: the slot is freed anyway */
            st_loader_release(f->ld, f->slot[i]);
            f->slot[i] = NULL;
        }
        st_cuda_event_free(f->copied[i]);
        st_cuda_event_free(f->used[i]);
        st_cuda_event_free(f->t0[i]);
        st_cuda_event_free(f->t1[i]);
    }
    /* the compute stream may still read buffer 1 */
    if (f->dx[1] || f->dy[1]) (void)st_device_sync(f->dev);
    st_device_release(f->dev, f->dx[1]);
    st_device_release(f->dev, f->dy[1]);
}
#endif

/* --- the feed ----------------------------------------------------------------- */

st_status st_feed_init(st_device *dev, const st_dataset *d, st_sampler *s, const st_loader_opts *lo,
                       st_tensor *x, st_tensor *y, st_feed **out) {
    *out = NULL;
#ifndef ST_HAVE_CUDA
    if (dev) return st_fail(ST_ERR_UNSUPPORTED, "batch feed: this scaletrain was built without CUDA");
#endif
    ST_TRY(check_tensors(d, s, x, y));
    st_feed *f = calloc(1, sizeof *f);
    if (!f) return st_fail(ST_ERR_NOMEM, "out of memory for the batch feed");
    st_status s_;
    f->dev = dev;
    f->s = s;
    f->x = x;
    f->y = y;
    f->own_x = x->dtype == ST_F32 ? (void *)x->data : (void *)x->idata;
    f->own_y = y->idata;
    f->x_nbytes = (size_t)x->count * 4;
    f->y_nbytes = (size_t)y->count * 4;
    f->pos = st_sampler_tell(s);
    st_loader_opts o = lo ? *lo : (st_loader_opts)ST_LOADER_OPTS_INIT;
    o.max_held = dev ? NBUF : 1; /* a device holds the slot in copy and the one taken ahead */
    o.allocator = NULL;
    if (dev) {
        f->pinned = true;
        f->cap_pins = 2 * (o.prefetch + o.max_held); /* x and y per slot */
        f->pins = calloc((size_t)f->cap_pins, sizeof *f->pins);
        if (!f->pins) {
            free(f);
            return st_fail(ST_ERR_NOMEM, "out of memory for the batch feed");
        }
        f->alloc = (st_loader_allocator){ring_alloc, ring_free, f};
        o.allocator = &f->alloc;
    }
    if ((s_ = st_loader_init(d, s, &o, &f->ld)) != ST_OK) goto fail;
#ifdef ST_HAVE_CUDA
    if (dev && (s_ = dev_init(f)) != ST_OK) goto fail;
#endif
    *out = f;
    return ST_OK;
fail:
    st_feed_free(f);
    return s_;
}

st_status st_feed_next(st_feed *f, double *wait_s) {
    if (wait_s) *wait_s = 0;
    if (f->in_step)
        return st_fail(ST_ERR_INTERNAL,
                       "batch feed: micro-batch %lld was not given back (st_feed_done) before "
                       "the next was asked for",
                       (long long)f->k - 1);
#ifdef ST_HAVE_CUDA
    if (f->dev) {
        double wait = 0;
        st_status s = dev_next(f, &wait);
        if (wait_s) *wait_s = wait;
        return s;
    }
#endif
    st_batch *b;
    ST_TRY(st_loader_next(f->ld, &b));
    f->cur = b;
    f->in_step = true;
    f->k++;
    f->pos = st_sampler_advance(f->s, b->pos);
    bind(f, b->x ? (void *)b->x : (void *)b->xi, b->y);
    if (wait_s) *wait_s = b->wait_s;
    return ST_OK;
}

st_status st_feed_done(st_feed *f) {
    if (!f->in_step) return ST_OK;
#ifdef ST_HAVE_CUDA
    if (f->dev) return dev_done(f);
#endif
    bind(f, f->own_x, f->own_y);
    st_loader_release(f->ld, f->cur);
    f->cur = NULL;
    f->in_step = false;
    return ST_OK;
}

const st_batch *st_feed_batch(const st_feed *f) {
    if (!f->in_step) return NULL;
    return f->dev ? &f->desc : f->cur;
}

st_sampler_pos st_feed_position(const st_feed *f) { return f->pos; }

bool st_feed_pinned(const st_feed *f, const char **why) {
    if (why) *why = f->dev && !f->pinned ? f->why : "";
    return f->dev && f->pinned;
}

bool st_feed_free(st_feed *f) {
    if (!f) return false;
#ifdef ST_HAVE_CUDA
    if (f->dev && f->ld) dev_free(f);
#endif
    if (f->cur) st_loader_release(f->ld, f->cur);
    bind(f, f->own_x, f->own_y);
    const bool left =
        st_loader_free(f->ld); /* gives the ring back through ring_free: before the table goes */
    free(f->pins);
    free(f);
    return left;
}

void st_feed_set_trace(st_feed *f, struct st_trace *t) {
    if (f) f->trace = t;
}
