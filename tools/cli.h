/* Shared pieces of the `scaletrain` command: each subcommand is one file. */
#ifndef ST_TOOLS_CLI_H
#define ST_TOOLS_CLI_H

#include "scaletrain/config.h"
#include "scaletrain/train.h"

/* Exit codes: 0 ok, 1 failure, 2 usage. */
enum { ST_EXIT_OK = 0, ST_EXIT_FAIL = 1, ST_EXIT_USAGE = 2 };

int st_cmd_train(int argc, char **argv);
int st_cmd_eval(int argc, char **argv);
int st_cmd_data(int argc, char **argv);
int st_cmd_launch(int argc, char **argv);

/* Parse [CONFIG] [--set k=v]... [--init W] [--json] [--quiet] into cfg and opts.
 * Returns -1 on success or an exit code. */
int st_cli_run_args(const char *cmd, int argc, char **argv, st_config *cfg, st_run_opts *opts);
/* name's path on PATH (out, n bytes), or false. */
bool st_cli_find_on_path(const char *name, char *out, size_t n);
/* This executable's path (/proc/self/exe), or "scaletrain". */
void st_cli_self_path(char *out, size_t n);
/* Print "scaletrain: error: <last error>" and return ST_EXIT_FAIL. */
int st_cli_error(st_status s);

#endif
