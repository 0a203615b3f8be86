/* CUDA twin of src/layers/softmax_ce.c: fused log-softmax + negative
 * log-likelihood, loss = mean over the targets that are not ignore_index.
 *
 * Forward, one block per row: the row's max, then sum(exp(x - max)) (fp32
 * per thread, block sum in a fixed order), lse = max + log(sum) saved per row
 * as on the CPU; the row's loss lse - x[target] in double in the work
 * scratch (the CPU's layout); then one block adds the rows' losses in double,
 * counts the valid targets and writes loss = sum / count (0 when none).
 * The count is kept after the R lse values (prepare asks one more saved
 * float), so backward needs no host round trip.
 * Backward, one block per row: dlogits = (softmax - onehot) * dloss / count,
 * written or added per in_acc; an ignored row gets 0 (or is left as is).
 * Each thread reads a logit before writing its gradient, so dlogits may be
 * the logits' own memory (grad_in_place, graph.c grads_over_data).
 * A target outside [0, V) that is not ignore_index cannot be named from the
 * device without a sync: its row's loss and gradient are NaN, so the loss
 * shows it. The CPU path names the position. Logits and their gradient in
 * either storage (src/layers/half_io.h); the loss, lse and sums fp32. */
#include "kernels.cuh"

static __global__ void __launch_bounds__(1024)
    ce_row_kernel(st_fbuf x, const int32_t *tg, float *lse, double *row_loss, int64_t V, int32_t ign) {
    __shared__ float shf[32];
    const int64_t r = blockIdx.x;
    const int32_t t = tg[r];
    if (t == ign) { /* uniform over the block: all threads leave together */
        if (threadIdx.x == 0) {
            lse[r] = 0.0f;
            row_loss[r] = 0.0;
        }
        return;
    }
    const int64_t o = r * V;
    const double l = st_block_row_lse(x, o, V, shf);
    if (threadIdx.x == 0) {
        const bool ok = t >= 0 && t < V;
        lse[r] = ok ? (float)l : __int_as_float(0x7fc00000);
        row_loss[r] = ok ? l - (double)st_ld(x, o + t) : __longlong_as_double(0x7ff8000000000000LL);
    }
}

static __global__ void __launch_bounds__(1024)
    ce_backward_kernel(st_fbuf x, const int32_t *tg, const float *lse, const float *count_slot,
                       const float *dloss, st_fbuf dx, int64_t V, int32_t ign, bool acc) {
    const int64_t r = blockIdx.x;
    const int32_t t = tg[r];
    if (t == ign) {
        if (!acc)
            for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
                st_st(dx, r * V + v, 0.0f);
        return;
    }
    const int count = __float_as_int(*count_slot);
    const float scale = count ? dloss[0] / (float)count : 0.0f;
    const int64_t o = r * V;
    const float l = lse[r];
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        float d = expf(st_ld(x, o + v) - l) * scale;
        if (acc) d = st_ld(dx, o + v) + d;
        if (v == t) d -= scale; /* the CPU's order: add softmax, then subtract at the target */
        st_st(dx, o + v, d);
    }
}

static st_status softmax_ce_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_CE_ROWS], V = n->args.i[ST_CE_V];
    const int32_t ign = (int32_t)n->args.i[ST_CE_IGNORE];
    const int32_t *tg = n->in[1]->idata;  /* (R) */
    double *row_loss = (double *)g->work; /* (R): the CPU's work_count, 2 floats each */
    ce_row_kernel<<<(unsigned)R, st_ce_row_threads(V), 0, st_cuda_stream(g)>>>(st_data(n->in[0]), tg,
                                                                               n->saved, row_loss, V, ign);
    ST_CUDA_LAUNCHED();
    st_ce_total_kernel<<<1, 1024, 0, st_cuda_stream(g)>>>(row_loss, tg, R, ign, n->out->data, n->saved + R);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status softmax_ce_backward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_CE_ROWS], V = n->args.i[ST_CE_V];
    if (!n->in[0]->grad) return ST_OK; /* dlogits (R, V) */
    ce_backward_kernel<<<(unsigned)R, st_ce_row_threads(V), 0, st_cuda_stream(g)>>>(
        st_data(n->in[0]), n->in[1]->idata, n->saved, n->saved + R, n->out->grad, st_grad(n->in[0]), V,
        (int32_t)n->args.i[ST_CE_IGNORE], n->in_acc[0]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* Saved: lse (R) as the CPU, plus the count of valid targets. */
static st_status softmax_ce_prepare(st_node *n, st_graph *g) {
    n->saved_count = n->args.i[ST_CE_ROWS] + 1;
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_softmax_ce_ops = {
    "softmax_ce", softmax_ce_forward, softmax_ce_backward, softmax_ce_prepare, true, true, false, false, 0};
