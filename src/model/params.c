/* The parameter arenas (st_params, graph.h): the fp32 masters, gradients and
 * buffers as one allocation each with named views, their initial values
 * from the seed, the bf16/fp16 compute copy, and the shards ZeRO keeps. The
 * graph's layout (graph.c) places the tensors in them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/half.h"
#include "../core/mem.h"
#include "../core/pages.h"
#include "../core/rng.h"
#include "graph.h"
#ifdef ST_HAVE_CUDA
#include "../cuda/cuda.h"
#endif

void st_params_free(st_params *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        free(p->t[i]);
    free(p->t);
    st_device_release(p->dev, p->masters_sharded && p->dev ? p->master_alloc : p->data);
    if (!p->grad_hooked) st_device_release(p->dev, p->grads_sharded ? p->grad_alloc : p->grad);
    st_device_release(p->dev, p->buffers);
    free(p->set_hash);
    st_device_release(p->dev, p->compute);
    st_device_release(p->dev, p->compute16);
    memset(p, 0, sizeof *p);
}

st_tensor *st_params_find(const st_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->t[i]->name, name) == 0) return p->t[i];
    return NULL;
}

/* A tensor's initial values: its own stream of (seed, name), each normal
 * value two draws and each uniform one, in element order. A tensor of more
 * than 2^20 values is made in chunks on the OpenMP threads, each chunk from
 * its place in the stream (st_rng_skip), so the values are the same bits
 * whatever the thread count (a GPT-2 XL's 1.56 G normal values took 35 s on
 * one thread); smaller ones take a thread a few ms, less than waking the
 * others costs under emulation (arm64.sh's qemu: 10 s more in test_model
 * with every tensor above one chunk parallel). */
static void init_tensor(const st_tensor *t, float *data, uint64_t seed) {
    const st_rng r = st_rng_make(seed, st_hash_str(t->name));
    const int64_t chunk = 1 << 16;
    const uint64_t draws = t->init == ST_INIT_NORMAL ? 2 : t->init == ST_INIT_UNIFORM ? 1 : 0;
#pragma omp parallel for schedule(static) if (t->count > (1 << 20))
    for (int64_t c0 = 0; c0 < t->count; c0 += chunk) {
        st_rng rc = st_rng_skip(r, draws * (uint64_t)c0);
        const int64_t end = c0 + chunk < t->count ? c0 + chunk : t->count;
        for (int64_t j = c0; j < end; j++) {
            float v = 0.0f;
            switch (t->init) {
            case ST_INIT_ZEROS:
                v = 0.0f;
                break;
            case ST_INIT_ONES:
                v = 1.0f;
                break;
            case ST_INIT_NORMAL:
                v = t->init_scale * st_rng_normal(&rc);
                break;
            case ST_INIT_UNIFORM:
                v = t->init_scale * (2.0f * st_rng_uniform(&rc) - 1.0f);
                break;
            }
            data[j] = v;
        }
    }
}

/* The compute copy of a bf16 or fp16 run (after the layout): the rounded
 * masters, as floats on the host, as 16-bit values on a device (which the
 * CUDA layers read through st_data). A layout-only model (the planner's) has
 * none. */
st_status st_params_alloc_compute(st_params *p) {
    if (p->precision == ST_PREC_FP32 || p->layout_only) return ST_OK;
    const char *name = p->precision == ST_PREC_BF16 ? "bf16" : "fp16";
    st_status s = ST_OK;
    if (!p->dev && !p->compute) {
        const size_t nbytes = (size_t)p->arena_count * sizeof(float);
        s = st_device_alloc(p->dev, nbytes, (void **)&p->compute);
        if (s == ST_OK) s = st_device_zero(p->dev, p->compute, nbytes);
    }
    if (s == ST_OK && p->dev && !p->compute16) {
        const size_t nbytes = (size_t)p->arena_count * sizeof(uint16_t);
        s = st_device_alloc(p->dev, nbytes, (void **)&p->compute16);
        if (s == ST_OK) s = st_device_zero(p->dev, p->compute16, nbytes);
    }
    if (s != ST_OK) return st_fail_context(s, "the %s copy of %lld parameters: ", name, (long long)p->count);
    if (p->masters_sharded && !p->on_compute) { /* (laid out sharded: the copy, zeros as the masters, is
                                                 * the only whole weights, and the tensors point into it) */
        p->compute_version = p->version;
        st_params_use_compute(p, true);
    }
    return ST_OK;
}

st_status st_params_set_precision(st_params *p, st_precision prec) {
    if (p->masters_sharded && prec == ST_PREC_FP32)
        return st_fail(ST_ERR_INTERNAL, "fp32 with the masters laid out sharded: no copy holds the whole "
                                        "weights");
    if (p->on_compute) st_params_use_compute(p, false);
    p->precision = prec;
    if (p->frozen) ST_TRY(st_params_alloc_compute(p)); /* else the layout allocates it */
    st_params_touch(p);
    return ST_OK;
}

st_status st_params_resize_compute(st_params *p) {
    if (p->on_compute) st_params_use_compute(p, false);
    st_device_release(p->dev, p->compute);
    st_device_release(p->dev, p->compute16);
    p->compute = NULL;
    p->compute16 = NULL;
    st_params_touch(p);
    return st_params_alloc_compute(p);
}

/* Round the masters into the compute copy when they have changed since. */
st_status st_params_refresh_compute(st_params *p) {
    if (p->precision == ST_PREC_FP32 || p->compute_version == p->version) return ST_OK;
    if (p->masters_sharded)
        return st_fail(
            ST_ERR_INTERNAL,
            "the %s copy of the weights is stale and this rank holds only the masters of [%lld, %lld): "
            "whatever wrote them must refresh the copy (st_dist_step_end, st_params_set_weights)",
            p->precision == ST_PREC_BF16 ? "bf16" : "fp16", (long long)p->master_lo, (long long)p->master_hi);
    if (p->compute) ST_TRY(st_device_round_copy(p->dev, p->precision, p->compute, p->data, (size_t)p->count));
    if (p->compute16)
        ST_TRY(st_device_div_to_16(p->dev, p->precision, p->compute16, p->data, (size_t)p->count, 1.0f));
    p->compute_version = p->version;
    return ST_OK;
}

void st_params_use_compute(st_params *p, bool on) {
    if (p->precision == ST_PREC_FP32 || (!p->compute && !p->compute16) || on == p->on_compute) return;
    if (!on && p->masters_sharded) return; /* the copy is the only whole weights */
    if (on) (void)st_params_refresh_compute(p); /* a device error: forward and backward refresh first and report it */
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind != ST_TENSOR_PARAM) continue;
        if (!on) {
            t->data = p->data + t->offset;
            t->store = ST_PREC_FP32;
        } else if (p->compute16) { /* a device: 16-bit values, the gradient stays fp32 */
            t->data = (float *)(void *)(p->compute16 + t->offset);
            t->store = p->precision;
        } else {
            t->data = p->compute + t->offset;
        }
    }
    p->on_compute = on;
}

/* Sharded already (laid out so, or sharded before): the same range, else a bug. */
static st_status same_shard(const char *what, int64_t lo, int64_t hi, int64_t had_lo, int64_t had_hi) {
    if (lo == had_lo && hi == had_hi) return ST_OK;
    return st_fail(ST_ERR_INTERNAL, "sharding the %s to [%lld, %lld): they hold [%lld, %lld) already", what,
                   (long long)lo, (long long)hi, (long long)had_lo, (long long)had_hi);
}

st_status st_params_shard_masters(st_params *p, int64_t lo, int64_t hi) {
    if (p->masters_sharded) return same_shard("masters", lo, hi, p->master_lo, p->master_hi);
    if (p->precision == ST_PREC_FP32 || p->layout_only) return ST_OK;
    if (lo < 0 || hi < lo || hi > p->arena_count)
        return st_fail(ST_ERR_INTERNAL, "sharding the masters: [%lld, %lld) of %lld", (long long)lo,
                       (long long)hi, (long long)p->arena_count);
    ST_TRY(st_params_refresh_compute(p));
    if (p->dev) { /* a new allocation of the range, found through st_params_master */
        float *keep = NULL;
        const size_t n = (size_t)(hi - lo);
        st_status s = st_device_alloc(p->dev, (n ? n : 1) * sizeof(float), (void **)&keep);
        if (s == ST_OK && n) s = st_device_round_copy(p->dev, ST_PREC_FP32, keep, p->data + lo, n);
        if (s != ST_OK) {
            st_device_release(p->dev, keep);
            return st_fail_context(s, "keeping the masters of [%lld, %lld) on %s: ", (long long)lo,
                                   (long long)hi, st_device_name(p->dev));
        }
        st_device_release(p->dev, p->data);
        p->master_alloc = keep;
        p->data = NULL; /* (st_params_master) */
    } else {
        st_pages_release(p->data, 0, lo);
        st_pages_release(p->data, hi, p->arena_count);
    }
    st_params_use_compute(p, true);
    p->master_lo = lo;
    p->master_hi = hi;
    p->masters_sharded = true;
    return ST_OK;
}

st_status st_params_shard_grads(st_params *p, int64_t lo, int64_t hi) {
    if (p->grads_sharded) return same_shard("gradients", lo, hi, p->grad_lo, p->grad_hi);
    if (p->layout_only) return ST_OK;
    if (!p->dev || p->grad_hooked || lo < 0 || hi < lo || hi > p->arena_count)
        return st_fail(ST_ERR_INTERNAL, "sharding the gradients: [%lld, %lld) of %lld%s", (long long)lo,
                       (long long)hi, (long long)p->arena_count, p->dev ? "" : " on the host");
    float *keep = NULL;
    const size_t nbytes = (size_t)(hi > lo ? hi - lo : 1) * sizeof(float);
    st_status s = st_device_alloc(p->dev, nbytes, (void **)&keep);
    if (s == ST_OK) s = st_device_zero(p->dev, keep, nbytes);
    if (s != ST_OK) {
        st_device_release(p->dev, keep);
        return st_fail_context(s, "keeping the gradients of [%lld, %lld) on %s: ", (long long)lo,
                               (long long)hi, st_device_name(p->dev));
    }
    st_device_release(p->dev, p->grad);
    p->grad = NULL; /* (st_params_grad) */
    p->grad_alloc = keep;
    p->grad_lo = lo;
    p->grad_hi = hi;
    p->grads_sharded = true;
    for (int i = 0; i < p->n; i++)
        if (p->t[i]->kind == ST_TENSOR_PARAM) p->t[i]->grad = NULL;
    return ST_OK;
}

int64_t st_params_master_nbytes(const st_params *p) {
    const int64_t n = p->masters_sharded && p->dev ? p->master_hi - p->master_lo : p->arena_count;
    return p->dev ? 4 * n : st_pages_resident(p->data, 4 * n);
}

st_status st_params_set_weights(st_params *p, const float *w) {
    const int64_t lo = p->masters_sharded ? p->master_lo : 0,
                  hi = p->masters_sharded ? (p->master_hi < p->count ? p->master_hi : p->count) : p->count;
    if (hi > lo) {
        float *dst = st_params_master(p, lo);
        if (p->dev)
            ST_TRY(st_device_upload(p->dev, dst, w + lo, (size_t)(hi - lo) * sizeof(float)));
        else
            memcpy(dst, w + lo, (size_t)(hi - lo) * sizeof(float));
    }
    st_params_touch(p);
    if (!p->masters_sharded) return ST_OK; /* the next forward rounds the copy */
    /* (what the ranks compare where they were laid out sharded, none holding the whole to
     * broadcast: st_ddp_agree; on the host they are sharded after it, and nothing reads it; a
     * tensor a thread: on one, 2.7 ns a word here, 4 s for a GPT-2 XL's 1.5 G) */
    if (p->layout.shard_masters) {
        if (!p->set_hash && !(p->set_hash = calloc((size_t)(p->n ? p->n : 1), sizeof *p->set_hash)))
            return st_fail(ST_ERR_NOMEM, "out of memory hashing the weights");
#pragma omp parallel for schedule(dynamic) if (p->count > (1 << 22))
        for (int i = 0; i < p->n; i++)
            p->set_hash[i] =
                p->t[i]->kind == ST_TENSOR_PARAM ? st_hash_words(w + p->t[i]->offset, p->t[i]->count, 4) : 0;
    }
    /* The copy from every value: rounded on the host as the device rounds. */
    if (p->compute) {
        st_round_copy(p->precision, p->compute, w, p->count);
    } else {
        uint16_t *h = malloc((size_t)(p->count ? p->count : 1) * sizeof *h);
        if (!h)
            return st_fail(ST_ERR_NOMEM, "out of memory rounding the weights to %s",
                           p->precision == ST_PREC_BF16 ? "bf16" : "fp16");
        st_to_half(p->precision, h, w, p->count);
        st_status s = st_device_upload(p->dev, p->compute16, h, (size_t)p->count * sizeof *h);
        free(h);
        ST_TRY(s);
    }
    p->compute_version = p->version;
    return ST_OK;
}

st_status st_params_init(st_params *p, uint64_t seed) {
    st_params_touch(p);
    /* Sharded masters: the parameters' whole arena made on the host, then
     * set (what this rank keeps, and the compute copy); buffers as usual. */
    float *w = NULL;
    if (p->masters_sharded &&
        !(w = st_alloc_aligned((size_t)(p->arena_count ? p->arena_count : 1) * sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "out of memory initialising parameters");
    if (!p->dev) {
        for (int i = 0; i < p->n; i++) {
            const st_tensor *t = p->t[i];
            init_tensor(t, w && t->kind == ST_TENSOR_PARAM ? w + t->offset : t->data, seed);
        }
    }
    /* On a device: make each tensor's values on the host, then copy them. */
    int64_t most = 1;
    for (int i = 0; i < p->n; i++)
        if (p->t[i]->count > most) most = p->t[i]->count;
    float *h = p->dev ? st_alloc_aligned((size_t)most * sizeof(float)) : NULL;
    st_status s = p->dev && !h ? st_fail(ST_ERR_NOMEM, "out of memory initialising parameters") : ST_OK;
    for (int i = 0; p->dev && i < p->n && s == ST_OK; i++) {
        const st_tensor *t = p->t[i];
        if (w && t->kind == ST_TENSOR_PARAM) {
            init_tensor(t, w + t->offset, seed);
            continue;
        }
        init_tensor(t, h, seed);
        s = st_device_upload(p->dev, t->data, h, (size_t)t->count * sizeof(float));
    }
    if (s == ST_OK && w) s = st_params_set_weights(p, w);
    st_free_aligned(h);
    st_free_aligned(w);
    return s;
}
