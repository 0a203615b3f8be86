/* CRC32 on every OpenMP thread (crc.h). */
#include "crc.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* A piece is at least PIECE_MIN bytes (smaller inputs take one thread: a
 * thread's start costs more than it saves); reads go READ_BUF at a time. */
enum { PIECE_MIN = 4 << 20, READ_BUF = 1 << 20, MAX_PIECES = 256 };

static uint32_t crc_serial(uint32_t crc, const unsigned char *p, size_t n) {
    uLong c = crc;
    while (n) { /* (zlib's length is a uInt) */
        const uInt k = n < (1u << 30) ? (uInt)n : 1u << 30;
        c = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}

/* The pieces for n bytes: as many as threads, each at least PIECE_MIN. */
static int pieces_for(int64_t n) {
    int t = omp_get_max_threads();
    if (t > MAX_PIECES) t = MAX_PIECES;
    const int64_t most = n / PIECE_MIN;
    return most < 1 ? 1 : most < t ? (int)most : t;
}

void st_crc32_piece(int64_t n, int k, int i, int64_t *lo, int64_t *hi) {
    const int64_t q = n / k, r = n % k;
    *lo = q * i + (i < r ? i : r);
    *hi = *lo + q + (i < r);
}

uint32_t st_crc32(uint32_t crc, const void *p, size_t n) {
    const int k = pieces_for((int64_t)n);
    if (k == 1) return crc_serial(crc, p, n);
    uint32_t part[MAX_PIECES];
#pragma omp parallel for num_threads(k) schedule(static, 1)
    for (int i = 0; i < k; i++) {
        int64_t lo, hi;
        st_crc32_piece((int64_t)n, k, i, &lo, &hi);
        part[i] = crc_serial(0, (const unsigned char *)p + lo, (size_t)(hi - lo));
    }
    uLong c = crc;
    for (int i = 0; i < k; i++) {
        int64_t lo, hi;
        st_crc32_piece((int64_t)n, k, i, &lo, &hi);
        c = crc32_combine(c, part[i], (z_off_t)(hi - lo));
    }
    return (uint32_t)c;
}

/* The CRC32 of the file's bytes [lo, hi) (hi < 0: to its end) and how many
 * there were (fewer when the file ends first); 0 or the errno of a failed
 * read. */
static int read_piece(int fd, int64_t lo, int64_t hi, uint32_t *crc, int64_t *got) {
    unsigned char *buf = malloc(READ_BUF);
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t at = lo;
    int e = buf ? 0 : ENOMEM;
    while (buf && (hi < 0 || at < hi)) {
        const size_t want = hi >= 0 && hi - at < READ_BUF ? (size_t)(hi - at) : READ_BUF;
        const ssize_t r = pread(fd, buf, want, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            e = errno;
            break;
        }
        if (r == 0) break;
        c = crc32(c, buf, (uInt)r);
        at += r;
    }
    free(buf);
    *crc = (uint32_t)c;
    *got = at - lo;
    return e;
}

/* The CRC32 of the open file's bytes [lo, hi) in pieces on the threads
 * (how many there were in *got: fewer when the file ends first); 0 or the
 * errno of a failed read. */
static int crc_range(int fd, int64_t lo, int64_t hi, uint32_t *crc, int64_t *got) {
    const int k = pieces_for(hi - lo);
    uint32_t part[MAX_PIECES];
    int64_t n[MAX_PIECES];
    int err[MAX_PIECES];
#pragma omp parallel for num_threads(k) schedule(static, 1) if (k > 1)
    for (int i = 0; i < k; i++) {
        int64_t a, b;
        st_crc32_piece(hi - lo, k, i, &a, &b);
        err[i] = read_piece(fd, lo + a, lo + b, &part[i], &n[i]);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    *got = 0;
    for (int i = 0; i < k; i++) {
        if (err[i]) return err[i];
        /* (a piece cut short, the file shrinking while read, makes the
         * count short: a size check fails it) */
        c = crc32_combine(c, part[i], (z_off_t)n[i]);
        *got += n[i];
    }
    *crc = (uint32_t)c;
    return 0;
}

static st_status read_failed(const char *path, int e) {
    if (e == ENOMEM) return st_fail(ST_ERR_NOMEM, "out of memory for a 1 MiB buffer to checksum %s", path);
    return st_fail(ST_ERR_IO, "%s: read error: %s", path, strerror(e));
}

st_status st_crc32_file(const char *path, uint32_t *crc, int64_t *nbytes) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    const int64_t size = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : 0;
    uint32_t head, tail;
    int64_t n, more;
    int e = crc_range(fd, 0, size, &head, &n);
    /* the bytes past the size it had when opened (none unless it grew) */
    if (!e) e = read_piece(fd, size, -1, &tail, &more);
    close(fd);
    if (e) return read_failed(path, e);
    *crc = (uint32_t)crc32_combine(head, tail, (z_off_t)more);
    *nbytes = n + more;
    return ST_OK;
}

st_status st_crc32_file_part(const char *path, int64_t lo, int64_t hi, uint32_t *crc, int64_t *got) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const int e = crc_range(fd, lo, hi > lo ? hi : lo, crc, got);
    close(fd);
    return e ? read_failed(path, e) : ST_OK;
}
