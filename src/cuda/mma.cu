/* The tensor-core fragment layout check (cuda.h st_cuda_mma_check): one
 * warp builds A (16 x 16) and B (16 x 8) of pseudo-random bf16 values, fills
 * each lane's operands from them by mma.cuh's reading of the PTX layout,
 * multiplies with st_mma_16816 (the mma.sync instruction on a GPU, the
 * shuffle gather under the emulator) and compares each lane's four results
 * with the same elements of A B summed directly from the matrices. A GPU
 * whose instruction placed elements otherwise than mma.cuh says would give
 * wrong flash attention; this says so plainly. */
#include <math.h>

#include "common.cuh"
#include "mma.cuh"

extern "C" {
#include "cuda.h"
}

/* element (r, c) of the check's matrices, exact in bf16 */
static __device__ float elem(uint64_t seed, int which, int r, int c) {
    return __bfloat162float(
        __float2bfloat16_rn(st_cuda_rng_at(seed, (uint64_t)which, (uint64_t)(r * 16 + c)) - 0.5f));
}

static __global__ void mma_check_kernel(uint64_t seed, float *out) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t a[4], b[2];
    a[0] = st_bf16x2(elem(seed, 0, g, 2 * t), elem(seed, 0, g, 2 * t + 1));
    a[1] = st_bf16x2(elem(seed, 0, g + 8, 2 * t), elem(seed, 0, g + 8, 2 * t + 1));
    a[2] = st_bf16x2(elem(seed, 0, g, 2 * t + 8), elem(seed, 0, g, 2 * t + 9));
    a[3] = st_bf16x2(elem(seed, 0, g + 8, 2 * t + 8), elem(seed, 0, g + 8, 2 * t + 9));
    b[0] = st_bf16x2(elem(seed, 1, 2 * t, g), elem(seed, 1, 2 * t + 1, g));
    b[1] = st_bf16x2(elem(seed, 1, 2 * t + 8, g), elem(seed, 1, 2 * t + 9, g));
    const float c0[4] = {0.25f, -0.5f, 1.0f, 0.125f}; /* D = A B + C with a known C */
    float d[4] = {c0[0], c0[1], c0[2], c0[3]};
    st_mma_16816(d, a, b);
    for (int i = 0; i < 4; i++) {
        const int r = i < 2 ? g : g + 8, c = 2 * t + (i & 1);
        float want = c0[i];
        for (int k = 0; k < 16; k++)
            want += elem(seed, 0, r, k) * elem(seed, 1, k, c);
        out[lane * 8 + 2 * i] = d[i];
        out[lane * 8 + 2 * i + 1] = want;
    }
}

extern "C" st_status st_cuda_mma_check(st_device *d, uint64_t seed, double *max_err) {
    *max_err = INFINITY;
    void *buf = NULL;
    ST_TRY(st_cuda_alloc(d, 32 * 8 * sizeof(float), &buf));
    float h[32 * 8];
    mma_check_kernel<<<1, 32, 0, d->compute>>>(seed, (float *)buf);
    cudaError_t e = cudaGetLastError();
    st_status s = e == cudaSuccess ? st_cuda_download(d, h, buf, sizeof h)
                                   : st_cuda_fail(d, e, "the mma.sync check's launch", __FILE__, __LINE__);
    st_cuda_release(d, buf);
    if (s != ST_OK) return s;
    /* products of bf16 values are exact in fp32; only the order of the 16
     * sums differs: a few fp32 units of the sum's scale */
    double worst = 0;
    for (int i = 0; i < 32 * 4; i++) {
        const double err = fabs((double)h[2 * i] - (double)h[2 * i + 1]);
        if (!(err <= worst)) worst = err; /* a NaN stays the worst */
    }
    *max_err = worst;
    return ST_OK;
}
