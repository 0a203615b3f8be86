/* The data-parallel step: DDP, ZeRO-1, ZeRO-2 and the deterministic
 * reduction (see dist.h). */
#include "dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/half.h"
#include "core/mem.h"

st_status st_dist_mode_parse(const char *strategy, st_dist_mode *mode) {
    if (strcmp(strategy, "ddp") == 0)
        *mode = ST_DIST_DDP;
    else if (strcmp(strategy, "zero1") == 0)
        *mode = ST_DIST_ZERO1;
    else if (strcmp(strategy, "zero2") == 0)
        *mode = ST_DIST_ZERO2;
    else
        return st_fail(ST_ERR_CONFIG, "dist.strategy %s: expected ddp, zero1 or zero2", strategy);
    return ST_OK;
}

const char *st_dist_mode_name(st_dist_mode mode) {
    return mode == ST_DIST_ZERO1 ? "zero1" : mode == ST_DIST_ZERO2 ? "zero2" : "ddp";
}

/* Parameters on a CUDA device. With an NCCL communicator (any world size,
 * dist.comm nccl for one rank) the buckets are all-reduced (DDP) or reduced
 * to their owners (ZeRO) on the device's communication stream as backward
 * produces them, and the deterministic fold's all-to-all and all-gathers go
 * through it too. ZeRO and deterministic mode pad the arenas on the device
 * (zero.c) and keep their buffers there; ZeRO-2 keeps its shard of
 * gradients and stages the buckets instead of giving pages back (ddp.h). Outside
 * deterministic mode the trainer takes the norm and clips through the
 * optimizer (st_optim_clip over the optimizer's range, with the shards'
 * sums of squares added by st_dist_sumsq_across). */
static st_status check_device(const st_dist *d) {
    if (d->world > 1 && strcmp(st_comm_backend_name(d->comm), "nccl") != 0)
        return st_fail(ST_ERR_UNSUPPORTED,
                       "data-parallel training on GPUs exchanges gradients through the NCCL "
                       "communicator, and this one is %s; use train.device: cpu",
                       st_comm_backend_name(d->comm));
    return ST_OK;
}

/* Masters sharded: ZeRO with a compute copy, on several ranks. */
static bool shards_masters(st_dist_mode mode, int world, st_precision prec) {
    return mode != ST_DIST_DDP && world > 1 && prec != ST_PREC_FP32;
}

/* Gradients sharded, their buckets staged (ddp.h): ZeRO-2 on a device, on
 * several ranks, outside deterministic mode (whose fold takes each
 * micro-step's whole gradient). */
static bool shards_grads(st_dist_mode mode, int world, bool on_device, bool deterministic) {
    return mode == ST_DIST_ZERO2 && world > 1 && on_device && !deterministic;
}

/* Whether training pads the arenas to whole shards: on the host always (the
 * norm's blocks need a whole number of them), on a device for ZeRO and the
 * fold. */
static bool pads(st_dist_mode mode, bool on_device, bool deterministic) {
    return !on_device || mode != ST_DIST_DDP || deterministic;
}

st_params_layout st_dist_layout(const st_config *cfg, bool on_device, int world, int rank) {
    st_params_layout lay = {0};
    st_dist_mode mode = ST_DIST_DDP;
    if (st_dist_mode_parse(cfg->dist.strategy, &mode) != ST_OK) { /* (refused later, said there) */
        st_clear_error();
        return lay;
    }
    if (!on_device || !pads(mode, on_device, cfg->dist.deterministic)) return lay;
    lay.world = world;
    lay.rank = rank;
    lay.shard_masters = shards_masters(mode, world, st_precision_from_name(cfg->precision));
    lay.shard_grads = shards_grads(mode, world, on_device, cfg->dist.deterministic);
    return lay;
}

st_status st_dist_shard_params(st_comm *comm, const st_config *cfg, st_params *p) {
    st_dist_mode mode = ST_DIST_DDP;
    ST_TRY(st_dist_mode_parse(cfg->dist.strategy, &mode));
    st_shard sh;
    st_shard_plan(&sh, p->count, st_comm_rank(comm), st_comm_size(comm));
    /* (no-ops where the model was laid out padded and sharded: st_dist_layout) */
    if (pads(mode, p->dev != NULL, cfg->dist.deterministic)) ST_TRY(st_zero_pad_arenas(p, sh.padded));
    const int64_t lo = (int64_t)sh.rank * sh.shard, hi = lo + sh.shard;
    if (shards_grads(mode, sh.world, p->dev != NULL, cfg->dist.deterministic))
        ST_TRY(st_params_shard_grads(p, lo, hi));
    if (!shards_masters(mode, sh.world, p->precision)) return ST_OK;
    return st_params_shard_masters(p, lo, hi);
}

st_status st_dist_init(st_dist *d, st_comm *comm, const st_config *cfg, st_params *p, const st_graph *g,
                       int64_t accum) {
    memset(d, 0, sizeof *d);
    d->comm = comm;
    d->p = p;
    d->rank = st_comm_rank(comm);
    d->world = st_comm_size(comm);
    d->accum = accum;
    d->deterministic = cfg->dist.deterministic;
    d->presum = !d->deterministic && d->world > 1 && strcmp(cfg->precision, "fp16") == 0;
    d->interleave = d->deterministic || cfg->dist.sync_batchnorm;
    ST_TRY(st_dist_mode_parse(cfg->dist.strategy, &d->mode));
    st_shard_plan(&d->sh, p->count, d->rank, d->world);
    st_device *dev = p->dev;
    if (dev) ST_TRY(check_device(d));
    ST_TRY(st_dist_shard_params(comm, cfg, p)); /* (done already when the trainer called it first) */
    const int64_t S = d->sh.shard, nblocks = d->sh.padded / ST_SHARD_ALIGN;
    d->blocks = malloc((size_t)nblocks * sizeof *d->blocks);
    if (!d->blocks) return st_fail(ST_ERR_NOMEM, "out of memory for the gradient norm");
    if (d->deterministic) { /* where the gradients are */
        st_status s = st_device_alloc(dev, (size_t)S * sizeof(float), (void **)&d->acc);
        if (s == ST_OK) s = st_device_alloc(dev, (size_t)d->sh.padded * sizeof(float), (void **)&d->recv);
        if (s == ST_OK && dev)
            s = st_device_alloc(dev, (size_t)nblocks * sizeof(double), (void **)&d->dblocks);
        if (s != ST_OK)
            return st_fail_context(
                s, "the deterministic reduction (%.1f MiB): ", (double)(S + d->sh.padded) * 4 / (1 << 20));
    }
    const bool nccl = strcmp(st_comm_backend_name(comm), "nccl") == 0;
    d->buckets = (d->world > 1 || nccl) && !d->deterministic;
    /* ZeRO-2 on the host gives the non-owned gradient pages back (release);
     * on a device it stages its buckets (ddp.h). */
    const bool release = d->mode == ST_DIST_ZERO2 && !dev;
    if (d->buckets && p->grads_sharded != shards_grads(d->mode, d->world, p->dev != NULL, d->deterministic))
        return st_fail(ST_ERR_INTERNAL, "the gradients were %ssharded for %s on %d ranks",
                       p->grads_sharded ? "" : "not ", st_dist_mode_name(d->mode), d->world);
    if (d->buckets) {
        ST_TRY(st_ddp_init(&d->ddp, comm, p, g, cfg->dist.bucket_cap_mb, d->mode == ST_DIST_DDP ? 0 : S,
                           d->mode == ST_DIST_ZERO2 || d->presum ? ST_COMM_SUM : ST_COMM_AVG,
                           release            ? ST_DDP_GRADS_RELEASE
                           : p->grads_sharded ? ST_DDP_GRADS_STAGED
                                              : ST_DDP_GRADS_WHOLE));
        d->ddp.presum = d->presum;
    }
    /* ZeRO-2 holds only its shard of gradients from the start. */
    if (release && !d->deterministic) {
        st_pages_release(p->grad, 0, d->rank * S);
        st_pages_release(p->grad, (d->rank + 1) * S, d->sh.padded);
    }
    return ST_OK;
}

void st_dist_free(st_dist *d) {
    if (!d) return;
    st_device *dev = d->p ? d->p->dev : NULL;
    st_ddp_free(&d->ddp);
    st_device_release(dev, d->acc);
    st_device_release(dev, d->recv);
    st_device_release(dev, d->dblocks);
    free(d->blocks);
    memset(d, 0, sizeof *d);
}

void st_dist_range(const st_dist *d, int64_t *lo, int64_t *hi) {
    if (d->mode == ST_DIST_DDP) {
        *lo = 0;
        *hi = d->p->count;
    } else {
        *lo = d->sh.lo;
        *hi = d->sh.hi;
    }
}

int64_t st_dist_micro_index(const st_dist *d, int64_t k) {
    return d->interleave ? k * d->world + d->rank : d->rank * d->accum + k;
}

static float *own(const st_dist *d) { return st_params_grad(d->p, (int64_t)d->rank * d->sh.shard); }

st_status st_dist_step_begin(st_dist *d) {
    st_device *dev = d->p->dev;
    if (d->deterministic) return st_device_zero(dev, d->acc, (size_t)d->sh.shard * sizeof(float));
    if (d->mode == ST_DIST_ZERO2 &&
        (!dev || d->p->grads_sharded)) /* (staged: each bucket zeroed before use) */
        return st_device_zero(dev, own(d), (size_t)d->sh.shard * sizeof(float));
    return st_device_zero(dev, d->p->grad, (size_t)d->p->arena_count * sizeof(float));
}

float st_dist_backward_seed(const st_dist *d) {
    return d->deterministic || d->presum ? 1.0f / (float)(d->accum * d->world) : 1.0f / (float)d->accum;
}

static bool reduces_now(const st_dist *d, int64_t k) {
    return d->buckets && (d->mode == ST_DIST_ZERO2 || k == d->accum - 1);
}

st_status st_dist_micro_begin(st_dist *d, st_graph *g, int64_t k) {
    /* Deterministic: each micro-gradient alone, in a zeroed arena (adding
     * into a non-zero one would round differently from adding afterwards). */
    if (d->deterministic)
        ST_TRY(st_device_zero(d->p->dev, d->p->grad, (size_t)d->p->arena_count * sizeof(float)));
    if (reduces_now(d, k)) ST_TRY(st_ddp_arm(&d->ddp, g));
    return ST_OK;
}

static st_status wait(st_status s, st_comm_req **req) {
    ST_TRY(s);
    return st_comm_wait(req);
}

/* Deterministic: bring every rank's gradient of this shard here, add them in
 * rank order (global micro-batch order, as the sampler interleaves). One
 * rank's shard is its whole arena: nothing to exchange. */
static st_status fold(st_dist *d, bool last) {
    const int64_t S = d->sh.shard;
    st_device *dev = d->p->dev;
    st_comm_req *req = NULL;
    const float *x = d->p->grad;
    if (d->world > 1) {
        ST_TRY(wait(st_comm_all_to_all(d->comm, d->p->grad, d->recv, (size_t)S, ST_COMM_F32,
                                       "deterministic fold", &req),
                    &req));
        x = d->recv;
    }
    ST_TRY(st_device_add_slices(dev, d->acc, x, (size_t)S, d->world));
    if (!last) return ST_OK;
    ST_TRY(st_device_round_copy(dev, ST_PREC_FP32, own(d), d->acc, (size_t)S)); /* (a plain copy) */
    if (d->mode == ST_DIST_DDP && d->world > 1)
        ST_TRY(wait(st_comm_all_gather(d->comm, own(d), d->p->grad, (size_t)S, ST_COMM_F32,
                                       "deterministic gradients", &req),
                    &req));
    return ST_OK;
}

/* ZeRO-2 on a device, after a micro-step's reductions (the buckets' pieces
 * folded into the shard, ddp.h): after the last, the shard's sums divided
 * into averages (16-bit buckets were divided before they were rounded). */
static st_status device_micro_end(st_dist *d, bool last) {
    if (d->mode != ST_DIST_ZERO2 || !last || d->ddp.grad_dtype != ST_PREC_FP32 || d->presum) return ST_OK;
    return st_device_scale_f32(d->p->dev, own(d), (size_t)d->sh.shard, 1.0f / (float)d->world);
}

st_status st_dist_micro_end(st_dist *d, st_graph *g, int64_t k) {
    const bool last = k == d->accum - 1;
    if (d->deterministic) return fold(d, last);
    if (!reduces_now(d, k)) return ST_OK;
    ST_TRY(st_ddp_finish(&d->ddp, g));
    if (d->p->dev) return device_micro_end(d, last);
    if (d->mode ==
        ST_DIST_ZERO2) { /* the page-aligned complement: no partial page at a bucket's edge stays */
        st_pages_release(d->p->grad, 0, (int64_t)d->rank * d->sh.shard);
        st_pages_release(d->p->grad, (int64_t)(d->rank + 1) * d->sh.shard, d->sh.padded);
    }
    if (d->ddp.peak_resident > d->grad_peak_nbytes) d->grad_peak_nbytes = d->ddp.peak_resident;
    if (d->mode == ST_DIST_ZERO2 && last && !d->presum) { /* the sums to averages, as DDP's all-reduce does */
        float *y = own(d);
        const float n = (float)d->world;
        for (int64_t i = 0; i < d->sh.shard; i++)
            y[i] /= n;
    }
    return ST_OK;
}

st_status st_dist_grad_norm(st_dist *d, double *norm) {
    st_device *dev = d->p->dev;
    if (dev && !d->dblocks)
        return st_fail(ST_ERR_INTERNAL,
                       "st_dist_grad_norm on a device outside deterministic mode (st_optim_clip)");
    const int64_t per = d->sh.shard / ST_SHARD_ALIGN, nb = d->sh.padded / ST_SHARD_ALIGN;
    double *blocks = dev ? d->dblocks : d->blocks; /* where the gradients are */
    if (d->mode == ST_DIST_DDP) {
        ST_TRY(st_device_block_sumsq(dev, d->p->grad, (size_t)d->sh.padded, ST_SHARD_ALIGN, blocks));
    } else {
        double *mine = blocks + (int64_t)d->rank * per;
        ST_TRY(st_device_block_sumsq(dev, own(d), (size_t)d->sh.shard, ST_SHARD_ALIGN, mine));
        /* Doubles travel as their 8 bytes: an all-gather only moves them. */
        st_comm_req *req = NULL;
        if (d->world > 1)
            ST_TRY(wait(
                st_comm_all_gather(d->comm, mine, blocks, (size_t)per, ST_COMM_I64, "gradient norm", &req),
                &req));
    }
    if (dev) ST_TRY(st_device_download(dev, d->blocks, d->dblocks, (size_t)nb * sizeof(double)));
    double s = 0;
    for (int64_t b = 0; b < nb; b++)
        s += d->blocks[b];
    *norm = sqrt(s);
    return ST_OK;
}

st_status st_dist_sumsq_across(void *ctx, double *sumsq) {
    st_dist *d = ctx;
    if (d->mode == ST_DIST_DDP || d->world == 1) return ST_OK; /* every rank holds the whole gradient */
    st_comm_req *req = NULL;
    return wait(st_comm_all_reduce(d->comm, sumsq, sumsq, 1, ST_COMM_F64, ST_COMM_SUM, "gradient norm", &req),
                &req);
}

st_status st_dist_grad_scale(st_dist *d, float s) {
    int64_t lo, hi;
    st_dist_range(d, &lo, &hi);
    return st_device_scale_f32(d->p->dev, st_params_grad(d->p, lo), (size_t)(hi - lo), s);
}

/* The weights' all-gather after the update (ZeRO), waited for; on GPUs
 * through NCCL also a span on the profiler trace's communication stream. */
static st_status gather_weights(st_dist *d, const void *send, void *recv, size_t count, st_comm_dtype dt) {
    const int32_t span = st_trace_comm_begin(d->ddp.trace, d->comm);
    st_comm_req *req = NULL;
    const st_status s = st_comm_all_gather(d->comm, send, recv, count, dt, "parameters", &req);
    if (s == ST_OK) st_trace_comm_end(d->ddp.trace, span, "parameters all-gather");
    return wait(s, &req);
}

st_status st_dist_step_end(st_dist *d) {
    int64_t res = st_dist_grad_nbytes(d);
    if (res > d->grad_peak_nbytes) d->grad_peak_nbytes = res;
    st_params *p = d->p;
    /* DDP: the optimizer wrote the weights and said so (st_params_touch),
     * and may have refreshed the compute copy with them (st_optim_update) */
    if (d->mode == ST_DIST_DDP || d->world == 1) return ST_OK;
    st_params_touch(p); /* the all-gather writes them */
    const int64_t S = d->sh.shard, lo = (int64_t)d->rank * S;
    if (!p->masters_sharded) /* fp32: the masters are the weights */
        return gather_weights(d, p->data + lo, p->data, (size_t)S, ST_COMM_F32);
    /* Each rank rounds its masters into its range of the compute copy, and
     * the copies are all-gathered: 2 bytes a parameter on a device. */
    if (p->compute16) {
        ST_TRY(st_device_div_to_16(p->dev, p->precision, p->compute16 + lo, st_params_master(p, lo),
                                   (size_t)S, 1.0f));
        ST_TRY(gather_weights(d, p->compute16 + lo, p->compute16, (size_t)S,
                              p->precision == ST_PREC_BF16 ? ST_COMM_BF16 : ST_COMM_F16));
    } else {
        ST_TRY(
            st_device_round_copy(p->dev, p->precision, p->compute + lo, st_params_master(p, lo), (size_t)S));
        ST_TRY(gather_weights(d, p->compute + lo, p->compute, (size_t)S, ST_COMM_F32));
    }
    p->compute_version = p->version; /* current: refreshed here, not from the masters */
    return ST_OK;
}

int64_t st_dist_grad_nbytes(const st_dist *d) {
    const st_params *p = d->p;
    int64_t n = p->arena_count * (int64_t)sizeof(float); /* device memory: all of it held */
    if (p->grads_sharded) n = (p->grad_hi - p->grad_lo + d->ddp.stage_count) * (int64_t)sizeof(float);
    if (!p->dev) n = st_pages_resident(p->grad, n);
    if (d->deterministic) n += (d->sh.shard + d->sh.padded) * (int64_t)sizeof(float);
    return n;
}

int64_t st_dist_grad_nbytes_predicted(const st_dist *d) {
    /* a device's arena is padded only for ZeRO and the fold; its ZeRO-2 on
     * several ranks keeps the shard and the buckets' staging (ddp.h) */
    const int64_t held = d->p->dev && d->p->grads_sharded                ? d->sh.shard + d->ddp.stage_count
                         : d->p->dev                                     ? d->p->arena_count
                         : d->mode == ST_DIST_ZERO2 && !d->deterministic ? d->sh.shard
                                                                         : d->sh.padded;
    int64_t n = held * (int64_t)sizeof(float);
    if (d->deterministic) n += (d->sh.shard + d->sh.padded) * (int64_t)sizeof(float);
    return n;
}
