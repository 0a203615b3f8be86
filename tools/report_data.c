/* metrics.jsonl (docs/formats.md "Metrics") read into columns for
 * `scaletrain report`: step lines and eval lines apart, NaN for what a line
 * lacks, a resumed run's lines replacing what they repeat. Not a writer
 * (src/train/metrics.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "report.h"

static const char *const STEP_NAMES[RP_N_STEP_FIELDS] = {"step",
                                                         "epoch",
                                                         "loss",
                                                         "lr",
                                                         "grad_norm",
                                                         "samples_per_s",
                                                         "tokens_per_s",
                                                         "step_ms",
                                                         "mfu",
                                                         "data_wait_ms",
                                                         "data_wait_fraction",
                                                         "comm_ms",
                                                         "comm_overlap",
                                                         "peak_rss_mb",
                                                         "optim_state_bytes",
                                                         "grad_bytes",
                                                         "skipped_steps",
                                                         "loss_scale",
                                                         "gpu_mem_peak_mb",
                                                         "gpu_mem_used_mb",
                                                         "gpu_mem_total_mb",
                                                         "gpu_util",
                                                         "gpu_power_w",
                                                         "gpu_temp_c",
                                                         "time"};
static const char *const EVAL_NAMES[RP_N_EVAL_FIELDS] = {"step", "loss", "accuracy", "time"};

const double *rp_col(const rp_table *t, int f) { return f < t->n_fields ? t->col[f] : NULL; }

bool rp_has(const rp_table *t, int f) {
    for (int i = 0; f < t->n_fields && i < t->n; i++)
        if (isfinite(t->col[f][i])) return true;
    return false;
}

/* o's fields into a new row of t: a number, or NaN where absent or null
 * (a non-finite value is written as null); any other value is an error
 * naming the line. */
static st_status push(rp_table *t, const cJSON *o, const char *path, int lineno) {
    for (int f = 0; f < t->n_fields; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, t->names[f]);
        if (v && !cJSON_IsNumber(v) && !cJSON_IsNull(v))
            return st_fail(ST_ERR_FORMAT, "%s:%d: \"%s\" is not a number (nor null); fix or delete that line",
                           path, lineno, t->names[f]);
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        for (int f = 0; f < t->n_fields; f++) {
            double *p = realloc(t->col[f], (size_t)cap * sizeof *p);
            if (!p) return st_fail(ST_ERR_NOMEM, "out of memory reading metrics.jsonl");
            t->col[f] = p;
        }
        t->cap = cap;
    }
    for (int f = 0; f < t->n_fields; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, t->names[f]);
        t->col[f][t->n] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
    t->n++;
    return ST_OK;
}

/* Drop the rows of t at or after step (a resumed run logs them again). */
static void cut_from(rp_table *t, double step) {
    while (t->n > 0 && t->col[0][t->n - 1] >= step)
        t->n--;
}

void rp_metrics_free(rp_metrics *m) {
    if (!m) return;
    for (int f = 0; f < RP_N_STEP_FIELDS; f++)
        free(m->steps.col[f]), free(m->evals.col[f]);
    memset(m, 0, sizeof *m);
}

/* One line (NUL-terminated, no newline) into m. */
static st_status take_line(rp_metrics *m, const char *path, int lineno, const char *line, double *last_time) {
    /* (nothing after the object: two lines run together are not one) */
    cJSON *o = cJSON_ParseWithOpts(line, NULL, true);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return st_fail(ST_ERR_FORMAT, "%s:%d: not a JSON object (%.60s%s); fix or delete that line", path,
                       lineno, line, strlen(line) > 60 ? "..." : "");
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (!cJSON_IsNumber(step) || !isfinite(step->valuedouble)) {
        cJSON_Delete(o);
        return st_fail(ST_ERR_FORMAT, "%s:%d: no numeric \"step\" field; fix or delete that line", path,
                       lineno);
    }
    /* (a step is a count: -5 or 1e300 was taken as a resume, the lines before it dropped) */
    if (step->valuedouble < 0 || step->valuedouble != floor(step->valuedouble) ||
        step->valuedouble > 0x1p53) {
        cJSON_Delete(o);
        return st_fail(ST_ERR_FORMAT, "%s:%d: \"step\" is %.17g, not a step number; fix or delete that line",
                       path, lineno, step->valuedouble);
    }
    const double s = step->valuedouble;
    st_status st;
    /* Every line's time (seconds since its process opened the file): going
     * down, a new process wrote it (a resumed run); a checkpoint's or an
     * evaluation's line counts, so that a resume whose first step line
     * comes late is still seen. */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "time");
    if (cJSON_IsNumber(t) && isfinite(t->valuedouble)) {
        /* (a resumed process's first line also says so: a clock that did not go down, the process
         * before it having run for less time than this one's first line took, is a new one too) */
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(o, "resumed_from");
        const bool resumed = cJSON_IsNumber(from);
        if (lineno == 1 && resumed) m->first_resumed_from = from->valuedouble;
        if (lineno > 1 &&
            (resumed || t->valuedouble < *last_time)) { /* a new process: its clock starts again */
            m->run_seconds += *last_time;
            m->segments++;
        }
        *last_time = t->valuedouble;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "checkpoint"))) { /* a checkpoint's record: not charted */
        cJSON_Delete(o);
        return ST_OK;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "eval"))) {
        cut_from(&m->evals, s); /* an evaluation at s again replaces the older ones from s on */
        st = push(&m->evals, o, path, lineno);
    } else {
        if (m->steps.n > 0 && s <= m->steps.col[RP_STEP][m->steps.n - 1]) {
            cut_from(&m->steps, s);
            cut_from(&m->evals, s);
            m->restarts++;
        }
        st = push(&m->steps, o, path, lineno);
    }
    cJSON_Delete(o);
    return st;
}

st_status rp_metrics_read(const char *path, rp_metrics *m) {
    memset(m, 0, sizeof *m);
    m->steps.n_fields = RP_N_STEP_FIELDS;
    m->steps.names = STEP_NAMES;
    m->evals.n_fields = RP_N_EVAL_FIELDS;
    m->evals.names = EVAL_NAMES;
    m->segments = 1;
    m->first_resumed_from = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return st_fail(ST_ERR_IO, "%s: cannot open: %s (is the directory a run's train.out_dir?)", path,
                       strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    double last_time = 0;
    st_status s = ST_OK;
    while (s == ST_OK && (len = getline(&line, &cap, f)) > 0) {
        lineno++;
        const bool whole = line[len - 1] == '\n';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = 0;
        if (len == 0) continue;
        m->lines++;
        s = take_line(m, path, lineno, line, &last_time);
        if (s != ST_OK && !whole) { /* a writer killed mid-line: skip its last line */
            st_clear_error();
            s = ST_OK;
            m->torn_last = true;
            m->lines--;
        }
    }
    free(line);
    if (s == ST_OK && ferror(f)) s = st_fail(ST_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    fclose(f);
    m->run_seconds += last_time;
    if (s == ST_OK && m->steps.n == 0)
        s = st_fail(ST_ERR_FORMAT, "%s: no step lines (%d lines read%s): the run logged no step yet", path,
                    m->lines, m->torn_last ? ", and a last one cut short, not a whole line of JSON" : "");
    if (s != ST_OK) rp_metrics_free(m);
    return s;
}
