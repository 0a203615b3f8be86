/* Checks shared by the layer tests, on top of gradcheck.h.
 *
 * lc_compare: a float result against a double reference.
 * lc_acc_check: the backward contract of graph.h for one node: parameter
 * gradients ADD, and the input gradient is written (whatever was there, NaN
 * included) when in_acc is false and added when it is true. It runs the
 * node's backward twice from the same dy, the second time with in_acc set
 * over a random prefill and without zeroing parameter gradients. */
#ifndef ST_TESTS_LAYERCHECK_H
#define ST_TESTS_LAYERCHECK_H

#include "gradcheck.h"

/* |a - b| <= atol + rtol |b| element-wise; returns (and counts) the mismatches. */
static inline int lc_compare(const char *label, const char *what, const float *a, const double *b, int64_t n,
                             double rtol, double atol) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(b[i]);
        if (!(fabs((double)a[i] - b[i]) <= tol)) {
            if (bad < 5)
                fprintf(stderr, "FAIL %s: %s[%lld] = %.9g, expected %.9g\n", label, what, (long long)i,
                        (double)a[i], b[i]);
            bad++;
        }
    }
    st_test_failures += bad;
    return bad;
}

static inline int lc_acc_check(const char *label, st_graph *g, st_node *node, uint64_t seed) {
    st_tensor *x = node->in[0], *y = node->out;
    if (!x->grad) return 0;
    int bad = 0;
    st_rng r = st_rng_make(seed, 5);
    const int64_t nx = x->count, np = g->params->arena_count;
    float *dy = malloc((size_t)y->count * sizeof(float));
    float *dx1 = malloc((size_t)nx * sizeof(float)), *pre = malloc((size_t)nx * sizeof(float));
    float *pg1 = malloc((size_t)np * sizeof(float));
    double *want = malloc((size_t)nx * sizeof(double));
    gc_fill(dy, y->count, &r, 1.0f);
    gc_fill(pre, nx, &r, 1.0f);
    const bool saved_acc = node->in_acc[0];
    if (st_graph_forward(g) != ST_OK) bad++;

    memset(g->params->grad, 0, (size_t)np * sizeof(float));
    memcpy(y->grad, dy, (size_t)y->count * sizeof(float));
    for (int64_t i = 0; i < nx; i++)
        x->grad[i] = NAN;
    node->in_acc[0] = false;
    if (node->ops->backward(node, g) != ST_OK) bad++;
    memcpy(dx1, x->grad, (size_t)nx * sizeof(float));
    memcpy(pg1, g->params->grad, (size_t)np * sizeof(float));
    for (int64_t i = 0; i < nx; i++)
        if (!isfinite(dx1[i])) {
            if (bad < 5) fprintf(stderr, "FAIL %s: written dx[%lld] is %g\n", label, (long long)i, dx1[i]);
            bad++;
        }

    memcpy(x->grad, pre, (size_t)nx * sizeof(float));
    memcpy(y->grad, dy, (size_t)y->count * sizeof(float));
    node->in_acc[0] = true;
    if (node->ops->backward(node, g) != ST_OK) bad++;
    node->in_acc[0] = saved_acc;
    for (int64_t i = 0; i < nx; i++)
        want[i] = (double)pre[i] + dx1[i];
    const int cmp = lc_compare(label, "accumulated dx", x->grad, want, nx, 1e-5, 1e-6); /* counts its own */
    for (int64_t i = 0; i < np; i++) {
        const float *slot = g->params->grad + i;
        if (slot >= x->grad && slot < x->grad + nx) continue; /* x itself, when it is a parameter */
        double w = 2.0 * pg1[i], tol = 1e-6 + 1e-5 * fabs(w);
        if (!(fabs((double)*slot - w) <= tol)) {
            if (bad < 5)
                fprintf(stderr, "FAIL %s: param grad[%lld] = %.9g after two backwards, expected %.9g\n",
                        label, (long long)i, (double)*slot, w);
            bad++;
        }
    }
    st_test_failures += bad;
    free(dy);
    free(dx1);
    free(pre);
    free(pg1);
    free(want);
    return bad + cmp;
}

#endif
