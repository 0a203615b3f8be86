/* Model cases of the PyTorch parity driver: mlp, cnn and gpt through the model
 * API (st_model_create, st_model_graph_build), weights set by name from the
 * input file, and ten AdamW steps with st_optim. The configurations here are
 * mirrored in tests/parity/torch_parity.py (MODEL_CONFIGS, TRAIN); change both. */
#ifndef ST_TESTS_PARITY_MODELS_H
#define ST_TESTS_PARITY_MODELS_H

#include "model/model.h"
#include "optim/optim.h"
#include "parity_driver.h"

#define PM_MAX_STEPS 32

static void pm_list(st_int_list *l, int n, const int64_t *v) {
    l->n = n;
    memcpy(l->v, v, (size_t)n * sizeof *v);
}

/* The configuration of model `type`, filled by hand so the test depends on no
 * default: only the keys the model and the optimizer read. */
static void pm_config(const char *type, st_config *cfg, st_model_input *in) {
    memset(cfg, 0, sizeof *cfg);
    memset(in, 0, sizeof *in);
    snprintf(cfg->model.type, sizeof cfg->model.type, "%s", type);
    if (strcmp(type, "mlp") == 0) {
        pm_list(&cfg->model.hidden, 2, (const int64_t[]){64, 32});
        *in = (st_model_input){.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    } else if (strcmp(type, "cnn") == 0) {
        pm_list(&cfg->model.channels, 2, (const int64_t[]){8, 16});
        pm_list(&cfg->model.pool, 2, (const int64_t[]){0, 1});
        cfg->model.kernel = 3;
        cfg->model.batchnorm = true;
        *in = (st_model_input){.height = 12, .width = 12, .channels = 1, .num_classes = 10};
    } else {
        cfg->model.n_layer = 2;
        cfg->model.n_head = 2;
        cfg->model.n_embd = 32;
        cfg->model.vocab_size = 64;
        cfg->model.block_size = 16;
        *in = (st_model_input){.vocab_size = 64, .seq_len = 16};
    }
    snprintf(cfg->optim.type, sizeof cfg->optim.type, "adamw");
    cfg->optim.lr = 1e-3;
    cfg->optim.weight_decay = 0.1;
    cfg->optim.beta1 = 0.9;
    cfg->optim.beta2 = 0.999;
    cfg->optim.eps = 1e-8;
}

/* Create the model and a training-mode graph whose batch size is dimension
 * `axis` of input tensor `x`; `keep`: every activation gradient apart from
 * the others and from the data (st_model keep_acts), so the logits can
 * be compared after backward. */
static st_status pm_setup(const pd_ctx *c, const char *type, const char *x, int axis, bool keep, st_model **m,
                          st_model_graph *mg, st_config *cfg) {
    st_model_input in;
    pm_config(type, cfg, &in);
    int ndim = 0;
    int64_t shape[ST_MAX_DIMS] = {0};
    memset(mg, 0, sizeof *mg);
    ST_TRY(pd_shape(c, x, &ndim, shape));
    ST_TRY(st_model_create(cfg, &in, m));
    (*m)->keep_acts = keep;
    if (axis >= ndim) return st_fail(ST_ERR_FORMAT, "parity input %s has %d dimensions", x, ndim);
    ST_TRY(st_model_graph_build(*m, shape[axis], mg));
    mg->g.training = true;
    return ST_OK;
}

/* One forward and backward of the whole model: logits, loss, every gradient,
 * and the batch-norm running statistics after the step. */
static st_status pm_model_case(pd_ctx *c, const char *type) {
    st_model *m = NULL;
    st_model_graph mg;
    st_config cfg;
    st_status s;
    ST_GOTO(pm_setup(c, type, strcmp(type, "gpt") == 0 ? "idx" : "x", 0, true, &m, &mg, &cfg));
    ST_GOTO(pd_load(c, &mg.g));
    ST_GOTO(st_graph_forward(&mg.g));
    memset(m->params.grad, 0, (size_t)m->params.arena_count * sizeof(float));
    ST_GOTO(st_graph_backward(&mg.g, 1.0f));
    ST_GOTO(pd_emit_tensor(c, "logits", mg.logits));
    ST_GOTO(pd_emit_tensor(c, "loss", mg.loss));
    ST_GOTO(pd_emit_grads(c, &m->params));
fail:
    st_model_graph_free(&mg);
    st_model_free(m);
    return s;
}

/* Copy batch `step` of steps tensor `name` (S, B, ...) into t. */
static st_status pm_batch(const pd_ctx *c, const char *name, int64_t step, st_tensor *t) {
    const st_safetensors_entry *e = st_safetensors_find(c->in, name);
    if (!e || e->count % t->count != 0 || (step + 1) * t->count > e->count)
        return st_fail(ST_ERR_FORMAT, "parity input %s does not hold batch %lld of %s", name, (long long)step,
                       t->name);
    char *all = malloc((size_t)e->nbytes);
    if (!all) return st_fail(ST_ERR_NOMEM, "parity driver: out of memory");
    st_status s = st_safetensors_read_raw(c->in, name, all, e->nbytes);
    const size_t nbytes = (size_t)t->count * 4; /* F32 and I32 alike */
    if (s == ST_OK && strcmp(e->dtype, t->dtype == ST_F32 ? "F32" : "I32") != 0)
        s = st_fail(ST_ERR_FORMAT, "parity input %s has dtype %s", name, e->dtype);
    if (s == ST_OK)
        memcpy(t->dtype == ST_F32 ? (void *)t->data : (void *)t->idata, all + step * nbytes, nbytes);
    free(all);
    return s;
}

/* AdamW steps (lr 1e-3, weight decay 0.1 on tensors flagged `decay`) over the
 * batches "steps.x" (S, B, ...) and "steps.y": the loss before each step and
 * the final weights. */
static st_status pm_train_case(pd_ctx *c, const char *type) {
    st_model *m = NULL;
    st_model_graph mg;
    st_config cfg;
    st_optim opt = {0};
    float losses[PM_MAX_STEPS];
    int64_t steps = 0;
    st_status s;
    ST_GOTO(pm_setup(c, type, "steps.x", 1, false, &m, &mg, &cfg));
    ST_GOTO(pd_load_params(c, &m->params));
    ST_GOTO(st_optim_init(&opt, &cfg, &m->params));
    steps = st_safetensors_find(c->in, "steps.x")->shape[0];
    if (steps > PM_MAX_STEPS) ST_GOTO(st_fail(ST_ERR_ARG, "parity: at most %d steps", PM_MAX_STEPS));
    for (int64_t i = 0; i < steps; i++) {
        ST_GOTO(pm_batch(c, "steps.x", i, mg.x));
        ST_GOTO(pm_batch(c, "steps.y", i, mg.y));
        memset(m->params.grad, 0, (size_t)m->params.arena_count * sizeof(float));
        ST_GOTO(st_graph_forward(&mg.g));
        ST_GOTO(st_graph_backward(&mg.g, 1.0f));
        losses[i] = mg.loss->data[0];
        st_optim_step(&opt, &m->params, cfg.optim.lr);
    }
    ST_GOTO(pd_emit(c, "losses", 1, &steps, losses));
    char name[ST_NAME_MAX + 8];
    for (int i = 0; i < m->params.n; i++) {
        snprintf(name, sizeof name, "final.%s", m->params.t[i]->name);
        ST_GOTO(pd_emit_tensor(c, name, m->params.t[i]));
    }
fail:
    st_optim_free(&opt);
    st_model_graph_free(&mg);
    st_model_free(m);
    return s;
}

#endif
