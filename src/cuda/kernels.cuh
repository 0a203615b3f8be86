/* Helpers the layer kernels share: warp and block sums in a fixed order,
 * column sums over rows (bias, norm and position-embedding gradients), and
 * the identity's backward (write or add dy into dx).
 *
 * Every reduction here is deterministic: its order depends on the shapes
 * only, never on timing or the device's size, and there are no atomics.
 * Column sums run in two passes: fixed chunks of rows give per-chunk
 * partials (in the graph's work scratch, sized by st_colsum_work in a twin's
 * `prepare`), then one pass adds the chunks in a fixed order into the output. The
 * summation order differs from the CPU's plain row loop, so results agree to
 * rounding, not bits. Block sizes are multiples of 32 (full warps). */
#ifndef ST_CUDA_KERNELS_CUH
#define ST_CUDA_KERNELS_CUH

#include <utility>

#include "common.cuh"

/* f(std::integral_constant<int, N>()) for the first N of the ascending list
 * that is at least n: a kernel templated on a size picked at run time (the
 * caller keeps n within the list's last). */
template <class F, int... N>
static inline void st_pick_at_least(int64_t n, F &&f, std::integer_sequence<int, N...>) {
    (void)((n <= N && (f(std::integral_constant<int, N>()), true)) || ...);
}

template <typename T> __device__ __forceinline__ T st_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* NaN-propagating max, so a NaN logit shows in the loss rather than vanishing. */
__device__ __forceinline__ float st_nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ float st_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = st_nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum over the block, returned to every thread. `sh` holds 32 values of
 * shared memory; the call may be repeated with the same `sh`. */
template <typename T> __device__ T st_block_sum(T v, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = st_warp_sum(v);
    __syncthreads(); /* an earlier call's readers are done with sh */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : T(0);
    return st_warp_sum(v);
}

__device__ __forceinline__ float st_block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = st_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return st_warp_max(v);
}

/* --- a row of logits: softmax_ce.cu and linear_ce.cu --------------------- */

/* Threads per row's block for V classes (the row kernels launched with it
 * declare __launch_bounds__(1024), so that a toolkit's register choice never
 * makes a 1024-thread launch fail). */
static inline unsigned st_ce_row_threads(int64_t V) { return V >= 8192 ? 1024 : V >= 1024 ? 256 : 64; }

/* f(v, b[o + v]) for every v < V, over the block's threads in a fixed order:
 * the elements before b + o's first 16-byte boundary and after its last
 * whole group of 8 one at a time, the groups between 8 at a time with
 * 16-byte loads (st_ldv; a logits row is 100 KB at GPT-2's vocabulary, and
 * 2-byte loads left the H200's head at a few hundred GB/s). With STORE the
 * value f returns is stored over the element (st_block_row_map), else it is
 * dropped (st_block_row_each).
 * P: ST_PREC_FP32 for a row in any storage; or the row's 16-bit precision
 * (bf16, fp16), where each thread loads its next group before it works on
 * the one it holds, both kept as loaded (4 registers each, not 8 floats),
 * so that two of its 16-byte loads are in flight instead of one
 * (ST_KV_CE_ROWS_PREFETCH): the same calls of f on the same values in the
 * same order, and the same stores.
 * SRC (16-bit P only): ST_ROW_GLOBAL, the groups from b; ST_ROW_KEEP, the
 * groups from b, each also stored as loaded into keep[k] (k: the group's
 * number in the row; shared memory of at least V / 8 uint4); ST_ROW_KEPT,
 * the groups from keep[k] instead of b, as a walk with ST_ROW_KEEP left
 * them (each thread reads back only its own groups: no barrier needed
 * between the two walks), so that a row is read from device memory once
 * (ST_KV_CE_ROWS_SHARED). The elements before the first group and after
 * the last come from b either way. */
enum { ST_ROW_GLOBAL = 0, ST_ROW_KEEP = 1, ST_ROW_KEPT = 2 };
template <int P, bool STORE, int SRC = ST_ROW_GLOBAL, class F>
__device__ __forceinline__ void st_block_row_walk(st_fbuf b, int64_t o, int64_t V, F &&f,
                                                  uint4 *keep = nullptr) {
    static_assert(SRC == ST_ROW_GLOBAL || P != ST_PREC_FP32, "a row kept in shared memory is 16-bit");
    const st_fbuf r = st_fbuf_at(b, o);
    int64_t head = (int64_t)((16 - ((uintptr_t)r.p & 15)) & 15) / (r.t == ST_PREC_FP32 ? 4 : 2);
    if (head > V) head = V;
    const int64_t n8 = (V - head) / 8, tail = head + 8 * n8;
    const auto one = [&](int64_t v) {
        const float y = f(v, st_ld(r, v));
        if (STORE) st_st(r, v, y);
    };
    for (int64_t v = threadIdx.x; v < head; v += blockDim.x)
        one(v);
    if constexpr (P == ST_PREC_FP32) {
        for (int64_t k = threadIdx.x; k < n8; k += blockDim.x) {
            float x[8];
            st_ldv<8>(r, head + 8 * k, x);
#pragma unroll
            for (int j = 0; j < 8; j++)
                x[j] = f(head + 8 * k + j, x[j]);
            if (STORE) st_stv<8>(r, head + 8 * k, x);
        }
    } else {
        uint16_t *g8 = (uint16_t *)r.p + head;
        const auto group = [&](int64_t k, const uint4 &cur) { /* group k of 8, as loaded */
                                                              float x[8];
                                                              st_unpack8<P>(cur, x);
#pragma unroll
                                                              for (int j = 0; j < 8; j++)
                                                                  x[j] = f(head + 8 * k + j, x[j]);
                                                              if (STORE)
                                                                  *(uint4 *)(g8 + 8 * k) = st_pack8<P>(x);
        };
        if constexpr (SRC == ST_ROW_KEPT) {
            for (int64_t k = threadIdx.x; k < n8; k += blockDim.x)
                group(k, keep[k]);
        } else {
            const uint4 zero = make_uint4(0, 0, 0, 0);
            int64_t k = threadIdx.x;
            uint4 next = k < n8 ? *(const uint4 *)(g8 + 8 * k) : zero;
            for (; k < n8; k += blockDim.x) {
                const uint4 cur = next;
                next = k + blockDim.x < n8 ? *(const uint4 *)(g8 + 8 * (k + blockDim.x)) : zero;
                if constexpr (SRC == ST_ROW_KEEP) keep[k] = cur;
                group(k, cur);
            }
        }
    }
    for (int64_t v = tail + threadIdx.x; v < V; v += blockDim.x)
        one(v);
}
template <int P = ST_PREC_FP32, int SRC = ST_ROW_GLOBAL, class F>
__device__ __forceinline__ void st_block_row_each(st_fbuf b, int64_t o, int64_t V, F &&f,
                                                  uint4 *keep = nullptr) {
    st_block_row_walk<P, false, SRC>(
        b, o, V,
        [&](int64_t v, float x) {
            f(v, x);
            return x;
        },
        keep);
}
template <int P = ST_PREC_FP32, int SRC = ST_ROW_GLOBAL, class G>
__device__ __forceinline__ void st_block_row_map(st_fbuf b, int64_t o, int64_t V, G &&g,
                                                 uint4 *keep = nullptr) {
    st_block_row_walk<P, true, SRC>(b, o, V, g, keep);
}

/* The log-sum-exp of b[o, o + V), one block per row, returned to every
 * thread, in one pass over the row: each thread keeps its running max m and
 * its sum s of exp(x - m) (rescaled when m grows: one exponential an
 * element either way), then the block's max M and the sum of s exp(m - M)
 * in a fixed order; fp32 sums, the log in double. A NaN shows in the loss
 * (it fails every comparison, so it lands in s). `shf` holds 32 floats of
 * shared memory. (The CPU's: ce_rows.h, max then sum.) With SRC =
 * ST_ROW_KEEP the row's groups are left in keep (st_block_row_walk). */
template <int P = ST_PREC_FP32, int SRC = ST_ROW_GLOBAL>
__device__ __forceinline__ double st_block_row_lse(st_fbuf b, int64_t o, int64_t V, float *shf,
                                                   uint4 *keep = nullptr) {
    float m = -INFINITY, s = 0.0f;
    st_block_row_each<P, SRC>(
        b, o, V,
        [&](int64_t, float x) {
            if (x > m) {
                s = s * expf(m - x) + 1.0f; /* (m = -inf: 0 + 1) */
                m = x;
            } else if (x != -INFINITY) {
                s += expf(x - m);
            }
        },
        keep);
    const float M = st_block_max(m, shf);
    s = st_block_sum(m == -INFINITY ? s : s * expf(m - M), shf); /* (m = -inf: s is 0, or NaN) */
    return (double)M + log((double)s);
}

/* --- column sums: out[c] += sum over r < R of row r's element c --------- */
enum { ST_COLSUM_TX = 32, ST_COLSUM_TY = 8, ST_COLSUM_MAX_CHUNKS = 1024, ST_COLSUM_FINISH_TY = 32 };

static inline int64_t st_colsum_rows_per_chunk(int64_t R) {
    int64_t per = 64;
    if ((R + per - 1) / per > ST_COLSUM_MAX_CHUNKS)
        per = (R + ST_COLSUM_MAX_CHUNKS - 1) / ST_COLSUM_MAX_CHUNKS;
    return per;
}
static inline int64_t st_colsum_chunks(int64_t R) {
    const int64_t per = st_colsum_rows_per_chunk(R);
    return (R + per - 1) / per;
}
/* Floats of work scratch a column sum of R rows and C columns needs. */
static inline int64_t st_colsum_work(int64_t R, int64_t C) {
    const int64_t k = st_colsum_chunks(R);
    return k > 1 ? k * C : 0;
}

/* A column sum's source: VW consecutive elements of row r from column c
 * (f.template load<VW>(r, c, v)), VW = 8 only where f.vec8() (16-byte
 * loads: st_ldv). Block (TX, TY) covers TX VW columns of one chunk of rows;
 * thread (x, y) sums rows y, y + TY, ... of its VW columns, then row y = 0
 * adds the TY sums in order. With one chunk the block adds straight into
 * out; else it writes part. The order depends on R and C only, not on VW. */
template <int VW, class F>
__global__ void st_colsum_kernel(F f, int64_t R, int64_t C, int64_t per, float *part, float *out) {
    __shared__ float sh[ST_COLSUM_TY][ST_COLSUM_TX * VW + 1];
    const int64_t c = ((int64_t)blockIdx.x * ST_COLSUM_TX + threadIdx.x) * VW;
    const int64_t r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < R ? r0 + per : R;
    float acc[VW] = {};
    if (c < C) /* (unrolled by 8, 62 registers instead of 38: linear db 16% slower on an H200) */
        for (int64_t r = r0 + threadIdx.y; r < r1; r += ST_COLSUM_TY) {
            float v[VW];
            f.template load<VW>(r, c, v);
#pragma unroll
            for (int k = 0; k < VW; k++)
                acc[k] += v[k];
        }
#pragma unroll
    for (int k = 0; k < VW; k++)
        sh[threadIdx.y][threadIdx.x * VW + k] = acc[k];
    __syncthreads();
    if (threadIdx.y != 0) return;
#pragma unroll
    for (int k = 0; k < VW; k++) {
        if (c + k >= C) break;
        float s = 0.0f;
        for (int y = 0; y < ST_COLSUM_TY; y++)
            s += sh[y][threadIdx.x * VW + k];
        if (part)
            part[(int64_t)blockIdx.y * C + c + k] = s;
        else
            out[c + k] += s;
    }
}

/* out[c] += the chunks' partial sums (part: chunks x C), in a fixed order:
 * block (32, FINISH_TY) covers 32 columns; thread (x, y) sums chunks y,
 * y + FINISH_TY, ... of its column, then row y = 0 adds those in order. A
 * thread a column walking every chunk (as before) kept one load in flight
 * per thread on a handful of blocks. */
static __global__ void st_colsum_finish_kernel(const float *part, int64_t chunks, int64_t C, float *out,
                                               float *out2) {
    __shared__ float sh[ST_COLSUM_FINISH_TY][33];
    if (blockIdx.y) { /* the second sum: its partials follow the first's */
        part += chunks * C;
        out = out2;
    }
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < C)
#pragma unroll 8 /* (the loads issue together; the adds keep their order) */
        for (int64_t k = threadIdx.y; k < chunks; k += ST_COLSUM_FINISH_TY)
            s += part[k * C + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    float t = 0.0f;
    for (int y = 0; y < ST_COLSUM_FINISH_TY; y++)
        t += sh[y][threadIdx.x];
    out[c] += t;
}

/* out[c] += part's chunks (chunks x C); with out2, in the same launch,
 * out2[c] += the chunks x C partials after them. */
static inline st_status st_colsum_finish(st_graph *g, const float *part, int64_t chunks, int64_t C,
                                         float *out, float *out2 = nullptr) {
    st_colsum_finish_kernel<<<dim3((unsigned)((C + 31) / 32), out2 ? 2u : 1u), dim3(32, ST_COLSUM_FINISH_TY),
                              0, st_cuda_stream(g)>>>(part, chunks, C, out, out2);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* Queue out[c] += sum_r of row r's element c on the graph's stream; `work`
 * holds at least st_colsum_work(R, C) floats. */
template <class F>
static st_status st_colsum(st_graph *g, F f, int64_t R, int64_t C, float *work, float *out) {
    const int64_t per = st_colsum_rows_per_chunk(R), chunks = st_colsum_chunks(R);
    float *part = chunks > 1 ? work : nullptr;
    const dim3 block(ST_COLSUM_TX, ST_COLSUM_TY);
    if (f.vec8()) {
        const dim3 grid((unsigned)((C + 8 * ST_COLSUM_TX - 1) / (8 * ST_COLSUM_TX)), (unsigned)chunks);
        st_colsum_kernel<8><<<grid, block, 0, st_cuda_stream(g)>>>(f, R, C, per, part, out);
    } else {
        const dim3 grid((unsigned)((C + ST_COLSUM_TX - 1) / ST_COLSUM_TX), (unsigned)chunks);
        st_colsum_kernel<1><<<grid, block, 0, st_cuda_stream(g)>>>(f, R, C, per, part, out);
    }
    ST_CUDA_LAUNCHED();
    if (part) ST_TRY(st_colsum_finish(g, part, chunks, C, out));
    return ST_OK;
}

/* The column sums of a row-major (R, C) activation in either storage. */
struct st_colsum_act {
    st_fbuf m;
    int64_t C;
    bool vec8() const { return st_fbuf_aligned8(m, C); }
    template <int VW> __device__ void load(int64_t r, int64_t c, float *v) const {
        st_ldv<VW>(m, r * C + c, v);
    }
};
#ifdef ST_CUDA_EMU
static inline int st_emu_pointers(const st_colsum_act &a, const void **out) {
    return st_emu_pointers_of(out, {a.m.p});
}
#endif

/* --- the identity's backward --------------------------------------------- */
template <typename T> __global__ void st_add_into(T *dx, const T *dy, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] += dy[i];
}

/* dx = dy or dx += dy, VW elements a thread (st_ldv: 8 when both arrays are
 * 16-byte aligned and n a multiple of 8). */
template <int VW> __global__ void st_pass_kernel(st_fbuf dx, st_fbuf dy, int64_t n, bool acc) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * VW; i < n;
         i += (int64_t)gridDim.x * blockDim.x * VW) {
        float y[VW], d[VW];
        st_ldv<VW>(dy, i, y);
        if (acc) {
            st_ldv<VW>(dx, i, d);
#pragma unroll
            for (int k = 0; k < VW; k++)
                y[k] += d[k];
        }
        st_stv<VW>(dx, i, y);
    }
}

/* dx = dy (a device copy when both are stored alike), or dx += dy when acc;
 * either storage for each. */
static inline st_status st_grad_pass_cuda(st_graph *g, st_fbuf dx, st_fbuf dy, int64_t n, bool acc) {
    if (n <= 0 || (dx.p == dy.p && !acc)) return ST_OK; /* one memory: graph.c alias_passes */
    if (!acc && dx.t == dy.t) {
        ST_CUDA_TRY(cudaMemcpyAsync(dx.p, dy.p, (size_t)n * st_fbuf_elem(dx), cudaMemcpyDeviceToDevice,
                                    st_cuda_stream(g)));
        return ST_OK;
    }
    if (dx.t == ST_PREC_FP32 && dy.t == ST_PREC_FP32) {
        st_add_into<float>
            <<<st_cuda_blocks(n, 256), 256, 0, st_cuda_stream(g)>>>((float *)dx.p, (const float *)dy.p, n);
        ST_CUDA_LAUNCHED();
        return ST_OK;
    }
    if (st_fbuf_aligned8(dx, n) && st_fbuf_aligned8(dy, n))
        st_pass_kernel<8><<<st_cuda_blocks(n / 8, 256), 256, 0, st_cuda_stream(g)>>>(dx, dy, n, acc);
    else
        st_pass_kernel<1><<<st_cuda_blocks(n, 256), 256, 0, st_cuda_stream(g)>>>(dx, dy, n, acc);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* The cross-entropy layers' mean (softmax_ce.cu, linear_ce.cu), one block:
 * loss = sum(row_loss) / count of targets that are not ign (0 when none),
 * the count kept in *count_slot as int bits for backward. */
template <typename T> /* double: a template so that each file including this has its own copy */
__global__ void st_ce_total_kernel(const T *row_loss, const int32_t *tg, int64_t R, int32_t ign, float *loss,
                                   float *count_slot) {
    __shared__ T shd[32];
    __shared__ long long shl[32];
    T s = 0.0;
    long long c = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
        s += row_loss[r];
        c += tg[r] != ign;
    }
    s = st_block_sum(s, shd);
    c = st_block_sum(c, shl);
    if (threadIdx.x == 0) {
        loss[0] = c ? (float)(s / (double)c) : 0.0f;
        *count_slot = __int_as_float((int)c);
    }
}

/* Raise the node's work scratch to at least `count` floats (from prepare). */
static inline void st_need_work(st_node *n, int64_t count) {
    if (count > n->work_count) n->work_count = count;
}

#endif
