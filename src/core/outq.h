/* An output stream (standard output, standard error) written by a thread of
 * its own from a queue, so that the thread that prints never waits on the
 * write: a job's output file on a hung network file system, a pipe whose
 * reader stopped, a terminal paused with Ctrl-S hold neither a training
 * run nor the launcher, and a reader that went away (`| head`, a `tee` that
 * died: EPIPE) does not end the process.
 *
 * What is put waits in memory up to cap bytes; past that it is dropped, and
 * a line where it was says how many lines were (prefix + "N lines of the
 * output dropped here ..."). After a write fails the rest is dropped.
 * st_outq_end waits for what is queued while the writes go on, and gives up
 * on a write that has not returned after a limit. Used by `scaletrain
 * launch` (tools/launch.c: both its streams) and by a run's standard output
 * (train/session.c). */
#ifndef ST_CORE_OUTQ_H
#define ST_CORE_OUTQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct st_outq st_outq;

/* A queue and its writer for fd (its writes take no signals); name: the
 * stream in messages ("standard output"); prefix: the start of the line
 * that says where lines were dropped ("scaletrain launch: "). NULL when
 * there is no memory or thread for it: write directly then. Ignores SIGPIPE
 * in this process, so that a reader that went away is a failed write
 * (EPIPE), not the end of the process. Copied. */
st_outq *st_outq_start(int fd, const char *name, const char *prefix, size_t cap);
/* Queue n bytes (whole lines, as a rule); never waits. NULL q: nothing. */
void st_outq_put(st_outq *q, const char *p, size_t n);
/* All of p to fd, here and now (what the writer does; for a stream that
 * has no queue): 0, or the errno that ended it. A descriptor someone made
 * non-blocking (a shared terminal) is waited for with poll. */
int st_outq_write_all(int fd, const char *p, size_t n);
/* A stdio stream whose writes are st_outq_put (fully buffered: each fflush
 * one put); NULL if stdio cannot make one. Closed by st_outq_end. */
FILE *st_outq_file(st_outq *q);

/* While *stop is non-zero (a signal handler's flag: the process was asked
 * to stop) a drain waits 2 s at most for a write that does not return. */
void st_outq_set_stop(st_outq *q, atomic_int *stop);

typedef struct st_outq_report {
    long lost_lines;   /* line ends ('\n') never written */
    size_t lost_bytes; /* bytes never written */
    bool stuck;        /* a write had not returned after the limit */
    bool stopped;      /* ... after the 2 s of a stop (st_outq_set_stop) */
    int error;         /* the errno of a write that failed (EPIPE, EIO), or 0 */
    bool oom;          /* lines lost because a put found no memory (the program's fault, not the reader's) */
    char why[256];     /* what happened, for a message: "its write has not returned after 300 s" */
} st_outq_report;

/* Wait for everything queued to be written while the writes return, giving
 * up on a write that has not after limit_s; true when nothing was lost
 * (else *r, if given, says what). The writer stays: more may be put and
 * waited for. */
bool st_outq_drain(st_outq *q, double limit_s, st_outq_report *r);
/* st_outq_drain, then the writer stops and q is freed (unless a write is
 * still under way: the process's exit ends it). */
bool st_outq_end(st_outq *q, double limit_s, st_outq_report *r);

#endif
