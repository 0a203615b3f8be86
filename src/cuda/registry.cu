/* The CUDA twin of each layer, by the name of its CPU ops table. */
#include <string.h>

#include "common.cuh"

extern "C" const st_layer_ops st_cuda_linear_ops;
extern "C" const st_layer_ops st_cuda_embedding_ops;
extern "C" const st_layer_ops st_cuda_pos_embedding_ops;
extern "C" const st_layer_ops st_cuda_layernorm_ops;
extern "C" const st_layer_ops st_cuda_gelu_ops;
extern "C" const st_layer_ops st_cuda_relu_ops;
extern "C" const st_layer_ops st_cuda_add_ops;
extern "C" const st_layer_ops st_cuda_dropout_ops;
extern "C" const st_layer_ops st_cuda_attention_ops;
extern "C" const st_layer_ops st_cuda_attention_cached_ops;
extern "C" const st_layer_ops st_cuda_last_row_ops;
extern "C" const st_layer_ops st_cuda_conv2d_ops;
extern "C" const st_layer_ops st_cuda_maxpool2d_ops;
extern "C" const st_layer_ops st_cuda_batchnorm_ops;
extern "C" const st_layer_ops st_cuda_flatten_ops;
extern "C" const st_layer_ops st_cuda_softmax_ce_ops;
extern "C" const st_layer_ops st_cuda_mse_ops;
extern "C" const st_layer_ops st_cuda_linear_ce_ops;

extern "C" const st_layer_ops *st_cuda_layer_ops(const char *name) {
    static const st_layer_ops *const table[] = {
        &st_cuda_linear_ops,        &st_cuda_embedding_ops,
        &st_cuda_pos_embedding_ops, &st_cuda_layernorm_ops,
        &st_cuda_gelu_ops,          &st_cuda_relu_ops,
        &st_cuda_add_ops,           &st_cuda_dropout_ops,
        &st_cuda_attention_ops,     &st_cuda_attention_cached_ops,
        &st_cuda_last_row_ops,      &st_cuda_conv2d_ops,
        &st_cuda_maxpool2d_ops,     &st_cuda_batchnorm_ops,
        &st_cuda_flatten_ops,       &st_cuda_softmax_ce_ops,
        &st_cuda_mse_ops,           &st_cuda_linear_ce_ops,
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}
