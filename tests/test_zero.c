/* ZeRO's single-process parts (src/dist/zero.h, optimizer ranges, shard
 * files), so the sanitizer build checks them: the shard plan and its
 * padding, page release and resident bytes, the block-ordered norm, an
 * optimizer updated shard by shard equal to one updated whole, and optimizer
 * state saved as W shards (or by tensor) and loaded into any other ranges
 * (resharding), with a damaged shard named. The multi-rank paths are in
 * tests/e2e/zero_equivalence.sh and zero_checkpoint.sh. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/device.h"
#include "dist/zero.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/ckpt_optim.h"

static void test_plan(void) {
    st_shard s;
    st_shard_plan(&s, 52650, 3, 4);
    CHECK(s.shard == 13312 && s.padded == 53248 && s.lo == 39936 && s.hi == 52650, "S %lld lo %lld hi %lld",
          (long long)s.shard, (long long)s.lo, (long long)s.hi);
    st_shard_plan(&s, 10, 1, 4); /* a tiny arena: rank 0 holds it all, the others padding */
    CHECK(s.shard == ST_SHARD_ALIGN && s.lo == 10 && s.hi == 10, "tiny: S %lld lo %lld hi %lld", (long long)s.shard,
          (long long)s.lo, (long long)s.hi);
    st_shard_plan(&s, 4096, 0, 1);
    CHECK(s.shard == 4096 && s.lo == 0 && s.hi == 4096, "one rank: S %lld", (long long)s.shard);
}

static void test_release(void) {
    const int64_t n = 64 * 1024; /* 64 pages of floats */
    float *g = NULL;
    CHECK(posix_memalign((void **)&g, 4096, (size_t)n * sizeof *g) == 0, "alloc");
    for (int64_t i = 0; i < n; i++) g[i] = 1.0f;
    const int64_t full = st_pages_resident(g, n * 4);
    CHECK(full == n * 4, "resident %lld of %lld", (long long)full, (long long)(n * 4));
    st_pages_release(g, 1000, n - 5000); /* partial pages at both ends */
    const int64_t after = st_pages_resident(g, n * 4);
    CHECK(after <= n * 4 - 58 * 4096, "resident after release %lld", (long long)after);
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        ok &= g[i] == ((i >= 1000 && i < n - 5000) ? 0.0f : 1.0f);
    CHECK(ok, "release must zero exactly [1000, n - 5000)");
    free(g);
}

static void test_norm_blocks(void) {
    const int64_t n = 4 * ST_SHARD_ALIGN;
    float *g = malloc((size_t)n * sizeof *g);
    double b[4], want = 0;
    for (int64_t i = 0; i < n; i++) {
        g[i] = (float)((i % 97) - 48) * 0.01f;
        want += (double)g[i] * g[i];
    }
    CHECK_OK(st_device_block_sumsq(NULL, g, (size_t)n, ST_SHARD_ALIGN, b));
    const double got = b[0] + b[1] + b[2] + b[3];
    CHECK(!(fabs(got - want) > 1e-9 * want), "block norm %.17g want %.17g", got, want);
    free(g);
}

static st_model *make(st_config *cfg) {
    st_model_input in = {.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    st_model *m = NULL;
    CHECK_OK(st_model_create(cfg, &in, &m));
    st_model_graph mg = {0};
    CHECK_OK(st_model_graph_build(m, 2, &mg)); /* lays out the arenas */
    st_model_graph_free(&mg);
    return m;
}

/* Shards stepped one by one give the bits of the whole optimizer. */
static void test_range_step(st_config *cfg) {
    st_model *a = make(cfg), *b = make(cfg);
    st_params *pa = &a->params, *pb = &b->params;
    const int64_t P = pa->count;
    CHECK_OK(st_model_init_weights(a, 3));
    CHECK_OK(st_model_init_weights(b, 3));
    for (int64_t i = 0; i < P; i++) pa->grad[i] = pb->grad[i] = (float)((i * 7919) % 1000) * 1e-4f - 0.05f;
    st_optim whole, part[3];
    CHECK_OK(st_optim_init(&whole, cfg, pa));
    st_shard sh[3];
    for (int r = 0; r < 3; r++) {
        st_shard_plan(&sh[r], P, r, 3);
        CHECK_OK(st_optim_init_range(&part[r], cfg, pb, sh[r].lo, sh[r].hi));
    }
    for (int step = 0; step < 3; step++) {
        st_optim_step(&whole, pa, 0.01);
        for (int r = 0; r < 3; r++) st_optim_step(&part[r], pb, 0.01);
    }
    CHECK(memcmp(pa->data, pb->data, (size_t)P * sizeof(float)) == 0, "sharded steps differ from the whole");
    CHECK(st_optim_state_nbytes(&part[1]) == 2 * 4 * (sh[1].hi - sh[1].lo), "state bytes %lld",
          (long long)st_optim_state_nbytes(&part[1]));
    st_optim_free(&whole);
    for (int r = 0; r < 3; r++) st_optim_free(&part[r]);
    st_model_free(a);
    st_model_free(b);
}

/* Save the whole state as W shards (or by tensor), load it into M ranges. */
static void reshard(st_config *cfg, const char *dir, int W, int M, bool tensors) {
    st_model *m = make(cfg);
    st_params *p = &m->params;
    const int64_t P = p->count;
    st_optim whole;
    CHECK_OK(st_optim_init(&whole, cfg, p));
    for (int64_t i = 0; i < whole.count; i++) {
        whole.m[i] = (float)i;
        whole.v[i] = (float)(2 * i + 1);
    }
    whole.t = 9;
    st_ckpt_state st = {.step = 9}; /* (t counts updates: at most the steps) */
    char path[4200], name[64];
    if (tensors) {
        st_ckpt_optim_name(0, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        CHECK_OK(st_ckpt_optim_save_tensors(&whole, p, path));
        st.optim_world = 1;
    } else {
        st_shard sh;
        for (int k = 0; k < W; k++) {
            st_shard_plan(&sh, P, k, W);
            st_optim o;
            CHECK_OK(st_optim_init_range(&o, cfg, p, sh.lo, sh.hi));
            memcpy(o.m, whole.m + sh.lo, (size_t)o.count * sizeof(float));
            memcpy(o.v, whole.v + sh.lo, (size_t)o.count * sizeof(float));
            o.t = 9;
            st_ckpt_optim_name(k, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            CHECK_OK(st_ckpt_optim_save_shard(&o, path));
            st_optim_free(&o);
        }
        st.optim_sharded = true;
        st.optim_world = W;
        st.optim_shard = sh.shard;
        st.optim_count = P;
    }
    for (int r = 0; r < M; r++) {
        st_shard sh;
        st_shard_plan(&sh, P, r, M);
        st_optim o;
        CHECK_OK(st_optim_init_range(&o, cfg, p, sh.lo, sh.hi));
        CHECK_OK(st_ckpt_optim_load(dir, &st, p, &o));
        CHECK(o.t == 9, "t %lld", (long long)o.t);
        CHECK(o.count == 0 || (memcmp(o.m, whole.m + sh.lo, (size_t)o.count * 4) == 0 &&
                               memcmp(o.v, whole.v + sh.lo, (size_t)o.count * 4) == 0),
              "%s W %d into rank %d of %d: state differs", tensors ? "tensors" : "shards", W, r, M);
        st_optim_free(&o);
    }
    if (!tensors && W > 1) { /* a damaged shard is named */
        st_ckpt_optim_name(1, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        CHECK(truncate(path, 64) == 0, "truncate");
        st_optim o;
        CHECK_OK(st_optim_init(&o, cfg, p));
        CHECK_FAILS(st_ckpt_optim_load(dir, &st, p, &o), ST_ERR_FORMAT, "optim-rank1.safetensors");
        st_optim_free(&o);
    }
    st_optim_free(&whole);
    st_model_free(m);
}

/* Optimizer state by tensor that a damaged or hand-made file holds: each
 * refused, naming the file and the tensor (they loaded: a transposed
 * state as the parameter's, a t of "abc" as 0, NaN and a negative v until
 * the loss went NaN, blamed on the learning rate). */
static void damaged_state(st_config *cfg, const char *dir) {
    st_model *m = make(cfg);
    st_params *p = &m->params;
    char path[4200], name[64];
    st_ckpt_optim_name(0, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st_ckpt_state st = {.step = 9, .optim_world = 1};
    st_tensor *w = NULL; /* a matrix: its shape transposed in the file */
    for (int i = 0; i < p->n && !w; i++)
        if (p->t[i]->kind == ST_TENSOR_PARAM && p->t[i]->ndim == 2 && p->t[i]->shape[0] != p->t[i]->shape[1])
            w = p->t[i];
    CHECK(w != NULL, "a matrix parameter");
    if (!w) return;
    for (int variant = 0; variant < 6; variant++) {
        st_optim o;
        CHECK_OK(st_optim_init(&o, cfg, p));
        for (int64_t i = 0; i < o.count; i++)
            o.m[i] = 0.5f, o.v[i] = 0.25f;
        o.t = variant == 1 ? 10 : 9;
        if (variant == 2) o.m[w->offset + 3] = NAN;
        if (variant == 3) o.v[w->offset + 3] = -1.0f;
        if (variant == 4) o.v[w->offset + 3] = INFINITY;
        const int64_t d0 = w->shape[0];
        if (variant == 5) w->shape[0] = w->shape[1], w->shape[1] = d0;
        CHECK_OK(st_ckpt_optim_save_tensors(&o, p, path));
        if (variant == 5) w->shape[1] = w->shape[0], w->shape[0] = d0;
        st_optim into;
        CHECK_OK(st_optim_init(&into, cfg, p));
        const st_status s = st_ckpt_optim_load(dir, &st, p, &into);
        const char *want[] = {NULL,
                              "the optimizer's update count t \"10\" is not a whole number from 0 to the "
                              "checkpoint's 9 steps",
                              "element 3 is nan: optimizer state that is not finite",
                              "element 3 is -1: optimizer state holds a negative second moment",
                              "element 3 is inf: optimizer state that is not finite",
                              "the parameter "};
        if (!want[variant])
            CHECK(s == ST_OK && into.t == 9, "a sound state: %s", s == ST_OK ? "t" : st_last_error());
        else
            CHECK(s == ST_ERR_FORMAT && strstr(st_last_error(), want[variant]) &&
                      strstr(st_last_error(), "optim-rank0.safetensors") &&
                      (variant == 1 || strstr(st_last_error(), w->name)),
                  "variant %d: %s", variant, s == ST_OK ? "loaded" : st_last_error());
        st_optim_free(&into);
        st_optim_free(&o);
    }
    /* the same checks on the shard layout (ZeRO's): a negative v in the second of 2 shards */
    st_optim whole;
    CHECK_OK(st_optim_init(&whole, cfg, p));
    const int64_t P = p->count;
    st_shard sh;
    for (int k = 0; k < 2; k++) {
        st_shard_plan(&sh, P, k, 2);
        st_optim o;
        CHECK_OK(st_optim_init_range(&o, cfg, p, sh.lo, sh.hi));
        for (int64_t i = 0; i < o.count; i++)
            o.m[i] = 0.5f, o.v[i] = k == 1 && i == 2 ? -1.0f : 0.25f;
        o.t = 9;
        st_ckpt_optim_name(k, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        CHECK_OK(st_ckpt_optim_save_shard(&o, path));
        st_optim_free(&o);
    }
    st_ckpt_state sst = {
        .step = 9, .optim_sharded = true, .optim_world = 2, .optim_shard = sh.shard, .optim_count = P};
    CHECK_FAILS(st_ckpt_optim_load(dir, &sst, p, &whole), ST_ERR_FORMAT,
                "optim-rank1.safetensors: v element 2 is -1: optimizer state holds a negative second moment");
    st_optim_free(&whole);
    st_model_free(m);
}

int main(void) {
    test_plan();
    test_release();
    test_norm_blocks();
    st_config cfg;
    st_config_defaults(&cfg);
    snprintf(cfg.model.type, sizeof cfg.model.type, "mlp");
    cfg.model.hidden = (st_int_list){1, {40}};
    test_range_step(&cfg);
    char root[] = "/tmp/test_zero_XXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    reshard(&cfg, root, 4, 3, false);
    reshard(&cfg, root, 3, 1, false);
    reshard(&cfg, root, 1, 4, true);
    reshard(&cfg, root, 2, 5, false);
    damaged_state(&cfg, root);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "cleanup");
    return st_test_finish("test_zero");
}
