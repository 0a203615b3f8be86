/* The memory model: bytes one device (one rank) holds for a training run,
 * from the model's layer graph.
 *
 * Model states per parameter, as the engine holds them: the fp32 master
 * weights, fp32 gradients, and the optimizer's fp32 state (AdamW: 2
 * moments; SGD: 1, which our SGD keeps even at momentum 0); with mixed
 * precision (bf16/fp16) the compute copy of the weights beside the masters:
 * 2 bytes on a GPU, 4 on the CPU (floats holding 16-bit values). ZeRO-1
 * shards the optimizer state over N ranks, and with bf16/fp16 the masters
 * with it (the compute copy is all-gathered: src/model/graph.h
 * masters_sharded); ZeRO-2 shards the gradients too (on a GPU beside the
 * staging its buckets are written in: `buckets` below, src/dist/ddp.h).
 * fp32 ZeRO keeps the masters whole: they are the weights forward reads.
 * Mixed AdamW on a GPU: 4 + 2 + 4 + 8 = 18 bytes under DDP, 6 + 12/N under
 * ZeRO-1, 2 + 16/N under ZeRO-2 (Rajbhandari et al. 2020 count 16, 4 +
 * 12/N and 2 + 14/N: the same but for 4-byte gradients where theirs have
 * 2). Offload moves the rank's range of the optimizer state to host
 * memory, with pinned copies of the range's masters and gradients
 * (docs/distributed.md).
 *
 * Activations come from the graph built (layout only, nothing allocated) at
 * the micro-batch itself: the activation arena (outputs and saved state), the
 * activation-gradient arena (shared by lives in backward, graph.c
 * place_grads), the integer arena (inputs, targets) and the
 * shared workspace, exactly as st_graph_finalize allocates them. They are
 * linear in the batch except the workspace (per-thread scratch); with
 * bf16/fp16 on a GPU the activations of the layers that take 16-bit storage
 * (src/layers/half_io.h) and their gradients take 2 bytes, as the CUDA
 * backend stores them; the CPU stores floats. Then the evaluation
 * graph (the run keeps one at train.eval_batch_size), the loader's ring of
 * batch buffers, the gradient buckets (DDP, ZeRO-1 and the CPU's ZeRO-2
 * reduce and gather in place on the arenas: none; ZeRO-2 on a GPU its
 * staging buffer as the run plans it, on the graph; with dist.grad_dtype bf16 or
 * fp16 the buckets' 16-bit copies, 2 bytes a parameter or a staged float), on the CPU the dataset held in
 * memory, and on a GPU the CUDA backend's own buffers (`backend`: cuBLASLt's workspace,
 * ST_CUDA_LT_WORKSPACE_BYTES, and the scratch for 16-bit copies of operands
 * stored as floats, as large as the largest product's). The CUDA twins'
 * workspace is the graph's (conv2d's by src/layers/conv2d_layout.h,
 * attention's by attention_layout.h).
 *
 * On a GPU (`device_feed`) the loader's ring is pinned host memory (`pinned`,
 * not on the device) and the batch feed (src/train/feed.c) copies each batch
 * into one of two device buffers: the graph's own inputs (in `ints` and
 * `acts`) and a second pair, which is `loader` there. */
#ifndef ST_HW_MEMORY_H
#define ST_HW_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

typedef struct st_mem_opts {
    bool mixed;       /* bf16/fp16: a compute copy of the weights, 16-bit activations on a GPU */
    int optim_states; /* fp32 values per parameter: 2 AdamW, 1 SGD */
    int zero;         /* 0 DDP, 1, 2 */
    bool offload;     /* optimizer state and gradient shards in host memory */
    int ranks;        /* data-parallel ranks the shards spread over */
    double bucket_cap_mb;
    int grad_wire_bytes; /* dist.grad_dtype: 2 for bf16/fp16 (a 16-bit copy of the buckets), else 4 or 0 */
    int loader_buffers;       /* prefetch + held batch buffers (0: no loader) */
    bool device_feed;         /* a GPU run: the ring pinned on the host, a second device input buffer */
    bool device_layout;       /* a GPU run: the graphs as the CUDA backend lays them out */
    bool fused_gelu;          /* and with GELU in the MLP's epilogues (st_model.fused_gelu) */
    int64_t sample_in_bytes;  /* one sample in a batch buffer: inputs */
    int64_t sample_out_bytes; /* and targets */
    int64_t eval_batch;       /* the evaluation graph's batch; 0 = none */
    int64_t data_bytes;       /* dataset held in this memory (the CPU); 0 on a GPU */
    bool async_ckpt;          /* train.checkpoint_async: host copies while a checkpoint is written */
    bool forward_only;        /* an evaluation alone (scaletrain eval): the weights, no gradients or
                                 optimizer state, and the forward graph at eval_batch (> 0) alone */
} st_mem_opts;

typedef struct st_mem {
    int64_t params, grads, optim;        /* model states on the device */
    int64_t acts, act_grads, ints, work; /* the training graph */
    int64_t eval, loader, buckets, data; /* the rest */
    int64_t backend;                     /* a GPU run: cuBLASLt's workspace and the 16-bit operand scratch */
    int64_t total;                       /* on the device */
    int64_t setup; /* the set-up's peak (memory.c setup_peak): on the CPU the whole weights and gradients
                      before ZeRO gives back the others' shards, so more than total with ZeRO over many
                      ranks; on a GPU only this rank's shards are made */
    int64_t host;                        /* offloaded to host memory */
    int64_t pinned;                      /* a GPU run's pinned host ring of batch buffers */
    int64_t ckpt_copy; /* async_ckpt: the weights and this rank's optimizer state copied while a checkpoint
                          is written (fp32); in total on the CPU, in host on a GPU */
    double act_per_sample; /* bytes of acts + act_grads + ints per sample */
    bool head_fused;       /* a gpt's training graph at this micro-batch fuses its head with the loss
                              (model.fused_head: no logits kept) */
} st_mem;

/* Bytes per device for micro-batch `micro` of model m (a layout model from
 * st_model_create_layout, or a real one). With o->forward_only, those of
 * an evaluation alone (st_model_create_inference's model: the masters and
 * the compute copy, the buffers; the forward graph at o->eval_batch, the
 * batches it reads, the backend's own; `micro` unused): eval, params,
 * loader, data and backend, the rest zero. */
st_status st_mem_estimate(st_model *m, int64_t micro, const st_mem_opts *o, st_mem *out);

/* Model states alone (params + grads + optimizer on the device), the part
 * ZeRO shards: what the strategy choice looks at. */
int64_t st_mem_model_states(int64_t n_params, const st_mem_opts *o);
/* The same as st_mem fields: params, grads, optim and (offload) host; the
 * rest zero. */
st_status st_mem_estimate_states(int64_t n_params, const st_mem_opts *o, st_mem *out);

#endif
