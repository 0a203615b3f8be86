/* CUDA twin of src/layers/batchnorm.c (and the fused batchnorm + ReLU):
 * per-channel statistics over the M rows of x (M, C), NHWC images or (B, C).
 *
 * Training: the statistics are shifted sums in double, sum(x - s) and
 * sum((x - s)^2) with s = the channel's value in row 0, as on the CPU; the
 * biased variance normalises, the unbiased one (times M / (M - 1)) moves
 * running_var, both running stats with `momentum` in double. Eval: the
 * running stats. mean and rstd are saved (the node's saved state, as on the
 * CPU) and backward recomputes xhat from x.
 *
 * Every per-channel reduction is deterministic: a grid of (channel tiles of
 * 32) x (NB row blocks) writes double partials into the workspace, and one
 * thread per channel adds them in block order. Backward: sum dy and
 * sum dy * xhat (dy masked by y > 0 when fused with ReLU), dbias and dweight
 * added, then dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)) in training,
 * w rstd dy in eval, written or added as in_acc says.
 *
 * Workspace (doubles, then floats; set in `prepare`): p1, p2 (NB, C) each,
 * then three float vectors of C, then the sync buffer (2C + 2 doubles).
 *
 * x, y and their gradients in either storage (src/layers/half_io.h).
 *
 * Synchronised batch-norm (dist.sync_batchnorm, the graph's allreduce_sum
 * hook, which on a device graph queues an all-reduce of device doubles in
 * the compute stream's order: NCCL's, train.c): the CPU's algorithm
 * (src/layers/batchnorm.c), the same doubles reduced in the same rounds.
 * Forward: (count, sum x) reduced gives the global mean; each rank's sum of
 * squared deviations from it, M2_r + M_r (m_r - mu)^2, reduced gives the
 * global biased variance; the running statistics move with the global
 * count. Backward: (count, sum dy, sum dy xhat) reduced, dx from the global
 * means; dweight and dbias this rank's sums. The host never waits: each
 * round is a kernel that writes the buffer, the all-reduce, and a kernel
 * that reads it. */
#include <math.h>

#include "common.cuh"

enum { NB_MAX = 256, ROWS_PER_BLOCK = 256, THREADS = 256, TY = 8 };

static int64_t n_blocks(int64_t M) {
    int64_t nb = (M + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    return nb < 1 ? 1 : nb > (int64_t)NB_MAX ? (int64_t)NB_MAX : nb;
}

/* Partials of block j (blockIdx.y) for channels of tile blockIdx.x:
 * p1[j, c] = sum f1, p2[j, c] = sum f2 over the block's rows.
 * STATS: f1 = x - s, f2 = (x - s)^2 (s = x[0, c]);
 * else:  f1 = d, f2 = d * xhat with d = dy (masked by y > 0 when y). */
template <bool STATS>
static __global__ void partials_kernel(st_fbuf x, st_fbuf dy, st_fbuf y, const float *mean, const float *rstd,
                                       int64_t M, int64_t C, int64_t nb, double *p1, double *p2) {
    __shared__ double s1[TY][33], s2[TY][33];
    const int64_t c = blockIdx.x * 32 + threadIdx.x, j = blockIdx.y;
    const int64_t rows = (M + nb - 1) / nb;
    const int64_t lo = j * rows < M ? j * rows : M, hi = (j + 1) * rows < M ? (j + 1) * rows : M;
    double a = 0.0, b = 0.0;
    if (c < C) {
        if (STATS) {
            const float shift = st_ld(x, c);
            for (int64_t i = lo + threadIdx.y; i < hi; i += TY) {
                const double d = (double)st_ld(x, i * C + c) - shift;
                a += d;
                b += d * d;
            }
        } else {
            const float mu = mean[c], rs = rstd[c];
            for (int64_t i = lo + threadIdx.y; i < hi; i += TY) {
                const float d = y.p && st_ld(y, i * C + c) <= 0.0f ? 0.0f : st_ld(dy, i * C + c);
                a += d;
                b += d * ((st_ld(x, i * C + c) - mu) * rs);
            }
        }
    }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int t = 1; t < TY; t++) {
            a += s1[t][threadIdx.x];
            b += s2[t][threadIdx.x];
        }
        p1[j * C + c] = a;
        p2[j * C + c] = b;
    }
}

/* Channel c's sums over the row blocks' partials (nb, C), in block order. */
static __device__ void combine(const double *p1, const double *p2, int64_t nb, int64_t C, int64_t c,
                               double *sa, double *sb) {
    double a = 0.0, b = 0.0;
    for (int64_t j = 0; j < nb; j++) {
        a += p1[j * C + c];
        b += p2[j * C + c];
    }
    *sa = a;
    *sb = b;
}

/* Channel c's mean and rstd from the mean mu and biased variance var of
 * `count` rows, and unless this is checkpointing's second forward (update
 * false: moved once already) the running statistics moved towards them. */
static __device__ void store_stats(int64_t c, double mu, double var, double count, float eps, float mom,
                                   float *mean, float *rstd, float *rmean, float *rvar, bool update) {
    mean[c] = (float)mu;
    rstd[c] = (float)(1.0 / sqrt(var + (double)eps));
    if (!update) return;
    rmean[c] = (float)((1.0 - (double)mom) * rmean[c] + (double)mom * mu);
    rvar[c] = (float)((1.0 - (double)mom) * rvar[c] + (double)mom * var * count / (count - 1.0));
}

/* Training statistics, one thread per channel. */
static __global__ void stats_kernel(st_fbuf x, const double *p1, const double *p2, int64_t M, int64_t C,
                                    int64_t nb, float eps, float mom, float *mean, float *rstd, float *rmean,
                                    float *rvar, bool update) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sa, sb;
    combine(p1, p2, nb, C, c, &sa, &sb);
    const double md = sa / (double)M;
    double var = sb / (double)M - md * md;
    if (var < 0) var = 0;
    store_stats(c, st_ld(x, c) + md, var, (double)M, eps, mom, mean, rstd, rmean, rvar, update);
}

static __global__ void eval_stats_kernel(const float *rmean, const float *rvar, int64_t C, float eps,
                                         float *mean, float *rstd) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    mean[c] = rmean[c];
    rstd[c] = 1.0f / sqrtf(rvar[c] + eps);
}

static __global__ void normalize_kernel(st_fbuf x, const float *mean, const float *rstd, st_fbuf w,
                                        st_fbuf bias, st_fbuf y, int64_t M, int64_t C, bool relu) {
    const int64_t n = M * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C;
        const float v = (st_ld(x, i) - mean[c]) * (rstd[c] * st_ld(w, c)) + st_ld(bias, c);
        st_st(y, i, relu ? (!(v <= 0.0f) ? v : 0.0f) : v); /* (NaN stays: activation.cu) */
    }
}

/* Per channel: dbias += sum d, dweight += sum d xhat, and the dx
 * coefficients; with sync, (M, sum d, sum d xhat) into it for the
 * all-reduce instead of the means (sync_coef_kernel's, after it). */
static __global__ void grad_params_kernel(const double *p1, const double *p2, int64_t M, int64_t C,
                                          int64_t nb, st_fbuf w, const float *rstd, float *dw, float *db,
                                          bool train, float *k_scale, float *k_mdy, float *k_mdyx,
                                          double *sync) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sa, sb;
    combine(p1, p2, nb, C, c, &sa, &sb);
    if (db) db[c] += (float)sa;
    if (dw) dw[c] += (float)sb;
    k_scale[c] = st_ld(w, c) * rstd[c];
    if (sync) {
        if (c == 0) sync[0] = (double)M;
        sync[1 + c] = sa;
        sync[1 + C + c] = sb;
        return;
    }
    k_mdy[c] = train ? (float)(sa / (double)M) : 0.0f;
    k_mdyx[c] = train ? (float)(sb / (double)M) : 0.0f;
}

static __global__ void grad_input_kernel(st_fbuf x, st_fbuf dy, st_fbuf y, const float *mean,
                                         const float *rstd, const float *k_scale, const float *k_mdy,
                                         const float *k_mdyx, st_fbuf dx, int64_t M, int64_t C, bool acc) {
    const int64_t n = M * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C;
        const float xhat = (st_ld(x, i) - mean[c]) * rstd[c];
        const float d = y.p && st_ld(y, i) <= 0.0f ? 0.0f : st_ld(dy, i);
        const float v = k_scale[c] * (d - k_mdy[c] - xhat * k_mdyx[c]);
        st_st(dx, i, acc ? st_ld(dx, i) + v : v);
    }
}

/* Sync forward, round 1 (one thread per channel): this rank's sums
 * combined into p1[c], p2[c] (the first block's slots), and buf = (M, sum x
 * over the rows per channel). */
static __global__ void sync_sums_kernel(st_fbuf x, double *p1, double *p2, int64_t M, int64_t C, int64_t nb,
                                        double *buf) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sa, sb;
    combine(p1, p2, nb, C, c, &sa, &sb);
    p1[c] = sa;
    p2[c] = sb;
    if (c == 0) buf[0] = (double)M;
    buf[1 + c] = (double)M * (double)st_ld(x, c) + sa; /* sum of x (the shift is row 0's value) */
}

/* Round 2: from the global (count, sum x) in buf, the global mean into
 * p1[c] and this rank's sum of squared deviations from it into sq[c]. */
static __global__ void sync_m2_kernel(st_fbuf x, double *p1, const double *p2, int64_t M, int64_t C,
                                      const double *buf, double *sq) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    const double N = buf[0], sa = p1[c], sb = p2[c], shift = (double)st_ld(x, c);
    const double mu = buf[1 + c] / N, mr = shift + sa / (double)M; /* global, this rank's mean */
    double m2 = sb - sa * sa / (double)M;                          /* this rank's sum of (x - mr)^2 */
    if (m2 < 0) m2 = 0;
    p1[c] = mu;
    sq[c] = m2 + (double)M * (mr - mu) * (mr - mu);
}

/* After round 2: mean, rstd and the running statistics from the global
 * mean (p1), the global sum of squares (sq) and count (buf[0]). */
static __global__ void sync_stats_kernel(const double *p1, const double *sq, const double *buf, int64_t C,
                                         float eps, float mom, float *mean, float *rstd, float *rmean,
                                         float *rvar, bool update) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    store_stats(c, p1[c], sq[c] / buf[0], buf[0], eps, mom, mean, rstd, rmean, rvar, update);
}

/* Sync backward, after the gradient sums' all-reduce: the dx coefficients
 * from the global (count, sum dy, sum dy xhat) in buf. */
static __global__ void sync_coef_kernel(const double *buf, int64_t C, float *k_mdy, float *k_mdyx) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    k_mdy[c] = (float)(buf[1 + c] / buf[0]);
    k_mdyx[c] = (float)(buf[1 + C + c] / buf[0]);
}

/* The sync buffer in the workspace: after p1, p2 and the three float vectors. */
static double *sync_buf(const st_graph *g, int64_t nb, int64_t C) {
    return (double *)g->work + 2 * nb * C + st_align_floats(3 * C) / 2;
}

static st_status batchnorm_forward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_BN_M], C = n->args.i[ST_BN_C], nb = n_blocks(M);
    const float eps = n->args.f[ST_BN_F_EPS], mom = n->args.f[ST_BN_F_MOMENTUM];
    cudaStream_t st = st_cuda_stream(g);
    const st_fbuf x = st_data(n->in[0]);                                   /* (M, C) */
    const st_fbuf w = st_data(n->params[0]), bias = st_data(n->params[1]); /* (C): 16-bit in bf16/fp16 */
    float *rmean = n->params[2]->data, *rvar = n->params[3]->data;         /* (C) */
    float *mean = n->saved, *rstd = n->saved + C;                          /* (C) each */
    double *p1 = (double *)g->work, *p2 = p1 + nb * C;                     /* (nb, C) each */
    const unsigned cb = (unsigned)((C + 127) / 128);
    if (g->training) {
        if (M < 2 && !g->allreduce_sum) /* synchronised: the global count, 2 rows at least (2 ranks or more) */
            return (st_status)st_batchnorm_too_few(n);
        partials_kernel<true><<<dim3((unsigned)((C + 31) / 32), (unsigned)nb), dim3(32, TY), 0, st>>>(
            x, st_fbuf{NULL, ST_PREC_FP32}, st_fbuf{NULL, ST_PREC_FP32}, NULL, NULL, M, C, nb, p1, p2);
        ST_CUDA_LAUNCHED();
        if (g->allreduce_sum) { /* the global micro-batch's statistics (above) */
            double *buf = sync_buf(g, nb, C), *sq = buf + 1 + C;
            char what[ST_NAME_MAX + 48];
            sync_sums_kernel<<<cb, 128, 0, st>>>(x, p1, p2, M, C, nb, buf);
            ST_CUDA_LAUNCHED();
            snprintf(what, sizeof what, "sync batch-norm %s: sums", n->out->name);
            ST_TRY(g->allreduce_sum(g->allreduce_ctx, buf, C + 1, what));
            sync_m2_kernel<<<cb, 128, 0, st>>>(x, p1, p2, M, C, buf, sq);
            ST_CUDA_LAUNCHED();
            snprintf(what, sizeof what, "sync batch-norm %s: squares", n->out->name);
            ST_TRY(g->allreduce_sum(g->allreduce_ctx, sq, C, what));
            sync_stats_kernel<<<cb, 128, 0, st>>>(p1, sq, buf, C, eps, mom, mean, rstd, rmean, rvar,
                                                  !g->recomputing);
        } else {
            stats_kernel<<<cb, 128, 0, st>>>(x, p1, p2, M, C, nb, eps, mom, mean, rstd, rmean, rvar,
                                             !g->recomputing);
        }
    } else {
        eval_stats_kernel<<<cb, 128, 0, st>>>(rmean, rvar, C, eps, mean, rstd);
    }
    ST_CUDA_LAUNCHED();
    normalize_kernel<<<st_cuda_blocks(M * C, THREADS), THREADS, 0, st>>>(
        x, mean, rstd, w, bias, st_data(n->out), M, C, n->args.i[ST_BN_RELU] != 0);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status batchnorm_backward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_BN_M], C = n->args.i[ST_BN_C], nb = n_blocks(M);
    cudaStream_t st = st_cuda_stream(g);
    const st_fbuf x = st_data(n->in[0]), dy = st_grad(n->out); /* (M, C) */
    /* fused ReLU: mask by y > 0 */
    const st_fbuf y = n->args.i[ST_BN_RELU] ? st_data(n->out) : st_fbuf{NULL, ST_PREC_FP32};
    const st_fbuf dx = st_grad(n->in[0]); /* (M, C); p NULL: none */
    const st_fbuf w = st_data(n->params[0]);
    const float *mean = n->saved, *rstd = n->saved + C;
    double *p1 = (double *)g->work, *p2 = p1 + nb * C;
    float *k_scale = (float *)(p2 + nb * C), *k_mdy = k_scale + C, *k_mdyx = k_scale + 2 * C; /* (C) each */
    partials_kernel<false><<<dim3((unsigned)((C + 31) / 32), (unsigned)nb), dim3(32, TY), 0, st>>>(
        x, dy, y, mean, rstd, M, C, nb, p1, p2);
    ST_CUDA_LAUNCHED();
    const bool sync = g->training && g->allreduce_sum && dx.p;
    double *buf = sync ? sync_buf(g, nb, C) : NULL;
    grad_params_kernel<<<(unsigned)((C + 127) / 128), 128, 0, st>>>(p1, p2, M, C, nb, w, rstd,
                                                                    n->params[0]->grad, n->params[1]->grad,
                                                                    g->training, k_scale, k_mdy, k_mdyx, buf);
    ST_CUDA_LAUNCHED();
    if (!dx.p) return ST_OK;
    if (sync) { /* the means of dy and dy xhat over the global micro-batch */
        char what[ST_NAME_MAX + 48];
        snprintf(what, sizeof what, "sync batch-norm %s: gradient sums", n->out->name);
        ST_TRY(g->allreduce_sum(g->allreduce_ctx, buf, 2 * C + 1, what));
        sync_coef_kernel<<<(unsigned)((C + 127) / 128), 128, 0, st>>>(buf, C, k_mdy, k_mdyx);
        ST_CUDA_LAUNCHED();
    }
    grad_input_kernel<<<st_cuda_blocks(M * C, THREADS), THREADS, 0, st>>>(
        x, dy, y, mean, rstd, k_scale, k_mdy, k_mdyx, dx, M, C, n->in_acc[0]);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status batchnorm_prepare(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_BN_M], C = n->args.i[ST_BN_C];
    n->work_count =
        2 * (2 * n_blocks(M) * C) + st_align_floats(3 * C) + 2 * (2 * C + 2); /* (sync's buffer) */
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_batchnorm_ops = {
    "batchnorm", batchnorm_forward, batchnorm_backward, batchnorm_prepare, false, false, false, false, 0};
