/* The trainer on a CUDA device against the trainer on the host: the mlp of
 * tests/train_fixture.h trained 16 steps (two micro-steps each, clipped,
 * with weight decay) from the same seed and data with train.device cuda and
 * cpu. Skips without a GPU (ST_CP_SELFTEST=1 runs it host against host, a
 * check of the test itself).
 *
 * What must agree, and how closely (fp32 on both sides; the device sums in
 * other orders, so gradients differ by rounding):
 *   - the first step's loss (the same weights): 1e-5 relative;
 *   - SGD with momentum (its update is linear in the gradient, so rounding
 *     stays rounding): the last step's loss and the evaluation loss 1e-4
 *     relative, every weight |dev - host| <= 1e-3 |host| + 1e-4 max|host|
 *     per tensor (tests/test_cuda_models.c's tolerance), the accuracy within
 *     one sample;
 *   - AdamW (the update divides by sqrt(v), so an element whose gradient is
 *     a cancelling sum, all rounding, can step by up to lr differently): the
 *     losses 1e-3 relative, weights within 1e-2 of the tensor's largest
 *     (a step or two at lr 3e-3);
 *   - the saved device weights evaluated on the device and on the host: the
 *     loss 1e-5 relative, the same accuracy;
 *   - on the device, 6 steps then 6 more resumed from the checkpoint (the
 *     AdamW moments through the host) against 12 straight: the same bits
 *     (the device's reductions are in fixed orders);
 *   - bf16 and fp16 (docs/precision.md), SGD as above on both sides, the
 *     host emulating the device's rounding: every activation and gradient
 *     is rounded to 16 bits, and where the two fp32 sums before a rounding
 *     fall on either side of a 16-bit boundary they differ by a unit in the
 *     last place (up to 2^-7 relative in bf16, 2^-10 in fp16), which
 *     training then carries on. The device run learns; the first loss
 *     within 1e-3 (bf16) / 5e-4 (fp16) relative, the last and eval losses
 *     5e-3 / 2e-3, weights |dev - host| <= r |host| + a max|host| with
 *     r, a = 1e-2, 5e-3 (bf16) / 5e-3, 2e-3 (fp16), the accuracy within one
 *     sample, and in fp16 the same loss scale and skipped steps. (On the
 *     CPU, two emulated runs whose non-elementwise outputs and gradients
 *     were perturbed by up to 3e-6 relative before each rounding, standing
 *     in for the device's other summation orders, differed by 2e-6 at most
 *     in losses and weights);
 *   - the host's waits for a device stream in the step loop do not grow
 *     with the steps but for the logged lines (and fp16's per-step overflow
 *     check), and the loss summed on the device over a logged window of 8
 *     steps matches the host's (waits() below);
 *   - fp16 with an initial loss scale of 2^40: the scaled gradients
 *     overflow fp16, so each of 4 steps is skipped on the device as on the
 *     host (4 skipped, the scale halved to 2^36) and the weights stay the
 *     initial ones, the host's bits. */
#include <unistd.h>

#include "core/device.h"
#include "train_fixture.h"

static char root[] = "/tmp/test_cuda_train.XXXXXX";
/* ST_CP_SELFTEST set: the "device" runs are CPU runs (a check of the test itself, without a GPU). */
static const char *on_device = "train.device=cuda";

static void close_rel(const char *label, const char *what, double dev, double host, double rtol) {
    const double d = fabs(dev - host);
    printf("%s: %s %.9g on the device, %.9g on the host (|diff| %.3g)\n", label, what, dev, host, d);
    CHECK(d <= rtol * fabs(host), "%s: %s differs by %.3g > %.3g", label, what, d, rtol * fabs(host));
}

/* How closely a device run must follow the host's. */
typedef struct tolerance {
    double first;        /* the first step's loss, relative */
    double loss;         /* the last step's and the evaluation's loss, relative */
    double w_rtol, w_atol; /* weights (tf_compare_weights) */
    int samples;         /* evaluation accuracy: within this many samples */
} tolerance;

/* The same run on both, then compare. extra: the optimizer's settings. */
static void parity(const char *label, const char *const *opt, const tolerance *t) {
    st_config c;
    st_run_result rh, rd;
    const char *common[16];
    int n = 0;
    common[n++] = "train.steps=16";
    common[n++] = "precision=fp32"; /* both sides' (auto is bf16 on a GPU); opt may set another after it */
    for (int i = 0; opt[i] && n < 15; i++)
        common[n++] = opt[i];
    common[n] = NULL;
    char host[64], dev[64];
    snprintf(host, sizeof host, "%s-cpu", label);
    snprintf(dev, sizeof dev, "%s-cuda", label);
    CHECK_OK(tf_config(&c, root, host, common));
    CHECK_OK(st_config_set(&c, "train.device=cpu"));
    CHECK_OK(tf_train(&c, NULL, &rh));
    CHECK_OK(tf_config(&c, root, dev, common));
    CHECK_OK(st_config_set(&c, on_device));
    CHECK_OK(tf_train(&c, NULL, &rd));
    if (st_test_failures) return;
    CHECK(rd.steps == 16 && rd.train_loss < rd.first_loss, "%s: the device run learns: %g -> %g", label,
          rd.first_loss, rd.train_loss);
    close_rel(label, "first loss", rd.first_loss, rh.first_loss, t->first);
    close_rel(label, "last loss", rd.train_loss, rh.train_loss, t->loss);
    close_rel(label, "eval loss", rd.eval_loss, rh.eval_loss, t->loss);
    CHECK(fabs(rd.eval_accuracy - rh.eval_accuracy) <= t->samples / (double)TF_VAL + 1e-12,
          "%s: accuracy %g, host %g", label, rd.eval_accuracy, rh.eval_accuracy);
    CHECK(rd.has_loss_scale == rh.has_loss_scale && rd.loss_scale == rh.loss_scale &&
              rd.skipped_steps == rh.skipped_steps,
          "%s: loss scale %g with %lld skipped on the device, %g with %lld on the host", label, rd.loss_scale,
          (long long)rd.skipped_steps, rh.loss_scale, (long long)rh.skipped_steps);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/%s/model.safetensors", root, dev);
    snprintf(b, sizeof b, "%s/%s/model.safetensors", root, host);
    tf_compare_weights(label, a, b, t->w_rtol, t->w_atol);
}

/* fp16 whose scaled gradients overflow: every step skipped, alike. */
static void overflow(void) {
    const char *o[] = {"precision=fp16", "optim.loss_scale=1099511627776", "train.steps=4", "optim.type=sgd",
                       "optim.lr=0.05", NULL};
    st_config c;
    st_run_result rh, rd;
    CHECK_OK(tf_config(&c, root, "overflow-cpu", o));
    CHECK_OK(st_config_set(&c, "train.device=cpu"));
    CHECK_OK(tf_train(&c, NULL, &rh));
    CHECK_OK(tf_config(&c, root, "overflow-cuda", o));
    CHECK_OK(st_config_set(&c, on_device));
    CHECK_OK(tf_train(&c, NULL, &rd));
    if (st_test_failures) return;
    const double want = 68719476736.0; /* 2^36: halved 4 times */
    printf("overflow: %lld steps skipped on the device (scale %g), %lld on the host (scale %g)\n",
           (long long)rd.skipped_steps, rd.loss_scale, (long long)rh.skipped_steps, rh.loss_scale);
    CHECK(rd.has_loss_scale && rd.skipped_steps == 4 && rd.loss_scale == want,
          "the device run: %lld skipped, scale %g; expected 4 and %g", (long long)rd.skipped_steps, rd.loss_scale,
          want);
    CHECK(rh.has_loss_scale && rh.skipped_steps == 4 && rh.loss_scale == want,
          "the host run: %lld skipped, scale %g; expected 4 and %g", (long long)rh.skipped_steps, rh.loss_scale,
          want);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/overflow-cuda/model.safetensors", root);
    snprintf(b, sizeof b, "%s/overflow-cpu/model.safetensors", root);
    tf_compare_weights("fp16 overflow: untouched weights", a, b, 0, 0);
}

/* The device's saved weights evaluated on the device and on the host. */
static void evaluate(void) {
    char w[600];
    snprintf(w, sizeof w, "%s/sgd-cuda/model.safetensors", root);
    st_run_opts o = {0};
    o.quiet = true;
    o.init = w;
    st_config c;
    st_run_result rh, rd;
    const char *fp32[] = {"precision=fp32", NULL}; /* as the run that made them (auto is bf16 on a GPU) */
    CHECK_OK(tf_config(&c, root, "eval", fp32));
    CHECK_OK(st_config_set(&c, "train.device=cpu"));
    CHECK_OK(st_evaluate(&c, &o, &rh));
    CHECK_OK(tf_config(&c, root, "eval", fp32));
    CHECK_OK(st_config_set(&c, on_device));
    CHECK_OK(st_evaluate(&c, &o, &rd));
    close_rel("eval of the device's weights", "loss", rd.eval_loss, rh.eval_loss, 1e-5);
    CHECK(rd.eval_accuracy == rh.eval_accuracy, "accuracy %g on the device, %g on the host", rd.eval_accuracy,
          rh.eval_accuracy);
}

/* The host's waits for a whole device stream inside the step loop
 * (st_run_result.device_stream_waits) do not grow with the micro-steps: with
 * log.every 8 the loss is read on the first step and each logged line (with
 * the logged gradient norm: two waits a line), and the checkpoint at the
 * last step is the same in both runs, so 24 steps (48 micro-steps) wait
 * exactly 4 times more than 8. fp16 adds its overflow check, one wait a
 * step by design (docs/cuda.md): 4 + 16. The windowed loss (the mean of
 * steps 17-24, summed on the device) must match the host's. */
static void waits(void) {
    const bool self = strcmp(on_device, "train.device=cpu") == 0;
    const char *base[] = {"optim.type=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.grad_clip=0.1",
                          "log.every=8", NULL, NULL, NULL};
    const char *precs[] = {"precision=fp32", "precision=fp16"};
    for (int pi = 0; pi < 2; pi++) {
        base[5] = precs[pi];
        base[6] = pi == 1 ? "optim.loss_scale=1024" : NULL; /* no overflow: every logged step reads its norm */
        st_config c;
        st_run_result r8, r24, rh;
        char name[64];
        snprintf(name, sizeof name, "waits-%d-8", pi);
        CHECK_OK(tf_config(&c, root, name, base));
        CHECK_OK(st_config_set(&c, on_device));
        CHECK_OK(st_config_set(&c, "train.steps=8"));
        CHECK_OK(tf_train(&c, NULL, &r8));
        snprintf(name, sizeof name, "waits-%d-24", pi);
        CHECK_OK(tf_config(&c, root, name, base));
        CHECK_OK(st_config_set(&c, on_device));
        CHECK_OK(st_config_set(&c, "train.steps=24"));
        CHECK_OK(tf_train(&c, NULL, &r24));
        snprintf(name, sizeof name, "waits-%d-cpu", pi);
        CHECK_OK(tf_config(&c, root, name, base));
        CHECK_OK(st_config_set(&c, "train.device=cpu"));
        CHECK_OK(st_config_set(&c, "train.steps=24"));
        CHECK_OK(tf_train(&c, NULL, &rh));
        if (st_test_failures) return;
        const int64_t want = self ? 0 : pi == 0 ? 4 : 4 + 16;
        printf("%s: %lld stream waits in the step loop over 8 steps, %lld over 24 (difference %lld, expected "
               "%lld)\n",
               precs[pi], (long long)r8.device_stream_waits, (long long)r24.device_stream_waits,
               (long long)(r24.device_stream_waits - r8.device_stream_waits), (long long)want);
        CHECK(r24.device_stream_waits - r8.device_stream_waits == want,
              "%s: the step loop waited %lld times over 24 steps and %lld over 8; expected %lld more", precs[pi],
              (long long)r24.device_stream_waits, (long long)r8.device_stream_waits, (long long)want);
        close_rel(precs[pi], "first loss (log.every 8)", r24.first_loss, rh.first_loss, pi == 0 ? 1e-5 : 5e-4);
        close_rel(precs[pi], "loss of steps 17-24", r24.train_loss, rh.train_loss, pi == 0 ? 1e-4 : 2e-3);
    }
}

static void resume(void) {
    const char *straight[] = {on_device, "train.steps=12", "optim.schedule=constant",
                              "optim.weight_decay=0.1", NULL};
    const char *first[] = {on_device, "train.steps=6", "optim.schedule=constant",
                           "optim.weight_decay=0.1", NULL};
    tf_check_resume("cuda", root, straight, first, NULL);
}

int main(void) {
    char why[256] = "";
    const bool self = getenv("ST_CP_SELFTEST") != NULL;
    if (!self && st_device_cuda_count(why, sizeof why) == 0) return st_test_skip("test_cuda_train", why);
    if (self) {
        on_device = "train.device=cpu";
        printf("ST_CP_SELFTEST: the host against itself (no kernel runs)\n");
    }
    if (!mkdtemp(root)) return st_test_skip("test_cuda_train", "cannot create a temporary directory");
    CHECK_OK(tf_make_data(root));
    const char *sgd[] = {"optim.type=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=1e-3",
                         "optim.grad_clip=0.1", NULL};
    const char *adamw[] = {"optim.type=adamw", "optim.lr=3e-3", "optim.weight_decay=0.1", "optim.grad_clip=1.0",
                           NULL};
    const char *sgd_bf16[] = {"optim.type=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=1e-3",
                              "optim.grad_clip=0.1", "precision=bf16", NULL};
    const char *sgd_fp16[] = {"optim.type=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=1e-3",
                              "optim.grad_clip=0.1", "precision=fp16", NULL};
    const tolerance t_sgd = {1e-5, 1e-4, 1e-3, 1e-4, 1}, t_adamw = {1e-5, 1e-3, 1e-3, 1e-2, 1};
    const tolerance t_bf16 = {1e-3, 5e-3, 1e-2, 5e-3, 1}, t_fp16 = {5e-4, 2e-3, 5e-3, 2e-3, 1};
    if (st_test_failures == 0) {
        parity("sgd", sgd, &t_sgd);
        evaluate();
        parity("adamw", adamw, &t_adamw);
        resume();
        parity("sgd-bf16", sgd_bf16, &t_bf16);
        parity("sgd-fp16", sgd_fp16, &t_fp16);
        overflow();
        waits();
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return st_test_finish("test_cuda_train");
}
