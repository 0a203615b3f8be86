/* What a run says about itself (run_report.h): its header, the memory it
 * holds, its trace and its --json summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/blas.h"
#include "core/device.h"
#include "core/ticker.h"
#include "data/tokens.h"
#include "run_report.h"

/* v, or null where the run measured nothing (`has` false). */
static void add_measured(cJSON *o, const char *name, double v, bool has) {
    if (has)
        cJSON_AddNumberToObject(o, name, v);
    else
        cJSON_AddNullToObject(o, name);
}

/* The --json summary of a training run (train) or an evaluation. A training
 * run resumed at its last step ran no steps ("steps_run": 0): its losses,
 * rates and times were not measured and are null, not 0. */
void st_run_print_json(FILE *out, const st_run_result *r, bool lm, bool train) {
    const int64_t run = train ? r->steps - r->start_step : 0;
    const bool ran = !train || run > 0;
    cJSON *o = cJSON_CreateObject();
    add_measured(o, "loss", r->has_eval ? r->eval_loss : r->train_loss, r->has_eval || ran);
    if (r->has_accuracy) cJSON_AddNumberToObject(o, "accuracy", r->eval_accuracy);
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    if (train) cJSON_AddNumberToObject(o, "steps_run", (double)run);
    add_measured(o, "samples_per_s", r->samples_per_s, ran);
    if (lm) add_measured(o, "tokens_per_s", r->tokens_per_s, ran);
    if (train) {
        add_measured(o, "train_loss", r->train_loss, ran);
        add_measured(o, "first_loss", r->first_loss, ran);
        add_measured(o, "seconds", r->seconds, ran);
        add_measured(o, "gflops_per_s", r->gflops_per_s, ran);
        add_measured(o, "step_ms_median", r->step_ms_median, ran);
        add_measured(o, "data_wait_fraction", r->data_wait_fraction, ran);
        cJSON_AddNumberToObject(o, "activation_mib", r->activation_mib);
        cJSON_AddBoolToObject(o, "fused_gelu", r->fused_gelu_fwd + r->fused_gelu_bwd > 0);
        cJSON_AddNumberToObject(o, "fused_gelu_fwd", r->fused_gelu_fwd);
        cJSON_AddNumberToObject(o, "fused_gelu_bwd", r->fused_gelu_bwd);
        cJSON_AddNumberToObject(o, "fused_residual", r->fused_residual);
        cJSON_AddNumberToObject(o, "attention_cudnn_calls", (double)r->attention_cudnn_calls);
        cJSON_AddNumberToObject(o, "bias_grad_epilogues", (double)r->bias_grad_epilogues);
        cJSON_AddNumberToObject(o, "matmul_tuned", (double)r->matmul_tuned);
        cJSON_AddNumberToObject(o, "matmul_tune_switched", (double)r->matmul_tune_switched);
        cJSON_AddNumberToObject(o, "matmul_tune_restored", (double)r->matmul_tune_restored);
        cJSON_AddNumberToObject(o, "matmul_tune_first_ms", r->matmul_tune_first_ms);
        cJSON_AddNumberToObject(o, "matmul_tune_chosen_ms", r->matmul_tune_chosen_ms);
        if (r->has_loss_scale) {
            cJSON_AddNumberToObject(o, "loss_scale", r->loss_scale);
            cJSON_AddNumberToObject(o, "skipped_steps", (double)r->skipped_steps);
        }
        cJSON_AddStringToObject(o, "strategy", r->strategy);
        cJSON_AddBoolToObject(o, "deterministic", r->deterministic);
        cJSON_AddNumberToObject(o, "optim_state_bytes", (double)r->optim_state_bytes);
        cJSON_AddNumberToObject(o, "optim_state_bytes_predicted", (double)r->optim_state_bytes_predicted);
        if (r->optim_offload) {
            cJSON_AddBoolToObject(o, "optim_offload", true);
            cJSON_AddNumberToObject(o, "optim_offload_early", r->optim_offload_early);
        }
        cJSON_AddNumberToObject(o, "grad_bytes", (double)r->grad_bytes);
        cJSON_AddNumberToObject(o, "grad_peak_bytes", (double)r->grad_peak_bytes);
        cJSON_AddNumberToObject(o, "grad_bytes_predicted", (double)r->grad_bytes_predicted);
        cJSON_AddNumberToObject(o, "grad_stage_bytes", (double)r->grad_stage_bytes);
        cJSON_AddBoolToObject(o, "masters_sharded", r->masters_sharded);
        cJSON_AddNumberToObject(o, "master_bytes", (double)r->master_bytes);
        cJSON_AddNumberToObject(o, "master_bytes_predicted", (double)r->master_bytes_predicted);
        if (r->ranks > 1) {
            cJSON_AddNumberToObject(o, "ranks", r->ranks);
            cJSON_AddNumberToObject(o, "grad_buckets", r->grad_buckets);
            cJSON_AddBoolToObject(o, "grad_zero_copy", r->grad_zero_copy);
            add_measured(o, "comm_ms", r->comm_ms, ran);
            add_measured(o, "comm_overlap", r->comm_overlap, ran);
            add_measured(o, "first_bucket_lead_ms", r->first_bucket_lead_ms, ran);
            add_measured(o, "comm_hidden", r->comm_hidden, ran);
            cJSON_AddNumberToObject(o, "grad_syncs", (double)r->grad_syncs);
            cJSON_AddBoolToObject(o, "replicas_identical", r->replicas_identical);
        }
    }
    if (train && r->sample_device[0]) cJSON_AddStringToObject(o, "sample_device", r->sample_device);
    if (r->has_eval) cJSON_AddNumberToObject(o, "eval_loss", r->eval_loss);
    if (!train && r->eval_batch_size > 0)
        cJSON_AddNumberToObject(o, "eval_batch_size", (double)r->eval_batch_size);
    if (r->has_eval) cJSON_AddNumberToObject(o, "eval_samples", (double)r->eval_samples);
    if (r->device_mem_peak_bytes > 0) {
        cJSON_AddNumberToObject(o, "device_mem_peak_bytes", (double)r->device_mem_peak_bytes);
        if (train) cJSON_AddNumberToObject(o, "device_stream_waits", (double)r->device_stream_waits);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* What a dataset holds, as the header says it: "60000 images 28x28x1
 * (bytes), 10 classes", "1000 samples of 12 features (floats)", "4218
 * samples of 64+1 tokens (303076 tokens, vocabulary 256)". */
static void describe_data(const st_dataset *d, char *buf, size_t n) {
    if (d->kind == ST_DATA_TOKENS)
        snprintf(buf, n, "%lld samples of %lld+1 tokens (%lld tokens, vocabulary %lld)", (long long)d->n,
                 (long long)d->seq_len, (long long)st_tokens_count(d->tokens), (long long)d->vocab_size);
    else if (d->flat)
        snprintf(buf, n, "%lld samples of %lld features (%s), %lld classes", (long long)d->n, (long long)d->w,
                 d->pixels ? "bytes" : "floats", (long long)d->num_classes);
    else
        snprintf(buf, n, "%lld images %lldx%lldx%lld (height, width, channels; %s), %lld classes",
                 (long long)d->n, (long long)d->h, (long long)d->w, (long long)d->c,
                 d->pixels ? "bytes" : "floats", (long long)d->num_classes);
}

void st_run_print_header(st_session *ses, const st_run_opts *opts) {
    if (opts->quiet) return;
    fprintf(ses->out, "scaletrain: effective configuration\n");
    st_config_print(ses->cfg, ses->out);
    char train[256] = "", val[256] = "";
    if (ses->has_train) describe_data(&ses->train, train, sizeof train);
    if (ses->has_val) /* (the same shape: checked) */
        snprintf(val, sizeof val, "%lld %s%s", (long long)ses->val.n,
                 ses->val.kind == ST_DATA_IMAGES && !ses->val.flat ? "image" : "sample",
                 ses->val.n == 1 ? "" : "s");
    if (ses->has_train && ses->train.kind == ST_DATA_IMAGES) /* (a resumed checkpoint's own come later) */
        snprintf(
            train + strlen(train), sizeof train - strlen(train), ", normalised with %smean %.4g, std %.4g",
            opts->resume ? "the checkpoint's statistics where it records them (said when they differ), else "
                           "its "
                         : "",
            (double)ses->train.mean, (double)ses->train.std);
    fprintf(ses->out, "data: %s%s%s%s\n", train, train[0] && val[0] ? "; " : "", val[0] ? "validation: " : "",
            val);
    fprintf(ses->out, "model: %s, %lld parameters, %.1f MFLOP forward per sample\n", ses->cfg->model.type,
            (long long)ses->model->n_params, st_model_flops_per_sample(ses->model) / 1e6);
    if (ses->dev) fprintf(ses->out, "device: %s\n", st_device_name(ses->dev));
    char blas[256];
    if (!ses->dev && st_blas_core_note(blas, sizeof blas)) fprintf(ses->out, "blas: %s\n", blas);
    if (ses->mem_note[0]) fprintf(ses->out, "memory: %s\n", ses->mem_note);
    fflush(ses->out);
}

/* The memory this rank holds for optimizer state and gradients, measured and
 * as the formulas predict (dist.h); rank 0 prints it at the start. */
void st_run_report_memory(st_session *ses, const st_run_opts *opts, const st_dist *dd, const st_optim *o,
                          st_run_result *r) {
    const int64_t k = o->v ? 2 : 1, S = dd->sh.shard;
    snprintf(r->strategy, sizeof r->strategy, "%s", st_dist_mode_name(dd->mode));
    r->deterministic = dd->deterministic;
    r->optim_state_bytes = st_optim_state_nbytes(o);
    r->optim_offload = o->off != NULL;
    r->optim_state_bytes_predicted = k * 4 * (dd->mode == ST_DIST_DDP ? dd->sh.count : dd->sh.hi - dd->sh.lo);
    r->grad_bytes_predicted = st_dist_grad_nbytes_predicted(dd);
    r->grad_stage_bytes = 4 * dd->ddp.stage_count;
    const st_params *p = dd->p;
    r->masters_sharded = p->masters_sharded;
    r->master_bytes = st_params_master_nbytes(p);
    r->master_bytes_predicted = 4 * (p->masters_sharded ? S : p->arena_count);
    /* Staged ZeRO-2 on a model whose buckets are few (one may hold nearly
     * every gradient): the staging plus the shard can exceed the whole
     * gradients that zero1 holds. */
    const int64_t staged = 4 * (S + dd->ddp.stage_count), whole = 4 * p->arena_count;
    if (dd->ddp.stage && staged > whole && ses->rank == 0)
        st_ticker_sayf(
            "scaletrain: warning: dist.strategy zero2 holds %.4g MiB of gradients here (the shard and %.4g "
            "MiB of staging for the buckets live at once), more than the %.4g MiB of the whole gradients that "
            "zero1 holds: its gradients fall in too few buckets (or one tensor fills most of them) for the "
            "staging to be reused; dist.strategy zero1 holds less on this model (docs/distributed.md)\n",
            (double)staged / (1 << 20), 4.0 * (double)dd->ddp.stage_count / (1 << 20),
            (double)whole / (1 << 20)); /* (%.4g: a small model's 0.02 MiB, not 0.0) */
    if (opts->quiet || (dd->world == 1 && dd->mode == ST_DIST_DDP && !dd->deterministic)) return;
    const double mib = 1.0 / (1 << 20);
    fprintf(
        ses->out,
        "memory per rank (%s%s, %d rank%s, P = %lld parameters, shard S = %lld): optimizer state %.3f MiB%s "
        "(formula %lld x 4 B x %s = %.3f MiB), gradients %.3f MiB resident (formula %s = %.3f MiB), fp32 "
        "masters %.3f MiB%s (formula 4 B x %s = %.3f MiB)\n",
        r->strategy, dd->deterministic ? ", deterministic" : "", dd->world, dd->world == 1 ? "" : "s",
        (long long)dd->sh.count, (long long)S, (double)r->optim_state_bytes * mib,
        r->optim_offload ? " in host memory (optim.offload)" : "", (long long)k,
        dd->mode == ST_DIST_DDP ? "P" : "S", (double)r->optim_state_bytes_predicted * mib,
        (double)st_dist_grad_nbytes(dd) * mib,
        dd->deterministic                            ? "4 B x (N*S grads + S folded + N*S received)"
        : dd->mode == ST_DIST_ZERO2 && dd->ddp.stage ? "4 B x (S + the buckets' staging)"
        : dd->mode == ST_DIST_ZERO2                  ? "4 B x S"
                                                     : "4 B x N*S",
        (double)r->grad_bytes_predicted * mib, (double)r->master_bytes * mib, p->dev ? "" : " resident",
        p->masters_sharded ? "S" : "N*S", (double)r->master_bytes_predicted * mib);
    fflush(ses->out);
}

/* Every rank, after the last traced step (done, 1-based; the run began after
 * step start): gather the events; rank 0 writes trace.json. */
st_status st_run_write_trace(st_session *ses, const st_run_opts *opts, st_trace *tr, st_progress *prog,
                             int64_t start, int64_t done) {
    const bool mine = ses->rank == 0 && opts->save;
    /* the steps it holds: the run may have begun (resumed) or ended (or
     * stopped) inside the window; trace.json's first_step and last_step say
     * those, not the window asked for */
    const int64_t lo = tr->first > start + 1 ? tr->first : start + 1;
    int64_t hi = tr->last < done ? tr->last : done;
    const int64_t asked_lo = tr->first, asked_hi = tr->last;
    if (lo <= hi) tr->first = lo, tr->last = hi;
    /* a resumed run's trace beside the earlier part's (its profile kept, as its metrics are) */
    char kept[4400] = "", also[4500] = "";
    if (mine && start > 0) st_trace_keep_earlier(ses->cfg->train.out_dir, start, kept, sizeof kept);
    if (kept[0]) snprintf(also, sizeof also, " (the earlier one kept as %s)", kept);
    ST_TRY(st_trace_write(tr, ses->comm, ses->cfg->train.out_dir, mine));
    if (mine && lo <= hi && tr->last < hi) { /* (the event limit reached: the steps it holds whole) */
        st_progress_end(prog);
        char held[64] = "no step whole";
        if (tr->last >= lo) snprintf(held, sizeof held, "steps %lld-%lld whole", (long long)lo, (long long)tr->last);
        st_ticker_sayf("scaletrain: warning: the trace of steps %lld-%lld holds %s: a rank reached the limit of "
                       "%d events, and the rest were dropped; profile a shorter window (--profile %lld-%lld)\n",
                       (long long)lo, (long long)hi, held, ST_TRACE_MAX_EVENTS, (long long)lo,
                       (long long)(tr->last >= lo ? tr->last : lo));
        if (tr->last >= lo) hi = tr->last;
    }
    if (mine && !opts->quiet) {
        st_progress_end(prog);
        if (lo <= hi)
            fprintf(ses->out, "wrote the trace of steps %lld-%lld to %s/trace.json%s\n", (long long)lo,
                    (long long)hi, ses->cfg->train.out_dir, also);
        else
            fprintf(ses->out, "wrote %s/trace.json: no step of %lld-%lld ran\n", ses->cfg->train.out_dir,
                    (long long)asked_lo, (long long)asked_hi);
        fflush(ses->out);
    }
    return ST_OK;
}
