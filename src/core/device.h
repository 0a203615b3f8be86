/* Where a model's tensors live and its layers run: the host CPU or one CUDA
 * device.
 *
 * A NULL st_device* is the host: memory is 64-byte aligned host memory and the
 * calls below are plain memset/memcpy. A CUDA device (src/cuda/) owns its
 * streams (compute, communication, host-to-device copies), a cuBLASLt handle
 * and workspace; every call here is ordered on its compute stream, and
 * st_device_download waits for what it reads. Nothing here is called in a hot
 * loop: layers use their backend's own kernels (the ops table a graph picks at
 * build time). This header carries no CUDA type: a build without CUDA still
 * compiles every caller, and st_device_open_cuda says why it cannot open one. */
#ifndef ST_CORE_DEVICE_H
#define ST_CORE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/precision.h"
#include "scaletrain/status.h"

typedef struct st_device st_device;

/* The cuBLASLt workspace a CUDA device allocates when it opens (32 MiB
 * covers Hopper's split-K and stream-K); the memory model counts it. */
#define ST_CUDA_LT_WORKSPACE_BYTES ((int64_t)32 << 20)

/* The digits after the point of a size in GiB as a device's name gives it
 * (st_device_name and `check`'s line alike): one below 10 GiB ("7.5 GiB"),
 * none from there ("80 GiB" for an H100's 79.6, as its name says 80GB). */
static inline int st_gib_digits(double gib) { return gib < 9.95 ? 1 : 0; }

/* True when this binary was built with the CUDA backend. */
bool st_device_cuda_built(void);
/* Number of usable CUDA devices (0 without a GPU, a driver or a CUDA build);
 * `why`, when not NULL, receives the reason when it is 0. */
int st_device_cuda_count(char *why, size_t why_len);
/* The GPU a rank opens among the n its process sees, by its rank on the
 * node: that one when it sees more than local_rank GPUs (the node's ranks
 * all see the node's GPUs), else local_rank % n: each rank given GPUs of its
 * own (srun --gpus-per-task, CUDA_VISIBLE_DEVICES set per rank) takes its
 * first with one each. Ranks that end up on one GPU (more ranks than GPUs)
 * are refused together by st_agree_gpus (dist/agree.h). n >= 1. */
int st_device_rank_ordinal(int local_rank, int n);
/* Open CUDA device `ordinal` (the local rank's GPU). ST_ERR_UNSUPPORTED with
 * the reason when there is no such device or the build has no CUDA. */
st_status st_device_open_cuda(int ordinal, st_device **out);
void st_device_free(st_device *d); /* NULL is fine */

bool st_device_is_host(const st_device *d); /* d == NULL */
/* "cpu" or e.g. "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)" */
const char *st_device_name(const st_device *d);

/* Memory on the device (host when d is NULL), at least 64-byte aligned.
 * nbytes 0 allocates a minimal block so the pointer is never NULL. */
st_status st_device_alloc(st_device *d, size_t nbytes, void **out);
void st_device_release(st_device *d, void *p); /* NULL p is fine */
st_status st_device_zero(st_device *d, void *p, size_t nbytes);
/* Fill `count` floats with the bit pattern of `value` (e.g. NaN to poison). */
st_status st_device_fill_f32(st_device *d, float *p, size_t count, float value);
/* host -> device and device -> host; both return when the copy is done. */
st_status st_device_upload(st_device *d, void *dst, const void *src, size_t nbytes);
st_status st_device_download(st_device *d, void *dst, const void *src, size_t nbytes);
/* Wait for everything queued on the device. */
st_status st_device_sync(st_device *d);
/* The stall watch of a CUDA device (nothing for the host): a wait of the
 * host for the device that lasts limit_s seconds (train.device_timeout_s;
 * less the time this process was stopped) ends the process with a message
 * naming `who`, the device, the wait and the step last set; a kernel that
 * never ends would otherwise hang the run silently. limit_s <= 0: none. */
st_status st_device_watch(st_device *d, double limit_s, const char *who);
void st_device_set_step(st_device *d, int64_t step);
/* What a failed device allocation's message advises (after what the
 * device holds): a training run's remedies (the micro-batch, recomputing,
 * offload, ZeRO) by default; `advice` (copied; NULL or "": that default)
 * for a use that has other ones, as an evaluation does. Nothing for the
 * host. */
void st_device_set_oom_advice(st_device *d, const char *advice);
/* model.matmul_tune on a CUDA device (docs/cuda.md, "Choosing cuBLASLt's algorithm"): each
 * matrix-product plan made from now on times the heuristic's algorithms
 * and keeps the fastest. Nothing for the host. */
void st_device_set_matmul_tune(st_device *d, bool on);
/* After an error: whether d is lost to this process (a kernel faulted, an
 * uncorrectable ECC error: every later call fails the same), found by
 * waiting for its compute stream under the stall watch. False for the
 * host, and for errors that leave the device usable. */
bool st_device_lost(st_device *d);
/* Another call that may wait on a device which stopped answering (its
 * driver's or NVML's readings), under the same watch: `what` names it in
 * the line ("reading ... through NVML"). Nothing for the host. */
void st_device_call_begin(st_device *d, const char *what);
void st_device_call_end(st_device *d);
/* How many times the host has waited for a whole stream of the device since
 * it opened (every read-back and upload, st_device_sync); 0 for the host. */
int64_t st_device_stream_waits(const st_device *d);
/* A CUDA device's memory, bytes: what this process holds through
 * st_device_alloc (and the cuBLASLt workspace) now and at most since the
 * device was opened, counted by the backend itself; and the whole device as
 * the driver sees it (cudaMemGetInfo: total less free, every context and
 * process included). */
typedef struct st_device_mem {
    int64_t allocated, peak;
    int64_t used, total;
} st_device_mem;
/* ST_ERR_UNSUPPORTED for the host (d NULL) or a build without CUDA. */
st_status st_device_memory(st_device *d, st_device_mem *out);
/* What a CUDA device is: its name, compute capability, multiprocessors and
 * their clock (kHz, the maximum the driver reports), for its peak rate
 * (hw/device.h st_gpu_peak). ST_ERR_UNSUPPORTED for the host. */
typedef struct st_device_props {
    char name[96];
    int cc_major, cc_minor, sms, clock_khz;
} st_device_props;
st_status st_device_props_get(st_device *d, st_device_props *out);
/* The device's PCI address ("0000:65:00.0"), which names the same GPU to
 * NVML whatever CUDA_VISIBLE_DEVICES says; "" for the host. */
const char *st_device_pci_bus_id(const st_device *d);
/* The device's UUID as the driver gives it ("GPU-8c2e..."; a MIG slice has
 * its own, where the PCI address is its GPU's); "" for the host. */
const char *st_device_uuid(const st_device *d);

/* Mixed precision (docs/precision.md): round x[0, count) in place, or
 * dst[i] = round(src[i]), to the values a bf16 or fp16 store keeps (round to
 * nearest even, src/core/half.h on the host, cuda_bf16.h / cuda_fp16.h's _rn
 * conversions on a device: the same values, NaN-ness kept). fp32: x is left
 * as it is; the copy is a plain copy. Queued on a device, not waited for. */
st_status st_device_round_f32(st_device *d, st_precision p, float *x, size_t count);
st_status st_device_round_copy(st_device *d, st_precision p, float *dst, const float *src, size_t count);
/* *finite = no Inf or NaN in x[0, count). On a device the flag is reduced
 * there and read back once (this call waits for the stream). */
st_status st_device_all_finite(st_device *d, const float *x, size_t count, bool *finite);
/* 16-bit gradient buckets (dist.grad_dtype bf16/fp16): dst[i] = the 16-bit
 * bits of src[i] / div (divided in fp32, rounded to nearest even), and
 * dst[i] = the float of src[i]'s bits. On the host now (src keeps its
 * values), on a device queued on the compute stream. */
st_status st_device_div_to_16(st_device *d, st_precision p, uint16_t *dst, const float *src, size_t count,
                              float div);
st_status st_device_from_16(st_device *d, st_precision p, float *dst, const uint16_t *src, size_t count);
/* x[0, count) *= scale (fp16 loss-scale unscaling, gradient clipping). */
st_status st_device_scale_f32(st_device *d, float *x, size_t count, float scale);
/* The deterministic reduction (dist.deterministic), the same bits on the
 * host and on a device: acc[i] += x[j * n + i] for j = 0, 1, ..., k - 1 in
 * that order (every rank's gradient of a shard folded in rank order); and
 * out[b] = the sum of g[b * block + i]^2 for i = 0, 1, ..., block - 1 in
 * that order, in double (n a multiple of block: the gradient norm's blocks,
 * whose in-order sum does not depend on how the arena is sharded). Queued
 * on a device. */
st_status st_device_add_slices(st_device *d, float *acc, const float *x, size_t n, int k);
st_status st_device_block_sumsq(st_device *d, const float *g, size_t n, size_t block, double *out);

#endif
