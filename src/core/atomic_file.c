/* Temporary file, fsync, rename, directory fsync (see atomic_file.h). */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

st_status st_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return st_fail(ST_ERR_IO, "%s: cannot open the directory to sync it: %s", dir, strerror(errno));
    int r = fsync(fd), err = errno;
    close(fd);
    if (r != 0 && err != EINVAL) /* some file systems cannot sync a directory */
        return st_fail(ST_ERR_IO, "%s: cannot sync the directory: %s", dir, strerror(err));
    return ST_OK;
}

bool st_path_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool st_path_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool st_path_same(const char *a, const char *b) {
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

bool st_path_within(const char *path, const char *dir) {
    char *real = path && dir ? realpath(path, NULL) : NULL;
    if (!real) return false;
    bool in = false;
    for (char *cut = NULL; !in;) {
        in = st_path_same(real[0] ? real : "/", dir);
        cut = strrchr(real, '/');
        if (!cut || (cut == real && !real[1])) break; /* (the root compared last) */
        *cut = '\0';
    }
    free(real);
    return in;
}

bool st_pread_all(int fd, void *dst, size_t n, int64_t off) {
    char *p = dst;
    while (n > 0) {
        const ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r, n -= (size_t)r, off += r;
    }
    return true;
}

/* Sync the directory holding the file `path`. */
static st_status fsync_parent(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return st_fsync_dir(dir);
}

/* One directory of st_mkdirs: made, and its entry synced in its parent (a
 * checkpoint folder's own fsync does not keep the folder's name there). */
bool st_cwd_gone(const char *path, char *buf, size_t n) {
    char cwd[4096];
    if (!path || path[0] == '/' || getcwd(cwd, sizeof cwd) || errno != ENOENT) return false;
    snprintf(buf, n,
             "%s is relative to the current directory, which no longer exists (deleted or moved while the "
             "shell was in it): cd to an existing directory, or give the path in full",
             path);
    return true;
}

static st_status mkdir_one(const char *dir) {
    if (mkdir(dir, 0755) == 0) return fsync_parent(dir);
    char gone[4400];
    if (errno == ENOENT && st_cwd_gone(dir, gone, sizeof gone)) return st_fail(ST_ERR_IO, "%s", gone);
    if (errno != EEXIST) return st_fail(ST_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    /* (a file by that name: what is written under it would fail later, naming a path below it; a
     * symbolic link to nothing: made by no mkdir) */
    struct stat sb;
    const int got = stat(dir, &sb);
    if (got == 0 && !S_ISDIR(sb.st_mode))
        return st_fail(ST_ERR_IO, "%s: is %s, not a directory: choose another path, or move it aside", dir,
                       st_file_type_name(sb.st_mode));
    if (got != 0 && errno == ENOENT)
        return st_fail(
            ST_ERR_IO,
            "%s: is a symbolic link to a path that does not exist: make its target, or choose another "
            "path",
            dir);
    return ST_OK;
}

st_status st_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return st_fail(ST_ERR_ARG, "%.64s...: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        ST_TRY(mkdir_one(buf));
        *p = '/';
    }
    return mkdir_one(buf);
}

void st_tmp_name(char *out, size_t n, const char *path) {
    char suffix[48];
    int sn = snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    const char *slash = strrchr(path, '/');
    const size_t dir = slash ? (size_t)(slash + 1 - path) : 0, base = strlen(path) - dir;
    const size_t max = 255; /* NAME_MAX of Linux's file systems */
    if (base + (size_t)sn > max) {           /* cut: the whole name's hash keeps two long names' apart */
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (const char *p = path + dir; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        sn = snprintf(suffix, sizeof suffix, ".%016llx.tmp.%ld", (unsigned long long)h, (long)getpid());
    }
    const size_t keep = base + (size_t)sn > max ? max - (size_t)sn : base;
    snprintf(out, n, "%.*s%s", (int)(dir + keep), path, suffix);
}

st_status st_atomic_open(st_atomic_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = path;
    st_tmp_name(f->tmp, sizeof f->tmp, path);
    if (!(f->fp = fopen(f->tmp, "wb")))
        return st_fail(ST_ERR_IO, "%s: cannot create: %s", f->tmp, strerror(errno));
    return ST_OK;
}

st_status st_atomic_finish(st_atomic_file *f) {
    if (!f->fp) return ST_OK;
    st_status s = ST_OK;
    /* (a write that failed inside the stream's buffer leaves only its error
     * flag: a later flush of what is left may succeed) */
    if (ferror(f->fp))
        s = st_fail(ST_ERR_IO, "%s: cannot write: a write into it failed", f->tmp);
    else if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)
        s = st_fail(ST_ERR_IO, "%s: cannot write: %s", f->tmp, strerror(errno));
    int r = fclose(f->fp);
    f->fp = NULL;
    if (s == ST_OK && r != 0) s = st_fail(ST_ERR_IO, "%s: cannot close: %s", f->tmp, strerror(errno));
    if (s != ST_OK) {
        unlink(f->tmp);
        f->tmp[0] = '\0';
    }
    return s;
}

st_status st_atomic_commit(st_atomic_file *f) {
    ST_TRY(st_atomic_finish(f));
    if (!f->tmp[0]) return st_fail(ST_ERR_INTERNAL, "%s: no temporary file to commit", f->path);
    if (rename(f->tmp, f->path) != 0) {
        st_status s =
            st_fail(ST_ERR_IO, "%s: cannot rename %s over it: %s", f->path, f->tmp, strerror(errno));
        unlink(f->tmp);
        f->tmp[0] = '\0';
        return s;
    }
    f->tmp[0] = '\0';
    return fsync_parent(f->path);
}

void st_atomic_abort(st_atomic_file *f) {
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->tmp[0]) unlink(f->tmp);
    f->tmp[0] = '\0';
}

/* statvfs of path, or of its nearest existing parent (it may not exist yet). */
static bool path_statvfs(const char *path, struct statvfs *sv) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path && path[0] ? path : ".");
    for (;;) {
        if (statvfs(p, sv) == 0) return true;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) /* "name" -> ".", "/name" -> "/" */
            return statvfs(slash ? "/" : ".", sv) == 0;
        *slash = '\0';
    }
}

int64_t st_path_space(const char *path, int64_t *total) {
    struct statvfs sv;
    if (!path_statvfs(path, &sv)) return -1;
    if (total) *total = (int64_t)sv.f_blocks * (int64_t)sv.f_frsize;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

int st_open_read(const char *path, struct stat *sb) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, sb) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (S_ISREG(sb->st_mode)) {
        const int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    return fd;
}

const char *st_file_type_name(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISREG(mode)  ? "a regular file"
                            : "not a regular file";
}

bool st_path_read_only(const char *path) {
    struct statvfs sv;
    return path_statvfs(path, &sv) && (sv.f_flag & ST_RDONLY);
}

int64_t st_path_free_bytes(const char *path) { return st_path_space(path, NULL); }
