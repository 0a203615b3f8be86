/* Generation on a CUDA device with its one-position steps captured as a
 * CUDA graph and replayed (src/model/sample.c; docs/cuda.md, "Sampling"),
 * against the same steps launched kernel by kernel (st_generate_opts
 * no_graph): a tiny gpt whose matrices are scaled up (its logits, and the
 * position's part in them, far from all-equal), fp32 as generation runs.
 *   - greedy, 3 samples, all from the cache: the same tokens; every step
 *     after the first (which makes the products' plans) a replay;
 *   - a one-token prompt (its one position is the first step);
 *   - drawn at temperature 1 with a stop token that ends some samples
 *     before others: the same tokens and lengths;
 *   - past block_size (the cache, then the windows): the same tokens.
 * Before them the capture itself (test_capture, below).
 * A replay that used the position it was captured at, or the token, would
 * draw other tokens. Skips without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/device.h"
#include "model/sample.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#ifdef ST_HAVE_CUDA
enum { V = 24, BLOCK = 40, NS = 3 };

static void config(st_config *c) {
    st_config_defaults(c);
    snprintf(c->model.type, sizeof c->model.type, "gpt");
    c->model.n_layer = 2;
    c->model.n_head = 2;
    c->model.n_embd = 16;
    c->model.vocab_size = V;
    c->model.block_size = BLOCK;
    st_generate_config(c);
}

/* The tiny gpt's weights, every matrix 12 times init's, saved to path. */
static bool save_weights(const char *path) {
    st_config c;
    config(&c);
    st_model_input in = {.vocab_size = V, .seq_len = BLOCK};
    st_model *m = NULL;
    CHECK_OK(st_model_create(&c, &in, &m));
    if (!m) return false;
    CHECK_OK(st_model_init_weights(m, 7));
    for (int i = 0; i < m->params.n; i++) {
        st_tensor *t = m->params.t[i];
        /* attention's queries and keys as init made them (c_attn's weight is
         * (C, 3C), GPT-2's layout: q, k, v in its columns): scores near 0,
         * each position's values averaged over every cached one, so that a
         * replay that wrote or read the cache at another position draws
         * other tokens */
        const bool qkv = strstr(t->name, "attn.c_attn.weight") != NULL;
        if (t->ndim != 2) continue;
        const int64_t cols = t->shape[1];
        for (int64_t k = 0; k < t->count; k++)
            if (!qkv || k % cols >= 2 * cols / 3) t->data[k] *= 12;
    }
    const st_status s = st_model_save(m, path);
    CHECK_OK(s);
    st_model_free(m);
    return s == ST_OK;
}

/* st_generate with and without the graph: the same tokens and lengths;
 * the stats of the graph's run in *gs. */
static void both(st_model *dm, const char *what, const int32_t *prompt, int64_t n_prompt, st_generate_opts o,
                 st_generate_stats *gs) {
    const int64_t total = n_prompt + o.n_new;
    int32_t *a = malloc((size_t)(NS * total) * sizeof *a), *b = malloc((size_t)(NS * total) * sizeof *b);
    int64_t la[NS], lb[NS];
    st_generate_stats plain;
    memset(a, 0x7f, (size_t)(NS * total) * sizeof *a);
    memset(b, 0x7f, (size_t)(NS * total) * sizeof *b);
    o.stats = gs;
    CHECK_OK(st_generate(dm, prompt, n_prompt, &o, a, la));
    o.stats = &plain;
    o.no_graph = true;
    CHECK_OK(st_generate(dm, prompt, n_prompt, &o, b, lb));
    CHECK(plain.replayed_steps == 0, "%s: no_graph replayed %lld steps", what,
          (long long)plain.replayed_steps);
    CHECK(plain.cached_steps == gs->cached_steps, "%s: %lld cached steps, %lld with the graph", what,
          (long long)plain.cached_steps, (long long)gs->cached_steps);
    CHECK(gs->graph_note[0] == '\0', "%s: the step was not captured: %s", what, gs->graph_note);
    int stopped = 0;
    for (int64_t s = 0; s < NS; s++) {
        stopped += la[s] < total;
        CHECK(la[s] == lb[s], "%s: sample %lld has %lld tokens with the graph, %lld without", what,
              (long long)s, (long long)la[s], (long long)lb[s]);
        int64_t diff = -1;
        for (int64_t i = 0; i < la[s] && i < lb[s] && diff < 0; i++)
            if (a[s * total + i] != b[s * total + i]) diff = i;
        CHECK(diff < 0, "%s: sample %lld's token %lld is %d with the graph, %d without", what, (long long)s,
              (long long)diff, diff < 0 ? 0 : a[s * total + diff], diff < 0 ? 0 : b[s * total + diff]);
    }
    int kinds = 0; /* the tokens vary: a replay's stale input would show */
    for (int32_t v = 0; v < V; v++) {
        bool any = false;
        for (int64_t i = n_prompt; i < la[0]; i++)
            any |= a[i] == v;
        kinds += any;
    }
    CHECK(kinds >= 3 || la[0] - n_prompt < 6, "%s: only %d distinct tokens", what, kinds);
    CHECK(o.stop_token < 0 || (stopped >= 1 && stopped < NS),
          "%s: %d of %d samples stopped: the case needs some of each", what, stopped, NS);
    printf(
        "ok %s: %lld one-position steps, %lld of them replayed; the same tokens (%d of %d samples stopped)\n",
        what, (long long)gs->cached_steps, (long long)gs->replayed_steps, stopped, NS);
    free(a);
    free(b);
}

/* The capture itself (src/cuda/stream.cu), on the emulator and a GPU alike:
 * captured work does not run; each replay runs it again, a kernel and
 * copies whose pinned source is read when the replay runs; a wait for the
 * stream inside a capture fails, the capture with it, and the stream works
 * as before. On the emulator also what it refuses as CUDA does (not
 * checked on a GPU here): a copy from pageable memory, an allocation. */
static void test_capture(st_device *dev) {
    enum { N = 64, H = 32 };
    float *in = NULL, *out = NULL, *d = NULL;
    CHECK_OK(st_cuda_host_alloc(dev, N * sizeof(float), (void **)&in));
    CHECK_OK(st_cuda_host_alloc(dev, N * sizeof(float), (void **)&out));
    CHECK_OK(st_device_alloc(dev, N * sizeof(float), (void **)&d));
    if (!in || !out || !d) return;
    for (int i = 0; i < N; i++)
        in[i] = 0, out[i] = -1;
    st_cuda_graph *g = NULL;
    CHECK_OK(st_cuda_capture_begin(dev));
    CHECK_OK(st_device_fill_f32(dev, d + H, N - H, 7.0f));
    CHECK_OK(st_cuda_memcpy_async(dev, d, in, H * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    CHECK_OK(st_cuda_memcpy_async(dev, out, d, N * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    CHECK_OK(st_cuda_capture_end(dev, &g));
    CHECK_OK(st_cuda_stream_wait(dev, ST_CUDA_STREAM_COMPUTE));
    CHECK(out[0] == -1 && out[N - 1] == -1, "captured work ran (out %g, %g)", out[0], out[N - 1]);
    for (int r = 1; g && r <= 3; r++) {
        for (int i = 0; i < H; i++)
            in[i] = (float)(100 * r + i);
        for (int i = 0; i < N; i++)
            out[i] = -1;
        CHECK_OK(st_cuda_graph_launch(dev, g));
        CHECK_OK(st_cuda_stream_wait(dev, ST_CUDA_STREAM_COMPUTE));
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += out[i] != (i < H ? (float)(100 * r + i) : 7.0f);
        CHECK(bad == 0, "replay %d: %d of %d values wrong (out[0] %g, out[%d] %g)", r, bad, N, out[0], N - 1,
              out[N - 1]);
    }
    st_cuda_graph_free(g);
    g = NULL;
    /* a wait inside a capture */
    CHECK_OK(st_cuda_capture_begin(dev));
    CHECK(st_cuda_stream_wait(dev, ST_CUDA_STREAM_COMPUTE) != ST_OK,
          "a wait for a capturing stream succeeded");
    st_clear_error();
    CHECK(st_cuda_capture_end(dev, &g) != ST_OK && !g, "a capture with a wait inside made a graph");
    st_clear_error();
#ifdef ST_CUDA_EMU
    /* (the emulator's rules, as CUDA's thread-local capture mode has them) */
    float pageable[4] = {1, 2, 3, 4};
    void *more = NULL;
    CHECK_OK(st_cuda_capture_begin(dev));
    CHECK(st_cuda_memcpy_async(dev, d, pageable, sizeof pageable, ST_CUDA_STREAM_COMPUTE) != ST_OK,
          "the emulator took a copy from pageable memory into a capture");
    st_clear_error();
    CHECK(st_cuda_capture_end(dev, &g) != ST_OK && !g, "a capture with a pageable copy made a graph");
    st_clear_error();
    CHECK_OK(st_cuda_capture_begin(dev));
    CHECK(st_device_alloc(dev, 256, &more) != ST_OK, "the emulator allocated device memory inside a capture");
    st_clear_error();
    CHECK(st_cuda_capture_end(dev, &g) != ST_OK && !g, "a capture with an allocation made a graph");
    st_clear_error();
    st_device_release(dev, more);
#endif
    /* the stream as before */
    CHECK_OK(st_device_fill_f32(dev, d, N, 3.0f));
    CHECK_OK(st_device_download(dev, out, d, N * sizeof(float)));
    CHECK(out[0] == 3.0f && out[N - 1] == 3.0f, "after the failed captures: %g, %g", out[0], out[N - 1]);
    printf("ok capture: 3 replays re-read their pinned input; a wait inside a capture fails it, the stream "
           "goes on\n");
    st_device_release(dev, d);
    st_cuda_host_free(in);
    st_cuda_host_free(out);
}

int main(void) {
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) return st_test_skip("cuda sample", why);
    st_device *dev = NULL;
    if (st_device_open_cuda(0, &dev) != ST_OK) {
        fprintf(stderr, "FAIL: opening cuda:0: %s\n", st_last_error());
        return 1;
    }
    printf("device: %s\n", st_device_name(dev));
    test_capture(dev);
    char dir[] = "/tmp/st-cuda-sample-XXXXXX", path[256];
    if (!mkdtemp(dir)) {
        fprintf(stderr, "FAIL: mkdtemp\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    st_config c;
    config(&c);
    st_model_input in = {.vocab_size = V, .seq_len = BLOCK};
    st_model *dm = NULL;
    if (save_weights(path)) {
        CHECK_OK(st_model_create_inference(&c, &in, dev, &dm));
        if (dm) CHECK_OK(st_model_load(dm, path));
    }
    if (dm) {
        const int32_t prompt[3] = {5, 17, 2};
        st_generate_opts o = {
            .p = {.temperature = 0, .top_p = 1}, .n_new = 30, .n_samples = NS, .seed = 3, .stop_token = -1};
        st_generate_stats gs;
        both(dm, "greedy from the cache", prompt, 3, o, &gs);
        CHECK(gs.cached_steps == o.n_new - 1 && gs.replayed_steps == gs.cached_steps - 1,
              "greedy: %lld steps, %lld replayed; expected %lld and %lld", (long long)gs.cached_steps,
              (long long)gs.replayed_steps, (long long)(o.n_new - 1), (long long)(o.n_new - 2));
        both(dm, "a one-token prompt", prompt, 1, o, &gs);
        CHECK(gs.replayed_steps == gs.cached_steps - 1 && gs.cached_steps == o.n_new,
              "a one-token prompt: %lld steps, %lld replayed", (long long)gs.cached_steps,
              (long long)gs.replayed_steps);
        o.p.temperature = 1;
        o.stop_token = 4;
        both(dm, "drawn, with a stop token", prompt, 3, o, &gs);
        CHECK(gs.replayed_steps > 0, "drawn: no step replayed");
        o.stop_token = -1;
        o.n_new = 60; /* past the block of 40: the windows after the cache */
        both(dm, "drawn past the block", prompt, 3, o, &gs);
        CHECK(gs.cached_steps == BLOCK - 3 && gs.replayed_steps == BLOCK - 3 - 1,
              "past the block: %lld steps, %lld replayed; expected %d and %d", (long long)gs.cached_steps,
              (long long)gs.replayed_steps, BLOCK - 3, BLOCK - 3 - 1);
    }
    st_model_free(dm);
    unlink(path);
    rmdir(dir);
    st_device_free(dev);
    return st_test_finish("cuda sample");
}
#else
int main(void) { return st_test_skip("cuda sample", "built without CUDA (make CUDA=1)"); }
#endif
