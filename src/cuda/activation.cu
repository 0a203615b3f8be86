/* CUDA twin of src/layers/activation.c: not written yet. Until it is, a graph on a
 * CUDA device that uses this layer fails at its first forward with a clear error. */
#include "common.cuh"

static st_status gelu_missing(st_node *n, st_graph *g) {
    return st_fail(ST_ERR_UNSUPPORTED, "layer gelu (%s) has no CUDA kernel yet; run on the CPU", n->out->name);
}

extern "C" const st_layer_ops st_cuda_gelu_ops = {"gelu", gelu_missing, gelu_missing, NULL};

static st_status relu_missing(st_node *n, st_graph *g) {
    return st_fail(ST_ERR_UNSUPPORTED, "layer relu (%s) has no CUDA kernel yet; run on the CPU", n->out->name);
}

extern "C" const st_layer_ops st_cuda_relu_ops = {"relu", relu_missing, relu_missing, NULL};
