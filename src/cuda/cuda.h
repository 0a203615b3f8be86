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
#include <stdint.h>

#include "core/device.h"
#include "scaletrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct st_layer_ops;
struct st_params;

int st_cuda_device_count(char *why, size_t why_len);
st_status st_cuda_open(int ordinal, st_device **out);
void st_cuda_free(st_device *d);
const char *st_cuda_name(const st_device *d);
/* How many times the host has waited for a whole stream of d (common.cuh's
 * st_cuda_stream_sync: reads back, uploads, st_cuda_sync) since it opened. */
int64_t st_cuda_stream_waits(const st_device *d);
/* Whether this build runs cuDNN's fused attention (model.attention_kernel=
 * cudnn, src/cuda/attention_cudnn.h): true with cuDNN's version in why,
 * false with the reason. */
bool st_cuda_cudnn_built(char *why, size_t n);
/* Attention forwards and backwards that cuDNN ran on d so far. */
int64_t st_cuda_cudnn_calls(const st_device *d);
/* Linear layers' bias gradients that cuBLASLt's BGRADA/BGRADB epilogue
 * summed on d so far (model.fused_bias_grad; the rest ran column sums). */
int64_t st_cuda_bias_grad_epilogues(const st_device *d);
/* The fused head's rows kernels on d so far that kept each row in shared
 * memory (ST_KV_CE_ROWS_SHARED, where the row fits the device's opt-in:
 * elsewhere the variant runs the default's kernel). */
int64_t st_cuda_kept_rows_calls(const st_device *d);

st_status st_cuda_alloc(st_device *d, size_t nbytes, void **out);
void st_cuda_release(st_device *d, void *p);
st_status st_cuda_zero(st_device *d, void *p, size_t nbytes);
st_status st_cuda_fill_f32(st_device *d, float *p, size_t count, float value);
st_status st_cuda_upload(st_device *d, void *dst, const void *src, size_t nbytes);
st_status st_cuda_download(st_device *d, void *dst, const void *src, size_t nbytes);
st_status st_cuda_sync(st_device *d);
/* The stall watch (core/watch.h): from now on a wait of the host for d (a stream, an event)
 * that lasts limit_s seconds (less any time this process was stopped) ends
 * the process with a message naming `who` (e.g. "rank 0 of 2 (host h, pid
 * 1)"), the device, the wait and the step (st_cuda_set_step): a kernel that
 * never ends would otherwise hang the run silently. limit_s <= 0: none. */
st_status st_cuda_watch(st_device *d, double limit_s, const char *who);
void st_cuda_set_step(st_device *d, int64_t step);
void st_cuda_set_oom_advice(st_device *d, const char *advice); /* (core/device.h) */
bool st_cuda_lost(st_device *d);                               /* (core/device.h st_device_lost) */
/* A call into the driver or NVML under that watch ("what": "reading ...");
 * nothing before st_cuda_watch. */
void st_cuda_call_begin(st_device *d, const char *what);
void st_cuda_call_end(st_device *d);
/* The tensor-core fragment layout check (mma.cu): one mma.sync product of
 * pseudo-random bf16 matrices (from seed), with its operands placed as
 * src/cuda/mma.cuh reads the PTX layout, against the same product summed
 * directly; *max_err is the largest difference (a few 1e-7 when the
 * layout holds, O(1) when it does not). */
st_status st_cuda_mma_check(st_device *d, uint64_t seed, double *max_err);
/* The same for ldmatrix (mma.cuh st_ldsm_x4, st_ldsm_x4_t): a 16 x 16 bf16
 * matrix loaded by one warp both ways; the registers (of 128 each way) that
 * differ from the elements mma.cuh's reading names. */
st_status st_cuda_ldmatrix_check(st_device *d, uint64_t seed, int *mismatches, int *trans_mismatches);

/* --- pinned host memory, events and the copy stream (src/cuda/stream.cu) ---
 * What the batch feed (src/train/feed.c) orders its host-to-device copies
 * with; any other overlap of copies and compute can use them too. An event
 * is a cudaEvent_t behind an opaque name. */
typedef struct st_cuda_event st_cuda_event;
typedef enum st_cuda_stream_id {
    ST_CUDA_STREAM_COMPUTE = 0, /* every kernel of the step */
    ST_CUDA_STREAM_COMM,        /* collectives */
    ST_CUDA_STREAM_COPY,        /* host-to-device copies: batches, the offloaded optimizer's weights */
    ST_CUDA_STREAM_D2H,         /* device-to-host copies: the offloaded optimizer's gradients */
} st_cuda_stream_id;

/* Page-locked (pinned) host memory, so copies from it run asynchronously on
 * the copy engine: cudaHostAlloc (portable: every device may use it). */
st_status st_cuda_host_alloc(st_device *d, size_t nbytes, void **out);
void st_cuda_host_free(void *p); /* NULL is fine */
/* An event; `timing` makes st_cuda_event_elapsed work (it costs a little). */
st_status st_cuda_event_create(st_device *d, bool timing, st_cuda_event **out);
void st_cuda_event_free(st_cuda_event *e); /* NULL is fine */
/* Mark the point reached by what is queued on `s` so far. */
st_status st_cuda_event_record(st_device *d, st_cuda_event *e, st_cuda_stream_id s);
/* Work queued on `s` from now on starts after `e` completes (no host wait). */
st_status st_cuda_stream_wait_event(st_device *d, st_cuda_stream_id s, st_cuda_event *e);
/* Whether e has completed, without waiting (true for one never recorded). */
st_status st_cuda_event_query(st_device *d, st_cuda_event *e, bool *done);
/* Wait on the host for e alone (not for the device). */
st_status st_cuda_event_sync(st_device *d, st_cuda_event *e);
/* Seconds between two completed timing events recorded on one stream. */
st_status st_cuda_event_elapsed(st_device *d, st_cuda_event *start, st_cuda_event *end, double *seconds);
/* Queue a copy on `s` and return (any direction: unified addressing tells);
 * from pinned memory it overlaps the host and the other streams. */
st_status st_cuda_memcpy_async(st_device *d, void *dst, const void *src, size_t nbytes, st_cuda_stream_id s);
/* Wait on the host for what is queued on `s` (under the stall watch). */
st_status st_cuda_stream_wait(st_device *d, st_cuda_stream_id s);

/* Work queued once and replayed (CUDA graphs): between capture_begin and
 * capture_end, what the calling thread queues on the compute stream is
 * kept, not run (cudaStreamCaptureModeThreadLocal), and capture_end makes
 * it a graph that graph_launch queues there again, each time with the
 * arguments its launches had when captured: what changes between replays
 * must be read from device or pinned memory the captured work reads (a
 * copy from pinned memory reads it when it runs). A wait for the device,
 * an allocation or work on another stream in between fails the call that
 * made it, and capture_end with it (cudaErrorStreamCaptureInvalidated);
 * the stream then works as before, so the caller may go on without a
 * graph. capture_end must follow every capture_begin that succeeded. */
typedef struct st_cuda_graph st_cuda_graph;
st_status st_cuda_capture_begin(st_device *d);
st_status st_cuda_capture_end(st_device *d, st_cuda_graph **out);
st_status st_cuda_graph_launch(st_device *d, st_cuda_graph *g);
void st_cuda_graph_free(st_cuda_graph *g); /* NULL is fine */
st_status st_cuda_memory(st_device *d, st_device_mem *out);
st_status st_cuda_props(st_device *d, st_device_props *out);
const char *st_cuda_pci_bus_id(const st_device *d);
const char *st_cuda_uuid(const st_device *d);
/* Mixed precision (src/cuda/half.cu): dst[i] = src[i] rounded to bf16 or
 * fp16 values (dst == src allowed; fp32: a copy, nothing when dst == src),
 * and the device-wide "all finite" check, read back once. */
st_status st_cuda_round_f32(st_device *d, st_precision p, float *dst, const float *src, size_t count);
st_status st_cuda_div_to_16(st_device *d, st_precision p, uint16_t *dst, const float *src, size_t count,
                            float div);
st_status st_cuda_from_16(st_device *d, st_precision p, float *dst, const uint16_t *src, size_t count);
st_status st_cuda_all_finite(st_device *d, const float *x, size_t count, bool *finite);

/* At least nbytes of device scratch (256-byte aligned; src/cuda/half.cu),
 * for work queued on the compute stream until the next call; grown on demand
 * (the first time a size is needed it waits for the stream, then never
 * again), the old block released through the allocator's count. Contents
 * are undefined. */
st_status st_cuda_scratch(st_device *d, size_t nbytes, void **out);

/* The cuBLASLt plan cache (src/cuda/matmul.cu): plans made so far, and how
 * many products found their plan there (hits) or made it (misses). */
void st_cuda_matmul_plan_stats(const st_device *d, int64_t *plans, int64_t *hits, int64_t *misses);
/* model.matmul_tune (docs/cuda.md, "Choosing cuBLASLt's algorithm"): with `on`, each plan
 * made from now on times up to 8 of the heuristic's algorithms on its first
 * product and keeps the fastest. */
void st_cuda_set_matmul_tune(st_device *d, bool on);
/* The plans timed so far, of them those that kept another algorithm than
 * the heuristic's first, and over every product that took a timed plan the
 * time its timing measured a call at: with the heuristic's first, and with
 * the algorithm kept (ms, summed over the products; what the timing saved
 * is their difference). */
typedef struct st_cuda_tune_stats {
    int64_t tuned, switched;
    int64_t restored; /* plans that took an algorithm st_cuda_matmul_algos_import gave, untimed */
    double first_ms, chosen_ms;
} st_cuda_tune_stats;
void st_cuda_matmul_tune_stats(const st_device *d, st_cuda_tune_stats *out);
/* The algorithms the timing kept, as bytes to keep (src/train/matmul_algos.c
 * writes them to train.out_dir): every timed or read-back plan's key and
 * algorithm, and those imported whose shape this run has not reached.
 * Malloc'd into *out; the list is then no longer `dirty` (a plan timed
 * since the last export). */
bool st_cuda_matmul_algos_dirty(const st_device *d);
st_status st_cuda_matmul_algos_export(st_device *d, void **out, size_t *nbytes);
/* Such bytes read back: with model.matmul_tune on, a plan of one of their
 * keys takes its algorithm untimed (when cuBLASLt's check accepts it), so a
 * resumed run multiplies as the run before it did. Bytes of another
 * build, cuBLASLt version or kind of GPU, or damaged, are left alone with
 * why saying why (ST_OK: the plans are then timed again); an error only
 * for host memory. */
st_status st_cuda_matmul_algos_import(st_device *d, const void *bytes, size_t nbytes, char *why,
                                      size_t why_cap);

/* The CUDA twin of the layer whose CPU ops table is named `name` (e.g.
 * "linear"), or NULL when there is none. */
const struct st_layer_ops *st_cuda_layer_ops(const char *name);

/* --- fused optimizers (src/cuda/optim.cu) ---------------------------------
 * torch.optim's AdamW and SGD (momentum, Nesterov) exactly as
 * src/optim/optim.c computes them, element for element and in the same float
 * operation order (no contraction into FMAs), over a slice [lo, hi) of the
 * flat parameter arena in one launch: the whole model (0, p->count) or this
 * rank's ZeRO shard. Weight decay follows each tensor's `decay` flag through
 * a device table of chunks made once by st_cuda_optim_create. Every call is
 * queued on the device's compute stream and returns without waiting, except
 * st_cuda_grad_norm_read. */
typedef struct st_cuda_optim st_cuda_optim;

/* Plan updates of the trainable parameters of `p` (arenas on device d) whose
 * arena elements fall in [lo, hi). */
st_status st_cuda_optim_create(st_device *d, const struct st_params *p, int64_t lo, int64_t hi,
                               st_cuda_optim **out);
void st_cuda_optim_free(st_cuda_optim *o); /* NULL is fine */

typedef struct st_cuda_adamw_hp {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t t; /* the step being taken, 1 for the first (optim.c's o->t after its increment) */
} st_cuda_adamw_hp;

typedef struct st_cuda_sgd_hp {
    double lr, momentum, weight_decay;
    bool nesterov;
    int64_t t; /* as above: 1 initialises the momentum buffer */
} st_cuda_sgd_hp;

/* What an update does besides the update, in the same pass over the
 * arrays (each saves a pass over the whole slice; NULL `fx` = neither):
 * - clip: when clip_sumsq is not NULL (st_cuda_optim_sumsq after
 *   st_cuda_grad_sumsq) and sqrt(*clip_sumsq) > max_norm, each gradient is
 *   multiplied by (float)(max_norm / (norm + 1e-6)) as it is read: the value
 *   st_cuda_grad_clip would have stored (g itself is left unclipped);
 * - w16: when not NULL, the updated weights rounded into it (precision
 *   prec16, bf16 or fp16; index 0 = element lo), as st_cuda_div_to_16 of the
 *   masters by 1 would: the 16-bit compute copy refreshed in passing;
 * - halt: when not NULL (two device words, st_cuda_loss_guard), the guard:
 *   an update whose *clip_sumsq is not finite (a gradient overflowed) is not
 *   made, and halt[0] = step, halt[1] = 1 if it was NaN (else 0); while
 *   halt[0] is not 0 no update is made (the weights, moments and 16-bit
 *   copy stay those before `step`, for the host's next read to report). */
typedef struct st_cuda_update_fuse {
    const double *clip_sumsq;
    double max_norm;
    uint16_t *w16;
    st_precision prec16;
    int64_t *halt;
    int64_t step; /* the training step the update makes (1-based), for halt */
} st_cuda_update_fuse;

/* All for the planned slice, element lo of the arena at index 0 (device
 * memory): w its fp32 masters (st_params_master: a shard of sharded
 * masters), g its gradients, m, v (AdamW moments) and buf (SGD momentum). */
st_status st_cuda_adamw_step(st_cuda_optim *o, float *w, const float *g, float *m, float *v,
                             const st_cuda_adamw_hp *hp, const st_cuda_update_fuse *fx);
st_status st_cuda_sgd_step(st_cuda_optim *o, float *w, const float *g, float *buf, const st_cuda_sgd_hp *hp,
                           const st_cuda_update_fuse *fx);

/* Global gradient norm, deterministic: the sum of squares of g[0, count) in
 * double, a fixed grid of partial sums then one block adding them in order
 * (the same bits on every run and every device size). The result stays on
 * the device (st_cuda_optim_sumsq: all-reduce it there under ZeRO). */
st_status st_cuda_grad_sumsq(st_cuda_optim *o, const float *g, int64_t count);
double *st_cuda_optim_sumsq(st_cuda_optim *o); /* device pointer to the sum of squares */
/* Clip as src/train/train.c does, on the device: norm = sqrt(sum of squares);
 * when norm > max_norm, g *= (float)(max_norm / (norm + 1e-6)). No host wait. */
st_status st_cuda_grad_clip(st_cuda_optim *o, float *g, int64_t count, double max_norm);
/* Wait for the stream and read sqrt(sum of squares) (for logging). */
st_status st_cuda_grad_norm_read(st_cuda_optim *o, double *norm);
/* g[0, count) *= scale (loss-scale unscaling, or a clip factor known on the host). */
st_status st_cuda_grad_scale(st_device *d, float *g, int64_t count, float scale);

/* The deterministic reduction (src/cuda/fold.cu; core/device.h
 * st_device_add_slices, st_device_block_sumsq). */
st_status st_cuda_add_slices(st_device *d, float *acc, const float *x, size_t n, int k);
st_status st_cuda_block_sumsq(st_device *d, const float *g, size_t n, size_t block, double *out);

/* --- the training loss summed on the device (src/cuda/loss.cu) -----------
 * For src/train/loss_sum.c and eval_device.c: every call but
 * st_cuda_loss_read is queued on the compute stream and returns without
 * waiting. */
typedef struct st_cuda_loss st_cuda_loss;
st_status st_cuda_loss_create(st_device *d, st_cuda_loss **out);
void st_cuda_loss_free(st_cuda_loss *l); /* NULL is fine; waits for the compute stream */
/* The open step's sum += (double)*loss / divisor (loss: one float, device memory). */
st_status st_cuda_loss_add(st_cuda_loss *l, const float *loss, double divisor);
/* The open step's sum += (double)*loss * weight (evaluation: the batch's valid targets). */
st_status st_cuda_loss_add_times(st_cuda_loss *l, const float *loss, double weight);
/* Close the step: its sum joins the sum since the last read (`step` noted
 * as the first bad one when its sum is not finite and none was before). */
st_status st_cuda_loss_step_end(st_cuda_loss *l, int64_t step);
/* Wait for the compute stream and read the closed steps' sum since the last
 * read and the first bad step (-1: none); both start again. */
st_status st_cuda_loss_read(st_cuda_loss *l, double *sum, int64_t *bad_step);
/* The fused update's guard words (st_cuda_update_fuse.halt) kept with the
 * sums, so that each read brings them back in the same copy; never reset. */
int64_t *st_cuda_loss_guard(st_cuda_loss *l);
/* As of the last read: the first step whose update the guard refused (0:
 * none) and whether its gradients' norm was NaN (else inf). */
void st_cuda_loss_halted(const st_cuda_loss *l, int64_t *step, bool *nan);
/* The same as of now: waits for the compute stream and reads the words
 * alone (the sums are left for the next read). */
st_status st_cuda_loss_halted_now(st_cuda_loss *l, int64_t *step, bool *nan);

#ifdef __cplusplus
}
#endif

#endif
