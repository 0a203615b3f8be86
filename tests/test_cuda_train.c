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
 *     (the device's reductions are in fixed orders). */
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

/* The same run on both, then compare. extra: the optimizer's settings. */
static void parity(const char *label, const char *const *opt, double loss_rtol, double w_rtol, double w_atol) {
    st_config c;
    st_run_result rh, rd;
    const char *common[12];
    int n = 0;
    common[n++] = "train.steps=16";
    for (int i = 0; opt[i] && n < 10; i++) common[n++] = opt[i];
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
    close_rel(label, "first loss", rd.first_loss, rh.first_loss, 1e-5);
    close_rel(label, "last loss", rd.train_loss, rh.train_loss, loss_rtol);
    close_rel(label, "eval loss", rd.eval_loss, rh.eval_loss, loss_rtol);
    CHECK(fabs(rd.eval_accuracy - rh.eval_accuracy) <= 1.0 / TF_VAL + 1e-12, "%s: accuracy %g, host %g", label,
          rd.eval_accuracy, rh.eval_accuracy);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/%s/model.safetensors", root, dev);
    snprintf(b, sizeof b, "%s/%s/model.safetensors", root, host);
    tf_compare_weights(label, a, b, w_rtol, w_atol);
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
    CHECK_OK(tf_config(&c, root, "eval", NULL));
    CHECK_OK(st_config_set(&c, "train.device=cpu"));
    CHECK_OK(st_evaluate(&c, &o, &rh));
    CHECK_OK(tf_config(&c, root, "eval", NULL));
    CHECK_OK(st_config_set(&c, on_device));
    CHECK_OK(st_evaluate(&c, &o, &rd));
    close_rel("eval of the device's weights", "loss", rd.eval_loss, rh.eval_loss, 1e-5);
    CHECK(rd.eval_accuracy == rh.eval_accuracy, "accuracy %g on the device, %g on the host", rd.eval_accuracy,
          rh.eval_accuracy);
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
    if (st_test_failures == 0) {
        parity("sgd", sgd, 1e-4, 1e-3, 1e-4);
        evaluate();
        parity("adamw", adamw, 1e-3, 1e-3, 1e-2);
        resume();
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return st_test_finish("test_cuda_train");
}
