/* Seeded, counter-friendly random numbers: splitmix64 streams.
 *
 * A stream is derived from (seed, a name or an index), so that initialising
 * one parameter or one dropout mask does not depend on what was drawn before:
 * the same seed gives the same bits whatever the thread count or build order.
 * Not cryptographic. */
#ifndef ST_CORE_RNG_H
#define ST_CORE_RNG_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct st_rng {
    uint64_t state;
} st_rng;

/* splitmix64 finalizer (Steele, Lea, Flood 2014). */
static inline uint64_t st_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* FNV-1a, to turn a tensor name into a stream id. */
static inline uint64_t st_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

/* FNV-1a over n words of `width` bytes, 4 (the bits of floats: -0 and 0
 * differ, as they would in the next step) or 2 (a device's bf16/fp16
 * compute copy): what ranks compare of their weights (dist/agree.c,
 * st_params_set_weights). Non-negative, so an all-reduce's min and max of
 * it never overflow. */
static inline int64_t st_hash_words(const void *x, int64_t n, int width) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w = 0;
        if (width == 4)
            memcpy(&w, (const char *)x + 4 * i, 4);
        else
            w = ((const uint16_t *)x)[i];
        h = (h ^ w) * 1099511628211ull;
    }
    return (int64_t)(h >> 2);
}

static inline st_rng st_rng_make(uint64_t seed, uint64_t stream) {
    st_rng r = {st_mix64(seed ^ st_mix64(stream))};
    return r;
}

static inline uint64_t st_rng_next(st_rng *r) {
    r->state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = r->state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The stream n draws further on: a draw is a function of the counter alone
 * (state + k golden), so a stream's draws can be made by several threads,
 * each from its own start, and be the same as one thread's. */
static inline st_rng st_rng_skip(st_rng r, uint64_t n) {
    r.state += n * 0x9e3779b97f4a7c15ULL;
    return r;
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float st_rng_uniform(st_rng *r) {
    return (float)(st_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n). */
static inline uint64_t st_rng_below(st_rng *r, uint64_t n) { return st_rng_next(r) % n; }

/* Standard normal by Box-Muller (one value per call; simple over fast). */
static inline float st_rng_normal(st_rng *r) {
    double u1 = ((double)(st_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(st_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Stateless uniform for element i of stream (seed, stream): for dropout masks
 * drawn in parallel. */
static inline float st_rng_at(uint64_t seed, uint64_t stream, uint64_t i) {
    return (float)(st_mix64(st_mix64(seed ^ st_mix64(stream)) + i) >> 40) * (1.0f / 16777216.0f);
}

#endif
