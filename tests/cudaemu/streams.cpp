/* The CUDA emulator's streams, events and copies (tests/cudaemu/README.md).
 *
 * Each stream is a queue. By default (ST_CUDAEMU_LAZY=1) nothing queued runs
 * until the host waits for it: cudaStreamSynchronize, cudaEventSynchronize,
 * a cudaEventQuery asked a second time about the same record (the first
 * answer is cudaErrorNotReady), a copy into pageable host memory, freeing
 * memory, cudaDeviceSynchronize. Work another stream waits on
 * (cudaStreamWaitEvent) runs first. So work on different streams runs in an
 * order of its own, as late as the program allows, and a missing event wait
 * or a host read before its wait shows up as wrong values. Copies follow
 * CUDA: from pageable host memory the bytes are taken when the copy is
 * queued, from pinned memory when it runs. ST_CUDAEMU_LAZY=0 runs everything
 * when it is queued. ST_CUDAEMU_LAZY=2 is the adversary of communication:
 * collectives (st_emu_enqueue_on) end as late as above, everything else
 * runs as soon as it is queued, up to a wait for a collective that has not
 * ended (a collective reads its inputs then too, nccl.cpp), and a
 * collective's end event answers cudaErrorNotReady to its
 * first 1000 queries (a host waiting for it polls that often; the occasional
 * test between layers does not); so kernels that should have waited for a
 * collective and did not read its buffers before it wrote them. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

struct event;

struct item {
    enum { OP, RECORD, WAIT } kind;
    std::function<void()> op;
    event *rec = NULL;                 /* RECORD: of record number gen */
    uint64_t gen = 0;
    struct queue *wait_on = NULL;      /* WAIT: that queue up to wait_seq */
    uint64_t wait_seq = 0;
};

struct capture; /* a graph being captured (below) */

struct queue {
    std::deque<item> items;
    uint64_t queued = 0, done = 0; /* items ever queued, ever run */
    bool collective = false;       /* collectives were queued here */
    capture *cap = NULL;           /* being captured: work goes there, not here */
};

/* Stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture): what a
 * capturing stream is given is kept, not queued; the graph it becomes runs
 * it again at every cudaGraphLaunch, on the launching stream, with the
 * arguments each launch had when it was captured (a kernel's, a copy's
 * pointers: a pinned source is read when the copy runs). One stream's
 * work alone: an event recorded or waited for on a capturing stream (a
 * capture that forks to other streams) is refused, as is every call that
 * would wait for the device or allocate from the thread that captures
 * (cudaStreamCaptureModeThreadLocal's prohibitions): the capture is then
 * invalidated and cudaStreamEndCapture says so, as CUDA does. */
struct captured {
    std::function<void()> op;
    std::vector<const void *> uses; /* device or pinned memory it reads or writes */
    const char *what;
};
struct capture {
    std::vector<captured> ops;
    std::thread::id owner;
    bool invalid = false;
};
struct graph_exec {
    std::vector<captured> ops;
};
static std::set<capture *> graphs; /* captured, not yet destroyed */
static std::set<graph_exec *> execs;
static thread_local std::vector<queue *> capturing_here; /* the streams this thread captures */

struct event {
    bool timing = true, recorded = false;
    queue *q = NULL;
    uint64_t seq = 0; /* complete when q->done >= seq */
    int queries = 0;  /* of this record */
    uint64_t gen = 0; /* records so far */
    double ms = 0;    /* host clock when it ran */
};

static std::recursive_mutex lock; /* every queue and event */
static std::set<queue *> streams;
static std::set<event *> events;
static queue default_queue;
static int lazy_mode = -1;

/* 0 eager, 1 lazy, 2 collectives late (above) */
static int lazy(void) {
    if (lazy_mode < 0) {
        const char *e = getenv("ST_CUDAEMU_LAZY");
        lazy_mode = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "2") == 0 ? 2 : 1;
    }
    return lazy_mode;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static queue *queue_of(cudaStream_t s) {
    if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return &default_queue;
    return streams.count((queue *)s) ? (queue *)s : NULL;
}

bool st_emu_stream_ok(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> l(lock);
    return queue_of(s) != NULL;
}

/* Run q's items until `seq` of them have run. */
static void run_until(queue *q, uint64_t seq) {
    if (q->done >= seq) return;
    st_emu_window w; /* one window for the run, not one per item: mprotect is the emulator's dearest call */
    while (q->done < seq) {
        item it = std::move(q->items.front());
        q->items.pop_front();
        if (it.kind == item::WAIT) {
            run_until(it.wait_on, it.wait_seq);
        } else if (it.kind == item::RECORD) {
            if (it.gen == it.rec->gen) it.rec->ms = now_ms(); /* a later record replaced this one */
        } else {
            it.op();
        }
        q->done++;
    }
}

int st_emu_lazy_mode(void) { return lazy(); }

/* ST_CUDAEMU_LAZY=2: run q's items up to a wait for a collective stream
 * that has not got there (other streams' waits run them as far as this). */
static bool run_ready(queue *q) {
    while (q->done < q->queued) {
        const item &it = q->items.front();
        if (it.kind == item::WAIT && it.wait_on->done < it.wait_seq &&
            (it.wait_on->collective || !run_ready(it.wait_on) || it.wait_on->done < it.wait_seq))
            return false;
        run_until(q, q->done + 1);
    }
    return true;
}

static void push(queue *q, item &&it) {
    q->items.push_back(std::move(it));
    q->queued++;
    if (lazy() == 0) run_until(q, q->queued);
    if (lazy() == 2 && !q->collective) run_ready(q);
}

void st_emu_enqueue(cudaStream_t s, std::function<void()> op) { st_emu_enqueue_on(s, std::move(op), false); }

void st_emu_enqueue_uses(cudaStream_t s, std::function<void()> op, std::vector<const void *> uses,
                         const char *what) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (q && q->cap && !q->cap->invalid) {
        std::vector<const void *> kept;
        for (const void *p : uses)
            if (st_emu_is_device(p) || st_emu_is_pinned(p, 1)) kept.push_back(p);
        q->cap->ops.push_back(captured{std::move(op), std::move(kept), what});
        return;
    }
    st_emu_enqueue_on(s, std::move(op), false);
}

void st_emu_enqueue_on(cudaStream_t s, std::function<void()> op, bool collective) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) st_emu_die("work queued on a stream that does not exist");
    if (q->cap) {
        if (q->cap->invalid) return; /* (its caller was told: st_emu_capture_check) */
        if (collective) {
            fprintf(stderr, "cudaemu: a collective on a capturing stream: not modelled (the capture is "
                            "invalidated)\n");
            q->cap->invalid = true;
            return;
        }
        q->cap->ops.push_back(captured{std::move(op), {}, "work"});
        return;
    }
    if (collective) q->collective = true;
    item it;
    it.kind = item::OP;
    it.op = std::move(op);
    push(q, std::move(it));
}

void st_emu_run_all(void) {
    std::lock_guard<std::recursive_mutex> l(lock);
    bool more = true;
    while (more) { /* a queue's waits may run others: until all are empty */
        more = false;
        run_until(&default_queue, default_queue.queued);
        for (queue *q : streams)
            if (q->done < q->queued) {
                run_until(q, q->queued);
                more = true;
            }
    }
}

/* --- stream capture and graphs ----------------------------------------------- */
bool st_emu_capture_refuse(const char *what) {
    std::lock_guard<std::recursive_mutex> l(lock);
    if (capturing_here.empty()) return false;
    fprintf(stderr,
            "cudaemu: %s while this thread captures a stream: cudaErrorStreamCaptureUnsupported (the "
            "capture is invalidated)\n",
            what);
    for (queue *q : capturing_here)
        q->cap->invalid = true;
    st_emu_ret(cudaErrorStreamCaptureUnsupported);
    return true;
}

cudaError_t st_emu_capture_check(cudaStream_t s, bool pageable) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q || !q->cap) return cudaSuccess;
    if (q->cap->invalid) return st_emu_ret(cudaErrorStreamCaptureInvalidated);
    static int refuse = -1; /* ST_CUDAEMU_CAPTURE_FAIL=1: as a driver that cannot capture this work */
    if (refuse < 0)
        refuse = getenv("ST_CUDAEMU_CAPTURE_FAIL") && atoi(getenv("ST_CUDAEMU_CAPTURE_FAIL")) == 1;
    if (!refuse && !pageable) return cudaSuccess;
    fprintf(stderr,
            "cudaemu: %s on a capturing stream: cudaErrorStreamCaptureUnsupported (the capture is "
            "invalidated)\n",
            pageable ? "a copy from or into pageable host memory" : "work (ST_CUDAEMU_CAPTURE_FAIL)");
    q->cap->invalid = true;
    return st_emu_ret(cudaErrorStreamCaptureUnsupported);
}

void st_emu_capture_invalidate(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (q && q->cap) q->cap->invalid = true;
}

/* q is being captured: what the caller would do there is refused (above) */
static bool refuse_on(queue *q, const char *what) {
    if (!q || !q->cap) return false;
    fprintf(stderr, "cudaemu: %s on a capturing stream: %s (the capture is invalidated)\n", what,
            "cudaErrorStreamCaptureUnsupported");
    q->cap->invalid = true;
    st_emu_ret(cudaErrorStreamCaptureUnsupported);
    return true;
}

extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (q == &default_queue) return st_emu_ret(cudaErrorStreamCaptureUnsupported); /* (the legacy stream) */
    if (q->cap) return st_emu_ret(cudaErrorIllegalState);
    if (mode != cudaStreamCaptureModeThreadLocal) {
        fprintf(stderr,
                "cudaemu: stream capture in mode %d: only cudaStreamCaptureModeThreadLocal is modelled\n",
                (int)mode);
        return st_emu_ret(cudaErrorInvalidValue);
    }
    q->cap = new capture;
    q->cap->owner = std::this_thread::get_id();
    capturing_here.push_back(q);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (!q->cap) return st_emu_ret(cudaErrorIllegalState);
    if (q->cap->owner != std::this_thread::get_id()) return st_emu_ret(cudaErrorStreamCaptureWrongThread);
    capture *c = q->cap;
    q->cap = NULL;
    for (size_t i = 0; i < capturing_here.size(); i++)
        if (capturing_here[i] == q) capturing_here.erase(capturing_here.begin() + (long)i--);
    *g = NULL;
    if (c->invalid) {
        delete c;
        return st_emu_ret(cudaErrorStreamCaptureInvalidated);
    }
    graphs.insert(c);
    *g = (cudaGraph_t)c;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    *status = !q->cap           ? cudaStreamCaptureStatusNone
              : q->cap->invalid ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    capture *c = (capture *)g;
    if (!graphs.count(c) || flags) return st_emu_ret(cudaErrorInvalidValue);
    graph_exec *x = new graph_exec;
    x->ops = c->ops; /* (the ops share their launches' arguments: a kernel's are never written) */
    execs.insert(x);
    *e = (cudaGraphExec_t)x;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g,
                                                     unsigned long long flags) {
    return cudaGraphInstantiate(e, g, flags);
}

extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    graph_exec *x = (graph_exec *)e;
    queue *q = queue_of(s);
    if (!execs.count(x) || !q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (refuse_on(q, "a graph launched")) return cudaErrorStreamCaptureUnsupported; /* (not modelled) */
    for (const captured &c : x->ops)
        for (const void *p : c.uses)
            if (!st_emu_is_device(p) && !st_emu_is_pinned(p, 1))
                st_emu_die("cudaGraphLaunch: the captured %s reads or writes %p, freed since the capture "
                           "(a graph must not outlive the memory it uses: a GPU would fault or corrupt it)",
                           c.what, p);
    for (const captured &c : x->ops)
        st_emu_enqueue(s, c.op);
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    std::lock_guard<std::recursive_mutex> l(lock);
    graph_exec *x = (graph_exec *)e;
    if (!execs.count(x)) return st_emu_ret(cudaErrorInvalidResourceHandle);
    execs.erase(x);
    delete x; /* (launches queued and not yet run keep their own copies) */
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    std::lock_guard<std::recursive_mutex> l(lock);
    capture *c = (capture *)g;
    if (!graphs.count(c)) return st_emu_ret(cudaErrorInvalidResourceHandle);
    graphs.erase(c);
    delete c;
    return cudaSuccess;
}

/* --- streams ------------------------------------------------------------------ */
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = new queue;
    streams.insert(q);
    *s = (cudaStream_t)q;
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = (queue *)s;
    if (!streams.count(q)) return st_emu_ret(cudaErrorInvalidResourceHandle);
    run_until(q, q->queued); /* CUDA lets queued work finish */
    streams.erase(q);
    delete q;
    ST_EMU_RETURN_IF_LOST();
    return cudaSuccess;
}
/* ST_CUDAEMU_HANG_SYNC=K: the K-th wait of the host (cudaStreamSynchronize,
 * cudaEventSynchronize) never returns, as behind a kernel that does not end
 * or a GPU that stopped answering (the stall watch's test). */
static void hang_if_asked(void) {
    static long n = 0, k = -1;
    if (k < 0) {
        const char *e = getenv("ST_CUDAEMU_HANG_SYNC");
        k = e ? atol(e) : 0;
    }
    if (k > 0 && __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) == k)
        for (;;)
            sleep(60);
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (st_emu_capture_refuse("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
    hang_if_asked();
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (refuse_on(q, "cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
    run_until(q, q->queued);
    ST_EMU_RETURN_IF_LOST();
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    queue *q = queue_of(s);
    if (!q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (refuse_on(q, "cudaStreamQuery")) return cudaErrorStreamCaptureUnsupported;
    if (q->done < q->queued) {
        run_until(q, q->queued);
        return cudaErrorNotReady; /* done now, but not when asked */
    }
    return cudaSuccess;
}

/* --- events ------------------------------------------------------------------- */
static event *event_of(cudaEvent_t e) { return events.count((event *)e) ? (event *)e : NULL; }

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = new event;
    v->timing = !(flags & cudaEventDisableTiming);
    events.insert(v);
    *e = (cudaEvent_t)v;
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = event_of(e);
    if (!v) return st_emu_ret(cudaErrorInvalidResourceHandle);
    events.erase(v); /* kept in memory: queued record items may still point at it */
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = event_of(e);
    queue *q = queue_of(s);
    if (!v || !q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (refuse_on(q, "cudaEventRecord (a capture across streams: not modelled)"))
        return cudaErrorStreamCaptureUnsupported;
    v->recorded = true;
    v->gen++;
    v->q = q;
    v->seq = q->queued + 1;
    v->queries = 0;
    item it;
    it.kind = item::RECORD;
    it.rec = v;
    it.gen = v->gen;
    push(q, std::move(it));
    return cudaSuccess;
}
static bool complete(const event *v) { return !v->recorded || v->q->done >= v->seq; }

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    ST_EMU_RETURN_IF_LOST();
    if (st_emu_capture_refuse("cudaEventQuery")) return cudaErrorStreamCaptureUnsupported;
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = event_of(e);
    if (!v) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (complete(v)) return cudaSuccess;
    /* ST_CUDAEMU_LAZY=2: a collective's end is not forced by the polls of
     * a backward's hooks, only by a host that waits (polls in a loop) */
    const int patience = lazy() == 2 && v->q->collective ? 1000 : 1;
    if (v->queries++ < patience) return cudaErrorNotReady; /* not an error: cudaGetLastError stays clean */
    run_until(v->q, v->seq);
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (st_emu_capture_refuse("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
    hang_if_asked();
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = event_of(e);
    if (!v) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (v->recorded) run_until(v->q, v->seq);
    ST_EMU_RETURN_IF_LOST();
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    event *x = event_of(a), *y = event_of(b);
    if (!x || !y || !x->timing || !y->timing || !x->recorded || !y->recorded)
        return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (!complete(x) || !complete(y)) return cudaErrorNotReady;
    *ms = (float)(y->ms - x->ms);
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    ST_EMU_RETURN_IF_LOST();
    std::lock_guard<std::recursive_mutex> l(lock);
    event *v = event_of(e);
    queue *q = queue_of(s);
    if (!v || !q) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (refuse_on(q, "cudaStreamWaitEvent (a capture across streams: not modelled)"))
        return cudaErrorStreamCaptureUnsupported;
    if (!v->recorded) return cudaSuccess; /* CUDA: waiting on a never-recorded event waits for nothing */
    item it;
    it.kind = item::WAIT;
    it.wait_on = v->q;
    it.wait_seq = v->seq;
    push(q, std::move(it));
    return cudaSuccess;
}

/* --- copies and memsets ------------------------------------------------------- */
static cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool sync) {
    ST_EMU_RETURN_IF_LOST();
    if (!st_emu_stream_ok(s)) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    const bool dd = st_emu_device_range(dst, n), sd = st_emu_device_range(src, n);
    const bool dst_dev = st_emu_is_device(dst), src_dev = st_emu_is_device(src);
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = sd && !dst_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dst_dev && !src_dev; break;
    default: ok = (dd || !dst_dev) && (sd || !src_dev); break;
    }
    if (!ok) {
        fprintf(stderr, "cudaemu: a copy of %zu bytes (kind %d) from %p to %p: %s\n", n, (int)kind, src, dst,
                dst_dev && !dd   ? "runs past the end of the destination's device allocation"
                : src_dev && !sd ? "runs past the end of the source's device allocation"
                                 : "its pointers do not match its direction");
        return st_emu_ret(cudaErrorInvalidValue);
    }
    const bool pageable = (!src_dev && !st_emu_is_pinned(src, n)) || (!dst_dev && !st_emu_is_pinned(dst, n));
    if (pageable && st_emu_capture_refuse("a copy from or into pageable host memory"))
        return cudaErrorStreamCaptureUnsupported;
    if (const cudaError_t e = st_emu_capture_check(s, pageable)) return e;
    if (!src_dev && !st_emu_is_pinned(src, n)) { /* pageable source: staged now, as CUDA does */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        st_emu_enqueue(s, [dst, staged, n] {
            if (st_emu_lost() == cudaSuccess) memcpy(dst, staged->data(), n);
        });
    } else {
        st_emu_enqueue_uses(
            s,
            [dst, src, n] {
                if (st_emu_lost() == cudaSuccess) memmove(dst, src, n);
            },
            {dst, src}, "copy");
    }
    if (sync || (!dst_dev && !st_emu_is_pinned(dst, n))) { /* into pageable memory: returns when done */
        std::lock_guard<std::recursive_mutex> l(lock);
        if (sync) {
            st_emu_run_all();
        } else {
            queue *q = queue_of(s);
            run_until(q, q->queued);
        }
        ST_EMU_RETURN_IF_LOST();
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    return copy(dst, src, n, kind, s, false);
}
extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (st_emu_capture_refuse("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
    st_emu_run_all(); /* the legacy default stream waits for the others */
    return copy(dst, src, n, kind, 0, true);
}

static cudaError_t set(void *dst, int v, size_t n, cudaStream_t s, bool sync) {
    ST_EMU_RETURN_IF_LOST();
    if (!st_emu_stream_ok(s)) return st_emu_ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    if (!st_emu_device_range(dst, n)) {
        fprintf(stderr, "cudaemu: a memset of %zu bytes at %p is not inside one device allocation\n", n, dst);
        return st_emu_ret(cudaErrorInvalidValue);
    }
    if (sync && st_emu_capture_refuse("cudaMemset")) return cudaErrorStreamCaptureUnsupported;
    if (const cudaError_t e = st_emu_capture_check(s, false)) return e;
    st_emu_enqueue(s, [dst, v, n] {
        if (st_emu_lost() == cudaSuccess) memset(dst, v, n);
    });
    if (sync) st_emu_run_all();
    if (sync) ST_EMU_RETURN_IF_LOST();
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
    return set(dst, v, n, s, false);
}
extern "C" cudaError_t cudaMemset(void *dst, int v, size_t n) { return set(dst, v, n, 0, true); }
