/* SPDX-License-Identifier: MIT */
/*
 * The fault store: a wrapper ("fault+URI") that makes the store below it
 * behave like a slow or flaky remote, for tests and demos on machines
 * without netem.  It adds latency, caps bandwidth, injects errors, flips
 * bytes of reads and cuts the store off (partitions).  Its options are
 * listed in docs/wrappers.md; with none it passes every call through
 * unchanged.
 *
 * The functions here take any store: the first fault layer of the chain
 * is the one they act on.
 */
#ifndef TIERFS_FAULT_H
#define TIERFS_FAULT_H

#include <stdint.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_store;

/* What a fault layer has done since it was opened. */
struct tfs_fault_stats {
    uint64_t calls;                     /* operations that entered it */
    uint64_t injected_errors;           /* failed with the injected error */
    uint64_t flipped_reads;             /* reads returned with a bad byte */
    uint64_t delayed_calls;             /* waited for latency or jitter */
    uint64_t delay_ns_total;            /* ns of that latency, summed */
    uint64_t partition_waits;           /* met a partition (hang/refuse) */
    uint64_t partition_ns_total;        /* ns spent hanging in them */
    uint64_t throttled_bytes;           /* bytes charged to the bw cap */
    uint64_t throttle_ns_total;         /* ns spent waiting for the cap */
    uint64_t timeouts;                  /* -ETIMEDOUT: deadline passed
                                           while this layer stalled */
};

/*
 * Copy the counters of the first fault layer of st into out; all zero
 * when st has none.  Thread-safe.
 */
TFS_API void tfs_fault_get_stats(struct tfs_store *st,
                                 struct tfs_fault_stats *out);

/*
 * Change the settings of the first fault layer of st while it is in use.
 * options has the URI query syntax ("error_rate=0.5&latency_ms=20"); the
 * names it gives take the new values, the others keep theirs.  A new
 * "partition" restarts its windows' clock at this call; a new "seed"
 * restarts the seeded random sequence.  Calls already past the fault
 * layer finish under the old settings; a call hanging in a partition
 * sees the new ones within about 10 ms.
 *
 * Errors: TFS_EOPTION (unknown name or bad value; the detail names it,
 * and no setting changes), -EINVAL (st has no fault layer), -ENOMEM.
 * Thread-safe.
 */
TFS_API int tfs_fault_configure(struct tfs_store *st, const char *options);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_FAULT_H */
