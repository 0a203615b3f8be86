/* cuDNN's fused attention through cudnn-frontend's SDPA graphs
 * (attention_cudnn.h). One file, host code only, compiled by the host
 * compiler in builds with ST_HAVE_CUDNN.
 *
 * The tensors as cuDNN sees them, (B, nh, T, hs) with strides, all views of
 * the graph's own arrays: Q, K, V the head columns of qkv (B, T, 3C), one
 * token 3C elements after the previous, K's C and V's 2C elements after Q's
 * start; y, dy (B, T, C) likewise with C; dQ, dK, dV into dqkv as Q, K, V
 * are in qkv; the stats (B, nh, T, 1) fp32, contiguous, our lse. The mask
 * is causal from the top left (query i sees keys 0..i), the scale is baked
 * into the graph (the shape's key holds it). Products in bf16 with fp32
 * accumulation and fp32 softmax. */
extern "C" {
#include "scaletrain/status.h" /* C declarations, included once here */
}
#include "attention_cudnn.h"
#include "libs.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

extern "C" const char *st_cuda_lost_hint(cudaError_t e); /* device.cu (common.cuh, which is CUDA's) */

namespace fe = cudnn_frontend;

namespace {

enum uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV };

struct graphs {
    st_cudnn_sdpa s;
    std::shared_ptr<fe::graph::Graph> fwd, bwd; /* NULL: cuDNN cannot take that pass (or not asked yet) */
    int64_t wf = 0, wb = 0;                     /* their workspaces, bytes */
    bool bwd_tried = false;                     /* the backward graph was asked for */
};

bool same(const st_cudnn_sdpa &a, const st_cudnn_sdpa &b) {
    return a.B == b.B && a.T == b.T && a.nh == b.nh && a.hs == b.hs && a.scale == b.scale;
}

/* qkv's head view at element offset 0 (Q), C (K) or 2C (V), and y's */
std::vector<int64_t> dims(const st_cudnn_sdpa &s) { return {s.B, s.nh, s.T, s.hs}; }
std::vector<int64_t> qkv_strides(const st_cudnn_sdpa &s) {
    const int64_t C3 = 3 * s.nh * s.hs;
    return {s.T * C3, s.hs, C3, 1};
}
std::vector<int64_t> y_strides(const st_cudnn_sdpa &s) {
    const int64_t C = s.nh * s.hs;
    return {s.T * C, s.hs, C, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph &g, const char *name, int64_t id,
                                                    std::vector<int64_t> d, std::vector<int64_t> st) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(id).set_dim(d).set_stride(st));
}

/* sm_version 0: the current device's (read when the graph is checked) */
std::shared_ptr<fe::graph::Graph> new_graph(int sm_version) {
    auto g = std::make_shared<fe::graph::Graph>();
    if (sm_version) g->set_sm_version(sm_version); /* before the nodes, which copy it */
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

/* The stats, our lse: (B, nh, T, 1) fp32, contiguous; forward's output,
 * backward's input */
fe::graph::Tensor_attributes &stats_layout(fe::graph::Tensor_attributes &t, const st_cudnn_sdpa &s) {
    return t.set_uid(STATS)
        .set_dim({s.B, s.nh, s.T, 1})
        .set_stride({s.nh * s.T, s.T, 1, 1})
        .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> forward_graph(const st_cudnn_sdpa &s, int sm_version = 0) {
    auto g = new_graph(sm_version);
    auto q = input(*g, "Q", Q, dims(s), qkv_strides(s));
    auto k = input(*g, "K", K, dims(s), qkv_strides(s));
    auto v = input(*g, "V", V, dims(s), qkv_strides(s));
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("scaletrain attention forward")
                   .set_generate_stats(true)
                   .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                   .set_diagonal_band_right_bound(0)
                   .set_attn_scale(s.scale);
    auto [o, stats] = g->sdpa(q, k, v, opt);
    o->set_output(true).set_uid(O).set_dim(dims(s)).set_stride(y_strides(s));
    stats_layout(stats->set_output(true), s);
    return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const st_cudnn_sdpa &s, int sm_version = 0) {
    auto g = new_graph(sm_version);
    auto q = input(*g, "Q", Q, dims(s), qkv_strides(s));
    auto k = input(*g, "K", K, dims(s), qkv_strides(s));
    auto v = input(*g, "V", V, dims(s), qkv_strides(s));
    auto o = input(*g, "O", O, dims(s), y_strides(s));
    auto d_o = input(*g, "dO", DO, dims(s), y_strides(s));
    fe::graph::Tensor_attributes st;
    auto stats = g->tensor(stats_layout(st.set_name("stats"), s));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("scaletrain attention backward")
                   .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                   .set_diagonal_band_right_bound(0)
                   .set_attn_scale(s.scale)
                   .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, opt);
    dq->set_output(true).set_uid(DQ).set_dim(dims(s)).set_stride(qkv_strides(s));
    dk->set_output(true).set_uid(DK).set_dim(dims(s)).set_stride(qkv_strides(s));
    dv->set_output(true).set_uid(DV).set_dim(dims(s)).set_stride(qkv_strides(s));
    return g;
}

std::string shape_name(const st_cudnn_sdpa &s) {
    return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", " + std::to_string(s.nh) +
           " heads of " + std::to_string(s.hs);
}

/* validate, lower, pick the heuristic's engine, build it; ST_OK or why not */
st_status build(fe::graph::Graph &g, cudnnHandle_t h, const char *pass, const st_cudnn_sdpa &s, int64_t *ws) {
    fe::error_t e = g.validate();
    const char *what = "validate";
    if (e.is_good()) e = g.build_operation_graph(h), what = "build_operation_graph";
    if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A}), what = "create_execution_plans";
    if (e.is_good()) e = g.check_support(h), what = "check_support";
    if (e.is_good()) e = g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), what = "build_plans";
    if (e.is_good()) e = g.get_workspace_size(*ws), what = "get_workspace_size";
    if (e.is_good()) return ST_OK;
    return st_fail(ST_ERR_UNSUPPORTED,
                   "cuDNN %lld has no fused attention %s for %s (bf16, causal; cudnn-frontend %s: %s); "
                   "set model.attention_kernel=flash for scaletrain's own kernels",
                   (long long)cudnnGetVersion(), pass, shape_name(s).c_str(), what, e.get_message().c_str());
}

st_status run(const fe::graph::Graph &g, cudnnHandle_t h, void *stream,
              std::unordered_map<int64_t, void *> &pack, void *ws, const char *pass) {
    const cudnnStatus_t cs = cudnnSetStream(h, (cudaStream_t)stream);
    if (cs != CUDNN_STATUS_SUCCESS)
        return st_fail(ST_ERR_INTERNAL, "cudnnSetStream: %s", cudnnGetErrorString(cs));
    fe::error_t e;
    try {
        e = g.execute(h, pack, ws);
    } catch (const std::exception &x) {
        return st_fail(ST_ERR_INTERNAL, "cuDNN fused attention %s: %s%s", pass, x.what(),
                       st_cuda_lost_hint(cudaSuccess));
    }
    if (e.is_bad())
        return st_fail(ST_ERR_INTERNAL, "cuDNN fused attention %s: %s%s", pass, e.get_message().c_str(),
                       st_cuda_lost_hint(cudaSuccess));
    const cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return st_fail(ST_ERR_INTERNAL, "cuDNN fused attention %s: %s%s", pass, cudaGetErrorString(ce),
                       st_cuda_lost_hint(ce));
    return ST_OK;
}

/* cuDNN's library (src/cuda/libs.h) before any call into it; NVRTC too
 * where it is, which cudnn-frontend calls only for some engines */
st_status load_cudnn() {
    ST_TRY(st_cuda_lib_load(ST_CUDA_LIB_CUDNN));
    if (st_cuda_lib_load(ST_CUDA_LIB_NVRTC) != ST_OK) st_clear_error();
    return ST_OK;
}

} // namespace

struct st_cudnn {
    cudnnHandle_t h;
    std::string where;
    std::vector<graphs> cache;
};

extern "C" st_status st_cudnn_create(const char *where, st_cudnn **out) {
    *out = nullptr;
    if (load_cudnn() != ST_OK) return st_fail_context(ST_ERR_UNSUPPORTED, "%s: ", where);
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t cs = cudnnCreate(&h);
    if (cs != CUDNN_STATUS_SUCCESS)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: cudnnCreate: %s", where, cudnnGetErrorString(cs));
    st_cudnn *c = new (std::nothrow) st_cudnn;
    if (!c) {
        cudnnDestroy(h);
        return st_fail(ST_ERR_NOMEM, "out of host memory for cuDNN's handle");
    }
    c->h = h;
    c->where = where;
    *out = c;
    return ST_OK;
}

extern "C" void st_cudnn_destroy(st_cudnn *c) {
    if (!c) return;
    c->cache.clear();
    cudnnDestroy(c->h);
    delete c;
}

template <class C> static auto find(C *c, const st_cudnn_sdpa &s) -> decltype(&c->cache[0]) {
    for (auto &g : c->cache)
        if (same(g.s, s)) return &g;
    return nullptr;
}

/* One pass's graph built, or NULL with *st the reason (ST_ERR_UNSUPPORTED) */
static std::shared_ptr<fe::graph::Graph> pass_graph(st_cudnn *c, const st_cudnn_sdpa &s, bool backward,
                                                    int64_t *ws, st_status *st) {
    const char *pass = backward ? "backward" : "forward";
    try {
        auto g = backward ? backward_graph(s) : forward_graph(s);
        *st = build(*g, c->h, pass, s, ws);
        if (*st == ST_OK) return g;
    } catch (const std::exception &x) {
        *st = st_fail(ST_ERR_UNSUPPORTED, "cudnn-frontend for the attention %s of %s: %s", pass,
                      shape_name(s).c_str(), x.what());
    }
    *ws = 0;
    return nullptr;
}

extern "C" st_status st_cudnn_sdpa_plan(st_cudnn *c, const st_cudnn_sdpa *s, bool backward,
                                        int64_t *ws_bytes) {
    *ws_bytes = 0;
    /* each pass on its own: a forward by cuDNN and a backward by the flash
     * kernels (or the other way round) share the saved state; remembered:
     * asked again, a pass cuDNN refused says nothing */
    graphs *g = find(c, *s);
    st_status sf = ST_OK, sb = ST_OK;
    std::string why_f;
    if (!g) {
        c->cache.emplace_back();
        g = &c->cache.back();
        g->s = *s;
        g->fwd = pass_graph(c, *s, false, &g->wf, &sf);
        if (sf != ST_OK) why_f = st_last_error();
    }
    if (backward && !g->bwd_tried) {
        g->bwd_tried = true;
        g->bwd = pass_graph(c, *s, true, &g->wb, &sb);
    }
    *ws_bytes = backward && g->wb > g->wf ? g->wb : g->wf;
    if (sf == ST_OK && sb == ST_OK) return ST_OK;
    if (sf != ST_OK && sb != ST_OK)
        return st_fail(ST_ERR_UNSUPPORTED, "%s: %s; and %s", c->where.c_str(), why_f.c_str(),
                       st_last_error());
    return st_fail_context(ST_ERR_UNSUPPORTED, "%s: ", c->where.c_str());
}

extern "C" bool st_cudnn_sdpa_ready(const st_cudnn *c, const st_cudnn_sdpa *s, bool backward) {
    const graphs *g = find(c, *s);
    return g && (backward ? g->bwd : g->fwd) != nullptr;
}

static st_status planned(const st_cudnn *c, const st_cudnn_sdpa *s, bool backward, const graphs **out) {
    *out = find(c, *s);
    if (st_cudnn_sdpa_ready(c, s, backward)) return ST_OK;
    return st_fail(ST_ERR_INTERNAL, "%s: cuDNN attention %s for %s run before it was planned",
                   c->where.c_str(), backward ? "backward" : "forward", shape_name(*s).c_str());
}

extern "C" st_status st_cudnn_sdpa_forward(st_cudnn *c, void *stream, const st_cudnn_sdpa *s, const void *qkv,
                                           void *y, float *lse, void *ws) {
    const graphs *g;
    ST_TRY(planned(c, s, false, &g));
    const int64_t C = s->nh * s->hs;
    auto *base = (uint16_t *)qkv;
    std::unordered_map<int64_t, void *> pack = {
        {Q, base}, {K, base + C}, {V, base + 2 * C}, {O, y}, {STATS, lse}};
    return run(*g->fwd, c->h, stream, pack, ws, "forward");
}

extern "C" st_status st_cudnn_sdpa_backward(st_cudnn *c, void *stream, const st_cudnn_sdpa *s,
                                            const void *qkv, const void *y, const void *dy, const float *lse,
                                            void *dqkv, void *ws) {
    const graphs *g;
    ST_TRY(planned(c, s, true, &g));
    const int64_t C = s->nh * s->hs;
    auto *base = (uint16_t *)qkv, *dbase = (uint16_t *)dqkv;
    std::unordered_map<int64_t, void *> pack = {{Q, base},      {K, base + C},    {V, base + 2 * C},
                                                {O, (void *)y}, {DO, (void *)dy}, {STATS, (void *)lse},
                                                {DQ, dbase},    {DK, dbase + C},  {DV, dbase + 2 * C}};
    return run(*g->bwd, c->h, stream, pack, ws, "backward");
}

extern "C" int64_t st_cudnn_version(void) {
    if (load_cudnn() != ST_OK) {
        st_clear_error();
        return 0;
    }
    return (int64_t)cudnnGetVersion();
}

extern "C" st_status st_cudnn_sdpa_validate(const st_cudnn_sdpa *s, int sm_version) {
    ST_TRY(load_cudnn());
    try {
        const char *pass = "forward";
        auto f = forward_graph(*s, sm_version), b = backward_graph(*s, sm_version);
        fe::error_t e = f->validate();
        if (e.is_good()) pass = "backward", e = b->validate();
        if (e.is_good()) return ST_OK;
        return st_fail(ST_ERR_UNSUPPORTED,
                       "cudnn-frontend rejects the attention %s graph for %s on sm_%d: %s", pass,
                       shape_name(*s).c_str(), sm_version, e.get_message().c_str());
    } catch (const std::exception &x) {
        return st_fail(ST_ERR_UNSUPPORTED, "cudnn-frontend for %s: %s", shape_name(*s).c_str(), x.what());
    }
}
