/* A thread that wakes every `period` seconds and calls a check: the clock
 * behind watchdogs (src/comm/watchdog.c for collectives, src/cuda/device.cu
 * for waits on a GPU), which end a run that has waited too long.
 *
 * A process that was itself stopped (SIGSTOP, a debugger, a frozen VM) must
 * not count that time against what it waits for: the thread notices that it
 * woke far later than it asked to (by more than half a second plus a period:
 * a scheduler delay is milliseconds, a stop is seconds), records the stop,
 * and st_ticker_paused_since says how much of a wait that began at `since`
 * this process spent stopped. The check runs on the ticker's thread, which
 * alone writes and reads those records. */
#ifndef ST_CORE_TICKER_H
#define ST_CORE_TICKER_H

#include <stdbool.h>

#include "scaletrain/status.h"

typedef struct st_ticker st_ticker;
/* Called every period on the ticker's thread; `now` is st_ticker_now(). */
typedef void (*st_tick_fn)(void *ctx, st_ticker *t, double now);

/* CLOCK_MONOTONIC, seconds. */
double st_ticker_now(void);
/* A watchdog's period for a limit: 10 checks per limit, at most one a
 * second and at least every 10 ms, so that a wait is caught within the
 * limit and a period. */
double st_ticker_period(double limit_s);
/* Start the thread (period_s > 0); `what` names it in an error. */
st_status st_ticker_start(double period_s, st_tick_fn fn, void *ctx, const char *what, st_ticker **out);
/* Stop and join it; NULL is fine. Not from fn. */
void st_ticker_stop(st_ticker *t);
/* Seconds this process was stopped after `since` (st_ticker_now's clock),
 * from its last 16 stops. On the ticker's thread (inside fn). */
double st_ticker_paused_since(const st_ticker *t, double since);
/* Run fn(ctx) on a thread of its own (signals blocked there: they stay the
 * caller's) and wait for it limit_s seconds at most: true when it returned;
 * false when it has not (a wait on storage that stopped answering): the
 * thread is left to the process's end, and ctx with it (the caller must not
 * free it then). No thread to be had: fn runs here, unbounded. */
bool st_ticker_run_within(void *(*fn)(void *), void *ctx, double limit_s);
/* A watchdog's last words: msg to standard error in one write (so that
 * ranks' lines do not interleave), retried when a signal interrupts it, on
 * a thread of its own: returns once written or after 5 s, whichever comes
 * first, so that the caller goes on to end the process even when standard
 * error is a file on the storage that stopped answering (a job's output
 * file on a hung network file system). While a say so left is still inside
 * its write, later ones are dropped at once (counted, and the count said
 * with the next that gets through): each would hold its caller 5 s and
 * leave one more thread. */
void st_ticker_say(const char *msg);
/* The same within limit_s seconds. */
void st_ticker_say_within(const char *msg, double limit_s);
/* A warning or note of a run (printf's format; the caller ends it with a
 * newline), said as st_ticker_say says its message: standard error on
 * storage that stopped answering holds the run 5 s at most, where a plain
 * fprintf would hold it for good. */
void st_ticker_sayf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
