/* `scaletrain launch -n N [--hosts H1:n1,H2:n2] COMMAND...`: start N ranks of
 * COMMAND with mpirun, one per core (bound), and become mpirun (exec), so its
 * exit status is the job's. COMMAND is a scaletrain subcommand (`train
 * run.yaml`: this executable runs it) or any program. The ranks find each
 * other through MPI alone (st_comm_init); under SLURM, `srun scaletrain train`
 * needs no launcher.
 *
 * Not here yet: --max-restarts, per-rank output prefixes (issue 4). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: scaletrain launch -n N [--hosts H1:n1,H2:n2] COMMAND [ARGS]...\n"
            "  starts N ranks of COMMAND with mpirun (bound to cores); COMMAND is a scaletrain\n"
            "  subcommand (train, eval, ...) or a program. Example: scaletrain launch -n 4 train run.yaml\n");
}

/* mpirun's path on PATH, or false. */
static bool find_on_path(const char *name, char *out, size_t n) {
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

static bool is_subcommand(const char *s) {
    static const char *const cmds[] = {"train", "eval", "data"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(s, cmds[i]) == 0) return true;
    return false;
}

int st_cmd_launch(int argc, char **argv) {
    const char *hosts = NULL;
    long n = 0;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--hosts") == 0) && i + 1 >= argc) {
            fprintf(stderr, "scaletrain launch: %s needs a value\n", argv[i]);
            return ST_EXIT_USAGE;
        }
        if (strcmp(argv[i], "-n") == 0) {
            char *end;
            n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 1 << 20) {
                fprintf(stderr, "scaletrain launch: -n %s: want a number of ranks >= 1\n", argv[i]);
                return ST_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--hosts") == 0) {
            hosts = argv[++i];
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        } else {
            fprintf(stderr, "scaletrain launch: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return ST_EXIT_USAGE;
        }
    }
    if (n < 1 || i >= argc) {
        fprintf(stderr, "scaletrain launch: %s\n", n < 1 ? "-n N is required" : "no command to launch");
        usage(stderr);
        return ST_EXIT_USAGE;
    }
    char mpirun[PATH_MAX];
    if (!find_on_path("mpirun", mpirun, sizeof mpirun)) {
        fprintf(stderr,
                "scaletrain launch: mpirun is not on PATH; install OpenMPI (apt-get install openmpi-bin) "
                "or start the ranks another way (under SLURM: srun scaletrain train ...)\n");
        return ST_EXIT_FAIL;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        snprintf(self, sizeof self, "scaletrain");
    else
        self[len] = '\0';

    char np[32];
    snprintf(np, sizeof np, "%ld", n);
    char **av = calloc((size_t)(argc + 16), sizeof *av);
    if (!av) return ST_EXIT_FAIL;
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = "--bind-to";
    av[k++] = "core";
    av[k++] = "--map-by";
    av[k++] = "core";
    if (geteuid() == 0) { /* OpenMPI refuses root without this (containers, CI) */
        av[k++] = "--allow-run-as-root";
        av[k++] = "--oversubscribe";
    }
    if (hosts) {
        av[k++] = "--host";
        av[k++] = (char *)hosts;
    }
    if (is_subcommand(argv[i])) av[k++] = self;
    for (; i < argc; i++)
        av[k++] = argv[i];
    av[k] = NULL;
    execv(mpirun, av);
    fprintf(stderr, "scaletrain launch: cannot run %s: %s\n", mpirun, strerror(errno));
    free(av);
    return ST_EXIT_FAIL;
}
