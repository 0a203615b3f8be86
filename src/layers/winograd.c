/* Winograd F(2x2, 3x3) for conv2d's 3x3, stride-1, padding-1 convolutions
 * (NHWC), forward and both gradients.
 *
 * Each 2x2 block of outputs is computed from the 4x4 block of inputs around
 * it as Y = A^T [ sum_ci (G g G^T) . (B^T d B) ] A: the 3x3x(Cin x Cout)
 * products of a direct convolution become 16 matrix products of
 * (tiles x Cin) by (Cin x Cout), one per point xi of the 4x4 transform
 * domain: 2.25x fewer multiply-adds than im2col's sgemm, which already runs
 * at OpenBLAS's ceiling. Backward is the transpose of each stage:
 *   dM = A dY A^T            (output-gradient transform)
 *   dU[xi] = V[xi]^T dM[xi]  (weight gradient, summed over tiles)
 *   dV[xi] = dM[xi] U[xi]^T  (input gradient in the transform domain)
 *   dx += B dV B^T           (scattered back over the overlapping 4x4 windows)
 *   dw += G^T dU G
 * Buffers are transform-point-major: V (16, tiles, Cin), M (16, tiles, Cout),
 * U (16, Cin, Cout), so each product is one plain sgemm.
 *
 * Work goes in chunks of whole images (about 1 MiB of V and M, see CHUNK),
 * one chunk per thread at a time with single-threaded sgemms, as conv2d.c's
 * im2col path does; backward recomputes V instead of keeping it. Results are
 * the same bits for any thread count: each image is transformed by one
 * thread in a fixed order, and the weight gradient is summed in a fixed
 * number of groups of chunks, added in group order.
 *
 * F(2x2, 3x3) only: its transforms hold 0, +-1 and 1/2, so rounding stays
 * within a few ulps of im2col's (larger tiles amplify it). */
#include <omp.h>
#include <string.h>

#include "core/blas.h"
#include "model/graph.h" /* st_align_floats */
#include "winograd.h"

/* floats of V and M per chunk (whole images, at least one) */
#define CHUNK ((int64_t)1 << 18)
enum { MIN_GROUPS = 8, NXI = 16 };

typedef struct wgeom {
    int64_t B, H, W, Cin, Cout, maxc;
    int64_t tw, tpi; /* tiles per row, per image */
    int64_t nb, nchunks, groups;
    int nt;                                                  /* threads the workspace was sized for */
    int64_t off_u, off_du, off_zero, off_thr, per_thr, work; /* floats */
} wgeom;

static wgeom make_geom(const int64_t d[5], int nt) {
    wgeom g = {.B = d[0], .H = d[1], .W = d[2], .Cin = d[3], .Cout = d[4], .nt = nt};
    g.maxc = g.Cin > g.Cout ? g.Cin : g.Cout;
    g.tw = (g.W + 1) / 2;
    g.tpi = (g.H + 1) / 2 * g.tw;
    const int64_t per_image = NXI * g.tpi * (g.Cin + g.Cout);
    g.nb = CHUNK / per_image;
    if (g.nb < 1) g.nb = 1;
    if (g.nb > g.B) g.nb = g.B;
    g.nchunks = (g.B + g.nb - 1) / g.nb;
    g.groups = nt > MIN_GROUPS ? nt : MIN_GROUPS;
    if (g.groups > g.nchunks) g.groups = g.nchunks;
    const int64_t T = g.nb * g.tpi, u = st_align_floats(NXI * g.Cin * g.Cout);
    g.off_u = 0;
    g.off_du = u;
    g.off_zero = g.off_du + g.groups * u;
    g.off_thr = g.off_zero + st_align_floats(g.maxc);
    g.per_thr =
        st_align_floats(NXI * T * g.Cin) + st_align_floats(NXI * T * g.Cout) + st_align_floats(g.maxc);
    g.work = g.off_thr + nt * g.per_thr;
    return g;
}

bool st_wino_applies(int64_t k, int64_t stride, int64_t pad, int64_t Cin, int64_t Cout) {
    /* a few input channels (the first layer's 1 or 3) leave too little
     * product to pay for the transforms */
    return k == 3 && stride == 1 && pad == 1 && Cin >= 8 && Cout >= 8;
}

int64_t st_wino_work(const int64_t dims[5], int nt) { return make_geom(dims, nt).work; }

/* U (16, Cin, Cout) = G g G^T for every (ci, co), g = w[co][ci] (3x3) */
static void weight_transform(const wgeom *g, const float *w, float *U) {
    const int64_t Cin = g->Cin, Cout = g->Cout, xs = Cin * Cout;
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < Cout; co++)
        for (int64_t ci = 0; ci < Cin; ci++) {
            const float *k = w + (co * Cin + ci) * 9;
            float h[4][3], u[16];
            for (int j = 0; j < 3; j++) { /* G g: rows */
                h[0][j] = k[j];
                h[1][j] = 0.5f * (k[j] + k[3 + j] + k[6 + j]);
                h[2][j] = 0.5f * (k[j] - k[3 + j] + k[6 + j]);
                h[3][j] = k[6 + j];
            }
            for (int i = 0; i < 4; i++) { /* (G g) G^T: columns */
                u[i * 4 + 0] = h[i][0];
                u[i * 4 + 1] = 0.5f * (h[i][0] + h[i][1] + h[i][2]);
                u[i * 4 + 2] = 0.5f * (h[i][0] - h[i][1] + h[i][2]);
                u[i * 4 + 3] = h[i][2];
            }
            for (int xi = 0; xi < NXI; xi++)
                U[xi * xs + ci * Cout + co] = u[xi];
        }
}

/* dw (Cout, Cin, 3, 3) += G^T dU G */
static void weight_grad_transform(const wgeom *g, const float *dU, float *dw) {
    const int64_t Cin = g->Cin, Cout = g->Cout, xs = Cin * Cout;
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < Cout; co++)
        for (int64_t ci = 0; ci < Cin; ci++) {
            float u[16], h[3][4];
            for (int xi = 0; xi < NXI; xi++)
                u[xi] = dU[xi * xs + ci * Cout + co];
            for (int j = 0; j < 4; j++) { /* G^T dU: rows */
                h[0][j] = u[j] + 0.5f * (u[4 + j] + u[8 + j]);
                h[1][j] = 0.5f * (u[4 + j] - u[8 + j]);
                h[2][j] = 0.5f * (u[4 + j] + u[8 + j]) + u[12 + j];
            }
            float *k = dw + (co * Cin + ci) * 9;
            for (int i = 0; i < 3; i++) { /* (G^T dU) G: columns */
                k[i * 3 + 0] += h[i][0] + 0.5f * (h[i][1] + h[i][2]);
                k[i * 3 + 1] += 0.5f * (h[i][1] - h[i][2]);
                k[i * 3 + 2] += 0.5f * (h[i][1] + h[i][2]) + h[i][3];
            }
        }
}

/* The 16 pixels of tile t's 4x4 window (rows 2ty-1.., columns 2tx-1..) of
 * images b0.., each a pointer to its C channels, or `outside` where the
 * window hangs over the padding. */
static void window(const wgeom *g, const float *img, int64_t C, int64_t b0, int64_t t, int64_t side,
                   int64_t org, const float *outside, const float **p) {
    const int64_t b = b0 + t / g->tpi, r = t % g->tpi, ty = r / g->tw, tx = r % g->tw;
    for (int64_t i = 0; i < side; i++)
        for (int64_t j = 0; j < side; j++) {
            const int64_t ih = 2 * ty + org + i, iw = 2 * tx + org + j;
            p[i * side + j] = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W
                                  ? img + ((b * g->H + ih) * g->W + iw) * C
                                  : outside;
        }
}

/* V (16, Tn, Cin) = B^T d B for the Tn tiles of images b0.. */
static void input_transform(const wgeom *g, const float *x, int64_t b0, int64_t Tn, float *V,
                            const float *zero) {
    const int64_t C = g->Cin, xs = Tn * C;
    for (int64_t t = 0; t < Tn; t++) {
        const float *p[16];
        window(g, x, C, b0, t, 4, -1, zero, p);
        float *v = V + t * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            float r[4][4];
            for (int j = 0; j < 4; j++) { /* B^T d: rows */
                r[0][j] = p[j][c] - p[8 + j][c];
                r[1][j] = p[4 + j][c] + p[8 + j][c];
                r[2][j] = p[8 + j][c] - p[4 + j][c];
                r[3][j] = p[4 + j][c] - p[12 + j][c];
            }
            for (int i = 0; i < 4; i++) { /* (B^T d) B: columns */
                v[(i * 4 + 0) * xs + c] = r[i][0] - r[i][2];
                v[(i * 4 + 1) * xs + c] = r[i][1] + r[i][2];
                v[(i * 4 + 2) * xs + c] = r[i][2] - r[i][1];
                v[(i * 4 + 3) * xs + c] = r[i][1] - r[i][3];
            }
        }
    }
}

/* y's 2x2 blocks of images b0.. = A^T M A (+ bias) */
static void output_transform(const wgeom *g, const float *M, int64_t b0, int64_t Tn, const float *bias,
                             const float *zero, float *y, float *trash) {
    const int64_t C = g->Cout, xs = Tn * C;
    for (int64_t t = 0; t < Tn; t++) {
        float *q[4];
        window(g, y, C, b0, t, 2, 0, trash, (const float **)q);
        const float *m = M + t * C, *bb = bias ? bias : zero;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            float s[2][4];
            for (int j = 0; j < 4; j++) { /* A^T M: rows */
                s[0][j] = m[j * xs + c] + m[(4 + j) * xs + c] + m[(8 + j) * xs + c];
                s[1][j] = m[(4 + j) * xs + c] - m[(8 + j) * xs + c] - m[(12 + j) * xs + c];
            }
            for (int i = 0; i < 2; i++) { /* (A^T M) A: columns */
                q[i * 2 + 0][c] = s[i][0] + s[i][1] + s[i][2] + bb[c];
                q[i * 2 + 1][c] = s[i][1] - s[i][2] - s[i][3] + bb[c];
            }
        }
    }
}

/* dM (16, Tn, Cout) = A dY A^T for the 2x2 output-gradient blocks */
static void grad_output_transform(const wgeom *g, const float *dy, int64_t b0, int64_t Tn, float *dM,
                                  const float *zero) {
    const int64_t C = g->Cout, xs = Tn * C;
    for (int64_t t = 0; t < Tn; t++) {
        const float *p[4];
        window(g, dy, C, b0, t, 2, 0, zero, p);
        float *m = dM + t * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            float r[4][2];
            for (int j = 0; j < 2; j++) { /* A dY: rows */
                r[0][j] = p[j][c];
                r[1][j] = p[j][c] + p[2 + j][c];
                r[2][j] = p[j][c] - p[2 + j][c];
                r[3][j] = -p[2 + j][c];
            }
            for (int i = 0; i < 4; i++) { /* (A dY) A^T: columns */
                m[(i * 4 + 0) * xs + c] = r[i][0];
                m[(i * 4 + 1) * xs + c] = r[i][0] + r[i][1];
                m[(i * 4 + 2) * xs + c] = r[i][0] - r[i][1];
                m[(i * 4 + 3) * xs + c] = -r[i][1];
            }
        }
    }
}

/* dx's 4x4 windows of images b0.. += B dV B^T, tile after tile (the
 * windows overlap, so the order is fixed: one thread per image) */
static void grad_input_scatter(const wgeom *g, const float *dV, int64_t b0, int64_t Tn, float *dx,
                               float *trash) {
    const int64_t C = g->Cin, xs = Tn * C;
    for (int64_t t = 0; t < Tn; t++) {
        float *q[16];
        window(g, dx, C, b0, t, 4, -1, trash, (const float **)q);
        const float *v = dV + t * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            float r[4][4];
            for (int j = 0; j < 4; j++) { /* B dV: rows */
                r[0][j] = v[j * xs + c];
                r[1][j] = v[(4 + j) * xs + c] - v[(8 + j) * xs + c] + v[(12 + j) * xs + c];
                r[2][j] = v[(4 + j) * xs + c] + v[(8 + j) * xs + c] - v[j * xs + c];
                r[3][j] = -v[(12 + j) * xs + c];
            }
            for (int i = 0; i < 4; i++) { /* (B dV) B^T: columns */
                q[i * 4 + 0][c] += r[i][0];
                q[i * 4 + 1][c] += r[i][1] - r[i][2] + r[i][3];
                q[i * 4 + 2][c] += r[i][1] + r[i][2] - r[i][0];
                q[i * 4 + 3][c] -= r[i][3];
            }
        }
    }
}

static int run_threads(const wgeom *g) {
    const int nt = omp_get_max_threads();
    return nt < g->nt ? nt : g->nt;
}

void st_wino_forward(const int64_t dims[5], int nt_built, const float *x, const float *w, const float *bias,
                     float *y, float *work) {
    const wgeom g = make_geom(dims, nt_built);
    float *U = work + g.off_u, *zero = work + g.off_zero;
    memset(zero, 0, (size_t)g.maxc * sizeof(float));
    weight_transform(&g, w, U);
    const int64_t Cin = g.Cin, Cout = g.Cout;
#pragma omp parallel num_threads(run_threads(&g))
    {
        float *V = work + g.off_thr + omp_get_thread_num() * g.per_thr; /* (16, T, Cin) */
        float *M = V + st_align_floats(NXI * g.nb * g.tpi * Cin);       /* (16, T, Cout) */
        float *trash = M + st_align_floats(NXI * g.nb * g.tpi * Cout);
#pragma omp for schedule(static)
        for (int64_t ch = 0; ch < g.nchunks; ch++) {
            const int64_t b0 = ch * g.nb, Tn = (g.B - b0 < g.nb ? g.B - b0 : g.nb) * g.tpi;
            input_transform(&g, x, b0, Tn, V, zero);
            for (int xi = 0; xi < NXI; xi++)
                st_sgemm(CblasNoTrans, CblasNoTrans, (int)Tn, (int)Cout, (int)Cin, 1.0f, V + xi * Tn * Cin,
                         (int)Cin, U + xi * Cin * Cout, (int)Cout, 0.0f, M + xi * Tn * Cout, (int)Cout);
            output_transform(&g, M, b0, Tn, bias, zero, y, trash);
        }
    }
}

void st_wino_backward(const int64_t dims[5], int nt_built, const float *x, const float *dy, const float *w,
                      float *dw, float *dx, bool acc, float *work) {
    const wgeom g = make_geom(dims, nt_built);
    float *U = work + g.off_u, *dU = work + g.off_du, *zero = work + g.off_zero;
    const int64_t Cin = g.Cin, Cout = g.Cout, us = st_align_floats(NXI * Cin * Cout);
    memset(zero, 0, (size_t)g.maxc * sizeof(float));
    if (dx) weight_transform(&g, w, U);
#pragma omp parallel num_threads(run_threads(&g))
    {
        float *V = work + g.off_thr + omp_get_thread_num() * g.per_thr;
        float *M = V + st_align_floats(NXI * g.nb * g.tpi * Cin);
        float *trash = M + st_align_floats(NXI * g.nb * g.tpi * Cout);
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < g.groups; gi++) {
            const int64_t ch0 = gi * g.nchunks / g.groups, ch1 = (gi + 1) * g.nchunks / g.groups;
            for (int64_t ch = ch0; ch < ch1; ch++) {
                const int64_t b0 = ch * g.nb, n = g.B - b0 < g.nb ? g.B - b0 : g.nb, Tn = n * g.tpi;
                grad_output_transform(&g, dy, b0, Tn, M, zero);
                if (dw) {
                    input_transform(&g, x, b0, Tn, V, zero);
                    for (int xi = 0; xi < NXI; xi++)
                        st_sgemm(CblasTrans, CblasNoTrans, (int)Cin, (int)Cout, (int)Tn, 1.0f,
                                 V + xi * Tn * Cin, (int)Cin, M + xi * Tn * Cout, (int)Cout,
                                 ch > ch0 ? 1.0f : 0.0f, dU + gi * us + xi * Cin * Cout, (int)Cout);
                }
                if (dx) {
                    for (int xi = 0; xi < NXI; xi++) /* dV overwrites V */
                        st_sgemm(CblasNoTrans, CblasTrans, (int)Tn, (int)Cin, (int)Cout, 1.0f,
                                 M + xi * Tn * Cout, (int)Cout, U + xi * Cin * Cout, (int)Cout, 0.0f,
                                 V + xi * Tn * Cin, (int)Cin);
                    float *dxc = dx + b0 * g.H * g.W * Cin;
                    if (!acc) memset(dxc, 0, (size_t)(n * g.H * g.W * Cin) * sizeof(float));
                    grad_input_scatter(&g, V, b0, Tn, dx, trash);
                }
            }
        }
    }
    if (!dw) return;
    /* the groups' partials, added in group order into the first */
    const int64_t total = NXI * Cin * Cout;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; i++) {
        float s = dU[i];
        for (int64_t gi = 1; gi < g.groups; gi++)
            s += dU[gi * us + i];
        dU[i] = s;
    }
    weight_grad_transform(&g, dU, dw);
}
