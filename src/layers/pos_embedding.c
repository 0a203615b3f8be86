/* Learned position embedding: y[b, t, :] = x[b, t, :] + weight[pos + t, :]
 * (GPT-2's wpe), pos the graph's first position (st_graph.pos): 0 but in
 * cached decoding's graphs, which run forward alone. */
#include <stdio.h>

#include "args.h"
#include "layers.h"

st_status st_pos_embedding_check(const st_node *n, const st_graph *g) {
    const int64_t T = n->args.i[ST_POSEMB_T], max_len = n->params[0]->shape[0];
    if (g->pos < 0 || g->pos + T > max_len)
        return st_fail(ST_ERR_ARG, "pos_embedding %s: positions %lld to %lld, past the model's %lld",
                       n->out->name, (long long)g->pos, (long long)(g->pos + T - 1), (long long)max_len);
    return ST_OK;
}

static st_status pos_embedding_forward(st_node *n, st_graph *g) {
    const int64_t B = n->args.i[ST_POSEMB_B], T = n->args.i[ST_POSEMB_T], C = n->args.i[ST_POSEMB_C];
    const float *x = n->in[0]->data;     /* (B, T, C) */
    ST_TRY(st_pos_embedding_check(n, g));
    const float *w = n->params[0]->data + g->pos * C; /* (max_len, C), rows pos..pos+T-1 used */
    float *y = n->out->data;                          /* (B, T, C) */
#pragma omp parallel for schedule(static) if (B * T * C >= ST_OMP_MIN_WORK)
    for (int64_t r = 0; r < B * T; r++) {
        const float *xr = x + r * C, *wr = w + (r % T) * C;
        float *yr = y + r * C;
        for (int64_t c = 0; c < C; c++)
            yr[c] = xr[c] + wr[c];
    }
    return ST_OK;
}

static st_status pos_embedding_backward(st_node *n, st_graph *g) {
    const int64_t B = n->args.i[ST_POSEMB_B], T = n->args.i[ST_POSEMB_T], C = n->args.i[ST_POSEMB_C];
    const float *dy = n->out->grad; /* (B, T, C) */
    float *dw = n->params[0]->grad; /* (max_len, C) */
    float *dx = n->in[0]->grad;     /* (B, T, C) or NULL */
    if (dw) {
        /* Each thread owns positions t, summing over the batch in order:
         * race-free and the same for any thread count. */
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < T; t++) {
            float *dr = dw + (g->pos + t) * C; /* (the rows forward read: pos.., 0 but in decoding) */
            for (int64_t b = 0; b < B; b++) {
                const float *gr = dy + (b * T + t) * C;
                for (int64_t c = 0; c < C; c++)
                    dr[c] += gr[c];
            }
        }
    }
    if (dx) st_grad_pass(dx, dy, B * T * C, n->in_acc[0]); /* (nothing when one memory) */
    return ST_OK;
}

static const st_layer_ops pos_embedding_cpu = {
    "pos_embedding", pos_embedding_forward, pos_embedding_backward, NULL, false, true, true, false, 1};

st_status st_pos_embedding(st_graph *g, const char *name, st_tensor *x, int64_t max_len, float init_std,
                           st_tensor **y) {
    if (x->dtype != ST_F32 || x->ndim != 3)
        return st_fail(ST_ERR_SHAPE, "pos_embedding %s: input %s must be float (B, T, C), has %d dimensions",
                       name, x->name, x->ndim);
    const int64_t T = x->shape[1], C = x->shape[2];
    if (T > max_len)
        return st_fail(ST_ERR_SHAPE,
                       "pos_embedding %s: sequence length %lld exceeds max_len %lld; raise block_size or "
                       "shorten the sequences",
                       name, (long long)T, (long long)max_len);
    char pname[ST_NAME_MAX];
    snprintf(pname, sizeof pname, "%s.weight", name);
    int64_t wshape[2] = {max_len, C};
    st_tensor *w;
    ST_TRY(st_graph_param(g, pname, 2, wshape, ST_INIT_NORMAL, init_std, true, &w));
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 3, x->shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &pos_embedding_cpu, &x, 1, &w, 1, out, &node));
    node->args.i[ST_POSEMB_B] = x->shape[0];
    node->args.i[ST_POSEMB_T] = T;
    node->args.i[ST_POSEMB_C] = C;
    *y = out;
    return ST_OK;
}
