/* An output stream written from a queue by a thread of its own (see outq.h). */
#include "core/outq.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct chunk {
    struct chunk *next;
    size_t n;
    bool note; /* the queue's own line (lines dropped here): not counted as lost */
    char p[];
} chunk;

struct st_outq {
    int fd;
    char name[64], prefix[96];
    size_t cap;
    pthread_t th;
    pthread_mutex_t m;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: a chunk queued, a write done, quit */
    FILE *file;
    atomic_int *stop;
    /* under m */
    chunk *head, *tail;
    size_t queued;       /* bytes queued and in the write under way */
    long dropped;        /* line ends dropped since the last note */
    long lost_lines;     /* line ends never written */
    size_t lost_bytes;
    int error;           /* the errno of a write that failed: the rest is dropped */
    bool oom;            /* a put found no memory to queue its bytes (lost) */
    bool writing, quit;  /* inside write(2) since write_t0, of a chunk with cur_lines line ends */
    double write_t0;
    long cur_lines;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long line_ends(const char *p, size_t n) {
    long k = 0;
    for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
        k++;
    return k;
}

int st_outq_write_all(int fd, const char *p, size_t n) {
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

static void lose(st_outq *q, const char *p, size_t n) {
    q->lost_lines += line_ends(p, n);
    q->lost_bytes += n;
}

static void drop_queue(st_outq *q) {
    for (chunk *c = q->head, *next; c; c = next) {
        next = c->next;
        if (!c->note) lose(q, c->p, c->n);
        q->queued -= c->n;
        free(c);
    }
    q->head = q->tail = NULL;
}

static void *write_loop(void *arg) {
    st_outq *q = arg;
    pthread_mutex_lock(&q->m);
    for (;;) {
        while (!q->head && !q->quit)
            pthread_cond_wait(&q->cv, &q->m);
        if (!q->head) break;
        chunk *c = q->head;
        q->head = c->next;
        if (!q->head) q->tail = NULL;
        q->writing = true;
        q->write_t0 = now_s();
        q->cur_lines = c->note ? 0 : line_ends(c->p, c->n);
        pthread_mutex_unlock(&q->m);
        const int e = st_outq_write_all(q->fd, c->p, c->n);
        pthread_mutex_lock(&q->m);
        q->writing = false;
        q->queued -= c->n;
        if (e) {
            q->error = e;
            if (!c->note) lose(q, c->p, c->n); /* (a part may have gone out: the line is not whole) */
            drop_queue(q);
        }
        free(c);
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->m);
    return NULL;
}

st_outq *st_outq_start(int fd, const char *name, const char *prefix, size_t cap) {
    st_outq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    pthread_condattr_t ca;
    bool cv_ok = false;
    if (pthread_condattr_init(&ca) == 0) {
        cv_ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&q->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cv_ok || pthread_mutex_init(&q->m, NULL) != 0) {
        if (cv_ok) pthread_cond_destroy(&q->cv);
        free(q);
        return NULL;
    }
    q->fd = fd;
    q->cap = cap;
    snprintf(q->name, sizeof q->name, "%s", name);
    snprintf(q->prefix, sizeof q->prefix, "%s", prefix);
    signal(SIGPIPE, SIG_IGN);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the writer inherits it: signals go to the other threads */
    const bool started = pthread_create(&q->th, NULL, write_loop, q) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->m);
        free(q);
        return NULL;
    }
    return q;
}

static void push(st_outq *q, const char *p, size_t n, bool note) {
    chunk *c = malloc(sizeof *c + n);
    if (!c) {
        if (!note) {
            q->oom = true;
            lose(q, p, n);
        }
        return;
    }
    c->next = NULL;
    c->n = n;
    c->note = note;
    memcpy(c->p, p, n);
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->queued += n;
    pthread_cond_broadcast(&q->cv);
}

/* The line saying how many lines were dropped where it stands; its length,
 * 0 when none were. */
static size_t dropped_note(const st_outq *q, char *note, size_t size) {
    if (!q->dropped) return 0;
    const int len = snprintf(note, size,
                             "%s%ld line%s of the output dropped here: %zu MiB waited for %s to take them\n",
                             q->prefix, q->dropped, q->dropped == 1 ? "" : "s", q->cap >> 20, q->name);
    return len > 0 ? (size_t)len : 0;
}

static void put_locked(st_outq *q, const char *p, size_t n) {
    char note[320];
    const size_t len = dropped_note(q, note, sizeof note);
    if (q->error || q->queued + n + len > q->cap) {
        if (!q->error) q->dropped += line_ends(p, n);
        lose(q, p, n);
        return;
    }
    if (len) push(q, note, len, true);
    q->dropped = 0;
    push(q, p, n, false);
}

void st_outq_put(st_outq *q, const char *p, size_t n) {
    if (!q || n == 0) return;
    pthread_mutex_lock(&q->m);
    put_locked(q, p, n);
    pthread_mutex_unlock(&q->m);
}

static ssize_t cookie_write(void *c, const char *p, size_t n) {
    st_outq_put(c, p, n);
    return (ssize_t)n; /* (what is dropped is counted, not an error of the caller's print) */
}

void st_outq_set_stop(st_outq *q, atomic_int *stop) {
    if (q) q->stop = stop;
}

FILE *st_outq_file(st_outq *q) {
    if (!q) return NULL;
    if (!q->file) {
        q->file = fopencookie(q, "w", (cookie_io_functions_t){.write = cookie_write});
        if (q->file) setvbuf(q->file, NULL, _IOFBF, 1 << 16);
    }
    return q->file;
}

bool st_outq_drain(st_outq *q, double limit_s, st_outq_report *r) {
    if (r) memset(r, 0, sizeof *r);
    if (!q) return true;
    if (q->file) fflush(q->file);
    pthread_mutex_lock(&q->m);
    if (q->dropped && !q->error) { /* lines dropped at the end: the note closes the stream */
        char note[320];
        const size_t len = dropped_note(q, note, sizeof note);
        if (len) push(q, note, len, true);
        q->dropped = 0;
    }
    bool stuck = false, stopped = false;
    while (q->head || q->writing) {
        /* asked to stop: a write that does not return is waited for 2 s at most */
        const double lim =
            q->stop && atomic_load_explicit(q->stop, memory_order_relaxed) && limit_s > 2 ? 2 : limit_s;
        stuck = q->writing && now_s() - q->write_t0 >= lim;
        stopped = stuck && lim < limit_s;
        if (stuck) break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 100 * 1000 * 1000; /* a write's end wakes us; the limit is checked 10 times a s */
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&q->cv, &q->m, &until);
    }
    long lines = q->lost_lines;
    size_t bytes = q->lost_bytes;
    if (stuck) { /* the write under way and what waits are not written now */
        lines += q->cur_lines;
        bytes += q->queued;
        for (const chunk *c = q->head; c; c = c->next)
            if (c->note)
                bytes -= c->n;
            else
                lines += line_ends(c->p, c->n);
    }
    const int error = q->error;
    const bool oom = q->oom;
    const size_t cap = q->cap;
    pthread_mutex_unlock(&q->m);
    if (!stuck && bytes == 0) return true;
    if (r) {
        r->lost_lines = lines;
        r->lost_bytes = bytes;
        r->stuck = stuck;
        r->stopped = stopped;
        r->error = error;
        r->oom = oom;
        if (stopped)
            snprintf(r->why, sizeof r->why,
                     "its write has not returned after 2 s, and a signal asked the process "
                     "to stop");
        else if (stuck)
            snprintf(r->why, sizeof r->why, "its write has not returned after %g s", limit_s);
        else if (error)
            snprintf(r->why, sizeof r->why, "a write failed: %s", strerror(error));
        else if (oom)
            snprintf(r->why, sizeof r->why, "out of memory queueing it");
        else
            snprintf(r->why, sizeof r->why, "more than %zu MiB waited for it", cap >> 20);
    }
    return false;
}

bool st_outq_end(st_outq *q, double limit_s, st_outq_report *r) {
    if (!q) {
        if (r) memset(r, 0, sizeof *r);
        return true;
    }
    const bool ok = st_outq_drain(q, limit_s, r);
    if (q->file) fclose(q->file); /* (flushed by the drain: writes nothing) */
    q->file = NULL;
    pthread_mutex_lock(&q->m);
    const bool writing = q->writing;
    q->quit = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->m);
    if (writing) return ok; /* a writer in a write that may never return: the process's exit ends it */
    pthread_join(q->th, NULL);
    drop_queue(q);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->m);
    free(q);
    return ok;
}
