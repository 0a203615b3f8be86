/* The shared-memory all-reduce (src/comm/comm_shm.c) on 2-4 ranks, run by
 * tests/e2e/comm_shm.sh under mpirun. Two communicators side by side: `shm`
 * sends every float32 sum/avg all-reduce through the segment (threshold 4
 * bytes), `mpi` never does. Each rank's data are pseudo-random floats of
 * mixed magnitudes, so the order of the additions shows in the bits.
 *
 * Checked: the result is, bit for bit, ((x0 + x1) + x2) + ... in rank order
 * as each rank computes it on its own (so every rank has the same bits), and
 * with 2 ranks equal to MPI's; sums and averages, in and out of place; odd
 * counts, counts not divisible by the ranks, counts larger than the whole
 * segment (run with SCALETRAIN_SHM_PIECE_BYTES=4096 for many small pieces);
 * many collectives in flight, MPI ones among them, waited for out of order;
 * that the segment is really mapped, by the first communicator only
 * (/proc/self/maps); and the zero-copy path (test_zero_copy).
 * Usage: shm_check [MAX_COUNT] (the counts up to MAX_COUNT only). */
#include <stdint.h>
#include <unistd.h>

#include "../check.h"
#include "comm/comm.h"

static int R, N;

/* Rank r's element i: a float in +-[2^-12, 2^12) from a hash of (r, i, salt). */
static float val(int r, size_t i, unsigned salt) {
    uint64_t h = ((uint64_t)r * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xC2B2AE3D27D4EB4Full) ^ salt;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    float m = (float)(h & 0xFFFFFF) / 16777216.0f + 0.5f;
    int e = (int)((h >> 24) % 25) - 12;
    return (h >> 60 & 1 ? -m : m) * ldexpf(1.0f, e);
}

/* The sum in rank order, in float. */
static float want_sum(size_t i, unsigned salt) {
    float s = val(0, i, salt);
    for (int r = 1; r < N; r++)
        s += val(r, i, salt);
    return s;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Mappings of a shared-memory all-reduce segment in this process. */
static int segments_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "/dev/shm/scaletrain-allreduce") != NULL;
    fclose(f);
    return n;
}

/* One count through both communicators, sum out of place and avg in place. */
static void test_count(st_comm *shm, st_comm *mpi, size_t n) {
    unsigned salt = (unsigned)n;
    float *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y),
          *z = malloc((n + 1) * sizeof *z);
    for (size_t i = 0; i < n; i++)
        x[i] = val(R, i, salt);
    y[n] = z[n] = x[n] = -7.0f;
    CHECK_OK(st_comm_all_reduce_sync(shm, x, y, n, ST_COMM_F32, ST_COMM_SUM, "shm sum"));
    CHECK_OK(st_comm_all_reduce_sync(mpi, x, z, n, ST_COMM_F32, ST_COMM_SUM, "mpi sum"));
    size_t bad = 0, differ_mpi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!same_bits(y[i], want_sum(i, salt)) && bad++ == 0)
            CHECK(0, "n %zu: shm sum[%zu] = %.9g, want %.9g (rank order)", n, i, y[i], want_sum(i, salt));
        differ_mpi += !same_bits(y[i], z[i]);
    }
    CHECK(bad == 0, "n %zu: %zu element(s) of the shm sum differ from the rank-order sum", n, bad);
    if (N == 2)
        CHECK(differ_mpi == 0, "n %zu: %zu element(s) of the shm sum differ from MPI's", n, differ_mpi);
    if (R == 0 && N > 2 && differ_mpi)
        printf("n %zu: %zu of %zu elements differ from MPI's sum (MPI adds in its own order)\n", n,
               differ_mpi, n);
    CHECK(x[n] == -7.0f && y[n] == -7.0f, "n %zu: wrote past the end", n);
    for (size_t i = 0; i < n; i++)
        if (!same_bits(x[i], val(R, i, salt))) {
            CHECK(0, "n %zu: the send buffer changed at %zu", n, i);
            break;
        }
    /* Average, in place: the rank-order sum divided by N. */
    CHECK_OK(st_comm_all_reduce_sync(shm, x, x, n, ST_COMM_F32, ST_COMM_AVG, "shm avg"));
    bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(x[i], want_sum(i, salt) / (float)N) && bad++ == 0)
            CHECK(0, "n %zu: shm avg[%zu] = %.9g, want %.9g", n, i, x[i], want_sum(i, salt) / (float)N);
    CHECK(x[n] == -7.0f, "n %zu: avg wrote past the end", n);
    free(x);
    free(y);
    free(z);
}

/* K collectives in flight, shared-memory and MPI ones mixed, waited for in a
 * scrambled order (and one polled with st_comm_test). */
static void test_in_flight(st_comm *c) {
    enum { K = 12 };
    const size_t counts[K] = {5000, 1, 70001, 3, 4096, 1u << 18, 33, 100000, 2, 65536, 999, 4097};
    float *b[K];
    int64_t ints[K][4];
    st_comm_req *r[K];
    for (int k = 0; k < K; k++) {
        b[k] = malloc(counts[k] * sizeof(float));
        for (size_t i = 0; i < counts[k]; i++)
            b[k][i] = val(R, i, 1000u + (unsigned)k);
        char name[32];
        snprintf(name, sizeof name, "in flight %d", k);
        if (k % 4 == 3) { /* int64: always MPI */
            for (int i = 0; i < 4; i++)
                ints[k][i] = R + i;
            CHECK_OK(st_comm_all_reduce(c, ints[k], ints[k], 4, ST_COMM_I64, ST_COMM_SUM, name, &r[k]));
        } else {
            CHECK_OK(st_comm_all_reduce(c, b[k], b[k], counts[k], ST_COMM_F32, ST_COMM_SUM, name, &r[k]));
        }
    }
    bool done = false;
    for (int spins = 0; !done && spins < 100000000; spins++)
        CHECK_OK(st_comm_test(&r[K / 2], &done));
    CHECK(done, "request %d never finished under st_comm_test", K / 2);
    for (int j = 0; j < K; j++)
        CHECK_OK(st_comm_wait(&r[(j * 5 + 7) % K]));
    for (int k = 0; k < K; k++) {
        if (k % 4 == 3) {
            for (int i = 0; i < 4; i++)
                CHECK(ints[k][i] == (int64_t)N * (N - 1) / 2 + (int64_t)N * i, "int64 %d[%d] = %lld", k, i,
                      (long long)ints[k][i]);
        } else {
            for (size_t i = 0; i < counts[k]; i++)
                if (!same_bits(b[k][i], want_sum(i, 1000u + (unsigned)k))) {
                    CHECK(0, "in flight %d [%zu] = %.9g, want %.9g", k, i, b[k][i],
                          want_sum(i, 1000u + (unsigned)k));
                    break;
                }
        }
        free(b[k]);
    }
}

/* The zero-copy path (st_comm_shared_arena): in-place all-reduces of ranges
 * of the shared arena, several in flight with copying ones among them, give
 * the same bits as the copying path on the same data (and the rank-order
 * sum), touch nothing outside their range, and leave the arena to the next. */
static void test_zero_copy(st_comm *shm, st_comm *mpi, size_t max_count) {
    const size_t cap = (3u << 20) + 409600; /* floats: the last range starts at 409600 */
    float *a = NULL;
    CHECK_OK(st_comm_shared_arena(shm, cap * sizeof(float), (void **)&a));
    CHECK(a != NULL, "rank %d: no zero-copy arena from the shm communicator", R);
    void *none = (void *)1;
    CHECK_OK(st_comm_shared_arena(mpi, cap * sizeof(float), &none));
    CHECK(none == NULL, "rank %d: a zero-copy arena with the shared-memory all-reduce off", R);
    if (!a) return;
    CHECK(((uintptr_t)a & 63) == 0, "the arena is not 64-byte aligned");
    size_t nonzero = 0;
    for (size_t i = 0; i < cap; i++)
        nonzero += a[i] != 0.0f;
    CHECK(nonzero == 0, "rank %d: %zu arena element(s) are not zero", R, nonzero);
    /* (offset, count, op) in flight at once; offsets 16-float aligned like
     * gradient buckets, the last ranges up to the arena's end. */
    enum { K = 6 };
    const size_t off[K] = {0, 4112, 70016, 140032, 400000, cap - (3u << 20)};
    const size_t cnt[K] = {4097, 65537, 7, 16, 1001, 3u << 20};
    const st_comm_redop op[K] = {ST_COMM_SUM, ST_COMM_AVG, ST_COMM_SUM, ST_COMM_AVG, ST_COMM_SUM, ST_COMM_AVG};
    float *ref[K];
    st_comm_req *r[K], *rc[K];
    for (size_t i = 0; i < cap; i++)
        a[i] = -5.0f; /* the guard between the ranges */
    int k_max = K;
    while (k_max > 0 && cnt[k_max - 1] > max_count)
        k_max--;
    for (int k = 0; k < k_max; k++) {
        ref[k] = malloc(cnt[k] * sizeof(float));
        for (size_t i = 0; i < cnt[k]; i++)
            a[off[k] + i] = ref[k][i] = val(R, i, 2000u + (unsigned)k);
    }
    for (int k = 0; k < k_max; k++) {
        char name[32];
        snprintf(name, sizeof name, "zero-copy %d", k);
        CHECK_OK(st_comm_all_reduce(shm, a + off[k], a + off[k], cnt[k], ST_COMM_F32, op[k], name, &r[k]));
        snprintf(name, sizeof name, "copying %d", k); /* the same data through the copying path */
        CHECK_OK(st_comm_all_reduce(shm, ref[k], ref[k], cnt[k], ST_COMM_F32, op[k], name, &rc[k]));
    }
    for (int j = 0; j < k_max; j++) {
        CHECK_OK(st_comm_wait(&rc[(j * 7 + 1) % k_max])); /* 7: prime to k_max, each once */
        CHECK_OK(st_comm_wait(&r[(j * 7 + 3) % k_max]));
    }
    size_t guard = 0;
    for (int k = 0; k < k_max; k++) {
        size_t bad = 0, bad_ref = 0;
        for (size_t i = 0; i < cnt[k]; i++) {
            float want = want_sum(i, 2000u + (unsigned)k);
            if (op[k] == ST_COMM_AVG) want /= (float)N;
            bad += !same_bits(a[off[k] + i], ref[k][i]);
            bad_ref += !same_bits(ref[k][i], want);
        }
        CHECK(bad == 0, "zero-copy %d (%zu floats): %zu element(s) differ from the copying path's bits", k, cnt[k],
              bad);
        CHECK(bad_ref == 0, "zero-copy %d (%zu floats): %zu element(s) of the two paths differ from the rank-order "
              "sum", k, cnt[k], bad_ref);
        const size_t end = k + 1 < k_max ? off[k + 1] : cap;
        for (size_t i = off[k] + cnt[k]; i < end; i++)
            guard += a[i] != -5.0f;
        free(ref[k]);
    }
    CHECK(guard == 0, "rank %d: the zero-copy all-reduces wrote %zu float(s) outside their ranges", R, guard);
    /* Reused at once, like gradients step after step. */
    for (int rep = 0; rep < 3; rep++) {
        for (size_t i = 0; i < 70001; i++)
            a[i] = val(R, i, 3000u + (unsigned)rep);
        CHECK_OK(st_comm_all_reduce_sync(shm, a, a, 70001, ST_COMM_F32, ST_COMM_SUM, "zero-copy again"));
        size_t bad = 0;
        for (size_t i = 0; i < 70001; i++)
            bad += !same_bits(a[i], want_sum(i, 3000u + (unsigned)rep));
        CHECK(bad == 0, "zero-copy reuse %d: %zu element(s) wrong", rep, bad);
    }
    int maps = segments_mapped();
    CHECK(maps == 2, "rank %d: %d segments mapped with the arena, want 2", R, maps);
}

int main(int argc, char **argv) {
    size_t max_count = argc > 1 ? strtoull(argv[1], NULL, 10) : SIZE_MAX; /* leave out larger counts */
    st_comm_config cs = ST_COMM_CONFIG_INIT, cm = ST_COMM_CONFIG_INIT;
    cs.timeout_s = cm.timeout_s = 60;
    cs.backend = cm.backend = ST_COMM_MPI;
    cs.shm_min_bytes = 4;
    cm.shm_min_bytes = 0;
    st_comm *shm = NULL, *mpi = NULL;
    if (st_comm_init(&cs, &shm) != ST_OK || st_comm_init(&cm, &mpi) != ST_OK) {
        fprintf(stderr, "shm_check: %s\n", st_last_error());
        return 1;
    }
    R = st_comm_rank(shm);
    N = st_comm_size(shm);
    if (N < 2) {
        printf("skipped: needs mpirun with 2 or more ranks\n");
        st_comm_free(mpi);
        st_comm_free(shm);
        return 77;
    }
    int maps = segments_mapped();
    CHECK(maps == 1, "rank %d: %d /dev/shm/scaletrain-allreduce segments are mapped, want 1 (the shm "
          "communicator's)", R, maps);
    const size_t counts[] = {1,       2, 7, 15, 16, 17, 1000, 1001, 4095, 4096, 4097, 65537, (1u << 20) + 3,
                             3u << 20};
    for (size_t t = 0; t < sizeof counts / sizeof counts[0] && counts[t] <= max_count; t++)
        test_count(shm, mpi, counts[t]);
    test_in_flight(shm);
    test_zero_copy(shm, mpi, max_count);
    CHECK_OK(st_comm_barrier_sync(shm, "end"));
    st_comm_free(mpi); /* the second one first: the first initialized MPI */
    st_comm_free(shm);
    if (st_test_failures) {
        fprintf(stderr, "shm_check: rank %d: %d check(s) failed\n", R, st_test_failures);
        return 1;
    }
    if (R == 0) printf("shm_check: ok (%d ranks)\n", N);
    return 0;
}
