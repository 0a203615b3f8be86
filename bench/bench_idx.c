/* Reading a gzip-compressed IDX file: the whole-file path (libdeflate, where
 * the build has it) against the streaming reader (zlib's inflate, the path
 * every gzip file took before, and what Python's gzip module runs), the same
 * files in the same run, alternating so that both see the same page cache.
 * Each file is read R times by each (default 7); the median of each and
 * their ratio are printed, one line per file, then one JSON line:
 *
 *   {"files": [{"path", "bytes", "whole_ms", "stream_ms", "ratio"}], "whole_available"}
 *
 * Usage: bench_idx [--reps R] [FILE...]   (default: Fashion-MNIST's training
 * and test images under /usr/share/datasets/fashion-mnist). Results:
 * bench/RESULTS.md. Exit: 0 ok, 1 a read failed, 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/stats.h"
#include "data/idx.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* one read of path, by the whole-file path or the streaming reader: its
 * seconds, or -1 when it failed (said) */
static double timed_read(const char *path, bool whole, int64_t *bytes) {
    st_idx x;
    const double t0 = now();
    if (st_idx_read_with(path, &x, whole) != ST_OK) {
        fprintf(stderr, "bench_idx: %s\n", st_last_error());
        return -1;
    }
    const double dt = now() - t0;
    *bytes = x.count;
    st_idx_free(&x);
    return dt;
}

int main(int argc, char **argv) {
    int reps = 7, first = 1;
    if (argc > 2 && strcmp(argv[1], "--reps") == 0) {
        reps = atoi(argv[2]);
        first = 3;
    }
    if (reps < 1 || reps > 1000 || (argc > 1 && argv[1][0] == '-' && first == 1)) {
        fprintf(stderr, "usage: bench_idx [--reps R] [FILE...]\n");
        return 2;
    }
    const char *defaults[] = {"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                              "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"};
    const char **files = first < argc ? (const char **)argv + first : defaults;
    const int n = first < argc ? argc - first : 2;
    if (!st_idx_whole_available())
        printf("this build has no libdeflate: both columns are zlib's streaming inflate\n");
    printf("%-64s %12s %10s %10s %7s\n", "file", "bytes", "whole ms", "zlib ms", "ratio");
    char json[8192];
    size_t at = (size_t)snprintf(json, sizeof json, "{\"files\": [");
    double *w = malloc(sizeof(double) * (size_t)reps), *z = malloc(sizeof(double) * (size_t)reps);
    if (!w || !z) return 1;
    for (int f = 0; f < n; f++) {
        int64_t bytes = 0;
        for (int r = 0; r < reps; r++) {
            w[r] = timed_read(files[f], true, &bytes);
            z[r] = timed_read(files[f], false, &bytes);
            if (w[r] < 0 || z[r] < 0) return 1;
        }
        const double wm = 1e3 * st_median(w, (size_t)reps), zm = 1e3 * st_median(z, (size_t)reps);
        printf("%-64s %12lld %10.1f %10.1f %6.2fx\n", files[f], (long long)bytes, wm, zm, zm / wm);
        if (at < sizeof json)
            at += (size_t)snprintf(json + at, sizeof json - at,
                                   "%s{\"path\": \"%s\", \"bytes\": %lld, \"whole_ms\": %.2f, \"stream_ms\": %.2f, "
                                   "\"ratio\": %.3f}",
                                   f ? ", " : "", files[f], (long long)bytes, wm, zm, zm / wm);
    }
    if (at < sizeof json)
        snprintf(json + at, sizeof json - at, "], \"whole_available\": %s}",
                 st_idx_whole_available() ? "true" : "false");
    printf("%s\n", json);
    free(w);
    free(z);
    return 0;
}
