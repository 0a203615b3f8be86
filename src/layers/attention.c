/* Causal multi-head self-attention core (Vaswani et al. 2017, eq. 1, with a
 * causal mask as in GPT-2): qkv (B, T, 3C) -> y (B, T, C).
 *
 * Per (batch, head): S = Q K^T / sqrt(hs), P = softmax over positions 0..t of
 * row t (later positions get probability 0), Y = P V. The heads are strided
 * views of qkv (leading dimension 3C), so there is no copy or transpose. The
 * (b, h) pairs run in an OpenMP loop and each calls sgemm, which OpenBLAS's
 * OpenMP build runs single-threaded inside a parallel region. The products
 * go by blocks of TB queries (or keys), each against only the keys (queries)
 * the causal mask lets through, which skips most of the masked half. P is
 * saved for backward (B, n_head, T, T), zeros above the diagonal; backward
 * keeps dP in a per-thread (T, T) scratch from the workspace. Backward's
 * row sums D = rowsum(dP * P) are taken as rowsum(dY * Y), the same sum
 * over hs terms instead of t (FlashAttention-2's; Y is the stored output).
 * In bf16 runs P and dS enter backward's products as bf16 values (rounded
 * in place, P after its row's dS), as the tensor-core kernels hold them.
 *
 * Not here: flash-style tiling (P is materialised), dropout on P, a padding
 * mask. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "attention_layout.h"
#include "core/blas.h"
#include "core/fastmath.h"
#include "core/half.h"
#include "layers.h"

/* Query (and key) block: a block of queries needs only the keys up to its
 * end, so the masked upper triangle is skipped in blocks of this size. */
enum { TB = ST_ATTENTION_BLOCK };

/* max of a[0..n), n >= 1, in 16 interleaved lanes (vectorizable). A NaN
 * may be skipped here; it still reaches the row through a[j] - max. */
static inline float max16(const float *a, int64_t n) {
    float acc[16];
    for (int l = 0; l < 16; l++)
        acc[l] = a[0];
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++)
            acc[l] = a[j + l] > acc[l] ? a[j + l] : acc[l];
    float m = a[0];
    for (; j < n; j++)
        m = a[j] > m ? a[j] : m;
    for (int l = 0; l < 16; l++)
        m = acc[l] > m ? acc[l] : m;
    return m;
}

/* Rows t0..t1 of P: softmax over columns 0..t of row t, zeros after. */
static void softmax_rows(float *p, int64_t T, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
        float *row = p + t * T;
        const float mx = max16(row, t + 1);
        for (int64_t j = 0; j <= t; j++)
            row[j] = st_exp_nonpos(row[j] - mx);
        const float inv = 1.0f / st_dot16(row, NULL, t + 1);
        for (int64_t j = 0; j <= t; j++)
            row[j] *= inv;
        for (int64_t j = t + 1; j < T; j++)
            row[j] = 0.0f;
    }
}

static st_status attention_forward(st_node *n, st_graph *g) {
    const int64_t B = n->in[0]->shape[0], T = n->in[0]->shape[1], C3 = n->in[0]->shape[2];
    const int64_t C = C3 / 3, nh = n->args.i[ST_ATTN_NHEAD], hs = C / nh;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *qkv = n->in[0]->data; /* (B, T, 3C) */
    float *y = n->out->data;           /* (B, T, C) */
    float *P = n->saved;               /* (B, nh, T, T) */
#pragma omp parallel for schedule(static) if (B * nh > 1)
    for (int64_t bh = 0; bh < B * nh; bh++) {
        const int64_t b = bh / nh, h = bh % nh;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C; /* (T, hs), ld 3C */
        float *p = P + bh * T * T;                                              /* (T, T) */
        float *yh = y + b * T * C + h * hs;                                     /* (T, hs), ld C */
        for (int64_t t0 = 0; t0 < T; t0 += TB) {
            const int64_t t1 = t0 + TB < T ? t0 + TB : T, m = t1 - t0;
            /* S = Q K^T scale for queries t0..t1 against keys 0..t1 */
            st_sgemm(CblasNoTrans, CblasTrans, (int)m, (int)t1, (int)hs, scale, q + t0 * C3, (int)C3, k,
                     (int)C3, 0.0f, p + t0 * T, (int)T);
            softmax_rows(p, T, t0, t1);
            st_sgemm(CblasNoTrans, CblasNoTrans, (int)m, (int)hs, (int)t1, 1.0f, p + t0 * T, (int)T, v,
                     (int)C3, 0.0f, yh + t0 * C, (int)C);
        }
    }
    return ST_OK;
}

/* The backward's threads: no more than the per-thread dP scratch was sized
 * for when the graph was built (`built`), nor than the (b, h) pairs. */
static int backward_threads(int64_t built, int64_t bh) {
    int64_t nt = omp_get_max_threads();
    if (nt > built) nt = built;
    if (nt > bh) nt = bh;
    return (int)nt;
}

static st_status attention_backward(st_node *n, st_graph *g) {
    float *dqkv = n->in[0]->grad; /* (B, T, 3C) */
    if (!dqkv) return ST_OK;
    const int64_t B = n->in[0]->shape[0], T = n->in[0]->shape[1], C3 = n->in[0]->shape[2];
    const int64_t C = C3 / 3, nh = n->args.i[ST_ATTN_NHEAD], hs = C / nh;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *qkv = n->in[0]->data;
    const float *y = n->out->data;  /* (B, T, C) */
    const float *dy = n->out->grad; /* (B, T, C) */
    float *P = n->saved;            /* (B, nh, T, T) */
    /* bf16 runs: P and dS enter their products as bf16, as the device's
     * tensor-core kernels hold them (docs/precision.md) */
    const bool r16 = g->params->precision == ST_PREC_BF16;
    /* Each (b, h) writes its own q, k and v slices of dqkv, each row once,
     * so beta alone decides write or add. */
    const float beta = n->in_acc[0] ? 1.0f : 0.0f;
#pragma omp parallel num_threads(backward_threads(n->args.i[ST_ATTN_NTHREADS], B *nh))
    {
        float *dp = g->work + omp_get_thread_num() * st_align_floats(T * T); /* (T, T) */
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * nh; bh++) {
            const int64_t b = bh / nh, h = bh % nh;
            const int64_t off = b * T * C3 + h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C; /* (T, hs), ld 3C */
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            float *p = P + bh * T * T;
            const float *dyh = dy + b * T * C + h * hs, *yh = y + b * T * C + h * hs; /* (T, hs), ld C */
            /* by query block: dP = dY V^T, dS = P * (dP - D) with D = rowsum(dY * Y)
             * (= rowsum(dP * P)), dQ = dS K scale */
            for (int64_t t0 = 0; t0 < T; t0 += TB) {
                const int64_t t1 = t0 + TB < T ? t0 + TB : T, m = t1 - t0;
                st_sgemm(CblasNoTrans, CblasTrans, (int)m, (int)t1, (int)hs, 1.0f, dyh + t0 * C, (int)C, v,
                         (int)C3, 0.0f, dp + t0 * T, (int)T);
                for (int64_t t = t0; t < t1; t++) {
                    float *pr = p + t * T, *dr = dp + t * T;
                    const float dot = st_dot16(dyh + t * C, yh + t * C, hs);
                    for (int64_t j = 0; j <= t; j++)
                        dr[j] = pr[j] * (dr[j] - dot);
                    for (int64_t j = t + 1; j < T; j++)
                        dr[j] = 0.0f; /* masked, and not computed past t1 */
                    if (r16)          /* P's row is read again only by dV's product */
                        for (int64_t j = 0; j <= t; j++) {
                            dr[j] = st_round_bf16(dr[j]);
                            pr[j] = st_round_bf16(pr[j]);
                        }
                }
                st_sgemm(CblasNoTrans, CblasNoTrans, (int)m, (int)hs, (int)t1, scale, dp + t0 * T, (int)T, k,
                         (int)C3, beta, dq + t0 * C3, (int)C3);
            }
            /* by key block: keys j0..j1 are seen by queries j0..T only.
             * dV = P^T dY, dK = dS^T Q scale */
            for (int64_t j0 = 0; j0 < T; j0 += TB) {
                const int64_t j1 = j0 + TB < T ? j0 + TB : T, m = j1 - j0, rows = T - j0;
                st_sgemm(CblasTrans, CblasNoTrans, (int)m, (int)hs, (int)rows, 1.0f, p + j0 * T + j0, (int)T,
                         dyh + j0 * C, (int)C, beta, dv + j0 * C3, (int)C3);
                st_sgemm(CblasTrans, CblasNoTrans, (int)m, (int)hs, (int)rows, scale, dp + j0 * T + j0,
                         (int)T, q + j0 * C3, (int)C3, beta, dk + j0 * C3, (int)C3);
            }
        }
    }
    return ST_OK;
}

bool st_attention_flash_fits(int64_t B, int64_t T, int64_t nh, int64_t hs) {
    return hs % 16 == 0 && hs >= 16 && hs <= 128 && B * nh <= 65535 && T >= 1 && T <= (1 << 24);
}

void st_attention_device_counts(int64_t B, int64_t T, int64_t nh, int64_t hs, int64_t *saved, int64_t *work) {
    if (st_attention_flash_fits(B, T, nh, hs)) {
        *saved = B * nh * T;
        *work = st_align_floats(B * nh * T);
    } else {
        *saved = B * nh * T * T;
        *work = st_align_floats(nh * T * T);
    }
}

/* B, T, heads and head size of an attention node */
static void node_dims(const st_node *n, int64_t *B, int64_t *T, int64_t *nh, int64_t *hs) {
    *B = n->in[0]->shape[0];
    *T = n->in[0]->shape[1];
    *nh = n->args.i[ST_ATTN_NHEAD];
    *hs = n->in[0]->shape[2] / 3 / *nh;
}

int64_t st_attention_cudnn_bytes(int64_t B, int64_t T, int64_t nh, bool backward) {
    const int64_t sums = B * nh * T * 4;
    if (!backward) return sums;
    return B * nh * ((T + 63) / 64 * 64) * ((T + 127) / 128 * 128) * 2 + sums;
}

void st_attention_cudnn_work(st_node *n, int64_t bytes) {
    const int64_t floats = st_align_floats((bytes + 256 + 3) / 4);
    if (floats > n->work_count) n->work_count = floats;
}

bool st_attention_node_flash(const st_node *n) {
    int64_t B, T, nh, hs;
    node_dims(n, &B, &T, &nh, &hs);
    return st_attention_flash_fits(B, T, nh, hs);
}

bool st_attention_node_cudnn(const st_graph *g, const st_node *n) {
    return g->attention_cudnn && g->params->precision == ST_PREC_BF16 && st_attention_node_flash(n);
}

void st_attention_device_layout(const st_graph *g, st_node *n) {
    int64_t B, T, nh, hs;
    node_dims(n, &B, &T, &nh, &hs);
    st_attention_device_counts(B, T, nh, hs, &n->saved_count, &n->work_count);
    if (st_attention_node_cudnn(g, n))
        st_attention_cudnn_work(n, st_attention_cudnn_bytes(B, T, nh, !g->forward_only));
}

static const st_layer_ops attention_cpu = {
    "attention", attention_forward, attention_backward, NULL, false, false, false, false, 0};

st_status st_attention(st_graph *g, const char *name, st_tensor *qkv, int64_t n_head, st_tensor **y) {
    if (qkv->dtype != ST_F32 || qkv->ndim != 3 || qkv->shape[2] % 3 != 0)
        return st_fail(ST_ERR_SHAPE,
                       "attention %s: needs a float qkv (B, T, 3C); got %d dimensions, last %lld", name,
                       qkv->ndim, (long long)qkv->shape[qkv->ndim - 1]);
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    if (n_head <= 0 || C % n_head != 0)
        return st_fail(ST_ERR_SHAPE, "attention %s: %lld heads do not divide the %lld channels", name,
                       (long long)n_head, (long long)C);
    /* (every product's dimension is at most T or 3C, its offsets 64-bit:
     * the (T, T) scores a CPU graph saves are memory's to bound, the
     * planner's; the device's flash kernels keep none. Their count is
     * bounded all the same, on every graph (a device's prepare replaces it
     * later), so that the sums of counts cannot wrap: 16 x ST_MAX_ELEMENTS,
     * past any memory, where a sequence of 2^24 tokens would need more
     * than 2^40 elements of the input alone) */
    if (T > (1 << 24) || qkv->shape[2] > INT32_MAX)
        return st_fail(ST_ERR_SHAPE,
                       "attention %s: sequence length %lld or width %lld past the kernels' 2^24 and 2^31",
                       name, (long long)T, (long long)qkv->shape[2]);
    int64_t saved;
    if (__builtin_mul_overflow(B * n_head, T * T, &saved) || saved > 16 * ST_MAX_ELEMENTS)
        return st_fail(
            ST_ERR_SHAPE,
            "attention %s: %lld x %lld heads x %lld x %lld scores (what a CPU graph keeps for "
            "backward) are past 2^50, beyond any memory: lower the micro-batch or model.block_size",
            name, (long long)B, (long long)n_head, (long long)T, (long long)T);
    int64_t shape[3] = {B, T, C};
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 3, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &attention_cpu, &qkv, 1, NULL, 0, out, &node));
    const int nt = omp_get_max_threads(); /* backward never runs more threads than this */
    node->args.i[ST_ATTN_NHEAD] = n_head;
    node->args.i[ST_ATTN_NTHREADS] = nt;
    node->saved_count = saved;                      /* P */
    node->work_count = nt * st_align_floats(T * T); /* dP per thread */
    *y = out;
    return ST_OK;
}
