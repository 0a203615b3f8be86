/* What the CUDA emulator's NCCL (nccl.cpp: communicators, groups, running
 * operations; nccl_ops.cpp: the collectives and send/receive) shares. */
#ifndef ST_CUDAEMU_NCCL_EMU_H
#define ST_CUDAEMU_NCCL_EMU_H

#include "internal.h" /* first: emu.h defines what the CUDA headers then leave alone */

#include <nccl.h>

#include <map>
#include <string>
#include <vector>

#ifndef ST_NO_MPI
#define OMPI_SKIP_MPICXX 1 /* MPI's C API only (its C++ bindings do not build with -Werror) */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#else /* built without MPI: one-rank communicators only */
typedef int MPI_Comm;
typedef int MPI_Request;
#define MPI_COMM_NULL 0
#endif

struct ncclComm {
    int rank = 0, nranks = 1, device = 0;
    bool blocking = true;
    MPI_Comm mpi = MPI_COMM_NULL;        /* its own MPI communicator; NULL for one rank */
    ncclResult_t error = ncclSuccess;    /* an asynchronous failure (sticky) */
    int in_progress = 0;                 /* ncclCommGetAsyncError says ncclInProgress this many more times */
    bool aborted = false, freed = false; /* freed: the handle is gone; deleted once nothing is queued */
    std::map<cudaStream_t, int> queued;  /* stream: this communicator's ends not yet run there */
    std::string last;                    /* ncclGetLastError */
};

/* One operation's transfer: host staging, its MPI requests, and what writes
 * the result into device memory once they are complete. */
struct nccl_xfer {
    std::vector<char> in, out;
    std::vector<MPI_Request> reqs;
    std::function<void(nccl_xfer &)> done;
};

/* An operation as called: start() takes its inputs and posts its MPI
 * requests (device memory readable); p2p: 1 send, 2 receive (to be paired
 * without MPI on one rank), else 0. */
struct nccl_op {
    ncclComm *c;
    cudaStream_t stream;
    const char *name;
    int p2p;
    size_t bytes;
    std::function<ncclResult_t(nccl_xfer &)> start;
};

/* Record the message for ncclGetLastError (the communicator's, and this
 * thread's); returns rc. */
ncclResult_t nccl_emu_fail(ncclComm *c, ncclResult_t rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The communicator can take a call (live, no failure, not in progress). */
ncclResult_t nccl_emu_check_comm(ncclComm *c, const char *call);
/* The call into the open group, or started now (nccl.cpp says when it runs). */
ncclResult_t nccl_emu_issue(nccl_op o);

#endif
