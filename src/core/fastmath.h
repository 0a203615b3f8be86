/* Vectorizable float math for hot loops: libm's expf and tanhf stay scalar,
 * these are plain arithmetic that gcc vectorizes at -O3 without -ffast-math.
 * NaN stays NaN. */
#ifndef ST_CORE_FASTMATH_H
#define ST_CORE_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp for x <= 0 (the softmax's x - max): Cephes' expf (range reduction by
 * ln 2, degree-6 polynomial), relative error < 1e-7, written so that the
 * compiler vectorizes the loops that call it (libm's expf stays scalar).
 * NaN stays NaN. */
static inline float st_exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x; /* exp(-87) ~ 1.6e-38: still a normal float */
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p * r, r, r) + 1.0f;
    n = n > -126.0f ? n : -126.0f; /* a NaN n (p is NaN then) must not reach the int conversion */
    n = n < 127.0f ? n : 127.0f;
    const int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) <= 1. Absolute error
 * below 1e-7 (the small-|x| cancellation in 1 - e costs relative, not
 * absolute, accuracy, which is what GELU's 0.5 x (1 + tanh) needs). */
static inline float st_tanh(float x) {
    const float e = st_exp_nonpos(-2.0f * fabsf(x));
    const float t = (1.0f - e) / (1.0f + e);
    return copysignf(t, x);
}

#endif
