/* SPDX-License-Identifier: MIT */
/*
 * The two renderers of the metrics registry (metrics.h): JSON (the
 * control file, tfs_cache_stats_json) and the Prometheus text format
 * (/metrics, tfs_cache_stats_prometheus), both walking the same tables.
 *
 *   fields and names   what one metric renders, in JSON and Prometheus
 *   JSON               members, sections, the "meta" object
 *   Prometheus         counters and gauges, summaries, info
 *
 * Both append to a capped tfs_buf without checking each append: its
 * first failure sticks, and the renderer returns it at the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"
#include "metrics/metrics.h"

/* ---- fields and names ---- */

static const double prom_quantiles[] = {0.5, 0.9, 0.95, 0.99};

/* The quantiles a summary shows in JSON, with their member suffixes. */
static const struct {
    const char *suffix;
    double      q;
} json_quantiles[] = {
    {"_p50_us", 0.50},
    {"_p95_us", 0.95},
    {"_p99_us", 0.99},
};

const char *tfs_metric_type_name(enum tfs_metric_type t)
{
    switch (t) {
    case TFS_METRIC_COUNTER:
        return "counter";
    case TFS_METRIC_GAUGE:
        return "gauge";
    case TFS_METRIC_SUMMARY:
        return "summary";
    case TFS_METRIC_INFO:
        return "info";
    }
    return "gauge";
}

const char *tfs_metric_unit_name(enum tfs_metric_unit u)
{
    static const char *const names[] = {
        [TFS_UNIT_NONE] = "none",       [TFS_UNIT_COUNT] = "count",
        [TFS_UNIT_BYTES] = "bytes",     [TFS_UNIT_BYTES_PER_S] =
                                            "bytes_per_second",
        [TFS_UNIT_SECONDS] = "seconds", [TFS_UNIT_US] = "us",
        [TFS_UNIT_NS] = "ns",
    };

    return (size_t)u < TFS_ARRAY_LEN(names) ? names[u] : "none";
}

size_t tfs_metric_fields(const struct tfs_metric *m,
                         struct tfs_metric_field *out)
{
    size_t n = 0;

    if (m->type != TFS_METRIC_SUMMARY) {
        out[0] = (struct tfs_metric_field){"", m->type, m->unit};
        return 1;
    }
    out[n++] = (struct tfs_metric_field){"_count", TFS_METRIC_COUNTER,
                                         TFS_UNIT_COUNT};
    for (size_t i = 0; i < TFS_ARRAY_LEN(json_quantiles); i++)
        out[n++] = (struct tfs_metric_field){json_quantiles[i].suffix,
                                             TFS_METRIC_GAUGE, TFS_UNIT_US};
    return n;
}

int tfs_metric_prom_name(const struct tfs_metric_section *sec,
                         const struct tfs_metric *m, char *buf, size_t size)
{
    static const char *const suffix[] = {
        [TFS_METRIC_COUNTER] = "_total", [TFS_METRIC_GAUGE] = "",
        [TFS_METRIC_SUMMARY] = "_seconds", [TFS_METRIC_INFO] = "_info",
    };
    int n;

    if (m->prom != NULL)
        n = snprintf(buf, size, "tierfs_%s", m->prom);
    else
        n = snprintf(buf, size, "tierfs_%s%s%s", sec->prom_prefix, m->name,
                     suffix[m->type]);
    return n < 0 || (size_t)n >= size ? TFS_ETOOBIG : 0;
}

/* The snapshot being rendered: a source, and for a table its row. */
struct metric_row {
    const struct tfs_metric_src *src;
    const char                  *data;  /* the row's snapshot */
    const char                  *key;   /* its label value, or NULL */
};

static struct metric_row metric_row(const struct tfs_metric_src *s,
                                    size_t i)
{
    struct metric_row r = {s, s->data, NULL};

    if (s->sec->label != NULL) {
        r.data = (const char *)s->data + i * s->sec->size;
        r.key = s->keys[i];
    }
    return r;
}

/* How many snapshots s holds: its rows, or one. */
static size_t metric_rows(const struct tfs_metric_src *s)
{
    return s->sec->label != NULL ? s->rows : 1;
}

static const void *metric_at(const struct metric_row *s,
                             const struct tfs_metric *m)
{
    return s->data + m->off;
}

static uint64_t metric_u64(const struct metric_row *s,
                           const struct tfs_metric *m)
{
    return *(const uint64_t *)metric_at(s, m);
}

/* A double of a snapshot; 0 for NaN and infinities (not JSON). */
static double metric_f64(const struct metric_row *s,
                         const struct tfs_metric *m)
{
    double v = *(const double *)metric_at(s, m);

    return isfinite(v) ? v : 0.0;
}

static const char *metric_str(const struct metric_row *s,
                              const struct tfs_metric *m)
{
    const char *v = *(const char *const *)metric_at(s, m);

    return v != NULL ? v : "";
}

static const struct tfs_hist *metric_hist(const struct metric_row *s,
                                          const struct tfs_metric *m)
{
    static const struct tfs_hist empty;
    const struct tfs_hist *h = *(const struct tfs_hist *const *)
                                   metric_at(s, m);

    return h != NULL ? h : &empty;
}

/* ---- JSON ---- */

/* A double in its unit's usual precision. */
static void json_f64(struct tfs_buf *b, enum tfs_metric_unit unit, double v)
{
    if (unit == TFS_UNIT_SECONDS)
        tfs_buf_printf(b, "%.6f", v);
    else if (unit == TFS_UNIT_US)
        tfs_buf_printf(b, "%.1f", v);
    else if (unit == TFS_UNIT_BYTES_PER_S || unit == TFS_UNIT_BYTES)
        tfs_buf_printf(b, "%.0f", v);
    else
        tfs_buf_printf(b, "%.17g", v);
}

/* The value of field i of m (tfs_metric_fields). */
static void json_value(struct tfs_buf *b, const struct metric_row *s,
                       const struct tfs_metric *m, size_t i)
{
    const struct tfs_hist *h;

    switch (m->kind) {
    case TFS_METRIC_U64:
        tfs_buf_printf(b, "%" PRIu64, metric_u64(s, m));
        return;
    case TFS_METRIC_F64:
        json_f64(b, m->unit, metric_f64(s, m));
        return;
    case TFS_METRIC_STR:
        tfs_json_put_cstr(b, metric_str(s, m));
        return;
    case TFS_METRIC_HIST:
        h = metric_hist(s, m);
        if (i == 0)
            tfs_buf_printf(b, "%" PRIu64, (uint64_t)atomic_load_explicit(
                               &h->count, memory_order_relaxed));
        else
            json_f64(b, TFS_UNIT_US, (double)tfs_hist_quantile(
                         h, json_quantiles[i - 1].q) / 1e3);
        return;
    }
}

/* A member name: prefix ("fuse.", or ""), name, suffix. */
static void json_key(struct tfs_buf *b, const char *prefix, const char *name,
                     const char *suffix)
{
    char key[160];

    snprintf(key, sizeof(key), "%s%s%s", prefix, name, suffix);
    tfs_json_put_cstr(b, key);
    tfs_buf_puts(b, ": ");
}

/* The members of one snapshot, each after ", " unless *first. */
static void json_members(struct tfs_buf *b, const struct metric_row *s,
                         bool *first)
{
    struct tfs_metric_field f[TFS_METRIC_FIELDS_MAX];

    for (size_t j = 0; j < s->src->sec->n; j++) {
        const struct tfs_metric *m = &s->src->sec->m[j];
        size_t nf = tfs_metric_fields(m, f);

        for (size_t i = 0; i < nf; i++) {
            tfs_buf_puts(b, *first ? "" : ", ");
            *first = false;
            json_key(b, "", m->name, f[i].suffix);
            json_value(b, s, m, i);
        }
    }
}

/* "meta": every member's [type, unit], under its dotted name. */
static void json_meta(struct tfs_buf *b, const struct tfs_metric_src *src,
                      size_t n)
{
    struct tfs_metric_field f[TFS_METRIC_FIELDS_MAX];
    char prefix[64];
    bool first = true;

    tfs_buf_puts(b, "\"meta\": {");
    for (size_t k = 0; k < n; k++) {
        const struct tfs_metric_section *sec = src[k].sec;

        snprintf(prefix, sizeof(prefix), "%s%s", sec->name ? sec->name : "",
                 sec->name == NULL ? "" : sec->label != NULL ? ".*." : ".");
        for (size_t j = 0; j < sec->n; j++) {
            size_t nf = tfs_metric_fields(&sec->m[j], f);

            for (size_t i = 0; i < nf; i++) {
                tfs_buf_puts(b, first ? "" : ", ");
                first = false;
                json_key(b, prefix, sec->m[j].name, f[i].suffix);
                tfs_buf_printf(b, "[\"%s\", \"%s\"]",
                               tfs_metric_type_name(f[i].type),
                               tfs_metric_unit_name(f[i].unit));
            }
        }
    }
    tfs_buf_puts(b, "}");
}

int tfs_metrics_json(struct tfs_buf *b, const struct tfs_metric_src *src,
                     size_t n)
{
    bool first = true;
    int rc = 0;

    tfs_buf_puts(b, "{");
    for (size_t k = 0; k < n && src[k].sec->name == NULL; k++) {
        struct metric_row r = metric_row(&src[k], 0);

        json_members(b, &r, &first);
    }
    for (size_t k = 0; k < n && rc == 0; k++) {
        bool sfirst = true;

        if (src[k].sec->name == NULL)
            continue;
        tfs_buf_puts(b, first ? "\n" : ",\n");
        first = false;
        json_key(b, "", src[k].sec->name, "");
        tfs_buf_puts(b, "{");
        if (src[k].sec->label == NULL) {
            struct metric_row r = metric_row(&src[k], 0);

            json_members(b, &r, &sfirst);
        }
        for (size_t i = 0; src[k].sec->label != NULL && i < src[k].rows;
             i++) {
            struct metric_row r = metric_row(&src[k], i);
            bool rfirst = true;

            tfs_buf_puts(b, i == 0 ? "" : ", ");
            sfirst = false;
            tfs_json_put_cstr(b, r.key);
            tfs_buf_puts(b, ": {");
            json_members(b, &r, &rfirst);
            tfs_buf_puts(b, "}");
        }
        if (src[k].more != NULL) {
            tfs_buf_puts(b, sfirst ? "" : ", ");
            rc = src[k].more(src[k].arg, b);
        }
        tfs_buf_puts(b, "}");
    }
    tfs_buf_puts(b, first ? "\n" : ",\n");
    json_meta(b, src, n);
    tfs_buf_puts(b, "\n}\n");
    return rc < 0 ? rc : tfs_buf_error(b);
}

/* ---- Prometheus ---- */

/* A label value, escaped as the text format wants. */
static void prom_escape(struct tfs_buf *b, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            tfs_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            tfs_buf_puts(b, "\\n");
        else
            tfs_buf_append(b, v, 1);
    }
}

/*
 * A sample's name and labels: name, then {the row's label, extra} (extra
 * "quantile=\"0.5\"" or NULL), then a space.
 */
static void prom_name(struct tfs_buf *b, const char *name,
                      const struct metric_row *r, const char *extra)
{
    tfs_buf_puts(b, name);
    if (r->key == NULL && extra == NULL) {
        tfs_buf_puts(b, " ");
        return;
    }
    tfs_buf_puts(b, "{");
    if (r->key != NULL) {
        tfs_buf_printf(b, "%s=\"", r->src->sec->label);
        prom_escape(b, r->key);
        tfs_buf_puts(b, extra != NULL ? "\"," : "\"");
    }
    if (extra != NULL)
        tfs_buf_puts(b, extra);
    tfs_buf_puts(b, "} ");
}

static void prom_head(struct tfs_buf *b, const char *name,
                      const char *type, const char *help)
{
    tfs_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                   type);
}

/* A summary: quantiles in seconds, the sum and the count. */
static void prom_summary(struct tfs_buf *b, const char *name,
                         const struct metric_row *r,
                         const struct tfs_hist *h)
{
    char q[32];
    char sub[160];

    for (size_t i = 0; i < TFS_ARRAY_LEN(prom_quantiles); i++) {
        snprintf(q, sizeof(q), "quantile=\"%g\"", prom_quantiles[i]);
        prom_name(b, name, r, q);
        tfs_buf_printf(b, "%.9f\n",
                       (double)tfs_hist_quantile(h, prom_quantiles[i]) /
                           1e9);
    }
    snprintf(sub, sizeof(sub), "%s_sum", name);
    prom_name(b, sub, r, NULL);
    tfs_buf_printf(b, "%.9f\n", (double)atomic_load_explicit(
                                    &h->sum_ns, memory_order_relaxed) / 1e9);
    snprintf(sub, sizeof(sub), "%s_count", name);
    prom_name(b, sub, r, NULL);
    tfs_buf_printf(b, "%" PRIu64 "\n", (uint64_t)atomic_load_explicit(
                                           &h->count, memory_order_relaxed));
}

/* An info metric: the string as the value of label "value". */
static void prom_info(struct tfs_buf *b, const char *name,
                      const struct metric_row *r, const char *v)
{
    tfs_buf_printf(b, "%s{", name);
    if (r->key != NULL) {
        tfs_buf_printf(b, "%s=\"", r->src->sec->label);
        prom_escape(b, r->key);
        tfs_buf_puts(b, "\",");
    }
    tfs_buf_puts(b, "value=\"");
    prom_escape(b, v);
    tfs_buf_puts(b, "\"} 1\n");
}

static void prom_metric(struct tfs_buf *b, const struct tfs_metric_src *s,
                        const struct tfs_metric *m)
{
    char name[128];
    size_t rows = metric_rows(s);

    if (tfs_metric_prom_name(s->sec, m, name, sizeof(name)) < 0)
        return;                         /* the unit test sees to it */
    if (rows == 0)
        return;                         /* a table without rows */
    prom_head(b, name, m->type == TFS_METRIC_INFO ? "gauge"
                       : tfs_metric_type_name(m->type), m->help);
    for (size_t i = 0; i < rows; i++) {
        struct metric_row r = metric_row(s, i);

        if (m->kind == TFS_METRIC_HIST) {
            prom_summary(b, name, &r, metric_hist(&r, m));
        } else if (m->kind == TFS_METRIC_STR) {
            prom_info(b, name, &r, metric_str(&r, m));
        } else if (m->kind == TFS_METRIC_F64) {
            prom_name(b, name, &r, NULL);
            tfs_buf_printf(b, "%.17g\n", metric_f64(&r, m));
        } else {
            prom_name(b, name, &r, NULL);
            tfs_buf_printf(b, "%" PRIu64 "\n", metric_u64(&r, m));
        }
    }
}

int tfs_metrics_prometheus(struct tfs_buf *b,
                           const struct tfs_metric_src *src, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        for (size_t j = 0; j < src[k].sec->n; j++)
            prom_metric(b, &src[k], &src[k].sec->m[j]);
    }
    return tfs_buf_error(b);
}
