/* SPDX-License-Identifier: MIT */
/*
 * Counters and latency histograms (internal).  Everything is a relaxed
 * atomic, so any thread may count without a lock; readers get a
 * consistent-enough snapshot for monitoring.
 *
 * Histograms have four sub-buckets per power of two of nanoseconds
 * (about 19% resolution), enough for p50/p95/p99 of latencies from 1 us
 * to hours.
 */
#ifndef TFS_METRICS_H
#define TFS_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/util.h"

#define TFS_HIST_BUCKETS 256

struct tfs_hist {
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
    atomic_uint_fast64_t b[TFS_HIST_BUCKETS];
};

void tfs_hist_add(struct tfs_hist *h, uint64_t ns);
/* The middle of bucket b, in nanoseconds (for plotting a CDF). */
uint64_t tfs_hist_bucket_mid(unsigned b);
/* The q-quantile (0..1) in nanoseconds, 0 when empty. */
uint64_t tfs_hist_quantile(const struct tfs_hist *h, double q);

/* The cache's counters; every field is monotonic unless marked gauge. */
#define TFS_COUNTERS(X)                                                    \
    X(read_calls, "reads served to readers")                               \
    X(read_bytes, "bytes returned to readers")                             \
    X(hit_bytes_ram, "bytes served from the RAM tier")                     \
    X(hit_bytes_disk, "bytes served from the disk tier")                   \
    X(miss_bytes, "bytes that had to come from the store")                 \
    X(backend_get_count, "ranged reads sent to the store")                 \
    X(backend_get_bytes, "bytes read from the store")                      \
    X(backend_get_errors, "failed reads from the store")                   \
    X(prefetch_bytes_issued, "bytes requested by readahead/prefetch")      \
    X(prefetch_bytes_used, "prefetched bytes later read")                  \
    X(prefetch_bytes_wasted, "prefetched bytes evicted unread")            \
    X(hedged_gets, "second reads sent after the p95 latency")              \
    X(hedge_wins, "hedged reads that finished first")                      \
    X(hedges_skipped_busy, "hedges not sent: the reader pool was busy")     \
    X(evicted_bytes, "bytes evicted from the disk tier")                   \
    X(evicted_bytes_ram, "bytes evicted from the RAM tier")                \
    X(admission_rejects, "blocks the disk tier declined to admit")         \
    X(disk_write_bytes, "bytes written to the disk tier")                  \
    X(disk_write_dropped, "disk writes skipped (queue full or error)")     \
    X(corrupt_blocks, "disk blocks that failed their checksum")            \
    X(store_checksum_mismatch, "store reads that failed end-to-end checks") \
    X(store_verified_blocks, "blocks checked end to end (MD5 or reread)")  \
    X(stall_ns, "time readers spent waiting for blocks")                   \
    X(meta_hits, "stats and listings served from the metadata cache")      \
    X(meta_misses, "stats and listings that went to the store")            \
    X(meta_stale_served, "expired stats served, the store unreachable")    \
    X(warmup_bytes, "bytes loaded by warmup")

struct tfs_counters {
#define TFS_COUNTER_FIELD_(name, help) atomic_uint_fast64_t name;
    TFS_COUNTERS(TFS_COUNTER_FIELD_)
#undef TFS_COUNTER_FIELD_
};

#define TFS_COUNT(ctr, field, n)                                           \
    atomic_fetch_add_explicit(&(ctr)->field, (uint64_t)(n),                \
                              memory_order_relaxed)

/* Gauges and histograms rendered beside the counters. */
struct tfs_metrics_view {
    const struct tfs_counters *ctr;
    const struct tfs_hist     *get_latency;   /* backend reads */
    const struct tfs_hist     *read_latency;  /* reader-visible reads */
    uint64_t cache_bytes_ram;
    uint64_t cache_bytes_disk;
    uint64_t cache_capacity_disk;
    uint64_t cache_blocks_disk;
    const char *disk_tier;              /* "on", "none", "off: why" */
    uint64_t retries;                   /* from a retry layer, if any */
    uint64_t uptime_ns;
};

/* Render as JSON or Prometheus text; -ENOSPC with *len the size needed. */
int tfs_metrics_json(const struct tfs_metrics_view *v, char *buf,
                     size_t size, size_t *len);
int tfs_metrics_prometheus(const struct tfs_metrics_view *v, char *buf,
                           size_t size, size_t *len);

#endif /* TFS_METRICS_H */
