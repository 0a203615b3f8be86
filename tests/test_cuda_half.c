/* The mixed-precision primitives of src/core/device.h on a CUDA device
 * against the host's (src/core/half.h, itself checked bit for bit against
 * PyTorch by tests/py/test_half_torch.py): st_device_round_f32 and
 * st_device_round_copy must give the host's values bit for bit (NaN: NaN,
 * payloads aside) for bf16 and fp16 over every bf16 value, its neighbours
 * and the ties between neighbours, the same for fp16 (subnormals, 65504,
 * the 65520 tie that overflows, Inf), and random bit patterns;
 * st_device_all_finite must find one Inf or NaN anywhere in a long array
 * (first, last, middle) and nothing in a clean one; st_device_scale_f32
 * must multiply exactly as the host does; st_device_div_to_16 and
 * st_device_from_16 (16-bit gradient buckets) must give the bits of
 * st_to_half(x / 3) and st_from_half's floats.
 *
 * The host paths (device NULL) are checked first everywhere; without a CUDA
 * device the test then skips, saying why. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "core/device.h"
#include "core/half.h"
#include "core/rng.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

/* Every bf16 value, its two fp32 neighbours and the ties with the next one;
 * every fp16 value (as fp32), its neighbours and the midpoints; random bits. */
static float *make_values(int64_t *n_out) {
    const int64_t n = 65536 * 4 + 65536 * 4 + (1 << 20);
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return NULL;
    int64_t k = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t u = h << 16;
        x[k++] = st_bits_f32(u);
        x[k++] = st_bits_f32(u + 1);
        x[k++] = st_bits_f32(u + 0x8000u); /* the tie with the next bf16 value */
        x[k++] = st_bits_f32(u + 0x7fffu);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = st_f16_to_f32((uint16_t)h), g = st_f16_to_f32((uint16_t)(h + 1));
        x[k++] = f;
        x[k++] = nextafterf(f, INFINITY);
        x[k++] =
            isfinite(f) && isfinite(g) && (h & 0x7fffu) != 0x7fffu ? 0.5f * f + 0.5f * g : f; /* midpoint */
        x[k++] = nextafterf(f, -INFINITY);
    }
    st_rng r = st_rng_make(77, 1);
    for (int64_t i = 0; i < (1 << 20); i++)
        x[k++] = st_bits_f32((uint32_t)(st_rng_next(&r) >> 32));
    *n_out = k;
    return x;
}

/* got[i] must be want[i] bit for bit, or both NaN. */
static int same_bits(const char *what, const float *got, const float *want, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t a = st_f32_bits(got[i]), b = st_f32_bits(want[i]);
        if (a == b || (isnan(got[i]) && isnan(want[i]))) continue;
        if (bad < 5)
            fprintf(stderr, "FAIL %s: element %lld: 0x%08x, want 0x%08x\n", what, (long long)i, a, b);
        bad++;
    }
    if (bad) fprintf(stderr, "FAIL %s: %d of %lld differ\n", what, bad, (long long)n);
    st_test_failures += bad;
    return bad;
}

/* The round, copy, finite and scale calls on device d (NULL: the host). */
static void check_on(st_device *d, const char *where, const float *x, int64_t n) {
    const size_t nb = (size_t)n * sizeof(float);
    float *want = malloc(nb), *got = malloc(nb), *dx = NULL, *dy = NULL;
    char what[96];
    if (!want || !got) {
        CHECK(0, "out of memory");
        goto done;
    }
    CHECK_OK(st_device_alloc(d, nb, (void **)&dx));
    CHECK_OK(st_device_alloc(d, nb, (void **)&dy));
    if (st_test_failures) goto done;
    const st_precision precs[] = {ST_PREC_BF16, ST_PREC_FP16};
    for (int pi = 0; pi < 2; pi++) {
        const st_precision p = precs[pi];
        const char *pn = p == ST_PREC_BF16 ? "bf16" : "fp16";
        for (int64_t i = 0; i < n; i++)
            want[i] = p == ST_PREC_BF16 ? st_round_bf16(x[i]) : st_round_f16(x[i]);
        CHECK_OK(st_device_upload(d, dx, x, nb));
        CHECK_OK(st_device_round_f32(d, p, dx, (size_t)n));
        CHECK_OK(st_device_download(d, got, dx, nb));
        snprintf(what, sizeof what, "%s: st_device_round_f32 %s", where, pn);
        same_bits(what, got, want, n);
        CHECK_OK(st_device_upload(d, dx, x, nb));
        CHECK_OK(st_device_round_copy(d, p, dy, dx, (size_t)n));
        CHECK_OK(st_device_download(d, got, dy, nb));
        snprintf(what, sizeof what, "%s: st_device_round_copy %s", where, pn);
        same_bits(what, got, want, n);
        CHECK_OK(st_device_download(d, got, dx, nb)); /* the source is left alone */
        snprintf(what, sizeof what, "%s: st_device_round_copy's source", where);
        same_bits(what, got, x, n);
    }
    /* fp32: round is a no-op, the copy a copy */
    CHECK_OK(st_device_upload(d, dx, x, nb));
    CHECK_OK(st_device_round_f32(d, ST_PREC_FP32, dx, (size_t)n));
    CHECK_OK(st_device_round_copy(d, ST_PREC_FP32, dy, dx, (size_t)n));
    CHECK_OK(st_device_download(d, got, dy, nb));
    snprintf(what, sizeof what, "%s: fp32 round and copy", where);
    same_bits(what, got, x, n);

    /* all finite: a clean array, then one Inf or NaN at the start, middle, end */
    const int64_t m = n - 1;
    for (int64_t i = 0; i < n; i++)
        want[i] = (float)((i % 2001) - 1000) * 0.25f;
    CHECK_OK(st_device_upload(d, dx, want, nb));
    bool finite = false;
    CHECK_OK(st_device_all_finite(d, dx, (size_t)n, &finite));
    CHECK(finite, "%s: a clean array is reported non-finite", where);
    const int64_t at[] = {0, n / 2 + 3, m};
    const float bad[] = {INFINITY, -INFINITY, NAN};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const float keep = want[at[a]];
            want[at[a]] = bad[b];
            CHECK_OK(st_device_upload(d, dx, want, nb));
            finite = true;
            CHECK_OK(st_device_all_finite(d, dx, (size_t)n, &finite));
            CHECK(!finite, "%s: %g at element %lld not found", where, (double)bad[b], (long long)at[a]);
            want[at[a]] = keep;
        }
    /* a count that stops before the bad element */
    want[m] = NAN;
    CHECK_OK(st_device_upload(d, dx, want, nb));
    CHECK_OK(st_device_all_finite(d, dx, (size_t)m, &finite));
    CHECK(finite, "%s: an element past count was looked at", where);
    want[m] = 1.0f;

    /* scale: the host's products */
    const float s = 1.0f / 65536.0f * 3.0f;
    CHECK_OK(st_device_upload(d, dx, x, nb));
    CHECK_OK(st_device_scale_f32(d, dx, (size_t)n, s));
    CHECK_OK(st_device_download(d, got, dx, nb));
    for (int64_t i = 0; i < n; i++)
        want[i] = x[i] * s;
    snprintf(what, sizeof what, "%s: st_device_scale_f32", where);
    same_bits(what, got, want, n);

    /* 16-bit buckets: x / 3 rounded to 16 bits, and back to floats */
    for (int pi = 0; pi < 2; pi++) {
        const st_precision p = pi ? ST_PREC_FP16 : ST_PREC_BF16;
        uint16_t *h16 = malloc((size_t)n * 2), *w16 = malloc((size_t)n * 2), *d16 = NULL;
        CHECK_OK(st_device_alloc(d, (size_t)n * 2, (void **)&d16));
        if (h16 && w16 && d16) {
            for (int64_t i = 0; i < n; i++)
                want[i] = x[i] / 3.0f;
            st_to_half(p, w16, want, n);
            CHECK_OK(st_device_upload(d, dx, x, nb));
            CHECK_OK(st_device_div_to_16(d, p, d16, dx, (size_t)n, 3.0f));
            CHECK_OK(st_device_download(d, h16, d16, (size_t)n * 2));
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++) {
                const bool nan = p == ST_PREC_BF16 ? isnan(st_bf16_to_f32(w16[i])) : isnan(st_f16_to_f32(w16[i]));
                const bool got_nan = p == ST_PREC_BF16 ? isnan(st_bf16_to_f32(h16[i])) : isnan(st_f16_to_f32(h16[i]));
                differ += nan ? !got_nan : h16[i] != w16[i];
            }
            CHECK(differ == 0, "%s: st_device_div_to_16 %s: %lld of %lld values differ in bits", where,
                  pi ? "fp16" : "bf16", (long long)differ, (long long)n);
            CHECK_OK(st_device_from_16(d, p, dy, d16, (size_t)n));
            CHECK_OK(st_device_download(d, got, dy, nb));
            st_from_half(p, want, w16, n);
            snprintf(what, sizeof what, "%s: st_device_from_16 %s", where, pi ? "fp16" : "bf16");
            same_bits(what, got, want, n);
        }
        st_device_release(d, d16);
        free(h16);
        free(w16);
    }
done:
    st_device_release(d, dx);
    st_device_release(d, dy);
    free(want);
    free(got);
}

#ifdef ST_HAVE_CUDA
/* The 16-bit operand scratch in the allocator's count: grown from 8 to 24
 * MiB, the run holds 24 MiB more than before, not 32 (the old block freed
 * without leaving the count); a smaller request changes nothing. On a device
 * just opened (no scratch yet). */
static void check_scratch(st_device *d) {
    st_device_mem a, b, c, e;
    void *p = NULL, *q = NULL, *r = NULL;
    CHECK_OK(st_device_memory(d, &a));
    CHECK_OK(st_cuda_scratch(d, (size_t)8 << 20, &p));
    CHECK_OK(st_device_memory(d, &b));
    CHECK_OK(st_cuda_scratch(d, (size_t)24 << 20, &q));
    CHECK_OK(st_device_memory(d, &c));
    CHECK_OK(st_cuda_scratch(d, (size_t)1 << 20, &r));
    CHECK_OK(st_device_memory(d, &e));
    CHECK(p && q && r == q, "scratch pointers %p %p %p", p, q, r);
    CHECK(b.allocated - a.allocated == (int64_t)8 << 20 && c.allocated - a.allocated == (int64_t)24 << 20 &&
              e.allocated == c.allocated,
          "scratch 8, 24, 1 MiB: the run holds %lld, %lld, %lld bytes more",
          (long long)(b.allocated - a.allocated), (long long)(c.allocated - a.allocated),
          (long long)(e.allocated - a.allocated));
}
#endif

int main(void) {
    int64_t n = 0;
    float *x = make_values(&n);
    if (!x) return st_test_skip("test_cuda_half", "out of memory");
    check_on(NULL, "host", x, n);
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) {
        free(x);
        if (st_test_failures) return st_test_finish("test_cuda_half");
        return st_test_skip("test_cuda_half", why);
    }
    st_device *d = NULL;
    CHECK_OK(st_device_open_cuda(0, &d));
    if (d) {
        printf("device: %s\n", st_device_name(d));
#ifdef ST_HAVE_CUDA
        check_scratch(d);
#endif
        check_on(d, "cuda", x, n);
    }
    st_device_free(d);
    free(x);
    return st_test_finish("test_cuda_half");
}
