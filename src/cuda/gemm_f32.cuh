/* Row-major fp32 matrix products through cuBLASLt, as cblas_sgemm reads them:
 * C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N), each
 * matrix with its leading dimension (elements between rows), optionally a
 * batch of such products at fixed element strides.
 *
 * Compute type CUBLAS_COMPUTE_32F (full fp32, never TF32), so the products
 * match the CPU's sgemm to fp32 rounding. beta 0 never reads C (the BLAS
 * contract, which cuBLASLt keeps), so C may hold anything, NaN included.
 * Used by the layers whose CPU reference calls sgemm: conv2d and attention
 * (the linear layer has its own path). Not tuned: one heuristic query per
 * call, no plan cache; a layout cuBLASLt declines runs a plain kernel. */
#ifndef ST_CUDA_GEMM_F32_CUH
#define ST_CUDA_GEMM_F32_CUH

#include "common.cuh"

typedef struct st_gemm_f32 {
    bool ta, tb; /* op(A) = A^T, op(B) = B^T */
    int64_t M, N, K;
    float alpha, beta;
    const float *A;  /* (M, K), or (K, M) when ta */
    int64_t lda, sa; /* leading dimension, batch stride (elements) */
    const float *B;  /* (K, N), or (N, K) when tb */
    int64_t ldb, sb;
    float *C; /* (M, N) */
    int64_t ldc, sc;
    int batch; /* 0 or 1: one product */
} st_gemm_f32;

/* Queue the product(s) on the device's compute stream. */
st_status st_cuda_gemm_f32(st_device *d, const st_gemm_f32 *p);

#endif
