/* core/crc.h: the CRC32 cut into pieces on several threads is zlib's crc32
 * of the whole, bit for bit, for every length around the piece boundaries
 * and every thread count; a file's is its bytes' (and its size), read to
 * its end; a file's parts, joined, are the whole, and a part past its end
 * is short; a missing file or a directory is an error naming it. */
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "core/crc.h"

/* zlib's, one call per GiB (its length is 32 bits) */
static uint32_t zlib_crc(uint32_t crc, const unsigned char *p, size_t n) {
    uLong c = crc;
    for (size_t at = 0; at < n; at += 1u << 30)
        c = crc32(c, p + at, (uInt)(n - at < (1u << 30) ? n - at : 1u << 30));
    return (uint32_t)c;
}

int main(void) {
    CHECK(st_crc32(0, "123456789", 9) == 0xCBF43926u, "the CRC32 check value: %08x",
          (unsigned)st_crc32(0, "123456789", 9));
    const size_t big = (size_t)37 << 20; /* nine 4 MiB pieces and a bit */
    unsigned char *buf = malloc(big + 32); /* (from offset 3: an unaligned start) */
    if (!buf) return st_test_skip("test_crc", "no memory for the 37 MiB buffer");
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < big + 32; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)(x >> 24);
    }
    const size_t piece = (size_t)4 << 20;
    const size_t lens[] = {0, 1, 15, piece - 1, piece, piece + 1, 2 * piece - 1, 2 * piece, 3 * piece + 7,
                           big - 3, big + 16};
    const int threads[] = {1, 2, 3, 7, 16};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        omp_set_num_threads(threads[t]);
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
            for (uint32_t start = 0; start < 2; start++) { /* from nothing, and after an earlier CRC */
                const uint32_t init = start ? 0x12345678u : 0;
                const uint32_t want = zlib_crc(init, buf + 3, lens[l]);
                const uint32_t got = st_crc32(init, buf + 3, lens[l]);
                CHECK(got == want, "%d threads, %zu bytes from %08x: %08x, zlib %08x", threads[t], lens[l],
                      (unsigned)init, (unsigned)got, (unsigned)want);
            }
    }

    char dir[] = "/tmp/test_crc.XXXXXX";
    if (!mkdtemp(dir)) return st_test_skip("test_crc", "mkdtemp failed");
    char path[256];
    const size_t flens[] = {0, 5, piece + 3, big + 16};
    for (size_t t = 0; t < 3; t++) {
        omp_set_num_threads(threads[t + 1]);
        for (size_t l = 0; l < sizeof flens / sizeof *flens; l++) {
            snprintf(path, sizeof path, "%s/f%zu", dir, l);
            FILE *fp = fopen(path, "wb");
            bool wrote = fp && fwrite(buf, 1, flens[l], fp) == flens[l];
            if (fp) wrote = fclose(fp) == 0 && wrote;
            CHECK(wrote, "writing %s", path);
            uint32_t crc = 1;
            int64_t n = -1;
            CHECK_OK(st_crc32_file(path, &crc, &n));
            CHECK(n == (int64_t)flens[l] && crc == zlib_crc(0, buf, flens[l]),
                  "%d threads, a file of %zu bytes: %lld bytes, %08x, zlib %08x", threads[t + 1], flens[l],
                  (long long)n, (unsigned)crc, (unsigned)zlib_crc(0, buf, flens[l]));
            /* in 3 parts (one rank's each), joined: the whole; a part past the end is short */
            uint32_t joined = 0, c3;
            int64_t total = 0, got;
            for (int r = 0; r < 3; r++) {
                const int64_t lo = (int64_t)flens[l] * r / 3, hi = (int64_t)flens[l] * (r + 1) / 3;
                CHECK_OK(st_crc32_file_part(path, lo, hi, &c3, &got));
                joined = (uint32_t)crc32_combine(joined, c3, (z_off_t)got);
                total += got;
            }
            CHECK(total == (int64_t)flens[l] && joined == zlib_crc(0, buf, flens[l]),
                  "a file of %zu bytes in 3 parts: %lld bytes, %08x", flens[l], (long long)total,
                  (unsigned)joined);
            const int64_t from = flens[l] >= 2 ? (int64_t)flens[l] - 2 : 0;
            CHECK_OK(st_crc32_file_part(path, from, (int64_t)flens[l] + 5, &c3, &got));
            CHECK(got == (int64_t)flens[l] - from, "a part past the end: %lld bytes", (long long)got);
            unlink(path);
        }
    }
    uint32_t crc;
    int64_t n;
    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK_FAILS(st_crc32_file(path, &crc, &n), ST_ERR_IO, "missing: cannot open: No such file");
    CHECK_FAILS(st_crc32_file(dir, &crc, &n), ST_ERR_IO, ": read error: Is a directory");
    rmdir(dir);
    free(buf);
    return st_test_finish("test_crc");
}
