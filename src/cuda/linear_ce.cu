/* CUDA twin of src/layers/linear_ce.c: a language model's output layer and
 * cross-entropy in one, a chunk of rows at a time (see the CPU file for the
 * plan and the memory it saves).
 *
 * First the weight is copied into the work scratch as (Vp, C), Vp = V
 * rounded up to 64, its rows past V zeroed (linear_ce.c padded_vocab): the
 * products below run on Vp, never on an odd V. Per chunk of m rows, on the
 * compute stream: the logits z (m, Vp) = h_c W^T into the work scratch
 * (those past V zero), stored as the plain linear would store them (16
 * bits in a bf16 or fp16 run, rounded once from the fp32 accumulation);
 * one block per row takes its max, sum of exponentials (fp32 per thread,
 * block sums in a fixed order, as softmax_ce.cu), the row's loss in double,
 * and in a training forward writes (softmax - onehot) over the row, each
 * thread reading an element before writing it (thread 0 reads the target's
 * logit before a barrier); then dh_c (m, C) = z W into the saved fp32 dh, and dW
 * (Vp, C) += z^T h_c (beta 0 on the first chunk) into the saved fp32 dW,
 * both through cuBLASLt (matmul.cuh st_graph_matmul, tensor cores in
 * 16-bit runs). One block then sums the rows' losses in double and counts
 * the valid targets (kernels.cuh st_ce_total_kernel), the count saved for
 * backward, which needs no host round trip: one grid-stride kernel writes
 * or adds dh * dloss / count into h's gradient (either storage) and adds
 * dW * dloss / count into W's (fp32; under ZeRO-2 its staging region).
 * A target outside [0, V) that is not ignore_index gives its row a NaN loss
 * (the device cannot name it without a sync; the CPU path does). */
#include <limits.h>

#include "kernels.cuh"
#include "matmul.cuh"

extern "C" st_status st_linear_ce_check_grads(const st_node *n);

/* P: ST_PREC_FP32 for any storage (kernels.cuh st_block_row_walk), or z's
 * 16-bit precision for the walk that loads a group ahead
 * (ST_KV_CE_ROWS_PREFETCH: the same values). SRC: ST_ROW_GLOBAL, the row
 * read twice from device memory (the log-sum-exp, then softmax - onehot);
 * ST_ROW_KEPT (16-bit P), its groups kept in dynamic shared memory by the
 * first walk (lce_row_bytes) and read back from there by the second, so
 * that the row is read from device memory once (ST_KV_CE_ROWS_SHARED: the
 * same values). */
template <int P, int SRC>
static __global__ void __launch_bounds__(1024)
    lce_rows_kernel(st_fbuf z, const int32_t *tg, double *row_loss, int64_t V, int64_t ld, int32_t ign,
                    bool grads, float pre) {
    __shared__ float shf[32];
    __shared__ float lse;
    extern __shared__ uint4 lce_row[]; /* (ST_ROW_KEPT: the row's groups) */
    constexpr int FIRST = SRC == ST_ROW_KEPT ? ST_ROW_KEEP : ST_ROW_GLOBAL;
    const int64_t i = blockIdx.x, o = i * ld;
    const int32_t t = tg[i];
    if (t == ign) { /* uniform over the block */
        if (threadIdx.x == 0) row_loss[i] = 0.0;
        if (grads) st_block_row_map<P>(z, o, V, [](int64_t, float) { return 0.0f; });
        return;
    }
    const double l = st_block_row_lse<P, FIRST>(z, o, V, shf, lce_row);
    if (threadIdx.x == 0) {
        const bool ok = t >= 0 && t < V;
        row_loss[i] = ok ? l - (double)st_ld(z, o + t) : __longlong_as_double(0x7ff8000000000000LL);
        lse = ok ? (float)l : __int_as_float(0x7fc00000);
    }
    __syncthreads(); /* the target's logit read, lse shared */
    if (!grads) return;
    const float lf = lse;
    st_block_row_map<P, SRC>(
        z, o, V,
        [&](int64_t v, float x) { /* (times pre: args.h ST_LCE_PRESCALE) */
                                  const float d = expf(x - lf);
                                  return (v == t ? d - 1.0f : d) * pre;
        },
        lce_row);
}

/* Dynamic shared memory of lce_rows_kernel's ST_ROW_KEPT: a row's groups of
 * 8 16-bit logits (at most V / 8 of them, whatever the row's alignment). */
static size_t lce_row_bytes(int64_t V) { return (size_t)(V / 8) * sizeof(uint4); }

/* The bytes each 16-bit ST_ROW_KEPT instance may take, as opted in for (0:
 * none, that variant not run): set by linear_ce_prepare on the device, for
 * a row that fits beside the kernel's own (about 100 KB at GPT-2's
 * vocabulary; sm_80 and sm_90 allow a block 163 and 227 KB) */
static size_t lce_row_optin[2];

template <int P> static void lce_opt_in(size_t bytes) {
    size_t *have = &lce_row_optin[P == ST_PREC_FP16];
    if (*have >= bytes) return;
    const void *k = reinterpret_cast<const void *>(&lce_rows_kernel<P, ST_ROW_KEPT>);
    if (bytes > (size_t)INT_MAX ||
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        cudaGetLastError(); /* (too large for this device: the variant is not run; no launch's error) */
        return;
    }
    /* as much of the SM's L1 as shared memory as it has (a hint): two rows'
     * blocks an SM, not one (the kernel streams; it needs little L1) */
    if (cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
        cudaGetLastError();
    *have = bytes;
}

/* The rows kernel for z's storage and the graph's variants, on m rows */
static void lce_rows(st_graph *g, st_fbuf z, const int32_t *tg, double *row_loss, int64_t m, int64_t V,
                     int64_t ld, int32_t ign, bool grads) {
    const unsigned threads = st_ce_row_threads(V);
    const float pre = ST_LCE_PRESCALE(z.t);
    const cudaStream_t s = st_cuda_stream(g);
    const size_t kb = lce_row_bytes(V);
    const bool kept = (g->kernel_variants & ST_KV_CE_ROWS_SHARED) && z.t != ST_PREC_FP32 &&
                      lce_row_optin[z.t == ST_PREC_FP16] >= kb,
               ahead = (g->kernel_variants & ST_KV_CE_ROWS_PREFETCH) && z.t != ST_PREC_FP32;
    if (kept) g->dev->kept_rows_calls++;
    if (kept && z.t == ST_PREC_BF16)
        lce_rows_kernel<ST_PREC_BF16, ST_ROW_KEPT>
            <<<(unsigned)m, threads, kb, s>>>(z, tg, row_loss, V, ld, ign, grads, pre);
    else if (kept)
        lce_rows_kernel<ST_PREC_FP16, ST_ROW_KEPT>
            <<<(unsigned)m, threads, kb, s>>>(z, tg, row_loss, V, ld, ign, grads, pre);
    else if (ahead && z.t == ST_PREC_BF16)
        lce_rows_kernel<ST_PREC_BF16, ST_ROW_GLOBAL>
            <<<(unsigned)m, threads, 0, s>>>(z, tg, row_loss, V, ld, ign, grads, pre);
    else if (ahead)
        lce_rows_kernel<ST_PREC_FP16, ST_ROW_GLOBAL>
            <<<(unsigned)m, threads, 0, s>>>(z, tg, row_loss, V, ld, ign, grads, pre);
    else
        lce_rows_kernel<ST_PREC_FP32, ST_ROW_GLOBAL>
            <<<(unsigned)m, threads, 0, s>>>(z, tg, row_loss, V, ld, ign, grads, pre);
}

/* VW elements a thread: 8 on 16-byte accesses (st_ldv, st_stv) when every
 * array is 16-byte aligned and ndx and nw are multiples of 8, else 1. */
template <int VW>
static __global__ void lce_backward_kernel(st_fbuf dh, st_fbuf dx, int64_t ndx, bool acc, st_fbuf dw,
                                           st_fbuf gw, int64_t nw, const float *count_slot,
                                           const float *dloss, float pre) {
    const int count = __float_as_int(*count_slot);
    const float scale = count ? dloss[0] / (float)count / pre : 0.0f;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * VW; i < ndx + nw;
         i += (int64_t)gridDim.x * blockDim.x * VW) {
        float d[VW], o[VW];
        const bool h = i < ndx; /* (a group of VW never straddles: ndx % VW == 0) */
        const int64_t j = h ? i : i - ndx;
        st_ldv<VW>(h ? dh : dw, j, d);
        if (!h || acc) st_ldv<VW>(h ? dx : gw, j, o);
#pragma unroll
        for (int k = 0; k < VW; k++)
            d[k] = (!h || acc) ? o[k] + d[k] * scale : d[k] * scale;
        st_stv<VW>(h ? dx : gw, j, d);
    }
}

static st_status linear_ce_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LCE_ROWS], C = n->args.i[ST_LCE_C], V = n->args.i[ST_LCE_V];
    const int64_t Rc = n->args.i[ST_LCE_CHUNK], Vp = n->args.i[ST_LCE_VP], ld = Vp;
    const int32_t ign = (int32_t)n->args.i[ST_LCE_IGNORE];
    const st_fbuf h = st_data(n->in[0]);      /* (R, C) */
    const int32_t *tg = n->in[1]->idata;      /* (R) */
    const st_fbuf w0 = st_data(n->params[0]); /* (V, C), 16-bit in bf16/fp16 */
    float *dh = ST_LCE_SAVED_DH(n), *dw = ST_LCE_SAVED_DW(n), *count = ST_LCE_SAVED_COUNT(n);
    /* the weight's zero-padded copy (Vp, C), after the rows' losses (linear_ce.c wcopy_floats) */
    const int64_t wcopy = n->args.i[ST_LCE_CHUNK_FLOATS] + st_align_floats(2 * R);
    const st_fbuf w = {g->work + wcopy, w0.t};
    const size_t wbytes = (size_t)(V * C) * st_fbuf_elem(w0), pad = (size_t)((Vp - V) * C) * st_fbuf_elem(w0);
    if ((size_t)(n->work_count - wcopy) * sizeof(float) < wbytes + pad)
        return st_fail(ST_ERR_INTERNAL,
                       "linear_ce %s: %lld floats of device scratch for the padded weight, want %zu bytes",
                       n->out->name, (long long)(n->work_count - wcopy), wbytes + pad);
    ST_CUDA_TRY(cudaMemcpyAsync(w.p, w0.p, wbytes, cudaMemcpyDeviceToDevice, st_cuda_stream(g)));
    if (pad) ST_CUDA_TRY(cudaMemsetAsync((char *)w.p + wbytes, 0, pad, st_cuda_stream(g)));
    /* the chunk in the plain linear's output storage (linear_ce.c chunk_elem) */
    const st_fbuf z = {g->work, g->params->precision};
    double *row_loss = (double *)(g->work + n->args.i[ST_LCE_CHUNK_FLOATS]);
    const bool grads =
        g->training && n->out->requires_grad && !g->forward_only; /* (saved: the count alone) */
    n->args.i[ST_LCE_GRADS_MADE] = grads;
    for (int64_t r0 = 0; r0 < R; r0 += Rc) {
        const int64_t m = R - r0 < Rc ? R - r0 : Rc;
        const st_fbuf hc = st_fbuf_at(h, r0 * C);
        /* z^T (Vp x m) = W h_c^T: column-major, as linear.cu's forward */
        ST_TRY(st_graph_matmul(g, true, false, Vp, m, C, w, C, hc, C, 0.0f, z, ld, NULL, "linear_ce logits"));
        st_graph_span(g, "linear_ce rows", false, 0);
        lce_rows(g, z, tg + r0, row_loss + r0, m, V, ld, ign, grads);
        ST_CUDA_LAUNCHED();
        st_graph_span(g, "linear_ce rows", true, 0);
        if (!grads) continue;
        /* dh_c (m, C) = z W: dh_c^T (C x m) = W^T z^T */
        ST_TRY(st_graph_matmul(g, false, false, C, m, Vp, w, C, z, ld, 0.0f,
                               st_fbuf{dh + r0 * C, ST_PREC_FP32}, C, NULL, "linear_ce dh"));
        /* dW (Vp, C) += z^T h_c: dW^T (C x Vp) = h_c^T z */
        ST_TRY(st_graph_matmul(g, false, true, C, Vp, m, hc, C, z, ld, r0 ? 1.0f : 0.0f,
                               st_fbuf{dw, ST_PREC_FP32}, C, NULL, "linear_ce dW"));
    }
    st_ce_total_kernel<<<1, 1024, 0, st_cuda_stream(g)>>>(row_loss, tg, R, ign, n->out->data, count);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status linear_ce_backward(st_node *n, st_graph *g) {
    ST_TRY(st_linear_ce_check_grads(n));
    const int64_t R = n->args.i[ST_LCE_ROWS], C = n->args.i[ST_LCE_C], V = n->args.i[ST_LCE_V];
    const float *dh = ST_LCE_SAVED_DH(n), *dw = ST_LCE_SAVED_DW(n);
    const int64_t ndx = n->in[0]->grad ? R * C : 0, nw = n->params[0]->grad ? V * C : 0;
    if (ndx + nw == 0) return ST_OK;
    const st_fbuf dx = n->in[0]->grad ? st_grad(n->in[0]) : st_fbuf{NULL, ST_PREC_FP32};
    const st_fbuf dhb = {(void *)dh, ST_PREC_FP32}, dwb = {(void *)dw, ST_PREC_FP32},
                  gw = {n->params[0]->grad, ST_PREC_FP32};
    const float *count = ST_LCE_SAVED_COUNT(n);
    if (st_fbuf_aligned8(dhb, ndx) && st_fbuf_aligned8(dx, ndx) && st_fbuf_aligned8(dwb, nw) &&
        st_fbuf_aligned8(gw, nw))
        lce_backward_kernel<8><<<st_cuda_blocks((ndx + nw) / 8, 256), 256, 0, st_cuda_stream(g)>>>(
            dhb, dx, ndx, n->in_acc[0], dwb, gw, nw, count, n->out->grad,
            ST_LCE_PRESCALE(g->params->precision));
    else
        lce_backward_kernel<1><<<st_cuda_blocks(ndx + nw, 256), 256, 0, st_cuda_stream(g)>>>(
            dhb, dx, ndx, n->in_acc[0], dwb, gw, nw, count, n->out->grad,
            ST_LCE_PRESCALE(g->params->precision));
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* The rows kernel's shared-memory instance opted in to the row's bytes
 * (ST_KV_CE_ROWS_SHARED; the variant may be turned on after the graph is
 * built: bench/bench_cuda_kernels), once, here: cudaFuncSetAttribute waits
 * for the device's copies, which the step loop must not. */
static st_status linear_ce_prepare(st_node *n, st_graph *g) {
    const size_t kb = lce_row_bytes(n->args.i[ST_LCE_V]);
    if (g->params->precision == ST_PREC_BF16) lce_opt_in<ST_PREC_BF16>(kb);
    if (g->params->precision == ST_PREC_FP16) lce_opt_in<ST_PREC_FP16>(kb);
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_linear_ce_ops = {
    "linear_ce", linear_ce_forward, linear_ce_backward, linear_ce_prepare, false, true, true, false, 0};
