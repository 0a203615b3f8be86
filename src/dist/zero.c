/* ZeRO shards: plan, padded arenas, gathered weights (see zero.h). */
#include "zero.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agree.h"
#include "core/device.h"
#include "core/mem.h"

#define PAGE 4096

void st_shard_plan(st_shard *s, int64_t count, int rank, int world) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->world = world;
    s->count = count;
    s->shard = st_shard_size(count, world);
    s->padded = s->shard * world;
    s->lo = s->shard * rank < count ? s->shard * rank : count;
    s->hi = s->lo + s->shard < count ? s->lo + s->shard : count;
}

static float *alloc_pages(int64_t count) {
    void *q = NULL;
    size_t nbytes = ((size_t)count * sizeof(float) + PAGE - 1) / PAGE * PAGE;
    if (posix_memalign(&q, PAGE, nbytes ? nbytes : PAGE) != 0) return NULL;
    memset(q, 0, nbytes);
    return q;
}

static void point_tensors(st_params *p) {
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind != ST_TENSOR_PARAM) continue;
        t->data = p->data + t->offset;
        t->grad = p->grad + t->offset;
    }
}

/* One arena of a CUDA device padded: a new one there, the contents copied
 * on the device and the tail zeroed, the old one released (*a replaced). */
static st_status pad_device_arena(st_params *p, float **a, size_t old, size_t nbytes) {
    void *fresh = NULL;
    st_status s = st_device_alloc(p->dev, nbytes, &fresh);
    if (s == ST_OK) s = st_device_round_copy(p->dev, ST_PREC_FP32, fresh, *a, old / sizeof(float));
    if (s == ST_OK && nbytes > old) s = st_device_zero(p->dev, (char *)fresh + old, nbytes - old);
    if (s != ST_OK) {
        st_device_release(p->dev, fresh);
        return s;
    }
    st_device_release(p->dev, *a);
    *a = fresh;
    return ST_OK;
}

/* On a CUDA device: the weights' arena, then the gradients', each padded
 * and its old one released before the next is made (both new ones beside
 * both old ones held a whole arena more than the run's peak: a ZeRO run
 * planned to fit ran out of device memory here). */
static st_status pad_device(st_params *p, int64_t padded) {
    const size_t old = (size_t)p->arena_count * sizeof(float), nbytes = (size_t)padded * sizeof(float);
    st_status s = pad_device_arena(p, &p->data, old, nbytes);
    if (s == ST_OK) point_tensors(p); /* (the data moved; the gradients stay where they are) */
    if (s == ST_OK) s = pad_device_arena(p, &p->grad, old, nbytes);
    if (s != ST_OK)
        return st_fail_context(s, "padding the parameter arenas to %lld elements on %s: ", (long long)padded,
                               st_device_name(p->dev));
    return ST_OK;
}

static st_status pad_arenas(st_params *p, int64_t padded) {
    if (p->dev) {
        ST_TRY(pad_device(p, padded));
        p->arena_count = padded;
        point_tensors(p);
        return ST_OK;
    }
    /* A gradient arena from the hook (the zero-copy shared arena) stays where
     * it is when it has room: the all-reduce knows it by its address. Each
     * arena is made anew and the old one freed before the next (as on a
     * device: both new ones beside both old ones were two arenas more than
     * the run holds after). */
    const bool keep = p->grad_hooked && (size_t)padded * sizeof(float) <= p->grad_cap_bytes;
    float *data = alloc_pages(padded);
    if (!data)
        return st_fail(ST_ERR_NOMEM, "out of memory padding the parameters' weights to %lld elements",
                       (long long)padded);
    memcpy(data, p->data, (size_t)p->arena_count * sizeof(float));
    st_free_aligned(p->data);
    p->data = data;
    point_tensors(p); /* (the gradients stay where they are, for now) */
    if (keep) {
        memset(p->grad + p->arena_count, 0, (size_t)(padded - p->arena_count) * sizeof(float));
    } else {
        float *grad = alloc_pages(padded);
        if (!grad)
            return st_fail(ST_ERR_NOMEM, "out of memory padding the parameters' gradients to %lld elements",
                           (long long)padded);
        memcpy(grad, p->grad, (size_t)p->arena_count * sizeof(float));
        if (!p->grad_hooked) st_free_aligned(p->grad);
        p->grad_hooked = false; /* the shared arena, too small: left mapped, unused */
        p->grad = grad;
    }
    p->arena_count = padded;
    point_tensors(p);
    return ST_OK;
}

st_status st_zero_pad_arenas(st_params *p, int64_t padded) {
    if (padded <= p->arena_count) return ST_OK;
    if (p->masters_sharded)
        return st_fail(ST_ERR_INTERNAL, "padding the parameter arenas after their masters were sharded");
    const bool on = p->on_compute;
    if (on) st_params_use_compute(p, false);
    ST_TRY(pad_arenas(p, padded));
    ST_TRY(st_params_resize_compute(p)); /* the copy at the new size (bf16/fp16) */
    if (on) st_params_use_compute(p, true);
    return ST_OK;
}

/* All-gather the whole fp32 masters of p, sharded over comm's ranks
 * (st_params_shard_masters, each rank's range the same length), into the
 * host array w (p->arena_count floats) on every rank; collective. */
static st_status gather_masters(const st_params *p, st_comm *comm, float *w) {
    const int64_t lo = p->master_lo, n = p->master_hi - p->master_lo;
    if (n * st_comm_size(comm) != p->arena_count || lo != n * st_comm_rank(comm))
        return st_fail(ST_ERR_INTERNAL,
                       "gathering the weights: rank %d holds [%lld, %lld) of %lld over %d ranks",
                       st_comm_rank(comm), (long long)lo, (long long)p->master_hi, (long long)p->arena_count,
                       st_comm_size(comm));
    /* A device's download that fails (its GPU alone) still joins the
     * gather, with zeros, and the outcome is agreed after it: the others
     * are in the gather, and would wait there for this rank. */
    st_status s = ST_OK;
    if (p->dev) {
        s = st_device_download(p->dev, w + lo, st_params_master(p, lo), (size_t)n * sizeof(float));
        if (s != ST_OK) memset(w + lo, 0, (size_t)n * sizeof(float));
    } else {
        memcpy(w + lo, st_params_master(p, lo), (size_t)n * sizeof(float));
    }
    st_comm_req *req = NULL;
    ST_TRY(st_comm_all_gather(comm, w + lo, w, (size_t)n, ST_COMM_F32, "weights", &req));
    ST_TRY(st_comm_wait(&req));
    return st_agree_status(comm, s, "the weights' download from the GPU");
}

st_status st_zero_copy_arenas(const st_model *m, st_comm *comm, float **data, float **buffers) {
    const st_params *p = &m->params;
    if (!p->masters_sharded) return st_model_copy_arenas(m, data, buffers);
    *data = *buffers = NULL;
    const size_t pbytes = (size_t)p->arena_count * sizeof(float),
                 bbytes = (size_t)p->buffer_count * sizeof(float);
    float *w = st_alloc_aligned(pbytes), *b = st_alloc_aligned(bbytes);
    st_status s = w && b ? ST_OK
                         : st_fail(ST_ERR_NOMEM, "out of memory gathering the weights (%.1f MiB) on the host",
                                   (double)(pbytes + bbytes) / (1 << 20));
    s = st_agree_status(comm, s, "host memory for the weights"); /* no rank left alone in the gather */
    if (s == ST_OK) s = gather_masters(p, comm, w);
    if (s == ST_OK && bbytes) {
        if (p->dev)
            s = st_device_download(p->dev, b, p->buffers, bbytes);
        else
            memcpy(b, p->buffers, bbytes);
    }
    if (s != ST_OK) {
        st_free_aligned(w);
        st_free_aligned(b);
        return s;
    }
    *data = w;
    *buffers = b;
    return ST_OK;
}
