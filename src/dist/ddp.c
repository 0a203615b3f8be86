/* DDP: the start-of-run agreement and bucketed, overlapped gradient
 * all-reduce (see ddp.h). */
#include "ddp.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agree.h"
#include "core/device.h"
#include "core/rng.h"
#include "zero.h"

double st_dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

st_status st_ddp_init(st_ddp *d, st_comm *comm, st_params *p, const st_graph *g, double cap_mb, int64_t shard,
                      st_comm_redop op, bool release) {
    memset(d, 0, sizeof *d);
    d->comm = comm;
    d->p = p;
    d->shard = shard;
    d->op = shard ? op : ST_COMM_AVG;
    d->release = shard && release;
    int *first_use = malloc((size_t)(p->n ? p->n : 1) * sizeof *first_use);
    d->b = calloc((size_t)(p->n ? p->n : 1), sizeof *d->b);
    if (!first_use || !d->b) {
        free(first_use);
        return st_fail(ST_ERR_NOMEM, "out of memory planning gradient buckets");
    }
    /* A parameter nobody uses gets no gradient: it is final at once. */
    for (int i = 0; i < p->n; i++)
        first_use[i] = INT_MAX;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const st_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_params; k++)
            if (n->params[k]->kind == ST_TENSOR_PARAM) first_use[n->params[k]->index] = i;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k]->kind == ST_TENSOR_PARAM) first_use[n->in[k]->index] = i;
    }
    /* A bucket holds at most an eighth of the model's gradients (but 64 KiB
     * at least): the last bucket, with the first layers' gradients (and a
     * tied embedding's), can only start when backward ends, so none of its
     * all-reduce is hidden; a model under 8 x bucket_cap_mb would otherwise
     * put most of its gradients there (the bench cnn, 0.6 MiB, all of them
     * in one bucket). */
    int64_t total = 0;
    for (int i = 0; i < p->n; i++)
        if (p->t[i]->kind == ST_TENSOR_PARAM) total += p->t[i]->count;
    const int64_t eighth = total / 8 > 16384 ? total / 8 : 16384;
    int64_t cap = cap_mb > 0 ? (int64_t)(cap_mb * 1024.0 * 1024.0 / sizeof(float)) : 1;
    if (cap > eighth) cap = eighth;
    /* The first bucket holds the gradients backward finishes first; capping it
     * at 1 MiB (as PyTorch DDP does) starts communication early even when the
     * whole model would fit in one bucket. */
    const int64_t first_cap = cap < (1 << 20) / (int64_t)sizeof(float) ? cap : (1 << 20) / (int64_t)sizeof(float);
    st_ddp_bucket *cur = NULL;
    for (int i = p->n - 1; i >= 0; i--) {
        const st_tensor *t = p->t[i];
        if (t->kind != ST_TENSOR_PARAM) continue;
        if (!cur || cur->count >= (d->n_buckets == 1 ? first_cap : cap)) {
            cur = &d->b[d->n_buckets];
            snprintf(cur->name, sizeof cur->name, "grad bucket %d", d->n_buckets);
            d->n_buckets++;
            cur->offset = t->offset + t->count;
            cur->ready_at = INT_MAX;
        }
        /* The arena is packed in declaration order: the bucket grows downwards. */
        cur->count += cur->offset - t->offset;
        cur->offset = t->offset;
        if (first_use[i] < cur->ready_at) cur->ready_at = first_use[i];
    }
    free(first_use);
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        b->n_req = 1;
        if (shard) {
            b->first_owner = (int)(b->offset / shard);
            b->n_req = (int)((b->offset + b->count - 1) / shard) - b->first_owner + 1;
        }
        b->req = calloc((size_t)b->n_req, sizeof *b->req);
        if (!b->req) {
            st_ddp_free(d);
            return st_fail(ST_ERR_NOMEM, "out of memory planning gradient buckets");
        }
    }
    return ST_OK;
}

void st_ddp_free(st_ddp *d) {
    if (!d) return;
    for (int i = 0; d->b && i < d->n_buckets; i++)
        free(d->b[i].req);
    free(d->b);
    if (d->half) st_device_release(d->p->dev, d->half);
    memset(d, 0, sizeof *d);
}

st_status st_ddp_set_grad_dtype(st_ddp *d, st_precision dt) {
    d->grad_dtype = dt;
    if (dt == ST_PREC_FP32 || d->half) return ST_OK;
    /* beside the gradients: host memory, or the device's */
    void *h = NULL;
    if (st_device_alloc(d->p->dev, (size_t)(d->p->count ? d->p->count : 1) * sizeof *d->half, &h) != ST_OK)
        return st_fail(ST_ERR_NOMEM, "out of %s memory for the 16-bit gradient buckets (dist.grad_dtype): %s",
                       d->p->dev ? "device" : "host", st_last_error());
    d->half = h;
    return ST_OK;
}

/* 16-bit buckets: the average's division first, in fp32 (a smaller range
 * for fp16 to hold), one rounding to 16 bits, then 16-bit sums over the
 * ranks: the bucket's all-reduce, or under ZeRO-1 each piece's reduction to
 * its owner. */
static st_comm_dtype half_dtype(const st_ddp *d) { return d->grad_dtype == ST_PREC_BF16 ? ST_COMM_BF16 : ST_COMM_F16; }

/* Under ZeRO the piece of bucket b in rank r's shard: [*lo, *hi). */
static void piece(const st_ddp *d, const st_ddp_bucket *b, int r, int64_t *lo, int64_t *hi) {
    *lo = b->offset > r * d->shard ? b->offset : r * d->shard;
    *hi = b->offset + b->count < (r + 1) * d->shard ? b->offset + b->count : (r + 1) * d->shard;
}

static st_status start_bucket(st_ddp *d, st_ddp_bucket *b) {
    b->mark = st_trace_begin_async(d->trace, ST_TRACE_TID_BUCKET + (int)(b - d->b), "comm", b->name);
    b->t_start = b->mark.t0;
    if (d->t_first_start == 0) d->t_first_start = b->t_start;
    b->started = true;
    b->done = false;
    b->released = false;
    float *g = d->p->grad;
    const bool half = d->grad_dtype != ST_PREC_FP32;
    if (half) /* (count): the bucket divided and rounded, beside the gradients */
        ST_TRY(st_device_div_to_16(d->p->dev, d->grad_dtype, d->half + b->offset, g + b->offset, (size_t)b->count,
                                   (float)st_comm_size(d->comm)));
    if (!d->shard) {
        if (half)
            return st_comm_all_reduce(d->comm, d->half + b->offset, d->half + b->offset, (size_t)b->count,
                                      half_dtype(d), ST_COMM_SUM, b->name, &b->req[0]);
        return st_comm_all_reduce(d->comm, g + b->offset, g + b->offset, (size_t)b->count, ST_COMM_F32,
                                  ST_COMM_AVG, b->name, &b->req[0]);
    }
    for (int i = 0; i < b->n_req; i++) {
        const int r = b->first_owner + i;
        int64_t lo, hi;
        piece(d, b, r, &lo, &hi);
        char name[48];
        snprintf(name, sizeof name, "%s to rank %d", b->name, r);
        if (half)
            ST_TRY(st_comm_reduce(d->comm, d->half + lo, d->half + lo, (size_t)(hi - lo), half_dtype(d), ST_COMM_SUM,
                                  r, name, &b->req[i]));
        else
            ST_TRY(st_comm_reduce(d->comm, g + lo, g + lo, (size_t)(hi - lo), ST_COMM_F32, d->op, r, name,
                                  &b->req[i]));
    }
    return ST_OK;
}

/* Stage 2: the parts of b outside this rank's shard, once reduced. */
static void release_bucket(st_ddp *d, st_ddp_bucket *b) {
    const int64_t own_lo = (int64_t)st_comm_rank(d->comm) * d->shard, own_hi = own_lo + d->shard;
    const int64_t lo = b->offset, hi = b->offset + b->count;
    st_pages_release(d->p->grad, lo, hi < own_lo ? hi : own_lo);
    st_pages_release(d->p->grad, lo > own_hi ? lo : own_hi, hi);
    b->released = true;
}

static st_status backward_hook(void *ctx, int node) {
    st_ddp *d = ctx;
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        if (!b->started && b->ready_at >= node) ST_TRY(start_bucket(d, b));
    }
    ST_TRY(st_comm_progress(d->comm));
    /* Which buckets have completed, and when (for the hidden fraction; a
     * bucket completes only in some rank's progress call, so this rank sees
     * it here, at the latest one layer late). */
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        if (!b->started || b->done) continue;
        bool all = true;
        for (int k = 0; k < b->n_req && all; k++) {
            bool done = true;
            if (b->req[k]) ST_TRY(st_comm_test(&b->req[k], &done));
            all = done;
        }
        if (!all) continue;
        b->done = true;
        b->t_done = st_dist_now();
        if (d->release) release_bucket(d, b);
    }
    if (!d->release) return ST_OK;
    int64_t res = st_pages_resident(d->p->grad, d->p->arena_count * (int64_t)sizeof(float));
    if (res > d->peak_resident) d->peak_resident = res;
    return ST_OK;
}

/* The union of the buckets' [t_start, t_done] (they start in about bucket
 * order and may overlap): its length, and its part before backward ended. */
static void busy_time(st_ddp *d) {
    double end = -1.0;
    for (int n = 0; n < d->n_buckets; n++) {
        const st_ddp_bucket *b = NULL; /* the next to start at or after the last one taken */
        for (int i = 0; i < d->n_buckets; i++) {
            const st_ddp_bucket *c = &d->b[i];
            if (c->t_done > end && (!b || c->t_start < b->t_start)) b = c;
        }
        if (!b) break;
        const double lo = b->t_start > end ? b->t_start : end, hi = b->t_done;
        d->busy_s += hi - lo;
        if (d->t_backward_end > lo) d->busy_hidden_s += (d->t_backward_end < hi ? d->t_backward_end : hi) - lo;
        end = hi;
    }
}

void st_ddp_arm(st_ddp *d, st_graph *g) {
    d->t_first_start = 0;
    for (int i = 0; i < d->n_buckets; i++)
        d->b[i].started = false;
    g->backward_hook = backward_hook;
    g->backward_hook_ctx = d;
}

st_status st_ddp_finish(st_ddp *d, st_graph *g) {
    g->backward_hook = NULL;
    g->backward_hook_ctx = NULL;
    const st_trace_mark wait = st_trace_begin(d->trace, ST_TRACE_TID_STEP, "comm", "all-reduce wait");
    d->t_backward_end = wait.t0;
    for (int i = 0; i < d->n_buckets; i++)
        if (!d->b[i].started) ST_TRY(start_bucket(d, &d->b[i]));
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        for (int k = 0; k < b->n_req; k++)
            ST_TRY(st_comm_wait(&b->req[k]));
        st_trace_end(d->trace, &b->mark);
        if (!b->done) {
            b->done = true;
            b->t_done = st_dist_now();
        }
        if (d->release && !b->released) release_bucket(d, b);
    }
    if (d->grad_dtype != ST_PREC_FP32) /* the 16-bit sums back into the fp32 gradients (under ZeRO, this shard's) */
        for (int i = 0; i < d->n_buckets; i++) {
            int64_t lo = d->b[i].offset, hi = lo + d->b[i].count;
            if (d->shard) piece(d, &d->b[i], st_comm_rank(d->comm), &lo, &hi);
            if (hi > lo)
                ST_TRY(st_device_from_16(d->p->dev, d->grad_dtype, d->p->grad + lo, d->half + lo, (size_t)(hi - lo)));
        }
    const double t_done = st_trace_end(d->trace, &wait);
    d->wait_s += t_done - d->t_backward_end;
    d->span_s += t_done - d->t_first_start;
    d->hidden_s += d->t_backward_end > d->t_first_start ? d->t_backward_end - d->t_first_start : 0;
    busy_time(d);
    d->syncs++;
    return ST_OK;
}

/* ---- the agreement before the first step ---------------------------------- */

/* The counts first (the per-tensor comparison needs equal counts), then the
 * tensors: a shape difference is named by tensor, not by a total. */
enum { N_HEAD = 5, DESC_MAX = ST_AGREE_DESC_MAX };
static const char *const head_names[N_HEAD] = {"parameter tensors", "buffers", "train.batch_size",
                                               "train.micro_batch_size", "training samples"};

static int64_t tensor_hash(const st_tensor *t) {
    uint64_t h = st_hash_str(t->name) ^ (uint64_t)t->kind;
    for (int i = 0; i < t->ndim; i++)
        h = st_mix64(h ^ (uint64_t)t->shape[i]);
    return (int64_t)(h >> 2); /* non-negative, so min and max never overflow */
}

static void describe_tensor(const st_tensor *t, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s %s [", t->kind == ST_TENSOR_PARAM ? "parameter" : "buffer", t->name);
    for (int i = 0; i < t->ndim && k > 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

static st_status report(st_comm *c, const char *item, const char *mine) {
    return st_agree_report(c, "the ranks built different models or data settings", item, mine,
                           "every rank must run the same config and data");
}

st_status st_ddp_agree(st_comm *comm, st_comm *pcomm, st_params *p, int64_t batch, int64_t micro,
                       int64_t n_samples) {
    int64_t head[N_HEAD] = {p->n_params, p->n - p->n_params, batch, micro, n_samples};
    int diff;
    ST_TRY(st_agree_first_difference(comm, head, N_HEAD, "signature", &diff));
    char desc[DESC_MAX];
    if (diff >= 0) {
        snprintf(desc, sizeof desc, "%lld", (long long)head[diff]);
        return report(comm, head_names[diff], desc);
    }
    int64_t *h = malloc((size_t)(p->n ? p->n : 1) * sizeof *h);
    if (!h) return st_fail(ST_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p->n; i++)
        h[i] = tensor_hash(p->t[i]);
    st_status s = st_agree_first_difference(comm, h, p->n, "signature of tensors", &diff);
    free(h);
    ST_TRY(s);
    if (diff >= 0) {
        char item[64];
        snprintf(item, sizeof item, "tensor %d (in declaration order)", diff);
        describe_tensor(p->t[diff], desc, sizeof desc);
        return report(comm, item, desc);
    }
    ST_TRY(st_comm_broadcast_sync(pcomm, p->data, (size_t)p->arena_count, ST_COMM_F32, 0, "parameters"));
    if (p->buffer_count)
        ST_TRY(st_comm_broadcast_sync(pcomm, p->buffers, (size_t)p->buffer_count, ST_COMM_F32, 0, "buffers"));
    st_params_touch(p);
    return ST_OK;
}
