/* A matrix product that overflows, for tests/e2e/weights_overflow.sh,
 * loaded with LD_PRELOAD: cblas_sgemm is OpenBLAS's, except that the
 * ST_OVERFLOW_SGEMM_AT-th call (from 1) leaves +inf in the first element of
 * its output, as a product of values near float's range would. Whether the
 * loss or only the weights after the update see it depends on which of a
 * step's products it is. With ST_OVERFLOW_SGEMM_VALUE set, that element is
 * its value instead (a finite one whose square overflows: 1e22). At exit, a process that ran no more products
 * than ST_OVERFLOW_SGEMM_AT says how many it ran: overflow_sgemm: ST_OVERFLOW_SGEMM_AT=N: no overflow, M
 * products ran (the test counts a run's products that way). With ST_OVERFLOW_SGEMM_RANK set, only the process
 * of that MPI rank (OMPI_COMM_WORLD_RANK) overflows. Built by the test (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float *, const blasint,
                         const float *, const blasint, const float, float *, const blasint);
static long calls, at;
static float value = INFINITY;

static void say_count(void) {
    if (calls > 0 && calls < at) /* (a process that ran none, as mpirun, says nothing) */
        fprintf(stderr, "overflow_sgemm: ST_OVERFLOW_SGEMM_AT=%ld: no overflow, %ld products ran\n", at, calls);
}

__attribute__((constructor)) static void init(void) {
    const char *e = getenv("ST_OVERFLOW_SGEMM_AT");
    at = e ? atol(e) : 0;
    const char *only = getenv("ST_OVERFLOW_SGEMM_RANK"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (only && *only && (!rank || atoi(rank) != atoi(only))) at = 0;
    const char *v = getenv("ST_OVERFLOW_SGEMM_VALUE");
    if (v && *v) value = strtof(v, NULL);
    if (at > 0) atexit(say_count);
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                 const blasint m, const blasint n, const blasint k, const float alpha, const float *a,
                 const blasint lda, const float *b, const blasint ldb, const float beta, float *c,
                 const blasint ldc) {
    static sgemm_fn real;
    if (!real) real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (++calls == at && m > 0 && n > 0) c[0] = value;
}
