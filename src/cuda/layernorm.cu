/* CUDA twin of src/layers/layernorm.c: y = (x - mean) * rstd * weight + bias
 * over the last dim, biased variance, rstd = 1/sqrt(var + eps).
 *
 * Forward: one warp per row, two passes over the row (mean, then the
 * variance of x - mean, as the CPU), mean and rstd saved per row in the
 * node's saved state in the CPU's layout: mean (R), then rstd (R). Rows of
 * at most 1024 columns on 16-byte accesses (GPT-2's) are read once, into
 * the lanes' registers, and both passes and the output run from there;
 * other rows are read three times (mean, variance, output). Either way the
 * same sums in the same order.
 * Backward: one warp per row for dx = rstd (g - mean(g) - xhat mean(g xhat)),
 * g = dy * weight; dweight and dbias are deterministic column sums over the
 * rows (st_colsum's chunks, kernels.cuh). Rows of at most 1024 columns on
 * 16-byte accesses (GPT-2's) take one kernel for all three: a block per
 * chunk of rows, each warp holding its row's x and dy in registers (one
 * read of each), writing dx and adding the row into its lanes' dweight and
 * dbias sums; the block's warps then add theirs in warp order and write the
 * chunk's partial sums. Other rows take a dx kernel and a dweight/dbias
 * kernel, each reading x and dy. Sums run in a different order than the
 * CPU's loops: parity to fp32 rounding. Input, output and their gradients
 * in either storage (src/layers/half_io.h); weight and bias as the run's
 * compute copy holds them (16-bit in bf16/fp16); statistics fp32. */
#include <initializer_list>
#include <type_traits>

#include "kernels.cuh"

enum { LN_WARPS = 8 }; /* rows per block of forward and backward */

/* The kernels below move VW elements of a row per access (st_ldv): 8, with
 * 16-byte accesses, when every row array is 16-byte aligned and C a
 * multiple of 8 (GPT-2's layers), else 1. Weight and bias are read an
 * element at a time (a packed parameter arena aligns them to 4 bytes; they
 * stay in L1), or, where the kernel is told both are 16-byte aligned (`pv`:
 * every tensor of GPT-2's arena is), 8 at a time. */
template <int VW>
static __device__ __forceinline__ void ld_param(st_fbuf p, int64_t c, float *v, bool pv = false) {
    if (VW == 8 && pv) {
        st_ldv<VW>(p, c, v);
        return;
    }
#pragma unroll
    for (int k = 0; k < VW; k++)
        v[k] = st_ld(p, c + k);
}

template <int VW>
static __global__ void ln_forward_kernel(st_fbuf x, st_fbuf w, st_fbuf b, st_fbuf y, float *mean, float *rstd,
                                         int64_t R, int64_t C, float eps) {
    const int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= R) return; /* whole warps leave together: no block-wide sync below */
    const int64_t o = r * C;
    float xv[VW], s = 0.0f;
    for (int64_t c = lane * VW; c < C; c += 32 * VW) {
        st_ldv<VW>(x, o + c, xv);
#pragma unroll
        for (int k = 0; k < VW; k++)
            s += xv[k];
    }
    const float m = st_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int64_t c = lane * VW; c < C; c += 32 * VW) {
        st_ldv<VW>(x, o + c, xv);
#pragma unroll
        for (int k = 0; k < VW; k++)
            v += (xv[k] - m) * (xv[k] - m);
    }
    v = st_warp_sum(v) / (float)C;
    const float rs = 1.0f / sqrtf(v + eps);
    for (int64_t c = lane * VW; c < C; c += 32 * VW) {
        float wv[VW], bv[VW];
        st_ldv<VW>(x, o + c, xv);
        ld_param<VW>(w, c, wv);
        ld_param<VW>(b, c, bv);
#pragma unroll
        for (int k = 0; k < VW; k++)
            xv[k] = (xv[k] - m) * rs * wv[k] + bv[k];
        st_stv<VW>(y, o + c, xv);
    }
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* ln_forward_kernel<8> for rows of at most NC 256 columns: lane l holds
 * columns 8 (l + 32 j) .. + 7 of its row for j < NC, read once. */
template <int NC>
static __global__ void ln_forward_rows_kernel(st_fbuf x, st_fbuf w, st_fbuf b, st_fbuf y, float *mean,
                                              float *rstd, int64_t R, int64_t C, float eps, bool pv) {
    const int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= R) return; /* whole warps leave together */
    const int64_t o = r * C;
    float xv[NC][8], s = 0.0f;
#pragma unroll
    for (int j = 0; j < NC; j++) {
        const int64_t c = 8 * (lane + 32 * j);
        if (c >= C) continue;
        st_ldv<8>(x, o + c, xv[j]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            s += xv[j][k];
    }
    const float m = st_warp_sum(s) / (float)C;
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < NC; j++) {
        if (8 * (lane + 32 * j) >= C) continue;
#pragma unroll
        for (int k = 0; k < 8; k++)
            v += (xv[j][k] - m) * (xv[j][k] - m);
    }
    v = st_warp_sum(v) / (float)C;
    const float rs = 1.0f / sqrtf(v + eps);
#pragma unroll
    for (int j = 0; j < NC; j++) {
        const int64_t c = 8 * (lane + 32 * j);
        if (c >= C) continue;
        float wv[8], bv[8];
        ld_param<8>(w, c, wv, pv);
        ld_param<8>(b, c, bv, pv);
#pragma unroll
        for (int k = 0; k < 8; k++)
            xv[j][k] = (xv[j][k] - m) * rs * wv[k] + bv[k];
        st_stv<8>(y, o + c, xv[j]);
    }
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

template <int VW>
static __global__ void ln_backward_dx_kernel(st_fbuf x, st_fbuf w, st_fbuf dy, const float *mean,
                                             const float *rstd, st_fbuf dx, int64_t R, int64_t C, bool acc) {
    const int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= R) return;
    const int64_t o = r * C;
    const float m = mean[r], s = rstd[r];
    float gm = 0.0f, gxm = 0.0f, xv[VW], gv[VW], wv[VW];
    for (int64_t c = lane * VW; c < C; c += 32 * VW) {
        st_ldv<VW>(dy, o + c, gv);
        st_ldv<VW>(x, o + c, xv);
        ld_param<VW>(w, c, wv);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            const float gc = gv[k] * wv[k];
            gm += gc;
            gxm += gc * (xv[k] - m) * s;
        }
    }
    gm = st_warp_sum(gm) / (float)C;
    gxm = st_warp_sum(gxm) / (float)C;
    for (int64_t c = lane * VW; c < C; c += 32 * VW) {
        float d[VW], prev[VW];
        st_ldv<VW>(dy, o + c, gv);
        st_ldv<VW>(x, o + c, xv);
        ld_param<VW>(w, c, wv);
        if (acc) st_ldv<VW>(dx, o + c, prev);
#pragma unroll
        for (int k = 0; k < VW; k++) {
            d[k] = s * (gv[k] * wv[k] - gm - (xv[k] - m) * s * gxm);
            if (acc) d[k] += prev[k];
        }
        st_stv<VW>(dx, o + c, d);
    }
}

/* dweight and dbias together: block (32, LN_DW_TY) covers 32 VW columns of
 * one chunk of `per` rows; thread (x, y) sums rows y, y + TY, .. of its
 * columns (dy xhat and dy), then row y = 0 adds the TY sums in order and
 * writes the chunk's partial sums (part_w, part_b: chunks x C), or adds
 * straight into dw and db when there is one chunk. The same order as
 * kernels.cuh's st_colsum, one pass over x and dy instead of two. */
enum { LN_DW_TY = 8 };
template <int VW>
static __global__ void ln_dwdb_kernel(st_fbuf x, st_fbuf dy, const float *mean, const float *rstd, int64_t R,
                                      int64_t C, int64_t per, float *part_w, float *part_b, float *dw,
                                      float *db) {
    __shared__ float sw[LN_DW_TY][32 * VW + 1], sb[LN_DW_TY][32 * VW + 1];
    const int64_t c = ((int64_t)blockIdx.x * 32 + threadIdx.x) * VW;
    const int64_t r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < R ? r0 + per : R;
    float aw[VW] = {}, ab[VW] = {};
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += LN_DW_TY) {
            float xv[VW], gv[VW];
            st_ldv<VW>(x, r * C + c, xv);
            st_ldv<VW>(dy, r * C + c, gv);
            const float m = mean[r], s = rstd[r];
#pragma unroll
            for (int k = 0; k < VW; k++) {
                aw[k] += gv[k] * (xv[k] - m) * s;
                ab[k] += gv[k];
            }
        }
#pragma unroll
    for (int k = 0; k < VW; k++) {
        sw[threadIdx.y][threadIdx.x * VW + k] = aw[k];
        sb[threadIdx.y][threadIdx.x * VW + k] = ab[k];
    }
    __syncthreads();
    if (threadIdx.y != 0) return;
#pragma unroll
    for (int k = 0; k < VW; k++) {
        if (c + k >= C) break;
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < LN_DW_TY; y++) {
            tw += sw[y][threadIdx.x * VW + k];
            tb += sb[y][threadIdx.x * VW + k];
        }
        if (part_w) {
            part_w[(int64_t)blockIdx.y * C + c + k] = tw;
            part_b[(int64_t)blockIdx.y * C + c + k] = tb;
        } else {
            dw[c + k] += tw;
            db[c + k] += tb;
        }
    }
}

/* The whole backward for rows of at most NC 256 columns (VW 8): a block of
 * LN_FWARPS warps per chunk of `per` rows (ln_fused_rows), warp w taking
 * rows r0 + w, r0 + w + LN_FWARPS, ...; lane l holds columns 8 (l + 32 j)
 * .. + 7 of its row for j < NC. dx as ln_backward_dx_kernel, the gradient
 * it adds to (acc) read with x and dy: one trip to memory a row. Each
 * warp's dweight and dbias sums over its rows are kept in its own slice of
 * shared memory (LN_SLOT: lane-major, so that a warp's access is one
 * bank a lane), not in registers, so that 4 blocks fit an SM; then added
 * warp by warp (in order) and written to the chunk's partials (part_w,
 * part_b: chunks x C) or, with one chunk, added into dw and db. */
enum { LN_FWARPS = 4 };
/* Rows per chunk: 4 a warp (a chunk per block, enough blocks to fill the
 * GPU: 1024 for GPT-2's 16 x 1024 tokens), at most 4096 chunks. */
static int64_t ln_fused_rows(int64_t R) {
    int64_t per = 4 * LN_FWARPS;
    if ((R + per - 1) / per > 4096) per = (R + 4095) / 4096;
    return per;
}
static int64_t ln_fused_chunks(int64_t R) { return (R + ln_fused_rows(R) - 1) / ln_fused_rows(R); }
/* Where column 8 (lane + 32 j) + k of a warp's sums lies in its slice */
#define LN_SLOT(j, k, lane) ((((j)*8 + (k)) << 5) + (lane))

/* A warp's slices zeroed (each lane its own slots: no barrier) */
template <int NC> static __device__ __forceinline__ void ln_fused_zero(float *aw, float *ab, int lane) {
#pragma unroll
    for (int i = 0; i < NC * 8; i++)
        aw[(i << 5) + lane] = ab[(i << 5) + lane] = 0.0f;
}

/* The block's dweight and dbias sums, warp by warp in order, into the
 * chunk's partials or, with one chunk, added into dw and db. */
template <int NC>
static __device__ __forceinline__ void ln_fused_finish(const float (*sw)[NC * 256],
                                                       const float (*sb)[NC * 256], int64_t C, float *part_w,
                                                       float *part_b, float *dw, float *db) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const int i = LN_SLOT((int)(c >> 8), (int)(c & 7), (int)((c >> 3) & 31));
        float tw = sw[0][i], tb = sb[0][i];
#pragma unroll
        for (int wp = 1; wp < LN_FWARPS; wp++) {
            tw += sw[wp][i];
            tb += sb[wp][i];
        }
        if (part_w) {
            part_w[(int64_t)blockIdx.x * C + c] = tw;
            part_b[(int64_t)blockIdx.x * C + c] = tb;
        } else {
            dw[c] += tw;
            db[c] += tb;
        }
    }
}

template <int NC>
static __global__ void __launch_bounds__(32 * LN_FWARPS)
    ln_backward_fused_kernel(st_fbuf x, st_fbuf w, st_fbuf dy, const float *mean, const float *rstd,
                             st_fbuf dx, int64_t R, int64_t C, bool acc, int64_t per, float *part_w,
                             float *part_b, float *dw, float *db, bool pv) {
    __shared__ float sw[LN_FWARPS][NC * 256], sb[LN_FWARPS][NC * 256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r0 = (int64_t)blockIdx.x * per, r1 = r0 + per < R ? r0 + per : R;
    float *aw = sw[warp], *ab = sb[warp];
    ln_fused_zero<NC>(aw, ab, lane);
    for (int64_t r = r0 + warp; r < r1; r += LN_FWARPS) {
        const int64_t o = r * C;
        const float m = mean[r], s = rstd[r];
        float xv[NC][8], gv[NC][8], prev[NC][8]; /* x and dy, then xhat and dy weight */
        float gm = 0.0f, gxm = 0.0f;
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            st_ldv<8>(dy, o + c, gv[j]);
            st_ldv<8>(x, o + c, xv[j]);
            if (acc) st_ldv<8>(dx, o + c, prev[j]);
        }
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            float wv[8];
            ld_param<8>(w, c, wv, pv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float xh = (xv[j][k] - m) * s, gc = gv[j][k] * wv[k];
                gm += gc;
                gxm += gc * xh;
                aw[LN_SLOT(j, k, lane)] += gv[j][k] * xh;
                ab[LN_SLOT(j, k, lane)] += gv[j][k];
                xv[j][k] = xh;
                gv[j][k] = gc;
            }
        }
        gm = st_warp_sum(gm) / (float)C;
        gxm = st_warp_sum(gxm) / (float)C;
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            float d[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                d[k] = s * (gv[j][k] - gm - xv[j][k] * gxm);
                if (acc) d[k] += prev[j][k];
            }
            st_stv<8>(dx, o + c, d);
        }
    }
    ln_fused_finish<NC>(sw, sb, C, part_w, part_b, dw, db);
}

/* Element k of 8 16-bit values of precision P (one 16-byte load), as a
 * float, converted where it is used: st_unpack8's eight floats at once
 * spilled 376 bytes at 768 columns on sm_90 (ptxas), against 4 */
template <int P> static __device__ __forceinline__ float ln_elem16(const uint4 &u, int k) {
    const uint32_t v = k < 2 ? u.x : k < 4 ? u.y : k < 6 ? u.z : u.w;
    return k & 1 ? st_unpack16_hi<P>(v) : st_unpack16_lo<P>(v);
}

/* ln_backward_fused_kernel for rows whose x, dy and dx are all stored in the
 * 16-bit precision P (bf16 or fp16; GPT-2's in bf16): the row is kept in
 * registers as loaded, a uint4 (4 registers) per 8 columns where the float
 * kernel keeps 8 floats of x, of dy and of the gradient it adds to, and each
 * value is unpacked where it is used (twice: the sums, then dx). The same
 * operations on the same values in the same order: the same bits. About a
 * third of the float kernel's registers, so that 8 blocks (32 warps) fit an
 * SM where that one fits 4 (116 registers for 768 columns on sm_90): more
 * of the rows' loads in flight at once, and GPT-2's 1024 chunks in one wave
 * on 132 SMs. Rows of over 768 columns take 6 blocks (85 registers: 64
 * spilled 260 bytes, and 8 blocks' shared sums would not fit an SM). */
template <int NC> constexpr int ln_packed_blocks() { return NC <= 3 ? 8 : 6; }
template <int NC, int P>
static __global__ void __launch_bounds__(32 * LN_FWARPS, ln_packed_blocks<NC>())
    ln_backward_packed_kernel(const uint16_t *x, st_fbuf w, const uint16_t *dy, const float *mean,
                              const float *rstd, uint16_t *dx, int64_t R, int64_t C, bool acc, int64_t per,
                              float *part_w, float *part_b, float *dw, float *db, bool pv) {
    __shared__ float sw[LN_FWARPS][NC * 256], sb[LN_FWARPS][NC * 256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r0 = (int64_t)blockIdx.x * per, r1 = r0 + per < R ? r0 + per : R;
    float *aw = sw[warp], *ab = sb[warp];
    ln_fused_zero<NC>(aw, ab, lane);
    /* x, dy and the gradient added to, as stored; zero past the row (never
     * read: set once, here, so that the loads below can be branches: as
     * selects in each row they spilled 84 bytes at 768 columns on sm_90) */
    uint4 xu[NC] = {}, gu[NC] = {}, pu[NC] = {};
    for (int64_t r = r0 + warp; r < r1; r += LN_FWARPS) {
        const int64_t o = r * C;
        const float m = mean[r], s = rstd[r];
        float gm = 0.0f, gxm = 0.0f;
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            gu[j] = *(const uint4 *)(dy + o + c);
            xu[j] = *(const uint4 *)(x + o + c);
            if (acc) pu[j] = *(const uint4 *)(dx + o + c);
        }
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            float wv[8];
            ld_param<8>(w, c, wv, pv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float g = ln_elem16<P>(gu[j], k);
                const float xh = (ln_elem16<P>(xu[j], k) - m) * s, gc = g * wv[k];
                gm += gc;
                gxm += gc * xh;
                aw[LN_SLOT(j, k, lane)] += g * xh;
                ab[LN_SLOT(j, k, lane)] += g;
            }
        }
        gm = st_warp_sum(gm) / (float)C;
        gxm = st_warp_sum(gxm) / (float)C;
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int64_t c = 8 * (lane + 32 * j);
            if (c >= C) continue;
            float wv[8], d[8];
            ld_param<8>(w, c, wv, pv); /* (again: L1's) */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float xh = (ln_elem16<P>(xu[j], k) - m) * s, gc = ln_elem16<P>(gu[j], k) * wv[k];
                d[k] = s * (gc - gm - xh * gxm);
                if (acc) d[k] += ln_elem16<P>(pu[j], k);
            }
            *(uint4 *)(dx + o + c) = st_pack8<P>(d);
        }
    }
    ln_fused_finish<NC>(sw, sb, C, part_w, part_b, dw, db);
}
#undef LN_SLOT

static bool ln_vec8(std::initializer_list<st_fbuf> rows, int64_t C) {
    for (const st_fbuf &b : rows)
        if (!st_fbuf_aligned8(b, C)) return false;
    return true;
}

/* dw and db += the chunks' partial sums (the work scratch: chunks x C for
 * dw, then for db), when there are several (else the kernel added them). */
static st_status ln_finish(st_graph *g, int64_t chunks, int64_t C, float *dw, float *db) {
    if (chunks <= 1) return ST_OK;
    return st_colsum_finish(g, g->work, chunks, C, dw, db); /* (one launch for both) */
}

static st_status layernorm_forward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    float *mean = n->saved, *rstd = n->saved + R; /* (R), (R) */
    const st_fbuf x = st_data(n->in[0]), y = st_data(n->out);
    const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
    const st_fbuf w = st_data(n->params[0]), b = st_data(n->params[1]);
    const float eps = n->args.f[ST_LAYERNORM_F_EPS];
    const bool pv = ln_vec8({w, b}, C); /* (ld_param) */
    const auto rows = [&](auto nc) {
        ln_forward_rows_kernel<decltype(nc)::value>
            <<<blocks, 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(x, w, b, y, mean, rstd, R, C, eps, pv);
    };
    const bool v8 = ln_vec8({x, y}, C);
    if (v8 && C <= 4 * 256)
        st_pick_at_least((C + 255) / 256, rows, std::integer_sequence<int, 1, 2, 3, 4>());
    else if (v8)
        ln_forward_kernel<8>
            <<<blocks, 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(x, w, b, y, mean, rstd, R, C, eps);
    else
        ln_forward_kernel<1>
            <<<blocks, 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(x, w, b, y, mean, rstd, R, C, eps);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status layernorm_backward(st_node *n, st_graph *g) {
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    const st_fbuf x = st_data(n->in[0]), dy = st_grad(n->out); /* (R, C) */
    const float *mean = n->saved, *rstd = n->saved + R;
    const st_fbuf dx = n->in[0]->grad ? st_grad(n->in[0]) : st_fbuf{NULL, ST_PREC_FP32};
    const bool v8 = ln_vec8({x, dy, dx}, C);
    float *dw = n->params[0]->grad, *db = n->params[1]->grad; /* (C), (C) */
    if (dx.p && dw && db && v8 && C <= 4 * 256) {             /* one kernel (ln_backward_fused_kernel) */
        st_graph_span(g, "layernorm backward", false, 0);
        const int64_t per = ln_fused_rows(R), chunks = ln_fused_chunks(R);
        float *pw = chunks > 1 ? g->work : NULL, *pb = chunks > 1 ? g->work + chunks * C : NULL;
        const st_fbuf w = st_data(n->params[0]);
        const bool pv = ln_vec8({w}, C);
        /* x, dy and dx in one 16-bit precision, when the graph asks for it
         * (ST_KV_LAYERNORM_PACKED): ln_backward_packed_kernel */
        const st_precision p16 = x.t != ST_PREC_FP32 && dy.t == x.t && dx.t == x.t ? x.t : ST_PREC_FP32;
        const auto launch = [&](auto nc) {
            const dim3 grid((unsigned)chunks), block(32 * LN_FWARPS);
            const cudaStream_t st = st_cuda_stream(g);
            const bool acc = n->in_acc[0];
            const auto u16 = [](st_fbuf b) { return (uint16_t *)b.p; };
            const bool packed = g->kernel_variants & ST_KV_LAYERNORM_PACKED;
            if (packed && p16 == ST_PREC_BF16)
                ln_backward_packed_kernel<decltype(nc)::value, ST_PREC_BF16><<<grid, block, 0, st>>>(
                    u16(x), w, u16(dy), mean, rstd, u16(dx), R, C, acc, per, pw, pb, dw, db, pv);
            else if (packed && p16 == ST_PREC_FP16)
                ln_backward_packed_kernel<decltype(nc)::value, ST_PREC_FP16><<<grid, block, 0, st>>>(
                    u16(x), w, u16(dy), mean, rstd, u16(dx), R, C, acc, per, pw, pb, dw, db, pv);
            else
                ln_backward_fused_kernel<decltype(nc)::value>
                    <<<grid, block, 0, st>>>(x, w, dy, mean, rstd, dx, R, C, acc, per, pw, pb, dw, db, pv);
        };
        st_pick_at_least((C + 255) / 256, launch, std::integer_sequence<int, 1, 2, 3, 4>());
        ST_CUDA_LAUNCHED();
        ST_TRY(ln_finish(g, chunks, C, dw, db));
        st_graph_span(g, "layernorm backward", true, 0);
        return ST_OK;
    }
    if (dx.p) {
        st_graph_span(g, "layernorm dx", false, 0);
        const unsigned blocks = (unsigned)((R + LN_WARPS - 1) / LN_WARPS);
        if (v8)
            ln_backward_dx_kernel<8><<<blocks, 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(
                x, st_data(n->params[0]), dy, mean, rstd, dx, R, C, n->in_acc[0]);
        else
            ln_backward_dx_kernel<1><<<blocks, 32 * LN_WARPS, 0, st_cuda_stream(g)>>>(
                x, st_data(n->params[0]), dy, mean, rstd, dx, R, C, n->in_acc[0]);
        ST_CUDA_LAUNCHED();
        st_graph_span(g, "layernorm dx", true, 0);
    }
    if (dw && db) {
        st_graph_span(g, "layernorm dw db", false, 0);
        const int64_t per = st_colsum_rows_per_chunk(R), chunks = st_colsum_chunks(R);
        float *pw = chunks > 1 ? g->work : NULL, *pb = chunks > 1 ? g->work + chunks * C : NULL;
        const dim3 block(32, LN_DW_TY);
        if (v8)
            ln_dwdb_kernel<8>
                <<<dim3((unsigned)((C + 255) / 256), (unsigned)chunks), block, 0, st_cuda_stream(g)>>>(
                    x, dy, mean, rstd, R, C, per, pw, pb, dw, db);
        else
            ln_dwdb_kernel<1>
                <<<dim3((unsigned)((C + 31) / 32), (unsigned)chunks), block, 0, st_cuda_stream(g)>>>(
                    x, dy, mean, rstd, R, C, per, pw, pb, dw, db);
        ST_CUDA_LAUNCHED();
        ST_TRY(ln_finish(g, chunks, C, dw, db));
        st_graph_span(g, "layernorm dw db", true, 0);
    }
    return ST_OK;
}

static st_status layernorm_prepare(st_node *n, st_graph *g) {
    /* dw's and db's partial sums: the fused kernel's chunks or st_colsum's */
    const int64_t R = n->args.i[ST_LAYERNORM_ROWS], C = n->args.i[ST_LAYERNORM_C];
    const int64_t fused = C <= 4 * 256 && ln_fused_chunks(R) > 1 ? ln_fused_chunks(R) * C : 0;
    st_need_work(n, 2 * (fused > st_colsum_work(R, C) ? fused : st_colsum_work(R, C)));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_layernorm_ops = {
    "layernorm", layernorm_forward, layernorm_backward, layernorm_prepare, false, true, false, true, 0};
