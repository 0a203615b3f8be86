/* `scaletrain launch -n N|auto [--cores-per-rank K] [--hosts H1:n1,H2:n2]
 * [--max-restarts K] COMMAND...`: start N ranks of COMMAND with mpirun (auto:
 * one per GPU of this node, or one where it has none), each
 * bound to its share of this node's cores (cores / N of them, contiguous:
 * a rank's threads, loader workers and, on a GPU, its host-side optimizer
 * run there; --cores-per-rank sets the share) while the node has a core for
 * each rank (more ranks than cores share them, unbound, and launch says so:
 * mpirun refuses to bind two ranks to one core), with their
 * output sorted by rank (launch_io.c) and written by threads of its own
 * (launch_out.c: an output that takes no bytes holds neither the launcher
 * nor the job), and, with --max-restarts K, start the
 * job again after a failure, up to K times. COMMAND is a scaletrain
 * subcommand (`train run.yaml`: this executable runs it) or any program. The
 * ranks find each other through MPI alone (st_comm_init); under SLURM,
 * `srun --mpi=pmix scaletrain train` needs no launcher.
 *
 * A restart of `train` that committed a checkpoint of its own adds `--resume
 * auto` (replacing any --resume), so the job continues from its latest good
 * checkpoint; one that committed none runs again as it was started (its own
 * --resume, or none: `auto` would have taken a checkpoint it did not make,
 * an older one than its --resume named, or the unfinished run that train
 * refused to continue without being asked). What is not restarted: a
 * clean exit (0), a usage error (2), a train job's failure that repeats the
 * attempt before it with no checkpoint between, and a stop asked for by a signal (exit
 * 143 for SIGTERM, 130 for SIGINT, 131 for SIGQUIT, 129 for SIGHUP, 138 for
 * SIGUSR1: the ranks saved a checkpoint and stopped on purpose, as on SLURM
 * pre-emption), nor a job whose launcher itself got such a signal. The exit
 * status is the last run's.
 *
 * The ranks on other hosts get the launcher's environment only as mpirun
 * passes it: -x for each variable of NCCL_*, UCX_*, OMP_*, SCALETRAIN_*,
 * ST_*, CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER set here. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/device.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "hw/probe.h"
#include "launch.h"
#include "train/checkpoint.h"

/* Whether environment entry NAME=VALUE goes to the ranks on other hosts
 * (mpirun -x NAME), its name into name[cap] when it does. */
static bool forwarded(const char *entry, char *name, size_t cap) {
    static const char *const prefixes[] = {"NCCL_", "UCX_", "OMP_", "SCALETRAIN_", "ST_"};
    static const char *const names[] = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"};
    const char *eq = strchr(entry, '=');
    if (!eq || eq == entry) return false;
    const size_t len = (size_t)(eq - entry);
    bool yes = false;
    for (size_t j = 0; j < sizeof prefixes / sizeof prefixes[0] && !yes; j++)
        yes = len > strlen(prefixes[j]) && strncmp(entry, prefixes[j], strlen(prefixes[j])) == 0;
    for (size_t j = 0; j < sizeof names / sizeof names[0] && !yes; j++)
        yes = len == strlen(names[j]) && strncmp(entry, names[j], len) == 0;
    /* (SLURM sets each node's own list: the launching node's is not theirs) */
    if (yes && len == strlen("CUDA_VISIBLE_DEVICES") && strncmp(entry, "CUDA_VISIBLE_DEVICES", len) == 0 &&
        getenv("SLURM_JOB_ID"))
        yes = false;
    if (!yes || (name && len >= cap)) return false;
    if (name) snprintf(name, cap, "%.*s", (int)len, entry);
    return true;
}

/* The kernel's count of processes its out-of-memory killer has ended
 * (/proc/vmstat oom_kill, Linux 4.13 on), or -1. */
static long long oom_kills(void) {
    FILE *f = fopen("/proc/vmstat", "r");
    if (!f) return -1;
    char line[128];
    long long n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "oom_kill %lld", &n) == 1) break;
    fclose(f);
    return n;
}

/* A rank ended by SIGKILL says nothing: scaletrain never sends it, the
 * kernel's out-of-memory killer does. Say which it was where this node can
 * tell (its count of such kills moved while the job ran), else what to look
 * at. */
static void say_killed(st_launch_out *out, const st_launch_result *res, long long kills) {
    const bool sigkill = strstr(res->reason, "signal 9 (Killed)") != NULL;
    if (kills > 0)
        st_launch_sayf(
            out,
            "scaletrain launch: the kernel's out-of-memory killer ended %lld process%s on this node "
            "while the job ran (/proc/vmstat oom_kill; `dmesg` names them): a rank past the memory "
            "this node or its cgroup allows is killed without a word. `scaletrain plan CONFIG` "
            "shows what the run needs against what each rank may use; lower "
            "train.micro_batch_size, start fewer ranks here, or ask the job for more memory\n",
            kills, kills == 1 ? "" : "es");
    else if (sigkill)
        st_launch_sayf(
            out, "scaletrain launch: a rank was killed by SIGKILL, which scaletrain never sends: most often "
                 "the kernel's out-of-memory killer on that rank's node (`dmesg` there says; this node "
                 "counted none), else a scheduler ending the job\n");
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: scaletrain launch -n N|auto [--cores-per-rank C] [--hosts H1:n1,H2:n2] [--max-restarts K]\n"
        "                        [--output-timeout S] COMMAND [ARGS]...\n"
        "  starts N ranks of COMMAND with mpirun (auto: one per GPU of this node, or one without\n"
        "  a GPU), each bound to its share of this node's cores\n"
        "  (C of them; default the cores over N, at least 1; more ranks than cores share them,\n"
        "  unbound); COMMAND is a scaletrain subcommand (train, eval, ...) or a program.\n"
        "  Rank 0's output is printed as it is, every\n"
        "  other line behind \"[rank K] \". --max-restarts K: after a failure, start the job again\n"
        "  (train: with --resume auto, from the latest checkpoint), at most K times.\n"
        "  --output-timeout S: the job's output waits in memory while the launcher's own output\n"
        "  takes none; once the job has ended, a write that has not returned after S seconds\n"
        "  (default 300) is given up on, saying how many lines were lost.\n"
        "  Example: scaletrain launch -n 4 --max-restarts 2 train run.yaml\n");
}

/* Check a --hosts list H1:n1,H2:n2 (a host may leave its count out: mpirun
 * then decides) and put the slots it gives in all in *slots, or -1 when a
 * host has no count. False, with the reason printed, for an empty host name
 * or a count that is not a number from 1 to 2^20. */
static bool hosts_check(const char *hosts, long *slots) {
    long total = 0;
    bool counted = true;
    for (const char *h = hosts;;) {
        const char *end = strchr(h, ',');
        const size_t len = end ? (size_t)(end - h) : strlen(h);
        const char *colon = memchr(h, ':', len);
        const size_t name_len = colon ? (size_t)(colon - h) : len;
        if (name_len == 0) {
            fprintf(stderr,
                    "scaletrain launch: --hosts %s: an empty host name; want H1:n1,H2:n2 (host names with "
                    "their slot counts, or host names alone)\n",
                    hosts);
            return false;
        }
        if (colon) {
            char *stop;
            errno = 0;
            const long v = strtol(colon + 1, &stop, 10);
            if (stop == colon + 1 || stop != h + len || errno || v < 1 || v > 1 << 20) {
                fprintf(stderr,
                        "scaletrain launch: --hosts %s: host '%.*s' has slot count '%.*s'; want a number "
                        "from 1 (H1:n1,H2:n2)\n",
                        hosts, (int)name_len, h, (int)(len - name_len - 1), colon + 1);
                return false;
            }
            total += v;
        } else {
            counted = false;
        }
        if (!end) break;
        h = end + 1;
    }
    *slots = counted ? total : -1;
    return true;
}

/* name's path on PATH, or false. */
bool st_cli_find_on_path(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", name);
        if (access(out, X_OK) == 0) return true;
        path += len + (end ? 1 : 0);
    }
    return false;
}

void st_cli_self_path(char *out, size_t n) {
    ssize_t len = readlink("/proc/self/exe", out, n - 1);
    if (len <= 0)
        snprintf(out, n, "scaletrain");
    else
        out[len] = '\0';
}

int st_launch_local_cores(void) {
    st_hw_info h;
    if (st_hw_probe_host(&h) != ST_OK || h.cores < 1) return 1;
    /* an affinity mask narrower than the node (a cpuset, a SLURM allocation):
     * its share of the physical cores */
    const int cores =
        h.allowed < h.threads && h.threads > 0 ? (int)((long)h.cores * h.allowed / h.threads) : h.cores;
    return cores > 0 ? cores : 1;
}

/* What COMMAND is: one of scaletrain's commands launch starts (run by this
 * executable), one that runs as one process (under launch it was looked
 * for on PATH as a program of that name), or a program. */
enum { LAUNCH_PROGRAM, LAUNCH_SUBCOMMAND, LAUNCH_ONE_PROCESS };
static int command_kind(const char *s) {
    static const struct {
        const char *name;
        int kind;
    } cmds[] = {{"train", LAUNCH_SUBCOMMAND},  {"eval", LAUNCH_SUBCOMMAND},    {"data", LAUNCH_SUBCOMMAND},
                {"check", LAUNCH_SUBCOMMAND},  {"sample", LAUNCH_ONE_PROCESS}, {"plan", LAUNCH_ONE_PROCESS},
                {"bench", LAUNCH_ONE_PROCESS}, {"report", LAUNCH_ONE_PROCESS}, {"slurm", LAUNCH_ONE_PROCESS},
                {"launch", LAUNCH_ONE_PROCESS}};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(s, cmds[i].name) == 0) return cmds[i].kind;
    return LAUNCH_PROGRAM;
}

/* The look for a restarted job's checkpoint (on a thread of its own:
 * st_ticker_run_within). */
typedef struct lookup {
    st_config cfg;
    char what[4400];
} lookup;

static void *lookup_run(void *arg) {
    lookup *l = arg;
    char dir[4096];
    bool found = false;
    const st_status s = st_train_latest_checkpoint(&l->cfg, dir, sizeof dir, &found);
    if (s == ST_OK && found)
        snprintf(l->what, sizeof l->what, "from checkpoint %s", dir);
    else if (s != ST_OK)
        snprintf(l->what, sizeof l->what, "(its checkpoints: %s)", st_last_error());
    else
        snprintf(l->what, sizeof l->what, "from step 0: no checkpoint in %s/ckpt yet", l->cfg.train.out_dir);
    return NULL;
}

/* Where a restarted train job continues: its latest good checkpoint, named in
 * `what` (size bytes). The train arguments are read as train reads them.
 * The look runs on a thread of its own: a train.out_dir on storage that
 * stopped answering (the likely reason the job failed) would hold the
 * launcher in it for good. False, with the reason in `what`, when it has
 * not returned after train.checkpoint_timeout_s (dist.timeout_s when 0):
 * the job is not restarted then (its ranks would wait on the same storage);
 * nor when its arguments do not parse (said on standard error here too): a
 * configuration error fails every attempt alike. */
static bool resume_point(int argc, char **argv, char *what, size_t size) {
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("train", argc, argv, &cfg, &opts);
    if (rc >= 0) {
        snprintf(what, size,
                 "its arguments do not parse (above), and a configuration error fails every attempt alike");
        return false;
    }
    lookup *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(what, size, "(out of memory to look for its checkpoint)");
        return true;
    }
    l->cfg = cfg;
    const double limit = cfg.train.checkpoint_timeout_s > 0 ? (double)cfg.train.checkpoint_timeout_s
                                                            : (double)cfg.dist.timeout_s;
    if (st_ticker_run_within(lookup_run, l, limit)) {
        snprintf(what, size, "%s", l->what);
        free(l);
        return true;
    }
    snprintf(
        what, size,
        "looking in %s/ckpt for its checkpoint has not returned after %g s (train.checkpoint_timeout_s): "
        "the storage stopped answering (a hung network file system?), and the ranks would wait on it too",
        cfg.train.out_dir, limit);
    return false; /* (l stays the thread's) */
}

/* The configuration of a scaletrain command's arguments as its ranks will
 * read it (file and --set), its errors left for them to say (standard
 * error silenced meanwhile: st_cli_run_args prints its own); false where
 * it does not parse. Before the writer threads start. */
static bool command_config(const char *cmd, int argc, char **argv, st_config *cfg) {
    /* (an eval's --init not read: a checkpoint verified here too would be read twice) */
    st_run_opts ro = {.config_only = true};
    fflush(stderr);
    const int saved_err = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 2);
    const bool ok = st_cli_run_args(cmd, argc, argv, cfg, &ro) < 0;
    st_clear_error();
    fflush(stderr);
    if (saved_err >= 0) dup2(saved_err, 2), close(saved_err);
    if (null >= 0) close(null);
    return ok;
}

/* The checkpoints a train job's out_dir holds: the step (st_ckpt_list's
 * listing of the ckpt/step-N folders) and inode of each (a commit renames
 * a new folder into place, so a new one has a new inode, or another step
 * where the file system reuses a deleted one's), looked at on a thread of
 * its own (the storage may have stopped answering: st_ticker_run_within). */
typedef struct ckpt_marks {
    char ckdir[4200];
    bool known; /* listed (a broken listing, or no memory: not) */
    int n;
    int64_t *step;
    ino_t *ino;
} ckpt_marks;

static void *marks_run(void *arg) {
    ckpt_marks *m = arg;
    if (st_ckpt_list(m->ckdir, &m->step, &m->n) != ST_OK) {
        st_clear_error();
        return NULL;
    }
    m->ino = calloc((size_t)(m->n ? m->n : 1), sizeof *m->ino);
    for (int i = 0; m->ino && i < m->n; i++) {
        char path[4300];
        struct stat sb;
        snprintf(path, sizeof path, "%s/step-%lld", m->ckdir, (long long)m->step[i]);
        m->ino[i] = stat(path, &sb) == 0 ? sb.st_ino : 0;
    }
    m->known = m->ino != NULL;
    return NULL;
}

static void marks_free(ckpt_marks *m) {
    if (!m) return;
    free(m->step);
    free(m->ino);
    free(m);
}

/* The program a command names, into out: a path as it is (executable), a
 * bare name looked for on PATH; false where there is none. */
static bool program_path(const char *name, char *out, size_t n) {
    if (!strchr(name, '/')) return st_cli_find_on_path(name, out, n);
    snprintf(out, n, "%s", name);
    return access(name, X_OK) == 0;
}

/* Whether out_dir's run.lock is held, looked at on a thread of its own (the
 * storage may have stopped answering: no answer within limit_s counts as
 * held); its holder's line in who. */
typedef struct lock_look {
    char out_dir[4200], who[512];
    bool held;
} lock_look;

static void *lock_run(void *arg) {
    lock_look *l = arg;
    l->held = st_ckpt_out_dir_in_use(l->out_dir, l->who, sizeof l->who);
    return NULL;
}

/* Whether out_dir is still held after waiting up to wait_s for it to be let
 * go: the ranks of a job whose mpirun was killed outlive it by about a
 * second, holding run.lock, and a restart then was refused as "in use by
 * another run" (its own). Polled every 0.1 s. */
static bool out_dir_held(const char *out_dir, double wait_s, double look_s, char *who, size_t cap) {
    const double end = st_ticker_now() + wait_s;
    for (;;) {
        lock_look *l = calloc(1, sizeof *l);
        if (!l) return false;
        snprintf(l->out_dir, sizeof l->out_dir, "%s", out_dir);
        if (!st_ticker_run_within(lock_run, l, look_s > 0 ? look_s : 60)) { /* (l stays the thread's) */
            snprintf(who, cap, "its storage did not answer");
            return true;
        }
        const bool held = l->held;
        snprintf(who, cap, "%s", l->who[0] ? l->who : "a run that does not say who");
        free(l);
        if (!held) return false;
        if (st_ticker_now() >= end) return true;
        const struct timespec tick = {0, 100 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

/* The marks of out_dir's checkpoints now; NULL when the look did not return
 * within limit_s (the thread keeps it) or memory ran out. */
static ckpt_marks *marks_take(const char *out_dir, double limit_s) {
    ckpt_marks *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    snprintf(m->ckdir, sizeof m->ckdir, "%s/ckpt", out_dir);
    if (st_ticker_run_within(marks_run, m, limit_s)) return m;
    return NULL; /* (m stays the thread's) */
}

/* Whether `now` holds a checkpoint folder `before` did not: one the job
 * committed (true too where either is unknown: auto then). */
static bool marks_new(const ckpt_marks *before, const ckpt_marks *now) {
    if (!before || !now || !before->known || !now->known) return true;
    for (int i = 0; i < now->n; i++) {
        int j = 0;
        while (j < before->n && (before->ino[j] != now->ino[i] || before->step[j] != now->step[i]))
            j++;
        if (j == before->n) return true;
    }
    return false;
}

/* A rank's error line without the rank that said it ("scaletrain: rank 1
 * of 2 (host h): ", "scaletrain: error (rank 0): "), which varies from one
 * attempt to the next, nor the process ids in temporary files' names
 * ("model.safetensors.tmp.29664"), into out. */
static void cause_of(const char *reason, char *out, size_t n) {
    const char *p = strstr(reason, "): ");
    if (p && p - reason < 160) reason = p + 3;
    size_t o = 0;
    for (const char *c = reason; *c && o + 1 < n; c++) {
        out[o++] = *c;
        if (o >= 5 && !memcmp(out + o - 5, ".tmp.", 5))
            while (c[1] >= '0' && c[1] <= '9')
                c++;
    }
    out[o] = '\0';
}

int st_cmd_launch(int argc, char **argv) {
    const char *hosts = NULL;
    long n = 0, max_restarts = 0, per_rank = 0; /* per_rank 0: the cores over n */
    double output_timeout = 300;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        const bool takes = !strcmp(a, "-n") || !strcmp(a, "--hosts") || !strcmp(a, "--max-restarts") ||
                           !strcmp(a, "--cores-per-rank") || !strcmp(a, "--output-timeout");
        if (takes && (i + 1 >= argc ||
                      (argv[i + 1][0] == '-' && argv[i + 1][1] && !isdigit((unsigned char)argv[i + 1][1])))) {
            fprintf(stderr, "scaletrain launch: %s needs a value%s%s%s\n", a,
                    i + 1 < argc ? " (got the option " : "", i + 1 < argc ? argv[i + 1] : "",
                    i + 1 < argc ? ")" : "");
            return ST_EXIT_USAGE;
        }
        if (!strcmp(a, "-n") && !strcmp(argv[i + 1], "auto")) {
            i++;
            n = -1; /* below: the node's GPUs */
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-restarts") || !strcmp(a, "--cores-per-rank")) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            const bool is_n = !strcmp(a, "-n"), is_c = !strcmp(a, "--cores-per-rank");
            if (end == argv[i] || *end || v < (is_n || is_c ? 1 : 0) || v > 1 << 20) {
                fprintf(stderr, "scaletrain launch: %s %s: want a number %s\n", a, argv[i],
                        is_n ? "of ranks >= 1, or auto" : is_c ? "of cores >= 1" : "of restarts >= 0");
                return ST_EXIT_USAGE;
            }
            if (is_n)
                n = v;
            else if (is_c)
                per_rank = v;
            else
                max_restarts = v;
        } else if (!strcmp(a, "--output-timeout")) {
            char *end;
            errno = 0;
            output_timeout = strtod(argv[++i], &end);
            if (*end || end == argv[i] || errno || !(output_timeout > 0) || output_timeout > 7 * 86400) {
                fprintf(stderr, "scaletrain launch: --output-timeout %s: want seconds > 0 (at most a week)\n",
                        argv[i]);
                return ST_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--hosts")) {
            hosts = argv[++i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return ST_EXIT_OK;
        } else {
            const bool joined = !strncmp(a, "--", 2) && strchr(a, '=');
            fprintf(stderr, "scaletrain launch: unknown option '%s'%s\n", a,
                    joined ? " (launch's options take their value as the next word: --max-restarts 2)" : "");
            usage(stderr);
            return ST_EXIT_USAGE;
        }
    }
    static const char *const once[] = {"-n",      "--max-restarts",   "--cores-per-rank",
                                       "--hosts", "--output-timeout", NULL};
    const int twice = st_cli_once("launch", i, argv, once, NULL); /* (its own, before the command) */
    if (twice >= 0) return twice;
    /* launch's own options after a scaletrain command go to the command,
     * whose every rank would refuse them: said once, here */
    static const char *const mine[] = {"-n", "--max-restarts", "--cores-per-rank", "--hosts",
                                       "--output-timeout"};
    for (int j = i + 1; j < argc && command_kind(argv[i]) == LAUNCH_SUBCOMMAND; j++)
        for (size_t o = 0; o < sizeof mine / sizeof *mine; o++) {
            const size_t len = strlen(mine[o]);
            if (!strncmp(argv[j], mine[o], len) && (argv[j][len] == '\0' || argv[j][len] == '=')) {
                fprintf(stderr,
                        "scaletrain launch: %s comes after the command (%s), which would take it as its own: "
                        "launch's options go before the command (scaletrain launch -n 4 %s ... %s ...)\n",
                        mine[o], argv[i], mine[o], argv[i]);
                return ST_EXIT_USAGE;
            }
        }
    if (n == 0 || i >= argc) {
        fprintf(stderr, "scaletrain launch: %s\n", n == 0 ? "-n N (or -n auto) is required" : "no command to launch");
        usage(stderr);
        return ST_EXIT_USAGE;
    }
    if (n < 0 && hosts) {
        fprintf(stderr, "scaletrain launch: -n auto counts this node's GPUs; with --hosts give the ranks: -n N\n");
        return ST_EXIT_USAGE;
    }
    /* `launch -n 2 scaletrain train ...` (or this executable's path): the command itself, as `launch -n 2
     * train ...` runs it (a train job's restarts know it by its name: as a program, a restart refused to
     * continue it; sample's refusal too). Another scaletrain's path stays a program. */
    if (i + 1 < argc && command_kind(argv[i + 1]) != LAUNCH_PROGRAM) {
        char self_path[PATH_MAX], named[PATH_MAX], real_self[PATH_MAX], real_named[PATH_MAX];
        st_cli_self_path(self_path, sizeof self_path);
        if (program_path(argv[i], named, sizeof named) && realpath(named, real_named) &&
            realpath(self_path, real_self) && !strcmp(real_named, real_self))
            i++;
    }
    /* (check's own all-reduce worker, which check starts through launch, is its ranks' part) */
    const bool check = !strcmp(argv[i], "check") && !(i + 1 < argc && !strcmp(argv[i + 1], "--allreduce-worker"));
    if (command_kind(argv[i]) == LAUNCH_ONE_PROCESS || check) {
        fprintf(stderr,
                "scaletrain launch: scaletrain %s runs as one process%s; run it without launch (launch starts "
                "train, eval and data, or a program)\n",
                argv[i],
                !strcmp(argv[i], "bench") ? " and starts its own ranks (bench -n 1,2,4)"
                : check ? " a machine and starts its own ranks for its ddp and allreduce checks"
                        : "");
        return ST_EXIT_USAGE;
    }
    /* a program that is not there (a misspelt command): said before mpirun, which exits 134 naming it in
     * a banner, and is not restarted (with --hosts it is the other hosts' to have) */
    if (!hosts && command_kind(argv[i]) == LAUNCH_PROGRAM) {
        char prog[PATH_MAX];
        if (!program_path(argv[i], prog, sizeof prog)) {
            fprintf(
                stderr,
                "scaletrain launch: %s is neither a scaletrain command launch starts (train, eval, data) nor "
                "%s\n",
                argv[i], strchr(argv[i], '/') ? "an executable file" : "a program on PATH");
            return ST_EXIT_USAGE;
        }
    }
    long host_slots = -1;
    if (hosts && !hosts_check(hosts, &host_slots)) return ST_EXIT_USAGE;
    char mpirun[PATH_MAX], self[PATH_MAX], np[32];
    if (!st_cli_find_on_path("mpirun", mpirun, sizeof mpirun)) {
        fprintf(stderr,
                "scaletrain launch: mpirun is not on PATH; install OpenMPI (apt-get install openmpi-bin) "
                "or start the ranks another way (under SLURM: srun --mpi=pmix scaletrain train ...)\n");
        return ST_EXIT_FAIL;
    }
    /* -n auto's count of the GPUs is watched: a driver that never answers
     * would hold the launch, and a batch job with it, for good. The limit is
     * the ranks' own for their first wait on the GPU, train.device_timeout_s
     * of the command's config (file and --set), read before the writer
     * threads start (its errors are the ranks' to say: not here) */
    double limit = 600; /* (its default; a command not train's or eval's: no config) */
    /* (and a train job to restart: its configuration, for the checkpoints it
     * starts with) */
    const bool train = !strcmp(argv[i], "train");
    st_config cfg;
    bool cfg_ok = false;
    if ((n < 0 && (train || !strcmp(argv[i], "eval"))) || (train && max_restarts > 0))
        cfg_ok = command_config(argv[i], argc - i - 1, argv + i + 1, &cfg);
    if (n < 0 && cfg_ok) limit = (double)cfg.train.device_timeout_s;
    const double look_s = !cfg_ok                              ? 0
                          : cfg.train.checkpoint_timeout_s > 0 ? (double)cfg.train.checkpoint_timeout_s
                                                               : (double)cfg.dist.timeout_s;
    ckpt_marks *before = train && max_restarts > 0 && cfg_ok ? marks_take(cfg.train.out_dir, look_s) : NULL;
    /* From here on the launcher's own lines, as the ranks', go through its
     * writer threads: nothing it does waits on its output. */
    st_launch_out *out = st_launch_out_start(output_timeout);
    if (n < 0) { /* -n auto: a rank per GPU of this node, else one */
        char why[256] = "", who[64];
        snprintf(who, sizeof who, "scaletrain launch (pid %d)", (int)getpid());
        st_watch *w = st_watch_one(limit, who, "train.device_timeout_s", ST_WATCH_GPU,
                                   "nothing was started; -n N starts N ranks without counting the GPUs",
                                   "counting this node's GPUs for -n auto");
        const int gpus = st_device_cuda_count(why, sizeof why);
        st_watch_stop(w);
        n = gpus > 0 ? gpus : 1;
        if (gpus > 0)
            st_launch_sayf(out, "scaletrain launch: -n auto: %d rank%s, one per GPU of this node\n", gpus,
                           gpus == 1 ? "" : "s");
        else
            st_launch_sayf(out, "scaletrain launch: -n auto: 1 rank (%s)\n", why[0] ? why : "no CUDA device");
    }
    st_cli_self_path(self, sizeof self);
    snprintf(np, sizeof np, "%ld", n);
    const int cmd_at = i;
    int n_fwd = 0;
    for (char **e = environ; *e; e++)
        n_fwd += forwarded(*e, NULL, 0);
    char **av = calloc((size_t)(argc + 24 + 2 * n_fwd), sizeof *av);
    char **fwd_names = calloc((size_t)n_fwd + 1, sizeof *fwd_names);
    if (!av || !fwd_names) {
        free(av);
        free(fwd_names);
        st_launch_out_end(out, false);
        return st_cli_error(st_fail(ST_ERR_NOMEM, "launch: out of memory"));
    }
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "-np";
    av[k++] = np;
    /* Each rank bound to `pe` cores of its own (--cores-per-rank, else this
     * node's cores over the ranks: a rank's threads, loader workers and
     * host-side optimizer use them; one core per rank left the others idle)
     * while there are that many for each; more ranks than cores (slots of
     * --hosts) share them, unbound (mpirun refuses to bind two ranks to one
     * core). With --hosts the nodes' cores are not known here: their slots
     * (H:n) stand for them when every host gives a count, a core per rank
     * unless --cores-per-rank says more. */
    /* Inside a SLURM allocation of several nodes mpirun spreads the ranks
     * over them, so this node's cores say nothing of a rank's share: without
     * --cores-per-rank they run unbound, and train.threads auto divides each
     * node's cores among its ranks (their masks alike, session.c). */
    const char *sn = getenv("SLURM_JOB_NUM_NODES");
    const bool alloc_nodes = !hosts && sn && atol(sn) > 1;
    const bool unbound = alloc_nodes && !per_rank;
    const long slots = hosts ? host_slots : alloc_nodes ? 0 : st_launch_local_cores();
    long pe = per_rank ? per_rank : !hosts && slots > n ? slots / n : 1;
    const bool share = slots > 0 && n * pe > slots;
    const char *unit = hosts ? "slot" : "core";
    if (share && pe > 1)
        st_launch_sayf(
            out,
            "scaletrain launch: --cores-per-rank %ld: %ld ranks need %ld %ss, there are %ld; the ranks "
            "share them, not bound\n",
            pe, n, n * pe, unit, slots);
    else if (share)
        st_launch_sayf(
            out,
            "scaletrain launch: %ld ranks on %ld %s%s: the ranks share the %ss (not bound to cores, "
            "about %.2g of a core each), so each rank runs slower than on a core of its own\n",
            n, slots, unit, slots == 1 ? "" : "s", unit, (double)slots / (double)n);
    char map_by[48];
    snprintf(map_by, sizeof map_by, pe > 1 && !share ? "slot:PE=%ld" : "core", pe);
    av[k++] = "--bind-to";
    av[k++] = share || unbound ? "none" : "core";
    av[k++] = "--map-by";
    av[k++] = map_by;
    av[k++] = "--tag-output";
    if (geteuid() == 0) /* OpenMPI refuses root without this (containers, CI) */
        av[k++] = "--allow-run-as-root";
    if (geteuid() == 0 || share) /* more ranks than slots (cores) */
        av[k++] = "--oversubscribe";
    if (hosts) {
        av[k++] = "--host";
        av[k++] = (char *)hosts;
    }
    /* The ranks' stdout is mpirun's pseudo-terminal: tell them whether ours
     * is a terminal, so that train draws its progress bar only there (args.c). */
    setenv("SCALETRAIN_LAUNCH_TTY", isatty(STDOUT_FILENO) ? "1" : "0", 1);
    av[k++] = "-x";
    av[k++] = "SCALETRAIN_LAUNCH_TTY";
    int n_names = 0;
    for (char **e = environ; *e && n_names < n_fwd; e++) {
        char name[256];
        if (!forwarded(*e, name, sizeof name) || !strcmp(name, "SCALETRAIN_LAUNCH_TTY")) continue;
        if (!(fwd_names[n_names] = strdup(name))) continue;
        av[k++] = "-x";
        av[k++] = fwd_names[n_names++];
    }
    if (command_kind(argv[cmd_at]) == LAUNCH_SUBCOMMAND) av[k++] = self;
    const int args_at = k;
    for (int j = cmd_at; j < argc; j++)
        av[k++] = argv[j];
    av[k] = NULL;

    int rc = ST_EXIT_FAIL, signalled = 0;
    /* the previous failed attempt's exit, rank's error line and checkpoints (repeats, below) */
    int prev_rc = 0;
    char prev_why[sizeof((st_launch_result *)0)->reason] = "";
    ckpt_marks *prev = NULL;
    st_launch_signals_begin();
    for (long attempt = 0;; attempt++) {
        st_launch_result res;
        const long long kills0 = oom_kills();
        rc = st_launch_run(av, (int)n, out, &res);
        const int run_errno = errno; /* (a pipe or fork that failed; oom_kills' reads may change errno) */
        const long long kills1 = rc != 0 && kills0 >= 0 ? oom_kills() : -1;
        signalled = res.signalled;
        if (rc > 0 && !res.signalled) say_killed(out, &res, kills1 >= kills0 ? kills1 - kills0 : 0);
        if (rc < 0) {
            st_launch_sayf(out, "scaletrain launch: cannot start %s: %s\n", mpirun, strerror(run_errno));
            rc = ST_EXIT_FAIL;
            break;
        }
        if (rc == 0 || max_restarts == 0) break;
        const char *why = res.reason[0] ? res.reason : "no rank said why";
        const bool stopped = rc == 128 + SIGTERM || rc == 128 + SIGINT || rc == 128 + SIGHUP ||
                             rc == 128 + SIGQUIT || rc == 128 + SIGUSR1;
        if (res.signalled || stopped || rc == ST_EXIT_USAGE) {
            st_launch_sayf(out, "scaletrain launch: the job exited %d (%s); not restarted: %s\n", rc, why,
                           res.signalled || rc > 128
                               ? "it was stopped by a signal on purpose; continue it with "
                                 "--resume auto"
                               : "a usage error does not go away");
            break;
        }
        if (attempt >= max_restarts) {
            st_launch_sayf(
                out, "scaletrain launch: the job failed again (exit %d: %s); %ld restart%s used, giving up\n",
                rc, why, max_restarts, max_restarts == 1 ? "" : "s");
            break;
        }
        char where[4400] = "from the beginning (not a train job)";
        ckpt_marks *now = train && before ? marks_take(cfg.train.out_dir, look_s) : NULL;
        const bool committed = !train || !before || marks_new(before, now);
        /* A train job that failed as the attempt before it did (the same
         * exit and a rank's same error, which names no pid: mpirun's line
         * about a rank that died does) with no checkpoint committed
         * between: a cause that does not go away by itself (a missing file,
         * a setting), each restart costing a start-up. */
        char cause[sizeof res.reason], prev_cause[sizeof res.reason];
        cause_of(res.reason, cause, sizeof cause);
        cause_of(prev_why, prev_cause, sizeof prev_cause);
        const bool repeat = train && prev && now && !marks_new(prev, now) && rc == prev_rc && res.reason[0] &&
                            !res.reason_from_mpirun && !strcmp(cause, prev_cause);
        marks_free(prev);
        prev = now;
        prev_rc = rc;
        snprintf(prev_why, sizeof prev_why, "%s", res.reason);
        if (repeat) {
            st_launch_sayf(
                out,
                "scaletrain launch: the job failed again the same way (exit %d: %s), committing no "
                "checkpoint since the last attempt; not restarted: the cause is not passing (fix "
                "it and launch again; restarts left: %ld)\n",
                rc, why, max_restarts - attempt);
            break;
        }
        /* Refused by another run that holds its train.out_dir: the checkpoints that run commits would
         * be taken for this job's, and a restart would continue that run (it did). Else the out_dir let
         * go by this job's own last ranks first (they outlive a killed mpirun by about a second). */
        char holder[512];
        if (train && strstr(res.reason, "is in use by another run")) {
            st_launch_sayf(
                out,
                "scaletrain launch: the job failed (exit %d: %s); not restarted: another run holds "
                "its train.out_dir, and a restart would continue that run's checkpoints as this "
                "job's; wait for it to end, or give this job another train.out_dir\n",
                rc, why);
            break;
        }
        if (train && cfg_ok && out_dir_held(cfg.train.out_dir, 10, look_s, holder, sizeof holder)) {
            st_launch_sayf(
                out,
                "scaletrain launch: the job failed (exit %d: %s); not restarted: train.out_dir %s is "
                "still held 10 s after the job ended (%s): its ranks have not all ended, or another "
                "run took it\n",
                rc, why, cfg.train.out_dir, holder);
            break;
        }
        if (train && !committed) {
            /* as it was started: its own arguments (a restart before may have changed them) */
            for (int j = cmd_at; j < argc; j++)
                av[args_at + j - cmd_at] = argv[j];
            av[args_at + argc - cmd_at] = NULL;
            const char *given = NULL;
            for (int j = cmd_at + 1; j + 1 < argc; j++)
                if (!strcmp(argv[j], "--resume")) given = argv[j + 1];
            /* (the look at its checkpoints all the same: storage that stopped answering, the likely
             * cause, is not restarted on) */
            if (!resume_point(argc - cmd_at - 1, argv + cmd_at + 1, where, sizeof where)) {
                st_launch_sayf(out, "scaletrain launch: the job failed (exit %d: %s); not restarted: %s\n",
                               rc, why, where);
                break;
            }
            snprintf(where, sizeof where, "as it was started (%s%s): it committed no checkpoint of its own",
                     given ? "--resume " : "", given ? given : "no --resume");
        } else if (train) {
            /* train's own arguments: after "train", with any --resume dropped */
            int m = args_at + 1;
            for (int j = args_at + 1; av[j]; j++) {
                if (!strcmp(av[j], "--resume") && av[j + 1]) {
                    j++;
                    continue;
                }
                av[m++] = av[j];
            }
            av[m++] = "--resume";
            av[m++] = "auto";
            av[m] = NULL;
            if (!resume_point(m - args_at - 1, av + args_at + 1, where, sizeof where)) {
                st_launch_sayf(out, "scaletrain launch: the job failed (exit %d: %s); not restarted: %s\n",
                               rc, why, where);
                break;
            }
        }
        st_launch_sayf(out, "scaletrain launch: the job failed (exit %d: %s); restart %ld of %ld %s\n", rc,
                       why, attempt + 1, max_restarts, where);
    }
    st_launch_signals_end();
    free(av);
    marks_free(before);
    marks_free(prev);
    for (int j = 0; fwd_names[j]; j++)
        free(fwd_names[j]);
    free(fwd_names);
    st_launch_out_end(out, signalled != 0);
    return rc;
}
