/* Kernels with the faults the CUDA emulator looks for (selftest.h), each
 * with its correct twin: the same code with the barrier, the wait or the
 * write that the faulty one leaves out. Compiled only into the emulator's
 * build, through rewrite.py, like the backend's own kernels. */
#include "selftest.h"

#include "common.cuh"

#include <cuda_runtime.h>

enum { NT = 128, BLOCKS = 4, TILES = 6 };

/* Each thread writes its slot, then reads the slot of the thread 32 below
 * (a warp earlier: in thread order it has already written). */
static __global__ void k_barrier(const int *in, int *out, bool fixed) {
    __shared__ int s[NT];
    const int t = threadIdx.x;
    s[t] = (int)blockIdx.x * NT + t + 1;
    if (fixed) __syncthreads();
    const int r = t >= 32 ? t - 32 : t;
    out[blockIdx.x * NT + t] = s[r];
}

/* One buffer refilled per tile; each thread sums the slot 32 above its own
 * (a warp later: in thread order not yet refilled). Without the barrier at
 * the end of a tile a warp that runs ahead refills what a slower one has
 * not read. */
static __global__ void k_reuse(const int *in, int *out, bool fixed) {
    __shared__ int s[NT];
    const int t = threadIdx.x;
    int acc = 0;
    for (int i = 0; i < TILES; i++) {
        s[t] = i * 1000 + t;
        __syncthreads();
        acc += s[t < NT - 32 ? t + 32 : t];
        if (fixed) __syncthreads();
    }
    out[blockIdx.x * NT + t] = acc;
}

/* Each thread copies 16 bytes (4 ints) of `in` into shared memory by
 * cp.async; after the barrier each reads its neighbour's. The faulty one
 * waits after the barrier, not before it. */
static __global__ void k_cp_wait(const int *in, int *out, bool fixed) {
    __shared__ __align__(16) int s[NT * 4];
    const int t = threadIdx.x;
    st_cp_async<16>(s + 4 * t, in + 4 * (blockIdx.x * NT + t), true);
    st_cp_async_commit();
    if (fixed) st_cp_async_wait();
    __syncthreads();
    const int n = (t + 1) % NT;
    out[blockIdx.x * NT + t] = s[4 * n] + s[4 * n + 3];
    st_cp_async_wait();
}

/* A sum into shared memory that the faulty one never clears first. */
static __global__ void k_unwritten(const int *in, int *out, bool fixed) {
    __shared__ int s[NT];
    const int t = threadIdx.x;
    if (fixed) s[t] = 0;
    __syncthreads();
    s[t] += t;
    __syncthreads();
    out[blockIdx.x * NT + t] = s[NT - 1 - t];
}

static int expected(int fault, int b, int t, const int *in) {
    switch (fault) {
    case ST_EMU_FAULT_BARRIER:
        return b * NT + (t >= 32 ? t - 32 : t) + 1;
    case ST_EMU_FAULT_REUSE: {
        int acc = 0;
        for (int i = 0; i < TILES; i++)
            acc += i * 1000 + (t < NT - 32 ? t + 32 : t);
        return acc;
    }
    case ST_EMU_FAULT_CP_WAIT: {
        const int n = (t + 1) % NT;
        return in[4 * (b * NT + n)] + in[4 * (b * NT + n) + 3];
    }
    default:
        return NT - 1 - t;
    }
}

/* A launch site each for a kernel's faulty and fixed runs: the emulator runs
 * later launches of a site whose first reached no barrier without fibers. */
template <void (*K)(const int *, int *, bool)> static void launch_pair(const int *in, int *out, bool fixed) {
    if (fixed)
        K<<<BLOCKS, NT>>>(in, out, true);
    else
        K<<<BLOCKS, NT>>>(in, out, false);
}

/* in_h to the device, launch(in, out) there, the outputs back into out_h:
 * false when a CUDA call failed. */
template <class L>
static bool on_device(const int *in_h, size_t in_bytes, int *out_h, size_t out_bytes, L launch) {
    int *in = nullptr, *out = nullptr;
    if (cudaMalloc((void **)&in, in_bytes) != cudaSuccess) return false;
    if (cudaMalloc((void **)&out, out_bytes) != cudaSuccess) {
        cudaFree(in);
        return false;
    }
    cudaMemcpy(in, in_h, in_bytes, cudaMemcpyHostToDevice);
    launch(in, out);
    const bool ok = cudaGetLastError() == cudaSuccess &&
                    cudaMemcpy(out_h, out, out_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(in);
    cudaFree(out);
    return ok;
}

extern "C" int st_emu_selftest(int fault, int fixed) {
    enum { N = NT * BLOCKS };
    if (fault < ST_EMU_FAULT_BARRIER || fault > ST_EMU_FAULT_UNWRITTEN) return -1;
    static int in_h[4 * N], out_h[N];
    for (int i = 0; i < 4 * N; i++)
        in_h[i] = 7 * i + 3;
    static void (*const launch[])(const int *, int *, bool) = {
        launch_pair<k_barrier>, launch_pair<k_reuse>, launch_pair<k_cp_wait>, launch_pair<k_unwritten>};
    if (!on_device(in_h, sizeof in_h, out_h, sizeof out_h,
                   [&](const int *in, int *out) { launch[fault](in, out, fixed != 0); }))
        return -1;
    int wrong = 0;
    for (int b = 0; b < BLOCKS; b++)
        for (int t = 0; t < NT; t++)
            wrong += out_h[b * NT + t] != expected(fault, b, t, in_h);
    return wrong;
}

/* selftest.h st_emu_selftest_dynamic_shared */
static __global__ void k_dynamic(int *out, int per, bool every_block) {
    extern __shared__ int dyn[];
    const int t = threadIdx.x;
    if (every_block || blockIdx.x == 0)
        for (int k = 0; k < per; k++)
            dyn[t * per + k] = (int)blockIdx.x * 100000 + t * per + k;
    __syncthreads();
    int sum = 0;
    for (int k = 0; k < per; k++)
        sum += dyn[(NT - 1 - t) * per + k];
    out[blockIdx.x * NT + t] = sum;
}

extern "C" int st_emu_selftest_dynamic_shared(int bytes, int optin, int every_block) {
    enum { N = NT * BLOCKS };
    const int per = bytes / (NT * (int)sizeof(int));
    static int out_h[N];
    if (per < 1 || bytes % (NT * (int)sizeof(int))) return -1;
    if (optin && cudaFuncSetAttribute(reinterpret_cast<const void *>(&k_dynamic),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
        cudaGetLastError(); /* (a refused opt-in is the last error, as a GPU's: not a later launch's) */
        return -1;
    }
    static const int none[1] = {0}; /* (the kernel reads no input) */
    bool refused = false;
    if (!on_device(none, sizeof none, out_h, sizeof out_h, [&](const int *, int *out) {
            k_dynamic<<<BLOCKS, NT, (size_t)bytes>>>(out, per, every_block != 0);
            refused = cudaGetLastError() != cudaSuccess; /* (taken here: on_device's own check then passes) */
        }))
        return -1;
    if (refused) return -2;
    int wrong = 0;
    for (int b = 0; b < BLOCKS; b++)
        for (int t = 0; t < NT; t++) {
            const int s = NT - 1 - t;
            int want = 0;
            for (int k = 0; k < per; k++)
                want += b * 100000 + s * per + k;
            wrong += out_h[b * NT + t] != want;
        }
    return wrong;
}

/* A chain of warp shuffles, each of the four kinds, each lane's value
 * feeding its next: exchanges that take the warp's two sets of slots in
 * turn (kernels.cpp), back to back with no other barrier between them. */
enum { CHAIN = 24 };
static __device__ __host__ int chain_src(int i, int lane) { /* lane i's value comes from */
    switch (i % 4) {
    case 0:
        return lane ^ (1 << (i % 5));
    case 1:
        return lane + (i % 7 + 1) < 32 ? lane + (i % 7 + 1) : lane;
    case 2:
        return lane >= i % 3 + 1 ? lane - (i % 3 + 1) : lane;
    default:
        return (lane * 7 + i) & 31;
    }
}
static __global__ void k_shuffles(const int *in, int *out) {
    const int t = (int)(blockIdx.x * NT + threadIdx.x), lane = (int)threadIdx.x & 31;
    unsigned v = (unsigned)in[t];
    for (int i = 0; i < CHAIN; i++) {
        unsigned w;
        switch (i % 4) {
        case 0:
            w = __shfl_xor_sync(0xffffffffu, v, 1 << (i % 5));
            break;
        case 1:
            w = __shfl_down_sync(0xffffffffu, v, (unsigned)(i % 7 + 1));
            break;
        case 2:
            w = __shfl_up_sync(0xffffffffu, v, (unsigned)(i % 3 + 1));
            break;
        default:
            w = __shfl_sync(0xffffffffu, v, chain_src(i, lane));
        }
        v = v * 3u + w;
    }
    out[t] = (int)v;
}

extern "C" int st_emu_selftest_shuffles(void) {
    enum { N = NT * BLOCKS };
    static int in_h[N], out_h[N];
    for (int i = 0; i < N; i++)
        in_h[i] = 7919 * i + 13;
    if (!on_device(in_h, sizeof in_h, out_h, sizeof out_h,
                   [](const int *in, int *out) { k_shuffles<<<BLOCKS, NT>>>(in, out); }))
        return -1;
    int wrong = 0;
    for (int w0 = 0; w0 < N; w0 += 32) { /* each warp's chain on the host */
        unsigned v[32], next[32];
        for (int l = 0; l < 32; l++)
            v[l] = (unsigned)in_h[w0 + l];
        for (int i = 0; i < CHAIN; i++) {
            for (int l = 0; l < 32; l++)
                next[l] = v[l] * 3u + v[chain_src(i, l)];
            memcpy(v, next, sizeof v);
        }
        for (int l = 0; l < 32; l++)
            wrong += out_h[w0 + l] != (int)v[l];
    }
    return wrong;
}

/* Half a warp shuffles while the other half waits at __syncwarp: lanes at
 * one warp barrier after different numbers of shuffles. */
static __global__ void k_shuffle_skip(int *out) {
    const int lane = (int)threadIdx.x & 31;
    int v = lane;
    if (lane < 16)
        __syncwarp();
    else
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

extern "C" int st_emu_selftest_shuffle_skip(void) {
    int *out = nullptr;
    if (cudaMalloc((void **)&out, 32 * sizeof(int)) != cudaSuccess) return -1;
    k_shuffle_skip<<<1, 32>>>(out);
    const bool ok = cudaDeviceSynchronize() == cudaSuccess;
    cudaFree(out);
    return ok ? 0 : -1;
}

static __global__ void k_struct_arg(st_fbuf b, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) ((float *)b.p)[i] = 3.0f;
}

extern "C" int st_emu_selftest_struct_arg(st_device *d, void *p, int n) {
    k_struct_arg<<<(n + NT - 1) / NT, NT, 0, d->compute>>>(st_fbuf{p, ST_PREC_FP32}, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
