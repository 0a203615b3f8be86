/* Token files (format in tokens.h and docs/formats.md): the mapped reader
 * (the atomic writer and the byte-level tokenizer are tokenize.c).
 *
 * The header is read with pread and checked against the file's exact size
 * before the file is mapped, so no token is read from outside the file. The
 * writer streams through a temporary file whose header is filled in last,
 * which lets the tokenizer write inputs larger than memory.
 *
 * A mapped file that shrinks while it is open (rewritten in place: `cp` over
 * it, a tool that truncates and writes) makes a read past its new end raise
 * SIGBUS, which would end the run without a word. The reads that return a
 * status (st_tokens_read_i32, st_tokens_check_range) run under a handler
 * that brings such a fault back to them as an error naming the file; a SIGBUS
 * anywhere else meets the action it had before (st_tokens_get is unguarded).
 * A file shortened within its mapping's last page reads zeros there, no
 * fault: st_tokens_read_i32 looks at the file's size when it reads that page.
 * Not caught: a file shortened to the middle of an earlier page reads zeros
 * past its new end in that page alone (the pages after it fault), and a
 * file rewritten in place reads its new bytes; a check of the size at every
 * read would cost a stat a sample, a round trip to a network file system's
 * server. Files are replaced safely by renaming new ones over them. */
#include "data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/sniff.h"
#include "core/text.h"

/* One file of the stream. */
typedef struct tok_shard {
    char *path;
    const uint8_t *map; /* the whole file, read-only */
    size_t map_bytes;
    const uint8_t *data; /* past the header (64 bytes; llm.c's 1024): (count) tokens of token_bytes each */
    int64_t start;       /* its first token's position in the stream */
    int64_t count;
    uint64_t vocab_size;
    int token_bytes;
    int header_bytes;
    const char *format; /* "scaletrain", "llm.c GPT-2", "llm.c LLaMA 3" */
    dev_t dev;          /* the mapped file's, to tell it from a file renamed over its path since */
    ino_t ino;
} tok_shard;

/* Shards, in name order, read as one stream of tokens. */
struct st_tokens {
    char *spec; /* a file, a pattern or a folder, as given */
    tok_shard *shard;
    int n_shards;
    int64_t count;
    uint64_t vocab_size;
    int token_bytes; /* the widest shard's */
};

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* A file whose first n bytes h are of a format scaletrain knows and no
 * token file's (a config, text, an IDX file): ST_ERR_FORMAT naming it and
 * what reads it. ST_OK for a token file's bytes or unknown ones. */
static st_status known_stranger(const char *path, const uint8_t *h, size_t n) {
    const st_file_kind k = n > 0 ? st_sniff(h, n) : (st_file_kind){ST_FILE_UNKNOWN, "", ""};
    if (k.format == ST_FILE_UNKNOWN || k.format == ST_FILE_TOKENS || k.format == ST_FILE_LLMC_TOKENS)
        return ST_OK;
    return st_fail(ST_ERR_FORMAT, "%s: not a token file but %s; %s", path, k.what, k.use);
}

/* Check a 64-byte header against the file size; fills t's sizes. */
static st_status check_header(const char *path, const uint8_t *h, int64_t size, tok_shard *t) {
    if (memcmp(h, ST_TOKENS_MAGIC, 8) != 0) {
        ST_TRY(known_stranger(path, h, ST_TOKENS_HEADER_BYTES));
        return st_fail(
            ST_ERR_FORMAT,
            "%s: not a token file (magic %02x %02x %02x %02x %02x %02x %02x %02x, expected \"STTOKENS\", "
            "or llm.c's); make one with `scaletrain data tokenize`",
            path, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    }
    uint32_t version = get_u32(h + 8), tb = get_u32(h + 12);
    uint64_t count = get_u64(h + 16), vocab = get_u64(h + 24);
    if (version != ST_TOKENS_VERSION)
        return st_fail(ST_ERR_FORMAT, "%s: token file version %u; this build reads version %d%s", path,
                       version, ST_TOKENS_VERSION,
                       version > ST_TOKENS_VERSION ? " (the file is from a newer scaletrain)" : "");
    if (tb != 2 && tb != 4)
        return st_fail(ST_ERR_FORMAT, "%s: token width %u bytes; it must be 2 or 4; the header is corrupt",
                       path, tb);
    for (int i = 32; i < ST_TOKENS_HEADER_BYTES; i++)
        if (h[i] != 0)
            return st_fail(ST_ERR_FORMAT, "%s: reserved header byte %d is not zero; the header is corrupt",
                           path, i);
    if (count == 0) return st_fail(ST_ERR_FORMAT, "%s: the file holds no tokens", path);
    if (count > (uint64_t)(INT64_MAX - ST_TOKENS_HEADER_BYTES) / tb)
        return st_fail(ST_ERR_FORMAT, "%s: token count %llu is impossibly large; the header is corrupt", path,
                       (unsigned long long)count);
    int64_t want = ST_TOKENS_HEADER_BYTES + (int64_t)count * tb;
    if (size != want)
        return st_fail(
            ST_ERR_FORMAT,
            "%s: the header says %llu tokens of %u bytes (%lld bytes with the header) but the file is "
            "%lld bytes%s; it is %s",
            path, (unsigned long long)count, tb, (long long)want, (long long)size,
            (size - ST_TOKENS_HEADER_BYTES) % tb ? " (it ends mid-token)" : "",
            size < want ? "truncated: write it again" : "longer than its header says: corrupt");
    if (vocab < 2) /* (one token: every prediction right, a loss of 0 from the first step) */
        return st_fail(ST_ERR_FORMAT,
                       "%s: the header's vocab_size is %llu: a language model needs at least 2 tokens; the "
                       "header is damaged, or another program wrote it (write it again with scaletrain data "
                       "tokenize)",
                       path, (unsigned long long)vocab);
    if (vocab > ((uint64_t)1 << (8 * tb)))
        return st_fail(ST_ERR_FORMAT, "%s: vocab_size %llu does not fit %u-byte tokens (2..%llu)", path,
                       (unsigned long long)vocab, tb, (unsigned long long)((uint64_t)1 << (8 * tb)));
    t->count = (int64_t)count;
    t->vocab_size = vocab;
    t->token_bytes = (int)tb;
    t->header_bytes = ST_TOKENS_HEADER_BYTES;
    t->format = "scaletrain";
    return ST_OK;
}

/* llm.c's token files (its dev/data scripts write them: FineWeb,
 * TinyShakespeare, ... in GPT-2's BPE): 256 little-endian int32s (magic,
 * version, token count, the rest unused), then the tokens. Its two kinds:
 * GPT-2's (uint16 tokens, vocabulary 50257) and LLaMA 3's (uint32, 128256). */
static const struct llmc_kind {
    uint32_t magic, version;
    int token_bytes;
    uint64_t vocab_size;
    const char *name;
} llmc_kinds[] = {{20240520, 1, 2, 50257, "llm.c GPT-2"}, {20240801, 7, 4, 128256, "llm.c LLaMA 3"}};

static const struct llmc_kind *llmc_kind_of(const uint8_t *h) {
    for (size_t i = 0; i < sizeof llmc_kinds / sizeof llmc_kinds[0]; i++)
        if (get_u32(h) == llmc_kinds[i].magic) return &llmc_kinds[i];
    return NULL;
}

/* Check llm.c's header (its first 12 bytes in h) against the file size. */
static st_status check_llmc_header(const char *path, const struct llmc_kind *k, const uint8_t *h,
                                   int64_t size, tok_shard *t) {
    const uint32_t version = get_u32(h + 4), count = get_u32(h + 8);
    if (version != k->version)
        return st_fail(ST_ERR_FORMAT, "%s: an %s token file of version %u; scaletrain reads version %u", path,
                       k->name, version, k->version);
    if (count == 0 || count > INT32_MAX)
        return st_fail(ST_ERR_FORMAT,
                       "%s: an %s token file whose header says %u tokens; the header is corrupt", path,
                       k->name, count);
    const int64_t want = ST_TOKENS_LLMC_HEADER_BYTES + (int64_t)count * k->token_bytes;
    if (size != want)
        return st_fail(ST_ERR_FORMAT,
                       "%s: the %s header says %u tokens of %d bytes (%lld bytes with the header) but the "
                       "file is %lld bytes; it is %s",
                       path, k->name, count, k->token_bytes, (long long)want, (long long)size,
                       size < want ? "truncated: write it again" : "longer than its header says: corrupt");
    t->count = count;
    t->vocab_size = k->vocab_size;
    t->token_bytes = k->token_bytes;
    t->header_bytes = ST_TOKENS_LLMC_HEADER_BYTES;
    t->format = k->name;
    return ST_OK;
}

/* ---- reads of the mappings, guarded against SIGBUS ---- */

/* The reading thread's way back from a fault (NULL outside a guarded read). */
static _Thread_local sigjmp_buf *volatile bus_jmp;
static _Thread_local const char *volatile bus_addr; /* the faulting address, for the message */
static struct sigaction bus_old;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_bus(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    sigjmp_buf *j = bus_jmp;
    if (j) {
        bus_jmp = NULL;
        bus_addr = (const char *)si->si_addr;
        siglongjmp(*j, 1);
    }
    sigaction(SIGBUS, &bus_old, NULL); /* returning repeats the fault, which the old action meets */
}

/* SA_NODEFER: the signal mask is the same in the handler as outside it, so
 * the jump back need not restore it (sigsetjmp(j, 0): no system call). */
static void bus_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &bus_old);
}

/* The error for a fault while reading sh from token i (the token the
 * faulting address holds, where the fault gave one inside sh's tokens). */
static st_status bus_error(const tok_shard *sh, int64_t i) {
    ST_INVARIANT(sh, "a read fault before a token shard was chosen"); /* bus_jmp is set after it */
    const char *a = bus_addr;
    bus_addr = NULL;
    if (a && a >= (const char *)sh->data && a < (const char *)sh->data + sh->count * sh->token_bytes)
        i = (int64_t)(a - (const char *)sh->data) / sh->token_bytes;
    struct stat sb;
    const int64_t now = stat(sh->path, &sb) == 0 ? (int64_t)sb.st_size : -1;
    if (now >= 0 && now < (int64_t)sh->map_bytes)
        return st_fail(ST_ERR_IO,
                       "%s: the file was shortened while it was read (%lld bytes now, %zu when it was "
                       "opened; reading from token %lld): it was rewritten in place (cp over it, or a "
                       "tool that truncates); write new data to a new file and rename it over the old "
                       "(`scaletrain data tokenize` does), then run again (a training run: continue with "
                       "--resume auto)",
                       sh->path, (long long)now, sh->map_bytes, (long long)i);
    return st_fail(ST_ERR_IO,
                   "%s: the storage could not supply token %lld of the mapped file (%s): an I/O error, "
                   "or a network file system that dropped it; check the storage, then run again (a "
                   "training run: continue with --resume auto)",
                   sh->path, (long long)i, now < 0 ? strerror(errno) : "its size is unchanged");
}

/* Map one file and check its header. */
static st_status open_shard(const char *path, tok_shard *t) {
    if (!(t->path = strdup(path))) return st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
    st_status s = ST_OK;
    struct stat sb;
    int fd = st_open_read(path, &sb);
    if (fd < 0) return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        ST_GOTO(st_fail(ST_ERR_IO,
                        "%s: %s, not a regular file: a token file is mapped, so give the file itself", path,
                        st_file_type_name(sb.st_mode)));
    int64_t size = (int64_t)sb.st_size;
    uint8_t h[ST_TOKENS_HEADER_BYTES];
    if (size < ST_TOKENS_HEADER_BYTES) { /* what a short file is, where its bytes say (a config, text) */
        const ssize_t got = size > 0 ? pread(fd, h, (size_t)size, 0) : 0;
        ST_GOTO(known_stranger(path, h, got > 0 ? (size_t)got : 0));
        ST_GOTO(
            st_fail(ST_ERR_FORMAT,
                    "%s: the file is %lld bytes, shorter than the %d-byte header; it is truncated or not a "
                    "scaletrain token file (make one with `scaletrain data tokenize`)",
                    path, (long long)size, ST_TOKENS_HEADER_BYTES));
    }
    const ssize_t hr = pread(fd, h, sizeof h, 0);
    if (hr != (ssize_t)sizeof h)
        ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot read the header: %s", path,
                        hr < 0 ? strerror(errno) : "the file became shorter while it was opened"));
    const struct llmc_kind *llmc = llmc_kind_of(h);
    if (llmc && size < ST_TOKENS_LLMC_HEADER_BYTES)
        ST_GOTO(st_fail(ST_ERR_FORMAT,
                        "%s: the file is %lld bytes, shorter than %s's %d-byte header; it is truncated", path,
                        (long long)size, llmc->name, ST_TOKENS_LLMC_HEADER_BYTES));
    ST_GOTO(llmc ? check_llmc_header(path, llmc, h, size, t) : check_header(path, h, size, t));
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED && errno == ENOMEM) /* (each shard is a mapping: vm.max_map_count bounds them) */
        ST_GOTO(st_fail(ST_ERR_IO,
                        "%s: cannot map: %s; a process may hold vm.max_map_count mappings (65530 by "
                        "default), and each shard is one: tokenize into fewer, larger shards (data tokenize "
                        "--shard-tokens), or raise it (sysctl vm.max_map_count=262144)",
                        path, strerror(ENOMEM)));
    if (map == MAP_FAILED) ST_GOTO(st_fail(ST_ERR_IO, "%s: cannot map: %s", path, strerror(errno)));
    t->map = map;
    t->map_bytes = (size_t)size;
    t->data = t->map + t->header_bytes;
    t->dev = sb.st_dev;
    t->ino = sb.st_ino;
fail:
    close(fd);
    return s;
}

static bool has_wildcard(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* The glob pattern a spec of several files stands for: the pattern itself, or
 * a folder's *.tokens; false for one file (a '*' in an existing file's name
 * included), which is opened as it is. */
static bool shard_pattern(const char *spec, char *pat, size_t size, bool *dir) {
    *dir = false;
    if (st_path_is_file(spec)) return false;
    if (has_wildcard(spec)) {
        snprintf(pat, size, "%s", spec);
        return true;
    }
    if (!st_path_is_dir(spec)) return false; /* one file: opening it says what is wrong */
    *dir = true;
    snprintf(pat, size, "%s/*.tokens", spec);
    return true;
}

bool st_tokens_bin_pattern(const char *dir, char *pat, size_t size) {
    int n = (int)strlen(dir); /* without its trailing slashes */
    while (n > 1 && dir[n - 1] == '/')
        n--;
    snprintf(pat, size, "%.*s/*.bin", n, dir);
    glob_t g;
    const bool any = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return any;
}

/* The files a spec names, sorted: the pattern's matches, a folder's
 * *.tokens, or none (one file). */
static st_status expand(const char *spec, glob_t *g) {
    memset(g, 0, sizeof *g);
    char pat[4096];
    bool dir;
    if (!shard_pattern(spec, pat, sizeof pat, &dir)) return ST_OK;
    const int r = glob(pat, GLOB_ERR, NULL, g);
    st_status s = ST_OK;
    char bins[4096];
    if ((r == GLOB_NOMATCH || (r == 0 && g->gl_pathc == 0)) && dir &&
        st_tokens_bin_pattern(spec, bins, sizeof bins)) {
        /* llm.c's folders hold the training shards and the validation file
         * side by side: the folder as a whole would train on both. */
        const int n =
            (int)strlen(bins) - 6; /* the folder: its pattern without the 6 bytes of its file part */
        s = st_fail(ST_ERR_IO,
                    "%s: a folder of .bin files, no .tokens files; llm.c's token folders hold training and "
                    "validation files together, so name each by a pattern (e.g. data.train: "
                    "\"%.*s/*train*.bin\", data.val: \"%.*s/*val*.bin\")",
                    spec, n, bins, n, bins);
    } else if (r == GLOB_NOMATCH || (r == 0 && g->gl_pathc == 0))
        s = dir ? st_fail(ST_ERR_IO,
                          "%s: a folder with no .tokens files; token data is a file, a pattern such as "
                          "data/train-*.tokens, or a folder of .tokens files",
                          spec)
                : st_fail(ST_ERR_IO, "%s: no file matches this pattern", spec);
    else if (r != 0) {
        /* (the folder the pattern's last part is in, where that folder is named plainly: missing, or
         * not to be read, said by name) */
        char folder[4096];
        snprintf(folder, sizeof folder, "%s", pat);
        char *slash = strrchr(folder, '/');
        if (slash) *slash = '\0';
        struct stat fs;
        const int e = slash && folder[0] && !has_wildcard(folder) && stat(folder, &fs) != 0 ? errno : 0;
        if (r != GLOB_NOSPACE && e)
            s = st_fail(ST_ERR_IO, "%s: cannot list the files it names: the folder %s: %s", spec, folder,
                        strerror(e));
        else
            s = st_fail(ST_ERR_IO, "%s: cannot list the files it names: %s", spec,
                        r == GLOB_NOSPACE ? "out of memory" : "a folder cannot be read");
    } else if (g->gl_pathc > ST_TOKENS_MAX_SHARDS)
        s = st_fail(ST_ERR_ARG, "%s: %zu files; at most %d are read as one stream (write larger shards)",
                    spec, g->gl_pathc, ST_TOKENS_MAX_SHARDS);
    if (s != ST_OK) {
        globfree(g);
        memset(g, 0, sizeof *g);
    }
    return s;
}

bool st_tokens_names_shards(const char *spec) {
    char pat[4096];
    bool dir;
    if (!spec || !shard_pattern(spec, pat, sizeof pat, &dir)) return false;
    if (!dir) return true; /* a pattern: opening it says when it matches nothing */
    glob_t g;
    const bool any = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return any;
}

st_status st_tokens_open(const char *path, st_tokens **out) {
    if (!out) return st_fail(ST_ERR_ARG, "st_tokens_open: out is NULL");
    *out = NULL;
    if (!path) return st_fail(ST_ERR_ARG, "st_tokens_open: path is NULL");
    pthread_once(&bus_once, bus_install);
    glob_t g;
    ST_TRY(expand(path, &g));
    const int n = g.gl_pathc ? (int)g.gl_pathc : 1;
    st_status s = ST_OK;
    st_tokens *t = calloc(1, sizeof *t);
    if (!t || !(t->spec = strdup(path)) || !(t->shard = calloc((size_t)n, sizeof *t->shard))) {
        if (t) free(t->spec);
        free(t);
        globfree(&g);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int k = 0; k < n; k++) {
        tok_shard *sh = &t->shard[k];
        t->n_shards = k + 1;
        ST_GOTO(open_shard(g.gl_pathc ? g.gl_pathv[k] : path, sh));
        if (k > 0 && sh->vocab_size != t->vocab_size)
            ST_GOTO(st_fail(ST_ERR_FORMAT,
                            "%s: vocab_size %llu, but %s has %llu; the shards of one stream share a "
                            "vocabulary (were they made by different tokenizers?)",
                            sh->path, (unsigned long long)sh->vocab_size, t->shard[0].path,
                            (unsigned long long)t->vocab_size));
        if (sh->count > INT64_MAX - t->count)
            ST_GOTO(st_fail(ST_ERR_FORMAT, "%s: the shards hold more than 2^63 tokens", path));
        sh->start = t->count;
        t->count += sh->count;
        t->vocab_size = sh->vocab_size;
        if (sh->token_bytes > t->token_bytes) t->token_bytes = sh->token_bytes;
    }
    globfree(&g);
    *out = t;
    return ST_OK;
fail:
    globfree(&g);
    st_tokens_close(t);
    return s;
}

void st_tokens_close(st_tokens *t) {
    if (!t) return;
    for (int k = 0; k < t->n_shards; k++) {
        if (t->shard[k].map) munmap((void *)t->shard[k].map, t->shard[k].map_bytes);
        free(t->shard[k].path);
    }
    free(t->shard);
    free(t->spec);
    free(t);
}

int64_t st_tokens_count(const st_tokens *t) { return t->count; }
uint64_t st_tokens_vocab_size(const st_tokens *t) { return t->vocab_size; }
int st_tokens_token_bytes(const st_tokens *t) { return t->token_bytes; }
int st_tokens_shards(const st_tokens *t) { return t->n_shards; }
const char *st_tokens_format(const st_tokens *t) { return t->shard[0].format; }
const char *st_tokens_shard_path(const st_tokens *t, int k) {
    return k >= 0 && k < t->n_shards ? t->shard[k].path : NULL;
}
int64_t st_tokens_shard_count(const st_tokens *t, int k) {
    return k >= 0 && k < t->n_shards ? t->shard[k].count : 0;
}
int64_t st_tokens_bytes(const st_tokens *t) {
    int64_t b = 0;
    for (int k = 0; k < t->n_shards; k++)
        b += (int64_t)t->shard[k].map_bytes;
    return b;
}

int st_tokens_shard_number(const char *path, const char *stem, size_t n) {
    if (strncmp(path, stem, n) != 0 || path[n] != '-') return -1;
    int k = 0;
    for (size_t i = n + 1; i < n + 7; i++) {
        if (path[i] < '0' || path[i] > '9') return -1;
        k = 10 * k + (path[i] - '0');
    }
    return strcmp(path + n + 7, ".tokens") == 0 ? k : -1;
}

bool st_tokens_read_twice(const st_tokens *t, st_tokens_twice *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < t->n_shards; i++) {
        const char *p = t->shard[i].path;
        const size_t len = strlen(p);
        if (len <= 7 || strcmp(p + len - 7, ".tokens") != 0) continue;
        const size_t n = len - 7;
        /* In name order the names that start with X sit together around
         * X.tokens: the block is scanned, not the whole stream. */
        int lo = i, hi = i, first = -1, found = 0;
        while (lo > 0 && strncmp(t->shard[lo - 1].path, p, n) == 0)
            lo--;
        while (hi + 1 < t->n_shards && strncmp(t->shard[hi + 1].path, p, n) == 0)
            hi++;
        int64_t sum = 0;
        for (int j = lo; j <= hi; j++)
            if (j != i && st_tokens_shard_number(t->shard[j].path, p, n) >= 0) {
                if (first < 0) first = j;
                found++;
                sum += t->shard[j].count;
            }
        if (found) {
            *out = (st_tokens_twice){.file = i, .shards = found, .first = first, .shard_count = sum};
            return true;
        }
    }
    return false;
}

bool st_tokens_twice_what(const st_tokens *t, const st_tokens_twice *tw, char *buf, size_t n) {
    const char *file = t->shard[tw->file].path, *shard = t->shard[tw->first].path,
               *s = tw->shards == 1 ? "" : "s";
    const int64_t count = t->shard[tw->file].count;
    const bool same = tw->shard_count == count;
    if (same)
        snprintf(buf, n, "%s and %d shard%s named from it (%s...) with the same %lld tokens", file,
                 tw->shards, s, shard, (long long)count);
    else
        snprintf(buf, n, "%s (%lld tokens) and %d shard%s named as if cut from it (%s..., %lld tokens)", file,
                 (long long)count, tw->shards, s, shard, (long long)tw->shard_count);
    return same;
}

static inline uint32_t token_at(const tok_shard *t, int64_t i) {
    const uint8_t *p = t->data + i * t->token_bytes;
    return t->token_bytes == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
}

/* The shard that holds stream position i (0 <= i < count). */
static const tok_shard *shard_of(const st_tokens *t, int64_t i) {
    int lo = 0, hi = t->n_shards - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t->shard[mid].start <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &t->shard[lo];
}

const char *st_tokens_path_at(const st_tokens *t, int64_t pos) {
    return t && pos >= 0 && pos < t->count ? shard_of(t, pos)->path : NULL;
}

uint32_t st_tokens_get(const st_tokens *t, int64_t i) {
    if (i < 0 || i >= t->count) return UINT32_MAX;
    const tok_shard *sh = shard_of(t, i);
    return token_at(sh, i - sh->start);
}

st_status st_tokens_check_range(const st_tokens *t) {
    if (!t) return st_fail(ST_ERR_ARG, "st_tokens_check_range: NULL");
    const tok_shard *volatile cur = NULL; /* (read after a fault) */
    sigjmp_buf j;
    if (sigsetjmp(j, 0)) return bus_error(cur, 0);
    for (int k = 0; k < t->n_shards; k++) {
        const tok_shard *sh = &t->shard[k];
        cur = sh;
        bus_jmp = &j;
        for (int64_t i = 0; i < sh->count; i++) {
            uint32_t v = token_at(sh, i);
            if (v >= sh->vocab_size) {
                bus_jmp = NULL;
                return st_fail(ST_ERR_FORMAT,
                               "%s: token %lld is %u, not below vocab_size %llu; the file is corrupt",
                               sh->path, (long long)i, v, (unsigned long long)sh->vocab_size);
            }
        }
        bus_jmp = NULL;
    }
    return ST_OK;
}

st_status st_tokens_read_i32(const st_tokens *t, int64_t start, int64_t n, int32_t *dst) {
    if (!t || (n > 0 && !dst)) return st_fail(ST_ERR_ARG, "st_tokens_read_i32: NULL argument");
    if (start < 0 || n < 0 || start > t->count || n > t->count - start)
        return st_fail(ST_ERR_ARG, "%s: tokens [%lld, %lld + %lld) are outside the %s %lld", t->spec,
                       (long long)start, (long long)start, (long long)n,
                       t->n_shards > 1 ? "shards'" : "file's", (long long)t->count);
    /* a run of tokens from each shard the range crosses */
    const tok_shard *volatile cur = NULL; /* the run being read, and its first token (after a fault) */
    volatile int64_t cur_i = 0;
    sigjmp_buf j;
    if (sigsetjmp(j, 0)) return bus_error(cur, cur_i);
    for (int64_t done = 0; done < n;) {
        const tok_shard *sh = shard_of(t, start + done);
        const int64_t i0 = start + done - sh->start;
        const int64_t m = sh->count - i0 < n - done ? sh->count - i0 : n - done;
        cur = sh;
        cur_i = i0;
        bus_jmp = &j;
        for (int64_t i = 0; i < m; i++) {
            uint32_t v = token_at(sh, i0 + i);
            if (v > INT32_MAX) {
                bus_jmp = NULL;
                return st_fail(ST_ERR_FORMAT, "%s: token %lld is %u, too large for int32", sh->path,
                               (long long)(i0 + i), v);
            }
            dst[done + i] = (int32_t)v;
        }
        bus_jmp = NULL;
        /* The mapping's last page, where the file does not fill it: a file
         * shortened within that page reads zeros past its new end there,
         * with no fault; its size is looked at when a read reaches it (the
         * same file, not one renamed over its path, which is safe) */
        const size_t page = (size_t)sysconf(_SC_PAGESIZE), tail = sh->map_bytes / page * page,
                     end = (size_t)(sh->data - sh->map) + (size_t)((i0 + m) * sh->token_bytes);
        struct stat sb;
        if (sh->map_bytes % page && end > tail && stat(sh->path, &sb) == 0 && sb.st_dev == sh->dev &&
            sb.st_ino == sh->ino && (size_t)sb.st_size < sh->map_bytes)
            return bus_error(sh, i0);
        done += m;
    }
    return ST_OK;
}
