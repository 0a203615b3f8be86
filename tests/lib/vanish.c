/* A folder that goes away under a run, for tests, loaded with LD_PRELOAD:
 * the first fopen of a path ending in $ST_VANISH_MATCH renames the folder
 * holding that file to the same name with ".gone" added (as a user moving
 * a run's checkpoints aside while it starts), says so on standard error,
 * then opens as the C library does. Every other call is the C library's.
 * tests/e2e/checkpoint_resume.sh builds it (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    static int done;
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    const char *match = getenv("ST_VANISH_MATCH");
    const size_t n = path ? strlen(path) : 0, m = match ? strlen(match) : 0;
    if (!done && m && n > m && strcmp(path + n - m, match) == 0) {
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
