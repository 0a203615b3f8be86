/* Evaluation on a CUDA device (see eval_device.h).
 *
 * Batch b uses slot b % 2: its pinned inputs, targets and logits, and `done`,
 * an event on the compute stream after its forward (and its logits' copy).
 * Before slot i is filled again the host waits for `done` of batch b - 2 and
 * counts that batch; the copy of batch b into the graph's inputs waits, on
 * the copy stream, for `done` of batch b - 1 (the forward that last read the
 * inputs), and the compute stream waits for the copy. One device input
 * buffer is enough: a batch is a few hundred KiB, its copy microseconds, and
 * what overlaps the GPU's work is the host's assembly of the next batch. */
#include "eval_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif

void st_eval_count(const int32_t *y, const float *logits, int64_t rows, int64_t classes, int64_t *valid,
                   int64_t *correct) {
    for (int64_t r = 0; r < rows; r++) {
        const int32_t t = y[r];
        if (t == ST_IGNORE_INDEX) continue;
        (*valid)++;
        if (!logits) continue;
        const float *row = logits + r * classes;
        int64_t best = 0;
        for (int64_t k = 1; k < classes; k++)
            if (row[k] > row[best]) best = k;
        *correct += best == t && isfinite(row[best]); /* (NaN logits: no class; argmax would say 0) */
    }
}

#ifdef ST_HAVE_CUDA

enum { NSLOT = 2 };

typedef struct slot {
    void *x;       /* (B, ...) float inputs or (B, T) int32 tokens */
    int32_t *y;    /* (B) or (B, T) targets */
    float *logits; /* (B, classes), image models only */
    bool x_pinned, y_pinned, logits_pinned;
    st_cuda_event *done; /* compute stream: after its forward and logits copy */
    int64_t rows;        /* target rows of its batch (count * targets per sample); -1: no batch */
} slot;

/* Kept in the session from the first evaluation to its end: freeing device
 * or pinned memory (cudaFree, cudaFreeHost) would wait for the whole device
 * at every evaluation during training. */
struct st_eval_dev {
    st_device *dev;
    slot s[NSLOT];
    st_cuda_event *copied; /* copy stream: after the last batch's copy */
    st_cuda_loss *loss;
};
typedef struct st_eval_dev eval_state;

/* Pinned host memory, or plain memory when pinning fails (the copies are
 * then staged by the driver, and a logits copy waits: slower, the same bits). */
static st_status host_buf(st_device *dev, size_t nbytes, void **out, bool *pinned) {
    *pinned = st_cuda_host_alloc(dev, nbytes, out) == ST_OK;
    if (*pinned) return ST_OK;
    st_clear_error();
    *out = malloc(nbytes);
    if (!*out) return st_fail(ST_ERR_NOMEM, "out of memory for the evaluation batch (%zu bytes)", nbytes);
    return ST_OK;
}

static void host_free(void *p, bool pinned) {
    if (pinned)
        st_cuda_host_free(p);
    else
        free(p);
}

static st_status state_init(eval_state *e, st_device *dev, const st_model_graph *mg, bool images) {
    memset(e, 0, sizeof *e);
    e->dev = dev;
    for (int i = 0; i < NSLOT; i++) {
        slot *sl = &e->s[i];
        sl->rows = -1;
        ST_TRY(host_buf(dev, (size_t)mg->x->count * 4, &sl->x, &sl->x_pinned));
        ST_TRY(host_buf(dev, (size_t)mg->y->count * sizeof(int32_t), (void **)&sl->y, &sl->y_pinned));
        if (images)
            ST_TRY(host_buf(dev, (size_t)mg->logits->count * sizeof(float), (void **)&sl->logits,
                            &sl->logits_pinned));
        ST_TRY(st_cuda_event_create(dev, false, &sl->done));
    }
    ST_TRY(st_cuda_event_create(dev, false, &e->copied));
    return st_cuda_loss_create(dev, &e->loss);
}

void st_eval_device_free(st_eval_dev *e) {
    if (!e) return;
    (void)st_device_sync(e->dev); /* after an error, copies may still read or write the buffers */
    st_cuda_loss_free(e->loss);
    st_cuda_event_free(e->copied);
    for (int i = 0; i < NSLOT; i++) {
        slot *sl = &e->s[i];
        st_cuda_event_free(sl->done);
        if (sl->x) host_free(sl->x, sl->x_pinned);
        if (sl->y) host_free(sl->y, sl->y_pinned);
        if (sl->logits) host_free(sl->logits, sl->logits_pinned);
    }
    free(e);
}

/* Wait for slot sl's batch and count its correct predictions (its valid
 * targets were counted when it was assembled). */
static st_status settle(eval_state *e, slot *sl, int64_t classes, int64_t *correct) {
    if (sl->rows < 0) return ST_OK;
    ST_TRY(st_cuda_event_sync(e->dev, sl->done));
    int64_t valid = 0;
    st_eval_count(sl->y, sl->logits, sl->rows, classes, &valid, correct);
    sl->rows = -1;
    return ST_OK;
}

/* Queue batch b, already assembled in sl with v valid targets: its copy, its
 * forward, its loss into the sum, its logits back. */
static st_status queue_batch(eval_state *e, st_model_graph *mg, slot *sl, const slot *prev, int64_t b,
                             int64_t v) {
    st_device *dev = e->dev;
    const st_tensor *x = mg->x;
    if (prev) ST_TRY(st_cuda_stream_wait_event(dev, ST_CUDA_STREAM_COPY, prev->done));
    ST_TRY(st_cuda_memcpy_async(dev, x->dtype == ST_F32 ? (void *)x->data : (void *)x->idata, sl->x,
                                (size_t)x->count * 4, ST_CUDA_STREAM_COPY));
    ST_TRY(st_cuda_memcpy_async(dev, mg->y->idata, sl->y, (size_t)mg->y->count * sizeof(int32_t),
                                ST_CUDA_STREAM_COPY));
    ST_TRY(st_cuda_event_record(dev, e->copied, ST_CUDA_STREAM_COPY));
    ST_TRY(st_cuda_stream_wait_event(dev, ST_CUDA_STREAM_COMPUTE, e->copied));
    ST_TRY(st_graph_forward(&mg->g));
    /* the host's loss_sum += (double)batch_loss * (double)v, on the device */
    ST_TRY(st_cuda_loss_add_times(e->loss, mg->loss->data, (double)v));
    ST_TRY(st_cuda_loss_step_end(e->loss, b + 1));
    if (sl->logits)
        ST_TRY(st_cuda_memcpy_async(dev, sl->logits, mg->logits->data,
                                    (size_t)mg->logits->count * sizeof(float), ST_CUDA_STREAM_COMPUTE));
    return st_cuda_event_record(dev, sl->done, ST_CUDA_STREAM_COMPUTE);
}

st_status st_eval_device(st_session *s, int64_t lo, int64_t hi, st_eval_sums *sums) {
    st_model_graph *mg = &s->eval_graph;
    const st_dataset *d = &s->val;
    const int64_t B = mg->batch;
    const bool images = d->kind == ST_DATA_IMAGES;
    ST_INVARIANT(!images || mg->logits, "an image model without logits"); /* (accuracy reads them) */
    const int64_t classes = mg->logits ? mg->logits->shape[mg->logits->ndim - 1] : 0;
    const int64_t per = mg->y->count / B; /* targets per sample */
    const int64_t n = hi;
    st_status st = ST_OK;
    if (!s->eval_dev) { /* the first evaluation of the session */
        s->eval_dev = calloc(1, sizeof *s->eval_dev);
        st = s->eval_dev ? state_init(s->eval_dev, s->dev, mg, images)
                         : st_fail(ST_ERR_NOMEM, "out of memory for the evaluation's buffers");
        if (st != ST_OK) {
            st_eval_device_free(s->eval_dev);
            s->eval_dev = NULL;
            st_eval_agree_failed(s, st, B); /* (the others' first agreement, where every share ends) */
            return st;
        }
    }
    eval_state *e = s->eval_dev;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    if (!idx)
        st = st_fail(ST_ERR_NOMEM, "out of host memory for the evaluation batch's %lld sample indices",
                     (long long)B);
    int64_t valid = 0, correct = 0, b = 0; /* b: the batches queued (those after a stop or error are not) */
    mg->g.training = false;
    st_eval_progress ep; /* (batches queued: the device is at most two behind) */
    st_eval_progress_init(&ep, s->out, s->eval_bar, (n - lo + B - 1) / B);
    const int64_t common = st_session_eval_common(s, B);
    for (int64_t start = lo, at = 0; start < n; start += B, at++) { /* at: this rank's batch */
        /* (after a stop or an error the batches queued are settled below) */
        const st_eval_next next = st_eval_batch_begin(s, at, common, &st, &sums->stopped);
        if (next == ST_EVAL_END) break;
        if (next == ST_EVAL_SKIP) continue;
        ST_INVARIANT(idx, "an evaluation batch run without its indices"); /* (a batch runs while st is OK) */
        slot *sl = &e->s[b % NSLOT];
        st = settle(e, sl, classes, &correct); /* batch b - 2 */
        if (st != ST_OK) continue;
        const int64_t cnt = n - start < B ? n - start : B;
        for (int64_t i = 0; i < cnt; i++)
            idx[i] = start + i;
        st_watch_begin(s->read_watch, "reading a validation batch");
        st = st_dataset_batch(d, idx, cnt, B, ST_IGNORE_INDEX, mg->x->dtype == ST_F32 ? sl->x : NULL,
                              mg->x->dtype == ST_F32 ? NULL : sl->x, sl->y);
        st_watch_end(s->read_watch);
        if (st != ST_OK) continue;
        int64_t v = 0, unused = 0;
        st_eval_count(sl->y, NULL, cnt * per, 0, &v, &unused);
        st = queue_batch(e, mg, sl, b > 0 ? &e->s[(b - 1) % NSLOT] : NULL, b, v);
        if (st != ST_OK) continue;
        sl->rows = cnt * per;
        valid += v;
        b++;
        st_eval_progress_step(&ep, at + 1);
    }
    /* the last two batches, in order; then the loss, read once */
    for (int64_t k = b - 2 < 0 ? 0 : b - 2; k < b && st == ST_OK; k++)
        st = settle(e, &e->s[k % NSLOT], classes, &correct);
    double loss_sum = 0;
    int64_t bad = -1; /* (evaluation reports a NaN loss as it is) */
    if (st == ST_OK) st = st_cuda_loss_read(e->loss, &loss_sum, &bad);
    st_eval_progress_end(&ep);
    free(idx);
    if (st != ST_OK) { /* the buffers may be mid-copy: made again by the next evaluation */
        st_eval_device_free(s->eval_dev);
        s->eval_dev = NULL;
        return st;
    }
    sums->loss_sum = loss_sum;
    sums->valid = valid;
    sums->correct = correct;
    return ST_OK;
}

#else

void st_eval_device_free(st_eval_dev *e) { (void)e; }

st_status st_eval_device(st_session *s, int64_t lo, int64_t hi, st_eval_sums *sums) {
    (void)s;
    (void)lo;
    (void)hi;
    memset(sums, 0, sizeof *sums);
    return st_fail(ST_ERR_UNSUPPORTED, "evaluation on a device: this scaletrain was built without CUDA");
}

#endif
