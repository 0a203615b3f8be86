/* The fp16 loss scaler's state machine (src/optim/scaler.h): halving and a
 * skip on overflow, doubling after the window of clean steps, the count
 * restarting on overflow, no growth past fp32's range, a disabled scaler that
 * never skips, and the overflow check and unscale over a gradient arena. */
#include <string.h>

#include "check.h"
#include "model/graph.h"
#include "optim/scaler.h"

static void test_state_machine(void) {
    st_scaler s;
    st_scaler_init(&s, true, 65536.0, 2000);
    CHECK(s.scale == 65536.0f, "initial scale %g", (double)s.scale);
    for (int i = 0; i < 1999; i++)
        CHECK(!st_scaler_update(&s, false), "clean step %d skipped", i);
    CHECK(s.scale == 65536.0f && s.good_steps == 1999, "after 1999 clean steps: %g, %lld", (double)s.scale,
          (long long)s.good_steps);
    CHECK(!st_scaler_update(&s, false), "step 2000 skipped");
    CHECK(s.scale == 131072.0f && s.good_steps == 0, "2000 clean steps double: %g, %lld", (double)s.scale,
          (long long)s.good_steps);
    /* An overflow skips, halves, restarts the count. */
    for (int i = 0; i < 1500; i++)
        st_scaler_update(&s, false);
    CHECK(st_scaler_update(&s, true), "an overflow must skip");
    CHECK(s.scale == 65536.0f && s.good_steps == 0 && s.skipped == 1, "overflow: %g, %lld, %lld",
          (double)s.scale, (long long)s.good_steps, (long long)s.skipped);
    CHECK(st_scaler_update(&s, true), "a second overflow must skip");
    CHECK(s.scale == 32768.0f && s.skipped == 2, "two overflows: %g", (double)s.scale);
    for (int i = 0; i < 1999; i++)
        st_scaler_update(&s, false);
    CHECK(s.scale == 32768.0f, "1999 clean steps after an overflow do not grow: %g", (double)s.scale);
    st_scaler_update(&s, false);
    CHECK(s.scale == 65536.0f, "the 2000th does: %g", (double)s.scale);

    /* A huge initial scale falls by halves, one skipped step each. */
    st_scaler_init(&s, true, 0x1p100, 3);
    for (int i = 0; i < 5; i++)
        st_scaler_update(&s, true);
    CHECK(s.scale == 0x1p95f && s.skipped == 5, "2^100 after 5 overflows: %a", (double)s.scale);
    /* No growth past fp32's range. */
    st_scaler_init(&s, true, 0x1p127, 1);
    st_scaler_update(&s, false);
    CHECK(s.scale == 0x1p127f, "growth past FLT_MAX: %a", (double)s.scale);

    /* The least scale (2^-24) does not halve: an overflow there skips and
     * leaves it (st_scaler_check then stops the run, test_grads). */
    st_scaler_init(&s, true, 0x1p-23, 2000);
    CHECK(st_scaler_update(&s, true) && s.scale == 0x1p-24f, "2^-23 halves to 2^-24: %a", (double)s.scale);
    CHECK(st_scaler_update(&s, true) && s.scale == 0x1p-24f, "2^-24 stays: %a", (double)s.scale);
    /* a scale given between the least and twice it (optim.loss_scale 1e-7) goes to the least at its
     * first overflow (it stayed, and that overflow ended the run as if at the least) */
    st_scaler_init(&s, true, 1e-7, 2000);
    CHECK(st_scaler_update(&s, true) && s.scale == 0x1p-24f, "1e-7 after an overflow: %a", (double)s.scale);
    /* Disabled (fp32, bf16): scale 1, never a skip. */
    st_scaler_init(&s, false, 65536.0, 2000);
    CHECK(s.scale == 1.0f, "disabled scale %g", (double)s.scale);
    CHECK(!st_scaler_update(&s, true) && s.scale == 1.0f && s.skipped == 0, "disabled scaler skipped");
}

static void test_grads(void) {
    st_params p;
    st_graph g;
    memset(&p, 0, sizeof p);
    st_graph_init(&g, &p);
    int64_t shape[1] = {3000000}; /* past the threaded size */
    st_tensor *t;
    CHECK_OK(st_graph_param(&g, "w", 1, shape, ST_INIT_ZEROS, 0, true, &t));
    g.params_only = true;
    CHECK_OK(st_graph_finalize(&g));
    for (int64_t i = 0; i < p.count; i++)
        p.grad[i] = (float)(i % 7) - 3.0f;
    CHECK(st_grad_all_finite(&p, 0, p.count), "finite gradients reported as overflow");
    const float special[3] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        const int64_t at = k == 0 ? 0 : k == 1 ? p.count - 1 : p.count / 2 + 1;
        const float keep = p.grad[at];
        p.grad[at] = special[k];
        CHECK(!st_grad_all_finite(&p, 0, p.count), "a %g at %lld was not found", (double)special[k],
              (long long)at);
        p.grad[at] = keep;
    }
    st_scaler s;
    st_scaler_init(&s, true, 1024.0, 2000);
    st_scaler_unscale(&s, &p, 0, p.count);
    int bad = 0;
    for (int64_t i = 0; i < p.count; i++)
        bad += p.grad[i] != ((float)(i % 7) - 3.0f) / 1024.0f;
    CHECK(bad == 0, "%d gradients unscaled wrongly", bad);
    /* An overflow at the least scale stops the run, naming bf16; one at a
     * scale that can still halve skips */
    bool skip = false;
    p.grad[7] = INFINITY;
    st_scaler_init(&s, true, 0x1p-23, 2000);
    CHECK_OK(st_scaler_check(&s, &p, 0, p.count, NULL, &skip));
    CHECK(skip && s.scale == 0x1p-24f, "an overflow at 2^-23 skips and halves: %d %a", skip, (double)s.scale);
    CHECK_FAILS(
        st_scaler_check(&s, &p, 0, p.count, NULL, &skip), ST_ERR_NUMERIC,
        "the gradients overflowed with the loss scale at its least, 5.96046e-08 (2 steps skipped so far)");
    p.grad[7] = INFINITY; /* (optim.loss_scale 1e-7: its first overflow skips, the second stops) */
    st_scaler_init(&s, true, 1e-7, 2000);
    CHECK_OK(st_scaler_check(&s, &p, 0, p.count, NULL, &skip));
    CHECK(skip && s.scale == 0x1p-24f, "an overflow at 1e-7 skips, at the least scale after: %d %a", skip,
          (double)s.scale);
    CHECK_FAILS(st_scaler_check(&s, &p, 0, p.count, NULL, &skip), ST_ERR_NUMERIC,
                "at its least, 5.96046e-08");
    /* the least scale's inverse is finite: zero gradients stay zero */
    memset(p.grad, 0, (size_t)p.count * sizeof *p.grad);
    st_scaler_init(&s, true, 6e-8, 2000);
    CHECK_OK(st_scaler_check(&s, &p, 0, p.count, NULL, &skip));
    CHECK(!skip && p.grad[0] == 0.0f && p.grad[p.count - 1] == 0.0f, "zero gradients unscaled at 6e-8: %g",
          (double)p.grad[0]);
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    test_state_machine();
    test_grads();
    return st_test_finish("test_scaler");
}
