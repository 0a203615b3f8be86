/* The planner (see planner.h). */
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_schema.h"
#include "data/loader.h"
#include "model/model.h"

#define GIB (1024.0 * 1024 * 1024)

/* "1.5 GiB", "310 MiB" */
static const char *human(double bytes, char *buf, size_t n) {
    if (bytes >= GIB)
        snprintf(buf, n, "%.1f GiB", bytes / GIB);
    else
        snprintf(buf, n, "%.0f MiB", bytes / (1024.0 * 1024));
    return buf;
}

/* One rank's share of a node's host memory: 85% of it over the node's
 * ranks, and no more than 85% of what an address-space limit leaves each
 * process (each rank has its own: ulimit -v is not divided). */
static int64_t host_share(int64_t bytes, const st_hw_config *hw) {
    int64_t share = (int64_t)(0.85 * (double)bytes / hw->per_node);
    const int64_t own = (int64_t)(0.85 * (double)hw->dev.proc_mem_bytes);
    if (hw->dev.proc_limited && own < share) share = own;
    return share;
}

static int64_t mem_limit(const st_hw_config *hw) {
    const st_hw_device *d = &hw->dev;
    if (d->gpu) { /* (CUDA's context and the libraries' workspaces take about 1 GiB) */
        const double usable = 0.9 * (double)d->mem_bytes - GIB;
        return usable > 0 ? (int64_t)usable : 0;
    }
    return host_share(d->mem_bytes, hw);
}

static void choose_precision(const st_config *c, const st_hw_device *d, st_plan *p) {
    if (strcmp(c->precision, "auto") != 0) {
        snprintf(p->precision, sizeof p->precision, "%s", c->precision);
        return;
    }
    if (!d->gpu) {
        snprintf(p->precision, sizeof p->precision, "fp32");
        snprintf(p->precision_why, sizeof p->precision_why, "fp32 on the CPU");
    } else if (d->cc_major >= 8) {
        snprintf(p->precision, sizeof p->precision, "bf16");
        snprintf(p->precision_why, sizeof p->precision_why, "bf16: compute capability %d.%d >= 8.0",
                 d->cc_major, d->cc_minor);
    } else {
        snprintf(p->precision, sizeof p->precision, "fp16");
        snprintf(p->precision_why, sizeof p->precision_why,
                 "fp16 with loss scaling: compute capability %d.%d has no bf16", d->cc_major, d->cc_minor);
    }
}

static st_mem_opts mem_opts(const st_plan_input *in, const st_plan *p) {
    const st_config *c = in->cfg;
    st_mem_opts o = {0};
    o.mixed = strcmp(p->precision, "fp32") != 0;
    o.optim_states = strcmp(c->optim.type, "sgd") == 0 ? 1 : 2;
    o.zero = strcmp(p->strategy, "zero2") == 0 ? 2 : strcmp(p->strategy, "zero1") == 0 ? 1 : 0;
    o.offload = p->offload;
    o.ranks = p->ranks;
    o.bucket_cap_mb = c->dist.bucket_cap_mb;
    o.grad_wire_bytes = strcmp(c->dist.grad_dtype, "fp32") == 0 ? 4 : 2;
    o.device_layout = p->hw.dev.gpu;
    o.fused_gelu = p->fused_gelu;
    o.async_ckpt = c->train.checkpoint_async && !in->eval_only;
    o.forward_only = in->eval_only;
    int workers = (int)c->data.num_workers;
    if (workers == ST_AUTO) workers = st_loader_auto_workers(in->cores_per_rank);
    const int prefetch = workers > 0 ? 2 * workers : 1; /* train.c */
    o.sample_in_bytes = in->sample_in_bytes;
    o.sample_out_bytes = in->sample_out_bytes;
    if (!p->hw.dev.gpu) {                /* on the CPU the loader ring and the data share the memory */
        o.loader_buffers = prefetch + 1; /* one held (feed.c) */
        o.data_bytes = in->data_bytes;
    } else if (in->sample_in_bytes > 0) { /* the batch feed (feed.c): one in copy, one taken ahead */
        o.loader_buffers = prefetch + 2;
        o.device_feed = true;
    }
    return o;
}

static st_status mem_at(const st_plan_input *in, st_plan *p, int64_t micro, st_mem *m) {
    st_mem_opts o = mem_opts(in, p);
    if (in->has_eval) {
        const int64_t e = in->cfg->train.eval_batch_size;
        o.eval_batch = e == ST_AUTO ? micro : e;
        /* (one given past the validation set: the whole set in one batch, as a run takes it; auto's, the
         * micro-batch, a run builds whole) */
        if (e != ST_AUTO && in->eval_samples > 0 && o.eval_batch > in->eval_samples)
            o.eval_batch = in->eval_samples;
    }
    return st_mem_estimate(in->model, micro, &o, m);
}

const char *st_ckpt_name(int level) {
    return level == ST_CKPT_BLOCKS ? "blocks" : level == ST_CKPT_SELECTIVE ? "selective" : "off";
}

int st_ckpt_level(const char *name) {
    return strcmp(name, "blocks") == 0      ? ST_CKPT_BLOCKS
           : strcmp(name, "selective") == 0 ? ST_CKPT_SELECTIVE
                                            : ST_CKPT_OFF;
}

/* The layout model's graphs (memory and cost) follow its configuration's
 * train.activation_checkpointing, as a run's do (model.c). */
static void set_checkpointing(const st_plan_input *in, int level) {
    char *v = in->model->cfg.train.activation_checkpointing;
    snprintf(v, sizeof in->model->cfg.train.activation_checkpointing, "%s", st_ckpt_name(level));
}

static bool auto_checkpointing(const st_plan_input *in) {
    return strcmp(in->cfg->train.activation_checkpointing, "auto") == 0;
}

/* *m, the memory at `micro` as configured, becomes the least the plan may
 * use: with checkpointing auto, the smaller of off and blocks (left off after). */
static st_status recompute_if_less(const st_plan_input *in, st_plan *p, int64_t micro, st_mem *m) {
    if (!auto_checkpointing(in) || m->total <= p->mem_limit) return ST_OK;
    st_mem with;
    set_checkpointing(in, ST_CKPT_BLOCKS);
    st_status s = mem_at(in, p, micro, &with);
    set_checkpointing(in, ST_CKPT_OFF);
    if (s == ST_OK && with.total < m->total) *m = with;
    return s;
}

/* DDP when the model states and the micro-batch (an explicit one, else a
 * single sample) fit; else ZeRO when there are ranks to shard over (ZeRO-2
 * on the CPU; on GPUs ZeRO-1 first, which reduces once a step where ZeRO-2
 * reduces every micro-step, then ZeRO-2 with its sharded gradients); else
 * offload. */
static st_status choose_strategy(const st_plan_input *in, st_plan *p) {
    const char *s = in->cfg->dist.strategy;
    if (strcmp(s, "auto") != 0) {
        snprintf(p->strategy, sizeof p->strategy, "%s", s);
        return ST_OK;
    }
    const int64_t mb = in->cfg->train.micro_batch_size == ST_AUTO ? 1 : in->cfg->train.micro_batch_size;
    const char *what = mb == 1 ? "a sample" : "the micro-batch";
    char b1[32], b2[32];
    st_mem m;
    snprintf(p->strategy, sizeof p->strategy, "ddp");
    ST_TRY(mem_at(in, p, mb, &m));
    if (m.total <= p->mem_limit) {
        snprintf(p->strategy_why, sizeof p->strategy_why, "model states (%s) and %s fit in %s",
                 human((double)(m.params + m.grads + m.optim), b1, sizeof b1), what,
                 human((double)p->mem_limit, b2, sizeof b2));
        return ST_OK;
    }
    /* Sharding costs no more traffic than DDP's all-reduce, so it comes
     * before recomputing; recomputing comes before offload's PCIe copies. */
    if (p->ranks > 1) snprintf(p->strategy, sizeof p->strategy, "%s", p->hw.dev.gpu ? "zero1" : "zero2");
    const char *before = "DDP's";
    if (p->ranks > 1 && p->hw.dev.gpu) {
        ST_TRY(mem_at(in, p, mb, &m));
        if (m.total > p->mem_limit) {
            const st_mem zero1 = m;
            snprintf(p->strategy, sizeof p->strategy, "zero2");
            before = "ZeRO-1's";
            ST_TRY(mem_at(in, p, mb, &m));
            if (m.total >= zero1.total) { /* buckets too few for its staging to be reused (ddp.h) */
                snprintf(p->strategy, sizeof p->strategy, "zero1");
                before = "DDP's";
                m = zero1;
            }
        }
    } else if (p->ranks > 1) {
        ST_TRY(mem_at(in, p, mb, &m)); /* ZeRO-2's (m was DDP's) */
    }
    ST_TRY(recompute_if_less(in, p, mb, &m));
    if (m.total <= p->mem_limit) {
        if (p->ranks > 1)
            snprintf(p->strategy_why, sizeof p->strategy_why, "%s model states and %s do not fit in %s",
                     before, what, human((double)p->mem_limit, b2, sizeof b2));
        else
            snprintf(p->strategy_why, sizeof p->strategy_why,
                     "model states (%s) and %s fit in %s when recomputed",
                     human((double)(m.params + m.grads + m.optim), b1, sizeof b1), what,
                     human((double)p->mem_limit, b2, sizeof b2));
        return ST_OK;
    }
    if (!p->hw.dev.gpu) { /* (the optimizer's state is in host memory already: nothing to offload to) */
        snprintf(p->strategy_why, sizeof p->strategy_why, "model states and %s do not fit in %s%s", what,
                 human((double)p->mem_limit, b2, sizeof b2), p->ranks > 1 ? " even sharded" : "");
        return ST_OK;
    }
    if (st_config_source(in->cfg, "optim.offload") != ST_SRC_DEFAULT && !in->cfg->optim.offload) {
        snprintf(p->strategy_why, sizeof p->strategy_why,
                 "model states and %s do not fit%s, and optim.offload: false rules out offload", what,
                 p->ranks > 1 ? " even sharded" : "");
        return ST_OK;
    }
    /* (the strategy: ddp on one rank, else the ZeRO stage tried last; st_plan_apply sets optim.offload) */
    p->offload = true;
    snprintf(p->strategy_why, sizeof p->strategy_why, "%s with offload: model states and %s do not fit%s",
             p->strategy, what, p->ranks > 1 ? " even sharded" : "");
    return ST_OK;
}

/* The largest divisor of per_rank whose memory fits, or 0. A micro-batch
 * the layout refuses (a layer's element count past its index type) does
 * not fit: the next smaller one is tried. The divisors come in pairs
 * (q, per_rank / q) with q up to its square root: those below it in
 * increasing q are the large ones, in decreasing order. */
static st_status largest_fit(const st_plan_input *in, st_plan *p, int64_t per_rank, int64_t *micro) {
    st_mem m;
    *micro = 0;
    int64_t r = (int64_t)sqrt((double)per_rank);
    while (r * r > per_rank)
        r--;
    while ((r + 1) * (r + 1) <= per_rank)
        r++;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: per_rank / q for q = 1..r (decreasing, all >= r); pass 1: q = r..1 */
        for (int64_t q = pass ? r : 1; pass ? q >= 1 : q <= r; q += pass ? -1 : 1) {
            if (per_rank % q != 0) continue;
            const int64_t d = pass ? q : per_rank / q;
            if (pass && d * d == per_rank) continue; /* (tried in pass 0) */
            const st_status e = mem_at(in, p, d, &m);
            if (e == ST_ERR_NOMEM) return e;
            if (e != ST_OK) {
                st_clear_error();
                continue;
            }
            if (m.total >= 0 && m.total <= p->mem_limit) {
                *micro = d;
                return ST_OK;
            }
        }
    }
    return ST_OK;
}

/* train.activation_checkpointing auto with an explicit micro-batch: the
 * first of selective and blocks with which it fits, when it does not
 * without. Leaves the layout model set to the choice. */
static st_status decide_checkpointing(const st_plan_input *in, st_plan *p) {
    char b1[32], b2[32], b3[32];
    st_mem off, on;
    ST_TRY(mem_at(in, p, p->micro, &off));
    human((double)p->mem_limit, b3, sizeof b3);
    if (off.total <= p->mem_limit) {
        snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
                 "off: micro-batch %lld fits without it (%s of %s)", (long long)p->micro,
                 human((double)off.total, b1, sizeof b1), b3);
        return ST_OK;
    }
    for (int level = ST_CKPT_SELECTIVE; level <= ST_CKPT_BLOCKS; level++) {
        set_checkpointing(in, level);
        ST_TRY(mem_at(in, p, p->micro, &on));
        if (on.total <= p->mem_limit) {
            p->checkpointing = level;
            snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
                     "%s: micro-batch %lld needs %s without it, %s with it (%s usable)", st_ckpt_name(level),
                     (long long)p->micro, human((double)off.total, b1, sizeof b1),
                     human((double)on.total, b2, sizeof b2), b3);
            return ST_OK;
        }
    }
    /* nothing fits: the level that needs the least, for the warning's figure and the run's best chance */
    p->checkpointing = ST_CKPT_BLOCKS; /* (the layout model is left set to it) */
    snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
             "blocks: micro-batch %lld does not fit even with it (%s, %s usable), but needs the least with it",
             (long long)p->micro, human((double)on.total, b2, sizeof b2), b3);
    return ST_OK;
}

/* What takes a plan that does not fit its memory, and what would shrink
 * that part: the activations (a shorter sequence, a smaller model or
 * micro-batch, recomputing them where `auto` has not tried it) or the model
 * states (sharded over more ranks, offloaded). */
static void fit_hint(const st_plan_input *in, st_plan *p, bool gpu) {
    const st_mem *m = &p->mem;
    const int64_t states = m->params + m->grads + m->optim;
    const int64_t acts = m->acts + m->act_grads + m->ints + m->work;
    const int64_t rest = m->total - states - acts;
    char fix[256];
    if (m->eval > states && m->eval > acts)
        snprintf(fix, sizeof fix, "the evaluation's graph takes the most (%.2f GiB): a smaller train.eval_batch_size",
                 (double)m->eval / GIB);
    else if (m->data > states && m->data > acts)
        snprintf(fix, sizeof fix,
                 "the data held in memory takes the most (%.2f GiB): fewer ranks on this node (each holds its "
                 "copy), or data.type tokens, which reads its file where it lies",
                 (double)m->data / GIB);
    else if (m->backend > states && m->backend > acts) /* (a device nearly full, or held by others) */
        snprintf(fix, sizeof fix,
                 "the GPU backend's own (cuBLASLt's workspace, the 16-bit operand scratch) takes the most "
                 "(%.2f GiB): %sa GPU with more free memory (nvidia-smi lists the processes that hold it)",
                 (double)m->backend / GIB, p->micro > 1 ? "a smaller train.micro_batch_size, or " : "");
    else if (acts >= states)
        snprintf(fix, sizeof fix,
                 "the activations take the most: %s%sa shorter model.block_size (a gpt) or a smaller model",
                 p->micro > 1 ? "a smaller train.micro_batch_size, " : "",
                 p->checkpointing || auto_checkpointing(in) /* auto: it was tried */
                     ? ""
                     : "train.activation_checkpointing: blocks (recomputed in backward), ");
    else if (gpu && m->params > p->mem_limit) /* (neither sharding nor offload moves the weights) */
        snprintf(fix, sizeof fix,
                 "the weights alone (%.2f GiB) pass the device's usable memory, and every rank holds them "
                 "whole (ZeRO-1 and -2 shard the optimizer state and gradients, offload moves those): a "
                 "smaller model, or GPUs with more memory",
                 (double)m->params / GIB);
    else if (gpu)
        snprintf(fix, sizeof fix, "the model states take the most: %s%s",
                 strcmp(p->strategy, "zero2") == 0 ? "more ranks (ZeRO-2 shards them)"
                                                   : "dist.strategy: zero2 over more ranks",
                 p->offload ? " (optim.offload is on already)" : ", or optim.offload: true (to host memory)");
    else
        snprintf(fix, sizeof fix, "the model states take the most: %s over more ranks on more nodes",
                 strcmp(p->strategy, "zero2") == 0 ? "ZeRO-2 shards them"
                                                   : "dist.strategy: zero2 shards them");
    /* (what happens past it: under an address-space limit an allocation fails, with an error; past a
     * memory limit the kernel's OOM killer ends the process) */
    snprintf(p->fit_hint, sizeof p->fit_hint,
             "of the %.2f GiB: model states %.2f, activations %.2f, the rest %.2f; %s%s",
             (double)m->total / GIB, (double)states / GIB, (double)acts / GIB,
             (double)(rest > 0 ? rest : 0) / GIB, fix,
             gpu                      ? ""
             : p->hw.dev.proc_limited ? " (past this process's address-space limit, ulimit -v, an allocation "
                                        "fails: the run stops with an error)"
                                      : " (past the memory it may use, the kernel ends a process with SIGKILL, "
                                        "no message)");
}

static st_status plan_body(const st_plan_input *in, const st_hw_config *hw, st_plan *p);
static void verdict_eval(const st_plan_input *in, st_plan *p);

/* An evaluation alone (planner.h): p->hw, ranks and mem_limit set. Its
 * batch E: train.eval_batch_size, else train.micro_batch_size, else with
 * train.eval_steps the micro-batch a training run plans (eval_steps counts
 * batches: the same samples as the run's evaluations), else the largest up
 * to the per-rank share of train.batch_size and of the validation samples
 * that fits (memory grows with E: a bisection); p->micro is E where it is
 * auto, so that eval_batch_size auto follows it. */
static st_status plan_eval(const st_plan_input *in, st_plan *p) {
    const st_config *c = in->cfg;
    const st_hw_config *hw = &p->hw;
    const int64_t n = p->ranks, per_rank = (c->train.batch_size + n - 1) / n;
    char b1[32];
    choose_precision(c, &hw->dev, p);
    p->fused_gelu = st_model_fused_gelu(c, hw->dev.gpu ? hw->dev.cc_major : 0, p->fused_gelu_why,
                                        sizeof p->fused_gelu_why);
    snprintf(p->strategy, sizeof p->strategy, "ddp");
    snprintf(p->strategy_why, sizeof p->strategy_why,
             "ddp: an evaluation holds no gradients or optimizer state");
    p->checkpointing = ST_CKPT_OFF;
    snprintf(p->checkpointing_why, sizeof p->checkpointing_why, "off: an evaluation runs forward alone");
    const bool eval_given = c->train.eval_batch_size != ST_AUTO,
               micro_given = c->train.micro_batch_size != ST_AUTO;
    if (eval_given || micro_given) {
        p->micro = micro_given ? c->train.micro_batch_size : c->train.eval_batch_size;
        snprintf(p->micro_why, sizeof p->micro_why, "an evaluation: %s is its batch",
                 eval_given ? "train.eval_batch_size" : "the micro-batch");
    } else if (c->train.eval_steps > 0) { /* (training's plan; its checkpointing level set back after) */
        st_plan_input tin = *in;
        tin.eval_only = false;
        st_plan *tp = malloc(sizeof *tp);
        if (!tp) return st_fail(ST_ERR_NOMEM, "out of host memory planning the evaluation");
        const st_status e = plan_body(&tin, hw, tp);
        set_checkpointing(in, ST_CKPT_OFF);
        /* (ranks that do not split the batch have no training micro-batch: the
         * batch over the ranks, rounded up, as eval_batch_size auto takes it; a
         * micro-batch of 1 evaluated eval_steps samples a rank) */
        const bool split = c->train.batch_size % n == 0;
        p->micro = e == ST_OK && tp->ok && tp->micro > 0 ? tp->micro : split ? 1 : per_rank;
        free(tp);
        ST_TRY(e);
        snprintf(p->micro_why, sizeof p->micro_why, "%s: train.eval_steps counts batches of it",
                 split ? "a training run's micro-batch" : "train.batch_size over the ranks, rounded up");
    } else {
        /* (the validation samples' share of each rank; 0: unknown) */
        const int64_t share = in->eval_samples > 0 ? (in->eval_samples + n - 1) / n : 0;
        int64_t hi = share > 0 && share < per_rank ? share : per_rank; /* hi + 1: does not fit, or past */
        int64_t lo = 0;                                                /* fits (0: none yet) */
        st_mem m;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo + 1) / 2;
            const st_status e = mem_at(in, p, mid, &m);
            if (e == ST_ERR_NOMEM) return e;
            if (e != ST_OK) st_clear_error(); /* (a batch the layout refuses: too large) */
            if (e == ST_OK && m.total <= p->mem_limit)
                lo = mid;
            else
                hi = mid - 1;
        }
        p->micro = lo > 0 ? lo : 1;
        if (lo == 0)
            snprintf(p->micro_why, sizeof p->micro_why,
                     "1: no evaluation batch fits %s (the warning says why)",
                     human((double)p->mem_limit, b1, sizeof b1));
        else if (lo == per_rank)
            snprintf(p->micro_why, sizeof p->micro_why, "an evaluation's batch: train.batch_size%s",
                     n > 1 ? " over the ranks" : "");
        else if (lo == share)
            snprintf(p->micro_why, sizeof p->micro_why, "an evaluation's batch: the validation samples%s",
                     n > 1 ? " over the ranks" : "");
        else
            snprintf(p->micro_why, sizeof p->micro_why, "the largest evaluation batch that fits %s",
                     human((double)p->mem_limit, b1, sizeof b1));
    }
    p->accum = 1;
    ST_TRY(mem_at(in, p, p->micro, &p->mem));
    verdict_eval(in, p);
    p->ok = true;
    return ST_OK;
}

/* An evaluation plan's verdict on p->mem: whether it fits, and where not
 * the warning and hint. */
static void verdict_eval(const st_plan_input *in, st_plan *p) {
    const st_config *c = in->cfg;
    const st_hw_config *hw = &p->hw;
    const bool eval_given = c->train.eval_batch_size != ST_AUTO,
               micro_given = c->train.micro_batch_size != ST_AUTO;
    char b1[32], b2[32];
    p->fits = p->mem.total <= p->mem_limit;
    p->warning[0] = p->fit_hint[0] = '\0';
    if (!p->fits) {
        const st_mem *m = &p->mem;
        const int64_t E = eval_given ? c->train.eval_batch_size : p->micro;
        snprintf(
            p->warning, sizeof p->warning,
            "does not fit: %.2f GiB needed per %s for the weights and a forward at train.eval_batch_size "
            "%lld%s; %.2f GiB usable",
            (double)m->total / GIB, hw->dev.gpu ? "device" : "rank", (long long)E,
            eval_given || micro_given ? "" : ", the smallest", (double)p->mem_limit / GIB);
        const int64_t rest = m->total - m->params - m->eval;
        char b3[32];
        snprintf(p->fit_hint, sizeof p->fit_hint,
                 "of the %.2f GiB: the weights %s, the evaluation's graph %s, the rest %s; %s",
                 (double)m->total / GIB, human((double)m->params, b1, sizeof b1),
                 human((double)m->eval, b2, sizeof b2), human((double)rest, b3, sizeof b3),
                 m->eval >= m->params && m->eval >= rest
                     ? "the graph takes the most: a smaller train.eval_batch_size"
                 : m->params >= rest
                     ? "the weights take the most, and an evaluation holds them whole on each rank: "
                       "a device with more memory"
                     : "the rest (the libraries' workspace, the batches, the data) takes the most: a "
                       "device with more memory");
    }
}

/* A training plan's verdict on p->mem: whether it fits the device, and
 * where not, or where a GPU's host memory is short, the warning and hint. */
static void verdict_train(const st_plan_input *in, st_plan *p) {
    const st_config *c = in->cfg;
    const st_hw_config *hw = &p->hw;
    p->fits = p->mem.total <= p->mem_limit;
    p->warning[0] = p->fit_hint[0] = '\0';
    if (!p->fits) {
        char how[160];
        const bool zero = strncmp(p->strategy, "zero", 4) == 0;
        snprintf(how, sizeof how, "%s%s%s at micro-batch %lld%s", zero || p->offload ? " " : "",
                 zero ? (p->offload ? "sharded, " : "sharded") : "", p->offload ? "offloaded" : "",
                 (long long)p->micro,
                 c->train.micro_batch_size != ST_AUTO ? " (train.micro_batch_size)" : ", the smallest");
        snprintf(p->warning, sizeof p->warning, "does not fit: %.2f GiB needed per %s,%s; %.2f GiB usable",
                 (double)p->mem.total / GIB, hw->dev.gpu ? "device" : "rank", how,
                 (double)p->mem_limit / GIB);
        fit_hint(in, p, hw->dev.gpu);
    } else if (hw->dev.gpu && hw->dev.host_mem_bytes > 0 &&
               p->mem.host + p->mem.pinned > host_share(hw->dev.host_mem_bytes, hw)) {
        /* (the node's ranks share its host memory, as a CPU run's ranks do) */
        snprintf(
            p->warning, sizeof p->warning,
            "does not fit the host: %.2f GiB of host memory per rank (%s), %d rank%s on a node, %.2f GiB "
            "available there",
            (double)(p->mem.host + p->mem.pinned) / GIB,
            p->offload ? "the offloaded optimizer state, its pinned copies and the batches"
                       : "pinned batches and checkpoint copies",
            hw->per_node, hw->per_node == 1 ? "" : "s", (double)hw->dev.host_mem_bytes / GIB);
    }
}

/* One hardware configuration, without the one-device comparison; the layout
 * model is left set to the plan's checkpointing (plan_one restores it). */
static st_status plan_body(const st_plan_input *in, const st_hw_config *hw, st_plan *p) {
    const st_config *c = in->cfg;
    memset(p, 0, sizeof *p);
    p->hw = *hw;
    p->ranks = st_hw_ranks(hw);
    p->mem_limit = mem_limit(hw);
    p->checkpointing = st_ckpt_level(c->train.activation_checkpointing);
    if (in->eval_only) return plan_eval(in, p);
    const int64_t B = c->train.batch_size, n = p->ranks;
    if (B % n != 0) {
        /* the next multiple, or the one below where the next is past the key's limit */
        const int row = st_cfg_find("train.batch_size");
        const int64_t most = row >= 0 ? (int64_t)st_cfg_keys[row].hi : INT64_MAX, up = (B + n - 1) / n * n,
                      down = B / n * n;
        const int64_t e_g = up <= most ? up : down;
        if (e_g >= n)
            snprintf(p->warning, sizeof p->warning,
                     "train.batch_size %lld is not a multiple of %lld ranks (choose a multiple of %lld, e.g. "
                     "%lld)",
                     (long long)B, (long long)n, (long long)n, (long long)e_g);
        else
            snprintf(p->warning, sizeof p->warning,
                     "train.batch_size %lld is not a multiple of %lld ranks, and train.batch_size's largest, "
                     "%lld, holds less than one sample per rank: plan fewer ranks",
                     (long long)B, (long long)n, (long long)most);
        return ST_OK;
    }
    choose_precision(c, &hw->dev, p);
    p->offload = hw->dev.gpu && c->optim.offload; /* (what the run will do; on the CPU it changes nothing) */
    p->fused_gelu = st_model_fused_gelu(c, hw->dev.gpu ? hw->dev.cc_major : 0, p->fused_gelu_why,
                                        sizeof p->fused_gelu_why);
    ST_TRY(choose_strategy(in, p));
    const int64_t per_rank = B / n;
    char b1[32];
    if (c->train.micro_batch_size != ST_AUTO) {
        p->micro = c->train.micro_batch_size;
        if (per_rank % p->micro != 0) {
            snprintf(p->warning, sizeof p->warning,
                     "train.micro_batch_size %lld does not divide the %lld samples per rank (set it to auto "
                     "or a divisor of %lld, or train.batch_size to a multiple of %lld)",
                     (long long)p->micro, (long long)per_rank, (long long)per_rank,
                     (long long)(p->micro * n));
            return ST_OK;
        }
        if (auto_checkpointing(in)) ST_TRY(decide_checkpointing(in, p));
    } else { /* the largest divisor of the per-rank batch that fits */
        ST_TRY(largest_fit(in, p, per_rank, &p->micro));
        if (auto_checkpointing(in)) {
            if (p->micro) {
                snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
                         "off: micro-batch %lld fits without it; accumulation is cheaper than recomputing",
                         (long long)p->micro);
            } else {
                for (int level = ST_CKPT_SELECTIVE; level <= ST_CKPT_BLOCKS && !p->micro; level++) {
                    set_checkpointing(in, level);
                    ST_TRY(largest_fit(in, p, per_rank, &p->micro));
                    if (p->micro) p->checkpointing = level;
                }
                if (p->checkpointing)
                    snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
                             "%s: not even a micro-batch of 1 fits without it",
                             st_ckpt_name(p->checkpointing));
                else { /* nothing fits: blocks needs the least (the layout model is left set to it) */
                    p->checkpointing = ST_CKPT_BLOCKS;
                    snprintf(p->checkpointing_why, sizeof p->checkpointing_why,
                             "blocks: not even a micro-batch of 1 fits with it, but it needs the least");
                }
            }
        }
        const bool none = !p->micro;
        if (!p->micro) p->micro = 1;
        if (none)
            snprintf(p->micro_why, sizeof p->micro_why, "1: nothing fits %s (the warning says what takes it)",
                     human((double)p->mem_limit, b1, sizeof b1));
        else if (p->micro == per_rank)
            snprintf(p->micro_why, sizeof p->micro_why, "%s%s",
                     n > 1 ? "the batch split over the ranks" : "the whole batch on one rank",
                     p->checkpointing && auto_checkpointing(in) ? ", with activation checkpointing" : "");
        else {
            snprintf(p->micro_why, sizeof p->micro_why,
                     "the largest divisor of %lld samples per rank that fits %s", (long long)per_rank,
                     human((double)p->mem_limit, b1, sizeof b1));
            /* A per-rank batch of few divisors (131, a prime: micro-batch 1, accumulating 131) where a
             * near one of more (128) runs micro-batches four times larger or more: said, with it. */
            for (int64_t step = 64; step >= 8; step /= 2) {
                const int64_t near = per_rank / step * step;
                int64_t m = 0;
                if (near < 1 || near == per_rank) continue;
                ST_TRY(largest_fit(in, p, near, &m));
                if (m >= 4 * p->micro) {
                    snprintf(p->micro_hint, sizeof p->micro_hint,
                             "micro-batch %lld, accumulating %lld: the %lld samples per rank have no larger "
                             "divisor that fits; train.batch_size %lld would run micro-batches of %lld",
                             (long long)p->micro, (long long)(per_rank / p->micro), (long long)per_rank,
                             (long long)(near * n), (long long)m);
                    break;
                }
            }
        }
    }
    p->accum = per_rank / p->micro;
    ST_TRY(mem_at(in, p, p->micro, &p->mem));
    p->fits = p->mem.total <= p->mem_limit;
    if (!p->fits && p->offload && !c->optim.offload) {
        /* offload, which dist.strategy auto chose, does not make it fit
         * either: not taken (a run would move its state for nothing); the
         * warning says what does not fit as the run will hold it */
        p->offload = false;
        snprintf(p->strategy_why, sizeof p->strategy_why,
                 "%s: the model states do not fit%s, even offloaded (the warning says what takes the memory)",
                 p->strategy, p->ranks > 1 ? " sharded" : "");
        ST_TRY(mem_at(in, p, p->micro, &p->mem));
    }
    verdict_train(in, p);

    st_model_graph mg;
    /* (as the device lays it out: attention's flash kernels keep a row's
     * log-sum-exp, not its scores, whose traffic the CPU's layout counts) */
    ST_TRY(hw->dev.gpu ? st_model_graph_layout_device(in->model, p->micro, &mg)
                       : st_model_graph_layout(in->model, p->micro, &mg));
    const st_cost cost = st_graph_cost(&mg.g);
    st_model_graph_free(&mg);
    st_mem_opts mo = mem_opts(in, p);
    st_time_opts to = {.hw = hw,
                       .mixed = mo.mixed,
                       .efficiency = in->efficiency,
                       .zero = mo.zero,
                       .offload = p->offload,
                       .optim_states = mo.optim_states,
                       .bucket_cap_mb = c->dist.bucket_cap_mb,
                       .micro = p->micro,
                       .accum = p->accum,
                       .grad_bytes = mo.grad_wire_bytes, /* dist.grad_dtype, as the memory model has it */
                       /* a GPU's sharded masters gather the 16-bit copy */
                       .gather_bytes = mo.mixed && mo.zero >= 1 && p->ranks > 1 && hw->dev.gpu ? 2 : 4};
    st_time_estimate(&cost, in->model->params.count, &to, &p->time);
    p->samples_per_s = (double)B / p->time.step_s;
    p->tokens_per_s = p->samples_per_s * (double)in->seq_len;
    p->ok = true;
    return ST_OK;
}

static st_status plan_one(const st_plan_input *in, const st_hw_config *hw, st_plan *p) {
    char *v = in->model->cfg.train.activation_checkpointing,
         saved[sizeof in->model->cfg.train.activation_checkpointing];
    memcpy(saved, v, sizeof saved);
    set_checkpointing(in, st_ckpt_level(in->cfg->train.activation_checkpointing)); /* auto: off first */
    st_status s = plan_body(in, hw, p);
    memcpy(v, saved, sizeof saved);
    return s;
}

st_status st_plan_make(const st_plan_input *in, const st_hw_config *hw_in, st_plan *out) {
    st_hw_config mapped = *hw_in; /* (what an address-space limit leaves once the token files are mapped) */
    if (mapped.dev.proc_limited && in->mapped_bytes > 0)
        mapped.dev.proc_mem_bytes =
            mapped.dev.proc_mem_bytes > in->mapped_bytes ? mapped.dev.proc_mem_bytes - in->mapped_bytes : 1;
    const st_hw_config *hw = &mapped;
    ST_TRY(plan_one(in, hw, out));
    out->scaling = 1.0;
    if (out->ok && out->ranks > 1 && !in->eval_only) { /* (an evaluation's time is not predicted) */
        st_hw_config one = *hw;
        one.per_node = one.nodes = 1;
        one.ranks = 0;
        st_plan *single = malloc(sizeof *single);
        if (!single)
            return st_fail(ST_ERR_NOMEM, "out of host memory planning the one-rank run to compare with");
        st_status s = plan_one(in, &one, single);
        if (s == ST_OK && single->ok)
            out->scaling = out->samples_per_s / ((double)out->ranks * single->samples_per_s);
        free(single);
        ST_TRY(s);
    }
    return ST_OK;
}

const char *st_plan_strategy_label(const st_plan *p, char *buf, int n) {
    snprintf(buf, (size_t)n, "%s%s", p->strategy, p->offload ? "+offload" : "");
    return buf;
}

void st_plan_apply(const st_plan *p, st_config *c) {
    if (c->train.micro_batch_size == ST_AUTO) {
        c->train.micro_batch_size = p->micro;
        st_config_mark_auto(c, "train.micro_batch_size", p->micro_why);
    }
    if (strcmp(c->precision, "auto") == 0) {
        snprintf(c->precision, sizeof c->precision, "%s", p->precision);
        st_config_mark_auto(c, "precision", p->precision_why);
    }
    if (strcmp(c->dist.strategy, "auto") == 0) {
        snprintf(c->dist.strategy, sizeof c->dist.strategy, "%s", p->strategy);
        st_config_mark_auto(c, "dist.strategy", p->strategy_why);
        /* the strategy found the states fit only offloaded: the run offloads,
         * unless the configuration said optim.offload: false (its warning) */
        if (p->offload && !c->optim.offload && st_config_source(c, "optim.offload") == ST_SRC_DEFAULT) {
            c->optim.offload = true;
            st_config_mark_auto(c, "optim.offload", p->strategy_why);
        }
    }
    if (strcmp(c->model.fused_gelu, "auto") == 0) {
        snprintf(c->model.fused_gelu, sizeof c->model.fused_gelu, "%s", p->fused_gelu ? "on" : "off");
        st_config_mark_auto(c, "model.fused_gelu", p->fused_gelu_why);
    }
    if (strcmp(c->model.fused_residual, "auto") == 0) { /* (only device graphs fuse it) */
        const bool gpt = strcmp(c->model.type, "gpt") == 0, gpu = p->hw.dev.gpu;
        snprintf(c->model.fused_residual, sizeof c->model.fused_residual, "%s", gpt && gpu ? "on" : "off");
        st_config_mark_auto(c, "model.fused_residual",
                            !gpt   ? "off: no residual"
                            : !gpu ? "off on the CPU (the add is a layer of its own)"
                                   : "on: each residual add inside its projection's matrix product");
    }
    if (strcmp(c->model.fused_bias_grad, "auto") == 0) { /* (only device graphs read it) */
        snprintf(c->model.fused_bias_grad, sizeof c->model.fused_bias_grad, "off");
        st_config_mark_auto(c, "model.fused_bias_grad",
                            p->hw.dev.gpu ? "off: the column-sum kernel, the choice measured on a GPU so far"
                                          : "off on the CPU (its own column sums)");
    }
    if (strcmp(c->model.kernel_variants, "auto") == 0) { /* (only device graphs read it) */
        snprintf(c->model.kernel_variants, sizeof c->model.kernel_variants, "none");
        st_config_mark_auto(c, "model.kernel_variants",
                            p->hw.dev.gpu ? "none: each waits on a GPU's timing against its layer's default"
                                          : "none on the CPU (its own kernels)");
    }
    if (strcmp(c->model.matmul_tune, "auto") == 0) { /* (only a CUDA device reads it) */
        snprintf(c->model.matmul_tune, sizeof c->model.matmul_tune, "off");
        st_config_mark_auto(c, "model.matmul_tune",
                            p->hw.dev.gpu
                                ? "off: cuBLASLt's heuristic, untimed, until a GPU's benchmark measures "
                                  "the timing"
                                : "off on the CPU (no algorithms to choose)");
    }
    if (strcmp(c->train.activation_checkpointing, "auto") == 0) {
        snprintf(c->train.activation_checkpointing, sizeof c->train.activation_checkpointing, "%s",
                 st_ckpt_name(p->checkpointing));
        st_config_mark_auto(c, "train.activation_checkpointing", p->checkpointing_why);
    }
}

st_status st_plan_refit(const st_plan_input *in, st_plan *p) {
    if (!p->ok) return ST_OK;
    char *v = in->model->cfg.train.activation_checkpointing,
         saved[sizeof in->model->cfg.train.activation_checkpointing];
    memcpy(saved, v, sizeof saved);
    set_checkpointing(in, p->checkpointing);
    const st_status s = mem_at(in, p, p->micro, &p->mem);
    memcpy(v, saved, sizeof saved);
    ST_TRY(s);
    if (in->eval_only)
        verdict_eval(in, p);
    else
        verdict_train(in, p);
    return ST_OK;
}
