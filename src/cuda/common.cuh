/* What every CUDA file of the backend shares: the device object (streams,
 * cuBLASLt handle and workspace), the check macros that turn CUDA and cuBLAS
 * errors into statuses with file, line, host and device, and accessors for
 * the graph's device from inside a layer's forward or backward.
 *
 * A layer's CUDA twin (src/cuda/<layer>.cu) follows four steps, as ggml's ops
 * do: device helpers, the kernel, a launcher taking the stream, and the ops
 * entry point (same signature as the CPU's) that reads the node's arguments
 * (src/layers/args.h) and launches on st_cuda_stream(g), then ST_CUDA_LAUNCHED().
 * Kernels never synchronise the device; the step loop is one stream of work.
 * Tensors' data/grad/idata pointers are device pointers on a CUDA graph;
 * n->saved and g->work are device scratch laid out from saved_count and
 * work_count (a twin that needs different amounts sets them in `prepare`). */
#ifndef ST_CUDA_COMMON_CUH
#define ST_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <pthread.h>

extern "C" {
#include "core/ticker.h"
#include "core/watch.h"
#include "cuda/cuda.h"
#include "layers/args.h"
#include "model/graph.h"
}

struct st_device {
    int ordinal;
    int cc_major, cc_minor, sm_count;
    char name[192];
    char host[64];
    cudaStream_t compute; /* every kernel of the step */
    cudaStream_t comm;    /* collectives (NCCL), ordered with compute by events */
    cudaStream_t copy;    /* host-to-device copies (batches, offloaded weights) */
    cudaStream_t d2h;     /* device-to-host copies (offloaded gradients) */
    cublasLtHandle_t lt;
    void *lt_ws; /* cuBLASLt workspace, allocated once when the device opens */
    size_t lt_ws_bytes;
    struct st_lt_plans *plans; /* cuBLASLt plans by shape and layout (matmul.cu), made on first use */
    bool lt_tune;              /* a new plan times the heuristic's first algorithms (model.matmul_tune) */
    char pci_bus_id[32];       /* "0000:65:00.0", for NVML */
    char uuid[48];             /* "GPU-...", the driver's: a MIG slice's own ("" when unknown) */
    /* Memory held through st_cuda_alloc (cudaFree is not told a size: each
     * live block is listed, a few dozen arenas at most) and the workspace. */
    struct st_cuda_block {
        void *p;
        size_t nbytes;
    } * blocks;
    int n_blocks, cap_blocks;
    int64_t allocated, peak;
    int *flag;     /* one int: st_cuda_all_finite's result */
    void *scratch; /* 16-bit copies of matrix-product operands (st_cuda_scratch) */
    size_t scratch_bytes;
    int64_t stream_waits; /* host waits for a whole stream (st_cuda_stream_sync), for tests */
    struct st_cudnn *cudnn; /* cuDNN's handle and attention graphs (attention_cudnn.h), made when a
                               graph first asks for them; NULL until then and without ST_HAVE_CUDNN */
    bool cudnn_refused;     /* cuDNN would not start here (its handle refused): attention runs the flash
                               kernels, said once (attention.cu cudnn_prepare) */
    int64_t cudnn_calls;    /* attention forwards and backwards run by cuDNN, for tests */
    int64_t bgrad_calls;    /* bias gradients summed in cuBLASLt's epilogue (linear.cu), for tests */
    int64_t kept_rows_calls; /* the fused head's rows kernels run with each row kept in shared memory
                                (linear_ce.cu, ST_KV_CE_ROWS_SHARED), for tests */
    /* The stall watch (st_cuda_watch, core/watch.h): ends the process when
     * a wait of the host for the device outlasts train.device_timeout_s;
     * step: the step the waits are named by (atomic: any thread may wait). */
    st_watch *watch;
    int64_t step;
    char oom_advice[384]; /* a failed allocation's advice (st_cuda_set_oom_advice); "": training's */
};

/* The host waits for the device from here to st_cuda_call_end (cuda.h), for the
 * stall watch; nothing without one. */
void st_cuda_wait_begin(st_device *d, const char *what);

/* Record "file:line: what failed: why (host, cuda:N)" and return a status. */
extern "C" st_status st_cuda_fail(const st_device *d, cudaError_t e, const char *what, const char *file,
                                  int line);
/* ": a kernel faulted and this process can no longer use the GPU ..." for
 * the errors that lose the process's CUDA context (device.cu), else "";
 * cudaSuccess: the context's sticky error, if any (cudaPeekAtLastError),
 * for a library's failure that a lost context caused. */
extern "C" const char *st_cuda_lost_hint(cudaError_t e);
extern "C" st_status st_cublas_fail(const st_device *d, cublasStatus_t e, const char *what, const char *file,
                                    int line);

#define ST_CUDA_TRY_D(d, call)                                                                               \
    do {                                                                                                     \
        cudaError_t st_cu_e_ = (call);                                                                       \
        if (st_cu_e_ != cudaSuccess) return st_cuda_fail((d), st_cu_e_, #call, __FILE__, __LINE__);          \
    } while (0)
#define ST_CUBLAS_TRY_D(d, call)                                                                             \
    do {                                                                                                     \
        cublasStatus_t st_cb_e_ = (call);                                                                    \
        if (st_cb_e_ != CUBLAS_STATUS_SUCCESS)                                                               \
            return st_cublas_fail((d), st_cb_e_, #call, __FILE__, __LINE__);                                 \
    } while (0)
/* Wait on the host for everything queued on stream s (never the device):
 * every such wait of the backend goes through here and is counted
 * (st_cuda_stream_waits), so a test can tell the step loop makes none per
 * micro-step. */
static inline cudaError_t st_cuda_stream_sync(st_device *d, cudaStream_t s) {
    d->stream_waits++;
    st_cuda_wait_begin(d, s == d->compute ? "its compute stream"
                          : s == d->comm  ? "its communication stream"
                          : s == d->copy  ? "its copy stream"
                                          : "its device-to-host stream");
    const cudaError_t e = cudaStreamSynchronize(s);
    st_cuda_call_end(d);
    return e;
}

/* Inside a layer's forward/backward, where `g` is the graph. */
#define ST_CUDA_TRY(call) ST_CUDA_TRY_D(g->dev, call)
#define ST_CUBLAS_TRY(call) ST_CUBLAS_TRY_D(g->dev, call)
/* After every launch: a bad configuration or an earlier fault shows here. */
#define ST_CUDA_LAUNCHED() ST_CUDA_TRY(cudaGetLastError())

/* Destroy the cuBLASLt plans (matmul.cu); before the handle goes. */
void st_cuda_plans_free(st_device *d);

/* dst[i] = src[i] as bf16 (p bf16) or fp16 (p fp16) bits, round to nearest
 * even: exact when src already holds such values (the graph rounded them). */
st_status st_cuda_to_16(st_device *d, st_precision p, void *dst, const float *src, int64_t count);

static inline cudaStream_t st_cuda_stream(const st_graph *g) { return g->dev->compute; }

/* A float activation or parameter, or its gradient, as a kernel takes it:
 * the array and how it is stored (st_tensor.store, src/layers/half_io.h; a
 * parameter of a bf16/fp16 run reads the 16-bit compute copy). st_ld reads an
 * element as a float; st_st stores one, rounded to nearest even into a 16-bit
 * array (the rounding the graph applies to an fp32 array in a 16-bit run,
 * so the values are the same either way). The storage is the same for every
 * thread: the branch costs no divergence. */
struct st_fbuf {
    void *p;
    st_precision t;
};
static inline st_fbuf st_data(const st_tensor *t) { return st_fbuf{(void *)t->data, t->store}; }
static inline st_fbuf st_grad(const st_tensor *t) {
    return st_fbuf{(void *)t->grad, st_tensor_store(t, true)};
}
#ifdef ST_CUDA_EMU /* (the pointers the emulator checks at a launch: emu.h st_emu_pointers) */
static inline int st_emu_pointers(const st_fbuf &b, const void **out) {
    return st_emu_pointers_of(out, {b.p});
}
#endif
static inline size_t st_fbuf_elem(st_fbuf b) { return b.t == ST_PREC_FP32 ? 4 : 2; }
/* b advanced by i elements */
__host__ __device__ __forceinline__ st_fbuf st_fbuf_at(st_fbuf b, int64_t i) {
    return st_fbuf{(char *)b.p + i * (b.t == ST_PREC_FP32 ? 4 : 2), b.t};
}
__device__ __forceinline__ float st_ld(st_fbuf b, int64_t i) {
    if (b.t == ST_PREC_BF16) return __bfloat162float(((const __nv_bfloat16 *)b.p)[i]);
    if (b.t == ST_PREC_FP16) return __half2float(((const __half *)b.p)[i]);
    return ((const float *)b.p)[i];
}
/* v rounded to nearest even into the 16-bit precision P and back: the value
 * a 16-bit store of v holds. */
template <int P> __device__ __forceinline__ float st_round16(float v) {
    if (P == ST_PREC_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return __half2float(__float2half_rn(v));
}
__device__ __forceinline__ void st_st(st_fbuf b, int64_t i, float v) {
    if (b.t == ST_PREC_BF16)
        ((__nv_bfloat16 *)b.p)[i] = __float2bfloat16_rn(v);
    else if (b.t == ST_PREC_FP16)
        ((__half *)b.p)[i] = __float2half_rn(v);
    else
        ((float *)b.p)[i] = v;
}

/* Two 16-bit values of precision P (bf16 or fp16) in one register, lo in
 * the low half (the lower column or row), each rounded to nearest even; and
 * back, the low or high half as a float (exact). The bf16 names are the
 * tensor-core operands' (mma.cuh). */
template <int P> __device__ __forceinline__ uint32_t st_pack16(float lo, float hi) {
    if (P == ST_PREC_BF16)
        return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
               (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
    const uint32_t l = __half_as_ushort(__float2half_rn(lo)), h = __half_as_ushort(__float2half_rn(hi));
    return l | h << 16;
}
template <int P> __device__ __forceinline__ float st_unpack16_lo(uint32_t u) {
    if (P == ST_PREC_BF16) return __uint_as_float(u << 16);
    return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
template <int P> __device__ __forceinline__ float st_unpack16_hi(uint32_t u) {
    if (P == ST_PREC_BF16) return __uint_as_float(u & 0xffff0000u);
    return __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
/* Eight 16-bit values of precision P as one 16-byte word holds them (lowest
 * column first), to floats and back (each rounded as st_pack16): for
 * kernels that keep 16-bit rows as loaded and convert where they use them. */
template <int P> __device__ __forceinline__ void st_unpack8(const uint4 &u, float *v) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = st_unpack16_lo<P>(w[k]);
        v[2 * k + 1] = st_unpack16_hi<P>(w[k]);
    }
}
template <int P> __device__ __forceinline__ uint4 st_pack8(const float *v) {
    return make_uint4(st_pack16<P>(v[0], v[1]), st_pack16<P>(v[2], v[3]), st_pack16<P>(v[4], v[5]),
                      st_pack16<P>(v[6], v[7]));
}
static __device__ __forceinline__ uint32_t st_bf16x2(float lo, float hi) {
    return st_pack16<ST_PREC_BF16>(lo, hi);
}
static __device__ __forceinline__ float st_bf16x2_lo(uint32_t u) { return st_unpack16_lo<ST_PREC_BF16>(u); }
static __device__ __forceinline__ float st_bf16x2_hi(uint32_t u) { return st_unpack16_hi<ST_PREC_BF16>(u); }

/* VW consecutive elements from i on, as floats: VW 1 is st_ld; VW 8 moves
 * them with 16-byte accesses (one for 16-bit storage, two for fp32), so
 * element i must sit at a 16-byte boundary (st_fbuf_aligned8). A memory-bound
 * kernel moving 2 bytes a thread per load keeps too few bytes in flight: the
 * H200's layernorm backward reached 570 GB/s that way. st_stv rounds as st_st. */
static inline bool st_fbuf_aligned8(st_fbuf b, int64_t ld) {
    return b.p == NULL || (((uintptr_t)b.p & 15) == 0 && ld % 8 == 0);
}
template <int VW> __device__ __forceinline__ void st_ldv(st_fbuf b, int64_t i, float *v) {
    if (VW == 1) {
        v[0] = st_ld(b, i);
    } else if (b.t == ST_PREC_FP32) {
        const float4 x = ((const float4 *)((const float *)b.p + i))[0],
                     y = ((const float4 *)((const float *)b.p + i))[1];
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
    } else {
        const uint4 u = *(const uint4 *)((const uint16_t *)b.p + i);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        const bool bf = b.t == ST_PREC_BF16;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = bf ? st_unpack16_lo<ST_PREC_BF16>(w[k]) : st_unpack16_lo<ST_PREC_FP16>(w[k]);
            v[2 * k + 1] = bf ? st_unpack16_hi<ST_PREC_BF16>(w[k]) : st_unpack16_hi<ST_PREC_FP16>(w[k]);
        }
    }
}
template <int VW> __device__ __forceinline__ void st_stv(st_fbuf b, int64_t i, const float *v) {
    if (VW == 1) {
        st_st(b, i, v[0]);
    } else if (b.t == ST_PREC_FP32) {
        ((float4 *)((float *)b.p + i))[0] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4 *)((float *)b.p + i))[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint32_t w[4];
        const bool bf = b.t == ST_PREC_BF16;
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = bf ? st_pack16<ST_PREC_BF16>(v[2 * k], v[2 * k + 1])
                      : st_pack16<ST_PREC_FP16>(v[2 * k], v[2 * k + 1]);
        *(uint4 *)((uint16_t *)b.p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* A device function kept out of line (its registers apart from its
 * caller's): nvcc's __noinline__, which g++ (the emulator) spells as an
 * attribute; libstdc++'s own uses of the attribute forbid defining the
 * keyword itself there. */
#ifdef ST_CUDA_EMU
#define ST_NOINLINE __attribute__((noinline))
#else
#define ST_NOINLINE __noinline__
#endif

/* Asynchronous copies from global to shared memory (sm_80: cp.async), so
 * that a tile's loads run while the block computes on the previous one
 * without passing through registers: st_cp_async<N> copies N bytes (16 or
 * 4; both addresses N-byte aligned), or writes N zero bytes when !ok (src
 * is then not read, but must be a valid address); st_cp_async_commit
 * closes the thread's group of copies; st_cp_async_wait waits for all of its
 * groups, after which a barrier makes every thread's copies visible. Under
 * the CPU emulator the copy lands at the wait, and its destination reads as
 * NaN until then (tests/cudaemu/README.md). */
template <int N> static __device__ __forceinline__ void st_cp_async(void *dst, const void *src, bool ok) {
    static_assert(N == 16 || N == 4, "cp.async of 16 or 4 bytes");
#ifdef ST_CUDA_EMU
    st_emu_cp_async(dst, src, N, ok);
#else
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (N == 16) /* .cg: through L2 only (a tile is read once a block) */
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
#endif
}
static __device__ __forceinline__ void st_cp_async_commit() {
#ifdef ST_CUDA_EMU
    st_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
static __device__ __forceinline__ void st_cp_async_wait() {
#ifdef ST_CUDA_EMU
    st_emu_cp_async_wait(0);
#else
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

/* Blocks of `threads` covering n elements, capped for grid-stride loops. */
static inline unsigned st_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 65535LL * 8) b = 65535LL * 8;
    return (unsigned)(b > 0 ? b : 1);
}

/* The same counter-based draw as src/core/rng.h (st_mix64, st_rng_at), so
 * dropout masks on the GPU equal the CPU's element for element. Keep the two
 * in step: a CUDA parity test compares the masks. */
__device__ __forceinline__ uint64_t st_cuda_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float st_cuda_rng_at(uint64_t seed, uint64_t stream, uint64_t i) {
    return (float)(st_cuda_mix64(st_cuda_mix64(seed ^ st_cuda_mix64(stream)) + i) >> 40) *
           (1.0f / 16777216.0f);
}

#endif
