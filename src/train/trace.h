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
 * ST_TRACE_MAX_EVENTS per rank are counted and dropped. Not here: loader
 * worker threads, CUDA streams and NVTX (a CUDA build adds those). */
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

/* Record [begin, end] (st_now() seconds) when t is not NULL and on. */
void st_trace_add(st_trace *t, int tid, const char *cat, const char *name, double begin, double end);

/* The graph's node hook (st_graph.node_hook) with ctx = the st_trace: a
 * "layer" event around each node's forward and backward. */
void st_trace_node(void *ctx, const st_node *n, bool backward, bool end);

/* Collective (every rank, same point): gather every rank's events; rank 0
 * writes out_dir/trace.json (atomically) when `write`. Marks t written. */
st_status st_trace_write(st_trace *t, st_comm *comm, const char *out_dir, bool write);

#endif
