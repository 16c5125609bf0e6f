/* SPDX-License-Identifier: MIT */
/*
 * Latency histograms: four sub-buckets per power of two of nanoseconds
 * (about 19% resolution), enough for p50/p95/p99 of latencies from 1 us
 * to hours.  Every field is a relaxed atomic, so any thread may add
 * without a lock; readers get a consistent-enough snapshot.
 *
 * Not installed, but meant for the CLI as well as the library: tierfs
 * bench keeps its per-operation latencies in one (src/cli/bench.h).  The
 * metrics registry (metrics.h) renders the library's histograms.
 */
#ifndef TFS_METRICS_HIST_H
#define TFS_METRICS_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define TFS_HIST_BUCKETS 256

/* Zero-initialised (calloc, or = {0}) is empty. */
struct tfs_hist {
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
    atomic_uint_fast64_t b[TFS_HIST_BUCKETS];
};

/* Count one value of ns nanoseconds.  Thread-safe. */
void tfs_hist_add(struct tfs_hist *h, uint64_t ns);
/* The middle of bucket b, in nanoseconds (for plotting a CDF). */
uint64_t tfs_hist_bucket_mid(unsigned b);
/* The q-quantile (0..1) in nanoseconds, 0 when empty. */
uint64_t tfs_hist_quantile(const struct tfs_hist *h, double q);

#endif /* TFS_METRICS_HIST_H */
