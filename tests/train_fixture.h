/* A small classification set written as .npy files, and whole runs of the
 * trainer (st_train) on it, for the tests of training on a device
 * (test_train_device.c, test_cuda_train.c).
 *
 * The set: 256 training and 64 validation samples of 24 features uniform in
 * [-1, 1), labelled by the argmax of a fixed random linear map into 4
 * classes, so an mlp learns it within a few steps. Runs are quiet and save
 * into their own out_dir under the test's temporary root. */
#ifndef ST_TESTS_TRAIN_FIXTURE_H
#define ST_TESTS_TRAIN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "data/npy.h"
#include "scaletrain/config.h"
#include "scaletrain/train.h"

enum { TF_D = 24, TF_CLASSES = 4, TF_TRAIN = 256, TF_VAL = 64 };

static inline st_status tf_write_set(const char *root, const char *name, int64_t n, uint64_t stream) {
    float *x = malloc((size_t)n * TF_D * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return st_fail(ST_ERR_NOMEM, "out of memory making the data");
    }
    st_rng w = st_rng_make(4242, 1), r = st_rng_make(4242, stream);
    float map[TF_CLASSES][TF_D];
    for (int k = 0; k < TF_CLASSES; k++)
        for (int j = 0; j < TF_D; j++) map[k][j] = 2.0f * st_rng_uniform(&w) - 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float *xi = x + i * TF_D, best = -1e30f;
        for (int j = 0; j < TF_D; j++) xi[j] = 2.0f * st_rng_uniform(&r) - 1.0f;
        for (int k = 0; k < TF_CLASSES; k++) {
            float z = 0;
            for (int j = 0; j < TF_D; j++) z += map[k][j] * xi[j];
            if (z > best) {
                best = z;
                y[i] = k;
            }
        }
    }
    char path[512];
    const int64_t xd[2] = {n, TF_D}, yd[1] = {n};
    snprintf(path, sizeof path, "%s/%s.npy", root, name);
    st_status s = st_npy_write(path, ST_NPY_F32, 2, xd, x);
    snprintf(path, sizeof path, "%s/%s_labels.npy", root, name);
    if (s == ST_OK) s = st_npy_write(path, ST_NPY_I32, 1, yd, y);
    free(x);
    free(y);
    return s;
}

static inline st_status tf_make_data(const char *root) {
    ST_TRY(tf_write_set(root, "train", TF_TRAIN, 2));
    return tf_write_set(root, "val", TF_VAL, 3);
}

/* The defaults, the set, a small mlp and quick settings, then `extra`
 * ("key=value" strings, NULL-terminated); out_dir is root/name. */
static inline st_status tf_config(st_config *c, const char *root, const char *name, const char *const *extra) {
    st_config_defaults(c);
    char buf[600];
    const char *base[] = {"model.type=mlp", "model.hidden=[32]", "data.type=npy", "train.batch_size=32",
                          "train.micro_batch_size=16", "train.threads=1", "data.num_workers=0", "log.every=1",
                          "log.progress=off", "log.peak_gflops=100", "train.eval_batch_size=16", NULL};
    for (int i = 0; base[i]; i++) ST_TRY(st_config_set(c, base[i]));
    const char *files[][2] = {{"data.train", "train.npy"},
                              {"data.train_labels", "train_labels.npy"},
                              {"data.val", "val.npy"},
                              {"data.val_labels", "val_labels.npy"}};
    for (int i = 0; i < 4; i++) {
        snprintf(buf, sizeof buf, "%s=%s/%s", files[i][0], root, files[i][1]);
        ST_TRY(st_config_set(c, buf));
    }
    snprintf(buf, sizeof buf, "train.out_dir=%s/%s", root, name);
    ST_TRY(st_config_set(c, buf));
    for (int i = 0; extra && extra[i]; i++) ST_TRY(st_config_set(c, extra[i]));
    return ST_OK;
}

/* Train quietly (saving weights and the final checkpoint); resume: NULL or "auto". */
static inline st_status tf_train(st_config *c, const char *resume, st_run_result *r) {
    st_run_opts o = {0};
    o.quiet = true;
    o.save = true;
    o.resume = resume;
    return st_train(c, &o, r);
}

/* Every tensor of two weight files: |a - b| <= rtol |b| + atol max|b| (per
 * tensor, as tests/test_cuda_models.c; NaN fails). Prints the worst and
 * counts the elements that differ at all; returns the failures. */
static inline int tf_compare_weights(const char *label, const char *pa, const char *pb, double rtol, double atol) {
    st_safetensors *fa = NULL, *fb = NULL;
    int bad = 0;
    if (st_safetensors_open(pa, &fa) != ST_OK || st_safetensors_open(pb, &fb) != ST_OK) {
        fprintf(stderr, "FAIL %s: %s\n", label, st_last_error());
        st_safetensors_close(fa);
        return 1;
    }
    int64_t differ = 0, total = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < st_safetensors_count(fb); i++) {
        const st_safetensors_entry *e = st_safetensors_entry_at(fb, i), *ea = st_safetensors_find(fa, e->name);
        if (!ea || ea->count != e->count) {
            fprintf(stderr, "FAIL %s: %s is not in %s with %lld elements\n", label, e->name, pa, (long long)e->count);
            bad++;
            continue;
        }
        float *a = malloc((size_t)e->count * sizeof *a), *b = malloc((size_t)e->count * sizeof *b);
        if (!a || !b || st_safetensors_read_f32(fa, e->name, a, e->count) != ST_OK ||
            st_safetensors_read_f32(fb, e->name, b, e->count) != ST_OK) {
            fprintf(stderr, "FAIL %s: reading %s: %s\n", label, e->name, st_last_error());
            bad++;
        } else {
            double mx = 0;
            for (int64_t j = 0; j < e->count; j++)
                if (fabs((double)b[j]) > mx) mx = fabs((double)b[j]);
            for (int64_t j = 0; j < e->count; j++) {
                const double d = fabs((double)a[j] - (double)b[j]), tol = rtol * fabs((double)b[j]) + atol * mx;
                differ += a[j] != b[j];
                if (!(d <= tol)) {
                    if (bad < 8)
                        fprintf(stderr, "FAIL %s: %s[%lld] = %.9g, expected %.9g (|diff| %.3g > %.3g)\n", label,
                                e->name, (long long)j, (double)a[j], (double)b[j], d, tol);
                    bad++;
                }
                if (!(d <= worst)) {
                    worst = d;
                    worst_name = e->name;
                }
            }
        }
        total += e->count;
        free(a);
        free(b);
    }
    printf("%s: %lld of %lld weights differ, the largest by %.3g (%s)\n", label, (long long)differ, (long long)total,
           worst, worst_name);
    st_safetensors_close(fa);
    st_safetensors_close(fb);
    st_test_failures += bad;
    return bad;
}

/* A run stopped and resumed continues the same trajectory: `straight` (its
 * keys with train.steps=12) run at once, then `first` (the same with
 * train.steps=6) and `straight` again with --resume auto, which must start at
 * step 6, end at 12 and save the same weights bit for bit. `straight_cfg`,
 * when not NULL, receives the straight run's effective configuration. */
static inline void tf_check_resume(const char *label, const char *root, const char *const *straight,
                                   const char *const *first, st_config *straight_cfg) {
    st_config c;
    st_run_result r;
    CHECK_OK(tf_config(&c, root, "straight", straight));
    CHECK_OK(tf_train(&c, NULL, &r));
    if (straight_cfg) *straight_cfg = c;
    CHECK_OK(tf_config(&c, root, "resumed", first));
    CHECK_OK(tf_train(&c, NULL, &r));
    CHECK_OK(tf_config(&c, root, "resumed", straight));
    CHECK_OK(tf_train(&c, "auto", &r));
    CHECK(r.start_step == 6 && r.steps == 12, "%s: resumed at step %lld, ended at %lld", label,
          (long long)r.start_step, (long long)r.steps);
    char a[600], b[600], what[128];
    snprintf(a, sizeof a, "%s/resumed/model.safetensors", root);
    snprintf(b, sizeof b, "%s/straight/model.safetensors", root);
    snprintf(what, sizeof what, "%s: resumed against straight", label);
    tf_compare_weights(what, a, b, 0, 0);
}

#endif
