/* Mean squared error: loss = mean((pred - target)^2) over all elements.
 * The target may itself need a gradient (e.g. a distillation teacher in a graph). */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"


/* Elements per partial sum. Fixed, so the loss does not depend on threads. */
#define MSE_CHUNK 4096

static int64_t n_chunks(int64_t N) { return (N + MSE_CHUNK - 1) / MSE_CHUNK; }

static st_status mse_forward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_MSE_N], K = n_chunks(N);
    const float *p = n->in[0]->data, *t = n->in[1]->data;
    double *part = (double *)g->work; /* (K) */
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < K; k++) {
        const int64_t i1 = (k + 1) * MSE_CHUNK < N ? (k + 1) * MSE_CHUNK : N;
        double s = 0.0;
        for (int64_t i = k * MSE_CHUNK; i < i1; i++) {
            const double d = (double)p[i] - t[i];
            s += d * d;
        }
        part[k] = s;
    }
    double sum = 0.0;
    for (int64_t k = 0; k < K; k++)
        sum += part[k];
    n->out->data[0] = (float)(sum / (double)N);
    return ST_OK;
}

/* dpred = 2 (pred - target) dloss / N, dtarget = -dpred. */
static st_status mse_backward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_MSE_N];
    const float *p = n->in[0]->data, *t = n->in[1]->data;
    const float scale = 2.0f * n->out->grad[0] / (float)N;
    for (int k = 0; k < 2; k++) {
        float *dx = n->in[k]->grad;
        if (!dx) continue;
        const float sk = k == 0 ? scale : -scale;
        const bool acc = n->in_acc[k];
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++)
            dx[i] = (acc ? dx[i] : 0.0f) + sk * (p[i] - t[i]);
    }
    return ST_OK;
}

static const st_layer_ops mse_cpu = {"mse", mse_forward, mse_backward, NULL, false, true, false, false, 0};

static void shape_str(const st_tensor *t, char *buf, size_t nbytes) {
    int k = snprintf(buf, nbytes, "(");
    for (int i = 0; i < t->ndim; i++)
        k += snprintf(buf + k, nbytes - (size_t)k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    snprintf(buf + k, nbytes - (size_t)k, ")");
}

st_status st_mse(st_graph *g, const char *name, st_tensor *pred, st_tensor *target, st_tensor **loss) {
    if (pred->dtype != ST_F32 || target->dtype != ST_F32)
        return st_fail(ST_ERR_ARG, "mse %s: prediction %s and target %s must be float", name, pred->name,
                       target->name);
    if (pred->ndim != target->ndim ||
        memcmp(pred->shape, target->shape, (size_t)pred->ndim * sizeof *pred->shape) != 0) {
        char sp[128], st[128];
        shape_str(pred, sp, sizeof sp);
        shape_str(target, st, sizeof st);
        return st_fail(ST_ERR_SHAPE, "mse %s: prediction %s has shape %s but target %s has shape %s", name,
                       pred->name, sp, target->name, st);
    }
    const int64_t one = 1;
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, 1, &one, &out));
    st_tensor *in[2] = {pred, target};
    st_node *node;
    ST_TRY(st_graph_node(g, &mse_cpu, in, 2, NULL, 0, out, &node));
    node->args.i[ST_MSE_N] = pred->count;
    node->work_count = 2 * n_chunks(pred->count); /* partial sums, as doubles */
    g->loss = out;
    *loss = out;
    return ST_OK;
}
