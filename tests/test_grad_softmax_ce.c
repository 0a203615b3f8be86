/* Fused softmax cross-entropy: gradient check (ignored rows, 2-D and 3-D,
 * batch of 1, logits consumed twice), loss against a double reference
 * (including huge logits), the all-ignored case, the backward from
 * st_graph_backward, thread-independent loss, a NaN logit giving a NaN loss,
 * and target/shape errors. */
#include <omp.h>

#include "gradcheck.h"
#include "layers/layers.h"

/* Targets in [0, V), with every third row (from `skip`) set to ignore. */
static void fill_targets(st_tensor *t, int64_t V, int32_t ignore, int skip, uint64_t seed) {
    st_rng r = st_rng_make(seed, 6);
    for (int64_t i = 0; i < t->count; i++)
        t->idata[i] = skip && i % 3 == skip - 1 ? ignore : (int32_t)st_rng_below(&r, (uint64_t)V);
}

/* The reference: mean over valid rows of logsumexp(x) - x[t], in double. */
static double ce_ref(const float *x, const int32_t *t, int64_t R, int64_t V, int32_t ignore) {
    double sum = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == ignore) continue;
        const float *xr = x + r * V;
        double m = xr[0], s = 0;
        for (int64_t v = 1; v < V; v++)
            m = xr[v] > m ? xr[v] : m;
        for (int64_t v = 0; v < V; v++)
            s += exp(xr[v] - m);
        sum += m + log(s) - xr[t[r]];
        n++;
    }
    return n ? sum / (double)n : 0.0;
}

static void check_ce(int ndim, const int64_t *xs, int32_t ignore, int skip, bool twice) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *h, *t, *t2, *l1, *l2, *y;
    CHECK_OK(st_graph_param(&g, "logits", ndim, xs, ST_INIT_UNIFORM, 3.0f, false, &x));
    CHECK_OK(st_graph_input(&g, "targets", ST_I32, ndim - 1, xs, &t));
    if (twice) { /* h feeds two losses: the second in backward order adds (in_acc) */
        CHECK_OK(st_graph_input(&g, "targets2", ST_I32, ndim - 1, xs, &t2));
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_softmax_ce(&g, "ce1", h, t, ignore, &l1));
        CHECK_OK(st_softmax_ce(&g, "ce2", h, t2, ignore, &l2));
        CHECK(g.loss == l2, "softmax_ce sets g->loss");
        CHECK_OK(st_add(&g, "sum", l1, l2, &y));
    } else {
        CHECK_OK(st_softmax_ce(&g, "ce", x, t, ignore, &y));
        CHECK(g.loss == y && y->ndim == 1 && y->shape[0] == 1, "loss (1), set as g->loss");
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 14);
    const int64_t V = xs[ndim - 1], R = x->count / V;
    fill_targets(t, V, ignore, skip, (uint64_t)R);
    if (twice) fill_targets(t2, V, ignore, skip ? 3 - skip + 1 : 0, (uint64_t)R + 1);
    if (!twice) {
        CHECK_OK(st_graph_forward(&g));
        CHECK_CLOSE(y->data[0], ce_ref(x->data, t->idata, R, V, ignore), 1e-5);
    }
    char label[128];
    snprintf(label, sizeof label, "softmax_ce R%lld V%lld ignore%d skip%d twice%d", (long long)R,
             (long long)V, ignore, skip, twice);
    gradcheck(label, &g, y, p.t, p.n, 41, 128, 1e-2, 1e-2, 1e-4);
    if (!twice && skip) { /* ignored rows get exactly zero gradient */
        CHECK_OK(st_graph_forward(&g));
        CHECK_OK(st_graph_backward(&g, 1.0f));
        int64_t bad = 0;
        for (int64_t r = 0; r < R; r++)
            if (t->idata[r] == ignore)
                for (int64_t v = 0; v < V; v++)
                    bad += x->grad[r * V + v] != 0.0f;
        CHECK(bad == 0, "%lld gradients of ignored rows are not 0", (long long)bad);
    }
    st_graph_free(&g);
    st_params_free(&p);
}

/* st_graph_backward from g->loss with a seed: dlogits = seed (softmax - onehot) / n_valid. */
static void check_backward_formula(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {6, 11};
    st_tensor *x, *t, *y;
    CHECK_OK(st_graph_param(&g, "logits", 2, xs, ST_INIT_UNIFORM, 4.0f, false, &x));
    CHECK_OK(st_graph_input(&g, "targets", ST_I32, 1, xs, &t));
    CHECK_OK(st_softmax_ce(&g, "ce", x, t, ST_IGNORE_INDEX, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 15);
    fill_targets(t, 11, ST_IGNORE_INDEX, 2, 3); /* rows 1 and 4 ignored: 4 valid */
    CHECK_OK(st_graph_forward(&g));
    memset(p.grad, 0, (size_t)p.arena_count * sizeof(float));
    CHECK_OK(st_graph_backward(&g, 0.5f));
    for (int64_t r = 0; r < 6; r++) {
        const float *xr = x->data + r * 11;
        double m = xr[0], s = 0;
        for (int v = 1; v < 11; v++)
            m = xr[v] > m ? xr[v] : m;
        for (int v = 0; v < 11; v++)
            s += exp(xr[v] - m);
        for (int v = 0; v < 11; v++) {
            double ref =
                t->idata[r] == ST_IGNORE_INDEX ? 0.0 : 0.5 * (exp(xr[v] - m) / s - (v == t->idata[r])) / 4.0;
            CHECK_CLOSE(x->grad[r * 11 + v], ref, 1e-6);
        }
    }
    st_graph_free(&g);
    st_params_free(&p);
}

/* Huge logits (exp would overflow without the max shift), the all-ignored
 * batch (loss 0, gradient 0), and a loss that does not depend on threads. */
static void check_edge_cases(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[3] = {3, 50, 97};
    st_tensor *x, *t, *y;
    CHECK_OK(st_graph_param(&g, "logits", 3, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    CHECK_OK(st_graph_input(&g, "targets", ST_I32, 2, xs, &t));
    CHECK_OK(st_softmax_ce(&g, "ce", x, t, ST_IGNORE_INDEX, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 16);
    fill_targets(t, 97, ST_IGNORE_INDEX, 1, 4);
    for (int64_t i = 0; i < x->count; i++)
        x->data[i] = 1000.0f + 30.0f * x->data[i];
    CHECK_OK(st_graph_forward(&g));
    const double ref = ce_ref(x->data, t->idata, 150, 97, ST_IGNORE_INDEX);
    CHECK(isfinite(y->data[0]), "huge logits gave %g", (double)y->data[0]);
    CHECK_CLOSE(y->data[0], ref, 1e-4 * fabs(ref));
    int saved = omp_get_max_threads();
    float first = y->data[0];
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        CHECK_OK(st_graph_forward(&g));
        CHECK(y->data[0] == first, "%d threads: loss %.9g vs %.9g", threads, (double)y->data[0],
              (double)first);
    }
    omp_set_num_threads(saved);
    /* A NaN logit of a counted row, first in the row, in the lanes or in the
     * tail past them, makes the loss NaN. */
    int64_t r = 0;
    while (t->idata[r] == ST_IGNORE_INDEX) r++;
    const int64_t cols[3] = {0, 40, 96};
    for (int k = 0; k < 3; k++) {
        const int64_t at = r * 97 + cols[k];
        const float keep = x->data[at];
        x->data[at] = NAN;
        CHECK_OK(st_graph_forward(&g));
        CHECK(isnan(y->data[0]), "a NaN logit at column %lld gave loss %g", (long long)cols[k],
              (double)y->data[0]);
        x->data[at] = keep;
    }
    for (int64_t i = 0; i < t->count; i++)
        t->idata[i] = ST_IGNORE_INDEX;
    CHECK_OK(st_graph_forward(&g));
    CHECK(y->data[0] == 0.0f, "all ignored: loss %g", (double)y->data[0]);
    for (int64_t i = 0; i < x->count; i++)
        x->grad[i] = 1.0f; /* a parameter input accumulates: nothing may be added */
    CHECK_OK(st_graph_backward(&g, 1.0f));
    int64_t bad = 0;
    for (int64_t i = 0; i < x->count; i++)
        bad += x->grad[i] != 1.0f;
    CHECK(bad == 0, "all ignored: %lld gradients changed", (long long)bad);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[3] = {2, 4, 10}, bad_ts[2] = {4, 2}, flat[1] = {8};
    st_tensor *x, *t, *tf, *tb, *tflat, *y;
    CHECK_OK(st_graph_input(&g, "logits", ST_F32, 3, xs, &x));
    CHECK_OK(st_graph_input(&g, "targets", ST_I32, 2, xs, &t));
    CHECK_OK(st_graph_input(&g, "ftargets", ST_F32, 2, xs, &tf));
    CHECK_OK(st_graph_input(&g, "btargets", ST_I32, 2, bad_ts, &tb));
    CHECK_OK(st_graph_input(&g, "flat", ST_I32, 1, flat, &tflat));
    CHECK_FAILS(st_softmax_ce(&g, "ce", x, tf, ST_IGNORE_INDEX, &y), ST_ERR_ARG, "int32");
    CHECK_FAILS(st_softmax_ce(&g, "ce", x, tb, ST_IGNORE_INDEX, &y), ST_ERR_SHAPE, "btargets is (4, 2)");
    CHECK_FAILS(st_softmax_ce(&g, "ce", x, tflat, ST_IGNORE_INDEX, &y), ST_ERR_SHAPE, "logits (2, 4, 10)");
    CHECK_OK(st_softmax_ce(&g, "ce", x, t, -1, &y)); /* a custom ignore_index */
    CHECK_OK(st_graph_finalize(&g));
    t->idata[5] = 10;
    CHECK_FAILS(st_graph_forward(&g), ST_ERR_ARG, "softmax_ce ce: target 10 at position [1, 1] of targets");
    t->idata[5] = ST_IGNORE_INDEX; /* not the ignore_index of this node */
    CHECK_FAILS(st_graph_forward(&g), ST_ERR_ARG, "target -100 at position [1, 1]");
    t->idata[5] = -1;
    CHECK_OK(st_graph_forward(&g));
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[3] = {2, 3, 5}, b[2] = {7, 13}, c[3] = {1, 5, 31}, d[3] = {2, 4, 6};
    check_ce(3, a, ST_IGNORE_INDEX, 0, false);
    check_ce(3, a, ST_IGNORE_INDEX, 2, false);
    check_ce(2, b, ST_IGNORE_INDEX, 1, false);
    check_ce(3, c, ST_IGNORE_INDEX, 3, false); /* batch of 1 */
    check_ce(2, b, 0, 2, false);               /* ignore_index inside [0, V) */
    check_ce(3, d, ST_IGNORE_INDEX, 1, true);
    check_backward_formula();
    check_edge_cases();
    check_errors();
    return st_test_finish("test_grad_softmax_ce");
}
