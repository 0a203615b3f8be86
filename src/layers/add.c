/* Element-wise sum of two same-shape tensors (residual connections).
 * No broadcasting: a bias add belongs to the layer that owns the bias. */
#include <stdio.h>
#include <string.h>

#include "layers.h"

static st_status add_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *a = n->in[0]->data, *b = n->in[1]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if (N >= ST_OMP_MIN_WORK)
    for (int64_t i = 0; i < N; i++)
        y[i] = a[i] + b[i];
    return ST_OK;
}

static st_status add_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *dy = n->out->grad;
    /* Inputs in order: when a and b are the same tensor, in_acc[1] is set, so
     * the second pass adds onto what the first wrote. */
    for (int k = 0; k < 2; k++) {
        float *dx = n->in[k]->grad;
        if (!dx) continue;
        st_grad_pass(dx, dy, N, n->in_acc[k]);
    }
    return ST_OK;
}

static const st_layer_ops add_cpu = {"add", add_forward, add_backward, NULL, false, true, true, false, 3};

static void shape_str(const st_tensor *t, char *buf, size_t nbytes) {
    int k = snprintf(buf, nbytes, "(");
    for (int i = 0; i < t->ndim; i++)
        k += snprintf(buf + k, nbytes - (size_t)k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    snprintf(buf + k, nbytes - (size_t)k, ")");
}

st_status st_add(st_graph *g, const char *name, st_tensor *a, st_tensor *b, st_tensor **y) {
    if (a->dtype != ST_F32 || b->dtype != ST_F32)
        return st_fail(ST_ERR_ARG, "add %s: inputs %s and %s must be float", name, a->name, b->name);
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) != 0) {
        char sa[128], sb[128];
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        return st_fail(ST_ERR_SHAPE, "add %s: %s has shape %s but %s has shape %s (no broadcasting)", name,
                       a->name, sa, b->name, sb);
    }
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, a->ndim, a->shape, &out));
    st_tensor *in[2] = {a, b};
    st_node *node;
    ST_TRY(st_graph_node(g, &add_cpu, in, 2, NULL, 0, out, &node));
    *y = out;
    return ST_OK;
}
