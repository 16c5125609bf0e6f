/* SPDX-License-Identifier: MIT */
/*
 * The shared cache tier (docs/group.md, "Shared tier"): an object store
 * the cluster already runs fast (Ceph RGW on NVMe, MinIO, AIStore) that
 * holds copies of blocks for every node.  On a local miss (after the
 * group's owner peer, if any) a block is read from there; on a miss
 * there, from the capacity store, and then written there in the
 * background.
 *
 * Each block is one immutable object, PREFIX/v1/XX/ID, where ID is the
 * block id in hex (a hash of the capacity store's identity, the object's
 * key and version, the block index and the block size) and XX its first
 * two digits.  The object is a 48-byte header and the block's bytes:
 *
 *   0   "TFSBLK1\0"
 *   8   the block id (16 bytes)
 *   24  the block's length (LE64)
 *   32  XXH3-64 of the bytes (LE64)
 *   40  XXH3-64 of bytes 0..39 (LE64)
 *
 * Every read checks all of it; a copy that fails is counted, read from
 * the capacity store instead and written again.
 *
 * The access log, for `tierfs tier gc` (tier/gc.h): the ids of the blocks
 * a node read from the tier are kept in memory and written, at most every
 * TFS_SHARED_LOG_PERIOD_S seconds after the first of them (sooner past
 * TFS_SHARED_LOG_IDS ids) and at close, as one small object
 * PREFIX/access/HOST-PID-UNIXTIME-SEQ: the line "tierfs-access 1", then
 * one 32-digit lowercase hex id per line.  Its LastModified is when those
 * blocks were last read (within one period); no node ever reads another's
 * log or writes an object twice, so nothing needs coordinating.
 */
#ifndef TFS_TIER_SHARED_H
#define TFS_TIER_SHARED_H

#include <stdint.h>

#include "metrics/metrics.h"

struct tfs_cache;
struct tfs_shared;

#define TFS_SHARED_HDR 48
#define TFS_SHARED_QUEUE_MAX (256u << 20)   /* bytes waiting to be written */
#define TFS_SHARED_TIMEOUT_MS 5000          /* one read of the tier */
#define TFS_SHARED_LOG_PERIOD_S 60          /* access log written */
#define TFS_SHARED_LOG_IDS 65536            /* ids before it is written */
#define TFS_SHARED_LOG_DIR "access/"
#define TFS_SHARED_LOG_MAGIC "tierfs-access 1\n"

/*
 * Open the tier at uri (any store URI: s3://bucket/prefix?endpoint=...)
 * in front of cache c's store, and add it to c's sources.  Errors: the
 * store's, naming uri.
 */
int tfs_shared_open(struct tfs_shared **out, const char *uri,
                    struct tfs_cache *c);
/* Remove it from the cache's sources, write what is queued, close. */
void tfs_shared_close(struct tfs_shared *s);

#define TFS_SHARED_METRICS(X)                                              \
    X(STR, uri, INFO, NONE, NULL, "the shared tier's store")               \
    X(U64, hits, COUNTER, COUNT, NULL, "blocks read from the shared tier")  \
    X(U64, hit_bytes, COUNTER, BYTES, NULL, "bytes read from it")          \
    X(U64, misses, COUNTER, COUNT, NULL,                                   \
      "blocks it did not hold (read from the capacity store)")             \
    X(U64, read_errors, COUNTER, COUNT, NULL,                              \
      "reads of it that failed (read from the capacity store)")            \
    X(U64, corrupt, COUNTER, COUNT, NULL,                                  \
      "copies that failed their header or checksum check")                 \
    X(U64, writes, COUNTER, COUNT, NULL, "blocks written to it")           \
    X(U64, write_bytes, COUNTER, BYTES, NULL, "bytes written to it")       \
    X(U64, write_errors, COUNTER, COUNT, NULL, "writes that failed")       \
    X(U64, write_dropped, COUNTER, COUNT, NULL,                            \
      "copies not written: the queue was full")                            \
    X(U64, queued_bytes, GAUGE, BYTES, NULL, "bytes waiting to be written") \
    X(U64, access_logs, COUNTER, COUNT, NULL,                              \
      "access-log objects written (for tierfs tier gc)")                   \
    X(U64, access_log_errors, COUNTER, COUNT, NULL,                        \
      "access-log objects not written (failed, or no memory)")             \
    X(HIST, latency, SUMMARY, US, NULL, "reads of it that hit")

struct tfs_shared_metrics {
    TFS_SHARED_METRICS(TFS_METRIC_FIELD)
};

void tfs_shared_metrics_get(struct tfs_shared *s,
                            struct tfs_shared_metrics *m);

/* The object name of block id (16 bytes), under the URI's root. */
void tfs_shared_key(char *out, size_t size, const uint8_t *id);

#endif /* TFS_TIER_SHARED_H */
