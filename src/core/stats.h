/* The median of a sample, one rule for every figure that quotes one
 * (train's step_ms_median, bench's throughput, report's summary, the
 * benchmarks): the middle value, or the mean of the two middle ones. */
#ifndef ST_CORE_STATS_H
#define ST_CORE_STATS_H

#include <stddef.h>
#include <stdlib.h>

static inline int st_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v (n values, none NaN) in place; 0 for n 0. */
static inline double st_median(double *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, st_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
