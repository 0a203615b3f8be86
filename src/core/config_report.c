/* Showing the configuration: the effective values as annotated YAML, as JSON,
 * and the schema as the Markdown reference in docs/config.md. All three walk
 * the schema table; none of them knows a key by name. */
#include "core/config_schema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void st_config_print(const st_config *c, FILE *out) {
    char value[2 * ST_CFG_STR + 8], from[ST_CFG_NOTE + 16], label[80];
    int label_w = 0, value_w = 0;
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        int w = (int)strlen(st_cfg_leaf(key)) + (st_cfg_section_len(key) ? 3 : 1);
        st_cfg_format(c, i, value, sizeof value);
        int vw = (int)strlen(value);
        if (w > label_w) label_w = w;
        if (vw > value_w && vw <= 40) value_w = vw; /* a long path pushes out its own comment only */
    }
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t seclen = st_cfg_section_len(key);
        if (seclen && st_cfg_section_first(key, seclen) == i) fprintf(out, "%.*s:\n", (int)seclen, key);
        snprintf(label, sizeof label, "%s%s:", seclen ? "  " : "", st_cfg_leaf(key));
        st_cfg_format(c, i, value, sizeof value);
        fprintf(out, "%-*s %-*s  # %s\n", label_w, label, value_w, value,
                st_cfg_origin(c, i, from, sizeof from));
    }
}

/* ---- JSON ---- */

static cJSON *value_json(const st_config *c, int row) {
    const st_cfg_key *k = &st_cfg_keys[row];
    const void *field = (const char *)c + k->off;
    switch (k->type) {
    case ST_CFG_INT: {
        int64_t x;
        memcpy(&x, field, sizeof x);
        return k->auto_ok && x == ST_AUTO ? cJSON_CreateString("auto") : cJSON_CreateNumber((double)x);
    }
    case ST_CFG_FLOAT: {
        double x;
        memcpy(&x, field, sizeof x);
        return k->auto_ok && x < 0 ? cJSON_CreateString("auto") : cJSON_CreateNumber(x);
    }
    case ST_CFG_BOOL:
        return cJSON_CreateBool(*(const bool *)field);
    case ST_CFG_STRING:
    case ST_CFG_ENUM:
        return cJSON_CreateString((const char *)field);
    case ST_CFG_INT_LIST: {
        const st_int_list *l = field;
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < l->n; i++) {
            cJSON *num = cJSON_CreateNumber((double)l->v[i]);
            if (!num || !cJSON_AddItemToArray(arr, num)) {
                cJSON_Delete(num);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return NULL;
}

char *st_config_to_json(const st_config *c) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    for (int i = 0; ok && i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t seclen = st_cfg_section_len(key);
        cJSON *parent = root;
        if (seclen) {
            char sec[64];
            snprintf(sec, sizeof sec, "%.*s", (int)seclen, key);
            parent = cJSON_GetObjectItemCaseSensitive(root, sec);
            if (!parent) parent = cJSON_AddObjectToObject(root, sec);
        }
        cJSON *item = parent ? value_json(c, i) : NULL;
        ok = item && cJSON_AddItemToObject(parent, st_cfg_leaf(key), item);
        if (!ok) cJSON_Delete(item);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) st_fail(ST_ERR_NOMEM, "st_config_to_json: out of memory");
    return text;
}

/* ---- Markdown ---- */

typedef struct md {
    char *p;
    size_t n, cap;
    bool oom;
} md;

static void put(md *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(md *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (m->oom || need < 0) return;
    if (m->n + (size_t)need + 1 > m->cap) {
        size_t cap = 2 * (m->n + (size_t)need + 1);
        char *grown = realloc(m->p, cap);
        if (!grown) {
            m->oom = true;
            return;
        }
        m->p = grown, m->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(m->p + m->n, m->cap - m->n, fmt, ap);
    va_end(ap);
    m->n += (size_t)need;
}

/* Table cell text: a | would end the cell. */
static void put_cell(md *m, const char *s) {
    for (; *s; s++)
        put(m, *s == '|' ? "\\|" : "%c", *s);
}

static void put_accepted(md *m, const st_cfg_key *k) {
    char range[128];
    st_cfg_range_text(k, range, sizeof range);
    switch (k->type) {
    case ST_CFG_INT:
        put(m, "integer %s%s", range, k->auto_ok ? ", or `auto`" : "");
        break;
    case ST_CFG_FLOAT:
        put(m, "%s%s", range, k->auto_ok ? ", or `auto`" : "");
        break;
    case ST_CFG_BOOL:
        put(m, "`true`, `false`");
        break;
    case ST_CFG_STRING:
        put(m, "text, at most %zu bytes", k->size - 1);
        break;
    case ST_CFG_ENUM:
        for (int i = 0; k->values[i]; i++)
            put(m, "%s`%s`", i ? ", " : "", k->values[i][0] ? k->values[i] : "\"\"");
        break;
    case ST_CFG_INT_LIST:
        if (k->count)
            put(m, "%d integers, each %s", k->count, range);
        else
            put(m, "up to %d integers, each %s", ST_CFG_LIST, range);
        break;
    }
}

char *st_config_schema_markdown(void) {
    static const char *const type_names[] = {"int", "float", "bool", "string", "enum", "int list"};
    md m = {0};
    put(&m, "<!-- Generated from the schema in src/core/config_schema.c by st_config_schema_markdown();\n"
            "     edit the schema, then regenerate this part: build/tests/test_config --markdown -->\n");
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const st_cfg_key *k = &st_cfg_keys[i];
        size_t seclen = st_cfg_section_len(k->key);
        if (!seclen || st_cfg_section_first(k->key, seclen) == i) {
            put(&m, "\n### %.*s\n\n", (int)(seclen ? seclen : strlen(k->key)), k->key);
            put(&m, "| key | type | default | accepted | description |\n|---|---|---|---|---|\n");
        }
        put(&m, "| `%s` | %s | `", k->key, type_names[k->type]);
        put_cell(&m, k->def);
        put(&m, "` | ");
        put_accepted(&m, k);
        put(&m, " | ");
        put_cell(&m, k->doc);
        put(&m, " |\n");
    }
    put(&m,
        "\n### presets\n\n`%s` sets these keys wherever they still hold their default:\n\n"
        "| preset | sets |\n|---|---|\n",
        ST_CFG_PRESET_KEY);
    for (int i = 0; i < st_cfg_npresets; i++) {
        const st_cfg_preset *p = &st_cfg_presets[i];
        bool first = i == 0 || strcmp(st_cfg_presets[i - 1].name, p->name);
        bool last = i + 1 == st_cfg_npresets || strcmp(st_cfg_presets[i + 1].name, p->name);
        if (first) put(&m, "| `%s` | ", p->name);
        put(&m, "%s`%s: %s`%s", first ? "" : ", ", st_cfg_leaf(p->key), p->value, last ? " |\n" : "");
    }
    if (m.oom) {
        free(m.p);
        st_fail(ST_ERR_NOMEM, "st_config_schema_markdown: out of memory");
        return NULL;
    }
    return m.p;
}
