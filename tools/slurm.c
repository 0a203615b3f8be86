/* `scaletrain slurm CONFIG --nodes N --gpus-per-node G [--tasks-per-node T]
 * [--cpus-per-task C] [--time T] [--partition P] [--job-name J]
 * [--set key=value]...`: an sbatch script on stdout that trains CONFIG on N
 * nodes, one task per GPU (or T tasks, each a group of C cores, on CPU nodes).
 *
 * What the script relies on (checked by tests/e2e/slurm.sh on a real
 * single-node SLURM 22.05 with Debian's OpenMPI 4.1):
 * - `srun --mpi=pmix`: OpenMPI takes each task's rank and the world size
 *   from SLURM's PMIx plugin, so no launcher runs in the job. Plain `srun`
 *   works only where the cluster's MpiDefault is pmix; `--mpi=pmi2` does not
 *   work with Debian's OpenMPI (no PMI2 support).
 * - SIGTERM: `--signal=TERM@120` sends it to every task 120 s before the time
 *   limit, and pre-emption or `scancel` sends it too. scaletrain finishes the
 *   step, saves a checkpoint and exits 143 (tools/train.c); the batch shell
 *   traps SIGTERM so that it outlives srun, then requeues the job
 *   (`scontrol requeue`, with --requeue) and `--resume auto` continues from
 *   the checkpoint. Exit codes: 0 done, 143 stopped by SIGTERM and requeued,
 *   130 SIGINT, 1 an error (not requeued), 2 a usage error.
 * - A SIGTERM to the batch script (`scancel --signal=TERM --full`, which in
 *   SLURM 22.05 signals the batch step's processes and not the other steps;
 *   `--signal=B:TERM`) is passed on by the shell's trap to the ranks with
 *   `scancel --signal=TERM JOB` (the steps only). srun runs in a session of
 *   its own (setsid) so that such a signal does not reach it: srun turns a
 *   SIGTERM of its own into SIGKILL of every task ("srun: forcing job
 *   termination"), before they can save. setsid keeps srun out of the batch
 *   script's process group, which is what SLURM signals where it tracks
 *   processes by process group (ProctrackType=proctrack/pgid, as in the
 *   test); with proctrack/cgroup a --full signal reaches srun anyway, and
 *   SLURM 22.05's srun ends the step with SIGTERM, which the ranks save on
 *   (tests/e2e/slurm_preempt.sh runs on both, docs/commands.md). bash does not interrupt
 *   `wait` on a child in another session for a trapped signal, so the shell
 *   polls srun instead.
 * - --kill-on-bad-exit: a rank that fails ends the step at once instead of
 *   leaving the others in a collective until dist.timeout_s. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "train/checkpoint.h"

static void usage(FILE *f) {
    fprintf(
        f, "usage: scaletrain slurm CONFIG --nodes N --gpus-per-node G [--tasks-per-node T] [--cpus-per-task "
           "C]\n"
           "                       [--time HH:MM:SS] [--stop-before S] [--partition P] [--job-name NAME]\n"
           "                       [--set key=value]...\n"
           "  writes an sbatch script to stdout: one task per GPU (G > 0) or T tasks per node\n"
           "  (G = 0, CPU nodes), srun --mpi=pmix scaletrain train CONFIG --resume auto, requeue\n"
           "  after SIGTERM (pre-emption, and S seconds before the time limit: default 120;\n"
           "  give more where a checkpoint takes longer to write). Example:\n"
           "    scaletrain slurm run.yaml --nodes 2 --gpus-per-node 8 --time 24:00:00 > job.sbatch\n");
}

static bool valid_time(const char *t) {
    /* SLURM's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S: an optional day
     * count and '-', then one to three groups of digits split by ':'; at
     * most 8 digits each, so that time_seconds cannot overflow */
    const char *p = t, *dash = strchr(t, '-');
    if (dash) {
        if (dash == t || dash - t > 8) return false;
        for (; p < dash; p++)
            if (*p < '0' || *p > '9') return false;
        p = dash + 1;
    }
    int groups = 0;
    for (;;) {
        const char *g = p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == g || p - g > 8) return false; /* an empty group, or another character; or too long */
        groups++;
        if (*p == '\0') break;
        if (*p++ != ':') return false;
    }
    return groups <= 3;
}

/* A valid --time in seconds: SLURM reads M, M:S, H:M:S, D-H, D-H:M, D-H:M:S. */
static long time_seconds(const char *t) {
    long v[3] = {0, 0, 0}, days = 0;
    int n = 0;
    const char *p = t, *dash = strchr(t, '-');
    if (dash) days = strtol(t, NULL, 10), p = dash + 1;
    while (n < 3) {
        v[n++] = strtol(p, (char **)&p, 10);
        if (*p != ':') break;
        p++;
    }
    if (dash) /* D-H, D-H:M, D-H:M:S */
        return days * 86400 + v[0] * 3600 + (n > 1 ? v[1] * 60 : 0) + (n > 2 ? v[2] : 0);
    return n == 1 ? v[0] * 60 : n == 2 ? v[0] * 60 + v[1] : v[0] * 3600 + v[1] * 60 + v[2];
}

static bool valid_word(const char *s) {
    for (const char *p = s; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || *p == ',' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return false;
    return s[0] != '\0';
}

/* s as one single-quoted shell word. */
static void put_quoted(const char *s) {
    putchar('\'');
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*p);
    }
    putchar('\'');
}

static long number(const char *opt, const char *v, long lo, long hi, bool *ok) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || end == v || x < lo || x > hi) {
        fprintf(stderr, "scaletrain slurm: %s %s: want a whole number from %ld to %ld\n", opt, v, lo, hi);
        *ok = false;
    }
    return x;
}

int st_cmd_slurm(int argc, char **argv) {
    long nodes = -1, gpus = -1, tasks = -1, cpus = -1, before = -1;
    const char *time_limit = NULL, *partition = NULL, *name = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    static const char *const once[] = {"--nodes",         "--gpus-per-node", "--tasks-per-node",
                                       "--cpus-per-task", "--time",          "--partition",
                                       "--job-name",      "--stop-before",   NULL},
                             *const sets[] = {"--set", NULL};
    bool ok = rest != NULL && st_cli_once("slurm", argc, argv, once, sets) < 0;
    for (int i = 0; ok && i < argc; i++) {
        const char *a = argv[i];
        static const char *const valued[] = {"--nodes",         "--gpus-per-node", "--tasks-per-node",
                                             "--cpus-per-task", "--time",          "--partition",
                                             "--job-name",      "--stop-before"};
        bool takes = false;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
            takes |= !strcmp(a, valued[k]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(rest);
            return ST_EXIT_OK;
        }
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "scaletrain slurm: %s needs a value\n", a);
            ok = false;
            break;
        }
        if (!strcmp(a, "--nodes"))
            nodes = number(a, argv[++i], 1, 100000, &ok);
        else if (!strcmp(a, "--gpus-per-node"))
            gpus = number(a, argv[++i], 0, 64, &ok);
        else if (!strcmp(a, "--tasks-per-node"))
            tasks = number(a, argv[++i], 1, 4096, &ok);
        else if (!strcmp(a, "--cpus-per-task"))
            cpus = number(a, argv[++i], 1, 4096, &ok);
        else if (!strcmp(a, "--time"))
            time_limit = argv[++i];
        else if (!strcmp(a, "--partition"))
            partition = argv[++i];
        else if (!strcmp(a, "--job-name"))
            name = argv[++i];
        else if (!strcmp(a, "--stop-before"))
            before = number(a, argv[++i], 10, 65535, &ok); /* (SLURM's --signal takes up to 65535 s) */
        else
            rest[nrest++] = argv[i];
    }
    if (ok && (nodes < 0 || gpus < 0)) {
        fprintf(stderr,
                "scaletrain slurm: --nodes N and --gpus-per-node G are required (G = 0 for CPU nodes)\n");
        ok = false;
    }
    if (ok && gpus > 0 && tasks > 0 && tasks != gpus) {
        fprintf(stderr,
                "scaletrain slurm: --tasks-per-node %ld with --gpus-per-node %ld: GPU nodes run one task per "
                "GPU; leave --tasks-per-node out\n",
                tasks, gpus);
        ok = false;
    }
    /* SLURM's "no limit" (0, UNLIMITED, INFINITE: the partition's own
     * limit, if it has one, still applies, and the stop comes before it) */
    const bool no_limit = time_limit && (!strcmp(time_limit, "0") || !strcasecmp(time_limit, "unlimited") ||
                                         !strcasecmp(time_limit, "infinite"));
    if (ok && time_limit && !no_limit && !valid_time(time_limit)) {
        fprintf(stderr,
                "scaletrain slurm: --time %s: want HH:MM:SS (or D-HH:MM:SS, MM; UNLIMITED for none)\n",
                time_limit);
        ok = false;
    }
    /* The stop comes `lead` s before the limit: --stop-before's (a large
     * model's checkpoint on slow storage takes longer than 120 s: one cut
     * short by the limit is lost, and the job not requeued), else 120, or a
     * quarter of a limit under 8 minutes (a job stopped as it starts would
     * be requeued to be stopped again, a step gained each time) */
    long lead = before > 0 ? before : 120;
    if (ok && time_limit && !no_limit) {
        const long limit = time_seconds(time_limit);
        if (before > 0 && limit >= 60 && before > limit / 2) {
            fprintf(stderr,
                    "scaletrain slurm: --stop-before %ld with --time %s (%ld s): the ranks would be stopped "
                    "before half the job's time; give a longer --time or a shorter --stop-before\n",
                    before, time_limit, limit);
            ok = false;
        } else if (limit < 60) {
            fprintf(stderr,
                    "scaletrain slurm: --time %s is %ld s: too short for a run to start, train and save its "
                    "checkpoint before it; give a minute at least\n",
                    time_limit, limit);
            ok = false;
        } else if (limit < 480 && before < 0) {
            lead = limit / 4;
            fprintf(stderr,
                    "scaletrain slurm: note: --time %s is short: the ranks are told to checkpoint and stop %ld "
                    "s before it (120 s for limits of 8 minutes or more)\n",
                    time_limit, lead);
        }
    }
    const bool bad_partition = partition && !valid_word(partition);
    if (ok && (bad_partition || (name && !valid_word(name)))) {
        fprintf(stderr, "scaletrain slurm: %s '%s': want letters, digits and -_., only\n",
                bad_partition ? "--partition" : "--job-name", bad_partition ? partition : name);
        ok = false;
    }
    if (!ok) {
        usage(stderr);
        free(rest);
        return ST_EXIT_USAGE;
    }
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("slurm", nrest, rest, &cfg, &opts);
    if (rc >= 0) {
        free(rest);
        return rc;
    }
    if (!cfg.path[0]) {
        fprintf(stderr, "scaletrain slurm: CONFIG is required (the run's YAML file)\n");
        free(rest);
        return ST_EXIT_USAGE;
    }
    char self[PATH_MAX], cwd[PATH_MAX], config[PATH_MAX], job[128];
    st_cli_self_path(self, sizeof self);
    if (!getcwd(cwd, sizeof cwd) || !realpath(cfg.path, config)) {
        fprintf(stderr, "scaletrain slurm: cannot resolve %s or the current directory\n", cfg.path);
        free(rest);
        return ST_EXIT_FAIL;
    }
    /* #SBATCH lines split on unquoted blanks (a --chdir with a space is quoted);
     * a quote or a line end in the path cannot be written, and sbatch reads a
     * backslash as an escape even inside quotes (b\sl would be bsl) */
    if (strpbrk(cwd,
                "\"\n\r%\\")) { /* (SLURM expands %j and the like in the log's path, which is under it) */
        fprintf(
            stderr,
            "scaletrain slurm: the current directory %s holds a quote, a backslash, a line end or a %%, "
            "which an #SBATCH --chdir line cannot carry (sbatch reads a backslash as an escape, and %%j in "
            "the log's path as the job id): run it from a directory without them\n",
            cwd);
        free(rest);
        return ST_EXIT_FAIL;
    }
    if (!name) {
        const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
        snprintf(job, sizeof job, "scaletrain-%.*s", (int)strcspn(base, "."), base);
        for (char *p = job; *p; p++)
            if (!valid_word((char[]){*p, 0})) *p = '_';
        name = job;
    }
    const long per_node = gpus > 0 ? gpus : tasks > 0 ? tasks : 1;
    if (cpus <= 0) /* (SLURM gives a task one CPU unless told otherwise: a rank's data loading and, on CPU
                    * nodes, its whole training on one core) */
        fprintf(stderr,
                "scaletrain slurm: note: without --cpus-per-task each rank gets the CPUs the cluster gives a "
                "task by default, often one (since SLURM 22.05 srun takes none from the job): %s. Give "
                "--cpus-per-task C, e.g. the node's cores divided by %ld\n",
                gpus > 0 ? "its data loading and the CPU side of its steps then share it"
                         : "its training then runs on one core",
                per_node);
    { /* a batch the job's ranks cannot split would fail once the job starts, after its wait in the queue */
        const st_status v = st_config_validate_world(&cfg, (int)(nodes * per_node));
        if (v != ST_OK) {
            free(rest);
            return st_cli_error(v);
        }
    }

    { /* The job runs with --resume auto (a requeue continues): over a run's checkpoints in out_dir it
       * continues that run, which a new experiment given the same out_dir would not expect; over a
       * finished one it would wait in the queue to train nothing. Said now (it may change before the
       * job starts). */
        char ck[PATH_MAX], ckdir[PATH_MAX];
        st_ckpt_state st;
        snprintf(ckdir, sizeof ckdir, "%s/ckpt", cfg.train.out_dir);
        /* (state.json alone: verifying every file's checksum would read a
         * large checkpoint whole on a login node for a note) */
        if (st_ckpt_peek(ckdir, ck, sizeof ck, &st)) {
            const bool nothing = cfg.train.steps > 0 ? st.step >= cfg.train.steps
                                                     : st.run_steps > 0 && st.step >= st.run_steps;
            char want[64] = "its own train.steps";
            if (cfg.train.steps > 0)
                snprintf(want, sizeof want, "train.steps %lld", (long long)cfg.train.steps);
            if (nothing)
                fprintf(
                    stderr,
                    "scaletrain slurm: warning: train.out_dir %s holds a run's checkpoint at step %lld (%s): "
                    "the job's --resume auto continues that run, which at %s has nothing to train, so the "
                    "job would end at once. For a new run, give this config another train.out_dir; to "
                    "train that run on, raise train.steps\n",
                    cfg.train.out_dir, (long long)st.step, ck, want);
            else
                fprintf(stderr,
                        "scaletrain slurm: note: train.out_dir %s holds a run's checkpoint at step %lld "
                        "(%s): the "
                        "job's --resume auto continues that run; for a new run, give this config another "
                        "train.out_dir\n",
                        cfg.train.out_dir, (long long)st.step, ck);
        }
        st_clear_error();
    }
    char out_dir[sizeof cfg.train.out_dir]; /* for a comment: one line */
    snprintf(out_dir, sizeof out_dir, "%s", cfg.train.out_dir);
    for (char *p = out_dir; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    printf("#!/bin/bash\n"
           "# A scaletrain job for SLURM, written by `scaletrain slurm` (docs/commands.md).\n"
           "# %ld node(s) x %ld task(s): one rank per %s. Submit: sbatch THIS_FILE\n"
           "# Ranks and world size come from SLURM's PMIx plugin (srun --mpi=pmix); no launcher.\n"
           "# SIGTERM (%ld s before --time, pre-emption, scancel): every rank finishes its step, saves\n"
           "# a checkpoint in train.out_dir (%s) and exits 143. This script then requeues the\n"
           "# job, which continues with --resume auto, unless SLURM is ending the job itself (scancel\n"
           "# JOB: cancelled for good; a pre-emption that requeues or cancels, as the cluster says).\n"
           "# Stop now and requeue: scancel --signal=TERM --full JOB. Exit: 0 done, 143 stopped\n"
           "# (requeued unless cancelled), 1 an error (not requeued; see the log).\n",
           nodes, per_node, gpus > 0 ? "GPU" : "core group", lead, out_dir);
    printf("#SBATCH --job-name=%s\n#SBATCH --nodes=%ld\n#SBATCH --ntasks-per-node=%ld\n", name, nodes,
           per_node);
    if (gpus > 0) printf("#SBATCH --gpus-per-node=%ld\n", gpus);
    if (cpus > 0) printf("#SBATCH --cpus-per-task=%ld\n", cpus);
    if (time_limit) printf("#SBATCH --time=%s\n", time_limit);
    if (partition) printf("#SBATCH --partition=%s\n", partition);
    printf("#SBATCH --chdir=\"%s\"\n"
           "#SBATCH --output=slurm-%%x-%%j.out\n"
           "#SBATCH --open-mode=append\n"
           "#SBATCH --signal=TERM@%ld\n"
           "#SBATCH --requeue\n\n",
           cwd, lead);
    if (gpus > 0)
        printf("# NCCL: warnings into the log. On nodes with several networks, name the one\n"
               "# between nodes; on nodes without InfiniBand, turn it off; on PCIe-only nodes\n"
               "# where peer-to-peer is slow or broken, try NCCL_P2P_DISABLE=1.\n"
               "export NCCL_DEBUG=${NCCL_DEBUG:-WARN}\n"
               "# export NCCL_SOCKET_IFNAME=eth0\n"
               "# export NCCL_IB_DISABLE=1\n\n");
    /* (srun takes no --cpus-per-task from sbatch since SLURM 22.05: said
     * again here, each rank would otherwise get one CPU) */
    if (cpus > 0) printf("export OMP_NUM_THREADS=%ld SRUN_CPUS_PER_TASK=%ld\n\n", cpus, cpus);
    printf("echo \"scaletrain: job $SLURM_JOB_ID, start ${SLURM_RESTART_COUNT:-0}, $SLURM_NTASKS ranks on "
           "$SLURM_JOB_NODELIST\"\n"
           "# A SIGTERM to this shell (scancel --full, pre-emption) goes on to the ranks' step, and the\n"
           "# shell waits for their checkpoint. srun runs in a session of its own so that the signal\n"
           "# does not reach it where SLURM signals process groups: srun would turn it into SIGKILL.\n"
           "# A job SLURM is ending itself (scancel JOB, a requeue) cannot be signalled: it is not\n"
           "# requeued here (the ranks have SLURM's own SIGTERM). A busy controller may take many\n"
           "# seconds to pass the signal on: scancel has a minute.\n"
           "ending=0\n"
           "trap 'echo \"scaletrain: SIGTERM: passing it on to the ranks, which checkpoint and stop\"; "
           "timeout 60 scancel --signal=TERM \"$SLURM_JOB_ID\" || ending=1' TERM\n"
           "setsid --wait srun --mpi=pmix --kill-on-bad-exit=1 ");
    put_quoted(self);
    printf(" train ");
    put_quoted(config);
    for (int i = 0; i < nrest; i++) {
        if (!strcmp(rest[i], cfg.path)) continue;
        printf(" ");
        put_quoted(rest[i]);
    }
    printf(" --resume auto &\n"
           "pid=$!\n"
           "# polled: bash does not interrupt `wait` on a child in another session for a trapped signal\n"
           "while kill -0 $pid 2>/dev/null; do sleep 1 & wait $!; done\n"
           "wait $pid\n"
           "rc=$?\n"
           "if [ $rc -eq 143 ] && [ $ending -eq 0 ]; then\n"
           "    echo \"scaletrain: stopped by SIGTERM after a checkpoint; requeueing job $SLURM_JOB_ID\"\n"
           "    scontrol requeue \"$SLURM_JOB_ID\"\n"
           "elif [ $rc -eq 143 ]; then\n"
           "    echo \"scaletrain: stopped after a checkpoint; SLURM is ending job $SLURM_JOB_ID itself: not "
           "requeued here (sbatch this script again to continue)\"\n"
           "fi\n"
           "exit $rc\n");
    free(rest);
    return ST_EXIT_OK;
}
