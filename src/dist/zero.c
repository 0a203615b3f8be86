/* ZeRO shards: plan, padded arenas, page release, resident bytes (see
 * zero.h). */
#include "zero.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/device.h"
#include "core/mem.h"

#define PAGE 4096

void st_shard_plan(st_shard *s, int64_t count, int rank, int world) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->world = world;
    s->count = count;
    int64_t per = (count + world - 1) / world;
    s->shard = (per + ST_SHARD_ALIGN - 1) / ST_SHARD_ALIGN * ST_SHARD_ALIGN;
    if (s->shard == 0) s->shard = ST_SHARD_ALIGN;
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

/* On a CUDA device: new arenas there, the contents copied on the device and
 * the tails zeroed (the memory is the device's whole: nothing to release). */
static st_status pad_device(st_params *p, int64_t padded) {
    const size_t old = (size_t)p->arena_count * sizeof(float), nbytes = (size_t)padded * sizeof(float);
    void *data = NULL, *grad = NULL;
    st_status s = st_device_alloc(p->dev, nbytes, &data);
    if (s == ST_OK) s = st_device_alloc(p->dev, nbytes, &grad);
    if (s == ST_OK) s = st_device_round_copy(p->dev, ST_PREC_FP32, data, p->data, (size_t)p->arena_count);
    if (s == ST_OK) s = st_device_round_copy(p->dev, ST_PREC_FP32, grad, p->grad, (size_t)p->arena_count);
    if (s == ST_OK && nbytes > old) s = st_device_zero(p->dev, (char *)data + old, nbytes - old);
    if (s == ST_OK && nbytes > old) s = st_device_zero(p->dev, (char *)grad + old, nbytes - old);
    if (s != ST_OK) {
        st_device_release(p->dev, data);
        st_device_release(p->dev, grad);
        return st_fail_context(s, "padding the parameter arenas to %lld elements on %s: ", (long long)padded,
                               st_device_name(p->dev));
    }
    st_device_release(p->dev, p->data);
    st_device_release(p->dev, p->grad);
    p->data = data;
    p->grad = grad;
    return ST_OK;
}

st_status st_zero_pad_arenas(st_params *p, int64_t padded) {
    if (padded < p->arena_count) padded = p->arena_count;
    if (p->dev) {
        if (padded == p->arena_count) return ST_OK;
        ST_TRY(pad_device(p, padded));
        p->arena_count = padded;
        point_tensors(p);
        return ST_OK;
    }
    /* A gradient arena from the hook (the zero-copy shared arena) stays where
     * it is when it has room: the all-reduce knows it by its address. */
    const bool keep = p->grad_hooked && (size_t)padded * sizeof(float) <= p->grad_cap_bytes;
    float *data = alloc_pages(padded), *grad = keep ? p->grad : alloc_pages(padded);
    if (!data || !grad) {
        free(data);
        if (!keep) free(grad);
        return st_fail(ST_ERR_NOMEM, "out of memory padding the parameter arenas to %lld elements",
                       (long long)padded);
    }
    memcpy(data, p->data, (size_t)p->arena_count * sizeof(float));
    if (keep) {
        memset(grad + p->arena_count, 0, (size_t)(padded - p->arena_count) * sizeof(float));
    } else {
        memcpy(grad, p->grad, (size_t)p->arena_count * sizeof(float));
        if (!p->grad_hooked) st_free_aligned(p->grad);
        p->grad_hooked = false; /* the shared arena, too small: left mapped, unused */
    }
    st_free_aligned(p->data);
    p->data = data;
    p->grad = grad;
    p->arena_count = padded;
    point_tensors(p);
    return ST_OK;
}

void st_zero_release(float *base, int64_t a, int64_t e) {
    if (e <= a) return;
    char *lo = (char *)(base + a), *hi = (char *)(base + e);
    char *plo = (char *)(((uintptr_t)lo + PAGE - 1) / PAGE * PAGE),
         *phi = (char *)((uintptr_t)hi / PAGE * PAGE);
    if (plo >= phi || madvise(plo, (size_t)(phi - plo), MADV_DONTNEED) != 0) {
        memset(lo, 0, (size_t)(hi - lo)); /* no whole page, or madvise refused: clear in place */
        return;
    }
    memset(lo, 0, (size_t)(plo - lo));
    memset(phi, 0, (size_t)(hi - phi));
}

int64_t st_resident_nbytes(const void *p, int64_t nbytes) {
    const size_t pages = ((size_t)nbytes + PAGE - 1) / PAGE;
    unsigned char *vec = malloc(pages ? pages : 1);
    if (!vec || mincore((void *)p, (size_t)nbytes, vec) != 0) {
        free(vec);
        return nbytes; /* unknown: count it all */
    }
    int64_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    free(vec);
    return n * PAGE < nbytes ? n * PAGE : nbytes;
}
