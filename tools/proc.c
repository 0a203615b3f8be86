/* Running another process from a subcommand (check, bench): this executable
 * again (`launch`, `train`) or a tool (mpirun --version), with its stdout and
 * stderr in files and a bound on its time. The wait is on the child's exit
 * (SIGCHLD through sigtimedwait, SIGCHLD's action the default meanwhile:
 * ignored, as a parent may leave it, the kernel would reap the child
 * unseen), not a sleep. The child is in a group of its own (a timeout ends
 * the whole job), so a Ctrl-C or a `timeout` that ends the subcommand does
 * not reach it: it gets SIGTERM when the subcommand's process ends
 * (PR_SET_PDEATHSIG), which a train or launch job takes as a stop. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/atomic_file.h"

int st_cli_spawn(char *const *argv, const char *out_path, const char *err_path, double timeout_s) {
    return st_cli_spawn_stoppable(argv, out_path, err_path, timeout_s, NULL);
}

int st_cli_spawn_stoppable(char *const *argv, const char *out_path, const char *err_path, double timeout_s,
                           atomic_int *stop) {
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    struct sigaction dfl, was;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &was);
    fflush(NULL);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        sigaction(SIGCHLD, &was, NULL); /* (the program's own, as the parent had it) */
        sigprocmask(SIG_SETMASK, &old, NULL);
        setpgid(0, 0); /* its own group: a timeout ends the whole job */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(128 + SIGTERM); /* (the parent ended before the line above) */
        /* one file for both (one offset: two opens would each write from
         * byte 0, over each other) */
        const bool same = out_path && err_path && strcmp(out_path, err_path) == 0;
        int fo = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644) : -1;
        int fe = same ? fo : err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644) : -1;
        if (fo >= 0) dup2(fo, 1);
        if (fe >= 0) dup2(fe, 2);
        if (fo > 2) close(fo);
        if (fe > 2 && fe != fo) close(fe);
        int fi = open("/dev/null", O_RDONLY);
        if (fi >= 0) dup2(fi, 0);
        if (fi > 2) close(fi);
        /* (a current directory deleted under the caller: mpirun refuses to start without one, "Unable
         * to get the current working directory"; the programs run here take full paths) */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd) && errno == ENOENT && chdir("/") != 0) _exit(127);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid < 0) {
        const int e = errno;
        sigaction(SIGCHLD, &was, NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        errno = e;
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = 0, rc = -2, passed = 0; /* passed: the stop signal passed on to the child's group */
    for (;;) {
        const int sig = stop ? atomic_load(stop) : 0;
        if (sig && !passed) kill(-pid, passed = sig);
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
            break;
        }
        if (w < 0 && errno != EINTR) { /* (not this process's child any more: nothing to wait for) */
            rc = -1;
            break;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left =
            timeout_s - ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec));
        if (left <= 0) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            rc = -2;
            break;
        }
        if (stop && left > 0.25) left = 0.25; /* (a stop that came before the wait is looked at soon) */
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        sigtimedwait(&chld, NULL, &ts); /* wakes on any child's exit, a caught signal, or at the deadline */
    }
    sigaction(SIGCHLD, &was, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

char *st_cli_read_file(const char *path) { return st_cli_read_bytes(path, NULL); }

bool st_cli_close_written(FILE *f, int *err) {
    const bool earlier = ferror(f) != 0;
    const bool flushed = fflush(f) == 0;
    int e = flushed ? 0 : errno;
    if (fclose(f) != 0 && !e) e = errno;
    if (earlier && !e) e = EIO;
    *err = e;
    return e == 0;
}

void st_cli_output_name(st_cli_output *o, const char *path) {
    o->path = path;
    struct stat sb;
    char real[PATH_MAX];
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && realpath(path, real))
        snprintf(o->target, sizeof o->target, "%s", real);
    else
        snprintf(o->target, sizeof o->target, "%s", path);
    st_tmp_name(o->tmp, sizeof o->tmp, o->target);
}

FILE *st_cli_output_open(st_cli_output *o, const char *path) {
    st_cli_output_name(o, path);
    FILE *f = fopen(o->tmp, "w");
    if (!f) o->tmp[0] = '\0';
    return f;
}

st_status st_cli_output_commit(st_cli_output *o) {
    if (rename(o->tmp, o->target) != 0) { /* (written whole; the path is a directory, say) */
        const int err = errno;
        unlink(o->tmp);
        o->tmp[0] = '\0';
        return st_fail(ST_ERR_IO, "%s: cannot replace it: %s (what was written is removed)", o->path,
                       strerror(err));
    }
    o->tmp[0] = '\0';
    return ST_OK;
}

st_status st_cli_output_close(st_cli_output *o, FILE *f) {
    int err;
    if (!st_cli_close_written(f, &err)) {
        unlink(o->tmp);
        o->tmp[0] = '\0';
        return st_fail(ST_ERR_IO, "%s: write failed: %s (the part written was removed)", o->path,
                       strerror(err));
    }
    return st_cli_output_commit(o);
}

char *st_cli_read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 4096 > cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    const int err = ferror(f) ? (errno ? errno : EIO) : 0; /* (a directory: EISDIR) */
    fclose(f);
    if (buf && err) {
        free(buf);
        buf = NULL;
        errno = err;
    }
    if (buf) buf[n] = '\0';
    if (buf && len) *len = n;
    return buf;
}

const char *st_cli_last_json_line(char *text) {
    char *last = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] == '{') last = line;
    return last;
}
