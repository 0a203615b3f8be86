/* `scaletrain train`: one training run. */
#include "cli.h"

int st_cmd_train(int argc, char **argv) {
    st_config cfg;
    st_run_opts opts = {.save = true};
    int rc = st_cli_run_args("train", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    st_run_result res;
    st_status s = st_train(&cfg, &opts, &res);
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
