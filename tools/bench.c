/* `scaletrain bench [-n 1,2,4] [CONFIG] [--set key=value]... [--steps S]
 * [--warmup W] [--out DIR]`: weak scaling of a config. The config runs on
 * each rank count through `scaletrain launch` (one core per rank; more ranks
 * than cores share them, and the report says so) with the
 * same micro-batch per rank (train.micro_batch_size, or train.batch_size when
 * that is auto) and no accumulation, so the global batch grows with the
 * ranks. Throughput is the global batch over the median step time in each
 * run's metrics.jsonl (one line per step, log.every 1), over the steps after
 * the first W (warm-up: first touches, thread start, caches). The report: throughput, per-rank throughput,
 * speed-up and scaling efficiency against the smallest rank count
 * (per-rank throughput over that run's), as a table on stdout and in
 * DIR/bench.md, and as DIR/bench.json. Beside each row, the planner's
 * prediction for this machine's CPU with one core per rank (src/hw/planner.h:
 * the same config, per_node = ranks, peak from a single-threaded sgemm
 * calibration) and the measured/predicted throughput ratio; throughput and
 * efficiency against ranks, measured and predicted, as DIR/bench_*.svg
 * (tools/chart.c) and, when gnuplot is on PATH, .png, linked from bench.md. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chart.h"
#include "cli.h"
#include "core/atomic_file.h"
#include "core/blas.h"
#include "core/config_schema.h"
#include "core/stats.h"
#include "core/text.h"
#include "hw/device.h"
#include "hw/planner.h"
#include "hw/runspec.h"
#include "launch.h"
#include "train/checkpoint.h"

#define MAX_RUNS 16

typedef struct bench_run {
    int ranks;
    long long global_batch;
    double samples_per_s, tokens_per_s, step_ms_median, comm_ms;
    int measured_steps;
    double cores_per_rank; /* 1, or cores / ranks when the ranks share this node's cores */
    double pred_step_ms, pred_samples_per_s, pred_tokens_per_s; /* the planner's; 0: no prediction */
    char pred_device[48];                                        /* the device it planned for */
} bench_run;

/* Throughput over the steps after `warmup` in dir/metrics.jsonl. */
static int read_metrics(const char *dir, int warmup, long long batch, bench_run *r, char *why, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *text = st_cli_read_file(path);
    if (!text) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    double ms[4096], total_ms = 0, tokens_per_sample = 0, comm = 0;
    int count = 0;
    for (char *line = strtok(text, "\n"); line && count < 4096; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_ParseWithOpts(line, NULL, true); /* (as report_data.c) */
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step"),
                    *t = cJSON_GetObjectItemCaseSensitive(o, "step_ms"),
                    *sps = cJSON_GetObjectItemCaseSensitive(o, "samples_per_s"),
                    *tps = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s"),
                    *cm = cJSON_GetObjectItemCaseSensitive(o, "comm_ms");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(t) && step->valuedouble > warmup) {
            ms[count++] = t->valuedouble;
            total_ms += t->valuedouble;
            if (cJSON_IsNumber(cm)) comm += cm->valuedouble;
            if (cJSON_IsNumber(tps) && cJSON_IsNumber(sps) && sps->valuedouble > 0)
                tokens_per_sample = tps->valuedouble / sps->valuedouble;
        }
        cJSON_Delete(o);
    }
    free(text);
    if (count == 0 || !(total_ms > 0)) {
        snprintf(why, n, "%s: no step after the %d warm-up steps", path, warmup);
        return -1;
    }
    r->measured_steps = count;
    /* The median step: one descheduled step on a shared machine does not
     * move it as it moves the mean. */
    r->step_ms_median = st_median(ms, (size_t)count);
    r->samples_per_s = (double)batch / (r->step_ms_median / 1e3);
    r->tokens_per_s = r->samples_per_s * round(tokens_per_sample);
    r->comm_ms = comm / count;
    return 0;
}

static int parse_ranks(const char *s, int *out, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || *n >= MAX_RUNS || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            return -1;
        for (int k = 0; k < *n; k++) /* (a count twice: its runs share DIR/nN.log and DIR/nN) */
            if (out[k] == (int)v) return -1;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

/* The planner's step time and throughput for each run: this machine with
 * per_node = ranks and the config as the runs had it (global batch = ranks x
 * mb, micro-batch mb, no evaluation). The device is the one the runs train on:
 * a GPU per rank when train.device is not cpu and there are GPUs enough for
 * the ranks (the session's rule), else the CPU at one core per rank
 * (scaletrain launch), its peak from a single-thread sgemm, times the share
 * of a core each rank has when there are more ranks than cores. */
static st_status predict(st_config *cfg, long long mb, bench_run *runs, int nr, double *gflops) {
    st_plan_input in = {0};
    st_plan *p = malloc(sizeof *p);
    st_hw_info *h = malloc(sizeof *h);
    st_status s;
    if (!p || !h) {
        s = st_fail(ST_ERR_NOMEM, "out of memory planning the bench runs");
        goto fail;
    }
    ST_GOTO(st_cli_probe("bench", cfg, h));
    /* the GPUs this build can open (the runtime's count), as the runs count them: a build without
     * CUDA, or one whose runtime cannot use the driver's GPUs, trains on the CPU */
    const int usable = st_device_cuda_built() && h->n_gpus > 0 ? st_device_cuda_count(NULL, 0) : 0;
    if (usable < h->n_gpus) h->n_gpus = usable;
    openblas_set_num_threads(1);
    double gf = 0;
    ST_GOTO(st_device_calibrate_cpu(&gf, NULL));
    *gflops = gf / 1e9;
    st_hw_info nogpu = *h;
    nogpu.n_gpus = 0;
    cfg->data.val[0] = '\0';
    cfg->data.val_split = 0; /* (as the runs: bench sets both) */
    ST_GOTO(st_runspec_open(cfg, &in));
    in.has_eval = false;
    in.cores_per_rank = 1;
    for (int k = 0; k < nr; k++) {
        st_hw_config hw = {.per_node = runs[k].ranks, .nodes = 1};
        snprintf(hw.label, sizeof hw.label, "this machine");
        const bool gpu = strcmp(cfg->train.device, "cpu") != 0 && h->n_gpus >= runs[k].ranks;
        st_device_local(gpu ? h : &nogpu, gf, &hw.dev);
        if (!gpu) { /* the node's cores the ranks use; the time model gives each rank its share (1 / ranks),
                     * so one core each, or less when ranks sharing cores are time-sliced */
            const double cores_used = runs[k].ranks * runs[k].cores_per_rank;
            hw.dev.peak_fp32 *= cores_used;
            hw.dev.peak_bf16 *= cores_used;
        }
        snprintf(runs[k].pred_device, sizeof runs[k].pred_device, "%s", hw.dev.name);
        cfg->train.batch_size = mb * runs[k].ranks;
        cfg->train.micro_batch_size = mb;
        ST_GOTO(st_plan_make(&in, &hw, p));
        if (!p->ok || !(p->time.step_s > 0)) {
            s = st_fail(ST_ERR_CONFIG, "the planner has no plan for %d rank(s): %s", runs[k].ranks, p->warning);
            goto fail;
        }
        runs[k].pred_step_ms = 1e3 * p->time.step_s;
        runs[k].pred_samples_per_s = p->samples_per_s;
        runs[k].pred_tokens_per_s = p->tokens_per_s;
    }
    s = ST_OK;
fail:
    st_runspec_close(&in);
    free(p);
    free(h);
    return s;
}

/* DIR/bench_throughput and DIR/bench_efficiency: measured and predicted
 * against ranks, as .svg and (gnuplot on PATH) .png. *pngs: how many PNGs
 * were written; why says why none were. */
static st_status plots(const double *x, const double *tp, const double *ptp, const double *eff,
                       const double *peff, int nr, const char *unit, const char *out_dir, int *pngs, char *why,
                       size_t nwhy) {
    char gnuplot[PATH_MAX] = "", path[PATH_MAX + 32], ylabel[64];
    snprintf(ylabel, sizeof ylabel, "throughput (%s)", unit);
    if (!st_cli_find_on_path("gnuplot", gnuplot, sizeof gnuplot))
        snprintf(why, nwhy, "gnuplot is not on PATH (apt-get install gnuplot-nox)");
    const st_chart_series ts[2] = {{"measured", x, tp, nr}, {"predicted (planner)", x, ptp, nr}},
                          es[2] = {{"measured", x, eff, nr}, {"predicted (planner)", x, peff, nr}};
    const st_chart charts[2] = {
        {.title = "Throughput against ranks", .xlabel = "ranks", .ylabel = ylabel, .y_from_zero = true,
         .series = ts, .n_series = 2},
        {.title = "Weak-scaling efficiency against ranks", .xlabel = "ranks", .ylabel = "efficiency",
         .y_from_zero = true, .series = es, .n_series = 2}};
    const char *files[2] = {"bench_throughput", "bench_efficiency"};
    *pngs = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.svg", out_dir, files[i]);
        ST_TRY(st_chart_write_svg(&charts[i], path));
        if (why[0]) continue;
        snprintf(path, sizeof path, "%s/%s.png", out_dir, files[i]);
        if (st_chart_write_png(&charts[i], path, gnuplot) != ST_OK) { /* (optional: the report goes on) */
            snprintf(why, nwhy, "%s", st_last_error());
            st_clear_error();
            continue;
        }
        (*pngs)++;
    }
    return ST_OK;
}

/* The table (stdout and DIR/bench.md) and DIR/bench.json. */
static int report(const bench_run *runs, int nr, bool lm, const st_config *cfg, long long mb, long steps,
                  long warmup, double gflops, const char *out_dir) {
    const char *unit = lm ? "tokens/s" : "samples/s";
    const bench_run *base = &runs[0];
    for (int k = 1; k < nr; k++)
        if (runs[k].ranks < base->ranks) base = &runs[k];
    const double base_tp = lm ? base->tokens_per_s : base->samples_per_s;
    const double base_ptp = lm ? base->pred_tokens_per_s : base->pred_samples_per_s;
    char md_path[PATH_MAX], json_path[PATH_MAX], why[128] = "";
    snprintf(md_path, sizeof md_path, "%s/bench.md", out_dir);
    snprintf(json_path, sizeof json_path, "%s/bench.json", out_dir);
    /* (nr,) series for the table, the JSON and the charts */
    double x[MAX_RUNS], tp[MAX_RUNS], ptp[MAX_RUNS], eff[MAX_RUNS], peff[MAX_RUNS];
    for (int k = 0; k < nr; k++) {
        const bench_run *r = &runs[k];
        x[k] = r->ranks;
        tp[k] = lm ? r->tokens_per_s : r->samples_per_s;
        ptp[k] = lm ? r->pred_tokens_per_s : r->pred_samples_per_s;
        eff[k] = base_tp > 0 ? (tp[k] / r->ranks) / (base_tp / base->ranks) : 0;
        peff[k] = base_ptp > 0 ? (ptp[k] / r->ranks) / (base_ptp / base->ranks) : 0;
    }
    int pngs = 0;
    st_status s = plots(x, tp, ptp, eff, peff, nr, unit, out_dir, &pngs, why, sizeof why);
    if (s != ST_OK) return st_cli_error(s);
    st_cli_output md_out, js_out;
    FILE *md = st_cli_output_open(&md_out, md_path);
    if (!md) {
        fprintf(stderr, "scaletrain bench: cannot write %s: %s\n", md_path, strerror(errno));
        return ST_EXIT_FAIL;
    }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "config", cfg->path);
    cJSON_AddStringToObject(root, "model", cfg->model.type);
    cJSON_AddNumberToObject(root, "micro_batch_per_rank", (double)mb);
    cJSON_AddNumberToObject(root, "steps", (double)steps);
    cJSON_AddNumberToObject(root, "warmup_steps", (double)warmup);
    cJSON_AddStringToObject(root, "unit", unit);
    cJSON_AddStringToObject(root, "scaling",
                            "weak: the same micro-batch per rank, global batch = ranks x micro-batch");
    cJSON_AddStringToObject(root, "prediction",
                            "the planner (src/hw/planner.h) for this machine, per node = ranks, on the device "
                            "the runs train on (runs[].predicted.device)");
    cJSON_AddNumberToObject(root, "cpu_gflops_per_core", gflops);
    cJSON *plots_o = cJSON_AddObjectToObject(root, "plots");
    cJSON_AddStringToObject(plots_o, "throughput", "bench_throughput.svg");
    cJSON_AddStringToObject(plots_o, "efficiency", "bench_efficiency.svg");
    if (pngs) {
        cJSON_AddStringToObject(plots_o, "throughput_png", "bench_throughput.png");
        cJSON_AddStringToObject(plots_o, "efficiency_png", "bench_efficiency.png");
    }
    cJSON_AddItemToObject(root, "runs", arr);
    fprintf(md,
            "# scaletrain bench: %s\n\n%s model, %lld samples per rank per step (weak scaling), %ld steps, "
            "the first %ld excluded; throughput from the median step time; one core per rank (scaletrain "
            "launch).\n\n",
            cfg->path[0] ? cfg->path : "the default run", cfg->model.type, mb, steps, warmup);
    for (int pass = 0; pass < 2; pass++) {
        FILE *f = pass ? md : stdout;
        fprintf(f,
                "| ranks | global batch | %s | per rank | speed-up | efficiency | step ms (median) | comm ms "
                "| predicted %s | predicted efficiency | predicted step ms | measured/predicted |\n",
                unit, unit);
        fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int k = 0; k < nr; k++) {
            const bench_run *r = &runs[k];
            const double per = tp[k] / r->ranks, speedup = base_tp > 0 ? tp[k] / base_tp : 0;
            const double ratio = ptp[k] > 0 ? tp[k] / ptp[k] : 0;
            fprintf(f, "| %d | %lld | %.1f | %.1f | %.3f | %.3f | %.2f | %.3f | %.1f | %.3f | %.2f | %.3f |\n",
                    r->ranks, r->global_batch, tp[k], per, speedup, eff[k], r->step_ms_median, r->comm_ms, ptp[k],
                    peff[k], r->pred_step_ms, ratio);
            if (pass) continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "ranks", r->ranks);
            cJSON_AddNumberToObject(o, "global_batch", (double)r->global_batch);
            cJSON_AddNumberToObject(o, "throughput", tp[k]);
            cJSON_AddNumberToObject(o, "throughput_per_rank", per);
            cJSON_AddNumberToObject(o, "speedup", speedup);
            cJSON_AddNumberToObject(o, "efficiency", eff[k]);
            cJSON_AddNumberToObject(o, "samples_per_s", r->samples_per_s);
            if (lm) cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
            cJSON_AddNumberToObject(o, "step_ms_median", r->step_ms_median);
            cJSON_AddNumberToObject(o, "comm_ms", r->comm_ms);
            cJSON_AddNumberToObject(o, "measured_steps", r->measured_steps);
            cJSON_AddNumberToObject(o, "cores_per_rank", r->cores_per_rank);
            cJSON *pr = cJSON_AddObjectToObject(o, "predicted");
            cJSON_AddNumberToObject(pr, "throughput", ptp[k]);
            cJSON_AddNumberToObject(pr, "speedup", base_ptp > 0 ? ptp[k] / base_ptp : 0);
            cJSON_AddNumberToObject(pr, "efficiency", peff[k]);
            cJSON_AddNumberToObject(pr, "step_ms", r->pred_step_ms);
            cJSON_AddStringToObject(pr, "device", r->pred_device);
            cJSON_AddNumberToObject(pr, "samples_per_s", r->pred_samples_per_s);
            if (lm) cJSON_AddNumberToObject(pr, "tokens_per_s", r->pred_tokens_per_s);
            cJSON_AddNumberToObject(o, "measured_over_predicted", ratio);
            cJSON_AddItemToArray(arr, o);
        }
    }
    fprintf(md,
            "\nEfficiency: per-rank throughput over the %d-rank run's. Predicted: the planner "
            "(docs/planner.md) for this machine with the same config and batch, per node = ranks, on %s "
            "(the CPU: one core per rank at %.1f GFLOP/s, a single-thread sgemm). The runs' logs and "
            "metrics.jsonl are in %s/n<ranks>.log and n<ranks>/.\n\n![throughput](bench_throughput.svg)\n\n"
            "![efficiency](bench_efficiency.svg)\n",
            base->ranks, base->pred_device, gflops, out_dir);
    /* Runs on different devices (more ranks than the node's usable GPUs train on the CPU): their
     * speed-up and efficiency compare the devices, not the scaling (they were given as scaling) */
    char mixed[1024] = "";
    size_t at = 0;
    for (int k = 0; k < nr; k++)
        if (strcmp(runs[k].pred_device, base->pred_device) != 0)
            st_appendf(mixed, sizeof mixed, &at, "%s%d rank%s on %s", at ? ", " : "", runs[k].ranks,
                       runs[k].ranks == 1 ? "" : "s", runs[k].pred_device);
    if (mixed[0]) {
        char says[1536];
        snprintf(says, sizeof says,
                 "the %d-rank run trained on %s, and %s: the speed-up and efficiency against it compare "
                 "devices, not scaling; keep -n within one device (on GPUs: at most as many ranks as "
                 "the node's GPUs)",
                 base->ranks, base->pred_device, mixed);
        fprintf(stderr, "scaletrain bench: warning: %s\n", says);
        fprintf(md, "\n**Warning:** %s.\n", says);
    }
    for (int k = 0; k < nr; k++)
        if (runs[k].cores_per_rank < 1)
            fprintf(md,
                    "\n%d ranks had %.2g of a core each: more ranks than this machine's cores share them "
                    "(scaletrain launch does not bind them), and the prediction counts that share.\n",
                    runs[k].ranks, runs[k].cores_per_rank);
    if (pngs) fprintf(md, "\nPNG: [throughput](bench_throughput.png), [efficiency](bench_efficiency.png)\n");
    /* (a file cut short, a full disk's, is removed: a table or JSON that parses but lacks rows
     * reads as the whole result) */
    if (st_cli_output_close(&md_out, md) != ST_OK) {
        cJSON_Delete(root);
        return st_cli_error(ST_ERR_IO);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *js = text ? st_cli_output_open(&js_out, json_path) : NULL;
    if (!js) {
        fprintf(stderr, "scaletrain bench: cannot write %s: %s\n", json_path,
                strerror(text ? errno : ENOMEM));
        free(text);
        return ST_EXIT_FAIL;
    }
    fputs(text, js), fputc('\n', js);
    free(text);
    if (st_cli_output_close(&js_out, js) != ST_OK) return st_cli_error(ST_ERR_IO);
    printf("report: %s, %s, plots %s/bench_{throughput,efficiency}.%s\n", md_path, json_path, out_dir,
           pngs ? "{svg,png}" : "svg");
    if (why[0]) printf("report: PNGs skipped: %s\n", why);
    return ST_EXIT_OK;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: scaletrain bench [-n 1,2,4] [CONFIG] [--set key=value]... [--steps S] [--warmup W] "
            "[--out DIR]\n"
            "  runs CONFIG on each rank count (scaletrain launch), the same micro-batch per rank, S steps\n"
            "  (default 30), and reports throughput, per-rank throughput, speed-up and weak-scaling\n"
            "  efficiency over the steps after the first W (default 5), beside the planner's prediction\n"
            "  for this machine; writes DIR/bench.md, DIR/bench.json and the plots\n"
            "  DIR/bench_{throughput,efficiency}.svg (.png with gnuplot) (default DIR: runs/bench).\n");
}

int st_cmd_bench(int argc, char **argv) {
    int ranks[MAX_RUNS] = {1, 2}, nr = 2;
    long steps = 30, warmup = 5;
    bool warmup_given = false;
    const char *out_dir = "runs/bench";
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest) return st_cli_error(st_fail(ST_ERR_NOMEM, "bench: out of memory"));
    static const char *const once[] = {"-n", "--steps", "--warmup", "--out", NULL}, *const sets[] = {"--set",
                                                                                                     NULL};
    const int twice = st_cli_once("bench", argc, argv, once, sets);
    if (twice >= 0) {
        free(rest);
        return twice;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const bool takes =
            !strcmp(a, "-n") || !strcmp(a, "--steps") || !strcmp(a, "--warmup") || !strcmp(a, "--out");
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "scaletrain bench: %s needs a value\n", a);
            free(rest);
            return ST_EXIT_USAGE;
        }
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(rest);
            return ST_EXIT_OK;
        } else if (!strcmp(a, "-n")) {
            if (parse_ranks(argv[++i], ranks, &nr) != 0) {
                fprintf(
                    stderr,
                    "scaletrain bench: -n %s: want rank counts like 1,2,4, each once, at most %d counts\n",
                    argv[i], MAX_RUNS);
                free(rest);
                return ST_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--steps") || !strcmp(a, "--warmup")) {
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 0 || v > 4000) {
                fprintf(stderr, "scaletrain bench: %s %s: want a number of steps (0..4000)\n", a, argv[i]);
                free(rest);
                return ST_EXIT_USAGE;
            }
            if (!strcmp(a, "--steps"))
                steps = v;
            else
                warmup = v, warmup_given = true;
        } else if (!strcmp(a, "--out")) {
            out_dir = argv[++i];
        } else {
            rest[nrest++] = argv[i];
        }
    }
    if (steps <= warmup) {
        fprintf(stderr, "scaletrain bench: --steps %ld must be more than --warmup %ld%s\n", steps, warmup,
                warmup_given ? "" : " (its default: the first steps are not timed)");
        free(rest);
        return ST_EXIT_USAGE;
    }
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("bench", nrest, rest, &cfg, &opts);
    if (rc >= 0) {
        free(rest);
        return rc;
    }
    const long long mb = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : cfg.train.batch_size;
    st_status s = st_mkdirs(out_dir);
    if (s != ST_OK) {
        free(rest);
        return st_cli_error(st_fail_context(s, "--out: "));
    }
    char self[PATH_MAX];
    st_cli_self_path(self, sizeof self);
    bench_run runs[MAX_RUNS] = {0};
    bool lm = !strcmp(cfg.data.type, "tokens");
    printf("scaletrain bench: %s (%s), %lld samples per rank per step, %ld steps (%ld warm-up) per run\n",
           cfg.path[0] ? cfg.path : "the default run", cfg.model.type, mb, steps, warmup);
    fflush(stdout);
    const int cores = st_launch_local_cores();
    /* (a stop is passed on to the job, which saves a checkpoint and ends; the runs that finished before it
     * are reported) */
    atomic_int *stop = st_cli_catch_stops();
    int done = 0, stopped_ranks = 0;
    for (int k = 0; k < nr; k++) {
        char np[16], sb[64], smb[64], sst[64], sout[4 * PATH_MAX + 32], dir[PATH_MAX], log[PATH_MAX + 8],
            qdir[4 * PATH_MAX];
        runs[k].cores_per_rank = ranks[k] > cores ? (double)cores / ranks[k] : 1.0;
        if (ranks[k] > cores) {
            printf("scaletrain bench: %d ranks on %d core%s: the ranks share the cores (%.2g of a core each); "
                   "the prediction counts that\n",
                   ranks[k], cores, cores == 1 ? "" : "s", runs[k].cores_per_rank);
            fflush(stdout);
        }
        snprintf(np, sizeof np, "%d", ranks[k]);
        snprintf(sb, sizeof sb, "train.batch_size=%lld", mb * ranks[k]);
        snprintf(smb, sizeof smb, "train.micro_batch_size=%lld", mb);
        snprintf(sst, sizeof sst, "train.steps=%ld", steps);
        snprintf(dir, sizeof dir, "%s/n%d", out_dir, ranks[k]);
        st_cfg_quote(dir, qdir, sizeof qdir); /* (as YAML: a '#' or ': ' in it is the path's) */
        snprintf(sout, sizeof sout, "train.out_dir=%s", qdir);
        st_ckpt_remove_all(dir); /* a throwaway run: an earlier bench's (even one interrupted) is not resumed */
        snprintf(log, sizeof log, "%s.log", dir);
        char **av = calloc((size_t)nrest + 32, sizeof *av);
        if (!av) break;
        int j = 0;
        /* weak scaling at a core per rank (launch's default would give one rank every core) */
        av[j++] = self, av[j++] = "launch", av[j++] = "-n", av[j++] = np, av[j++] = "--cores-per-rank";
        av[j++] = "1", av[j++] = "train";
        for (int i = 0; i < nrest; i++)
            av[j++] = rest[i];
        char *const fixed[] = {
            "--set",   sb,
            "--set",   smb,
            "--set",   sst,
            "--set",   sout,
            "--set",   "log.every=1",
            "--set",   "log.progress=off",
            "--set",   "data.val=",
            "--set",   "data.val_split=0", /* (a split would still be evaluated at the end) */
            "--set",   "train.eval_every=0",
            "--set",   "train.checkpoint_every=0",
            "--quiet", "--json"};
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
            av[j++] = fixed[i];
        av[j] = NULL;
        rc = st_cli_spawn_stoppable(av, log, log, 3600, stop);
        free(av);
        char why[PATH_MAX + 128] = "";
        runs[k].ranks = ranks[k];
        runs[k].global_batch = mb * ranks[k];
        if (atomic_load(stop)) {
            stopped_ranks = ranks[k];
            break;
        }
        if (rc != 0) {
            char *t = st_cli_read_file(log);
            fprintf(stderr, "scaletrain bench: the %d-rank run exited %d (log %s)%s\n", ranks[k], rc, log,
                    !t || !t[0] ? ", which is empty (it could not be written? its disk full?)" : ":");
            /* its error lines (mpirun's banner after them would fill a tail), else the tail */
            int said = 0;
            for (char *line = t, *next; line && *line && said < 8; line = next) {
                next = strchr(line, '\n');
                const int len = next ? (int)(next - line) : (int)strlen(line);
                if (next) next++;
                if (memmem(line, (size_t)len, "error", 5)) fprintf(stderr, "%.*s\n", len, line), said++;
            }
            const char *tail = t && strlen(t) > 600 ? t + strlen(t) - 600 : t;
            if (!said && tail && tail[0]) fprintf(stderr, "%s\n", tail);
            free(t);
            free(rest);
            return ST_EXIT_FAIL;
        }
        if (read_metrics(dir, (int)warmup, mb * ranks[k], &runs[k], why, sizeof why) != 0) {
            fprintf(stderr, "scaletrain bench: the %d-rank run: %s\n", ranks[k], why);
            free(rest);
            return ST_EXIT_FAIL;
        }
        lm = runs[k].tokens_per_s > 0;
        done = k + 1;
    }
    free(rest);
    const int sig = stopped_ranks ? atomic_load(stop) : 0; /* (one after the last run: the report is whole) */
    char sig_name[16];
    if (sig)
        fprintf(stderr,
                "scaletrain bench: stopped by %s during the %d-rank run (its job stopped too, its "
                "checkpoint in %s/n%d); %s\n",
                st_signal_name(sig, sig_name), stopped_ranks, out_dir, stopped_ranks,
                done ? "the report covers the runs that finished before it"
                     : "no run had finished: no report");
    if (sig && !done) return 128 + sig;
    nr = done;
    double gflops = 0;
    /* (the measurements stand without it: a prediction that fails is said, its columns 0) */
    if (predict(&cfg, mb, runs, nr, &gflops) != ST_OK) {
        fprintf(stderr, "scaletrain bench: warning: no prediction (its columns are 0): %s\n",
                st_last_error());
        st_clear_error();
        for (int k = 0; k < nr; k++)
            runs[k].pred_samples_per_s = runs[k].pred_tokens_per_s = runs[k].pred_step_ms = 0;
    }
    const int code = report(runs, nr, lm, &cfg, mb, steps, warmup, gflops, out_dir);
    return sig ? 128 + sig : code;
}
