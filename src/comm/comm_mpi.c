/* The MPI backend: non-blocking collectives (MPI_Iallreduce,
 * MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) on a
 * duplicate of MPI_COMM_WORLD, with MPI_ERRORS_RETURN so that MPI's errors
 * come back as statuses.
 *
 * A collective goes through three states: its collective check (a 16-byte
 * all-reduce on a second communicator, comm_mpi_diag.c) is in flight; it has
 * passed and waits until every earlier collective is posted; it is posted.
 * Posting strictly in sequence order keeps every rank's order on the data
 * communicator the same even when checks finish out of order. Progress
 * (MPI_Testsome or MPI_Waitsome over the active requests) moves them along.
 * When all ranks are on one node, large float32 sum/avg all-reduces are
 * "posted" to the shared-memory all-reduce (comm_shm.c) instead, in the same
 * order, and progress drives both.
 *
 * Not here: a progress thread (the caller drives progress, comm.h says why),
 * NCCL. */
#ifdef ST_NO_MPI /* built where mpicc was not found (Makefile) */
#include "comm/comm_impl.h"

st_status st_comm_mpi_init(st_comm *c) {
    return st_fail(ST_ERR_UNSUPPORTED, "this scaletrain was built without MPI: install libopenmpi-dev "
                                       "(scripts/deps.sh) and rebuild to run on several processes");
}
#else
#include "comm/comm_mpi.h"

#include <stdio.h>

#include "core/half.h"
#include "core/launcher.h"
#include "core/ticker.h"
#include "core/watch.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The watchdog thread calls MPI_Abort while the main thread may be inside
 * MPI: only MPI_THREAD_MULTIPLE makes that legal. Its cost on small
 * all-reduces is measured in bench/bench_comm.c. */
#ifndef ST_COMM_MPI_THREAD
#define ST_COMM_MPI_THREAD MPI_THREAD_MULTIPLE
#endif

st_status st_mpi_fail(st_comm *c, const st_comm_req *r, int rc, const char *call) {
    char words[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, words, &len) != MPI_SUCCESS)
        snprintf(words, sizeof words, "MPI error code %d", rc);
    return st_comm_fail(c, r, ST_ERR_IO, "%s failed: %s", call, words);
}

static MPI_Datatype mpi_type(st_comm_dtype dt) {
    switch (dt) {
    case ST_COMM_F32:
        return MPI_FLOAT;
    case ST_COMM_F64:
        return MPI_DOUBLE;
    case ST_COMM_I64:
        return MPI_INT64_T;
    case ST_COMM_U8:
        return MPI_UINT8_T;
    case ST_COMM_BF16:
    case ST_COMM_F16:
        return MPI_UINT16_T;
    }
    return MPI_DATATYPE_NULL;
}

/* MPI has no 16-bit float type or sum: these user-defined sums widen both
 * operands to fp32, add, and round the partial sum back (comm.h). */
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = st_f32_to_bf16(st_bf16_to_f32(a[i]) + st_bf16_to_f32(b[i]));
}

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = st_f32_to_f16(st_f16_to_f32(a[i]) + st_f16_to_f32(b[i]));
}

static MPI_Op mpi_op(const st_mpi_comm *m, st_comm_redop op, st_comm_dtype dt) {
    if (dt == ST_COMM_BF16) return m->sum_bf16; /* sum only (checked in comm.c) */
    if (dt == ST_COMM_F16) return m->sum_f16;
    switch (op) {
    case ST_COMM_SUM:
    case ST_COMM_AVG:
        return MPI_SUM; /* divided by the size when done */
    case ST_COMM_MIN:
        return MPI_MIN;
    case ST_COMM_MAX:
        return MPI_MAX;
    }
    return MPI_OP_NULL;
}

static void set_state(st_comm *c, st_comm_req *r, st_comm_state s) {
    pthread_mutex_lock(&c->lock);
    r->state = s;
    pthread_mutex_unlock(&c->lock);
}

static const char *mpi_call(st_comm_kind k) {
    switch (k) {
    case ST_COMM_KIND_ALL_REDUCE:
        return "MPI_Iallreduce";
    case ST_COMM_KIND_REDUCE_SCATTER:
        return "MPI_Ireduce_scatter_block";
    case ST_COMM_KIND_ALL_GATHER:
        return "MPI_Iallgather";
    case ST_COMM_KIND_BROADCAST:
        return "MPI_Ibcast";
    case ST_COMM_KIND_BARRIER:
        return "MPI_Ibarrier";
    case ST_COMM_KIND_REDUCE:
        return "MPI_Ireduce";
    case ST_COMM_KIND_ALL_TO_ALL:
        return "MPI_Ialltoall";
    default:
        return "an internal step";
    }
}

static bool rs_in_place(const st_comm *c, const st_comm_req *r) {
    return (const char *)r->recv ==
           (const char *)r->send + (size_t)c->rank * r->count * st_comm_dtype_size(r->dt);
}

static void finish(st_comm *c, st_mpi_req *q) {
    st_comm_req *r = &q->base;
    if (r->kind == ST_COMM_KIND_REDUCE_SCATTER && rs_in_place(c, r) && c->rank != 0)
        memmove(r->recv, r->send, r->count * st_comm_dtype_size(r->dt));
    r->status = ST_OK;
    st_comm_req_done(c, r);
}

static st_status post(st_comm *c, st_mpi_req *q) {
    st_mpi_comm *m = c->impl;
    st_comm_req *r = &q->base;
    MPI_Datatype t = mpi_type(r->dt);
    int n = (int)r->count;
    int rc = MPI_SUCCESS;
    void *send = (void *)r->send;
    if (q->shm) { /* posted to shared memory while its check ran, and the check passed */
        if (q->shm_done)
            finish(c, q);
        else
            set_state(c, r, ST_COMM_REQ_RUNNING);
        return ST_OK;
    }
    switch (r->kind) {
    case ST_COMM_KIND_ALL_REDUCE:
        rc = MPI_Iallreduce(send == r->recv ? MPI_IN_PLACE : send, r->recv, n, t, mpi_op(m, r->op, r->dt),
                            m->data, &q->data);
        break;
    case ST_COMM_KIND_REDUCE_SCATTER:
        /* MPI's in-place form leaves the shard at the start of the buffer;
         * finish() moves it to rank * count. */
        if (rs_in_place(c, r))
            rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, send, n, t, mpi_op(m, r->op, r->dt), m->data,
                                           &q->data);
        else
            rc = MPI_Ireduce_scatter_block(send, r->recv, n, t, mpi_op(m, r->op, r->dt), m->data, &q->data);
        break;
    case ST_COMM_KIND_ALL_GATHER:
        if ((const char *)send ==
            (const char *)r->recv + (size_t)c->rank * r->count * st_comm_dtype_size(r->dt))
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->recv, n, t, m->data, &q->data);
        else
            rc = MPI_Iallgather(send, n, t, r->recv, n, t, m->data, &q->data);
        break;
    case ST_COMM_KIND_BROADCAST:
        rc = MPI_Ibcast(r->recv, n, t, r->root, m->data, &q->data);
        break;
    case ST_COMM_KIND_BARRIER:
        rc = MPI_Ibarrier(m->data, &q->data);
        break;
    case ST_COMM_KIND_REDUCE:
        rc = MPI_Ireduce(send == r->recv && r->root == c->rank ? MPI_IN_PLACE : send, r->recv, n, t,
                         mpi_op(m, r->op, r->dt), r->root, m->data, &q->data);
        break;
    case ST_COMM_KIND_ALL_TO_ALL:
        rc = MPI_Ialltoall(send, n, t, r->recv, n, t, m->data, &q->data);
        break;
    default:
        return st_comm_fail(c, r, ST_ERR_INTERNAL, "cannot post an internal step");
    }
    if (rc != MPI_SUCCESS) return st_mpi_fail(c, r, rc, mpi_call(r->kind));
    set_state(c, r, ST_COMM_REQ_RUNNING);
    return ST_OK;
}

/* Post every queued collective whose predecessors are all posted. A
 * shared-memory all-reduce is posted (its data copied in) while its check is
 * still in flight: it cannot overrun a buffer or hang MPI, and it does not
 * complete until the check has passed. */
static st_status post_ready(st_comm *c) {
    st_mpi_comm *m = c->impl;
    for (int i = 0; i < c->n_pending; i++) {
        st_comm_req *r = c->pending[i];
        st_mpi_req *q = (st_mpi_req *)r;
        if (r->kind == ST_COMM_KIND_INTERNAL || r->state == ST_COMM_REQ_RUNNING) continue;
        if (r->state == ST_COMM_REQ_CHECKING || (r->state == ST_COMM_REQ_QUEUED && !q->shm)) {
            if (!q->shm && st_shm_takes(m->shm, r)) {
                q->shm = true;
                st_shm_post(m->shm, r);
            }
            if (q->shm && r->state == ST_COMM_REQ_CHECKING) continue;
        }
        if (r->state != ST_COMM_REQ_QUEUED) break; /* still being checked: later ones wait */
        ST_TRY(post(c, q));
        if (r->state == ST_COMM_REQ_DONE) i--; /* finished at once and taken off the list */
    }
    return ST_OK;
}

static st_status mpi_start(st_comm *c, st_comm_req *r) {
    st_mpi_comm *m = c->impl;
    st_mpi_req *q = (st_mpi_req *)r;
    q->check = q->data = MPI_REQUEST_NULL;
    q->shm = q->shm_done = false;
    st_mpi_board_note(c, r->seq, r->step);
    int every = c->cfg.check_every;
    if (every > 0 && c->size > 1 && (r->seq - 1) % (uint64_t)every == 0) {
        st_mpi_check_start_values(r, q->fp_in);
        int rc = MPI_Iallreduce(q->fp_in, q->fp_out, 2, MPI_UINT64_T, MPI_MIN, m->check, &q->check);
        if (rc != MPI_SUCCESS) return st_mpi_fail(c, r, rc, "MPI_Iallreduce (collective check)");
        set_state(c, r, ST_COMM_REQ_CHECKING);
    }
    ST_TRY(post_ready(c));
    /* A shared-memory all-reduce copies this rank's data in now, so that the
     * others can reduce their slices of it before this rank comes back. */
    bool moved = false;
    if (st_shm_busy(m->shm)) st_shm_progress(m->shm, c, &moved);
    return ST_OK;
}

/* MPI's side of progress: test (or with `block`, wait for) the checks and
 * collectives in flight; *moved when one finished. */
static st_status mpi_poll(st_comm *c, bool block, bool *moved) {
    st_mpi_comm *m = c->impl;
    int n = 0;
    for (int i = 0; i < c->n_pending; i++) {
        st_comm_req *r = c->pending[i];
        st_mpi_req *q = (st_mpi_req *)r;
        if (r->kind == ST_COMM_KIND_INTERNAL) continue;
        if (r->state == ST_COMM_REQ_CHECKING) {
            m->reqs[n] = q->check;
            m->is_check[n] = true;
        } else if (r->state == ST_COMM_REQ_RUNNING && !q->shm) {
            m->reqs[n] = q->data;
            m->is_check[n] = false;
        } else {
            continue;
        }
        m->owner[n++] = q;
    }
    if (n == 0) return post_ready(c);
    int done = 0;
    int rc = block ? MPI_Waitsome(n, m->reqs, &done, m->idx, m->statuses)
                   : MPI_Testsome(n, m->reqs, &done, m->idx, m->statuses);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
        return st_mpi_fail(c, &m->owner[0]->base, rc, block ? "MPI_Waitsome" : "MPI_Testsome");
    if (done == MPI_UNDEFINED) done = 0;
    if (done > 0) *moved = true;
    for (int k = 0; k < done; k++) {
        int j = m->idx[k];
        st_mpi_req *q = m->owner[j];
        int err = rc == MPI_ERR_IN_STATUS ? m->statuses[k].MPI_ERROR : MPI_SUCCESS;
        if (m->is_check[j]) {
            q->check = MPI_REQUEST_NULL;
            if (err != MPI_SUCCESS) return st_mpi_fail(c, &q->base, err, "MPI_Iallreduce (collective check)");
            ST_TRY(st_mpi_check_result(c, q));
            set_state(c, &q->base, ST_COMM_REQ_QUEUED);
        } else {
            q->data = MPI_REQUEST_NULL;
            if (err != MPI_SUCCESS) return st_mpi_fail(c, &q->base, err, mpi_call(q->base.kind));
            finish(c, q);
        }
    }
    return post_ready(c);
}

/* With shared-memory all-reduces in flight a wait must not block inside MPI:
 * a peer may need this rank's part of one before it can post the MPI
 * collective this rank would wait for. It spins over both instead. */
static st_status mpi_progress(st_comm *c, bool block) {
    st_mpi_comm *m = c->impl;
    for (int spins = 0;; spins++) {
        bool moved = false;
        if (!st_shm_busy(m->shm)) return mpi_poll(c, block, &moved);
        ST_TRY(mpi_poll(c, false, &moved));
        if (st_shm_busy(m->shm)) st_shm_progress(m->shm, c, &moved);
        if (!block || moved) return ST_OK;
        st_shm_relax(spins);
    }
}

static void mpi_describe_missing(st_comm *c, uint64_t seq, char *buf, size_t cap) {
    st_mpi_describe_missing(c, seq, buf, cap);
    st_mpi_comm *m = c->impl;
    size_t len = strlen(buf);
    if (!m || !m->shm || len + 200 >= cap) return;
    char where[1024];
    if (!st_shm_describe(m->shm, where, sizeof where)) return;
    snprintf(
        buf + len, cap - len,
        "scaletrain: rank %d: shared-memory all-reduce, the last piece each rank copied in/reduced/copied "
        "out: %s\n",
        c->rank, where);
}

static void mpi_abort(st_comm *c, int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void free_comm(MPI_Comm *cm) {
    if (*cm != MPI_COMM_NULL) MPI_Comm_free(cm);
}

static void mpi_free(st_comm *c) {
    st_mpi_comm *m = c->impl;
    if (!m) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        /* Collective calls: if another rank never gets here, the watchdog
         * names this step instead of hanging. */
        st_comm_req watch;
        st_comm_watch_begin(c, &watch, "shutdown (MPI_Win_free, MPI_Finalize)");
        if (!c->failed) {
            st_mpi_board_close(c);
            free_comm(&m->diag);
            free_comm(&m->check);
            free_comm(&m->data);
            free_comm(&m->node);
        }
        st_mpi_shm_close(c);
        if (m->sum_bf16 != MPI_OP_NULL) MPI_Op_free(&m->sum_bf16);
        if (m->sum_f16 != MPI_OP_NULL) MPI_Op_free(&m->sum_f16);
        /* After a failure the communicators may hold collectives that will
         * never finish; MPI_Finalize cleans up without them. */
        if (m->own_mpi) MPI_Finalize();
        st_comm_watch_end(c, &watch);
    }
    free(m->reqs);
    free(m->owner);
    free(m->is_check);
    free(m->idx);
    free(m->statuses);
    free(m);
    c->impl = NULL;
}

static const st_comm_ops mpi_ops = {
    .name = "mpi",
    .req_size = sizeof(st_mpi_req),
    .start = mpi_start,
    .progress = mpi_progress,
    .describe_missing = mpi_describe_missing,
    .abort = mpi_abort,
    .shared_arena = st_mpi_shm_arena,
    .free = mpi_free,
};

static st_status dup_world(st_comm *c, MPI_Comm *out) {
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
    if (rc != MPI_SUCCESS) return st_mpi_fail(c, NULL, rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return ST_OK;
}

/* srun without an MPI plugin that this MPI understands starts N singletons. */
static st_status check_srun(st_comm *c) {
    const st_launcher l = st_launcher_get();
    if (strcmp(l.name, "srun") != 0 || l.size <= 1 || c->size != 1) return ST_OK;
    return st_comm_fail(c, NULL, ST_ERR_CONFIG,
                        "srun started %ld tasks but MPI sees a single rank, so each would train alone; "
                        "start with `srun --mpi=pmix` (Debian's OpenMPI has no PMI2), or under mpirun",
                        l.size);
}

static st_status mpi_open(st_comm *c) {
    st_mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return st_fail(ST_ERR_NOMEM, "out of memory starting the communicator");
    c->ops = &mpi_ops;
    c->impl = m;
    m->data = m->check = m->diag = m->node = MPI_COMM_NULL;
    m->sum_bf16 = m->sum_f16 = MPI_OP_NULL;
    m->win = MPI_WIN_NULL;
    size_t np = ST_COMM_MAX_PENDING;
    m->reqs = calloc(np, sizeof *m->reqs);
    m->owner = calloc(np, sizeof *m->owner);
    m->is_check = calloc(np, sizeof *m->is_check);
    m->idx = calloc(np, sizeof *m->idx);
    m->statuses = calloc(np, sizeof *m->statuses);
    if (!m->reqs || !m->owner || !m->is_check || !m->idx || !m->statuses)
        return st_fail(ST_ERR_NOMEM, "out of memory starting the communicator");
    if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "?");
    c->host[sizeof c->host - 1] = '\0';

    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        /* MPI_Init_thread waits for every rank to start MPI: one that
         * failed before (a config error of its own, under an srun whose
         * step goes on when a task fails) would hold the others here for
         * ever, where the watchdog does not run yet */
        char who[256];
        const char *r = st_launcher_get().rank;
        snprintf(who, sizeof who, "rank %s (host %s, pid %d)", r ? r : "?", c->host, (int)getpid());
        st_watch *w = st_watch_one((double)c->cfg.timeout_s, who, "dist.timeout_s",
                                   "another rank did not start MPI: it may have failed before it could (its "
                                   "error is in its output), or its node is unreachable",
                                   "nothing was done", "starting MPI (MPI_Init_thread) with the other ranks");
        rc = MPI_Init_thread(NULL, NULL, ST_COMM_MPI_THREAD, &provided);
        st_watch_stop(w);
        if (rc != MPI_SUCCESS)
            return st_fail(
                ST_ERR_IO,
                "host %s: MPI_Init_thread failed (MPI error %d; OpenMPI's own message above says "
                "why): start the ranks with mpirun, srun --mpi=pmix or scaletrain launch, from the "
                "same OpenMPI as this build's (`scaletrain check` tests it)",
                c->host, rc);
        m->own_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    char proc[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(proc, &len) == MPI_SUCCESS && len > 0)
        snprintf(c->host, sizeof c->host, "%s", proc);
    ST_TRY(check_srun(c));
    if (provided < ST_COMM_MPI_THREAD && c->cfg.timeout_s > 0 && c->rank == 0)
        st_ticker_sayf("scaletrain: warning: MPI gives thread level %d, not %d: the watchdog's MPI_Abort "
                       "from its own thread is not covered by the standard\n",
                       provided, ST_COMM_MPI_THREAD);

    if (c->cfg.timeout_s > 0) ST_TRY(st_watchdog_start(c, c->cfg.timeout_s, &c->watchdog));
    st_comm_req watch;
    st_comm_watch_begin(c, &watch,
                        "start-up (MPI_Comm_dup, MPI_Comm_split_type, MPI_Win_allocate_shared, shm_open)");
    st_status s = ST_OK;
    if ((s = dup_world(c, &m->data)) != ST_OK || (s = dup_world(c, &m->check)) != ST_OK ||
        (s = dup_world(c, &m->diag)) != ST_OK)
        goto done;
    rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &m->node);
    if (rc != MPI_SUCCESS) {
        s = st_mpi_fail(c, NULL, rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
        goto done;
    }
    MPI_Comm_set_errhandler(m->node, MPI_ERRORS_RETURN);
    if ((rc = MPI_Op_create(sum_bf16, 1, &m->sum_bf16)) != MPI_SUCCESS ||
        (rc = MPI_Op_create(sum_f16, 1, &m->sum_f16)) != MPI_SUCCESS) {
        s = st_mpi_fail(c, NULL, rc, "MPI_Op_create");
        goto done;
    }
    MPI_Comm_rank(m->node, &c->local_rank);
    MPI_Comm_size(m->node, &c->local_size);
    st_mpi_board_open(c);
    s = st_mpi_shm_open(c);
done:
    st_comm_watch_end(c, &watch);
    return s;
}

/* A rank whose start-up fails on its own (out of memory, a collective
 * that failed here) leaves the others waiting in start-up's collectives,
 * and its finalize would wait for them: it ends them all now, naming
 * itself and why, rather than leave them to the watchdog's timeout. */
st_status st_comm_mpi_init(st_comm *c) {
    const st_status s = mpi_open(c);
    if (s != ST_OK && c->size > 1 && c->ops) {
        char why[ST_COMM_ERR_MAX];
        snprintf(why, sizeof why, "%s", st_last_error());
        st_comm_abort(c, why);
        return st_fail(s, "%s", why); /* (if the abort returns) */
    }
    return s;
}
#endif
