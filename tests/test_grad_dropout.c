/* Dropout: gradient check in training and eval (the mask recomputed in
 * backward), kept fraction and scaling, eval and p = 0 identity, masks that
 * differ per seed and per node, NaN and inf not dropped to 0, and bad p. */
#include "gradcheck.h"
#include "layers/layers.h"

static void check_dropout(int ndim, const int64_t *xs, float p_drop, bool training, bool twice) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *h, *y1, *y2, *y;
    CHECK_OK(st_graph_param(&g, "x", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (twice) { /* two dropout nodes on h: different masks, and in_acc on h */
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_dropout(&g, "d1", h, p_drop, &y1));
        CHECK_OK(st_dropout(&g, "d2", h, p_drop, &y2));
        CHECK_OK(st_add(&g, "sum", y1, y2, &y));
    } else {
        CHECK_OK(st_dropout(&g, "d", x, p_drop, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 10);
    g.training = training;
    g.dropout_seed = 1234;
    char label[128];
    snprintf(label, sizeof label, "dropout n%lld p%.2f train%d twice%d", (long long)x->count, (double)p_drop,
             training, twice);
    gradcheck(label, &g, y, p.t, p.n, 31, 96, 1e-2, 1e-2, 1e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

/* Statistics on a large tensor: the kept fraction is near 1-p, kept values are
 * x/(1-p), dropped ones 0; eval is the identity; masks change with the seed. */
static void check_values(float p_drop) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {200, 501};
    st_tensor *x, *y, *y2;
    CHECK_OK(st_graph_input(&g, "x", ST_F32, 2, xs, &x));
    CHECK_OK(st_dropout(&g, "d", x, p_drop, &y));
    CHECK_OK(st_dropout(&g, "d2", x, p_drop, &y2));
    CHECK_OK(st_graph_finalize(&g));
    st_rng r = st_rng_make(4, 4);
    for (int64_t i = 0; i < x->count; i++)
        x->data[i] = 0.5f + st_rng_uniform(&r); /* never 0 */
    const int64_t N = x->count;
    float *first = malloc((size_t)N * sizeof(float));

    g.training = true;
    g.dropout_seed = 77;
    CHECK_OK(st_graph_forward(&g));
    int64_t kept = 0, bad = 0, same_as_d2 = 0;
    for (int64_t i = 0; i < N; i++) {
        if (y->data[i] != 0.0f) {
            kept++;
            double ref = (double)x->data[i] / (1.0 - p_drop);
            bad += !(fabs(y->data[i] - ref) <= 1e-6 * ref);
        }
        same_as_d2 += (y->data[i] != 0.0f) == (y2->data[i] != 0.0f);
    }
    double frac = (double)kept / (double)N;
    CHECK(fabs(frac - (1.0 - p_drop)) <= 0.01, "p %g: kept fraction %.4f", (double)p_drop, frac);
    CHECK(bad == 0, "p %g: %lld kept values are not x/(1-p)", (double)p_drop, (long long)bad);
    if (p_drop > 0) CHECK(same_as_d2 < N, "two dropout nodes drew the same mask");
    memcpy(first, y->data, (size_t)N * sizeof(float));
    CHECK_OK(st_graph_forward(&g));
    CHECK(memcmp(first, y->data, (size_t)N * sizeof(float)) == 0, "same seed, different mask");
    g.dropout_seed = 78;
    CHECK_OK(st_graph_forward(&g));
    if (p_drop > 0)
        CHECK(memcmp(first, y->data, (size_t)N * sizeof(float)) != 0, "another seed, same mask");
    else
        CHECK(memcmp(x->data, y->data, (size_t)N * sizeof(float)) == 0, "p = 0 is not the identity");

    g.training = false;
    CHECK_OK(st_graph_forward(&g));
    CHECK(memcmp(x->data, y->data, (size_t)N * sizeof(float)) == 0, "eval is not the identity");
    free(first);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {2, 5};
    st_tensor *x, *ix, *y;
    CHECK_OK(st_graph_input(&g, "x", ST_F32, 2, xs, &x));
    CHECK_OK(st_graph_input(&g, "ix", ST_I32, 2, xs, &ix));
    CHECK_FAILS(st_dropout(&g, "drop", x, 1.0f, &y), ST_ERR_ARG, "dropout drop: p = 1 must be in [0, 1)");
    CHECK_FAILS(st_dropout(&g, "drop", x, -0.1f, &y), ST_ERR_ARG, "must be in [0, 1)");
    CHECK_FAILS(st_dropout(&g, "drop", x, NAN, &y), ST_ERR_ARG, "must be in [0, 1)");
    CHECK_FAILS(st_dropout(&g, "drop", ix, 0.1f, &y), ST_ERR_ARG, "must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

/* A dropped element is x times 0, as PyTorch's x * mask: a NaN or inf input
 * (or gradient) gives NaN there, not a 0 that hides it. */
static void check_nan(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    const int64_t xs[1] = {64};
    st_tensor *x, *y;
    CHECK_OK(st_graph_param(&g, "x", 1, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    CHECK_OK(st_dropout(&g, "d", x, 0.5f, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    g.training = true;
    g.dropout_seed = 9;
    float R[64];
    for (int i = 0; i < 64; i++)
        x->data[i] = i % 2 ? NAN : INFINITY, R[i] = NAN;
    CHECK_OK(st_graph_forward(&g));
    CHECK_OK(gc_backward(&g, y, R));
    int finite = 0, kept = 0;
    for (int i = 0; i < 64; i++) {
        finite += !isnan(y->data[i]) && !isinf(y->data[i]);
        finite += !isnan(x->grad[i]);
        kept += isinf(y->data[i]);
    }
    CHECK(finite == 0, "dropout of NaN and inf: %d outputs or gradients finite (a dropped one 0, hiding it)",
          finite);
    CHECK(kept > 0 && kept < 32, "dropout of inf at p 0.5: %d of 32 kept", kept);
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[3] = {2, 3, 7}, b[2] = {1, 29}, c[4] = {2, 3, 3, 5};
    const float ps[3] = {0.0f, 0.1f, 0.5f};
    for (int k = 0; k < 3; k++) {
        check_dropout(3, a, ps[k], true, false);
        check_dropout(2, b, ps[k], true, false); /* batch of 1 */
        check_dropout(4, c, ps[k], false, false);
        check_dropout(3, a, ps[k], true, true);
        check_dropout(3, a, ps[k], false, true);
        check_values(ps[k]);
    }
    check_values(0.9f);
    check_nan();
    check_errors();
    return st_test_finish("test_grad_dropout");
}
