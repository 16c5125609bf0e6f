/* SPDX-License-Identifier: MIT */
/*
 * The retry store: a wrapper ("retry+URI") that retries operations of the
 * store below it which fail with a retryable error (tfs_err_is_retryable:
 * timeouts, resets, throttling, server errors), with capped exponential
 * backoff and full jitter, under a per-attempt timeout and an overall
 * deadline per operation.  Other errors return at once.  Its options and
 * the deadline model are described in docs/wrappers.md.
 */
#ifndef TIERFS_RETRY_H
#define TIERFS_RETRY_H

#include <stdint.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_store;

/* What a retry layer has done since it was opened. */
struct tfs_retry_stats {
    uint64_t calls;                     /* operations that entered it */
    uint64_t retries;                   /* attempts after the first */
    uint64_t giveups;                   /* failed with attempts exhausted */
    uint64_t deadline_exceeded;         /* failed at the overall deadline */
};

/*
 * Copy the counters of the first retry layer of st into out; all zero
 * when st has none.  Thread-safe.
 */
TFS_API void tfs_retry_get_stats(struct tfs_store *st,
                                 struct tfs_retry_stats *out);

/*
 * The overall deadline, in ms, that the first retry layer of st gives
 * one operation moving bytes (deadline_ms plus the min_rate allowance,
 * docs/wrappers.md); 0 when st has no retry layer or no deadline.  A
 * caller that queues work before the store sees it (the fetch engine)
 * starts this clock at the request, not when the work is taken up.
 */
TFS_API uint64_t tfs_retry_deadline_ms(struct tfs_store *st, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_RETRY_H */
