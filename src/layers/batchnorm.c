/* Batch normalisation over the last dim C of x (..., C) (Ioffe & Szegedy
 * 2015, Algorithm 1): statistics per channel over all other elements, so
 * NHWC images and (B, C) matrices are both M rows of C channels.
 *
 * Training normalises with the batch mean and biased variance and moves the
 * running statistics as PyTorch does: running = (1 - momentum) * running +
 * momentum * batch, with the unbiased variance for running_var. Eval uses
 * the running statistics. The node saves the mean and 1/sqrt(var + eps) it
 * used, so backward recomputes xhat from x.
 *
 * The layer is memory-bound, so each direction makes two passes over its
 * tensors: the statistics come from one pass of shifted sums in double,
 * sum(x - s) and sum((x - s)^2) with s the channel's first value (shifting by
 * a sample of the data keeps E[d^2] - E[d]^2 free of cancellation). The
 * per-channel reductions run over a fixed set of row blocks whose partials
 * are combined in block order, so the results are the same bits whatever the
 * thread count.
 *
 * Synchronised batch-norm (dist.sync_batchnorm; PyTorch's SyncBatchNorm):
 * with the graph's allreduce_sum hook set, training uses the statistics of
 * the global micro-batch, every rank's rows together. Forward reduces in two
 * rounds of doubles (sync_stats below): first (count, sum x) gives the global
 * mean mu; then each rank sends its rows' sum of squared deviations from mu,
 * computed from its own shifted sums as M2_r + M_r (m_r - mu)^2 (Chan, Golub
 * and LeVeque 1979, the pairwise update), so no quantity is a difference of
 * two large sums. One round with one shift agreed on beforehand would need
 * a broadcast first (two collectives as well); one round with sums shifted
 * by a value every rank already has (0, the running mean) is E[x^2] - E[x]^2
 * again at the first step, which the shift exists to avoid. Backward reduces
 * (count, sum dy, sum dy xhat) in one round, so dx is exact for the global
 * statistics; dweight and dbias stay this rank's sums (the data-parallel
 * all-reduce averages them with the other gradients). The running statistics
 * move with the global mean and the unbiased global variance (n / (n - 1),
 * n the global count), the same on every rank. Eval: no communication.
 *
 * Not here: unbatched input, affine=False, track_running_stats=False. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "layers.h"

enum { NBLK = 64 };

static int64_t n_blocks(int64_t M) { return M < NBLK ? M : NBLK; }

static void block_range(int64_t M, int64_t j, int64_t *lo, int64_t *hi) {
    const int64_t nb = n_blocks(M), rows = (M + nb - 1) / nb;
    *lo = j * rows < M ? j * rows : M;
    *hi = (j + 1) * rows < M ? (j + 1) * rows : M;
}

/* Workspace, in doubles: two sets of block partials (nb, C), three float
 * vectors of C, then the buffer sync batch-norm reduces (2C + 1). */
static int64_t work_doubles(int64_t M, int64_t C) {
    return 2 * n_blocks(M) * C + (3 * C + 1) / 2 + 2 * C + 1;
}

static double *sync_buffer(const st_graph *g, int64_t M, int64_t C) {
    return (double *)g->work + 2 * n_blocks(M) * C + (3 * C + 1) / 2;
}

/* Rows summed in float before each addition into the double partials, and
 * channels per pass (the float sums live in registers or L1). */
enum { SUB = 16, CW = 128 };

/* Block j's per-channel sums (a, b: C doubles each). Forward (dy NULL):
 * a = sum d, b = sum d^2 with d = x - m. Backward: a = sum g, b = sum g xhat,
 * with xhat = (x - m) r and g = dy, or 0 where the fused ReLU's y is not
 * positive (y non-NULL). */
static void stat_sums(const float *x, const float *dy, const float *y, const float *m, const float *r, int64_t M,
                      int64_t C, int64_t j, double *a, double *b) {
    int64_t lo, hi;
    block_range(M, j, &lo, &hi);
    memset(a, 0, (size_t)C * sizeof(double));
    memset(b, 0, (size_t)C * sizeof(double));
    for (int64_t c0 = 0; c0 < C; c0 += CW) {
        const int64_t cw = C - c0 < CW ? C - c0 : CW;
        for (int64_t i0 = lo; i0 < hi; i0 += SUB) {
            const int64_t i1 = i0 + SUB < hi ? i0 + SUB : hi;
            float fa[CW] = {0}, fb[CW] = {0};
            for (int64_t i = i0; i < i1; i++) {
                const float *xr = x + i * C + c0, *mr = m + c0;
                if (!dy) {
#pragma omp simd
                    for (int64_t c = 0; c < cw; c++) {
                        const float d = xr[c] - mr[c];
                        fa[c] += d;
                        fb[c] += d * d;
                    }
                } else if (y) {
                    const float *gr = dy + i * C + c0, *rr = r + c0, *yr = y + i * C + c0;
#pragma omp simd
                    for (int64_t c = 0; c < cw; c++) {
                        const float g = yr[c] <= 0.0f ? 0.0f : gr[c];
                        fa[c] += g;
                        fb[c] += g * ((xr[c] - mr[c]) * rr[c]);
                    }
                } else {
                    const float *gr = dy + i * C + c0, *rr = r + c0;
#pragma omp simd
                    for (int64_t c = 0; c < cw; c++) {
                        fa[c] += gr[c];
                        fb[c] += gr[c] * ((xr[c] - mr[c]) * rr[c]);
                    }
                }
            }
            for (int64_t c = 0; c < cw; c++) {
                a[c0 + c] += fa[c];
                b[c0 + c] += fb[c];
            }
        }
    }
}

/* Per channel: a = sum over rows of fa, b = sum of fb, from the block
 * partials pa, pb (nb, C), combined in block order. */
static void combine(const double *pa, const double *pb, int64_t nb, int64_t C, double *a, double *b) {
    for (int64_t c = 0; c < C; c++) {
        double sa = 0, sb = 0;
        for (int64_t j = 0; j < nb; j++) {
            sa += pa[j * C + c];
            sb += pb[j * C + c];
        }
        a[c] = sa;
        b[c] = sb;
    }
}

/* Sync batch-norm's forward reduction. In: sa, sb (C) this rank's sums of
 * d = x - shift and d^2 over its M rows. Out: sa = the global mean, sb = the
 * global biased variance, *count = the global number of rows. */
static st_status sync_stats(st_node *n, st_graph *g, const float *shift, int64_t M, int64_t C, double *sa,
                            double *sb, double *count) {
    double *buf = sync_buffer(g, M, C); /* (C + 1) */
    char what[ST_NAME_MAX + 48];
    buf[0] = (double)M;
    for (int64_t c = 0; c < C; c++)
        buf[1 + c] = (double)M * shift[c] + sa[c]; /* sum of x */
    snprintf(what, sizeof what, "sync batch-norm %s: sums", n->out->name);
    ST_TRY(g->allreduce_sum(g->allreduce_ctx, buf, C + 1, what));
    const double N = buf[0];
    if (N < 2)
        return st_fail(ST_ERR_SHAPE,
                       "batchnorm %s: training needs more than one value per channel over all ranks, got %g; "
                       "use a larger micro-batch",
                       n->out->name, N);
    for (int64_t c = 0; c < C; c++) {
        const double mu = buf[1 + c] / N, mr = shift[c] + sa[c] / (double)M; /* global, this rank's mean */
        double m2 = sb[c] - sa[c] * sa[c] / (double)M;                       /* this rank's sum of (x - mr)^2 */
        if (m2 < 0) m2 = 0;
        sa[c] = mu;
        buf[c] = m2 + (double)M * (mr - mu) * (mr - mu); /* this rank's sum of (x - mu)^2 */
    }
    snprintf(what, sizeof what, "sync batch-norm %s: squares", n->out->name);
    ST_TRY(g->allreduce_sum(g->allreduce_ctx, buf, C, what));
    for (int64_t c = 0; c < C; c++)
        sb[c] = buf[c] / N;
    *count = N;
    return ST_OK;
}

int st_batchnorm_too_few(const st_node *n) {
    const st_tensor *x = n->in[0];
    char shape[96] = "one row";
    if (x->ndim == 4)
        snprintf(shape, sizeof shape, "%lld sample of a %lldx%lld map", (long long)x->shape[0],
                 (long long)x->shape[1], (long long)x->shape[2]);
    return st_fail(ST_ERR_SHAPE,
                   "batchnorm %s: training needs more than one value per channel, and its input is %s (the "
                   "micro-batch's samples times the map's pixels, on this rank): set train.micro_batch_size "
                   "to 2 or more, fewer model.pool to keep a larger map, or dist.sync_batchnorm: true over "
                   "several ranks",
                   n->out->name, shape);
}

static st_status batchnorm_forward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_BN_M], C = n->args.i[ST_BN_C], nb = n_blocks(M);
    const float eps = n->args.f[ST_BN_F_EPS], mom = n->args.f[ST_BN_F_MOMENTUM];
    const float *x = n->in[0]->data;                                 /* (M, C) */
    float *y = n->out->data;                                         /* (M, C) */
    const float *w = n->params[0]->data, *bias = n->params[1]->data; /* (C) */
    float *rmean = n->params[2]->data, *rvar = n->params[3]->data;   /* (C) */
    float *mean = n->saved, *rstd = n->saved + C;                    /* (C) each */
    double *p1 = (double *)g->work, *p2 = p1 + nb * C;               /* (nb, C) each */
    float *scale = (float *)(p2 + nb * C);                           /* (C) */
    if (g->training) {
        if (M < 2 && !g->allreduce_sum) /* synchronised: checked on the global count */
            return (st_status)st_batchnorm_too_few(n);
        const float *shift = x; /* row 0 */
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < nb; j++)
            stat_sums(x, NULL, NULL, shift, NULL, M, C, j, p1 + j * C, p2 + j * C);
        /* combine into the first block's slots, then p1 = mean, p2 = biased variance */
        combine(p1, p2, nb, C, p1, p2);
        /* Row 0 far from its channel's mean (an outlier: a sentinel value in
         * a feature) leaves E[d^2] - E[d]^2 to cancellation, the float sums
         * of d^2 being good to about 1e-6 of E[d^2]: where E[d]^2 passes
         * 1e3 times the variance, the sums once more about the mean found
         * (in mean, n->saved, rewritten below). */
        bool again = false;
        for (int64_t c = 0; c < C; c++) {
            const double md = p1[c] / (double)M;
            again = again || md * md > 1e3 * (p2[c] / (double)M - md * md);
        }
        if (again) {
            for (int64_t c = 0; c < C; c++)
                mean[c] = (float)(shift[c] + p1[c] / (double)M);
            shift = mean;
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < nb; j++)
                stat_sums(x, NULL, NULL, shift, NULL, M, C, j, p1 + j * C, p2 + j * C);
            combine(p1, p2, nb, C, p1, p2);
        }
        double count = (double)M;
        if (g->allreduce_sum) {
            ST_TRY(sync_stats(n, g, shift, M, C, p1, p2, &count));
        } else {
            for (int64_t c = 0; c < C; c++) {
                const double md = p1[c] / (double)M;
                double var = p2[c] / (double)M - md * md;
                if (var < 0) var = 0;
                p1[c] = shift[c] + md;
                p2[c] = var;
            }
        }
        for (int64_t c = 0; c < C; c++) {
            const double mu = p1[c], var = p2[c];
            mean[c] = (float)mu;
            rstd[c] = (float)(1.0 / sqrt(var + (double)eps));
            if (g->recomputing) continue; /* checkpointing's second forward: updated once already */
            rmean[c] = (float)((1.0 - (double)mom) * rmean[c] + (double)mom * mu);
            rvar[c] = (float)((1.0 - (double)mom) * rvar[c] + (double)mom * var * count / (count - 1.0));
        }
    } else {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = rmean[c];
            rstd[c] = 1.0f / sqrtf(rvar[c] + eps);
        }
    }
    for (int64_t c = 0; c < C; c++)
        scale[c] = rstd[c] * w[c];
    if (n->args.i[ST_BN_RELU]) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; i++)
            for (int64_t c = 0; c < C; c++) {
                const float v = (x[i * C + c] - mean[c]) * scale[c] + bias[c];
                y[i * C + c] = !(v <= 0.0f) ? v : 0.0f; /* (NaN stays: activation.c's ReLU) */
            }
        return ST_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++)
        for (int64_t c = 0; c < C; c++)
            y[i * C + c] = (x[i * C + c] - mean[c]) * scale[c] + bias[c];
    return ST_OK;
}

static st_status batchnorm_backward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_BN_M], C = n->args.i[ST_BN_C], nb = n_blocks(M);
    const float *x = n->in[0]->data; /* (M, C) */
    const float *dy = n->out->grad;  /* (M, C) */
    /* fused ReLU: the gradient reaching the normalisation is dy where y > 0 */
    const float *y = n->args.i[ST_BN_RELU] ? n->out->data : NULL; /* (M, C) */
    float *dx = n->in[0]->grad;      /* (M, C) or NULL */
    const float *w = n->params[0]->data;
    float *dw = n->params[0]->grad, *db = n->params[1]->grad;
    const float *mean = n->saved, *rstd = n->saved + C;
    double *p1 = (double *)g->work, *p2 = p1 + nb * C; /* (nb, C) each */
    float *k_scale = (float *)(p2 + nb * C), *k_mdy = k_scale + C, *k_mdyx = k_scale + 2 * C; /* (C) each */
    /* sum dy and sum dy * xhat per channel */
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < nb; j++)
        stat_sums(x, dy, y, mean, rstd, M, C, j, p1 + j * C, p2 + j * C);
    combine(p1, p2, nb, C, p1, p2); /* sum dy, sum dy xhat */
    for (int64_t c = 0; c < C; c++) {
        if (db) db[c] += (float)p1[c];
        if (dw) dw[c] += (float)p2[c];
    }
    if (!dx) return ST_OK;
    /* Training: dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)), since the
     * batch statistics depend on x; eval: dx = w rstd dy. Synchronised, the
     * means are over the global micro-batch (every rank's rows). */
    const bool train = g->training;
    double count = (double)M;
    if (train && g->allreduce_sum) {
        double *buf = sync_buffer(g, M, C); /* (2C + 1): count, sum dy, sum dy xhat */
        char what[ST_NAME_MAX + 48];
        buf[0] = (double)M;
        memcpy(buf + 1, p1, (size_t)C * sizeof(double));
        memcpy(buf + 1 + C, p2, (size_t)C * sizeof(double));
        snprintf(what, sizeof what, "sync batch-norm %s: gradient sums", n->out->name);
        ST_TRY(g->allreduce_sum(g->allreduce_ctx, buf, 2 * C + 1, what));
        count = buf[0];
        p1 = buf + 1;
        p2 = buf + 1 + C;
    }
    for (int64_t c = 0; c < C; c++) {
        k_scale[c] = w[c] * rstd[c];
        k_mdy[c] = train ? (float)(p1[c] / count) : 0.0f;
        k_mdyx[c] = train ? (float)(p2[c] / count) : 0.0f;
    }
    const bool acc = n->in_acc[0];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++)
        for (int64_t c = 0; c < C; c++) {
            const float xhat = (x[i * C + c] - mean[c]) * rstd[c];
            const float d = y && y[i * C + c] <= 0.0f ? 0.0f : dy[i * C + c];
            const float v = k_scale[c] * (d - k_mdy[c] - xhat * k_mdyx[c]);
            dx[i * C + c] = acc ? dx[i * C + c] + v : v;
        }
    return ST_OK;
}

static const st_layer_ops batchnorm_cpu = {
    "batchnorm", batchnorm_forward, batchnorm_backward, NULL, false, false, false, false, 0};

static st_status add_batchnorm(st_graph *g, const char *name, st_tensor *x, float eps, float momentum, bool relu,
                               st_tensor **y) {
    if (x->dtype != ST_F32 || x->ndim < 2)
        return st_fail(ST_ERR_SHAPE, "batchnorm %s: needs a float input (..., C) with at least 2 dimensions",
                       name);
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return st_fail(ST_ERR_ARG, "batchnorm %s: eps %g must be positive and momentum %g in [0, 1]", name,
                       (double)eps, (double)momentum);
    const int64_t C = x->shape[x->ndim - 1];
    char pname[ST_NAME_MAX];
    st_tensor *params[4];
    snprintf(pname, sizeof pname, "%s.weight", name);
    ST_TRY(st_graph_param(g, pname, 1, &C, ST_INIT_ONES, 0.0f, false, &params[0]));
    snprintf(pname, sizeof pname, "%s.bias", name);
    ST_TRY(st_graph_param(g, pname, 1, &C, ST_INIT_ZEROS, 0.0f, false, &params[1]));
    snprintf(pname, sizeof pname, "%s.running_mean", name);
    ST_TRY(st_graph_buffer(g, pname, 1, &C, ST_INIT_ZEROS, &params[2]));
    snprintf(pname, sizeof pname, "%s.running_var", name);
    ST_TRY(st_graph_buffer(g, pname, 1, &C, ST_INIT_ONES, &params[3]));
    snprintf(pname, sizeof pname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, pname, x->ndim, x->shape, &out));
    st_node *node;
    ST_TRY(st_graph_node(g, &batchnorm_cpu, &x, 1, params, 4, out, &node));
    const int64_t M = x->count / C;
    node->args.i[ST_BN_M] = M;
    node->args.i[ST_BN_C] = C;
    node->args.f[ST_BN_F_EPS] = eps;
    node->args.f[ST_BN_F_MOMENTUM] = momentum;
    node->args.i[ST_BN_RELU] = relu;
    node->saved_count = 2 * C; /* mean, rstd */
    node->work_count = 2 * work_doubles(M, C);
    *y = out;
    return ST_OK;
}

st_status st_batchnorm(st_graph *g, const char *name, st_tensor *x, float eps, float momentum,
                       st_tensor **y) {
    return add_batchnorm(g, name, x, eps, momentum, false, y);
}

st_status st_batchnorm_relu(st_graph *g, const char *name, st_tensor *x, float eps, float momentum,
                            st_tensor **y) {
    return add_batchnorm(g, name, x, eps, momentum, true, y);
}
