/* Winograd F(2x2, 3x3) convolution, conv2d's CPU path for 3x3 kernels with
 * stride 1 and padding 1 (see winograd.c). dims = {B, H, W, Cin, Cout}; x
 * and y are NHWC, w is (Cout, Cin, 3, 3); work holds st_wino_work floats,
 * sized for nt_built threads (the layer never runs more). */
#ifndef ST_LAYERS_WINOGRAD_H
#define ST_LAYERS_WINOGRAD_H

#include <stdbool.h>
#include <stdint.h>

bool st_wino_applies(int64_t k, int64_t stride, int64_t pad, int64_t Cin, int64_t Cout);
int64_t st_wino_work(const int64_t dims[5], int nt_built);
/* y = conv(x, w) + bias (bias may be NULL) */
void st_wino_forward(const int64_t dims[5], int nt_built, const float *x, const float *w, const float *bias,
                     float *y, float *work);
/* dw += the weight gradient (dw may be NULL); dx = (or += when acc) the
 * input gradient (dx may be NULL). The bias gradient is the caller's. */
void st_wino_backward(const int64_t dims[5], int nt_built, const float *x, const float *dy, const float *w,
                      float *dw, float *dx, bool acc, float *work);

#endif
