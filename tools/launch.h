/* `scaletrain launch`'s parts: one run of mpirun with the ranks' output sorted
 * (launch_io.c), and the restart loop around it (launch.c). */
#ifndef ST_TOOLS_LAUNCH_H
#define ST_TOOLS_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct st_launch_result {
    char reason[512]; /* why it failed: mpirun's line naming a dead rank, a watchdog's report, or a rank's
                         last error line */
    bool reason_from_mpirun;
    bool timeout_noted, timeout_named; /* reason is a watchdog's report (and names the rank it waited for) */
    int signalled;                     /* a stop signal the launcher received and passed on (0: none) */
} st_launch_result;

/* The launcher's standard output and error, each written by a thread of its
 * own from a queue of lines (launch_out.c), so that nothing the launcher
 * does waits on a write. */
typedef struct st_launch_out st_launch_out;
/* Start the writers; a write that has not returned after stall_s seconds is
 * given up on at the end (st_launch_out_end). NULL (no memory), or a stream
 * without its writer: its lines are written directly. */
st_launch_out *st_launch_out_start(double stall_s);
/* Queue n bytes (a whole line or lines) for fd 1 or 2; never waits. */
void st_launch_out_put(st_launch_out *o, int fd, const char *p, size_t n);
/* A line of the launcher's own on standard error, through the queue. */
void st_launch_sayf(st_launch_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Wait for everything queued to be written, as long as the writes return
 * (a write that has not, after stall_s, is given up on; after 2 s when
 * `stopping`: a signal stopped the job); say on each stream that still
 * writes how many lines the other lost and why; stop the writers (a writer
 * stuck in its write is left to the process's exit). */
void st_launch_out_end(st_launch_out *o, bool stopping);

/* The stop signals (SIGTERM, SIGINT, SIGQUIT, SIGUSR1, and SIGHUP unless
 * ignored: nohup) caught from begin to end, around every run of the job
 * and the looks between them, so that one that comes between two runs is
 * the next one's (not started: st_launch_run returns 128 + N) and not the
 * launcher's end with its output unwritten; mpirun gets the actions as they
 * were before. */
void st_launch_signals_begin(void);
void st_launch_signals_end(void);

/* Run argv (argv[0] is mpirun's path, with --tag-output among its options)
 * for `ranks` ranks, writing their output as the file comment of launch_io.c
 * says. Returns mpirun's exit status (128 + N when a signal N ended it), or
 * -1 when it could not be started. */
int st_launch_run(char *const *argv, int ranks, st_launch_out *lo, st_launch_result *res);

/* The physical cores this process may run on (its affinity mask's share of
 * the node's cores), at least 1: how many ranks `launch` binds one per core. */
int st_launch_local_cores(void);

#endif
