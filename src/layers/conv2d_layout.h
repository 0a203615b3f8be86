/* The CUDA conv2d twin's workspace (src/cuda/conv2d.cu), in C so that the
 * planner's device layout (st_graph.device_layout, src/hw/memory.c) counts
 * it by the rule the twin follows: the permuted weight wp (Cout, K), its
 * gradient's transpose dwt (K, Cout) and one im2col chunk of whole images
 * (at most ST_CONV2D_DEVICE_CHUNK floats, at least one image), K = k*k*Cin,
 * P = Ho*Wo, each padded to 16 floats. The CPU's workspace differs (sized
 * for its threads, src/layers/conv2d.c). */
#ifndef ST_LAYERS_CONV2D_LAYOUT_H
#define ST_LAYERS_CONV2D_LAYOUT_H

#include <stdint.h>

#include "../model/graph.h"
#include "args.h"

#define ST_CONV2D_DEVICE_CHUNK ((int64_t)1 << 24) /* floats of one im2col chunk (64 MiB) */

/* Images per im2col chunk. */
static inline int64_t st_conv2d_device_images(int64_t B, int64_t P, int64_t K) {
    int64_t nb = ST_CONV2D_DEVICE_CHUNK / (P * K);
    if (nb < 1) nb = 1;
    if (nb > B) nb = B;
    return nb;
}

/* The twin's workspace in floats: wp | dwt | col. */
static inline int64_t st_conv2d_device_work(int64_t B, int64_t P, int64_t K, int64_t Cout) {
    return 2 * st_align_floats(Cout * K) + st_align_floats(st_conv2d_device_images(B, P, K) * P * K);
}

/* Set a conv2d node's work_count to the twin's (a layout-only graph for a
 * GPU calls it; the twin's `prepare` does the same on a device). */
static inline void st_conv2d_device_layout(st_node *n) {
    const int64_t B = n->in[0]->shape[0], Cin = n->in[0]->shape[3];
    const int64_t P = n->out->shape[1] * n->out->shape[2], Cout = n->out->shape[3];
    const int64_t k = n->args.i[ST_CONV_K];
    n->work_count = st_conv2d_device_work(B, P, k * k * Cin, Cout);
}

#endif
