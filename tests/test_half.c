/* The 16-bit float helpers (src/core/half.h): edge cases checked here, and a
 * converter for tests/py/test_half_torch.py, which compares every bit with
 * PyTorch's own conversions over a few million values.
 *
 * test_half                  the unit checks
 * test_half --convert IN OUT IN: raw little-endian float32; OUT: for each
 *                            value its bf16 bits then its fp16 bits (uint16
 *                            each), then the rounded float32 of each
 *                            (st_round_array), bf16 array then fp16 array. */
#include <stdint.h>

#include "check.h"
#include "core/half.h"

static void check_bf16(float x, uint16_t want) {
    uint16_t got = st_f32_to_bf16(x);
    CHECK(got == want, "bf16(%a) = 0x%04x, want 0x%04x", (double)x, got, want);
}

static void check_f16(float x, uint16_t want) {
    uint16_t got = st_f32_to_f16(x);
    CHECK(got == want, "fp16(%a) = 0x%04x, want 0x%04x", (double)x, got, want);
}

static int unit(void) {
    check_bf16(0.0f, 0x0000);
    check_bf16(-0.0f, 0x8000);
    check_bf16(1.0f, 0x3f80);
    check_bf16(-2.0f, 0xc000);
    check_bf16(INFINITY, 0x7f80);
    check_bf16(-INFINITY, 0xff80);
    check_bf16(st_bits_f32(0x3f808000u), 0x3f80); /* tie, even below */
    check_bf16(st_bits_f32(0x3f818000u), 0x3f82); /* tie, even above */
    check_bf16(st_bits_f32(0x3f808001u), 0x3f81); /* just above the tie */
    check_bf16(st_bits_f32(0x7f7fffffu), 0x7f80); /* FLT_MAX rounds to Inf */
    check_bf16(st_bits_f32(0x00000001u), 0x0000); /* the smallest subnormal rounds to 0 */
    check_bf16(st_bits_f32(0x00008000u), 0x0000); /* a subnormal tie to even 0 */
    check_bf16(st_bits_f32(0x00018000u), 0x0002);
    CHECK(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))), "bf16 NaN");
    CHECK(isnan(st_bf16_to_f32(st_f32_to_bf16(st_bits_f32(0x7f800001u)))), "bf16 signalling NaN stays NaN");

    check_f16(0.0f, 0x0000);
    check_f16(-0.0f, 0x8000);
    check_f16(1.0f, 0x3c00);
    check_f16(65504.0f, 0x7bff);
    check_f16(65519.99f, 0x7bff); /* below the midpoint to Inf */
    check_f16(65520.0f, 0x7c00);  /* the midpoint: ties to even = Inf */
    check_f16(-1e6f, 0xfc00);
    check_f16(INFINITY, 0x7c00);
    check_f16(0x1p-24f, 0x0001);        /* the smallest subnormal */
    check_f16(0x1p-25f, 0x0000);        /* half of it: tie to even 0 */
    check_f16(0x1.8p-25f, 0x0001);      /* above the tie */
    check_f16(0x1.8p-24f, 0x0002);      /* 1.5 ulp: tie to even 2 */
    check_f16(0x1p-14f, 0x0400);        /* the smallest normal */
    check_f16(0x1.ff8p-15f, 0x03ff);    /* the largest subnormal */
    check_f16(0x1.ffcp-15f, 0x0400);    /* above it, a tie: to even, the smallest normal */
    check_f16(1.0f + 0x1p-11f, 0x3c00); /* tie to even */
    check_f16(1.0f + 0x3p-11f, 0x3c02);
    CHECK(isnan(st_f16_to_f32(st_f32_to_f16(NAN))), "fp16 NaN");
    CHECK(st_f16_to_f32(0x0001) == 0x1p-24f, "fp16 subnormal to float");
    CHECK(st_f16_to_f32(0x7bff) == 65504.0f, "fp16 max to float");
    CHECK(st_f16_to_f32(0xfc00) == -INFINITY, "fp16 -Inf to float");

    /* Every fp16 and bf16 value survives the round trip. */
    int bad16 = 0, badb = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h), b = st_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && st_f32_to_f16(f) != h) bad16++;
        if (!isnan(b) && st_f32_to_bf16(b) != h) badb++;
    }
    CHECK(bad16 == 0, "%d fp16 values change in a round trip", bad16);
    CHECK(badb == 0, "%d bf16 values change in a round trip", badb);

    /* The array forms agree with the scalar ones, also past the threaded size. */
    const int64_t n = (1 << 20) + 37;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        x[i] = st_bits_f32((uint32_t)(i * 2654435761u));
    for (int p = ST_PREC_BF16; p <= ST_PREC_FP16; p++) {
        memcpy(y, x, (size_t)n * sizeof *y);
        st_round_array((st_precision)p, y, n);
        st_to_half((st_precision)p, h, x, n);
        for (int64_t i = 0; i < n; i++) {
            float r = p == ST_PREC_BF16 ? st_round_bf16(x[i]) : st_round_f16(x[i]);
            uint16_t hb = p == ST_PREC_BF16 ? st_f32_to_bf16(x[i]) : st_f32_to_f16(x[i]);
            if (st_f32_bits(y[i]) != st_f32_bits(r) || h[i] != hb) bad++;
        }
        st_from_half((st_precision)p, y, h, n);
        for (int64_t i = 0; i < n; i++) {
            float r = p == ST_PREC_BF16 ? st_round_bf16(x[i]) : st_round_f16(x[i]);
            if (st_f32_bits(y[i]) != st_f32_bits(r)) bad++;
        }
    }
    CHECK(bad == 0, "%d array conversions differ from the scalar ones", bad);
    free(x);
    free(y);
    free(h);
    return st_test_failures ? 1 : 0;
}

static int convert(const char *in, const char *out) {
    FILE *f = fopen(in, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", in);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    const long nbytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    const int64_t n = nbytes / 4;
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x), *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    uint16_t *h = malloc((size_t)(n ? n : 1) * 2 * sizeof *h);
    if (!x || !r || !h || fread(x, 4, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", in);
        return 1;
    }
    fclose(f);
    for (int64_t i = 0; i < n; i++) {
        h[2 * i] = st_f32_to_bf16(x[i]);
        h[2 * i + 1] = st_f32_to_f16(x[i]);
    }
    FILE *o = fopen(out, "wb");
    if (!o || fwrite(h, 2, (size_t)(2 * n), o) != (size_t)(2 * n)) return 1;
    for (int p = ST_PREC_BF16; p <= ST_PREC_FP16; p++) {
        memcpy(r, x, (size_t)n * sizeof *r);
        st_round_array((st_precision)p, r, n);
        if (fwrite(r, 4, (size_t)n, o) != (size_t)n) return 1;
    }
    if (fclose(o) != 0) return 1;
    free(x);
    free(r);
    free(h);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--convert") == 0) return convert(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_half [--convert IN OUT]\n");
        return 2;
    }
    return unit();
}
