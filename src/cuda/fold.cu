/* The deterministic reduction's kernels (dist.deterministic, src/dist/dist.h):
 * folding every rank's gradient of a shard into its accumulator in rank
 * order, and the gradient norm's sums of squares per block of the arena.
 * Both repeat the host's loops (src/core/device.c) float for float: each
 * element's sum is one thread's additions in the host's order, with
 * __fadd_rn so that nothing is contracted, so a fold or a norm on a GPU has
 * the host's bits, and the same bits whatever the number of ranks. */
#include "common.cuh"

enum { THREADS = 256 };

/* acc[i] += x[j * n + i] for j = 0, 1, ..., k - 1, in that order. */
static __global__ void add_slices_kernel(float *acc, const float *x, int64_t n, int k) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float a = acc[i];
        for (int j = 0; j < k; j++)
            a = __fadd_rn(a, x[(int64_t)j * n + i]);
        acc[i] = a;
    }
}

extern "C" st_status st_cuda_add_slices(st_device *d, float *acc, const float *x, size_t n, int k) {
    if (n == 0 || k <= 0) return ST_OK;
    add_slices_kernel<<<st_cuda_blocks((int64_t)n, THREADS), THREADS, 0, d->compute>>>(acc, x, (int64_t)n, k);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

/* out[b] = the sum of g[b * block + i]^2 for i = 0, 1, ..., block - 1 in
 * that order, in double: one thread per block (a once-per-step pass). */
static __global__ void block_sumsq_kernel(const float *g, int64_t nblocks, int block, double *out) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nblocks;
         b += (int64_t)gridDim.x * blockDim.x) {
        const float *x = g + b * block;
        double s = 0.0;
        for (int i = 0; i < block; i++)
            s = __dadd_rn(s, __dmul_rn((double)x[i], (double)x[i]));
        out[b] = s;
    }
}

extern "C" st_status st_cuda_block_sumsq(st_device *d, const float *g, size_t n, size_t block, double *out) {
    const int64_t nblocks = (int64_t)(n / block);
    if (nblocks == 0) return ST_OK;
    block_sumsq_kernel<<<st_cuda_blocks(nblocks, THREADS), THREADS, 0, d->compute>>>(g, nblocks, (int)block, out);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}
