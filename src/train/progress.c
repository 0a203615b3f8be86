/* The progress bar and plain progress lines (see progress.h). */
#include "progress.h"

#include <string.h>

#include "session.h"

void st_progress_init(st_progress *p, FILE *out, bool tty, const char *mode, int64_t start, int64_t total) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->start = start;
    p->total = total;
    p->t0 = st_now();
    p->silent = strcmp(mode, "silent") == 0;
    p->bar = strcmp(mode, "on") == 0 || (strcmp(mode, "auto") == 0 && tty);
}

double st_progress_eta(double elapsed, int64_t done, int64_t todo) {
    return done > 0 && todo > 0 ? elapsed / (double)done * (double)todo : 0;
}

const char *st_format_duration(double seconds, char *buf, size_t size) {
    long long s = seconds > 0 ? (long long)(seconds + 0.5) : 0;
    if (s >= 3600) snprintf(buf, size, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, size, "%lld:%02lld", s / 60, s % 60);
    return buf;
}

void st_progress_step(st_progress *p, int64_t step, double loss, double lr, double rate, const char *unit,
                      bool force_line) {
    if (p->silent || (!p->bar && !force_line)) return;
    const double now = st_now(), el = now - p->t0;
    if (p->bar && !force_line && step != p->total && now - p->last_draw < 0.1) return;
    p->last_draw = now;
    char e[32], left[32];
    st_format_duration(el, e, sizeof e);
    st_format_duration(st_progress_eta(el, step - p->start, p->total - step), left, sizeof left);
    const int pct = p->total > 0 ? (int)(100.0 * (double)step / (double)p->total) : 100;
    const char *sep = p->gpu[0] ? " | " : "";
    if (p->bar) {
        enum { WIDTH = 24 };
        const int fill = p->total > 0 ? (int)((double)WIDTH * (double)step / (double)p->total) : WIDTH;
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = '\0';
        /* \033[K clears what a longer previous line left */
        fprintf(p->out, "\r[%s] %lld/%lld %3d%% | loss %.4f | lr %.2e | %.0f %s%s%s | %s<%s\033[K", bar,
                (long long)step, (long long)p->total, pct, loss, lr, rate, unit, sep, p->gpu, e, left);
    } else {
        fprintf(p->out, "step %lld/%lld (%d%%) | loss %.4f | lr %.2e | %.0f %s%s%s | elapsed %s | eta %s\n",
                (long long)step, (long long)p->total, pct, loss, lr, rate, unit, sep, p->gpu, e, left);
    }
    fflush(p->out);
}

void st_progress_end(st_progress *p) {
    if (p->bar && p->last_draw > 0) {
        fputc('\n', p->out);
        p->last_draw = 0;
    }
}

void st_eval_progress_init(st_eval_progress *e, FILE *out, bool on, int64_t total) {
    memset(e, 0, sizeof *e);
    e->out = out;
    e->on = on && out && total > 1;
    e->total = total;
    e->t0 = st_now();
}

void st_eval_progress_step(st_eval_progress *e, int64_t done) {
    if (!e->on) return;
    const double now = st_now(), el = now - e->t0;
    if (el < 1.0 || now - e->last < 0.2) return;
    e->last = now;
    e->drawn = true;
    char a[32], left[32];
    st_format_duration(el, a, sizeof a);
    st_format_duration(st_progress_eta(el, done, e->total - done), left, sizeof left);
    fprintf(e->out, "\reval: %lld/%lld batches | %s<%s\033[K", (long long)done, (long long)e->total, a, left);
    fflush(e->out);
}

void st_eval_progress_end(st_eval_progress *e) {
    if (!e->drawn) return;
    fputs("\r\033[K", e->out); /* (the evaluation's own line takes its place) */
    fflush(e->out);
    e->drawn = false;
}
