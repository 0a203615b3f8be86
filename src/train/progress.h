/* Progress output on rank 0: a bar redrawn in place on a terminal, or plain
 * lines every log.every steps otherwise. Both show the step out of the total
 * and the percentage, the loss, the learning rate, samples/s or tokens/s, the
 * time elapsed and the ETA (from this process's steps only, so a resumed run
 * estimates from its own pace), and on a GPU its memory and utilisation as
 * last sampled (gpumon.h). Not metrics.jsonl (metrics.h). */
#ifndef ST_TRAIN_PROGRESS_H
#define ST_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct st_progress {
    FILE *out; /* the session's (train/session.h: a queue's stream, whose writes never wait) */
    bool bar, silent;
    int64_t start, total; /* steps: where this process began, and the run's last */
    double t0, last_draw; /* st_now() at init and at the last redraw of the bar */
    char gpu[64]; /* the last GPU sample (st_gpu_sample_format), shown after the rate; "" = none */
} st_progress;

/* mode: "on" (a bar), "off" (plain lines), "auto" (a bar when out is a
 * terminal: tty) or "silent". start: the step the run (re)starts from. */
void st_progress_init(st_progress *p, FILE *out, bool tty, const char *mode, int64_t start, int64_t total);

/* After step `step` (1-based): the bar is redrawn at most every 0.1 s (and
 * always on a logged step and the last one); a plain line is printed only
 * when force_line. rate is in `unit` ("samples/s" or "tok/s"). */
void st_progress_step(st_progress *p, int64_t step, double loss, double lr, double rate, const char *unit,
                      bool force_line);

/* End the bar's line before other output (no-op for plain lines). */
void st_progress_end(st_progress *p);

/* An evaluation's progress, on a terminal where training's bar would be
 * drawn (rank 0): "eval: 12/50 batches | 0:05<0:20" redrawn in place at
 * most every 0.2 s from its first second on (a short evaluation draws
 * nothing), and erased by st_eval_progress_end, before the evaluation's
 * line. total: the batches this rank evaluates. */
typedef struct st_eval_progress {
    FILE *out;
    bool on, drawn;
    double t0, last;
    int64_t total;
} st_eval_progress;
void st_eval_progress_init(st_eval_progress *e, FILE *out, bool on, int64_t total);
void st_eval_progress_step(st_eval_progress *e, int64_t done);
void st_eval_progress_end(st_eval_progress *e);

/* Seconds left after done of todo steps took elapsed seconds (0 when done is 0). */
double st_progress_eta(double elapsed, int64_t done, int64_t todo);

/* "m:ss" below an hour, "h:mm:ss" from an hour on, into buf. */
const char *st_format_duration(double seconds, char *buf, size_t size);

#endif
