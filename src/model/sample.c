/* Text generation from a gpt (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

/* A uniform double in [0, 1) with 53 random bits. */
static double uniform53(st_rng *r) { return (double)(st_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* The tokens' order: by work[] descending, ties by the lower token first (a
 * strict total order, so any way of selecting or sorting by it gives the
 * same tokens in the same order). Heaps of token ids: no recursion, no
 * allocation. */
static bool before(const float *w, int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); }

static void swap_ids(int32_t *o, int64_t i, int64_t j) {
    const int32_t t = o[i];
    o[i] = o[j];
    o[j] = t;
}

/* A heap whose root is the last in order (the least likely of o[0, n)). */
static void sift_last(const float *w, int32_t *o, int64_t i, int64_t n) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(w, o[c], o[c + 1])) c++;
        if (!before(w, o[i], o[c])) return;
        swap_ids(o, i, c);
        i = c;
    }
}

/* A heap whose root is the first in order (the most likely). */
static void sift_first(const float *w, int32_t *o, int64_t i, int64_t n) {
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(w, o[c + 1], o[c])) c++;
        if (!before(w, o[c], o[i])) return;
        swap_ids(o, i, c);
        i = c;
    }
}

/* The k most likely of the V tokens into o[0, k), in order: a heap of the
 * k best so far, whose root (the least likely of them) each later token
 * is compared with once, then sorted: about V + k log k comparisons,
 * against V log V for sorting them all. */
static void top_k(const float *w, int32_t *o, int64_t V, int64_t k) {
    for (int64_t i = 0; i < k; i++)
        o[i] = (int32_t)i;
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        sift_last(w, o, i, k);
    for (int64_t v = k; v < V; v++)
        if (before(w, (int32_t)v, o[0])) {
            o[0] = (int32_t)v;
            sift_last(w, o, 0, k);
        }
    for (int64_t e = k - 1; e > 0; e--) { /* (the least likely to the end, each in turn) */
        swap_ids(o, 0, e);
        sift_last(w, o, 0, e);
    }
}

/* The nucleus of all V tokens (no top-k): the fewest most likely whose
 * exp(work) sum reaches `target` (one at least), in order, at o + V - *n,
 * their sum in *sum. A heap of every token with the most likely at the
 * root, popped until the sum is reached: V + n log V comparisons, where a
 * trained model's nucleus is a few of the 50k. */
static const int32_t *nucleus(const float *w, int32_t *o, int64_t V, double target, int64_t *n, double *sum) {
    for (int64_t v = 0; v < V; v++)
        o[v] = (int32_t)v;
    for (int64_t i = V / 2 - 1; i >= 0; i--)
        sift_first(w, o, i, V);
    int64_t h = V; /* the heap is o[0, h); what was popped, o[h, V) from its end backwards */
    double s = 0;
    while (h > 0) {
        s += exp((double)w[o[0]]);
        swap_ids(o, 0, --h);
        sift_first(w, o, 0, h);
        if (s >= target) break;
    }
    for (int64_t a = h, b = V - 1; a < b; a++, b--) /* (popped last first: reversed into order) */
        swap_ids(o, a, b);
    *n = V - h;
    *sum = s;
    return o + h;
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
    /* work: logits / temperature, less the largest (exp of at most 0) */
    for (int64_t v = 0; v < V; v++)
        work[v] = (float)(((double)logits[v] - (double)logits[best]) * inv_t);
    const int32_t *kept = order; /* the tokens drawn among, n of them, in order (all: token order) */
    int64_t n = V;
    double total = 0;
    const bool whole_nucleus = !(p->top_k > 0 && p->top_k < V) && p->top_p < 1; /* (no top-k before it) */
    if (whole_nucleus) {
        for (int64_t v = 0; v < V; v++)
            total += exp((double)work[v]);
        kept = nucleus(work, order, V, p->top_p * total, &n, &total); /* (its sum, of the kept ones) */
    } else if (p->top_k > 0 && p->top_k < V) {
        n = p->top_k;
        top_k(work, order, V, n);
    } else {
        for (int64_t v = 0; v < V; v++)
            order[v] = (int32_t)v;
    }
    if (!whole_nucleus) {
        total = 0;
        for (int64_t i = 0; i < n; i++)
            total += exp((double)work[kept[i]]);
        if (p->top_p < 1) { /* the fewest of the top k whose share of them reaches top_p (one at least) */
            double sum = 0;
            int64_t keep = 0;
            while (keep < n) {
                sum += exp((double)work[kept[keep++]]);
                if (sum >= p->top_p * total) break;
            }
            n = keep;
            total = sum;
        }
    }
    double u = uniform53(rng) * total;
    for (int64_t i = 0; i < n; i++) {
        u -= exp((double)work[kept[i]]);
        if (u < 0) return kept[i];
    }
    /* (rounding left u a hair above 0: the last kept token, whose share it is) */
    for (int64_t i = n - 1; i >= 0; i--)
        if (exp((double)work[kept[i]]) > 0) return kept[i];
    return best;
}

/* The window length for a sequence of len tokens: len rounded up to a
 * multiple of `step` (a graph for every step-th length, whose products keep
 * their shapes), at most block. */
static int64_t window_len(int64_t len, int64_t block, int64_t step) {
    const int64_t t = (len + step - 1) / step * step;
    return t < block ? t : block;
}

/* The cached path: the model's decode graphs (model.h
 * st_model_graph_build_decode) over a cache of keys and values, on the
 * model's device or the host alike: the prompt in chunks of KV_CHUNK
 * positions, then one position a token, each position's keys and values
 * computed once (the same arithmetic as the graph's layers, attention's in
 * another order of sums). */
enum { KV_CHUNK = 64 }; /* prompt positions a step */

typedef struct decoder {
    st_model *m;
    st_kv_cache *kv;
    st_model_graph mg;        /* the graph of the last length run */
    float *logits;            /* (B, V): each sample's last position's, on the host (host_logits, or
                                 the captured step's pinned copy) */
    float *host_logits;       /* (malloc'd) */
    st_generate_stats *stats; /* never NULL (the caller's, or the decoder's own) */
    st_generate_stats own;
    bool no_graph; /* the one-position steps launch their kernels one by one */
#ifdef ST_HAVE_CUDA
    st_cuda_graph *graph; /* mg's one-position step, captured: the token and position in, the logits out */
    int32_t *stage;       /* pinned: the B tokens the graph copies in, then (8-aligned) the position */
    int64_t *pos_dev;     /* (device) where the graph's kernels read the position (mg.g.pos_dev) */
    float *graph_logits;  /* pinned (B, V): where the graph copies the logits */
    int warm;             /* one-position steps run before capturing (the first makes the products' plans) */
#endif
} decoder;

#ifdef ST_HAVE_CUDA
static void drop_graph(decoder *d) {
    st_device *dev = d->m->params.dev;
    st_cuda_graph_free(d->graph);
    st_cuda_host_free(d->stage);
    st_cuda_host_free(d->graph_logits);
    st_device_release(dev, d->pos_dev);
    d->graph = NULL;
    d->stage = NULL;
    d->graph_logits = NULL;
    d->pos_dev = NULL;
    d->mg.g.pos_dev = NULL;
    d->logits = d->host_logits;
    d->warm = 0; /* (a graph rebuilt: its first step runs uncaptured again) */
}

static size_t stage_pos_at(int64_t B) { return ((size_t)B * sizeof(int32_t) + 7) / 8 * 8; }

/* Capture mg's one-position step (mg built for n = 1, its plans made by a
 * step run before): copies of the staged token and position in, the
 * forward, the logits out. On a failure nothing is left of it (the caller
 * goes on without), the first failure's message kept. */
static st_status capture_step(decoder *d) {
    st_device *dev = d->m->params.dev;
    const int64_t B = d->kv->B, V = d->m->in.vocab_size;
    st_status s = st_cuda_host_alloc(dev, stage_pos_at(B) + sizeof(int64_t), (void **)&d->stage);
    if (s == ST_OK) s = st_cuda_host_alloc(dev, (size_t)(B * V) * sizeof(float), (void **)&d->graph_logits);
    if (s == ST_OK) s = st_device_alloc(dev, sizeof(int64_t), (void **)&d->pos_dev);
    if (s == ST_OK) s = st_cuda_capture_begin(dev);
    st_error_kept k; /* (the first failure's message, past the cleanup's) */
    if (s != ST_OK) {
        st_error_keep(&k, s);
        drop_graph(d);
        st_error_restore(&k);
        return s;
    }
    d->mg.g.pos_dev = d->pos_dev;
    s = st_cuda_memcpy_async(dev, d->mg.x->idata, d->stage, (size_t)B * sizeof(int32_t),
                             ST_CUDA_STREAM_COMPUTE);
    if (s == ST_OK)
        s = st_cuda_memcpy_async(dev, d->pos_dev, (char *)d->stage + stage_pos_at(B), sizeof(int64_t),
                                 ST_CUDA_STREAM_COMPUTE);
    if (s == ST_OK) s = st_graph_forward(&d->mg.g);
    if (s == ST_OK)
        s = st_cuda_memcpy_async(dev, d->graph_logits, d->mg.logits->data, (size_t)(B * V) * sizeof(float),
                                 ST_CUDA_STREAM_COMPUTE);
    st_error_keep(&k, s);
    const st_status e = st_cuda_capture_end(dev, &d->graph); /* (always: the stream leaves its capture) */
    if (s == ST_OK && e == ST_OK) return ST_OK;
    if (s == ST_OK) st_error_keep(&k, s = e);
    drop_graph(d);
    st_error_restore(&k);
    return s;
}

/* The one-position step of position pos as the captured graph's replay
 * (*done), capturing it first when it is time; *done false: the caller
 * launches the step's kernels itself (before the capture, or when it
 * failed: said once in the stats' note). */
static st_status replay_step(decoder *d, const int32_t *tok, int64_t pos, bool *done) {
    st_device *dev = d->m->params.dev;
    const int64_t B = d->kv->B;
    *done = false;
    if (!d->graph) {
        if (d->warm++ < 1) return ST_OK;
        const st_status s = capture_step(d);
        if (s != ST_OK) {
            if (st_device_lost(dev)) return s; /* (not the capture's doing: the run's error) */
            snprintf(d->stats->graph_note, sizeof d->stats->graph_note,
                     "the one-token step could not be captured as a CUDA graph (%s); each token launches its "
                     "kernels one by one (the same tokens, slower)",
                     st_last_error());
            st_clear_error();
            d->no_graph = true;
            return ST_OK;
        }
    }
    memcpy(d->stage, tok, (size_t)B * sizeof *tok);
    memcpy((char *)d->stage + stage_pos_at(B), &pos, sizeof pos);
    ST_TRY(st_cuda_graph_launch(dev, d->graph));
    ST_TRY(st_cuda_stream_wait(dev, ST_CUDA_STREAM_COMPUTE)); /* (the logits in pinned memory) */
    d->logits = d->graph_logits;
    d->stats->replayed_steps++;
    *done = true;
    return ST_OK;
}
#endif

static void dec_free(decoder *d) {
#ifdef ST_HAVE_CUDA
    if (d->m) drop_graph(d);
#endif
    st_model_graph_free(&d->mg);
    if (d->m) st_kv_cache_free(d->m, d->kv);
    free(d->host_logits);
    memset(d, 0, sizeof *d);
}

/* A cache for B samples of up to cap positions; an error (ST_ERR_NOMEM when
 * it does not fit: the caller goes on without it). */
static st_status dec_init(decoder *d, st_model *m, int64_t B, int64_t cap, const st_generate_opts *o) {
    memset(d, 0, sizeof *d);
    d->m = m;
    d->stats = o->stats ? o->stats : &d->own;
    d->no_graph = o->no_graph || !m->params.dev;
    d->host_logits = d->logits = malloc((size_t)(B * m->in.vocab_size) * sizeof *d->logits);
    if (!d->logits) return st_fail(ST_ERR_NOMEM, "out of memory for generation's logits");
    return st_kv_cache_create(m, B, cap, &d->kv);
}

/* Positions pos .. pos + n - 1 (n <= KV_CHUNK, pos + n <= cap) of every
 * sample through the model: sample b's tokens tok[b * n .. b * n + n), their
 * keys and values into the cache; with want, the logits of each sample's
 * last one into d->logits. */
static st_status dec_step(decoder *d, const int32_t *tok, int64_t pos, int64_t n, bool want) {
    st_device *dev = d->m->params.dev;
    const int64_t B = d->kv->B, V = d->m->in.vocab_size;
    if (d->mg.seq_len != n) {
#ifdef ST_HAVE_CUDA
        drop_graph(d); /* (it reads and writes the graph's tensors) */
#endif
        st_model_graph_free(&d->mg);
        ST_TRY(st_model_graph_build_decode(d->m, B, n, d->kv, true, &d->mg));
    }
    d->mg.g.training = false;
    d->mg.g.pos = pos;
    if (n == 1) d->stats->cached_steps++;
#ifdef ST_HAVE_CUDA
    if (n == 1 && want && !d->no_graph) {
        bool done;
        ST_TRY(replay_step(d, tok, pos, &done));
        if (done) return ST_OK;
    }
#endif
    d->logits = d->host_logits;
    const size_t nb = (size_t)(B * n) * sizeof *tok;
    ST_TRY(st_device_upload(dev, d->mg.x->idata, tok, nb)); /* (a memcpy on the host) */
    ST_TRY(st_graph_forward(&d->mg.g));
    if (!want) return ST_OK;
    /* (B, 1, V): the graph's head takes the last rows alone; on a device
     * the copy waits for the forward */
    return st_device_download(dev, d->logits, d->mg.logits->data, (size_t)(B * V) * sizeof *d->logits);
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
    if (o->stats) memset(o->stats, 0, sizeof *o->stats);
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
    decoder kv = {0};
    int32_t *col = malloc((size_t)(B * KV_CHUNK) * sizeof *col);
    bool cached = !o->no_cache && n_prompt <= block && o->n_new > 0;
    if (s == ST_OK && !col) s = st_fail(ST_ERR_NOMEM, "out of memory for generation's scratch");
    if (s == ST_OK && cached) {
        const st_status ks = dec_init(&kv, m, B, total < block ? total : block, o);
        if (ks == ST_ERR_NOMEM) { /* (no room for it: every token by its window, slower, the same tokens) */
            st_clear_error();
            dec_free(&kv);
            cached = false;
        } else {
            s = ks;
        }
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
        s = dec_step(&kv, col, pos, n, pos + n == n_prompt);
        /* (the first graph has no room: by windows, as above) */
        if (s == ST_ERR_NOMEM && pos == 0) {
            st_clear_error();
            dec_free(&kv);
            cached = false;
            s = ST_OK;
        }
    }
    int64_t len = n_prompt, left = B;
    for (int64_t k = 0; s == ST_OK && k < o->n_new && left > 0; k++, len++) {
        if (o->stop && atomic_load(o->stop)) {
            s = st_fail(ST_ERR_INTERRUPTED, "generation stopped after %lld new tokens", (long long)k);
            break;
        }
        const float *logits; /* sample b's row at logits + b * stride */
        int64_t stride;
        if (cached && len <= block) { /* (dec_step made them, of position len - 1) */
            logits = kv.logits;
            stride = V;
        } else {
            if (cached) { /* past the block: the cache is done with; its memory to the windows */
                dec_free(&kv);
                cached = false;
            }
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
                        "are %.0f MiB)%s%s",
                        (long long)B, (long long)T, (double)(B * T * V) * 4 / 1048576.0,
                        o->nomem_advice ? ": " : "", o->nomem_advice ? o->nomem_advice : "");
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
            s = dec_step(&kv, col, len, 1, true);
        }
    }
    dec_free(&kv);
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
