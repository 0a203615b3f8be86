/* The NCCL communicator where it was not built: a build without CUDA, or
 * with CUDA but without NCCL (Makefile: NCCL=0 when nccl.h is not found).
 * The real one is src/cuda/comm_nccl.cu. */
#if !(defined(ST_HAVE_CUDA) && defined(ST_HAVE_NCCL))
#include <stdio.h>

#include "comm/comm.h"

bool st_comm_nccl_built(void) { return false; }

bool st_comm_nccl_usable(char *why, size_t n) {
#ifdef ST_HAVE_CUDA
    snprintf(why, n, "this build left it out (nccl.h was not found under NCCL_HOME; see docs/cuda.md)");
#else
    snprintf(why, n, "this build has no CUDA");
#endif
    return false;
}

st_status st_comm_nccl_init(st_comm *boot, st_device *d, const st_comm_config *cfg, st_comm **out) {
    (void)boot;
    (void)d;
    (void)cfg;
    if (out) *out = NULL;
#ifdef ST_HAVE_CUDA
    return st_fail(ST_ERR_UNSUPPORTED,
                   "this scaletrain was built with CUDA but without NCCL (nccl.h was not found under NCCL_HOME), "
                   "so GPUs cannot exchange gradients; rebuild with make NCCL_HOME=<folder with include/nccl.h "
                   "and lib/libnccl.so*>, or use train.device: cpu");
#else
    return st_fail(ST_ERR_UNSUPPORTED, "this scaletrain was built without CUDA, so there is no NCCL communicator; "
                                       "rebuild with the CUDA toolkit installed (make CUDA=1)");
#endif
}
#else
/* (an ISO C translation unit must declare something) */
typedef int st_comm_nccl_c_unused;
#endif
