/* A slow filesystem for tests, loaded with LD_PRELOAD: fsync, fdatasync,
 * fflush and write of a file whose path contains $ST_SLOWFS_MATCH, and open
 * of such a path, return $ST_SLOWFS_MS milliseconds late (fflush only when
 * the stream has bytes to write; with ST_SLOWFS_EIO_AFTER, fflush fails
 * instead, below), as on a loaded
 * network filesystem; every other call is the C library's. (The C
 * library's own calls inside fopen, fwrite or fclose are not seen: only the
 * program's.)
 * ST_SLOWFS_CLOSE_EIO=1 makes fclose of such a file fail (below).
 * ST_SLOWFS_UNTIL=FILE: such a call waits instead until FILE exists (at
 * most $ST_SLOWFS_MS), and ST_SLOWFS_MARK=FILE is made when it begins to
 * wait, so that a test holds a process at that call, does something, and
 * lets it go (tests/e2e/out_dir_lock.sh).
 * tests/e2e/checkpoint_slow.sh builds it (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

static void slow_path(const char *path) {
    const char *match = getenv("ST_SLOWFS_MATCH"), *ms = getenv("ST_SLOWFS_MS");
    if (!match || !*match || !ms || !path || !strstr(path, match)) return;
    if (getenv("ST_SLOWFS_EIO_AFTER")) return; /* failing, not slow */
    long v = atol(ms);
    const char *until = getenv("ST_SLOWFS_UNTIL"), *mark = getenv("ST_SLOWFS_MARK");
    if (mark && *mark) {
        const int fd = (int)syscall(SYS_openat, AT_FDCWD, mark, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
    }
    if (until && *until) { /* (its existence, every 10 ms: a test's event, not a timing) */
        for (long waited = 0; waited < v && access(until, F_OK) != 0; waited += 10) {
            struct timespec t = {0, 10 * 1000000L};
            while (nanosleep(&t, &t) != 0) {
            }
        }
        return;
    }
    struct timespec t = {v / 1000, (v % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void slow(int fd) {
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = '\0';
    slow_path(path);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow(fd);
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow(fd);
    return real(fd);
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    slow(fd);
    return real(fd, buf, n);
}

/* ST_SLOWFS_EIO_AFTER=K: the matching file's fflush calls after its first
 * K fail with EIO (a disk that turned bad), instead of coming late. */
static int failing(FILE *fp) {
    static long calls;
    const char *match = getenv("ST_SLOWFS_MATCH"), *after = getenv("ST_SLOWFS_EIO_AFTER");
    if (!after || !match || !*match) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fileno(fp));
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strstr(path, match) && ++calls > atol(after);
}

/* ST_SLOWFS_CLOSE_EIO=1: fclose of the matching file closes it, then says
 * EIO (a network file system's write-back refused at close). */
int fclose(FILE *fp) {
    static int (*real)(FILE *);
    if (!real) real = (int (*)(FILE *))dlsym(RTLD_NEXT, "fclose");
    const char *match = getenv("ST_SLOWFS_MATCH"), *eio = getenv("ST_SLOWFS_CLOSE_EIO");
    int bad = 0;
    if (fp && eio && *eio == '1' && match && *match) {
        char link[64], path[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fileno(fp));
        const ssize_t n = readlink(link, path, sizeof path - 1);
        if (n > 0) path[n] = '\0';
        bad = n > 0 && strstr(path, match) != NULL;
    }
    const int rc = real(fp);
    if (bad) {
        errno = EIO;
        return EOF;
    }
    return rc;
}

int fflush(FILE *fp) {
    static int (*real)(FILE *);
    if (!real) real = (int (*)(FILE *))dlsym(RTLD_NEXT, "fflush");
    if (fp && __fpending(fp) > 0 && failing(fp)) {
        errno = EIO;
        return EOF;
    }
    if (fp && __fpending(fp) > 0) slow(fileno(fp)); /* (with nothing buffered a real one writes nothing) */
    return real(fp);
}

/* open(2)'s mode argument is there only with O_CREAT or O_TMPFILE. */
#define MODE(flags, mode)                                                                                    \
    do {                                                                                                     \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                                               \
            va_list ap;                                                                                      \
            va_start(ap, flags);                                                                             \
            mode = va_arg(ap, int);                                                                          \
            va_end(ap);                                                                                      \
        }                                                                                                    \
    } while (0)

typedef int (*open_fn)(const char *, int, ...);

static int open_slowly(open_fn *real, const char *sym, const char *path, int flags, int mode) {
    if (!*real) *real = (open_fn)dlsym(RTLD_NEXT, sym);
    slow_path(path);
    return (*real)(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    static open_fn real;
    int mode = 0;
    MODE(flags, mode);
    return open_slowly(&real, "open", path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    static open_fn real;
    int mode = 0;
    MODE(flags, mode);
    return open_slowly(&real, "open64", path, flags, mode);
}
