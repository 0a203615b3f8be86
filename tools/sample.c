/* `scaletrain sample`: continue a prompt with a trained gpt's weights.
 *
 * The model is the one the weights' metadata records (every model.* setting
 * a run saves with them); a CONFIG or --set settles what a file without it
 * does not say. Text is the byte-level tokenizer's (vocabulary 256, `data
 * tokenize`): a prompt's bytes are its tokens, and tokens are printed as
 * bytes. Another vocabulary takes its prompt as token ids and prints ids,
 * or text through an llm.c tokenizer file (--tokenizer, decoding only). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/blas.h"
#include "core/device.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "hw/probe.h"
#include "model/sample.h"
#include "train/checkpoint.h"

#define SAMPLE_USAGE                                                                                         \
    "usage: scaletrain sample [CONFIG.yaml] --init WEIGHTS [--prompt TEXT | --prompt-file FILE |\n"          \
    "        --prompt-ids I,J,...] [--tokens N] [--samples N] [--temperature T] [--top-k K] [--top-p P]\n"   \
    "        [--seed S] [--stop-id I] [--tokenizer FILE] [--no-graph] [--set key=value]... [--json] "        \
    "[--quiet]\n"

#define BYTE_VOCAB 256 /* the byte-level tokenizer's vocabulary (data tokenize) */
/* what a device without room for the samples advises (st_generate's windows, the device's allocations) */
#define NOMEM_ADVICE "draw fewer samples at a time (--samples), or sample on the CPU (--set train.device=cpu)"

/* An llm.c tokenizer file (gpt2_tokenizer.bin): a header of 256 uint32
 * (20240328, version 1 or 2, the vocabulary, version 2's end-of-text
 * token), then each token as a length byte and its bytes. */
typedef struct tokenizer {
    int64_t n, eot;
    char **piece;
    unsigned char *len;
} tokenizer;

static void tokenizer_free(tokenizer *t) {
    for (int64_t i = 0; t->piece && i < t->n; i++)
        free(t->piece[i]);
    free(t->piece);
    free(t->len);
    memset(t, 0, sizeof *t);
}

static st_status tokenizer_load(const char *path, tokenizer *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail(ST_ERR_IO, "--tokenizer %s: %s", path, strerror(errno));
    uint32_t h[256];
    st_status s = ST_OK;
    if (fread(h, sizeof h, 1, f) != 1 || h[0] != 20240328u || (h[1] != 1 && h[1] != 2) || h[2] < 1 ||
        h[2] > (1u << 24))
        s = st_fail(
            ST_ERR_FORMAT,
            "--tokenizer %s is not an llm.c tokenizer file (a header of 256 uint32: 20240328, version 1 or "
            "2, the vocabulary size, the end-of-text token; then each token as a length byte and its "
            "bytes)",
            path);
    if (s == ST_OK) {
        t->n = h[2];
        t->eot = h[1] == 2 ? (int64_t)h[3] : 50256;
        t->piece = calloc((size_t)t->n, sizeof *t->piece);
        t->len = calloc((size_t)t->n, 1);
        if (!t->piece || !t->len) s = st_fail(ST_ERR_NOMEM, "out of memory reading --tokenizer %s", path);
    }
    for (int64_t i = 0; s == ST_OK && i < t->n; i++) {
        int c = fgetc(f);
        if (c != EOF) t->len[i] = (unsigned char)c;
        t->piece[i] = c == EOF ? NULL : malloc((size_t)t->len[i] + 1);
        if (c == EOF || !t->piece[i] || fread(t->piece[i], 1, t->len[i], f) != t->len[i])
            s = st_fail(ST_ERR_FORMAT, "--tokenizer %s ends inside token %lld of the %lld its header names",
                        path, (long long)i, (long long)t->n);
    }
    fclose(f);
    if (s != ST_OK) tokenizer_free(t);
    return s;
}

typedef struct sampler {
    FILE *out;
    bool stream;    /* print each token as it comes (one sample, not --json) */
    bool bytes;     /* tokens are bytes (the byte-level vocabulary) */
    tokenizer *tok; /* or text through this; else ids */
    int64_t drawn;
} sampler;

/* Token `t` as the output reads it. */
static void put_token(FILE *f, const sampler *sp, int32_t t, bool first) {
    if (sp->bytes) {
        fputc(t, f);
    } else if (sp->tok) {
        if (t < sp->tok->n)
            fwrite(sp->tok->piece[t], 1, sp->tok->len[t], f);
        else
            fprintf(f, "<|%d|>", t); /* (a padded vocabulary's: no text) */
    } else {
        fprintf(f, "%s%d", first ? "" : " ", t);
    }
}

static st_status emit(void *ctx, int64_t b, int32_t tok, int64_t n) {
    sampler *sp = ctx;
    (void)b;
    sp->drawn++;
    if (sp->stream) {
        put_token(sp->out, sp, tok, false);
        fflush(sp->out);
        if (ferror(sp->out)) return st_fail(ST_ERR_IO, "standard output: %s", strerror(errno));
    }
    (void)n;
    return ST_OK;
}

/* A count for an option, min..max. */
static bool int_arg(const char *opt, const char *v, long long min, long long max, int64_t *out) {
    return st_cli_int_arg("sample", opt, v, min, max, SAMPLE_USAGE, out);
}

static bool real_arg(const char *opt, const char *v, double min, double max, bool min_open, double *out) {
    char *end;
    errno = 0;
    const double x = v ? strtod(v, &end) : 0;
    /* (decimal only: strtod would read hex and "inf"; an underflow to a subnormal or 0 is a number) */
    const bool decimal = v && *v && strspn(v, "0123456789.eE+-") == strlen(v);
    if (!decimal || *end || (errno && !(errno == ERANGE && fabs(x) < 1)) || !isfinite(x) || x < min ||
        (min_open && x == min) || x > max) {
        fprintf(stderr, "scaletrain sample: %s needs a number %s %g and <= %g, not '%s'\n" SAMPLE_USAGE, opt,
                min_open ? ">" : ">=", min, max, v ? v : "");
        return false;
    }
    *out = x;
    return true;
}

/* "1,2,3" into ids (n; caller frees), each 0..INT32_MAX. */
static st_status ids_arg(const char *v, int32_t **ids, int64_t *n) {
    *n = 0;
    if (!(*ids = malloc((strlen(v) / 2 + 2) * sizeof **ids)))
        return st_fail(ST_ERR_NOMEM, "out of memory for --prompt-ids");
    for (const char *p = v; *p;) {
        char *end;
        errno = 0;
        const long long x =
            *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : -1; /* (digits: no sign, no space) */
        const int len = (int)strcspn(p, ",");
        if (*p == '-' && p[1] >= '0' && p[1] <= '9')
            return st_fail(ST_ERR_CONFIG, "--prompt-ids '%s': %.*s is negative; token ids are 0 or more", v,
                           len, p);
        if (x >= 0 && (errno == ERANGE || x > INT32_MAX) && (!*end || *end == ','))
            return st_fail(ST_ERR_CONFIG, "--prompt-ids '%s': %.*s is past the largest token id, %d", v, len,
                           p, INT32_MAX);
        if (x < 0 || errno || x > INT32_MAX || (*end && (*end != ',' || !end[1])))
            return st_fail(
                ST_ERR_CONFIG,
                "--prompt-ids '%s': expected token ids separated by commas, e.g. --prompt-ids 464,3290", v);
        (*ids)[(*n)++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    return *n ? ST_OK : st_fail(ST_ERR_CONFIG, "--prompt-ids '%s' holds no token id", v);
}

/* The model the weights' metadata records, into cfg's keys the user left
 * at their defaults (a CONFIG or --set wins; the load then names any
 * difference), and the model's inputs: the vocabulary from the file (its
 * metadata, or wte's rows when it says nothing) and the context. */
static st_status model_from_weights(st_config *cfg, const char *path, st_model_input *in) {
    st_safetensors *f;
    ST_TRY(st_safetensors_open(path, &f));
    st_status s = st_model_file_is_weights(f, path);
    const char *kind = st_safetensors_metadata(f, "model");
    if (kind && strcmp(kind, "gpt") != 0)
        s = st_fail(ST_ERR_CONFIG, "%s holds a %s's weights: scaletrain sample continues text with a gpt",
                    path, kind);
    if (s == ST_OK) s = st_model_config_from_file(cfg, f, path);
    const st_safetensors_entry *wte = st_safetensors_find(f, "wte.weight");
    if (s == ST_OK && cfg->model.vocab_size == ST_AUTO) {
        if (!wte || wte->ndim != 2)
            s = st_fail(ST_ERR_CONFIG,
                        "%s has no wte.weight of 2 dimensions to read the vocabulary from: set "
                        "model.vocab_size (--set model.vocab_size=N)",
                        path);
        else
            cfg->model.vocab_size = wte->shape[0];
    }
    st_safetensors_close(f);
    ST_TRY(s);
    st_generate_config(cfg);
    ST_TRY(st_config_validate(cfg));
    *in = (st_model_input){.vocab_size = cfg->model.vocab_size, .seq_len = cfg->model.block_size};
    return ST_OK;
}

/* bytes (n) as a JSON string, quoted: valid UTF-8 passed through, a byte
 * of no valid sequence as U+FFFD, control characters (NUL included) and
 * the quote and backslash escaped. Caller frees; NULL when out of memory. */
static char *json_text(const unsigned char *s, size_t n) {
    char *o = malloc(6 * n + 3), *w = o;
    if (!o) return NULL;
    *w++ = '"';
    for (size_t i = 0; i < n;) {
        const unsigned char c = s[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\')
                w += sprintf(w, "\\%c", c);
            else if (c < 0x20)
                w += sprintf(w, "\\u%04x", c);
            else
                *w++ = (char)c;
            i++;
            continue;
        }
        const size_t k = st_utf8_len(s + i, n - i);
        if (k) {
            memcpy(w, s + i, k);
            w += k;
            i += k;
        } else {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    *w++ = '"';
    *w = '\0';
    return o;
}

/* A sample's tokens as a JSON string of their text (bytes or the
 * tokenizer's pieces), or NULL (ids: no text). */
static char *decode_json(const sampler *sp, const int32_t *t, int64_t n) {
    if (!sp->bytes && !sp->tok) return NULL;
    char *buf = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&buf, &size);
    if (!m) return NULL;
    for (int64_t i = 0; i < n; i++)
        put_token(m, sp, t[i], false);
    fclose(m);
    char *js = buf ? json_text((const unsigned char *)buf, size) : NULL;
    free(buf);
    return js;
}

/* ids as a JSON array's text, "[464,3290]" (NULL when out of memory): a
 * cJSON node per token took some 90 bytes of one (1.7 GB for a 19 MB
 * prompt). */
static char *ids_json(const int32_t *t, int64_t n) {
    char *buf = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&buf, &size);
    if (!m) return NULL;
    fputc('[', m);
    for (int64_t i = 0; i < n; i++)
        fprintf(m, i ? ",%d" : "%d", t[i]);
    fputc(']', m);
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int print_json(const sampler *sp, const int32_t *out, const int64_t *lens, int64_t n_samples,
                      int64_t total, int64_t n_prompt, int64_t dropped, uint64_t seed, const char *weights,
                      const char *device, double secs, const st_generate_stats *gs) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    cJSON_AddStringToObject(o, "weights", weights);
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddRawToObject(o, "seed", seed_s); /* (a number, to the last digit) */
    char *pr = ids_json(out, n_prompt);
    bool ok = pr != NULL;
    if (pr) cJSON_AddRawToObject(o, "prompt", pr);
    free(pr);
    cJSON_AddNumberToObject(o, "prompt_dropped", (double)dropped); /* (tokens before the context's) */
    cJSON_AddNumberToObject(o, "new_tokens", (double)sp->drawn);
    cJSON_AddNumberToObject(o, "seconds", secs);
    cJSON_AddNumberToObject(o, "tokens_per_s", secs > 0 ? (double)sp->drawn / secs : 0);
    cJSON_AddNumberToObject(o, "cached_steps", (double)gs->cached_steps);
    cJSON_AddNumberToObject(o, "replayed_steps", (double)gs->replayed_steps);
    for (int64_t b = 0; b < n_samples; b++) {
        cJSON *e = cJSON_CreateObject();
        const int32_t *t = out + b * total;
        char *ids = ids_json(t + n_prompt, lens[b] - n_prompt);
        ok &= ids != NULL;
        if (ids) cJSON_AddRawToObject(e, "tokens", ids);
        free(ids);
        char *text = decode_json(sp, t + n_prompt, lens[b] - n_prompt);
        if (text) cJSON_AddRawToObject(e, "text", text); /* (cJSON's strings end at a NUL byte) */
        ok &= text || (!sp->bytes && !sp->tok);
        free(text);
        cJSON_AddItemToArray(arr, e);
    }
    cJSON_AddItemToObject(o, "samples", arr);
    char *js = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!js) return st_cli_error(st_fail(ST_ERR_NOMEM, "out of memory writing the JSON result"));
    printf("%s\n", js);
    free(js);
    return ST_EXIT_OK;
}

/* What the command line asks. */
typedef struct sample_args {
    const char *prompt, *prompt_file, *prompt_ids, *tokenizer;
    int64_t n_new, n_samples, stop_id, top_k, seed;
    bool seed_given, json, quiet, no_graph;
    double temperature, top_p;
} sample_args;

/* The sampling options into a; the rest (CONFIG, --set, --init, --json,
 * --quiet) to the run options' parser, into cfg and opts. Returns -1 or an
 * exit code. */
static int parse_args(int argc, char **argv, sample_args *a, st_config *cfg, st_run_opts *opts) {
    *a = (sample_args){.n_new = 200, .n_samples = 1, .stop_id = -1, .temperature = 1.0, .top_p = 1.0};
    st_config_defaults(
        cfg); /* (st_cli_run_args starts there too: a usage error returns a config all the same) */
    /* (st_cli_run_args sets a gpt and the data type it reads first, as the
     * only model sample runs: the settings validate before the weights'
     * metadata fills the rest of the model; no data is read) */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return st_cli_error(st_fail(ST_ERR_NOMEM, "sample: out of memory"));
    int nrest = 0, rc = -1;
    static const char *const opts_v[] = {"--prompt", "--prompt-file", "--prompt-ids", "--tokenizer",
                                         "--tokens", "--samples",     "--top-k",      "--stop-id",
                                         "--seed",   "--temperature", "--top-p"};
    enum { N_OPTS = sizeof opts_v / sizeof opts_v[0] };
    bool given[N_OPTS] = {false};
    for (int i = 0; i < argc && rc < 0; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k = 0;
        while (k < N_OPTS && strcmp(o, opts_v[k]) != 0)
            k++;
        if (k == N_OPTS && !strcmp(o, "--no-graph")) {
            a->no_graph = true;
            continue;
        }
        if (k == N_OPTS && (!strcmp(o, "--json") || !strcmp(o, "--quiet"))) {
            a->json |= !strcmp(o, "--json");
            a->quiet |= !strcmp(o, "--quiet");
            continue;
        }
        if (k == N_OPTS) { /* CONFIG, --set, --init: the run options' parser's */
            rest[nrest++] = argv[i];
            if ((!strcmp(o, "--set") || !strcmp(o, "--init")) && v) rest[nrest++] = argv[++i];
            continue;
        }
        i++;
        bool ok = true;
        if (given[k]) {
            fprintf(stderr, "scaletrain sample: %s given twice; give it once\n", o);
            ok = false;
        } else if (!v) {
            fprintf(stderr, "scaletrain sample: %s needs a value\n" SAMPLE_USAGE, o);
            ok = false;
        }
        given[k] = true;
        if (!ok) {
        } else if (!strcmp(o, "--prompt")) {
            a->prompt = v;
            if (!v[0]) fprintf(stderr, "scaletrain sample: --prompt is empty: give at least one byte\n");
            ok = v[0] != '\0';
        } else if (!strcmp(o, "--prompt-file")) {
            a->prompt_file = v;
        } else if (!strcmp(o, "--prompt-ids")) { /* (its form here, a usage error; its range against the
                                                  * weights' vocabulary, prompt_tokens) */
            int32_t *ids = NULL;
            int64_t n;
            a->prompt_ids = v;
            if (ids_arg(v, &ids, &n) != ST_OK) {
                fprintf(stderr, "scaletrain sample: %s\n" SAMPLE_USAGE, st_last_error());
                st_clear_error();
                ok = false;
            }
            free(ids);
        } else if (!strcmp(o, "--tokenizer"))
            a->tokenizer = v;
        else if (!strcmp(o, "--tokens"))
            ok = int_arg(o, v, 0, 1 << 24, &a->n_new);
        else if (!strcmp(o, "--samples"))
            ok = int_arg(o, v, 1, 4096, &a->n_samples);
        else if (!strcmp(o, "--top-k"))
            ok = int_arg(o, v, 0, INT32_MAX, &a->top_k);
        else if (!strcmp(o, "--stop-id"))
            ok = int_arg(o, v, 0, INT32_MAX, &a->stop_id);
        else if (!strcmp(o, "--seed"))
            ok = a->seed_given = int_arg(o, v, 0, INT64_MAX, &a->seed);
        else if (!strcmp(o, "--temperature"))
            ok = real_arg(o, v, 0, 100, false, &a->temperature);
        else
            ok = real_arg(o, v, 0, 1, true, &a->top_p);
        if (!ok) rc = ST_EXIT_USAGE;
    }
    if (rc < 0 && !!a->prompt + !!a->prompt_file + !!a->prompt_ids > 1) {
        fprintf(stderr, "scaletrain sample: give one of --prompt, --prompt-file and --prompt-ids\n");
        rc = ST_EXIT_USAGE;
    }
    if (rc < 0) rc = st_cli_run_args("sample", nrest, rest, cfg, opts);
    free(rest);
    if (rc < 0 && !opts->init) {
        fprintf(stderr, "scaletrain sample: --init WEIGHTS is required (e.g. runs/gpt/model.safetensors, a "
                        "checkpoint, or a run's out_dir)\n" SAMPLE_USAGE);
        rc = ST_EXIT_USAGE;
    }
    if (rc < 0 && !a->seed_given) { /* a seed of its own, said, so that the sample can be drawn again */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        a->seed =
            (int64_t)(st_mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid()) >>
                      33);
    }
    return rc;
}

/* train.device: auto takes the first GPU when there is one its kernels can
 * run on (and the CPU otherwise, *why saying why); cuda and cuda:N insist,
 * and an obstacle is an error. *dev NULL: the CPU. */
static st_status open_device(const st_config *cfg, st_device **dev, char *why, size_t n) {
    *dev = NULL;
    snprintf(why, n, "train.device cpu");
    const char *d = cfg->train.device;
    if (strcmp(d, "cpu") == 0) return ST_OK;
    const int want = strncmp(d, "cuda:", 5) == 0 ? atoi(d + 5) : 0;
    const int count = st_device_cuda_count(why, n);
    if (count > 0 && want >= count) {
        snprintf(why, n, "this machine has %d CUDA device(s), cuda:0 to cuda:%d", count, count - 1);
    } else if (count > 0) {
        const st_status o = st_device_open_cuda(want, dev);
        if (o != ST_ERR_UNSUPPORTED && o != ST_ERR_NOMEM) return o; /* (opened, or an error to say) */
        if (o == ST_ERR_NOMEM) /* (the device's own message speaks of training's settings) */
            snprintf(why, n, "cuda:%d has too little free memory to start on (another process holds it?)",
                     want);
        else
            snprintf(why, n, "%s", st_last_error());
        st_clear_error();
    }
    if (strcmp(d, "auto") == 0) return ST_OK;
    return st_fail(ST_ERR_UNSUPPORTED, "train.device %s: %s; use train.device: cpu (or auto)", d, why);
}

/* The last `keep` bytes of the file at path (*len of them; *total: all it
 * held), read through once in pieces (a pipe's too), the rest passed over:
 * a file of any size takes keep bytes of memory (it was read whole, and
 * each sample held a copy of it as ints). NULL with errno on failure. */
static unsigned char *read_tail(const char *path, size_t keep, size_t *len, uint64_t *total) {
    /* (pieces at least keep long: the tail moved to the front once a piece, not keep bytes for
     * every 64 KiB read, 16 times the file's bytes for a context of 1 Mi) */
    const size_t piece = keep > (1 << 16) ? keep : 1 << 16;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(keep + piece);
    size_t n = 0;
    *total = 0;
    for (size_t r; buf && (r = fread(buf + n, 1, piece, f)) > 0;) {
        n += r;
        *total += r;
        if (n > keep) { /* (the last keep bytes to the front) */
            memmove(buf, buf + n - keep, keep);
            n = keep;
        }
    }
    const int err = !buf ? ENOMEM : ferror(f) ? (errno ? errno : EIO) : 0; /* (a directory: EISDIR) */
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    *len = n;
    return buf;
}

/* Only the last `block` of the n ids kept, in place: how many went. */
static int64_t keep_last(int32_t *ids, int64_t *n, int64_t block) {
    if (*n <= block) return 0;
    const int64_t gone = *n - block;
    memmove(ids, ids + gone, (size_t)block * sizeof *ids);
    *n = block;
    return gone;
}

/* The prompt as tokens (*ids, n of them; caller frees): --prompt-ids,
 * --prompt or --prompt-file's bytes (the byte-level vocabulary), or with
 * neither a new line (bytes) or the tokenizer's end of text; each checked
 * against the model's vocabulary V. Only the last `block` (the model's
 * context) are kept: the model reads no more of a longer prompt (st_generate
 * continues from its last window); *dropped says how many it held before
 * them. */
static st_status prompt_tokens(const sample_args *a, const sampler *sp, int64_t V, int64_t block,
                               int32_t **ids, int64_t *n, int64_t *dropped) {
    *ids = NULL;
    *n = 0;
    *dropped = 0;
    if (a->prompt_ids) {
        ST_TRY(ids_arg(a->prompt_ids, ids, n));
        for (int64_t i = 0; i < *n; i++)
            if ((*ids)[i] >= V)
                return st_fail(ST_ERR_CONFIG,
                               "--prompt-ids: token %d is outside the model's vocabulary of %lld (0 to %lld)",
                               (*ids)[i], (long long)V, (long long)(V - 1));
        *dropped = keep_last(*ids, n, block);
        return ST_OK;
    }
    const char *opt = a->prompt_file ? "--prompt-file" : "--prompt";
    unsigned char *text = NULL;
    size_t len = 0;
    if (a->prompt_file) {
        uint64_t all = 0;
        if (!(text = read_tail(a->prompt_file, (size_t)block, &len, &all)))
            return st_fail(errno == ENOMEM ? ST_ERR_NOMEM : ST_ERR_IO, "%s %s: %s", opt, a->prompt_file,
                           strerror(errno));
        *dropped = (int64_t)(all - len);
    } else if (a->prompt) {
        if (!(text = (unsigned char *)strdup(a->prompt)))
            return st_fail(ST_ERR_NOMEM, "out of memory for the prompt");
        len = strlen(a->prompt);
    }
    st_status s = ST_OK;
    if (text && !sp->bytes)
        s = sp->tok
                ? st_fail(ST_ERR_CONFIG,
                          "%s with --tokenizer %s: its tokens are not bytes, and scaletrain decodes them but "
                          "cannot encode text into them: give the prompt as token ids (--prompt-ids I,J,...)",
                          opt, a->tokenizer)
                : st_fail(ST_ERR_CONFIG,
                          "%s takes text for the byte-level tokenizer's vocabulary of 256 (data tokenize), "
                          "and these weights' vocabulary is %lld tokens: give the prompt as token ids "
                          "(--prompt-ids I,J,...)",
                          opt, (long long)V);
    else if (!text && !sp->bytes && !sp->tok)
        s = st_fail(
            ST_ERR_CONFIG,
            "the weights' vocabulary is %lld tokens, not the byte-level tokenizer's 256: give a prompt as "
            "token ids (--prompt-ids I,J,...), or --tokenizer FILE (llm.c's) to start at its end of text",
            (long long)V);
    else if (!text && sp->tok && sp->tok->eot >= V)
        s = st_fail(
            ST_ERR_CONFIG,
            "--tokenizer %s's end-of-text token, %lld, is outside the model's vocabulary of %lld: it is "
            "not the tokenizer of these weights' data; give a prompt (--prompt-ids I,J,...)",
            a->tokenizer, (long long)sp->tok->eot, (long long)V);
    else if (text && len == 0)
        s = st_fail(ST_ERR_CONFIG, "%s%s%s is empty: give at least one byte", opt, a->prompt_file ? " " : "",
                    a->prompt_file ? a->prompt_file : "");
    if (s == ST_OK) {
        *n = text ? (int64_t)len : 1;
        if (!(*ids = malloc((size_t)*n * sizeof **ids)))
            s = st_fail(ST_ERR_NOMEM, "out of memory for the prompt");
    }
    for (int64_t i = 0; s == ST_OK && i < *n; i++)
        (*ids)[i] = text ? text[i] : sp->bytes ? '\n' : (int32_t)sp->tok->eot;
    free(text);
    if (s == ST_OK) *dropped += keep_last(*ids, n, block); /* (a file's: its tail read already) */
    return s;
}

int st_cmd_sample(int argc, char **argv) {
    sample_args a;
    st_config cfg;
    st_run_opts opts = {0};
    const int rc = parse_args(argc, argv, &a, &cfg, &opts);
    if (rc >= 0) return rc;

    /* the weights, the model they record (loaded: a setting that differs
     * from theirs is named before anything else), how tokens read */
    char path[4096];
    int64_t step;
    st_model_input in = {0};
    st_model *m = NULL;
    tokenizer tk = {0};
    st_device *dev = NULL;
    char why[256] = "";
    st_status s = st_ckpt_weights(opts.init, stderr, path, sizeof path, &step);
    if (s == ST_OK) s = model_from_weights(&cfg, path, &in);
    if (s == ST_OK) s = open_device(&cfg, &dev, why, sizeof why);
    char advice[] =
        NOMEM_ADVICE; /* (not training's remedies; a sentence of its own in the device's message) */
    advice[0] = (char)toupper((unsigned char)advice[0]);
    st_device_set_oom_advice(dev, advice);
    if (s == ST_OK) {
        const int threads = cfg.train.threads == ST_AUTO ? st_hw_allowed_cpus() : (int)cfg.train.threads;
        omp_set_num_threads(threads > 0 ? threads : 1);
        openblas_set_num_threads(threads > 0 ? threads : 1);
        s = st_model_create_inference(&cfg, &in, dev, &m);
    }
    if (s == ST_OK) s = st_model_load(m, path);
    if (s == ST_ERR_NOMEM && dev && strcmp(cfg.train.device, "auto") == 0) { /* the CPU, saying why */
        snprintf(why, sizeof why, "%s has no room for the model", st_device_name(dev));
        st_clear_error();
        st_model_free(m);
        m = NULL;
        st_device_free(dev);
        dev = NULL;
        s = st_model_create_inference(&cfg, &in, NULL, &m);
        if (s == ST_OK) s = st_model_load(m, path);
    }
    if (s == ST_ERR_NOMEM && dev) /* (the device's own message speaks of training's settings) */
        s = st_fail(ST_ERR_NOMEM,
                    "%s has no room for the model and its kernels' workspace: free the GPU, or sample on the "
                    "CPU (--set train.device=cpu)",
                    st_device_name(dev));
    if (s == ST_OK && a.tokenizer) s = tokenizer_load(a.tokenizer, &tk);
    if (s == ST_OK && a.tokenizer && tk.n > in.vocab_size)
        s = st_fail(ST_ERR_CONFIG,
                    "--tokenizer %s has %lld tokens, more than the model's vocabulary of %lld: it is not the "
                    "tokenizer of the data these weights learnt",
                    a.tokenizer, (long long)tk.n, (long long)in.vocab_size);
    sampler sp = {.out = stdout,
                  .stream = a.n_samples == 1 && !a.json,
                  .bytes = !a.tokenizer && in.vocab_size == BYTE_VOCAB,
                  .tok = a.tokenizer ? &tk : NULL};
    int32_t *ptok = NULL, *out = NULL;
    int64_t n_prompt = 0, dropped = 0, *lens = NULL;
    if (s == ST_OK) s = prompt_tokens(&a, &sp, in.vocab_size, in.seq_len, &ptok, &n_prompt, &dropped);
    if (s == ST_OK && dropped > 0 && !a.quiet)
        fprintf(stderr,
                "sample: note: the prompt is %lld tokens, and the model reads at most its context of %lld: "
                "it continues the last %lld (the first %lld are left out, of the output too)\n",
                (long long)(n_prompt + dropped), (long long)in.seq_len, (long long)n_prompt,
                (long long)dropped);
    if (s == ST_OK && a.stop_id >= in.vocab_size)
        s = st_fail(ST_ERR_CONFIG, "--stop-id %lld is outside the model's vocabulary of %lld",
                    (long long)a.stop_id, (long long)in.vocab_size);
    const int64_t total = n_prompt + a.n_new;
    if (s == ST_OK) {
        out = malloc((size_t)(a.n_samples * total) * sizeof *out);
        lens = malloc((size_t)a.n_samples * sizeof *lens);
        if (!out || !lens)
            s = st_fail(ST_ERR_NOMEM, "out of memory for %lld samples of %lld tokens", (long long)a.n_samples,
                        (long long)total);
    }

    double secs = 0;
    st_generate_stats gs = {0};
    if (s == ST_OK) {
        char where[320];
        if (dev)
            snprintf(where, sizeof where, "on %s", st_device_name(dev));
        else
            snprintf(where, sizeof where, "%d CPU thread%s (%s)", omp_get_max_threads(),
                     omp_get_max_threads() == 1 ? "" : "s", why);
        /* (the seed said first too: a sample stopped half-way can be drawn again) */
        if (!a.quiet && !a.json)
            fprintf(stderr,
                    "sample: %s%s: a gpt of %lld parameters (vocabulary %lld, context %lld), %s, seed %lld\n",
                    path, step >= 0 ? " (a checkpoint's)" : "", (long long)m->n_params,
                    (long long)in.vocab_size, (long long)in.seq_len, where, (long long)a.seed);
        for (int64_t i = 0; sp.stream && i < n_prompt; i++)
            put_token(stdout, &sp, ptok[i], i == 0);
        const st_generate_opts go = {.p = {.temperature = a.temperature, .top_k = a.top_k, .top_p = a.top_p},
                                     .n_new = a.n_new,
                                     .n_samples = a.n_samples,
                                     .seed = (uint64_t)a.seed,
                                     .stop_token = a.stop_id,
                                     .emit = emit,
                                     .ctx = &sp,
                                     .nomem_advice = NOMEM_ADVICE,
                                     .no_graph = a.no_graph,
                                     .stats = &gs};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        s = st_generate(m, ptok, n_prompt, &go, out, lens);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (sp.stream) fputc('\n', stdout);
        if (gs.graph_note[0] && !a.quiet) fprintf(stderr, "sample: note: %s\n", gs.graph_note);
    }
    int code = ST_EXIT_OK;
    if (s == ST_OK && a.json) {
        code = print_json(&sp, out, lens, a.n_samples, total, n_prompt, dropped, (uint64_t)a.seed, path,
                          dev ? st_device_name(dev) : "cpu", secs, &gs);
    } else if (s == ST_OK) {
        for (int64_t b = 0; !sp.stream && b < a.n_samples; b++) {
            for (int64_t i = 0; i < lens[b]; i++)
                put_token(stdout, &sp, out[b * total + i], i == 0);
            fputs("\n---------------\n", stdout);
        }
    }
    /* (the text written before the line that says it was) */
    if (fflush(stdout) != 0 && s == ST_OK) s = st_fail(ST_ERR_IO, "standard output: %s", strerror(errno));
    if (s == ST_OK && !a.json && !a.quiet)
        fprintf(
            stderr,
            "sample: %lld new token%s in %.2f s (%.1f tokens/s), seed %lld (--seed %lld draws them again)\n",
            (long long)sp.drawn, sp.drawn == 1 ? "" : "s", secs, secs > 0 ? (double)sp.drawn / secs : 0.0,
            (long long)a.seed, (long long)a.seed);
    st_model_free(m);
    st_device_free(dev);
    tokenizer_free(&tk);
    free(ptok);
    free(out);
    free(lens);
    return s != ST_OK ? st_cli_error(s) : code;
}
