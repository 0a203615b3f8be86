/* Forward + backward timing of the hot CNN and GPT layers: conv2d at the
 * Fashion-MNIST CNN sizes and causal attention at the small GPT size.
 *
 * Prints the median ms of forward and backward over a few repetitions and the
 * achieved GFLOP/s, counting 2 flops per multiply-add of the sgemm work
 * (attention counts the full T x T products, masked half included). For
 * comparison it also times one bare sgemm of the conv's forward shape, which
 * is the ceiling the im2col method can reach. Batchnorm and maxpool, which
 * are memory-bound, are timed at the CNN's first block for reference, and
 * layernorm and GELU at the small GPT's rows.
 * Thread count: OMP_NUM_THREADS.
 *
 * Usage: bench_layers [reps]   (default 7) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blas.h"
#include "core/rng.h"
#include "core/stats.h"
#include "layers/args.h"
#include "layers/layers.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double median(double *v, int n) { return st_median(v, (size_t)n); }

static void fill(float *x, int64_t n, uint64_t seed) {
    st_rng r = st_rng_make(seed, 1);
    for (int64_t i = 0; i < n; i++)
        x[i] = 2.0f * st_rng_uniform(&r) - 1.0f;
}

/* Times forward and backward of the single node of g; returns 0 on success. */
static int time_node(st_graph *g, int reps, double *fwd_ms, double *bwd_ms) {
    st_node *n = &g->nodes[0];
    double *tf = malloc((size_t)reps * sizeof(double)), *tb = malloc((size_t)reps * sizeof(double));
    fill(n->out->grad, n->out->count, 3);
    int rc = 0;
    for (int r = -1; r < reps; r++) { /* one warm-up */
        double t0 = now_ms();
        if (n->ops->forward(n, g) != ST_OK) rc = 1;
        double t1 = now_ms();
        if (n->ops->backward(n, g) != ST_OK) rc = 1;
        double t2 = now_ms();
        if (r >= 0) {
            tf[r] = t1 - t0;
            tb[r] = t2 - t1;
        }
    }
    *fwd_ms = median(tf, reps);
    *bwd_ms = median(tb, reps);
    free(tf);
    free(tb);
    return rc;
}

static int bench_conv(int64_t B, int64_t H, int64_t Cin, int64_t Cout, bool x_grad, int reps) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[4] = {B, H, H, Cin};
    st_tensor *x, *y;
    st_status s = x_grad ? st_graph_param(&g, "x", 4, xs, ST_INIT_UNIFORM, 1.0f, false, &x)
                         : st_graph_input(&g, "x", ST_F32, 4, xs, &x);
    if (s == ST_OK) s = st_conv2d(&g, "conv", x, Cout, 3, 1, 1, true, &y);
    if (s == ST_OK) s = st_graph_finalize(&g);
    if (s != ST_OK) {
        fprintf(stderr, "bench_layers: conv build failed: %s\n", st_last_error());
        return 1;
    }
    st_params_init(&p, 1);
    if (!x_grad) fill(x->data, x->count, 2);
    /* Winograd (when it applies) against im2col on the same node and
     * workspace, alternating, each side's best of two medians */
    st_node *node = &g.nodes[0];
    const bool wino = node->args.i[ST_CONV_WINO] != 0;
    double f = 1e30, b = 1e30, fi = 1e30, bi = 1e30;
    int rc = 0;
    for (int round = 0; round < (wino ? 2 : 1); round++) {
        double tf, tb;
        node->args.i[ST_CONV_WINO] = wino;
        rc |= time_node(&g, reps, &tf, &tb);
        if (tf + tb < f + b) f = tf, b = tb;
        if (!wino) break;
        node->args.i[ST_CONV_WINO] = 0;
        rc |= time_node(&g, reps, &tf, &tb);
        if (tf + tb < fi + bi) fi = tf, bi = tb;
    }
    node->args.i[ST_CONV_WINO] = wino;
    const double M = (double)(B * H * H), K = (double)(Cin * 9);
    const double fl_f = 2.0 * M * K * (double)Cout, fl_b = fl_f * (x_grad ? 2.0 : 1.0);
    /* the bare sgemm of the forward shape, from the same im2col-sized buffers */
    float *a = malloc((size_t)(M * K) * sizeof(float)), *c = malloc((size_t)M * (size_t)Cout * sizeof(float));
    fill(a, (int64_t)(M * K), 4);
    double *ts = malloc((size_t)reps * sizeof(double));
    for (int r = -1; r < reps; r++) {
        double t0 = now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)Cout, (int)K, 1.0f, a, (int)K,
                    p.t[0]->data, (int)K, 0.0f, c, (int)Cout);
        if (r >= 0) ts[r] = now_ms() - t0;
    }
    double sg = median(ts, reps);
    printf("conv2d  B%lld %2lldx%-2lld %3lld->%-3lld k3 p1%s  fwd %7.2f ms  bwd %7.2f ms  total %7.2f ms  "
           "%6.1f GFLOP/s   (bare fwd sgemm %6.2f ms, %6.1f GFLOP/s)\n",
           (long long)B, (long long)H, (long long)H, (long long)Cin, (long long)Cout,
           x_grad ? "      " : " no-dx", f, b, f + b, (fl_f + fl_b) / ((f + b) * 1e6), sg, fl_f / (sg * 1e6));
    if (wino)
        printf("        (Winograd F(2x2,3x3) above; im2col + sgemm: fwd %7.2f ms  bwd %7.2f ms  total %7.2f ms, "
               "Winograd %.2fx faster)\n",
               fi, bi, fi + bi, (fi + bi) / (f + b));
    free(a);
    free(c);
    free(ts);
    st_graph_free(&g);
    st_params_free(&p);
    return rc;
}

static int bench_attention(int64_t B, int64_t T, int64_t C, int64_t nh, int reps) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t qs[3] = {B, T, 3 * C};
    st_tensor *qkv, *y;
    st_status s = st_graph_param(&g, "qkv", 3, qs, ST_INIT_UNIFORM, 1.0f, false, &qkv);
    if (s == ST_OK) s = st_attention(&g, "attn", qkv, nh, &y);
    if (s == ST_OK) s = st_graph_finalize(&g);
    if (s != ST_OK) {
        fprintf(stderr, "bench_layers: attention build failed: %s\n", st_last_error());
        return 1;
    }
    st_params_init(&p, 1);
    double f, b;
    int rc = time_node(&g, reps, &f, &b);
    const double one =
        2.0 * (double)(B * nh) * (double)(T * T) * (double)(C / nh); /* one T x T x hs product */
    printf("attention B%lld T%lld C%lld heads%lld        fwd %7.2f ms  bwd %7.2f ms  total %7.2f ms  "
           "%6.1f GFLOP/s\n",
           (long long)B, (long long)T, (long long)C, (long long)nh, f, b, f + b, 6.0 * one / ((f + b) * 1e6));
    st_graph_free(&g);
    st_params_free(&p);
    return rc;
}

/* Each node of g alone (a view of g with that node only), in training
 * mode, printed with its label: memory-bound layers. */
static int time_each(st_graph *g, const char *const *labels, int reps) {
    g->training = true;
    st_graph one = *g;
    int rc = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        double f, b;
        one.nodes = &g->nodes[i];
        one.n_nodes = 1;
        rc |= time_node(&one, reps, &f, &b);
        printf("%-36s fwd %7.3f ms  bwd %7.3f ms  total %7.3f ms\n", labels[i], f, b, f + b);
    }
    return rc;
}

/* batchnorm (training) and maxpool at the CNN's first block, layernorm and
 * GELU at the small GPT's rows (B T tokens of C channels; GELU on the
 * MLP's 4C): memory-bound passes */
static int bench_cheap(int64_t B, int64_t H, int64_t C, int64_t R, int64_t E, int reps) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[4] = {B, H, H, C}, rs[2] = {R, E}, hs[2] = {R, 4 * E};
    st_tensor *x, *r, *h, *y;
    st_status s = st_graph_param(&g, "x", 4, xs, ST_INIT_UNIFORM, 1.0f, false, &x);
    if (s == ST_OK) s = st_graph_param(&g, "r", 2, rs, ST_INIT_UNIFORM, 1.0f, false, &r);
    if (s == ST_OK) s = st_graph_param(&g, "h", 2, hs, ST_INIT_UNIFORM, 1.0f, false, &h);
    if (s == ST_OK) s = st_batchnorm(&g, "bn", x, 1e-5f, 0.1f, &y);
    if (s == ST_OK) s = st_maxpool2d(&g, "pool", x, 2, 2, &y);
    if (s == ST_OK) s = st_layernorm(&g, "ln", r, 1e-5f, &y);
    if (s == ST_OK) s = st_gelu(&g, "gelu", h, &y);
    if (s == ST_OK) s = st_graph_finalize(&g);
    if (s != ST_OK) {
        fprintf(stderr, "bench_layers: batchnorm/maxpool/layernorm/gelu build failed: %s\n", st_last_error());
        return 1;
    }
    st_params_init(&p, 1);
    char l[4][64];
    const double mb = (double)x->count * 4.0 / 1e6;
    snprintf(l[0], sizeof l[0], "batchnorm B%lld %lldx%lld C%lld (%.0f MB in)", (long long)B, (long long)H,
             (long long)H, (long long)C, mb);
    snprintf(l[1], sizeof l[1], "maxpool2  B%lld %lldx%lld C%lld (%.0f MB in)", (long long)B, (long long)H,
             (long long)H, (long long)C, mb);
    snprintf(l[2], sizeof l[2], "layernorm %lld rows x %lld", (long long)R, (long long)E);
    snprintf(l[3], sizeof l[3], "gelu      %lld rows x %lld", (long long)R, (long long)(4 * E));
    const char *const labels[4] = {l[0], l[1], l[2], l[3]};
    const int rc = time_each(&g, labels, reps);
    st_graph_free(&g);
    st_params_free(&p);
    return rc;
}

int main(int argc, char **argv) {
    st_blas_core_check(argv); /* the kernels scaletrain runs (may start this program again) */
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_layers [reps >= 1]\n");
        return 2;
    }
    printf("bench_layers: %d OpenMP threads, median of %d\n", omp_get_max_threads(), reps);
    int rc = 0;
    rc |= bench_conv(128, 28, 1, 32, false, reps);
    rc |= bench_conv(128, 28, 32, 64, true, reps);
    rc |= bench_conv(128, 14, 64, 128, true, reps);
    rc |= bench_attention(8, 256, 256, 4, reps);
    rc |= bench_cheap(128, 28, 64, 8 * 256, 256, reps);
    return rc;
}
