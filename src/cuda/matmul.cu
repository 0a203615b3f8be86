/* cuBLASLt products with cached plans (see matmul.cuh).
 *
 * The plan table is an open-addressing hash table (linear probing, at most
 * half full) owned by the device: a key is the whole of what the descriptor,
 * the layouts and the heuristic's answer depend on, so a hit reuses them as
 * they are and only the pointers (and the bias pointer, an attribute of the
 * descriptor, read when cublasLtMatmul is called) change from call to call.
 * The alignments told to the heuristic (matmul.cuh) are part of the key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.cuh"

enum { FALLBACK_THREADS = 256, PLANS_MIN = 64 };

/* Tuning (model.matmul_tune, st_device.lt_tune; docs/cuda.md, "Choosing
 * cuBLASLt's algorithm"): a plan made with it keeps the heuristic's first
 * TUNE_ALGOS algorithms, and its first product (tune, below) runs each once
 * and then times it TUNE_REPS times, its best time counted; the heuristic's
 * first is kept unless another is faster by TUNE_MARGIN. */
enum { TUNE_ALGOS = 8, TUNE_REPS = 5 };
static const float TUNE_MARGIN = 0.97f;

/* Everything a plan depends on; memset to 0 first, compared with memcmp
 * (no padding: fourteen 4-byte fields, then 8-byte ones). */
typedef struct plan_key {
    int32_t ab, cd, compute, ep, ta, tb, batch;
    uint32_t al_aux;
    uint32_t al_a, al_b, al_d, al_bias;
    uint32_t al_c, c_apart; /* C's alignment; C is not D */
    int64_t m, n, k, lda, ldb, ldd, sa, sb, sd, aux_ld;
} plan_key;

typedef struct plan {
    plan_key key;
    bool used; /* the slot holds a plan */
    bool ok;   /* cuBLASLt has an algorithm for it (else only the key is kept) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t *cand; /* tuning: the heuristic's algorithms (cand[0] its first), until the plan's
                                   first product times them; NULL: algo is the one */
    int n_cand;
    bool record;             /* its algorithm was timed or read back: kept by st_cuda_matmul_algos_export */
    int64_t calls;           /* products that took the plan */
    float t_first, t_chosen; /* timed plans: ms a call of the heuristic's first and of the algorithm kept
                                (0 when the first refused or the plan was not timed) */
} plan;

/* An algorithm a timing kept, by its plan's key (st_cuda_matmul_algos_import). */
typedef struct known_algo {
    plan_key key;
    cublasLtMatmulAlgo_t algo;
} known_algo;

struct st_lt_plans {
    plan *slot;
    size_t cap, n; /* cap: a power of two */
    int64_t hits, misses;
    int64_t tuned, switched; /* plans timed; of them, those that kept another than the heuristic's first */
    known_algo *known; /* read back from an earlier run: a plan of one of these keys takes its algorithm */
    size_t n_known;
    int64_t restored; /* plans that took a known algorithm */
    bool dirty;       /* a plan was timed since the last export */
};

static void plan_destroy(plan *p) {
    free(p->cand);
    p->cand = NULL;
    p->n_cand = 0;
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    p->ld = p->lb = p->la = NULL;
    p->op = NULL;
}

void st_cuda_plans_free(st_device *d) {
    st_lt_plans *t = d->plans;
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i].used) plan_destroy(&t->slot[i]);
    free(t->slot);
    free(t->known);
    free(t);
    d->plans = NULL;
}

extern "C" void st_cuda_matmul_plan_stats(const st_device *d, int64_t *plans, int64_t *hits,
                                          int64_t *misses) {
    const st_lt_plans *t = d->plans;
    *plans = t ? (int64_t)t->n : 0;
    *hits = t ? t->hits : 0;
    *misses = t ? t->misses : 0;
}

extern "C" void st_cuda_set_matmul_tune(st_device *d, bool on) { d->lt_tune = on; }

extern "C" void st_cuda_matmul_tune_stats(const st_device *d, st_cuda_tune_stats *out) {
    memset(out, 0, sizeof *out);
    const st_lt_plans *t = d->plans;
    if (!t) return;
    out->tuned = t->tuned;
    out->switched = t->switched;
    out->restored = t->restored;
    for (size_t i = 0; i < t->cap; i++) {
        const plan *pl = &t->slot[i];
        if (!pl->used || !(pl->t_first > 0)) continue;
        out->first_ms += (double)pl->calls * pl->t_first;
        out->chosen_ms += (double)pl->calls * pl->t_chosen;
    }
}

static uint64_t key_hash(const plan_key *k) { /* FNV-1a */
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* The slot holding k, or the empty slot where it would go. */
static plan *find(plan *slot, size_t cap, const plan_key *k) {
    size_t i = (size_t)key_hash(k) & (cap - 1);
    while (slot[i].used && memcmp(&slot[i].key, k, sizeof *k) != 0)
        i = (i + 1) & (cap - 1);
    return &slot[i];
}

/* Room for one more plan (the table at most half full). */
static st_status reserve(st_device *d) {
    st_lt_plans *t = d->plans;
    if (!t) {
        t = (st_lt_plans *)calloc(1, sizeof *t);
        if (!t) return st_fail(ST_ERR_NOMEM, "out of host memory for the cuBLASLt plan table");
        d->plans = t;
    }
    if (2 * (t->n + 1) <= t->cap) return ST_OK;
    const size_t cap = t->cap ? 2 * t->cap : (size_t)PLANS_MIN;
    plan *slot = (plan *)calloc(cap, sizeof *slot);
    if (!slot) return st_fail(ST_ERR_NOMEM, "out of host memory for the cuBLASLt plan table");
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i].used) *find(slot, cap, &t->slot[i].key) = t->slot[i];
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
    return ST_OK;
}

/* st_cuda_matmul_algos_export's bytes: this header, then n records of a
 * plan_key and a cublasLtMatmulAlgo_t (cuBLASLt lets an algorithm be kept
 * and used again with the same cuBLASLt version). Read back only by the
 * same build on the same kind of GPU: the sizes, cuBLASLt's version and
 * the device's name and compute capability must match. */
typedef struct algos_header {
    char magic[16]; /* "st matmul algos" */
    uint32_t version, key_bytes, algo_bytes, n;
    uint64_t lt_version;
    char device[192];
    int32_t cc_major, cc_minor;
} algos_header;
static const char ALGOS_MAGIC[16] = "st matmul algos";
enum { ALGOS_VERSION = 1 };

static void algos_header_of(const st_device *d, algos_header *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, ALGOS_MAGIC, sizeof h->magic);
    h->version = ALGOS_VERSION;
    h->key_bytes = sizeof(plan_key);
    h->algo_bytes = sizeof(cublasLtMatmulAlgo_t);
    h->lt_version = (uint64_t)cublasLtGetVersion();
    snprintf(h->device, sizeof h->device, "%s", d->name);
    h->cc_major = d->cc_major;
    h->cc_minor = d->cc_minor;
}

extern "C" bool st_cuda_matmul_algos_dirty(const st_device *d) { return d->plans && d->plans->dirty; }

extern "C" st_status st_cuda_matmul_algos_export(st_device *d, void **out, size_t *nbytes) {
    *out = NULL;
    *nbytes = 0;
    st_lt_plans *t = d->plans;
    const size_t most = t ? t->cap + t->n_known : 0; /* (room for every slot and known key) */
    char *b = (char *)malloc(sizeof(algos_header) + most * sizeof(known_algo));
    if (!b) return st_fail(ST_ERR_NOMEM, "out of host memory listing the timed matrix-product algorithms");
    known_algo *const first = (known_algo *)(b + sizeof(algos_header));
    known_algo *r = first;
    for (size_t i = 0; t && i < t->cap; i++)
        if (t->slot[i].used && t->slot[i].ok && t->slot[i].record) {
            memcpy(&r->key, &t->slot[i].key, sizeof r->key);
            memcpy(&r->algo, &t->slot[i].algo, sizeof r->algo);
            r++;
        }
    for (size_t i = 0; t && i < t->n_known; i++) /* (known keys this run has not reached: kept too) */
        if (!t->cap || !find(t->slot, t->cap, &t->known[i].key)->used) memcpy(r++, &t->known[i], sizeof *r);
    algos_header h;
    algos_header_of(d, &h);
    h.n = (uint32_t)(r - first);
    memcpy(b, &h, sizeof h);
    if (t) t->dirty = false;
    *out = b;
    *nbytes = sizeof h + (size_t)h.n * sizeof(known_algo);
    return ST_OK;
}

extern "C" st_status st_cuda_matmul_algos_import(st_device *d, const void *bytes, size_t nbytes, char *why,
                                                 size_t why_cap) {
    if (why_cap) why[0] = '\0';
    algos_header h, mine;
    algos_header_of(d, &mine);
    if (nbytes < sizeof h) {
        snprintf(why, why_cap, "%zu bytes, shorter than its header", nbytes);
        return ST_OK;
    }
    memcpy(&h, bytes, sizeof h);
    h.device[sizeof h.device - 1] = '\0';
    if (memcmp(h.magic, ALGOS_MAGIC, sizeof h.magic) != 0 || h.version != ALGOS_VERSION ||
        h.key_bytes != mine.key_bytes || h.algo_bytes != mine.algo_bytes) {
        snprintf(why, why_cap, "not this scaletrain's list of algorithms");
        return ST_OK;
    }
    if (h.lt_version != mine.lt_version || strcmp(h.device, mine.device) != 0 ||
        h.cc_major != mine.cc_major || h.cc_minor != mine.cc_minor) {
        snprintf(why, why_cap,
                 "timed with cuBLASLt %llu on %s (sm_%d%d), and this run has cuBLASLt %llu on %s",
                 (unsigned long long)h.lt_version, h.device, h.cc_major, h.cc_minor,
                 (unsigned long long)mine.lt_version, mine.device);
        return ST_OK;
    }
    if (nbytes != sizeof h + (size_t)h.n * sizeof(known_algo)) {
        snprintf(why, why_cap, "%zu bytes where its %u algorithms take %zu", nbytes, h.n,
                 sizeof h + (size_t)h.n * sizeof(known_algo));
        return ST_OK;
    }
    ST_TRY(reserve(d)); /* (the table, for the list) */
    st_lt_plans *t = d->plans;
    known_algo *k = h.n ? (known_algo *)malloc((size_t)h.n * sizeof *k) : NULL;
    if (h.n && !k)
        return st_fail(ST_ERR_NOMEM, "out of host memory reading the timed matrix-product algorithms");
    if (h.n) memcpy(k, (const char *)bytes + sizeof h, (size_t)h.n * sizeof *k);
    free(t->known);
    t->known = k;
    t->n_known = h.n;
    return ST_OK;
}

/* Largest power of two (at most 256) dividing the byte address and the byte
 * sizes of the leading dimension and batch stride (elements of `es` bytes;
 * 0: not counted). */
static uint32_t align_bytes(const void *p, int64_t ld, int64_t stride, int64_t es) {
    uint64_t v = (uint64_t)(uintptr_t)p | 256u;
    if (ld) v |= (uint64_t)(ld * es);
    if (stride) v |= (uint64_t)(stride * es);
    return (uint32_t)(v & (~v + 1)); /* lowest set bit */
}

/* Elements from the first to the last of a column-major stored (rows, cols)
 * matrix with leading dimension ld, over `batch` copies `stride` apart. */
static int64_t extent(int64_t rows, int64_t cols, int64_t ld, int batch, int64_t stride) {
    return (int64_t)(batch - 1) * stride + (cols - 1) * ld + rows;
}

static int batch_of(const st_matmul *p) { return p->batch > 1 ? p->batch : 1; }

/* The epilogue reads a bias or writes a bias gradient: the descriptor's
 * bias pointer, which ep_vector gives (NULL for the other epilogues). */
static bool ep_has_vector(int ep) {
    return st_matmul_ep_bias((st_matmul_epilogue)ep) || st_matmul_ep_bgrad((st_matmul_epilogue)ep);
}
static const void *ep_vector(const st_matmul *p) {
    return st_matmul_ep_bgrad(p->ep) ? p->bgrad : st_matmul_ep_bias(p->ep) ? p->bias : NULL;
}

static void make_key(plan_key *k, const st_matmul *p, cudaDataType_t ab, cudaDataType_t cd, const void *A,
                     const void *B) {
    memset(k, 0, sizeof *k);
    const int batch = batch_of(p);
    const int64_t es = ab == CUDA_R_32F ? 4 : 2, ed = cd == CUDA_R_32F ? 4 : 2;
    k->ab = (int32_t)ab;
    k->cd = (int32_t)cd;
    k->compute = (int32_t)(p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    k->ep = (int32_t)p->ep;
    k->ta = p->ta;
    k->tb = p->tb;
    k->batch = batch;
    k->m = p->m, k->n = p->n, k->k = p->k;
    k->lda = p->lda, k->ldb = p->ldb, k->ldd = p->ldd;
    if (batch > 1) k->sa = p->sa, k->sb = p->sb, k->sd = p->sd;
    k->al_a = align_bytes(A, p->ld_align ? p->lda : 0, k->sa, es);
    k->al_b = align_bytes(B, p->ld_align ? p->ldb : 0, k->sb, es);
    k->al_d = align_bytes(p->D, p->ld_align ? p->ldd : 0, k->sd, ed);
    k->c_apart = p->C != NULL;
    k->al_c = p->C ? align_bytes(p->C, p->ld_align ? p->ldd : 0, k->sd, ed) : k->al_d;
    k->al_bias = ep_has_vector(p->ep) ? align_bytes(ep_vector(p), 0, 0, ed) : 0;
    if (st_matmul_ep_aux(p->ep)) {
        k->al_aux = align_bytes(p->aux, 0, 0, ed);
        k->aux_ld = p->aux_ld;
    }
}

static cublasLtEpilogue_t lt_epilogue(int ep) {
    switch (ep) {
    case ST_MATMUL_EP_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case ST_MATMUL_EP_GELU_AUX:
        return CUBLASLT_EPILOGUE_GELU_AUX;
    case ST_MATMUL_EP_GELU_AUX_BIAS:
        return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case ST_MATMUL_EP_DGELU:
        return CUBLASLT_EPILOGUE_DGELU;
    case ST_MATMUL_EP_BGRADA:
        return CUBLASLT_EPILOGUE_BGRADA;
    case ST_MATMUL_EP_BGRADB:
        return CUBLASLT_EPILOGUE_BGRADB;
    default:
        return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* Layout of a column-major stored (rows, cols) matrix of type t. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                             int64_t ld, int batch, int64_t stride) {
    cublasStatus_t e = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (e != CUBLAS_STATUS_SUCCESS || batch <= 1) return e;
    int32_t bc = batch;
    e = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof stride);
    return e;
}

#define LT(call)                                                                                             \
    do {                                                                                                     \
        cublasStatus_t st_e_ = (call);                                                                       \
        if (st_e_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            s = st_cublas_fail(d, st_e_, #call, __FILE__, __LINE__);                                         \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* Make the descriptor and layouts for key k into pl and ask the heuristic
 * for an algorithm (pl->ok false when it has none). */
static st_status plan_make(st_device *d, const plan_key *k, const void *bias, const void *aux, plan *pl) {
    st_status s = ST_OK;
    cublasLtMatmulPreference_t pref = NULL;
    const cudaDataType_t ab = (cudaDataType_t)k->ab;
    const cublasOperation_t opa = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const uint64_t ws = d->lt_ws_bytes;
    memset(pl, 0, sizeof *pl);
    pl->key = *k;
    LT(cublasLtMatmulDescCreate(&pl->op, (cublasComputeType_t)k->compute, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (k->ep != ST_MATMUL_EP_NONE) {
        const cublasLtEpilogue_t ep = lt_epilogue(k->ep);
        LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    }
    if (ep_has_vector(k->ep))
        LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (st_matmul_ep_aux((st_matmul_epilogue)k->ep)) { /* the heuristic reads the pointer's alignment */
        LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                          sizeof aux));
        LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->aux_ld,
                                          sizeof k->aux_ld));
    }
    LT(layout(&pl->la, ab, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda, k->batch, k->sa));
    LT(layout(&pl->lb, ab, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb, k->batch, k->sb));
    LT(layout(&pl->ld, (cudaDataType_t)k->cd, k->m, k->n, k->ldd, k->batch, k->sd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al_a,
                                            sizeof k->al_a));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al_b,
                                            sizeof k->al_b));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->al_c,
                                            sizeof k->al_c));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al_d,
                                            sizeof k->al_d));
    for (size_t i = 0; d->lt_tune && i < d->plans->n_known; i++) { /* an earlier run's timing of this key */
        const known_algo *kn = &d->plans->known[i];
        if (memcmp(&kn->key, k, sizeof *k) != 0) continue;
        cublasLtMatmulHeuristicResult_t chk;
        memset(&chk, 0, sizeof chk);
        if (cublasLtMatmulAlgoCheck(d->lt, pl->op, pl->la, pl->lb, pl->ld, pl->ld, &kn->algo, &chk) ==
                CUBLAS_STATUS_SUCCESS &&
            chk.workspaceSize <= ws) { /* (else: timed again, as a new key) */
            pl->ok = pl->record = true;
            pl->algo = kn->algo;
            d->plans->restored++;
            goto fail;
        }
        break;
    }
    {
        /* no algorithm for this layout: NOT_SUPPORTED, or success with none found */
        cublasLtMatmulHeuristicResult_t h[TUNE_ALGOS];
        memset(h, 0, sizeof h);
        int found = 0;
        const cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(d->lt, pl->op, pl->la, pl->lb, pl->ld, pl->ld,
                                                                pref, d->lt_tune ? TUNE_ALGOS : 1, h, &found);
        if (e != CUBLAS_STATUS_NOT_SUPPORTED) LT(e);
        pl->ok = e == CUBLAS_STATUS_SUCCESS && found > 0;
        if (pl->ok) pl->algo = h[0].algo;
        int usable = 0; /* the first, then each the heuristic says it can run */
        for (int i = 0; pl->ok && i < found && i < TUNE_ALGOS; i++)
            if (i == 0 || h[i].state == CUBLAS_STATUS_SUCCESS) h[usable++] = h[i];
        /* (no host memory for the list: the first, untimed) */
        if (usable > 1 && (pl->cand = (cublasLtMatmulAlgo_t *)malloc((size_t)usable * sizeof *pl->cand))) {
            for (int i = 0; i < usable; i++)
                pl->cand[i] = h[i].algo;
            pl->n_cand = usable;
        }
    }
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (s != ST_OK || !pl->ok) plan_destroy(pl); /* a key without an algorithm keeps no object */
    return s;
}

/* The plan for key k: from the table, or made and added to it. */
static st_status plan_get(st_device *d, const plan_key *k, const void *bias, const void *aux, plan **out) {
    *out = NULL;
    if (d->plans && d->plans->cap) {
        plan *pl = find(d->plans->slot, d->plans->cap, k);
        if (pl->used) {
            d->plans->hits++;
            pl->calls++;
            *out = pl;
            return ST_OK;
        }
    }
    ST_TRY(reserve(d));
    plan made;
    ST_TRY(plan_make(d, k, bias, aux, &made));
    plan *pl = find(d->plans->slot, d->plans->cap, k);
    *pl = made;
    pl->used = true;
    pl->calls = 1;
    d->plans->n++;
    d->plans->misses++;
    *out = pl;
    return ST_OK;
}

static cublasStatus_t lt_run(st_device *d, const st_matmul *p, const plan *pl,
                             const cublasLtMatmulAlgo_t *algo, const void *pA, const void *pB) {
    return cublasLtMatmul(d->lt, pl->op, &p->alpha, pA, pl->la, pB, pl->lb, &p->beta, p->C ? p->C : p->D,
                          pl->ld, p->D, pl->ld, algo, d->lt_ws, d->lt_ws_bytes, d->compute);
}

/* The fastest of the heuristic's candidates for plan pl, on this product's
 * own operands (TUNE_ALGOS above): each run once, then timed
 * TUNE_REPS times between events on the compute stream, its best time
 * counted; one that cuBLASLt refuses when it runs is passed over. The runs
 * write D, the GELU input a GELU_AUX epilogue stores and the sums a
 * bias-gradient epilogue writes, all of which the product then writes
 * again; a D that the product reads (beta not 0, C none) is copied to the
 * host first and back after. Waits for the compute stream, once a plan. */
static st_status tune(st_device *d, const st_matmul *p, plan *pl, const void *pA, const void *pB) {
    cublasLtMatmulAlgo_t *cand = pl->cand;
    const int n = pl->n_cand;
    pl->cand = NULL;
    pl->n_cand = 0;
    const bool reads_d = p->beta != 0.0f && (!p->C || p->C == p->D);
    const size_t dbytes = reads_d ? (size_t)extent(p->m, p->n, p->ldd, batch_of(p), p->sd) *
                                        (p->d_store == ST_PREC_FP32 ? 4 : 2)
                                  : 0;
    void *saved = dbytes ? malloc(dbytes) : NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    st_status s = ST_OK;
    float first = INFINITY, best = INFINITY;
    int fastest = -1, kept = 0;
    if (dbytes && !saved) goto done; /* no host memory to keep D in: the heuristic's first, untimed */
#define TUNE_CUDA(call)                                                                                      \
    do {                                                                                                     \
        const cudaError_t te_ = (call);                                                                      \
        if (te_ != cudaSuccess) {                                                                            \
            s = st_cuda_fail(d, te_, #call, __FILE__, __LINE__);                                             \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)
    if (saved) {
        TUNE_CUDA(cudaMemcpyAsync(saved, p->D, dbytes, cudaMemcpyDeviceToHost, d->compute));
        TUNE_CUDA(st_cuda_stream_sync(d, d->compute));
    }
    TUNE_CUDA(cudaEventCreate(&ev[0]));
    TUNE_CUDA(cudaEventCreate(&ev[1]));
    for (int i = 0; i < n; i++) {
        if (lt_run(d, p, pl, &cand[i], pA, pB) != CUBLAS_STATUS_SUCCESS) continue;
        float t = INFINITY;
        for (int r = 0; r < TUNE_REPS; r++) {
            TUNE_CUDA(cudaEventRecord(ev[0], d->compute));
            const cublasStatus_t e = lt_run(d, p, pl, &cand[i], pA, pB);
            if (e != CUBLAS_STATUS_SUCCESS) {
                s = st_cublas_fail(d, e, "cublasLtMatmul (timing an algorithm)", __FILE__, __LINE__);
                goto done;
            }
            TUNE_CUDA(cudaEventRecord(ev[1], d->compute));
            TUNE_CUDA(st_cuda_stream_sync(d, d->compute));
            float ms = 0;
            TUNE_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
            if (ms < t) t = ms;
        }
        if (i == 0) first = t;
        if (t < best) best = t, fastest = i;
    }
    if (fastest > 0 && (!(first < INFINITY) || best < TUNE_MARGIN * first)) {
        pl->algo = cand[fastest];
        kept = fastest;
        d->plans->switched++;
    }
    if (first < INFINITY) { /* (the first refused: nothing to weigh the choice against) */
        pl->t_first = first;
        pl->t_chosen = kept ? best : first;
    }
    pl->record = true;
    d->plans->dirty = true;
    d->plans->tuned++;
    if (saved) {
        TUNE_CUDA(cudaMemcpyAsync(p->D, saved, dbytes, cudaMemcpyHostToDevice, d->compute));
        TUNE_CUDA(st_cuda_stream_sync(d, d->compute));
    }
#undef TUNE_CUDA
done:
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(saved);
    free(cand);
    if (s != ST_OK) /* (which product: a layer's, of its shape) */
        st_fail_context(s, "%s (m %lld, n %lld, k %lld), timing cuBLASLt's algorithms (model.matmul_tune): ",
                        p->what, (long long)p->m, (long long)p->n, (long long)p->k);
    return s;
}

/* Queue plan pl's product with A and B at pA, pB (of pl's type);
 * ST_ERR_UNSUPPORTED, with no error recorded, when cuBLASLt refuses the
 * algorithm after all (the plan is then marked as having none). */
static st_status lt_exec(st_device *d, const st_matmul *p, plan *pl, const void *pA, const void *pB) {
    if (ep_has_vector(p->ep)) {
        const void *v = ep_vector(p);
        ST_CUBLAS_TRY_D(
            d, cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &v, sizeof v));
    }
    if (st_matmul_ep_aux(p->ep))
        ST_CUBLAS_TRY_D(d, cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &p->aux, sizeof p->aux));
    if (pl->cand) ST_TRY(tune(d, p, pl, pA, pB));
    const cublasStatus_t e = lt_run(d, p, pl, &pl->algo, pA, pB);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED) {
        plan_destroy(pl);
        pl->ok = false;
        return ST_ERR_UNSUPPORTED;
    }
    if (e != CUBLAS_STATUS_SUCCESS) { /* (named by the product: "e failed" said nothing) */
        char what[160];
        snprintf(what, sizeof what, "cublasLtMatmul (%s)", p->what ? p->what : "a matrix product");
        return st_cublas_fail(d, e, what, __FILE__, __LINE__);
    }
    return ST_OK;
}

/* D[b] = alpha op(A[b]) op(B[b]) + beta C[b], column-major, beta 0 never reads C
 * (D itself unless p.C); each of A, B, D in its storage, C in D's. */
static __global__ void fallback_kernel(st_matmul p, int batch) {
    const int64_t total = (int64_t)batch * p.m * p.n;
    const st_fbuf A = {(void *)p.A, p.a_store}, B = {(void *)p.B, p.b_store}, D = {p.D, p.d_store},
                  C = {p.C ? (void *)p.C : p.D, p.d_store};
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t % p.m, j = (t / p.m) % p.n, b = t / (p.m * p.n);
        const int64_t a0 = b * p.sa, b0 = b * p.sb;
        float sum = 0.0f;
        for (int64_t l = 0; l < p.k; l++) {
            const float av = st_ld(A, a0 + (p.ta ? i * p.lda + l : l * p.lda + i));
            const float bv = st_ld(B, b0 + (p.tb ? l * p.ldb + j : j * p.ldb + l));
            sum = fmaf(av, bv, sum);
        }
        const int64_t at = b * p.sd + j * p.ldd + i;
        st_st(D, at, p.beta != 0.0f ? p.alpha * sum + p.beta * st_ld(C, at) : p.alpha * sum);
    }
}

st_status st_cuda_matmul(st_device *d, const st_matmul *p) {
    if (p->m <= 0 || p->n <= 0) return ST_OK;
    if (p->k <= 0)
        return st_fail(ST_ERR_INTERNAL, "%s: matrix product with k = %lld", p->what, (long long)p->k);
    if (p->ep != ST_MATMUL_EP_NONE &&
        (p->batch > 1 || (ep_has_vector(p->ep) && !ep_vector(p)) ||
         (st_matmul_ep_aux(p->ep) && (!p->aux || p->aux_ld < p->m || p->aux_ld % 8 != 0)) ||
         (p->ep == ST_MATMUL_EP_DGELU && p->beta != 0.0f)))
        return st_fail(ST_ERR_INTERNAL,
                       "%s: an epilogue needs one product, its bias or bias gradient, its GELU input "
                       "(leading dimension a multiple of 8, at least m) and, for DGELU, beta 0",
                       p->what);
    const int batch = batch_of(p);
    st_status s;
    plan_key k;
    plan *pl;
    const bool stored16 = p->a_store != ST_PREC_FP32 || p->b_store != ST_PREC_FP32 || p->d_store != ST_PREC_FP32;
    const bool ops16 = p->operands == ST_PREC_BF16 || p->operands == ST_PREC_FP16;
    if (stored16 && (!ops16 || (p->a_store != ST_PREC_FP32 && p->a_store != p->operands) ||
                     (p->b_store != ST_PREC_FP32 && p->b_store != p->operands) ||
                     (p->d_store != ST_PREC_FP32 && p->d_store != p->operands)))
        return st_fail(ST_ERR_INTERNAL, "%s: an operand stored in 16 bits of another precision than the product's",
                       p->what);
    if (ops16) {
        /* A and B stored as floats get 16-bit copies (exact: they hold 16-bit
         * values) in the scratch, B's at the next 256-byte boundary after A's */
        const bool cva = p->a_store == ST_PREC_FP32, cvb = p->b_store == ST_PREC_FP32;
        const int64_t na = extent(p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda, batch, p->sa);
        const int64_t nb = extent(p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb, batch, p->sb);
        const size_t off = cva ? ((size_t)na * 2 + 255) / 256 * 256 : 0, total = off + (cvb ? (size_t)nb * 2 : 0);
        const cudaDataType_t t16 = p->operands == ST_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        void *ws = NULL;
        if (total) ST_TRY(st_cuda_scratch(d, total, &ws));
        const void *pa = cva ? ws : p->A, *pb = cvb ? (const void *)((char *)ws + off) : p->B;
        make_key(&k, p, t16, p->d_store == ST_PREC_FP32 ? CUDA_R_32F : t16, pa, pb);
        ST_TRY(plan_get(d, &k, ep_vector(p), p->aux, &pl));
        if (pl->ok) { /* converted only when a 16-bit algorithm will read the copies */
            if (cva) ST_TRY(st_cuda_to_16(d, p->operands, (void *)pa, (const float *)p->A, na));
            if (cvb) ST_TRY(st_cuda_to_16(d, p->operands, (void *)pb, (const float *)p->B, nb));
            s = lt_exec(d, p, pl, pa, pb);
            if (s != ST_ERR_UNSUPPORTED) return s;
        }
    }
    if (!stored16) {
        make_key(&k, p, CUDA_R_32F, CUDA_R_32F, p->A, p->B);
        ST_TRY(plan_get(d, &k, ep_vector(p), p->aux, &pl));
        if (pl->ok) {
            s = lt_exec(d, p, pl, p->A, p->B);
            if (s != ST_ERR_UNSUPPORTED) return s;
        }
    }
    if (p->ep != ST_MATMUL_EP_NONE)
        return st_fail(
            ST_ERR_UNSUPPORTED,
            "%s: cuBLASLt offers no algorithm with the %s epilogue for this product (m %lld, n %lld, "
            "k %lld) on %s",
            p->what,
            p->ep == ST_MATMUL_EP_BIAS    ? "bias"
            : p->ep == ST_MATMUL_EP_DGELU ? "DGELU"
            : st_matmul_ep_bgrad(p->ep)   ? "bias gradient"
                                          : "GELU_AUX",
            (long long)p->m, (long long)p->n, (long long)p->k, d->name);
    fallback_kernel<<<st_cuda_blocks((int64_t)batch * p->m * p->n, FALLBACK_THREADS), FALLBACK_THREADS, 0,
                      d->compute>>>(*p, batch);
    ST_CUDA_TRY_D(d, cudaGetLastError());
    return ST_OK;
}
