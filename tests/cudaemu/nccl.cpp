/* The CUDA emulator's NCCL (tests/cudaemu/README.md): the part of nccl.h that
 * src/cuda/comm_nccl.cu calls, done with MPI between the ranks' processes, so
 * the NCCL communicator and data-parallel training on (emulated) GPUs run
 * where there is no GPU. Compiled against the real nccl.h, so every signature
 * is checked; no libnccl is linked. This file: communicators, errors, groups
 * and how an operation runs; nccl_ops.cpp: the collectives themselves.
 *
 * A communicator: ncclGetUniqueId makes an id that names its maker (world
 * rank, pid, a counter, the time); the program hands it to every rank (as
 * NCCL wants: scaletrain broadcasts it over its host communicator), and
 * ncclCommInitRank splits MPI_COMM_WORLD by a hash of the id, ordered by the
 * NCCL rank, into an MPI communicator of its own. So, as with real NCCL, the
 * ranks must create their communicators in the same order, and here every
 * process of MPI_COMM_WORLD takes part in each creation (MPI_Comm_split is
 * collective over the world; scaletrain's ranks create one each). Two ranks
 * on one device of one host are refused as NCCL refuses them. One rank needs
 * no MPI: its collectives are copies (test_cuda_nccl runs that way, with a
 * local host communicator and no MPI_Init).
 *
 * When a collective runs. Streams here are lazy (streams.cpp): work runs when
 * the host waits for it. Running a collective lazily, when its stream happens
 * to be forced, can deadlock between ranks where a GPU would not: rank A
 * forces its communication stream and blocks in MPI inside collective k,
 * while rank B, which has queued k but not forced it, sits in a host-side MPI
 * call that A joins only after k (on a GPU, B's device runs k by itself).
 * So a collective STARTS at its call, in call order (NCCL's rule that every
 * rank calls a communicator's collectives in the same order is then MPI's
 * rule for nonblocking collectives on one communicator): the call first runs
 * what its stream holds before it (including what the stream waits for on
 * other streams, e.g. the kernels that wrote the gradients: a missing
 * cudaStreamWaitEvent still shows, as stale input), takes its inputs
 * (staged in host memory, so in-place forms are safe), posts the
 * nonblocking MPI operation and returns; the stream gets an item that
 * waits for it and writes the results into device memory. The results thus
 * appear only when the stream runs that item, and a reader that does not
 * wait for the communication stream still sees stale data. The host blocks
 * only where a GPU's collective would also wait for a peer that has not yet
 * called it (when an earlier collective's end must run first), not on the
 * peer's host being elsewhere. What is lost: a write into a collective's
 * input queued after the call on another stream without a wait (a race on a
 * GPU) is not seen, since the input was already taken.
 *
 * Arithmetic: sums, products, min and max by MPI in the element type;
 * float16 and bfloat16 widened to float32, reduced there, rounded back once
 * (NCCL reduces them in float32 steps too, rounding between ring hops);
 * ncclAvg multiplies each rank's input by 1/nranks first for floating types
 * and divides the integer sum (NCCL's PreMulSum and SumPostDiv). float8 is
 * carried by the copying collectives but not reduced (ncclInvalidArgument).
 *
 * Non-blocking communicators (config.blocking = 0), as NCCL's: init and
 * every call outside a group (and ncclGroupEnd, ncclCommFinalize) answer
 * ncclInProgress, and ncclCommGetAsyncError says ncclInProgress once more
 * before ncclSuccess; a call made while the communicator is still in
 * progress is refused (NCCL's rule: poll until it is not). */
#include "nccl_emu.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>

static std::recursive_mutex lock; /* every communicator's fields, the id counter */
static thread_local std::string last_global;
static uint64_t ids_made;
static thread_local int group_depth;
static thread_local std::vector<nccl_op> group_ops;

ncclResult_t nccl_emu_fail(ncclComm *c, ncclResult_t rc, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::recursive_mutex> l(lock);
    last_global = buf;
    if (c) c->last = buf;
    return rc;
}
#define fail nccl_emu_fail

#ifndef ST_NO_MPI
static bool have_mpi(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}
static std::string mpi_words(int rc) {
    char w[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, w, &n) != MPI_SUCCESS) snprintf(w, sizeof w, "MPI error %d", rc);
    return w;
}
#endif

ncclResult_t nccl_emu_check_comm(ncclComm *c, const char *call) {
    if (!c) return fail(NULL, ncclInvalidArgument, "%s: comm is NULL", call);
    std::lock_guard<std::recursive_mutex> l(lock);
    if (c->freed || c->aborted)
        return fail(NULL, ncclInvalidArgument, "%s: the communicator was destroyed or aborted", call);
    if (c->error != ncclSuccess) return c->error;
    if (c->in_progress > 0)
        return fail(c, ncclInvalidUsage,
                    "%s: called while the non-blocking communicator's previous call is still in progress (poll "
                    "ncclCommGetAsyncError until it is no longer ncclInProgress first)",
                    call);
    return ncclSuccess;
}

/* --- running operations ------------------------------------------------------ */
typedef std::shared_ptr<std::vector<std::unique_ptr<nccl_xfer>>> batch_t;

/* A stream's item: wait for the batch's requests, then write the results (an
 * aborted or failed communicator's are dropped, their buffers kept: MPI may
 * still write into them). */
/* st_emu_nccl_lose_next (selftest.h): the next launch's communicator loses its peer */
static bool lose_next;
extern "C" void st_emu_nccl_lose_next(void) {
    std::lock_guard<std::recursive_mutex> l(lock);
    lose_next = true;
}

/* One of c's ends on stream s has run: the communicator itself goes once
 * its handle is gone and nothing of it is queued. */
static void end_queued(ncclComm *c, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> l(lock);
    if (--c->queued[s] == 0) c->queued.erase(s);
    if (c->freed && c->queued.empty()) delete c;
}

/* A lost collective's end: on the stream until the communicator is aborted */
static void wait_for_abort(ncclComm *c) {
    for (;;) {
        {
            std::lock_guard<std::recursive_mutex> l(lock);
            if (c->aborted) return;
        }
        usleep(1000);
    }
}

#ifndef ST_NO_MPI
/* MPI_Waitall without holding a core: polled for 1 ms, then with sleeps of
 * 10 us doubling to 200 us between polls. The emulated ranks share the
 * machine's cores with each other (and the test suite's other tests): a
 * rank spinning in MPI while its peer emulates kernels took a core from it. */
static int wait_all(std::vector<MPI_Request> &reqs) {
    int done = 0;
    long pause_ns = 0;
    timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        const int rc = MPI_Testall((int)reqs.size(), reqs.data(), &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (pause_ns == 0) {
            timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000L) continue;
        }
        pause_ns = pause_ns ? (pause_ns < 100000 ? 2 * pause_ns : 200000) : 10000;
        timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
    }
}
#endif

static void finish(ncclComm *c, cudaStream_t s, batch_t batch, const char *name) {
    bool skip;
    {
        std::lock_guard<std::recursive_mutex> l(lock);
        skip = c->aborted || c->error != ncclSuccess;
    }
    bool ok = !skip;
#ifndef ST_NO_MPI
    std::vector<MPI_Request> reqs;
    for (auto &x : *batch) reqs.insert(reqs.end(), x->reqs.begin(), x->reqs.end());
    if (ok && !reqs.empty()) {
        int rc = wait_all(reqs);
        if (rc != MPI_SUCCESS) {
            ok = false;
            std::lock_guard<std::recursive_mutex> l(lock);
            c->error = ncclRemoteError;
            c->last = std::string(name) + " (emulated): MPI_Testall failed: " + mpi_words(rc);
        }
    }
#endif
    if (ok) {
        st_emu_set_running(name);
        for (auto &x : *batch)
            if (x->done) x->done(*x);
        st_emu_set_running(NULL);
    } else {
        for (auto &x : *batch) (void)x.release();
    }
    end_queued(c, s);
}

/* One rank without MPI: the k-th send (to itself) feeds the k-th receive. */
static ncclResult_t pair_local(std::vector<nccl_op> &ops, std::vector<std::unique_ptr<nccl_xfer>> &xs) {
    std::vector<size_t> sends, recvs;
    for (size_t i = 0; i < ops.size(); i++)
        if (ops[i].c->mpi == MPI_COMM_NULL && ops[i].p2p) (ops[i].p2p == 1 ? sends : recvs).push_back(i);
    if (sends.size() != recvs.size())
        return fail(ops[0].c, ncclInvalidUsage,
                    "a group of %zu sends and %zu receives on one rank: each send to itself needs its receive "
                    "in the same group (NCCL would hang)",
                    sends.size(), recvs.size());
    for (size_t k = 0; k < sends.size(); k++) {
        const nccl_op &a = ops[sends[k]], &b = ops[recvs[k]];
        if (a.bytes != b.bytes)
            return fail(a.c, ncclInvalidUsage, "send %zu of this group carries %zu bytes, its receive expects %zu",
                        k, a.bytes, b.bytes);
        xs[recvs[k]]->out = xs[sends[k]]->in;
    }
    return ncclSuccess;
}

/* Start each of ops in call order (reading its inputs, posting its
 * exchange) into xs, then pair a lone rank's sends with its receives. */
static ncclResult_t start_all(std::vector<nccl_op> &ops, std::vector<std::unique_ptr<nccl_xfer>> &xs) {
    st_emu_window w;
    for (nccl_op &o : ops) {
        xs.emplace_back(new nccl_xfer);
        st_emu_set_running(o.name);
        const ncclResult_t rc = o.start(*xs.back());
        st_emu_set_running(NULL);
        if (rc != ncclSuccess) return rc;
    }
    return pair_local(ops, xs);
}

/* Start ops (one call, or a group, in call order), then queue each stream's end. */
static ncclResult_t launch(std::vector<nccl_op> &ops) {
    {
        std::lock_guard<std::recursive_mutex> l(lock);
        if (lose_next && !ops.empty()) { /* (its inputs are not even read: the peer is gone) */
            lose_next = false;
            ncclComm *c = ops[0].c;
            c->error = ncclRemoteError;
            c->last = std::string(ops[0].name) + " (emulated: st_emu_nccl_lose_next): a peer is gone";
            cudaStream_t s = ops[0].stream;
            c->queued[s]++;
            st_emu_enqueue_on(
                s,
                [c, s] {
                    /* (ST_CUDAEMU_LAZY=0 runs it as it is queued, inside the call: a GPU's kernel
                     * would not hold its host there, so that mode drops it at once) */
                    if (st_emu_lazy_mode() != 0) wait_for_abort(c);
                    end_queued(c, s);
                },
                true);
            return ncclSuccess;
        }
    }
    std::vector<cudaStream_t> streams;
    for (nccl_op &o : ops) {
        if (std::find(streams.begin(), streams.end(), o.stream) == streams.end()) streams.push_back(o.stream);
        for (nccl_op &p : ops)
            if (p.stream == o.stream && p.c != o.c)
                return fail(o.c, ncclInvalidUsage, "a group with two communicators on one stream is not emulated");
    }
    if (st_emu_lazy_mode() == 2 &&
        streams.size() == 1) { /* collectives late: all of it when its stream gets there */
        cudaStream_t s = streams[0];
        ncclComm *c = ops[0].c;
        const char *name = ops[0].name;
        {
            std::lock_guard<std::recursive_mutex> l(lock);
            c->queued[s]++;
        }
        auto held = std::make_shared<std::vector<nccl_op>>(ops);
        st_emu_enqueue_on(
            s,
            [held, c, s, name] {
                batch_t batch = std::make_shared<std::vector<std::unique_ptr<nccl_xfer>>>();
                const ncclResult_t rc = start_all(*held, *batch);
                if (rc != ncclSuccess) { /* finish drops it */
                    std::lock_guard<std::recursive_mutex> l(lock);
                    if (c->error == ncclSuccess) c->error = rc;
                }
                finish(c, s, batch, name);
            },
            true);
        return ncclSuccess;
    }
    for (cudaStream_t s : streams) cudaStreamSynchronize(s); /* what comes before: the inputs' writers */
    std::vector<std::unique_ptr<nccl_xfer>> xs;
    const ncclResult_t rc = start_all(ops, xs);
    if (rc != ncclSuccess) { /* requests already posted are left to MPI: the communicator is broken */
        for (auto &x : xs) (void)x.release();
        std::lock_guard<std::recursive_mutex> l(lock);
        for (nccl_op &o : ops)
            if (o.c->mpi != MPI_COMM_NULL && o.c->error == ncclSuccess) o.c->error = rc;
        return rc;
    }
    for (cudaStream_t s : streams) {
        batch_t batch = std::make_shared<std::vector<std::unique_ptr<nccl_xfer>>>();
        ncclComm *c = NULL;
        const char *name = NULL;
        for (size_t i = 0; i < ops.size(); i++)
            if (ops[i].stream == s) {
                batch->push_back(std::move(xs[i]));
                c = ops[i].c;
                name = ops[i].name;
            }
        {
            std::lock_guard<std::recursive_mutex> l(lock);
            c->queued[s]++;
        }
        st_emu_enqueue_on(
            s, [c, s, batch, name] { finish(c, s, batch, name); }, true);
    }
    return ncclSuccess;
}

ncclResult_t nccl_emu_issue(nccl_op o) {
    if (st_emu_lost() != cudaSuccess)
        return fail(o.c, ncclUnhandledCudaError, "%s: Cuda failure '%s'", o.name,
                    cudaGetErrorString(st_emu_lost()));
    if (!st_emu_stream_ok(o.stream)) return fail(o.c, ncclInvalidArgument, "%s: the stream does not exist", o.name);
    if (group_depth > 0) {
        group_ops.push_back(std::move(o));
        return ncclSuccess;
    }
    std::vector<nccl_op> one{std::move(o)};
    ncclResult_t rc = launch(one);
    if (rc != ncclSuccess || one[0].c->blocking) return rc;
    std::lock_guard<std::recursive_mutex> l(lock);
    one[0].c->in_progress = 1;
    return ncclInProgress;
}

extern "C" ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    std::vector<nccl_op> ops;
    ops.swap(group_ops);
    if (ops.empty()) return ncclSuccess;
    ncclResult_t rc = launch(ops);
    if (rc != ncclSuccess) return rc;
    bool nonblocking = false;
    std::lock_guard<std::recursive_mutex> l(lock);
    for (nccl_op &o : ops)
        if (!o.c->blocking) {
            o.c->in_progress = 1;
            nonblocking = true;
        }
    return nonblocking ? ncclInProgress : ncclSuccess;
}

/* --- communicators ------------------------------------------------------------- */
struct id_fields { /* what an ncclUniqueId holds here */
    char magic[16];
    int32_t world_rank, pid;
    uint64_t counter, ns;
};
static const char id_magic[16] = "cudaemu-nccl-id";

extern "C" ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    static_assert(sizeof(id_fields) <= sizeof(ncclUniqueId), "the id's fields fit");
    id_fields f;
    memset(&f, 0, sizeof f);
    memcpy(f.magic, id_magic, sizeof f.magic);
    f.world_rank = -1;
#ifndef ST_NO_MPI
    if (have_mpi()) MPI_Comm_rank(MPI_COMM_WORLD, &f.world_rank);
#endif
    f.pid = (int32_t)getpid();
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    f.ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    {
        std::lock_guard<std::recursive_mutex> l(lock);
        f.counter = ++ids_made;
    }
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &f, sizeof f);
    return ncclSuccess;
}

#ifndef ST_NO_MPI
static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* The ranks holding the same id, as an MPI communicator ordered by NCCL rank;
 * two of them on one device of one host are refused, as NCCL refuses them. */
static ncclResult_t join(ncclComm *c, const ncclUniqueId &id) {
    if (!have_mpi())
        return fail(NULL, ncclInvalidUsage,
                    "the emulated NCCL joins %d ranks over MPI, and MPI is not initialised (scaletrain's MPI host "
                    "communicator starts it; one rank needs none)",
                    c->nranks);
    const int color = (int)(fnv(id.internal, sizeof id.internal) & 0x7fffffff);
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, c->rank, &c->mpi);
    if (rc != MPI_SUCCESS) return fail(NULL, ncclSystemError, "MPI_Comm_split: %s", mpi_words(rc).c_str());
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    int size = 0, me = -1;
    MPI_Comm_size(c->mpi, &size);
    MPI_Comm_rank(c->mpi, &me);
    ncclResult_t res = ncclSuccess;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    std::vector<uint64_t> all((size_t)size * 2);
    /* the device by its PCI address, as NCCL takes it (its busId): ranks
     * seeing one GPU each all call theirs 0, and MIG slices of one GPU
     * (ST_CUDAEMU_MIG) share one */
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, c->device) != cudaSuccess)
        snprintf(bus, sizeof bus, "device %d", st_emu_machine_device(c->device));
    const uint64_t mine[2] = {fnv(host, strlen(host)), fnv(bus, strlen(bus))};
    if (size != c->nranks || me != c->rank) {
        res = fail(NULL, ncclInvalidUsage,
                   "ncclCommInitRank: %d processes hold this id and this one is number %d of them, but it was told "
                   "rank %d of %d (the ranks disagree on nranks, or two have the same rank)",
                   size, me, c->rank, c->nranks);
    } else if ((rc = MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, c->mpi)) != MPI_SUCCESS) {
        res = fail(NULL, ncclSystemError, "MPI_Allgather: %s", mpi_words(rc).c_str());
    } else {
        for (int j = 0; j < size && res == ncclSuccess; j++)
            if (j != me && all[2 * (size_t)j] == mine[0] && all[2 * (size_t)j + 1] == mine[1])
                res =
                    fail(NULL, ncclInvalidUsage,
                         "Duplicate GPU detected: rank %d and rank %d both on the GPU at %s of host %s (one "
                         "device per rank; ST_CUDAEMU_DEVICES gives the emulator more)",
                         me, j, bus, host);
    }
    if (res != ncclSuccess) MPI_Comm_free(&c->mpi);
    return res;
}
#endif

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t *config) {
    if (!comm) return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
    *comm = NULL;
    if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)))
        return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: config was not set from NCCL_CONFIG_INITIALIZER");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d", rank, nranks);
    if (memcmp(id.internal, id_magic, sizeof id_magic) != 0)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: the id did not come from ncclGetUniqueId");
    ncclComm *c = new ncclComm;
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
    cudaGetDevice(&c->device);
    if (nranks > 1) {
#ifdef ST_NO_MPI
        delete c;
        return fail(NULL, ncclInvalidUsage, "the emulated NCCL of %d ranks needs MPI: this build has none", nranks);
#else
        ncclResult_t rc = join(c, id);
        if (rc != ncclSuccess) {
            delete c;
            return rc;
        }
#endif
    }
    *comm = c;
    if (c->blocking) return ncclSuccess;
    c->in_progress = 1;
    return ncclInProgress;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    if (!c || !err) return fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
    std::lock_guard<std::recursive_mutex> l(lock);
    if (c->in_progress > 0) {
        c->in_progress--;
        *err = ncclInProgress;
    } else {
        *err = c->error == ncclSuccess && st_emu_lost() != cudaSuccess ? ncclUnhandledCudaError : c->error;
    }
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
    if (!c || !count) return fail(NULL, ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = c->nranks;
    return ncclSuccess;
}
extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
    if (!c || !rank) return fail(NULL, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = c->rank;
    return ncclSuccess;
}
extern "C" ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
    if (!c || !device) return fail(NULL, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
    *device = c->device;
    return ncclSuccess;
}

/* Run every stream holding this communicator's operations to its end. */
static void flush(ncclComm *c) {
    std::vector<cudaStream_t> streams;
    {
        std::lock_guard<std::recursive_mutex> l(lock);
        for (auto &kv : c->queued) streams.push_back(kv.first);
    }
    for (cudaStream_t s : streams) cudaStreamSynchronize(s);
}

extern "C" ncclResult_t ncclCommFinalize(ncclComm_t c) {
    ncclResult_t rc = nccl_emu_check_comm(c, "ncclCommFinalize");
    if (rc != ncclSuccess) return rc;
    flush(c);
    std::lock_guard<std::recursive_mutex> l(lock);
    if (c->error != ncclSuccess) return c->error;
    if (c->blocking) return ncclSuccess;
    c->in_progress = 1;
    return ncclInProgress;
}

/* The handle is gone; the communicator itself once its queued ends have run. */
static void release(ncclComm *c) {
    std::lock_guard<std::recursive_mutex> l(lock);
    c->freed = true;
    if (c->queued.empty()) delete c;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclSuccess;
    if (c->freed) return fail(NULL, ncclInvalidArgument, "ncclCommDestroy: destroyed twice");
    if (!c->aborted && c->error == ncclSuccess) flush(c); /* as NCCL: a destroy finalizes first */
#ifndef ST_NO_MPI
    if (c->mpi != MPI_COMM_NULL && c->error == ncclSuccess && have_mpi()) MPI_Comm_free(&c->mpi);
#endif
    release(c);
    return ncclSuccess;
}

/* Operations in flight are dropped, and the MPI communicator is left alone
 * (a peer may be gone; the job is ending). */
extern "C" ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    {
        std::lock_guard<std::recursive_mutex> l(lock);
        c->aborted = true;
    }
    release(c);
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t rc) { /* NCCL's own words */
    switch (rc) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

extern "C" const char *ncclGetLastError(ncclComm_t c) {
    std::lock_guard<std::recursive_mutex> l(lock);
    if (c && !c->freed && !c->last.empty()) return c->last.c_str();
    return last_global.c_str();
}
