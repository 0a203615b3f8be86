/* Optimizers and schedules against hand-computed values: one AdamW and SGD
 * step in double, decay only where the tensor says, the schedule's shape, and
 * global-norm clipping. */
#include <string.h>

#include "check.h"
#include "model/graph.h"
#include "optim/optim.h"

static void make_params(st_params *p, st_graph *g) {
    memset(p, 0, sizeof *p);
    st_graph_init(g, p);
    int64_t s2[2] = {2, 3}, s1 = 3;
    st_tensor *t;
    st_graph_param(g, "w", 2, s2, ST_INIT_ONES, 0, true, &t);
    st_graph_param(g, "b", 1, &s1, ST_INIT_ONES, 0, false, &t);
    g->params_only = true;
    CHECK_OK(st_graph_finalize(g));
    st_params_init(p, 1);
    for (int64_t i = 0; i < p->count; i++) p->grad[i] = 0.1f * (float)(i + 1) - 0.4f;
}

/* Against AdamW in double; betas b1, b2 (close to 1: 0.99999999 rounds to 1
 * in float, and 1 - b2 taken in float was 0: v never grew and the first
 * steps were lr m / eps, the run diverging; b1 so, m stayed 0 and nothing
 * trained). */
static void test_adamw(double b1, double b2) {
    st_params p;
    st_graph g;
    make_params(&p, &g);
    st_config c;
    st_config_defaults(&c);
    c.optim.weight_decay = 0.1;
    c.optim.beta1 = b1;
    c.optim.beta2 = b2;
    st_optim o;
    CHECK_OK(st_optim_init(&o, &c, &p));
    const double lr = 0.01, eps = 1e-8;
    double w[9], m[9] = {0}, v[9] = {0};
    for (int i = 0; i < 9; i++) w[i] = 1.0;
    for (int step = 1; step <= 3; step++) {
        st_optim_step(&o, &p, lr);
        for (int i = 0; i < 9; i++) {
            double gr = p.grad[i];
            if (i < 6) w[i] *= 1 - lr * 0.1; /* decay only on the matrix */
            m[i] = b1 * m[i] + (1 - b1) * gr;
            v[i] = b2 * v[i] + (1 - b2) * gr * gr;
            double mh = m[i] / (1 - pow(b1, step)), vh = v[i] / (1 - pow(b2, step));
            w[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    for (int i = 0; i < 9; i++) CHECK_CLOSE(p.data[i], w[i], 2e-6);
    CHECK(fabs(p.data[0] - 1.0) > 1e-3, "betas %g, %g: the weights moved by %g", b1, b2,
          fabs(p.data[0] - 1.0));
    st_optim_free(&o);
    st_graph_free(&g);
    st_params_free(&p);
}

static void test_sgd(void) {
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        st_params p;
        st_graph g;
        make_params(&p, &g);
        st_config c;
        st_config_defaults(&c);
        snprintf(c.optim.type, sizeof c.optim.type, "sgd");
        c.optim.momentum = 0.9;
        c.optim.nesterov = nesterov;
        c.optim.weight_decay = 0.01;
        st_optim o;
        CHECK_OK(st_optim_init(&o, &c, &p));
        double w[9], buf[9];
        for (int i = 0; i < 9; i++) w[i] = 1.0;
        for (int step = 1; step <= 3; step++) {
            st_optim_step(&o, &p, 0.1);
            for (int i = 0; i < 9; i++) {
                double d = p.grad[i] + (i < 6 ? 0.01 * w[i] : 0.0);
                buf[i] = step == 1 ? d : 0.9 * buf[i] + d;
                d = nesterov ? d + 0.9 * buf[i] : buf[i];
                w[i] -= 0.1 * d;
            }
        }
        for (int i = 0; i < 9; i++) CHECK_CLOSE(p.data[i], w[i], 2e-6);
        st_optim_free(&o);
        st_graph_free(&g);
        st_params_free(&p);
    }
}

static void test_schedule_and_clip(void) {
    st_config c;
    st_config_defaults(&c);
    c.optim.lr = 1.0;
    c.optim.warmup_steps = 10;
    c.optim.min_lr = 0.1;
    snprintf(c.optim.schedule, sizeof c.optim.schedule, "cosine");
    CHECK_CLOSE(st_lr_at(&c, 0, 110), 0.1, 1e-12);
    CHECK_CLOSE(st_lr_at(&c, 9, 110), 1.0, 1e-12);
    CHECK_CLOSE(st_lr_at(&c, 60, 110), 0.55, 1e-12); /* halfway: (1 + 0.1) / 2 */
    CHECK_CLOSE(st_lr_at(&c, 110, 110), 0.1, 1e-12);
    snprintf(c.optim.schedule, sizeof c.optim.schedule, "linear");
    CHECK_CLOSE(st_lr_at(&c, 60, 110), 0.55, 1e-12);
    CHECK_CLOSE(st_lr_at(&c, 35, 110), 0.775, 1e-12);
    snprintf(c.optim.schedule, sizeof c.optim.schedule, "constant");
    CHECK_CLOSE(st_lr_at(&c, 100, 110), 1.0, 1e-12);

    st_params p;
    st_graph g;
    make_params(&p, &g);
    double want = 0;
    for (int i = 0; i < 9; i++) want += (double)p.grad[i] * p.grad[i];
    CHECK_CLOSE(st_grad_norm(&p), sqrt(want), 1e-6);
    st_grad_scale(&p, 0.5f);
    CHECK_CLOSE(st_grad_norm(&p), 0.5 * sqrt(want), 1e-6);
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    test_adamw(0.9, 0.999);
    test_adamw(0.9, 0.99999999);
    test_adamw(0.99999999, 0.999);
    test_sgd();
    test_schedule_and_clip();
    return st_test_finish("test_optim");
}
