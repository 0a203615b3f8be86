/* The layer graph: tensors as views into arenas, nodes that run a layer's
 * forward and backward, and the two-phase build that lays out memory.
 *
 * A model is built by calling layer builders (src/layers/layers.h) on a graph,
 * in forward order. Builders declare parameters, activations and per-node saved
 * state; st_graph_finalize() then allocates one arena for activations, one for
 * activation gradients, one for integer inputs and one workspace, and points
 * every tensor into them. Parameters and their gradients live in st_params,
 * owned by the model and shared by every graph built for it (e.g. one graph per
 * batch size), so the parameter and gradient arenas are each one contiguous
 * allocation: zeroing gradients is one memset, all-reducing them one call.
 *
 * Backward semantics: a node's backward ADDS into parameter gradients (so
 * micro-steps accumulate) and WRITES or ADDS into input-activation gradients as
 * node->in_acc[i] says: the first consumer in backward order writes, later ones
 * add. A layer skips an input's gradient when its `grad` is NULL (graph inputs,
 * and everything upstream of the first parameter).
 *
 * What this is not: an autograd engine. There is no dynamic graph and no
 * general broadcasting; each layer is a hand-written, tested pair. */
#ifndef ST_MODEL_GRAPH_H
#define ST_MODEL_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/device.h"
#include "core/precision.h"
#include "scaletrain/status.h"

#define ST_MAX_DIMS 4
#define ST_NAME_MAX 96
#define ST_NODE_MAX_IN 3
#define ST_NODE_MAX_PARAMS 4
#define ST_ALIGN_FLOATS 16 /* 64-byte alignment for every tensor */
/* n floats rounded up to ST_ALIGN_FLOATS: what the arenas give a tensor, and
 * how the layers lay out their saved state and workspace. */
static inline int64_t st_align_floats(int64_t n) {
    return (n + ST_ALIGN_FLOATS - 1) / ST_ALIGN_FLOATS * ST_ALIGN_FLOATS;
}

#define ST_SHARD_ALIGN 1024 /* elements per page, and per block of the gradient norm */
/* S, the elements of each of `world` ranks' shards of an arena of `count`:
 * ceil(count / world) rounded up to ST_SHARD_ALIGN, one block at least; the
 * arenas padded to whole shards take world * S (src/dist/zero.h). */
static inline int64_t st_shard_size(int64_t count, int world) {
    const int64_t per = (count + world - 1) / world;
    const int64_t s = (per + ST_SHARD_ALIGN - 1) / ST_SHARD_ALIGN * ST_SHARD_ALIGN;
    return s ? s : ST_SHARD_ALIGN;
}

typedef enum st_dtype { ST_F32 = 0, ST_I32 = 1 } st_dtype;

/* How a parameter is initialised (see st_params_init). */
typedef enum st_init {
    ST_INIT_ZEROS = 0,
    ST_INIT_ONES,
    ST_INIT_NORMAL,  /* N(0, scale^2) */
    ST_INIT_UNIFORM, /* U(-scale, scale); layers pass 1/sqrt(fan_in) as PyTorch does */
} st_init;

typedef enum st_tensor_kind {
    ST_TENSOR_ACT = 0, /* per-batch activation (graph-owned arena) */
    ST_TENSOR_INPUT,   /* per-batch graph input filled by the caller (no gradient) */
    ST_TENSOR_PARAM,   /* trainable parameter (model-owned arena, has a gradient) */
    ST_TENSOR_BUFFER,  /* non-trainable model state, e.g. batch-norm running stats */
} st_tensor_kind;

typedef struct st_tensor {
    char name[ST_NAME_MAX]; /* params and buffers: the stable checkpoint name */
    st_tensor_kind kind;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t count;  /* elements */
    int64_t offset; /* elements into its arena, set at layout */
    float *data;    /* F32 tensors */
    int32_t *idata; /* I32 tensors */
    float *grad;    /* same shape as data; NULL when no gradient flows here */
    bool requires_grad;
    /* parameters only */
    int index; /* position in st_params; for activations, position in the graph */
    st_init init;
    float init_scale;
    bool decay;            /* AdamW weight decay applies (matrices, not biases/norms) */
    bool transposed_store; /* stored (in, out) as in GPT-2 checkpoints */
    /* 16-bit storage (docs/precision.md, "On a CUDA device").
     * `store` says what `data` of a float tensor holds: FP32, a float array;
     * BF16 or FP16, an array of 16-bit values (uint16_t). An activation's
     * `grad` is stored as its `data` (only the layers of st_layer_half_io
     * read and write 16-bit activations; st_graph_finalize decides;
     * st_tensor_read/st_tensor_write convert for the host). A parameter of a
     * 16-bit run on a device points at the 16-bit compute copy while forward
     * and backward run (st_params_use_compute), its `grad` always fp32. */
    st_precision store;
    bool host_f32; /* read as floats by the host (logits): never stored in 16 bits */
    bool read_after; /* read after forward by the graph's caller (an evaluation's logits): never transient */
} st_tensor;

typedef struct st_node st_node;
typedef struct st_graph st_graph;

/* Cached decoding's keys and values (generation, src/model/sample.c): for
 * each of L attention layers and B sequences, the keys and the values of
 * positions 0 .. cap-1, (L, B, cap, C) floats each, on the graph's device.
 * A graph built with one (st_graph.kv: model.c's decode graphs) runs
 * st_attention_cached, which writes its rows' keys and values at positions
 * st_graph.pos onwards and attends to every position up to each row's. */
typedef struct st_kv_cache {
    int64_t L, B, cap, C;
    float *k, *v;
} st_kv_cache;

/* One backend's implementation of a layer. CPU and CUDA each provide a table;
 * builders name the CPU table, and a graph on a CUDA device swaps each node's
 * table for the CUDA twin of the same name at st_graph_finalize, so hot paths
 * never ask which. `prepare` (optional) runs then, before memory is laid out:
 * a backend whose kernels keep different saved state or scratch than the CPU
 * reference sets the node's saved_count and work_count there. The three
 * flags say what backward reads: they let a gradient take its tensor's
 * memory (graph.c grads_over_data) and an activation no backward reads
 * share memory with others in forward (graph.c place_transients). They must
 * hold for the CPU table and its CUDA twin alike (the planner sizes a GPU
 * run from the CPU tables; use_device_ops refuses a twin that differs). */
typedef struct st_layer_ops {
    const char *name;
    st_status (*forward)(st_node *n, st_graph *g);
    st_status (*backward)(st_node *n, st_graph *g);
    st_status (*prepare)(st_node *n, st_graph *g);
    bool grad_in_place;        /* backward may write in[0]'s gradient over in[0]'s data: it reads each
                                  element of in[0] only before writing that element's gradient */
    bool backward_ignores_out; /* backward never reads out's data (its gradient, yes) */
    bool backward_ignores_in;  /* backward never reads any input's data (their gradients, yes) */
    bool recomputable;         /* forward is cheap (element- or row-wise), the same bits when run again,
                                  and writes only out and saved: selective checkpointing runs it again
                                  in backward instead of keeping out (graph.c place_transients) */
    unsigned grad_passes;      /* bit k: in[k]'s gradient is out's, unchanged (st_grad_pass: a residual
                                  add's two inputs, a position embedding's input), so the graph may give
                                  the two gradients one memory (graph.c alias_passes) and the pass is
                                  then nothing */
} st_layer_ops;

/* Hyper-parameters of a node; each layer reads its own fields. */
typedef struct st_node_args {
    int64_t i[8];
    float f[4];
} st_node_args;

struct st_node {
    const st_layer_ops *ops;
    int id;
    st_tensor *in[ST_NODE_MAX_IN];
    bool in_acc[ST_NODE_MAX_IN]; /* backward adds into in[i]->grad (set at finalize) */
    int n_in;
    st_tensor *params[ST_NODE_MAX_PARAMS]; /* trainable params and buffers */
    int n_params;
    st_tensor *out;
    st_node_args args;
    /* per-batch saved state for backward (e.g. mean/rstd, masks, argmax) */
    int64_t saved_count; /* floats, declared by the builder */
    float *saved;
    int64_t work_count; /* floats of shared scratch this node needs */
    int block;          /* the checkpointing block it belongs to, -1 for none */
    int remat_before;   /* selective checkpointing: its forward runs again just before the backward
                           of node remat_before (its output's first reader there); -1: never */
    /* Fusion with a neighbour (st_graph.fuse_gelu, fuse_residual; set at
     * finalize): fwd_fuses_next, this node's forward also writes the next
     * node's output (a GELU's, or a residual add's), and the graph runs the
     * next node's forward only when this one is not run (never: selective
     * checkpointing, which recomputes a GELU's output from its input alone,
     * turns the GELU's off); bwd_fuses_prev, this node's
     * backward writes its input's producer's input gradient (that
     * producer's backward folded in), and the graph skips the producer's
     * backward. A layer that does either runs its neighbour's ops itself
     * when it cannot fuse. */
    bool fwd_fuses_next, bwd_fuses_prev;
    /* ... and whether the layer ran it so (its epilogue's algorithm found) at least once: the fused
     * counts a run reports are of these, not of the marks, which a fallback does not clear */
    bool fwd_fused_ran, bwd_fused_ran;
};

/* Where an arena comes from instead of st_device_alloc: alloc gives at least
 * nbytes (zeroed; *cap_bytes of them usable, so that padding it later, as
 * dist/zero.c st_zero_pad_arenas does, can stay in place) owned by ctx's
 * owner, or *out NULL to decline (the arena is then allocated as usual).
 * The session passes the communicator's shared arena (comm.h
 * st_comm_shared_arena) for the gradients of a CPU rank under ddp. */
typedef struct st_arena_hook {
    st_status (*alloc)(void *ctx, size_t nbytes, void **out, size_t *cap_bytes);
    void *ctx;
} st_arena_hook;

/* How a training run lays out its arenas on a device (dist.h
 * st_dist_layout), set before the first finalize. All zero: whole, unpadded.
 * world > 0: both padded to whole shards over that many ranks
 * (st_shard_size), as ZeRO, the deterministic fold and the host's gradient
 * norm take them, where st_zero_pad_arenas would pad them later by copies,
 * an arena more at the set-up's peak. shard_masters, shard_grads: this
 * rank's shard of them, [rank * S, (rank + 1) * S) for S =
 * st_shard_size(count, world), is all it ever holds (what
 * st_params_shard_masters and st_params_shard_grads leave, where making
 * them whole first held about 10 bytes a parameter at set-up for the 4 of
 * bf16 ZeRO-2's training over 8 ranks). shard_masters is for a 16-bit run
 * (its compute copy is the whole weights: st_params_set_precision refuses
 * fp32 then), on a device. */
typedef struct st_params_layout {
    int world, rank;
    bool shard_masters, shard_grads;
} st_params_layout;

/* The trainable parameters and buffers of a model: one data arena, one grad
 * arena (same layout), one buffer arena. */
typedef struct st_params {
    st_device *dev; /* where the arenas live: NULL = host; set before the first finalize */
    st_tensor **t;  /* params then buffers, in declaration order */
    int n, cap;
    int n_params;  /* trainable ones */
    int64_t count; /* elements of trainable params (arena size before padding) */
    int64_t arena_count, buffer_count;
    float *data, *grad, *buffers;
    bool frozen;      /* layout done: later builds must declare the same tensors */
    bool layout_only; /* set before the first build: offsets and counts, no arenas (the planner) */
    bool no_grads;    /* set before the first build: no gradient arena (the parameters' `grad` NULL):
                         forward-only graphs alone (generation); st_graph_finalize refuses the rest */
    int cursor;       /* next expected declaration during a rebuild */
    /* Mixed precision (docs/precision.md). `data` holds the fp32 master
     * weights; in bf16 and fp16 the compute copy holds them rounded to the
     * low precision, and forward and backward read it: on the host `compute`
     * (floats holding 16-bit values, as the CPU emulates), on a device
     * `compute16` (16-bit values, half the bytes; `compute` is NULL).
     * st_graph_forward/backward point the parameter tensors at it while they
     * run and back at `data` after. The copy is refreshed when `version`
     * (bumped by st_params_touch after anything writes `data`) has moved on. */
    st_precision precision;
    float *compute;
    uint16_t *compute16;
    uint64_t version, compute_version;
    bool on_compute; /* parameter tensors point into the compute copy now */
    /* Sharded masters (ZeRO with bf16/fp16 on several ranks, src/dist/dist.h;
     * st_params_shard_masters): `data` holds this rank's fp32 masters of
     * [master_lo, master_hi) only (on the host the other pages are given back
     * and read as zeros; on a device they are `master_alloc`, an allocation
     * of master_hi - master_lo floats, and `data` is NULL: st_params_master
     * finds element i wherever it is), and the
     * compute copy is the whole model: the parameter tensors point into it
     * always. The copy is refreshed by its owner (dist.h st_dist_step_end:
     * each rank rounds its range and the copies are all-gathered), never from
     * `data` alone: a stale copy is an error. Whole weights go in through
     * st_params_set_weights and come out through st_zero_copy_arenas. */
    bool masters_sharded;
    int64_t master_lo, master_hi;
    float *master_alloc;
    /* Sharded gradients (ZeRO-2 on a CUDA device with several ranks,
     * src/dist/ddp.h; st_params_shard_grads): this rank keeps the summed
     * gradients of [grad_lo, grad_hi) only, in `grad_alloc` (grad_hi -
     * grad_lo floats), and `grad` is NULL: st_params_grad finds element i.
     * The parameter tensors' `grad` point into the gradient buckets' staging
     * buffers (set by the bucket plan), where backward writes. */
    bool grads_sharded;
    int64_t grad_lo, grad_hi;
    float *grad_alloc;
    st_arena_hook grad_hook; /* set before the first finalize; alloc NULL: none */
    st_params_layout layout; /* set before the first finalize (above) */
    /* Masters laid out sharded (layout.shard_masters): a hash of each
     * parameter's whole fp32 weights as st_params_set_weights last set them
     * (p->n entries, a buffer's 0), what the ranks compare where no rank
     * holds them whole to broadcast (ddp.h st_ddp_agree); NULL before. */
    int64_t *set_hash;
    bool grad_hooked;        /* `grad` came from grad_hook: not ours to release */
    size_t grad_cap_bytes;   /* usable at `grad` when grad_hooked */
} st_params;

/* Kernels a CUDA device's graph can run instead of its layers' defaults,
 * computing the same values bit for bit (st_graph.kernel_variants, a mask
 * of these): each waits on a GPU's timing against its default
 * (bench/bench_cuda_kernels.c) before it becomes the default itself. */
typedef enum st_kernel_variant {
    ST_KV_LAYERNORM_PACKED = 1u << 0, /* layernorm's one-kernel backward keeps 16-bit rows as loaded
                                         (src/cuda/layernorm.cu ln_backward_packed_kernel) */
    ST_KV_CE_ROWS_PREFETCH = 1u << 1, /* the fused head's rows kernel loads each thread's next 16 bytes
                                         of a 16-bit row before using the last (src/cuda/linear_ce.cu,
                                         kernels.cuh st_block_row_walk) */
    ST_KV_CE_ROWS_SHARED = 1u << 2,   /* the fused head's rows kernel keeps a 16-bit row in shared memory
                                         between its two walks: the row read from device memory once, not
                                         twice (src/cuda/linear_ce.cu; its first walk loads a group ahead,
                                         as ST_KV_CE_ROWS_PREFETCH's) */
    ST_KV_ALL =
        ST_KV_LAYERNORM_PACKED | ST_KV_CE_ROWS_PREFETCH | ST_KV_CE_ROWS_SHARED, /* model.kernel_variants:
                                                                                  all */
} st_kernel_variant;

struct st_graph {
    st_params *params;
    st_device *dev; /* = params->dev: every arena and kernel of this graph is there */
    st_node *nodes;
    int n_nodes, cap_nodes;
    st_tensor **acts; /* activations and inputs, owned by the graph */
    int n_acts, cap_acts;
    float *act_arena, *grad_arena;
    float *work; /* shared scratch, 64-byte aligned: layers may use it as doubles or ints */
    int32_t *int_arena;
    int64_t act_count, grad_count, int_count, work_count;
    /* Activation checkpointing (train.activation_checkpointing): builders
     * bracket each transformer or conv block with st_graph_block_begin/end;
     * with `checkpointing` set before finalize, the activations and saved
     * state a block keeps to itself share one region of the activation arena
     * with every other block's, so forward keeps only the blocks' inputs and
     * outputs, and backward recomputes each block's forward just before its
     * backward (`recomputing` is set then: a layer with side effects,
     * batch-norm's running statistics, skips them). Gradients are the same
     * bits. (Activation gradients share memory by their lives in backward,
     * with checkpointing or without: graph.c place_grads.) */
    int cur_block, n_blocks;
    bool checkpointing, recomputing;
    int64_t region_act_count; /* floats of the shared region (0 without) */
    int64_t transient_act_count; /* floats at the end of the activation arena holding the activations
                                    no backward reads and, with `selective`, those recomputed in
                                    backward, shared by their lives (0 with none; graph.c
                                    place_transients) */
    /* Selective checkpointing (train.activation_checkpointing: selective),
     * set before finalize, without `checkpointing`: the output of a
     * recomputable layer (norms, GELU) whose inputs outlive backward is not
     * kept; backward runs the layer's forward again just before the first
     * backward that reads it (remat_before, -1 for none: node i's forward
     * runs again before node remat_before's backward). */
    bool selective;
    int *remat, n_remat;         /* the nodes whose forward backward runs again, in the order it does */
    bool fuse_gelu;              /* set before finalize, on a CUDA device (or its layout): linear -> gelu ->
                                    linear with GELU in the products' epilogues (graph.c fuse_gelu) */
    bool fuse_residual;          /* the same: linear -> add with the residual added by the product
                                    (graph.c fuse_gelu) */
    bool fuse_bias_grad;         /* acts on a CUDA device: a linear layer's bias gradient summed by its
                                    weight-gradient product's epilogue (src/cuda/linear.cu;
                                    model.fused_bias_grad); no change to the graph */
    unsigned kernel_variants;    /* acts on a CUDA device: the st_kernel_variant kernels run instead of
                                    their layers' defaults (the same values, bit for bit); none until a
                                    GPU's timing (bench/bench_cuda_kernels.c) says one pays */
    bool attention_cudnn;        /* set before finalize (acts on a CUDA device's graphs): attention on
                                    cuDNN's fused graphs where they take the node (src/cuda/attention.cu;
                                    model.attention_kernel) */
    bool keep_acts;              /* set before finalize: every activation and activation gradient kept to the
                                    end of backward, none sharing memory nor a gradient over its tensor's data
                                    (a test that reads them all) */
    bool forward_only;           /* set before finalize: forward alone runs (evaluation): no activation
                                    gradients, no checkpointing, every activation that is neither an input
                                    nor an output transient (freed after its last reader in forward) and
                                    the nodes' saved state in one region they share */
    bool finalized;
    bool params_only;   /* finalize lays out parameters and sizes the arenas (act_count, grad_count,
                           int_count, work_count) but allocates none */
    bool device_layout; /* with no device: size them as a CUDA device would (attention's saved state,
                           src/layers/attention_layout.h; the other twins' scratch is not counted) */
    st_kv_cache *kv;    /* set before building: a decode graph (st_attention_cached), NULL otherwise */
    /* run state read by layers */
    bool training;
    int64_t pos;            /* the first row's position (pos_embedding, attention_cached): 0 but in a decode
                               graph, whose caller sets it before each forward */
    const int64_t *pos_dev; /* on a device, NULL, or where those layers' kernels read pos when they run:
                               a decode graph whose launches are captured and replayed (sample.c), which
                               writes each position there as it sets pos */
    uint64_t dropout_seed;  /* set per step by the caller */
    uint64_t dropout_micro; /* the micro-batch's index in the step's batch, set per micro-step: a dropout
                               node's element i is element dropout_micro x its count + i of the step's, so
                               the masks do not depend on how the batch is split (0 outside training) */
    st_tensor *loss;       /* the scalar the backward pass starts from */
    /* Called by st_graph_backward after node `node` (every node, last to
     * first, also those with nothing to do), when set: the data-parallel
     * trainer starts a gradient bucket's all-reduce there as soon as every
     * parameter in it is final, and drives the communicator's progress. An
     * error stops the walk. NULL (the default): nothing is called. */
    st_status (*backward_hook)(void *ctx, int node);
    void *backward_hook_ctx;
    /* Sums buf (n doubles) over the data-parallel ranks, in place, when set:
     * synchronised batch-norm (dist.sync_batchnorm) reduces its per-channel
     * sums with it in training forward and backward, so every rank must run
     * the same nodes in the same order (they do: one model, and checkpointing
     * recomputes the same blocks everywhere). `name` names the collective in
     * errors and must be the same on every rank. The trainer sets it to an
     * all-reduce over its communicator; layers know nothing of MPI. On a
     * device graph (dev set) buf is device memory and the sum is queued in
     * the device's compute-stream order: kernels queued after the call see
     * it, and the host does not wait (train.c: NCCL's all-reduce). NULL
     * (the default): one rank, nothing is reduced. */
    st_status (*allreduce_sum)(void *ctx, double *buf, int64_t n, const char *name);
    void *allreduce_ctx;
    /* Called before (end false) and after (end true) each node's forward and
     * backward, when set: the profiler trace times layers with it. NULL (the
     * default): one untaken branch per node. */
    void (*node_hook)(void *ctx, const st_node *n, bool backward, bool end);
    void *node_hook_ctx;
    /* Called (with node_hook_ctx) before and after each matrix product and
     * named kernel inside a node on a device, when set: the profiler's
     * kernel track (src/train/trace.h), which tells a layer's products and
     * kernels apart. `what` is a static label ("linear_ce dh"); `flops` a
     * product's 2 m n k (given at the end; 0 for other kernels). */
    void (*span_hook)(void *ctx, const char *what, bool end, double flops);
};

/* Whether the graph's tensors are laid out as a CUDA device holds them
 * (16-bit activation storage in a bf16/fp16 run, the device's fusions and
 * scratch): on a device, or sized as one would be (device_layout), but not
 * for a params_only graph's sizes. */
static inline bool st_graph_device_laid_out(const st_graph *g) {
    return (g->dev && !g->params_only) || g->device_layout;
}

/* Node n's forward also writes the next node's output and that node is a
 * `layer` ("gelu", "add": graph.c fuse_gelu). */
static inline bool st_node_fuses(const st_graph *g, const st_node *n, const char *layer) {
    return n->fwd_fuses_next && n->id + 1 < g->n_nodes && strcmp(g->nodes[n->id + 1].ops->name, layer) == 0;
}

/* Mark the start (end false) or the end of a product or kernel `what` inside
 * the running node (st_graph.span_hook), with a product's FLOPs at the end. */
static inline void st_graph_span(const st_graph *g, const char *what, bool end, double flops) {
    if (g->span_hook) g->span_hook(g->node_hook_ctx, what, end, flops);
}

/* --- parameters ---------------------------------------------------------- */
void st_params_free(st_params *p);
/* Fill every parameter and buffer from its init rule; the stream of each is
 * derived from (seed, name), so the result is independent of build order (and
 * of the device: on a CUDA device the values are made on the host and copied). */
st_status st_params_init(st_params *p, uint64_t seed);
st_tensor *st_params_find(const st_params *p, const char *name);
/* Set the compute precision (allocates the compute copy for bf16 and fp16;
 * before the layout, which then allocates it: graphs finalized after it
 * know the precision and store activations in 16 bits where they can). */
st_status st_params_set_precision(st_params *p, st_precision prec);
/* Say that the master weights changed (optimizer step, load, broadcast): the
 * next forward refreshes the compute copy. */
static inline void st_params_touch(st_params *p) { p->version++; }
/* The fp32 master of arena element i (in [master_lo, master_hi] when the
 * masters are sharded): &data[i], or its place in a device's shard. */
static inline float *st_params_master(const st_params *p, int64_t i) {
    return p->masters_sharded && p->dev ? p->master_alloc + (i - p->master_lo) : p->data + i;
}
/* The gradient of arena element i (in [grad_lo, grad_hi) when the
 * gradients are sharded): &grad[i], or its place in the shard. */
static inline float *st_params_grad(const st_params *p, int64_t i) {
    return p->grads_sharded ? p->grad_alloc + (i - p->grad_lo) : p->grad + i;
}
/* The arena range whose gradients this rank holds: [0, count), or the
 * shard's [grad_lo, grad_hi) (which may reach into the padding). */
static inline void st_params_grad_range(const st_params *p, int64_t *lo, int64_t *hi) {
    *lo = p->grads_sharded ? p->grad_lo : 0;
    *hi = p->grads_sharded ? p->grad_hi : p->count;
}
/* Point the parameter tensors at the rounded compute copy (refreshing it
 * when stale) or back at the masters; no-op in fp32. Forward and backward do
 * this themselves; code that calls a layer's ops directly (tests) uses it. */
void st_params_use_compute(st_params *p, bool on);
/* The compute copy of a bf16 or fp16 run, allocated once the layout is
 * known (params.c; the layout's and st_params_set_precision's). */
st_status st_params_alloc_compute(st_params *p);
/* The masters rounded into the compute copy where they changed since
 * (forward and backward first; an error where the masters are sharded and
 * the copy stale). */
st_status st_params_refresh_compute(st_params *p);
/* Keep only the fp32 masters of [lo, hi) (0 <= lo <= hi <= arena_count; on
 * the host the pages outside are given back, so page-aligned bounds free the
 * most): bf16/fp16 only; the compute copy is made current from the whole masters
 * first and the tensors point into it from now on. See `masters_sharded`. */
st_status st_params_shard_masters(st_params *p, int64_t lo, int64_t hi);
/* Keep only the gradients of [lo, hi) (a CUDA device: a new zeroed
 * allocation, the whole arena given back); the parameter tensors' `grad`
 * are NULL until the caller points them at its staging buffers. See
 * `grads_sharded`. */
st_status st_params_shard_grads(st_params *p, int64_t lo, int64_t hi);
/* Bytes of fp32 masters held: on the host the arena's resident pages, on a
 * device the allocation (the shard's when sharded). */
int64_t st_params_master_nbytes(const st_params *p);
/* Set every parameter from the whole fp32 arena w (arena order, host
 * memory, p->count values): the masters this rank holds and, with bf16 or
 * fp16, the compute copy rounded from all of w, so that it is current even
 * when the masters are sharded. */
st_status st_params_set_weights(st_params *p, const float *w);
/* Lay the compute copy out again at the arena's size (after the arenas were
 * padded, src/dist/zero.h): its contents are remade from the masters. */
st_status st_params_resize_compute(st_params *p);

/* --- graph building ----------------------------------------------------- */
st_status st_graph_init(st_graph *g, st_params *params);
void st_graph_free(st_graph *g);

/* Declare a trainable parameter (or, the first time, create it). On a graph
 * built for an existing model, returns the already laid-out tensor after
 * checking its shape. */
st_status st_graph_param(st_graph *g, const char *name, int ndim, const int64_t *shape, st_init init,
                         float init_scale, bool decay, st_tensor **out);
/* A non-trainable buffer (saved with the weights, no gradient). */
st_status st_graph_buffer(st_graph *g, const char *name, int ndim, const int64_t *shape, st_init init,
                          st_tensor **out);
/* A graph input the caller fills before forward. */
st_status st_graph_input(st_graph *g, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                         st_tensor **out);
/* A new activation; requires_grad is decided by st_graph_node. */
st_status st_graph_act(st_graph *g, const char *name, int ndim, const int64_t *shape, st_tensor **out);
/* Append a node. `out` must be a fresh activation from st_graph_act. The node's
 * output requires a gradient when any input or parameter does. */
st_status st_graph_node(st_graph *g, const st_layer_ops *ops, st_tensor *const *in, int n_in,
                        st_tensor *const *params, int n_params, st_tensor *out, st_node **node);

/* Bracket the nodes of one block (see `checkpointing`). Blocks do not nest. */
void st_graph_block_begin(st_graph *g);
void st_graph_block_end(st_graph *g);

/* Lay out memory. The first graph built on a st_params also lays out (and
 * allocates) the parameter arenas. */
st_status st_graph_finalize(st_graph *g);

/* --- running ------------------------------------------------------------ */
st_status st_graph_forward(st_graph *g);
/* Backward from g->loss with d(loss) = seed (1/micro-steps, times a loss scale). */
st_status st_graph_backward(st_graph *g, float seed);

/* A float tensor's values (its gradient with `grad`) as count floats on the
 * host, whatever its storage; and the other way, rounding to 16 bits when it
 * is stored so. For tests and tools, not the step loop. */
st_status st_tensor_read(st_device *dev, const st_tensor *t, bool grad, float *host);
st_status st_tensor_write(st_device *dev, st_tensor *t, bool grad, const float *host);
/* How a float tensor's data, or gradient, is stored: a parameter's gradient
 * is always fp32, everything else as st_tensor.store says. */
static inline st_precision st_tensor_store(const st_tensor *t, bool grad) {
    return grad && t->kind == ST_TENSOR_PARAM ? ST_PREC_FP32 : t->store;
}
/* Floats of arena a float activation of `count` elements takes in `store`. */
static inline int64_t st_store_floats(int64_t count, st_precision store) {
    return store == ST_PREC_FP32 ? count : (count + 1) / 2;
}

/* The most elements a tensor may hold (256 TiB of floats): the graph
 * refuses a shape past it, so that sums of counts in bytes cannot wrap. */
#define ST_MAX_ELEMENTS ((int64_t)1 << 46)

/* Elements of a shape. */
static inline int64_t st_shape_count(int ndim, const int64_t *shape) {
    int64_t c = 1;
    for (int i = 0; i < ndim; i++)
        c *= shape[i];
    return c;
}

#endif
