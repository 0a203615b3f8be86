/* CUDA twin of src/layers/conv2d.c: NHWC convolution by im2col into the
 * graph's workspace and cuBLASLt fp32 products (CUBLAS_COMPUTE_32F, no
 * TF32), the same formulation as the CPU reference.
 *
 * The weight (Cout, Cin, k, k) is permuted to wp (Cout, K), K = k*k*Cin in
 * (kh, kw, cin) order, matching the im2col columns. A chunk of whole images
 * (at most CHUNK floats of im2col, at least one image) is unfolded at a time:
 *   forward   y_c (nb*P, Cout) = col (nb*P, K) wp^T (+ bias: y prefilled, beta 1)
 *   backward  dwt (K, Cout) += col^T dy_c over the chunks, then added into dw
 *             in PyTorch's order; dcol = dy_c wp overwrites col and is
 *             gathered back into dx (each dx element sums its taps in (kh, kw)
 *             order, the CPU's order, so no atomics); dbias += column sums of
 *             dy in double.
 * Workspace (set in `prepare`, since the CPU's is sized for its threads):
 * wp | dwt | col, in floats. A 1x1 stride-1 convolution takes the same path
 * (its im2col is a copy); not here: groups, dilation. In bf16/fp16 runs
 * every product's operands hold 16-bit values (the graph rounded x, dy and
 * the weights), so they run with 16-bit operands (gemm_f32.cuh); x, y and
 * their gradients in either storage (src/layers/half_io.h): im2col and
 * col2im convert, the forward product stores y in 16 bits (the bias
 * prefilled in y, added in fp32 with beta 1 and rounded once), dy is read
 * as it is stored. */
#include "gemm_f32.cuh"
extern "C" {
#include "layers/conv2d_layout.h"
}

enum { THREADS = 256 };

typedef struct geom {
    int64_t B, H, W, Cin, Ho, Wo, Cout, k, s, pad, K, P, M;
    int64_t nb;                       /* images per chunk */
    int64_t off_wp, off_dwt, off_col; /* workspace offsets (floats) */
} geom;

static geom node_geom(const st_node *n) {
    geom c;
    c.B = n->in[0]->shape[0];
    c.H = n->in[0]->shape[1];
    c.W = n->in[0]->shape[2];
    c.Cin = n->in[0]->shape[3];
    c.Ho = n->out->shape[1];
    c.Wo = n->out->shape[2];
    c.Cout = n->out->shape[3];
    c.k = n->args.i[ST_CONV_K];
    c.s = n->args.i[ST_CONV_STRIDE];
    c.pad = n->args.i[ST_CONV_PAD];
    c.K = c.Cin * c.k * c.k;
    c.P = c.Ho * c.Wo;
    c.M = c.B * c.P;
    c.nb = st_conv2d_device_images(c.B, c.P, c.K); /* the planner's rule too (conv2d_layout.h) */
    c.off_wp = 0;
    c.off_dwt = st_align_floats(c.Cout * c.K); /* the layout of st_conv2d_device_work */
    c.off_col = c.off_dwt + st_align_floats(c.K * c.Cout);
    return c;
}

/* wp (Cout, kh, kw, cin) <- w (Cout, cin, kh, kw) */
static __global__ void permute_kernel(st_fbuf w, float *wp, int64_t Cout, int64_t Cin, int64_t kk) {
    const int64_t n = Cout * Cin * kk;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i % kk, ci = (i / kk) % Cin, co = i / (kk * Cin);
        wp[(co * kk + t) * Cin + ci] = st_ld(w, i);
    }
}

/* dw (Cout, cin, kh, kw) += dwt (kh, kw, cin, Cout) */
static __global__ void unpermute_add_kernel(const float *dwt, float *dw, int64_t Cout, int64_t Cin,
                                            int64_t kk) {
    const int64_t n = Cout * Cin * kk;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i % kk, ci = (i / kk) % Cin, co = i / (kk * Cin);
        dw[i] += dwt[(t * Cin + ci) * Cout + co];
    }
}

/* col (nb*Ho*Wo, K) for images b0..b0+nb: columns (kh, kw, cin), zeros in the padding */
static __global__ void im2col_kernel(st_fbuf x, float *col, geom c, int64_t b0, int64_t nb) {
    const int64_t n = nb * c.P * c.K;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t kc = i % c.K, r = i / c.K;
        const int64_t ci = kc % c.Cin, kw = (kc / c.Cin) % c.k, kh = kc / (c.Cin * c.k);
        const int64_t ow = r % c.Wo, oh = (r / c.Wo) % c.Ho, b = b0 + r / c.P;
        const int64_t ih = oh * c.s - c.pad + kh, iw = ow * c.s - c.pad + kw;
        col[i] = ih >= 0 && ih < c.H && iw >= 0 && iw < c.W
                     ? st_ld(x, ((b * c.H + ih) * c.W + iw) * c.Cin + ci)
                     : 0.0f;
    }
}

/* dx (nb, H, W, Cin) of images b0.. = (or +=) the sum over the taps that read
 * each element, in (kh, kw) order; dcol (nb*Ho*Wo, K) holds the chunk. */
static __global__ void col2im_kernel(const float *dcol, st_fbuf dx, geom c, int64_t nb, bool acc) {
    const int64_t n = nb * c.H * c.W * c.Cin;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ci = i % c.Cin, iw = (i / c.Cin) % c.W, ih = (i / (c.Cin * c.W)) % c.H;
        const int64_t bl = i / (c.Cin * c.W * c.H);
        float sum = acc ? st_ld(dx, i) : 0.0f;
        for (int64_t kh = 0; kh < c.k; kh++) {
            const int64_t th = ih + c.pad - kh; /* = oh * s */
            if (th < 0 || th % c.s != 0 || th / c.s >= c.Ho) continue;
            const int64_t oh = th / c.s;
            for (int64_t kw = 0; kw < c.k; kw++) {
                const int64_t tw = iw + c.pad - kw;
                if (tw < 0 || tw % c.s != 0 || tw / c.s >= c.Wo) continue;
                const int64_t ow = tw / c.s;
                sum += dcol[((bl * c.Ho + oh) * c.Wo + ow) * c.K + (kh * c.k + kw) * c.Cin + ci];
            }
        }
        st_st(dx, i, sum);
    }
}

/* every row of y (rows, Cout) = bias */
static __global__ void fill_bias_kernel(st_fbuf bias, st_fbuf y, int64_t rows, int64_t Cout) {
    const int64_t n = rows * Cout;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        st_st(y, i, st_ld(bias, i % Cout));
}

/* out (C) += column sums of a (M, C), in double: block (32, 32), 32 channels
 * per block, rows strided over threadIdx.y. */
static __global__ void colsum_add_kernel(st_fbuf a, int64_t M, int64_t C, float *out) {
    __shared__ double sh[32][33];
    const int64_t c = blockIdx.x * 32 + threadIdx.x;
    double s = 0.0;
    if (c < C)
        for (int64_t i = threadIdx.y; i < M; i += blockDim.y)
            s += st_ld(a, i * C + c);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0.0;
        for (unsigned j = 0; j < blockDim.y; j++)
            t += sh[j][threadIdx.x];
        out[c] += (float)t;
    }
}

/* A, B and C each a float array or an activation stored in 16 bits */
static st_status gemm(st_graph *g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, st_fbuf A, int64_t lda,
                      st_fbuf B, int64_t ldb, float beta, st_fbuf C, int64_t ldc) {
    st_gemm_f32 p = {};
    p.ta = ta;
    p.tb = tb;
    p.M = M;
    p.N = N;
    p.K = K;
    p.alpha = 1.0f;
    p.beta = beta;
    p.A = A.p;
    p.lda = lda;
    p.B = B.p;
    p.ldb = ldb;
    p.C = C.p;
    p.ldc = ldc;
    p.a_store = A.t;
    p.b_store = B.t;
    p.c_store = C.t;
    p.operands = g->params->precision; /* im2col of x, the weights, dy: all hold 16-bit values in bf16/fp16 */
    return st_cuda_gemm_f32(g->dev, &p);
}

static st_status conv2d_forward(st_node *n, st_graph *g) {
    const geom c = node_geom(n);
    cudaStream_t st = st_cuda_stream(g);
    const st_fbuf x = st_data(n->in[0]);                     /* (B, H, W, Cin) */
    const st_fbuf w = st_data(n->params[0]);                 /* (Cout, Cin, k, k): 16-bit in bf16/fp16 */
    const st_fbuf y = st_data(n->out);                       /* (M, Cout) */
    const st_fbuf wp = {g->work + c.off_wp, ST_PREC_FP32};   /* (Cout, K) */
    const st_fbuf col = {g->work + c.off_col, ST_PREC_FP32}; /* (nb*P, K) */
    const st_tensor *bias = n->args.i[ST_CONV_BIAS] ? n->params[1] : NULL; /* (Cout) */
    permute_kernel<<<st_cuda_blocks(c.Cout * c.K, THREADS), THREADS, 0, st>>>(w, (float *)wp.p, c.Cout, c.Cin,
                                                                              c.k * c.k);
    ST_CUDA_LAUNCHED();
    if (bias) {
        fill_bias_kernel<<<st_cuda_blocks(c.M * c.Cout, THREADS), THREADS, 0, st>>>(st_data(bias), y, c.M,
                                                                                    c.Cout);
        ST_CUDA_LAUNCHED();
    }
    for (int64_t b0 = 0; b0 < c.B; b0 += c.nb) {
        const int64_t nb = c.B - b0 < c.nb ? c.B - b0 : c.nb;
        im2col_kernel<<<st_cuda_blocks(nb * c.P * c.K, THREADS), THREADS, 0, st>>>(x, (float *)col.p, c, b0,
                                                                                   nb);
        ST_CUDA_LAUNCHED();
        ST_TRY(gemm(g, false, true, nb * c.P, c.Cout, c.K, col, c.K, wp, c.K, bias ? 1.0f : 0.0f,
                    st_fbuf_at(y, b0 * c.P * c.Cout), c.Cout));
    }
    return ST_OK;
}

static st_status conv2d_backward(st_node *n, st_graph *g) {
    const geom c = node_geom(n);
    cudaStream_t st = st_cuda_stream(g);
    const st_fbuf x = st_data(n->in[0]);
    const st_fbuf dy = st_grad(n->out);   /* (M, Cout) */
    float *dw = n->params[0]->grad;       /* (Cout, Cin, k, k) */
    const st_fbuf dx = st_grad(n->in[0]); /* (B, H, W, Cin); p NULL: none */
    const bool acc = n->in_acc[0];
    const st_fbuf wp = {g->work + c.off_wp, ST_PREC_FP32};   /* (Cout, K) */
    const st_fbuf dwt = {g->work + c.off_dwt, ST_PREC_FP32}; /* (K, Cout) */
    const st_fbuf col = {g->work + c.off_col, ST_PREC_FP32}; /* (nb*P, K) */
    if (n->args.i[ST_CONV_BIAS] && n->params[1]->grad) {
        colsum_add_kernel<<<(unsigned)((c.Cout + 31) / 32), dim3(32, 32), 0, st>>>(dy, c.M, c.Cout,
                                                                                   n->params[1]->grad);
        ST_CUDA_LAUNCHED();
    }
    if (dx.p) {
        permute_kernel<<<st_cuda_blocks(c.Cout * c.K, THREADS), THREADS, 0, st>>>(
            st_data(n->params[0]), (float *)wp.p, c.Cout, c.Cin, c.k * c.k);
        ST_CUDA_LAUNCHED();
    }
    for (int64_t b0 = 0; b0 < c.B; b0 += c.nb) {
        const int64_t nb = c.B - b0 < c.nb ? c.B - b0 : c.nb;
        const st_fbuf dyc = st_fbuf_at(dy, b0 * c.P * c.Cout); /* (nb*P, Cout) */
        if (dw) {
            im2col_kernel<<<st_cuda_blocks(nb * c.P * c.K, THREADS), THREADS, 0, st>>>(x, (float *)col.p, c,
                                                                                       b0, nb);
            ST_CUDA_LAUNCHED();
            /* dwt (K, Cout) (+)= col^T dy_c */
            ST_TRY(gemm(g, true, false, c.K, c.Cout, nb * c.P, col, c.K, dyc, c.Cout, b0 > 0 ? 1.0f : 0.0f,
                        dwt, c.Cout));
        }
        if (dx.p) {
            /* dcol (nb*P, K) = dy_c wp, over the im2col the product above has read */
            ST_TRY(gemm(g, false, false, nb * c.P, c.K, c.Cout, dyc, c.Cout, wp, c.K, 0.0f, col, c.K));
            col2im_kernel<<<st_cuda_blocks(nb * c.H * c.W * c.Cin, THREADS), THREADS, 0, st>>>(
                (const float *)col.p, st_fbuf_at(dx, b0 * c.H * c.W * c.Cin), c, nb, acc);
            ST_CUDA_LAUNCHED();
        }
    }
    if (dw) {
        unpermute_add_kernel<<<st_cuda_blocks(c.Cout * c.K, THREADS), THREADS, 0, st>>>(
            (const float *)dwt.p, dw, c.Cout, c.Cin, c.k * c.k);
        ST_CUDA_LAUNCHED();
    }
    return ST_OK;
}

static st_status conv2d_prepare(st_node *n, st_graph *g) {
    st_conv2d_device_layout(n); /* wp | dwt | col, as node_geom lays them out */
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_conv2d_ops = {
    "conv2d", conv2d_forward, conv2d_backward, conv2d_prepare, false, true, false, false, 0};
