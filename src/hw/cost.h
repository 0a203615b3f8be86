/* The work of a layer graph: FLOPs of every matrix product (forward and
 * backward, exact for our layers) and the elements that elementwise layers
 * move, from each node's type, arguments and shapes.
 *
 * Two views of the same graph:
 *   the model's work (fwd_flops, bwd_flops, fwd_elems, bwd_elems): every
 *     product as written, a convolution as its direct form (2 M N K with
 *     K = Cin k k), as PyTorch's FLOP counters do. MFU, GFLOP/s and the GPU
 *     presets' step time use it (cuDNN and cuBLAS do not run our Winograd).
 *   the CPU kernels' work (cpu): what src/layers/ actually runs on the CPU:
 *     a 3x3 stride-1 convolution that takes the Winograd F(2x2, 3x3) path
 *     (ST_CONV_WINO, winograd.c) does 16 products of (tiles x Cin)(Cin x Cout)
 *     per pass instead of im2col's, 2.25x fewer multiply-adds, and moves its
 *     transforms instead of the im2col matrix; elementwise layers whose CPU
 *     loops are bound by arithmetic rather than memory (libm's scalar expf in
 *     softmax_ce, the tanh of GELU, attention's softmax over P) count their
 *     elements with a weight measured on this machine kind (cost.c). The CPU
 *     time model (timing.h) uses this view.
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

/* One backend's work for one pass direction pair. */
typedef struct st_work {
    double fwd_flops, bwd_flops; /* matrix products */
    double fwd_elems, bwd_elems; /* elements read + written by elementwise work (weighted on the CPU) */
} st_work;

typedef struct st_cost {
    double fwd_flops, bwd_flops; /* the model's matrix products (direct convolutions) */
    double fwd_elems, bwd_elems; /* elements read + written by elementwise work */
    st_work cpu;                 /* what the CPU kernels do (Winograd, weighted elements) */
    double fwd_passes, bwd_passes; /* node forward / backward calls: a fixed cost each */
} st_cost;

/* The cost of one node (built on a graph, finalised or layout-only). */
st_cost st_node_cost(const st_node *n);
/* The sum over a graph's nodes; a node whose output needs no gradient has no
 * backward (st_graph_backward skips it); with activation checkpointing, a
 * node inside a block adds its forward to the backward (the recompute), and
 * so does a node selective checkpointing recomputes (st_node.remat_before). */
st_cost st_graph_cost(const st_graph *g);

/* The multiply-add FLOPs of a Winograd F(2x2, 3x3) pass over a (B, H, W, Cin)
 * input to Cout channels (16 products of (tiles x Cin)(Cin x Cout), tiles =
 * B ceil(H/2) ceil(W/2)); backward runs it once for the weight gradient and
 * once for the input gradient. */
double st_cost_wino_flops(int64_t B, int64_t H, int64_t W, int64_t Cin, int64_t Cout);

#endif
