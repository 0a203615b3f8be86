/* report.html for `scaletrain report`: one self-contained page (inline CSS,
 * charts by relative link) with the run's summary, the charts and the
 * effective config. Figures come from metrics.jsonl only; a figure the run
 * did not log is left out rather than shown as 0. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chart.h"
#include "cli.h"
#include "core/stats.h"
#include "report.h"

static void row(FILE *f, const char *label, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(FILE *f, const char *label, const char *fmt, ...) {
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    fprintf(f, "<tr><th>%s</th><td>", label);
    st_chart_xml_text(f, v);
    fprintf(f, "</td></tr>\n");
}

/* Statistics of a column's finite values. */
typedef struct stats {
    int n;
    double last, min, max, mean, median;
    int argmin;  /* row of min */
    int last_at; /* row of last (the last finite value) */
} stats;

static stats col_stats(const rp_table *t, int f) {
    stats s = {0, NAN, NAN, NAN, NAN, NAN, -1, -1};
    const double *c = rp_col(t, f);
    double *v = c ? malloc((size_t)(t->n ? t->n : 1) * sizeof *v) : NULL;
    double sum = 0;
    for (int i = 0; v && i < t->n; i++) {
        if (!isfinite(c[i])) continue;
        if (s.n == 0 || c[i] < s.min) s.min = c[i], s.argmin = i;
        if (s.n == 0 || c[i] > s.max) s.max = c[i];
        s.last = c[i];
        s.last_at = i;
        sum += c[i];
        v[s.n++] = c[i];
    }
    if (s.n > 0) {
        s.mean = sum / s.n;
        s.median = st_median(v, (size_t)s.n);
    }
    free(v);
    return s;
}

/* A column's final value into buf: its last row's, or, where the last rows
 * are not finite (a run that diverged ended there), "not finite" with the
 * last finite one and its step (steps: the table's step column). */
static const char *final_value(const stats *s, int rows, const double *steps, char *buf, size_t n) {
    if (s->last_at == rows - 1)
        snprintf(buf, n, "%.4f", s->last);
    else
        snprintf(buf, n, "not finite (the last finite %.4f at step %.0f)", s->last, steps[s->last_at]);
    return buf;
}

static void summary(FILE *f, const char *run_dir, const rp_metrics *m) {
    const rp_table *t = &m->steps, *e = &m->evals;
    const double *step = rp_col(t, RP_STEP);
    fprintf(f, "<table class=\"summary\">\n");
    row(f, "run directory", "%s", run_dir);
    stats ep = col_stats(t, RP_EPOCH);
    if (ep.n)
        row(f, "steps", "%.0f (%d logged step lines, %.0f epoch(s) begun)", step[t->n - 1], t->n, ep.max + 1);
    else
        row(f, "steps", "%.0f (%d logged step lines)", step[t->n - 1], t->n);
    if (m->first_resumed_from >= 0) /* (its steps before are that run's, in its own metrics.jsonl) */
        row(f, "started from", "step %.0f of another run's checkpoint (--resume): its steps before are in that "
            "run's metrics.jsonl", m->first_resumed_from);
    if (m->segments > 1 || m->restarts > 0)
        row(f, "resumed", "%d time(s)%s", m->segments - 1 > m->restarts ? m->segments - 1 : m->restarts,
            m->restarts ? "; lines a resumed run logged again replace the earlier ones" : "");
    if (m->run_seconds > 0) /* (%.3g writes 2000 as 2e+03) */
        row(f, "training time",
            m->run_seconds < 100 ? "%.3g s (step loops, all runs)" : "%.0f s (step loops, all runs)",
            m->run_seconds);
    stats loss = col_stats(t, RP_LOSS);
    if (loss.n) {
        double first = NAN; /* the first finite one (a line's loss may be null) */
        int at = 0;
        for (; at < t->n && !isfinite(first); at++)
            first = t->col[RP_LOSS][at];
        /* (each a line's mean over its log.every steps: the first is not the first step's, which train's
         * --json gives as first_loss) */
        char final[96];
        row(f, "train loss",
            "first %.4f at step %.0f, final %s, best %.4f at step %.0f (each a logged line's mean over its "
            "steps)",
            first, step[at - 1], final_value(&loss, t->n, step, final, sizeof final), loss.min,
            step[loss.argmin]);
    } else if (t->n > 0)
        row(f, "train loss", "%s", "not finite on any step line");
    if (loss.n < t->n)
        row(f, "non-finite train loss", "%d of %d step lines (NaN or Inf)", t->n - loss.n, t->n);
    stats el = col_stats(e, RP_EVAL_LOSS), acc = col_stats(e, RP_EVAL_ACCURACY);
    const char *evals = e->n == 1 ? "evaluation" : "evaluations";
    if (el.n) {
        char final[96];
        row(f, "eval loss", "final %s, best %.4f at step %.0f (%d %s)",
            final_value(&el, e->n, e->col[RP_EVAL_STEP], final, sizeof final), el.min,
            e->col[RP_EVAL_STEP][el.argmin], e->n, evals);
    } else if (e->n > 0)
        row(f, "eval loss", "not finite in any of %d %s", e->n, evals);
    if (el.n < e->n && el.n > 0)
        row(f, "non-finite eval loss", "%d of %d %s (NaN or Inf)", e->n - el.n, e->n, evals);
    if (acc.n) {
        int best = 0;
        for (int i = 0; i < e->n; i++)
            if (isfinite(e->col[RP_EVAL_ACCURACY][i]) && e->col[RP_EVAL_ACCURACY][i] == acc.max) best = i;
        row(f, "eval accuracy", "final %.2f%%, best %.2f%% at step %.0f", 100 * acc.last, 100 * acc.max,
            e->col[RP_EVAL_STEP][best]);
    }
    stats sps = col_stats(t, RP_SAMPLES_PER_S), tps = col_stats(t, RP_TOKENS_PER_S),
          ms = col_stats(t, RP_STEP_MS);
    if (sps.n) row(f, "throughput", "%.1f samples/s median, %.1f last", sps.median, sps.last);
    if (tps.n) row(f, "tokens", "%.1f tokens/s median, %.1f last", tps.median, tps.last);
    if (ms.n) row(f, "step time", "%.3f ms median", ms.median);
    stats mfu = col_stats(t, RP_MFU);
    if (mfu.n) row(f, "MFU", "%.2f%% median, %.2f%% max", 100 * mfu.median, 100 * mfu.max);
    stats wf = col_stats(t, RP_DATA_WAIT_FRACTION), wm = col_stats(t, RP_DATA_WAIT_MS);
    /* (the mean wait over the mean step time, as the run's own figure: a mean of the lines' fractions
     * weighs a short window as a long one) */
    if (wf.n && wm.n && ms.n && ms.mean > 0)
        row(f, "data wait", "%.1f%% of step time, %.3f ms per step (means)", 100 * wm.mean / ms.mean, wm.mean);
    else if (wf.n)
        row(f, "data wait", "%.1f%% of step time (mean)", 100 * wf.mean);
    stats cm = col_stats(t, RP_COMM_MS), co = col_stats(t, RP_COMM_OVERLAP);
    if (cm.n) {
        char share[48] = "", hidden[96] = ""; /* (said only when the lines hold what they come from) */
        if (ms.n && ms.mean > 0)
            snprintf(share, sizeof share, ", %.1f%% of step time", 100 * cm.mean / ms.mean);
        /* (comm_overlap: docs/formats.md; not the hidden share of the all-reduce's time) */
        if (co.n)
            snprintf(hidden, sizeof hidden,
                     "; %.1f%% of the buckets' span before backward ended (comm_overlap)", 100 * co.mean);
        row(f, "communication", "%.3f ms per step waiting (mean)%s%s", cm.mean, share, hidden);
    }
    stats rss = col_stats(t, RP_PEAK_RSS_MB), os = col_stats(t, RP_OPTIM_STATE_BYTES),
          gb = col_stats(t, RP_GRAD_BYTES);
    if (rss.n) row(f, "peak memory", "%.1f MiB RSS (rank 0)", rss.max);
    if (os.n && os.max > 0) row(f, "optimizer state", "%.2f MiB (rank 0)", os.last / 1048576.0);
    if (gb.n && gb.max > 0) row(f, "gradients", "%.2f MiB resident (rank 0)", gb.last / 1048576.0);
    stats gp = col_stats(t, RP_GPU_MEM_PEAK_MB), gu = col_stats(t, RP_GPU_MEM_USED_MB),
          gt = col_stats(t, RP_GPU_MEM_TOTAL_MB), ut = col_stats(t, RP_GPU_UTIL), pw = col_stats(t, RP_GPU_POWER_W),
          tc = col_stats(t, RP_GPU_TEMP_C);
    if (gp.n)
        row(f, "GPU memory", "%.2f GiB peak held by the run, %.2f GiB used at most of %.2f GiB (rank 0)",
            gp.max / 1024, gu.max / 1024, gt.max / 1024);
    if (ut.n)
        row(f, "GPU", "%.0f%% utilisation (mean of %d samples), up to %.0f W and %.0f C (rank 0)", ut.mean, ut.n,
            pw.max, tc.max);
    stats sk = col_stats(t, RP_SKIPPED_STEPS), ls = col_stats(t, RP_LOSS_SCALE);
    if (sk.n) row(f, "skipped steps", "%.0f (overflowing gradients)", sk.last);
    if (ls.n) row(f, "loss scale", "%g final, %g min", ls.last, ls.min);
    if (m->torn_last) row(f, "note", "%s", "the last line of metrics.jsonl was cut short and is left out");
    fprintf(f, "</table>\n");
}

/* The config's sections as rows of section.key = value. */
static void config_table(FILE *f, const cJSON *cfg, const char *from) {
    fprintf(f, "<h2>Effective config</h2>\n<p class=\"from\">from ");
    st_chart_xml_text(f, from);
    fprintf(f, "</p>\n<table class=\"config\">\n");
    for (const cJSON *sec = cfg->child; sec; sec = sec->next) {
        const cJSON *first = cJSON_IsObject(sec) ? sec->child : sec;
        for (const cJSON *k = first; k; k = cJSON_IsObject(sec) ? k->next : NULL) {
            char *v = cJSON_PrintUnformatted(k);
            fprintf(f, "<tr><th>");
            st_chart_xml_text(f, sec->string ? sec->string : "");
            if (cJSON_IsObject(sec)) {
                fputc('.', f);
                st_chart_xml_text(f, k->string ? k->string : "");
            }
            fprintf(f, "</th><td>");
            st_chart_xml_text(f, v ? v : "?");
            fprintf(f, "</td></tr>\n");
            free(v);
        }
    }
    fprintf(f, "</table>\n");
}

st_status rp_write_html(const char *path, const char *run_dir, const rp_metrics *m, const char *const *names,
                        int n_charts, bool png, const cJSON *cfg, const char *cfg_from) {
    st_cli_output out;
    FILE *f = st_cli_output_open(&out, path);
    if (!f) return st_fail(ST_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    fprintf(
        f,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>scaletrain report: ");
    st_chart_xml_text(f, run_dir);
    fprintf(f, "</title>\n<style>\n"
               "body{font-family:sans-serif;margin:1.5em auto;max-width:1560px;color:#222}\n"
               "table{border-collapse:collapse;margin-bottom:1em}th,td{text-align:left;padding:2px 12px;"
               "border-bottom:1px solid #eee;font-size:14px}th{font-weight:600;white-space:nowrap}\n"
               ".charts{display:flex;flex-wrap:wrap;gap:8px}.charts img{width:760px;max-width:100%%;"
               "border:1px solid #ddd}.from{color:#666;font-size:13px}\n"
               "</style>\n</head>\n<body>\n<h1>scaletrain report</h1>\n");
    summary(f, run_dir, m);
    fprintf(f, "<h2>Charts</h2>\n<div class=\"charts\">\n");
    for (int i = 0; i < n_charts; i++) {
        if (png) fprintf(f, "<a href=\"%s.png\">", names[i]);
        fprintf(f, "<img src=\"%s.svg\" alt=\"%s\">", names[i], names[i]);
        fprintf(f, "%s\n", png ? "</a>" : "");
    }
    fprintf(f, "</div>\n");
    if (cfg)
        config_table(f, cfg, cfg_from);
    else
        fprintf(f, "<p class=\"from\">No effective config: the run directory holds no checkpoint whose "
                   "state.json reads (ckpt/step-N).</p>\n");
    fprintf(f, "</body>\n</html>\n");
    return st_cli_output_close(&out, f);
}
