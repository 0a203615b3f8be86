/* The ticker (see ticker.h). */
#include "core/ticker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
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

static void *say(void *arg) {
    const char *msg = arg;
    const size_t len = strlen(msg);
    size_t off = 0;
    while (off < len) {
        const ssize_t n = write(2, msg + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
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
    char *copy = strdup(msg);
    if (!copy) {
        say((char *)msg);
        return;
    }
    if (st_ticker_run_within(say, copy, limit_s)) free(copy); /* (else the thread still writes it) */
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
