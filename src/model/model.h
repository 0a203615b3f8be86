/* Models: mlp, cnn and gpt built as layer graphs over one parameter arena.
 *
 * A st_model owns the parameters (st_params) and builds a graph per batch
 * size on demand (training micro-batch, evaluation batch); all graphs share
 * the parameters. Parameter names are stable and are the checkpoint names;
 * GPT uses the Hugging Face GPT-2 layout (docs/formats.md). */
#ifndef ST_MODEL_MODEL_H
#define ST_MODEL_MODEL_H

#include "scaletrain/config.h"
#include "graph.h"

typedef enum st_model_kind { ST_MODEL_MLP, ST_MODEL_CNN, ST_MODEL_GPT } st_model_kind;
/* The kind model.type names ("mlp", "cnn", "gpt") into *out; false, *out
 * as it was, for any other name. */
bool st_model_kind_named(const char *type, st_model_kind *out);

/* What the data looks like, as the model needs it. */
typedef struct st_model_input {
    int64_t height, width, channels; /* images (NHWC) */
    int64_t num_classes;
    int64_t vocab_size; /* tokens */
    int64_t seq_len;    /* tokens per sample (GPT: block_size) */
} st_model_input;

/* One graph for one batch size, with its named endpoints. */
typedef struct st_model_graph {
    st_graph g;
    int64_t batch;
    int64_t seq_len;   /* a gpt's tokens per sample (the model's, or st_model_graph_build_forward_len's) */
    st_tensor *x;      /* F32 (B, H, W, C) / (B, D), or I32 tokens (B, T) */
    st_tensor *y;      /* I32 targets (B) or (B, T) */
    st_tensor *logits; /* (B, classes) or (B, T, V); NULL for a gpt with model.fused_head (linear_ce) */
    st_tensor *loss;   /* (1) */
    bool last_only;    /* a decode graph's logits for each sequence's last position alone: (B, 1, V) */
} st_model_graph;

typedef struct st_model {
    st_model_kind kind;
    st_config cfg; /* the model section is what matters; kept whole for checkpoints */
    st_model_input in;
    st_params params;
    int64_t n_params;
    bool keep_acts; /* graphs built keep every activation and its gradient (graph.h; tests) */
    bool fused_gelu; /* a gpt's device graphs (and their layout) put GELU in the MLP's products'
                        epilogues (st_graph.fuse_gelu); from model.fused_gelu at creation
                        (st_model_fused_gelu), the planner sets it per device it sizes */
    /* The inputs' normalisation ((x - mean) / std; images and features),
     * saved in the weights' metadata ("data.mean", "data.std") when has_norm,
     * so that evaluating or resuming them normalises as their training did.
     * st_model_load sets norm_loaded, and mean and std to the file's, when
     * the file records them (else clears norm_loaded). */
    float norm_mean, norm_std;
    bool has_norm, norm_loaded;
    /* data.val_split and data.val_split_seed of the run (saved under those
     * names); after st_model_load, what the file records, or -1 when it
     * does not */
    double val_split, val_split_loaded;
    int64_t val_split_seed, val_split_seed_loaded;
} st_model;

/* Create the model and lay out its parameters (not yet initialised: call
 * st_model_init_weights or st_model_load). Frees with st_model_free. */
st_status st_model_create(const st_config *cfg, const st_model_input *in, st_model **out);
/* The same with every arena (parameters, gradients, buffers and the
 * activations of each graph built later) on `dev` (NULL = host), and every
 * layer running there. The caller keeps `dev` open until st_model_free.
 * Initialisation, save and load copy through the host. */
st_status st_model_create_on(const st_config *cfg, const st_model_input *in, st_device *dev, st_model **out);
/* The same with the gradient arena from `grad` (graph.h st_arena_hook; NULL:
 * none), e.g. the communicator's zero-copy arena, and the arenas laid out as
 * `lay` says (graph.h st_params_layout: padded to whole shards, this rank's
 * shard alone; NULL: whole). */
st_status st_model_create_hooked(const st_config *cfg, const st_model_input *in, st_device *dev,
                                 const st_arena_hook *grad, const st_params_layout *lay, st_model **out);
/* A model for forward alone (generation, evaluation) on `dev` (NULL = host):
 * no gradient arena, so the parameters take half the memory; only forward
 * graphs (st_model_graph_build_forward*, _decode) can be built on it. */
st_status st_model_create_inference(const st_config *cfg, const st_model_input *in, st_device *dev,
                                    st_model **out);
void st_model_free(st_model *m);
/* The planner's model: parameters laid out (names, shapes, counts) but no
 * memory allocated, so a 1.5B-parameter model can be planned on a laptop.
 * Only st_model_graph_layout, n_params and the params table may be used. */
st_status st_model_create_layout(const st_config *cfg, const st_model_input *in, st_model **out);
/* A graph for `batch` samples with every node, shape and size (act_count,
 * grad_count, int_count, work_count) but no activation memory. */
st_status st_model_graph_layout(st_model *m, int64_t batch, st_model_graph *mg);
/* The same, sized as the CUDA backend lays it out (st_layer_ops.device_layout:
 * attention's flash kernels save one log-sum-exp per row, not P). */
st_status st_model_graph_layout_device(st_model *m, int64_t batch, st_model_graph *mg);
/* The layout of st_model_graph_build_forward's graph (device: as the CUDA
 * backend lays it out). */
st_status st_model_graph_layout_forward(st_model *m, int64_t batch, bool device, st_model_graph *mg);
st_status st_model_init_weights(st_model *m, uint64_t seed);

/* Build a graph for `batch` samples. */
st_status st_model_graph_build(st_model *m, int64_t batch, st_model_graph *mg);
/* A graph for forward alone (evaluation; st_graph.forward_only): no
 * activation gradients, every activation that is neither an input nor an
 * output freed after its last reader, so it holds a few layers' activations
 * at once instead of the whole model's. Backward on it is an error. */
st_status st_model_graph_build_forward(st_model *m, int64_t batch, st_model_graph *mg);
/* The same for a gpt on sequences of seq_len tokens (1 to model.block_size)
 * instead of the model's: generation's windows (sample.h), whose logits
 * the host reads (kept in fp32 on a device). */
st_status st_model_graph_build_forward_len(st_model *m, int64_t batch, int64_t seq_len, st_model_graph *mg);
/* Cached decoding (generation, sample.c): a cache of keys and values for
 * `batch` sequences of up to cap positions (at most model.block_size) on
 * the model's device, and graphs of n positions a sequence (1 to the
 * cache's cap) that run them through the model at the graph's g.pos
 * (set before each forward: positions g.pos .. g.pos + n - 1; the cache
 * holds every earlier one), each attention layer reading and extending the
 * cache (st_attention_cached). The graph has the logits (B, n, V), or with
 * last_only each sequence's last position's (B, 1, V), kept in fp32, and
 * no targets nor loss: x, logits. */
st_status st_kv_cache_create(st_model *m, int64_t batch, int64_t cap, st_kv_cache **out);
void st_kv_cache_free(st_model *m, st_kv_cache *kv); /* NULL is fine */
st_status st_model_graph_build_decode(st_model *m, int64_t batch, int64_t n, st_kv_cache *kv, bool last_only,
                                      st_model_graph *mg);
void st_model_graph_free(st_model_graph *mg);

/* model.fused_gelu for a gpt on a CUDA device of compute capability cc_major
 * (0: the CPU, never): on, off, or auto = from 9.0 (Hopper), where cuBLASLt
 * runs its GELU epilogues fused into the product (on older parts a separate
 * epilogue kernel made it slower than GELU as its own kernel). The reason
 * goes to why (when not NULL) for the printed configuration. */
bool st_model_fused_gelu(const st_config *c, int cc_major, char *why, size_t n);

/* Why model.fused_head auto is on or off for a gpt at micro-batch `micro`
 * of seq_len tokens and vocab_size: the logits against the fused head's
 * chunks (st_linear_ce_saves_memory), for the printed configuration and
 * plan. */
void st_model_fused_head_why(bool fused, int64_t micro, int64_t seq_len, int64_t vocab_size, char *why,
                             size_t n);
/* Why model.attention_kernel auto is left so on the CPU. */
#define ST_ATTENTION_CPU_WHY "the CPU runs its own attention; the key chooses a GPU's"

/* model.attention_kernel auto for a gpt on a CUDA device of compute
 * capability cc_major.cc_minor: cuDNN's fused attention where it was
 * measured faster than the flash kernels (a bf16 run from 9.0:
 * bench/RESULTS.md, 1.14x the whole GPT-2 step on an H200) and cuDNN is
 * there; else the flash kernels. cudnn_lib: the library this node loads,
 * "" where it has none, NULL where that is not known (a plan for other
 * hardware: the reason says so). The reason goes to why. */
bool st_model_attention_cudnn(const char *precision, int cc_major, int cc_minor, const char *cudnn_lib,
                              char *why, size_t n);

/* Forward FLOPs per sample (matrix products and convolutions, 2 per MAC). */
double st_model_flops_per_sample(const st_model *m);

/* Weights as safetensors: every parameter and buffer by name, F32 (the
 * master weights: p->data, downloaded first from a device). */
st_status st_model_save(const st_model *m, const char *path);
/* The same from host arrays laid out as m's parameter and buffer arenas. */
st_status st_model_save_host(const st_model *m, const float *data, const float *buffers, const char *path);
/* Host copies of m's parameter and buffer arenas (st_alloc_aligned; free
 * both with st_free_aligned), downloaded from a device. */
st_status st_model_copy_arenas(const st_model *m, float **data, float **buffers);
/* Load and check every name, shape and dtype; each mismatch is reported by name. */
st_status st_model_load(st_model *m, const char *path);
/* An open safetensors file (path) that is not weights but a checkpoint's
 * optimizer state (its metadata's format): an error saying what to give
 * instead; ST_OK otherwise. */
typedef struct st_safetensors st_safetensors;
st_status st_model_file_is_weights(const st_safetensors *f, const char *path);
/* The model.* settings an open weights file (path) records in its metadata
 * that shape its tensors (not how that run computed them: its kernels,
 * fusions, dropout), into cfg's keys the user left at their defaults (a CONFIG's, a --set's or
 * a preset's key wins: the load then names any difference), each marked as
 * read from path. A file without them (written elsewhere) leaves cfg as it
 * was. */
st_status st_model_config_from_file(st_config *cfg, const st_safetensors *f, const char *path);

#endif
