/* The ticker (see ticker.h). */
#include "core/ticker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PAUSES_KEPT = 16 };

struct st_ticker {
    double period_s;
    st_tick_fn fn;
    void *ctx;
    /* This process's own recent stops: when each ended and how long it was. */
    double pause_end[PAUSES_KEPT], pause_len[PAUSES_KEPT];
    int n_pauses;
    pthread_t thread;
    pthread_mutex_t m;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool stop;
};

double st_ticker_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double st_ticker_paused_since(const st_ticker *t, double since) {
    double paused = 0;
    for (int i = 0; i < t->n_pauses && i < PAUSES_KEPT; i++)
        if (t->pause_end[i] > since) {
            const double inside = t->pause_end[i] - since;
            paused += t->pause_len[i] < inside ? t->pause_len[i] : inside;
        }
    return paused;
}

double st_ticker_period(double limit_s) {
    const double p = limit_s / 10 < 1.0 ? limit_s / 10 : 1.0;
    return p < 0.01 ? 0.01 : p;
}

static void say_text(const char *msg) {
    const size_t len = strlen(msg);
    size_t off = 0;
    while (off < len) {
        const ssize_t n = write(2, msg + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
}

/* A say on a thread of its own, which its caller may leave inside its write
 * (standard error on storage that stopped answering). While one is left
 * there, standard error takes no bytes: a new say would only hold its
 * caller for its whole limit and leave one more thread, so it is dropped
 * and counted, and the next say that gets through says how many were. */
typedef struct say_msg {
    atomic_int state; /* SAY_WRITING, then SAY_LEFT (its caller gave up) or SAY_WRITTEN */
    char text[];
} say_msg;
enum { SAY_WRITING, SAY_LEFT, SAY_WRITTEN };
static atomic_int says_left;     /* left inside their write */
static atomic_long says_dropped; /* since the last that got through */
/* The messages left to their threads, kept reachable (a few bytes each, to
 * the process's end: a thread may still be writing one). */
enum { LEFT_KEPT = 16 };
static say_msg *left_msgs[LEFT_KEPT];
static atomic_int n_left_msgs;

static void *say(void *arg) {
    say_msg *m = arg;
    say_text(m->text);
    int writing = SAY_WRITING;
    if (!atomic_compare_exchange_strong(&m->state, &writing,
                                        SAY_WRITTEN)) /* left: standard error works again */
        atomic_fetch_sub(&says_left, 1);
    return NULL;
}

bool st_ticker_run_within(void *(*fn)(void *), void *ctx, double limit_s) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits it: signals stay the caller's */
    pthread_t t;
    const bool started = pthread_create(&t, NULL, fn, ctx) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) { /* (no thread: here) */
        fn(ctx);
        return true;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* (pthread_timedjoin_np's clock) */
    const double end = (double)until.tv_nsec * 1e-9 + limit_s;
    until.tv_sec += (time_t)end;
    until.tv_nsec = (long)((end - (double)(time_t)end) * 1e9);
    if (pthread_timedjoin_np(t, NULL, &until) == 0) return true;
    pthread_detach(t); /* still inside (storage that stopped answering): left to the process's end */
    return false;
}

void st_ticker_say_within(const char *msg, double limit_s) {
    if (atomic_load(&says_left) > 0) {
        atomic_fetch_add(&says_dropped, 1);
        return;
    }
    char note[160] = "";
    const long dropped = atomic_exchange(&says_dropped, 0);
    if (dropped > 0)
        snprintf(
            note, sizeof note,
            "scaletrain: (%ld earlier message%s not written: standard error took no bytes for a while)\n",
            dropped, dropped == 1 ? " was" : "s were");
    const size_t nl = strlen(note), len = strlen(msg);
    say_msg *m = malloc(sizeof *m + nl + len + 1);
    if (!m) {
        say_text(note);
        say_text(msg);
        return;
    }
    atomic_init(&m->state, SAY_WRITING);
    memcpy(m->text, note, nl);
    memcpy(m->text + nl, msg, len + 1); /* (one write: ranks' lines do not interleave) */
    if (st_ticker_run_within(say, m, limit_s)) {
        free(m);
        return;
    }
    atomic_fetch_add(&says_left, 1); /* (before the exchange: the thread may end it now) */
    int writing = SAY_WRITING;
    if (!atomic_compare_exchange_strong(&m->state, &writing, SAY_LEFT)) { /* it wrote as we gave up */
        atomic_fetch_sub(&says_left, 1);
        free(m); /* (the thread no longer reads it) */
        return;
    }
    const int k = atomic_fetch_add(&n_left_msgs, 1);
    if (k < LEFT_KEPT) left_msgs[k] = m; /* (past that, a few bytes unreachable: not worth more) */
}

void st_ticker_say(const char *msg) { st_ticker_say_within(msg, 5.0); }

void st_ticker_sayf(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf) memcpy(buf + sizeof buf - 5, "...\n", 5); /* (cut: still one line) */
    if (n > 0) st_ticker_say(buf);
}

static void *run(void *arg) {
    st_ticker *t = arg;
    pthread_mutex_lock(&t->m);
    while (!t->stop) {
        const double due = st_ticker_now() + t->period_s;
        struct timespec until;
        until.tv_sec = (time_t)due;
        until.tv_nsec = (long)((due - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&t->cv, &t->m, &until);
        if (t->stop) break;
        const double now = st_ticker_now();
        if (now - due > 0.5 + t->period_s) { /* this process did not run */
            const int i = t->n_pauses++ % PAUSES_KEPT;
            t->pause_end[i] = now;
            t->pause_len[i] = now - due;
        }
        pthread_mutex_unlock(&t->m);
        t->fn(t->ctx, t, now);
        pthread_mutex_lock(&t->m);
    }
    pthread_mutex_unlock(&t->m);
    return NULL;
}

st_status st_ticker_start(double period_s, st_tick_fn fn, void *ctx, const char *what, st_ticker **out) {
    *out = NULL;
    st_ticker *t = calloc(1, sizeof *t);
    if (!t) return st_fail(ST_ERR_NOMEM, "no memory for %s", what);
    t->period_s = period_s;
    t->fn = fn;
    t->ctx = ctx;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->m, NULL);
    const int e = pthread_create(&t->thread, NULL, run, t);
    if (e != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->m);
        free(t);
        return st_fail(ST_ERR_INTERNAL, "cannot start %s's thread: %s", what, strerror(e));
    }
    *out = t;
    return ST_OK;
}

void st_ticker_stop(st_ticker *t) {
    if (!t) return;
    pthread_mutex_lock(&t->m);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->m);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->m);
    free(t);
}
