/* The CUDA libraries loaded when first needed (src/cuda/libs.h), which
 * needs no GPU: each library loads, and calls through the jumps of
 * src/cuda/libs.c reach the library's own function with their arguments
 * and return its result (an error code's text, a version, a status for a
 * null argument), a pointer argument written through included. Where a
 * library is not installed, its load must fail naming it and saying how to
 * fix it, and again when asked again. tests/e2e/cuda_libs_missing.sh runs
 * the binary with the whole toolkit hidden. NVRTC, which only
 * cudnn-frontend calls, answers an error when it did not load. Skips, saying why, in builds
 * that link the libraries (the emulator's, CUDA_LAZY=0) or have no CUDA. */
#include "check.h"

#ifdef ST_CUDA_LAZY_LIBS
#include <stdbool.h>
#include <stdint.h>

#include "cuda/libs.h"

/* The functions called below, declared here with their ABI (enums are
 * ints, handles pointers) so that the test needs no library's header. */
const char *cudnnGetErrorString(int status);
size_t cudnnGetVersion(void);
const char *ncclGetErrorString(int result);
int ncclGetUniqueId(void *unique_id);
int cublasLtMatrixLayoutCreate(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *layout);
int nvrtcGetCUBINSize(void *prog, size_t *size);

/* lib loads, or its failure names it and the fix, twice alike, and
 * st_cuda_lib_ready says the same */
static bool loads(st_cuda_lib lib, const char *name) {
    char why[1024] = "";
    if (st_cuda_lib_load(lib) == ST_OK) {
        CHECK(st_cuda_lib_ready(lib, why, sizeof why) && !why[0], "%s: ready says %s", name, why);
        return true;
    }
    char first[1024];
    snprintf(first, sizeof first, "%s", st_last_error());
    CHECK(strstr(first, name) && strstr(first, "LD_LIBRARY_PATH"), "%s's failure: %s", name, first);
    CHECK(st_cuda_lib_load(lib) == ST_ERR_UNSUPPORTED && strcmp(first, st_last_error()) == 0,
          "%s asked again: %s", name, st_last_error());
    CHECK(!st_cuda_lib_ready(lib, why, sizeof why) && strcmp(why, first) == 0 && !st_last_error()[0],
          "%s: ready says '%s', the error left '%s'", name, why, st_last_error());
    printf("skipped: %s: %s\n", name, first);
    return false;
}
#endif

int main(void) {
#if !defined(ST_HAVE_CUDA)
    return st_test_skip("cuda libs", "this build has no CUDA");
#elif defined(ST_CUDA_EMU)
    return st_test_skip("cuda libs", "the CUDA emulator stands in for the CUDA libraries: nothing to load");
#elif !defined(ST_CUDA_LAZY_LIBS)
    return st_test_skip("cuda libs", "this build links the CUDA libraries at start (CUDA_LAZY=0)");
#else
    CHECK(st_cuda_lib_load((st_cuda_lib)ST_CUDA_LIB_N) == ST_ERR_INTERNAL, "an unknown library");
    if (loads(ST_CUDA_LIB_CUBLASLT, "cuBLASLt")) {
        /* a layout of 3 x 5 fp32 (CUDA_R_32F = 0), ld 3: written through the pointer */
        void *layout = NULL;
        const int rc = cublasLtMatrixLayoutCreate(&layout, 0, 3, 5, 3);
        CHECK(rc == 0 && layout, "cublasLtMatrixLayoutCreate: status %d, layout %p", rc, layout);
        if (layout) CHECK(cublasLtMatrixLayoutDestroy(layout) == 0, "cublasLtMatrixLayoutDestroy");
        const int bad = cublasLtMatrixLayoutCreate(NULL, 0, 3, 5, 3); /* CUBLAS_STATUS_INVALID_VALUE */
        CHECK(bad == 7, "a null layout pointer: status %d, not 7 (invalid value)", bad);
        printf("ok   cuBLASLt: a matrix layout made and freed through the jumps\n");
    }
    if (loads(ST_CUDA_LIB_NCCL, "NCCL")) {
        const char *s = ncclGetErrorString(0), *u = ncclGetErrorString(1);
        CHECK(s && strcmp(s, "no error") == 0, "ncclGetErrorString(ncclSuccess): %s", s ? s : "(null)");
        CHECK(u && strstr(u, "unhandled cuda error"), "ncclGetErrorString(ncclUnhandledCudaError): %s",
              u ? u : "(null)");
        CHECK(ncclGetUniqueId(NULL) == 4, "ncclGetUniqueId(NULL) is not ncclInvalidArgument (4)");
        printf("ok   NCCL: error strings and an argument check through the jumps\n");
    }
    if (loads(ST_CUDA_LIB_CUDNN, "cuDNN")) {
        const size_t v = cudnnGetVersion();
        CHECK(v >= 90000 && v < 100000, "cudnnGetVersion: %zu, not cuDNN 9", v);
        const char *s = cudnnGetErrorString(0), *b = cudnnGetErrorString(2000);
        CHECK(s && strcmp(s, "CUDNN_STATUS_SUCCESS") == 0, "cudnnGetErrorString(0): %s", s ? s : "(null)");
        CHECK(b && strcmp(b, "CUDNN_STATUS_BAD_PARAM") == 0, "cudnnGetErrorString(2000): %s", b ? b : "(null)");
        printf("ok   cuDNN %zu: its version and error strings through the jumps\n", v);
    }
    if (loads(ST_CUDA_LIB_NVRTC, "NVRTC")) {
        size_t n = 12345;
        const int rc = nvrtcGetCUBINSize(NULL, &n); /* NVRTC_ERROR_INVALID_PROGRAM */
        CHECK(rc == 4 && n == 12345, "nvrtcGetCUBINSize(NULL): status %d, not 4 (invalid program); size %zu",
              rc, n);
        printf("ok   NVRTC: an argument check through the jumps\n");
    } else { /* cudnn-frontend, its only caller, gets an error, not a stop */
        size_t n = 12345;
        const int rc = nvrtcGetCUBINSize(NULL, &n);
        CHECK(rc == 11 && n == 12345, "NVRTC missing: nvrtcGetCUBINSize %d, not 11 (internal error)", rc);
        printf("ok   NVRTC missing: its functions return NVRTC_ERROR_INTERNAL_ERROR\n");
    }
    return st_test_finish("cuda libs");
#endif
}
