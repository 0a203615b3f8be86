/* train.device on whatever machine this runs on (docs/cuda.md):
 *   - without a usable GPU (no device, no driver, or a build without CUDA):
 *     train.device cuda fails naming the key and the reason, and auto trains
 *     on the CPU with that reason in the effective configuration;
 *   - with one: auto picks it (the note names it) and reports the device
 *     memory it held (at least parameters, gradients and moments), and bf16
 *     and fp16 train there (under cuda and under auto);
 *   - everywhere: train.device cpu stays on the CPU, and a run stopped after
 *     6 steps and resumed from its checkpoint ends with the weights of the
 *     straight 12-step run, bit for bit (the check of tests/train_fixture.h
 *     that test_cuda_train.c repeats on the device). */
#include <unistd.h>

#include "config_string.h"
#include "core/device.h"
#include "train_fixture.h"

static char root[] = "/tmp/test_train_device.XXXXXX";

static void no_gpu(const char *why) {
    st_config c;
    st_run_result r;
    /* the runtime says "driver version is insufficient" with no driver at
     * all; the reason says which of the two it is */
    CHECK(strstr(why, "insufficient") == NULL, "the reason '%s' should say whether there is a driver", why);
    const char *cuda[] = {"train.device=cuda", "train.steps=4", NULL};
    CHECK_OK(tf_config(&c, root, "cuda", cuda));
    CHECK_FAILS(tf_train(&c, NULL, &r), ST_ERR_UNSUPPORTED, "train.device cuda: ");
    char head[40]; /* the start of the reason: the note keeps its first 95 bytes */
    snprintf(head, sizeof head, "%s", why);
    CHECK(strstr(st_last_error(), head) != NULL, "the error '%s' should give the reason '%s'", st_last_error(), why);
    CHECK(strstr(st_last_error(), "train.device: cpu") != NULL, "the error '%s' should say what to do",
          st_last_error());
    const char *one[] = {"train.device=cuda:1", "train.steps=4", NULL};
    CHECK_OK(tf_config(&c, root, "cuda1", one));
    CHECK_FAILS(tf_train(&c, NULL, &r), ST_ERR_UNSUPPORTED, "train.device cuda:1: ");
    CHECK(strstr(st_last_error(), head) != NULL, "the error '%s' should give the reason '%s'",
          st_last_error(), why);

    const char *au[] = {"train.steps=8", NULL};
    CHECK_OK(tf_config(&c, root, "auto", au));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(strcmp(c.train.device, "cpu") == 0, "auto without a GPU: train.device %s, expected cpu", c.train.device);
    CHECK(st_config_source(&c, "train.device") == ST_SRC_AUTO, "train.device should be marked auto");
    char *text = st_test_config_string(&c);
    CHECK(text && strstr(text, head), "the effective configuration should give the reason '%s':\n%s", head,
          text ? text : "(none)");
    free(text);
    CHECK(r.steps == 8 && r.train_loss < r.first_loss, "trained 8 steps on the CPU: %lld, loss %g -> %g",
          (long long)r.steps, r.first_loss, r.train_loss);
    CHECK(r.device_mem_peak_bytes == 0, "on the CPU the device memory peak is 0, not %lld",
          (long long)r.device_mem_peak_bytes);
}

static void gpu(int n) {
    st_config c;
    st_run_result r;
    /* cuda:N: GPU N, or an error naming the GPUs there are */
    char last[32], past[32];
    snprintf(last, sizeof last, "train.device=cuda:%d", n - 1);
    snprintf(past, sizeof past, "train.device=cuda:%d", n);
    const char *lastv[] = {last, "train.steps=4", NULL}, *pastv[] = {past, "train.steps=2", NULL};
    CHECK_OK(tf_config(&c, root, "last", lastv));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(r.steps == 4 && r.train_loss < r.first_loss && r.device_mem_peak_bytes > 0,
          "%s: %lld steps, loss %g -> %g, device memory peak %lld", last, (long long)r.steps, r.first_loss,
          r.train_loss, (long long)r.device_mem_peak_bytes);
    CHECK_OK(tf_config(&c, root, "past", pastv));
    CHECK_FAILS(tf_train(&c, NULL, &r), ST_ERR_UNSUPPORTED, "CUDA device(s), cuda:0 to cuda:");
    const char *au[] = {"train.steps=4", NULL};
    CHECK_OK(tf_config(&c, root, "auto", au));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(strcmp(c.train.device, "cuda") == 0, "auto with a GPU: train.device %s, expected cuda", c.train.device);
    CHECK(strcmp(c.precision, "bf16") == 0 && st_config_source(&c, "precision") == ST_SRC_AUTO,
          "precision auto on a GPU: %s, expected bf16 (chosen)", c.precision);
    /* parameters, gradients and the two AdamW moments at least, all on the device */
    CHECK(r.optim_state_bytes > 0 && r.device_mem_peak_bytes >= 2 * r.optim_state_bytes,
          "device memory peak %lld bytes, expected at least twice the optimizer state's %lld",
          (long long)r.device_mem_peak_bytes, (long long)r.optim_state_bytes);
    char *text = st_test_config_string(&c);
    CHECK(text && strstr(text, "cuda:0"), "the effective configuration should name the GPU:\n%s",
          text ? text : "(none)");
    free(text);
    /* bf16 and fp16 train on the GPU (their parity with the host: test_cuda_train) */
    const char *bf[] = {"train.steps=4", "train.device=cuda", "precision=bf16", NULL};
    CHECK_OK(tf_config(&c, root, "bf16", bf));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(r.steps == 4 && r.train_loss < r.first_loss, "bf16 on the GPU: %lld steps, loss %g -> %g",
          (long long)r.steps, r.first_loss, r.train_loss);
    const char *fpa[] = {"train.steps=4", "precision=fp16", NULL};
    CHECK_OK(tf_config(&c, root, "fp16-auto", fpa));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK(strcmp(c.train.device, "cuda") == 0, "auto with fp16: train.device %s, expected cuda", c.train.device);
    CHECK(r.has_loss_scale && r.train_loss < r.first_loss, "fp16 on the GPU: loss %g -> %g, loss scale %s",
          r.first_loss, r.train_loss, r.has_loss_scale ? "kept" : "missing");
}

/* 12 steps straight, and 6 then 6 more resumed from the checkpoint. */
static void resume(void) {
    st_config c;
    const char *straight[] = {"train.device=cpu", "train.steps=12", "optim.schedule=constant", NULL};
    const char *first[] = {"train.device=cpu", "train.steps=6", "optim.schedule=constant", NULL};
    tf_check_resume("cpu", root, straight, first, &c);
    CHECK(strcmp(c.train.device, "cpu") == 0 && st_config_source(&c, "train.device") == ST_SRC_SET,
          "train.device cpu stays cpu: %s", c.train.device);
}

int main(void) {
    if (!mkdtemp(root)) return st_test_skip("test_train_device", "cannot create a temporary directory");
    CHECK_OK(tf_make_data(root));
    char why[256] = "";
    const int n = st_device_cuda_count(why, sizeof why);
    printf("CUDA devices: %d%s%s\n", n, n ? "" : ": ", why);
    if (st_test_failures == 0) {
        if (n == 0) no_gpu(why);
        else
            gpu(n);
        resume();
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return st_test_finish("test_train_device");
}
