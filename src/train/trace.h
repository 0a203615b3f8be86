/* The profiler trace: for a window of steps (log.trace, log.trace_steps),
 * every rank records what its step loop did as timed events, and at the end
 * of the window rank 0 gathers them and writes out_dir/trace.json in the
 * Chrome trace format (a {"traceEvents": [...]} object of "X" complete
 * events, ts and dur in microseconds), which Perfetto and chrome://tracing
 * open. pid is the rank; tid 0 is the step loop (step > data wait, forward >
 * each layer, backward > each layer, all-reduce wait, optimizer, checkpoint,
 * eval), tid 1000 + b is gradient bucket b's all-reduce from its start during
 * backward to the wait that finished it.
 *
 * Times are seconds of st_now() since each rank's t0, taken right after a
 * barrier, so the ranks' tracks line up to the barrier's skew. Events past
 * ST_TRACE_MAX_EVENTS per rank are counted and dropped, and the trace's
 * last_step is then the last step every rank recorded whole.
 *
 * The step loop and the buckets mark their phases with st_trace_begin/end
 * (and the layer hook), which in a CUDA build also open and close NVTX ranges
 * of the same names: pushed and popped on the step loop's thread, start/end
 * ranges for the bucket all-reduces that overlap backward, coloured by
 * category. Those are emitted on every step, traced or not, so `nsys profile`
 * of any run shows the phases; without a tool attached NVTX costs a branch.
 * A CUDA=0 build compiles them out.
 *
 * On a CUDA device (st_trace_set_device) the window also has the GPU's own
 * timeline, one track per stream: tid 2000 the compute stream (each layer's
 * forward and backward kernels, the optimizer), 2001 the communication stream
 * (each bucket's collectives, from when its gradients were ready or the
 * stream was free, whichever came later, to their end), 2002 the copy stream
 * (batch copies), 2003 the compute stream again, one span per matrix
 * product and named kernel inside a layer (st_trace_span: "linear_ce dh",
 * "flash dQ"). Timing events recorded around them on those streams are
 * read once, when the trace is written; their times are placed on the host's
 * clock by an anchor event that the host waited for as the window began.
 * Not here: loader worker threads. */
#ifndef ST_TRAIN_TRACE_H
#define ST_TRAIN_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/graph.h"
#include "scaletrain/status.h"

#define ST_TRACE_MAX_EVENTS (1 << 17)
#define ST_TRACE_TID_STEP 0
#define ST_TRACE_TID_BUCKET 1000 /* + bucket index */
#define ST_TRACE_TID_GPU 2000    /* the device's compute stream */
#define ST_TRACE_TID_GPU_COMM 2001 /* its communication stream */
#define ST_TRACE_TID_GPU_COPY 2002 /* its copy stream */
#define ST_TRACE_TID_GPU_KERNEL 2003 /* the compute stream's products and named kernels inside layers */
#define ST_TRACE_MAX_GPU_EVENTS (1 << 16)
/* The device's streams, as src/cuda/cuda.h's st_cuda_stream_id numbers them
 * (a CPU build has no such header). */
enum { ST_TRACE_STREAM_COMPUTE = 0, ST_TRACE_STREAM_COMM = 1, ST_TRACE_STREAM_COPY = 2 };

struct st_cuda_event;

/* A span on a device stream, its ends timing events (indices into gev). */
typedef struct st_trace_gpu_span {
    int32_t begin, end, tid;
    char cat[12];
    char name[92];
    double flops, elems; /* a layer pass's work (st_node_cost), 0 for others */
} st_trace_gpu_span;

/* One event as it travels to rank 0: fixed size, no pointers. A layer
 * pass also carries its work by the cost model (src/hw/cost.h: the matrix
 * products' FLOPs and the elements elementwise work reads and writes; on a
 * device the model's view, on the CPU what its kernels run), written as the
 * event's "args", so a summary can set each layer's time against its floor. */
typedef struct st_trace_event {
    double ts, dur; /* seconds since t0 */
    double flops, elems;
    int32_t tid;
    char cat[12];  /* "step", "data", "forward", "backward", "layer", "comm", "optim", "checkpoint", "eval" */
    char name[92]; /* e.g. "h.0.attn.qkv (linear)" */
} st_trace_event;

typedef struct st_trace {
    int64_t first, last; /* the window: steps first..last, 1-based, inclusive */
    bool on;             /* the current step is inside the window */
    bool written;
    int rank;
    double t0;
    st_trace_event *ev;
    int64_t n, cap, dropped;
    int64_t whole;  /* the window's last step before any event was dropped (first - 1: none yet); at the
                       write, t->last becomes the last step every rank holds whole */
    double node_t0; /* when the running node began */
    /* the device's timeline (CUDA builds; dev NULL: none) */
    st_device *dev;
    struct st_cuda_event **gev; /* timing events, reused each window: n_gev recorded, cap_gev created */
    int32_t n_gev, cap_gev;
    st_trace_gpu_span *span;
    int64_t n_span, cap_span, gpu_dropped;
    int32_t anchor;   /* gev index of the anchor; -1 before the window */
    double anchor_t;  /* st_now() when the host saw the anchor complete */
    int32_t node_gpu; /* the running node's begin event, -1: none */
    int32_t kspan[4]; /* the open product or kernel spans' begin events (st_trace_span), innermost last */
    int n_kspan;
    int elem_bytes;   /* an activation element's bytes, 4 unless set */
} st_trace;

/* Start recording for steps first..last (1 <= first <= last) on `rank`; t0 is
 * now (call it right after a barrier when there are several ranks). */
st_status st_trace_init(st_trace *t, int64_t first, int64_t last, int rank);
void st_trace_free(st_trace *t); /* accepts a zeroed st_trace */

/* Enter `step` (1-based): recording is on inside the window. On a device,
 * the first step of the window records the anchor and waits for it (the one
 * host wait the GPU timeline costs). */
void st_trace_step(st_trace *t, int64_t step);

/* Time dev's streams too (CUDA builds; NULL or a CPU build: nothing), and
 * note the bytes an activation element takes (2 for bf16/fp16 on a device,
 * else 4) in the trace's otherData, for a summary's bandwidth figures. */
void st_trace_set_device(st_trace *t, st_device *dev, int elem_bytes);
/* A span on device stream `stream` (an st_cuda_stream_id): begin records an
 * event there and returns its handle (-1 when the window is off or there is
 * no device); end records one on `stream` and keeps the span for track tid.
 * The begin and end may be on different streams (a collective's span begins
 * on the compute stream, where its input is made). */
int32_t st_trace_gpu_begin(st_trace *t, int stream);
void st_trace_gpu_end(st_trace *t, int32_t begin, int stream, int tid, const char *cat, const char *name);
/* A collective's span on the communication stream's track, when c is a
 * device communicator (NCCL: its collectives run on that stream): begin
 * where its input is ready on the compute stream, end after the call that
 * queued it (from when the stream was free; see st_trace_write). */
int32_t st_trace_comm_begin(st_trace *t, st_comm *c);
void st_trace_comm_end(st_trace *t, int32_t begin, const char *name);

/* A phase begun and not yet ended; `name` must stay valid until the end. */
typedef struct st_trace_mark {
    double t0; /* st_now() at the beginning */
    int tid;
    const char *cat, *name;
    uint64_t range; /* the NVTX start/end range of an async mark; 0 otherwise */
} st_trace_mark;

/* Begin a phase on track tid: note the time and (CUDA builds) push an NVTX
 * range. t may be NULL or outside its window: NVTX still sees the phase. */
st_trace_mark st_trace_begin(st_trace *t, int tid, const char *cat, const char *name);
/* The same for a phase that overlaps others on this thread (a bucket's
 * all-reduce during backward): an NVTX start/end range instead of a push. */
st_trace_mark st_trace_begin_async(st_trace *t, int tid, const char *cat, const char *name);
/* End it: pop (or end) the NVTX range and record the event when t is on.
 * Returns the end time (st_now()). Marks end in the reverse order of their
 * begins, async ones excepted. */
double st_trace_end(st_trace *t, const st_trace_mark *m);

/* Record [begin, end] (st_now() seconds) when t is not NULL and on. */
void st_trace_add(st_trace *t, int tid, const char *cat, const char *name, double begin, double end);

/* The graph's node hook (st_graph.node_hook) with ctx = the st_trace: a
 * "layer" event around each node's forward and backward. */
void st_trace_node(void *ctx, const st_node *n, bool backward, bool end);
/* The graph's span hook (st_graph.span_hook), ctx the st_trace: on a device,
 * a span on track ST_TRACE_TID_GPU_KERNEL (the compute stream) around each
 * matrix product and named kernel inside a layer, named by its label, so a
 * summary says which of a layer's products or kernels took its time. */
void st_trace_span(void *ctx, const char *what, bool end, double flops);

/* Collective (every rank, same point): gather every rank's events; rank 0
 * writes out_dir/trace.json (atomically) when `write`. Marks t written. */
st_status st_trace_write(st_trace *t, st_comm *comm, const char *out_dir, bool write);
/* Before a resumed run writes its trace (rank 0): out_dir/trace.json, an
 * earlier part of the run's (its otherData's first_step and last_step, A and
 * B, at most `before`), linked as out_dir/trace-steps-A-B.json (renamed
 * where the file system has no links), so that the new one does not
 * replace it; the new name in kept ("" where nothing
 * was kept: no file, or none of this run's). A failed rename is a warning
 * on standard error. */
void st_trace_keep_earlier(const char *out_dir, int64_t before, char *kept, size_t n);

#endif
