/* Profiler trace events and the Chrome-trace writer (see trace.h). The
 * format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
 * ("Trace Event Format": complete events "ph": "X", metadata "ph": "M"). */
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "dist/agree.h"
#include "hw/cost.h"
#include "session.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
_Static_assert(ST_TRACE_STREAM_COMPUTE == (int)ST_CUDA_STREAM_COMPUTE &&
                   ST_TRACE_STREAM_COMM == (int)ST_CUDA_STREAM_COMM &&
                   ST_TRACE_STREAM_COPY == (int)ST_CUDA_STREAM_COPY,
               "trace.h's stream numbers are st_cuda_stream_id's");
#endif

#ifdef ST_HAVE_CUDA
#include <nvtx3/nvToolsExt.h> /* header-only NVTX3: nothing to link */

/* One colour per kind of phase, so Nsight Systems tells them apart. */
static nvtxEventAttributes_t nvtx_attr(const char *cat, const char *name) {
    static const struct {
        const char *cat;
        uint32_t argb;
    } colours[] = {{"step", 0xff4c72b0u},   {"data", 0xffdd8452u},  {"forward", 0xff55a868u},
                   {"backward", 0xffc44e52u}, {"comm", 0xff8172b3u}, {"optim", 0xff937860u},
                   {"checkpoint", 0xffda8bc3u}, {"eval", 0xff8c8c8cu}};
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xff999999u;
    const size_t n = sizeof colours / sizeof colours[0];
    for (size_t i = n; i-- > 0;) /* by name ("forward" of the step), else by category */
        if (strcmp(cat, colours[i].cat) == 0) a.color = colours[i].argb;
    for (size_t i = n; i-- > 0;)
        if (strcmp(name, colours[i].cat) == 0) a.color = colours[i].argb;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    return a;
}
#endif

st_trace_mark st_trace_begin(st_trace *t, int tid, const char *cat, const char *name) {
    (void)t;
#ifdef ST_HAVE_CUDA
    nvtxEventAttributes_t a = nvtx_attr(cat, name);
    nvtxRangePushEx(&a);
#endif
    return (st_trace_mark){.t0 = st_now(), .tid = tid, .cat = cat, .name = name};
}

st_trace_mark st_trace_begin_async(st_trace *t, int tid, const char *cat, const char *name) {
    st_trace_mark m = {.tid = tid, .cat = cat, .name = name};
    (void)t;
#ifdef ST_HAVE_CUDA
    nvtxEventAttributes_t a = nvtx_attr(cat, name);
    m.range = nvtxRangeStartEx(&a);
    if (!m.range) m.range = 1; /* 0 means "not async" here; NVTX ignores an id it did not give */
#else
    m.range = 1;
#endif
    m.t0 = st_now();
    return m;
}

static void push_event(st_trace *t, int tid, const char *cat, const char *name, double begin, double end,
                       double flops, double elems);

static double end_mark(st_trace *t, const st_trace_mark *m, double flops, double elems) {
    const double end = st_now();
#ifdef ST_HAVE_CUDA
    if (m->range) nvtxRangeEnd(m->range);
    else nvtxRangePop();
#endif
    if (t && t->on) push_event(t, m->tid, m->cat, m->name, m->t0, end, flops, elems);
    return end;
}

double st_trace_end(st_trace *t, const st_trace_mark *m) { return end_mark(t, m, 0, 0); }

st_status st_trace_init(st_trace *t, int64_t first, int64_t last, int rank) {
    memset(t, 0, sizeof *t);
    if (first < 1 || last < first)
        return st_fail(ST_ERR_CONFIG, "log.trace_steps [%lld, %lld]: expected [first, last] with 1 <= first <= last",
                       (long long)first, (long long)last);
    t->first = first;
    t->last = last;
    t->whole = first - 1;
    t->rank = rank;
    t->cap = 4096;
    t->ev = malloc((size_t)t->cap * sizeof *t->ev);
    if (!t->ev) return st_fail(ST_ERR_NOMEM, "out of memory for the profiler trace");
    t->t0 = st_now();
    t->anchor = t->node_gpu = -1;
    t->elem_bytes = 4;
    return ST_OK;
}

void st_trace_free(st_trace *t) {
    if (!t) return;
#ifdef ST_HAVE_CUDA
    for (int32_t i = 0; i < t->cap_gev; i++)
        st_cuda_event_free(t->gev[i]);
#endif
    free(t->gev);
    free(t->span);
    free(t->ev);
    memset(t, 0, sizeof *t);
}

void st_trace_set_device(st_trace *t, st_device *dev, int elem_bytes) {
    if (!t) return;
    t->elem_bytes = elem_bytes;
#ifdef ST_HAVE_CUDA
    t->dev = dev;
#else
    (void)dev;
#endif
}

/* Record the next timing event on stream s: its index, or -1 (none left, or
 * CUDA refused: the span is dropped and counted, the run goes on). */
static int32_t gpu_record(st_trace *t, int stream) {
#ifdef ST_HAVE_CUDA
    if (t->n_gev == t->cap_gev) {
        if (t->cap_gev >= ST_TRACE_MAX_GPU_EVENTS) return -1;
        const int32_t cap = t->cap_gev ? 2 * t->cap_gev : 1024;
        struct st_cuda_event **g = realloc(t->gev, (size_t)cap * sizeof *g);
        if (!g) return -1;
        t->gev = g;
        for (; t->cap_gev < cap; t->cap_gev++)
            if (st_cuda_event_create(t->dev, true, &t->gev[t->cap_gev]) != ST_OK) return -1;
    }
    if (st_cuda_event_record(t->dev, t->gev[t->n_gev], (st_cuda_stream_id)stream) != ST_OK) return -1;
    return t->n_gev++;
#else
    (void)t, (void)stream;
    return -1;
#endif
}

void st_trace_step(st_trace *t, int64_t step) {
    if (!t) return;
    t->on = !t->written && step >= t->first && step <= t->last;
    /* (the step before ended with every event of the window kept) */
    if (t->on && !t->dropped && !t->gpu_dropped) t->whole = step - 1;
#ifdef ST_HAVE_CUDA
    if (t->on && t->dev && t->anchor < 0) { /* the device's clock against the host's, once */
        t->anchor = gpu_record(t, ST_TRACE_STREAM_COMPUTE);
        if (t->anchor >= 0 && st_cuda_event_sync(t->dev, t->gev[t->anchor]) != ST_OK) t->anchor = -1;
        t->anchor_t = st_now();
        if (t->anchor < 0) t->dev = NULL; /* no timeline rather than a wrong one */
    }
#endif
}

int32_t st_trace_gpu_begin(st_trace *t, int stream) {
    if (!t || !t->on || !t->dev || t->anchor < 0) return -1;
    const int32_t i = gpu_record(t, stream);
    if (i < 0) t->gpu_dropped++;
    return i;
}

static void gpu_end(st_trace *t, int32_t begin, int stream, int tid, const char *cat, const char *name,
                    double flops, double elems) {
    if (!t || begin < 0 || !t->dev) return;
    const int32_t end = gpu_record(t, stream);
    if (end < 0 || (t->n_span == t->cap_span && t->cap_span >= ST_TRACE_MAX_GPU_EVENTS)) {
        t->gpu_dropped++;
        return;
    }
    if (t->n_span == t->cap_span) {
        const int64_t cap = t->cap_span ? 2 * t->cap_span : 512;
        st_trace_gpu_span *sp = realloc(t->span, (size_t)cap * sizeof *sp);
        if (!sp) {
            t->gpu_dropped++;
            return;
        }
        t->span = sp;
        t->cap_span = cap;
    }
    st_trace_gpu_span *sp = &t->span[t->n_span++];
    memset(sp, 0, sizeof *sp);
    sp->begin = begin;
    sp->end = end;
    sp->tid = tid;
    sp->flops = flops;
    sp->elems = elems;
    snprintf(sp->cat, sizeof sp->cat, "%s", cat);
    snprintf(sp->name, sizeof sp->name, "%s", name);
}

void st_trace_gpu_end(st_trace *t, int32_t begin, int stream, int tid, const char *cat, const char *name) {
    gpu_end(t, begin, stream, tid, cat, name, 0, 0);
}

int32_t st_trace_comm_begin(st_trace *t, st_comm *c) {
    const bool device = t && c && strcmp(st_comm_backend_name(c), "nccl") == 0;
    return device ? st_trace_gpu_begin(t, ST_TRACE_STREAM_COMPUTE) : -1;
}

void st_trace_comm_end(st_trace *t, int32_t begin, const char *name) {
    gpu_end(t, begin, ST_TRACE_STREAM_COMM, ST_TRACE_TID_GPU_COMM, "comm", name, 0, 0);
}

/* The spans as events on the host's clock: wait for the last event, then
 * read each one's time from the anchor. A stream runs its work in order, so
 * a span on the communication or copy stream starts no earlier than the one
 * before it on that stream ended. */
static void gpu_resolve(st_trace *t) {
#ifdef ST_HAVE_CUDA
    if (!t->dev || t->anchor < 0 || t->n_span == 0) return;
    st_cuda_event *anchor = t->gev[t->anchor];
    bool ok = true;
    for (int32_t i = 0; i < t->n_gev && ok;
         i++) /* every event done (each stream's last one takes the time) */
        ok = st_cuda_event_sync(t->dev, t->gev[i]) == ST_OK;
    double prev_end[3] = {0, 0, 0};
    for (int64_t k = 0; k < t->n_span && ok; k++) {
        const st_trace_gpu_span *sp = &t->span[k];
        double b = 0, e = 0;
        ok = st_cuda_event_elapsed(t->dev, anchor, t->gev[sp->begin], &b) == ST_OK &&
             st_cuda_event_elapsed(t->dev, anchor, t->gev[sp->end], &e) == ST_OK;
        const int lane = sp->tid - ST_TRACE_TID_GPU;
        if (lane >= 0 && lane < 3) {
            if (b < prev_end[lane]) b = prev_end[lane];
            if (e > prev_end[lane]) prev_end[lane] = e;
        }
        if (ok) /* the window's spans, whenever they are read */
            push_event(t, sp->tid, sp->cat, sp->name, t->anchor_t + b, t->anchor_t + (e > b ? e : b),
                       sp->flops, sp->elems);
    }
    if (!ok) t->gpu_dropped += t->n_span;
    t->n_span = 0;
    t->n_gev = 0;
    t->anchor = -1;
#else
    (void)t;
#endif
}

/* Append an event (the window's: the callers check that it is on). */
static void push_event(st_trace *t, int tid, const char *cat, const char *name, double begin, double end,
                       double flops, double elems) {
    if (t->n == t->cap) {
        st_trace_event *e = t->cap < ST_TRACE_MAX_EVENTS ? realloc(t->ev, 2 * (size_t)t->cap * sizeof *e) : NULL;
        if (!e) {
            t->dropped++;
            return;
        }
        t->ev = e;
        t->cap *= 2;
    }
    st_trace_event *e = &t->ev[t->n++];
    memset(e, 0, sizeof *e);
    e->ts = begin - t->t0;
    e->dur = end > begin ? end - begin : 0;
    e->tid = tid;
    e->flops = flops;
    e->elems = elems;
    snprintf(e->cat, sizeof e->cat, "%s", cat);
    snprintf(e->name, sizeof e->name, "%s", name);
}

void st_trace_add(st_trace *t, int tid, const char *cat, const char *name, double begin, double end) {
    if (t && t->on) push_event(t, tid, cat, name, begin, end, 0, 0);
}

void st_trace_node(void *ctx, const st_node *n, bool backward, bool end) {
    st_trace *t = ctx;
    if (!t->on) return;
    /* the layer's name: its output tensor's without ".out" */
    char name[ST_NAME_MAX + 32];
    const char *o = n->out->name;
    size_t len = strlen(o);
    if (len > 4 && strcmp(o + len - 4, ".out") == 0) len -= 4;
    snprintf(name, sizeof name, "%.*s (%s)", (int)len, o, n->ops->name);
    st_trace_mark m = {.tid = ST_TRACE_TID_STEP, .cat = backward ? "backward" : "forward", .name = name};
    if (!end) {
        t->node_t0 = st_trace_begin(t, m.tid, m.cat, name).t0;
        t->node_gpu = st_trace_gpu_begin(t, ST_TRACE_STREAM_COMPUTE);
        return;
    }
    m.t0 = t->node_t0;
    /* its work: the model's on a device, the CPU kernels' on the host */
    const st_cost c = st_node_cost(n);
    const st_work w = t->dev ? (st_work){c.fwd_flops, c.bwd_flops, c.fwd_elems, c.bwd_elems} : c.cpu;
    const double flops = backward ? w.bwd_flops : w.fwd_flops, elems = backward ? w.bwd_elems : w.fwd_elems;
    end_mark(t, &m, flops, elems);
    gpu_end(t, t->node_gpu, ST_TRACE_STREAM_COMPUTE, ST_TRACE_TID_GPU, m.cat, name, flops, elems);
    t->node_gpu = -1;
}

void st_trace_span(void *ctx, const char *what, bool end, double flops) {
    st_trace *t = ctx;
    if (!t || !t->on || !t->dev) return;
    if (!end) {
        const int32_t b = st_trace_gpu_begin(t, ST_TRACE_STREAM_COMPUTE);
        if (t->n_kspan < (int)(sizeof t->kspan / sizeof t->kspan[0])) t->kspan[t->n_kspan] = b;
        t->n_kspan++;
        return;
    }
    if (t->n_kspan == 0) return;
    const int k = --t->n_kspan;
    if (k < (int)(sizeof t->kspan / sizeof t->kspan[0]))
        gpu_end(t, t->kspan[k], ST_TRACE_STREAM_COMPUTE, ST_TRACE_TID_GPU_KERNEL, "kernel", what, flops, 0);
}

static void put_escaped(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void thread_name(FILE *f, int pid, int tid, const char *name, int sort) {
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", pid, tid);
    put_escaped(f, name);
    fprintf(f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
            pid, tid, sort);
}

/* trace.json as it is written, one rank's events after another's. */
typedef struct json_out {
    st_atomic_file af;
    FILE *f; /* NULL: not writing (not this rank's file, or it failed: status) */
    st_status status;
    char path[4096];
    int rank;          /* the rank whose events come next */
    int max_tid;       /* its highest bucket lane named so far */
    bool gpu_named[4]; /* its GPU lanes named so far */
} json_out;

static void json_begin(json_out *o, const char *out_dir, const st_trace *t, int world, int64_t dropped) {
    snprintf(o->path, sizeof o->path, "%s/trace.json", out_dir);
    o->status = st_atomic_open(&o->af, o->path);
    if (o->status != ST_OK) return;
    o->f = o->af.fp;
    fprintf(o->f,
            "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"first_step\":%lld,\"last_step\":%lld,"
            "\"ranks\":%d,\"dropped_events\":%lld,\"elem_bytes\":%d},\n\"traceEvents\":[\n",
            (long long)t->first, (long long)t->last, world, (long long)dropped, t->elem_bytes);
}

/* Rank r's own lines, before its events. */
static void json_rank(json_out *o, int r) {
    o->rank = r;
    o->max_tid = -1;
    memset(o->gpu_named, 0, sizeof o->gpu_named);
    if (!o->f) return;
    FILE *f = o->f;
    fprintf(f,
            "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}",
            r == 0 ? "" : ",\n", r, r);
    fprintf(
        f,
        ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
        r, r);
    thread_name(f, r, ST_TRACE_TID_STEP, "step loop", 0);
}

/* n more of the current rank's events (each lane named before its first). */
static void json_events(json_out *o, const st_trace_event *ev, int64_t n) {
    if (!o->f) return;
    FILE *f = o->f;
    const int r = o->rank;
    static const char *const gpu_names[4] = {"GPU: compute stream", "GPU: communication stream",
                                             "GPU: copy stream", "GPU: compute stream, products and kernels"};
    for (int64_t i = 0; i < n; i++) {
        const st_trace_event *e = &ev[i];
        const int lane = e->tid - ST_TRACE_TID_GPU;
        if (lane >= 0 && lane < 4 && !o->gpu_named[lane]) {
            thread_name(f, r, e->tid, gpu_names[lane], e->tid);
            o->gpu_named[lane] = true;
        } else if (e->tid >= ST_TRACE_TID_BUCKET && e->tid < ST_TRACE_TID_GPU && e->tid > o->max_tid) {
            char nm[64];
            for (int b = o->max_tid < ST_TRACE_TID_BUCKET ? ST_TRACE_TID_BUCKET : o->max_tid + 1; b <= e->tid;
                 b++) {
                snprintf(nm, sizeof nm, "all-reduce: grad bucket %d", b - ST_TRACE_TID_BUCKET);
                thread_name(f, r, b, nm, b);
            }
            o->max_tid = e->tid;
        }
        fprintf(f, ",\n{\"name\":");
        put_escaped(f, e->name);
        fprintf(f, ",\"cat\":");
        put_escaped(f, e->cat);
        fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d", 1e6 * e->ts, 1e6 * e->dur,
                r, (int)e->tid);
        if (e->flops > 0 || e->elems > 0)
            fprintf(f, ",\"args\":{\"flops\":%.0f,\"elems\":%.0f}", e->flops, e->elems);
        fputc('}', f);
    }
}

/* The file's end, committed (or, after a failed write, removed). */
static st_status json_end(json_out *o) {
    if (!o->f) return o->status;
    fprintf(o->f, "\n]}\n");
    if (ferror(o->f)) {
        st_atomic_abort(&o->af);
        return st_fail(ST_ERR_IO, "%s: write failed", o->path);
    }
    return st_atomic_commit(&o->af);
}

/* Events a piece of the gather (about 0.6 MiB): what a rank holds beside its own. */
#define TRACE_PIECE 4096

st_status st_trace_write(st_trace *t, st_comm *comm, const char *out_dir, bool write) {
    gpu_resolve(t);
    const int world = st_comm_size(comm), rank = st_comm_rank(comm);
    /* every rank's count and drops, then one piece of events at a time,
     * broadcast by the rank they are from: the writer writes each as it
     * comes, so no rank holds more than its own events and one piece (a
     * gather of them all held world times one rank's on every rank). The
     * allocation agreed before the first collective it is for: a rank out
     * of memory must not leave the others waiting in it; every rank returns
     * a failure then, which train.c takes as a warning. */
    const size_t counts_bytes = (size_t)world * 3 * sizeof(int64_t);
    void *mem = malloc(counts_bytes + TRACE_PIECE * sizeof(st_trace_event));
    st_status s = mem ? ST_OK : st_fail(ST_ERR_NOMEM, "out of memory gathering the profiler trace");
    json_out o = {.status = ST_OK};
    ST_GOTO(st_agree_status(comm, s, "memory for the profiler trace's gather"));
    int64_t *counts = mem;
    st_trace_event *piece = (st_trace_event *)((char *)mem + counts_bytes);
    /* (its events, those dropped, and the last step it holds whole) */
    int64_t mine[3] = {t->n, t->dropped + t->gpu_dropped, t->dropped + t->gpu_dropped ? t->whole : t->last};
    st_comm_req *req = NULL;
    ST_GOTO(st_comm_all_gather(comm, mine, counts, 3, ST_COMM_I64, "trace counts", &req));
    ST_GOTO(st_comm_wait(&req));
    int64_t dropped = 0;
    for (int r = 0; r < world; r++) {
        dropped += counts[3 * r + 1];
        if (counts[3 * r + 2] < t->last) t->last = counts[3 * r + 2];
    }
    /* (a write that fails goes on taking part: the others' pieces come all the same) */
    if (write) json_begin(&o, out_dir, t, world, dropped);
    for (int r = 0; r < world; r++) {
        json_rank(&o, r);
        for (int64_t at = 0; at < counts[3 * r]; at += TRACE_PIECE) {
            const int64_t n = counts[3 * r] - at < TRACE_PIECE ? counts[3 * r] - at : TRACE_PIECE;
            st_trace_event *ev = r == rank ? t->ev + at : piece;
            ST_GOTO(st_comm_broadcast(comm, ev, (size_t)n * sizeof *ev, ST_COMM_U8, r, "trace events", &req));
            ST_GOTO(st_comm_wait(&req));
            json_events(&o, ev, n);
        }
    }
    s = write ? json_end(&o) : ST_OK;
    o.f = NULL;
fail:
    if (o.f) st_atomic_abort(&o.af); /* (a collective failed while the file was open) */
    t->written = true;
    t->on = false;
    t->n = 0;
    free(mem);
    return s;
}

void st_trace_keep_earlier(const char *out_dir, int64_t before, char *kept, size_t n) {
    kept[0] = '\0';
    char path[4200], to[4300], head[256];
    snprintf(path, sizeof path, "%s/trace.json", out_dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    const size_t got = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[got] = '\0';
    long long a, b; /* (the header st_trace_write makes: first_step and last_step come first) */
    if (sscanf(head, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"first_step\":%lld,\"last_step\":%lld", &a,
               &b) != 2 ||
        a < 1 || b < a || b > before)
        return;
    snprintf(to, sizeof to, "%s/trace-steps-%lld-%lld.json", out_dir, a, b);
    /* A second name for it (the new trace.json then replaces the first
     * alone: a write that fails leaves both); where the file system has no
     * links, renamed. (An older trace of the same steps is replaced.) */
    if (link(path, to) != 0) {
        if (errno == EEXIST) (void)unlink(to);
        if (link(path, to) != 0 && rename(path, to) != 0) {
            fprintf(
                stderr,
                "scaletrain: warning: cannot keep the earlier trace %s as %s (this run's replaces it): %s\n",
                path, to, strerror(errno));
            return;
        }
    }
    snprintf(kept, n, "%s", to);
}
