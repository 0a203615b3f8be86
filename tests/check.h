/* A tiny test harness: CHECK records a failure and goes on; a test program
 * exits non-zero if anything failed, and 77 (with a reason) when it skips.
 * Comparisons are written so that NaN fails: if (!(err <= tol)). */
#ifndef ST_TESTS_CHECK_H
#define ST_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scaletrain/status.h"

static int st_test_failures;

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
            st_test_failures++;                                                                  \
        }                                                                                        \
    } while (0)

/* A library call that must succeed; prints the library's message if not. */
#define CHECK_OK(expr)                                                                           \
    do {                                                                                         \
        st_status check_s_ = (expr);                                                             \
        if (check_s_ != ST_OK) {                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr,       \
                    st_status_name(check_s_), st_last_error());                                  \
            st_test_failures++;                                                                  \
        }                                                                                        \
    } while (0)

/* A call that must fail with `code`, and whose message must contain `needle`. */
#define CHECK_FAILS(expr, code, needle)                                                          \
    do {                                                                                         \
        st_clear_error();                                                                        \
        st_status check_s_ = (expr);                                                             \
        if (check_s_ != (code) || !strstr(st_last_error(), (needle))) {                          \
            fprintf(stderr, "FAIL %s:%d: %s returned %s (\"%s\"), expected %s mentioning '%s'\n", \
                    __FILE__, __LINE__, #expr, st_status_name(check_s_), st_last_error(),        \
                    st_status_name(code), needle);                                               \
            st_test_failures++;                                                                  \
        }                                                                                        \
    } while (0)

#define CHECK_CLOSE(a, b, tol)                                                                   \
    do {                                                                                         \
        double ca_ = (a), cb_ = (b);                                                             \
        if (!(fabs(ca_ - cb_) <= (tol))) {                                                       \
            fprintf(stderr, "FAIL %s:%d: %s = %.9g, %s = %.9g, |diff| %.3g > %.3g\n", __FILE__,  \
                    __LINE__, #a, ca_, #b, cb_, fabs(ca_ - cb_), (double)(tol));                 \
            st_test_failures++;                                                                  \
        }                                                                                        \
    } while (0)

static inline int st_test_finish(const char *name) {
    if (st_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, st_test_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

#define ST_TEST_SKIP 77
static inline int st_test_skip(const char *name, const char *why) {
    printf("%s: skipped: %s\n", name, why);
    return ST_TEST_SKIP;
}

#endif
