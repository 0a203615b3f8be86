/* `scaletrain report`'s pieces: the run's metrics.jsonl read into columns
 * (tools/report_data.c) and the HTML page (tools/report_html.c). */
#ifndef ST_TOOLS_REPORT_H
#define ST_TOOLS_REPORT_H

#include <stdbool.h>

#include "scaletrain/status.h"

/* Columns of the step lines (docs/formats.md "Metrics"); a field a line
 * lacks, or holds as null (NaN and Inf print as null), is NaN. */
enum {
    RP_STEP,
    RP_EPOCH,
    RP_LOSS,
    RP_LR,
    RP_GRAD_NORM,
    RP_SAMPLES_PER_S,
    RP_TOKENS_PER_S,
    RP_STEP_MS,
    RP_MFU,
    RP_DATA_WAIT_MS,
    RP_DATA_WAIT_FRACTION,
    RP_COMM_MS,
    RP_COMM_OVERLAP,
    RP_PEAK_RSS_MB,
    RP_OPTIM_STATE_BYTES,
    RP_GRAD_BYTES,
    RP_SKIPPED_STEPS,
    RP_LOSS_SCALE,
    RP_GPU_MEM_PEAK_MB, /* GPU lines only (log.gpu_interval) */
    RP_GPU_MEM_USED_MB,
    RP_GPU_MEM_TOTAL_MB,
    RP_GPU_UTIL,
    RP_GPU_POWER_W,
    RP_GPU_TEMP_C,
    RP_TIME,
    RP_N_STEP_FIELDS
};
/* Columns of the eval lines. */
enum { RP_EVAL_STEP, RP_EVAL_LOSS, RP_EVAL_ACCURACY, RP_EVAL_TIME, RP_N_EVAL_FIELDS };

typedef struct rp_table {
    int n, cap, n_fields;
    const char *const *names;      /* (n_fields,) JSON field names */
    double *col[RP_N_STEP_FIELDS]; /* n_fields columns of (n,) */
} rp_table;

typedef struct rp_metrics {
    rp_table steps, evals;
    int lines;          /* non-empty lines read */
    int restarts;       /* times the steps went back (a resumed run appended after a later step) */
    int segments;       /* runs that wrote the file: 1 + restarts seen through "time" restarting */
    double run_seconds; /* sum over segments of each one's last "time" */
    bool torn_last;     /* the last line was cut short (a killed writer) and was skipped */
    double first_resumed_from; /* the first line's resumed_from: the file begins with a run resumed from
                                  another out_dir's checkpoint at that step; -1 when not */
} rp_metrics;

/* Read path (a metrics.jsonl). A line that is not a JSON object with a
 * numeric "step" is an error naming its line number, but for a last line
 * without its newline, which is skipped (torn_last). Lines whose step goes
 * back replace the earlier lines from that step on. No step lines is an error. */
st_status rp_metrics_read(const char *path, rp_metrics *m);
void rp_metrics_free(rp_metrics *m);
/* Column f of t, or NULL. */
const double *rp_col(const rp_table *t, int f);
/* true when column f of t has a finite value. */
bool rp_has(const rp_table *t, int f);

/* report.html at path: the summary of m, the charts (names[i].svg, linked
 * to names[i].png when png), the effective config (may be NULL) read from
 * cfg_from. */
struct cJSON;
st_status rp_write_html(const char *path, const char *run_dir, const rp_metrics *m, const char *const *names,
                        int n_charts, bool png, const struct cJSON *cfg, const char *cfg_from);

#endif
