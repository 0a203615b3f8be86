/* libFuzzer target for the NPY reader: any bytes must give ST_OK with a
 * consistent array, or a clean error; never a crash, a read outside the
 * input, a leak or an allocation larger than the input's data promise. Built
 * by `make fuzz` (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_npy a;
    if (st_npy_read_mem("fuzz.npy", data, size, &a) == ST_OK) {
        /* what the reader promises: count and nbytes agree with the shape */
        int64_t count = 1;
        for (int i = 0; i < a.ndim; i++)
            count *= a.dims[i];
        if (count != a.count || a.nbytes != (size_t)count * st_npy_dtype_size(a.dtype) || a.nbytes > size ||
            (a.nbytes && !a.data))
            abort();
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < a.nbytes; i++)
            sink ^= ((const uint8_t *)a.data)[i];
        (void)sink;
    }
    st_npy_free(&a);
    return 0;
}
