/* Progress output: plain lines only on logged steps with every field the
 * issue asks for (step, loss, learning rate, samples/s or tokens/s, ETA, plus
 * percentage and elapsed time), the bar redrawn in place and ended with one
 * newline, silence, the ETA from this process's own steps (a resumed run),
 * and durations past an hour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/progress.h"

static char *run(const char *mode, int64_t start, int64_t total, bool lines_every_step) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    st_progress p;
    st_progress_init(&p, f, false, mode, start, total);
    for (int64_t s = start + 1; s <= total; s++)
        st_progress_step(&p, s, 0.25 * (double)s, 1e-3, 1234.4, "samples/s", lines_every_step || s % 5 == 0);
    st_progress_end(&p);
    st_progress_end(&p); /* a second end adds nothing */
    fclose(f);
    return buf;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *q = s; (q = strstr(q, needle)); q++)
        n++;
    return n;
}

int main(void) {
    char *off = run("off", 0, 10, false);
    CHECK(count(off, "\n") == 2, "two plain lines (steps 5 and 10): %s", off);
    CHECK(strstr(off, "step 5/10 (50%) | loss 1.2500 | lr 1.00e-03 | 1234 samples/s | elapsed 0:00 | eta 0:00\n") !=
              NULL,
          "line for step 5: %s", off);
    CHECK(strstr(off, "step 10/10 (100%)") != NULL && !strchr(off, '\r'), "step 10, no carriage return: %s", off);
    free(off);

    char *on = run("on", 0, 10, false);
    CHECK(on[0] == '\r' && strstr(on, "] 10/10 100% | loss 2.5000 | lr 1.00e-03 | 1234 samples/s | 0:00<0:00"),
          "bar: %s", on);
    CHECK(count(on, "\n") == 1 && on[strlen(on) - 1] == '\n', "the bar ends with one newline");
    CHECK(strstr(on, "[########################]") != NULL && strstr(on, "\033[K") != NULL, "full bar, cleared tail");
    free(on);

    char *quiet = run("silent", 0, 10, true);
    CHECK(quiet[0] == '\0', "silent prints nothing: %s", quiet);
    free(quiet);

    char *resumed = run("off", 20, 30, false);
    CHECK(strstr(resumed, "step 25/30 (83%)") && strstr(resumed, "step 30/30 (100%)") && count(resumed, "\n") == 2,
          "resumed run: %s", resumed);
    free(resumed);

    /* ETA from this process's steps: 5 steps of a run resumed at 20 took 10 s, 5 remain */
    CHECK_CLOSE(st_progress_eta(10.0, 25 - 20, 30 - 25), 10.0, 1e-12);
    CHECK_CLOSE(st_progress_eta(10.0, 0, 5), 0.0, 0);
    CHECK_CLOSE(st_progress_eta(10.0, 5, 0), 0.0, 0);
    char b[32];
    CHECK(!strcmp(st_format_duration(59.4, b, sizeof b), "0:59"), "%s", b);
    CHECK(!strcmp(st_format_duration(61, b, sizeof b), "1:01"), "%s", b);
    CHECK(!strcmp(st_format_duration(3725, b, sizeof b), "1:02:05"), "%s", b);
    CHECK(!strcmp(st_format_duration(-3, b, sizeof b), "0:00"), "%s", b);
    CHECK(!strcmp(st_format_duration(100 * 3600.0, b, sizeof b), "100:00:00"), "%s", b);
    return st_test_finish("test_progress");
}
