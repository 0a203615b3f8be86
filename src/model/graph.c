/* Graph building, memory layout and the forward/backward walk (see graph.h);
 * the parameter arenas themselves are params.c. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/half.h"
#include "../core/mem.h"
#include "../layers/attention_layout.h"
#include "../layers/conv2d_layout.h"
#include "../layers/half_io.h"
#ifdef ST_HAVE_CUDA
#include "../cuda/cuda.h"
#endif

st_status st_graph_init(st_graph *g, st_params *params) {
    memset(g, 0, sizeof *g);
    g->params = params;
    g->dev = params->dev;
    g->cur_block = -1;
    params->cursor = 0;
    return ST_OK;
}

void st_graph_free(st_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_acts; i++)
        free(g->acts[i]);
    free(g->acts);
    free(g->nodes);
    free(g->remat);
    st_device_release(g->dev, g->act_arena);
    st_device_release(g->dev, g->grad_arena);
    st_device_release(g->dev, g->work);
    st_device_release(g->dev, g->int_arena);
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
    /* At most ST_MAX_ELEMENTS: the config's sizes each have bounds, not
     * their products, and the graph's and the planner's sums of counts (in
     * bytes, int64) must not wrap to a size that seems to fit. */
    int64_t count = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(count, shape[i], &count) || count > ST_MAX_ELEMENTS)
            return st_fail(ST_ERR_SHAPE,
                           "tensor %s: its dimensions (%lld in dimension %d) multiply past 2^46 elements, "
                           "beyond any memory: lower the sizes that make it (the micro-batch, "
                           "model.block_size, model.n_embd, the vocabulary or the image)",
                           name, (long long)shape[i], i);
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

static st_status declare(st_graph *g, const char *name, st_tensor_kind kind, int ndim, const int64_t *shape,
                         st_init init, float scale, bool decay, st_tensor **out) {
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
            return st_fail(ST_ERR_INTERNAL, "graph rebuild declared %s where %s was expected", name, t->name);
        *out = t;
        return ST_OK;
    }
    if (st_params_find(p, name)) return st_fail(ST_ERR_INTERNAL, "parameter %s declared twice", name);
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

st_status st_graph_param(st_graph *g, const char *name, int ndim, const int64_t *shape, st_init init,
                         float init_scale, bool decay, st_tensor **out) {
    return declare(g, name, ST_TENSOR_PARAM, ndim, shape, init, init_scale, decay, out);
}

st_status st_graph_buffer(st_graph *g, const char *name, int ndim, const int64_t *shape, st_init init,
                          st_tensor **out) {
    return declare(g, name, ST_TENSOR_BUFFER, ndim, shape, init, 0.0f, false, out);
}

static st_status add_act(st_graph *g, const char *name, st_tensor_kind kind, st_dtype dtype, int ndim,
                         const int64_t *shape, st_tensor **out) {
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

st_status st_graph_input(st_graph *g, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                         st_tensor **out) {
    return add_act(g, name, ST_TENSOR_INPUT, dtype, ndim, shape, out);
}

st_status st_graph_act(st_graph *g, const char *name, int ndim, const int64_t *shape, st_tensor **out) {
    return add_act(g, name, ST_TENSOR_ACT, ST_F32, ndim, shape, out);
}

st_status st_graph_node(st_graph *g, const st_layer_ops *ops, st_tensor *const *in, int n_in,
                        st_tensor *const *params, int n_params, st_tensor *out, st_node **node) {
    if (n_in < 1 || n_in > ST_NODE_MAX_IN || n_params > ST_NODE_MAX_PARAMS || !out ||
        out->kind != ST_TENSOR_ACT)
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
    n->block = g->cur_block;
    n->remat_before = -1;
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
            bc += st_align_floats(t->count);
        }
    }
    p->count = pc;
    const st_params_layout *lay = &p->layout;
    const int64_t shard = lay->world > 0 ? st_shard_size(pc, lay->world) : 0, padded = shard * lay->world;
    const int64_t arena_count = padded > st_align_floats(pc) ? padded : st_align_floats(pc);
    if (p->layout_only) { /* the planner's model: sizes without memory */
        p->arena_count = arena_count;
        p->buffer_count = bc;
        p->n_params = n_params;
        p->frozen = true;
        return ST_OK;
    }
    p->arena_count = arena_count;
    p->buffer_count = bc;
    p->n_params = n_params;
    /* This rank's shard alone where the layout says (graph.h st_params_layout): on a device, with
     * no hook (the host's gradients are the shared segment, its masters given back by pages) */
    const int64_t lo = shard * lay->rank, hi = lo + shard;
    const bool masters = lay->shard_masters, grads = lay->shard_grads;
    if ((masters || grads) && (shard <= 0 || !p->dev || (grads && (p->no_grads || p->grad_hook.alloc))))
        return st_fail(ST_ERR_INTERNAL, "laying out the arenas sharded over %d ranks %s", lay->world,
                       p->dev ? "with a hooked or no gradient arena" : "on the host");
    const size_t pbytes = (size_t)p->arena_count * sizeof(float), bbytes = (size_t)bc * sizeof(float),
                 sbytes = (size_t)shard * sizeof(float), mbytes = masters ? sbytes : pbytes,
                 gbytes = p->no_grads ? 0
                          : grads     ? sbytes
                                      : pbytes;
    /* The hook first: it may be collective over ranks, which all get here. */
    if (p->grad_hook.alloc && !p->no_grads)
        ST_TRY(p->grad_hook.alloc(p->grad_hook.ctx, pbytes, (void **)&p->grad, &p->grad_cap_bytes));
    p->grad_hooked = p->grad != NULL;
    float *g = NULL, *d = NULL;
    st_status s = p->grad || !gbytes ? ST_OK : st_device_alloc(p->dev, gbytes, (void **)&g);
    if (s == ST_OK) s = st_device_alloc(p->dev, mbytes, (void **)&d);
    if (s == ST_OK && bc) s = st_device_alloc(p->dev, bbytes, (void **)&p->buffers);
    if (s != ST_OK) {
        st_device_release(p->dev, g);
        st_device_release(p->dev, d);
        char part[96] = "";
        if (masters || grads)
            snprintf(part, sizeof part, " (%s this rank's shard of %d)",
                     masters && grads ? "each"
                     : masters        ? "the weights"
                                      : "the gradients",
                     lay->world);
        return st_fail_context(s, "the %lld parameters' fp32 weights%s%s (%.1f MiB): ", (long long)pc,
                               p->no_grads ? "" : " and gradients", part,
                               (double)(mbytes + gbytes) / (1 << 20));
    }
    if (masters) { /* (st_params_shard_masters' result; alloc_compute points the tensors at the copy) */
        p->master_alloc = d, p->master_lo = lo, p->master_hi = hi, p->masters_sharded = true;
    } else {
        p->data = d;
    }
    if (grads) { /* (st_params_shard_grads': the tensors' `grad`, NULL, set by the bucket plan) */
        p->grad_alloc = g, p->grad_lo = lo, p->grad_hi = hi, p->grads_sharded = true;
    } else if (g) {
        p->grad = g;
    }
    ST_TRY(st_device_zero(p->dev, d, mbytes));
    if (g) ST_TRY(st_device_zero(p->dev, g, gbytes));
    if (bc) ST_TRY(st_device_zero(p->dev, p->buffers, bbytes));
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        if (t->kind == ST_TENSOR_PARAM) {
            t->data = p->data ? p->data + t->offset : NULL;
            t->grad = p->grad ? p->grad + t->offset : NULL;
        } else {
            t->data = p->buffers + t->offset;
        }
    }
    p->frozen = true;
    return st_params_alloc_compute(p);
}

/* On a device, every node runs its layer's twin there (src/cuda/); a layer
 * without one is an error that names it, at build time rather than mid-run. */
static st_status use_device_ops(st_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        st_node *n = &g->nodes[i];
        const st_layer_ops *ops = NULL;
#ifdef ST_HAVE_CUDA
        ops = st_cuda_layer_ops(n->ops->name);
#endif
        if (!ops)
            return st_fail(ST_ERR_UNSUPPORTED, "layer %s (node %d, output %s) has no implementation on %s",
                           n->ops->name, i, n->out->name, st_device_name(g->dev));
        if (ops->grad_in_place != n->ops->grad_in_place ||
            ops->backward_ignores_out != n->ops->backward_ignores_out ||
            ops->backward_ignores_in != n->ops->backward_ignores_in ||
            ops->recomputable != n->ops->recomputable)
            return st_fail(
                ST_ERR_INTERNAL,
                "layer %s: its implementation on %s states other memory flags (what backward reads, "
                "whether it recomputes; st_layer_ops) than the CPU reference; the planner's memory model "
                "needs them equal",
                n->ops->name, st_device_name(g->dev));
        n->ops = ops;
        if (ops->prepare) ST_TRY(ops->prepare(n, g));
    }
    return ST_OK;
}

void st_graph_block_begin(st_graph *g) { g->cur_block = g->n_blocks++; }
void st_graph_block_end(st_graph *g) { g->cur_block = -1; }

/* The memory plan's own bookkeeping (a few arrays of the graph's size, small
 * beside the arenas it plans) could not be allocated: the host itself is out
 * of memory, or the process is at its limit. */
static st_status plan_nomem(const st_graph *g) {
    return st_fail(ST_ERR_NOMEM,
                   "out of host memory planning where the model's %d layers keep their %d tensors (a few "
                   "KiB): this process is at its memory limit (ulimit -v, the job's memory request) or "
                   "the host's memory is used up; free some, or start fewer ranks or loader workers on it",
                   g->n_nodes, g->n_acts);
}

/* Activation checkpointing: region[i] is the block whose shared region holds
 * activation i (produced inside the block and read only inside it), or -1
 * for a persistent one (graph inputs, block inputs and outputs, everything
 * outside blocks, the loss). Without checkpointing every tensor persists. */
static st_status find_regions(const st_graph *g, int **out) {
    int *region = malloc((size_t)(g->n_acts ? g->n_acts : 1) * sizeof *region);
    bool *read = calloc((size_t)(g->n_acts ? g->n_acts : 1), 1);
    if (!region || !read) {
        free(region), free(read);
        return plan_nomem(g);
    }
    for (int i = 0; i < g->n_acts; i++)
        region[i] = -1;
    if (g->checkpointing) {
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].block >= 0) region[g->nodes[i].out->index] = g->nodes[i].block;
        for (int i = 0; i < g->n_nodes; i++) {
            const st_node *n = &g->nodes[i];
            for (int k = 0; k < n->n_in; k++) {
                const st_tensor *t = n->in[k];
                if (t->kind != ST_TENSOR_ACT) continue;
                read[t->index] = true;
                if (region[t->index] != n->block) region[t->index] = -1;
            }
        }
        for (int i = 0; i < g->n_acts; i++)
            if (!read[i] || g->acts[i] == g->loss) region[i] = -1;
    }
    free(read);
    *out = region;
    return ST_OK;
}

/* 16-bit storage (half_io.h): in a bf16 or fp16 run on a device (or laid
 * out for one), a float activation is stored in 16 bits when the layer that
 * writes it and every layer that reads it handle that; never the loss (an
 * fp32 reduction), graph inputs (rounded in place at the start of forward)
 * or what the host reads as floats (host_f32: logits). */
static st_status choose_storage(st_graph *g) {
    const st_precision prec = g->params->precision;
    for (int i = 0; i < g->n_acts; i++)
        g->acts[i]->store = ST_PREC_FP32;
    if (prec == ST_PREC_FP32 || !st_graph_device_laid_out(g)) return ST_OK;
    bool *ok = malloc((size_t)(g->n_acts ? g->n_acts : 1));
    if (!ok) return plan_nomem(g);
    for (int i = 0; i < g->n_acts; i++) {
        const st_tensor *t = g->acts[i];
        ok[i] = t->kind == ST_TENSOR_ACT && t->dtype == ST_F32 && t != g->loss && !t->host_f32;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        if (st_node_half_io(n)) continue;
        ok[n->out->index] = false;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k]->kind == ST_TENSOR_ACT) ok[n->in[k]->index] = false;
    }
    for (int i = 0; i < g->n_acts; i++)
        if (ok[i]) g->acts[i]->store = prec;
    free(ok);
    return ST_OK;
}

/* Floats of arena an activation's data (or its gradient) takes. */
static int64_t act_floats(const st_tensor *t) { return st_align_floats(st_store_floats(t->count, t->store)); }

/* A tensor of the graph's acts table (activations and graph inputs). */
static bool in_acts(const st_tensor *t) { return t->kind == ST_TENSOR_ACT || t->kind == ST_TENSOR_INPUT; }

/* How many node inputs read each tensor of the acts table (calloc'd, n_acts
 * of them; NULL when out of memory). */
static int *count_uses(const st_graph *g) {
    int *uses = calloc((size_t)(g->n_acts ? g->n_acts : 1), sizeof *uses);
    for (int i = 0; uses && i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (in_acts(g->nodes[i].in[k])) uses[g->nodes[i].in[k]->index]++;
    return uses;
}

/* Epilogue fusions, on a CUDA device only (the CUDA linear layer runs them;
 * src/cuda/linear.cu), or its layout (the planner counts the same memory).
 *
 * linear -> gelu -> linear (a transformer's MLP) when g->fuse_gelu: the
 * first product writes GELU's output through the GELU_AUX epilogue, its own
 * output (GELU's input) as the epilogue's aux (fwd_fuses_next; not with
 * selective checkpointing, which recomputes GELU's output from its input
 * alone and must find the bits forward made), and the second product's
 * input gradient goes through the DGELU epilogue straight into GELU's input
 * gradient (bwd_fuses_prev: GELU's backward is skipped, and its output
 * gradient shares that gradient's memory, place_grads). Conditions: each of
 * the two tensors read by the next node alone, the three nodes in one
 * block, GELU's input and output in the same storage (16-bit in a bf16/fp16
 * run: nothing rounds after the epilogue), the width a multiple of 8
 * (cuBLASLt's rule for the GELU input's leading dimension).
 *
 * linear -> add (a residual branch's projection, then the residual add)
 * when g->fuse_residual: the product adds the residual, the add's other
 * input, as cuBLASLt's C (beta 1) and writes the add's output
 * (fwd_fuses_next); the linear's own output, read by the add alone, is never
 * written (the add's backward never reads it, nor does the linear's). A
 * 16-bit sum is the fp32 product + bias + residual rounded once, where the
 * layers apart round the branch first. Conditions: the linear's output
 * read by the add alone, the pair in one block, the three tensors in one
 * storage, 16-bit in a bf16/fp16 run (nothing rounds after the product).
 *
 * Neither with keep_acts (every activation and gradient kept apart). */
static st_status fuse_gelu(st_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].fwd_fuses_next = g->nodes[i].bwd_fuses_prev = false;
    if ((!g->fuse_gelu && !g->fuse_residual) || g->keep_acts || !st_graph_device_laid_out(g)) return ST_OK;
    int *uses = count_uses(g);
    if (!uses) return plan_nomem(g);
    const st_precision prec = g->params->precision;
    for (int i = 0; i + 1 < g->n_nodes && g->fuse_residual; i++) {
        st_node *L = &g->nodes[i], *A = &g->nodes[i + 1];
        const st_tensor *br = L->out;
        if (strcmp(L->ops->name, "linear") || strcmp(A->ops->name, "add") ||
            (A->in[0] == br) == (A->in[1] == br))
            continue;
        const st_tensor *res = A->in[0] == br ? A->in[1] : A->in[0];
        if (uses[br->index] != 1 || L->block != A->block || br->store != A->out->store ||
            res->store != A->out->store || res->kind != ST_TENSOR_ACT ||
            (prec != ST_PREC_FP32 && A->out->store == ST_PREC_FP32))
            continue;
        L->fwd_fuses_next = true;
    }
    for (int i = 0; i + 2 < g->n_nodes && g->fuse_gelu; i++) {
        st_node *L = &g->nodes[i], *G = &g->nodes[i + 1], *P = &g->nodes[i + 2];
        const st_tensor *pre = L->out, *act = G->out;
        if (strcmp(L->ops->name, "linear") || strcmp(G->ops->name, "gelu") ||
            strcmp(P->ops->name, "linear") || G->in[0] != pre || P->in[0] != act || uses[pre->index] != 1 ||
            uses[act->index] != 1 || L->block != G->block || G->block != P->block ||
            pre->store != act->store || (prec != ST_PREC_FP32 && act->store == ST_PREC_FP32) ||
            pre->ndim < 1 || pre->shape[pre->ndim - 1] % 8 != 0)
            continue;
        L->fwd_fuses_next = !g->selective;
        P->bwd_fuses_prev = pre->requires_grad && act->requires_grad;
    }
    free(uses);
    return ST_OK;
}

/* The activation gradients' offsets (floats) in their arena, and its size.
 * Backward runs node n-1 first; at step s = n-1-i it runs node i. A
 * tensor's gradient is first written at the step of its last consumer (in
 * forward order; the first writer, in_acc false) and last read at its
 * producer's step (its dy); a tensor without a consumer (the loss, seeded
 * before step 0) is born at step 0, one without a producer (a graph input)
 * is read to the end. Gradients whose lives overlap get disjoint memory,
 * the others may share it: placed largest first, each at the lowest offset
 * clear of every placed gradient alive at the same time. Backward then
 * holds the gradients of a few layers at once, not of the whole model
 * (with checkpointing as without: recomputing writes activations only).
 * Stale values in shared memory are harmless: the first writer overwrites
 * (the reason a gradient arena need not be zeroed at all). A gradient over
 * its tensor's data (over[i], grads_over_data) takes none of the arena. */
typedef struct grad_life {
    int64_t size, off;
    int birth, death, act;
    int birth2, death2; /* a second span, or -1 (a recomputed activation: forward, then backward) */
} grad_life;

static bool spans_meet(int b1, int d1, int b2, int d2) { return b1 >= 0 && b2 >= 0 && b1 <= d2 && b2 <= d1; }

/* Two lives share a step. */
static bool lives_meet(const grad_life *x, const grad_life *y) {
    return spans_meet(x->birth, x->death, y->birth, y->death) ||
           spans_meet(x->birth, x->death, y->birth2, y->death2) ||
           spans_meet(x->birth2, x->death2, y->birth, y->death) ||
           spans_meet(x->birth2, x->death2, y->birth2, y->death2);
}

static int by_size_then_birth(const void *a, const void *b) {
    const grad_life *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->birth != y->birth) return x->birth < y->birth ? -1 : 1;
    return x->act - y->act;
}

static int by_offset(const void *a, const void *b) {
    const grad_life *x = *(const grad_life *const *)a, *y = *(const grad_life *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* over[i]: activation i's gradient takes its data's memory. Its one
 * consumer's backward writes it in place (grad_in_place) and its producer's
 * backward never reads the data (backward_ignores_out), so after the
 * consumer's backward nothing reads the tensor's values: the logits under
 * softmax_ce, the largest gradient of a language model (GPT-2 124M at 16 x
 * 1024 tokens: 1.5 GiB in bf16). Not for a tensor in a block's shared
 * region or made by a node of a checkpointed block (recomputing writes
 * it), the loss, or a graph keeping its gradients (keep_acts). */
static st_status grads_over_data(const st_graph *g, const int *region, bool *over) {
    const int na = g->n_acts;
    int *uses = count_uses(g);
    const st_node **producer = calloc((size_t)(na ? na : 1), sizeof *producer);
    if (!uses || !producer) {
        free(uses), free(producer);
        return plan_nomem(g);
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].out->kind == ST_TENSOR_ACT) producer[g->nodes[i].out->index] = &g->nodes[i];
    for (int i = 0; i < na; i++)
        over[i] = false;
    for (int i = 0; i < g->n_nodes && !g->keep_acts; i++) {
        const st_node *n = &g->nodes[i];
        const st_tensor *t = n->in[0];
        if (!n->ops->grad_in_place || n->n_in < 1 || t->kind != ST_TENSOR_ACT || t->dtype != ST_F32 ||
            !t->requires_grad || t == g->loss || uses[t->index] != 1 || region[t->index] >= 0)
            continue;
        const st_node *p = producer[t->index];
        /* (a producer inside a checkpointed block runs again in backward, writing the data, which
         * would be the gradient then) */
        if (p && p->ops->backward_ignores_out && !(g->checkpointing && p->block >= 0)) over[t->index] = true;
    }
    free(uses), free(producer);
    return ST_OK;
}

/* Place m lives largest first, each at the lowest offset clear of every
 * placed life that overlaps it in time (near: scratch for m pointers).
 * Returns the floats spanned. */
static int64_t pack_lives(grad_life *life, int m, const grad_life **near) {
    qsort(life, (size_t)m, sizeof *life, by_size_then_birth);
    int64_t top = 0;
    for (int i = 0; i < m; i++) {
        int nb = 0;
        for (int j = 0; j < i; j++) /* placed, and alive at some step with life[i] */
            if (lives_meet(&life[j], &life[i])) near[nb++] = &life[j];
        qsort(near, (size_t)nb, sizeof *near, by_offset);
        int64_t at = 0;
        for (int j = 0; j < nb && near[j]->off < at + life[i].size; j++)
            if (near[j]->off + near[j]->size > at) at = near[j]->off + near[j]->size;
        life[i].off = at;
        if (at + life[i].size > top) top = at + life[i].size;
    }
    return top;
}

/* Whether tensor t (window lo[t]..hi[t], written at the steps of its
 * consumers' backwards in cons[cs[t]..cs[t+1]), skipping `skip`, its
 * aliasing node's) is written while u's value is still needed: between u's
 * handover and its producer's backward, both included. */
static bool written_while(int t, int skip_t, int u, const int *cs, const int *cons, const int *lo,
                          const int *hi) {
    for (int j = cs[t]; j < cs[t + 1]; j++)
        if (cons[j] != skip_t && cons[j] >= lo[u] && cons[j] <= hi[u]) return true;
    return false;
}

/* One memory for gradients a backward passes unchanged (alias_passes): a
 * node whose st_layer_ops.grad_passes bit k is set gives in[k] out's
 * gradient as it is (a residual add, to both inputs; the position
 * embedding, to its input). When that node is in[k]'s first writer in
 * backward, in[k]'s gradient can be out's memory, and the pass is nothing
 * (st_grad_pass with dx == dy). Members of one such set (alias[t] = its
 * root, the last tensor in forward order) share the memory, so each
 * member's value must survive until its producer's backward reads it: no
 * other member may be written in that window. The members' windows run
 * from the aliasing node's step (the handover, no write) to the producer's
 * step; the root's from its first writer, which writes, to its producer,
 * the aliasing node. The rule admits a transformer's residual stream
 * whole: each add hands the stream's gradient to its block input and its
 * branch, the branch's projection reads it, and only then does the block's
 * layer norm add into it. Around a bare linear (x + W x), only one of x
 * and W x may share the sum's memory (the first the add lists, x): the
 * linear adds into x's gradient at the step it reads its own output's.
 *
 * birth/death: the steps of each gradient's first writer and producer;
 * death[root] is extended over its members. fused[i]: tensor i is in a
 * fuse_gelu alias already (left alone). */
static st_status alias_passes(const st_graph *g, const bool *over, const bool *fused, const int *birth,
                              int *death, int *alias) {
    const int na = g->n_acts, nn = g->n_nodes;
    if (g->keep_acts) return ST_OK;
    int *cs = calloc((size_t)na + 1, sizeof *cs),
        *cons = malloc((size_t)(nn ? nn : 1) * ST_NODE_MAX_IN * sizeof *cons);
    int *lo = malloc((size_t)(na ? na : 1) * sizeof *lo), *hi = malloc((size_t)(na ? na : 1) * sizeof *hi),
        *fill = malloc((size_t)(na ? na : 1) * sizeof *fill);
    if (!cs || !cons || !lo || !hi || !fill) {
        free(cs), free(cons), free(lo), free(hi), free(fill);
        return plan_nomem(g);
    }
    /* each activation's consumers' backward steps, grouped by tensor */
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (in_acts(g->nodes[i].in[k])) cs[g->nodes[i].in[k]->index + 1]++;
    for (int i = 0; i < na; i++)
        cs[i + 1] += cs[i];
    for (int i = 0; i < na; i++)
        fill[i] = cs[i], lo[i] = birth[i], hi[i] = death[i];
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (in_acts(g->nodes[i].in[k])) cons[fill[g->nodes[i].in[k]->index]++] = nn - 1 - i;
    free(fill);
    for (int i = nn - 1; i >= 0; i--) { /* a node's output is settled before its inputs */
        const st_node *n = &g->nodes[i];
        const st_tensor *o = n->out;
        const int step = nn - 1 - i;
        if (!n->ops->grad_passes || o->kind != ST_TENSOR_ACT || !o->requires_grad || o == g->loss ||
            over[o->index] || fused[o->index] || cs[o->index + 1] == cs[o->index])
            continue;
        const int r = alias[o->index] >= 0 ? alias[o->index] : o->index;
        for (int k = 0; k < n->n_in; k++) {
            const st_tensor *t = n->in[k];
            if (!(n->ops->grad_passes >> k & 1u) || t->kind != ST_TENSOR_ACT || !t->requires_grad ||
                t == g->loss || t->store != o->store || t->count != o->count || over[t->index] ||
                fused[t->index] || alias[t->index] >= 0 || birth[t->index] != step)
                continue;
            bool twice = false; /* x + x: the node writes, then adds */
            for (int k2 = 0; k2 < n->n_in; k2++)
                twice |= k2 != k && n->in[k2] == t;
            if (twice) continue;
            const int ti = t->index;
            lo[ti] = step; /* the handover: not a write */
            bool clash = false;
            for (int u = 0; u < na && !clash; u++) {
                if (u != r && alias[u] != r) continue;
                const int skip_u = u == r ? -1 : lo[u]; /* a member's handover is no write; the root's
                                                           first writer writes */
                clash = written_while(ti, step, u, cs, cons, lo, hi) ||
                        written_while(u, skip_u, ti, cs, cons, lo, hi);
            }
            if (clash) {
                lo[ti] = birth[ti];
                continue;
            }
            alias[ti] = r;
            if (death[ti] > death[r]) death[r] = death[ti];
        }
    }
    free(cs), free(cons), free(lo), free(hi);
    return ST_OK;
}

static st_status place_grads(const st_graph *g, const bool *over, int64_t *goff, int64_t *count) {
    const int na = g->n_acts, nn = g->n_nodes;
    int *birth = malloc((size_t)(na ? na : 1) * sizeof *birth),
        *death = malloc((size_t)(na ? na : 1) * sizeof *death);
    grad_life *life = malloc((size_t)(na ? na : 1) * sizeof *life);
    const grad_life **near = malloc((size_t)(na ? na : 1) * sizeof *near);
    if (!birth || !death || !life || !near) {
        free(birth), free(death), free(life), free(near);
        return plan_nomem(g);
    }
    for (int i = 0; i < na; i++)
        birth[i] = 0, death[i] = nn;
    for (int i = 0; i < nn && !g->keep_acts; i++) {
        const st_node *n = &g->nodes[i];
        const int step = nn - 1 - i;
        if (in_acts(n->out)) death[n->out->index] = step;
        for (int k = 0; k < n->n_in; k++)
            if (in_acts(n->in[k])) birth[n->in[k]->index] = step;
    }
    /* a backward that folds in its input's producer's (fuse_gelu) writes
     * that producer's input gradient at its own step; the producer's
     * output gradient, never written, shares its memory */
    int *alias = malloc((size_t)(na ? na : 1) * sizeof *alias);
    if (!alias) {
        free(birth), free(death), free(life), free(near);
        return plan_nomem(g);
    }
    for (int i = 0; i < na; i++)
        alias[i] = -1;
    bool *fused = calloc((size_t)(na ? na : 1), 1);
    if (!fused) {
        free(birth), free(death), free(life), free(near), free(alias);
        return plan_nomem(g);
    }
    for (int i = 1; i < nn; i++) {
        const st_node *n = &g->nodes[i], *prev = &g->nodes[i - 1];
        if (!n->bwd_fuses_prev) continue;
        const int a = prev->in[0]->index;
        if (birth[a] > nn - 1 - i) birth[a] = nn - 1 - i;
        alias[prev->out->index] = a;
        fused[a] = fused[prev->out->index] = true;
    }
    const st_status s = alias_passes(g, over, fused, birth, death, alias);
    free(fused);
    if (s != ST_OK) {
        free(birth), free(death), free(life), free(near), free(alias);
        return s;
    }
    int m = 0;
    for (int i = 0; i < na; i++) {
        const st_tensor *t = g->acts[i];
        if (t->dtype == ST_I32 || !t->requires_grad || over[i] || alias[i] >= 0) continue;
        life[m++] =
            (grad_life){act_floats(t), 0, birth[i], death[i] > birth[i] ? death[i] : birth[i], i, -1, -1};
    }
    *count = pack_lives(life, m, near);
    for (int i = 0; i < m; i++)
        goff[life[i].act] = life[i].off;
    for (int i = 0; i < na; i++)
        if (alias[i] >= 0) goff[i] = goff[alias[i]];
    free(birth), free(death), free(life), free(near), free(alias);
    return ST_OK;
}

/* Activations no backward reads (transient[i]): the producer's backward
 * ignores its output and every consumer's backward its inputs (the
 * st_layer_ops flags), so the tensor is dead once its last consumer has
 * run forward: the output of the projection before a residual add (two per
 * transformer block), of a linear or convolution before a ReLU (ReLU's
 * backward reads its output), of a pooling before a flatten. Not a graph
 * input, the loss, what the host reads (host_f32), a tensor without a
 * consumer (an output), one a gradient lies over (over[i]), one in a
 * block's shared region, one read by a checkpointed block (recomputing
 * reads it in backward), nor any in a graph keeping its activations
 * (keep_acts).
 *
 * With selective checkpointing, also the recomputed activations: the output
 * of a recomputable layer (norms, GELU) whose inputs all outlive backward
 * (neither transient nor recomputed themselves), read by some backward; the
 * layer's forward runs again just before the first of those backwards
 * (remat_before), so the tensor lives in forward from its producer to its
 * last consumer, and again in backward from that recompute to its last
 * reader there. GPT-2's two layer norms and GELU per block: 6 of its 16
 * activations of C floats a token.
 *
 * Both kinds share the arena's last floats by their lives (steps: forward
 * node i at i, backward node i at 2n-1-i), as the gradients do in
 * backward. Returns in *count the floats of the section and, for each i
 * there (transient[i]), toff[i] its offset. */
static st_status place_transients(st_graph *g, const int *region, const bool *over, bool *transient,
                                  int64_t *toff, int64_t *count) {
    const int na = g->n_acts, nn = g->n_nodes;
    int *birth = malloc((size_t)(na ? na : 1) * sizeof *birth),
        *death = malloc((size_t)(na ? na : 1) * sizeof *death);
    int *first_read = malloc((size_t)(na ? na : 1) * sizeof *first_read),
        *last_read = malloc((size_t)(na ? na : 1) * sizeof *last_read);
    bool *remat = calloc((size_t)(na ? na : 1), 1), *keepable = malloc((size_t)(na ? na : 1));
    grad_life *life = malloc((size_t)(na ? na : 1) * sizeof *life);
    const grad_life **near = malloc((size_t)(na ? na : 1) * sizeof *near);
    if (!birth || !death || !first_read || !last_read || !remat || !keepable || !life || !near) {
        free(birth), free(death), free(first_read), free(last_read), free(remat), free(keepable), free(life),
            free(near);
        return plan_nomem(g);
    }
    for (int i = 0; i < na; i++) {
        const st_tensor *t = g->acts[i];
        keepable[i] = !g->keep_acts && t->kind == ST_TENSOR_ACT && t->dtype == ST_F32 && t != g->loss &&
                      !t->host_f32 && !t->read_after && !over[i] && region[i] < 0;
        birth[i] = death[i] = first_read[i] = last_read[i] = -1;
    }
    /* backward readers by forward index: the first to run in backward is
     * the highest index (first_read), the last the lowest (last_read) */
    /* (forward_only: no backward reads anything; a node whose forward the
     * node before it runs (fwd_fuses_next) has its output written there) */
    const bool bwd = !g->forward_only;
    for (int i = 0; i < nn; i++) {
        st_node *n = &g->nodes[i];
        n->remat_before = -1;
        if (in_acts(n->out)) {
            const int a = n->out->index;
            birth[a] = i > 0 && g->nodes[i - 1].fwd_fuses_next ? i - 1 : i;
            if (bwd && !n->ops->backward_ignores_out) {
                if (last_read[a] < 0) last_read[a] = i;
                first_read[a] = i;
            }
        }
        for (int k = 0; k < n->n_in; k++) {
            if (!in_acts(n->in[k])) continue;
            const int a = n->in[k]->index;
            death[a] = i;
            if (bwd && !n->ops->backward_ignores_in) {
                if (last_read[a] < 0) last_read[a] = i;
                first_read[a] = i;
            }
            if (g->checkpointing && n->block >= 0) keepable[a] = false;
        }
    }
    for (int i = 0; i < na; i++) /* no producer (an input) or no consumer (an output) */
        if (birth[i] < 0 || death[i] < 0) keepable[i] = false;
    /* transient: no backward reads it; recomputed: forward order, so that
     * an input's fate is known before its consumer's */
    for (int i = 0; i < na; i++)
        transient[i] = keepable[i] && first_read[i] < 0;
    for (int i = 0; i < nn && g->selective && !g->checkpointing; i++) {
        st_node *n = &g->nodes[i];
        const int a = n->out->index;
        if (!n->ops->recomputable || !in_acts(n->out) || !keepable[a] || transient[a] || first_read[a] < 0)
            continue;
        bool inputs_kept = true;
        for (int k = 0; k < n->n_in; k++)
            if (in_acts(n->in[k]) && (transient[n->in[k]->index] || remat[n->in[k]->index]))
                inputs_kept = false;
        if (!inputs_kept) continue;
        remat[a] = true;
        n->remat_before = first_read[a];
    }
    int m = 0;
    for (int i = 0; i < na; i++) {
        if (remat[i]) {
            life[m++] =
                (grad_life){act_floats(g->acts[i]),   0, birth[i], death[i], i, 2 * nn - 1 - first_read[i],
                            2 * nn - 1 - last_read[i]};
            transient[i] = true;
        } else if (transient[i]) {
            life[m++] = (grad_life){act_floats(g->acts[i]), 0, birth[i], death[i], i, -1, -1};
        }
    }
    *count = pack_lives(life, m, near);
    for (int i = 0; i < m; i++)
        toff[life[i].act] = life[i].off;
    free(birth), free(death), free(first_read), free(last_read), free(remat), free(keepable), free(life),
        free(near);
    /* the recomputed nodes in the order backward meets them */
    free(g->remat);
    g->remat = malloc((size_t)(nn ? nn : 1) * sizeof *g->remat);
    if (!g->remat) return plan_nomem(g);
    g->n_remat = 0;
    for (int i = nn - 1; i >= 0 && g->selective; i--)
        for (int j = 0; j < nn; j++)
            if (g->nodes[j].remat_before == i) g->remat[g->n_remat++] = j;
    return ST_OK;
}

st_status st_graph_finalize(st_graph *g) {
    if (g->finalized) return ST_OK;
    if (g->params->no_grads && !g->forward_only && !g->params_only)
        return st_fail(ST_ERR_INTERNAL, "a training graph over parameters made without gradients (no_grads)");
    if (!g->params->frozen)
        ST_TRY(layout_params(g->params));
    else if (g->params->cursor != g->params->n)
        return st_fail(ST_ERR_INTERNAL, "graph rebuild declared %d of %d parameters", g->params->cursor,
                       g->params->n);
    if (g->dev && !g->params_only)
        ST_TRY(use_device_ops(g));
    else if (g->device_layout)
        for (int i = 0; i < g->n_nodes; i++) {
            if (strcmp(g->nodes[i].ops->name, "attention") == 0)
                st_attention_device_layout(g, &g->nodes[i]);
            else if (strcmp(g->nodes[i].ops->name, "conv2d") == 0)
                st_conv2d_device_layout(&g->nodes[i]);
        }

    ST_TRY(choose_storage(g));
    ST_TRY(fuse_gelu(g));
    const int na = g->n_acts, nn = g->n_nodes;
    const bool fwd_only = g->forward_only;
    /* Which activations live in a block's shared region (checkpointing). */
    int *region = NULL;
    ST_TRY(find_regions(g, &region));
    /* Offsets (floats) into the activation arena: persistent tensors and
     * saved state first, then one region per block, all blocks sharing the
     * same addresses, then the transients by their lives in forward
     * (place_transients); the gradients' by their lives in backward
     * (place_grads). */
    int64_t *aoff = malloc((size_t)(na ? na : 1) * sizeof *aoff);
    int64_t *goff = malloc((size_t)(na ? na : 1) * sizeof *goff);
    int64_t *soff = malloc((size_t)(nn ? nn : 1) * sizeof *soff);
    if (!aoff || !goff || !soff) {
        free(region), free(aoff), free(goff), free(soff);
        return plan_nomem(g);
    }
    int64_t ac = 0, gc = 0, ic = 0, wc = 0, tc = 0;
    bool *over = malloc((size_t)(na ? na : 1));
    bool *transient = malloc((size_t)(na ? na : 1));
    int64_t *toff = malloc((size_t)(na ? na : 1) * sizeof *toff);
    st_status ps = over && transient && toff ? ST_OK : plan_nomem(g);
    if (ps == ST_OK && fwd_only) /* no gradients at all */
        memset(over, 0, (size_t)(na ? na : 1));
    else if (ps == ST_OK)
        ps = grads_over_data(g, region, over);
    if (ps == ST_OK && !fwd_only) ps = place_grads(g, over, goff, &gc);
    if (ps == ST_OK) ps = place_transients(g, region, over, transient, toff, &tc);
    if (ps != ST_OK) {
        free(region), free(aoff), free(goff), free(soff), free(over), free(transient), free(toff);
        return ps;
    }
    for (int i = 0; i < na; i++) {
        st_tensor *t = g->acts[i];
        if (t->dtype == ST_I32) {
            t->offset = ic;
            ic += st_align_floats(t->count);
        } else if (region[i] < 0 && !transient[i]) {
            aoff[i] = ac;
            ac += act_floats(t);
        }
    }
    int64_t shared_saved = 0; /* forward_only: one region every node's saved state takes (none reads it) */
    for (int i = 0; i < nn; i++) {
        st_node *n = &g->nodes[i];
        if (n->work_count > wc) wc = n->work_count;
        if (fwd_only) {
            soff[i] = ac;
            if (st_align_floats(n->saved_count) > shared_saved)
                shared_saved = st_align_floats(n->saved_count);
        } else if (n->block < 0 || !g->checkpointing) {
            soff[i] = ac, ac += st_align_floats(n->saved_count);
        }
    }
    ac += shared_saved;
    int64_t a_region = 0;
    for (int b = 0; g->checkpointing && b < g->n_blocks; b++) {
        int64_t ca = 0;
        for (int i = 0; i < na; i++) {
            if (region[i] != b) continue;
            aoff[i] = ac + ca;
            ca += act_floats(g->acts[i]);
        }
        for (int i = 0; i < nn; i++)
            if (g->nodes[i].block == b) soff[i] = ac + ca, ca += st_align_floats(g->nodes[i].saved_count);
        if (ca > a_region) a_region = ca;
    }
    g->region_act_count = a_region;
    ac += a_region;
    for (int i = 0; i < na; i++)
        if (transient[i]) aoff[i] = ac + toff[i];
    g->transient_act_count = tc;
    ac += tc;
    free(transient), free(toff);
    g->act_count = ac;
    g->grad_count = gc;
    g->int_count = ic;
    g->work_count = wc;
    free(region);
    if (g->params_only) { /* sizes only: the planner's memory model reads them (tests/test_hw.c) */
        free(aoff), free(goff), free(soff), free(over);
        g->finalized = true;
        return ST_OK;
    }
    const size_t abytes = (size_t)ac * sizeof(float), gbytes = (size_t)gc * sizeof(float);
    const size_t ibytes = (size_t)ic * sizeof(int32_t), wbytes = (size_t)wc * sizeof(float);
    st_status s = st_device_alloc(g->dev, abytes, (void **)&g->act_arena);
    if (s == ST_OK) s = st_device_alloc(g->dev, gbytes, (void **)&g->grad_arena);
    if (s == ST_OK) s = st_device_alloc(g->dev, ibytes, (void **)&g->int_arena);
    if (s == ST_OK) s = st_device_alloc(g->dev, wbytes, (void **)&g->work);
    if (s == ST_OK) s = st_device_zero(g->dev, g->act_arena, abytes);
    if (s == ST_OK) s = st_device_zero(g->dev, g->grad_arena, gbytes);
    if (s == ST_OK) s = st_device_zero(g->dev, g->int_arena, ibytes);
    if (s != ST_OK) {
        free(aoff), free(goff), free(soff), free(over);
        return st_fail_context(s, "allocating %.1f MiB of activations (%s): ",
                               (double)(abytes + gbytes + ibytes + wbytes) / (1 << 20),
                               fwd_only ? "a forward alone" : "lower the micro-batch size");
    }
    for (int i = 0; i < na; i++) {
        st_tensor *t = g->acts[i];
        if (t->dtype == ST_I32) {
            t->idata = g->int_arena + t->offset;
            continue;
        }
        t->offset = aoff[i];
        t->data = g->act_arena + aoff[i];
        if (t->requires_grad && !fwd_only) t->grad = over[i] ? t->data : g->grad_arena + goff[i];
    }
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].saved_count) g->nodes[i].saved = g->act_arena + soff[i];
    free(aoff), free(goff), free(soff), free(over);
    /* In backward order, the first consumer of a tensor writes its gradient and
     * later consumers add. Walk nodes last to first; track what was written. */
    bool *written = calloc((size_t)(na ? na : 1), 1);
    if (!written) return plan_nomem(g);
    for (int i = nn - 1; i >= 0; i--) {
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
/* One node's forward, as the forward pass and checkpointing's recompute run it. */
static st_status node_forward(st_graph *g, st_node *n, st_precision prec) {
    if (g->node_hook) g->node_hook(g->node_hook_ctx, n, false, false);
    st_status s = n->ops->forward(n, g);
    if (s != ST_OK) return s;
    if (prec != ST_PREC_FP32 && n->out != g->loss &&
        n->out->store == ST_PREC_FP32) /* (16-bit: the layer rounded) */
        ST_TRY(st_device_round_f32(g->dev, prec, n->out->data, (size_t)n->out->count));
    if (g->node_hook) g->node_hook(g->node_hook_ctx, n, false, true);
    return ST_OK;
}

st_status st_graph_forward(st_graph *g) {
    const st_precision prec = g->params->precision;
    st_status s = ST_OK;
    if (prec != ST_PREC_FP32) {
        ST_TRY(st_params_refresh_compute(g->params));
        st_params_use_compute(g->params, true);
        for (int i = 0; i < g->n_acts && s == ST_OK; i++)
            if (g->acts[i]->kind == ST_TENSOR_INPUT && g->acts[i]->dtype == ST_F32)
                s = st_device_round_f32(g->dev, prec, g->acts[i]->data, (size_t)g->acts[i]->count);
    }
    for (int i = 0; i < g->n_nodes && s == ST_OK; i++)
        if (i == 0 || !g->nodes[i - 1].fwd_fuses_next) /* (else written by node i - 1) */
            s = node_forward(g, &g->nodes[i], prec);
    st_params_use_compute(g->params, false);
    return s;
}

/* Backward reached the last node of a block: run the block's forward again
 * from its (persistent) inputs, refilling the shared region. */
static st_status recompute_block(st_graph *g, int last, st_precision prec) {
    int first = last;
    while (first > 0 && g->nodes[first - 1].block == g->nodes[last].block)
        first--;
    g->recomputing = true;
    st_status s = ST_OK;
    for (int i = first; i <= last && s == ST_OK; i++)
        if (i == first || !g->nodes[i - 1].fwd_fuses_next) /* (fuse_gelu keeps the pair in one block) */
            s = node_forward(g, &g->nodes[i], prec);
    g->recomputing = false;
    return s;
}

st_status st_graph_backward(st_graph *g, float seed) {
    if (!g->loss || !g->loss->grad)
        return st_fail(ST_ERR_INTERNAL, "backward: the graph has no loss that depends on parameters");
    const st_precision prec = g->params->precision;
    if (g->dev) {
        ST_TRY(st_device_fill_f32(g->dev, g->loss->grad, (size_t)g->loss->count, seed));
    } else {
        for (int64_t i = 0; i < g->loss->count; i++)
            g->loss->grad[i] = seed;
    }
    ST_TRY(st_params_refresh_compute(g->params));
    st_params_use_compute(g->params, true);
    st_status s = ST_OK;
    int r = 0; /* the next of g->remat */
    for (int i = g->n_nodes - 1; i >= 0 && s == ST_OK; i--) {
        st_node *n = &g->nodes[i];
        if (g->checkpointing && n->block >= 0 && (i == g->n_nodes - 1 || g->nodes[i + 1].block != n->block))
            s = recompute_block(g, i, prec);
        for (; s == ST_OK && r < g->n_remat && g->nodes[g->remat[r]].remat_before == i; r++) {
            g->recomputing = true; /* selective checkpointing: an output backward reads next */
            s = node_forward(g, &g->nodes[g->remat[r]], prec);
            g->recomputing = false;
        }
        const bool folded = i + 1 < g->n_nodes && g->nodes[i + 1].bwd_fuses_prev; /* (done by node i + 1) */
        if (s == ST_OK && n->out->requires_grad && !folded) {
            if (g->node_hook) g->node_hook(g->node_hook_ctx, n, true, false);
            s = n->ops->backward(n, g);
            for (int k = 0; k < n->n_in && s == ST_OK && prec != ST_PREC_FP32; k++)
                if (n->in[k]->kind == ST_TENSOR_ACT && n->in[k]->grad && n->in[k]->store == ST_PREC_FP32 &&
                    n->in[k]->grad != n->out->grad) /* (one memory, rounded by its writers) */
                    s = st_device_round_f32(g->dev, prec, n->in[k]->grad, (size_t)n->in[k]->count);
            if (s == ST_OK && g->node_hook) g->node_hook(g->node_hook_ctx, n, true, true);
        }
        if (s == ST_OK && g->backward_hook) s = g->backward_hook(g->backward_hook_ctx, i);
    }
    st_params_use_compute(g->params, false);
    return s;
}

st_status st_tensor_read(st_device *dev, const st_tensor *t, bool grad, float *host) {
    const void *src = grad ? (const void *)t->grad : (const void *)t->data;
    if (!src) return st_fail(ST_ERR_INTERNAL, "tensor %s has no %s", t->name, grad ? "gradient" : "data");
    const st_precision store = st_tensor_store(t, grad);
    if (store == ST_PREC_FP32) return st_device_download(dev, host, src, (size_t)t->count * sizeof(float));
    uint16_t *h = malloc((size_t)(t->count ? t->count : 1) * sizeof *h);
    if (!h) return st_fail(ST_ERR_NOMEM, "out of memory reading %s", t->name);
    st_status s = st_device_download(dev, h, src, (size_t)t->count * sizeof *h);
    if (s == ST_OK) st_from_half(store, host, h, t->count);
    free(h);
    return s;
}

st_status st_tensor_write(st_device *dev, st_tensor *t, bool grad, const float *host) {
    void *dst = grad ? (void *)t->grad : (void *)t->data;
    if (!dst) return st_fail(ST_ERR_INTERNAL, "tensor %s has no %s", t->name, grad ? "gradient" : "data");
    const st_precision store = st_tensor_store(t, grad);
    if (store == ST_PREC_FP32) return st_device_upload(dev, dst, host, (size_t)t->count * sizeof(float));
    uint16_t *h = malloc((size_t)(t->count ? t->count : 1) * sizeof *h);
    if (!h) return st_fail(ST_ERR_NOMEM, "out of memory writing %s", t->name);
    st_to_half(store, h, host, t->count);
    st_status s = st_device_upload(dev, dst, h, (size_t)t->count * sizeof *h);
    free(h);
    return s;
}
