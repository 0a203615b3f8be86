/* CUDA twin of src/layers/maxpool2d.c: k x k windows with a stride, no
 * padding, NHWC.
 *
 * Forward: one thread per output element scans its window in (kh, kw) order
 * with the CPU's test (v > best, or v is NaN), so ties and NaN pick the same
 * element; the flat index into x of the winner is saved as int32 in the
 * node's saved state, as on the CPU. Backward is a gather, not a scatter
 * (windows overlap when stride < k, and a scatter would need atomics): each
 * dx element starts from 0 (or its value, when the gradient accumulates) and
 * adds dy of every window whose saved argmax is that element, in increasing
 * (oh, ow) order, which is the order in which the CPU's scatter adds them:
 * the same bits. */
#include "common.cuh"

enum { THREADS = 256 };

typedef struct pool_dims {
    int64_t B, H, W, C, Ho, Wo, k, s;
} pool_dims;

static pool_dims dims(const st_node *n) {
    pool_dims d;
    d.B = n->in[0]->shape[0];
    d.H = n->in[0]->shape[1];
    d.W = n->in[0]->shape[2];
    d.C = n->in[0]->shape[3];
    d.Ho = n->out->shape[1];
    d.Wo = n->out->shape[2];
    d.k = n->args.i[ST_POOL_K];
    d.s = n->args.i[ST_POOL_STRIDE];
    return d;
}

static __global__ void maxpool_forward_kernel(st_fbuf x, st_fbuf y, int32_t *arg, pool_dims d) {
    const int64_t n = d.B * d.Ho * d.Wo * d.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % d.C, ow = (i / d.C) % d.Wo, oh = (i / (d.C * d.Wo)) % d.Ho;
        const int64_t b = i / (d.C * d.Wo * d.Ho);
        float best = 0.0f;
        int64_t at = 0;
        for (int64_t kh = 0; kh < d.k; kh++)
            for (int64_t kw = 0; kw < d.k; kw++) {
                const int64_t j = ((b * d.H + oh * d.s + kh) * d.W + ow * d.s + kw) * d.C + c;
                const float v = st_ld(x, j);
                if ((kh == 0 && kw == 0) || v > best || v != v) {
                    best = v;
                    at = j;
                }
            }
        st_st(y, i, best);
        arg[i] = (int32_t)at;
    }
}

static __global__ void maxpool_backward_kernel(st_fbuf dy, const int32_t *arg, st_fbuf dx, pool_dims d,
                                               bool acc) {
    const int64_t n = d.B * d.H * d.W * d.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % d.C, iw = (i / d.C) % d.W, ih = (i / (d.C * d.W)) % d.H;
        const int64_t b = i / (d.C * d.W * d.H);
        /* windows oh with oh*s <= ih <= oh*s + k - 1, within 0..Ho-1 (same for w) */
        const int64_t lh = ih - d.k + 1, lw = iw - d.k + 1;
        const int64_t oh0 = lh <= 0 ? 0 : (lh + d.s - 1) / d.s, ow0 = lw <= 0 ? 0 : (lw + d.s - 1) / d.s;
        const int64_t oh1 = ih / d.s < d.Ho - 1 ? ih / d.s : d.Ho - 1;
        const int64_t ow1 = iw / d.s < d.Wo - 1 ? iw / d.s : d.Wo - 1;
        float sum = acc ? st_ld(dx, i) : 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                const int64_t o = ((b * d.Ho + oh) * d.Wo + ow) * d.C + c;
                if (arg[o] == (int32_t)i) sum += st_ld(dy, o);
            }
        st_st(dx, i, sum);
    }
}

static st_status maxpool2d_forward(st_node *n, st_graph *g) {
    const pool_dims d = dims(n);
    maxpool_forward_kernel<<<st_cuda_blocks(n->out->count, THREADS), THREADS, 0, st_cuda_stream(g)>>>(
        st_data(n->in[0]), st_data(n->out), (int32_t *)n->saved, d);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status maxpool2d_backward(st_node *n, st_graph *g) {
    if (!n->in[0]->grad) return ST_OK; /* dx (B, H, W, C) */
    const pool_dims d = dims(n);
    maxpool_backward_kernel<<<st_cuda_blocks(n->in[0]->count, THREADS), THREADS, 0, st_cuda_stream(g)>>>(
        st_grad(n->out), (const int32_t *)n->saved, st_grad(n->in[0]), d, n->in_acc[0]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_maxpool2d_ops = {
    "maxpool2d", maxpool2d_forward, maxpool2d_backward, NULL, false, true, true, false, 0};
