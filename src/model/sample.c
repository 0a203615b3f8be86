/* Text generation from a gpt (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blas.h"
#include "core/device.h"
#include "core/fastmath.h"
#include "core/mem.h"

/* A uniform double in [0, 1) with 53 random bits. */
static double uniform53(st_rng *r) { return (double)(st_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* order[0..n) by work[] descending, ties by the lower token first (a heap
 * sort: no recursion, no allocation, n log n for a 50k vocabulary). */
static bool before(const float *w, int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); }

static void sift(const float *w, int32_t *o, int64_t i, int64_t n) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        /* a heap whose root is the last in order (the least likely) */
        if (c + 1 < n && before(w, o[c], o[c + 1])) c++;
        if (!before(w, o[i], o[c])) return;
        const int32_t t = o[i];
        o[i] = o[c];
        o[c] = t;
        i = c;
    }
}

static void sort_desc(const float *w, int32_t *o, int64_t n) {
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        sift(w, o, i, n);
    for (int64_t e = n - 1; e > 0; e--) {
        const int32_t t = o[0];
        o[0] = o[e];
        o[e] = t;
        sift(w, o, 0, e);
    }
}

int64_t st_sample_token(const float *logits, int64_t V, const st_sample_params *p, st_rng *rng, float *work,
                        int32_t *order) {
    if (V < 1) return -1;
    int64_t best = 0;
    for (int64_t v = 0; v < V; v++) {
        if (!isfinite(logits[v])) return -1;
        if (logits[v] > logits[best]) best = v;
    }
    if (p->temperature <= 0 || p->top_k == 1) return best;
    const double inv_t = 1.0 / p->temperature;
    const bool cut = (p->top_k > 0 && p->top_k < V) || p->top_p < 1;
    int64_t n = V;
    /* work: logits / temperature, less the largest (exp of at most 0) */
    for (int64_t v = 0; v < V; v++) {
        work[v] = (float)(((double)logits[v] - (double)logits[best]) * inv_t);
        order[v] = (int32_t)v;
    }
    if (cut) {
        sort_desc(work, order, V);
        if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    }
    double total = 0;
    for (int64_t i = 0; i < n; i++)
        total += exp((double)work[order[i]]);
    if (p->top_p < 1) { /* the fewest of the n whose share of them reaches top_p (one at least) */
        double sum = 0;
        int64_t keep = 0;
        while (keep < n) {
            sum += exp((double)work[order[keep++]]);
            if (sum >= p->top_p * total) break;
        }
        n = keep;
        total = sum;
    }
    double u = uniform53(rng) * total;
    for (int64_t i = 0; i < n; i++) {
        u -= exp((double)work[order[i]]);
        if (u < 0) return order[i];
    }
    /* (rounding left u a hair above 0: the last kept token, whose share it is) */
    for (int64_t i = n - 1; i >= 0; i--)
        if (exp((double)work[order[i]]) > 0) return order[i];
    return best;
}

/* The window length for a sequence of len tokens: len rounded up to a
 * multiple of `step` (a graph for every step-th length, whose products keep
 * their shapes), at most block. */
static int64_t window_len(int64_t len, int64_t block, int64_t step) {
    const int64_t t = (len + step - 1) / step * step;
    return t < block ? t : block;
}

/* The cached path: n positions of every sample a step (the prompt in
 * chunks, then one a token), each layer's keys and values kept for the
 * positions before them (the model's own weights, read in place; the same
 * arithmetic as the graph's layers, in another order of sums). */
enum { KV_CHUNK = 64 }; /* prompt positions a step */

typedef struct kv_layer {
    const float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcp_w, *fcp_b;
} kv_layer;

typedef struct kv_cache {
    int64_t L, C, H, V, B, cap; /* cap: positions kept a sample */
    const float *wte, *wpe, *lnf_w, *lnf_b;
    kv_layer *layer;
    float *k, *v;                     /* (L, B, cap, C) */
    float *x, *h, *qkv, *att, *f, *p; /* (R, C), (R, C), (R, 3C), (R, C), (R, 4C), (cap); R = B x KV_CHUNK */
    float *logits;                    /* (B, V): each sample's last position's */
} kv_cache;

static void kv_free(kv_cache *c) {
    free(c->layer);
    st_free_aligned(c->k);
    st_free_aligned(c->v);
    free(c->x), free(c->h), free(c->qkv), free(c->att), free(c->f), free(c->p), free(c->logits);
    memset(c, 0, sizeof *c);
}

/* m's parameter `name` (with `count` elements), or NULL. */
static const float *param(const st_model *m, const char *name, int64_t count) {
    const st_tensor *t = st_params_find(&m->params, name);
    return t && t->count == count ? t->data : NULL;
}

/* A cache for B samples of up to cap positions; ST_ERR_NOMEM when it does
 * not fit (the caller goes on without it). */
static st_status kv_init(kv_cache *c, const st_model *m, int64_t B, int64_t cap) {
    memset(c, 0, sizeof *c);
    const st_config *cf = &m->cfg;
    c->L = cf->model.n_layer, c->C = cf->model.n_embd, c->H = cf->model.n_head, c->V = m->in.vocab_size;
    c->B = B, c->cap = cap;
    const int64_t L = c->L, C = c->C, V = c->V, R = B * KV_CHUNK;
    c->layer = calloc((size_t)L, sizeof *c->layer);
    const size_t cache = (size_t)(L * B * cap * C) * sizeof(float);
    c->k = st_alloc_aligned(cache);
    c->v = st_alloc_aligned(cache);
    c->x = malloc((size_t)(R * C) * sizeof(float)), c->h = malloc((size_t)(R * C) * sizeof(float));
    c->qkv = malloc((size_t)(R * 3 * C) * sizeof(float)), c->att = malloc((size_t)(R * C) * sizeof(float));
    c->f = malloc((size_t)(R * 4 * C) * sizeof(float)), c->p = malloc((size_t)cap * sizeof(float));
    c->logits = malloc((size_t)(B * V) * sizeof(float));
    if (!c->layer || !c->k || !c->v || !c->x || !c->h || !c->qkv || !c->att || !c->f || !c->p || !c->logits) {
        kv_free(c);
        return st_fail(ST_ERR_NOMEM, "out of memory for generation's cache of keys and values (%.1f MiB)",
                       2.0 * (double)cache / (1 << 20));
    }
    c->wte = param(m, "wte.weight", V * C), c->wpe = param(m, "wpe.weight", cf->model.block_size * C);
    c->lnf_w = param(m, "ln_f.weight", C), c->lnf_b = param(m, "ln_f.bias", C);
    bool ok = c->wte && c->wpe && c->lnf_w && c->lnf_b;
    for (int64_t l = 0; l < L && ok; l++) {
        char n[ST_NAME_MAX];
        kv_layer *y = &c->layer[l];
#define KV_PARAM(field, suffix, count)                                                                       \
    snprintf(n, sizeof n, "h.%lld.%s", (long long)l, suffix);                                                \
    ok = ok && (y->field = param(m, n, count)) != NULL
        KV_PARAM(ln1_w, "ln_1.weight", C);
        KV_PARAM(ln1_b, "ln_1.bias", C);
        KV_PARAM(attn_w, "attn.c_attn.weight", C * 3 * C);
        KV_PARAM(attn_b, "attn.c_attn.bias", 3 * C);
        KV_PARAM(proj_w, "attn.c_proj.weight", C * C);
        KV_PARAM(proj_b, "attn.c_proj.bias", C);
        KV_PARAM(ln2_w, "ln_2.weight", C);
        KV_PARAM(ln2_b, "ln_2.bias", C);
        KV_PARAM(fc_w, "mlp.c_fc.weight", C * 4 * C);
        KV_PARAM(fc_b, "mlp.c_fc.bias", 4 * C);
        KV_PARAM(fcp_w, "mlp.c_proj.weight", 4 * C * C);
        KV_PARAM(fcp_b, "mlp.c_proj.bias", C);
#undef KV_PARAM
    }
    if (!ok) {
        kv_free(c);
        return st_fail(ST_ERR_INTERNAL, "generation: the gpt's parameters are not where its layout puts them");
    }
    return ST_OK;
}

/* y (R, C) = layernorm of x (R, C), eps 1e-5 as the model's */
static void kv_layernorm(const float *x, const float *w, const float *b, int64_t R, int64_t C, float *y) {
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float mean = 0, var = 0;
        for (int64_t i = 0; i < C; i++) mean += xr[i];
        mean /= (float)C;
        for (int64_t i = 0; i < C; i++) var += (xr[i] - mean) * (xr[i] - mean);
        const float rs = 1.0f / sqrtf(var / (float)C + 1e-5f);
        for (int64_t i = 0; i < C; i++) y[r * C + i] = (xr[i] - mean) * rs * w[i] + b[i];
    }
}

/* y (R, N) = x (R, K) W (K, N) + b, or += when acc (the residual) */
static void kv_linear(const float *x, const float *w, const float *b, int64_t R, int64_t K, int64_t N,
                      float *y, bool acc) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < N; j++) y[r * N + j] = (acc ? y[r * N + j] : 0.0f) + b[j];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)R, (int)N, (int)K, 1.0f, x, (int)K, w, (int)N,
                1.0f, y, (int)N);
}

/* Positions pos .. pos + n - 1 (n <= KV_CHUNK, pos + n <= cap) of every
 * sample through the model: sample b's tokens tok[b * n .. b * n + n), their
 * keys and values into the cache, each attending to the positions up to
 * itself; with want, the logits of each sample's last one into c->logits. */
static void kv_step(kv_cache *c, const int32_t *tok, int64_t pos, int64_t n, bool want) {
    const int64_t B = c->B, C = c->C, H = c->H, hs = C / H, T = c->cap, R = B * n;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int64_t r = 0; r < R; r++) /* (row r: sample r / n, position pos + r % n) */
        for (int64_t i = 0; i < C; i++)
            c->x[r * C + i] = c->wte[tok[r] * C + i] + c->wpe[(pos + r % n) * C + i];
    for (int64_t l = 0; l < c->L; l++) {
        const kv_layer *y = &c->layer[l];
        kv_layernorm(c->x, y->ln1_w, y->ln1_b, R, C, c->h);
        kv_linear(c->h, y->attn_w, y->attn_b, R, C, 3 * C, c->qkv, false);
        for (int64_t b = 0; b < B; b++) {
            float *kc = c->k + ((l * B + b) * T) * C, *vc = c->v + ((l * B + b) * T) * C;
            for (int64_t j = 0; j < n; j++) {
                memcpy(kc + (pos + j) * C, c->qkv + (b * n + j) * 3 * C + C, (size_t)C * sizeof(float));
                memcpy(vc + (pos + j) * C, c->qkv + (b * n + j) * 3 * C + 2 * C, (size_t)C * sizeof(float));
            }
            for (int64_t j = 0; j < n; j++)
                for (int64_t hd = 0; hd < H; hd++) {
                    const float *q = c->qkv + (b * n + j) * 3 * C + hd * hs;
                    const int64_t last = pos + j; /* (causal: keys 0 .. last) */
                    float mx = -INFINITY, sum = 0;
                    for (int64_t t = 0; t <= last; t++) {
                        float d = 0;
                        for (int64_t i = 0; i < hs; i++)
                            d += q[i] * kc[t * C + hd * hs + i];
                        c->p[t] = d * scale;
                        mx = c->p[t] > mx ? c->p[t] : mx;
                    }
                    for (int64_t t = 0; t <= last; t++)
                        sum += c->p[t] = expf(c->p[t] - mx);
                    float *o = c->att + (b * n + j) * C + hd * hs;
                    for (int64_t i = 0; i < hs; i++)
                        o[i] = 0;
                    for (int64_t t = 0; t <= last; t++) {
                        const float w = c->p[t] / sum;
                        for (int64_t i = 0; i < hs; i++)
                            o[i] += w * vc[t * C + hd * hs + i];
                    }
                }
        }
        kv_linear(c->att, y->proj_w, y->proj_b, R, C, C, c->x, true);
        kv_layernorm(c->x, y->ln2_w, y->ln2_b, R, C, c->h);
        kv_linear(c->h, y->fc_w, y->fc_b, R, C, 4 * C, c->f, false);
        for (int64_t i = 0; i < R * 4 * C; i++) {
            const float v = c->f[i];
            c->f[i] = 0.5f * v * (1.0f + st_tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        }
        kv_linear(c->f, y->fcp_w, y->fcp_b, R, 4 * C, C, c->x, true);
    }
    if (!want) return;
    for (int64_t b = 0; b < B; b++) /* each sample's last position */
        kv_layernorm(c->x + (b * n + n - 1) * C, c->lnf_w, c->lnf_b, 1, C, c->h + b * C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)c->V, (int)C, 1.0f, c->h, (int)C, c->wte,
                (int)C, 0.0f, c->logits, (int)c->V);
}

void st_generate_config(st_config *c) {
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "off");
    snprintf(c->precision, sizeof c->precision, "fp32");
    if (strcmp(c->model.attention_kernel, "cudnn") == 0)
        snprintf(c->model.attention_kernel, sizeof c->model.attention_kernel, "flash");
}

st_status st_generate(st_model *m, const int32_t *prompt, int64_t n_prompt, const st_generate_opts *o,
                      int32_t *out, int64_t *lens) {
    if (m->kind != ST_MODEL_GPT)
        return st_fail(ST_ERR_ARG, "generation needs a gpt (this model is a %s)", m->cfg.model.type);
    st_device *dev = m->params.dev;
    const int64_t V = m->in.vocab_size, block = m->cfg.model.block_size, B = o->n_samples;
    const int64_t total = n_prompt + o->n_new;
    if (n_prompt < 1 || B < 1 || o->n_new < 0)
        return st_fail(ST_ERR_ARG, "generation: %lld prompt tokens, %lld samples, %lld new tokens",
                       (long long)n_prompt, (long long)B, (long long)o->n_new);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return st_fail(
                ST_ERR_ARG,
                "the prompt's token %lld is %d, outside the model's vocabulary of %lld tokens (0 to "
                "%lld)",
                (long long)i, prompt[i], (long long)V, (long long)(V - 1));
    for (int64_t b = 0; b < B; b++) {
        memcpy(out + b * total, prompt, (size_t)n_prompt * sizeof *prompt);
        lens[b] = n_prompt;
    }
    float *work = malloc((size_t)V * sizeof *work);
    int32_t *order = malloc((size_t)V * sizeof *order);
    st_rng *rng = malloc((size_t)B * sizeof *rng);
    bool *done = calloc((size_t)B, sizeof *done);
    /* on a device: the windows' tokens staged here, each sample's last
     * logits read back here */
    int32_t *hx = dev ? malloc((size_t)(B * block) * sizeof *hx) : NULL;
    float *hl = dev ? malloc((size_t)(B * V) * sizeof *hl) : NULL;
    st_status s =
        work && order && rng && done && (!dev || (hx && hl))
            ? ST_OK
            : st_fail(ST_ERR_NOMEM, "out of memory for generation's scratch (%lld tokens)", (long long)V);
    for (int64_t b = 0; s == ST_OK && b < B; b++)
        rng[b] = st_rng_make(o->seed, (uint64_t)b);
    st_model_graph mg;
    memset(&mg, 0, sizeof mg);
    /* the cache while the sequence fits the context (its positions are
     * absolute: past block_size every one moves, and the window is
     * recomputed); the prompt through it a position at a time */
    kv_cache kv = {0};
    int32_t *col = malloc((size_t)(B * KV_CHUNK) * sizeof *col);
    bool cached = !dev && !o->no_cache && n_prompt <= block && o->n_new > 0;
    if (s == ST_OK && !col) s = st_fail(ST_ERR_NOMEM, "out of memory for generation's scratch");
    if (s == ST_OK && cached && kv_init(&kv, m, B, total < block ? total : block) != ST_OK) {
        st_clear_error(); /* (no room for it: every token by its window, slower, the same tokens) */
        cached = false;
    }
    for (int64_t pos = 0; s == ST_OK && cached && pos < n_prompt; pos += KV_CHUNK) {
        if (o->stop && atomic_load(o->stop)) {
            s = st_fail(ST_ERR_INTERRUPTED, "generation stopped in the prompt's position %lld",
                        (long long)pos);
            break;
        }
        const int64_t n = n_prompt - pos < KV_CHUNK ? n_prompt - pos : KV_CHUNK;
        for (int64_t b = 0; b < B; b++)
            memcpy(col + b * n, prompt + pos, (size_t)n * sizeof *col);
        kv_step(&kv, col, pos, n, pos + n == n_prompt);
    }
    int64_t len = n_prompt, left = B;
    for (int64_t k = 0; s == ST_OK && k < o->n_new && left > 0; k++, len++) {
        if (o->stop && atomic_load(o->stop)) {
            s = st_fail(ST_ERR_INTERRUPTED, "generation stopped after %lld new tokens", (long long)k);
            break;
        }
        const float *logits; /* sample b's row at logits + b * stride */
        int64_t stride;
        if (cached && len <= block) { /* (kv_step made them, of position len - 1) */
            logits = kv.logits;
            stride = V;
        } else {
            /* (a device's graphs for every 64th length: each build allocates and frees device memory) */
            const int64_t T = window_len(len, block, dev ? 64 : 8), first = len > T ? len - T : 0,
                          have = len - first;
            if (mg.seq_len != T) {
                st_model_graph_free(&mg);
                s = st_model_graph_build_forward_len(m, B, T, &mg);
                if (s == ST_ERR_NOMEM && dev) /* (the graph's own message speaks of training's settings) */
                    s = st_fail(
                        ST_ERR_NOMEM,
                        "the GPU has no room for %lld sample(s)' window of %lld tokens (its logits alone "
                        "are %.0f MiB): draw fewer samples at a time (--samples), or sample on the CPU "
                        "(--set train.device=cpu)",
                        (long long)B, (long long)T, (double)(B * T * V) * 4 / 1048576.0);
                if (s != ST_OK) break;
                mg.g.training = false;
                /* the targets (the loss is computed and unread): class 0 */
                s = st_device_zero(dev, mg.y->idata, (size_t)mg.y->count * sizeof *mg.y->idata);
                if (s != ST_OK) break;
            }
            if (!mg.logits) {
                s = st_fail(ST_ERR_ARG, "generation needs the logits: model.fused_head off");
                break;
            }
            /* past the sequence, or past a stopped sample's end: token 0, which no earlier position sees */
            int32_t *x = dev ? hx : mg.x->idata;
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++)
                    x[b * T + t] = t < have && first + t < lens[b] ? out[b * total + first + t] : 0;
            if (dev) s = st_device_upload(dev, mg.x->idata, hx, (size_t)(B * T) * sizeof *hx);
            if (s == ST_OK) s = st_graph_forward(&mg.g);
            logits = mg.logits->data + (have - 1) * V;
            stride = T * V;
            /* each sample's row of the last position, read back (the copy waits for the forward) */
            for (int64_t b = 0; dev && s == ST_OK && b < B; b++)
                s = st_device_download(dev, hl + b * V, logits + b * stride, (size_t)V * sizeof *hl);
            if (dev) logits = hl, stride = V;
        }
        for (int64_t b = 0; s == ST_OK && b < B; b++) {
            if (done[b]) continue;
            const int64_t tok = st_sample_token(logits + b * stride, V, &o->p, &rng[b], work, order);
            if (tok < 0) {
                s = st_fail(
                    ST_ERR_NUMERIC,
                    "the logits of sample %lld hold a value that is not finite (NaN or inf) after %lld "
                    "tokens: the weights are damaged or diverged",
                    (long long)b, (long long)len);
                break;
            }
            out[b * total + len] = (int32_t)tok;
            lens[b] = len + 1;
            if (o->emit) s = o->emit(o->ctx, b, (int32_t)tok, k);
            if (tok == o->stop_token) done[b] = true, left--;
        }
        /* the new tokens into the cache, for the next one's logits (a stopped sample's: token 0) */
        if (s == ST_OK && cached && len + 1 <= block && k + 1 < o->n_new && left > 0) {
            for (int64_t b = 0; b < B; b++) col[b] = len < lens[b] ? out[b * total + len] : 0;
            kv_step(&kv, col, len, 1, true);
        }
    }
    kv_free(&kv);
    free(col);
    st_model_graph_free(&mg);
    free(work);
    free(order);
    free(rng);
    free(done);
    free(hx);
    free(hl);
    return s;
}
