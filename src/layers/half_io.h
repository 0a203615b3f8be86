/* Which layers' CUDA twins read and write activations stored in 16 bits
 * (docs/precision.md, "16-bit storage on a CUDA device"), in C so that the
 * planner (src/hw/memory.c, through a layout-only graph with
 * st_graph.device_layout) counts a GPU run's activations from the same rule
 * the graph follows. In a bf16 or fp16 run on a device, st_graph_finalize
 * stores a float activation, and its gradient, in 16 bits when the layer that
 * writes it and every layer that reads it are listed here; every other one
 * stays an fp32 array holding 16-bit values, which the graph rounds. A twin
 * listed here handles both storages for each of its inputs and its output
 * (src/cuda/common.cuh, st_ld / st_st), rounding what it stores in 16 bits
 * exactly where the graph would have. */
#ifndef ST_LAYERS_HALF_IO_H
#define ST_LAYERS_HALF_IO_H

#include <stdbool.h>
#include <string.h>

#include "../model/graph.h"
#include "attention_layout.h"

static inline bool st_layer_half_io(const char *name) {
    static const char *const list[] = {"add",       "gelu",      "relu",          "dropout",    "linear",
                                       "layernorm", "embedding", "pos_embedding", "softmax_ce", "conv2d",
                                       "batchnorm", "maxpool2d", "flatten",       "mse",        "linear_ce"};
    for (size_t i = 0; i < sizeof list / sizeof *list; i++)
        if (strcmp(list[i], name) == 0) return true;
    return false;
}

/* The rule per node: the layers above, and attention on its flash path
 * (head sizes that are multiples of 16 up to 128: attention_layout.h), whose kernels read and
 * write either storage; the materialised path's products take fp32. */
static inline bool st_node_half_io(const st_node *n) {
    if (strcmp(n->ops->name, "attention") == 0) return st_attention_node_flash(n);
    return st_layer_half_io(n->ops->name);
}

#endif
