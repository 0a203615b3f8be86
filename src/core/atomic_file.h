/* Files written whole or not at all: write to "<path>.tmp.<pid>", then flush,
 * fsync, rename over the path and fsync the directory, so a crash leaves either
 * the old file or the new one. Every writer of weights, data and checkpoints
 * goes through this. */
#ifndef ST_CORE_ATOMIC_FILE_H
#define ST_CORE_ATOMIC_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "scaletrain/status.h"

typedef struct st_atomic_file {
    const char *path; /* borrowed: must outlive the file */
    char tmp[4096];
    FILE *fp; /* write here (or through fileno(fp)) */
} st_atomic_file;

/* The temporary name of path, beside it: "<path>.tmp.<pid>", its last part
 * cut short where the whole would pass the 255 bytes a file name may take
 * (a name of 250 bytes could be written, its temporary could not). */
void st_tmp_name(char *out, size_t n, const char *path);
/* Create the temporary file. On failure nothing is left behind. */
st_status st_atomic_open(st_atomic_file *f, const char *path);
/* Sync and close the temporary file, not yet renamed (so that several files
 * can be written before any of them replaces its path); on failure the
 * temporary is removed. Accepts a file already finished. */
st_status st_atomic_finish(st_atomic_file *f);
/* Finish (when not done yet) and rename over the path; on failure the
 * temporary is removed. */
st_status st_atomic_commit(st_atomic_file *f);
/* Drop the temporary file; the file at path stays as it was. Accepts a file
 * that was never opened or already committed. */
void st_atomic_abort(st_atomic_file *f);

/* fsync a directory, so renames into it survive a crash (file systems that
 * cannot sync a directory are not an error). */
st_status st_fsync_dir(const char *dir);
/* A relative path's trouble where the current directory no longer exists
 * (deleted or moved while the shell was in it): getcwd's ENOENT. Writes
 * "PATH is relative to the current directory, which no longer exists ...;
 * cd to ..., or give PATH in full" into buf and returns true then; false
 * (buf untouched) for an absolute path or a current directory that exists. */
bool st_cwd_gone(const char *path, char *buf, size_t n);
/* mkdir -p: create `path` and any missing parents (0755). */
st_status st_mkdirs(const char *path);
/* `path` is a regular file / a directory (following links). */
bool st_path_is_file(const char *path);
bool st_path_is_dir(const char *path);
/* a and b (either may be NULL) name the same existing file or directory
 * (its device and inode, following links). */
bool st_path_same(const char *a, const char *b);
/* path (existing) is dir or lies under it, following links (each folder
 * above path's real one compared with dir by st_path_same). */
bool st_path_within(const char *path, const char *dir);
/* Read exactly n bytes of fd at offset off into dst (retrying short reads
 * and EINTR); false on an error or a file that ends first. */
bool st_pread_all(int fd, void *dst, size_t n, int64_t off);
/* Bytes free to this user on the filesystem of path, or of its nearest
 * existing parent (path need not exist yet); -1 when none can be asked. */
int64_t st_path_free_bytes(const char *path);
/* The same, with the file system's size in *total (may be NULL): 0 for a
 * view of the kernel's (/proc, /sys), which holds no files. */
int64_t st_path_space(const char *path, int64_t *total);
/* open(path) to read, without waiting where it is a FIFO (whose open waits
 * for a writer, signals and all: a run that would never start), and its
 * fstat into *sb; O_NONBLOCK is cleared again for a regular file. The
 * caller checks S_ISREG. -1 and errno as open's or fstat's. */
int st_open_read(const char *path, struct stat *sb);
/* What a file that is not a regular one is, for a message: "a directory",
 * "a FIFO", "a character device", "a block device", "a socket" ("not a
 * regular file" for anything else). */
const char *st_file_type_name(mode_t mode);

/* Whether path (or its nearest existing parent) is on a file system
 * mounted read-only. */
bool st_path_read_only(const char *path);

#endif
