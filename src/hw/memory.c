/* The memory model (see memory.h). */
#include "memory.h"

#include <string.h>

/* The parameter arena is padded to 64 bytes as graph.c lays it out. */
static int64_t arena(int64_t count) { return (count + 15) / 16 * 16; }

static void states(int64_t P, const st_mem_opts *o, st_mem *m) {
    const int64_t N = o->ranks > 0 ? o->ranks : 1, pa = arena(P);
    const int64_t wb = o->mixed ? 2 : 4, gb = o->mixed ? 2 : 4;
    /* fp32 values per parameter kept by the optimizer: its moments, and the
     * master weights when the working copy is 2 bytes */
    const int64_t ob = 4 * ((int64_t)o->optim_states + (o->mixed ? 1 : 0));
    int64_t grads = gb * pa, optim = ob * pa;
    if (o->zero >= 1) optim = (optim + N - 1) / N;
    /* ZeRO-2 gives the non-owned gradient pages back on the CPU; a GPU run
     * zeroes them and keeps its whole gradient arena (dist.h) */
    if (o->zero >= 2 && !o->device_layout) grads = (grads + N - 1) / N;
    m->params = wb * pa;
    m->grads = grads;
    m->optim = optim;
    m->host = 0;
    if (o->offload) { /* ZeRO-Offload: the shards live in host memory */
        m->host = grads + optim;
        m->grads = 0;
        m->optim = 0;
    }
}

int64_t st_mem_model_states(int64_t n_params, const st_mem_opts *o) {
    st_mem m;
    memset(&m, 0, sizeof m);
    states(n_params, o, &m);
    return m.params + m.grads + m.optim;
}

typedef struct graph_bytes {
    int64_t acts, grads, ints, work;
} graph_bytes;

static st_status graph_size(st_model *m, int64_t batch, int ab, bool device, graph_bytes *b) {
    st_model_graph mg;
    ST_TRY(device ? st_model_graph_layout_device(m, batch, &mg) : st_model_graph_layout(m, batch, &mg));
    b->acts = ab * mg.g.act_count;
    b->grads = ab * mg.g.grad_count;
    b->ints = 4 * mg.g.int_count;
    b->work = 4 * mg.g.work_count;
    st_model_graph_free(&mg);
    return ST_OK;
}

st_status st_mem_estimate(st_model *m, int64_t micro, const st_mem_opts *o, st_mem *out) {
    memset(out, 0, sizeof *out);
    if (micro < 1) return st_fail(ST_ERR_ARG, "memory model: micro-batch %lld", (long long)micro);
    const int ab = o->mixed ? 2 : 4;
    states(m->params.count, o, out);
    /* buffers (batch-norm running statistics) stay fp32 beside the weights */
    out->params += 4 * m->params.buffer_count;
    graph_bytes g, g1, g2;
    ST_TRY(graph_size(m, micro, ab, o->device_layout, &g));
    out->acts = g.acts;
    out->act_grads = g.grads;
    out->ints = g.ints;
    out->work = g.work;
    /* per sample: the difference of the graphs at 1 and 2 (all linear in B) */
    ST_TRY(graph_size(m, 1, ab, o->device_layout, &g1));
    ST_TRY(graph_size(m, 2, ab, o->device_layout, &g2));
    out->act_per_sample = (double)((g2.acts + g2.grads + g2.ints) - (g1.acts + g1.grads + g1.ints));
    if (o->eval_batch > 0) {
        graph_bytes e;
        ST_TRY(graph_size(m, o->eval_batch, ab, o->device_layout, &e));
        out->eval = e.acts + e.grads + e.ints + e.work;
    }
    /* each loader buffer: inputs, targets and the sample indices, 64-byte aligned */
    const int64_t x = (micro * o->sample_in_bytes + 63) / 64 * 64, y = (micro * o->sample_out_bytes + 63) / 64 * 64;
    const int64_t ring = (int64_t)o->loader_buffers * (x + y + micro * 8);
    if (o->device_feed) { /* the ring on the host (pinned), the feed's second input buffers here */
        out->pinned = ring;
        out->loader = micro * (o->sample_in_bytes + o->sample_out_bytes);
    } else {
        out->loader = ring;
    }
    if (o->zero >= 1 && o->ranks > 1) /* a reduce-scatter or all-gather bucket in flight and the next */
        out->buckets = 2 * (int64_t)(o->bucket_cap_mb * 1024 * 1024);
    out->data = o->data_bytes;
    if (o->async_ckpt) { /* checkpoint.c take(): rank 0's weights and buffers, each rank's state (fp32) */
        const int64_t N = o->ranks > 0 ? o->ranks : 1, pa = arena(m->params.count);
        const int64_t state = 4 * (int64_t)o->optim_states * (o->zero >= 1 ? (pa + N - 1) / N : pa);
        out->ckpt_copy = 4 * pa + 4 * m->params.buffer_count + state;
    }
    out->total = out->params + out->grads + out->optim + out->acts + out->act_grads + out->ints + out->work +
                 out->eval + out->loader + out->buckets + out->data + (o->device_layout ? 0 : out->ckpt_copy);
    if (o->device_layout) out->host += out->ckpt_copy;
    return ST_OK;
}
