/* SPDX-License-Identifier: MIT */
/*
 * Line plots as self-contained SVG files (no dependencies), for the
 * benchmarks: latency CDFs (log x), throughput over time, hit rate and
 * accelerator utilisation per epoch.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "cli/bench.h"

#define SVG_W 720.0
#define SVG_H 420.0
#define SVG_L 70.0                      /* margins */
#define SVG_R 20.0
#define SVG_T 40.0
#define SVG_B 55.0

static const char *const svg_colors[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
};

struct svg_box {
    double x0, x1, y0, y1;              /* data ranges */
    bool   log_x;
};

static double svg_xv(const struct svg_box *b, double x)
{
    return b->log_x ? log10(x > 0 ? x : 1e-9) : x;
}

static double svg_px(const struct svg_box *b, double x)
{
    double v = svg_xv(b, x);

    return SVG_L + (v - b->x0) / (b->x1 - b->x0) * (SVG_W - SVG_L - SVG_R);
}

static double svg_py(const struct svg_box *b, double y)
{
    return SVG_H - SVG_B - (y - b->y0) / (b->y1 - b->y0) *
                               (SVG_H - SVG_T - SVG_B);
}

static void svg_range(struct svg_box *b, const struct svg_series *s,
                      size_t n)
{
    b->x0 = b->y0 = INFINITY;
    b->x1 = b->y1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < s[i].n; k++) {
            double x = svg_xv(b, s[i].x[k]);
            b->x0 = fmin(b->x0, x);
            b->x1 = fmax(b->x1, x);
            b->y0 = fmin(b->y0, s[i].y[k]);
            b->y1 = fmax(b->y1, s[i].y[k]);
        }
    }
    if (!isfinite(b->x0)) {
        b->x0 = 0;
        b->x1 = 1;
        b->y0 = 0;
        b->y1 = 1;
    }
    b->y0 = fmin(b->y0, 0);
    if (b->x1 <= b->x0)
        b->x1 = b->x0 + 1;
    if (b->y1 <= b->y0)
        b->y1 = b->y0 + 1;
    b->y1 += (b->y1 - b->y0) * 0.05;
}

static void svg_axes(FILE *f, const struct svg_box *b, const char *xlabel,
                     const char *ylabel)
{
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#333'/>\n",
            SVG_L, SVG_H - SVG_B, SVG_W - SVG_R, SVG_H - SVG_B);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#333'/>\n",
            SVG_L, SVG_T, SVG_L, SVG_H - SVG_B);
    for (int i = 0; i <= 5; i++) {
        double xv = b->x0 + (b->x1 - b->x0) * i / 5;
        double yv = b->y0 + (b->y1 - b->y0) * i / 5;
        double px = SVG_L + (SVG_W - SVG_L - SVG_R) * i / 5;
        double py = SVG_H - SVG_B - (SVG_H - SVG_T - SVG_B) * i / 5;
        fprintf(f, "<text x='%g' y='%g' font-size='11' text-anchor='middle'"
                ">%.3g</text>\n", px, SVG_H - SVG_B + 16,
                b->log_x ? pow(10, xv) : xv);
        fprintf(f, "<text x='%g' y='%g' font-size='11' text-anchor='end'>"
                "%.3g</text>\n", SVG_L - 6, py + 4, yv);
        fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#eee'/>\n",
                SVG_L, py, SVG_W - SVG_R, py);
    }
    fprintf(f, "<text x='%g' y='%g' font-size='12' text-anchor='middle'>"
            "%s</text>\n", (SVG_L + SVG_W - SVG_R) / 2, SVG_H - 12, xlabel);
    fprintf(f, "<text x='16' y='%g' font-size='12' text-anchor='middle' "
            "transform='rotate(-90 16 %g)'>%s</text>\n",
            (SVG_T + SVG_H - SVG_B) / 2, (SVG_T + SVG_H - SVG_B) / 2, ylabel);
}

int svg_plot(const char *path, const char *title, const char *xlabel,
             const char *ylabel, const struct svg_series *s, size_t n,
             bool log_x)
{
    struct svg_box b = {.log_x = log_x};
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return tfs_err(-errno, "cannot write %s", path);
    svg_range(&b, s, n);
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%g' "
            "height='%g' font-family='sans-serif'>\n<rect width='100%%' "
            "height='100%%' fill='white'/>\n<text x='%g' y='24' "
            "font-size='15' text-anchor='middle'>%s</text>\n", SVG_W, SVG_H,
            SVG_W / 2, title);
    svg_axes(f, &b, xlabel, ylabel);
    for (size_t i = 0; i < n; i++) {
        const char *color = svg_colors[i % TFS_ARRAY_LEN(svg_colors)];
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' "
                "points='", color);
        for (size_t k = 0; k < s[i].n; k++)
            fprintf(f, "%.1f,%.1f ", svg_px(&b, s[i].x[k]),
                    svg_py(&b, s[i].y[k]));
        fprintf(f, "'/>\n<text x='%g' y='%g' font-size='12' fill='%s'>%s"
                "</text>\n", SVG_W - SVG_R - 180, SVG_T + 16 + 16 * (double)i,
                color, s[i].name);
    }
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : tfs_err(-EIO, "cannot write %s", path);
}
