/* CUDA parity of the matrix-product, embedding, normalisation, elementwise
 * and loss layers against the CPU reference (tests/cuda_parity.h). Skips
 * without a CUDA device. */
#include "cuda_parity.h"
#include "layers/layers.h"

typedef struct linear_ctx {
    int64_t B, K, N;
    bool bias, in_out;
} linear_ctx;

static st_status build_linear(st_graph *g, void *ctx) {
    const linear_ctx *c = ctx;
    st_tensor *x, *y;
    ST_TRY(st_graph_input(g, "x", ST_F32, 2, (int64_t[]){c->B, c->K}, &x));
    /* a parameter in front, so the linear's input gradient is checked too */
    st_tensor *s;
    ST_TRY(st_graph_param(g, "x.scale", 2, (int64_t[]){c->B, c->K}, ST_INIT_UNIFORM, 1.0f, false, &s));
    st_tensor *xs;
    ST_TRY(st_add(g, "x.plus", x, s, &xs));
    st_linear_opts o = {.bias = c->bias, .in_out = c->in_out};
    return st_linear(g, "fc", xs, c->N, &o, &y);
}

int main(void) {
    st_device *dev = NULL;
    int rc = cp_open(&dev);
    if (rc) return rc;
    const uint64_t seed = cp_seed();
    linear_ctx lin[] = {{8, 16, 24, true, false}, {37, 65, 33, false, true}, {128, 768, 2304, true, true}};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "linear %lldx%lld->%lld%s%s", (long long)lin[i].B, (long long)lin[i].K,
                 (long long)lin[i].N, lin[i].bias ? " bias" : "", lin[i].in_out ? " in_out" : "");
        cp_case c = {label, build_linear, NULL, &lin[i], 1e-4, 1e-5, false};
        cp_run(&c, dev, seed + i);
    }
    st_device_free(dev);
    return st_test_finish("cuda layers a");
}
