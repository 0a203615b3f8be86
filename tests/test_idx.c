/* IDX: raw and gzip round trips, malformed files (bad magic, unsupported
 * types, bad dimension counts, zero dims, truncation, trailing bytes), the
 * missing-file hint, and the real Fashion-MNIST files when Debian's
 * dataset-fashion-mnist package is installed (skipped, and said so, when not).
 * Every file is read twice: by st_idx_read and by the streaming reader alone
 * (st_idx_read_with, whole=false), which must agree on the outcome, the
 * message and the bytes, so that the whole-file path (libdeflate, where
 * built) never takes a file the streaming reader refuses nor reads one
 * otherwise; gzip files with bytes corrupted at random try that further. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "data/idx.h"

static char dir[64];

/* st_idx_read(path, x), after checking it against the streaming reader */
static st_status read_idx(const char *path, st_idx *x) {
    st_idx ref = {0};
    st_clear_error();
    const st_status rs = st_idx_read_with(path, &ref, false);
    char rmsg[1024];
    snprintf(rmsg, sizeof rmsg, "%s", st_last_error());
    st_clear_error();
    const st_status s = st_idx_read(path, x);
    CHECK(s == rs, "%s: st_idx_read gives %s (%s), the streaming reader %s (%s)", path, st_status_name(s),
          st_last_error(), st_status_name(rs), rmsg);
    if (s != ST_OK && s == rs)
        CHECK(strcmp(st_last_error(), rmsg) == 0, "%s: st_idx_read says \"%s\", the streaming reader \"%s\"",
              path, st_last_error(), rmsg);
    if (s == ST_OK && rs == ST_OK)
        CHECK(x->ndim == ref.ndim && memcmp(x->dims, ref.dims, sizeof ref.dims) == 0 &&
                  x->count == ref.count && memcmp(x->data, ref.data, (size_t)ref.count) == 0,
              "%s: st_idx_read's %lld elements are not the streaming reader's %lld", path,
              (long long)x->count, (long long)ref.count);
    st_idx_free(&ref);
    return s;
}

static void put_file(const char *path, const void *buf, size_t n, bool gzip) {
    bool ok;
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        ok = gz && gzwrite(gz, buf, (unsigned)n) == (int)n;
        if (gz && gzclose(gz) != Z_OK) ok = false;
    } else {
        FILE *fp = fopen(path, "wb");
        ok = fp && fwrite(buf, 1, n, fp) == n;
        if (fp && fclose(fp) != 0) ok = false;
    }
    if (!ok) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static size_t get_file(const char *path, uint8_t *buf, size_t cap) {
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(buf, 1, cap, fp) : 0;
    if (fp) fclose(fp);
    return n;
}

static void round_trip(bool gzip) {
    char path[256];
    snprintf(path, sizeof path, "%s/rt%s", dir, gzip ? ".gz" : "");
    int64_t dims[3] = {3, 4, 5};
    uint8_t data[60];
    for (int i = 0; i < 60; i++)
        data[i] = (uint8_t)(i * 37 + 11);
    CHECK_OK(st_idx_write(path, 3, dims, data, gzip));
    uint8_t raw[256];
    size_t n = get_file(path, raw, sizeof raw);
    if (gzip)
        CHECK(n > 2 && raw[0] == 0x1f && raw[1] == 0x8b, "not gzip");
    else
        CHECK(n == 16 + 60 && raw[2] == 8 && raw[3] == 3 && raw[7] == 3 && raw[15] == 5, "raw layout");
    st_idx x;
    CHECK_OK(read_idx(path, &x));
    CHECK(x.ndim == 3 && x.dims[0] == 3 && x.dims[1] == 4 && x.dims[2] == 5 && x.count == 60, "shape");
    CHECK(x.data && memcmp(x.data, data, 60) == 0, "data");
    st_idx_free(&x);
    CHECK(x.data == NULL && x.count == 0, "free zeroes");
    st_idx_free(&x);
    st_idx_free(NULL);
    int64_t d1 = 7;
    CHECK_OK(st_idx_write(path, 1, &d1, data, gzip));
    CHECK_OK(read_idx(path, &x));
    CHECK(x.ndim == 1 && x.dims[0] == 7 && x.count == 7 && memcmp(x.data, data, 7) == 0, "1-d");
    st_idx_free(&x);
}

/* `bytes` as a file (gzip or raw) must fail with `code`, naming it and `needle`. */
static void bad(const char *label, const void *bytes, size_t n, bool gzip, st_status code,
                const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s%s", dir, label, gzip ? ".gz" : "");
    put_file(path, bytes, n, gzip);
    st_idx x = {.data = (uint8_t *)1};
    st_clear_error();
    st_status s = read_idx(path, &x);
    CHECK(s == code && x.data == NULL && x.ndim == 0, "%s: got %s (%s), expected %s", label,
          st_status_name(s), st_last_error(), st_status_name(code));
    CHECK(strstr(st_last_error(), path) && strstr(st_last_error(), needle), "%s: message \"%s\" lacks '%s'",
          label, st_last_error(), needle);
}

static void malformed(void) {
    const st_status F = ST_ERR_FORMAT;
    for (int gz = 0; gz < 2; gz++) {
        bad("magic", "\x01\x00\x08\x01\x00\x00\x00\x01x", 9, gz, F, "not an IDX file (magic 01 00 08 01");
        bad("type", "\x00\x00\x07\x01\x00\x00\x00\x01x", 9, gz, F, "not an IDX file");
        bad("float", "\x00\x00\x0d\x01\x00\x00\x00\x01xxxx", 12, gz, ST_ERR_UNSUPPORTED, "0x0d (float)");
        bad("ndim0", "\x00\x00\x08\x00", 4, gz, F, "0 dimensions");
        bad("ndim5",
            "\x00\x00\x08\x05\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01"
            "\x00\x00\x00\x01x",
            25, gz, ST_ERR_UNSUPPORTED, "5 dimensions");
        bad("zerodim", "\x00\x00\x08\x02\x00\x00\x00\x03\x00\x00\x00\x00", 12, gz, F, "dimension 1 is 0");
        bad("huge", "\x00\x00\x08\x03\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02", 16, gz, F,
            "more than 4294967296 elements");
        bad("empty", "", 0, gz, F, "4-byte magic");
        bad("short", "\x00\x00\x08\x02\x00\x00\x00\x03\x00\x00", 10, gz, F, "truncated in the header");
        bad("trailing", "\x00\x00\x08\x01\x00\x00\x00\x02xyzzy", 13, gz, F, "3 bytes after the 10");
    }

    /* a raw file cut at several points, and its gzip twin cut likewise */
    char full[256], cut[256];
    snprintf(full, sizeof full, "%s/full", dir);
    snprintf(cut, sizeof cut, "%s/cut", dir);
    int64_t dims[2] = {10, 7};
    uint8_t data[70] = {0}, buf[4096];
    for (int i = 0; i < 70; i++)
        data[i] = (uint8_t)i;
    CHECK_OK(st_idx_write(full, 2, dims, data, false));
    size_t size = get_file(full, buf, sizeof buf);
    CHECK(size == 82, "raw size %zu", size);
    size_t cuts[] = {0, 2, 4, 6, 11, 12, 13, 50, 81};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        put_file(cut, buf, cuts[i], false);
        st_idx x;
        st_clear_error();
        CHECK(read_idx(cut, &x) == F && x.data == NULL && strstr(st_last_error(), cut), "cut at %zu: %s",
              cuts[i], st_last_error());
        if (cuts[i] >= 12) {
            char want[96];
            snprintf(want, sizeof want, "promises 82 bytes (70 of data) but the file has %zu", cuts[i]);
            CHECK(strstr(st_last_error(), want), "cut at %zu: \"%s\" lacks \"%s\"", cuts[i], st_last_error(),
                  want);
        }
    }
    CHECK_OK(st_idx_write(full, 2, dims, data, true));
    size = get_file(full, buf, sizeof buf);
    for (size_t len = 0; len < size; len++) { /* a gzip file cut anywhere: a clean error */
        put_file(cut, buf, len, false);
        st_idx x;
        st_status s = read_idx(cut, &x);
        CHECK(s != ST_OK && x.data == NULL && strstr(st_last_error(), cut), "gzip cut at %zu of %zu: %s", len,
              size, st_last_error());
        if (s == ST_OK) st_idx_free(&x);
    }
    /* two gzip members make one valid stream; garbage after the gzip data does not */
    uint8_t whole[82];
    CHECK_OK(st_idx_write(full, 2, dims, data, false));
    get_file(full, whole, sizeof whole);
    put_file(cut, whole, 40, true);
    uint8_t two[4096];
    size_t n1 = get_file(cut, two, sizeof two);
    put_file(cut, whole + 40, 42, true);
    size_t n2 = get_file(cut, two + n1, sizeof two - n1);
    put_file(cut, two, n1 + n2, false);
    st_idx m;
    CHECK_OK(read_idx(cut, &m));
    CHECK(m.count == 70 && m.data && memcmp(m.data, data, 70) == 0, "two gzip members");
    st_idx_free(&m);
    memcpy(two + n1, "garbage", 7);
    put_file(cut, two, n1 + 7, false);
    CHECK(read_idx(cut, &m) == F && strstr(st_last_error(), "bytes after the end of its gzip data"), "%s",
          st_last_error());
    /* random header corruption: a clean result either way */
    CHECK_OK(st_idx_write(full, 2, dims, data, false));
    size = get_file(full, buf, sizeof buf);
    uint64_t seed = 99;
    for (int iter = 0; iter < 500; iter++) {
        uint8_t b2[82];
        memcpy(b2, buf, sizeof b2);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        b2[(seed >> 33) % 12] = (uint8_t)(seed >> 20);
        put_file(cut, b2, sizeof b2, false);
        st_idx x;
        st_status s = read_idx(cut, &x);
        CHECK(s == ST_OK || (x.data == NULL && strstr(st_last_error(), cut)), "corruption %d: %s", iter,
              st_last_error());
        st_idx_free(&x);
    }
    /* a gzip header with its own CRC-16 (FHCRC: 2 bytes after the 10 of
     * the header), right and wrong: libdeflate skips it unchecked, zlib
     * checks it, so the whole-file path must leave such a file to zlib */
    CHECK_OK(st_idx_write(full, 2, dims, data, true));
    size = get_file(full, buf, sizeof buf);
    for (int right = 0; right < 2; right++) {
        uint8_t h[4096];
        memcpy(h, buf, 10);
        h[3] |= 0x02;
        const uint32_t crc = (uint32_t)crc32(0, h, 10);
        h[10] = right ? (uint8_t)crc : (uint8_t)~crc, h[11] = (uint8_t)(crc >> 8);
        memcpy(h + 12, buf + 10, size - 10);
        put_file(cut, h, size + 2, false);
        st_idx x;
        const st_status s = read_idx(cut, &x);
        CHECK(right ? s == ST_OK && x.count == 70 && memcmp(x.data, data, 70) == 0
                    : s == F && strstr(st_last_error(), "header crc mismatch"),
              "a gzip header with a %s CRC-16: %s", right ? "right" : "wrong", st_last_error());
        if (s == ST_OK) st_idx_free(&x);
    }
    /* the gzip file with one or two bytes changed anywhere (its header, the
     * deflate data, the CRC, the length): read_idx compares both readers */
    CHECK_OK(st_idx_write(full, 2, dims, data, true));
    size = get_file(full, buf, sizeof buf);
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t b2[4096];
        memcpy(b2, buf, size);
        for (int k = 0; k <= iter % 2; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            b2[(seed >> 33) % size] ^= (uint8_t)(1u << ((seed >> 20) % 8));
        }
        put_file(cut, b2, size, false);
        st_idx x;
        if (read_idx(cut, &x) == ST_OK) st_idx_free(&x);
    }

    CHECK_FAILS(st_idx_write(full, 0, dims, data, false), ST_ERR_ARG, "ndim 0");
    int64_t zero[2] = {3, 0};
    CHECK_FAILS(st_idx_write(full, 2, zero, data, false), ST_ERR_ARG, "dimension 1 = 0");
    char missing[256];
    snprintf(missing, sizeof missing, "%s/nope.gz", dir);
    st_idx x;
    CHECK_FAILS(read_idx(missing, &x), ST_ERR_IO, "nope.gz: cannot open: No such file");
    CHECK_FAILS(
        read_idx("/usr/share/datasets/fashion-mnist/nope-idx1-ubyte.gz", &x), ST_ERR_IO,
        "nope-idx1-ubyte.gz: no such file; Fashion-MNIST is in Debian's dataset-fashion-mnist package: "
        "apt-get install dataset-fashion-mnist");
    CHECK_FAILS(read_idx(dir, &x), ST_ERR_IO, "not a regular file");
}

static void fashion_mnist(void) {
    const char *d = "/usr/share/datasets/fashion-mnist";
    struct stat sb;
    if (stat(d, &sb) != 0) {
        printf("  Fashion-MNIST part skipped: %s does not exist (apt-get install dataset-fashion-mnist)\n",
               d);
        return;
    }
    const char *sets[2][3] = {{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "60000"},
                              {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "10000"}};
    for (int k = 0; k < 2; k++) {
        char p[512];
        int64_t n = atoll(sets[k][2]);
        st_idx img, lab;
        snprintf(p, sizeof p, "%s/%s", d, sets[k][0]);
        const int64_t whole = st_idx_whole_reads();
        CHECK_OK(read_idx(p, &img));
        if (st_idx_whole_available()) /* one gzip member: the whole-file path's case */
            CHECK(st_idx_whole_reads() == whole + 1, "%s was not read by the whole-file path", p);
        CHECK(img.ndim == 3 && img.dims[0] == n && img.dims[1] == 28 && img.dims[2] == 28 &&
                  img.count == n * 784,
              "%s: %d dims %lldx%lldx%lld", p, img.ndim, (long long)img.dims[0], (long long)img.dims[1],
              (long long)img.dims[2]);
        snprintf(p, sizeof p, "%s/%s", d, sets[k][1]);
        CHECK_OK(read_idx(p, &lab));
        CHECK(lab.ndim == 1 && lab.dims[0] == n, "%s: %d dims, %lld labels", p, lab.ndim,
              (long long)lab.dims[0]);
        int64_t per_class[10] = {0}, bad_labels = 0;
        for (int64_t i = 0; i < lab.count; i++) {
            if (lab.data[i] < 10)
                per_class[lab.data[i]]++;
            else
                bad_labels++;
        }
        CHECK(bad_labels == 0, "%s: %lld labels outside 0..9", p, (long long)bad_labels);
        for (int c = 0; c < 10; c++) /* Fashion-MNIST is balanced */
            CHECK(per_class[c] == n / 10, "%s: class %d has %lld", p, c, (long long)per_class[c]);
        int64_t sum = 0;
        for (int64_t i = 0; i < img.count; i++)
            sum += img.data[i];
        CHECK(sum > 0, "%s: all pixels are zero", sets[k][0]);
        printf("  %s: %lldx28x28 images, %lld labels, mean pixel %.2f\n", sets[k][0], (long long)n,
               (long long)lab.count, img.count ? (double)sum / (double)img.count : 0.0);
        st_idx_free(&img);
        st_idx_free(&lab);
    }
}

int main(void) {
    if (!st_idx_whole_available())
        printf("  this build has no libdeflate: gzip files are read by zlib's streaming inflate only\n");
    snprintf(dir, sizeof dir, "/tmp/st_idx_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_idx", "cannot make a temporary directory in /tmp");
    round_trip(false);
    round_trip(true);
    malformed();
    fashion_mnist();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    return st_test_finish("test_idx");
}
