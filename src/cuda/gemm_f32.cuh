/* Row-major fp32 matrix products through cuBLASLt, as cblas_sgemm reads them:
 * C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N), each
 * matrix with its leading dimension (elements between rows), optionally a
 * batch of such products at fixed element strides.
 *
 * Compute type CUBLAS_COMPUTE_32F (full fp32, never TF32), so the products
 * match the CPU's sgemm to fp32 rounding. beta 0 never reads C (the BLAS
 * contract, which cuBLASLt keeps), so C may hold anything, NaN included.
 * Used by the layers whose CPU reference calls sgemm: conv2d and attention.
 * A row-major view of st_cuda_matmul (matmul.cuh), the one cuBLASLt path
 * that the linear layer calls too: plans cached in the device, and a plain
 * kernel for a layout cuBLASLt declines.
 *
 * `operands` bf16 or fp16 says that A and B hold values of that precision
 * (the graph rounded them, docs/precision.md): they are then copied, exactly,
 * into 16-bit buffers in the device's scratch and multiplied on tensor cores
 * with fp32 accumulation and an fp32 C (the same result up to the order of
 * the fp32 sums); a layout without a 16-bit algorithm takes the fp32 path.
 * fp32 (0, the default): as above. */
#ifndef ST_CUDA_GEMM_F32_CUH
#define ST_CUDA_GEMM_F32_CUH

#include "common.cuh"

typedef struct st_gemm_f32 {
    bool ta, tb; /* op(A) = A^T, op(B) = B^T */
    int64_t M, N, K;
    float alpha, beta;
    const void *A;   /* (M, K), or (K, M) when ta */
    int64_t lda, sa; /* leading dimension, batch stride (elements) */
    const void *B;   /* (K, N), or (N, K) when tb */
    int64_t ldb, sb;
    void *C; /* (M, N) */
    int64_t ldc, sc;
    int batch;             /* 0 or 1: one product */
    st_precision operands; /* what A and B hold: fp32 (0), or bf16/fp16 values */
    /* how each is stored: fp32 (0) float arrays, else 16-bit arrays of
     * `operands` (an activation stored in 16 bits, src/layers/half_io.h) */
    st_precision a_store, b_store, c_store;
} st_gemm_f32;

/* Queue the product(s) on the device's compute stream. */
st_status st_cuda_gemm_f32(st_device *d, const st_gemm_f32 *p);

#endif
