/* The three model families as layer graphs: mlp, cnn (conv/bn/relu/pool
 * blocks and a classifier) and gpt (GPT-2: pre-norm blocks, learned
 * positions, tied input/output embedding). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/mem.h"
#include "layers/layers.h"

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static st_status build_mlp(st_model *m, st_model_graph *mg) {
    st_graph *g = &mg->g;
    const st_config *c = &m->cfg;
    int64_t B = mg->batch, D = m->in.height * m->in.width * m->in.channels;
    int64_t xs[2] = {B, D};
    ST_TRY(st_graph_input(g, "x", ST_F32, 2, xs, &mg->x));
    ST_TRY(st_graph_input(g, "y", ST_I32, 1, &B, &mg->y));
    st_tensor *h = mg->x;
    char name[ST_NAME_MAX];
    st_linear_opts lo = {.bias = true, .init = ST_INIT_UNIFORM};
    for (int i = 0; i < c->model.hidden.n; i++) {
        st_graph_block_begin(g);
        NAME(name, "fc.%d", i);
        ST_TRY(st_linear(g, name, h, c->model.hidden.v[i], &lo, &h));
        NAME(name, "fc.%d.relu", i);
        ST_TRY(st_relu(g, name, h, &h));
        if (c->model.dropout > 0) {
            NAME(name, "fc.%d.drop", i);
            ST_TRY(st_dropout(g, name, h, (float)c->model.dropout, &h));
        }
        st_graph_block_end(g);
    }
    ST_TRY(st_linear(g, "head", h, m->in.num_classes, &lo, &mg->logits));
    return st_softmax_ce(g, "loss", mg->logits, mg->y, ST_IGNORE_INDEX, &mg->loss);
}

static st_status build_cnn(st_model *m, st_model_graph *mg) {
    st_graph *g = &mg->g;
    const st_config *c = &m->cfg;
    int64_t B = mg->batch;
    int64_t xs[4] = {B, m->in.height, m->in.width, m->in.channels};
    ST_TRY(st_graph_input(g, "x", ST_F32, 4, xs, &mg->x));
    ST_TRY(st_graph_input(g, "y", ST_I32, 1, &B, &mg->y));
    st_tensor *h = mg->x;
    char name[ST_NAME_MAX];
    int64_t k = c->model.kernel;
    for (int i = 0; i < c->model.channels.n; i++) {
        st_graph_block_begin(g);
        NAME(name, "conv.%d", i);
        ST_TRY(st_conv2d(g, name, h, c->model.channels.v[i], k, 1, k / 2, !c->model.batchnorm, &h));
        if (c->model.batchnorm) {
            NAME(name, "bn.%d", i);
            ST_TRY(st_batchnorm_relu(g, name, h, 1e-5f, 0.1f, &h));
        } else {
            NAME(name, "conv.%d.relu", i);
            ST_TRY(st_relu(g, name, h, &h));
        }
        if (i < c->model.pool.n && c->model.pool.v[i]) {
            /* each max-pool halves the map: past 1x1 the settings ask for more than the images hold */
            if (h->shape[1] < 2 || h->shape[2] < 2) {
                int pools = 0;
                for (int j = 0; j < i; j++)
                    pools += j < c->model.pool.n && c->model.pool.v[j] != 0;
                return st_fail(
                    ST_ERR_CONFIG,
                    "model.pool: the max-pool after conv block %d would halve a %lldx%lld map (the "
                    "images are %lldx%lld, and %d max-pool%s before it halved them): put a 0 there "
                    "in model.pool, or use fewer conv blocks (model.channels)",
                    i, (long long)h->shape[1], (long long)h->shape[2], (long long)m->in.height,
                    (long long)m->in.width, pools, pools == 1 ? "" : "s");
            }
            NAME(name, "pool.%d", i);
            ST_TRY(st_maxpool2d(g, name, h, 2, 2, &h));
        }
        st_graph_block_end(g);
    }
    ST_TRY(st_flatten(g, "flatten", h, &h));
    if (c->model.dropout > 0) ST_TRY(st_dropout(g, "head.drop", h, (float)c->model.dropout, &h));
    st_linear_opts lo = {.bias = true, .init = ST_INIT_UNIFORM};
    ST_TRY(st_linear(g, "head", h, m->in.num_classes, &lo, &mg->logits));
    return st_softmax_ce(g, "loss", mg->logits, mg->y, ST_IGNORE_INDEX, &mg->loss);
}

static st_status build_gpt(st_model *m, st_model_graph *mg) {
    st_graph *g = &mg->g;
    const st_config *c = &m->cfg;
    const int64_t B = mg->batch, T = mg->seq_len, C = c->model.n_embd, L = c->model.n_layer;
    const int64_t V = m->in.vocab_size;
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L); /* GPT-2 paper, sec. 2.3 */
    const float p = (float)c->model.dropout;
    int64_t xs[2] = {B, T};
    ST_TRY(st_graph_input(g, "idx", ST_I32, 2, xs, &mg->x));
    if (!g->kv) ST_TRY(st_graph_input(g, "targets", ST_I32, 2, xs, &mg->y)); /* (decoding: no loss) */
    st_tensor *wte, *h, *a;
    ST_TRY(st_embedding(g, "wte", mg->x, V, C, std, &h, &wte));
    ST_TRY(st_pos_embedding(g, "wpe", h, c->model.block_size, std, &h));
    if (p > 0) ST_TRY(st_dropout(g, "drop", h, p, &h));
    char name[ST_NAME_MAX];
    st_linear_opts lin = {.bias = true, .in_out = true, .init = ST_INIT_NORMAL, .init_scale = std};
    st_linear_opts proj = lin;
    proj.init_scale = proj_std;
    for (int64_t l = 0; l < L; l++) {
        st_graph_block_begin(g);
        NAME(name, "h.%lld.ln_1", (long long)l);
        ST_TRY(st_layernorm(g, name, h, 1e-5f, &a));
        NAME(name, "h.%lld.attn.c_attn", (long long)l);
        ST_TRY(st_linear(g, name, a, 3 * C, &lin, &a));
        NAME(name, "h.%lld.attn", (long long)l);
        if (g->kv)
            ST_TRY(st_attention_cached(g, name, a, c->model.n_head, l, &a));
        else
            ST_TRY(st_attention(g, name, a, c->model.n_head, &a));
        NAME(name, "h.%lld.attn.c_proj", (long long)l);
        ST_TRY(st_linear(g, name, a, C, &proj, &a));
        if (p > 0) {
            NAME(name, "h.%lld.attn.drop", (long long)l);
            ST_TRY(st_dropout(g, name, a, p, &a));
        }
        NAME(name, "h.%lld.res_1", (long long)l);
        ST_TRY(st_add(g, name, h, a, &h));
        NAME(name, "h.%lld.ln_2", (long long)l);
        ST_TRY(st_layernorm(g, name, h, 1e-5f, &a));
        NAME(name, "h.%lld.mlp.c_fc", (long long)l);
        ST_TRY(st_linear(g, name, a, 4 * C, &lin, &a));
        NAME(name, "h.%lld.mlp.gelu", (long long)l);
        ST_TRY(st_gelu(g, name, a, &a));
        NAME(name, "h.%lld.mlp.c_proj", (long long)l);
        ST_TRY(st_linear(g, name, a, C, &proj, &a));
        if (p > 0) {
            NAME(name, "h.%lld.mlp.drop", (long long)l);
            ST_TRY(st_dropout(g, name, a, p, &a));
        }
        NAME(name, "h.%lld.res_2", (long long)l);
        ST_TRY(st_add(g, name, h, a, &h));
        st_graph_block_end(g);
    }
    if (g->kv && mg->last_only) ST_TRY(st_last_row(g, "last", h, &h)); /* (the head for the rows read) */
    ST_TRY(st_layernorm(g, "ln_f", h, 1e-5f, &h));
    if (g->kv) return st_linear_tied(g, "lm_head", h, wte, &mg->logits); /* (decoding reads the logits) */
    const char *fh = c->model.fused_head;
    if (strcmp(fh, "on") == 0 || (strcmp(fh, "off") != 0 && st_linear_ce_saves_memory(g, B * T, C, V)))
        return st_linear_ce(g, "lm_head", h, wte, mg->y, ST_IGNORE_INDEX, &mg->loss); /* no logits kept */
    ST_TRY(st_linear_tied(g, "lm_head", h, wte, &mg->logits));
    return st_softmax_ce(g, "loss", mg->logits, mg->y, ST_IGNORE_INDEX, &mg->loss);
}

static st_status graph_build_len(st_model *m, int64_t batch, int64_t seq_len, bool params_only,
                                 bool device_layout, bool forward_only, bool host_logits, st_kv_cache *kv,
                                 bool last_only, st_model_graph *mg) {
    memset(mg, 0, sizeof *mg);
    if (batch <= 0) return st_fail(ST_ERR_ARG, "model graph: batch size %lld", (long long)batch);
    mg->batch = batch;
    mg->seq_len = seq_len;
    st_graph_init(&mg->g, &m->params);
    mg->g.kv = kv;
    mg->last_only = last_only;
    mg->g.params_only = params_only;
    mg->g.device_layout = device_layout;
    mg->g.keep_acts = m->keep_acts;
    mg->g.fuse_gelu = m->kind == ST_MODEL_GPT && m->fused_gelu; /* (acts on device graphs and layouts only) */
    mg->g.fuse_residual = strcmp(m->cfg.model.fused_residual, "off") != 0; /* (the same) */
    /* (read by the CUDA twin alone; "auto" is resolved by the session's plan, off without one) */
    mg->g.fuse_bias_grad = strcmp(m->cfg.model.fused_bias_grad, "on") == 0;
    /* (acts on device graphs only; the twin takes the nodes it can, attention.cu cudnn_node, and
     * session.c refused cudnn where it cannot run) */
    mg->g.attention_cudnn = m->kind == ST_MODEL_GPT && strcmp(m->cfg.model.attention_kernel, "cudnn") == 0;
    mg->g.kernel_variants = strcmp(m->cfg.model.kernel_variants, "all") == 0 ? ST_KV_ALL : 0;
    /* "auto" is resolved by the session's plan; a model built without one keeps everything. */
    mg->g.forward_only = forward_only; /* (no backward: nothing to recompute) */
    mg->g.checkpointing = !forward_only && strcmp(m->cfg.train.activation_checkpointing, "blocks") == 0;
    mg->g.selective = !forward_only && strcmp(m->cfg.train.activation_checkpointing, "selective") == 0;
    st_status s;
    switch (m->kind) {
    case ST_MODEL_MLP:
        s = build_mlp(m, mg);
        break;
    case ST_MODEL_CNN:
        s = build_cnn(m, mg);
        break;
    default:
        s = build_gpt(m, mg);
        break;
    }
    /* evaluation reads an image model's logits (accuracy), generation a
     * token model's; an evaluation's token logits stay on the device and
     * may be stored in 16 bits */
    if (s == ST_OK && mg->logits && (m->kind != ST_MODEL_GPT || host_logits)) mg->logits->host_f32 = true;
    if (s == ST_OK && mg->logits && forward_only) mg->logits->read_after = true; /* (evaluation reads them) */
    if (s == ST_OK) s = st_graph_finalize(&mg->g);
    if (s != ST_OK) {
        st_graph_free(&mg->g);
        memset(mg, 0, sizeof *mg);
    }
    return s;
}

static st_status graph_build(st_model *m, int64_t batch, bool params_only, bool device_layout,
                             bool forward_only, st_model_graph *mg) {
    return graph_build_len(m, batch, m->in.seq_len, params_only, device_layout, forward_only, false, NULL,
                           false, mg);
}

st_status st_model_graph_build(st_model *m, int64_t batch, st_model_graph *mg) {
    return graph_build(m, batch, false, false, false, mg);
}

st_status st_model_graph_build_forward(st_model *m, int64_t batch, st_model_graph *mg) {
    return graph_build(m, batch, false, false, true, mg);
}

st_status st_model_graph_build_forward_len(st_model *m, int64_t batch, int64_t seq_len, st_model_graph *mg) {
    memset(mg, 0, sizeof *mg);
    if (m->kind != ST_MODEL_GPT || seq_len < 1 || seq_len > m->cfg.model.block_size)
        return st_fail(ST_ERR_ARG, "model graph: %lld tokens a sample, where model.block_size is %lld",
                       (long long)seq_len, (long long)m->cfg.model.block_size);
    return graph_build_len(m, batch, seq_len, false, false, true, true, NULL, false, mg);
}

st_status st_kv_cache_create(st_model *m, int64_t batch, int64_t cap, st_kv_cache **out) {
    *out = NULL;
    const st_config *c = &m->cfg;
    if (m->kind != ST_MODEL_GPT || batch < 1 || cap < 1 || cap > c->model.block_size)
        return st_fail(ST_ERR_ARG,
                       "a cache of keys and values for %lld sequence(s) of %lld positions (a gpt's, "
                       "at most model.block_size %lld)",
                       (long long)batch, (long long)cap, (long long)c->model.block_size);
    st_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return st_fail(ST_ERR_NOMEM, "out of memory for a cache of keys and values");
    kv->L = c->model.n_layer, kv->B = batch, kv->cap = cap, kv->C = c->model.n_embd;
    const size_t bytes = (size_t)(kv->L * kv->B * kv->cap * kv->C) * sizeof(float);
    st_status s = ST_OK;
    if (m->params.dev) {
        s = st_device_alloc(m->params.dev, bytes, (void **)&kv->k);
        if (s == ST_OK) s = st_device_alloc(m->params.dev, bytes, (void **)&kv->v);
    } else {
        kv->k = st_alloc_aligned(bytes), kv->v = st_alloc_aligned(bytes);
        if (!kv->k || !kv->v) s = st_fail(ST_ERR_NOMEM, "out of memory");
    }
    if (s != ST_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", st_last_error());
        st_kv_cache_free(m, kv);
        return st_fail(s, "no room for generation's cache of keys and values (%.1f MiB): %s",
                       2.0 * (double)bytes / 1048576.0, why);
    }
    *out = kv;
    return ST_OK;
}

void st_kv_cache_free(st_model *m, st_kv_cache *kv) {
    if (!kv) return;
    if (m->params.dev) {
        st_device_release(m->params.dev, kv->k);
        st_device_release(m->params.dev, kv->v);
    } else {
        st_free_aligned(kv->k);
        st_free_aligned(kv->v);
    }
    free(kv);
}

st_status st_model_graph_build_decode(st_model *m, int64_t batch, int64_t n, st_kv_cache *kv, bool last_only,
                                      st_model_graph *mg) {
    memset(mg, 0, sizeof *mg);
    if (m->kind != ST_MODEL_GPT || !kv || n < 1 || n > kv->cap || batch != kv->B)
        return st_fail(ST_ERR_ARG,
                       "a decode graph of %lld position(s) of %lld sequence(s) (a gpt's, within its cache's)",
                       (long long)n, (long long)batch);
    return graph_build_len(m, batch, n, false, false, true, true, kv, last_only, mg);
}

void st_model_graph_free(st_model_graph *mg) {
    if (!mg) return;
    st_graph_free(&mg->g);
    memset(mg, 0, sizeof *mg);
}

static st_status create(const st_config *cfg, const st_model_input *in, bool layout_only, bool no_grads,
                        st_device *dev, const st_arena_hook *grad, const st_params_layout *lay,
                        st_model **out) {
    *out = NULL;
    st_model *m = calloc(1, sizeof *m);
    if (!m) return st_fail(ST_ERR_NOMEM, "out of memory creating the model");
    m->params.layout_only = layout_only;
    m->params.no_grads = no_grads;
    m->params.dev = dev; /* before the probe below lays out the arenas */
    if (grad) m->params.grad_hook = *grad;
    if (lay) m->params.layout = *lay;
    m->cfg = *cfg;
    m->in = *in;
    if (dev) {
        st_device_props dp;
        m->fused_gelu =
            st_device_props_get(dev, &dp) == ST_OK && st_model_fused_gelu(cfg, dp.cc_major, NULL, 0);
        st_clear_error();
    }
    const char *t = cfg->model.type;
    m->kind = ST_MODEL_GPT; /* (model.type is one of the three: st_config_validate) */
    st_model_kind_named(t, &m->kind);
    st_status s = ST_OK;
    if (m->kind == ST_MODEL_GPT) {
        if (in->seq_len > cfg->model.block_size)
            s = st_fail(ST_ERR_CONFIG, "model.block_size %lld is shorter than the sequence length %lld",
                        (long long)cfg->model.block_size, (long long)in->seq_len);
    } else if (in->num_classes < 2) {
        s = st_fail(ST_ERR_CONFIG, "model.type %s needs at least 2 classes (model.num_classes is %lld)", t,
                    (long long)in->num_classes);
    } else if (in->height < 1 || in->width < 1 || in->channels < 1) {
        s = st_fail(ST_ERR_CONFIG, "model.type %s needs image data (inputs of %lld x %lld x %lld)", t,
                    (long long)in->height, (long long)in->width, (long long)in->channels);
    }
    /* Parameters are declared by building a one-sample graph, then laid out;
     * the probe allocates no activations. */
    st_model_graph probe;
    if (s == ST_OK) s = graph_build(m, 1, true, false, false, &probe);
    if (s != ST_OK) {
        st_model_free(m);
        return s;
    }
    st_model_graph_free(&probe);
    s = st_params_set_precision(&m->params, st_precision_from_name(cfg->precision));
    if (s != ST_OK) {
        st_model_free(m);
        return s;
    }
    m->n_params = m->params.count;
    *out = m;
    return ST_OK;
}

bool st_model_kind_named(const char *type, st_model_kind *out) {
    static const char *const names[] = {
        [ST_MODEL_MLP] = "mlp", [ST_MODEL_CNN] = "cnn", [ST_MODEL_GPT] = "gpt"};
    for (int k = 0; type && k < (int)(sizeof names / sizeof *names); k++)
        if (strcmp(type, names[k]) == 0) {
            *out = (st_model_kind)k;
            return true;
        }
    return false;
}

bool st_model_fused_gelu(const st_config *c, int cc_major, char *why, size_t n) {
    const char *v = c->model.fused_gelu;
    bool on;
    if (strcmp(c->model.type, "gpt") != 0 || cc_major <= 0) {
        on = false;
        if (why)
            snprintf(why, n, "%s", cc_major <= 0 ? "off on the CPU (GELU is its own layer)" : "off: no GELU");
    } else if (strcmp(v, "auto") != 0) {
        on = strcmp(v, "on") == 0;
    } else {
        on = cc_major >= 9;
        if (why)
            snprintf(why, n, "%s: compute capability %d.x%s", on ? "on" : "off", cc_major,
                     on ? ", where cuBLASLt fuses its GELU epilogues" : " (below 9.0 they run slower)");
    }
    return on;
}

void st_model_fused_head_why(bool fused, int64_t micro, int64_t seq_len, int64_t vocab_size, char *why,
                             size_t n) {
    snprintf(why, n, "%s: the logits (%lld x %lld x %lld) take %s memory than the fused head's chunks",
             fused ? "on" : "off", (long long)micro, (long long)seq_len, (long long)vocab_size,
             fused ? "more" : "less");
}

bool st_model_attention_cudnn(const char *precision, int cc_major, int cc_minor, const char *cudnn_lib,
                              char *why, size_t n) {
    const bool bf16 = strcmp(precision, "bf16") == 0,
               cudnn = bf16 && cc_major >= 9 && (!cudnn_lib || cudnn_lib[0]);
    if (cudnn)
        snprintf(why, n, "%s, faster than the flash kernels in bf16 on sm_%d%d%s",
                 cudnn_lib ? cudnn_lib : "cuDNN", cc_major, cc_minor,
                 cudnn_lib ? "" : " (where the node has cuDNN 9; else flash)");
    else if (!bf16)
        snprintf(why, n, "cuDNN's attention takes bf16 and this run is %s", precision);
    else if (cc_major < 9)
        snprintf(why, n, "cuDNN's is the default from sm_90 (measured there); this GPU is sm_%d%d", cc_major,
                 cc_minor);
    else
        snprintf(why, n, "no cuDNN attention here (`scaletrain check` says why)");
    return cudnn;
}

st_status st_model_create(const st_config *cfg, const st_model_input *in, st_model **out) {
    return create(cfg, in, false, false, NULL, NULL, NULL, out);
}

st_status st_model_create_on(const st_config *cfg, const st_model_input *in, st_device *dev, st_model **out) {
    return create(cfg, in, false, false, dev, NULL, NULL, out);
}

st_status st_model_create_hooked(const st_config *cfg, const st_model_input *in, st_device *dev,
                                 const st_arena_hook *grad, const st_params_layout *lay, st_model **out) {
    return create(cfg, in, false, false, dev, grad, lay, out);
}

st_status st_model_create_inference(const st_config *cfg, const st_model_input *in, st_device *dev,
                                    st_model **out) {
    return create(cfg, in, false, true, dev, NULL, NULL, out);
}

st_status st_model_create_layout(const st_config *cfg, const st_model_input *in, st_model **out) {
    return create(cfg, in, true, false, NULL, NULL, NULL, out);
}

st_status st_model_graph_layout(st_model *m, int64_t batch, st_model_graph *mg) {
    return graph_build(m, batch, true, false, false, mg);
}

st_status st_model_graph_layout_device(st_model *m, int64_t batch, st_model_graph *mg) {
    return graph_build(m, batch, true, true, false, mg);
}

st_status st_model_graph_layout_forward(st_model *m, int64_t batch, bool device, st_model_graph *mg) {
    return graph_build(m, batch, true, device, true, mg);
}

void st_model_free(st_model *m) {
    if (!m) return;
    st_params_free(&m->params);
    free(m);
}

st_status st_model_init_weights(st_model *m, uint64_t seed) { return st_params_init(&m->params, seed); }

double st_model_flops_per_sample(const st_model *m) {
    const st_config *c = &m->cfg;
    double f = 0;
    if (m->kind == ST_MODEL_MLP) {
        double in = (double)(m->in.height * m->in.width * m->in.channels);
        for (int i = 0; i < c->model.hidden.n; i++) {
            f += 2 * in * (double)c->model.hidden.v[i];
            in = (double)c->model.hidden.v[i];
        }
        f += 2 * in * (double)m->in.num_classes;
    } else if (m->kind == ST_MODEL_CNN) {
        double h = (double)m->in.height, w = (double)m->in.width, ch = (double)m->in.channels;
        double k = (double)c->model.kernel;
        for (int i = 0; i < c->model.channels.n; i++) {
            double co = (double)c->model.channels.v[i];
            /* stride 1, padding k/2 (the builder's): "same" for odd k, one more row and column for even */
            h += 2 * floor(k / 2) - k + 1;
            w += 2 * floor(k / 2) - k + 1;
            f += 2 * h * w * co * ch * k * k;
            ch = co;
            if (i < c->model.pool.n && c->model.pool.v[i]) {
                h = floor(h / 2);
                w = floor(w / 2);
            }
        }
        f += 2 * h * w * ch * (double)m->in.num_classes;
    } else {
        double C = (double)c->model.n_embd, L = (double)c->model.n_layer, T = (double)m->in.seq_len;
        double V = (double)m->in.vocab_size;
        /* per token: 24 L C^2 in the blocks, 4 L T C in attention scores and
         * values (full T x T, as computed), 2 C V in the output layer */
        f = T * (24 * L * C * C + 4 * L * T * C + 2 * C * V);
    }
    return f;
}
