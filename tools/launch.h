/* `scaletrain launch`'s parts: one run of mpirun with the ranks' output sorted
 * (launch_io.c), and the restart loop around it (launch.c). */
#ifndef ST_TOOLS_LAUNCH_H
#define ST_TOOLS_LAUNCH_H

#include <stdbool.h>

typedef struct st_launch_result {
    char reason[512]; /* why it failed: mpirun's line naming a dead rank, a watchdog's report, or a rank's
                         last error line */
    bool reason_from_mpirun;
    bool timeout_noted, timeout_named; /* reason is a watchdog's report (and names the rank it waited for) */
    int signalled;                     /* a SIGTERM/SIGINT the launcher received and passed on (0: none) */
} st_launch_result;

/* Run argv (argv[0] is mpirun's path, with --tag-output among its options)
 * for `ranks` ranks, writing their output as the file comment of launch_io.c
 * says. Returns mpirun's exit status (128 + N when a signal N ended it), or
 * -1 when it could not be started. */
int st_launch_run(char *const *argv, int ranks, st_launch_result *res);

/* The physical cores this process may run on (its affinity mask's share of
 * the node's cores), at least 1: how many ranks `launch` binds one per core. */
int st_launch_local_cores(void);

#endif
