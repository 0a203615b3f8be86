/* libFuzzer target for the token-file reader: open (header against the exact
 * size), the range scan, and reads at both ends; then the same file twice as
 * the two shards of a folder, read as one stream (a read across the seam,
 * the second shard's tokens equal to the first's). Built by `make fuzz`
 * (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/tokens.h"
#include "fuzz_file.h"

static void put(const char *dir, const char *name, const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_tokens *t = NULL;
    if (st_tokens_open(fuzz_file(data, size), &t) == ST_OK) {
        int64_t n = st_tokens_count(t);
        if (n < 1 || 64 + n * st_tokens_token_bytes(t) != (int64_t)size) abort();
        (void)st_tokens_check_range(t);
        int32_t buf[8];
        int64_t k = n < 8 ? n : 8;
        (void)st_tokens_read_i32(t, 0, k, buf);
        (void)st_tokens_read_i32(t, n - k, k, buf);
        (void)st_tokens_get(t, n - 1);
    }
    st_tokens_close(t);

    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/st_fuzz_shards_XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    put(dir, "a-0.tokens", data, size);
    put(dir, "a-1.tokens", data, size);
    st_tokens *s = NULL;
    if (st_tokens_open(dir, &s) == ST_OK) {
        const int64_t n = st_tokens_count(s) / 2;
        if (st_tokens_shards(s) != 2 || n < 1 || st_tokens_count(s) != 2 * n ||
            st_tokens_bytes(s) != 2 * (int64_t)size)
            abort();
        (void)st_tokens_check_range(s);
        int32_t seam[16];
        const int64_t k = n < 8 ? n : 8; /* [n - k, n + k): across the seam */
        if (st_tokens_read_i32(s, n - k, 2 * k, seam) == ST_OK && k == n)
            for (int64_t i = 0; i < n; i++) /* both whole shards: the second repeats the first */
                if (seam[i] != seam[n + i]) abort();
        if (st_tokens_get(s, n) != st_tokens_get(s, 0) || st_tokens_get(s, 2 * n - 1) != st_tokens_get(s, n - 1))
            abort();
    }
    st_tokens_close(s);
    return 0;
}
