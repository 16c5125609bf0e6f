/* SPDX-License-Identifier: MIT */
/*
 * The metrics registry (internal).  Every module declares the figures it
 * shows once, as a table of struct tfs_metric (name, type, unit, help and
 * where the value sits in a snapshot struct the module fills), and two
 * renderers read the tables: tfs_metrics_json (the control file, the C
 * API's tfs_cache_stats_json) and tfs_metrics_prometheus (/metrics).  So
 * every metric appears in both, under names one rule derives (libuv's one
 * map and two functions over UV_ERRNO_MAP).
 *
 * A module writes its figures as an X-macro of rows
 *     X(kind, name, type, unit, prom, help)
 * which expands once into its snapshot struct (TFS_METRIC_FIELD) and
 * once into its table (TFS_METRIC_DESC); see WB_METRICS in wb/wb.h.
 *
 * Sections, in the order the control file shows them (registry.c):
 *   cache      top-level members           tfs_metrics_cache  cache.c
 *   fuse       "fuse", tierfs_fuse_*       tfs_metrics_fuse   fuse/ctl.c
 *   store      "store", tierfs_store_*     tfs_metrics_store  store.c
 *   endpoints  "endpoints", tierfs_s3_endpoint_*{endpoint=}
 *                                          tfs_metrics_endpoint (a table)
 *                                          store/s3_balance.c
 *   writeback  "writeback", tierfs_wb_*    tfs_metrics_wb     wb/wb.c
 *   fault      "fault", tierfs_fault_*     tfs_metrics_fault  fault.c
 *   retry      "retry", tierfs_retry_*     tfs_metrics_retry  retry.c
 *   group      "group", tierfs_group_*     tfs_metrics_group  group/group.c
 *   peers      "peers", tierfs_peer_*{peer=}  tfs_metrics_peers  (a table)
 *   shared     "shared", tierfs_shared_*   tfs_metrics_shared tier/shared.c
 *
 * Histograms are in hist.h (also used by the CLI).
 */
#ifndef TFS_METRICS_H
#define TFS_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "metrics/hist.h"

enum tfs_metric_type {
    TFS_METRIC_COUNTER,                 /* monotonic since open */
    TFS_METRIC_GAUGE,                   /* a level, now */
    TFS_METRIC_SUMMARY,                 /* a latency histogram */
    TFS_METRIC_INFO,                    /* a string */
};

enum tfs_metric_unit {
    TFS_UNIT_NONE,                      /* an identifier or a string */
    TFS_UNIT_COUNT,
    TFS_UNIT_BYTES,
    TFS_UNIT_BYTES_PER_S,
    TFS_UNIT_SECONDS,
    TFS_UNIT_US,
    TFS_UNIT_NS,
};

/* The C type of a value in its snapshot (TFS_METRIC_CTYPE_<kind>). */
enum tfs_metric_kind {
    TFS_METRIC_U64,                     /* uint64_t */
    TFS_METRIC_F64,                     /* double */
    TFS_METRIC_STR,                     /* const char *; NULL is "" */
    TFS_METRIC_HIST,                    /* const struct tfs_hist *; NULL
                                           is empty.  Type SUMMARY */
};

/*
 * One metric.  JSON: "name" in its section's object, in unit; a SUMMARY
 * is four members, name_count and name_p50_us, _p95_us, _p99_us.
 * Prometheus: tierfs_ + prom, or when prom is NULL tierfs_ + the
 * section's prefix + name + "_total" (COUNTER), "_seconds" (SUMMARY, in
 * seconds, quantiles 0.5 0.9 0.95 0.99 with _sum and _count), "_info"
 * (INFO: tierfs_x_info{value="..."} 1) or nothing (GAUGE).  The sample
 * of a counter or gauge is the JSON number, in the same unit.
 */
struct tfs_metric {
    const char          *name;          /* JSON member, [a-z0-9_]+ */
    const char          *prom;          /* Prometheus name after
                                           "tierfs_", or NULL: derived */
    enum tfs_metric_kind kind;
    enum tfs_metric_type type;
    enum tfs_metric_unit unit;          /* of the JSON value */
    size_t               off;           /* of the value in the snapshot */
    const char          *help;          /* one line: # HELP, the docs */
};

/* The C types of the kinds, for snapshot structs. */
#define TFS_METRIC_CTYPE_U64 uint64_t
#define TFS_METRIC_CTYPE_F64 double
#define TFS_METRIC_CTYPE_STR const char *
#define TFS_METRIC_CTYPE_HIST const struct tfs_hist *

/* X-macro expanders: a snapshot field; a table row for snapshot st
   (field and JSON name apart, or the same). */
#define TFS_METRIC_FIELD(kind, name, type, unit, prom, help)               \
    TFS_METRIC_CTYPE_##kind name;
#define TFS_METRIC_DESC_AT(st, field, kind, name, type, unit, prom, help)  \
    {name, prom, TFS_METRIC_##kind, TFS_METRIC_##type, TFS_UNIT_##unit,    \
     offsetof(st, field), help},
#define TFS_METRIC_DESC(st, kind, name, type, unit, prom, help)            \
    TFS_METRIC_DESC_AT(st, name, kind, #name, type, unit, prom, help)

struct tfs_metric_section {
    const char              *name;      /* JSON object, or NULL: members
                                           of the top level */
    const char              *prom_prefix; /* "", "fuse_", "wb_" */
    const char              *when;      /* when a mount shows it (docs) */
    const struct tfs_metric *m;
    size_t                   n;
    size_t                   size;      /* of the snapshot struct */
    const char              *label;     /* NULL: one snapshot.  A table
                                           section: one snapshot a row,
                                           each named by this label's
                                           value ("peer", "endpoint") */
};

/* More JSON members of a section after its metrics (the write-back's
   parked list): appended to b, whole members, no leading comma. */
typedef int tfs_metric_json_fn(void *arg, struct tfs_buf *b);

/* One section to render, with its filled snapshot (borrowed). */
struct tfs_metric_src {
    const struct tfs_metric_section *sec;
    const void                      *data;  /* sec->size bytes */
    tfs_metric_json_fn              *more;  /* or NULL */
    void                            *arg;   /* for more */
    /* A table section (sec->label): rows snapshots at data, sec->size
       apart, row i named keys[i]. */
    const char *const               *keys;
    size_t                           rows;
};

/*
 * Append one JSON object: the top-level sections' members, then each
 * named section as an object (a table section: an object of its rows,
 * each an object under its key), then "meta", which maps every number's
 * dotted name ("read_bytes", "fuse.reads", "peers.*.requests") to [type, unit] as
 * tfs_metric_type_name and tfs_metric_unit_name spell them ("counter",
 * "bytes"), so readers need not guess from names.  Top-level sections
 * come first in src.  Errors: those of tfs_buf_append and of more.
 */
int tfs_metrics_json(struct tfs_buf *b, const struct tfs_metric_src *src,
                     size_t n);
/* Append the Prometheus text exposition (format 0.0.4) of src: a table
   section's rows are one family a metric, a sample a row with the
   section's label (tierfs_peer_requests_total{peer="h:7070"}). */
int tfs_metrics_prometheus(struct tfs_buf *b,
                           const struct tfs_metric_src *src, size_t n);

/* "counter", "gauge", "summary", "info". */
const char *tfs_metric_type_name(enum tfs_metric_type t);
/* "none", "count", "bytes", "bytes_per_second", "seconds", "us", "ns". */
const char *tfs_metric_unit_name(enum tfs_metric_unit u);

/* One JSON member a metric renders (a summary renders four). */
struct tfs_metric_field {
    const char          *suffix;        /* after the name: "", "_p95_us" */
    enum tfs_metric_type type;          /* COUNTER, GAUGE or INFO */
    enum tfs_metric_unit unit;
};
#define TFS_METRIC_FIELDS_MAX 4
/* m's JSON members into out (TFS_METRIC_FIELDS_MAX); how many. */
size_t tfs_metric_fields(const struct tfs_metric *m,
                         struct tfs_metric_field *out);
/* m's Prometheus name with "tierfs_"; TFS_ETOOBIG when size is short. */
int tfs_metric_prom_name(const struct tfs_metric_section *sec,
                         const struct tfs_metric *m, char *buf,
                         size_t size);

/* ---- the registry (registry.c) ---- */

extern const struct tfs_metric_section tfs_metrics_cache;
extern const struct tfs_metric_section tfs_metrics_fuse;
extern const struct tfs_metric_section tfs_metrics_hints;
extern const struct tfs_metric_section tfs_metrics_store;
extern const struct tfs_metric_section tfs_metrics_endpoint;
extern const struct tfs_metric_section tfs_metrics_wb;
extern const struct tfs_metric_section tfs_metrics_fault;
extern const struct tfs_metric_section tfs_metrics_retry;
extern const struct tfs_metric_section tfs_metrics_group;
extern const struct tfs_metric_section tfs_metrics_peers;
extern const struct tfs_metric_section tfs_metrics_shared;

/* Every section, in the control file's order. */
extern const struct tfs_metric_section *const tfs_metric_registry[];
extern const size_t tfs_metric_registry_len;

/* ---- the cache's figures (the top level) ---- */

/* The cache's counters, X(name, unit, help): all monotonic. */
#define TFS_COUNTERS(X)                                                    \
    X(read_calls, COUNT, "reads served to readers")                        \
    X(read_bytes, BYTES, "bytes returned to readers")                      \
    X(hit_bytes_ram, BYTES, "bytes served from the RAM tier")              \
    X(hit_bytes_disk, BYTES, "bytes served from the disk tier")            \
    X(miss_bytes, BYTES, "bytes that had to come from the store")          \
    X(hit_bytes_peer, BYTES,                                               \
      "bytes that came from a peer of the cache group")                    \
    X(peer_blocks, COUNT, "blocks fetched from a peer of the cache group") \
    X(hit_bytes_shared, BYTES,                                             \
      "bytes that came from the shared cache tier")                        \
    X(shared_blocks, COUNT, "blocks fetched from the shared cache tier")   \
    X(backend_get_count, COUNT, "ranged reads sent to the store")          \
    X(backend_get_bytes, BYTES, "bytes read from the store")               \
    X(backend_get_errors, COUNT, "failed reads from the store")            \
    X(span_gets, COUNT, "store reads that carried several readahead blocks") \
    X(span_blocks, COUNT, "blocks read by those span reads")               \
    X(prefetch_bytes_issued, BYTES, "bytes requested by readahead/prefetch") \
    X(prefetch_bytes_used, BYTES, "prefetched bytes later read")           \
    X(prefetch_bytes_wasted, BYTES, "prefetched bytes evicted unread")     \
    X(hedged_gets, COUNT, "second reads sent after the p95 latency")       \
    X(hedge_wins, COUNT, "hedged reads that finished first")               \
    X(hedges_skipped_busy, COUNT,                                          \
      "hedges not sent: the reader pool was busy")                         \
    X(open_sent_waits, COUNT,                                              \
      "opens answered once their small file's GET was sent")               \
    X(open_sent_late, COUNT,                                               \
      "of those, answered after 2 ms without it")                          \
    X(evicted_bytes, BYTES, "bytes evicted from the disk tier")            \
    X(evicted_bytes_ram, BYTES, "bytes evicted from the RAM tier")         \
    X(admission_rejects, COUNT, "blocks the disk tier declined to admit")  \
    X(disk_write_bytes, BYTES, "bytes written to the disk tier")           \
    X(disk_write_dropped, COUNT, "disk writes skipped (queue full or error)") \
    X(disk_write_batches, COUNT,                                           \
      "disk writer wake-ups that wrote queued blocks")                     \
    X(corrupt_blocks, COUNT, "disk blocks that failed their checksum")     \
    X(store_checksum_mismatch, COUNT,                                      \
      "store reads that failed end-to-end checks")                         \
    X(store_verified_blocks, COUNT,                                        \
      "blocks checked end to end (MD5 or reread)")                         \
    X(stall_ns, NS, "time readers spent waiting for blocks")               \
    X(meta_hits, COUNT, "stats and listings served from the metadata cache") \
    X(meta_misses, COUNT, "stats and listings that went to the store")     \
    X(meta_stale_served, COUNT,                                            \
      "expired stats served, the store unreachable")                       \
    X(warmup_bytes, BYTES, "bytes loaded by warmup")

struct tfs_counters {
#define TFS_COUNTER_FIELD_(name, unit, help) atomic_uint_fast64_t name;
    TFS_COUNTERS(TFS_COUNTER_FIELD_)
#undef TFS_COUNTER_FIELD_
};

#define TFS_COUNT(ctr, field, n)                                           \
    atomic_fetch_add_explicit(&(ctr)->field, (uint64_t)(n),                \
                              memory_order_relaxed)

/* The rest of the cache's figures, shown after the counters. */
#define TFS_CACHE_METRICS(X)                                               \
    X(F64, stall_seconds, COUNTER, SECONDS, NULL,                          \
      "stall_ns in seconds: the data-stall figure")                        \
    X(U64, retries, COUNTER, COUNT, NULL,                                  \
      "store requests retried by the retry layer")                         \
    X(U64, cache_bytes_ram, GAUGE, BYTES, NULL, "bytes in the RAM tier")   \
    X(U64, cache_capacity_ram, GAUGE, BYTES, "cache_capacity_ram_bytes",   \
      "byte bound of the RAM tier (mem_cache)")                            \
    X(U64, ram_pool_idle_bytes, GAUGE, BYTES, NULL,                        \
      "free block buffers kept for reuse, beside the RAM tier")            \
    X(U64, ram_pool_out_bytes, GAUGE, BYTES, NULL,                         \
      "block buffers in use, as allocated: the RAM tier's blocks, blocks " \
      "loading, evicted blocks still being read")                          \
    X(U64, cache_bytes_disk, GAUGE, BYTES, NULL, "bytes in the disk tier") \
    X(U64, cache_capacity_disk, GAUGE, BYTES, "cache_capacity_disk_bytes", \
      "byte bound of the disk tier")                                       \
    X(U64, cache_blocks_disk, GAUGE, COUNT, NULL, "blocks in the disk tier") \
    X(STR, disk_tier, INFO, NONE, NULL,                                    \
      "the disk tier: on, none (no cache dir), or off: why")               \
    X(HIST, backend_get_latency, SUMMARY, US, NULL,                        \
      "latency of reads from the store")                                   \
    X(HIST, read_latency, SUMMARY, US, NULL,                               \
      "latency of reads served to readers")                                \
    X(F64, uptime_seconds, GAUGE, SECONDS, NULL,                           \
      "seconds since the cache was opened")

/* A snapshot of the cache's figures (tfs_metrics_cache's struct). */
struct tfs_cache_metrics {
#define TFS_COUNTER_FIELD_(name, unit, help) uint64_t name;
    TFS_COUNTERS(TFS_COUNTER_FIELD_)
#undef TFS_COUNTER_FIELD_
    TFS_CACHE_METRICS(TFS_METRIC_FIELD)
};

struct tfs_cache;

/* Fill out from c (cache.c); the histograms stay c's.  Thread-safe. */
void tfs_cache_metrics_get(struct tfs_cache *c, struct tfs_cache_metrics *out);

#endif /* TFS_METRICS_H */
