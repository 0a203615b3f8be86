/* Row-major fp32 products through cuBLASLt (see gemm_f32.cuh).
 *
 * cuBLASLt is column-major: a row-major (R, Cc) matrix with leading
 * dimension ld is the column-major (Cc, R) matrix with the same ld, so
 * row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
 * operands swap, each keeps its own transpose flag, and m, n swap.
 *
 * The heuristic is told the real alignment of every pointer (the largest
 * power of two dividing the address, every batch offset and every leading
 * dimension, in bytes): by default it assumes 256 bytes, and a head's slice
 * of qkv or an odd-sized conv chunk is only 4-byte aligned.
 *
 * Should cuBLASLt offer no algorithm for a layout (or refuse the one it
 * offered), a plain kernel computes the same product: one thread per output
 * element, fp32 accumulation in k order. Slow, but the layer stays correct;
 * the cuBLASLt path is the one meant to run (nsys shows which ran). */
#include "gemm_f32.cuh"

enum { FALLBACK_THREADS = 256 };

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b], row-major, beta 0 never reads C. */
static __global__ void gemm_fallback_kernel(st_gemm_f32 p, int batch) {
    const int64_t n = (int64_t)batch * p.M * p.N;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t col = i % p.N, row = (i / p.N) % p.M, b = i / (p.M * p.N);
        const float *a = p.A + b * p.sa, *bm = p.B + b * p.sb;
        float sum = 0.0f;
        for (int64_t k = 0; k < p.K; k++) {
            const float av = p.ta ? a[k * p.lda + row] : a[row * p.lda + k];
            const float bv = p.tb ? bm[col * p.ldb + k] : bm[k * p.ldb + col];
            sum = fmaf(av, bv, sum);
        }
        float *c = p.C + b * p.sc + row * p.ldc + col;
        *c = p.beta != 0.0f ? p.alpha * sum + p.beta * *c : p.alpha * sum;
    }
}

static st_status gemm_fallback(st_device *d, const st_gemm_f32 *p, int batch) {
    gemm_fallback_kernel<<<st_cuda_blocks((int64_t)batch * p->M * p->N, FALLBACK_THREADS), FALLBACK_THREADS,
                           0, d->compute>>>(*p, batch);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}

/* Largest power of two (at most 256) dividing the byte address and the byte
 * sizes of the leading dimension and batch stride (elements of `es` bytes). */
static uint32_t align_bytes(const void *p, int64_t ld, int64_t stride, int64_t es) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)(ld * es) | 256u;
    if (stride) v |= (uint64_t)(stride * es);
    return (uint32_t)(v & (~v + 1)); /* lowest set bit */
}

/* Layout of a row-major stored (rows, cols) matrix of type t as cuBLASLt sees it. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                             int64_t ld, int batch, int64_t stride) {
    cublasStatus_t e = cublasLtMatrixLayoutCreate(l, t, (uint64_t)cols, (uint64_t)rows, ld);
    if (e != CUBLAS_STATUS_SUCCESS || batch <= 1) return e;
    int32_t bc = batch;
    e = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride);
    return e;
}

#define LT(call)                                                                                             \
    do {                                                                                                     \
        cublasStatus_t st_e_ = (call);                                                                       \
        if (st_e_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            s = st_cublas_fail(d, st_e_, #call, __FILE__, __LINE__);                                         \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* The product with A and B of type ab at pA, pB (the same layouts as p's
 * A and B, in elements); ST_ERR_UNSUPPORTED, with no error recorded, when
 * cuBLASLt has no algorithm for it. */
static st_status gemm_lt(st_device *d, const st_gemm_f32 *p, cudaDataType_t ab, const void *pA,
                         const void *pB) {
    st_status s = ST_OK;
    const int batch = p->batch > 1 ? p->batch : 1;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    /* column-major view: C^T (N, M) = op(B)^T (N, K) op(A)^T (K, M) */
    const cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* applied to B */
    const cublasOperation_t opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* applied to A */
    const int64_t es = ab == CUDA_R_32F ? 4 : 2;
    const uint32_t al_a = align_bytes(pB, p->ldb, batch > 1 ? p->sb : 0, es);
    const uint32_t al_b = align_bytes(pA, p->lda, batch > 1 ? p->sa : 0, es);
    const uint32_t al_c = align_bytes(p->C, p->ldc, batch > 1 ? p->sc : 0, 4);
    const uint64_t ws = d->lt_ws_bytes;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* stored row-major shapes: B is (N, K) when tb else (K, N); A is (K, M) when ta else (M, K) */
    LT(layout(&la, ab, p->tb ? p->N : p->K, p->tb ? p->K : p->N, p->ldb, batch, p->sb));
    LT(layout(&lb, ab, p->ta ? p->K : p->M, p->ta ? p->M : p->K, p->lda, batch, p->sa));
    LT(layout(&lc, CUDA_R_32F, p->M, p->N, p->ldc, batch, p->sc));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                            sizeof al_a));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                            sizeof al_b));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                            sizeof al_c));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                            sizeof al_c));
    {
        /* no algorithm for this layout: NOT_SUPPORTED, or success with none found */
        const cublasStatus_t e =
            cublasLtMatmulAlgoGetHeuristic(d->lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
        if (e == CUBLAS_STATUS_NOT_SUPPORTED || (e == CUBLAS_STATUS_SUCCESS && found == 0)) {
            s = ST_ERR_UNSUPPORTED;
            goto fail;
        }
        LT(e);
    }
    {
        const cublasStatus_t e = cublasLtMatmul(d->lt, op, &p->alpha, pB, la, pA, lb, &p->beta, p->C, lc,
                                                p->C, lc, &heur.algo, d->lt_ws, ws, d->compute);
        if (e == CUBLAS_STATUS_NOT_SUPPORTED)
            s = ST_ERR_UNSUPPORTED;
        else
            LT(e);
    }
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

/* Elements from the first to the last of a row-major stored (rows, cols)
 * matrix with leading dimension ld, over `batch` copies `stride` apart. */
static int64_t extent(int64_t rows, int64_t cols, int64_t ld, int batch, int64_t stride) {
    return (int64_t)(batch - 1) * stride + (rows - 1) * ld + cols;
}

st_status st_cuda_gemm_f32(st_device *d, const st_gemm_f32 *p) {
    if (p->M <= 0 || p->N <= 0) return ST_OK;
    if (p->K <= 0) return st_fail(ST_ERR_INTERNAL, "gemm with K = %lld", (long long)p->K);
    const int batch = p->batch > 1 ? p->batch : 1;
    st_status s;
    if (p->operands == ST_PREC_BF16 || p->operands == ST_PREC_FP16) {
        /* 16-bit copies of A and B (exact: they hold 16-bit values), B's at
         * the next 256-byte boundary after A's */
        const int64_t na = extent(p->ta ? p->K : p->M, p->ta ? p->M : p->K, p->lda, batch, p->sa);
        const int64_t nb = extent(p->tb ? p->N : p->K, p->tb ? p->K : p->N, p->ldb, batch, p->sb);
        const size_t off = ((size_t)na * 2 + 255) / 256 * 256;
        void *ws = NULL;
        ST_TRY(st_cuda_scratch(d, off + (size_t)nb * 2, &ws));
        void *a16 = ws, *b16 = (char *)ws + off;
        ST_TRY(st_cuda_to_16(d, p->operands, a16, p->A, na));
        ST_TRY(st_cuda_to_16(d, p->operands, b16, p->B, nb));
        s = gemm_lt(d, p, p->operands == ST_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F, a16, b16);
        if (s != ST_ERR_UNSUPPORTED) return s;
    }
    s = gemm_lt(d, p, CUDA_R_32F, p->A, p->B);
    if (s != ST_ERR_UNSUPPORTED) return s;
    return gemm_fallback(d, p, batch);
}
