/* Flatten: NHWC images come out in PyTorch's (C, H, W) order; other ranks are
 * a plain reshape. Gradient checks (odd sizes, batch of 1, consumed twice). */
#include "gradcheck.h"
#include "layers/layers.h"

static void check_flatten(int ndim, const int64_t *xs, bool twice) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *h, *y1, *y2, *y;
    CHECK_OK(st_graph_param(&g, "x", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (twice) { /* h feeds two flatten nodes: the second in backward order adds */
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_flatten(&g, "f1", h, &y1));
        CHECK_OK(st_flatten(&g, "f2", h, &y2));
        CHECK_OK(st_add(&g, "sum", y1, y2, &y));
    } else {
        CHECK_OK(st_flatten(&g, "f", x, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 12);
    const int64_t B = xs[0], F = x->count / B;
    CHECK(y->ndim == 2 && y->shape[0] == B && y->shape[1] == F, "output shape (B, %lld)", (long long)F);
    if (!twice) {
        CHECK_OK(st_graph_forward(&g));
        int64_t bad = 0;
        if (ndim == 4) { /* y[b, (c, h, w)] = x[b, h, w, c] */
            const int64_t H = xs[1], W = xs[2], C = xs[3];
            for (int64_t b = 0; b < B; b++)
                for (int64_t hh = 0; hh < H; hh++)
                    for (int64_t w = 0; w < W; w++)
                        for (int64_t c = 0; c < C; c++)
                            bad += y->data[b * F + (c * H + hh) * W + w] !=
                                   x->data[((b * H + hh) * W + w) * C + c];
        } else {
            bad = memcmp(x->data, y->data, (size_t)x->count * sizeof(float)) != 0;
        }
        CHECK(bad == 0, "%lld outputs in the wrong place", (long long)bad);
    }
    char label[128];
    snprintf(label, sizeof label, "flatten ndim%d n%lld twice%d", ndim, (long long)x->count, twice);
    gradcheck(label, &g, y, p.t, p.n, 37, 128, 1e-2, 1e-2, 1e-3);
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
    CHECK_FAILS(st_flatten(&g, "flat", ix, &y), ST_ERR_ARG, "flatten flat: input ix must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[4] = {2, 3, 5, 4}, b[4] = {1, 7, 3, 5}, c[4] = {3, 1, 1, 6};
    const int64_t d[3] = {2, 3, 5}, e[2] = {3, 7}, f[1] = {5};
    check_flatten(4, a, false);
    check_flatten(4, b, false); /* batch of 1 */
    check_flatten(4, c, false);
    check_flatten(3, d, false);
    check_flatten(2, e, false);
    check_flatten(1, f, false);
    check_flatten(4, a, true);
    check_flatten(3, d, true);
    check_errors();
    return st_test_finish("test_grad_flatten");
}
