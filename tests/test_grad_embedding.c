/* Token embedding: gradient check (repeated tokens, tied to an output layer),
 * forward values, deterministic scatter-add, and out-of-range token errors. */
#include <omp.h>

#include "gradcheck.h"
#include "layers/layers.h"

static void fill_tokens(st_tensor *idx, int64_t V, uint64_t seed) {
    st_rng r = st_rng_make(seed, 5);
    for (int64_t i = 0; i < idx->count; i++)
        idx->idata[i] = (int32_t)st_rng_below(&r, (uint64_t)V);
}

/* idx (B, T) -> emb (B, T, C); with `tied`, then logits = emb W^T through the
 * same weight, so the weight gradient must add both paths. */
static void check_embedding(int64_t B, int64_t T, int64_t V, int64_t C, bool tied) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t is[2] = {B, T};
    st_tensor *idx, *y, *w = NULL, *z;
    CHECK_OK(st_graph_input(&g, "idx", ST_I32, 2, is, &idx));
    CHECK_OK(st_embedding(&g, "wte", idx, V, C, 0.5f, &y, &w));
    CHECK(w && w == st_params_find(&p, "wte.weight") && w->shape[0] == V && w->shape[1] == C,
          "weight out-parameter");
    CHECK(w && w->decay && w->init == ST_INIT_NORMAL && w->init_scale == 0.5f, "weight init");
    CHECK(y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == C, "output shape");
    z = y;
    if (tied) CHECK_OK(st_linear_tied(&g, "lm_head", y, w, &z));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 3);
    fill_tokens(idx, V, (uint64_t)(B * 100 + T)); /* V small: tokens repeat */
    CHECK_OK(st_graph_forward(&g));
    int bad = 0;
    for (int64_t i = 0; i < B * T; i++)
        for (int64_t c = 0; c < C; c++)
            bad += y->data[i * C + c] != w->data[idx->idata[i] * C + c];
    CHECK(bad == 0, "%d outputs differ from weight[idx]", bad);
    char label[128];
    snprintf(label, sizeof label, "embedding B%lld T%lld V%lld C%lld tied%d", (long long)B, (long long)T,
             (long long)V, (long long)C, tied);
    gradcheck(label, &g, z, p.t, p.n, 13, 96, 1e-2, 1e-2, 1e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

/* The scatter-add must give bit-identical sums for any thread count. */
static void check_deterministic(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t is[2] = {4, 64};
    st_tensor *idx, *y, *w;
    CHECK_OK(st_graph_input(&g, "idx", ST_I32, 2, is, &idx));
    CHECK_OK(st_embedding(&g, "wte", idx, 7, 100, 0.1f, &y, &w));
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    fill_tokens(idx, 7, 9);
    gc_same_bits_across_threads("embedding", &g, y, w->grad, w->count, 2);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t is[2] = {2, 5};
    st_tensor *idx, *fidx, *y;
    CHECK_OK(st_graph_input(&g, "idx", ST_I32, 2, is, &idx));
    CHECK_OK(st_graph_input(&g, "fidx", ST_F32, 2, is, &fidx));
    CHECK_FAILS(st_embedding(&g, "bad", fidx, 10, 4, 0.1f, &y, NULL), ST_ERR_ARG, "int32");
    CHECK_FAILS(st_embedding(&g, "bad", idx, 0, 4, 0.1f, &y, NULL), ST_ERR_ARG, "vocab 0");
    CHECK_FAILS(st_embedding(&g, "bad", idx, 10, -1, 0.1f, &y, NULL), ST_ERR_ARG, "dim -1");
    CHECK_OK(st_embedding(&g, "wte", idx, 10, 4, 0.1f, &y, NULL)); /* weight out-parameter may be NULL */
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 1);
    idx->idata[1 * 5 + 3] = 10;
    CHECK_FAILS(st_graph_forward(&g), ST_ERR_ARG, "embedding wte: token 10 at position [1, 3] of idx");
    CHECK(strstr(st_last_error(), "[0, 10)"), "message names the vocabulary: %s", st_last_error());
    idx->idata[1 * 5 + 3] = 0;
    idx->idata[4] = -1;
    CHECK_FAILS(st_graph_forward(&g), ST_ERR_ARG, "token -1 at position [0, 4]");
    idx->idata[4] = 9;
    CHECK_OK(st_graph_forward(&g));
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_embedding(2, 3, 5, 4, false);
    check_embedding(1, 7, 3, 9, false); /* batch of 1, odd sizes */
    check_embedding(3, 5, 11, 37, false);
    check_embedding(2, 4, 6, 5, true);
    check_deterministic();
    check_errors();
    return st_test_finish("test_grad_embedding");
}
