/* NPY reader and writer (see npy.h). The preamble is checked against the file
 * size before the header is read, the header is parsed as the small subset of
 * Python literals NumPy writes (a dict of strings, True/False and a tuple of
 * integers), and the data size is checked before anything is allocated for
 * it. The same code reads a file (with pread) or a buffer (for the fuzzer). */
#include "data/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/mem.h"
#include "core/sniff.h"
#include <zlib.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the NPY reader copies little-endian data as it is: it builds for little-endian hosts only"
#endif

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

size_t st_npy_dtype_size(st_npy_dtype t) {
    switch (t) {
    case ST_NPY_U8:
        return 1;
    case ST_NPY_I32:
    case ST_NPY_F32:
        return 4;
    case ST_NPY_I64:
    case ST_NPY_F64:
        return 8;
    }
    return 0;
}

const char *st_npy_dtype_name(st_npy_dtype t) {
    switch (t) {
    case ST_NPY_U8:
        return "uint8";
    case ST_NPY_I32:
        return "int32";
    case ST_NPY_I64:
        return "int64";
    case ST_NPY_F32:
        return "float32";
    case ST_NPY_F64:
        return "float64";
    }
    return "?";
}

static const char *dtype_descr(st_npy_dtype t) {
    switch (t) {
    case ST_NPY_U8:
        return "|u1";
    case ST_NPY_I32:
        return "<i4";
    case ST_NPY_I64:
        return "<i8";
    case ST_NPY_F32:
        return "<f4";
    case ST_NPY_F64:
        return "<f8";
    }
    return "?";
}

/* Where the bytes come from: a file descriptor or a buffer. */
typedef struct npy_src {
    const char *name;
    int fd;
    const uint8_t *mem;
    int64_t size;
} npy_src;

static st_status src_read(const npy_src *s, int64_t off, size_t n, void *dst) {
    if (n == 0) return ST_OK;
    if (s->mem) {
        memcpy(dst, s->mem + off, n);
        return ST_OK;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(s->fd, (uint8_t *)dst + done, n - done, (off_t)(off + (int64_t)done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return st_fail(ST_ERR_IO, "%s: cannot read: %s", s->name, strerror(errno));
        if (r == 0) return st_fail(ST_ERR_IO, "%s: the file became shorter while it was read", s->name);
        done += (size_t)r;
    }
    return ST_OK;
}

/* ---- the header dict ---- */

typedef struct cursor {
    const char *name, *start, *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A malformed header: name the spot and show the header (printable bytes). */
static st_status bad(const cursor *c, const char *what) {
    char text[121];
    size_t n = (size_t)(c->end - c->start) < sizeof text - 1 ? (size_t)(c->end - c->start) : sizeof text - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)c->start[i];
        text[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    text[n] = '\0';
    return st_fail(ST_ERR_FORMAT,
                   "%s: the NPY header is malformed: %s at byte %lld of the header (\"%s%s\"); the "
                   "file is corrupt or its header length is wrong",
                   c->name, what, (long long)(c->p - c->start), text,
                   (size_t)(c->end - c->start) > n ? "..." : "");
}

static st_status parse_string(cursor *c, char *buf, size_t cap, const char *what) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return bad(c, what);
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return bad(c, what);
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return bad(c, "a string that does not end");
    c->p++;
    buf[n] = '\0';
    return ST_OK;
}

static st_status parse_int(cursor *c, int64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return bad(c, "expected a non-negative integer in the shape");
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (x > (INT64_MAX - 9) / 10) return bad(c, "a dimension too large");
        x = x * 10 + (*c->p++ - '0');
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++; /* Python 2 long, in old files */
    *v = x;
    return ST_OK;
}

static st_status parse_shape(cursor *c, st_npy *a) {
    if (!eat(c, '(')) return bad(c, "'shape' is not a tuple");
    int nd = 0;
    bool comma = false;
    for (;;) {
        if (eat(c, ')')) break;
        if (nd == ST_NPY_MAX_NDIM)
            return st_fail(ST_ERR_UNSUPPORTED,
                           "%s: the array has more than %d dimensions; this reader takes at "
                           "most %d",
                           c->name, ST_NPY_MAX_NDIM, ST_NPY_MAX_NDIM);
        ST_TRY(parse_int(c, &a->dims[nd++]));
        if (eat(c, ',')) {
            comma = true;
            continue;
        }
        if (eat(c, ')')) break;
        return bad(c, "expected ',' or ')' in the shape");
    }
    if (nd == 1 && !comma) return bad(c, "'shape' (n) is not a tuple (a tuple of one is written (n,))");
    a->ndim = nd;
    return ST_OK;
}

static st_status parse_descr(cursor *c, st_npy *a) {
    skip_ws(c);
    if (c->p < c->end && *c->p == '[')
        return st_fail(ST_ERR_UNSUPPORTED,
                       "%s: structured dtypes (a list in 'descr') are not supported; save one "
                       "plain array per file",
                       c->name);
    char d[32];
    ST_TRY(parse_string(c, d, sizeof d, "'descr' is not a short string"));
    static const struct {
        const char *descr;
        st_npy_dtype t;
    } known[] = {{"<f4", ST_NPY_F32}, {"<f8", ST_NPY_F64}, {"<i4", ST_NPY_I32},
                 {"<i8", ST_NPY_I64}, {"|u1", ST_NPY_U8},  {"<u1", ST_NPY_U8}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(d, known[i].descr) == 0) {
            a->dtype = known[i].t;
            return ST_OK;
        }
    if (d[0] == '>')
        return st_fail(ST_ERR_UNSUPPORTED,
                       "%s: the data is big-endian ('%s'); convert it with "
                       "numpy.save(path, a.astype(a.dtype.newbyteorder('<')))",
                       c->name, d);
    return st_fail(ST_ERR_UNSUPPORTED,
                   "%s: dtype '%s' is not supported; use float32 (<f4), float64 (<f8), "
                   "int32 (<i4), int64 (<i8) or uint8 (|u1): inputs as numpy.save(path, "
                   "a.astype(numpy.float32)), labels as numpy.save(path, a.astype(numpy.int64))",
                   c->name, d);
}

static st_status parse_dict(cursor *c, st_npy *a) {
    bool seen[3] = {false, false, false}; /* descr, fortran_order, shape */
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    bool fortran = false;
    if (!eat(c, '{')) return bad(c, "expected '{'");
    for (;;) {
        if (eat(c, '}')) break;
        char key[32];
        ST_TRY(parse_string(c, key, sizeof key, "expected a key (a short string)"));
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0)
            k++;
        if (k == 3)
            return st_fail(ST_ERR_FORMAT,
                           "%s: unexpected key '%s' in the NPY header (it holds exactly descr, "
                           "fortran_order and shape); the file is not NPY or is corrupt",
                           c->name, key);
        if (seen[k]) return bad(c, "a key given twice");
        seen[k] = true;
        if (!eat(c, ':')) return bad(c, "expected ':' after a key");
        if (k == 0) {
            ST_TRY(parse_descr(c, a));
        } else if (k == 1) {
            skip_ws(c);
            size_t left = (size_t)(c->end - c->p);
            if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
                fortran = true;
                c->p += 4;
            } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
                c->p += 5;
            } else {
                return bad(c, "'fortran_order' is not True or False");
            }
        } else {
            ST_TRY(parse_shape(c, a));
        }
        if (eat(c, ',')) continue;
        if (eat(c, '}')) break;
        return bad(c, "expected ',' or '}'");
    }
    skip_ws(c);
    if (c->p != c->end) return bad(c, "bytes after the closing '}'");
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return st_fail(ST_ERR_FORMAT, "%s: the NPY header has no '%s'; the file is corrupt", c->name,
                           keys[k]);
    if (fortran)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "%s: the array is in Fortran order (fortran_order: True); save it in C "
                       "order: numpy.save(path, numpy.ascontiguousarray(a))",
                       c->name);
    return ST_OK;
}

static void format_shape(const st_npy *a, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < a->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)a->dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "%s)", a->ndim == 1 ? "," : "");
}

/* ---- the file ---- */

static st_status load(const npy_src *s, st_npy *a) {
    uint8_t pre[12];
    const int64_t size = s->size;
    ST_TRY(src_read(s, 0, (size_t)(size < 12 ? size : 12), pre));
    if (size < 6)
        return st_fail(ST_ERR_FORMAT,
                       "%s: %lld bytes is too short for an NPY file (the magic alone is 6); it is "
                       "truncated or not NPY",
                       s->name, (long long)size);
    uint8_t head[ST_SNIFF_BYTES]; /* (another format's: enough to tell a .npz) */
    const size_t head_n = size < ST_SNIFF_BYTES ? (size_t)size : ST_SNIFF_BYTES;
    const bool npy = memcmp(pre, npy_magic, 6) == 0;
    if (!npy) ST_TRY(src_read(s, 0, head_n, head));
    const st_file_kind kind = npy ? (st_file_kind){ST_FILE_NPY, "", ""} : st_sniff(head, head_n);
    if (kind.format == ST_FILE_GZIP) { /* (a gzipped .npy: the gzip hint is IDX's, which reads no .npy) */
        uint8_t in[6] = {0};
        /* (the file itself, from its start: a file's descriptor duplicated; bytes in memory are not
         * looked into) */
        const int fd = s->fd >= 0 ? dup(s->fd) : -1;
        if (fd >= 0) lseek(fd, 0, SEEK_SET);
        gzFile z = fd >= 0 ? gzdopen(fd, "rb") : NULL;
        if (!z && fd >= 0) close(fd);
        const bool gz_npy = z && gzread(z, in, sizeof in) == (int)sizeof in && !memcmp(in, npy_magic, 6);
        if (z) gzclose(z);
        if (gz_npy)
            return st_fail(ST_ERR_FORMAT,
                           "%s: a gzipped NumPy .npy array; data.type npy reads .npy files uncompressed: "
                           "decompress it (gunzip -k %s) and name the .npy",
                           s->name, s->name);
    }
    if (kind.format != ST_FILE_NPY && kind.format != ST_FILE_UNKNOWN)
        return st_fail(ST_ERR_FORMAT, "%s: not an NPY file but %s; %s", s->name, kind.what, kind.use);
    if (kind.format != ST_FILE_NPY)
        return st_fail(ST_ERR_FORMAT,
                       "%s: not an NPY file (it starts with %02x %02x %02x %02x %02x %02x, "
                       "expected \\x93NUMPY); write arrays with numpy.save",
                       s->name, pre[0], pre[1], pre[2], pre[3], pre[4], pre[5]);
    if (size < 8)
        return st_fail(ST_ERR_FORMAT,
                       "%s: the file ends inside the NPY version (%lld bytes); it is truncated", s->name,
                       (long long)size);
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
        return st_fail(ST_ERR_FORMAT, "%s: NPY format version %d.%d; this reader reads 1.0, 2.0 and 3.0",
                       s->name, pre[6], pre[7]);
    a->major = pre[6];
    const int len_bytes = a->major == 1 ? 2 : 4;
    if (size < 8 + len_bytes)
        return st_fail(ST_ERR_FORMAT,
                       "%s: the file ends inside the NPY header length (%lld bytes); it is "
                       "truncated",
                       s->name, (long long)size);
    int64_t hlen = pre[8] | (int64_t)pre[9] << 8;
    if (len_bytes == 4) hlen |= (int64_t)pre[10] << 16 | (int64_t)pre[11] << 24;
    const int64_t off = 8 + len_bytes + hlen;
    if (hlen > ST_NPY_MAX_HEADER)
        return st_fail(ST_ERR_FORMAT,
                       "%s: the NPY header length says %lld bytes, more than the %d this reader "
                       "accepts; the file is corrupt",
                       s->name, (long long)hlen, ST_NPY_MAX_HEADER);
    if (off > size)
        return st_fail(ST_ERR_FORMAT,
                       "%s: the NPY header length says %lld bytes but only %lld follow it; the "
                       "file is truncated or its header length is wrong",
                       s->name, (long long)hlen, (long long)(size - 8 - len_bytes));
    char *text = malloc((size_t)hlen + 1);
    if (!text) return st_fail(ST_ERR_NOMEM, "%s: out of memory for the header", s->name);
    st_status st = src_read(s, 8 + len_bytes, (size_t)hlen, text);
    if (st == ST_OK) {
        cursor c = {s->name, text, text, text + hlen};
        st = parse_dict(&c, a);
    }
    free(text);
    ST_TRY(st);

    const int64_t item = (int64_t)st_npy_dtype_size(a->dtype);
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->dims[i] != 0 && count > INT64_MAX / item / a->dims[i]) {
            return st_fail(ST_ERR_FORMAT, "%s: the shape's element count overflows; the header is corrupt",
                           s->name);
        }
        count *= a->dims[i];
    }
    char shape[256];
    format_shape(a, shape, sizeof shape);
    const int64_t have = size - off, want = count * item;
    if (have != want)
        return st_fail(ST_ERR_FORMAT,
                       "%s: shape %s of %s needs %lld data bytes but the file has %lld after the "
                       "header; %s",
                       s->name, shape, st_npy_dtype_name(a->dtype), (long long)want, (long long)have,
                       have < want ? "it is truncated" : "it is corrupt, or holds more than one array");
    a->count = count;
    a->nbytes = (size_t)want;
    a->data = st_alloc_aligned(a->nbytes);
    if (!a->data)
        return st_fail(ST_ERR_NOMEM, "%s: out of memory for %lld bytes of data", s->name, (long long)want);
    return src_read(s, off, a->nbytes, a->data);
}

st_status st_npy_read_mem(const char *name, const uint8_t *buf, size_t len, st_npy *out) {
    memset(out, 0, sizeof *out);
    npy_src s = {name, -1, buf, (int64_t)len};
    st_status st = load(&s, out);
    if (st != ST_OK) st_npy_free(out);
    return st;
}

st_status st_npy_read(const char *path, st_npy *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    int fd = st_open_read(path, &sb);
    if (fd < 0) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    st_status st;
    if (!S_ISREG(sb.st_mode)) {
        st = st_fail(ST_ERR_IO, "%s: %s, not a regular file: give the data file itself", path,
                     st_file_type_name(sb.st_mode));
    } else {
        npy_src s = {path, fd, NULL, (int64_t)sb.st_size};
        st = load(&s, out);
    }
    close(fd);
    if (st != ST_OK) st_npy_free(out);
    return st;
}

void st_npy_free(st_npy *a) {
    if (!a) return;
    st_free_aligned(a->data);
    memset(a, 0, sizeof *a);
}

st_status st_npy_write(const char *path, st_npy_dtype dtype, int ndim, const int64_t *dims,
                       const void *data) {
    if (ndim < 0 || ndim > ST_NPY_MAX_NDIM)
        return st_fail(ST_ERR_ARG, "%s: %d dimensions; NPY files here have 0 to %d", path, ndim,
                       ST_NPY_MAX_NDIM);
    const int64_t item = (int64_t)st_npy_dtype_size(dtype);
    if (!item) return st_fail(ST_ERR_ARG, "%s: unknown dtype %d", path, (int)dtype);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0 || (dims[i] && count > INT64_MAX / item / dims[i]))
            return st_fail(ST_ERR_ARG, "%s: dimension %d (%lld) is negative or too large", path, i,
                           (long long)dims[i]);
        count *= dims[i];
    }
    char hdr[512];
    int n =
        snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", dtype_descr(dtype));
    for (int i = 0; i < ndim; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    int pad = (64 - (10 + n + 1) % 64) % 64; /* the data starts at a multiple of 64, as NumPy writes */
    memset(hdr + n, ' ', (size_t)pad);
    n += pad;
    hdr[n++] = '\n';
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(n & 0xff), (uint8_t)(n >> 8)};
    st_atomic_file f;
    ST_TRY(st_atomic_open(&f, path));
    size_t nbytes = (size_t)(count * item);
    if (fwrite(pre, 1, sizeof pre, f.fp) != sizeof pre || fwrite(hdr, 1, (size_t)n, f.fp) != (size_t)n ||
        (nbytes && fwrite(data, 1, nbytes, f.fp) != nbytes)) {
        st_atomic_abort(&f);
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return st_atomic_commit(&f);
}
