/* A folder that goes away or fails under a run, for tests, loaded with
 * LD_PRELOAD:
 * - the first fopen of a path ending in $ST_VANISH_MATCH renames the folder
 *   holding that file to the same name with ".gone" added (as a user moving
 *   a run's checkpoints aside while it starts), says so on standard error,
 *   then opens as the C library does;
 * - opendir of a path ending in $ST_VANISH_EIO fails with EIO (a network
 *   file system's error on a folder that is there);
 * - open and fopen of a path ending in $ST_VANISH_READ_EIO fail with EIO
 *   (a file there that the storage does not read);
 * - fopen for writing of a path holding $ST_VANISH_WRITE_EIO anywhere fails
 *   with EIO (a file the storage does not create; temporary files end in
 *   the process's id);
 * - the second fopen for reading of a path ending in $ST_VANISH_GROW first
 *   appends a line to that file (a writer adding to it between a reader's
 *   look at its size and its read);
 * - rename onto a path ending in $ST_VANISH_RENAME_EIO fails with EIO (a
 *   commit the storage refuses);
 * - with ST_VANISH_NOFLOCK=1, every flock fails with ENOLCK (a file system
 *   without locks: Lustre mounted without flock).
 * With ST_VANISH_RANK set, only the MPI rank of that number
 * (OMPI_COMM_WORLD_RANK) does any of this: one rank whose storage fails.
 * Every other call is the C library's. tests/e2e/checkpoint_resume.sh
 * builds it (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This process is the one ST_VANISH_RANK names, or it names none. */
static int chosen(void) {
    const char *only = getenv("ST_VANISH_RANK"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    return !(only && *only && (!rank || atoi(rank) != atoi(only)));
}

static int ends_with(const char *path, const char *env) {
    if (!chosen()) return 0;
    const char *match = getenv(env);
    const size_t n = path ? strlen(path) : 0, m = match ? strlen(match) : 0;
    return m && n >= m && strcmp(path + n - m, match) == 0;
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    static int done;
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    const char *w = chosen() ? getenv("ST_VANISH_WRITE_EIO") : NULL;
    if (ends_with(path, "ST_VANISH_READ_EIO") || (w && *w && path && strchr(mode, 'w') && strstr(path, w))) {
        errno = EIO;
        return NULL;
    }
    static int grow_opens;
    if (ends_with(path, "ST_VANISH_GROW") && strchr(mode, 'r') &&
        __atomic_add_fetch(&grow_opens, 1, __ATOMIC_SEQ_CST) == 2) {
        FILE *a = real(path, "a");
        if (a) {
            fputs("a line added while the file was read\n", a);
            fclose(a);
            fprintf(stderr, "vanish: added a line to %s\n", path);
        }
    }
    if (!done && ends_with(path, "ST_VANISH_MATCH")) {
        done = 1;
        char dir[PATH_MAX], gone[PATH_MAX + 8];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        snprintf(gone, sizeof gone, "%s.gone", dir);
        if (rename(dir, gone) == 0) fprintf(stderr, "vanish: moved %s to %s\n", dir, gone);
    }
    return real(path, mode);
}

DIR *opendir(const char *name) {
    static DIR *(*real)(const char *);
    if (!real) real = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    if (ends_with(name, "ST_VANISH_EIO")) {
        errno = EIO;
        return NULL;
    }
    return real(name);
}

static int open_as(const char *sym, const char *path, int flags, va_list ap) {
    mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
    if (ends_with(path, "ST_VANISH_READ_EIO")) {
        errno = EIO;
        return -1;
    }
    int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);
    return real(path, flags, mode);
}
int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const int fd = open_as("open", path, flags, ap);
    va_end(ap);
    return fd;
}
int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    const int fd = open_as("open64", path, flags, ap);
    va_end(ap);
    return fd;
}

int flock(int fd, int op) {
    static int (*real)(int, int);
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    const char *e = getenv("ST_VANISH_NOFLOCK");
    if (e && *e == '1' && chosen()) {
        errno = ENOLCK;
        return -1;
    }
    return real(fd, op);
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (ends_with(to, "ST_VANISH_RENAME_EIO")) {
        errno = EIO;
        return -1;
    }
    return real(from, to);
}
