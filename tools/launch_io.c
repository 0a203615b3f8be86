/* One run of mpirun for `scaletrain launch`, with its output sorted by rank.
 *
 * mpirun runs with --tag-output, so every piece of a rank's output reaches
 * mpirun's stdout or stderr behind a tag "[job,rank]<stdout>:" (or
 * <stderr>:). mpirun tags each chunk it reads from a rank, not each line: a
 * rank that writes "a", waits, then "b\n" gives "[1,0]<stdout>:a" and later
 * "[1,0]<stdout>:b\n", with other ranks' chunks possibly in between. So we
 * read both of mpirun's pipes, cut them at the tags, keep one line buffer per
 * rank and stream, and write each line only when it is complete, with one
 * write(2): lines never mix, whatever the ranks do. The writes are the
 * launcher's writer threads' (launch_out.c): this loop never waits on its
 * own output. Rank 0's stdout is the
 * run's normal output and goes out as it is; every other rank's stdout and
 * every rank's stderr is prefixed "[rank K] ". mpirun's own messages (not
 * tagged) pass through.
 *
 * The first SIGTERM, SIGINT, SIGQUIT, SIGUSR1 or SIGHUP (the terminal closed; unless
 * nohup ignores it) sent to the launcher is passed to the ranks
 * themselves (mpirun's local children), not to mpirun, which would SIGKILL
 * them a second later: each rank finishes its step, saves a checkpoint and
 * exits 143, 130, 131 or 129 (tools/train.c; the stop is agreed over every rank, so
 * ranks on other hosts stop too). A second signal, more than a second
 * later, goes to mpirun. mpirun runs
 * in a process group of its own so that a signal sent to the launcher's group
 * (Ctrl-C, timeout(1)) does not reach it directly. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/text.h"
#include "launch.h"
#include "scaletrain/status.h"

/* The one global: a signal handler can only reach a flag (a lock-free
 * atomic: taken and cleared in one exchange, so a signal between the two is
 * not lost). */
static atomic_int got_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only store to a lock-free atomic");

static void on_signal(int sig) { atomic_store_explicit(&got_signal, sig, memory_order_relaxed); }

/* The stop signals' actions before st_launch_signals_begin (mpirun gets them back). */
static struct sigaction old_term, old_int, old_hup, old_quit, old_usr1;

void st_launch_signals_begin(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    atomic_store(&got_signal, 0);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGQUIT, &sa, &old_quit);
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGHUP, NULL, &old_hup);
    if (old_hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, NULL); /* (nohup's stays) */
}

void st_launch_signals_end(void) {
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
}

typedef struct linebuf {
    char *p;
    size_t n, cap;
} linebuf;

typedef struct demux {
    int fd_out; /* where this pipe's untagged text goes (1 or 2) */
    /* bytes read and not yet parsed: after each parse at most the start of a
     * tag that has not all arrived (parse_tag: under 40 bytes), so a fixed
     * buffer never fills and no allocation can fail while the job runs */
    char in[1 << 16];
    size_t n_in;
    int rank; /* the segment being read: rank, or -1 = untagged */
    int err;  /* the segment is the rank's stderr */
    linebuf untagged;
} demux;

typedef struct job_io {
    int ranks;
    linebuf *lines; /* [rank * 2 + (stderr ? 1 : 0)] */
    demux d[2];     /* mpirun's stdout, stderr */
    st_launch_out *out;
    st_launch_result *res;
    long job; /* mpirun's job number, J of its tags "[J,K]...": from the first tag (-1: none yet) */
    bool fwd_said; /* mpirun's "Forwarding signal" line shown once */
    bool cut_said;
    /* after a stop: a dashed line of mpirun's held back (its length, and
     * its fd), and a banner being dropped (stop_banner) */
    size_t sep_n;
    int sep_fd;
    bool banner_drop;
    /* a rank said an error (its stderr's line "scaletrain: error ..."): the
     * banners about its exit code are dropped as after a stop, the first
     * rank to exit and its code (mpirun's "Process name", "Exit code")
     * said in one line instead */
    bool rank_error;
    bool rank_aborted; /* ... "aborting every rank": MPI_Abort's banner and notes go too */
    bool detected;     /* the banner being dropped is "mpirun detected ..." */
    int first_rank, first_code;
    /* a rank said it stopped ("scaletrain: stopped by ...", a signal it
     * got itself: scancel, kill): its exit code is the stop's, on purpose,
     * and the banners about it are dropped as after a stop passed on */
    bool rank_stopped;
    /* mpirun's banners that stop_banner drops (about exit codes, about
     * MPI_Abort), come before any rank said why (mpirun's own stream is
     * not ordered with the ranks'): held (hold_banner) until a rank says
     * it (then given to stop_banner: replay_held), 2 s pass or the job ends
     * (out as they came); sep_since: when a dashed line was held while no
     * stop or error had come (out after 1 s if no banner follows) */
    linebuf held;
    int held_fd;
    double held_since, sep_since;
    bool holding, held_whole; /* ... and the last banner's closing dashed line has come */
} job_io;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int grow(linebuf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p, b->cap = cap;
    return 0;
}

/* What the failure message of a run will quote: mpirun's own line naming the
 * rank that died, else a watchdog's first report (the collective that timed
 * out, then the line naming the rank it waited for: the lines after those
 * only say that the job is being ended), else the last error line a rank
 * printed. */
static void note_reason(st_launch_result *r, const char *line, size_t n, bool from_mpirun) {
    const bool mpirun_says = from_mpirun && memmem(line, n, "noticed that process rank", 25);
    const bool rank_error =
        !from_mpirun && (memmem(line, n, "error", 5) || memmem(line, n, "scaletrain:", 11));
    if (!mpirun_says && !(rank_error && !r->reason_from_mpirun)) return;
    /* (another rank's relay of an error, "... failed on another rank, rank K", does not replace the error
     * itself: the failure's message, and the test of a repeat, compare that) */
    static const char relay[] = "failed on another rank";
    if (!mpirun_says && memmem(line, n, relay, sizeof relay - 1) && r->reason[0] && !strstr(r->reason, relay))
        return;
    while (n && isspace((unsigned char)*line))
        line++, n--;
    while (n && isspace((unsigned char)line[n - 1]))
        n--;
    if (!mpirun_says && r->timeout_noted) {
        /* "scaletrain: rank 0: rank K (pid P, this node) has not called it: ..." */
        const char *who = memmem(line, n, ": rank ", 7);
        const char *next = who ? memmem(who + 2, n - (size_t)(who + 2 - line), ": rank ", 7) : NULL;
        if (r->timeout_named || !next || !memmem(line, n, "(pid ", 5) || !memmem(line, n, "called it", 9))
            return;
        who = next + 2;
        const size_t len = strlen(r->reason);
        snprintf(r->reason + len, sizeof r->reason - len, "; %.*s", (int)(n - (size_t)(who - line)), who);
        r->timeout_named = true;
        return;
    }
    snprintf(r->reason, sizeof r->reason, "%.*s", (int)n, line);
    if (mpirun_says)
        r->reason_from_mpirun = true;
    else if (memmem(line, n, "collective timed out", 20))
        r->timeout_noted = true;
}

static bool starts(const char *p, size_t n, const char *s) {
    const size_t k = strlen(s);
    return n >= k && memcmp(p, s, k) == 0;
}

/* Whether p[0, n) is one of mpirun's dashed lines. */
static bool all_dashes(const char *p, size_t n) {
    bool dashes = n >= 20;
    for (size_t i = 0; i < n && dashes; i++)
        dashes = p[i] == '-';
    return dashes;
}

/* The dashed line held back, as text and its line end, into buf; its
 * length with the end (at most 256). */
static size_t held_sep_text(const job_io *io, char buf[static 256]) {
    const size_t n = io->sep_n < 255 ? io->sep_n : 255;
    memset(buf, '-', n);
    buf[n] = '\n';
    return n + 1;
}

/* The dashed line held back, out now. */
static void put_held_sep(job_io *io) {
    char dashes[256];
    st_launch_out_put(io->out, io->sep_fd, dashes, held_sep_text(io, dashes));
    io->sep_n = 0;
}

/* The banners of mpirun's that stop_banner may drop, by their first line
 * (after a dashed one). */
typedef enum banner_kind { BANNER_NONE, BANNER_EXITED, BANNER_DETECTED, BANNER_ABORT } banner_kind;

static banner_kind banner_of(const char *p, size_t n) {
    if (starts(p, n, "Primary job ")) return BANNER_EXITED;
    if (starts(p, n, "mpirun detected that one or more processes exited with non-zero status"))
        return BANNER_DETECTED;
    if (starts(p, n, "MPI_ABORT was invoked on rank")) return BANNER_ABORT;
    return BANNER_NONE;
}

/* The integer after the last occurrence of c in p[0, n), or -1. */
static int int_after_last(const char *p, size_t n, char c) {
    const char *at = NULL;
    for (size_t i = 0; i < n; i++)
        if (p[i] == c) at = p + i;
    if (!at) return -1;
    int v = -1;
    for (at++; at < p + n && *at == ' '; at++) {
    }
    for (; at < p + n && *at >= '0' && *at <= '9' && v < 100000000; at++)
        v = (v < 0 ? 0 : v * 10) + (*at - '0');
    return v;
}

/* After a stop the launcher passed on, or a rank said an error or its stop
 * (a signal it got itself: scancel, kill; quiet_banners), mpirun's
 * two banners about ranks that exited non-zero ("Primary job terminated
 * normally, but 1 process returned a non-zero exit code", "mpirun detected
 * that one or more processes exited with non-zero status"): the ranks
 * exited 128 + the signal on purpose, or 1 after saying why, and the
 * banners (ten lines) read as a crash. Each is dropped with its dashed
 * lines; after an error, the first rank to exit and its exit code, which
 * the second names, are said in one line. MPI_Abort's banner and the notes
 * that follow it go too where a rank said it aborts ("aborting every rank",
 * comm.c st_comm_abort). Any other message of mpirun's (a rank killed by a
 * signal, an MPI_Abort no rank explained, its own crash) passes. Whether
 * the line was taken (held or dropped). */
static bool stop_banner(job_io *io, int fd, const char *p, size_t n) {
    const bool dashes = all_dashes(p, n);
    if (io->banner_drop) {
        if (io->detected && memmem(p, n, "Process name:", 13)) io->first_rank = int_after_last(p, n, ',');
        if (io->detected && memmem(p, n, "Exit code:", 10)) io->first_code = int_after_last(p, n, ':');
        if (!dashes) return true;
        io->banner_drop = false;
        if (io->detected && !io->res->signalled && io->rank_error && io->first_rank >= 0 &&
            io->first_code >= 0) {
            char line[160];
            const int k =
                io->ranks == 1
                    ? snprintf(line, sizeof line,
                               "scaletrain launch: rank %d exited with code %d (its error is above)\n",
                               io->first_rank, io->first_code)
                    : snprintf(
                          line, sizeof line,
                          "scaletrain launch: rank %d was the first to exit, with code %d (the ranks' errors "
                          "are above)\n",
                          io->first_rank, io->first_code);
            st_launch_out_put(io->out, fd, line, (size_t)k);
        }
        return true;
    }
    if (io->sep_n) {
        const banner_kind kind = banner_of(p, n);
        if (kind == BANNER_EXITED || kind == BANNER_DETECTED || (io->rank_aborted && kind == BANNER_ABORT)) {
            io->sep_n = 0;
            io->banner_drop = true;
            io->detected = kind == BANNER_DETECTED;
            io->first_rank = io->first_code = -1;
            return true;
        }
        put_held_sep(io);
    }
    /* ("[host:pid] 1 more process has sent help message help-mpi-api.txt / mpi-abort", "[host:pid]
     * Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages", and its
     * "ORTE_ERROR_LOG: Data unpack would read past end of buffer in file .../show_help.c" when the
     * job ends as the ranks send it) */
    if (io->rank_aborted && (memmem(p, n, "help-mpi-api.txt / mpi-abort", 28) ||
                             memmem(p, n, "\"orte_base_help_aggregate\" to 0", 30) ||
                             (memmem(p, n, "ORTE_ERROR_LOG", 14) && memmem(p, n, "show_help.c", 11))))
        return true;
    if (!dashes) return false;
    io->sep_n = n, io->sep_fd = fd;
    return true;
}

/* Appends n bytes and a newline to b (on no memory, the line is lost: it is
 * one of mpirun's banner lines, held to be dropped most likely). */
static void append_line(linebuf *b, const char *p, size_t n) {
    if (grow(b, n + 1) != 0) return;
    memcpy(b->p + b->n, p, n);
    b->p[b->n + n] = '\n';
    b->n += n + 1;
}

/* Whether mpirun's banners about the ranks' ends go to stop_banner: a stop
 * was passed on, or a rank said an error or that it stopped. */
static bool quiet_banners(const job_io *io) {
    return io->res->signalled || io->rank_error || io->rank_stopped;
}

/* The banners held, out as they came. */
static void put_held(job_io *io) {
    if (io->held.n) st_launch_out_put(io->out, io->held_fd, io->held.p, io->held.n);
    io->held.n = 0;
    io->holding = false;
}

/* A rank has said why (quiet_banners): the banners held go through
 * stop_banner line by line, as if they came now (dropped, or out where it
 * keeps them), before the dashed line held since, if any; a banner not yet
 * whole goes on being dropped as its lines come (stop_banner's banner_drop). */
static void replay_held(job_io *io) {
    if (!io->holding) return;
    linebuf b = io->held;
    io->held = (linebuf){0};
    io->holding = false;
    const size_t sep_n = io->sep_n;
    const int sep_fd = io->sep_fd;
    io->sep_n = 0;
    for (size_t i = 0; i < b.n;) {
        const char *nl = memchr(b.p + i, '\n', b.n - i);
        if (!nl) break; /* (append_line ends each line with one) */
        const size_t len = (size_t)(nl - (b.p + i));
        if (!stop_banner(io, io->held_fd, b.p + i, len))
            st_launch_out_put(io->out, io->held_fd, b.p + i, len + 1);
        i += len + 1;
    }
    free(b.p);
    if (io->sep_n) put_held_sep(io); /* (a banner's closing line stop_banner kept) */
    io->sep_n = sep_n, io->sep_fd = sep_fd;
}

/* The banners held, at the end of their wait: through stop_banner where a
 * reason to drop them has come meanwhile (a stop passed on), else out. */
static void release_held(job_io *io) {
    if (quiet_banners(io))
        replay_held(io);
    else
        put_held(io);
}

/* mpirun's line p[0, n) while no stop or error has come, or while a banner
 * is held: a dashed line is held back (the start of a banner, maybe), and
 * a banner that stop_banner drops, after one, is held whole (see job_io).
 * Whether the line was taken. */
static bool hold_banner(job_io *io, int fd, const char *p, size_t n) {
    const bool dashes = all_dashes(p, n);
    if (io->holding && !io->held_whole) {
        append_line(&io->held, p, n);
        io->held_whole = dashes;
        return true;
    }
    if (quiet_banners(io)) return false; /* stop_banner's */
    if (io->sep_n && banner_of(p, n) != BANNER_NONE) {
        char sep[256]; /* (a second banner: held after the first) */
        if (!io->holding) io->held_since = now_s(), io->held_fd = fd;
        append_line(&io->held, sep, held_sep_text(io, sep) - 1);
        append_line(&io->held, p, n);
        io->sep_n = 0;
        io->holding = true, io->held_whole = false;
        return true;
    }
    if (io->sep_n) put_held_sep(io);
    if (!dashes) return false;
    io->sep_n = n, io->sep_fd = fd, io->sep_since = now_s();
    return true;
}

/* The finished line in b of rank `rank` (or -1: mpirun's own), without its
 * end; `end` is '\n', or '\r' for a progress bar's line redrawn in place. */
static void emit(job_io *io, int rank, bool err, int untagged_fd, const linebuf *b, char end) {
    const char *p = b->p ? b->p : ""; /* (an empty line: b->p may still be NULL) */
    const size_t n = b->n;
    char pre[32] = "";
    int fd = untagged_fd;
    if (rank >= 0) {
        fd = err ? 2 : 1;
        if (rank != 0 || err) snprintf(pre, sizeof pre, "[rank %d] ", rank);
        if (err) note_reason(io->res, p, n, false);
        if (err && memmem(p, n, "scaletrain: error", 17)) io->rank_error = true;
        if (err && memmem(p, n, "aborting every rank", 19)) io->rank_error = io->rank_aborted = true;
        if (err && memmem(p, n, "scaletrain: stopped by ", 23)) io->rank_stopped = true;
    } else {
        /* mpirun says it each time the launcher passes a stop on (again
         * every 0.1 to 0.5 s while the job's ranks may not all have started) */
        static const char fwd[] = "mpirun: Forwarding signal";
        if (n >= sizeof fwd - 1 && memcmp(p, fwd, sizeof fwd - 1) == 0) {
            if (io->fwd_said) return;
            io->fwd_said = true;
        }
        note_reason(io->res, p, n, true);
        if (end == '\n' && hold_banner(io, untagged_fd, p, n)) return;
        if (quiet_banners(io) && end == '\n' && stop_banner(io, untagged_fd, p, n)) return;
    }
    const size_t np = strlen(pre);
    char stackbuf[4096];
    char *buf = np + n + 1 <= sizeof stackbuf ? stackbuf : malloc(np + n + 1);
    if (!buf) { /* no memory for the joined line: three pieces, in order on one queue */
        st_launch_out_put(io->out, fd, pre, np);
        st_launch_out_put(io->out, fd, p, n);
        st_launch_out_put(io->out, fd, &end, 1);
    } else {
        memcpy(buf, pre, np);
        memcpy(buf + np, p, n);
        buf[np + n] = end;
        st_launch_out_put(io->out, fd, buf, np + n + 1);
        if (buf != stackbuf) free(buf);
    }
    /* (mpirun's banners that came before this line, which says why: after it, as its own line says
     * "above") */
    if (rank >= 0 && io->holding && quiet_banners(io)) replay_held(io);
}

static linebuf *current(job_io *io, demux *d) {
    if (d->rank < 0 || d->rank >= io->ranks || !io->lines) return &d->untagged;
    return &io->lines[d->rank * 2 + d->err];
}

static void flush_line(job_io *io, demux *d, char end) {
    linebuf *b = current(io, d);
    emit(io, d->rank < io->ranks ? d->rank : -1, d->err, d->fd_out, b, end);
    b->n = 0;
}

/* A tag "[J,K]<stdout>:" at p (n bytes available): its length, 0 if p holds
 * no tag, -1 if p may be the start of one that has not all arrived. */
static long parse_tag(const char *p, size_t n, int *rank, int *err) {
    size_t i = 0;
    if (n == 0 || p[0] != '[') return 0;
    i = 1;
    int field = 0;
    long val = 0;
    for (;; i++) {
        if (i >= n) return -1;
        if (isdigit((unsigned char)p[i])) {
            val = val * 10 + (p[i] - '0');
            if (val > 1L << 30) return 0;
        } else if (p[i] == ',' && field == 0) {
            field = 1, val = 0;
        } else if (p[i] == ']' && field == 1) {
            break;
        } else {
            return 0;
        }
    }
    i++;
    static const char *const kinds[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
    for (int k = 0; k < 3; k++) {
        size_t kl = strlen(kinds[k]), have = n - i < kl ? n - i : kl;
        if (memcmp(p + i, kinds[k], have) != 0) continue;
        if (have < kl) return -1;
        *rank = (int)val;
        *err = k != 0;
        return (long)(i + kl);
    }
    return 0;
}

/* A tag mpirun cut short at p (n bytes available), which starts a line of
 * mpirun's stream: a proper prefix of "[J,K]<stdout>:" (or <stderr>:,
 * <stddiag>:) of this job, K a rank, then the next tag's '[' or the
 * stream's end (at_eof); its length
 * (*rank: K, or -1 when the cut came before K's end), or 0. OpenMPI 4.1
 * tags a chunk of up to 4096 bytes into a buffer of 8192 and drops what
 * does not fit (a burst of lines under about 14 bytes); it writes a tag at
 * a chunk's start and after each newline, so a tag it cut short always
 * follows a newline, where a rank's text never starts (its text follows
 * its tag): "[1,[2]]" in a rank's line is left alone. */
static size_t cut_tag(const job_io *io, const char *p, size_t n, bool at_eof, int *rank) {
    if (io->job < 0 || n == 0 || p[0] != '[') return 0;
    char job[24];
    const int jl = snprintf(job, sizeof job, "%ld", io->job);
    size_t i = 1;
    while (i < n && (int)(i - 1) < jl && p[i] == job[i - 1]) /* J, or the start of it */
        i++;
    *rank = -1;
    if (i < n ? p[i] == '[' : at_eof) return i;
    if ((int)(i - 1) != jl || i >= n || p[i] != ',') return 0;
    const size_t k0 = ++i;
    long k = 0;
    while (i < n && isdigit((unsigned char)p[i]) && i - k0 < 10)
        k = k * 10 + (p[i++] - '0');
    if (k >= io->ranks) return 0;
    if (i < n ? p[i] == '[' : at_eof) return i; /* K may be the start of a larger rank's */
    if (i == k0 || i >= n || p[i] != ']') return 0;
    i++;
    *rank = (int)k;
    static const char *const kinds[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
    for (int t = 0; t < 3; t++) {
        size_t l = 0;
        while (kinds[t][l] && i + l < n && p[i + l] == kinds[t][l])
            l++;
        if (kinds[t][l] && (i + l < n ? p[i + l] == '[' : at_eof)) return i + l;
    }
    return 0;
}

/* Parse what d->in holds; at_eof: nothing more will come. */
static void parse(job_io *io, demux *d, bool at_eof) {
    size_t i = 0;
    while (i < d->n_in) {
        int rank, err;
        long t = parse_tag(d->in + i, d->n_in - i, &rank, &err);
        if (t < 0 && !at_eof) break; /* wait for the rest of the tag */
        if (t > 0) {
            if (io->job < 0) io->job = strtol(d->in + i + 1, NULL, 10);
            d->rank = rank, d->err = err;
            i += (size_t)t;
            continue;
        }
        const size_t cut =
            d->rank < 0 && d->untagged.n == 0 ? cut_tag(io, d->in + i, d->n_in - i, at_eof, &rank) : 0;
        if (cut) { /* not the rank's text: dropped, and said once */
            char whose[48] = "the ranks'";
            if (rank >= 0) snprintf(whose, sizeof whose, "rank %d's", rank);
            if (!io->cut_said)
                st_launch_sayf(io->out,
                               "scaletrain launch: warning: mpirun dropped part of %s output (OpenMPI's "
                               "--tag-output overflows its buffer on a burst of lines under about 14 bytes): "
                               "lines near here are missing or joined\n",
                               whose);
            io->cut_said = true;
            i += cut;
            continue;
        }
        /* Text up to the next line end or possible tag. */
        size_t j = i + 1;
        while (j < d->n_in && d->in[j - 1] != '\n' && d->in[j - 1] != '\r' && d->in[j] != '[')
            j++;
        const char end = d->in[j - 1] == '\n' || d->in[j - 1] == '\r' ? d->in[j - 1] : 0;
        linebuf *b = current(io, d);
        const size_t len = j - i - (end ? 1 : 0);
        if (len && grow(b, len) == 0) { /* (an empty line: b->p may still be NULL) */
            memcpy(b->p + b->n, d->in + i, len);
            b->n += len;
        }
        if (end) flush_line(io, d, end);
        if (end == '\n') d->rank = -1; /* mpirun starts a new tag after a newline if the chunk goes on */
        i = j;
    }
    memmove(d->in, d->in + i, d->n_in - i);
    d->n_in -= i;
}

/* Whether process PID (a child of mpirun) is one of the job's ranks: its
 * environment holds OMPI_COMM_WORLD_RANK. mpirun's other children, the
 * agent that starts its daemons on other hosts (ssh), must not be signalled:
 * mpirun takes that agent's end for a failed daemon and kills the job, ranks
 * mid-save included (the other hosts' ranks stop by the ranks' agreement). */
static bool is_rank(const char *pid) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    static const char want[] = "OMPI_COMM_WORLD_RANK=";
    const size_t cap = 1 << 20; /* (an environment past 1 MiB: the rest unread) */
    char *env = malloc(cap + 1);
    const size_t n = env ? fread(env, 1, cap, f) : 0;
    fclose(f);
    bool found = false;
    for (size_t start = 0; env && start < n && !found;) { /* NUL-separated NAME=VALUE entries */
        const size_t len = strnlen(env + start, n - start);
        found = len >= sizeof want - 1 && memcmp(env + start, want, sizeof want - 1) == 0;
        start += len + 1;
    }
    free(env);
    return found;
}

/* Whether process pid has a handler for sig now (/proc's SigCgt): mpirun
 * catches SIGUSR1 (to pass it on to its ranks) from its start until its
 * ranks have ended; before and after, SIGUSR1 ends it. */
static bool catches(pid_t pid, int sig) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long mask = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "SigCgt: %llx", &mask) == 1;
    fclose(f);
    return found && (mask >> (sig - 1) & 1);
}

/* Whether process pid is a rank still in its start as far as sig goes: it
 * runs this scaletrain and does not catch sig yet (between its exec and its
 * handler: sig would end it, where a moment later it takes it as a stop). A
 * program that is not scaletrain is never held (it may never catch it). */
static bool unready_for(const char *pid, int sig) {
    if (catches((pid_t)atoi(pid), sig)) return false;
    char exe[300];
    snprintf(exe, sizeof exe, "/proc/%s/exe", pid);
    struct stat its, ours;
    return stat(exe, &its) == 0 && stat("/proc/self/exe", &ours) == 0 && its.st_dev == ours.st_dev &&
           its.st_ino == ours.st_ino;
}

/* Whether process pid (a /proc entry's name) is parent's child; with state,
 * its state there ('Z': ended, not yet waited for). */
static bool child_of(const char *pid, pid_t parent, char *state) {
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
    char st;
    int ppid;
    if (!close_paren || sscanf(close_paren + 1, " %c %d", &st, &ppid) != 2 || ppid != parent) return false;
    if (state) *state = st;
    return true;
}

/* The processes whose parent is `parent` (with ranks_only, those is_rank
 * takes for scaletrain's ranks): each sent sig (0: counted alone); how
 * many, -1 when /proc cannot be read. With `unready` (ranks_only and a
 * signal), a rank still in its start (unready_for) is counted there too and
 * not sent it. */
static int children(pid_t parent, int sig, bool ranks_only, int *unready) {
    DIR *dir = opendir("/proc");
    if (!dir) return -1;
    int any = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        if (child_of(e->d_name, parent, NULL) && (!ranks_only || is_rank(e->d_name))) {
            const bool wait = unready && ranks_only && sig && unready_for(e->d_name, sig);
            if (wait) ++*unready;
            if (sig && !wait) kill((pid_t)atoi(e->d_name), sig);
            any++;
        }
    }
    closedir(dir);
    return any;
}

/* Whether mpirun has started a process that is neither one of the job's
 * ranks nor mpirun itself forked for a rank, before its exec: the agent that
 * starts mpirun's daemons on other hosts (ssh, srun, the program
 * plm_rsh_agent names), so the job has ranks elsewhere, which a stop
 * reaches only through mpirun. (Where /proc cannot say: true, through
 * mpirun.) */
static bool has_agent(pid_t mpirun) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)mpirun);
    struct stat its;
    DIR *dir = stat(path, &its) == 0 ? opendir("/proc") : NULL;
    if (!dir) return true;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(dir))) {
        char state;
        if (!isdigit((unsigned char)e->d_name[0]) || !child_of(e->d_name, mpirun, &state) || state == 'Z' ||
            is_rank(e->d_name))
            continue;
        struct stat st;
        snprintf(path, sizeof path, "/proc/%s/exe", e->d_name);
        found = stat(path, &st) != 0 || st.st_dev != its.st_dev || st.st_ino != its.st_ino;
    }
    closedir(dir);
    return found;
}

/* Whether any rank of the job runs here, each sent sig; with unready,
 * those still in their start are left, and counted there. */
static bool signal_ranks(pid_t mpirun, int sig, int *unready) {
    return children(mpirun, sig, true, unready) > 0;
}

int st_launch_run(char *const *argv, int ranks, st_launch_out *lo, st_launch_result *res) {
    memset(res, 0, sizeof *res);
    /* a stop that came before this run (between two: the restart's look at
     * the checkpoints): nothing is started */
    const int early = atomic_exchange(&got_signal, 0);
    if (early) {
        res->signalled = early;
        char sig_name[16];
        snprintf(res->reason, sizeof res->reason, "stopped by %s before its ranks started",
                 st_signal_name(early, sig_name));
        st_launch_sayf(lo, "scaletrain launch: %s; nothing ran\n", res->reason);
        return 128 + early;
    }
    int out[2], err[2];
    if (pipe(out) != 0) return -1;
    if (pipe(err) != 0) {
        close(out[0]), close(out[1]);
        return -1;
    }
    struct sigaction old_chld, dfl;
    /* (SIGCHLD ignored, as a parent may leave it, reaps mpirun unseen:
     * waitpid would then fail and a failed job read as a clean one) */
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_chld);
    fflush(NULL);
    const pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        sigaction(SIGCHLD, &old_chld, NULL);
        st_launch_signals_end();  /* (mpirun's: the actions as they were) */
        signal(SIGPIPE, SIG_DFL); /* (the launcher ignores it: launch_out.c) */
        /* Its own process group: a signal to ours (Ctrl-C, timeout(1),
         * SLURM) reaches the launcher, which passes it on as said above. */
        setpgid(0, 0);
        /* A launcher that dies without passing anything on (SIGKILL, the
         * OOM killer) takes the job with it: mpirun gets SIGTERM and ends
         * the ranks, where it would train on unseen, holding out_dir's
         * lock. (Checked after: the launcher may be gone already.) */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != launcher) _exit(128 + SIGTERM);
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        execv(argv[0], argv);
        fprintf(stderr, "scaletrain launch: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(out[1]), close(err[1]);
    if (pid < 0) {
        close(out[0]), close(err[0]);
        sigaction(SIGCHLD, &old_chld, NULL);
        return -1;
    }
    job_io io = {.ranks = ranks, .out = lo, .res = res, .job = -1};
    io.lines = calloc((size_t)ranks * 2, sizeof *io.lines);
    for (int k = 0; k < 2; k++)
        io.d[k].fd_out = k + 1, io.d[k].rank = -1;
    struct pollfd pf[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    double first_signal = -1, relayed = -1;
    bool remote = false;       /* the stop goes as SIGUSR1, through mpirun: no rank of the job runs
                                * here; or to ranks here as each can take it (unready_for) */
    bool before_ranks = false; /* no rank had said a word when the stop came (through mpirun: it
                                * may have started none; here: one may have been ended by it before
                                * it set its handler) */
    double held = -1;          /* when a stop was held back: mpirun did not catch SIGUSR1 (below) */
    double ended_idle = -1;    /* when mpirun, stuck with no process started, was ended (below) */
    int hard = 0;              /* a second stop, sent to mpirun itself: the signal */
    int status = 0;
    bool waited = false; /* mpirun's end read (in the loop: below) */
    double ended = -1;   /* when */
    while (pf[0].fd >= 0 || pf[1].fd >= 0) {
        /* mpirun ended with its output still open: a process it started holds it (ssh to a host that
         * does not answer, left behind when mpirun died of a stop). 2 s for the last lines, then its
         * end is taken as the job's: the launcher waited on the pipe for ever, mpirun a zombie. */
        if (!waited && waitpid(pid, &status, WNOHANG) == pid) waited = true, ended = now_s();
        if (waited && now_s() - ended > 2.0) {
            st_launch_sayf(lo,
                           "scaletrain launch: mpirun (pid %d) has ended, and a process it started still "
                           "holds its output (ssh to a host that does not answer?): not waited for\n",
                           (int)pid);
            for (int k = 0; k < 2; k++)
                if (pf[k].fd >= 0) close(pf[k].fd), pf[k].fd = -1;
            break;
        }
        const int sig = atomic_exchange(&got_signal, 0);
        const double t = now_s();
        if (sig && waited) res->signalled = sig; /* (mpirun has ended: nothing to pass on) */
        if (sig && !waited) {
            res->signalled = sig;
            /* The same signal twice within a second is one request sent
             * twice (timeout(1) signals its child, then its whole group). */
            if (first_signal < 0) {
                /* No rank here (--hosts without this host): mpirun passes
                 * SIGUSR1 on to every rank of the job, which stops as on
                 * SIGTERM, where SIGTERM to mpirun would kill them a second
                 * later, mid-save. A rank here still
                 * in its start (unready_for: the signal would end it
                 * there, the stop lost) is left, and gets the relay's
                 * SIGUSR1 below once it can take it (those ready get the
                 * signal now), none going to mpirun (which would pass it
                 * on to them). */
                int unready = 0;
                if (signal_ranks(pid, sig, &unready)) {
                    if (unready) remote = true, relayed = t;
                } else {
                    /* (mpirun not catching it yet, before any rank spoke:
                     * it ends on it, nothing ran; catching it with no agent
                     * for other hosts (has_agent), none started yet: the
                     * ranks are all to start here, and each gets the relay's
                     * SIGUSR1 below once it can take it, where mpirun would
                     * pass it on to a rank it had just started, which then
                     * dies of it; not catching it after a rank spoke: held
                     * back, below) */
                    const bool catching = catches(pid, SIGUSR1);
                    if (catching ? has_agent(pid) : io.job < 0)
                        kill(pid, SIGUSR1);
                    else if (!catching)
                        held = t;
                    remote = true, relayed = t;
                }
                before_ranks = io.job < 0;
                /* (a duplicate: one within a second from here, as the
                 * scan of /proc above may have been slow while it came) */
                first_signal = now_s();
            } else if (t - first_signal > 1.0) {
                kill(pid, sig);
                hard = sig;
            }
        }
        /* (a bounded wait: a signal caught between the check above and the
         * poll is taken within a quarter second, not at mpirun's next line) */
        const int ready = poll(pf, 2, remote && io.job < 0 ? 100 : 250);
        if (ready < 0) {
            if (errno == EINTR) continue;
            break;
        }
        /* Ranks mpirun had not started when it passed the stop on (it
         * forwards to the ranks it has, none at first; and a rank that
         * speaks now may not have been started then): again every 0.1 s
         * until a rank speaks (a rank's set-up is shorter than a second:
         * the stop then reaches it there, before it trains), then every
         * 0.5 s (at 2 s a job of a few seconds trained to its end), as
         * SIGUSR1, to the ranks here or through mpirun (not the signal
         * received: train's SIGINT ends it the second time), until the
         * job ends. A rank takes a stop asked twice as one. Through mpirun
         * only while it catches it (once the ranks have ended, it no
         * longer does and would die of it, its status lost) and has an
         * agent for other hosts (has_agent: with none, the ranks are all
         * to start here, and one it had just started would die of it). */
        if (remote && !waited && now_s() - relayed >= (io.job < 0 ? 0.1 : 0.5)) {
            relayed = now_s();
            /* (a rank here in its start held for 10 s of the stop: then sent it, as a program that
             * never catches it would be) */
            int unready = 0;
            if (!signal_ranks(pid, SIGUSR1, now_s() - first_signal < 10.0 ? &unready : NULL) &&
                catches(pid, SIGUSR1) && has_agent(pid))
                kill(pid, SIGUSR1);
        }
        /* A stop passed on before any rank spoke, and 30 s on mpirun has
         * started no process at all (no rank here, no ssh or orted for
         * other hosts): it is stuck starting the job (a limit on open
         * files it hit, say) and forwards the stop to nothing; nothing ran,
         * so it is ended (it hung until a second stop). SIGKILL 2 s later
         * where SIGTERM did not end it. */
        if (remote && before_ranks && io.job < 0 && !waited && !hard && first_signal >= 0) {
            if (ended_idle < 0 && now_s() - first_signal >= 30.0 && children(pid, 0, false, NULL) == 0) {
                st_launch_sayf(lo,
                               "scaletrain launch: mpirun has started no process 30 s after the stop (stuck "
                               "starting the job: its messages above say why): ended; nothing ran\n");
                kill(pid, SIGTERM);
                ended_idle = now_s();
            } else if (ended_idle >= 0 && now_s() - ended_idle >= 2.0) {
                kill(pid, SIGKILL);
                ended_idle = 1e300; /* (once) */
            }
        }
        /* A stop held back, mpirun not catching SIGUSR1 after its ranks
         * spoke: they have ended and mpirun is ending, its output about to
         * close (nothing to stop); or this mpirun does not pass SIGUSR1 on
         * at all (ess_base_forward_signals): after 2 s with its output still
         * open, the signal received goes to mpirun itself, which ends the
         * job, rather than the job training on. */
        if (held >= 0 && waited) { /* (mpirun has ended: nothing to pass on, and its pid no longer its) */
            held = -1;
        } else if (held >= 0 && catches(pid, SIGUSR1)) {
            kill(pid, SIGUSR1);
            held = -1;
        } else if (held >= 0 && now_s() - held >= 2.0) {
            st_launch_sayf(lo,
                           "scaletrain launch: mpirun does not pass SIGUSR1 on to the ranks (no rank runs "
                           "here to stop): signal %d sent to mpirun, which ends the job without its "
                           "checkpoint\n",
                           res->signalled);
            kill(pid, res->signalled);
            held = -1;
        }
        /* (banners held that no rank has explained in 2 s, and a dashed
         * line of mpirun's that no banner followed in 1 s, go out) */
        if (io.holding && now_s() - io.held_since >= 2.0) release_held(&io);
        if (io.sep_n && !quiet_banners(&io) && now_s() - io.sep_since >= 1.0) put_held_sep(&io);
        for (int k = 0; k < 2; k++) {
            if (pf[k].fd < 0 || !(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            demux *d = &io.d[k];
            ST_INVARIANT(d->n_in < sizeof d->in, "launch: mpirun's output buffer is full after a parse");
            ssize_t r = read(pf[k].fd, d->in + d->n_in, sizeof d->in - d->n_in);
            if (r < 0 && errno == EINTR) continue;
            if (r > 0) {
                d->n_in += (size_t)r;
                parse(&io, d, false);
            } else {
                parse(&io, d, true);
                close(pf[k].fd);
                pf[k].fd = -1;
            }
        }
    }
    /* Partial last lines, each rank's and mpirun's own. */
    for (int r = 0; r < ranks * 2 && io.lines; r++)
        if (io.lines[r].n) emit(&io, r / 2, r % 2, 1, &io.lines[r], '\n');
    for (int k = 0; k < 2; k++)
        if (io.d[k].untagged.n) emit(&io, -1, false, io.d[k].fd_out, &io.d[k].untagged, '\n');
    if (io.holding) release_held(&io);
    if (io.sep_n) put_held_sep(&io);
    free(io.held.p);
    int werr = 0;
    for (; !waited;) {
        if (waitpid(pid, &status, 0) == pid) {
            waited = true;
            break;
        }
        if (errno != EINTR) {
            werr = errno;
            break;
        }
        /* (mpirun's output has closed: its ranks have ended, and SIGUSR1
         * would only kill mpirun before it says their end) */
        const int sig = atomic_exchange(&got_signal, 0);
        if (sig && !remote) kill(pid, sig), hard = sig;
        if (sig) res->signalled = sig;
    }
    /* (a stop that came as mpirun ended: the job is not restarted after it) */
    const int late = atomic_exchange(&got_signal, 0);
    if (late) res->signalled = late;
    sigaction(SIGCHLD, &old_chld, NULL);
    for (int r = 0; r < ranks * 2 && io.lines; r++)
        free(io.lines[r].p);
    free(io.lines);
    for (int k = 0; k < 2; k++)
        free(io.d[k].untagged.p);
    if (!waited) {
        snprintf(res->reason, sizeof res->reason, "its end could not be read (waitpid: %s)", strerror(werr));
        st_launch_sayf(lo, "scaletrain launch: mpirun (pid %d): %s; taken as a failure\n", (int)pid,
                       res->reason);
        return 1;
    }
    /* Stopped before any rank ran: mpirun ends on the signal, and no rank
     * said a word; a stop it is, as a rank's would be (128 + the signal) */
    /* (through mpirun, which passed SIGUSR1 on before its ranks were up: OpenMPI 4.1 then fails to route
     * it and exits 0, no rank having run, where the launcher said exit 0) */
    if (before_ranks && io.job < 0 && res->signalled &&
        (remote || !(WIFEXITED(status) && WEXITSTATUS(status) == 0))) {
        char sig_name[16];
        if (remote) {
            snprintf(res->reason, sizeof res->reason, "stopped by %s before its ranks started",
                     st_signal_name(res->signalled, sig_name));
            st_launch_sayf(lo, "scaletrain launch: %s; nothing ran\n", res->reason);
        } else { /* (the ranks here got it: one may have been ended by it before it could take it) */
            snprintf(res->reason, sizeof res->reason, "stopped by %s before any rank printed a line",
                     st_signal_name(res->signalled, sig_name));
            st_launch_sayf(lo, "scaletrain launch: %s\n", res->reason);
        }
        return 128 + res->signalled;
    }
    /* The ranks stopped on the SIGUSR1 passed on for the signal received:
     * the launcher's status is the signal's, as where the ranks got it */
    if (remote && res->signalled && WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGUSR1)
        return 128 + res->signalled;
    /* (mpirun ended by the SIGUSR1 passed on, as it stopped catching it:
     * the stop had reached its ranks) */
    if (remote && res->signalled && WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1)
        return 128 + res->signalled;
    /* (mpirun ending the job on a second stop may itself crash, "abort is
     * already in progress": its signal is not the job's result, the stop
     * asked for is) */
    if (hard && WIFSIGNALED(status) && WTERMSIG(status) != hard) {
        st_launch_sayf(lo,
                       "scaletrain launch: mpirun ended on signal %d while it ended the job on the second "
                       "stop (signal %d); the exit status is the stop's\n",
                       WTERMSIG(status), hard);
        return 128 + res->signalled;
    }
    /* (mpirun ending the job on a second stop by its exit status: rank 0
     * killed before its line, the job's result is the stop, said here) */
    if (hard && WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) < 128) {
        st_launch_sayf(
            lo,
            "scaletrain launch: the second stop (signal %d) ended the job at once (mpirun exited %d), "
            "before the ranks finished the first stop's checkpoint; the checkpoints written before "
            "it are whole, and --resume auto continues from the latest\n",
            hard, WEXITSTATUS(status));
        return 128 + res->signalled;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) { /* mpirun itself killed, not by this launcher: it said nothing (exit 137) */
        char buf[16];
        const char *name = st_signal_name(WTERMSIG(status), buf);
        if (!res->reason[0]) snprintf(res->reason, sizeof res->reason, "mpirun was killed by %s", name);
        st_launch_sayf(
            lo, "scaletrain launch: mpirun itself was killed by %s%s\n", name,
            WTERMSIG(status) == SIGKILL
                ? ", which scaletrain never sends: most often the kernel's out-of-memory killer on "
                  "this node (`dmesg` says), else a scheduler ending the job; its ranks end with it"
                : "");
    }
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
