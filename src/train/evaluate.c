/* The evaluation of a session's validation data (session.h): which
 * batches each rank takes when the ranks share it, their agreement every
 * few batches on a stop or failure, the host's pass over its batches (a
 * device's is eval_device.c), and the loss and accuracy summed over the
 * ranks. Also the tests' marks, which pause a rank at a named point. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eval_device.h"
#include "layers/layers.h"
#include "session.h"

/* On a device: eval_device.c (batches up asynchronously, the loss summed
 * there). On the host the graph's own tensors take the batch and the loss
 * and logits are read where the graph left them. */
int64_t st_session_eval_count(const st_session *s, int64_t B) {
    /* train.eval_steps batches of B in all (with eval_batch_size auto, plan
     * made it the batches of every rank: as many samples on any number of
     * ranks) */
    const int64_t steps = s->cfg->train.eval_steps;
    return steps > 0 && steps < s->val.n / B + 1 && steps * B < s->val.n ? steps * B : s->val.n;
}

void st_session_eval_share(const st_session *s, int64_t B, int64_t *lo, int64_t *hi) {
    const int64_t n = st_session_eval_count(s, B);
    *lo = 0;
    *hi = n;
    if (!s->eval_shared || s->world <= 1) return;
    const int64_t nb = (n + B - 1) / B; /* batches; rank k takes [k nb / W, (k + 1) nb / W) */
    const int64_t b0 = (int64_t)s->rank * nb / s->world, b1 = ((int64_t)s->rank + 1) * nb / s->world;
    *lo = b0 * B;
    *hi = b1 * B < n ? b1 * B : n;
}

int64_t st_session_eval_common(const st_session *s, int64_t B) {
    if (!s->eval_shared || s->world <= 1) return 0;
    const int64_t n = st_session_eval_count(s, B), nb = (n + B - 1) / B;
    return nb / s->world; /* (the shares are nb / W batches, or one more) */
}

/* The agreement at this rank's batch b, when one is due: *end, every rank
 * alike; `mine`: this rank stopped or failed. */
static st_status eval_agree(st_session *s, int64_t b, int64_t common, bool mine, bool *end) {
    *end = false;
    if (b <= 0 || b % ST_EVAL_AGREE_EVERY != 0 || b >= common) return ST_OK;
    float f = mine ? 1.0f : 0.0f;
    ST_TRY(st_comm_all_reduce_sync(s->comm, &f, &f, 1, ST_COMM_F32, ST_COMM_MAX,
                                   "evaluation: a stop or failure"));
    *end = f > 0;
    return ST_OK;
}

void st_eval_agree_failed(st_session *s, st_status failed, int64_t B) {
    st_error_kept kept; /* (the failure's message stays the one said; a broken communicator's the
                         * evaluation's own all-reduce meets too) */
    st_error_keep(&kept, failed);
    bool end;
    (void)eval_agree(s, ST_EVAL_AGREE_EVERY, st_session_eval_common(s, B), true, &end);
    (void)st_error_restore(&kept);
}

st_eval_next st_eval_batch_begin(st_session *s, int64_t at, int64_t common, st_status *st, bool *stopped) {
    bool end;
    const st_status a = eval_agree(s, at, common, *st != ST_OK || *stopped, &end);
    if (a != ST_OK && *st == ST_OK) *st = a;
    if (a != ST_OK || end) return ST_EVAL_END;
    if (*st != ST_OK || *stopped) /* (to the next agreement, if any: every rank joins it) */
        return at >= common ? ST_EVAL_END : ST_EVAL_SKIP;
    st_eval_test_mark(s, at);
    if (st_session_stop_signal(s)) {
        *stopped = true;
        return ST_EVAL_SKIP;
    }
    return ST_EVAL_RUN;
}

/* A test's mark: FILE holds this process's pid, whole once it exists (the
 * rank a test signals). */
static void test_mark_file(const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        if (fclose(f) == 0) (void)rename(tmp, path);
    }
}

void st_test_pause(const char *point) {
    const char *v = getenv("SCALETRAIN_TEST_PAUSE"), *colon = v ? strchr(v, ':') : NULL;
    if (!colon || (size_t)(colon - v) != strlen(point) || strncmp(v, point, strlen(point)) != 0 || !colon[1])
        return;
    test_mark_file(colon + 1);
    (void)raise(SIGSTOP); /* (until the test's SIGCONT) */
}

void st_eval_test_mark(const st_session *s, int64_t batch) {
    const char *v = getenv("SCALETRAIN_TEST_EVAL_MARK");
    char spec[4096], path[4096] = "";
    for (const char *at = v; at && *at && !path[0];) { /* FILE:B or FILE:B:R, comma-separated */
        const char *comma = strchr(at, ',');
        const size_t len = comma ? (size_t)(comma - at) : strlen(at);
        snprintf(spec, sizeof spec, "%.*s", (int)len, at);
        at = comma ? comma + 1 : NULL;
        char *c1 = strrchr(spec, ':');
        if (!c1 || c1 == spec) continue;
        *c1 = '\0';
        long long b = atoll(c1 + 1), r = -1;
        char *c0 = strrchr(spec, ':');
        if (c0 && c0 != spec && c0[1] >= '0' && c0[1] <= '9' &&
            strspn(c0 + 1, "0123456789") == strlen(c0 + 1)) {
            r = b;
            b = atoll(c0 + 1);
            *c0 = '\0';
        }
        if (b == batch && (r < 0 || r == s->rank)) snprintf(path, sizeof path, "%s", spec);
    }
    if (!path[0]) return;
    test_mark_file(path);
    for (int i = 0; i < 6000 && !st_session_stop_signal(s); i++) { /* (the flag, every 10 ms) */
        struct timespec t = {0, 10 * 1000000L};
        while (nanosleep(&t, &t) != 0) {
        }
    }
}

static st_status evaluate_host(st_session *s, int64_t lo, int64_t hi, st_eval_sums *sums) {
    st_model_graph *mg = &s->eval_graph;
    const st_dataset *d = &s->val;
    const int64_t B = mg->batch;
    st_status st = ST_OK;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    if (!idx)
        st = st_fail(ST_ERR_NOMEM, "out of host memory for the evaluation batch's %lld sample indices",
                     (long long)B);
    double loss_sum = 0;
    int64_t valid = 0, correct = 0;
    mg->g.training = false;
    const int64_t classes = mg->logits ? mg->logits->shape[mg->logits->ndim - 1] : 0;
    const int64_t per = mg->y->count / B; /* targets per sample */
    st_eval_progress ep;
    st_eval_progress_init(&ep, s->out, s->eval_bar, (hi - lo + B - 1) / B);
    const int64_t common = st_session_eval_common(s, B);
    for (int64_t start = lo, b = 0; start < hi; start += B, b++) {
        const st_eval_next next = st_eval_batch_begin(s, b, common, &st, &sums->stopped);
        if (next == ST_EVAL_END) break;
        if (next == ST_EVAL_SKIP) continue;
        ST_INVARIANT(idx, "an evaluation batch run without its indices"); /* (a batch runs while st is OK) */
        int64_t cnt = hi - start < B ? hi - start : B;
        for (int64_t i = 0; i < cnt; i++) idx[i] = start + i;
        st_watch_begin(s->read_watch, "reading a validation batch");
        st = st_dataset_batch(d, idx, cnt, B, ST_IGNORE_INDEX, mg->x->data, mg->x->idata, mg->y->idata);
        st_watch_end(s->read_watch);
        if (st == ST_OK) st = st_graph_forward(&mg->g);
        if (st != ST_OK) continue;
        const float batch_loss = *mg->loss->data;
        int64_t v = 0;
        /* (an accuracy for images alone: a gpt's argmax over B x T x V would go unused) */
        st_eval_count(mg->y->idata, mg->logits && s->val.kind == ST_DATA_IMAGES ? mg->logits->data : NULL,
                      cnt * per, classes, &v, &correct);
        loss_sum += (double)batch_loss * (double)v;
        valid += v;
        st_eval_progress_step(&ep, b + 1);
    }
    st_eval_progress_end(&ep);
    free(idx);
    sums->loss_sum = loss_sum;
    sums->valid = valid;
    sums->correct = correct;
    return st;
}

st_status st_session_evaluate(st_session *s, double *loss, double *accuracy, bool *has_accuracy) {
    int64_t lo, hi;
    st_session_eval_share(s, s->eval_graph.batch, &lo, &hi);
    st_eval_sums e = {0};
    const st_params *p = &s->model->params;
    st_status pre = ST_OK;
    if (s->eval_shared && s->world > 1 && p->buffer_count > 0) { /* rank 0's batch-norm statistics */
        /* A device's go through the host in pieces of a buffer on the
         * stack: nothing to allocate, so no rank can fail to join a
         * broadcast the others are in. (Every rank joins each: a failed
         * download or upload is carried to the agreement below.) */
        enum { PIECE = 8192 };
        float piece[PIECE];
        const int64_t n = p->buffer_count, step = s->dev ? PIECE : n;
        st_status b = ST_OK;
        for (int64_t at = 0; at < n; at += step) {
            const size_t k = (size_t)(n - at < step ? n - at : step);
            float *h = s->dev ? piece : p->buffers + at;
            if (b == ST_OK && s->dev && s->rank == 0)
                b = st_device_download(s->dev, h, p->buffers + at, k * sizeof(float));
            if (b != ST_OK && s->dev && s->rank == 0) /* (zeros sent, not what a failed download left) */
                memset(h, 0, k * sizeof(float));
            const st_status bc =
                st_comm_broadcast_sync(s->comm, h, k, ST_COMM_F32, 0, "evaluation: rank 0's buffers");
            if (b == ST_OK) b = bc;
            if (bc != ST_OK) break; /* (a failed collective: the communicator is broken for every rank) */
            if (b == ST_OK && s->dev && s->rank != 0)
                b = st_device_upload(s->dev, p->buffers + at, h, k * sizeof(float));
        }
        pre = b; /* (carried to the evaluation's agreement below, which every rank joins) */
    }
    if (pre != ST_OK) st_eval_agree_failed(s, pre, s->eval_graph.batch);
    st_status st = pre != ST_OK ? pre : s->dev ? st_eval_device(s, lo, hi, &e) : evaluate_host(s, lo, hi, &e);
    if (s->eval_shared && s->world > 1) {
        /* Every rank learns whether each evaluated its share; a failed one
         * names itself, the others say that one failed. */
        /* (the failed ranks counted, and their ranks + 1 summed: the one that failed, when one did) */
        /* (and the ranks a stop ended early) */
        double v[6] = {e.loss_sum,
                       (double)e.valid,
                       (double)e.correct,
                       st != ST_OK ? 1.0 : 0.0,
                       st != ST_OK ? (double)s->rank + 1 : 0.0,
                       e.stopped ? 1.0 : 0.0};
        ST_TRY(st_comm_all_reduce_sync(s->comm, v, v, 6, ST_COMM_F64, ST_COMM_SUM, "evaluation"));
        if (v[3] > 0)
            s->agreed_error = s->agreed_read =
                true; /* (the checkpoint before it: run_ckpt.c st_run_rescue) */
        if (st != ST_OK) return st;
        if (v[3] == 1)
            return st_fail(ST_ERR_IO,
                           "the evaluation failed on another rank, rank %.0f (its error is in its output)",
                           v[4] - 1);
        if (v[3] > 1)
            return st_fail(ST_ERR_IO,
                           "the evaluation failed on %.0f other ranks (their errors are in their output)",
                           v[3]);
        e.loss_sum = v[0];
        e.valid = (int64_t)v[1];
        e.correct = (int64_t)v[2];
        e.stopped = v[5] > 0;
    }
    if (st != ST_OK) return st;
    if (e.stopped) return st_fail(ST_ERR_INTERRUPTED, "the evaluation was stopped before its end");
    *loss = e.valid ? e.loss_sum / (double)e.valid : 0.0;
    *accuracy = e.valid ? (double)e.correct / (double)e.valid : 0.0;
    *has_accuracy = s->val.kind == ST_DATA_IMAGES;
    return ST_OK;
}
