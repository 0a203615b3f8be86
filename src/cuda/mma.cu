/* The tensor-core fragment layout check (cuda.h st_cuda_mma_check): one
 * warp builds A (16 x 16) and B (16 x 8) of pseudo-random bf16 values, fills
 * each lane's operands from them by mma.cuh's reading of the PTX layout,
 * multiplies with st_mma_16816 (the mma.sync instruction on a GPU, the
 * shuffle gather under the emulator) and compares each lane's four results
 * with the same elements of A B summed directly from the matrices. A GPU
 * whose instruction placed elements otherwise than mma.cuh says would give
 * wrong flash attention; this says so plainly. The same call checks
 * ldmatrix (st_ldsm_x4, st_ldsm_x4_t) against mma.cuh's reading of it: a
 * 16 x 16 matrix in shared memory loaded both ways, each lane's registers
 * compared with the elements the reading names. */
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

/* The 16 x 16 matrix in shared memory (rows 24 apart: 16-byte aligned), as
 * the flash kernels address it: lane L names row (L % 8) + 8 ((L / 8) % 2),
 * column 8 (L / 16), so matrices 0..3 are the quadrants (0, 0), (8, 0),
 * (0, 8), (8, 8) (row, column of their first element). Without .trans r[j]
 * is (row g, columns 2t, 2t+1) of quadrant j; with it (rows 2t, 2t+1,
 * column g). out[lane * 8 + 4 * trans + j]: 0 when the register matches. */
static __global__ void ldmatrix_check_kernel(uint64_t seed, float *out) {
    __shared__ __align__(16) __nv_bfloat16 m[16 * 24];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int i = lane; i < 16 * 16; i += 32)
        m[i / 16 * 24 + i % 16] = __float2bfloat16_rn(elem(seed, 2, i / 16, i % 16));
    __syncwarp();
    uint32_t r[4], rt[4];
    const __nv_bfloat16 *row = m + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 24 + 8 * (lane >> 4);
    st_ldsm_x4(r, row);
    st_ldsm_x4_t(rt, row);
    for (int j = 0; j < 4; j++) {
        const int r0 = 8 * (j & 1), c0 = 8 * (j >> 1);
        const bool plain = st_bf16x2_lo(r[j]) == elem(seed, 2, r0 + g, c0 + 2 * t) &&
                           st_bf16x2_hi(r[j]) == elem(seed, 2, r0 + g, c0 + 2 * t + 1);
        const bool trans = st_bf16x2_lo(rt[j]) == elem(seed, 2, r0 + 2 * t, c0 + g) &&
                           st_bf16x2_hi(rt[j]) == elem(seed, 2, r0 + 2 * t + 1, c0 + g);
        out[lane * 8 + j] = plain ? 0.0f : 1.0f;
        out[lane * 8 + 4 + j] = trans ? 0.0f : 1.0f;
    }
}

/* A check kernel (launch(out): one warp writing 32 x 8 floats) run into
 * device memory and downloaded into h. */
template <class L> static st_status run_check(st_device *d, const char *what, float h[32 * 8], L launch) {
    void *buf = NULL;
    ST_TRY(st_cuda_alloc(d, 32 * 8 * sizeof(float), &buf));
    launch((float *)buf);
    cudaError_t e = cudaGetLastError();
    st_status s = e == cudaSuccess ? st_cuda_download(d, h, buf, 32 * 8 * sizeof(float))
                                   : st_cuda_fail(d, e, what, __FILE__, __LINE__);
    st_cuda_release(d, buf);
    return s;
}

extern "C" st_status st_cuda_ldmatrix_check(st_device *d, uint64_t seed, int *mismatches,
                                            int *trans_mismatches) {
    *mismatches = *trans_mismatches = -1;
    float h[32 * 8];
    ST_TRY(run_check(d, "the ldmatrix check's launch", h,
                     [&](float *out) { ldmatrix_check_kernel<<<1, 32, 0, d->compute>>>(seed, out); }));
    *mismatches = *trans_mismatches = 0;
    for (int i = 0; i < 32 * 8; i++)
        if (h[i] != 0.0f) ++*(i % 8 < 4 ? mismatches : trans_mismatches);
    return ST_OK;
}

extern "C" st_status st_cuda_mma_check(st_device *d, uint64_t seed, double *max_err) {
    *max_err = INFINITY;
    float h[32 * 8];
    ST_TRY(run_check(d, "the mma.sync check's launch", h,
                     [&](float *out) { mma_check_kernel<<<1, 32, 0, d->compute>>>(seed, out); }));
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
