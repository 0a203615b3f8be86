/* Where each layer keeps its hyper-parameters in st_node_args (i[] and f[]).
 *
 * Shared by a layer's CPU reference (src/layers/) and its CUDA twin
 * (src/cuda/), which read the same node built by the same builder. */
#ifndef ST_LAYERS_ARGS_H
#define ST_LAYERS_ARGS_H

/* linear: x (M, K) -> y (M, N); weight stored (N, K), or (K, N) when in_out */
enum { ST_LINEAR_M, ST_LINEAR_K, ST_LINEAR_N, ST_LINEAR_IN_OUT, ST_LINEAR_BIAS };
/* embedding: N indices -> (N, C) rows of a (vocab, C) table */
enum { ST_EMBEDDING_N, ST_EMBEDDING_C, ST_EMBEDDING_VOCAB };
/* pos_embedding: x (B, T, C) + weight[0:T] */
enum { ST_POSEMB_B, ST_POSEMB_T, ST_POSEMB_C };
/* layernorm: (ROWS, C) rows; f[0] = eps */
enum { ST_LAYERNORM_ROWS, ST_LAYERNORM_C };
enum { ST_LAYERNORM_F_EPS };
/* dropout: f[0] = p */
enum { ST_DROPOUT_F_P };
/* attention: heads; NTHREADS is the CPU's per-thread scratch count */
enum { ST_ATTN_NHEAD, ST_ATTN_NTHREADS };
/* attention_cached: qkv (B, N, 3C); LAYER: its layer's slot in st_graph.kv;
 * NTHREADS: the CPU's threads (a row of scores each in the work scratch) */
enum { ST_ATTNC_B, ST_ATTNC_N, ST_ATTNC_C, ST_ATTNC_NHEAD, ST_ATTNC_LAYER, ST_ATTNC_NTHREADS };
/* last_row: x (B, N, C) -> (B, 1, C) */
enum { ST_LASTROW_B, ST_LASTROW_N, ST_LASTROW_C };
/* batchnorm (and fused batchnorm + relu): x (M, C); f: eps, momentum */
enum { ST_BN_M, ST_BN_C, ST_BN_RELU };
/* A batch-norm trained on one value per channel (its input one sample of a
 * 1x1 map, on one rank): the error naming the shape and the settings that
 * give it more (batchnorm.c; the CUDA twin's too). */
struct st_node;
int st_batchnorm_too_few(const struct st_node *n); /* an st_status */
enum { ST_BN_F_EPS, ST_BN_F_MOMENTUM };
/* conv2d: square kernel; DIRECT, WINO and NT choose the CPU's algorithm and threads */
enum { ST_CONV_K, ST_CONV_STRIDE, ST_CONV_PAD, ST_CONV_BIAS, ST_CONV_DIRECT, ST_CONV_NT, ST_CONV_WINO };
/* maxpool2d: square window */
enum { ST_POOL_K, ST_POOL_STRIDE };
/* flatten: IMAGE set for (B, H, W, C) input, emitted in (C, H, W) order */
enum { ST_FLATTEN_B, ST_FLATTEN_H, ST_FLATTEN_W, ST_FLATTEN_C, ST_FLATTEN_IMAGE };
/* softmax_ce: logits (ROWS, V), IGNORE = the ignored target index */
enum { ST_CE_ROWS, ST_CE_V, ST_CE_IGNORE };
/* linear_ce: h (ROWS, C), weight (V, C); VP = V padded to 64, the chunk's row
 * stride and dW's saved rows; CHUNK rows of logits at a time in CHUNK_FLOATS
 * floats of the work scratch (then ROWS doubles of row losses, from the next
 * aligned float on a device the weight's zero-padded copy (VP, C));
 * GRADS_MADE: the last forward was a training one (run state, set by forward) */
enum {
    ST_LCE_ROWS,
    ST_LCE_C,
    ST_LCE_V,
    ST_LCE_VP,
    ST_LCE_CHUNK,
    ST_LCE_CHUNK_FLOATS,
    ST_LCE_IGNORE,
    ST_LCE_GRADS_MADE
};
/* linear_ce's (softmax - onehot) is stored times this in an fp16 run (its
 * values in [-1, 1] would fall below fp16's subnormals, 6e-8, and lose
 * precision below 6e-5, where a large vocabulary's probabilities sit; the
 * plain pair's logits gradient is scaled by the loss scale before it is
 * rounded), and backward's scale is divided by it: 2^15, exact both ways,
 * keeps probabilities down to 2e-12, and [-32768, 32768] is inside fp16's
 * range (65504). 1 otherwise. */
#define ST_LCE_FP16_PRESCALE 32768.0f
#define ST_LCE_PRESCALE(prec) ((prec) == ST_PREC_FP16 ? ST_LCE_FP16_PRESCALE : 1.0f)
/* linear_ce's saved state (macros: the users have st_node and
 * st_align_floats): the count of valid targets (an int32's bits) in the
 * first aligned slot, then the fp32 dh (ROWS, C) and dW (VP, C) a training
 * forward makes; a forward-only graph's node saves the count alone. */
#define ST_LCE_SAVED_COUNT(n) ((n)->saved)
#define ST_LCE_SAVED_DH(n) ((n)->saved + ST_ALIGN_FLOATS)
#define ST_LCE_SAVED_DW(n)                                                                                   \
    (ST_LCE_SAVED_DH(n) + st_align_floats((n)->args.i[ST_LCE_ROWS] * (n)->args.i[ST_LCE_C]))
/* mse: N elements */
enum { ST_MSE_N };

#endif
