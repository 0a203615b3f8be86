/* Token files: the training data of language models, one stream of token ids.
 *
 * Layout (all integers little-endian; docs/formats.md has it byte by byte):
 *   0  magic "STTOKENS" (8 bytes)     16  u64 count (tokens)
 *   8  u32 version (1)                24  u64 vocab_size
 *   12 u32 token_bytes (2 or 4)       32  reserved, zero, to byte 64
 *   64 count tokens of token_bytes each.
 * The reader memory-maps the file (read-only, shared by every loader thread)
 * and checks the header against the file's exact size before use. Also here:
 * the byte-level tokenizer (every byte one token, vocabulary 256). Not here:
 * BPE tokenizers, or splitting into train and validation files. */
#ifndef ST_DATA_TOKENS_H
#define ST_DATA_TOKENS_H

#include <stdint.h>

#include "scaletrain/status.h"

#define ST_TOKENS_MAGIC "STTOKENS"
#define ST_TOKENS_VERSION 1
#define ST_TOKENS_HEADER_BYTES 64

typedef struct st_tokens st_tokens;

/* Map and validate `path`: magic, version, token width, the exact file size
 * (64 + count * token_bytes), vocab_size fitting the width. Tokens are not
 * scanned (see st_tokens_check_range). On success *out is a handle the caller
 * closes with st_tokens_close; on failure *out is NULL and the message names
 * the file. The file must not be truncated while mapped. */
st_status st_tokens_open(const char *path, st_tokens **out);

/* Unmap and free; accepts NULL. */
void st_tokens_close(st_tokens *t);

int64_t st_tokens_count(const st_tokens *t);
uint64_t st_tokens_vocab_size(const st_tokens *t);
int st_tokens_token_bytes(const st_tokens *t); /* 2 or 4 */

/* Token i; i must be in [0, count) (out of range gives UINT32_MAX). */
uint32_t st_tokens_get(const st_tokens *t, int64_t i);

/* Scan every token: ST_ERR_FORMAT naming the first position whose value is not
 * below vocab_size. One pass over the file; run it once when a dataset opens. */
st_status st_tokens_check_range(const st_tokens *t);

/* Copy tokens [start, start + n) into dst (n int32s). ST_ERR_ARG when the range
 * is not inside [0, count); ST_ERR_FORMAT for a token above INT32_MAX. */
st_status st_tokens_read_i32(const st_tokens *t, int64_t start, int64_t n, int32_t *dst);

/* Write `count` tokens (count >= 1, each < vocab_size) to `path` atomically:
 * a temporary "<path>.tmp.<pid>" is written, synced and renamed over `path`.
 * token_bytes is 2 when vocab_size <= 65536, else 4 (vocab_size <= 2^32).
 * The caller keeps ownership of tokens. */
st_status st_tokens_write(const char *path, const uint32_t *tokens, int64_t count, uint64_t vocab_size);

/* The byte-level tokenizer: every byte of the n_paths files, in order, becomes
 * one token (vocab_size 256), written to out_path atomically, streaming (the
 * input is never held in memory). *count_out (may be NULL) gets the token
 * count. An empty input is an error; so is a missing file, named. */
st_status st_tokens_from_text(const char *const *text_paths, int n_paths, const char *out_path,
                              int64_t *count_out);

#endif
