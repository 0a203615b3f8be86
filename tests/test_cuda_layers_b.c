/* CUDA parity of attention, conv2d, maxpool2d, batchnorm (and the fused
 * batchnorm + ReLU) and flatten against the CPU reference
 * (tests/cuda_parity.h). Skips without a CUDA device, after running every
 * case host against host (which checks the test itself).
 *
 * Each layer runs in up to three graphs: on a graph input (forward and
 * parameter gradients only), after `x + s` with s a parameter (so the
 * layer's input gradient is computed and WRITTEN: in_acc false), and as two
 * instances on the same input whose outputs are added (so the second one in
 * backward order ADDS into the input gradient: in_acc true). Sizes are odd
 * on purpose: T not a multiple of 32, head sizes of 5 floats (unaligned
 * heads), channels not multiples of a block, stride 2 with padding 1,
 * kernels 1, 3 and 5, truncated pooling windows, a conv whose im2col needs
 * several chunks. A layer without parameters on a plain input has no
 * gradient to compare, so that graph runs forward only.
 *
 * Tolerances (|dev - host| <= atol + rtol |host|, fp32 on both sides):
 *   flatten, maxpool2d   1e-6, 1e-7: the same arithmetic in the same order
 *                        (the pooling gradient is a gather that adds in the
 *                        CPU scatter's order), so the bits should agree;
 *   batchnorm            1e-4, 1e-5: double statistics on both sides, the
 *                        rest fp32 with a different summation order and FMA;
 *   conv2d, attention    1e-4, 1e-4: fp32 products (cuBLASLt, no TF32,
 *                        against OpenBLAS) summing up to K = 2304 terms (conv)
 *                        or T = 130 keys of 64 channels (attention) in another
 *                        order; values are O(1), so atol covers cancellation;
 *                        the flash kernels (head sizes 16-128) add an online
 *                        softmax (rescaled partial sums) and CUDA's expf;
 *   the big conv         1e-4, 1e-3: its weight gradient sums n = 12288
 *                        products of size s ~ 0.3 per element, and a fp32
 *                        sum in k order (a GEMM thread's) errs by about
 *                        eps s sqrt(n^2 / 2) ~ 2e-4 (measured 1.6e-4).
 *
 * bf16 and fp16 (docs/precision.md): attention, conv2d (their products take
 * 16-bit operands on the device), batchnorm + ReLU and maxpool2d again with
 * both graphs in that precision, the host emulating the device's rounding.
 * The operands are the same 16-bit values on both sides and the sums fp32,
 * so a stored value differs only where the two sums fall on either side of
 * a 16-bit rounding boundary (one unit in the last place: at most 2^-7 of
 * the value in bf16, 2^-10 in fp16) and later sums carry that on:
 * |dev - host| <= rtol |host| + atol max|host| per tensor, rtol 1e-2 /
 * 1.5e-3, atol 2e-2 / 3e-3 (as test_cuda_layers_a, which says how they were
 * checked). The rounding points are checked exactly (cuda_parity.h).
 * Attention in bf16: forward's P V takes P as bf16 hi + lo parts (2^-16
 * relative, P is fp32 on the host), backward's products take P and dS as
 * bf16, which the host rounds alike. Where the two sides' fp32 P fall on
 * either side of a bf16 boundary, that P and dS differ by a bf16 unit, and
 * so do the dQ row and dK and dV rows they enter: over 21 runs with random
 * inputs in the emulator at most 0.9% of a gradient (typically 0.3-0.7%)
 * differed from the host's by more than 1e-5 of the tensor's largest
 * value; a host that did not round P and dS (or a device that skipped one
 * rounding) makes that 38% of dqkv, still inside the tolerances above, so
 * the bf16 attention cases also allow at most 5% of each tensor to differ
 * by more than 1e-5 of its largest value (cp_case frac). fp16 attention
 * runs the exact fp32 flash kernels. */
#include "cuda_parity.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif
#include "layers/layers.h"

/* How the layer under test sees its input. */
typedef enum { IN_PLAIN, IN_PARAM, IN_TWICE } in_mode;

static const char *mode_name(in_mode m) {
    return m == IN_PLAIN ? "input" : m == IN_PARAM ? "x+s" : "twice+add";
}

/* x (the graph input), or x + s with a parameter s of x's shape. */
static st_status front(st_graph *g, in_mode mode, int ndim, const int64_t *shape, st_tensor **out) {
    st_tensor *x, *s;
    ST_TRY(st_graph_input(g, "x", ST_F32, ndim, shape, &x));
    if (mode == IN_PLAIN) {
        *out = x;
        return ST_OK;
    }
    ST_TRY(st_graph_param(g, "x.shift", ndim, shape, ST_INIT_UNIFORM, 1.0f, false, &s));
    return st_add(g, "x.plus", x, s, out);
}

/* ---- attention ------------------------------------------------------------ */
typedef struct attn_ctx {
    int64_t B, T, C, nh;
    in_mode mode;
    bool cudnn; /* the device's graph asks for cuDNN's fused attention (model.attention_kernel=cudnn) */
} attn_ctx;

static st_status build_attn(st_graph *g, void *ctx) {
    const attn_ctx *c = ctx;
    st_tensor *x, *y, *y2;
    g->attention_cudnn = c->cudnn && g->dev;
    ST_TRY(front(g, c->mode, 3, (int64_t[]){c->B, c->T, 3 * c->C}, &x));
    ST_TRY(st_attention(g, "attn", x, c->nh, &y));
    if (c->mode != IN_TWICE) return ST_OK;
    ST_TRY(st_attention(g, "attn2", x, c->nh, &y2));
    return st_add(g, "sum", y, y2, &y);
}

/* Two attentions in a row: the first (nh heads of 16: flash) feeds the
 * second (4 heads of C / 12: the materialised path, which reads fp32
 * arrays), so in a bf16 run the first one's output and its gradient are
 * stored as fp32 (src/layers/half_io.h) and its bf16 flash backward reads
 * dY and Y from fp32 storage: its tiles' path for storage other than bf16. */
static st_status build_attn_chain(st_graph *g, void *ctx) {
    const attn_ctx *c = ctx;
    st_tensor *x, *y;
    ST_TRY(front(g, c->mode, 3, (int64_t[]){c->B, c->T, 3 * c->C}, &x));
    ST_TRY(st_attention(g, "attn", x, c->nh, &y));
    return st_attention(g, "attn2", y, 4, &y);
}

/* Graph inputs drawn as bf16 values in [-1, 1), as a bf16 graph's own
 * activations hold: a bf16 forward on them is compared like any other, and
 * the flash kernels read Q, K and V stored as fp32 (graph inputs are), the
 * path of their tile loads for storage other than bf16. */
static void fill_bf16_inputs(st_graph *g, st_rng *r, void *ctx) {
    (void)ctx;
    for (int i = 0; i < g->n_acts; i++) {
        st_tensor *t = g->acts[i];
        if (t->kind != ST_TENSOR_INPUT || t->dtype != ST_F32) continue;
        for (int64_t j = 0; j < t->count; j++)
            t->data[j] = st_round_bf16(2.0f * st_rng_uniform(r) - 1.0f);
    }
}

/* Whether a case's head size takes the flash kernels: multiples of 16 up to
 * 128 (src/layers/attention_layout.h). */
static bool attn_flash(const attn_ctx *c) {
    const int64_t hs = c->C / c->nh;
    return hs % 16 == 0 && hs <= 128;
}

/* The device's graph takes the flash path (saved state: one log-sum-exp per
 * row) exactly for those; the others keep P. */
static void check_attn_paths(st_device *dev, const attn_ctx *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        attn_ctx c = cases[i];
        c.mode = IN_PLAIN;
        st_params p = {0};
        p.dev = dev;
        st_graph g;
        st_graph_init(&g, &p);
        if (build_attn(&g, &c) != ST_OK || st_graph_finalize(&g) != ST_OK) {
            fprintf(stderr, "FAIL attention path: %s\n", st_last_error());
            st_test_failures++;
        } else {
            const int64_t hs = c.C / c.nh, rows = c.B * c.nh * c.T;
            const bool flash = attn_flash(&c);
            const int64_t want = flash ? rows : rows * c.T, got = g.nodes[g.n_nodes - 1].saved_count;
            if (got != want) {
                fprintf(stderr, "FAIL attention hs %lld T %lld: saved %lld floats, want %lld (%s)\n",
                        (long long)hs, (long long)c.T, (long long)got, (long long)want,
                        flash ? "flash" : "materialised");
                st_test_failures++;
            }
        }
        st_graph_free(&g);
        st_params_free(&p);
    }
}

/* ---- conv2d --------------------------------------------------------------- */
typedef struct conv_ctx {
    int64_t B, H, W, Cin, Cout, k, stride, pad;
    bool bias;
    in_mode mode;
} conv_ctx;

static st_status build_conv(st_graph *g, void *ctx) {
    const conv_ctx *c = ctx;
    st_tensor *x, *y, *y2;
    ST_TRY(front(g, c->mode, 4, (int64_t[]){c->B, c->H, c->W, c->Cin}, &x));
    ST_TRY(st_conv2d(g, "conv", x, c->Cout, c->k, c->stride, c->pad, c->bias, &y));
    if (c->mode != IN_TWICE) return ST_OK;
    ST_TRY(st_conv2d(g, "conv2", x, c->Cout, c->k, c->stride, c->pad, !c->bias, &y2));
    return st_add(g, "sum", y, y2, &y);
}

/* ---- maxpool2d ------------------------------------------------------------ */
typedef struct pool_ctx {
    int64_t B, H, W, C, k, stride;
    in_mode mode;
    bool ties; /* inputs on a coarse grid, so windows hold equal values */
} pool_ctx;

static st_status build_pool(st_graph *g, void *ctx) {
    const pool_ctx *c = ctx;
    st_tensor *x, *y, *y2;
    ST_TRY(front(g, c->mode, 4, (int64_t[]){c->B, c->H, c->W, c->C}, &x));
    ST_TRY(st_maxpool2d(g, "pool", x, c->k, c->stride, &y));
    if (c->mode != IN_TWICE) return ST_OK;
    ST_TRY(st_maxpool2d(g, "pool2", x, c->k, c->stride, &y2));
    return st_add(g, "sum", y, y2, &y);
}

/* Ties: x in {-1, -0.5, 0, 0.5, 1} and the shift parameter zero, so the
 * pooled tensor is x itself and most windows hold a tie. */
static void fill_pool(st_graph *host, st_rng *r, void *ctx) {
    const pool_ctx *c = ctx;
    if (!c->ties) return;
    for (int i = 0; i < host->n_acts; i++) {
        st_tensor *t = host->acts[i];
        if (t->kind != ST_TENSOR_INPUT) continue;
        for (int64_t j = 0; j < t->count; j++)
            t->data[j] = 0.5f * (float)(int)(5.0f * st_rng_uniform(r)) - 1.0f;
    }
    st_tensor *s = st_params_find(host->params, "x.shift");
    if (s) memset(s->data, 0, (size_t)s->count * sizeof(float));
}

/* ---- batchnorm ------------------------------------------------------------ */
typedef struct bn_ctx {
    int ndim;
    int64_t shape[4];
    bool relu;
    in_mode mode;
} bn_ctx;

static st_status build_bn(st_graph *g, void *ctx) {
    const bn_ctx *c = ctx;
    st_tensor *x, *y, *y2;
    ST_TRY(front(g, c->mode, c->ndim, c->shape, &x));
    st_status (*bn)(st_graph *, const char *, st_tensor *, float, float, st_tensor **) =
        c->relu ? st_batchnorm_relu : st_batchnorm;
    ST_TRY(bn(g, "bn", x, 1e-5f, 0.1f, &y));
    if (c->mode != IN_TWICE) return ST_OK;
    ST_TRY(bn(g, "bn2", x, 1e-3f, 0.3f, &y2));
    return st_add(g, "sum", y, y2, &y);
}

/* Random affine parameters and running statistics (the defaults are 1 and 0),
 * inputs with a channel-dependent offset (so the shifted sums matter). */
static void fill_bn(st_graph *host, st_rng *r, void *ctx) {
    (void)ctx;
    st_params *p = host->params;
    for (int i = 0; i < p->n; i++) {
        st_tensor *t = p->t[i];
        const char *dot = strrchr(t->name, '.');
        if (!dot || strncmp(t->name, "bn", 2) != 0) continue;
        for (int64_t j = 0; j < t->count; j++) {
            const float u = st_rng_uniform(r);
            t->data[j] = strcmp(dot, ".running_var") == 0 ? 0.5f + u
                         : strcmp(dot, ".weight") == 0    ? 0.5f + u
                                                          : 2.0f * u - 1.0f;
        }
    }
    for (int i = 0; i < host->n_acts; i++) {
        st_tensor *t = host->acts[i];
        if (t->kind != ST_TENSOR_INPUT) continue;
        const int64_t C = t->shape[t->ndim - 1];
        for (int64_t j = 0; j < t->count; j++)
            t->data[j] += 3.0f + (float)(j % C) * 0.25f;
    }
}

/* ---- flatten -------------------------------------------------------------- */
typedef struct flat_ctx {
    int ndim;
    int64_t shape[4];
    in_mode mode;
} flat_ctx;

static st_status build_flat(st_graph *g, void *ctx) {
    const flat_ctx *c = ctx;
    st_tensor *x, *y, *y2;
    ST_TRY(front(g, c->mode, c->ndim, c->shape, &x));
    ST_TRY(st_flatten(g, "flat", x, &y));
    if (c->mode != IN_TWICE) return ST_OK;
    ST_TRY(st_flatten(g, "flat2", x, &y2));
    return st_add(g, "sum", y, y2, &y);
}

/* With CP_SMALL set (compute-sanitizer runs kernels many times slower), a
 * case whose largest tensor exceeds 2^16 elements is left out: false. */
static bool run_prec(const char *label, cp_build_fn build, cp_fill_fn fill, void *ctx, double rtol,
                     double atol, bool eval, int64_t largest, st_precision prec, double frac, st_device *dev,
                     uint64_t seed) {
    if (getenv("CP_SMALL") && largest > 65536) {
        printf("left out (CP_SMALL) %s\n", label);
        return false;
    }
    cp_case c = {label, build, fill, ctx, rtol, atol, eval, prec, frac};
    cp_run(&c, dev, seed);
    return true;
}

static void run(const char *label, cp_build_fn build, cp_fill_fn fill, void *ctx, double rtol, double atol,
                bool eval, int64_t largest, st_device *dev, uint64_t seed) {
    run_prec(label, build, fill, ctx, rtol, atol, eval, largest, ST_PREC_FP32, 0, dev, seed);
}

/* The flash kernels place tensor-core operands by src/cuda/mma.cuh's reading
 * of the PTX fragment layout: on a GPU, one mma.sync product with operands
 * placed so must equal the product summed directly (st_cuda_mma_check);
 * under the emulator this checks the shuffle gather against the same
 * reading. A failure here explains every bf16 attention failure below. */
static void check_mma_layout(st_device *dev, uint64_t seed) {
#ifdef ST_HAVE_CUDA
    for (uint64_t i = 0; i < 4; i++) {
        double err = 0;
        CHECK_OK(st_cuda_mma_check(dev, seed + i, &err));
        CHECK(err <= 1e-5,
              "mma.sync with mma.cuh's fragment layout: off the direct product by %g (seed %llu): "
              "the GPU places operands otherwise than src/cuda/mma.cuh says",
              err, (unsigned long long)(seed + i));
        if (i == 0) printf("ok   mma.sync fragment layout (largest difference %.3g)\n", err);
        int plain = -1, trans = -1;
        CHECK_OK(st_cuda_ldmatrix_check(dev, seed + i, &plain, &trans));
        CHECK(
            plain == 0 && trans == 0,
            "ldmatrix with mma.cuh's reading: %d of 128 registers differ, %d of 128 with .trans (seed %llu): "
            "the GPU places elements otherwise than src/cuda/mma.cuh says",
            plain, trans, (unsigned long long)(seed + i));
        if (i == 0 && plain == 0 && trans == 0) printf("ok   ldmatrix and ldmatrix.trans fragment layout\n");
    }
#else
    (void)dev;
    (void)seed;
#endif
}

int main(void) {
    st_device *dev = NULL;
    /* Without a device (or with ST_CP_SELFTEST set) the cases run the host
     * against itself: a check of the test's own graphs and fills, not of the
     * kernels; the test still reports the skip when there is no device. */
    const bool self = getenv("ST_CP_SELFTEST") != NULL;
    const int rc = self ? 0 : cp_open(&dev);
    if (rc && rc != 77) return rc;
    const uint64_t seed = cp_seed();
    uint64_t k = 0;
    char label[160];
    const in_mode modes[] = {IN_PLAIN, IN_PARAM, IN_TWICE};

    /* attention: the materialised path (head sizes 5 and 4: unaligned heads, T = 1), then the
     * flash path (head sizes 16, 32, 64, 128): T not a multiple of a tile or of 16, T = 1
     * (rows of one key), GPT-2's heads, several query blocks and key tiles (64 keys a tile
     * forward for hs <= 64, 32 above; backward 32, 16 above), then the other multiples of 16
     * (48, 80, 96, 112: KD = hs / 16 odd, or several 16-column blocks above 64) and 24, a
     * multiple of 8 that stays materialised */
    const attn_ctx attn[] = {{3, 37, 20, 4, 0, false},  {2, 1, 12, 3, 0, false},   {2, 64, 768, 12, 0, false},
                             {2, 37, 64, 4, 0, false},  {2, 1, 64, 2, 0, false},   {1, 130, 128, 2, 0, false},
                             {1, 70, 256, 2, 0, false}, {2, 33, 144, 3, 0, false}, {1, 70, 160, 2, 0, false},
                             {1, 45, 192, 2, 0, false}, {1, 40, 224, 2, 0, false}, {1, 20, 48, 2, 0, false}};
    const size_t n_attn = sizeof attn / sizeof attn[0];
    if (dev) check_attn_paths(dev, attn, n_attn);
    if (dev) check_mma_layout(dev, seed);
    for (size_t i = 0; i < n_attn; i++)
        for (int m = 0; m < 3; m++) {
            attn_ctx c = attn[i];
            c.mode = modes[m];
            snprintf(label, sizeof label, "attention B%lld T%lld C%lld nh%lld (%s)", (long long)c.B,
                     (long long)c.T, (long long)c.C, (long long)c.nh, mode_name(c.mode));
            const int64_t big =
                c.B * c.T * 3 * c.C > c.B * c.nh * c.T * c.T ? c.B * c.T * 3 * c.C : c.B * c.nh * c.T * c.T;
            run(label, build_attn, NULL, &c, 1e-4, 1e-4, c.mode == IN_PLAIN, big, dev, seed + k++);
        }

    /* conv2d: stride 2 pad 1 k3; 1x1; k5 pad 2; a cnn-like layer; several im2col chunks */
    const conv_ctx conv[] = {{2, 9, 7, 3, 5, 3, 2, 1, true, 0},   {3, 5, 6, 17, 33, 1, 1, 0, false, 0},
                             {2, 11, 11, 4, 6, 5, 1, 2, true, 0}, {4, 14, 14, 32, 64, 3, 1, 1, false, 0},
                             {2, 8, 9, 6, 7, 3, 2, 0, true, 0},   {3, 64, 64, 256, 8, 3, 1, 1, true, 0}};
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
        for (int m = 0; m < 3; m++) {
            conv_ctx c = conv[i];
            c.mode = modes[m];
            if (i == 5 && c.mode != IN_PARAM) continue; /* the big one once */
            snprintf(label, sizeof label, "conv2d B%lld %lldx%lldx%lld->%lld k%lld s%lld p%lld%s (%s)",
                     (long long)c.B, (long long)c.H, (long long)c.W, (long long)c.Cin, (long long)c.Cout,
                     (long long)c.k, (long long)c.stride, (long long)c.pad, c.bias ? " bias" : "",
                     mode_name(c.mode));
            const int64_t xin = c.B * c.H * c.W * c.Cin, yout = c.B * c.H * c.W * c.Cout; /* stride 1 bound */
            run(label, build_conv, NULL, &c, 1e-4, i == 5 ? 1e-3 : 1e-4, false, xin > yout ? xin : yout, dev,
                seed + k++);
        }

    /* maxpool2d: truncated windows, overlapping windows (stride < k), ties */
    const pool_ctx pool[] = {{2, 9, 7, 5, 2, 2, 0, false},
                             {3, 10, 9, 33, 3, 2, 0, false},
                             {2, 6, 7, 4, 3, 1, 0, false},
                             {2, 8, 8, 3, 2, 2, 0, true},
                             {2, 9, 9, 6, 3, 2, 0, true}};
    for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
        for (int m = 0; m < 3; m++) {
            pool_ctx c = pool[i];
            c.mode = modes[m];
            snprintf(label, sizeof label, "maxpool2d B%lld %lldx%lldx%lld k%lld s%lld%s (%s)", (long long)c.B,
                     (long long)c.H, (long long)c.W, (long long)c.C, (long long)c.k, (long long)c.stride,
                     c.ties ? " ties" : "", mode_name(c.mode));
            run(label, build_pool, fill_pool, &c, 1e-6, 1e-7, c.mode == IN_PLAIN, c.B * c.H * c.W * c.C, dev,
                seed + k++);
        }

    /* batchnorm: NHWC and (B, C), with and without the fused ReLU, train and eval */
    const bn_ctx bn[] = {{4, {4, 5, 3, 7}, false, 0},
                         {2, {37, 45}, false, 0},
                         {4, {3, 9, 7, 33}, true, 0},
                         {2, {2, 130}, true, 0},
                         {3, {5, 17, 300}, false, 0}};
    for (size_t i = 0; i < sizeof bn / sizeof bn[0]; i++)
        for (int m = 0; m < 4; m++) {
            bn_ctx c = bn[i];
            c.mode = modes[m < 3 ? m : 1];
            const bool eval = m == 3;
            snprintf(label, sizeof label, "batchnorm%s %dd C%lld (%s, %s)", c.relu ? "_relu" : "", c.ndim,
                     (long long)c.shape[c.ndim - 1], mode_name(c.mode), eval ? "eval" : "train");
            run(label, build_bn, fill_bn, &c, 1e-4, 1e-5, eval, st_shape_count(c.ndim, c.shape), dev,
                seed + k++);
        }

    /* flatten: an NHWC image to (C, H, W) order, and a plain reshape */
    const flat_ctx flat[] = {{4, {2, 5, 3, 7}, 0}, {4, {3, 1, 1, 33}, 0}, {3, {3, 4, 5}, 0}};
    for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++)
        for (int m = 0; m < 3; m++) {
            flat_ctx c = flat[i];
            c.mode = modes[m];
            snprintf(label, sizeof label, "flatten %dd (%s)", c.ndim, mode_name(c.mode));
            run(label, build_flat, NULL, &c, 1e-6, 1e-7, c.mode == IN_PLAIN, st_shape_count(c.ndim, c.shape),
                dev, seed + k++);
        }

    /* bf16 and fp16 (tolerances in the opening comment) */
    const st_precision precs[] = {ST_PREC_BF16, ST_PREC_FP16};
    for (int pi = 0; pi < 2; pi++) {
        const st_precision p = precs[pi];
        const char *pn = p == ST_PREC_BF16 ? "bf16" : "fp16";
        const double rt = p == ST_PREC_BF16 ? 1e-2 : 1.5e-3, at = p == ST_PREC_BF16 ? 2e-2 : 3e-3;
        for (int m = 1; m < 3; m++) {
            for (size_t i = 0; i < n_attn; i++) {
                if (i > 0 && !attn_flash(&attn[i])) continue; /* one materialised case is enough */
                attn_ctx c = attn[i];
                c.mode = modes[m];
                snprintf(label, sizeof label, "%s attention B%lld T%lld C%lld nh%lld (%s)", pn,
                         (long long)c.B, (long long)c.T, (long long)c.C, (long long)c.nh, mode_name(c.mode));
                run_prec(label, build_attn, NULL, &c, rt, at, false, c.B * c.nh * c.T * c.T, p,
                         p == ST_PREC_BF16 ? 0.05 : 0, dev, seed + k++);
            }
            if (p == ST_PREC_BF16 && m == 1) { /* a flash backward's dY and Y from fp32 storage */
                const attn_ctx c = {2, 75, 48, 3, IN_PARAM, false};
                snprintf(label, sizeof label, "%s attention B2 T75 C48 nh3 into attention nh4 (x+s)", pn);
                run_prec(label, build_attn_chain, NULL, (void *)&c, rt, at, false, c.B * c.nh * c.T * c.T, p,
                         0.05, dev, seed + k++);
            }
            if (p == ST_PREC_BF16 && m == 1) { /* a flash case's tiles from fp32 storage, forward */
                attn_ctx c = attn[5];
                c.mode = IN_PLAIN;
                snprintf(label, sizeof label, "%s attention B%lld T%lld C%lld nh%lld (input, bf16 values)",
                         pn, (long long)c.B, (long long)c.T, (long long)c.C, (long long)c.nh);
                run_prec(label, build_attn, fill_bf16_inputs, &c, rt, at, true, c.B * c.nh * c.T * c.T, p,
                         0.05, dev, seed + k++);
            }
            const size_t ci[] = {0, 2, 3};
            for (size_t j = 0; j < 3; j++) {
                conv_ctx c = conv[ci[j]];
                c.mode = modes[m];
                snprintf(label, sizeof label, "%s conv2d B%lld %lldx%lldx%lld->%lld k%lld s%lld (%s)", pn,
                         (long long)c.B, (long long)c.H, (long long)c.W, (long long)c.Cin, (long long)c.Cout,
                         (long long)c.k, (long long)c.stride, mode_name(c.mode));
                run_prec(label, build_conv, NULL, &c, rt, at, false, c.B * c.H * c.W * c.Cout, p, 0, dev,
                         seed + k++);
            }
        }
        bn_ctx b = bn[2];
        b.mode = IN_PARAM;
        snprintf(label, sizeof label, "%s batchnorm_relu 4d C33 (x+s, train)", pn);
        run_prec(label, build_bn, fill_bn, &b, rt, at, false, st_shape_count(b.ndim, b.shape), p, 0, dev,
                 seed + k++);
        pool_ctx pc = pool[1];
        pc.mode = IN_PARAM;
        snprintf(label, sizeof label, "%s maxpool2d B3 10x9x33 k3 s2 (x+s)", pn);
        run_prec(label, build_pool, fill_pool, &pc, rt, at, false, pc.B * pc.H * pc.W * pc.C, p, 0, dev,
                 seed + k++);
    }

#ifdef ST_HAVE_CUDA
    /* cuDNN's fused attention (model.attention_kernel=cudnn) on the flash
     * shapes, in bf16: forward and backward both by cuDNN on x + s; on the
     * twice-read input the second backward adds into dqkv, which cuDNN does
     * not, so the flash kernels run that backward from cuDNN's forward and
     * saved state (the two share the log-sum-exp layout). cuDNN rounds P to
     * bf16 before P V (the host keeps it fp32), so y differs from the host's
     * in most elements by a little: the tolerances above, no count of
     * differing elements. Each case must have run cuDNN (its call count);
     * T = 1, whose backward cuDNN refuses (tests/test_cudnn_graphs.c), runs
     * its forward on cuDNN and its backward on the flash kernels. */
    char no_cudnn[256];
    if (!dev) {
    } else if (getenv("CP_NO_CUDNN")) { /* (compute-sanitizer's racecheck and synccheck: cuDNN's kernels are
                                           its own) */
        printf("left out (CP_NO_CUDNN): the cuDNN attention cases\n");
    } else if (!st_cuda_cudnn_built(no_cudnn, sizeof no_cudnn)) {
        printf("skipped: the cuDNN attention cases: %s\n", no_cudnn);
    } else {
        printf("cuDNN attention: %s\n", no_cudnn);
        for (int m = 1; m < 3; m++)
            for (size_t i = 2; i < n_attn; i++) {
                if (!attn_flash(&attn[i])) continue;
                attn_ctx c = attn[i];
                c.mode = modes[m];
                c.cudnn = true;
                snprintf(label, sizeof label, "bf16 cudnn attention B%lld T%lld C%lld nh%lld (%s)",
                         (long long)c.B, (long long)c.T, (long long)c.C, (long long)c.nh, mode_name(c.mode));
                const int64_t calls = st_cuda_cudnn_calls(dev);
                if (!run_prec(label, build_attn, NULL, &c, 1e-2, 2e-2, false, c.B * c.nh * c.T * c.T,
                              ST_PREC_BF16, 0, dev, seed + k++))
                    continue;
                CHECK(st_cuda_cudnn_calls(dev) > calls,
                      "%s: cuDNN ran no attention (%lld calls before and after)", label, (long long)calls);
            }
    }
#endif

    st_device_free(dev);
    if (rc == 77 && st_test_failures == 0) {
        printf("the host against itself: ok (the kernels were not run)\n");
        return 77;
    }
    return st_test_finish("cuda layers b");
}
