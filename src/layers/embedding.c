/* Token embedding: y[b, t, :] = weight[idx[b, t], :] (GPT-2's wte).
 * The weight is handed back so an output layer can tie to it (st_linear_tied). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"


/* Columns of the weight gradient one thread owns in backward. */
#define EMB_COL_BLOCK 32

/* The error for a token outside [0, vocab): names the node, the position as
 * coordinates of idx, and the value, so a bad data file is easy to find. */
static st_status bad_token(const st_node *n, int64_t i, int32_t tok, int64_t vocab) {
    const st_tensor *idx = n->in[0];
    char pos[128];
    int k = snprintf(pos, sizeof pos, "[");
    int64_t rem = i, stride = idx->count;
    for (int d = 0; d < idx->ndim; d++) {
        stride /= idx->shape[d];
        k += snprintf(pos + k, sizeof pos - (size_t)k, d ? ", %lld" : "%lld", (long long)(rem / stride));
        rem %= stride;
    }
    snprintf(pos + k, sizeof pos - (size_t)k, "]");
    /* The node has no name field; its output is "<name>.out". */
    int len = (int)strlen(n->out->name) - 4;
    return st_fail(ST_ERR_ARG,
                   "embedding %.*s: token %d at position %s of %s is outside the vocabulary [0, %lld); "
                   "check the data's vocab_size",
                   len, n->out->name, tok, pos, idx->name, (long long)vocab);
}

static st_status embedding_forward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_EMBEDDING_N], C = n->args.i[ST_EMBEDDING_C], V = n->args.i[ST_EMBEDDING_VOCAB];
    const int32_t *idx = n->in[0]->idata; /* (N) = (B, T) */
    const float *w = n->params[0]->data;  /* (V, C) */
    float *y = n->out->data;              /* (N, C) */
    /* Validate serially first: the error then names the first bad position,
     * and no thread reads outside the weight. */
    for (int64_t i = 0; i < N; i++)
        if (idx[i] < 0 || idx[i] >= V) return bad_token(n, i, idx[i], V);
#pragma omp parallel for schedule(static) if (N * C >= ST_OMP_MIN_WORK)
    for (int64_t i = 0; i < N; i++)
        memcpy(y + i * C, w + (int64_t)idx[i] * C, (size_t)C * sizeof(float));
    return ST_OK;
}

static st_status embedding_backward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_EMBEDDING_N], C = n->args.i[ST_EMBEDDING_C];
    const int32_t *idx = n->in[0]->idata; /* (N) */
    const float *dy = n->out->grad;       /* (N, C) */
    float *dw = n->params[0]->grad;       /* (V, C) */
    if (!dw) return ST_OK;
    /* Scatter-add: repeated tokens hit the same row. Each thread owns a block
     * of columns and walks every position in order, so there are no races and
     * the sums are the same for any thread count. */
    const int64_t nblk = (C + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t c0 = b * EMB_COL_BLOCK, c1 = c0 + EMB_COL_BLOCK < C ? c0 + EMB_COL_BLOCK : C;
        for (int64_t i = 0; i < N; i++) {
            float *dr = dw + (int64_t)idx[i] * C;
            const float *gr = dy + i * C;
            for (int64_t c = c0; c < c1; c++)
                dr[c] += gr[c];
        }
    }
    return ST_OK;
}

static const st_layer_ops embedding_cpu = {
    "embedding", embedding_forward, embedding_backward, NULL, false, true, false, false, 0};

st_status st_embedding(st_graph *g, const char *name, st_tensor *idx, int64_t vocab, int64_t dim,
                       float init_std, st_tensor **y, st_tensor **weight) {
    if (idx->dtype != ST_I32)
        return st_fail(ST_ERR_ARG, "embedding %s: token ids %s must be int32", name, idx->name);
    if (idx->ndim >= ST_MAX_DIMS)
        return st_fail(ST_ERR_SHAPE, "embedding %s: token ids %s have %d dimensions (at most %d)", name,
                       idx->name, idx->ndim, ST_MAX_DIMS - 1);
    if (vocab <= 0 || vocab > INT32_MAX || dim <= 0)
        return st_fail(ST_ERR_ARG, "embedding %s: vocab %lld and dim %lld must be positive (vocab < 2^31)",
                       name, (long long)vocab, (long long)dim);
    char pname[ST_NAME_MAX];
    snprintf(pname, sizeof pname, "%s.weight", name);
    int64_t wshape[2] = {vocab, dim};
    st_tensor *w;
    ST_TRY(st_graph_param(g, pname, 2, wshape, ST_INIT_NORMAL, init_std, true, &w));
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, idx->shape, (size_t)idx->ndim * sizeof *shape);
    shape[idx->ndim] = dim;
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, idx->ndim + 1, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &embedding_cpu, &idx, 1, &w, 1, out, &node));
    node->args.i[ST_EMBEDDING_N] = idx->count;
    node->args.i[ST_EMBEDDING_C] = dim;
    node->args.i[ST_EMBEDDING_VOCAB] = vocab;
    *y = out;
    if (weight) *weight = w;
    return ST_OK;
}
