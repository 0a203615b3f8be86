/* Layer cases of the PyTorch parity driver: each builds one layer on a fresh
 * graph from the shapes and "args" of the input file (see parity_driver.h) and
 * returns the tensor whose value and gradients are compared. Inputs that need
 * a gradient are parameters named as in torch_parity.py ("x", "a", "qkv", ...).
 * Layer parameters are named "<layer>.weight" etc. as the builders make them. */
#ifndef ST_TESTS_PARITY_LAYERS_H
#define ST_TESTS_PARITY_LAYERS_H

#include "layers/layers.h"
#include "parity_driver.h"

typedef st_status (*pd_layer_fn)(pd_ctx *c, st_graph *g, st_tensor **y);

/* args: out_features, in_out (GPT-2 Conv1D layout), bias, tied (weight "w" (N, K)) */
static st_status pl_linear(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x, *w;
    ST_TRY(pd_param_like(c, g, "x", &x));
    if (pd_arg(c, 3)) {
        ST_TRY(pd_param_like(c, g, "w", &w));
        return st_linear_tied(g, "lin", x, w, y);
    }
    st_linear_opts o = {.bias = pd_arg(c, 2) != 0, .in_out = pd_arg(c, 1) != 0, .init = ST_INIT_UNIFORM};
    return st_linear(g, "lin", x, pd_arg(c, 0), &o, y);
}

/* idx (B, T) I32; args: vocab, dim */
static st_status pl_embedding(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *idx, *w;
    ST_TRY(pd_input_like(c, g, "idx", ST_I32, &idx));
    return st_embedding(g, "emb", idx, pd_arg(c, 0), pd_arg(c, 1), 0.02f, y, &w);
}

/* x (B, T, C); args: max_len */
static st_status pl_pos_embedding(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_pos_embedding(g, "pos", x, pd_arg(c, 0), 0.02f, y);
}

static st_status pl_layernorm(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_layernorm(g, "ln", x, 1e-5f, y);
}

static st_status pl_gelu(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_gelu(g, "gelu", x, y);
}

static st_status pl_relu(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_relu(g, "relu", x, y);
}

static st_status pl_add(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *a, *b;
    ST_TRY(pd_param_like(c, g, "a", &a));
    ST_TRY(pd_param_like(c, g, "b", &b));
    return st_add(g, "add", a, b, y);
}

/* args: p in percent, training. Identity either way: p = 0 in training, or
 * any p in eval (random masks cannot match torch's generator). */
static st_status pl_dropout(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    g->training = pd_arg(c, 1) != 0;
    g->dropout_seed = 1234;
    return st_dropout(g, "drop", x, (float)pd_arg(c, 0) / 100.0f, y);
}

/* qkv (B, T, 3C); args: n_head */
static st_status pl_attention(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *qkv;
    ST_TRY(pd_param_like(c, g, "qkv", &qkv));
    return st_attention(g, "attn", qkv, pd_arg(c, 0), y);
}

/* x (B, H, W, Cin); args: out_channels, kernel, stride, pad, bias */
static st_status pl_conv2d(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_conv2d(g, "conv", x, pd_arg(c, 0), pd_arg(c, 1), pd_arg(c, 2), pd_arg(c, 3), pd_arg(c, 4) != 0,
                     y);
}

/* x (B, H, W, C); args: kernel, stride */
static st_status pl_maxpool2d(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_maxpool2d(g, "pool", x, pd_arg(c, 0), pd_arg(c, 1), y);
}

/* x (B, H, W, C) or (B, C); args: training. eps 1e-5, momentum 0.1 as PyTorch. */
static st_status pl_batchnorm(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    g->training = pd_arg(c, 0) != 0;
    return st_batchnorm(g, "bn", x, 1e-5f, 0.1f, y);
}

static st_status pl_flatten(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *x;
    ST_TRY(pd_param_like(c, g, "x", &x));
    return st_flatten(g, "flatten", x, y);
}

/* logits (..., V), targets I32 (...) with some ST_IGNORE_INDEX */
static st_status pl_softmax_ce(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *logits, *targets;
    ST_TRY(pd_param_like(c, g, "logits", &logits));
    ST_TRY(pd_input_like(c, g, "targets", ST_I32, &targets));
    return st_softmax_ce(g, "ce", logits, targets, ST_IGNORE_INDEX, y);
}

/* h (..., C), w (V, C), targets I32 (...) with some ST_IGNORE_INDEX: the
 * fused output layer and loss, in training (its forward makes the gradients) */
static st_status pl_linear_ce(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *h, *w, *targets;
    ST_TRY(pd_param_like(c, g, "h", &h));
    ST_TRY(pd_param_like(c, g, "w", &w));
    ST_TRY(pd_input_like(c, g, "targets", ST_I32, &targets));
    g->training = true;
    return st_linear_ce(g, "lce", h, w, targets, ST_IGNORE_INDEX, y);
}

static st_status pl_mse(pd_ctx *c, st_graph *g, st_tensor **y) {
    st_tensor *pred, *target;
    ST_TRY(pd_param_like(c, g, "pred", &pred));
    ST_TRY(pd_input_like(c, g, "target", ST_F32, &target));
    return st_mse(g, "mse", pred, target, y);
}

/* Build one layer case on a fresh graph in precision `prec` (bf16/fp16: the
 * graph rounds parameters, inputs and outputs as in training), run it and
 * emit the results. */
static st_status pd_layer_case_prec(pd_ctx *c, pd_layer_fn build, st_precision prec) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    st_tensor *y = NULL;
    st_status s;
    ST_GOTO(build(c, &g, &y));
    ST_GOTO(st_graph_finalize(&g));
    ST_GOTO(st_params_set_precision(&p, prec));
    ST_GOTO(pd_run_layer(c, &g, y));
fail:
    st_graph_free(&g);
    st_params_free(&p);
    return s;
}

static st_status pd_layer_case(pd_ctx *c, pd_layer_fn build) {
    return pd_layer_case_prec(c, build, ST_PREC_FP32);
}

#endif
