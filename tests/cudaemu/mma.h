/* The CUDA emulator's <mma.h> (tests/cudaemu/README.md): nvcuda::wmma for
 * the shapes the backend uses, m16n16k16 with bf16 or half inputs and m16n16k8
 * with tf32 inputs, float accumulators. The emulator's build puts
 * tests/cudaemu first on the include path, so `#include <mma.h>` in a .cu
 * finds this file and not the toolkit's.
 *
 * Every thread's fragment holds the whole tile, in a scrambled element
 * order: CUDA leaves the element-to-(row, column) mapping unspecified, so
 * code may only treat x[i] uniformly (scale, fill, combine fragments of the
 * same type element by element); code that assumes row-major elements gets
 * wrong values here. The operations are warp-wide: each starts at a warp
 * barrier (a lane that skips one deadlocks the warp, as divergent wmma code
 * would hang or corrupt on a GPU), and store_matrix_sync writes only the
 * calling lane's share of the tile, so a lane that reads what the warp
 * stored without a __syncwarp first reads stale memory, as on a GPU. Loads
 * and stores check the pointer's 256-bit alignment and ldm (a multiple of 8
 * elements for 16-bit types, 4 for float), which a GPU needs but does not
 * check. Products: 16-bit and tf32 products are exact in fp32 and are summed
 * in fp32 in k order after the accumulator (a GPU sums in its own order). */
#ifndef ST_CUDAEMU_MMA_H
#define ST_CUDAEMU_MMA_H

#ifndef ST_CUDAEMU_EMU_H
#error "tests/cudaemu/mma.h is the emulator's: emu.h (force-included) comes first"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

[[noreturn]] void st_emu_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
} // namespace precision

namespace detail {
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> {
    enum { rows = M, cols = K };
};
template <int M, int N, int K> struct dims<matrix_b, M, N, K> {
    enum { rows = K, cols = N };
};
template <int M, int N, int K> struct dims<accumulator, M, N, K> {
    enum { rows = M, cols = N };
};
/* where element (r, c) of a rows x cols tile lives in x[]: a fixed
 * permutation (7 is odd, the counts are powers of two) */
template <int R, int C> static inline int slot(int r, int c) { return ((r * C + c) * 7 + 3) % (R * C); }
static inline float widen(float v) { return v; }
static inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float widen(__half v) { return __half2float(v); }
/* what a tensor core reads of a tf32 operand: the top 19 bits */
static inline float tf32_operand(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}
template <class T> static inline void check(const T *p, unsigned ldm, const char *what) {
    const unsigned step = sizeof(T) == 2 ? 8 : 4;
    if (((uintptr_t)p & 31) || ldm % step)
        st_emu_die("wmma::%s: pointer %p is not 256-bit aligned or ldm %u is not a multiple of %u", what,
                   (const void *)p, ldm, step);
}
} // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
  public:
    typedef typename detail::storage<T>::type element_type;
    typedef detail::dims<Use, M, N, K> shape;
    enum { num_elements = shape::rows * shape::cols };
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L, class V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
    st_emu_warp_barrier();
    for (int i = 0; i < f.num_elements; i++)
        f.x[i] = (typename fragment<Use, M, N, K, T, L>::element_type)v;
}

/* matrix_a / matrix_b: the layout is the fragment's */
template <class Use, int M, int N, int K, class T, class L, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
    typedef detail::dims<Use, M, N, K> d;
    detail::check(p, ldm, "load_matrix_sync");
    st_emu_warp_barrier();
    for (int r = 0; r < d::rows; r++)
        for (int c = 0; c < d::cols; c++) {
            const size_t at = std::is_same<L, row_major>::value ? (size_t)r * ldm + c : (size_t)c * ldm + r;
            f.x[detail::slot<d::rows, d::cols>(r, c)] = p[at];
        }
}

/* accumulators: the layout is the call's */
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm,
                                    layout_t layout) {
    detail::check(p, ldm, "load_matrix_sync");
    st_emu_warp_barrier();
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[detail::slot<M, N>(r, c)] =
                p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r];
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm,
                                     layout_t layout) {
    detail::check(p, ldm, "store_matrix_sync");
    st_emu_warp_barrier();
    const int lane = st_emu_lane();
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            if ((r * N + c) % 32 == lane)
                p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] =
                    f.x[detail::slot<M, N>(r, c)];
}

/* d = a b + c, fp32 sums in k order (the operands widened once, then each
 * row's sums run side by side: the same order, and the emulator's dearest loop) */
template <int M, int N, int K, class T, class LA, class LB>
static inline void
mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
         const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    st_emu_warp_barrier();
    const bool tf = std::is_same<T, precision::tf32>::value;
    float av[M * K], bv[K * N], out[M * N];
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const float v = detail::widen(a.x[detail::slot<M, K>(i, k)]);
            av[i * K + k] = tf ? detail::tf32_operand(v) : v;
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) {
            const float v = detail::widen(b.x[detail::slot<K, N>(k, j)]);
            bv[k * N + j] = tf ? detail::tf32_operand(v) : v;
        }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            out[i * N + j] = c.x[detail::slot<M, N>(i, j)];
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++)
                out[i * N + j] += av[i * K + k] * bv[k * N + j];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            d.x[detail::slot<M, N>(i, j)] = out[i * N + j];
}

/* cvt.rna.tf32.f32: round to nearest, ties away from zero, kept in a float */
static inline float __float_to_tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}

} // namespace wmma
} // namespace nvcuda

#endif
