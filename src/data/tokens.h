/* Token files: the training data of language models, one stream of token ids.
 *
 * Layout (all integers little-endian; docs/formats.md has it byte by byte):
 *   0  magic "STTOKENS" (8 bytes)     16  u64 count (tokens)
 *   8  u32 version (1)                24  u64 vocab_size
 *   12 u32 token_bytes (2 or 4)       32  reserved, zero, to byte 64
 *   64 count tokens of token_bytes each.
 * The reader memory-maps the file (read-only, shared by every loader thread)
 * and checks the header against the file's exact size before use. Several
 * files (shards: a pattern such as data/train-*.tokens, or a folder of
 * .tokens files) read as one stream, in name order, as for pre-training on
 * a corpus written in parts. Also here: the byte-level tokenizer (every byte
 * one token, vocabulary 256), which writes one file or shards, several at
 * once. Not here: BPE tokenizers, or splitting into train and validation
 * files. */
#ifndef ST_DATA_TOKENS_H
#define ST_DATA_TOKENS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/status.h"

#define ST_TOKENS_MAGIC "STTOKENS"
#define ST_TOKENS_VERSION 1
#define ST_TOKENS_HEADER_BYTES 64
/* llm.c's token files (its dev/data scripts), read as they are: 256 int32s
 * (magic 20240520 for GPT-2's tokens, uint16, vocabulary 50257; 20240801
 * for LLaMA 3's, uint32, 128256; then version and count), then the tokens. */
#define ST_TOKENS_LLMC_HEADER_BYTES 1024

typedef struct st_tokens st_tokens;

/* At most this many shards make one stream. */
#define ST_TOKENS_MAX_SHARDS 100000

/* Map and validate `path`: one token file, or, when it is a pattern
 * (`*`, `?`, `[`: data/train-*.tokens) or a folder (its *.tokens), every file
 * it names, sorted by name, as one stream (a sample may span two shards).
 * Each file: magic, version, token width, the exact file size (64 + count *
 * token_bytes; llm.c's: 1024 + ...), vocab_size fitting the width (llm.c's
 * files record none: their tokenizer's); every shard has the same
 * vocab_size. Tokens are not scanned (see st_tokens_check_range). On success
 * *out is a handle the caller closes with st_tokens_close; on failure *out is
 * NULL and the message names the file (or the pattern that matched none).
 * Files must not be truncated while mapped. */
st_status st_tokens_open(const char *path, st_tokens **out);

/* Whether path names several files for st_tokens_open (a pattern that is
 * not an existing file's name, or a folder holding .tokens files), rather
 * than one file. */
bool st_tokens_names_shards(const char *path);

/* Whether folder `dir` holds .bin files (llm.c's token files, which a folder
 * spec does not read); writes their pattern (the folder, no trailing slash,
 * then "/" "*.bin") to pat either way. */
bool st_tokens_bin_pattern(const char *dir, char *pat, size_t size);

/* A file of the stream, X.tokens, read together with shards of the same
 * stream named from it as data tokenize names them (X-000000.tokens, ...):
 * one text tokenized twice, once whole and once in shards, in a folder or
 * a pattern's matches. Writes the file's index, the shards found and their
 * tokens; false where there is none. */
typedef struct st_tokens_twice {
    int file;           /* the shard index of X.tokens */
    int shards;         /* how many X-NNNNNN.tokens */
    int first;          /* the first of them (a shard index) */
    int64_t shard_count; /* their tokens, together */
} st_tokens_twice;
bool st_tokens_read_twice(const st_tokens *t, st_tokens_twice *out);
/* What tw found, for a message: "X and K shards named from it (S...) with
 * the same N tokens" where the shards hold as many tokens as X (one text
 * for certain: returns true), else "X (N tokens) and K shards named as if
 * cut from it (S..., M tokens)". */
bool st_tokens_twice_what(const st_tokens *t, const st_tokens_twice *tw, char *buf, size_t n);

/* The first shard's format: "scaletrain", "llm.c GPT-2" or "llm.c LLaMA 3". */
const char *st_tokens_format(const st_tokens *t);

/* Unmap and free; accepts NULL. */
void st_tokens_close(st_tokens *t);

int64_t st_tokens_count(const st_tokens *t);
uint64_t st_tokens_vocab_size(const st_tokens *t);
int st_tokens_token_bytes(const st_tokens *t); /* 2 or 4 (the widest shard's) */
int st_tokens_shards(const st_tokens *t);
const char *st_tokens_shard_path(const st_tokens *t, int k); /* NULL outside [0, shards) */
/* The file that holds the stream's token at position pos (NULL outside it). */
const char *st_tokens_path_at(const st_tokens *t, int64_t pos);
int64_t st_tokens_shard_count(const st_tokens *t, int k);    /* tokens in shard k */
int64_t st_tokens_bytes(const st_tokens *t);                 /* the files' sizes, headers included */

/* Token i of the stream; i must be in [0, count) (out of range gives UINT32_MAX). */
uint32_t st_tokens_get(const st_tokens *t, int64_t i);

/* Scan every token: ST_ERR_FORMAT naming the file and the first position in it
 * whose value is not below vocab_size. One pass over the files; run it once
 * when a dataset opens. */
st_status st_tokens_check_range(const st_tokens *t);

/* Copy tokens [start, start + n) of the stream into dst (n int32s), across
 * shards. ST_ERR_ARG when the range is not inside [0, count); ST_ERR_FORMAT
 * for a token above INT32_MAX. */
st_status st_tokens_read_i32(const st_tokens *t, int64_t start, int64_t n, int32_t *dst);

/* Write `count` tokens (count >= 1, each < vocab_size) to `path` atomically:
 * a temporary "<path>.tmp.<pid>" is written, synced and renamed over `path`.
 * token_bytes is 2 when vocab_size <= 65536, else 4 (vocab_size <= 2^32).
 * The caller keeps ownership of tokens. */
st_status st_tokens_write(const char *path, const uint32_t *tokens, int64_t count, uint64_t vocab_size);

/* The number k of path when it is data tokenize's name for shard k of a
 * stem (its first n bytes): stem "-" six digits ".tokens"; else -1. */
int st_tokens_shard_number(const char *path, const char *stem, size_t n);

/* The byte-level tokenizer: every byte of the inputs, in order, becomes one
 * token (vocab_size 256), streaming (the input is never held in memory).
 * shard_tokens 0: one file, `out`. shard_tokens S > 0: shards of S tokens (the
 * last one shorter) named OUT-000000.tokens, OUT-000001.tokens, ... (`out`
 * less a .tokens suffix), `jobs` of them written at once, which the pattern
 * OUT-*.tokens reads back as the same stream; the inputs must then be regular
 * files, and a file the pattern would also read is refused before anything is
 * written. Every file is written to a temporary name and synced; only when
 * all are does any replace its path, so a failure leaves the old files. An
 * empty input is an error; so is a missing file, named. */
typedef struct st_tokenize_opts {
    const char *const *inputs;
    int n_inputs;
    const char *out;
    int64_t shard_tokens; /* 0: one file */
    int jobs;             /* shards written at once (threads); < 1: one */
    /* Non-zero (a signal's number, set by its handler): stop within a
     * chunk, every temporary file removed, ST_ERR_INTERRUPTED. NULL: none. */
    const atomic_int *stop;
    /* Warnings, before anything is written (NULL: none): an input whose
     * first bytes are not text (not UTF-8, or NUL bytes: tokenized as they
     * are), and a file given twice (its text twice in the stream). */
    FILE *log;
} st_tokenize_opts;
typedef struct st_tokenize_result {
    int64_t count;      /* tokens written */
    int shards;         /* files written */
    char pattern[4096]; /* what data.train names them by: the file, or OUT-*.tokens */
} st_tokenize_result;
st_status st_tokens_tokenize(const st_tokenize_opts *o, st_tokenize_result *res);

/* st_tokens_tokenize into one file; *count_out (may be NULL) gets the token
 * count. */
st_status st_tokens_from_text(const char *const *text_paths, int n_paths, const char *out_path,
                              int64_t *count_out);

#endif
