/* Line charts as SVG (written here) and PNG (gnuplot): axes with "nice"
 * ticks (1, 2, 5 x 10^k; decades on a log axis), labels, a title, a legend
 * above the plot so it never hides data, one path per series with gaps at
 * non-finite points, and markers when a series has few points (a run with
 * one logged step still shows its point). Both renderers get the same axis
 * ranges. Numbers are printed with fixed precision, so output is
 * deterministic. */
#include "chart.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { W = 760, H = 430, ML = 84, MR = 24, MT = 70, MB = 56, MAX_TICKS = 40, MARKER_MAX = 40 };
static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
#define N_COLORS (int)(sizeof COLORS / sizeof COLORS[0])

typedef struct axis {
    double lo, hi;
    bool log;
    double ticks[MAX_TICKS];
    int n_ticks;
    double step; /* linear tick spacing (label precision) */
} axis;

static bool drawn(const st_chart *c, double y) { return isfinite(y) && (!c->log_y || y > 0); }

int st_chart_drawn_points(const st_chart *c, const st_chart_series *s) {
    int k = 0;
    for (int i = 0; i < s->n; i++)
        k += isfinite(s->x[i]) && drawn(c, s->y[i]);
    return k;
}

/* 1, 2 or 5 x 10^k, the smallest at least raw. */
static double nice_step(double raw) {
    double p = pow(10.0, floor(log10(raw)));
    const double m[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (m[i] * p >= raw * (1 - 1e-9)) return m[i] * p;
    return 10 * p;
}

static void linear_axis(axis *a, double lo, double hi, bool integer) {
    if (!(lo <= hi)) lo = 0, hi = 1; /* no data */
    if (hi - lo <= fabs(hi) * 1e-12) {
        double pad = integer ? 1 : (lo != 0 ? fabs(lo) * 0.1 : 1);
        lo -= pad, hi += pad;
    }
    double step = nice_step((hi - lo) / 6);
    if (integer && step < 1) step = 1;
    a->log = false;
    a->step = step;
    a->lo = floor(lo / step + 1e-9) * step;
    a->hi = ceil(hi / step - 1e-9) * step;
    a->n_ticks = 0;
    for (int i = 0; a->n_ticks < MAX_TICKS; i++) { /* lo + i*step: no drift from summing */
        double t = a->lo + i * step;
        if (t > a->hi + step * 1e-6) break;
        a->ticks[a->n_ticks++] = fabs(t) < step * 1e-9 ? 0 : t;
    }
}

static void log_axis(axis *a, double lo, double hi) {
    if (!(lo > 0 && lo <= hi)) lo = 1, hi = 10;
    int d0 = (int)floor(log10(lo) + 1e-9), d1 = (int)ceil(log10(hi) - 1e-9);
    if (d1 <= d0) d1 = d0 + 1;
    a->log = true;
    a->lo = pow(10.0, d0);
    a->hi = pow(10.0, d1);
    a->step = 0;
    a->n_ticks = 0;
    const bool minor = d1 - d0 <= 2; /* few decades: 2 and 5 too */
    for (int d = d0; d <= d1 && a->n_ticks < MAX_TICKS; d++) {
        a->ticks[a->n_ticks++] = pow(10.0, d);
        if (minor && d < d1) {
            a->ticks[a->n_ticks++] = 2 * pow(10.0, d);
            a->ticks[a->n_ticks++] = 5 * pow(10.0, d);
        }
    }
}

static void make_axes(const st_chart *c, axis *x, axis *y) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < c->n_series; k++) {
        const st_chart_series *s = &c->series[k];
        for (int i = 0; i < s->n; i++) {
            if (!isfinite(s->x[i]) || !drawn(c, s->y[i])) continue;
            x0 = fmin(x0, s->x[i]), x1 = fmax(x1, s->x[i]);
            y0 = fmin(y0, s->y[i]), y1 = fmax(y1, s->y[i]);
        }
    }
    if (!(x0 <= x1)) x0 = 0, x1 = 1;
    linear_axis(x, x0, x1, true);
    if (c->log_y) {
        log_axis(y, y0, y1);
    } else {
        /* 3% of room so points at the extremes do not sit on the frame */
        const double pad = y0 < y1 ? 0.03 * (y1 - y0) : 0.03 * fabs(y1);
        const bool zero = c->y_from_zero && y0 >= 0;
        y0 = zero ? 0 : y0 - pad;
        y1 += pad;
        linear_axis(y, y0, y1, false);
    }
}

/* A tick label: k/M/G for large values, exponent form for tiny ones,
 * otherwise as many decimals as the tick spacing needs. */
static void tick_label(char *out, size_t n, double v, const axis *a) {
    double mag = fmax(fabs(a->lo), fabs(a->hi));
    if (a->log) {
        if (mag >= 1e4 || a->lo < 1e-3)
            snprintf(out, n, "%.0e", v);
        else
            snprintf(out, n, "%g", v);
        return;
    }
    if (v == 0) {
        snprintf(out, n, "0");
        return;
    }
    if (mag < 1e-3) {
        snprintf(out, n, "%.*e", a->step / mag < 0.1 ? 2 : 1, v);
        return;
    }
    const char *suffix = "";
    double scale = 1;
    if (mag >= 1e9)
        scale = 1e9, suffix = "G";
    else if (mag >= 1e6)
        scale = 1e6, suffix = "M";
    else if (mag >= 1e4)
        scale = 1e3, suffix = "k";
    double step = a->step / scale;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    snprintf(out, n, "%.*f%s", dec, v / scale, suffix);
}

static double px_x(const axis *a, double v) { return ML + (v - a->lo) / (a->hi - a->lo) * (W - ML - MR); }
static double px_y(const axis *a, double v) {
    double f =
        a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : (v - a->lo) / (a->hi - a->lo);
    return H - MB - f * (H - MT - MB);
}

void st_chart_xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* A series of more points than the plot has columns, thinned for drawing:
 * per column (half a pixel wide) its first, lowest, highest and last
 * points, in their order, and a gap (NaN) where the data has one. What is
 * drawn is the same picture (every spike stays), in a few thousand points
 * however long the run: a million logged steps made a 100 MB SVG. The
 * thinned copy is in *buf (free it; NULL when s is drawn as it is). */
enum { THIN_COLUMNS = 2 * (W - ML - MR), THIN_ABOVE = 4 * THIN_COLUMNS };

typedef struct bucket {
    int col, first, lo, hi, last; /* indices into the series; col -1: empty */
} bucket;

static void thin_flush(const st_chart_series *s, bucket *b, double *x, double *y, int *n) {
    if (b->col < 0) return;
    int idx[4] = {b->first, b->lo, b->hi, b->last};
    for (int i = 1; i < 4; i++) /* (insertion sort of four) */
        for (int j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
            const int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    for (int i = 0; i < 4; i++)
        if (i == 0 || idx[i] != idx[i - 1]) x[*n] = s->x[idx[i]], y[(*n)++] = s->y[idx[i]];
    b->col = -1;
}

static st_chart_series thin(const st_chart *c, const axis *ax, const st_chart_series *s, double **buf) {
    *buf = NULL;
    if (st_chart_drawn_points(c, s) <= THIN_ABOVE) return *s;
    /* x and y: at most an entry per point (a gap takes a non-finite one's place) */
    double *x = malloc(2 * (size_t)s->n * sizeof *x);
    if (!x) return *s; /* (drawn whole: slower, not wrong) */
    double *y = x + s->n;
    int n = 0;
    bucket b = {.col = -1};
    const double span = ax->hi - ax->lo;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !drawn(c, s->y[i])) {
            thin_flush(s, &b, x, y, &n);
            if (n > 0 && isfinite(y[n - 1])) x[n] = NAN, y[n++] = NAN; /* the gap */
            continue;
        }
        int col = (int)((s->x[i] - ax->lo) / span * THIN_COLUMNS);
        col = col < 0 ? 0 : col >= THIN_COLUMNS ? THIN_COLUMNS - 1 : col;
        if (col != b.col) {
            thin_flush(s, &b, x, y, &n);
            b = (bucket){col, i, i, i, i};
            continue;
        }
        b.last = i;
        if (s->y[i] < s->y[b.lo]) b.lo = i;
        if (s->y[i] > s->y[b.hi]) b.hi = i;
    }
    thin_flush(s, &b, x, y, &n);
    *buf = x;
    return (st_chart_series){s->name, x, y, n};
}

static void svg_series(FILE *f, const st_chart *c, const axis *ax, const axis *ay, int k) {
    const int n_data = st_chart_drawn_points(c, &c->series[k]);
    if (n_data == 0) return;
    double *buf;
    const st_chart_series thinned = thin(c, ax, &c->series[k], &buf), *s = &thinned;
    const char *color = COLORS[k % N_COLORS];
    const int n = st_chart_drawn_points(c, s);
    fprintf(f, "<path class=\"series\" data-name=\"");
    st_chart_xml_text(f, s->name);
    fprintf(f, "\" data-points=\"%d\"", n);
    if (buf) fprintf(f, " data-thinned-from=\"%d\"", n_data);
    fprintf(f, " fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" clip-path=\"url(#plot)\" d=\"", color);
    bool pen = false;
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !drawn(c, s->y[i])) {
            pen = false; /* a gap */
            continue;
        }
        fprintf(f, "%s%.2f %.2f", pen ? " L" : (i ? " M" : "M"), px_x(ax, s->x[i]), px_y(ay, s->y[i]));
        pen = true;
    }
    fprintf(f, "\"/>\n");
    if (n_data > MARKER_MAX) {
        free(buf);
        return;
    }
    fprintf(f, "<g class=\"markers\" fill=\"%s\">", color);
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->x[i]) && drawn(c, s->y[i]))
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>", px_x(ax, s->x[i]), px_y(ay, s->y[i]));
    fprintf(f, "</g>\n");
    free(buf);
}

st_status st_chart_write_svg(const st_chart *c, const char *path) {
    axis ax, ay;
    make_axes(c, &ax, &ay);
    st_cli_output out;
    FILE *f = st_cli_output_open(&out, path);
    if (!f) return st_fail(ST_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    const int x0 = ML, x1 = W - MR, y0 = MT, y1 = H - MB;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f,
            "<defs><clipPath id=\"plot\"><rect x=\"%d\" y=\"%d\" width=\"%d\" "
            "height=\"%d\"/></clipPath></defs>\n",
            x0 - 4, y0 - 4, x1 - x0 + 8, y1 - y0 + 8);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">",
            W / 2);
    st_chart_xml_text(f, c->title);
    fprintf(f, "</text>\n<g class=\"grid\" stroke=\"#dddddd\" stroke-width=\"1\">");
    for (int i = 0; i < ax.n_ticks; i++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>", px_x(&ax, ax.ticks[i]), y0,
                px_x(&ax, ax.ticks[i]), y1);
    for (int i = 0; i < ay.n_ticks; i++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>", x0, px_y(&ay, ay.ticks[i]), x1,
                px_y(&ay, ay.ticks[i]));
    fprintf(f, "</g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n",
            x0, y0, x1 - x0, y1 - y0);
    /* Tick labels: x labels thinned so they never touch (about 7 px a character). */
    char lab[64];
    int every = 1;
    for (int i = 0; i < ax.n_ticks; i++) {
        tick_label(lab, sizeof lab, ax.ticks[i], &ax);
        double room = (double)(x1 - x0) / (ax.n_ticks > 1 ? ax.n_ticks - 1 : 1);
        while (every < ax.n_ticks && room * every < 7.5 * (double)strlen(lab) + 10)
            every++;
    }
    fprintf(f, "<g class=\"xticks\" text-anchor=\"middle\">");
    for (int i = 0; i < ax.n_ticks; i += every) {
        tick_label(lab, sizeof lab, ax.ticks[i], &ax);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\">%s</text>", px_x(&ax, ax.ticks[i]), y1 + 18, lab);
    }
    fprintf(f, "</g>\n<g class=\"yticks\" text-anchor=\"end\">");
    for (int i = 0; i < ay.n_ticks; i++) {
        tick_label(lab, sizeof lab, ay.ticks[i], &ay);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\">%s</text>", x0 - 6, px_y(&ay, ay.ticks[i]) + 4, lab);
    }
    fprintf(f, "</g>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (x0 + x1) / 2, H - 14);
    st_chart_xml_text(f, c->xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\">",
            (y0 + y1) / 2);
    st_chart_xml_text(f, c->ylabel);
    fprintf(f, "%s</text>\n", c->log_y ? " (log scale)" : "");
    int total = 0;
    for (int k = 0; k < c->n_series; k++) {
        svg_series(f, c, &ax, &ay, k);
        total += st_chart_drawn_points(c, &c->series[k]);
    }
    if (total == 0)
        fprintf(
            f,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">no finite values to draw</text>\n",
            (x0 + x1) / 2, (y0 + y1) / 2);
    /* Legend: one row above the plot. */
    fprintf(f, "<g class=\"legend\">");
    double lx = x0;
    for (int k = 0; k < c->n_series; k++) {
        const st_chart_series *s = &c->series[k];
        const bool empty = st_chart_drawn_points(c, s) == 0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>", lx,
                MT - 18, lx + 22, MT - 18, COLORS[k % N_COLORS]);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">", lx + 28, MT - 14);
        st_chart_xml_text(f, s->name);
        fprintf(f, "%s</text>", empty ? " (no finite values)" : "");
        lx += 28 + 7.0 * (double)(strlen(s->name) + (empty ? 19 : 0)) + 24;
    }
    fprintf(f, "</g>\n</svg>\n");
    return st_cli_output_close(&out, f);
}

/* s as a gnuplot double-quoted string: no enhanced-text markup. */
static void gp_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

st_status st_chart_write_png(const st_chart *c, const char *png_path, const char *gnuplot) {
    axis ax, ay;
    make_axes(c, &ax, &ay);
    char dat[4200], gp[4200], log[4200];
    snprintf(dat, sizeof dat, "%s.dat", png_path);
    snprintf(gp, sizeof gp, "%s.gp", png_path);
    snprintf(log, sizeof log, "%s.log", png_path);
    st_cli_output png; /* (gnuplot writes png.tmp, renamed once whole) */
    st_cli_output_name(&png, png_path);
    FILE *fd = fopen(dat, "w"), *fg = fopen(gp, "w");
    if (!fd || !fg) {
        if (fd) fclose(fd);
        if (fg) fclose(fg);
        remove(dat);
        return st_fail(ST_ERR_IO, "%s: cannot open for writing: %s", fd ? gp : dat, strerror(errno));
    }
    fprintf(fg, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10'\nset output ", W + 200, H + 110);
    gp_string(fg, png.tmp);
    fprintf(fg, "\nset termoption noenhanced\nset title ");
    gp_string(fg, c->title);
    fprintf(fg, " font ',13'\nset xlabel ");
    gp_string(fg, c->xlabel);
    fprintf(fg, "\nset ylabel ");
    gp_string(fg, c->ylabel);
    fprintf(fg,
            "\nset grid\nset bmargin 6\nset key at screen 0.5, screen 0.02 center bottom horizontal\nset "
            "xtics %.17g\nset xrange [%.17g:%.17g]\nset yrange [%.17g:%.17g]\n",
            ax.step, ax.lo, ax.hi, ay.lo, ay.hi);
    if (ay.log)
        fprintf(fg, "set logscale y\n");
    else if (fmax(fabs(ay.lo), fabs(ay.hi)) < 1e-3)
        fprintf(fg, "set format y '%%.1e'\n");
    int block = 0;
    for (int k = 0; k < c->n_series; k++) {
        const int n_data = st_chart_drawn_points(c, &c->series[k]);
        if (n_data == 0) continue;
        double *buf;
        const st_chart_series thinned = thin(c, &ax, &c->series[k], &buf), *s = &thinned;
        bool pen = false; /* one blank line is a gap; two would end the block */
        for (int i = 0; i < s->n; i++) {
            if (isfinite(s->x[i]) && drawn(c, s->y[i])) {
                fprintf(fd, "%.17g %.17g\n", s->x[i], s->y[i]);
                pen = true;
            } else if (pen) {
                fprintf(fd, "\n");
                pen = false;
            }
        }
        if (pen) fprintf(fd, "\n");
        fprintf(fd, "\n");
        fprintf(fg, "%s", block ? ", \\\n    " : "plot ");
        gp_string(fg, dat);
        fprintf(fg, " index %d using 1:2 with %s lw 2 lc rgb '%s' title ", block,
                n_data <= MARKER_MAX ? "linespoints pt 7 ps 0.6" : "lines", COLORS[k % N_COLORS]);
        gp_string(fg, s->name);
        free(buf);
        block++;
    }
    if (block == 0)
        fprintf(fg, "set label 1 'no finite values' at graph 0.5, graph 0.5 center\nplot NaN notitle");
    fprintf(fg, "\n");
    bool ok = fclose(fd) == 0;
    ok = fclose(fg) == 0 && ok;
    if (!ok) {
        remove(dat), remove(gp);
        return st_fail(ST_ERR_IO, "%s: write failed: %s", gp, strerror(errno));
    }
    char gp_arg[4300]; /* (a script gnuplot reads as a file, not an option: --out -q) */
    snprintf(gp_arg, sizeof gp_arg, "%s%s", gp[0] == '-' ? "./" : "", gp);
    char *argv[] = {(char *)gnuplot, gp_arg, NULL};
    int rc = st_cli_spawn(argv, NULL, log, 60);
    st_status s = ST_OK;
    if (rc != 0) {
        char *msg = st_cli_read_file(log);
        s = st_fail(ST_ERR_IO, "%s: gnuplot %s: %s", png_path,
                    rc == -2   ? "ran out of time (60 s)"
                    : rc == -1 ? "could not start"
                               : "failed",
                    msg && *msg ? msg : "(no message)");
        free(msg);
    } else {
        s = st_cli_output_commit(&png);
    }
    remove(dat), remove(gp), remove(log);
    if (png.tmp[0]) remove(png.tmp); /* (gnuplot failed: what it wrote) */
    return s;
}
