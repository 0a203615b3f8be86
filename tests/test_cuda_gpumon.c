/* The GPU monitor on a real device (skipped without one): the backend's
 * memory accounting follows st_device_alloc and st_device_release to the
 * byte and keeps the peak; cudaMemGetInfo's used memory covers what we hold;
 * with NVML (the driver's), the device is found by its PCI address and its
 * utilisation, power and temperature are in range. And the NVTX-emitting
 * trace marks run outside and inside a trace window (nsys shows them; here,
 * that they pair and record). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "train/gpumon.h"
#include "train/trace.h"

int main(void) {
    char why[256];
    if (!st_device_cuda_built()) {
        printf("skipped: this build has no CUDA backend (make CUDA=1)\n");
        return 77;
    }
    if (st_device_cuda_count(why, sizeof why) == 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    st_device *dev = NULL;
    CHECK_OK(st_device_open_cuda(0, &dev));
    if (!dev) return st_test_finish("test_cuda_gpumon");
    st_device_mem a, b, c;
    CHECK_OK(st_device_memory(dev, &a));
    CHECK(a.allocated > 0 && a.peak >= a.allocated, "at open: %lld (peak %lld)", (long long)a.allocated,
          (long long)a.peak);
    const size_t nbytes = 256u << 20;
    void *p = NULL;
    CHECK_OK(st_device_alloc(dev, nbytes, &p));
    CHECK_OK(st_device_memory(dev, &b));
    CHECK(b.allocated == a.allocated + (int64_t)nbytes && b.peak == b.allocated, "after 256 MiB: %lld (peak %lld)",
          (long long)b.allocated, (long long)b.peak);
    CHECK(b.total > 0 && b.used >= b.allocated && b.used <= b.total, "device: used %lld of %lld", (long long)b.used,
          (long long)b.total);
    st_device_release(dev, p);
    CHECK_OK(st_device_memory(dev, &c));
    CHECK(c.allocated == a.allocated && c.peak == b.peak, "after release: %lld (peak %lld)", (long long)c.allocated,
          (long long)c.peak);
    printf("pci %s: allocated %lld, peak %lld, device used %lld of %lld bytes\n", st_device_pci_bus_id(dev),
           (long long)c.allocated, (long long)c.peak, (long long)c.used, (long long)c.total);

    st_gpu_monitor m;
    st_gpu_sample s;
    char line[64];
    st_gpu_monitor_open(&m, dev, NULL);
    st_gpu_monitor_sample(&m, &s);
    CHECK(s.has_mem && s.mem_peak == c.peak && s.mem_total == c.total, "sample memory");
    if (m.nvml.lib) {
        CHECK(s.has_nvml, "NVML open but no sample");
        CHECK(s.util >= 0 && s.util <= 100 && s.mem_util >= 0 && s.mem_util <= 100, "util %g %g", s.util,
              s.mem_util);
        CHECK(s.power_w > 0 && s.power_w < 2000 && s.temp_c > 0 && s.temp_c < 120, "power %g W temp %g C",
              s.power_w, s.temp_c);
        /* the clocks: every driver since 450 has them on a data-centre GPU; the reading, not its value
         * (a lent GPU may really be slowed) */
        unsigned long long slowed = ~0ull;
        const bool clocks = st_gpu_monitor_clocks(&m, &slowed);
        CHECK(clocks == s.has_clocks && (slowed & ~ST_NVML_CLOCKS_SLOWED) == 0,
              "the clocks: read %d (the sample's %d), slowed 0x%llx", clocks, s.has_clocks, slowed);
        printf("clocks: %s, slowed 0x%llx\n", clocks ? "read" : "not read", slowed);
    } else {
        printf("no NVML: %s\n", m.why);
        CHECK(!s.has_nvml && m.why[0], "NVML fields without NVML");
    }
    printf("progress: %s\n", st_gpu_sample_format(&s, line, sizeof line));
    st_gpu_monitor_close(&m);

    /* NVTX through the trace marks: without a trace, and inside a window */
    st_trace_mark mk = st_trace_begin(NULL, ST_TRACE_TID_STEP, "step", "forward");
    st_trace_mark as = st_trace_begin_async(NULL, ST_TRACE_TID_BUCKET, "comm", "grad bucket 0");
    st_trace_end(NULL, &as);
    CHECK(st_trace_end(NULL, &mk) >= mk.t0, "end before begin");
    st_trace t;
    CHECK_OK(st_trace_init(&t, 1, 1, 0));
    st_trace_step(&t, 1);
    mk = st_trace_begin(&t, ST_TRACE_TID_STEP, "optim", "optimizer");
    st_trace_end(&t, &mk);
    CHECK(t.n == 1 && strcmp(t.ev[0].name, "optimizer") == 0, "%lld events", (long long)t.n);
    st_trace_free(&t);
    st_device_free(dev);
    return st_test_finish("test_cuda_gpumon");
}
