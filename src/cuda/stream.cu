/* Pinned host memory, events and asynchronous copies on the device's streams
 * (src/cuda/cuda.h). Thin: each call is one CUDA runtime call with its error
 * turned into a status; the ordering they build is the caller's (the batch
 * feed, src/train/feed.c). Not here: any synchronisation of the whole device. */
#include <stdlib.h>

#include "common.cuh"

static cudaStream_t stream_of(const st_device *d, st_cuda_stream_id s) {
    switch (s) {
    case ST_CUDA_STREAM_COMM: return d->comm;
    case ST_CUDA_STREAM_COPY: return d->copy;
    case ST_CUDA_STREAM_D2H: return d->d2h;
    default: return d->compute;
    }
}

static cudaEvent_t ev(st_cuda_event *e) { return (cudaEvent_t)(void *)e; }

extern "C" st_status st_cuda_host_alloc(st_device *d, size_t nbytes, void **out) {
    *out = NULL;
    cudaError_t e = cudaHostAlloc(out, nbytes ? nbytes : 64, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller may fall back to pageable memory */
        *out = NULL;
        return st_cuda_fail(d, e, "cudaHostAlloc (pinned host memory)", __FILE__, __LINE__);
    }
    return ST_OK;
}

extern "C" void st_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" st_status st_cuda_event_create(st_device *d, bool timing, st_cuda_event **out) {
    *out = NULL;
    cudaEvent_t e;
    ST_CUDA_TRY_D(d, cudaSetDevice(d->ordinal));
    ST_CUDA_TRY_D(d, cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    *out = (st_cuda_event *)(void *)e;
    return ST_OK;
}

extern "C" void st_cuda_event_free(st_cuda_event *e) {
    if (e) cudaEventDestroy(ev(e));
}

extern "C" st_status st_cuda_event_record(st_device *d, st_cuda_event *e, st_cuda_stream_id s) {
    ST_CUDA_TRY_D(d, cudaEventRecord(ev(e), stream_of(d, s)));
    return ST_OK;
}

extern "C" st_status st_cuda_stream_wait_event(st_device *d, st_cuda_stream_id s, st_cuda_event *e) {
    ST_CUDA_TRY_D(d, cudaStreamWaitEvent(stream_of(d, s), ev(e), 0));
    return ST_OK;
}

extern "C" st_status st_cuda_event_query(st_device *d, st_cuda_event *e, bool *done) {
    cudaError_t r = cudaEventQuery(ev(e));
    *done = r == cudaSuccess;
    if (r == cudaSuccess || r == cudaErrorNotReady) {
        if (r == cudaErrorNotReady) cudaGetLastError(); /* "not ready" is an answer, not an error */
        return ST_OK;
    }
    return st_cuda_fail(d, r, "cudaEventQuery", __FILE__, __LINE__);
}

extern "C" st_status st_cuda_event_sync(st_device *d, st_cuda_event *e) {
    st_cuda_wait_begin(d, "its streams (an event)");
    const cudaError_t r = cudaEventSynchronize(ev(e));
    st_cuda_call_end(d);
    ST_CUDA_TRY_D(d, r);
    return ST_OK;
}

extern "C" st_status st_cuda_event_elapsed(st_device *d, st_cuda_event *start, st_cuda_event *end,
                                           double *seconds) {
    float ms = 0;
    ST_CUDA_TRY_D(d, cudaEventElapsedTime(&ms, ev(start), ev(end)));
    *seconds = 1e-3 * (double)ms;
    return ST_OK;
}

extern "C" st_status st_cuda_memcpy_async(st_device *d, void *dst, const void *src, size_t nbytes,
                                          st_cuda_stream_id s) {
    if (!nbytes) return ST_OK;
    ST_CUDA_TRY_D(d, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream_of(d, s)));
    return ST_OK;
}

/* --- replaying queued work (CUDA graphs) --------------------------------- */
struct st_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" st_status st_cuda_capture_begin(st_device *d) {
    ST_CUDA_TRY_D(d, cudaStreamBeginCapture(d->compute, cudaStreamCaptureModeThreadLocal));
    return ST_OK;
}

extern "C" st_status st_cuda_capture_end(st_device *d, st_cuda_graph **out) {
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(d->compute, &g);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* a capture's error is not sticky: the stream works as before */
        if (g) cudaGraphDestroy(g);
        return st_cuda_fail(d, e, "cudaStreamEndCapture (the compute stream's captured work)", __FILE__,
                            __LINE__);
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    st_cuda_graph *r = e == cudaSuccess ? (st_cuda_graph *)malloc(sizeof *r) : NULL;
    if (!r) {
        if (e == cudaSuccess) cudaGraphExecDestroy(x);
        cudaGraphDestroy(g);
        if (e == cudaSuccess) return st_fail(ST_ERR_NOMEM, "out of host memory for a CUDA graph");
        cudaGetLastError();
        return st_cuda_fail(d, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    r->graph = g;
    r->exec = x;
    *out = r;
    return ST_OK;
}

extern "C" st_status st_cuda_graph_launch(st_device *d, st_cuda_graph *g) {
    ST_CUDA_TRY_D(d, cudaGraphLaunch(g->exec, d->compute));
    return ST_OK;
}

extern "C" void st_cuda_graph_free(st_cuda_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

extern "C" st_status st_cuda_stream_wait(st_device *d, st_cuda_stream_id s) {
    ST_CUDA_TRY_D(d, st_cuda_stream_sync(d, stream_of(d, s)));
    return ST_OK;
}
