/* The GPU monitor's parts that run without a GPU: the NVML loader's absence
 * paths (no library; a library that is not NVML), a monitor on the CPU that
 * leaves every field absent, the metrics.jsonl record and TensorBoard tags of
 * a sample (present and absent), and the progress line. What needs a GPU is
 * in test_cuda_gpumon.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "train/gpumon.h"
#include "train/metrics.h"
#include "train/progress.h"

static void test_loader_absent(void) {
    st_nvml n;
    char why[192];
    CHECK(!st_nvml_open(&n, "libnvidia-ml-absent.so.1", why, sizeof why), "a missing library opened");
    CHECK(strstr(why, "libnvidia-ml-absent.so.1") != NULL, "why: %s", why);
    CHECK(n.lib == NULL, "not zeroed");
    st_nvml_close(&n); /* closing what never opened is fine */
    /* a real library that is not NVML */
    CHECK(!st_nvml_open(&n, "libz.so.1", why, sizeof why), "zlib passed for NVML");
    CHECK(strstr(why, "lacks nvmlInit_v2") != NULL, "why: %s", why);
    /* the driver's own: absent on a machine without the NVIDIA driver, else it works */
    if (st_nvml_open(&n, NULL, why, sizeof why)) {
        unsigned int count = 0;
        CHECK(n.count(&count) == 0, "nvmlDeviceGetCount");
        printf("NVML present: %u device(s)\n", count);
        st_nvml_close(&n);
        CHECK(n.lib == NULL, "closed");
    } else {
        CHECK(why[0] != '\0', "no reason given");
        printf("NVML absent here: %s\n", why);
    }
}

static void test_monitor_cpu(void) {
    st_gpu_monitor m;
    st_gpu_sample s;
    char buf[64];
    st_gpu_monitor_open(&m, NULL, NULL);
    st_gpu_monitor_sample(&m, &s);
    CHECK(!s.has_mem && !s.has_nvml, "the CPU has a GPU sample");
    CHECK(strcmp(st_gpu_sample_format(&s, buf, sizeof buf), "") == 0, "format: '%s'", buf);
    CHECK(strstr(m.why, "no CUDA device") != NULL, "why: %s", m.why);
    st_gpu_monitor_close(&m);
    st_device_mem dm;
    CHECK_FAILS(st_device_memory(NULL, &dm), ST_ERR_UNSUPPORTED, "host");
    CHECK(strcmp(st_device_pci_bus_id(NULL), "") == 0, "host PCI id");
}

static st_gpu_sample full_sample(void) {
    st_gpu_sample g = {0};
    g.has_mem = true;
    g.mem_allocated = 3LL << 20;
    g.mem_peak = 5LL << 20;
    g.mem_used = 1536LL << 20;
    g.mem_total = 81920LL << 20;
    g.has_nvml = true;
    g.util = 97;
    g.mem_util = 41;
    g.power_w = 412.5;
    g.temp_c = 61;
    g.has_clocks = true;
    g.slowed = 64; /* HW thermal slowdown */
    return g;
}

static void test_format(void) {
    char buf[64];
    st_gpu_sample g = full_sample();
    CHECK(strcmp(st_gpu_sample_format(&g, buf, sizeof buf), "gpu 1.5/80.0 GiB 97% 412 W 61 C slowed") == 0 ||
              strcmp(buf, "gpu 1.5/80.0 GiB 97% 413 W 61 C slowed") == 0,
          "full, the clocks slowed: '%s'", buf);
    g.slowed = 0;
    CHECK(strcmp(st_gpu_sample_format(&g, buf, sizeof buf), "gpu 1.5/80.0 GiB 97% 412 W 61 C") == 0 ||
              strcmp(buf, "gpu 1.5/80.0 GiB 97% 413 W 61 C") == 0,
          "full: '%s'", buf);
    g.has_nvml = false;
    CHECK(strcmp(st_gpu_sample_format(&g, buf, sizeof buf), "gpu 1.5/80.0 GiB") == 0, "memory only: '%s'", buf);
    /* the progress line carries it between the rate and the time */
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) return;
    st_progress p;
    st_progress_init(&p, f, false, "off", 0, 10);
    st_gpu_sample_format(&g, p.gpu, sizeof p.gpu);
    st_progress_step(&p, 5, 1.25, 1e-3, 100, "samples/s", true);
    fclose(f);
    CHECK(out && strstr(out, "| 100 samples/s | gpu 1.5/80.0 GiB | elapsed"), "line: %s", out ? out : "");
    free(out);
}

/* Field `k` of line o: present with value v (within 1e-9), or absent when v is NAN. */
static void check_field(const cJSON *o, const char *k, double v, int line) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (v != v) {
        CHECK(it == NULL, "line %d: %s present", line, k);
        return;
    }
    CHECK(cJSON_IsNumber(it) && fabs(it->valuedouble - v) <= 1e-9, "line %d: %s = %g, expected %g", line, k,
          it ? it->valuedouble : NAN, v);
}

static void test_metrics_record(void) {
    char dir[] = "/tmp/st_gpumon_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    st_metrics m;
    CHECK_OK(st_metrics_open(&m, dir, 0, true, true, NULL));
    st_metrics_step s = {0};
    s.step = 10;
    s.loss = 2.5;
    s.gpu = full_sample();
    CHECK_OK(st_metrics_step_write(&m, &s));
    s.step = 20;
    s.gpu.has_nvml = false; /* a driver without NVML: memory only */
    s.gpu.has_clocks = false;
    CHECK_OK(st_metrics_step_write(&m, &s));
    s.step = 30;
    memset(&s.gpu, 0, sizeof s.gpu); /* the CPU, or a line between samples */
    CHECK_OK(st_metrics_step_write(&m, &s));
    CHECK_OK(st_metrics_close(&m));

    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    const char *nvml[] = {"gpu_util", "gpu_mem_util", "gpu_power_w", "gpu_temp_c"};
    const double nvml_v[] = {97, 41, 412.5, 61};
    while (f && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        n++;
        CHECK(o != NULL, "line %d is not JSON: %s", n, line);
        if (!o) continue;
        const bool mem = n <= 2, has_nvml = n == 1;
        check_field(o, "step", 10.0 * n, n);
        check_field(o, "gpu_mem_allocated_mb", mem ? 3 : NAN, n);
        check_field(o, "gpu_mem_peak_mb", mem ? 5 : NAN, n);
        check_field(o, "gpu_mem_used_mb", mem ? 1536 : NAN, n);
        check_field(o, "gpu_mem_total_mb", mem ? 81920 : NAN, n);
        for (int i = 0; i < 4; i++) check_field(o, nvml[i], has_nvml ? nvml_v[i] : NAN, n);
        check_field(o, "gpu_clocks_slowed", has_nvml ? 64 : NAN, n);
        cJSON_Delete(o);
    }
    if (f) fclose(f);
    CHECK(n == 3, "%d lines", n);

    /* TensorBoard: the same numbers under train/ (tests/py/test_tensorboard.py
     * reads event files with TensorBoard's own reader; here, the tags) */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -c -a -e train/gpu_util -e train/gpu_mem_used_mb %s/events.out.tfevents.* >/dev/null", dir);
    CHECK(system(cmd) == 0, "no train/gpu_* tags in the event file");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    test_loader_absent();
    test_monitor_cpu();
    test_format();
    test_metrics_record();
    return st_test_finish("test_gpumon");
}
