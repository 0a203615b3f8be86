/* train.activation_checkpointing: auto decided by memory (src/hw/planner.h):
 * the first of off, selective and blocks with which the micro-batch fits,
 * and the effective configuration says why. The device is the A100-40GB
 * preset with its memory set between the two footprints the memory model
 * predicts (the planner's own numbers with the value given explicitly), for
 * a small GPT whose activations (1024 tokens a sample) dwarf its weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config_string.h"
#include "hw/planner.h"

#define GIB (1024.0 * 1024 * 1024)

static st_model *small_gpt(st_config *c) {
    st_config_defaults(c);
    CHECK_OK(st_config_set(c, "model.type=gpt"));
    c->model.n_layer = 4;
    c->model.n_embd = 256;
    c->model.n_head = 4;
    c->model.vocab_size = 256;
    c->model.block_size = 1024;
    snprintf(c->data.type, sizeof c->data.type, "tokens");
    c->data.val[0] = '\0';
    c->train.batch_size = 8;
    st_model_input in = {.vocab_size = 256, .seq_len = 1024};
    st_model *m = NULL;
    CHECK_OK(st_model_create_layout(c, &in, &m));
    return m;
}

static void set(st_config *c, const char *kv) { CHECK_OK(st_config_set(c, kv)); }

/* The plan of c on one A100-40GB whose memory makes `usable` bytes usable
 * (the planner keeps 10% and 1 GiB back); usable 0: the preset's memory. */
static st_plan plan(st_config *c, st_model *m, double usable) {
    st_plan_input in = {.cfg = c, .model = m, .seq_len = 1024};
    st_hw_config hw;
    st_plan p;
    memset(&p, 0, sizeof p);
    CHECK_OK(st_hw_config_parse("1xA100-40GB", NULL, NULL, &hw));
    if (usable > 0) hw.dev.mem_bytes = (int64_t)((usable + GIB) / 0.9) + 1;
    CHECK_OK(st_plan_make(&in, &hw, &p));
    CHECK(p.ok, "no plan: %s", p.warning);
    return p;
}

/* Bytes per device the planner predicts at micro-batch `micro` with
 * checkpointing `ckpt` given explicitly. */
static double need(st_config *c, st_model *m, const char *micro, const char *ckpt) {
    st_config e = *c;
    char kv[64];
    snprintf(kv, sizeof kv, "train.micro_batch_size=%s", micro);
    set(&e, kv);
    snprintf(kv, sizeof kv, "train.activation_checkpointing=%s", ckpt);
    set(&e, kv);
    st_plan p = plan(&e, m, 0);
    return (double)p.mem.total;
}

static void check_printed(const st_config *c, const char *needle) {
    char *s = st_test_config_string(c);
    CHECK(s && strstr(s, needle), "the effective configuration lacks \"%s\"", needle);
    free(s);
}

/* An explicit micro-batch of 8: selective exactly when it fits only with
 * it, blocks when only with that. */
static void test_explicit_micro(void) {
    st_config c;
    st_model *m = small_gpt(&c);
    if (!m) return;
    set(&c, "train.micro_batch_size=8");
    const double off = need(&c, m, "8", "off"), on = need(&c, m, "8", "blocks"),
                 sel = need(&c, m, "8", "selective");
    printf("micro-batch 8: %.3f GiB without checkpointing, %.3f GiB selective, %.3f GiB blocks\n", off / GIB,
           sel / GIB, on / GIB);
    CHECK(on < 0.8 * off, "checkpointing saves little: %g of %g bytes", on, off);
    CHECK(on < sel && sel < 0.9 * off, "selective: %g bytes, between %g and %g", sel, on, off);

    /* between off and selective: selective, predicted as such, slower than
     * off by its element-wise recompute (no FLOPs) and faster than blocks
     * (checked below) */
    st_plan ps = plan(&c, m, (off + sel) / 2);
    CHECK(ps.checkpointing == ST_CKPT_SELECTIVE && ps.fits && (double)ps.mem.total == sel,
          "between off and selective: ckpt %d fits %d mem %lld (selective %g)", ps.checkpointing, ps.fits,
          (long long)ps.mem.total, sel);
    CHECK(strstr(ps.checkpointing_why, "selective: micro-batch 8 needs") != NULL, "why: %s",
          ps.checkpointing_why);
    st_config applied_sel = c;
    st_plan_apply(&ps, &applied_sel);
    check_printed(&applied_sel, "activation_checkpointing: selective");

    /* between selective and blocks: blocks, and the prediction is the checkpointed one */
    st_plan p = plan(&c, m, (sel + on) / 2);
    CHECK(p.checkpointing == ST_CKPT_BLOCKS && p.fits && (double)p.mem.total == on,
          "between: ckpt %d fits %d mem %lld (on %g)", p.checkpointing, p.fits, (long long)p.mem.total, on);
    CHECK(strstr(p.checkpointing_why, "blocks: micro-batch 8 needs") != NULL, "why: %s", p.checkpointing_why);
    st_plan fast = plan(&c, m, 0); /* the recompute costs time: a forward pass more */
    CHECK(!fast.checkpointing && strstr(fast.checkpointing_why, "off: micro-batch 8 fits without it"),
          "ample memory: %d %s", fast.checkpointing, fast.checkpointing_why);
    CHECK(p.time.step_s > 1.2 * fast.time.step_s, "recompute time %g vs %g s", p.time.step_s, fast.time.step_s);
    CHECK(ps.time.step_s > fast.time.step_s && ps.time.step_s < p.time.step_s,
          "selective time %g s, off %g s, blocks %g s", ps.time.step_s, fast.time.step_s, p.time.step_s);
    st_config applied = c;
    st_plan_apply(&p, &applied);
    CHECK(strcmp(applied.train.activation_checkpointing, "blocks") == 0 &&
              st_config_source(&applied, "train.activation_checkpointing") == ST_SRC_AUTO,
          "applied: %s", applied.train.activation_checkpointing);
    check_printed(&applied, "activation_checkpointing: blocks");
    check_printed(&applied, "auto: blocks: micro-batch 8 needs");
    /* the layout model is left as it was: a plan of the small case after
     * the big one still says off */
    CHECK(strcmp(m->cfg.train.activation_checkpointing, "auto") == 0, "model left at %s",
          m->cfg.train.activation_checkpointing);

    /* plenty of memory: off, explained */
    applied = c;
    st_plan_apply(&fast, &applied);
    CHECK(strcmp(applied.train.activation_checkpointing, "off") == 0, "small: %s",
          applied.train.activation_checkpointing);
    check_printed(&applied, "auto: off: micro-batch 8 fits without it");

    /* below even the checkpointed need (DDP given: offload would make room):
     * blocks, which needs the least, and the warning says it does not fit,
     * by the least figure (off was chosen, and the warning gave its larger need) */
    st_config ddp = c;
    set(&ddp, "dist.strategy=ddp");
    p = plan(&ddp, m, on * 0.9);
    CHECK(p.checkpointing == ST_CKPT_BLOCKS && !p.fits &&
              strstr(p.checkpointing_why, "does not fit even with it") && strstr(p.warning, "does not fit") &&
              p.mem.total <= on,
          "too small: %d %s / %s", p.checkpointing, p.checkpointing_why, p.warning);

    /* an explicit value is kept as given */
    st_config e = c;
    set(&e, "train.activation_checkpointing=off");
    p = plan(&e, m, (off + on) / 2);
    CHECK(!p.checkpointing && !p.fits && !p.checkpointing_why[0], "explicit off: %d %s", p.checkpointing,
          p.checkpointing_why);
    st_model_free(m);
}

/* micro-batch auto: accumulation first; checkpointing only when not even one
 * sample fits without it (and not offload, which comes after it). */
static void test_auto_micro(void) {
    st_config c;
    st_model *m = small_gpt(&c);
    if (!m) return;
    const double off1 = need(&c, m, "1", "off"), on1 = need(&c, m, "1", "blocks");
    const double off8 = need(&c, m, "8", "off");
    /* enough for a few samples without checkpointing: off, accumulating */
    st_plan p = plan(&c, m, (off1 + off8) / 2);
    CHECK(!p.checkpointing && p.micro < 8 && p.micro >= 1 && p.micro * p.accum == 8 && p.fits,
          "some samples: ckpt %d micro %lld", p.checkpointing, (long long)p.micro);
    CHECK(strstr(p.checkpointing_why, "off: micro-batch") && strstr(p.checkpointing_why, "accumulation"), "why: %s",
          p.checkpointing_why);
    /* not one sample without it, but with selective: selective, the largest micro-batch that fits */
    const double sel1 = need(&c, m, "1", "selective");
    CHECK(on1 < sel1 && sel1 < off1, "one sample: %g blocks, %g selective, %g off", on1, sel1, off1);
    p = plan(&c, m, (off1 + sel1) / 2);
    CHECK(p.checkpointing == ST_CKPT_SELECTIVE && p.fits && !p.offload && p.micro >= 1,
          "one sample only with selective: ckpt %d fits %d offload %d micro %lld", p.checkpointing, p.fits,
          p.offload, (long long)p.micro);
    CHECK(strstr(p.checkpointing_why, "selective: not even a micro-batch of 1 fits without it") != NULL,
          "why: %s", p.checkpointing_why);
    /* not one sample even with selective: blocks, DDP without offload, the largest micro-batch that fits */
    p = plan(&c, m, (sel1 + on1) / 2);
    CHECK(p.checkpointing == ST_CKPT_BLOCKS && p.fits && !p.offload && strcmp(p.strategy, "ddp") == 0 &&
              p.micro >= 1,
          "one sample only with it: ckpt %d fits %d offload %d %s micro %lld", p.checkpointing, p.fits,
          p.offload, p.strategy, (long long)p.micro);
    CHECK(strstr(p.checkpointing_why, "not even a micro-batch of 1 fits without it") != NULL, "why: %s",
          p.checkpointing_why);
    CHECK(strstr(p.strategy_why, "when recomputed") != NULL, "strategy why: %s", p.strategy_why);
    if (p.micro < 8) {
        char kv[64];
        snprintf(kv, sizeof kv, "%lld", (long long)(2 * p.micro));
        CHECK(need(&c, m, kv, "blocks") > (sel1 + on1) / 2, "micro %lld is not the largest",
              (long long)p.micro);
    }
    st_config applied = c;
    st_plan_apply(&p, &applied);
    CHECK(strcmp(applied.train.activation_checkpointing, "blocks") == 0 &&
              applied.train.micro_batch_size == p.micro,
          "applied %s micro %lld", applied.train.activation_checkpointing,
          (long long)applied.train.micro_batch_size);
    check_printed(&applied, "auto: blocks: not even a micro-batch of 1 fits without it");
    st_model_free(m);
}

int main(void) {
    test_explicit_micro();
    test_auto_micro();
    return st_test_finish("test_plan_checkpointing");
}
