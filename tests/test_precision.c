/* Where the graph rounds in bf16 and fp16 (docs/precision.md), on a tiny GPT
 * and a cnn (batch-norm, max-pool, conv): after forward and backward
 *   - the master weights are untouched fp32 and the compute copy is the
 *     masters rounded; the tensors point at the masters again;
 *   - every activation (graph inputs, every node's output but the loss) is a
 *     16-bit value, and so is every activation gradient;
 *   - parameter gradients are fp32 (some are not 16-bit values);
 *   - the loss matches fp32's to 16-bit accuracy;
 *   - after st_params_touch (an optimizer step) the copy is refreshed.
 * The rounding itself is checked against PyTorch by tests/py/test_half_torch.py. */
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "model/model.h"

static void tiny_gpt(st_config *c) {
    snprintf(c->model.type, sizeof c->model.type, "gpt");
    c->model.n_layer = 2;
    c->model.n_head = 2;
    c->model.n_embd = 32;
    c->model.vocab_size = 64;
    c->model.block_size = 16;
}

static void small_cnn(st_config *c) {
    snprintf(c->model.type, sizeof c->model.type, "cnn");
    c->model.channels.n = 2;
    c->model.channels.v[0] = 4;
    c->model.channels.v[1] = 8;
    c->model.pool.n = 2;
    c->model.pool.v[0] = 1;
    c->model.pool.v[1] = 1;
}

static bool is16(st_precision p, float x) {
    float r = p == ST_PREC_BF16 ? st_round_bf16(x) : st_round_f16(x);
    return st_f32_bits(r) == st_f32_bits(x);
}

static int64_t count_not16(st_precision p, const float *x, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !is16(p, x[i]);
    return bad;
}

/* Build, fill, forward and backward; the loss comes back in *loss. */
static void run(void (*tweak)(st_config *), const char *prec, float *loss, bool check) {
    st_config c;
    st_config_defaults(&c);
    tweak(&c);
    snprintf(c.precision, sizeof c.precision, "%s", prec);
    const st_precision p = st_precision_from_name(prec);
    const bool gpt = strcmp(c.model.type, "gpt") == 0;
    st_model_input in = {.height = 12, .width = 12, .channels = 1, .num_classes = 10};
    if (gpt) {
        in.vocab_size = 64;
        in.seq_len = 16;
    }
    st_model *m = NULL;
    st_model_graph mg = {0};
    CHECK_OK(st_model_create(&c, &in, &m));
    if (!m) return;
    CHECK_OK(st_model_init_weights(m, 7));
    CHECK_OK(st_model_graph_build(m, 3, &mg));
    st_params *pa = &m->params;
    /* masters with bits below 16-bit precision (init values already have them) */
    float *masters = malloc((size_t)pa->count * sizeof *masters);
    memcpy(masters, pa->data, (size_t)pa->count * sizeof *masters);
    for (int64_t i = 0; i < mg.x->count; i++) {
        if (gpt)
            mg.x->idata[i] = (int32_t)((i * 7) % 64);
        else
            mg.x->data[i] = 0.3f * (float)((i * 37) % 11) - 1.1f + 1e-5f * (float)i;
    }
    for (int64_t i = 0; i < mg.y->count; i++)
        mg.y->idata[i] = (int32_t)((i * 5) % (gpt ? 64 : 10));
    mg.g.training = true;
    memset(pa->grad, 0, (size_t)pa->arena_count * sizeof(float));
    CHECK_OK(st_graph_forward(&mg.g));
    CHECK_OK(st_graph_backward(&mg.g, 1.0f));
    *loss = mg.loss->data[0];
    if (check) {
        CHECK(memcmp(masters, pa->data, (size_t)pa->count * sizeof *masters) == 0, "%s: masters changed",
              prec);
        CHECK(count_not16(p, pa->data, pa->count) > 0, "%s: the masters hold only 16-bit values", prec);
        int64_t bad = 0;
        for (int64_t i = 0; i < pa->count; i++)
            bad += st_f32_bits(pa->compute[i]) !=
                   st_f32_bits(p == ST_PREC_BF16 ? st_round_bf16(pa->data[i]) : st_round_f16(pa->data[i]));
        CHECK(bad == 0, "%s: %lld compute-copy values are not the rounded masters", prec, (long long)bad);
        for (int i = 0; i < pa->n; i++)
            if (pa->t[i]->kind == ST_TENSOR_PARAM)
                CHECK(pa->t[i]->data == pa->data + pa->t[i]->offset, "%s: %s points at the compute copy",
                      prec, pa->t[i]->name);
        for (int i = 0; i < mg.g.n_acts; i++) {
            const st_tensor *t = mg.g.acts[i];
            if (t->dtype != ST_F32) continue;
            if (t != mg.loss)
                CHECK(count_not16(p, t->data, t->count) == 0, "%s: activation %s holds non-16-bit values",
                      prec, t->name);
            if (t->grad && t != mg.loss)
                CHECK(count_not16(p, t->grad, t->count) == 0,
                      "%s: the gradient of %s holds non-16-bit values", prec, t->name);
        }
        CHECK(count_not16(p, pa->grad, pa->count) > 0, "%s: parameter gradients look rounded", prec);
        /* An optimizer step (here: a change and a touch) refreshes the copy. */
        pa->data[0] += 0.25f;
        st_params_touch(pa);
        CHECK_OK(st_graph_forward(&mg.g));
        CHECK(pa->compute[0] == (p == ST_PREC_BF16 ? st_round_bf16(pa->data[0]) : st_round_f16(pa->data[0])),
              "%s: the compute copy was not refreshed", prec);
    }
    free(masters);
    st_model_graph_free(&mg);
    st_model_free(m);
}

int main(void) {
    void (*models[2])(st_config *) = {tiny_gpt, small_cnn};
    for (int k = 0; k < 2; k++) {
        float l32 = 0, lb = 0, lh = 0;
        run(models[k], "fp32", &l32, false);
        run(models[k], "bf16", &lb, true);
        run(models[k], "fp16", &lh, true);
        /* 16-bit activations: the loss moves by about the rounding (2^-8, 2^-11) */
        CHECK(fabsf(lb - l32) <= 2e-2f * l32 && fabsf(lh - l32) <= 3e-3f * l32,
              "model %d losses fp32 %.6f bf16 %.6f fp16 %.6f", k, (double)l32, (double)lb, (double)lh);
        CHECK(lb != l32, "model %d: bf16 gave fp32's loss bits: nothing was rounded", k);
        printf("model %d: loss fp32 %.6f bf16 %.6f fp16 %.6f\n", k, (double)l32, (double)lb, (double)lh);
    }
    return st_test_failures ? 1 : 0;
}
