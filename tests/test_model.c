/* Models: parameter counts and names (GPT-2 124M's exact shape), weights
 * round trip and every load mismatch reported by name, graphs for several
 * batch sizes sharing one parameter arena, seeded initialisation, a
 * training step that gives the same bits twice, and a model for forward
 * alone (no gradients). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "layers/layers.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/eval_device.h"

static st_model *make(const char *type, void (*tweak)(st_config *)) {
    st_config c;
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "%s", type);
    if (tweak) tweak(&c);
    st_model_input in = {.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    if (strcmp(type, "gpt") == 0) {
        in.vocab_size = c.model.vocab_size > 0 ? c.model.vocab_size : 256;
        in.seq_len = c.model.block_size;
    }
    st_model *m = NULL;
    CHECK_OK(st_model_create(&c, &in, &m));
    return m;
}

static void two_heads(st_config *c) { c->model.n_head = 2; }
static void pools_first(st_config *c) { CHECK_OK(st_config_set(c, "model.pool=[1, 1, 0]")); }

static void narrow(st_config *c) {
    c->model.channels.v[0] = 16;
    c->model.batchnorm = false;
}

static void gpt124(st_config *c) {
    c->model.n_layer = 12;
    c->model.n_head = 12;
    c->model.n_embd = 768;
    c->model.vocab_size = 50257;
    c->model.block_size = 1024;
}

static void gpt_tiny(st_config *c) { /* (its logits are compared: the plain head, which keeps them) */
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "off");
    c->model.n_layer = 2;
    c->model.n_head = 2;
    c->model.n_embd = 32;
    c->model.vocab_size = 64;
    c->model.block_size = 16;
}

static void gpt_wider_other_hidden(st_config *c) {
    gpt_tiny(c);
    c->model.n_embd = 64;
    CHECK_OK(st_config_set(c, "model.hidden=[8]")); /* (an mlp's setting: a gpt reads none of it) */
}

static void test_gpt2_124m_shape(void) {
    st_model *m = make("gpt", gpt124);
    if (!m) return;
    /* GPT-2 small: 124,439,808 parameters with the output layer tied to wte. */
    CHECK(m->n_params == 124439808LL, "gpt2-124m has %lld parameters", (long long)m->n_params);
    const char *names[] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight",
                           "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.11.mlp.c_fc.weight",
                           "h.11.mlp.c_proj.bias", "ln_f.bias"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        CHECK(st_params_find(&m->params, names[i]) != NULL, "gpt2-124m has %s", names[i]);
    st_tensor *t = st_params_find(&m->params, "h.0.attn.c_attn.weight");
    CHECK(t && t->shape[0] == 768 && t->shape[1] == 2304, "c_attn.weight is (768, 2304) as in GPT-2 files");
    t = st_params_find(&m->params, "h.3.mlp.c_proj.weight");
    CHECK(t && t->shape[0] == 3072 && t->shape[1] == 768, "mlp.c_proj.weight is (3072, 768)");
    CHECK(st_params_find(&m->params, "lm_head.weight") == NULL, "the output layer is tied, not a parameter");
    st_model_free(m);
}

static void test_counts_and_names(void) {
    st_model *m = make("mlp", NULL);
    if (!m) return;
    int64_t want = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10;
    CHECK(m->n_params == want, "mlp 784-1024-1024-10 has %lld parameters, want %lld", (long long)m->n_params,
          (long long)want);
    CHECK(st_params_find(&m->params, "fc.0.weight") && st_params_find(&m->params, "head.bias"), "mlp names");
    st_model_free(m);
    m = make("cnn", NULL);
    if (!m) return;
    CHECK(st_params_find(&m->params, "conv.0.weight") && st_params_find(&m->params, "bn.2.running_var") &&
              st_params_find(&m->params, "head.weight"),
          "cnn names");
    st_tensor *h = st_params_find(&m->params, "head.weight");
    CHECK(h && h->shape[1] == 128 * 7 * 7, "cnn head reads 128x7x7 features");
    st_model_free(m);
}

/* A cnn's FLOPs per sample from its maps as built: an even kernel (padding
 * k/2) grows each map by one, which the count took as "same" (28 each). */
static void kernel4(st_config *c) { c->model.kernel = 4; }
static void test_cnn_flops(void) {
    st_model *m = make("cnn", kernel4);
    if (!m) return;
    /* conv 28 -> 29; conv 29 -> 30, pool 15; conv 15 -> 16, pool 8 (model.pool [0, 1, 1]) */
    const st_tensor *h = st_params_find(&m->params, "head.weight");
    CHECK(h && h->shape[1] == 128 * 8 * 8, "kernel 4: the head reads 128x8x8 features");
    const double want = 2.0 * 29 * 29 * 32 * 1 * 16 + 2.0 * 30 * 30 * 64 * 32 * 16 +
                        2.0 * 16 * 16 * 128 * 64 * 16 + 2.0 * 8 * 8 * 128 * 10;
    const double got = st_model_flops_per_sample(m);
    CHECK(fabs(got - want) <= 1e-9 * want, "kernel 4: %.6g FLOPs per sample, want %.6g", got, want);
    st_model_free(m);
}

static void test_init_and_batches(void) {
    st_model *a = make("gpt", gpt_tiny), *b = make("gpt", gpt_tiny);
    if (!a || !b) return;
    CHECK_OK(st_model_init_weights(a, 5));
    CHECK_OK(st_model_init_weights(b, 5));
    CHECK(memcmp(a->params.data, b->params.data, (size_t)a->params.count * 4) == 0, "same seed, same bits");
    CHECK_OK(st_model_init_weights(b, 6));
    CHECK(memcmp(a->params.data, b->params.data, (size_t)a->params.count * 4) != 0, "another seed differs");
    st_model_graph g1, g3;
    CHECK_OK(st_model_graph_build(a, 1, &g1));
    CHECK_OK(st_model_graph_build(a, 3, &g3));
    /* The same sample alone and inside a batch of 3 gives the same logits. */
    for (int64_t i = 0; i < 16; i++) {
        g1.x->idata[i] = (int32_t)(i * 7 % 64);
        g1.y->idata[i] = (int32_t)(i % 64);
        for (int r = 0; r < 3; r++) {
            g3.x->idata[r * 16 + i] = r == 1 ? g1.x->idata[i] : (int32_t)(r * 5 + i) % 64;
            g3.y->idata[r * 16 + i] = g1.y->idata[i];
        }
    }
    CHECK_OK(st_graph_forward(&g1.g));
    CHECK_OK(st_graph_forward(&g3.g));
    double err = 0;
    /* a NaN is kept, and fails; not fmax: gcc 12 for arm64 fails on that loop at -O3 */
    for (int64_t i = 0; i < 16 * 64; i++) {
        const double e = fabs(g1.logits->data[i] - g3.logits->data[16 * 64 + i]);
        if (!(e <= err)) err = e;
    }
    CHECK(err <= 1e-5, "batch-of-1 and batch-of-3 logits differ by %g", err);
    st_model_graph_free(&g1);
    st_model_graph_free(&g3);
    st_model_free(a);
    st_model_free(b);
}

static void wide_gpt(st_config *c) {
    gpt_tiny(c);
    c->model.n_embd = 64;
    c->model.vocab_size = 16500; /* the embedding: 1056000 values, made in chunks (above 2^20) */
}

static void one_wide_layer(st_config *c) { CHECK_OK(st_config_set(c, "model.hidden=[1340]")); }

/* Initialisation runs in chunks on the OpenMP threads (graph.c init_tensor),
 * each from its place in the tensor's stream: every value is the one drawn
 * in order by one thread (a normal value two draws, a uniform one), with 1
 * thread and with 3, for tensors of several chunks (the gpt's embedding,
 * normal; the mlp's first weight, 784 x 1340, uniform), each just above the
 * size init makes in chunks (arm64.sh runs it under qemu). */
static void test_init_threads(void) {
    const char *types[] = {"gpt", "mlp"};
    void (*tweaks[])(st_config *) = {wide_gpt, one_wide_layer};
    const int threads = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        st_model *a = make(types[k], tweaks[k]), *b = make(types[k], tweaks[k]);
        if (!a || !b) return;
        omp_set_num_threads(1);
        CHECK_OK(st_model_init_weights(a, 11));
        omp_set_num_threads(3);
        CHECK_OK(st_model_init_weights(b, 11));
        omp_set_num_threads(threads);
        CHECK(memcmp(a->params.data, b->params.data, (size_t)a->params.count * 4) == 0,
              "%s: 1 thread and 3 give other bits", types[k]);
        int64_t largest = 0, wrong = 0;
        for (int i = 0; i < b->params.n; i++) {
            const st_tensor *t = b->params.t[i];
            if (t->init != ST_INIT_NORMAL && t->init != ST_INIT_UNIFORM) continue;
            if (t->count > largest) largest = t->count;
            st_rng r = st_rng_make(11, st_hash_str(t->name));
            for (int64_t j = 0; j < t->count; j++) {
                const float v = t->init == ST_INIT_NORMAL
                                    ? t->init_scale * st_rng_normal(&r)
                                    : t->init_scale * (2.0f * st_rng_uniform(&r) - 1.0f);
                wrong += memcmp(&v, &t->data[j], sizeof v) != 0;
            }
        }
        CHECK(wrong == 0 && largest > (1 << 20),
              "%s: %lld values differ from one stream's draws in order "
              "(largest tensor %lld)",
              types[k], (long long)wrong, (long long)largest);
        st_model_free(a);
        st_model_free(b);
    }
}

static double one_step(st_model *m, st_model_graph *g) {
    st_config c;
    st_config_defaults(&c);
    st_optim o;
    CHECK_OK(st_optim_init(&o, &c, &m->params));
    memset(m->params.grad, 0, (size_t)m->params.arena_count * 4);
    CHECK_OK(st_graph_forward(&g->g));
    double loss = g->loss->data[0];
    CHECK_OK(st_graph_backward(&g->g, 1.0f));
    st_optim_step(&o, &m->params, 1e-3);
    st_optim_free(&o);
    return loss;
}

static void test_step_reproducible(void) {
    float *w[2] = {0};
    for (int k = 0; k < 2; k++) {
        st_model *m = make("cnn", NULL);
        if (!m) return;
        CHECK_OK(st_model_init_weights(m, 1));
        st_model_graph g;
        CHECK_OK(st_model_graph_build(m, 4, &g));
        g.g.training = true;
        for (int64_t i = 0; i < g.x->count; i++) g.x->data[i] = (float)((i * 31) % 17) / 17.0f - 0.5f;
        for (int i = 0; i < 4; i++) g.y->idata[i] = i * 3;
        double l1 = one_step(m, &g), l2 = one_step(m, &g);
        CHECK(isfinite(l1) && l2 < l1, "a step lowers the loss on the same batch (%g -> %g)", l1, l2);
        w[k] = malloc((size_t)m->params.count * 4);
        memcpy(w[k], m->params.data, (size_t)m->params.count * 4);
        st_model_graph_free(&g);
        st_model_free(m);
    }
    CHECK(memcmp(w[0], w[1], 4 * 10000) == 0, "two identical runs give the same bits");
    free(w[0]);
    free(w[1]);
}

/* Weights saved by a `kind` model set by `saved` (NULL: the defaults), which
 * loads them back, are refused by one set by `loading` as a format error
 * whose message holds `want` and `want2` (NULL: no second) and not `never`
 * (NULL: nothing ruled out). */
static void refused_load(const char *kind, void (*saved)(st_config *), void (*loading)(st_config *),
                         const char *path, const char *label, const char *want, const char *want2,
                         const char *never) {
    st_model *s = make(kind, saved), *l = make(kind, loading);
    if (s && l) {
        CHECK_OK(st_model_init_weights(s, 1));
        CHECK_OK(st_model_save(s, path));
        CHECK_OK(st_model_load(s, path));
        st_clear_error();
        CHECK(st_model_load(l, path) == ST_ERR_FORMAT, "%s: the load was not refused", label);
        const char *msg = st_last_error();
        CHECK(strstr(msg, want) && (!want2 || strstr(msg, want2)) && (!never || !strstr(msg, never)),
              "%s: %s", label, msg);
    }
    st_model_free(s);
    st_model_free(l);
}

static void test_weights_round_trip(void) {
    char dir[] = "/tmp/st_model_XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/other.safetensors", dir);
    st_model *a = make("cnn", NULL), *b = make("cnn", NULL);
    if (!a || !b) return;
    CHECK_OK(st_model_init_weights(a, 1));
    st_params_find(&a->params, "bn.0.running_mean")->data[3] = 0.25f; /* buffers travel too */
    CHECK_OK(st_model_init_weights(b, 2));
    CHECK_OK(st_model_save(a, path));
    CHECK_OK(st_model_load(b, path));
    CHECK(memcmp(a->params.data, b->params.data, (size_t)a->params.count * 4) == 0, "params round trip");
    CHECK(st_params_find(&b->params, "bn.0.running_mean")->data[3] == 0.25f, "buffers round trip");

    /* A model of another shape: every mismatch is named, nothing is changed. */
    st_model *c = make("cnn", NULL);
    CHECK_OK(st_model_init_weights(c, 3));
    float before = c->params.data[0];
    int64_t s1[2] = {10, 99};
    float junk[990] = {0};
    int32_t ints[4] = {0};
    int64_t s4 = 4;
    st_safetensors_tensor ts[3] = {{"head.weight", "F32", 2, s1, junk},
                                   {"extra.thing", "F32", 2, s1, junk},
                                   {"conv.0.weight", "I32", 1, &s4, ints}};
    CHECK_OK(st_safetensors_write(bad, ts, 3, NULL, 0));
    st_clear_error();
    CHECK(st_model_load(c, bad) == ST_ERR_FORMAT, "a mismatched file is a format error");
    const char *msg = st_last_error();
    CHECK(strstr(msg, "head.weight: shape [10, 99] in the file, [10, 6272] in the model"), "shape named: %s", msg);
    CHECK(strstr(msg, "extra.thing: in the file but not in the model"), "extra named: %s", msg);
    CHECK(strstr(msg, "conv.0.weight: dtype I32"), "dtype named: %s", msg);
    CHECK(strstr(msg, "bn.1.weight: missing"), "missing named: %s", msg);
    CHECK(strstr(msg, "other.safetensors"), "file named: %s", msg);
    CHECK(c->params.data[0] == before, "a failed load changes nothing");
    CHECK(strstr(msg, "hint: the weights must come from a model with the same model.* settings"),
          "a file without our metadata: the general hint: %s", msg);
    /* A file of ours, this run's settings recorded, a tensor since changed: the hint says so (it said the
     * file recorded no settings, or that they must be the same, which they are) */
    const char *cnn_meta[] = {"format", "scaletrain", "model.type", "cnn"};
    CHECK_OK(st_safetensors_write(bad, ts, 1, cnn_meta, 2));
    st_clear_error();
    CHECK(st_model_load(c, bad) == ST_ERR_FORMAT, "a changed file of ours is a format error");
    msg = st_last_error();
    CHECK(strstr(msg, "hint: the file records this run's model.* settings, so its tensors no longer match what "
                      "it was saved with"),
          "a changed file of ours: %s", msg);
    /* A file of ours: the hint names the settings it was saved with that differ */
    st_model *d = make("cnn", narrow);
    st_clear_error();
    CHECK(st_model_load(d, path) == ST_ERR_FORMAT, "a narrower cnn refuses the file");
    msg = st_last_error();
    CHECK(strstr(msg, "hint: the file was saved by a model with model.channels [32, 64, 128] (this run: [16, "
                      "64, 128]), model.batchnorm true (this run: false): run with those settings (--set "
                      "model.channels=[32,64,128] --set model.batchnorm=true)"),
          "the settings named: %s", msg);
    st_model_free(d);
    /* A gpt with another head count: every tensor fits, and the load is
     * still refused (the heads would split them differently) */
    char gpath[300];
    snprintf(gpath, sizeof gpath, "%s/gpt.safetensors", dir);
    refused_load("gpt", NULL, two_heads, gpath, "a gpt of 2 heads, a 4-head file",
                 "gpt.safetensors: saved by a model with model.n_head 4 (this run: 2): every tensor fits",
                 "run with --set model.n_head=4", NULL);
    /* A cnn whose max-pools sit elsewhere (the default [0, 1, 1] against
     * [1, 1, 0]): every tensor fits, and the load is refused */
    refused_load("cnn", pools_first, NULL, gpath, "a cnn with other pools",
                 "saved by a model with model.pool [1, 1, 0] (this run: [0, 1, 1]): every tensor fits",
                 "run with --set 'model.pool=[1, 1, 0]'", NULL);
    /* A gpt of another width: the hint names model.n_embd, not the mlp's
     * model.hidden that also differs (a gpt reads none of it) */
    refused_load("gpt", gpt_tiny, gpt_wider_other_hidden, gpath, "a wider gpt",
                 "hint: the file was saved by a model with model.n_embd 32 (this run: 64): run with those "
                 "settings (--set model.n_embd=32)",
                 NULL, "model.hidden");
    unlink(gpath);
    st_model_free(a);
    st_model_free(b);
    st_model_free(c);
    unlink(path);
    unlink(bad);
    rmdir(dir);
}

/* A file laid out as a Hugging Face GPT-2 checkpoint: "transformer."
 * prefixes, the causal-mask buffers and a tied lm_head.weight beside the
 * weights. It loads, and the weights arrive. */
static void test_gpt2_style_file(void) {
    char dir[] = "/tmp/st_hf_XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_model *a = make("gpt", gpt_tiny), *b = make("gpt", gpt_tiny);
    if (!a || !b) return;
    CHECK_OK(st_model_init_weights(a, 11));
    CHECK_OK(st_model_init_weights(b, 12));
    const st_params *p = &a->params;
    st_safetensors_tensor *t = calloc((size_t)p->n + 3, sizeof *t);
    char (*names)[128] = calloc((size_t)p->n, sizeof *names);
    static float mask[16 * 16];
    int64_t mshape[4] = {1, 1, 16, 16};
    for (int i = 0; i < p->n; i++) {
        snprintf(names[i], sizeof names[i], "transformer.%s", p->t[i]->name);
        t[i] = (st_safetensors_tensor){names[i], "F32", p->t[i]->ndim, p->t[i]->shape, p->t[i]->data};
    }
    st_tensor *wte = st_params_find(p, "wte.weight");
    t[p->n] = (st_safetensors_tensor){"transformer.h.0.attn.bias", "F32", 4, mshape, mask};
    t[p->n + 1] = (st_safetensors_tensor){"transformer.h.1.attn.masked_bias", "F32", 0, NULL, mask};
    t[p->n + 2] = (st_safetensors_tensor){"lm_head.weight", "F32", 2, wte->shape, wte->data};
    CHECK_OK(st_safetensors_write(path, t, p->n + 3, NULL, 0));
    CHECK_OK(st_model_load(b, path));
    CHECK(memcmp(a->params.data, b->params.data, (size_t)a->params.count * 4) == 0, "GPT-2-style file loads");
    /* An lm_head of its own (untied), one of another shape, and a weight
     * that is not finite: each refused, naming what is wrong */
    float *head = malloc((size_t)wte->count * sizeof *head);
    if (head) {
        memcpy(head, wte->data, (size_t)wte->count * sizeof *head);
        head[5] += 1.0f;
        t[p->n + 2].data = head;
        CHECK_OK(st_safetensors_write(path, t, p->n + 3, NULL, 0));
        CHECK_FAILS(st_model_load(b, path), ST_ERR_FORMAT, "lm_head.weight differs from wte.weight");
        int64_t small[2] = {2, 3};
        t[p->n + 2].shape = small;
        CHECK_OK(st_safetensors_write(path, t, p->n + 3, NULL, 0));
        CHECK_FAILS(st_model_load(b, path), ST_ERR_FORMAT, "lm_head.weight has shape [2, 3], wte.weight [");
        t[p->n + 2].shape = wte->shape;
        t[p->n + 2].data = wte->data;
        /* the last parameter not finite: refused after every other tensor
         * was read, and the model is as it was (the load reads into copies) */
        CHECK_OK(st_model_init_weights(b, 12));
        const size_t nbytes = (size_t)b->params.arena_count * sizeof(float);
        float *was = malloc(nbytes);
        const int last = p->n_params - 1;
        const float keep = p->t[last]->data[3];
        p->t[last]->data[3] = NAN;
        CHECK_OK(st_safetensors_write(path, t, p->n + 3, NULL, 0));
        char want[160];
        snprintf(want, sizeof want, "%s: element 3 is NaN: the weights are not finite", names[last]);
        if (was) memcpy(was, b->params.data, nbytes);
        CHECK_FAILS(st_model_load(b, path), ST_ERR_FORMAT, want);
        CHECK(was && memcmp(was, b->params.data, nbytes) == 0,
              "a load refused at its last tensor changes nothing");
        p->t[last]->data[3] = keep;
        /* a tensor both with and without the "transformer." prefix: which
         * one is meant is not for the loader to guess */
        t[p->n + 2] = (st_safetensors_tensor){"wte.weight", "F32", 2, wte->shape, head};
        CHECK_OK(st_safetensors_write(path, t, p->n + 3, NULL, 0));
        CHECK_FAILS(st_model_load(b, path), ST_ERR_FORMAT,
                    "wte.weight: in the file twice, also as transformer.wte.weight: keep one of them");
        CHECK(was && memcmp(was, b->params.data, nbytes) == 0, "a refused load changes nothing");
        free(was);
        free(head);
    }
    free(t);
    free(names);
    st_model_free(a);
    st_model_free(b);
    unlink(path);
    rmdir(dir);
}

/* A model for forward alone (st_model_create_inference): no gradient
 * arena, the same layout, the same logits as the training model's forward
 * graph from the same weights; a training graph on it is an error. */
static void test_inference_model(void) {
    st_model *a = make("gpt", gpt_tiny);
    if (!a) return;
    CHECK_OK(st_model_init_weights(a, 7));
    st_model *b = NULL;
    CHECK_OK(st_model_create_inference(&a->cfg, &a->in, NULL, &b));
    if (!b) {
        st_model_free(a);
        return;
    }
    CHECK(b->params.grad == NULL && b->params.count == a->params.count &&
              b->params.arena_count == a->params.arena_count,
          "an inference model: no gradients (%p), the same parameters (%lld of %lld)", (void *)b->params.grad,
          (long long)b->params.count, (long long)a->params.count);
    for (int i = 0; i < b->params.n; i++)
        CHECK(b->params.t[i]->grad == NULL, "%s has a gradient", b->params.t[i]->name);
    memcpy(b->params.data, a->params.data, (size_t)a->params.arena_count * sizeof(float));
    if (a->params.buffer_count)
        memcpy(b->params.buffers, a->params.buffers, (size_t)a->params.buffer_count * sizeof(float));
    st_model_graph ga, gb, gt;
    CHECK_OK(st_model_graph_build_forward(a, 2, &ga));
    CHECK_OK(st_model_graph_build_forward(b, 2, &gb));
    CHECK_FAILS(st_model_graph_build(b, 2, &gt), ST_ERR_INTERNAL, "made without gradients");
    if (ga.x && gb.x) {
        for (int64_t i = 0; i < 2 * 16; i++) {
            ga.x->idata[i] = gb.x->idata[i] = (int32_t)(i * 11 % 64);
            ga.y->idata[i] = gb.y->idata[i] = (int32_t)(i * 3 % 64);
        }
        CHECK_OK(st_graph_forward(&ga.g));
        CHECK_OK(st_graph_forward(&gb.g));
        CHECK(ga.logits && gb.logits &&
                  memcmp(ga.logits->data, gb.logits->data, (size_t)(2 * 16 * 64) * sizeof(float)) == 0,
              "the inference model's logits are not the training model's bits");
        CHECK(isfinite(gb.loss->data[0]) && gb.loss->data[0] == ga.loss->data[0], "loss %g against %g",
              gb.loss->data[0], ga.loss->data[0]);
    }
    st_model_graph_free(&ga);
    st_model_graph_free(&gb);
    st_model_free(a);
    st_model_free(b);
}

/* An evaluation's count (st_eval_count): valid targets, and rows whose
 * argmax is the label; a row of NaN logits (a diverged model) is no
 * class, where the argmax said 0 and a label 0 counted as right. */
static void test_eval_count(void) {
    const float logits[4][3] = {{NAN, NAN, NAN}, {0.1f, 0.9f, 0.2f}, {NAN, NAN, NAN}, {1, 2, 3}};
    const int32_t y[4] = {0, 1, ST_IGNORE_INDEX, 0};
    int64_t valid = 0, correct = 0;
    st_eval_count(y, &logits[0][0], 4, 3, &valid, &correct);
    CHECK(valid == 3 && correct == 1, "eval count: %lld valid, %lld correct, want 3 and 1", (long long)valid,
          (long long)correct);
}

int main(void) {
    test_eval_count();
    test_cnn_flops();
    test_inference_model();
    test_gpt2_style_file();
    test_gpt2_124m_shape();
    test_counts_and_names();
    test_init_and_batches();
    test_init_threads();
    test_step_reproducible();
    test_weights_round_trip();
    return st_test_finish("test_model");
}
