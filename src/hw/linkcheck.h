/* A measured all-reduce against the link the planner assumes: `scaletrain
 * check` times an all-reduce and asks whether it reaches what the ring model
 * of the planner (timing.h: 2(n-1)/n x bytes / link_bw + 2(n-1) x link_lat)
 * predicts for the same message on the device's in-node link (device.h:
 * NVLink, PCIe, or the CPU's shared memory). A link well below it makes
 * every plan for this machine optimistic about communication.
 *
 * Not here: the measurement (tools/check_comm.c), the presets (device.c). */
#ifndef ST_HW_LINKCHECK_H
#define ST_HW_LINKCHECK_H

#include <stdbool.h>

#include "device.h"

/* The part of the planner's bandwidth a link must reach to pass. */
#define ST_LINK_OK_FRACTION 0.7

typedef struct st_link_check {
    double measured_busbw; /* bytes/s, as nccl-tests report it: bytes / time x 2(n-1)/n */
    double assumed_busbw;  /* bytes/s: the same for the planner's predicted time of this all-reduce */
    double ratio;          /* measured / assumed (= predicted time / measured time); 0 when not measured */
    bool ok;               /* ratio >= the fraction asked for */
    char text[224];        /* "72% of the 2.00 GB/s the planner assumes for shared memory (cpu preset)" */
} st_link_check;

/* `bytes` all-reduced over n >= 2 ranks in `seconds` (the slowest rank's
 * best), against dev's in-node link. A time that is not positive and finite
 * is not ok (ratio 0, text says so). */
void st_link_check_allreduce(const st_hw_device *dev, double bytes, int n, double seconds, double fraction,
                             st_link_check *out);

#endif
