/* Flash attention in exact fp32 (attention_flash.cuh): fp32 runs (the fp32
 * contract of docs/precision.md allows no TF32) and fp16 runs (whose dS
 * could leave fp16's range in a 16-bit product). Plain FMAs, one thread
 * per query row (forward, dQ) or key row (dK, dV), holding its row of Q,
 * O or dQ (K, V, dK, dV) in registers; tiles of 32 keys (queries) in shared
 * memory, read by every thread at the same address (a broadcast). The same
 * algorithm as the tensor-core kernels of attention_flash.cu: forward's
 * online softmax per tile of keys, backward's D_i = rowsum(dY_i * Y_i)
 * (st_cuda_flash_rowsums), then dQ, then dK and dV by key rows, every
 * output written by one thread in a fixed order. Not the fast
 * path (no tensor cores, 64 threads a block); it keeps the memory saving. */
#include <math.h>

#include "attention_flash.cuh"

enum { F32_ROWS = 64, F32_TILE = 32 };

/* Loops over a row's D elements are fully unrolled, so that the row arrays
 * stay in registers; the forward's loops over a tile's keys are kept rolled
 * (ST_ROLLED): unrolling them too (32 x D bodies, per head size and
 * architecture) tripled this file's compile time, and the scores s[] they
 * index then sit in local memory, 32 floats a row against 2 x 32 x D FMAs.
 * g++ under the emulator has no such pragmas. */
#ifdef ST_CUDA_EMU
#define ST_UNROLL
#define ST_ROLLED
#else
#define ST_UNROLL _Pragma("unroll")
#define ST_ROLLED _Pragma("unroll 1")
#endif

/* rows row0.. of a (T, ld) matrix, D columns, into dst (F32_TILE, D); zeros at or past T */
template <int D> static __device__ void load_tile(float *dst, st_fbuf src, int64_t ld, int row0, int T) {
    for (int e = threadIdx.x; e < F32_TILE * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        dst[e] = row0 + r < T ? st_ld(src, (int64_t)(row0 + r) * ld + c) : 0.0f;
    }
}

template <int D> static __device__ float dot(const float *a, const float *b) {
    float s = 0.0f;
    ST_UNROLL
    for (int d = 0; d < D; d++)
        s += a[d] * b[d];
    return s;
}

template <int D> static __device__ void load_row(float *dst, st_fbuf src, bool ok) {
    ST_UNROLL
    for (int d = 0; d < D; d++)
        dst[d] = ok ? st_ld(src, d) : 0.0f;
}

template <int D> static __device__ void store_row(st_fbuf dst, const float *v, float mul, bool acc) {
    ST_UNROLL
    for (int d = 0; d < D; d++)
        st_st(dst, d, acc ? st_ld(dst, d) + v[d] * mul : v[d] * mul);
}

template <int D> static __global__ void flash_fwd_f32(st_flash f) {
    __shared__ float ks[F32_TILE * D], vs[F32_TILE * D];
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + F32_ROWS - 1) / F32_ROWS, q0 = (nqt - 1 - (int)blockIdx.x) * F32_ROWS;
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh, qi = q0 + (int)threadIdx.x;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    float q[D], o[D];
    load_row<D>(q, st_fbuf_at(qg, (int64_t)qi * C3), qi < T);
    ST_UNROLL
    for (int d = 0; d < D; d++)
        o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kend = q0 + F32_ROWS < T ? q0 + F32_ROWS : T;
    for (int k0 = 0; k0 < kend; k0 += F32_TILE) {
        __syncthreads();
        load_tile<D>(ks, st_fbuf_at(qg, C), C3, k0, T);
        load_tile<D>(vs, st_fbuf_at(qg, 2 * C), C3, k0, T);
        __syncthreads();
        if (k0 > qi) continue;
        float s[F32_TILE], mx = -INFINITY;
        ST_ROLLED
        for (int c = 0; c < F32_TILE; c++) {
            const int j = k0 + c;
            s[c] = j <= qi && j < T ? dot<D>(q, ks + c * D) * f.scale : -INFINITY;
            mx = fmaxf(mx, s[c]);
        }
        const float mn = fmaxf(m, mx), alpha = expf(m - mn); /* key 0: mn is finite */
        l *= alpha;
        ST_UNROLL
        for (int d = 0; d < D; d++)
            o[d] *= alpha;
        ST_ROLLED
        for (int c = 0; c < F32_TILE; c++) {
            const float p = expf(s[c] - mn);
            l += p;
            ST_UNROLL
            for (int d = 0; d < D; d++)
                o[d] += p * vs[c * D + d];
        }
        m = mn;
    }
    if (qi >= T) return;
    store_row<D>(st_fbuf_at(f.y, ((int64_t)b * T + qi) * C + (int64_t)h * D), o, 1.0f / l, false);
    f.lse[(int64_t)bh * T + qi] = m + logf(l);
}

template <int D> static __global__ void flash_dq_f32(st_flash f) {
    __shared__ float ks[F32_TILE * D], vs[F32_TILE * D];
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + F32_ROWS - 1) / F32_ROWS, q0 = (nqt - 1 - (int)blockIdx.x) * F32_ROWS;
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh, qi = q0 + (int)threadIdx.x;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    float q[D], g[D], dq[D];
    load_row<D>(q, st_fbuf_at(qg, (int64_t)qi * C3), qi < T);
    load_row<D>(g, st_fbuf_at(f.dy, ((int64_t)b * T + qi) * C + (int64_t)h * D), qi < T);
    ST_UNROLL
    for (int d = 0; d < D; d++)
        dq[d] = 0.0f;
    const float lse = qi < T ? f.lse[(int64_t)bh * T + qi] : 0.0f;
    const float dsum = qi < T ? f.dsum[(int64_t)bh * T + qi] : 0.0f;
    const int kend = q0 + F32_ROWS < T ? q0 + F32_ROWS : T;
    for (int k0 = 0; k0 < kend; k0 += F32_TILE) {
        __syncthreads();
        load_tile<D>(ks, st_fbuf_at(qg, C), C3, k0, T);
        load_tile<D>(vs, st_fbuf_at(qg, 2 * C), C3, k0, T);
        __syncthreads();
        for (int c = 0; c < F32_TILE; c++) {
            const int j = k0 + c;
            if (j > qi || j >= T) break;
            const float p = expf(dot<D>(q, ks + c * D) * f.scale - lse), dp = dot<D>(g, vs + c * D);
            const float ds = p * (dp - dsum);
            ST_UNROLL
            for (int d = 0; d < D; d++)
                dq[d] += ds * ks[c * D + d];
        }
    }
    if (qi >= T) return;
    store_row<D>(st_fbuf_at(f.dqkv, ((int64_t)b * T + qi) * C3 + (int64_t)h * D), dq, f.scale, f.acc);
}

template <int D> static __global__ void flash_dkv_f32(st_flash f) {
    __shared__ float qs[F32_TILE * D], gs[F32_TILE * D], lse_s[F32_TILE], dsum_s[F32_TILE];
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int k0 = (int)blockIdx.x * F32_ROWS, bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const int kj = k0 + (int)threadIdx.x;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const st_fbuf gg = st_fbuf_at(f.dy, (int64_t)b * T * C + (int64_t)h * D);
    float k[D], v[D], dk[D], dv[D];
    load_row<D>(k, st_fbuf_at(qg, C + (int64_t)kj * C3), kj < T);
    load_row<D>(v, st_fbuf_at(qg, 2 * C + (int64_t)kj * C3), kj < T);
    ST_UNROLL
    for (int d = 0; d < D; d++)
        dk[d] = dv[d] = 0.0f;
    for (int i0 = k0; i0 < T; i0 += F32_TILE) {
        __syncthreads();
        load_tile<D>(qs, qg, C3, i0, T);
        load_tile<D>(gs, gg, C, i0, T);
        if (threadIdx.x < F32_TILE) {
            const int i = i0 + (int)threadIdx.x;
            lse_s[threadIdx.x] = i < T ? f.lse[(int64_t)bh * T + i] : 0.0f;
            dsum_s[threadIdx.x] = i < T ? f.dsum[(int64_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        if (kj >= T) continue;
        for (int c = 0; c < F32_TILE; c++) {
            const int i = i0 + c;
            if (i >= T) break;
            if (i < kj) continue;
            const float *qr = qs + c * D, *gr = gs + c * D;
            const float p = expf(dot<D>(qr, k) * f.scale - lse_s[c]);
            const float ds = p * (dot<D>(gr, v) - dsum_s[c]);
            ST_UNROLL
            for (int d = 0; d < D; d++) {
                dv[d] += p * gr[d];
                dk[d] += ds * qr[d];
            }
        }
    }
    if (kj >= T) return;
    const st_fbuf dst = st_fbuf_at(f.dqkv, ((int64_t)b * T + kj) * C3 + (int64_t)h * D);
    store_row<D>(st_fbuf_at(dst, C), dk, f.scale, f.acc);
    store_row<D>(st_fbuf_at(dst, 2 * C), dv, 1.0f, f.acc);
}

template <int D> static st_status forward(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + F32_ROWS - 1) / F32_ROWS), (unsigned)(f->B * f->nh));
    flash_fwd_f32<D><<<grid, F32_ROWS, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

template <int D> static st_status backward(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + F32_ROWS - 1) / F32_ROWS), (unsigned)(f->B * f->nh));
    ST_TRY(st_cuda_flash_rowsums(g, f));
    flash_dq_f32<D><<<grid, F32_ROWS, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    flash_dkv_f32<D><<<grid, F32_ROWS, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

st_status st_cuda_flash_forward_f32(st_graph *g, const st_flash *f) {
    return st_flash_by_head_size(f, [&](auto d) { return forward<decltype(d)::value>(g, f); });
}

st_status st_cuda_flash_backward_f32(st_graph *g, const st_flash *f) {
    return st_flash_by_head_size(f, [&](auto d) { return backward<decltype(d)::value>(g, f); });
}
