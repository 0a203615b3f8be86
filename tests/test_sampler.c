/* The distributed sampler: for world sizes 1..8 and uneven dataset sizes, the
 * ranks' parts are disjoint and cover the epoch (drop_last) or cover it with
 * the wrapped tail read twice (wrap); every rank runs the same number of
 * steps; the same seed gives the same permutation on every rank; a new epoch
 * reshuffles; N ranks with micro-batch b read exactly what 1 rank with batch
 * N*b reads; a saved position resumes exactly; bad options are errors. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/dataset.h"
#include "data/sampler.h"

static st_sampler *make(int64_t n, int64_t batch, int64_t mb, int rank, int world, uint64_t seed,
                        bool drop_last) {
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    o.n = n;
    o.batch_size = batch;
    o.micro_batch = mb;
    o.rank = rank;
    o.world = world;
    o.seed = seed;
    o.drop_last = drop_last;
    o.name = "synthetic";
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_init(&o, &s));
    return s;
}

/* Every rank samples one epoch independently: parts are disjoint (by epoch
 * position), every rank runs the same steps, and together they read the
 * permutation's first steps*B positions (mod n). */
static void partition(int world, int64_t mb, int64_t accum, int64_t n, bool drop_last) {
    const int64_t B = (int64_t)world * mb * accum;
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    int64_t *seen = calloc((size_t)n, sizeof *seen);
    int64_t *idx = malloc((size_t)mb * sizeof *idx);
    st_epoch_order(n, 7, 0, 1, perm);
    const int64_t steps = drop_last ? n / B : (n + B - 1) / B;
    for (int r = 0; r < world; r++) {
        st_sampler *s = make(n, B, mb, r, world, 7, drop_last);
        if (!s) continue;
        CHECK(st_sampler_steps_per_epoch(s) == steps && st_sampler_accum(s) == accum,
              "world %d rank %d: %lld steps of %lld micro-steps, expected %lld of %lld", world, r,
              (long long)st_sampler_steps_per_epoch(s), (long long)st_sampler_accum(s), (long long)steps,
              (long long)accum);
        for (int64_t t = 0; t < steps * accum; t++) {
            st_sampler_pos at;
            st_sampler_next(s, idx, &at);
            CHECK(at.epoch == 0 && at.step == t / accum && at.micro == t % accum,
                  "position of micro-batch %lld", (long long)t);
            for (int64_t j = 0; j < mb; j++)
                seen[idx[j]]++;
        }
        st_sampler_pos p = st_sampler_tell(s);
        CHECK(p.epoch == 1 && p.step == 0 && p.micro == 0, "after one epoch: epoch %lld step %lld",
              (long long)p.epoch, (long long)p.step);
        st_sampler_free(s);
    }
    /* expected multiplicity: how often E[i] = perm[i mod n] names each sample */
    int64_t bad = 0, total = 0;
    int64_t *want = calloc((size_t)n, sizeof *want);
    for (int64_t i = 0; i < steps * B; i++)
        want[perm[i % n]]++;
    for (int64_t i = 0; i < n; i++) {
        bad += seen[i] != want[i];
        total += seen[i];
        if (!drop_last) bad += seen[i] < 1; /* wrap covers everything */
        bad += seen[i] > (drop_last ? 1 : 2);
    }
    CHECK(bad == 0 && total == steps * B,
          "world %d mb %lld accum %lld n %lld %s: %lld samples wrong, %lld read", world, (long long)mb,
          (long long)accum, (long long)n, drop_last ? "drop_last" : "wrap", (long long)bad, (long long)total);
    free(want);
    free(perm);
    free(seen);
    free(idx);
}

/* DESIGN invariant 1: in every step, rank r's micro-step k is micro-batch
 * j = r*accum + k of 1 rank accumulating world*accum micro-batches, and the
 * j-th slice of 1 rank's whole batch. */
static void mapping(int world, int64_t mb, int64_t accum, int64_t n, bool drop_last) {
    const int64_t B = (int64_t)world * mb * accum;
    st_sampler *one_acc = make(n, B, mb, 0, 1, 3, drop_last); /* 1 rank, micro-batch mb */
    st_sampler *one_big = make(n, B, B, 0, 1, 3, drop_last);  /* 1 rank, one micro-batch of B */
    st_sampler **ranks = calloc((size_t)world, sizeof *ranks);
    for (int r = 0; r < world; r++)
        ranks[r] = make(n, B, mb, r, world, 3, drop_last);
    int64_t *big = malloc((size_t)B * sizeof *big), *a = malloc((size_t)mb * sizeof *a),
            *b = malloc((size_t)mb * sizeof *b);
    int bad = 0;
    for (int64_t step = 0; one_acc && one_big && step < 2 * st_sampler_steps_per_epoch(one_big) + 1; step++) {
        st_sampler_next(one_big, big, NULL); /* crosses into epoch 2: the mapping holds in every epoch */
        for (int r = 0; r < world; r++)
            for (int64_t k = 0; k < accum; k++) {
                if (!ranks[r]) continue;
                st_sampler_next(ranks[r], a, NULL);
                st_sampler_next(one_acc, b, NULL);
                bad += memcmp(a, b, (size_t)mb * sizeof *a) != 0;
                bad += memcmp(a, big + (r * accum + k) * mb, (size_t)mb * sizeof *a) != 0;
            }
    }
    CHECK(bad == 0, "world %d mb %lld accum %lld n %lld: %d micro-batches differ from 1 rank's", world,
          (long long)mb, (long long)accum, (long long)n, bad);
    for (int r = 0; r < world; r++)
        st_sampler_free(ranks[r]);
    free(ranks);
    st_sampler_free(one_acc);
    st_sampler_free(one_big);
    free(big);
    free(a);
    free(b);
}

/* One rank with drop_last reads what train.c's loop read before the sampler:
 * order + pos, pos += mb, a new epoch when a whole batch no longer fits. */
static void matches_step_loop(void) {
    const int64_t n = 101, B = 12, mb = 4;
    st_sampler *s = make(n, B, mb, 0, 1, 11, true);
    int64_t order[101], idx[4], epoch = 0, pos = 0;
    st_epoch_order(n, 11, epoch, 1, order);
    int bad = 0;
    for (int64_t step = 0; s && step < 40; step++) {
        if (pos + B > n) {
            epoch++;
            pos = 0;
            st_epoch_order(n, 11, epoch, 1, order);
        }
        for (int64_t k = 0; k < B / mb; k++, pos += mb) {
            st_sampler_next(s, idx, NULL);
            bad += memcmp(idx, order + pos, sizeof idx) != 0;
        }
    }
    CHECK(bad == 0, "%d micro-batches differ from the step loop's order", bad);
    st_sampler_free(s);
}

static void epochs_and_seeds(void) {
    /* epochs x steps per epoch: a whole number missed only in binary is that number (1.08 x 1875 gave
     * 2026, 0.07 x 100 gave 8, 1.1 x 100 gave 111), a fraction rounds up */
    CHECK(st_steps_of_epochs(1.08, 60000, 32, true) == 2025, "1.08 epochs of 1875: %lld",
          (long long)st_steps_of_epochs(1.08, 60000, 32, true));
    CHECK(st_steps_of_epochs(0.07, 100, 1, false) == 7 && st_steps_of_epochs(1.1, 100, 1, false) == 110,
          "0.07 and 1.1 epochs of 100: %lld, %lld", (long long)st_steps_of_epochs(0.07, 100, 1, false),
          (long long)st_steps_of_epochs(1.1, 100, 1, false));
    CHECK(st_steps_of_epochs(0.071, 100, 1, false) == 8 && st_steps_of_epochs(0.001, 100, 1, false) == 1,
          "a fraction of a step rounds up");
    const int64_t n = 50;
    int64_t a[50], b[50], c[50];
    st_sampler *s = make(n, 50, 50, 0, 1, 5, true), *t = make(n, 50, 50, 0, 1, 5, true),
               *u = make(n, 50, 50, 0, 1, 6, true);
    if (!s || !t || !u) return;
    st_sampler_next(s, a, NULL);
    st_sampler_next(s, b, NULL); /* epoch 1 */
    st_sampler_next(t, c, NULL);
    CHECK(memcmp(a, c, sizeof a) == 0, "the same seed gives another order");
    CHECK(memcmp(a, b, sizeof a) != 0, "a new epoch does not reshuffle");
    st_sampler_next(u, c, NULL);
    CHECK(memcmp(a, c, sizeof a) != 0, "another seed gives the same order");
    int64_t sum = 0;
    for (int i = 0; i < 50; i++)
        sum += b[i];
    CHECK(sum == 49 * 50 / 2, "epoch 1 is not a permutation");
    st_sampler_free(s);
    st_sampler_free(t);
    st_sampler_free(u);
    /* no shuffle: the identity, every epoch */
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    o.n = 10, o.batch_size = 4, o.micro_batch = 2, o.shuffle = false, o.drop_last = false;
    CHECK_OK(st_sampler_init(&o, &s));
    if (!s) return;
    const int64_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 0, 1, 2, 3};
    int bad = 0;
    for (int k = 0; k < 8; k++) {
        st_sampler_next(s, a, NULL);
        bad += a[0] != want[2 * k] || a[1] != want[2 * k + 1];
    }
    CHECK(bad == 0, "unshuffled wrap order");
    st_sampler_free(s);
}

/* Take some micro-batches, save the position, and continue in a new sampler
 * (a resumed run); it must read what the first one goes on to read. */
static void resume(int world, int rank, bool drop_last) {
    const int64_t n = 97, mb = 3, B = (int64_t)world * mb * 2;
    st_sampler *s = make(n, B, mb, rank, world, 9, drop_last), *t = make(n, B, mb, rank, world, 9, drop_last);
    if (!s || !t) return;
    const int64_t total = 3 * st_sampler_steps_per_epoch(s) * 2, cut = total / 2 + 1;
    int64_t a[3], b[3];
    for (int64_t k = 0; k < cut; k++)
        st_sampler_next(s, a, NULL);
    st_sampler_pos p = st_sampler_tell(s);
    CHECK_OK(st_sampler_seek(t, p));
    int bad = 0;
    for (int64_t k = cut; k < total; k++) {
        st_sampler_pos pa, pb;
        st_sampler_next(s, a, &pa);
        st_sampler_next(t, b, &pb);
        bad +=
            memcmp(a, b, sizeof a) != 0 || pa.epoch != pb.epoch || pa.step != pb.step || pa.micro != pb.micro;
    }
    CHECK(bad == 0,
          "world %d rank %d: %d micro-batches differ after resuming at epoch %lld step %lld micro %lld",
          world, rank, bad, (long long)p.epoch, (long long)p.step, (long long)p.micro);
    /* st_sampler_indices reads any position without moving */
    st_sampler_pos q = {1, st_sampler_steps_per_epoch(s) - 1, 1};
    CHECK_OK(st_sampler_seek(t, q));
    st_sampler_pos before = st_sampler_tell(s);
    CHECK_OK(st_sampler_indices(s, rank, q, a));
    st_sampler_next(t, b, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0, "st_sampler_indices disagrees with seek + next");
    CHECK(st_sampler_tell(s).step == before.step && st_sampler_tell(s).epoch == before.epoch,
          "st_sampler_indices moved the sampler");
    st_sampler_pos bad_pos[] = {{-1, 0, 0}, {0, st_sampler_steps_per_epoch(s), 0}, {0, 0, 2}, {0, -1, 0}};
    for (int i = 0; i < 4; i++)
        CHECK_FAILS(st_sampler_seek(t, bad_pos[i]), ST_ERR_ARG, "outside an epoch");
    CHECK_FAILS(st_sampler_indices(s, world, q, a), ST_ERR_ARG, "no micro-batch");
    st_sampler_free(s);
    st_sampler_free(t);
}

static void errors(void) {
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    st_sampler *s = (st_sampler *)&o;
    o.n = 0, o.batch_size = 4, o.micro_batch = 2, o.name = "empty.npy";
    CHECK_FAILS(st_sampler_init(&o, &s), ST_ERR_FORMAT, "empty.npy: the dataset is empty");
    CHECK(s == NULL, "*out is not NULL after a failure");
    o.n = 7, o.batch_size = 8, o.micro_batch = 2, o.world = 2, o.name = "small.idx";
    CHECK_FAILS(st_sampler_init(&o, &s), ST_ERR_CONFIG,
                "small.idx has 7 samples, fewer than one global batch of 8");
    /* without drop_last, a batch larger than the data repeats its samples:
     * 3 samples fill a batch of 8 as 3 + 3 + 2, on every step */
    o.n = 3, o.drop_last = false;
    CHECK_OK(st_sampler_init(&o, &s));
    if (s) {
        CHECK(st_sampler_steps_per_epoch(s) == 1, "3 samples, batch 8: %lld steps an epoch",
              (long long)st_sampler_steps_per_epoch(s));
        for (int step = 0; step < 2; step++) {
            int64_t seen[3] = {0}, idx[2];
            bool bad = false;
            for (int r = 0; r < 2; r++)
                for (int k = 0; k < 2; k++) {
                    CHECK_OK(st_sampler_indices(s, r, (st_sampler_pos){step, 0, k}, idx));
                    for (int j = 0; j < 2; j++)
                        if (idx[j] < 0 || idx[j] > 2)
                            bad = true;
                        else
                            seen[idx[j]]++;
                }
            int64_t lo = seen[0] < seen[1] ? seen[0] : seen[1], hi = seen[0] > seen[1] ? seen[0] : seen[1];
            lo = lo < seen[2] ? lo : seen[2], hi = hi > seen[2] ? hi : seen[2];
            CHECK(!bad && lo == 2 && hi == 3 && seen[0] + seen[1] + seen[2] == 8,
                  "epoch %d: samples read %lld, %lld, %lld times", step, (long long)seen[0],
                  (long long)seen[1], (long long)seen[2]);
        }
        st_sampler_free(s);
        s = NULL;
    }
    o.drop_last = true;
    o.n = 100, o.batch_size = 12, o.micro_batch = 4, o.world = 2;
    CHECK_FAILS(st_sampler_init(&o, &s), ST_ERR_CONFIG, "cannot be split into 2 rank(s)");
    o.micro_batch = 2, o.rank = 2;
    CHECK_FAILS(st_sampler_init(&o, &s), ST_ERR_ARG, "rank 2");
    o.rank = 0, o.micro_batch = 0;
    CHECK_FAILS(st_sampler_init(&o, &s), ST_ERR_ARG, "at least 1");
    st_sampler_free(NULL);
}

/* Interleaved (deterministic mode): rank r's micro-step k of world N reads
 * what 1 rank reads at micro-step k*N + r, for every step of two epochs. */
static void interleaved(int world, int64_t accum, int64_t n) {
    const int64_t mb = 2, B = (int64_t)world * accum * mb;
    st_sampler_opts o = ST_SAMPLER_OPTS_INIT;
    o.n = n, o.batch_size = B, o.micro_batch = mb, o.seed = 4, o.world = 1;
    st_sampler *one = NULL;
    CHECK_OK(st_sampler_init(&o, &one));
    if (!one) return;
    int bad = 0;
    for (int r = 0; r < world; r++) {
        st_sampler_opts q = o;
        q.world = world, q.rank = r, q.interleave = true;
        st_sampler *s = NULL;
        CHECK_OK(st_sampler_init(&q, &s));
        if (!s) break;
        const int64_t steps = 2 * st_sampler_steps_per_epoch(s);
        int64_t a[2], b[2];
        for (int64_t st = 0; st < steps; st++)
            for (int64_t k = 0; k < accum; k++) {
                st_sampler_pos p;
                st_sampler_next(s, a, &p);
                st_sampler_pos g = {p.epoch, p.step, k * world + r};
                CHECK_OK(st_sampler_indices(one, 0, g, b));
                bad += memcmp(a, b, sizeof a) != 0;
            }
        st_sampler_free(s);
    }
    CHECK(bad == 0, "interleaved world %d accum %lld: %d micro-batches differ from 1 rank's", world,
          (long long)accum, bad);
    st_sampler_free(one);
}

/* A resume with another global batch: the position in batches of 8 after 5
 * steps (40 samples of the epoch) goes on at the step of the new batch that
 * holds sample 40: batches of 5, step 8, nothing read twice; of 16, step 2,
 * the 8 samples from 32 read again; of 64, step 0, all 40. The sampler
 * seeking it reads the permutation from there. */
static void rebatch(void) {
    const int64_t n = 100;
    int64_t perm[100], idx[64];
    st_epoch_order(n, 3, 1, 1, perm);
    const struct {
        int64_t to, step, again;
    } cases[] = {{5, 8, 0}, {16, 2, 8}, {64, 0, 40}, {8, 5, 0}, {40, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t again = -1;
        const st_sampler_pos p = st_sampler_rebatch((st_sampler_pos){1, 5, 0}, 8, cases[i].to, &again);
        CHECK(p.epoch == 1 && p.step == cases[i].step && p.micro == 0 && again == cases[i].again,
              "batches of 8, step 5 -> batches of %lld: epoch %lld step %lld micro %lld, %lld again",
              (long long)cases[i].to, (long long)p.epoch, (long long)p.step, (long long)p.micro,
              (long long)again);
        st_sampler *s = make(n, cases[i].to, cases[i].to, 0, 1, 3, true);
        if (!s) continue;
        CHECK_OK(st_sampler_seek(s, p));
        st_sampler_next(s, idx, NULL);
        const int64_t from = 40 - cases[i].again;
        CHECK(!memcmp(idx, perm + from, (size_t)cases[i].to * sizeof *idx),
              "batches of %lld: the next batch is not the permutation from sample %lld",
              (long long)cases[i].to, (long long)from);
        st_sampler_free(s);
    }
}

int main(void) {
    const int64_t sizes[] = {96, 97, 100, 131, 1000};
    for (int world = 1; world <= 8; world++)
        for (int64_t mb = 1; mb <= 4; mb += 3)
            for (int64_t accum = 1; accum <= 3; accum += 2)
                for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
                    if (sizes[i] < world * mb * accum) continue;
                    partition(world, mb, accum, sizes[i], true);
                    partition(world, mb, accum, sizes[i], false);
                    mapping(world, mb, accum, sizes[i], true);
                    mapping(world, mb, accum, sizes[i], false);
                }
    for (int world = 1; world <= 4; world++)
        for (int64_t accum = 1; accum <= 3; accum++)
            interleaved(world, accum, 61);
    matches_step_loop();
    epochs_and_seeds();
    rebatch();
    for (int world = 1; world <= 8; world++) {
        resume(world, 0, true);
        resume(world, world - 1, false);
    }
    errors();
    return st_test_finish("test_sampler");
}
