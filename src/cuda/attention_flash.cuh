/* Flash attention for the CUDA attention twin (src/cuda/attention.cu):
 * causal softmax(Q K^T scale) V without the (T, T) matrix in memory, after
 * FlashAttention-2 (Dao 2023, arXiv:2307.08691, algorithms 1 and 2). The
 * saved state is one fp32 log-sum-exp per row, lse (B, nh, T); backward
 * recomputes P from Q, K and lse. Kernels in attention_flash.cu. */
#ifndef ST_CUDA_ATTENTION_FLASH_CUH
#define ST_CUDA_ATTENTION_FLASH_CUH

#include <type_traits>
#include <utility>

#include "common.cuh"

typedef struct st_flash {
    /* in either storage (src/layers/half_io.h) */
    st_fbuf qkv;  /* (B, T, 3C): head h's Q, K, V at columns h hs, C + h hs, 2C + h hs */
    st_fbuf y;    /* (B, T, C), forward's output */
    st_fbuf dy;   /* (B, T, C), backward's output gradient */
    st_fbuf dqkv; /* (B, T, 3C), backward writes (or adds, acc) every element */
    float *lse;   /* (B, nh, T): log sum_j exp(s_ij), the saved state */
    float *dsum;  /* (B, nh, T): rowsum(dY * Y) = rowsum(P * dP), backward's scratch */
    int B, T, C, nh, hs;
    float scale;
    bool acc; /* backward adds into dqkv */
} st_flash;
#ifdef ST_CUDA_EMU
static inline int st_emu_pointers(const st_flash &f, const void **out) {
    return st_emu_pointers_of(out, {f.qkv.p, f.y.p, f.dy.p, f.dqkv.p, f.lse, f.dsum});
}
#endif

/* Which shapes take these kernels (head sizes 16, 32, ..., 128, grids that
 * fit): st_attention_flash_fits, src/layers/attention_layout.h. */
/* y and lse from qkv; bf16 runs on tensor cores (mma.sync), others exact fp32. */
st_status st_cuda_flash_forward(st_graph *g, const st_flash *f);
/* dqkv from qkv, dy, lse (dsum is its scratch). */
st_status st_cuda_flash_backward(st_graph *g, const st_flash *f);
/* D = rowsum(dY * Y) per row into dsum, the first of both backwards. */
st_status st_cuda_flash_rowsums(st_graph *g, const st_flash *f);
/* The exact fp32 kernels (attention_flash_f32.cu), which the two above call
 * for fp32 and fp16 runs. */
st_status st_cuda_flash_forward_f32(st_graph *g, const st_flash *f);
st_status st_cuda_flash_backward_f32(st_graph *g, const st_flash *f);

/* The head sizes the kernels are instantiated for: every multiple of 16 up
 * to 128, the rule of st_attention_flash_fits (attention_layout.h). */
typedef std::integer_sequence<int, 16, 32, 48, 64, 80, 96, 112, 128> st_flash_head_sizes;

template <class F, int... D>
static st_status st_flash_dispatch(const st_flash *f, F &run, std::integer_sequence<int, D...>) {
    st_status s = ST_OK;
    const bool found = ((f->hs == D && ((s = run(std::integral_constant<int, D>())), true)) || ...);
    return found ? s : st_fail(ST_ERR_INTERNAL, "flash attention: head size %d", f->hs);
}

/* run(std::integral_constant<int, D>()) for the head size D = f->hs (one of
 * st_flash_head_sizes); an internal error for any other. */
template <class F> static st_status st_flash_by_head_size(const st_flash *f, F &&run) {
    return st_flash_dispatch(f, run, st_flash_head_sizes());
}

#endif
