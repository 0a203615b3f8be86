/* The one cuBLASLt matrix product of the backend, with cached plans: the
 * linear layer calls it directly (column-major, bias epilogue), conv2d and
 * attention through the row-major view of gemm_f32.cuh.
 *
 * Column-major, as cuBLASLt reads it:
 *   D (m x n, ld ldd) = alpha op(A) op(B) + beta C [+ bias (m) on every column]
 * C is D itself unless the call names another matrix of D's layout and
 * storage (a residual the linear layer adds: graph.c fuse_gelu).
 * op(A) (m x k): A stored (k x m) when ta, else (m x k), leading dimension
 * lda; op(B) (k x n): B stored (n x k) when tb, else (k x n); optionally a
 * batch of such products at fixed element strides sa, sb, sd. beta 0 never
 * reads D (the BLAS contract, which cuBLASLt keeps), so D may hold NaN.
 *
 * Compute: CUBLAS_COMPUTE_32F (full fp32, never TF32 unless `tf32`).
 * `operands` bf16 or fp16 says A and B hold values of that precision (the
 * graph rounded them, docs/precision.md). Each of A, B and D is stored as
 * floats or, when its `*_store` says so, as 16-bit values of that precision
 * (src/layers/half_io.h). A and B stored as floats are copied, exactly, into
 * 16-bit buffers in the device's scratch; the product runs on tensor cores
 * with fp32 accumulation, and a 16-bit D gets the fp32 result (beta D and
 * the bias added in fp32) rounded to nearest even, once. The bias is of D's
 * type (cuBLASLt's rule): fp32 for a float D, 16-bit for a 16-bit D. A layout
 * without a 16-bit algorithm takes the fp32 path when everything is stored
 * as floats (the same values), else the plain kernel below.
 *
 * Plans: the matmul descriptor, the three matrix layouts and the heuristic's
 * algorithm are made once per key (types, transposes, m n k, leading
 * dimensions, batch and strides, epilogue, compute type and the operands'
 * alignments) and kept in the device (st_device.plans, freed with it), so a
 * step makes no cuBLASLt object and asks no heuristic after its first
 * micro-step. A key with no algorithm is remembered too. The workspace is
 * the device's one (lt_ws, allocated when it opens). With model.matmul_tune
 * (st_cuda_set_matmul_tune) a plan keeps the heuristic's first 8
 * algorithms and its first product times them (matmul.cu tune; docs/cuda.md,
 * "Choosing cuBLASLt's algorithm").
 *
 * Alignment: the heuristic assumes 256-byte aligned operands unless told
 * otherwise, and a tensor in the packed parameter arena, a head's slice of
 * qkv or an odd-sized conv chunk is often only 4-byte aligned. It is told
 * the largest power of two (at most 256) dividing each operand's address
 * and, for a batch, its batch stride in bytes; with `ld_align` also its
 * leading dimension in bytes (gemm_f32's rule for conv2d and attention;
 * the linear layer tells the address alone, as it always has).
 *
 * No algorithm at all: without an epilogue a plain kernel computes the
 * product (one thread per element, fp32 accumulation in k order, either
 * storage: slow but correct; nsys shows which ran); with an epilogue the
 * call fails with ST_ERR_UNSUPPORTED and a message, and the caller does the
 * epilogue's work itself: writes the bias into D and adds the product with
 * beta 1 (linear.cu: the same single rounding, as the bias is a 16-bit value
 * in a 16-bit D), or runs the GELU layer's own kernels (linear.cu, "GELU in
 * the epilogue").
 *
 * GELU epilogues (the graph's fused GELU, graph.h st_node.fwd_fuses_next):
 * GELU_AUX(_BIAS) stores the product (plus bias) in aux, rounded to D's
 * storage, and GELU of the unrounded value in D; DGELU multiplies the
 * product by GELU's derivative at aux, D = gelu'(aux) op(A) op(B), beta 0.
 * GELU is the tanh form, as the GELU layer's. The aux pointer's alignment
 * and aux_ld are part of the plan's key (the heuristic reads the pointer).
 *
 * Bias-gradient epilogues (a linear layer's db inside its dW product,
 * model.fused_bias_grad): BGRADA writes into `bgrad` (m) the sums of
 * op(A)'s rows over k, BGRADB into `bgrad` (n) the sums of op(B)'s columns
 * over k: the column sums of the output gradient that the product reads
 * anyway. They are written, not added to (the caller adds them where
 * gradients accumulate), of D's type, summed in fp32 from A's or B's
 * values as stored (16-bit in a bf16 or fp16 run). */
#ifndef ST_CUDA_MATMUL_CUH
#define ST_CUDA_MATMUL_CUH

#include "common.cuh"

typedef enum st_matmul_epilogue {
    ST_MATMUL_EP_NONE = 0,
    ST_MATMUL_EP_BIAS,          /* D += bias[i] on row i: CUBLASLT_EPILOGUE_BIAS */
    ST_MATMUL_EP_GELU_AUX,      /* aux = the product, D = gelu(aux): CUBLASLT_EPILOGUE_GELU_AUX */
    ST_MATMUL_EP_GELU_AUX_BIAS, /* the same after the bias: CUBLASLT_EPILOGUE_GELU_AUX_BIAS */
    ST_MATMUL_EP_DGELU,         /* D = gelu'(aux) * the product: CUBLASLT_EPILOGUE_DGELU (beta 0) */
    ST_MATMUL_EP_BGRADA,        /* bgrad (m) = op(A) summed over k: CUBLASLT_EPILOGUE_BGRADA */
    ST_MATMUL_EP_BGRADB,        /* bgrad (n) = op(B) summed over k: CUBLASLT_EPILOGUE_BGRADB */
} st_matmul_epilogue;

/* The epilogue adds a bias / reads or writes the GELU input matrix aux. */
static inline bool st_matmul_ep_bias(st_matmul_epilogue e) {
    return e == ST_MATMUL_EP_BIAS || e == ST_MATMUL_EP_GELU_AUX_BIAS;
}
static inline bool st_matmul_ep_aux(st_matmul_epilogue e) {
    return e == ST_MATMUL_EP_GELU_AUX || e == ST_MATMUL_EP_GELU_AUX_BIAS || e == ST_MATMUL_EP_DGELU;
}
/* The epilogue writes a bias gradient (bgrad). */
static inline bool st_matmul_ep_bgrad(st_matmul_epilogue e) {
    return e == ST_MATMUL_EP_BGRADA || e == ST_MATMUL_EP_BGRADB;
}

typedef struct st_matmul {
    bool ta, tb; /* op(A) = A^T, op(B) = B^T */
    int64_t m, n, k;
    float alpha, beta;
    const void *A;   /* (k x m) when ta, else (m x k) */
    int64_t lda, sa; /* leading dimension, batch stride (elements) */
    const void *B;   /* (n x k) when tb, else (k x n) */
    int64_t ldb, sb;
    void *D; /* (m x n) */
    int64_t ldd, sd;
    const void *C;         /* read with beta instead of D: (m x n, ld ldd), D's storage; NULL: D */
    int batch;             /* 0 or 1: one product */
    st_matmul_epilogue ep; /* any but NONE: batch must be 0 or 1 */
    const void *bias;      /* (m), with a bias epilogue; of D's storage */
    void *bgrad;           /* (m) with BGRADA, (n) with BGRADB: written; of D's storage */
    void *aux;             /* (m x n, ld aux_ld), the GELU input, of D's storage: written by GELU_AUX*, read
                              by DGELU; aux_ld a multiple of 8 (cuBLASLt's rule) */
    int64_t aux_ld;
    st_precision operands; /* what A and B hold: fp32 (0), or bf16/fp16 values */
    st_precision a_store, b_store, d_store; /* fp32 (0): float arrays; else 16-bit arrays of `operands` */
    bool tf32;             /* CUBLAS_COMPUTE_32F_FAST_TF32 (breaks fp32 parity) */
    bool ld_align;         /* the alignment told also divides each leading dimension (below) */
    const char *what;      /* for messages: "linear forward", ... */
} st_matmul;
#ifdef ST_CUDA_EMU /* (`what` is the host's: no kernel reads it) */
static inline int st_emu_pointers(const st_matmul &p, const void **out) {
    return st_emu_pointers_of(out, {p.A, p.B, p.D, p.C, p.bias, p.bgrad, p.aux});
}
#endif

/* Queue the product(s) on the device's compute stream. */
st_status st_cuda_matmul(st_device *d, const st_matmul *p);

/* The st_matmul of a product of graph buffers, with no epilogue yet. */
static inline st_matmul st_graph_matmul_of(st_graph *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                           st_fbuf A, int64_t lda, st_fbuf B, int64_t ldb, float beta,
                                           st_fbuf D, int64_t ldd, const char *what) {
    st_matmul p = {};
    p.ta = ta;
    p.tb = tb;
    p.m = m;
    p.n = n;
    p.k = k;
    p.alpha = 1.0f;
    p.beta = beta;
    p.A = A.p;
    p.a_store = A.t;
    p.lda = lda;
    p.B = B.p;
    p.b_store = B.t;
    p.ldb = ldb;
    p.D = D.p;
    p.d_store = D.t;
    p.ldd = ldd;
    p.operands = g->params->precision;
    p.tf32 = false;
    p.what = what;
    return p;
}

/* Queue p on graph g's device inside the profiler's span of its name. */
static inline st_status st_graph_matmul_run(st_graph *g, const st_matmul *p) {
    st_graph_span(g, p->what, false, 0);
    const st_status s = st_cuda_matmul(g->dev, p);
    st_graph_span(g, p->what, true, 2.0 * (double)p->m * (double)p->n * (double)p->k);
    return s;
}

/* st_graph_matmul with any epilogue but the bias gradients (ep, its bias
 * and its GELU input aux of D's storage, leading dimension m: D's rows) and
 * beta's matrix C (NULL: D): the layers' one way to fill an st_matmul from
 * graph buffers. */
static inline st_status st_graph_matmul_ep(st_graph *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                           st_fbuf A, int64_t lda, st_fbuf B, int64_t ldb, float beta,
                                           st_fbuf D, int64_t ldd, st_matmul_epilogue ep, const void *bias,
                                           void *aux, const void *C, const char *what) {
    st_matmul p = st_graph_matmul_of(g, ta, tb, m, n, k, A, lda, B, ldb, beta, D, ldd, what);
    p.C = C;
    p.ep = ep;
    p.bias = bias;
    p.aux = aux;
    p.aux_ld = aux ? m : 0;
    return st_graph_matmul_run(g, &p);
}

/* The same with a bias-gradient epilogue (ST_MATMUL_EP_BGRADA or BGRADB):
 * bgrad, of D's storage, is written (not added to). ST_ERR_UNSUPPORTED (a
 * message recorded) when no algorithm takes it. ST_MATMUL_EP_NONE (bgrad
 * NULL): the product alone. */
static inline st_status st_graph_matmul_bgrad(st_graph *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                              st_fbuf A, int64_t lda, st_fbuf B, int64_t ldb, float beta,
                                              st_fbuf D, int64_t ldd, st_matmul_epilogue ep, void *bgrad,
                                              const char *what) {
    st_matmul p = st_graph_matmul_of(g, ta, tb, m, n, k, A, lda, B, ldb, beta, D, ldd, what);
    p.ep = ep;
    p.bgrad = bgrad;
    return st_graph_matmul_run(g, &p);
}

/* D (m x n, ld ldd) = op(A) op(B) + beta D [+ bias (m) per row], column-major
 * (A stored (k x m) when ta, else (m x k); B stored (n x k) when tb, else
 * (k x n)), on graph g's device: in a bf16 or fp16 run on tensor cores with
 * 16-bit operands (read directly where they are stored in 16 bits, else
 * exact copies), else fp32 (never TF32: it breaks fp32 parity with the CPU;
 * an opt-in later). The bias is of D's storage. With a bias,
 * ST_ERR_UNSUPPORTED (a message recorded) when no algorithm takes the bias
 * epilogue. The layers' products (linear.cu, linear_ce.cu) go through it. */
static inline st_status st_graph_matmul(st_graph *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, st_fbuf A,
                                        int64_t lda, st_fbuf B, int64_t ldb, float beta, st_fbuf D, int64_t ldd,
                                        const void *bias, const char *what) {
    return st_graph_matmul_ep(g, ta, tb, m, n, k, A, lda, B, ldb, beta, D, ldd,
                              bias ? ST_MATMUL_EP_BIAS : ST_MATMUL_EP_NONE, bias, NULL, NULL, what);
}

#endif
