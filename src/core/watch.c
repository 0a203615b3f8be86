/* The stall watch (see watch.h). */
#include "core/watch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ticker.h"

struct st_watch {
    st_ticker *tk;
    pthread_mutex_t m;
    double limit_s;
    char who[192], knob[64], cause[512], after[1024];
    /* under m */
    bool waiting;
    char what[1024];
    double t0, limit; /* this wait's: limit_s unless st_watch_begin_limit */
};

static void check(void *ctx, st_ticker *tk, double now) {
    st_watch *w = ctx;
    pthread_mutex_lock(&w->m);
    const bool waiting = w->waiting;
    const double age = waiting ? now - w->t0 - st_ticker_paused_since(tk, w->t0) : 0, limit = w->limit;
    char what[sizeof w->what];
    memcpy(what, w->what, sizeof what);
    pthread_mutex_unlock(&w->m);
    if (!waiting || age < limit) return;
    char msg[3072];
    snprintf(
        msg, sizeof msg,
        "scaletrain: %s: %s has not finished after %.0f s (%s: %g s): %s. Ending the process so that the run "
        "does not wait forever; %s (raise %s if it can legitimately take that long)\n",
        w->who, what, age, w->knob, limit, w->cause, w->after, w->knob);
    st_ticker_say(msg);
    _exit(1);
}

st_status st_watch_start(double limit_s, const char *who, const char *knob, const char *cause,
                         const char *after, st_watch **out) {
    *out = NULL;
    if (!(limit_s > 0)) return st_fail(ST_ERR_ARG, "st_watch_start: limit %g s", limit_s);
    st_watch *w = calloc(1, sizeof *w);
    if (!w) return st_fail(ST_ERR_NOMEM, "out of memory for a stall watch");
    if (pthread_mutex_init(&w->m, NULL) != 0) {
        free(w);
        return st_fail(ST_ERR_NOMEM, "cannot create a stall watch's mutex");
    }
    w->limit_s = limit_s;
    snprintf(w->who, sizeof w->who, "%s", who);
    snprintf(w->knob, sizeof w->knob, "%s", knob);
    snprintf(w->cause, sizeof w->cause, "%s", cause);
    snprintf(w->after, sizeof w->after, "%s", after);
    const st_status s = st_ticker_start(st_ticker_period(limit_s), check, w, "a stall watch", &w->tk);
    if (s != ST_OK) {
        pthread_mutex_destroy(&w->m);
        free(w);
        return s;
    }
    *out = w;
    return ST_OK;
}

static void begin(st_watch *w, const char *what, double t0, double limit_s) {
    if (!w) return;
    pthread_mutex_lock(&w->m);
    snprintf(w->what, sizeof w->what, "%s", what);
    w->t0 = t0;
    w->limit = limit_s > 0 ? limit_s : w->limit_s;
    w->waiting = true;
    pthread_mutex_unlock(&w->m);
}

void st_watch_begin_at(st_watch *w, const char *what, double t0) { begin(w, what, t0, 0); }

void st_watch_begin(st_watch *w, const char *what) { begin(w, what, st_ticker_now(), 0); }

void st_watch_begin_limit(st_watch *w, const char *what, double limit_s) {
    begin(w, what, st_ticker_now(), limit_s);
}

void st_watch_end(st_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->m);
    w->waiting = false;
    pthread_mutex_unlock(&w->m);
}

st_watch *st_watch_one(double limit_s, const char *who, const char *knob, const char *cause,
                       const char *after, const char *what) {
    st_watch *w = NULL;
    if (!(limit_s > 0)) return NULL;
    if (st_watch_start(limit_s, who, knob, cause, after, &w) != ST_OK) st_clear_error();
    st_watch_begin(w, what);
    return w;
}

void st_watch_stop(st_watch *w) {
    if (!w) return;
    st_ticker_stop(w->tk);
    pthread_mutex_destroy(&w->m);
    free(w);
}
