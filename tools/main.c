/* `scaletrain`: dispatch to one subcommand. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/blas.h"

/* Each command's lines of the usage: its synopsis, then what it does. */
static const struct {
    const char *name, *text;
} COMMANDS[] = {
    {"train",
     "  train [CONFIG.yaml] [--set key=value]... [--init WEIGHTS] [--resume auto|CKPT_DIR] [--json]\n"
     "        [--quiet] [--profile FIRST-LAST|STEP]\n"
     "                      train (default: a CNN on Fashion-MNIST, one epoch); --profile writes\n"
     "                      OUT_DIR/trace.json (Chrome trace) for those steps\n"},
    {"eval", "  eval [CONFIG.yaml] --init WEIGHTS [--set key=value]... [--json] [--quiet]\n"
             "                      evaluate saved weights on the validation data\n"},
    {"sample",
     "  sample [CONFIG.yaml] --init WEIGHTS [--prompt TEXT | --prompt-file F | --prompt-ids I,J,...]\n"
     "        [--tokens N] [--samples N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
     "        [--stop-id I] [--tokenizer FILE] [--set key=value]... [--no-graph] [--json] [--quiet]\n"
     "                      continue a prompt with a trained gpt (its weights say its shape)\n"},
    {"launch", "  launch -n N|auto [--cores-per-rank C] [--hosts H1:n1,...] [--max-restarts K]\n"
               "        [--output-timeout S] COMMAND...\n"
               "                      N ranks of COMMAND (e.g. train run.yaml) under mpirun\n"},
    {"plan", "  plan [CONFIG.yaml] [--set key=value]... [--hw 4xL40S,8xH100,...] [--nodes N]\n"
             "        [--efficiency E] [--json] [--probe]\n"
             "                      predicted micro-batch, memory and speed per hardware configuration\n"},
    {"check",
     "  check [CONFIG.yaml] [--set key=value]...\n"
     "                      is this machine ready? (cores, memory, MPI, a 2-rank self-test, data)\n"},
    {"bench", "  bench [-n 1,2,4] [CONFIG.yaml] [--set key=value]... [--steps S] [--warmup W]\n"
              "        [--out DIR]\n"
              "                      throughput and weak-scaling efficiency at each rank count\n"},
    {"report", "  report RUN_DIR [--out DIR] [--no-png]\n"
               "                      loss, throughput, memory and lr charts (SVG, PNG through gnuplot) and\n"
               "                      report.html, a one-page summary, from RUN_DIR/metrics.jsonl\n"},
    {"slurm", "  slurm CONFIG.yaml --nodes N --gpus-per-node G [--time HH:MM:SS] [--partition P] ...\n"
              "                      an sbatch script (srun, requeue on pre-emption) on stdout\n"},
    {"data", "  data tokenize OUT FILE... [--shard-tokens N] [--jobs J]\n"
             "                      byte-level token file, or shards written J at a time, from text files\n"
             "  data inspect FILE|PATTERN|CHECKPOINT|RUN_DIR\n"
             "                      what a data or weights file, a checkpoint or a run's out_dir holds\n"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: scaletrain COMMAND [ARGS]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fputs(COMMANDS[i].text, f);
    fprintf(f, "\nconfiguration keys: docs/config.md\n");
}

/* `scaletrain CMD ... --help` for the commands whose own parsers do not
 * take it (train, eval, data, sample): its lines of the usage, on standard output. */
static bool command_help(const char *cmd, int argc, char **argv) {
    if (strcmp(cmd, "train") != 0 && strcmp(cmd, "eval") != 0 && strcmp(cmd, "data") != 0 &&
        strcmp(cmd, "sample") != 0)
        return false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--set") || !strcmp(a, "--init") || !strcmp(a, "--resume") ||
            !strcmp(a, "--profile") || !strcmp(a, "--shard-tokens") || !strcmp(a, "--jobs") ||
            (!strcmp(cmd, "sample") && !strncmp(a, "--", 2) && strcmp(a, "--json") && strcmp(a, "--quiet") &&
             strcmp(a, "--no-graph") && strcmp(a, "--help"))) {
            i++; /* (a value, even one that reads --help) */
            continue;
        }
        if (strcmp(a, "--help") != 0 && strcmp(a, "-h") != 0) continue;
        for (int k = 0; k < N_COMMANDS; k++)
            if (!strcmp(COMMANDS[k].name, cmd)) printf("usage:\n%s", COMMANDS[k].text);
        printf("\nconfiguration keys: docs/config.md; commands: docs/commands.md\n");
        return true;
    }
    return false;
}

/* For the commands whose standard output is what they make (slurm's sbatch
 * script, plan's table or JSON, data inspect's listing, check's verdict,
 * bench's table, report's list of what it wrote): a write that failed
 * (`> job.sbatch` on a full disk) fails the command, so that a truncated
 * script is never taken for a whole one. (train and eval write progress
 * there and train on when it fails, as README.md says; sample checks its
 * own.) */
static int output_checked(int rc) {
    const bool flushed = fflush(stdout) == 0;
    const int err = errno;
    if (flushed && !ferror(stdout)) return rc;
    fprintf(stderr, "scaletrain: error: writing standard output failed (%s): what it holds is incomplete\n",
            flushed ? "an earlier write" : strerror(err));
    return rc == ST_EXIT_OK ? ST_EXIT_FAIL : rc;
}

int main(int argc, char **argv) {
    /* A write past a file-size limit (ulimit -f, a cluster's) fails with
     * EFBIG and is said as any failed write is, the run's files kept; by
     * default SIGXFSZ killed the process without a word, the final weights
     * unwritten. Ignored here, it stays ignored in the ranks launch starts. */
    signal(SIGXFSZ, SIG_IGN);
    /* Standard streams started closed (`>&-`): each slot held by a
     * descriptor that fails every read and write as the closed one did
     * (O_PATH: EBADF, said as lines not written), so that no pipe or file
     * the process opens lands there (launch's pipe from mpirun took fd 1,
     * and its own lines went nowhere without a word). */
    for (int fd = 0; fd <= 2; fd++) /* (open takes the lowest free slot: fd, those below it filled) */
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) (void)open("/dev/null", O_PATH | O_CLOEXEC);
    st_blas_core_check(argv); /* (may start this program again, with the CPU's own kernels) */
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? ST_EXIT_USAGE : ST_EXIT_OK;
    }
    const char *cmd = argv[1];
    if (command_help(cmd, argc - 2, argv + 2)) return ST_EXIT_OK;
    if (strcmp(cmd, "train") == 0) return st_cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0) return st_cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "data") == 0) return output_checked(st_cmd_data(argc - 2, argv + 2));
    if (strcmp(cmd, "sample") == 0) return st_cmd_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "launch") == 0) return st_cmd_launch(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return output_checked(st_cmd_plan(argc - 2, argv + 2));
    if (strcmp(cmd, "check") == 0) return output_checked(st_cmd_check(argc - 2, argv + 2));
    if (strcmp(cmd, "bench") == 0) return output_checked(st_cmd_bench(argc - 2, argv + 2));
    if (strcmp(cmd, "report") == 0) return output_checked(st_cmd_report(argc - 2, argv + 2));
    if (strcmp(cmd, "slurm") == 0) return output_checked(st_cmd_slurm(argc - 2, argv + 2));
    fprintf(stderr, "scaletrain: unknown command '%s'\n", cmd);
    usage(stderr);
    return ST_EXIT_USAGE;
}
