/* SPDX-License-Identifier: MIT */
/*
 * The s3 store's "endpoints" metrics section (not installed): one row per
 * endpoint (gateway) the store balances over, keyed by the endpoint's
 * URL.  Defined in s3_balance.c; filled for the control file and
 * /metrics by src/fuse/ctl.c.
 */
#ifndef TFS_S3_METRICS_H
#define TFS_S3_METRICS_H

#include <stddef.h>

#include "metrics/metrics.h"

struct tfs_store;

#define TFS_S3_MAX_ENDPOINTS 64         /* endpoints of one store */

/* X(kind, name, type, unit, prom, help), metrics.h's row form. */
#define TFS_S3_EP_METRICS(X)                                               \
    X(U64, up, GAUGE, COUNT, NULL,                                         \
      "1 while the endpoint takes requests, 0 while ejected")              \
    X(U64, outstanding, GAUGE, COUNT, NULL,                                \
      "requests in flight on the endpoint now")                            \
    X(U64, requests, COUNTER, COUNT, NULL, "requests sent to the endpoint") \
    X(U64, bytes_in, COUNTER, BYTES, NULL,                                 \
      "body bytes received from the endpoint")                             \
    X(U64, bytes_out, COUNTER, BYTES, NULL, "body bytes sent to the endpoint") \
    X(U64, errors, COUNTER, COUNT, NULL,                                   \
      "requests that failed there: network error, timeout, reset, 5xx")    \
    X(U64, ejections, COUNTER, COUNT, NULL,                                \
      "times the endpoint was marked down")                                \
    X(U64, probes, COUNTER, COUNT, NULL,                                   \
      "health checks sent to the endpoint while down")                     \
    X(F64, down_seconds, COUNTER, SECONDS, NULL,                           \
      "time the endpoint spent ejected")                                   \
    X(HIST, latency, SUMMARY, US, NULL,                                    \
      "latency of requests to the endpoint")

/* One row's snapshot; latency points at the store's own histogram. */
struct tfs_s3_ep_metrics {
    TFS_S3_EP_METRICS(TFS_METRIC_FIELD)
};

/*
 * Fill out[0..) and keys[0..) (the endpoint URLs, valid while the store
 * is open) with up to max rows of the s3 layer of st's chain.  Returns
 * how many rows; 0 when the chain has no s3 store.  Thread-safe.
 */
size_t tfs_s3_endpoint_metrics(struct tfs_store *st,
                               struct tfs_s3_ep_metrics *out,
                               const char **keys, size_t max);

#endif /* TFS_S3_METRICS_H */
