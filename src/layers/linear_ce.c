/* A language model's output layer and its loss as one layer (linear_ce):
 * loss = mean over the targets that are not ignore_index of
 * cross_entropy(h W^T, target), with W (V, C) the tied embedding, computed a
 * chunk of rows at a time so that the (R, V) logits never exist whole
 * (Liger's fused linear cross-entropy; llm.c's fused classifier).
 *
 * A training forward does the layer's backward too, chunk by chunk: the
 * chunk's logits z = h_c W^T (the work scratch), their log-sum-exp and loss,
 * then z becomes (softmax - onehot), unscaled, in place, and the two
 * products of backward follow at once: dh_c = z W into the saved dh (R, C)
 * and dW += z^T h_c into the saved dW (V, C), both fp32. Backward only
 * scales them by dloss / n_valid (which is why forward needs neither the
 * loss scale nor the valid count first). The FLOPs are the plain pair's; the
 * memory is dh + dW + one chunk instead of the logits, whose gradient the
 * plain pair writes over them: GPT-2 124M at 16 x 1024 tokens holds 1.6 GB
 * of bf16 logits, against 50 MB + 154 MB + a 1/8 chunk here. An eval
 * forward (g->training false) computes the loss alone, and a backward after
 * it fails (st_linear_ce_check_grads) rather than use stale gradients.
 *
 * Precision: in a bf16 or fp16 run the chunk's logits are rounded as the
 * plain linear's output would be, and (softmax - onehot) as its gradient
 * would be, in fp16 times ST_LCE_FP16_PRESCALE (args.h: the small
 * probabilities of a large vocabulary kept out of fp16's subnormals, as the
 * plain pair's loss scale keeps them), the storage the CUDA twin gives them;
 * dh and dW stay fp32, and the graph rounds h's gradient after backward as
 * for any layer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "ce_rows.h"
#include "core/blas.h"
#include "core/half.h"
#include "layers.h"

/* The chunk's logits at most this many bytes, and at most an eighth of the
 * whole: small enough to save, large enough (a thousand rows or more on a
 * large vocabulary) that dW's read and write per chunk stay small beside the
 * chunk's products. */
#define LCE_CHUNK_BYTES ((int64_t)256 << 20)
#define LCE_MIN_CHUNKS 8

/* Bytes of a logit in the chunk: 16-bit storage in a bf16 or fp16 graph on
 * (or laid out for) a device, as the plain linear's output would be. */
static int64_t chunk_elem(const st_graph *g) {
    return g->params->precision != ST_PREC_FP32 && st_graph_device_laid_out(g) ? 2 : 4;
}

static int64_t chunk_rows(int64_t R, int64_t V, int64_t elem) {
    int64_t n = (R * V * elem + LCE_CHUNK_BYTES - 1) / LCE_CHUNK_BYTES;
    if (n < LCE_MIN_CHUNKS) n = LCE_MIN_CHUNKS;
    if (n > R) n = R;
    return (R + n - 1) / n;
}

/* Floats of the chunk in the work scratch (rows x ld in the chunk's storage). */
static int64_t chunk_floats(int64_t rows, int64_t ld, int64_t elem) {
    return st_align_floats(elem == 2 ? (rows * ld + 1) / 2 : rows * ld);
}

/* The padded vocabulary: V rounded up to 64. It is the chunk's row stride
 * (every row of the logits starts 16-byte aligned, which cuBLASLt's
 * tensor-core kernels need of a leading dimension) and, on a device, the
 * products' V: the weight is copied each forward into a (Vp, C) scratch
 * whose rows past V are zero, so the logits past V are zero, add nothing to
 * dh, and dW's rows past V (saved, never read) are zero. With GPT-2's
 * V = 50257 (odd) as the products' dimension the fused head took 28 ms of
 * an H200's 67 ms step for products worth about 8 (bench/RESULTS.md); 50304
 * is the vocabulary GPT-2 trainers pad to. The CPU's products keep V (BLAS
 * has no such kernels); its chunk rows and saved dW use the same layout. */
static int64_t padded_vocab(int64_t V) { return (V + 63) / 64 * 64; }

/* Floats of the weight's zero-padded copy: on a device, (Vp, C) in the
 * weight's storage (16-bit in a bf16/fp16 run, as the chunk); none on the
 * CPU. */
static int64_t wcopy_floats(const st_graph *g, int64_t V, int64_t C) {
    return st_graph_device_laid_out(g) ? chunk_floats(padded_vocab(V), C, chunk_elem(g)) : 0;
}

st_status st_linear_ce_check_grads(const st_node *n) {
    if (n->args.i[ST_LCE_GRADS_MADE]) return ST_OK;
    return st_fail(ST_ERR_INTERNAL,
                   "linear_ce %s: backward after a forward that made no gradients (an eval forward: set the "
                   "graph's `training` before a forward that backward follows)",
                   n->out->name);
}

bool st_linear_ce_saves_memory(const st_graph *g, int64_t R, int64_t C, int64_t V) {
    const int64_t elem = chunk_elem(g);
    /* (the saved dh (R, C) is not counted: it takes the place of h, which
     * the plain head's product keeps for its backward and the fused head
     * does not; counted, it chose the logits at 256 classes and n_embd 768,
     * where the graph held more with them: test_grad_lives) */
    const int64_t fused = st_align_floats(padded_vocab(V) * C) + ST_ALIGN_FLOATS +
                          chunk_floats(chunk_rows(R, V, elem), padded_vocab(V), elem) + wcopy_floats(g, V, C);
    const int64_t plain =
        chunk_floats(R, V, elem) + st_align_floats(R); /* logits (their gradient over them), lse */
    return fused < plain;
}

static st_status linear_ce_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LCE_ROWS], C = n->args.i[ST_LCE_C], V = n->args.i[ST_LCE_V];
    const int64_t Rc = n->args.i[ST_LCE_CHUNK], ld = n->args.i[ST_LCE_VP];
    const int32_t ign = (int32_t)n->args.i[ST_LCE_IGNORE];
    const float *h = n->in[0]->data;                                         /* (R, C) */
    const int32_t *tg = n->in[1]->idata;                                     /* (R) */
    const float *w = n->params[0]->data;                                     /* (V, C) */
    float *dh = ST_LCE_SAVED_DH(n);                                          /* (R, C) */
    float *dw = ST_LCE_SAVED_DW(n);                                          /* (V, C) of (Vp, C) */
    float *count = ST_LCE_SAVED_COUNT(n);                                    /* n_valid, as int bits */
    float *z = g->work;                                                      /* (Rc, ld) */
    double *row_loss = (double *)(g->work + n->args.i[ST_LCE_CHUNK_FLOATS]); /* (R) */
    const st_precision prec = g->params->precision;
    const float pre = ST_LCE_PRESCALE(prec);
    int64_t n_valid = 0;
    for (int64_t r = 0; r < R; r++) { /* serially first, so the error names the first bad position */
        if (tg[r] == ign) continue;
        if (tg[r] < 0 || tg[r] >= V) return st_ce_bad_target(n, "linear_ce", r, tg[r], V, ign);
        n_valid++;
    }
    const bool grads =
        g->training && n->out->requires_grad && !g->forward_only; /* (saved: the count alone) */
    n->args.i[ST_LCE_GRADS_MADE] = grads;
    for (int64_t r0 = 0; r0 < R; r0 += Rc) {
        const int64_t m = R - r0 < Rc ? R - r0 : Rc;
        st_sgemm(CblasNoTrans, CblasTrans, (int)m, (int)V, (int)C, 1.0f, h + r0 * C, (int)C, w, (int)C, 0.0f,
                 z, (int)ld);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; i++) {
            const int64_t r = r0 + i;
            float *zr = z + i * ld;
            if (tg[r] == ign) {
                row_loss[r] = 0.0;
                if (grads) memset(zr, 0, (size_t)V * sizeof(float));
                continue;
            }
            st_round_array(prec, zr, V); /* the plain linear's output */
            const float mx = st_ce_row_max(zr, V);
            const double l = (double)mx + log(st_ce_row_sum_exp(zr, mx, V));
            row_loss[r] = l - zr[tg[r]];
            if (!grads) continue;
            const float lf = (float)l;
            for (int64_t v = 0; v < V; v++)
                zr[v] = st_exp_nonpos(zr[v] - lf);
            zr[tg[r]] -= 1.0f;
            if (pre != 1.0f)
                for (int64_t v = 0; v < V; v++)
                    zr[v] *= pre;
            st_round_array(prec, zr, V); /* the plain pair's logits gradient */
        }
        if (!grads) continue;
        /* dh_c (m, C) = z W; dW (V, C) += z^T h_c: independent, at once where that pays */
        const st_gemm ph = st_gemm_of(CblasNoTrans, CblasNoTrans, (int)m, (int)C, (int)V, 1.0f, z, (int)ld, w,
                                      (int)C, 0.0f, dh + r0 * C, (int)C);
        const st_gemm pw = st_gemm_of(CblasTrans, CblasNoTrans, (int)V, (int)C, (int)m, 1.0f, z, (int)ld,
                                      h + r0 * C, (int)C, r0 ? 1.0f : 0.0f, dw, (int)C);
        st_sgemm_two(&ph, &pw);
    }
    double sum = 0.0; /* in row order: the same loss for any thread count and chunk */
    for (int64_t r = 0; r < R; r++)
        sum += row_loss[r];
    n->out->data[0] = n_valid ? (float)(sum / (double)n_valid) : 0.0f;
    const int32_t c32 = (int32_t)n_valid;
    memcpy(count, &c32, sizeof c32);
    return ST_OK;
}

/* dh and dW times dloss / n_valid: written or added into h's gradient (per
 * in_acc), added into W's. */
static st_status linear_ce_backward(st_node *n, st_graph *g) {
    ST_TRY(st_linear_ce_check_grads(n));
    const int64_t R = n->args.i[ST_LCE_ROWS], C = n->args.i[ST_LCE_C], V = n->args.i[ST_LCE_V];
    const float *dh = ST_LCE_SAVED_DH(n), *dw = ST_LCE_SAVED_DW(n);
    int32_t c32;
    memcpy(&c32, ST_LCE_SAVED_COUNT(n), sizeof c32);
    const float scale = c32 ? n->out->grad[0] / (float)c32 / ST_LCE_PRESCALE(g->params->precision) : 0.0f;
    float *dx = n->in[0]->grad;
    if (dx) {
        const int64_t k = R * C;
        if (n->in_acc[0]) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < k; i++)
                dx[i] += dh[i] * scale;
        } else {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < k; i++)
                dx[i] = dh[i] * scale;
        }
    }
    float *gw = n->params[0]->grad;
    if (gw) {
        const int64_t k = V * C;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < k; i++)
            gw[i] += dw[i] * scale;
    }
    return ST_OK;
}

/* Backward reads its saved state only: h (dead after forward, its memory
 * shared) and the loss's value never. */
static const st_layer_ops linear_ce_cpu = {
    "linear_ce", linear_ce_forward, linear_ce_backward, NULL, false, true, true, false, 0};

st_status st_linear_ce(st_graph *g, const char *name, st_tensor *h, st_tensor *weight, st_tensor *targets,
                       int32_t ignore_index, st_tensor **loss) {
    const int64_t C = h->shape[h->ndim - 1];
    if (h->dtype != ST_F32 || targets->dtype != ST_I32 || weight->ndim != 2 || weight->shape[1] != C)
        return st_fail(
            ST_ERR_SHAPE,
            "linear_ce %s: needs float h (..., C), a weight (V, C) and int32 targets; h %s has %lld "
            "columns, weight %s %lld",
            name, h->name, (long long)C, weight->name, (long long)weight->shape[weight->ndim - 1]);
    if (h->ndim < 2 || targets->ndim != h->ndim - 1 ||
        memcmp(h->shape, targets->shape, (size_t)targets->ndim * sizeof *targets->shape) != 0)
        return st_fail(ST_ERR_SHAPE, "linear_ce %s: targets %s must have h %s's leading dims", name,
                       targets->name, h->name);
    const int64_t V = weight->shape[0], R = h->count / C, one = 1;
    if (padded_vocab(V) > INT32_MAX || R > INT32_MAX || C > INT32_MAX) /* (the products' sizes and strides) */
        return st_fail(ST_ERR_SHAPE,
                       "linear_ce %s: %lld rows of %lld classes (%lld features) do not fit int32", name,
                       (long long)R, (long long)V, (long long)C);
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 1, &one, &out));
    st_tensor *in[2] = {h, targets};
    st_node *node;
    ST_TRY(st_graph_node(g, &linear_ce_cpu, in, 2, &weight, 1, out, &node));
    const int64_t elem = chunk_elem(g), Rc = chunk_rows(R, V, elem);
    node->args.i[ST_LCE_ROWS] = R;
    node->args.i[ST_LCE_C] = C;
    node->args.i[ST_LCE_V] = V;
    const int64_t Vp = padded_vocab(V);
    node->args.i[ST_LCE_VP] = Vp;
    node->args.i[ST_LCE_CHUNK] = Rc;
    node->args.i[ST_LCE_IGNORE] = ignore_index;
    node->args.i[ST_LCE_CHUNK_FLOATS] = chunk_floats(Rc, Vp, elem);
    /* the count, dh and dW (args.h ST_LCE_SAVED_*); forward alone, the count */
    node->saved_count =
        g->forward_only ? 1 : ST_ALIGN_FLOATS + st_align_floats(R * C) + st_align_floats(Vp * C);
    /* the chunk (floats on the host, the device's storage on one), the rows'
     * losses as doubles, and on a device the weight's padded copy */
    node->work_count = node->args.i[ST_LCE_CHUNK_FLOATS] + st_align_floats(2 * R) + wcopy_floats(g, V, C);
    g->loss = out;
    *loss = out;
    return ST_OK;
}
