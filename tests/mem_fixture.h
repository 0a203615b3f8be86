/* The data files of the memory tests (test_hw_memory.c on the CPU,
 * test_cuda_memory.c on a device): raw IDX images and labels, a token file;
 * and a line of /proc/self/status (test_hw_memory.c, test_blas.c). */
#ifndef ST_TESTS_MEM_FIXTURE_H
#define ST_TESTS_MEM_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokens.h"

/* ST_ASAN: an address-sanitizer build, whose shadow memory and redzones
 * would count as the run's (the resident-set measurements skip there). */
#if defined(__SANITIZE_ADDRESS__)
#define ST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ST_ASAN 1
#endif
#endif

/* The value of /proc/self/status's line `key` (e.g. "VmRSS:"), in kB; -1 if absent. */
static inline int64_t proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long v = -1;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) v = atoll(line + n + 1);
    if (f) fclose(f);
    return v;
}

/* The run `base` (n settings) with `vocab`, its output layer plain (fused
 * head off) and fused (on): n + 2 settings each, the count returned. */
static inline int fused_pair(const char *const *base, int n, const char *vocab, const char **plain,
                             const char **fused) {
    for (int i = 0; i < n; i++)
        plain[i] = fused[i] = base[i];
    plain[n] = fused[n] = vocab;
    plain[n + 1] = "model.fused_head=off";
    fused[n + 1] = "model.fused_head=on";
    return n + 2;
}

/* What the fused output layer saves: plain[] and fused[] are two runs'
 * {measured, predicted} bytes (0 when not measured). The saving measured
 * must exceed min_frac of the plain run's and the predicted one be within
 * 10% of it. Returns the number of failed checks. */
static inline int check_fused_saving(const char *what, const double plain[2], const double fused[2],
                                     double min_frac) {
    if (!(plain[0] > 0 && fused[0] > 0)) return 0;
    const double ms = plain[0] - fused[0], ps = plain[1] - fused[1];
    printf("%s: the fused head saves %.1f MiB measured, %.1f MiB predicted\n", what, ms / 1048576,
           ps / 1048576);
    if (ms > min_frac * plain[0] && fabs(ps - ms) <= 0.1 * ms) return 0;
    fprintf(stderr, "FAIL %s: the fused head saves %.1f MiB, predicted %.1f MiB\n", what, ms / 1048576,
            ps / 1048576);
    return 1;
}

static inline void be32(FILE *f, uint32_t v) {
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    fwrite(b, 1, 4, f);
}

/* n raw IDX images 28x28 and labels 0..9 */
static inline int write_idx(const char *dir, int n) {
    char p[512];
    snprintf(p, sizeof p, "%s/img.idx", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    be32(f, 0x803);
    be32(f, (uint32_t)n);
    be32(f, 28);
    be32(f, 28);
    for (int i = 0; i < n * 784; i++)
        fputc((i * 7919) % 251, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/lab.idx", dir);
    f = fopen(p, "wb");
    if (!f) return -1;
    be32(f, 0x801);
    be32(f, (uint32_t)n);
    for (int i = 0; i < n; i++)
        fputc(i % 10, f);
    fclose(f);
    return 0;
}

static inline int write_tokens(const char *dir, int n) {
    char p[512];
    snprintf(p, sizeof p, "%s/tok.bin", dir);
    uint32_t *t = malloc((size_t)n * sizeof *t);
    if (!t) return -1;
    for (int i = 0; i < n; i++)
        t[i] = (uint32_t)((i * 31 + i / 7) % 256);
    st_status s = st_tokens_write(p, t, n, 256);
    free(t);
    return s == ST_OK ? 0 : -1;
}

#endif
