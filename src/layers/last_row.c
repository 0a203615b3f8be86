/* The last row of each sequence (cached decoding, forward alone): x (B, n,
 * C) -> y (B, 1, C), y[b] = x[b, n - 1]. A decode graph of a prompt's
 * chunk takes its final norm and its head over these rows alone: the
 * logits generation reads, not n times as many. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"

static st_status last_row_forward(st_node *n, st_graph *g) {
    (void)g;
    const int64_t B = n->args.i[ST_LASTROW_B], N = n->args.i[ST_LASTROW_N], C = n->args.i[ST_LASTROW_C];
    for (int64_t b = 0; b < B; b++)
        memcpy(n->out->data + b * C, n->in[0]->data + (b * N + N - 1) * C, (size_t)C * sizeof(float));
    return ST_OK;
}

static st_status last_row_backward(st_node *n, st_graph *g) {
    (void)g;
    return st_fail(ST_ERR_INTERNAL, "last_row %s: no backward (cached decoding runs forward alone)",
                   n->out->name);
}

static const st_layer_ops last_row_cpu = {"last_row", last_row_forward, last_row_backward, NULL, false,
                                          true,       true,             false,             0};

st_status st_last_row(st_graph *g, const char *name, st_tensor *x, st_tensor **y) {
    if (x->dtype != ST_F32 || x->ndim != 3)
        return st_fail(ST_ERR_SHAPE, "last_row %s: input %s must be float (B, n, C)", name, x->name);
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    int64_t shape[3] = {x->shape[0], 1, x->shape[2]};
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 3, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &last_row_cpu, &x, 1, NULL, 0, out, &node));
    node->args.i[ST_LASTROW_B] = x->shape[0];
    node->args.i[ST_LASTROW_N] = x->shape[1];
    node->args.i[ST_LASTROW_C] = x->shape[2];
    *y = out;
    return ST_OK;
}
