/* The time model (see timing.h). */
#include "timing.h"

#include <math.h>

/* A GPU server's host memory bandwidth for an offloaded optimizer step,
 * shared by the node's GPUs: two sockets of 8-channel DDR4/DDR5 give a few
 * hundred GB/s of which a streaming update reaches about this much. A device
 * with host memory of its own (GH200's Grace) says so in host_mem_bw. */
#define ST_TIME_HOST_MEM_BW 100e9

double st_time_default_efficiency(const st_hw_device *d, bool mixed) {
    /* Large, well-shaped products reach 70-80% of the tensor-core peak;
     * a whole model's products (small heads, attention blocks, the first
     * and last layers) about 60%. fp32 without tensor cores sits closer to
     * its (lower) peak. The CPU figure is forward's, against the calibrated
     * sgemm rate (its best repetition); backward's is ST_TIME_CPU_BWD_EFF. */
    if (!d->gpu) return ST_TIME_CPU_FWD_EFF;
    return mixed ? 0.6 : 0.7;
}

double st_time_allreduce(double bytes, int n, double busbw, double latency) {
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * (n - 1) / n * bytes / busbw + 2.0 * (n - 1) * latency;
}

/* reduce-scatter or all-gather: half an all-reduce */
static double half_ring(double bytes, int n, double busbw, double latency) {
    if (n <= 1 || bytes <= 0) return 0;
    return (double)(n - 1) / n * bytes / busbw + (double)(n - 1) * latency;
}

void st_time_estimate(const st_cost *c, int64_t n_params, const st_time_opts *o, st_time *t) {
    const st_hw_device *d = &o->hw->dev;
    const int n = st_hw_ranks(o->hw);
    /* CPU ranks on a node share its cores and memory bandwidth */
    const double share = d->gpu ? 1.0 : 1.0 / o->hw->per_node;
    const double eff = o->efficiency > 0 ? o->efficiency : st_time_default_efficiency(d, o->mixed);
    const double peak = (o->mixed ? d->peak_bf16 : d->peak_fp32) * share * eff;
    const double ab = o->mixed && d->gpu ? 2 : 4; /* (the CPU keeps its activations in float32) */
    const double bw = d->mem_bw * share * (d->gpu ? 0.8 : ST_TIME_CPU_MEM_EFF);
    if (d->gpu) { /* the model's products: cuDNN and cuBLAS run no Winograd of ours */
        t->fwd_s = c->fwd_flops / peak + c->fwd_elems * ab / bw;
        t->bwd_s = c->bwd_flops / peak + c->bwd_elems * ab / bw;
    } else { /* what the CPU kernels run, plus a fixed cost per layer pass */
        const double bpeak = o->efficiency > 0 ? peak : peak / eff * ST_TIME_CPU_BWD_EFF;
        t->fwd_s = c->cpu.fwd_flops / peak + c->cpu.fwd_elems * ab / bw + c->fwd_passes * ST_TIME_CPU_PASS_S;
        t->bwd_s = c->cpu.bwd_flops / bpeak + c->cpu.bwd_elems * ab / bw + c->bwd_passes * ST_TIME_CPU_PASS_S;
    }
    t->compute_s = (double)o->accum * (t->fwd_s + t->bwd_s);
    t->flops_per_step = (double)o->accum * (c->fwd_flops + c->bwd_flops);

    /* communication of the last micro-step's gradients, by bucket */
    double busbw = d->link_bw, lat = d->link_lat;
    if (o->hw->nodes > 1) {
        busbw = fmin(busbw, d->net_bw);
        lat = fmax(lat, d->net_lat);
    }
    /* buckets of fp32 gradients (src/dist/ddp.c): bucket_cap_mb of them, at
     * most an eighth of the gradients, 16384 elements at least; each moves
     * grad_bytes an element */
    const double P = (double)n_params, wb = o->grad_bytes > 0 ? o->grad_bytes : 4, gbytes = P * wb;
    double cap = o->bucket_cap_mb * 1024 * 1024 / 4 * wb;
    if (!(cap > 0)) cap = gbytes;
    const double eighth = fmax(floor(P / 8) * wb, 16384 * wb);
    if (cap > eighth) cap = eighth;
    const double nb = ceil(gbytes / cap), last = gbytes - (nb - 1) * cap;
    double comm = 0, t_last = 0;
    if (n > 1) {
        if (o->zero == 0) {
            comm = (nb - 1) * st_time_allreduce(cap, n, busbw, lat) + st_time_allreduce(last, n, busbw, lat);
            t_last = st_time_allreduce(last, n, busbw, lat);
        } else {
            comm = (nb - 1) * half_ring(cap, n, busbw, lat) + half_ring(last, n, busbw, lat);
            t_last = half_ring(last, n, busbw, lat);
        }
    }
    const double hidden = fmin(comm - t_last, t->bwd_s);
    t->exposed_s = comm - (hidden > 0 ? hidden : 0);
    if (o->zero >= 2 && o->accum > 1) { /* ZeRO-2 reduces every micro-step's buckets, each behind its backward */
        comm *= (double)o->accum;
        t->exposed_s *= (double)o->accum;
    }
    if (n > 1 && o->zero >= 1) { /* updated weight shards all-gathered after the step */
        const double ag = half_ring(P * (o->gather_bytes > 0 ? o->gather_bytes : 4), n, busbw, lat);
        comm += ag;
        t->exposed_s += ag;
    }
    t->comm_s = comm;

    /* the optimizer: AdamW reads weights, gradients and 2 moments and writes
     * weights and moments (4 (3 + 2 s) bytes for s moments), plus the 2-byte
     * working copy with mixed precision */
    const double shard = o->zero >= 1 && n > 1 ? P / n : P;
    const double ob = 4.0 * (3 + 2 * o->optim_states) + (o->mixed ? 2 : 0);
    if (o->offload) {
        const double host_bw = d->host_mem_bw > 0 ? d->host_mem_bw : ST_TIME_HOST_MEM_BW / o->hw->per_node;
        t->optim_s =
            shard * ob / host_bw + shard * 8 / d->host_bw; /* update; fp32 gradients down, weights up */
    } else {
        t->optim_s = shard * ob / (d->mem_bw * share * 0.8); /* one streaming pass */
    }
    t->step_s = t->compute_s + t->exposed_s + t->optim_s + (d->gpu ? 0 : ST_TIME_CPU_STEP_S);
}
