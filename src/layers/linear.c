/* Linear layer: y = x W^T + b, through OpenBLAS sgemm.
 * Weight layout (N, K) as nn.Linear, or (K, N) as GPT-2's Conv1D (in_out). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "args.h"
#include "core/blas.h"
#include "layers.h"

/* Rows up to which forward takes each row's product with the weight alone
 * (gemv_row): sgemm packs the whole weight for every call, which at one
 * row (cached decoding's token) costs more than the product itself. */
#define ST_LINEAR_GEMV_ROWS 4

/* Columns of the bias gradient one thread sums in backward. */
#define LINEAR_DB_COLS 64

/* y (N) = x (K) W, or += with acc; W (K, N) when in_out, else (N, K) (x W^T).
 * Blocks of GEMV_COLS outputs, each summed over k in order by one thread
 * (the same bits for any thread count), on every thread where the weight
 * is large enough to pay for waking them: not OpenBLAS's sgemv, which
 * wakes its threads for a weight of 64 K elements (the small gpt's tokens
 * 4 times slower on 2 threads than on one). */
enum { GEMV_COLS = 256, GEMV_PARALLEL = 1 << 19 };
static void gemv_row(const float *x, const float *w, int64_t K, int64_t N, bool in_out, bool acc, float *y) {
    const int64_t nblk = (N + GEMV_COLS - 1) / GEMV_COLS;
#pragma omp parallel for schedule(static) if (K * N >= GEMV_PARALLEL)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t j0 = b * GEMV_COLS, nj = N - j0 < GEMV_COLS ? N - j0 : GEMV_COLS;
        float *yb = y + j0;
        if (!acc)
            for (int64_t j = 0; j < nj; j++)
                yb[j] = 0.0f;
        if (in_out) { /* rows of W: y += x[k] W[k, j0..] */
            for (int64_t k = 0; k < K; k++) {
                const float xk = x[k], *wk = w + k * N + j0;
                for (int64_t j = 0; j < nj; j++)
                    yb[j] += xk * wk[j];
            }
        } else { /* y[j] += x . W[j, :] */
            for (int64_t j = 0; j < nj; j++)
                yb[j] += st_dot16(x, w + (j0 + j) * K, K);
        }
    }
}

static st_status linear_forward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const float *x = n->in[0]->data;     /* (M, K) */
    const float *w = n->params[0]->data; /* (N, K) or (K, N) */
    float *y = n->out->data;             /* (M, N) */
    float beta = 0.0f;
    if (n->args.i[ST_LINEAR_BIAS]) {
        const float *b = n->params[1]->data; /* (N) */
#pragma omp parallel for schedule(static) if (M * N >= ST_OMP_MIN_WORK)
        for (int64_t i = 0; i < M; i++)
            memcpy(y + i * N, b, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    if (M <= ST_LINEAR_GEMV_ROWS) { /* a few rows (cached decoding's): a product with a vector each */
        for (int64_t i = 0; i < M; i++)
            gemv_row(x + i * K, w, K, N, n->args.i[ST_LINEAR_IN_OUT] != 0, beta != 0.0f, y + i * N);
    } else if (n->args.i[ST_LINEAR_IN_OUT]) {
        st_sgemm(CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, w, (int)N, beta, y,
                 (int)N);
    } else {
        st_sgemm(CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, w, (int)K, beta, y,
                 (int)N);
    }
    return ST_OK;
}

static st_status linear_backward(st_node *n, st_graph *g) {
    const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
    const float *x = n->in[0]->data; /* (M, K) */
    const float *w = n->params[0]->data;
    const float *dy = n->out->grad; /* (M, N) */
    float *dw = n->params[0]->grad;
    const bool io = n->args.i[ST_LINEAR_IN_OUT];
    float *dx = n->in[0]->grad;
    const float beta = n->in_acc[0] ? 1.0f : 0.0f;
    /* dW and dx: two independent products, at once where that pays */
    st_gemm pw, px;
    if (io) { /* dW (K, N) += x^T dy; dx (M, K) = dy W^T, W (K, N) */
        pw = st_gemm_of(CblasTrans, CblasNoTrans, (int)K, (int)N, (int)M, 1.0f, x, (int)K, dy, (int)N, 1.0f,
                        dw, (int)N);
        px = st_gemm_of(CblasNoTrans, CblasTrans, (int)M, (int)K, (int)N, 1.0f, dy, (int)N, w, (int)N, beta,
                        dx, (int)K);
    } else { /* dW (N, K) += dy^T x; dx (M, K) = dy W, W (N, K) */
        pw = st_gemm_of(CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, dy, (int)N, x, (int)K, 1.0f,
                        dw, (int)K);
        px = st_gemm_of(CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, dy, (int)N, w, (int)K, beta,
                        dx, (int)K);
    }
    st_sgemm_two(dw ? &pw : NULL, dx ? &px : NULL);
    if (n->args.i[ST_LINEAR_BIAS] && n->params[1]->grad) {
        float *db = n->params[1]->grad; /* (N) */
        /* Each thread owns a block of columns and walks the rows in order:
         * the same sums whatever the thread count, vectorized along j, in
         * locals (db aliases nothing, but the compiler cannot know it and
         * loaded and stored it every row; 1.2-1.6x at the small gpt's
         * shapes). */
        const int64_t nblk = (N + LINEAR_DB_COLS - 1) / LINEAR_DB_COLS;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < nblk; k++) {
            const int64_t j0 = k * LINEAR_DB_COLS, nc = j0 + LINEAR_DB_COLS < N ? LINEAR_DB_COLS : N - j0;
            float acc[LINEAR_DB_COLS];
            memcpy(acc, db + j0, (size_t)nc * sizeof(float));
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < nc; j++)
                    acc[j] += dy[i * N + j0 + j];
            memcpy(db + j0, acc, (size_t)nc * sizeof(float));
        }
    }
    return ST_OK;
}

static const st_layer_ops linear_cpu = {"linear", linear_forward, linear_backward, NULL, false,
                                        true,     false,          false,           0};

static st_status add_linear(st_graph *g, const char *name, st_tensor *x, st_tensor *w, st_tensor *b,
                            int64_t N, bool in_out, st_tensor **y) {
    const int64_t K = x->shape[x->ndim - 1];
    /* BLAS takes int dimensions (cast below): past them a product would wrap (the others refuse alike) */
    if (x->count / K > INT_MAX || K > INT_MAX || N > INT_MAX)
        return st_fail(
            ST_ERR_SHAPE,
            "linear %s: %lld rows of %lld inputs to %lld outputs: past the %d a matrix product takes in "
            "a dimension; lower train.micro_batch_size",
            name, (long long)(x->count / K), (long long)K, (long long)N, INT_MAX);
    int64_t shape[ST_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    char oname[ST_NAME_MAX];
    snprintf(oname, sizeof oname, "%s.out", name);
    st_tensor *out;
    ST_TRY(st_graph_act(g, oname, x->ndim, shape, &out));
    st_tensor *params[2] = {w, b};
    st_node *node;
    ST_TRY(st_graph_node(g, &linear_cpu, &x, 1, params, b ? 2 : 1, out, &node));
    node->args.i[ST_LINEAR_M] = x->count / K;
    node->args.i[ST_LINEAR_K] = K;
    node->args.i[ST_LINEAR_N] = N;
    node->args.i[ST_LINEAR_IN_OUT] = in_out;
    node->args.i[ST_LINEAR_BIAS] = b != NULL;
    *y = out;
    return ST_OK;
}

st_status st_linear(st_graph *g, const char *name, st_tensor *x, int64_t out_features,
                    const st_linear_opts *opts, st_tensor **y) {
    if (x->dtype != ST_F32 || out_features <= 0)
        return st_fail(ST_ERR_SHAPE, "linear %s: needs a float input and a positive output size", name);
    const int64_t K = x->shape[x->ndim - 1], N = out_features;
    char pname[ST_NAME_MAX];
    st_init init = opts->init;
    float scale = opts->init_scale;
    bool torch_default = init == ST_INIT_UNIFORM && scale == 0.0f;
    if (torch_default) scale = 1.0f / sqrtf((float)K);
    int64_t wshape[2] = {opts->in_out ? K : N, opts->in_out ? N : K};
    st_tensor *w, *b = NULL;
    snprintf(pname, sizeof pname, "%s.weight", name);
    ST_TRY(st_graph_param(g, pname, 2, wshape, init, scale, true, &w));
    w->transposed_store = opts->in_out;
    if (opts->bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        ST_TRY(st_graph_param(g, pname, 1, &N, torch_default ? ST_INIT_UNIFORM : ST_INIT_ZEROS,
                              torch_default ? scale : 0.0f, false, &b));
    }
    return add_linear(g, name, x, w, b, N, opts->in_out, y);
}

st_status st_linear_tied(st_graph *g, const char *name, st_tensor *x, st_tensor *weight, st_tensor **y) {
    if (weight->ndim != 2 || weight->shape[1] != x->shape[x->ndim - 1])
        return st_fail(ST_ERR_SHAPE, "linear %s: tied weight %s has %lld columns, input has %lld", name,
                       weight->name, (long long)weight->shape[weight->ndim - 1],
                       (long long)x->shape[x->ndim - 1]);
    return add_linear(g, name, x, weight, NULL, weight->shape[0], false, y);
}
