/* IDX files: the MNIST family's format (MNIST, Fashion-MNIST, EMNIST, KMNIST),
 * gzip-compressed or raw.
 *
 * Layout (big-endian): bytes 0x00 0x00, a type byte (0x08 = unsigned byte),
 * a dimension count, one u32 per dimension, then the elements in row-major
 * order. The reader loads a whole file into memory and checks it is exactly as
 * long as its header says. Only unsigned bytes (0x08) are supported: every
 * dataset of the family uses them. Not here: normalisation, batching (the
 * dataset and loader modules do that). */
#ifndef ST_DATA_IDX_H
#define ST_DATA_IDX_H

#include <stdbool.h>
#include <stdint.h>

#include "scaletrain/status.h"

#define ST_IDX_MAX_NDIM 4
/* The largest element count the reader accepts (4 GiB): a sanity cap against a
 * corrupt header asking for an absurd allocation. */
#define ST_IDX_MAX_COUNT ((int64_t)1 << 32)

typedef struct st_idx {
    int ndim;                      /* 1..4 */
    int64_t dims[ST_IDX_MAX_NDIM]; /* (ndim), e.g. {60000, 28, 28}; unused ones are 0 */
    uint8_t *data;                 /* (dims[0], ..., dims[ndim-1]); owned, 64-byte aligned */
    int64_t count;                 /* elements = bytes = product of dims */
} st_idx;

/* Read `path` (gzip or raw; a gzip file through libdeflate where the build
 * has it, zlib otherwise and for what libdeflate does not take) into *out,
 * which the caller frees with st_idx_free. On failure *out is zeroed and the
 * message names the file; a missing Fashion-MNIST file under
 * /usr/share/datasets/fashion-mnist gets a hint naming the Debian package
 * that installs it. */
st_status st_idx_read(const char *path, st_idx *out);

/* st_idx_read, whole=false: never the whole-file path (idx.c), zlib's
 * streaming inflate throughout; the reference the tests and
 * bench/bench_idx compare that path with. */
st_status st_idx_read_with(const char *path, st_idx *out, bool whole);

/* Whether this build has the whole-file path (libdeflate), and how many
 * files it has read in this process (tests). */
bool st_idx_whole_available(void);
int64_t st_idx_whole_reads(void);

/* Free the data and zero *x; accepts NULL and a zeroed st_idx. */
void st_idx_free(st_idx *x);

/* Write an unsigned-byte IDX file (gzip-compressed when `gzip`) atomically:
 * a temporary "<path>.tmp.<pid>" is written, synced and renamed over `path`.
 * dims[i] must be in 1..2^32-1 and data hold their product in bytes. The
 * caller keeps ownership of dims and data. */
st_status st_idx_write(const char *path, int ndim, const int64_t *dims, const uint8_t *data, bool gzip);

#endif
