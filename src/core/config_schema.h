/* The configuration schema, shared by src/core/config*.c (internal).
 *
 * One row per key says everything about it: its type, its field in st_config,
 * its default (as YAML text), its range or accepted values, whether `auto` is
 * accepted, and one line of documentation. Every path that sets a value
 * (defaults, presets, the file, --set) converts it with st_cfg_assign, and every
 * path that shows one (print, JSON, the docs) reads this table; no key has code
 * of its own outside st_config_validate's cross-key checks. */
#ifndef ST_CORE_CONFIG_SCHEMA_H
#define ST_CORE_CONFIG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "scaletrain/config.h"

typedef enum st_cfg_type {
    ST_CFG_INT,      /* int64_t; `auto` stored as ST_AUTO where allowed */
    ST_CFG_FLOAT,    /* double; `auto` stored as -1 where allowed */
    ST_CFG_BOOL,     /* bool */
    ST_CFG_STRING,   /* char[size] */
    ST_CFG_ENUM,     /* char[size], one of values */
    ST_CFG_INT_LIST, /* st_int_list; every entry within [lo, hi] */
} st_cfg_type;

/* Bounds of a number range that are excluded ("> 0" rather than ">= 0"). */
enum { ST_CFG_OPEN_LO = 1, ST_CFG_OPEN_HI = 2 };

typedef struct st_cfg_key {
    const char *key; /* "optim.lr"; a name without a dot is a top-level scalar */
    st_cfg_type type;
    size_t off, size;          /* the field in st_config */
    const char *def;           /* the default, as YAML text ("1e-3", "[32, 64]", "auto") */
    double lo, hi;             /* numbers and list entries; +-INFINITY = unbounded */
    int open;                  /* ST_CFG_OPEN_* */
    const char *const *values; /* enum: the accepted values, NULL-terminated */
    bool auto_ok;              /* `auto` accepted */
    const char *doc;           /* one line */
    int count;                 /* an int list's entries: exactly this many (checked by the key's own
                                * validation), or 0: 1 to ST_CFG_LIST */
} st_cfg_key;

/* A preset sets `key` to `value` (YAML text) where the user did not set it. */
typedef struct st_cfg_preset {
    const char *name, *key, *value;
} st_cfg_preset;

#define ST_CFG_PRESET_KEY "model.preset"

extern const st_cfg_key st_cfg_keys[];
extern const int st_cfg_nkeys;
extern const st_cfg_preset st_cfg_presets[];
extern const int st_cfg_npresets;

/* The row of a dotted key ("optim.lr"), or -1. */
int st_cfg_find(const char *key);

/* Length of the section part of a key ("optim" in "optim.lr"); 0 for a top-level key. */
size_t st_cfg_section_len(const char *key);

/* "lr" in "optim.lr"; the key itself for a top-level key. */
const char *st_cfg_leaf(const char *key);

/* The first row of section `name` (length n), or -1 when there is no such section. */
int st_cfg_section_first(const char *name, size_t n);

/* A YAML null: an absent node, or a plain empty, ~ or null scalar. */
bool st_cfg_is_null(const yaml_node_t *node);

/* Convert `node` (NULL = an empty plain scalar) and store it in row's field.
 * Nothing is stored unless the whole value is good. Errors read "<ctx>: ...". */
st_status st_cfg_assign(st_config *c, int row, yaml_node_t *node, yaml_document_t *doc, const char *ctx);

/* The same for a value written as YAML text (defaults, presets, --set). */
st_status st_cfg_assign_text(st_config *c, int row, const char *text, const char *ctx);

/* The value of row as YAML text (strings quoted where YAML needs it). */
void st_cfg_format(const st_config *c, int row, char *buf, size_t n);
/* s as a YAML scalar that reads back as the same string (into buf, n
 * bytes): as it is where that is safe, else double-quoted, with \", \\,
 * \n, \t, \r and \xNN escapes (for --set key=VALUE built by a command). */
void st_cfg_quote(const char *s, char *buf, size_t n);

/* Shortest text that reads back as the same double. */
void st_cfg_format_double(double v, char *buf, size_t n);

/* "> 0 and < 10", ">= 1", "any"; and "constant, cosine, linear" for an enum. */
void st_cfg_range_text(const st_cfg_key *k, char *buf, size_t n);
void st_cfg_values_text(const st_cfg_key *k, char *buf, size_t n);

/* Levenshtein distance (ignoring case) between two names when they are near
 * enough to suggest one for the other, or one starts the other; else -1. */
int st_cfg_near(const char *a, size_t na, const char *b, size_t nb);

/* Where row's value came from, as printed after it: "default", "run.yaml:7",
 * "--set", "auto: <why>", "preset gpt2-124m" (config.c). Returns buf. */
const char *st_cfg_origin(const st_config *c, int row, char *buf, size_t n);

/* Check the table itself: field sizes match types, keys are unique, sections
 * are contiguous, every default and preset value converts. For the tests. */
st_status st_cfg_schema_check(void);

#endif
