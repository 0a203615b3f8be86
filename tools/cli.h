/* Shared pieces of the `scaletrain` command: each subcommand is one file. */
#ifndef ST_TOOLS_CLI_H
#define ST_TOOLS_CLI_H

#include <stdatomic.h>

#include "scaletrain/config.h"
#include "scaletrain/train.h"

/* Exit codes: 0 ok, 1 failure, 2 usage. */
enum { ST_EXIT_OK = 0, ST_EXIT_FAIL = 1, ST_EXIT_USAGE = 2 };

int st_cmd_train(int argc, char **argv);
int st_cmd_eval(int argc, char **argv);
int st_cmd_data(int argc, char **argv);
int st_cmd_launch(int argc, char **argv);
int st_cmd_plan(int argc, char **argv);
int st_cmd_check(int argc, char **argv);
int st_cmd_bench(int argc, char **argv);
int st_cmd_slurm(int argc, char **argv);
int st_cmd_report(int argc, char **argv);
int st_cmd_sample(int argc, char **argv);
/* `check`'s all-reduce test, one rank of it (tools/check_comm.c). */
int st_check_allreduce_worker(bool nccl);

/* Parse [CONFIG] [--set k=v]... [--init W] [--json] [--quiet] into cfg and opts.
 * Returns -1 on success or an exit code. */
int st_cli_run_args(const char *cmd, int argc, char **argv, st_config *cfg, st_run_opts *opts);
/* cmd's options that take a value and may be given once (once, NULL-ended)
 * given twice in argv: said, naming both values (the last would win
 * without a word), and ST_EXIT_USAGE; else -1. The value after each of
 * them, and after each of `repeat` (--set), is skipped, not read as an
 * option. */
int st_cli_once(const char *cmd, int argc, char **argv, const char *const *once, const char *const *repeat);
/* The value v of command cmd's option opt as a whole number from min to
 * max into *out, or false after saying so on standard error, with usage
 * (tools/args.c). */
bool st_cli_int_arg(const char *cmd, const char *opt, const char *v, long long min, long long max,
                    const char *usage, int64_t *out);
/* name's path on PATH (out, n bytes), or false. */
bool st_cli_find_on_path(const char *name, char *out, size_t n);
/* This executable's path (/proc/self/exe), or "scaletrain". */
void st_cli_self_path(char *out, size_t n);
/* Run argv (PATH searched) with stdout and stderr to the files (NULL: ours)
 * and stdin from /dev/null, in a process group of its own that is killed
 * after timeout_s, and sent SIGTERM when this process ends. Returns its exit
 * status (128 + N for signal N), -1 when it could not start or be waited for,
 * -2 when it ran out of time. (tools/proc.c) */
int st_cli_spawn(char *const *argv, const char *out_path, const char *err_path, double timeout_s);
/* The same, the stop signal that *stop receives (st_cli_catch_stops)
 * passed on to the child's group once, and waited for as its end. */
int st_cli_spawn_stoppable(char *const *argv, const char *out_path, const char *err_path, double timeout_s,
                           atomic_int *stop);
/* A whole file as a string (caller frees), or NULL (errno says why: it
 * could not be opened or read, or memory ran out). */
char *st_cli_read_file(const char *path);
/* The same with its length in *len (NULL: not wanted), NUL bytes included. */
char *st_cli_read_bytes(const char *path, size_t *len);
/* fclose of a file written through stdio: true when every write reached
 * it. fclose alone reports only its own flush, not a buffer flushed (and
 * lost: a full disk) by an earlier write; *err is the errno to tell (EIO
 * where that earlier one's is gone). The file is closed either way. */
bool st_cli_close_written(FILE *f, int *err);
/* An output file (a chart, report.html, bench.md) written under a
 * temporary name beside it, PATH.tmp.PID, and renamed over PATH once
 * whole: a stop, a crash or a full disk leaves PATH as it was, never cut
 * short or emptied (it was opened in place, truncated at once). */
typedef struct st_cli_output {
    const char *path; /* borrowed: must outlive the file */
    char target[4200]; /* path, or where a symbolic link at path points (written through, not replaced) */
    char tmp[4300];
} st_cli_output;
/* The names alone, for a file another program writes (gnuplot's PNG):
 * it writes o->tmp, then st_cli_output_commit. */
void st_cli_output_name(st_cli_output *o, const char *path);
/* The temporary file to write, or NULL (errno set). */
FILE *st_cli_output_open(st_cli_output *o, const char *path);
/* Rename the whole temporary file over the path (removed, and said, where
 * that fails). */
st_status st_cli_output_commit(st_cli_output *o);
/* Close f (st_cli_close_written) and rename it over the path; where a
 * write failed the temporary is removed and the error names the path,
 * says why and that the part written was removed. */
st_status st_cli_output_close(st_cli_output *o, FILE *f);
/* Catch the stop signals: SIGTERM, SIGINT, SIGQUIT, SIGUSR1, and SIGHUP
 * unless it is ignored (nohup: the command then outlives its terminal).
 * Each stores its number in the returned flag, which the command reads to
 * stop cleanly and exit 128 + it. SIGTERM, SIGQUIT and SIGUSR1 ask the same
 * however often they come (under SLURM a task may get SIGTERM twice; the
 * hard stop is SLURM's SIGKILL). A second SIGINT (Ctrl-C twice) a second or
 * more after the first ends the process at once; the same one twice within
 * a second is one request sent twice (`timeout -s INT` signals its child,
 * then its group). Interrupted system calls resume. (tools/stops.c) */
atomic_int *st_cli_catch_stops(void);
/* The line (with its newline) said on standard error when the first
 * SIGINT comes (Ctrl-C: a person waits to see it heard; SIGTERM comes from
 * schedulers and launchers), "stopping at the end of this step": set before the
 * signals come; "" says nothing. */
void st_cli_stop_ack(const char *line);
/* A run's stops (train, eval): the signals caught into opts->stop, and the
 * first Ctrl-C acknowledged with `line` by rank 0 alone under a launcher
 * (the others' lines would repeat it). */
void st_cli_run_stops(st_run_opts *opts, const char *line);
/* The exit of a run a stop ended (ST_ERR_INTERRUPTED): its message said
 * (bounded, as st_cli_error's; a stop the ranks agreed on by rank 0 alone:
 * res->stop_said), and 128 + the ranks' agreed signal (this rank's own
 * where none was agreed, SIGTERM where neither is known). */
int st_cli_run_stopped(const st_run_result *res, const st_run_opts *opts);
/* The last line of text that starts with '{' (text is cut into lines), or NULL. */
const char *st_cli_last_json_line(char *text);
/* st_hw_probe (hw/probe.h) under a stall watch of train.device_timeout_s:
 * a GPU that stopped answering holds the driver's first calls (cuInit,
 * NVML) for good, as nvidia-smi then hangs; the command `cmd` ends saying
 * so instead. (tools/args.c) */
typedef struct st_hw_info st_hw_info;
st_status st_cli_probe(const char *cmd, const st_config *cfg, st_hw_info *h);
/* Whether the GPUs the probe found (h; NULL: not probed) are ones this
 * build cannot use: gpus, the CUDA runtime's count, is 0 (why: its reason:
 * no cuBLASLt, a runtime newer than the driver). The sentence saying so
 * into out ("the driver sees 1 GPU (NAME), and this build cannot use it:
 * WHY"): check fails on it, plan plans "local" on the CPU. (tools/args.c) */
bool st_cli_gpus_unusable(const st_hw_info *h, int gpus, const char *why, char *out, size_t n);
/* Print "scaletrain: error: <last error>" and return ST_EXIT_FAIL (only
 * the return when st_cli_report_agreed printed it already). */
int st_cli_error(st_status s);
/* st_run_opts.report_agreed_error: st_cli_error now, while the ranks still
 * wait for each other (st_cli_run_args sets it). */
void st_cli_report_agreed(st_status s);

#endif
