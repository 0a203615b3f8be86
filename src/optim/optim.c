/* AdamW, SGD, schedules and clipping (see optim.h). */
#include "optim.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

st_status st_optim_init(st_optim *o, const st_config *cfg, const st_params *p) {
    return st_optim_init_range(o, cfg, p, 0, p->arena_count);
}

int64_t st_optim_state_nbytes(const st_optim *o) {
    return (o->m ? o->count : 0) * 4 + (o->v ? o->count : 0) * 4;
}

/* The range stops at p->count on a device: the arena's tail past it is
 * alignment and shard padding, never trained. */
static void clamp_range(st_optim *o, const st_params *p) {
    if (o->hi > p->count) o->hi = p->count;
    if (o->lo > o->hi) o->lo = o->hi;
    o->count = o->hi - o->lo;
}

/* m (and v for AdamW) in host memory, zeroed. */
static st_status alloc_host_state(st_optim *o) {
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float);
    o->m = st_alloc_aligned(nbytes);
    if (o->kind == ST_OPTIM_ADAMW) o->v = st_alloc_aligned(nbytes);
    if (!o->m || (o->kind == ST_OPTIM_ADAMW && !o->v))
        return st_fail(ST_ERR_NOMEM,
                       "out of host memory for the optimizer state (%.1f MiB: %s); shard it over more ranks "
                       "(dist.strategy: zero1 or zero2)",
                       (o->kind == ST_OPTIM_ADAMW ? 2.0 : 1.0) * (double)nbytes / (1 << 20),
                       o->kind == ST_OPTIM_ADAMW ? "AdamW's two moments" : "SGD's momentum");
    memset(o->m, 0, nbytes);
    if (o->v) memset(o->v, 0, nbytes);
    return ST_OK;
}

#ifdef ST_HAVE_CUDA

struct st_optim_offload {
    st_device *dev; /* the parameters' */
    float *w, *g;   /* (count) host: the range's master weights, its gradients */
    bool pinned;    /* w and g from cudaHostAlloc (else pageable: the copies then wait) */
    bool pull;      /* w is read from the device at the next update */
    int64_t chunk;  /* elements per copy */
    int n_chunks;
    st_cuda_event *ready; /* the gradients final on the compute stream */
    st_cuda_event **ev;   /* (n_chunks) chunk k's gradients (and weights, when pulling) are on the host */
    st_cuda_event *up;    /* the step's last upload of weights (the copy stream) */
    /* Copies during backward (st_optim_offload_arm): */
    int *ready_at;           /* (n_chunks) the node whose backward writes chunk k's gradients last */
    int *order;              /* (n_chunks) the chunks as backward finishes them: ready_at descending */
    st_params *p;            /* the armed step's parameters */
    bool armed;              /* this step's copies are queued by backward's hook */
    int queued;              /* how many of order[] are queued */
    float gscale;            /* the clip's factor, applied by the host as it reads the gradients (1: none) */
    double *norm_out;        /* armed, not clipping: where the update puts the logged norm once it is done */
    int64_t chunks_early, chunks_all; /* over the run: copies queued during backward, and all */
};

static void free_offload(struct st_optim_offload *f) {
    if (!f) return;
    for (int k = 0; f->ev && k < f->n_chunks; k++)
        st_cuda_event_free(f->ev[k]);
    free(f->ev);
    free(f->ready_at);
    free(f->order);
    st_cuda_event_free(f->ready);
    st_cuda_event_free(f->up);
    if (f->pinned) {
        st_cuda_host_free(f->w);
        st_cuda_host_free(f->g);
    } else {
        st_free_aligned(f->w);
        st_free_aligned(f->g);
    }
    free(f);
}

/* The two copies' buffers: pinned, or pageable when pinned memory is refused
 * (the copies then wait for the host). */
static st_status alloc_copies(struct st_optim_offload *f, size_t nbytes) {
    f->pinned = st_cuda_host_alloc(f->dev, nbytes, (void **)&f->w) == ST_OK &&
                st_cuda_host_alloc(f->dev, nbytes, (void **)&f->g) == ST_OK;
    if (f->pinned) return ST_OK;
    st_cuda_host_free(f->w);
    st_clear_error();
    f->w = st_alloc_aligned(nbytes);
    f->g = st_alloc_aligned(nbytes);
    return f->w && f->g
               ? ST_OK
               : st_fail(ST_ERR_NOMEM, "out of host memory for the offloaded optimizer's copies (%.1f MiB)",
                         2.0 * (double)nbytes / (1 << 20));
}

/* optim.offload: the state on the host, the copies' buffers and events, and
 * the device's norm kernels (o->cu) for st_optim_clip. */
static st_status init_offload(st_optim *o, const st_params *p) {
    clamp_range(o, p);
    struct st_optim_offload *f = calloc(1, sizeof *f);
    if (!f) return st_fail(ST_ERR_NOMEM, "out of memory for the offloaded optimizer");
    o->off = f;
    f->dev = p->dev;
    f->pull = true;
    f->gscale = 1.0f;
    /* An eighth of the range per chunk (so that copies and the host's work
     * overlap even on a small model), whole KiBs of elements, from 4096
     * elements (16 KiB) to 1 Mi (4 MiB: fewer, larger copies run at the
     * link's speed). */
    int64_t c = (o->count / 8 + 1023) / 1024 * 1024;
    f->chunk = c < 4096 ? 4096 : c > ((int64_t)1 << 20) ? (int64_t)1 << 20 : c;
    f->n_chunks = (int)((o->count + f->chunk - 1) / f->chunk);
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float);
    st_status s = alloc_host_state(o);
    if (s == ST_OK) s = alloc_copies(f, nbytes);
    const size_t nc = (size_t)(f->n_chunks ? f->n_chunks : 1);
    if (s == ST_OK &&
        (!(f->ev = calloc(nc, sizeof *f->ev)) || !(f->ready_at = calloc(nc, sizeof *f->ready_at)) ||
         !(f->order = calloc(nc, sizeof *f->order))))
        s = st_fail(ST_ERR_NOMEM, "out of memory for the offloaded optimizer");
    if (s == ST_OK) s = st_cuda_event_create(f->dev, false, &f->ready);
    if (s == ST_OK) s = st_cuda_event_create(f->dev, false, &f->up);
    for (int k = 0; s == ST_OK && k < f->n_chunks; k++)
        s = st_cuda_event_create(f->dev, false, &f->ev[k]);
    if (s == ST_OK) s = st_cuda_optim_create(f->dev, p, o->lo, o->hi, &o->cu);
    if (s != ST_OK) {
        st_fail_context(s, "the optimizer offloaded from %s: ", st_device_name(f->dev));
        st_optim_free(o);
    }
    return s;
}
#endif

/* The state on the parameters' device, zeroed, and the fused kernels' plan. */
static st_status init_device(st_optim *o, const st_params *p) {
    o->dev = p->dev;
    clamp_range(o, p);
#ifdef ST_HAVE_CUDA
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float);
    st_status s = st_device_alloc(o->dev, nbytes, (void **)&o->m);
    if (s == ST_OK && o->kind == ST_OPTIM_ADAMW) s = st_device_alloc(o->dev, nbytes, (void **)&o->v);
    if (s == ST_OK) s = st_device_zero(o->dev, o->m, nbytes);
    if (s == ST_OK && o->v) s = st_device_zero(o->dev, o->v, nbytes);
    if (s == ST_OK) s = st_cuda_optim_create(o->dev, p, o->lo, o->hi, &o->cu);
    if (s != ST_OK) {
        st_fail_context(s, "the optimizer state (%.1f MiB): ",
                        (double)nbytes * (o->kind == ST_OPTIM_ADAMW ? 2 : 1) / (1 << 20));
        st_optim_free(o);
    }
    return s;
#else
    st_optim_free(o);
    return st_fail(ST_ERR_UNSUPPORTED,
                   "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_init_range(st_optim *o, const st_config *cfg, const st_params *p, int64_t lo, int64_t hi) {
    memset(o, 0, sizeof *o);
    if (lo < 0 || hi < lo || hi > p->arena_count)
        return st_fail(ST_ERR_INTERNAL, "optimizer range [%lld, %lld) is outside the arena of %lld",
                       (long long)lo, (long long)hi, (long long)p->arena_count);
    o->lo = lo;
    o->hi = hi;
    o->kind = strcmp(cfg->optim.type, "sgd") == 0 ? ST_OPTIM_SGD : ST_OPTIM_ADAMW;
    o->weight_decay = cfg->optim.weight_decay;
    o->beta1 = cfg->optim.beta1;
    o->beta2 = cfg->optim.beta2;
    o->eps = cfg->optim.eps;
    o->momentum = cfg->optim.momentum;
    o->nesterov = cfg->optim.nesterov;
#ifdef ST_HAVE_CUDA
    if (p->dev && cfg->optim.offload) return init_offload(o, p);
#endif
    if (p->dev) return init_device(o, p);
    o->count = hi - lo;
    st_status s = alloc_host_state(o);
    if (s != ST_OK) st_optim_free(o);
    return s;
}

void st_optim_free(st_optim *o) {
    if (!o) return;
    if (o->dev) {
        st_device_release(o->dev, o->m);
        st_device_release(o->dev, o->v);
    } else {
        st_free_aligned(o->m);
        st_free_aligned(o->v);
    }
#ifdef ST_HAVE_CUDA
    st_cuda_optim_free(o->cu);
    free_offload(o->off);
#endif
    memset(o, 0, sizeof *o);
}

void st_optim_params_written(st_optim *o) {
#ifdef ST_HAVE_CUDA
    if (o->off) o->off->pull = true;
#else
    (void)o;
#endif
}

/* w, g, m, v: (n) the elements of one tensor (or of its part in the range). */
static void adamw_tensor(const st_optim *o, const st_tensor *t, float *w, const float *g, float gs, int64_t n,
                         float *m, float *v, double lr) {
    const float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    /* 1 - beta in double, then rounded (as PyTorch passes it): in float,
     * a beta2 of 0.99999999 rounds to 1 and 1 - b2 to 0, and v never grew */
    const float omb1 = (float)(1.0 - o->beta1), omb2 = (float)(1.0 - o->beta2);
    const double bc1 = 1.0 - pow(o->beta1, (double)o->t), bc2 = 1.0 - pow(o->beta2, (double)o->t);
    const float step = (float)(lr / bc1), rbc2 = (float)(1.0 / sqrt(bc2));
    const float decay = t->decay ? (float)(1.0 - lr * o->weight_decay) : 1.0f;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * gs; /* (gs 1: g itself; else the clip, as the device's clip kernel) */
        w[i] *= decay;
        m[i] = b1 * m[i] + omb1 * gi;
        v[i] = b2 * v[i] + omb2 * gi * gi;
        w[i] -= step * m[i] / (sqrtf(v[i]) * rbc2 + eps);
    }
}

static void sgd_tensor(const st_optim *o, const st_tensor *t, float *w, const float *g, float gs, int64_t n,
                       float *buf, double lr) {
    const float mu = (float)o->momentum, wd = t->decay ? (float)o->weight_decay : 0.0f;
    const float flr = (float)lr;
    const bool first = o->t == 1, nesterov = o->nesterov;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        float d = gi + wd * w[i];
        if (mu != 0.0f) {
            buf[i] = first ? d : mu * buf[i] + d;
            d = nesterov ? d + mu * buf[i] : buf[i];
        }
        w[i] -= flr * d;
    }
}

/* Elements [a, b) of o's range from arrays whose [0] is element a: the
 * weights w, gradients g (times gs as they are read) and the state's m and
 * v (v NULL for SGD). */
static void step_slice(const st_optim *o, const st_params *p, int64_t a, int64_t b, float *w, const float *g,
                       float gs, float *m, float *v, double lr) {
    ST_INVARIANT(o->kind != ST_OPTIM_ADAMW || v, "AdamW without its second moments"); /* st_optim_init */
    for (int i = 0; i < p->n; i++) {
        const st_tensor *t = p->t[i];
        if (t->kind != ST_TENSOR_PARAM) continue;
        const int64_t x = t->offset > a ? t->offset : a;
        const int64_t y = t->offset + t->count < b ? t->offset + t->count : b;
        if (x >= y) continue;
        const int64_t k = x - a;
        if (o->kind == ST_OPTIM_ADAMW)
            adamw_tensor(o, t, w + k, g + k, gs, y - x, m + k, v + k, lr);
        else
            sgd_tensor(o, t, w + k, g + k, gs, y - x, m + k, lr);
    }
}

void st_optim_step(st_optim *o, st_params *p, double lr) {
    o->t++;
    step_slice(o, p, o->lo, o->hi, p->data + o->lo, st_params_grad(p, o->lo), 1.0f, o->m, o->v, lr);
    st_params_touch(p); /* the bf16/fp16 compute copy is refreshed before the next forward */
}

#ifdef ST_HAVE_CUDA
/* optim.offload's update (optim.h): gradients down in chunks on the
 * device-to-host stream, each chunk updated on the host as it arrives and
 * its weights queued up on the copy stream at once (on one rank, while
 * backward still runs: a chunk's weights are read last by the backward of
 * the node after which its gradients came down). The compute stream then
 * waits for the last upload (`up`), so the next forward, ZeRO's all-gather
 * and the compute copy's refresh see the new weights, and the host writes
 * chunk k of f->w only after chunk k's event, which follows (through
 * `ready` and `up`) the previous step's upload of chunk k. */
/* Chunk k of the range: its length, and (*j) its first element's index
 * within the range (the arena's element o->lo + *j). */
static int64_t chunk_at(const st_optim *o, int k, int64_t *j) {
    *j = k * o->off->chunk;
    return o->count - *j < o->off->chunk ? o->count - *j : o->off->chunk;
}

/* Chunk k's gradients (and its weights, when pulling) down on the
 * device-to-host stream after everything queued on the compute stream so
 * far; ev[k] after. */
static st_status queue_chunk(st_optim *o, st_params *p, int k) {
    struct st_optim_offload *f = o->off;
    st_device *d = f->dev;
    int64_t j;
    const size_t nb = (size_t)chunk_at(o, k, &j) * sizeof(float);
    ST_TRY(st_cuda_event_record(d, f->ready, ST_CUDA_STREAM_COMPUTE));
    ST_TRY(st_cuda_stream_wait_event(d, ST_CUDA_STREAM_D2H, f->ready));
    if (f->pull)
        ST_TRY(st_cuda_memcpy_async(d, f->w + j, st_params_master(p, o->lo + j), nb, ST_CUDA_STREAM_D2H));
    ST_TRY(st_cuda_memcpy_async(d, f->g + j, st_params_grad(p, o->lo + j), nb, ST_CUDA_STREAM_D2H));
    return st_cuda_event_record(d, f->ev[k], ST_CUDA_STREAM_D2H);
}

static st_status offload_update(st_optim *o, st_params *p, double lr) {
    struct st_optim_offload *f = o->off;
    st_device *d = f->dev;
    o->t++;
    /* armed: backward's hook queued the chunks in order[] as it finished
     * them (all of them by its last node; any left, now); else in the
     * arena's order, now */
    const bool armed = f->armed;
    const float gs = f->gscale;
    f->armed = false;
    f->gscale = 1.0f;
    f->chunks_early += armed ? f->queued : 0;
    f->chunks_all += f->n_chunks;
    for (int q = armed ? f->queued : 0; q < f->n_chunks; q++)
        ST_TRY(queue_chunk(o, p, armed ? f->order[q] : q));
    f->pull = false;
    for (int q = 0; q < f->n_chunks; q++) {
        int64_t j;
        const int k = armed ? f->order[q] : q;
        const int64_t n = chunk_at(o, k, &j), a = o->lo + j;
        ST_TRY(st_cuda_event_sync(d, f->ev[k]));
        step_slice(o, p, a, a + n, f->w + j, f->g + j, gs, o->m + j, o->v ? o->v + j : NULL, lr);
        ST_TRY(st_cuda_memcpy_async(d, st_params_master(p, a), f->w + j, (size_t)n * sizeof(float),
                                    ST_CUDA_STREAM_COPY));
    }
    ST_TRY(st_cuda_event_record(d, f->up, ST_CUDA_STREAM_COPY));
    ST_TRY(st_cuda_stream_wait_event(d, ST_CUDA_STREAM_COMPUTE, f->up));
    st_params_touch(p);
    if (f->norm_out) { /* (st_optim_clip's sum of squares, queued after backward) */
        double *norm = f->norm_out;
        f->norm_out = NULL;
        ST_TRY(st_cuda_grad_norm_read(o->cu, norm));
    }
    return ST_OK;
}

/* order[] entries sorted by ready_at descending, then by chunk index */
typedef struct {
    int ready, k;
} chunk_key;

static int by_ready_desc(const void *a, const void *b) {
    const chunk_key *x = a, *y = b;
    if (x->ready != y->ready) return x->ready > y->ready ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

/* For graph g: each chunk's ready_at, the lowest node that reads one of its
 * parameters (backward runs the nodes downwards, so that node's backward
 * writes the chunk's gradients last; INT_MAX when none does), and order[],
 * the chunks by ready_at descending. Linear in nodes, tensors and chunks. */
static st_status plan_chunks(struct st_optim_offload *f, const st_optim *o, const st_params *p,
                             const st_graph *g) {
    int *first_use = malloc((size_t)(p->n ? p->n : 1) * sizeof *first_use);
    chunk_key *key = malloc((size_t)(f->n_chunks ? f->n_chunks : 1) * sizeof *key);
    if (!first_use || !key) {
        free(first_use);
        free(key);
        return st_fail(ST_ERR_NOMEM, "out of memory planning the offloaded copies");
    }
    for (int i = 0; i < p->n; i++)
        first_use[i] = INT_MAX;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const st_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_params + n->n_in; k++) {
            const st_tensor *t = k < n->n_params ? n->params[k] : n->in[k - n->n_params];
            if (t->kind == ST_TENSOR_PARAM && t->index >= 0 && t->index < p->n) first_use[t->index] = i;
        }
    }
    for (int k = 0; k < f->n_chunks; k++)
        f->ready_at[k] = INT_MAX;
    for (int i = 0; i < p->n; i++) { /* each tensor's part of the range: the chunks it overlaps */
        const st_tensor *t = p->t[i];
        const int64_t a = t->offset > o->lo ? t->offset : o->lo;
        const int64_t b = t->offset + t->count < o->hi ? t->offset + t->count : o->hi;
        if (t->kind != ST_TENSOR_PARAM || a >= b) continue;
        for (int64_t k = (a - o->lo) / f->chunk; k <= (b - 1 - o->lo) / f->chunk; k++)
            if (first_use[i] < f->ready_at[k]) f->ready_at[k] = first_use[i];
    }
    for (int k = 0; k < f->n_chunks; k++)
        key[k] = (chunk_key){f->ready_at[k], k};
    qsort(key, (size_t)f->n_chunks, sizeof *key, by_ready_desc);
    for (int k = 0; k < f->n_chunks; k++)
        f->order[k] = key[k].k;
    free(first_use);
    free(key);
    return ST_OK;
}

/* Backward's hook while armed: after node `node`, the copies of every chunk
 * whose gradients are now final. */
static st_status offload_hook(void *ctx, int node) {
    st_optim *o = ctx;
    struct st_optim_offload *f = o->off;
    for (; f->queued < f->n_chunks && f->ready_at[f->order[f->queued]] >= node; f->queued++)
        ST_TRY(queue_chunk(o, f->p, f->order[f->queued]));
    return ST_OK;
}
#endif

st_status st_optim_offload_arm(st_optim *o, st_params *p, st_graph *g, bool *armed) {
    *armed = false;
#ifdef ST_HAVE_CUDA
    struct st_optim_offload *f = o->off;
    if (!f || g->backward_hook) return ST_OK;
    ST_TRY(plan_chunks(f, o, p, g)); /* (every step: linear, and never stale) */
    f->p = p;
    f->armed = *armed = true;
    f->queued = 0;
    f->gscale = 1.0f;
    f->norm_out = NULL;
    g->backward_hook = offload_hook;
    g->backward_hook_ctx = o;
#else
    (void)o;
    (void)p;
    (void)g;
#endif
    return ST_OK;
}

double st_optim_offload_early(const st_optim *o) {
#ifdef ST_HAVE_CUDA
    const struct st_optim_offload *f = o->off;
    return f && f->chunks_all ? (double)f->chunks_early / (double)f->chunks_all : 0.0;
#else
    (void)o;
    return 0.0;
#endif
}

st_status st_optim_update(st_optim *o, st_params *p, double lr, int64_t step) {
#ifdef ST_HAVE_CUDA
    if (o->off) return offload_update(o, p, lr);
#endif
    if (!o->dev) {
        st_optim_step(o, p, lr);
        return ST_OK;
    }
#ifdef ST_HAVE_CUDA
    o->t++;
    /* In the same pass: the clip st_optim_clip left to it, and the 16-bit
     * compute copy when this range is all of it and it was current (a
     * ZeRO shard's part is refreshed and gathered by st_dist_step_end). */
    st_cuda_update_fuse fx = {NULL, 0.0, NULL, p->precision, o->halt, step};
    if (o->clip_pending > 0) fx.clip_sumsq = st_cuda_optim_sumsq(o->cu), fx.max_norm = o->clip_pending;
    o->clip_pending = 0;
    const bool copy = p->compute16 && o->lo == 0 && o->hi >= p->count && p->compute_version == p->version;
    if (copy) fx.w16 = p->compute16;
    st_status s;
    if (o->kind == ST_OPTIM_ADAMW) {
        const st_cuda_adamw_hp hp = {lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->t};
        s = st_cuda_adamw_step(o->cu, st_params_master(p, o->lo), st_params_grad(p, o->lo), o->m, o->v, &hp,
                               &fx);
    } else {
        const st_cuda_sgd_hp hp = {lr, o->momentum, o->weight_decay, o->nesterov, o->t};
        s = st_cuda_sgd_step(o->cu, st_params_master(p, o->lo), st_params_grad(p, o->lo), o->m, &hp, &fx);
    }
    st_params_touch(p);
    if (copy && s == ST_OK) p->compute_version = p->version; /* written with the masters */
    return s;
#else
    (void)p;
    (void)lr;
    return st_fail(ST_ERR_UNSUPPORTED,
                   "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_clip(st_optim *o, st_params *p, double max_norm, double *norm, st_optim_across across,
                        void *ctx) {
    if (!o->dev && !o->off) {
        if (across || o->lo != 0 || o->hi != p->count)
            return st_fail(ST_ERR_INTERNAL,
                           "st_optim_clip: a host optimizer's shard (ZeRO clips through dist.h)");
        const double n = st_grad_norm(p);
        if (max_norm > 0 && n > max_norm) st_grad_scale(p, (float)(max_norm / (n + 1e-6)));
        if (norm) *norm = n;
        return ST_OK;
    }
#ifdef ST_HAVE_CUDA
    if (max_norm <= 0 && !norm) return ST_OK;
    /* The sum of squares stays on the device; clipping reads it there, and
     * only a logged norm comes back. */
    ST_TRY(st_cuda_grad_sumsq(o->cu, st_params_grad(p, o->lo), o->count));
    if (across) ST_TRY(across(ctx, st_cuda_optim_sumsq(o->cu)));
    if (o->off && o->off->armed && max_norm <= 0) {
        /* Nothing to clip: a logged norm is read after the host's update,
         * which would otherwise wait here for backward's end. */
        o->off->norm_out = norm;
        return ST_OK;
    }
    if (o->off && o->off->armed) {
        /* The copies were queued during backward and may still be reading
         * the gradients: they are not clipped here; the host scales them as
         * it reads them, by the device clip's factor (its test and value). */
        double n = 0;
        ST_TRY(st_cuda_grad_norm_read(o->cu, &n));
        if (max_norm > 0 && n > max_norm) o->off->gscale = (float)(max_norm / (n + 1e-6));
        if (norm) *norm = n;
        return ST_OK;
    }
    /* offloaded: the host reads the gradients clipped; else the update clips them as it reads them */
    if (max_norm > 0 && o->off)
        ST_TRY(st_cuda_grad_clip(o->cu, st_params_grad(p, o->lo), o->count, max_norm));
    if (max_norm > 0 && !o->off) o->clip_pending = max_norm;
    if (norm) ST_TRY(st_cuda_grad_norm_read(o->cu, norm));
    return ST_OK;
#else
    (void)p;
    (void)max_norm;
    (void)norm;
    (void)across;
    (void)ctx;
    return st_fail(ST_ERR_UNSUPPORTED,
                   "optimizer: the parameters are on a device but this build has no CUDA");
#endif
}

st_status st_optim_copy_to_host(const st_optim *o, st_optim *host) {
    *host = *o;
    host->dev = NULL;
    host->cu = NULL;
    host->off = NULL;
    host->m = host->v = NULL;
    const size_t nbytes = (size_t)(o->count ? o->count : 1) * sizeof(float),
                 used = (size_t)o->count * sizeof(float);
    host->m = st_alloc_aligned(nbytes);
    if (o->v) host->v = st_alloc_aligned(nbytes);
    st_status s =
        !host->m || (o->v && !host->v)
            ? st_fail(ST_ERR_NOMEM, "out of memory copying the optimizer state (%.1f MiB) to the host",
                      2.0 * (double)nbytes / (1 << 20))
            : ST_OK;
    if (s == ST_OK && !o->dev) { /* a host state (offload's too): a copy */
        if (used) memcpy(host->m, o->m, used);
        if (used && o->v) memcpy(host->v, o->v, used);
    } else if (s == ST_OK) {
        s = st_device_download(o->dev, host->m, o->m, used);
        if (s == ST_OK && o->v) s = st_device_download(o->dev, host->v, o->v, used);
    }
    if (s != ST_OK) st_optim_free(host);
    return s;
}

st_status st_optim_copy_from_host(st_optim *o, const st_optim *host) {
    if (host->kind != o->kind || host->lo != o->lo || host->hi != o->hi ||
        (host->v == NULL) != (o->v == NULL))
        return st_fail(ST_ERR_INTERNAL,
                       "optimizer state of another kind or range: [%lld, %lld), this one [%lld, %lld)",
                       (long long)host->lo, (long long)host->hi, (long long)o->lo, (long long)o->hi);
    const size_t used = (size_t)o->count * sizeof(float);
    ST_TRY(st_device_upload(o->dev, o->m, host->m, used));
    if (o->v) ST_TRY(st_device_upload(o->dev, o->v, host->v, used));
    o->t = host->t;
    return ST_OK;
}

double st_lr_at(const st_config *cfg, int64_t step, int64_t total) {
    const double lr = cfg->optim.lr_run > 0 ? cfg->optim.lr_run : cfg->optim.lr,
                 min_lr = lr * cfg->optim.min_lr;
    const int64_t warm = cfg->optim.warmup_steps;
    if (step < warm) return lr * (double)(step + 1) / (double)warm;
    if (strcmp(cfg->optim.schedule, "constant") == 0 || total <= warm) return lr;
    double progress = (double)(step - warm) / (double)(total - warm);
    if (progress > 1.0) progress = 1.0;
    if (strcmp(cfg->optim.schedule, "linear") == 0) return lr - (lr - min_lr) * progress;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}

double st_grad_norm(const st_params *p) {
    double s = 0;
    const float *g = p->grad;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < p->count; i++)
        s += (double)g[i] * g[i];
    return sqrt(s);
}

void st_grad_scale(st_params *p, float scale) {
    float *g = p->grad;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p->count; i++)
        g[i] *= scale;
}
