/* Flatten to (B, features). An NHWC image (B, H, W, C) comes out in PyTorch's
 * (C, H, W) order, so a classifier after a conv stack matches nn.Flatten. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"


/* y[b, c*H*W + h*W + w] = x[b, h, w, c]: a per-sample (HW, C) -> (C, HW) transpose. */
static st_status flatten_forward(st_node *n, st_graph *g) {
    const float *x = n->in[0]->data;
    float *y = n->out->data;
    if (!n->args.i[ST_FLATTEN_IMAGE]) {
        memcpy(y, x, (size_t)n->out->count * sizeof(float));
        return ST_OK;
    }
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W], C = n->args.i[ST_FLATTEN_C];
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * HW * C;
        float *yb = y + b * HW * C;
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < HW; s++)
                yb[c * HW + s] = xb[s * C + c];
    }
    return ST_OK;
}

static st_status flatten_backward(st_node *n, st_graph *g) {
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return ST_OK;
    const bool acc = n->in_acc[0];
    const int64_t N = n->out->count;
    if (!n->args.i[ST_FLATTEN_IMAGE]) {
        st_grad_pass(dx, dy, N, acc);
        return ST_OK;
    }
    const int64_t B = n->args.i[ST_FLATTEN_B], HW = n->args.i[ST_FLATTEN_H] * n->args.i[ST_FLATTEN_W], C = n->args.i[ST_FLATTEN_C];
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *gb = dy + b * HW * C;
        float *db = dx + b * HW * C;
        for (int64_t s = 0; s < HW; s++)
            for (int64_t c = 0; c < C; c++)
                db[s * C + c] = (acc ? db[s * C + c] : 0.0f) + gb[c * HW + s];
    }
    return ST_OK;
}

static const st_layer_ops flatten_cpu = {
    "flatten", flatten_forward, flatten_backward, NULL, false, true, true, false, 0};

st_status st_flatten(st_graph *g, const char *name, st_tensor *x, st_tensor **y) {
    if (x->dtype != ST_F32) return st_fail(ST_ERR_ARG, "flatten %s: input %s must be float", name, x->name);
    const int64_t B = x->shape[0];
    int64_t shape[2] = {B, x->count / B};
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 2, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &flatten_cpu, &x, 1, NULL, 0, out, &node));
    node->args.i[ST_FLATTEN_IMAGE] = x->ndim == 4;
    if (x->ndim == 4) {
        node->args.i[ST_FLATTEN_B] = B;
        node->args.i[ST_FLATTEN_H] = x->shape[1];
        node->args.i[ST_FLATTEN_W] = x->shape[2];
        node->args.i[ST_FLATTEN_C] = x->shape[3];
    }
    *y = out;
    return ST_OK;
}
