/* CUDA twin of src/layers/embedding.c: y[i, :] = weight[idx[i], :].
 *
 * Backward is a scatter-add (repeated tokens hit one row), done
 * deterministically without atomics: the positions are sorted by token with
 * CUB's stable radix sort, then each run of equal tokens is added onto its
 * dweight row in position order. A run is cut into pieces at every
 * multiple of EMB_PIECE sorted positions, so that a frequent token (a
 * comma's 700 places in 16K tokens of English) is not one block's 700
 * dependent loads, the step's longest chain: the pieces after the first are
 * summed first, each by a block of its own, into a scratch row
 * (emb_pieces_kernel); then the block of the run's start adds its own piece
 * and those sums, in order, onto dweight (emb_backward_kernel). The order
 * is fixed by the sorted positions alone: the same bits every run. A run
 * of at most EMB_PIECE positions within one piece is the CPU's order
 * exactly; a longer one differs from it in the last bits (the pieces'
 * sums added, not each row).
 *
 * A token outside [0, vocab) cannot be named from the device without a host
 * round trip each step: its output row is NaN (so the loss turns NaN and the
 * trainer stops), and backward skips it. The CPU path names the position.
 * The output and its gradient in either storage (src/layers/half_io.h). */
#include <cub/device/device_radix_sort.cuh>

#include "kernels.cuh"

enum { EMB_COLS = 128, EMB_PIECE = 32 }; /* columns per block; sorted positions per piece of a run */

/* Bits the sort needs for keys 0..vocab (vocab marks a bad token). */
static int key_bits(int64_t vocab) {
    int b = 1;
    while (b < 32 && ((int64_t)1 << b) <= vocab)
        b++;
    return b;
}

static __global__ void emb_forward_kernel(const int32_t *idx, st_fbuf w, st_fbuf y, int64_t N, int64_t C,
                                          int64_t V) {
    const int64_t n = N * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C, c = i % C;
        const int32_t t = idx[r];
        st_st(y, i, (t >= 0 && t < V) ? st_ld(w, (int64_t)t * C + c) : __int_as_float(0x7fc00000));
    }
}

static __global__ void emb_keys_kernel(const int32_t *idx, uint32_t *keys, int32_t *pos, int64_t N,
                                       int64_t V) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t t = idx[i];
        keys[i] = (t >= 0 && t < V) ? (uint32_t)t : (uint32_t)V;
        pos[i] = (int32_t)i;
    }
}

/* The sum of the dy rows of the piece of key k's run that starts at sorted
 * position i: up to the run's end or the next multiple of EMB_PIECE, in
 * position order, onto acc; *end: where it stopped. */
static __device__ float emb_piece(const uint32_t *keys, const int32_t *pos, st_fbuf dy, int64_t i, uint32_t k,
                                  int64_t N, int64_t C, int64_t c, float acc, int64_t *end) {
    int64_t j = i;
    do {
        acc += st_ld(dy, (int64_t)pos[j] * C + c);
        j++;
    } while (j < N && j % EMB_PIECE != 0 && keys[j] == k);
    *end = j;
    return acc;
}

/* Block x: piece p, at sorted position p * EMB_PIECE; it works only where
 * that is inside a run (not its start): the piece's sum into part[p].
 * Block y: a tile of EMB_COLS columns. */
static __global__ void emb_pieces_kernel(const uint32_t *keys, const int32_t *pos, st_fbuf dy, float *part,
                                         int64_t N, int64_t C, int64_t V) {
    const int64_t p = blockIdx.x, i = p * EMB_PIECE;
    if (i == 0 || i >= N) return;
    const uint32_t k = keys[i];
    if (keys[i - 1] != k || k >= (uint32_t)V) return;
    const int64_t c = (int64_t)blockIdx.y * EMB_COLS + threadIdx.x;
    if (c >= C) return;
    int64_t end;
    part[p * C + c] = emb_piece(keys, pos, dy, i, k, N, C, c, 0.0f, &end);
}

/* Block x: sorted position i; it works only where a run of equal keys
 * starts: its first piece, then the other pieces' sums, onto dweight.
 * Block y: a tile of EMB_COLS columns. */
static __global__ void emb_backward_kernel(const uint32_t *keys, const int32_t *pos, st_fbuf dy,
                                           const float *part, float *dw, int64_t N, int64_t C, int64_t V) {
    const int64_t i = blockIdx.x;
    const uint32_t k = keys[i];
    if ((i > 0 && keys[i - 1] == k) || k >= (uint32_t)V) return;
    const int64_t c = (int64_t)blockIdx.y * EMB_COLS + threadIdx.x;
    if (c >= C) return;
    float *dr = dw + (int64_t)k * C + c;
    int64_t j;
    float acc = emb_piece(keys, pos, dy, i, k, N, C, c, *dr, &j);
    for (; j < N && keys[j] == k; j += EMB_PIECE) /* (j: a multiple of EMB_PIECE, a piece's start) */
        acc += part[(j / EMB_PIECE) * C + c];
    *dr = acc;
}

/* The work scratch: keys in/out and positions in/out (N each, as 32-bit
 * words), the pieces' sums (a row of C for each EMB_PIECE positions), then
 * CUB's temporary storage. */
typedef struct emb_work {
    uint32_t *keys_in, *keys_out;
    int32_t *pos_in, *pos_out;
    float *part;
    void *tmp;
    size_t tmp_bytes;
} emb_work;

static int64_t emb_pieces(int64_t N) { return (N + EMB_PIECE - 1) / EMB_PIECE; }

static st_status emb_sort_bytes(st_node *n, size_t *bytes) {
    const int64_t N = n->args.i[ST_EMBEDDING_N];
    *bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(
        nullptr, *bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr, (const int32_t *)nullptr,
        (int32_t *)nullptr, (int)N, 0, key_bits(n->args.i[ST_EMBEDDING_VOCAB]), (cudaStream_t)0);
    if (e != cudaSuccess)
        return st_cuda_fail(NULL, e, "cub::DeviceRadixSort::SortPairs (size)", __FILE__, __LINE__);
    return ST_OK;
}

static emb_work emb_work_at(float *work, int64_t N, int64_t C, size_t tmp_bytes) {
    emb_work w;
    const int64_t a = st_align_floats(N), pa = st_align_floats(emb_pieces(N) * C);
    w.keys_in = (uint32_t *)work;
    w.keys_out = (uint32_t *)(work + a);
    w.pos_in = (int32_t *)(work + 2 * a);
    w.pos_out = (int32_t *)(work + 3 * a);
    w.part = work + 4 * a;
    w.tmp = (void *)(((uintptr_t)(work + 4 * a + pa) + 255) & ~(uintptr_t)255); /* 64 floats of slack below */
    w.tmp_bytes = tmp_bytes;
    return w;
}

static st_status embedding_forward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_EMBEDDING_N], C = n->args.i[ST_EMBEDDING_C],
                  V = n->args.i[ST_EMBEDDING_VOCAB];
    emb_forward_kernel<<<st_cuda_blocks(N * C, 256), 256, 0, st_cuda_stream(g)>>>(
        n->in[0]->idata, st_data(n->params[0]), st_data(n->out), N, C, V);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

static st_status embedding_backward(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_EMBEDDING_N], C = n->args.i[ST_EMBEDDING_C],
                  V = n->args.i[ST_EMBEDDING_VOCAB];
    float *dw = n->params[0]->grad; /* (V, C) */
    if (!dw) return ST_OK;
    size_t tmp_bytes;
    ST_TRY(emb_sort_bytes(n, &tmp_bytes));
    emb_work w = emb_work_at(g->work, N, C, tmp_bytes);
    cudaStream_t st = st_cuda_stream(g);
    emb_keys_kernel<<<st_cuda_blocks(N, 256), 256, 0, st>>>(n->in[0]->idata, w.keys_in, w.pos_in, N, V);
    ST_CUDA_LAUNCHED();
    ST_CUDA_TRY(cub::DeviceRadixSort::SortPairs(w.tmp, w.tmp_bytes, w.keys_in, w.keys_out, w.pos_in,
                                                w.pos_out, (int)N, 0, key_bits(V), st));
    const unsigned tiles = (unsigned)((C + EMB_COLS - 1) / EMB_COLS);
    if (N > EMB_PIECE) { /* (else no run has a second piece) */
        emb_pieces_kernel<<<dim3((unsigned)emb_pieces(N), tiles), EMB_COLS, 0, st>>>(
            w.keys_out, w.pos_out, st_grad(n->out), w.part, N, C, V);
        ST_CUDA_LAUNCHED();
    }
    emb_backward_kernel<<<dim3((unsigned)N, tiles), EMB_COLS, 0, st>>>(w.keys_out, w.pos_out, st_grad(n->out),
                                                                       w.part, dw, N, C, V);
    ST_CUDA_LAUNCHED();
    return ST_OK;
}

/* Size the work scratch for the sort (CUB tells its temporary storage). */
static st_status embedding_prepare(st_node *n, st_graph *g) {
    const int64_t N = n->args.i[ST_EMBEDDING_N], C = n->args.i[ST_EMBEDDING_C];
    if (N > INT32_MAX)
        return st_fail(ST_ERR_SHAPE, "embedding %s: %lld positions exceed the CUDA kernel's 2^31 limit",
                       n->out->name, (long long)N);
    size_t tmp_bytes;
    ST_TRY(emb_sort_bytes(n, &tmp_bytes));
    st_need_work(n, 4 * st_align_floats(N) + st_align_floats(emb_pieces(N) * C) + 64 +
                        st_align_floats((int64_t)((tmp_bytes + 3) / 4)));
    return ST_OK;
}

extern "C" const st_layer_ops st_cuda_embedding_ops = {
    "embedding", embedding_forward, embedding_backward, embedding_prepare, false, true, false, false, 0};
