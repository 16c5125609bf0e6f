/* SPDX-License-Identifier: MIT */
/*
 * Latency histograms and the rendering of counters as JSON (for `tierfs
 * stats` and the C API) and as Prometheus text (for /metrics).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "metrics/metrics.h"

/* Bucket of a value: 4 sub-buckets per power of two. */
static unsigned hist_bucket(uint64_t v)
{
    unsigned e;

    if (v < 4)
        return (unsigned)v;
    e = 63u - (unsigned)__builtin_clzll(v);
    return 4 * (e - 1) + (unsigned)((v >> (e - 2)) & 3);
}

/* Midpoint of a bucket, in the value's unit. */
static uint64_t hist_mid(unsigned b)
{
    unsigned e;
    uint64_t lo;
    uint64_t hi;

    if (b < 4)
        return b;
    e = b / 4 + 1;
    lo = (uint64_t)(4 + b % 4) << (e - 2);
    hi = (uint64_t)(5 + b % 4) << (e - 2);
    return lo + (hi - lo) / 2;
}

uint64_t tfs_hist_bucket_mid(unsigned b)
{
    return hist_mid(b);
}

void tfs_hist_add(struct tfs_hist *h, uint64_t ns)
{
    atomic_fetch_add_explicit(&h->b[hist_bucket(ns)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

uint64_t tfs_hist_quantile(const struct tfs_hist *h, double q)
{
    uint64_t total = 0;
    uint64_t seen = 0;
    uint64_t want;

    for (unsigned i = 0; i < TFS_HIST_BUCKETS; i++)
        total += atomic_load_explicit(&h->b[i], memory_order_relaxed);
    if (total == 0)
        return 0;
    want = (uint64_t)(q * (double)total);
    if (want >= total)
        want = total - 1;
    for (unsigned i = 0; i < TFS_HIST_BUCKETS; i++) {
        seen += atomic_load_explicit(&h->b[i], memory_order_relaxed);
        if (seen > want)
            return hist_mid(i);
    }
    return 0;
}

/* ---- rendering ---- */

struct render {
    char  *buf;
    size_t size;
    size_t len;                         /* bytes needed so far */
};

static void render_printf(struct render *r, const char *fmt, ...)
    TFS_PRINTF(2, 3);

static void render_printf(struct render *r, const char *fmt, ...)
{
    size_t room = r->len < r->size ? r->size - r->len : 0;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(room ? r->buf + r->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->len += (size_t)n;
}

static int render_done(struct render *r, size_t *len)
{
    *len = r->len;
    if (r->len >= r->size) {
        if (r->size > 0)
            r->buf[r->size - 1] = '\0';
        return -ENOSPC;
    }
    return 0;
}

static uint64_t ctr_get(const atomic_uint_fast64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void json_hist(struct render *r, const char *name,
                      const struct tfs_hist *h)
{
    render_printf(r,
                  ", \"%s_count\": %llu, \"%s_p50_us\": %.1f, "
                  "\"%s_p95_us\": %.1f, \"%s_p99_us\": %.1f",
                  name, (unsigned long long)ctr_get(&h->count), name,
                  (double)tfs_hist_quantile(h, 0.50) / 1e3, name,
                  (double)tfs_hist_quantile(h, 0.95) / 1e3, name,
                  (double)tfs_hist_quantile(h, 0.99) / 1e3);
}

int tfs_metrics_json(const struct tfs_metrics_view *v, char *buf,
                     size_t size, size_t *len)
{
    struct render r = {buf, size, 0};
    const struct tfs_counters *c = v->ctr;

    render_printf(&r, "{\"uptime_seconds\": %.3f", (double)v->uptime_ns / 1e9);
#define X(name, help)                                                      \
    render_printf(&r, ", \"" #name "\": %llu",                             \
                  (unsigned long long)ctr_get(&c->name));
    TFS_COUNTERS(X)
#undef X
    render_printf(&r,
                  ", \"stall_seconds\": %.6f, \"retries\": %llu"
                  ", \"cache_bytes_ram\": %llu, \"cache_bytes_disk\": %llu"
                  ", \"cache_capacity_disk\": %llu"
                  ", \"cache_blocks_disk\": %llu, \"disk_tier\": \"%s\"",
                  (double)ctr_get(&c->stall_ns) / 1e9,
                  (unsigned long long)v->retries,
                  (unsigned long long)v->cache_bytes_ram,
                  (unsigned long long)v->cache_bytes_disk,
                  (unsigned long long)v->cache_capacity_disk,
                  (unsigned long long)v->cache_blocks_disk,
                  v->disk_tier ? v->disk_tier : "none");
    json_hist(&r, "backend_get_latency", v->get_latency);
    json_hist(&r, "read_latency", v->read_latency);
    render_printf(&r, "}\n");
    return render_done(&r, len);
}

static void prom_metric(struct render *r, const char *name, const char *type,
                        const char *help, double value)
{
    render_printf(r, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\n"
                  "tierfs_%s %.17g\n", name, help, name, type, name, value);
}

static void prom_hist(struct render *r, const char *name, const char *help,
                      const struct tfs_hist *h)
{
    static const double qs[] = {0.5, 0.9, 0.95, 0.99};

    render_printf(r, "# HELP tierfs_%s_seconds %s\n"
                  "# TYPE tierfs_%s_seconds summary\n", name, help, name);
    for (size_t i = 0; i < TFS_ARRAY_LEN(qs); i++)
        render_printf(r, "tierfs_%s_seconds{quantile=\"%g\"} %.9f\n", name,
                      qs[i], (double)tfs_hist_quantile(h, qs[i]) / 1e9);
    render_printf(r, "tierfs_%s_seconds_sum %.9f\n"
                  "tierfs_%s_seconds_count %llu\n", name,
                  (double)ctr_get(&h->sum_ns) / 1e9, name,
                  (unsigned long long)ctr_get(&h->count));
}

int tfs_metrics_prometheus(const struct tfs_metrics_view *v, char *buf,
                           size_t size, size_t *len)
{
    struct render r = {buf, size, 0};
    const struct tfs_counters *c = v->ctr;

#define X(name, help)                                                      \
    prom_metric(&r, #name "_total", "counter", help,                       \
                (double)ctr_get(&c->name));
    TFS_COUNTERS(X)
#undef X
    prom_metric(&r, "retries_total", "counter",
                "store requests retried by the retry layer",
                (double)v->retries);
    prom_metric(&r, "cache_bytes_ram", "gauge", "bytes in the RAM tier",
                (double)v->cache_bytes_ram);
    prom_metric(&r, "cache_bytes_disk", "gauge", "bytes in the disk tier",
                (double)v->cache_bytes_disk);
    prom_metric(&r, "cache_capacity_disk_bytes", "gauge",
                "byte bound of the disk tier",
                (double)v->cache_capacity_disk);
    prom_metric(&r, "cache_blocks_disk", "gauge", "blocks in the disk tier",
                (double)v->cache_blocks_disk);
    prom_metric(&r, "uptime_seconds", "gauge", "seconds since open",
                (double)v->uptime_ns / 1e9);
    prom_hist(&r, "backend_get_latency", "latency of reads from the store",
              v->get_latency);
    prom_hist(&r, "read_latency", "latency of reads served to readers",
              v->read_latency);
    return render_done(&r, len);
}
