/* Checkpoint directories: save (temporary name, fsync, rename, `latest`
 * last, prune), verify (CRC32 and size of each file from state.json) and
 * load. The format is in docs/formats.md; optimizer files are in
 * ckpt_optim.c. Not here: deciding when to save (train.c). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "ckpt_optim.h"
#include "core/atomic_file.h"
#include "core/crc.h"
#include "core/mem.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "dist/agree.h"
#include "dist/zero.h"
#include "scaletrain/train.h"

#define PATH_CAP 4096
#define STATE_MAX_NBYTES (16 << 20)

/* The files of one checkpoint, with their checksums (state.json "files"). */
typedef struct ckpt_file {
    char name[64];
    uint32_t crc;
    int64_t nbytes;
} ckpt_file;

/* The bytes of the regular files under path (0 when it is not there); with
 * `remove`, everything under it and path itself are removed as they are
 * counted. */
static int64_t walk_tree(const char *path, bool remove) {
    DIR *d = opendir(path);
    if (!d) return 0;
    int64_t n = 0;
    struct dirent *e;
    char f[PATH_CAP];
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        const bool known = lstat(f, &sb) == 0;
        if (known && S_ISDIR(sb.st_mode)) {
            n += walk_tree(f, remove);
            continue;
        }
        if (known && S_ISREG(sb.st_mode)) n += (int64_t)sb.st_size;
        if (remove) unlink(f);
    }
    closedir(d);
    if (remove) rmdir(path);
    return n;
}

/* Remove a directory and what it holds: a checkpoint (plain files), or a
 * checkpoint folder (checkpoints, temporary ones, `latest`). */
static void remove_dir(const char *path) { walk_tree(path, true); }

void st_ckpt_aside_note(const char *out_dir, char *note, size_t cap) {
    static const char *const FOLDERS[] = {"ckpt.abandoned", "ckpt.previous"};
    static const char *const WHAT[] = {"trajectories resumes left", "the run before this one"};
    size_t at = 0;
    if (cap) note[0] = '\0';
    for (int i = 0; i < 2; i++) {
        char dir[PATH_CAP];
        snprintf(dir, sizeof dir, "%s/%s", out_dir, FOLDERS[i]);
        const int64_t b = walk_tree(dir, false);
        if (b > 0)
            st_appendf(note, cap, &at, "%s%s/%s holds %.1f MiB, the checkpoints of %s", at ? "; " : "",
                       out_dir, FOLDERS[i], (double)b / (1 << 20), WHAT[i]);
    }
    if (at) st_appendf(note, cap, &at, ": nothing prunes them; remove them once you no longer need them");
}

/* state.json: the position in the run, the optimizer layout, the files with
 * their checksums, the effective config. */
static st_status write_state(const char *dir, const st_config *cfg, const st_ckpt_state *st,
                             const ckpt_file *fl, int nf) {
    char path[PATH_CAP];
    st_status s = ST_ERR_NOMEM;
    cJSON *root = cJSON_CreateObject(), *files = NULL, *cfgj = NULL;
    char *cfg_text = st_config_to_json(cfg), *text = NULL;
    if (!root || !cfg_text) goto fail;
    cJSON_AddNumberToObject(root, "format_version", ST_CKPT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)st->step);
    cJSON_AddNumberToObject(root, "epoch", (double)st->pos.epoch);
    cJSON *smp = cJSON_AddObjectToObject(root, "sampler");
    if (!smp) goto fail;
    cJSON_AddNumberToObject(smp, "epoch", (double)st->pos.epoch);
    cJSON_AddNumberToObject(smp, "step", (double)st->pos.step);
    cJSON_AddNumberToObject(smp, "micro", (double)st->pos.micro);
    if (st->samples > 0) cJSON_AddNumberToObject(smp, "samples", (double)st->samples);
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", (unsigned)st->data_crc);
    if (st->data_crc) cJSON_AddStringToObject(smp, "data_crc32", crc);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)st->seed);
    cJSON_AddStringToObject(root, "seed", seed);
    if (st->eval_owed) cJSON_AddTrueToObject(root, "eval_owed");
    if (st->loss_scale > 0) { /* fp16 runs */
        cJSON *ls = cJSON_AddObjectToObject(root, "loss_scale");
        if (!ls) goto fail;
        cJSON_AddNumberToObject(ls, "scale", st->loss_scale);
        cJSON_AddNumberToObject(ls, "good_steps", (double)st->scale_good_steps);
        cJSON_AddNumberToObject(ls, "skipped_steps", (double)st->skipped_steps);
    }
    cJSON *opt = cJSON_AddObjectToObject(root, "optim");
    if (!opt) goto fail;
    cJSON_AddStringToObject(opt, "layout", st->optim_sharded ? "shards" : "tensors");
    cJSON_AddNumberToObject(opt, "world", st->optim_world);
    cJSON_AddNumberToObject(opt, "shard", (double)st->optim_shard);
    cJSON_AddNumberToObject(opt, "count", (double)st->optim_count);
    if (st->lr > 0) cJSON_AddNumberToObject(opt, "lr", st->lr); /* (the rate, optim.lr_scaling applied) */
    files = cJSON_AddObjectToObject(root, "files");
    if (!files) goto fail;
    for (int i = 0; i < nf; i++) {
        cJSON *f = cJSON_AddObjectToObject(files, fl[i].name);
        if (!f) goto fail;
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", fl[i].crc);
        cJSON_AddStringToObject(f, "crc32", hex);
        cJSON_AddNumberToObject(f, "nbytes", (double)fl[i].nbytes);
    }
    cfgj = cJSON_Parse(cfg_text);
    if (!cfgj || !cJSON_AddItemToObject(root, "config", cfgj)) {
        cJSON_Delete(cfgj);
        goto fail;
    }
    text = cJSON_Print(root);
    if (!text) goto fail;
    snprintf(path, sizeof path, "%s/state.json", dir);
    st_atomic_file af;
    if ((s = st_atomic_open(&af, path)) != ST_OK) goto fail;
    fputs(text, af.fp);
    fputc('\n', af.fp);
    s = st_atomic_commit(&af);
fail:
    if (s == ST_ERR_NOMEM) st_fail(s, "out of memory writing %s/state.json", dir);
    free(text);
    free(cfg_text);
    cJSON_Delete(root);
    return s;
}

/* The N of a name that starts "step-<N>", N as finish_save writes it
 * (digits, no sign, space or leading zero: every reader names a checkpoint
 * by its step, so "step-030" would be looked for as step-30), or -1;
 * *rest: what follows N. */
static int64_t step_prefix(const char *name, const char **rest) {
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9' ||
        (name[5] == '0' && name[6] >= '0' && name[6] <= '9'))
        return -1;
    char *end;
    const long long v = strtoll(name + 5, &end, 10);
    *rest = end;
    return end == name + 5 || v < 0 ? -1 : (int64_t)v;
}

/* The step of a directory name "step-<N>" (exactly), or -1. */
static int64_t step_of(const char *name) {
    const char *rest;
    const int64_t v = step_prefix(name, &rest);
    return v < 0 || *rest ? -1 : v;
}

/* The step of a temporary directory's name, "step-<N>.tmp" or
 * "step-<N>.tmp.<pid>", or -1. */
static int64_t tmp_step_of(const char *name) {
    const char *rest;
    const int64_t v = step_prefix(name, &rest);
    if (v < 0 || strncmp(rest, ".tmp", 4) != 0) return -1;
    rest += 4;
    if (rest[0] == '.' && rest[1]) rest += 1 + strspn(rest + 1, "0123456789");
    return *rest ? -1 : v;
}

/* Remove the temporary directories of checkpoints of `step` or before: the
 * remains of writes that died or were ended (a crash, a watch, a killed
 * job), which a later save of the same step by another process would not
 * replace. None is in flight: one checkpoint is written at a time, and a
 * later one has a later step. */
static void sweep_tmp(const char *ckdir, int64_t step) {
    DIR *d = opendir(ckdir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_CAP];
    while ((e = readdir(d)) != NULL) {
        const int64_t t = tmp_step_of(e->d_name);
        if (t < 0 || t > step) continue;
        snprintf(path, sizeof path, "%s/%s", ckdir, e->d_name);
        remove_dir(path);
    }
    closedir(d);
}

/* Remove from `dir` the files `<name>.tmp.<pid>` of the names given (NULL
 * ended): st_atomic_open's temporary files, left by a process killed while
 * it wrote them. */
static void sweep_files(const char *dir, const char *const *names) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_CAP];
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
    char ckdir[PATH_CAP], path[PATH_CAP];
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

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

st_status st_ckpt_list(const char *ckdir, int64_t **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(ckdir);
    if (!d && (errno == ENOENT || errno == ENOTDIR)) return ST_OK;
    if (!d)
        return st_fail(ST_ERR_IO,
                       "cannot list the checkpoint folder %s: %s (check its permissions and its file system, "
                       "then try again)",
                       ckdir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    st_status s = ST_OK;
    for (;;) {
        errno = 0;
        if ((e = readdir(d)) == NULL) { /* the end, or a listing the storage broke off (a short one) */
            if (errno != 0)
                s = st_fail(ST_ERR_IO,
                            "cannot list the checkpoint folder %s: %s (check its permissions and its file "
                            "system, then try again)",
                            ckdir, strerror(errno));
            break;
        }
        int64_t st = step_of(e->d_name);
        if (st < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *g = realloc(*out, (size_t)cap * sizeof *g);
            if (!g) {
                s = st_fail(ST_ERR_NOMEM, "out of memory listing %s", ckdir);
                break;
            }
            *out = g;
        }
        (*out)[(*n)++] = st;
    }
    closedir(d);
    if (s != ST_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
        return s;
    }
    if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_desc);
    return ST_OK;
}

/* Rank 0's part: state.json (with every file's checksum), rename, `latest`,
 * prune. tmp holds the model and the optimizer files already. */
static st_status finish_save(const st_config *cfg, const st_ckpt_state *state, const char *ckdir,
                             const char *tmp, ckpt_file *fl, int nf, bool *committed) {
    char final[PATH_CAP], path[PATH_CAP];
    snprintf(final, sizeof final, "%s/step-%lld", ckdir, (long long)state->step);
    /* The other ranks' shards, as this rank sees the directory: a train.out_dir
     * that is not one directory shared by every node would otherwise give a
     * checkpoint whose shards are elsewhere. */
    for (int k = 2; k < nf; k++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", tmp, fl[k].name);
        if (stat(path, &st) != 0 || (int64_t)st.st_size != fl[k].nbytes)
            return st_fail(ST_ERR_IO,
                           "%s: rank %d wrote it (%lld bytes), but rank 0 %s: train.out_dir (%s) must be one "
                           "directory that every node sees (a shared filesystem)",
                           path, k - 1, (long long)fl[k].nbytes,
                           stat(path, &st) != 0 ? "does not see it" : "sees another size",
                           cfg->train.out_dir);
    }
    ST_TRY(write_state(tmp, cfg, state, fl, nf));
    ST_TRY(st_fsync_dir(tmp));
    /* A checkpoint of the same step (a resumed run saving again) is replaced:
     * exchanged with the new one in one rename, so that a crash leaves one
     * of the two whole under its name (the old then in tmp, which the next
     * save sweeps); where the file system has no exchange (NFS), removed
     * first. */
    struct stat sb;
    bool swapped = false;
    if (lstat(final, &sb) == 0) {
        swapped = renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0;
        if (!swapped) remove_dir(final);
    }
    if (!swapped && rename(tmp, final) != 0)
        return st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    *committed = true; /* whole from here: find_latest takes a folder newer than `latest` */
    ST_TRY(st_fsync_dir(ckdir));
    if (swapped) remove_dir(tmp); /* (the old one) */
    snprintf(path, sizeof path, "%s/latest", ckdir);
    st_atomic_file af;
    ST_TRY(st_atomic_open(&af, path));
    fprintf(af.fp, "step-%lld\n", (long long)state->step);
    ST_TRY(st_atomic_commit(&af));
    sweep_tmp(ckdir, state->step);
    if (cfg->train.keep_checkpoints > 0) {
        int64_t *steps;
        int n;
        if (st_ckpt_list(ckdir, &steps, &n) != ST_OK) { /* (saved: the older ones go at the next save) */
            st_clear_error();
            return ST_OK;
        }
        for (int i = (int)cfg->train.keep_checkpoints; i < n; i++) {
            if (steps[i] == state->step) continue;
            snprintf(path, sizeof path, "%s/step-%lld", ckdir, (long long)steps[i]);
            remove_dir(path);
        }
        free(steps);
    }
    return ST_OK;
}

double st_ckpt_wait_limit_bytes(const st_config *cfg, double bytes) {
    if (cfg->train.checkpoint_timeout_s > 0) return (double)cfg->train.checkpoint_timeout_s;
    return (double)cfg->dist.timeout_s + bytes / 10e6;
}

double st_ckpt_wait_limit(const st_config *cfg, const st_model *m, const st_optim *o, int optim_world) {
    return st_ckpt_wait_limit_bytes(cfg, 4.0 * (double)m->params.count +
                                             (o ? (double)st_optim_state_nbytes(o) * optim_world : 0));
}

/* One checkpoint being saved, in three phases: prepare (the temporary
 * directory; collective when sharded), write (this rank's files and their
 * checksums; no collective, so it can run on a thread of its own), commit
 * (checksums to rank 0, state.json, rename, `latest`; collective). A
 * synchronous save runs them in a row; an asynchronous one writes from
 * copies of the weights and state while training goes on. */
struct st_ckpt_async {
    const st_config *cfg;
    const st_model *m; /* names, shapes and offsets only (they do not change) */
    st_comm *comm;
    bool dist, sharded;
    int rank, world;
    double limit;
    st_ckpt_state st;
    char ckdir[PATH_CAP], tmp[PATH_CAP];
    ckpt_file *fl; /* fl[0] the model; fl[1 + k] rank k's optimizer file: in fl_mem (NULL in oom_job) */
    /* sharded: every rank's checksum and size, gathered by commit (after fl; NULL in oom_job) */
    int64_t *sums;
    /* What this rank writes: the weights as host arrays (rank 0), its
     * optimizer state (rank 0, or every rank when sharded). */
    const float *data, *buffers;
    float *own_data, *own_buffers;
    const st_optim *o;
    st_optim own_o;
    bool has_own_o;
    /* The writer */
    pthread_t thread;
    bool started;
    atomic_int done;
    st_status status; /* of prepare and write; its message in err */
    char err[2048];
    double t0, write_s; /* t0: when the writer was started (st_ticker_now) */
    st_watch *watch;    /* while this rank waits for its own writes (below) */
    ckpt_file fl_mem[];
};

/* The job of a save whose own allocation failed: it carries the error
 * through the save's agreements, which every rank joins (the others wait
 * in them for this rank, and would wait for the checkpoint's limit). A
 * process has one save at a time (a pending one is committed before the
 * next begins: train.c), so one such job is enough. */
static st_ckpt_async oom_job;

static void job_free(st_ckpt_async *j) {
    if (!j) return;
    st_free_aligned(j->own_data);
    st_free_aligned(j->own_buffers);
    if (j->has_own_o) st_optim_free(&j->own_o);
    if (j != &oom_job) free(j);
}

/* A save's job, never NULL: one whose allocation failed (oom_job) holds the
 * error in status and err, for the save to carry through its agreements. */
static st_ckpt_async *job_new(const st_config *cfg, const st_model *m, const st_optim *o,
                              const st_ckpt_state *state, const st_ckpt_layout *lay) {
    /* (locals: j may be the static oom_job, which the analyzer sees any call change) */
    const bool dist = lay && lay->comm && lay->world > 1, sharded = dist && lay->sharded;
    const int world = sharded ? lay->world : 1;
    const size_t files = (size_t)world + 1;
    /* (one allocation: the job, its files, and the sums commit gathers, so
     * that nothing is allocated between the save's agreements) */
    const size_t sums_at = (sizeof(st_ckpt_async) + files * sizeof(ckpt_file) + 7) & ~(size_t)7,
                 bytes = sums_at + 2 * (size_t)world * sizeof(int64_t);
    st_ckpt_async *j = calloc(1, bytes);
    if (j) {
        j->fl = j->fl_mem;
        j->sums = (int64_t *)(void *)((char *)j + sums_at);
    } else {
        j = &oom_job;
        memset(j, 0, sizeof *j);
        j->status = st_fail(ST_ERR_NOMEM, "out of memory for a checkpoint's bookkeeping (%zu bytes)", bytes);
        snprintf(j->err, sizeof j->err, "%s", st_last_error());
    }
    j->cfg = cfg;
    j->m = m;
    j->dist = dist;
    j->comm = dist ? lay->comm : NULL;
    j->sharded = sharded;
    j->rank = lay ? lay->rank : 0;
    j->world = world;
    j->limit = st_ckpt_wait_limit(cfg, m, o, world);
    j->o = o;
    j->st = *state;
    j->st.optim_sharded = sharded;
    j->st.optim_world = world;
    j->st.optim_shard = sharded ? lay->shard : 0;
    j->st.optim_count = m->params.count;
    snprintf(j->ckdir, sizeof j->ckdir, "%s/ckpt", cfg->train.out_dir);
    /* Sharded: every rank writes into the same temporary directory. */
    if (sharded)
        snprintf(j->tmp, sizeof j->tmp, "%s/step-%lld.tmp", j->ckdir, (long long)state->step);
    else
        snprintf(j->tmp, sizeof j->tmp, "%s/step-%lld.tmp.%ld", j->ckdir, (long long)state->step,
                 (long)getpid());
    atomic_init(&j->done, 0);
    return j;
}

static bool writes(const st_ckpt_async *j) { return j->rank == 0 || j->sharded; }

/* The temporary directory (rank 0), seen by every rank that writes into it;
 * a job that failed already (oom_job) joins the agreements with its error. */
static st_status prepare(st_ckpt_async *j) {
    st_status s = j->status;
    if (s == ST_OK && j->rank == 0) {
        s = st_mkdirs(j->ckdir);
        if (s == ST_OK) {
            remove_dir(j->tmp);
            if (mkdir(j->tmp, 0755) != 0)
                s = st_fail(ST_ERR_IO, "%s: cannot create directory: %s", j->tmp, strerror(errno));
        }
    }
    if (!j->sharded) return s;
    ST_TRY(st_agree_status(j->comm, s, "checkpoint directory"));
    if (j->rank != 0) { /* the directory rank 0 made, as this rank sees it */
        struct stat st;
        if (stat(j->tmp, &st) != 0 || !S_ISDIR(st.st_mode))
            s = st_fail(
                ST_ERR_IO,
                "%s: rank 0 created this directory, but rank %d does not see it: train.out_dir (%s) must be "
                "one directory that every node sees (a shared filesystem)",
                j->tmp, j->rank, j->cfg->train.out_dir);
    }
    return st_agree_status(j->comm, s, "checkpoint directory seen");
}

/* What write() reads: the live arenas where they are host memory (copy
 * false), else host copies. */
static st_status take(st_ckpt_async *j, bool copy) {
    const st_params *p = &j->m->params;
    if (p->masters_sharded) { /* every rank gives its masters; rank 0 keeps the whole */
        ST_TRY(st_zero_copy_arenas(j->m, j->comm, &j->own_data, &j->own_buffers));
        if (j->rank != 0) { /* not held while an asynchronous checkpoint is written */
            st_free_aligned(j->own_data);
            st_free_aligned(j->own_buffers);
            j->own_data = j->own_buffers = NULL;
        }
        j->data = j->own_data;
        j->buffers = j->own_buffers;
    } else if (j->rank == 0) {
        if (p->dev || copy) {
            ST_TRY(st_model_copy_arenas(j->m, &j->own_data, &j->own_buffers));
            j->data = j->own_data;
            j->buffers = j->own_buffers;
        } else {
            j->data = p->data;
            j->buffers = p->buffers;
        }
    }
    if (writes(j) && (j->o->dev || copy)) {
        ST_TRY(st_optim_copy_to_host(j->o, &j->own_o));
        j->has_own_o = true;
        j->o = &j->own_o;
    }
    return ST_OK;
}

/* ---- the write watch ----
 * A write that never returns (storage that stopped answering: a hung
 * network file system) would leave the run waiting without a word: while
 * this rank waits for its own checkpoint writes (a synchronous save, or the
 * join of an asynchronous one's writer), a stall watch (core/watch.h) ends the
 * process once the wait passes the checkpoint's limit (train.
 * checkpoint_timeout_s, auto: dist.timeout_s and 1 s per 10 MB), less any
 * time the process was stopped. The checkpoints before it are whole (this
 * one is still a temporary directory; tests/e2e/checkpoint_stall.sh stalls
 * its fsyncs for good with tests/lib/slowfs.c). */
/* Watch this rank's wait for its writes, begun at t0 (core/watch.h), until
 * watch_end. Unwatched when the watch cannot start: the wait goes on. */
static void watch_begin(st_ckpt_async *j, const char *how, double t0) {
    char who[64], what[PATH_CAP + 128], after[PATH_CAP + 128];
    snprintf(who, sizeof who, "rank %d (pid %d)", j->rank, (int)getpid());
    snprintf(what, sizeof what, "writing the checkpoint of step %lld%s to %s", (long long)j->st.step, how,
             j->tmp);
    snprintf(after, sizeof after,
             "the checkpoints before it in %s are whole and --resume auto continues from the latest",
             j->ckdir);
    if (st_watch_start(j->limit, who, "train.checkpoint_timeout_s", ST_WATCH_STORAGE, after, &j->watch) !=
        ST_OK)
        j->watch = NULL;
    st_watch_begin_at(j->watch, what, t0);
}

static void watch_end(st_ckpt_async *j) {
    st_watch_stop(j->watch);
    j->watch = NULL;
}

/* This rank's files and their checksums: its optimizer state; rank 0 the model. */
static st_status write_files(st_ckpt_async *j) {
    char path[PATH_CAP];
    if (!writes(j)) return ST_OK;
    ckpt_file *mine = &j->fl[1 + (j->sharded ? j->rank : 0)];
    st_ckpt_optim_name(j->sharded ? j->rank : 0, mine->name, sizeof mine->name);
    snprintf(path, sizeof path, "%s/%s", j->tmp, mine->name);
    ST_TRY(j->sharded ? st_ckpt_optim_save_shard(j->o, path)
                      : st_ckpt_optim_save_tensors(j->o, &j->m->params, path));
    ST_TRY(st_crc32_file(path, &mine->crc, &mine->nbytes));
    if (j->rank != 0) return ST_OK;
    snprintf(j->fl[0].name, sizeof j->fl[0].name, "model.safetensors");
    snprintf(path, sizeof path, "%s/%s", j->tmp, j->fl[0].name);
    ST_TRY(st_model_save_host(j->m, j->data, j->buffers, path));
    return st_crc32_file(path, &j->fl[0].crc, &j->fl[0].nbytes);
}

/* Every rank (a distributed run): the outcome s of this rank's part so far,
 * the checksums to rank 0, rank 0's commit, and the outcome to all. */
static st_status commit(st_ckpt_async *j, st_status s, char *saved, size_t size) {
    if (j->sharded) {
        s = st_agree_status(j->comm, s, "checkpoint optimizer shards");
        if (s == ST_OK) { /* every rank's checksum to rank 0 (and the others) */
            const ckpt_file *mine = &j->fl[1 + j->rank];
            int64_t v[2] = {mine->crc, mine->nbytes}, *all = j->sums;
            st_comm_req *req = NULL;
            s = st_comm_all_gather(j->comm, v, all, 2, ST_COMM_I64, "checkpoint checksums", &req);
            if (s == ST_OK) s = st_comm_wait(&req);
            for (int k = 0; s == ST_OK && k < j->world; k++) {
                st_ckpt_optim_name(k, j->fl[1 + k].name, sizeof j->fl[1 + k].name);
                j->fl[1 + k].crc = (uint32_t)all[2 * k];
                j->fl[1 + k].nbytes = all[2 * k + 1];
            }
        }
    }
    bool committed = false;
    if (s == ST_OK && j->rank == 0)
        s = finish_save(j->cfg, &j->st, j->ckdir, j->tmp, j->fl, j->world + 1, &committed);
    if (s != ST_OK && !committed && j->rank == 0) remove_dir(j->tmp);
    /* The others learn whether the checkpoint exists (its folder was renamed:
     * a failure after that, of `latest`, leaves it whole) and the outcome; an
     * agreement that fails (a peer gone) leaves rank 0 its own commit. */
    if (j->dist) {
        int64_t v[3] = {s, committed,
                        s != ST_OK ? st_comm_rank(j->comm) + 1 : 0}; /* (the last failing rank) */
        const st_status g = st_comm_all_reduce_sync(j->comm, v, v, 3, ST_COMM_I64, ST_COMM_MAX, "checkpoint");
        if (g != ST_OK) {
            s = g;
        } else {
            committed = v[1] != 0;
            if (s == ST_OK && v[0] != ST_OK)
                s = st_fail(ST_ERR_IO,
                            "checkpoint failed on another rank, rank %lld (its error is in its output)",
                            (long long)v[2] - 1);
        }
    }
    if (saved && committed) snprintf(saved, size, "%s/step-%lld", j->ckdir, (long long)j->st.step);
    return s;
}

/* Every rank of a distributed run takes part: the others wait (in the
 * agreements) while rank 0, or every shard's rank, writes, under the
 * checkpoint's limit rather than dist.timeout_s, and all learn the outcome. */
st_status st_ckpt_save(const st_config *cfg, const st_model *m, const st_optim *o, const st_ckpt_state *state,
                       const st_ckpt_layout *lay, char *saved, size_t size) {
    st_ckpt_async *j = job_new(cfg, m, o, state, lay);
    st_comm_set_timeout(j->comm, j->limit, "train.checkpoint_timeout_s");
    st_status s = prepare(j); /* (a job out of memory: its error, agreed by every rank) */
    if (s == ST_OK) s = take(j, false);
    if (s == ST_OK) {
        watch_begin(j, "", st_ticker_now());
        s = write_files(j);
        watch_end(j);
    }
    s = commit(j, s, saved, size); /* (tells the others of a failure only this rank saw) */
    st_comm_set_timeout(j->comm, 0, NULL);
    job_free(j);
    return s;
}

static double st_ckpt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *writer(void *arg) {
    st_ckpt_async *j = arg;
    /* one thread for its OpenMP regions (the checksums, core/crc.h): the
     * step loop's threads are training meanwhile */
    omp_set_num_threads(1);
    const double t0 = st_ckpt_now();
    j->status = write_files(j);
    if (j->status != ST_OK) snprintf(j->err, sizeof j->err, "%s", st_last_error());
    j->write_s = st_ckpt_now() - t0;
    atomic_store(&j->done, 1);
    return NULL;
}

st_status st_ckpt_save_async(st_ckpt_async **out, const st_config *cfg, const st_model *m, const st_optim *o,
                             const st_ckpt_state *state, const st_ckpt_layout *lay) {
    st_ckpt_async *j = job_new(cfg, m, o, state, lay);
    st_comm_set_timeout(j->comm, j->limit, "train.checkpoint_timeout_s");
    st_status s = prepare(j); /* (a job out of memory: its error, agreed, and committed as a failure) */
    if (s == ST_OK) s = take(j, true); /* (ZeRO's sharded masters: a gather, under the same limit) */
    st_comm_set_timeout(j->comm, 0, NULL);
    if (s == ST_OK) {
        j->t0 = st_ticker_now(); /* (the writer's start, for the write watch) */
        int e = pthread_create(&j->thread, NULL, writer, j);
        j->started = e == 0;
        if (e != 0) writer(j); /* no thread: written now */
    } else { /* the commit reports it on every rank */
        j->status = s;
        snprintf(j->err, sizeof j->err, "%s", st_last_error());
        atomic_store(&j->done, 1);
    }
    *out = j;
    return ST_OK;
}

bool st_ckpt_async_busy(const st_ckpt_async *j) { return j && !atomic_load(&j->done); }

int64_t st_ckpt_async_step(const st_ckpt_async *j) { return j ? j->st.step : -1; }

static void join(st_ckpt_async *j) {
    if (j->started) {
        watch_begin(j, " (on its own thread)", j->t0);
        pthread_join(j->thread, NULL);
        watch_end(j);
    }
    j->started = false;
}

st_status st_ckpt_async_finish(st_ckpt_async **jp, char *saved, size_t size, double *write_s) {
    st_ckpt_async *j = *jp;
    if (!j) return ST_OK;
    *jp = NULL;
    join(j);
    if (write_s) *write_s = j->write_s;
    st_status s = j->status;
    if (s != ST_OK) st_fail(s, "%s", j->err); /* the writer's message, on this thread */
    st_comm_set_timeout(j->comm, j->limit, "train.checkpoint_timeout_s");
    s = commit(j, s, saved, size);
    st_comm_set_timeout(j->comm, 0, NULL);
    job_free(j);
    return s;
}

void st_ckpt_async_abandon(st_ckpt_async **jp) {
    st_ckpt_async *j = *jp;
    if (!j) return;
    *jp = NULL;
    join(j); /* its temporary directory stays, as after a crash, and is replaced by the next save */
    job_free(j);
}

/* A checkpoint file that cannot be opened: missing (ENOENT: the checkpoint
 * is not whole, ST_ERR_FORMAT) or not read by the storage (anything else:
 * ST_ERR_IO, which passes over no checkpoint: find_latest). */
static st_status open_failed(const char *path, int e) {
    if (e == ENOENT || e == ENOTDIR)
        return st_fail(ST_ERR_FORMAT, "%s is missing (damaged checkpoint)", path);
    return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(e));
}

static st_status read_text(const char *path, char **out) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return open_failed(path, errno);
    char *buf = malloc(STATE_MAX_NBYTES + 1);
    if (!buf) {
        fclose(fp);
        return st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, STATE_MAX_NBYTES + 1, fp);
    const int e = ferror(fp) ? errno : 0;
    fclose(fp);
    if (e) {
        free(buf);
        return st_fail(ST_ERR_IO, "%s: read error: %s", path, strerror(e));
    }
    if (n > STATE_MAX_NBYTES) {
        free(buf);
        return st_fail(ST_ERR_FORMAT, "%s: larger than %d bytes; not a checkpoint state file", path,
                       STATE_MAX_NBYTES);
    }
    buf[n] = '\0';
    *out = buf;
    return ST_OK;
}

static bool get_int(const cJSON *o, const char *key, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9e15) return false;
    *v = (int64_t)x->valuedouble;
    return (double)*v == x->valuedouble;
}

/* A file a checkpoint's state.json lists: its name, its CRC32 as written
 * there, its size. */
typedef struct want_file {
    char name[64], crc[16];
    int64_t nbytes;
} want_file;

/* One file's size, then its CRC32 and size, against state.json's: the
 * error naming the damage, or ST_OK. */
static st_status size_matches(const char *dir, const want_file *w, int64_t nbytes) {
    if (nbytes != w->nbytes)
        return st_fail(ST_ERR_FORMAT,
                       "%s/%s: %lld bytes, state.json says %lld (truncated or damaged checkpoint)", dir,
                       w->name, (long long)nbytes, (long long)w->nbytes);
    return ST_OK;
}
/* The file w of dir (at path) there and of its size: ST_ERR_FORMAT when
 * missing or another size, ST_ERR_IO when the storage does not say. */
static st_status stat_matches(const char *dir, const want_file *w, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return open_failed(path, errno);
    return size_matches(dir, w, (int64_t)sb.st_size);
}
static st_status file_matches(const char *dir, const want_file *w, uint32_t got, int64_t nbytes) {
    ST_TRY(size_matches(dir, w, nbytes));
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", got);
    if (strcmp(hex, w->crc) != 0)
        return st_fail(ST_ERR_FORMAT, "%s/%s: CRC32 %s, state.json says %s (damaged checkpoint)", dir,
                       w->name, hex, w->crc);
    return ST_OK;
}

/* config[key] for a "section.name" key (NULL: not there). */
static const cJSON *config_item(const cJSON *config, const char *key) {
    char sec[64];
    const char *dot = strchr(key, '.');
    if (!dot || (size_t)(dot - key) >= sizeof sec) return cJSON_GetObjectItemCaseSensitive(config, key);
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - key), key);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(config, sec), dot + 1);
}

st_status st_ckpt_config_changes(const char *dir, const st_config *cfg, const char *const *keys, int n,
                                 char *out, size_t cap) {
    out[0] = '\0';
    char path[PATH_CAP], *text = NULL;
    snprintf(path, sizeof path, "%s/state.json", dir);
    ST_TRY(read_text(path, &text));
    cJSON *saved = cJSON_Parse(text);
    free(text);
    char *mine_text = st_config_to_json(cfg);
    cJSON *mine = mine_text ? cJSON_Parse(mine_text) : NULL;
    free(mine_text);
    st_status s = ST_OK;
    if (!mine) s = st_fail(ST_ERR_NOMEM, "out of host memory comparing the configuration with %s", path);
    const cJSON *was_cfg = cJSON_GetObjectItemCaseSensitive(saved, "config");
    size_t at = 0;
    for (int i = 0; s == ST_OK && i < n; i++) {
        const cJSON *was = config_item(was_cfg, keys[i]), *is = config_item(mine, keys[i]);
        if (!was || !is || cJSON_Compare(was, is, true)) continue; /* (not recorded: not said) */
        char *a = cJSON_PrintUnformatted(was), *b = cJSON_PrintUnformatted(is);
        if (a && b) st_appendf(out, cap, &at, "%s%s %s -> %s", at ? "; " : "", keys[i], a, b);
        free(a);
        free(b);
    }
    cJSON_Delete(saved);
    cJSON_Delete(mine);
    return s;
}

/* state.json of the checkpoint dir into *state, and the files it lists
 * (*want, *n_want: the model and each optimizer file; free *want). */
static st_status parse_state(const char *dir, st_ckpt_state *state, want_file **want, int *n_want) {
    *want = NULL;
    *n_want = 0;
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text;
    ST_TRY(read_text(path, &text));
    cJSON *root = cJSON_Parse(text);
    free(text);
    st_status s = ST_OK;
    if (!root) return st_fail(ST_ERR_FORMAT, "%s: not valid JSON (damaged checkpoint)", path);
    int64_t ver;
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(root, "sampler");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "optim");
    if (!get_int(root, "format_version", &ver)) {
        s = st_fail(ST_ERR_FORMAT, "%s: no format_version (damaged checkpoint)", path);
        goto done;
    }
    if (ver > ST_CKPT_VERSION) { /* (not damage: a resume's search stops at it, as on a storage error) */
        s = st_fail(ST_ERR_UNSUPPORTED,
                    "%s: format_version %lld, written by a newer scaletrain; this build reads version %d: "
                    "use the build that wrote it",
                    path, (long long)ver, ST_CKPT_VERSION);
        goto done;
    }
    if (ver != ST_CKPT_VERSION) {
        s = st_fail(ST_ERR_FORMAT, "%s: format_version %lld; this build reads version %d", path,
                    (long long)ver, ST_CKPT_VERSION);
        goto done;
    }
    if (!get_int(root, "step", &state->step) || !cJSON_IsObject(smp) ||
        !get_int(smp, "epoch", &state->pos.epoch) || !get_int(smp, "step", &state->pos.step) ||
        !get_int(smp, "micro", &state->pos.micro) || !cJSON_IsString(seed) || !cJSON_IsObject(files)) {
        s = st_fail(ST_ERR_FORMAT,
                    "%s: step, sampler, seed or files missing or malformed (damaged checkpoint)", path);
        goto done;
    }
    /* a checkpoint's folder is named by its step (finish_save): another step
     * inside is damage (a resume at it would set the newer ones aside) */
    const char *base = strrchr(dir, '/');
    const int64_t named = step_of(base ? base + 1 : dir);
    if (named >= 0 && named != state->step) {
        s = st_fail(ST_ERR_FORMAT, "%s: step %lld, in the folder of step %lld (damaged checkpoint)", path,
                    (long long)state->step, (long long)named);
        goto done;
    }
    if (!get_int(smp, "samples", &state->samples)) state->samples = -1; /* written before it was recorded */
    const cJSON *dcrc = cJSON_GetObjectItemCaseSensitive(smp, "data_crc32");
    state->data_crc = cJSON_IsString(dcrc) ? (uint32_t)strtoul(dcrc->valuestring, NULL, 16) : 0;
    char *end;
    errno = 0;
    state->seed = strtoull(seed->valuestring, &end, 10);
    if (!seed->valuestring[0] || *end || errno || seed->valuestring[0] == '-') {
        s = st_fail(ST_ERR_FORMAT, "%s: seed \"%.40s\" is not a whole number (damaged checkpoint)", path,
                    seed->valuestring);
        goto done;
    }
    state->eval_owed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "eval_owed"));
    state->loss_scale = 0;
    state->scale_good_steps = state->skipped_steps = 0;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "loss_scale");
    if (ls) {
        const cJSON *sv = cJSON_GetObjectItemCaseSensitive(ls, "scale");
        if (!cJSON_IsNumber(sv) || !(sv->valuedouble > 0) ||
            !get_int(ls, "good_steps", &state->scale_good_steps) ||
            !get_int(ls, "skipped_steps", &state->skipped_steps)) {
            s = st_fail(ST_ERR_FORMAT, "%s: loss_scale malformed (damaged checkpoint)", path);
            goto done;
        }
        state->loss_scale = sv->valuedouble;
    }
    const cJSON *tr =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "train");
    if (!get_int(tr, "batch_size", &state->batch_size)) {
        s = st_fail(ST_ERR_FORMAT, "%s: config.train.batch_size missing or malformed (damaged checkpoint)",
                    path);
        goto done;
    }
    if (!get_int(tr, "steps", &state->run_steps)) state->run_steps = -1;
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(tr, "epochs");
    state->run_epochs = cJSON_IsNumber(ep) && ep->valuedouble > 0 ? ep->valuedouble : 0;
    const cJSON *dc =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "data");
    const cJSON *shuffle = cJSON_GetObjectItemCaseSensitive(dc, "shuffle");
    const cJSON *drop_last = cJSON_GetObjectItemCaseSensitive(dc, "drop_last");
    state->shuffle = cJSON_IsBool(shuffle) ? cJSON_IsTrue(shuffle) : -1;
    state->drop_last = cJSON_IsBool(drop_last) ? cJSON_IsTrue(drop_last) : -1;
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "optim"), "lr");
    state->lr = cJSON_IsNumber(lr) && lr->valuedouble > 0 ? lr->valuedouble : 0;
    /* the rate it trained at (optim.lr_scaling applied); a checkpoint from
     * before it was recorded there has it in its config's optim.lr */
    const cJSON *run_lr = cJSON_GetObjectItemCaseSensitive(opt, "lr");
    if (cJSON_IsNumber(run_lr) && run_lr->valuedouble > 0) state->lr = run_lr->valuedouble;
    /* The optimizer layout; a checkpoint without one (written before ZeRO) has one file by tensor name. */
    state->optim_sharded = false;
    state->optim_world = 1;
    state->optim_shard = state->optim_count = 0;
    if (opt) {
        const cJSON *lay = cJSON_GetObjectItemCaseSensitive(opt, "layout");
        int64_t w;
        if (!cJSON_IsString(lay) || !get_int(opt, "world", &w) || w < 1 || w > 1 << 20 ||
            !get_int(opt, "shard", &state->optim_shard) || !get_int(opt, "count", &state->optim_count)) {
            s = st_fail(ST_ERR_FORMAT, "%s: optim layout missing or malformed (damaged checkpoint)", path);
            goto done;
        }
        state->optim_sharded = strcmp(lay->valuestring, "shards") == 0;
        state->optim_world = state->optim_sharded ? (int)w : 1;
        /* (st_shard_plan's: the count over the ranks, rounded up to ST_SHARD_ALIGN) */
        const int64_t per = (state->optim_count + w - 1) / w;
        if (state->optim_sharded && (state->optim_shard < 1 || state->optim_shard < per)) {
            s = st_fail(ST_ERR_FORMAT,
                        "%s: %lld shards of %lld do not hold %lld parameters (damaged checkpoint)", path,
                        (long long)w, (long long)state->optim_shard, (long long)state->optim_count);
            goto done;
        }
        if (state->optim_sharded && state->optim_shard > per + ST_SHARD_ALIGN) {
            s = st_fail(
                ST_ERR_FORMAT,
                "%s: shards of %lld for %lld parameters over %lld ranks, where a save makes them %lld at "
                "most (damaged checkpoint)",
                path, (long long)state->optim_shard, (long long)state->optim_count, (long long)w,
                (long long)(per + ST_SHARD_ALIGN));
            goto done;
        }
    }
    /* Every file the checkpoint needs: the model and each optimizer file. */
    want_file *w = calloc((size_t)state->optim_world + 1, sizeof *w);
    if (!w) {
        s = st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
        goto done;
    }
    for (int i = -1; i < state->optim_world; i++) {
        want_file *e = &w[i + 1];
        if (i < 0)
            snprintf(e->name, sizeof e->name, "model.safetensors");
        else
            st_ckpt_optim_name(i, e->name, sizeof e->name);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(files, e->name);
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
        if (!cJSON_IsObject(f) || !cJSON_IsString(crc) || !get_int(f, "nbytes", &e->nbytes)) {
            s = st_fail(ST_ERR_FORMAT, "%s/state.json: no checksum for %s (damaged checkpoint)", dir,
                        e->name);
            free(w);
            goto done;
        }
        snprintf(e->crc, sizeof e->crc, "%s", crc->valuestring);
    }
    *want = w;
    *n_want = state->optim_world + 1;
done:
    cJSON_Delete(root);
    return s;
}

/* Each file's CRC32 and size, read here whole, against state.json's. */
static st_status check_files(const char *dir, const want_file *w, int n) {
    char path[PATH_CAP];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, w[i].name);
        ST_TRY(stat_matches(dir, &w[i], path));
        uint32_t got;
        int64_t nbytes;
        ST_TRY(st_crc32_file(path, &got, &nbytes)); /* (a read error: the storage's, ST_ERR_IO) */
        ST_TRY(file_matches(dir, &w[i], got, nbytes));
    }
    return ST_OK;
}

st_status st_ckpt_verify(const char *dir, st_ckpt_state *state) {
    want_file *w;
    int n;
    st_status s = parse_state(dir, state, &w, &n);
    if (s == ST_OK) s = check_files(dir, w, n);
    free(w);
    return s;
}

static bool read_latest(const char *ckdir, char *name, size_t size) {
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *fp = fopen(path, "r");
    if (!fp) return false;
    bool ok = fgets(name, (int)size, fp) != NULL;
    fclose(fp);
    if (!ok) return false;
    name[strcspn(name, "\r\n")] = '\0';
    return step_of(name) >= 0;
}

/* --- verification shared by the ranks of a job (st_ckpt_find_shared) ---- */

/* How each gathered record of a round starts: the status this rank's part
 * ended with (0: ST_OK) and why it failed. */
typedef struct share_head {
    int64_t fail;
    char why[248];
} share_head;

/* h for outcome s (its message, the last error, also into own[cap]) */
static void head_set(share_head *h, st_status s, char *own, size_t cap) {
    h->fail = s;
    own[0] = h->why[0] = '\0';
    if (s == ST_OK) return;
    snprintf(own, cap, "%s", st_last_error());
    snprintf(h->why, sizeof h->why, "%s", own);
}

/* What a rank says of the checkpoint it looks at: how reading its
 * state.json ended, its step (-1: unknown, its state.json unreadable; -2:
 * it has no checkpoint left to look at), its file count. */
typedef struct share_note {
    share_head h;
    int64_t step, nfiles;
} share_note;

static void note_where(const share_note *n, char *out, size_t cap) {
    if (n->step == -2)
        snprintf(out, cap, "no checkpoint left to look at");
    else if (n->step == -1)
        snprintf(out, cap, "one whose state.json it could not read");
    else
        snprintf(out, cap, "step %lld (%lld files)", (long long)n->step, (long long)n->nfiles);
}

/* What ends a resume's search for a checkpoint rather than passing this one
 * over (an older one taken, this one set aside as abandoned): out of
 * memory, the storage failing to read (ST_ERR_IO), a checkpoint of a newer
 * format (ST_ERR_UNSUPPORTED): none says the checkpoint is damaged. */
static bool search_ends(st_status s) {
    return s == ST_ERR_NOMEM || s == ST_ERR_IO || s == ST_ERR_UNSUPPORTED;
}

/* The outcome for every rank of a round whose records (world of them,
 * `stride` bytes apart in all) each start with a share_head: ST_OK when
 * none failed, else this rank's own error (own) when it failed, or "rank
 * K: why" of the first that did. Out of memory or a read the storage
 * failed (ST_ERR_IO) on any rank ends the search on every rank (*fatal):
 * it says nothing of the checkpoint, which must not be passed over for it. */
static st_status share_outcome(int world, st_status mine, const char *own, const void *all, size_t stride,
                               bool *fatal) {
    const share_head *bad = NULL, *stop = NULL;
    int at = -1, stop_at = -1;
    for (int k = 0; k < world; k++) {
        const share_head *h = (const share_head *)((const char *)all + (size_t)k * stride);
        if (h->fail == ST_OK) continue;
        if (!bad) bad = h, at = k;
        if (!stop && search_ends(h->fail)) stop = h, stop_at = k;
    }
    *fatal = stop != NULL;
    if (mine != ST_OK && (stop == NULL || search_ends(mine))) return st_fail(mine, "%s", own);
    if (stop) return st_fail(stop->fail, "rank %d: %s", stop_at, stop->why);
    if (!bad) return ST_OK;
    return st_fail(ST_ERR_FORMAT, "rank %d: %s", at, bad->why);
}

/* One round: this rank's note on the checkpoint it looks at (mine: the
 * outcome of reading its state.json; step -2: none left) gathered from
 * every rank. *fatal, with an error that is the same on every rank, when
 * the ranks do not look at the same checkpoint (or out of memory, as
 * share_outcome). Else ST_OK when every rank's state.json read, or the
 * reason of the first that failed (this rank's own error when it failed). */
static st_status share_round(st_comm *comm, const char *ckdir, st_status mine, int64_t step, int64_t nfiles,
                             bool *fatal) {
    const int world = st_comm_size(comm);
    char own[2048];
    share_note me;
    memset(&me, 0, sizeof me);
    head_set(&me.h, mine, own, sizeof own);
    me.step = step;
    me.nfiles = nfiles;
    share_note *all = calloc((size_t)world, sizeof *all);
    *fatal = true;
    if (!all) return st_fail(ST_ERR_NOMEM, "out of memory verifying a checkpoint");
    st_comm_req *req = NULL;
    st_status s = st_comm_all_gather(comm, &me, all, sizeof me, ST_COMM_U8, "checkpoint verification", &req);
    if (s == ST_OK) s = st_comm_wait(&req);
    if (s != ST_OK) {
        free(all);
        return s;
    }
    /* A rank that could not look (out of memory, its storage failed) is the
     * message, before any difference in what the others saw */
    for (int k = 0; k < world; k++)
        if (search_ends((st_status)all[k].h.fail)) {
            s = share_outcome(world, mine, own, all, sizeof *all, fatal);
            free(all);
            return s;
        }
    int a = -1;
    for (int k = 1; k < world && a < 0; k++) {
        const share_note *x = &all[0], *y = &all[k];
        if ((x->step == -2) != (y->step == -2) || (x->step >= 0 && y->step >= 0 && x->step != y->step) ||
            (!x->h.fail && !y->h.fail && x->step >= 0 && x->nfiles != y->nfiles))
            a = k;
    }
    if (a > 0) {
        char w0[96], wa[96];
        note_where(&all[0], w0, sizeof w0);
        note_where(&all[a], wa, sizeof wa);
        free(all);
        return st_fail(
            ST_ERR_CONFIG,
            "the ranks do not look at the same checkpoint in %s: rank 0 at %s, rank %d at %s; every "
            "rank must see the same %s (one directory shared by all nodes), unchanged while the run "
            "starts",
            ckdir, w0, a, wa, ckdir);
    }
    s = share_outcome(world, mine, own, all, sizeof *all, fatal);
    free(all);
    return s;
}

/* This rank has no candidate (left), for reason s (ST_OK: none there), said
 * in one more round: an error that ends the search on every rank (ranks
 * that still look at one), or s with its message. */
static st_status share_end(st_comm *comm, const char *ckdir, st_status s) {
    bool stop;
    const st_status r = share_round(comm, ckdir, s, -2, -1, &stop);
    return stop || s != ST_OK ? r : ST_OK;
}

/* dir's state.json into *state and every file it lists checked, the ranks
 * together: each reads its 1/world of every file's bytes (its part's
 * CRC32 by core/crc.h) after checking the file's size; the parts are
 * gathered and joined in order (crc32_combine), so that every rank has
 * every file's checksum and the same verdict. *fatal: as share_round. */
static st_status verify_shared(const char *dir, const char *ckdir, st_ckpt_state *state, st_comm *comm,
                               bool *fatal) {
    want_file *w = NULL;
    int n = 0;
    st_status s = parse_state(dir, state, &w, &n);
    s = share_round(comm, ckdir, s, s == ST_OK ? state->step : -1, s == ST_OK ? n : -1, fatal);
    if (*fatal || s != ST_OK) {
        free(w);
        return s;
    }
    const int world = st_comm_size(comm), rank = st_comm_rank(comm);
    /* a rank's record: its share_head, then its part's CRC32 of each file */
    const size_t rec = sizeof(share_head) + (((size_t)n * sizeof(uint32_t) + 7) & ~(size_t)7);
    unsigned char *mine = calloc(1, rec), *all = calloc((size_t)world, rec);
    *fatal = true;
    if (!mine || !all) {
        free(w);
        free(mine);
        free(all);
        return st_fail(ST_ERR_NOMEM, "out of memory verifying %s", dir);
    }
    uint32_t *crc = (uint32_t *)(mine + sizeof(share_head));
    char path[PATH_CAP];
    for (int i = 0; i < n && s == ST_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, w[i].name);
        if ((s = stat_matches(dir, &w[i], path)) != ST_OK) break;
        int64_t lo, hi, got;
        st_crc32_piece(w[i].nbytes, world, rank, &lo, &hi);
        s = st_crc32_file_part(path, lo, hi, &crc[i], &got);
        if (s == ST_OK && got != hi - lo)
            s = st_fail(ST_ERR_IO, "%s: %lld bytes where its size said %lld: the file changed while read",
                        path, (long long)(lo + got), (long long)w[i].nbytes);
    }
    char own[2048];
    head_set((share_head *)mine, s, own, sizeof own);
    st_comm_req *req = NULL;
    st_status g = st_comm_all_gather(comm, mine, all, rec, ST_COMM_U8, "checkpoint checksums", &req);
    if (g == ST_OK) g = st_comm_wait(&req);
    if (g != ST_OK) {
        s = g;
    } else {
        s = share_outcome(world, s, own, all, rec, fatal);
        for (int i = 0; i < n && s == ST_OK; i++) { /* each file: the ranks' parts in order */
            uLong c = crc32(0L, Z_NULL, 0);
            for (int k = 0; k < world; k++) {
                uint32_t part;
                memcpy(&part, all + (size_t)k * rec + sizeof(share_head) + (size_t)i * sizeof part,
                       sizeof part);
                int64_t lo, hi;
                st_crc32_piece(w[i].nbytes, world, k, &lo, &hi);
                c = crc32_combine(c, part, (z_off_t)(hi - lo));
            }
            s = file_matches(dir, &w[i], (uint32_t)c, w[i].nbytes);
        }
    }
    free(w);
    free(mine);
    free(all);
    return s;
}

/* The latest good checkpoint of the checkpoint folder ckdir (see
 * st_ckpt_find's "auto"), and the state its verification read. None there:
 * not found; checkpoints there and none good (damaged, or storage failing
 * to read them): an error, so that a resume never starts over from step 0
 * and replaces checkpoints that may yet be read or repaired. */
/* One candidate of find_latest: verified, into dir when good; else the
 * first damage kept (first), and said on log. */
/* With comm, the ranks verify it together (verify_shared); an error that
 * ends the search on every rank goes to *fatal. */
static bool good_one(const char *cand, const char *ckdir, st_comm *comm, st_status *fatal, const char *who,
                     FILE *log, st_ckpt_state *st, char *dir, size_t size, char *first, size_t first_cap,
                     const char *damaged) {
    bool stop = false;
    const st_status s = comm ? verify_shared(cand, ckdir, st, comm, &stop) : st_ckpt_verify(cand, st);
    /* out of memory, or the storage failing to read: says nothing of the
     * checkpoint, which is not passed over for it (an older one taken, and
     * this one set aside as abandoned) */
    if (search_ends(s)) stop = true;
    if (stop) {
        *fatal =
            s == ST_ERR_IO ? st_fail_context(s,
                                             "%s: %s could not be read (the storage, not the checkpoint: "
                                             "it was not passed over, and nothing was moved or written; "
                                             "try again once the storage reads): ",
                                             who, cand)
            : s == ST_ERR_UNSUPPORTED
                ? st_fail_context(s, "%s: %s is not passed over (nothing was moved or written): ", who, cand)
                : s;
        return false;
    }
    if (s == ST_OK) {
        snprintf(dir, size, "%s", cand);
        return true;
    }
    if (!first[0]) snprintf(first, first_cap, "%s", st_last_error());
    if (log) fprintf(log, "%s: %s: %s\n", who, damaged, st_last_error());
    return false;
}

/* With comm (the ranks of a job together, st_ckpt_find_shared), each
 * candidate is verified by every rank together and taken or passed over by
 * all; a rank out of candidates says so in one more round (step -2), so
 * that a rank that sees more than the others ends with them, in an error,
 * rather than waiting for them. */
static st_status find_latest(const char *ckdir, const char *who, FILE *log, char *dir, size_t size,
                             bool *found, st_ckpt_state *st, st_comm *comm) {
    *found = false;
    char name[256] = "", cand[PATH_CAP], first[512] = "";
    const int64_t latest = read_latest(ckdir, name, sizeof name) ? step_of(name) : -1;
    snprintf(cand, sizeof cand, "%s/%s", ckdir, name);
    if (latest < 0 && strncmp(name, "step-", 5) == 0 && st_path_is_dir(cand)) { /* (renamed by hand) */
        /* (a step written with leading zeros: its name as it should be) */
        const char *digits = name + 5 + strspn(name + 5, "0");
        char as[48] = "step-N (N its step)";
        if (name[5] && strspn(name + 5, "0123456789") == strlen(name + 5) && strlen(digits) < 20)
            snprintf(as, sizeof as, "step-%s", *digits ? digits : "0");
        const st_status s =
            st_fail(ST_ERR_CONFIG,
                    "%s/latest names %s, which is not a checkpoint's name (step-N, N as scaletrain writes "
                    "it: no sign or leading zero): rename that folder %s and write that name into "
                    "%s/latest (nothing was written)",
                    ckdir, name, as, ckdir);
        return comm ? share_end(comm, ckdir, s) : s;
    }
    int64_t *steps;
    int n;
    st_status fatal = ST_OK;
    const st_status ls = st_ckpt_list(ckdir, &steps, &n); /* newest first */
    if (ls != ST_OK) return comm ? share_end(comm, ckdir, ls) : ls; /* (the others learn it has none) */
    int i = 0;
    /* A whole checkpoint newer than `latest`: its save was committed (the
     * folder's rename is the commit) and the process ended before `latest`
     * was updated (SIGKILL, the OOM killer, a second Ctrl-C during the
     * folder's fsync). It is the run's last. */
    for (; latest >= 0 && i < n && steps[i] > latest && !*found && fatal == ST_OK; i++) {
        snprintf(cand, sizeof cand, "%s/step-%lld", ckdir, (long long)steps[i]);
        *found = good_one(cand, ckdir, comm, &fatal, who, log, st, dir, size, first, sizeof first,
                          "skipping damaged checkpoint");
        if (*found && log)
            fprintf(log,
                    "%s: %s is newer than %s/latest (%s) and whole: its save ended before `latest` was "
                    "updated; taking it\n",
                    who, cand, ckdir, name);
    }
    if (latest >= 0 && !*found && fatal == ST_OK) {
        snprintf(cand, sizeof cand, "%s/%s", ckdir, name);
        char what[320] = "the latest checkpoint is damaged"; /* (or not there at all: `latest` stale) */
        if (!st_path_is_dir(cand)) snprintf(what, sizeof what, "latest names %s, which is not there", name);
        *found = good_one(cand, ckdir, comm, &fatal, who, log, st, dir, size, first, sizeof first, what);
    } else if (latest < 0 && log) {
        DIR *d = opendir(ckdir);
        if (d) {
            closedir(d);
            fprintf(log, "%s: %s/latest is missing or unreadable; looking for an older checkpoint\n", who,
                    ckdir);
        }
    }
    for (; i < n && !*found && fatal == ST_OK; i++) { /* the older ones, past damage */
        if (latest >= 0 && steps[i] >= latest) continue;
        snprintf(cand, sizeof cand, "%s/step-%lld", ckdir, (long long)steps[i]);
        *found = good_one(cand, ckdir, comm, &fatal, who, log, st, dir, size, first, sizeof first,
                          "skipping damaged checkpoint");
        if (*found && log && (latest >= 0 || i > 0)) fprintf(log, "%s: falling back to %s\n", who, cand);
    }
    free(steps);
    if (fatal != ST_OK) return fatal; /* (its message is the last error) */
    if (comm && !*found) ST_TRY(share_end(comm, ckdir, ST_OK)); /* (the others must have none left either) */
    st_clear_error();
    if (!*found && n > 0) { /* the remedies: a resume's, or --init's (train, eval, sample) */
        const bool resume = strcmp(who, "resume") == 0;
        return st_fail(ST_ERR_FORMAT,
                       "%s: no good checkpoint among the %d in %s (the first: %s); nothing was written. "
                       "Repair the storage or the files%s%s%s",
                       who, n, ckdir, first,
                       resume ? " and resume again, or move "
                              : ", or give --init another checkpoint or weights file",
                       resume ? ckdir : "", resume ? " aside to start over" : "");
    }
    return ST_OK;
}

void st_ckpt_uncommitted_note(const char *dir, const char *who, FILE *log) {
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (!log || tmp_step_of(base) < 0) return;
    /* (after what was said of it on standard output; only then: a flush midway ended the output early for a
     * reader that stops at its first line, `| grep -q`, and the command by SIGPIPE) */
    if (log != stdout) fflush(stdout);
    fprintf(log,
            "%s: warning: %s is a save that was never committed (the run stopped while writing it, before "
            "renaming it to step-%lld); its files' checksums check out, but they may not have reached the "
            "disk for good\n",
            who, dir, (long long)tmp_step_of(base));
}

st_ckpt_kind st_ckpt_classify(const char *path, char *dir, size_t size) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (st_path_is_file(path) && (strcmp(base, "latest") == 0 || strcmp(base, "state.json") == 0)) {
        const int len = base == path ? 0 : (int)(base - path) - (base - path > 1);
        snprintf(dir, size, "%.*s", len ? len : 1, len ? path : ".");
        return strcmp(base, "latest") == 0 ? ST_CKPT_FOLDER : ST_CKPT_ONE;
    }
    if (!st_path_is_dir(path)) return ST_CKPT_NONE;
    char cand[PATH_CAP];
    snprintf(dir, size, "%s", path);
    snprintf(cand, sizeof cand, "%s/state.json", path);
    if (st_path_is_file(cand)) return ST_CKPT_ONE;
    snprintf(cand, sizeof cand, "%s/latest", path);
    int64_t *steps = NULL;
    int n = 0;
    const bool listed = st_ckpt_list(path, &steps, &n) == ST_OK && n > 0;
    free(steps);
    st_clear_error();
    if (st_path_is_file(cand) || listed) return ST_CKPT_FOLDER;
    snprintf(cand, sizeof cand, "%s/ckpt", path);
    if (!st_path_is_dir(cand)) return ST_CKPT_NONE;
    snprintf(dir, size, "%s", cand);
    return ST_CKPT_RUN;
}

/* The latest good checkpoint of folder ckdir into dir, for `who` (named
 * spec): an error when there is none. */
static st_status latest_good(const char *ckdir, const char *who, const char *spec, FILE *log, char *dir,
                             size_t size, st_ckpt_state *st, st_comm *comm) {
    bool found;
    ST_TRY(find_latest(ckdir, who, log, dir, size, &found, st, comm));
    if (!found) return st_fail(ST_ERR_IO, "%s: no checkpoint in %s", spec, ckdir);
    return ST_OK;
}

st_status st_ckpt_find_shared(const char *out_dir, const char *spec, FILE *log, char *dir, size_t size,
                              bool *found, st_ckpt_state *state, st_comm *comm) {
    st_ckpt_state mine;
    st_ckpt_state *st = state ? state : &mine;
    char where[PATH_CAP];
    *found = false;
    if (comm && st_comm_size(comm) < 2) comm = NULL;
    if (strcmp(spec, "auto") == 0) {
        snprintf(where, sizeof where, "%s/ckpt", out_dir);
        return find_latest(where, "resume", log, dir, size, found, st, comm);
    }
    bool stop;
    switch (st_ckpt_classify(spec, where, sizeof where)) {
    case ST_CKPT_ONE:
        snprintf(dir, size, "%s", where);
        ST_TRY(comm ? verify_shared(dir, dir, st, comm, &stop) : st_ckpt_verify(dir, st));
        st_ckpt_uncommitted_note(dir, "resume", log);
        break;
    case ST_CKPT_FOLDER:
    case ST_CKPT_RUN:
        ST_TRY(latest_good(where, "resume", spec, log, dir, size, st, comm));
        break;
    default: {
        if (comm) ST_TRY(share_end(comm, spec, ST_OK)); /* (the others must have no candidate either) */
        struct stat sb;
        const int e = stat(spec, &sb) == 0 ? 0 : errno;
        return st_fail(
            ST_ERR_IO,
            "%s: %s: --resume takes auto (train.out_dir's latest good checkpoint), a "
            "checkpoint (out_dir/ckpt/step-N), a checkpoint folder (out_dir/ckpt, or its `latest`) or "
            "a run's out_dir",
            spec, e == ENOENT ? "does not exist" : e ? strerror(e) : "not a checkpoint");
    }
    }
    *found = true;
    return ST_OK;
}

st_status st_ckpt_find(const char *out_dir, const char *spec, FILE *log, char *dir, size_t size, bool *found,
                       st_ckpt_state *state) {
    return st_ckpt_find_shared(out_dir, spec, log, dir, size, found, state, NULL);
}

/* Whether checkpoint dir was saved after the file whose stat is *fs (a
 * run's final weights): its state.json is newer. */
static bool saved_after(const char *dir, const struct stat *fs) {
    char state[PATH_CAP + 16];
    struct stat cs;
    snprintf(state, sizeof state, "%s/state.json", dir);
    return stat(state, &cs) == 0 &&
           (cs.st_mtim.tv_sec > fs->st_mtim.tv_sec ||
            (cs.st_mtim.tv_sec == fs->st_mtim.tv_sec && cs.st_mtim.tv_nsec > fs->st_mtim.tv_nsec));
}

st_status st_ckpt_weights(const char *spec, FILE *log, char *path, size_t size, int64_t *step) {
    char where[PATH_CAP], dir[PATH_CAP];
    st_ckpt_state st;
    *step = -1;
    switch (st_ckpt_classify(spec, where, sizeof where)) {
    case ST_CKPT_ONE: /* every file's checksum first */
        snprintf(dir, sizeof dir, "%s", where);
        ST_TRY(st_ckpt_verify(dir, &st));
        st_ckpt_uncommitted_note(dir, "--init", log);
        break;
    case ST_CKPT_RUN: { /* a run's final weights, else (a run stopped early) its latest checkpoint */
        /* A checkpoint newer than the final weights is a later run's there
         * (resumed past the end and stopped, or a new run over a finished
         * one, whose final weights are not written yet): it is taken. */
        char final[PATH_CAP];
        snprintf(final, sizeof final, "%s/model.safetensors", spec);
        struct stat fs;
        bool found = false;
        if (stat(final, &fs) == 0 && S_ISREG(fs.st_mode)) {
            /* (a checkpoint the storage did not read is an error here too: the
             * final weights may be older than it) */
            const st_status f = find_latest(where, "--init", NULL, dir, sizeof dir, &found, &st, NULL);
            if (search_ends(f)) return f;
            if (f != ST_OK) found = false;
            st_clear_error();
            /* Final weights whose structure is damaged (cut short, a header
             * overwritten: they are written whole and renamed, so the storage
             * did it), with a good checkpoint beside them: that, said. (They
             * carry no checksum: a flipped bit within a tensor's values is
             * not seen here.) */
            st_safetensors *sf = NULL;
            const st_status fo = st_safetensors_open(final, &sf);
            st_safetensors_close(sf);
            if (fo != ST_OK && found) {
                if (log)
                    fprintf(log,
                            "--init: the final weights are damaged (%s): taking the latest checkpoint, %s\n",
                            st_last_error(), dir);
                st_clear_error();
                break;
            }
            st_clear_error(); /* (st_model_load says what is wrong with them) */
            if (!found || !saved_after(dir, &fs)) {
                snprintf(path, size, "%s", final);
                return ST_OK;
            }
            if (log)
                fprintf(
                    log,
                    "--init: %s is older than the checkpoint %s (a later run there): taking the checkpoint\n",
                    final, dir);
            break;
        }
    } /* fall through */
    case ST_CKPT_FOLDER:
        ST_TRY(latest_good(where, "--init", spec, log, dir, sizeof dir, &st, NULL)); /* verified there */
        break;
    default: {
        char plain[PATH_CAP + 24]; /* a folder that holds weights alone (copied there) */
        struct stat ps;
        snprintf(plain, sizeof plain, "%s/model.safetensors", spec);
        if (st_path_is_dir(spec) && stat(plain, &ps) == 0 && S_ISREG(ps.st_mode)) {
            snprintf(path, size, "%s", plain);
            return ST_OK;
        }
        if (st_path_is_dir(spec))
            return st_fail(ST_ERR_IO,
                           "%s: a directory without weights: --init takes a .safetensors file, a checkpoint "
                           "(out_dir/ckpt/step-N), a checkpoint folder (out_dir/ckpt, or its `latest`) or a "
                           "run's out_dir (its model.safetensors, else its latest checkpoint)",
                           spec);
        snprintf(path, size, "%s", spec); /* a weights file (st_model_load says what is wrong with it) */
        return ST_OK;
    }
    }
    *step = st.step;
    snprintf(path, size, "%s/model.safetensors", dir);
    return ST_OK;
}

bool st_ckpt_peek(const char *ckdir, char *dir, size_t size, st_ckpt_state *state) {
    st_ckpt_state mine;
    int64_t *steps = NULL;
    int n = 0;
    bool found = false;
    /* (the search's order is the list's, newest first: those newer than
     * `latest`, `latest`, then the older ones) */
    if (st_ckpt_list(ckdir, &steps, &n) == ST_OK)
        for (int i = 0; i < n && !found; i++) {
            want_file *w = NULL;
            int nw = 0;
            snprintf(dir, size, "%s/step-%lld", ckdir, (long long)steps[i]);
            found = parse_state(dir, state ? state : &mine, &w, &nw) == ST_OK;
            free(w);
        }
    free(steps);
    st_clear_error();
    return found;
}

void st_ckpt_remove_all(const char *out_dir) {
    char ckdir[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    remove_dir(ckdir);
}

bool st_ckpt_resume_source(const char *out_dir, const char *spec, char *folder, size_t size) {
    if (size) folder[0] = '\0';
    if (strcmp(spec, "auto") == 0) return false;
    char where[PATH_CAP], own[PATH_CAP];
    const st_ckpt_kind k = st_ckpt_classify(spec, where, sizeof where);
    st_clear_error();
    if (k == ST_CKPT_NONE) return false;
    if (k == ST_CKPT_ONE) { /* (its parent: where is the step's folder; "step-6/." and ".." resolved) */
        char up[PATH_CAP + 4], canon[PATH_MAX];
        snprintf(up, sizeof up, "%s/..", where);
        snprintf(where, sizeof where, "%s", realpath(up, canon) ? canon : up); /* (stat follows up as well) */
    }
    snprintf(folder, size, "%s", where);
    snprintf(own, sizeof own, "%s/ckpt", out_dir);
    return !st_path_same(where, own);
}

st_status st_ckpt_new_run_check(const char *out, const char *resume_from, int *aside, int64_t *aside_step) {
    char ckdir[PATH_CAP], dir[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out);
    int64_t *steps = NULL;
    int n = 0;
    bool found = false;
    st_ckpt_state st;
    *aside = 0;
    *aside_step = -1;
    const st_status ls = st_ckpt_list(ckdir, &steps, &n);
    free(steps);
    char latest[PATH_CAP + 8];
    snprintf(latest, sizeof latest, "%s/latest", ckdir);
    const bool any = ls == ST_OK && (n > 0 || st_path_is_file(latest)); /* (latest: it may name a folder
                                                                           renamed by hand) */
    const st_status fs = any ? st_ckpt_find(out, "auto", NULL, dir, sizeof dir, &found, &st) : ST_OK;
    const bool good = any && fs == ST_OK && found;
    /* No folder is none; one that cannot be listed, or checkpoints that
     * cannot be read, may be an unfinished run's; so may a checkpoint that
     * `latest` names by a name no checkpoint has (ST_ERR_CONFIG). */
    const st_status unseen = ls != ST_OK ? ls : search_ends(fs) || fs == ST_ERR_CONFIG ? fs : ST_OK;
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
    char ckdir[PATH_CAP];
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
        char probe[PATH_CAP + 64];
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
        char latest[PATH_CAP + 8];
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
    char ckdir[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    snprintf(moved, size, "%s/ckpt.previous", out_dir);
    remove_dir(moved);
    if (rename(ckdir, moved) != 0)
        return st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", ckdir, moved, strerror(errno));
    return st_fsync_dir(out_dir);
}

st_status st_ckpt_set_aside_after(const char *out_dir, int64_t step, int *moved, char *names, size_t cap) {
    char ckdir[PATH_CAP], dest[PATH_CAP], from[PATH_CAP], to[PATH_CAP + 32];
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
    char path[PATH_CAP];
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

int64_t st_ckpt_peek_step(const char *out_dir, const char *spec) {
    char dir[PATH_CAP];
    if (strcmp(spec, "auto") == 0) {
        snprintf(dir, sizeof dir, "%s/ckpt", out_dir);
    } else {
        const st_ckpt_kind k = st_ckpt_classify(spec, dir, sizeof dir);
        if (k == ST_CKPT_ONE) {
            const char *base = strrchr(dir, '/');
            return step_of(base ? base + 1 : dir);
        }
        if (k != ST_CKPT_FOLDER && k != ST_CKPT_RUN) return -1;
    }
    int64_t *steps = NULL;
    int n = 0;
    const int64_t newest = st_ckpt_list(dir, &steps, &n) == ST_OK && n > 0 ? steps[0] : -1;
    free(steps);
    st_clear_error();
    return newest;
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
    char aside[2 * PATH_CAP + 300], aside_at[2 * PATH_CAP + 310] = ""; /* (what set aside holds) */
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
    char ckdir[PATH_CAP];
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

st_status st_ckpt_load(const char *dir, st_model *m, st_optim *o, st_ckpt_state *state) {
    ST_TRY(st_ckpt_verify(dir, state));
    return st_ckpt_load_verified(dir, state, m, o);
}

st_status st_ckpt_load_verified(const char *dir, const st_ckpt_state *state, st_model *m, st_optim *o) {
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ST_TRY(st_model_load(m, path));
    st_optim_params_written(o);
    if (!o->dev) return st_ckpt_optim_load(dir, state, &m->params, o);
    st_optim host; /* a device's state is read into a host copy, then uploaded */
    ST_TRY(st_optim_copy_to_host(o, &host));
    st_status s = st_ckpt_optim_load(dir, state, &m->params, &host);
    if (s == ST_OK) s = st_optim_copy_from_host(o, &host);
    st_optim_free(&host);
    return s;
}

st_status st_train_latest_checkpoint(const st_config *cfg, char *dir, size_t size, bool *found) {
    return st_ckpt_find(cfg->train.out_dir, "auto", NULL, dir, size, found, NULL);
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
