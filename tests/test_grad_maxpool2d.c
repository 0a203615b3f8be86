/* Maxpool2d: forward against a naive max, finite-difference gradients
 * (overlapping windows, strides larger than the kernel, odd sizes, batch 1),
 * ties going to the first element, NaN propagating, the write/add contract,
 * build errors. */
#include "layercheck.h"
#include "layers/layers.h"

/* x[i] = distinct values 0.01 apart in a shuffled order, so that a finite
 * difference step never changes which element wins a window. */
static void fill_distinct(float *x, int64_t n, uint64_t seed) {
    st_rng r = st_rng_make(seed, 3);
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.01f * (float)(i - n / 2);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)st_rng_below(&r, (uint64_t)(i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static void check_pool(int64_t B, int64_t H, int64_t W, int64_t C, int64_t k, int64_t s) {
    char label[128];
    snprintf(label, sizeof label, "maxpool2d B%lld %lldx%lld C%lld k%lld s%lld", (long long)B, (long long)H,
             (long long)W, (long long)C, (long long)k, (long long)s);
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[4] = {B, H, W, C};
    st_tensor *x, *y;
    CHECK_OK(st_graph_param(&g, "x", 4, xs, ST_INIT_ZEROS, 0.0f, false, &x));
    CHECK_OK(st_maxpool2d(&g, "pool", x, k, s, &y));
    CHECK_OK(st_graph_finalize(&g));
    const int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    CHECK(y->shape[0] == B && y->shape[1] == Ho && y->shape[2] == Wo && y->shape[3] == C, "%s: shape", label);
    fill_distinct(x->data, x->count, (uint64_t)(B * 1000 + H * 10 + k));

    CHECK_OK(st_graph_forward(&g));
    double *ref = malloc((size_t)y->count * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t c = 0; c < C; c++) {
                    double m = -INFINITY;
                    for (int64_t kh = 0; kh < k; kh++)
                        for (int64_t kw = 0; kw < k; kw++)
                            m = fmax(m, x->data[((b * H + oh * s + kh) * W + ow * s + kw) * C + c]);
                    ref[((b * Ho + oh) * Wo + ow) * C + c] = m;
                }
    lc_compare(label, "y", y->data, ref, y->count, 0.0, 0.0);
    free(ref);

    gradcheck(label, &g, y, &x, 1, 13, 200, 1e-3, 1e-3, 1e-4);
    lc_acc_check(label, &g, &g.nodes[0], 29);

    /* ties: all equal, so every window's gradient goes to its first element */
    for (int64_t i = 0; i < x->count; i++)
        x->data[i] = 0.5f;
    CHECK_OK(st_graph_forward(&g));
    for (int64_t i = 0; i < y->count; i++)
        y->grad[i] = 1.0f;
    g.nodes[0].in_acc[0] = false;
    CHECK_OK(g.nodes[0].ops->backward(&g.nodes[0], &g));
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t ih = 0; ih < H; ih++)
            for (int64_t iw = 0; iw < W; iw++) {
                float want = (ih % s == 0 && ih / s < Ho && iw % s == 0 && iw / s < Wo) ? 1.0f : 0.0f;
                for (int64_t c = 0; c < C; c++)
                    if (x->grad[((b * H + ih) * W + iw) * C + c] != want) bad++;
            }
    CHECK(bad == 0, "%s: %d gradients do not go to the first element of a tied window", label, bad);

    /* NaN wins its windows, as in PyTorch */
    x->data[C + 1 < x->count ? C + 1 : 0] = NAN;
    CHECK_OK(st_graph_forward(&g));
    int nans = 0;
    for (int64_t i = 0; i < y->count; i++)
        nans += y->data[i] != y->data[i];
    CHECK(nans >= 1, "%s: a NaN input did not reach the output", label);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s3[3] = {2, 5, 5}, s4[4] = {2, 3, 4, 2};
    st_tensor *x3, *x4, *y;
    CHECK_OK(st_graph_input(&g, "x3", ST_F32, 3, s3, &x3));
    CHECK_OK(st_graph_input(&g, "x4", ST_F32, 4, s4, &x4));
    CHECK_FAILS(st_maxpool2d(&g, "p", x3, 2, 2, &y), ST_ERR_SHAPE, "NHWC");
    CHECK_FAILS(st_maxpool2d(&g, "p", x4, 4, 1, &y), ST_ERR_SHAPE, "larger than");
    CHECK_FAILS(st_maxpool2d(&g, "p", x4, 2, 0, &y), ST_ERR_SHAPE, "positive");
    CHECK_FAILS(st_maxpool2d(&g, "p", x4, 0, 1, &y), ST_ERR_SHAPE, "positive");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_pool(2, 4, 4, 3, 2, 2);
    check_pool(1, 5, 7, 2, 3, 2); /* overlapping windows, odd sizes, batch 1 */
    check_pool(2, 5, 5, 3, 3, 1); /* stride 1 */
    check_pool(3, 6, 5, 1, 1, 1); /* identity */
    check_pool(1, 7, 8, 4, 2, 3); /* stride larger than the kernel: some inputs unused */
    check_pool(2, 3, 3, 2, 3, 1); /* kernel = image */
    check_errors();
    return st_test_finish("test_grad_maxpool2d");
}
