/* The driver side of the PyTorch parity test (tests/test_parity.c): read a
 * case's inputs and weights by name from a safetensors file written by
 * tests/parity/torch_parity.py, run a graph forward and backward, and collect
 * outputs and gradients for the file the script compares.
 *
 * Names in the output file: "out" (a layer's output), "logits", "loss",
 * "grad.<name>" (the gradient of a parameter, or of a differentiable input,
 * which the driver declares as a parameter so that it gets one), "<name>" for
 * buffers (batch-norm running statistics) and "final.<name>" for weights after
 * training. Hyper-parameters come in an optional I32 tensor "args".
 * What this is not: a general checkpoint tool; every output is copied. */
#ifndef ST_TESTS_PARITY_DRIVER_H
#define ST_TESTS_PARITY_DRIVER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "gradcheck.h"
#include "model/graph.h"

#define PD_MAX_OUT 160
#define PD_MAX_ARGS 16

typedef struct pd_out {
    char name[ST_NAME_MAX + 8];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    float *data; /* owned copy */
} pd_out;

typedef struct pd_ctx {
    st_safetensors *in;
    int32_t args[PD_MAX_ARGS];
    int n_args;
    pd_out out[PD_MAX_OUT];
    int n_out;
} pd_ctx;

/* Integer hyper-parameter i of the case ("args"), 0 when absent. */
static int64_t pd_arg(const pd_ctx *c, int i) { return i < c->n_args ? c->args[i] : 0; }

static st_status pd_open(pd_ctx *c, const char *path) {
    memset(c, 0, sizeof *c);
    ST_TRY(st_safetensors_open(path, &c->in));
    const st_safetensors_entry *e = st_safetensors_find(c->in, "args");
    if (!e) return ST_OK;
    if (strcmp(e->dtype, "I32") != 0 || e->count > PD_MAX_ARGS)
        return st_fail(ST_ERR_FORMAT, "%s: args must be I32 with at most %d values", path, PD_MAX_ARGS);
    c->n_args = (int)e->count;
    return st_safetensors_read_raw(c->in, "args", c->args, e->nbytes);
}

static void pd_close(pd_ctx *c) {
    for (int i = 0; i < c->n_out; i++)
        free(c->out[i].data);
    st_safetensors_close(c->in);
    memset(c, 0, sizeof *c);
}

/* The shape of input tensor `name` (at most ST_MAX_DIMS dimensions). */
static st_status pd_shape(const pd_ctx *c, const char *name, int *ndim, int64_t *shape) {
    const st_safetensors_entry *e = st_safetensors_find(c->in, name);
    if (!e) return st_fail(ST_ERR_FORMAT, "parity input has no tensor %s", name);
    if (e->ndim < 1 || e->ndim > ST_MAX_DIMS)
        return st_fail(ST_ERR_FORMAT, "parity input %s has %d dimensions", name, e->ndim);
    *ndim = e->ndim;
    memcpy(shape, e->shape, (size_t)e->ndim * sizeof *shape);
    return ST_OK;
}

/* A differentiable input: a parameter named `name` with the file's shape. */
static st_status pd_param_like(const pd_ctx *c, st_graph *g, const char *name, st_tensor **t) {
    int ndim = 0;
    int64_t shape[ST_MAX_DIMS] = {0};
    ST_TRY(pd_shape(c, name, &ndim, shape));
    return st_graph_param(g, name, ndim, shape, ST_INIT_ZEROS, 0.0f, false, t);
}

/* A graph input (no gradient) named `name` with the file's shape. */
static st_status pd_input_like(const pd_ctx *c, st_graph *g, const char *name, st_dtype dtype,
                               st_tensor **t) {
    int ndim = 0;
    int64_t shape[ST_MAX_DIMS] = {0};
    ST_TRY(pd_shape(c, name, &ndim, shape));
    return st_graph_input(g, name, dtype, ndim, shape, t);
}

/* Add a copy of `data` (shape `shape`) to the outputs as `name`. */
static st_status pd_emit(pd_ctx *c, const char *name, int ndim, const int64_t *shape, const float *data) {
    if (c->n_out == PD_MAX_OUT) return st_fail(ST_ERR_INTERNAL, "parity driver: too many outputs");
    pd_out *o = &c->out[c->n_out];
    const int64_t count = st_shape_count(ndim, shape);
    o->data = malloc((size_t)count * sizeof(float));
    if (!o->data) return st_fail(ST_ERR_NOMEM, "parity driver: out of memory");
    memcpy(o->data, data, (size_t)count * sizeof(float));
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = ndim;
    memcpy(o->shape, shape, (size_t)ndim * sizeof *shape);
    c->n_out++;
    return ST_OK;
}

static st_status pd_emit_tensor(pd_ctx *c, const char *name, const st_tensor *t) {
    return pd_emit(c, name, t->ndim, t->shape, t->data);
}

/* Every parameter's gradient as "grad.<name>" and every buffer as "<name>". */
static st_status pd_emit_grads(pd_ctx *c, const st_params *p) {
    char name[ST_NAME_MAX + 8];
    for (int i = 0; i < p->n; i++) {
        const st_tensor *t = p->t[i];
        if (t->kind == ST_TENSOR_PARAM) {
            snprintf(name, sizeof name, "grad.%s", t->name);
            ST_TRY(pd_emit(c, name, t->ndim, t->shape, t->grad));
        } else {
            ST_TRY(pd_emit_tensor(c, t->name, t));
        }
    }
    return ST_OK;
}

/* Fill every parameter and buffer from the file, by name. */
static st_status pd_load_params(const pd_ctx *c, const st_params *p) {
    for (int i = 0; i < p->n; i++)
        ST_TRY(st_safetensors_read_f32(c->in, p->t[i]->name, p->t[i]->data, p->t[i]->count));
    return ST_OK;
}

/* Fill every parameter, buffer and graph input of g from the file, by name. */
static st_status pd_load(const pd_ctx *c, st_graph *g) {
    ST_TRY(pd_load_params(c, g->params));
    for (int i = 0; i < g->n_acts; i++) {
        st_tensor *t = g->acts[i];
        if (t->kind != ST_TENSOR_INPUT) continue;
        if (t->dtype == ST_F32) {
            ST_TRY(st_safetensors_read_f32(c->in, t->name, t->data, t->count));
            continue;
        }
        const st_safetensors_entry *e = st_safetensors_find(c->in, t->name);
        if (e && strcmp(e->dtype, "I32") != 0)
            return st_fail(ST_ERR_FORMAT, "parity input %s is %s, not I32", t->name, e->dtype);
        ST_TRY(st_safetensors_read_raw(c->in, t->name, t->idata, t->count * (int64_t)sizeof(int32_t)));
    }
    return ST_OK;
}

/* Run a finalized layer graph: forward, backward from y with dL/dy = "dy" from
 * the file (as gradcheck's gc_backward does), or from the loss when y is
 * g->loss; emit "out" (or "loss") and every gradient. */
static st_status pd_run_layer(pd_ctx *c, st_graph *g, st_tensor *y) {
    ST_TRY(pd_load(c, g));
    ST_TRY(st_graph_forward(g));
    if (y == g->loss) {
        memset(g->params->grad, 0, (size_t)g->params->arena_count * sizeof(float));
        ST_TRY(st_graph_backward(g, 1.0f));
        ST_TRY(pd_emit_tensor(c, "loss", y));
    } else {
        ST_TRY(pd_emit_tensor(c, "out", y));
        if (!y->grad) return st_fail(ST_ERR_INTERNAL, "parity: the output has no gradient");
        float *dy = malloc((size_t)y->count * sizeof(float));
        if (!dy) return st_fail(ST_ERR_NOMEM, "parity driver: out of memory");
        st_status s = st_safetensors_read_f32(c->in, "dy", dy, y->count);
        st_params_use_compute(g->params, true); /* bf16/fp16: backward reads the rounded weights */
        if (s == ST_OK) s = gc_backward(g, y, dy);
        st_params_use_compute(g->params, false);
        free(dy);
        ST_TRY(s);
    }
    return pd_emit_grads(c, g->params);
}

static st_status pd_write(const pd_ctx *c, const char *path) {
    st_safetensors_tensor *t = calloc((size_t)(c->n_out ? c->n_out : 1), sizeof *t);
    if (!t) return st_fail(ST_ERR_NOMEM, "parity driver: out of memory");
    for (int i = 0; i < c->n_out; i++) {
        t[i].name = c->out[i].name;
        t[i].dtype = "F32";
        t[i].ndim = c->out[i].ndim;
        t[i].shape = c->out[i].shape;
        t[i].data = c->out[i].data;
    }
    st_status s = st_safetensors_write(path, t, c->n_out, NULL, 0);
    free(t);
    return s;
}

#endif
