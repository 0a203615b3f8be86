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
 * ST_TRACE_MAX_EVENTS per rank are counted and dropped.
 *
 * The step loop and the buckets mark their phases with st_trace_begin/end
 * (and the layer hook), which in a CUDA build also open and close NVTX ranges
 * of the same names: pushed and popped on the step loop's thread, start/end
 * ranges for the bucket all-reduces that overlap backward, coloured by
 * category. Those are emitted on every step, traced or not, so `nsys profile`
 * of any run shows the phases; without a tool attached NVTX costs a branch.
 * A CUDA=0 build compiles them out. Not here: loader worker threads and CUDA
 * streams. */
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

/* One event as it travels to rank 0: fixed size, no pointers. */
typedef struct st_trace_event {
    double ts, dur; /* seconds since t0 */
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
    double node_t0; /* when the running node began */
} st_trace;

/* Start recording for steps first..last (1 <= first <= last) on `rank`; t0 is
 * now (call it right after a barrier when there are several ranks). */
st_status st_trace_init(st_trace *t, int64_t first, int64_t last, int rank);
void st_trace_free(st_trace *t); /* accepts a zeroed st_trace */

/* Enter `step` (1-based): recording is on inside the window. */
void st_trace_step(st_trace *t, int64_t step);

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

/* Collective (every rank, same point): gather every rank's events; rank 0
 * writes out_dir/trace.json (atomically) when `write`. Marks t written. */
st_status st_trace_write(st_trace *t, st_comm *comm, const char *out_dir, bool write);

#endif
