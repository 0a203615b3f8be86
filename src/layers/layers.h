/* Layer builders: each adds one node (and its parameters) to a graph.
 *
 * One file per layer under src/layers/, each holding the builder, the CPU
 * forward and backward, and the CPU ops table. Shapes are validated here, at
 * build time, so forward and backward never see a bad shape. Parameter names
 * are "<name>.weight", "<name>.bias" etc., the names checkpoints use.
 *
 * Image tensors are NHWC: (B, H, W, C). Convolution weights keep PyTorch's
 * (Cout, Cin, kH, kW) layout and flatten emits PyTorch's (C, H, W) order, so
 * CNN checkpoints are interchangeable with PyTorch's. */
#ifndef ST_LAYERS_H
#define ST_LAYERS_H

#include <string.h>

#include "../model/graph.h"

/* The identity's backward: dx = dy, or dx += dy when the input's gradient
 * accumulates (node->in_acc). Shared by add, dropout in eval and flatten.
 * Nothing when dx is dy's memory (graph.c alias_passes; never with acc). */
static inline void st_grad_pass(float *dx, const float *dy, int64_t n, bool acc) {
    if (dx == dy && !acc) return;
    if (!acc) {
        memcpy(dx, dy, (size_t)n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
}

/* The sum of a[j] * b[j] (b NULL: of a[j]) in 16 interleaved partial sums,
 * an order the compiler can vectorize without -ffast-math (attention's
 * rows, a linear layer's products with a vector) */
static inline float st_dot16(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++)
            acc[l] += a[j + l] * (b ? b[j + l] : 1.0f);
    float s = 0.0f;
    for (; j < n; j++)
        s += a[j] * (b ? b[j] : 1.0f);
    for (int l = 0; l < 16; l++)
        s += acc[l];
    return s;
}

/* Elements of a forward's element- or row-wise loop below which it runs on
 * one thread: a parallel region's start and end (waking the team, tens of
 * microseconds with OMP_WAIT_POLICY=PASSIVE) cost more than such a loop
 * (cached decoding's rows, a position a step). The rows are independent:
 * the same results either way. */
#define ST_OMP_MIN_WORK 32768

/* Attention's query/key block (attention.c): the causal products skip the
 * masked half in blocks of this many positions; the cost model (src/hw)
 * counts the same blocks. */
#define ST_ATTENTION_BLOCK 64

/* PyTorch's default for cross-entropy's ignore_index. */
#define ST_IGNORE_INDEX (-100)

typedef struct st_linear_opts {
    bool bias;
    bool in_out;      /* weight stored (in, out), as GPT-2's Conv1D; default (out, in) as nn.Linear */
    st_init init;     /* ST_INIT_UNIFORM with init_scale 0 means PyTorch's default U(+-1/sqrt(in)) */
    float init_scale; /* weight scale; the bias is zero unless init is the PyTorch default */
} st_linear_opts;

/* x (..., K) -> y (..., N) = x W^T + b */
st_status st_linear(st_graph *g, const char *name, st_tensor *x, int64_t out_features,
                    const st_linear_opts *opts, st_tensor **y);
/* x (..., K) -> y (..., N) = x W^T with an existing weight (N, K): tied embeddings. */
st_status st_linear_tied(st_graph *g, const char *name, st_tensor *x, st_tensor *weight,
                         st_tensor **y);
/* idx (B, T) I32 -> y (B, T, C); weight (vocab, C) ~ N(0, init_std^2) */
st_status st_embedding(st_graph *g, const char *name, st_tensor *idx, int64_t vocab, int64_t dim,
                       float init_std, st_tensor **y, st_tensor **weight);
/* x (B, T, C) -> y = x + weight[pos:pos+T]; weight (max_len, C) ~ N(0, init_std^2),
 * pos = g->pos at forward (0 but in cached decoding) */
st_status st_pos_embedding(st_graph *g, const char *name, st_tensor *x, int64_t max_len,
                           float init_std, st_tensor **y);
/* ST_OK when n's rows' positions (g->pos onwards) are within its weight's
 * (both backends' forward check it) */
st_status st_pos_embedding_check(const st_node *n, const st_graph *g);
/* x (..., C) -> y (..., C), normalised over C; weight=1, bias=0 */
st_status st_layernorm(st_graph *g, const char *name, st_tensor *x, float eps, st_tensor **y);
/* GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in section 2) */
st_status st_gelu(st_graph *g, const char *name, st_tensor *x, st_tensor **y);
st_status st_relu(st_graph *g, const char *name, st_tensor *x, st_tensor **y);
/* y = a + b, same shapes (residual connections) */
st_status st_add(st_graph *g, const char *name, st_tensor *a, st_tensor *b, st_tensor **y);
/* Inverted dropout with probability p in training, identity in eval. The mask
 * is drawn from (g->dropout_seed, node id, the element's index in the step's
 * batch: g->dropout_micro x the node's count + i), so backward recomputes it
 * and a sample's mask is the same however the batch is split into
 * micro-batches and ranks. */
st_status st_dropout(st_graph *g, const char *name, st_tensor *x, float p, st_tensor **y);
/* Causal multi-head self-attention core: qkv (B, T, 3C) -> y (B, T, C), heads
 * of C/n_head channels, q, k, v concatenated along the last dim as in GPT-2. */
st_status st_attention(st_graph *g, const char *name, st_tensor *qkv, int64_t n_head,
                       st_tensor **y);
/* Attention over a cache (cached decoding, forward alone): qkv (B, n, 3C) ->
 * y (B, n, C) for positions g->pos .. g->pos + n - 1 of g->kv's B
 * sequences; forward writes the rows' keys and values into layer `layer`'s
 * cache there, then row j attends to positions 0 .. g->pos + j. */
st_status st_attention_cached(st_graph *g, const char *name, st_tensor *qkv, int64_t n_head, int64_t layer,
                              st_tensor **y);
/* x (B, n, C) -> y (B, 1, C), each sequence's last row (cached decoding, forward alone) */
st_status st_last_row(st_graph *g, const char *name, st_tensor *x, st_tensor **y);
/* ST_OK when n (an attention_cached node) fits its graph's cache at g->pos */
st_status st_attention_cached_check(const st_node *n, const st_graph *g);
/* x (B, H, W, Cin) -> y (B, Ho, Wo, Cout); weight (Cout, Cin, k, k), bias (Cout) */
st_status st_conv2d(st_graph *g, const char *name, st_tensor *x, int64_t out_channels,
                    int64_t kernel, int64_t stride, int64_t pad, bool bias, st_tensor **y);
/* x (B, H, W, C) -> y (B, Ho, Wo, C), max over k x k windows */
st_status st_maxpool2d(st_graph *g, const char *name, st_tensor *x, int64_t kernel,
                       int64_t stride, st_tensor **y);
/* Batch norm over the last dim C of x (..., C) (NHWC images or (B, C)).
 * Training: batch statistics, running stats updated with `momentum` (unbiased
 * variance, as PyTorch). Eval (g->training false): running stats. */
st_status st_batchnorm(st_graph *g, const char *name, st_tensor *x, float eps, float momentum,
                       st_tensor **y);
/* relu(batchnorm(x)) in one node: one pass over the activation instead of
 * three in each direction. Same parameter names as st_batchnorm. */
st_status st_batchnorm_relu(st_graph *g, const char *name, st_tensor *x, float eps, float momentum,
                            st_tensor **y);
/* x (B, H, W, C) -> y (B, C*H*W) in (C, H, W) order; any other x (B, ...) -> (B, prod) */
st_status st_flatten(st_graph *g, const char *name, st_tensor *x, st_tensor **y);
/* Fused log-softmax + negative log-likelihood: logits (..., V), targets I32 (...)
 * -> loss (1), the mean over targets != ignore_index. Sets g->loss. */
st_status st_softmax_ce(st_graph *g, const char *name, st_tensor *logits, st_tensor *targets,
                        int32_t ignore_index, st_tensor **loss);
/* A language model's output layer and cross-entropy in one (linear_ce.c):
 * h (..., C), weight (V, C) (the tied embedding, no bias), targets I32 (...)
 * -> loss (1), the mean over targets != ignore_index of the cross-entropy
 * of h W^T; the logits are made a chunk of rows at a time and never kept.
 * Sets g->loss. */
st_status st_linear_ce(st_graph *g, const char *name, st_tensor *h, st_tensor *weight, st_tensor *targets,
                       int32_t ignore_index, st_tensor **loss);
/* ST_OK when n's last forward made its gradients (g->training was set),
 * else an error saying so: linear_ce's backward, CPU and CUDA, checks it. */
st_status st_linear_ce_check_grads(const st_node *n);
/* Whether st_linear_ce on R rows of C into V classes holds less memory in g
 * (its dh, dW and one chunk) than st_linear_tied + st_softmax_ce (the
 * logits, with their gradient over them). */
bool st_linear_ce_saves_memory(const st_graph *g, int64_t R, int64_t C, int64_t V);
/* Mean squared error: pred (...), target F32 (...) same shape -> loss (1). Sets g->loss. */
st_status st_mse(st_graph *g, const char *name, st_tensor *pred, st_tensor *target,
                 st_tensor **loss);

#endif
