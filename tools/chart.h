/* Line charts for `scaletrain report`: one chart (several series of (x, y)
 * points against a shared x axis, linear or log y) written as an SVG file of
 * our own and, through gnuplot, as a PNG. Points that are not finite (or not
 * positive on a log axis) are gaps. The output depends only on the data: the
 * same chart gives the same bytes. Not a general plotting library. */
#ifndef ST_TOOLS_CHART_H
#define ST_TOOLS_CHART_H

#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>

#include "scaletrain/status.h"

typedef struct st_chart_series {
    const char *name; /* legend text */
    const double *x;  /* (n,) */
    const double *y;  /* (n,) */
    int n;
} st_chart_series;

typedef struct st_chart {
    const char *title, *xlabel, *ylabel;
    bool log_y;       /* log10 y axis; values <= 0 are gaps */
    bool y_from_zero; /* linear y axis that starts at 0 (memory, throughput) */
    const st_chart_series *series;
    int n_series;
} st_chart;

/* How many of s's points the chart draws (finite, and > 0 on a log axis). */
int st_chart_drawn_points(const st_chart *c, const st_chart_series *s);
/* The chart as an SVG file at path: one <path class="series"> per series
 * with points (data-points: its vertices), one circle per point when a
 * series has few. A series of more points than the plot has half-pixel
 * columns is thinned to each column's first, lowest, highest and last
 * (data-thinned-from: the points it had), in the SVG and the PNG alike:
 * the same picture, in a few thousand points however long the run. */
st_status st_chart_write_svg(const st_chart *c, const char *path);
/* Write s with XML's (and HTML's) special characters escaped. */
void st_chart_xml_text(FILE *f, const char *s);
/* The chart as a PNG at png_path through `gnuplot` (its data and script go
 * to png_path.dat and png_path.gp, removed afterwards). */
st_status st_chart_write_png(const st_chart *c, const char *png_path, const char *gnuplot);

#endif
