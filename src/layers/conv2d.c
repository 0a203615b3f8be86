/* 2-D convolution on NHWC images by im2col and sgemm.
 *
 * The weight keeps PyTorch's (Cout, Cin, kH, kW) layout for checkpoints, but
 * the im2col matrix orders its columns (kh, kw, cin): with NHWC input a whole
 * kernel row (kw, cin) is then one contiguous run of k*Cin floats, so im2col
 * is a memcpy per kernel row and col2im adds contiguous runs of Cin. The
 * weight is permuted to (Cout, kh, kw, cin) in the workspace on every call
 * (Cout*Cin*k*k floats, negligible next to the im2col matrix).
 *
 * The im2col matrix is built a chunk of whole images at a time (about 1 MiB),
 * each chunk followed by its sgemms while it is still in cache: one
 * whole-batch im2col (115 MB for the Fashion-MNIST CNN's second layer) makes
 * every sgemm stream it from memory, and measured slower here. Threads take
 * whole chunks (see below), so the workspace holds one chunk per thread plus
 * the weight-gradient partials. Nothing survives in it from forward to
 * backward, so backward recomputes the im2col: one cheap pass instead of
 * keeping B*Ho*Wo*Cin*k*k floats per layer alive. A 1x1 convolution with
 * stride 1 and no padding uses x itself as the im2col matrix, in one sgemm.
 *
 * 3x3 kernels with stride 1 and padding 1 (and enough channels) take the
 * Winograd F(2x2, 3x3) path of winograd.c instead: 2.25x fewer multiply-adds.
 *
 * Not here: groups, dilation, asymmetric kernels, strides or padding. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core/blas.h"
#include "layers.h"
#include "winograd.h"

/* Row blocks of the bias-gradient reduction: fixed, so the sum is the same
 * bits whatever the thread count. */
enum { NBLK = 64 };

/* Target size of one im2col chunk in floats (1 MiB; whole images, at least
 * one): it stays in L2 between im2col and sgemm. */
#define CHUNK_FLOATS ((int64_t)1 << 18)

/* Weight-gradient groups: chunks are split into this many contiguous groups
 * (or the build-time thread count, when larger), each summed into its own
 * partial, and the partials are added in group order: the same bits for any
 * thread count up to it. */
enum { MIN_GROUPS = 8 };

typedef struct conv_geom {
    int64_t B, H, W, Cin, Ho, Wo, Cout, k, stride, pad;
    int64_t K;       /* Cin*k*k: im2col columns */
    int64_t M;       /* B*Ho*Wo: im2col rows */
    int64_t nb;      /* images per im2col chunk */
    int64_t nchunks; /* ceil(B / nb) */
    int64_t groups;  /* weight-gradient partials */
    int64_t chunk;   /* floats of one im2col chunk, aligned */
    int nt;          /* threads the workspace was sized for */
    /* workspace offsets (floats) */
    int64_t off_wp, off_dwt, off_part, off_col, work;
} conv_geom;

static conv_geom geom(const st_tensor *x, const st_tensor *y, int64_t k, int64_t stride, int64_t pad,
                      bool direct, int nt) {
    conv_geom c = {.B = x->shape[0],
                   .H = x->shape[1],
                   .W = x->shape[2],
                   .Cin = x->shape[3],
                   .Ho = y->shape[1],
                   .Wo = y->shape[2],
                   .Cout = y->shape[3],
                   .k = k,
                   .stride = stride,
                   .pad = pad,
                   .nt = nt};
    c.K = c.Cin * k * k;
    c.M = c.B * c.Ho * c.Wo;
    const int64_t per_image = c.Ho * c.Wo * c.K;
    c.nb = CHUNK_FLOATS / per_image;
    if (c.nb < 1) c.nb = 1;
    if (c.nb > c.B) c.nb = c.B;
    c.nchunks = (c.B + c.nb - 1) / c.nb;
    c.groups = nt > MIN_GROUPS ? nt : MIN_GROUPS;
    if (direct || c.groups > c.nchunks) c.groups = direct ? 1 : c.nchunks;
    c.chunk = st_align_floats(c.nb * per_image);
    c.off_wp = 0;
    c.off_dwt = c.off_wp + st_align_floats(c.Cout * c.K);
    c.off_part = c.off_dwt + c.groups * st_align_floats(c.Cout * c.K);
    c.off_col = c.off_part + st_align_floats(NBLK * c.Cout);
    c.work = c.off_col + (direct ? 0 : nt * c.chunk);
    return c;
}

static conv_geom node_geom(const st_node *n) {
    return geom(n->in[0], n->out, n->args.i[ST_CONV_K], n->args.i[ST_CONV_STRIDE], n->args.i[ST_CONV_PAD],
                n->args.i[ST_CONV_DIRECT], (int)n->args.i[ST_CONV_NT]);
}

/* Threads to use now: at most what the workspace was sized for. */
static int run_threads(const conv_geom *c) {
    const int nt = omp_get_max_threads();
    return nt < c->nt ? nt : c->nt;
}

/* wp (Cout, kh, kw, cin) <- w (Cout, cin, kh, kw) */
static void permute_weight(const conv_geom *c, const float *w, float *wp) {
    const int64_t kk = c->k * c->k;
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < c->Cout; co++)
        for (int64_t ci = 0; ci < c->Cin; ci++)
            for (int64_t t = 0; t < kk; t++)
                wp[co * c->K + t * c->Cin + ci] = w[(co * c->Cin + ci) * kk + t];
}

/* dw (Cout, cin, kh, kw) += the sum, in group order, of the partials
 * dwt[g] (kh, kw, cin, Cout), each g at a stride of st_align_floats(K*Cout). */
static void add_unpermuted(const conv_geom *c, const float *dwt, int64_t groups, float *dw) {
    const int64_t kk = c->k * c->k, stride = st_align_floats(c->Cout * c->K);
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < c->Cout; co++)
        for (int64_t ci = 0; ci < c->Cin; ci++)
            for (int64_t t = 0; t < kk; t++) {
                const float *src = dwt + (t * c->Cin + ci) * c->Cout + co;
                float sum = src[0];
                for (int64_t gi = 1; gi < groups; gi++)
                    sum += src[gi * stride];
                dw[(co * c->Cin + ci) * kk + t] += sum;
            }
}

/* col (nb*Ho*Wo, K) for images b0..b0+nb, columns (kh, kw, cin); zeros where
 * the window hangs over the padding. Threaded over rows when par. */
static void im2col(const conv_geom *c, const float *x, int64_t b0, int64_t nb, float *col, bool par) {
    const int64_t Cin = c->Cin, k = c->k, K = c->K;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < nb * c->Ho; r++) {
        const int64_t b = b0 + r / c->Ho, oh = r % c->Ho;
        for (int64_t ow = 0; ow < c->Wo; ow++) {
            float *dst = col + (r * c->Wo + ow) * K;
            const int64_t iw0 = ow * c->stride - c->pad;
            /* the kernel columns that fall inside the image */
            const int64_t kw_lo = iw0 < 0 ? -iw0 : 0;
            const int64_t kw_hi = iw0 + k > c->W ? c->W - iw0 : k;
            for (int64_t kh = 0; kh < k; kh++, dst += k * Cin) {
                const int64_t ih = oh * c->stride - c->pad + kh;
                if (ih < 0 || ih >= c->H || kw_hi <= kw_lo) {
                    memset(dst, 0, (size_t)(k * Cin) * sizeof(float));
                    continue;
                }
                if (kw_lo > 0) memset(dst, 0, (size_t)(kw_lo * Cin) * sizeof(float));
                memcpy(dst + kw_lo * Cin, x + ((b * c->H + ih) * c->W + iw0 + kw_lo) * Cin,
                       (size_t)((kw_hi - kw_lo) * Cin) * sizeof(float));
                if (kw_hi < k) memset(dst + kw_hi * Cin, 0, (size_t)((k - kw_hi) * Cin) * sizeof(float));
            }
        }
    }
}

/* dx (nb, H, W, Cin) = (or +=) the sum of every im2col entry that copied it.
 * A gather over input rows, so threads never share an output element: for
 * each kernel tap (kh, kw) that reaches input row ih, the taps of one output
 * row land on input columns iw = ow*stride - pad + kw, a run found without
 * per-pixel division. Threaded over rows when par. */
static void col2im(const conv_geom *c, const float *dcol, int64_t nb, float *dx, bool acc, bool par) {
    const int64_t Cin = c->Cin, k = c->k, K = c->K, s = c->stride, pad = c->pad;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < nb * c->H; r++) {
        const int64_t b = r / c->H, ih = r % c->H;
        float *drow = dx + r * c->W * Cin; /* (W, Cin) */
        if (!acc) memset(drow, 0, (size_t)(c->W * Cin) * sizeof(float));
        for (int64_t kh = 0; kh < k; kh++) {
            const int64_t th = ih + pad - kh; /* = oh * stride */
            if (th < 0 || th % s != 0 || th / s >= c->Ho) continue;
            const float *srow =
                dcol + (b * c->Ho + th / s) * c->Wo * K + kh * k * Cin; /* output row, tap row kh */
            for (int64_t kw = 0; kw < k; kw++) {
                /* ow with 0 <= ow*s - pad + kw < W */
                const int64_t lo = kw >= pad ? 0 : (pad - kw + s - 1) / s;
                const int64_t last = c->W - 1 + pad - kw; /* largest ow*s */
                int64_t hi = last < 0 ? 0 : last / s + 1;
                if (hi > c->Wo) hi = c->Wo;
                for (int64_t ow = lo; ow < hi; ow++) {
                    float *d = drow + (ow * s - pad + kw) * Cin;
                    const float *src = srow + ow * K + kw * Cin;
                    for (int64_t ci = 0; ci < Cin; ci++)
                        d[ci] += src[ci];
                }
            }
        }
    }
}

enum { COLSUM_COLS = 64 }; /* columns colsum_add sums at a time, in locals */

/* out (C) += column sums of a (M, C): per-block partials in part (NBLK, C),
 * combined in block order. */
static void colsum_add(const float *a, int64_t M, int64_t C, float *part, float *out) {
    const int64_t nb = M < NBLK ? M : NBLK, rows = (M + nb - 1) / nb;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < nb; j++) {
        const int64_t end = (j + 1) * rows < M ? (j + 1) * rows : M;
        /* by COLSUM_COLS columns, summed in locals: part aliases nothing,
         * but the compiler cannot know it and loaded and stored it every row */
        for (int64_t c0 = 0; c0 < C; c0 += COLSUM_COLS) {
            const int64_t nc = c0 + COLSUM_COLS < C ? COLSUM_COLS : C - c0;
            float acc[COLSUM_COLS] = {0};
            for (int64_t i = j * rows; i < end; i++)
                for (int64_t ch = 0; ch < nc; ch++)
                    acc[ch] += a[i * C + c0 + ch];
            memcpy(part + j * C + c0, acc, (size_t)nc * sizeof(float));
        }
    }
    for (int64_t ch = 0; ch < C; ch++) {
        double sum = 0;
        for (int64_t j = 0; j < nb; j++)
            sum += part[j * C + ch];
        out[ch] += (float)sum;
    }
}

/* every row of y (rows, Cout) = bias, so that sgemm can add into it */
static void fill_bias(const float *b, int64_t Cout, float *y, int64_t rows, bool par) {
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < rows; i++)
        memcpy(y + i * Cout, b, (size_t)Cout * sizeof(float));
}

/* Two ways to spread the chunks over threads. With at least as many chunks
 * as threads, each thread takes whole chunks in its own im2col buffer and
 * calls sgemm single-threaded (OpenBLAS's OpenMP build does inside a parallel
 * region): one parallel region per layer, and each chunk stays in one core's
 * cache. With fewer chunks (small batches of big images), chunks run one
 * after the other and im2col, col2im and sgemm are each threaded. */

/* y rows of images b0..b0+nb = im2col(x) wp^T (+ bias) */
static void forward_chunk(const conv_geom *c, const float *x, const float *wp, const float *bias, float *y,
                          int64_t b0, float *col, bool par) {
    const int64_t P = c->Ho * c->Wo, nb = c->B - b0 < c->nb ? c->B - b0 : c->nb;
    float *yc = y + b0 * P * c->Cout; /* (nb*P, Cout) */
    im2col(c, x, b0, nb, col, par);
    if (bias) fill_bias(bias, c->Cout, yc, nb * P, par);
    st_sgemm(CblasNoTrans, CblasTrans, (int)(nb * P), (int)c->Cout, (int)c->K, 1.0f, col, (int)c->K, wp,
             (int)c->K, bias ? 1.0f : 0.0f, yc, (int)c->Cout);
}

static st_status conv2d_forward(st_node *n, st_graph *g) {
    const conv_geom c = node_geom(n);
    const float *x = n->in[0]->data;                                         /* (B, H, W, Cin) */
    const float *w = n->params[0]->data;                                     /* (Cout, Cin, k, k) */
    float *y = n->out->data;                                                 /* (M, Cout) */
    float *wp = g->work + c.off_wp;                                          /* (Cout, K) */
    const float *bias = n->args.i[ST_CONV_BIAS] ? n->params[1]->data : NULL; /* (Cout) */
    if (n->args.i[ST_CONV_WINO]) {
        const int64_t dims[5] = {c.B, c.H, c.W, c.Cin, c.Cout};
        st_wino_forward(dims, c.nt, x, w, bias, y, g->work);
        return ST_OK;
    }
    permute_weight(&c, w, wp);
    if (n->args.i[ST_CONV_DIRECT]) {
        if (bias) fill_bias(bias, c.Cout, y, c.M, true);
        st_sgemm(CblasNoTrans, CblasTrans, (int)c.M, (int)c.Cout, (int)c.K, 1.0f, x, (int)c.K, wp, (int)c.K,
                 bias ? 1.0f : 0.0f, y, (int)c.Cout);
        return ST_OK;
    }
    const int nt = run_threads(&c);
    if (c.nchunks >= nt) {
#pragma omp parallel num_threads(nt)
        {
            float *col = g->work + c.off_col + omp_get_thread_num() * c.chunk; /* (nb*Ho*Wo, K) */
#pragma omp for schedule(static)
            for (int64_t ch = 0; ch < c.nchunks; ch++)
                forward_chunk(&c, x, wp, bias, y, ch * c.nb, col, false);
        }
    } else {
        for (int64_t ch = 0; ch < c.nchunks; ch++)
            forward_chunk(&c, x, wp, bias, y, ch * c.nb, g->work + c.off_col, true);
    }
    return ST_OK;
}

/* Backward of the chunks of weight-gradient group gi: dwt_g (K, Cout) =
 * sum of col^T dy over them, and dx of their images. */
static void backward_group(const conv_geom *c, int64_t gi, const float *x, const float *dy, const float *wp,
                           float *dwt_g, float *dx, bool acc, float *col, bool par) {
    const int64_t P = c->Ho * c->Wo;
    const int64_t ch0 = gi * c->nchunks / c->groups, ch1 = (gi + 1) * c->nchunks / c->groups;
    for (int64_t ch = ch0; ch < ch1; ch++) {
        const int64_t b0 = ch * c->nb, nb = c->B - b0 < c->nb ? c->B - b0 : c->nb;
        const float *dyc = dy + b0 * P * c->Cout; /* (nb*P, Cout) */
        if (dwt_g) { /* col^T dy: this orientation ran faster in OpenBLAS than dy^T col */
            im2col(c, x, b0, nb, col, par);
            st_sgemm(CblasTrans, CblasNoTrans, (int)c->K, (int)c->Cout, (int)(nb * P), 1.0f, col, (int)c->K,
                     dyc, (int)c->Cout, ch > ch0 ? 1.0f : 0.0f, dwt_g, (int)c->Cout);
        }
        if (dx) { /* dcol = dy wp, overwriting the im2col, then gathered back */
            st_sgemm(CblasNoTrans, CblasNoTrans, (int)(nb * P), (int)c->K, (int)c->Cout, 1.0f, dyc,
                     (int)c->Cout, wp, (int)c->K, 0.0f, col, (int)c->K);
            col2im(c, col, nb, dx + b0 * c->H * c->W * c->Cin, acc, par);
        }
    }
}

static st_status conv2d_backward(st_node *n, st_graph *g) {
    const conv_geom c = node_geom(n);
    const float *x = n->in[0]->data;
    const float *dy = n->out->grad; /* (M, Cout) */
    float *dw = n->params[0]->grad;
    float *dx = n->in[0]->grad;
    const bool acc = n->in_acc[0];
    float *wp = g->work + c.off_wp;   /* (Cout, K) */
    float *dwt = g->work + c.off_dwt; /* (groups, K, Cout): weight-gradient partials, permuted */
    const int64_t dstride = st_align_floats(c.Cout * c.K);
    if (n->args.i[ST_CONV_BIAS] && n->params[1]->grad)
        colsum_add(dy, c.M, c.Cout, g->work + c.off_part, n->params[1]->grad);
    if (n->args.i[ST_CONV_WINO]) {
        const int64_t dims[5] = {c.B, c.H, c.W, c.Cin, c.Cout};
        st_wino_backward(dims, c.nt, x, dy, n->params[0]->data, dw, dx, acc, g->work);
        return ST_OK;
    }
    if (dx) permute_weight(&c, n->params[0]->data, wp);
    if (n->args.i[ST_CONV_DIRECT]) {
        /* dW^T (K, Cout) = x^T dy and dx (M, Cin) = dy wp: independent */
        const st_gemm pw = st_gemm_of(CblasTrans, CblasNoTrans, (int)c.K, (int)c.Cout, (int)c.M, 1.0f, x,
                                      (int)c.K, dy, (int)c.Cout, 0.0f, dwt, (int)c.Cout);
        const st_gemm px = st_gemm_of(CblasNoTrans, CblasNoTrans, (int)c.M, (int)c.K, (int)c.Cout, 1.0f, dy,
                                      (int)c.Cout, wp, (int)c.K, acc ? 1.0f : 0.0f, dx, (int)c.K);
        st_sgemm_two(dw ? &pw : NULL, dx ? &px : NULL);
    } else {
        const int nt = run_threads(&c);
        if (c.groups >= nt) {
#pragma omp parallel num_threads(nt)
            {
                float *col = g->work + c.off_col + omp_get_thread_num() * c.chunk;
#pragma omp for schedule(static)
                for (int64_t gi = 0; gi < c.groups; gi++)
                    backward_group(&c, gi, x, dy, wp, dw ? dwt + gi * dstride : NULL, dx, acc, col, false);
            }
        } else {
            for (int64_t gi = 0; gi < c.groups; gi++)
                backward_group(&c, gi, x, dy, wp, dw ? dwt + gi * dstride : NULL, dx, acc,
                               g->work + c.off_col, true);
        }
    }
    if (dw) add_unpermuted(&c, dwt, c.groups, dw);
    return ST_OK;
}

static const st_layer_ops conv2d_cpu = {"conv2d", conv2d_forward, conv2d_backward, NULL, false,
                                        true,     false,          false,           0};

st_status st_conv2d(st_graph *g, const char *name, st_tensor *x, int64_t out_channels, int64_t kernel,
                    int64_t stride, int64_t pad, bool bias, st_tensor **y) {
    if (x->dtype != ST_F32 || x->ndim != 4)
        return st_fail(ST_ERR_SHAPE, "conv2d %s: needs a float NHWC input (B, H, W, C), got %d dimensions",
                       name, x->ndim);
    if (out_channels <= 0 || kernel <= 0 || stride <= 0 || pad < 0)
        return st_fail(ST_ERR_SHAPE,
                       "conv2d %s: out_channels %lld, kernel %lld and stride %lld must be positive, "
                       "pad %lld non-negative",
                       name, (long long)out_channels, (long long)kernel, (long long)stride, (long long)pad);
    const int64_t H = x->shape[1], W = x->shape[2], Cin = x->shape[3];
    if (kernel > H + 2 * pad || kernel > W + 2 * pad)
        return st_fail(ST_ERR_SHAPE, "conv2d %s: kernel %lld is larger than the padded input %lldx%lld", name,
                       (long long)kernel, (long long)(H + 2 * pad), (long long)(W + 2 * pad));
    int64_t shape[4] = {x->shape[0], (H + 2 * pad - kernel) / stride + 1, (W + 2 * pad - kernel) / stride + 1,
                        out_channels};
    const int64_t K = Cin * kernel * kernel, M = shape[0] * shape[1] * shape[2];
    if (M > INT_MAX || K > INT_MAX)
        return st_fail(ST_ERR_SHAPE,
                       "conv2d %s: %lld output pixels of %lld taps exceed BLAS's int sizes; "
                       "lower the micro-batch size",
                       name, (long long)M, (long long)K);

    char pname[ST_NAME_MAX];
    const float bound = 1.0f / sqrtf((float)K); /* PyTorch's default U(+-1/sqrt(fan_in)) */
    int64_t wshape[4] = {out_channels, Cin, kernel, kernel};
    st_tensor *params[2] = {NULL, NULL};
    snprintf(pname, sizeof pname, "%s.weight", name);
    ST_TRY(st_graph_param(g, pname, 4, wshape, ST_INIT_UNIFORM, bound, true, &params[0]));
    if (bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        ST_TRY(st_graph_param(g, pname, 1, &out_channels, ST_INIT_UNIFORM, bound, false, &params[1]));
    }
    snprintf(pname, sizeof pname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, pname, 4, shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &conv2d_cpu, &x, 1, params, bias ? 2 : 1, out, &node));
    const bool direct = kernel == 1 && stride == 1 && pad == 0;
    const int nt = omp_get_max_threads(); /* the layer never runs more threads than this */
    node->args.i[ST_CONV_K] = kernel;
    node->args.i[ST_CONV_STRIDE] = stride;
    node->args.i[ST_CONV_PAD] = pad;
    node->args.i[ST_CONV_BIAS] = bias;
    node->args.i[ST_CONV_DIRECT] = direct;
    node->args.i[ST_CONV_NT] = nt;
    node->args.i[ST_CONV_WINO] = st_wino_applies(kernel, stride, pad, Cin, out_channels);
    node->work_count = geom(x, out, kernel, stride, pad, direct, nt).work;
    if (node->args.i[ST_CONV_WINO]) {
        const int64_t dims[5] = {shape[0], H, W, Cin, out_channels}, ww = st_wino_work(dims, nt);
        if (ww > node->work_count) node->work_count = ww;
    }
    *y = out;
    return ST_OK;
}
