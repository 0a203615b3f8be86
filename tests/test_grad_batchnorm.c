/* Batchnorm: forward and the running-statistics update against a double
 * reference, finite-difference gradients in training and eval mode for (B, C)
 * and NHWC inputs, the write/add contract, the same bits with 1 and 2
 * threads, the batch-of-one error in training, a NaN input through the fused
 * ReLU (its channel NaN, not 0), build errors; sync batch-norm's
 * reductions through a hook that doubles every sum, as if a second rank held
 * the same rows (the real multi-rank check is tests/mpi/sync_bn_check.c). */
#include <omp.h>

#include "layercheck.h"
#include "layers/layers.h"

typedef struct bn_case {
    int ndim;
    int64_t shape[4];
    bool training;
    float eps, momentum;
    float offset; /* added to x: a mean far from 0 relative to the spread */
    bool relu;    /* the fused st_batchnorm_relu */
} bn_case;

typedef struct bn_net {
    st_params p;
    st_graph g;
    st_tensor *x, *y, *w, *b, *rm, *rv;
} bn_net;

static void bn_build(bn_net *n, const bn_case *c, uint64_t seed) {
    memset(n, 0, sizeof *n);
    st_graph_init(&n->g, &n->p);
    CHECK_OK(st_graph_param(&n->g, "x", c->ndim, c->shape, ST_INIT_UNIFORM, 1.0f, false, &n->x));
    if (c->relu) CHECK_OK(st_batchnorm_relu(&n->g, "bn", n->x, c->eps, c->momentum, &n->y));
    else CHECK_OK(st_batchnorm(&n->g, "bn", n->x, c->eps, c->momentum, &n->y));
    CHECK_OK(st_graph_finalize(&n->g));
    st_params_init(&n->p, seed);
    n->w = st_params_find(&n->p, "bn.weight");
    n->b = st_params_find(&n->p, "bn.bias");
    n->rm = st_params_find(&n->p, "bn.running_mean");
    n->rv = st_params_find(&n->p, "bn.running_var");
    n->g.training = c->training;
    const int64_t C = c->shape[c->ndim - 1];
    st_rng r = st_rng_make(seed, 2);
    /* per-channel offsets and spreads, so centring and scaling both matter */
    for (int64_t i = 0; i < n->x->count; i++) {
        int64_t ch = i % C;
        n->x->data[i] = n->x->data[i] * (0.5f + 0.3f * (float)ch) + 0.4f * (float)ch - 0.5f;
        if (c->offset != 0.0f) n->x->data[i] = c->offset + 1e-3f * c->offset * n->x->data[i];
    }
    for (int64_t ch = 0; ch < C; ch++) {
        n->w->data[ch] = 1.0f + 0.5f * (2.0f * st_rng_uniform(&r) - 1.0f);
        n->b->data[ch] = 0.3f * (2.0f * st_rng_uniform(&r) - 1.0f);
        if (!c->training) {
            n->rm->data[ch] = 0.4f * (float)ch - 0.3f;
            n->rv->data[ch] = 0.5f + st_rng_uniform(&r);
        }
    }
}

static void bn_free(bn_net *n) {
    st_graph_free(&n->g);
    st_params_free(&n->p);
}

static void check_bn(bn_case c) {
    char label[128];
    int64_t C = c.shape[c.ndim - 1];
    int64_t count = st_shape_count(c.ndim, c.shape), M = count / C;
    snprintf(label, sizeof label, "batchnorm%s ndim%d M%lld C%lld %s eps%g mom%g offset%g", c.relu ? "_relu" : "",
             c.ndim, (long long)M, (long long)C, c.training ? "train" : "eval", (double)c.eps,
             (double)c.momentum, (double)c.offset);
    bn_net n;
    bn_build(&n, &c, 5);
    CHECK(n.w && n.b && n.rm && n.rv, "%s: parameters and buffers declared", label);
    CHECK(n.rm->kind == ST_TENSOR_BUFFER && n.rv->kind == ST_TENSOR_BUFFER && !n.w->decay && !n.b->decay,
          "%s: kinds and decay", label);

    /* one forward against double */
    double *rm0 = malloc((size_t)C * sizeof(double)), *rv0 = malloc((size_t)C * sizeof(double));
    for (int64_t ch = 0; ch < C; ch++) {
        rm0[ch] = n.rm->data[ch];
        rv0[ch] = n.rv->data[ch];
    }
    CHECK_OK(st_graph_forward(&n.g));
    double *ref = malloc((size_t)count * sizeof(double));
    double *want_rm = malloc((size_t)C * sizeof(double)), *want_rv = malloc((size_t)C * sizeof(double));
    for (int64_t ch = 0; ch < C; ch++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < M; i++)
            mean += n.x->data[i * C + ch];
        mean /= (double)M;
        for (int64_t i = 0; i < M; i++)
            var += (n.x->data[i * C + ch] - mean) * (n.x->data[i * C + ch] - mean);
        var /= (double)M;
        const double m = c.momentum;
        if (c.training) {
            want_rm[ch] = (1 - m) * rm0[ch] + m * mean;
            want_rv[ch] = (1 - m) * rv0[ch] + m * var * (double)M / (double)(M - 1);
        } else {
            mean = want_rm[ch] = rm0[ch];
            var = want_rv[ch] = rv0[ch];
        }
        for (int64_t i = 0; i < M; i++) {
            ref[i * C + ch] =
                (n.x->data[i * C + ch] - mean) / sqrt(var + c.eps) * n.w->data[ch] + n.b->data[ch];
            if (c.relu && ref[i * C + ch] < 0) ref[i * C + ch] = 0;
        }
    }
    /* with an offset, the float mean itself is off by ~6e-8 |offset| (spread ~1e-3 |offset|) */
    lc_compare(label, "y", n.y->data, ref, count, 1e-5, c.offset != 0.0f ? 5e-4 : 2e-5);
    lc_compare(label, "running_mean", n.rm->data, want_rm, C, 1e-6, 1e-7);
    lc_compare(label, "running_var", n.rv->data, want_rv, C, 1e-6, 1e-7);
    free(ref);
    free(rm0);
    free(rv0);
    free(want_rm);
    free(want_rv);

    if (c.offset != 0.0f) { /* finite differences at this scale say nothing; forward only */
        bn_free(&n);
        return;
    }
    st_tensor *wrt[3] = {n.x, n.w, n.b};
    gradcheck(label, &n.g, n.y, wrt, 3, 11, 64, 3e-3, 2e-2, 2e-3);
    lc_acc_check(label, &n.g, &n.g.nodes[0], 31);
    bn_free(&n);
}

/* Forward and backward give the same bits with 1 and 2 threads. */
static void check_threads(void) {
    bn_case c = {4, {4, 9, 7, 6}, true, 1e-5f, 0.1f, 0.0f, false};
    float *out[2][4];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run + 1);
        bn_net n;
        bn_build(&n, &c, 9);
        CHECK_OK(st_graph_forward(&n.g));
        st_rng r = st_rng_make(4, 4);
        gc_fill(n.y->grad, n.y->count, &r, 1.0f);
        memset(n.p.grad, 0, (size_t)n.p.arena_count * sizeof(float));
        CHECK_OK(n.g.nodes[0].ops->backward(&n.g.nodes[0], &n.g));
        st_tensor *t[4] = {n.y, n.x, n.w, n.b};
        for (int k = 0; k < 4; k++) {
            const float *src = k == 0 ? t[k]->data : t[k]->grad;
            out[run][k] = malloc((size_t)t[k]->count * sizeof(float));
            memcpy(out[run][k], src, (size_t)t[k]->count * sizeof(float));
        }
        if (run == 1)
            for (int k = 0; k < 4; k++) {
                CHECK(memcmp(out[0][k], out[1][k], (size_t)t[k]->count * sizeof(float)) == 0,
                      "batchnorm: result %d differs between 1 and 2 threads", k);
                free(out[0][k]);
                free(out[1][k]);
            }
        bn_free(&n);
    }
    omp_set_num_threads(omp_get_num_procs());
}

/* The allreduce_sum hook of a two-rank job whose other rank has the same data. */
static st_status twice(void *ctx, double *buf, int64_t n, const char *name) {
    int *calls = ctx;
    ++*calls;
    CHECK(name && strstr(name, "sync batch-norm bn.out"), "the reduction's name '%s'", name ? name : "(null)");
    for (int64_t i = 0; i < n; i++)
        buf[i] *= 2;
    return ST_OK;
}

static st_status lonely(void *ctx, double *buf, int64_t n, const char *name) { return ST_OK; }

static st_status broken(void *ctx, double *buf, int64_t n, const char *name) {
    return st_fail(ST_ERR_IO, "all-reduce '%s' failed", name);
}

/* Doubled sums: the same mean, variance and gradients as one rank alone,
 * but running_var's unbiased correction uses the global count 2M. */
static void check_sync_twice(bn_case c) {
    const int64_t C = c.shape[c.ndim - 1], M = st_shape_count(c.ndim, c.shape) / C;
    char label[96];
    snprintf(label, sizeof label, "sync batchnorm%s M%lld C%lld, doubled sums", c.relu ? "_relu" : "",
             (long long)M, (long long)C);
    bn_net a, b; /* a: one rank; b: "two" */
    bn_build(&a, &c, 3);
    bn_build(&b, &c, 3);
    int calls = 0;
    b.g.allreduce_sum = twice;
    b.g.allreduce_ctx = &calls;
    float *rv0 = malloc((size_t)C * sizeof(float));
    memcpy(rv0, a.rv->data, (size_t)C * sizeof(float));
    CHECK_OK(st_graph_forward(&a.g));
    CHECK_OK(st_graph_forward(&b.g));
    CHECK(calls == 2, "%s: %d reductions in forward, expected 2", label, calls);
    double *want = malloc((size_t)(a.y->count > 2 * C ? a.y->count : 2 * C) * sizeof(double));
    for (int64_t i = 0; i < a.y->count; i++) want[i] = a.y->data[i];
    lc_compare(label, "y", b.y->data, want, a.y->count, 1e-5, 1e-6);
    for (int64_t i = 0; i < 2 * C; i++) want[i] = a.g.nodes[0].saved[i];
    lc_compare(label, "mean, rstd", b.g.nodes[0].saved, want, 2 * C, 1e-6, 1e-7);
    for (int64_t ch = 0; ch < C; ch++) want[ch] = a.rm->data[ch];
    lc_compare(label, "running_mean", b.rm->data, want, C, 1e-6, 1e-7);
    const double mom = c.momentum;
    for (int64_t ch = 0; ch < C; ch++) { /* the biased variance from rstd, unbiased with 2M */
        const double rs = a.g.nodes[0].saved[C + ch], var = 1.0 / (rs * rs) - (double)c.eps;
        want[ch] = (1 - mom) * rv0[ch] + mom * var * (2.0 * (double)M) / (2.0 * (double)M - 1.0);
    }
    lc_compare(label, "running_var (global count)", b.rv->data, want, C, 1e-5, 1e-6);

    st_rng r = st_rng_make(8, 4);
    gc_fill(a.y->grad, a.y->count, &r, 1.0f);
    memcpy(b.y->grad, a.y->grad, (size_t)a.y->count * sizeof(float));
    memset(a.p.grad, 0, (size_t)a.p.arena_count * sizeof(float));
    memset(b.p.grad, 0, (size_t)b.p.arena_count * sizeof(float));
    calls = 0;
    CHECK_OK(a.g.nodes[0].ops->backward(&a.g.nodes[0], &a.g));
    CHECK_OK(b.g.nodes[0].ops->backward(&b.g.nodes[0], &b.g));
    CHECK(calls == 1, "%s: %d reductions in backward, expected 1", label, calls);
    st_tensor *ta[3] = {a.x, a.w, a.b}, *tb[3] = {b.x, b.w, b.b};
    const char *what[3] = {"dx", "dweight", "dbias"};
    for (int k = 0; k < 3; k++) {
        double *ref = malloc((size_t)ta[k]->count * sizeof(double));
        for (int64_t i = 0; i < ta[k]->count; i++) ref[i] = ta[k]->grad[i];
        lc_compare(label, what[k], tb[k]->grad, ref, ta[k]->count, 1e-4, 1e-5);
        free(ref);
    }
    /* eval: running statistics, no reduction */
    a.g.training = b.g.training = false;
    calls = 0;
    CHECK_OK(st_graph_forward(&b.g));
    CHECK_OK(b.g.nodes[0].ops->backward(&b.g.nodes[0], &b.g));
    CHECK(calls == 0, "%s: eval made %d reductions", label, calls);
    free(want);
    free(rv0);
    bn_free(&a);
    bn_free(&b);
}

/* One row per rank is fine when the ranks together have more; alone it is
 * the batch-of-one error; a failed reduction is returned. */
static void check_sync_errors(void) {
    bn_case c = {2, {1, 3}, true, 1e-5f, 0.1f, 0.0f, false};
    bn_net n;
    int calls = 0;
    bn_build(&n, &c, 4);
    n.g.allreduce_ctx = &calls;
    n.g.allreduce_sum = twice;
    CHECK_OK(st_graph_forward(&n.g));
    for (int64_t ch = 0; ch < 3; ch++) /* two equal rows: variance 0 */
        CHECK_CLOSE(n.g.nodes[0].saved[3 + ch], 1.0 / sqrt(1e-5), 1e-2);
    n.g.allreduce_sum = lonely;
    CHECK_FAILS(st_graph_forward(&n.g), ST_ERR_SHAPE, "over all ranks");
    n.g.allreduce_sum = broken;
    CHECK_FAILS(st_graph_forward(&n.g), ST_ERR_IO, "sync batch-norm bn.out");
    bn_free(&n);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s1[1] = {5}, s2[2] = {1, 4};
    st_tensor *x1, *x2, *y;
    CHECK_OK(st_graph_input(&g, "x1", ST_F32, 1, s1, &x1));
    CHECK_OK(st_graph_input(&g, "x2", ST_F32, 2, s2, &x2));
    CHECK_FAILS(st_batchnorm(&g, "bn", x1, 1e-5f, 0.1f, &y), ST_ERR_SHAPE, "at least 2");
    CHECK_FAILS(st_batchnorm(&g, "bn", x2, 0.0f, 0.1f, &y), ST_ERR_ARG, "eps");
    CHECK_FAILS(st_batchnorm(&g, "bn", x2, 1e-5f, 1.5f, &y), ST_ERR_ARG, "momentum");
    /* one row per channel: fine in eval, an error in training (as PyTorch) */
    CHECK_OK(st_batchnorm(&g, "bn", x2, 1e-5f, 0.1f, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    g.training = false;
    CHECK_OK(st_graph_forward(&g));
    g.training = true;
    CHECK_FAILS(st_graph_forward(&g), ST_ERR_SHAPE, "more than one value");
    st_graph_free(&g);
    st_params_free(&p);
}

/* One NaN input in training makes its channel's statistics NaN: the fused
 * ReLU keeps that channel NaN (0 would hide it, the loss staying finite), and
 * backward passes its gradients on; the other channels are untouched. */
static void check_nan(void) {
    const bn_case c = {2, {6, 3}, true, 1e-5f, 0.1f, 0.0f, true};
    bn_net n;
    bn_build(&n, &c, 5);
    n.x->data[3 * 2 + 1] = NAN; /* row 2, channel 1 */
    CHECK_OK(st_graph_forward(&n.g));
    float R[18];
    for (int i = 0; i < 18; i++)
        R[i] = 1.0f;
    CHECK_OK(gc_backward(&n.g, n.y, R));
    for (int i = 0; i < 18; i++) {
        const bool nan_ch = i % 3 == 1;
        CHECK(nan_ch ? isnan(n.y->data[i]) : isfinite(n.y->data[i]),
              "batchnorm_relu with a NaN in channel 1: y[%d] = %g", i, (double)n.y->data[i]);
        CHECK(nan_ch ? isnan(n.x->grad[i]) : isfinite(n.x->grad[i]),
              "batchnorm_relu with a NaN in channel 1: dx[%d] = %g", i, (double)n.x->grad[i]);
    }
    bn_free(&n);
}

/* Row 0 an outlier (1e4 in a channel of values in [-1, 1]: a sentinel): the
 * statistics about row 0 would cancel (E[d^2] and E[d]^2 both near 1e8 in
 * float sums, the variance near 1e3); the forward's mean and variance
 * against double's, through y and the running variance. */
static void check_outlier(void) {
    const int64_t M = 131072, C = 3; /* (a cnn's batch of 128 32x32 maps: the variance 1e8 / M) */
    const bn_case c = {2,    {M, C}, true, 1e-5f,
                       1.0f, 0.0f,   false}; /* momentum 1: the running variance is the batch's */
    bn_net n;
    bn_build(&n, &c, 11);
    st_rng r = st_rng_make(11, 3);
    for (int64_t i = 0; i < M * C; i++)
        n.x->data[i] = 2.0f * st_rng_uniform(&r) - 1.0f;
    n.x->data[0] = 1e4f;  /* row 0, channel 0 */
    n.x->data[1] = -3e4f; /* row 0, channel 1 */
    CHECK_OK(st_graph_forward(&n.g));
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < M; i++)
            s += n.x->data[i * C + ch];
        const double mu = s / (double)M;
        for (int64_t i = 0; i < M; i++)
            ss += (n.x->data[i * C + ch] - mu) * (n.x->data[i * C + ch] - mu);
        const double var = ss / (double)M, unb = ss / (double)(M - 1);
        CHECK(fabs(n.rv->data[ch] - unb) <= 1e-4 * unb,
              "batchnorm, row 0 an outlier: channel %lld's variance %.9g, not %.9g", (long long)ch,
              (double)n.rv->data[ch], unb);
        const double y1 = (n.x->data[C + ch] - mu) / sqrt(var + 1e-5) * n.w->data[ch] + n.b->data[ch];
        CHECK(fabs(n.y->data[C + ch] - y1) <= 1e-4 * (1 + fabs(y1)),
              "batchnorm, row 0 an outlier: y[1, %lld] %.9g, not %.9g", (long long)ch,
              (double)n.y->data[C + ch], y1);
    }
    bn_free(&n);
}

int main(void) {
    check_bn((bn_case){2, {4, 5}, true, 1e-5f, 0.1f, 0.0f, false});
    check_bn((bn_case){2, {2, 3}, true, 1e-3f, 0.3f, 0.0f, false});       /* two rows */
    check_bn((bn_case){4, {2, 3, 3, 4}, true, 1e-5f, 0.1f, 0.0f, false}); /* NHWC */
    check_bn((bn_case){4, {1, 2, 3, 3}, true, 1e-5f, 0.1f, 0.0f, false}); /* batch 1, odd C */
    check_bn((bn_case){3, {3, 5, 7}, true, 1e-5f, 0.2f, 0.0f, false});
    check_bn((bn_case){2, {4, 5}, false, 1e-5f, 0.1f, 0.0f, false});
    check_bn((bn_case){4, {3, 2, 2, 5}, false, 1e-3f, 0.1f, 0.0f, false});
    check_bn((bn_case){2, {1, 7}, false, 1e-5f, 0.1f, 0.0f, false});         /* eval with one row */
    check_bn((bn_case){2, {200, 3}, true, 1e-5f, 0.1f, 0.0f, false});        /* more rows than blocks */
    check_bn((bn_case){4, {8, 5, 5, 3}, true, 1e-5f, 0.1f, 1000.0f, false}); /* mean 1000, spread 1 */
    check_bn((bn_case){2, {300, 4}, true, 1e-5f, 0.1f, -3e4f, false});
    check_bn((bn_case){2, {6, 5}, true, 1e-5f, 0.1f, 0.0f, true}); /* fused ReLU */
    check_bn((bn_case){4, {2, 3, 3, 4}, true, 1e-5f, 0.1f, 0.0f, true});
    check_bn((bn_case){4, {3, 2, 2, 5}, false, 1e-3f, 0.1f, 0.0f, true});
    check_threads();
    check_nan();
    check_outlier();
    check_errors();
    check_sync_twice((bn_case){4, {2, 3, 3, 4}, true, 1e-5f, 0.1f, 0.0f, false});
    check_sync_twice((bn_case){2, {200, 3}, true, 1e-5f, 0.2f, 0.0f, true});
    check_sync_errors();
    return st_test_finish("test_grad_batchnorm");
}
