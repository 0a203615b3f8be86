/* st_sgemm (src/core/blas.h): the engine's matrix products in blocks of rows.
 *
 * 1. The same results as one cblas_sgemm call, for every transpose, for row
 *    counts around the block sizes (1023, 1024, 1025, 5000), at a K below
 *    and above the block budget, with beta 0 and 1 (poisoned where beta 0).
 * 2. What stays resident: after the CPU calibration (which every run does),
 *    a product with 32768 rows of C leaves at most a few MiB behind, where one
 *    call with OpenBLAS's threaded driver left 32 MiB (printed, not checked:
 *    that is OpenBLAS's behaviour, not ours). Each measurement in a forked
 *    child, as test_hw_memory does, and before the parent runs any product:
 *    OpenMP's threads do not survive a fork. The sanitizer build skips it.
 *
 * 3. st_sgemm_two: two independent products at once on two threads (each
 *    on one), one after the other otherwise: each the same as st_sgemm
 *    alone (poisoned outputs where beta is 0), on 1, 2 and 3 threads, with
 *    either product absent, and called from inside a parallel region.
 *
 * Not the same bits: OpenBLAS threads a product by its size, and a block of
 * rows may be split among threads differently from the whole, which changes
 * the last bits of some sums (about a quarter of them here). */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/blas.h"
#include "hw/device.h"
#include "mem_fixture.h"

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)((i * 2654435761u + seed) % 1000u) / 500.0f - 1.0f;
    return p;
}

static void check_same(int M, int N, int K, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, float beta) {
    float *A = filled((size_t)M * K, 1), *B = filled((size_t)K * N, 2);
    float *c1 = filled((size_t)M * N, 3), *c2 = malloc((size_t)M * N * sizeof *c2);
    if (!A || !B || !c1 || !c2) {
        CHECK(0, "out of memory");
        return;
    }
    if (beta == 0.0f) /* poisoned: every element must be written */
        for (size_t i = 0; i < (size_t)M * N; i++)
            c1[i] = NAN;
    memcpy(c2, c1, (size_t)M * N * sizeof *c2);
    const int lda = ta == CblasNoTrans ? K : M, ldb = tb == CblasNoTrans ? N : K;
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, c1, N);
    st_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, c2, N);
    double worst = 0;
    size_t same = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        const double d = fabs((double)c1[i] - c2[i]) / (1.0 + fabs((double)c1[i]));
        if (!(d <= worst)) worst = d; /* a NaN sticks */
        same += memcmp(&c1[i], &c2[i], sizeof(float)) == 0;
    }
    printf("M %5d N %3d K %4d %c%c beta %g: max rel diff %.2g, %.1f%% of elements the same bits\n", M, N, K,
           ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', beta, worst,
           100.0 * (double)same / ((double)M * N));
    CHECK(worst <= 1e-5, "st_sgemm differs from one cblas_sgemm by %.3g (M %d N %d K %d)", worst, M, N, K);
    free(A), free(B), free(c1), free(c2);
}

/* The largest relative difference between n floats (a NaN: infinity). */
static double worst_of(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i]));
        if (!(d <= worst)) worst = d != d ? INFINITY : d;
    }
    return worst;
}

/* A weight gradient (K x N += x^T dy, beta 1) and an input gradient (M x K
 * = dy W^T, beta 0, poisoned) of a layer of M rows, K inputs, N outputs
 * through st_sgemm_two (`which`: 3 both, 1 the first, 2 the second), against
 * each through st_sgemm; `nested`: from inside a parallel region. */
static void check_two(int M, int K, int N, int threads, int which, bool nested) {
    float *x = filled((size_t)M * K, 4), *dy = filled((size_t)M * N, 5), *w = filled((size_t)K * N, 6);
    float *dw1 = filled((size_t)K * N, 7), *dw2 = malloc((size_t)K * N * sizeof(float));
    float *dx1 = malloc((size_t)M * K * sizeof(float)), *dx2 = malloc((size_t)M * K * sizeof(float));
    if (!x || !dy || !w || !dw1 || !dw2 || !dx1 || !dx2) {
        CHECK(0, "out of memory");
        return;
    }
    memcpy(dw2, dw1, (size_t)K * N * sizeof(float));
    for (size_t i = 0; i < (size_t)M * K; i++)
        dx1[i] = dx2[i] = NAN;
    const int was = omp_get_max_threads();
    omp_set_num_threads(threads);
    const st_gemm pw = st_gemm_of(CblasTrans, CblasNoTrans, K, N, M, 1.0f, x, K, dy, N, 1.0f, dw2, N),
                  px = st_gemm_of(CblasNoTrans, CblasTrans, M, K, N, 1.0f, dy, N, w, N, 0.0f, dx2, K);
    if (nested) {
#pragma omp parallel num_threads(2)
        {
#pragma omp single
            st_sgemm_two(which & 1 ? &pw : NULL, which & 2 ? &px : NULL);
        }
    } else {
        st_sgemm_two(which & 1 ? &pw : NULL, which & 2 ? &px : NULL);
    }
    omp_set_num_threads(was);
    if (which & 1) st_sgemm(CblasTrans, CblasNoTrans, K, N, M, 1.0f, x, K, dy, N, 1.0f, dw1, N);
    if (which & 2) st_sgemm(CblasNoTrans, CblasTrans, M, K, N, 1.0f, dy, N, w, N, 0.0f, dx1, K);
    const double ew = worst_of(dw1, dw2, (size_t)K * N);
    double ex = 0;
    if (which & 2) {
        ex = worst_of(dx1, dx2, (size_t)M * K);
    } else { /* left alone: still the poison */
        for (size_t i = 0; i < (size_t)M * K; i++)
            if (dx2[i] == dx2[i]) ex = INFINITY;
    }
    printf("two products M %4d K %4d N %4d, %d thread%s, %s%s: max rel diff %.2g (dW), %.2g (dx)\n", M, K, N,
           threads, threads == 1 ? "" : "s",
           which == 3   ? "both"
           : which == 1 ? "dW alone"
                        : "dx alone",
           nested ? ", nested" : "", ew, ex);
    CHECK(ew <= 1e-5 && ex <= 1e-5, "st_sgemm_two differs from st_sgemm: %.3g, %.3g (M %d K %d N %d)", ew, ex,
          M, K, N);
    free(x), free(dy), free(w), free(dw1), free(dw2), free(dx1), free(dx2);
}

#ifndef ST_ASAN
/* MiB resident after one product of 32768 x 64 x 512 (A transposed: a
 * weight gradient's shape), beyond what the calibration left; -1 on error. */
static double left_behind(int blocked) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        enum { M = 32768, N = 64, K = 512 };
        float *A = filled((size_t)M * K, 1), *B = filled((size_t)K * N, 2), *C = filled((size_t)M * N, 3);
        double gf;
        st_device_calibrate_cpu(&gf, NULL);
        const int64_t before = proc_status_kb("VmRSS:");
        if (blocked)
            st_sgemm(CblasTrans, CblasNoTrans, M, N, K, 1.0f, A, M, B, N, 0.0f, C, N);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, 1.0f, A, M, B, N, 0.0f, C, N);
        const double mib = (double)(proc_status_kb("VmRSS:") - before) / 1024.0;
        _exit(write(fds[1], &mib, sizeof mib) == (ssize_t)sizeof mib ? 0 : 1);
    }
    close(fds[1]);
    double mib = -1;
    if (read(fds[0], &mib, sizeof mib) != (ssize_t)sizeof mib) mib = -1;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? mib : -1;
}
#endif

int main(void) {
#ifdef ST_ASAN
    printf("resident workspace: not measured (the sanitizer's shadow memory is not the product's)\n");
#else
    const double one = left_behind(0), blocked = left_behind(1);
    printf("resident after a 32768-row product: %.2f MiB in one cblas_sgemm call, %.2f MiB through st_sgemm "
           "(OpenBLAS threads: %d)\n",
           one, blocked, openblas_get_num_threads());
    CHECK(blocked >= 0 && blocked <= 4.0, "st_sgemm left %.2f MiB resident", blocked);
#endif
    const int rows[] = {1, 1023, 1024, 1025, 5000};
    const CBLAS_TRANSPOSE tr[] = {CblasNoTrans, CblasTrans};
    for (int r = 0; r < 5; r++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                check_same(rows[r], 48, 300, tr[a], tr[b], rows[r] % 2 ? 1.0f : 0.0f);
    check_same(40000, 16, 9, CblasNoTrans, CblasTrans,
               0.0f); /* a small K: blocks of the budget, not 1024 rows */
    check_same(40000, 16, 9, CblasTrans, CblasNoTrans, 1.0f);
    const int shapes[][3] = {{2048, 256, 768}, {256, 784, 1024}, {37, 65, 33}, {1, 3, 1}};
    for (int k = 0; k < 4; k++)
        for (int t = 1; t <= 3; t++)
            check_two(shapes[k][0], shapes[k][1], shapes[k][2], t, 3, false);
    check_two(256, 784, 1024, 2, 1, false);
    check_two(256, 784, 1024, 2, 2, false);
    check_two(37, 65, 33, 2, 3, true);
    return st_test_finish("test_blas");
}
