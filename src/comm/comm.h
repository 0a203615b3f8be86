/* The communicator: collectives between the ranks of a data-parallel job,
 * shaped like NCCL's (an opaque handle, asynchronous operations, an abort).
 *
 * Backends sit behind one table of function pointers (comm_impl.h): `local`
 * (one rank, every operation a copy), `mpi` (OpenMPI, MPICH; host memory) and
 * `nccl` (CUDA device memory, src/cuda/comm_nccl.cu, started over one of the
 * others: st_comm_nccl_init). No MPI, CUDA or NCCL type appears here.
 *
 * Every collective gets a sequence number (per communicator, 1, 2, 3, ... on
 * every call of every rank), carries the caller's name for it ("all-reduce of
 * bucket 3") and the step set with st_comm_set_step; errors and the watchdog
 * name all three. See "No silent hangs" below.
 *
 * Not here: buckets, overlap policy, ZeRO (src/dist/). */
#ifndef SCALETRAIN_COMM_H
#define SCALETRAIN_COMM_H

#include <stdbool.h>
#include <stddef.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif
#include <stdint.h>

#include "core/device.h"
#include "scaletrain/status.h"

typedef struct st_comm st_comm;
typedef struct st_comm_req st_comm_req;

typedef enum st_comm_backend {
    ST_COMM_AUTO = 0, /* MPI when a launcher started us (mpirun, srun), else local */
    ST_COMM_LOCAL,
    ST_COMM_MPI,
} st_comm_backend;

typedef enum st_comm_dtype {
    ST_COMM_F32 = 0,
    ST_COMM_I64,
    ST_COMM_U8,
    ST_COMM_BF16, /* 16-bit floats held as their bits (uint16_t, src/core/half.h) */
    ST_COMM_F16,
    ST_COMM_F64, /* double: small reductions that must not lose precision (sync batch-norm) */
} st_comm_dtype;

/* Reductions. AVG is SUM divided by the world size (in the element type, after
 * the sum), float32 only. float64 and integers: SUM, MIN, MAX; bytes: MIN,
 * MAX. BF16 and F16: SUM only, where each addition widens both operands to
 * fp32, adds in fp32 and rounds the partial sum back to 16 bits (it travels on
 * in 16 bits): with 2 ranks the result is round(a + b) exactly; with N, N - 1
 * roundings of partial sums, in MPI's order (as NCCL's bf16 sum). */
typedef enum st_comm_redop {
    ST_COMM_SUM = 0,
    ST_COMM_AVG,
    ST_COMM_MIN,
    ST_COMM_MAX,
} st_comm_redop;

typedef struct st_comm_config {
    st_comm_backend backend;
    /* Seconds a collective may stay unfinished before the watchdog ends the job
     * (dist.timeout_s); 0 turns the watchdog off. */
    double timeout_s;
    /* Before every Nth collective the ranks agree on (sequence number, kind,
     * type, count, root, name) with a 16-byte all-reduce, and disagreement is
     * an error that names both collectives and the ranks; 0 = never. The
     * check runs on its own communicator and the collective starts when it
     * has passed (a mismatched collective is never started: MPI would hang
     * or overrun a buffer), so it costs about one small-message latency per
     * collective and no overlap: measured with bench/bench_comm on 2 ranks
     * here, a 64-byte all-reduce takes 9 us with it and 3 us without, noise
     * beside a gradient bucket's milliseconds. Default 1: on. */
    int check_every;
    /* When every rank is on one node, float32 sum and average all-reduces of
     * at least shm_min_bytes bytes go through a shared-memory segment
     * (comm_shm.c: each rank reduces its slice over the ranks in rank order,
     * so every rank gets the same bits, and with 2 ranks MPI's) instead of
     * MPI; 0 = always MPI. They move in pieces of shm_piece_bytes (the
     * segment holds 8 pieces per rank). The environment variables
     * SCALETRAIN_SHM_MIN_BYTES and SCALETRAIN_SHM_PIECE_BYTES override both
     * (SCALETRAIN_SHM_MIN_BYTES=0 turns it off) unless shm_min_bytes is 0;
     * rank 0's values hold for every rank. Default 16 KiB and 1 MiB. */
    size_t shm_min_bytes, shm_piece_bytes;
} st_comm_config;

#define ST_COMM_CONFIG_INIT                                                                                  \
    { ST_COMM_AUTO, 600.0, 1, 16384, 1048576 }

/* Start the communicator. With ST_COMM_AUTO the MPI backend is used when a
 * launcher's variables are present (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK,
 * PMI_SIZE, or an srun step of more than one task: core/launcher.h) and local otherwise; a
 * single process does not call MPI_Init (a singleton start costs ~0.3 s).
 * ST_COMM_MPI forces MPI (a singleton works). Calls MPI_Init_thread unless MPI
 * is already initialized, in which case the caller keeps ownership of MPI.
 * Rank and world size come from MPI_COMM_WORLD, local rank and size from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): nothing else has to be set.
 * Starts the watchdog thread. Free with st_comm_free. One communicator per
 * process: freeing the one that initialized MPI finalizes it. */
st_status st_comm_init(const st_comm_config *cfg, st_comm **out);

/* The NCCL communicator between the CUDA devices of the job: one rank per
 * GPU, each rank passing the device it opened (its local GPU) and the host
 * communicator `boot` (MPI, or local for one rank), over which rank 0's
 * ncclUniqueId is broadcast; the ranks, their number, the host names and the
 * node-local ranks are boot's. cfg gives the watchdog's timeout (backend and
 * check_every are ignored). Collectives take device pointers of d (an error
 * otherwise) and are queued on d's communication stream after the work
 * already queued on its compute stream (an event); st_comm_wait and
 * st_comm_test watch the collective's end event and NCCL's asynchronous error
 * (a peer that died is an error, not a hang), under the watchdog, which ends
 * the job through boot (MPI_Abort). st_comm_abort calls ncclCommAbort, then
 * boot's abort. AVG is ncclAvg; BF16 and F16 sums are NCCL's (fp32
 * arithmetic inside its kernels). Two ranks on one GPU are refused by NCCL.
 * Free it (st_comm_free) before boot and before the device.
 * ST_ERR_UNSUPPORTED, saying so, in a build without CUDA or NCCL. */
st_status st_comm_nccl_init(st_comm *boot, st_device *d, const st_comm_config *cfg, st_comm **out);
bool st_comm_nccl_built(void); /* this build has the NCCL communicator */
/* ... and NCCL's library loads (src/cuda/libs.h); false with the reason,
 * either missing, in why. */
bool st_comm_nccl_usable(char *why, size_t n);

/* Waits for outstanding operations (under the watchdog), stops the watchdog,
 * frees every request handle still held (they become invalid) and finalizes
 * MPI when st_comm_init initialized it. Accepts NULL. */
void st_comm_free(st_comm *c);

int st_comm_rank(const st_comm *c);
int st_comm_size(const st_comm *c);
int st_comm_local_rank(const st_comm *c); /* among the ranks on this node */
int st_comm_local_size(const st_comm *c);
const char *st_comm_host(const st_comm *c);
const char *st_comm_backend_name(const st_comm *c); /* "local" | "mpi" | "nccl" */
uint64_t st_comm_seq(const st_comm *c); /* sequence number of the last collective started, 0 before any */
/* Whether a collective of c has failed (every later call then fails too); false for NULL. */
bool st_comm_failed(const st_comm *c);

/* The training step, recorded in every later collective and printed in errors. */
void st_comm_set_step(st_comm *c, int64_t step);

/* A buffer for in-place float32 sum/average all-reduces that need no copies:
 * with the shared-memory all-reduce on (MPI, every rank on one node), the
 * ranks map one segment holding each rank's nbytes in its own region, and an
 * all-reduce with send == recv inside this rank's region reduces straight
 * between the regions (comm_shm.c). Meant for the gradient arena: every rank
 * must all-reduce the same offsets of it. Collective: every rank calls it
 * once, in the same place, with the same nbytes. *out is NULL when there is
 * none (one rank, several nodes, another backend, the shared-memory
 * all-reduce off, sizes that differ, a segment that cannot be made: said
 * once on rank 0 where it was expected to work); every rank gets the same
 * answer. The memory is zeroed, 64-byte aligned, stays mapped until
 * st_comm_free and is not freed by the caller. `comm` is an st_comm * (the
 * signature of an allocator hook, graph.h st_arena_hook). */
st_status st_comm_shared_arena(void *comm, size_t nbytes, void **out);

/* ---- Collectives ------------------------------------------------------------
 * Each starts the operation and returns a request in *req; the buffers belong
 * to the operation until st_comm_wait (or a st_comm_test that reports done)
 * returns. `name` (may be NULL) is copied; it must be the same on every rank
 * (the collective check compares it). Counts are elements, not bytes. Every
 * rank must call the same collectives in the same order. Any number may be in
 * flight: past 1024 unfinished, a start first waits for the oldest to finish
 * (its handle stays valid until waited for). */

/* recv[i] = op over ranks of send[i], i < count. In place when send == recv. */
st_status st_comm_all_reduce(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                             st_comm_redop op, const char *name, st_comm_req **req);

/* Reduce send (recv_count * size elements, on every rank) and give rank r the
 * shard [r * recv_count, (r+1) * recv_count) in recv (recv_count elements).
 * Shards are contiguous and equal: a buffer whose length n is not a multiple
 * of the world size is padded by the caller to st_comm_shard_count(n, size) *
 * size elements (zeros, so sums and averages are unchanged); rank r's shard
 * then holds elements [r*k, min((r+1)*k, n)) of the real data, k = the shard
 * count, and the last ranks' shards are partly or wholly padding.
 * In place when recv == send + rank * recv_count (elements); the rest of send
 * is undefined afterwards. */
st_status st_comm_reduce_scatter(st_comm *c, const void *send, void *recv, size_t recv_count,
                                 st_comm_dtype dt, st_comm_redop op, const char *name, st_comm_req **req);

/* recv (send_count * size elements) = the ranks' send buffers in rank order.
 * In place when send == recv + rank * send_count (elements). */
st_status st_comm_all_gather(st_comm *c, const void *send, void *recv, size_t send_count, st_comm_dtype dt,
                             const char *name, st_comm_req **req);

/* recv on `root` = op over ranks of send (count elements); recv is not used
 * on the other ranks (may be NULL there). In place at the root when send ==
 * recv. ZeRO reduces each gradient bucket's piece to the rank that owns it. */
st_status st_comm_reduce(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                         st_comm_redop op, int root, const char *name, st_comm_req **req);

/* Rank r's send holds `size` blocks of count elements; block j goes to rank j,
 * which receives it as its block r: recv[r-th block on rank j] = send[j-th
 * block on rank r]. Not in place. The deterministic reduction uses it to bring
 * every rank's copy of a shard to the shard's owner. */
st_status st_comm_all_to_all(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                             const char *name, st_comm_req **req);

/* buf on every rank = buf on `root`. */
st_status st_comm_broadcast(st_comm *c, void *buf, size_t count, st_comm_dtype dt, int root, const char *name,
                            st_comm_req **req);

st_status st_comm_barrier(st_comm *c, const char *name, st_comm_req **req);

/* Elements per rank in a padded reduce-scatter or all-gather of `count`
 * elements: ceil(count / size). */
size_t st_comm_shard_count(size_t count, int size);

/* ---- Completion and progress ------------------------------------------------
 * st_comm_wait blocks until *req is done, releases it and sets *req = NULL
 * (a NULL *req returns at once). st_comm_test does the same when the
 * operation is done (and sets *done); otherwise it drives progress and
 * returns with *done = false. A failed operation returns its error and is
 * released as well. After a collective fails the communicator is broken: every
 * later call returns the same error. */
st_status st_comm_wait(st_comm_req **req);
st_status st_comm_test(st_comm_req **req, bool *done);
st_status st_comm_wait_all(st_comm *c); /* every outstanding operation; handles stay valid until waited */
/* A device communicator's (NCCL's) collective: make the device's compute
 * stream wait for its end without blocking the host, so that kernels queued
 * there from now on run after it (a buffer it reads or writes can then be
 * reused by them). The request stays the caller's to wait or test. A NULL or
 * completed req returns at once; a host communicator's request is an error
 * (its collectives end only under st_comm_wait). */
st_status st_comm_device_wait(st_comm_req *req);

/* Asynchronous MPI advances only while some thread is inside MPI (OpenMPI has
 * no progress thread for shared memory or TCP): a large all-reduce started
 * before backward and not touched until after it makes almost no progress
 * meanwhile. The backward pass calls st_comm_progress between layers (cheap:
 * one MPI_Testsome over the outstanding requests); it also starts collectives
 * whose collective check has passed, and does this rank's share of the
 * shared-memory all-reduces (shm_min_bytes above) that the other ranks'
 * progress has made possible. Returns the first error of any operation. */
st_status st_comm_progress(st_comm *c);

/* Blocking forms: start, then wait. */
st_status st_comm_all_reduce_sync(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                                  st_comm_redop op, const char *name);
st_status st_comm_broadcast_sync(st_comm *c, void *buf, size_t count, st_comm_dtype dt, int root,
                                 const char *name);
st_status st_comm_barrier_sync(st_comm *c, const char *name);

/* ---- No silent hangs ----------------------------------------------------------
 * A watchdog thread looks at the oldest unfinished collective. When it is
 * older than timeout_s it prints, on stderr, this rank, the collective's name,
 * sequence number and step, and the ranks on this node that have not called
 * it yet (and whether their process is stopped or gone), then ends the whole
 * job with MPI_Abort and a non-zero status. This is the one place where the
 * library ends the process: a rank blocked inside MPI cannot return a status,
 * and the other ranks cannot be released any other way. A rank that dies is
 * usually noticed by mpirun first, which kills the job and names it.
 *
 * st_comm_abort is for a failure that only this rank has seen (an I/O error,
 * a NaN): it prints `reason` with this rank's name and ends every rank with
 * MPI_Abort instead of leaving the others to wait for the timeout; it does not
 * return under MPI. With the local backend it marks the communicator broken
 * and returns. */

/* Collectives started from now on may wait `timeout_s` seconds (> 0) before
 * the watchdog ends the job, in place of timeout_s of the configuration;
 * `knob` (a string that outlives them) names the setting the watchdog's message
 * tells the user to raise. 0 returns to the configured timeout. For waits
 * that are long on purpose: ranks waiting while others write a checkpoint. */
void st_comm_set_timeout(st_comm *c, double timeout_s, const char *knob);
/* The run's stop flag (a signal's number once one asked the run to stop;
 * read, never written): while it is set, a collective that has waited
 * ST_COMM_STOP_NOTE_S seconds since the stop was seen is said once by the
 * watchdog, with the ranks it waits for: a stop that waits on a rank that
 * died (SLURM's --kill-on-bad-exit ends the others with SIGTERM) would
 * otherwise wait in silence until the job is killed or dist.timeout_s. */
#define ST_COMM_STOP_NOTE_S 5.0
#ifndef __cplusplus /* (atomic_int is C's; the CUDA sources do not call it) */
void st_comm_set_stop_flag(st_comm *c, const atomic_int *stop);
#endif
void st_comm_abort(st_comm *c, const char *reason);

#endif
