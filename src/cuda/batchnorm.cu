/* CUDA twin of src/layers/batchnorm.c: not written yet. Until it is, a graph on a
 * CUDA device that uses this layer fails at its first forward with a clear error. */
#include "common.cuh"

static st_status batchnorm_missing(st_node *n, st_graph *g) {
    return st_fail(ST_ERR_UNSUPPORTED, "layer batchnorm (%s) has no CUDA kernel yet; run on the CPU", n->out->name);
}

extern "C" const st_layer_ops st_cuda_batchnorm_ops = {"batchnorm", batchnorm_missing, batchnorm_missing, NULL};
