/* src/hw/linkcheck.h: a measured all-reduce against the planner's link
 * model, as `scaletrain check` reports it. The predicted times are computed
 * here by hand from the ring model (2(n-1)/n x bytes / link_bw + 2(n-1) x
 * link_lat) with the presets' link figures, and the verdict is checked on
 * both sides of 70%, at the boundary, and for times that are no measurement. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "hw/linkcheck.h"

#define MIB (1024.0 * 1024.0)

static void close_to(double got, double want, const char *what) {
    CHECK(fabs(got - want) <= 1e-9 * fabs(want), "%s: %.12g, expected %.12g", what, got, want);
}

static void test_cpu_shared_memory(void) {
    st_hw_device cpu;
    CHECK(st_device_preset("cpu", &cpu), "no cpu preset");
    CHECK(strcmp(cpu.link, "shared memory") == 0, "cpu link %s", cpu.link);
    /* 16 MiB over 2 ranks: predicted 16 MiB / 2 GB/s + 2 x 20 us */
    const double bytes = 16 * MIB, t_pred = bytes / 2e9 + 2 * 20e-6;
    close_to(t_pred, bytes / cpu.link_bw + 2 * cpu.link_lat, "the preset's figures");
    st_link_check lc;
    /* a link 4x faster than assumed */
    st_link_check_allreduce(&cpu, bytes, 2, t_pred / 4, ST_LINK_OK_FRACTION, &lc);
    CHECK(lc.ok, "4x the assumed speed is not ok: %s", lc.text);
    close_to(lc.ratio, 4.0, "ratio");
    close_to(lc.assumed_busbw, bytes / t_pred, "assumed bus bandwidth");
    close_to(lc.measured_busbw, 4 * bytes / t_pred, "measured bus bandwidth");
    CHECK(strcmp(lc.text, "400% of the 1.99 GB/s the planner assumes for shared memory (cpu preset)") == 0, "text: %s",
          lc.text);
    /* half the assumed speed: below 70% */
    st_link_check_allreduce(&cpu, bytes, 2, 2 * t_pred, ST_LINK_OK_FRACTION, &lc);
    CHECK(!lc.ok, "half the assumed speed is ok: %s", lc.text);
    close_to(lc.ratio, 0.5, "ratio");
    CHECK(strncmp(lc.text, "50% of the 1.99 GB/s", 20) == 0, "text: %s", lc.text);
    /* the boundary: exactly 70% passes, just under it does not */
    st_link_check_allreduce(&cpu, bytes, 2, t_pred / 0.7, 0.7, &lc);
    close_to(lc.ratio, 0.7, "ratio at the boundary");
    CHECK(lc.ok == (lc.ratio >= 0.7), "70%%: ratio %.17g, ok %d", lc.ratio, lc.ok);
    st_link_check_allreduce(&cpu, bytes, 2, t_pred / 0.71, 0.7, &lc);
    CHECK(lc.ok, "71%% fails: %s", lc.text);
    st_link_check_allreduce(&cpu, bytes, 2, t_pred / 0.69, 0.7, &lc);
    CHECK(!lc.ok, "69%% passes: %s", lc.text);
}

static void test_gpu_links(void) {
    /* 8 ranks on H100 NVLink 4 (360 GB/s assumed, 5 us a ring step): 1 GiB */
    st_hw_device h;
    CHECK(st_device_preset("H100", &h), "no H100 preset");
    const double bytes = 1024 * MIB, ring = 2.0 * 7 / 8 * bytes, t_pred = ring / 360e9 + 14 * 5e-6;
    st_link_check lc;
    st_link_check_allreduce(&h, bytes, 8, ring / 300e9, ST_LINK_OK_FRACTION, &lc); /* 300 GB/s measured */
    CHECK(lc.ok, "300 of 360 GB/s is not ok: %s", lc.text);
    close_to(lc.measured_busbw, 300e9, "measured bus bandwidth");
    close_to(lc.ratio, t_pred / (ring / 300e9), "ratio");
    CHECK(strstr(lc.text, "for NVLink 4 (H100-80GB preset)") != NULL, "text: %s", lc.text);
    /* an L40S node's PCIe (20 GB/s assumed) at 10 GB/s: a warning */
    st_hw_device l;
    CHECK(st_device_preset("L40S", &l), "no L40S preset");
    st_link_check_allreduce(&l, bytes, 4, 1.5 * bytes / 10e9, ST_LINK_OK_FRACTION, &lc);
    CHECK(!lc.ok && lc.ratio > 0.45 && lc.ratio < 0.55, "PCIe at half speed: ratio %g ok %d", lc.ratio, lc.ok);
    CHECK(strstr(lc.text, "PCIe 4.0 x16 (L40S preset)") != NULL, "text: %s", lc.text);
}

static void test_no_measurement(void) {
    st_hw_device cpu;
    st_device_preset("cpu", &cpu);
    const double times[] = {0, -1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        st_link_check lc;
        st_link_check_allreduce(&cpu, 16 * MIB, 2, times[i], ST_LINK_OK_FRACTION, &lc);
        CHECK(!lc.ok && lc.ratio == 0 && lc.measured_busbw == 0, "time %g: ok %d ratio %g", times[i], lc.ok,
              lc.ratio);
        CHECK(strncmp(lc.text, "no time to compare", 18) == 0, "time %g: %s", times[i], lc.text);
    }
    /* one rank: no all-reduce to compare */
    st_link_check lc;
    st_link_check_allreduce(&cpu, 16 * MIB, 1, 1e-3, ST_LINK_OK_FRACTION, &lc);
    CHECK(!lc.ok && lc.ratio == 0, "1 rank: ok %d ratio %g", lc.ok, lc.ratio);
}

int main(void) {
    test_cpu_shared_memory();
    test_gpu_links();
    test_no_measurement();
    if (st_test_failures) return 1;
    printf("test_linkcheck: all passed\n");
    return 0;
}
