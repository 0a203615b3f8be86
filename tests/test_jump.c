/* core/jump.h's jumps (how src/cuda/libs.c reaches the CUDA libraries it
 * loads when first needed) with every kind of argument the calling
 * conventions place differently: more integers and more floating-point
 * values than there are argument registers (the rest on the stack), a
 * structure returned through the caller's memory (x86-64: a hidden
 * pointer in rdi; arm64: x8) and one of floating-point members passed in
 * registers, a variadic call (x86-64: al counts the vector registers), and
 * functions of a shared library resolved by dlsym, as libs.c does. Each
 * result depends on every argument and its position, so a register the
 * jump disturbed shows. Runs natively and, on arm64, under qemu
 * (tests/e2e/arm64.sh). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/jump.h"

#if !ST_JUMP_SUPPORTED

int main(void) { return st_test_skip("jump", "core/jump.h has no jump for this architecture"); }

#else

typedef struct {
    int64_t v[5];
} five; /* returned through memory on both */
typedef struct {
    double x, y, z;
} vec3; /* in floating-point registers on both */

/* The targets, each weighting its arguments by position. */
__attribute__((noinline)) static int64_t ints10(int64_t a, int64_t b, int64_t c, int64_t d, int64_t e,
                                                int64_t f, int64_t g, int64_t h, int64_t i, int64_t j) {
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i + 10 * j;
}
__attribute__((noinline)) static double mixed(double a, int b, float c, double d, int64_t e, double f,
                                              double g, double h, double i, float j, double k, double l,
                                              int m, double n) {
    return a + 2 * b + 3 * (double)c + 4 * d + 5 * (double)e + 6 * f + 7 * g + 8 * h + 9 * i +
           10 * (double)j + 11 * k + 12 * l + 13 * m + 14 * n;
}
__attribute__((noinline)) static five make_five(int64_t seed, vec3 p) {
    five r;
    for (int k = 0; k < 5; k++)
        r.v[k] = seed * (k + 1) + (int64_t)(p.x + 10 * p.y + 100 * p.z);
    return r;
}
__attribute__((noinline)) static double vsum(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int k = 0; k < n; k++)
        s += (k + 1) * va_arg(ap, double);
    va_end(ap);
    return s;
}
__attribute__((noinline)) static int64_t other(int64_t a) { return -a; }

/* The pointers and the jumps (st_test_jump_*: global functions). */
#define POINTER(name, to)                                                                                    \
    __attribute__((used)) static void *ptr_##name __asm__("st_test_ptr_" #name) = (void *)(to);
POINTER(ints10, ints10)
POINTER(mixed, mixed)
POINTER(make_five, make_five)
POINTER(vsum, vsum)
POINTER(ldexp, NULL)
POINTER(frexp, NULL)
POINTER(snprintf, NULL)
ST_JUMP_ASM(st_test_jump_ints10, st_test_ptr_ints10);
ST_JUMP_ASM(st_test_jump_mixed, st_test_ptr_mixed);
ST_JUMP_ASM(st_test_jump_make_five, st_test_ptr_make_five);
ST_JUMP_ASM(st_test_jump_vsum, st_test_ptr_vsum);
ST_JUMP_ASM(st_test_jump_ldexp, st_test_ptr_ldexp);
ST_JUMP_ASM(st_test_jump_frexp, st_test_ptr_frexp);
ST_JUMP_ASM(st_test_jump_snprintf, st_test_ptr_snprintf);

int64_t st_test_jump_ints10(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t);
double st_test_jump_mixed(double, int, float, double, int64_t, double, double, double, double, float, double,
                          double, int, double);
five st_test_jump_make_five(int64_t, vec3);
double st_test_jump_vsum(int, ...);
double st_test_jump_ldexp(double, int);
double st_test_jump_frexp(double, int *);
int st_test_jump_snprintf(char *, size_t, const char *, ...);

/* Called from several threads at once: the jump keeps nothing of its own. */
static void *thread_calls(void *arg) {
    const int64_t t = (int64_t)(intptr_t)arg;
    int64_t bad = 0;
    for (int64_t k = 0; k < 20000; k++) {
        const int64_t a = t * 1000003 + k;
        if (st_test_jump_ints10(a, 1, 2, 3, 4, 5, 6, 7, 8, 9) != ints10(a, 1, 2, 3, 4, 5, 6, 7, 8, 9)) bad++;
        if (st_test_jump_vsum(3, (double)a, 0.5, -2.0) != vsum(3, (double)a, 0.5, -2.0)) bad++;
    }
    return (void *)(intptr_t)bad;
}

int main(void) {
    /* volatile: the compiler cannot fold the direct calls it compares with */
    volatile int64_t s = 1000;
    const int64_t got = st_test_jump_ints10(s, s + 1, s + 2, s + 3, s + 4, s + 5, s + 6, s + 7, s + 8, -s);
    const int64_t want = ints10(s, s + 1, s + 2, s + 3, s + 4, s + 5, s + 6, s + 7, s + 8, -s);
    CHECK(got == want && want == 35240, "ten integer arguments: %lld through the jump, %lld directly",
          (long long)got, (long long)want);

    volatile double x = 0.25;
    const double mg =
        st_test_jump_mixed(x, 3, 1.5f, x * 3, 7, x + 1, x + 2, x + 3, x + 4, 2.5f, x + 5, x + 6, -4, x + 7);
    const double mw = mixed(x, 3, 1.5f, x * 3, 7, x + 1, x + 2, x + 3, x + 4, 2.5f, x + 5, x + 6, -4, x + 7);
    CHECK(mg == mw && mw > 0,
          "fourteen mixed arguments (12 floating-point): %.17g through the jump, %.17g directly", mg, mw);

    const vec3 p = {1.0, 2.0, 3.0};
    const five fg = st_test_jump_make_five(s, p), fw = make_five(s, p);
    CHECK(memcmp(&fg, &fw, sizeof fg) == 0 && fw.v[4] == 5000 + 321,
          "a structure returned through memory: %lld .. %lld through the jump, %lld .. %lld directly",
          (long long)fg.v[0], (long long)fg.v[4], (long long)fw.v[0], (long long)fw.v[4]);

    const double vg = st_test_jump_vsum(9, x, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0 + x);
    const double vw = vsum(9, x, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0 + x);
    CHECK(vg == vw && vw > 200, "a variadic call with nine doubles: %.17g through the jump, %.17g directly",
          vg, vw);

    /* The pointer is read at each call: another target takes effect at once. */
    __atomic_store_n(&ptr_ints10, (void *)other, __ATOMIC_RELEASE);
    const int64_t og = st_test_jump_ints10(s, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    CHECK(og == -1000, "the pointer changed: %lld, not -1000 (the new target's)", (long long)og);
    __atomic_store_n(&ptr_ints10, (void *)ints10, __ATOMIC_RELEASE);

    /* A shared library's functions by dlsym, as src/cuda/libs.c fills its pointers. */
    void *libm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL),
         *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_LOCAL);
    CHECK(libm && libc, "dlopen of libm.so.6 and libc.so.6: %s", dlerror());
    if (libm && libc) {
        ptr_ldexp = dlsym(libm, "ldexp");
        ptr_frexp = dlsym(libm, "frexp");
        ptr_snprintf = dlsym(libc, "snprintf");
        CHECK(ptr_ldexp && ptr_frexp && ptr_snprintf, "dlsym of ldexp, frexp, snprintf");
    }
    if (ptr_ldexp && ptr_frexp && ptr_snprintf) {
        const double l = st_test_jump_ldexp(x * 3, 10);
        CHECK(l == 768.0, "ldexp(0.75, 10) through the jump: %.17g, not 768", l);
        int e = 0;
        const double f = st_test_jump_frexp(768.0, &e);
        CHECK(f == 0.75 && e == 10, "frexp(768) through the jump: %.17g and %d, not 0.75 and 10", f, e);
        char buf[128];
        const int n =
            st_test_jump_snprintf(buf, sizeof buf, "%d %.3f %s %lld %.1f %.1f %.1f %.1f %.1f %.1f %.1f", 42,
                                  x, "str", (long long)s, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0 + x);
        CHECK(n > 0 && strcmp(buf, "42 0.250 str 1000 1.0 2.0 3.0 4.0 5.0 6.0 7.2") == 0,
              "snprintf through the jump wrote \"%s\" (%d)", buf, n);
    }
    if (libm) dlclose(libm);
    if (libc) dlclose(libc);
    ptr_ldexp = ptr_frexp = ptr_snprintf = NULL;

    pthread_t th[4];
    for (intptr_t t = 0; t < 4; t++)
        CHECK(pthread_create(&th[t], NULL, thread_calls, (void *)t) == 0, "thread");
    for (int t = 0; t < 4; t++) {
        void *bad = NULL;
        pthread_join(th[t], &bad);
        CHECK(bad == NULL, "thread %d: %lld calls through the jump differed", t, (long long)(intptr_t)bad);
    }
    printf("ok   jumps: integer, floating-point, stack, structure, variadic and dlsym'd calls, 4 threads\n");
    return st_test_finish("jump");
}

#endif
