/* libFuzzer target for the safetensors reader (weights and optimizer files
 * that --init, eval, --resume and `data inspect` open): any bytes must give
 * ST_OK with entries that lie inside the file, or a clean error naming the
 * file; never a crash, a read outside the file, a leak or an allocation the
 * file's size does not back. Every tensor of a file that opens is read, as
 * floats where the dtype converts and raw otherwise. Built by `make fuzz`
 * (clang); see tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_safetensors *f = NULL;
    if (st_safetensors_open(fuzz_file(data, size), &f) == ST_OK) {
        int n = st_safetensors_count(f);
        int64_t prev_end = 0;
        for (int i = 0; i < n; i++) {
            const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
            /* what the reader promises: entries in file order, inside the data,
             * no two sharing a byte (an empty one may sit anywhere), each
             * findable by name, counts matching shapes */
            int64_t count = 1;
            for (int d = 0; d < e->ndim; d++)
                count *= e->shape[d];
            if (!e->name || !e->dtype || e->ndim < 0 || e->ndim > ST_SAFETENSORS_MAX_NDIM ||
                count != e->count || e->nbytes != count * st_safetensors_dtype_size(e->dtype) ||
                (e->nbytes > 0 && e->offset < prev_end) || e->offset + e->nbytes > (int64_t)size ||
                st_safetensors_find(f, e->name) != e)
                abort();
            if (e->nbytes > 0) prev_end = e->offset + e->nbytes;
            if (e->nbytes > 1 << 20) continue;
            void *buf = malloc(e->nbytes ? (size_t)e->nbytes : 1);
            float *fl = malloc(e->count ? (size_t)e->count * sizeof(float) : 1);
            if (!buf || !fl) abort();
            if (st_safetensors_read_raw(f, e->name, buf, e->nbytes) != ST_OK) abort();
            (void)st_safetensors_read_f32(f, e->name, fl, e->count);
            if (e->count > 0 && st_safetensors_read_f32(f, e->name, fl, e->count - 1) == ST_OK) abort();
            free(buf);
            free(fl);
        }
        if (st_safetensors_entry_at(f, n) != NULL || st_safetensors_find(f, "__metadata__") != NULL) abort();
        (void)st_safetensors_metadata(f, "format");
        (void)st_safetensors_metadata(f, "step");
    }
    st_safetensors_close(f);
    return 0;
}
