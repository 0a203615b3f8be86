/* The memory model against what a training run on a CUDA device allocates:
 * mlp, cnn and gpt (head sizes on the flash path and off it; a large
 * vocabulary with its output layer plain and fused; an mlp and a cnn whose
 * evaluation batch is 16 times the training one, so that the evaluation's
 * graph and its 16-bit operand copies would show if the model sized them
 * for the training batch), in fp32 and bf16, each
 * within 10%; what the fused output layer saves, measured against
 * predicted, within 10%; and the gpt's weights evaluated alone in bf16
 * (scaletrain eval: the weights and a forward, the planner's eval_only),
 * at the planner's batch and at one given, within 10%.
 *
 * Measured: the device's allocation peak over the run (st_device_memory,
 * the run result's device_mem_peak_bytes): every arena, the compute copy,
 * the optimizer state, the batch feed's buffers, the evaluation graph, the
 * 16-bit operand scratch and cuBLASLt's workspace, as cudaMalloc was asked
 * for them. Predicted: the planner's device total (src/hw/memory.c) for the
 * run as it was configured, on the local device (st_device_local), laid
 * out as the CUDA backend lays it out (16-bit storage by
 * src/layers/half_io.h). The CUDA context and the libraries' own
 * allocations are neither's: nvidia-smi shows more on a real GPU.
 *
 * Skips without a CUDA device; runs on the emulator (make emu) and on the
 * GPU machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/device.h"
#include "hw/planner.h"
#include "hw/probe.h"
#include "hw/runspec.h"
#include "mem_fixture.h"
#include "scaletrain/train.h"

/* The planner's prediction for a run as it was configured (its auto values
 * filled), on this machine's GPU, or the H100 preset on the emulator (the
 * probe looks for the driver and NVML, which it is not); eval_only: an
 * evaluation alone. */
static void predict(st_config *run, bool eval_only, st_plan *p) {
    memset(p, 0, sizeof *p);
    st_plan_input in;
    CHECK_OK(st_runspec_open(run, &in));
    in.eval_only = eval_only;
    st_hw_info h;
    CHECK_OK(st_hw_probe(&h));
    st_hw_config hw = {.per_node = 1, .nodes = 1};
    if (h.n_gpus > 0)
        st_device_local(&h, 0, &hw.dev);
    else
        CHECK(st_device_preset("H100-80GB", &hw.dev), "the H100-80GB preset");
    CHECK_OK(st_plan_make(&in, &hw, p));
    st_runspec_close(&in);
}

/* The device's peak (got) against the prediction (want), within 10%,
 * printed with the batch (what: "micro" or "eval batch"). */
static void compare(const char *name, const char *what, int64_t batch, const char *precision, double got,
                    double want) {
    const double err = got > 0 ? (want - got) / got : 1;
    printf("%-9s %s %3lld %s: device peak %7.1f MiB, predicted %7.1f MiB (%+.1f%%)\n", name, what,
           (long long)batch, precision, got / 1048576, want / 1048576, 100 * err);
    CHECK(got > 0 && fabs(err) <= 0.10, "%s: prediction %.1f MiB vs the device's peak %.1f MiB", name,
          want / 1048576, got / 1048576);
}

static void config_of(st_config *cfg, const char *const *sets, int nsets) {
    st_config_defaults(cfg);
    for (int i = 0; i < nsets; i++)
        CHECK_OK(st_config_set(cfg, sets[i]));
    CHECK_OK(st_config_set(cfg, "train.device=cuda"));
}

/* Runs the config on the device; the measured peak and predicted bytes in
 * got2[0], got2[1] when got2 is not NULL (0 when the run failed). */
static void check_run(const char *name, const char *const *sets, int nsets, double *got2) {
    if (got2) got2[0] = got2[1] = 0;
    st_config cfg;
    config_of(&cfg, sets, nsets);
    st_run_opts opts = {.quiet = true};
    st_run_result res;
    st_config run = cfg;
    if (st_train(&run, &opts, &res) != ST_OK) {
        CHECK(0, "%s: %s", name, st_last_error());
        return;
    }
    st_plan p;
    predict(&run, false, &p);
    compare(name, "micro", p.micro, run.precision, (double)res.device_mem_peak_bytes, (double)p.mem.total);
    if (got2) got2[0] = (double)res.device_mem_peak_bytes, got2[1] = (double)p.mem.total;
}

/* An evaluation alone (st_evaluate of the weights the config's run of a
 * step writes to out_dir first, when `train`): the device's peak against
 * the planner's evaluation (st_plan_input.eval_only: the weights and one
 * forward graph, no gradients or optimizer state), within 10%; the
 * evaluation's batch is printed (train.eval_batch_size as given, or the
 * planner's). */
static void check_eval(const char *name, const char *const *sets, int nsets, const char *out_dir,
                       bool train) {
    st_config cfg;
    config_of(&cfg, sets, nsets);
    st_run_opts topts = {.quiet = true, .save = true}, opts = {.quiet = true, .init = out_dir};
    st_run_result res;
    st_config run = cfg;
    if (train && st_train(&run, &topts, &res) != ST_OK) { /* (the weights evaluated) */
        CHECK(0, "%s: training: %s", name, st_last_error());
        return;
    }
    run = cfg;
    if (st_evaluate(&run, &opts, &res) != ST_OK) {
        CHECK(0, "%s: %s", name, st_last_error());
        return;
    }
    st_plan p;
    predict(&run, true, &p);
    CHECK(p.mem.grads == 0 && p.mem.optim == 0, "%s: an evaluation's plan holds gradients or optimizer state",
          name);
    compare(name, "eval batch", run.train.eval_batch_size, run.precision, (double)res.device_mem_peak_bytes,
            (double)p.mem.total);
}

int main(void) {
    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) return st_test_skip("test_cuda_memory", why);
    char dir[] = "/tmp/st_cudamem_XXXXXX";
    if (!mkdtemp(dir)) return st_test_skip("test_cuda_memory", "cannot create a temporary directory");
    if (write_idx(dir, 256) || write_tokens(dir, 40000)) return 1;
    char img[600], lab[600], tok[600], out[600], vimg[600], vlab[600];
    snprintf(img, sizeof img, "data.train=%s/img.idx", dir);
    snprintf(lab, sizeof lab, "data.train_labels=%s/lab.idx", dir);
    snprintf(tok, sizeof tok, "data.train=%s/tok.bin", dir);
    snprintf(out, sizeof out, "train.out_dir=%s/run", dir);
    snprintf(vimg, sizeof vimg, "data.val=%s/img.idx", dir);
    snprintf(vlab, sizeof vlab, "data.val_labels=%s/lab.idx", dir);
    for (int k = 0; k < 2; k++) {
        const char *prec = k ? "precision=bf16" : "precision=fp32";
        const char *mlp[] = {"model.type=mlp",
                             "model.hidden=[2048,2048]",
                             img,
                             lab,
                             "data.val=",
                             out,
                             "train.batch_size=256",
                             "train.steps=1",
                             prec};
        const char *cnn[] = {
            "model.type=cnn",     img, lab, vimg, vlab, out, "train.batch_size=64", "train.steps=1",
            "train.eval_steps=1", prec};
        const char *gpt[] = {"model.type=gpt",
                             "model.n_layer=2",
                             "model.n_head=2",
                             "model.n_embd=128",
                             "model.block_size=64",
                             "data.type=tokens",
                             tok,
                             "data.val=",
                             out,
                             "train.batch_size=8",
                             "train.steps=1",
                             prec};
        check_run(k ? "mlp bf16" : "mlp fp32", mlp, 9, NULL);
        check_run(k ? "cnn bf16" : "cnn fp32", cnn, 10, NULL);
        for (int mt = 0; mt < 2;
             mt++) { /* evaluating at 16 times the training batch (the mlp's width last) */
            const char *ev[] = {mt ? "model.type=mlp" : "model.type=cnn",
                                img,
                                lab,
                                vimg,
                                vlab,
                                out,
                                "train.batch_size=8",
                                "train.steps=1",
                                "train.eval_steps=1",
                                "train.eval_batch_size=128",
                                prec,
                                "model.hidden=[64]"};
            char name[64];
            snprintf(name, sizeof name, "%s %s, eval 128", mt ? "mlp" : "cnn", k ? "bf16" : "fp32");
            check_run(name, ev, mt ? 12 : 11, NULL);
        }
        check_run(k ? "gpt bf16" : "gpt fp32", gpt, 12, NULL);
        if (k) { /* its weights evaluated alone, at the planner's batch and at one given (bf16: a GPU's
                    default) */
            char dout[640], val[640];
            snprintf(dout, sizeof dout, "%s/run", dir);
            snprintf(val, sizeof val, "data.val=%s/tok.bin", dir);
            const char *ev[14];
            memcpy(ev, gpt, 12 * sizeof *ev);
            ev[7] = val;
            ev[12] = "train.eval_steps=2";
            check_eval("gpt bf16, eval alone", ev, 13, dout, true);
            ev[13] = "train.eval_batch_size=32";
            check_eval("gpt bf16, eval 32 alone", ev, 14, dout, false);
        }
        /* head size 48: attention's materialised path (P saved, and in bf16
         * the 16-bit copies of its products' float operands) */
        gpt[3] = "model.n_embd=96";
        check_run(k ? "gpt bf16, materialised attention" : "gpt fp32, materialised attention", gpt, 12, NULL);
        gpt[3] = "model.n_embd=128";
        /* a vocabulary large beside the width: the (1024 x 4096) logits kept,
         * their gradient over them, against the fused head's dh, dW (fp32)
         * and one chunk of logits in the run's storage */
        const char *plain[14], *fused[14];
        gpt[9] = "train.batch_size=16"; /* 1024 rows of 64 tokens */
        const int nv = fused_pair(gpt, 12, "model.vocab_size=4096", plain, fused);
        double p2[2], f2[2];
        check_run(k ? "gpt bf16, vocab 4096" : "gpt fp32, vocab 4096", plain, nv, p2);
        check_run(k ? "gpt bf16, vocab 4096, fused head" : "gpt fp32, vocab 4096, fused head", fused, nv, f2);
        st_test_failures += check_fused_saving(k ? "bf16" : "fp32", p2, f2, 0.0);
        gpt[9] = "train.batch_size=8";
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return st_test_finish("test_cuda_memory");
}
