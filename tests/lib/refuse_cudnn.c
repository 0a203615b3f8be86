/* A cuDNN that loads but will not start, for tests/e2e/gpu_cudnn_refused.sh:
 * a library of cuDNN's file name, found first on LD_LIBRARY_PATH, that
 * passes every call to the real cuDNN (the file ST_REFUSE_CUDNN names) but
 * cudnnCreate, which returns CUDNN_STATUS_NOT_INITIALIZED, as cuDNN does on
 * a driver or device it cannot use. So the session finds cuDNN (its
 * library and version) and takes it for `auto`, and the attention layer
 * meets the refusal when it asks for a handle. Every function scaletrain
 * calls (src/cuda/libs.h's list) is one jump to the real library's
 * (src/core/jump.h), as in fault_cublaslt.c; no CUDA header is needed. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/jump.h"
#include "cuda/libs.h"

#if !ST_JUMP_SUPPORTED
#error "refuse_cudnn.c passes calls on through core/jump.h: x86-64 and arm64 only"
#endif

#define DEFINE(name)                                                                                         \
    __attribute__((used)) static void *to_##name __asm__("refuse_to_" #name);                                \
    ST_JUMP_ASM(name, refuse_to_##name);
ST_CUDNN_FUNCS(DEFINE)

enum { CUDNN_STATUS_NOT_INITIALIZED_9 = 1001 }; /* cuDNN 9's value */
static long refused;

static int refuse_create(void **handle) {
    *handle = NULL;
    refused++;
    return CUDNN_STATUS_NOT_INITIALIZED_9;
}

static void say_count(void) { fprintf(stderr, "refuse_cudnn: cudnnCreate refused %ld times\n", refused); }

__attribute__((constructor)) static void load(void) {
    const char *file = getenv("ST_REFUSE_CUDNN");
    void *h = file && file[0] ? dlopen(file, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "refuse_cudnn: ST_REFUSE_CUDNN must name the real cuDNN's file: %s\n",
                file && file[0] ? dlerror() : "not set");
        _exit(3);
    }
#define RESOLVE(name)                                                                                        \
    if (!(to_##name = dlsym(h, #name))) {                                                                    \
        fprintf(stderr, "refuse_cudnn: %s has no %s\n", file, #name);                                        \
        _exit(3);                                                                                            \
    }
    ST_CUDNN_FUNCS(RESOLVE)
    to_cudnnCreate = (void *)refuse_create;
    atexit(say_count);
}
