/* log.sample_every's text sample during a run (run_sample.h): the run's
 * weights copied into a sampler (on the run's GPU when there is room, else
 * on the host), one sample drawn and printed by rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/mem.h"
#include "core/text.h"
#include "dist/zero.h"
#include "model/sample.h"
#include "run_sample.h"

/* The run's weights (host arrays laid out as its arenas: data, buffers)
 * into the sampler sm, uploaded when sm is on a device: each arena in one
 * copy where sm lays its tensors out as the run's model does (it does: the
 * same model settings), else tensor by tensor by name. */
static st_status sampler_weights(st_model *sm, const st_model *m, const float *data, const float *buffers) {
    const st_params *p = &sm->params;
    bool same = p->n == m->params.n && p->arena_count == m->params.arena_count &&
                p->buffer_count == m->params.buffer_count;
    for (int i = 0; same && i < p->n; i++)
        same = p->t[i]->kind == m->params.t[i]->kind && p->t[i]->offset == m->params.t[i]->offset &&
               p->t[i]->count == m->params.t[i]->count && strcmp(p->t[i]->name, m->params.t[i]->name) == 0;
    if (same) {
        ST_TRY(st_device_upload(p->dev, p->data, data, (size_t)p->arena_count * sizeof *data));
        if (p->buffer_count)
            ST_TRY(st_device_upload(p->dev, p->buffers, buffers, (size_t)p->buffer_count * sizeof *buffers));
    }
    for (int i = 0; !same && i < p->n; i++) {
        st_tensor *t = p->t[i];
        const st_tensor *u = st_params_find(&m->params, t->name);
        if (!u || u->count != t->count)
            return st_fail(ST_ERR_INTERNAL, "the sampler's %s is not the model's", t->name);
        const float *src = (u->kind == ST_TENSOR_PARAM ? data : buffers) + u->offset;
        ST_TRY(st_device_upload(p->dev, t->data, src, (size_t)t->count * sizeof *t->data));
    }
    st_params_touch(&sm->params);
    return ST_OK;
}

/* One text sample (go) from the run's weights (*data, *buffers: host
 * copies, freed here as soon as no sampler needs them) into out (*len
 * tokens), drawn on the run's GPU when it has one and room there: a
 * sampler made there for this sample alone and freed after it (fp32
 * weights without gradients, the cache of keys and values, its graphs), so
 * that training never runs beside its memory; else, and from the first
 * sample that found no room on, on the host, by a sampler kept for the
 * run. *where: the device's name or "cpu". The progress line is ended
 * before a note. */
static st_status draw_sample(st_session *ses, st_progress *prog, float **data, float **buffers,
                             const st_generate_opts *go, int32_t *out, int64_t *len, const char **where) {
    st_model *m = ses->model;
    st_config sc = *ses->cfg;
    st_generate_config(&sc);
    const int32_t V = (int32_t)m->in.vocab_size, first = V == 256 ? '\n' : V >= 50257 ? 50256 : 0;
    st_status s = ST_OK;
    if (m->params.dev && !ses->sample_on_host) {
        st_model *dm = NULL;
        /* (a failed allocation's advice meanwhile: the note below says what follows) */
        st_device_set_oom_advice(m->params.dev, "(a text sample's sampler, beside training)");
        s = st_model_create_inference(&sc, &m->in, m->params.dev, &dm);
        if (s == ST_OK) s = sampler_weights(dm, m, *data, *buffers);
        st_generate_stats gs = {0};
        st_generate_opts dgo = *go;
        dgo.stats = &gs;
        if (s == ST_OK) s = st_generate(dm, &first, 1, &dgo, out, len);
        if (s == ST_OK && gs.graph_note[0] && !ses->sample_graph_said) {
            st_progress_end(prog);
            fprintf(ses->out, "note: log.sample_every: %s\n", gs.graph_note);
            ses->sample_graph_said = true;
        }
        st_model_free(dm);
        st_device_set_oom_advice(m->params.dev, NULL);
        *where = st_device_name(m->params.dev);
        if (s != ST_ERR_NOMEM) goto done;
        /* No room on the GPU, or none in host memory for the sampler's
         * small host arrays (said as it is: the host sampler would fail
         * too, with a warning) */
        char why[512];
        snprintf(why, sizeof why, "%s", st_last_error());
        st_clear_error();
        st_device_mem dmem;
        const double mib = 1 << 20, weights = (double)(m->params.arena_count + m->params.buffer_count) * 4;
        const bool got = st_device_memory(m->params.dev, &dmem) == ST_OK;
        st_clear_error();
        const double free_b = got ? (double)(dmem.total - dmem.used) : 0;
        st_progress_end(prog);
        if (got && free_b < 2 * weights)
            fprintf(ses->out,
                    "note: log.sample_every: %s has no room beside training for a sampler (%.1f MiB free, "
                    "and its fp32 weights alone are %.1f MiB): this run's samples are drawn on rank 0's "
                    "CPU, slower\n",
                    st_device_name(m->params.dev), free_b / mib, weights / mib);
        else
            fprintf(ses->out,
                    "note: log.sample_every: no sampler on %s (%s): this run's samples are drawn on rank "
                    "0's CPU, slower\n",
                    st_device_name(m->params.dev), why);
        ses->sample_on_host = true;
    }
    *where = "cpu";
    if (!ses->sampler) {
        snprintf(sc.train.device, sizeof sc.train.device, "cpu");
        s = st_model_create_inference(&sc, &m->in, NULL, &ses->sampler);
    }
    if (s == ST_OK) s = sampler_weights(ses->sampler, m, *data, *buffers);
    st_free_aligned(*data); /* (before generation: the host sampler holds its own copy) */
    st_free_aligned(*buffers);
    *data = *buffers = NULL;
    if (s == ST_OK) s = st_generate(ses->sampler, &first, 1, go, out, len);
done:
    st_free_aligned(*data);
    st_free_aligned(*buffers);
    *data = *buffers = NULL;
    return s;
}

/* log.sample_every, every rank after `step` steps: the weights then draw a
 * text sample on rank 0, which prints it (the other ranks take part in
 * gathering sharded masters alone). The sampler is a copy of the model in
 * fp32 with its logits kept (the run's may be in 16 bits, with a fused
 * head), on the run's GPU or the host (draw_sample); its weights are the
 * run's, copied each time. A sample is a look at the
 * model, not part of training: one that cannot be drawn (memory, logits
 * that are not finite) is a warning and the last, and a stop (SIGTERM)
 * ends it unprinted. But a GPU lost by then (a fault in the sampler's
 * kernels, or in the step's before them: the device's sticky error, which
 * the next step would meet) is rank 0's own error, *fault (train.c own_error: the
 * run stops with it). The return: a collective's failure, which every rank
 * has. */
st_status st_run_sample(st_session *ses, const st_run_opts *opts, st_progress *prog, int64_t step,
                                  st_status *fault) {
    st_model *m = ses->model;
    const st_config *c = ses->cfg;
    float *data = NULL, *buffers = NULL;
    if (m->params.masters_sharded) /* (a collective: every rank, even after rank 0's sample failed) */
        ST_TRY(st_zero_copy_arenas(m, ses->comm, &data, &buffers));
    if (ses->rank != 0 || ses->sample_failed || opts->quiet) {
        st_free_aligned(data);
        st_free_aligned(buffers);
        return ST_OK;
    }
    st_status s = data ? ST_OK : st_model_copy_arenas(m, &data, &buffers);
    const int64_t V = m->in.vocab_size, n = c->log.sample_tokens;
    int32_t *out = s == ST_OK ? malloc((size_t)(n + 1) * sizeof *out) : NULL;
    if (s == ST_OK && !out)
        s = st_fail(ST_ERR_NOMEM, "out of memory for a sample of %lld tokens", (long long)n);
    int64_t len = 0;
    /* (printed: `scaletrain sample --seed` takes it, 0 to 2^63 - 1) */
    const uint64_t seed = ((uint64_t)c->train.seed * 1000003u + (uint64_t)step) & (uint64_t)INT64_MAX;
    const st_generate_opts go = {.p = {.temperature = 1, .top_k = 0, .top_p = 1},
                                 .n_new = n,
                                 .n_samples = 1,
                                 .seed = seed,
                                 .stop_token = -1,
                                 .stop = opts->stop};
    const char *where = "";
    if (s == ST_OK) s = draw_sample(ses, prog, &data, &buffers, &go, out, &len, &where);
    st_free_aligned(data);
    st_free_aligned(buffers);
    if (s == ST_ERR_INTERRUPTED) { /* (the run stops after this step: the sample goes unprinted) */
        st_clear_error();
        free(out);
        return ST_OK;
    }
    if (s == ST_OK) snprintf(ses->sample_device, sizeof ses->sample_device, "%s", where);
    st_progress_end(prog);
    /* (the GPU lost: in the sampler's kernels, or before them in the step's, which the copy of the weights
     * was the first to wait for) */
    if (s != ST_OK && m->params.dev && st_device_lost(m->params.dev)) {
        free(out);
        *fault = st_fail_context(s, "log.sample_every: %s faulted by the text sample after step %lld: ",
                                 st_device_name(m->params.dev), (long long)step);
        return ST_OK;
    }
    if (s != ST_OK) {
        fprintf(ses->out,
                "warning: log.sample_every: no sample at step %lld: %s; training goes on without samples\n",
                (long long)step, st_last_error());
        st_clear_error();
        ses->sample_failed = true;
    } else if (V == 256) { /* bytes: as text, '?' for a control character (C0 but a new line or tab,
                            * DEL, C1) and for a byte of no valid UTF-8 sequence */
        fprintf(ses->out, "sample at step %lld (--seed %llu):\n", (long long)step, (unsigned long long)seed);
        unsigned char b[len]; /* (len - 1 <= log.sample_tokens <= 65536) */
        for (int64_t i = 1; i < len; i++)
            b[i] = (unsigned char)out[i];
        for (int64_t i = 1; i < len;) {
            const size_t k = st_utf8_len(b + i, (size_t)(len - i));
            const bool ctl = (k == 1 && (b[i] < 0x20 || b[i] == 0x7f) && b[i] != '\n' && b[i] != '\t') ||
                             (k == 2 && b[i] == 0xc2 && b[i + 1] < 0xa0); /* (U+0080 to U+009F) */
            if (k && !ctl)
                fwrite(b + i, 1, k, ses->out);
            else
                fputc('?', ses->out);
            i += k && !ctl ? (int64_t)k : 1;
        }
        fputc('\n', ses->out);
    } else {
        fprintf(ses->out, "sample at step %lld (--seed %llu, token ids):", (long long)step,
                (unsigned long long)seed);
        for (int64_t i = 1; i < len; i++)
            fprintf(ses->out, " %d", out[i]);
        fputc('\n', ses->out);
    }
    free(out);
    fflush(ses->out);
    return ST_OK;
}
