/* Datasets for training and evaluation, and the epoch-seeded sample order.
 *
 * Two kinds: labelled images (IDX image + label files, or an NPY pair of
 * inputs and labels, held in memory as bytes or floats and normalised when a
 * batch is assembled) and token streams (a token file cut into windows of
 * seq_len+1 tokens: inputs and next-token targets). Batch assembly writes
 * straight into a graph's input tensors (st_dataset_batch), or one sample at a
 * time into a loader's buffers (st_dataset_sample, no OpenMP, safe from
 * several threads at once). The distributed sampler (sampler.h) and the
 * threaded loader (loader.h) build on this. */
#ifndef ST_DATA_DATASET_H
#define ST_DATA_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "scaletrain/status.h"

typedef struct st_tokens st_tokens;

typedef enum st_dataset_kind { ST_DATA_IMAGES, ST_DATA_TOKENS } st_dataset_kind;

typedef struct st_dataset {
    st_dataset_kind kind;
    int64_t n; /* samples */
    /* images: (n, h, w, c) bytes or floats and n labels in [0, num_classes) */
    int64_t h, w, c, num_classes;
    uint8_t *pixels; /* (n, h, w, c) bytes (IDX, NPY uint8), or NULL */
    float *values;   /* (n, h, w, c) floats (NPY float32/float64), or NULL */
    bool flat;       /* NPY (n, d) features: h = 1, w = d, c = 1; no crop or flip */
    int32_t *labels;
    float mean, std; /* of pixel/255 (bytes) or of the values (floats) over the training set */
    /* tokens */
    st_tokens *tokens;
    int64_t seq_len, vocab_size;
    /* A view (st_dataset_split's held-out part): its buffers and token file
     * are another dataset's, which frees them; its sample i is the token
     * window first + i (its images' pointers are offset instead). */
    bool view;
    int64_t first;
    /* For tests of the waits on data (data.timeout_s): with
     * SCALETRAIN_TEST_DATA_STALL=NAME:K in the environment when a token file
     * whose path holds NAME is opened, the read of its sample K stops for
     * good, as a read of a hung network file system would (or until
     * st_dataset_test_unstall); test_stall is K + 1 (0: none). */
    int64_t test_stall;
} st_dataset;

/* The windows of seq_len+1 tokens (inputs and the shifted targets) a
 * stream of `tokens` holds: st_dataset_open_tokens's sample count. */
int64_t st_dataset_token_windows(int64_t tokens, int64_t seq_len);
/* The samples st_dataset_split holds out of n for a fraction. */
int64_t st_dataset_split_count(int64_t n, double fraction);

/* The file sample i of d is read from (a token file, or the shard of a
 * stream that holds it); NULL for data held in memory (images). i < 0:
 * the file where the data is one (a stream of shards: NULL). */
const char *st_dataset_source(const st_dataset *d, int64_t i);

/* Images and labels from IDX files; counts must agree. */
st_status st_dataset_open_images(const char *images, const char *labels, st_dataset *out);
/* Windows of seq_len+1 tokens from a token file; every token is checked
 * against the file's vocabulary size. */
st_status st_dataset_open_tokens(const char *path, int64_t seq_len, st_dataset *out);
/* Inputs and labels from a pair of NPY files (npy.h). Inputs: (n, h, w) or
 * (n, h, w, c) images, or (n, d) features, as uint8 (normalised like IDX
 * pixels: /255, then mean and std), float32 or float64 (kept as floats,
 * float64 rounded to nearest; normalised with mean and std, which start as
 * 0 and 1). Labels: (n,) uint8, int32 or int64. Counts must agree and be at
 * least 1; every label must be in [0, num_classes) (num_classes <= 0: from the
 * data, the largest label + 1). Each error names the file (and the index). */
st_status st_dataset_open_npy(const char *inputs, const char *labels, int64_t num_classes, st_dataset *out);
/* Labelled inputs as data.type says: an NPY pair for "npy" (with
 * num_classes as st_dataset_open_npy takes it), else an IDX pair. key: the
 * configuration key that names inputs ("data.train"; labels' is key +
 * "_labels"), put in front of an error, or NULL. */
st_status st_dataset_open_pair(const char *data_type, const char *inputs, const char *labels,
                               int64_t num_classes, const char *key, st_dataset *out);
/* A data file's error s, which names the file, put after the key that names
 * it ("data.val_labels: /x: cannot open"); s returned. */
st_status st_data_key(st_status s, const char *path, const char *key);
/* Hold out round(fraction x n) samples of d as *val (0 < fraction < 1): for
 * images and features a fixed random subset (d's samples are put in an
 * order that depends only on n and seed, then the last ones are held out:
 * the same split on every run, rank and train.seed), for tokens the
 * stream's last windows (in order: a text's end; seed unused). d keeps the
 * rest; *val is a view of d's memory, valid while d is. key: the setting,
 * for errors ("data.val_split"). */
st_status st_dataset_split(st_dataset *d, double fraction, uint64_t seed, const char *key, st_dataset *val);
/* A CRC32 of what d holds, to tell a resume that its data changed though
 * its sample count did not: images and features whole (their bytes and
 * labels, in memory: 50 ms for Fashion-MNIST); tokens from 64 evenly spaced
 * stretches of up to 4096 tokens and the count (1 MiB read however large
 * the stream). Never 0. */
uint32_t st_dataset_fingerprint(const st_dataset *d);
/* Tests: let the read stopped by test_stall go on, and wait until it has
 * read its sample. */
void st_dataset_test_unstall(void);
void st_dataset_free(st_dataset *d);

/* Mean and standard deviation of pixel/255, or of the float values (for the
 * training set). */
void st_dataset_pixel_stats(const st_dataset *d, float *mean, float *std);

/* Assemble samples idx[0..n) into x (F32 images, normalised with d->mean and
 * d->std) or xi (I32 tokens) and targets y. Rows n..pad_to are padding: zero
 * inputs and ignore_index targets. */
st_status st_dataset_batch(const st_dataset *d, const int64_t *idx, int64_t n, int64_t pad_to,
                           int32_t ignore_index, float *x, int32_t *xi, int32_t *y);

/* Elements one sample takes in a batch: inputs (floats for images, int32s for
 * tokens) and targets. */
int64_t st_dataset_input_count(const st_dataset *d);
int64_t st_dataset_target_count(const st_dataset *d);

/* A random crop and horizontal flip of one image (torchvision's RandomCrop
 * with zero padding `pad`, then RandomHorizontalFlip): the output pixel
 * (y, x) is the input pixel (y + dy - pad, fx + dx - pad), fx = w-1-x when
 * flip else x, and pixel value 0 outside the image; 0 <= dx, dy <= 2*pad. */
typedef struct st_image_aug {
    int pad, dx, dy;
    bool flip;
} st_image_aug;

/* Assemble sample i into one row of a batch: x (input_count floats) for
 * images, xi (input_count int32s) for tokens, y (target_count int32s). aug
 * (may be NULL; images only) crops and flips. Serial and reentrant: loader
 * threads call it at once on different rows. Bit-for-bit what
 * st_dataset_batch writes for the same sample. */
st_status st_dataset_sample(const st_dataset *d, int64_t i, const st_image_aug *aug, float *x, int32_t *xi,
                            int32_t *y);

/* The sample order of one epoch: a permutation of [0, n) from (seed, epoch),
 * or the identity when shuffle is false. */
void st_epoch_order(int64_t n, uint64_t seed, int64_t epoch, int shuffle, int64_t *order);

#endif
