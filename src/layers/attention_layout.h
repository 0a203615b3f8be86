/* How the CUDA attention twin (src/cuda/attention.cu) lays out its node, in
 * C so that the planner (src/hw/memory.c) can count a GPU run's memory in a
 * build without CUDA, from the same rule the twin's prepare follows. Head
 * sizes that are multiples of 16 up to 128 (16, 32, 48, ..., 128) take the
 * flash kernels: saved state one
 * log-sum-exp per row, (B, nh, T) floats, and as much workspace (backward's
 * row sums D). Other head sizes keep the materialised path: saved state P,
 * (B, nh, T, T) as on the CPU, and one batch row's dP, (nh, T, T), as
 * workspace. */
#ifndef ST_LAYERS_ATTENTION_LAYOUT_H
#define ST_LAYERS_ATTENTION_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the flash kernels take this shape. */
bool st_attention_flash_fits(int64_t B, int64_t T, int64_t nh, int64_t hs);
/* The twin's saved state and workspace (floats). */
void st_attention_device_counts(int64_t B, int64_t T, int64_t nh, int64_t hs, int64_t *saved, int64_t *work);
/* The workspace cuDNN's fused attention asks for (bytes), as
 * cudnn-frontend sizes it for the graphs src/cuda/attention_cudnn.cpp
 * builds: with backward (its deterministic algorithm) dP in bf16, (B, nh,
 * T, T) with T rounded up to 64 and 128, and the softmax sums (B, nh, T)
 * in fp32; forward only, the sums. The run asks cuDNN itself
 * (attention.cu's prepare); this is the planner's figure. */
int64_t st_attention_cudnn_bytes(int64_t B, int64_t T, int64_t nh, bool backward);
/* Room for `bytes` of cuDNN workspace in the node's workspace (floats; 256
 * bytes more for its alignment, attention.cu's cudnn_ws): the one rule for
 * the twin's prepare (cuDNN's own figure) and the layout below (the
 * planner's). */
struct st_node;
void st_attention_cudnn_work(struct st_node *n, int64_t bytes);
struct st_graph;
/* Whether an attention node takes the flash kernels on a device. */
bool st_attention_node_flash(const struct st_node *n);
/* Whether it runs on cuDNN's fused attention: the graph asks for it
 * (st_graph.attention_cudnn), the run is bf16 and the node takes the flash
 * kernels (whose saved state cuDNN shares). The one rule for the twin
 * (attention.cu builds the node's graphs in prepare when it holds) and the
 * planner's layout below; a pass cuDNN then has no engine for falls back to
 * the flash kernels at run time. */
bool st_attention_node_cudnn(const struct st_graph *g, const struct st_node *n);
/* Set an attention node's saved_count and work_count to the twin's: a
 * layout-only graph for a GPU (st_graph.device_layout) calls it; on cuDNN
 * (st_attention_node_cudnn) its workspace counts as the node's, backward's
 * too unless the graph is forward only. */
void st_attention_device_layout(const struct st_graph *g, struct st_node *n);

#endif
