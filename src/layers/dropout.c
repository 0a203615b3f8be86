/* Inverted dropout (Srivastava et al. 2014): in training, keep each element with
 * probability 1-p and scale it by 1/(1-p); identity in eval. No mask is stored. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rng.h"
#include "args.h"
#include "layers.h"

/* Element i (of the step's batch: dropout_micro x N + the micro-batch's
 * element) is kept when its uniform draw from the stream (dropout_seed, node id)
 * is >= p. Forward and backward draw the same numbers, so backward recomputes
 * the mask instead of saving it. */
static inline bool dropout_keep(uint64_t seed, int id, int64_t i, float p) {
    return st_rng_at(seed, (uint64_t)id, (uint64_t)i) >= p;
}

static st_status dropout_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float p = n->args.f[ST_DROPOUT_F_P];
    const float *x = n->in[0]->data;
    float *y = n->out->data;
    if (!g->training || p == 0.0f) {
        memcpy(y, x, (size_t)N * sizeof(float));
        return ST_OK;
    }
    const float scale = 1.0f / (1.0f - p);
    const uint64_t seed = g->dropout_seed;
    const int id = n->id;
    const int64_t off = (int64_t)g->dropout_micro * N; /* (the step's element index: dropout_micro) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        y[i] = x[i] * (dropout_keep(seed, id, off + i, p) ? scale : 0.0f); /* (NaN x 0: NaN, none hidden) */
    return ST_OK;
}

static st_status dropout_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float p = n->args.f[ST_DROPOUT_F_P];
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return ST_OK;
    const bool acc = n->in_acc[0];
    if (!g->training || p == 0.0f) {
        st_grad_pass(dx, dy, N, acc);
        return ST_OK;
    }
    const float scale = 1.0f / (1.0f - p);
    const uint64_t seed = g->dropout_seed;
    const int id = n->id;
    const int64_t off = (int64_t)g->dropout_micro * N;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        dx[i] = (acc ? dx[i] : 0.0f) + dy[i] * (dropout_keep(seed, id, off + i, p) ? scale : 0.0f);
    return ST_OK;
}

static const st_layer_ops dropout_cpu = {
    "dropout", dropout_forward, dropout_backward, NULL, false, true, true, false, 0};

st_status st_dropout(st_graph *g, const char *name, st_tensor *x, float p, st_tensor **y) {
    if (x->dtype != ST_F32) return st_fail(ST_ERR_ARG, "dropout %s: input %s must be float", name, x->name);
    if (!(p >= 0.0f && p < 1.0f))
        return st_fail(ST_ERR_ARG, "dropout %s: p = %g must be in [0, 1)", name, (double)p);
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, x->ndim, x->shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &dropout_cpu, &x, 1, NULL, 0, out, &node));
    node->args.f[ST_DROPOUT_F_P] = p;
    *y = out;
    return ST_OK;
}
