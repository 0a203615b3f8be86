/* In-memory image and token datasets (IDX, NPY, token files), batch and
 * sample assembly, and the epoch order. */
#include "dataset.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "scaletrain/config.h"

#include "core/crc.h"
#include "core/mem.h"
#include "core/rng.h"
#include "idx.h"
#include "npy.h"
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

int64_t st_dataset_token_windows(int64_t tokens, int64_t seq_len) {
    return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

int64_t st_dataset_split_count(int64_t n, double fraction) { return (int64_t)llround(fraction * (double)n); }

st_status st_dataset_open_tokens(const char *path, int64_t seq_len, st_dataset *out) {
    memset(out, 0, sizeof *out);
    if (seq_len < 1)
        return st_fail(ST_ERR_ARG, "%s: sequence length %lld; it must be at least 1", path,
                       (long long)seq_len);
    st_status s;
    ST_GOTO(st_tokens_open(path, &out->tokens));
    const char *stall = getenv("SCALETRAIN_TEST_DATA_STALL"), *colon = stall ? strrchr(stall, ':') : NULL;
    if (colon && colon > stall) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(colon - stall), stall);
        if (strstr(path, name)) out->test_stall = atoll(colon + 1) + 1;
    }
    ST_GOTO(st_tokens_check_range(out->tokens));
    out->kind = ST_DATA_TOKENS;
    out->seq_len = seq_len;
    out->vocab_size = (int64_t)st_tokens_vocab_size(out->tokens);
    int64_t count = st_tokens_count(out->tokens);
    out->n = st_dataset_token_windows(count, seq_len);
    if (out->n < 1) {
        s = st_fail(ST_ERR_FORMAT,
                    "%s: %lld tokens is less than one sequence of %lld+1; use a larger file "
                    "or a smaller model.block_size",
                    path, (long long)count, (long long)seq_len);
        goto fail;
    }
    return ST_OK;
fail:
    st_dataset_free(out);
    return s;
}

/* Labels from an integer NPY array, each checked against the class count. */
static st_status npy_labels(const char *path, const st_npy *lb, int64_t num_classes, st_dataset *out) {
    out->labels = malloc((size_t)out->n * sizeof(int32_t));
    if (!out->labels) return st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
    const int64_t limit = num_classes > 0 ? num_classes : ST_NUM_CLASSES_MAX;
    int64_t maxl = 0;
    for (int64_t i = 0; i < out->n; i++) {
        const int64_t v = st_npy_int_at(lb, i);
        if (v < 0 && num_classes <= 0)
            return st_fail(ST_ERR_FORMAT,
                           "%s: label %lld at index %lld is negative; labels are class numbers 0, 1, ...",
                           path, (long long)v, (long long)i);
        if (v < 0 || v >= limit)
            return st_fail(ST_ERR_FORMAT,
                           "%s: label %lld at index %lld is outside [0, %lld)%s; labels are class "
                           "numbers 0, 1, ...",
                           path, (long long)v, (long long)i, (long long)limit,
                           num_classes > 0 ? " (the class count, model.num_classes)"
                                           : " (model.num_classes auto takes the largest label + 1, and a "
                                             "model has at most that many classes)");
        out->labels[i] = (int32_t)v;
        if (v > maxl) maxl = v;
    }
    out->num_classes = num_classes > 0 ? num_classes : maxl + 1;
    return ST_OK;
}

/* Inputs: bytes are taken as they are; floats are checked to be finite. */
static st_status npy_inputs(const char *path, st_npy *im, st_dataset *out) {
    const int64_t count = im->count;
    if (im->dtype == ST_NPY_U8) {
        out->pixels = im->data; /* take ownership */
        im->data = NULL;
        return ST_OK;
    }
    if (im->dtype == ST_NPY_F32) {
        out->values = im->data;
        im->data = NULL;
    } else {
        out->values = st_alloc_aligned((size_t)count * sizeof(float));
        if (!out->values) return st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
        const double *src = im->data;
        double s = 0, ss = 0, err = 0;
        for (int64_t i = 0; i < count; i++) {
            out->values[i] = (float)src[i];
            s += src[i];
            err = fmax(err, fabs((double)out->values[i] - src[i]));
        }
        const double m = s / (double)count;
        for (int64_t i = 0; i < count; i++)
            ss += (src[i] - m) * (src[i] - m);
        /* Rounded to float32 (what the model computes in), values far from 0
         * against their spread lose it: timestamps near 1.7e9 round to steps
         * of 128. Where the rounding moves a value by a tenth of the spread,
         * the data trains on what is left of it without a word: refused. */
        const double sd = sqrt(ss / (double)count);
        if (isfinite(m) && isfinite(err) && err > 0.1 * sd && sd > 0)
            return st_fail(
                ST_ERR_NUMERIC,
                "%s: float64 inputs around %.10g with a spread (standard deviation) of %.4g lose it "
                "in float32, which scaletrain computes in: rounding moves a value by up to %.4g. "
                "Subtract one offset (the training inputs' mean, say) from the training and the "
                "validation inputs before saving them (numpy.save(path, (x - offset).astype("
                "numpy.float32))), or rescale them",
                path, m, sd, err);
    }
    const int64_t per = count / out->n;
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(out->values[i]))
            return st_fail(ST_ERR_NUMERIC, "%s: sample %lld holds %g (element %lld); inputs must be finite%s",
                           path, (long long)(i / per), (double)out->values[i], (long long)(i % per),
                           im->dtype == ST_NPY_F64 ? " and fit a float32" : "");
    return ST_OK;
}

st_status st_dataset_open_npy(const char *inputs, const char *labels, int64_t num_classes, st_dataset *out) {
    memset(out, 0, sizeof *out);
    st_npy im = {0}, lb = {0};
    st_status s;
    ST_GOTO(st_npy_read(inputs, &im));
    ST_GOTO(st_npy_read(labels, &lb));
    if (im.ndim < 2 || im.ndim > 4) {
        s = st_fail(ST_ERR_FORMAT,
                    "%s: inputs must be (n, d) features, (n, h, w) or (n, h, w, c) images; this "
                    "array has %d dimension(s)",
                    inputs, im.ndim);
        goto fail;
    }
    if (im.dtype != ST_NPY_U8 && im.dtype != ST_NPY_F32 && im.dtype != ST_NPY_F64) {
        s = st_fail(ST_ERR_FORMAT,
                    "%s: inputs are %s; they must be uint8, float32 or float64: convert them with "
                    "numpy.save(path, a.astype(numpy.float32))",
                    inputs, st_npy_dtype_name(im.dtype));
        goto fail;
    }
    if (lb.ndim != 1) { /* (a column (n, 1), or one-hot rows (n, classes): said how to save them) */
        s = st_fail(ST_ERR_FORMAT, "%s: labels must have 1 dimension (n,), class numbers, not %d%s", labels,
                    lb.ndim,
                    lb.ndim == 2 && lb.dims[1] == 1 ? ": save them as numpy.save(path, y.reshape(-1))"
                    : lb.ndim == 2 ? " (one-hot rows? save the class numbers: numpy.save(path, y.argmax(1)))"
                                   : "");
        goto fail;
    }
    if (lb.dtype != ST_NPY_U8 && lb.dtype != ST_NPY_I32 && lb.dtype != ST_NPY_I64) {
        s = st_fail(ST_ERR_FORMAT,
                    "%s: labels are %s; they must be integers (uint8, int32 or int64): class "
                    "numbers, as numpy.save(path, a.astype(numpy.int64)) writes them",
                    labels, st_npy_dtype_name(lb.dtype));
        goto fail;
    }
    if (im.dims[0] != lb.dims[0]) {
        s = st_fail(ST_ERR_FORMAT, "%s holds %lld samples but %s holds %lld labels; they must be a pair",
                    inputs, (long long)im.dims[0], labels, (long long)lb.dims[0]);
        goto fail;
    }
    if (im.dims[0] == 0) {
        s = st_fail(ST_ERR_FORMAT, "%s: the dataset is empty", inputs);
        goto fail;
    }
    if (im.count == 0) {
        s = st_fail(ST_ERR_FORMAT, "%s: every sample is empty (a dimension is 0)", inputs);
        goto fail;
    }
    out->kind = ST_DATA_IMAGES;
    out->n = im.dims[0];
    out->flat = im.ndim == 2;
    out->h = im.ndim == 2 ? 1 : im.dims[1];
    out->w = im.ndim == 2 ? im.dims[1] : im.dims[2];
    out->c = im.ndim == 4 ? im.dims[3] : 1;
    out->mean = 0.0f;
    out->std = 1.0f;
    ST_GOTO(npy_labels(labels, &lb, num_classes, out));
    ST_GOTO(npy_inputs(inputs, &im, out));
    st_npy_free(&im);
    st_npy_free(&lb);
    return ST_OK;
fail:
    st_npy_free(&im);
    st_npy_free(&lb);
    st_dataset_free(out);
    return s;
}

st_status st_data_key(st_status s, const char *path, const char *key) {
    const size_t n = strlen(path);
    if (s != ST_OK && n && strncmp(st_last_error(), path, n) == 0 && st_last_error()[n] == ':')
        st_fail_context(s, "%s: ", key);
    return s;
}

st_status st_dataset_open_pair(const char *data_type, const char *inputs, const char *labels,
                               int64_t num_classes, const char *key, st_dataset *out) {
    const bool npy = strcmp(data_type, "npy") == 0;
    st_status s = npy ? st_dataset_open_npy(inputs, labels, num_classes, out)
                      : st_dataset_open_images(inputs, labels, out);
    if (s == ST_OK || !key) return s;
    char lkey[32];
    snprintf(lkey, sizeof lkey, "%s_labels", key);
    if (npy)
        st_fail_context(s, "data.type npy (%s and %s, a pair of .npy files written by numpy.save): ", key,
                        lkey);
    else {
        st_data_key(st_data_key(s, inputs, key), labels, lkey);
        if (strncmp(st_last_error(), "data.", 5) != 0) /* (the pair's: their counts) */
            st_fail_context(s, "%s and %s: ", key, lkey);
    }
    return s;
}

void st_dataset_free(st_dataset *d) {
    if (!d) return;
    if (d->view) { /* (another's memory) */
        memset(d, 0, sizeof *d);
        return;
    }
    free(d->pixels);
    free(d->values);
    free(d->labels);
    st_tokens_close(d->tokens);
    memset(d, 0, sizeof *d);
}

st_status st_dataset_split(st_dataset *d, double fraction, uint64_t seed, const char *key, st_dataset *val) {
    memset(val, 0, sizeof *val);
    const int64_t n = d->n, k = st_dataset_split_count(n, fraction);
    if (n < 2)
        return st_fail(ST_ERR_CONFIG,
                       "%s %g: data.train holds %lld sample%s, too few to split into training and validation "
                       "data; add data%s, or give validation data (data.val)",
                       key, fraction, (long long)n, n == 1 ? "" : "s",
                       d->kind == ST_DATA_TOKENS ? " or lower model.block_size" : "");
    if (!(fraction > 0 && fraction < 1) || k < 1 || k >= n)
        return st_fail(ST_ERR_CONFIG,
                       "%s %g of %lld samples holds out %lld: it must leave at least one sample for each of "
                       "training and validation; %s",
                       key, fraction, (long long)n, (long long)k,
                       k < 1 ? "raise it, or give validation data (data.val)" : "lower it");
    const int64_t per = d->h * d->w * d->c; /* (images) */
    if (d->kind == ST_DATA_IMAGES) {        /* the samples in a fixed random order */
        const int64_t esize = d->pixels ? 1 : (int64_t)sizeof(float);
        int64_t *order = malloc((size_t)n * sizeof *order);
        unsigned char *from = d->pixels ? (unsigned char *)d->pixels : (unsigned char *)d->values;
        unsigned char *to = st_alloc_aligned((size_t)(n * per * esize));
        int32_t *labels = malloc((size_t)n * sizeof *labels);
        if (!order || !to || !labels) {
            free(order), free(labels), st_free_aligned(to);
            return st_fail(ST_ERR_NOMEM, "out of memory splitting data.train for %s (%lld samples)", key,
                           (long long)n);
        }
        st_epoch_order(n, 0x5eedda7a5011770ull ^ seed, 0, 1, order); /* (the split's own seed) */
        for (int64_t i = 0; i < n; i++) {
            memcpy(to + i * per * esize, from + order[i] * per * esize, (size_t)(per * esize));
            labels[i] = d->labels[order[i]];
        }
        free(order);
        free(d->labels);
        d->labels = labels;
        if (d->pixels) {
            free(d->pixels);
            d->pixels = to;
        } else {
            free(d->values);
            d->values = (float *)to;
        }
    }
    *val = *d;
    val->view = true;
    val->n = k;
    if (d->kind == ST_DATA_IMAGES) { /* (pointers into d's for images; a window offset for tokens) */
        if (val->pixels) val->pixels += (n - k) * per;
        if (val->values) val->values += (n - k) * per;
        val->labels += n - k;
    } else {
        val->first = d->first + n - k;
    }
    val->test_stall = 0;
    d->n = n - k;
    return ST_OK;
}

uint32_t st_dataset_fingerprint(const st_dataset *d) {
    uLong c = crc32(0L, Z_NULL, 0);
    if (d->kind == ST_DATA_IMAGES) {
        const int64_t per = d->h * d->w * d->c;
        const unsigned char *b = d->pixels ? d->pixels : (const unsigned char *)d->values;
        const size_t bytes = (size_t)(d->n * per) * (d->pixels ? 1 : sizeof(float));
        c = st_crc32((uint32_t)c, b, bytes);
        c = crc32(c, (const unsigned char *)d->labels, (uInt)((size_t)d->n * sizeof *d->labels));
    } else {
        const int64_t total = d->n * d->seq_len + 1, first = d->first * d->seq_len, span = 4096;
        int32_t *buf = malloc(span * sizeof *buf);
        for (int k = 0; buf && k < 64; k++) {
            const int64_t at = first + (total > span ? (total - span) * k / 63 : 0),
                          len = total < span ? total : span;
            if (st_tokens_read_i32(d->tokens, at, len, buf) != ST_OK) {
                st_clear_error();
                break;
            }
            c = crc32(c, (const unsigned char *)buf, (uInt)(len * (int64_t)sizeof *buf));
        }
        free(buf);
        c = crc32(c, (const unsigned char *)&total, sizeof total);
    }
    return (uint32_t)c ? (uint32_t)c : 1u;
}

void st_dataset_pixel_stats(const st_dataset *d, float *mean, float *std) {
    const int64_t n = d->n * d->h * d->w * d->c;
    const uint8_t *px = d->pixels;
    const float *fv = d->values;
    double m, var;
    if (px) { /* bytes: the sums exact in integers (2^64 / 255^2 pixels), a fifth of the double loop's time */
        uint64_t s = 0, ss = 0;
#pragma omp parallel for reduction(+ : s, ss) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const uint32_t v = px[i];
            s += v;
            ss += v * v;
        }
        m = (double)s / 255.0 / (double)n;
        var = (double)ss / (255.0 * 255.0) / (double)n - m * m;
    } else { /* two passes: the mean, then the squares about it (one pass's ss/n - m*m cancels where
              * the values sit far from 0 against their spread: 1e6 +- 0.2 gave std 1e-6) */
        double s = 0, ss = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (int64_t i = 0; i < n; i++)
            s += fv[i];
        m = s / (double)n;
#pragma omp parallel for reduction(+ : ss) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const double v = fv[i] - m;
            ss += v * v;
        }
        var = ss / (double)n;
    }
    *mean = (float)m;
    *std = (float)sqrt(var > 1e-12 ? var : 1e-12);
}

const char *st_dataset_source(const st_dataset *d, int64_t i) {
    if (d->kind != ST_DATA_TOKENS || !d->tokens) return NULL;
    if (i < 0) return st_tokens_shards(d->tokens) == 1 ? st_tokens_shard_path(d->tokens, 0) : NULL;
    return st_tokens_path_at(d->tokens, (d->first + i) * d->seq_len);
}

int64_t st_dataset_input_count(const st_dataset *d) {
    return d->kind == ST_DATA_IMAGES ? d->h * d->w * d->c : d->seq_len;
}

int64_t st_dataset_target_count(const st_dataset *d) { return d->kind == ST_DATA_IMAGES ? 1 : d->seq_len; }

/* One image, normalised: v * scale - shift, with scale = 1/(255 std) for bytes
 * and 1/std for floats, shift = mean/std (floats: (v - mean) * scale, exact
 * where the values sit far from 0 against their spread); crop and flip as
 * st_image_aug says. */
static void image_row(const st_dataset *d, int64_t i, const st_image_aug *aug, float *dst) {
    const int64_t H = d->h, W = d->w, C = d->c, per = H * W * C;
    const uint8_t *px = d->pixels ? d->pixels + i * per : NULL;
    const float *fv = px ? NULL : d->values + i * per; /* exactly one of the two is set */
    const float scale = px ? 1.0f / (255.0f * d->std) : 1.0f / d->std, shift = d->mean / d->std,
                mean = d->mean, pad = px ? -shift : -mean * scale; /* (a value of 0, normalised) */
    if (!aug || (aug->dx == aug->pad && aug->dy == aug->pad && !aug->flip)) {
        if (px)
            for (int64_t k = 0; k < per; k++)
                dst[k] = (float)px[k] * scale - shift;
        else
            for (int64_t k = 0; k < per; k++)
                dst[k] = (fv[k] - mean) * scale;
        return;
    }
    for (int64_t y = 0; y < H; y++) {
        const int64_t sy = y + aug->dy - aug->pad;
        for (int64_t x = 0; x < W; x++) {
            const int64_t sx = (aug->flip ? W - 1 - x : x) + aug->dx - aug->pad;
            float *o = dst + (y * W + x) * C;
            if (sy < 0 || sy >= H || sx < 0 || sx >= W) {
                for (int64_t c = 0; c < C; c++)
                    o[c] = pad;
                continue;
            }
            const int64_t at = (sy * W + sx) * C;
            if (px)
                for (int64_t c = 0; c < C; c++)
                    o[c] = (float)px[at + c] * scale - shift;
            else
                for (int64_t c = 0; c < C; c++)
                    o[c] = (fv[at + c] - mean) * scale;
        }
    }
}

/* The test stall (test_stall): 0 while it holds, 1 released, 2 passed. */
static pthread_mutex_t stall_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stall_cv = PTHREAD_COND_INITIALIZER;
static int stall_state;

st_status st_dataset_sample(const st_dataset *d, int64_t i, const st_image_aug *aug, float *x, int32_t *xi,
                            int32_t *y) {
    if (i < 0 || i >= d->n)
        return st_fail(ST_ERR_ARG, "sample %lld is outside the dataset's %lld", (long long)i,
                       (long long)d->n);
    if (d->kind == ST_DATA_IMAGES) {
        image_row(d, i, aug, x);
        y[0] = d->labels[i];
        return ST_OK;
    }
    const bool stall = d->test_stall && i + 1 == d->test_stall;
    if (stall) { /* (the test's stall: see test_stall) */
        pthread_mutex_lock(&stall_mu);
        while (stall_state == 0)
            pthread_cond_wait(&stall_cv, &stall_mu);
        pthread_mutex_unlock(&stall_mu);
    }
    const int64_t T = d->seq_len,
                  w = d->first + i; /* window w: tokens [w*T, w*T + T], inputs then shifted targets */
    st_status s = st_tokens_read_i32(d->tokens, w * T, T, xi);
    if (s == ST_OK) memcpy(y, xi + 1, (size_t)(T - 1) * sizeof(int32_t));
    if (s == ST_OK) s = st_tokens_read_i32(d->tokens, w * T + T, 1, y + T - 1);
    if (stall) {
        pthread_mutex_lock(&stall_mu);
        stall_state = 2;
        pthread_cond_broadcast(&stall_cv);
        pthread_mutex_unlock(&stall_mu);
    }
    return s;
}

void st_dataset_test_unstall(void) {
    pthread_mutex_lock(&stall_mu);
    stall_state = 1;
    pthread_cond_broadcast(&stall_cv);
    while (stall_state != 2)
        pthread_cond_wait(&stall_cv, &stall_mu);
    pthread_mutex_unlock(&stall_mu);
}

st_status st_dataset_batch(const st_dataset *d, const int64_t *idx, int64_t n, int64_t pad_to,
                           int32_t ignore_index, float *x, int32_t *xi, int32_t *y) {
    const int64_t in = st_dataset_input_count(d), tg = st_dataset_target_count(d);
    for (int64_t b = 0; b < n; b++) /* checked here: a message set inside the parallel loop would be lost */
        if (idx[b] < 0 || idx[b] >= d->n)
            return st_fail(ST_ERR_ARG, "sample %lld is outside the dataset's %lld", (long long)idx[b],
                           (long long)d->n);
    if (d->kind == ST_DATA_IMAGES) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < pad_to; b++) {
            if (b >= n) {
                memset(x + b * in, 0, (size_t)in * sizeof(float));
                y[b] = ignore_index;
                continue;
            }
            image_row(d, idx[b], NULL, x + b * in);
            y[b] = d->labels[idx[b]];
        }
        return ST_OK;
    }
    for (int64_t b = 0; b < pad_to; b++) {
        if (b >= n) {
            memset(xi + b * in, 0, (size_t)in * sizeof(int32_t));
            for (int64_t t = 0; t < tg; t++)
                y[b * tg + t] = ignore_index;
            continue;
        }
        ST_TRY(st_dataset_sample(d, idx[b], NULL, NULL, xi + b * in, y + b * tg));
    }
    return ST_OK;
}

void st_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order) {
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle) return;
    st_rng r = st_rng_make(seed, 0x5a3b1e000000ULL + (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)st_rng_below(&r, (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
