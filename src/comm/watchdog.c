/* The watchdog: a thread that looks at the oldest unfinished collective of a
 * communicator and, when it is older than the timeout, prints what is stuck
 * and ends the job through the backend's abort (MPI_Abort).
 *
 * Why the library ends the process here and nowhere else: the main thread is
 * blocked inside MPI (or will be at its next wait) and cannot return a
 * status, and the other ranks are blocked the same way; only an abort through
 * the runtime releases all of them. The thread calls nothing in MPI but
 * MPI_Abort, and reads the communicator only under its lock.
 *
 * A request may carry its own, longer limit (st_comm_set_timeout: the waits
 * for a checkpoint being written); the others have dist.timeout_s.
 *
 * A rank that was itself stopped (SIGSTOP, a debugger, a frozen VM) must not
 * blame the others when it resumes: the ticker (core/ticker.h) notices that
 * it woke far later than it asked to, and that time does not count towards
 * a collective's age. */
#include "comm/comm_impl.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/text.h"
#include "core/ticker.h"

struct st_watchdog {
    st_comm *c;
    double timeout_s;
    st_ticker *tk;
    double stop_seen; /* when a stop was first seen set (0: not yet) */
    bool stop_said;   /* the stop's wait was said (once a run) */
};

/* `missing`: which ranks have not called r, read under the lock (check). */
static void fire(st_watchdog *w, const st_comm_req *r, double age, double limit, const char *missing) {
    st_comm *c = w->c;
    char what[256], msg[3072];
    st_comm_describe(r, what, sizeof what);
    const char *knob = r->limit_s > 0 && r->knob ? r->knob : "dist.timeout_s";
    snprintf(msg, sizeof msg,
             "scaletrain: rank %d of %d (host %s, pid %d): collective timed out: %s has not finished "
             "after %.1f s (its limit: %g s, %s)\n%s"
             "scaletrain: rank %d: ending every rank (MPI_Abort) so that none waits forever (if the collective "
             "can legitimately take longer, raise %s)\n",
             c->rank, c->size, c->host, (int)getpid(), what, age, limit, knob, missing, c->rank, knob);
    st_ticker_say(msg);
    c->ops->abort(c, 1);
    _exit(1); /* only if the abort returned */
}

/* Seconds r has been waiting while this process ran. */
static double age_of(const st_ticker *tk, const st_comm_req *r, double now) {
    return now - r->t_start - st_ticker_paused_since(tk, r->t_start);
}

/* What fire() reads of a request, copied under the lock: the fields fixed
 * when it was started. Not the whole request: the main thread writes its
 * status (and an average's flag, and `released`) as it finishes it, without
 * the lock (ThreadSanitizer saw the struct copy race with comm_mpi.c's
 * finish). */
static void snapshot(st_comm_req *d, const st_comm_req *r) {
    memset(d, 0, sizeof *d);
    d->seq = r->seq;
    d->step = r->step;
    d->kind = r->kind;
    d->dt = r->dt;
    d->op = r->op;
    d->count = r->count;
    d->root = r->root;
    memcpy(d->name, r->name, sizeof d->name);
    d->t_start = r->t_start;
    d->limit_s = r->limit_s;
    d->knob = r->knob;
}

/* A stop asked while r waits ST_COMM_STOP_NOTE_S seconds past it: said
 * once, with the ranks r waits for (the stop is being agreed or the step
 * finished, and a rank that ended keeps this one waiting). */
static void say_stop_wait(st_watchdog *w, const st_comm_req *r, double waited, double limit,
                          const char *missing) {
    st_comm *c = w->c;
    char what[256], msg[3072];
    st_comm_describe(r, what, sizeof what);
    const int sig = atomic_load_explicit((const atomic_int *)c->stop, memory_order_relaxed);
    char name[16];
    snprintf(
        msg, sizeof msg,
        "scaletrain: rank %d of %d (host %s, pid %d): asked to stop (%s), but %s has waited %.0f s "
        "for the other ranks: a rank may have ended (a node lost, a process killed); this rank waits "
        "until the watchdog ends the job, %.0f s into the wait (%s), or the job is killed; --resume auto "
        "continues from the last checkpoint\n%s",
        c->rank, c->size, c->host, (int)getpid(), st_signal_name(sig, name), what, waited, limit,
        r->limit_s > 0 && r->knob ? r->knob : "dist.timeout_s", missing);
    st_ticker_say(msg);
}

/* Each unfinished request against its own limit (st_comm_set_timeout's, or
 * the communicator's); the first found past it ends the job. */
static void check(void *ctx, st_ticker *tk, double now) {
    st_watchdog *w = ctx;
    st_comm *c = w->c;
    st_comm_req late;
    double late_age = 0, late_limit = 0;
    bool found = false;
    char missing[2048] = "";
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_pending && !found; i++) {
        const st_comm_req *r = c->pending[i];
        if (r->state == ST_COMM_REQ_DONE) continue;
        const double limit = r->limit_s > 0 ? r->limit_s : w->timeout_s, age = age_of(tk, r, now);
        if (age >= limit) {
            snapshot(&late, r);
            late_age = age;
            late_limit = limit;
            found = true;
            /* under the lock, which the backend's shutdown takes to close
             * the board this reads (the request may finish, and the main
             * thread go on to free the communicator, while this fires) */
            if (late.kind != ST_COMM_KIND_INTERNAL)
                c->ops->describe_missing(c, late.seq, missing, sizeof missing);
        }
    }
    /* a stop asked while a collective waits on the others */
    st_comm_req waiting;
    double waited = 0, waiting_limit = 0;
    bool note = false;
    char who[2048] = "";
    if (!found && !w->stop_said && c->stop &&
        atomic_load_explicit((const atomic_int *)c->stop, memory_order_relaxed)) {
        if (w->stop_seen == 0) w->stop_seen = now;
        for (int i = 0; i < c->n_pending && !note; i++) {
            const st_comm_req *r = c->pending[i];
            if (r->state == ST_COMM_REQ_DONE || r->kind == ST_COMM_KIND_INTERNAL) continue;
            const double since = r->t_start > w->stop_seen ? r->t_start : w->stop_seen;
            if (now - since - st_ticker_paused_since(tk, since) < ST_COMM_STOP_NOTE_S) continue;
            snapshot(&waiting, r);
            waited = now - r->t_start;
            waiting_limit = r->limit_s > 0 ? r->limit_s : w->timeout_s;
            note = true;
            c->ops->describe_missing(c, waiting.seq, who, sizeof who);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (found) fire(w, &late, late_age, late_limit, missing);
    if (note) {
        w->stop_said = true;
        say_stop_wait(w, &waiting, waited, waiting_limit, who);
    }
}

st_status st_watchdog_start(st_comm *c, double timeout_s, st_watchdog **out) {
    *out = NULL;
    st_watchdog *w = calloc(1, sizeof *w);
    if (!w) return st_fail(ST_ERR_NOMEM, "rank %d: no memory for the watchdog", c->rank);
    w->c = c;
    w->timeout_s = timeout_s;
    const st_status s = st_ticker_start(st_ticker_period(timeout_s), check, w, "the watchdog", &w->tk);
    if (s != ST_OK) {
        free(w);
        st_fail_context(s, "rank %d of %d (host %s): ", c->rank, c->size, c->host);
        return s;
    }
    *out = w;
    return ST_OK;
}

void st_watchdog_stop(st_watchdog *w) {
    if (!w) return;
    st_ticker_stop(w->tk);
    free(w);
}
