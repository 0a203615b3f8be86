/* Text generation from a gpt: draw one token from logits (temperature,
 * top-k, top-p), and continue prompts a token at a time (`scaletrain
 * sample`).
 *
 * While the sequence fits model.block_size, each layer's keys and values
 * are kept for every position (a cache, 2 x n_layer x positions x n_embd
 * floats a sample, the positions the run needs up to block_size; without
 * room for it, the windows below): a token costs one position's forward,
 * its attention over the positions before it; the prompt goes through in
 * steps of 64 positions. Past block_size the window slides (the last
 * block_size tokens are the context, as in nanoGPT's sample.py) and every
 * position moves, so each token recomputes its window: a forward graph of
 * the context rounded up to a multiple of 8 tokens. Causal attention makes
 * the logits at position t depend on tokens 0..t alone, so the padding past
 * the sequence's end changes nothing.
 *
 * A model on a CUDA device does the same, its windows rounded up to a
 * multiple of 64 tokens (each length is a graph of its own), every
 * sample's last logits read back to the host, which draws the tokens. Its
 * one-position steps from the cache are captured once as a CUDA graph and
 * replayed (docs/cuda.md, "Sampling"): the token and its position copied in
 * and the logits out by the graph itself, from and into pinned memory, so
 * a token costs one launch and one wait instead of a launch per kernel.
 * What cannot be captured is said once (st_generate_stats) and the steps
 * launch their kernels one by one: the same tokens. */
#ifndef ST_MODEL_SAMPLE_H
#define ST_MODEL_SAMPLE_H

#include <stdatomic.h>

#include "core/rng.h"
#include "model.h"

typedef struct st_sample_params {
    double temperature; /* logits / temperature before the softmax; 0: the most likely token (greedy) */
    int64_t top_k;      /* draw among the k most likely tokens; 0: all */
    double top_p;       /* ... and among the fewest whose probabilities sum to top_p (nucleus); 1: all */
} st_sample_params;

/* One token drawn from logits (V of them) as p says, with rng; work holds V
 * floats and order V int32s (scratch). Ties go to the lower token. Returns
 * the token, or -1 when a logit is not finite (NaN, inf): nothing to draw
 * from. */
int64_t st_sample_token(const float *logits, int64_t V, const st_sample_params *p, st_rng *rng, float *work,
                        int32_t *order);

/* Each new token as it is drawn: sample b's token tok, the n-th of its
 * continuation (0-based). A status other than ST_OK ends the generation
 * with it. */
typedef st_status (*st_generate_emit)(void *ctx, int64_t b, int32_t tok, int64_t n);

typedef struct st_generate_opts {
    st_sample_params p;
    int64_t n_new;      /* tokens to add to each sample (at most) */
    int64_t n_samples;  /* continuations of the prompt drawn together, a batch of this many */
    uint64_t seed;      /* sample b draws from the stream (seed, b) */
    int64_t stop_token; /* a sample that draws it ends there (the token is emitted); -1: none */
    st_generate_emit emit;
    void *ctx;
    atomic_int *stop; /* non-zero (a signal): end after the current token, ST_ERR_INTERRUPTED */
    bool no_cache;    /* every token by the windowed graph, the cache of keys and values left out (tests) */
    const char *nomem_advice; /* ends the message when a device has no room for a window ("draw fewer ..."):
                                 the caller's remedies; NULL: none */
    bool no_graph;            /* on a device: each cached step's kernels launched one by one, none replayed */
    struct st_generate_stats *stats; /* NULL, or filled with what the generation did */
} st_generate_opts;

/* What st_generate did (opts.stats). */
typedef struct st_generate_stats {
    int64_t cached_steps;   /* one-position steps through the cache */
    int64_t replayed_steps; /* ... of them, replays of the captured step (a device's CUDA graph) */
    char graph_note[512];   /* why the step could not be captured ("" when it was, or was not tried) */
} st_generate_stats;

/* The settings a model that generates is made with (c's other settings
 * kept): fp32 and its logits kept (model.fused_head off), which
 * st_generate reads, and scaletrain's attention kernels on a device
 * (cuDNN's take 16-bit tensors). */
void st_generate_config(st_config *c);

/* Continue prompt (n_prompt tokens, each below the model's vocabulary, at
 * least one) n_samples times. out (n_samples x (n_prompt + n_new)) gets
 * each sample's prompt and continuation, lens each one's length. m must be a
 * gpt (on the host or a device) whose output layer keeps its logits
 * (model.fused_head off). */
st_status st_generate(st_model *m, const int32_t *prompt, int64_t n_prompt, const st_generate_opts *o,
                      int32_t *out, int64_t *lens);

#endif
