/* CUDA twin of src/layers/layernorm.c: y = (x - mean) * rstd * weight + bias
 * over the last dim, biased variance, rstd = 1/sqrt(var + eps).
 *
 * Forward: one warp per row, two passes over the row (mean, then the
 * variance of x - mean, as the CPU), mean and rstd saved per row in the
 * node's saved state in the CPU's layout: mean (R), then rstd (R).
 * Backward: one warp per row for dx = rstd (g - mean(g) - xhat mean(g xhat)),
 * g = dy * weight; dweight and dbias are deterministic column sums
 * (kernels.cuh) over the rows. Sums run in a different order than the CPU's
 * loops: parity to fp32 rounding. Input, output and their gradients in
 * either storage (src/layers/half_io.h); weight and bias as the run's compute
 * copy holds them (16-bit in bf16/fp16); statistics fp32. */
#include "kernels.cuh"

enum { LN_WARPS = 8 }; /* rows per block of forward and backward */

static __global__ void ln_forward_kernel(st_fbuf x, st_fbuf w, st_fbuf b, st_fbuf y, float *mean, float *rstd,
                                         int64_t R, int64_t C, float eps) {
    const int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= R) return; /* whole warps leave together: no block-wide sync below */
    const int64_t o = r * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32)
        s += st_ld(x, o + c);
    const float m = st_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float d = st_ld(x, o + c) - m;
        v += d * d;
    }
    v = st_warp_sum(v) / (float)C;
    const float rs = 1.0f / sqrtf(v + eps);
    for (int64_t c = lane; c < C; c += 32)
        st_st(y, o + c, (st_ld(x, o + c) - m) * rs * st_ld(w, c) + st_ld(b, c));
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

static __global__ void ln_backward_dx_kernel(st_fbuf x, st_fbuf w, st_fbuf dy, const float *mean,
                                             const float *rstd, st_fbuf dx, int64_t R, int64_t C, bool acc) {
    const int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= R) return;
    const int64_t o = r * C;
    const float m = mean[r], s = rstd[r];
    float gm = 0.0f, gxm = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float gc = st_ld(dy, o + c) * st_ld(w, c);
        gm += gc;
        gxm += gc * (st_ld(x, o + c) - m) * s;
    }
    gm = st_warp_sum(gm) / (float)C;
    gxm = st_warp_sum(gxm) / (float)C;
    for (int64_t c = lane; c < C; c += 32) {
        const float d = s * (st_ld(dy, o + c) * st_ld(w, c) - gm - (st_ld(x, o + c) - m) * s * gxm);
        st_st(dx, o + c, acc ? st_ld(dx, o + c) + d : d);
    }
}

/* dweight's terms: dy * xhat. */
struct ln_dw_term {
    st_fbuf x, dy;
    const float *mean, *rstd;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const {
        return st_ld(dy, r * C + c) * (st_ld(x, r * C + c) - mean[r]) * rstd[r];
    }
};

static st_status layernorm_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    float *mean = n->saved, *rstd = n->saved + R; /* (R), (R) */
    ln_forward_kernel<<<(unsigned)((R + LN_WARPS - 1) / LN_WARPS), 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(
        st_data(n->in[0]), st_data(n->params[0]), st_data(n->params[1]), st_data(n->out), mean, rstd, R, C,
        n->args.f[ST_LAYERNORM_F_EPS]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status layernorm_backward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    const st_fbuf x = st_data(n->in[0]), dy = st_grad(n->out); /* (R, C) */
    const float *mean = n->saved, *rstd = n->saved + R;
    if (n->in[0]->grad) {
        ln_backward_dx_kernel<<<(unsigned)((R + LN_WARPS - 1) / LN_WARPS), 32 * LN_WARPS, 0,
                                st_cuda_stream(g)>>>(x, st_data(n->params[0]), dy, mean, rstd,
                                                     st_grad(n->in[0]), R, C, n->in_acc[0]);
        ST_CUDA_LAUNCHED();
    }
    float *dw = n->params[0]->grad, *db = n->params[1]->grad; /* (C), (C) */
    if (dw && db) {
        ST_TRY(st_colsum(g, ln_dw_term{x, dy, mean, rstd, C}, R, C, g->work, dw));
        ST_TRY(st_colsum(g, st_colsum_act{dy, C}, R, C, g->work, db));
    }
    return ST_OK;
}

static st_status layernorm_prepare(st_node *n, st_graph *g) {
    st_need_work(n, st_colsum_work(n->args.i[ST_LAYERNORM_ROWS], n->args.i[ST_LAYERNORM_C]));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_layernorm_ops = {
    "layernorm", layernorm_forward, layernorm_backward, layernorm_prepare, false, true, false, true};
