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

#include "cli.h"
#include "core/launcher.h"
#include "core/ticker.h"

int st_cmd_train(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {.save = true};
    int rc = st_cli_run_args("train", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    opts.stop = st_cli_catch_stops(); /* (the signals and their rules: cli.h) */
    /* (rank 0's alone under a launcher: the others' lines would repeat it) */
    const char *rank = st_launcher_rank();
    if (!rank || !strcmp(rank, "0"))
        st_cli_stop_ack("scaletrain: stopping at the end of this step (or evaluation batch), saving what was "
                        "trained; Ctrl-C "
                        "again, a second from now, ends the run at once without saving\n");
    st_run_result res;
    st_status s = st_train(&cfg, &opts, &res);
    if (s == ST_ERR_INTERRUPTED) {
        char line[4096];
        snprintf(line, sizeof line, "scaletrain: %s\n", st_last_error());
        /* (bounded, as st_cli_error: the job may be ending because its storage hung; a stop all the
         * ranks agreed on is said by rank 0 alone) */
        if (!res.stop_said) st_ticker_say(line);
        /* (the ranks' agreed signal: a rank the signal did not reach exits as the others) */
        const int sig =
            res.stop_signal ? res.stop_signal : atomic_load_explicit(opts.stop, memory_order_relaxed);
        return 128 + (sig ? sig : SIGTERM);
    }
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
