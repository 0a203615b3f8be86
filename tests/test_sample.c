/* Generation (src/model/sample.h): the token draw against the distribution
 * it should follow (temperature, top-k, top-p, computed here in double),
 * greedy's ties and a non-finite logit; the draw's selection of the top-k
 * and the nucleus (heaps) against every token sorted, draw for draw, at a
 * 50k vocabulary and at one of few distinct logits (ties everywhere); and
 * st_generate's windows (padded
 * to a multiple of 8 tokens, then sliding past block_size) against a graph of
 * exactly the sequence's length, token by token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/sample.h"

/* The draw as st_sample_token makes it, with every token sorted (qsort)
 * instead of its heaps: the reference for test_selection. */
static const float *ref_w;
static int ref_cmp(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_w[x] != ref_w[y]) return ref_w[x] > ref_w[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int64_t ref_sample(const float *logits, int64_t V, const st_sample_params *p, st_rng *rng, float *w,
                          int32_t *o) {
    int64_t best = 0;
    for (int64_t v = 0; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (p->temperature <= 0 || p->top_k == 1) return best;
    for (int64_t v = 0; v < V; v++) {
        w[v] = (float)(((double)logits[v] - (double)logits[best]) * (1.0 / p->temperature));
        o[v] = (int32_t)v;
    }
    const bool k = p->top_k > 0 && p->top_k < V;
    int64_t n = k ? p->top_k : V;
    double total = 0;
    for (int64_t v = 0; v < n; v++) /* (top-k: its tokens in order, below; else every token in token order) */
        total += k ? 0 : exp((double)w[v]);
    if (k || p->top_p < 1) {
        ref_w = w;
        qsort(o, (size_t)V, sizeof *o, ref_cmp);
    }
    for (int64_t i = 0; k && i < n; i++)
        total += exp((double)w[o[i]]);
    if (p->top_p < 1) {
        double sum = 0;
        int64_t keep = 0;
        while (keep < n) {
            sum += exp((double)w[o[keep++]]);
            if (sum >= p->top_p * total) break;
        }
        n = keep;
        total = sum;
    }
    double u = (double)(st_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    for (int64_t i = 0; i < n; i++) {
        u -= exp((double)w[o[i]]);
        if (u < 0) return o[i];
    }
    for (int64_t i = n - 1; i >= 0; i--)
        if (exp((double)w[o[i]]) > 0) return o[i];
    return best;
}

/* st_sample_token's top-k (a heap of the k best) and nucleus (a heap
 * popped until the share is reached) against sorting every token: the same
 * token from the same random stream, draw for draw. */
static void test_selection(void) {
    const int64_t Vs[2] = {50257, 3000};
    const st_sample_params ps[] = {{1, 200, 1},   {0.8, 40, 1},     {1, 0, 0.9},  {1.5, 0, 0.5},
                                   {1, 50, 0.95}, {0.7, 1000, 0.3}, {1, 2999, 1}, {1, 0, 0.999},
                                   {1, 0, 1},     {2, 3, 1}};
    const int np = (int)(sizeof ps / sizeof ps[0]);
    float *l = malloc(50257 * sizeof *l), *w = malloc(50257 * sizeof *w), *rw = malloc(50257 * sizeof *rw);
    int32_t *o = malloc(50257 * sizeof *o), *ro = malloc(50257 * sizeof *ro);
    if (!l || !w || !rw || !o || !ro) {
        CHECK(false, "out of memory");
        return;
    }
    for (int vi = 0; vi < 2; vi++) {
        const int64_t V = Vs[vi];
        st_rng g = st_rng_make(77, (uint64_t)vi);
        for (int64_t v = 0; v < V;
             v++) { /* 50k: a peaked spread; 3000: 12 distinct values (ties everywhere) */
            const double x = (double)(st_rng_next(&g) >> 11) / 9007199254740992.0;
            l[v] = vi == 0 ? (float)(12 * x * x * x) : (float)floor(12 * x) / 3.0f;
        }
        for (int c = 0; c < np; c++) {
            st_rng a = st_rng_make(5, (uint64_t)c), b = a;
            int same = 0, kinds = 0;
            int64_t last = -1;
            for (int d = 0; d < 60; d++) {
                const int64_t t = st_sample_token(l, V, &ps[c], &a, w, o),
                              r = ref_sample(l, V, &ps[c], &b, rw, ro);
                same += t == r;
                kinds += t != last;
                last = t;
            }
            CHECK(same == 60,
                  "V %lld, temperature %g, top-k %lld, top-p %g: %d of 60 draws as every token sorted gives",
                  (long long)V, ps[c].temperature, (long long)ps[c].top_k, ps[c].top_p, same);
            CHECK(kinds > 1 || ps[c].top_p <= 0.3, "V %lld, case %d: one token drawn 60 times", (long long)V,
                  c);
        }
    }
    free(l);
    free(w);
    free(rw);
    free(o);
    free(ro);
}

/* Draw n tokens from logits (V <= 8) and check each token's frequency
 * against p within 5 standard deviations, and that a token of p 0 never
 * comes. */
static void check_draws(const char *what, const float *logits, int V, const st_sample_params *sp,
                        const double *p) {
    enum { N = 60000 };
    int64_t count[8] = {0};
    float work[8];
    int32_t order[8];
    st_rng r = st_rng_make(11, 3);
    for (int i = 0; i < N; i++) {
        const int64_t t = st_sample_token(logits, V, sp, &r, work, order);
        CHECK(t >= 0 && t < V, "%s: token %lld", what, (long long)t);
        if (t >= 0 && t < V) count[t]++;
    }
    for (int v = 0; v < V; v++) {
        const double f = (double)count[v] / N, sd = sqrt(p[v] * (1 - p[v]) / N);
        if (p[v] == 0)
            CHECK(count[v] == 0, "%s: token %d drawn %lld times, outside the kept set", what, v,
                  (long long)count[v]);
        else
            CHECK(fabs(f - p[v]) <= 5 * sd, "%s: token %d drawn at %.5f, expected %.5f (sd %.5f)", what, v, f,
                  p[v], sd);
    }
}

/* softmax(logits / t) over the tokens keep[] marks, into p. */
static void softmax_kept(const float *logits, int V, double t, const bool *keep, double *p) {
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        if (keep[v] && logits[v] > mx) mx = logits[v];
    for (int v = 0; v < V; v++)
        z += keep[v] ? exp((logits[v] - mx) / t) : 0;
    for (int v = 0; v < V; v++)
        p[v] = keep[v] ? exp((logits[v] - mx) / t) / z : 0;
}

static void test_draws(void) {
    /* sorted descending by construction only for reading: the draw sorts itself */
    const float l[6] = {0.5f, 2.0f, -1.0f, 1.0f, -3.0f, 0.0f}; /* order: 1, 3, 0, 5, 2, 4 */
    const int V = 6;
    double p[6];
    bool all[6] = {1, 1, 1, 1, 1, 1};
    softmax_kept(l, V, 1.0, all, p);
    check_draws("temperature 1", l, V, &(st_sample_params){.temperature = 1, .top_p = 1}, p);
    softmax_kept(l, V, 0.7, all, p);
    check_draws("temperature 0.7", l, V, &(st_sample_params){.temperature = 0.7, .top_p = 1}, p);
    softmax_kept(l, V, 2.5, all, p);
    check_draws("temperature 2.5", l, V, &(st_sample_params){.temperature = 2.5, .top_p = 1}, p);
    bool top3[6] = {1, 1, 0, 1, 0, 0};
    softmax_kept(l, V, 1.0, top3, p);
    check_draws("top-k 3", l, V, &(st_sample_params){.temperature = 1, .top_k = 3, .top_p = 1}, p);
    /* top-p 0.8 at temperature 1: probabilities 0.5508, 0.2026, 0.1229, 0.0745, ...: the first three reach
     * 0.876 >= 0.8, the first two 0.753 do not */
    softmax_kept(l, V, 1.0, all, p);
    CHECK(p[1] + p[3] < 0.8 && p[1] + p[3] + p[0] >= 0.8, "the top-p case's nucleus is 3 tokens (%.4f, %.4f)",
          p[1] + p[3], p[1] + p[3] + p[0]);
    softmax_kept(l, V, 1.0, top3, p);
    check_draws("top-p 0.8", l, V, &(st_sample_params){.temperature = 1, .top_p = 0.8}, p);
    /* top-k 4, then top-p 0.7 of those four: 0.5947, 0.2188, ...: two tokens */
    bool top2[6] = {0, 1, 0, 1, 0, 0};
    softmax_kept(l, V, 1.0, top2, p);
    check_draws("top-k 4, top-p 0.7", l, V, &(st_sample_params){.temperature = 1, .top_k = 4, .top_p = 0.7},
                p);
    /* top-p smaller than the first token's share: that token alone */
    bool top1[6] = {0, 1, 0, 0, 0, 0};
    softmax_kept(l, V, 1.0, top1, p);
    check_draws("top-p 0.1", l, V, &(st_sample_params){.temperature = 1, .top_p = 0.1}, p);

    float work[6];
    int32_t order[6];
    st_rng r = st_rng_make(1, 1);
    const st_sample_params greedy = {.temperature = 0, .top_p = 1};
    CHECK(st_sample_token(l, V, &greedy, &r, work, order) == 1, "greedy takes the largest logit");
    const float tie[4] = {1, 3, 3, 2};
    CHECK(st_sample_token(tie, 4, &greedy, &r, work, order) == 1, "greedy's tie goes to the lower token");
    CHECK(st_sample_token(tie, 4, &(st_sample_params){.temperature = 1, .top_k = 1, .top_p = 1}, &r, work,
                          order) == 1,
          "top-k 1 is greedy");
    const float bad[3] = {0, NAN, 1}, inf[3] = {0, INFINITY, 1};
    CHECK(st_sample_token(bad, 3, &greedy, &r, work, order) == -1, "a NaN logit is refused");
    CHECK(st_sample_token(inf, 3, &(st_sample_params){.temperature = 1, .top_p = 1}, &r, work, order) == -1,
          "an infinite logit is refused");
    /* -FLT_MAX-like logits far below the rest: never drawn, no NaN from exp */
    const float far[3] = {-1e30f, 0, -1e30f};
    for (int i = 0; i < 1000; i++)
        CHECK(st_sample_token(far, 3, &(st_sample_params){.temperature = 0.01, .top_p = 1}, &r, work,
                              order) == 1,
              "a token of probability 0 drawn");
}

typedef struct seen {
    int64_t calls, last_n[2];
} seen;

static st_status count_emit(void *ctx, int64_t b, int32_t tok, int64_t n) {
    seen *s = ctx;
    (void)tok;
    s->calls++;
    if (b < 2) s->last_n[b] = n;
    return ST_OK;
}

static st_model *tiny_gpt(int64_t vocab, int64_t block) {
    st_config c;
    st_config_defaults(&c);
    snprintf(c.model.type, sizeof c.model.type, "gpt");
    snprintf(c.model.fused_head, sizeof c.model.fused_head, "off");
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.vocab_size = vocab;
    c.model.block_size = block;
    st_model_input in = {.vocab_size = vocab, .seq_len = block};
    st_model *m = NULL;
    CHECK_OK(st_model_create(&c, &in, &m));
    if (!m) return NULL;
    CHECK_OK(st_model_init_weights(m, 5));
    /* activations of order 1 (init's 0.02 leaves attention's scores and the logits all about 0, and a
     * mistake in them unseen): every matrix 12 times larger */
    for (int i = 0; i < m->params.n; i++)
        if (m->params.t[i]->ndim == 2)
            for (int64_t k = 0; k < m->params.t[i]->count; k++)
                m->params.t[i]->data[k] *= 12;
    return m;
}

/* st_generate greedy against, at every step, a graph of exactly the
 * context's length (no padding, no window rounding): the token it chose
 * has the largest logit there, to rounding. With the cache of keys and
 * values while the sequence fits block_size (then the windows), or the
 * windows alone (no_cache). */
static void test_windows(bool no_cache) {
    const int64_t V = 24, block = 40, n_prompt = 3, n_new = 70; /* windows 8, 16, ..., 40, then sliding */
    st_model *m = tiny_gpt(V, block);
    if (!m) return;
    const int32_t prompt[3] = {5, 17, 2};
    int32_t out[3 * (3 + 70)];
    int64_t lens[3];
    seen sn = {0};
    st_generate_opts o = {.p = {.temperature = 0, .top_p = 1},
                          .n_new = n_new,
                          .n_samples = 3,
                          .seed = 9,
                          .stop_token = -1,
                          .emit = count_emit,
                          .ctx = &sn,
                          .no_cache = no_cache};
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, out, lens));
    CHECK(sn.calls == 3 * n_new && sn.last_n[1] == n_new - 1, "emitted %lld tokens, the last n %lld",
          (long long)sn.calls, (long long)sn.last_n[1]);
    const int64_t total = n_prompt + n_new;
    for (int64_t b = 0; b < 3; b++) {
        CHECK(lens[b] == total, "sample %lld has %lld tokens", (long long)b, (long long)lens[b]);
        CHECK(!memcmp(out + b * total, prompt, sizeof prompt), "sample %lld starts with the prompt",
              (long long)b);
        /* greedy: every sample the same */
        CHECK(!memcmp(out + b * total, out, (size_t)total * sizeof *out), "greedy sample %lld differs",
              (long long)b);
    }
    int64_t decisive = 0; /* steps whose largest logit led the next by more than 1e-2 */
    for (int64_t len = n_prompt; len < total; len++) {
        const int64_t first = len > block ? len - block : 0, T = len - first;
        st_model_graph mg;
        CHECK_OK(st_model_graph_build_forward_len(m, 1, T, &mg));
        if (!mg.logits) break;
        mg.g.training = false;
        for (int64_t t = 0; t < T; t++)
            mg.x->idata[t] = out[first + t], mg.y->idata[t] = 0;
        CHECK_OK(st_graph_forward(&mg.g));
        const float *row = mg.logits->data + (T - 1) * V;
        float mx = row[0];
        for (int64_t v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        float second = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            second = row[v] < mx && row[v] > second ? row[v] : second;
        decisive += mx - second > 1e-2f;
        const float chosen = row[out[len]];
        CHECK(chosen >= mx - 1e-4f * (1 + fabsf(mx)), "%s: step %lld: token %d's logit %g, the largest %g",
              no_cache ? "windows" : "cache", (long long)len, out[len], chosen, mx);
        st_model_graph_free(&mg);
    }
    /* the logits differed enough to mean something */
    CHECK(decisive >= n_new / 2, "only %lld of %lld steps had a clear largest logit", (long long)decisive,
          (long long)n_new);
    int kinds = 0;
    for (int64_t v = 0; v < V; v++) {
        bool any = false;
        for (int64_t i = n_prompt; i < total; i++)
            any |= out[i] == v;
        kinds += any;
    }
    CHECK(kinds >= 2, "greedy made only %d distinct tokens", kinds);

    /* drawn at temperature 1: the same seed, the same tokens; samples differ from each other */
    o.p.temperature = 1;
    int32_t again[3 * (3 + 70)];
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, out, lens));
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, again, lens));
    CHECK(!memcmp(out, again, sizeof out), "the same seed drew other tokens");
    /* ... and the other path (cache or windows) draws them too: the same distributions, to rounding */
    o.no_cache = !no_cache;
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, again, lens));
    o.no_cache = no_cache;
    CHECK(!memcmp(out, again, sizeof out), "the cache and the windows drew other tokens from the same seed");
    CHECK(memcmp(out, out + total, (size_t)total * sizeof *out) != 0, "samples 0 and 1 drew the same tokens");

    /* a stop token ends its sample where it is drawn, token included */
    o.p.temperature = 0;
    o.stop_token = -1;
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, out, lens));
    o.stop_token = out[n_prompt + 2]; /* (its first appearance may be earlier) */
    int64_t at = n_prompt;
    while (out[at] != o.stop_token)
        at++;
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, again, lens));
    CHECK(lens[0] == at + 1 && again[at] == o.stop_token, "stopped at %lld tokens, expected %lld",
          (long long)lens[0], (long long)at + 1);

    /* drawn, with a stop token that ends some samples before others: the
     * stopped ones' memory past their end (poisoned) is never read */
    o.p.temperature = 1;
    o.stop_token = -1;
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, again, lens));
    for (int64_t i = n_prompt; i < total && o.stop_token < 0; i++) { /* one sample 0 draws and sample 1 not */
        bool in1 = false;
        for (int64_t j = n_prompt; j < total; j++)
            in1 |= again[total + j] == again[i];
        if (!in1) o.stop_token = again[i];
    }
    CHECK(o.stop_token >= 0, "samples 0 and 1 drew the same set of tokens");
    memset(out, 0x7f, sizeof out);
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, out, lens));
    int stopped = 0;
    for (int64_t b = 0; b < 3; b++) {
        const bool ended = lens[b] < total;
        stopped += ended;
        CHECK(!ended || out[b * total + lens[b] - 1] == o.stop_token,
              "sample %lld ended at %lld tokens on %d", (long long)b, (long long)lens[b],
              out[b * total + lens[b] - 1]);
        for (int64_t i = n_prompt; i < lens[b] - 1; i++)
            CHECK(out[b * total + i] != o.stop_token, "sample %lld went on past its stop token",
                  (long long)b);
    }
    CHECK(stopped >= 1 && stopped < 3, "%d of 3 samples stopped: the case needs some of each", stopped);

    /* a prompt token outside the vocabulary */
    const int32_t badp[2] = {1, (int32_t)V};
    CHECK_FAILS(st_generate(m, badp, 2, &o, out, lens), ST_ERR_ARG, "outside the model's vocabulary of 24");
    st_model_free(m);
}

/* A prompt longer than the cache's chunk (130 tokens: steps of 64, 64 and
 * 2 positions) and a cache sized to the run (136 of block 160): the
 * cached and windowed paths draw the same tokens, greedy and at
 * temperature 1, and the greedy ones are the exact-length graph's. */
static void test_long_prompt(void) {
    const int64_t V = 24, block = 160, n_prompt = 130, n_new = 6;
    st_model *m = tiny_gpt(V, block);
    if (!m) return;
    int32_t prompt[130], a[2 * 136], b[2 * 136];
    int64_t lens[2];
    st_rng r = st_rng_make(4, 4);
    for (int64_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)st_rng_below(&r, (uint64_t)V);
    for (int temp = 0; temp < 2; temp++) {
        st_generate_opts o = {.p = {.temperature = temp, .top_p = 1},
                              .n_new = n_new,
                              .n_samples = 2,
                              .seed = 3,
                              .stop_token = -1};
        CHECK_OK(st_generate(m, prompt, n_prompt, &o, a, lens));
        o.no_cache = true;
        CHECK_OK(st_generate(m, prompt, n_prompt, &o, b, lens));
        CHECK(!memcmp(a, b, sizeof a),
              "a 130-token prompt at temperature %d: the cache and the windows differ", temp);
    }
    st_model_graph mg; /* the first greedy token against the exact-length graph (a holds temperature 1's) */
    st_generate_opts o = {.p = {.temperature = 0, .top_p = 1}, .n_new = 1, .n_samples = 1, .stop_token = -1};
    CHECK_OK(st_generate(m, prompt, n_prompt, &o, a, lens));
    CHECK_OK(st_model_graph_build_forward_len(m, 1, n_prompt, &mg));
    if (mg.logits) {
        mg.g.training = false;
        for (int64_t t = 0; t < n_prompt; t++)
            mg.x->idata[t] = prompt[t], mg.y->idata[t] = 0;
        CHECK_OK(st_graph_forward(&mg.g));
        const float *row = mg.logits->data + (n_prompt - 1) * V;
        float mx = row[0];
        for (int64_t v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        CHECK(row[a[n_prompt]] >= mx - 1e-4f * (1 + fabsf(mx)),
              "after a 130-token prompt: token %d's logit %g, the "
              "largest %g",
              a[n_prompt], row[a[n_prompt]], mx);
    }
    st_model_graph_free(&mg);
    st_model_free(m);
}

int main(void) {
    test_draws();
    test_selection();
    test_windows(false);
    test_windows(true);
    test_long_prompt();
    return st_test_finish("test_sample");
}
