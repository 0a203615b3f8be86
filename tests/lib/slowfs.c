/* A slow filesystem for tests, loaded with LD_PRELOAD: fsync of a file whose
 * path contains $ST_SLOWFS_MATCH returns $ST_SLOWFS_MS milliseconds late, as
 * on a loaded network filesystem; every other call is the C library's.
 * tests/e2e/checkpoint_slow.sh builds it (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void slow(int fd) {
    const char *match = getenv("ST_SLOWFS_MATCH"), *ms = getenv("ST_SLOWFS_MS");
    if (!match || !*match || !ms) return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = '\0';
    if (!strstr(path, match)) return;
    long v = atol(ms);
    struct timespec t = {v / 1000, (v % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
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
