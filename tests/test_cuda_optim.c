/* The fused CUDA optimizers (src/cuda/optim.cu) against the CPU optimizer
 * (src/optim/optim.c) on the same arena: AdamW, SGD with momentum and with
 * Nesterov, weight decay only on tensors flagged for it, several steps with
 * fresh gradients each; a ZeRO-like slice that must update only its own
 * elements; the deterministic gradient norm, clipping and scaling; the
 * deterministic reduction's fold and block norms against the host's bits;
 * the offloaded optimizer (host state, chunked copies) against the host's;
 * the update's guard against a gradient norm that is not finite.
 *
 * The update formulas are computed in the CPU's float operation order with
 * no FMA contraction on either side, so weights and moments are expected to
 * be bit-identical (the count of differing elements is printed); the check
 * allows 2e-6 relative so a libm difference in pow() for the bias
 * corrections cannot fail it. The norm is a double sum in another order:
 * 1e-12 relative. Skips without a CUDA device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/device.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/graph.h"
#include "optim/optim.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"

/* Parameters of odd sizes, decayed and not, more than one chunk of 4096. */
static st_status make_params(st_params *p, st_graph *g, st_device *dev) {
    memset(p, 0, sizeof *p);
    p->dev = dev;
    st_graph_init(g, p);
    st_tensor *t;
    ST_TRY(st_graph_param(g, "w1", 2, (int64_t[]){37, 65}, ST_INIT_UNIFORM, 0.5f, true, &t));
    ST_TRY(st_graph_param(g, "b1", 1, (int64_t[]){65}, ST_INIT_UNIFORM, 0.5f, false, &t));
    ST_TRY(st_graph_param(g, "w2", 1, (int64_t[]){9001}, ST_INIT_UNIFORM, 0.5f, true, &t));
    ST_TRY(st_graph_param(g, "ln", 1, (int64_t[]){3}, ST_INIT_ONES, 0, false, &t));
    ST_TRY(st_graph_param(g, "w3", 2, (int64_t[]){5, 4096}, ST_INIT_UNIFORM, 0.5f, true, &t));
    g->params_only = true;
    ST_TRY(st_graph_finalize(g));
    return st_params_init(p, 11);
}

static void random_grads(float *gr, int64_t n, st_rng *r) {
    for (int64_t i = 0; i < n; i++)
        gr[i] = 0.2f * (2.0f * st_rng_uniform(r) - 1.0f);
}

/* Compare n device floats with the host's; counts bit differences too. */
static void compare(const char *what, st_device *dev, const float *dptr, const float *h, int64_t n,
                    double rtol, double atol) {
    float *d = malloc((size_t)n * sizeof *d);
    if (!d) {
        CHECK(0, "out of memory");
        return;
    }
    CHECK_OK(st_device_download(dev, d, dptr, (size_t)n * sizeof *d));
    int64_t bits = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bits += memcmp(&d[i], &h[i], sizeof d[i]) != 0;
        const double err = fabs((double)d[i] - h[i]);
        if (!(err <= atol + rtol * fabs((double)h[i]))) {
            if (bad < 3)
                fprintf(stderr, "FAIL %s[%lld]: device %.9g, host %.9g\n", what, (long long)i, (double)d[i],
                        (double)h[i]);
            bad++;
        }
    }
    printf("%-28s %lld of %lld elements differ in bits, %lld beyond tolerance\n", what, (long long)bits,
           (long long)n, (long long)bad);
    st_test_failures += bad ? 1 : 0;
    free(d);
}

typedef struct rig {
    st_params hp, dp;
    st_graph hg, dg;
} rig;

static int rig_make(rig *r, st_device *dev) {
    if (make_params(&r->hp, &r->hg, NULL) != ST_OK || make_params(&r->dp, &r->dg, dev) != ST_OK) {
        fprintf(stderr, "FAIL: building parameters: %s\n", st_last_error());
        st_test_failures++;
        return 1;
    }
    return 0;
}

static void rig_free(rig *r) {
    st_graph_free(&r->dg);
    st_params_free(&r->dp);
    st_graph_free(&r->hg);
    st_params_free(&r->hp);
}

/* The optimizer settings the tests run: weight decay and momentum on. */
static void optim_config(st_config *c, const char *type, bool nesterov) {
    st_config_defaults(c);
    snprintf(c->optim.type, sizeof c->optim.type, "%s", type);
    c->optim.weight_decay = 0.1;
    c->optim.momentum = 0.9;
    c->optim.nesterov = nesterov;
}

/* Several steps of the CPU optimizer and the fused one from the same start.
 * With `fused` (bf16 or fp16; fp32: none) the update's fused extras
 * (st_cuda_update_fuse) against the passes they replace: the clip as
 * train.c clips on the CPU (the norm, then the gradients scaled when it is
 * above the limit: on steps 1 and 3 it is, on the others the limit is above
 * the norm), and the 16-bit copy exactly the updated weights rounded (as
 * the graph's refresh rounds the masters); the device's gradients stay
 * unclipped. */
static void test_optimizer(st_device *dev, uint64_t seed, const char *type, bool nesterov,
                           st_precision fused) {
    rig r;
    if (rig_make(&r, dev)) return;
    st_config c;
    optim_config(&c, type, nesterov);
    st_optim o;
    CHECK_OK(st_optim_init(&o, &c, &r.hp));
    const int64_t n = r.hp.count;
    const bool fx_on = fused != ST_PREC_FP32;
    float *m = NULL, *v = NULL, *hw = malloc((size_t)n * sizeof *hw), *g0 = malloc((size_t)n * sizeof *g0);
    uint16_t *w16 = NULL, *back = malloc((size_t)n * sizeof *back);
    st_cuda_optim *co = NULL;
    CHECK_OK(st_device_alloc(dev, (size_t)n * sizeof(float), (void **)&m));
    CHECK_OK(st_device_alloc(dev, (size_t)n * sizeof(float), (void **)&v));
    if (fx_on) CHECK_OK(st_device_alloc(dev, (size_t)n * sizeof(uint16_t), (void **)&w16));
    CHECK_OK(st_device_zero(dev, m, (size_t)n * sizeof(float)));
    CHECK_OK(st_device_zero(dev, v, (size_t)n * sizeof(float)));
    CHECK_OK(st_device_upload(dev, r.dp.data, r.hp.data, (size_t)n * sizeof(float)));
    CHECK_OK(st_cuda_optim_create(dev, &r.dp, 0, n, &co));
    st_rng rng = st_rng_make(seed, fx_on ? 13 : 3);
    int clipped = 0;
    for (int step = 0; step < 5 && co && m && v && (w16 || !fx_on) && hw && g0 && back; step++) {
        const double lr = 1e-2 * (step + 1);
        random_grads(r.hp.grad, n, &rng);
        memcpy(g0, r.hp.grad, (size_t)n * sizeof *g0);
        CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
        const double norm = st_grad_norm(&r.hp), limit = step % 2 ? 0.5 * norm : 2.0 * norm;
        if (fx_on && norm > limit) {
            st_grad_scale(&r.hp, (float)(limit / (norm + 1e-6)));
            clipped++;
        }
        st_optim_step(&o, &r.hp, lr);
        if (fx_on) CHECK_OK(st_cuda_grad_sumsq(co, r.dp.grad, n));
        const st_cuda_update_fuse fx = {st_cuda_optim_sumsq(co), limit, w16, fused, NULL, 0};
        if (o.kind == ST_OPTIM_ADAMW) {
            st_cuda_adamw_hp hp = {lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.t};
            CHECK_OK(st_cuda_adamw_step(co, r.dp.data, r.dp.grad, m, v, &hp, fx_on ? &fx : NULL));
        } else {
            st_cuda_sgd_hp hp = {lr, o.momentum, o.weight_decay, o.nesterov, o.t};
            CHECK_OK(st_cuda_sgd_step(co, r.dp.data, r.dp.grad, m, &hp, fx_on ? &fx : NULL));
        }
    }
    CHECK(clipped == (fx_on ? 2 : 0), "the test clipped %d of 5 steps", clipped);
    char what[64];
    const char *f = fx_on ? " fused" : "";
    snprintf(what, sizeof what, "%s%s%s weights", type, nesterov ? " nesterov" : "", f);
    compare(what, dev, r.dp.data, r.hp.data, n, 2e-6, 1e-9);
    snprintf(what, sizeof what, "%s%s%s %s", type, nesterov ? " nesterov" : "", f,
             o.kind == ST_OPTIM_ADAMW ? "first moment" : "momentum");
    compare(what, dev, m, o.m, n, 2e-6, 1e-9);
    snprintf(what, sizeof what, "adamw%s second moment", f);
    if (o.kind == ST_OPTIM_ADAMW) compare(what, dev, v, o.v, n, 2e-6, 1e-12);
    if (fx_on && g0) compare("fused: gradients unclipped", dev, r.dp.grad, g0, n, 0, 0);
    /* the 16-bit copy: exactly the device's updated weights rounded */
    if (fx_on && w16 && hw && back) {
        CHECK_OK(st_device_download(dev, back, w16, (size_t)n * sizeof *back));
        CHECK_OK(st_device_download(dev, hw, r.dp.data, (size_t)n * sizeof *hw));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint16_t want = fused == ST_PREC_BF16 ? st_f32_to_bf16(hw[i]) : st_f32_to_f16(hw[i]);
            if (back[i] != want && bad++ < 3)
                fprintf(stderr, "FAIL %s fused 16-bit copy[%lld]: 0x%04x, expected 0x%04x (weight %.9g)\n",
                        type, (long long)i, back[i], want, (double)hw[i]);
        }
        printf("%-28s %lld of %lld differ from the weights rounded\n",
               fused == ST_PREC_BF16 ? "fused bf16 copy" : "fused fp16 copy", (long long)bad, (long long)n);
        st_test_failures += bad ? 1 : 0;
    }
    st_cuda_optim_free(co);
    st_device_release(dev, m);
    st_device_release(dev, v);
    st_device_release(dev, w16);
    free(hw);
    free(g0);
    free(back);
    st_optim_free(&o);
    rig_free(&r);
}

/* A ZeRO-like slice [lo, hi) cutting through tensors: inside it the update is
 * the CPU's, outside it the weights are untouched. */
static void test_slice(st_device *dev, uint64_t seed) {
    rig r;
    if (rig_make(&r, dev)) return;
    const int64_t n = r.hp.count, lo = 1000, hi = n - 777;
    float *w0 = malloc((size_t)n * sizeof *w0), *buf = NULL;
    st_cuda_optim *co = NULL;
    if (!w0) return;
    memcpy(w0, r.hp.data, (size_t)n * sizeof *w0);
    st_config c;
    st_config_defaults(&c);
    snprintf(c.optim.type, sizeof c.optim.type, "sgd");
    c.optim.weight_decay = 0.05;
    c.optim.momentum = 0.8;
    st_optim o;
    CHECK_OK(st_optim_init(&o, &c, &r.hp));
    st_rng rng = st_rng_make(seed, 5);
    random_grads(r.hp.grad, n, &rng);
    CHECK_OK(st_device_upload(dev, r.dp.data, r.hp.data, (size_t)n * sizeof(float)));
    CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
    CHECK_OK(st_device_alloc(dev, (size_t)(hi - lo) * sizeof(float), (void **)&buf));
    CHECK_OK(st_cuda_optim_create(dev, &r.dp, lo, hi, &co));
    st_optim_step(&o, &r.hp, 0.1);
    st_cuda_sgd_hp hp = {0.1, o.momentum, o.weight_decay, o.nesterov, o.t};
    if (co && buf)
        CHECK_OK(
            st_cuda_sgd_step(co, r.dp.data + lo, r.dp.grad + lo, buf, &hp, NULL)); /* the slice's start */
    for (int64_t i = 0; i < lo; i++)
        r.hp.data[i] = w0[i]; /* outside the slice: the start */
    for (int64_t i = hi; i < n; i++)
        r.hp.data[i] = w0[i];
    compare("sgd slice weights", dev, r.dp.data, r.hp.data, n, 2e-6, 1e-9);
    compare("sgd slice momentum", dev, buf, o.m + lo, hi - lo, 2e-6, 1e-9);
    /* A slice outside the arena is refused. */
    st_cuda_optim *bad = NULL;
    CHECK_FAILS(st_cuda_optim_create(dev, &r.dp, 0, n + 1, &bad), ST_ERR_ARG, "outside the arena");
    st_cuda_optim_free(co);
    st_device_release(dev, buf);
    st_optim_free(&o);
    free(w0);
    rig_free(&r);
}

/* optim.offload (src/optim/optim.c): the state on the host, the gradients
 * copied down and the weights up in chunks (this arena's 31,954 elements in
 * 8 of 4096). After every update the weights as the compute stream reads
 * them are the host optimizer's, bit for bit: the uploads run on the copy
 * stream, which the compute stream must wait for (under the emulator's lazy
 * streams a missing wait reads the old weights). The state is host memory,
 * the host optimizer's too. */
static void test_offload(st_device *dev, uint64_t seed, const char *type) {
    rig r;
    if (rig_make(&r, dev)) return;
    st_config c;
    optim_config(&c, type, false);
    st_optim h, o;
    CHECK_OK(st_optim_init(&h, &c, &r.hp));
    c.optim.offload = true;
    const st_status s = st_optim_init(&o, &c, &r.dp);
    CHECK_OK(s);
    if (s != ST_OK) {
        st_optim_free(&h);
        rig_free(&r);
        return;
    }
    CHECK(o.off && !o.dev, "%s offloaded: the state on the host", type);
    const int64_t n = r.hp.count;
    CHECK_OK(st_device_upload(dev, r.dp.data, r.hp.data, (size_t)n * sizeof(float)));
    st_rng rng = st_rng_make(seed, 17);
    for (int step = 0; step < 3; step++) {
        const double lr = 1e-2 * (step + 1);
        random_grads(r.hp.grad, n, &rng);
        CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
        st_optim_step(&h, &r.hp, lr);
        CHECK_OK(st_optim_update(&o, &r.dp, lr, step + 1));
        char what[64];
        snprintf(what, sizeof what, "%s offloaded, step %d", type, step + 1);
        compare(what, dev, r.dp.data, r.hp.data, n, 0, 0);
    }
    CHECK(memcmp(o.m, h.m, (size_t)n * sizeof *o.m) == 0 &&
              (!h.v || (o.v && memcmp(o.v, h.v, (size_t)n * sizeof *o.v) == 0)),
          "%s offloaded: the host state is the host optimizer's", type);
    st_optim_free(&o);
    st_optim_free(&h);
    rig_free(&r);
}

/* The fused update's guard (optim.h st_optim_update, its words those of a
 * device loss sum): step 1's gradients are finite and it updates as the
 * host does; step 2's hold one inf (or NaN) element, so its clip norm is
 * not finite: no update, the weights and moments stay step 1's, and the
 * next read says step 2 and the kind; step 3's gradients are finite again
 * and still no update is made. Without the guard's words the same step 2
 * makes the weights non-finite (what the guard prevents). */
static void test_guard(st_device *dev, uint64_t seed, const char *type, float bad) {
    rig r;
    if (rig_make(&r, dev)) return;
    st_config c;
    optim_config(&c, type, false);
    st_optim h, o;
    st_cuda_loss *ls = NULL;
    CHECK_OK(st_optim_init(&h, &c, &r.hp));
    CHECK_OK(st_optim_init(&o, &c, &r.dp));
    CHECK_OK(st_cuda_loss_create(dev, &ls));
    const int64_t n = r.hp.count;
    float *w = malloc((size_t)n * sizeof *w);
    if (!ls || !w || !o.dev) {
        CHECK(0, "guard: set-up failed: %s", st_last_error());
        goto out;
    }
    o.halt = st_cuda_loss_guard(ls);
    CHECK_OK(st_device_upload(dev, r.dp.data, r.hp.data, (size_t)n * sizeof(float)));
    st_rng rng = st_rng_make(seed, 23);
    for (int step = 1; step <= 3; step++) {
        random_grads(r.hp.grad, n, &rng);
        if (step == 2) r.hp.grad[n / 2] = bad;
        CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
        if (step == 1) st_optim_step(&h, &r.hp, 1e-2);
        CHECK_OK(st_optim_clip(&o, &r.dp, 1e9, NULL, NULL, NULL));
        CHECK_OK(st_optim_update(&o, &r.dp, 1e-2, step));
        double sum;
        int64_t bad_step, halt;
        bool nan;
        CHECK_OK(st_cuda_loss_read(ls, &sum, &bad_step));
        st_cuda_loss_halted(ls, &halt, &nan);
        CHECK(halt == (step == 1 ? 0 : 2) && nan == (step > 1 && isnan(bad)),
              "%s guard, step %d: halted at %lld (NaN %d)", type, step, (long long)halt, nan);
        char what[64];
        snprintf(what, sizeof what, "%s guard, step %d weights", type, step);
        compare(what, dev, r.dp.data, r.hp.data, n, 0, 0);
        snprintf(what, sizeof what, "%s guard, step %d moment", type, step);
        compare(what, dev, o.m, h.m, n, 0, 0);
    }
    /* without the words: the update is made, and inf or NaN gets in */
    o.halt = NULL;
    r.hp.grad[n / 2] = bad;
    CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
    CHECK_OK(st_optim_clip(&o, &r.dp, 1e9, NULL, NULL, NULL));
    CHECK_OK(st_optim_update(&o, &r.dp, 1e-2, 4));
    CHECK_OK(st_device_download(dev, w, r.dp.data, (size_t)n * sizeof(float)));
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++)
        nonfinite += !isfinite(w[i]);
    CHECK(nonfinite > 0, "%s unguarded: no weight became non-finite, the guard's test is void", type);
out:
    free(w);
    st_cuda_loss_free(ls);
    st_optim_free(&o);
    st_optim_free(&h);
    rig_free(&r);
}

static void test_norm_clip_scale(st_device *dev, uint64_t seed) {
    rig r;
    if (rig_make(&r, dev)) return;
    const int64_t n = r.hp.count;
    st_cuda_optim *co = NULL;
    st_rng rng = st_rng_make(seed, 7);
    random_grads(r.hp.grad, n, &rng);
    CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
    CHECK_OK(st_cuda_optim_create(dev, &r.dp, 0, n, &co));
    if (!co) {
        rig_free(&r);
        return;
    }
    /* Norm: close to the CPU's, and the same bits twice. */
    double host = st_grad_norm(&r.hp), dn = -1, dn2 = -2;
    CHECK_OK(st_cuda_grad_sumsq(co, r.dp.grad, n));
    CHECK_OK(st_cuda_grad_norm_read(co, &dn));
    CHECK_OK(st_cuda_grad_sumsq(co, r.dp.grad, n));
    CHECK_OK(st_cuda_grad_norm_read(co, &dn2));
    CHECK(fabs(dn - host) <= 1e-12 * host, "norm %.17g on the device, %.17g on the host", dn, host);
    CHECK(memcmp(&dn, &dn2, sizeof dn) == 0, "norm not deterministic: %.17g then %.17g", dn, dn2);
    /* Clip above the norm: nothing changes. */
    CHECK_OK(st_cuda_grad_clip(co, r.dp.grad, n, 2.0 * host));
    compare("clip above the norm", dev, r.dp.grad, r.hp.grad, n, 0, 0);
    /* Clip to half the norm: as train.c does on the CPU. */
    const double clip = 0.5 * host;
    st_grad_scale(&r.hp, (float)(clip / (host + 1e-6)));
    CHECK_OK(st_cuda_grad_clip(co, r.dp.grad, n, clip));
    compare("clip to half the norm", dev, r.dp.grad, r.hp.grad, n, 1e-6, 0);
    CHECK_OK(st_cuda_grad_sumsq(co, r.dp.grad, n));
    CHECK_OK(st_cuda_grad_norm_read(co, &dn));
    CHECK(fabs(dn - clip) <= 1e-5 * clip, "norm after clipping %.9g, expected %.9g", dn, clip);
    /* Scale: the same float multiply on both sides. */
    CHECK_OK(st_device_upload(dev, r.dp.grad, r.hp.grad, (size_t)n * sizeof(float)));
    st_grad_scale(&r.hp, 0.37f);
    CHECK_OK(st_cuda_grad_scale(dev, r.dp.grad, n, 0.37f));
    compare("grad scale", dev, r.dp.grad, r.hp.grad, n, 0, 0);
    st_cuda_optim_free(co);
    rig_free(&r);
}

/* The deterministic reduction's kernels (src/cuda/fold.cu) against the
 * host's loops, bit for bit: 3 ranks' slices folded in rank order into a
 * non-zero accumulator, and the sums of squares of 1024-element blocks
 * (the tail past the last whole block untouched). */
static void test_fold(st_device *dev, uint64_t seed) {
    const size_t n = 5000, k = 3, block = 1024, nb = n / block;
    st_rng rng = st_rng_make(seed, 11);
    float *acc = malloc(n * sizeof *acc), *x = malloc(n * k * sizeof *x), *back = malloc(n * sizeof *back);
    double hb[8], db[8];
    float *dacc = NULL, *dx = NULL;
    double *dblk = NULL;
    for (size_t i = 0; i < n; i++)
        acc[i] = st_rng_normal(&rng);
    for (size_t i = 0; i < n * k; i++)
        x[i] = st_rng_normal(&rng) * (i % 7 == 0 ? 1e4f : 1e-3f); /* magnitudes whose order matters */
    CHECK_OK(st_device_alloc(dev, n * sizeof(float), (void **)&dacc));
    CHECK_OK(st_device_alloc(dev, n * k * sizeof(float), (void **)&dx));
    CHECK_OK(st_device_alloc(dev, 8 * sizeof(double), (void **)&dblk));
    CHECK_OK(st_device_upload(dev, dacc, acc, n * sizeof(float)));
    CHECK_OK(st_device_upload(dev, dx, x, n * k * sizeof(float)));
    CHECK_OK(st_device_fill_f32(dev, (float *)dblk, 16, NAN)); /* an unwritten block fails */
    CHECK_OK(st_device_add_slices(NULL, acc, x, n, (int)k));
    CHECK_OK(st_device_add_slices(dev, dacc, dx, n, (int)k));
    CHECK_OK(st_device_download(dev, back, dacc, n * sizeof(float)));
    CHECK(memcmp(back, acc, n * sizeof(float)) == 0, "the device's fold is not the host's bits");
    CHECK_OK(st_device_block_sumsq(NULL, acc, n, block, hb));
    CHECK_OK(st_device_block_sumsq(dev, dacc, n, block, dblk));
    CHECK_OK(st_device_download(dev, db, dblk, nb * sizeof(double)));
    for (size_t b = 0; b < nb; b++)
        CHECK(memcmp(&hb[b], &db[b], sizeof(double)) == 0 && hb[b] > 0,
              "block %zu: %.17g on the device, %.17g on "
              "the host",
              b, db[b], hb[b]);
    st_device_release(dev, dacc);
    st_device_release(dev, dx);
    st_device_release(dev, dblk);
    free(acc);
    free(x);
    free(back);
}

int main(void) {
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) return st_test_skip("cuda optim", why);
    st_device *dev = NULL;
    if (st_device_open_cuda(0, &dev) != ST_OK) {
        fprintf(stderr, "FAIL: opening cuda:0: %s\n", st_last_error());
        return 1;
    }
    printf("device: %s\n", st_device_name(dev));
    const char *e = getenv("CP_SEED");
    const uint64_t seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
    printf("CP_SEED=%llu\n", (unsigned long long)seed);
    test_optimizer(dev, seed, "adamw", false, ST_PREC_FP32);
    test_optimizer(dev, seed, "sgd", false, ST_PREC_FP32);
    test_optimizer(dev, seed, "sgd", true, ST_PREC_FP32);
    test_optimizer(dev, seed, "adamw", false, ST_PREC_BF16);
    test_optimizer(dev, seed, "sgd", true, ST_PREC_FP16);
    test_slice(dev, seed);
    test_offload(dev, seed, "adamw");
    test_offload(dev, seed, "sgd");
    test_guard(dev, seed, "adamw", INFINITY);
    test_guard(dev, seed, "sgd", NAN);
    test_norm_clip_scale(dev, seed);
    test_fold(dev, seed);
    st_device_free(dev);
    return st_test_finish("cuda optim");
}
#else
int main(void) { return st_test_skip("cuda optim", "built without CUDA (make CUDA=1)"); }
#endif
