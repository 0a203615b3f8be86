/* In-memory image and token datasets, batch assembly and epoch order. */
#include "dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "idx.h"
#include "tokens.h"

st_status st_dataset_open_images(const char *images, const char *labels, st_dataset *out) {
    memset(out, 0, sizeof *out);
    st_idx im = {0}, lb = {0};
    st_status s;
    ST_GOTO(st_idx_read(images, &im));
    ST_GOTO(st_idx_read(labels, &lb));
    if (im.ndim != 3 && im.ndim != 4) {
        s = st_fail(ST_ERR_FORMAT, "%s: images must have 3 (n, h, w) or 4 (n, h, w, c) dimensions, not %d",
                    images, im.ndim);
        goto fail;
    }
    if (lb.ndim != 1) {
        s = st_fail(ST_ERR_FORMAT, "%s: labels must have 1 dimension, not %d", labels, lb.ndim);
        goto fail;
    }
    if (im.dims[0] != lb.dims[0]) {
        s = st_fail(ST_ERR_FORMAT, "%s holds %lld images but %s holds %lld labels; they must be a pair",
                    images, (long long)im.dims[0], labels, (long long)lb.dims[0]);
        goto fail;
    }
    if (im.dims[0] == 0) {
        s = st_fail(ST_ERR_FORMAT, "%s: the dataset is empty", images);
        goto fail;
    }
    out->kind = ST_DATA_IMAGES;
    out->n = im.dims[0];
    out->h = im.dims[1];
    out->w = im.dims[2];
    out->c = im.ndim == 4 ? im.dims[3] : 1;
    out->labels = malloc((size_t)out->n * sizeof(int32_t));
    if (!out->labels) {
        s = st_fail(ST_ERR_NOMEM, "out of memory reading %s", labels);
        goto fail;
    }
    int32_t maxl = 0;
    for (int64_t i = 0; i < out->n; i++) {
        out->labels[i] = lb.data[i];
        if (out->labels[i] > maxl) maxl = out->labels[i];
    }
    out->num_classes = maxl + 1;
    out->pixels = im.data; /* take ownership */
    im.data = NULL;
    out->mean = 0.0f;
    out->std = 1.0f;
    st_idx_free(&im);
    st_idx_free(&lb);
    return ST_OK;
fail:
    st_idx_free(&im);
    st_idx_free(&lb);
    st_dataset_free(out);
    return s;
}

st_status st_dataset_open_tokens(const char *path, int64_t seq_len, st_dataset *out) {
    memset(out, 0, sizeof *out);
    st_status s;
    ST_GOTO(st_tokens_open(path, &out->tokens));
    ST_GOTO(st_tokens_check_range(out->tokens));
    out->kind = ST_DATA_TOKENS;
    out->seq_len = seq_len;
    out->vocab_size = (int64_t)st_tokens_vocab_size(out->tokens);
    int64_t count = st_tokens_count(out->tokens);
    out->n = count > seq_len ? (count - 1) / seq_len : 0;
    if (out->n < 1) {
        s = st_fail(ST_ERR_FORMAT, "%s: %lld tokens is less than one sequence of %lld+1; use a larger file "
                    "or a smaller model.block_size", path, (long long)count, (long long)seq_len);
        goto fail;
    }
    return ST_OK;
fail:
    st_dataset_free(out);
    return s;
}

void st_dataset_free(st_dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    st_tokens_close(d->tokens);
    memset(d, 0, sizeof *d);
}

void st_dataset_pixel_stats(const st_dataset *d, float *mean, float *std) {
    const int64_t n = d->n * d->h * d->w * d->c;
    double s = 0, ss = 0;
#pragma omp parallel for reduction(+ : s, ss) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double v = d->pixels[i] / 255.0;
        s += v;
        ss += v * v;
    }
    double m = s / (double)n, var = ss / (double)n - m * m;
    *mean = (float)m;
    *std = (float)sqrt(var > 1e-12 ? var : 1e-12);
}

st_status st_dataset_batch(const st_dataset *d, const int64_t *idx, int64_t n, int64_t pad_to,
                           int32_t ignore_index, float *x, int32_t *xi, int32_t *y) {
    if (d->kind == ST_DATA_IMAGES) {
        const int64_t per = d->h * d->w * d->c;
        const float scale = 1.0f / (255.0f * d->std), shift = d->mean / d->std;
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < pad_to; b++) {
            float *dst = x + b * per;
            if (b >= n) {
                memset(dst, 0, (size_t)per * sizeof(float));
                y[b] = ignore_index;
                continue;
            }
            const uint8_t *src = d->pixels + idx[b] * per;
            for (int64_t i = 0; i < per; i++) dst[i] = (float)src[i] * scale - shift;
            y[b] = d->labels[idx[b]];
        }
        return ST_OK;
    }
    const int64_t T = d->seq_len;
    int32_t *row = malloc((size_t)(T + 1) * sizeof(int32_t));
    if (!row) return st_fail(ST_ERR_NOMEM, "out of memory assembling a batch");
    st_status s = ST_OK;
    for (int64_t b = 0; b < pad_to && s == ST_OK; b++) {
        if (b >= n) {
            for (int64_t t = 0; t < T; t++) {
                xi[b * T + t] = 0;
                y[b * T + t] = ignore_index;
            }
            continue;
        }
        s = st_tokens_read_i32(d->tokens, idx[b] * T, T + 1, row);
        memcpy(xi + b * T, row, (size_t)T * sizeof(int32_t));
        memcpy(y + b * T, row + 1, (size_t)T * sizeof(int32_t));
    }
    free(row);
    return s;
}

void st_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    st_rng r = st_rng_make(seed, 0x5a3b1e000000ULL + (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)st_rng_below(&r, (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
