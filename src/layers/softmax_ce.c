/* Fused log-softmax + negative log-likelihood over the last dim, mean over the
 * targets that are not ignore_index (PyTorch's F.cross_entropy, reduction mean). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "ce_rows.h"
#include "core/fastmath.h"
#include "layers.h"

static void shape_str(const st_tensor *t, char *buf, size_t nbytes) {
    int k = snprintf(buf, nbytes, "(");
    for (int i = 0; i < t->ndim; i++)
        k += snprintf(buf + k, nbytes - (size_t)k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    snprintf(buf + k, nbytes - (size_t)k, ")");
}

/* Names the node, the position as coordinates of the targets (in[1]), and the value. */
st_status st_ce_bad_target(const st_node *n, const char *op, int64_t r, int32_t tgt, int64_t V, int32_t ignore) {
    const st_tensor *t = n->in[1];
    char pos[128];
    int k = snprintf(pos, sizeof pos, "[");
    int64_t rem = r, stride = t->count;
    for (int d = 0; d < t->ndim; d++) {
        stride /= t->shape[d];
        k += snprintf(pos + k, sizeof pos - (size_t)k, d ? ", %lld" : "%lld", (long long)(rem / stride));
        rem %= stride;
    }
    snprintf(pos + k, sizeof pos - (size_t)k, "]");
    int len = (int)strlen(n->out->name) - 4; /* "<name>.out" */
    return st_fail(ST_ERR_ARG,
                   "%s %.*s: target %d at position %s of %s is outside [0, %lld) and is not "
                   "ignore_index %d; check the labels and num_classes / vocab_size",
                   op, len, n->out->name, tgt, pos, t->name, (long long)V, ignore);
}

static st_status softmax_ce_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_CE_ROWS], V = n->args.i[ST_CE_V];
    const int32_t ign = (int32_t)n->args.i[ST_CE_IGNORE];
    const float *x = n->in[0]->data;      /* (R, V) */
    const int32_t *tg = n->in[1]->idata;  /* (R) */
    float *lse = n->saved;                /* (R): log-sum-exp per row, for backward */
    double *row_loss = (double *)g->work; /* (R) */
    int64_t n_valid = 0;
    /* Validate serially first, so the error names the first bad position. */
    for (int64_t r = 0; r < R; r++) {
        if (tg[r] == ign) continue;
        if (tg[r] < 0 || tg[r] >= V) return st_ce_bad_target(n, "softmax_ce", r, tg[r], V, ign);
        n_valid++;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        if (tg[r] == ign) {
            lse[r] = 0.0f;
            row_loss[r] = 0.0;
            continue;
        }
        const float *xr = x + r * V;
        /* Subtract the max so exp never overflows. */
        const float m = st_ce_row_max(xr, V);
        const double l = (double)m + log(st_ce_row_sum_exp(xr, m, V));
        lse[r] = (float)l;
        row_loss[r] = l - xr[tg[r]];
    }
    /* Serial sum in row order: the same loss for any thread count. */
    double sum = 0.0;
    for (int64_t r = 0; r < R; r++)
        sum += row_loss[r];
    n->out->data[0] = n_valid ? (float)(sum / (double)n_valid) : 0.0f;
    return ST_OK;
}

/* dlogits = (softmax - onehot(target)) * dloss / n_valid; ignored rows get 0.
 * dlogits may be the logits' own memory (grad_in_place, graph.c
 * grads_over_data): each element is read before its gradient is written. */
static st_status softmax_ce_backward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_CE_ROWS], V = n->args.i[ST_CE_V];
    const int32_t ign = (int32_t)n->args.i[ST_CE_IGNORE];
    const float *x = n->in[0]->data;
    const int32_t *tg = n->in[1]->idata;
    const float *lse = n->saved;
    float *dx = n->in[0]->grad; /* (R, V) or NULL */
    if (!dx) return ST_OK;
    int64_t n_valid = 0;
    for (int64_t r = 0; r < R; r++)
        n_valid += tg[r] != ign;
    const float scale = n_valid ? n->out->grad[0] / (float)n_valid : 0.0f;
    const bool acc = n->in_acc[0];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        float *dr = dx + r * V;
        if (tg[r] == ign) {
            if (!acc) memset(dr, 0, (size_t)V * sizeof(float));
            continue;
        }
        const float *xr = x + r * V;
        const float l = lse[r];
        /* x - lse <= 0 up to the rounding of lse to float (a few ulp above 0
         * at most), where st_exp_nonpos is as accurate as below 0. */
        if (acc)
            for (int64_t v = 0; v < V; v++)
                dr[v] += st_exp_nonpos(xr[v] - l) * scale;
        else
            for (int64_t v = 0; v < V; v++)
                dr[v] = st_exp_nonpos(xr[v] - l) * scale;
        dr[tg[r]] -= scale;
    }
    return ST_OK;
}

static const st_layer_ops softmax_ce_cpu = {
    "softmax_ce", softmax_ce_forward, softmax_ce_backward, NULL, true, true, false, false, 0};

st_status st_softmax_ce(st_graph *g, const char *name, st_tensor *logits, st_tensor *targets,
                        int32_t ignore_index, st_tensor **loss) {
    if (logits->dtype != ST_F32 || targets->dtype != ST_I32)
        return st_fail(ST_ERR_ARG, "softmax_ce %s: logits %s must be float and targets %s int32", name,
                       logits->name, targets->name);
    const int64_t V = logits->shape[logits->ndim - 1];
    if (logits->ndim < 2 || targets->ndim != logits->ndim - 1 ||
        memcmp(logits->shape, targets->shape, (size_t)targets->ndim * sizeof *targets->shape) != 0) {
        char sl[128], st[128];
        shape_str(logits, sl, sizeof sl);
        shape_str(targets, st, sizeof st);
        return st_fail(ST_ERR_SHAPE,
                       "softmax_ce %s: logits %s %s need targets of shape (...) = the logits' leading "
                       "dims, but %s is %s",
                       name, logits->name, sl, targets->name, st);
    }
    if (V > INT32_MAX)
        return st_fail(ST_ERR_SHAPE, "softmax_ce %s: %lld classes do not fit int32 targets", name,
                       (long long)V);
    const int64_t R = logits->count / V, one = 1;
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 1, &one, &out));
    st_tensor *in[2] = {logits, targets};
    st_node *node;
    ST_TRY(st_graph_node(g, &softmax_ce_cpu, in, 2, NULL, 0, out, &node));
    node->args.i[ST_CE_ROWS] = R;
    node->args.i[ST_CE_V] = V;
    node->args.i[ST_CE_IGNORE] = ignore_index;
    node->saved_count = R;    /* log-sum-exp per row */
    node->work_count = 2 * R; /* per-row losses, as doubles */
    g->loss = out;
    *loss = out;
    return ST_OK;
}
