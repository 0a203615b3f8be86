/* The training loss summed on a CUDA device (src/train/loss_sum.h,
 * src/cuda/loss.cu) against the same sums on the host: 5 steps of 3
 * micro-steps, the losses queued on the device's compute stream with no
 * wait between them, read after step 1, after steps 2-4 (step 3 holds a NaN
 * and step 4 an Inf: the first bad step is 3) and after step 5 (clean again:
 * the bad step starts over). Every read must give the host's sum bit for bit
 * (NaN: NaN), the same count of steps, first step and bad step.
 *
 * The host path (device NULL) is checked first everywhere, against sums
 * written out here; without a CUDA device the test then skips, saying why. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/device.h"
#include "core/rng.h"
#include "train/loss_sum.h"

enum { STEPS = 5, ACCUM = 3, N = STEPS * ACCUM };

typedef struct reading {
    double sum;
    int64_t steps, first, bad;
} reading;

/* Sum `losses` (N floats, in dev's memory) with reads after steps 1, 4, 5. */
static int run(st_device *dev, const float *losses, reading out[3]) {
    st_loss_sum ls = {0};
    int r = 0, ok = 1;
    if (st_loss_sum_init(&ls, dev, ACCUM) != ST_OK) {
        fprintf(stderr, "FAIL %s: st_loss_sum_init: %s\n", st_device_name(dev), st_last_error());
        return 0;
    }
    for (int step = 1; step <= STEPS && ok; step++) {
        for (int k = 0; k < ACCUM && ok; k++)
            ok = st_loss_sum_add(&ls, losses + (step - 1) * ACCUM + k) == ST_OK;
        ok = ok && st_loss_sum_step_end(&ls, step) == ST_OK;
        if (ok && (step == 1 || step == 4 || step == 5)) {
            reading *o = &out[r++];
            ok = st_loss_sum_read(&ls, &o->sum, &o->steps, &o->first, &o->bad) == ST_OK;
        }
    }
    if (!ok) fprintf(stderr, "FAIL %s: %s\n", st_device_name(dev), st_last_error());
    st_loss_sum_free(&ls);
    return ok;
}

static void same(const char *what, const reading *got, const reading *want) {
    const bool bits =
        memcmp(&got->sum, &want->sum, sizeof got->sum) == 0 || (isnan(got->sum) && isnan(want->sum));
    CHECK(bits && got->steps == want->steps && got->first == want->first && got->bad == want->bad,
          "%s: sum %.17g, %lld steps from %lld, bad %lld; want %.17g, %lld from %lld, bad %lld", what,
          got->sum, (long long)got->steps, (long long)got->first, (long long)got->bad, want->sum,
          (long long)want->steps, (long long)want->first, (long long)want->bad);
}

int main(void) {
    float loss[N];
    st_rng rng = st_rng_make(11, 3);
    for (int i = 0; i < N; i++)
        loss[i] = 0.5f + 4.0f * st_rng_uniform(&rng);
    loss[2 * ACCUM + 1] = NAN;      /* step 3 */
    loss[3 * ACCUM + 0] = INFINITY; /* step 4 */

    /* The host, against the sums written out: each step's sum of loss / 3 in
     * micro-step order, the steps' sums added in order since the last read. */
    double step_sum[STEPS];
    for (int s = 0; s < STEPS; s++) {
        step_sum[s] = 0;
        for (int k = 0; k < ACCUM; k++)
            step_sum[s] += loss[s * ACCUM + k] / (double)ACCUM;
    }
    const reading want[3] = {{0.0 + step_sum[0], 1, 1, -1},
                             {((0.0 + step_sum[1]) + step_sum[2]) + step_sum[3], 3, 2, 3},
                             {0.0 + step_sum[4], 1, 5, -1}};
    reading host[3];
    CHECK(run(NULL, loss, host), "the host's sums");
    for (int i = 0; i < 3; i++)
        same("host", &host[i], &want[i]);
    CHECK(isnan(host[1].sum) && isfinite(host[2].sum), "the NaN read, then a finite one");

    char why[256] = "";
    if (st_device_cuda_count(why, sizeof why) == 0) {
        if (st_test_failures) return st_test_finish("test_cuda_loss");
        return st_test_skip("test_cuda_loss", why);
    }
    st_device *d = NULL;
    float *dloss = NULL;
    CHECK_OK(st_device_open_cuda(0, &d));
    if (d) {
        printf("device: %s\n", st_device_name(d));
        CHECK_OK(st_device_alloc(d, sizeof loss, (void **)&dloss));
        if (dloss) CHECK_OK(st_device_upload(d, dloss, loss, sizeof loss));
        reading dev[3];
        if (dloss && run(d, dloss, dev)) {
            for (int i = 0; i < 3; i++)
                same("cuda", &dev[i], &host[i]);
        } else {
            CHECK(false, "the device's sums");
        }
        st_device_release(d, dloss);
    }
    st_device_free(d);
    return st_test_finish("test_cuda_loss");
}
