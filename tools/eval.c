/* `scaletrain eval`: evaluate saved weights. A stop signal (SIGTERM,
 * Ctrl-C, ...: cli.h) ends the evaluation at its next batch, on every rank,
 * with exit 128 + the signal; a second Ctrl-C a second later at once. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/launcher.h"
#include "core/ticker.h"

int st_cmd_eval(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("eval", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    if (!opts.init) {
        fprintf(stderr, "scaletrain eval: --init WEIGHTS is required (e.g. runs/default/model.safetensors)\n");
        return ST_EXIT_USAGE;
    }
    opts.stop = st_cli_catch_stops();
    const char *rank = st_launcher_rank(); /* (rank 0's alone under a launcher) */
    if (!rank || !strcmp(rank, "0"))
        st_cli_stop_ack(
            "scaletrain: stopping the evaluation at its next batch; Ctrl-C again, a second from now, "
            "ends it at once\n");
    st_run_result res;
    st_status s = st_evaluate(&cfg, &opts, &res);
    if (s == ST_ERR_INTERRUPTED) {
        char line[4096];
        snprintf(line, sizeof line, "scaletrain: %s\n", st_last_error());
        if (!res.stop_said) st_ticker_say(line);
        const int sig =
            res.stop_signal ? res.stop_signal : atomic_load_explicit(opts.stop, memory_order_relaxed);
        return 128 + (sig ? sig : SIGTERM);
    }
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
