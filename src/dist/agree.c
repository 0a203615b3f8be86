/* The ranks' agreement before training (see agree.h): the configuration
 * check and the two pieces the model check in ddp.c shares with it; and the
 * replicas' agreement after training. */
#include "agree.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/rng.h"

bool st_agree_per_rank_key(const char *key) {
    static const char *const keys[] = {
        "data.train",
        "data.train_labels",
        "data.val",
        "data.val_labels",
        "data.num_workers",
        "train.threads",
        "train.device",
        "train.out_dir",
        "log.progress",
        "log.tensorboard",
        "log.peak_gflops",
        /* the preset is compared as the keys it sets; the rest choose a
         * kernel (by each rank's device when auto), not the function */
        "model.preset",
        "model.fused_gelu",
        "model.fused_residual",
        "model.fused_bias_grad",
        "model.attention_kernel",
        "model.kernel_variants",
        "model.matmul_tune",
        "model.fused_head",
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

st_status st_agree_first_difference(st_comm *c, const int64_t *v, int n, const char *name, int *diff) {
    *diff = -1;
    /* In pieces of a buffer on the stack (one piece for up to 256 values):
     * nothing to allocate, so no rank can fail to join the others. */
    enum { PIECE = 256 };
    int64_t lo[PIECE], hi[PIECE];
    char nlo[64], nhi[64];
    snprintf(nlo, sizeof nlo, "%s (min)", name);
    snprintf(nhi, sizeof nhi, "%s (max)", name);
    st_status s = ST_OK;
    for (int at = 0; s == ST_OK && at < n; at += PIECE) {
        const int k = n - at < PIECE ? n - at : PIECE;
        memcpy(lo, v + at, (size_t)k * sizeof *lo);
        memcpy(hi, v + at, (size_t)k * sizeof *hi);
        s = st_comm_all_reduce_sync(c, lo, lo, (size_t)k, ST_COMM_I64, ST_COMM_MIN, nlo);
        if (s == ST_OK) s = st_comm_all_reduce_sync(c, hi, hi, (size_t)k, ST_COMM_I64, ST_COMM_MAX, nhi);
        for (int i = 0; s == ST_OK && i < k && *diff < 0; i++)
            if (lo[i] != hi[i]) *diff = at + i;
    }
    return s;
}

/* The ranks r >= from whose text equals `d`, written as "1-3, 7" into msg
 * (n bytes); marks them listed. Returns how many. */
static int rank_list(const char *all, int world, int from, const char *d, char *listed, char *msg, size_t n) {
    int count = 0;
    size_t k = 0;
    for (int r = from; r < world; r++) {
        if (listed[r] || strcmp(all + (size_t)r * ST_AGREE_DESC_MAX, d) != 0) continue;
        int end = r;
        while (end + 1 < world && !listed[end + 1] &&
               strcmp(all + (size_t)(end + 1) * ST_AGREE_DESC_MAX, d) == 0)
            end++;
        for (int q = r; q <= end; q++)
            listed[q] = 1;
        count += end - r + 1;
        if (k < n)
            k += (size_t)(end == r ? snprintf(msg + k, n - k, "%s%d", k ? ", " : "", r)
                                   : snprintf(msg + k, n - k, "%s%d-%d", k ? ", " : "", r, end));
        r = end;
    }
    return count;
}

/* Every rank's text `mine` (up to ST_AGREE_DESC_MAX bytes with its end), in
 * rank order, one every ST_AGREE_DESC_MAX bytes of *all (the caller frees
 * it; NULL on an error). `ready`: the caller's own outcome so far (its
 * memory), agreed with this one's before the gather, so that a rank that
 * cannot take part does not leave the others waiting in it. */
static st_status gather_texts(st_comm *c, st_status ready, const char *mine, const char *name, char **all) {
    *all = NULL;
    if (ready == ST_OK) {
        *all = calloc((size_t)st_comm_size(c), ST_AGREE_DESC_MAX);
        if (!*all) ready = st_fail(ST_ERR_NOMEM, "out of host memory gathering the ranks' texts (%s)", name);
    }
    st_status s = st_agree_status(c, ready, "the memory to gather the ranks' texts");
    char buf[ST_AGREE_DESC_MAX] = {0};
    snprintf(buf, sizeof buf, "%s", mine);
    st_comm_req *req = NULL;
    if (s == ST_OK) s = st_comm_all_gather(c, buf, *all, ST_AGREE_DESC_MAX, ST_COMM_U8, name, &req);
    if (s == ST_OK) s = st_comm_wait(&req);
    if (s != ST_OK) {
        free(*all);
        *all = NULL;
    }
    return s;
}

st_status st_agree_report(st_comm *c, const char *what, const char *item, const char *mine,
                          const char *hint) {
    enum { MSG = 1024 };
    const int world = st_comm_size(c);
    char *all = NULL;
    char *listed = calloc((size_t)world, 1);
    char *msg = calloc(1, MSG), ranks[256];
    st_status s =
        listed && msg
            ? ST_OK
            : st_fail(ST_ERR_NOMEM, "out of host memory reporting how the ranks differ (%s: %s)", what, item);
    s = gather_texts(c, s, mine, "agreement report", &all);
    if (s != ST_OK) goto done;
    /* rank 0's value, then each other value with the ranks that hold it */
    size_t k = (size_t)snprintf(msg, MSG, "rank 0 has %s", all);
    listed[0] = 1;
    for (int r = 1; r < world && k < MSG - 1; r++) {
        const char *d = all + (size_t)r * ST_AGREE_DESC_MAX;
        if (listed[r]) continue;
        if (strcmp(d, all) == 0) { /* the same as rank 0: not listed */
            listed[r] = 1;
            continue;
        }
        const int n = rank_list(all, world, r, d, listed, ranks, sizeof ranks);
        k += (size_t)snprintf(msg + k, MSG - k, "; rank%s %s ha%s %s", n > 1 ? "s" : "", ranks,
                              n > 1 ? "ve" : "s", d);
    }
    s = st_fail(ST_ERR_CONFIG, "%s: the first difference is in %s: %s (%s)", what, item, msg, hint);
done:
    free(all);
    free(listed);
    free(msg);
    return s;
}

/* Two texts compared as far as a '|' or their end: what follows it is said, not compared. */
static int key_cmp(const char *p, const char *q) {
    for (;; p++, q++) {
        const int x = *p == '|' ? 0 : (unsigned char)*p, y = *q == '|' ? 0 : (unsigned char)*q;
        if (x != y || !x) return x - y;
    }
}

/* Texts in place in one gathered array: by key, then by address (rank). */
static int by_text_then_rank(const void *x, const void *y) {
    const char *p = *(const char *const *)x, *q = *(const char *const *)y;
    const int d = key_cmp(p, q);
    return d ? d : (p > q) - (p < q);
}

st_status st_agree_first_shared(const char *all, int world, size_t stride, int *a, int *b) {
    *a = *b = -1;
    /* sorted by text, then rank (thousands of ranks: no pairwise compare);
     * within a run of one text its first two are its two lowest ranks */
    const char **by = malloc((size_t)(world > 0 ? world : 1) * sizeof *by);
    if (!by) return st_fail(ST_ERR_NOMEM, "out of host memory comparing the ranks' GPUs");
    for (int i = 0; i < world; i++)
        by[i] = all + (size_t)i * stride;
    qsort(by, (size_t)world, sizeof *by, by_text_then_rank);
    for (int i = 0; i + 1 < world; i++) {
        const int r = (int)((size_t)(by[i] - all) / stride), q = (int)((size_t)(by[i + 1] - all) / stride);
        const bool keyed = by[i][0] && by[i][0] != '|'; /* ("" is a rank on the CPU) */
        if (keyed && key_cmp(by[i], by[i + 1]) == 0 && (*a < 0 || r < *a)) *a = r, *b = q;
        while (i + 1 < world && key_cmp(by[i], by[i + 1]) == 0)
            i++; /* to the run's last */
    }
    free(by);
    return ST_OK;
}

st_status st_agree_gpus(st_comm *c, const char *mine, int *a, int *b, char *gpu_a, char *gpu_b, size_t n) {
    *a = *b = -1;
    if (n) gpu_a[0] = gpu_b[0] = '\0';
    char *all = NULL;
    st_status s = gather_texts(c, ST_OK, mine, "the ranks' GPUs", &all);
    if (s == ST_OK) s = st_agree_first_shared(all, st_comm_size(c), ST_AGREE_DESC_MAX, a, b);
    if (s == ST_OK && *a >= 0 && n) {
        snprintf(gpu_a, n, "%s", all + (size_t)*a * ST_AGREE_DESC_MAX);
        snprintf(gpu_b, n, "%s", all + (size_t)*b * ST_AGREE_DESC_MAX);
    }
    free(all);
    return s;
}

/* One key of the configuration: its name and its value as text. */
typedef struct cfg_item {
    char key[64];
    char value[ST_AGREE_DESC_MAX];
} cfg_item;

static void value_text(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) {
        snprintf(buf, n, "%s", v->valuestring);
        return;
    }
    char *t = cJSON_PrintUnformatted(v);
    snprintf(buf, n, "%s", t ? t : "?");
    free(t);
}

/* The keys compared, in schema order (st_config_to_json walks the schema). */
static st_status config_items(const st_config *cfg, cfg_item *items, int *n) {
    *n = 0;
    char *json = st_config_to_json(cfg);
    if (!json) return st_fail(ST_ERR_NOMEM, "out of host memory writing the configuration out to compare it");
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!root) return st_fail(ST_ERR_NOMEM, "out of memory reading the configuration back");
    const cJSON *sec, *v;
    cJSON_ArrayForEach(sec, root) {
        const bool leaf = !cJSON_IsObject(sec);
        const cJSON *first = leaf ? sec : sec->child;
        for (v = first; v && *n < ST_CFG_KEYS_MAX; v = leaf ? NULL : v->next) {
            cfg_item *it = &items[*n];
            if (leaf)
                snprintf(it->key, sizeof it->key, "%s", sec->string);
            else
                snprintf(it->key, sizeof it->key, "%s.%s", sec->string, v->string);
            if (st_agree_per_rank_key(it->key)) continue;
            value_text(v, it->value, sizeof it->value);
            (*n)++;
        }
    }
    cJSON_Delete(root);
    return ST_OK;
}

st_status st_dist_agree_config(st_comm *c, const st_config *cfg) {
    cfg_item *items = calloc(ST_CFG_KEYS_MAX, sizeof *items);
    int n = 0;
    st_status s = items
                      ? config_items(cfg, items, &n)
                      : st_fail(ST_ERR_NOMEM, "out of host memory comparing the configuration across ranks");
    /* (agreed before the comparison: a rank that could not list its
     * settings must not leave the others in it) */
    s = st_agree_status(c, s, "listing the configuration to compare it");
    /* Always ST_CFG_KEYS_MAX hashes (zeros past the last key), so that every
     * rank's all-reduce has the same size whatever its build's schema. */
    int64_t h[ST_CFG_KEYS_MAX] = {0};
    for (int i = 0; i < n; i++) /* >> 2: non-negative, so min and max never overflow */
        h[i] = (int64_t)(st_mix64(st_hash_str(items[i].key) ^ st_mix64(st_hash_str(items[i].value))) >> 2);
    int diff = -1;
    if (s == ST_OK) s = st_agree_first_difference(c, h, ST_CFG_KEYS_MAX, "config agreement", &diff);
    if (s == ST_OK && diff >= 0) {
        const bool mine = diff < n; /* else another rank's build has more keys */
        s = st_agree_report(c, "the ranks were started with different settings",
                            mine ? items[diff].key : "the configuration keys",
                            mine ? items[diff].value : "fewer keys (another build)",
                            "start every rank with the same config file and --set options");
    }
    free(items);
    return s;
}

#undef st_agree_status /* the analyzer's macro (agree.h) */
st_status st_agree_status(st_comm *c, st_status mine, const char *what) {
    int64_t v[2] = {mine, mine != ST_OK ? st_comm_rank(c) + 1 : 0}; /* (and the last failing rank) */
    st_error_kept own; /* (this rank's own failure is its message, whatever the all-reduce met) */
    st_error_keep(&own, mine);
    const st_status r = st_comm_all_reduce_sync(c, v, v, 2, ST_COMM_I64, ST_COMM_MAX, what);
    if (mine != ST_OK) {
        st_error_restore(&own);
        return mine;
    }
    ST_TRY(r);
    if (v[0] != ST_OK)
        return st_fail(ST_ERR_IO, "%s failed on another rank, rank %lld (its error is in its output)", what,
                       (long long)v[1] - 1);
    return ST_OK;
}

static int64_t bits_hash(const float *x, int64_t n) { return st_hash_words(x, n, 4); }

/* Sharded masters (graph.h): each rank holds different masters, and the
 * replicas are the compute copy, which every rank must hold alike. */
static st_status hash_compute(const st_params *p, int64_t *h) {
    if (p->compute) {
        for (int i = 0; i < p->n_params; i++)
            h[i] = bits_hash(p->compute + p->t[i]->offset, p->t[i]->count);
        return ST_OK;
    }
    uint16_t *copy = malloc((size_t)(p->arena_count ? p->arena_count : 1) * sizeof *copy);
    if (!copy) return st_fail(ST_ERR_NOMEM, "out of memory copying the weights to compare the replicas");
    st_status s = st_device_download(p->dev, copy, p->compute16, (size_t)p->arena_count * sizeof *copy);
    for (int i = 0; s == ST_OK && i < p->n_params; i++)
        h[i] = st_hash_words(copy + p->t[i]->offset, p->t[i]->count, 2);
    free(copy);
    return s;
}

/* This rank's hashing (mine) made every rank's outcome, *agreed set when
 * every rank ends in an error (its own, or "failed on another rank"). */
static st_status hashed_everywhere(st_comm *c, st_status mine, bool *agreed) {
    const st_status s = st_agree_status(c, mine, "hashing the weights for the replica check");
    *agreed = s != ST_OK && (mine != ST_OK || s == ST_ERR_IO);
    return s;
}

st_status st_agree_replicas(st_comm *c, const st_params *p, int64_t step, bool *agreed) {
    const int n = p->n_params;
    *agreed = false;
    if (n <= 0) return ST_OK;
    if (p->masters_sharded) {
        int64_t *h = malloc((size_t)n * sizeof *h);
        st_status s = h ? hash_compute(p, h) : st_fail(ST_ERR_NOMEM, "out of memory comparing the replicas");
        s = hashed_everywhere(c, s, agreed);
        int diff = -1;
        if (s == ST_OK) s = st_agree_first_difference(c, h, n, "replica check", &diff);
        free(h);
        if (s == ST_OK && diff >= 0) {
            *agreed = true;
            s = st_fail(
                ST_ERR_INTERNAL,
                "the data-parallel replicas differ: the %s copy of parameter %s after step %lld is not the "
                "same on every rank; a collective gave the ranks different results, or a rank skipped an "
                "update; this is a bug to report",
                p->precision == ST_PREC_BF16 ? "bf16" : "fp16", p->t[diff]->name, (long long)step);
        }
        return s;
    }
    const size_t nbytes = (size_t)p->arena_count * sizeof(float);
    float *copy = NULL;
    const float *x = p->data;
    int64_t *h = malloc((size_t)n * sizeof *h);
    st_status s = h ? ST_OK : st_fail(ST_ERR_NOMEM, "out of memory comparing the replicas");
    if (s == ST_OK && p->dev) {
        copy = malloc(nbytes ? nbytes : 1);
        s = copy ? st_device_download(p->dev, copy, p->data, nbytes)
                 : st_fail(ST_ERR_NOMEM, "out of memory copying the weights from %s to compare the replicas",
                           st_device_name(p->dev));
        x = copy;
    }
    for (int i = 0; s == ST_OK && i < n; i++)
        h[i] = bits_hash(x + p->t[i]->offset, p->t[i]->count);
    s = hashed_everywhere(c, s, agreed);
    if (s == ST_OK) /* (agreed: this rank's hashing too) */
        ST_INVARIANT(h && x, "the replica check's hashes agreed without this rank's");
    int diff = -1;
    if (s == ST_OK) s = st_agree_first_difference(c, h, n, "replica check", &diff);
    if (s == ST_OK && diff >= 0) {
        *agreed = true; /* (the report below is every rank's) */
        const st_tensor *t = p->t[diff];
        char item[ST_NAME_MAX + 64], mine[ST_AGREE_DESC_MAX];
        snprintf(item, sizeof item, "parameter %s after step %lld", t->name, (long long)step);
        double sum = 0;
        for (int64_t i = 0; i < t->count; i++)
            sum += x[t->offset + i];
        snprintf(mine, sizeof mine, "bits hashed to %016llx, sum %.17g", (unsigned long long)h[diff], sum);
        s = st_agree_report(c, "the data-parallel replicas differ", item, mine,
                            "every rank must end a step with the same weights: a collective gave the ranks "
                            "different results, or a rank skipped an update; this is a bug to report");
        if (s == ST_ERR_CONFIG) { /* (the message, under the right code) */
            char msg[1200];
            snprintf(msg, sizeof msg, "%s", st_last_error());
            s = st_fail(ST_ERR_INTERNAL, "%s", msg);
        }
    }
    free(copy);
    free(h);
    return s;
}

st_status st_agree_weights(st_comm *c, const st_params *p, const char *mine) {
    if (p->masters_sharded)
        return st_fail(ST_ERR_INTERNAL,
                       "comparing loaded weights: the masters are sharded (a training run's)");
    /* every parameter, then the buffers as one item (an evaluation reads batch-norm statistics) */
    const int n = p->n_params + 1;
    const size_t pbytes = (size_t)p->arena_count * sizeof(float),
                 bbytes = (size_t)p->buffer_count * sizeof(float);
    float *copy = NULL;
    const float *x = p->data, *b = p->buffers;
    int64_t *h = malloc((size_t)n * sizeof *h);
    st_status s = h ? ST_OK : st_fail(ST_ERR_NOMEM, "out of memory comparing the ranks' weights");
    if (s == ST_OK && p->dev) {
        copy = malloc(pbytes + bbytes + 1);
        s = copy ? st_device_download(p->dev, copy, p->data, pbytes)
                 : st_fail(ST_ERR_NOMEM, "out of memory copying the weights from %s to compare them",
                           st_device_name(p->dev));
        if (s == ST_OK && bbytes) s = st_device_download(p->dev, copy + p->arena_count, p->buffers, bbytes);
        x = copy;
        b = copy + p->arena_count;
    }
    for (int i = 0; s == ST_OK && i < p->n_params; i++)
        h[i] = bits_hash(x + p->t[i]->offset, p->t[i]->count);
    if (s == ST_OK) h[n - 1] = bits_hash(b, p->buffer_count);
    /* (no rank left out of the comparison) */
    s = st_agree_status(c, s, "hashing the weights for the weights check");
    int diff = -1;
    if (s == ST_OK) s = st_agree_first_difference(c, h, n, "weights check", &diff);
    if (s == ST_OK && diff >= 0)
        s = st_agree_report(c, "the ranks loaded different weights", "the weights (--init)", mine,
                            "give every rank the same weights; a checkpoint folder that a run is still "
                            "writing to can name different steps on different ranks: name one checkpoint "
                            "(out_dir/ckpt/step-N)");
    free(copy);
    free(h);
    return s;
}
