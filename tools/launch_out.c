/* The launcher's own output (launch.h): its standard output and standard
 * error each written by a thread of their own from a queue of whole lines,
 * so that the loop that reads mpirun's pipes (launch_io.c) and passes
 * signals on to the ranks never waits on a write.
 *
 * Why: a write to an output that takes no bytes (a job's output file on a
 * hung network file system, a pipe whose reader stopped, a terminal paused
 * with Ctrl-S) blocks; the launcher then stopped reading mpirun, mpirun
 * stopped reading the ranks, and the job (even one that had trained to its
 * end) never returned, nor answered SIGTERM. Now the job runs on whatever
 * its output does; lines wait in memory (up to 64 MiB a stream; past that
 * they are dropped and counted, and a line where they were says how many),
 * and a stream whose write fails (EPIPE: `| tee` that died; EIO) drops the
 * rest. When the job has ended, the launcher waits for what is queued as
 * long as the writes go on, and gives up on a write that has not returned
 * after --output-timeout seconds, saying so on the other stream. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define QUEUE_CAP ((size_t)64 << 20)

typedef struct out_line {
    struct out_line *next;
    size_t n;
    char p[];
} out_line;

typedef struct out_stream {
    int fd;
    const char *name; /* "standard output" */
    pthread_t th;
    bool started;
    out_line *head, *tail;
    size_t queued;   /* bytes in the queue and in the write under way */
    long dropped;    /* lines dropped since the last line said so */
    long lost;       /* lines not written in all */
    int broken;      /* the errno of a write that failed: the rest is dropped */
    bool writing;    /* inside write(2) since write_t0 */
    double write_t0; /* CLOCK_MONOTONIC */
} out_stream;

struct st_launch_out {
    pthread_mutex_t m;
    pthread_cond_t cv; /* a line queued, a write done, quit */
    bool quit;
    double stall_s;
    out_stream s[2]; /* fd 1, fd 2 */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* All of p to fd; 0, or the errno that ended it. A descriptor someone made
 * non-blocking (a shared terminal) is waited for with poll. */
static int write_fd(int fd, const char *p, size_t n) {
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {fd, POLLOUT, 0};
            (void)poll(&pf, 1, -1);
            continue;
        }
        if (w <= 0) return w < 0 ? errno : EIO;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static void drop_queue(out_stream *s) {
    for (out_line *l = s->head, *next; l; l = next) {
        next = l->next;
        s->lost++;
        s->queued -= l->n;
        free(l);
    }
    s->head = s->tail = NULL;
}

typedef struct writer_arg {
    st_launch_out *o;
    out_stream *s;
} writer_arg;

static void *write_loop(void *arg) {
    writer_arg a = *(writer_arg *)arg;
    free(arg);
    st_launch_out *o = a.o;
    out_stream *s = a.s;
    pthread_mutex_lock(&o->m);
    for (;;) {
        while (!s->head && !o->quit)
            pthread_cond_wait(&o->cv, &o->m);
        if (!s->head) break;
        out_line *l = s->head;
        s->head = l->next;
        if (!s->head) s->tail = NULL;
        s->writing = true;
        s->write_t0 = now_s();
        pthread_mutex_unlock(&o->m);
        const int e = write_fd(s->fd, l->p, l->n);
        pthread_mutex_lock(&o->m);
        s->writing = false;
        s->queued -= l->n;
        free(l);
        if (e) {
            s->broken = e;
            s->lost++;
            drop_queue(s);
        }
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->m);
    return NULL;
}

st_launch_out *st_launch_out_start(double stall_s) {
    st_launch_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    if (pthread_mutex_init(&o->m, NULL) != 0) {
        free(o);
        return NULL;
    }
    if (pthread_cond_init(&o->cv, NULL) != 0) {
        pthread_mutex_destroy(&o->m);
        free(o);
        return NULL;
    }
    o->stall_s = stall_s;
    /* A write to a pipe whose reader is gone fails with EPIPE and drops the
     * stream's lines; SIGPIPE would end the launcher, and with it the job
     * (st_launch_run gives mpirun the default back). */
    signal(SIGPIPE, SIG_IGN);
    /* The writers take no signals: SIGTERM and SIGINT reach the thread that
     * passes them on to the ranks. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int k = 0; k < 2; k++) {
        out_stream *s = &o->s[k];
        s->fd = k + 1;
        s->name = k == 0 ? "standard output" : "standard error";
        writer_arg *a = malloc(sizeof *a);
        if (!a) continue;
        *a = (writer_arg){o, s};
        s->started = pthread_create(&s->th, NULL, write_loop, a) == 0;
        if (!s->started) free(a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return o;
}

static void push(st_launch_out *o, out_stream *s, const char *p, size_t n) {
    out_line *l = malloc(sizeof *l + n);
    if (!l) {
        s->lost++;
        return;
    }
    l->next = NULL;
    l->n = n;
    memcpy(l->p, p, n);
    if (s->tail)
        s->tail->next = l;
    else
        s->head = l;
    s->tail = l;
    s->queued += n;
    pthread_cond_broadcast(&o->cv);
}

/* The line that says how many lines were dropped where it stands; its
 * length, 0 when none were. */
static size_t dropped_note(const out_stream *s, char *note, size_t cap) {
    if (!s->dropped) return 0;
    const int len = snprintf(note, cap,
                             "scaletrain launch: %ld line%s of the job's output dropped here: %zu MiB of lines "
                             "waited for %s to take them\n",
                             s->dropped, s->dropped == 1 ? "" : "s", QUEUE_CAP >> 20, s->name);
    return len > 0 ? (size_t)len : 0;
}

/* Queue a line (p, n bytes) on s, behind the note of lines dropped before
 * it, if any were: under o->m. */
static void enqueue(st_launch_out *o, out_stream *s, const char *p, size_t n) {
    char note[256];
    const size_t len = dropped_note(s, note, sizeof note);
    if (s->broken || s->queued + n + len > QUEUE_CAP) {
        s->dropped += !s->broken;
        s->lost++;
        return;
    }
    if (len) push(o, s, note, len);
    s->dropped = 0;
    push(o, s, p, n);
}

void st_launch_out_put(st_launch_out *o, int fd, const char *p, size_t n) {
    if (fd != 1 && fd != 2) return;
    out_stream *s = o ? &o->s[fd - 1] : NULL;
    if (!s || !s->started) { /* no writer: written here */
        (void)write_fd(fd, p, n);
        return;
    }
    pthread_mutex_lock(&o->m);
    enqueue(o, s, p, n);
    pthread_mutex_unlock(&o->m);
}

void st_launch_sayf(st_launch_out *o, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) st_launch_out_put(o, 2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* Wait until nothing is queued or being written on the streams but `skip`
 * (-1: none), or until a write has not returned for stall_s: under o->m.
 * The stream stuck, or -1. */
static int drain(st_launch_out *o, int skip) {
    for (;;) {
        bool busy = false;
        for (int k = 0; k < 2; k++) {
            const out_stream *s = &o->s[k];
            if (k == skip || !s->started || !(s->head || s->writing)) continue;
            busy = true;
            if (s->writing && now_s() - s->write_t0 >= o->stall_s) return k;
        }
        if (!busy) return -1;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000; /* a write's end wakes us; the limit is checked 10 times a s */
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&o->cv, &o->m, &until);
    }
}

void st_launch_out_end(st_launch_out *o) {
    if (!o) return;
    pthread_mutex_lock(&o->m);
    for (int k = 0; k < 2; k++) { /* lines dropped at the end: the note closes the stream */
        char note[256];
        const size_t len = o->s[k].broken ? 0 : dropped_note(&o->s[k], note, sizeof note);
        if (len) push(o, &o->s[k], note, len);
        o->s[k].dropped = 0;
    }
    const int stuck = drain(o, -1);
    char why[1024] = "", stuck_why[256];
    snprintf(stuck_why, sizeof stuck_why,
             "its write has not returned after %g s, --output-timeout: a hung file system, a paused terminal or "
             "a reader that stopped?",
             o->stall_s);
    size_t len = 0;
    for (int k = 0; k < 2; k++) {
        out_stream *s = &o->s[k];
        if (k == stuck) {
            s->lost += s->writing ? 1 : 0;
            for (const out_line *l = s->head; l; l = l->next)
                s->lost++;
        }
        if (!s->lost || len >= sizeof why) continue;
        const int w = snprintf(why + len, sizeof why - len, "%s%ld line%s of the job's output not written to %s (%s)",
                               len ? "; " : "", s->lost, s->lost == 1 ? "" : "s", s->name,
                               k == stuck ? stuck_why
                               : s->broken ? strerror(s->broken)
                                           : "more than 64 MiB waited for it");
        if (w > 0) len += (size_t)w < sizeof why - len ? (size_t)w : sizeof why - len - 1;
    }
    if (len) { /* said on each stream that still writes */
        char msg[sizeof why + 32];
        const int n = snprintf(msg, sizeof msg, "scaletrain launch: %s\n", why);
        for (int k = 0; k < 2; k++)
            if (k != stuck && !o->s[k].broken && n > 0) enqueue(o, &o->s[k], msg, (size_t)n);
        (void)drain(o, stuck);
    }
    bool writing = false;
    for (int k = 0; k < 2; k++)
        writing |= o->s[k].writing;
    o->quit = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->m);
    if (writing) return; /* a writer that cannot be joined: the process ends around it */
    for (int k = 0; k < 2; k++)
        if (o->s[k].started) pthread_join(o->s[k].th, NULL);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->m);
    free(o);
}
