/* Row-major fp32 products (see gemm_f32.cuh) as the column-major products
 * of matmul.cuh, which caches their cuBLASLt plans.
 *
 * cuBLASLt is column-major: a row-major (R, Cc) matrix with leading
 * dimension ld is the column-major (Cc, R) matrix with the same ld, so
 * row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
 * operands swap, each keeps its own transpose flag, and m, n swap. */
#include "gemm_f32.cuh"
#include "matmul.cuh"

st_status st_cuda_gemm_f32(st_device *d, const st_gemm_f32 *p) {
    st_matmul q = {};
    q.ta = p->tb; /* column-major: C^T (N, M) = op(B)^T (N, K) op(A)^T (K, M) */
    q.tb = p->ta;
    q.m = p->N;
    q.n = p->M;
    q.k = p->K;
    q.alpha = p->alpha;
    q.beta = p->beta;
    q.A = p->B;
    q.lda = p->ldb;
    q.sa = p->sb;
    q.B = p->A;
    q.ldb = p->lda;
    q.sb = p->sa;
    q.D = p->C;
    q.ldd = p->ldc;
    q.sd = p->sc;
    q.batch = p->batch;
    q.a_store = p->b_store; /* the operands swap (above) */
    q.b_store = p->a_store;
    q.d_store = p->c_store;
    q.operands = p->operands;
    q.ld_align = true; /* a head's slice of qkv, a conv chunk: rows start at odd offsets */
    q.what = "gemm";
    return st_cuda_matmul(d, &q);
}
