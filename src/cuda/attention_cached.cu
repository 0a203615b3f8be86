/* CUDA twin of src/layers/attention_cached.c (cached decoding, forward
 * alone): the rows' keys and values into the layer's cache at positions
 * g->pos onwards, then one block per (sample, row, head) attends to the
 * cache's positions up to its own: the scores of DT positions at a time
 * (a thread each, its dot product over the head's channels), their running
 * maximum and sum (the online softmax), and each channel's weighted sum of
 * the values by a thread of its own, DT x DK channels a block: a head wider
 * than that takes several blocks, each computing the same scores for its
 * own channels. fp32 throughout (generation's graphs). The position is
 * read on the device when g->pos_dev is set (a replayed launch's).
 * The sums run in another order than the CPU's: parity to fp32 rounding. */
#include <math.h>

#include "kernels.cuh"

extern "C" st_status st_attention_cached_check(const st_node *n, const st_graph *g); /* (layers.h) */

enum { DT = 128, DK = 4 }; /* threads (positions a tile) a block; channels a thread */

/* (the first row's position: *posp when not NULL, else pos, as in
 * pos_embedding.cu) */
static __global__ void kv_write_kernel(const float *qkv, float *kc, float *vc, int64_t N, int64_t C,
                                       int64_t cap, int64_t pos, const int64_t *posp, int64_t total) {
    if (posp) pos = *posp;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C, c = i % C, b = r / N, j = r % N, o = (b * cap + pos + j) * C + c;
        kc[o] = qkv[r * 3 * C + C + c];
        vc[o] = qkv[r * 3 * C + 2 * C + c];
    }
}

static __global__ void decode_kernel(const float *qkv, const float *kc, const float *vc, float *y, int64_t N,
                                     int64_t H, int64_t hs, int64_t C, int64_t cap, int64_t pos,
                                     const int64_t *posp, float scale, int64_t nch) {
    __shared__ float p[DT];
    __shared__ float sh[32];
    /* (sample, row, head) and which DT x DK channels of the head */
    const int64_t row = blockIdx.x / nch, c0 = blockIdx.x % nch * (DT * DK);
    if (posp) pos = *posp;
    const int64_t b = row / (N * H), j = row / H % N, hd = row % H, last = pos + j;
    const float *q = qkv + (b * N + j) * 3 * C + hd * hs;
    const float *k = kc + b * cap * C + hd * hs, *v = vc + b * cap * C + hd * hs;
    float acc[DK] = {0.0f, 0.0f, 0.0f, 0.0f};
    float m = -INFINITY, l = 0.0f;
    for (int64_t t0 = 0; t0 <= last; t0 += DT) { /* (the same trips for every thread of the block) */
        const int64_t t = t0 + threadIdx.x;
        float sc = -INFINITY;
        if (t <= last) {
            float d = 0.0f;
            for (int64_t i = 0; i < hs; i++)
                d += q[i] * k[t * C + i];
            sc = d * scale;
        }
        const float mn = st_nan_max(m, st_block_max(sc, sh)); /* (a NaN score reaches the logits) */
        const float e = t <= last ? expf(sc - mn) : 0.0f;
        const float corr = expf(m - mn); /* (0 on the first tile: m is -inf) */
        l = l * corr + st_block_sum(e, sh);
        p[threadIdx.x] = e; /* (the last tile's readers passed the sums' barriers) */
        __syncthreads();
        const int64_t nt = last - t0 + 1 < (int64_t)DT ? last - t0 + 1 : (int64_t)DT;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            const int64_t i = c0 + threadIdx.x + kk * DT;
            if (i >= hs) break;
            float a = acc[kk] * corr;
            for (int64_t u = 0; u < nt; u++)
                a += p[u] * v[(t0 + u) * C + i];
            acc[kk] = a;
        }
        m = mn;
    }
    float *o = y + (b * N + j) * C + hd * hs;
#pragma unroll
    for (int kk = 0; kk < DK; kk++) {
        const int64_t i = c0 + threadIdx.x + kk * DT;
        if (i < hs) o[i] = acc[kk] / l;
    }
}

static st_status attention_cached_forward(st_node *n, st_graph *g) {
    ST_TRY(st_attention_cached_check(n, g));
    const st_kv_cache *kv = g->kv;
    const int64_t B = n->args.i[ST_ATTNC_B], N = n->args.i[ST_ATTNC_N], C = n->args.i[ST_ATTNC_C];
    const int64_t H = n->args.i[ST_ATTNC_NHEAD], hs = C / H, layer = n->args.i[ST_ATTNC_LAYER];
    float *kc = kv->k + layer * B * kv->cap * C, *vc = kv->v + layer * B * kv->cap * C;
    const cudaStream_t st = st_cuda_stream(g);
    kv_write_kernel<<<st_cuda_blocks(B * N * C, 256), 256, 0, st>>>(n->in[0]->data, kc, vc, N, C, kv->cap,
                                                                    g->pos, g->pos_dev, B * N * C);
    ST_CUDA_LAUNCHED();
    const int64_t nch = (hs + DT * DK - 1) / (DT * DK);
    decode_kernel<<<(unsigned)(B * N * H * nch), DT, 0, st>>>(n->in[0]->data, kc, vc, n->out->data, N, H, hs,
                                                              C, kv->cap, g->pos, g->pos_dev,
                                                              1.0f / sqrtf((float)hs), nch);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status attention_cached_backward(st_node *n, st_graph *g) {
    (void)g;
    return st_fail(ST_ERR_INTERNAL, "attention_cached %s: no backward (cached decoding runs forward alone)",
                   n->out->name);
}

static st_status attention_cached_prepare(st_node *n, st_graph *g) {
    (void)g;
    n->work_count = 0; /* (the CPU's rows of scores; the kernels keep theirs in shared memory) */
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_attention_cached_ops = {"attention_cached",
                                                              attention_cached_forward,
                                                              attention_cached_backward,
                                                              attention_cached_prepare,
                                                              false,
                                                              false,
                                                              false,
                                                              false,
                                                              0};
