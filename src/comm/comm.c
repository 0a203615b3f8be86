/* The communicator's front: argument checks, sequence numbers, the pending
 * list the watchdog reads, requests and their completion, error messages.
 * The data movement is the backends' (comm_local.c, comm_mpi.c). */
#include "comm/comm_impl.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/launcher.h"
#include "core/ticker.h"

double st_comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *st_comm_kind_name(st_comm_kind k) {
    switch (k) {
    case ST_COMM_KIND_ALL_REDUCE:
        return "all-reduce";
    case ST_COMM_KIND_REDUCE_SCATTER:
        return "reduce-scatter";
    case ST_COMM_KIND_ALL_GATHER:
        return "all-gather";
    case ST_COMM_KIND_BROADCAST:
        return "broadcast";
    case ST_COMM_KIND_BARRIER:
        return "barrier";
    case ST_COMM_KIND_REDUCE:
        return "reduce";
    case ST_COMM_KIND_ALL_TO_ALL:
        return "all-to-all";
    case ST_COMM_KIND_INTERNAL:
        return "internal step";
    }
    return "unknown collective";
}

const char *st_comm_dtype_name(st_comm_dtype dt) {
    switch (dt) {
    case ST_COMM_F32:
        return "float32";
    case ST_COMM_I64:
        return "int64";
    case ST_COMM_U8:
        return "uint8";
    case ST_COMM_BF16:
        return "bfloat16";
    case ST_COMM_F16:
        return "float16";
    case ST_COMM_F64:
        return "float64";
    }
    return "unknown type";
}

const char *st_comm_redop_name(st_comm_redop op) {
    switch (op) {
    case ST_COMM_SUM:
        return "sum";
    case ST_COMM_AVG:
        return "avg";
    case ST_COMM_MIN:
        return "min";
    case ST_COMM_MAX:
        return "max";
    }
    return "unknown reduction";
}

size_t st_comm_dtype_size(st_comm_dtype dt) {
    switch (dt) {
    case ST_COMM_F32:
        return 4;
    case ST_COMM_I64:
    case ST_COMM_F64:
        return 8;
    case ST_COMM_U8:
        return 1;
    case ST_COMM_BF16:
    case ST_COMM_F16:
        return 2;
    }
    return 0;
}

void st_comm_describe(const st_comm_req *r, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s '%s' (seq %llu, step %lld", st_comm_kind_name(r->kind), r->name,
                     (unsigned long long)r->seq, (long long)r->step);
    if (n < 0 || (size_t)n >= cap) return;
    switch (r->kind) {
    case ST_COMM_KIND_ALL_REDUCE:
    case ST_COMM_KIND_REDUCE_SCATTER:
        snprintf(buf + n, cap - n, ", %zu x %s, %s)", r->count, st_comm_dtype_name(r->dt),
                 st_comm_redop_name(r->op));
        break;
    case ST_COMM_KIND_REDUCE:
        snprintf(buf + n, cap - n, ", %zu x %s, %s to rank %d)", r->count, st_comm_dtype_name(r->dt),
                 st_comm_redop_name(r->op), r->root);
        break;
    case ST_COMM_KIND_ALL_TO_ALL:
    case ST_COMM_KIND_ALL_GATHER:
        snprintf(buf + n, cap - n, ", %zu x %s per rank)", r->count, st_comm_dtype_name(r->dt));
        break;
    case ST_COMM_KIND_BROADCAST:
        snprintf(buf + n, cap - n, ", %zu x %s from rank %d)", r->count, st_comm_dtype_name(r->dt), r->root);
        break;
    default:
        snprintf(buf + n, cap - n, ")");
        break;
    }
}

static void prefix(const st_comm *c, char *buf, size_t cap) {
    snprintf(buf, cap, "rank %d of %d (host %s)", c->rank, c->size, c->host);
}

st_status st_comm_fail(st_comm *c, const st_comm_req *r, st_status code, const char *fmt, ...) {
    char who[160], what[256] = "", msg[ST_COMM_ERR_MAX / 2];
    prefix(c, who, sizeof who);
    if (r) st_comm_describe(r, what, sizeof what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->failed == ST_OK) {
        snprintf(c->errmsg, sizeof c->errmsg, "%s: %s%s%s", who, what, r ? ": " : "", msg);
        c->failed = code;
        /* The error is reported through the status: the watchdog stops
         * watching what can no longer finish. */
        pthread_mutex_lock(&c->lock);
        c->n_pending = 0;
        pthread_mutex_unlock(&c->lock);
    }
    return st_fail(c->failed, "%s", c->errmsg);
}

static st_status broken(const st_comm *c) { return st_fail(c->failed, "%s", c->errmsg); }

/* ---- The pending list --------------------------------------------------------- */

static void pending_remove(st_comm *c, const st_comm_req *r) {
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_pending; i++) {
        if (c->pending[i] != r) continue;
        memmove(&c->pending[i], &c->pending[i + 1], (size_t)(c->n_pending - i - 1) * sizeof c->pending[0]);
        c->n_pending--;
        break;
    }
    pthread_mutex_unlock(&c->lock);
}

void st_comm_req_done(st_comm *c, st_comm_req *r) {
    if (r->op == ST_COMM_AVG && r->dt == ST_COMM_F32 && !c->ops->native_avg && !r->averaged &&
        (r->kind == ST_COMM_KIND_ALL_REDUCE || r->kind == ST_COMM_KIND_REDUCE_SCATTER ||
         (r->kind == ST_COMM_KIND_REDUCE && r->root == c->rank)) &&
        c->size > 1) {
        float *y = r->recv; /* (count) */
        const float n = (float)c->size;
        for (size_t i = 0; i < r->count; i++)
            y[i] /= n;
    }
    pthread_mutex_lock(&c->lock);
    r->state = ST_COMM_REQ_DONE;
    pthread_mutex_unlock(&c->lock);
    pending_remove(c, r);
}

void st_comm_watch_begin(st_comm *c, st_comm_req *r, const char *name) {
    memset(r, 0, sizeof *r);
    r->comm = c;
    r->kind = ST_COMM_KIND_INTERNAL;
    r->step = c->step;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->t_start = st_comm_now();
    r->limit_s = c->limit_s;
    r->knob = c->knob;
    r->state = ST_COMM_REQ_RUNNING;
    pthread_mutex_lock(&c->lock);
    if (c->n_pending < ST_COMM_MAX_PENDING) c->pending[c->n_pending++] = r;
    pthread_mutex_unlock(&c->lock);
}

void st_comm_watch_end(st_comm *c, st_comm_req *r) { pending_remove(c, r); }

void st_comm_set_timeout(st_comm *c, double timeout_s, const char *knob) {
    if (!c) return;
    c->limit_s = timeout_s > 0 ? timeout_s : 0;
    c->knob = timeout_s > 0 ? knob : NULL;
}

void st_comm_set_stop_flag(st_comm *c, const atomic_int *stop) {
    if (!c) return;
    pthread_mutex_lock(&c->lock); /* (the watchdog reads it under the lock) */
    c->stop = stop;
    pthread_mutex_unlock(&c->lock);
}

/* ---- Requests ------------------------------------------------------------------ */

/* Whether r is one of the requests made with the communicator (spare_block). */
static bool in_block(const st_comm *c, const st_comm_req *r) {
    const char *p = (const char *)r;
    return c->spare_block && p >= c->spare_block &&
           p < c->spare_block + (size_t)ST_COMM_SPARE_START * c->ops->req_size;
}

static void req_free(st_comm *c, st_comm_req *r) {
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        c->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    if (c->n_spare < ST_COMM_MAX_PENDING || in_block(c, r)) { /* kept for the next (start) */
        r->live_next = c->spare;
        c->spare = r;
        c->n_spare++;
    } else {
        free(r);
    }
}

/* The caller lets go of r. A request the engine still owns (a broken
 * communicator left it unfinished) is freed by st_comm_free. */
static void req_release(st_comm *c, st_comm_req *r) {
    r->released = true;
    if (r->state == ST_COMM_REQ_DONE) req_free(c, r);
}

static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *pa = a, *pb = b;
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* With ST_COMM_MAX_PENDING collectives unfinished, finish the oldest before
 * posting another. It can finish: every rank posts the same sequence, so the
 * others have posted it too or will (and the watchdog names it if one never
 * does). Under ZeRO-2 with many ranks a bucket's reductions, one per owner,
 * reach this. The caller's handles stay valid: a finished request is freed
 * when its caller waits for it. */
static st_status make_room(st_comm *c, const char *who, const char *what) {
    while (!c->failed && c->n_pending >= ST_COMM_MAX_PENDING) {
        bool collective = false;
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < c->n_pending && !collective; i++)
            collective = c->pending[i]->kind != ST_COMM_KIND_INTERNAL;
        pthread_mutex_unlock(&c->lock);
        if (!collective)
            return st_fail(ST_ERR_INTERNAL, "%s: %s: %d internal steps are being watched at once", who, what,
                           c->n_pending);
        const st_status s = c->ops->progress(c, true);
        if (s != ST_OK) return c->failed ? broken(c) : s;
    }
    return c->failed ? broken(c) : ST_OK;
}

/* Validate, number, list and start one collective. */
static st_status start(st_comm *c, st_comm_kind kind, const void *send, void *recv, size_t count,
                       st_comm_dtype dt, st_comm_redop op, int root, const char *name, st_comm_req **out) {
    if (!out)
        return st_fail(ST_ERR_ARG, "%s: no place for the request handle (req is NULL)",
                       st_comm_kind_name(kind));
    *out = NULL;
    if (!c) return st_fail(ST_ERR_ARG, "%s: the communicator is NULL", st_comm_kind_name(kind));
    if (c->failed) return broken(c);
    st_comm_req probe = {.comm = c,
                         .seq = c->seq + 1,
                         .step = c->step,
                         .kind = kind,
                         .dt = dt,
                         .op = op,
                         .count = count,
                         .root = root};
    snprintf(probe.name, sizeof probe.name, "%s", name ? name : st_comm_kind_name(kind));
    char who[160], what[256];
    prefix(c, who, sizeof who);
    st_comm_describe(&probe, what, sizeof what);
#define BAD(...) return st_fail_context(st_fail(ST_ERR_ARG, __VA_ARGS__), "%s: %s: ", who, what)
    size_t es = st_comm_dtype_size(dt);
    if (kind != ST_COMM_KIND_BARRIER) {
        if (!es) BAD("unknown element type %d", (int)dt);
        if (count > (size_t)INT_MAX && !c->ops->large_counts)
            BAD("count %zu is more than an MPI count can hold (%d); split the buffer (NCCL's counts, on "
                "GPUs, have no such limit)",
                count, INT_MAX);
    }
    size_t world = (size_t)c->size;
    if (es && count > SIZE_MAX / world / es)
        BAD("count %zu times %d ranks overflows a buffer size", count, c->size);
    size_t nsend = 0, nrecv = 0; /* bytes */
    switch (kind) {
    case ST_COMM_KIND_ALL_REDUCE:
        nsend = nrecv = count * es;
        break;
    case ST_COMM_KIND_REDUCE_SCATTER:
        nsend = count * world * es;
        nrecv = count * es;
        break;
    case ST_COMM_KIND_ALL_GATHER:
        nsend = count * es;
        nrecv = count * world * es;
        break;
    case ST_COMM_KIND_BROADCAST:
        nrecv = count * es;
        break;
    case ST_COMM_KIND_REDUCE: /* recv matters at the root only */
        nsend = count * es;
        nrecv = root == c->rank ? count * es : 0;
        break;
    case ST_COMM_KIND_ALL_TO_ALL:
        nsend = nrecv = count * world * es;
        break;
    default:
        break;
    }
    if (kind == ST_COMM_KIND_ALL_REDUCE || kind == ST_COMM_KIND_REDUCE_SCATTER || kind == ST_COMM_KIND_REDUCE) {
        bool ok = (op == ST_COMM_SUM || op == ST_COMM_AVG || op == ST_COMM_MIN || op == ST_COMM_MAX);
        if (!ok) BAD("unknown reduction %d", (int)op);
        if (op == ST_COMM_AVG && dt != ST_COMM_F32)
            BAD("avg needs float32 elements, not %s", st_comm_dtype_name(dt));
        if (op == ST_COMM_SUM && dt == ST_COMM_U8) BAD("sum of uint8 elements would wrap; use min or max");
        if ((dt == ST_COMM_BF16 || dt == ST_COMM_F16) && op != ST_COMM_SUM)
            BAD("%s elements support only sum", st_comm_dtype_name(dt));
    }
    if ((kind == ST_COMM_KIND_BROADCAST || kind == ST_COMM_KIND_REDUCE) && (root < 0 || root >= c->size))
        BAD("root %d is not a rank (0..%d)", root, c->size - 1);
    if (nsend && !send) BAD("the send buffer is NULL");
    if (nrecv && !recv) BAD("the receive buffer is NULL");
    if (nsend && nrecv && send != recv) {
        bool in_place = false;
        if (kind == ST_COMM_KIND_REDUCE_SCATTER)
            in_place = (const char *)recv == (const char *)send + (size_t)c->rank * count * es;
        if (kind == ST_COMM_KIND_ALL_GATHER)
            in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count * es;
        if (!in_place && ranges_overlap(send, nsend, recv, nrecv))
            BAD("the send and receive buffers overlap without being in place (see comm.h)");
    } else if (send == recv && kind == ST_COMM_KIND_ALL_TO_ALL && nsend && c->size > 1) {
        BAD("all-to-all cannot run in place; give it a separate receive buffer");
    } else if (send == recv && kind != ST_COMM_KIND_ALL_REDUCE && kind != ST_COMM_KIND_REDUCE && nsend && nrecv &&
               c->size > 1) {
        if (kind == ST_COMM_KIND_REDUCE_SCATTER && c->rank != 0)
            BAD("in place needs recv == send + rank * recv_count");
        if (kind == ST_COMM_KIND_ALL_GATHER && c->rank != 0)
            BAD("in place needs send == recv + rank * send_count");
    }
#undef BAD
    ST_TRY(make_room(c, who, what));

    st_comm_req *r = c->spare;
    if (r) {
        c->spare = r->live_next;
        c->n_spare--;
        memset(r, 0, c->ops->req_size);
    } else {
        r = calloc(1, c->ops->req_size);
        if (!r) return st_fail(ST_ERR_NOMEM, "%s: %s: no memory for a request", who, what);
    }
    *r = probe;
    r->send = send;
    r->recv = recv;
    r->t_start = st_comm_now();
    r->limit_s = c->limit_s;
    r->knob = c->knob;
    r->live_next = c->live;
    if (c->live) c->live->live_prev = r;
    c->live = r;
    c->seq = r->seq;
    pthread_mutex_lock(&c->lock);
    r->state = ST_COMM_REQ_QUEUED;
    c->pending[c->n_pending++] = r;
    pthread_mutex_unlock(&c->lock);
    st_status s = c->ops->start(c, r);
    if (s != ST_OK) {
        req_release(c, r);
        return s;
    }
    *out = r;
    return ST_OK;
}

st_status st_comm_all_reduce(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                             st_comm_redop op, const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_ALL_REDUCE, send, recv, count, dt, op, 0, name, req);
}

st_status st_comm_reduce_scatter(st_comm *c, const void *send, void *recv, size_t recv_count,
                                 st_comm_dtype dt, st_comm_redop op, const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0, name, req);
}

st_status st_comm_all_gather(st_comm *c, const void *send, void *recv, size_t send_count, st_comm_dtype dt,
                             const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_ALL_GATHER, send, recv, send_count, dt, ST_COMM_SUM, 0, name, req);
}

st_status st_comm_broadcast(st_comm *c, void *buf, size_t count, st_comm_dtype dt, int root, const char *name,
                            st_comm_req **req) {
    return start(c, ST_COMM_KIND_BROADCAST, buf, buf, count, dt, ST_COMM_SUM, root, name, req);
}

st_status st_comm_reduce(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                         st_comm_redop op, int root, const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_REDUCE, send, recv, count, dt, op, root, name, req);
}

st_status st_comm_all_to_all(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                             const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_ALL_TO_ALL, send, recv, count, dt, ST_COMM_SUM, 0, name, req);
}

st_status st_comm_barrier(st_comm *c, const char *name, st_comm_req **req) {
    return start(c, ST_COMM_KIND_BARRIER, NULL, NULL, 0, ST_COMM_U8, ST_COMM_SUM, 0, name, req);
}

size_t st_comm_shard_count(size_t count, int size) {
    if (size < 1) return count;
    return count / (size_t)size + (count % (size_t)size != 0);
}

/* ---- Completion ---------------------------------------------------------------- */

st_status st_comm_progress(st_comm *c) {
    if (!c) return st_fail(ST_ERR_ARG, "st_comm_progress: the communicator is NULL");
    if (c->failed) return broken(c);
    return c->ops->progress(c, false);
}

st_status st_comm_test(st_comm_req **req, bool *done) {
    if (!req || !done) return st_fail(ST_ERR_ARG, "st_comm_test: req and done must not be NULL");
    *done = false;
    st_comm_req *r = *req;
    if (!r) {
        *done = true;
        return ST_OK;
    }
    st_comm *c = r->comm;
    st_status s = ST_OK;
    if (r->state != ST_COMM_REQ_DONE && !c->failed) s = c->ops->progress(c, false);
    if (r->state == ST_COMM_REQ_DONE) {
        s = r->status;
        if (s != ST_OK) broken(c);
    } else if (c->failed) {
        s = broken(c);
    } else {
        return s;
    }
    *done = true;
    req_release(c, r);
    *req = NULL;
    return s;
}

/* Whether every collective in flight is small (a flag, a count: at most
 * 4 KiB): a wait for one of them is a wait for another rank to get there
 * (its evaluation, its checkpoint write, a late batch), not for data to
 * move, which needs MPI polled without pause. */
static bool in_flight_small(const st_comm *c) {
    for (int i = 0; i < c->n_pending; i++) {
        const st_comm_req *q = c->pending[i];
        size_t n = q->count * st_comm_dtype_size(q->dt);
        if (q->kind == ST_COMM_KIND_ALL_GATHER || q->kind == ST_COMM_KIND_ALL_TO_ALL ||
            q->kind == ST_COMM_KIND_REDUCE_SCATTER)
            n *= (size_t)(c->size > 0 ? c->size : 1);
        if (q->kind != ST_COMM_KIND_INTERNAL && n > 4096) return false;
    }
    return true;
}

st_status st_comm_wait(st_comm_req **req) {
    if (!req) return st_fail(ST_ERR_ARG, "st_comm_wait: req must not be NULL");
    st_comm_req *r = *req;
    if (!r) return ST_OK;
    st_comm *c = r->comm;
    /* A blocking wait spins (MPI_Waitsome polls; NCCL's wait yields):
     * a rank waiting seconds for another's checkpoint or evaluation held a
     * core at 100% meanwhile. When only small collectives are in flight,
     * the wait polls for 1 ms, then sleeps between polls, 10 us at first,
     * doubling up to 200 us: at most 200 us late past the first ms, a few
     * polls a millisecond. */
    double spin_end = 0;
    long pause_ns = 0;
    while (r->state != ST_COMM_REQ_DONE && !c->failed) {
        if (!in_flight_small(c)) {
            if (c->ops->progress(c, true) != ST_OK) break;
            spin_end = 0, pause_ns = 0;
            continue;
        }
        if (c->ops->progress(c, false) != ST_OK) break;
        if (r->state == ST_COMM_REQ_DONE) break;
        const double t = st_comm_now();
        if (spin_end == 0) spin_end = t + 1e-3;
        if (t < spin_end) continue;
        pause_ns = pause_ns ? (pause_ns < 100000 ? 2 * pause_ns : 200000) : 10000;
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
    }
    st_status s = r->state == ST_COMM_REQ_DONE ? r->status : c->failed;
    req_release(c, r);
    *req = NULL;
    if (s != ST_OK || c->failed) return broken(c);
    return ST_OK;
}

st_status st_comm_device_wait(st_comm_req *r) {
    if (!r || r->state == ST_COMM_REQ_DONE) return ST_OK;
    st_comm *c = r->comm;
    if (c->failed) return broken(c);
    if (!c->ops->device_wait)
        return st_fail(ST_ERR_INTERNAL, "st_comm_device_wait: the %s communicator has no device stream",
                       c->ops->name);
    return c->ops->device_wait(c, r);
}

st_status st_comm_wait_all(st_comm *c) {
    if (!c) return st_fail(ST_ERR_ARG, "st_comm_wait_all: the communicator is NULL");
    while (!c->failed && c->n_pending > 0)
        if (c->ops->progress(c, true) != ST_OK) break;
    return c->failed ? broken(c) : ST_OK;
}

st_status st_comm_all_reduce_sync(st_comm *c, const void *send, void *recv, size_t count, st_comm_dtype dt,
                                  st_comm_redop op, const char *name) {
    st_comm_req *r;
    ST_TRY(st_comm_all_reduce(c, send, recv, count, dt, op, name, &r));
    return st_comm_wait(&r);
}

st_status st_comm_broadcast_sync(st_comm *c, void *buf, size_t count, st_comm_dtype dt, int root,
                                 const char *name) {
    st_comm_req *r;
    ST_TRY(st_comm_broadcast(c, buf, count, dt, root, name, &r));
    return st_comm_wait(&r);
}

st_status st_comm_barrier_sync(st_comm *c, const char *name) {
    st_comm_req *r;
    ST_TRY(st_comm_barrier(c, name, &r));
    return st_comm_wait(&r);
}

/* ---- Life cycle ------------------------------------------------------------------ */

bool st_comm_mpi_launched(void) {
    /* srun without an MPI plugin still starts N copies: MPI init then tells
     * whether they see each other (comm_mpi.c reports when they do not). */
    const st_launcher l = st_launcher_get();
    return l.mpi_wired || (!strcmp(l.name, "srun") && l.size > 1);
}

static st_status init_default(st_comm *c, void *arg) {
    (void)arg;
    bool mpi = c->cfg.backend == ST_COMM_MPI || (c->cfg.backend == ST_COMM_AUTO && st_comm_mpi_launched());
    return mpi ? st_comm_mpi_init(c) : st_comm_local_init(c);
}

st_status st_comm_create(const st_comm_config *cfg, st_status (*backend_init)(st_comm *c, void *arg), void *arg,
                         st_comm **out) {
    if (!out) return st_fail(ST_ERR_ARG, "st_comm_init: out is NULL");
    *out = NULL;
    st_comm_config conf = ST_COMM_CONFIG_INIT;
    if (cfg) conf = *cfg;
    if (!(conf.timeout_s >= 0))
        return st_fail(ST_ERR_ARG, "st_comm_init: timeout_s %g must be >= 0 (0 turns the watchdog off)",
                       conf.timeout_s);
    if (conf.check_every < 0)
        return st_fail(ST_ERR_ARG, "st_comm_init: check_every %d must be >= 0 (0 turns the check off)",
                       conf.check_every);
    if (conf.backend != ST_COMM_AUTO && conf.backend != ST_COMM_LOCAL && conf.backend != ST_COMM_MPI)
        return st_fail(ST_ERR_ARG, "st_comm_init: unknown backend %d", (int)conf.backend);
    st_comm *c = calloc(1, sizeof *c);
    if (!c) return st_fail(ST_ERR_NOMEM, "out of memory starting the communicator");
    c->cfg = conf;
    c->size = c->local_size = 1;
    snprintf(c->host, sizeof c->host, "?");
    pthread_mutex_init(&c->lock, NULL);
    st_status s = backend_init(c, arg);
    if (s != ST_OK) {
        if (c->ops && c->ops->free) c->ops->free(c);
        st_watchdog_stop(c->watchdog);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return s;
    }
    /* the requests of the collectives to come, in one allocation (none, if
     * it fails: start allocates each as it needs it, and more when these
     * are all in use) */
    c->spare_block = calloc(ST_COMM_SPARE_START, c->ops->req_size);
    for (int i = 0; c->spare_block && i < ST_COMM_SPARE_START; i++) {
        st_comm_req *r = (st_comm_req *)(void *)(c->spare_block + (size_t)i * c->ops->req_size);
        r->live_next = c->spare;
        c->spare = r;
        c->n_spare++;
    }
    *out = c;
    return ST_OK;
}

st_status st_comm_init(const st_comm_config *cfg, st_comm **out) {
    return st_comm_create(cfg, init_default, NULL, out);
}

st_status st_comm_shared_arena(void *comm, size_t nbytes, void **out) {
    st_comm *c = comm;
    *out = NULL;
    if (!c || !c->ops->shared_arena) return ST_OK;
    return c->ops->shared_arena(c, nbytes, out);
}

void st_comm_free(st_comm *c) {
    if (!c) return;
    if (!c->failed) st_comm_wait_all(c);
    if (c->ops->free) c->ops->free(c); /* finalizes under the watchdog */
    st_watchdog_stop(c->watchdog);
    while (c->live) { /* pop the head: nothing else holds the list now */
        st_comm_req *r = c->live;
        c->live = r->live_next;
        if (!in_block(c, r)) free(r);
    }
    while (c->spare) {
        st_comm_req *r = c->spare;
        c->spare = r->live_next;
        if (!in_block(c, r)) free(r);
    }
    free(c->spare_block);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void st_comm_abort(st_comm *c, const char *reason) {
    if (!c) return;
    char who[160], line[ST_COMM_ERR_MAX];
    prefix(c, who, sizeof who);
    const char *why = reason ? reason : "(no reason given)";
    const size_t n = strlen(who);
    if (!strncmp(why, who, n) && !strncmp(why + n, ": ", 2))
        why += n + 2; /* (st_comm_fail's: named already) */
    snprintf(line, sizeof line, "scaletrain: %s: aborting every rank: %s\n", who, why);
    if (c->size > 1)
        st_ticker_say(line); /* (bounded: standard error on hung storage must not stop the abort) */
    c->ops->abort(c, 1);
    if (!c->failed) st_comm_fail(c, NULL, ST_ERR_INTERNAL, "aborted: %s", why);
}

int st_comm_rank(const st_comm *c) { return c ? c->rank : 0; }
int st_comm_size(const st_comm *c) { return c ? c->size : 1; }
int st_comm_local_rank(const st_comm *c) { return c ? c->local_rank : 0; }
int st_comm_local_size(const st_comm *c) { return c ? c->local_size : 1; }
const char *st_comm_host(const st_comm *c) { return c ? c->host : "?"; }
const char *st_comm_backend_name(const st_comm *c) { return c && c->ops ? c->ops->name : "none"; }
bool st_comm_failed(const st_comm *c) { return c && c->failed != ST_OK; }
uint64_t st_comm_seq(const st_comm *c) { return c ? c->seq : 0; }
void st_comm_set_step(st_comm *c, int64_t step) {
    if (c) c->step = step;
}
