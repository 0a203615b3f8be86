/* 16-bit float sums over the communicator (ST_COMM_BF16 / ST_COMM_F16, the
 * user-defined MPI sums in comm_mpi.c), run on 2 ranks by
 * tests/e2e/precision_grad_dtype.sh: rank r holds 16-bit values h_r[i]; the
 * all-reduced value must be round16(float(h_0[i]) + float(h_1[i])) bit for
 * bit (one fp32 addition, one rounding), including fp16 sums that overflow to
 * Inf and subnormals; every non-sum reduction of 16-bit values is refused.
 * Usage: mpirun -n 2 half_sum_check. */
#include <stdint.h>

#include "../check.h"
#include "comm/comm.h"
#include "core/half.h"

static float value(int rank, int64_t i) {
    const float base = (float)((i * 2654435761u) % 20001) / 1000.0f - 10.0f; /* [-10, 10] */
    if (i % 97 == 0) return 40000.0f;                  /* two ranks' sum overflows fp16 */
    if (i % 89 == 0) return 3e-6f * (float)(rank + 1); /* fp16 subnormals */
    return base * (rank ? 1.37f : 1.0f) + (float)rank * 0.001f;
}

int main(void) {
    st_comm_config cc = ST_COMM_CONFIG_INIT;
    cc.backend = ST_COMM_MPI;
    cc.timeout_s = 30;
    st_comm *comm = NULL;
    CHECK_OK(st_comm_init(&cc, &comm));
    if (!comm) return 1;
    const int rank = st_comm_rank(comm), world = st_comm_size(comm);
    if (world != 2) {
        fprintf(stderr, "half_sum_check: run on 2 ranks (exact expectations), not %d\n", world);
        st_comm_free(comm);
        return 2;
    }
    const int64_t n = 100003;
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int p = ST_PREC_BF16; p <= ST_PREC_FP16; p++) {
        const st_precision prec = (st_precision)p;
        const st_comm_dtype dt = prec == ST_PREC_BF16 ? ST_COMM_BF16 : ST_COMM_F16;
        for (int64_t i = 0; i < n; i++) {
            const float v = value(rank, i);
            h[i] = prec == ST_PREC_BF16 ? st_f32_to_bf16(v) : st_f32_to_f16(v);
        }
        CHECK_OK(st_comm_all_reduce_sync(comm, h, h, (size_t)n, dt, ST_COMM_SUM, "16-bit sum"));
        int64_t bad = 0, infs = 0;
        for (int64_t i = 0; i < n; i++) {
            const float a = value(0, i), b = value(1, i);
            const uint16_t want = prec == ST_PREC_BF16 ? st_f32_to_bf16(st_round_bf16(a) + st_round_bf16(b))
                                                       : st_f32_to_f16(st_round_f16(a) + st_round_f16(b));
            if (h[i] != want) {
                if (bad < 5)
                    fprintf(stderr, "rank %d %s [%lld]: 0x%04x, want 0x%04x\n", rank,
                            prec == ST_PREC_BF16 ? "bf16" : "fp16", (long long)i, h[i], want);
                bad++;
            }
            infs += prec == ST_PREC_FP16 && (h[i] & 0x7fff) == 0x7c00;
        }
        CHECK(bad == 0, "rank %d: %lld of %lld 16-bit sums differ", rank, (long long)bad, (long long)n);
        if (prec == ST_PREC_FP16) CHECK(infs > 0, "the fp16 case has no overflow to Inf");
    }
    free(h);
    st_comm_req *req = NULL;
    uint16_t one = 0x3f80;
    CHECK_FAILS(st_comm_all_reduce(comm, &one, &one, 1, ST_COMM_BF16, ST_COMM_MAX, "bf16 max", &req),
                ST_ERR_ARG, "support only sum");
    printf("rank %d: 16-bit sums ok\n", rank);
    st_comm_free(comm);
    return st_test_failures ? 1 : 0;
}
