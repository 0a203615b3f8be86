/* Checkpoint directories: a save and load round trip of weights, buffers,
 * optimizer state and position (a cnn with batch-norm, whose buffers sit
 * between its parameters); keep_checkpoints; the latest pointer; damaged
 * files (bad JSON, a flipped byte, a truncated file) named in errors; the
 * fallback of `auto`; an optimizer of another kind refused; the check of
 * the room for checkpoints on out_dir's filesystem. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/atomic_file.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/checkpoint.h"

static st_config cfg;

static st_model *make(void) {
    st_model_input in = {.height = 28, .width = 28, .channels = 1, .num_classes = 10};
    st_model *m = NULL;
    CHECK_OK(st_model_create(&cfg, &in, &m));
    return m;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void flip_byte(const char *path, long at) {
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL, "open %s", path);
    if (!fp) return;
    fseek(fp, at, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, at, SEEK_SET);
    fputc(c ^ 0x5a, fp);
    fclose(fp);
}

/* st_ckpt_space_check in MiB: its warning ("" when none) into out. */
static st_status space(const char *dir, int64_t ckpt_mib, int64_t model_mib, int64_t keep, int64_t free_mib,
                       char *out, size_t size) {
    return st_ckpt_space_check(dir, ckpt_mib << 20, model_mib << 20, keep, free_mib < 0 ? -1 : free_mib << 20,
                               -1, NULL, out, size);
}

/* Room for the checkpoints: an error when the first one and the final
 * weights do not fit; a warning when those kept (keep + 1 while a save
 * commits, less those already there) do not; nothing when they do, or
 * when every checkpoint is kept (how many depends on the run's length). */
static void test_space(const char *root) {
    char dir[4096], path[9000], warn[12000];
    snprintf(dir, sizeof dir, "%s/space", root);
    CHECK_FAILS(space(dir, 100, 30, 3, 120, warn, sizeof warn), ST_ERR_IO,
                "120.0 MiB free on its filesystem, but a checkpoint of this run takes 100.0 MiB (weights and "
                "optimizer state) and its final weights 30.0 MiB more");
    CHECK_OK(space(dir, 100, 30, 3, 200, warn, sizeof warn));
    CHECK(strstr(warn, "the 3 checkpoints of 100.0 MiB this run keeps (4 at once while a save commits, less "
                       "the 0 there now) and its final weights (30.0 MiB) need 430.0 MiB"),
          "warning: %s", warn);
    CHECK(strstr(warn, "(lower train.keep_checkpoints, or free space there)"), "its remedy: %s", warn);
    CHECK_OK(space(dir, 100, 30, 3, 430, warn, sizeof warn));
    CHECK(warn[0] == '\0', "430 MiB hold 4 x 100 + 30: %s", warn);
    /* keeping 1 already: lowering it is no way out (0 keeps them all); "1 checkpoint" */
    CHECK_OK(space(dir, 100, 30, 1, 200, warn, sizeof warn));
    CHECK(strstr(warn, "the 1 checkpoint of 100.0 MiB this run keeps") &&
              strstr(warn, "(choose another train.out_dir, or free space there)") &&
              !strstr(warn, "lower train.keep_checkpoints"),
          "keep 1: %s", warn);
    CHECK_OK(space(dir, 100, 30, 0, 200, warn, sizeof warn));
    CHECK(warn[0] == '\0', "keep 0 (all), its length not known: no warning: %s", warn);
    /* the checkpoints the run commits at least known (train.steps / train.checkpoint_every and its last):
     * where those alone do not fit, the disk fills for certain (check FAILs); keep 0 is sized too (it said
     * nothing of 5 x 100 MiB kept in 400) */
    CHECK(st_ckpt_planned(0, 1000, 200) == 5 && st_ckpt_planned(0, 1001, 200) == 6 &&
              st_ckpt_planned(0, 10, 0) == 1 && st_ckpt_planned(600, 1000, 200) == 2 &&
              st_ckpt_planned(1000, 1000, 200) == 0,
          "st_ckpt_planned");
    bool certain = false;
    CHECK_OK(st_ckpt_space_check(dir, 100 << 20, 30 << 20, 0, 400 << 20, 5, &certain, warn, sizeof warn));
    CHECK(certain && strstr(warn, "at least 5 checkpoints of 100.0 MiB") && strstr(warn, "need 530.0 MiB") &&
              strstr(warn, "the disk will fill") && strstr(warn, "set train.keep_checkpoints"),
          "keep 0, 5 checkpoints in 400 MiB: %s", warn);
    CHECK_OK(st_ckpt_space_check(dir, 100 << 20, 30 << 20, 0, 400 << 20, 3, &certain, warn, sizeof warn));
    CHECK(!certain && !warn[0], "keep 0, 3 checkpoints in 400 MiB: %s", warn);
    CHECK_OK(st_ckpt_space_check(dir, 100 << 20, 30 << 20, 3, 300 << 20, 10, &certain, warn, sizeof warn));
    CHECK(certain && strstr(warn, "need 430.0 MiB") && strstr(warn, "lower train.keep_checkpoints"),
          "keep 3, 10 checkpoints, 4 at once in 300 MiB: %s", warn);
    CHECK_OK(st_ckpt_space_check(dir, 100 << 20, 30 << 20, 3, 300 << 20, 1, &certain, warn, sizeof warn));
    CHECK(!certain && strstr(warn, "need 430.0 MiB"), "keep 3, 1 checkpoint known (more by time): %s", warn);
    /* two checkpoints already there: two more at most */
    for (int k = 1; k <= 2; k++) {
        snprintf(path, sizeof path, "%s/ckpt/step-%d", dir, k);
        CHECK_OK(st_mkdirs(path));
    }
    CHECK_OK(space(dir, 100, 30, 3, 229, warn, sizeof warn));
    CHECK(strstr(warn, "less the 2 there now") && strstr(warn, "need 230.0 MiB"), "with 2 there: %s", warn);
    CHECK_OK(space(dir, 100, 30, 3, 230, warn, sizeof warn));
    CHECK(warn[0] == '\0', "230 MiB hold 2 x 100 + 30: %s", warn);
    CHECK_OK(space(dir, 100, 30, 1, 130, warn, sizeof warn)); /* keep 1 with 2 there: one more at once */
    CHECK(warn[0] == '\0', "keep 1: %s", warn);
    /* What the folders set aside hold is said where space is short: a
     * rewind's 3 MiB in ckpt.abandoned, the run before's 1 MiB in ckpt.previous */
    const char *aside[] = {"ckpt.abandoned/step-9", "ckpt.abandoned/step-9.1", "ckpt.previous/step-1"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, aside[k]);
        CHECK_OK(st_mkdirs(path));
        snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, aside[k]);
        FILE *fp = fopen(path, "w");
        CHECK(fp && ftruncate(fileno(fp), (k < 2 ? 3 : 2) << 19) == 0, "make %s", path);
        if (fp) fclose(fp);
    }
    CHECK_OK(space(dir, 100, 30, 3, 229, warn, sizeof warn));
    snprintf(path, sizeof path,
             "; %s/ckpt.abandoned holds 3.0 MiB, the checkpoints of trajectories resumes left; "
             "%s/ckpt.previous holds 1.0 MiB, the checkpoints of the run before this one: nothing prunes "
             "them; remove them once you no longer need them)",
             dir, dir);
    CHECK(strstr(warn, path), "the warning does not say what is set aside: %s", warn);
    CHECK_FAILS(space(dir, 100, 30, 3, 120, warn, sizeof warn), ST_ERR_IO, "free space there (");
    CHECK(strstr(st_last_error(), "ckpt.abandoned holds 3.0 MiB"), "the error: %s", st_last_error());
    /* the filesystem's own figure, for a directory not made yet (its parent's) */
    snprintf(path, sizeof path, "%s/not/made/yet", root);
    CHECK_OK(space(path, 0, 0, 3, -1, warn, sizeof warn));
    CHECK(warn[0] == '\0', "an empty checkpoint fits anywhere: %s", warn);
    CHECK_FAILS(space(path, 1 << 30, 0, 3, -1, warn, sizeof warn), ST_ERR_IO, "MiB free on its filesystem");
}

/* A file of a 250-byte name written whole: its temporary name is cut to fit
 * the 255 bytes a name may take (".tmp.<pid>" after 250 bytes failed with
 * "File name too long": `data tokenize` into such a name did). */
static void test_long_name(const char *root) {
    char tmp[4096], want[64];
    snprintf(want, sizeof want, "/d/run.yaml.tmp.%ld", (long)getpid());
    st_tmp_name(tmp, sizeof tmp, "/d/run.yaml");
    CHECK(strcmp(tmp, want) == 0, "a short name's temporary: %s", tmp);
    char name[251], path[4096];
    memset(name, 'n', 250);
    name[250] = '\0';
    snprintf(path, sizeof path, "%s/%s", root, name);
    st_tmp_name(tmp, sizeof tmp, path);
    const char *base = strrchr(tmp, '/') + 1;
    CHECK(strlen(base) == 255 && strncmp(tmp, path, strlen(root) + 1) == 0 && strstr(base, ".tmp."),
          "a 250-byte name's temporary, %zu bytes: %s", strlen(base), base);
    /* (two long names alike but for their end: temporaries of their own) */
    char other[4096], tmp2[4096];
    snprintf(other, sizeof other, "%s", path);
    other[strlen(other) - 1] = 'm';
    st_tmp_name(tmp2, sizeof tmp2, other);
    CHECK(strcmp(tmp, tmp2) != 0, "two long names, one temporary: %s", tmp2);
    st_atomic_file f;
    CHECK_OK(st_atomic_open(&f, path));
    if (!f.fp) return;
    fputs("whole\n", f.fp);
    CHECK_OK(st_atomic_commit(&f));
    char line[16] = "";
    FILE *in = fopen(path, "r");
    CHECK(in && fgets(line, sizeof line, in) && strcmp(line, "whole\n") == 0,
          "the 250-byte name's file: '%s'", line);
    if (in) fclose(in);
    unlink(path);
}

int main(void) {
    char root[] = "/tmp/test_checkpoint.XXXXXX";
    if (!mkdtemp(root)) return st_test_skip("test_checkpoint", "cannot create a temporary directory");
    st_config_defaults(&cfg);
    snprintf(cfg.model.type, sizeof cfg.model.type, "cnn");
    snprintf(cfg.train.out_dir, sizeof cfg.train.out_dir, "%s/run", root);
    cfg.model.channels = (st_int_list){2, {4, 8}}; /* small and quick */
    cfg.model.pool = (st_int_list){2, {1, 1}};
    cfg.train.keep_checkpoints = 2;
    st_model *a = make(), *b = make();
    st_optim oa = {0}, ob = {0};
    if (!a || !b) return st_test_finish("test_checkpoint");
    CHECK_OK(st_optim_init(&oa, &cfg, &a->params));
    CHECK_OK(st_optim_init(&ob, &cfg, &b->params));
    CHECK_OK(st_model_init_weights(a, 7));
    CHECK_OK(st_model_init_weights(b, 8));
    for (int64_t i = 0; i < oa.count; i++) {
        oa.m[i] = 0.001f * (float)(i % 97);
        oa.v[i] = 0.002f * (float)(i % 89);
    }
    for (int i = 0; i < a->params.n; i++) /* running statistics as after some steps */
        if (a->params.t[i]->kind != ST_TENSOR_PARAM)
            for (int64_t k = 0; k < a->params.t[i]->count; k++)
                a->params.t[i]->data[k] = 0.5f + (float)k;
    oa.t = 3; /* (updates: at most the steps, 3 below) */
    char saved[4096], path[4200];
    for (int64_t step = 1; step <= 3; step++) {
        /* an fp16 run's loss scaler state rides along (0x1p-3 * 2^step: not an integer) */
        st_ckpt_state st = {.step = step,
                            .pos = {1, step, 0},
                            .seed = 5,
                            .batch_size = 128,
                            .loss_scale = 0x1p20 * (double)step + 0.125,
                            .scale_good_steps = step + 10,
                            .skipped_steps = step + 20,
                            .optim_world = 1,
                            .samples = 1000 + step};
        CHECK_OK(st_ckpt_save(&cfg, a, &oa, &st, NULL, saved, sizeof saved));
    }
    snprintf(path, sizeof path, "%s/run/ckpt/step-1", root);
    CHECK(!exists(path), "keep_checkpoints 2 should have deleted step-1");
    snprintf(path, sizeof path, "%s/run/ckpt/step-2/state.json", root);
    CHECK(exists(path), "step-2 should be kept");
    CHECK(strstr(saved, "step-3") != NULL, "saved %s", saved);

    /* The round trip. */
    char dir[4096];
    bool found = false;
    CHECK_OK(st_ckpt_find(cfg.train.out_dir, "auto", NULL, dir, sizeof dir, &found, NULL));
    CHECK(found && strstr(dir, "step-3"), "auto found %s", dir);
    st_ckpt_state got = {0};
    CHECK_OK(st_ckpt_load(dir, b, &ob, &got));
    CHECK(got.step == 3 && got.pos.epoch == 1 && got.pos.step == 3 && got.pos.micro == 0 && got.seed == 5 &&
              got.batch_size == cfg.train.batch_size,
          "state step %lld pos %lld/%lld/%lld seed %llu", (long long)got.step, (long long)got.pos.epoch,
          (long long)got.pos.step, (long long)got.pos.micro, (unsigned long long)got.seed);
    CHECK(ob.t == 3 && got.samples == 1003, "t %lld, samples %lld", (long long)ob.t, (long long)got.samples);
    CHECK(got.loss_scale == 0x1p20 * 3 + 0.125 && got.scale_good_steps == 13 && got.skipped_steps == 23,
          "loss scale state %.17g %lld %lld", got.loss_scale, (long long)got.scale_good_steps,
          (long long)got.skipped_steps);
    for (int i = 0; i < a->params.n; i++) {
        const st_tensor *ta = a->params.t[i], *tb = b->params.t[i];
        const size_t nbytes = (size_t)ta->count * sizeof(float);
        CHECK(memcmp(ta->data, tb->data, nbytes) == 0, "%s differs", ta->name);
        if (ta->kind != ST_TENSOR_PARAM) continue;
        CHECK(memcmp(oa.m + ta->offset, ob.m + tb->offset, nbytes) == 0, "m.%s differs", ta->name);
        CHECK(memcmp(oa.v + ta->offset, ob.v + tb->offset, nbytes) == 0, "v.%s differs", ta->name);
    }

    /* step-3 saved again (a resumed run saving the same step): replaced
     * whole, no other folder left beside it */
    {
        st_ckpt_state st = {
            .step = 3, .pos = {1, 3, 0}, .seed = 5, .batch_size = 128, .optim_world = 1, .samples = 2003};
        CHECK_OK(st_ckpt_save(&cfg, a, &oa, &st, NULL, saved, sizeof saved));
        CHECK_OK(st_ckpt_find(cfg.train.out_dir, "auto", NULL, dir, sizeof dir, &found, NULL));
        st_ckpt_state again = {0};
        CHECK_OK(st_ckpt_load(dir, b, &ob, &again));
        CHECK(found && strstr(dir, "step-3") && again.samples == 2003, "step-3 saved again: %s, samples %lld",
              dir, (long long)again.samples);
        snprintf(path, sizeof path, "%s/run/ckpt", root);
        DIR *dd = opendir(path);
        int others = 0;
        for (struct dirent *e; dd && (e = readdir(dd));)
            others += e->d_name[0] != '.' && strcmp(e->d_name, "latest") && strcmp(e->d_name, "step-2") &&
                      strcmp(e->d_name, "step-3");
        if (dd) closedir(dd);
        CHECK(dd && others == 0, "%d folders beside latest, step-2 and step-3 after saving step-3 again",
              others);
    }

    /* A crash after step-3's rename, before `latest` was written: latest
     * still names step-2, and auto takes the newer, whole step-3. */
    snprintf(path, sizeof path, "%s/run/ckpt/latest", root);
    FILE *lf = fopen(path, "w");
    CHECK(lf != NULL, "rewrite %s", path);
    if (lf) {
        fputs("step-2\n", lf);
        fclose(lf);
    }
    CHECK_OK(st_ckpt_find(cfg.train.out_dir, "auto", NULL, dir, sizeof dir, &found, NULL));
    CHECK(found && strstr(dir, "step-3"), "auto with latest at step-2 and a whole step-3: found %s", dir);
    lf = fopen(path, "w");
    if (lf) {
        fputs("step-3\n", lf);
        fclose(lf);
    }

    /* Damage: a flipped byte in the optimizer file of step-3, bad JSON in step-2. */
    snprintf(path, sizeof path, "%s/run/ckpt/step-3/optim-rank0.safetensors", root);
    flip_byte(path, 200);
    CHECK_FAILS(st_ckpt_verify(dir, &got), ST_ERR_FORMAT, "step-3/optim-rank0.safetensors: CRC32");
    snprintf(path, sizeof path, "%s/run/ckpt/step-2", root);
    CHECK_OK(st_ckpt_find(cfg.train.out_dir, "auto", NULL, dir, sizeof dir, &found, NULL));
    CHECK(found && strstr(dir, "step-2"), "auto should fall back to step-2, found %s", dir);
    snprintf(path, sizeof path, "%s/run/ckpt/step-2/state.json", root);
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs("{ \"format_version\": 1, ", fp);
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/run/ckpt/step-2", root);
    CHECK_FAILS(st_ckpt_find(cfg.train.out_dir, path, NULL, dir, sizeof dir, &found, NULL), ST_ERR_FORMAT,
                "step-2/state.json: not valid JSON");
    /* An optimizer layout that cannot hold the parameters, and one whose
     * shard is past what st_shard_plan makes (its product with the shards
     * overflows 64 bits, which the sanitizer build traps on; a huge shard
     * was an allocation of petabytes at the load): both refused by name. */
    const char *layouts[3][3] = {
        {"\"world\": 2, \"shard\": 3, \"count\": 7", "2 shards of 3 do not hold 7", "5"},
        {"\"world\": 1048576, \"shard\": 9000000000000000, \"count\": 1",
         "shards of 9000000000000000 for 1 parameters over 1048576 ranks, where a save makes them 1025 at "
         "most",
         "5"},
        {"\"world\": 1, \"shard\": 1, \"count\": 1", "seed \"5x\" is not a whole number", "5x"}};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/run/ckpt/step-2/state.json", root);
        fp = fopen(path, "w");
        CHECK(fp != NULL, "rewrite %s", path);
        if (!fp) break;
        fprintf(fp,
                "{\"format_version\": %d, \"step\": 2, \"sampler\": {\"epoch\": 0, \"step\": 2, "
                "\"micro\": 0}, \"seed\": \"%s\", \"files\": {}, \"config\": {\"train\": "
                "{\"batch_size\": 128}}, \"optim\": {\"layout\": \"shards\", %s}}",
                ST_CKPT_VERSION, layouts[i][2], layouts[i][0]);
        fclose(fp);
        snprintf(path, sizeof path, "%s/run/ckpt/step-2", root);
        CHECK_FAILS(st_ckpt_verify(path, &got), ST_ERR_FORMAT, layouts[i][1]);
    }
    /* Another step inside than the folder's name (a digit flipped): a resume
     * at it would run the schedule from there and set the newer ones aside. */
    snprintf(path, sizeof path, "%s/run/ckpt/step-2/state.json", root);
    fp = fopen(path, "w");
    CHECK(fp != NULL, "rewrite %s", path);
    if (fp) {
        fprintf(fp,
                "{\"format_version\": %d, \"step\": 7, \"sampler\": {\"epoch\": 0, \"step\": 2, "
                "\"micro\": 0}, \"seed\": \"5\", \"files\": {}, \"config\": {\"train\": "
                "{\"batch_size\": 128}}}",
                ST_CKPT_VERSION);
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/run/ckpt/step-2", root);
    CHECK_FAILS(st_ckpt_verify(path, &got), ST_ERR_FORMAT,
                "step-2/state.json: step 7, in the folder of step 2");
    /* Every checkpoint damaged: auto is an error naming the folder and the
     * first damage, never "none there" (a resume from step 0 would replace
     * checkpoints that may yet be repaired or read). */
    CHECK_FAILS(st_ckpt_find(cfg.train.out_dir, "auto", NULL, dir, sizeof dir, &found, NULL), ST_ERR_FORMAT,
                "no good checkpoint among the 2 in");
    CHECK(!found, "no good checkpoint is left, found %s", dir);
    CHECK(strstr(st_last_error(), "step-3/optim-rank0.safetensors: CRC32") != NULL,
          "the error names the first damage: %s", st_last_error());
    CHECK_OK(st_ckpt_find("/nonexistent/run", "auto", NULL, dir, sizeof dir, &found, NULL));
    CHECK(!found, "no checkpoint directory at all");

    /* A truncated model file, and an optimizer of another kind. */
    st_ckpt_state st = {.step = 4, .pos = {0, 4, 0}, .seed = 5, .batch_size = 128, .optim_world = 1};
    CHECK_OK(st_ckpt_save(&cfg, a, &oa, &st, NULL, saved, sizeof saved));
    st_optim sgd = {0};
    st_config cs = cfg;
    snprintf(cs.optim.type, sizeof cs.optim.type, "sgd");
    CHECK_OK(st_optim_init(&sgd, &cs, &b->params));
    CHECK_FAILS(st_ckpt_load(saved, b, &sgd, &got), ST_ERR_CONFIG, "optim.type");
    snprintf(path, sizeof path, "%s/model.safetensors", saved);
    CHECK(truncate(path, 100) == 0, "truncate");
    CHECK_FAILS(st_ckpt_load(saved, b, &ob, &got), ST_ERR_FORMAT, "step-4/model.safetensors: 100 bytes");

    test_space(root);
    test_long_name(root);

    st_optim_free(&sgd);
    st_optim_free(&oa);
    st_optim_free(&ob);
    st_model_free(a);
    st_model_free(b);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "cleanup");
    return st_test_finish("test_checkpoint");
}
