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
#include <stdio.h>

#include "cli.h"

int st_cmd_train(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {.save = true};
    int rc = st_cli_run_args("train", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    st_cli_run_stops(&opts,
                     "scaletrain: stopping at the end of this step (or evaluation batch), saving what "
                     "was trained; Ctrl-C again, a second from now, ends the run at once without saving\n");
    st_run_result res;
    st_status s = st_train(&cfg, &opts, &res);
    if (s == ST_ERR_INTERRUPTED) return st_cli_run_stopped(&res, &opts);
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
