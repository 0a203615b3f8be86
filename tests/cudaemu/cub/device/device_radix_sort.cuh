/* The CUDA emulator's cub::DeviceRadixSort::SortPairs (tests/cudaemu/README.md):
 * a stable sort of (key, value) pairs by the key's bits [begin_bit, end_bit),
 * with CUB's two-call protocol (a null temporary storage asks its size). The
 * temporary storage must lie inside one device allocation of the size the
 * first call gave, as CUB's own kernels would need it. */
#ifndef ST_CUDAEMU_CUB_RADIX_SORT
#define ST_CUDAEMU_CUB_RADIX_SORT

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

#include "internal.h"

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V, typename N>
    static cudaError_t SortPairs(void *tmp, size_t &tmp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                 V *vals_out, N n, int begin_bit = 0, int end_bit = (int)sizeof(K) * 8,
                                 cudaStream_t stream = 0) {
        const size_t need = (size_t)n * (sizeof(K) + sizeof(V)) + 4096;
        if (!tmp) {
            tmp_bytes = need;
            return cudaSuccess;
        }
        if (tmp_bytes < need || !st_emu_device_range(tmp, need) || !st_emu_device_range(keys_in, n * sizeof(K)) ||
            !st_emu_device_range(keys_out, n * sizeof(K)) || !st_emu_device_range(vals_in, n * sizeof(V)) ||
            !st_emu_device_range(vals_out, n * sizeof(V)))
            return cudaErrorInvalidValue;
        if (!st_emu_stream_ok(stream)) return cudaErrorInvalidResourceHandle;
        st_emu_enqueue(stream, [=] {
            const K mask = (K)((end_bit - begin_bit >= (int)sizeof(K) * 8 ? ~(K)0
                                                                           : (((K)1 << (end_bit - begin_bit)) - 1))
                               << begin_bit);
            std::vector<size_t> idx((size_t)n);
            for (size_t i = 0; i < (size_t)n; i++) idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(),
                             [&](size_t x, size_t y) { return (keys_in[x] & mask) < (keys_in[y] & mask); });
            std::vector<K> k((size_t)n);
            std::vector<V> v((size_t)n);
            for (size_t i = 0; i < (size_t)n; i++) k[i] = keys_in[idx[i]], v[i] = vals_in[idx[i]];
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), vals_out);
        });
        return cudaSuccess;
    }
};
} // namespace cub

#endif
