/* The CUDA emulator's NCCL collectives and send/receive (nccl.cpp says when
 * they run): each checks its arguments as NCCL does, then, when started,
 * copies its input out of device memory (widened to float32 for the 16-bit
 * floats when it reduces), posts the nonblocking MPI operation on the
 * communicator's own MPI communicator (none for one rank) and leaves a
 * `done` that writes the result into device memory when its stream gets
 * there. */
#include "nccl_emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include <string>

#define fail nccl_emu_fail

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}
static bool is_16(ncclDataType_t t) { return t == ncclFloat16 || t == ncclBfloat16; }
static bool is_float(ncclDataType_t t) { return is_16(t) || t == ncclFloat32 || t == ncclFloat64; }
static size_t work_size(ncclDataType_t t) { return is_16(t) ? 4 : type_size(t); } /* what reductions run in */

#ifndef ST_NO_MPI
static MPI_Datatype work_mpi(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_FLOAT; /* float32, and the 16-bit floats widened */
    }
}
static MPI_Op mpi_op(ncclRedOp_t op) {
    switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM; /* and ncclAvg, scaled around it */
    }
}
static ncclResult_t posted(ncclComm *c, int rc, const char *call) {
    if (rc == MPI_SUCCESS) return ncclSuccess;
    char w[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, w, &n) != MPI_SUCCESS) snprintf(w, sizeof w, "MPI error %d", rc);
    return fail(c, ncclSystemError, "%s (emulated): %s", call, w);
}
#endif

/* n elements of device memory in the work type; ncclAvg of floats: times 1/nranks (NCCL's PreMulSum). */
static std::vector<char> widen(const void *src, size_t n, ncclDataType_t t, ncclRedOp_t op, int nranks) {
    std::vector<char> w(n * work_size(t));
    if (is_16(t)) {
        float *o = (float *)w.data();
        for (size_t i = 0; i < n; i++)
            o[i] = t == ncclFloat16 ? __half2float(((const __half *)src)[i])
                                    : __bfloat162float(((const __nv_bfloat16 *)src)[i]);
    } else if (n) {
        memcpy(w.data(), src, w.size());
    }
    if (op == ncclAvg && t == ncclFloat64) {
        for (size_t i = 0; i < n; i++) ((double *)w.data())[i] *= 1.0 / nranks;
    } else if (op == ncclAvg && is_float(t)) {
        const float s = 1.0f / (float)nranks;
        for (size_t i = 0; i < n; i++) ((float *)w.data())[i] *= s;
    }
    return w;
}

template <class T> static void divide(char *p, size_t n, int by) {
    for (size_t i = 0; i < n; i++) ((T *)p)[i] = (T)(((T *)p)[i] / (T)by);
}

/* n elements of the work type into device memory; ncclAvg of integers: the sum / nranks. */
static void narrow(void *dst, std::vector<char> &w, size_t n, ncclDataType_t t, ncclRedOp_t op, int nranks) {
    char *p = w.data();
    if (op == ncclAvg && !is_float(t)) switch (t) {
        case ncclInt8: divide<int8_t>(p, n, nranks); break;
        case ncclUint8: divide<uint8_t>(p, n, nranks); break;
        case ncclInt32: divide<int32_t>(p, n, nranks); break;
        case ncclUint32: divide<uint32_t>(p, n, nranks); break;
        case ncclInt64: divide<int64_t>(p, n, nranks); break;
        default: divide<uint64_t>(p, n, nranks); break;
        }
    if (t == ncclFloat16) {
        for (size_t i = 0; i < n; i++) ((__half *)dst)[i] = __float2half_rn(((const float *)p)[i]);
    } else if (t == ncclBfloat16) {
        for (size_t i = 0; i < n; i++) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(((const float *)p)[i]);
    } else if (n) {
        memcpy(dst, p, n * type_size(t));
    }
}

/* --- argument checks, as NCCL's ---------------------------------------------------- */
static ncclResult_t check_type(ncclComm *c, const char *call, ncclDataType_t t, bool reduces) {
    if (type_size(t) == 0) return fail(c, ncclInvalidArgument, "%s: invalid type %d", call, (int)t);
    if (reduces && (t == ncclFloat8e4m3 || t == ncclFloat8e5m2))
        return fail(c, ncclInvalidArgument, "%s: float8 reductions are not emulated", call);
    return ncclSuccess;
}
static ncclResult_t check_op(ncclComm *c, const char *call, ncclRedOp_t op) {
    if ((int)op < 0 || (int)op >= (int)ncclNumOps)
        return fail(c, ncclInvalidArgument, "%s: invalid reduction operation %d (user-made ones are not emulated)",
                    call, (int)op);
    return ncclSuccess;
}
/* MPI counts are ints: a message's elements (in the work type) or bytes must fit. */
static ncclResult_t check_count(ncclComm *c, const char *call, size_t n) {
    if (n > (size_t)INT_MAX)
        return fail(c, ncclInvalidArgument, "%s: %zu elements: more than INT_MAX in one message is not emulated",
                    call, n);
    return ncclSuccess;
}
static ncclResult_t check_buf(ncclComm *c, const char *call, const char *which, const void *p, size_t bytes) {
    if (bytes && !st_emu_device_range(p, bytes))
        return fail(c, ncclInvalidArgument, "%s: %s %p (%zu bytes) is not inside one device allocation", call, which,
                    p, bytes);
    return ncclSuccess;
}
static ncclResult_t check_rank(ncclComm *c, const char *call, const char *which, int r) {
    if (r < 0 || r >= c->nranks) return fail(c, ncclInvalidArgument, "%s: invalid %s %d of %d", call, which, r, c->nranks);
    return ncclSuccess;
}

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        ncclResult_t rc_ = (x);                                                                                  \
        if (rc_ != ncclSuccess) return rc_;                                                                      \
    } while (0)

static nccl_op make(ncclComm *c, cudaStream_t s, const char *name) {
    nccl_op o;
    o.c = c;
    o.stream = s;
    o.name = name;
    o.p2p = 0;
    o.bytes = 0;
    return o;
}

/* --- collectives --------------------------------------------------------------------- */
extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t s) {
    const char *call = "ncclAllReduce";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, true));
    TRY(check_op(c, call, op));
    TRY(check_count(c, call, n));
    TRY(check_buf(c, call, "sendbuff", send, n * type_size(t)));
    TRY(check_buf(c, call, "recvbuff", recv, n * type_size(t)));
    nccl_op o = make(c, s, call);
    o.start = [=](nccl_xfer &x) {
        x.in = widen(send, n, t, op, c->nranks);
        x.done = [=](nccl_xfer &y) { narrow(recv, y.in, n, t, op, c->nranks); };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.reqs.resize(1);
            return posted(c, MPI_Iallreduce(MPI_IN_PLACE, x.in.data(), (int)n, work_mpi(t), mpi_op(op), c->mpi,
                                            &x.reqs[0]), "MPI_Iallreduce");
        }
#endif
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

/* recv on rank i: block i of the reduced send (nranks * n elements); in place: recv == send + rank * n. */
extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                          ncclComm_t c, cudaStream_t s) {
    const char *call = "ncclReduceScatter";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, true));
    TRY(check_op(c, call, op));
    TRY(check_count(c, call, n * c->nranks));
    TRY(check_buf(c, call, "sendbuff", send, n * c->nranks * type_size(t)));
    TRY(check_buf(c, call, "recvbuff", recv, n * type_size(t)));
    nccl_op o = make(c, s, call);
    o.start = [=](nccl_xfer &x) {
        x.in = widen(send, n * c->nranks, t, op, c->nranks);
        x.done = [=](nccl_xfer &y) { narrow(recv, y.out, n, t, op, c->nranks); };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.out.resize(n * work_size(t));
            x.reqs.resize(1);
            return posted(c, MPI_Ireduce_scatter_block(x.in.data(), x.out.data(), (int)n, work_mpi(t), mpi_op(op),
                                                       c->mpi, &x.reqs[0]), "MPI_Ireduce_scatter_block");
        }
#endif
        x.out = x.in;
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

/* recv (nranks * n elements): rank i's send at block i; in place: send == recv + rank * n. */
extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t n, ncclDataType_t t, ncclComm_t c,
                                      cudaStream_t s) {
    const char *call = "ncclAllGather";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, false));
    const size_t bytes = n * type_size(t);
    TRY(check_count(c, call, bytes * c->nranks));
    TRY(check_buf(c, call, "sendbuff", send, bytes));
    TRY(check_buf(c, call, "recvbuff", recv, bytes * c->nranks));
    nccl_op o = make(c, s, call);
    o.start = [=](nccl_xfer &x) {
        x.in.assign((const char *)send, (const char *)send + bytes);
        x.done = [=](nccl_xfer &y) {
            if (!y.out.empty()) memcpy(recv, y.out.data(), y.out.size());
        };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.out.resize(bytes * c->nranks);
            x.reqs.resize(1);
            return posted(c, MPI_Iallgather(x.in.data(), (int)bytes, MPI_BYTE, x.out.data(), (int)bytes, MPI_BYTE,
                                            c->mpi, &x.reqs[0]), "MPI_Iallgather");
        }
#endif
        x.out = x.in;
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

/* root's send into every rank's recv (in place when they are one). */
extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t n, ncclDataType_t t, int root,
                                      ncclComm_t c, cudaStream_t s) {
    const char *call = "ncclBroadcast";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, false));
    TRY(check_rank(c, call, "root", root));
    const size_t bytes = n * type_size(t);
    TRY(check_count(c, call, bytes));
    if (c->rank == root) TRY(check_buf(c, call, "sendbuff", send, bytes));
    TRY(check_buf(c, call, "recvbuff", recv, bytes));
    nccl_op o = make(c, s, call);
    o.start = [=](nccl_xfer &x) {
        if (c->rank == root) x.in.assign((const char *)send, (const char *)send + bytes);
        else x.in.resize(bytes);
        x.done = [=](nccl_xfer &y) {
            if (bytes) memcpy(recv, y.in.data(), bytes);
        };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.reqs.resize(1);
            return posted(c, MPI_Ibcast(x.in.data(), (int)bytes, MPI_BYTE, root, c->mpi, &x.reqs[0]), "MPI_Ibcast");
        }
#endif
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

extern "C" ncclResult_t ncclBcast(void *buf, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t s) {
    return ncclBroadcast(buf, buf, n, t, root, c, s);
}

/* The reduction into root's recv only (other ranks' recv may be NULL). */
extern "C" ncclResult_t ncclReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                   int root, ncclComm_t c, cudaStream_t s) {
    const char *call = "ncclReduce";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, true));
    TRY(check_op(c, call, op));
    TRY(check_rank(c, call, "root", root));
    TRY(check_count(c, call, n));
    TRY(check_buf(c, call, "sendbuff", send, n * type_size(t)));
    if (c->rank == root) TRY(check_buf(c, call, "recvbuff", recv, n * type_size(t)));
    nccl_op o = make(c, s, call);
    o.start = [=](nccl_xfer &x) {
        x.in = widen(send, n, t, op, c->nranks);
        x.done = [=](nccl_xfer &y) {
            if (c->rank == root) narrow(recv, y.out, n, t, op, c->nranks);
        };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            if (c->rank == root) x.out.resize(x.in.size());
            x.reqs.resize(1);
            return posted(c, MPI_Ireduce(x.in.data(), c->rank == root ? x.out.data() : NULL, (int)n, work_mpi(t),
                                         mpi_op(op), root, c->mpi, &x.reqs[0]), "MPI_Ireduce");
        }
#endif
        x.out = x.in;
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

/* --- send and receive (pairs in a group run together; MPI keeps each pair's order) --- */
extern "C" ncclResult_t ncclSend(const void *send, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                                 cudaStream_t s) {
    const char *call = "ncclSend";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, false));
    TRY(check_rank(c, call, "peer", peer));
    const size_t bytes = n * type_size(t);
    TRY(check_count(c, call, bytes));
    TRY(check_buf(c, call, "sendbuff", send, bytes));
    nccl_op o = make(c, s, call);
    o.p2p = 1;
    o.bytes = bytes;
    o.start = [=](nccl_xfer &x) {
        x.in.assign((const char *)send, (const char *)send + bytes);
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.reqs.resize(1);
            return posted(c, MPI_Isend(x.in.data(), (int)bytes, MPI_BYTE, peer, 0, c->mpi, &x.reqs[0]), "MPI_Isend");
        }
#endif
        return ncclSuccess;
    };
    return nccl_emu_issue(std::move(o));
}

extern "C" ncclResult_t ncclRecv(void *recv, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    const char *call = "ncclRecv";
    TRY(nccl_emu_check_comm(c, call));
    TRY(check_type(c, call, t, false));
    TRY(check_rank(c, call, "peer", peer));
    const size_t bytes = n * type_size(t);
    TRY(check_count(c, call, bytes));
    TRY(check_buf(c, call, "recvbuff", recv, bytes));
    nccl_op o = make(c, s, call);
    o.p2p = 2;
    o.bytes = bytes;
    o.start = [=](nccl_xfer &x) {
        x.done = [=](nccl_xfer &y) {
            if (bytes) memcpy(recv, y.out.data(), bytes);
        };
#ifndef ST_NO_MPI
        if (c->mpi != MPI_COMM_NULL) {
            x.out.resize(bytes);
            x.reqs.resize(1);
            return posted(c, MPI_Irecv(x.out.data(), (int)bytes, MPI_BYTE, peer, 0, c->mpi, &x.reqs[0]), "MPI_Irecv");
        }
#endif
        return ncclSuccess; /* (one rank: nccl.cpp pairs it with its send) */
    };
    return nccl_emu_issue(std::move(o));
}
