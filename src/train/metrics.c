/* metrics.jsonl writer (rank 0) and the measured CPU peak behind mfu. Each
 * line is formatted with cJSON, written with one fwrite and flushed, so a
 * reader never sees half a line; the same object's numbers become one
 * TensorBoard event. Not a reader. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>
#include <cjson/cJSON.h>

#include "core/config_schema.h"
#include "core/watch.h"
#include "session.h"

/* A run that died after its last checkpoint logged steps past it: drop the
 * lines after `step` so the resumed run's lines follow without repeats. The
 * lines are in step order: they are read from the end, back to the first
 * line at or before `step` (a chunk at a time, growing), and the file is cut
 * there in place; a resume reads and writes only its tail, whatever the
 * file's size (a run of days logs a million lines: rewriting it all took
 * seconds, under the storage watch's limit). A last line without its
 * newline was cut short by the run's end (killed mid-write): dropped, else
 * the resumed run's first line would be joined to it; one that parses whole
 * gets its newline. *eval_at_step: an evaluation line at `step` is there. */
static st_status drop_after(const char *path, int64_t step, bool *eval_at_step) {
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return ST_OK; /* nothing to keep */
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return st_fail(ST_ERR_IO, "%s: %s", path, strerror(errno));
    }
    const off_t size = sb.st_size;
    size_t chunk = (size_t)1 << 16;
    char *buf = NULL;
    off_t from = 0, cut_at = size; /* cut_at: the first byte dropped */
    bool newline = false;          /* the kept last line lacks its newline */
    st_status s = ST_OK;
    for (;;) {
        from = size > (off_t)chunk ? size - (off_t)chunk : 0;
        const size_t len = (size_t)(size - from);
        char *nb = realloc(buf, len + 1);
        if (!nb) {
            s = st_fail(ST_ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        buf = nb;
        size_t got = 0;
        while (got < len) {
            const ssize_t r = pread(fd, buf + got, len - got, from + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got < len) {
            s = st_fail(ST_ERR_IO, "%s: cannot read it for the resumed run: %s", path,
                        errno ? strerror(errno) : "shorter than it was");
            break;
        }
        /* the lines from the end: [a, b), b at a newline or the end */
        cut_at = size;
        newline = false;
        *eval_at_step = false;
        bool decided = false, more = false;
        size_t b = len;
        while (b > 0 && !decided) {
            const bool last = b == len && buf[len - 1] != '\n';
            const size_t e = last ? len : b - 1; /* (the line without its newline) */
            size_t a = e;
            while (a > 0 && buf[a - 1] != '\n')
                a--;
            if (a == 0 && from > 0) { /* its start is before this chunk */
                more = true;
                break;
            }
            cJSON *o = cJSON_ParseWithLength(buf + a, e - a);
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
            if ((last && !o) || (cJSON_IsNumber(st) && st->valuedouble > (double)step)) {
                cut_at = from + (off_t)a; /* dropped */
            } else {
                if (last) newline = true; /* kept: whole, but without its newline */
                if (cJSON_IsNumber(st) && st->valuedouble == (double)step) {
                    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "eval"))) *eval_at_step = true;
                } else {
                    decided = true; /* before `step` (or no step): everything earlier is kept */
                }
            }
            cJSON_Delete(o);
            b = a;
        }
        if (!more || s != ST_OK) break;
        chunk *= 2;
    }
    free(buf);
    if (s == ST_OK && cut_at < size && ftruncate(fd, cut_at) != 0)
        s = st_fail(ST_ERR_IO, "%s: cannot cut it for the resumed run: %s", path, strerror(errno));
    if (s == ST_OK && newline && cut_at == size && pwrite(fd, "\n", 1, size) != 1)
        s = st_fail(ST_ERR_IO, "%s: cannot end its last line: %s", path, strerror(errno));
    close(fd);
    return s;
}

static st_status open_files(st_metrics *m, const char *out_dir, int64_t resume_step, bool own,
                            bool tensorboard) {
    char path[4096];
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return st_fail(ST_ERR_IO, "%s: cannot create directory (train.out_dir): %s", out_dir, strerror(errno));
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    const bool keep = resume_step > 0 && own;
    if (keep) ST_TRY(drop_after(path, resume_step, &m->eval_at_resume));
    m->f = fopen(path, keep ? "a" : "w");
    if (!m->f) return st_fail(ST_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    m->t0 = st_now();
    m->resumed_from = resume_step;
    if (tensorboard) { /* (its START at step 1 when metrics.jsonl starts over: TensorBoard then drops
                        * every older event of the directory, as the lines are gone) */
        st_status s = st_tb_open(&m->tb, out_dir, keep ? resume_step + 1 : 1);
        if (s != ST_OK) {
            (void)st_metrics_close(m);
            return s;
        }
    }
    return ST_OK;
}

st_status st_metrics_open(st_metrics *m, const char *out_dir, int64_t resume_step, bool own, bool tensorboard,
                          st_watch *watch) {
    memset(m, 0, sizeof *m);
    snprintf(m->what, sizeof m->what, "opening %s/metrics.jsonl%s", out_dir,
             tensorboard ? " and a TensorBoard event file" : "");
    st_watch_begin(watch, m->what);
    const st_status s = open_files(m, out_dir, resume_step, own, tensorboard);
    st_watch_end(watch);
    m->watch = watch;
    snprintf(m->what, sizeof m->what, "writing to %s/metrics.jsonl%s", out_dir,
             tensorboard ? " and its TensorBoard event file" : "");
    return s;
}

/* o's numbers but step and time as one TensorBoard event at `step`. */
static st_status emit_tb(st_metrics *m, const cJSON *o, const char *prefix, int64_t step) {
    enum { MAX = 32 };
    char tags[MAX][64];
    st_tb_scalar v[MAX];
    int n = 0;
    for (const cJSON *it = o->child; it && n < MAX; it = it->next) {
        /* (a value that is not a number, null in metrics.jsonl: a stop line's unmeasured grad_norm, a NaN
         * loss, is left out, not drawn as NaN) */
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !strcmp(it->string, "step") ||
            !strcmp(it->string, "time") || !strcmp(it->string, "resumed_from"))
            continue;
        snprintf(tags[n], sizeof tags[n], "%s/%s", prefix, it->string);
        v[n].tag = tags[n];
        v[n].value = it->valuedouble;
        n++;
    }
    return st_tb_write_scalars(&m->tb, step, v, n);
}

/* o's numbers as text that reads back as the same double. cJSON prints 15
 * digits and keeps them when they read back within a unit or two of the last
 * place, which can move a value (a clock difference often sits exactly between
 * two floats) across a float32 rounding boundary: metrics.jsonl and the
 * TensorBoard event (float32 of the exact value) then disagree by one ulp.
 * Non-finite numbers stay null, as cJSON prints them. false: out of memory. */
static bool exact_numbers(cJSON *o) {
    for (cJSON *it = o->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) continue;
        char num[32];
        st_cfg_format_double(it->valuedouble, num, sizeof num);
        cJSON *raw = cJSON_CreateRaw(num);
        if (!raw) return false;
        raw->string = it->string; /* the name moves to the replacement */
        raw->type |= it->type & cJSON_StringIsConst;
        it->string = NULL;
        cJSON_ReplaceItemViaPointer(o, it, raw); /* (cannot fail: it is o's child) */
        it = raw;
    }
    return true;
}

/* Print o as one line, one write, flushed, and as a TensorBoard event under
 * prefix; takes o. */
static st_status emit(st_metrics *m, cJSON *o, const char *prefix, int64_t step) {
    /* A resumed process's first line says so: its "time" starts again, and
     * a reader cannot tell that from the clock alone when the process before
     * it ran for less time than this one's first line took. */
    if (o && m->resumed_from > 0) {
        cJSON_AddNumberToObject(o, "resumed_from", (double)m->resumed_from);
        m->resumed_from = 0;
    }
    st_watch_begin(m->watch, m->what);
    st_status tb = o && m->tb.f ? emit_tb(m, o, prefix, step) : ST_OK;
    st_watch_end(m->watch);
    char *s = o && exact_numbers(o) ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (tb != ST_OK) {
        free(s);
        return tb;
    }
    if (!s) return st_fail(ST_ERR_NOMEM, "out of memory formatting a metrics line");
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return st_fail(ST_ERR_NOMEM, "out of memory formatting a metrics line");
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    st_watch_begin(m->watch, m->what);
    bool ok = fwrite(line, 1, n + 1, m->f) == n + 1 && fflush(m->f) == 0;
    st_watch_end(m->watch);
    free(line);
    if (!ok) return st_fail(ST_ERR_IO, "metrics.jsonl: write failed: %s", strerror(errno));
    return ST_OK;
}

static void add_gpu(cJSON *o, const st_gpu_sample *g) {
    const double mib = 1.0 / (1 << 20);
    if (g->has_mem) {
        cJSON_AddNumberToObject(o, "gpu_mem_allocated_mb", (double)g->mem_allocated * mib);
        cJSON_AddNumberToObject(o, "gpu_mem_peak_mb", (double)g->mem_peak * mib);
        cJSON_AddNumberToObject(o, "gpu_mem_used_mb", (double)g->mem_used * mib);
        cJSON_AddNumberToObject(o, "gpu_mem_total_mb", (double)g->mem_total * mib);
    }
    if (g->has_nvml) {
        cJSON_AddNumberToObject(o, "gpu_util", g->util);
        cJSON_AddNumberToObject(o, "gpu_mem_util", g->mem_util);
        cJSON_AddNumberToObject(o, "gpu_power_w", g->power_w);
        cJSON_AddNumberToObject(o, "gpu_temp_c", g->temp_c);
    }
    if (g->has_clocks) cJSON_AddNumberToObject(o, "gpu_clocks_slowed", (double)g->slowed);
}

st_status st_metrics_step_write(st_metrics *m, const st_metrics_step *s) {
    if (!m->f) return ST_OK;
    cJSON *o = cJSON_CreateObject();
    if (!o) return st_fail(ST_ERR_NOMEM, "out of memory formatting a metrics line");
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddNumberToObject(o, "epoch", (double)s->epoch);
    cJSON_AddNumberToObject(o, "loss", s->loss);
    cJSON_AddNumberToObject(o, "lr", s->lr);
    cJSON_AddNumberToObject(o, "grad_norm", s->grad_norm);
    cJSON_AddNumberToObject(o, "samples_per_s", s->samples_per_s);
    if (s->lm) cJSON_AddNumberToObject(o, "tokens_per_s", s->tokens_per_s);
    cJSON_AddNumberToObject(o, "step_ms", s->step_ms);
    if (s->mfu >= 0) cJSON_AddNumberToObject(o, "mfu", s->mfu); /* (no peak known: left out, formats.md) */
    cJSON_AddNumberToObject(o, "data_wait_ms", s->data_wait_ms);
    cJSON_AddNumberToObject(o, "data_wait_fraction", s->data_wait_fraction);
    if (s->has_comm) {
        cJSON_AddNumberToObject(o, "comm_ms", s->comm_ms);
        cJSON_AddNumberToObject(o, "comm_overlap", s->comm_overlap);
    }
    cJSON_AddNumberToObject(o, "peak_rss_mb", st_metrics_peak_rss_mb());
    cJSON_AddNumberToObject(o, "optim_state_bytes", (double)s->optim_state_bytes);
    cJSON_AddNumberToObject(o, "grad_bytes", (double)s->grad_bytes);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)s->skipped_steps);
    if (s->has_loss_scale) cJSON_AddNumberToObject(o, "loss_scale", s->loss_scale);
    add_gpu(o, &s->gpu);
    cJSON_AddNumberToObject(o, "time", st_now() - m->t0);
    return emit(m, o, "train", s->step);
}

st_status st_metrics_eval_write(st_metrics *m, int64_t step, double loss, double accuracy, bool has_accuracy,
                                int64_t samples) {
    if (!m->f) return ST_OK;
    cJSON *o = cJSON_CreateObject();
    if (!o) return st_fail(ST_ERR_NOMEM, "out of memory formatting a metrics line");
    cJSON_AddTrueToObject(o, "eval");
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "loss", loss);
    if (has_accuracy) cJSON_AddNumberToObject(o, "accuracy", accuracy);
    cJSON_AddNumberToObject(o, "samples", (double)samples);
    cJSON_AddNumberToObject(o, "time", st_now() - m->t0);
    return emit(m, o, "eval", step);
}

st_status st_metrics_checkpoint_write(st_metrics *m, int64_t step, int64_t committed_step, bool async,
                                      double write_s, double stall_s) {
    if (!m->f) return ST_OK;
    cJSON *o = cJSON_CreateObject();
    if (!o) return st_fail(ST_ERR_NOMEM, "out of memory formatting a metrics line");
    cJSON_AddTrueToObject(o, "checkpoint");
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "committed_step", (double)committed_step);
    cJSON_AddBoolToObject(o, "async", async);
    cJSON_AddNumberToObject(o, "write_s", write_s);
    cJSON_AddNumberToObject(o, "stall_s", stall_s);
    cJSON_AddNumberToObject(o, "time", st_now() - m->t0);
    return emit(m, o, "checkpoint", step);
}

st_status st_metrics_close(st_metrics *m) {
    if (!m) return ST_OK;
    st_watch_begin(m->watch, m->what); /* (closing a file writes: a network file system's commit) */
    st_status s = st_tb_close(&m->tb);
    errno = 0;
    if (m->f && fclose(m->f) != 0 && s == ST_OK)
        s = st_fail(ST_ERR_IO,
                    "metrics.jsonl: closing it failed: %s (its last lines may not have reached the storage)",
                    strerror(errno ? errno : EIO));
    st_watch_end(m->watch);
    m->f = NULL;
    m->watch = NULL;
    return s;
}

double st_metrics_peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports kilobytes */
}
