/* `scaletrain report RUN_DIR [--out DIR] [--no-png]`: a run's curves and a
 * one-page summary from RUN_DIR/metrics.jsonl. Writes loss, throughput,
 * memory, learning-rate and gradient-norm charts (and accuracy when the run
 * evaluated a classifier) as SVG (tools/chart.c) and, when gnuplot is on
 * PATH, PNG, and report.html (tools/report_html.c) with the summary, the
 * effective config of the newest checkpoint and the charts. Default DIR:
 * RUN_DIR/report. Not a live monitor: it reads what the run has written. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "chart.h"
#include "cli.h"
#include "core/atomic_file.h"
#include "core/text.h"
#include "report.h"
#include "train/checkpoint.h"

#define MAX_SERIES 4

typedef struct chart_spec {
    const char *file; /* basename without extension */
    st_chart chart;
    st_chart_series series[MAX_SERIES];
} chart_spec;

static void usage(FILE *f) {
    fprintf(f, "usage: scaletrain report RUN_DIR [--out DIR] [--no-png]\n"
               "  reads RUN_DIR/metrics.jsonl (a run's train.out_dir) and writes into DIR (default\n"
               "  RUN_DIR/report) loss, throughput, memory, lr and grad_norm charts (accuracy too when\n"
               "  the run evaluated a classifier) as .svg and, when gnuplot is installed, .png, and\n"
               "  report.html: the run's summary, its effective config and the charts.\n");
}

static st_chart_series series(const char *name, const double *x, const double *y, int n) {
    return (st_chart_series){name, x, y, n};
}

/* Log y when the series' values span more than a factor of 30 and stay
 * positive (a loss falling by decades; 200 MiB of RSS beside 0.4 MiB of
 * optimizer state). */
static bool wide_positive(const st_chart_series *ser, int n_series) {
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < ser[k].n; i++) {
            double v = ser[k].y[i];
            if (!isfinite(v)) continue;
            if (v <= 0) return false;
            lo = fmin(lo, v), hi = fmax(hi, v);
        }
    return lo <= hi && hi > 30 * lo;
}

/* bytes column -> MiB (NaN where 0 or missing: not held). */
static double *mib(const double *b, int n) {
    double *o = malloc((size_t)(n ? n : 1) * sizeof *o);
    for (int i = 0; o && i < n; i++)
        o[i] = b[i] > 0 ? b[i] / (1024.0 * 1024.0) : NAN;
    return o;
}

/* A noisy loss of many logged steps, smoothed as TensorBoard smooths: an
 * exponential moving average, debiased at the start, over about `window`
 * points (a hundredth of the run, at least 10); non-finite points are gaps
 * the average skips. NULL (nothing drawn) under 100 points. */
static double *smoothed(const double *y, int n, int *window) {
    if (!y || n < 100) return NULL;
    *window = n / 100 > 10 ? n / 100 : 10;
    double *o = malloc((size_t)n * sizeof *o);
    const double beta = 1.0 - 1.0 / *window;
    double ema = 0, weight = 0;
    for (int i = 0; o && i < n; i++) {
        if (!isfinite(y[i])) {
            o[i] = NAN;
            continue;
        }
        ema = beta * ema + (1 - beta) * y[i];
        weight = beta * weight + (1 - beta);
        o[i] = ema / weight;
    }
    return o;
}

/* c's chart over its first n series. */
static void finish(chart_spec *c, const char *file, const char *title, const char *ylabel, bool log_y,
                   bool y_from_zero, int n) {
    c->file = file;
    c->chart = (st_chart){.title = title,
                          .xlabel = "step",
                          .ylabel = ylabel,
                          .log_y = log_y,
                          .y_from_zero = y_from_zero,
                          .series = c->series,
                          .n_series = n};
}

/* The charts this run's columns allow (at most 6) into c; returns how many.
 * mem gets three arrays (MiB columns, the smoothed loss) that the caller
 * frees; name (cap bytes) the smoothed series' legend. */
static int plan_charts(const rp_metrics *m, chart_spec *c, double *mem[3], char *name, size_t cap) {
    const rp_table *s = &m->steps, *e = &m->evals;
    const double *x = rp_col(s, RP_STEP);
    int k = 0, n = 0, window = 0;
    c[k].series[n++] = series("train loss", x, rp_col(s, RP_LOSS), s->n);
    if (e->n > 0)
        c[k].series[n++] = series("eval loss", rp_col(e, RP_EVAL_STEP), rp_col(e, RP_EVAL_LOSS), e->n);
    mem[2] = smoothed(rp_col(s, RP_LOSS), s->n, &window);
    snprintf(name, cap, "train loss, smoothed (moving average of %d lines)", window);
    if (mem[2]) c[k].series[n++] = series(name, x, mem[2], s->n);
    finish(&c[k++], "loss", "Loss", "loss", wide_positive(c[0].series, n), false, n);

    const bool tok = rp_has(s, RP_TOKENS_PER_S);
    c[k].series[0] =
        series(tok ? "tokens/s" : "samples/s", x, rp_col(s, tok ? RP_TOKENS_PER_S : RP_SAMPLES_PER_S), s->n);
    finish(&c[k++], "throughput", "Throughput",
           tok ? "tokens per second (all ranks)" : "samples per second (all ranks)", false, true, 1);

    n = 0;
    c[k].series[n++] = series("peak RSS, rank 0", x, rp_col(s, RP_PEAK_RSS_MB), s->n);
    mem[0] = mib(rp_col(s, RP_OPTIM_STATE_BYTES), s->n);
    mem[1] = mib(rp_col(s, RP_GRAD_BYTES), s->n);
    if (mem[0] && rp_has(s, RP_OPTIM_STATE_BYTES))
        c[k].series[n++] = series("optimizer state", x, mem[0], s->n);
    if (mem[1] && rp_has(s, RP_GRAD_BYTES))
        c[k].series[n++] = series("gradients (resident)", x, mem[1], s->n);
    if (rp_has(s, RP_GPU_MEM_USED_MB)) /* a GPU run: the device's used memory as sampled */
        c[k].series[n++] = series("GPU used, rank 0", x, rp_col(s, RP_GPU_MEM_USED_MB), s->n);
    finish(&c[k], "memory", "Memory (rank 0)", "MiB", wide_positive(c[k].series, n), true, n);
    k++;

    c[k].series[0] = series("learning rate", x, rp_col(s, RP_LR), s->n);
    finish(&c[k++], "lr", "Learning rate", "learning rate", false, true, 1);

    c[k].series[0] = series("gradient norm (before clipping)", x, rp_col(s, RP_GRAD_NORM), s->n);
    finish(&c[k++], "grad_norm", "Gradient norm", "global L2 norm", false, true, 1);

    if (rp_has(e, RP_EVAL_ACCURACY)) {
        c[k].series[0] = series("eval accuracy", rp_col(e, RP_EVAL_STEP), rp_col(e, RP_EVAL_ACCURACY), e->n);
        finish(&c[k++], "accuracy", "Evaluation accuracy", "accuracy", false, true, 1);
    }
    return k;
}

/* state.json's "config" (from: its path), or NULL. */
static cJSON *state_config(const char *from) {
    char *text = st_cli_read_file(from);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *cfg = cJSON_DetachItemFromObjectCaseSensitive(root, "config");
    cJSON_Delete(root);
    return cJSON_IsObject(cfg) ? cfg : (cJSON_Delete(cfg), NULL);
}

/* The effective config of RUN_DIR/ckpt/latest's state.json, or else of the
 * newest checkpoint whose state.json reads (a save that ended before
 * `latest`, or `latest` lost: --resume auto and --init take that one too),
 * or NULL. */
static cJSON *read_config(const char *run_dir, char *from, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt/latest", run_dir);
    char *name = st_cli_read_file(path);
    cJSON *cfg = NULL;
    int64_t latest = -1;
    if (name) {
        name[strcspn(name, "\r\n")] = 0;
        snprintf(from, n, "%s/ckpt/%s/state.json", run_dir, name);
        if (sscanf(name, "step-%" SCNd64, &latest) != 1) latest = -1;
        free(name);
        cfg = state_config(from);
    }
    int64_t *steps = NULL;
    int k = 0;
    snprintf(path, sizeof path, "%s/ckpt", run_dir);
    if (st_ckpt_list(path, &steps, &k) != ST_OK) st_clear_error(); /* (none then) */
    for (int i = 0; i < k && (!cfg || steps[i] > latest); i++) {   /* newest first */
        char other[4200];
        snprintf(other, sizeof other, "%s/ckpt/step-%" PRId64 "/state.json", run_dir, steps[i]);
        cJSON *c = state_config(other);
        if (!c) continue;
        cJSON_Delete(cfg);
        cfg = c;
        snprintf(from, n, "%s", other);
        break;
    }
    free(steps);
    return cfg;
}

int st_cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *out = NULL;
    bool png = true;
    static const char *const once[] = {"--out", NULL};
    const int twice = st_cli_once("report", argc, argv, once, NULL);
    if (twice >= 0) return twice;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return ST_EXIT_OK;
        } else if (!strcmp(argv[i], "--out")) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr,
                        "scaletrain report: --out needs a directory (the charts and report.html go there)\n");
                return ST_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (!strcmp(argv[i], "--no-png")) {
            png = false;
        } else if (!argv[i][0]) {
            fprintf(stderr, "scaletrain report: an empty argument ('') where RUN_DIR goes\n");
            usage(stderr);
            return ST_EXIT_USAGE;
        } else if (argv[i][0] != '-' && !run_dir) {
            run_dir = argv[i];
        } else {
            fprintf(stderr, "scaletrain report: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return ST_EXIT_USAGE;
        }
    }
    if (!run_dir) {
        usage(stderr);
        return ST_EXIT_USAGE;
    }
    char dir_buf[4096]; /* (without its trailing slashes: runs/a/ would print runs/a//ckpt/...) */
    snprintf(dir_buf, sizeof dir_buf, "%s", run_dir);
    for (size_t n = strlen(dir_buf); n > 1 && dir_buf[n - 1] == '/'; n--)
        dir_buf[n - 1] = '\0';
    run_dir = dir_buf;
    struct stat sb;
    if (stat(run_dir, &sb) != 0)
        return st_cli_error(
            st_fail(ST_ERR_IO, "%s: %s (give a run's train.out_dir)", run_dir, strerror(errno)));
    if (!S_ISDIR(sb.st_mode))
        return st_cli_error(st_fail(ST_ERR_IO, "%s: not a directory (give a run's train.out_dir)", run_dir));
    char path[4200], out_dir[4096], gnuplot[4096] = "", why[256] = "";
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    rp_metrics m;
    st_status s = rp_metrics_read(path, &m);
    if (s != ST_OK) return st_cli_error(s);
    if (m.torn_last)
        fprintf(stderr, "scaletrain report: warning: %s: the last line is cut short; skipped it\n", path);
    snprintf(out_dir, sizeof out_dir, "%s", out ? out : run_dir);
    if (!out) { /* (RUN/ given: RUN/report, not RUN//report) */
        size_t n = strlen(out_dir);
        while (n > 1 && out_dir[n - 1] == '/')
            out_dir[--n] = '\0';
        strncat(out_dir, "/report", sizeof out_dir - strlen(out_dir) - 1);
    }
    if ((s = st_mkdirs(out_dir)) != ST_OK) { /* (with its parents, as bench's --out) */
        rp_metrics_free(&m);
        /* (the run's own folder, read-only to this user: --out puts the report elsewhere) */
        return st_cli_error(out ? st_fail_context(s, "--out: ")
                                : st_fail_context(s, "the report's folder (--out DIR puts it elsewhere): "));
    }
    if (!png)
        snprintf(why, sizeof why, "--no-png");
    else if (!st_cli_find_on_path("gnuplot", gnuplot, sizeof gnuplot))
        snprintf(why, sizeof why, "gnuplot is not on PATH (apt-get install gnuplot-nox)");
    chart_spec charts[8];
    double *mem[3] = {NULL, NULL, NULL};
    char smooth_name[96];
    int nc = plan_charts(&m, charts, mem, smooth_name, sizeof smooth_name), fails = 0;
    const char *names[8];
    bool png_done[8] = {false}; /* chart i's PNG written by this report */
    /* (a stop between two files: each file is written under a temporary name and renamed whole, so what
     * is there is whole, an earlier report's or this one's; gnuplot's scratch files removed as it ends) */
    atomic_int *stop = st_cli_catch_stops();
    for (int i = 0; i < nc && s == ST_OK && !atomic_load(stop); i++) {
        names[i] = charts[i].file;
        snprintf(path, sizeof path, "%s/%s.svg", out_dir, charts[i].file);
        s = st_chart_write_svg(&charts[i].chart, path);
        if (s != ST_OK || why[0]) continue;
        snprintf(path, sizeof path, "%s/%s.png", out_dir, charts[i].file);
        png_done[i] = st_chart_write_png(&charts[i].chart, path, gnuplot) == ST_OK;
        if (!png_done[i] && !atomic_load(stop)) {
            fprintf(stderr, "scaletrain report: error: %s\n", st_last_error());
            st_clear_error();
            fails++;
        }
    }
    const int sig = atomic_load(stop);
    if (sig) {
        free(mem[0]), free(mem[1]), free(mem[2]);
        rp_metrics_free(&m);
        st_clear_error();
        char sig_name[16];
        fprintf(stderr,
                "scaletrain report: stopped by %s; the files in %s are whole (each renamed into place "
                "once written), some this report's, the rest as they were\n",
                st_signal_name(sig, sig_name), out_dir);
        return 128 + sig;
    }
    /* An earlier report's charts in the same folder that this one did not
     * write (its PNGs under --no-png or without gnuplot; a chart this run has
     * no data for) would show that report's data beside this one's: removed
     * where report.html says the folder is a report's. */
    int removed = 0;
    snprintf(path, sizeof path, "%s/report.html", out_dir);
    if (s == ST_OK && st_path_is_file(path)) {
        static const char *const all[] = {"loss", "throughput", "memory", "lr", "grad_norm", "accuracy"};
        for (size_t a = 0; a < sizeof all / sizeof all[0]; a++) {
            int planned = -1;
            for (int i = 0; i < nc; i++)
                if (strcmp(charts[i].file, all[a]) == 0) planned = i;
            for (int kind = 0; kind < 2; kind++) { /* svg, png */
                if (planned >= 0 && (kind == 0 || png_done[planned])) continue;
                snprintf(path, sizeof path, "%s/%s.%s", out_dir, all[a], kind ? "png" : "svg");
                if (unlink(path) == 0) removed++;
            }
        }
    }
    char cfg_from[4400] = "";
    cJSON *cfg = s == ST_OK ? read_config(run_dir, cfg_from, sizeof cfg_from) : NULL;
    if (s == ST_OK) {
        snprintf(path, sizeof path, "%s/report.html", out_dir);
        s = rp_write_html(path, run_dir, &m, names, nc, !why[0] && fails == 0, cfg, cfg_from);
    }
    cJSON_Delete(cfg);
    free(mem[0]), free(mem[1]), free(mem[2]);
    rp_metrics_free(&m);
    if (s != ST_OK) return st_cli_error(s);
    printf("report: %s/report.html and %d charts (%s)\n", out_dir, nc,
           why[0] || fails ? "SVG" : "SVG and PNG");
    if (why[0]) printf("report: PNGs skipped: %s\n", why);
    if (removed)
        printf("report: removed %d chart file(s) of an earlier report there, not made this time\n", removed);
    return fails ? ST_EXIT_FAIL : ST_EXIT_OK;
}
