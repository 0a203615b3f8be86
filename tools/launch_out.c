/* The launcher's own output (launch.h): its standard output and standard
 * error each a queue with a writer thread of its own (core/outq.h), so that
 * the loop that reads mpirun's pipes (launch_io.c) and passes signals on to
 * the ranks never waits on a write.
 *
 * Why: a write to an output that takes no bytes (a job's output file on a
 * hung network file system, a pipe whose reader stopped, a terminal paused
 * with Ctrl-S) blocks; the launcher then stopped reading mpirun, mpirun
 * stopped reading the ranks, and the job (even one that had trained to its
 * end) never returned, nor answered SIGTERM. A reader that went away
 * (`| head`, a `tee` that died) ended the launcher by SIGPIPE, and with it
 * the ranks' standard error. Now the job runs on whatever its output does;
 * once it has ended, the launcher writes what is queued as long as the
 * writes go on, gives up on a write that has not returned after
 * --output-timeout seconds, and says on the other stream what was lost. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/outq.h"
#include "launch.h"

struct st_launch_out {
    st_outq *q[2]; /* fd 1, fd 2 */
    double stall_s;
};

st_launch_out *st_launch_out_start(double stall_s) {
    st_launch_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->stall_s = stall_s;
    o->q[0] = st_outq_start(STDOUT_FILENO, "standard output", "scaletrain launch: ", (size_t)64 << 20);
    o->q[1] = st_outq_start(STDERR_FILENO, "standard error", "scaletrain launch: ", (size_t)64 << 20);
    return o;
}

void st_launch_out_put(st_launch_out *o, int fd, const char *p, size_t n) {
    if (fd != 1 && fd != 2) return;
    if (o && o->q[fd - 1])
        st_outq_put(o->q[fd - 1], p, n);
    else
        (void)st_outq_write_all(fd, p, n); /* no writer: written here */
}

void st_launch_sayf(st_launch_out *o, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) st_launch_out_put(o, 2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void st_launch_out_end(st_launch_out *o, bool stopping) {
    if (!o) return;
    if (stopping && o->stall_s > 2) o->stall_s = 2;
    static const char *const names[2] = {"standard output", "standard error"};
    st_outq_report r[2];
    bool ok[2];
    for (int k = 0; k < 2; k++)
        ok[k] = st_outq_drain(o->q[k], o->stall_s, &r[k]);
    char msg[1200];
    int len = 0;
    for (int k = 0; k < 2; k++)
        if (!ok[k] && len < (int)sizeof msg)
            len +=
                snprintf(msg + len, sizeof msg - (size_t)len,
                         "%s%ld line%s of the job's output not written to %s (%s%s)", len ? "; " : "",
                         r[k].lost_lines, r[k].lost_lines == 1 ? "" : "s", names[k], r[k].why,
                         r[k].stuck ? ", --output-timeout: a hung file system, a paused terminal or a reader "
                                      "that stopped?"
                                    : "");
    if (len > 0) { /* said on each stream that still writes */
        char line[1300];
        const int n = snprintf(line, sizeof line, "scaletrain launch: %s\n", msg);
        for (int k = 0; k < 2; k++)
            if (!r[k].stuck && !r[k].error && n > 0) st_launch_out_put(o, k + 1, line, (size_t)n);
    }
    for (int k = 0; k < 2; k++)
        st_outq_end(o->q[k], o->stall_s, NULL);
    free(o);
}
