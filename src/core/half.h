/* 16-bit floats: bit conversions between float and bfloat16 / IEEE fp16, and
 * in-place rounding of float arrays to the values a 16-bit store would keep.
 *
 * The CPU backend stores everything in fp32 but, in bf16 and fp16 runs, rounds
 * exactly where the GPU stores 16-bit values (docs/precision.md), so these are
 * the one definition of "store in low precision". Rounding is to nearest,
 * ties to even (what cuda_bf16.h's __float2bfloat16_rn, __float2half_rn and
 * PyTorch's .to(dtype) do). fp16 keeps subnormals (2^-24 .. 2^-14) and
 * overflows to +-Inf from 65520 (the midpoint above the largest value, 65504);
 * bf16 has fp32's range, so only values within half an ulp of FLT_MAX overflow.
 * NaN stays NaN (quiet, sign kept; payloads are not preserved: PyTorch and
 * the hardware disagree on them, so tests compare NaN-ness, not NaN bits).
 *
 * Tested bit for bit against PyTorch by tests/py/test_half_torch.py.
 * Needs IEEE arithmetic with subnormals (no -ffast-math / flush-to-zero: the
 * fp16 subnormal path rounds with a float addition). */
#ifndef ST_CORE_HALF_H
#define ST_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#include "precision.h"

static inline uint32_t st_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float st_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t st_f32_to_bf16(float f) {
    uint32_t u = st_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry into the exponent is correct (up to Inf) */
    return (uint16_t)(u >> 16);
}

static inline float st_bf16_to_f32(uint16_t h) { return st_bits_f32((uint32_t)h << 16); }

/* F. Giesen's float_to_half_fast3_rtne (public domain), branch for branch. */
static inline uint16_t st_f32_to_f16(float f) {
    uint32_t u = st_f32_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= 0x47800000u) { /* >= 65536 (or Inf, NaN): Inf or NaN */
        o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (u < 0x38800000u) { /* below 2^-14: an fp16 subnormal or zero */
        /* Adding 0.5 puts the 10 subnormal bits at the bottom of the mantissa,
         * rounded to nearest even by the FPU. */
        const float t = st_bits_f32(u) + 0.5f;
        o = (uint16_t)(st_f32_bits(t) - 0x3f000000u);
    } else {
        const uint32_t odd = (u >> 13) & 1u;
        u += 0xc8000fffu + odd; /* rebias the exponent (-112 << 23), round; overflow carries to Inf */
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static inline float st_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) return st_bits_f32(sign | 0x7f800000u | ((em & 0x3ffu) << 13)); /* Inf, NaN */
    if (em >= 0x0400u) return st_bits_f32(sign | ((em << 13) + 0x38000000u));          /* normal */
    return st_bits_f32(sign | st_f32_bits((float)em * 0x1p-24f));                      /* subnormal, 0 */
}

/* round(f) = from_16(to_16(f)), written without branches so that the array
 * loops below vectorise (test_half checks them against the bit forms). */
static inline float st_round_bf16(float f) {
    const uint32_t u = st_f32_bits(f);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t q = (u | 0x00400000u) & 0xffff0000u; /* quiet NaN */
    return st_bits_f32((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float st_round_f16(float f) {
    const uint32_t u = st_f32_bits(f), sign = u & 0x80000000u, ax = u ^ sign;
    /* (a + c) - c with c = 2^(E+13) for a in [2^E, 2^(E+1)) rounds a to the
     * 10-bit fp16 mantissa, ties to even, in the FPU; below 2^-14 E is held at
     * -14, which gives fp16's fixed subnormal step 2^-24. */
    const uint32_t e = (ax & 0x7f800000u) < 0x38800000u ? 0x38800000u : (ax & 0x7f800000u);
    const float c = st_bits_f32(e + (13u << 23));
    uint32_t r = st_f32_bits((st_bits_f32(ax) + c) - c);
    r = r > 0x477fe000u ? 0x7f800000u : r; /* above 65504 (a tie at 65520 rounds to 65536): Inf */
    r = ax >= 0x47800000u ? (ax > 0x7f800000u ? 0x7fc00000u : 0x7f800000u) : r; /* >= 65536, Inf, NaN */
    return st_bits_f32(r | sign);
}

/* Arrays: threads above ST_HALF_PAR elements, each over blocks whose inner
 * loop the compiler vectorises (an `omp parallel for simd` over these bodies
 * stays scalar with GCC 12). */
#define ST_HALF_PAR (1 << 20)
#define ST_HALF_BLOCK 8192

/* Round x[0..n) in place to the precision's values (fp32: nothing). Large
 * arrays are split over the OpenMP threads. */
static inline void st_round_array(st_precision p, float *x, int64_t n) {
    if (p == ST_PREC_BF16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                x[i] = st_round_bf16(x[i]);
    } else if (p == ST_PREC_FP16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                x[i] = st_round_f16(x[i]);
    }
}

/* dst[i] = round(src[i]) (the compute copy of the parameters). */
static inline void st_round_copy(st_precision p, float *restrict dst, const float *restrict src, int64_t n) {
    if (p == ST_PREC_BF16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_round_bf16(src[i]);
    } else if (p == ST_PREC_FP16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_round_f16(src[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    }
}

/* 16-bit storage of x[0..n) (bf16 or fp16 bits), and back to float. */
static inline void st_to_half(st_precision p, uint16_t *restrict dst, const float *restrict src, int64_t n) {
    if (p == ST_PREC_BF16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_f32_to_bf16(src[i]);
    } else {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_f32_to_f16(src[i]);
    }
}

static inline void st_from_half(st_precision p, float *restrict dst, const uint16_t *restrict src,
                                int64_t n) {
    if (p == ST_PREC_BF16) {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_bf16_to_f32(src[i]);
    } else {
#pragma omp parallel for schedule(static) if (n > ST_HALF_PAR)
        for (int64_t b = 0; b < n; b += ST_HALF_BLOCK)
            for (int64_t i = b; i < (n - b < ST_HALF_BLOCK ? n : b + ST_HALF_BLOCK); i++)
                dst[i] = st_f16_to_f32(src[i]);
    }
}

/* The precision named by a resolved config value ("fp32", "bf16", "fp16";
 * anything else, "auto" included, is fp32). */
static inline st_precision st_precision_from_name(const char *s) {
    if (strcmp(s, "bf16") == 0) return ST_PREC_BF16;
    if (strcmp(s, "fp16") == 0) return ST_PREC_FP16;
    return ST_PREC_FP32;
}

#endif
