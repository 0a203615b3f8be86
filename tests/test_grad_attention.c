/* Attention: forward and the saved probabilities against a naive causal
 * attention in double, causality (outputs at t do not change when inputs after
 * t do), finite-difference gradients (several heads, T = 1, odd sizes), the
 * write/add contract on the interleaved q/k/v gradient, build errors. */
#include "layercheck.h"
#include "layers/layers.h"

/* y (B, T, C) and P (B, nh, T, T) in double from qkv (B, T, 3C). */
static void ref_attention(const float *qkv, int64_t B, int64_t T, int64_t C, int64_t nh, double *y,
                          double *P) {
    const int64_t hs = C / nh;
    const double scale = 1.0 / sqrt((double)hs);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * 3 * C + h * hs;
                double *p = P + ((b * nh + h) * T + t) * T;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    const float *k = qkv + (b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int64_t d = 0; d < hs; d++)
                        s += (double)q[d] * k[d];
                    p[j] = j <= t ? s * scale : -INFINITY;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j < T; j++) {
                    p[j] = j <= t ? exp(p[j] - mx) : 0.0;
                    sum += p[j];
                }
                for (int64_t j = 0; j < T; j++)
                    p[j] /= sum;
                for (int64_t d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= t; j++)
                        acc += p[j] * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
                    y[(b * T + t) * C + h * hs + d] = acc;
                }
            }
}

static void check_attention(int64_t B, int64_t T, int64_t C, int64_t nh) {
    char label[128];
    snprintf(label, sizeof label, "attention B%lld T%lld C%lld heads%lld", (long long)B, (long long)T,
             (long long)C, (long long)nh);
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t qs[3] = {B, T, 3 * C};
    st_tensor *qkv, *y;
    CHECK_OK(st_graph_param(&g, "qkv", 3, qs, ST_INIT_UNIFORM, 1.5f, false, &qkv));
    CHECK_OK(st_attention(&g, "attn", qkv, nh, &y));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, (uint64_t)(T * 100 + C));
    CHECK(y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == C, "%s: shape", label);

    CHECK_OK(st_graph_forward(&g));
    double *ry = malloc((size_t)y->count * sizeof(double));
    double *rp = malloc((size_t)(B * nh * T * T) * sizeof(double));
    ref_attention(qkv->data, B, T, C, nh, ry, rp);
    lc_compare(label, "y", y->data, ry, y->count, 1e-5, 1e-5);
    lc_compare(label, "saved P", g.nodes[0].saved, rp, B * nh * T * T, 1e-5, 1e-6);
    free(ry);
    free(rp);

    /* causality: change every input after position t0; outputs up to t0 keep their bits */
    const int64_t t0 = T / 2;
    float *y0 = malloc((size_t)y->count * sizeof(float)), *q0 = malloc((size_t)qkv->count * sizeof(float));
    memcpy(y0, y->data, (size_t)y->count * sizeof(float));
    memcpy(q0, qkv->data, (size_t)qkv->count * sizeof(float));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = t0 + 1; t < T; t++)
            for (int64_t i = 0; i < 3 * C; i++)
                qkv->data[(b * T + t) * 3 * C + i] += 1.0f + 0.1f * (float)i;
    CHECK_OK(st_graph_forward(&g));
    int changed = 0, later = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < C; i++) {
                bool same = y->data[(b * T + t) * C + i] == y0[(b * T + t) * C + i];
                if (t <= t0)
                    changed += !same;
                else
                    later += !same;
            }
    CHECK(changed == 0, "%s: %d outputs at t <= %lld changed with inputs after it", label, changed,
          (long long)t0);
    if (T > 1) CHECK(later > 0, "%s: outputs after t0 did not change", label);
    memcpy(qkv->data, q0, (size_t)qkv->count * sizeof(float));
    free(y0);
    free(q0);

    gradcheck(label, &g, y, &qkv, 1, 11, 200, 1e-2, 1e-2, 1e-3);
    lc_acc_check(label, &g, &g.nodes[0], 37);

    /* a NaN in the last query reaches that output, not a silent finite value */
    const float keep = qkv->data[((B - 1) * T + T - 1) * 3 * C];
    qkv->data[((B - 1) * T + T - 1) * 3 * C] = NAN;
    CHECK_OK(st_graph_forward(&g));
    CHECK(isnan(y->data[((B - 1) * T + T - 1) * C]), "%s: a NaN query gave a finite output", label);
    qkv->data[((B - 1) * T + T - 1) * 3 * C] = keep;

    /* logits in the thousands: exp only ever sees x - max <= 0 */
    for (int64_t i = 0; i < qkv->count; i++)
        qkv->data[i] *= 30.0f;
    CHECK_OK(st_graph_forward(&g));
    ry = malloc((size_t)y->count * sizeof(double));
    rp = malloc((size_t)(B * nh * T * T) * sizeof(double));
    ref_attention(qkv->data, B, T, C, nh, ry, rp);
    lc_compare(label, "y (large logits)", y->data, ry, y->count, 1e-4, 1e-3);
    free(ry);
    free(rp);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t s2[2] = {4, 12}, s3[3] = {2, 4, 12}, s3b[3] = {2, 4, 13};
    st_tensor *x2, *x3, *x3b, *y;
    CHECK_OK(st_graph_input(&g, "x2", ST_F32, 2, s2, &x2));
    CHECK_OK(st_graph_input(&g, "x3", ST_F32, 3, s3, &x3));
    CHECK_OK(st_graph_input(&g, "x3b", ST_F32, 3, s3b, &x3b));
    CHECK_FAILS(st_attention(&g, "a", x2, 2, &y), ST_ERR_SHAPE, "(B, T, 3C)");
    CHECK_FAILS(st_attention(&g, "a", x3b, 1, &y), ST_ERR_SHAPE, "(B, T, 3C)");
    CHECK_FAILS(st_attention(&g, "a", x3, 3, &y), ST_ERR_SHAPE, "do not divide");
    CHECK_FAILS(st_attention(&g, "a", x3, 0, &y), ST_ERR_SHAPE, "do not divide");
    CHECK_OK(st_attention(&g, "a", x3, 4, &y));
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_attention(2, 5, 12, 3);
    check_attention(1, 1, 8, 2); /* T = 1 */
    check_attention(3, 7, 6, 1); /* one head, odd T */
    check_attention(2, 4, 16, 4);
    check_attention(1, 9, 10, 5);
    check_attention(2, 3, 8, 8);   /* head size 1 */
    check_attention(1, 130, 4, 2); /* longer than the layer's causal block (64): three blocks */
    check_errors();
    return st_test_finish("test_grad_attention");
}
