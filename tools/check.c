/* `scaletrain check [CONFIG] [--set key=value]...`: is this machine ready to
 * train? One line per check, "ok", "FAIL" (with the fix), "warn" (works,
 * but looks wrong; with a hint) or "skip" (not in this build), and exit 0
 * only when nothing failed:
 *   cpu      cores and memory (the hardware probe, src/hw/probe.h)
 *   mpi      this build has MPI, mpirun is on PATH and says its version
 *   ddp      a 2-rank data-parallel self-test through `scaletrain launch`: a
 *            tiny gpt on a generated token file for 10 steps, whose weights
 *            must equal one rank's with the same global batch (the ranks
 *            agreed on the model and their all-reduces average right)
 *   allreduce  a 16 MiB all-reduce on 2 ranks: every element right, and
 *            the bus bandwidth against what the planner assumes for the
 *            link (src/hw/linkcheck.h), flagged (warn) below 70% of it
 *            (tools/check_comm.c)
 *   data     the config's training (and validation) data opens and is valid
 *   out_dir  the config's train.out_dir is writable (or can be created), and
 *            no run holds it (out_dir/run.lock: a train there would be refused)
 *   disk     room there for the run's checkpoints and final weights (FAIL
 *            when one checkpoint does not fit, or the ones a run of train.steps
 *            commits at least; warn when the kept ones may not)
 *   cuda, nccl  what this build can use and what the probe found
 *   gpu ddp  with CUDA devices: the ddp self-test on every local GPU (a rank
 *            each through the launcher, train.device cuda; without MPI one
 *            rank on the first, the line saying what was left) against one
 *            CPU rank with the same global batch, both in fp32; skipped,
 *            saying so, where the 1-rank CPU reference failed
 *   gpu comm with two or more: a 64 MiB all-reduce of device memory through
 *            NCCL, checked element by element, its bus bandwidth against the
 *            link the planner assumes between the GPUs (warn below 70%)
 * Not here: the hardware probe of src/hw (GPUs, NVML links), the presets. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "comm/comm.h"
#include "core/atomic_file.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/launcher.h"
#include "core/text.h"
#include "train/session.h"
#ifdef ST_HAVE_CUDA
#include "cuda/cuda.h"
#endif
#include "core/safetensors.h"
#include "data/dataset.h"
#include "data/tokens.h"
#include "hw/device.h"
#include "hw/linkcheck.h"
#include "hw/probe.h"
#include "hw/runspec.h"
#include "train/checkpoint.h"

typedef struct report {
    int failed;
} report;

static void line(report *r, const char *mark, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void line(report *r, const char *mark, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%-5s %-9s ", mark, what);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!strcmp(mark, "FAIL")) r->failed++;
}

/* What a failed run said that matters, for a FAIL line (at most n - 1
 * bytes of buf, lines joined by " | "): its lines that name an error
 * (scaletrain's, mpirun's, NCCL's), else its last three. (A run's output
 * begins with its settings: the first 300 bytes these lines once quoted
 * held none of its error.) */
static const char *gist(const char *t, char *buf, size_t n) {
    buf[0] = '\0';
    if (!t) return buf;
    size_t len = 0;
    for (int pass = 0; pass < 2 && !len; pass++) {
        const char *from = t;
        if (pass == 1) { /* (no error line: the start of the last three) */
            const char *end = t + strlen(t);
            while (end > t && end[-1] == '\n')
                end--;
            from = end;
            for (int k = 0; k < 3 && from > t; k++)
                for (from--; from > t && from[-1] != '\n';)
                    from--;
        }
        for (const char *p = from; *p && len + 1 < n;) {
            const char *e = strchr(p, '\n');
            const size_t l = e ? (size_t)(e - p) : strlen(p);
            char one[1024];
            snprintf(one, sizeof one, "%.*s", (int)(l < sizeof one ? l : sizeof one - 1), p);
            if (one[0] && (pass == 1 || strcasestr(one, "error")))
                len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " | " : "", one);
            if (len >= n) len = n - 1;
            p = e ? e + 1 : p + l;
        }
    }
    return buf;
}

/* CPU cores and memory from the hardware probe (src/hw/probe.h). */
static void check_cpu(report *r, const st_hw_info *h, bool probed) {
    if (!probed) {
        line(r, "FAIL", "cpu", "cannot read /proc: %s; fix: run on Linux with /proc mounted", st_last_error());
        return;
    }
    line(r, "ok", "cpu",
         "%s, %d core%s (%d threads, %d usable here%s%s), memory %.1f GiB, %.1f GiB available%s%s%s",
         h->cpu_model, h->cores, h->cores == 1 ? "" : "s", h->threads, h->allowed,
         h->cpu_limit_by[0] ? ", as " : "", h->cpu_limit_by, (double)h->mem_total / (1 << 30),
         (double)h->mem_avail / (1 << 30), h->mem_limit_by[0] ? " as " : "", h->mem_limit_by,
         h->mem_limit_by[0] ? " allows" : "");
}

static bool check_mpi(report *r, const char *tmp) {
#ifdef ST_NO_MPI
    line(r, "FAIL", "mpi",
         "this build has no MPI (no mpicc when it was built); fix: apt-get install "
         "libopenmpi-dev openmpi-bin, then make clean && make");
    return false;
#else
    char mpirun[PATH_MAX], out[PATH_MAX];
    if (!st_cli_find_on_path("mpirun", mpirun, sizeof mpirun)) {
        line(r, "FAIL", "mpi", "mpirun is not on PATH; fix: apt-get install openmpi-bin (or put it on PATH)");
        return false;
    }
    snprintf(out, sizeof out, "%s/mpirun-version", tmp);
    char *const av[] = {mpirun, "--version", NULL};
    int rc = st_cli_spawn(av, out, out, 30);
    char *text = st_cli_read_file(out);
    if (rc != 0 || !text) {
        line(r, "FAIL", "mpi",
             "%s --version exited %d: %.200s; fix: reinstall OpenMPI (apt-get install --reinstall "
             "openmpi-bin)",
             mpirun, rc, text ? text : "");
        free(text);
        return false;
    }
    text[strcspn(text, "\n")] = '\0';
    line(r, "ok", "mpi", "%s (%s); this build has MPI", mpirun, text);
    free(text);
    return true;
#endif
}

/* Largest relative difference of two weight files, max|a-b| / (max|a| + 1e-6)
 * over tensors; -1 with a message in why when they cannot be compared. */
static double weights_diff(const char *pa, const char *pb, char *why, size_t n) {
    st_safetensors *a = NULL, *b = NULL;
    double worst = -1;
    float *x = NULL, *y = NULL;
    if (st_safetensors_open(pa, &a) != ST_OK || st_safetensors_open(pb, &b) != ST_OK) {
        snprintf(why, n, "%s", st_last_error());
        goto done;
    }
    worst = 0;
    for (int i = 0; i < st_safetensors_count(a) && worst >= 0; i++) {
        const st_safetensors_entry *ea = st_safetensors_entry_at(a, i),
                                   *eb = st_safetensors_find(b, ea->name);
        if (!eb || eb->count != ea->count) {
            snprintf(why, n, "%s: missing or of another size in %s", ea->name, pb);
            worst = -1;
            break;
        }
        float *nx = realloc(x, (size_t)ea->count * sizeof *x);
        float *ny = nx ? realloc(y, (size_t)ea->count * sizeof *y) : NULL;
        if (nx) x = nx;
        if (ny) y = ny;
        if (!nx || !ny || st_safetensors_read_f32(a, ea->name, x, ea->count) != ST_OK ||
            st_safetensors_read_f32(b, ea->name, y, ea->count) != ST_OK) {
            snprintf(why, n, "%s: %s", ea->name, nx && ny ? st_last_error() : "out of memory");
            worst = -1;
            break;
        }
        double d = 0, m = 0;
        for (int64_t k = 0; k < ea->count; k++) { /* (a NaN is passed over, as fmax would) */
            const double dk = fabs((double)x[k] - (double)y[k]), mk = fabs((double)x[k]);
            if (dk > d) d = dk;
            if (mk > m) m = mk;
        }
        const double rel = d / (m + 1e-6);
        if (!(rel <= worst)) worst = rel; /* NaN stays */
    }
done:
    free(x);
    free(y);
    st_safetensors_close(a);
    st_safetensors_close(b);
    return worst;
}

/* 10 steps of the self-tests' tiny gpt on tmp/train.tokens: `ranks` ranks
 * (1: no launcher) on `device` (cpu or cuda), a global batch of `batch`,
 * into tmp/NAME, its output in *log (the caller frees). The exit status, -2
 * when it ran out of time. */
static int tiny_run(const char *tmp, int ranks, const char *device, int batch, const char *name, char **log) {
    char self[PATH_MAX], tokens[PATH_MAX], data[4 * PATH_MAX + 16], out[4 * PATH_MAX + 32], logf[PATH_MAX],
        np[16], dev[32], bs[48], q[4 * PATH_MAX], qo[4 * PATH_MAX];
    st_cli_self_path(self, sizeof self);
    snprintf(tokens, sizeof tokens, "%s/train.tokens", tmp);
    snprintf(logf, sizeof logf, "%s/%s", tmp, name); /* (as YAML: the paths as they are) */
    st_cfg_quote(tokens, q, sizeof q);
    st_cfg_quote(logf, qo, sizeof qo);
    snprintf(data, sizeof data, "data.train=%s", q);
    snprintf(out, sizeof out, "train.out_dir=%s", qo);
    snprintf(logf, sizeof logf, "%s/%s.log", tmp, name);
    snprintf(np, sizeof np, "%d", ranks);
    snprintf(dev, sizeof dev, "train.device=%s", device);
    snprintf(bs, sizeof bs, "train.batch_size=%d", batch);
    char *sets[] = {"--set",   "model.type=gpt",
                    "--set",   "data.type=tokens",
                    "--set",   data,
                    "--set",   "data.val=",
                    "--set",   "model.n_layer=1",
                    "--set",   "model.n_head=2",
                    "--set",   "model.n_embd=16",
                    "--set",   "model.block_size=16",
                    "--set",   bs,
                    "--set",   "train.steps=10",
                    "--set",   "train.threads=1",
                    "--set",   "data.num_workers=0",
                    "--set",   "log.peak_gflops=10",
                    "--set",   "dist.timeout_s=60",
                    "--set",   "dist.bucket_cap_mb=0.01",
                    "--set",   "precision=fp32", /* exact on both sides: auto is bf16 on a GPU */
                    "--set",   dev,
                    "--set",   out,
                    "--quiet", "--json"};
    const int ns = (int)(sizeof sets / sizeof sets[0]);
    char *av[8 + sizeof sets / sizeof sets[0]];
    int k = 0;
    av[k++] = self;
    if (ranks > 1) av[k++] = "launch", av[k++] = "-n", av[k++] = np;
    av[k++] = "train";
    for (int i = 0; i < ns; i++)
        av[k++] = sets[i];
    av[k] = NULL;
    const int rc = st_cli_spawn(av, logf, logf, 120);
    *log = st_cli_read_file(logf);
    return rc;
}

/* tmp/a's and tmp/b's final weights within the self-tests' tolerance:
 * "" (and *d set) when they are, else why in why. */
static bool same_weights(const char *tmp, const char *a, const char *b, double *d, char *why, size_t n) {
    char w1[PATH_MAX + 32], w2[PATH_MAX + 32];
    snprintf(w1, sizeof w1, "%s/%s/model.safetensors", tmp, a);
    snprintf(w2, sizeof w2, "%s/%s/model.safetensors", tmp, b);
    why[0] = '\0';
    *d = weights_diff(w1, w2, why, n);
    return *d >= 0 && *d <= 1e-3; /* tests/e2e/ddp_equivalence.sh's tolerance for the gpt */
}

/* The same self-test on the GPUs: every local GPU a rank through the
 * launcher (one GPU, or no MPI: a single rank on the first), train.device
 * cuda, against one CPU rank with the same global batch: the kernels, NCCL
 * between the GPUs and the averaging all agree. Needs the 1-rank CPU
 * reference (selftest_reference): without it, a failure would be the CPU's
 * blamed on the GPUs. */
static void check_gpu_ddp(report *r, const char *tmp, int gpus, bool mpi) {
    char ref[PATH_MAX + 32];
    snprintf(ref, sizeof ref, "%s/n1/model.safetensors", tmp);
    if (!st_path_is_file(ref)) {
        line(r, "skip", "gpu ddp",
             "the GPU self-test needs the 1-rank CPU run's data and weights (ddp, above)");
        return;
    }
    const int ranks = mpi ? gpus : 1;
    char *t = NULL;
    const int batch = 8 * ranks;
    int rc = ranks == 1 ? 0 : tiny_run(tmp, 1, "cpu", batch, "gref", &t);
    if (rc != 0) {
        char g[1200];
        line(r, "FAIL", "gpu ddp", "the 1-rank reference run (batch %d) exited %d: %s", batch, rc,
             gist(t, g, sizeof g));
        free(t);
        return;
    }
    free(t);
    rc = tiny_run(tmp, ranks, "cuda", batch, "gpu", &t);
    if (rc != 0) {
        char g[1200];
        line(r, "FAIL", "gpu ddp",
             "%d rank%s on the GPU%s (train.device cuda) %s %d: %s; fix: see the message (nvidia-smi "
             "shows "
             "whether other processes hold the GPUs)",
             ranks, ranks == 1 ? "" : "s", ranks == 1 ? "" : "s",
             rc == -2 ? "ran out of time after 120 s, exit" : "exited", rc, gist(t, g, sizeof g));
        free(t);
        return;
    }
    free(t);
    double d;
    char why[512], unchecked[128] = "";
    if (ranks < gpus)
        snprintf(unchecked, sizeof unchecked, "; the %d GPUs as ranks (NCCL between them) need MPI (above)",
                 gpus);
    if (!same_weights(tmp, ranks == 1 ? "n1" : "gref", "gpu", &d, why, sizeof why))
        line(r, "FAIL", "gpu ddp",
             "%d GPU rank%s and 1 CPU rank disagree after 10 steps (%s%s%g, tolerance 0.001); fix: run the "
             "CUDA tests (scripts/gpu-session.sh) on this machine",
             ranks, ranks == 1 ? "" : "s", why, why[0] ? "; " : "relative difference ", d);
    else
        line(r, "ok", "gpu ddp",
             "%d rank%s on %d GPU%s x 10 steps of a tiny gpt: the weights equal 1 CPU rank's (relative "
             "difference %.2g, tolerance 0.001)%s",
             ranks, ranks == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s", d, unchecked);
}

/* The self-tests' data (a token file from 200 lines of text) and their
 * reference: 10 steps of a tiny gpt on 1 CPU rank, which needs no MPI
 * (tmp/n1). false, with a FAIL line under ddp, where either fails. */
static bool selftest_reference(report *r, const char *tmp) {
    char text[PATH_MAX], tokens[PATH_MAX];
    snprintf(text, sizeof text, "%s/text.txt", tmp);
    snprintf(tokens, sizeof tokens, "%s/train.tokens", tmp);
    FILE *f = fopen(text, "w");
    for (int i = 0; f && i < 200; i++)
        fprintf(f, "the quick brown fox %d jumps over the lazy dog %d\n", i, i * 7 % 13);
    if (!f || fclose(f) != 0) {
        line(r, "FAIL", "ddp", "cannot write %s: %s; fix: set TMPDIR to a writable directory", text,
             strerror(errno));
        return false;
    }
    const char *paths[] = {text};
    int64_t count;
    if (st_tokens_from_text(paths, 1, tokens, &count) != ST_OK) {
        line(r, "FAIL", "ddp", "%s; fix: set TMPDIR to a writable directory", st_last_error());
        return false;
    }
    char *t = NULL;
    const int rc = tiny_run(tmp, 1, "cpu", 8, "n1", &t);
    char g[1200];
    if (rc != 0) line(r, "FAIL", "ddp", "the 1-rank reference run exited %d: %s", rc, gist(t, g, sizeof g));
    free(t);
    return rc == 0;
}

/* 10 steps of a tiny gpt on 2 ranks through the launcher, against the
 * 1-rank reference (selftest_reference). */
static void check_ddp(report *r, const char *tmp) {
    char *t = NULL;
    const int rc = tiny_run(tmp, 2, "cpu", 8, "n2", &t);
    if (rc != 0) {
        char g[1200];
        line(r, "FAIL", "ddp",
             "`scaletrain launch -n 2 train` %s %d: %s; fix: see the message (as root, "
             "OpenMPI needs --allow-run-as-root, which launch adds)",
             rc == -2 ? "ran out of time after 120 s, exit" : "exited", rc, gist(t, g, sizeof g));
        free(t);
        return;
    }
    const char *js = t ? st_cli_last_json_line(t) : NULL;
    if (!js || !strstr(js, "\"ranks\":2")) {
        line(r, "FAIL", "ddp", "the 2-rank run did not report 2 ranks: %.300s", js ? js : "(no JSON line)");
        free(t);
        return;
    }
    free(t);
    double d;
    char why[512];
    if (!same_weights(tmp, "n1", "n2", &d, why, sizeof why))
        line(r, "FAIL", "ddp",
             "2 ranks and 1 rank disagree after 10 steps (%s%s%g, tolerance 0.001); fix: check that "
             "every node runs the same build and OpenMPI version",
             why, why[0] ? "; " : "relative difference ", d);
    else
        line(r, "ok", "ddp",
             "2 ranks (scaletrain launch) x 10 steps of a tiny gpt: the weights equal 1 rank's "
             "(relative difference %.2g, tolerance 0.001)",
             d);
}

/* What `check --allreduce-worker` printed (tools/check_comm.c). */
typedef struct allreduce_result {
    int rc;         /* the launch's exit status */
    char *log;      /* its output (the caller frees) */
    const char *js; /* its last JSON line, in log (cut into lines to find it); NULL when none */
    char said[1200]; /* what it said that matters (gist), taken before log was cut */
    double ms, busbw, wrong, bytes, ranks;
} allreduce_result;

/* The all-reduce worker on `ranks` ranks through the launcher (with --nccl:
 * device memory through NCCL), its output in tmp/NAME.log. */
static void run_allreduce(const char *tmp, int ranks, bool nccl, const char *name, allreduce_result *o) {
    char self[PATH_MAX], log[PATH_MAX], np[16];
    st_cli_self_path(self, sizeof self);
    snprintf(log, sizeof log, "%s/%s.log", tmp, name);
    snprintf(np, sizeof np, "%d", ranks);
    char *const av[] = {self, "launch", "-n", np, "check", "--allreduce-worker", nccl ? "--nccl" : NULL,
                        NULL};
    memset(o, 0, sizeof *o);
    o->wrong = -1;
    o->rc = st_cli_spawn(av, log, log, 120);
    o->log = st_cli_read_file(log);
    gist(o->log, o->said, sizeof o->said);
    o->js = o->log ? st_cli_last_json_line(o->log) : NULL;
    const char *p;
    if (o->js && (p = strstr(o->js, "\"ms\":"))) o->ms = atof(p + 5);
    if (o->js && (p = strstr(o->js, "\"busbw_gbs\":"))) o->busbw = atof(p + 12);
    if (o->js && (p = strstr(o->js, "\"wrong\":"))) o->wrong = atof(p + 8);
    if (o->js && (p = strstr(o->js, "\"bytes\":"))) o->bytes = atof(p + 8);
    if (o->js && (p = strstr(o->js, "\"ranks\":"))) o->ranks = atof(p + 8);
}

/* A 16 MiB all-reduce on 2 ranks (tools/check_comm.c): right results, and
 * the time against the planner's ring model on the link the test crosses.
 * The test all-reduces host memory through MPI, so that link is the CPU
 * preset's shared memory even where there are GPUs (their NVLink or PCIe
 * is the `gpu comm` line's, through NCCL). Below ST_LINK_OK_FRACTION of it:
 * warn, plans for this machine are optimistic about communication. */
/* (gpu_comm: a `gpu comm` line follows that compares the GPUs' link) */
static void check_allreduce(report *r, const char *tmp, const st_hw_info *h, bool probed, bool gpu_comm) {
    allreduce_result a;
    run_allreduce(tmp, 2, false, "allreduce", &a);
    const int rc = a.rc;
    char *t = a.log;
    const char *js = a.js;
    const double ms = a.ms, bus = a.busbw, wrong = a.wrong, bytes = a.bytes, ranks = a.ranks;
    if (rc != 0 || !js || wrong != 0)
        line(r, "FAIL", "allreduce",
             "2-rank all-reduce test %s %d: %s; fix: see the message, and run the same OpenMPI on every "
             "node",
             wrong > 0 ? "gave wrong sums, exit" : "exited", rc, js ? js : a.said);
    else {
        st_hw_device cpu;
        st_device_preset("cpu", &cpu);
        st_link_check lc;
        st_link_check_allreduce(&cpu, bytes, (int)ranks, ms / 1e3, ST_LINK_OK_FRACTION, &lc);
        char gpus[256] = "";
        if (gpu_comm) {
            st_hw_device g;
            st_device_local(h, 0, &g);
            snprintf(gpus, sizeof gpus,
                     "; the %.0f GB/s of %s the planner assumes between the GPUs is the `gpu comm` line's",
                     g.link_bw / 1e9, g.link);
        }
        char low[256] = "";
        if (!lc.ok)
            snprintf(low, sizeof low,
                     ", below %.0f%%: plans for this machine are optimistic about communication; are other "
                     "processes busy on these cores? (OMP_WAIT_POLICY=PASSIVE keeps idle OpenMP threads off them)",
                     100 * ST_LINK_OK_FRACTION);
        line(r, lc.ok ? "ok" : "warn", "allreduce",
             "2 ranks, 16 MiB: %.2f ms, bus bandwidth %.2f GB/s, every element right; %s%s%s", ms, bus, lc.text,
             low, gpus);
    }
    free(t);
}

/* A 64 MiB all-reduce of device memory over every local GPU through NCCL
 * (tools/check_comm.c --nccl): right results, and the time against the
 * planner's ring model on the link between the GPUs (NVLink or PCIe, from
 * the probe). Below ST_LINK_OK_FRACTION of it: warn, with where to look. */
static void check_gpu_allreduce(report *r, const char *tmp, int gpus, const st_hw_info *h, bool probed) {
    allreduce_result a;
    run_allreduce(tmp, gpus, true, "nccl", &a);
    const int rc = a.rc;
    char *t = a.log;
    const char *js = a.js;
    const double ms = a.ms, bus = a.busbw, wrong = a.wrong, bytes = a.bytes;
    if (rc != 0 || !js || wrong != 0 || !strstr(js, "\"backend\":\"nccl\"")) {
        line(r, "FAIL", "gpu comm",
             "%d-GPU NCCL all-reduce test %s %d: %s; fix: see the message (NCCL_DEBUG=INFO says more)", gpus,
             wrong > 0 ? "gave wrong sums, exit" : "exited", rc, js ? js : a.said);
        free(t);
        return;
    }
    free(t);
    if (!probed || h->n_gpus < 2 || !h->nvml) { /* no NVML: the link between them is not known */
        line(r, "ok", "gpu comm",
             "%d GPUs, %.0f MiB through NCCL: %.2f ms, bus bandwidth %.2f GB/s, every element right (the "
             "link between the GPUs was not probed%s: no comparison)",
             gpus, bytes / (1 << 20), ms, bus, probed && h->n_gpus > 1 ? ", NVML is not available" : "");
        return;
    }
    st_hw_device g;
    st_device_local(h, 0, &g);
    st_link_check lc;
    st_link_check_allreduce(&g, bytes, gpus, ms / 1e3, ST_LINK_OK_FRACTION, &lc);
    line(r, lc.ok ? "ok" : "warn", "gpu comm",
         "%d GPUs, %.0f MiB through NCCL: %.2f ms, bus bandwidth %.2f GB/s, every element right; %s%s", gpus,
         bytes / (1 << 20), ms, bus, lc.text,
         lc.ok ? ""
               : ", below 70%: plans for this machine are optimistic about communication; NCCL_DEBUG=INFO "
                 "prints the transport NCCL chose (P2P, SHM or NET) and `nvidia-smi topo -m` the links; on "
                 "PCIe machines the guides check that peer-to-peer is on (ACS off on PCIe switches, IOMMU in "
                 "passthrough) and that no other process holds the GPUs");
}

static void check_data(report *r, const st_config *c) {
    const bool tokens = !strcmp(c->data.type, "tokens");
    if (st_config_validate_data(c, false) !=
        ST_OK) { /* a data path left at Fashion-MNIST's for another data.type */
        line(r, "FAIL", "data", "%s", st_last_error());
        return;
    }
    const char *sets[2] = {c->data.train, c->data.val};
    const char *labels[2] = {c->data.train_labels, c->data.val_labels};
    const bool split = c->data.val_split > 0;
    bool opened = true; /* every file opened: the run's own checks of data and model follow */
    for (int k = 0; k < 2; k++) {
        if (!sets[k][0] || (k == 1 && split)) continue;
        st_dataset d = {0}, v = {0};
        const char *key = k ? "data.val" : "data.train";
        st_status s =
            tokens ? st_data_key(st_dataset_open_tokens(sets[k], c->model.block_size, &d), sets[k], key)
                   : st_dataset_open_pair(c->data.type, sets[k], labels[k], c->model.num_classes, key, &d);
        const char *what = k ? "val data" : "data";
        opened &= s == ST_OK;
        if (s != ST_OK) {
            /* (the package's hint where the file that failed is its: the error names it) */
            const bool fm =
                !strcmp(c->data.type, "idx") && strstr(st_last_error(), "/usr/share/datasets/fashion-mnist/");
            /* (a file that cannot be read: where to point; any other error says its own fix) */
            if (fm || s == ST_ERR_IO)
                line(r, "FAIL", what, "%s; fix: %s", st_last_error(),
                     fm ? "apt-get install dataset-fashion-mnist"
                        : "point data.train / data.val at readable files");
            else
                line(r, "FAIL", what, "%s", st_last_error());
        } else if (split && (s = st_dataset_split(&d, c->data.val_split, (uint64_t)c->data.val_split_seed,
                                                  "data.val_split", &v)) != ST_OK) {
            opened = false; /* (said here: the run's checks below would say it again) */
            line(r, "FAIL", "val data", "%s", st_last_error());
        } else if (tokens) {
            line(r, "ok", what, "%s: %lld samples of %lld tokens, vocabulary %lld", sets[k], (long long)d.n,
                 (long long)d.seq_len, (long long)d.vocab_size);
        } else {
            line(r, "ok", what, "%s: %lld images %lldx%lldx%lld, %lld classes", sets[k], (long long)d.n,
                 (long long)d.h, (long long)d.w, (long long)d.c, (long long)d.num_classes);
        }
        if (s == ST_OK && split)
            line(r, "ok", "val data", "%lld samples held out of data.train (data.val_split %g)",
                 (long long)v.n, c->data.val_split);
        if (s == ST_OK && k == 0 && d.n < c->train.batch_size &&
            c->data.drop_last) /* (as train refuses it) */
            line(r, "FAIL", "batch",
                 "%lld training samples%s, fewer than one batch (train.batch_size %lld); fix: a smaller "
                 "batch, "
                 "more data, or data.drop_last: false",
                 (long long)d.n, split ? " after data.val_split" : "", (long long)c->train.batch_size);
        st_dataset_free(&v);
        st_dataset_free(&d);
    }
    /* The run's own checks of the two together and against the model (the
     * vocabulary against model.vocab_size, the validation images' shape and
     * dtype against the training's, the classes): each file alone opened,
     * and the run then refused them */
    if (opened && st_session_check_data(c) != ST_OK) line(r, "FAIL", "data", "%s", st_last_error());
}

/* A run's refusal as check says it: without train's closing "(nothing was
 * written)", which check, writing nothing anyway, has no need of. */
static const char *without_nothing_written(const char *msg) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s", msg);
    const char *tail = " (nothing was written)";
    const size_t n = strlen(buf), t = strlen(tail);
    if (n >= t && strcmp(buf + n - t, tail) == 0) buf[n - t] = '\0';
    return buf;
}

/* out_dir, or the nearest existing directory above it, takes a new file. */
static void check_out_dir(report *r, const char *out_dir) {
    char dir[ST_CFG_STR + 8], probe[ST_CFG_STR + 64], who[512] = "", gone[ST_CFG_STR + 256];
    if (st_cwd_gone(out_dir[0] ? out_dir : ".", gone, sizeof gone)) {
        line(r, "FAIL", "out_dir", "train.out_dir %s", gone);
        return;
    }
    snprintf(dir, sizeof dir, "%s", out_dir[0] ? out_dir : ".");
    struct stat st;
    bool exists = stat(dir, &st) == 0;
    if (exists && !S_ISDIR(st.st_mode)) {
        line(r, "FAIL", "out_dir", "%s is not a directory; fix: set train.out_dir to a directory", dir);
        return;
    }
    while (!exists) { /* the nearest ancestor that exists */
        /* Only a missing one (or one under a file) is looked above; any other failure (no search
         * permission, a stale network handle) is the answer, and "." or
         * "/" has nothing above it. */
        if ((errno != ENOENT && errno != ENOTDIR) || !strcmp(dir, ".") || !strcmp(dir, "/")) {
            line(r, "FAIL", "out_dir",
                 "train.out_dir %s cannot be created: %s cannot be looked at (%s); fix: set "
                 "train.out_dir to a directory this user can write",
                 out_dir[0] ? out_dir : ".", dir, strerror(errno));
            return;
        }
        char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
        exists = stat(dir, &st) == 0;
        if (exists && !S_ISDIR(st.st_mode)) {
            line(r, "FAIL", "out_dir",
                 "train.out_dir %s cannot be created: %s is not a directory; fix: set "
                 "train.out_dir to a directory path",
                 out_dir, dir);
            return;
        }
    }
    snprintf(probe, sizeof probe, "%s/.scaletrain-check-%ld", dir, (long)getpid());
    FILE *f = fopen(probe, "w");
    bool ok = f && fputs("ok\n", f) >= 0;
    if (f) ok &= fclose(f) == 0;
    const int err = errno;
    unlink(probe);
    if (!ok)
        line(r, "FAIL", "out_dir",
             "cannot write in %s (train.out_dir %s): %s; fix: set train.out_dir to a "
             "writable directory",
             dir, out_dir, strerror(err));
    else if (!strcmp(dir, out_dir) && st_ckpt_out_dir_in_use(out_dir, who, sizeof who))
        line(r, "FAIL", "out_dir",
             "%s is in use by another run (%s: it holds %s/run.lock), and a train there now is refused; fix: "
             "wait for it to end, or set train.out_dir to another directory",
             out_dir, who[0] ? who : "it does not say who", out_dir);
    else if (!strcmp(dir, out_dir) && st_ckpt_folder_check(out_dir) != ST_OK) {
        line(r, "FAIL", "out_dir", "%s", without_nothing_written(st_last_error()));
        st_clear_error();
    } else if (!strcmp(dir, out_dir)) {
        /* what a new run there finds: an unfinished run's checkpoints (a
         * warning: --resume auto continues it, and check does not know which
         * is meant), or checkpoints the storage does not read (both refuse) */
        int aside;
        int64_t aside_step;
        const st_status s = st_ckpt_new_run_check(out_dir, NULL, &aside, &aside_step);
        if (s == ST_ERR_CONFIG)
            line(r, "warn", "out_dir", "%s is writable, and a new run there is refused: %s", out_dir,
                 without_nothing_written(st_last_error()));
        else if (s != ST_OK)
            line(r, "FAIL", "out_dir", "%s", without_nothing_written(st_last_error()));
        else if (aside > 0)
            line(r, "ok", "out_dir",
                 "%s is writable; a new run there sets the %d checkpoint%s there (%s) aside in "
                 "ckpt.previous",
                 out_dir, aside, aside == 1 ? "" : "s", aside_step >= 0 ? "a finished run's" : "none whole");
        else
            line(r, "ok", "out_dir", "%s is writable", out_dir);
        st_clear_error();
    } else
        line(r, "ok", "out_dir", "%s will be created in %s, which is writable", out_dir, dir);
}

/* Memory: the planner's plan of this run on this machine (its micro-batch,
 * and whether it fits the memory this process may use), as the run itself
 * plans it; a run that does not fit is a failed check, with the run's
 * warning and hint (it would be killed, a CPU run without a message).
 * gpus: the devices this build can use (none: the run plans the CPU). */
static void check_memory(report *r, const st_config *cfg, const st_hw_info *h, bool probed, int gpus) {
    if (!probed) {
        line(r, "skip", "memory", "the machine's memory could not be read (the cpu line says why)");
        return;
    }
    st_config c = *cfg;
    st_plan_input in;
    if (st_runspec_open(&c, &in) != ST_OK) {
        line(r, "skip", "memory", "the plan needs the model, which needs the data: %s", st_last_error());
        st_clear_error();
        return;
    }
    st_hw_device local, cpu;
    st_hw_info nogpu = *h;
    nogpu.n_gpus = 0;
    const double gf = c.log.peak_gflops > 0 ? c.log.peak_gflops * 1e9 : 1e11; /* (the rate: times only) */
    /* (the run plans the CPU then, train.device auto with no GPU it can use: so does this) */
    const bool on_cpu = strcmp(c.train.device, "cpu") == 0 || gpus == 0;
    st_device_local(on_cpu ? &nogpu : h, gf, &local);
    st_device_local(&nogpu, gf, &cpu);
    st_hw_config hw;
    st_plan *p = calloc(1, sizeof *p);
    st_status s = p ? st_hw_config_parse("local", &local, &cpu, &hw) : st_fail(ST_ERR_NOMEM, "out of memory");
    if (s == ST_OK) {
        if (h->n_gpus > 1 && !on_cpu) hw.per_node = h->n_gpus;
        in.cores_per_rank = h->allowed;
        s = st_plan_make(&in, &hw, p);
    }
    if (s != ST_OK)
        line(r, "FAIL", "memory", "the plan failed: %s", st_last_error());
    else if (!p->ok || !p->fits)
        line(r, "FAIL", "memory", "%s%s%s", p->warning[0] ? p->warning : "the run does not fit",
             p->fit_hint[0] ? "; hint: " : "", p->fit_hint);
    else
        line(r, "ok", "memory",
             "micro-batch %lld (accumulating %lld) needs %.2f GiB per %s of %.2f GiB usable",
             (long long)p->micro, (long long)p->accum, (double)p->mem.total / (1 << 30),
             hw.dev.gpu ? "device" : "rank", (double)p->mem_limit / (1 << 30));
    st_clear_error();
    free(p);
    st_runspec_close(&in);
}

/* Room on train.out_dir's filesystem for the run's checkpoints (and its
 * final weights), sized from the model the configuration builds: what a
 * starting run checks (src/train/checkpoint.h st_ckpt_space_check). */
static void check_disk(report *r, const st_config *cfg) {
    st_config c = *cfg;
    st_plan_input in;
    if (st_runspec_open(&c, &in) != ST_OK) {
        line(r, "skip", "disk", "the checkpoints' size needs the model, which needs the data: %s",
             st_last_error());
        st_clear_error();
        return;
    }
    int64_t ckpt, weights;
    st_ckpt_bytes(in.model->params.count + in.model->params.buffer_count, c.optim.type, &ckpt, &weights);
    st_runspec_close(&in);
    const int64_t free_bytes = st_path_free_bytes(c.train.out_dir);
    char warn[1024];
    bool certain = false; /* (train.steps given: the checkpoints it commits at least are known) */
    const int64_t planned =
        c.train.steps > 0 ? st_ckpt_planned(0, c.train.steps, c.train.checkpoint_every) : -1;
    const st_status s = st_ckpt_space_check(c.train.out_dir, ckpt, weights, c.train.keep_checkpoints,
                                            free_bytes, planned, &certain, warn, sizeof warn);
    const double mib = 1 << 20;
    if (s != ST_OK) { /* the run's message, less what only a starting run can say */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", st_last_error());
        char *tail = strstr(msg, " (nothing was written)");
        if (tail) *tail = '\0';
        line(r, "FAIL", "disk", "%s", msg);
    } else if (warn[0]) {
        warn[strcspn(warn, "\n")] = '\0';
        line(r, certain ? "FAIL" : "warn", "disk", "%s",
             strncmp(warn, "scaletrain: warning: ", 21) ? warn : warn + 21);
    } else if (free_bytes >= 0)
        line(r, "ok", "disk",
             "%.1f GiB free for train.out_dir; a checkpoint of this run takes %.1f MiB (weights and "
             "optimizer state), its final weights %.1f MiB",
             (double)free_bytes / (1 << 30), (double)ckpt / mib, (double)weights / mib);
    else
        line(r, "skip", "disk", "the filesystem of train.out_dir %s does not say how much is free",
             c.train.out_dir);
    st_clear_error();
}

/* What this build can use and what the probe found; gpus: the devices
 * this build can open (the runtime's count, which also needs cuBLASLt),
 * and why none. The driver seeing GPUs that training cannot use fails. */
static void check_gpu(report *r, const st_hw_info *h, bool probed, int gpus, const char *why) {
    char v[16], unusable[640];
    const bool seen = probed && h->n_gpus > 0; /* by the driver (the probe) */
    if (!st_device_cuda_built())
        line(r, "skip", "cuda", "not in this build (built without nvcc): training runs on the CPU");
    else if (st_cli_gpus_unusable(probed ? h : NULL, gpus, why, unusable, sizeof unusable))
        line(r, "FAIL", "cuda", "%s; training runs on the CPU", unusable);
    else if (gpus == 0)
        line(r, "skip", "cuda", "%s: training runs on the CPU", probed ? h->cuda_why : why);
    else if (seen)
        line(r, "ok", "cuda", "%d device%s, the first %s (%.*f GiB)", h->n_gpus, h->n_gpus == 1 ? "" : "s",
             h->gpu[0].name, st_gib_digits((double)h->gpu[0].mem_total / (1 << 30)),
             (double)h->gpu[0].mem_total / (1 << 30));
    else /* the CUDA emulator's devices, which the driver probe cannot see */
        line(r, "ok", "cuda", "%d device%s (the runtime's; the driver probe: %s)", gpus, gpus == 1 ? "" : "s",
             probed ? h->cuda_why : "not run");
    if (!st_comm_nccl_built())
        line(r, "skip", "nccl", "not in this build (NCCL=0, or no CUDA): collectives go through MPI");
    else if (probed && h->nccl && gpus > 0)
        line(r, "ok", "nccl",
             "NCCL %s: gradients between GPUs go through it (train.device cuda, several ranks)",
             st_hw_nccl_version(h->nccl_version, v));
    else if (probed && h->nccl)
        line(r, "skip", "nccl", "NCCL %s found, but no usable GPU: collectives go through MPI",
             st_hw_nccl_version(h->nccl_version, v));
    else
        line(r, "skip", "nccl", "%s: collectives go through MPI", probed ? h->nccl_why : "not probed");
#ifdef ST_HAVE_CUDA
    char cudnn[512];
    if (gpus > 0 && st_cuda_cudnn_built(cudnn, sizeof cudnn)) /* "cuDNN 9.19.0" */
        line(r, "ok", "cudnn", "%s: a gpt's attention in bf16 can run on it (auto takes it from sm_90)",
             cudnn);
    else if (gpus > 0)
        line(r, "skip", "cudnn", "%s: a gpt's attention runs on scaletrain's flash kernels", cudnn);
#else
    (void)gpus;
#endif
}

/* The driver's health readings of each GPU it shows (the probe, NVML):
 * FAIL where row remapping failed, warn where a remap is pending, an
 * uncorrectable ECC error happened since the driver loaded, or the clocks
 * are slowed by heat or the power supply now; nothing without a GPU. */
static void check_gpu_health(report *r, const st_hw_info *h, bool probed) {
    if (!probed || h->n_gpus == 0) return;
    if (!h->nvml) {
        line(r, "skip", "health", "NVML is not available (%s): no readings of the GPUs' memory and clocks",
             h->nvml_why);
        return;
    }
    char all[4096] = "", why[1024];
    size_t at = 0;
    int worst = -1, known = 0;
    bool remap = true, ecc = true,
         clocks = true; /* read on every GPU read (a GPU without ECC has no count) */
    for (int i = 0; i < h->n_gpus; i++) {
        const st_hw_gpu *g = &h->gpu[i];
        const int k = st_hw_gpu_health(g, why, sizeof why);
        if (k > worst) worst = k;
        if (k > 0) st_appendf(all, sizeof all, &at, "%sgpu %d (%s): %s", at ? "; " : "", i, g->name, why);
        if (k < 0) continue;
        known++;
        remap &= g->remap_failed >= 0, ecc &= g->ecc_uncorrected >= 0, clocks &= g->clock_events >= 0;
    }
    if (worst < 0)
        line(r, "skip", "health", "the driver gives no health readings for %s (an older driver or GPU)",
             h->n_gpus == 1 ? "the GPU" : "the GPUs");
    else if (worst == 0) {
        line(r, "ok", "health", "%d of %d GPU%s read:%s%s%s%s%s", known, h->n_gpus, h->n_gpus == 1 ? "" : "s",
             remap ? " no memory row remap pending or failed" : "", remap && (ecc || clocks) ? "," : "",
             ecc ? " no uncorrectable ECC error since the driver loaded" : "", ecc && clocks ? "," : "",
             clocks ? " clocks not slowed by heat or power" : "");
    } else
        line(r, worst == 2 ? "FAIL" : "warn", "health", "%s", all);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

int st_cmd_check(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: scaletrain check [CONFIG] [--set key=value]...\n"
                   "  is this machine ready? cores and memory, MPI, a 2-rank data-parallel self-test,\n"
                   "  the config's data and out_dir, CUDA/NCCL in this build. Exit 0 when nothing failed.\n");
            return ST_EXIT_OK;
        }
    if (argc >= 1 && !strcmp(argv[0], "--allreduce-worker"))
        return st_check_allreduce_worker(argc == 2 && !strcmp(argv[1], "--nccl"));
    /* (each of N ranks would start its own 2-rank jobs inside the job, which
     * mpirun refuses, and report the machine N times) */
    /* (a batch script's own shell is one process, whatever -n its job has) */
    const st_launcher l = st_launcher_get();
    const long procs = l.size;
    const char *var = l.size_var;
    if (procs > 1) {
        fprintf(stderr,
                "scaletrain check: error: this process is one of %ld a launcher started (%s=%ld), and check "
                "runs as one process a machine: it starts its own ranks for its ddp and allreduce checks. "
                "Run `scaletrain check` without launch or mpirun; under SLURM, on one node at a time (srun "
                "-N1 -n1 -w NODE scaletrain check)\n",
                procs, var, procs);
        return ST_EXIT_USAGE;
    }
    /* (one rank of OpenMPI's mpirun: its own mpirun is refused as a recursive call, which OpenMPI tells by
     * its OMPI_* variables; srun's PMI ones do not stop it) */
    if (!strcmp(l.name, "mpirun")) {
        fprintf(stderr,
                "scaletrain check: error: this process was started by %s as an MPI rank, and check starts its "
                "own ranks with mpirun for its ddp and allreduce checks, which an MPI job cannot do inside "
                "itself (they failed, not the machine). Run `scaletrain check` without launch or mpirun\n",
                l.name);
        return ST_EXIT_USAGE;
    }
    st_config cfg;
    st_run_opts opts = {0};
    int rc = st_cli_run_args("check", argc, argv, &cfg, &opts);
    if (rc >= 0) return rc;
    report r = {0};
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/scaletrain-check-XXXXXX", base);
    printf("scaletrain check: is this machine ready to train%s%s?\n", cfg.path[0] ? " " : "", cfg.path);
    fflush(stdout);
    st_hw_info hw;
    const bool probed = st_cli_probe("check", &cfg, &hw) == ST_OK;
    check_cpu(&r, &hw, probed);
    char why[512] = "";
    /* train.device as the run takes it: cpu leaves the GPUs alone (a broken
     * one is not this run's to fail); cuda (or cuda:N) needs one, where auto
     * would train on the CPU */
    const bool dev_cpu = !strcmp(cfg.train.device, "cpu"), dev_cuda = !strncmp(cfg.train.device, "cuda", 4);
    const int gpus = st_device_cuda_built() && !dev_cpu ? st_device_cuda_count(why, sizeof why) : 0;
    if (!mkdtemp(tmp)) {
        line(&r, "FAIL", "tmp",
             "cannot create a directory in %s: %s; fix: set TMPDIR to a writable directory", base,
             strerror(errno));
    } else {
        const bool mpi = check_mpi(&r, tmp), ref = (mpi || gpus > 0) && selftest_reference(&r, tmp);
        if (mpi) {
            if (ref) check_ddp(&r, tmp);
            check_allreduce(&r, tmp, &hw, probed,
                            probed && hw.nvml && hw.n_gpus > 1 && gpus > 1 && st_comm_nccl_built());
        } else {
            line(&r, "skip", "ddp", "the 2-rank self-test needs MPI (above)");
            line(&r, "skip", "allreduce", "the all-reduce test needs MPI (above)");
        }
        if (gpus > 0) check_gpu_ddp(&r, tmp, gpus, mpi); /* every local GPU a rank (without MPI: one) */
        if (mpi && gpus > 1 && st_comm_nccl_built()) check_gpu_allreduce(&r, tmp, gpus, &hw, probed);
        nftw(tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    check_data(&r, &cfg);
    check_out_dir(&r, cfg.train.out_dir);
    check_disk(&r, &cfg);
    check_memory(&r, &cfg, &hw, probed, gpus);
    const int want = !strncmp(cfg.train.device, "cuda:", 5) ? atoi(cfg.train.device + 5) : -1;
    if (dev_cpu) {
        line(&r, "skip", "cuda", "train.device cpu: training runs on the CPU (the GPUs are not checked)");
    } else if (dev_cuda && gpus == 0) { /* (as the run refuses it) */
        line(&r, "FAIL", "cuda", "train.device %s, and %s; fix: use train.device: cpu (or auto)",
             cfg.train.device,
             !st_device_cuda_built() ? "this build has no CUDA (built without nvcc)"
             : why[0]                ? why
                                     : "no CUDA device");
    } else {
        check_gpu(&r, &hw, probed, gpus, why);
        check_gpu_health(&r, &hw, probed);
    }
    if (dev_cuda && gpus > 0 && want >= gpus)
        line(&r, "FAIL", "cuda", "train.device %s, and this node has %d CUDA device%s, cuda:0 to cuda:%d",
             cfg.train.device, gpus, gpus == 1 ? "" : "s", gpus - 1);
    if (r.failed)
        printf("not ready: %d check%s failed\n", r.failed, r.failed == 1 ? "" : "s");
    else
        printf("ready\n");
    return r.failed ? ST_EXIT_FAIL : ST_EXIT_OK;
}
