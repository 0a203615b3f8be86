/* Element-wise activations: GELU (tanh form, as GPT-2) and ReLU. Nothing
 * is saved: GELU's backward recomputes from the input, ReLU's reads the
 * output. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/fastmath.h"
#include "layers.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 * (Hendrycks & Gimpel 2016, section 2). */
static st_status gelu_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *x = n->in[0]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if (N >= ST_OMP_MIN_WORK)
    for (int64_t i = 0; i < N; i++) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + st_tanh(GELU_K * (v + GELU_A * v * v * v)));
    }
    return ST_OK;
}

/* The exact derivative of the tanh form:
 * 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u). */
static inline float gelu_grad(float v) {
    const float t = st_tanh(GELU_K * (v + GELU_A * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
}

/* Two loops rather than a select on in_acc, so each vectorizes (and a stale
 * NaN in dx is overwritten, never multiplied by zero). */
static st_status gelu_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *x = n->in[0]->data, *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return ST_OK;
    if (n->in_acc[0]) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) dx[i] += gelu_grad(x[i]) * dy[i];
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) dx[i] = gelu_grad(x[i]) * dy[i];
    }
    return ST_OK;
}

static st_status relu_forward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *x = n->in[0]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if (N >= ST_OMP_MIN_WORK)
    for (int64_t i = 0; i < N; i++)
        y[i] = !(x[i] <= 0.0f) ? x[i] : 0.0f; /* (a NaN stays NaN, as in PyTorch: none is hidden) */
    return ST_OK;
}

/* The derivative at 0 is taken as 0, as PyTorch does, and a NaN passes dy on
 * (its threshold_backward: zero where y <= 0). It reads the output (y <= 0
 * exactly where x <= 0), not the input, so the input need not outlive
 * forward (backward_ignores_in: the linear or convolution before a ReLU
 * keeps no copy of its output for backward). */
static st_status relu_backward(st_node *n, st_graph *g) {
    const int64_t N = n->out->count;
    const float *y = n->out->data, *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return ST_OK;
    const bool acc = n->in_acc[0];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        dx[i] = (acc ? dx[i] : 0.0f) + (y[i] <= 0.0f ? 0.0f : dy[i]);
    return ST_OK;
}

static const st_layer_ops gelu_cpu = {"gelu", gelu_forward, gelu_backward, NULL, false, true, false, true, 0};
static const st_layer_ops relu_cpu = {"relu", relu_forward, relu_backward, NULL, false, false, true, true, 0};

static st_status add_activation(st_graph *g, const st_layer_ops *ops, const char *name, st_tensor *x,
                                st_tensor **y) {
    if (x->dtype != ST_F32)
        return st_fail(ST_ERR_ARG, "%s %s: input %s must be float", ops->name, name, x->name);
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, x->ndim, x->shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, ops, &x, 1, NULL, 0, out, &node));
    *y = out;
    return ST_OK;
}

st_status st_gelu(st_graph *g, const char *name, st_tensor *x, st_tensor **y) {
    return add_activation(g, &gelu_cpu, name, x, y);
}

st_status st_relu(st_graph *g, const char *name, st_tensor *x, st_tensor **y) {
    return add_activation(g, &relu_cpu, name, x, y);
}
