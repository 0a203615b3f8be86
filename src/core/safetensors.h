/* safetensors files: the checkpoint format (model weights, optimizer moments).
 *
 * Layout (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * header length N, N bytes of JSON mapping each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
 * "__metadata__" object of strings, then the data; offsets count from the start
 * of the data. The reader validates the whole header against the file's size
 * before anything is used and names the file and the tensor in every error.
 * It reads tensors on demand (pread), so opening a large checkpoint is cheap,
 * and several threads may read from one open handle at once.
 * Not here: which names a model uses (src/model), or sharded multi-file indexes. */
#ifndef ST_CORE_SAFETENSORS_H
#define ST_CORE_SAFETENSORS_H

#include <stdint.h>

#include "scaletrain/status.h"

#define ST_SAFETENSORS_MAX_NDIM 8
/* The reference implementation's cap on the JSON header (100 MB). */
#define ST_SAFETENSORS_MAX_HEADER 100000000

typedef struct st_safetensors st_safetensors;

typedef struct st_safetensors_entry {
    const char *name;                       /* owned by the file handle */
    const char *dtype;                      /* "F32", "F16", "BF16", "F64", "I32", ... (a static string) */
    int ndim;                               /* 0 for a scalar */
    int64_t shape[ST_SAFETENSORS_MAX_NDIM]; /* (ndim) */
    int64_t count;                          /* elements: the product of shape, 1 for 0-d */
    int64_t nbytes;                         /* count * the dtype's size */
    int64_t offset;                         /* data begin, relative to the data section */
} st_safetensors_entry;

/* One tensor to write. `data` holds nbytes = product(shape) * dtype size bytes in
 * the host's (little-endian) byte order; it may be NULL when that is 0. `shape`
 * may be NULL when ndim is 0. The writer copies nothing it does not write. */
typedef struct st_safetensors_tensor {
    const char *name;
    const char *dtype; /* "F32", "F16", "BF16", ... */
    int ndim;
    const int64_t *shape; /* (ndim) */
    const void *data;
} st_safetensors_tensor;

/* Open and validate `path`: the header length against the file size, the JSON,
 * every entry's dtype, shape and offsets, no overlapping entries, no duplicate
 * names. On success *out is a handle the caller closes with st_safetensors_close;
 * on failure *out is NULL and the message names the file (and the tensor). */
st_status st_safetensors_open(const char *path, st_safetensors **out);

/* Closes the file and frees the handle and every entry; accepts NULL. */
void st_safetensors_close(st_safetensors *f);

/* The path given to open (owned by the handle). */
const char *st_safetensors_path(const st_safetensors *f);

/* Entries are ordered by their data offset (the order of the file). */
int st_safetensors_count(const st_safetensors *f);
/* Entry i in [0, count); NULL when out of range. Owned by the handle. */
const st_safetensors_entry *st_safetensors_entry_at(const st_safetensors *f, int i);
/* The entry named `name`, or NULL (binary search: cheap to call per tensor). */
const st_safetensors_entry *st_safetensors_find(const st_safetensors *f, const char *name);

/* The "__metadata__" value for `key`, or NULL. Owned by the handle. */
const char *st_safetensors_metadata(const st_safetensors *f, const char *key);

/* Read tensor `name` into dst (count floats), converting F32, F16, BF16 and F64.
 * ST_ERR_SHAPE if count is not the tensor's element count (the message names the
 * tensor and both counts); ST_ERR_FORMAT if there is no such tensor or the file
 * is shorter than it was when opened; ST_ERR_UNSUPPORTED for other dtypes. */
st_status st_safetensors_read_f32(const st_safetensors *f, const char *name, float *dst, int64_t count);

/* Copy tensor `name`'s bytes as stored (any dtype) into dst, which holds nbytes;
 * nbytes must equal the entry's nbytes (ST_ERR_SHAPE otherwise). */
st_status st_safetensors_read_raw(const st_safetensors *f, const char *name, void *dst, int64_t nbytes);

/* Write n tensors (data laid out back to back, in the given order) and n_meta
 * metadata pairs, meta_kv = {key0, value0, key1, value1, ...} (NULL when
 * n_meta is 0), to `path` atomically: a temporary "<path>.tmp.<pid>" is written,
 * synced and renamed over `path`, then the directory is synced, so a crash
 * leaves either the old file or the new one. The header is padded with spaces
 * to a multiple of 8 bytes, as the reference implementation does. Names must be
 * unique, non-empty and not "__metadata__". The caller keeps ownership of all inputs. */
st_status st_safetensors_write(const char *path, const st_safetensors_tensor *tensors, int n,
                               const char *const *meta_kv, int n_meta);

/* The size in bytes of one element of `dtype`, or 0 when it is not a known dtype. */
int st_safetensors_dtype_size(const char *dtype);

#endif
