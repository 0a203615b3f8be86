/* Conv2d: forward against a direct 7-loop convolution in double, finite-difference
 * gradients (kernels 1/3/5, stride 1/2, padding 0/1/2, odd sizes, batch 1; im2col
 * and Winograd F(2x2,3x3) paths), the
 * write/add contract of backward, the path without an input gradient, build errors. */
#include <omp.h>

#include "layercheck.h"
#include "layers/layers.h"

typedef struct conv_cfg {
    int64_t B, H, W, Cin, Cout, k, stride, pad;
    bool bias;
    bool x_grad; /* x a parameter (gets a gradient) or a graph input (none) */
} conv_cfg;

/* y (B, Ho, Wo, Cout) in double; w in PyTorch's (Cout, Cin, k, k) */
static void ref_conv(const conv_cfg *c, int64_t Ho, int64_t Wo, const float *x, const float *w,
                     const float *b, double *y) {
    for (int64_t n = 0; n < c->B; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t co = 0; co < c->Cout; co++) {
                    double s = b ? b[co] : 0.0;
                    for (int64_t ci = 0; ci < c->Cin; ci++)
                        for (int64_t kh = 0; kh < c->k; kh++)
                            for (int64_t kw = 0; kw < c->k; kw++) {
                                int64_t ih = oh * c->stride - c->pad + kh, iw = ow * c->stride - c->pad + kw;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                s += (double)x[((n * c->H + ih) * c->W + iw) * c->Cin + ci] *
                                     w[((co * c->Cin + ci) * c->k + kh) * c->k + kw];
                            }
                    y[((n * Ho + oh) * Wo + ow) * c->Cout + co] = s;
                }
}

static void check_conv(conv_cfg c) {
    char label[160];
    snprintf(label, sizeof label, "conv2d B%lld %lldx%lld %lld->%lld k%lld s%lld p%lld bias%d xgrad%d",
             (long long)c.B, (long long)c.H, (long long)c.W, (long long)c.Cin, (long long)c.Cout,
             (long long)c.k, (long long)c.stride, (long long)c.pad, c.bias, c.x_grad);
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[4] = {c.B, c.H, c.W, c.Cin};
    st_tensor *x, *y;
    if (c.x_grad)
        CHECK_OK(st_graph_param(&g, "x", 4, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    else
        CHECK_OK(st_graph_input(&g, "x", ST_F32, 4, xs, &x));
    CHECK_OK(st_conv2d(&g, "conv", x, c.Cout, c.k, c.stride, c.pad, c.bias, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 3);
    st_rng r = st_rng_make(17, 1);
    if (!c.x_grad) gc_fill(x->data, x->count, &r, 1.0f);

    const int64_t Ho = (c.H + 2 * c.pad - c.k) / c.stride + 1, Wo = (c.W + 2 * c.pad - c.k) / c.stride + 1;
    CHECK(y->ndim == 4 && y->shape[0] == c.B && y->shape[1] == Ho && y->shape[2] == Wo &&
              y->shape[3] == c.Cout,
          "%s: output shape", label);
    st_tensor *w = st_params_find(&p, "conv.weight"), *b = st_params_find(&p, "conv.bias");
    CHECK(w && w->shape[0] == c.Cout && w->shape[1] == c.Cin && w->shape[2] == c.k && w->decay,
          "%s: weight (Cout, Cin, k, k) with decay", label);
    const float bound = 1.0f / sqrtf((float)(c.Cin * c.k * c.k));
    CHECK(fabsf(w->init_scale - bound) < 1e-7f, "%s: weight bound %g, expected %g", label, w->init_scale,
          bound);
    if (c.bias) CHECK(b && !b->decay && fabsf(b->init_scale - bound) < 1e-7f, "%s: bias init", label);

    CHECK_OK(st_graph_forward(&g));
    double *ref = malloc((size_t)y->count * sizeof(double));
    ref_conv(&c, Ho, Wo, x->data, w->data, b ? b->data : NULL, ref);
    lc_compare(label, "y", y->data, ref, y->count, 1e-5, 1e-5);
    free(ref);

    gradcheck(label, &g, y, p.t, p.n, 11, 64, 1e-2, 1e-2, 1e-3);
    lc_acc_check(label, &g, &g.nodes[0], 23);
    st_graph_free(&g);
    st_params_free(&p);
}

/* Images big enough that the layer works in several im2col chunks (1 MiB
 * of im2col each, whole images): forward and all gradients against direct
 * double sums. */
static void check_conv_big(conv_cfg c) {
    char label[128];
    snprintf(label, sizeof label, "conv2d chunked B%lld %lldx%lld %lld->%lld k%lld s%lld", (long long)c.B,
             (long long)c.H, (long long)c.W, (long long)c.Cin, (long long)c.Cout, (long long)c.k,
             (long long)c.stride);
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[4] = {c.B, c.H, c.W, c.Cin};
    st_tensor *x, *y;
    CHECK_OK(st_graph_param(&g, "x", 4, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    CHECK_OK(st_conv2d(&g, "conv", x, c.Cout, c.k, c.stride, c.pad, c.bias, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 4);
    st_tensor *w = st_params_find(&p, "conv.weight"), *b = st_params_find(&p, "conv.bias");
    const int64_t Ho = y->shape[1], Wo = y->shape[2];
    CHECK_OK(st_graph_forward(&g));
    double *ref = malloc((size_t)y->count * sizeof(double));
    ref_conv(&c, Ho, Wo, x->data, w->data, b ? b->data : NULL, ref);
    lc_compare(label, "y", y->data, ref, y->count, 1e-5, 1e-5);
    free(ref);

    st_rng r = st_rng_make(8, 8);
    gc_fill(y->grad, y->count, &r, 1.0f);
    memset(p.grad, 0, (size_t)p.arena_count * sizeof(float));
    CHECK_OK(g.nodes[0].ops->backward(&g.nodes[0], &g));
    double *dx = calloc((size_t)x->count, sizeof(double)), *dw = calloc((size_t)w->count, sizeof(double));
    double *db = calloc((size_t)c.Cout, sizeof(double));
    for (int64_t n = 0; n < c.B; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t co = 0; co < c.Cout; co++) {
                    const double d = y->grad[((n * Ho + oh) * Wo + ow) * c.Cout + co];
                    db[co] += d;
                    for (int64_t ci = 0; ci < c.Cin; ci++)
                        for (int64_t kh = 0; kh < c.k; kh++)
                            for (int64_t kw = 0; kw < c.k; kw++) {
                                int64_t ih = oh * c.stride - c.pad + kh, iw = ow * c.stride - c.pad + kw;
                                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                                const int64_t xi = ((n * c.H + ih) * c.W + iw) * c.Cin + ci;
                                const int64_t wi = ((co * c.Cin + ci) * c.k + kh) * c.k + kw;
                                dx[xi] += d * w->data[wi];
                                dw[wi] += d * x->data[xi];
                            }
                }
    lc_compare(label, "dx", x->grad, dx, x->count, 1e-4, 1e-4);
    lc_compare(label, "dw", w->grad, dw, w->count, 1e-4, 1e-3);
    if (b) lc_compare(label, "db", b->grad, db, c.Cout, 1e-4, 1e-3);
    free(dx);
    free(dw);
    free(db);
    lc_acc_check(label, &g, &g.nodes[0], 41);
    st_graph_free(&g);
    st_params_free(&p);
}

/* Forward and backward give the same bits with 1 and 2 threads: chunks
 * spread over threads (B 12) and one chunk with threaded sgemm (B 1). */
static void check_threads(conv_cfg c) {
    float *out[2][3];
    int64_t counts[3] = {0, 0, 0};
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        st_params p = {0};
        st_graph g;
        st_graph_init(&g, &p);
        int64_t xs[4] = {c.B, c.H, c.W, c.Cin};
        st_tensor *x, *y;
        CHECK_OK(st_graph_param(&g, "x", 4, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
        CHECK_OK(st_conv2d(&g, "conv", x, c.Cout, c.k, c.stride, c.pad, c.bias, &y));
        CHECK_OK(st_graph_finalize(&g));
        st_params_init(&p, 6);
        CHECK_OK(st_graph_forward(&g));
        st_rng r = st_rng_make(6, 6);
        gc_fill(y->grad, y->count, &r, 1.0f);
        memset(p.grad, 0, (size_t)p.arena_count * sizeof(float));
        CHECK_OK(g.nodes[0].ops->backward(&g.nodes[0], &g));
        st_tensor *w = st_params_find(&p, "conv.weight");
        const float *src[3] = {y->data, x->grad, w->grad};
        counts[0] = y->count;
        counts[1] = x->count;
        counts[2] = w->count;
        for (int k = 0; k < 3; k++) {
            out[run][k] = malloc((size_t)counts[k] * sizeof(float));
            memcpy(out[run][k], src[k], (size_t)counts[k] * sizeof(float));
        }
        st_graph_free(&g);
        st_params_free(&p);
    }
    for (int k = 0; k < 3; k++) {
        CHECK(memcmp(out[0][k], out[1][k], (size_t)counts[k] * sizeof(float)) == 0,
              "conv2d B%lld: %s differs between 1 and 2 threads", (long long)c.B,
              k == 0   ? "y"
              : k == 1 ? "dx"
                       : "dw");
        free(out[0][k]);
        free(out[1][k]);
    }
    omp_set_num_threads(omp_get_num_procs());
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s3[3] = {2, 5, 5}, s4[4] = {2, 3, 4, 2};
    st_tensor *x3, *x4, *y;
    CHECK_OK(st_graph_input(&g, "x3", ST_F32, 3, s3, &x3));
    CHECK_OK(st_graph_input(&g, "x4", ST_F32, 4, s4, &x4));
    CHECK_FAILS(st_conv2d(&g, "c", x3, 4, 3, 1, 1, true, &y), ST_ERR_SHAPE, "NHWC");
    CHECK_FAILS(st_conv2d(&g, "c", x4, 4, 5, 1, 0, true, &y), ST_ERR_SHAPE, "larger than");
    CHECK_FAILS(st_conv2d(&g, "c", x4, 4, 6, 1, 1, true, &y), ST_ERR_SHAPE, "larger than"); /* padded 5x6 */
    CHECK_FAILS(st_conv2d(&g, "c", x4, 4, 3, 0, 1, true, &y), ST_ERR_SHAPE, "positive");
    CHECK_FAILS(st_conv2d(&g, "c", x4, 0, 3, 1, 1, true, &y), ST_ERR_SHAPE, "positive");
    CHECK_FAILS(st_conv2d(&g, "c", x4, 4, 3, 1, -1, true, &y), ST_ERR_SHAPE, "non-negative");
    CHECK(p.n == 0, "a failed build declared %d parameters", p.n);
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_conv((conv_cfg){2, 5, 5, 3, 4, 3, 1, 1, true, true});
    check_conv((conv_cfg){1, 7, 6, 2, 3, 3, 2, 0, false, true}); /* stride 2, pad 0, batch 1 */
    check_conv((conv_cfg){2, 6, 7, 3, 5, 5, 1, 2, true, true});  /* k 5, pad 2 */
    check_conv((conv_cfg){1, 9, 8, 3, 4, 5, 2, 1, true, true});  /* k 5, stride 2, pad 1 */
    check_conv((conv_cfg){3, 5, 5, 4, 2, 1, 1, 0, true, true});  /* 1x1: x is the im2col */
    check_conv((conv_cfg){2, 5, 6, 3, 2, 1, 2, 0, false, true}); /* 1x1, stride 2 */
    check_conv((conv_cfg){2, 7, 7, 1, 3, 3, 2, 1, true, true});  /* one input channel */
    check_conv((conv_cfg){1, 3, 3, 2, 3, 3, 1, 0, true, true});  /* kernel = image: 1x1 output */
    check_conv((conv_cfg){1, 2, 3, 2, 2, 3, 1, 1, true, true});  /* kernel wider than the image */
    check_conv(
        (conv_cfg){2, 5, 1, 2, 3, 3, 2, 1, true, true}); /* one column, stride 2: taps off both sides */
    check_conv((conv_cfg){1, 1, 4, 2, 3, 3, 1, 1, false, true});        /* one row */
    check_conv((conv_cfg){2, 6, 6, 3, 4, 3, 1, 1, true, false});        /* no input gradient */
    check_conv((conv_cfg){2, 5, 5, 3, 4, 3, 2, 1, false, false});       /* no input gradient, stride 2 */
    /* 3x3, stride 1, pad 1 with >= 8 channels each side: Winograd F(2x2,3x3) */
    check_conv((conv_cfg){2, 5, 5, 8, 8, 3, 1, 1, true, true});    /* odd sizes: half tiles */
    check_conv((conv_cfg){1, 6, 7, 9, 10, 3, 1, 1, false, true});  /* channels not a vector width */
    check_conv((conv_cfg){2, 4, 4, 8, 12, 3, 1, 1, true, false});  /* no input gradient */
    check_conv((conv_cfg){1, 1, 4, 8, 8, 3, 1, 1, true, true});    /* one row */
    check_conv((conv_cfg){2, 1, 1, 8, 9, 3, 1, 1, true, true});    /* one pixel: all taps but one padded */
    check_conv_big((conv_cfg){12, 28, 28, 32, 16, 3, 1, 1, true, true}); /* Winograd: more chunks than groups */
    check_conv_big((conv_cfg){3, 15, 13, 16, 24, 3, 1, 1, false, true}); /* Winograd: odd sizes, chunks */
    check_conv_big((conv_cfg){16, 14, 14, 8, 16, 3, 1, 1, false, true}); /* Winograd: 13 + a partial 3 */
    check_conv_big((conv_cfg){5, 48, 47, 20, 8, 5, 1, 2, true, true});  /* 1 image per chunk */
    check_conv_big((conv_cfg){5, 20, 20, 10, 6, 5, 1, 2, true, true});  /* 2 per chunk, last one partial */
    check_conv_big((conv_cfg){3, 41, 40, 16, 5, 3, 2, 1, false, true}); /* stride 2 */
    check_conv_big((conv_cfg){12, 20, 20, 15, 4, 5, 1, 2, true, true}); /* more chunks than dW groups */
    check_threads((conv_cfg){12, 20, 20, 10, 6, 5, 1, 2, true, true});
    check_threads((conv_cfg){1, 40, 40, 16, 8, 3, 1, 1, true, true});  /* Winograd, one chunk */
    check_threads((conv_cfg){12, 14, 13, 16, 24, 3, 1, 1, true, true}); /* Winograd, chunks over threads */
    check_errors();
    return st_test_finish("test_grad_conv2d");
}
