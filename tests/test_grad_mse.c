/* Mean squared error: gradient check (prediction, and target when it is a
 * parameter too; several partial-sum chunks; batch of 1; prediction consumed
 * twice), loss against a double reference, and shape/dtype errors. */
#include "gradcheck.h"
#include "layers/layers.h"

/* target_param: the target is a parameter (gets a gradient), else a graph input. */
static void check_mse(int ndim, const int64_t *xs, bool target_param, bool twice) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *x, *t, *t2, *h, *l1, *l2, *y;
    CHECK_OK(st_graph_param(&g, "pred", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (target_param)
        CHECK_OK(st_graph_param(&g, "target", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &t));
    else
        CHECK_OK(st_graph_input(&g, "target", ST_F32, ndim, xs, &t));
    if (twice) { /* h feeds two losses: the second in backward order adds (in_acc) */
        CHECK_OK(st_graph_input(&g, "target2", ST_F32, ndim, xs, &t2));
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_mse(&g, "mse1", h, t, &l1));
        CHECK_OK(st_mse(&g, "mse2", h, t2, &l2));
        CHECK(g.loss == l2, "mse sets g->loss");
        CHECK_OK(st_add(&g, "sum", l1, l2, &y));
    } else {
        CHECK_OK(st_mse(&g, "mse", x, t, &y));
        CHECK(g.loss == y && y->ndim == 1 && y->shape[0] == 1, "loss (1), set as g->loss");
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 18);
    st_rng r = st_rng_make(19, 19);
    if (!target_param) gc_fill(t->data, t->count, &r, 1.0f);
    if (twice) gc_fill(t2->data, t2->count, &r, 1.0f);
    if (!twice) {
        CHECK_OK(st_graph_forward(&g));
        double ref = 0;
        for (int64_t i = 0; i < x->count; i++)
            ref += ((double)x->data[i] - t->data[i]) * ((double)x->data[i] - t->data[i]);
        ref /= (double)x->count;
        CHECK_CLOSE(y->data[0], ref, 1e-6 * ref);
    }
    char label[128];
    snprintf(label, sizeof label, "mse n%lld target_param%d twice%d", (long long)x->count, target_param,
             twice);
    gradcheck(label, &g, y, p.t, p.n, 43, 96, 1e-2, 1e-2, 1e-5);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s1[2] = {4, 3}, s2[2] = {3, 4};
    st_tensor *a, *b, *ib, *y;
    CHECK_OK(st_graph_input(&g, "pred", ST_F32, 2, s1, &a));
    CHECK_OK(st_graph_input(&g, "target", ST_F32, 2, s2, &b));
    CHECK_OK(st_graph_input(&g, "itarget", ST_I32, 2, s1, &ib));
    CHECK_FAILS(st_mse(&g, "mse", a, b, &y), ST_ERR_SHAPE,
                "mse mse: prediction pred has shape (4, 3) but target target has shape (3, 4)");
    CHECK_FAILS(st_mse(&g, "mse", a, ib, &y), ST_ERR_ARG, "must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[2] = {3, 5}, b[3] = {1, 7, 3}, c[2] = {9, 1001}, d[4] = {2, 3, 3, 5};
    check_mse(2, a, false, false);
    check_mse(3, b, false, false); /* batch of 1 */
    check_mse(2, c, false, false); /* more than one partial-sum chunk */
    check_mse(4, d, true, false);
    check_mse(2, a, false, true);
    check_mse(2, c, true, true);
    check_errors();
    return st_test_finish("test_grad_mse");
}
