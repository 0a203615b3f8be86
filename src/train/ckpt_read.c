/* The way back from a checkpoint: state.json parsed, every file's CRC32
 * and size checked against it (by one rank, or a share of them on each
 * rank of a job), the latest good checkpoint found (damaged ones passed
 * over and said), --init's weights resolved, and the model and optimizer
 * loaded. The writing side is checkpoint.c. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "ckpt_optim.h"
#include "ckpt_shared.h"
#include "core/atomic_file.h"
#include "core/crc.h"
#include "core/safetensors.h"
#include "core/text.h"

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
    char *buf = malloc(ST_CKPT_STATE_MAX_NBYTES + 1);
    if (!buf) {
        fclose(fp);
        return st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, ST_CKPT_STATE_MAX_NBYTES + 1, fp);
    const int e = ferror(fp) ? errno : 0;
    fclose(fp);
    if (e) {
        free(buf);
        return st_fail(ST_ERR_IO, "%s: read error: %s", path, strerror(e));
    }
    if (n > ST_CKPT_STATE_MAX_NBYTES) {
        free(buf);
        return st_fail(ST_ERR_FORMAT, "%s: larger than %d bytes; not a checkpoint state file", path,
                       ST_CKPT_STATE_MAX_NBYTES);
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
    char path[ST_CKPT_PATH_CAP], *text = NULL;
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
    char path[ST_CKPT_PATH_CAP];
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
    const int64_t named = st_ckpt_step_of(base ? base + 1 : dir);
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
    char path[ST_CKPT_PATH_CAP];
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

st_status st_ckpt_verify_weights(const char *dir, st_ckpt_state *state) {
    want_file *w;
    int n;
    st_status s = parse_state(dir, state, &w, &n);
    if (s == ST_OK) s = check_files(dir, w, 1); /* (w[0]: model.safetensors, parse_state's first) */
    free(w);
    return s;
}

static bool read_latest(const char *ckdir, char *name, size_t size) {
    char path[ST_CKPT_PATH_CAP];
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *fp = fopen(path, "r");
    if (!fp) return false;
    bool ok = fgets(name, (int)size, fp) != NULL;
    fclose(fp);
    if (!ok) return false;
    name[strcspn(name, "\r\n")] = '\0';
    return st_ckpt_step_of(name) >= 0;
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
        if (!stop && st_ckpt_search_ends(h->fail)) stop = h, stop_at = k;
    }
    *fatal = stop != NULL;
    if (mine != ST_OK && (stop == NULL || st_ckpt_search_ends(mine))) return st_fail(mine, "%s", own);
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
        if (st_ckpt_search_ends((st_status)all[k].h.fail)) {
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
    char path[ST_CKPT_PATH_CAP];
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
    if (st_ckpt_search_ends(s)) stop = true;
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
    char name[256] = "", cand[ST_CKPT_PATH_CAP], first[512] = "";
    const int64_t latest = read_latest(ckdir, name, sizeof name) ? st_ckpt_step_of(name) : -1;
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
    if (!log || st_ckpt_tmp_step_of(base) < 0) return;
    /* (after what was said of it on standard output; only then: a flush midway ended the output early for a
     * reader that stops at its first line, `| grep -q`, and the command by SIGPIPE) */
    if (log != stdout) fflush(stdout);
    fprintf(log,
            "%s: warning: %s is a save that was never committed (the run stopped while writing it, before "
            "renaming it to step-%lld); its files' checksums check out, but they may not have reached the "
            "disk for good\n",
            who, dir, (long long)st_ckpt_tmp_step_of(base));
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
    char cand[ST_CKPT_PATH_CAP];
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
    char where[ST_CKPT_PATH_CAP];
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
    char state[ST_CKPT_PATH_CAP + 16];
    struct stat cs;
    snprintf(state, sizeof state, "%s/state.json", dir);
    return stat(state, &cs) == 0 &&
           (cs.st_mtim.tv_sec > fs->st_mtim.tv_sec ||
            (cs.st_mtim.tv_sec == fs->st_mtim.tv_sec && cs.st_mtim.tv_nsec > fs->st_mtim.tv_nsec));
}

st_status st_ckpt_weights(const char *spec, FILE *log, char *path, size_t size, int64_t *step) {
    char where[ST_CKPT_PATH_CAP], dir[ST_CKPT_PATH_CAP];
    st_ckpt_state st;
    *step = -1;
    switch (st_ckpt_classify(spec, where, sizeof where)) {
    case ST_CKPT_ONE: /* the weights' checksum first (the optimizer's files are not read) */
        snprintf(dir, sizeof dir, "%s", where);
        ST_TRY(st_ckpt_verify_weights(dir, &st));
        st_ckpt_uncommitted_note(dir, "--init", log);
        break;
    case ST_CKPT_RUN: { /* a run's final weights, else (a run stopped early) its latest checkpoint */
        /* A checkpoint newer than the final weights is a later run's there
         * (resumed past the end and stopped, or a new run over a finished
         * one, whose final weights are not written yet): it is taken. */
        char final[ST_CKPT_PATH_CAP];
        snprintf(final, sizeof final, "%s/model.safetensors", spec);
        struct stat fs;
        bool found = false;
        if (stat(final, &fs) == 0 && S_ISREG(fs.st_mode)) {
            /* (a checkpoint the storage did not read is an error here too: the
             * final weights may be older than it) */
            const st_status f = find_latest(where, "--init", NULL, dir, sizeof dir, &found, &st, NULL);
            if (st_ckpt_search_ends(f)) return f;
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
        char plain[ST_CKPT_PATH_CAP + 24]; /* a folder that holds weights alone (copied there) */
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
int64_t st_ckpt_peek_step(const char *out_dir, const char *spec) {
    char dir[ST_CKPT_PATH_CAP];
    if (strcmp(spec, "auto") == 0) {
        snprintf(dir, sizeof dir, "%s/ckpt", out_dir);
    } else {
        const st_ckpt_kind k = st_ckpt_classify(spec, dir, sizeof dir);
        if (k == ST_CKPT_ONE) {
            const char *base = strrchr(dir, '/');
            return st_ckpt_step_of(base ? base + 1 : dir);
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
st_status st_ckpt_load(const char *dir, st_model *m, st_optim *o, st_ckpt_state *state) {
    ST_TRY(st_ckpt_verify(dir, state));
    return st_ckpt_load_verified(dir, state, m, o);
}

st_status st_ckpt_load_verified(const char *dir, const st_ckpt_state *state, st_model *m, st_optim *o) {
    char path[ST_CKPT_PATH_CAP];
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
