/* Text generation from a gpt (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
 * multiple of 8 (a graph for every eighth length, whose products keep
 * their shapes), at most block. */
static int64_t window_len(int64_t len, int64_t block) {
    const int64_t t = (len + 7) / 8 * 8;
    return t < block ? t : block;
}

st_status st_generate(st_model *m, const int32_t *prompt, int64_t n_prompt, const st_generate_opts *o,
                      int32_t *out, int64_t *lens) {
    if (m->kind != ST_MODEL_GPT || m->params.dev)
        return st_fail(ST_ERR_ARG, "generation needs a gpt on the host (this model is a %s%s)",
                       m->cfg.model.type, m->params.dev ? " on a device" : "");
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
    st_status s =
        work && order && rng && done
            ? ST_OK
            : st_fail(ST_ERR_NOMEM, "out of memory for generation's scratch (%lld tokens)", (long long)V);
    for (int64_t b = 0; s == ST_OK && b < B; b++)
        rng[b] = st_rng_make(o->seed, (uint64_t)b);
    st_model_graph mg;
    memset(&mg, 0, sizeof mg);
    int64_t len = n_prompt, left = B;
    for (int64_t k = 0; s == ST_OK && k < o->n_new && left > 0; k++, len++) {
        if (o->stop && atomic_load(o->stop)) {
            s = st_fail(ST_ERR_INTERRUPTED, "generation stopped after %lld new tokens", (long long)k);
            break;
        }
        const int64_t T = window_len(len, block), first = len > T ? len - T : 0, have = len - first;
        if (mg.seq_len != T) {
            st_model_graph_free(&mg);
            s = st_model_graph_build_forward_len(m, B, T, &mg);
            if (s != ST_OK) break;
            mg.g.training = false;
            if (!mg.logits) {
                s = st_fail(ST_ERR_ARG, "generation needs the logits: model.fused_head off");
                break;
            }
        }
        /* past the sequence, or past a stopped sample's end: token 0, which no earlier position sees */
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                mg.x->idata[b * T + t] = t < have && first + t < lens[b] ? out[b * total + first + t] : 0;
                mg.y->idata[b * T + t] = 0;
            }
        s = st_graph_forward(&mg.g);
        for (int64_t b = 0; s == ST_OK && b < B; b++) {
            if (done[b]) continue;
            const float *row = mg.logits->data + (b * T + have - 1) * V;
            const int64_t tok = st_sample_token(row, V, &o->p, &rng[b], work, order);
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
    }
    st_model_graph_free(&mg);
    free(work);
    free(order);
    free(rng);
    free(done);
    return s;
}
