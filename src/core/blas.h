/* The one place that includes CBLAS (OpenBLAS, OpenMP flavour: see INFRA notes
 * on why the pthread flavour oversubscribes the cores when mixed with OpenMP). */
#ifndef ST_CORE_BLAS_H
#define ST_CORE_BLAS_H

#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* OpenBLAS chooses its kernels as it loads, by the CPU's family and model;
 * a CPU newer than the library (0.3.21, Debian 12's, knows no Emerald or
 * Granite Rapids Xeon) gets its most general ones (Prescott: SSE3), about 6
 * times slower than the CPU's own (on an Emerald Rapids, 2 threads: 35
 * GFLOP/s against 206 with Cooperlake's). st_blas_core_check, first thing in
 * main, before any thread: when OpenBLAS chose kernels below AVX2 on a CPU
 * with AVX2 and FMA or AVX-512, and OPENBLAS_CORETYPE is not set, it sets
 * that to the best the CPU runs (Cooperlake: AVX-512 with BF16; SkylakeX:
 * AVX-512; Haswell: AVX2) and executes the program again (argv, the same
 * process), where OpenBLAS loads with them; the processes it starts
 * (launch's ranks) inherit the choice. Returns when it did nothing (or
 * the exec failed: OpenBLAS's own choice then).
 * st_blas_core_note: what it did, for the run's header (NULL: nothing). */
void st_blas_core_check(char **argv);
const char *st_blas_core_note(char *buf, size_t n);

/* The engine's matrix products call st_sgemm, not cblas_sgemm: a row-major
 * C (M x N) = alpha op(A) op(B) + beta C computed in blocks of C's rows,
 * each block at most ST_GEMM_BLOCK_ELEMS elements of op(A) (but never fewer
 * than ST_GEMM_ROWS rows), the blocks of one product equal to within 16 rows.
 *
 * Why: OpenBLAS's threaded driver packs each thread's whole share of C's
 * rows, times one block of K (Q elements, 320 for sgemm on Zen, so up to
 * 1280 bytes a row), into that thread's 128 MiB buffer, and those pages stay
 * resident for the rest of the process. One product with 32768 rows (the
 * weight gradient of a 32768-token vocabulary) left 32 MiB behind on 2
 * threads, unseen by the memory model (test_hw_memory measured 11.5% more
 * than predicted); a GPT-2 head's, 62 MiB. In blocks of 1024 rows of K >= 256,
 * or 2^18 elements of op(A) at a smaller K, it is at most what a 1024^3
 * product touches (the CPU calibration's from 8 threads on; about 1.3 MiB),
 * a fixed cost of the process. The blocks split rows, never K: the same sums, though not
 * always the same last bits as one call (OpenBLAS threads a block by its own
 * size), and the same bits from run to run. Speed on this machine (2 threads, best of 5):
 * 32768x128x512 (A transposed) 47 ms blocked against 51 ms in one call,
 * 8192x768x768 71 against 73 ms, 50176x32x9 (a first convolution) 1.6 against
 * 1.6 ms; blocks of 1024 rows at K = 9 took 2.4 ms, hence the budget.
 *
 * On two threads, outside a parallel region, a product of two blocks or
 * more runs its blocks at once, each alone on one thread (an even number
 * of them, one more where it was odd), as st_sgemm_two runs two products:
 * OpenBLAS's split of each block between both threads costs more at these
 * sizes than it gains. The small gpt's forward products (2048 rows, K 256
 * or 1024; best of 15, Cooperlake kernels) 1.05-1.19x faster, 8192x768x768
 * 1.07x, 16384x2304x768 1.03x; a product of one block is left whole
 * (split in two, 256x1024x784 ran 0.95x). Each block's rows are the same
 * bits on whichever thread (OpenBLAS blocks K on one thread as one call
 * does), so a run's bits do not depend on which thread took which block;
 * they are a 1-thread run's where OpenBLAS blocks K differently on two. */
enum { ST_GEMM_ROWS = 1024, ST_GEMM_BLOCK_ELEMS = 1 << 18 };

/* Rows [m0, m0 + m) of a product (st_sgemm's block). */
static inline void st_sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m0, int m, int N, int K,
                                 float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                                 float *C, int ldc) {
    /* rows m0.. of op(A): rows of A, or columns of A transposed */
    const float *a = ta == CblasNoTrans ? A + (size_t)m0 * (size_t)lda : A + m0;
    cblas_sgemm(CblasRowMajor, ta, tb, m, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)m0 * (size_t)ldc,
                ldc);
}

static inline void st_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    /* (in 64 bits: M near INT_MAX would wrap M + most - 1) */
    int64_t most = K > 0 ? ST_GEMM_BLOCK_ELEMS / K : M;
    if (most < ST_GEMM_ROWS) most = ST_GEMM_ROWS;
    int64_t blocks = M > most ? ((int64_t)M + most - 1) / most : 1;
    const bool apart = blocks >= 2 && omp_get_max_threads() == 2 && !omp_in_parallel();
    if (apart && blocks % 2) blocks++;
    const int64_t rows = (((int64_t)M + blocks - 1) / blocks + 15) / 16 * 16;
    if (apart) {
#pragma omp parallel for num_threads(2) schedule(static, 1)
        for (int64_t m0 = 0; m0 < M; m0 += rows)
            st_sgemm_rows(ta, tb, m0, (int)(M - m0 < rows ? M - m0 : rows), N, K, alpha, A, lda, B, ldb, beta,
                          C, ldc);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += rows)
        st_sgemm_rows(ta, tb, m0, (int)(M - m0 < rows ? M - m0 : rows), N, K, alpha, A, lda, B, ldb, beta, C,
                      ldc);
}

/* One product's arguments, for st_sgemm_two. */
typedef struct st_gemm {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K;
    float alpha;
    const float *A;
    int lda;
    const float *B;
    int ldb;
    float beta;
    float *C;
    int ldc;
} st_gemm;

static inline st_gemm st_gemm_of(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                                 int ldc) {
    const st_gemm g = {ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
    return g;
}

static inline void st_sgemm_run(const st_gemm *g) {
    if (g)
        st_sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->C, g->ldc);
}

/* Two independent products (neither reads what the other writes), such
 * as a layer's weight and input gradients; either may be NULL (none). On
 * two threads each runs alone on one of them, at once (OpenBLAS runs a
 * call made inside a parallel region on its caller's thread): at the small
 * gpt's shapes (2048 rows, K 256 or 1024) 1.03-1.25x faster than the pair
 * one after the other on both threads, whose split of each product costs
 * more at these sizes than it gains. Otherwise one after the other, each
 * on every thread (OpenBLAS cannot give each of two concurrent calls half
 * of four threads). The same sums either way, and mostly the same bits
 * (the small gpt's and the default cnn's weights are bit for bit those of
 * the sequential calls): OpenBLAS splits C's rows and columns between
 * threads, but at some K it also blocks K differently on one thread than
 * on two (K = 784 in 128 of 1,344 shapes tried, none at 1024), and then
 * the last bits differ. A given configuration (train.threads included)
 * gives the same bits every run either way. */
static inline void st_sgemm_two(const st_gemm *a, const st_gemm *b) {
    if (a && b && omp_get_max_threads() == 2 && !omp_in_parallel()) {
#pragma omp parallel num_threads(2)
        {
            if (omp_get_num_threads() == 1) {
                st_sgemm_run(a);
                st_sgemm_run(b);
            } else {
                st_sgemm_run(omp_get_thread_num() == 0 ? a : b);
            }
        }
        return;
    }
    st_sgemm_run(a);
    st_sgemm_run(b);
}

#endif
