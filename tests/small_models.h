/* Small models for the tests of memory layout and recomputation
 * (test_grad_lives.c, test_checkpointing.c): a 3-block gpt, cnn and mlp
 * with dropout, made with a given train.activation_checkpointing, and one
 * training step on a seeded batch that fills the activation arena's
 * transient section with NaN between forward and backward (what no
 * backward may read, graph.c place_transients). */
#ifndef ST_TESTS_SMALL_MODELS_H
#define ST_TESTS_SMALL_MODELS_H

#include <math.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "model/model.h"

typedef void (*tweak_fn)(st_config *);

/* `keep`: every activation and gradient kept apart (st_model keep_acts). */
static inline st_model *sm_make(const char *type, tweak_fn tweak, const char *ckpt, bool keep) {
    st_config c;
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "%s", type);
    snprintf(c.train.activation_checkpointing, sizeof c.train.activation_checkpointing, "%s", ckpt);
    if (tweak) tweak(&c);
    st_model_input in = {.height = 12, .width = 12, .channels = 1, .num_classes = 10};
    if (strcmp(type, "gpt") == 0) {
        in.vocab_size = c.model.vocab_size;
        in.seq_len = c.model.block_size;
    }
    st_model *m = NULL;
    CHECK_OK(st_model_create(&c, &in, &m));
    if (m) {
        m->keep_acts = keep;
        CHECK_OK(st_model_init_weights(m, 7));
    }
    return m;
}

/* (its head the plain linear and loss, which auto would not take at this
 * shape: sm_gpt3_fused is the fused one) */
static inline void sm_gpt3(st_config *c) {
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "off");
    c->model.n_layer = 3;
    c->model.n_head = 2;
    c->model.n_embd = 32;
    c->model.vocab_size = 50;
    c->model.block_size = 16;
    c->model.dropout = 0.1;
}
/* the same gpt with its output layer and loss fused (linear_ce, no logits kept) */
static inline void sm_gpt3_fused(st_config *c) {
    sm_gpt3(c);
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "on");
}
static inline void sm_cnn3(st_config *c) {
    c->model.channels.n = 3;
    c->model.channels.v[0] = c->model.channels.v[1] = c->model.channels.v[2] = 8;
    c->model.pool.n = 3;
    c->model.pool.v[0] = c->model.pool.v[1] = c->model.pool.v[2] = 0;
    c->model.dropout = 0.2;
}
static inline void sm_mlp3(st_config *c) {
    c->model.hidden.n = 3;
    c->model.hidden.v[0] = c->model.hidden.v[1] = c->model.hidden.v[2] = 24;
    c->model.dropout = 0.3;
}

/* Build the graph at batch B, fill the batch, run one training forward and
 * backward; between them, NaN over the transient section. */
static inline void sm_step(st_model *m, st_model_graph *mg, int64_t B) {
    CHECK_OK(st_model_graph_build(m, B, mg));
    st_rng r = st_rng_make(3, 1);
    if (mg->x->dtype == ST_F32)
        for (int64_t i = 0; i < mg->x->count; i++)
            mg->x->data[i] = 2.0f * st_rng_uniform(&r) - 1.0f;
    else
        for (int64_t i = 0; i < mg->x->count; i++)
            mg->x->idata[i] = (int32_t)(st_rng_next(&r) % 50);
    const int64_t classes = mg->logits ? mg->logits->shape[mg->logits->ndim - 1] : m->in.vocab_size;
    for (int64_t i = 0; i < mg->y->count; i++)
        mg->y->idata[i] = (int32_t)(st_rng_next(&r) % (uint64_t)classes);
    mg->g.training = true;
    mg->g.dropout_seed = 99;
    CHECK_OK(st_graph_forward(&mg->g));
    for (int64_t i = mg->g.act_count - mg->g.transient_act_count; i < mg->g.act_count; i++)
        mg->g.act_arena[i] = NAN;
    CHECK_OK(st_graph_backward(&mg->g, 1.0f));
}

#endif
