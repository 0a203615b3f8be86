/* Layer normalisation over the last dim (Ba, Kiros, Hinton 2016):
 * y = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps), biased var as PyTorch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"


/* Columns of dweight/dbias one thread owns in backward. */
#define LN_COL_BLOCK 32
/* Row sums run in LANES independent partial sums (lane j takes elements j,
 * j + LANES, ...; the tail goes to lane 0), added in lane order: a fixed
 * order, so the same bits every run, and a loop gcc vectorizes without
 * reassociating (a single running float sum stays scalar). */
#define LANES 16

/* LANES floats as one value (the GCC and Clang vector extension), for
 * loops that keep two or more lane sums: written as arrays, gcc vectorized
 * backward's row loop across rows instead, with permutes, at a third of
 * the speed. The same additions in the same order as the arrays. */
typedef float lanes_v __attribute__((vector_size(LANES * sizeof(float))));
/* (loaded by memcpy, not returned from a function: a build without AVX-512
 * would warn that such a return changes the ABI) */

static inline float lanes_total(const float *lane) {
    float t = 0.0f;
    for (int j = 0; j < LANES; j++) t += lane[j];
    return t;
}

/* sum_c x[c] */
static float row_sum(const float *x, int64_t C) {
    float lane[LANES] = {0};
    int64_t c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += x[c + j];
    for (; c < C; c++) lane[0] += x[c];
    return lanes_total(lane);
}

/* sum_c (x[c] - m)^2 */
static float row_sq_dev(const float *x, float m, int64_t C) {
    float lane[LANES] = {0};
    int64_t c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += (x[c + j] - m) * (x[c + j] - m);
    for (; c < C; c++) lane[0] += (x[c] - m) * (x[c] - m);
    return lanes_total(lane);
}

static st_status layernorm_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    const float eps = n->args.f[ST_LAYERNORM_F_EPS];
    const float *x = n->in[0]->data;              /* (R, C) */
    const float *w = n->params[0]->data;          /* (C) */
    const float *b = n->params[1]->data;          /* (C) */
    float *y = n->out->data;                      /* (R, C) */
    float *mean = n->saved, *rstd = n->saved + R; /* (R), (R) */
#pragma omp parallel for schedule(static) if (R * C >= ST_OMP_MIN_WORK)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        /* Two passes: the variance of (x - mean) does not cancel catastrophically. */
        const float m = row_sum(xr, C) / (float)C;
        const float v = row_sq_dev(xr, m, C) / (float)C;
        const float s = 1.0f / sqrtf(v + eps);
        for (int64_t c = 0; c < C; c++)
            yr[c] = (xr[c] - m) * s * w[c] + b[c];
        mean[r] = m;
        rstd[r] = s;
    }
    return ST_OK;
}

/* With xhat = (x - mean) * rstd and g = dy * weight (llm.c layernorm_backward):
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * dweight += sum_rows dy * xhat, dbias += sum_rows dy. */
static st_status layernorm_backward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    const float *x = n->in[0]->data;     /* (R, C) */
    const float *w = n->params[0]->data; /* (C) */
    const float *dy = n->out->grad;      /* (R, C) */
    const float *mean = n->saved, *rstd = n->saved + R;
    float *dw = n->params[0]->grad, *db = n->params[1]->grad; /* (C), (C) */
    float *dx = n->in[0]->grad;                               /* (R, C) or NULL */
    if (dx) {
        const bool acc = n->in_acc[0];
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x + r * C, *gr = dy + r * C;
            float *dr = dx + r * C;
            const float m = mean[r], s = rstd[r];
            lanes_v vg = {0}, vgx = {0};
            int64_t c = 0;
            for (; c + LANES <= C; c += LANES) {
                lanes_v gv, wv, xv;
                memcpy(&gv, gr + c, sizeof gv);
                memcpy(&wv, w + c, sizeof wv);
                memcpy(&xv, xr + c, sizeof xv);
                const lanes_v gc = gv * wv;
                vg += gc;
                vgx += gc * (xv - m) * s;
            }
            for (; c < C; c++) {
                const float gc = gr[c] * w[c];
                vg[0] += gc;
                vgx[0] += gc * (xr[c] - m) * s;
            }
            float lg[LANES], lgx[LANES];
            memcpy(lg, &vg, sizeof lg);
            memcpy(lgx, &vgx, sizeof lgx);
            const float gm = lanes_total(lg) / (float)C, gxm = lanes_total(lgx) / (float)C;
            if (acc)
                for (c = 0; c < C; c++)
                    dr[c] += s * (gr[c] * w[c] - gm - (xr[c] - m) * s * gxm);
            else
                for (c = 0; c < C; c++)
                    dr[c] = s * (gr[c] * w[c] - gm - (xr[c] - m) * s * gxm);
        }
    }
    if (dw && db) {
        /* A sum over rows per column: each thread owns a block of columns and
         * walks the rows in order, so the result does not depend on threads. */
        const int64_t nblk = (C + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < nblk; k++) {
            const int64_t c0 = k * LN_COL_BLOCK, nc = c0 + LN_COL_BLOCK < C ? LN_COL_BLOCK : C - c0;
            /* the block's sums in locals, the same additions in the same
             * order: dw and db alias nothing, but the compiler cannot know
             * it and loaded and stored them every row (1.7x) */
            float aw[LN_COL_BLOCK], ab[LN_COL_BLOCK];
            memcpy(aw, dw + c0, (size_t)nc * sizeof(float));
            memcpy(ab, db + c0, (size_t)nc * sizeof(float));
            for (int64_t r = 0; r < R; r++) {
                const float *xr = x + r * C + c0, *gr = dy + r * C + c0;
                const float m = mean[r], s = rstd[r];
                for (int64_t c = 0; c < nc; c++) {
                    aw[c] += gr[c] * (xr[c] - m) * s;
                    ab[c] += gr[c];
                }
            }
            memcpy(dw + c0, aw, (size_t)nc * sizeof(float));
            memcpy(db + c0, ab, (size_t)nc * sizeof(float));
        }
    }
    return ST_OK;
}

static const st_layer_ops layernorm_cpu = {
    "layernorm", layernorm_forward, layernorm_backward, NULL, false, true, false, true, 0};

st_status st_layernorm(st_graph *g, const char *name, st_tensor *x, float eps, st_tensor **y) {
    if (x->dtype != ST_F32) return st_fail(ST_ERR_ARG, "layernorm %s: input %s must be float", name, x->name);
    if (!(eps >= 0.0f) || isinf(eps))
        return st_fail(ST_ERR_ARG, "layernorm %s: eps %g must be finite and >= 0 (PyTorch uses 1e-5)", name,
                       (double)eps);
    const int64_t C = x->shape[x->ndim - 1];
    char pname[ST_NAME_MAX];
    st_tensor *w, *b;
    snprintf(pname, sizeof pname, "%s.weight", name);
    ST_TRY(st_graph_param(g, pname, 1, &C, ST_INIT_ONES, 0.0f, false, &w));
    snprintf(pname, sizeof pname, "%s.bias", name);
    ST_TRY(st_graph_param(g, pname, 1, &C, ST_INIT_ZEROS, 0.0f, false, &b));
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, x->ndim, x->shape, &out));
    st_tensor *params[2] = {w, b};
    st_node *node;
    ST_TRY(st_graph_node(g, &layernorm_cpu, &x, 1, params, 2, out, &node));
    node->args.i[ST_LAYERNORM_ROWS] = x->count / C;
    node->args.i[ST_LAYERNORM_C] = C;
    node->args.f[ST_LAYERNORM_F_EPS] = eps;
    node->saved_count = 2 * (x->count / C); /* mean and rstd per row */
    *y = out;
    return ST_OK;
}
