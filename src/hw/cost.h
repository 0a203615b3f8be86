/* The work of a layer graph: FLOPs of every matrix product (forward and
 * backward, exact for our layers) and the elements that elementwise layers
 * move, from each node's type, arguments and shapes.
 *
 * A matrix product (M x K) (K x N) is 2*M*N*K FLOPs; its backward is one such
 * product for the weight gradient and one for the input gradient when the
 * input needs one (the first layer of a network skips it), so 2x forward
 * almost everywhere. Attention counts its blocked causal products exactly as
 * attention.c runs them (blocks of ST_ATTENTION_BLOCK queries against the
 * keys up to the block's end). Elementwise layers (norms, activations,
 * residual adds, softmax, embeddings, pooling) are memory-bound: they count
 * the elements they read and write, which the time model turns into bytes in
 * the activation precision; their arithmetic is not counted as FLOPs.
 *
 * Not here: the step's optimizer (timing.c counts its bytes) or communication. */
#ifndef ST_HW_COST_H
#define ST_HW_COST_H

#include "model/graph.h"

typedef struct st_cost {
    double fwd_flops, bwd_flops; /* matrix products */
    double fwd_elems, bwd_elems; /* elements read + written by elementwise work */
} st_cost;

/* The cost of one node (built on a graph, finalised or layout-only). */
st_cost st_node_cost(const st_node *n);
/* The sum over a graph's nodes; a node whose output needs no gradient has no
 * backward (st_graph_backward skips it); with activation checkpointing, a
 * node inside a block adds its forward to the backward (the recompute). */
st_cost st_graph_cost(const st_graph *g);

#endif
