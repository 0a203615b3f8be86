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
 * blame the others when it resumes: its thread notices that it woke far later
 * than it asked to, and that time does not count towards a collective's age. */
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PAUSES_KEPT = 16 };

struct st_watchdog {
    st_comm *c;
    double timeout_s, period_s;
    /* This process's own recent stops: when each ended and how long it was. */
    double pause_end[PAUSES_KEPT], pause_len[PAUSES_KEPT];
    int n_pauses;
    pthread_t thread;
    pthread_mutex_t m;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool stop;
};

static void fire(st_watchdog *w, const st_comm_req *r, double age, double limit) {
    st_comm *c = w->c;
    char what[256], missing[2048] = "", msg[3072];
    st_comm_describe(r, what, sizeof what);
    if (r->kind != ST_COMM_KIND_INTERNAL) c->ops->describe_missing(c, r->seq, missing, sizeof missing);
    const char *knob = r->limit_s > 0 && r->knob ? r->knob : "dist.timeout_s";
    snprintf(msg, sizeof msg,
             "scaletrain: rank %d of %d (host %s, pid %d): collective timed out: %s has not finished "
             "after %.1f s (its limit: %g s, %s)\n%s"
             "scaletrain: rank %d: ending every rank (MPI_Abort) so that none waits forever (if the collective "
             "can legitimately take longer, raise %s)\n",
             c->rank, c->size, c->host, (int)getpid(), what, age, limit, knob, missing, c->rank, knob);
    size_t len = strlen(msg), off = 0;
    while (off < len) { /* one write, so ranks' lines do not interleave */
        ssize_t n = write(2, msg + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
    c->ops->abort(c, 1);
    _exit(1); /* only if the abort returned */
}

/* Seconds r has been waiting while this process ran. */
static double age_of(const st_watchdog *w, const st_comm_req *r, double now) {
    double age = now - r->t_start;
    for (int i = 0; i < w->n_pauses && i < PAUSES_KEPT; i++) /* our own stops since it started */
        if (w->pause_end[i] > r->t_start) {
            double inside = w->pause_end[i] - r->t_start;
            age -= w->pause_len[i] < inside ? w->pause_len[i] : inside;
        }
    return age;
}

/* Each unfinished request against its own limit (st_comm_set_timeout's, or
 * the communicator's); the first found past it ends the job. */
static void check(st_watchdog *w) {
    st_comm *c = w->c;
    st_comm_req late;
    double late_age = 0, late_limit = 0;
    bool found = false;
    const double now = st_comm_now();
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_pending && !found; i++) {
        const st_comm_req *r = c->pending[i];
        if (r->state == ST_COMM_REQ_DONE) continue;
        const double limit = r->limit_s > 0 ? r->limit_s : w->timeout_s, age = age_of(w, r, now);
        if (age >= limit) {
            late = *r;
            late_age = age;
            late_limit = limit;
            found = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (found) fire(w, &late, late_age, late_limit);
}

/* Woke `late` seconds after the time asked for: this process did not run. */
static void note_pause(st_watchdog *w, double now, double late) {
    int i = w->n_pauses++ % PAUSES_KEPT;
    w->pause_end[i] = now;
    w->pause_len[i] = late;
}

static void *run(void *arg) {
    st_watchdog *w = arg;
    pthread_mutex_lock(&w->m);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + w->period_s;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&w->cv, &w->m, &until);
        if (w->stop) break;
        struct timespec woke;
        clock_gettime(CLOCK_MONOTONIC, &woke);
        double now = (double)woke.tv_sec + 1e-9 * (double)woke.tv_nsec;
        /* A scheduler delay is milliseconds; a stop is seconds. */
        if (now - t > 0.5 + w->period_s) note_pause(w, now, now - t);
        pthread_mutex_unlock(&w->m);
        check(w);
        pthread_mutex_lock(&w->m);
    }
    pthread_mutex_unlock(&w->m);
    return NULL;
}

st_status st_watchdog_start(st_comm *c, double timeout_s, st_watchdog **out) {
    *out = NULL;
    st_watchdog *w = calloc(1, sizeof *w);
    if (!w) return st_fail(ST_ERR_NOMEM, "rank %d: no memory for the watchdog", c->rank);
    w->c = c;
    w->timeout_s = timeout_s;
    /* Checked 10 times per timeout, at most once a second: the job ends
     * within timeout + period. */
    w->period_s = timeout_s / 10 < 1.0 ? timeout_s / 10 : 1.0;
    if (w->period_s < 0.01) w->period_s = 0.01;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->m, NULL);
    int e = pthread_create(&w->thread, NULL, run, w);
    if (e != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->m);
        free(w);
        return st_fail(ST_ERR_INTERNAL, "rank %d of %d (host %s): cannot start the watchdog thread: %s",
                       c->rank, c->size, c->host, strerror(e));
    }
    *out = w;
    return ST_OK;
}

void st_watchdog_stop(st_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->m);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->m);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->m);
    free(w);
}
