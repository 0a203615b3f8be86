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
 * Not the same bits: OpenBLAS threads a product by its size, and a block of
 * rows may be split among threads differently from the whole, which changes
 * the last bits of some sums (about a quarter of them here). */
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
        st_device_calibrate_cpu(&gf);
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
    return st_test_finish("test_blas");
}
