/* See matmul_algos.h. */
#include "matmul_algos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/crc.h"
#include "core/ticker.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#ifdef ST_HAVE_CUDA
enum { ALGOS_MAX_BYTES = 64 << 20 }; /* (thousands of plans take a few MiB) */

static void path_of(char *buf, size_t n, const char *out_dir, int rank) {
    snprintf(buf, n, "%s/matmul-algos-rank%d.bin", out_dir, rank);
}

st_status st_matmul_algos_read(st_device *dev, const char *out_dir, int rank, bool note_rank) {
    if (!dev) return ST_OK;
    char path[4200], why[400] = "";
    path_of(path, sizeof path, out_dir, rank);
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) return ST_OK; /* (none yet: every plan is timed) */
    unsigned char *b = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (!f) {
        snprintf(why, sizeof why, "cannot be opened (%s)", strerror(errno));
    } else if (n < 4 || n > ALGOS_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(why, sizeof why, "%ld bytes, not a list of algorithms", n);
    } else if (!(b = malloc((size_t)n))) {
        fclose(f);
        return st_fail(ST_ERR_NOMEM, "out of host memory reading %s", path);
    } else if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        snprintf(why, sizeof why, "cannot be read");
    } else {
        const size_t body = (size_t)n - 4;
        const uint32_t want = (uint32_t)b[body] | (uint32_t)b[body + 1] << 8 | (uint32_t)b[body + 2] << 16 |
                              (uint32_t)b[body + 3] << 24;
        if (st_crc32(0, b, body) != want)
            snprintf(why, sizeof why, "damaged (its CRC-32 does not match its bytes)");
        else {
            const st_status s = st_cuda_matmul_algos_import(dev, b, body, why, sizeof why);
            if (s != ST_OK) {
                free(b);
                fclose(f);
                return s;
            }
        }
    }
    free(b);
    if (f) fclose(f);
    if (why[0] && note_rank)
        st_ticker_sayf(
            "scaletrain: note: %s: %s; model.matmul_tune times the matrix products' algorithms again "
            "(a resumed run may then multiply in other orders than the run before it)\n",
            path, why);
    return ST_OK;
}

bool st_matmul_algos_due(const st_device *dev) { return dev && st_cuda_matmul_algos_dirty(dev); }

void st_matmul_algos_write(st_device *dev, const char *out_dir, int rank) {
    static bool said;
    if (!dev || !st_cuda_matmul_algos_dirty(dev)) return;
    char path[4200];
    path_of(path, sizeof path, out_dir, rank);
    void *b = NULL;
    size_t n = 0;
    st_atomic_file f = {0};
    st_status s = st_cuda_matmul_algos_export(dev, &b, &n);
    if (s == ST_OK) s = st_mkdirs(out_dir);
    if (s == ST_OK) s = st_atomic_open(&f, path);
    if (s == ST_OK) {
        const uint32_t crc = st_crc32(0, b, n);
        const unsigned char tail[4] = {(unsigned char)crc, (unsigned char)(crc >> 8),
                                       (unsigned char)(crc >> 16), (unsigned char)(crc >> 24)};
        if (fwrite(b, 1, n, f.fp) != n || fwrite(tail, 1, 4, f.fp) != 4) {
            st_atomic_abort(&f);
            s = st_fail(ST_ERR_IO, "cannot write %s", path);
        } else {
            s = st_atomic_commit(&f);
        }
    }
    free(b);
    if (s != ST_OK && !said) {
        said = true;
        st_ticker_sayf("scaletrain: warning: the timed matrix-product algorithms were not kept: %s; training "
                       "goes on, and a resumed run will time them again\n",
                       st_last_error());
    }
    if (s != ST_OK) st_clear_error();
}
#else
st_status st_matmul_algos_read(st_device *dev, const char *out_dir, int rank, bool note_rank) {
    (void)dev;
    (void)out_dir;
    (void)rank;
    (void)note_rank;
    return ST_OK;
}
bool st_matmul_algos_due(const st_device *dev) {
    (void)dev;
    return false;
}
void st_matmul_algos_write(st_device *dev, const char *out_dir, int rank) {
    (void)dev;
    (void)out_dir;
    (void)rank;
}
#endif
