/* Checkpoint directories written: save (temporary name, fsync, rename,
 * `latest` last, prune), on this thread or a writer's, and the names of
 * the step directories. The format is in docs/formats.md; optimizer files
 * are in ckpt_optim.c, the way back (verify, find, load) in ckpt_read.c,
 * out_dir's folders around them in ckpt_folder.c. Not here: deciding when
 * to save (train.c). */
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
#include "ckpt_shared.h"
#include "core/atomic_file.h"
#include "core/crc.h"
#include "core/mem.h"
#include "core/text.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "dist/agree.h"
#include "dist/zero.h"
#include "scaletrain/train.h"

/* The files of one checkpoint, with their checksums (state.json "files"). */
typedef struct ckpt_file {
    char name[64];
    uint32_t crc;
    int64_t nbytes;
} ckpt_file;

/* The bytes of the regular files under path (0 when it is not there); with
 * `remove`, everything under it and path itself are removed as they are
 * counted. */
int64_t st_ckpt_tree_bytes(const char *path, bool remove) {
    DIR *d = opendir(path);
    if (!d) return 0;
    int64_t n = 0;
    struct dirent *e;
    char f[ST_CKPT_PATH_CAP];
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        const bool known = lstat(f, &sb) == 0;
        if (known && S_ISDIR(sb.st_mode)) {
            n += st_ckpt_tree_bytes(f, remove);
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
void st_ckpt_remove_dir(const char *path) { st_ckpt_tree_bytes(path, true); }

/* state.json: the position in the run, the optimizer layout, the files with
 * their checksums, the effective config. */
static st_status write_state(const char *dir, const st_config *cfg, const st_ckpt_state *st,
                             const ckpt_file *fl, int nf) {
    char path[ST_CKPT_PATH_CAP];
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
int64_t st_ckpt_step_of(const char *name) {
    const char *rest;
    const int64_t v = step_prefix(name, &rest);
    return v < 0 || *rest ? -1 : v;
}

/* The step of a temporary directory's name, "step-<N>.tmp" or
 * "step-<N>.tmp.<pid>", or -1. */
int64_t st_ckpt_tmp_step_of(const char *name) {
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
    char path[ST_CKPT_PATH_CAP];
    while ((e = readdir(d)) != NULL) {
        const int64_t t = st_ckpt_tmp_step_of(e->d_name);
        if (t < 0 || t > step) continue;
        snprintf(path, sizeof path, "%s/%s", ckdir, e->d_name);
        st_ckpt_remove_dir(path);
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
        int64_t st = st_ckpt_step_of(e->d_name);
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
    char final[ST_CKPT_PATH_CAP], path[ST_CKPT_PATH_CAP];
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
        if (!swapped) st_ckpt_remove_dir(final);
    }
    if (!swapped && rename(tmp, final) != 0)
        return st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    *committed = true; /* whole from here: ckpt_read.c find_latest takes a folder newer than `latest` */
    ST_TRY(st_fsync_dir(ckdir));
    if (swapped) st_ckpt_remove_dir(tmp); /* (the old one) */
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
            st_ckpt_remove_dir(path);
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
    char ckdir[ST_CKPT_PATH_CAP], tmp[ST_CKPT_PATH_CAP];
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
            st_ckpt_remove_dir(j->tmp);
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
    char who[64], what[ST_CKPT_PATH_CAP + 128], after[ST_CKPT_PATH_CAP + 128];
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
    char path[ST_CKPT_PATH_CAP];
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
    if (s != ST_OK && !committed && j->rank == 0) st_ckpt_remove_dir(j->tmp);
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
