/* Writing token files (tokens.h): the atomic writer (a temporary file,
 * its header filled in last, synced and renamed) and the byte-level
 * tokenizer of `scaletrain data tokenize`, which streams its inputs through
 * it into one file or into shards. The reader is tokens.c. */
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/sniff.h"
#include "core/text.h"
#include "data/tokens.h"

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

/* ---- writing: a temporary file, header filled in last, synced and renamed ---- */

typedef struct tok_out {
    st_atomic_file af;
    FILE *fp;
    int token_bytes;
    int64_t count;
} tok_out;

static st_status out_begin(tok_out *o, const char *path, int token_bytes) {
    static const uint8_t zero[ST_TOKENS_HEADER_BYTES];
    o->token_bytes = token_bytes;
    o->count = 0;
    ST_TRY(st_atomic_open(&o->af, path));
    o->fp = o->af.fp;
    if (fwrite(zero, 1, sizeof zero, o->fp) != sizeof zero)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    return ST_OK;
}

static st_status out_put(tok_out *o, const uint32_t *tok, int64_t n) {
    uint8_t buf[4 * 4096];
    for (int64_t i = 0; i < n; i += 4096) {
        int64_t m = n - i < 4096 ? n - i : 4096;
        for (int64_t j = 0; j < m; j++) {
            uint32_t v = tok[i + j];
            if (o->token_bytes == 2)
                buf[2 * j] = (uint8_t)v, buf[2 * j + 1] = (uint8_t)(v >> 8);
            else
                put_u32(buf + 4 * j, v);
        }
        size_t nb = (size_t)(m * o->token_bytes);
        if (fwrite(buf, 1, nb, o->fp) != nb)
            return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    }
    o->count += n;
    return ST_OK;
}

static st_status out_finish(tok_out *o, uint64_t vocab_size) {
    uint8_t h[ST_TOKENS_HEADER_BYTES] = {0};
    memcpy(h, ST_TOKENS_MAGIC, 8);
    put_u32(h + 8, ST_TOKENS_VERSION);
    put_u32(h + 12, (uint32_t)o->token_bytes);
    put_u64(h + 16, (uint64_t)o->count);
    put_u64(h + 24, vocab_size);
    if (fseek(o->fp, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, o->fp) != sizeof h)
        return st_fail(ST_ERR_IO, "%s: cannot write: %s", o->af.tmp, strerror(errno));
    o->fp = NULL;
    return st_atomic_finish(&o->af); /* committed by the caller */
}

/* After a failure: drop the temporary file (the old file at path stays). */
static void out_abort(tok_out *o) {
    o->fp = NULL;
    st_atomic_abort(&o->af);
}

st_status st_tokens_write(const char *path, const uint32_t *tokens, int64_t count, uint64_t vocab_size) {
    if (!path || !tokens || count < 1)
        return st_fail(ST_ERR_ARG, "st_tokens_write: path or tokens is NULL, or count %lld < 1",
                       (long long)count);
    if (vocab_size < 2 || vocab_size > ((uint64_t)1 << 32))
        return st_fail(ST_ERR_ARG, "%s: vocab_size %llu is not in 2..2^32", path,
                       (unsigned long long)vocab_size);
    for (int64_t i = 0; i < count; i++)
        if (tokens[i] >= vocab_size)
            return st_fail(ST_ERR_ARG, "%s: token %lld is %u, not below vocab_size %llu", path, (long long)i,
                           tokens[i], (unsigned long long)vocab_size);
    tok_out o = {0};
    st_status s = out_begin(&o, path, vocab_size <= 65536 ? 2 : 4);
    if (s == ST_OK) s = out_put(&o, tokens, count);
    if (s == ST_OK) s = out_finish(&o, vocab_size);
    if (s == ST_OK) s = st_atomic_commit(&o.af);
    if (s != ST_OK) out_abort(&o);
    return s;
}

/* ---- the byte-level tokenizer: one file, or shards written by several threads ---- */

static st_status empty_input(const st_tokenize_opts *o) {
    return st_fail(ST_ERR_FORMAT, "%s%s: the input is empty (0 bytes in %d file%s); nothing to tokenize",
                   o->inputs[0], o->n_inputs > 1 ? " ..." : "", o->n_inputs, o->n_inputs > 1 ? "s" : "");
}

/* One tokenize: the inputs as one stream of bytes, cut into shards. */
typedef struct tk_run {
    const st_tokenize_opts *o;
    int64_t *sizes; /* each input's bytes (regular files), -1 when not known in advance */
    int64_t total;  /* the bytes of all inputs; -1 when some size is not known (one file: streamed) */
    int n_out;
    tok_out *out;       /* n_out */
    char (*name)[4096]; /* n_out */
    pthread_mutex_t lock;
    int next;         /* the next shard a thread takes */
    st_status status; /* the first failure, its message in msg */
    char msg[2048];
} tk_run;

/* Bytes [from, from + n) of the inputs' stream (n < 0: to the end) into o. */
static st_status tk_copy(tk_run *r, tok_out *o, int64_t from, int64_t n) {
    uint8_t buf[16384];
    uint32_t tok[16384];
    int64_t at = 0; /* the stream position where input i starts */
    for (int i = 0; i < r->o->n_inputs && n != 0; i++) {
        const char *path = r->o->inputs[i];
        const int64_t size = r->sizes[i];
        if (size >= 0 && at + size <= from) {
            at += size;
            continue;
        }
        FILE *in = fopen(path, "rb");
        if (!in) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        if (from > at && fseeko(in, (off_t)(from - at), SEEK_SET) != 0) {
            fclose(in);
            return st_fail(ST_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
        }
        int64_t got = from > at ? from - at : 0;
        size_t m;
        /* (a file of known size is read to that size at most: one that grew
         * would otherwise fill this shard with bytes the next shard's start,
         * counted from the sizes, does not skip; its size is checked after) */
        for (;;) {
            int64_t want = n >= 0 ? n : INT64_MAX;
            if (size >= 0 && size - got < want) want = size - got;
            if (want <= 0 || (m = fread(buf, 1, want < (int64_t)sizeof buf ? (size_t)want : sizeof buf, in)) == 0)
                break;
            for (size_t j = 0; j < m; j++)
                tok[j] = buf[j];
            st_status s = out_put(o, tok, (int64_t)m);
            const int sig = r->o->stop ? atomic_load_explicit(r->o->stop, memory_order_relaxed) : 0;
            if (s == ST_OK && sig) s = st_fail(ST_ERR_INTERRUPTED, "stopped by signal %d", sig);
            if (s != ST_OK) {
                fclose(in);
                return s;
            }
            got += (int64_t)m;
            if (n > 0) n -= (int64_t)m;
        }
        const bool err = ferror(in);
        struct stat sb;
        const int64_t now = size >= 0 && fstat(fileno(in), &sb) == 0 ? (int64_t)sb.st_size : size;
        fclose(in);
        if (err) return st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        if (size >= 0 && (now != size || (got != size && n != 0)))
            return st_fail(ST_ERR_IO,
                           "%s: %lld bytes where it had %lld when tokenizing began; it changed (tokenize "
                           "files that nothing writes to, or a copy of them)",
                           path, (long long)(now != size ? now : got), (long long)size);
        at += size >= 0 ? size : got;
        if (from < at) from = at;
    }
    return ST_OK;
}

static void tk_failed(tk_run *r, st_status s) {
    pthread_mutex_lock(&r->lock);
    if (r->status == ST_OK) {
        r->status = s;
        snprintf(r->msg, sizeof r->msg, "%s", st_last_error());
    }
    pthread_mutex_unlock(&r->lock);
}

static void *tk_worker(void *arg) {
    tk_run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        const int k = r->status == ST_OK && r->next < r->n_out ? r->next++ : -1;
        pthread_mutex_unlock(&r->lock);
        if (k < 0) return NULL;
        tok_out *o = &r->out[k];
        const int64_t S = r->o->shard_tokens;
        st_status s = out_begin(o, r->name[k], 2);
        if (s == ST_OK)
            s = r->n_out == 1 ? tk_copy(r, o, 0, -1)
                              : tk_copy(r, o, k * S, k * S + S < r->total ? S : r->total - k * S);
        if (s == ST_OK && o->count == 0) s = empty_input(r->o);
        if (s == ST_OK) s = out_finish(o, 256);
        if (s != ST_OK) tk_failed(r, s);
    }
}

/* Shard k's name: OUT (less a .tokens suffix) + "-%06d.tokens"; k < 0:
 * the pattern that names them all, OUT's own *?[]\ escaped (glob(3) would
 * read x[1]-*.tokens as x1-*.tokens: not the shards, and another's). */
static void shard_name(const char *out, int k, char *name, size_t size) {
    size_t n = strlen(out);
    if (n > 7 && strcmp(out + n - 7, ".tokens") == 0) n -= 7;
    if (k >= 0) {
        snprintf(name, size, "%.*s-%06d.tokens", (int)n, out, k);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < n && at + 2 < size; i++) {
        if (strchr("*?[]\\", out[i])) name[at++] = '\\';
        name[at++] = out[i];
    }
    snprintf(name + at, size - at, "-*.tokens");
}

/* Whether path is one of the n shards named from out: its "-%06d.tokens"
 * with a number below n. */
static bool is_our_shard(const char *path, const char *out, int n) {
    char first[4096];
    shard_name(out, 0, first, sizeof first);
    const int k = st_tokens_shard_number(path, first, strlen(first) - strlen("-000000.tokens")); /* (the stem) */
    return k >= 0 && k < n;
}

/* Files the shards' pattern would read besides the shards this run writes;
 * and any of this run's names that holds something else than a file (a
 * folder: the shard's rename over it would fail after others were made),
 * or a file that is not a token file (a text named so, an input among
 * them: replaced, its bytes lost, as the one-file OUT refuses it too). */
static st_status tk_strangers(tk_run *r, const char *pattern) {
    for (int k = 0; k < r->n_out; k++) {
        struct stat sb;
        if (lstat(r->name[k], &sb) == 0 && !S_ISREG(sb.st_mode) &&
            !S_ISLNK(sb.st_mode)) /* (a link is replaced) */
            return st_fail(ST_ERR_ARG,
                           "%s exists and is not a file, so the shard of that name cannot replace it; move "
                           "it away or choose another output name",
                           r->name[k]);
        st_file_kind kind;
        if (stat(r->name[k], &sb) == 0 && sb.st_size > 0 && st_sniff_regular(r->name[k], &kind) &&
            kind.format != ST_FILE_TOKENS)
            return st_fail(ST_ERR_ARG,
                           "%s exists and is not a token file (%s), and the shard of that name would replace "
                           "it: move it away (is it one of the inputs?) or choose another output name",
                           r->name[k],
                           kind.what[0] ? kind.what : "its bytes are not scaletrain's token format");
    }
    if (!pattern) return ST_OK;
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return ST_OK; /* no match */
    st_status s = ST_OK;
    for (size_t i = 0; i < g.gl_pathc && s == ST_OK; i++) {
        const bool ours = is_our_shard(g.gl_pathv[i], r->o->out, r->n_out);
        if (!ours)
            s = st_fail(ST_ERR_ARG,
                        "%s exists, and training on the pattern %s would read it with the %d shard%s this "
                        "tokenize writes; delete it (an earlier tokenize's shards: every file the pattern "
                        "names) or choose another output name",
                        g.gl_pathv[i], pattern, r->n_out, r->n_out == 1 ? "" : "s");
    }
    globfree(&g);
    return s;
}

/* An input whose first bytes are a format scaletrain knows is refused: the
 * byte-level tokenizer would train on its bytes as text without a word (a
 * token file: OUT itself or its shards among the inputs when a command is
 * run again over a folder's every file; a .gz; a program). Bytes of no
 * format that are not text either are taken, *not_text set (warned of). */
static st_status text_input(const char *path, const uint8_t *head, size_t n, bool *not_text) {
    const st_file_kind k = st_sniff(head, n);
    *not_text = n > 0 && k.format == ST_FILE_UNKNOWN;
    if (k.format == ST_FILE_TEXT || k.format == ST_FILE_CONFIG || n == 0) return ST_OK;
    if (k.format == ST_FILE_TOKENS || k.format == ST_FILE_LLMC_TOKENS)
        return st_fail(ST_ERR_FORMAT,
                       "%s: %s, not text: data tokenize reads text files. Leave it out of the inputs (is it "
                       "the output, or a shard of it, of an earlier tokenize run over the same files?); a "
                       "token file is trained on as it is (data.train)",
                       path, k.what);
    if (k.format == ST_FILE_GZIP)
        return st_fail(ST_ERR_FORMAT,
                       "%s: a gzip file, not text: data tokenize reads text files; decompress it first "
                       "(zcat %s > FILE.txt) or leave it out of the inputs",
                       path, path);
    if (k.format == ST_FILE_PDF || k.format == ST_FILE_ARCHIVE)
        return st_fail(ST_ERR_FORMAT,
                       "%s: %s, not text: data tokenize reads text files; %s, or leave it out of the inputs",
                       path, k.what, k.use);
    if (k.format != ST_FILE_UNKNOWN)
        return st_fail(ST_ERR_FORMAT,
                       "%s: %s, not text: data tokenize reads text files; leave it out of the inputs", path,
                       k.what);
    return ST_OK; /* (any other bytes are tokens, as the byte-level vocabulary takes them: 0 too) */
}

/* The inputs' regular files, (device, inode) and where given, sorted: a
 * file given twice (two paths, or the same one twice) lies next to itself. */
typedef struct tk_file {
    dev_t dev;
    ino_t ino;
    int at;
} tk_file;
static int tk_file_cmp(const void *a, const void *b) {
    const tk_file *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Said on o->log, the first few of each (a corpus folder's every file
 * can be thousands): inputs given twice (files, n of them) and those whose
 * first bytes are not text (not_text, n_not_text of them, their indices). */
static void tk_warn(const st_tokenize_opts *o, tk_file *files, int n, const int *not_text, int n_not_text) {
    enum { SAY = 3 };
    if (!o->log) return;
    for (int i = 0; i < n_not_text && i < SAY; i++)
        fprintf(o->log,
                "scaletrain data tokenize: warning: %s does not look like text (its first bytes are not "
                "UTF-8, or hold a NUL): each of its bytes becomes a token as it is; leave it out of the "
                "inputs if it is not text\n",
                o->inputs[not_text[i]]);
    if (n_not_text > SAY)
        fprintf(o->log,
                "scaletrain data tokenize: warning: ... and %d more inputs that do not look like text\n",
                n_not_text - SAY);
    qsort(files, (size_t)n, sizeof *files, tk_file_cmp);
    int again = 0; /* files given more than once */
    for (int i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && files[j].dev == files[i].dev && files[j].ino == files[i].ino;)
            j++;
        if (j - i < 2 || ++again > SAY) continue;
        char at[96] = "";
        size_t len = 0;
        for (int k = i; k < j && k < i + 4; k++)
            st_appendf(at, sizeof at, &len, "%s%d",
                       k == i       ? ""
                       : k + 1 == j ? " and "
                                    : ", ",
                       files[k].at + 1);
        if (j - i > 4) st_appendf(at, sizeof at, &len, ", ...");
        fprintf(o->log,
                "scaletrain data tokenize: warning: %s is given %d times (inputs %s, by these or other "
                "paths): its text is in the stream %d times; give each file once unless that is meant\n",
                o->inputs[files[i].at], j - i, at, j - i);
    }
    if (again > SAY)
        fprintf(o->log, "scaletrain data tokenize: warning: ... and %d more files given more than once\n",
                again - SAY);
}

st_status st_tokens_tokenize(const st_tokenize_opts *o, st_tokenize_result *res) {
    memset(res, 0, sizeof *res);
    if (!o || !o->inputs || o->n_inputs < 1 || !o->out)
        return st_fail(ST_ERR_ARG, "st_tokens_tokenize: no input files or no output path");
    if (o->shard_tokens < 0)
        return st_fail(ST_ERR_ARG, "shard size %lld tokens; it must be at least 1",
                       (long long)o->shard_tokens);
    tk_run r = {.o = o, .status = ST_OK};
    st_status s = ST_OK;
    pthread_t *th = NULL;
    int started = 0;
    pthread_mutex_init(&r.lock, NULL);
    int n_files = 0, n_not_text = 0;
    tk_file *files = NULL;
    int *not_text = NULL;
    if (!(r.sizes = calloc((size_t)o->n_inputs, sizeof *r.sizes)) ||
        !(files = calloc((size_t)o->n_inputs, sizeof *files)) ||
        !(not_text = calloc((size_t)o->n_inputs, sizeof *not_text)))
        ST_GOTO(st_fail(ST_ERR_NOMEM, "%s: out of host memory for the sizes of its %d input files", o->out,
                        o->n_inputs));
    for (int i = 0; i < o->n_inputs; i++) { /* fail before writing anything */
        const char *path = o->inputs[i] ? o->inputs[i] : "(null)";
        FILE *in = o->inputs[i] ? fopen(path, "rb") : NULL;
        if (!in)
            ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot open: %s", path,
                            o->inputs[i] ? strerror(errno) : "NULL path"));
        struct stat sb;
        const bool reg = fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode);
        r.sizes[i] = reg ? (int64_t)sb.st_size : -1;
        if (reg) files[n_files++] = (tk_file){.dev = sb.st_dev, .ino = sb.st_ino, .at = i};
        uint8_t head[512]; /* (a tar's magic is at 257) */
        const size_t got = reg ? fread(head, 1, sizeof head, in) : 0; /* (a pipe: not peeked) */
        fclose(in);
        /* (a file that says 0 bytes and holds some: /proc's and /sys's; read to its end, as a pipe, where
         * its bytes were left out) */
        const bool unsized = reg && r.sizes[i] == 0 && got > 0;
        if (unsized) r.sizes[i] = -1;
        bool binary;
        ST_GOTO(text_input(path, head, got, &binary));
        if (binary) not_text[n_not_text++] = i;
        if (r.sizes[i] < 0 && o->shard_tokens > 0)
            ST_GOTO(st_fail(ST_ERR_ARG,
                            "%s: %s; shards need every input's size before they are written (tokenize it "
                            "into one file, or save it to a file first)",
                            path,
                            unsized
                                ? "its size is not known before it is read (it says 0 bytes, as /proc and "
                                  "/sys files do)"
                                : "not a regular file"));
        r.total = r.total < 0 || r.sizes[i] < 0 ? -1 : r.total + r.sizes[i];
    }
    if (o->shard_tokens > 0 && r.total == 0) ST_GOTO(empty_input(o));
    const int64_t shards = o->shard_tokens > 0 ? (r.total + o->shard_tokens - 1) / o->shard_tokens : 1;
    if (shards > ST_TOKENS_MAX_SHARDS)
        ST_GOTO(st_fail(ST_ERR_ARG,
                        "%lld tokens in shards of %lld make %lld shards; at most %d are read as one stream: "
                        "use larger shards",
                        (long long)r.total, (long long)o->shard_tokens, (long long)shards,
                        ST_TOKENS_MAX_SHARDS));
    /* (each shard is a mapping when read: past this machine's vm.max_map_count, less room for the
     * process's own, nothing here could read them) */
    long maps = 65530;
    FILE *mc = fopen("/proc/sys/vm/max_map_count", "r");
    if (mc) {
        if (fscanf(mc, "%ld", &maps) != 1) maps = 65530;
        fclose(mc);
    }
    if (shards > maps - 4096)
        ST_GOTO(st_fail(ST_ERR_ARG,
                        "%lld tokens in shards of %lld make %lld shards; a process here may map %ld files "
                        "(vm.max_map_count), and each shard is one when it is read: use larger shards "
                        "(--shard-tokens), or raise the limit (sysctl vm.max_map_count=262144)",
                        (long long)r.total, (long long)o->shard_tokens, (long long)shards, maps));
    r.n_out = (int)shards;
    if (!(r.out = calloc((size_t)r.n_out, sizeof *r.out)) ||
        !(r.name = calloc((size_t)r.n_out, sizeof *r.name)))
        ST_GOTO(st_fail(ST_ERR_NOMEM, "out of memory for %d shards", r.n_out));
    for (int k = 0; k < r.n_out; k++)
        if (o->shard_tokens > 0)
            shard_name(o->out, k, r.name[k], sizeof r.name[k]);
        else
            snprintf(r.name[k], sizeof r.name[k], "%s", o->out);
    if (o->shard_tokens > 0) {
        shard_name(o->out, -1, res->pattern, sizeof res->pattern);
        ST_GOTO(tk_strangers(&r, res->pattern));
    } else {
        snprintf(res->pattern, sizeof res->pattern, "%s", o->out);
        ST_GOTO(tk_strangers(&r, NULL));
    }
    tk_warn(o, files, n_files, not_text, n_not_text); /* (every check passed: what is written is said) */
    int jobs = o->jobs < 1 ? 1 : o->jobs;
    if (jobs > r.n_out) jobs = r.n_out;
    if (!(th = calloc((size_t)jobs, sizeof *th)))
        ST_GOTO(st_fail(ST_ERR_NOMEM, "%s: out of host memory for %d tokenizing threads", o->out, jobs));
    for (; started < jobs - 1; started++) /* this thread is the last worker */
        if (pthread_create(&th[started], NULL, tk_worker, &r) != 0) break;
    tk_worker(&r);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (r.status != ST_OK) ST_GOTO(st_fail(r.status, "%s", r.msg));
    /* a stop that came while the last were synced (the fsync of a large
     * file takes seconds): nothing replaced, as a stop before */
    const int late = o->stop ? atomic_load_explicit(o->stop, memory_order_relaxed) : 0;
    if (late) ST_GOTO(st_fail(ST_ERR_INTERRUPTED, "stopped by signal %d", late));
    /* every shard written and synced: only now does any replace its path */
    for (int k = 0; k < r.n_out; k++) {
        if ((s = st_atomic_commit(&r.out[k].af)) != ST_OK && r.n_out > 1) {
            /* the shards before k replaced theirs (and k too, where its
             * directory's sync failed after the rename): a mix */
            char why[1024];
            snprintf(why, sizeof why, "%s", st_last_error());
            s = st_fail(s,
                        "%s; the shards before it are this tokenize's and from it on not all are (an "
                        "earlier run's, or none), so %s names a mix of the two: delete the files it names "
                        "and tokenize again",
                        why, res->pattern);
        }
        if (s != ST_OK) goto fail;
        res->count += r.out[k].count;
    }
    res->shards = r.n_out;
fail:
    for (int k = 0; r.out && k < r.n_out; k++)
        out_abort(&r.out[k]);
    free(th);
    free(r.out);
    free(r.name);
    free(r.sizes);
    free(files);
    free(not_text);
    pthread_mutex_destroy(&r.lock);
    if (s != ST_OK) memset(res, 0, sizeof *res);
    return s;
}

st_status st_tokens_from_text(const char *const *text_paths, int n_paths, const char *out_path,
                              int64_t *count_out) {
    const st_tokenize_opts o = {.inputs = text_paths, .n_inputs = n_paths, .out = out_path};
    st_tokenize_result r;
    st_status s = st_tokens_tokenize(&o, &r);
    if (count_out) *count_out = r.count;
    return s;
}
