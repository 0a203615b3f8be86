/* The CUDA emulator's cuBLASLt (tests/cudaemu/README.md): the descriptor,
 * layout, preference, heuristic and matmul calls the backend makes
 * (src/cuda/matmul.cu), computed with OpenBLAS in fp32 after widening 16-bit
 * operands, or rounding fp32 ones to TF32 for the TF32 compute type.
 *
 * It refuses what cuBLASLt refuses where the rule is documented: a leading
 * dimension smaller than the stored rows, operands of different types, an
 * output that is not fp32 (the backend only asks for fp32), a GELU input
 * matrix (the GELU_AUX and DGELU epilogues) whose leading dimension is not a
 * multiple of 8 or is below D's rows, a bias-gradient epilogue (BGRADA,
 * BGRADB: the sums over k of op(A)'s rows or op(B)'s columns, of D's type)
 * on a batch, and it checks at each matmul that the
 * pointers are at least as aligned as the preference told the heuristic (and
 * the GELU input as when the heuristic saw it), which a real algorithm may
 * silently rely on. */
#include "internal.h" /* first: emu.h defines what the CUDA headers then leave alone */

#include <cblas.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

struct lt_desc {
    cublasComputeType_t compute;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = NULL;
    void *aux = NULL; /* GELU_AUX*: the GELU input written; DGELU: read (of D's type) */
    int64_t aux_ld = 0;
};

static bool ep_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool ep_gelu(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool ep_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU;
}
static bool ep_bgrad(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
struct lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld, stride = 0;
    int32_t batch = 1;
};
struct lt_pref {
    uint64_t ws = 0;
    uint32_t al[4] = {256, 256, 256, 256}; /* A, B, C, D */
};

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                   cudaDataType_t scale) {
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_desc *x = new lt_desc;
    x->compute = compute;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete (lt_desc *)d;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                         const void *buf, size_t n) {
    lt_desc *x = (lt_desc *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (n != sizeof x->ta) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->ta, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (n != sizeof x->tb) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->tb, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (n != sizeof x->ep) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->ep, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (n != sizeof x->bias) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->bias, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (n != sizeof x->aux) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->aux, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (n != sizeof x->aux_ld) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->aux_ld, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "cudaemu: cuBLASLt descriptor attribute %d is not emulated\n", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows || rows == 0 || cols == 0) return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *x = new lt_layout;
    x->type = type;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete (lt_layout *)l;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                           cublasLtMatrixLayoutAttribute_t a, const void *buf,
                                                           size_t n) {
    lt_layout *x = (lt_layout *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == sizeof x->batch) {
        memcpy(&x->batch, buf, n);
        return x->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    }
    if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == sizeof x->stride) {
        memcpy(&x->stride, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    }
    fprintf(stderr, "cudaemu: cuBLASLt layout attribute %d (size %zu) is not emulated\n", (int)a, n);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t) new lt_pref;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete (lt_pref *)p;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                               cublasLtMatmulPreferenceAttributes_t a,
                                                               const void *buf, size_t n) {
    lt_pref *x = (lt_pref *)p;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (n != sizeof x->ws) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&x->ws, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        const int i = a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
                      : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
                      : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
                                                                        : 3;
        memcpy(&x->al[i], buf, n);
        return CUBLAS_STATUS_SUCCESS;
    }
    default:
        fprintf(stderr, "cudaemu: cuBLASLt preference attribute %d is not emulated\n", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

static uint32_t lowest_bit(const void *p) {
    const uint64_t v = (uint64_t)(uintptr_t)p | 256u;
    return (uint32_t)(v & (~v + 1));
}

static bool supported(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
                      const lt_layout *o) {
    if (a->type != b->type) return false;
    if (a->type != CUDA_R_32F && a->type != CUDA_R_16BF && a->type != CUDA_R_16F) return false;
    /* C and D alike: fp32, or the 16-bit type of A and B */
    if (c->type != o->type || (o->type != CUDA_R_32F && o->type != a->type)) return false;
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32) return false;
    if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F) return false;
    const uint64_t m = o->rows, n = o->cols;
    const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bn != n || ak != bk || c->rows != m || c->cols != n) return false;
    if (a->batch != o->batch || b->batch != o->batch || c->batch != o->batch) return false;
    if (d->ep != CUBLASLT_EPILOGUE_DEFAULT && !ep_bias(d->ep) && !ep_gelu(d->ep) &&
        d->ep != CUBLASLT_EPILOGUE_DGELU && !ep_bgrad(d->ep))
        return false;
    if (ep_bgrad(d->ep) && o->batch != 1) return false;
    /* the GELU input matrix (documented): its leading dimension a multiple
     * of 8 and at least D's rows; one product, no batch */
    if (ep_aux(d->ep) && (d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)m || o->batch != 1)) return false;
    /* a test of the backend's way round a cuBLASLt without them */
    if ((ep_aux(d->ep) || ep_bgrad(d->ep)) && getenv("ST_CUDAEMU_NO_FUSED_EPILOGUES")) return false;
    return true;
}

enum { EMU_ALGOS = 3 }; /* the heuristic's answer at most (cublasLtMatmulAlgoGetHeuristic) */

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                         cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                         cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                         cublasLtMatmulPreference_t pref, int want,
                                                         cublasLtMatmulHeuristicResult_t res[], int *found) {
    *found = 0;
    if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
    const lt_desc *d = (const lt_desc *)op;
    if (!supported(d, (lt_layout *)A, (lt_layout *)B, (lt_layout *)C, (lt_layout *)D))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const lt_pref *p = (const lt_pref *)pref;
    /* EMU_ALGOS algorithms when asked for as many, all computing alike;
     * the last refuses when it runs (cublasLtMatmul), as an algorithm may
     * that the heuristic offered: what the backend's timing passes over */
    const int n = want < EMU_ALGOS ? want : EMU_ALGOS;
    for (int k = 0; k < n; k++) {
        memset(&res[k], 0, sizeof res[k]);
        /* the algorithm remembers the alignments it was promised */
        for (int i = 0; i < 4; i++)
            res[k].algo.data[i] = p ? p->al[i] : 256;
        res[k].algo.data[4] = 0x5ca1e; /* made by this heuristic */
        /* cuBLASLt's heuristic reads the aux pointer's value for its alignment */
        res[k].algo.data[5] = ep_aux(d->ep) ? (d->aux ? lowest_bit(d->aux) : 0) : 0;
        res[k].algo.data[6] = ep_bgrad(d->ep) ? (d->bias ? lowest_bit(d->bias) : 0) : 0; /* (the same) */
        res[k].algo.data[7] = (uint64_t)k;                                               /* which */
        res[k].state = CUBLAS_STATUS_SUCCESS;
        res[k].wavesCount = 1.0f;
    }
    *found = n;
    return CUBLAS_STATUS_SUCCESS;
}

/* fp32 copy of the stored matrix: rows x cols per batch, ld apart, stride apart */
static void widen(const lt_layout *l, const void *src, bool tf32, std::vector<float> &out) {
    const int64_t n = (int64_t)(l->batch - 1) * l->stride + (int64_t)(l->cols - 1) * l->ld + (int64_t)l->rows;
    out.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float v;
        if (l->type == CUDA_R_16BF) v = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
        else if (l->type == CUDA_R_16F) v = __half2float(((const __half *)src)[i]);
        else v = ((const float *)src)[i];
        if (tf32) { /* round to nearest, 10 explicit mantissa bits */
            uint32_t u;
            memcpy(&u, &v, 4);
            if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
            memcpy(&v, &u, 4);
        }
        out[(size_t)i] = v;
    }
}

static float gelu(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static float gelu_grad(float x) { /* d gelu / dx, the tanh form's */
    const float k = 0.7978845608028654f, a = 0.044715f;
    const float t = tanhf(k * (x + a * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * a * x * x);
}

/* element i of a matrix of type t */
static float load(cudaDataType t, const void *p, int64_t i) {
    return t == CUDA_R_16BF  ? __bfloat162float(((const __nv_bfloat16 *)p)[i])
           : t == CUDA_R_16F ? __half2float(((const __half *)p)[i])
                             : ((const float *)p)[i];
}
static void store(cudaDataType t, void *p, int64_t i, float v) {
    if (t == CUDA_R_16BF)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == CUDA_R_16F)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

/* out[v] = the sum over l < k, in fp32 in l's order, of the stored matrix
 * w's element (v, l): at l * ld + v when k_major (l steps over columns),
 * else at v * ld + l; stored as type t. */
static void bias_grad(const std::vector<float> &w, int64_t ld, bool k_major, int count, int k, cudaDataType t,
                      void *out) {
    for (int v = 0; v < count; v++) {
        float sum = 0.0f;
        for (int l = 0; l < k; l++)
            sum += w[k_major ? (size_t)l * ld + v : (size_t)v * ld + l];
        store(t, out, v, sum);
    }
}

/* An algorithm one of these heuristics returned, for a product it supports
 * (what a backend that keeps algorithms between runs asks before it uses
 * one again). */
extern "C" cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                  cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                  cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                  const cublasLtMatmulAlgo_t *algo,
                                                  cublasLtMatmulHeuristicResult_t *result) {
    if (!algo || !result) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->data[4] != 0x5ca1e ||
        !supported((const lt_desc *)op, (lt_layout *)A, (lt_layout *)B, (lt_layout *)C, (lt_layout *)D))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(result, 0, sizeof *result);
    result->algo = *algo;
    result->state = CUBLAS_STATUS_SUCCESS;
    result->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" size_t cublasLtGetVersion(void) { return 130000; } /* (the emulator's own: 13.0.0) */

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                                         cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                                         cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                         const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                                         cudaStream_t stream) {
    const lt_desc *d = (const lt_desc *)op;
    const lt_layout *a = (lt_layout *)Ad, *b = (lt_layout *)Bd, *c = (lt_layout *)Cd, *o = (lt_layout *)Dd;
    if (!supported(d, a, b, c, o)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!algo || algo->data[4] != 0x5ca1e) {
        fprintf(stderr, "cudaemu: cublasLtMatmul with an algorithm no heuristic returned\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (lowest_bit(ptr[i]) < algo->data[i]) {
            fprintf(stderr,
                    "cudaemu: cublasLtMatmul: operand %c at %p is %u-byte aligned, but the heuristic was "
                    "promised %u\n",
                    "ABCD"[i], ptr[i], lowest_bit(ptr[i]), (unsigned)algo->data[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (algo->data[7] == EMU_ALGOS - 1 && EMU_ALGOS > 1) return CUBLAS_STATUS_NOT_SUPPORTED; /* (above) */
    if ((ep_bias(d->ep) || ep_bgrad(d->ep)) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    /* The bias epilogue's vector: no preference tells the heuristic its
     * alignment, and its kernels may load it 16 bytes at a time: one that
     * is not faults on a GPU ("misaligned address", the context lost) */
    if (ep_bias(d->ep) && lowest_bit(d->bias) < 16) {
        fprintf(stderr,
                "cudaemu: cublasLtMatmul: the bias vector at %p is %u-byte aligned: a GPU's epilogue may "
                "load it 16 bytes at a time (a misaligned address; the context is lost)\n",
                d->bias, lowest_bit(d->bias));
        st_emu_lose(cudaErrorMisalignedAddress);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (ep_bgrad(d->ep) && lowest_bit(d->bias) < algo->data[6]) {
        fprintf(stderr,
                "cudaemu: cublasLtMatmul: the bias gradient at %p is %u-byte aligned, the heuristic saw %u\n",
                d->bias, lowest_bit(d->bias), (unsigned)algo->data[6]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* a test of the backend's way round an algorithm that refuses, when it
       runs, a bias with C apart from D (the residual in the product) */
    if (ep_bias(d->ep) && C != D && getenv("ST_CUDAEMU_NO_FUSED_EPILOGUES"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ep_aux(d->ep) && (!d->aux || lowest_bit(d->aux) < algo->data[5])) {
        fprintf(
            stderr,
            "cudaemu: cublasLtMatmul: the GELU input matrix at %p is %u-byte aligned, the heuristic saw %u\n",
            d->aux, d->aux ? lowest_bit(d->aux) : 0u, (unsigned)algo->data[5]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ep_aux(
            d->ep)) { /* the aux matrix apart from D: an epilogue reads or writes both element by element */
        const size_t es = o->type == CUDA_R_32F ? 4 : 2;
        const char *d0 = (const char *)D, *d1 = d0 + ((o->cols - 1) * (size_t)o->ld + o->rows) * es;
        const char *a0 = (const char *)d->aux, *a1 = a0 + ((o->cols - 1) * (size_t)d->aux_ld + o->rows) * es;
        if (a0 < d1 && d0 < a1) {
            fprintf(stderr, "cudaemu: cublasLtMatmul: the GELU input matrix overlaps D\n");
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (!st_emu_stream_ok(stream)) return CUBLAS_STATUS_INVALID_VALUE;
    if (st_emu_capture_check(stream, false) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;                               /* (its launch) */
    if (st_emu_lost() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED; /* its launch fails */
    /* what the call reads now (descriptors, scalars), the rest when it runs */
    const lt_desc dv = *d;
    const lt_layout av = *a, bv = *b, cv = *c, ov = *o;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    st_emu_enqueue_uses(
        stream,
        [=] {
            if (st_emu_lost() != cudaSuccess) return;
            const bool tf32 = dv.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
            std::vector<float> wa, wb, wc, acc;
            widen(&av, A, tf32, wa);
            widen(&bv, B, tf32, wb);
            if (be != 0.0f) widen(&cv, C, false, wc); /* read whole before D (which may be C) is written */
            const int m = (int)ov.rows, n = (int)ov.cols, k = (int)(dv.ta == CUBLAS_OP_N ? av.cols : av.rows);
            acc.resize((size_t)m * (size_t)n);
            for (int32_t t = 0; t < ov.batch; t++) {
                /* fp32 accumulation into a packed m x n buffer, C added with beta, the
                 * epilogue in fp32 (the bias is of D's type), then stored as D's type,
                 * rounded to nearest even */
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++)
                        acc[(size_t)j * m + i] =
                            be != 0.0f ? wc[(size_t)(t * cv.stride + (int64_t)j * cv.ld + i)] : 0.0f;
                cblas_sgemm(CblasColMajor, dv.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                            dv.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al,
                            wa.data() + t * av.stride, (int)av.ld, wb.data() + t * bv.stride, (int)bv.ld, be,
                            acc.data(), m);
                /* GELU_AUX*: the GELU input (after the bias) stored, of D's type,
                 * and GELU applied to the unrounded value; DGELU: the stored GELU
                 * input's derivative times the product */
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++) {
                        float v = acc[(size_t)j * m + i];
                        if (ep_bias(dv.ep)) v += load(ov.type, dv.bias, i);
                        if (ep_aux(dv.ep) && dv.ep != CUBLASLT_EPILOGUE_DGELU)
                            store(ov.type, dv.aux, (int64_t)j * dv.aux_ld + i, v);
                        if (ep_gelu(dv.ep)) v = gelu(v);
                        if (dv.ep == CUBLASLT_EPILOGUE_DGELU)
                            v *= gelu_grad(load(ov.type, dv.aux, (int64_t)j * dv.aux_ld + i));
                        store(ov.type, D, t * ov.stride + (int64_t)j * ov.ld + i, v);
                    }
                /* BGRADA: bias gradient (m) = op(A) summed over k, BGRADB: (n) =
                 * op(B) summed over k, of D's type; written, not added to (one
                 * product: no batch). op(A) is (m x k), op(B) (k x n): A's k runs
                 * down its stored columns unless transposed, B's the other way. */
                if (dv.ep == CUBLASLT_EPILOGUE_BGRADA)
                    bias_grad(wa, av.ld, dv.ta == CUBLAS_OP_N, m, k, ov.type, (void *)dv.bias);
                if (dv.ep == CUBLASLT_EPILOGUE_BGRADB)
                    bias_grad(wb, bv.ld, dv.tb != CUBLAS_OP_N, n, k, ov.type, (void *)dv.bias);
            }
        },
        std::vector<const void *>{A, B, C, D, d->bias, d->aux}, "cublasLtMatmul");
    return CUBLAS_STATUS_SUCCESS;
}
