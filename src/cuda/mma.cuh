/* One warp's tensor-core product through PTX `mma.sync.aligned.m16n8k16`
 * (bf16 operands, fp32 accumulators; sm_80 and later): D = A B + D with A
 * 16 x 16, B 16 x 8, D 16 x 8. Unlike wmma, whose fragments hide which
 * lane holds which element, PTX documents the layout (PTX ISA, "Matrix
 * Fragments for mma.m16n8k16 with floating point type"), so a kernel can
 * work on an accumulator's rows in registers (a softmax) and turn it into
 * the next product's A operand without a trip through shared memory.
 *
 * With g = lane / 4 and t = lane % 4, each lane holds:
 *   A, four 32-bit registers of two bf16 each (the lower-numbered column in
 *     the low half): a[0] row g, columns 2t and 2t+1; a[1] row g+8, the
 *     same columns; a[2] row g, columns 2t+8 and 2t+9; a[3] row g+8, those;
 *   B, two registers: b[0] rows (k) 2t and 2t+1 of column g; b[1] rows
 *     2t+8 and 2t+9 of column g;
 *   D, four floats: d[0], d[1] row g, columns 2t, 2t+1; d[2], d[3] row g+8,
 *     the same columns.
 * So an accumulator's two 8-column halves (d of columns n..n+7 and
 * n+8..n+15, rounded to bf16 and paired) are exactly the A registers of a
 * product over those 16 columns: a[0] = (d0, d1) of the first half, a[1] =
 * (d2, d3) of it, a[2], a[3] the same of the second.
 *
 * Operands come from shared memory through `ldmatrix` (st_ldsm_x4,
 * st_ldsm_x4_t): four 8 x 8 matrices of 16-bit elements a warp, lane L
 * naming row L % 8 of matrix L / 8 (16-byte aligned rows). Without .trans
 * lane (g, t) receives elements (g, 2t) and (g, 2t+1) of matrix j in r[j]:
 * an A operand's register, or a B operand's from [n][k] storage (B's
 * columns as rows). With .trans it receives (2t, g) and (2t+1, g): a B
 * operand's register from [k][n] storage, so no tile is ever transposed in
 * shared memory. One instruction fills the four registers that 32-bit
 * loads took four instructions for.
 *
 * Under the CPU emulator (tests/cudaemu) st_mma_16816 gathers each lane's
 * operands with warp shuffles from the lanes that hold them, by the layout
 * above, and sums the exact bf16 products in k order; the ldmatrix helpers
 * shuffle the row addresses and read the elements the layout names. On a
 * GPU st_cuda_mma_check (mma.cu) checks both readings against the
 * instructions. */
#ifndef ST_CUDA_MMA_CUH
#define ST_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "common.cuh" /* st_bf16x2, st_bf16x2_lo/hi: two bf16 in one register */
/* Two bf16 from memory (2 elements, 4-byte aligned) as one register. */
static __device__ __forceinline__ uint32_t st_ld_bf16x2(const __nv_bfloat16 *p) {
    return *(const uint32_t *)p;
}
/* Two separate bf16 as one register. */
static __device__ __forceinline__ uint32_t st_pair_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t) * (const uint16_t *)&lo | (uint32_t) * (const uint16_t *)&hi << 16;
}

/* ldmatrix .x4 (see above): `row` is this lane's row address, row L % 8 of
 * matrix L / 8. */
static __device__ __forceinline__ void st_ldsm_x4(uint32_t r[4], const void *row) {
#ifdef ST_CUDA_EMU
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 4; j++) {
        const char *p = __shfl_sync(0xffffffffu, (const char *)row, 8 * j + g);
        r[j] = *(const uint32_t *)(p + 4 * t);
    }
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/* ldmatrix .x4 .trans: r[j] holds elements (2t, g) and (2t+1, g) of matrix j. */
static __device__ __forceinline__ void st_ldsm_x4_t(uint32_t r[4], const void *row) {
#ifdef ST_CUDA_EMU
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 4; j++) {
        const uint16_t *p0 = __shfl_sync(0xffffffffu, (const uint16_t *)row, 8 * j + 2 * t);
        const uint16_t *p1 = __shfl_sync(0xffffffffu, (const uint16_t *)row, 8 * j + 2 * t + 1);
        r[j] = (uint32_t)p0[g] | (uint32_t)p1[g] << 16;
    }
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/* The layout's reference: each lane gathers its row of A (rows g, g+8) and
 * its columns of B (2t, 2t+1) pair by pair of k and adds the products. */
static __device__ __forceinline__ void st_mma_16816_ref(float d[4], const uint32_t a[4],
                                                        const uint32_t b[2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int kk = 0; kk < 8; kk++) { /* k = 2 kk, 2 kk + 1 */
        const int q = kk & 3;
        const uint32_t r0 = __shfl_sync(0xffffffffu, a[kk < 4 ? 0 : 2], g * 4 + q);
        const uint32_t r1 = __shfl_sync(0xffffffffu, a[kk < 4 ? 1 : 3], g * 4 + q);
        const uint32_t c0 = __shfl_sync(0xffffffffu, b[kk < 4 ? 0 : 1], 2 * t * 4 + q);
        const uint32_t c1 = __shfl_sync(0xffffffffu, b[kk < 4 ? 0 : 1], (2 * t + 1) * 4 + q);
        const float a0l = st_bf16x2_lo(r0), a0h = st_bf16x2_hi(r0), a1l = st_bf16x2_lo(r1),
                    a1h = st_bf16x2_hi(r1);
        const float b0l = st_bf16x2_lo(c0), b0h = st_bf16x2_hi(c0), b1l = st_bf16x2_lo(c1),
                    b1h = st_bf16x2_hi(c1);
        d[0] = d[0] + a0l * b0l + a0h * b0h;
        d[1] = d[1] + a0l * b1l + a0h * b1h;
        d[2] = d[2] + a1l * b0l + a1h * b0h;
        d[3] = d[3] + a1l * b1l + a1h * b1h;
    }
}

static __device__ __forceinline__ void st_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef ST_CUDA_EMU
    st_mma_16816_ref(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

#endif
