/* The kernel variants a CUDA graph can run instead of its layers' defaults
 * (st_kernel_variant, st_graph.kernel_variants: the same values bit for
 * bit), each against its default on the GPU at the shapes a GPT-2 step runs
 * it, in the same process, alternating: what decides whether a variant
 * becomes the default.
 *
 * - ST_KV_LAYERNORM_PACKED: layernorm's one-kernel backward holding 16-bit
 *   rows as loaded (src/cuda/layernorm.cu ln_backward_packed_kernel), not
 *   as floats. Rows of 768 columns (GPT-2 124M) with the input's gradient
 *   added to (the residual stream's: 24 of the step's 25 layernorms) and
 *   written (the last), and of 1024 (GPT-2 medium). Timed: the node's
 *   backward (the kernel and, with several chunks, the partial sums'
 *   addition); the bandwidth counts the bytes the rows move (x, dy, dx and
 *   the gradient added to). Compared: dx, dweight, dbias.
 * - ST_KV_CE_ROWS_PREFETCH: the fused head's rows kernel loading each
 *   thread's next 16 bytes of a row before using the last
 *   (src/cuda/linear_ce.cu, kernels.cuh st_block_row_walk). GPT-2's head:
 *   768 columns, the vocabulary of 50257. Timed: the node's training
 *   forward (its products, whose time is the same on both sides, and the
 *   rows kernel); the bandwidth counts the rows kernel's bytes (the logits
 *   read and written). Compared: the loss, dh and dW.
 * - ST_KV_CE_ROWS_SHARED: the same kernel keeping each 16-bit row in
 *   shared memory between its two walks, so that the row is read from
 *   device memory once (its bandwidth counts one read and the write; the
 *   default's, two reads and the write). Timed and compared as above.
 *
 * And, not a variant, the embedding's backward on uniform and on skewed
 * tokens (bench_embedding).
 *
 * Everything in bf16 over 16 x 1024 rows. Each side runs its REPS calls
 * between two synchronisations, ROUNDS times, alternating; its best round
 * is reported as microseconds a call. Both then run once more from the same
 * state and their outputs are compared bit for bit.
 *
 * Usage: bench_cuda_kernels [rounds (5) [rows (16384) [vocabulary (50257)]]]:
 * fewer rows and a smaller vocabulary for a check of the program itself
 * (under the CUDA emulator). Without a CUDA
 * device, or in a build without CUDA, it says so and exits 77. Outputs that
 * differ exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "core/rng.h"
#include "layers/args.h"
#include "layers/layers.h"
#include "model/graph.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

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

/* x + shift: an activation (stored in 16 bits) of the shape of input x */
static st_status act_input(st_graph *g, int64_t R, int64_t C, st_tensor **x, st_tensor **xs) {
    st_tensor *shift;
    const int64_t shape[2] = {R, C};
    ST_TRY(st_graph_input(g, "x", ST_F32, 2, shape, x));
    ST_TRY(st_graph_param(g, "shift", 2, shape, ST_INIT_UNIFORM, 1.0f, false, &shift));
    return st_add(g, "xs", *x, shift, xs);
}

/* n's forward or backward `reps` times between two synchronisations, with
 * the graph's variants `kv`: its microseconds a call */
static st_status time_pass(st_graph *g, st_node *n, bool backward, unsigned kv, int reps, double *us) {
    g->kernel_variants = kv;
    ST_TRY(st_device_sync(g->dev));
    const double t0 = now_us();
    for (int i = 0; i < reps; i++)
        ST_TRY(backward ? n->ops->backward(n, g) : n->ops->forward(n, g));
    ST_TRY(st_device_sync(g->dev));
    *us = (now_us() - t0) / reps;
    return ST_OK;
}

/* The default's and the variant's best times over `rounds` alternating
 * rounds, after one of warm-up */
static st_status time_both(st_graph *g, st_node *n, bool backward, unsigned kv, int reps, int rounds,
                           double best[2]) {
    best[0] = best[1] = 1e30;
    for (int r = -1; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
            double us;
            ST_TRY(time_pass(g, n, backward, v ? kv : 0, reps, &us));
            if (r >= 0 && us < best[v]) best[v] = us;
        }
    return ST_OK;
}

/* bytes: what the default moves; vbytes, the variant's (the same, unless
 * it reads less) */
static void report(const char *what, const char *variant, const double best[2], double bytes, double vbytes,
                   bool same) {
    printf(
        "%s: default %.1f us (%.2f TB/s), %s %.1f us (%.2f TB/s): %s/default %.2fx; outputs bit-equal: %s\n",
        what, best[0], bytes / best[0] * 1e-6, variant, best[1], vbytes / best[1] * 1e-6, variant,
        best[0] / best[1], same ? "yes" : "NO");
}

/* Whether two host arrays of n floats hold the same bits */
static bool same_floats(const float *x, const float *y, int64_t n) {
    return memcmp(x, y, (size_t)n * sizeof(float)) == 0;
}

/* --- layernorm backward (ST_KV_LAYERNORM_PACKED) --------------------------- */
typedef struct ln_case {
    int64_t R, C;
    bool acc; /* the input's gradient added to (a residual stream's) */
} ln_case;

/* xs = x + shift, y = layernorm(xs), and with acc y + xs, so that the
 * layernorm's backward adds into xs's gradient after the add wrote it (as
 * GPT-2's residual stream). */
static st_status build_ln(st_graph *g, const ln_case *c, st_tensor **x, st_node **ln) {
    st_tensor *xs, *y;
    ST_TRY(act_input(g, c->R, c->C, x, &xs));
    ST_TRY(st_layernorm(g, "ln", xs, 1e-5f, &y));
    const int i = g->n_nodes - 1; /* (the node array grows below) */
    if (c->acc) ST_TRY(st_add(g, "res", y, xs, &y));
    ST_TRY(st_graph_finalize(g));
    *ln = &g->nodes[i];
    return ST_OK;
}

/* dx, dweight and dbias from the same starting gradients, as floats */
static st_status ln_once(st_graph *g, st_node *n, unsigned kv, const float *dy, const float *dx0, float *dx,
                         float *dw, float *db) {
    g->kernel_variants = kv;
    ST_TRY(st_tensor_write(g->dev, n->out, true, dy));
    ST_TRY(st_tensor_write(g->dev, n->in[0], true, dx0));
    ST_TRY(st_device_fill_f32(g->dev, n->params[0]->grad, (size_t)n->params[0]->count, 0.0f));
    ST_TRY(st_device_fill_f32(g->dev, n->params[1]->grad, (size_t)n->params[1]->count, 0.0f));
    ST_TRY(n->ops->backward(n, g));
    ST_TRY(st_tensor_read(g->dev, n->in[0], true, dx));
    ST_TRY(st_device_download(g->dev, dw, n->params[0]->grad, (size_t)n->params[0]->count * sizeof(float)));
    return st_device_download(g->dev, db, n->params[1]->grad, (size_t)n->params[1]->count * sizeof(float));
}

static st_status bench_layernorm(st_device *dev, const ln_case *c, int rounds, bool *same) {
    st_params p = {0};
    st_graph g = {0};
    st_node *n = NULL;
    st_tensor *xt = NULL;
    st_status s = ST_ERR_NOMEM;
    p.dev = dev;
    const int64_t rc = c->R * c->C;
    float *h = malloc((size_t)(5 * rc + 4 * c->C) * sizeof(float));
    if (!h) {
        s = st_fail(ST_ERR_NOMEM, "%lld floats of host memory for the layernorm's tensors",
                    (long long)(5 * rc + 4 * c->C));
        goto done;
    }
    float *x = h, *dy = h + rc, *dx0 = h + 2 * rc, *dx[2] = {h + 3 * rc, h + 4 * rc};
    float *dw[2] = {h + 5 * rc, h + 5 * rc + c->C}, *db[2] = {h + 5 * rc + 2 * c->C, h + 5 * rc + 3 * c->C};
    double best[2];
    if ((s = st_graph_init(&g, &p)) != ST_OK) goto done;
    g.keep_acts = true;
    if ((s = st_params_set_precision(&p, ST_PREC_BF16)) != ST_OK || (s = build_ln(&g, c, &xt, &n)) != ST_OK ||
        (s = st_params_init(&p, 7)) != ST_OK)
        goto done;
    fill(x, rc, 1);
    fill(dy, rc, 2);
    fill(dx0, rc, 3);
    if ((s = st_tensor_write(dev, xt, false, x)) != ST_OK || (s = st_graph_forward(&g)) != ST_OK ||
        (s = st_tensor_write(dev, n->out, true, dy)) != ST_OK ||
        (s = st_tensor_write(dev, n->in[0], true, dx0)) != ST_OK)
        goto done;
    st_params_use_compute(&p, true); /* (the weights' 16-bit copy, as a training step's passes read) */
    if (n->in_acc[0] != c->acc) {
        s = st_fail(ST_ERR_INTERNAL, "the layernorm's gradient is %s, wanted %s",
                    n->in_acc[0] ? "added to" : "written", c->acc ? "added to" : "written");
        goto done;
    }
    if ((s = time_both(&g, n, true, ST_KV_LAYERNORM_PACKED, 50, rounds, best)) != ST_OK) goto done;
    for (int v = 0; v < 2; v++)
        if ((s = ln_once(&g, n, v ? ST_KV_LAYERNORM_PACKED : 0, dy, dx0, dx[v], dw[v], db[v])) != ST_OK)
            goto done;
    *same =
        same_floats(dx[0], dx[1], rc) && same_floats(dw[0], dw[1], c->C) && same_floats(db[0], db[1], c->C);
    char what[128];
    snprintf(what, sizeof what, "layernorm backward %lldx%lld bf16, dx %s", (long long)c->R, (long long)c->C,
             c->acc ? "added to" : "written");
    const double bytes = (double)rc * 2 * (c->acc ? 4 : 3); /* (bf16) */
    report(what, "packed", best, bytes, bytes, *same);
done:
    st_graph_free(&g);
    st_params_free(&p);
    free(h);
    return s;
}

/* --- the fused head's rows (ST_KV_CE_ROWS_PREFETCH, ST_KV_CE_ROWS_SHARED) -- */
typedef struct ce_case {
    unsigned kv;
    const char *name;
    int reads; /* of the logits, by the variant's rows kernel (the default's: 2) */
} ce_case;

static st_status bench_ce_rows(st_device *dev, int64_t R, int64_t V, int rounds, const ce_case *cc,
                               bool *same) {
    enum { C = 768 };
    st_params p = {0};
    st_graph g = {0};
    st_tensor *xt, *hs, *w, *tg, *loss;
    st_node *n = NULL;
    st_status s = ST_ERR_NOMEM;
    p.dev = dev;
    float *h = malloc((size_t)(R * C) * sizeof(float));
    int32_t *t = malloc((size_t)R * sizeof(int32_t));
    float *out[2] = {NULL, NULL};
    double best[2];
    if (!h || !t) {
        s = st_fail(ST_ERR_NOMEM, "host memory for the head's %lld rows", (long long)R);
        goto done;
    }
    if ((s = st_graph_init(&g, &p)) != ST_OK) goto done;
    if ((s = st_params_set_precision(&p, ST_PREC_BF16)) != ST_OK ||
        (s = act_input(&g, R, C, &xt, &hs)) != ST_OK ||
        (s = st_graph_param(&g, "wte", 2, (int64_t[]){V, C}, ST_INIT_NORMAL, 0.02f, false, &w)) != ST_OK ||
        (s = st_graph_input(&g, "targets", ST_I32, 1, &R, &tg)) != ST_OK ||
        (s = st_linear_ce(&g, "head", hs, w, tg, ST_IGNORE_INDEX, &loss)) != ST_OK)
        goto done;
    const int ni = g.n_nodes - 1;
    if ((s = st_graph_finalize(&g)) != ST_OK || (s = st_params_init(&p, 9)) != ST_OK) goto done;
    n = &g.nodes[ni];
    st_rng r = st_rng_make(4, 1);
    for (int64_t i = 0; i < R; i++)
        t[i] = (int32_t)(st_rng_uniform(&r) * V) % V;
    fill(h, R * C, 5);
    g.training = true;
    if ((s = st_tensor_write(dev, xt, false, h)) != ST_OK ||
        (s = st_device_upload(dev, tg->idata, t, (size_t)R * sizeof(int32_t))) != ST_OK ||
        (s = st_graph_forward(&g)) != ST_OK)
        goto done;
    st_params_use_compute(&p, true);
    if ((s = time_both(&g, n, false, cc->kv, 10, rounds, best)) != ST_OK) goto done;
    /* the loss, dh (R, C) and dW (Vp, C), each side's */
    const int64_t Vp = n->args.i[ST_LCE_VP], nout = 1 + R * C + Vp * C;
    if (!(out[0] = malloc((size_t)nout * sizeof(float))) ||
        !(out[1] = malloc((size_t)nout * sizeof(float)))) {
        s = st_fail(ST_ERR_NOMEM, "2 x %lld floats of host memory for the head's outputs", (long long)nout);
        goto done;
    }
#ifdef ST_HAVE_CUDA
    const int64_t kept0 = st_cuda_kept_rows_calls(dev);
#endif
    for (int v = 0; v < 2; v++) {
        g.kernel_variants = v ? cc->kv : 0;
        if ((s = n->ops->forward(n, &g)) != ST_OK ||
            (s = st_device_download(dev, out[v], loss->data, sizeof(float))) != ST_OK ||
            (s = st_device_download(dev, out[v] + 1, ST_LCE_SAVED_DH(n), (size_t)(R * C) * sizeof(float))) !=
                ST_OK ||
            (s = st_device_download(dev, out[v] + 1 + R * C, ST_LCE_SAVED_DW(n),
                                    (size_t)(Vp * C) * sizeof(float))) != ST_OK)
            goto done;
    }
    *same = same_floats(out[0], out[1], nout);
#ifdef ST_HAVE_CUDA
    /* (the variant ran its own kernel, not the default's: a row too large
     * for the device's shared memory takes the default's) */
    if (cc->kv == ST_KV_CE_ROWS_SHARED && st_cuda_kept_rows_calls(dev) == kept0) {
        s = st_fail(ST_ERR_UNSUPPORTED,
                    "the fused head's rows were not kept in shared memory (a row of %lld bf16 logits, %lld "
                    "bytes of groups, beyond this device's opt-in for a block?): the variant ran the default",
                    (long long)V, (long long)(V / 8 * 16));
        goto done;
    }
#endif
    char what[128];
    snprintf(what, sizeof what, "fused head forward %lldx%d into %lld bf16 (the rows kernel's bytes)",
             (long long)R, C, (long long)V);
    /* (the default: read twice, written once) */
    report(what, cc->name, best, (double)R * V * 2 * 3, (double)R * V * 2 * (cc->reads + 1), *same);
done:
    st_graph_free(&g);
    st_params_free(&p);
    free(h);
    free(t);
    free(out[0]);
    free(out[1]);
    return s;
}

/* --- the embedding's backward on skewed tokens ----------------------------- */
/* Not a variant: the backward of one embedding (GPT-2's wte, 768 columns,
 * bf16 gradient) on uniformly drawn tokens and on tokens drawn by Zipf's
 * law (s = 1, rank r with weight 1/r, as words in text: the most frequent
 * about 9% of the positions). A run of equal tokens is summed in pieces of
 * 32 sorted positions (src/cuda/embedding.cu), so the skewed draw should
 * cost about what the uniform one does; before, one block summed a whole
 * run, and the longest run set the kernel's time. */
static int64_t longest_run(const int32_t *t, int64_t n, int64_t V) {
    int64_t *count = calloc((size_t)V, sizeof *count), most = 0;
    if (!count) return -1;
    for (int64_t i = 0; i < n; i++)
        if (++count[t[i]] > most) most = count[t[i]];
    free(count);
    return most;
}

static st_status bench_embedding(st_device *dev, int64_t R, int64_t V, int rounds) {
    enum { C = 768 };
    st_params p = {0};
    st_graph g = {0};
    st_tensor *idx, *y, *w;
    st_status s = ST_ERR_NOMEM;
    p.dev = dev;
    int32_t *t = malloc((size_t)R * sizeof(int32_t));
    double *cdf = malloc((size_t)V * sizeof(double));
    if (!t || !cdf) {
        s = st_fail(ST_ERR_NOMEM, "host memory for %lld tokens", (long long)R);
        goto done;
    }
    if ((s = st_graph_init(&g, &p)) != ST_OK || (s = st_params_set_precision(&p, ST_PREC_BF16)) != ST_OK ||
        (s = st_graph_input(&g, "idx", ST_I32, 1, &R, &idx)) != ST_OK ||
        (s = st_embedding(&g, "wte", idx, V, C, 0.02f, &y, &w)) != ST_OK)
        goto done;
    const int ni = g.n_nodes - 1;
    if ((s = st_graph_finalize(&g)) != ST_OK || (s = st_params_init(&p, 9)) != ST_OK) goto done;
    st_node *n = &g.nodes[ni];
    double sum = 0;
    for (int64_t r = 0; r < V; r++)
        cdf[r] = sum += 1.0 / (double)(r + 1);
    double us[2] = {1e30, 1e30};
    int64_t run[2];
    for (int zipf = 0; zipf < 2; zipf++) {
        st_rng r = st_rng_make(7, (uint64_t)zipf);
        for (int64_t i = 0; i < R; i++) {
            const double u = (double)st_rng_uniform(&r);
            if (!zipf) {
                t[i] = (int32_t)(u * (double)V) % (int32_t)V;
                continue;
            }
            int64_t lo = 0, hi = V - 1; /* the first rank whose cumulative weight passes u * sum */
            while (lo < hi) {
                const int64_t mid = (lo + hi) / 2;
                if (cdf[mid] < u * sum)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            t[i] = (int32_t)lo;
        }
        run[zipf] = longest_run(t, R, V);
        g.training = true;
        if ((s = st_device_upload(dev, idx->idata, t, (size_t)R * sizeof(int32_t))) != ST_OK ||
            (s = st_graph_forward(&g)) != ST_OK)
            goto done;
        for (int k = -1; k < rounds; k++) {
            double one;
            if ((s = time_pass(&g, n, true, 0, 20, &one)) != ST_OK) goto done;
            if (k >= 0 && one < us[zipf]) us[zipf] = one;
        }
    }
    printf(
        "embedding backward %lld tokens into %lldx%d, bf16 gradient: uniform tokens (the most frequent %lld "
        "times) %.1f us, Zipf s=1 (%lld times) %.1f us: Zipf/uniform %.2fx\n",
        (long long)R, (long long)V, C, (long long)run[0], us[0], (long long)run[1], us[1], us[1] / us[0]);
done:
    st_graph_free(&g);
    st_params_free(&p);
    free(t);
    free(cdf);
    return s;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 16 * 1024, vocab = argc > 3 ? atoll(argv[3]) : 50257;
    char why[256];
    st_device *dev = NULL;
    if (rounds < 1 || rows < 1 || vocab < 2) {
        fprintf(stderr, "usage: bench_cuda_kernels [rounds, at least 1 (default 5) [rows (default 16384) "
                        "[vocabulary (default 50257)]]]\n");
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
    printf("device: %s; each side's best of %d rounds, alternating\n", st_device_name(dev), rounds);
    const ln_case cases[] = {{rows, 768, true}, {rows, 768, false}, {rows, 1024, true}};
    const ce_case heads[] = {{ST_KV_CE_ROWS_PREFETCH, "prefetch", 2}, {ST_KV_CE_ROWS_SHARED, "shared", 1}};
    const size_t nln = sizeof cases / sizeof *cases, nh = sizeof heads / sizeof *heads;
    int bad = 0;
    for (size_t i = 0; i < nln + nh; i++) {
        bool same = false;
        const st_status s = i < nln ? bench_layernorm(dev, &cases[i], rounds, &same)
                                    : bench_ce_rows(dev, rows, vocab, rounds, &heads[i - nln], &same);
        fflush(stdout);
        if (s != ST_OK) fprintf(stderr, "bench_cuda_kernels: %s\n", st_last_error());
        bad += s != ST_OK || !same;
    }
    if (bench_embedding(dev, rows, vocab, rounds) != ST_OK) {
        fprintf(stderr, "bench_cuda_kernels: %s\n", st_last_error());
        bad++;
    }
    st_device_free(dev);
    return bad ? 1 : 0;
}
