/* Reading the run configuration: defaults, the YAML file, --set overrides and
 * presets, recording where each value came from; and the cross-key checks.
 *
 * What a key is (type, default, range, accepted values) lives in the schema,
 * config_schema.c: this file walks YAML documents and handles no key by name,
 * except in st_config_validate and st_config_unused. Printing, JSON and the docs: config_report.c. */
#include "core/config_schema.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

#define CONFIG_MAX_BYTES (16u << 20)

static void set_source(st_config *c, int row, st_cfg_source src, const char *note) {
    c->src_[row] = (uint8_t)src;
    snprintf(c->note_[row], ST_CFG_NOTE, "%s", note ? note : "");
}

const char *st_cfg_origin(const st_config *c, int row, char *buf, size_t n) {
    const char *note = c->note_[row];
    switch ((st_cfg_source)c->src_[row]) {
    case ST_SRC_DEFAULT:
        snprintf(buf, n, "%s", note[0] ? note : "default");
        break; /* note: a preset */
    case ST_SRC_FILE:
        snprintf(buf, n, "%s", note[0] ? note : "file");
        break;
    case ST_SRC_SET:
        snprintf(buf, n, "--set%s%s", note[0] ? "; " : "", note); /* note: st_config_annotate's */
        break;
    case ST_SRC_AUTO:
        snprintf(buf, n, "auto%s%s", note[0] ? ": " : "", note);
        break;
    default:
        snprintf(buf, n, "?");
        break;
    }
    return buf;
}

void st_config_defaults(st_config *c) {
    memset(c, 0, sizeof *c);
    /* Every default converts: st_cfg_schema_check proves it in tests/test_config. */
    for (int i = 0; i < st_cfg_nkeys; i++)
        st_cfg_assign_text(c, i, st_cfg_keys[i].def, st_cfg_keys[i].key);
}

st_status st_config_apply_preset(st_config *c) {
    if (!c) return st_fail(ST_ERR_ARG, "st_config_apply_preset: NULL config");
    int prow = st_cfg_find(ST_CFG_PRESET_KEY);
    const char *name = (const char *)c + st_cfg_keys[prow].off;
    char ctx[160], note[ST_CFG_NOTE];
    /* A default with a note was filled by a preset: put the plain default back first. */
    for (int i = 0; i < st_cfg_npresets; i++) {
        int row = st_cfg_find(st_cfg_presets[i].key);
        if (c->src_[row] != ST_SRC_DEFAULT || !c->note_[row][0]) continue;
        snprintf(ctx, sizeof ctx, "default of %s", st_cfg_keys[row].key);
        ST_TRY(st_cfg_assign_text(c, row, st_cfg_keys[row].def, ctx));
        set_source(c, row, ST_SRC_DEFAULT, "");
    }
    snprintf(note, sizeof note, "preset %s", name);
    for (int i = 0; i < st_cfg_npresets; i++) {
        const st_cfg_preset *p = &st_cfg_presets[i];
        int row = st_cfg_find(p->key);
        if (strcmp(p->name, name) || c->src_[row] != ST_SRC_DEFAULT) continue;
        snprintf(ctx, sizeof ctx, "preset %s: %s", p->name, p->key);
        ST_TRY(st_cfg_assign_text(c, row, p->value, ctx));
        set_source(c, row, ST_SRC_DEFAULT, note);
    }
    return ST_OK;
}

void st_config_mark_auto(st_config *c, const char *key, const char *why) {
    int row = st_cfg_find(key);
    assert(row >= 0 && "st_config_mark_auto: not a configuration key");
    if (row >= 0) set_source(c, row, ST_SRC_AUTO, why);
}

void st_config_annotate(st_config *c, const char *key, const char *what) {
    const int row = st_cfg_find(key);
    assert(row >= 0 && "st_config_annotate: not a configuration key");
    if (row < 0 || (c->src_[row] != ST_SRC_FILE && c->src_[row] != ST_SRC_SET)) return;
    char *note = c->note_[row];
    const size_t len = strlen(note);
    if (strstr(note, what)) return; /* (said: a second session over the same configuration) */
    snprintf(note + len, ST_CFG_NOTE - len, "%s%s", len ? "; " : "", what);
}

st_cfg_source st_config_source(const st_config *c, const char *key) {
    int row = st_cfg_find(key);
    return row < 0 ? ST_SRC_DEFAULT : (st_cfg_source)c->src_[row];
}

/* ---- names for messages about unknown keys ---- */

/* "type, lr, weight_decay, ..." for section "optim". */
static void section_keys(const char *section, size_t seclen, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < st_cfg_nkeys && o < n; i++) {
        const char *key = st_cfg_keys[i].key;
        if (st_cfg_section_len(key) == seclen && !strncmp(key, section, seclen))
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", st_cfg_leaf(key));
    }
}

/* "model, data, train, optim, precision, dist, log" */
static void section_names(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < st_cfg_nkeys && o < n; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t len = st_cfg_section_len(key);
        if (len && st_cfg_section_first(key, len) != i) continue;
        o += (size_t)snprintf(buf + o, n - o, "%s%.*s", o ? ", " : "", (int)(len ? len : strlen(key)), key);
    }
}

/* (accumulation is not a key of its own: the micro-batch sets it) */
#define GRAD_ACCUM                                                                                           \
    " (it sets the accumulation: train.batch_size / (ranks x train.micro_batch_size) micro-batches a "       \
    "step; or leave it auto)"

/* "; did you mean optim.lr?" for an unknown `name` inside `section` (seclen 0:
 * an unknown top-level name), or "; lr is a key of section optim (optim.lr)",
 * or "" when nothing fits. */
static void hint_for(const char *section, size_t seclen, const char *name, char *buf, size_t n) {
    buf[0] = '\0';
    /* a name that looks right and is not: a zero-width space, a Cyrillic letter (from a web page) */
    for (size_t i = 0; name[i]; i++)
        if ((unsigned char)name[i] >= 0x80) {
            snprintf(buf, n,
                     "; the name holds a character that is not ASCII, at byte %zu of '%s' (an invisible one, "
                     "or a look-alike letter copied from elsewhere?): type it again",
                     i + 1, name);
            return;
        }
    /* The same name elsewhere first: a key put in the wrong section (optim.steps is train.steps, not the
     * near optim.eps). */
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t len = st_cfg_section_len(key);
        if (strcmp(st_cfg_leaf(key), name) || (len == seclen && (!seclen || !strncmp(key, section, seclen))))
            continue;
        if (len)
            snprintf(buf, n, "; %s is a key of section %.*s (%s)", name, (int)len, key, key);
        else
            snprintf(buf, n, "; %s is a top-level key, not inside a section", name);
        return;
    }
    /* Other tools' names for a key (PyTorch's, nanoGPT's, Hugging Face's), in any section */
    static const struct {
        const char *name, *key, *note;
    } other_names[] = {
        {"learning_rate", "optim.lr", NULL},
        {"lr_min", "optim.min_lr", NULL},
        {"min_learning_rate", "optim.min_lr", NULL},
        {"clip_grad", "optim.grad_clip", NULL},
        {"clip_grad_norm", "optim.grad_clip", NULL},
        {"max_grad_norm", "optim.grad_clip", NULL},
        {"gradient_clipping", "optim.grad_clip", NULL},
        {"warmup", "optim.warmup_steps", NULL},
        {"warmup_iters", "optim.warmup_steps", NULL},
        {"lr_scheduler", "optim.schedule", NULL},
        {"scheduler", "optim.schedule", NULL},
        {"betas", "optim.beta1", " and optim.beta2"},
        {"max_iters", "train.steps", NULL},
        {"max_steps", "train.steps", NULL},
        {"num_epochs", "train.epochs", NULL},
        {"eval_interval", "train.eval_every", NULL},
        {"eval_iters", "train.eval_steps", NULL},
        {"save_every", "train.checkpoint_every", NULL},
        {"save_interval", "train.checkpoint_every", NULL},
        {"save_steps", "train.checkpoint_every", NULL},
        {"log_interval", "log.every", NULL},
        {"logging_steps", "log.every", NULL},
        {"dtype", "precision", NULL},
        {"mixed_precision", "precision", NULL},
        {"n_positions", "model.block_size", NULL},
        {"n_ctx", "model.block_size", NULL},
        {"grad_accum", "train.micro_batch_size", GRAD_ACCUM},
        {"grad_accum_steps", "train.micro_batch_size", GRAD_ACCUM},
        {"gradient_accumulation_steps", "train.micro_batch_size", GRAD_ACCUM},
    };
    for (size_t i = 0; i < sizeof other_names / sizeof other_names[0]; i++)
        if (!strcasecmp(name, other_names[i].name)) {
            const char *note = other_names[i].note ? other_names[i].note : "";
            const bool after = note[0] == ' ' && note[1] == '('; /* (an aside, after the question) */
            snprintf(buf, n, "; did you mean %s%s?%s", other_names[i].key, after ? "" : note,
                     after ? note : "");
            return;
        }
    int best = -1, best_d = INT32_MAX;
    /* A near name in the same place: a section, or a top-level key, or a key of this section. */
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t len = st_cfg_section_len(key);
        const char *cand = seclen ? st_cfg_leaf(key) : key;
        size_t cand_len = seclen ? strlen(cand) : (len ? len : strlen(key));
        if (seclen && (len != seclen || strncmp(key, section, seclen))) continue;
        if (!seclen && len && st_cfg_section_first(key, len) != i) continue;
        int d = st_cfg_near(name, strlen(name), cand, cand_len);
        if (d >= 0 && d < best_d) best = i, best_d = d;
    }
    if (best >= 0) {
        const char *key = st_cfg_keys[best].key;
        size_t len = st_cfg_section_len(key);
        snprintf(buf, n, "; did you mean %.*s?", (int)(seclen || !len ? strlen(key) : len), key);
    }
}

/* ---- the YAML file ---- */

static st_status read_file(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail(ST_ERR_IO, "%s: cannot open the config file: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    st_status s = ST_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap >= CONFIG_MAX_BYTES) break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) free(buf);
        buf = grown;
    }
    if (!buf)
        s = st_fail(ST_ERR_NOMEM, "%s: out of memory reading the config file", path);
    else if (ferror(f))
        s = st_fail(ST_ERR_IO, "%s: cannot read the config file: %s", path, strerror(errno));
    else if (n == cap)
        s = st_fail(ST_ERR_CONFIG, "%s: larger than %u MiB; not a config file", path, CONFIG_MAX_BYTES >> 20);
    fclose(f);
    if (s != ST_OK) {
        free(buf);
        return s;
    }
    *text = buf;
    *len = n;
    return ST_OK;
}

/* How deep the text's flow brackets ([ and {) nest, outside quotes and
 * comments, and the line (from 1) where they first pass `limit`: libyaml's
 * time grows with the square of the depth (a file of 200000 '[' took
 * hours), and a run file is a few levels deep. 0 when they do not. */
static int nested_too_deep(const char *text, size_t len, int limit) {
    int depth = 0, line = 1;
    char quote = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = text[i];
        if (ch == '\n') line++;
        if (quote) {
            if (quote == '"' && ch == '\\' && i + 1 < len) i++;
            else if (ch == quote) quote = 0;
        } else if (ch == '"' || ch == '\'') {
            quote = ch;
        } else if (ch == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
            while (i + 1 < len && text[i + 1] != '\n')
                i++;
        } else if (ch == '[' || ch == '{') {
            if (++depth > limit) return line;
        } else if ((ch == ']' || ch == '}') && depth > 0) {
            depth--;
        }
    }
    return 0;
}

/* Whether line `line` (from 0) of the text is indented with a tab: YAML
 * indents with spaces only, and libyaml's words for it ("found character
 * that cannot start any token") do not say so. */
static bool tab_indented(const char *text, size_t len, size_t line) {
    size_t i = 0;
    for (size_t l = 0; l < line && i < len; i++)
        if (text[i] == '\n') l++;
    for (; i < len && (text[i] == ' ' || text[i] == '\t'); i++)
        if (text[i] == '\t') return true;
    return false;
}

static st_status yaml_error(const yaml_parser_t *p, const char *path, const char *text, size_t len) {
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->error == YAML_MEMORY_ERROR) return st_fail(ST_ERR_NOMEM, "%s: out of memory parsing YAML", path);
    if (p->error == YAML_READER_ERROR)
        return st_fail(ST_ERR_CONFIG, "%s: byte %zu: %s; save the file as UTF-8 text", path,
                       p->problem_offset, problem);
    if (tab_indented(text, len, p->problem_mark.line))
        return st_fail(ST_ERR_CONFIG,
                       "%s:%zu: YAML syntax error: line %zu is indented with a tab; YAML indents with spaces "
                       "only (replace the tabs there with spaces)",
                       path, p->problem_mark.line + 1, p->problem_mark.line + 1);
    if (p->context)
        return st_fail(ST_ERR_CONFIG,
                       "%s:%zu:%zu: YAML syntax error: %s (%s on line %zu); check the indentation, "
                       "colons, quotes and brackets there",
                       path, p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                       p->context_mark.line + 1);
    return st_fail(ST_ERR_CONFIG,
                   "%s:%zu:%zu: YAML syntax error: %s; check the indentation, colons, quotes and "
                   "brackets there",
                   path, p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

typedef struct loader {
    st_config *c;
    yaml_document_t *doc;
    const char *path, *base;
    int key_line[ST_CFG_KEYS_MAX]; /* where each row was set in this file; 0 = not yet */
    int sec_line[ST_CFG_KEYS_MAX]; /* where each section, by its first row, began */
} loader;

static int line_of(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

static const char *node_desc(const yaml_node_t *n, char *buf, size_t size) {
    if (n->type == YAML_SCALAR_NODE)
        snprintf(buf, size, "'%.60s'", (const char *)n->data.scalar.value);
    else
        snprintf(buf, size, "%s", n->type == YAML_SEQUENCE_NODE ? "a list" : "a mapping");
    return buf;
}

static st_status load_key(loader *L, int row, yaml_node_t *key, yaml_node_t *value) {
    const char *name = st_cfg_keys[row].key;
    int line = line_of(key);
    if (L->key_line[row])
        return st_fail(ST_ERR_CONFIG, "%s:%d: %s: duplicate key (first set on line %d); keep one of them",
                       L->path, line, name, L->key_line[row]);
    L->key_line[row] = line;
    char ctx[ST_CFG_STR + 128], note[ST_CFG_NOTE];
    snprintf(ctx, sizeof ctx, "%s:%d: %s", L->path, line, name);
    ST_TRY(st_cfg_assign(L->c, row, value, L->doc, ctx));
    snprintf(note, sizeof note, "%s:%d", L->base, line);
    set_source(L->c, row, ST_SRC_FILE, note);
    return ST_OK;
}

static st_status load_section(loader *L, const char *sec, int first, yaml_node_t *key, yaml_node_t *value) {
    int line = line_of(key);
    char desc[80], full[160], keys[512], hint[320];
    if (L->sec_line[first])
        return st_fail(ST_ERR_CONFIG,
                       "%s:%d: %s: duplicate section (first on line %d); merge the two into one", L->path,
                       line, sec, L->sec_line[first]);
    L->sec_line[first] = line;
    if (st_cfg_is_null(value)) return ST_OK; /* "log:" with every key left out */
    if (value->type != YAML_MAPPING_NODE)
        return st_fail(ST_ERR_CONFIG, "%s:%d: %s: expected a mapping of keys, e.g. %s: { %s: ... }, got %s",
                       L->path, line, sec, sec, st_cfg_leaf(st_cfg_keys[first].key),
                       node_desc(value, desc, sizeof desc));
    for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(L->doc, p->key),
                    *v = yaml_document_get_node(L->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return st_fail(ST_ERR_CONFIG, "%s:%d: %s: a key must be a plain name, got %s", L->path,
                           line_of(k), sec, node_desc(k, desc, sizeof desc));
        const char *name = (const char *)k->data.scalar.value;
        if (strcmp(name, "<<") == 0) /* (YAML 1.1's merge key: libyaml leaves it to the reader) */
            return st_fail(ST_ERR_CONFIG,
                           "%s:%d: %s: '<<' is a YAML merge key, which scaletrain does not read; write the keys "
                           "out in %s (an alias of a single value, key: *name, does work)",
                           L->path, line_of(k), sec, sec);
        snprintf(full, sizeof full, "%s.%s", sec, name);
        int row = st_cfg_find(full);
        if (row < 0) {
            section_keys(sec, strlen(sec), keys, sizeof keys);
            hint_for(sec, strlen(sec), name, hint, sizeof hint);
            return st_fail(ST_ERR_CONFIG, "%s:%d: %s: unknown key; known keys in %s: %s%s", L->path,
                           line_of(k), full, sec, keys, hint);
        }
        ST_TRY(load_key(L, row, k, v));
    }
    return ST_OK;
}

static st_status load_root(loader *L) {
    yaml_node_t *root = yaml_document_get_root_node(L->doc);
    char desc[80], names[256], hint[320];
    if (st_cfg_is_null(root)) return ST_OK; /* an empty file */
    if (root->type != YAML_MAPPING_NODE)
        return st_fail(ST_ERR_CONFIG,
                       "%s:%d: expected a mapping of sections (model:, data:, train:, ...), got %s", L->path,
                       line_of(root), node_desc(root, desc, sizeof desc));
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(L->doc, p->key),
                    *v = yaml_document_get_node(L->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return st_fail(ST_ERR_CONFIG, "%s:%d: a section name must be a plain name, got %s", L->path,
                           line_of(k), node_desc(k, desc, sizeof desc));
        const char *name = (const char *)k->data.scalar.value;
        int row = strchr(name, '.') ? -1 : st_cfg_find(name),
            first = st_cfg_section_first(name, strlen(name));
        if (row >= 0)
            ST_TRY(load_key(L, row, k, v)); /* a top-level scalar: precision */
        else if (first >= 0)
            ST_TRY(load_section(L, name, first, k, v));
        else if (st_cfg_find(name) >= 0)
            return st_fail(ST_ERR_CONFIG, "%s:%d: %s: write it inside its section, e.g. %.*s: { %s: ... }",
                           L->path, line_of(k), name, (int)st_cfg_section_len(name), name, st_cfg_leaf(name));
        else {
            section_names(names, sizeof names);
            hint_for(NULL, 0, name, hint, sizeof hint);
            return st_fail(ST_ERR_CONFIG, "%s:%d: %s: unknown section; the sections are %s%s", L->path,
                           line_of(k), name, names, hint);
        }
    }
    return ST_OK;
}

st_status st_config_load(st_config *c, const char *path) {
    if (!c || !path) return st_fail(ST_ERR_ARG, "st_config_load: NULL argument");
    st_status s;
    char *text = NULL;
    size_t len = 0;
    st_config *tmp = NULL; /* loaded into a copy so that *c is untouched on error */
    loader *L = NULL;
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    bool have_parser = false, have_doc = false;

    ST_GOTO(read_file(path, &text, &len));
    const int deep = nested_too_deep(text, len, 32);
    if (deep)
        ST_GOTO(st_fail(ST_ERR_CONFIG,
                        "%s:%d: brackets nested more than 32 deep; a run file's values are at most a list "
                        "of numbers deep (model.hidden: [1024, 1024])",
                        path, deep));
    tmp = malloc(sizeof *tmp);
    L = calloc(1, sizeof *L);
    if (!tmp || !L || !yaml_parser_initialize(&parser)) {
        s = st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    have_parser = true;
    *tmp = *c;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) ST_GOTO(yaml_error(&parser, path, text, len));
    have_doc = true;
    const char *slash = strrchr(path, '/');
    *L = (loader){.c = tmp, .doc = &doc, .path = path, .base = slash ? slash + 1 : path};
    ST_GOTO(load_root(L));
    if (!yaml_parser_load(&parser, &extra)) ST_GOTO(yaml_error(&parser, path, text, len));
    bool more = yaml_document_get_root_node(&extra) != NULL;
    int more_line = (int)extra.start_mark.line + 1;
    yaml_document_delete(&extra);
    if (more)
        ST_GOTO(st_fail(ST_ERR_CONFIG,
                        "%s:%d: a second YAML document starts here; a run file holds one mapping of "
                        "sections (remove the '---')",
                        path, more_line));
    snprintf(tmp->path, sizeof tmp->path, "%s", path);
    ST_GOTO(st_config_apply_preset(tmp));
    *c = *tmp;
    s = ST_OK;
fail:
    if (have_doc) yaml_document_delete(&doc);
    if (have_parser) yaml_parser_delete(&parser);
    free(L);
    free(tmp);
    free(text);
    return s;
}

/* ---- --set ---- */

static st_status unknown_set_key(const char *ctx, const char *key) {
    char keys[512], names[256], hint[320];
    size_t seclen = st_cfg_section_len(key);
    if (!seclen && st_cfg_section_first(key, strlen(key)) >= 0) {
        int first = st_cfg_section_first(key, strlen(key));
        return st_fail(ST_ERR_CONFIG, "%s: %s is a section; set one of its keys, e.g. --set %s=...", ctx, key,
                       st_cfg_keys[first].key);
    }
    if (seclen && st_cfg_section_first(key, seclen) >= 0) {
        section_keys(key, seclen, keys, sizeof keys);
        hint_for(key, seclen, st_cfg_leaf(key), hint, sizeof hint);
        return st_fail(ST_ERR_CONFIG, "%s: unknown key %s; known keys in %.*s: %s%s", ctx, key, (int)seclen,
                       key, keys, hint);
    }
    section_names(names, sizeof names);
    hint_for(NULL, 0, key, hint, sizeof hint);
    /* a section's name mistyped (trian.steps): the key of that name in the section it is near */
    for (int i = 0, best_d = INT32_MAX; seclen && i < st_cfg_nkeys; i++) {
        const char *k = st_cfg_keys[i].key;
        const size_t len = st_cfg_section_len(k);
        const int d = len ? st_cfg_near(key, seclen, k, len) : -1;
        if (d >= 0 && d < best_d && !strcasecmp(st_cfg_leaf(k), st_cfg_leaf(key)))
            best_d = d, snprintf(hint, sizeof hint, "; did you mean %s?", k);
    }
    return st_fail(ST_ERR_CONFIG, "%s: unknown key %s; keys are section.key with the sections %s%s", ctx, key,
                   names, hint);
}

st_status st_config_set(st_config *c, const char *assignment) {
    if (!c || !assignment) return st_fail(ST_ERR_ARG, "st_config_set: NULL argument");
    char ctx[ST_CFG_STR + 64], key[128];
    snprintf(ctx, sizeof ctx, "--set %s", assignment);
    const char *eq = strchr(assignment, '=');
    if (!eq) return st_fail(ST_ERR_CONFIG, "%s: expected key=value, e.g. --set optim.lr=3e-4", ctx);
    const char *b = assignment, *e = eq;
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    snprintf(key, sizeof key, "%.*s", (int)(e - b), b);
    if (!key[0])
        return st_fail(ST_ERR_CONFIG,
                       "%s: no key before the '='; expected key=value, e.g. --set optim.lr=3e-4", ctx);
    int row = st_cfg_find(key);
    if (row < 0) return unknown_set_key(ctx, key);
    /* (the value is read as YAML, which folds a line break into a space: an out_dir "a<newline>b"
     * became "a b", unsaid) */
    const size_t brk = strcspn(eq + 1, "\n\r");
    if (eq[1 + brk])
        return st_fail(ST_ERR_CONFIG,
                       "--set %s=%.*s...: the value holds a line break (after %zu bytes), which no setting "
                       "takes; give it on one line (a shell's $'...' or a pasted value may carry one)",
                       key, (int)(brk < 40 ? brk : 40), eq + 1, brk);
    ST_TRY(st_cfg_assign_text(c, row, eq + 1, ctx));
    set_source(c, row, ST_SRC_SET, "");
    return st_config_apply_preset(c);
}

/* ---- cross-key checks ---- */

/* The key whose value decides whether a key of doc prefix `who` ("mlp:",
 * "adamw:", "fp16:") is read, and whether it is: NULL where the prefix is
 * not one of those. */
static const char *reader_of(const st_config *c, const char *doc, char *who, size_t n, bool *used) {
    static const struct {
        const char *who, *key;
    } readers[] = {{"mlp", "model.type"},   {"cnn", "model.type"}, {"gpt", "model.type"},
                   {"adamw", "optim.type"}, {"sgd", "optim.type"}, {"fp16", "precision"}};
    const size_t len = strcspn(doc, ":");
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (doc[len] == ':' && len == strlen(readers[i].who) && !strncmp(doc, readers[i].who, len)) {
            const int row = st_cfg_find(readers[i].key);
            char value[ST_CFG_STR + 8];
            st_cfg_format(c, row, value, sizeof value);
            *used = strcmp(value, readers[i].who) == 0 || strcmp(value, "auto") == 0;
            snprintf(who, n, "%s", readers[i].who);
            return readers[i].key;
        }
    return NULL;
}

void st_config_unused(const st_config *c, int world, char *buf, size_t n) {
    /* (read only where there are gradients to all-reduce between ranks, or statistics to share;
     * dist.comm nccl and dist.deterministic mean something on one rank too, and the buckets' size
     * with dist.comm nccl) */
    static const char *const several[] = {"dist.grad_dtype", "dist.bucket_cap_mb", "dist.sync_batchnorm",
                                          "dist.shm_allreduce"};
    char lone[1024] = "";
    size_t lone_at = 0;
    int n_lone = 0;
    size_t at = 0;
    buf[0] = '\0';
    st_config d;
    st_config_defaults(&d);
    char mine[ST_CFG_STR + 8], def[ST_CFG_STR + 8], who[16], desc[2 * ST_CFG_STR + 128],
        reader[2 * ST_CFG_STR + 128];
    for (int row = 0; row < st_cfg_nkeys; row++) {
        if (c->src_[row] != ST_SRC_FILE && c->src_[row] != ST_SRC_SET) continue;
        st_cfg_format(c, row, mine, sizeof mine);
        st_cfg_format(&d, row, def, sizeof def);
        if (!strcmp(mine, def)) continue; /* (a whole configuration written out: its defaults) */
        const char *key = st_cfg_keys[row].key;
        bool alone = false;
        for (size_t k = 0; k < sizeof several / sizeof several[0] && world == 1; k++)
            alone = alone || !strcmp(key, several[k]);
        /* (one rank on a GPU with dist.comm nccl all-reduces its buckets through NCCL all the same) */
        if (!strcmp(key, "dist.bucket_cap_mb") && !strcmp(c->dist.comm, "nccl")) alone = false;
        if (alone) {
            st_appendf(lone, sizeof lone, &lone_at, "%s%s", n_lone++ ? ", " : "",
                       st_config_describe(c, key, desc, sizeof desc));
            continue;
        }
        bool used = true;
        const char *by = reader_of(c, st_cfg_keys[row].doc, who, sizeof who, &used);
        if (!used)
            st_appendf(buf, n, &at,
                       "scaletrain: warning: %s is not used: it applies to %s, and this run has %s\n",
                       st_config_describe(c, key, desc, sizeof desc), who,
                       st_config_describe(c, by, reader, sizeof reader));
        else if (!strcmp(key, "optim.min_lr") && !strcmp(c->optim.schedule, "constant"))
            st_appendf(
                buf, n, &at,
                "scaletrain: warning: %s is not used: a decay ends there, and this run has %s, one rate\n",
                st_config_describe(c, key, desc, sizeof desc),
                st_config_describe(c, "optim.schedule", reader, sizeof reader));
    }
    if (n_lone)
        st_appendf(buf, n, &at,
                   "scaletrain: warning: %s %s not used: %s to runs of several ranks, and this run has one "
                   "(scaletrain launch -n N starts N)\n",
                   lone, n_lone == 1 ? "is" : "are", n_lone == 1 ? "it applies" : "they apply");
}

const char *st_config_describe(const st_config *c, const char *key, char *buf, size_t n) {
    int row = st_cfg_find(key);
    char value[ST_CFG_STR + 8], from[ST_CFG_NOTE + 16];
    if (row < 0) {
        snprintf(buf, n, "%s", key);
        return buf;
    }
    st_cfg_format(c, row, value, sizeof value);
    snprintf(buf, n, "%s (%s, %s)", key, value, st_cfg_origin(c, row, from, sizeof from));
    return buf;
}

st_status st_config_validate_world(const st_config *c, int world) {
    char where[sizeof c->path + 8] = "", b1[512], b2[512];
    if (c->path[0]) snprintf(where, sizeof where, "%s: ", c->path);
    const int64_t batch = c->train.batch_size, micro = c->train.micro_batch_size, lo = batch / world * world;
    if (batch % world != 0) {
        char eg[64], ranks[64];
        if (lo > 0)
            snprintf(eg, sizeof eg, "%lld or %lld", (long long)lo, (long long)(lo + world));
        else
            snprintf(eg, sizeof eg, "%d", world);
        /* the rank counts nearest to world that divide it (a resume keeps its batch size: that is its fix) */
        int64_t below = 1, above = 0;
        for (int64_t k = world - 1; k > 1 && below == 1; k--)
            if (batch % k == 0) below = k;
        const int64_t far = 4 * (int64_t)world; /* (bounded: a batch of 2^53 - 1 would not end) */
        for (int64_t k = world + 1; k <= batch && k <= far && !above; k++)
            if (batch % k == 0) above = k;
        if (above)
            snprintf(ranks, sizeof ranks, "%lld or %lld", (long long)below, (long long)above);
        else
            snprintf(ranks, sizeof ranks, "%lld", (long long)below);
        return st_fail(
            ST_ERR_CONFIG,
            "%s%s cannot be split over %d ranks (the global batch is micro_batch_size x accumulation "
            "steps x ranks); start a number of ranks that divides it (e.g. %s), or set "
            "train.batch_size to a multiple of %d (e.g. %s; a resume with another batch goes on from "
            "the same place in the data)",
            where, st_config_describe(c, "train.batch_size", b1, sizeof b1), world, ranks, world, eg);
    }
    if (micro != ST_AUTO && batch % (micro * world) != 0)
        return st_fail(
            ST_ERR_CONFIG,
            "%s%s is not a multiple of %s x %d rank(s); set train.batch_size to a multiple of %lld, "
            "or a micro-batch size that divides the %lld samples per rank (or auto)",
            where, st_config_describe(c, "train.batch_size", b1, sizeof b1),
            st_config_describe(c, "train.micro_batch_size", b2, sizeof b2), world, (long long)(micro * world),
            (long long)(batch / world));
    return ST_OK;
}

#define FAIL_IF(cond, fmt, ...)                                                                              \
    do {                                                                                                     \
        if (cond) return st_fail(ST_ERR_CONFIG, "%s" fmt, where, __VA_ARGS__);                               \
    } while (0)

st_status st_config_validate(const st_config *c) {
    if (!c) return st_fail(ST_ERR_ARG, "st_config_validate: NULL config");
    char a[512], b[512], c3[512], where[sizeof c->path + 8] = "";
    if (c->path[0]) snprintf(where, sizeof where, "%s: ", c->path);
    bool gpt = !strcmp(c->model.type, "gpt"), cnn = !strcmp(c->model.type, "cnn");
    bool tokens = !strcmp(c->data.type, "tokens");
#define D1(key) st_config_describe(c, key, a, sizeof a)
#define D2(key) st_config_describe(c, key, b, sizeof b)
#define DEFAULTED(key) (st_config_source(c, key) == ST_SRC_DEFAULT)

    /* (an evaluation of tokens reads data.val alone: st_config_validate_data refuses it for the rest) */
    FAIL_IF(!c->data.train[0] && !(tokens && c->data.val[0] && !(c->data.val_split > 0)),
            "%s is empty; set it to the training %s", D1("data.train"), tokens ? "token file" : "images");
    FAIL_IF(c->data.val_split > 0 && c->data.val[0] && !DEFAULTED("data.val"),
            "%s holds out validation data from data.train, and %s names other validation data; set one of "
            "them (data.val: \"\" to split data.train)",
            D1("data.val_split"), D2("data.val"));
    FAIL_IF(c->data.val_split > 0 && c->data.val_labels[0] && !DEFAULTED("data.val_labels"),
            "%s holds out validation data from data.train, and %s names other validation labels; set one of "
            "them (data.val_labels: \"\" to split data.train)",
            D1("data.val_split"), D2("data.val_labels"));
    FAIL_IF(c->model.preset[0] && !gpt, "%s is a gpt shape but %s; set model.type: gpt or remove the preset",
            D1("model.preset"), D2("model.type"));
    /* (model.type auto: the weights' own (eval's, sample's), which no setting changes) */
    const bool weights_type = st_config_source(c, "model.type") == ST_SRC_AUTO;
    FAIL_IF(
        gpt && !tokens && weights_type,
        "%s reads tokens but %s; leave data.type out (or set it to tokens), and give token files as the data",
        D1("model.type"), D2("data.type"));
    FAIL_IF(gpt && !tokens,
            "%s trains on tokens but %s; set data.type: tokens and data.train to a token file",
            D1("model.type"), D2("data.type"));
    FAIL_IF(!gpt && tokens && weights_type,
            "%s reads images and labels but %s; set data.type: idx or npy, the data these weights were "
            "trained on",
            D1("model.type"), D2("data.type"));
    FAIL_IF(!gpt && tokens, "%s reads images and labels but %s; set data.type: idx or npy, or model.type: gpt",
            D1("model.type"), D2("data.type"));
    FAIL_IF(gpt && c->model.n_embd % c->model.n_head,
            "%s is not divisible by %s; make n_embd a multiple of n_head", D1("model.n_embd"),
            D2("model.n_head"));
    FAIL_IF(cnn && c->model.channels.n == 0, "%s is empty; a cnn needs at least one conv block",
            D1("model.channels"));
    FAIL_IF(cnn && c->model.pool.n != c->model.channels.n,
            "%s has %d entries but %s has %d; give one pool entry per conv block", D1("model.pool"),
            c->model.pool.n, D2("model.channels"), c->model.channels.n);
    FAIL_IF(!tokens && !c->data.train_labels[0], "%s is empty; %s data needs a labels file",
            D1("data.train_labels"), c->data.type);
    /* (an error about the pair's labels then named data.train: the file's path says which key) */
    FAIL_IF(!tokens && c->data.train[0] && !strcmp(c->data.train, c->data.train_labels),
            "%s names the same file as %s; set it to the labels file that pairs with the inputs",
            D1("data.train_labels"), D2("data.train"));
    FAIL_IF(!tokens && c->data.val[0] && !strcmp(c->data.val, c->data.val_labels),
            "%s names the same file as %s; set it to the labels file that pairs with the inputs",
            D1("data.val_labels"), D2("data.val"));
    FAIL_IF(tokens && (c->data.augment_crop_pad > 0 || c->data.augment_flip),
            "%s and %s are image augmentations but %s; set them to 0 and false", D1("data.augment_crop_pad"),
            D2("data.augment_flip"), st_config_describe(c, "data.type", c3, sizeof c3));
    FAIL_IF(c->log.trace_steps.n != 2 || c->log.trace_steps.v[0] > c->log.trace_steps.v[1],
            "%s: expected [first, last] with first <= last, e.g. [10, 20]", D1("log.trace_steps"));
    FAIL_IF(!tokens && c->data.val[0] && !c->data.val_labels[0],
            "%s is empty but data.val is set; give the validation labels, or set data.val: \"\" to skip "
            "evaluation",
            D1("data.val_labels"));
    FAIL_IF(c->log.sample_every > 0 && strcmp(c->model.type, "gpt") != 0,
            "%s prints text samples, which only a gpt draws, and this run's model is %s: set "
            "log.sample_every: 0",
            D1("log.sample_every"), st_config_describe(c, "model.type", c3, sizeof c3));
    FAIL_IF(c->train.eval_every > 0 && !c->data.val[0] && !(c->data.val_split > 0),
            "%s asks for evaluations but data.val is empty; set data.val or train.eval_every: 0",
            D1("train.eval_every"));
    if (c->train.micro_batch_size != ST_AUTO && c->train.batch_size % c->train.micro_batch_size) {
        /* the divisors of the batch nearest the micro-batch given, below and above it */
        const int64_t batch = c->train.batch_size, mb = c->train.micro_batch_size;
        int64_t lo = mb < batch ? mb : batch, hi = mb;
        /* (a divisor of a batch of 2^30 may lie far off: the search is bounded, 1 and the batch stand) */
        for (int64_t k = 0; lo > 1 && batch % lo; k++)
            lo = k < 100000 ? lo - 1 : 1;
        for (int64_t k = 0; hi < batch && batch % hi; k++)
            hi = k < 100000 ? hi + 1 : batch;
        char near[64];
        if (hi <= batch && hi != lo)
            snprintf(near, sizeof near, "%lld or %lld", (long long)lo, (long long)hi);
        else
            snprintf(near, sizeof near, "%lld", (long long)lo);
        FAIL_IF(true,
                "%s does not divide %s; the global batch is split into equal micro-batches: set "
                "train.micro_batch_size to a divisor of %lld (the nearest: %s), or auto",
                D1("train.micro_batch_size"), D2("train.batch_size"), (long long)batch, near);
    }
    FAIL_IF(c->train.steps != ST_AUTO && c->optim.warmup_steps > c->train.steps,
            "%s is longer than %s; shorten the warmup or train longer", D1("optim.warmup_steps"),
            D2("train.steps"));
    FAIL_IF(
        (float)c->model.dropout >= 1.0f, /* (the layers keep it as a float) */
        "%s rounds to 1 in single precision: every activation would be dropped; use a value below 0.99999",
        D1("model.dropout"));
    FAIL_IF(!c->train.out_dir[0], "%s is empty; set it to the folder the run writes to (e.g. runs/my-run)",
            D1("train.out_dir"));
    FAIL_IF(
        c->dist.deterministic && !strcmp(c->model.matmul_tune, "on"),
        "%s chooses each matrix product's algorithm by timing it, so two runs may sum in other orders, and "
        "%s promises the same bits on any number of ranks; set model.matmul_tune: off (or auto) to keep "
        "that promise, or dist.deterministic: false",
        D1("model.matmul_tune"), D2("dist.deterministic"));
    FAIL_IF(c->dist.sync_batchnorm && c->dist.deterministic,
            "%s and %s exclude each other: deterministic mode gives the same bits on any number of ranks, "
            "and batch-norm statistics over all ranks change with it; set one of them to false",
            D1("dist.sync_batchnorm"), D2("dist.deterministic"));
    FAIL_IF(!strcmp(c->optim.type, "sgd") && c->optim.nesterov && c->optim.momentum == 0,
            "%s but %s; Nesterov needs momentum > 0", D1("optim.nesterov"), D2("optim.momentum"));
    return ST_OK;
}

st_status st_config_validate_eval(const st_config *c) {
    if (c->data.val[0] || c->data.val_split > 0) return ST_OK;
    return st_fail(ST_ERR_CONFIG, "nothing to evaluate: data.val is empty; set it to the validation data "
                                  "(--set data.val=FILE; with data.val_labels for idx and npy)");
}

/* The data paths' defaults are Fashion-MNIST's idx files: with another
 * data.type a path left at its default names a file of the wrong format,
 * which the reader would only report once the run had started, without
 * naming the key. For the commands that read the data (train, eval, slurm's
 * script); plan and bench do not. */
st_status st_config_validate_data(const st_config *c, bool eval_only) {
    char a[512], b[512], where[sizeof c->path + 8] = "";
    if (c->path[0]) snprintf(where, sizeof where, "%s: ", c->path);
    const bool tokens = !strcmp(c->data.type, "tokens");
    /* (session.c: an evaluation of tokens opens data.val alone) */
    const bool no_train = eval_only && tokens && c->data.val[0] && !(c->data.val_split > 0);
    FAIL_IF(!no_train && !c->data.train[0], "%s is empty; set it to the training %s", D1("data.train"),
            tokens ? "token file" : "images");
    if (!strcmp(c->data.type, "idx")) return ST_OK;
    FAIL_IF(!no_train && DEFAULTED("data.train"),
            "%s is Fashion-MNIST's idx file but %s; set data.train to the %s", D1("data.train"),
            D2("data.type"), tokens ? "token file" : "inputs .npy file");
    FAIL_IF(!tokens && DEFAULTED("data.train_labels"),
            "%s is Fashion-MNIST's idx file but %s; set data.train_labels to the labels .npy file",
            D1("data.train_labels"), D2("data.type"));
    FAIL_IF(c->data.val[0] && DEFAULTED("data.val") && !(c->data.val_split > 0),
            "%s is Fashion-MNIST's idx file but %s; set data.val to the validation %s%s", D1("data.val"),
            D2("data.type"), tokens ? "token file" : "inputs .npy file",
            eval_only ? "" : ", or data.val: \"\" to train without evaluation");
    FAIL_IF(!tokens && c->data.val[0] && DEFAULTED("data.val_labels") && !(c->data.val_split > 0),
            "%s is Fashion-MNIST's idx file but %s; set data.val_labels to the validation labels .npy file",
            D1("data.val_labels"), D2("data.type"));
    return ST_OK;
}

#undef D1
#undef D2
#undef DEFAULTED
