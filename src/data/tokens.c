/* Token files (format in tokens.h and docs/formats.md): the mapped reader, the
 * atomic writer and the byte-level tokenizer.
 *
 * The header is read with pread and checked against the file's exact size
 * before the file is mapped, so no token is read from outside the file. The
 * writer streams through a temporary file whose header is filled in last,
 * which lets the tokenizer write inputs larger than memory. */
#include "data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"

struct st_tokens {
    char *path;
    const uint8_t *map; /* the whole file, read-only */
    size_t map_bytes;
    const uint8_t *data; /* map + 64: (count) tokens of token_bytes each */
    int64_t count;
    uint64_t vocab_size;
    int token_bytes;
};

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

/* Check a 64-byte header against the file size; fills t's sizes. */
static st_status check_header(const char *path, const uint8_t *h, int64_t size, st_tokens *t) {
    if (memcmp(h, ST_TOKENS_MAGIC, 8) != 0)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: not a scaletrain token file (magic %02x %02x %02x %02x %02x %02x %02x %02x, expected "
            "\"STTOKENS\"); make one with `scaletrain data tokenize`",
            path, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    uint32_t version = get_u32(h + 8), tb = get_u32(h + 12);
    uint64_t count = get_u64(h + 16), vocab = get_u64(h + 24);
    if (version != ST_TOKENS_VERSION)
        return st_fail(ST_ERR_FORMAT, "%s: token file version %u; this build reads version %d%s", path,
                       version, ST_TOKENS_VERSION,
                       version > ST_TOKENS_VERSION ? " (the file is from a newer scaletrain)" : "");
    if (tb != 2 && tb != 4)
        return st_fail(ST_ERR_FORMAT, "%s: token width %u bytes; it must be 2 or 4; the header is corrupt",
                       path, tb);
    for (int i = 32; i < ST_TOKENS_HEADER_BYTES; i++)
        if (h[i] != 0)
            return st_fail(ST_ERR_FORMAT, "%s: reserved header byte %d is not zero; the header is corrupt",
                           path, i);
    if (count == 0) return st_fail(ST_ERR_FORMAT, "%s: the file holds no tokens", path);
    if (count > (uint64_t)(INT64_MAX - ST_TOKENS_HEADER_BYTES) / tb)
        return st_fail(ST_ERR_FORMAT, "%s: token count %llu is impossibly large; the header is corrupt", path,
                       (unsigned long long)count);
    int64_t want = ST_TOKENS_HEADER_BYTES + (int64_t)count * tb;
    if (size != want)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: the header says %llu tokens of %u bytes (%lld bytes with the header) but the file is "
            "%lld bytes%s; it is %s",
            path, (unsigned long long)count, tb, (long long)want, (long long)size,
            (size - ST_TOKENS_HEADER_BYTES) % tb ? " (it ends mid-token)" : "",
            size < want ? "truncated: write it again" : "longer than its header says: corrupt");
    if (vocab < 1 || vocab > ((uint64_t)1 << (8 * tb)))
        return st_fail(ST_ERR_FORMAT, "%s: vocab_size %llu does not fit %u-byte tokens (1..%llu)", path,
                       (unsigned long long)vocab, tb, (unsigned long long)((uint64_t)1 << (8 * tb)));
    t->count = (int64_t)count;
    t->vocab_size = vocab;
    t->token_bytes = (int)tb;
    return ST_OK;
}

st_status st_tokens_open(const char *path, st_tokens **out) {
    if (!out) return st_fail(ST_ERR_ARG, "st_tokens_open: out is NULL");
    *out = NULL;
    if (!path) return st_fail(ST_ERR_ARG, "st_tokens_open: path is NULL");
    st_status s = ST_OK;
    st_tokens *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno)));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        ST_GOTO(st_fail(ST_ERR_IO, "%s: not a regular file", path));
    int64_t size = (int64_t)sb.st_size;
    uint8_t h[ST_TOKENS_HEADER_BYTES];
    if (size < ST_TOKENS_HEADER_BYTES)
        ST_GOTO(
            st_fail(ST_ERR_FORMAT,
                    "%s: the file is %lld bytes, shorter than the %d-byte header; it is truncated or not a "
                    "scaletrain token file (make one with `scaletrain data tokenize`)",
                    path, (long long)size, ST_TOKENS_HEADER_BYTES));
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot read the header: %s", path, strerror(errno)));
    ST_GOTO(check_header(path, h, size, t));
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot map: %s", path, strerror(errno)));
    t->map = map;
    t->map_bytes = (size_t)size;
    t->data = t->map + ST_TOKENS_HEADER_BYTES;
    close(fd);
    *out = t;
    return ST_OK;
fail:
    if (fd >= 0) close(fd);
    st_tokens_close(t);
    return s;
}

void st_tokens_close(st_tokens *t) {
    if (!t) return;
    if (t->map) munmap((void *)t->map, t->map_bytes);
    free(t->path);
    free(t);
}

int64_t st_tokens_count(const st_tokens *t) { return t->count; }
uint64_t st_tokens_vocab_size(const st_tokens *t) { return t->vocab_size; }
int st_tokens_token_bytes(const st_tokens *t) { return t->token_bytes; }

static inline uint32_t token_at(const st_tokens *t, int64_t i) {
    const uint8_t *p = t->data + i * t->token_bytes;
    return t->token_bytes == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
}

uint32_t st_tokens_get(const st_tokens *t, int64_t i) {
    return i >= 0 && i < t->count ? token_at(t, i) : UINT32_MAX;
}

st_status st_tokens_check_range(const st_tokens *t) {
    if (!t) return st_fail(ST_ERR_ARG, "st_tokens_check_range: NULL");
    for (int64_t i = 0; i < t->count; i++) {
        uint32_t v = token_at(t, i);
        if (v >= t->vocab_size)
            return st_fail(ST_ERR_FORMAT,
                           "%s: token %lld is %u, not below vocab_size %llu; the file is corrupt", t->path,
                           (long long)i, v, (unsigned long long)t->vocab_size);
    }
    return ST_OK;
}

st_status st_tokens_read_i32(const st_tokens *t, int64_t start, int64_t n, int32_t *dst) {
    if (!t || (n > 0 && !dst)) return st_fail(ST_ERR_ARG, "st_tokens_read_i32: NULL argument");
    if (start < 0 || n < 0 || start > t->count || n > t->count - start)
        return st_fail(ST_ERR_ARG, "%s: tokens [%lld, %lld + %lld) are outside the file's %lld", t->path,
                       (long long)start, (long long)start, (long long)n, (long long)t->count);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = token_at(t, start + i);
        if (v > INT32_MAX)
            return st_fail(ST_ERR_FORMAT, "%s: token %lld is %u, too large for int32", t->path,
                           (long long)(start + i), v);
        dst[i] = (int32_t)v;
    }
    return ST_OK;
}

/* ---- writing: a temporary file, header filled in last, synced and renamed ---- */

typedef struct tok_out {
    st_atomic_file af;
    FILE *fp;
    int token_bytes;
    int64_t count;
} tok_out;

static st_status out_begin(tok_out *o, const char *path, int token_bytes) {
    static const uint8_t zero[ST_TOKENS_HEADER_BYTES];
    o->token_bytes = token_bytes;
    o->count = 0;
    ST_TRY(st_atomic_open(&o->af, path));
    o->fp = o->af.fp;
    if (fwrite(zero, 1, sizeof zero, o->fp) != sizeof zero)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    return ST_OK;
}

static st_status out_put(tok_out *o, const uint32_t *tok, int64_t n) {
    uint8_t buf[4 * 4096];
    for (int64_t i = 0; i < n; i += 4096) {
        int64_t m = n - i < 4096 ? n - i : 4096;
        for (int64_t j = 0; j < m; j++) {
            uint32_t v = tok[i + j];
            if (o->token_bytes == 2)
                buf[2 * j] = (uint8_t)v, buf[2 * j + 1] = (uint8_t)(v >> 8);
            else
                put_u32(buf + 4 * j, v);
        }
        size_t nb = (size_t)(m * o->token_bytes);
        if (fwrite(buf, 1, nb, o->fp) != nb)
            return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    }
    o->count += n;
    return ST_OK;
}

static st_status out_finish(tok_out *o, uint64_t vocab_size) {
    uint8_t h[ST_TOKENS_HEADER_BYTES] = {0};
    memcpy(h, ST_TOKENS_MAGIC, 8);
    put_u32(h + 8, ST_TOKENS_VERSION);
    put_u32(h + 12, (uint32_t)o->token_bytes);
    put_u64(h + 16, (uint64_t)o->count);
    put_u64(h + 24, vocab_size);
    if (fseek(o->fp, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, o->fp) != sizeof h)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    o->fp = NULL;
    return st_atomic_commit(&o->af);
}

/* After a failure: drop the temporary file (the old file at path stays). */
static void out_abort(tok_out *o) {
    o->fp = NULL;
    st_atomic_abort(&o->af);
}

st_status st_tokens_write(const char *path, const uint32_t *tokens, int64_t count, uint64_t vocab_size) {
    if (!path || !tokens || count < 1)
        return st_fail(ST_ERR_ARG, "st_tokens_write: path or tokens is NULL, or count %lld < 1",
                       (long long)count);
    if (vocab_size < 1 || vocab_size > ((uint64_t)1 << 32))
        return st_fail(ST_ERR_ARG, "%s: vocab_size %llu is not in 1..2^32", path,
                       (unsigned long long)vocab_size);
    for (int64_t i = 0; i < count; i++)
        if (tokens[i] >= vocab_size)
            return st_fail(ST_ERR_ARG, "%s: token %lld is %u, not below vocab_size %llu", path, (long long)i,
                           tokens[i], (unsigned long long)vocab_size);
    tok_out o = {0};
    st_status s = out_begin(&o, path, vocab_size <= 65536 ? 2 : 4);
    if (s == ST_OK) s = out_put(&o, tokens, count);
    if (s == ST_OK) s = out_finish(&o, vocab_size);
    if (s != ST_OK) out_abort(&o);
    return s;
}

st_status st_tokens_from_text(const char *const *text_paths, int n_paths, const char *out_path,
                              int64_t *count_out) {
    if (count_out) *count_out = 0;
    if (!text_paths || n_paths < 1 || !out_path)
        return st_fail(ST_ERR_ARG, "st_tokens_from_text: no input files or no output path");
    for (int i = 0; i < n_paths; i++) { /* fail before writing anything */
        FILE *in = text_paths[i] ? fopen(text_paths[i], "rb") : NULL;
        if (!in)
            return st_fail(ST_ERR_IO, "%s: cannot open: %s", text_paths[i] ? text_paths[i] : "(null)",
                           text_paths[i] ? strerror(errno) : "NULL path");
        fclose(in);
    }
    tok_out o = {0};
    FILE *in = NULL;
    st_status s;
    ST_GOTO(out_begin(&o, out_path, 2));
    for (int i = 0; i < n_paths; i++) {
        if (!(in = fopen(text_paths[i], "rb")))
            ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot open: %s", text_paths[i], strerror(errno)));
        uint8_t buf[16384];
        uint32_t tok[16384];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
            for (size_t j = 0; j < n; j++)
                tok[j] = buf[j];
            ST_GOTO(out_put(&o, tok, (int64_t)n));
        }
        if (ferror(in)) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot read: %s", text_paths[i], strerror(errno)));
        fclose(in);
        in = NULL;
    }
    if (o.count == 0)
        ST_GOTO(st_fail(ST_ERR_FORMAT, "%s%s: the input is empty (0 bytes in %d file%s); nothing to tokenize",
                        text_paths[0], n_paths > 1 ? " ..." : "", n_paths, n_paths > 1 ? "s" : ""));
    ST_GOTO(out_finish(&o, 256));
    if (count_out) *count_out = o.count;
    return ST_OK;
fail:
    if (in) fclose(in);
    out_abort(&o);
    return s;
}
