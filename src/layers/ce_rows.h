/* The row reductions of the cross-entropy layers (softmax_ce.c, linear_ce.c):
 * the same code, so the same bits, in both. */
#ifndef ST_LAYERS_CE_ROWS_H
#define ST_LAYERS_CE_ROWS_H

#include <stdint.h>

#include "core/fastmath.h"
#include "model/graph.h"

/* Row reductions run in ST_CE_LANES independent partial results (lane j takes
 * elements j, j + ST_CE_LANES, ...; the tail goes to lane 0), combined in lane
 * order: a fixed order, so the same bits every run, in loops gcc vectorizes
 * (one running max or sum stays scalar). */
#define ST_CE_LANES 16

/* max_v x[v], V >= 1, NaNs passed over: a NaN in x still makes the row's
 * sum of exponentials, and so the loss, NaN. */
static inline float st_ce_row_max(const float *x, int64_t V) {
    float lane[ST_CE_LANES];
    for (int j = 0; j < ST_CE_LANES; j++) lane[j] = x[0];
    int64_t v = 0;
    for (; v + ST_CE_LANES <= V; v += ST_CE_LANES)
        for (int j = 0; j < ST_CE_LANES; j++) lane[j] = x[v + j] > lane[j] ? x[v + j] : lane[j];
    for (; v < V; v++) lane[0] = x[v] > lane[0] ? x[v] : lane[0];
    float m = lane[0];
    for (int j = 1; j < ST_CE_LANES; j++) m = lane[j] > m ? lane[j] : m;
    return m;
}

/* sum_v exp(x[v] - m), m = max x: in double lanes */
static inline double st_ce_row_sum_exp(const float *x, float m, int64_t V) {
    double lane[ST_CE_LANES] = {0};
    int64_t v = 0;
    for (; v + ST_CE_LANES <= V; v += ST_CE_LANES)
        for (int j = 0; j < ST_CE_LANES; j++) lane[j] += (double)st_exp_nonpos(x[v + j] - m);
    for (; v < V; v++) lane[0] += (double)st_exp_nonpos(x[v] - m);
    double s = 0.0;
    for (int j = 0; j < ST_CE_LANES; j++) s += lane[j];
    return s;
}

/* The error for target tgt at row r of n's targets (in[1]): names op, the
 * node, the position as coordinates and the value. */
st_status st_ce_bad_target(const st_node *n, const char *op, int64_t r, int32_t tgt, int64_t V, int32_t ignore);

#endif
