/* The CUDA backend as seen from C: opening a device, its memory, and the
 * table of layer twins. No CUDA type appears here, so src/core/device.c and
 * src/model/graph.c include it as plain C; everything behind it is in the
 * .cu files of this folder (see common.cuh for what kernels share).
 * Only builds with ST_HAVE_CUDA (make CUDA=1, the default when nvcc exists)
 * compile or call these. */
#ifndef ST_CUDA_CUDA_H
#define ST_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "core/device.h"
#include "scaletrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct st_layer_ops;

int st_cuda_device_count(char *why, size_t why_len);
st_status st_cuda_open(int ordinal, st_device **out);
void st_cuda_free(st_device *d);
const char *st_cuda_name(const st_device *d);

st_status st_cuda_alloc(st_device *d, size_t nbytes, void **out);
void st_cuda_release(st_device *d, void *p);
st_status st_cuda_zero(st_device *d, void *p, size_t nbytes);
st_status st_cuda_fill_f32(st_device *d, float *p, size_t count, float value);
st_status st_cuda_upload(st_device *d, void *dst, const void *src, size_t nbytes);
st_status st_cuda_download(st_device *d, void *dst, const void *src, size_t nbytes);
st_status st_cuda_sync(st_device *d);

/* The CUDA twin of the layer whose CPU ops table is named `name` (e.g.
 * "linear"), or NULL when there is none. */
const struct st_layer_ops *st_cuda_layer_ops(const char *name);

#ifdef __cplusplus
}
#endif

#endif
