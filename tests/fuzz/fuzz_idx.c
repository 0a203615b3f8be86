/* libFuzzer target for the IDX reader (raw and gzip): any bytes must give
 * ST_OK with data as long as the dims say, or a clean error. Built by
 * `make fuzz` (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/idx.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_idx x;
    if (st_idx_read(fuzz_file(data, size), &x) == ST_OK) {
        int64_t count = 1;
        for (int i = 0; i < x.ndim; i++)
            count *= x.dims[i];
        if (count != x.count || !x.data) abort();
        volatile uint8_t sink = x.data[0] ^ x.data[count - 1];
        (void)sink;
    }
    st_idx_free(&x);
    return 0;
}
