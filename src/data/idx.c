/* IDX reader and writer (see idx.h). Every size in the header is checked
 * (overflow, a cap) before anything is allocated, and the data must be exactly
 * as long as the header says, with nothing after it.
 *
 * The reader drives zlib's inflate itself rather than gzread: gzread hands
 * back all the data of a gzip file whose 8-byte trailer (CRC-32 and length)
 * was cut off without a word, whereas inflate says whether each stream really
 * ended and checked its CRC. Files not starting with the gzip magic are read
 * raw. Memory follows the data, not the header: a raw file's size is checked
 * before its buffer is allocated, and a gzip stream's buffer grows as it
 * inflates, so a corrupt header promising 4 GiB costs no more than the file
 * holds (found by tests/fuzz/fuzz_idx.c). The writer uses gzwrite.
 *
 * With libdeflate (ST_HAVE_LIBDEFLATE) a gzip file is first decompressed
 * whole, about three times as fast as inflate: the file read into memory,
 * its trailer's length (ISIZE) sizing the buffer, libdeflate checking the
 * CRC and the length. Only a file that is exactly one gzip member holding a
 * well-formed unsigned-byte IDX file is taken so; anything else (several
 * members, bytes after the data, a header that disagrees, a length of 4 GiB
 * or more that ISIZE wraps, a bad stream) is read again by the streaming
 * reader above, which says precisely what is wrong. So is a member whose
 * header carries its own CRC-16 (FHCRC), which libdeflate skips unchecked
 * and zlib checks. (libdeflate also takes a few incomplete Huffman codes
 * that zlib refuses: only a stream made so on purpose, with a right CRC-32,
 * reads differently.) The buffer is ISIZE's size, at most 1032 times the
 * file's, before the data says otherwise: memory the kernel gives as it is
 * written, so a trailer that lies costs address space, not memory. */
#include "data/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef ST_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "core/atomic_file.h"
#include "core/mem.h"
#include "core/sniff.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A byte source: raw, or one or more concatenated gzip members. */
typedef struct idx_src {
    const char *path;
    int fd;
    int64_t size;        /* of the file */
    bool gzip, z_live;   /* z_live: inflateInit2 succeeded */
    bool in_eof;         /* read() returned 0 */
    bool member_done;    /* inflate reached the end of a member (its CRC checked) */
    bool cut;            /* the input ended inside a gzip member */
    int members;         /* gzip members finished */
    z_stream z;          /* next_in / avail_in also serve the raw path */
    uint8_t in[1 << 16]; /* input buffer */
} idx_src;

static st_status src_fill(idx_src *s) {
    ssize_t r;
    do
        r = read(s->fd, s->in, sizeof s->in);
    while (r < 0 && errno == EINTR);
    if (r < 0) return st_fail(ST_ERR_IO, "%s: cannot read: %s", s->path, strerror(errno));
    s->in_eof = r == 0;
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)r;
    return ST_OK;
}

static st_status src_open(idx_src *s) {
    ST_TRY(src_fill(s));
    if (s->z.avail_in < 2 || s->z.next_in[0] != 0x1f || s->z.next_in[1] != 0x8b) return ST_OK;
    s->gzip = true;
    if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) /* 16: gzip wrapper only */
        return st_fail(ST_ERR_NOMEM, "%s: cannot start zlib (out of memory)", s->path);
    s->z_live = true;
    return ST_OK;
}

/* Read up to n bytes; *got says how many came: fewer only at the end of the
 * input (then s->cut says whether a gzip member was left unfinished). */
static st_status src_read(idx_src *s, uint8_t *dst, int64_t n, int64_t *got) {
    *got = 0;
    while (*got < n) {
        if (s->z.avail_in == 0 && !s->in_eof) ST_TRY(src_fill(s));
        if (!s->gzip) {
            if (s->z.avail_in == 0) break;
            uInt m = (uInt)(n - *got < (int64_t)s->z.avail_in ? n - *got : (int64_t)s->z.avail_in);
            memcpy(dst + *got, s->z.next_in, m);
            s->z.next_in += m, s->z.avail_in -= m, *got += m;
            continue;
        }
        if (s->member_done) { /* more input after a member: another member, or garbage inflate rejects */
            if (s->z.avail_in == 0) {
                if (s->in_eof) break;
                continue;
            }
            inflateReset(&s->z);
            s->member_done = false;
        }
        int64_t want = n - *got < (1 << 30) ? n - *got : (1 << 30);
        s->z.next_out = dst + *got;
        s->z.avail_out = (uInt)want;
        int ret = inflate(&s->z, Z_NO_FLUSH);
        *got += want - (int64_t)s->z.avail_out;
        if (ret == Z_STREAM_END) {
            s->member_done = true;
            s->members++;
        } else if (ret == Z_BUF_ERROR && s->z.avail_in == 0) { /* no progress without more input */
            if (s->in_eof) {
                s->cut = true;
                break;
            }
        } else if (ret == Z_MEM_ERROR) {
            return st_fail(ST_ERR_NOMEM, "%s: out of memory decompressing", s->path);
        } else if (ret != Z_OK) {
            if (s->members > 0 && s->z.total_in < 10) /* not even a gzip member header */
                return st_fail(ST_ERR_FORMAT, "%s: bytes after the end of its gzip data; the file is corrupt",
                               s->path);
            return st_fail(ST_ERR_FORMAT, "%s: cannot decompress: %s; the file is corrupt", s->path,
                           s->z.msg ? s->z.msg : "bad gzip data");
        }
    }
    return ST_OK;
}

static const char *idx_type_name(int t) {
    switch (t) {
    case 0x08:
        return "unsigned byte";
    case 0x09:
        return "signed byte";
    case 0x0B:
        return "short";
    case 0x0C:
        return "int";
    case 0x0D:
        return "float";
    case 0x0E:
        return "double";
    }
    return NULL;
}

/* Read out->count bytes into out->data (*got says how many came). Raw: one
 * buffer (the caller checked the file size). Gzip: a buffer that doubles, up
 * to the count, only while the stream still gives data. */
static st_status read_data(idx_src *src, st_idx *out, int64_t *got) {
    const int64_t count = out->count;
    int64_t cap = src->gzip && count > ((int64_t)1 << 24) ? (int64_t)1 << 24 : count;
    *got = 0;
    for (;;) {
        uint8_t *buf = st_alloc_aligned((size_t)cap);
        if (!buf) return st_fail(ST_ERR_NOMEM, "%s: out of memory for %lld bytes", src->path, (long long)cap);
        if (*got) memcpy(buf, out->data, (size_t)*got);
        st_free_aligned(out->data);
        out->data = buf;
        int64_t g;
        ST_TRY(src_read(src, out->data + *got, cap - *got, &g));
        *got += g;
        if (*got < cap || cap == count) return ST_OK;
        cap = cap > count / 2 ? count : 2 * cap;
    }
}

static st_status parse(const char *path, idx_src *src, st_idx *out) {
    uint8_t hdr[4 + 4 * ST_IDX_MAX_NDIM];
    int64_t got;
    ST_TRY(src_read(src, hdr, 4, &got));
    const char *what = src->gzip ? " (after decompression)" : "";
    if (got < 4)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: the file is %lld bytes%s; an IDX file starts with a 4-byte magic (00 00 type ndim); "
            "it is truncated or not IDX",
            path, (long long)got, what);
    const char *tname = idx_type_name(hdr[2]);
    if (hdr[0] != 0 || hdr[1] != 0 || !tname) {
        uint8_t head[ST_SNIFF_BYTES]; /* the file is refused: its first bytes tell what it is */
        memcpy(head, hdr, 4);
        int64_t more = 0;
        if (src_read(src, head + 4, (int64_t)sizeof head - 4, &more) != ST_OK) more = 0;
        const st_file_kind kind = st_sniff(head, (size_t)(4 + more));
        if (kind.format != ST_FILE_UNKNOWN && src->gzip) /* (its reader reads it uncompressed) */
            return st_fail(ST_ERR_FORMAT,
                           "%s: not an IDX file but %s%s; decompress it first (gunzip -k %s): %s", path,
                           kind.what, what, path, kind.use);
        if (kind.format != ST_FILE_UNKNOWN)
            return st_fail(ST_ERR_FORMAT, "%s: not an IDX file but %s%s; %s", path, kind.what, what,
                           kind.use);
    }
    if (hdr[0] != 0 || hdr[1] != 0 || !tname)
        return st_fail(ST_ERR_FORMAT,
                       "%s: not an IDX file (magic %02x %02x %02x %02x; expected 00 00 08 ndim)", path,
                       hdr[0], hdr[1], hdr[2], hdr[3]);
    if (hdr[2] != 0x08)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "%s: IDX element type 0x%02x (%s) is not supported; only unsigned bytes (0x08)", path,
                       hdr[2], tname);
    int ndim = hdr[3];
    if (ndim == 0)
        return st_fail(ST_ERR_FORMAT, "%s: the IDX header says 0 dimensions; the file is corrupt", path);
    if (ndim > ST_IDX_MAX_NDIM)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %d dimensions; at most %d are supported", path, ndim,
                       ST_IDX_MAX_NDIM);
    ST_TRY(src_read(src, hdr + 4, 4 * ndim, &got));
    if (got < 4 * ndim)
        return st_fail(ST_ERR_FORMAT,
                       "%s: truncated in the header: %d dimensions need %d bytes, the file has %lld%s", path,
                       ndim, 4 + 4 * ndim, (long long)(4 + got), what);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        const uint8_t *p = hdr + 4 + 4 * i;
        int64_t d = (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | (int64_t)p[2] << 8 | p[3];
        if (d == 0) return st_fail(ST_ERR_FORMAT, "%s: dimension %d is 0; the file is corrupt", path, i);
        out->dims[i] = d;
        if (__builtin_mul_overflow(count, d, &count) || count > ST_IDX_MAX_COUNT)
            return st_fail(ST_ERR_FORMAT,
                           "%s: the dimensions ask for more than %lld elements; the header is corrupt", path,
                           (long long)ST_IDX_MAX_COUNT);
    }
    out->ndim = ndim;
    out->count = count;
    int64_t hbytes = 4 + 4 * ndim;
    got = src->size - hbytes; /* raw: known before anything is allocated */
    if (src->gzip || got >= count) ST_TRY(read_data(src, out, &got));
    if (got < count)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: truncated: the header promises %lld bytes (%lld of data) but the file has %lld%s%s; "
            "fetch it again",
            path, (long long)(hbytes + count), (long long)count, (long long)(hbytes + got), what,
            src->cut ? " (the gzip stream ends early)" : "");
    uint8_t extra[1 << 16];
    ST_TRY(src_read(src, extra, sizeof extra, &got));
    if (got > 0)
        return st_fail(ST_ERR_FORMAT,
                       "%s: %s%lld bytes after the %lld the header describes%s; the file is corrupt or its "
                       "header wrong",
                       path, got == (int64_t)sizeof extra ? "at least " : "", (long long)got,
                       (long long)(hbytes + count), what);
    if (src->cut) /* all the data came, but not the gzip trailer with its checksum */
        return st_fail(ST_ERR_FORMAT, "%s: the gzip stream ends before its checksum; the file is truncated",
                       path);
    return ST_OK;
}

static _Atomic int64_t whole_reads;

int64_t st_idx_whole_reads(void) { return whole_reads; }

bool st_idx_whole_available(void) {
#ifdef ST_HAVE_LIBDEFLATE
    return true;
#else
    return false;
#endif
}

#ifdef ST_HAVE_LIBDEFLATE
/* The whole-file path (the file comment): true when *out holds the file, read
 * and checked; false (nothing allocated, *out untouched) for the streaming
 * reader to read it. */
static bool read_whole_gzip(int fd, int64_t size, st_idx *out) {
    /* a gzip member is at least 18 bytes (a 10-byte header, an empty block,
     * the 8-byte trailer); deflate expands at most 1032:1, so a trailer
     * promising more is corrupt, and a larger file streams instead of
     * being held twice */
    if (size < 18 || size > ((int64_t)1 << 30)) return false;
    uint8_t *in = malloc((size_t)size);
    if (!in) return false;
    if (!st_pread_all(fd, in, (size_t)size, 0) || in[0] != 0x1f || in[1] != 0x8b ||
        (in[3] & 0x02)) { /* 0x02: FHCRC */
        free(in);
        return false;
    }
    const uint8_t *t = in + size - 4;
    const uint64_t isize = (uint64_t)t[0] | (uint64_t)t[1] << 8 | (uint64_t)t[2] << 16 | (uint64_t)t[3] << 24;
    uint8_t *buf = NULL;
    struct libdeflate_decompressor *d = NULL;
    if (isize >= 8 && isize <= (uint64_t)size * 1032u) buf = st_alloc_aligned((size_t)isize);
    if (buf) d = libdeflate_alloc_decompressor();
    size_t in_used = 0, got = 0;
    const bool whole = d &&
                       libdeflate_gzip_decompress_ex(d, in, (size_t)size, buf, (size_t)isize, &in_used,
                                                     &got) == LIBDEFLATE_SUCCESS &&
                       in_used == (size_t)size && got == isize;
    if (d) libdeflate_free_decompressor(d);
    free(in);
    /* the header: unsigned bytes, 1..ST_IDX_MAX_NDIM dimensions, none 0,
     * their product exactly the bytes after it */
    const int ndim = whole ? buf[3] : 0;
    const int64_t hbytes = 4 + 4 * (int64_t)ndim;
    bool ok = whole && buf[0] == 0 && buf[1] == 0 && buf[2] == 0x08 && ndim >= 1 && ndim <= ST_IDX_MAX_NDIM &&
              (uint64_t)hbytes <= got;
    int64_t dims[ST_IDX_MAX_NDIM] = {0}, count = 1;
    for (int i = 0; ok && i < ndim; i++) {
        const uint8_t *p = buf + 4 + 4 * i;
        dims[i] = (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | (int64_t)p[2] << 8 | p[3];
        ok = dims[i] > 0 && !__builtin_mul_overflow(count, dims[i], &count) && count <= ST_IDX_MAX_COUNT;
    }
    if (!ok || count != (int64_t)got - hbytes) {
        st_free_aligned(buf);
        return false;
    }
    memmove(buf, buf + hbytes, (size_t)count); /* the data at the aligned start, which st_idx_free frees */
    out->ndim = ndim;
    memcpy(out->dims, dims, sizeof dims);
    out->count = count;
    out->data = buf;
    whole_reads++;
    return true;
}
#endif

st_status st_idx_read(const char *path, st_idx *out) { return st_idx_read_with(path, out, true); }

st_status st_idx_read_with(const char *path, st_idx *out, bool whole) {
    if (!out) return st_fail(ST_ERR_ARG, "st_idx_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return st_fail(ST_ERR_ARG, "st_idx_read: path is NULL");
    struct stat sb;
    int fd = st_open_read(path, &sb);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT && strncmp(path, FASHION_MNIST_DIR, strlen(FASHION_MNIST_DIR)) == 0)
            return st_fail(ST_ERR_IO,
                           "%s: no such file; Fashion-MNIST is in Debian's dataset-fashion-mnist package: "
                           "apt-get install dataset-fashion-mnist",
                           path);
        return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return st_fail(ST_ERR_IO, "%s: %s, not a regular file: give the data file itself", path,
                       st_file_type_name(sb.st_mode));
    }
#ifdef ST_HAVE_LIBDEFLATE
    if (whole && read_whole_gzip(fd, (int64_t)sb.st_size, out)) {
        close(fd);
        return ST_OK;
    }
#else
    (void)whole;
#endif
    idx_src *src = calloc(1, sizeof *src);
    if (!src) {
        close(fd);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
    }
    src->path = path;
    src->fd = fd;
    src->size = (int64_t)sb.st_size;
    st_status s = src_open(src);
    if (s == ST_OK) s = parse(path, src, out);
    if (src->z_live) inflateEnd(&src->z);
    free(src);
    close(fd);
    if (s != ST_OK) st_idx_free(out);
    return s;
}

void st_idx_free(st_idx *x) {
    if (!x) return;
    st_free_aligned(x->data);
    memset(x, 0, sizeof *x);
}

st_status st_idx_write(const char *path, int ndim, const int64_t *dims, const uint8_t *data, bool gzip) {
    if (!path || ndim < 1 || ndim > ST_IDX_MAX_NDIM || !dims || !data)
        return st_fail(ST_ERR_ARG, "st_idx_write: bad arguments (path, ndim %d, dims, data)", ndim);
    uint8_t hdr[4 + 4 * ST_IDX_MAX_NDIM] = {0, 0, 0x08, (uint8_t)ndim};
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 1 || dims[i] > 0xffffffffLL || __builtin_mul_overflow(count, dims[i], &count))
            return st_fail(ST_ERR_ARG, "%s: dimension %d = %lld is out of range", path, i,
                           (long long)dims[i]);
        for (int b = 0; b < 4; b++)
            hdr[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    }
    st_atomic_file af;
    ST_TRY(st_atomic_open(&af, path));
    st_status s = ST_OK;
    int gzfd = dup(fileno(af.fp)); /* gzclose closes its own descriptor */
    gzFile gz = gzfd < 0 ? NULL : gzdopen(gzfd, gzip ? "wb6" : "wbT");
    if (!gz) {
        if (gzfd >= 0) close(gzfd);
        ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot start zlib: %s", af.tmp, strerror(errno)));
    }
    int hlen = 4 + 4 * ndim;
    int ok = gzwrite(gz, hdr, (unsigned)hlen) == hlen;
    for (int64_t off = 0; ok && off < count; off += 1 << 30) {
        unsigned n = (unsigned)(count - off < (1 << 30) ? count - off : (1 << 30));
        ok = gzwrite(gz, data + off, n) == (int)n;
    }
    if (gzclose_w(gz) != Z_OK) ok = 0;
    if (!ok) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot write: %s", af.tmp, strerror(errno)));
    s = st_atomic_commit(&af);
fail:
    st_atomic_abort(&af);
    return s;
}
