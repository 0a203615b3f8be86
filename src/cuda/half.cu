/* Mixed precision on the device (docs/precision.md): rounding fp32 arrays to
 * the values a bf16 or fp16 store keeps (where src/model/graph.c rounds node
 * outputs, activation gradients, graph inputs and the parameters' compute
 * copy), 16-bit copies of matrix-product operands in a scratch buffer (the
 * linear layer's bf16/fp16 cuBLASLt path), and the fp16 loss scaler's
 * overflow check.
 *
 * Rounding is cuda_bf16.h's __float2bfloat16_rn and cuda_fp16.h's
 * __float2half_rn, round to nearest even with fp16 subnormals and overflow
 * to Inf from 65520: the same values as src/core/half.h on the host (which
 * is tested bit for bit against PyTorch); NaN stays NaN (its payload is not
 * kept, on either side). Nothing here is built with fast-math, so fp16
 * subnormals are not flushed.
 *
 * Not here: 16-bit storage of activations (they stay fp32 arrays holding
 * 16-bit values, as on the CPU, so every layer's fp32 twin runs unchanged). */
#include <cuda_fp16.h>

#include "common.cuh"

enum { THREADS = 256 };

template <int P> static __global__ void round_kernel(float *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = st_round16<P>(src[i]);
}

extern "C" st_status st_cuda_round_f32(st_device *d, st_precision p, float *dst, const float *src,
                                       size_t count) {
    if (count == 0) return ST_OK;
    const int64_t n = (int64_t)count;
    if (p == ST_PREC_FP32) {
        if (dst != src)
            ST_CUDA_TRY_D(
                d, cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, d->compute));
        return ST_OK;
    }
    if (p == ST_PREC_BF16)
        round_kernel<ST_PREC_BF16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n);
    else
        round_kernel<ST_PREC_FP16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

static __global__ void to_f16_kernel(__half *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

st_status st_cuda_to_16(st_device *d, st_precision p, void *dst, const float *src, int64_t count) {
    if (count <= 0) return ST_OK;
    if (p == ST_PREC_BF16)
        to_bf16_kernel<<<st_cuda_blocks(count, THREADS), THREADS, 0, d->compute>>>((__nv_bfloat16 *)dst, src,
                                                                                   count);
    else if (p == ST_PREC_FP16)
        to_f16_kernel<<<st_cuda_blocks(count, THREADS), THREADS, 0, d->compute>>>((__half *)dst, src, count);
    else
        return st_fail(ST_ERR_INTERNAL, "st_cuda_to_16 with precision fp32");
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

/* 16-bit gradient buckets (dist.grad_dtype): dst = st_round16(src / div), and
 * back; the division in fp32, as the host's st_ddp does it. */
template <st_precision P> static __global__ void div_to_16_kernel(uint16_t *dst, const float *src, int64_t n, float div) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = __fdiv_rn(src[i], div);
        if (P == ST_PREC_BF16) {
            const __nv_bfloat16 h = __float2bfloat16_rn(v);
            dst[i] = *(const uint16_t *)&h;
        } else {
            const __half h = __float2half_rn(v);
            dst[i] = *(const uint16_t *)&h;
        }
    }
}

template <st_precision P> static __global__ void from_16_kernel(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint16_t b = src[i];
        if (P == ST_PREC_BF16)
            dst[i] = __bfloat162float(*(const __nv_bfloat16 *)&b);
        else
            dst[i] = __half2float(*(const __half *)&b);
    }
}

extern "C" st_status st_cuda_div_to_16(st_device *d, st_precision p, uint16_t *dst, const float *src, size_t count,
                                       float div) {
    if (!count) return ST_OK;
    const int64_t n = (int64_t)count;
    if (p == ST_PREC_BF16)
        div_to_16_kernel<ST_PREC_BF16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n, div);
    else if (p == ST_PREC_FP16)
        div_to_16_kernel<ST_PREC_FP16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n, div);
    else
        return st_fail(ST_ERR_INTERNAL, "st_cuda_div_to_16 with precision fp32");
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

extern "C" st_status st_cuda_from_16(st_device *d, st_precision p, float *dst, const uint16_t *src, size_t count) {
    if (!count) return ST_OK;
    const int64_t n = (int64_t)count;
    if (p == ST_PREC_BF16)
        from_16_kernel<ST_PREC_BF16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n);
    else if (p == ST_PREC_FP16)
        from_16_kernel<ST_PREC_FP16><<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(dst, src, n);
    else
        return st_fail(ST_ERR_INTERNAL, "st_cuda_from_16 with precision fp32");
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

st_status st_cuda_scratch(st_device *d, size_t nbytes, void **out) {
    *out = NULL;
    if (nbytes > d->scratch_bytes) {
        /* the old buffer may still be read by queued work */
        ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
        st_cuda_release(d, d->scratch); /* (its bytes out of this run's count: cudaFree alone kept them) */
        d->scratch = NULL;
        d->scratch_bytes = 0;
        void *p = NULL;
        ST_TRY(st_cuda_alloc(d, nbytes, &p));
        d->scratch = p;
        d->scratch_bytes = nbytes;
    }
    *out = d->scratch;
    return ST_OK;
}

/* flag = 1 when some element is Inf or NaN. Every writer writes the same
 * value, so the unsynchronised stores are benign and the result does not
 * depend on timing. x - x is 0 exactly for finite x. */
static __global__ void nonfinite_kernel(const float *x, int64_t n, int *flag) {
    bool bad = false;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        bad |= (x[i] - x[i]) != 0.0f;
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

extern "C" st_status st_cuda_all_finite(st_device *d, const float *x, size_t count, bool *finite) {
    *finite = true;
    if (count == 0) return ST_OK;
    const int64_t n = (int64_t)count;
    int h = 0;
    ST_CUDA_TRY_D(d, cudaMemsetAsync(d->flag, 0, sizeof *d->flag, d->compute));
    nonfinite_kernel<<<st_cuda_blocks(n, THREADS), THREADS, 0, d->compute>>>(x, n, d->flag);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(&h, d->flag, sizeof h, cudaMemcpyDeviceToHost, d->compute));
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, d->compute));
    *finite = h == 0;
    return ST_OK;
}
