/* FLOPs and elementwise traffic per node (see cost.h). Nodes are told apart
 * by their ops table's name, the one piece every backend shares. */
#include "cost.h"

#include <string.h>

#include "layers/args.h"
#include "layers/layers.h"

/* CPU weights of arithmetic-bound elementwise work: elements of memory
 * traffic per element computed, fitted to profiler traces (log.trace) of the
 * bench configs at 1 thread on the 2-core Zen 4 this project runs on
 * (docs/planner.md). softmax_ce calls libm's scalar expf once per logit in
 * forward (about 12 elements' worth) and backward (6); GELU's st_tanh costs
 * about 1.25 each way; layernorm's per-row statistics and rstd about 1.5;
 * attention's softmax passes over the causal half of P (max, exp, sum,
 * scale; backward's dP . P row sums and dS) about 6 forward and 4 backward. */
#define CPU_CE_EXP_FWD 12.0
#define CPU_CE_EXP_BWD 6.0
#define CPU_TANH 1.25
#define CPU_ROWNORM 1.5
#define CPU_ATTN_P_FWD 6.0
#define CPU_ATTN_P_BWD 4.0
/* Winograd's V and M buffers (a chunk of about 1 MiB, written and read back
 * while in the core's L2) cost this fraction of an element of main memory. */
#define CPU_IN_CACHE 0.5

static double last_dim(const st_tensor *t) { return (double)t->shape[t->ndim - 1]; }

double st_cost_wino_flops(int64_t B, int64_t H, int64_t W, int64_t Cin, int64_t Cout) {
    const double tiles = (double)B * (double)((H + 1) / 2) * (double)((W + 1) / 2);
    return 16 * 2 * tiles * (double)Cin * (double)Cout;
}

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
    c->bwd_elems = n->out->requires_grad ? io + 2 * P : 0;
    c->cpu = (st_work){c->fwd_flops, c->bwd_flops, c->fwd_elems, c->bwd_elems};
    /* the part of P the causal blocks touch */
    const double Pc = P * area / ((double)T * (double)T);
    c->cpu.fwd_elems += CPU_ATTN_P_FWD * Pc;
    if (n->out->requires_grad) c->cpu.bwd_elems += CPU_ATTN_P_BWD * Pc;
}

/* conv2d: the model's direct form, and on the CPU the kernel conv2d.c picks */
static void conv_cost(const st_node *n, bool dx, bool bwd, st_cost *c) {
    const st_tensor *x = n->in[0], *y = n->out, *w = n->params[0]; /* w (Cout, Cin, k, k) */
    const double K = (double)w->count / (double)w->shape[0], Cout = (double)w->shape[0];
    const double M = (double)y->count / Cout; /* B * Ho * Wo */
    const double mm = 2 * M * Cout * K;
    c->fwd_flops = mm;
    c->bwd_flops = bwd ? mm * (dx ? 2 : 1) : 0;
    /* im2col writes and the sgemm reads the column matrix (M x K), in
     * forward and again in backward (recomputed), plus col2im for dx */
    c->fwd_elems = 2 * M * K + (double)y->count;
    c->bwd_elems = bwd ? (dx ? 4 : 2) * M * K + (double)y->count : 0;
    c->cpu = (st_work){c->fwd_flops, c->bwd_flops, c->fwd_elems, c->bwd_elems};
    if (n->args.i[ST_CONV_DIRECT]) { /* a 1x1: x is the column matrix */
        c->cpu.fwd_elems = (double)x->count + (double)y->count;
        c->cpu.bwd_elems = bwd ? (double)y->count + (dx ? 3 : 1) * (double)x->count : 0;
    }
    if (!n->args.i[ST_CONV_WINO]) return;
    /* Winograd F(2x2, 3x3) (winograd.c): forward transforms x into V (16,
     * tiles, Cin), multiplies into M (16, tiles, Cout) and transforms M into
     * y; backward transforms dy into dM, recomputes V for the weight
     * gradient, multiplies dM into dV (over V) and scatters dV into dx. */
    const double B = (double)x->shape[0], H = (double)x->shape[1], W = (double)x->shape[2];
    const double Cin = (double)x->shape[3];
    const double tiles16 = 16 * B * (double)(((int64_t)H + 1) / 2) * (double)(((int64_t)W + 1) / 2);
    const double f = st_cost_wino_flops(x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0]);
    const double V = tiles16 * Cin, Mx = tiles16 * Cout;
    c->cpu.fwd_flops = f;
    c->cpu.fwd_elems = (double)x->count + (double)y->count + CPU_IN_CACHE * (V + Mx);
    if (!bwd) {
        c->cpu.bwd_flops = c->cpu.bwd_elems = 0;
        return;
    }
    c->cpu.bwd_flops = f * (dx ? 2 : 1);
    /* dx: dV written and read, and the += of each tile's 4x4 window into dx */
    c->cpu.bwd_elems =
        (double)y->count + (double)x->count + CPU_IN_CACHE * (Mx + V) + (dx ? CPU_IN_CACHE * 4 * V : 0);
}

/* linear_ce, counted as the plain pair is (linear + softmax_ce: a product's
 * own reads and writes are in its efficiency): the logits' product in
 * forward, dh's and dW's in backward (though a training forward runs them);
 * the chunk read for the max and the sum, then read and rewritten as its
 * gradient; dW read and written per chunk after the first; backward's
 * scaling of dh and dW. */
static void linear_ce_cost(const st_node *n, bool bwd, st_cost *c) {
    const double R = (double)n->args.i[ST_LCE_ROWS], C = (double)n->args.i[ST_LCE_C];
    const double V = (double)n->args.i[ST_LCE_V], Rc = (double)n->args.i[ST_LCE_CHUNK];
    const double chunks = (double)(int64_t)((R + Rc - 1) / Rc), mm = 2 * R * C * V;
    c->fwd_flops = mm;
    c->bwd_flops = bwd ? 2 * mm : 0;
    c->fwd_elems = 2 * R * V;
    c->bwd_elems = bwd ? 2 * R * V + 2 * (chunks - 1) * V * C + 3 * (R * C + V * C) : 0;
    c->cpu = (st_work){c->fwd_flops, c->bwd_flops, c->fwd_elems, c->bwd_elems};
    c->cpu.fwd_elems += CPU_CE_EXP_FWD * R * V;
    if (bwd) c->cpu.bwd_elems += CPU_CE_EXP_BWD * R * V;
}

st_cost st_node_cost(const st_node *n) {
    st_cost c;
    memset(&c, 0, sizeof c);
    const char *op = n->ops->name;
    const st_tensor *x = n->in[0], *y = n->out;
    const bool dx = x->requires_grad && x->kind == ST_TENSOR_ACT, bwd = y->requires_grad;
    c.fwd_passes = 1;
    c.bwd_passes = bwd ? 1 : 0;
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
        c.cpu = (st_work){c.fwd_flops, c.bwd_flops, c.fwd_elems, c.bwd_elems};
        return c;
    }
    if (strcmp(op, "conv2d") == 0) {
        conv_cost(n, dx, bwd, &c);
        return c;
    }
    if (strcmp(op, "attention") == 0) {
        attention_cost(n, &c);
        return c;
    }
    if (strcmp(op, "linear_ce") == 0) {
        linear_ce_cost(n, bwd, &c);
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
    c.cpu = (st_work){0, 0, c.fwd_elems, c.bwd_elems};
    /* arithmetic-bound work on the CPU, per element of the input */
    double wf = 0, wb = 0;
    if (strcmp(op, "softmax_ce") == 0) wf = CPU_CE_EXP_FWD, wb = CPU_CE_EXP_BWD;
    else if (strcmp(op, "gelu") == 0) wf = wb = CPU_TANH;
    else if (strcmp(op, "layernorm") == 0) wf = wb = CPU_ROWNORM;
    c.cpu.fwd_elems += wf * (double)x->count;
    if (bwd && dx) c.cpu.bwd_elems += wb * (double)x->count;
    return c;
}

st_cost st_graph_cost(const st_graph *g) {
    st_cost t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < g->n_nodes; i++) {
        const st_cost c = st_node_cost(&g->nodes[i]);
        /* its forward runs again in backward: a checkpointed block's node, or
         * one selective checkpointing recomputes (remat_before) */
        const bool again = (g->checkpointing && g->nodes[i].block >= 0) || g->nodes[i].remat_before >= 0;
        t.fwd_flops += c.fwd_flops;
        t.bwd_flops += c.bwd_flops + (again ? c.fwd_flops : 0);
        t.fwd_elems += c.fwd_elems;
        t.bwd_elems += c.bwd_elems + (again ? c.fwd_elems : 0);
        t.cpu.fwd_flops += c.cpu.fwd_flops;
        t.cpu.bwd_flops += c.cpu.bwd_flops + (again ? c.cpu.fwd_flops : 0);
        t.cpu.fwd_elems += c.cpu.fwd_elems;
        t.cpu.bwd_elems += c.cpu.bwd_elems + (again ? c.cpu.fwd_elems : 0);
        t.fwd_passes += c.fwd_passes;
        t.bwd_passes += c.bwd_passes + (again ? c.fwd_passes : 0);
    }
    return t;
}
