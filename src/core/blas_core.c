/* Which of OpenBLAS's kernels run (blas.h: st_blas_core_check). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "core/blas.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* The instruction set a core name of OpenBLAS's stands for: 0 SSE, 1 AVX,
 * 2 AVX2 and FMA, 3 AVX-512, 4 AVX-512 with BF16; -1 a name not listed
 * here (left alone). */
static int core_level(const char *name) {
    static const struct {
        const char *name;
        int level;
    } cores[] = {
        {"prescott", 0},    {"core2", 0},        {"penryn", 0},     {"dunnington", 0},  {"nehalem", 0},
        {"atom", 0},        {"katmai", 0},       {"coppermine", 0}, {"northwood", 0},   {"banias", 0},
        {"opteron", 0},     {"opteron_sse3", 0}, {"barcelona", 0},  {"bobcat", 0},      {"nano", 0},
        {"sandybridge", 1}, {"bulldozer", 1},    {"piledriver", 1}, {"steamroller", 1}, {"excavator", 1},
        {"haswell", 2},     {"zen", 2},          {"skylakex", 3},   {"cooperlake", 4},  {"sapphirerapids", 4},
    };
    for (size_t i = 0; name && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(name, cores[i].name) == 0) return cores[i].level;
    return -1;
}

/* The best core this CPU (and the operating system's saved state) runs. */
static const char *best_core(void) {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    const bool bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return bf16 ? "Cooperlake" : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

static void cpu_model(int *family, int *model) {
    unsigned a = 0, b, c, d;
    __get_cpuid(1, &a, &b, &c, &d);
    *family = (int)((a >> 8) & 0xf);
    *model = (int)((a >> 4) & 0xf);
    if (*family == 6 || *family == 15) *model |= (int)((a >> 12) & 0xf0);
    if (*family == 15) *family += (int)((a >> 20) & 0xff);
}
#endif

void st_blas_core_check(char **argv) {
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or this check's own */
    const char *have = openblas_get_corename();
    const int level = core_level(have);
    const char *want = best_core();
    if (level < 0 || level > 1 || !want || core_level(want) <= level) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("ST_BLAS_CORE_WAS", have, 1);
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* (the exec failed: the kernels OpenBLAS chose) */
    unsetenv("ST_BLAS_CORE_WAS");
#else
    (void)argv;
#endif
}

const char *st_blas_core_note(char *buf, size_t n) {
    const char *was = getenv("ST_BLAS_CORE_WAS");
    if (!was || !getenv("OPENBLAS_CORETYPE")) return NULL;
    int family = 0, model = 0;
#if defined(__x86_64__)
    cpu_model(&family, &model);
#endif
    snprintf(buf, n,
             "OpenBLAS took this CPU (family %d, model %d) for a %s; its %s kernels run instead "
             "(OPENBLAS_CORETYPE chooses)",
             family, model, was, openblas_get_corename());
    return buf;
}
