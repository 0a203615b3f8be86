/* NPY files: NumPy's format for one array (numpy.save), versions 1.0, 2.0 and
 * 3.0.
 *
 * Layout: the magic "\x93NUMPY", a major and a minor version byte, the header
 * length (u16 little-endian in 1.0, u32 in 2.0 and 3.0), the header (a Python
 * dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and ended by a newline), then the data, exactly
 * product(shape) * itemsize bytes. docs/formats.md has the details.
 *
 * Supported: little-endian float32, float64, int32, int64 and uint8, in C
 * order. Everything is checked before it is used (magic, version, header
 * length within the file, the dict's keys and values, the data size equal to
 * the shape's product times the item size); each error names the file. Not
 * here: big-endian or Fortran-order arrays, structured or object dtypes, NPZ
 * archives, memory mapping (the data is read into memory). */
#ifndef ST_DATA_NPY_H
#define ST_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "scaletrain/status.h"

#define ST_NPY_MAX_NDIM 8
/* The longest header the reader accepts (NumPy writes about 128 bytes). */
#define ST_NPY_MAX_HEADER (1 << 20)

typedef enum st_npy_dtype { ST_NPY_U8, ST_NPY_I32, ST_NPY_I64, ST_NPY_F32, ST_NPY_F64 } st_npy_dtype;

typedef struct st_npy {
    st_npy_dtype dtype;
    int ndim;                      /* 0..ST_NPY_MAX_NDIM */
    int64_t dims[ST_NPY_MAX_NDIM]; /* (ndim); unused ones are 0 */
    int64_t count;                 /* elements: the product of dims (1 when ndim is 0) */
    size_t nbytes;                 /* count * itemsize */
    void *data;                    /* (dims...) little-endian, C order; owned, 64-byte aligned */
    int major;                     /* the file's format version: 1, 2 or 3 (the minor is 0) */
} st_npy;

/* Element i of an integer array (uint8, int32 or int64). */
static inline int64_t st_npy_int_at(const st_npy *a, int64_t i) {
    return a->dtype == ST_NPY_U8    ? ((const uint8_t *)a->data)[i]
           : a->dtype == ST_NPY_I32 ? ((const int32_t *)a->data)[i]
                                    : ((const int64_t *)a->data)[i];
}

size_t st_npy_dtype_size(st_npy_dtype t);
const char *st_npy_dtype_name(st_npy_dtype t); /* "float32", "uint8", ... */

/* Read `path` into *out, which the caller frees with st_npy_free. On failure
 * *out is zeroed and the message names the file and what is wrong. */
st_status st_npy_read(const char *path, st_npy *out);

/* The same from a whole file held in memory; `name` is used in messages. */
st_status st_npy_read_mem(const char *name, const uint8_t *buf, size_t len, st_npy *out);

/* Free the data and zero *a; accepts NULL and a zeroed st_npy. */
void st_npy_free(st_npy *a);

/* Write a C-order array as an NPY 1.0 file atomically (a temporary
 * "<path>.tmp.<pid>", synced and renamed), with the header padded so that the
 * data starts at a multiple of 64 bytes, as NumPy does. dims[i] >= 0; data
 * holds their product of elements. The caller keeps ownership of dims and data. */
st_status st_npy_write(const char *path, st_npy_dtype dtype, int ndim, const int64_t *dims, const void *data);

#endif
