/* libFuzzer target for the token-file reader: open (header against the exact
 * size), the range scan, and reads at both ends. Built by `make fuzz` (clang);
 * see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/tokens.h"
#include "fuzz_file.h"

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
    return 0;
}
