/* Activation checkpointing (train.activation_checkpointing: blocks): the same
 * model and batch with and without it give the same loss, the same parameter
 * gradients and the same batch-norm running statistics, bit for bit (dropout
 * on, so its masks must be redrawn identically), and the activation memory
 * falls as the layout predicts: with L identical blocks each keeping I floats
 * to itself, checkpointing keeps one block's I instead of L of them, so the
 * activation arena shrinks by exactly (L - 1) * I (counted on graphs keeping
 * every activation apart, keep_acts: without checkpointing the activations
 * no backward reads share memory by their lives in forward, which takes
 * part of some blocks' I away, test_grad_lives.c); the activation
 * gradients, which share memory by their lives in backward either way, take
 * the same. */
#include <string.h>

#include "small_models.h"

static st_model *make(const char *type, tweak_fn tweak, const char *ckpt) {
    return sm_make(type, tweak, ckpt, false);
}

static void gpt2(st_config *c) {
    sm_gpt3(c);
    c->model.n_layer = 2;
}

static void same_bits(const char *label, tweak_fn tweak, const char *type, int L) {
    st_model *a = make(type, tweak, "off"), *b = make(type, tweak, "blocks");
    if (!a || !b) return;
    st_model_graph ga, gb;
    sm_step(a, &ga, 6);
    sm_step(b, &gb, 6);
    CHECK(gb.g.checkpointing && !ga.g.checkpointing, "%s: checkpointing is on only where asked", label);
    CHECK(ga.g.n_blocks == L && gb.g.n_blocks == L, "%s: %d blocks (have %d)", label, L, gb.g.n_blocks);
    CHECK(memcmp(ga.loss->data, gb.loss->data, sizeof(float)) == 0, "%s: loss %.9g vs %.9g", label,
          (double)ga.loss->data[0], (double)gb.loss->data[0]);
    const st_params *pa = &a->params, *pb = &b->params;
    CHECK(memcmp(pa->grad, pb->grad, (size_t)pa->count * sizeof(float)) == 0,
          "%s: parameter gradients are the same bits", label);
    CHECK(pa->buffer_count == pb->buffer_count &&
              (!pa->buffer_count || memcmp(pa->buffers, pb->buffers, (size_t)pa->buffer_count * 4) == 0),
          "%s: running statistics updated once, as without checkpointing", label);
    /* Every gradient is finite and not all zero (the comparison above is not vacuous). */
    int64_t nonzero = 0;
    for (int64_t i = 0; i < pa->count; i++) nonzero += pa->grad[i] != 0.0f;
    CHECK(nonzero > pa->count / 2, "%s: %lld of %lld gradients are non-zero", label, (long long)nonzero,
          (long long)pa->count);
    /* The memory model: (L - 1) blocks' private activations are gone; the
     * activation gradients share memory by their lives in backward, which
     * recomputing does not change (graph.c place_grads) */
    st_model *ka = sm_make(type, tweak, "off", true), *kb = sm_make(type, tweak, "blocks", true);
    st_model_graph gka, gkb;
    if (!ka || !kb) return;
    CHECK_OK(st_model_graph_build(ka, 6, &gka));
    CHECK_OK(st_model_graph_build(kb, 6, &gkb));
    const int64_t ia = gkb.g.region_act_count;
    CHECK(ia > 0 && ia == gb.g.region_act_count, "%s: blocks keep activations to themselves (%lld floats)",
          label, (long long)ia);
    CHECK(gka.g.act_count - gkb.g.act_count == (int64_t)(L - 1) * ia,
          "%s: activations fall by (L-1) x %lld = %lld floats, measured %lld (of %lld)", label, (long long)ia,
          (long long)((L - 1) * ia), (long long)(gka.g.act_count - gkb.g.act_count),
          (long long)gka.g.act_count);
    CHECK(ga.g.act_count <= gka.g.act_count && gb.g.act_count <= gkb.g.act_count,
          "%s: sharing never takes more than keeping apart", label);
    CHECK(ga.g.grad_count == gb.g.grad_count, "%s: activation gradients %lld floats, with checkpointing %lld",
          label, (long long)ga.g.grad_count, (long long)gb.g.grad_count);
    st_model_graph_free(&gka);
    st_model_graph_free(&gkb);
    st_model_free(ka);
    st_model_free(kb);
    printf("%s: activations %lld -> %lld floats, their gradients %lld -> %lld\n", label,
           (long long)ga.g.act_count, (long long)gb.g.act_count, (long long)ga.g.grad_count,
           (long long)gb.g.grad_count);
    st_model_graph_free(&ga);
    st_model_graph_free(&gb);
    st_model_free(a);
    st_model_free(b);
}

/* The per-block cost is the same whatever the depth: a 2-layer and a 3-layer
 * gpt without checkpointing differ by exactly one block (I + its output),
 * every activation kept apart. */
static void linear_in_depth(void) {
    st_model *a = sm_make("gpt", gpt2, "off", true), *b = sm_make("gpt", sm_gpt3, "off", true),
             *c = sm_make("gpt", sm_gpt3, "blocks", true);
    if (!a || !b || !c) return;
    st_model_graph ga, gb, gc;
    CHECK_OK(st_model_graph_build(a, 4, &ga));
    CHECK_OK(st_model_graph_build(b, 4, &gb));
    CHECK_OK(st_model_graph_build(c, 4, &gc));
    const int64_t per_block = gb.g.act_count - ga.g.act_count;
    const int64_t out = per_block - gc.g.region_act_count; /* the block's output, kept */
    CHECK(out > 0 && out < per_block, "gpt: a block's output (%lld floats) is part of its cost (%lld)",
          (long long)out, (long long)per_block);
    CHECK(gc.g.act_count == gb.g.act_count - 2 * gc.g.region_act_count,
          "gpt: 3 blocks with checkpointing = without, less 2 blocks' private activations");
    st_model_graph_free(&ga);
    st_model_graph_free(&gb);
    st_model_graph_free(&gc);
    st_model_free(a);
    st_model_free(b);
    st_model_free(c);
}

int main(void) {
    same_bits("gpt", sm_gpt3, "gpt", 3);
    same_bits("cnn", sm_cnn3, "cnn", 3);
    same_bits("mlp", sm_mlp3, "mlp", 3);
    linear_in_depth();
    return st_test_finish("checkpointing");
}
