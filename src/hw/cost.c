/* FLOPs and elementwise traffic per node (see cost.h). Nodes are told apart
 * by their ops table's name, the one piece every backend shares. */
#include "cost.h"

#include <string.h>

#include "layers/layers.h"

static double last_dim(const st_tensor *t) { return (double)t->shape[t->ndim - 1]; }

/* Attention per (batch, head): forward S = Q K^T and Y = P V over query blocks
 * [t0, t1) against keys [0, t1); backward dP and dQ the same, dV and dK over
 * key blocks [j0, j1) against queries [j0, T). By symmetry both sums of
 * block rows x columns are equal; each product is 2 * rows * cols * hs. */
static void attention_cost(const st_node *n, st_cost *c) {
    const st_tensor *qkv = n->in[0];
    const double B = (double)qkv->shape[0], C = last_dim(qkv) / 3;
    const int64_t T = qkv->shape[1];
    double area = 0; /* sum over query blocks of m * t1 (the causal area, whole blocks) */
    for (int64_t t0 = 0; t0 < T; t0 += ST_ATTENTION_BLOCK) {
        const int64_t t1 = t0 + ST_ATTENTION_BLOCK < T ? t0 + ST_ATTENTION_BLOCK : T;
        area += (double)(t1 - t0) * (double)t1;
    }
    /* heads x hs = C: per batch, each product over all heads is 2 * area * C */
    c->fwd_flops = B * 2 * (2 * area * C);
    c->bwd_flops = n->out->requires_grad ? B * 4 * (2 * area * C) : 0;
    /* P (B, nh, T, T) is written by the softmax and read back by backward */
    const double P = (double)n->saved_count, io = (double)qkv->count + (double)n->out->count;
    c->fwd_elems = io + P;
    c->bwd_elems = io + 2 * P;
}

st_cost st_node_cost(const st_node *n) {
    st_cost c = {0, 0, 0, 0};
    const char *op = n->ops->name;
    const st_tensor *x = n->in[0], *y = n->out;
    const bool dx = x && x->requires_grad && x->kind == ST_TENSOR_ACT, bwd = y->requires_grad;
    double in_elems = 0;
    for (int i = 0; i < n->n_in; i++) in_elems += (double)n->in[i]->count;
    if (strcmp(op, "linear") == 0) {
        const double K = last_dim(x), N = last_dim(y), M = (double)x->count / K;
        const double mm = 2 * M * N * K;
        c.fwd_flops = mm;
        c.bwd_flops = bwd ? mm * (dx ? 2 : 1) : 0;
        if (n->n_params > 1) { /* the bias: added in forward, summed over rows in backward */
            c.fwd_elems = M * N;
            c.bwd_elems = bwd ? M * N : 0;
        }
        return c;
    }
    if (strcmp(op, "conv2d") == 0) {
        const st_tensor *w = n->params[0]; /* (Cout, Cin, k, k) */
        const double K = (double)w->count / (double)w->shape[0], Cout = (double)w->shape[0];
        const double M = (double)y->count / Cout; /* B * Ho * Wo */
        const double mm = 2 * M * Cout * K;
        c.fwd_flops = mm;
        c.bwd_flops = bwd ? mm * (dx ? 2 : 1) : 0;
        /* im2col writes and the sgemm reads the column matrix (M x K), in
         * forward and again in backward (recomputed), plus col2im for dx */
        c.fwd_elems = 2 * M * K + (double)y->count;
        c.bwd_elems = bwd ? (dx ? 4 : 2) * M * K + (double)y->count : 0;
        return c;
    }
    if (strcmp(op, "attention") == 0) {
        attention_cost(n, &c);
        return c;
    }
    /* elementwise: forward reads its inputs and writes its output; backward
     * reads the output gradient (and what it saved) and writes input
     * gradients. Passes that read twice (norm statistics, softmax) say so. */
    double fwd_passes = 1, bwd_passes = 1;
    if (strcmp(op, "layernorm") == 0 || strcmp(op, "batchnorm") == 0 || strcmp(op, "softmax_ce") == 0) {
        fwd_passes = 2; /* statistics, then normalise */
        bwd_passes = 2;
    }
    c.fwd_elems = fwd_passes * in_elems + (double)y->count;
    c.bwd_elems = bwd ? bwd_passes * ((double)y->count + in_elems) + (dx ? in_elems : 0) : 0;
    return c;
}

st_cost st_graph_cost(const st_graph *g) {
    st_cost t = {0, 0, 0, 0};
    for (int i = 0; i < g->n_nodes; i++) {
        st_cost c = st_node_cost(&g->nodes[i]);
        t.fwd_flops += c.fwd_flops;
        t.bwd_flops += c.bwd_flops;
        t.fwd_elems += c.fwd_elems;
        t.bwd_elems += c.bwd_elems;
        if (g->checkpointing && g->nodes[i].block >= 0) { /* its forward runs again in backward */
            t.bwd_flops += c.fwd_flops;
            t.bwd_elems += c.fwd_elems;
        }
    }
    return t;
}
