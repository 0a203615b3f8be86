/* cuDNN's fused attention (its SDPA graphs, built with NVIDIA's header-only
 * cudnn-frontend) for the CUDA attention twin (attention.cu), chosen by
 * model.attention_kernel: the same causal softmax(Q K^T scale) V on the
 * same layout and saved state as the flash kernels (attention_flash.cuh):
 * Q, K and V read in place from qkv (B, T, 3C), y (B, T, C) written, and
 * the log-sum-exp of each row's scaled scores (B, nh, T) floats, which
 * cuDNN calls the softmax stats. So either kind of kernel runs the
 * backward of the other's forward.
 *
 * bf16 storage only (cuDNN's fused attention takes 16-bit tensors), 16-byte
 * aligned; the twin uses its flash kernels for everything else, and for a
 * pass of a shape cuDNN has no engine for (saying so once). Graphs are
 * built once per shape (forward and backward together, in the twin's
 * prepare, before any step) and kept with the device; each needs a
 * workspace that the twin takes from the graph's scratch (st_graph.work).
 * The backward is cuDNN's deterministic algorithm: the same bits every run,
 * as the flash kernels give.
 *
 * Compiled by the host compiler (src/cuda/attention_cudnn.cpp: frontend
 * headers compile there in a tenth of nvcc's time) only in builds with
 * ST_HAVE_CUDNN (the Makefile's CUDNN). Plain C types here. */
#ifndef ST_CUDA_ATTENTION_CUDNN_H
#define ST_CUDA_ATTENTION_CUDNN_H

#include <stdbool.h>
#include <stdint.h>

#include "scaletrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_cudnn st_cudnn; /* a cuDNN handle and its graphs, one per device */

typedef struct st_cudnn_sdpa {
    int64_t B, T, nh, hs; /* C = nh hs */
    float scale;
} st_cudnn_sdpa;

/* A handle on the current CUDA device; `where` names it in errors.
 * ST_ERR_UNSUPPORTED when cuDNN's library does not load or refuses the
 * handle (attention.cu then runs the flash kernels). */
st_status st_cudnn_create(const char *where, st_cudnn **out);
void st_cudnn_destroy(st_cudnn *c); /* NULL is fine */
/* The forward graph of this shape, and the backward one when `backward`
 * (a training graph; an evaluation graph runs forward alone), built now
 * unless they were; *ws_bytes the larger of their workspaces (the
 * backward's only when asked for). When cuDNN cannot take a pass of the
 * shape (no engine for it, or a failure), ST_ERR_UNSUPPORTED naming the
 * pass, the shape and cuDNN's reason, the first time, the other pass's
 * graph still built; remembered: later calls return ST_OK, and
 * st_cudnn_sdpa_ready says which pass cuDNN runs. */
st_status st_cudnn_sdpa_plan(st_cudnn *c, const st_cudnn_sdpa *s, bool backward, int64_t *ws_bytes);
/* Whether this shape's forward (or backward) graph is built. */
bool st_cudnn_sdpa_ready(const st_cudnn *c, const st_cudnn_sdpa *s, bool backward);
/* Queued on `stream`: y and lse from qkv (bf16 arrays). */
st_status st_cudnn_sdpa_forward(st_cudnn *c, void *stream, const st_cudnn_sdpa *s, const void *qkv, void *y,
                                float *lse, void *ws);
/* Queued on `stream`: dqkv (written, every element) from qkv, y, dy, lse. */
st_status st_cudnn_sdpa_backward(st_cudnn *c, void *stream, const st_cudnn_sdpa *s, const void *qkv,
                                 const void *y, const void *dy, const float *lse, void *dqkv, void *ws);
/* cuDNN's version as it reports it (e.g. 91900). */
int64_t st_cudnn_version(void);
/* The frontend's own check of both graphs for this shape (tensor shapes,
 * strides, types and the SDPA options) for a GPU of compute capability
 * sm_version (90: Hopper), which needs no GPU: what a machine without one
 * can check of them. ST_ERR_UNSUPPORTED with its reason. */
st_status st_cudnn_sdpa_validate(const st_cudnn_sdpa *s, int sm_version);

#ifdef __cplusplus
}
#endif

#endif
