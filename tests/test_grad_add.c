/* Element-wise add: gradient check for both inputs, the same tensor on both
 * sides (in_acc within one node), accumulation across nodes, shape errors. */
#include "gradcheck.h"
#include "layers/layers.h"

/* mode 0: y = a + b (both parameters); 1: r = relu(a), y = r + r;
 * 2: r = gelu(a), s = r + b, y = s + r (r consumed by two nodes).
 * Residual streams, whose gradients the graph may give one memory
 * (graph.c alias_passes), each add's output read by a GELU so that its
 * gradient is written by a node: 3: h = gelu(a), s = h + relu(h),
 * y = gelu(s): relu's backward reads its output's gradient (the add's
 * branch) and adds into h's at the same step, so only one of them can be
 * s's memory; 4: two transformer-like blocks, h_{i+1} = h_i + gelu(relu(h_i)),
 * y = gelu(h_2): the branch's gelu reads the stream's gradient before
 * relu (the "norm") adds into it, so the whole stream is one memory;
 * 5: h = gelu(a), s = relu(a) + h, y = gelu(s) + h: the last add writes
 * h's gradient first, so the add making s may not give h its memory (the
 * GELU after s overwrites it), only its branch. */
static void check_add(int ndim, const int64_t *xs, int mode) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *a, *b, *r, *s, *y;
    CHECK_OK(st_graph_param(&g, "a", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &a));
    CHECK_OK(st_graph_param(&g, "b", ndim, xs, ST_INIT_UNIFORM, 1.0f, false, &b));
    if (mode == 0) {
        CHECK_OK(st_add(&g, "sum", a, b, &y));
    } else if (mode == 1) {
        CHECK_OK(st_relu(&g, "r", a, &r));
        CHECK_OK(st_add(&g, "sum", r, r, &y));
    } else if (mode == 2) {
        CHECK_OK(st_gelu(&g, "r", a, &r));
        CHECK_OK(st_add(&g, "s", r, b, &s));
        CHECK_OK(st_add(&g, "sum", s, r, &y));
    }
    st_tensor *h[3] = {NULL, NULL, NULL}, *br[2] = {NULL, NULL};
    if (mode == 3) {
        CHECK_OK(st_gelu(&g, "h", a, &h[0]));
        CHECK_OK(st_relu(&g, "br", h[0], &br[0]));
        CHECK_OK(st_add(&g, "s", h[0], br[0], &h[1]));
        CHECK_OK(st_gelu(&g, "sum", h[1], &y));
    } else if (mode == 4) {
        CHECK_OK(st_gelu(&g, "h", a, &h[0]));
        for (int i = 0; i < 2; i++) {
            char nm[3][16];
            snprintf(nm[0], sizeof nm[0], "norm%d", i);
            snprintf(nm[1], sizeof nm[1], "br%d", i);
            snprintf(nm[2], sizeof nm[2], "res%d", i);
            st_tensor *nrm;
            CHECK_OK(st_relu(&g, nm[0], h[i], &nrm));
            CHECK_OK(st_gelu(&g, nm[1], nrm, &br[i]));
            CHECK_OK(st_add(&g, nm[2], h[i], br[i], &h[i + 1]));
        }
        CHECK_OK(st_gelu(&g, "sum", h[2], &y));
    } else if (mode == 5) {
        st_tensor *t;
        CHECK_OK(st_gelu(&g, "h", a, &h[0]));
        CHECK_OK(st_relu(&g, "br", a, &br[0]));
        CHECK_OK(st_add(&g, "s", br[0], h[0], &h[1]));
        CHECK_OK(st_gelu(&g, "t", h[1], &t));
        CHECK_OK(st_add(&g, "sum", t, h[0], &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    if (mode == 3)
        CHECK((br[0]->grad == h[1]->grad) + (h[0]->grad == h[1]->grad) == 1,
              "h + relu(h): one of the two inputs' gradients is the sum's memory, not both");
    if (mode == 4)
        CHECK(br[0]->grad == h[2]->grad && br[1]->grad == h[2]->grad && h[0]->grad == h[2]->grad &&
                  h[1]->grad == h[2]->grad,
              "two residual blocks: the stream's and the branches' gradients are one memory");
    if (mode == 5)
        CHECK(br[0]->grad == h[1]->grad && h[0]->grad != h[1]->grad,
              "s = relu(a) + h, h read again later: h keeps its own gradient memory, the branch shares s's");
    st_params_init(&p, 8);
    for (int64_t i = 0; i < a->count; i++) /* keep relu away from its kink */
        a->data[i] = a->data[i] < 0 ? a->data[i] - 0.05f : a->data[i] + 0.05f;
    if (mode < 2) { /* exact: a + b, or relu(a) + relu(a) */
        CHECK_OK(st_graph_forward(&g));
        int bad = 0;
        for (int64_t i = 0; i < y->count; i++) {
            float av = a->data[i], r_av = av > 0 ? av : 0.0f;
            bad += y->data[i] != (mode == 0 ? av + b->data[i] : r_av + r_av);
        }
        CHECK(bad == 0, "%d outputs differ from the reference", bad);
    }
    char label[128];
    snprintf(label, sizeof label, "add n%lld mode%d", (long long)y->count, mode);
    gradcheck(label, &g, y, p.t, p.n, 29, 96, 1e-2, 1e-2, 1e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s1[2] = {2, 3}, s2[2] = {3, 2}, s3[3] = {2, 3, 1};
    st_tensor *a, *b, *c, *ia, *y;
    CHECK_OK(st_graph_input(&g, "a", ST_F32, 2, s1, &a));
    CHECK_OK(st_graph_input(&g, "b", ST_F32, 2, s2, &b));
    CHECK_OK(st_graph_input(&g, "c", ST_F32, 3, s3, &c));
    CHECK_OK(st_graph_input(&g, "ia", ST_I32, 2, s1, &ia));
    CHECK_FAILS(st_add(&g, "res", a, b, &y), ST_ERR_SHAPE,
                "add res: a has shape (2, 3) but b has shape (3, 2)");
    CHECK_FAILS(st_add(&g, "res", a, c, &y), ST_ERR_SHAPE, "(2, 3, 1)");
    CHECK_FAILS(st_add(&g, "res", a, ia, &y), ST_ERR_ARG, "must be float");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    const int64_t a[3] = {2, 3, 5}, b[2] = {1, 13}, c[4] = {2, 3, 3, 5};
    for (int mode = 0; mode < 6; mode++) {
        check_add(3, a, mode);
        check_add(2, b, mode);
        check_add(4, c, mode);
    }
    check_errors();
    return st_test_finish("test_grad_add");
}
