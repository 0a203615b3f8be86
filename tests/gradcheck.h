/* Finite-difference gradient checks for layers.
 *
 * The check builds L = sum(y * R) for a random R, runs the graph's backward
 * from y with dL/dy = R, and compares each analytic gradient with a central
 * difference of L (accumulated in double). Inputs that need a gradient are
 * declared as parameters (st_graph_param), so they are in the parameter arena
 * and the layer sees requires_grad. The tolerance is loose enough for float
 * but fails on a wrong sign, scale or index. */
#ifndef ST_TESTS_GRADCHECK_H
#define ST_TESTS_GRADCHECK_H

#include <omp.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "model/graph.h"

static inline void gc_fill(float *x, int64_t n, st_rng *r, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * (2.0f * st_rng_uniform(r) - 1.0f);
}

static inline double gc_loss(st_graph *g, st_tensor *y, const float *R) {
    if (st_graph_forward(g) != ST_OK) return NAN;
    double L = 0;
    for (int64_t i = 0; i < y->count; i++) L += (double)y->data[i] * R[i];
    return L;
}

/* Backward from y with dL/dy = R (no loss node needed). */
static inline st_status gc_backward(st_graph *g, st_tensor *y, const float *R) {
    memset(g->params->grad, 0, (size_t)g->params->arena_count * sizeof(float));
    memcpy(y->grad, R, (size_t)y->count * sizeof(float));
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        st_node *n = &g->nodes[i];
        if (!n->out->requires_grad) continue;
        st_status s = n->ops->backward(n, g);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

/* Check d(sum(y*R))/d(t) for up to `samples` elements of every tensor in wrt.
 * Returns the number of mismatches (each is also reported). */
static inline int gradcheck(const char *label, st_graph *g, st_tensor *y, st_tensor **wrt, int n_wrt,
                            uint64_t seed, int samples, double eps, double rtol, double atol) {
    int bad = 0;
    st_rng r = st_rng_make(seed, 99);
    float *R = malloc((size_t)y->count * sizeof(float));
    gc_fill(R, y->count, &r, 1.0f);
    if (gc_loss(g, y, R) != gc_loss(g, y, R)) {
        fprintf(stderr, "FAIL %s: forward gave NaN\n", label);
        free(R);
        return 1;
    }
    st_status s = gc_backward(g, y, R);
    if (s != ST_OK) {
        fprintf(stderr, "FAIL %s: backward: %s\n", label, st_last_error());
        free(R);
        return 1;
    }
    for (int w = 0; w < n_wrt; w++) {
        st_tensor *t = wrt[w];
        float *ana = malloc((size_t)t->count * sizeof(float));
        memcpy(ana, t->grad, (size_t)t->count * sizeof(float));
        int n = samples < t->count ? samples : (int)t->count;
        for (int k = 0; k < n; k++) {
            int64_t i = n == t->count ? k : (int64_t)st_rng_below(&r, (uint64_t)t->count);
            float x0 = t->data[i];
            double h = eps * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
            t->data[i] = (float)(x0 + h);
            double lp = gc_loss(g, y, R);
            t->data[i] = (float)(x0 - h);
            double lm = gc_loss(g, y, R);
            t->data[i] = x0;
            double num = (lp - lm) / (2 * h);
            double a = ana[i];
            double tol = atol + rtol * fmax(fabs(a), fabs(num));
            if (!(fabs(a - num) <= tol)) {
                if (bad < 10)
                    fprintf(stderr, "FAIL %s: d/d %s[%lld]: analytic %.6g, numeric %.6g\n", label,
                            t->name, (long long)i, a, num);
                bad++;
            }
        }
        free(ana);
    }
    gc_loss(g, y, R); /* leave the graph's activations consistent with the data */
    free(R);
    st_test_failures += bad;
    return bad;
}

/* Forward and backward from y with a random dL/dy on 1, 2 and 3 threads: the
 * `count` floats at `grad` must be the same bits every time (our reductions
 * have a fixed order, whatever the thread count). */
static inline void gc_same_bits_across_threads(const char *label, st_graph *g, st_tensor *y, const float *grad,
                                               int64_t count, uint64_t seed) {
    float *R = malloc((size_t)y->count * sizeof(float)), *ref = malloc((size_t)count * sizeof(float));
    st_rng r = st_rng_make(seed, seed);
    gc_fill(R, y->count, &r, 1.0f);
    int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        CHECK_OK(st_graph_forward(g));
        CHECK_OK(gc_backward(g, y, R));
        if (threads == 1)
            memcpy(ref, grad, (size_t)count * sizeof(float));
        else
            CHECK(memcmp(ref, grad, (size_t)count * sizeof(float)) == 0, "%s: %d threads differ", label, threads);
    }
    omp_set_num_threads(saved);
    free(R);
    free(ref);
}

#endif
