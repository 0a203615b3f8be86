/* `scaletrain eval`: evaluate saved weights. A stop signal (SIGTERM,
 * Ctrl-C, ...: cli.h) ends the evaluation at its next batch, on every rank,
 * with exit 128 + the signal; a second Ctrl-C a second later at once. */
#include <stdio.h>

#include "cli.h"

int st_cmd_eval(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("eval", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    if (!opts.init) {
        fprintf(stderr, "scaletrain eval: --init WEIGHTS is required (e.g. runs/default/model.safetensors)\n");
        return ST_EXIT_USAGE;
    }
    st_cli_run_stops(&opts, "scaletrain: stopping the evaluation at its next batch; Ctrl-C again, a second "
                            "from now, ends it at once\n");
    st_run_result res;
    st_status s = st_evaluate(&cfg, &opts, &res);
    if (s == ST_ERR_INTERRUPTED) return st_cli_run_stopped(&res, &opts);
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
