/* The limits a cgroup puts on this process besides the host's own
 * (probe.h): its memory cgroup's (st_hw_mem_limit, with its address-space
 * limit) and its CPU quota (st_hw_cpu_quota). A batch scheduler's job
 * (SLURM's --mem) or a container (Docker's --memory and --cpus, a
 * Kubernetes pod's limits) is a cgroup below the hierarchy's root, so each
 * is read where /proc/self/cgroup places this process and on each folder
 * above it up to the hierarchy's mount (v2's unified one and v1's with the
 * controller; mount points and the subtree a mount shows from
 * /proc/self/mountinfo): the tightest binds. The kernel kills a process
 * over its cgroup's memory without a word (SIGKILL), so a plan that reads
 * only /proc/meminfo picks a batch that ends the run that way; a quota of 2
 * CPUs on a 64-core host, where the affinity mask shows 64, throttles 64
 * threads to 2 CPUs' time, stalling each barrier of every product. Reads
 * files only: safe to call after an allocation failed. */
#include "core/rng.h"
#include "probe.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define CG_PATH 1024

/* The first line of a file, or false. */
static bool read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

uint32_t st_hw_boot_hash(void) {
    char id[64] = "";
    if (!read_line("/proc/sys/kernel/random/boot_id", id, sizeof id)) id[0] = '\0';
    return (uint32_t)st_hash_str(id);
}

/* A byte count in a cgroup file; -1 for "max", a value past 2^60 (v1's
 * page-rounded LLONG_MAX), or a file that is not there. */
static int64_t read_bytes(const char *dir, const char *name) {
    char path[CG_PATH + 64], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!read_line(path, buf, sizeof buf) || strncmp(buf, "max", 3) == 0) return -1;
    char *end;
    const long long v = strtoll(buf, &end, 10);
    return end != buf && v >= 0 && v < (1LL << 60) ? (int64_t)v : -1;
}

/* `key`'s value in a memory.stat file (bytes), 0 when it is not there. */
static int64_t read_stat(const char *dir, const char *key) {
    char path[CG_PATH + 64], line[256];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t k = strlen(key);
    int64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ' ') {
            v = (int64_t)strtoll(line + k + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* `key`'s value in a /proc file of "Key:   N kB" lines (bytes), -1 when it
 * is not there. */
static int64_t proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    const size_t k = strlen(key);
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':' && sscanf(line + k + 1, "%lld", &kb) == 1) break;
    fclose(f);
    return kb >= 0 ? (int64_t)kb * 1024 : -1;
}

/* mountinfo's octal escapes (\040 for a space) undone in place. */
static void unescape(char *s) {
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
            p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Whether the comma-separated list holds `word`. */
static bool has_word(const char *list, const char *word) {
    const size_t k = strlen(word);
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        if (n == k && strncmp(p, word, k) == 0) return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* The mount point of the hierarchy (v2: fstype cgroup2; v1: fstype cgroup
 * with `controller` among its options) and the hierarchy path its root shows. */
static bool find_mount(const char *mountinfo, bool v2, const char *controller, char *point, char *root) {
    FILE *f = fopen(mountinfo, "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* id parent major:minor root point options [optional...] - fstype source superoptions */
        char r[CG_PATH], m[CG_PATH];
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2) continue;
        const char *dash = strstr(line, " - ");
        if (!dash) continue;
        char fstype[64], source[256], super[1024] = "";
        if (sscanf(dash + 3, "%63s %255s %1023s", fstype, source, super) < 2) continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0
               : strcmp(fstype, "cgroup") != 0 || !has_word(super, controller))
            continue;
        unescape(r), unescape(m);
        snprintf(point, CG_PATH, "%s", m);
        snprintf(root, CG_PATH, "%s", r);
        found = true;
    }
    fclose(f);
    return found;
}

typedef void (*cg_visit)(const char *dir, bool v2, void *ctx);

/* visit() on each folder of one hierarchy: this process's, then each above
 * it up to the mount. */
static void walk_hierarchy(const char *path, const char *mountinfo, bool v2, const char *controller,
                           cg_visit visit, void *ctx) {
    char point[CG_PATH], root[CG_PATH], dir[CG_PATH * 2 + 2];
    if (!find_mount(mountinfo, v2, controller, point, root)) return;
    /* A mount may show a subtree (a container's): the path is relative to it. */
    const size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (rl && (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))) return;
    const char *rel = path + rl;
    snprintf(dir, sizeof dir, "%s%s", point, strcmp(rel, "/") == 0 ? "" : rel);
    const size_t top = strlen(point);
    for (;;) {
        visit(dir, v2, ctx);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top) break;
        *slash = '\0';
    }
}

/* Each hierarchy /proc/self/cgroup (here proc_cgroup) names that holds
 * `controller`: v2's unified one, and v1's with the controller. */
static void walk(const char *proc_cgroup, const char *mountinfo, const char *controller, cg_visit visit,
                 void *ctx) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return;
    char line[CG_PATH + 128];
    while (fgets(line, sizeof line, f)) {
        /* hierarchy-id:controllers:path */
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0';
        const char *ctrl = c1 + 1, *path = c2 + 1;
        const bool v2 = strcmp(line, "0") == 0 && ctrl[0] == '\0';
        if (v2 || has_word(ctrl, controller)) walk_hierarchy(path, mountinfo, v2, controller, visit, ctx);
    }
    fclose(f);
}

static void visit_memory(const char *dir, bool v2, void *ctx) {
    st_hw_mem_limit *out = ctx;
    const char *limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
    const int64_t lim = read_bytes(dir, limit_file);
    if (lim < 0) return;
    if (out->smallest < 0 || lim < out->smallest) out->smallest = lim;
    /* what the group holds, its page cache counted free: the kernel
     * reclaims file pages, active as well as inactive, before it kills a
     * process of the group (a 1 GiB group holding 700 MiB of a file read
     * three times, all of it active, gave a process 900 MiB, where only
     * inactive pages counted free made that 0.31 GiB), as the host's
     * MemAvailable counts them; shared memory (tmpfs) is on neither list */
    const int64_t used = read_bytes(dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    const int64_t cache = read_stat(dir, v2 ? "inactive_file" : "total_inactive_file") +
                          read_stat(dir, v2 ? "active_file" : "total_active_file");
    int64_t room = lim - (used > 0 ? used : 0) + (cache < used ? cache : 0);
    if (room < 0) room = 0;
    if (room > lim) room = lim;
    if (out->headroom < 0 || room < out->headroom) { /* the level that binds first */
        out->limit = lim;
        out->headroom = room;
        snprintf(out->by, sizeof out->by, "the memory cgroup %s (%s)", dir, limit_file);
    }
}

void st_hw_mem_limit_cgroup(const char *proc_cgroup, const char *mountinfo, st_hw_mem_limit *out) {
    walk(proc_cgroup, mountinfo, "memory", visit_memory, out);
}

/* v2: cpu.max, "QUOTA PERIOD" or "max PERIOD"; v1: cpu.cfs_quota_us (-1:
 * none) over cpu.cfs_period_us. */
static void visit_cpu(const char *dir, bool v2, void *ctx) {
    st_hw_cpu_quota *out = ctx;
    char path[CG_PATH + 64], buf[96];
    double quota = -1, period = -1;
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        if (!read_line(path, buf, sizeof buf) || sscanf(buf, "%lf %lf", &quota, &period) != 2) return;
    } else {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
        if (!read_line(path, buf, sizeof buf) || sscanf(buf, "%lf", &quota) != 1) return;
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        if (!read_line(path, buf, sizeof buf) || sscanf(buf, "%lf", &period) != 1) return;
    }
    if (!(quota > 0 && period > 0)) return;
    const double cpus = quota / period;
    if (out->cpus < 0 || cpus < out->cpus) {
        out->cpus = cpus;
        snprintf(out->by, sizeof out->by, "the CPU quota of cgroup %s (%s)", dir,
                 v2 ? "cpu.max" : "cpu.cfs_quota_us");
    }
}

void st_hw_cpu_quota_cgroup(const char *proc_cgroup, const char *mountinfo, st_hw_cpu_quota *out) {
    walk(proc_cgroup, mountinfo, "cpu", visit_cpu, out);
}

void st_hw_cpu_quota_get(st_hw_cpu_quota *out) {
    out->cpus = -1;
    out->by[0] = '\0';
    st_hw_cpu_quota_cgroup("/proc/self/cgroup", "/proc/self/mountinfo", out);
}

void st_hw_mem_limit_get(st_hw_mem_limit *out) {
    out->limit = out->headroom = out->smallest = out->proc_room = -1;
    out->by[0] = '\0';
    st_hw_mem_limit_cgroup("/proc/self/cgroup", "/proc/self/mountinfo", out);
    out->shared_headroom = out->headroom;
    int64_t lim, vm;
    if (!st_hw_address_space(&lim, &vm)) return;
    /* the address space counts every mapping: what is mapped already is
     * spent, and what the run maps beyond what it uses will be, kept out of
     * the room (where OpenBLAS's buffers did not fit, it waited for ever):
     * one per computing thread and two more */
    const int t = omp_get_max_threads();
    const int64_t reserve = st_hw_unused_mappings(t, t + 2);
    const int64_t room = lim > vm + reserve ? lim - vm - reserve : 0;
    out->proc_room = room;
    if (out->smallest < 0 || lim < out->smallest) out->smallest = lim;
    if (out->headroom < 0 || room < out->headroom) {
        out->limit = lim;
        out->headroom = room;
        snprintf(out->by, sizeof out->by, "this process's address-space limit (ulimit -v %lld)",
                 (long long)(lim / 1024));
    }
}

bool st_hw_address_space(int64_t *limit, int64_t *mapped) {
    struct rlimit rl;
    *limit = *mapped = -1;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
    const int64_t vm = proc_kb("/proc/self/status", "VmSize");
    *limit = (int64_t)rl.rlim_cur;
    *mapped = vm > 0 ? vm : 0;
    return true;
}

int64_t st_hw_unused_mappings(int threads, int buffers) {
    const int64_t mib = 1 << 20;
    return (int64_t)buffers * 130 * mib + (int64_t)threads * 72 * mib;
}

size_t st_hw_mem_state(char *buf, size_t n) {
    if (n) buf[0] = '\0';
    const int64_t rss = proc_kb("/proc/self/status", "VmRSS"),
                  avail = proc_kb("/proc/meminfo", "MemAvailable");
    if (rss < 0 || avail < 0) return 0;
    st_hw_mem_limit l;
    st_hw_mem_limit_get(&l);
    const double gib = 1024.0 * 1024 * 1024;
    const bool limited = l.headroom >= 0 && l.headroom < avail;
    const int k = snprintf(buf, n, "this process holds %.2f GiB and may take %.2f GiB more, as %s allows",
                           (double)rss / gib, (double)(limited ? l.headroom : avail) / gib,
                           limited ? l.by : "the host's available memory");
    return k > 0 ? (size_t)k : 0;
}
