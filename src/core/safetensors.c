/* safetensors reader and writer (the format is described in safetensors.h and
 * docs/formats.md).
 *
 * The reader never trusts the file: the header length is checked against the
 * file size before it is read, and every entry against the data size before a
 * byte of data is touched. Data is read with pread when asked for, so it is
 * never mapped (a file truncated under us gives an error, not SIGBUS).
 * Not here: byte swapping. Data is little-endian on disk and we only build for
 * little-endian hosts (x86-64, aarch64), which the #error below enforces. */
#include "core/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/sniff.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader does not byte-swap"
#endif

struct st_safetensors {
    char *path;
    int fd;
    int64_t data_start;            /* 8 + header length */
    int64_t data_size;             /* file size - data_start */
    int n;                         /* entries */
    st_safetensors_entry *entries; /* (n), ordered by offset; names owned */
    int *by_name;                  /* (n) entry indices ordered by name */
    int n_meta;
    char **meta; /* (2 * n_meta) key, value, ... */
};

static const struct {
    const char *name;
    int size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static int dtype_index(const char *dtype) {
    for (int i = 0; dtype && i < ST_N_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, dtype) == 0) return i;
    return -1;
}

int st_safetensors_dtype_size(const char *dtype) {
    int i = dtype_index(dtype);
    return i < 0 ? 0 : st_dtypes[i].size;
}

/* A JSON number that is a non-negative integer we can hold exactly (<= 2^53).
 * Returns NULL when fine, else what is wrong with it. */
static const char *json_uint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return "is not a number";
    double d = v->valuedouble;
    if (!(d == floor(d))) return "is not an integer";
    if (d < 0) return "is negative";
    if (d > 9007199254740992.0) return "is too large";
    *out = (int64_t)d;
    return NULL;
}

/* Parse one tensor entry into e (name excluded). */
static st_status parse_entry(const char *path, const char *name, const cJSON *obj, int64_t data_size,
                             st_safetensors_entry *e) {
    if (!cJSON_IsObject(obj))
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': the entry is not a JSON object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(obj, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(obj, "data_offsets");
    if (!cJSON_IsString(dt))
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is missing or not a string", path, name);
    int di = dtype_index(dt->valuestring);
    if (di < 0)
        return st_fail(ST_ERR_FORMAT,
                       "%s: tensor '%s': unknown dtype \"%.32s\" (known: F64 F32 F16 BF16 I64 I32 I16 I8 "
                       "U64 U32 U16 U8 BOOL F8_E5M2 F8_E4M3)",
                       path, name, dt->valuestring);
    e->dtype = st_dtypes[di].name;
    if (!cJSON_IsArray(shape))
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': \"shape\" is missing or not an array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_SAFETENSORS_MAX_NDIM)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: tensor '%s': %d dimensions; at most %d are supported", path,
                       name, ndim, ST_SAFETENSORS_MAX_NDIM);
    e->ndim = ndim;
    int64_t count = 1;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        const char *bad = json_uint(d, &e->shape[k]);
        if (bad) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': shape[%d] %s", path, name, k, bad);
        if (__builtin_mul_overflow(count, e->shape[k], &count))
            return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': the shape's element count overflows", path, name);
    }
    if (__builtin_mul_overflow(count, (int64_t)st_dtypes[di].size, &e->nbytes))
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': the shape's byte count overflows", path, name);
    e->count = count;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is missing or not [begin, end]",
                       path, name);
    int64_t b, end;
    const char *bad = json_uint(offs->child, &b);
    if (!bad) bad = json_uint(offs->child->next, &end);
    if (bad) return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': a data offset %s", path, name, bad);
    if (b > end)
        return st_fail(ST_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] begin after they end", path,
                       name, (long long)b, (long long)end);
    if (end > data_size)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: tensor '%s': data_offsets [%lld, %lld] reach past the %lld data bytes in the file; "
            "the file is truncated or corrupt",
            path, name, (long long)b, (long long)end, (long long)data_size);
    if (end - b != e->nbytes)
        return st_fail(ST_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but %s shape needs %lld",
                       path, name, (long long)b, (long long)end, (long long)(end - b), e->dtype,
                       (long long)e->nbytes);
    e->offset = b;
    return ST_OK;
}

/* File order: by offset, then size, then name (qsort is not stable; names are unique). */
static int cmp_offset(const void *a, const void *b) {
    const st_safetensors_entry *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_name_r(const void *a, const void *b, void *ctx) {
    const st_safetensors_entry *e = ctx;
    return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}

static st_status parse_metadata(st_safetensors *f, const cJSON *m) {
    if (cJSON_IsNull(m)) return ST_OK;
    if (!cJSON_IsObject(m))
        return st_fail(ST_ERR_FORMAT, "%s: \"__metadata__\" is not an object of strings", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta = calloc((size_t)n * 2 + 1, sizeof *f->meta);
    if (!f->meta) return st_fail(ST_ERR_NOMEM, "%s: out of memory for the metadata", f->path);
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return st_fail(ST_ERR_FORMAT, "%s: \"__metadata__\" value for '%s' is not a string", f->path,
                           kv->string);
        f->meta[2 * f->n_meta] = strdup(kv->string);
        f->meta[2 * f->n_meta + 1] = strdup(kv->valuestring);
        f->n_meta++;
        if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
            return st_fail(ST_ERR_NOMEM, "%s: out of memory for the metadata", f->path);
    }
    return ST_OK;
}

static st_status parse_header(st_safetensors *f, const cJSON *root) {
    if (!cJSON_IsObject(root))
        return st_fail(ST_ERR_FORMAT, "%s: the header is JSON but not an object; not a safetensors file",
                       f->path);
    int total = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)total + 1, sizeof *f->entries);
    f->by_name = calloc((size_t)total + 1, sizeof *f->by_name);
    if (!f->entries || !f->by_name) return st_fail(ST_ERR_NOMEM, "%s: out of memory for the header", f->path);
    bool seen_meta = false;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (seen_meta) return st_fail(ST_ERR_FORMAT, "%s: \"__metadata__\" appears twice", f->path);
            seen_meta = true;
            ST_TRY(parse_metadata(f, it));
            continue;
        }
        st_safetensors_entry *e = &f->entries[f->n];
        ST_TRY(parse_entry(f->path, it->string, it, f->data_size, e));
        if (!(e->name = strdup(it->string))) return st_fail(ST_ERR_NOMEM, "%s: out of memory", f->path);
        f->n++;
    }
    qsort(f->entries, (size_t)f->n, sizeof *f->entries, cmp_offset);
    for (int i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_r, f->entries);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->entries[f->by_name[i]].name, f->entries[f->by_name[i - 1]].name) == 0)
            return st_fail(ST_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", f->path,
                           f->entries[f->by_name[i]].name);
    /* (after the names: a name given twice, its two entries' bytes the same, is said as such, not as
     * overlapping itself) */
    int64_t reach = 0; /* the furthest end of a non-empty entry so far */
    const char *reach_name = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_safetensors_entry *e = &f->entries[i];
        if (e->nbytes == 0) continue;
        if (e->offset < reach)
            return st_fail(ST_ERR_FORMAT,
                           "%s: tensor '%s' (bytes %lld..%lld) overlaps tensor '%s' (ending at %lld)",
                           f->path, e->name, (long long)e->offset, (long long)(e->offset + e->nbytes),
                           reach_name, (long long)reach);
        reach = e->offset + e->nbytes, reach_name = e->name;
    }
    return ST_OK;
}

st_status st_safetensors_open(const char *path, st_safetensors **out) {
    if (!out) return st_fail(ST_ERR_ARG, "st_safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return st_fail(ST_ERR_ARG, "st_safetensors_open: path is NULL");
    st_status s = ST_OK;
    char *hdr = NULL;
    cJSON *root = NULL;
    st_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = -1;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno)));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot stat: %s", path, strerror(errno)));
    if (!S_ISREG(sb.st_mode)) ST_GOTO(st_fail(ST_ERR_IO, "%s: not a regular file", path));
    int64_t size = (int64_t)sb.st_size;
    if (size < 8)
        ST_GOTO(st_fail(ST_ERR_FORMAT,
                        "%s: the file is %lld bytes, shorter than the 8-byte header length; the file is "
                        "truncated or not safetensors",
                        path, (long long)size));
    uint8_t len8[ST_SNIFF_BYTES]; /* (the length, and what another format's first bytes say) */
    const size_t head_n = size < ST_SNIFF_BYTES ? (size_t)size : ST_SNIFF_BYTES;
    if (!st_pread_all(f->fd, len8, head_n, 0))
        ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot read the header length", path));
    const st_file_kind kind = st_sniff(len8, head_n);
    if (kind.format != ST_FILE_UNKNOWN && kind.format != ST_FILE_SAFETENSORS)
        ST_GOTO(st_fail(ST_ERR_FORMAT, "%s: not safetensors but %s; %s", path, kind.what,
                        st_sniff_weights_use(kind)));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n == 0) ST_GOTO(st_fail(ST_ERR_FORMAT, "%s: the header length is 0; not a safetensors file", path));
    if (n > (uint64_t)(size - 8))
        ST_GOTO(st_fail(ST_ERR_FORMAT,
                        "%s: header says %llu bytes but the file has %lld after the length; the file is "
                        "truncated or not safetensors",
                        path, (unsigned long long)n, (long long)(size - 8)));
    if (n > ST_SAFETENSORS_MAX_HEADER)
        ST_GOTO(st_fail(ST_ERR_FORMAT,
                        "%s: header length %llu is over the %d-byte limit; not a safetensors file", path,
                        (unsigned long long)n, ST_SAFETENSORS_MAX_HEADER));
    f->data_start = 8 + (int64_t)n;
    f->data_size = size - f->data_start;
    if (!(hdr = malloc(n + 1))) ST_GOTO(st_fail(ST_ERR_NOMEM, "%s: out of memory for the header", path));
    if (!st_pread_all(f->fd, hdr, n, 8))
        ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot read the %llu-byte header", path, (unsigned long long)n));
    hdr[n] = '\0';
    /* A NUL in a name (\u0000, or the byte itself) would cut it short as
     * read here: "head.bias\u0000x" loaded as head.bias. */
    for (size_t i = 0; i < n; i++) {
        const bool escaped =
            hdr[i] == '\\' && i + 6 <= n && hdr[i + 1] == 'u' && !memcmp(hdr + i + 2, "0000", 4);
        if (hdr[i] == '\0' || escaped)
            ST_GOTO(st_fail(ST_ERR_FORMAT,
                            "%s: the header holds a NUL character (at byte %zu), which no tensor name or "
                            "metadata value holds; the file is corrupt or was not written as safetensors",
                            path, i + 8));
        if (hdr[i] == '\\') i++; /* (the escaped character: \\u0000 is a backslash and text) */
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) {
        long at = end ? (long)(end - hdr) : 0;
        ST_GOTO(st_fail(ST_ERR_FORMAT,
                        "%s: the header is not valid JSON (at byte %ld of %llu); the file is corrupt or not "
                        "safetensors",
                        path, at, (unsigned long long)n));
    }
    for (const char *p = end; p < hdr + n; p++) /* the writer pads with spaces */
        if (!(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            ST_GOTO(st_fail(ST_ERR_FORMAT, "%s: the header has bytes after its JSON (at byte %ld)", path,
                            (long)(p - hdr)));
    ST_GOTO(parse_header(f, root));
    cJSON_Delete(root);
    free(hdr);
    *out = f;
    return ST_OK;
fail:
    cJSON_Delete(root);
    free(hdr);
    st_safetensors_close(f);
    return s;
}

void st_safetensors_close(st_safetensors *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++)
        free((char *)f->entries[i].name);
    for (int i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->entries);
    free(f->by_name);
    free(f->path);
    free(f);
}

const char *st_safetensors_path(const st_safetensors *f) { return f ? f->path : ""; }
int st_safetensors_count(const st_safetensors *f) { return f ? f->n : 0; }

const st_safetensors_entry *st_safetensors_entry_at(const st_safetensors *f, int i) {
    return f && i >= 0 && i < f->n ? &f->entries[i] : NULL;
}

const st_safetensors_entry *st_safetensors_find(const st_safetensors *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_safetensors_entry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *st_safetensors_metadata(const st_safetensors *f, const char *key) {
    for (int i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

static st_status find_or_fail(const st_safetensors *f, const char *name, const st_safetensors_entry **e) {
    if (!f || !name) return st_fail(ST_ERR_ARG, "st_safetensors_read: file or name is NULL");
    if (!(*e = st_safetensors_find(f, name)))
        return st_fail(ST_ERR_FORMAT, "%s: no tensor named '%s' (the file has %d)", f->path, name, f->n);
    return ST_OK;
}

static st_status read_bytes(const st_safetensors *f, const st_safetensors_entry *e, int64_t off, void *dst,
                            size_t n) {
    if (!st_pread_all(f->fd, dst, n, f->data_start + e->offset + off))
        return st_fail(ST_ERR_IO,
                       "%s: tensor '%s': cannot read its data; the file is shorter than when opened", f->path,
                       e->name);
    return ST_OK;
}

st_status st_safetensors_read_raw(const st_safetensors *f, const char *name, void *dst, int64_t nbytes) {
    const st_safetensors_entry *e;
    ST_TRY(find_or_fail(f, name, &e));
    if (nbytes != e->nbytes)
        return st_fail(ST_ERR_SHAPE, "%s: tensor '%s' holds %lld bytes but %lld were asked for", f->path,
                       name, (long long)e->nbytes, (long long)nbytes);
    if (nbytes > 0 && !dst) return st_fail(ST_ERR_ARG, "st_safetensors_read_raw: dst is NULL");
    return nbytes ? read_bytes(f, e, 0, dst, (size_t)nbytes) : ST_OK;
}

/* IEEE 754 binary16 to binary32; exact (every half is a float). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    float v;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
        v = (float)mant * 0x1p-24f;
        memcpy(&bits, &v, 4);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 112) << 23 | mant << 13;
    }
    memcpy(&v, &bits, 4);
    return v;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

st_status st_safetensors_read_f32(const st_safetensors *f, const char *name, float *dst, int64_t count) {
    const st_safetensors_entry *e;
    ST_TRY(find_or_fail(f, name, &e));
    int esize = st_safetensors_dtype_size(e->dtype);
    bool f32 = strcmp(e->dtype, "F32") == 0, f16 = strcmp(e->dtype, "F16") == 0;
    bool bf16 = strcmp(e->dtype, "BF16") == 0, f64 = strcmp(e->dtype, "F64") == 0;
    if (!(f32 || f16 || bf16 || f64))
        return st_fail(ST_ERR_UNSUPPORTED,
                       "%s: tensor '%s' is %s; only F32, F16, BF16 and F64 read as floats", f->path, name,
                       e->dtype);
    if (count != e->count)
        return st_fail(ST_ERR_SHAPE, "%s: tensor '%s' has %lld elements but %lld were asked for", f->path,
                       name, (long long)e->count, (long long)count);
    if (count > 0 && !dst) return st_fail(ST_ERR_ARG, "st_safetensors_read_f32: dst is NULL");
    if (count == 0) return ST_OK;
    if (f32) return read_bytes(f, e, 0, dst, (size_t)e->nbytes);
    enum { CHUNK = 1 << 16 }; /* elements converted per read */
    uint8_t *buf = malloc((size_t)CHUNK * (size_t)esize);
    if (!buf) return st_fail(ST_ERR_NOMEM, "%s: out of memory reading '%s'", f->path, name);
    for (int64_t i = 0; i < count; i += CHUNK) {
        int64_t m = count - i < CHUNK ? count - i : CHUNK;
        st_status s = read_bytes(f, e, i * esize, buf, (size_t)(m * esize));
        if (s != ST_OK) {
            free(buf);
            return s;
        }
        for (int64_t j = 0; j < m; j++) {
            if (f64) {
                double d;
                memcpy(&d, buf + 8 * j, 8);
                dst[i + j] = (float)d;
            } else {
                uint16_t h;
                memcpy(&h, buf + 2 * j, 2);
                dst[i + j] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
            }
        }
    }
    free(buf);
    return ST_OK;
}

/* ---- writer ---- */

static st_status check_tensor(const char *path, const st_safetensors_tensor *t, int64_t *nbytes) {
    if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
        return st_fail(ST_ERR_ARG, "%s: a tensor name is NULL, empty or \"__metadata__\"", path);
    int esize = st_safetensors_dtype_size(t->dtype);
    if (esize == 0)
        return st_fail(ST_ERR_ARG, "%s: tensor '%s': unknown dtype \"%s\"", path, t->name,
                       t->dtype ? t->dtype : "(null)");
    if (t->ndim < 0 || t->ndim > ST_SAFETENSORS_MAX_NDIM || (t->ndim > 0 && !t->shape))
        return st_fail(ST_ERR_ARG, "%s: tensor '%s': ndim %d or its shape is invalid", path, t->name,
                       t->ndim);
    int64_t count = 1;
    for (int k = 0; k < t->ndim; k++)
        if (t->shape[k] < 0 || __builtin_mul_overflow(count, t->shape[k], &count))
            return st_fail(ST_ERR_ARG, "%s: tensor '%s': shape[%d] = %lld is invalid", path, t->name, k,
                           (long long)t->shape[k]);
    if (__builtin_mul_overflow(count, (int64_t)esize, nbytes))
        return st_fail(ST_ERR_ARG, "%s: tensor '%s': the byte count overflows", path, t->name);
    if (*nbytes > 0 && !t->data) return st_fail(ST_ERR_ARG, "%s: tensor '%s': data is NULL", path, t->name);
    return ST_OK;
}

/* The JSON header, unpadded, into *json (the caller frees it), and the data size. */
static st_status build_header(const char *path, const st_safetensors_tensor *t, int n, const char *const *kv,
                              int n_meta, char **json, int64_t *total) {
    st_status s = ST_OK;
    cJSON *root = cJSON_CreateObject(), *meta = NULL;
    *json = NULL;
    if (!root) goto nomem;
    if (n_meta > 0) {
        if (!(meta = cJSON_AddObjectToObject(root, "__metadata__"))) goto nomem;
        for (int i = 0; i < n_meta; i++) {
            if (!kv[2 * i] || !kv[2 * i + 1] || cJSON_GetObjectItemCaseSensitive(meta, kv[2 * i]))
                ST_GOTO(st_fail(ST_ERR_ARG, "%s: metadata pair %d is NULL or a duplicate key", path, i));
            if (!cJSON_AddStringToObject(meta, kv[2 * i], kv[2 * i + 1])) goto nomem;
        }
    }
    *total = 0;
    for (int i = 0; i < n; i++) {
        int64_t nbytes;
        ST_GOTO(check_tensor(path, &t[i], &nbytes));
        if (cJSON_GetObjectItemCaseSensitive(root, t[i].name))
            ST_GOTO(st_fail(ST_ERR_ARG, "%s: tensor '%s' is given twice", path, t[i].name));
        /* Integers are written by hand: cJSON would print 1e15 as "1e+15",
         * which the reference parser rejects for an offset. */
        char shape[ST_SAFETENSORS_MAX_NDIM * 24 + 4], offs[64];
        int len = snprintf(shape, sizeof shape, "[");
        for (int k = 0; k < t[i].ndim; k++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", k ? "," : "",
                            (long long)t[i].shape[k]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        int64_t end;
        if (__builtin_add_overflow(*total, nbytes, &end))
            ST_GOTO(st_fail(ST_ERR_ARG, "%s: the tensors' total size overflows", path));
        snprintf(offs, sizeof offs, "[%lld,%lld]", (long long)*total, (long long)end);
        *total = end;
        cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
        if (!o || !cJSON_AddStringToObject(o, "dtype", t[i].dtype) ||
            !cJSON_AddRawToObject(o, "shape", shape) || !cJSON_AddRawToObject(o, "data_offsets", offs))
            goto nomem;
    }
    if (!(*json = cJSON_PrintUnformatted(root))) goto nomem;
    cJSON_Delete(root);
    return ST_OK;
nomem:
    s = st_fail(ST_ERR_NOMEM, "%s: out of memory building the header", path);
fail:
    cJSON_Delete(root);
    return s;
}

st_status st_safetensors_write(const char *path, const st_safetensors_tensor *tensors, int n,
                               const char *const *meta_kv, int n_meta) {
    if (!path || n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && !meta_kv))
        return st_fail(ST_ERR_ARG, "st_safetensors_write: bad arguments (path, n = %d, n_meta = %d)", n,
                       n_meta);
    st_status s = ST_OK;
    int64_t total = 0;
    st_atomic_file af = {0};
    char *json = NULL;
    ST_TRY(build_header(path, tensors, n, meta_kv, n_meta, &json, &total));
    size_t len = strlen(json), pad = (8 - len % 8) % 8;
    uint64_t hlen = len + pad;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hlen >> (8 * i));
    ST_GOTO(st_atomic_open(&af, path));
    FILE *fp = af.fp;
    bool ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(json, 1, len, fp) == len;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < n; i++) {
        int64_t nbytes;
        check_tensor(path, &tensors[i], &nbytes); /* already passed in build_header */
        ok = nbytes == 0 || fwrite(tensors[i].data, 1, (size_t)nbytes, fp) == (size_t)nbytes;
    }
    if (!ok) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot write: %s", af.tmp, strerror(errno)));
    s = st_atomic_commit(&af);
fail:
    st_atomic_abort(&af);
    free(json);
    return s;
}
