/* `scaletrain train`: one training run. SIGTERM, SIGINT, SIGQUIT, SIGHUP and
 * SIGUSR1 (SLURM pre-emption or time limit, Ctrl-C, Ctrl-\, the terminal
 * closed; SIGUSR1: SLURM's --signal=USR1@T warning, and what launch passes
 * through mpirun to ranks on other hosts) ask the run to stop: it finishes
 * the step, saves a checkpoint and exits with 128 + the signal (143 for
 * SIGTERM, 130 for SIGINT, 131 for SIGQUIT, 129 for SIGHUP, 138 for
 * SIGUSR1); `--resume auto`
 * continues it. SIGHUP ignored when the run starts (nohup) stays ignored:
 * the run then outlives its terminal, its output to it dropped
 * (train/session.c). SIGTERM asks the same
 * however often it comes: under SLURM a task may get it twice (from its own
 * step, and forwarded by srun), and the hard stop is SLURM's SIGKILL after
 * the grace time; so does SIGQUIT. A second SIGINT (Ctrl-C twice) ends the
 * process at once (the previous checkpoint stays whole), where it comes a
 * second or more after the first: the same one twice within a second is one
 * request sent twice (`timeout -s INT` signals its child, then its group). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/ticker.h"

/* The one global: a signal handler can only reach a flag. A lock-free atomic,
 * not a volatile sig_atomic_t: the handler may run on a thread of MPI's
 * while the step loop and the output queue's writer read it. */
static atomic_int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only store to a lock-free atomic");

/* When the first SIGINT came (CLOCK_MONOTONIC, ns; 0: none yet). */
static atomic_llong first_int_ns;
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "a signal handler may only store to a lock-free atomic");

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
}

int st_cmd_train(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {.save = true};
    int rc = st_cli_run_args("train", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
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
    opts.stop = &stop_signal;
    st_run_result res;
    st_status s = st_train(&cfg, &opts, &res);
    if (s == ST_ERR_INTERRUPTED) {
        char line[4096];
        snprintf(line, sizeof line, "scaletrain: %s\n", st_last_error());
        /* (bounded, as st_cli_error: the job may be ending because its storage hung; a stop all the
         * ranks agreed on is said by rank 0 alone) */
        if (!res.stop_said) st_ticker_say(line);
        const int sig = atomic_load_explicit(&stop_signal, memory_order_relaxed);
        return 128 + (sig ? sig : SIGTERM);
    }
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
