/* SPDX-License-Identifier: MIT */
/*
 * Latency histograms (hist.h): the bucket of a value, the midpoint of a
 * bucket, and quantiles over a snapshot of the buckets.
 */
#include "metrics/hist.h"

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
