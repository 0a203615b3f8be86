/* A cuBLASLt whose N-th matrix product faults on a real GPU, for
 * tests/e2e/gpu_fault.sh: a library of cuBLASLt's file name, found first
 * on LD_LIBRARY_PATH, that passes every call to the real cuBLASLt (the
 * file ST_FAULT_CUBLASLT names) and, in the ST_FAULT_MATMUL-th call of
 * cublasLtMatmul, gives the real one an A operand at device address 256,
 * which no allocation holds: cuBLASLt's kernel reads it, the GPU's memory
 * unit faults (the driver's Xid 31), and the process's CUDA context is
 * lost, as after any kernel's illegal access. Nothing in scaletrain knows
 * of it. With ST_FAULT_ONCE=FILE only the process that creates FILE
 * faults (a restarted job runs clean). At exit, a process that ran fewer
 * products than ST_FAULT_MATMUL says how many it ran:
 *   fault_cublaslt: ST_FAULT_MATMUL=N: no fault, M products ran
 * (the test counts a run's products that way before it picks where to
 * fault).
 *
 * Every function scaletrain calls (src/cuda/libs.h's list) is one jump
 * to the real library's (src/core/jump.h, as src/cuda/libs.c calls
 * cuBLASLt); cublasLtMatmul's jumps to `matmul` below, which passes on in
 * turn. No signature but that one is written here, and no CUDA header is
 * needed. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/jump.h"
#include "cuda/libs.h"

#if !ST_JUMP_SUPPORTED
#error "fault_cublaslt.c passes calls on through core/jump.h: x86-64 and arm64 only"
#endif

#define DEFINE(name)                                                                                         \
    __attribute__((used)) static void *to_##name __asm__("fault_to_" #name);                                 \
    ST_JUMP_ASM(name, fault_to_##name);
ST_CUBLASLT_FUNCS(DEFINE)

/* cublasLtMatmul's ABI: handles and descriptors are pointers, the status an int */
typedef int (*matmul_fn)(void *lt, void *desc, const void *alpha, const void *a, void *adesc, const void *b,
                         void *bdesc, const void *beta, const void *c, void *cdesc, void *d, void *ddesc,
                         const void *algo, void *workspace, size_t workspace_size, void *stream);
static matmul_fn real_matmul;
static long fault_at; /* 0: never */
static long products;
static int faulted, spared; /* spared: ST_FAULT_ONCE's file was there */

static void say_count(void) {
    if (fault_at > 0 && !faulted)
        fprintf(stderr, "fault_cublaslt: ST_FAULT_MATMUL=%ld: no fault%s, %ld products ran\n", fault_at,
                spared ? " (ST_FAULT_ONCE's file was there)" : "", products);
}

/* true in the one process that creates ST_FAULT_ONCE's file (or without it) */
static int first_process(void) {
    const char *once = getenv("ST_FAULT_ONCE");
    if (!once || !once[0]) return 1;
    int fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

static int matmul(void *lt, void *desc, const void *alpha, const void *a, void *adesc, const void *b,
                  void *bdesc, const void *beta, const void *c, void *cdesc, void *d, void *ddesc,
                  const void *algo, void *workspace, size_t workspace_size, void *stream) {
    long k = __atomic_add_fetch(&products, 1, __ATOMIC_RELAXED);
    if (k == fault_at && !first_process()) {
        spared = 1;
    } else if (k == fault_at) {
        faulted = 1;
        fprintf(stderr, "fault_cublaslt: product %ld reads device address 256 (ST_FAULT_MATMUL=%ld)\n", k,
                fault_at);
        a = (const void *)(uintptr_t)256;
    }
    return real_matmul(lt, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace,
                       workspace_size, stream);
}

__attribute__((constructor)) static void load(void) {
    const char *file = getenv("ST_FAULT_CUBLASLT");
    void *h = file && file[0] ? dlopen(file, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "fault_cublaslt: ST_FAULT_CUBLASLT must name the real cuBLASLt's file: %s\n",
                file && file[0] ? dlerror() : "not set");
        _exit(3);
    }
#define RESOLVE(name)                                                                                        \
    if (!(to_##name = dlsym(h, #name))) {                                                                    \
        fprintf(stderr, "fault_cublaslt: %s has no %s\n", file, #name);                                      \
        _exit(3);                                                                                            \
    }
    ST_CUBLASLT_FUNCS(RESOLVE)
    real_matmul = (matmul_fn)to_cublasLtMatmul;
    to_cublasLtMatmul = (void *)matmul;
    const char *n = getenv("ST_FAULT_MATMUL");
    fault_at = n ? atol(n) : 0;
    atexit(say_count);
}
