/* CUDA twin of src/layers/attention.c: causal multi-head self-attention,
 * qkv (B, T, 3C) -> y (B, T, C), heads of hs = C / nh channels, scale
 * 1/sqrt(hs), the CPU's semantics.
 *
 * Two paths, chosen per node in `prepare` (the saved state differs):
 *
 * - Flash (attention_flash.cuh), for head sizes that are multiples of 16 up
 *   to 128: P is never stored; the saved state is the log-sum-exp per row, (B, nh, T)
 *   floats, and the workspace backward's row sums D = rowsum(dY * Y) (=
 *   rowsum(dP * P)), (B, nh, T). bf16 runs on tensor cores (mma.sync,
 *   attention_flash.cu), fp32 and fp16 runs in exact fp32
 *   (attention_flash_f32.cu).
 *
 * - Materialised (below), for every other head size: the straightforward,
 *   exact version. Per batch row b, the nh heads are one strided batch of
 *   cuBLASLt fp32 products (a head's Q, K, V are (T, hs) views of qkv with
 *   leading dimension 3C, one head hs elements after the previous).
 *   Forward: S = Q K^T scale for the full T x T (the masked half is
 *   computed and discarded), a causal softmax kernel turns each row into P
 *   in place (max subtracted, zeros after the diagonal), Y = P V. P is kept
 *   in the node's saved state (B, nh, T, T), as on the CPU. Backward, per
 *   b: dP = dY V^T into the workspace (nh, T, T), dS = P * (dP - D) in
 *   place with D = rowsum(dY * Y) (zero above the diagonal, where P is 0),
 *   then dQ = dS K scale, dK = dS^T Q scale, dV = P^T dY written (beta 0)
 *   or added (beta 1) as in_acc says: every element of dqkv belongs to
 *   exactly one of those products. bf16/fp16 runs: S = Q K^T and dP = dY
 *   V^T read only values the graph rounded to 16 bits (qkv, dy), so they
 *   take 16-bit operands (gemm_f32.cuh); the other three read P or dS: in
 *   bf16 runs the dS kernel rounds both to bf16 in place, as the CPU does
 *   (docs/precision.md), and they stay fp32 products of those values. qkv and y
 *   stay fp32 arrays on this path; the flash kernels read and write either
 *   storage (src/layers/half_io.h).
 *
 * - cuDNN's fused attention (attention_cudnn.h), when the graph asks for it
 *   (st_graph.attention_cudnn, model.attention_kernel=cudnn; the rule is
 *   st_attention_node_cudnn, which the planner counts by) on a node the
 *   flash kernels would take, in a bf16 run with qkv, y and their
 *   gradients stored as bf16 and 16-byte aligned, and a backward that writes
 *   dqkv (not adds into it): the same saved state as flash (the
 *   log-sum-exp per row), so a call outside those conditions runs the flash
 *   kernels on the same node. Its graphs are built in `prepare`; its
 *   workspace is the graph's scratch (st_graph.work), counted there.
 *
 * Not here: dropout on P. */
#include <math.h>

#include "attention_flash.cuh"
#include "gemm_f32.cuh"
#ifdef ST_HAVE_CUDNN
#include "attention_cudnn.h"
#endif
extern "C" {
#include "layers/attention_layout.h"
}

enum { ATTN_THREADS = 128 };

/* Reduce v over the block (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the result. `max` picks max, else sum. */
template <bool IS_MAX> __device__ float block_reduce(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, u) : v + u;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (IS_MAX ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, u) : v + u;
    }
    return v;
}

/* One block per row r of P (rows, T), query t = r % T: softmax over
 * columns 0..t in place, zeros after. */
static __global__ void causal_softmax_kernel(float *p, int64_t T) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x, t = r % T;
    float *row = p + r * T;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j <= t; j += blockDim.x)
        mx = fmaxf(mx, row[j]);
    mx = block_reduce<true>(mx, sh);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        const float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    const float inv = 1.0f / block_reduce<false>(sum, sh);
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
        row[j] = j <= t ? row[j] * inv : 0.0f;
}

/* One block per row r = h T + t of one batch row's (nh, T, T): dp <- P *
 * (dp - D), zeros after t, with D = rowsum(dY * Y) over the head's hs
 * channels (dy and y that batch row's (T, C)). bf16 runs (r16): dS and
 * then P's row rounded to bf16 in place, for the products that read them. */
static __global__ void causal_softmax_backward_kernel(float *dp, float *p, const float *dy, const float *y,
                                                      int64_t T, int64_t C, int64_t hs, bool r16) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x, t = r % T, off = t * C + (r / T) * hs;
    float *drow = dp + r * T, *prow = p + r * T;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < hs; c += blockDim.x)
        dot += dy[off + c] * y[off + c];
    dot = block_reduce<false>(dot, sh);
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
        const float ds = j <= t ? prow[j] * (drow[j] - dot) : 0.0f;
        drow[j] = r16 ? st_round16<ST_PREC_BF16>(ds) : ds;
        if (r16) prow[j] = st_round16<ST_PREC_BF16>(prow[j]);
    }
}

typedef struct attn_dims {
    int64_t B, T, C, C3, nh, hs;
    float scale;
} attn_dims;

static attn_dims dims(const st_node *n) {
    attn_dims a;
    a.B = n->in[0]->shape[0];
    a.T = n->in[0]->shape[1];
    a.C3 = n->in[0]->shape[2];
    a.C = a.C3 / 3;
    a.nh = n->args.i[ST_ATTN_NHEAD];
    a.hs = a.C / a.nh;
    a.scale = 1.0f / sqrtf((float)a.hs);
    return a;
}

/* One product per head of batch row b: C_h = alpha op(A_h) op(B_h) + beta C_h. */
static st_status heads(st_graph *g, const attn_dims &a, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, int64_t sa, const float *Bm, int64_t ldb,
                       int64_t sb, float beta, float *Cm, int64_t ldc, int64_t sc, st_precision operands) {
    st_gemm_f32 p = {};
    p.operands = operands;
    p.ta = ta;
    p.tb = tb;
    p.M = M;
    p.N = N;
    p.K = K;
    p.alpha = alpha;
    p.beta = beta;
    p.A = A;
    p.lda = lda;
    p.sa = sa;
    p.B = Bm;
    p.ldb = ldb;
    p.sb = sb;
    p.C = Cm;
    p.ldc = ldc;
    p.sc = sc;
    p.batch = (int)a.nh;
    return st_cuda_gemm_f32(g->dev, &p);
}

static bool flash(const attn_dims &a) { return st_attention_flash_fits(a.B, a.T, a.nh, a.hs); }

/* The materialised path's products read and write fp32 arrays: the graph
 * stores a 16-bit qkv or y only for the flash path (src/layers/half_io.h). */
static st_status fp32_io(const st_node *n) {
    if (n->in[0]->store == ST_PREC_FP32 && n->out->store == ST_PREC_FP32) return ST_OK;
    return st_fail(ST_ERR_INTERNAL, "attention %s: 16-bit storage on the materialised path", n->out->name);
}

static st_flash flash_args(st_node *n, st_graph *g, const attn_dims &a) {
    st_flash f = {};
    f.qkv = st_data(n->in[0]);
    f.y = st_data(n->out);
    f.dy = st_grad(n->out);
    f.dqkv = st_grad(n->in[0]);
    f.lse = n->saved;
    f.dsum = g->work;
    f.B = (int)a.B;
    f.T = (int)a.T;
    f.C = (int)a.C;
    f.nh = (int)a.nh;
    f.hs = (int)a.hs;
    f.scale = a.scale;
    f.acc = n->in_acc[0];
    return f;
}

/* ---- cuDNN's fused attention ------------------------------------------- */
#ifdef ST_HAVE_CUDNN
static st_cudnn_sdpa cudnn_shape(const attn_dims &a) {
    st_cudnn_sdpa s;
    s.B = a.B;
    s.T = a.T;
    s.nh = a.nh;
    s.hs = a.hs;
    s.scale = a.scale;
    return s;
}

/* The node runs on cuDNN (st_attention_node_cudnn: its graphs were built
 * in prepare, st_cudnn_sdpa_plan) and cuDNN took that pass of its shape */
static bool cudnn_ready(const st_graph *g, const st_node *n, const attn_dims &a, bool backward) {
    if (!st_attention_node_cudnn(g, n) || !g->dev->cudnn) return false;
    const st_cudnn_sdpa sh = cudnn_shape(a);
    return st_cudnn_sdpa_ready(g->dev->cudnn, &sh, backward);
}

static bool bf16_aligned(st_fbuf b) { return b.t == ST_PREC_BF16 && ((uintptr_t)b.p & 15) == 0; }

/* cuDNN's workspace: the graph's scratch, rounded up to 256 bytes
 * (st_attention_cudnn_work counts the extra) */
static void *cudnn_ws(const st_graph *g) { return (void *)(((uintptr_t)g->work + 255) & ~(uintptr_t)255); }

static bool cudnn_forward(st_graph *g, const st_node *n, const attn_dims &a, const st_flash &f,
                          st_status *s) {
    if (!cudnn_ready(g, n, a, false) || !bf16_aligned(f.qkv) || !bf16_aligned(f.y)) return false;
    const st_cudnn_sdpa sh = cudnn_shape(a);
    st_graph_span(g, "cudnn attention forward", false, 0);
    *s = st_cudnn_sdpa_forward(g->dev->cudnn, st_cuda_stream(g), &sh, f.qkv.p, f.y.p, f.lse, cudnn_ws(g));
    st_graph_span(g, "cudnn attention forward", true, 0);
    if (*s == ST_OK) g->dev->cudnn_calls++;
    return true;
}

static bool cudnn_backward(st_graph *g, const st_node *n, const attn_dims &a, const st_flash &f,
                           st_status *s) {
    if (!cudnn_ready(g, n, a, true) || f.acc || !bf16_aligned(f.qkv) || !bf16_aligned(f.y) ||
        !bf16_aligned(f.dy) || !bf16_aligned(f.dqkv))
        return false;
    const st_cudnn_sdpa sh = cudnn_shape(a);
    st_graph_span(g, "cudnn attention backward", false, 0);
    *s = st_cudnn_sdpa_backward(g->dev->cudnn, st_cuda_stream(g), &sh, f.qkv.p, f.y.p, f.dy.p, f.lse,
                                f.dqkv.p, cudnn_ws(g));
    st_graph_span(g, "cudnn attention backward", true, 0);
    if (*s == ST_OK) g->dev->cudnn_calls++;
    return true;
}

/* The node's graphs built now, the workspace they need added to its scratch */
static st_status cudnn_prepare(st_node *n, st_graph *g, const attn_dims &a) {
    if (g->dev->cudnn_refused) return ST_OK; /* (the flash kernels: said once) */
    if (!g->dev->cudnn) {
        /* cuDNN that will not start here (its library or its handle
         * refused, after the session found it): the run goes on with the
         * flash kernels, as for a shape cuDNN does not take, said once */
        char where[256];
        snprintf(where, sizeof where, "cuDNN attention on %s", g->dev->name);
        const st_status s = st_cudnn_create(where, &g->dev->cudnn);
        if (s == ST_ERR_UNSUPPORTED) {
            st_ticker_sayf("scaletrain: warning: %s; scaletrain's flash kernels run the attention "
                           "(model.attention_kernel=flash says so from the start)\n",
                           st_last_error());
            st_clear_error();
            g->dev->cudnn_refused = true;
            return ST_OK;
        }
        ST_TRY(s);
    }
    const st_cudnn_sdpa sh = cudnn_shape(a);
    int64_t ws = 0;
    const st_status s = st_cudnn_sdpa_plan(g->dev->cudnn, &sh, !g->forward_only, &ws);
    if (s == ST_ERR_UNSUPPORTED) { /* once per shape; the pass cuDNN took (if one) is built */
        st_ticker_sayf("scaletrain: warning: %s; scaletrain's flash kernels run it\n", st_last_error());
        st_clear_error();
    } else {
        ST_TRY(s);
    }
    st_attention_cudnn_work(n, ws);
    return ST_OK;
}
#endif

static st_status attention_forward(st_node *n, st_graph *g) {
    const attn_dims a = dims(n);
    if (flash(a)) {
        const st_flash f = flash_args(n, g, a);
#ifdef ST_HAVE_CUDNN
        st_status s;
        if (cudnn_forward(g, n, a, f, &s)) return s;
#endif
        return st_cuda_flash_forward(g, &f);
    }
    ST_TRY(fp32_io(n));
    const int64_t T = a.T, TT = T * T;
    const float *qkv = n->in[0]->data; /* (B, T, 3C) */
    float *y = n->out->data;           /* (B, T, C) */
    float *P = n->saved;               /* (B, nh, T, T) */
    for (int64_t b = 0; b < a.B; b++) {
        const float *q = qkv + b * T * a.C3, *k = q + a.C; /* (T, hs) per head, ld 3C */
        float *pb = P + b * a.nh * TT;                     /* (nh, T, T) */
        /* S = Q K^T scale */
        ST_TRY(heads(g, a, false, true, T, T, a.hs, a.scale, q, a.C3, a.hs, k, a.C3, a.hs, 0.0f, pb, T, TT,
                     g->params->precision));
    }
    const int64_t rows = a.B * a.nh * T;
    causal_softmax_kernel<<<(unsigned)rows, ATTN_THREADS, 0, st_cuda_stream(g)>>>(P, T);
    ST_CUDA_LAUNCHED();
    for (int64_t b = 0; b < a.B; b++) {
        const float *v = qkv + b * T * a.C3 + 2 * a.C;
        /* Y = P V into y[b] (T, C), head h at column h*hs */
        ST_TRY(heads(g, a, false, false, T, a.hs, T, 1.0f, P + b * a.nh * TT, T, TT, v, a.C3, a.hs, 0.0f,
                     y + b * T * a.C, a.C, a.hs, ST_PREC_FP32));
    }
    return ST_OK;
}

static st_status attention_backward(st_node *n, st_graph *g) {
    float *dqkv = n->in[0]->grad; /* (B, T, 3C) */
    if (!dqkv) return ST_OK;
    const attn_dims a = dims(n);
    if (flash(a)) {
        const st_flash f = flash_args(n, g, a);
#ifdef ST_HAVE_CUDNN
        st_status s;
        if (cudnn_backward(g, n, a, f, &s)) return s;
#endif
        return st_cuda_flash_backward(g, &f);
    }
    ST_TRY(fp32_io(n));
    const int64_t T = a.T, TT = T * T;
    const float *qkv = n->in[0]->data;
    const float *y = n->out->data;  /* (B, T, C) */
    const float *dy = n->out->grad; /* (B, T, C) */
    float *P = n->saved;            /* (B, nh, T, T) */
    float *dp = g->work;            /* (nh, T, T) for one batch row at a time */
    const bool r16 = g->params->precision == ST_PREC_BF16;
    const float beta = n->in_acc[0] ? 1.0f : 0.0f;
    for (int64_t b = 0; b < a.B; b++) {
        const int64_t off = b * T * a.C3;
        const float *q = qkv + off, *k = q + a.C, *v = q + 2 * a.C; /* (T, hs), ld 3C */
        float *dq = dqkv + off, *dk = dq + a.C, *dv = dq + 2 * a.C;
        float *pb = P + b * a.nh * TT;       /* (nh, T, T) */
        const float *dyb = dy + b * T * a.C; /* (T, hs) per head, ld C */
        /* dP = dY V^T */
        ST_TRY(heads(g, a, false, true, T, T, a.hs, 1.0f, dyb, a.C, a.hs, v, a.C3, a.hs, 0.0f, dp, T, TT,
                     g->params->precision));
        /* dS = P * (dP - rowsum(dY * Y)) (bf16: dS and P rounded) */
        causal_softmax_backward_kernel<<<(unsigned)(a.nh * T), ATTN_THREADS, 0, st_cuda_stream(g)>>>(
            dp, pb, dyb, y + b * T * a.C, T, a.C, a.hs, r16);
        ST_CUDA_LAUNCHED();
        /* dQ = dS K scale */
        ST_TRY(heads(g, a, false, false, T, a.hs, T, a.scale, dp, T, TT, k, a.C3, a.hs, beta, dq, a.C3, a.hs,
                     ST_PREC_FP32));
        /* dK = dS^T Q scale */
        ST_TRY(heads(g, a, true, false, T, a.hs, T, a.scale, dp, T, TT, q, a.C3, a.hs, beta, dk, a.C3, a.hs,
                     ST_PREC_FP32));
        /* dV = P^T dY */
        ST_TRY(heads(g, a, true, false, T, a.hs, T, 1.0f, pb, T, TT, dyb, a.C, a.hs, beta, dv, a.C3, a.hs,
                     ST_PREC_FP32));
    }
    return ST_OK;
}

/* Saved state and workspace as src/layers/attention_layout.h says (the
 * planner counts them from there): flash, the log-sum-exp per row and D;
 * materialised, P and one batch row's dP; with cuDNN, its graphs built and
 * the workspace they need (the planner counts it by cudnn-frontend's rule:
 * st_attention_cudnn_bytes). */
static st_status attention_prepare(st_node *n, st_graph *g) {
    const attn_dims a = dims(n);
    st_attention_device_counts(a.B, a.T, a.nh, a.hs, &n->saved_count, &n->work_count);
#ifdef ST_HAVE_CUDNN
    if (st_attention_node_cudnn(g, n)) ST_TRY(cudnn_prepare(n, g, a));
#endif
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_attention_ops = {
    "attention", attention_forward, attention_backward, attention_prepare, false, false, false, false, 0};
