/* train.out_dir's checkpoint folders around the checkpoints: a run before
 * this one's set aside (ckpt.previous) or a resume's abandoned trajectory
 * (ckpt.abandoned), the temporary files a killed process left, the room the
 * run's checkpoints need, and run.lock, one run at a time. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_shared.h"
#include "core/atomic_file.h"
#include "core/text.h"
#include "core/ticker.h"

void st_ckpt_aside_note(const char *out_dir, char *note, size_t cap) {
    static const char *const FOLDERS[] = {"ckpt.abandoned", "ckpt.previous"};
    static const char *const WHAT[] = {"trajectories resumes left", "the run before this one"};
    size_t at = 0;
    if (cap) note[0] = '\0';
    for (int i = 0; i < 2; i++) {
        char dir[ST_CKPT_PATH_CAP];
        snprintf(dir, sizeof dir, "%s/%s", out_dir, FOLDERS[i]);
        const int64_t b = st_ckpt_tree_bytes(dir, false);
        if (b > 0)
            st_appendf(note, cap, &at, "%s%s/%s holds %.1f MiB, the checkpoints of %s", at ? "; " : "",
                       out_dir, FOLDERS[i], (double)b / (1 << 20), WHAT[i]);
    }
    if (at) st_appendf(note, cap, &at, ": nothing prunes them; remove them once you no longer need them");
}
/* Remove from `dir` the files `<name>.tmp.<pid>` of the names given (NULL
 * ended): st_atomic_open's temporary files, left by a process killed while
 * it wrote them. */
static void sweep_files(const char *dir, const char *const *names) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[ST_CKPT_PATH_CAP];
    while ((e = readdir(d)) != NULL)
        for (const char *const *n = names; *n; n++) {
            const size_t len = strlen(*n);
            if (strncmp(e->d_name, *n, len) != 0 || strncmp(e->d_name + len, ".tmp.", 5) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

void st_ckpt_sweep_leftovers(const char *out_dir) {
    static const char *const top[] = {"model.safetensors", "metrics.jsonl", "trace.json", NULL};
    static const char *const ck[] = {"latest", NULL};
    char ckdir[ST_CKPT_PATH_CAP], path[ST_CKPT_PATH_CAP];
    sweep_files(out_dir, top);
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    sweep_files(ckdir, ck);
    /* a rescue's locks (run_ckpt.c st_run_rescue: its .excl, made once, would keep a
     * later rescue of that step from writing) */
    DIR *d = opendir(ckdir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "rescue-step-", 12) == 0 && strstr(e->d_name, ".lock")) {
            snprintf(path, sizeof path, "%s/%s", ckdir, e->d_name);
            unlink(path);
        }
    closedir(d);
}
void st_ckpt_remove_all(const char *out_dir) {
    char ckdir[ST_CKPT_PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    st_ckpt_remove_dir(ckdir);
}

bool st_ckpt_resume_source(const char *out_dir, const char *spec, char *folder, size_t size) {
    if (size) folder[0] = '\0';
    if (strcmp(spec, "auto") == 0) return false;
    char where[ST_CKPT_PATH_CAP], own[ST_CKPT_PATH_CAP];
    const st_ckpt_kind k = st_ckpt_classify(spec, where, sizeof where);
    st_clear_error();
    if (k == ST_CKPT_NONE) return false;
    if (k == ST_CKPT_ONE) { /* (its parent: where is the step's folder; "step-6/." and ".." resolved) */
        char up[ST_CKPT_PATH_CAP + 4], canon[PATH_MAX];
        snprintf(up, sizeof up, "%s/..", where);
        snprintf(where, sizeof where, "%s", realpath(up, canon) ? canon : up); /* (stat follows up as well) */
    }
    snprintf(folder, size, "%s", where);
    snprintf(own, sizeof own, "%s/ckpt", out_dir);
    return !st_path_same(where, own);
}

st_status st_ckpt_new_run_check(const char *out, const char *resume_from, int *aside, int64_t *aside_step) {
    char ckdir[ST_CKPT_PATH_CAP], dir[ST_CKPT_PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out);
    int64_t *steps = NULL;
    int n = 0;
    bool found = false;
    st_ckpt_state st;
    *aside = 0;
    *aside_step = -1;
    const st_status ls = st_ckpt_list(ckdir, &steps, &n);
    free(steps);
    char latest[ST_CKPT_PATH_CAP + 8];
    snprintf(latest, sizeof latest, "%s/latest", ckdir);
    const bool any = ls == ST_OK && (n > 0 || st_path_is_file(latest)); /* (latest: it may name a folder
                                                                           renamed by hand) */
    const st_status fs = any ? st_ckpt_find(out, "auto", NULL, dir, sizeof dir, &found, &st) : ST_OK;
    const bool good = any && fs == ST_OK && found;
    /* No folder is none; one that cannot be listed, or checkpoints that
     * cannot be read, may be an unfinished run's; so may a checkpoint that
     * `latest` names by a name no checkpoint has (ST_ERR_CONFIG). */
    const st_status unseen = ls != ST_OK ? ls : st_ckpt_search_ends(fs) || fs == ST_ERR_CONFIG ? fs : ST_OK;
    if (unseen == ST_ERR_CONFIG)
        return unseen; /* (its message says what to do, and that nothing was written) */
    if (unseen != ST_OK) {
        char why[1200];
        snprintf(why, sizeof why, "%s", st_last_error());
        return st_fail(unseen, "%s. A %s in train.out_dir %s would %s (nothing was written)", why,
                       resume_from ? "run resumed from another folder" : "new run", out,
                       ls != ST_OK
                           ? "save beside the checkpoints there that it cannot see, and prune them as "
                             "its own"
                           : "set aside checkpoints it could not read, which may be an unfinished "
                             "run's");
    }
    if (good && (st.run_steps < 0 || st.step < st.run_steps) && resume_from)
        return st_fail(
            ST_ERR_CONFIG,
            "--resume continues the run of %s, but train.out_dir %s holds another, unfinished run: "
            "its latest good checkpoint, %s, is at step %lld of %lld, and the two runs' "
            "checkpoints would mix. Give the resumed run another train.out_dir; or continue that "
            "run with --resume auto, or remove %s (nothing was written)",
            resume_from, out, dir, (long long)st.step, (long long)st.run_steps, ckdir);
    if (good && (st.run_steps < 0 || st.step < st.run_steps))
        return st_fail(ST_ERR_CONFIG,
                       "train.out_dir %s holds an unfinished run: its latest good checkpoint, %s, is at step "
                       "%lld of %lld. Continue it with --resume auto; to start over, choose another "
                       "train.out_dir or remove %s (nothing was written)",
                       out, dir, (long long)st.step, (long long)st.run_steps, ckdir);
    if (any) {
        *aside = n;
        *aside_step = good ? st.step : -1;
    }
    st_clear_error();
    return ST_OK;
}

st_status st_ckpt_folder_check(const char *out_dir) {
    char ckdir[ST_CKPT_PATH_CAP];
    struct stat sb;
    /* (said at the start: it was "runs: cannot create directory: No such file or directory" once the
     * data had loaded) */
    if (st_cwd_gone(out_dir, ckdir, sizeof ckdir))
        return st_fail(ST_ERR_CONFIG, "train.out_dir %s (nothing was written)", ckdir);
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    if (stat(ckdir, &sb) != 0) return ST_OK; /* (none yet: made in out_dir at the first save) */
    if (S_ISDIR(sb.st_mode)) {
        /* A folder this process cannot write in (its mode, a read-only
         * mount): every checkpoint would fail, the first after
         * train.checkpoint_every_s of training. A folder made and removed
         * says so now (access(2) answers for the real user, and not for ACLs
         * or every file system). */
        char probe[ST_CKPT_PATH_CAP + 64];
        snprintf(probe, sizeof probe, "%s/.write-check.%ld", ckdir, (long)getpid());
        if (mkdir(probe, 0700) != 0 && errno != EEXIST)
            return st_fail(
                ST_ERR_CONFIG,
                "train.out_dir's checkpoint folder %s is not writable (%s): the run would train and "
                "fail at its first checkpoint. Make it writable, or choose another train.out_dir "
                "(nothing was written)",
                ckdir, strerror(errno));
        rmdir(probe);
        /* `latest` is replaced by a rename at every save: a folder there (made
         * by hand) failed the first save, after its training */
        char latest[ST_CKPT_PATH_CAP + 8];
        snprintf(latest, sizeof latest, "%s/latest", ckdir);
        if (lstat(latest, &sb) == 0 && S_ISDIR(sb.st_mode))
            return st_fail(ST_ERR_CONFIG,
                           "%s is a folder, where scaletrain keeps a file naming the latest checkpoint (each "
                           "save replaces it): the run would train and fail at its first checkpoint. Move it "
                           "away (nothing was written)",
                           latest);
        return ST_OK;
    }
    return st_fail(ST_ERR_CONFIG,
                   "train.out_dir %s holds %s, which is %s, not a folder: the run's checkpoints go in a folder "
                   "of that name. Move or remove it, or choose another train.out_dir (nothing was written)",
                   out_dir, ckdir, S_ISREG(sb.st_mode) ? "a file" : "something else");
}

st_status st_ckpt_set_aside(const char *out_dir, char *moved, size_t size) {
    char ckdir[ST_CKPT_PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    snprintf(moved, size, "%s/ckpt.previous", out_dir);
    st_ckpt_remove_dir(moved);
    if (rename(ckdir, moved) != 0)
        return st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", ckdir, moved, strerror(errno));
    return st_fsync_dir(out_dir);
}

st_status st_ckpt_set_aside_after(const char *out_dir, int64_t step, int *moved, char *names, size_t cap) {
    char ckdir[ST_CKPT_PATH_CAP], dest[ST_CKPT_PATH_CAP], from[ST_CKPT_PATH_CAP], to[ST_CKPT_PATH_CAP + 32];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    snprintf(dest, sizeof dest, "%s/ckpt.abandoned", out_dir);
    *moved = 0;
    if (cap) names[0] = '\0';
    size_t at = 0;
    int64_t *steps;
    int n;
    ST_TRY(st_ckpt_list(ckdir, &steps, &n));
    st_status s = ST_OK;
    for (int i = 0; i < n && steps[i] > step && s == ST_OK; i++) { /* (newest first) */
        if (*moved == 0) s = st_mkdirs(dest);
        snprintf(from, sizeof from, "%s/step-%lld", ckdir, (long long)steps[i]);
        snprintf(to, sizeof to, "%s/step-%lld", dest, (long long)steps[i]);
        for (int k = 1; s == ST_OK && access(to, F_OK) == 0; k++) /* (an earlier rewind's: kept too) */
            snprintf(to, sizeof to, "%s/step-%lld.%d", dest, (long long)steps[i], k);
        if (s == ST_OK && rename(from, to) != 0)
            s = st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", from, to, strerror(errno));
        if (s == ST_OK) {
            st_appendf(names, cap, &at, "%sstep-%lld", *moved ? ", " : "", (long long)steps[i]);
            ++*moved;
        }
    }
    free(steps);
    if (s != ST_OK || *moved == 0) return s;
    ST_TRY(st_fsync_dir(dest));
    char path[ST_CKPT_PATH_CAP];
    snprintf(from, sizeof from, "%s/step-%lld", ckdir, (long long)step);
    snprintf(path, sizeof path, "%s/latest", ckdir);
    if (st_path_is_dir(from)) {
        st_atomic_file af;
        ST_TRY(st_atomic_open(&af, path));
        fprintf(af.fp, "step-%lld\n", (long long)step);
        ST_TRY(st_atomic_commit(&af));
    } else if (unlink(path) != 0 && errno != ENOENT) {
        return st_fail(ST_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    }
    return st_fsync_dir(ckdir);
}

static double mib(int64_t bytes) { return (double)bytes / (1 << 20); }

void st_ckpt_bytes(int64_t params, const char *optim_type, int64_t *ckpt_bytes, int64_t *model_bytes) {
    const int64_t header = 64 << 10, moments = strcmp(optim_type, "adamw") == 0 ? 2 : 1;
    *model_bytes = 4 * params + header;
    *ckpt_bytes = *model_bytes + moments * 4 * params + header;
}
int64_t st_ckpt_planned(int64_t start, int64_t steps, int64_t every) {
    if (steps <= start) return 0;
    if (every <= 0) return 1;
    return steps / every - start / every + (steps % every != 0);
}

st_status st_ckpt_space_check(const char *out_dir, int64_t ckpt_bytes, int64_t model_bytes, int64_t keep,
                              int64_t free_bytes, int64_t planned, bool *certain, char *warn,
                              size_t warn_cap) {
    if (warn_cap) warn[0] = '\0';
    if (certain) *certain = false;
    int64_t total = -1;
    if (free_bytes < 0) {
        /* (a read-only mount's free space would be the reason given, when it is not the one) */
        if (st_path_read_only(out_dir))
            return st_fail(ST_ERR_CONFIG,
                           "train.out_dir %s is on a file system mounted read-only; choose another "
                           "train.out_dir (nothing was written)",
                           out_dir);
        free_bytes = st_path_space(out_dir, &total);
    }
    if (free_bytes < 0) return ST_OK; /* nothing to ask: the writes will say */
    if (total == 0)
        return st_fail(ST_ERR_CONFIG,
                       "train.out_dir %s is on a file system of size 0 (/proc, /sys or another view of the "
                       "kernel's), where no file can be made; choose another train.out_dir (nothing was "
                       "written)",
                       out_dir);
    char aside[2 * ST_CKPT_PATH_CAP + 300], aside_at[2 * ST_CKPT_PATH_CAP + 310] = ""; /* (what set aside holds) */
    if (free_bytes < ckpt_bytes + model_bytes) {
        st_ckpt_aside_note(out_dir, aside, sizeof aside);
        if (aside[0]) snprintf(aside_at, sizeof aside_at, " (%s)", aside);
        return st_fail(
            ST_ERR_IO,
            "train.out_dir %s: %.1f MiB free on its filesystem, but a checkpoint of this run takes "
            "%.1f MiB (weights and optimizer state) and its final weights %.1f MiB more: free "
            "space there%s or choose another train.out_dir (nothing was written)",
            out_dir, mib(free_bytes), mib(ckpt_bytes), mib(model_bytes), aside_at);
    }
    if ((keep <= 0 && planned < 0) || !warn_cap)
        return ST_OK; /* keeping all: how many depends on how long it runs */
    char ckdir[ST_CKPT_PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    int64_t *steps = NULL;
    int have = 0;
    if (st_ckpt_list(ckdir, &steps, &have) != ST_OK) {
        st_clear_error();
        have = 0;
    }
    free(steps);
    /* the most this run's checkpoints take at once: keep + 1 while a save
     * commits, less those there now (pruned as new ones come) */
    const int64_t more = keep + 1 - have > 1 ? keep + 1 - have : 1;
    /* and what the checkpoints it commits at least take for certain */
    const int64_t sure = planned < 0 ? -1 : keep <= 0 ? planned : (planned < more ? planned : more);
    if (sure > 0 && free_bytes < sure * ckpt_bytes + model_bytes) {
        st_ckpt_aside_note(out_dir, aside, sizeof aside);
        if (aside[0]) snprintf(aside_at, sizeof aside_at, "; %s", aside);
        if (certain) *certain = true;
        snprintf(
            warn, warn_cap,
            "scaletrain: warning: train.out_dir %s: %.1f MiB free on its filesystem, but this run commits "
            "at least %lld checkpoint%s of %.1f MiB (train.steps over train.checkpoint_every, and its "
            "last), %s, and its final weights (%.1f MiB) need %.1f MiB: the disk will fill and the run "
            "stop with an error (%s free space there%s)\n",
            out_dir, mib(free_bytes), (long long)planned, planned == 1 ? "" : "s", mib(ckpt_bytes),
            keep <= 0 ? "keeping every one (train.keep_checkpoints 0)"
            : sure == more && more > 1
                ? "more than train.keep_checkpoints of them on disk at once while a save commits"
                : "all of them on disk",
            mib(model_bytes), mib(sure * ckpt_bytes + model_bytes),
            keep > 1    ? "lower train.keep_checkpoints (or save less often: train.checkpoint_every), or"
            : keep <= 0 ? "set train.keep_checkpoints (0 keeps every one), or"
                        : "choose another train.out_dir, or",
            aside_at);
        return ST_OK;
    }
    if (keep <= 0) return ST_OK;
    if (free_bytes < more * ckpt_bytes + model_bytes) {
        st_ckpt_aside_note(out_dir, aside, sizeof aside);
        if (aside[0]) snprintf(aside_at, sizeof aside_at, "; %s", aside);
        /* (keeping 1 already: lowering it is no way out, 0 keeps them all) */
        snprintf(warn, warn_cap,
                 "scaletrain: warning: train.out_dir %s: %.1f MiB free on its filesystem, but the %lld "
                 "checkpoint%s of %.1f MiB this run keeps (%lld at once while a save commits, less the %d "
                 "there now) and its final weights (%.1f MiB) need %.1f MiB: the run will stop with an "
                 "error when the disk is full (%s free space there%s)\n",
                 out_dir, mib(free_bytes), (long long)keep, keep == 1 ? "" : "s", mib(ckpt_bytes),
                 (long long)keep + 1, have, mib(model_bytes), mib(more * ckpt_bytes + model_bytes),
                 keep > 1 ? "lower train.keep_checkpoints, or" : "choose another train.out_dir, or",
                 aside_at);
    }
    return ST_OK;
}
/* run.lock's first line: who holds it ("" if it does not say). */
static void read_holder(int fd, char *who, size_t cap) {
    const ssize_t n = pread(fd, who, cap - 1, 0);
    who[n > 0 ? n : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
}

st_status st_ckpt_lock_out_dir(const char *out, bool create, int *lock_fd) {
    char path[4200];
    snprintf(path, sizeof path, "%s/run.lock", out);
    int fd = *lock_fd;
    if (fd < 0) {
        if (create) {
            const st_status s = st_mkdirs(out);
            if (s != ST_OK) return st_fail_context(s, "train.out_dir: ");
        }
        fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
        if (fd < 0 && !create && errno == ENOENT) return ST_OK; /* (locked after the look) */
        if (fd < 0 && errno == ENOTDIR) /* (out_dir, or a folder above it, a file: not a permission) */
            return st_fail(ST_ERR_IO,
                           "train.out_dir %s is a file, or a path under one, not a directory: choose another "
                           "train.out_dir, or move the file aside",
                           out);
        if (fd < 0 && errno == ELOOP) /* (a link that leads back to itself: not a permission either) */
            return st_fail(
                ST_ERR_IO,
                "train.out_dir %s: a symbolic link on its path leads back to itself (%s); mend the "
                "link or choose another train.out_dir",
                out, strerror(errno));
        if (fd < 0)
            return st_fail(ST_ERR_IO,
                           "train.out_dir: cannot open %s: %s; make train.out_dir writable or choose another",
                           path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            if (e == EWOULDBLOCK) {
                char holder[512];
                read_holder(fd, holder, sizeof holder);
                close(fd);
                return st_fail(
                    ST_ERR_CONFIG,
                    "train.out_dir %s is in use by another run (%s: it holds %s); two runs in one "
                    "train.out_dir would mix their checkpoints and metrics. Wait for it to end, stop "
                    "it (SIGTERM saves a checkpoint; then --resume auto continues it), or choose "
                    "another train.out_dir (nothing was written)",
                    out, holder[0] ? holder : "it did not say who", path);
            }
            close(fd);
            if (create) /* (said once, where the run first writes) */
                st_ticker_sayf(
                    "scaletrain: warning: cannot lock %s (%s: its file system has no locks), so a second "
                    "run started in train.out_dir %s would not be refused; start one run at a time there\n",
                    path, strerror(e), out);
            return ST_OK;
        }
        *lock_fd = fd;
    }
    if (!create) return ST_OK;
    char host[256] = "?", me[512], when[64] = "";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const int len =
        snprintf(me, sizeof me, "a run on host %s, pid %ld, since %s\n", host, (long)getpid(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len) {
    } /* (who holds it is for the message above; the lock is the flock) */
    return ST_OK;
}

bool st_ckpt_out_dir_in_use(const char *out, char *who, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/run.lock", out);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    /* A shared lock, held for a moment: refused while a run holds its
     * exclusive one. */
    const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (held && cap) read_holder(fd, who, cap);
    close(fd); /* (and with it a lock of ours) */
    return held;
}
