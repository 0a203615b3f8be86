/* Flash attention on tensor cores (attention_flash.cuh): bf16 runs. fp32
 * and fp16 runs take the exact fp32 kernels of attention_flash_f32.cu.
 *
 * Forward, one block per 64 queries of one (b, h), four warps of 16 query
 * rows each; key tiles of BK (64, or 32 for head sizes above 64) in shared memory as
 * bf16, in two buffers: the next tile loads by cp.async while the warps
 * work on the current one (tile_load: global latency hidden behind the
 * products, which the first H200 profile showed stalled behind every
 * synchronous tile load; one barrier a tile, no registers held for it);
 * causal: tiles after the block's last query are never loaded, a warp skips
 * a tile whose keys all follow its queries. Per tile, per warp, on mma.sync
 * (mma.cuh) with everything in registers: S = Q K^T, the online softmax
 * (running max m and sum l per row, the four lanes of a quad per row), the
 * accumulator O rescaled by exp(m_old - m_new) and O += P V, P passed from
 * S's accumulators to the product's operands in place.
 *
 * Every tile sits in shared memory as rows ([row][dim]), as it is in
 * memory; the products' operands come from it by ldmatrix (mma.cuh), with
 * .trans where a product needs the tile's columns (V in forward, K in dQ's
 * kernel, Q and dY in dK/dV's), so no tile is transposed. Exponentials are
 * base 2 with the scale folded in (exp(x scale - m) = exp2(x scale log2(e)
 * - m'), one FMA and one ex2 an element), and the causal mask is applied
 * only on the tiles that cross the diagonal or the sequence's end: the
 * instructions beside the tensor-core products are what bounded these
 * kernels (the compiled forward loop held about ten for each mma).
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
 * Backward (FlashAttention-2, algorithm 2, without atomics): a small kernel
 * first sums D_i = rowsum(dY_i * Y_i) (= sum_j P_ij dP_ij, over hs terms
 * instead of i) into dsum, as the CPU does; the dQ kernel (per 64 queries,
 * like forward) walks the key tiles once: S = Q K^T, dP = dY V^T, P from
 * lse, dS = P (dP - D), dQ += dS K scale. The dK/dV kernel (per 64 keys,
 * four warps of 16 keys) walks the query tiles from its first key on: S^T
 * = K Q^T, dP^T = V dY^T, P^T from lse, dV += P^T dY, dK += dS^T Q scale.
 * Both on mma.sync like forward, S, dP, P and dS in registers; the next
 * tile loads during the current tile's products, as forward's.
 * Every element of dqkv is written by one thread in a fixed order:
 * deterministic.
 * Tensor-core products per tile: 3 forward, 3 in dQ's kernel and 4 in
 * dK/dV's. */
#include <math.h>

#include "attention_flash.cuh"
#include "kernels.cuh"
#include "mma.cuh"

typedef __nv_bfloat16 bf16;

/* A operands of a warp's 16 rows (rows 0..15 of `rows`, ld ldr in shared
 * memory), KD chunks of 16 columns (mma.cuh's layout), by ldmatrix: lane L
 * names row L % 8 + 8 ((L / 8) % 2), column 8 (L / 16), so its four
 * matrices are a[0..3]'s quadrants. */
template <int KD> static __device__ void a_frags(uint32_t (*a)[4], const bf16 *rows, int ldr) {
    const int lane = threadIdx.x & 31;
    const bf16 *p = rows + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ldr + 8 * (lane >> 4);
#pragma unroll
    for (int kd = 0; kd < KD; kd++)
        st_ldsm_x4(a[kd], p + kd * 16);
}

/* B operands of two 8-column blocks n0 and n0 + 1 over the 16 k of k0..,
 * from [n][k] storage (ld ldb: B's columns as rows) by ldmatrix: r[0], r[1]
 * for n0, r[2], r[3] for n0 + 1. */
static __device__ __forceinline__ void b_pair_nk(uint32_t r[4], const bf16 *b, int ldb, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    st_ldsm_x4(r, b + (n0 * 8 + (lane & 7) + 8 * (lane >> 4)) * ldb + k0 + 8 * ((lane >> 3) & 1));
}

/* The same from [k][n] storage (rows k0..k0 + 15, B's own rows) by
 * ldmatrix.trans. */
static __device__ __forceinline__ void b_pair_kn(uint32_t r[4], const bf16 *b, int ldb, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    st_ldsm_x4_t(r, b + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ldb + n0 * 8 + 8 * (lane >> 4));
}

/* log2(e) and ln(2): exp(x) = exp2(x log2(e)) */
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

/* 2^x by the hardware's ex2 (one instruction; relative error about 2^-22,
 * results below 2^-126 flushed to 0), where exp2f adds a range check and
 * rescaling around it: far below the bf16 roundings these kernels feed
 * (the emulator's is exp2f). */
static __device__ __forceinline__ float ex2(float x) {
#ifdef ST_CUDA_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

/* Two accumulators of 8 columns each (columns n..n+7, n+8..n+15) as the A
 * operand of a product over those 16 columns, rounded to bf16. */
static __device__ void acc_to_a(uint32_t a[4], const float *d0, const float *d1) {
    a[0] = st_bf16x2(d0[0], d0[1]);
    a[1] = st_bf16x2(d0[2], d0[3]);
    a[2] = st_bf16x2(d1[0], d1[1]);
    a[3] = st_bf16x2(d1[2], d1[3]);
}

/* A warp's ND accumulators times fa in the lane's first row, fb in its second. */
template <int ND> static __device__ __forceinline__ void scale_rows(float (*o)[4], float fa, float fb) {
#pragma unroll
    for (int n = 0; n < ND; n++) {
        o[n][0] *= fa;
        o[n][1] *= fa;
        o[n][2] *= fb;
        o[n][3] *= fb;
    }
}

/* A warp's ND accumulators (rows ra and rb of the lane, columns 8n + 2t and
 * + 1) times `scale` into dst (ld ld), rows at or past T left out; added to
 * what is there when acc. */
template <int ND>
static __device__ void store_acc(const float (*o)[4], st_fbuf dst, int64_t ld, int ra, int rb, int T, int t,
                                 float scale, bool acc) {
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = i < 2 ? ra : rb;
            if (r >= T) continue;
            const int64_t k = (int64_t)r * ld + n * 8 + 2 * t + (i & 1);
            const float v = o[n][i] * scale;
            st_st(dst, k, acc ? st_ld(dst, k) + v : v);
        }
}

/* ---- tiles --------------------------------------------------------------- */
/* A tile of ROWS rows (row0.. of a (T, ld) matrix in either storage) by D
 * columns, fetched by the block's NT threads into registers as bf16, eight
 * values a 16-byte register group, then put into shared memory as rows
 * ([row][col], ld ldd); rows at or past T are zeros. Thread e holds row
 * e % ROWS, columns 8 (e / ROWS).. : a warp's 16-byte row stores land in
 * distinct banks (ldd = D + 8, an odd number of 16-byte units, which also
 * keeps ldmatrix's eight rows of a matrix in distinct banks). From bf16
 * storage with 16-byte aligned rows (the graph's arenas) one 16-byte load,
 * else eight loads converted. The loads of Q, dY, K and V that a block
 * makes once, and every tile whose storage is not bf16 (tile_load). */
template <int D, int ROWS, int NT> struct tile_regs {
    enum { CHUNKS = ROWS * D / 8, N = (CHUNKS + NT - 1) / NT };
    uint4 v[N];
    __device__ void fetch(st_fbuf src, int64_t ld, int row0, int T) {
        const bool fast = src.t == ST_PREC_BF16 && ((uintptr_t)src.p & 15) == 0 && ld % 8 == 0;
#pragma unroll
        for (int k = 0; k < N; k++) {
            const int e = threadIdx.x + k * NT, r = e % ROWS, c = e / ROWS * 8;
            v[k] = make_uint4(0, 0, 0, 0);
            if (e >= CHUNKS || row0 + r >= T) continue;
            const int64_t at = (int64_t)(row0 + r) * ld + c;
            if (fast) {
                v[k] = *(const uint4 *)((const bf16 *)src.p + at);
            } else {
                v[k] = make_uint4(st_bf16x2(st_ld(src, at), st_ld(src, at + 1)),
                                  st_bf16x2(st_ld(src, at + 2), st_ld(src, at + 3)),
                                  st_bf16x2(st_ld(src, at + 4), st_ld(src, at + 5)),
                                  st_bf16x2(st_ld(src, at + 6), st_ld(src, at + 7)));
            }
        }
    }
    __device__ void put(bf16 *dst, int ldd) const {
#pragma unroll
        for (int k = 0; k < N; k++) {
            const int e = threadIdx.x + k * NT;
            if (e < CHUNKS) *(uint4 *)(dst + e % ROWS * ldd + e / ROWS * 8) = v[k];
        }
    }
};

/* 64 rows (row0..) of a (T, ld) matrix into shared memory as bf16 rows,
 * now (32 at a time: fewer registers live beside the kernel's). */
template <int D>
static __device__ void load_rows64(bf16 *dst, int ldd, st_fbuf src, int64_t ld, int row0, int T) {
#pragma unroll 1
    for (int h = 0; h < 64; h += 32) {
        tile_regs<D, 32, 128> r;
        r.fetch(src, ld, row0 + h, T);
        r.put(dst + h * ldd, ldd);
    }
}

/* Whether tiles of src copy 16 bytes at a time as they are: bf16 storage,
 * 16-byte aligned rows. */
static __device__ __forceinline__ bool tile_fast(st_fbuf src, int64_t ld) {
    return src.t == ST_PREC_BF16 && ((uintptr_t)src.p & 15) == 0 && ld % 8 == 0;
}

/* A tile at once through registers: tile_load's path for storage other than
 * bf16, out of line so that its registers do not weigh on the kernels'
 * loops. */
template <int D, int ROWS, int NT>
static __device__ ST_NOINLINE void tile_put_now(bf16 *dst, int ldd, st_fbuf src, int64_t ld, int row0,
                                                int T) {
    tile_regs<D, ROWS, NT> t;
    t.fetch(src, ld, row0, T);
    t.put(dst, ldd);
}

/* A tile as tile_regs lays it out, by cp.async when `fast` (tile_fast):
 * complete only after st_cp_async_wait and a barrier, so that it loads
 * while the block works on the previous tile, in the other of two buffers
 * (one barrier a tile, no registers held). Thread e copies 16 bytes of row
 * e / (D / 8), so a warp reads whole rows. Otherwise at once, through
 * registers. */
template <int D, int ROWS, int NT>
static __device__ __forceinline__ void tile_load(bf16 *dst, int ldd, st_fbuf src, int64_t ld, int row0, int T,
                                                 bool fast) {
    if (fast) {
        enum { PER_ROW = D / 8, CHUNKS = ROWS * PER_ROW, N = (CHUNKS + NT - 1) / NT };
        const bf16 *base = (const bf16 *)src.p;
#pragma unroll
        for (int k = 0; k < N; k++) {
            const int e = threadIdx.x + k * NT, r = e / PER_ROW, c = e % PER_ROW * 8;
            if (e >= CHUNKS) continue;
            const bool ok = row0 + r < T; /* else zeros (row 0 named, not read) */
            st_cp_async<16>(dst + r * ldd + c, base + (int64_t)(ok ? row0 + r : 0) * ld + c, ok);
        }
        st_cp_async_commit();
    } else {
        tile_put_now<D, ROWS, NT>(dst, ldd, src, ld, row0, T);
    }
}

/* Where forward's and dQ's kernels read their K and V tiles: the (b, h)'s
 * columns of qkv from qg (its Q), rows 3C apart. */
template <int D, int BK> struct kv_tiles {
    st_fbuf k, v;
    int64_t ld;
    int T;
    bool kfast, vfast;
    __device__ kv_tiles(st_fbuf qg, int C, int T_)
        : k(st_fbuf_at(qg, C)), v(st_fbuf_at(qg, 2 * C)), ld(3 * (int64_t)C), T(T_), kfast(tile_fast(k, ld)),
          vfast(tile_fast(v, ld)) {}
    /* keys k0.. into buffer bf of ks and vs (BK rows each, ld ldk) */
    __device__ void load(bf16 *ks, bf16 *vs, int ldk, int bf, int k0) const {
        tile_load<D, BK, 128>(ks + bf * BK * ldk, ldk, k, ld, k0, T, kfast);
        tile_load<D, BK, 128>(vs + bf * BK * ldk, ldk, v, ld, k0, T, vfast);
    }
};

/* ---- forward ------------------------------------------------------------- */
/* Forward on mma.sync (mma.cuh): a block per 64 queries of one (b, h), a
 * warp per 16 of them. Per key tile the warp's scores S (16 x BK) stay in
 * registers as accumulators; the online softmax works on them there (each
 * row is held by the four lanes of a quad: its max and sum take two
 * shuffles) and they become P V's A operands in place, as hi and lo bf16
 * parts (x = hi + lo to about 2^-16, docs/precision.md). K and V sit in
 * shared memory as rows ([key][dim]); S's B operands come by ldmatrix,
 * P V's by ldmatrix.trans. Q's fragments are loaded once. The running max
 * m is kept in base-2 units (the scores times scale log2(e)). */
template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 3 : 2) flash_fwd_mma(st_flash f) {
    enum {
        BK = D <= 64 ? 64 : 32,
        QR = 64 > BK ? 64 : BK,
        LDK = D + 8,
        NK = BK / 8,
        KD = D / 16,
        ND = D / 8
    };
    /* Q's 64 rows first, then the K tiles in two buffers (BK rows each): the
     * next one loads (cp.async) while the warps work on the current one */
    __shared__ __align__(16) bf16 ks[(QR > 2 * BK ? QR : 2 * BK) * LDK];
    __shared__ __align__(16) bf16 vs[2 * BK * LDK]; /* the V tiles, likewise */
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + 63) / 64, q0 = (nqt - 1 - (int)blockIdx.x) * 64; /* the longest rows first */
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qw = q0 + warp * 16, qa = qw + g, qb = qa + 8; /* this lane's two rows */

    load_rows64<D>(ks, LDK, qg, C3, q0, T);
    __syncthreads();
    uint32_t qf[KD][4];
    a_frags<KD>(qf, ks + warp * 16 * LDK, LDK);
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f; /* rows qa and qb; m in base 2 */
    const float sl = f.scale * FLASH_LOG2E;
    const int kend = q0 + 64 < T ? q0 + 64 : T;
    const kv_tiles<D, BK> kv(qg, C, T);
    __syncthreads(); /* Q's fragments are read */
    kv.load(ks, vs, LDK, 0, 0);
    for (int k0 = 0, buf = 0; k0 < kend; k0 += BK, buf ^= 1) {
        st_cp_async_wait();
        __syncthreads(); /* this tile is in buffer buf; the other one's last tile is read */
        if (k0 + BK < kend)
            kv.load(ks, vs, LDK, buf ^ 1, k0 + BK); /* in flight during this tile's products */
        if (k0 > qw + 15) continue; /* every key after every query of this warp */
        const bf16 *kt = ks + buf * BK * LDK, *vt = vs + buf * BK * LDK;
        float s[NK][4] = {};
#pragma unroll
        for (int n = 0; n < NK; n += 2) /* S = Q K^T, keys k0 + 8n .. */
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                uint32_t kb[4];
                b_pair_nk(kb, kt, LDK, n, kd * 16);
                st_mma_16816(s[n], qf[kd], kb);
                st_mma_16816(s[n + 1], qf[kd], kb + 2);
            }
        if (k0 + BK - 1 > qw || k0 + BK > T) /* a key after a query of the warp, or past T */
#pragma unroll
            for (int n = 0; n < NK; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int j = k0 + n * 8 + 2 * t + (i & 1), q = i < 2 ? qa : qb;
                    if (!(j <= q && j < T)) s[n][i] = -INFINITY;
                }
        float xa = -INFINITY, xb = -INFINITY; /* the rows' largest raw scores (scale > 0) */
#pragma unroll
        for (int n = 0; n < NK; n++) {
            xa = fmaxf(xa, fmaxf(s[n][0], s[n][1]));
            xb = fmaxf(xb, fmaxf(s[n][2], s[n][3]));
        }
        for (int o2 = 1; o2 < 4; o2 <<= 1) { /* over the quad: the whole rows */
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o2));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o2));
        }
        /* finite: key 0 is in every row's first tile */
        const float na = fmaxf(ma, xa * sl), nb = fmaxf(mb, xb * sl);
        const float aa = ex2(ma - na), ab = ex2(mb - nb);
        float sa = 0.0f, sb = 0.0f;
#pragma unroll
        for (int n = 0; n < NK; n++) {
            s[n][0] = ex2(fmaf(s[n][0], sl, -na));
            s[n][1] = ex2(fmaf(s[n][1], sl, -na));
            s[n][2] = ex2(fmaf(s[n][2], sl, -nb));
            s[n][3] = ex2(fmaf(s[n][3], sl, -nb));
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
        scale_rows<ND>(o, aa, ab);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) { /* O += P V over keys k0 + 16 kk .. */
            const float *p0 = s[2 * kk], *p1 = s[2 * kk + 1];
            uint32_t hi[4], lo[4];
            const float x[4][2] = {{p0[0], p0[1]}, {p0[2], p0[3]}, {p1[0], p1[1]}, {p1[2], p1[3]}};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                hi[i] = st_bf16x2(x[i][0], x[i][1]);
                lo[i] = st_bf16x2(x[i][0] - st_bf16x2_lo(hi[i]), x[i][1] - st_bf16x2_hi(hi[i]));
            }
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t vb[4];
                b_pair_kn(vb, vt, LDK, n, kk * 16);
                st_mma_16816(o[n], hi, vb);
                st_mma_16816(o[n], lo, vb);
                st_mma_16816(o[n + 1], hi, vb + 2);
                st_mma_16816(o[n + 1], lo, vb + 2);
            }
        }
    }
    scale_rows<ND>(o, 1.0f / la, 1.0f / lb);
    store_acc<ND>(o, st_fbuf_at(f.y, (int64_t)b * T * C + (int64_t)h * D), C, qa, qb, T, t, 1.0f, false);
    if (t == 0) {
        if (qa < T) f.lse[(int64_t)bh * T + qa] = ma * FLASH_LN2 + logf(la);
        if (qb < T) f.lse[(int64_t)bh * T + qb] = mb * FLASH_LN2 + logf(lb);
    }
}

/* Backward's pair of score products for a warp's 16 rows against a tile
 * of 8 N rows ([row][dim] in shared memory, ld ldk): s += A B^T and d += C
 * E^T, A and C the warp's KD operands (a_frags). */
template <int N, int KD>
static __device__ __forceinline__ void two_products(float (*s)[4], const uint32_t (*a)[4], const bf16 *b,
                                                    float (*d)[4], const uint32_t (*c)[4], const bf16 *e,
                                                    int ldk) {
#pragma unroll
    for (int n = 0; n < N; n += 2)
#pragma unroll
        for (int kd = 0; kd < KD; kd++) {
            uint32_t bb[4], eb[4];
            b_pair_nk(bb, b, ldk, n, kd * 16);
            b_pair_nk(eb, e, ldk, n, kd * 16);
            st_mma_16816(s[n], a[kd], bb);
            st_mma_16816(s[n + 1], a[kd], bb + 2);
            st_mma_16816(d[n], c[kd], eb);
            st_mma_16816(d[n + 1], c[kd], eb + 2);
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

/* The same on 16-byte loads (st_ldv) where a head's rows allow them: L
 * lanes a row (the row's groups of 8, hs / 8, rounded up to a power of
 * two), 32 / L rows a warp; each lane sums its 8 products, then the row's
 * lanes add theirs by shuffles. GPT-2's head of 64 channels: 8 lanes a
 * row, where flash_rowsums has a warp read it 2 bytes a lane. */
template <int L> static __global__ void flash_rowsums8(st_flash f) {
    const int lane = threadIdx.x & 31, j = lane % L;
    const int64_t w = (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * (32 / L) + lane / L;
    const bool on = w < (int64_t)f.B * f.nh * f.T;
    float s = 0.0f;
    if (on && 8 * j < f.hs) {
        const int64_t bh = w / f.T, i = w % f.T, b = bh / f.nh, h = bh % f.nh;
        const int64_t off = (b * f.T + i) * f.C + h * f.hs + 8 * j;
        float a[8], c[8];
        st_ldv<8>(f.dy, off, a);
        st_ldv<8>(f.y, off, c);
#pragma unroll
        for (int k = 0; k < 8; k++)
            s += a[k] * c[k];
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) /* every lane: the row's L lanes share a group */
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (on && j == 0) f.dsum[w] = s;
}

st_status st_cuda_flash_rowsums(st_graph *g, const st_flash *f) {
    enum { THREADS = 256 };
    const int64_t rows = (int64_t)f->B * f->nh * f->T;
    if (f->hs % 8 == 0 && f->hs <= 128 && st_fbuf_aligned8(f->dy, f->C) && st_fbuf_aligned8(f->y, f->C)) {
        const auto launch = [&](auto lanes) {
            constexpr int L = decltype(lanes)::value;
            const int64_t warps = (rows + 32 / L - 1) / (32 / L);
            flash_rowsums8<L>
                <<<(unsigned)((warps + THREADS / 32 - 1) / (THREADS / 32)), THREADS, 0, st_cuda_stream(g)>>>(
                    *f);
        };
        st_pick_at_least(f->hs / 8, launch, std::integer_sequence<int, 2, 4, 8, 16>());
    } else {
        flash_rowsums<<<(unsigned)((rows + THREADS / 32 - 1) / (THREADS / 32)), THREADS, 0,
                        st_cuda_stream(g)>>>(*f);
    }
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* dQ on mma.sync, a block per 64 queries, a warp per 16 (rows qa = qw + g
 * and qb = qa + 8 in each lane): per key tile S = Q K^T and dP = dY V^T
 * in registers, P = exp(S scale - lse), dS = P (dP - D) rounded to bf16 in
 * place as the A operand of dQ += dS K, whose B operands come from the K
 * tile's rows by ldmatrix.trans. */
template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 3 : 2) flash_dq_mma(st_flash f) {
    enum { BK = D <= 64 ? 32 : 16, LDK = D + 8, NK = BK / 8, KD = D / 16, ND = D / 8 };
    /* Q's, then dY's 64 rows first; then the K tiles in two buffers */
    __shared__ __align__(16) bf16 ks[(64 > 2 * BK ? 64 : 2 * BK) * LDK];
    __shared__ __align__(16) bf16 vs[2 * BK * LDK]; /* the V tiles, two buffers */
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int nqt = (T + 63) / 64, q0 = (nqt - 1 - (int)blockIdx.x) * 64;
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const st_fbuf gg = st_fbuf_at(f.dy, (int64_t)b * T * C + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int qw = q0 + warp * 16, qa = qw + g, qb = qa + 8;
    const float sl = f.scale * FLASH_LOG2E; /* P = exp2(S sl - lse log2(e)) */
    const float la = qa < T ? f.lse[(int64_t)bh * T + qa] * FLASH_LOG2E : 0.0f,
                lb = qb < T ? f.lse[(int64_t)bh * T + qb] * FLASH_LOG2E : 0.0f;
    const float da = qa < T ? f.dsum[(int64_t)bh * T + qa] : 0.0f,
                db = qb < T ? f.dsum[(int64_t)bh * T + qb] : 0.0f;

    uint32_t qf[KD][4], gf[KD][4];
    load_rows64<D>(ks, LDK, qg, C3, q0, T);
    __syncthreads();
    a_frags<KD>(qf, ks + warp * 16 * LDK, LDK);
    __syncthreads();
    load_rows64<D>(ks, LDK, gg, C, q0, T);
    __syncthreads();
    a_frags<KD>(gf, ks + warp * 16 * LDK, LDK);
    float dq[ND][4] = {};
    const int kend = q0 + 64 < T ? q0 + 64 : T;
    const kv_tiles<D, BK> kv(qg, C, T);
    __syncthreads(); /* dY's fragments are read */
    kv.load(ks, vs, LDK, 0, 0);
    for (int k0 = 0, buf = 0; k0 < kend; k0 += BK, buf ^= 1) {
        st_cp_async_wait();
        __syncthreads(); /* this tile is in buffer buf; the other one's last tile is read */
        if (k0 + BK < kend)
            kv.load(ks, vs, LDK, buf ^ 1, k0 + BK); /* in flight during this tile's products */
        if (k0 > qw + 15) continue;
        const bf16 *kt = ks + buf * BK * LDK, *vt = vs + buf * BK * LDK;
        float s[NK][4] = {}, dp[NK][4] = {};
        two_products<NK, KD>(s, qf, kt, dp, gf, vt, LDK); /* S = Q K^T, dP = dY V^T */
        const bool edge = k0 + BK - 1 > qw || k0 + BK > T; /* a key after a query of the warp, or past T */
#pragma unroll
        for (int n = 0; n < NK; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int j = k0 + n * 8 + 2 * t + (i & 1), q = i < 2 ? qa : qb;
                const float p = ex2(fmaf(s[n][i], sl, -(i < 2 ? la : lb)));
                const float ds = p * (dp[n][i] - (i < 2 ? da : db)); /* dS */
                s[n][i] = !edge || (j <= q && j < T) ? ds : 0.0f;
            }
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) { /* dQ += dS K over keys k0 + 16 kk .. */
            uint32_t a[4];
            acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t kb[4];
                b_pair_kn(kb, kt, LDK, n, kk * 16);
                st_mma_16816(dq[n], a, kb);
                st_mma_16816(dq[n + 1], a, kb + 2);
            }
        }
    }
    store_acc<ND>(dq, st_fbuf_at(f.dqkv, (int64_t)b * T * C3 + (int64_t)h * D), C3, qa, qb, T, t, f.scale,
                  f.acc);
}

/* ---- backward: dK and dV ------------------------------------------------- */
/* dK and dV on mma.sync, a block per 64 keys, a warp per 16 (rows ka, kb
 * in each lane), walking the query tiles from the block's first key: S^T
 * = K Q^T and dP^T = V dY^T in registers, P^T from lse, dS^T = P^T (dP^T -
 * D), both rounded to bf16 in place as the A operands of dV += P^T dY and
 * dK += dS^T Q, whose B operands come from the dY and Q tiles' rows by
 * ldmatrix.trans. */
template <int D> static __global__ void __launch_bounds__(128, D <= 64 ? 3 : 2) flash_dkv_mma(st_flash f) {
    enum { BQ = D <= 64 ? 32 : 16, LDK = D + 8, NQ = BQ / 8, KD = D / 16, ND = D / 8 };
    /* K's, then V's 64 rows first; then the Q tiles in two buffers */
    __shared__ __align__(16) bf16 qs[(64 > 2 * BQ ? 64 : 2 * BQ) * LDK];
    __shared__ __align__(16) bf16 gs[2 * BQ * LDK]; /* the dY tiles, two buffers */
    __shared__ float lse_s[2][BQ], dsum_s[2][BQ];   /* the tiles' rows' lse and D */
    const int T = f.T, C = f.C;
    const int64_t C3 = 3 * (int64_t)C;
    const int k0 = (int)blockIdx.x * 64; /* the first keys see the most queries: first */
    const int bh = blockIdx.y, b = bh / f.nh, h = bh % f.nh;
    const st_fbuf qg = st_fbuf_at(f.qkv, (int64_t)b * T * C3 + (int64_t)h * D);
    const st_fbuf gg = st_fbuf_at(f.dy, (int64_t)b * T * C + (int64_t)h * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kw = k0 + warp * 16, ka = kw + g, kb = ka + 8;
    const float sl = f.scale * FLASH_LOG2E; /* P = exp2(S sl - lse log2(e)) */

    uint32_t kf[KD][4], vf[KD][4];
    load_rows64<D>(qs, LDK, st_fbuf_at(qg, C), C3, k0, T);
    __syncthreads();
    a_frags<KD>(kf, qs + warp * 16 * LDK, LDK);
    __syncthreads();
    load_rows64<D>(qs, LDK, st_fbuf_at(qg, 2 * C), C3, k0, T);
    __syncthreads();
    a_frags<KD>(vf, qs + warp * 16 * LDK, LDK);
    float dk[ND][4] = {}, dv[ND][4] = {};
    const bool qfast = tile_fast(qg, C3), gfast = tile_fast(gg, C);
    /* the Q and dY tiles from query i0 and their rows' lse and D into buffer bf */
    const auto load = [&](int i0, int bf) {
        tile_load<D, BQ, 128>(qs + bf * BQ * LDK, LDK, qg, C3, i0, T, qfast);
        tile_load<D, BQ, 128>(gs + bf * BQ * LDK, LDK, gg, C, i0, T, gfast);
        if (threadIdx.x < BQ) {
            const int i = i0 + threadIdx.x;
            const int64_t at = (int64_t)bh * T + (i < T ? i : 0);
            st_cp_async<4>(&lse_s[bf][threadIdx.x], f.lse + at, i < T);
            st_cp_async<4>(&dsum_s[bf][threadIdx.x], f.dsum + at, i < T);
            st_cp_async_commit();
        }
    };
    __syncthreads(); /* V's fragments are read */
    load(k0, 0);
    for (int i0 = k0, buf = 0; i0 < T; i0 += BQ, buf ^= 1) { /* queries before k0 see none of these keys */
        st_cp_async_wait();
        __syncthreads(); /* this tile is in buffer buf; the other one's last tile is read */
        if (i0 + BQ < T) load(i0 + BQ, buf ^ 1); /* in flight during this tile's products */
        if (i0 + BQ - 1 < kw) continue;          /* every query before every key of this warp */
        const bf16 *qt = qs + buf * BQ * LDK, *gt = gs + buf * BQ * LDK;
        const float *lse_t = lse_s[buf], *dsum_t = dsum_s[buf];
        float st[NQ][4] = {}, dpt[NQ][4] = {};
        two_products<NQ, KD>(st, kf, qt, dpt, vf, gt, LDK); /* S^T = K Q^T, dP^T = V dY^T */
        /* a query before a key of the warp, a query past T or a key past T */
        const bool edge = i0 < kw + 15 || i0 + BQ > T || kw + 16 > T;
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int c = n * 8 + 2 * t + (i & 1), q = i0 + c, k = i < 2 ? ka : kb;
                const float e = ex2(fmaf(st[n][i], sl, -lse_t[c] * FLASH_LOG2E));
                const float p = !edge || (q >= k && q < T && k < T) ? e : 0.0f;
                st[n][i] = p;
                dpt[n][i] = p * (dpt[n][i] - dsum_t[c]); /* dS^T */
            }
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) { /* over queries i0 + 16 kk .. */
            uint32_t pa[4], da[4];
            acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
            acc_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t gb[4], qb[4];
                b_pair_kn(gb, gt, LDK, n, kk * 16);
                b_pair_kn(qb, qt, LDK, n, kk * 16);
                st_mma_16816(dv[n], pa, gb);
                st_mma_16816(dv[n + 1], pa, gb + 2);
                st_mma_16816(dk[n], da, qb);
                st_mma_16816(dk[n + 1], da, qb + 2);
            }
        }
    }
    const st_fbuf dst = st_fbuf_at(f.dqkv, (int64_t)b * T * C3 + (int64_t)h * D);
    store_acc<ND>(dk, st_fbuf_at(dst, C), C3, ka, kb, T, t, f.scale, f.acc);
    store_acc<ND>(dv, st_fbuf_at(dst, 2 * C), C3, ka, kb, T, t, 1.0f, f.acc);
}

/* ---- launchers ----------------------------------------------------------- */
template <int D> static st_status forward_mma(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + 63) / 64), (unsigned)(f->B * f->nh));
    st_graph_span(g, "flash forward", false, 0);
    flash_fwd_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    st_graph_span(g, "flash forward", true, 0);
    return ST_OK;
}

template <int D> static st_status backward_mma(st_graph *g, const st_flash *f) {
    const dim3 grid((unsigned)((f->T + 63) / 64), (unsigned)(f->B * f->nh));
    st_graph_span(g, "flash D rowsums", false, 0);
    ST_TRY(st_cuda_flash_rowsums(g, f));
    st_graph_span(g, "flash D rowsums", true, 0);
    st_graph_span(g, "flash dQ", false, 0);
    flash_dq_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    st_graph_span(g, "flash dQ", true, 0);
    st_graph_span(g, "flash dK dV", false, 0);
    flash_dkv_mma<D><<<grid, 128, 0, st_cuda_stream(g)>>>(*f);
    ST_CUDA_LAUNCHED();
    st_graph_span(g, "flash dK dV", true, 0);
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
