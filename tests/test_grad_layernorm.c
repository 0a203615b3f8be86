/* Layer norm: gradient check (x, weight, bias; 2-D and 3-D; odd C; input
 * consumed twice), forward against a double reference, saved mean/rstd,
 * thread-independent weight gradients, and argument errors. */
#include <omp.h>

#include "gradcheck.h"
#include "layers/layers.h"

/* Non-trivial weight and bias, so a wrong dweight/dbias or a missing w in dx shows. */
static void randomise_affine(st_params *p, const char *name) {
    char pname[ST_NAME_MAX];
    st_rng r = st_rng_make(21, 21);
    snprintf(pname, sizeof pname, "%s.weight", name);
    st_tensor *w = st_params_find(p, pname);
    for (int64_t i = 0; i < w->count; i++)
        w->data[i] = 0.5f + st_rng_uniform(&r);
    snprintf(pname, sizeof pname, "%s.bias", name);
    st_tensor *b = st_params_find(p, pname);
    gc_fill(b->data, b->count, &r, 0.5f);
}

static void check_ln(int ndim, const int64_t *xs, bool twice) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *h, *y1, *y2, *y;
    CHECK_OK(st_graph_param(&g, "x", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (twice) { /* h feeds two nodes: the second in backward order adds (in_acc) */
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_layernorm(&g, "ln1", h, 1e-5f, &y1));
        CHECK_OK(st_layernorm(&g, "ln2", h, 1e-5f, &y2));
        CHECK_OK(st_add(&g, "sum", y1, y2, &y));
    } else {
        CHECK_OK(st_layernorm(&g, "ln", x, 1e-5f, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 4);
    if (twice) {
        randomise_affine(&p, "ln1");
        randomise_affine(&p, "ln2");
    } else {
        randomise_affine(&p, "ln");
    }
    char label[128];
    snprintf(label, sizeof label, "layernorm ndim%d C%lld rows%lld twice%d", ndim, (long long)xs[ndim - 1],
             (long long)(x->count / xs[ndim - 1]), twice);
    gradcheck(label, &g, y, p.t, p.n, 19, 96, 1e-2, 1e-2, 2e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

/* Weight 1, bias 0: every row has mean 0 and variance var/(var+eps) ~ 1. With a
 * random affine: equal to a double reference, and saved mean/rstd are right. */
static void check_forward(int64_t R, int64_t C) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {R, C};
    st_tensor *x, *y;
    CHECK_OK(st_graph_input(&g, "x", ST_F32, 2, xs, &x));
    CHECK_OK(st_layernorm(&g, "ln", x, 1e-5f, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    st_tensor *w = st_params_find(&p, "ln.weight"), *b = st_params_find(&p, "ln.bias");
    CHECK(w->init == ST_INIT_ONES && !w->decay && b->init == ST_INIT_ZEROS && !b->decay, "param init/decay");
    CHECK(w->data[0] == 1.0f && b->data[C - 1] == 0.0f, "weight ones, bias zeros");
    st_rng r = st_rng_make(8, 8);
    for (int64_t i = 0; i < x->count; i++)
        x->data[i] = 3.0f + 2.0f * st_rng_normal(&r); /* offset mean */
    CHECK_OK(st_graph_forward(&g));
    for (int64_t i = 0; i < R; i++) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++)
            m += y->data[i * C + c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++)
            v += (y->data[i * C + c] - m) * (y->data[i * C + c] - m);
        v /= (double)C;
        CHECK_CLOSE(m, 0.0, 1e-5);
        CHECK_CLOSE(v, 1.0, 1e-3);
    }
    randomise_affine(&p, "ln");
    CHECK_OK(st_graph_forward(&g));
    const float *mean = g.nodes[0].saved, *rstd = g.nodes[0].saved + R;
    for (int64_t i = 0; i < R; i++) {
        const float *xr = x->data + i * C;
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++)
            m += xr[c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++)
            v += (xr[c] - m) * (xr[c] - m);
        v /= (double)C;
        double s = 1.0 / sqrt(v + 1e-5);
        CHECK_CLOSE(mean[i], m, 1e-5);
        CHECK_CLOSE(rstd[i], s, 1e-5 * s);
        for (int64_t c = 0; c < C; c++)
            CHECK_CLOSE(y->data[i * C + c], (xr[c] - m) * s * w->data[c] + b->data[c], 2e-5);
    }
    st_graph_free(&g);
    st_params_free(&p);
}

/* dweight/dbias sum over rows; the sums must not depend on the thread count. */
static void check_deterministic(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {257, 70};
    st_tensor *x, *y;
    CHECK_OK(st_graph_param(&g, "x", 2, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    CHECK_OK(st_layernorm(&g, "ln", x, 1e-5f, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 2);
    gc_same_bits_across_threads("layernorm", &g, y, p.grad, p.count, 3);
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
    CHECK_FAILS(st_layernorm(&g, "ln", x, -1e-5f, &y), ST_ERR_ARG, "eps");
    CHECK_FAILS(st_layernorm(&g, "ln", x, NAN, &y), ST_ERR_ARG, "eps");
    CHECK_FAILS(st_layernorm(&g, "ln", ix, 1e-5f, &y), ST_ERR_ARG, "must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[3] = {2, 3, 8}, b[2] = {1, 5}, c[3] = {3, 5, 37}, d[2] = {4, 7};
    check_ln(3, a, false);
    check_ln(2, b, false); /* one row */
    check_ln(3, c, false);
    check_ln(2, d, true);
    check_forward(6, 64);
    check_forward(3, 7);
    check_deterministic();
    check_errors();
    return st_test_finish("test_grad_layernorm");
}
