/* `scaletrain plan [CONFIG] [--set k=v]... [--hw LIST] [--nodes N] [--json]
 * [--probe] [--efficiency E]`: what a run would choose and cost on each
 * hardware configuration, before renting it (src/hw/planner.h). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "core/blas.h"
#include "hw/probe.h"
#include "hw/runspec.h"

#define GIB (1024.0 * 1024 * 1024)

static void usage(FILE *f) {
    fprintf(f,
            "usage: scaletrain plan [CONFIG.yaml] [--set key=value]... [--hw LIST] [--nodes N]\n"
            "                      [--efficiency E] [--json] [--probe]\n"
            "  --hw LIST      comma-separated, e.g. 4xL40S,8xA100-40GB,8xA100-80GB,8xH100,cpu\n"
            "                 (N x DEVICE, or NODES x N x DEVICE); default: local (this machine)\n"
            "                 devices: %s\n"
            "  --nodes N      nodes for every entry that does not name them\n"
            "  --efficiency E fraction of the peak matrix rate to assume (default per device)\n"
            "  --probe        print what the hardware probe found (with --json: as JSON)\n",
            st_device_names());
}

static cJSON *probe_json(const st_hw_info *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cpu", h->cpu_model);
    cJSON_AddNumberToObject(o, "cores", h->cores);
    cJSON_AddNumberToObject(o, "threads", h->threads);
    cJSON_AddNumberToObject(o, "allowed", h->allowed);
    cJSON_AddNumberToObject(o, "mem_total", (double)h->mem_total);
    cJSON_AddNumberToObject(o, "mem_available", (double)h->mem_avail);
    if (h->mem_limit_by[0]) {
        cJSON_AddNumberToObject(o, "host_mem_total", (double)h->host_mem_total);
        cJSON_AddStringToObject(o, "mem_limited_by", h->mem_limit_by);
    }
    cJSON *g = cJSON_AddArrayToObject(o, "gpus");
    for (int i = 0; i < h->n_gpus; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "name", h->gpu[i].name);
        cJSON_AddNumberToObject(d, "mem_total", (double)h->gpu[i].mem_total);
        cJSON_AddNumberToObject(d, "mem_free", (double)h->gpu[i].mem_free);
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", h->gpu[i].cc_major, h->gpu[i].cc_minor);
        cJSON_AddStringToObject(d, "compute_capability", cc);
        cJSON_AddNumberToObject(d, "sms", h->gpu[i].sms);
        cJSON_AddNumberToObject(d, "nvlinks", h->gpu[i].nvlinks);
        cJSON_AddNumberToObject(d, "processes", h->gpu[i].procs);
        cJSON_AddItemToArray(g, d);
    }
    if (!h->n_gpus) cJSON_AddStringToObject(o, "no_gpu_reason", h->cuda_why);
    cJSON_AddBoolToObject(o, "nvml", h->nvml);
    cJSON_AddBoolToObject(o, "mpi_built", h->mpi_built);
    cJSON_AddStringToObject(o, "launcher", h->launcher);
    cJSON_AddBoolToObject(o, "nccl", h->nccl);
    if (h->nccl)
        cJSON_AddNumberToObject(o, "nccl_version", h->nccl_version);
    else
        cJSON_AddStringToObject(o, "nccl_reason", h->nccl_why);
    return o;
}

/* A gpt's kernel choices, as its run takes them: model.fused_head from the
 * training graph at the planned micro-batch (the planner's memory model
 * built it), model.attention_kernel by st_model_attention_cudnn on a GPU
 * (the node's cuDNN not known here). Given values are kept. */
static void kernels_json(cJSON *o, cJSON *why, const st_plan *p, const st_plan_input *in) {
    const st_config *c = in->cfg;
    if (in->seq_len <= 0 || strcmp(c->model.type, "gpt") != 0) return;
    char w[256];
    cJSON_AddBoolToObject(o, "fused_head", p->mem.head_fused);
    if (strcmp(c->model.fused_head, "auto") == 0) {
        snprintf(w, sizeof w,
                 "%s: the logits (%lld x %lld x %lld) take %s memory than the fused head's chunks",
                 p->mem.head_fused ? "on" : "off", (long long)p->micro, (long long)in->seq_len,
                 (long long)c->model.vocab_size, p->mem.head_fused ? "more" : "less");
        cJSON_AddStringToObject(why, "fused_head", w);
    }
    const char *kernel = c->model.attention_kernel;
    if (strcmp(kernel, "auto") == 0 && p->hw.dev.gpu) {
        kernel =
            st_model_attention_cudnn(p->precision, p->hw.dev.cc_major, p->hw.dev.cc_minor, NULL, w, sizeof w)
                ? "cudnn"
                : "flash";
        cJSON_AddStringToObject(why, "attention_kernel", w);
    } else if (strcmp(kernel, "auto") == 0) {
        /* (left auto, as the run prints it) */
        cJSON_AddStringToObject(why, "attention_kernel", ST_ATTENTION_CPU_WHY);
    }
    cJSON_AddStringToObject(o, "attention_kernel", kernel);
}

static cJSON *plan_json(const st_plan *p, const st_plan_input *in) {
    cJSON *o = cJSON_CreateObject();
    char buf[32];
    cJSON_AddStringToObject(o, "hw", p->hw.label);
    cJSON_AddStringToObject(o, "device", p->hw.dev.name);
    cJSON_AddNumberToObject(o, "nodes", p->hw.nodes);
    cJSON_AddNumberToObject(o, "ranks", p->ranks);
    cJSON_AddBoolToObject(o, "ok", p->ok);
    if (p->warning[0]) cJSON_AddStringToObject(o, "warning", p->warning);
    if (p->fit_hint[0]) cJSON_AddStringToObject(o, "fit_hint", p->fit_hint);
    if (p->micro_hint[0]) cJSON_AddStringToObject(o, "micro_hint", p->micro_hint);
    if (!p->ok) return o;
    cJSON_AddNumberToObject(o, "micro_batch_size", (double)p->micro);
    cJSON_AddNumberToObject(o, "accumulation", (double)p->accum);
    cJSON_AddStringToObject(o, "strategy", st_plan_strategy_label(p, buf, sizeof buf));
    cJSON_AddStringToObject(o, "precision", p->precision);
    cJSON_AddStringToObject(o, "activation_checkpointing", st_ckpt_name(p->checkpointing));
    cJSON_AddBoolToObject(o, "fused_gelu", p->fused_gelu);
    cJSON *why = cJSON_CreateObject(); /* (added last) */
    kernels_json(o, why, p, in);
    cJSON *m = cJSON_AddObjectToObject(o, "memory");
    const st_mem *e = &p->mem;
    const char *names[] = {"params", "grads", "optim",  "acts",      "act_grads", "ints",
                           "work",   "eval",  "loader", "buckets",   "data",      "backend",
                           "total",  "host",  "pinned", "ckpt_copy", "setup"};
    const int64_t vals[] = {e->params, e->grads, e->optim,  e->acts,      e->act_grads, e->ints,
                            e->work,   e->eval,  e->loader, e->buckets,   e->data,      e->backend,
                            e->total,  e->host,  e->pinned, e->ckpt_copy, e->setup};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        cJSON_AddNumberToObject(m, names[i], (double)vals[i]);
    cJSON_AddNumberToObject(m, "per_sample", e->act_per_sample);
    cJSON_AddNumberToObject(m, "limit", (double)p->mem_limit);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    cJSON *t = cJSON_AddObjectToObject(o, "time");
    cJSON_AddNumberToObject(t, "step_s", p->time.step_s);
    cJSON_AddNumberToObject(t, "compute_s", p->time.compute_s);
    cJSON_AddNumberToObject(t, "comm_s", p->time.comm_s);
    cJSON_AddNumberToObject(t, "exposed_comm_s", p->time.exposed_s);
    cJSON_AddNumberToObject(t, "optim_s", p->time.optim_s);
    cJSON_AddNumberToObject(t, "flops_per_step_per_rank", p->time.flops_per_step);
    cJSON_AddNumberToObject(o, "samples_per_s", p->samples_per_s);
    if (p->tokens_per_s > 0) cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
    cJSON_AddNumberToObject(o, "scaling_efficiency", p->scaling);
    cJSON_AddItemToObject(o, "why", why);
    if (p->micro_why[0]) cJSON_AddStringToObject(why, "micro_batch_size", p->micro_why);
    if (p->precision_why[0]) cJSON_AddStringToObject(why, "precision", p->precision_why);
    if (p->strategy_why[0]) cJSON_AddStringToObject(why, "strategy", p->strategy_why);
    if (p->checkpointing_why[0])
        cJSON_AddStringToObject(why, "activation_checkpointing", p->checkpointing_why);
    if (p->fused_gelu_why[0]) cJSON_AddStringToObject(why, "fused_gelu", p->fused_gelu_why);
    return o;
}

static void print_table(FILE *f, const st_plan *p, int n, const st_plan_input *in) {
    const bool lm = in->seq_len > 0;
    fprintf(f, "%-16s %5s %6s %5s %-14s %-5s %-22s %10s %12s %7s\n", "hardware", "ranks", "micro", "accum",
            "strategy", "prec", "memory/device (of)", "step ms", lm ? "tokens/s" : "samples/s", "scaling");
    for (int i = 0; i < n; i++) {
        const st_plan *q = &p[i];
        if (!q->ok) {
            fprintf(f, "%-16s %5d  -- %s\n", q->hw.label, q->ranks, q->warning);
            continue;
        }
        char strat[32], label[48], mem[40];
        snprintf(label, sizeof label, "%s%s", st_plan_strategy_label(q, strat, sizeof strat),
                 q->checkpointing == ST_CKPT_BLOCKS      ? "+ckpt"
                 : q->checkpointing == ST_CKPT_SELECTIVE ? "+sel"
                                                         : ""); /* activation checkpointing */
        snprintf(mem, sizeof mem, "%.2f GiB (%.1f)", (double)q->mem.total / GIB, (double)q->mem_limit / GIB);
        fprintf(f, "%-16s %5d %6lld %5lld %-14s %-5s %-22s %10.1f %12.0f %6.0f%%%s%s\n", q->hw.label,
                q->ranks, (long long)q->micro, (long long)q->accum, label, q->precision, mem,
                1e3 * q->time.step_s, lm ? q->tokens_per_s : q->samples_per_s, 100 * q->scaling,
                q->warning[0] ? "  ! " : "", q->warning);
        if (q->fit_hint[0]) fprintf(f, "%-16s %5s    %s\n", "", "", q->fit_hint);
        /* (training's memory is what the plan fits; the set-up's peak, above it on the CPU with ZeRO
         * over several ranks (a GPU makes only its shards), is said where it does not fit: the run
         * stops there, out of memory) */
        if (q->mem.setup > q->mem_limit && q->mem.setup > q->mem.total)
            fprintf(
                f,
                "%-16s %5s    ! its set-up needs %.2f GiB per device, past the %.2f usable: each rank holds "
                "the whole fp32 weights and gradients (and their 16-bit copy) before keeping its shards, "
                "and runs out of memory there; a smaller model, or %s with more memory\n",
                "", "", (double)q->mem.setup / GIB, (double)q->mem_limit / GIB,
                q->hw.dev.gpu ? "GPUs" : "nodes");
        if (q->micro_hint[0]) fprintf(f, "%-16s %5s    %s\n", "", "", q->micro_hint);
    }
}

int st_cmd_plan(int argc, char **argv) {
    const char *hw_list = "local";
    int nodes = 0;
    bool json = false, probe = false;
    double eff = 0;
    /* our own options out of the way; the rest is CONFIG and --set */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest) return st_cli_error(st_fail(ST_ERR_NOMEM, "plan: out of memory"));
    static const char *const once[] = {"--hw", "--nodes", "--efficiency", NULL}, *const sets[] = {"--set",
                                                                                                  NULL};
    const int twice = st_cli_once("plan", argc, argv, once, sets);
    if (twice >= 0) {
        free(rest);
        return twice;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            free(rest);
            return ST_EXIT_OK;
        }
        if ((strcmp(a, "--hw") == 0 || strcmp(a, "--nodes") == 0 || strcmp(a, "--efficiency") == 0) &&
            i + 1 >= argc) {
            fprintf(stderr, "scaletrain plan: %s needs a value\n", a);
            free(rest);
            return ST_EXIT_USAGE;
        }
        char *end = NULL;
        if (strcmp(a, "--hw") == 0) {
            hw_list = argv[++i];
        } else if (strcmp(a, "--nodes") == 0) {
            errno = 0;
            const long v = strtol(argv[++i], &end, 10);
            nodes = *argv[i] && !*end && !errno && v >= 1 && v <= 100000 ? (int)v : -1;
        } else if (strcmp(a, "--efficiency") == 0) {
            eff = strtod(argv[++i], &end);
            if (!*argv[i] || *end || !(eff > 0)) eff = -1; /* (also NaN) */
        } else if (strcmp(a, "--probe") == 0)
            probe = true;
        else if (strcmp(a, "--json") == 0)
            json = true;
        else
            rest[nrest++] = argv[i];
    }
    if ((nodes < 0 || nodes > 100000) || eff < 0 || eff > 1) { /* (named: which of the two was wrong) */
        fprintf(stderr, "scaletrain plan: %s\n",
                nodes < 0 || nodes > 100000 ? "--nodes takes a whole number from 1 to 100000"
                                            : "--efficiency takes a number in (0, 1]");
        free(rest);
        return ST_EXIT_USAGE;
    }
    st_config cfg;
    st_run_opts ro = {0};
    bool hw_usage = false; /* the failure is --hw's value (exit 2) */
    int rc = st_cli_run_args("plan", nrest, rest, &cfg, &ro);
    free(rest);
    if (rc >= 0) return rc;
    st_hw_info *h = malloc(sizeof *h);
    st_plan *plans = NULL;
    st_plan_input in = {0};
    cJSON *out = NULL;
    st_status s;
    if (!h) return st_cli_error(st_fail(ST_ERR_NOMEM, "plan: out of memory"));
    ST_GOTO(st_cli_probe("plan", &cfg, h));
    if (probe && !json) {
        st_hw_print(h, stdout);
        fputc('\n', stdout);
    }
    /* A GPU the driver shows (the probe) and this build cannot use (the
     * runtime's count: no cuBLASLt, a runtime newer than the driver): a run
     * trains on the CPU, so "local" is planned there, saying why (check
     * fails on it). */
    char unusable[640] = "";
    if (h->n_gpus > 0 && !strcmp(cfg.train.device, "cpu")) { /* (as the run: it leaves the GPUs alone) */
        snprintf(h->cuda_why, sizeof h->cuda_why, "train.device cpu: the GPUs are left alone");
        snprintf(unusable, sizeof unusable, "%s", h->cuda_why);
        h->n_gpus = 0;
    } else if (h->n_gpus > 0 && st_device_cuda_built()) {
        char why[512];
        const int gpus = st_device_cuda_count(why, sizeof why);
        if (st_cli_gpus_unusable(h, gpus, why, unusable, sizeof unusable)) {
            snprintf(h->cuda_why, sizeof h->cuda_why, "%s", unusable);
            h->n_gpus = 0;
        }
    }
    st_hw_device local, cpu;
    double gf = 0;
    const bool need_cpu =
        strcasestr(hw_list, "local") || strcasestr(hw_list, "cpu"); /* (names in any case) */
    /* log.peak_gflops, when set, is the CPU's rate: the planner's times
     * then repeat from run to run, where a shared machine's measured rate
     * moves by a fifth between runs seconds apart (docs/planner.md). */
    const bool pinned = cfg.log.peak_gflops > 0;
    /* The run's threads, as the run sets them: train.threads, else the CPUs
     * this process may use (its quota counted); measured and planned with
     * those (the rate of every core was taken for a run of 1 thread) */
    const int threads = cfg.train.threads != ST_AUTO && cfg.train.threads > 0 ? (int)cfg.train.threads
                                                                               : (h->allowed > 0 ? h->allowed : 1);
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    if (need_cpu && pinned) gf = cfg.log.peak_gflops * 1e9;
    int cal_n = 0;
    if (need_cpu && !pinned) ST_GOTO(st_device_calibrate_cpu(&gf, &cal_n));
    st_hw_info nogpu = *h;
    nogpu.n_gpus = 0;
    st_device_local(h, gf, &local);
    st_device_local(&nogpu, gf, &cpu);
    ST_GOTO(st_runspec_open(&cfg, &in));
    in.efficiency = eff;
    in.cores_per_rank = threads;
    int n = 1;
    for (const char *c = hw_list; *c; c++)
        n += *c == ',';
    plans = calloc((size_t)n, sizeof *plans);
    if (!plans) {
        s = st_fail(ST_ERR_NOMEM, "plan: out of host memory for %d plans", n);
        goto fail;
    }
    char item[64];
    const char *c = hw_list;
    for (int i = 0; i < n; i++) {
        while (*c == ' ')
            c++;
        size_t len = strcspn(c, ",");
        snprintf(item, sizeof item, "%.*s", (int)len, c);
        c += len + (c[len] == ',');
        for (size_t e = strlen(item); e > 0 && item[e - 1] == ' ';)
            item[--e] = '\0';
        if (!item[0]) { /* (a stray comma: it was "unknown hardware ''") */
            hw_usage = true;
            s = st_fail(
                ST_ERR_CONFIG,
                "--hw %s: entry %d of %d is empty; give N x NAME entries split by single commas (e.g. "
                "8xH100,4xL40S)",
                hw_list, i + 1, n);
            goto fail;
        }
        st_hw_config hw;
        hw_usage = true; /* (--hw's value: a usage error, as --nodes' is) */
        ST_GOTO(st_hw_config_parse(item, &local, &cpu, &hw));
        hw_usage = false;
        if (strcasecmp(item, "local") == 0 && h->n_gpus > 1) hw.per_node = h->n_gpus;
        /* --nodes for an entry that names none, said in its label ("8xH100" read as one node beside
         * "2x8xH100"; a bare device, one a node, "2x1xH100": "2xH100" is two on one node) */
        if (nodes > 0 && !hw.nodes_given) {
            hw.nodes = nodes;
            if (nodes > 1) {
                char l[sizeof hw.label];
                const bool per_given =
                    hw.label[strspn(hw.label, "0123456789")] == 'x' && isdigit(hw.label[0]);
                if (per_given)
                    snprintf(l, sizeof l, "%dx%s", nodes, hw.label);
                else
                    snprintf(l, sizeof l, "%dx%dx%s", nodes, hw.per_node, hw.label);
                snprintf(hw.label, sizeof hw.label, "%s", l);
            }
        }
        ST_GOTO(st_plan_make(&in, &hw, &plans[i]));
    }
    st_model_graph mg;
    ST_GOTO(st_model_graph_layout(in.model, 1, &mg));
    const st_cost cost = st_graph_cost(&mg.g);
    st_model_graph_free(&mg);
    if (json) {
        out = cJSON_CreateObject();
        if (probe) cJSON_AddItemToObject(out, "probe", probe_json(h));
        cJSON *m = cJSON_AddObjectToObject(out, "model");
        cJSON_AddStringToObject(m, "type", cfg.model.type);
        cJSON_AddNumberToObject(m, "params", (double)in.model->params.count);
        /* the count train's GFLOP/s and mfu, and bench, use: 3 x forward, a gpt's attention full T x T
         * (PaLM's model FLOPs); the two below are what the kernels run, which the time model charges */
        cJSON_AddNumberToObject(m, "model_flops_per_sample", 3.0 * st_model_flops_per_sample(in.model));
        cJSON_AddNumberToObject(m, "fwd_flops_per_sample", cost.fwd_flops);
        cJSON_AddNumberToObject(m, "bwd_flops_per_sample", cost.bwd_flops);
        /* what the CPU kernels run (Winograd convolutions), which the CPU's step time is charged */
        cJSON_AddNumberToObject(m, "cpu_kernel_flops_per_sample", cost.cpu.fwd_flops + cost.cpu.bwd_flops);
        if (in.seq_len) cJSON_AddNumberToObject(m, "tokens_per_sample", (double)in.seq_len);
        cJSON_AddNumberToObject(out, "batch_size", (double)cfg.train.batch_size);
        if (gf > 0) cJSON_AddNumberToObject(out, pinned ? "cpu_gflops_set" : "cpu_gflops_measured", gf / 1e9);
        cJSON *arr = cJSON_AddArrayToObject(out, "plans");
        for (int i = 0; i < n; i++)
            cJSON_AddItemToArray(arr, plan_json(&plans[i], &in));
        char *txt = cJSON_Print(out);
        if (txt) printf("%s\n", txt);
        free(txt);
    } else {
        printf("model: %s, %lld parameters, %.3g GFLOP per sample (forward %.3g + backward %.3g)\n",
               cfg.model.type, (long long)in.model->params.count, (cost.fwd_flops + cost.bwd_flops) / 1e9,
               cost.fwd_flops / 1e9, cost.bwd_flops / 1e9);
        const double kf = cost.cpu.fwd_flops + cost.cpu.bwd_flops, mf = cost.fwd_flops + cost.bwd_flops;
        if (kf < 0.999 * mf)
            printf("       on the CPU our kernels run %.3g GFLOP per sample instead (Winograd convolutions), "
                   "which the CPU's step time counts\n",
                   kf / 1e9);
        printf("batch: %lld samples per step%s", (long long)cfg.train.batch_size, in.seq_len ? "" : "\n");
        if (in.seq_len) printf(" of %lld tokens\n", (long long)in.seq_len);
        if (gf > 0 && pinned) printf("cpu: %.1f GFLOP/s from log.peak_gflops (not measured)\n", gf / 1e9);
        if (gf > 0 && !pinned)
            printf("cpu: %.1f GFLOP/s measured on %d thread%s (train.threads; fastest %d^3 sgemm; --set "
                   "log.peak_gflops=G fixes it)\n",
                   gf / 1e9, threads, threads == 1 ? "" : "s", cal_n);
        char blas[256];
        if (gf > 0 && !pinned && st_blas_core_note(blas, sizeof blas)) printf("blas: %s\n", blas);
        char note[320];
        if (need_cpu && st_hw_mem_note(h, note, sizeof note)) printf("memory: %s\n", note);
        if (unusable[0] && strstr(hw_list, "local"))
            printf("cuda: %s; local is planned on the CPU\n", unusable);
        else if (!strncmp(cfg.train.device, "cuda", 4) && h->n_gpus == 0 && strstr(hw_list, "local"))
            printf("cuda: train.device %s names a GPU and this machine has none: a run here refuses to start "
                   "(local is planned on the CPU, as train.device: cpu or auto would run)\n",
                   cfg.train.device);
        printf("\n");
        print_table(stdout, plans, n, &in);
    }
    s = ST_OK;
fail:
    cJSON_Delete(out);
    st_runspec_close(&in);
    free(plans);
    free(h);
    if (s != ST_OK && hw_usage) {
        (void)st_cli_error(s);
        return ST_EXIT_USAGE;
    }
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}
