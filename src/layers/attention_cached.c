/* Attention over a cache of keys and values (cached decoding, forward
 * alone): qkv (B, n, 3C) -> y (B, n, C), the rows positions pos .. pos + n - 1
 * (pos = st_graph.pos) of the B sequences of st_graph.kv. Forward writes the
 * rows' keys and values into its layer's cache at their positions, then row
 * j of sequence b attends, as st_attention's causal row does, to the
 * positions 0 .. pos + j of b's cache: y = softmax(q K^T / sqrt(hs)) V per
 * head. The same arithmetic as st_attention's, in another order of sums.
 * Generation (src/model/sample.c) runs a sequence's prompt through it in
 * chunks and then one position a token, each position's keys and values
 * computed once. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"

st_status st_attention_cached_check(const st_node *n, const st_graph *g) {
    const st_kv_cache *kv = g->kv;
    const int64_t B = n->args.i[ST_ATTNC_B], N = n->args.i[ST_ATTNC_N], C = n->args.i[ST_ATTNC_C];
    if (!kv || kv->B != B || kv->C != C || n->args.i[ST_ATTNC_LAYER] >= kv->L)
        return st_fail(ST_ERR_INTERNAL,
                       "attention_cached %s: the graph's cache is not the one it was built for",
                       n->out->name);
    if (g->pos < 0 || g->pos + N > kv->cap)
        return st_fail(ST_ERR_ARG, "attention_cached %s: positions %lld to %lld, past the cache's %lld",
                       n->out->name, (long long)g->pos, (long long)(g->pos + N - 1), (long long)kv->cap);
    if (g->training || n->in[0]->store != ST_PREC_FP32)
        return st_fail(ST_ERR_ARG, "attention_cached %s: runs forward alone, on fp32 activations",
                       n->out->name);
    return ST_OK;
}

static st_status attention_cached_forward(st_node *n, st_graph *g) {
    ST_TRY(st_attention_cached_check(n, g));
    const st_kv_cache *kv = g->kv;
    const int64_t B = n->args.i[ST_ATTNC_B], N = n->args.i[ST_ATTNC_N], C = n->args.i[ST_ATTNC_C];
    const int64_t H = n->args.i[ST_ATTNC_NHEAD], hs = C / H, cap = kv->cap, pos = g->pos;
    const int64_t layer = n->args.i[ST_ATTNC_LAYER];
    const float scale = 1.0f / sqrtf((float)hs);
    const float *qkv = n->in[0]->data; /* (B, N, 3C) */
    float *y = n->out->data;           /* (B, N, C) */
    float *kc = kv->k + layer * B * cap * C, *vc = kv->v + layer * B * cap * C;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < N; j++) {
            const float *r = qkv + (b * N + j) * 3 * C;
            memcpy(kc + (b * cap + pos + j) * C, r + C, (size_t)C * sizeof(float));
            memcpy(vc + (b * cap + pos + j) * C, r + 2 * C, (size_t)C * sizeof(float));
        }
        /* each thread its scores' row (in the work scratch: cap floats a thread) */
#pragma omp parallel num_threads((int)n->args.i[ST_ATTNC_NTHREADS]) if (B * N * C * (pos + N) >=             \
                                                                        16 * ST_OMP_MIN_WORK)
    {
        float *p = g->work + (int64_t)omp_get_thread_num() * st_align_floats(cap);
#pragma omp for schedule(static)
        for (int64_t row = 0; row < B * N * H; row++) {
            const int64_t b = row / (N * H), j = row / H % N, hd = row % H, last = pos + j;
            const float *q = qkv + (b * N + j) * 3 * C + hd * hs;
            const float *k = kc + b * cap * C + hd * hs, *v = vc + b * cap * C + hd * hs;
            float mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t <= last; t++) {
                float d = 0;
                for (int64_t i = 0; i < hs; i++)
                    d += q[i] * k[t * C + i];
                p[t] = d * scale;
                mx = p[t] > mx ? p[t] : mx;
            }
            for (int64_t t = 0; t <= last; t++)
                sum += p[t] = expf(p[t] - mx);
            float *o = y + (b * N + j) * C + hd * hs;
            for (int64_t i = 0; i < hs; i++)
                o[i] = 0;
            for (int64_t t = 0; t <= last; t++) {
                const float w = p[t] / sum;
                for (int64_t i = 0; i < hs; i++)
                    o[i] += w * v[t * C + i];
            }
        }
    }
    return ST_OK;
}

static st_status attention_cached_backward(st_node *n, st_graph *g) {
    (void)g;
    return st_fail(ST_ERR_INTERNAL, "attention_cached %s: no backward (cached decoding runs forward alone)",
                   n->out->name);
}

static const st_layer_ops attention_cached_cpu = {"attention_cached",
                                                  attention_cached_forward,
                                                  attention_cached_backward,
                                                  NULL,
                                                  false,
                                                  false,
                                                  false,
                                                  false,
                                                  0};

st_status st_attention_cached(st_graph *g, const char *name, st_tensor *qkv, int64_t n_head, int64_t layer,
                              st_tensor **y) {
    if (qkv->dtype != ST_F32 || qkv->ndim != 3 || qkv->shape[2] % 3 != 0)
        return st_fail(ST_ERR_SHAPE, "attention_cached %s: input %s must be float (B, n, 3C)", name,
                       qkv->name);
    const int64_t B = qkv->shape[0], N = qkv->shape[1], C = qkv->shape[2] / 3;
    const st_kv_cache *kv = g->kv;
    if (n_head < 1 || C % n_head != 0)
        return st_fail(ST_ERR_SHAPE, "attention_cached %s: %lld channels do not split into %lld heads", name,
                       (long long)C, (long long)n_head);
    if (!kv || kv->B != B || kv->C != C || layer < 0 || layer >= kv->L || N > kv->cap)
        return st_fail(
            ST_ERR_SHAPE,
            "attention_cached %s: (%lld, %lld, %lld) rows of layer %lld do not fit the graph's cache", name,
            (long long)B, (long long)N, (long long)C, (long long)layer);
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    int64_t shape[3] = {B, N, C};
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 3, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &attention_cached_cpu, &qkv, 1, NULL, 0, out, &node));
    node->args.i[ST_ATTNC_B] = B;
    node->args.i[ST_ATTNC_N] = N;
    node->args.i[ST_ATTNC_C] = C;
    node->args.i[ST_ATTNC_NHEAD] = n_head;
    node->args.i[ST_ATTNC_LAYER] = layer;
    const int nt = omp_get_max_threads();
    node->args.i[ST_ATTNC_NTHREADS] = nt;
    node->work_count = nt * st_align_floats(kv->cap); /* (a row of scores a thread) */
    *y = out;
    return ST_OK;
}
