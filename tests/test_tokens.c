/* Token files: 2- and 4-byte round trips, the byte-level tokenizer against the
 * bytes of its input, shards read as one stream (by pattern and by folder) and
 * written by several threads, and malformed files (truncated, mid-token,
 * wrong magic, bad version, out-of-vocabulary tokens, shards that disagree),
 * each a clean error naming the file, and a file shortened while open. */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "data/tokens.h"

static char dir[64];

static void put_file(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static size_t get_file(const char *path, uint8_t *buf, size_t cap) {
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(buf, 1, cap, fp) : 0;
    if (fp) fclose(fp);
    return n;
}

static void round_trip(uint64_t vocab, int want_bytes) {
    char path[256];
    snprintf(path, sizeof path, "%s/rt%llu.bin", dir, (unsigned long long)vocab);
    enum { N = 1000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(((uint64_t)i * 2654435761u) % vocab);
    tok[N - 1] = (uint32_t)(vocab - 1); /* the largest id survives */
    CHECK_OK(st_tokens_write(path, tok, N, vocab));
    uint8_t raw[64];
    CHECK(get_file(path, raw, 64) == 64 && memcmp(raw, "STTOKENS", 8) == 0 && raw[8] == 1 &&
              raw[12] == want_bytes && raw[16] == (N & 0xff) && raw[17] == (N >> 8),
          "header layout for vocab %llu", (unsigned long long)vocab);
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(path, &t));
    if (!t) return;
    CHECK(st_tokens_count(t) == N && st_tokens_vocab_size(t) == vocab &&
              st_tokens_token_bytes(t) == want_bytes,
          "count %lld vocab %llu width %d", (long long)st_tokens_count(t),
          (unsigned long long)st_tokens_vocab_size(t), st_tokens_token_bytes(t));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += st_tokens_get(t, i) != tok[i];
    CHECK(bad == 0, "%d tokens differ", bad);
    CHECK(st_tokens_get(t, -1) == UINT32_MAX && st_tokens_get(t, N) == UINT32_MAX, "get out of range");
    CHECK_OK(st_tokens_check_range(t));
    int32_t buf[100];
    if (vocab <= (uint64_t)INT32_MAX + 1) {
        CHECK_OK(st_tokens_read_i32(t, 900, 100, buf));
        for (int i = 0; i < 100; i++)
            CHECK(buf[i] == (int32_t)tok[900 + i], "read_i32[%d]", i);
    } else { /* the last token, vocab - 1, does not fit an int32 */
        CHECK_FAILS(st_tokens_read_i32(t, 900, 100, buf), ST_ERR_FORMAT, "too large for int32");
    }
    CHECK_OK(st_tokens_read_i32(t, N, 0, buf));
    CHECK_FAILS(st_tokens_read_i32(t, 950, 51, buf), ST_ERR_ARG, "outside the file's 1000");
    CHECK_FAILS(st_tokens_read_i32(t, -1, 2, buf), ST_ERR_ARG, path);
    st_tokens_close(t);
    st_tokens_close(NULL);
}

static void tokenize(void) {
    char a[256], b[256], e[256], out[256];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(b, sizeof b, "%s/b.txt", dir);
    snprintf(e, sizeof e, "%s/empty.txt", dir);
    snprintf(out, sizeof out, "%s/text.bin", dir);
    const char *ta =
        "Hello, world!\nZa\xc5\xbc\xc3\xb3\xc5\x82\xc4\x87 g\xc4\x99\xc5\x9bl\xc4\x85 ja\xc5\xba\xc5\x84\n";
    uint8_t tb[300];
    for (int i = 0; i < 300; i++)
        tb[i] = (uint8_t)(i * 7); /* every byte value, zeros included */
    put_file(a, ta, strlen(ta));
    put_file(b, tb, sizeof tb);
    put_file(e, "", 0);
    const char *in[3] = {a, e, b};
    int64_t n = 0;
    CHECK_OK(st_tokens_from_text(in, 3, out, &n));
    int64_t want = (int64_t)strlen(ta) + 300;
    CHECK(n == want, "tokenized %lld bytes, expected %lld", (long long)n, (long long)want);
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(out, &t));
    if (!t) return;
    CHECK(st_tokens_count(t) == want && st_tokens_vocab_size(t) == 256 && st_tokens_token_bytes(t) == 2,
          "tokenized header");
    int bad = 0;
    for (int64_t i = 0; i < want; i++) {
        uint32_t v = i < (int64_t)strlen(ta) ? (uint8_t)ta[i] : tb[i - (int64_t)strlen(ta)];
        bad += st_tokens_get(t, i) != v;
    }
    CHECK(bad == 0, "%d tokens differ from the input bytes", bad);
    CHECK_OK(st_tokens_check_range(t));
    st_tokens_close(t);

    const char *empty[2] = {e, e};
    CHECK_FAILS(st_tokens_from_text(empty, 2, out, &n), ST_ERR_FORMAT, "the input is empty");
    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    const char *miss[2] = {a, missing};
    CHECK_FAILS(st_tokens_from_text(miss, 2, out, &n), ST_ERR_IO, "missing.txt: cannot open");
    CHECK_OK(st_tokens_open(out, &t)); /* a failed run leaves the old output in place */
    CHECK(t && st_tokens_count(t) == want, "the old output survived");
    st_tokens_close(t);
}

/* Shards of 5, 1 and 7 tokens (vocabulary 300, so 2 bytes each) read as one
 * stream of 13, by pattern and by folder; reads that cross shards; a bad
 * token named by its shard; shards that disagree on the vocabulary. */
static void shards(void) {
    char sub[256], path[300], pat[300];
    snprintf(sub, sizeof sub, "%s/shards", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir %s", sub);
    const int counts[3] = {5, 1, 7};
    uint32_t all[13];
    for (int i = 0; i < 13; i++)
        all[i] = (uint32_t)(i * 23 + 1);
    for (int k = 0, at = 0; k < 3; at += counts[k++]) {
        snprintf(path, sizeof path, "%s/s-%06d.tokens", sub, k);
        CHECK_OK(st_tokens_write(path, all + at, counts[k], 300));
    }
    snprintf(path, sizeof path, "%s/notes.txt", sub); /* not a .tokens file: a folder skips it */
    put_file(path, "x", 1);
    snprintf(pat, sizeof pat, "%s/s-*.tokens", sub);
    const char *specs[2] = {pat, sub};
    for (int v = 0; v < 2; v++) {
        st_tokens *t = NULL;
        CHECK_OK(st_tokens_open(specs[v], &t));
        if (!t) continue;
        CHECK(st_tokens_count(t) == 13 && st_tokens_shards(t) == 3 && st_tokens_vocab_size(t) == 300 &&
                  st_tokens_shard_count(t, 1) == 1 && st_tokens_bytes(t) == 3 * 64 + 13 * 2,
              "%s: %lld tokens in %d shards", specs[v], (long long)st_tokens_count(t), st_tokens_shards(t));
        CHECK(strstr(st_tokens_shard_path(t, 2), "s-000002.tokens") && !st_tokens_shard_path(t, 3),
              "shard paths in name order");
        int bad = 0;
        for (int i = 0; i < 13; i++)
            bad += st_tokens_get(t, i) != all[i];
        CHECK(bad == 0 && st_tokens_get(t, 13) == UINT32_MAX, "%d tokens differ", bad);
        for (int start = 0; start < 13; start++) /* every range, most crossing a shard */
            for (int n = 0; start + n <= 13; n++) {
                int32_t buf[13];
                CHECK_OK(st_tokens_read_i32(t, start, n, buf));
                for (int i = 0; i < n; i++)
                    CHECK(buf[i] == (int32_t)all[start + i], "read [%d, +%d)[%d]", start, n, i);
            }
        int32_t buf[13];
        CHECK_FAILS(st_tokens_read_i32(t, 10, 4, buf), ST_ERR_ARG, "outside the shards' 13");
        CHECK_OK(st_tokens_check_range(t));
        st_tokens_close(t);
    }
    /* a bad token in the last shard: named by that file and its position there */
    uint32_t oov[7] = {1, 2, 3, 4, 5, 6, 7};
    oov[4] = 300;
    snprintf(path, sizeof path, "%s/s-000002.tokens", sub);
    CHECK_OK(st_tokens_write(path, oov, 7, 301)); /* its header says 301: refused against shard 0's 300 */
    st_tokens *t = NULL;
    CHECK_FAILS(st_tokens_open(pat, &t), ST_ERR_FORMAT, "s-000002.tokens: vocab_size 301, but ");
    CHECK(strstr(st_last_error(), "s-000000.tokens has 300"), "names the first shard: %s", st_last_error());
    uint8_t raw[64 + 14];
    CHECK(get_file(path, raw, sizeof raw) == sizeof raw, "read back %s", path);
    raw[24] = 44, raw[25] = 1; /* vocab 300 in the header, token 300 in the data */
    put_file(path, raw, sizeof raw);
    CHECK_OK(st_tokens_open(pat, &t));
    if (t) CHECK_FAILS(st_tokens_check_range(t), ST_ERR_FORMAT, "s-000002.tokens: token 4 is 300");
    st_tokens_close(t);
    t = NULL;
    snprintf(pat, sizeof pat, "%s/none-*.tokens", sub);
    CHECK_FAILS(st_tokens_open(pat, &t), ST_ERR_IO, "none-*.tokens: no file matches this pattern");
}

/* st_tokens_read_twice: X.tokens with shards named from it (X-NNNNNN.tokens)
 * is found, whatever sorts between them; names that only look alike are not. */
static void read_twice(void) {
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/twice", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir %s", sub);
    const uint32_t tok[4] = {1, 2, 3, 4};
    /* (not shards of x: x-1.tokens, x-00000a.tokens, x-0000001.tokens, xy-000000.tokens; x.tokens's
     * neighbours in name order) */
    const char *names[] = {"x-1.tokens", "x-00000a.tokens", "x-0000001.tokens", "xy-000000.tokens",
                           "x.tokens", "w.tokens", "x.tokens.tokens"};
    for (int k = 0; k < 7; k++) {
        snprintf(path, sizeof path, "%s/%s", sub, names[k]);
        CHECK_OK(st_tokens_write(path, tok, k == 4 ? 4 : 1, 256));
    }
    st_tokens *t = NULL;
    st_tokens_twice tw;
    CHECK_OK(st_tokens_open(sub, &t));
    CHECK(t && !st_tokens_read_twice(t, &tw), "no shards of x.tokens yet: found %d", t ? tw.shards : -1);
    st_tokens_close(t);
    for (int k = 0; k < 3; k++) { /* x-000000..2: 1 + 1 + 2 tokens, x.tokens's 4 */
        snprintf(path, sizeof path, "%s/x-%06d.tokens", sub, k);
        CHECK_OK(st_tokens_write(path, tok, k == 2 ? 2 : 1, 256));
    }
    CHECK_OK(st_tokens_open(sub, &t));
    CHECK(t && st_tokens_read_twice(t, &tw) && tw.shards == 3 && tw.shard_count == 4 &&
              strstr(st_tokens_shard_path(t, tw.file), "/x.tokens") &&
              strstr(st_tokens_shard_path(t, tw.first), "/x-000000.tokens"),
          "x.tokens and 3 shards with its 4 tokens");
    st_tokens_close(t);
}

/* The same bytes tokenized into one file and into shards, by 1 and 3
 * threads: the shards read back as the one file's stream; a file the
 * shards' pattern would also read is refused before anything is written. */
static void tokenize_shards(void) {
    char a[256], b[256], e[256], one[256], out[256], pat[300];
    snprintf(a, sizeof a, "%s/ta.txt", dir);
    snprintf(b, sizeof b, "%s/tb.txt", dir);
    snprintf(e, sizeof e, "%s/te.txt", dir);
    snprintf(one, sizeof one, "%s/one.tokens", dir);
    snprintf(out, sizeof out, "%s/corpus.tokens", dir);
    uint8_t ba[100], bb[57];
    for (int i = 0; i < 100; i++)
        ba[i] = (uint8_t)(i * 13 + 5);
    for (int i = 0; i < 57; i++)
        bb[i] = (uint8_t)(255 - i);
    put_file(a, ba, sizeof ba);
    put_file(b, bb, sizeof bb);
    put_file(e, "", 0);
    const char *in[4] = {a, e, b, a}; /* 257 bytes */
    CHECK_OK(st_tokens_from_text(in, 4, one, NULL));
    st_tokens *ref = NULL;
    CHECK_OK(st_tokens_open(one, &ref));
    if (!ref) return;
    for (int jobs = 1; jobs <= 3; jobs += 2) {
        const st_tokenize_opts o = {
            .inputs = in, .n_inputs = 4, .out = out, .shard_tokens = 16, .jobs = jobs};
        st_tokenize_result r;
        CHECK_OK(st_tokens_tokenize(&o, &r));
        snprintf(pat, sizeof pat, "%s/corpus-*.tokens", dir);
        CHECK(r.count == 257 && r.shards == 17 && strcmp(r.pattern, pat) == 0,
              "%d jobs: %lld tokens, %d shards, %s", jobs, (long long)r.count, r.shards, r.pattern);
        st_tokens *t = NULL;
        CHECK_OK(st_tokens_open(r.pattern, &t));
        if (!t) continue;
        int bad = 0;
        for (int64_t i = 0; i < 257; i++)
            bad += st_tokens_get(t, i) != st_tokens_get(ref, i);
        CHECK(bad == 0 && st_tokens_count(t) == 257 && st_tokens_shards(t) == 17 &&
                  st_tokens_shard_count(t, 16) == 1,
              "%d jobs: %d tokens differ from the one file's", jobs, bad);
        st_tokens_close(t);
    }
    /* a file of another name that the pattern reads: refused, then the same tokenize again is fine */
    char other[300];
    snprintf(other, sizeof other, "%s/corpus-old.tokens", dir);
    put_file(other, "x", 1);
    const st_tokenize_opts again = {.inputs = in, .n_inputs = 4, .out = out, .shard_tokens = 16, .jobs = 2};
    st_tokenize_result r;
    CHECK_FAILS(st_tokens_tokenize(&again, &r), ST_ERR_ARG, "corpus-old.tokens exists");
    unlink(other);
    CHECK_OK(st_tokens_tokenize(&again, &r));
    /* fewer, larger shards over the 17: shards 5..16 would join the pattern */
    const st_tokenize_opts big = {.inputs = in, .n_inputs = 4, .out = out, .shard_tokens = 64, .jobs = 2};
    CHECK_FAILS(st_tokens_tokenize(&big, &r), ST_ERR_ARG, "corpus-000005.tokens exists");
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(pat, &t)); /* untouched */
    CHECK(t && st_tokens_shards(t) == 17 && st_tokens_shard_count(t, 0) == 16, "the old shards stay");
    st_tokens_close(t);
    /* shards need sizes known in advance; a failure mid-way leaves the old file */
    const char *dev[2] = {a, "/dev/null"};
    const st_tokenize_opts o2 = {.inputs = dev, .n_inputs = 2, .out = out, .shard_tokens = 16};
    CHECK_FAILS(st_tokens_tokenize(&o2, &r), ST_ERR_ARG, "/dev/null: not a regular file");
    const char *withdir[2] = {a, dir}; /* a folder opens, then cannot be read */
    CHECK_FAILS(st_tokens_from_text(withdir, 2, one, NULL), ST_ERR_IO, "cannot read");
    CHECK_OK(st_tokens_open(one, &t));
    CHECK(t && st_tokens_count(t) == 257, "the old file stays");
    st_tokens_close(t);
    const st_tokenize_opts zero = {.inputs = in, .n_inputs = 1, .out = out, .shard_tokens = -1};
    CHECK_FAILS(st_tokens_tokenize(&zero, &r), ST_ERR_ARG, "at least 1");
    const char *empties[1] = {e};
    const st_tokenize_opts none = {.inputs = empties, .n_inputs = 1, .out = out, .shard_tokens = 8};
    CHECK_FAILS(st_tokens_tokenize(&none, &r), ST_ERR_FORMAT, "the input is empty");
    st_tokens_close(ref);
}

/* A file with these bytes must fail to open with `code`, naming it and `needle`. */
static void bad(const char *label, const uint8_t *bytes, size_t n, st_status code, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.bin", dir, label);
    put_file(path, bytes, n);
    st_tokens *t = (st_tokens *)1;
    st_clear_error();
    st_status s = st_tokens_open(path, &t);
    CHECK(s == code && t == NULL, "%s: got %s (%s)", label, st_status_name(s), st_last_error());
    CHECK(strstr(st_last_error(), path) && strstr(st_last_error(), needle), "%s: message \"%s\" lacks '%s'",
          label, st_last_error(), needle);
}

static void malformed(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/good.bin", dir);
    uint32_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
    CHECK_OK(st_tokens_write(path, tok, 10, 10));
    uint8_t good[128], b[128];
    size_t size = get_file(path, good, sizeof good);
    CHECK(size == 64 + 20, "good file is %zu bytes", size);
    const st_status F = ST_ERR_FORMAT;

    bad("cut0", good, 0, F, "the file is 0 bytes, shorter than the 64-byte header");
    bad("cut40", good, 40, F, "shorter than the 64-byte header");
    bad("cut64", good, 64, F, "but the file is 64 bytes");
    bad("midtoken", good, 83, F,
        "the header says 10 tokens of 2 bytes (84 bytes with the header) but the file "
        "is 83 bytes (it ends mid-token); it is truncated");
    bad("cut80", good, 80, F, "but the file is 80 bytes; it is truncated");
    memcpy(b, good, size);
    b[84] = 0, b[85] = 0;
    bad("long", b, 86, F, "longer than its header says");
    memcpy(b, good, size);
    memcpy(b, "GPT2TOKS", 8);
    bad("magic", b, size, F, "not a token file (magic 47 50 54 32");
    bad("magic2", b, size, F, "make one with `scaletrain data tokenize`");
    memcpy(b, good, size);
    b[8] = 2;
    bad("version", b, size, F, "version 2; this build reads version 1 (the file is from a newer scaletrain)");
    memcpy(b, good, size);
    b[12] = 3;
    bad("width", b, size, F, "token width 3 bytes");
    memcpy(b, good, size);
    b[40] = 1;
    bad("reserved", b, size, F, "reserved header byte 40 is not zero");
    memcpy(b, good, size);
    memset(b + 24, 0, 8);
    bad("vocab0", b, size, F, "the header's vocab_size is 0: a language model needs at least 2 tokens");
    memcpy(b, good, size);
    memset(b + 24, 0, 8);
    b[24] = 1;
    bad("vocab1", b, size, F, "the header's vocab_size is 1: a language model needs at least 2 tokens");
    memcpy(b, good, size);
    b[26] = 2; /* vocab 131082 in 2-byte tokens */
    bad("vocabwide", b, size, F, "vocab_size 131082 does not fit 2-byte tokens");
    memcpy(b, good, size);
    memset(b + 16, 0, 8);
    bad("count0", b, 64, F, "holds no tokens");
    memcpy(b, good, size);
    memset(b + 16, 0xff, 8);
    bad("counthuge", b, size, F, "impossibly large");

    /* a token outside the vocabulary: opens, but the scan names it */
    memcpy(b, good, size);
    b[64 + 2 * 7] = 10; /* token 7 becomes 10, vocab is 10 */
    snprintf(path, sizeof path, "%s/oov.bin", dir);
    put_file(path, b, size);
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(path, &t));
    if (t) CHECK_FAILS(st_tokens_check_range(t), F, "oov.bin: token 7 is 10, not below vocab_size 10");
    st_tokens_close(t);

    snprintf(path, sizeof path, "%s/nope.bin", dir);
    CHECK_FAILS(st_tokens_open(path, &t), ST_ERR_IO, "nope.bin: cannot open");
    char empty_dir[300];
    snprintf(empty_dir, sizeof empty_dir, "%s/empty.d", dir);
    CHECK(mkdir(empty_dir, 0755) == 0, "mkdir %s", empty_dir);
    CHECK_FAILS(st_tokens_open(empty_dir, &t), ST_ERR_IO, "empty.d: a folder with no .tokens files");
    CHECK_FAILS(st_tokens_write(path, tok, 10, 9), ST_ERR_ARG, "token 8 is 9, not below vocab_size 9");
    CHECK_FAILS(st_tokens_write(path, tok, 0, 9), ST_ERR_ARG, "count 0");
    CHECK_FAILS(st_tokens_write(path, tok, 10, ((uint64_t)1 << 32) + 1), ST_ERR_ARG, "not in 2..2^32");
    CHECK_FAILS(st_tokens_write(path, (uint32_t[]){0, 0}, 2, 1), ST_ERR_ARG,
                "vocab_size 1 is not in 2..2^32");
    CHECK(access(path, F_OK) != 0, "a failed write created %s", path);
    snprintf(path, sizeof path, "%s/no/dir/x.bin", dir);
    CHECK_FAILS(st_tokens_write(path, tok, 10, 10), ST_ERR_IO, "no/dir/x.bin");

    /* every cut of a valid file is refused; random header bytes never crash */
    for (size_t len = 0; len < size; len++) {
        snprintf(path, sizeof path, "%s/cut.bin", dir);
        put_file(path, good, len);
        CHECK(st_tokens_open(path, &t) == F && t == NULL && strstr(st_last_error(), path), "cut at %zu: %s",
              len, st_last_error());
    }
    uint64_t seed = 7;
    for (int iter = 0; iter < 500; iter++) {
        memcpy(b, good, size);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        b[(seed >> 33) % 64] ^= (uint8_t)(1 + (seed >> 20) % 255);
        put_file(path, b, size);
        st_status s = st_tokens_open(path, &t);
        CHECK(s == ST_OK || (t == NULL && strstr(st_last_error(), path)), "flip %d: %s", iter,
              st_last_error());
        if (t) st_tokens_check_range(t); /* must stay in bounds whatever it says */
        st_tokens_close(t);
    }
}

/* A file shortened within its mapping's last page (no fault: the bytes past
 * its new end read as zeros there): a read of that page is the same error;
 * the pages before it read as before; a file renamed over the path (the
 * safe way to replace one) is not this one, whose reads go on. */
static void shortened_last_page(void) {
    char path[256], other[256];
    snprintf(path, sizeof path, "%s/shrinks-tail.tokens", dir);
    snprintf(other, sizeof other, "%s/shrinks-tail.new", dir);
    enum { N = 8192 }; /* 2-byte tokens: 64 + 16384 bytes, the last page holding 64 of them */
    static uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(1 + i % 999);
    CHECK_OK(st_tokens_write(path, tok, N, 1000));
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(path, &t));
    if (!t) return;
    static int32_t got[N];
    CHECK_OK(st_tokens_read_i32(t, N - 20, 20, got)); /* whole: the last page read, nothing shortened */
    CHECK(got[19] == (int32_t)tok[N - 1], "the last token is %d, not %u", got[19], tok[N - 1]);
    /* renamed over: a smaller file at the path; this one is whole */
    CHECK_OK(st_tokens_write(other, tok, 100, 1000));
    CHECK(rename(other, path) == 0, "cannot rename %s", other);
    CHECK_OK(st_tokens_read_i32(t, N - 20, 20, got));
    CHECK(got[19] == (int32_t)tok[N - 1], "after a rename over it, the last token is %d", got[19]);
    st_tokens_close(t);
    /* shortened in place by 20 bytes, within the last page */
    CHECK_OK(st_tokens_write(path, tok, N, 1000));
    CHECK_OK(st_tokens_open(path, &t));
    if (!t) return;
    CHECK(truncate(path, 64 + 2 * N - 20) == 0, "cannot shorten %s", path);
    CHECK_FAILS(st_tokens_read_i32(t, N - 20, 20, got), ST_ERR_IO, "was shortened while it was read");
    /* (said for eval as for train: it named training and --resume alone) */
    CHECK(strstr(st_last_error(), "then run again (a training run: continue with --resume auto)") != NULL,
          "the advice: %s", st_last_error());
    CHECK(strstr(st_last_error(), path) &&
              strstr(st_last_error(), "16428 bytes now, 16448 when it was opened"),
          "the message names neither the file nor its sizes: %s", st_last_error());
    CHECK_OK(st_tokens_read_i32(t, 0, 100, got)); /* the pages before the last */
    CHECK(got[99] == (int32_t)tok[99], "token 99 reads %d", got[99]);
    st_tokens_close(t);
}

/* A file shortened while it is open (rewritten in place): a read past its new
 * end is an error naming the file, not SIGBUS, on the calling thread and in
 * the range check; a SIGBUS elsewhere in the process still ends it as before
 * (a child reads past the end of a mapping of its own). */
static void shortened(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/shrinks.tokens", dir);
    enum { N = 8192 }; /* 2-byte tokens: 16 KiB and the header, 5 pages */
    static uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(i % 1000);
    CHECK_OK(st_tokens_write(path, tok, N, 1000));
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(path, &t));
    if (!t) return;
    static int32_t got[N];
    CHECK_OK(st_tokens_read_i32(t, 0, N, got));
    CHECK(got[N - 1] == (int32_t)tok[N - 1], "the last token is %d, not %u", got[N - 1], tok[N - 1]);
    CHECK(truncate(path, 64 + 2 * 100) == 0, "cannot shorten %s", path);
    CHECK_FAILS(st_tokens_read_i32(t, 5000, 100, got), ST_ERR_IO, "was shortened while it was read");
    CHECK(strstr(st_last_error(), path) && strstr(st_last_error(), "264 bytes now"),
          "the message names neither the file nor its size now: %s", st_last_error());
    CHECK_FAILS(st_tokens_check_range(t), ST_ERR_IO, "was shortened");
    { /* (the first token on the first page past the end: (page - header) / 2; it said token 0) */
        char want[64];
        snprintf(want, sizeof want, "reading from token %ld)", (sysconf(_SC_PAGESIZE) - 64) / 2);
        CHECK(strstr(st_last_error(), want), "the range check does not say '%s': %s", want, st_last_error());
    }
    CHECK_OK(st_tokens_read_i32(t, 0, 100, got)); /* the first page is still there */
    CHECK(got[99] == 99, "token 99 reads %d after the fault", got[99]);
    CHECK_FAILS(st_tokens_read_i32(t, N - 10, 10, got), ST_ERR_IO, "shrinks.tokens"); /* and again */

    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) { /* a fault outside a guarded read: the default action */
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2); /* (a sanitizer's report of it is expected) */
        const int fd = open(path, O_RDONLY);
        const volatile uint8_t *m = fd >= 0 ? mmap(NULL, 16384, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (m != MAP_FAILED) (void)m[12000];
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "cannot fork");
    /* killed by SIGBUS, or (a sanitizer's handler before ours) told and ended */
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
              (WIFEXITED(status) && WEXITSTATUS(status) != 0),
          "a fault outside the token reads: the child %s %d, not ended by SIGBUS",
          WIFSIGNALED(status) ? "was killed by signal" : "exited with",
          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    st_tokens_close(t);
}

/* An llm.c token file as its dev/data scripts write it: 256 int32s (magic,
 * version, count), then count tokens of `width` bytes, token i = (i * 7919
 * + k) % vocab. Returns the bytes written. */
static size_t llmc_file(const char *path, uint32_t magic, uint32_t version, uint32_t count, int width,
                        uint32_t vocab, uint32_t k) {
    const size_t n = 1024 + (size_t)count * (size_t)width;
    uint8_t *b = calloc(1, n);
    if (!b) exit(1);
    const uint32_t head[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            b[4 * i + j] = (uint8_t)(head[i] >> (8 * j));
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t v = (uint32_t)(((uint64_t)i * 7919 + k) % vocab);
        for (int j = 0; j < width; j++)
            b[1024 + (size_t)i * width + j] = (uint8_t)(v >> (8 * j));
    }
    put_file(path, b, n);
    free(b);
    return n;
}

/* llm.c's token files read as they are: GPT-2's (uint16, vocabulary 50257)
 * and LLaMA 3's (uint32, 128256), one file and shards by pattern, every
 * token as written; a token outside GPT-2's vocabulary, a wrong version, a
 * truncated file and a shard of another vocabulary are errors naming the
 * file. */
static void llmc(void) {
    char path[256], pat[256];
    const struct {
        uint32_t magic, version;
        int width;
        uint32_t vocab;
        const char *format;
    } kinds[] = {{20240520, 1, 2, 50257, "llm.c GPT-2"}, {20240801, 7, 4, 128256, "llm.c LLaMA 3"}};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/llmc%d.bin", dir, k);
        llmc_file(path, kinds[k].magic, kinds[k].version, 5000, kinds[k].width, kinds[k].vocab, 3);
        st_tokens *t = NULL;
        CHECK_OK(st_tokens_open(path, &t));
        if (!t) continue;
        CHECK(st_tokens_count(t) == 5000 && st_tokens_vocab_size(t) == kinds[k].vocab &&
                  st_tokens_token_bytes(t) == kinds[k].width && !strcmp(st_tokens_format(t), kinds[k].format),
              "%s: %lld tokens, vocabulary %llu, %d bytes, %s", kinds[k].format,
              (long long)st_tokens_count(t), (unsigned long long)st_tokens_vocab_size(t),
              st_tokens_token_bytes(t), st_tokens_format(t));
        int wrong = 0;
        for (int64_t i = 0; i < 5000; i++)
            wrong += st_tokens_get(t, i) != (uint32_t)((i * 7919 + 3) % kinds[k].vocab);
        int32_t got[10];
        CHECK_OK(st_tokens_read_i32(t, 4990, 10, got));
        for (int i = 0; i < 10; i++)
            wrong += got[i] != (int32_t)(((4990 + i) * 7919 + 3) % kinds[k].vocab);
        CHECK(wrong == 0, "%s: %d tokens differ from those written", kinds[k].format, wrong);
        CHECK_OK(st_tokens_check_range(t));
        st_tokens_close(t);
    }
    /* shards by pattern: one stream */
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/fineweb_train_%06d.bin", dir, i + 1);
        llmc_file(path, 20240520, 1, 3000 + 1000 * (uint32_t)i, 2, 50257, 100 * (uint32_t)i);
    }
    snprintf(pat, sizeof pat, "%s/fineweb_train_*.bin", dir);
    st_tokens *t = NULL;
    CHECK_OK(st_tokens_open(pat, &t));
    if (t) {
        CHECK(st_tokens_shards(t) == 2 && st_tokens_count(t) == 7000, "llm.c shards: %d, %lld tokens",
              st_tokens_shards(t), (long long)st_tokens_count(t));
        CHECK(st_tokens_get(t, 2999) == (2999 * 7919) % 50257 && st_tokens_get(t, 3000) == 100 &&
                  st_tokens_get(t, 6999) == (3999 * 7919 + 100) % 50257,
              "llm.c shards: the stream's tokens at the seam");
        st_tokens_close(t);
    }
    const st_status F = ST_ERR_FORMAT;
    uint8_t *b = malloc(1024 + 2 * 100);
    if (!b) exit(1);
    snprintf(path, sizeof path, "%s/llmc-vocab.bin", dir);
    llmc_file(path, 20240520, 1, 100, 2, 65536, 50200); /* tokens up to 65535: beyond GPT-2's 50257 */
    CHECK_OK(st_tokens_open(path, &t));
    if (t) {
        CHECK(st_tokens_check_range(t) == F && strstr(st_last_error(), path), "llm.c token >= 50257: %s",
              st_last_error());
        st_tokens_close(t);
    }
    llmc_file(path, 20240520, 1, 100, 2, 50257, 0);
    const size_t n = get_file(path, b, 1024 + 2 * 100);
    bad("llmc-cut", b, n - 3, F,
        "the llm.c GPT-2 header says 100 tokens of 2 bytes (1224 bytes with the header) "
        "but the file is 1221 bytes; it is truncated");
    bad("llmc-cuthead", b, 600, F, "shorter than llm.c GPT-2's 1024-byte header");
    b[4] = 2;
    bad("llmc-version", b, n, F, "an llm.c GPT-2 token file of version 2; scaletrain reads version 1");
    b[4] = 1;
    memset(b + 8, 0, 4);
    bad("llmc-count", b, n, F, "whose header says 0 tokens");
    free(b);
    /* a byte-level shard among GPT-2's */
    uint32_t bytes[1500];
    for (int i = 0; i < 1500; i++)
        bytes[i] = (uint32_t)i % 256;
    snprintf(path, sizeof path, "%s/fineweb_train_000003.bin", dir);
    CHECK_OK(st_tokens_write(path, bytes, 1500, 256));
    st_clear_error();
    CHECK(st_tokens_open(pat, &t) == F && strstr(st_last_error(), "vocab_size 256, but") &&
              strstr(st_last_error(), "fineweb_train_000001.bin has 50257"),
          "a byte-level shard among llm.c's: %s", st_last_error());
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/st_tokens_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_tokens", "cannot make a temporary directory in /tmp");
    round_trip(256, 2);
    round_trip(50257, 2);
    round_trip(65536, 2);
    round_trip(65537, 4);
    round_trip((uint64_t)1 << 32, 4);
    tokenize();
    shards();
    tokenize_shards();
    read_twice();
    malformed();
    llmc();
    shortened_last_page();
    shortened();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    return st_test_finish("test_tokens");
}
