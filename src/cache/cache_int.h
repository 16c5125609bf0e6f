/* SPDX-License-Identifier: MIT */
/*
 * Internals of the cache (not installed).  The cache is divided into:
 *
 *   cache.c   options, open/close, block identity, the read path glue
 *   ram.c     the RAM tier: pinned blocks, single-flight, LRU by bytes
 *   disk.c    the disk tier: block files (format, checksums, atomic
 *             publish), the writer thread, recovery scan
 *   index.c   the disk tier's index, shared by every process using the
 *             cache dir (a mapped file): admission, eviction, accounting
 *   tinylfu.c the admission rule and its frequency sketch (tinylfu.h,
 *             which `tierfs profile` shares)
 *   meta.c    stat and listing caches, the immutable listing snapshot
 *   file.c    open files: version pinning, sequential readahead
 *   fetch.c   the store reader pool: priorities, hedging, deadlines
 *
 * Lock order: file->lock, then c->ram_lock, then the index lock.  No lock
 * is held across store I/O or disk I/O.
 */
#ifndef TFS_CACHE_INT_H
#define TFS_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tierfs/cache.h"
#include "cache/peer.h"
#include "tierfs/trace.h"
#include "common/hmap.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define TFS_BLOCK_ID_LEN 16

enum tfs_evict_policy {
    TFS_EVICT_TINYLFU,                  /* scan-resistant admission */
    TFS_EVICT_LRU,
};

/* ---- the shared disk index (index.c) ---- */

struct tfs_index;

#define TFS_INDEX_PAGE 4096u            /* a pack's first page */
#define TFS_INDEX_UNIT 512u             /* pack records start on these */

/*
 * Where a disk-tier block is: a file of its own (pack 0), or a record of
 * size bytes at unit * TFS_INDEX_UNIT in pack file tfs_index_pack_path
 * (pack, gen), whose header sum is xor'ed with salt (disk.c).
 */
struct tfs_disk_loc {
    uint32_t size;                      /* header + data bytes */
    uint32_t pack;                      /* 0, or the pack's index + 1 */
    uint32_t gen;                       /* the pack's generation */
    uint32_t unit;
    uint64_t salt;
};

/*
 * Map the index file at path, creating it with room for about max_blocks
 * entries.  *exclusive is true when no other process has it open: the
 * caller must then rebuild it (tfs_index_reset, tfs_index_add for each
 * block file, tfs_index_add_pack + tfs_index_add_record for each pack)
 * and call tfs_index_ready.  Other openers wait until then.
 */
int tfs_index_open(const char *path, uint64_t max_blocks,
                   struct tfs_index **out, bool *exclusive);
/* Where pack files live (for unlinking freed ones); before any use. */
int tfs_index_set_pack_dir(struct tfs_index *ix, const char *dir);
void tfs_index_pack_path(const char *dir, uint32_t pack, uint32_t gen,
                         char *buf, size_t len);
void tfs_index_reset(struct tfs_index *ix);
void tfs_index_add(struct tfs_index *ix, const uint8_t *id, uint32_t size);
/* Rebuild: a sealed pack of end bytes (all counted against capacity);
 * -EEXIST if its number is taken. */
int tfs_index_add_pack(struct tfs_index *ix, uint32_t pack, uint32_t gen,
                       uint64_t end, uint64_t salt);
void tfs_index_add_record(struct tfs_index *ix, const uint8_t *id,
                          uint32_t size, uint32_t pack, uint32_t unit);
/* Rebuild: done with a pack; false (and freed) when it holds nothing. */
bool tfs_index_pack_loaded(struct tfs_index *ix, uint32_t pack);
int tfs_index_ready(struct tfs_index *ix);
void tfs_index_close(struct tfs_index *ix);

/*
 * Find a live block: true and where it is, after counting the access
 * (recency and the admission sketch).  Misses are counted in the sketch
 * too, so a block that keeps being asked for earns admission.
 */
bool tfs_index_lookup(struct tfs_index *ix, const uint8_t *id,
                      struct tfs_disk_loc *loc);

/* Ids of blocks the caller must unlink after an admission (files only:
 * evicted packs are unlinked by the index). */
struct tfs_victims {
    uint8_t  (*ids)[TFS_BLOCK_ID_LEN];  /* owned */
    size_t   n;
    size_t   cap;
    uint64_t bytes;
};
void tfs_victims_cleanup(struct tfs_victims *v);

/*
 * Reserve size bytes for a new block: evict (into v) until it fits under
 * capacity, if the policy admits it.  Returns 1 when reserved (the entry
 * is pending: invisible to lookups until tfs_index_commit), 0 when the
 * policy declines, -EEXIST when the block is already there, or -ENOMEM.
 */
int tfs_index_admit(struct tfs_index *ix, const uint8_t *id, uint32_t size,
                    uint64_t capacity, enum tfs_evict_policy policy,
                    struct tfs_victims *v);
/*
 * The same for a record of size bytes taking extent (a multiple of
 * TFS_INDEX_UNIT, the bytes it counts against capacity) in this
 * process's open pack, a new one when it has no room below pack_max:
 * *loc says where to write it.
 */
int tfs_index_admit_packed(struct tfs_index *ix, const uint8_t *id,
                           uint32_t size, uint32_t extent, uint64_t pack_max,
                           uint64_t capacity, enum tfs_evict_policy policy,
                           struct tfs_victims *v, struct tfs_disk_loc *loc);
/* Make a pending entry live (ok) or drop it (!ok); true if it is live
 * (false also when its pack was evicted meanwhile). */
bool tfs_index_commit(struct tfs_index *ix, const uint8_t *id, bool ok);
/* Whether a live block is there, without counting an access. */
bool tfs_index_contains(struct tfs_index *ix, const uint8_t *id);
/* Drop a live block (corrupt, or its file vanished); with at, only if it
 * is still there (not evicted and admitted again elsewhere). */
void tfs_index_remove(struct tfs_index *ix, const uint8_t *id,
                      const struct tfs_disk_loc *at);
/* Bytes and blocks accounted in the index (all processes). */
void tfs_index_usage(struct tfs_index *ix, uint64_t *bytes,
                     uint64_t *blocks);

/* ---- blocks in RAM (ram.c) ---- */

enum tfs_block_state {
    TFS_BLK_LOADING,                    /* single-flight: others wait */
    TFS_BLK_READY,
    TFS_BLK_FAILED,                     /* err says why; not in table */
};

/*
 * A reader waiting for a LOADING block without a thread (tfs_block_await):
 * fn is called once, from the thread that published the block (a fetch
 * worker, or the disk-tier reader), with no lock held.
 */
struct tfs_waiter {
    struct tfs_waiter *next;            /* c->ram_lock while queued */
    void             (*fn)(struct tfs_cache *c, struct tfs_waiter *w);
};

enum tfs_block_src {
    TFS_SRC_NONE,                       /* already counted as used */
    TFS_SRC_DISK,                       /* loaded from the disk tier */
    TFS_SRC_STORE,                      /* fetched from the store */
    TFS_SRC_PEER,                       /* from a peer of the group */
    TFS_SRC_SHARED,                     /* from the shared cache tier */
};

struct tfs_block {
    uint8_t            id[TFS_BLOCK_ID_LEN]; /* immutable */
    struct tfs_hnode   hnode;           /* in c->table while in_table;
                                           protected by c->ram_lock */
    struct tfs_block  *lru_prev;        /* protected by c->ram_lock */
    struct tfs_block  *lru_next;        /* protected by c->ram_lock */
    unsigned           refs;            /* pins; c->ram_lock */
    int                state;           /* tfs_block_state; c->ram_lock */
    int                err;             /* when FAILED; c->ram_lock */
    char              *err_detail;      /* of err, owned; c->ram_lock */
    int                src;             /* tfs_block_src; c->ram_lock */
    bool               prefetched;      /* loaded by a hint; c->ram_lock */
    bool               hedged;          /* second read sent; ram_lock */
    bool               get_started;     /* a worker began its store read;
                                           c->ram_lock */
    bool               in_table;        /* c->ram_lock */
    bool               probation;       /* from the store, not yet read
                                           a second time (ram.c); lock */
    bool               spent;           /* on probation and read
                                           through: at the LRU's cold end,
                                           in c->spent_bytes; lock */
    bool               on_disk;         /* written to (or found in) the
                                           disk tier; lock */
    unsigned           reads;           /* store reads in flight; lock */
    size_t             src_left;        /* bytes still counted as coming
                                           from src; c->ram_lock */
    unsigned char     *data;            /* owned; len bytes when READY,
                                           NULL while LOADING */
    uint8_t           *sums;            /* owned, or NULL: data's chunk
                                           sums (common/csum.h), taken
                                           as it landed (fetch.c); set
                                           with data */
    pthread_cond_t     cond;            /* it left LOADING; ram_lock */
    struct tfs_waiter *waiters;         /* called once it left LOADING
                                           (tfs_block_publish); ram_lock */
    size_t             len;             /* bytes of data */
    uint64_t           digest;          /* tfs_csum_digest of data, when */
    bool               has_digest;      /* known: set once while LOADING
                                           (a disk load) or under
                                           c->ram_lock when READY */
    uint64_t           load_start_ns;   /* when loading began, then when
                                           its store read began; written
                                           under ram_lock, read with
                                           __atomic_load_n */
};

/* ---- block buffers (ram.c) ---- */

#define TFS_POOL_CLASSES 12

/*
 * Freed block buffers, kept for reuse by size class (powers of two from
 * 64 KiB up to the block size), so that steady-state loading does not
 * fault in fresh pages for every block: page faults are what a cold read
 * mostly costs on a virtual machine.
 */
struct tfs_bufpool {
    pthread_mutex_t lock;
    void           *free[TFS_POOL_CLASSES]; /* lists linked by 1st word */
    size_t          idle_bytes;         /* protected by lock */
    size_t          max_idle;
    uint64_t        out_len;            /* atomic: bytes (asked) of the
                                           buffers handed out: the RAM
                                           tier's blocks, blocks loading,
                                           evicted ones still pinned */
    uint64_t        out_cap;            /* atomic: the same, as allocated
                                           (size classes round up) */
};

/* A buffer for len bytes of a block (NULL when out of memory). */
void *tfs_blockbuf_get(struct tfs_cache *c, size_t len);
/* Give it back; len must be what it was got with.  NULL is a no-op. */
void tfs_blockbuf_put(struct tfs_cache *c, void *p, size_t len);
/* Fault one buffer for len bytes into the pool ahead of its use, if its
   size class (below the block size) has none idle. */
void tfs_blockbuf_stock(struct tfs_cache *c, size_t len);

/* ---- the cache object ---- */

struct tfs_fetch;
struct tfs_meta;
struct tfs_disk;

/* cache_mode: the dirs' mode; files get its rw bits (0600 or 0660). */
#define TFS_CACHE_MODE_PRIVATE 0700u
#define TFS_CACHE_MODE_GROUP 02770u
#define TFS_CACHE_FILE_MODE(m) ((m) & 0660u)

struct tfs_cache_cfg {
    uint64_t block_size;
    uint64_t mem_cache;
    char    *cache_dir;                 /* owned, or NULL */
    unsigned cache_mode;                /* its dirs: 0700, or 02770 (group) */
    uint64_t cache_size;
    uint64_t max_blocks;                /* index entries; 0: derived */
    uint64_t free_space;                /* bytes, or 0 with a percentage */
    double   free_space_pct;
    int      eviction;                  /* tfs_evict_policy */
    unsigned max_inflight;
    uint64_t max_readahead;
    uint64_t fetch_span;                /* readahead bytes one GET may
                                           carry (fetch.c); 0: a block */
    uint64_t meta_ttl_ns;
    bool     immutable;
    bool     disk_packs;                /* small blocks into packs (disk.c) */
    bool     hedge;
    uint64_t hedge_min_ns;
    char    *trace_path;                /* owned, or NULL */
    char    *manifest;                  /* owned, or NULL; implies
                                           immutable (meta.c) */
    bool     set_block_size;            /* given by the user, not adopted */
    bool     set_cache_size;
};

struct tfs_cache {
    struct tfs_cache_cfg cfg;
    bool                 opened;
    struct tfs_store    *st;            /* borrowed */
    uint8_t              ns[16];        /* hash of the store's identity */
    uint64_t             open_ns;

    pthread_mutex_t      ram_lock;
    pthread_condattr_t   cond_attr;     /* CLOCK_MONOTONIC, for blocks */
    struct tfs_hmap      table;         /* tfs_block by id; ram_lock */
    struct tfs_block     lru;           /* ram_lock; sentinel, READY and
                                           unpinned-or-pinned blocks */
    uint64_t             ram_bytes;     /* changed under ram_lock, with
                                           __atomic (the pool reads it
                                           without): bytes of READY
                                           blocks in the table */
    uint64_t             spent_bytes;   /* ram_lock: of spent blocks */
    uint64_t             spent_cap;     /* most spent bytes kept */
    struct tfs_bufpool   pool;

    struct tfs_disk     *disk;          /* NULL without a cache dir */
    char                 disk_off[48];  /* "off: why" when the cache dir
                                           could not be written, or "" */
    struct tfs_fetch    *fetch;
    struct tfs_meta     *meta;

    struct tfs_trace    *trace;         /* NULL unless tracing */

    pthread_rwlock_t     source_lock;   /* read: a call to a source in
                                           flight; write: adding one */
    struct tfs_cache_source sources[TFS_CACHE_SOURCES]; /* source_lock */
    unsigned             n_sources;     /* source_lock */

    struct tfs_counters  ctr;
    struct tfs_hist      get_latency;
    struct tfs_hist      read_latency;
};

/* How a block is wanted. */
enum tfs_want {
    TFS_WANT_DEMAND,                    /* a reader waits for it */
    TFS_WANT_PREFETCH,                  /* a hint: load in the background */
    TFS_WANT_FILL,                      /* warmup: load and keep on disk */
    TFS_WANT_PEER,                      /* a peer waits for it: a demand
                                           read that asks no peer and is
                                           never hedged (a second GET
                                           would be the group's egress) */
};

/* What identifies a block's bytes in the store. */
struct tfs_block_ref {
    const char *key;
    const char *version;
    uint64_t    obj_size;
    uint64_t    index;                  /* block number */
    uint64_t    off;                    /* index * block_size */
    size_t      len;                    /* bytes in this block */
};

void tfs_block_ref_init(struct tfs_cache *c, struct tfs_block_ref *r,
                        const char *key, const struct tfs_stat *st,
                        uint64_t index);
void tfs_block_id(struct tfs_cache *c, const struct tfs_block_ref *r,
                  uint8_t *id);

/* ---- ram.c ---- */

/*
 * Queue w on b, pinned by the caller: true when b is LOADING (w->fn will
 * be called once it is published; the caller must not touch what w->fn
 * frees from here on), false when b already left LOADING.
 */
bool tfs_block_await(struct tfs_cache *c, struct tfs_block *b,
                     struct tfs_waiter *w);
/*
 * tfs_ram_publish, then call b's waiters.  Every publish of a block goes
 * through here, so no waiter is left behind.
 */
void tfs_block_publish(struct tfs_cache *c, struct tfs_block *b, int err,
                       int src);

int tfs_ram_init(struct tfs_cache *c);
void tfs_ram_cleanup(struct tfs_cache *c);
/*
 * The block with id, pinned: an existing one (any state), or a new
 * LOADING one when *created is set (the caller must then load it and
 * call tfs_ram_publish).  -ENOMEM.
 */
int tfs_ram_get(struct tfs_cache *c, const uint8_t *id, size_t len,
                struct tfs_block **out, bool *created);
/* A pinned block without creating one; NULL when absent. */
struct tfs_block *tfs_ram_find(struct tfs_cache *c, const uint8_t *id);
/* Finish loading: READY with src, or FAILED with err; wakes waiters. */
void tfs_ram_publish(struct tfs_cache *c, struct tfs_block *b, int err,
                     int src);
/*
 * Wait while b is LOADING; returns 0 (READY) or its error.  timeout_ns
 * 0 waits forever; -ETIMEDOUT when it passes first.
 */
int tfs_ram_wait(struct tfs_cache *c, struct tfs_block *b,
                 uint64_t timeout_ns);
/* Unpin; the last unpin of a FAILED or evicted block frees it. */
void tfs_ram_put(struct tfs_cache *c, struct tfs_block *b);
/*
 * Evict unpinned READY blocks until the RAM tier fits its bound, and
 * spent ones until they fit spent_cap.
 */
void tfs_ram_trim(struct tfs_cache *c);
/*
 * A reader took bytes of pinned b (caller holds ram_lock): again is
 * whether all of b had been read before.  A block on probation is spent
 * once read through, promoted when read again.
 */
void tfs_ram_read_locked(struct tfs_cache *c, struct tfs_block *b,
                         bool again);
/* Warmup filled b (pinned): spend it now if on probation. */
void tfs_ram_spend(struct tfs_cache *c, struct tfs_block *b);

/* ---- disk.c ---- */

/*
 * Open the disk tier of the cache dir, if any.  A dir that cannot be
 * written (EROFS, EACCES) leaves it off: 0, c->disk NULL, c->disk_off
 * saying why, one WARN logged.
 */
int tfs_disk_open(struct tfs_cache *c);
void tfs_disk_close(struct tfs_cache *c);
/*
 * Load block r (id) from the disk tier into b->data: 0, -ENOENT when not
 * there, TFS_ECORRUPT when it failed its checksum (it is then dropped and
 * counted), or another error.
 */
int tfs_disk_load(struct tfs_cache *c, const struct tfs_block_ref *r,
                  const uint8_t *id, struct tfs_block *b);
/* Tests only (NULL otherwise): called by tfs_disk_load with the path of
 * the block file it has just opened, before it reads it: the window in
 * which another thread or process may evict the block and reuse its
 * file. */
extern void (*tfs_disk_load_hook)(const char *path);
/* True when the disk tier holds the block (no data read). */
bool tfs_disk_has(struct tfs_cache *c, const uint8_t *id);
/*
 * Queue a READY block for writing (it is pinned until written), or write
 * it now when sync.  Admission is decided here.  True when the queued
 * write waits for tfs_disk_kick (or a flush): the caller first answers
 * the readers of the block, then wakes a writer, which would otherwise
 * take a core from them (fetch.c).  False when a writer at work or
 * lingering for more small blocks will take it anyway (disk.c), and for
 * a write done now.
 */
bool tfs_disk_store(struct tfs_cache *c, const struct tfs_block_ref *r,
                    struct tfs_block *b, bool sync);
void tfs_disk_kick(struct tfs_cache *c);
void tfs_disk_usage(struct tfs_cache *c, uint64_t *bytes, uint64_t *blocks,
                    uint64_t *capacity);
/* Wait until every queued disk write is done. */
void tfs_disk_flush(struct tfs_cache *c);

/* ---- fetch.c: the backend reader pool ---- */

int tfs_fetch_start(struct tfs_cache *c);
void tfs_fetch_stop(struct tfs_cache *c);
/*
 * Load b (LOADING, created by the caller) from the group's owner peer
 * or the store in the background, then publish it; the job takes its
 * own pin.  A demand (want other than PREFETCH) goes ahead of
 * prefetches; FILL leaves the disk write to the caller; PEER asks no
 * peer.  -ENOMEM or -ESHUTDOWN (nothing queued, b untouched).
 */
int tfs_fetch_submit(struct tfs_cache *c, const struct tfs_block_ref *r,
                     struct tfs_block *b, enum tfs_want want);
/*
 * The caller waited long enough for b.  If b's read is still queued
 * behind prefetches, it is moved to the demand queue (TFS_HEDGE_QUEUED:
 * a second read would only queue too); if it has been running for the
 * hedging threshold, a second read is sent (TFS_HEDGE_SENT); otherwise
 * nothing is done (TFS_HEDGE_NONE: already hedged, loaded, or not a
 * store read; TFS_HEDGE_BUSY: more than half the readers are busy, so
 * the wait says the store is saturated and a hedge would only add load).
 */
enum tfs_hedge_result {
    TFS_HEDGE_NONE, TFS_HEDGE_QUEUED, TFS_HEDGE_SENT, TFS_HEDGE_BUSY
};
enum tfs_hedge_result tfs_fetch_hedge(struct tfs_cache *c,
                                      const struct tfs_block_ref *r,
                                      struct tfs_block *b);
/* How long to wait before hedging (0: never). */
uint64_t tfs_fetch_hedge_after_ns(struct tfs_cache *c);
/* Blocks one store read may carry (fetch_span; 1 where the store cannot
   scatter a read). */
unsigned tfs_fetch_span_blocks(struct tfs_cache *c);
/* Prefetches this thread submits until _end are queued together then
   (a span's blocks reach a worker together).  Nothing between may wait
   for a block. */
void tfs_fetch_batch_begin(void);
void tfs_fetch_batch_end(struct tfs_cache *c);

/* ---- cache.c: the block read path ---- */

/*
 * Get block r pinned and READY (loading it as want says), or an error.
 * *waited_ns (may be NULL) receives the time spent waiting.
 */
int tfs_cache_block(struct tfs_cache *c, const struct tfs_block_ref *r,
                    enum tfs_want want, struct tfs_block **out,
                    uint64_t *waited_ns);
/*
 * Without waiting: block r pinned, loading it (disk tier at once, or a
 * demand read queued to the fetch pool) when absent.  0: READY; 1: still
 * LOADING (pinned: wait with tfs_ram_wait or tfs_block_await); or an
 * error (nothing pinned).
 */
int tfs_cache_block_start(struct tfs_cache *c, const struct tfs_block_ref *r,
                          struct tfs_block **out);
/*
 * Whether prefetching is worth it: a prefetched block waits in the RAM
 * tier for its reader, so with almost no RAM tier it would be evicted
 * before use and fetched twice.
 */
static inline bool tfs_cache_can_prefetch(const struct tfs_cache *c)
{
    return c->cfg.mem_cache >= 4 * c->cfg.block_size;
}

/* Start loading block r in the background unless present. */
void tfs_cache_block_prefetch(struct tfs_cache *c,
                              const struct tfs_block_ref *r);
/*
 * Count a demand use of a READY block's bytes (hit/miss accounting);
 * returns where they came from (TFS_TRACE_RAM, _DISK, _STORE).
 */
int tfs_cache_account(struct tfs_cache *c, struct tfs_block *b, size_t n);

/* ---- meta.c ---- */

int tfs_meta_open(struct tfs_cache *c);
void tfs_meta_close(struct tfs_cache *c);

#endif /* TFS_CACHE_INT_H */
