/* GELU (tanh form) and ReLU: gradient checks (odd sizes, batch of 1, a tensor
 * consumed twice), forward values against a double reference, ReLU of NaN,
 * infinities and -0, errors. */
#include "gradcheck.h"
#include "layers/layers.h"

typedef st_status (*act_fn)(st_graph *, const char *, st_tensor *, st_tensor **);

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Keep |x| >= 0.05 so a finite difference never straddles ReLU's kink. */
static void away_from_zero(st_tensor *x) {
    for (int64_t i = 0; i < x->count; i++) {
        float v = x->data[i];
        x->data[i] = v < 0 ? v - 0.05f : v + 0.05f;
    }
}

/* mode 0: y = f(x); 1: r = f(x), y = r + r (one node, same tensor twice);
 * 2: r = relu(x), y = f(r) + r (r consumed by two nodes). */
static void check_act(const char *fname, act_fn f, int ndim, const int64_t *xs, int mode) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *r, *h, *y;
    CHECK_OK(st_graph_param(&g, "x", ndim, xs, ST_INIT_UNIFORM, 2.0f, false, &x));
    if (mode == 0) {
        CHECK_OK(f(&g, "act", x, &y));
    } else if (mode == 1) {
        CHECK_OK(f(&g, "act", x, &r));
        CHECK_OK(st_add(&g, "sum", r, r, &y));
    } else {
        CHECK_OK(st_relu(&g, "r", x, &r));
        CHECK_OK(f(&g, "act", r, &h));
        CHECK_OK(st_add(&g, "sum", h, r, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 6);
    away_from_zero(x);
    if (mode == 0) {
        CHECK_OK(st_graph_forward(&g));
        bool gelu = f == st_gelu;
        for (int64_t i = 0; i < x->count; i++) {
            double v = x->data[i], ref = gelu ? gelu_ref(v) : (v > 0 ? v : 0);
            CHECK_CLOSE(y->data[i], ref, 1e-6 * (1 + fabs(ref)));
        }
    }
    char label[128];
    snprintf(label, sizeof label, "%s n%lld mode%d", fname, (long long)x->count, mode);
    gradcheck(label, &g, y, p.t, p.n, 23, 128, 1e-3, 1e-2, 1e-4);
    st_graph_free(&g);
    st_params_free(&p);
}

/* ReLU keeps a NaN (PyTorch's relu) and passes its dy back (threshold_backward:
 * zero where y <= 0), so that a NaN from the layer before is not hidden as 0;
 * -0 and -inf give 0 and no gradient, inf itself and its gradient. */
static void check_nan(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    const int64_t xs[1] = {6};
    st_tensor *x, *y;
    CHECK_OK(st_graph_param(&g, "x", 1, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    CHECK_OK(st_relu(&g, "r", x, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    const float in[6] = {NAN, -1.0f, 2.0f, -0.0f, INFINITY, -INFINITY}, R[6] = {1, 1, 1, 1, 1, 1};
    const float want[6] = {NAN, 0, 2, 0, INFINITY, 0}, dwant[6] = {1, 0, 1, 0, 1, 0};
    memcpy(x->data, in, sizeof in);
    CHECK_OK(st_graph_forward(&g));
    CHECK_OK(gc_backward(&g, y, R));
    for (int i = 0; i < 6; i++) {
        CHECK(isnan(want[i]) ? isnan(y->data[i]) : y->data[i] == want[i], "relu(%g) = %g, not %g",
              (double)in[i], (double)y->data[i], (double)want[i]);
        CHECK(x->grad[i] == dwant[i], "relu's gradient at %g: %g, not %g", (double)in[i], (double)x->grad[i],
              (double)dwant[i]);
    }
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[2] = {2, 5};
    st_tensor *ix, *y;
    CHECK_OK(st_graph_input(&g, "ix", ST_I32, 2, xs, &ix));
    CHECK_FAILS(st_gelu(&g, "g", ix, &y), ST_ERR_ARG, "gelu g: input ix must be float");
    CHECK_FAILS(st_relu(&g, "r", ix, &y), ST_ERR_ARG, "relu r: input ix must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[3] = {2, 3, 5}, b[2] = {1, 17}, c[4] = {3, 2, 5, 7};
    for (int mode = 0; mode < 3; mode++) {
        check_act("gelu", st_gelu, 3, a, mode);
        check_act("gelu", st_gelu, 2, b, mode);
        check_act("relu", st_relu, 3, a, mode);
        check_act("relu", st_relu, 4, c, mode);
    }
    check_act("gelu", st_gelu, 4, c, 0);
    check_act("relu", st_relu, 2, b, 0);
    check_nan();
    check_errors();
    return st_test_finish("test_grad_activation");
}
