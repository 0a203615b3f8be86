/* Graph building, memory layout and the forward/backward walk (see graph.h). */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/mem.h"
#include "../core/rng.h"

static int64_t align_up(int64_t n) { return (n + ST_ALIGN_FLOATS - 1) / ST_ALIGN_FLOATS * ST_ALIGN_FLOATS; }

void st_params_free(st_params *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) free(p->t[i]);
    free(p->t);
    st_free_aligned(p->data);
    st_free_aligned(p->grad);
    st_free_aligned(p->buffers);
    st_free_aligned(p->compute);
    memset(p, 0, sizeof *p);
}

st_tensor *st_params_find(const st_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->t[i]->name, name) == 0) return p->t[i];
    return NULL;
}

void st_params_init(st_params *p, uint64_t seed) {
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        st_rng r = st_rng_make(seed, st_hash_str(t->name));
        for (int64_t j = 0; j < t->count; j++) {
            float v = 0.0f;
            switch (t->init) {
            case ST_INIT_ZEROS: v = 0.0f; break;
            case ST_INIT_ONES: v = 1.0f; break;
            case ST_INIT_NORMAL: v = t->init_scale * st_rng_normal(&r); break;
            case ST_INIT_UNIFORM: v = t->init_scale * (2.0f * st_rng_uniform(&r) - 1.0f); break;
            }
            t->data[j] = v;
        }
    }
    st_params_touch(p);
}

st_status st_params_set_precision(st_params *p, st_precision prec) {
    if (!p->frozen)
        return st_fail(ST_ERR_INTERNAL, "st_params_set_precision before the parameters are laid out");
    if (p->on_compute) st_params_use_compute(p, false);
    p->precision = prec;
    if (prec != ST_PREC_FP32 && !p->compute) {
        p->compute = st_alloc_aligned((size_t)p->arena_count * sizeof(float));
        if (!p->compute)
            return st_fail(ST_ERR_NOMEM, "out of memory for the %s copy of %lld parameters",
                           prec == ST_PREC_BF16 ? "bf16" : "fp16", (long long)p->count);
        memset(p->compute, 0, (size_t)p->arena_count * sizeof(float));
    }
    st_params_touch(p);
    return ST_OK;
}

void st_params_use_compute(st_params *p, bool on) {
    if (p->precision == ST_PREC_FP32 || !p->compute || on == p->on_compute) return;
    if (on && p->compute_version != p->version) {
        st_round_copy(p->precision, p->compute, p->data, p->count);
        p->compute_version = p->version;
    }
    float *base = on ? p->compute : p->data;
    for (int i = 0; i < p->n; i++)
        if (p->t[i]->kind == ST_TENSOR_PARAM) p->t[i]->data = base + p->t[i]->offset;
    p->on_compute = on;
}

st_status st_graph_init(st_graph *g, st_params *params) {
    memset(g, 0, sizeof *g);
    g->params = params;
    params->cursor = 0;
    return ST_OK;
}

void st_graph_free(st_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_acts; i++) free(g->acts[i]);
    free(g->acts);
    free(g->nodes);
    st_free_aligned(g->act_arena);
    st_free_aligned(g->grad_arena);
    st_free_aligned(g->work);
    st_free_aligned(g->int_arena);
    memset(g, 0, sizeof *g);
}

static st_status check_shape(const char *name, int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > ST_MAX_DIMS)
        return st_fail(ST_ERR_SHAPE, "tensor %s: %d dimensions (1 to %d are supported)", name, ndim,
                       ST_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return st_fail(ST_ERR_SHAPE, "tensor %s: dimension %d is %lld (must be positive)", name, i,
                           (long long)shape[i]);
    if (strlen(name) >= ST_NAME_MAX)
        return st_fail(ST_ERR_ARG, "tensor name '%s' is longer than %d characters", name, ST_NAME_MAX - 1);
    return ST_OK;
}

static st_tensor *tensor_new(const char *name, st_tensor_kind kind, st_dtype dtype, int ndim,
                             const int64_t *shape) {
    st_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->count = st_shape_count(ndim, shape);
    return t;
}

static st_status declare(st_graph *g, const char *name, st_tensor_kind kind, int ndim,
                         const int64_t *shape, st_init init, float scale, bool decay,
                         st_tensor **out) {
    st_params *p = g->params;
    ST_TRY(check_shape(name, ndim, shape));
    if (p->frozen) {
        /* A rebuild (another batch size): the model declares the same tensors
         * in the same order. */
        if (p->cursor >= p->n)
            return st_fail(ST_ERR_INTERNAL, "graph rebuild declared an extra parameter %s", name);
        st_tensor *t = p->t[p->cursor++];
        if (strcmp(t->name, name) != 0 || t->ndim != ndim ||
            memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) != 0)
            return st_fail(ST_ERR_INTERNAL, "graph rebuild declared %s where %s was expected", name,
                           t->name);
        *out = t;
        return ST_OK;
    }
    if (st_params_find(p, name))
        return st_fail(ST_ERR_INTERNAL, "parameter %s declared twice", name);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        st_tensor **nt = realloc(p->t, (size_t)cap * sizeof *nt);
        if (!nt) return st_fail(ST_ERR_NOMEM, "out of memory declaring %s", name);
        p->t = nt;
        p->cap = cap;
    }
    st_tensor *t = tensor_new(name, kind, ST_F32, ndim, shape);
    if (!t) return st_fail(ST_ERR_NOMEM, "out of memory declaring %s", name);
    t->init = init;
    t->init_scale = scale;
    t->decay = decay;
    t->requires_grad = kind == ST_TENSOR_PARAM;
    t->index = p->n;
    p->t[p->n++] = t;
    *out = t;
    return ST_OK;
}

st_status st_graph_param(st_graph *g, const char *name, int ndim, const int64_t *shape,
                         st_init init, float init_scale, bool decay, st_tensor **out) {
    return declare(g, name, ST_TENSOR_PARAM, ndim, shape, init, init_scale, decay, out);
}

st_status st_graph_buffer(st_graph *g, const char *name, int ndim, const int64_t *shape,
                          st_init init, st_tensor **out) {
    return declare(g, name, ST_TENSOR_BUFFER, ndim, shape, init, 0.0f, false, out);
}

static st_status add_act(st_graph *g, const char *name, st_tensor_kind kind, st_dtype dtype,
                         int ndim, const int64_t *shape, st_tensor **out) {
    ST_TRY(check_shape(name, ndim, shape));
    if (g->finalized) return st_fail(ST_ERR_INTERNAL, "graph is finalized; cannot add %s", name);
    if (g->n_acts == g->cap_acts) {
        int cap = g->cap_acts ? 2 * g->cap_acts : 64;
        st_tensor **na = realloc(g->acts, (size_t)cap * sizeof *na);
        if (!na) return st_fail(ST_ERR_NOMEM, "out of memory adding %s", name);
        g->acts = na;
        g->cap_acts = cap;
    }
    st_tensor *t = tensor_new(name, kind, dtype, ndim, shape);
    if (!t) return st_fail(ST_ERR_NOMEM, "out of memory adding %s", name);
    t->index = g->n_acts;
    g->acts[g->n_acts++] = t;
    *out = t;
    return ST_OK;
}

st_status st_graph_input(st_graph *g, const char *name, st_dtype dtype, int ndim,
                         const int64_t *shape, st_tensor **out) {
    return add_act(g, name, ST_TENSOR_INPUT, dtype, ndim, shape, out);
}

st_status st_graph_act(st_graph *g, const char *name, int ndim, const int64_t *shape,
                       st_tensor **out) {
    return add_act(g, name, ST_TENSOR_ACT, ST_F32, ndim, shape, out);
}

st_status st_graph_node(st_graph *g, const st_layer_ops *ops, st_tensor *const *in, int n_in,
                        st_tensor *const *params, int n_params, st_tensor *out, st_node **node) {
    if (n_in > ST_NODE_MAX_IN || n_params > ST_NODE_MAX_PARAMS || !out || out->kind != ST_TENSOR_ACT)
        return st_fail(ST_ERR_INTERNAL, "bad node %s", ops ? ops->name : "?");
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        st_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return st_fail(ST_ERR_NOMEM, "out of memory adding node %s", ops->name);
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    st_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->ops = ops;
    n->id = g->n_nodes++;
    n->n_in = n_in;
    n->n_params = n_params;
    n->out = out;
    bool rg = false;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        rg |= in[i]->requires_grad;
    }
    for (int i = 0; i < n_params; i++) {
        n->params[i] = params[i];
        rg |= params[i]->requires_grad;
    }
    out->requires_grad = rg;
    *node = n;
    return ST_OK;
}

static st_status layout_params(st_params *p) {
    int64_t pc = 0, bc = 0;
    int n_params = 0;
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind == ST_TENSOR_PARAM) {
            t->offset = pc;
            pc += t->count; /* packed: the arena is one flat vector for optimizers and collectives */
            n_params++;
        } else {
            t->offset = bc;
            bc += align_up(t->count);
        }
    }
    p->count = pc;
    p->arena_count = align_up(pc);
    p->buffer_count = bc;
    p->n_params = n_params;
    p->data = st_alloc_aligned((size_t)p->arena_count * sizeof(float));
    p->grad = st_alloc_aligned((size_t)p->arena_count * sizeof(float));
    p->buffers = bc ? st_alloc_aligned((size_t)bc * sizeof(float)) : NULL;
    if (!p->data || !p->grad || (bc && !p->buffers))
        return st_fail(ST_ERR_NOMEM, "out of memory allocating %lld parameters", (long long)pc);
    memset(p->data, 0, (size_t)p->arena_count * sizeof(float));
    memset(p->grad, 0, (size_t)p->arena_count * sizeof(float));
    if (bc) memset(p->buffers, 0, (size_t)bc * sizeof(float));
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind == ST_TENSOR_PARAM) {
            t->data = p->data + t->offset;
            t->grad = p->grad + t->offset;
        } else {
            t->data = p->buffers + t->offset;
        }
    }
    p->frozen = true;
    return ST_OK;
}

st_status st_graph_finalize(st_graph *g) {
    if (g->finalized) return ST_OK;
    if (!g->params->frozen) ST_TRY(layout_params(g->params));
    else if (g->params->cursor != g->params->n)
        return st_fail(ST_ERR_INTERNAL, "graph rebuild declared %d of %d parameters",
                       g->params->cursor, g->params->n);
    if (g->params_only) {
        g->finalized = true;
        return ST_OK;
    }

    int64_t ac = 0, gc = 0, ic = 0, wc = 0;
    for (int i = 0; i < g->n_acts; i++) {
        st_tensor *t = g->acts[i];
        if (t->dtype == ST_I32) {
            t->offset = ic;
            ic += align_up(t->count);
            continue;
        }
        t->offset = ac;
        ac += align_up(t->count);
        if (t->requires_grad) gc += align_up(t->count);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        ac += align_up(g->nodes[i].saved_count);
        if (g->nodes[i].work_count > wc) wc = g->nodes[i].work_count;
    }
    g->act_count = ac;
    g->grad_count = gc;
    g->int_count = ic;
    g->work_count = wc;
    g->act_arena = st_alloc_aligned((size_t)(ac ? ac : 1) * sizeof(float));
    g->grad_arena = st_alloc_aligned((size_t)(gc ? gc : 1) * sizeof(float));
    g->int_arena = st_alloc_aligned((size_t)(ic ? ic : 1) * sizeof(int32_t));
    g->work = st_alloc_aligned((size_t)(wc ? wc : 1) * sizeof(float));
    if (!g->act_arena || !g->grad_arena || !g->int_arena || !g->work)
        return st_fail(ST_ERR_NOMEM,
                       "out of memory allocating %.1f MiB of activations; lower the micro-batch size",
                       (double)(ac + gc + wc) * 4.0 / (1 << 20));
    memset(g->act_arena, 0, (size_t)(ac ? ac : 1) * sizeof(float));
    memset(g->grad_arena, 0, (size_t)(gc ? gc : 1) * sizeof(float));
    int64_t go = 0;
    for (int i = 0; i < g->n_acts; i++) {
        st_tensor *t = g->acts[i];
        if (t->dtype == ST_I32) {
            t->idata = g->int_arena + t->offset;
            memset(t->idata, 0, (size_t)t->count * sizeof(int32_t));
            continue;
        }
        t->data = g->act_arena + t->offset;
        if (t->requires_grad) {
            t->grad = g->grad_arena + go;
            go += align_up(t->count);
        }
    }
    int64_t so = 0;
    for (int i = 0; i < g->n_acts; i++)
        if (g->acts[i]->dtype == ST_F32) so = g->acts[i]->offset + align_up(g->acts[i]->count);
    for (int i = 0; i < g->n_nodes; i++) {
        st_node *n = &g->nodes[i];
        if (n->saved_count) {
            n->saved = g->act_arena + so;
            so += align_up(n->saved_count);
        }
    }
    g->saved_count = so;
    /* In backward order, the first consumer of a tensor writes its gradient and
     * later consumers add. Walk nodes last to first; track what was written. */
    bool *written = calloc((size_t)(g->n_acts ? g->n_acts : 1), 1);
    if (!written) return st_fail(ST_ERR_NOMEM, "out of memory");
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        st_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            st_tensor *t = n->in[k];
            if (t->kind == ST_TENSOR_PARAM) { /* parameter gradients always accumulate */
                n->in_acc[k] = true;
                continue;
            }
            if (t->kind != ST_TENSOR_ACT) continue;
            n->in_acc[k] = written[t->index];
            written[t->index] = true;
        }
    }
    free(written);
    g->finalized = true;
    return ST_OK;
}

/* Mixed precision (docs/precision.md): in bf16 and fp16 the layers read the
 * rounded parameter copy, float graph inputs and every node's output are
 * rounded where the GPU stores them in 16 bits (the loss, a reduction, stays
 * fp32), and so is every activation gradient after the node that wrote or
 * added to it. Saved per-node state (normalisation statistics, log-sum-exp,
 * attention probabilities, argmax) stays fp32. Parameter gradients
 * accumulate in fp32. */
st_status st_graph_forward(st_graph *g) {
    const st_precision prec = g->params->precision;
    st_status s = ST_OK;
    if (prec != ST_PREC_FP32) {
        st_params_use_compute(g->params, true);
        for (int i = 0; i < g->n_acts; i++)
            if (g->acts[i]->kind == ST_TENSOR_INPUT && g->acts[i]->dtype == ST_F32)
                st_round_array(prec, g->acts[i]->data, g->acts[i]->count);
    }
    for (int i = 0; i < g->n_nodes && s == ST_OK; i++) {
        st_node *n = &g->nodes[i];
        s = n->ops->forward(n, g);
        if (prec != ST_PREC_FP32 && n->out != g->loss) st_round_array(prec, n->out->data, n->out->count);
    }
    st_params_use_compute(g->params, false);
    return s;
}

st_status st_graph_backward(st_graph *g, float seed) {
    if (!g->loss || !g->loss->grad)
        return st_fail(ST_ERR_INTERNAL, "backward: the graph has no loss that depends on parameters");
    const st_precision prec = g->params->precision;
    for (int64_t i = 0; i < g->loss->count; i++) g->loss->grad[i] = seed;
    st_params_use_compute(g->params, true);
    st_status s = ST_OK;
    for (int i = g->n_nodes - 1; i >= 0 && s == ST_OK; i--) {
        st_node *n = &g->nodes[i];
        if (n->out->requires_grad) {
            s = n->ops->backward(n, g);
            for (int k = 0; k < n->n_in && s == ST_OK && prec != ST_PREC_FP32; k++)
                if (n->in[k]->kind == ST_TENSOR_ACT && n->in[k]->grad)
                    st_round_array(prec, n->in[k]->grad, n->in[k]->count);
        }
        if (s == ST_OK && g->backward_hook) s = g->backward_hook(g->backward_hook_ctx, i);
    }
    st_params_use_compute(g->params, false);
    return s;
}
