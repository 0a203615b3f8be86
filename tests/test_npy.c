/* NPY: round trips through our writer for every dtype, version 2.0 and 3.0
 * headers, every malformed file (truncated, bad magic, bad version, Fortran
 * order, unsupported dtype, big-endian, a header that lies about its length,
 * bytes after the data), and NPY datasets (images, features, label checks).
 *
 * tests/py/test_npy_numpy.py drives the modes that face NumPy:
 *   test_npy --check FILE EXPECTED   read FILE and compare with EXPECTED:
 *                                    "dtype ndim dims... count values..." (ints
 *                                    in decimal, floats in C99 hex)
 *   test_npy --fail FILE NEEDLE      reading FILE must fail naming FILE and NEEDLE
 *   test_npy --write DIR             write w_*.npy files for NumPy to read
 *   test_npy --dataset X Y K         open the pair, print a summary line
 *   test_npy --dataset-fail X Y K NEEDLE
 * With no arguments it runs its own tests. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scaletrain/config.h"

#include "check.h"
#include "data/dataset.h"
#include "data/npy.h"

static char dir[64];

static void put_file(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static double value_at(const st_npy *a, int64_t i) {
    switch (a->dtype) {
    case ST_NPY_U8:
        return ((const uint8_t *)a->data)[i];
    case ST_NPY_I32:
        return ((const int32_t *)a->data)[i];
    case ST_NPY_I64:
        return (double)((const int64_t *)a->data)[i];
    case ST_NPY_F32:
        return ((const float *)a->data)[i];
    case ST_NPY_F64:
        return ((const double *)a->data)[i];
    }
    return 0;
}

/* ---- modes for the NumPy interop test ---- */

static int check_file(const char *path, const char *expected) {
    FILE *fp = fopen(expected, "r");
    if (!fp) return fprintf(stderr, "cannot open %s\n", expected), 2;
    char dtype[16];
    int ndim;
    if (fscanf(fp, "%15s %d", dtype, &ndim) != 2) return fprintf(stderr, "bad %s\n", expected), 2;
    st_npy a;
    st_status s = st_npy_read(path, &a);
    if (s != ST_OK) {
        fprintf(stderr, "FAIL %s: %s\n", path, st_last_error());
        fclose(fp);
        return 1;
    }
    CHECK(strcmp(dtype, st_npy_dtype_name(a.dtype)) == 0, "%s: dtype %s, expected %s", path,
          st_npy_dtype_name(a.dtype), dtype);
    CHECK(a.ndim == ndim, "%s: %d dimensions, expected %d", path, a.ndim, ndim);
    for (int i = 0; i < ndim; i++) {
        long long d = -1;
        if (fscanf(fp, "%lld", &d) != 1) break;
        CHECK(i >= a.ndim || a.dims[i] == d, "%s: dims[%d] = %lld, expected %lld", path, i,
              (long long)a.dims[i], d);
    }
    long long count = -1;
    if (fscanf(fp, "%lld", &count) != 1) count = -1;
    CHECK(a.count == count, "%s: %lld elements, expected %lld", path, (long long)a.count, count);
    int bad = 0;
    for (int64_t i = 0; i < a.count && i < count; i++) {
        char tok[64];
        if (fscanf(fp, "%63s", tok) != 1) {
            bad++;
            break;
        }
        if (a.dtype == ST_NPY_I64)
            bad += ((const int64_t *)a.data)[i] != strtoll(tok, NULL, 10);
        else if (a.dtype == ST_NPY_I32 || a.dtype == ST_NPY_U8)
            bad += value_at(&a, i) != (double)strtoll(tok, NULL, 10);
        else
            bad += value_at(&a, i) != strtod(tok, NULL); /* exact: hex floats */
    }
    CHECK(bad == 0, "%s: %d values differ", path, bad);
    fclose(fp);
    st_npy_free(&a);
    return st_test_failures ? 1 : 0;
}

static int expect_fail(const char *path, const char *needle) {
    st_npy a;
    st_clear_error();
    st_status s = st_npy_read(path, &a);
    const char *msg = st_last_error();
    if (s == ST_OK || !strstr(msg, path) || !strstr(msg, needle)) {
        fprintf(stderr, "FAIL %s: got %s (\"%s\"), expected an error naming the file and '%s'\n", path,
                st_status_name(s), msg, needle);
        st_npy_free(&a);
        return 1;
    }
    CHECK(a.data == NULL && a.count == 0, "*out not zeroed after a failure");
    printf("%s: %s\n", path, msg);
    return st_test_failures ? 1 : 0;
}

/* Files NumPy reads back (tests/py/test_npy_numpy.py knows the values). */
static int write_files(const char *d) {
    char p[512];
    float f[12];
    for (int i = 0; i < 12; i++)
        f[i] = (float)i * 0.5f - 1.0f;
    uint8_t u[24];
    for (int i = 0; i < 24; i++)
        u[i] = (uint8_t)(i * 7 % 256 + (i == 23) * 200);
    int64_t big[5] = {INT64_MIN, -1, 0, (int64_t)1 << 40, INT64_MAX};
    int32_t i32[4] = {INT32_MIN, -7, 7, INT32_MAX};
    double scalar = 3.25;
    int64_t d2[2] = {3, 4}, d3[3] = {2, 3, 4}, d1[1] = {5}, d1b[1] = {4}, de[2] = {0, 3};
    snprintf(p, sizeof p, "%s/w_f32.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_F32, 2, d2, f));
    snprintf(p, sizeof p, "%s/w_u8.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_U8, 3, d3, u));
    snprintf(p, sizeof p, "%s/w_i64.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_I64, 1, d1, big));
    snprintf(p, sizeof p, "%s/w_i32.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_I32, 1, d1b, i32));
    snprintf(p, sizeof p, "%s/w_f64.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_F64, 0, NULL, &scalar));
    snprintf(p, sizeof p, "%s/w_empty.npy", d);
    CHECK_OK(st_npy_write(p, ST_NPY_F32, 2, de, NULL));
    return st_test_failures ? 1 : 0;
}

static int dataset_mode(const char *x, const char *y, const char *k, const char *needle) {
    st_dataset d;
    st_clear_error();
    st_status s = st_dataset_open_npy(x, y, atoll(k), &d);
    if (needle) {
        if (s == ST_OK || !strstr(st_last_error(), needle)) {
            fprintf(stderr, "FAIL: got %s (\"%s\"), expected an error with '%s'\n", st_status_name(s),
                    st_last_error(), needle);
            if (s == ST_OK) st_dataset_free(&d);
            return 1;
        }
        printf("%s\n", st_last_error());
        return 0;
    }
    if (s != ST_OK) return fprintf(stderr, "FAIL: %s\n", st_last_error()), 1;
    double sum = 0;
    const int64_t count = d.n * d.h * d.w * d.c;
    for (int64_t i = 0; i < count; i++)
        sum += d.pixels ? d.pixels[i] : d.values[i];
    int64_t lsum = 0;
    for (int64_t i = 0; i < d.n; i++)
        lsum += d.labels[i];
    printf("n=%lld h=%lld w=%lld c=%lld classes=%lld flat=%d bytes=%d sum=%.17g labels=%lld\n",
           (long long)d.n, (long long)d.h, (long long)d.w, (long long)d.c, (long long)d.num_classes, d.flat,
           d.pixels != NULL, sum, (long long)lsum);
    st_dataset_free(&d);
    return 0;
}

/* ---- the program's own tests ---- */

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static void round_trips(void) {
    const st_npy_dtype types[] = {ST_NPY_U8, ST_NPY_I32, ST_NPY_I64, ST_NPY_F32, ST_NPY_F64};
    uint8_t data[8 * 60];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    const int64_t shapes[][3] = {{3, 4, 5}, {60, 0, 0}, {0, 0, 0}, {2, 0, 7}};
    const int ndims[] = {3, 1, 0, 3};
    for (int t = 0; t < 5; t++)
        for (int sh = 0; sh < 4; sh++) {
            char p[128];
            path_of(p, sizeof p, "rt.npy");
            CHECK_OK(st_npy_write(p, types[t], ndims[sh], shapes[sh], data));
            st_npy a;
            CHECK_OK(st_npy_read(p, &a));
            int64_t count = 1;
            for (int i = 0; i < ndims[sh]; i++)
                count *= shapes[sh][i];
            CHECK(a.dtype == types[t] && a.ndim == ndims[sh] && a.count == count && a.major == 1 &&
                      a.nbytes == (size_t)count * st_npy_dtype_size(types[t]),
                  "%s shape %d: dtype %d ndim %d count %lld", st_npy_dtype_name(types[t]), sh, (int)a.dtype,
                  a.ndim, (long long)a.count);
            CHECK(a.data && memcmp(a.data, data, a.nbytes) == 0, "%s shape %d: data",
                  st_npy_dtype_name(types[t]), sh);
            CHECK(((uintptr_t)a.data & 63) == 0, "data not 64-byte aligned");
            st_npy_free(&a);
            CHECK(a.data == NULL, "free zeroes");
        }
    st_npy_free(NULL);
}

/* A file from a header text and version; data_bytes of pattern follow. */
static void craft(const char *name, int major, int minor, const char *header, int64_t len_override,
                  size_t data_bytes) {
    uint8_t buf[4096];
    size_t hl = strlen(header), n = 0;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = (uint8_t)minor;
    int64_t L = len_override >= 0 ? len_override : (int64_t)hl;
    if (major == 1) {
        buf[8] = (uint8_t)L, buf[9] = (uint8_t)(L >> 8);
        n = 10;
    } else {
        for (int i = 0; i < 4; i++)
            buf[8 + i] = (uint8_t)(L >> (8 * i));
        n = 12;
    }
    memcpy(buf + n, header, hl);
    n += hl;
    for (size_t i = 0; i < data_bytes; i++)
        buf[n++] = (uint8_t)i;
    char p[128];
    path_of(p, sizeof p, name);
    put_file(p, buf, n);
}

static void read_ok(const char *name, st_npy_dtype t, int ndim, int64_t d0, int major) {
    char p[128];
    path_of(p, sizeof p, name);
    st_npy a;
    CHECK_OK(st_npy_read(p, &a));
    CHECK(a.dtype == t && a.ndim == ndim && (ndim == 0 || a.dims[0] == d0) && a.major == major,
          "%s: dtype %s ndim %d dims[0] %lld major %d", name, st_npy_dtype_name(a.dtype), a.ndim,
          (long long)a.dims[0], a.major);
    st_npy_free(&a);
}

static void read_fails(const char *name, st_status code, const char *needle) {
    char p[128];
    path_of(p, sizeof p, name);
    st_npy a;
    CHECK_FAILS(st_npy_read(p, &a), code, needle);
    CHECK(strstr(st_last_error(), p) != NULL, "%s: the message does not name the file: %s", name,
          st_last_error());
    CHECK(a.data == NULL, "%s: data left after a failure", name);
}

static void headers(void) {
    const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n";
    craft("v1.npy", 1, 0, h, -1, 24);
    read_ok("v1.npy", ST_NPY_F32, 2, 2, 1);
    craft("v2.npy", 2, 0, h, -1, 24);
    read_ok("v2.npy", ST_NPY_F32, 2, 2, 2);
    craft("v3.npy", 3, 0, h, -1, 24);
    read_ok("v3.npy", ST_NPY_F32, 2, 2, 3);
    /* keys in another order, double quotes, no trailing comma, Python 2 longs */
    craft("order.npy", 1, 0, "{\"shape\": (4L,), \"fortran_order\": False, \"descr\": \"<i8\"}\n", -1, 32);
    read_ok("order.npy", ST_NPY_I64, 1, 4, 1);
    craft("scalar.npy", 1, 0, "{'descr': '|u1', 'fortran_order': False, 'shape': ()}\n", -1, 1);
    read_ok("scalar.npy", ST_NPY_U8, 0, 0, 1);

    char p[128];
    path_of(p, sizeof p, "empty.npy");
    put_file(p, "", 0);
    read_fails("empty.npy", ST_ERR_FORMAT, "too short");
    path_of(p, sizeof p, "magic.npy");
    put_file(p, "\x93NUMPZ\x01\x00\x10\x00{}", 12);
    read_fails("magic.npy", ST_ERR_FORMAT, "not an NPY file");
    path_of(p, sizeof p, "short.npy");
    put_file(p, "\x93NUMPY\x01", 7);
    read_fails("short.npy", ST_ERR_FORMAT, "truncated");
    craft("v4.npy", 4, 0, h, -1, 24);
    read_fails("v4.npy", ST_ERR_FORMAT, "version 4.0");
    craft("v11.npy", 1, 1, h, -1, 24);
    read_fails("v11.npy", ST_ERR_FORMAT, "version 1.1");
    craft("trunc.npy", 1, 0, h, -1, 23);
    read_fails("trunc.npy", ST_ERR_FORMAT, "it is truncated");
    craft("long.npy", 1, 0, h, -1, 25);
    read_fails("long.npy", ST_ERR_FORMAT, "more than one array");
    craft("hlong.npy", 1, 0, h, (int64_t)strlen(h) + 40, 24); /* reaches past the end */
    read_fails("hlong.npy", ST_ERR_FORMAT, "only");
    craft("hlong2.npy", 1, 0, h, (int64_t)strlen(h) + 4, 24); /* swallows data bytes */
    read_fails("hlong2.npy", ST_ERR_FORMAT, "malformed");
    craft("hshort.npy", 1, 0, h, 30, 24); /* cuts the dict */
    read_fails("hshort.npy", ST_ERR_FORMAT, "malformed");
    craft("hhuge.npy", 2, 0, h, 0x7fffffff, 24);
    read_fails("hhuge.npy", ST_ERR_FORMAT, "more than");
    craft("fortran.npy", 1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", -1, 24);
    read_fails("fortran.npy", ST_ERR_UNSUPPORTED, "Fortran order");
    craft("f2.npy", 1, 0, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }\n", -1, 4);
    read_fails(
        "f2.npy", ST_ERR_UNSUPPORTED,
        "dtype '<f2' is not supported; use float32 (<f4), float64 (<f8), int32 (<i4), int64 (<i8) or uint8 "
        "(|u1): inputs as numpy.save(path, a.astype(numpy.float32)), labels as numpy.save(path, "
        "a.astype(numpy.int64))");
    craft("be.npy", 1, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", -1, 8);
    read_fails("be.npy", ST_ERR_UNSUPPORTED, "big-endian");
    craft("struct.npy", 1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", -1, 8);
    read_fails("struct.npy", ST_ERR_UNSUPPORTED, "structured");
    craft("nokey.npy", 1, 0, "{'descr': '<f4', 'shape': (2,), }\n", -1, 8);
    read_fails("nokey.npy", ST_ERR_FORMAT, "no 'fortran_order'");
    craft("extra.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", -1, 8);
    read_fails("extra.npy", ST_ERR_FORMAT, "unexpected key 'x'");
    craft("dup.npy", 1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\n", -1,
          8);
    read_fails("dup.npy", ST_ERR_FORMAT, "twice");
    craft("notuple.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}\n", -1, 8);
    read_fails("notuple.npy", ST_ERR_FORMAT, "not a tuple");
    craft("neg.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}\n", -1, 8);
    read_fails("neg.npy", ST_ERR_FORMAT, "non-negative integer");
    craft("overflow.npy", 1, 0,
          "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4)}\n", -1, 8);
    read_fails("overflow.npy", ST_ERR_FORMAT, "overflows");
    craft("ndim.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}\n", -1,
          4);
    read_fails("ndim.npy", ST_ERR_UNSUPPORTED, "more than 8 dimensions");
    craft("garbage.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x\n", -1, 8);
    read_fails("garbage.npy", ST_ERR_FORMAT, "after the closing");
    craft("fo.npy", 1, 0, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}\n", -1, 8);
    read_fails("fo.npy", ST_ERR_FORMAT, "not True or False");
    path_of(p, sizeof p, "missing.npy");
    st_npy a;
    CHECK_FAILS(st_npy_read(p, &a), ST_ERR_IO, "cannot open");
    CHECK_FAILS(st_npy_read(dir, &a), ST_ERR_IO, "not a regular file");
    /* the in-memory reader: the same checks */
    const uint8_t bad_magic[] = "\x93NUMPX\x01\x00";
    CHECK_FAILS(st_npy_read_mem("mem", bad_magic, 8, &a), ST_ERR_FORMAT, "mem: not an NPY file");
    CHECK_FAILS(st_npy_read_mem("mem", bad_magic, 0, &a), ST_ERR_FORMAT, "too short");
    CHECK_FAILS(st_npy_write(p, ST_NPY_F32, 9, NULL, NULL), ST_ERR_ARG, "9 dimensions");
}

static void write_pair(const char *x, st_npy_dtype xt, int nd, const int64_t *xd, const void *xv,
                       const char *y, st_npy_dtype yt, int64_t n, const void *yv) {
    char px[128], py[128];
    path_of(px, sizeof px, x);
    path_of(py, sizeof py, y);
    CHECK_OK(st_npy_write(px, xt, nd, xd, xv));
    CHECK_OK(st_npy_write(py, yt, 1, &n, yv));
}

static void datasets(void) {
    char px[128], py[128];
    uint8_t img[10 * 4 * 3];
    for (int i = 0; i < 120; i++)
        img[i] = (uint8_t)(i * 5);
    int64_t lab[10] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
    const int64_t d3[3] = {10, 4, 3};
    write_pair("im.npy", ST_NPY_U8, 3, d3, img, "lab.npy", ST_NPY_I64, 10, lab);
    path_of(px, sizeof px, "im.npy");
    path_of(py, sizeof py, "lab.npy");
    st_dataset d;
    CHECK_OK(st_dataset_open_npy(px, py, 0, &d));
    CHECK(d.n == 10 && d.h == 4 && d.w == 3 && d.c == 1 && d.num_classes == 5 && d.pixels && !d.values &&
              !d.flat,
          "uint8 images: n %lld h %lld w %lld c %lld classes %lld", (long long)d.n, (long long)d.h,
          (long long)d.w, (long long)d.c, (long long)d.num_classes);
    /* the same bits as an IDX dataset would give: bytes normalised by st_dataset_batch */
    float x[12];
    int32_t y;
    CHECK_OK(st_dataset_sample(&d, 3, NULL, x, NULL, &y));
    CHECK(y == 3 && x[0] == (float)img[36] * (1.0f / 255.0f) && x[11] == (float)img[47] * (1.0f / 255.0f),
          "sample 3");
    st_dataset_free(&d);
    CHECK_OK(st_dataset_open_npy(px, py, 7, &d));
    CHECK(d.num_classes == 7, "num_classes given: %lld", (long long)d.num_classes);
    st_dataset_free(&d);
    CHECK_FAILS(st_dataset_open_npy(px, py, 4, &d), ST_ERR_FORMAT, "label 4 at index 4 is outside [0, 4)");
    CHECK(strstr(st_last_error(), py) != NULL, "the label error does not name the file");
    /* auto: the largest label + 1, up to model.num_classes' limit (a stray 2^25 made a 33554433-way head,
     * 2^30 one of 3e9 parameters) */
    lab[7] = ST_NUM_CLASSES_MAX - 1;
    write_pair("im.npy", ST_NPY_U8, 3, d3, img, "lab.npy", ST_NPY_I64, 10, lab);
    CHECK_OK(st_dataset_open_npy(px, py, 0, &d));
    CHECK(d.num_classes == ST_NUM_CLASSES_MAX, "the largest label: %lld classes", (long long)d.num_classes);
    st_dataset_free(&d);
    lab[7] = ST_NUM_CLASSES_MAX;
    write_pair("im.npy", ST_NPY_U8, 3, d3, img, "lab.npy", ST_NPY_I64, 10, lab);
    CHECK_FAILS(
        st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT,
        "label 16777216 at index 7 is outside [0, 16777216) (model.num_classes auto takes the largest "
        "label + 1, and a model has at most that many classes)");

    /* float32 (n, h, w, c) and float64 (n, d) features; int32 and uint8 labels */
    float f[6 * 2 * 2 * 2];
    for (int i = 0; i < 48; i++)
        f[i] = (float)i * 0.25f - 3.0f;
    int32_t l32[6] = {1, 0, 1, 0, 1, 1};
    const int64_t d4[4] = {6, 2, 2, 2};
    write_pair("f4.npy", ST_NPY_F32, 4, d4, f, "l32.npy", ST_NPY_I32, 6, l32);
    path_of(px, sizeof px, "f4.npy");
    path_of(py, sizeof py, "l32.npy");
    CHECK_OK(st_dataset_open_npy(px, py, 2, &d));
    CHECK(d.n == 6 && d.h == 2 && d.w == 2 && d.c == 2 && d.values && !d.pixels && d.values[47] == f[47],
          "float32 images");
    float mean, std;
    st_dataset_pixel_stats(&d, &mean, &std);
    CHECK_CLOSE(mean, 2.875, 1e-6);
    d.mean = mean, d.std = std;
    float row[8];
    CHECK_OK(st_dataset_sample(&d, 5, NULL, row, NULL, &y));
    CHECK_CLOSE(row[7], (f[47] - mean) / std, 1e-5);
    st_dataset_free(&d);
    /* data.val_split: a third of the 6 held out, a fixed random subset; each
     * sample in exactly one part, the same parts on every split of a seed
     * (data.val_split_seed), another subset for another seed */
    int order[3][6];
    for (int rep = 0; rep < 3; rep++) {
        st_dataset v;
        CHECK_OK(st_dataset_open_npy(px, py, 2, &d));
        CHECK_OK(st_dataset_split(&d, 1.0 / 3, rep == 2 ? 1 : 0, "data.val_split", &v));
        CHECK(d.n == 4 && v.n == 2 && v.view && !d.view, "split 6 by 1/3: %lld and %lld", (long long)d.n,
              (long long)v.n);
        int seen[6] = {0};
        for (int i = 0; i < 6; i++) {
            const st_dataset *part = i < 4 ? &d : &v;
            CHECK_OK(st_dataset_sample(part, i < 4 ? i : i - 4, NULL, row, NULL, &y));
            const int k = (int)((row[0] + 3.0f) / 0.25f) / 8; /* (mean 0, std 1: the value as saved) */
            order[rep][i] = k;
            CHECK(k >= 0 && k < 6 && y == l32[k], "split sample %d: sample %d of the file, label %d", i, k,
                  y);
            if (k >= 0 && k < 6) seen[k]++;
        }
        for (int k = 0; k < 6; k++)
            CHECK(seen[k] == 1, "sample %d is in the parts %d times", k, seen[k]);
        st_dataset_free(&v);
        st_dataset_free(&d);
    }
    CHECK(memcmp(order[0], order[1], sizeof order[0]) == 0, "two splits of the same data differ");
    const int held0 = (1 << order[0][4]) | (1 << order[0][5]),
              held_other = (1 << order[2][4]) | (1 << order[2][5]);
    CHECK(held0 != held_other, "data.val_split_seed 1 held out the samples seed 0 did (%d, %d)", order[0][4],
          order[0][5]);
    CHECK_OK(st_dataset_open_npy(px, py, 2, &d));
    st_dataset v;
    CHECK_FAILS(st_dataset_split(&d, 0.05, 0, "data.val_split", &v), ST_ERR_CONFIG,
                "data.val_split 0.05 of 6 samples holds out 0: it must leave at least one sample");
    st_dataset_free(&d);
    double g[5 * 3];
    for (int i = 0; i < 15; i++)
        g[i] = 1.0 / (i + 1);
    uint8_t l8[5] = {2, 2, 0, 1, 2};
    const int64_t d2[2] = {5, 3};
    write_pair("f8.npy", ST_NPY_F64, 2, d2, g, "l8.npy", ST_NPY_U8, 5, l8);
    path_of(px, sizeof px, "f8.npy");
    path_of(py, sizeof py, "l8.npy");
    CHECK_OK(st_dataset_open_npy(px, py, 0, &d));
    CHECK(d.flat && d.h == 1 && d.w == 3 && d.c == 1 && d.num_classes == 3 && d.values[14] == (float)g[14],
          "float64 features");
    st_dataset_free(&d);

    /* bad pairs */
    const int64_t d7[2] = {7, 3};
    double g7[21] = {0};
    write_pair("x7.npy", ST_NPY_F64, 2, d7, g7, "y5.npy", ST_NPY_U8, 5, l8);
    path_of(px, sizeof px, "x7.npy");
    path_of(py, sizeof py, "y5.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "holds 7 samples but");
    float lf[5] = {0};
    write_pair("x5.npy", ST_NPY_F64, 2, d2, g, "yf.npy", ST_NPY_F32, 5, lf);
    path_of(px, sizeof px, "x5.npy");
    path_of(py, sizeof py, "yf.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "must be integers");
    int64_t neg[5] = {0, 1, -1, 0, 0};
    write_pair("x5.npy", ST_NPY_F64, 2, d2, g, "yneg.npy", ST_NPY_I64, 5, neg);
    path_of(py, sizeof py, "yneg.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "label -1 at index 2");
    const int64_t d0[2] = {0, 3};
    write_pair("x0.npy", ST_NPY_F32, 2, d0, NULL, "y0.npy", ST_NPY_U8, 0, NULL);
    path_of(px, sizeof px, "x0.npy");
    path_of(py, sizeof py, "y0.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "x0.npy: the dataset is empty");
    const int64_t d1[1] = {5};
    write_pair("x1.npy", ST_NPY_F32, 1, d1, f, "y5b.npy", ST_NPY_U8, 5, l8);
    path_of(px, sizeof px, "x1.npy");
    path_of(py, sizeof py, "y5b.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "inputs must be");
    int64_t xi[15] = {0};
    write_pair("xi.npy", ST_NPY_I64, 2, d2, xi, "y5b.npy", ST_NPY_U8, 5, l8);
    path_of(px, sizeof px, "xi.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "must be uint8, float32 or float64");
    double nan[15];
    memcpy(nan, g, sizeof nan);
    nan[7] = NAN;
    write_pair("xnan.npy", ST_NPY_F64, 2, d2, nan, "y5b.npy", ST_NPY_U8, 5, l8);
    path_of(px, sizeof px, "xnan.npy");
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_NUMERIC, "sample 2 holds nan (element 1)");
    path_of(px, sizeof px, "trunc.npy"); /* from headers(): a truncated file is named */
    CHECK_FAILS(st_dataset_open_npy(px, py, 0, &d), ST_ERR_FORMAT, "trunc.npy");
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--check") == 0) return check_file(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "--fail") == 0) return expect_fail(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return write_files(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--dataset") == 0) return dataset_mode(argv[2], argv[3], argv[4], NULL);
    if (argc == 6 && strcmp(argv[1], "--dataset-fail") == 0)
        return dataset_mode(argv[2], argv[3], argv[4], argv[5]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_npy [--check FILE EXPECTED | --fail FILE NEEDLE | --write DIR | "
                        "--dataset X Y K | --dataset-fail X Y K NEEDLE]\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "/tmp/st_npy_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_npy", "cannot create a directory in /tmp");
    round_trips();
    headers();
    datasets();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_npy");
}
