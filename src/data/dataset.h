/* Datasets for training and evaluation, and the epoch-seeded sample order.
 *
 * Two kinds: labelled images (IDX image + label files, held in memory as
 * bytes and normalised when a batch is assembled) and token streams (a token
 * file cut into windows of seq_len+1 tokens: inputs and next-token targets).
 * Batch assembly writes straight into a graph's input tensors. This is the
 * simple in-memory path; the threaded loader builds on it. */
#ifndef ST_DATA_DATASET_H
#define ST_DATA_DATASET_H

#include <stdint.h>

#include "scaletrain/status.h"

typedef struct st_tokens st_tokens;

typedef enum st_dataset_kind { ST_DATA_IMAGES, ST_DATA_TOKENS } st_dataset_kind;

typedef struct st_dataset {
    st_dataset_kind kind;
    int64_t n; /* samples */
    /* images: (n, h, w, c) bytes and n labels in [0, num_classes) */
    int64_t h, w, c, num_classes;
    uint8_t *pixels;
    int32_t *labels;
    float mean, std; /* of pixel/255 over the training set */
    /* tokens */
    st_tokens *tokens;
    int64_t seq_len, vocab_size;
} st_dataset;

/* Images and labels from IDX files; counts must agree. */
st_status st_dataset_open_images(const char *images, const char *labels, st_dataset *out);
/* Windows of seq_len+1 tokens from a token file; every token is checked
 * against the file's vocabulary size. */
st_status st_dataset_open_tokens(const char *path, int64_t seq_len, st_dataset *out);
void st_dataset_free(st_dataset *d);

/* Mean and standard deviation of pixel/255 (for the training set). */
void st_dataset_pixel_stats(const st_dataset *d, float *mean, float *std);

/* Assemble samples idx[0..n) into x (F32 images, normalised with d->mean and
 * d->std) or xi (I32 tokens) and targets y. Rows n..pad_to are padding: zero
 * inputs and ignore_index targets. */
st_status st_dataset_batch(const st_dataset *d, const int64_t *idx, int64_t n, int64_t pad_to,
                           int32_t ignore_index, float *x, int32_t *xi, int32_t *y);

/* The sample order of one epoch: a permutation of [0, n) from (seed, epoch),
 * or the identity when shuffle is false. */
void st_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order);

#endif
