/* The memory model against the measured peak of real training runs on this
 * machine: mlp, cnn and a small gpt (also with selective checkpointing, and
 * with a large vocabulary, its output layer plain and fused), each within
 * 10% (the bound) and within 8 MiB (what this machine shows: about
 * 2-3 MiB, mostly library code run for the first time); and what the fused
 * output layer saves, measured against predicted, within 10%.
 *
 * The 16384-token vocabulary is there for two allocations the model cannot
 * see, both fixed now and both growing with the vocabulary: OpenBLAS's
 * threaded products kept 1 KiB a row of their largest product resident (the
 * head's weight gradient: 16 MiB; st_sgemm in src/core/blas.h blocks the
 * rows), and glibc's heap kept freed parameter arenas resident
 * (st_pages_own_mappings). It measured 10.4% over the prediction before.
 *
 * Measured: the process's resident-set high-water mark (VmHWM) during the
 * run minus its resident set (VmRSS) just before, after resetting the mark
 * (writing 5 to /proc/self/clear_refs). That is what the operating system
 * charges the run, so it also catches allocations the model does not know
 * about (summing our own arena sizes would agree with the model by
 * construction). Each run happens in its own forked child so that memory a
 * previous run freed but the allocator kept cannot hide the next run's
 * allocations; the child warms OpenMP and OpenBLAS (thread stacks, packing
 * buffers) before the baseline, since those are fixed per process, not per
 * run. The sanitizer build skips: ASan's shadow memory and redzones are
 * not the run's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/blas.h"
#include "hw/planner.h"
#include "hw/runspec.h"
#include "mem_fixture.h"
#include "scaletrain/train.h"

#ifdef ST_ASAN
int main(void) { return st_test_skip("test_hw_memory", "the sanitizer's shadow memory is not the run's"); }
#else
/* In a child: warm up, run, report measured and predicted bytes. */
static void child(const char *name, const char *const *sets, int nsets, int fd) {
    st_config cfg;
    st_config_defaults(&cfg);
    for (int i = 0; i < nsets; i++)
        if (st_config_set(&cfg, sets[i]) != ST_OK) {
            fprintf(stderr, "%s: %s\n", name, st_last_error());
            _exit(3);
        }
    /* warm-up: both thread pools and OpenBLAS's packing buffers */
    double gf;
    st_device_calibrate_cpu(&gf, NULL);
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    if (!cr || fputs("5", cr) < 0 || fclose(cr) != 0) _exit(77);
    const int64_t base = proc_status_kb("VmRSS:");
    st_run_opts opts = {.quiet = true};
    st_run_result res;
    st_config run = cfg;
    if (st_train(&run, &opts, &res) != ST_OK) {
        fprintf(stderr, "%s: %s\n", name, st_last_error());
        _exit(4);
    }
    const int64_t peak = proc_status_kb("VmHWM:");
    /* the prediction for the run as it was configured (its auto values filled) */
    st_plan_input in;
    if (st_runspec_open(&run, &in) != ST_OK) {
        fprintf(stderr, "%s: %s\n", name, st_last_error());
        _exit(5);
    }
    in.cores_per_rank = (int)run.train.threads;
    st_hw_info h;
    st_hw_probe_host(&h);
    st_hw_config hw = {.per_node = 1, .nodes = 1};
    st_device_local(&h, gf, &hw.dev);
    st_plan p;
    if (st_plan_make(&in, &hw, &p) != ST_OK || !p.ok) _exit(6);
    st_runspec_close(&in);
    double r[3] = {1024.0 * (double)(peak - base), (double)p.mem.total, (double)p.micro};
    if (write(fd, r, sizeof r) != (ssize_t)sizeof r) _exit(7);
    _exit(0);
}

/* Runs the config in a child; the measured and predicted bytes in
 * got[0], got[1] (0 when not measured). */
static void check_run(const char *name, const char *const *sets, int nsets, double *got) {
    if (got) got[0] = got[1] = 0;
    int fds[2];
    if (pipe(fds) != 0) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(name, sets, nsets, fds[1]);
    }
    close(fds[1]);
    double r[3] = {0, 0, 0};
    ssize_t nread = read(fds[0], r, sizeof r);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        printf("%s: cannot reset the peak RSS here; not measured\n", name);
        return;
    }
    CHECK(nread == (ssize_t)sizeof r && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child failed (status %d)",
          name, st);
    if (nread != (ssize_t)sizeof r) return;
    if (got) got[0] = r[0], got[1] = r[1];
    const double err = (r[1] - r[0]) / r[0];
    printf("%-4s micro %3.0f: measured peak %7.1f MiB, predicted %7.1f MiB (%+.1f%%)\n", name, r[2],
           r[0] / 1048576, r[1] / 1048576, 100 * err);
    CHECK(fabs(err) <= 0.10, "%s: prediction %.1f MiB vs measured %.1f MiB", name, r[1] / 1048576,
          r[0] / 1048576);
}

int main(void) {
    char dir[] = "/tmp/st_hwmem_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    if (write_idx(dir, 256) || write_tokens(dir, 40000)) return 1;
    char img[600], lab[600], tok[600], out[600];
    snprintf(img, sizeof img, "data.train=%s/img.idx", dir);
    snprintf(lab, sizeof lab, "data.train_labels=%s/lab.idx", dir);
    snprintf(tok, sizeof tok, "data.train=%s/tok.bin", dir);
    snprintf(out, sizeof out, "train.out_dir=%s/run", dir);
    char vimg[600], vlab[600];
    snprintf(vimg, sizeof vimg, "data.val=%s/img.idx", dir);
    snprintf(vlab, sizeof vlab, "data.val_labels=%s/lab.idx", dir);
    const char *mlp[] = {
        "model.type=mlp", "model.hidden=[2048,2048]", img, lab, "data.val=", out, "train.batch_size=256",
        "train.steps=2"};
    const char *cnn[] = {
        "model.type=cnn",    img, lab, vimg, vlab, out, "train.batch_size=64", "train.steps=2",
        "train.eval_steps=1"};
    const char *gpt[] = {"model.type=gpt",
                         "model.n_layer=2",
                         "model.n_head=4",
                         "model.n_embd=128",
                         "model.block_size=128",
                         "data.type=tokens",
                         tok,
                         "data.val=",
                         out,
                         "train.batch_size=32",
                         "train.steps=2"};
    const char *gpt_sel[12];
    memcpy(gpt_sel, gpt, sizeof gpt);
    gpt_sel[11] = "train.activation_checkpointing=selective"; /* recomputed outputs share memory */
    check_run("mlp", mlp, 8, NULL);
    check_run("cnn", cnn, 9, NULL);
    check_run("gpt", gpt, 11, NULL);
    check_run("gpt selective", gpt_sel, 12, NULL);
    /* a vocabulary large beside the width: the (4096 x 4096) logits kept,
     * 64 MiB with their gradient over them, against the fused head's dh,
     * dW and one chunk */
    const char *gpt_v[13], *gpt_f[13];
    const int nv = fused_pair(gpt, 11, "model.vocab_size=4096", gpt_v, gpt_f);
    double plain[2], fused[2];
    check_run("gpt vocab 4096", gpt_v, nv, plain);
    check_run("gpt vocab 4096 fused head", gpt_f, nv, fused);
    st_test_failures += check_fused_saving("gpt vocab 4096", plain, fused, 0.25);
    const char *gpt_w[13];
    memcpy(gpt_w, gpt_f, sizeof gpt_f);
    gpt_w[11] = "model.vocab_size=16384";
    check_run("gpt vocab 16384 fused head", gpt_w, 13, NULL);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_hw_memory");
}
#endif
