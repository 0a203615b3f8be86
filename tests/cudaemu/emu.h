/* The CUDA emulator's device side (tests/cudaemu/README.md): force-included
 * (g++ -include) into every CUDA source of src/cuda after rewrite.py has turned its
 * launches into st_emu_launch calls, so the backend's own kernels run on the
 * CPU, thread by thread, against the real CUDA headers' types.
 *
 * A launch runs now, on the calling thread, in the order the host queued it
 * (streams and events order nothing further: everything before has already
 * run). Each block's threads run as fibers so that __syncthreads and the warp
 * shuffles mean what they do on a GPU; a barrier some threads never reach is
 * reported as a deadlock with the kernel's launch site. A launch whose
 * configuration a GPU would refuse (no threads, more than 1024 per block, a
 * grid dimension out of range) sets the error cudaGetLastError returns, as
 * the GPU does. */
#ifndef ST_CUDAEMU_EMU_H
#define ST_CUDAEMU_EMU_H

/* Defined before the CUDA headers, which then leave them alone. */
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...) /* occupancy hints: nothing to bound here */

#ifdef __cplusplus
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>

extern uint3 threadIdx, blockIdx; /* of the thread running now (one launch runs at a time) */
extern dim3 blockDim, gridDim;

struct st_emu_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};

static inline st_emu_cfg st_emu_config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    st_emu_cfg c;
    c.grid = grid;
    c.block = block;
    c.smem = smem;
    c.stream = stream;
    return c;
}

/* Queue a launch on c.stream: fn(ctx) runs for every thread of the grid,
 * then drop(ctx); `site` is the launch site's own state (whether its kernel
 * ever reached a barrier), `name` the kernel and where it is launched. */
void st_emu_submit(const st_emu_cfg &c, const char *name, int *site, void (*fn)(void *), void (*drop)(void *),
                   void *ctx, const void *const *ptrs = nullptr, int nptrs = 0);
/* (ptrs: the launch's pointer arguments, for a captured launch's replay to
 * check that their memory still exists) */

/* A pointer argument must be device (or pinned host) memory: a GPU faults on
 * a pageable host pointer, or on a freed block, when the kernel reads it. */
void st_emu_check_pointer(const char *name, int index, const void *p);

/* The device pointers an argument carries, into out[0..ST_EMU_ARG_PTRS):
 * a pointer is one (none when NULL), a number none. A struct that carries
 * them (st_fbuf, st_flash, st_matmul, ...) has its own overload beside its
 * definition, found by argument-dependent lookup at the launch; the
 * emulator runs kernels on the CPU, where a host pointer inside a struct
 * would be read without a fault. */
enum { ST_EMU_ARG_PTRS = 16 };
template <class T> static inline int st_emu_pointers(const T &v, const void **out) {
    if constexpr (std::is_pointer<T>::value) {
        if (!v) return 0;
        out[0] = (const void *)v;
        return 1;
    }
    (void)v;
    (void)out;
    return 0;
}
/* (for the overloads: the non-NULL ones of n pointers) */
static inline int st_emu_pointers_of(const void **out, std::initializer_list<const void *> ps) {
    int n = 0;
    for (const void *p : ps)
        if (p && n < ST_EMU_ARG_PTRS) out[n++] = p;
    return n;
}

/* The arguments are copied now, as CUDA copies a kernel's parameters at the
 * launch; each thread's call copies them again into the kernel's own. */
template <class K, class... A> void st_emu_launch(const st_emu_cfg &c, const char *name, K kernel, A &&...args) {
    static int site = 0; /* one per launch site: each has its own lambda type */
    const void *ptrs[(sizeof...(A) + 1) * ST_EMU_ARG_PTRS];
    int np = 0, index = 0;
    auto take = [&](const auto &v) {
        const int n = st_emu_pointers(v, ptrs + np);
        for (int i = 0; i < n; i++)
            st_emu_check_pointer(name, index, ptrs[np + i]);
        np += n;
        index++;
    };
    (take(args), ...);
    struct held {
        K k;
        std::tuple<typename std::decay<A>::type...> args;
    };
    held *h = new held{kernel, std::tuple<typename std::decay<A>::type...>(std::forward<A>(args)...)};
    st_emu_submit(
        c, name, &site, [](void *p) { std::apply(((held *)p)->k, ((held *)p)->args); },
        [](void *p) { delete (held *)p; }, h, ptrs, np);
}

/* --- what kernels call ---------------------------------------------------- */
void __syncthreads(void);
int __syncthreads_or(int pred);
int __syncthreads_and(int pred);
int __syncthreads_count(int pred);
void __syncwarp(unsigned mask = 0xffffffffu);
void __threadfence(void);
/* Each shared array's declaration is followed by a call of this
 * (rewrite.py): the first thread of a block to pass it fills it with 0xFF
 * bytes (NaN in every float type), as a GPU's shared memory holds garbage
 * when a block starts; a read before the block's own write then shows, not
 * what the previous block left. */
void st_emu_shared(void *p, size_t n);
/* `extern __shared__ T a[];` becomes `T *a = (T *)st_emu_dynamic_shared();`
 * (rewrite.py): the launch's dynamic shared memory (its configuration's
 * third value), 0xFF bytes at each block's start, as st_emu_shared's. */
void *st_emu_dynamic_shared(void);
/* cp.async (common.cuh's st_cp_async): the copy is the thread's until
 * st_emu_cp_async_wait(n) leaves at most n of its committed groups pending;
 * until then its destination holds 0xFF bytes (NaN), so a read before the
 * wait and the barrier after it, or a write over a buffer another warp
 * still reads, shows. */
void st_emu_cp_async(void *dst, const void *src, int n, bool ok);
void st_emu_cp_async_commit(void);
void st_emu_cp_async_wait(int n);
/* This warp's 32 exchange slots for the calling thread's next exchange,
 * with its lane. Two sets a warp, taken in turn by each lane's exchanges:
 * a lane's next exchange writes the other set, and the one after it
 * (this set again) comes only past that next exchange's barrier, which
 * every lane reaches after reading this one; so one barrier an exchange. */
uint64_t *st_emu_warp_slots(int *lane);
void st_emu_warp_barrier(void);

template <typename T> static inline T st_emu_exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    int lane = 0;
    uint64_t *slot = st_emu_warp_slots(&lane);
    memcpy(&slot[lane], &v, sizeof v);
    st_emu_warp_barrier();
    T r;
    memcpy(&r, &slot[src & 31], sizeof r);
    return r;
}
static inline int st_emu_lane(void) {
    return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    const int lane = st_emu_lane();
    return st_emu_exchange(v, (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1)));
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const int lane = st_emu_lane();
    return st_emu_exchange(v, (lane & ~(width - 1)) | (src & (width - 1)));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = st_emu_lane(), seg = lane & (width - 1);
    return st_emu_exchange(v, seg + (int)delta < width ? lane + (int)delta : lane);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    const int lane = st_emu_lane(), seg = lane & (width - 1);
    return st_emu_exchange(v, seg >= (int)delta ? lane - (int)delta : lane);
}

/* One thread runs at a time: the atomics are plain read-modify-writes. */
template <typename T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    *p = old > v ? old : v;
    return old;
}
template <typename T> static inline T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <typename T> static inline T __ldg(const T *p) { return *p; }
/* __expf and __logf: glibc's own */
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
/* IEEE operations, round to nearest (the build never contracts to FMA) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double d) { long long v; memcpy(&v, &d, 8); return v; }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
#endif /* __cplusplus */

#endif
