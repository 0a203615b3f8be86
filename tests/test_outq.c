/* The output queue (core/outq.h) on pipes: everything put comes out whole
 * and in order, through st_outq_file too; a pipe nobody reads (filled)
 * holds only the writer: puts return at once, past the cap lines are
 * dropped, and the drain gives up after its limit counting every line that
 * was not written; a reader that went away is EPIPE (not SIGPIPE), every
 * line counted; a stream that recovers writes what waited, then the line
 * saying how many were dropped. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/outq.h"

typedef struct reader {
    int fd;
    char *buf;
    size_t n, cap;
} reader;

static void *read_all(void *arg) {
    reader *r = arg;
    for (;;) {
        if (r->n + 65536 > r->cap) {
            r->cap = (r->n + 65536) * 2;
            r->buf = realloc(r->buf, r->cap);
            if (!r->buf) return NULL;
        }
        const ssize_t k = read(r->fd, r->buf + r->n, r->cap - r->n - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        r->n += (size_t)k;
    }
    if (r->buf) r->buf[r->n] = '\0';
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A pipe whose buffer is full (its read end kept, unread). */
static void full_pipe(int p[2]) {
    if (pipe(p) != 0) abort();
    const int fl = fcntl(p[1], F_GETFL);
    fcntl(p[1], F_SETFL, fl | O_NONBLOCK);
    char junk[4096];
    memset(junk, 'x', sizeof junk);
    while (write(p[1], junk, sizeof junk) > 0) {
    }
    fcntl(p[1], F_SETFL, fl);
}

static void whole_and_in_order(void) {
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    reader r = {.fd = p[0]};
    pthread_t th;
    pthread_create(&th, NULL, read_all, &r);
    st_outq *q = st_outq_start(p[1], "the pipe", "t: ", (size_t)1 << 20);
    CHECK(q != NULL, "no queue");
    char line[64];
    for (int i = 0; i < 5000; i++) {
        const int n = snprintf(line, sizeof line, "line %d\n", i);
        st_outq_put(q, line, (size_t)n);
    }
    FILE *f = st_outq_file(q);
    CHECK(f != NULL, "no stdio stream");
    for (int i = 0; i < 100; i++)
        fprintf(f, "print %d\n", i);
    fflush(f);
    st_outq_report rep;
    CHECK(st_outq_end(q, 10, &rep), "lost %ld lines: %s", rep.lost_lines, rep.why);
    close(p[1]);
    pthread_join(th, NULL);
    close(p[0]);
    char *want = malloc(200000), *w = want;
    for (int i = 0; i < 5000; i++)
        w += sprintf(w, "line %d\n", i);
    for (int i = 0; i < 100; i++)
        w += sprintf(w, "print %d\n", i);
    CHECK(r.buf && r.n == (size_t)(w - want) && memcmp(r.buf, want, r.n) == 0,
          "the pipe got %zu bytes, want %zu, or other bytes", r.n, (size_t)(w - want));
    free(want);
    free(r.buf);
}

static void stuck_then_given_up(void) {
    int p[2];
    full_pipe(p);
    st_outq *q = st_outq_start(p[1], "the pipe", "t: ", 4096);
    CHECK(q != NULL, "no queue");
    const double t0 = now_s();
    char line[101];
    memset(line, 'a', 100);
    line[100] = '\n';
    for (int i = 0; i < 100; i++)
        st_outq_put(q, line, sizeof line);
    CHECK(now_s() - t0 < 1.0, "the puts waited %.2f s", now_s() - t0);
    st_outq_report rep;
    const bool ok = st_outq_drain(q, 0.3, &rep);
    const double waited = now_s() - t0;
    CHECK(!ok && rep.stuck && rep.error == 0, "drain: ok %d stuck %d error %d", ok, rep.stuck, rep.error);
    CHECK(rep.lost_lines == 100 && rep.lost_bytes == 100 * sizeof line, "lost %ld lines, %zu bytes; want 100, %zu",
          rep.lost_lines, rep.lost_bytes, 100 * sizeof line);
    CHECK(waited >= 0.3 && waited < 5, "the drain gave up after %.2f s (limit 0.3)", waited);
    CHECK(strstr(rep.why, "has not returned after 0.3 s") != NULL, "why: %s", rep.why);
    /* The reader comes back: what waited comes out, then the note. */
    reader r = {.fd = p[0]};
    pthread_t th;
    pthread_create(&th, NULL, read_all, &r);
    const bool ok2 = st_outq_end(q, 10, &rep);
    CHECK(!ok2 && !rep.stuck, "the second drain: ok %d, stuck %d", ok2, rep.stuck);
    close(p[1]);
    pthread_join(th, NULL);
    close(p[0]);
    /* 4096 bytes of queue: 40 lines of 101 waited (the first of them in the
     * write), and the note of the 60 dropped comes after them. */
    const char *lines = r.buf ? strchr(r.buf, 'a') : NULL;
    size_t whole = 0;
    for (const char *s = lines; s && s + sizeof line <= r.buf + r.n && memcmp(s, line, sizeof line) == 0;
         s += sizeof line)
        whole++;
    const char *note = lines ? strstr(lines, "t: ") : NULL;
    long dropped = note ? atol(note + 3) : -1;
    CHECK(whole >= 1 && dropped >= 1 && (long)whole + dropped == 100 && rep.lost_lines == dropped,
          "%zu whole lines came out, the note says %ld dropped, the report %ld (want 100 in all)", whole,
          dropped, rep.lost_lines);
    CHECK(note && strstr(note, "line") && strstr(note, "dropped here") && strstr(note, "the pipe"),
          "the note: %s", note ? note : "(none)");
    free(r.buf);
}

static void reader_gone(void) {
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    close(p[0]);
    st_outq *q = st_outq_start(p[1], "the pipe", "t: ", (size_t)1 << 20);
    for (int i = 0; i < 10; i++)
        st_outq_put(q, "one\ntwo\n", 8);
    st_outq_report rep;
    CHECK(!st_outq_end(q, 10, &rep), "the writes to a pipe without a reader succeeded");
    CHECK(rep.error == EPIPE && !rep.stuck && rep.lost_lines == 20, "error %d (want EPIPE), lost %ld (want 20)",
          rep.error, rep.lost_lines);
    CHECK(strstr(rep.why, "Broken pipe") != NULL, "why: %s", rep.why);
    close(p[1]);
}

int main(void) {
    whole_and_in_order();
    stuck_then_given_up();
    reader_gone();
    st_outq_put(NULL, "x", 1); /* nothing */
    CHECK(st_outq_drain(NULL, 1, NULL) && st_outq_end(NULL, 1, NULL), "NULL queue");
    return st_test_finish("test_outq");
}
