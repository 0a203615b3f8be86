/* Finite-difference gradient checks for the linear layer, both weight layouts. */
#include "gradcheck.h"
#include "layers/layers.h"

static void check_linear(int64_t B, int64_t T, int64_t K, int64_t N, bool in_out, bool bias, bool tied) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[3] = {B, T, K};
    st_tensor *x, *y, *w = NULL;
    CHECK_OK(st_graph_param(&g, "x", 3, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (tied) {
        int64_t ws[2] = {N, K};
        CHECK_OK(st_graph_param(&g, "w", 2, ws, ST_INIT_UNIFORM, 0.5f, true, &w));
        CHECK_OK(st_linear_tied(&g, "lin", x, w, &y));
    } else {
        st_linear_opts o = {.bias = bias, .in_out = in_out, .init = ST_INIT_UNIFORM, .init_scale = 0.5f};
        CHECK_OK(st_linear(&g, "lin", x, N, &o, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 7);
    if (bias) /* a non-zero bias so a wrong bias path shows */
        for (int64_t i = 0; i < N; i++) st_params_find(&p, "lin.bias")->data[i] = 0.1f * (float)i;
    CHECK(y->shape[2] == N && y->count == B * T * N, "output shape");
    char label[128];
    snprintf(label, sizeof label, "linear B%lld T%lld K%lld N%lld io%d b%d tied%d", (long long)B,
             (long long)T, (long long)K, (long long)N, in_out, bias, tied);
    gradcheck(label, &g, y, p.t, p.n, 11, 64, 1e-2, 1e-2, 1e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

/* More rows than BLAS's int takes (a micro-batch of 2^32 rows, declared,
 * never allocated): refused, where the product would have wrapped. */
static void check_too_many_rows(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    const int64_t xs[3] = {1 << 16, 1 << 16, 4};
    st_tensor *x, *y;
    CHECK_OK(st_graph_input(&g, "x", ST_F32, 3, xs, &x));
    st_linear_opts o = {.bias = true, .init = ST_INIT_UNIFORM, .init_scale = 0.5f};
    CHECK_FAILS(st_linear(&g, "lin", x, 8, &o, &y), ST_ERR_SHAPE, "4294967296 rows of 4 inputs to 8 outputs");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_too_many_rows();
    check_linear(2, 3, 5, 4, false, true, false);
    check_linear(1, 7, 16, 9, false, false, false);
    check_linear(3, 2, 8, 12, true, true, false);
    check_linear(2, 5, 6, 11, false, false, true);
    return st_test_finish("test_grad_linear");
}
