/* Checkpoint directories: save (temporary name, fsync, rename, `latest`
 * last, prune), verify (CRC32 and size of each file from state.json) and
 * load. The format is in docs/formats.md. Not here: deciding when to save
 * (train.c). */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "scaletrain/train.h"

#define PATH_CAP 4096
#define STATE_MAX_NBYTES (16 << 20)

static const char *const ckpt_files[] = {"model.safetensors", "optim-rank0.safetensors"};
enum { N_FILES = 2 };

/* Remove a checkpoint directory: its plain files, then itself (no recursion:
 * a checkpoint holds no subdirectories). */
static void remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char f[PATH_CAP];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        unlink(f);
    }
    closedir(d);
    rmdir(path);
}

/* CRC32 (zlib) and size of a file. */
static st_status file_crc(const char *path, uint32_t *crc, int64_t *nbytes) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t n = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
        c = crc32(c, buf, (uInt)got);
        n += (int64_t)got;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) return st_fail(ST_ERR_IO, "%s: read error", path);
    *crc = (uint32_t)c;
    *nbytes = n;
    return ST_OK;
}

static const char *optim_kind_name(st_optim_kind k) { return k == ST_OPTIM_ADAMW ? "adamw" : "sgd"; }

static st_status save_optim(const st_optim *o, const st_params *p, const char *path) {
    const int per = o->v ? 2 : 1;
    const int n = p->n_params * per;
    st_safetensors_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    char(*names)[ST_NAME_MAX + 4] = calloc((size_t)(n ? n : 1), sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return st_fail(ST_ERR_NOMEM, "out of memory saving %s", path);
    }
    int j = 0;
    for (int i = 0; i < p->n; i++) {
        const st_tensor *pt = p->t[i];
        if (pt->kind != ST_TENSOR_PARAM) continue;
        for (int k = 0; k < per && j < n; k++, j++) {
            snprintf(names[j], sizeof names[j], "%s.%s", k ? "v" : "m", pt->name);
            t[j].name = names[j];
            t[j].dtype = "F32";
            t[j].ndim = pt->ndim;
            t[j].shape = pt->shape;
            t[j].data = (k ? o->v : o->m) + pt->offset;
        }
    }
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", (long long)o->t);
    const char *meta[] = {"format", "scaletrain-optim", "optimizer", optim_kind_name(o->kind), "t", steps};
    st_status s =
        j == n ? st_safetensors_write(path, t, n, meta, 3)
               : st_fail(ST_ERR_INTERNAL, "%s: %d parameters, expected %d", path, j / per, p->n_params);
    free(t);
    free(names);
    return s;
}

static st_status write_state(const char *dir, const st_config *cfg, const st_ckpt_state *st) {
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
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)st->seed);
    cJSON_AddStringToObject(root, "seed", seed);
    if (st->loss_scale > 0) { /* fp16 runs */
        cJSON *ls = cJSON_AddObjectToObject(root, "loss_scale");
        if (!ls) goto fail;
        cJSON_AddNumberToObject(ls, "scale", st->loss_scale);
        cJSON_AddNumberToObject(ls, "good_steps", (double)st->scale_good_steps);
        cJSON_AddNumberToObject(ls, "skipped_steps", (double)st->skipped_steps);
    }
    files = cJSON_AddObjectToObject(root, "files");
    if (!files) goto fail;
    for (int i = 0; i < N_FILES; i++) {
        uint32_t crc;
        int64_t nbytes;
        snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[i]);
        if ((s = file_crc(path, &crc, &nbytes)) != ST_OK) goto fail;
        cJSON *f = cJSON_AddObjectToObject(files, ckpt_files[i]);
        if (!f) {
            s = ST_ERR_NOMEM;
            goto fail;
        }
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON_AddStringToObject(f, "crc32", hex);
        cJSON_AddNumberToObject(f, "nbytes", (double)nbytes);
    }
    cfgj = cJSON_Parse(cfg_text);
    if (!cfgj || !cJSON_AddItemToObject(root, "config", cfgj)) {
        cJSON_Delete(cfgj);
        s = ST_ERR_NOMEM;
        goto fail;
    }
    text = cJSON_Print(root);
    if (!text) {
        s = ST_ERR_NOMEM;
        goto fail;
    }
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

/* The step of a directory name "step-<N>" (exactly), or -1. */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || !name[5]) return -1;
    char *end;
    long long v = strtoll(name + 5, &end, 10);
    return *end || v < 0 ? -1 : (int64_t)v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The steps of the checkpoints in ckdir, newest first; *n of them (malloc'd). */
static st_status list_steps(const char *ckdir, int64_t **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(ckdir);
    if (!d) return ST_OK;
    int cap = 0;
    struct dirent *e;
    st_status s = ST_OK;
    while ((e = readdir(d)) != NULL) {
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

st_status st_ckpt_save(const st_config *cfg, const st_model *m, const st_optim *o, const st_ckpt_state *state,
                       char *saved, size_t size) {
    char ckdir[PATH_CAP], tmp[PATH_CAP], final[PATH_CAP], path[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", cfg->train.out_dir);
    ST_TRY(st_mkdirs(ckdir));
    snprintf(tmp, sizeof tmp, "%s/step-%lld.tmp.%ld", ckdir, (long long)state->step, (long)getpid());
    snprintf(final, sizeof final, "%s/step-%lld", ckdir, (long long)state->step);
    remove_dir(tmp);
    if (mkdir(tmp, 0755) != 0)
        return st_fail(ST_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    st_status s;
    snprintf(path, sizeof path, "%s/%s", tmp, ckpt_files[0]);
    ST_GOTO(st_model_save(m, path));
    snprintf(path, sizeof path, "%s/%s", tmp, ckpt_files[1]);
    ST_GOTO(save_optim(o, &m->params, path));
    ST_GOTO(write_state(tmp, cfg, state));
    ST_GOTO(st_fsync_dir(tmp));
    /* A checkpoint of the same step (a resumed run saving again) is replaced. */
    remove_dir(final);
    if (rename(tmp, final) != 0) {
        s = st_fail(ST_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        goto fail;
    }
    ST_TRY(st_fsync_dir(ckdir));
    snprintf(path, sizeof path, "%s/latest", ckdir);
    st_atomic_file af;
    ST_TRY(st_atomic_open(&af, path));
    fprintf(af.fp, "step-%lld\n", (long long)state->step);
    ST_TRY(st_atomic_commit(&af));
    if (saved) snprintf(saved, size, "%s", final);
    if (cfg->train.keep_checkpoints > 0) {
        int64_t *steps;
        int n;
        ST_TRY(list_steps(ckdir, &steps, &n));
        for (int i = (int)cfg->train.keep_checkpoints; i < n; i++) {
            if (steps[i] == state->step) continue;
            snprintf(path, sizeof path, "%s/step-%lld", ckdir, (long long)steps[i]);
            remove_dir(path);
        }
        free(steps);
    }
    return ST_OK;
fail:
    remove_dir(tmp);
    return s;
}

static st_status read_text(const char *path, char **out) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(STATE_MAX_NBYTES + 1);
    if (!buf) {
        fclose(fp);
        return st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, STATE_MAX_NBYTES + 1, fp);
    fclose(fp);
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

st_status st_ckpt_verify(const char *dir, st_ckpt_state *state) {
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
    if (!get_int(root, "format_version", &ver)) {
        s = st_fail(ST_ERR_FORMAT, "%s: no format_version (damaged checkpoint)", path);
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
    state->seed = strtoull(seed->valuestring, NULL, 10);
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
    for (int i = 0; i < N_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[i]);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(files, ckpt_files[i]);
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32");
        int64_t want_nbytes, nbytes;
        if (!cJSON_IsObject(f) || !cJSON_IsString(crc) || !get_int(f, "nbytes", &want_nbytes)) {
            s = st_fail(ST_ERR_FORMAT, "%s/state.json: no checksum for %s (damaged checkpoint)", dir,
                        ckpt_files[i]);
            goto done;
        }
        uint32_t got;
        if ((s = file_crc(path, &got, &nbytes)) != ST_OK) goto done;
        if (nbytes != want_nbytes) {
            s = st_fail(ST_ERR_FORMAT,
                        "%s: %lld bytes, state.json says %lld (truncated or damaged checkpoint)", path,
                        (long long)nbytes, (long long)want_nbytes);
            goto done;
        }
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", got);
        if (strcmp(hex, crc->valuestring) != 0) {
            s = st_fail(ST_ERR_FORMAT, "%s: CRC32 %s, state.json says %s (damaged checkpoint)", path, hex,
                        crc->valuestring);
            goto done;
        }
    }
done:
    cJSON_Delete(root);
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

st_status st_ckpt_find(const char *out_dir, const char *spec, FILE *log, char *dir, size_t size,
                       bool *found) {
    st_ckpt_state st;
    *found = false;
    if (strcmp(spec, "auto") != 0) {
        snprintf(dir, size, "%s", spec);
        ST_TRY(st_ckpt_verify(dir, &st));
        *found = true;
        return ST_OK;
    }
    char ckdir[PATH_CAP], name[256], cand[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", out_dir);
    int64_t latest = -1;
    if (read_latest(ckdir, name, sizeof name)) {
        latest = step_of(name);
        snprintf(cand, sizeof cand, "%s/%s", ckdir, name);
        if (st_ckpt_verify(cand, &st) == ST_OK) {
            snprintf(dir, size, "%s", cand);
            *found = true;
            return ST_OK;
        }
        if (log) fprintf(log, "resume: the latest checkpoint is damaged: %s\n", st_last_error());
    } else if (log) {
        DIR *d = opendir(ckdir);
        if (d) {
            closedir(d);
            fprintf(log, "resume: %s/latest is missing or unreadable; looking for an older checkpoint\n",
                    ckdir);
        }
    }
    int64_t *steps;
    int n;
    ST_TRY(list_steps(ckdir, &steps, &n));
    for (int i = 0; i < n && !*found; i++) {
        if (latest >= 0 && steps[i] >= latest) continue;
        snprintf(cand, sizeof cand, "%s/step-%lld", ckdir, (long long)steps[i]);
        if (st_ckpt_verify(cand, &st) == ST_OK) {
            snprintf(dir, size, "%s", cand);
            *found = true;
            if (log && (latest >= 0 || i > 0)) fprintf(log, "resume: falling back to %s\n", cand);
        } else if (log) {
            fprintf(log, "resume: skipping damaged checkpoint: %s\n", st_last_error());
        }
    }
    free(steps);
    st_clear_error();
    return ST_OK;
}

static st_status load_optim(const char *path, const st_params *p, st_optim *o) {
    st_safetensors *f = NULL;
    ST_TRY(st_safetensors_open(path, &f));
    st_status s = ST_OK;
    const char *kind = st_safetensors_metadata(f, "optimizer"), *t = st_safetensors_metadata(f, "t");
    if (!kind || !t) {
        s = st_fail(ST_ERR_FORMAT, "%s: no optimizer or t in the metadata", path);
        goto done;
    }
    if (strcmp(kind, optim_kind_name(o->kind)) != 0) {
        s = st_fail(ST_ERR_CONFIG, "%s: holds %s state but optim.type is %s; resume with the same optim.type",
                    path, kind, optim_kind_name(o->kind));
        goto done;
    }
    char name[ST_NAME_MAX + 4];
    for (int i = 0; i < p->n && s == ST_OK; i++) {
        const st_tensor *pt = p->t[i];
        if (pt->kind != ST_TENSOR_PARAM) continue;
        snprintf(name, sizeof name, "m.%s", pt->name);
        s = st_safetensors_read_f32(f, name, o->m + pt->offset, pt->count);
        if (s == ST_OK && o->v) {
            snprintf(name, sizeof name, "v.%s", pt->name);
            s = st_safetensors_read_f32(f, name, o->v + pt->offset, pt->count);
        }
    }
    if (s != ST_OK)
        st_fail_context(s, "%s: ", path);
    else
        o->t = strtoll(t, NULL, 10);
done:
    st_safetensors_close(f);
    return s;
}

st_status st_ckpt_load(const char *dir, st_model *m, st_optim *o, st_ckpt_state *state) {
    char path[PATH_CAP];
    ST_TRY(st_ckpt_verify(dir, state));
    snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[0]);
    ST_TRY(st_model_load(m, path));
    snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[1]);
    return load_optim(path, &m->params, o);
}

st_status st_train_latest_checkpoint(const st_config *cfg, char *dir, size_t size, bool *found) {
    return st_ckpt_find(cfg->train.out_dir, "auto", NULL, dir, size, found);
}
