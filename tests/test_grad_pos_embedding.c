/* Position embedding: gradient check (x and the table, batch of 1, T < and =
 * max_len, input consumed twice, rows from a position past 0 as cached
 * decoding reads them), forward values, and the max_len check. */
#include "gradcheck.h"
#include "layers/layers.h"

static void check_pos(int64_t B, int64_t T, int64_t C, int64_t max_len, bool twice, int64_t pos) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[3] = {B, T, C};
    st_tensor *x, *h, *y1, *y2, *y;
    CHECK_OK(st_graph_param(&g, "x", 3, xs, ST_INIT_UNIFORM, 1.0f, false, &x));
    if (twice) { /* h feeds two nodes: the second in backward order adds (in_acc) */
        CHECK_OK(st_gelu(&g, "h", x, &h));
        CHECK_OK(st_pos_embedding(&g, "wpe1", h, max_len, 0.5f, &y1));
        CHECK_OK(st_pos_embedding(&g, "wpe2", h, max_len, 0.5f, &y2));
        CHECK_OK(st_add(&g, "sum", y1, y2, &y));
    } else {
        CHECK_OK(st_pos_embedding(&g, "wpe", x, max_len, 0.5f, &y));
    }
    CHECK_OK(st_graph_finalize(&g));
    st_params_init(&p, 5);
    g.pos = pos; /* (rows pos..pos+T-1: forward's, and backward's gradient) */
    if (!twice) {
        st_tensor *w = st_params_find(&p, "wpe.weight");
        CHECK(w->shape[0] == max_len && w->shape[1] == C && w->decay && w->init == ST_INIT_NORMAL,
              "weight (max_len, C), normal, decay");
        CHECK_OK(st_graph_forward(&g));
        int bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t i = (b * T + t) * C + c;
                    bad += y->data[i] != x->data[i] + w->data[(pos + t) * C + c];
                }
        CHECK(bad == 0, "%d outputs differ from x + wpe[t]", bad);
    }
    char label[128];
    snprintf(label, sizeof label, "pos_embedding B%lld T%lld C%lld max%lld twice%d pos%lld", (long long)B,
             (long long)T, (long long)C, (long long)max_len, twice, (long long)pos);
    gradcheck(label, &g, y, p.t, p.n, 17, 96, 1e-2, 1e-2, 1e-3);
    st_graph_free(&g);
    st_params_free(&p);
}

static void check_errors(void) {
    st_params p = {0};
    st_graph g;
    st_graph_init(&g, &p);
    int64_t xs[3] = {2, 9, 4}, x2s[2] = {9, 4};
    st_tensor *x, *x2, *y;
    CHECK_OK(st_graph_input(&g, "x", ST_F32, 3, xs, &x));
    CHECK_OK(st_graph_input(&g, "x2", ST_F32, 2, x2s, &x2));
    CHECK_FAILS(st_pos_embedding(&g, "wpe", x, 8, 0.1f, &y), ST_ERR_SHAPE,
                "sequence length 9 exceeds max_len 8");
    CHECK_FAILS(st_pos_embedding(&g, "wpe", x2, 16, 0.1f, &y), ST_ERR_SHAPE, "(B, T, C)");
    st_graph_free(&g);
    st_params_free(&p);
}

int main(void) {
    check_pos(2, 3, 4, 8, false, 0);
    check_pos(1, 5, 7, 5, false, 0); /* batch of 1, T == max_len */
    check_pos(3, 7, 33, 10, false, 0);
    check_pos(2, 3, 5, 4, true, 0);
    check_pos(2, 3, 4, 8, false, 4); /* rows 4..6 */
    check_pos(1, 2, 5, 6, true, 4);  /* the last two rows */
    check_errors();
    return st_test_finish("test_grad_pos_embedding");
}
