/* SPDX-License-Identifier: MIT */
/*
 * Eviction of a shared cache tier (tier/shared.h has the layout):
 * `tierfs tier gc --max-size SIZE URI` and `tierfs tier ls URI`.
 *
 * A block object's last access is the latest of its LastModified (when
 * it was written) and the LastModified of every access log (PREFIX/
 * access/...) that names it.  gc removes block objects oldest first
 * until those under v1/ total at most max_size bytes, then the access
 * logs that no longer decide any remaining block's age: those older than
 * the oldest remaining last access (and, with keep_log_ns, those older
 * than that window).  Every time is the store's own clock (LastModified),
 * so the nodes' clocks never matter.
 *
 * It needs no lock and no coordination with the nodes: an object written
 * after the listing is not seen and stays; a block removed while a node
 * reads it is a miss there (read from the capacity store, written again).
 * Keys under v1/ that are not of a block's form are counted apart and
 * left alone; so are access logs that do not parse.
 */
#ifndef TFS_TIER_GC_H
#define TFS_TIER_GC_H

#include <stdbool.h>
#include <stdint.h>

struct tfs_store;

/* What gc is told of each object it removes (or, dry, would remove). */
typedef void tfs_tier_gc_fn(void *arg, const char *key, uint64_t size,
                            int64_t last_ns, bool is_log);

struct tfs_tier_gc_opts {
    uint64_t        max_size;           /* bytes of blocks to leave at most;
                                           UINT64_MAX: remove none */
    int64_t         keep_log_ns;        /* > 0: logs older than now minus
                                           this go too */
    int64_t         now_ns;             /* wall clock for keep_log_ns;
                                           0: the machine's */
    bool            dry_run;            /* remove nothing, tell each */
    tfs_tier_gc_fn *each;               /* or NULL */
    void           *arg;
};

struct tfs_tier_gc_result {
    uint64_t objects;                   /* block objects found */
    uint64_t bytes;                     /* their bytes */
    uint64_t removed;                   /* block objects removed */
    uint64_t removed_bytes;             /* their bytes */
    uint64_t logs;                      /* access logs read */
    uint64_t logs_removed;
    uint64_t logs_bad;                  /* unreadable: left alone */
    uint64_t others;                    /* other keys under v1/: left */
    uint64_t errors;                    /* removals that failed */
    int64_t  oldest_ns;                 /* last access of what is left */
    int64_t  newest_ns;                 /* (both 0 when nothing is) */
};

/*
 * Evict from the tier opened as st (the tier's URI, PREFIX its root) as
 * o says; r (zeroed here) receives the figures, filled as far as gc got
 * even when it fails.  Errors: a listing's (nothing removed), or the
 * first failed removal's (the others were still tried; r->errors counts
 * them), with the detail naming the key; -ENOMEM.  Dry: lists, reads the
 * logs, removes nothing.
 */
int tfs_tier_gc(struct tfs_store *st, const struct tfs_tier_gc_opts *o,
                struct tfs_tier_gc_result *r);

#endif /* TFS_TIER_GC_H */
