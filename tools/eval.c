/* `scaletrain eval`: evaluate saved weights. */
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
    st_run_result res;
    st_status s = st_evaluate(&cfg, &opts, &res);
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
