/* Flash attention on tensor cores (attention_flash.cuh): bf16 runs. fp32
 * and fp16 runs take the exact fp32 kernels of attention_flash_f32.cu.
 *
 * Forward, one block per 64 queries of one (b, h), four warps of 16 query
 * rows each; key tiles of BK (64, or 32 for hs 128) in shared memory as
 * bf16; causal: tiles after the block's last query are never loaded, a
 * warp skips a tile whose keys all follow its queries. Per tile, per warp,
 * on mma.sync (mma.cuh) with everything in registers: S = Q K^T, the
 * online softmax (running max m and sum l per row, the four lanes of a
 * quad per row), the accumulator O rescaled by exp(m_old - m_new) and O +=
 * P V, P passed from S's accumulators to the product's operands in place.
 *
 * Precision (docs/precision.md): Q, K, V and dY hold bf16 values (the graph
 * rounded them), so their bf16 copies are exact and Q K^T and dY V^T are
 * exact products summed in fp32, as the materialised path's. Forward's P is
 * fp32 there and on the CPU, so here it is split into two bf16 numbers, hi
 * = bf16(x) and lo = bf16(x - hi), and multiplied twice: x = hi + lo to
 * about 2^-16 relative, far below the bf16 rounding of the layer's output,
 * at the cost of a second product (3 products forward instead of 2).
 * Backward's products take P and dS as bf16 values, as the CPU's bf16 runs
 * round them (one product each). No TF32 anywhere: fp32 runs are exact fp32
 * (the fp32 contract).
 *
 * Backward is on wmma: its fragments are only touched element by element
 * against fragments of the same type, so nothing depends on how a GPU maps
 * a wmma fragment's elements to rows (which CUDA leaves unspecified;
 * mma.sync's layout is documented).
 *
 * Backward (FlashAttention-2, algorithm 2, without atomics): a small kernel
 * first sums D_i = rowsum(dY_i * Y_i) (= sum_j P_ij dP_ij, over hs terms
 * instead of i) into dsum, as the CPU does; the dQ kernel (per 64 queries,
 * like forward) walks the key tiles once: S = Q K^T, dP = dY V^T, P from
 * lse, dS = P (dP - D), dQ += dS K scale. The dK/dV kernel (per 64 keys,
 * four warps of 16 keys) walks the query tiles from its first key on: S^T
 * = K Q^T, dP^T = V dY^T, P^T from lse, dV += P^T dY, dK += dS^T Q scale.
 * Every element of dqkv is written by one thread in a fixed order:
 * deterministic. Tensor-core products per tile: 3 forward, 3 in dQ's
 * kernel and 4 in dK/dV's. */
#include <math.h>
#include <mma.h>

#include "attention_flash.cuh"
#include "mma.cuh"

using namespace nvcuda;

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> arow_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> brow_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bcol_t;

/* A warp's 16-row scratch of backward: fp32 values (ld BK + 4), or the
 * same rows as bf16 (ld BK + 8). */
template <int BK> union fa_strip {
    float s[16 * (BK + 4)];
    bf16 p[16 * (BK + 8)];
};

/* rows row0.. of a (T, ld) matrix in either storage, D columns, into bf16
 * dst (ld ldd, a multiple of 8; dst 16-byte aligned); rows at or past T are
 * zeros. From bf16 storage with 16-byte aligned rows (always for the
 * graph's arenas: C = heads x D is a multiple of 16) eight elements a
 * thread at a time, one 16-byte load and store; else one at a time. */
template <int D>
static __device__ void load_bf16(bf16 *dst, int ldd, st_fbuf src, int64_t ld, int row0, int rows, int T) {
    if (src.t == ST_PREC_BF16 && ((uintptr_t)src.p & 15) == 0 && ld % 8 == 0) {
        for (int e = threadIdx.x; e < rows * (D / 8); e += blockDim.x) {
            const int r = e / (D / 8), c = e % (D / 8) * 8;
            const uint4 v = row0 + r < T
                                ? *(const uint4 *)((const bf16 *)src.p + (int64_t)(row0 + r) * ld + c)
                                : make_uint4(0, 0, 0, 0);
            *(uint4 *)(dst + r * ldd + c) = v;
        }
        return;
    }
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        dst[r * ldd + c] =
            __float2bfloat16_rn(row0 + r < T ? st_ld(src, (int64_t)(row0 + r) * ld + c) : 0.0f);
    }
}

/* Store the warp's 16 x (16 ND) accumulator rows through its strip (ld
 * lds) to dst rows (row r at dst + r * ld), rows at or past `valid` left
 * out; add when acc. Lanes 2r, 2r + 1 take row r. */
template <int ND>
static __device__ void store_rows(const acc_t *o, float *strip, int lds, st_fbuf dst, int64_t ld, int valid,
                                  bool acc) {
    const int lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    for (int d = 0; d < ND; d++) {
        __syncwarp(); /* the strip's last readers are done */
        wmma::store_matrix_sync(strip, o[d], lds, wmma::mem_row_major);
        __syncwarp();
        if (r < valid)
            for (int c = 0; c < 8; c++) {
                const int64_t i = (int64_t)r * ld + d * 16 + half * 8 + c;
                const float v = strip[r * lds + half * 8 + c];
                st_st(dst, i, acc ? st_ld(dst, i) + v : v);
            }
    }
    __syncwarp();
}

/* ---- forward ------------------------------------------------------------- */
/* rows row0.. of a (T, ld) matrix, D columns, transposed into bf16 dst:
 * element (r, c) at dst[c * ldd + r] (ldd even); rows at or past T zeros.
 * From bf16 storage with 16-byte aligned rows a thread moves eight
 * elements of one row; the warp's threads take consecutive rows, so the
 * 2-byte stores of one column fall in consecutive shared-memory words. */
template <int D>
static __device__ void load_bf16_t(bf16 *dst, int ldd, st_fbuf src, int64_t ld, int row0, int rows, int T) {
    if (src.t == ST_PREC_BF16 && ((uintptr_t)src.p & 15) == 0 && ld % 8 == 0) {
        for (int e = threadIdx.x; e < rows * (D / 8); e += blockDim.x) {
            const int r = e % rows, c = e / rows * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (row0 + r < T) v = *(const uint4 *)((const bf16 *)src.p + (int64_t)(row0 + r) * ld + c);
            const bf16 *x = (const bf16 *)&v;
            for (int i = 0; i < 8; i++)
                dst[(c + i) * ldd + r] = x[i];
        }
        return;
    }
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
        const int r = e % rows, c = e / rows;
        dst[c * ldd + r] =
            __float2bfloat16_rn(row0 + r < T ? st_ld(src, (int64_t)(row0 + r) * ld + c) : 0.0f);
    }
}

/* Forward on mma.sync (mma.cuh): a block per 64 queries of one (b, h), a
 * warp per 16 of them. Per key tile the warp's scores S (16 x BK) stay in
 * registers as accumulators; the online softmax works on them there (each
 * row is held by the four lanes of a quad: its max and sum take two
 * shuffles) and they become P V's A operands in place, as hi and lo bf16
 * parts (x = hi + lo to about 2^-16, docs/precision.md). K sits in shared
 * memory as rows ([key][dim]), V transposed ([dim][key]), so that every
 * B operand is one 32-bit load; Q's fragments are loaded once. */
template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 4 : 2) flash_fwd_mma(st_flash f) {
    enum {
        BK = D <= 64 ? 64 : 32,
        QR = 64 > BK ? 64 : BK,
        LDK = D + 8,
        LDV = BK + 8,
        NK = BK / 8,
        KD = D / 16,
        ND = D / 8
    };
    __shared__ __align__(16) bf16 ks[QR * LDK]; /* Q's 64 rows first, then each K tile */
    __shared__ __align__(16) bf16 vt[D * LDV];  /* each V tile, transposed */
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + 63) / 64, q0 = (nqt - 1 - (int)blockIdx.x) * 64; /* the longest rows first */
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qw = q0 + warp * 16, qa = qw + g, qb = qa + 8; /* this lane's two rows */

    load_bf16<D>(ks, LDK, qg, C3, q0, 64, T);
    __syncthreads();
    uint32_t qf[KD][4];
    for (int kd = 0; kd < KD; kd++) {
        const bf16 *p = ks + (warp * 16 + g) * LDK + kd * 16 + 2 * t;
        qf[kd][0] = st_ld_bf16x2(p);
        qf[kd][1] = st_ld_bf16x2(p + 8 * LDK);
        qf[kd][2] = st_ld_bf16x2(p + 8);
        qf[kd][3] = st_ld_bf16x2(p + 8 * LDK + 8);
    }
    float o[ND][4];
    for (int n = 0; n < ND; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f; /* rows qa and qb */
    const int kend = q0 + 64 < T ? q0 + 64 : T;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* the last tile (or Q) is read */
        load_bf16<D>(ks, LDK, st_fbuf_at(qg, C), C3, k0, BK, T);
        load_bf16_t<D>(vt, LDV, st_fbuf_at(qg, 2 * C), C3, k0, BK, T);
        __syncthreads();
        if (k0 > qw + 15) continue; /* every key after every query of this warp */
        float s[NK][4];
        for (int n = 0; n < NK; n++) { /* S = Q K^T, keys k0 + 8n .. */
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            for (int kd = 0; kd < KD; kd++) {
                const bf16 *p = ks + (n * 8 + g) * LDK + kd * 16 + 2 * t;
                const uint32_t kb[2] = {st_ld_bf16x2(p), st_ld_bf16x2(p + 8)};
                st_mma_16816(s[n], qf[kd], kb);
            }
        }
        float xa = -INFINITY, xb = -INFINITY;
        for (int n = 0; n < NK; n++)
            for (int i = 0; i < 4; i++) {
                const int j = k0 + n * 8 + 2 * t + (i & 1), q = i < 2 ? qa : qb;
                s[n][i] = j <= q && j < T ? s[n][i] * f.scale : -INFINITY;
            }
        for (int n = 0; n < NK; n++) {
            xa = fmaxf(xa, fmaxf(s[n][0], s[n][1]));
            xb = fmaxf(xb, fmaxf(s[n][2], s[n][3]));
        }
        for (int o2 = 1; o2 < 4; o2 <<= 1) { /* over the quad: the whole rows */
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o2));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o2));
        }
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb); /* finite: key 0 is in every row's first tile */
        const float aa = expf(ma - na), ab = expf(mb - nb);
        float sa = 0.0f, sb = 0.0f;
        for (int n = 0; n < NK; n++) {
            s[n][0] = expf(s[n][0] - na);
            s[n][1] = expf(s[n][1] - na);
            s[n][2] = expf(s[n][2] - nb);
            s[n][3] = expf(s[n][3] - nb);
            sa += s[n][0] + s[n][1];
            sb += s[n][2] + s[n][3];
        }
        for (int o2 = 1; o2 < 4; o2 <<= 1) {
            sa += __shfl_xor_sync(0xffffffffu, sa, o2);
            sb += __shfl_xor_sync(0xffffffffu, sb, o2);
        }
        la = la * aa + sa;
        lb = lb * ab + sb;
        ma = na;
        mb = nb;
        for (int n = 0; n < ND; n++) {
            o[n][0] *= aa;
            o[n][1] *= aa;
            o[n][2] *= ab;
            o[n][3] *= ab;
        }
        for (int kk = 0; kk < BK / 16; kk++) { /* O += P V over keys k0 + 16 kk .. */
            const float *p0 = s[2 * kk], *p1 = s[2 * kk + 1];
            uint32_t hi[4], lo[4];
            const float x[4][2] = {{p0[0], p0[1]}, {p0[2], p0[3]}, {p1[0], p1[1]}, {p1[2], p1[3]}};
            for (int i = 0; i < 4; i++) {
                hi[i] = st_bf16x2(x[i][0], x[i][1]);
                const float h0 = __uint_as_float(hi[i] << 16), h1 = __uint_as_float(hi[i] & 0xffff0000u);
                lo[i] = st_bf16x2(x[i][0] - h0, x[i][1] - h1);
            }
            for (int n = 0; n < ND; n++) {
                const bf16 *p = vt + (n * 8 + g) * LDV + kk * 16 + 2 * t;
                const uint32_t vb[2] = {st_ld_bf16x2(p), st_ld_bf16x2(p + 8)};
                st_mma_16816(o[n], hi, vb);
                st_mma_16816(o[n], lo, vb);
            }
        }
    }
    const float ia = 1.0f / la, ib = 1.0f / lb;
    const st_fbuf y = st_fbuf_at(f.y, (int64_t)b * T * C + (int64_t)h * D);
    for (int n = 0; n < ND; n++) {
        const int c = n * 8 + 2 * t;
        if (qa < T) {
            st_st(y, (int64_t)qa * C + c, o[n][0] * ia);
            st_st(y, (int64_t)qa * C + c + 1, o[n][1] * ia);
        }
        if (qb < T) {
            st_st(y, (int64_t)qb * C + c, o[n][2] * ib);
            st_st(y, (int64_t)qb * C + c + 1, o[n][3] * ib);
        }
    }
    if (t == 0) {
        if (qa < T) f.lse[(int64_t)bh * T + qa] = ma + logf(la);
        if (qb < T) f.lse[(int64_t)bh * T + qb] = mb + logf(lb);
    }
}

/* Backward's pair of products for a warp's 16 rows against a tile of N rows
 * (ld ldk in shared memory): s = A B^T and g = C E^T (A and C the warp's
 * fragments, ND of 16 columns each), stored to s_out and g_out (ld lds). */
template <int ND, int N>
static __device__ void two_products(const arow_t *a, const bf16 *b, const arow_t *c, const bf16 *e, int ldk,
                                    float *s_out, float *g_out, int lds) {
    for (int n = 0; n < N / 16; n++) {
        acc_t s, g;
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(g, 0.0f);
        for (int d = 0; d < ND; d++) {
            bcol_t bb, eb;
            wmma::load_matrix_sync(bb, b + n * 16 * ldk + d * 16, ldk);
            wmma::mma_sync(s, a[d], bb, s);
            wmma::load_matrix_sync(eb, e + n * 16 * ldk + d * 16, ldk);
            wmma::mma_sync(g, c[d], eb, g);
        }
        wmma::store_matrix_sync(s_out + n * 16, s, lds, wmma::mem_row_major);
        wmma::store_matrix_sync(g_out + n * 16, g, lds, wmma::mem_row_major);
    }
}

/* ---- backward: D, then dQ ------------------------------------------------ */
/* D_i = rowsum(dY_i * Y_i) over the head's channels (= sum_j P_ij dP_ij) into
 * dsum, one warp a row (b, h, i), its lanes over the channels, then a fixed
 * shuffle tree: deterministic. Both backward kernels read it. */
static __global__ void flash_rowsums(st_flash f) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; /* (b h) T + i */
    const int lane = threadIdx.x & 31;
    if (w >= (int64_t)f.B * f.nh * f.T) return; /* whole warps */
    const int64_t bh = w / f.T, i = w % f.T, b = bh / f.nh, h = bh % f.nh;
    const int64_t off = (b * f.T + i) * f.C + h * f.hs;
    float s = 0.0f;
    for (int c = lane; c < f.hs; c += 32)
        s += st_ld(f.dy, off + c) * st_ld(f.y, off + c);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) f.dsum[w] = s;
}

st_status st_cuda_flash_rowsums(st_graph *g, const st_flash *f) {
    enum { THREADS = 256 };
    const int64_t rows = (int64_t)f->B * f->nh * f->T;
    flash_rowsums<<<(unsigned)((rows + THREADS / 32 - 1) / (THREADS / 32)), THREADS, 0, st_cuda_stream(g)>>>(
        *f);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 4 : 2) flash_dq_mma(st_flash f) {
    enum { BK = 32, LDK = D + 8, LDS = BK + 4, LDP = BK + 8, ND = D / 16, HC = BK / 2 };
    __shared__ __align__(32) bf16 kv[2 * BK * LDK]; /* K and V tiles; Q's, then dY's 64 rows first */
    __shared__ __align__(32) fa_strip<BK> sa[4];    /* S, then dS */
    __shared__ __align__(32) float sb[4][16 * LDS]; /* dP */
    bf16 *ks = kv, *vs = kv + BK * LDK;
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + 63) / 64, q0 = (nqt - 1 - (int)blockIdx.x) * 64;
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const st_fbuf gg = st_fbuf_at(f.dy, (int64_t)b * T * C + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const int qw = q0 + warp * 16, qi = qw + r;
    float *S = sa[warp].s, *dP = sb[warp];
    bf16 *dh = sa[warp].p;
    const float lse = qi < T ? f.lse[(int64_t)bh * T + qi] : 0.0f;
    const float dsum = qi < T ? f.dsum[(int64_t)bh * T + qi] : 0.0f;

    arow_t qf[ND], gf[ND];
    load_bf16<D>(kv, LDK, qg, C3, q0, 64, T);
    __syncthreads();
    for (int d = 0; d < ND; d++)
        wmma::load_matrix_sync(qf[d], kv + warp * 16 * LDK + d * 16, LDK);
    __syncthreads();
    load_bf16<D>(kv, LDK, gg, C, q0, 64, T);
    __syncthreads();
    for (int d = 0; d < ND; d++)
        wmma::load_matrix_sync(gf[d], kv + warp * 16 * LDK + d * 16, LDK);
    acc_t dq[ND];
    for (int d = 0; d < ND; d++)
        wmma::fill_fragment(dq[d], 0.0f);
    const int kend = q0 + 64 < T ? q0 + 64 : T;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        load_bf16<D>(ks, LDK, st_fbuf_at(qg, C), C3, k0, BK, T);
        load_bf16<D>(vs, LDK, st_fbuf_at(qg, 2 * C), C3, k0, BK, T);
        __syncthreads();
        if (k0 > qw + 15) continue;
        two_products<ND, BK>(qf, ks, gf, vs, LDK, S, dP, LDS); /* S = Q K^T, dP = dY V^T */
        __syncwarp();
        float ds[HC];
        for (int c = 0; c < HC; c++) {
            const int col = half * HC + c, j = k0 + col;
            const float p = j <= qi && j < T ? expf(S[r * LDS + col] * f.scale - lse) : 0.0f;
            ds[c] = p * (dP[r * LDS + col] - dsum);
        }
        __syncwarp(); /* every score is read before dS overwrites the strip */
        for (int c = 0; c < HC; c++)
            dh[r * LDP + half * HC + c] = __float2bfloat16_rn(ds[c]);
        __syncwarp();
        for (int kk = 0; kk < BK / 16; kk++) { /* dQ += dS K */
            arow_t a;
            wmma::load_matrix_sync(a, dh + kk * 16, LDP);
            for (int d = 0; d < ND; d++) {
                brow_t kb;
                wmma::load_matrix_sync(kb, ks + kk * 16 * LDK + d * 16, LDK);
                wmma::mma_sync(dq[d], a, kb, dq[d]);
            }
        }
    }
    for (int d = 0; d < ND; d++)
        for (int i = 0; i < dq[d].num_elements; i++)
            dq[d].x[i] *= f.scale;
    store_rows<ND>(dq, S, LDS, st_fbuf_at(f.dqkv, ((int64_t)b * T + qw) * C3 + (int64_t)h * D), C3, T - qw,
                   f.acc);
}

/* ---- backward: dK and dV ------------------------------------------------- */
template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 3 : 2) flash_dkv_mma(st_flash f) {
    enum { BQ = 32, LDK = D + 8, LDS = BQ + 4, LDP = BQ + 8, ND = D / 16, HC = BQ / 2 };
    __shared__ __align__(32) bf16 qg_s[2 * BQ * LDK]; /* Q and dY tiles; K's, then V's 64 rows first */
    __shared__ __align__(32) fa_strip<BQ> sa[4];      /* S^T, then P^T */
    __shared__ __align__(32) fa_strip<BQ> sb[4];      /* dP^T, then dS^T */
    __shared__ float lse_s[BQ], dsum_s[BQ];
    bf16 *qs = qg_s, *gs = qg_s + BQ * LDK;
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int k0 = (int)blockIdx.x * 64; /* the first keys see the most queries: first */
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const st_fbuf gg = st_fbuf_at(f.dy, (int64_t)b * T * C + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const int kw = k0 + warp * 16, kj = kw + r;
    float *St = sa[warp].s, *dPt = sb[warp].s;
    bf16 *ph = sa[warp].p, *dh = sb[warp].p;

    arow_t kf[ND], vf[ND];
    load_bf16<D>(qg_s, LDK, st_fbuf_at(qg, C), C3, k0, 64, T);
    __syncthreads();
    for (int d = 0; d < ND; d++)
        wmma::load_matrix_sync(kf[d], qg_s + warp * 16 * LDK + d * 16, LDK);
    __syncthreads();
    load_bf16<D>(qg_s, LDK, st_fbuf_at(qg, 2 * C), C3, k0, 64, T);
    __syncthreads();
    for (int d = 0; d < ND; d++)
        wmma::load_matrix_sync(vf[d], qg_s + warp * 16 * LDK + d * 16, LDK);
    acc_t dk[ND], dv[ND];
    for (int d = 0; d < ND; d++) {
        wmma::fill_fragment(dk[d], 0.0f);
        wmma::fill_fragment(dv[d], 0.0f);
    }
    for (int i0 = k0; i0 < T; i0 += BQ) { /* queries before k0 see none of these keys */
        __syncthreads();
        load_bf16<D>(qs, LDK, qg, C3, i0, BQ, T);
        load_bf16<D>(gs, LDK, gg, C, i0, BQ, T);
        if (threadIdx.x < BQ) {
            const int i = i0 + threadIdx.x;
            lse_s[threadIdx.x] = i < T ? f.lse[(int64_t)bh * T + i] : 0.0f;
            dsum_s[threadIdx.x] = i < T ? f.dsum[(int64_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        if (i0 + BQ - 1 < kw) continue;     /* every query before every key of this warp */
        two_products<ND, BQ>(kf, qs, vf, gs, LDK, St, dPt, LDS); /* S^T = K Q^T, dP^T = V dY^T */
        __syncwarp();
        float p[HC], ds[HC];
        for (int c = 0; c < HC; c++) {
            const int col = half * HC + c, i = i0 + col;
            p[c] = i >= kj && i < T && kj < T ? expf(St[r * LDS + col] * f.scale - lse_s[col]) : 0.0f;
            ds[c] = p[c] * (dPt[r * LDS + col] - dsum_s[col]);
        }
        __syncwarp();
        for (int c = 0; c < HC; c++) {
            const int col = half * HC + c;
            ph[r * LDP + col] = __float2bfloat16_rn(p[c]);
            dh[r * LDP + col] = __float2bfloat16_rn(ds[c]);
        }
        __syncwarp();
        for (int kk = 0; kk < BQ / 16; kk++) { /* dV += P^T dY, dK += dS^T Q */
            arow_t pa, da;
            wmma::load_matrix_sync(pa, ph + kk * 16, LDP);
            wmma::load_matrix_sync(da, dh + kk * 16, LDP);
            for (int d = 0; d < ND; d++) {
                brow_t gb, qb;
                wmma::load_matrix_sync(gb, gs + kk * 16 * LDK + d * 16, LDK);
                wmma::mma_sync(dv[d], pa, gb, dv[d]);
                wmma::load_matrix_sync(qb, qs + kk * 16 * LDK + d * 16, LDK);
                wmma::mma_sync(dk[d], da, qb, dk[d]);
            }
        }
    }
    for (int d = 0; d < ND; d++)
        for (int i = 0; i < dk[d].num_elements; i++)
            dk[d].x[i] *= f.scale;
    const st_fbuf dst = st_fbuf_at(f.dqkv, ((int64_t)b * T + kw) * C3 + (int64_t)h * D);
    store_rows<ND>(dk, St, LDS, st_fbuf_at(dst, C), C3, T - kw, f.acc);
    store_rows<ND>(dv, St, LDS, st_fbuf_at(dst, 2 * C), C3, T - kw, f.acc);
}

/* ---- launchers ----------------------------------------------------------- */
template <int D> static st_status forward_mma(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + 63) / 64), (unsigned)(f->B * f->nh));
    flash_fwd_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

template <int D> static st_status backward_mma(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + 63) / 64), (unsigned)(f->B * f->nh));
    ST_TRY(st_cuda_flash_rowsums(g, f));
    flash_dq_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    flash_dkv_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

st_status st_cuda_flash_forward(st_graph *g, const st_flash *f) {
    if (g->params->precision != ST_PREC_BF16) return st_cuda_flash_forward_f32(g, f);
    return st_flash_by_head_size(f, [&](auto d) { return forward_mma<decltype(d)::value>(g, f); });
}

st_status st_cuda_flash_backward(st_graph *g, const st_flash *f) {
    if (g->params->precision != ST_PREC_BF16) return st_cuda_flash_backward_f32(g, f);
    return st_flash_by_head_size(f, [&](auto d) { return backward_mma<decltype(d)::value>(g, f); });
}
