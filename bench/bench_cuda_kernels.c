/* One layer's backward on the GPU with each of its kernels, at the shapes a
 * GPT-2 step runs it, timed in the same process, alternating: what decides
 * whether a kernel variant that computes the same values replaces the one
 * the graph runs by default.
 *
 * Layernorm (src/cuda/layernorm.cu): the one-kernel backward holding the
 * rows as floats (the default) against ln_backward_packed_kernel holding
 * 16-bit rows as loaded (st_graph.layernorm_packed). Rows of 768 columns
 * (GPT-2 124M) with the input's gradient added to (the residual stream's:
 * 24 of the step's 25 layernorms) and written (the last), and of 1024
 * (GPT-2 medium); bf16, 16 x 1024 rows. Each side runs REPS launches of the
 * node's backward (the kernel and, with several chunks, the partial sums'
 * addition) between two synchronisations, ROUNDS times, alternating; its
 * best round is reported as microseconds a call and the bandwidth of the
 * bytes the rows move (x, dy and dx, and the gradient added to). Both start
 * from the same gradients once more at the end, and their dx, dweight and
 * dbias are compared bit for bit: the variant must compute the same values.
 *
 * Usage: bench_cuda_kernels [rounds (5) [rows (16384)]]: fewer rows for a
 * check of the program itself (under the CUDA emulator). Without a CUDA device, or in a
 * build without CUDA, it says so and exits 77. A mismatch exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "core/rng.h"
#include "layers/layers.h"
#include "model/graph.h"

enum { REPS = 50 };

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void fill(float *v, int64_t n, uint64_t seed) {
    st_rng r = st_rng_make(seed, 5);
    for (int64_t i = 0; i < n; i++)
        v[i] = 2.0f * st_rng_uniform(&r) - 1.0f;
}

typedef struct ln_case {
    int64_t R, C;
    bool acc; /* the input's gradient added to (a residual stream's) */
} ln_case;

/* xs = x + shift (an activation, stored in 16 bits), y = layernorm(xs), and
 * with acc y + xs, so that the layernorm's backward adds into xs's gradient
 * after the add wrote it (as GPT-2's residual stream). */
static st_status build(st_graph *g, const ln_case *c, st_tensor **x, st_node **ln) {
    st_tensor *shift, *xs, *y;
    const int64_t shape[2] = {c->R, c->C};
    ST_TRY(st_graph_input(g, "x", ST_F32, 2, shape, x));
    ST_TRY(st_graph_param(g, "shift", 2, shape, ST_INIT_UNIFORM, 1.0f, false, &shift));
    ST_TRY(st_add(g, "xs", *x, shift, &xs));
    ST_TRY(st_layernorm(g, "ln", xs, 1e-5f, &y));
    const int i = g->n_nodes - 1; /* (the node array grows below) */
    if (c->acc) ST_TRY(st_add(g, "res", y, xs, &y));
    ST_TRY(st_graph_finalize(g));
    *ln = &g->nodes[i];
    return ST_OK;
}

/* The node's backward REPS times; its microseconds a call */
static st_status time_backward(st_graph *g, st_node *n, double *us) {
    ST_TRY(st_device_sync(g->dev));
    const double t0 = now_us();
    for (int i = 0; i < REPS; i++)
        ST_TRY(n->ops->backward(n, g));
    ST_TRY(st_device_sync(g->dev));
    *us = (now_us() - t0) / REPS;
    return ST_OK;
}

/* dx, dweight and dbias from the same starting gradients, as floats */
static st_status one_backward(st_graph *g, st_node *n, const float *dy, const float *dx0, float *dx,
                              float *dw, float *db) {
    ST_TRY(st_tensor_write(g->dev, n->out, true, dy));
    ST_TRY(st_tensor_write(g->dev, n->in[0], true, dx0));
    ST_TRY(st_device_fill_f32(g->dev, n->params[0]->grad, (size_t)n->params[0]->count, 0.0f));
    ST_TRY(st_device_fill_f32(g->dev, n->params[1]->grad, (size_t)n->params[1]->count, 0.0f));
    ST_TRY(n->ops->backward(n, g));
    ST_TRY(st_tensor_read(g->dev, n->in[0], true, dx));
    ST_TRY(st_device_download(g->dev, dw, n->params[0]->grad, (size_t)n->params[0]->count * sizeof(float)));
    return st_device_download(g->dev, db, n->params[1]->grad, (size_t)n->params[1]->count * sizeof(float));
}

static int bench_layernorm(st_device *dev, const ln_case *c, int rounds) {
    st_params p = {0};
    st_graph g = {0};
    st_node *n = NULL;
    st_tensor *xt = NULL;
    p.dev = dev;
    const int64_t rc = c->R * c->C;
    float *h = malloc((size_t)(5 * rc + 4 * c->C) * sizeof(float));
    int bad = 1;
    if (!h || st_graph_init(&g, &p) != ST_OK) goto done;
    g.keep_acts = true;
    float *x = h, *dy = h + rc, *dx0 = h + 2 * rc, *dx[2] = {h + 3 * rc, h + 4 * rc};
    float *dw[2] = {h + 5 * rc, h + 5 * rc + c->C}, *db[2] = {h + 5 * rc + 2 * c->C, h + 5 * rc + 3 * c->C};
    double best[2] = {1e30, 1e30};
    if (st_params_set_precision(&p, ST_PREC_BF16) != ST_OK || build(&g, c, &xt, &n) != ST_OK) goto done;
    if (st_params_init(&p, 7) != ST_OK) goto done;
    fill(x, rc, 1);
    fill(dy, rc, 2);
    fill(dx0, rc, 3);
    if (st_tensor_write(dev, xt, false, x) != ST_OK || st_graph_forward(&g) != ST_OK ||
        st_tensor_write(dev, n->out, true, dy) != ST_OK || st_tensor_write(dev, n->in[0], true, dx0) != ST_OK)
        goto done;
    if (n->in_acc[0] != c->acc) {
        fprintf(stderr, "bench_cuda_kernels: the layernorm's gradient is %s, wanted %s\n",
                n->in_acc[0] ? "added to" : "written", c->acc ? "added to" : "written");
        goto done;
    }
    for (int r = -1; r < rounds; r++) /* (one warm-up round) */
        for (int v = 0; v < 2; v++) {
            double us;
            g.layernorm_packed = v == 1;
            if (time_backward(&g, n, &us) != ST_OK) goto done;
            if (r >= 0 && us < best[v]) best[v] = us;
        }
    for (int v = 0; v < 2; v++) {
        g.layernorm_packed = v == 1;
        if (one_backward(&g, n, dy, dx0, dx[v], dw[v], db[v]) != ST_OK) goto done;
    }
    const bool same = memcmp(dx[0], dx[1], (size_t)rc * sizeof(float)) == 0 &&
                      memcmp(dw[0], dw[1], (size_t)c->C * sizeof(float)) == 0 &&
                      memcmp(db[0], db[1], (size_t)c->C * sizeof(float)) == 0;
    const double bytes = (double)rc * 2 * (c->acc ? 4 : 3); /* x, dy, dx (and the dx added to), bf16 */
    printf(
        "layernorm backward %lldx%lld bf16, dx %s: floats %.1f us (%.2f TB/s), packed %.1f us (%.2f TB/s): "
        "packed/floats %.2fx; dx, dweight, dbias bit-equal: %s\n",
        (long long)c->R, (long long)c->C, c->acc ? "added to" : "written", best[0], bytes / best[0] * 1e-6,
        best[1], bytes / best[1] * 1e-6, best[0] / best[1], same ? "yes" : "NO");
    bad = same ? 0 : 1;
done:
    if (bad && !(best[0] < 1e30)) fprintf(stderr, "bench_cuda_kernels: %s\n", st_last_error());
    st_graph_free(&g);
    st_params_free(&p);
    free(h);
    return bad;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 16 * 1024;
    char why[256];
    st_device *dev = NULL;
    if (rounds < 1 || rows < 1) {
        fprintf(stderr,
                "usage: bench_cuda_kernels [rounds, at least 1 (default 5) [rows (default 16384)]]\n");
        return 2;
    }
    if (st_device_cuda_count(why, sizeof why) == 0) {
        printf("bench_cuda_kernels: skipped: %s\n", why);
        return 77;
    }
    if (st_device_open_cuda(0, &dev) != ST_OK) {
        fprintf(stderr, "bench_cuda_kernels: %s\n", st_last_error());
        return 1;
    }
    printf("device: %s; best of %d rounds of %d calls a side, alternating\n", st_device_name(dev), rounds,
           REPS);
    const ln_case cases[] = {{rows, 768, true}, {rows, 768, false}, {rows, 1024, true}};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        bad += bench_layernorm(dev, &cases[i], rounds);
    st_device_free(dev);
    return bad ? 1 : 0;
}
