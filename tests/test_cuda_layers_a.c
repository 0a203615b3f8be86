/* CUDA parity of the matrix-product, embedding, normalisation, elementwise
 * and loss layers against the CPU reference (tests/cuda_parity.h). Skips
 * without a CUDA device.
 *
 * Tolerances (fp32, |dev - host| <= atol + rtol |host|): rtol 1e-4 with atol
 * 1e-5 for values of order one. The device sums in other orders than the CPU
 * (cuBLASLt's k-split, warp and block trees, chunked column sums) and uses
 * CUDA's expf/tanhf (2 ulp) where the CPU uses glibc and core/fastmath.h, so
 * results agree to rounding (a few 1e-7 relative per sum of hundreds of
 * terms), not bits; 1e-4 leaves room for cancellation in long sums. Where the
 * values themselves are tiny (softmax gradients over 50257 classes, about
 * 1e-6 each) atol shrinks so that it never hides an error. Sizes are odd on
 * purpose (not multiples of a warp or block), and GPT-2's (C 768, V 50257)
 * appear; graphs are shaped so that inputs' gradients are both written and
 * added (in_acc), and a parameter in front of each layer makes its input
 * gradient checked.
 *
 * bf16 and fp16 (docs/precision.md, "On a CUDA device"): the linear layer
 * (its 16-bit tensor-core path), the tied head and a few elementwise layers
 * again with both graphs in that precision, the host emulating the device's
 * rounding. Operands are the same 16-bit values on both sides and the sums
 * are fp32, so an output differs only where the two fp32 sums fall on either
 * side of a 16-bit rounding boundary: by one unit in the last place, at most
 * 2^-7 (bf16) or 2^-10 (fp16) of the value, and that difference travels on
 * into later sums (a weight gradient over a few rows moves by a unit of one
 * term). |dev - host| <= rtol |host| + atol max|host| per tensor, rtol 1e-2
 * / 1.5e-3, atol 2e-2 / 3e-3 (bf16 / fp16); CP_REPORT=1 prints the
 * measured (|dev - host| - rtol |host|) / max|host| of every tensor. Checked
 * on the CPU by perturbing two emulated runs' non-elementwise outputs by up
 * to 5e-6 relative before each rounding: every case passed (typically below
 * 0.006 / 0.0008). The rounding points are checked exactly (cuda_parity.h:
 * every activation and its gradient a 16-bit value, the compute copy of the
 * weights the host's bits). */
#include "cuda_parity.h"
#include "layers/layers.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

/* A float input of `shape` plus a parameter of the same shape (so that the
 * layer under test has an input gradient to compute). */
static st_status input_plus(st_graph *g, const char *name, int ndim, const int64_t *shape, st_tensor **out) {
    st_tensor *x, *s;
    char n2[64];
    ST_TRY(st_graph_input(g, name, ST_F32, ndim, shape, &x));
    snprintf(n2, sizeof n2, "%s.shift", name);
    ST_TRY(st_graph_param(g, n2, ndim, shape, ST_INIT_UNIFORM, 1.0f, false, &s));
    snprintf(n2, sizeof n2, "%s.plus", name);
    return st_add(g, n2, x, s, out);
}

/* --- linear ------------------------------------------------------------- */
typedef struct linear_ctx {
    int64_t B, K, N;
    bool bias, in_out, twice; /* twice: two linears read x, so dx is written then added */
    bool bgrad;               /* the bias gradient in dW's epilogue (st_graph.fuse_bias_grad) */
} linear_ctx;

static st_status build_linear(st_graph *g, void *ctx) {
    const linear_ctx *c = ctx;
    st_tensor *xs, *y, *y2;
    g->fuse_bias_grad = c->bgrad; /* (before finalize: the scratch it needs) */
    ST_TRY(input_plus(g, "x", 2, (int64_t[]){c->B, c->K}, &xs));
    st_linear_opts o = {.bias = c->bias, .in_out = c->in_out};
    ST_TRY(st_linear(g, "fc", xs, c->N, &o, &y));
    if (!c->twice) return ST_OK;
    st_linear_opts o2 = {.bias = !c->bias, .in_out = !c->in_out};
    ST_TRY(st_linear(g, "fc2", xs, c->N, &o2, &y2));
    return st_add(g, "sum", y, y2, &y);
}

static void linear_label(char *buf, size_t n, const char *prec, const linear_ctx *c) {
    snprintf(buf, n, "%slinear %lldx%lld->%lld%s%s%s%s", prec, (long long)c->B, (long long)c->K,
             (long long)c->N, c->bias ? " bias" : "", c->in_out ? " in_out" : "",
             c->twice ? " +second reader" : "", c->bgrad ? ", db in dW's epilogue" : "");
}

/* --- embedding (+ tied head) ---------------------------------------------- */
typedef struct emb_ctx {
    int64_t V, B, T, C; /* V first: fill_tokens reads it */
    bool head;          /* layernorm, tied linear and softmax_ce on top (a tiny GPT head) */
} emb_ctx;

static st_status build_embedding(st_graph *g, void *ctx) {
    const emb_ctx *c = ctx;
    st_tensor *idx, *y, *w;
    ST_TRY(st_graph_input(g, "idx", ST_I32, 2, (int64_t[]){c->B, c->T}, &idx));
    ST_TRY(st_embedding(g, "wte", idx, c->V, c->C, 0.5f, &y, &w));
    if (!c->head) return ST_OK;
    st_tensor *tg, *h, *logits, *loss;
    ST_TRY(st_graph_input(g, "targets", ST_I32, 2, (int64_t[]){c->B, c->T}, &tg));
    ST_TRY(st_layernorm(g, "ln_f", y, 1e-5f, &h));
    ST_TRY(st_linear_tied(g, "lm_head", h, w, &logits));
    return st_softmax_ce(g, "ce", logits, tg, ST_IGNORE_INDEX, &loss);
}

/* Token ids below V (with repeats when V is small), targets below V with
 * about one in five ignored. */
static void fill_tokens(st_graph *g, st_rng *r, void *ctx) {
    const int64_t V = *(const int64_t *)ctx; /* every ctx below starts with its class count */
    for (int i = 0; i < g->n_acts; i++) {
        st_tensor *t = g->acts[i];
        if (t->kind != ST_TENSOR_INPUT || t->dtype != ST_I32) continue;
        const bool targets = strcmp(t->name, "targets") == 0;
        for (int64_t j = 0; j < t->count; j++)
            t->idata[j] =
                targets && st_rng_uniform(r) < 0.2f ? ST_IGNORE_INDEX : (int32_t)st_rng_below(r, (uint64_t)V);
    }
}

/* --- pos_embedding -------------------------------------------------------- */
typedef struct posemb_ctx {
    int64_t B, T, C, max_len;
} posemb_ctx;

static st_status build_posemb(st_graph *g, void *ctx) {
    const posemb_ctx *c = ctx;
    st_tensor *xs, *y;
    ST_TRY(input_plus(g, "x", 3, (int64_t[]){c->B, c->T, c->C}, &xs));
    return st_pos_embedding(g, "wpe", xs, c->max_len, 0.3f, &y);
}

/* --- one-input layers: layernorm, gelu, relu, dropout ---------------------- */
typedef enum unary_kind { U_LAYERNORM, U_GELU, U_RELU, U_DROPOUT } unary_kind;
typedef struct unary_ctx {
    unary_kind kind;
    int64_t R, C;
    bool residual; /* y = f(xs) + xs: the layer's dx is added onto the residual's */
    float p;       /* dropout */
    bool misalign; /* layernorm: a 1-element parameter first, so that its weight and bias are not
                      16-byte aligned in the arena (layernorm.cu reads them an element at a time) */
    bool packed;   /* layernorm: ST_KV_LAYERNORM_PACKED (16-bit rows held as loaded in backward) */
} unary_ctx;

static st_status build_unary(st_graph *g, void *ctx) {
    const unary_ctx *c = ctx;
    st_tensor *xs, *y;
    ST_TRY(input_plus(g, "x", 2, (int64_t[]){c->R, c->C}, &xs));
    g->kernel_variants = c->packed ? ST_KV_LAYERNORM_PACKED : 0;
    switch (c->kind) {
    case U_LAYERNORM:
        if (c->misalign) {
            st_tensor *pad;
            ST_TRY(st_graph_param(g, "pad", 1, (int64_t[]){1}, ST_INIT_UNIFORM, 1.0f, false, &pad));
        }
        ST_TRY(st_layernorm(g, "ln", xs, 1e-5f, &y));
        break;
    case U_GELU:
        ST_TRY(st_gelu(g, "gelu", xs, &y));
        break;
    case U_RELU:
        ST_TRY(st_relu(g, "relu", xs, &y));
        break;
    case U_DROPOUT:
        ST_TRY(st_dropout(g, "drop", xs, c->p, &y));
        break;
    }
    if (c->residual) ST_TRY(st_add(g, "res", y, xs, &y));
    return ST_OK;
}

/* --- add ------------------------------------------------------------------ */
typedef struct add_ctx {
    int64_t n;
    bool same; /* a + a: the second input's gradient adds onto the first's */
} add_ctx;

static st_status build_add(st_graph *g, void *ctx) {
    const add_ctx *c = ctx;
    st_tensor *a, *b, *y;
    ST_TRY(input_plus(g, "a", 1, &c->n, &a));
    if (c->same) return st_add(g, "twice", a, a, &y);
    ST_TRY(input_plus(g, "b", 1, &c->n, &b));
    return st_add(g, "sum", a, b, &y);
}

/* --- softmax_ce ------------------------------------------------------------- */
typedef struct ce_ctx {
    int64_t V, R; /* V first: fill_tokens reads it */
    bool all_ignored;
} ce_ctx;

static st_status build_ce(st_graph *g, void *ctx) {
    const ce_ctx *c = ctx;
    st_tensor *xs, *tg, *loss;
    ST_TRY(input_plus(g, "logits", 2, (int64_t[]){c->R, c->V}, &xs));
    ST_TRY(st_graph_input(g, "targets", ST_I32, 1, &c->R, &tg));
    return st_softmax_ce(g, "ce", xs, tg, ST_IGNORE_INDEX, &loss);
}

static void fill_ce(st_graph *g, st_rng *r, void *ctx) {
    const ce_ctx *c = ctx;
    fill_tokens(g, r, ctx);
    if (!c->all_ignored) return;
    for (int i = 0; i < g->n_acts; i++)
        if (strcmp(g->acts[i]->name, "targets") == 0)
            for (int64_t j = 0; j < g->acts[i]->count; j++)
                g->acts[i]->idata[j] = ST_IGNORE_INDEX;
}

/* ReLU and dropout (p 0.5, training) of NaN, infinities and -0 on the
 * device: the host's values, a NaN kept where it came in (never the 0 that
 * would hide it) and a dropped infinity NaN (x times 0, as PyTorch). */
static void check_act_nonfinite(st_device *dev, uint64_t seed) {
    const int64_t n = 64;
    for (int kind = 0; kind < 2; kind++) {
        st_params hp = {0}, dp = {0};
        dp.dev = dev;
        st_graph hg, dg;
        st_graph_init(&hg, &hp);
        st_graph_init(&dg, &dp);
        st_tensor *x[2], *y[2];
        st_graph *gs[2] = {&hg, &dg};
        for (int s = 0; s < 2; s++) {
            CHECK_OK(st_graph_input(gs[s], "x", ST_F32, 1, &n, &x[s]));
            if (kind == 0)
                CHECK_OK(st_relu(gs[s], "relu", x[s], &y[s]));
            else
                CHECK_OK(st_dropout(gs[s], "drop", x[s], 0.5f, &y[s]));
            CHECK_OK(st_graph_finalize(gs[s]));
            gs[s]->training = true;
            gs[s]->dropout_seed = seed;
        }
        const float v[6] = {NAN, -1.0f, 2.0f, -0.0f, INFINITY, -INFINITY};
        for (int64_t j = 0; j < n; j++)
            x[0]->data[j] = v[j % 6];
        CHECK_OK(st_device_upload(dev, x[1]->data, x[0]->data, (size_t)n * sizeof(float)));
        CHECK_OK(st_graph_forward(&hg));
        CHECK_OK(st_graph_forward(&dg));
        float got[64];
        CHECK_OK(st_tensor_read(dev, y[1], false, got));
        int bad = 0, nans = 0;
        for (int64_t j = 0; j < n; j++) {
            const float h = y[0]->data[j];
            bad += isnan(h) ? !isnan(got[j]) : got[j] != h;
            nans += isnan(got[j]);
        }
        CHECK(bad == 0 && nans >= n / 6,
              "%s of NaN, infinities and -0: %d of %lld elements differ on the device, %d NaN",
              kind ? "dropout" : "relu", bad, (long long)n, nans);
        st_graph_free(&hg);
        st_graph_free(&dg);
        st_params_free(&hp);
        st_params_free(&dp);
    }
}

/* A NaN or an Inf logit makes its row's loss, and so the loss, NaN on the
 * device (kernels.cuh st_block_row_lse: one pass with a running max), while
 * the same rows without it give the host's loss; V 50257 on 1024 threads a
 * row, the bad logit placed in each thread's running-max path (first) or
 * its sum path (last); and a masked row, -inf but for its target and a NaN
 * at column 0, so that the thread holding the NaN has no finite logit (its
 * running max stays -inf: its sum, NaN, must still reach the row's). */
static void check_ce_nonfinite(st_device *dev, uint64_t seed) {
    const int64_t R = 4, V = 50257;
    const float bad[] = {NAN, INFINITY, NAN, INFINITY};
    const int64_t at[] = {0, 0, V - 1, V - 1};
    for (int k = 0; k < 6; k++) { /* k 4: all finite, against the host; k 5: the masked row */
        st_params hp = {0}, dp = {0};
        dp.dev = dev;
        st_graph hg, dg;
        st_graph_init(&hg, &hp);
        st_graph_init(&dg, &dp);
        st_tensor *x[2], *tg[2], *loss[2];
        st_graph *gs[2] = {&hg, &dg};
        for (int s = 0; s < 2; s++) {
            CHECK_OK(st_graph_input(gs[s], "logits", ST_F32, 2, (int64_t[]){R, V}, &x[s]));
            CHECK_OK(st_graph_input(gs[s], "targets", ST_I32, 1, &R, &tg[s]));
            CHECK_OK(st_softmax_ce(gs[s], "ce", x[s], tg[s], ST_IGNORE_INDEX, &loss[s]));
            CHECK_OK(st_graph_finalize(gs[s]));
        }
        st_rng r = st_rng_make(seed + (uint64_t)k, 5);
        for (int64_t j = 0; j < R * V; j++)
            x[0]->data[j] = 8.0f * st_rng_uniform(&r) - 4.0f;
        for (int64_t j = 0; j < R; j++)
            tg[0]->idata[j] = (int32_t)(st_rng_uniform(&r) * (float)V) % (int32_t)V;
        if (k < 4) x[0]->data[2 * V + at[k]] = bad[k];
        if (k == 5) {
            for (int64_t j = 0; j < V; j++)
                x[0]->data[2 * V + j] = -INFINITY;
            x[0]->data[2 * V] = NAN;
            x[0]->data[2 * V + V / 2] = 1.0f;
            tg[0]->idata[2] = (int32_t)(V / 2);
        }
        CHECK_OK(st_device_upload(dev, x[1]->data, x[0]->data, (size_t)(R * V) * sizeof(float)));
        CHECK_OK(st_device_upload(dev, tg[1]->idata, tg[0]->idata, (size_t)R * sizeof(int32_t)));
        hg.training = dg.training = false;
        CHECK_OK(st_graph_forward(&hg));
        CHECK_OK(st_graph_forward(&dg));
        float got = 0;
        CHECK_OK(st_tensor_read(dev, loss[1], false, &got));
        if (k < 4)
            CHECK(isnan(got), "softmax_ce: a %s logit at column %lld gave the loss %g on the device, not NaN",
                  isnan(bad[k]) ? "NaN" : "+Inf", (long long)at[k], (double)got);
        else if (k == 5)
            CHECK(
                isnan(got) && isnan(loss[0]->data[0]),
                "softmax_ce: a masked row with a NaN gave the loss %g on the device, %g on the host, not NaN",
                (double)got, (double)loss[0]->data[0]);
        else
            CHECK(fabs((double)got - (double)loss[0]->data[0]) <= 1e-5 * fabs((double)loss[0]->data[0]),
                  "softmax_ce %lld x %lld: loss %.9g on the device, %.9g on the host", (long long)R,
                  (long long)V, (double)got, (double)loss[0]->data[0]);
        st_graph_free(&hg);
        st_graph_free(&dg);
        st_params_free(&hp);
        st_params_free(&dp);
    }
    printf("ok   softmax_ce %lld x %lld: a NaN or an Inf logit, in a masked row too, makes the device's loss "
           "NaN\n",
           (long long)R, (long long)V);
}

/* --- mse -------------------------------------------------------------------- */
typedef struct mse_ctx {
    int64_t n;
    bool target_grad; /* the target depends on a parameter too */
} mse_ctx;

static st_status build_mse(st_graph *g, void *ctx) {
    const mse_ctx *c = ctx;
    st_tensor *p, *t, *loss;
    ST_TRY(input_plus(g, "pred", 1, &c->n, &p));
    if (c->target_grad)
        ST_TRY(input_plus(g, "target", 1, &c->n, &t));
    else
        ST_TRY(st_graph_input(g, "target", ST_F32, 1, &c->n, &t));
    return st_mse(g, "mse", p, t, &loss);
}

/* With CP_SMALL set (e.g. under compute-sanitizer, which runs kernels many
 * times slower), cases whose largest tensor exceeds 2^16 elements are left out. */
static int run_prec(const char *label, int64_t largest, cp_build_fn build, cp_fill_fn fill, void *ctx,
                    double rtol, double atol, bool eval, st_precision prec, st_device *dev, uint64_t seed) {
    if (getenv("CP_SMALL") && largest > 65536) {
        printf("left out (CP_SMALL) %s\n", label);
        return 0;
    }
    cp_case c = {label, build, fill, ctx, rtol, atol, eval, prec, 0};
    return cp_run(&c, dev, seed);
}

static int run(const char *label, int64_t largest, cp_build_fn build, cp_fill_fn fill, void *ctx, double rtol,
               double atol, bool eval, st_device *dev, uint64_t seed) {
    return run_prec(label, largest, build, fill, ctx, rtol, atol, eval, ST_PREC_FP32, dev, seed);
}

int main(void) {
    st_device *dev = NULL;
    /* ST_CP_SELFTEST set: every case host against host (a check of the test
     * and of the emulation's rounding points, not of the kernels). */
    int rc = getenv("ST_CP_SELFTEST") ? 0 : cp_open(&dev);
    if (rc) return rc;
    const uint64_t seed = cp_seed();
    char label[128];
    uint64_t k = 0;

    /* the last three: the bias gradient in dW's epilogue (BGRADB; in_out BGRADA) */
    const linear_ctx lin[] = {
        {8, 16, 24, true, false, false, false},     {37, 65, 33, false, true, false, false},
        {128, 768, 2304, true, true, false, false}, {31, 97, 50, true, false, true, false},
        {64, 768, 768, false, false, true, false},  {1, 3, 1, true, true, false, false},
        {8, 16, 24, true, false, false, true},      {128, 768, 2304, true, true, false, true},
        {31, 97, 50, true, false, true, true}};
    const size_t lin_bgrad = 6;
    int64_t bgrad0 = 0;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        if (i == lin_bgrad) bgrad0 = cp_bgrad_count(dev);
        linear_label(label, sizeof label, "", &lin[i]);
        run(label, lin[i].B * lin[i].K + lin[i].K * lin[i].N + lin[i].B * lin[i].N, build_linear, NULL,
            (void *)&lin[i], 1e-4, 1e-5, false, dev, seed + k++);
    }
    cp_check_bgrad(dev, bgrad0, false, "fp32 linear cases with db in dW's epilogue");
#ifdef ST_HAVE_CUDA
    /* The cuBLASLt plans are the device's (matmul.cu): the same case again
     * (new graphs, the same shapes and alignments) makes no plan and finds
     * each of its products' plans (a forward and three backward products per
     * linear, two linears). */
    if (dev) {
        int64_t plans0, hits0, misses0, plans1, hits1, misses1;
        st_cuda_matmul_plan_stats(dev, &plans0, &hits0, &misses0);
        CHECK(plans0 > 0 && misses0 == plans0, "plan cache after the linear cases: %lld plans, %lld misses",
              (long long)plans0, (long long)misses0);
        run("linear 31x97->50 bias +second reader, again", 31 * 97 + 97 * 50 + 31 * 50, build_linear, NULL,
            (void *)&lin[3], 1e-4, 1e-5, false, dev, seed + k++);
        st_cuda_matmul_plan_stats(dev, &plans1, &hits1, &misses1);
        CHECK(plans1 == plans0 && misses1 == misses0 && hits1 - hits0 >= 6,
              "plan cache, the same linear case again: plans %lld -> %lld, misses %lld -> %lld, hits %lld -> "
              "%lld (expected no new plan and at least 6 hits)",
              (long long)plans0, (long long)plans1, (long long)misses0, (long long)misses1, (long long)hits0,
              (long long)hits1);
    }
    /* model.matmul_tune (docs/cuda.md, "Choosing cuBLASLt's algorithm"): shapes no case above made a
     * plan for, each plan's first product timing the heuristic's algorithms
     * (the emulator's three, one refusing when it runs): products writing D
     * (beta 0), adding to it (dW, and a second reader's dx: D kept on the
     * host while the candidates run), with a bias, and with the bias
     * gradient in dW's epilogue, in fp32 and bf16; every value as without */
    if (dev) {
        const linear_ctx tl[] = {{29, 40, 56, true, false, true, false},
                                 {29, 40, 56, true, true, false, true}};
        int64_t plans0, hits0, misses0, plans1, hits1, misses1;
        st_cuda_tune_stats t0, t1;
        st_cuda_matmul_tune_stats(dev, &t0);
        st_cuda_matmul_plan_stats(dev, &plans0, &hits0, &misses0);
        st_cuda_set_matmul_tune(dev, true);
        for (int bf = 0; bf < 2; bf++)
            for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++) {
                linear_label(label, sizeof label, bf ? "bf16 " : "", &tl[i]);
                snprintf(label + strlen(label), sizeof label - strlen(label), ", algorithms timed");
                run_prec(label, tl[i].B * tl[i].K + tl[i].K * tl[i].N + tl[i].B * tl[i].N, build_linear, NULL,
                         (void *)&tl[i], bf ? 1e-2 : 1e-4, bf ? 2e-2 : 1e-5, false,
                         bf ? ST_PREC_BF16 : ST_PREC_FP32, dev, seed + k++);
            }
        st_cuda_set_matmul_tune(dev, false);
        st_cuda_matmul_tune_stats(dev, &t1);
        st_cuda_matmul_plan_stats(dev, &plans1, &hits1, &misses1);
        const int64_t tuned = t1.tuned - t0.tuned, switched = t1.switched - t0.switched;
        const double first = t1.first_ms - t0.first_ms, chosen = t1.chosen_ms - t0.chosen_ms;
        /* (the times: every timed plan's products at what a call took, the kept never slower) */
        CHECK(tuned > 0 && tuned <= plans1 - plans0 && switched <= tuned && first > 0 && chosen > 0 &&
                  chosen <= first,
              "model.matmul_tune: %lld plans timed of %lld made with it on (%lld kept another algorithm); "
              "their products %.4g ms at the heuristic's first, %.4g at the kept",
              (long long)tuned, (long long)(plans1 - plans0), (long long)switched, first, chosen);
        printf("ok   model.matmul_tune: %lld of %lld new plans timed, %lld kept another algorithm than the "
               "heuristic's first (their products %.4g ms at the first's times, %.4g at the kept's)\n",
               (long long)tuned, (long long)(plans1 - plans0), (long long)switched, first, chosen);
    }
#endif

    /* (the fourth: runs of about 330 equal tokens, each cut into pieces of 32 sorted positions) */
    const emb_ctx emb[] = {
        {13, 4, 37, 45, false}, {50257, 2, 64, 768, false}, {301, 3, 29, 96, true}, {3, 8, 125, 200, false}};
    for (size_t i = 0; i < sizeof emb / sizeof emb[0]; i++) {
        snprintf(label, sizeof label, "embedding %lldx%lld vocab %lld dim %lld%s", (long long)emb[i].B,
                 (long long)emb[i].T, (long long)emb[i].V, (long long)emb[i].C,
                 emb[i].head ? " +tied head" : "");
        run(label, emb[i].V * emb[i].C, build_embedding, fill_tokens, (void *)&emb[i], 1e-4, 1e-5, false, dev,
            seed + k++);
    }

    const posemb_ctx pe[] = {{3, 17, 40, 32}, {2, 64, 768, 64}};
    for (size_t i = 0; i < sizeof pe / sizeof pe[0]; i++) {
        snprintf(label, sizeof label, "pos_embedding %lldx%lldx%lld max_len %lld", (long long)pe[i].B,
                 (long long)pe[i].T, (long long)pe[i].C, (long long)pe[i].max_len);
        run(label, pe[i].B * pe[i].T * pe[i].C, build_posemb, NULL, (void *)&pe[i], 1e-4, 1e-5, false, dev,
            seed + k++);
    }

    static const char *const uname[] = {"layernorm", "gelu", "relu", "dropout"};
    const unary_ctx un[] = {
        {U_LAYERNORM, 37, 67, false, 0, false, false},
        {U_LAYERNORM, 64, 768, true, 0, false, false},
        {U_LAYERNORM, 3, 3001, false, 0, false, false},
        {U_LAYERNORM, 1000, 5, false, 0, false, false},
        {U_GELU, 7, 333, false, 0, false, false},
        {U_GELU, 64, 768, true, 0, false, false},
        {U_RELU, 7, 333, false, 0, false, false},
        {U_RELU, 13, 101, true, 0, false, false},
        {U_DROPOUT, 7, 333, false, 0.1f, false, false},
        {U_DROPOUT, 13, 101, true, 0.5f, false, false},
        {U_DROPOUT, 5, 77, false, 0.0f, false, false},
        {U_LAYERNORM, 200, 768, true, 0, false, false}, /* 16-byte accesses, and dweight's chunks added up */
        {U_LAYERNORM, 100, 520, false, 0, false,
         false}, /* the one-kernel backward with a part-filled last column group */
        /* forward's rows in registers for 1, 2 and 4 groups of 256 columns; beyond 1024, read thrice */
        {U_LAYERNORM, 33, 256, false, 0, false, false},
        {U_LAYERNORM, 17, 384, true, 0, false, false},
        {U_LAYERNORM, 9, 1024, false, 0, false, false},
        {U_LAYERNORM, 5, 1032, false, 0, false, false},
        {U_LAYERNORM, 40, 768, true, 0, true, false}, /* weight and bias read an element at a time */
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        snprintf(label, sizeof label, "%s %lldx%lld%s%s", uname[un[i].kind], (long long)un[i].R,
                 (long long)un[i].C, un[i].residual ? " +residual" : "",
                 un[i].misalign ? " unaligned weight" : "");
        if (un[i].kind == U_DROPOUT)
            snprintf(label + strlen(label), sizeof label - strlen(label), " p %.2f", (double)un[i].p);
        run(label, un[i].R * un[i].C, build_unary, NULL, (void *)&un[i], 1e-4, 1e-5, false, dev, seed + k++);
    }
    /* Eval mode: dropout is the identity (forward only). */
    const unary_ctx drop_eval = {U_DROPOUT, 9, 55, false, 0.3f, false, false};
    run("dropout 9x55 p 0.30 eval", 9 * 55, build_unary, NULL, (void *)&drop_eval, 0, 0, true, dev,
        seed + k++);

    const add_ctx ad[] = {
        {1001, false}, {4097, true}, {4096, false}, {4104, true}}; /* 16-byte and element paths */
    for (size_t i = 0; i < sizeof ad / sizeof ad[0]; i++) {
        snprintf(label, sizeof label, "add %lld%s", (long long)ad[i].n, ad[i].same ? " a+a" : "");
        run(label, ad[i].n, build_add, NULL, (void *)&ad[i], 1e-6, 0, false, dev, seed + k++);
    }

    if (dev) check_ce_nonfinite(dev, seed + k++);
    if (dev) check_act_nonfinite(dev, seed + k++);
    /* Softmax gradients are about 1/(V R) each: atol well below that. */
    const ce_ctx ce[] = {{10, 37, false}, {50257, 8, false}, {1000, 300, false}, {11, 3, true}};
    for (size_t i = 0; i < sizeof ce / sizeof ce[0]; i++) {
        snprintf(label, sizeof label, "softmax_ce %lld rows x %lld classes%s", (long long)ce[i].R,
                 (long long)ce[i].V, ce[i].all_ignored ? " all ignored" : "");
        run(label, ce[i].R * ce[i].V, build_ce, fill_ce, (void *)&ce[i], 1e-4, 1e-10, false, dev, seed + k++);
    }

    const mse_ctx ms[] = {{37, false}, {5000, true}, {4096 * 3 + 1, false}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        snprintf(label, sizeof label, "mse %lld%s", (long long)ms[i].n,
                 ms[i].target_grad ? " +target grad" : "");
        run(label, ms[i].n, build_mse, NULL, (void *)&ms[i], 1e-4, 1e-8, false, dev, seed + k++);
    }

    /* bf16 and fp16 (tolerances in the opening comment) */
    const st_precision precs[] = {ST_PREC_BF16, ST_PREC_FP16};
    for (int pi = 0; pi < 2; pi++) {
        const st_precision p = precs[pi];
        const char *pn = p == ST_PREC_BF16 ? "bf16" : "fp16";
        const double rt = p == ST_PREC_BF16 ? 1e-2 : 1.5e-3, at = p == ST_PREC_BF16 ? 2e-2 : 3e-3;
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            if (i == lin_bgrad) bgrad0 = cp_bgrad_count(dev);
            linear_label(label, sizeof label, p == ST_PREC_BF16 ? "bf16 " : "fp16 ", &lin[i]);
            run_prec(label, lin[i].B * lin[i].K + lin[i].K * lin[i].N + lin[i].B * lin[i].N, build_linear,
                     NULL, (void *)&lin[i], rt, at, false, p, dev, seed + k++);
        }
        cp_check_bgrad(dev, bgrad0, false,
                       p == ST_PREC_BF16 ? "bf16 linear cases with db in dW's epilogue"
                                         : "fp16 linear cases with db in dW's epilogue");
        snprintf(label, sizeof label, "%s embedding 3x29 vocab 301 dim 96 +tied head", pn);
        run_prec(label, emb[2].V * emb[2].C, build_embedding, fill_tokens, (void *)&emb[2], rt, at, false, p,
                 dev, seed + k++);
        /* then layernorm's backward on 16-bit rows as loaded (ST_KV_LAYERNORM_PACKED):
         * 1 to 4 groups of 256 columns, a part-filled last group, dweight's
         * chunks added up (200 rows), the gradient written or added to */
        const unary_ctx pun[] = {
            {U_LAYERNORM, 64, 768, true, 0, false, false}, {U_GELU, 64, 768, true, 0, false, false},
            {U_LAYERNORM, 200, 768, true, 0, false, true}, {U_LAYERNORM, 33, 256, false, 0, false, true},
            {U_LAYERNORM, 17, 384, true, 0, false, true},  {U_LAYERNORM, 100, 520, false, 0, false, true},
            {U_LAYERNORM, 9, 1024, true, 0, false, true},  {U_LAYERNORM, 40, 768, true, 0, true, true}};
        for (size_t i = 0; i < sizeof pun / sizeof pun[0]; i++) {
            snprintf(label, sizeof label, "%s %s %lldx%lld%s%s%s", pn, uname[pun[i].kind],
                     (long long)pun[i].R, (long long)pun[i].C, pun[i].residual ? " +residual" : "",
                     pun[i].misalign ? " unaligned weight" : "", pun[i].packed ? " packed" : "");
            run_prec(label, pun[i].R * pun[i].C, build_unary, NULL, (void *)&pun[i], rt, at, false, p, dev,
                     seed + k++);
        }
        for (size_t i = 2; i < 4; i++) {
            snprintf(label, sizeof label, "%s add %lld%s", pn, (long long)ad[i].n, ad[i].same ? " a+a" : "");
            run_prec(label, ad[i].n, build_add, NULL, (void *)&ad[i], rt, at, false, p, dev, seed + k++);
        }
        snprintf(label, sizeof label, "%s softmax_ce 300 rows x 1000 classes", pn);
        run_prec(label, ce[2].R * ce[2].V, build_ce, fill_ce, (void *)&ce[2], rt, at, false, p, dev,
                 seed + k++);
        /* pred (and the target that depends on a parameter) in 16 bits */
        for (size_t i = 0; i < 2; i++) {
            snprintf(label, sizeof label, "%s mse %lld%s", pn, (long long)ms[i].n,
                     ms[i].target_grad ? " +target grad" : "");
            run_prec(label, ms[i].n, build_mse, NULL, (void *)&ms[i], rt, at, false, p, dev, seed + k++);
        }
    }

    st_device_free(dev);
    return st_test_finish("cuda layers a");
}
