/* Data for the tests of the batch feed (test_feed.c on the host,
 * test_cuda_feed.c on a device): a float feature set (NPY pair) and a token
 * stream, written to a temporary directory; the micro-batches a sampler gives
 * over them, assembled by st_dataset_batch as the reference; and graph input
 * tensors x and y of one micro-batch, in host or device memory. */
#ifndef ST_TESTS_FEED_FIXTURE_H
#define ST_TESTS_FEED_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/device.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/npy.h"
#include "data/sampler.h"
#include "data/tokens.h"
#include "model/graph.h"

enum { FD_N = 100, FD_D = 37, FD_CLASSES = 5, FD_T = 9, FD_BATCH = 8, FD_MB = 4 };

/* tokens false: 100 samples of 37 floats and a label; true: a stream of
 * 100 * 9 + 1 tokens below 300, read as windows of 9. */
static inline st_status fd_open(const char *dir, bool tokens, st_dataset *d) {
    char a[256], b[256];
    st_rng r = st_rng_make(77, tokens);
    if (tokens) {
        const int64_t n = FD_N * FD_T + 1;
        uint32_t *t = malloc((size_t)n * sizeof *t);
        if (!t) return st_fail(ST_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < n; i++)
            t[i] = (uint32_t)st_rng_below(&r, 300);
        snprintf(a, sizeof a, "%s/feed.tokens", dir);
        st_status s = st_tokens_write(a, t, n, 300);
        free(t);
        ST_TRY(s);
        return st_dataset_open_tokens(a, FD_T, d);
    }
    float *x = malloc(FD_N * FD_D * sizeof *x);
    int32_t y[FD_N];
    if (!x) return st_fail(ST_ERR_NOMEM, "out of memory");
    for (int i = 0; i < FD_N * FD_D; i++)
        x[i] = 2.0f * st_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < FD_N; i++)
        y[i] = (int32_t)st_rng_below(&r, FD_CLASSES);
    const int64_t xd[2] = {FD_N, FD_D}, yd[1] = {FD_N};
    snprintf(a, sizeof a, "%s/feed.npy", dir);
    snprintf(b, sizeof b, "%s/feed_labels.npy", dir);
    st_status s = st_npy_write(a, ST_NPY_F32, 2, xd, x);
    free(x);
    ST_TRY(s);
    ST_TRY(st_npy_write(b, ST_NPY_I32, 1, yd, y));
    return st_dataset_open_npy(a, b, FD_CLASSES, d);
}

static inline st_sampler *fd_sampler(const st_dataset *d) {
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    o.n = d->n;
    o.batch_size = FD_BATCH;
    o.micro_batch = FD_MB;
    o.seed = 5;
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_init(&o, &s));
    return s;
}

/* The first `count` micro-batches, each x's bytes then y's (`per` bytes). */
static inline uint8_t *fd_reference(const st_dataset *d, int64_t count, size_t *per) {
    st_sampler *s = fd_sampler(d);
    const size_t xb = (size_t)(FD_MB * st_dataset_input_count(d)) * 4,
                 yb = (size_t)(FD_MB * st_dataset_target_count(d)) * 4;
    *per = xb + yb;
    uint8_t *out = calloc((size_t)count, *per);
    float *x = malloc(xb);
    int32_t *xi = malloc(xb), *y = malloc(yb);
    int64_t idx[FD_MB];
    for (int64_t k = 0; s && out && x && xi && y && k < count; k++) {
        st_sampler_next(s, idx, NULL);
        CHECK_OK(st_dataset_batch(d, idx, FD_MB, FD_MB, -100, x, xi, y));
        memcpy(out + *per * (size_t)k, d->kind == ST_DATA_TOKENS ? (void *)xi : (void *)x, xb);
        memcpy(out + *per * (size_t)k + xb, y, yb);
    }
    free(x);
    free(xi);
    free(y);
    st_sampler_free(s);
    return out;
}

/* Graph inputs for one micro-batch of d, their memory on dev (NULL: host). */
static inline st_status fd_tensors(st_device *dev, const st_dataset *d, st_tensor *x, st_tensor *y) {
    memset(x, 0, sizeof *x);
    memset(y, 0, sizeof *y);
    snprintf(x->name, sizeof x->name, "x");
    snprintf(y->name, sizeof y->name, "y");
    x->kind = y->kind = ST_TENSOR_INPUT;
    x->dtype = d->kind == ST_DATA_TOKENS ? ST_I32 : ST_F32;
    y->dtype = ST_I32;
    x->count = FD_MB * st_dataset_input_count(d);
    y->count = FD_MB * st_dataset_target_count(d);
    x->ndim = y->ndim = 1;
    x->shape[0] = x->count;
    y->shape[0] = y->count;
    void *px, *py;
    ST_TRY(st_device_alloc(dev, (size_t)x->count * 4, &px));
    ST_TRY(st_device_alloc(dev, (size_t)y->count * 4, &py));
    if (x->dtype == ST_F32)
        x->data = px;
    else
        x->idata = px;
    y->idata = py;
    return ST_OK;
}

static inline void *fd_x(const st_tensor *x) {
    return x->dtype == ST_F32 ? (void *)x->data : (void *)x->idata;
}

#endif
