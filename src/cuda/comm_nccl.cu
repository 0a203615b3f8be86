/* The NCCL backend of the communicator (src/comm/comm.h, st_comm_nccl_init):
 * collectives between the CUDA devices of the job, on device memory.
 *
 * Start-up goes over the host communicator it is given (MPI, or local for one
 * rank): rank 0 makes the ncclUniqueId, broadcasts it, every rank calls
 * ncclCommInitRankConfig on the GPU it opened, non-blocking, and polls
 * ncclCommGetAsyncError under the watchdog; then the ranks agree that every
 * one of them succeeded (a rank that failed would otherwise leave the others
 * waiting in their first collective).
 *
 * A collective: an event recorded on the compute stream, the communication
 * stream waiting for it (so the collective reads what the kernels queued
 * before it wrote), the NCCL call on the communication stream, and its end
 * event. Nothing blocks the host until st_comm_wait or st_comm_test, which
 * poll the end event and NCCL's asynchronous error (a peer that died or a
 * network failure becomes an error naming this rank and host), with the
 * request under the watchdog all the while. The communicator is
 * non-blocking, so the main thread never sits inside NCCL: a call that
 * answers ncclInProgress is polled the same way.
 *
 * Not here: the front (sequence numbers, argument checks: comm.c), the
 * collective check (MPI's: NCCL's own ordering is by stream), which ranks are
 * missing (only MPI's node board knows). */
#ifdef ST_HAVE_NCCL
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh" /* first: cuda_bf16.h, which older nccl.h need for ncclBfloat16 */
#include <nccl.h>
extern "C" {
#include "comm/comm_impl.h"
#include "core/ticker.h"
#include "libs.h"
}

typedef struct nccl_req {
    st_comm_req base;
    cudaEvent_t done; /* recorded on the communication stream after the collective; NULL once seen */
} nccl_req;

typedef struct nccl_comm {
    st_comm *boot;    /* the host communicator it was started over (MPI or local) */
    st_device *dev;
    ncclComm_t nccl;  /* NULL after an abort */
    cudaEvent_t ready; /* the compute stream's position a collective waits for */
    float *scratch;   /* (1) on the device: the barrier's all-reduce */
    pthread_t owner;  /* the thread that made it (the watchdog's must not free what this one polls) */
} nccl_comm;

static nccl_comm *impl(const st_comm *c) { return (nccl_comm *)c->impl; }

/* A failed communicator is aborted at once, from the thread that owns it
 * (NCCL's rule on an error): its kernels still queued on the communication
 * stream, waiting for a peer that is gone, end only then, and the run's
 * clean-up (cudaFree, a stream's synchronize) would otherwise wait on them
 * for good, its error never said. The watchdog's thread leaves it to the
 * job's end (nccl_abort). */
static st_status abort_failed(st_comm *c, st_status s) {
    nccl_comm *m = impl(c);
    if (m->nccl && pthread_equal(pthread_self(), m->owner)) {
        ncclCommAbort(m->nccl);
        m->nccl = NULL;
    }
    return s;
}

static st_status nccl_fail(st_comm *c, const st_comm_req *r, ncclResult_t rc, const char *call) {
    nccl_comm *m = impl(c);
    const char *last = ncclGetLastError(m->nccl);
    const char *hint = rc == ncclInvalidUsage
                           ? " (NCCL needs one GPU per rank: two ranks on one GPU, or ranks that disagree on the "
                             "collective, are refused)"
                       : rc == ncclRemoteError || rc == ncclSystemError
                           ? " (another rank may have died or lost its network; see its message)"
                           : "";
    const bool more = last && *last;
    return abort_failed(c, st_comm_fail(c, r, ST_ERR_IO, "%s failed on %s: %s%s%s%s%s%s", call, m->dev->name,
                                        ncclGetErrorString(rc), more ? " (" : "", more ? last : "",
                                        more ? ")" : "", hint,
                                        rc == ncclUnhandledCudaError ? st_cuda_lost_hint(cudaSuccess) : ""));
}

static st_status cuda_fail(st_comm *c, const st_comm_req *r, cudaError_t e, const char *call) {
    return abort_failed(c, st_comm_fail(c, r, ST_ERR_INTERNAL, "%s failed on %s: %s (%s)%s", call,
                                        impl(c)->dev->name, cudaGetErrorString(e), cudaGetErrorName(e),
                                        st_cuda_lost_hint(e)));
}

#define CU_TRY(call)                                                                                         \
    do {                                                                                                     \
        cudaError_t cu_e_ = (call);                                                                          \
        if (cu_e_ != cudaSuccess) return cuda_fail(c, r, cu_e_, #call);                                      \
    } while (0)

/* NCCL's state after a call on the non-blocking communicator: wait (polling,
 * never inside NCCL) until it is no longer in progress. */
static st_status settle(st_comm *c, const st_comm_req *r, const char *call) {
    nccl_comm *m = impl(c);
    for (;;) {
        if (!m->nccl) return st_comm_fail(c, r, ST_ERR_INTERNAL, "the NCCL communicator was aborted");
        ncclResult_t st = ncclSuccess, e = ncclCommGetAsyncError(m->nccl, &st);
        if (e != ncclSuccess) return nccl_fail(c, r, e, "ncclCommGetAsyncError");
        if (st == ncclSuccess) return ST_OK;
        if (st != ncclInProgress) return nccl_fail(c, r, st, call);
        sched_yield();
    }
}

static st_status nccl_check(st_comm *c, const st_comm_req *r, ncclResult_t rc, const char *call) {
    if (rc == ncclSuccess) return ST_OK;
    if (rc == ncclInProgress) return settle(c, r, call);
    return nccl_fail(c, r, rc, call);
}

#define NC_TRY(call) ST_TRY(nccl_check(c, r, (call), #call))

static ncclDataType_t nccl_type(st_comm_dtype dt) {
    switch (dt) {
    case ST_COMM_F32:
        return ncclFloat32;
    case ST_COMM_F64:
        return ncclFloat64;
    case ST_COMM_I64:
        return ncclInt64;
    case ST_COMM_U8:
        return ncclUint8;
    case ST_COMM_BF16:
        return ncclBfloat16;
    case ST_COMM_F16:
        return ncclFloat16;
    }
    return ncclUint8;
}

static ncclRedOp_t nccl_op(st_comm_redop op) {
    switch (op) {
    case ST_COMM_SUM:
        return ncclSum;
    case ST_COMM_AVG:
        return ncclAvg;
    case ST_COMM_MIN:
        return ncclMin;
    case ST_COMM_MAX:
        return ncclMax;
    }
    return ncclSum;
}

/* NCCL reads and writes device memory only: a host pointer is the caller's
 * mistake (host-side collectives belong to the host communicator). */
static st_status check_device_ptr(st_comm *c, const st_comm_req *r, const void *p, const char *which) {
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return st_comm_fail(c, r, ST_ERR_ARG, "the %s buffer %p is not CUDA memory (%s): the NCCL communicator "
                                              "takes device pointers; host buffers go through the host "
                                              "communicator (MPI)",
                            which, p, cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return st_comm_fail(c, r, ST_ERR_ARG,
                            "the %s buffer %p is host memory: the NCCL communicator takes device pointers "
                            "(of %s); host buffers go through the host communicator (MPI)",
                            which, p, impl(c)->dev->name);
    return ST_OK;
}

static void set_state(st_comm *c, st_comm_req *r, st_comm_state s) {
    pthread_mutex_lock(&c->lock);
    r->state = s;
    pthread_mutex_unlock(&c->lock);
}

static st_status enqueue(st_comm *c, st_comm_req *r) {
    nccl_comm *m = impl(c);
    cudaStream_t st = m->dev->comm;
    const ncclDataType_t t = nccl_type(r->dt);
    const size_t n = r->count, es = st_comm_dtype_size(r->dt);
    switch (r->kind) {
    case ST_COMM_KIND_ALL_REDUCE:
        NC_TRY(ncclAllReduce(r->send, r->recv, n, t, nccl_op(r->op), m->nccl, st));
        break;
    case ST_COMM_KIND_REDUCE_SCATTER: /* NCCL's in-place form is comm.h's: recv == send + rank * count */
        NC_TRY(ncclReduceScatter(r->send, r->recv, n, t, nccl_op(r->op), m->nccl, st));
        break;
    case ST_COMM_KIND_ALL_GATHER: /* in place: send == recv + rank * count, as comm.h */
        NC_TRY(ncclAllGather(r->send, r->recv, n, t, m->nccl, st));
        break;
    case ST_COMM_KIND_BROADCAST:
        NC_TRY(ncclBroadcast(r->recv, r->recv, n, t, r->root, m->nccl, st));
        break;
    case ST_COMM_KIND_REDUCE:
        NC_TRY(ncclReduce(r->send, r->recv, n, t, nccl_op(r->op), r->root, m->nccl, st));
        break;
    case ST_COMM_KIND_BARRIER: /* NCCL has none: a one-float all-reduce every rank must join */
        NC_TRY(ncclAllReduce(m->scratch, m->scratch, 1, ncclFloat32, ncclSum, m->nccl, st));
        break;
    case ST_COMM_KIND_ALL_TO_ALL: { /* sends and receives in one group (ncclAlltoAll is 2.28 and later) */
        const char *s = (const char *)r->send;
        char *d = (char *)r->recv;
        NC_TRY(ncclGroupStart());
        for (int j = 0; j < c->size; j++) {
            ncclResult_t e = ncclSend(s + (size_t)j * n * es, n, t, j, m->nccl, st);
            if (e == ncclSuccess) e = ncclRecv(d + (size_t)j * n * es, n, t, j, m->nccl, st);
            if (e != ncclSuccess && e != ncclInProgress) {
                ncclGroupEnd();
                return nccl_fail(c, r, e, "ncclSend/ncclRecv (all-to-all)");
            }
        }
        NC_TRY(ncclGroupEnd());
        break;
    }
    default:
        return st_comm_fail(c, r, ST_ERR_INTERNAL, "cannot post an internal step");
    }
    return ST_OK;
}

static st_status nccl_start(st_comm *c, st_comm_req *r) {
    nccl_comm *m = impl(c);
    nccl_req *q = (nccl_req *)r;
    q->done = NULL;
    if (!m->nccl) return st_comm_fail(c, r, ST_ERR_INTERNAL, "the NCCL communicator was aborted");
    const bool has_send = r->kind != ST_COMM_KIND_BARRIER && r->kind != ST_COMM_KIND_BROADCAST && r->count;
    const bool has_recv = r->kind != ST_COMM_KIND_BARRIER && r->count &&
                          (r->kind != ST_COMM_KIND_REDUCE || r->root == c->rank);
    if (has_send) ST_TRY(check_device_ptr(c, r, r->send, "send"));
    if (has_recv) ST_TRY(check_device_ptr(c, r, r->recv, "receive"));
    CU_TRY(cudaSetDevice(m->dev->ordinal));
    CU_TRY(cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming));
    /* After what the compute stream holds now: the kernels that wrote the data. */
    CU_TRY(cudaEventRecord(m->ready, m->dev->compute));
    CU_TRY(cudaStreamWaitEvent(m->dev->comm, m->ready, 0));
    ST_TRY(enqueue(c, r));
    CU_TRY(cudaEventRecord(q->done, m->dev->comm));
    set_state(c, r, ST_COMM_REQ_RUNNING);
    return ST_OK;
}

/* One pass over the running collectives: finish those whose end event has
 * passed; *moved says whether any did, *running how many are left. */
static st_status poll_once(st_comm *c, bool *moved, int *running) {
    nccl_comm *m = impl(c);
    *moved = false;
    *running = 0;
    st_comm_req *oldest = NULL;
    for (int i = 0; i < c->n_pending;) {
        st_comm_req *r = c->pending[i];
        nccl_req *q = (nccl_req *)r;
        if (r->kind == ST_COMM_KIND_INTERNAL || r->state != ST_COMM_REQ_RUNNING || !q->done) {
            i++;
            continue;
        }
        cudaError_t e = cudaEventQuery(q->done);
        if (e == cudaErrorNotReady) {
            if (!oldest) oldest = r;
            ++*running;
            i++;
            continue;
        }
        if (e != cudaSuccess) return cuda_fail(c, r, e, "cudaEventQuery (the collective's end)");
        cudaEventDestroy(q->done);
        q->done = NULL;
        r->status = ST_OK;
        st_comm_req_done(c, r); /* takes it off pending[]: the next one is at i now */
        *moved = true;
    }
    if (oldest && m->nccl) { /* still running: has NCCL seen a failure (a peer gone, the network)? */
        ncclResult_t st = ncclSuccess, e = ncclCommGetAsyncError(m->nccl, &st);
        if (e != ncclSuccess) return nccl_fail(c, oldest, e, "ncclCommGetAsyncError");
        if (st != ncclSuccess && st != ncclInProgress) return nccl_fail(c, oldest, st, "the collective");
    }
    return ST_OK;
}

static st_status nccl_progress(st_comm *c, bool block) {
    bool moved = false;
    int running = 0;
    ST_TRY(poll_once(c, &moved, &running));
    while (block && !moved && running > 0) {
        sched_yield();
        ST_TRY(poll_once(c, &moved, &running));
    }
    return ST_OK;
}

static void nccl_describe_missing(st_comm *c, uint64_t seq, char *buf, size_t cap) {
    snprintf(buf, cap,
             "scaletrain: rank %d: (an NCCL collective: which rank has not joined is not known from here; a rank "
             "that died or stopped usually reports first)\n",
             c->rank);
}

/* ncclCommAbort only from the thread that owns the communicator: the
 * watchdog's thread leaves it to the job's end (boot's MPI_Abort). */
static void nccl_abort(st_comm *c, int code) {
    abort_failed(c, ST_OK);
    impl(c)->boot->ops->abort(impl(c)->boot, code);
}

static void nccl_free(st_comm *c) {
    nccl_comm *m = impl(c);
    if (!m) return;
    cudaSetDevice(m->dev->ordinal);
    if (m->nccl) {
        if (c->failed) {
            ncclCommAbort(m->nccl); /* collectives that will never finish: abort, do not wait */
        } else {
            st_comm_req watch;
            st_comm_watch_begin(c, &watch, "shutdown (ncclCommFinalize)");
            ncclResult_t rc = ncclCommFinalize(m->nccl);
            st_status s = nccl_check(c, NULL, rc, "ncclCommFinalize");
            st_comm_watch_end(c, &watch);
            if (s == ST_OK) ncclCommDestroy(m->nccl);
            else if (m->nccl) ncclCommAbort(m->nccl); /* (nccl_fail aborted it already) */
        }
        m->nccl = NULL;
    }
    for (st_comm_req *r = c->live; r; r = r->live_next) { /* requests a failure left unfinished */
        nccl_req *q = (nccl_req *)r;
        if (q->done) cudaEventDestroy(q->done);
        q->done = NULL;
    }
    if (m->ready) cudaEventDestroy(m->ready);
    if (m->scratch) cudaFree(m->scratch);
    free(m);
    c->impl = NULL;
}

/* The compute stream after the collective's end event (NULL once the host
 * saw it pass: nothing to wait for). */
static st_status nccl_device_wait(st_comm *c, st_comm_req *r) {
    nccl_req *q = (nccl_req *)r;
    if (q->done) CU_TRY(cudaStreamWaitEvent(impl(c)->dev->compute, q->done, 0));
    return ST_OK;
}

static const st_comm_ops nccl_ops = {
    "nccl",
    sizeof(nccl_req),
    true,
    nccl_start,
    nccl_progress,
    nccl_describe_missing,
    nccl_abort,
    NULL /* shared_arena: gradients live on the device */,
    nccl_free,
    nccl_device_wait,
    true /* large_counts: NCCL's counts are size_t */,
};

typedef struct boot_args {
    st_comm *boot;
    st_device *dev;
} boot_args;

/* Rank 0's unique id, or its failure, travels to every rank in one broadcast. */
typedef struct id_msg {
    int64_t ok;
    char why[120];
    ncclUniqueId id;
} id_msg;

static st_status nccl_init(st_comm *c, void *arg) {
    const boot_args *a = (const boot_args *)arg;
    const st_comm_req *r = NULL; /* for CU_TRY */
    nccl_comm *m = (nccl_comm *)calloc(1, sizeof *m);
    if (!m) return st_fail(ST_ERR_NOMEM, "out of memory starting the NCCL communicator");
    c->ops = &nccl_ops;
    c->impl = m;
    m->boot = a->boot;
    m->dev = a->dev;
    m->owner = pthread_self();
    c->rank = st_comm_rank(a->boot);
    c->size = st_comm_size(a->boot);
    c->local_rank = st_comm_local_rank(a->boot);
    c->local_size = st_comm_local_size(a->boot);
    snprintf(c->host, sizeof c->host, "%s", st_comm_host(a->boot));
    CU_TRY(cudaSetDevice(m->dev->ordinal));
    CU_TRY(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
    CU_TRY(cudaMalloc((void **)&m->scratch, sizeof(float)));
    CU_TRY(cudaMemset(m->scratch, 0, sizeof(float)));
    if (c->cfg.timeout_s > 0) ST_TRY(st_watchdog_start(c, c->cfg.timeout_s, &c->watchdog));

    id_msg msg;
    memset(&msg, 0, sizeof msg);
    if (c->rank == 0) {
        ncclResult_t rc = ncclGetUniqueId(&msg.id);
        msg.ok = rc == ncclSuccess;
        if (!msg.ok) snprintf(msg.why, sizeof msg.why, "ncclGetUniqueId failed: %s", ncclGetErrorString(rc));
    }
    ST_TRY(st_comm_broadcast_sync(a->boot, &msg, sizeof msg, ST_COMM_U8, 0, "NCCL unique id"));
    if (!msg.ok)
        return st_comm_fail(c, NULL, ST_ERR_IO, "NCCL could not start: rank 0 (host %s): %s", c->host, msg.why);

    st_comm_req watch;
    st_comm_watch_begin(c, &watch, "start-up (ncclCommInitRankConfig)");
    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&m->nccl, c->size, msg.id, c->rank, &conf);
    st_status s;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        m->nccl = NULL;
        s = nccl_fail(c, NULL, rc, "ncclCommInitRankConfig");
    } else {
        s = nccl_check(c, NULL, rc, "ncclCommInitRankConfig");
    }
    st_comm_watch_end(c, &watch);
    /* A rank whose start failed early (its network, say) says why now: the
     * others may still wait in NCCL's start for it, reach the agreement only
     * when the watchdog ends the job after dist.timeout_s, and this rank's
     * reason would be lost with it. */
    if (s != ST_OK && c->size > 1) {
        char line[ST_COMM_ERR_MAX + 192];
        snprintf(line, sizeof line,
                 "scaletrain: %s; the other ranks may wait for it in NCCL's start-up until dist.timeout_s\n",
                 st_last_error());
        st_ticker_say(line);
    }
    /* Every rank learns whether every rank got there. */
    int64_t ok = s == ST_OK;
    st_status sa = st_comm_all_reduce_sync(a->boot, &ok, &ok, 1, ST_COMM_I64, ST_COMM_MIN, "NCCL start-up agreement");
    if (s != ST_OK) return s;
    if (sa != ST_OK) /* (broken: the communicator is aborted, not finalized with ranks that may be gone) */
        return st_comm_fail(c, NULL, sa, "the agreement after NCCL's start-up failed: %s", st_last_error());
    if (!ok)
        return st_comm_fail(c, NULL, ST_ERR_IO,
                            "NCCL could not start on another rank (its message says why; one GPU per rank)");
    return ST_OK;
}

extern "C" bool st_comm_nccl_built(void) { return true; }

extern "C" bool st_comm_nccl_usable(char *why, size_t n) {
    return st_cuda_lib_ready(ST_CUDA_LIB_NCCL, why, n);
}

extern "C" st_status st_comm_nccl_init(st_comm *boot, st_device *d, const st_comm_config *cfg, st_comm **out) {
    if (out) *out = NULL;
    if (!boot || !d || !out)
        return st_fail(ST_ERR_ARG, "st_comm_nccl_init: the host communicator, the device and out are needed");
    ST_TRY(st_cuda_lib_load(ST_CUDA_LIB_NCCL));
    st_comm_config conf = ST_COMM_CONFIG_INIT;
    if (cfg) conf.timeout_s = cfg->timeout_s;
    conf.backend = ST_COMM_AUTO; /* (not used: the front validates it) */
    conf.check_every = 0;
    boot_args a = {boot, d};
    return st_comm_create(&conf, nccl_init, &a, out);
}
#endif
