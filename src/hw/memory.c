/* The memory model (see memory.h). */
#include "memory.h"

#include <string.h>

#include "core/device.h"
#include "dist/ddp.h"
#include "layers/args.h"
#include "layers/conv2d_layout.h"

/* The parameter arena is padded to 64 bytes as graph.c lays it out. */
static int64_t arena(int64_t count) { return st_align_floats(count); }

static void states(int64_t P, const st_mem_opts *o, st_mem *m) {
    const int64_t N = o->ranks > 0 ? o->ranks : 1, pa = arena(P);
    /* the fp32 masters, and with bf16/fp16 the compute copy beside them
     * (16-bit values on a GPU, floats holding them on the CPU); ZeRO on
     * several ranks shards the masters of a bf16/fp16 run (graph.h
     * masters_sharded), whose whole weights are the compute copy */
    const int64_t shard = (pa + N - 1) / N;
    const int64_t masters = o->mixed && o->zero >= 1 && N > 1 ? 4 * shard : 4 * pa;
    const int64_t copy = o->mixed ? (o->device_layout ? 2 : 4) * pa : 0;
    int64_t grads = 4 * pa, optim = 4 * (int64_t)o->optim_states * pa;
    if (o->zero >= 1) optim = (optim + N - 1) / N;
    /* A GPU run of ZeRO-2 on several ranks keeps its shard, and stages its
     * buckets (`buckets` in st_mem_estimate, src/dist/ddp.h). On the CPU it
     * gives the non-owned pages back after each bucket's reduction, so it
     * holds the shard between steps, but backward writes the whole arena and
     * its peak reaches it where the reductions end as backward does
     * (docs/distributed.md): the peak is what must fit. */
    if (o->zero >= 2 && o->device_layout && N > 1) grads = (grads + N - 1) / N;
    m->params = masters + copy;
    m->grads = grads;
    m->optim = optim;
    m->host = 0;
    if (o->offload) { /* ZeRO-Offload: this rank's range of the optimizer state on the host, with
                         pinned copies of the range's masters and gradients (docs/distributed.md) */
        const int64_t range = o->zero >= 1 ? shard : pa;
        m->host = optim + 8 * range;
        m->optim = 0;
    }
}

st_status st_mem_estimate_states(int64_t n_params, const st_mem_opts *o, st_mem *out) {
    memset(out, 0, sizeof *out);
    states(n_params, o, out);
    return ST_OK;
}

int64_t st_mem_model_states(int64_t n_params, const st_mem_opts *o) {
    st_mem m;
    (void)st_mem_estimate_states(n_params, o, &m);
    return m.params + m.grads + m.optim;
}

typedef struct graph_bytes {
    int64_t acts, grads, ints, work, scratch;
    bool head_fused; /* a gpt's head fused with its loss: no logits (model.fused_head) */
} graph_bytes;

/* Bytes of the 16-bit copies one product makes of its operands stored as
 * floats (src/cuda/matmul.cu: the first rounded up to 256 bytes). */
static int64_t copies(int64_t a, int64_t b) { return (2 * a + 255) / 256 * 256 + 2 * b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The CUDA backend's 16-bit operand scratch in a bf16/fp16 run: the device
 * keeps one buffer as large as the largest product's copies. Linear: the
 * weights are the 16-bit compute copy, x and dy are copied where they are
 * stored as floats (a graph input, the logits); conv2d: the im2col chunk and
 * the permuted weight are float workspace, dy as stored. Attention's
 * materialised path (head sizes the flash kernels do not take) copies one
 * batch row's Q and K (or V and dY) views, about 4 x T x 3C bytes; the
 * linear layer before it copies its float output gradient dqkv for all B
 * rows (2 x B x T x 3C bytes, fp32 because attention reads qkv as floats on
 * that path), as large from a micro-batch of 2 on, so no term is kept for it
 * (at a micro-batch of 1 the model is short by at most 2 x T x 3C bytes;
 * tests/test_cuda_memory.c runs such a model at 16). */
static int64_t operand_scratch(const st_graph *g) {
    int64_t most = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        const bool x32 = n->in[0]->store == ST_PREC_FP32, dy32 = n->out->store == ST_PREC_FP32;
        if (strcmp(n->ops->name, "linear") == 0) {
            const int64_t M = n->args.i[ST_LINEAR_M], K = n->args.i[ST_LINEAR_K], N = n->args.i[ST_LINEAR_N];
            const int64_t x = x32 ? M * K : 0, dy = dy32 ? M * N : 0;
            most = max64(most, max64(copies(x, 0), copies(dy, x)));
        } else if (strcmp(n->ops->name, "conv2d") == 0) {
            const int64_t B = n->in[0]->shape[0], Cin = n->in[0]->shape[3], k = n->args.i[ST_CONV_K];
            const int64_t P = n->out->shape[1] * n->out->shape[2], Cout = n->out->shape[3], K = k * k * Cin;
            const int64_t col = st_conv2d_device_images(B, P, K) * P * K, wp = Cout * K;
            const int64_t dy = dy32 ? st_conv2d_device_images(B, P, K) * P * Cout : 0;
            most = max64(most, max64(copies(wp, col), max64(copies(dy, col), copies(wp, dy))));
        }
    }
    return most;
}

/* The graph as the run lays it out: with bf16/fp16 on a GPU the activations
 * of the layers that take 16-bit storage (src/layers/half_io.h) take 2 bytes,
 * the rest 4; the CPU stores floats whatever the precision. */
static st_status graph_size(st_model *m, int64_t batch, bool mixed, bool device, bool fused_gelu,
                            bool forward, graph_bytes *b) {
    const st_precision was = m->params.precision;
    const bool fused_was = m->fused_gelu;
    ST_TRY(st_params_set_precision(&m->params, mixed ? ST_PREC_BF16 : ST_PREC_FP32));
    m->fused_gelu = fused_gelu;
    st_model_graph mg;
    st_status s = forward  ? st_model_graph_layout_forward(m, batch, device, &mg)
                  : device ? st_model_graph_layout_device(m, batch, &mg)
                           : st_model_graph_layout(m, batch, &mg);
    (void)st_params_set_precision(&m->params, was);
    m->fused_gelu = fused_was;
    ST_TRY(s);
    b->acts = 4 * mg.g.act_count;
    b->grads = 4 * mg.g.grad_count;
    b->ints = 4 * mg.g.int_count;
    b->work = 4 * mg.g.work_count;
    b->scratch = device && mixed ? operand_scratch(&mg.g) : 0;
    b->head_fused = m->kind == ST_MODEL_GPT && !mg.logits;
    st_model_graph_free(&mg);
    return ST_OK;
}

/* The staging ZeRO-2's buckets take on a GPU (floats), planned on the
 * training graph's layout as the run plans it (src/dist/ddp.h). */
static st_status stage_count(st_model *m, int64_t micro, const st_mem_opts *o, int64_t *count) {
    st_model_graph mg;
    ST_TRY(st_model_graph_layout_device(m, micro, &mg));
    st_status s = st_ddp_stage_count(&m->params, &mg.g, o->bucket_cap_mb, count);
    st_model_graph_free(&mg);
    return s;
}

/* Each loader buffer: inputs, targets and the sample indices, 64-byte
 * aligned; on a GPU the ring on the host (pinned) and the feed's second
 * input buffers on the device. */
static void loader_bytes(int64_t batch, const st_mem_opts *o, st_mem *out) {
    const int64_t x = (batch * o->sample_in_bytes + 63) / 64 * 64,
                  y = (batch * o->sample_out_bytes + 63) / 64 * 64;
    const int64_t ring = (int64_t)o->loader_buffers * (x + y + batch * 8);
    if (o->device_feed) {
        out->pinned = ring;
        out->loader = batch * (o->sample_in_bytes + o->sample_out_bytes);
    } else {
        out->loader = ring;
    }
}

/* The evaluation's graph (forward alone) at o->eval_batch into *e, and
 * its bytes into out->eval. */
static st_status eval_graph(st_model *m, const st_mem_opts *o, graph_bytes *e, st_mem *out) {
    const st_status s = graph_size(m, o->eval_batch, o->mixed, o->device_layout, o->fused_gelu, true, e);
    if (s != ST_OK) /* (the layer's message speaks of the micro-batch: this is the evaluation's) */
        return st_fail_context(
            s, "the evaluation's graph, at train.eval_batch_size %lld: ", (long long)o->eval_batch);
    out->eval = e->acts + e->grads + e->ints + e->work;
    return ST_OK;
}

/* st_mem_estimate of an evaluation alone (memory.h); out->params set. */
static st_status forward_only(st_model *m, const st_mem_opts *o, st_mem *out) {
    if (o->eval_batch < 1)
        return st_fail(ST_ERR_ARG, "memory model: an evaluation's batch of %lld", (long long)o->eval_batch);
    out->grads = out->optim = out->host = 0;
    graph_bytes e, e1, e2;
    ST_TRY(eval_graph(m, o, &e, out));
    ST_TRY(graph_size(m, 1, o->mixed, o->device_layout, o->fused_gelu, true, &e1));
    ST_TRY(graph_size(m, 2, o->mixed, o->device_layout, o->fused_gelu, true, &e2));
    out->act_per_sample = (double)((e2.acts + e2.ints) - (e1.acts + e1.ints));
    loader_bytes(o->eval_batch, o, out);
    out->data = o->data_bytes;
    if (o->device_layout) out->backend = ST_CUDA_LT_WORKSPACE_BYTES + e.scratch;
    out->total = out->params + out->eval + out->loader + out->data + out->backend;
    return ST_OK;
}

/* The set-up's peak (src/train/train.c: before the training graph and the
 * optimizer state exist): the model as it was made, its fp32 weights and
 * gradients, the compute copy and the buffers, and:
 * on a GPU, its arenas laid out padded to whole shards under ZeRO, and only
 * this rank's shard of the masters (bf16/fp16) and of ZeRO-2's gradients
 * made, over several ranks (dist.h st_dist_layout); on the CPU, the
 * arenas made whole and padded to whole shards by copies
 * (src/dist/zero.c), the gradients' new one beside the padded weights and
 * the old gradients at the largest moment (ZeRO then gives the pages of
 * the other shards back); beside them what was made before: on a GPU the
 * backend's workspace and the evaluation's graph, on the CPU the dataset
 * and the loader's buffers. On the CPU, over many ranks, this may be more
 * than training holds (total); the planner plans training's and says where
 * this one does not fit (tools/plan.c). */
static int64_t setup_peak(const st_model *m, const st_mem_opts *o, const st_mem *out) {
    const int N = o->ranks > 0 ? (int)o->ranks : 1;
    const int64_t P = m->params.count, pa = arena(P), S = st_shard_size(P, N), padded = S * N;
    const int64_t buffers = 4 * m->params.buffer_count;
    if (!o->device_layout)
        return out->data + out->loader + buffers + (o->mixed ? 4 * pa : 0) +
               (padded > pa ? 8 * padded + 4 * pa : 8 * pa);
    const int64_t whole = o->zero >= 1 && padded > pa ? padded : pa;
    const int64_t masters = N > 1 && o->mixed && o->zero >= 1 ? S : whole,
                  grads = N > 1 && o->zero >= 2 ? S : whole;
    return out->backend + out->eval + buffers + (o->mixed ? 2 * whole : 0) + 4 * masters + 4 * grads;
}

st_status st_mem_estimate(st_model *m, int64_t micro, const st_mem_opts *o, st_mem *out) {
    memset(out, 0, sizeof *out);
    if (micro < 1) return st_fail(ST_ERR_ARG, "memory model: micro-batch %lld", (long long)micro);
    states(m->params.count, o, out);
    /* buffers (batch-norm running statistics) stay fp32 beside the weights */
    out->params += 4 * m->params.buffer_count;
    if (o->forward_only) return forward_only(m, o, out);
    graph_bytes g, g1, g2;
    ST_TRY(graph_size(m, micro, o->mixed, o->device_layout, o->fused_gelu, false, &g));
    out->acts = g.acts;
    out->act_grads = g.grads;
    out->ints = g.ints;
    out->work = g.work;
    out->head_fused = g.head_fused;
    /* per sample: the difference of the graphs at 1 and 2 (all linear in B) */
    ST_TRY(graph_size(m, 1, o->mixed, o->device_layout, o->fused_gelu, false, &g1));
    ST_TRY(graph_size(m, 2, o->mixed, o->device_layout, o->fused_gelu, false, &g2));
    out->act_per_sample = (double)((g2.acts + g2.grads + g2.ints) - (g1.acts + g1.grads + g1.ints));
    if (o->eval_batch > 0) {
        graph_bytes e;
        ST_TRY(eval_graph(m, o, &e, out));
    }
    loader_bytes(micro, o, out);
    /* 16-bit buckets (dist.grad_dtype): their copies beside the gradients (ddp.c st_ddp_set_grad_dtype) */
    const int64_t wire = o->ranks > 1 && o->grad_wire_bytes == 2 ? 2 : 0;
    if (o->zero >= 2 && o->ranks > 1 && o->device_layout) { /* ZeRO-2 on a GPU: the buckets' staging */
        int64_t stage;
        ST_TRY(stage_count(m, micro, o, &stage));
        out->buckets = (4 + wire) * stage;
    } else { /* the reductions and gathers work in place on the arenas */
        out->buckets = wire * m->params.count;
    }
    out->data = o->data_bytes;
    /* a GPU run: cuBLASLt's workspace and the 16-bit operand scratch */
    if (o->device_layout) out->backend = ST_CUDA_LT_WORKSPACE_BYTES + g.scratch;
    if (o->async_ckpt) { /* checkpoint.c take(): rank 0's weights and buffers, each rank's state (fp32) */
        const int64_t N = o->ranks > 0 ? o->ranks : 1, pa = arena(m->params.count);
        const int64_t state = 4 * (int64_t)o->optim_states * (o->zero >= 1 ? (pa + N - 1) / N : pa);
        out->ckpt_copy = 4 * pa + 4 * m->params.buffer_count + state;
    }
    out->total = out->params + out->grads + out->optim + out->acts + out->act_grads + out->ints + out->work +
                 out->eval + out->loader + out->buckets + out->data + out->backend +
                 (o->device_layout ? 0 : out->ckpt_copy);
    if (o->device_layout) out->host += out->ckpt_copy;
    out->setup = setup_peak(m, o, out);
    return ST_OK;
}
