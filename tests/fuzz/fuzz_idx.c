/* libFuzzer target for the IDX reader (raw and gzip): any bytes must give
 * ST_OK with data as long as the dims say, or a clean error, and the
 * streaming reader alone the same. Built by
 * `make fuzz` (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/idx.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_idx x, ref;
    const char *path = fuzz_file(data, size);
    const st_status s = st_idx_read(path, &x);
    if (s == ST_OK) {
        int64_t count = 1;
        for (int i = 0; i < x.ndim; i++)
            count *= x.dims[i];
        if (count != x.count || !x.data) abort();
        volatile uint8_t sink = x.data[0] ^ x.data[count - 1];
        (void)sink;
    }
    /* the streaming reader alone (whole=false) agrees: the same outcome, the
     * same elements (the whole-file path, libdeflate, where built) */
    const st_status r = st_idx_read_with(path, &ref, false);
    if (r != s || (s == ST_OK && (ref.count != x.count || memcmp(ref.data, x.data, (size_t)x.count) != 0)))
        abort();
    st_idx_free(&ref);
    st_idx_free(&x);
    return 0;
}
