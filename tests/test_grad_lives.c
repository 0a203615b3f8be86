/* Activation gradients share memory by their lives in backward (graph.c
 * place_grads): for the mlp, the cnn and the gpt, with and without
 * checkpointing, no two gradients alive at the same backward step overlap in
 * memory (their lives recomputed here from the nodes, independently of the
 * placement) unless a chain of passes joins them and neither is written
 * while the other is needed (the gpt's residual stream and its branches,
 * graph.c alias_passes; checked here from the nodes too), every gradient
 * lies inside the arena, the arena is smaller
 * than the gradients laid end to end, and a training step gives the same
 * loss and parameter gradients, bit for bit, as the same graph keeping
 * every activation and gradient apart (st_model keep_acts). The logits'
 * gradient takes the logits' own memory (graph.c grads_over_data: softmax_ce
 * writes it in place, the linear before it never reads its output), in
 * every model, and in none when the gradients are kept.
 *
 * Activations no backward reads share the arena's transient section by
 * their lives in forward (graph.c place_transients): no two alive at the
 * same forward step overlap; without checkpointing, the gpt's and the
 * mlp's activation arenas are smaller than when kept; and the section is filled with NaN between
 * forward and backward, so that a backward reading any of them (a wrong
 * st_layer_ops flag) changes the gradients the bit-identity check reads.
 * With selective checkpointing the gpt's norms and GELUs' outputs join the
 * section, living again in backward from their recompute (remat_before) to
 * their last reader: the NaN between forward and backward then also checks
 * that backward recomputes each before reading it. */
#include <stdlib.h>
#include <string.h>

#include "small_models.h"

static int find(int *set, int i) {
    while (set[i] != i)
        i = set[i] = set[set[i]];
    return i;
}

/* The first backward step in [lo, hi] at which a node writes t's gradient
 * (one of t's consumers, unless its pass is nothing: its input's gradient
 * is its output's memory), or -1. */
static int writes_within(const st_graph *g, const st_tensor *t, int lo, int hi) {
    const int nn = g->n_nodes;
    for (int s = lo < 0 ? 0 : lo; s <= hi && s < nn; s++) {
        const st_node *n = &g->nodes[nn - 1 - s];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == t && !(n->ops->grad_passes >> k & 1u && t->grad == n->out->grad)) return s;
    }
    return -1;
}

/* Checks the placement of g's activation gradients; returns the floats
 * they take laid end to end, and in *shared_pairs how many pairs are one
 * memory. Gradients alive at the same backward step may be one memory
 * only when a chain of passes joins them (a residual stream) and neither
 * is written between the other's first write (or handover) and its
 * producer's read. */
static int64_t check_lives(const char *label, const st_graph *g, const st_tensor *logits, bool kept,
                           int *shared_pairs) {
    const int na = g->n_acts, nn = g->n_nodes;
    int *first = malloc((size_t)na * sizeof *first), *last = malloc((size_t)na * sizeof *last);
    for (int i = 0; i < na; i++)
        first[i] = -1, last[i] = nn; /* no producer: read to the end */
    for (int s = 0; s < nn; s++) {   /* backward step s runs node nn - 1 - s */
        const st_node *n = &g->nodes[nn - 1 - s];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k]->grad && n->in[k]->kind != ST_TENSOR_PARAM && first[n->in[k]->index] < 0)
                first[n->in[k]->index] = s;                                           /* its first writer */
        if (n->out->grad && n->out->kind != ST_TENSOR_PARAM) last[n->out->index] = s; /* its last reader */
    }
    for (int i = 0; i < na; i++)
        if (first[i] < 0) first[i] = 0; /* no consumer (the loss): seeded before step 0 */
    /* the sets a chain of passes joins (st_layer_ops.grad_passes): the only
     * gradients that may be one memory */
    int *set = malloc((size_t)na * sizeof *set);
    for (int i = 0; i < na; i++)
        set[i] = i;
    for (int i = 0; i < nn; i++) {
        const st_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->ops->grad_passes >> k & 1u && n->in[k]->kind == ST_TENSOR_ACT &&
                n->out->kind == ST_TENSOR_ACT)
                set[find(set, n->in[k]->index)] = find(set, n->out->index);
    }
    int64_t sum = 0;
    int clashes = 0, outside = 0, over = 0, shared = 0;
    for (int i = 0; i < na; i++) {
        const st_tensor *a = g->acts[i];
        if (a->grad && a->grad == a->data) {
            over++;
            CHECK(a == logits && !kept, "%s: %s's gradient takes its data's memory", label, a->name);
            continue;
        }
        if (!a->grad) continue;
        const int64_t na_ = st_store_floats(a->count, a->store);
        sum += na_;
        const float *lo = a->grad, *hi = a->grad + na_;
        if (lo < g->grad_arena || hi > g->grad_arena + g->grad_count) outside++;
        for (int j = i + 1; j < na; j++) {
            const st_tensor *b = g->acts[j];
            if (!b->grad || b->grad == b->data || first[i] > last[j] || first[j] > last[i]) continue;
            const float *blo = b->grad, *bhi = b->grad + st_store_floats(b->count, b->store);
            if (blo == lo && bhi == hi && !kept) { /* one memory (graph.c alias_passes) */
                shared++;
                const bool linked = find(set, i) == find(set, j);
                const int wa = writes_within(g, a, first[j], last[j]),
                          wb = writes_within(g, b, first[i], last[i]);
                CHECK(linked && wa < 0 && wb < 0,
                      "%s: %s (steps %d-%d) and %s (steps %d-%d) share gradient memory: %s", label, a->name,
                      first[i], last[i], b->name, first[j], last[j],
                      !linked ? "no chain of passes joins them" : "one is written while the other is needed");
                continue;
            }
            if (lo < bhi && blo < hi) {
                if (clashes < 3)
                    fprintf(stderr, "%s: %s (steps %d-%d) and %s (steps %d-%d) share gradient memory\n",
                            label, a->name, first[i], last[i], b->name, first[j], last[j]);
                clashes++;
            }
        }
    }
    CHECK(clashes == 0, "%s: %d pairs of live gradients overlap", label, clashes);
    *shared_pairs = shared;
    free(set);
    CHECK(outside == 0, "%s: %d gradients outside the arena", label, outside);
    CHECK(over == (kept || !logits ? 0 : 1), "%s: %d gradients over their data", label, over);
    free(first), free(last);
    return sum;
}

static bool meet(int b1, int d1, int b2, int d2) { return b1 >= 0 && b2 >= 0 && b1 <= d2 && b2 <= d1; }

/* Checks the placement of g's transient activations (their data in the
 * arena's last transient_act_count floats): no two whose lives in forward,
 * from their producer's step to their last consumer's, meet share memory,
 * and none is read by backward in a way the graph can see (a gradient over
 * it). Returns how many there are. */
static int check_transients(const char *label, const st_graph *g) {
    const int na = g->n_acts;
    const float *lo_t = g->act_arena + (g->act_count - g->transient_act_count),
                *hi_t = g->act_arena + g->act_count;
    const int nn = g->n_nodes;
    int *birth = malloc((size_t)na * sizeof *birth), *death = malloc((size_t)na * sizeof *death);
    int *b2 = malloc((size_t)na * sizeof *b2), *d2 = malloc((size_t)na * sizeof *d2);
    for (int i = 0; i < na; i++)
        birth[i] = death[i] = b2[i] = d2[i] = -1;
    for (int s = 0; s < nn; s++) {
        const st_node *n = &g->nodes[s];
        if (n->out->kind == ST_TENSOR_ACT) birth[n->out->index] = s;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k]->kind == ST_TENSOR_ACT) death[n->in[k]->index] = s;
    }
    /* a recomputed output (selective) lives again in backward (node i's
     * backward at step 2n-1-i), from the recompute to its last reader */
    for (int s = 0; s < nn; s++) {
        const st_node *p = &g->nodes[s];
        if (p->remat_before < 0) continue;
        const int a = p->out->index;
        int last = p->ops->backward_ignores_out ? nn : s;
        for (int j = s + 1; j < nn; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in[k] == p->out && !g->nodes[j].ops->backward_ignores_in && j < last)
                    last = j;
        CHECK(last < nn && p->remat_before >= last, "%s: %s recomputed before node %d, read from node %d",
              label, p->out->name, p->remat_before, last);
        b2[a] = 2 * nn - 1 - p->remat_before;
        d2[a] = 2 * nn - 1 - last;
    }
    int count = 0, clashes = 0;
    for (int i = 0; i < na; i++) {
        const st_tensor *a = g->acts[i];
        if (a->dtype != ST_F32 || a->data < lo_t || a->data >= hi_t) continue;
        count++;
        const float *hi = a->data + st_store_floats(a->count, a->store);
        CHECK(hi <= hi_t, "%s: transient %s runs past the arena", label, a->name);
        CHECK(birth[i] >= 0 && death[i] >= birth[i], "%s: transient %s has no producer or no consumer", label,
              a->name);
        CHECK(a->grad != a->data, "%s: transient %s has its gradient over its data", label, a->name);
        CHECK(a != g->loss, "%s: the loss is transient", label);
        for (int j = i + 1; j < na; j++) {
            const st_tensor *b = g->acts[j];
            if (b->dtype != ST_F32 || b->data < lo_t || b->data >= hi_t ||
                !(meet(birth[i], death[i], birth[j], death[j]) || meet(birth[i], death[i], b2[j], d2[j]) ||
                  meet(b2[i], d2[i], birth[j], death[j]) || meet(b2[i], d2[i], b2[j], d2[j])))
                continue;
            if (a->data < b->data + st_store_floats(b->count, b->store) && b->data < hi) {
                if (clashes < 3)
                    fprintf(stderr, "%s: %s (steps %d-%d) and %s (steps %d-%d) share memory\n", label,
                            a->name, birth[i], death[i], b->name, birth[j], death[j]);
                clashes++;
            }
        }
    }
    CHECK(clashes == 0, "%s: %d pairs of live transient activations overlap", label, clashes);
    free(birth), free(death), free(b2), free(d2);
    return count;
}

static void check_model(const char *type, tweak_fn tweak) {
    static const char *const modes[] = {"off", "blocks", "selective"};
    int64_t off_acts = 0;
    for (int k = 0; k < 3; k++) {
        const char *ckpt = modes[k];
        char label[64];
        const bool fused = tweak == sm_gpt3_fused;
        snprintf(label, sizeof label, "%s%s, checkpointing %s", type, fused ? " (fused head)" : "", ckpt);
        st_model *a = sm_make(type, tweak, ckpt, false), *b = sm_make(type, tweak, ckpt, true);
        if (!a || !b) return;
        st_model_graph ga, gb;
        sm_step(a, &ga, 6);
        sm_step(b, &gb, 6);
        int shared = 0, shared_kept = 0;
        const int64_t sum = check_lives(label, &ga.g, ga.logits, false, &shared);
        const int64_t kept = check_lives(label, &gb.g, gb.logits, true, &shared_kept);
        /* the gpt's residual stream and branches are one memory: 2 x 3 blocks x 2 branches, the
           embedding (wte + wpe and dropout), many pairs; nothing else has passes */
        CHECK(strcmp(type, "gpt") == 0 ? shared >= 10 : shared == 0, "%s: %d pairs of gradients share memory",
              label, shared);
        CHECK(shared_kept == 0, "%s: kept apart, yet %d pairs of gradients share memory", label, shared_kept);
        CHECK(ga.g.grad_count < sum / 2, "%s: the gradients take %lld floats, %lld laid end to end", label,
              (long long)ga.g.grad_count, (long long)sum);
        CHECK(gb.g.grad_count >= kept, "%s: kept apart, %lld floats for %lld", label,
              (long long)gb.g.grad_count, (long long)kept);
        const int nt = check_transients(label, &ga.g);
        CHECK(check_transients(label, &gb.g) == 0 && gb.g.transient_act_count == 0,
              "%s: kept apart, yet transient activations", label);
        if (strcmp(type, "cnn") != 0 && k == 0) /* (in blocks, the projections' outputs are the region's) */
            CHECK(nt > 0 && ga.g.act_count < gb.g.act_count,
                  "%s: %d transient activations, arena %lld floats (%lld kept apart)", label, nt,
                  (long long)ga.g.act_count, (long long)gb.g.act_count);
        int remat = 0;
        for (int i = 0; i < ga.g.n_nodes; i++)
            remat += ga.g.nodes[i].remat_before >= 0;
        CHECK(remat == ga.g.n_remat, "%s: %d recomputed nodes, %d listed", label, remat, ga.g.n_remat);
        if (k == 0) off_acts = ga.g.act_count;
        if (k == 2 && strcmp(type, "gpt") == 0) /* 2 layer norms and a GELU per block, and ln_f (whose
                                                   output linear_ce never reads in backward) */
            CHECK(remat == 3 * 3 + !fused && ga.g.act_count < off_acts,
                  "%s: %d recomputed outputs, arena %lld floats (%lld without)", label, remat,
                  (long long)ga.g.act_count, (long long)off_acts);
        else if (k != 2 || strcmp(type, "mlp") == 0) /* (the mlp's ReLU reads a transient input) */
            CHECK(remat == 0, "%s: %d recomputed outputs", label, remat);
        CHECK(memcmp(ga.loss->data, gb.loss->data, sizeof(float)) == 0, "%s: loss %.9g vs %.9g", label,
              (double)ga.loss->data[0], (double)gb.loss->data[0]);
        CHECK(memcmp(a->params.grad, b->params.grad, (size_t)a->params.count * sizeof(float)) == 0,
              "%s: parameter gradients differ from the graph keeping every gradient", label);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < a->params.count; i++)
            nonzero += a->params.grad[i] != 0.0f;
        CHECK(nonzero > a->params.count / 2, "%s: %lld of %lld gradients are non-zero", label,
              (long long)nonzero, (long long)a->params.count);
        printf("%s: activation gradients %lld floats, %d pairs one memory (%lld kept apart); activations "
               "%lld floats, %d transient (%d recomputed) in %lld (%lld kept apart)\n",
               label, (long long)ga.g.grad_count, shared, (long long)gb.g.grad_count,
               (long long)ga.g.act_count, nt, remat, (long long)ga.g.transient_act_count,
               (long long)gb.g.act_count);
        st_model_graph_free(&ga);
        st_model_graph_free(&gb);
        st_model_free(a);
        st_model_free(b);
    }
}

/* A gpt with model.fused_head on against the same gpt keeping its logits:
 * the same loss and gradients up to the order of fp32 sums, no logits,
 * and less memory for a vocabulary large beside the rows (the rule `auto`
 * follows). */
static void head_is(st_config *c, const char *mode) {
    snprintf(c->model.fused_head, sizeof c->model.fused_head, "%s", mode);
}
/* A shape's tweak with its head fused (NAME_on) and plain (NAME_off). */
#define HEAD_VARIANTS(name)                                                                                  \
    static void name##_on(st_config *c) {                                                                    \
        name(c);                                                                                             \
        head_is(c, "on");                                                                                    \
    }                                                                                                        \
    static void name##_off(st_config *c) {                                                                   \
        name(c);                                                                                             \
        head_is(c, "off");                                                                                   \
    }

static void big_vocab(st_config *c) {
    sm_gpt3(c);
    head_is(c, "auto");
    c->model.vocab_size = 2000;
    c->model.dropout = 0;
}
HEAD_VARIANTS(big_vocab)

static void check_fused_head(void) {
    st_model *a = sm_make("gpt", big_vocab_on, "off", false),
             *b = sm_make("gpt", big_vocab_off, "off", false), *c = sm_make("gpt", big_vocab, "off", false);
    if (!a || !b || !c) return;
    st_model_graph ga, gb, gc;
    sm_step(a, &ga, 6);
    sm_step(b, &gb, 6);
    CHECK_OK(st_model_graph_build(c, 6, &gc));
    CHECK(!ga.logits && gb.logits && !gc.logits, "fused: no logits; off: logits; auto at vocab 2000: fused");
    CHECK(fabs(ga.loss->data[0] - gb.loss->data[0]) <= 1e-5 * fabs(gb.loss->data[0]) && ga.loss->data[0] > 7.0f,
          "fused head: loss %.9g, plain %.9g (ln 2000 = 7.6)", (double)ga.loss->data[0], (double)gb.loss->data[0]);
    double d = 0, m = 0;
    /* a NaN is kept, and fails; not fmax: gcc 12 for arm64 fails on that loop at -O3 */
    for (int64_t i = 0; i < a->params.count; i++) {
        const double e = fabs((double)a->params.grad[i] - b->params.grad[i]),
                     g = fabs((double)b->params.grad[i]);
        if (!(e <= d)) d = e;
        if (!(g <= m)) m = g;
    }
    CHECK(d <= 1e-4 * m && m > 0, "fused head: gradients differ by %.3g of %.3g", d, m);
    const int64_t fa = ga.g.act_count + ga.g.work_count, fb = gb.g.act_count + gb.g.work_count;
    CHECK(fa < fb, "fused head: activations + scratch %lld floats, plain %lld", (long long)fa, (long long)fb);
    printf("gpt vocab 2000, 6 x 16 tokens: activations + scratch %lld floats fused, %lld plain\n", (long long)fa,
           (long long)fb);
    st_model_graph_free(&ga);
    st_model_graph_free(&gb);
    st_model_graph_free(&gc);
    st_model_free(a);
    st_model_free(b);
    st_model_free(c);
}

/* model.fused_head auto takes the head the graph holds less memory for
 * (activations and scratch, as the run's activations line counts them), at
 * vocabularies below, near and above n_embd: at 256 classes and n_embd 768
 * it took the logits where the fused head held less. */
static int64_t head_v, head_c, head_t;
static void head_shape(st_config *c) {
    sm_gpt3(c);
    head_is(c, "auto");
    c->model.vocab_size = head_v;
    c->model.n_embd = head_c;
    c->model.block_size = head_t;
    c->model.n_layer = 1;
    c->model.dropout = 0;
}
HEAD_VARIANTS(head_shape)

static void check_fused_head_auto(void) {
    /* vocabulary, n_embd, block_size (16 sequences a batch) */
    static const int64_t shapes[][3] = {{50, 128, 16},  {100, 128, 16}, {256, 128, 16}, {256, 512, 16},
                                        {600, 128, 16}, {2000, 64, 16}, {256, 768, 64}, {512, 768, 32}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        head_v = shapes[k][0], head_c = shapes[k][1], head_t = shapes[k][2];
        st_model *on = sm_make("gpt", head_shape_on, "off", false),
                 *off = sm_make("gpt", head_shape_off, "off", false),
                 *aut = sm_make("gpt", head_shape, "off", false);
        if (on && off && aut) {
            st_model_graph gon, goff, gauto;
            CHECK_OK(st_model_graph_build(on, 16, &gon));
            CHECK_OK(st_model_graph_build(off, 16, &goff));
            CHECK_OK(st_model_graph_build(aut, 16, &gauto));
            const int64_t fon = gon.g.act_count + gon.g.work_count,
                          foff = goff.g.act_count + goff.g.work_count;
            const bool fused = !gauto.logits;
            CHECK(fused == (fon < foff),
                  "fused_head auto at vocabulary %lld, n_embd %lld, 16 x %lld tokens: %s, where the graph "
                  "holds "
                  "%lld floats fused and %lld with the logits",
                  (long long)head_v, (long long)head_c, (long long)head_t, fused ? "fused" : "logits",
                  (long long)fon, (long long)foff);
            st_model_graph_free(&gon);
            st_model_graph_free(&goff);
            st_model_graph_free(&gauto);
        }
        st_model_free(on);
        st_model_free(off);
        st_model_free(aut);
    }
    printf("fused_head auto: the smaller head at %zu vocabulary and width pairs\n",
           sizeof shapes / sizeof *shapes);
}

int main(void) {
    check_model("gpt", sm_gpt3);
    check_model("gpt", sm_gpt3_fused);
    check_fused_head();
    check_fused_head_auto();
    check_model("cnn", sm_cnn3);
    check_model("mlp", sm_mlp3);
    return st_test_finish("test_grad_lives");
}
