/* SPDX-License-Identifier: MIT */
/*
 * Internals of the write-back engine (wb.h), divided into:
 *
 *   view.c     the overlay: entries by key, prefix counters, lookups and
 *              merged listings
 *   node.c     staged files: data files, reads, writes, copy on write,
 *              sealing, the staging bound
 *   ns.c       namespace changes: open for writing, unlink, mkdir, rmdir,
 *              rename
 *   journal.c  the journal: records, group commit, replay, compaction
 *   upload.c   the uploader: scheduling, store operations, retries, sync
 *   eager.c    eager uploads: a file's parts sent while it is written
 *   wb.c       open (recovery), close, statistics
 *
 * Lock order: wb->ns_lock, then node->rw, then wb->lock, then
 * node->lock, then an eager upload's lock (eager.c), then the journal's
 * locks.  No lock is held across store
 * I/O; node->rw is held across local file I/O of that node only.
 */
#ifndef TFS_WB_INT_H
#define TFS_WB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hmap.h"
#include "common/pool.h"
#include "common/util.h"
#include "wb/wb.h"

/* ---- overlay entries (view.c) ---- */

enum wb_kind {
    WB_NONE,                            /* nothing: kept for pins/busy */
    WB_NODE,                            /* a staged file: ent->node */
    WB_MOVED,                           /* store object ent->src, moving
                                           here */
    WB_WHITEOUT,                        /* deleted: remove from the store */
    WB_DIRENT,                          /* directory flags; key ends '/' */
};

#define WB_D_LOCAL  0x1u                /* exists here (mkdir, emptied) */
#define WB_D_HIDDEN 0x2u                /* hide the store's directory */

struct wb_ent {
    struct tfs_hstr  h;                 /* in wb->ents; h.key: "a/b" or
                                           "a/b/", owned */
    int              kind;              /* wb_kind; wb->lock */
    struct wb_node  *node;              /* WB_NODE: the view's reference */
    char            *src;               /* WB_MOVED: owned */
    struct tfs_stat  st;                /* WB_MOVED: the source's stat */
    unsigned         dflags;            /* WB_DIRENT: WB_D_* */
    unsigned         pins;              /* WB_MOVED entries whose source
                                           this key is */
    bool             busy;              /* a store operation runs on it */
    bool             counted;           /* in the prefix counters */
    bool             checked;           /* HIDDEN: the sweep keeps it */
    uint64_t         seq;               /* wb->seq at the last change */
    uint64_t         ready_ns;          /* not before: upload delay */
    uint64_t         retry_ns;          /* not before: backoff */
    uint64_t         fail_ns;           /* when the last attempt failed */
    unsigned         attempts;          /* failures of the current work */
    int              last_err;
    char            *last_detail;       /* owned; of last_err */
    uint64_t         parked_seq;        /* seq when its work failed for
                                           good: parked while seq stays
                                           (upload.c); 0 = never */
    bool             queued;            /* on the pending queue */
    struct wb_ent   *qprev;             /* pending queue; wb->lock */
    struct wb_ent   *qnext;
};

/* Buckets wb->ents, wb->pfx and the replay's map start with. */
#define WB_MAP_MIN 256

/* The entry of node n of wb->ents (NULL for NULL). */
static inline struct wb_ent *wb_ent_of(struct tfs_hnode *n)
{
    return n ? tfs_container_of(n, struct wb_ent, h.node) : NULL;
}

/* Whether e's work is parked after a permanent error.  wb->lock held. */
static inline bool wb_ent_parked(const struct wb_ent *e)
{
    return e->parked_seq != 0 && e->parked_seq == e->seq;
}

/* Counts of entries strictly under a directory key ("" or "a/b/"). */
struct wb_pfx {
    struct tfs_hstr h;                  /* in wb->pfx; h.key owned */
    uint64_t        live;               /* NODE, MOVED, DIRENT LOCAL */
    uint64_t        all;                /* every kind but NONE */
    uint64_t        wo;                 /* WHITEOUT */
};

/* The entry of key, or NULL.  wb->lock held. */
struct wb_ent *wb_ent_find(struct tfs_wb *wb, const char *key);
/* The entry of key, created as WB_NONE if missing; NULL: -ENOMEM. */
struct wb_ent *wb_ent_get(struct tfs_wb *wb, const char *key);
/*
 * Change e's overlay state, keeping the counters, the pins of a move's
 * source and the seq right; node and src are taken as given (node: a
 * reference; src: copied).  Returns the node reference e held before,
 * if any, for the caller to put after unlocking.  wb->lock held.
 */
struct wb_node *wb_ent_set(struct tfs_wb *wb, struct wb_ent *e, int kind,
                           struct wb_node *node, const char *src,
                           const struct tfs_stat *st, unsigned dflags);
/* The same with src (WB_MOVED: not NULL) taken, not copied: for a caller
   that allocates before it changes anything, so nothing can fail half
   way.  wb->lock held. */
struct wb_node *wb_ent_set_own(struct tfs_wb *wb, struct wb_ent *e, int kind,
                               struct wb_node *node, char *src,
                               const struct tfs_stat *st, unsigned dflags);
/* Free e if it holds nothing.  wb->lock held. */
void wb_ent_release(struct tfs_wb *wb, struct wb_ent *e);
/* The counters of directory dir, or NULL (all zero). */
const struct wb_pfx *wb_pfx_find(struct tfs_wb *wb, const char *dir);
/* Whether directory dkey ("a/b/") is hidden and nothing of ours is in
   it.  wb->lock held. */
bool wb_dir_hidden(struct tfs_wb *wb, const char *dkey);
/* Clear WB_D_HIDDEN on every ancestor directory of key. */
void wb_unhide_parents(struct tfs_wb *wb, const char *key,
                       struct tfs_buf *rec);
/*
 * Keep key's parent directory alive (WB_D_LOCAL) after its entry leaves
 * it, as a local file system would; the root needs nothing.
 */
void wb_keep_parent(struct tfs_wb *wb, const char *key, struct tfs_buf *rec);
/* The longest the upload scheduler sleeps between passes (upload.c). */
#define WB_KICK_NS 1000000000ull
/* Put e on the pending queue, or take it off, as its state says; the
   scheduler is woken only for an entry due within WB_KICK_NS. */
void wb_ent_requeue(struct tfs_wb *wb, struct wb_ent *e);
/* Whether e needs a store operation (node: sealed and not uploaded). */
bool wb_ent_needs_work(struct tfs_wb *wb, struct wb_ent *e);

/* ---- staged files (node.c) ---- */

struct wb_node {
    atomic_uint      refs;
    struct tfs_wb   *wb;                /* immutable */
    uint64_t         nid;               /* immutable */
    pthread_rwlock_t rw;                /* the data file: reads and writes
                                           shared, replacing it exclusive */
    int              fd;                /* the data file, -1: none; rw */
    uint64_t         id;                /* its id, 0: none; rw */
    bool             cur_sealed;        /* sealed: never written again; rw */
    bool             dir_synced;        /* its name is durable; rw */
    pthread_mutex_t  lock;
    uint64_t         size;              /* bytes; lock */
    int64_t          mtime_ns;          /* lock */
    uint64_t         gen;               /* bumped by every change; lock */
    bool             dirty;             /* changed since the seal; lock */
    unsigned         opens;             /* handles; lock */
    unsigned         writers;           /* of which for writing; lock */
    uint64_t         seal_end;          /* journal offset of the last
                                           seal record; lock */
    uint64_t         kicked;            /* written back from here on: not
                                           asked for yet (node_kick); lock */
    uint64_t         up_gen;            /* sealed_gen in the store; lock */
    struct tfs_stat  up_st;             /* its stat there; lock */
    struct wb_eager *eager;             /* the eager upload of data file
                                           id, or NULL; lock */
    uint64_t         eager_tried;       /* the data file one was started
                                           for (never twice); lock */
    /* protected by wb->lock */
    struct wb_ent   *ent;               /* its entry, NULL: detached */
    bool             maybe_in_store;    /* the store may hold an object
                                           at its key */
    bool             has_sealed;        /* sealed_* describe a content */
    uint64_t         sealed_id;         /* data file of the last seal */
    uint64_t         sealed_size;
    int64_t          sealed_mtime_ns;
    uint64_t         sealed_gen;        /* 1, 2, ... per seal */
};

/* A new node: an empty data file (or, with id != 0, the existing one
   replayed from the journal, of size bytes, sealed). */
int wb_node_new(struct tfs_wb *wb, uint64_t id, uint64_t size,
                int64_t mtime_ns, struct wb_node **out);
/*
 * Give n, which is out of the view (or new), a fresh data file: a copy
 * of read_key@st (from n's own local bytes when they are that version,
 * else read through the cache), or empty when st is NULL.  Returns 1,
 * changing nothing, when n is in the view again (someone attached it).
 */
int wb_node_replace(struct tfs_wb *wb, struct wb_node *n,
                    const char *read_key, const struct tfs_stat *st);
/* After n left the view: free its local data once nothing reads it. */
void wb_node_detached(struct tfs_wb *wb, struct wb_node *n);
/* data/<id> under the staging dir. */
void wb_data_path(const struct tfs_wb *wb, uint64_t id, char *buf,
                  size_t size);
/* Remove data file id of size bytes and give its room back. */
void wb_data_unlink(struct tfs_wb *wb, uint64_t id, uint64_t size);
uint64_t wb_new_id(struct tfs_wb *wb);
/* Wait until need more bytes fit under staging_max (docs/writeback.md). */
int wb_space_wait(struct tfs_wb *wb, uint64_t need, const char *why);
void wb_space_add(struct tfs_wb *wb, int64_t delta);

/* ---- the journal (journal.c) ---- */

enum wb_jop {
    WB_J_HEAD = 1,                      /* key: the store's identity */
    WB_J_FILE = 2,
    WB_J_MOVED = 3,
    WB_J_WHITEOUT = 4,
    WB_J_DIR = 5,
    WB_J_CLEAR = 6,
};

#define WB_JF_IN_STORE 0x1u             /* WB_J_FILE: maybe in the store */

struct wb_journal {
    int             fd;                 /* wb->lock (swapped by compact) */
    int             dir_fd;             /* the staging dir */
    uint64_t        size;               /* bytes in the file; wb->lock */
    uint64_t        end;                /* logical bytes appended ever;
                                           wb->lock */
    pthread_mutex_t sync_lock;          /* one fdatasync at a time */
    atomic_uint_fast64_t synced;        /* logical bytes durable */
    uint64_t        compact_at;         /* size that triggers compaction */
    atomic_int      err;                /* sticky write or sync error:
                                           every append and sync fails
                                           until a compaction clears it */
    /* what the replay at open found */
    size_t          rp_records;         /* intact records replayed */
    size_t          rp_bad;             /* damaged ranges set aside */
    uint64_t        rp_bad_bytes;
    bool            rp_empty;           /* no journal, or 0 bytes */
};

/* Encoders: append one op to a record being built (errors sticky in b). */
void wb_jop_file(struct tfs_buf *b, const char *key, uint64_t id,
                 uint64_t size, int64_t mtime_ns, unsigned flags);
void wb_jop_moved(struct tfs_buf *b, const char *key, const char *src,
                  const struct tfs_stat *st);
void wb_jop_key(struct tfs_buf *b, int op, const char *key);
void wb_jop_dir(struct tfs_buf *b, const char *key, unsigned dflags);
/* The op that describes e's state now (nothing for a fresh NONE). */
void wb_jop_ent(struct tfs_wb *wb, struct tfs_buf *b, const struct wb_ent *e);

/*
 * Append the record in b (if not empty) and reset b; *end (may be NULL)
 * receives the logical offset to pass to wb_journal_sync.  wb->lock
 * held.  -EIO (sticky) when the staging disk fails.
 */
int wb_journal_append(struct tfs_wb *wb, struct tfs_buf *b, uint64_t *end);
/* Make everything up to end durable (group commit).  No lock held. */
int wb_journal_sync(struct tfs_wb *wb, uint64_t end);
/* Rewrite the journal from the overlay.  wb->lock held. */
int wb_journal_compact(struct tfs_wb *wb);

/* One op of a replayed record. */
struct wb_jent {
    int             op;                 /* wb_jop */
    const char     *key;                /* NUL-terminated copies */
    const char     *src;
    uint64_t        id;
    uint64_t        size;
    int64_t         mtime_ns;
    unsigned        flags;
    struct tfs_stat st;
};
typedef int wb_replay_fn(struct tfs_wb *wb, const struct wb_jent *j);
/*
 * Open (or create) the journal and feed every op of every intact record
 * to fn, in order.  A damaged range (no intact record starts there) is
 * skipped up to the next intact record, or to the end (a torn tail),
 * and its bytes are kept in lost+found (logged); a record is applied
 * whole or not at all.  wb->j.rp_* receive what was found.
 */
int wb_journal_open(struct tfs_wb *wb, wb_replay_fn *fn);
void wb_journal_close(struct tfs_wb *wb);

/* ---- the uploader (upload.c) ---- */

int wb_upload_start(struct tfs_wb *wb);
void wb_upload_stop(struct tfs_wb *wb);
/* wb_upload_kick, the scheduler's wake-up: after struct tfs_wb. */
/*
 * Append '"parked_changes": [...]' (the first 100 changes parked after a
 * permanent error, docs/writeback.md) to b.  Takes wb->lock.
 */
int wb_parked_json(struct tfs_wb *wb, struct tfs_buf *b);

/* A sync waiting on prefix up to barrier seq: its work goes first. */
struct wb_hurry {
    const char      *prefix;            /* "", "a/b/" or "a/b" */
    uint64_t         seq;
    struct wb_hurry *next;              /* wb->hurry list; wb->lock */
};

/* ---- eager uploads (eager.c) ---- */

struct wb_eager;

/* Why an eager upload was cancelled (counted in the statistics). */
enum wb_eager_why {
    WB_EAGER_QUIET,                     /* not counted: closing, no store
                                           support */
    WB_EAGER_REWRITE,                   /* a write behind the parts sent, a
                                           truncate, a new data file */
    WB_EAGER_RENAME,                    /* the file left its key: rename,
                                           unlink, replaced */
    WB_EAGER_ERROR,                     /* a part, the create or the
                                           complete failed */
};

/* Create STAGING/eager, abort what the last mount left there; decide
   whether this mount uploads eagerly (its store, eager_parts). */
int wb_eager_open(struct tfs_wb *wb);
/* Start and stop the eager pool (stop also aborts what is left). */
int wb_eager_start(struct tfs_wb *wb);
void wb_eager_stop(struct tfs_wb *wb);
/*
 * Abort every upload named in STAGING/eager and remove its side file;
 * -EAGAIN when some are kept (the store did not answer).
 */
int wb_eager_recover(struct tfs_wb *wb);
/*
 * A write of [off, end) reached n's data file: follow what is written
 * from offset 0 on, start an eager upload once that passes the first
 * part, queue the parts the writer has moved past, cancel on a write
 * behind them.  Never waits.  n->rw held.
 */
void wb_eager_wrote(struct tfs_wb *wb, struct wb_node *n, uint64_t off,
                    uint64_t end);
/* n was sealed: forget an eager upload that never started or stopped
   (the memory of one per small file).  n->rw held. */
void wb_eager_sealed(struct wb_node *n);
/*
 * Cancel n's eager upload (why: wb_eager_why); with drop, forget it (a
 * new data file, the node's end).  Never waits.  Any lock up to
 * wb->lock held, not node->lock.
 */
void wb_eager_cancel(struct wb_node *n, int why, bool drop);
/*
 * The uploader's put of n's sealed data file id (size bytes) at key:
 * when an eager upload of it runs, send the rest, wait, complete: 0 with
 * out filled.  1 when there is none or it failed (cancelled, counted):
 * the caller puts the whole file.
 */
int wb_eager_finish(struct tfs_wb *wb, struct wb_node *n, uint64_t id,
                    const char *key, uint64_t size, struct tfs_stat *out);

/* ---- the write-back object ---- */

struct wb_counters {
    atomic_uint_fast64_t writes;        /* write requests */
    atomic_uint_fast64_t write_bytes;
    atomic_uint_fast64_t kick_bytes;    /* written back before the seal */
    atomic_uint_fast64_t seals;         /* closes/fsyncs that sealed */
    atomic_uint_fast64_t seal_ns;       /* time spent sealing */
    atomic_uint_fast64_t uploaded_files;
    atomic_uint_fast64_t uploaded_bytes;
    atomic_uint_fast64_t moves;         /* store moves done */
    atomic_uint_fast64_t removes;       /* store removes done */
    atomic_uint_fast64_t errors;        /* failed store operations */
    atomic_uint_fast64_t retries;       /* operations tried again */
    atomic_uint_fast64_t waits;         /* writers that waited for room */
    atomic_uint_fast64_t wait_ns;
    atomic_uint_fast64_t copies;        /* copy-on-write of sealed data */
    atomic_uint_fast64_t compactions;
    atomic_uint_fast64_t eager_uploads;   /* eager uploads created */
    atomic_uint_fast64_t eager_completed; /* ... and completed */
    atomic_uint_fast64_t eager_bytes;     /* bytes of their parts sent */
    atomic_uint_fast64_t eager_rewrite;   /* cancelled: WB_EAGER_REWRITE */
    atomic_uint_fast64_t eager_rename;    /* cancelled: WB_EAGER_RENAME */
    atomic_uint_fast64_t eager_error;     /* cancelled: WB_EAGER_ERROR */
    atomic_uint_fast64_t eager_recovered; /* aborted from side files */
};

struct tfs_wb {
    struct wb_cfg        cfg;           /* strings owned */
    struct tfs_store    *st;            /* borrowed */
    struct tfs_cache    *cache;         /* borrowed */
    bool                 store_dirs;    /* TFS_SCAP_DIRS */
    int                  lock_fd;       /* flock'd staging/lock */
    atomic_bool          closing;       /* delete no staged data */
    int                  data_fd;       /* staging/data */
    int                  lost_fd;       /* staging/lost+found, -1 until
                                           first used (recovery) */

    pthread_rwlock_t     ns_lock;       /* directory renames exclusive,
                                           completions shared */
    pthread_mutex_t      lock;
    struct tfs_hmap      ents;          /* struct wb_ent by key; lock */
    struct tfs_hmap      pfx;           /* struct wb_pfx by key; lock */
    struct wb_ent       *qhead;         /* pending queue; lock */
    struct wb_ent       *qtail;
    uint64_t             seq;           /* changes so far; lock */
    pthread_cond_t       changed;       /* sync waiters; lock */
    pthread_cond_t       space;         /* room freed; lock */
    struct wb_hurry     *hurry;         /* syncs waiting; lock */
    unsigned             inflight;      /* store operations; lock */
    atomic_uint_fast64_t next_id;       /* data file ids */
    atomic_uint_fast64_t next_nid;
    atomic_int_fast64_t  used;          /* staged bytes on disk */
    atomic_uint_fast64_t disk_at_ns;    /* when disk_limit was read */
    atomic_uint_fast64_t disk_limit;    /* used may grow to this: used +
                                           the staging disk's free bytes
                                           less a reserve (node.c) */
    struct wb_journal    j;
    void                *replay;        /* during wb_open only (wb.c) */

    /* eager uploads (eager.c) */
    int                  eager_fd;      /* staging/eager */
    uint64_t             eager_part;    /* part size; 0: off */
    atomic_bool          eager_off;     /* off (the store has none) */
    struct tfs_pool     *epool;         /* eager_parts workers */

    /* uploader */
    struct tfs_pool     *pool;
    pthread_t            sched;
    bool                 sched_started;
    bool                 opened;        /* wb_open completed */
    bool                 stopping;      /* lock */
    pthread_cond_t       kick;          /* lock */
    struct tfs_ratelimit bw;
    uint64_t             rate_t_ns;     /* upload rate window; lock */
    uint64_t             rate_bytes;    /* lock */
    double               rate;          /* bytes/s, smoothed; lock */
    struct wb_counters   n;
};

/* Something changed: let the scheduler look.  wb->lock held. */
static inline void wb_upload_kick(struct tfs_wb *wb)
{
    pthread_cond_signal(&wb->kick);
}

/* ---- lost.c ---- */

/*
 * Keep len bytes at p as STAGING/lost+found/name (a suffix .1, .2, ...
 * when taken), durably; where receives the path.  -errno.
 */
int wb_lost_put(struct tfs_wb *wb, const char *name, const void *p,
                size_t len, char *where, size_t wsize);
/* Move data file data/name to lost+found/data-name; adds its bytes.
 * -errno. */
int wb_lost_move(struct tfs_wb *wb, const char *name, uint64_t *bytes);

#endif /* TFS_WB_INT_H */
