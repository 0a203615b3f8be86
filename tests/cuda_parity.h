/* CUDA parity: the same graph built twice, once on the host (the CPU
 * reference) and once on a CUDA device, with the same parameters and inputs;
 * every output, activation, activation gradient, parameter gradient and
 * buffer of the device graph must match the host's within a tolerance.
 *
 * The device graph's activation and gradient arenas and its work scratch
 * are poisoned with NaN before the run, so an element a kernel forgot to
 * write, or scratch read before it is written, fails the check.
 * Inputs are random each run (seeded from the clock unless CP_SEED is set in
 * the environment; the seed is printed so a failure can be replayed).
 *
 * A test case is a builder (it adds layers to a graph and, optionally, a loss)
 * and a filler (it writes valid inputs into the host graph's input tensors:
 * indices below the vocabulary, targets below the class count). Without a
 * loss the backward starts from a random gradient of the last node's output.
 * Without a CUDA device (or in a build without CUDA) cp_open returns 77 after
 * printing why, the suite's "skipped" code.
 *
 * Mixed precision (`prec` bf16 or fp16, docs/precision.md): both graphs run
 * with that compute precision, the host's emulating the device's rounding.
 * Without a loss the random output gradient is rounded to 16 bits first and
 * the backward walk rounds every activation gradient a node wrote, as
 * st_graph_backward does. On top of the tolerance, every activation and
 * activation gradient the device holds must be a 16-bit value (round(v) is v)
 * and the device's compute copy of the parameters must be the host's, bit
 * for bit: the rounding points themselves are checked exactly. */
#ifndef ST_TESTS_CUDA_PARITY_H
#define ST_TESTS_CUDA_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/device.h"
#include "core/half.h"
#include "core/rng.h"
#include "model/graph.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

typedef st_status (*cp_build_fn)(st_graph *g, void *ctx);
typedef void (*cp_fill_fn)(st_graph *host, st_rng *r, void *ctx);

typedef struct cp_case {
    const char *label;
    cp_build_fn build;
    cp_fill_fn fill; /* NULL: F32 inputs uniform in (-1, 1), I32 inputs 0 */
    void *ctx;
    double rtol, atol; /* |dev - host| <= atol + rtol |host|; bf16/fp16: atol times the tensor's max|host| */
    bool eval;         /* run in eval mode (g->training false) */
    st_precision prec; /* compute precision; 0 = fp32 */
    double frac;       /* bf16/fp16, > 0: also, at most this fraction of each activation and gradient
                          may differ from the host's by more than 1e-5 of its max|host| (sums that
                          straddle a 16-bit rounding boundary now and then, not systematically) */
} cp_case;

/* Linear layers' bias gradients cuBLASLt's epilogue summed on dev so far
 * (model.fused_bias_grad; 0 without a device or CUDA). */
static inline int64_t cp_bgrad_count(st_device *dev) {
#ifdef ST_HAVE_CUDA
    return dev ? st_cuda_bias_grad_epilogues(dev) : 0;
#else
    (void)dev;
    return 0;
#endif
}

/* The cases `what` since cp_bgrad_count gave `before` summed bias gradients
 * in the epilogue: on the emulator some, or none when it was told to refuse
 * (`refused`); a GPU's cuBLASLt may offer no such algorithm, the column sums
 * running instead (the same values): said, not failed. */
static inline void cp_check_bgrad(st_device *dev, int64_t before, bool refused, const char *what) {
    if (!dev) return;
    const int64_t ran = cp_bgrad_count(dev) - before;
#ifdef ST_CUDA_EMU
    CHECK(refused ? ran == 0 : ran > 0, "%s: %lld bias gradients summed in dW's epilogue, wanted %s", what,
          (long long)ran, refused ? "none" : "some");
#else
    (void)refused;
    printf("     %s: %lld bias gradients summed in dW's epilogue\n", what, (long long)ran);
#endif
}

/* Returns 0 with *dev open, or 77 (skip) having printed why. */
static inline int cp_open(st_device **dev) {
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    if (st_device_open_cuda(0, dev) != ST_OK) {
        fprintf(stderr, "FAIL: opening cuda:0: %s\n", st_last_error());
        return 1;
    }
    printf("device: %s\n", st_device_name(*dev));
    return 0;
}

static inline uint64_t cp_seed(void) {
    const char *e = getenv("CP_SEED");
    uint64_t s = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
    printf("CP_SEED=%llu\n", (unsigned long long)s);
    return s;
}

/* Compare n floats of the device copy `d` with the host's `h`. */
static inline int cp_compare(const char *label, const char *what, const float *d, const float *h, int64_t n,
                             double rtol, double atol) {
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)d[i] - (double)h[i]), tol = atol + rtol * fabs((double)h[i]);
        if (!(err <= tol)) {
            if (bad < 3)
                fprintf(stderr, "FAIL %s: %s[%lld] = %.9g on the device, %.9g on the host\n", label, what,
                        (long long)i, (double)d[i], (double)h[i]);
            bad++;
        } else if (err > worst) {
            worst = err;
        }
    }
    if (bad > 3) fprintf(stderr, "FAIL %s: %s: %d mismatches in all\n", label, what, bad);
    st_test_failures += bad;
    return bad;
}

/* A device tensor's n floats in a new host buffer (free it), or NULL with
 * the test failed and the reason printed. With `t` (an activation), its data
 * (or, with `grad`, its gradient) as floats whatever its storage (16-bit
 * storage, src/layers/half_io.h); dptr is then not read. */
static inline float *cp_download_as(const char *label, const char *what, st_device *dev, const float *dptr,
                                    int64_t n, const st_tensor *t, bool grad) {
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float));
    st_status s = !buf ? ST_ERR_NOMEM
                  : t  ? st_tensor_read(dev, t, grad, buf)
                       : st_device_download(dev, buf, dptr, (size_t)n * sizeof(float));
    if (s != ST_OK) {
        fprintf(stderr, "FAIL %s: reading %s back: %s\n", label, what, st_last_error());
        free(buf);
        st_test_failures++;
        return NULL;
    }
    return buf;
}
static inline float *cp_download(const char *label, const char *what, st_device *dev, const float *dptr,
                                 int64_t n) {
    return cp_download_as(label, what, dev, dptr, n, NULL, false);
}

/* Fill device memory with all-ones bits: a NaN read as a float, as bf16 and
 * as fp16, so an element no kernel wrote fails a comparison in any storage. */
static inline st_status cp_poison(st_device *dev, float *p, int64_t nfloats) {
    const uint32_t ones = 0xffffffffu;
    float v;
    memcpy(&v, &ones, sizeof v);
    return st_device_fill_f32(dev, p, (size_t)nfloats, v);
}

/* Download a device tensor's n floats and compare them; `scaled`: atol is
 * relative to the tensor's largest |host| value. */
static inline int cp_check_src(const char *label, const char *what, st_device *dev, const float *dptr,
                               const st_tensor *t, bool grad, const float *hptr, int64_t n, double rtol,
                               double atol, bool scaled) {
    float *buf = cp_download_as(label, what, dev, dptr, n, t, grad);
    if (!buf) return 1;
    double mx = 0;
    for (int64_t i = 0; scaled && i < n; i++)
        if (fabs((double)hptr[i]) > mx) mx = fabs((double)hptr[i]);
    int bad = cp_compare(label, what, buf, hptr, n, rtol, scaled ? atol * mx : atol);
    if (scaled && getenv("CP_REPORT")) { /* what the tolerance is measured against */
        double w = 0;
        for (int64_t i = 0; i < n; i++) {
            const double e = fabs((double)buf[i] - (double)hptr[i]) - rtol * fabs((double)hptr[i]);
            if (e > w) w = e;
        }
        printf("  %s: %s: largest (|dev - host| - rtol |host|) / max|host| = %.3g\n", label, what,
               mx > 0 ? w / mx : w);
    }
    free(buf);
    return bad;
}

static inline int cp_check_as(const char *label, const char *what, st_device *dev, const float *dptr,
                              const float *hptr, int64_t n, double rtol, double atol, bool scaled) {
    return cp_check_src(label, what, dev, dptr, NULL, false, hptr, n, rtol, atol, scaled);
}

/* The `frac` check of cp_case, of activation t's data or gradient. */
static inline int cp_check_frac(const char *label, const char *what, st_device *dev, const st_tensor *t,
                                bool grad, const float *hptr, int64_t n, double frac) {
    float *buf = cp_download_as(label, what, dev, NULL, n, t, grad);
    if (!buf) return 1;
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)hptr[i]) > mx) mx = fabs((double)hptr[i]);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)buf[i] - (double)hptr[i]) <= 1e-5 * mx)) off++;
    free(buf);
    if (getenv("CP_REPORT"))
        printf("  %s: %s: %.3g of the elements differ by more than 1e-5 max|host|\n", label, what,
               n ? (double)off / (double)n : 0.0);
    if (!((double)off <= frac * (double)n)) {
        fprintf(stderr, "FAIL %s: %s: %lld of %lld elements differ by more than 1e-5 max|host| (%g)\n", label,
                what, (long long)off, (long long)n, frac);
        st_test_failures++;
        return 1;
    }
    return 0;
}

static inline int cp_check(const char *label, const char *what, st_device *dev, const float *dptr,
                           const float *hptr, int64_t n, double rtol, double atol) {
    return cp_check_as(label, what, dev, dptr, hptr, n, rtol, atol, false);
}

/* Count the elements of device memory that are not `p` values (NaN aside:
 * its rounding keeps it NaN), and fail the test for them. */
static inline int cp_check_16_src(const char *label, const char *what, st_device *dev, const float *dptr,
                                  const st_tensor *t, bool grad, int64_t n, st_precision p) {
    if (p == ST_PREC_FP32) return 0;
    float *buf = cp_download_as(label, what, dev, dptr, n, t, grad);
    if (!buf) return 1;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = buf[i], r = p == ST_PREC_BF16 ? st_round_bf16(v) : st_round_f16(v);
        if (v == v && memcmp(&v, &r, sizeof v) != 0) {
            if (bad < 3)
                fprintf(stderr, "FAIL %s: %s[%lld] = %.9g on the device is not a %s value\n", label, what,
                        (long long)i, (double)v, p == ST_PREC_BF16 ? "bf16" : "fp16");
            bad++;
        }
    }
    free(buf);
    st_test_failures += bad;
    return bad;
}
static inline int cp_check_16(const char *label, const char *what, st_device *dev, const float *dptr,
                              int64_t n, st_precision p) {
    return cp_check_16_src(label, what, dev, dptr, NULL, false, n, p);
}

/* The device's compute copy of the parameters (16-bit values only: no
 * float copy beside it) against the host's (floats holding the rounded
 * masters): the same values, bit for bit. */
static inline int cp_check_compute(const char *label, st_device *dev, const st_params *dp,
                                   const st_params *hp) {
    if (hp->precision == ST_PREC_FP32) return 0;
    if (!dp->dev) /* the host against itself (no device, or ST_CP_SELFTEST): two float copies */
        return cp_check(label, "compute copy", dev, dp->compute, hp->compute, hp->count, 0, 0);
    if (!dp->compute16 || dp->compute) {
        fprintf(stderr, "FAIL %s: the device's compute copy is not 16-bit only (compute16 %p, compute %p)\n",
                label, (void *)dp->compute16, (void *)dp->compute);
        st_test_failures++;
        return 1;
    }
    const int64_t n = hp->count;
    uint16_t *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    if (!buf || st_device_download(dev, buf, dp->compute16, (size_t)n * sizeof *buf) != ST_OK) {
        fprintf(stderr, "FAIL %s: reading the compute copy back: %s\n", label, st_last_error());
        free(buf);
        st_test_failures++;
        return 1;
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float h = hp->compute[i];
        const uint16_t want = hp->precision == ST_PREC_BF16 ? st_f32_to_bf16(h) : st_f32_to_f16(h);
        if (buf[i] != want) {
            if (bad < 3)
                fprintf(stderr, "FAIL %s: compute copy[%lld] = 0x%04x on the device, host %.9g (0x%04x)\n",
                        label, (long long)i, buf[i], (double)h, want);
            bad++;
        }
    }
    free(buf);
    st_test_failures += bad;
    return bad;
}

/* The backward walk from an output gradient already in place, as
 * st_graph_backward does it but without a loss: the layers read the
 * parameters' compute copy, and in bf16/fp16 each activation gradient a node
 * wrote or added to is rounded after it. */
static inline st_status cp_walk_backward(st_graph *g) {
    const st_precision p = g->params->precision;
    st_params_use_compute(g->params, true);
    st_status s = ST_OK;
    for (int i = g->n_nodes - 1; i >= 0 && s == ST_OK; i--) {
        st_node *n = &g->nodes[i];
        if (!n->out->requires_grad) continue;
        s = n->ops->backward(n, g);
        for (int k = 0; k < n->n_in && s == ST_OK; k++)
            if (n->in[k]->kind == ST_TENSOR_ACT && n->in[k]->grad && n->in[k]->store == ST_PREC_FP32)
                s = st_device_round_f32(g->dev, p, n->in[k]->grad, (size_t)n->in[k]->count);
    }
    st_params_use_compute(g->params, false);
    return s;
}

static inline st_status cp_backward_from(st_graph *g, const float *dy) {
    ST_TRY(st_tensor_write(g->dev, g->nodes[g->n_nodes - 1].out, true, dy));
    return cp_walk_backward(g);
}

/* Run one case; returns the number of mismatches (0 = pass). */
static inline int cp_run(const cp_case *c, st_device *dev, uint64_t seed) {
    int bad = 0, n16 = 0; /* n16: activations the device stores in 16 bits */
    const int failures = st_test_failures; /* (the comparisons count their own; CP_TRY's are in bad alone) */
    st_params hp = {0}, dp = {0};
    st_graph hg, dg;
    float *dy = NULL;
    dp.dev = dev;
    st_graph_init(&hg, &hp);
    st_graph_init(&dg, &dp);
    hg.keep_acts = dg.keep_acts = true; /* every gradient is compared after backward */
#define CP_TRY(expr)                                                                                         \
    do {                                                                                                     \
        if ((expr) != ST_OK) {                                                                               \
            fprintf(stderr, "FAIL %s: %s: %s\n", c->label, #expr, st_last_error());                          \
            bad++;                                                                                           \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)
    /* the precision first: the device graph stores activations in 16 bits
     * where its layers can (src/layers/half_io.h) */
    if (c->prec != ST_PREC_FP32) {
        CP_TRY(st_params_set_precision(&hp, c->prec));
        CP_TRY(st_params_set_precision(&dp, c->prec));
    }
    CP_TRY(c->build(&hg, c->ctx));
    CP_TRY(st_graph_finalize(&hg));
    CP_TRY(c->build(&dg, c->ctx));
    CP_TRY(st_graph_finalize(&dg));
    st_params_init(&hp, seed);
    st_rng r = st_rng_make(seed, 17);
    for (int i = 0; i < hg.n_acts; i++) {
        st_tensor *t = hg.acts[i];
        if (t->kind != ST_TENSOR_INPUT) continue;
        if (t->dtype == ST_F32)
            for (int64_t j = 0; j < t->count; j++)
                t->data[j] = 2.0f * st_rng_uniform(&r) - 1.0f;
    }
    if (c->fill) c->fill(&hg, &r, c->ctx);
    /* Poison the device's activations and gradients, then give it the host's
     * parameters, buffers and inputs. */
    CP_TRY(cp_poison(dev, dg.act_arena, dg.act_count));
    CP_TRY(cp_poison(dev, dg.grad_arena, dg.grad_count));
    CP_TRY(cp_poison(dev, dg.work, dg.work_count)); /* scratch: undefined contents */
    CP_TRY(st_device_upload(dev, dp.data, hp.data, (size_t)hp.arena_count * sizeof(float)));
    if (hp.buffer_count)
        CP_TRY(st_device_upload(dev, dp.buffers, hp.buffers, (size_t)hp.buffer_count * sizeof(float)));
    for (int i = 0; i < hg.n_acts; i++) {
        st_tensor *h = hg.acts[i], *d = dg.acts[i];
        if (h->kind != ST_TENSOR_INPUT) continue;
        if (h->dtype == ST_F32)
            CP_TRY(st_device_upload(dev, d->data, h->data, (size_t)h->count * sizeof(float)));
        else
            CP_TRY(st_device_upload(dev, d->idata, h->idata, (size_t)h->count * sizeof(int32_t)));
    }
    hg.training = dg.training = !c->eval;
    hg.dropout_seed = dg.dropout_seed = seed * 31 + 7;
    CP_TRY(st_graph_forward(&hg));
    CP_TRY(st_graph_forward(&dg));
    if (!c->eval) {
        if (hg.loss) {
            CP_TRY(st_graph_backward(&hg, 1.0f));
            CP_TRY(st_graph_backward(&dg, 1.0f));
        } else {
            st_tensor *y = hg.nodes[hg.n_nodes - 1].out;
            dy = malloc((size_t)y->count * sizeof(float));
            if (!dy) goto done;
            for (int64_t j = 0; j < y->count; j++)
                dy[j] = 2.0f * st_rng_uniform(&r) - 1.0f;
            st_round_array(c->prec, dy, y->count);
            memcpy(y->grad, dy, (size_t)y->count * sizeof(float));
            CP_TRY(cp_walk_backward(&hg));
            CP_TRY(cp_backward_from(&dg, dy));
        }
    }
    CP_TRY(st_device_sync(dev));
    char what[ST_NAME_MAX + 16];
    const bool scaled = c->prec != ST_PREC_FP32;
    for (int i = 0; i < hg.n_acts; i++) {
        st_tensor *h = hg.acts[i], *d = dg.acts[i];
        if (h->kind != ST_TENSOR_ACT) continue;
        if (d->store != ST_PREC_FP32) n16++;
        bad +=
            cp_check_src(c->label, h->name, dev, NULL, d, false, h->data, h->count, c->rtol, c->atol, scaled);
        if (scaled && c->frac > 0)
            bad += cp_check_frac(c->label, h->name, dev, d, false, h->data, h->count, c->frac);
        if (h != hg.loss) bad += cp_check_16_src(c->label, h->name, dev, NULL, d, false, h->count, c->prec);
        if (!c->eval && h->grad && h->requires_grad) {
            snprintf(what, sizeof what, "d %s", h->name);
            bad +=
                cp_check_src(c->label, what, dev, NULL, d, true, h->grad, h->count, c->rtol, c->atol, scaled);
            if (scaled && c->frac > 0)
                bad += cp_check_frac(c->label, what, dev, d, true, h->grad, h->count, c->frac);
            /* the last node's output gradient is the seed: the loss's is not rounded */
            if (h != hg.loss) bad += cp_check_16_src(c->label, what, dev, NULL, d, true, h->count, c->prec);
        }
    }
    if (c->prec != ST_PREC_FP32) { /* the compute copy: the masters rounded, the same bits */
        st_params_use_compute(&hp, true);
        st_params_use_compute(&dp, true);
        CP_TRY(st_device_sync(dev));
        bad += cp_check_compute(c->label, dev, &dp, &hp);
        st_params_use_compute(&dp, false);
        st_params_use_compute(&hp, false);
    }
    for (int i = 0; i < hp.n; i++) {
        st_tensor *h = hp.t[i], *d = dp.t[i];
        bad += cp_check_as(c->label, h->name, dev, d->data, h->data, h->count, c->rtol, c->atol, scaled);
        if (!c->eval && h->kind == ST_TENSOR_PARAM) {
            snprintf(what, sizeof what, "d %s", h->name);
            bad += cp_check_as(c->label, what, dev, d->grad, h->grad, h->count, c->rtol, c->atol, scaled);
        }
    }
#undef CP_TRY
done:
    free(dy);
    st_graph_free(&dg);
    st_params_free(&dp);
    st_graph_free(&hg);
    st_params_free(&hp);
    printf("%s %s%s\n", bad ? "FAIL" : "ok  ", c->label, n16 ? " (16-bit storage)" : "");
    if (bad && st_test_failures == failures) st_test_failures += bad;
    return bad;
}

#endif
