/* Model weights as safetensors: save every parameter and buffer by name;
 * load with every name, shape and dtype checked and each mismatch reported.
 * A model on a device is saved from a host copy of its arenas. A load reads
 * into host copies of the arenas and puts them in place only when every
 * tensor was read and checked: a failed load leaves the model as it was. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_schema.h"
#include "core/mem.h"
#include "core/safetensors.h"
#include "model.h"

static const char *kind_name(st_model_kind k) {
    return k == ST_MODEL_MLP ? "mlp" : k == ST_MODEL_CNN ? "cnn" : "gpt";
}

/* The inputs' shape as the metadata records it ("28x28x1", data.input). */
static void input_shape(const st_model *m, char *buf, size_t n) {
    snprintf(buf, n, "%lldx%lldx%lld", (long long)m->in.height, (long long)m->in.width,
             (long long)m->in.channels);
}

st_status st_model_save_host(const st_model *m, const float *data, const float *buffers, const char *path) {
    const st_params *p = &m->params;
    st_safetensors_tensor *t = calloc((size_t)(p->n ? p->n : 1), sizeof *t);
    if (!t) return st_fail(ST_ERR_NOMEM, "out of memory saving %s", path);
    for (int i = 0; i < p->n; i++) {
        const st_tensor *x = p->t[i];
        t[i].name = x->name;
        t[i].dtype = "F32";
        t[i].ndim = x->ndim;
        t[i].shape = x->shape;
        t[i].data = (x->kind == ST_TENSOR_PARAM ? data : buffers) + x->offset;
    }
    /* the model section as metadata ("model.n_embd": "768"), so that a
     * mismatched load can name the settings that differ */
    const char *meta[2 * (6 + ST_CFG_KEYS_MAX)] = {"format", "scaletrain", "model", kind_name(m->kind)};
    char(*vals)[ST_CFG_STR + 8] = calloc(ST_CFG_KEYS_MAX, sizeof *vals);
    int n_meta = 2;
    char mean[32], std[32], shape[96], split[32], split_seed[32]; /* (%.9g: a float to the bit) */
    snprintf(split, sizeof split, "%.9g", m->val_split); /* (which samples the validation held out) */
    meta[2 * n_meta] = "data.val_split", meta[2 * n_meta + 1] = split, n_meta++;
    snprintf(split_seed, sizeof split_seed, "%lld", (long long)m->val_split_seed);
    meta[2 * n_meta] = "data.val_split_seed", meta[2 * n_meta + 1] = split_seed, n_meta++;
    if (m->kind != ST_MODEL_GPT) {     /* the inputs' shape, which no model.* setting holds */
        input_shape(m, shape, sizeof shape);
        meta[2 * n_meta] = "data.input", meta[2 * n_meta + 1] = shape, n_meta++;
    }
    if (m->has_norm) {
        snprintf(mean, sizeof mean, "%.9g", (double)m->norm_mean);
        snprintf(std, sizeof std, "%.9g", (double)m->norm_std);
        meta[2 * n_meta] = "data.mean", meta[2 * n_meta + 1] = mean, n_meta++;
        meta[2 * n_meta] = "data.std", meta[2 * n_meta + 1] = std, n_meta++;
    }
    for (int row = 0; vals && row < st_cfg_nkeys; row++)
        if (strncmp(st_cfg_keys[row].key, "model.", 6) == 0) {
            st_cfg_format(&m->cfg, row, vals[row], sizeof vals[row]);
            meta[2 * n_meta] = st_cfg_keys[row].key;
            meta[2 * n_meta + 1] = vals[row];
            n_meta++;
        }
    st_status s = vals ? st_safetensors_write(path, t, p->n, meta, n_meta)
                       : st_fail(ST_ERR_NOMEM, "out of memory saving %s", path);
    free(vals);
    free(t);
    return s;
}

/* Whether model.* setting key shapes the tensors the weights hold: not how
 * the run computed them (its kernels, fusions and dropout), which another
 * run, on other hardware or in another precision, chooses for itself. */
static bool shapes_tensors(const char *key) {
    static const char *const no_tensor[] = {
        "model.dropout",         "model.fused_head",       "model.fused_gelu",      "model.fused_residual",
        "model.fused_bias_grad", "model.attention_kernel", "model.kernel_variants", "model.matmul_tune"};
    for (size_t i = 0; i < sizeof no_tensor / sizeof no_tensor[0]; i++)
        if (!strcmp(key, no_tensor[i])) return false;
    return true;
}

/* The value the file records for schema row `row` (its metadata) when it
 * differs from m's, which goes to ours; NULL when the file does not say or
 * says the same, in any writing ("[0,1]" is [0, 1]: another writer's, or
 * edited; it refused a load as another model's, hinting the value the run
 * had). */
static const char *recorded_other(const st_model *m, const st_safetensors *f, int row, char *ours, size_t n) {
    const char *theirs = row >= 0 ? st_safetensors_metadata(f, st_cfg_keys[row].key) : NULL;
    if (!theirs) return NULL;
    st_cfg_format(&m->cfg, row, ours, n);
    if (!strcmp(theirs, ours)) return NULL;
    bool same = false;
    st_config *c = malloc(sizeof *c); /* (theirs read as the setting reads it, and written as ours is) */
    if (c) {
        char canon[ST_CFG_STR + 8];
        st_config_defaults(c);
        if (st_cfg_assign_text(c, row, theirs, "the weights' metadata") == ST_OK) {
            st_cfg_format(c, row, canon, sizeof canon);
            same = !strcmp(canon, ours);
        }
        st_clear_error();
        free(c);
    }
    return same ? NULL : theirs;
}

/* The model.* settings the file was saved with (its metadata) that differ
 * from m's, as "model.n_embd 64 (this run: 128), ..." in buf; "" when the
 * file does not say (written elsewhere, or before it was recorded). Also
 * the --set arguments that would match them, in set. */
static void settings_differing(const st_model *m, const st_safetensors *f, char *buf, size_t size, char *set,
                               size_t set_size) {
    size_t o = 0, so = 0;
    buf[0] = set[0] = '\0';
    /* the settings only another kind of model reads (a gpt's file names its
     * model.hidden default too: no hint to set it) */
    static const struct {
        const char *key;
        unsigned kinds; /* 1 << st_model_kind */
    } reads[] = {{"model.hidden", 1u << ST_MODEL_MLP},
                 {"model.channels", 1u << ST_MODEL_CNN},
                 {"model.pool", 1u << ST_MODEL_CNN},
                 {"model.kernel", 1u << ST_MODEL_CNN},
                 {"model.batchnorm", 1u << ST_MODEL_CNN},
                 {"model.n_layer", 1u << ST_MODEL_GPT},
                 {"model.n_head", 1u << ST_MODEL_GPT},
                 {"model.n_embd", 1u << ST_MODEL_GPT},
                 {"model.vocab_size", 1u << ST_MODEL_GPT},
                 {"model.block_size", 1u << ST_MODEL_GPT},
                 {"model.num_classes", (1u << ST_MODEL_MLP) | (1u << ST_MODEL_CNN)}};
    /* the kind of model the hint is for: the file's (a gpt's file loaded
     * into an mlp: its gpt settings, not num_classes) */
    st_model_kind kind = m->kind;
    st_model_kind_named(st_safetensors_metadata(f, "model.type"), &kind);
    for (int row = 0; row < st_cfg_nkeys; row++) {
        const char *key = st_cfg_keys[row].key;
        bool skip = strncmp(key, "model.", 6) != 0 || !shapes_tensors(key);
        for (size_t i = 0; i < sizeof reads / sizeof reads[0] && !skip; i++)
            skip = strcmp(key, reads[i].key) == 0 && !(reads[i].kinds & (1u << kind));
        char ours[ST_CFG_STR + 8];
        const char *theirs = skip ? NULL : recorded_other(m, f, row, ours, sizeof ours);
        if (!theirs) continue;
        if (o < size)
            o += (size_t)snprintf(buf + o, size - o, "%s%s %s (this run: %s)", o ? ", " : "", key, theirs,
                                  ours);
        if (so < set_size) /* a list without its spaces, one shell word */
            so += (size_t)snprintf(set + so, set_size - so, "%s--set %s=", so ? " " : "", key);
        for (const char *c = theirs; *c && so + 1 < set_size; c++)
            if (*c != ' ') set[so++] = *c;
        if (so < set_size) set[so] = '\0';
    }
}

/* Host arrays laid out as p's parameter and buffer arenas (st_alloc_aligned),
 * holding what p holds: the buffers, and the parameters when `params` (else
 * zeros), downloaded from a device. */
static st_status host_arenas(const st_params *p, bool params, float **data, float **buffers) {
    const size_t pbytes = (size_t)p->arena_count * sizeof(float),
                 bbytes = (size_t)p->buffer_count * sizeof(float);
    *data = st_alloc_aligned(pbytes ? pbytes : 64);
    *buffers = st_alloc_aligned(bbytes ? bbytes : 64);
    st_status s = ST_OK;
    if (!*data || !*buffers)
        s = st_fail(ST_ERR_NOMEM, "out of memory copying the weights (%.1f MiB) to the host",
                    (double)(pbytes + bbytes) / (1 << 20));
    else if (!params)
        memset(*data, 0, pbytes);
    else if (pbytes && p->dev)
        s = st_device_download(p->dev, *data, p->data, pbytes);
    else if (pbytes)
        memcpy(*data, p->data, pbytes);
    if (s == ST_OK && bbytes && p->dev)
        s = st_device_download(p->dev, *buffers, p->buffers, bbytes);
    else if (s == ST_OK && bbytes)
        memcpy(*buffers, p->buffers, bbytes);
    if (s != ST_OK) {
        st_free_aligned(*data);
        st_free_aligned(*buffers);
        *data = *buffers = NULL;
    }
    return s;
}

st_status st_model_copy_arenas(const st_model *m, float **data, float **buffers) {
    const st_params *p = &m->params;
    *data = *buffers = NULL;
    if (p->masters_sharded) /* this rank holds a shard of them: a collective gathers them */
        return st_fail(ST_ERR_INTERNAL, "copying the weights: the masters are sharded (st_zero_copy_arenas)");
    return host_arenas(p, true, data, buffers);
}

st_status st_model_save(const st_model *m, const char *path) {
    const st_params *p = &m->params;
    if (!p->dev && !p->masters_sharded) return st_model_save_host(m, p->data, p->buffers, path);
    float *hdata, *hbuf; /* host copies of a device's arenas */
    ST_TRY(st_model_copy_arenas(m, &hdata, &hbuf));
    st_status s = st_model_save_host(m, hdata, hbuf, path);
    st_free_aligned(hdata);
    st_free_aligned(hbuf);
    return s;
}

/* Weights that are not finite (a diverged run's, a damaged file, an F64
 * value past float's range) are refused, naming the tensor and element:
 * loaded, they show up only as a NaN loss blamed on the learning rate. */
static st_status finite_weights(const float *x, int64_t n, const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return st_fail(
                ST_ERR_FORMAT,
                "%s: element %lld is %s: the weights are not finite (a diverged run's, a damaged file, "
                "or a float64 value past float32's range); load weights saved before the run diverged",
                name, (long long)i,
                isnan(x[i]) ? "NaN"
                : x[i] > 0  ? "+inf"
                            : "-inf");
    return ST_OK;
}

/* Host arrays laid out as m's parameter and buffer arenas, holding what
 * the model holds now (so that what no tensor covers stays as it was): the
 * load reads into them and, only when every tensor read and passed its
 * checks, puts them in place. Sharded masters (graph.h) are not whole on
 * any rank: their array starts as zeros and goes in through
 * st_params_set_weights, which sets every element. */
static st_status stage_arenas(const st_model *m, float **data, float **buffers) {
    return host_arenas(&m->params, !m->params.masters_sharded, data, buffers);
}

/* Put the staged arenas in place (stage_arenas). */
static st_status commit_arenas(st_params *p, const float *data, const float *buffers) {
    const size_t pbytes = (size_t)p->arena_count * sizeof(float),
                 bbytes = (size_t)p->buffer_count * sizeof(float);
    if (bbytes && p->dev)
        ST_TRY(st_device_upload(p->dev, p->buffers, buffers, bbytes));
    else if (bbytes)
        memcpy(p->buffers, buffers, bbytes);
    if (p->masters_sharded) return st_params_set_weights(p, data); /* (it refreshes the compute copy) */
    if (pbytes && p->dev)
        ST_TRY(st_device_upload(p->dev, p->data, data, pbytes));
    else if (pbytes)
        memcpy(p->data, data, pbytes);
    st_params_touch(p);
    return ST_OK;
}

/* Tensors a Hugging Face GPT-2 checkpoint holds that this model derives
 * itself: the causal-mask buffers and the tied output layer. */
static bool ignorable(const st_model *m, const char *name) {
    size_t n = strlen(name);
    /* PyTorch's BatchNorm counts its updates; the running statistics are what a model reads */
    if (n > 20 && strcmp(name + n - 20, ".num_batches_tracked") == 0) return true;
    if (m->kind != ST_MODEL_GPT) return false;
    return strcmp(name, "lm_head.weight") == 0 || (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

static const char *strip_prefix(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

/* The model type a file's tensor names say (scaletrain's names, after any
 * prefix: a gpt's wte and h.N, a cnn's conv.N, an mlp's fc.N without
 * convolutions), or NULL; with one, *example is a name that says it. */
static const char *kind_of_names(const st_safetensors *f, const char **example) {
    const char *gpt = NULL, *cnn = NULL, *mlp = NULL;
    for (int i = 0; i < st_safetensors_count(f); i++) {
        const char *full = st_safetensors_entry_at(f, i)->name;
        for (const char *name = full; name; name = strchr(name, '.') ? strchr(name, '.') + 1 : NULL) {
            if (!gpt && (!strcmp(name, "wte.weight") || !strncmp(name, "h.0.", 4))) gpt = full;
            if (!cnn && !strncmp(name, "conv.", 5)) cnn = full;
            if (!mlp && !strncmp(name, "fc.", 3)) mlp = full;
        }
    }
    *example = gpt ? gpt : cnn ? cnn : mlp;
    return gpt ? "gpt" : cnn ? "cnn" : mlp ? "mlp" : NULL;
}

/* A prefix every name of the file carries, ending in '.', before the
 * model's own names (a state_dict saved from a wrapper: "model.",
 * "module."), under which most of the model's tensors are found; "" when
 * none. ("transformer.", GPT-2's own, the load takes off itself.) */
static void names_prefix(const st_model *m, const st_safetensors *f, char *prefix, size_t size) {
    prefix[0] = '\0';
    const st_params *p = &m->params;
    if (p->n == 0) return;
    for (int i = 0; i < st_safetensors_count(f) && !prefix[0]; i++) {
        const char *name = st_safetensors_entry_at(f, i)->name;
        const size_t n = strlen(name), k = strlen(p->t[0]->name);
        if (n > k && name[n - k - 1] == '.' && !strcmp(name + n - k, p->t[0]->name) && n - k < size)
            snprintf(prefix, size, "%.*s", (int)(n - k), name);
    }
    if (!prefix[0] || !strcmp(prefix, "transformer.")) {
        prefix[0] = '\0';
        return;
    }
    for (int i = 0; i < st_safetensors_count(f); i++) /* (every name of the file under it) */
        if (strncmp(st_safetensors_entry_at(f, i)->name, prefix, strlen(prefix)) != 0) {
            prefix[0] = '\0';
            return;
        }
    int found = 0;
    char full[ST_NAME_MAX + 256];
    for (int i = 0; i < p->n; i++) {
        snprintf(full, sizeof full, "%s%s", prefix, p->t[i]->name);
        found += st_safetensors_find(f, full) != NULL;
    }
    if (2 * found < p->n) prefix[0] = '\0';
}

/* A GPT file that records no settings (written by another program: GPT-2's
 * own layout, llm.c's export): the settings its tensors' shapes say, as
 * --set arguments in set, "" when they do not say (no wte, no wpe or no
 * block). model.n_head is not in any shape. */
static void gpt_shape_settings(const st_safetensors *f, char *set, size_t size) {
    set[0] = '\0';
    const st_safetensors_entry *wte = NULL, *wpe = NULL;
    long layers = 0;
    for (int i = 0; i < st_safetensors_count(f); i++) {
        const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
        const char *name = strip_prefix(e->name);
        long k;
        int used = 0;
        if (!strcmp(name, "wte.weight") && e->ndim == 2) wte = e;
        if (!strcmp(name, "wpe.weight") && e->ndim == 2) wpe = e;
        if (sscanf(name, "h.%ld.%n", &k, &used) == 1 && used > 0 && k >= 0 && k < 100000 && k + 1 > layers)
            layers = k + 1;
    }
    if (!wte || !wpe || !layers || wte->shape[1] != wpe->shape[1]) return;
    snprintf(set, size,
             "--set model.n_layer=%ld --set model.n_embd=%lld --set model.block_size=%lld --set "
             "model.vocab_size=%lld",
             layers, (long long)wte->shape[1], (long long)wpe->shape[0], (long long)wte->shape[0]);
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

typedef struct problems {
    char msg[3072];
    size_t len;
    int n;
} problems;

static void problem(problems *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems *pr, const char *fmt, ...) {
    pr->n++;
    if (pr->n > 12 || pr->len >= sizeof pr->msg) return;
    va_list ap;
    va_start(ap, fmt);
    pr->len += (size_t)snprintf(pr->msg + pr->len, sizeof pr->msg - pr->len, "\n  ");
    if (pr->len < sizeof pr->msg)
        pr->len += (size_t)vsnprintf(pr->msg + pr->len, sizeof pr->msg - pr->len, fmt, ap);
    va_end(ap);
}

st_status st_model_file_is_weights(const st_safetensors *f, const char *path) {
    const char *format = st_safetensors_metadata(f, "format");
    if (format && strncmp(format, "scaletrain-optim", 16) == 0)
        return st_fail(ST_ERR_CONFIG,
                       "%s is a checkpoint's optimizer state (format %s), not weights: give the checkpoint's "
                       "directory, or the model.safetensors beside it",
                       path, format);
    return ST_OK;
}

st_status st_model_config_from_file(st_config *cfg, const st_safetensors *f, const char *path) {
    for (int row = 0; row < st_cfg_nkeys; row++) {
        const char *key = st_cfg_keys[row].key, *v = st_safetensors_metadata(f, key);
        /* (a key a preset filled is the user's too: a preset names a shape) */
        if (!v || strncmp(key, "model.", 6) != 0 || !strcmp(key, ST_CFG_PRESET_KEY) || !shapes_tensors(key) ||
            cfg->src_[row] != ST_SRC_DEFAULT || cfg->note_[row][0])
            continue;
        char ctx[512];
        snprintf(ctx, sizeof ctx, "%s's metadata, %s", path, key);
        ST_TRY(st_cfg_assign_text(cfg, row, v, ctx));
        /* (a message about the value names the file, not "default") */
        snprintf(ctx, sizeof ctx, "%s's metadata", path);
        st_config_mark_auto(cfg, key, ctx);
    }
    return ST_OK;
}

st_status st_model_load(st_model *m, const char *path) {
    st_safetensors *f = NULL;
    ST_TRY(st_safetensors_open(path, &f));
    const st_status w = st_model_file_is_weights(f, path);
    if (w != ST_OK) {
        st_safetensors_close(f);
        return w;
    }
    st_params *p = &m->params;
    /* Shape and dtype mismatches and unexpected names say the most; list them
     * before the (often long) list of missing names. */
    problems pr = {.len = 0}, missing = {.len = 0};
    const st_safetensors_entry **match = calloc((size_t)(p->n ? p->n : 1), sizeof *match);
    if (!match) {
        st_safetensors_close(f);
        return st_fail(ST_ERR_NOMEM, "out of memory loading %s", path);
    }
    char a[96], b[96];
    /* Check everything before changing anything: a failed load leaves the model as it was. */
    for (int i = 0; i < p->n; i++) {
        const st_tensor *t = p->t[i];
        char alt[ST_NAME_MAX + 16];
        snprintf(alt, sizeof alt, "transformer.%s", t->name);
        const st_safetensors_entry *e = st_safetensors_find(f, t->name),
                                   *prefixed = st_safetensors_find(f, alt);
        shape_str(b, sizeof b, t->ndim, t->shape);
        if (e && prefixed) { /* which one the file means is anyone's guess */
            problem(&pr, "%s: in the file twice, also as %s: keep one of them", t->name, alt);
            continue;
        }
        if (!e) e = prefixed;
        if (!e) {
            problem(&missing, "%s: missing (the model expects shape %s)", t->name, b);
            continue;
        }
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16") &&
            strcmp(e->dtype, "F64")) {
            problem(&pr, "%s: dtype %s cannot be loaded as float weights (F32, F16, BF16, F64 can)", t->name,
                    e->dtype);
            continue;
        }
        if (e->ndim != t->ndim || memcmp(e->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) != 0) {
            shape_str(a, sizeof a, e->ndim, e->shape);
            problem(&pr, "%s: shape %s in the file, %s in the model", t->name, a, b);
            continue;
        }
        match[i] = e;
    }
    for (int i = 0; i < st_safetensors_count(f); i++) {
        const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
        const char *name = strip_prefix(e->name);
        if (!st_params_find(p, name) && !ignorable(m, name))
            problem(&pr, "%s: in the file but not in the model", e->name);
    }
    st_status s = ST_OK;
    /* Settings that change what the weights mean but no tensor's shape:
     * loading across them would be a silent wrong answer. */
    static const struct {
        st_model_kind kind;
        const char *key, *why;
    } same_shapes[] = {{ST_MODEL_GPT, "model.n_head", "the heads split them differently"},
                       {ST_MODEL_CNN, "model.pool", "the max-pools sit after other convolutions"}};
    for (size_t i = 0; i < sizeof same_shapes / sizeof same_shapes[0] && !pr.n && !missing.n && s == ST_OK;
         i++) {
        char ours[ST_CFG_STR + 8];
        const char *theirs = m->kind == same_shapes[i].kind
                                 ? recorded_other(m, f, st_cfg_find(same_shapes[i].key), ours, sizeof ours)
                                 : NULL;
        if (theirs)
            s = st_fail(
                ST_ERR_FORMAT, /* (the path is put in front below) */
                "saved by a model with %s %s (this run: %s): every tensor fits, but %s, so these weights "
                "would compute another function; run with --set %s%s=%s%s",
                same_shapes[i].key, theirs, ours, same_shapes[i].why, strchr(theirs, ' ') ? "'" : "",
                same_shapes[i].key, theirs, strchr(theirs, ' ') ? "'" : "");
    }
    /* The inputs' shape, which no model.* setting holds: an mlp's first
     * layer fits any images of as many values, a cnn any of as many channels */
    const char *input = m->kind != ST_MODEL_GPT ? st_safetensors_metadata(f, "data.input") : NULL;
    char ours_input[96];
    input_shape(m, ours_input, sizeof ours_input);
    if (!pr.n && !missing.n && s == ST_OK && input && strcmp(input, ours_input) != 0)
        s = st_fail(ST_ERR_FORMAT,
                    "trained on %s inputs (height x width x channels), and this run's data holds %s: every "
                    "tensor fits, but the weights would see other pixels where they learnt theirs; give data "
                    "of their shape (an array saved (n, c, h, w)? save it channels last)",
                    input, ours_input);
    if (pr.n || missing.n) {
        int total = pr.n + missing.n;
        char differ[1024], set[1024], hint[2200];
        settings_differing(m, f, differ, sizeof differ, set, sizeof set);
        /* (a vocabulary this run took from its data, larger than the file's: --set model.vocab_size to
         * the file's would be refused as smaller than the data's, a hint that goes round in a circle) */
        const char *vocab =
            m->kind == ST_MODEL_GPT && st_config_source(&m->cfg, "model.vocab_size") == ST_SRC_AUTO
                ? st_safetensors_metadata(f, "model.vocab_size")
                : NULL;
        if (vocab && atoll(vocab) > 0 && atoll(vocab) < m->cfg.model.vocab_size)
            snprintf(hint, sizeof hint,
                     "the weights' vocabulary is %s tokens, and this run's data has %lld (model.vocab_size "
                     "auto takes the data's): these weights cannot read its tokens from %s on; give data "
                     "tokenized with their vocabulary%s%s%s",
                     vocab, (long long)m->cfg.model.vocab_size, vocab,
                     differ[0] ? " (the file was saved with " : "", differ, differ[0] ? ")" : "");
        else if (input && strcmp(input, ours_input) != 0) /* (the first layers' shapes follow the images') */
            snprintf(
                hint, sizeof hint,
                "the file was trained on %s inputs (height x width x channels), and this run's data holds "
                "%s: the weights need data of their own shape%s%s",
                input, ours_input, differ[0] ? "; it was also saved with " : "", differ);
        else if (differ[0])
            snprintf(hint, sizeof hint, "the file was saved by a model with %s: run with those settings (%s)",
                     differ, set);
        else if (st_safetensors_metadata(f, "model.type")) /* (scaletrain's: settings the same as ours) */
            snprintf(hint, sizeof hint,
                     "the file records this run's model.* settings, so its tensors no longer match what it was "
                     "saved with: it was changed since (or another program wrote it with this metadata); a "
                     "run's checkpoints hold whole copies of its weights (--init OUT_DIR/ckpt/step-N)");
        else if (m->kind == ST_MODEL_GPT && (gpt_shape_settings(f, set, sizeof set), set[0]))
            snprintf(
                hint, sizeof hint,
                "the file records no model.* settings (not saved by scaletrain), and its tensors' shapes "
                "say: %s (and model.n_head, which no shape holds: GPT-2's is model.n_embd / 64)",
                set);
        else {
            const char *example = NULL, *kind = kind_of_names(f, &example);
            char prefix[128] = "";
            if (!kind || !strcmp(kind, kind_name(m->kind))) /* (another model type's names: that first) */
                names_prefix(m, f, prefix, sizeof prefix);
            if (prefix[0])
                snprintf(
                    hint, sizeof hint,
                    "every name in the file carries the prefix '%s' before the model's own (%s%s): a "
                    "state_dict saved from a wrapper; save it without the prefix (in Python, {k[%zu:]: v "
                    "for k, v in state_dict.items()})",
                    prefix, prefix, p->t[0]->name, strlen(prefix));
            else if (kind && strcmp(kind, kind_name(m->kind)) != 0)
                snprintf(
                    hint, sizeof hint,
                    "the file records no model.* settings, and its tensor names (%s) are a%s %s's, not a "
                    "%s's: run with --set model.type=%s (and that model's other model.* settings)",
                    example, strcmp(kind, "mlp") ? "" : "n", kind, kind_name(m->kind), kind);
            else
                snprintf(hint, sizeof hint,
                         "the weights must come from a model with the same model.* settings");
        }
        s = st_fail(ST_ERR_FORMAT, "%s: %d mismatch%s with the %s model:%s%s%s%s\nhint: %s", path, total,
                    total == 1 ? "" : "es", kind_name(m->kind), pr.msg, pr.n > 12 ? "\n  ..." : "",
                    missing.msg, missing.n > 12 ? "\n  ... (more missing)" : "", hint);
    }
    /* Every tensor is read into host copies of the arenas and checked
     * there; the model changes only when all of them passed. */
    float *hdata = NULL, *hbuf = NULL;
    if (s == ST_OK) s = stage_arenas(m, &hdata, &hbuf);
    for (int i = 0; i < p->n && s == ST_OK; i++) {
        const st_tensor *t = p->t[i];
        float *dst = (t->kind == ST_TENSOR_PARAM ? hdata : hbuf) + t->offset;
        s = st_safetensors_read_f32(f, match[i]->name, dst, t->count);
        if (s == ST_OK) s = finite_weights(dst, t->count, match[i]->name);
    }
    /* A GPT's output layer is its embedding (tied, as GPT-2's): a file's own
     * lm_head.weight must be that same matrix, else the model it came from
     * computed another function. */
    const st_safetensors_entry *head =
        m->kind == ST_MODEL_GPT && s == ST_OK ? st_safetensors_find(f, "lm_head.weight") : NULL;
    const st_tensor *wte = head ? st_params_find(p, "wte.weight") : NULL;
    if (wte) {
        const st_safetensors_entry *we = st_safetensors_find(f, "wte.weight");
        if (!we) we = st_safetensors_find(f, "transformer.wte.weight");
        float *x = NULL, *y = NULL;
        if (head->ndim != 2 || head->shape[0] != wte->shape[0] || head->shape[1] != wte->shape[1]) {
            shape_str(a, sizeof a, head->ndim, head->shape);
            shape_str(b, sizeof b, wte->ndim, wte->shape);
            s = st_fail(ST_ERR_FORMAT,
                        "lm_head.weight has shape %s, wte.weight %s: this GPT ties its output layer to the "
                        "embedding (as GPT-2 does), so a file's lm_head must be wte itself",
                        a, b);
        } else if (we && (x = st_alloc_aligned((size_t)wte->count * sizeof(float))) &&
                   (y = st_alloc_aligned((size_t)wte->count * sizeof(float)))) {
            s = st_safetensors_read_f32(f, head->name, x, wte->count);
            if (s == ST_OK) s = st_safetensors_read_f32(f, we->name, y, wte->count);
            if (s == ST_OK && memcmp(x, y, (size_t)wte->count * sizeof(float)) != 0)
                s = st_fail(
                    ST_ERR_FORMAT,
                    "lm_head.weight differs from wte.weight: the model that saved it had an output "
                    "layer of its own, and this GPT ties it to the embedding (as GPT-2 does): loaded, the "
                    "weights would compute another function");
        } else if (we) {
            s = st_fail(ST_ERR_NOMEM, "out of memory comparing lm_head.weight with wte.weight");
        }
        st_free_aligned(x);
        st_free_aligned(y);
    }
    /* the normalisation the weights were trained with, when recorded */
    const char *mean = st_safetensors_metadata(f, "data.mean"), *std = st_safetensors_metadata(f, "data.std");
    char *end_mean = NULL, *end_std = NULL;
    const float fmean = mean ? strtof(mean, &end_mean) : 0, fstd = std ? strtof(std, &end_std) : 0;
    const bool norm = mean && std;
    if (s == ST_OK && norm && (*end_mean || *end_std || !isfinite(fmean) || !(fstd > 0) || !isfinite(fstd)))
        s = st_fail(ST_ERR_FORMAT,
                    "its metadata records the inputs' normalisation as data.mean '%s', data.std '%s': not a "
                    "finite mean and a positive standard deviation (the file was edited?)",
                    mean, std);
    if (s == ST_OK) s = commit_arenas(p, hdata, hbuf);
    if (s == ST_OK) {
        m->norm_loaded = norm;
        if (norm) m->norm_mean = fmean, m->norm_std = fstd;
        const char *split = st_safetensors_metadata(f, "data.val_split");
        char *end = NULL;
        const double v = split ? strtod(split, &end) : -1;
        m->val_split_loaded = split && !*end && v >= 0 && v < 1 ? v : -1;
        const char *seed = st_safetensors_metadata(f, "data.val_split_seed");
        const long long sv = seed ? strtoll(seed, &end, 10) : -1;
        m->val_split_seed_loaded = seed && *seed && !*end && sv >= 0 ? sv : -1;
    }
    if (s != ST_OK && !pr.n && !missing.n) st_fail_context(s, "%s: ", path);
    st_free_aligned(hdata);
    st_free_aligned(hbuf);
    free(match);
    st_safetensors_close(f);
    return s;
}
