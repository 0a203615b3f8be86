/* CUDA twin of src/layers/pos_embedding.c: not written yet. Until it is, a graph on a
 * CUDA device that uses this layer fails at its first forward with a clear error. */
#include "common.cuh"

static st_status pos_embedding_missing(st_node *n, st_graph *g) {
    return st_fail(ST_ERR_UNSUPPORTED, "layer pos_embedding (%s) has no CUDA kernel yet; run on the CPU", n->out->name);
}

extern "C" const st_layer_ops st_cuda_pos_embedding_ops = {"pos_embedding", pos_embedding_missing, pos_embedding_missing, NULL};
