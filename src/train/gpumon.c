/* The GPU monitor (see gpumon.h). */
#include "gpumon.h"

#include "core/text.h"

#include <stdio.h>
#include <string.h>

void st_gpu_monitor_open(st_gpu_monitor *m, st_device *dev, const char *nvml_lib) {
    memset(m, 0, sizeof *m);
    m->dev = dev;
    if (!dev) {
        snprintf(m->why, sizeof m->why, "no CUDA device");
        return;
    }
    char what[256];
    snprintf(what, sizeof what, "opening NVML and finding %s there (the GPU monitor)", st_device_name(dev));
    st_device_call_begin(dev, what); /* (NVML's start asks the driver, which may not answer) */
    if (st_nvml_open(&m->nvml, nvml_lib, m->why, sizeof m->why)) {
        const char *pci = st_device_pci_bus_id(dev);
        if (!pci[0] || m->nvml.handle_by_pci(pci, &m->handle) != 0) {
            snprintf(m->why, sizeof m->why, "NVML does not know the device at PCI address %s",
                     pci[0] ? pci : "(unknown)");
            st_nvml_close(&m->nvml);
            m->handle = NULL;
        } else if (m->nvml.event_set_create && m->nvml.event_set_create(&m->xids) == 0 &&
                   m->nvml.register_events(m->handle, ST_NVML_EVENT_XID, m->xids) != 0) {
            m->nvml.event_set_free(m->xids); /* (NOT_SUPPORTED, or no permission) */
            m->xids = NULL;
        }
    }
    st_device_call_end(dev);
}

void st_gpu_monitor_close(st_gpu_monitor *m) {
    if (!m) return;
    if (m->xids) m->nvml.event_set_free(m->xids);
    st_nvml_close(&m->nvml);
    memset(m, 0, sizeof *m);
}

/* The clock event reasons that slow the GPU now (false: NVML cannot say),
 * under the caller's stall watch. */
static bool read_slowed(st_gpu_monitor *m, unsigned long long *slowed) {
    unsigned long long reasons = 0;
    const bool ok = m->nvml.clock_events && m->nvml.clock_events(m->handle, &reasons) == 0;
    *slowed = ok ? reasons & ST_NVML_CLOCKS_SLOWED : 0;
    return ok;
}

static void sample(st_gpu_monitor *m, st_gpu_sample *out) {
    st_device_mem dm;
    if (st_device_memory(m->dev, &dm) == ST_OK) {
        out->has_mem = true;
        out->mem_allocated = dm.allocated;
        out->mem_peak = dm.peak;
        out->mem_used = dm.used;
        out->mem_total = dm.total;
    }
    if (!m->nvml.lib) return;
    st_nvml_util u;
    unsigned int mw = 0, temp = 0;
    if (m->nvml.utilization(m->handle, &u) != 0 || m->nvml.power(m->handle, &mw) != 0 ||
        m->nvml.temperature(m->handle, ST_NVML_TEMPERATURE_GPU, &temp) != 0)
        return; /* e.g. NVML_ERROR_NOT_SUPPORTED on some boards: all four or none */
    out->has_nvml = true;
    out->util = u.gpu;
    out->mem_util = u.memory;
    out->power_w = mw / 1000.0;
    out->temp_c = temp;
    out->has_clocks = read_slowed(m, &out->slowed);
}

/* The driver's and NVML's readings, under the device's stall watch: a GPU
 * that stopped answering can hold them as it holds nvidia-smi. */
void st_gpu_monitor_sample(st_gpu_monitor *m, st_gpu_sample *out) {
    memset(out, 0, sizeof *out);
    if (!m->dev) return;
    char what[256];
    snprintf(what, sizeof what, "reading %s's memory%s (the GPU monitor)", st_device_name(m->dev),
             m->nvml.lib ? ", use, power and temperature through NVML" : "");
    st_device_call_begin(m->dev, what);
    sample(m, out);
    st_device_call_end(m->dev);
}

bool st_gpu_monitor_clocks(st_gpu_monitor *m, unsigned long long *slowed) {
    *slowed = 0;
    if (!m->dev || !m->nvml.lib || !m->nvml.clock_events) return false;
    char what[256];
    snprintf(what, sizeof what, "reading %s's clocks through NVML (the GPU monitor)", st_device_name(m->dev));
    st_device_call_begin(m->dev, what);
    const bool ok = read_slowed(m, slowed);
    st_device_call_end(m->dev);
    return ok;
}

int st_gpu_monitor_xids(st_gpu_monitor *m, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    if (!m->dev || !m->xids) return 0;
    char what[256];
    snprintf(what, sizeof what, "reading %s's Xid errors through NVML", st_device_name(m->dev));
    st_device_call_begin(m->dev, what);
    size_t at = 0;
    int count = 0;
    for (int k = 0; k < 8; k++) { /* (at most 8: the first ones say what happened) */
        st_nvml_event e;
        const st_nvml_ret r = m->nvml.event_wait(m->xids, &e, 0);
        if (r != 0 && r != ST_NVML_ERROR_GPU_IS_LOST) break;
        count++;
        if (r == ST_NVML_ERROR_GPU_IS_LOST) {
            st_appendf(buf, n, &at, "%sthe GPU is lost to NVML (fallen off the bus, or otherwise gone)",
                       at ? "; " : "");
            break;
        }
        const char *meaning = st_nvml_xid_meaning(e.data);
        st_appendf(buf, n, &at, "%sXid %llu%s%s%s", at ? "; " : "", e.data, meaning[0] ? " (" : "", meaning,
                   meaning[0] ? ")" : "");
    }
    st_device_call_end(m->dev);
    return count;
}

const char *st_gpu_sample_format(const st_gpu_sample *s, char *buf, size_t n) {
    const double gib = 1024.0 * 1024 * 1024;
    size_t k = 0;
    buf[0] = '\0';
    if (s->has_mem)
        k += (size_t)snprintf(buf, n, "gpu %.1f/%.1f GiB", (double)s->mem_used / gib, (double)s->mem_total / gib);
    if (s->has_nvml && k < n)
        k += (size_t)snprintf(buf + k, n - k, "%s%.0f%% %.0f W %.0f C", k ? " " : "gpu ", s->util, s->power_w,
                              s->temp_c);
    if (s->has_clocks && s->slowed && k < n)
        snprintf(buf + k, n - k, " slowed"); /* (heat, power: metrics say which) */
    return buf;
}
