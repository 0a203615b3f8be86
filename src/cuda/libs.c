/* The CUDA libraries loaded when first needed (libs.h). Each function the
 * CUDA code calls from cuBLASLt, NCCL, cuDNN or NVRTC is defined here, by
 * its own name, as one indirect jump (core/jump.h: x86-64 and arm64):
 * every argument register and the stack reach the library's function
 * untouched, so one definition serves any signature. The pointers start
 * at a handler that stops the process naming the function (a call before
 * its library loaded is a bug in scaletrain, never a user's error);
 * st_cuda_lib_load fills them from dlsym. A function added to the CUDA
 * code and not listed in libs.h is an undefined symbol at link time, so the
 * list cannot fall behind the code.
 *
 * Compiled in every build; the jumps only where the Makefile sets
 * ST_CUDA_LAZY_LIBS (CUDA on x86-64 and arm64, not the emulator), which
 * also names each library's file (its soname, read off the toolkit's at
 * build time). */
#include "libs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

bool st_cuda_lib_ready(st_cuda_lib lib, char *why, size_t n) {
    if (st_cuda_lib_load(lib) == ST_OK) return true;
    if (why && n) snprintf(why, n, "%s", st_last_error());
    st_clear_error();
    return false;
}

#ifndef ST_CUDA_LAZY_LIBS

st_status st_cuda_lib_load(st_cuda_lib lib) {
    (void)lib;
    return ST_OK;
}

#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/jump.h"

#if !ST_JUMP_SUPPORTED
#error "ST_CUDA_LAZY_LIBS has jumps for x86-64 and arm64 only (core/jump.h): build with make CUDA_LAZY=0"
#endif

/* Stops the process: `name` was called before its library loaded. */
static void unloaded(const char *name) {
    fprintf(stderr,
            "scaletrain: internal error: %s called before its library was loaded (src/cuda/libs.h); "
            "please report it\n",
            name);
    abort();
}

/* Per function: the handler, the pointer (named for the jump), the jump. */
#define ST_LAZY_DEFINE(name)                                                                                 \
    static void unloaded_##name(void) { unloaded(#name); }                                                   \
    __attribute__((used)) static void *st_lazy_##name __asm__("st_lazy_" #name) = (void *)unloaded_##name;   \
    ST_JUMP_ASM(name, st_lazy_##name);
ST_CUBLASLT_FUNCS(ST_LAZY_DEFINE)
ST_NCCL_FUNCS(ST_LAZY_DEFINE)
ST_CUDNN_FUNCS(ST_LAZY_DEFINE)
ST_NVRTC_FUNCS(ST_LAZY_DEFINE)

typedef struct {
    const char *name;
    void **ptr;
} lazy_func;

/* What NVRTC's functions do where it did not load: return
 * NVRTC_ERROR_INTERNAL_ERROR (11), whatever their arguments, so that
 * cudnn-frontend, the only caller (some engines only), gets an error it
 * reports, not a stop. */
static int nvrtc_unavailable(void) { return 11; }

#define ST_LAZY_ENTRY(name) {#name, &st_lazy_##name},
static const lazy_func cublaslt_funcs[] = {ST_CUBLASLT_FUNCS(ST_LAZY_ENTRY)};
static const lazy_func nccl_funcs[] = {ST_NCCL_FUNCS(ST_LAZY_ENTRY)};
static const lazy_func cudnn_funcs[] = {ST_CUDNN_FUNCS(ST_LAZY_ENTRY)};
static const lazy_func nvrtc_funcs[] = {ST_NVRTC_FUNCS(ST_LAZY_ENTRY)};

#define FUNCS(a) a, sizeof a / sizeof a[0]

static struct lazy_lib {
    const char *file, *what;
    const lazy_func *funcs;
    size_t n;
    int (*missing)(void); /* the functions after a failed load; NULL: left at the handler */
    pthread_once_t once;
    bool ok;
    char why[400];
} libs[ST_CUDA_LIB_N] = {
    [ST_CUDA_LIB_CUBLASLT] = {ST_CUBLASLT_SO, "cuBLASLt", FUNCS(cublaslt_funcs), NULL, PTHREAD_ONCE_INIT,
                              false, ""},
    [ST_CUDA_LIB_NCCL] = {ST_NCCL_SO, "NCCL", FUNCS(nccl_funcs), NULL, PTHREAD_ONCE_INIT, false, ""},
    [ST_CUDA_LIB_CUDNN] = {ST_CUDNN_SO, "cuDNN", FUNCS(cudnn_funcs), NULL, PTHREAD_ONCE_INIT, false, ""},
    [ST_CUDA_LIB_NVRTC] = {ST_NVRTC_SO, "NVRTC", FUNCS(nvrtc_funcs), nvrtc_unavailable, PTHREAD_ONCE_INIT,
                           false, ""},
};

static bool try_load(struct lazy_lib *l) {
    if (!l->file[0]) { /* (dlopen("") would return this program) */
        snprintf(l->why, sizeof l->why, "the build found no such library in the toolkit");
        return false;
    }
    dlerror();
    /* by its soname, as the linker would have recorded it: LD_LIBRARY_PATH,
     * the executable's rpath (the build's library folders), the system's */
    void *h = dlopen(l->file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(l->why, sizeof l->why, "%s", e ? e : "not found");
        return false;
    }
    void *at[32];
    if (l->n > sizeof at / sizeof at[0]) {
        snprintf(l->why, sizeof l->why, "scaletrain lists more functions of it than it can resolve");
        dlclose(h);
        return false;
    }
    for (size_t i = 0; i < l->n; i++) {
        dlerror();
        at[i] = dlsym(h, l->funcs[i].name);
        if (!at[i]) { /* another major version than the build's: keep none of it */
            snprintf(l->why, sizeof l->why, "%s has no %s (a version other than this build's?)", l->file,
                     l->funcs[i].name);
            dlclose(h);
            return false;
        }
    }
    for (size_t i = 0; i < l->n; i++)
        __atomic_store_n(l->funcs[i].ptr, at[i], __ATOMIC_RELEASE);
    return l->ok = true;
}

static void load(struct lazy_lib *l) {
    if (try_load(l) || !l->missing) return;
    for (size_t i = 0; i < l->n; i++)
        __atomic_store_n(l->funcs[i].ptr, (void *)l->missing, __ATOMIC_RELEASE);
}

#define ONCE(k)                                                                                                    \
    static void once_##k(void) { load(&libs[k]); }
ONCE(ST_CUDA_LIB_CUBLASLT)
ONCE(ST_CUDA_LIB_NCCL)
ONCE(ST_CUDA_LIB_CUDNN)
ONCE(ST_CUDA_LIB_NVRTC)
static void (*const onces[ST_CUDA_LIB_N])(void) = {once_ST_CUDA_LIB_CUBLASLT, once_ST_CUDA_LIB_NCCL,
                                                   once_ST_CUDA_LIB_CUDNN, once_ST_CUDA_LIB_NVRTC};

st_status st_cuda_lib_load(st_cuda_lib lib) {
    if ((unsigned)lib >= ST_CUDA_LIB_N) return st_fail(ST_ERR_INTERNAL, "st_cuda_lib_load: library %d", (int)lib);
    struct lazy_lib *l = &libs[lib];
    pthread_once(&l->once, onces[lib]);
    if (l->ok) return ST_OK;
    return st_fail(ST_ERR_UNSUPPORTED,
                   "%s could not be loaded (%s): install it, or put its folder on LD_LIBRARY_PATH", l->what,
                   l->why);
}

#endif
