/* A measured all-reduce against the planner's link model (see linkcheck.h). */
#include "linkcheck.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "timing.h"

void st_link_check_allreduce(const st_hw_device *dev, double bytes, int n, double seconds, double fraction,
                             st_link_check *out) {
    memset(out, 0, sizeof *out);
    const double ring = n > 1 ? 2.0 * (n - 1) / n * bytes : 0; /* bytes each link carries */
    const double predicted = st_time_allreduce(bytes, n, dev->link_bw, dev->link_lat);
    out->assumed_busbw = predicted > 0 ? ring / predicted : 0;
    if (!(seconds > 0) || !isfinite(seconds) || !(predicted > 0)) {
        snprintf(out->text, sizeof out->text,
                 "no time to compare with the %.2f GB/s the planner assumes for %s (%s preset)",
                 out->assumed_busbw / 1e9, dev->link, dev->name);
        return;
    }
    out->measured_busbw = ring / seconds;
    out->ratio = predicted / seconds;
    out->ok = out->ratio >= fraction;
    snprintf(out->text, sizeof out->text, "%.0f%% of the %.2f GB/s the planner assumes for %s (%s preset)",
             100.0 * out->ratio, out->assumed_busbw / 1e9, dev->link, dev->name);
}
