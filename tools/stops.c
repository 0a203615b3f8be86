/* The stop signals of a command that ends cleanly on them (train, data
 * tokenize): see cli.h, st_cli_catch_stops. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/launcher.h"
#include "core/ticker.h"
#include "scaletrain/status.h"

/* The one global: a signal handler can only reach a flag. A lock-free atomic,
 * not a volatile sig_atomic_t: the handler may run on a thread of MPI's
 * while the step loop and the output queue's writer read it. */
static atomic_int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only store to a lock-free atomic");

/* When the first SIGINT came (CLOCK_MONOTONIC, ns; 0: none yet). */
static atomic_llong first_int_ns;
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "a signal handler may only store to a lock-free atomic");

/* The line said on the first stop (st_cli_stop_ack), and whether it was. */
static char ack[512];
static size_t ack_len;
static atomic_int acked;

static void on_signal(int sig) {
    if (sig == SIGINT) { /* (clock_gettime, signal and raise are async-signal-safe) */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long first = 0;
        const long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + 1;
        if (!atomic_compare_exchange_strong(&first_int_ns, &first, ns) && ns - first >= 1000000000LL) {
            signal(SIGINT, SIG_DFL); /* Ctrl-C again: the process ends on it (once this handler returns) */
            raise(SIGINT);
            return;
        }
    }
    atomic_store_explicit(&stop_signal, sig, memory_order_relaxed);
    /* (Ctrl-C's alone: a person at a terminal waits for it; SIGTERM comes from
     * schedulers, timeout and mpirun ending a job's other ranks. write is
     * async-signal-safe; the line is said once.) */
    int was = 0;
    if (sig == SIGINT && ack_len && atomic_compare_exchange_strong(&acked, &was, 1)) {
        const ssize_t w = write(STDERR_FILENO, ack, ack_len);
        (void)w;
    }
}

void st_cli_stop_ack(const char *line) {
    /* (a progress bar on a terminal ends its line first) */
    const bool bar = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    const int n = snprintf(ack, sizeof ack, "%s%s", bar ? "\n" : "", line);
    ack_len = n > 0 ? ((size_t)n < sizeof ack ? (size_t)n : sizeof ack - 1) : 0;
}

atomic_int *st_cli_catch_stops(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* Interrupted system calls resume (a save in progress is not cut short). */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, NULL);
    /* SIGQUIT asks as SIGTERM does, however often: timeout(1) and other
     * wrappers send a signal to their child and again to its group */
    sigaction(SIGQUIT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL); /* (a second, a second later, ends the process: on_signal) */
    return &stop_signal;
}

void st_cli_run_stops(st_run_opts *opts, const char *line) {
    opts->stop = st_cli_catch_stops();
    const char *rank = st_launcher_rank();
    if (!rank || !strcmp(rank, "0")) st_cli_stop_ack(line);
}

int st_cli_run_stopped(const st_run_result *res, const st_run_opts *opts) {
    char line[4096];
    snprintf(line, sizeof line, "scaletrain: %s\n", st_last_error());
    if (!res->stop_said) st_ticker_say(line);
    const int sig = res->stop_signal ? res->stop_signal
                    : opts->stop     ? atomic_load_explicit(opts->stop, memory_order_relaxed)
                                     : 0;
    return 128 + (sig ? sig : SIGTERM);
}
