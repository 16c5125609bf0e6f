/* SPDX-License-Identifier: MIT */
/*
 * Write-back for the mount (internal, not installed).  Writes land in a
 * staging area on local disk, a journal makes them survive a crash, and
 * a background uploader pushes them to the store.  docs/writeback.md
 * holds the design: staging layout, journal format, the states of a file,
 * ordering, what survives what.
 *
 * What the mount sees is the *view*: the store (through the cache's
 * metadata) overlaid with what was written here and not yet uploaded:
 * staged files, pending deletions (whiteouts), renames of store objects
 * not yet applied (moves), directories made or emptied here.  Every
 * namespace change is journaled and fsynced before it returns; a staged
 * file's content is journaled when it is sealed (flush, fsync, release).
 *
 * A staged file is a struct wb_node, refcounted: the view holds one
 * reference while the node is its key's content, every inode and open
 * handle of the mount holds one.  A node leaves the view (detaches) when
 * its content is in the store, when it is deleted, or when a rename
 * replaces it; open handles keep using it.
 *
 * Thread safety: every function is thread-safe; wb_open and wb_close are
 * called once each.  No function calls back into the caller.
 */
#ifndef TFS_WB_H
#define TFS_WB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "metrics/metrics.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

#define WB_KEY_MAX 1024                 /* bytes, as the store checks */

struct tfs_wb;
struct wb_node;

struct wb_cfg {
    const char *staging_dir;            /* absolute; created if missing */
    uint64_t    staging_max;            /* bytes of staged data (soft) */
    uint64_t    staging_wait_ms;        /* most a writer waits for room */
    uint64_t    upload_bw;              /* bytes/s; 0: no cap */
    unsigned    upload_jobs;            /* store operations at once */
    uint64_t    upload_delay_ms;        /* after a close, before upload */
    uint64_t    retry_max_ms;           /* longest backoff between tries */
    uint64_t    early_writeback;        /* bytes a sequential writer puts
                                           in a staged file before they are
                                           sent to disk ahead of the seal;
                                           0: at the seal only */
    unsigned    eager_parts;            /* parts of one file sent at once
                                           while it is written (eager
                                           upload, where the store has
                                           multipart); 0: off */
};

/*
 * Open the staging dir (creating it), lock it against a second mount,
 * replay its journal (resynchronising after damage), move staged data
 * nobody references and unreadable journal bytes to lost+found (never
 * deleting them), and start the uploader, which resumes every pending
 * change at once.  st and c are borrowed until wb_close.  Errors:
 * -EBUSY (another mount holds the staging dir), TFS_EOPTION (it holds
 * pending changes for another store), TFS_EFORMAT (not a journal),
 * -EUCLEAN (an empty or missing journal beside data files: nothing is
 * changed), -errno from the staging dir (-EMFILE included), -ENOMEM.
 */
int wb_open(struct tfs_wb **out, const struct wb_cfg *cfg,
            struct tfs_store *st, struct tfs_cache *c);
/*
 * Stop the uploader: operations in flight finish, queued ones stay in the
 * journal for the next mount.  From now on nothing is deleted from the
 * staging dir (the next mount's sweep decides).  Idempotent.
 */
void wb_stop(struct tfs_wb *wb);
/*
 * Stop, then free everything; staged data stays on disk.  Every node
 * reference held outside must be put first.  NULL is a no-op.
 */
void wb_close(struct tfs_wb *wb);

/* ---- the view ---- */

/* What a key is in the view. */
struct wb_obj {
    bool            is_dir;
    struct wb_node *node;               /* a staged file (a reference) */
    struct tfs_stat st;                 /* a store file: its stat */
    char            read_key[WB_KEY_MAX + 1]; /* a store file: where its
                                           bytes are (a pending move's
                                           source, else the key) */
};

/*
 * Fill o with what key is: a staged file, a store file or a directory.
 * -ENOENT when nothing; the cache's errors.  Release with wb_obj_cleanup.
 */
int wb_lookup(struct tfs_wb *wb, const char *key, struct wb_obj *o);
void wb_obj_cleanup(struct wb_obj *o);

struct wb_dirent {
    const char     *name;               /* valid until wb_list_free */
    bool            is_dir;
    struct tfs_stat st;                 /* store files */
    struct wb_node *node;               /* staged files (borrowed) */
};

struct wb_list;

/*
 * The entries of directory dir ("" or "a/b/"), sorted by name: the
 * store's listing with the overlay applied.  -ENOENT when the directory
 * does not exist; the cache's errors.  Free with wb_list_free.
 */
int wb_opendir(struct tfs_wb *wb, const char *dir, struct wb_list **out);
size_t wb_list_count(const struct wb_list *l);
const struct wb_dirent *wb_list_entry(const struct wb_list *l, size_t i);
void wb_list_free(struct wb_list *l);

/* ---- staged files ---- */

struct wb_node *wb_node_get(struct wb_node *n);
/* NULL is a no-op. */
void wb_node_put(struct wb_node *n);

struct wb_attr {
    uint64_t nid;                       /* unique in this process */
    uint64_t size;
    int64_t  mtime_ns;
};
void wb_node_attr(struct wb_node *n, struct wb_attr *out);
/* True when n's content went to the store as version. */
bool wb_node_is_version(struct wb_node *n, const char *version);

/*
 * Open n for reading: 0 when its bytes are on local disk (read them with
 * wb_node_read until wb_node_close), else -ENODATA with *st the store
 * version it was uploaded as (-ESTALE when it has none: deleted).
 */
int wb_node_open_read(struct wb_node *n, struct tfs_stat *st);
int wb_node_read(struct wb_node *n, void *buf, size_t len, uint64_t off,
                 size_t *nread);
/*
 * Write, staying within staging_max (waiting for uploads to make room,
 * up to staging_wait_ms: -ENOSPC after).  n must be open for writing.
 */
int wb_node_write(struct tfs_wb *wb, struct wb_node *n, const void *buf,
                  size_t len, uint64_t off);
int wb_node_truncate(struct tfs_wb *wb, struct wb_node *n, uint64_t size);
void wb_node_set_mtime(struct wb_node *n, int64_t mtime_ns);
/*
 * Make n's content durable locally (data and journal record fsynced) and
 * queue it for upload.  What flush, fsync and release call; a no-op when
 * nothing changed since the last seal.
 */
int wb_node_seal(struct tfs_wb *wb, struct wb_node *n);
/*
 * Close one open of n (from wb_node_open_read or wb_open_write).  A
 * writer's close seals first when seal is set (release; not at unmount).
 */
void wb_node_close(struct tfs_wb *wb, struct wb_node *n, bool writer,
                   bool seal);

/* ---- namespace ---- */

/* What the caller's inode stands for, to detect a stale one. */
struct wb_want {
    struct wb_node *node;               /* its staged file, or NULL */
    const char     *version;            /* else its store version, or
                                           NULL for a create */
    bool            create;             /* O_CREAT */
    bool            excl;               /* O_EXCL */
    bool            trunc;              /* O_TRUNC */
};

/*
 * Open key for writing: its staged file, or a new one (empty for a new
 * file or trunc; otherwise a copy of the current content, sealed at
 * once).  *out is a reference and counts as one open for writing
 * (wb_node_close).  Errors: -ESTALE (key now holds something newer than
 * the caller's inode), -EEXIST, -EISDIR, -ENOENT, -ENOSPC, the cache's.
 */
int wb_open_write(struct tfs_wb *wb, const char *key,
                  const struct wb_want *w, struct wb_node **out);
/* -ENOENT, -EISDIR. */
int wb_unlink(struct tfs_wb *wb, const char *key);
/* key without the trailing '/'.  -EEXIST. */
int wb_mkdir(struct tfs_wb *wb, const char *key);
/* -ENOENT, -ENOTDIR, -ENOTEMPTY. */
int wb_rmdir(struct tfs_wb *wb, const char *key);

#define WB_NOREPLACE 0x1u               /* RENAME_NOREPLACE */

/*
 * Rename from to to (files or directories; keys without a trailing
 * '/').  Before upload it is a local rename; an uploaded object moves in
 * the store later (tfs_store_move), a directory object by object.
 * *is_dir tells which it was.  Errors: -ENOENT, -EEXIST, -ENOTDIR,
 * -EISDIR, -ENOTEMPTY, -EINVAL.
 */
int wb_rename(struct tfs_wb *wb, const char *from, const char *to,
              unsigned flags, bool *is_dir);

/* ---- sync and statistics ---- */

struct wb_sync {
    uint64_t seq;                       /* the barrier used */
    uint64_t pending;                   /* changes still to reach the
                                           store (files, moves, deletes) */
    uint64_t bytes;                     /* of the files among them */
    uint64_t dirty;                     /* files open with unsaved writes */
    uint64_t errors;                    /* failed attempts among them */
    char     last_error[256];           /* of the latest, or "" */
    uint64_t parked;                    /* changes parked after a
                                           permanent error (not pending) */
    char     parked_list[1024];         /* "upload of 'k': cause\n" for
                                           the first of them */
};

/* The barrier for a sync that starts now. */
uint64_t wb_sync_seq(struct tfs_wb *wb);

/*
 * What remains, under prefix ("" for all, "a/b/" for a directory, "a/b"
 * for a file), of the changes made up to barrier seq: waits up to
 * wait_ms for it to reach 0, and hurries the uploader meanwhile (no
 * upload delay, short backoffs).  Parked changes are counted apart and
 * not waited for.
 */
void wb_sync_status(struct tfs_wb *wb, const char *prefix, uint64_t seq,
                    uint64_t wait_ms, struct wb_sync *out);

/* Staging bytes used and the bound (statfs). */
void wb_usage(struct tfs_wb *wb, uint64_t *used, uint64_t *max);

/*
 * The "writeback" section of the metrics registry (tfs_metrics_wb, wb.c;
 * docs/writeback.md): X(kind, name, type, unit, prom, help) as in
 * metrics/metrics.h.  JSON "writeback.NAME", Prometheus tierfs_wb_NAME.
 */
#define WB_METRICS(X)                                                      \
    X(U64, pending_files, GAUGE, COUNT, NULL,                              \
      "closed files not yet in the store")                                 \
    X(U64, pending_bytes, GAUGE, BYTES, NULL,                              \
      "bytes of closed files not yet in the store")                        \
    X(U64, pending_ops, GAUGE, COUNT, NULL,                                \
      "moves and deletes not yet in the store")                            \
    X(U64, staged_files, GAUGE, COUNT, NULL, "staged files in the view")   \
    X(U64, dirty_files, GAUGE, COUNT, NULL,                                \
      "staged files open with writes not yet sealed")                      \
    X(U64, inflight, GAUGE, COUNT, NULL, "store operations running")       \
    X(U64, staging_bytes, GAUGE, BYTES, NULL,                              \
      "bytes of staged data on local disk")                                \
    X(U64, staging_max_bytes, GAUGE, BYTES, NULL,                          \
      "bound of the staged bytes (--staging-max)")                         \
    X(U64, uploaded_files, COUNTER, COUNT, NULL, "files uploaded")         \
    X(U64, uploaded_bytes, COUNTER, BYTES, NULL,                           \
      "bytes uploaded to the store")                                       \
    X(F64, upload_rate_bytes, GAUGE, BYTES_PER_S,                          \
      "wb_upload_rate_bytes_per_second", "upload rate, smoothed")          \
    X(U64, moves, COUNTER, COUNT, NULL, "store moves done")                \
    X(U64, removes, COUNTER, COUNT, NULL, "store deletes done")            \
    X(U64, upload_errors, COUNTER, COUNT, NULL,                            \
      "failed store operations of the uploader")                           \
    X(U64, upload_retries, COUNTER, COUNT, NULL,                           \
      "store operations of the uploader tried again")                      \
    X(U64, writes, COUNTER, COUNT, NULL, "write requests to staged files") \
    X(U64, write_bytes, COUNTER, BYTES, NULL,                              \
      "bytes written to staged files")                                     \
    X(U64, early_writeback_bytes, COUNTER, BYTES, NULL,                    \
      "staged bytes sent to disk before their seal (sync_file_range)")     \
    X(U64, seals, COUNTER, COUNT, NULL,                                    \
      "closes and fsyncs that sealed a staged file")                       \
    X(F64, seal_us_avg, GAUGE, US, NULL,                                   \
      "mean time of a seal, in microseconds (close latency)")              \
    X(U64, copies, COUNTER, COUNT, NULL, "copies-on-write of sealed data") \
    X(U64, backpressure_waits, COUNTER, COUNT, NULL,                       \
      "writers that waited for room in staging")                           \
    X(F64, backpressure_seconds, COUNTER, SECONDS, NULL,                   \
      "time writers waited for room in staging")                           \
    X(U64, journal_bytes, GAUGE, BYTES, NULL, "size of the journal")       \
    X(U64, compactions, COUNTER, COUNT, NULL, "journal rewrites")          \
    X(U64, parked, GAUGE, COUNT, NULL,                                     \
      "changes parked after a permanent error (also pending)")             \
    X(U64, eager_uploads, COUNTER, COUNT, NULL,                            \
      "eager uploads started (parts sent while the file is written)")      \
    X(U64, eager_completed, COUNTER, COUNT, NULL,                          \
      "eager uploads completed (the file's upload took no whole put)")     \
    X(U64, eager_bytes, COUNTER, BYTES, NULL,                              \
      "bytes sent as parts of eager uploads")                              \
    X(U64, eager_aborted_rewrite, COUNTER, COUNT, NULL,                    \
      "eager uploads cancelled by a write behind the parts sent, a "       \
      "truncate or a copy on write")                                       \
    X(U64, eager_aborted_rename, COUNTER, COUNT, NULL,                     \
      "eager uploads cancelled by a rename or unlink before the complete") \
    X(U64, eager_aborted_error, COUNTER, COUNT, NULL,                      \
      "eager uploads cancelled by a store error (the whole file is put)")  \
    X(U64, eager_recovered, COUNTER, COUNT, NULL,                          \
      "uploads aborted from side files of an earlier mount or an unmount")

/* A snapshot of the write-back's figures. */
struct wb_metrics {
    WB_METRICS(TFS_METRIC_FIELD)
};

/* Fill out (takes wb->lock). */
void wb_metrics_get(struct tfs_wb *wb, struct wb_metrics *out);
/*
 * The section's JSON beyond its figures, a tfs_metric_json_fn (arg: the
 * wb): "parked_changes", the first 100 parked changes.  Takes wb->lock.
 */
int wb_metrics_json_more(void *arg, struct tfs_buf *b);

#endif /* TFS_WB_H */
