/* The CUDA libraries a CUDA build loads when it first needs them, so that
 * the binary starts on a machine without them (a CPU node without the
 * toolkit) and says what is missing instead of the loader refusing to
 * start it: cuBLASLt (the device's matrix products: loaded when a device
 * is counted or opened), NCCL (the communicator between GPUs), cuDNN and
 * NVRTC (model.attention_kernel=cudnn; NVRTC only as far as cudnn-frontend
 * reaches it). The CUDA runtime is linked statically (nvcc's default), and
 * the driver, libcuda.so.1, is the runtime's to find at run time.
 *
 * src/cuda/libs.c defines each library function the CUDA code calls as a
 * jump through a pointer that st_cuda_lib_load fills from dlopen and dlsym
 * (the same search as the linker's: LD_LIBRARY_PATH, the build's rpath,
 * the system's); a library that did not load leaves its functions pointing
 * at a handler that stops the process naming the function, which no path
 * reaches: each entry point loads its library first and turns a failure
 * into a status. NVRTC's, which only cudnn-frontend calls, return an error
 * code instead. In builds that link the libraries (the emulator,
 * architectures other than x86-64 and arm64, make CUDA_LAZY=0)
 * st_cuda_lib_load returns ST_OK. */
#ifndef ST_CUDA_LIBS_H
#define ST_CUDA_LIBS_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>
#include <stddef.h>

#include "scaletrain/status.h" /* C declarations (it has no guards of its own) */

/* Every function of each library that scaletrain calls (X(name) each):
 * libs.c defines them; tests/lib/fault_cublaslt.c, a cuBLASLt that passes
 * them on, too. */
#define ST_CUBLASLT_FUNCS(X)                                                                                 \
    X(cublasLtCreate)                                                                                        \
    X(cublasLtDestroy)                                                                                       \
    X(cublasLtGetVersion)                                                                                    \
    X(cublasLtMatmul)                                                                                        \
    X(cublasLtMatmulAlgoCheck)                                                                               \
    X(cublasLtMatmulAlgoGetHeuristic)                                                                        \
    X(cublasLtMatmulDescCreate)                                                                              \
    X(cublasLtMatmulDescDestroy)                                                                             \
    X(cublasLtMatmulDescSetAttribute)                                                                        \
    X(cublasLtMatmulPreferenceCreate)                                                                        \
    X(cublasLtMatmulPreferenceDestroy)                                                                       \
    X(cublasLtMatmulPreferenceSetAttribute)                                                                  \
    X(cublasLtMatrixLayoutCreate)                                                                            \
    X(cublasLtMatrixLayoutDestroy)                                                                           \
    X(cublasLtMatrixLayoutSetAttribute)
#define ST_NCCL_FUNCS(X)                                                                                     \
    X(ncclAllGather)                                                                                         \
    X(ncclAllReduce)                                                                                         \
    X(ncclBroadcast)                                                                                         \
    X(ncclCommAbort)                                                                                         \
    X(ncclCommDestroy)                                                                                       \
    X(ncclCommFinalize)                                                                                      \
    X(ncclCommGetAsyncError)                                                                                 \
    X(ncclCommInitRankConfig)                                                                                \
    X(ncclGetErrorString)                                                                                    \
    X(ncclGetLastError)                                                                                      \
    X(ncclGetUniqueId)                                                                                       \
    X(ncclGroupEnd)                                                                                          \
    X(ncclGroupStart)                                                                                        \
    X(ncclRecv)                                                                                              \
    X(ncclReduce)                                                                                            \
    X(ncclReduceScatter)                                                                                     \
    X(ncclSend)
#define ST_CUDNN_FUNCS(X)                                                                                    \
    X(cudnnBackendCreateDescriptor)                                                                          \
    X(cudnnBackendDestroyDescriptor)                                                                         \
    X(cudnnBackendExecute)                                                                                   \
    X(cudnnBackendFinalize)                                                                                  \
    X(cudnnBackendGetAttribute)                                                                              \
    X(cudnnBackendSetAttribute)                                                                              \
    X(cudnnCreate)                                                                                           \
    X(cudnnDestroy)                                                                                          \
    X(cudnnGetErrorString)                                                                                   \
    X(cudnnGetLastErrorString)                                                                               \
    X(cudnnGetStream)                                                                                        \
    X(cudnnGetVersion)                                                                                       \
    X(cudnnSetStream)
#define ST_NVRTC_FUNCS(X)                                                                                    \
    X(nvrtcCompileProgram)                                                                                   \
    X(nvrtcCreateProgram)                                                                                    \
    X(nvrtcDestroyProgram)                                                                                   \
    X(nvrtcGetCUBIN)                                                                                         \
    X(nvrtcGetCUBINSize)                                                                                     \
    X(nvrtcGetProgramLog)                                                                                    \
    X(nvrtcGetProgramLogSize)

typedef enum { ST_CUDA_LIB_CUBLASLT, ST_CUDA_LIB_NCCL, ST_CUDA_LIB_CUDNN, ST_CUDA_LIB_NVRTC, ST_CUDA_LIB_N } st_cuda_lib;

/* Loads the library (once; thread-safe) and resolves every function of it
 * that scaletrain calls; ST_ERR_UNSUPPORTED naming the file and the
 * loader's reason, every time it is asked, when it cannot. */
st_status st_cuda_lib_load(st_cuda_lib lib);
/* The same as a yes or no: false with the failure's message in why (the
 * thread's last error cleared), for callers that report rather than fail. */
bool st_cuda_lib_ready(st_cuda_lib lib, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
