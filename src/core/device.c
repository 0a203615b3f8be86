/* The host side of src/core/device.h, and the dispatch to the CUDA backend
 * (src/cuda/cuda.h) in builds that have one. */
#include "device.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "half.h"
#include "mem.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

bool st_device_is_host(const st_device *d) { return d == NULL; }

#ifdef ST_HAVE_CUDA
bool st_device_cuda_built(void) { return true; }
int st_device_cuda_count(char *why, size_t why_len) { return st_cuda_device_count(why, why_len); }
st_status st_device_open_cuda(int ordinal, st_device **out) { return st_cuda_open(ordinal, out); }
void st_device_free(st_device *d) { st_cuda_free(d); }
const char *st_device_name(const st_device *d) { return d ? st_cuda_name(d) : "cpu"; }
#else
bool st_device_cuda_built(void) { return false; }
int st_device_cuda_count(char *why, size_t why_len) {
    if (why && why_len) snprintf(why, why_len, "this scaletrain was built without CUDA (rebuild with nvcc installed, or make CUDA=1)");
    return 0;
}
st_status st_device_open_cuda(int ordinal, st_device **out) {
    *out = NULL;
    return st_fail(ST_ERR_UNSUPPORTED,
                   "cuda:%d: this scaletrain was built without CUDA; rebuild with the CUDA toolkit "
                   "installed (make CUDA=1) or run on the CPU",
                   ordinal);
}
void st_device_free(st_device *d) { (void)d; }
const char *st_device_name(const st_device *d) { return "cpu"; }
#endif

st_status st_device_alloc(st_device *d, size_t nbytes, void **out) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_alloc(d, nbytes, out);
#endif
    *out = st_alloc_aligned(nbytes);
    if (!*out) return st_fail(ST_ERR_NOMEM, "out of host memory allocating %.1f MiB", (double)nbytes / (1 << 20));
    return ST_OK;
}

void st_device_release(st_device *d, void *p) {
#ifdef ST_HAVE_CUDA
    if (d) {
        st_cuda_release(d, p);
        return;
    }
#endif
    st_free_aligned(p);
}

st_status st_device_zero(st_device *d, void *p, size_t nbytes) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_zero(d, p, nbytes);
#endif
    memset(p, 0, nbytes);
    return ST_OK;
}

st_status st_device_fill_f32(st_device *d, float *p, size_t count, float value) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_fill_f32(d, p, count, value);
#endif
    for (size_t i = 0; i < count; i++) p[i] = value;
    return ST_OK;
}

st_status st_device_upload(st_device *d, void *dst, const void *src, size_t nbytes) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_upload(d, dst, src, nbytes);
#endif
    if (nbytes) memcpy(dst, src, nbytes);
    return ST_OK;
}

st_status st_device_download(st_device *d, void *dst, const void *src, size_t nbytes) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_download(d, dst, src, nbytes);
#endif
    if (nbytes) memcpy(dst, src, nbytes);
    return ST_OK;
}

st_status st_device_sync(st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_sync(d);
#endif
    return ST_OK;
}

void st_device_set_oom_advice(st_device *d, const char *advice) {
#ifdef ST_HAVE_CUDA
    if (d) st_cuda_set_oom_advice(d, advice);
#endif
    (void)d;
    (void)advice;
}

void st_device_set_matmul_tune(st_device *d, bool on) {
#ifdef ST_HAVE_CUDA
    if (d) st_cuda_set_matmul_tune(d, on);
#endif
    (void)d;
    (void)on;
}

bool st_device_lost(st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_lost(d);
#endif
    (void)d;
    return false;
}

st_status st_device_watch(st_device *d, double limit_s, const char *who) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_watch(d, limit_s, who);
#endif
    (void)limit_s;
    (void)who;
    return ST_OK;
}

void st_device_set_step(st_device *d, int64_t step) {
#ifdef ST_HAVE_CUDA
    if (d) st_cuda_set_step(d, step);
#endif
    (void)step;
}

void st_device_call_begin(st_device *d, const char *what) {
#ifdef ST_HAVE_CUDA
    if (d) st_cuda_call_begin(d, what);
#endif
    (void)what;
}

void st_device_call_end(st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) st_cuda_call_end(d);
#endif
}

int64_t st_device_stream_waits(const st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_stream_waits(d);
#endif
    (void)d;
    return 0;
}

st_status st_device_memory(st_device *d, st_device_mem *out) {
    memset(out, 0, sizeof *out);
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_memory(d, out);
#endif
    return st_fail(ST_ERR_UNSUPPORTED, "device memory: %s", d ? "this build has no CUDA" : "the host has no device memory");
}

st_status st_device_props_get(st_device *d, st_device_props *out) {
    memset(out, 0, sizeof *out);
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_props(d, out);
#endif
    return st_fail(ST_ERR_UNSUPPORTED, "device properties: %s", d ? "this build has no CUDA" : "the host is no CUDA device");
}

int st_device_rank_ordinal(int local_rank, int n) {
    return n < 1 || local_rank < n ? local_rank : local_rank % n;
}

const char *st_device_uuid(const st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_uuid(d);
#endif
    return "";
}

const char *st_device_pci_bus_id(const st_device *d) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_pci_bus_id(d);
#endif
    return "";
}

st_status st_device_round_f32(st_device *d, st_precision p, float *x, size_t count) {
    if (p == ST_PREC_FP32 || count == 0) return ST_OK;
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_round_f32(d, p, x, x, count);
#endif
    st_round_array(p, x, (int64_t)count);
    return ST_OK;
}

st_status st_device_round_copy(st_device *d, st_precision p, float *dst, const float *src, size_t count) {
    if (count == 0) return ST_OK;
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_round_f32(d, p, dst, src, count);
#endif
    st_round_copy(p, dst, src, (int64_t)count);
    return ST_OK;
}

st_status st_device_all_finite(st_device *d, const float *x, size_t count, bool *finite) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_all_finite(d, x, count, finite);
#endif
    int bad = 0;
    /* x - x is 0 for finite x and NaN for Inf and NaN: no branch in the loop. */
#pragma omp parallel for simd reduction(| : bad) schedule(static) if (count > (1u << 20))
    for (size_t i = 0; i < count; i++)
        bad |= (x[i] - x[i]) != 0.0f;
    *finite = !bad;
    return ST_OK;
}

st_status st_device_div_to_16(st_device *d, st_precision p, uint16_t *dst, const float *src, size_t count,
                              float div) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_div_to_16(d, p, dst, src, count, div);
#endif
    if (p != ST_PREC_BF16 && p != ST_PREC_FP16)
        return st_fail(ST_ERR_INTERNAL, "st_device_div_to_16 with precision fp32");
    const int64_t n = (int64_t)count;
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
    for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
        for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
            dst[i] = p == ST_PREC_BF16 ? st_f32_to_bf16(src[i] / div) : st_f32_to_f16(src[i] / div);
    return ST_OK;
}

st_status st_device_from_16(st_device *d, st_precision p, float *dst, const uint16_t *src, size_t count) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_from_16(d, p, dst, src, count);
#endif
    if (p != ST_PREC_BF16 && p != ST_PREC_FP16)
        return st_fail(ST_ERR_INTERNAL, "st_device_from_16 with precision fp32");
    st_from_half(p, dst, src, (int64_t)count);
    return ST_OK;
}

st_status st_device_scale_f32(st_device *d, float *x, size_t count, float scale) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_grad_scale(d, x, (int64_t)count, scale);
#endif
#pragma omp parallel for simd schedule(static) if (count > (1u << 20))
    for (size_t i = 0; i < count; i++)
        x[i] *= scale;
    return ST_OK;
}

st_status st_device_add_slices(st_device *d, float *acc, const float *x, size_t n, int k) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_add_slices(d, acc, x, n, k);
#endif
    for (int j = 0; j < k; j++) {
        const float *xj = x + (size_t)j * n;
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            acc[i] += xj[i];
    }
    return ST_OK;
}

st_status st_device_block_sumsq(st_device *d, const float *g, size_t n, size_t block, double *out) {
#ifdef ST_HAVE_CUDA
    if (d) return st_cuda_block_sumsq(d, g, n, block, out);
#endif
    const int64_t nb = (int64_t)(n / block);
#pragma omp parallel for schedule(static) if (nb > 16)
    for (int64_t b = 0; b < nb; b++) {
        const float *x = g + b * (int64_t)block;
        double s = 0;
        for (size_t i = 0; i < block; i++)
            s += (double)x[i] * x[i];
        out[b] = s;
    }
    return ST_OK;
}
