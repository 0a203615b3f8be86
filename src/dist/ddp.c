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

/* The buckets of graph g over p (d->b, d->n_buckets; d->shard set): each
 * with its range, the nodes that first write and finally complete it, and
 * its collectives' handles. bucket_of (p->n, may be NULL): each parameter
 * tensor's bucket. */
static st_status plan_buckets(st_ddp *d, const st_params *p, const st_graph *g, double cap_mb,
                              int *bucket_of) {
    int *first_use = malloc((size_t)(p->n ? p->n : 1) * sizeof *first_use);
    int *last_use = malloc((size_t)(p->n ? p->n : 1) * sizeof *last_use);
    d->b = calloc((size_t)(p->n ? p->n : 1), sizeof *d->b);
    if (!first_use || !last_use || !d->b) {
        free(first_use);
        free(last_use);
        return st_fail(ST_ERR_NOMEM, "out of memory planning gradient buckets");
    }
    ST_INVARIANT(p->n >= 0, "a negative parameter count");
    /* A parameter nobody uses gets no gradient: it is final at once. */
    for (int i = 0; i < p->n; i++) {
        first_use[i] = INT_MAX;
        last_use[i] = -1;
    }
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const st_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_params + n->n_in; k++) {
            const st_tensor *t = k < n->n_params ? n->params[k] : n->in[k - n->n_params];
            if (t->kind != ST_TENSOR_PARAM) continue;
            first_use[t->index] = i;
            if (last_use[t->index] < i) last_use[t->index] = i;
        }
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
            cur->written_from = -1;
        }
        /* The arena is packed in declaration order: the bucket grows downwards. */
        cur->count += cur->offset - t->offset;
        cur->offset = t->offset;
        if (first_use[i] < cur->ready_at) cur->ready_at = first_use[i];
        if (last_use[i] > cur->written_from) cur->written_from = last_use[i];
        if (bucket_of) bucket_of[i] = d->n_buckets - 1;
    }
    free(first_use);
    free(last_use);
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        /* unused parameters alone: staged before backward (it starts at once) */
        if (b->written_from < 0) b->written_from = g->n_nodes - 1;
        b->n_req = 1;
        if (d->shard) {
            b->first_owner = (int)(b->offset / d->shard);
            b->n_req = (int)((b->offset + b->count - 1) / d->shard) - b->first_owner + 1;
        }
        b->req = calloc((size_t)b->n_req, sizeof *b->req);
        if (!b->req) return st_fail(ST_ERR_NOMEM, "out of memory planning gradient buckets");
    }
    return ST_OK;
}

/* Staging regions are 256-byte aligned. A region is reused once the
 * bucket STAGE_SLACK places after its bucket in start order has started: its
 * reduction then had the backward of that bucket's layers to end in (a
 * layer's backward takes longer than reducing its gradients from a
 * micro-batch of a few thousand tokens on). */
#define STAGE_ALIGN 64
#define STAGE_SLACK 1

/* The staging plan (ddp.h): each bucket's region, the earlier buckets
 * whose regions it takes over, and the order the buckets are prepared in.
 * Time runs in backward order, t = the number of nodes already done; bucket
 * b holds its region from t(written_from) (its zeroing) to t(ready_at) of
 * the bucket STAGE_SLACK places after it in the order the buckets start, or
 * to the end of backward. Regions are placed first fit, in the order the
 * buckets are first written (the order they are prepared in), clear of the
 * buckets live at the same time (`active`: placed, not yet expired). A
 * bucket lists as `prev` only the latest occupants of the memory it takes
 * (`front`: placed buckets no later one has overlapped): an occupant
 * overlapped before was folded when the bucket that overlapped it was
 * prepared, which is earlier. So the lists stay short and planning is
 * linear in the buckets times the few live at once. */
static st_status plan_stage(st_ddp *d, int n_nodes) {
    const int nb = d->n_buckets, cap = nb ? nb : 1;
    int *order = malloc((size_t)cap * sizeof *order), *pos = malloc((size_t)cap * sizeof *pos);
    int *active = malloc((size_t)cap * sizeof *active), *front = malloc((size_t)cap * sizeof *front);
    int64_t *from = malloc((size_t)cap * sizeof *from), *until = malloc((size_t)cap * sizeof *until);
    st_status s = ST_OK;
    if (!order || !pos || !active || !front || !from || !until) {
        s = st_fail(ST_ERR_NOMEM, "out of memory planning the gradient staging");
        goto done;
    }
    /* the start order: ready_at descending (the hook starts the buckets at or above each node), then index */
    for (int i = 0; i < nb; i++)
        order[i] = i;
    for (int i = 1; i < nb; i++) /* (nearly sorted already: the buckets are numbered from the arena's end) */
        for (int j = i; j > 0 && d->b[order[j]].ready_at > d->b[order[j - 1]].ready_at; j--) {
            const int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    for (int i = 0; i < nb; i++)
        pos[order[i]] = i;
    for (int i = 0; i < nb; i++) {
        from[i] = n_nodes - 1 - d->b[i].written_from;
        const int k = pos[i] + STAGE_SLACK;
        if (k < nb) {
            const int r = d->b[order[k]].ready_at < n_nodes ? d->b[order[k]].ready_at : n_nodes - 1;
            until[i] = n_nodes - 1 - r;
        } else {
            until[i] = INT64_MAX; /* to the end of backward */
        }
    }
    /* placement (and preparation) in first-write order, then start order */
    for (int i = 1; i < nb; i++)
        for (int j = i; j > 0 && from[order[j]] < from[order[j - 1]]; j--) {
            const int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    d->stage_count = 0;
    int n_active = 0, n_front = 0;
    for (int i = 0; i < nb; i++) {
        const int ci = order[i];
        st_ddp_bucket *c = &d->b[ci];
        const int64_t size = (c->count + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
        int n = 0; /* the buckets still live when c's writes begin */
        for (int j = 0; j < n_active; j++)
            if (until[active[j]] >= from[ci]) active[n++] = active[j];
        n_active = n;
        /* the lowest offset clear of them */
        int64_t off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (int j = 0; j < n_active; j++) {
                const st_ddp_bucket *a = &d->b[active[j]];
                const int64_t end = a->stage + (a->count + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
                if (off < end && a->stage < off + size) {
                    off = end;
                    moved = true;
                }
            }
        }
        c->stage = off;
        if (off + size > d->stage_count) d->stage_count = off + size;
        /* the latest occupants of its memory (none is live: placed clear of those) */
        int n_prev = 0;
        for (int j = 0; j < n_front; j++) {
            const st_ddp_bucket *a = &d->b[front[j]];
            n_prev += off < a->stage + a->count && a->stage < off + size;
        }
        c->prev = malloc((size_t)(n_prev ? n_prev : 1) * sizeof *c->prev);
        if (!c->prev) {
            s = st_fail(ST_ERR_NOMEM, "out of memory planning the gradient staging");
            goto done;
        }
        n = 0;
        for (int j = 0; j < n_front; j++) {
            const st_ddp_bucket *a = &d->b[front[j]];
            if (off < a->stage + a->count && a->stage < off + size)
                c->prev[c->n_prev++] = front[j];
            else
                front[n++] = front[j];
        }
        n_front = n;
        front[n_front++] = ci;
        active[n_active++] = ci;
    }
    d->prep = order; /* the order prepare_buckets takes */
    order = NULL;
done:
    free(order);
    free(pos);
    free(active);
    free(front);
    free(from);
    free(until);
    return s;
}

st_status st_ddp_stage_count(const st_params *p, const st_graph *g, double cap_mb, int64_t *count) {
    st_ddp d;
    memset(&d, 0, sizeof d);
    st_status s = plan_buckets(&d, p, g, cap_mb, NULL);
    if (s == ST_OK) s = plan_stage(&d, g->n_nodes);
    *count = s == ST_OK ? d.stage_count : 0;
    st_ddp_free(&d);
    return s;
}

st_status st_ddp_init(st_ddp *d, st_comm *comm, st_params *p, const st_graph *g, double cap_mb, int64_t shard,
                      st_comm_redop op, st_ddp_grads grads) {
    memset(d, 0, sizeof *d);
    d->comm = comm;
    d->p = p;
    d->shard = shard;
    d->op = shard ? op : ST_COMM_AVG;
    d->grads = shard ? grads : ST_DDP_GRADS_WHOLE;
    const bool staged = d->grads == ST_DDP_GRADS_STAGED;
    if (staged && (!p->dev || !p->grads_sharded))
        return st_fail(ST_ERR_INTERNAL, "staged gradient buckets need sharded gradients on a device");
    int *bucket_of = staged ? calloc((size_t)(p->n ? p->n : 1), sizeof *bucket_of) : NULL;
    if (staged && !bucket_of) return st_fail(ST_ERR_NOMEM, "out of memory planning gradient buckets");
    st_status s = plan_buckets(d, p, g, cap_mb, bucket_of);
    if (s == ST_OK && staged) s = plan_stage(d, g->n_nodes);
    if (s == ST_OK && staged) {
        s = st_device_alloc(p->dev, (size_t)(d->stage_count ? d->stage_count : 1) * sizeof(float),
                            (void **)&d->stage);
        if (s != ST_OK)
            st_fail_context(s, "the gradient buckets' staging (%.1f MiB, dist.bucket_cap_mb): ",
                            (double)d->stage_count * 4 / (1 << 20));
    }
    if (s == ST_OK && staged) /* backward writes the buckets' regions */
        for (int i = 0; i < p->n; i++) {
            st_tensor *t = p->t[i];
            if (t->kind != ST_TENSOR_PARAM) continue;
            const st_ddp_bucket *b = &d->b[bucket_of[i]];
            t->grad = d->stage + b->stage + (t->offset - b->offset);
        }
    free(bucket_of);
    if (s != ST_OK) st_ddp_free(d);
    return s;
}

void st_ddp_free(st_ddp *d) {
    if (!d) return;
    for (int i = 0; d->b && i < d->n_buckets; i++) {
        free(d->b[i].req);
        free(d->b[i].prev);
    }
    free(d->b);
    free(d->prep);
    if (d->half) st_device_release(d->p->dev, d->half);
    if (d->stage) st_device_release(d->p->dev, d->stage);
    memset(d, 0, sizeof *d);
}

st_status st_ddp_set_grad_dtype(st_ddp *d, st_precision dt) {
    if (dt != ST_PREC_FP32 && d->grads == ST_DDP_GRADS_RELEASE)
        return st_fail(ST_ERR_INTERNAL,
                       "16-bit gradient buckets under the host's ZeRO-2 (its running sums are fp32)");
    d->grad_dtype = dt;
    if (dt == ST_PREC_FP32 || d->half) return ST_OK;
    /* beside the gradients (staged: beside the staging, region for region):
     * host memory, or the device's */
    const int64_t n = d->grads == ST_DDP_GRADS_STAGED ? d->stage_count : d->p->count;
    void *h = NULL;
    if (st_device_alloc(d->p->dev, (size_t)(n ? n : 1) * sizeof *d->half, &h) != ST_OK)
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

/* Gradient element i of bucket b, where backward wrote it: the arena, or
 * the bucket's staging region; and its 16-bit copy's place. */
static float *grad_at(const st_ddp *d, const st_ddp_bucket *b, int64_t i) {
    return d->grads == ST_DDP_GRADS_STAGED ? d->stage + b->stage + (i - b->offset) : d->p->grad + i;
}
static uint16_t *half_at(const st_ddp *d, const st_ddp_bucket *b, int64_t i) {
    return d->grads == ST_DDP_GRADS_STAGED ? d->half + b->stage + (i - b->offset) : d->half + i;
}

static st_status start_collectives(st_ddp *d, st_ddp_bucket *b);

/* The bucket's collectives, and their span on the GPU's timeline in the
 * profiler trace (NCCL's run on the device's communication stream): from
 * the compute stream's point where the bucket is ready to the end of the
 * collectives on the communication stream. */
static st_status start_bucket(st_ddp *d, st_ddp_bucket *b) {
    const int32_t span = st_trace_comm_begin(d->trace, d->comm);
    st_status s = start_collectives(d, b);
    if (s == ST_OK) st_trace_comm_end(d->trace, span, b->name);
    return s;
}

static st_status start_collectives(st_ddp *d, st_ddp_bucket *b) {
    if (d->grads == ST_DDP_GRADS_STAGED && !b->prepared)
        return st_fail(ST_ERR_INTERNAL, "%s started before its staging was zeroed", b->name);
    b->mark = st_trace_begin_async(d->trace, ST_TRACE_TID_BUCKET + (int)(b - d->b), "comm", b->name);
    b->t_start = b->mark.t0;
    if (d->t_first_start == 0) d->t_first_start = b->t_start;
    b->started = true;
    b->done = false;
    b->released = false;
    const bool half = d->grad_dtype != ST_PREC_FP32;
    if (half) /* (count): the bucket divided and rounded, beside the gradients */
        ST_TRY(st_device_div_to_16(d->p->dev, d->grad_dtype, half_at(d, b, b->offset),
                                   grad_at(d, b, b->offset), (size_t)b->count,
                                   d->presum ? 1.0f : (float)st_comm_size(d->comm)));
    if (!d->shard) {
        float *g = grad_at(d, b, b->offset);
        if (half)
            return st_comm_all_reduce(d->comm, d->half + b->offset, d->half + b->offset, (size_t)b->count,
                                      half_dtype(d), ST_COMM_SUM, b->name, &b->req[0]);
        return st_comm_all_reduce(d->comm, g, g, (size_t)b->count, ST_COMM_F32,
                                  d->presum ? ST_COMM_SUM : ST_COMM_AVG, b->name, &b->req[0]);
    }
    for (int i = 0; i < b->n_req; i++) {
        const int r = b->first_owner + i;
        int64_t lo, hi;
        piece(d, b, r, &lo, &hi);
        char name[48];
        snprintf(name, sizeof name, "%s to rank %d", b->name, r);
        if (half)
            ST_TRY(st_comm_reduce(d->comm, half_at(d, b, lo), half_at(d, b, lo), (size_t)(hi - lo),
                                  half_dtype(d), ST_COMM_SUM, r, name, &b->req[i]));
        else
            ST_TRY(st_comm_reduce(d->comm, grad_at(d, b, lo), grad_at(d, b, lo), (size_t)(hi - lo),
                                  ST_COMM_F32, d->op, r, name, &b->req[i]));
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

/* Staged: this rank's piece of b's sums added into its shard of
 * gradients, after b's reductions (waited for on the device, if the host
 * has not seen them end). */
static st_status fold_bucket(st_ddp *d, st_ddp_bucket *b) {
    if (b->folded) return ST_OK;
    if (!b->started) return st_fail(ST_ERR_INTERNAL, "%s's staging reused before it was reduced", b->name);
    for (int k = 0; k < b->n_req; k++)
        ST_TRY(st_comm_device_wait(b->req[k]));
    int64_t lo, hi;
    piece(d, b, st_comm_rank(d->comm), &lo, &hi);
    const size_t n = (size_t)(hi > lo ? hi - lo : 0);
    if (n && d->grad_dtype != ST_PREC_FP32) /* the 16-bit sums widened in their staging region first */
        ST_TRY(st_device_from_16(d->p->dev, d->grad_dtype, grad_at(d, b, lo), half_at(d, b, lo), n));
    if (n) ST_TRY(st_device_add_slices(d->p->dev, st_params_grad(d->p, lo), grad_at(d, b, lo), n, 1));
    b->folded = true;
    return ST_OK;
}

/* Staged: before backward runs node `node`, every bucket it (or a later
 * node) writes first gets its region: the buckets there before folded, the
 * region zeroed (parameter gradients accumulate). */
static st_status prepare_buckets(st_ddp *d, int node) {
    for (; d->next_prep < d->n_buckets && d->b[d->prep[d->next_prep]].written_from >= node; d->next_prep++) {
        st_ddp_bucket *b = &d->b[d->prep[d->next_prep]];
        for (int k = 0; k < b->n_prev; k++)
            ST_TRY(fold_bucket(d, &d->b[b->prev[k]]));
        ST_TRY(st_device_zero(d->p->dev, grad_at(d, b, b->offset), (size_t)b->count * sizeof(float)));
        b->prepared = true;
    }
    return ST_OK;
}

static st_status backward_hook(void *ctx, int node) {
    st_ddp *d = ctx;
    for (int i = 0; i < d->n_buckets; i++) {
        st_ddp_bucket *b = &d->b[i];
        if (!b->started && b->ready_at >= node) ST_TRY(start_bucket(d, b));
    }
    if (d->grads == ST_DDP_GRADS_STAGED) ST_TRY(prepare_buckets(d, node - 1));
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
        if (d->grads == ST_DDP_GRADS_RELEASE) release_bucket(d, b);
    }
    if (d->grads != ST_DDP_GRADS_RELEASE) return ST_OK;
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

st_status st_ddp_arm(st_ddp *d, st_graph *g) {
    d->t_first_start = 0;
    for (int i = 0; i < d->n_buckets; i++)
        d->b[i].started = d->b[i].prepared = d->b[i].folded = false;
    d->next_prep = 0;
    g->backward_hook = backward_hook;
    g->backward_hook_ctx = d;
    /* the buckets the last node writes: before backward */
    return d->grads == ST_DDP_GRADS_STAGED ? prepare_buckets(d, g->n_nodes - 1) : ST_OK;
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
        if (d->grads == ST_DDP_GRADS_RELEASE && !b->released) release_bucket(d, b);
        if (d->grads == ST_DDP_GRADS_STAGED) ST_TRY(fold_bucket(d, b));
    }
    /* the 16-bit sums back into the fp32 gradients (under ZeRO, this shard's; staged: folded above) */
    if (d->grad_dtype != ST_PREC_FP32 && d->grads != ST_DDP_GRADS_STAGED)
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
enum { N_HEAD = 6, DESC_MAX = ST_AGREE_DESC_MAX };
static const char *const head_names[N_HEAD] = {"parameter tensors", "buffers",
                                               "train.batch_size",  "train.micro_batch_size",
                                               "training samples",  "validation samples"};

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

/* Rank 0's n floats at x to every rank, in broadcasts of at most 2^30
 * elements (a collective's count is an MPI int: a model of more than 2^31
 * parameters goes in pieces). */
static st_status broadcast_chunks(st_comm *c, float *x, int64_t n, const char *what) {
    const int64_t piece = (int64_t)1 << 30;
    for (int64_t at = 0; at < n; at += piece) {
        char name[96];
        snprintf(name, sizeof name, n > piece ? "%s (elements %lld on)" : "%s", what, (long long)at);
        ST_TRY(st_comm_broadcast_sync(c, x + at, (size_t)(n - at < piece ? n - at : piece), ST_COMM_F32, 0,
                                      name));
    }
    return ST_OK;
}

/* Masters laid out sharded (graph.h st_params_layout): no rank holds the
 * whole fp32 weights to broadcast. Each made them whole on its host, from
 * train.seed or --init's file, and hashed them there (st_params_set_weights):
 * the ranks compare the hashes, and a difference names the first tensor. */
static st_status same_weights(st_comm *comm, const st_params *p) {
    st_status s = p->set_hash ? ST_OK
                              : st_fail(ST_ERR_INTERNAL, "comparing the ranks' weights: this rank's were "
                                                         "never set");
    ST_TRY(st_agree_status(comm, s, "the weights' hashes"));
    int diff;
    ST_TRY(st_agree_first_difference(comm, p->set_hash, p->n, "the weights", &diff));
    if (diff < 0) return ST_OK;
    char item[ST_NAME_MAX + 32], mine[64];
    snprintf(item, sizeof item, "parameter %s", p->t[diff]->name);
    snprintf(mine, sizeof mine, "bits hashed to %016llx", (unsigned long long)p->set_hash[diff]);
    return st_agree_report(comm, "the ranks start from different weights", item, mine,
                           "every rank must start from the same weights: give each the same --init file "
                           "(a copy on one node that differs?); made from train.seed they are the same "
                           "on every rank, and a difference is a bug to report");
}

static st_status report(st_comm *c, const char *item, const char *mine) {
    return st_agree_report(c, "the ranks built different models or data settings", item, mine,
                           "every rank must run the same config and data");
}

st_status st_ddp_agree(st_comm *comm, st_comm *pcomm, st_params *p, int64_t batch, int64_t micro,
                       int64_t n_samples, int64_t val_samples, bool send) {
    int64_t head[N_HEAD] = {p->n_params, p->n - p->n_params, batch, micro, n_samples, val_samples};
    int diff;
    ST_TRY(st_agree_first_difference(comm, head, N_HEAD, "signature", &diff));
    char desc[DESC_MAX];
    if (diff >= 0) {
        if (diff == N_HEAD - 1 && head[diff] < 0)
            snprintf(desc, sizeof desc, "none (data.val empty)");
        else
            snprintf(desc, sizeof desc, "%lld", (long long)head[diff]);
        return report(comm, head_names[diff], desc);
    }
    int64_t *h = malloc((size_t)(p->n ? p->n : 1) * sizeof *h);
    st_status s =
        h ? ST_OK
          : st_fail(ST_ERR_NOMEM, "out of host memory comparing the %d parameter tensors across ranks", p->n);
    /* (agreed before the comparison: a rank out of memory must not leave the others in it) */
    s = st_agree_status(comm, s, "the memory to compare the parameter tensors");
    for (int i = 0; s == ST_OK && i < p->n; i++)
        h[i] = tensor_hash(p->t[i]);
    if (s == ST_OK) s = st_agree_first_difference(comm, h, p->n, "signature of tensors", &diff);
    free(h);
    ST_TRY(s);
    if (diff >= 0) {
        char item[64];
        snprintf(item, sizeof item, "tensor %d (in declaration order)", diff);
        describe_tensor(p->t[diff], desc, sizeof desc);
        return report(comm, item, desc);
    }
    if (!send) return ST_OK;
    if (p->buffer_count) ST_TRY(broadcast_chunks(pcomm, p->buffers, p->buffer_count, "buffers"));
    if (p->masters_sharded) return same_weights(comm, p); /* (the compute copy is theirs, and current) */
    ST_TRY(broadcast_chunks(pcomm, p->data, p->arena_count, "parameters"));
    st_params_touch(p);
    return ST_OK;
}
