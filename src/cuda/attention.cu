/* CUDA twin of src/layers/attention.c: not written yet. Until it is, a graph on a
 * CUDA device that uses this layer fails at its first forward with a clear error. */
#include "common.cuh"

static st_status attention_missing(st_node *n, st_graph *g) {
    return st_fail(ST_ERR_UNSUPPORTED, "layer attention (%s) has no CUDA kernel yet; run on the CPU", n->out->name);
}

extern "C" const st_layer_ops st_cuda_attention_ops = {"attention", attention_missing, attention_missing, NULL};
