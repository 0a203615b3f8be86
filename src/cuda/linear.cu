/* CUDA twin of src/layers/linear.c: y = x W^T + b through cuBLASLt.
 *
 * Math mode: fp32 inputs with fp32 compute (CUBLAS_COMPUTE_32F), so parity
 * with the CPU holds to fp32 rounding. LINEAR_MATH below is the one switch for
 * TF32 when the precision config asks for speed.
 *
 * bf16 and fp16 runs (g->params->precision, docs/precision.md): every operand
 * of every product here already holds 16-bit values (the graph rounds node
 * outputs, graph inputs, activation gradients and the parameters' compute
 * copy), so the operands are converted, exactly, into 16-bit copies in the
 * device's scratch and multiplied on tensor cores with fp32 accumulation and
 * an fp32 output (A/B CUDA_R_16BF or CUDA_R_16F, C/D CUDA_R_32F,
 * CUBLAS_COMPUTE_32F): products of 16-bit values are exact in fp32, so the
 * result is the fp32 path's up to the order of the fp32 sums. Should
 * cuBLASLt offer no 16-bit algorithm for a layout, the fp32 operands (the
 * same values) go through the fp32 path. The graph then rounds the output.
 *
 * Row-major to column-major. cuBLASLt is column-major: a row-major (R, C)
 * matrix with leading dimension C is, in the same memory, a column-major
 * (C, R) matrix with leading dimension C, i.e. its transpose. So every
 * row-major product P = A B is computed as the column-major P^T = B^T A^T,
 * with each operand passed as the buffer it already is:
 *
 *   forward  y (M,N) = x W^T      ->  y^T (N x M) = op(w) x^T
 *            W (N,K): w is col-major (K x N) = W^T, op = T    [m=N n=M k=K]
 *            W (K,N) (in_out): w is col-major (N x K) = W_io^T, which
 *                     is the operand itself, op = N           [m=N n=M k=K]
 *            bias (N) = one value per row of y^T: CUBLASLT_EPILOGUE_BIAS.
 *   dW (N,K) += dy^T x  ->  dW^T (K x N) = x^T dy:  A = x (K x M, N),
 *            B = dy (N x M, T), beta 1                        [m=K n=N k=M]
 *   dW (K,N) += x^T dy  ->  dW^T (N x K) = dy^T x:  A = dy (N x M, N),
 *            B = x (K x M, T), beta 1                         [m=N n=K k=M]
 *   dx (M,K) = dy W     ->  dx^T (K x M) = W^T dy^T: A = w (K x N, N),
 *            B = dy (N x M, N), beta 0 or 1 (in_acc)          [m=K n=M k=N]
 *   dx (M,K) = dy W_io^T -> dx^T = W_io dy^T:        A = w (N x K, T),
 *            B = dy (N x M, N)                                [m=K n=M k=N]
 *
 * The bias gradient db (N) += sum over rows of dy is a deterministic column
 * sum (kernels.cuh), not the BGRADA/BGRADB epilogue: those write the bias
 * gradient rather than add to it, so accumulation over micro-steps would need
 * a temporary and an extra add anyway, and they constrain the algorithm choice.
 *
 * Descriptors and the heuristic's choice are made per call (a few
 * microseconds of host time each); caching them per node is a later speed-up. */
#include <string.h>

#include "kernels.cuh"

typedef enum linear_math { LINEAR_MATH_FP32, LINEAR_MATH_TF32 } linear_math;
static const linear_math LINEAR_MATH = LINEAR_MATH_FP32; /* TF32 breaks fp32 parity: opt-in later */

/* The largest power of two (up to 256) dividing the address: cuBLASLt's
 * heuristic assumes 256-byte aligned operands unless told otherwise, and
 * parameters in the packed arena are only 4-byte aligned in general. */
static uint32_t ptr_align(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 4 && (a % al) != 0)
        al >>= 1;
    return al;
}

/* D (m x n, ld ldd) = op(A) op(B) + beta D [+ bias (m) per row], column-major;
 * A and B of type `ab` (fp32, bf16 or fp16), D and the bias fp32, fp32
 * compute. A is stored (k x m) when ta, else (m x k); B is stored (n x k)
 * when tb, else (k x n). ST_ERR_UNSUPPORTED when cuBLASLt has no algorithm. */
static st_status lt_matmul_typed(st_graph *g, cudaDataType_t ab, bool ta, bool tb, int64_t m, int64_t n,
                                 int64_t k, const void *A, int64_t lda, const void *B, int64_t ldb,
                                 float beta, float *D, int64_t ldd, const float *bias, const char *what) {
    st_device *d = g->dev;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    st_status s = ST_OK;
    cublasStatus_t e;
#define LT_TRY(call)                                                                                         \
    do {                                                                                                     \
        e = (call);                                                                                          \
        if (e != CUBLAS_STATUS_SUCCESS) {                                                                    \
            s = st_cublas_fail(d, e, #call, __FILE__, __LINE__);                                             \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)
    {
        const cublasComputeType_t ct =
            LINEAR_MATH == LINEAR_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        LT_TRY(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
        const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        if (bias) {
            const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        LT_TRY(cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)(ta ? k : m), (uint64_t)(ta ? m : k), lda));
        LT_TRY(cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)(tb ? n : k), (uint64_t)(tb ? k : n), ldb));
        LT_TRY(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldd));
        LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = d->lt_ws_bytes;
        const uint32_t al_a = ptr_align(A), al_b = ptr_align(B), al_d = ptr_align(D);
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                    sizeof ws));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                    sizeof al_a));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                    sizeof al_b));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                    sizeof al_d));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                    sizeof al_d));
        cublasLtMatmulHeuristicResult_t h;
        memset(&h, 0, sizeof h);
        int found = 0;
        e = cublasLtMatmulAlgoGetHeuristic(d->lt, op, la, lb, ld, ld, pref, 1, &h, &found);
        if (e != CUBLAS_STATUS_SUCCESS || found == 0) {
            s = st_fail(ST_ERR_UNSUPPORTED,
                        "%s: cuBLASLt offers no %s algorithm for the %s product (m %lld, n %lld, k %lld, "
                        "alignments %u/%u/%u bytes): cuBLAS status %d on %s",
                        __FILE__,
                        ab == CUDA_R_32F    ? "fp32"
                        : ab == CUDA_R_16BF ? "bf16"
                                            : "fp16",
                        what, (long long)m, (long long)n, (long long)k, al_a, al_b, al_d, (int)e, d->name);
            goto done;
        }
        const float alpha = 1.0f;
        LT_TRY(cublasLtMatmul(d->lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &h.algo, d->lt_ws,
                              d->lt_ws_bytes, st_cuda_stream(g)));
    }
#undef LT_TRY
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

/* lt_matmul_typed with fp32 operands; in a bf16 or fp16 run, first with
 * 16-bit copies of them (exact: they hold 16-bit values) in the device's
 * scratch, A's copy first, B's at the next 256-byte boundary. Every caller
 * passes packed operands (the leading dimension is the stored rows). */
static st_status lt_matmul(st_graph *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                           int64_t lda, const float *B, int64_t ldb, float beta, float *D, int64_t ldd,
                           const float *bias, const char *what) {
    const st_precision p = g->params->precision;
    if (p == ST_PREC_BF16 || p == ST_PREC_FP16) {
        const int64_t ca = lda * (ta ? m : k), cb = ldb * (tb ? k : n); /* elements stored */
        const size_t off = ((size_t)ca * 2 + 255) / 256 * 256;
        void *ws = NULL;
        ST_TRY(st_cuda_scratch(g->dev, off + (size_t)cb * 2, &ws));
        void *a16 = ws, *b16 = (char *)ws + off;
        ST_TRY(st_cuda_to_16(g->dev, p, a16, A, ca));
        ST_TRY(st_cuda_to_16(g->dev, p, b16, B, cb));
        const st_status s = lt_matmul_typed(g, p == ST_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F, ta, tb, m, n, k,
                                            a16, lda, b16, ldb, beta, D, ldd, bias, what);
        if (s != ST_ERR_UNSUPPORTED) return s;
        st_clear_error(); /* no 16-bit algorithm for this layout: the same values in fp32 */
    }
    return lt_matmul_typed(g, CUDA_R_32F, ta, tb, m, n, k, A, lda, B, ldb, beta, D, ldd, bias, what);
}

/* y[i, :] = b: the bias for a product with beta 1 (the CPU's way). */
static __global__ void bias_rows_kernel(const float *b, float *y, int64_t M, int64_t N) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % N];
}

static st_status linear_forward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    const float *x = n->in[0]->data;     /* (M, K) */
    const float *w = n->params[0]->data; /* (N, K), or (K, N) when in_out */
    const float *b = n->args.i[ST_LINEAR_BIAS] ? n->params[1]->data : NULL; /* (N) */
    float *y = n->out->data;                                                /* (M, N) */
    st_status s = lt_matmul(g, !io, false, N, M, K, w, io ? N : K, x, K, 0.0f, y, N, b, "forward");
    if (s != ST_ERR_UNSUPPORTED || !b) return s;
    /* No algorithm takes this bias pointer (e.g. its alignment in the packed
     * arena) in the epilogue: write the bias rows, then add the product. */
    st_clear_error();
    bias_rows_kernel<<<st_cuda_blocks(M * N, 256), 256, 0, st_cuda_stream(g)>>>(b, y, M, N);
    ST_CUDA_LAUNCHED();
    return lt_matmul(g, !io, false, N, M, K, w, io ? N : K, x, K, 1.0f, y, N, NULL, "forward");
}

static st_status linear_backward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    const float *x = n->in[0]->data;     /* (M, K) */
    const float *w = n->params[0]->data; /* (N, K) or (K, N) */
    const float *dy = n->out->grad;      /* (M, N) */
    float *dw = n->params[0]->grad;      /* like w */
    if (dw) {
        if (io)
            ST_TRY(lt_matmul(g, false, true, N, K, M, dy, N, x, K, 1.0f, dw, N, NULL, "weight-gradient"));
        else
            ST_TRY(lt_matmul(g, false, true, K, N, M, x, K, dy, N, 1.0f, dw, K, NULL, "weight-gradient"));
    }
    if (n->args.i[ST_LINEAR_BIAS] && n->params[1]->grad)
        ST_TRY(st_colsum(g, st_colsum_plain{dy, N}, M, N, g->work, n->params[1]->grad));
    float *dx = n->in[0]->grad; /* (M, K) or NULL */
    if (dx) {
        const float beta = n->in_acc[0] ? 1.0f : 0.0f;
        if (io)
            ST_TRY(lt_matmul(g, true, false, K, M, N, w, N, dy, N, beta, dx, K, NULL, "input-gradient"));
        else
            ST_TRY(lt_matmul(g, false, false, K, M, N, w, K, dy, N, beta, dx, K, NULL, "input-gradient"));
    }
    return ST_OK;
}

static st_status linear_prepare(st_node *n, st_graph *g) {
    if (n->args.i[ST_LINEAR_BIAS])
        st_need_work(n, st_colsum_work(n->args.i[ST_LINEAR_M], n->args.i[ST_LINEAR_N]));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_linear_ops = {"linear", linear_forward, linear_backward,
                                                    linear_prepare};
