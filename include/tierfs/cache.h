/* SPDX-License-Identifier: MIT */
/*
 * The cache: a node-local, two-tier (RAM + local disk) block cache in
 * front of a store, with the fetch engine that fills it.
 *
 * Objects are cut into fixed-size blocks (block_size, default 4 MiB; a
 * smaller object is one block).  A block is identified by the store, the
 * object's key, the object's version (ETag, or size-mtime-inode) and the
 * block's index, so a changed object can never be served as a mix of old
 * and new blocks.  Disk blocks carry a checksum per 64 KiB, verified on
 * every read; a mismatch drops the block and refetches it.
 *
 * Several processes (a FUSE daemon, DataLoader workers) may open caches
 * over one cache_dir at once: the disk index is shared through a mapped
 * file, and the byte bound holds for all of them together.
 *
 * Life cycle (LMDB style): tfs_cache_create, tfs_cache_set (any number),
 * tfs_cache_open, ... use ..., tfs_cache_close.
 *
 * Thread safety: after open, every function is thread-safe.  A
 * struct tfs_file may be used by several threads at once.
 */
#ifndef TIERFS_CACHE_H
#define TIERFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tierfs/api.h"
#include "tierfs/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_cache;
struct tfs_file;

TFS_API int tfs_cache_create(struct tfs_cache **out);

/*
 * Set one option before open (TFS_EOPTION for a bad name or value, the
 * detail naming the option, the value and the range; -EBUSY after open):
 *
 *   block_size     block size (default 4M; 64K..64M)
 *   mem_cache      bytes of the RAM tier (default 1G; 0 disables it
 *                  except for blocks being read)
 *   cache_dir      directory of the disk tier (default: none)
 *   cache_mode     private (default: dirs 0700, files 0600, an existing
 *                  dir of ours tightened) or group (02770/0660: shared
 *                  with the dir's group, who can also poison it; never
 *                  other users; docs/security.md)
 *   cache_size     bytes of the disk tier (default 10G; at least 1M)
 *   max_blocks     blocks the disk index holds (default cache_size /
 *                  256K + 1024; 1024..8388608; raise it for caches of
 *                  small files)
 *   free_space     keep at least this much free on the cache_dir file
 *                  system: a size, or a percentage "10%" (default 5%)
 *   eviction       tinylfu (default; scan-resistant) or lru
 *   max_inflight   concurrent backend reads (default 32; 1..1024)
 *   max_readahead  largest sequential readahead window (default 64M;
 *                  at most 4G)
 *   fetch_span     bytes of consecutive readahead blocks fetched by one
 *                  store request, where the store can scatter a read
 *                  (S3; default 16M, at most 1G; 0 or one block: a
 *                  request per block).  Fewer, larger GETs cost the
 *                  server less (docs/performance-cold.md)
 *   meta_ttl       seconds a stat or listing is trusted (default 5;
 *                  fractions allowed, at most 1e7)
 *   immutable      1: never revalidate metadata or data (datasets)
 *   hedge          1: a second GET when the first passes the observed
 *                  p95 latency (default 1)
 *   hedge_min_ms   never hedge earlier than this (default 20; at most
 *                  600000)
 *   disk_packs     1: the disk tier appends blocks of at most 128K
 *                  (header included) to pack files of 4M (1M in caches
 *                  below 1G) instead of a file each, in caches from 64M
 *                  (default 1; 0: a file per block; docs/cache.md)
 *   trace          write an access trace to this file (trace.h)
 *   manifest       the listing comes from this file (written by
 *                  `tierfs manifest`; docs/fuse.md "Manifests"), read at
 *                  open, never from the store; implies immutable.  A bad
 *                  file, or one of another store, fails the open with
 *                  TFS_EFORMAT naming its line
 */
TFS_API int tfs_cache_set(struct tfs_cache *c, const char *name,
                          const char *value);

/*
 * Open over st, which is borrowed until tfs_cache_close.  Creates
 * cache_dir if needed.  Errors: -ENOMEM, -errno from the cache dir,
 * TFS_EFORMAT for an index file of another format.
 */
TFS_API int tfs_cache_open(struct tfs_cache *c, struct tfs_store *st);

/* Stop the workers, wait for them, free everything.  NULL is a no-op. */
TFS_API void tfs_cache_close(struct tfs_cache *c);

/*
 * The RAM tier's bound (mem_cache) and the block size in force: after
 * open, a cache_dir's recorded block size wins over the one set.
 */
TFS_API uint64_t tfs_cache_mem_limit(const struct tfs_cache *c);
TFS_API uint64_t tfs_cache_block_size(const struct tfs_cache *c);
/*
 * The other settings in force, for a mount over the cache: the disk
 * tier's bound (cache_size: after open, a cache_dir's recorded size wins
 * over the default), meta_ttl in nanoseconds, immutable, and cache_dir
 * (NULL: none; valid until the next tfs_cache_set or tfs_cache_close).
 */
TFS_API uint64_t tfs_cache_disk_limit(const struct tfs_cache *c);
TFS_API uint64_t tfs_cache_meta_ttl_ns(const struct tfs_cache *c);
TFS_API bool tfs_cache_is_immutable(const struct tfs_cache *c);
TFS_API const char *tfs_cache_dir(const struct tfs_cache *c);

/* ---- metadata ---- */

/* Stat through the metadata cache (negative entries too). */
TFS_API int tfs_cache_stat(struct tfs_cache *c, const char *key,
                           struct tfs_stat *out);

/* One entry of a directory listing. */
struct tfs_dirent {
    const char     *name;               /* last component, no '/' */
    bool            is_dir;
    struct tfs_stat st;                 /* files only */
};

struct tfs_dir;

/*
 * The entries directly under directory dir ("" for the root, else
 * "a/b/"), from the listing cache.  *out holds a reference: release it
 * with tfs_dir_put.  -ENOENT for a directory with nothing under it (the
 * root always exists).
 */
TFS_API int tfs_cache_opendir(struct tfs_cache *c, const char *dir,
                              struct tfs_dir **out);
TFS_API size_t tfs_dir_count(const struct tfs_dir *d);
/* Entry i, valid until tfs_dir_put; sorted by name. */
TFS_API const struct tfs_dirent *tfs_dir_entry(const struct tfs_dir *d,
                                               size_t i);
/* The entry named name, or NULL. */
TFS_API const struct tfs_dirent *tfs_dir_find(const struct tfs_dir *d,
                                              const char *name);
TFS_API void tfs_dir_put(struct tfs_dir *d);

/*
 * What key is: a file (fills *st), a directory (*is_dir), or -ENOENT.
 * Uses the parent's cached listing when there is one.
 */
TFS_API int tfs_cache_lookup(struct tfs_cache *c, const char *key,
                             bool *is_dir, struct tfs_stat *st);

/*
 * In an immutable cache, its own copy of key when key is a file of the
 * listing snapshot, and (version not NULL) in *version its copy of the
 * file's version, the one tfs_cache_lookup reports: both valid until
 * tfs_cache_close and never changed (the snapshot is fixed for the
 * cache's life), so a caller that keeps many keys (the mount's inodes)
 * need not copy each.  NULL otherwise (not immutable, not a file, the
 * snapshot not loadable), *version untouched.  Thread-safe.
 */
TFS_API const char *tfs_cache_key_stable(struct tfs_cache *c,
                                         const char *key,
                                         const char **version);

/* ---- data ---- */

/*
 * Open key for reading: its version is fixed at open, so every read
 * returns bytes of that version or fails (TFS_ECHANGED).  A small object
 * starts loading at once.  Free with tfs_file_close.
 */
TFS_API int tfs_file_open(struct tfs_cache *c, const char *key,
                          struct tfs_file **out);
/* As tfs_file_open, with a stat the caller already has. */
TFS_API int tfs_file_open_stat(struct tfs_cache *c, const char *key,
                               const struct tfs_stat *st,
                               struct tfs_file **out);
/*
 * For an event loop that answers an open (the FUSE mount): after
 * tfs_file_sent_begin, the load of a small object this thread's open
 * starts is marked, and tfs_file_sent_wait waits (2 ms at most) until
 * a fetch worker has sent its request to the store, so that the open's
 * answer (which wakes the reader) does not delay it.  It waits only
 * when a worker was free to take the load at once; otherwise, and when
 * nothing was started, it returns at once.  Every _begin needs its
 * _wait, on the same thread.
 */
TFS_API void tfs_file_sent_begin(void);
TFS_API void tfs_file_sent_wait(struct tfs_cache *c);
/*
 * Read up to len bytes at off; *nread < len only at the end of the file.
 * Sequential reads grow a readahead window.  Errors: the store's, or
 * TFS_ECHANGED when the object changed and the bytes are not cached.
 */
TFS_API int tfs_file_read(struct tfs_file *f, void *buf, size_t len,
                          uint64_t off, size_t *nread);
/*
 * Zero-copy variant for a range inside one block: *data points into the
 * cached block (*n bytes, fewer only at the end of the file), which stays
 * pinned until tfs_cache_unpin(c, *pin) -- valid even after f is closed.
 * -E2BIG when the range crosses a block boundary (use tfs_file_read).
 * Otherwise as tfs_file_read.
 */
TFS_API int tfs_file_read_pin(struct tfs_file *f, size_t len, uint64_t off,
                              const void **data, size_t *n, void **pin);
TFS_API void tfs_cache_unpin(struct tfs_cache *c, void *pin);
/*
 * Reads that never wait for the store, for event-driven callers (the
 * FUSE mount).  The _try forms are tfs_file_read and tfs_file_read_pin
 * when every block of the range is in the RAM or the disk tier (a disk
 * read is done at once); otherwise they start loading the missing blocks
 * and return -EAGAIN, having read nothing: go on with
 * tfs_file_read_async for the same range (readahead was already done).
 */
TFS_API int tfs_file_read_try(struct tfs_file *f, void *buf, size_t len,
                              uint64_t off, size_t *nread);
TFS_API int tfs_file_read_pin_try(struct tfs_file *f, size_t len,
                                  uint64_t off, const void **data,
                                  size_t *n, void **pin);
/*
 * Read [off, off+len) into buf without waiting: 0 (done now, *nread set)
 * or an error as tfs_file_read; or 1: pending, and done(arg, rc, nread)
 * is called exactly once, from a cache thread (a fetch worker), when buf
 * holds the bytes or the read failed (the store's error, -ESHUTDOWN at
 * close).  buf must stay valid until then; f may be closed meanwhile.
 * done must not block.
 */
typedef void tfs_read_done_fn(void *arg, int rc, size_t nread);
TFS_API int tfs_file_read_async(struct tfs_file *f, void *buf, size_t len,
                                uint64_t off, tfs_read_done_fn *done,
                                void *arg, size_t *nread);
/*
 * tfs_file_read_async without a copy, for a range inside one block (as
 * tfs_file_read_pin): 0 (done now: *data, *n and *pin as
 * tfs_file_read_pin gives them), an error, -E2BIG for a range that
 * crosses a block boundary, or 1: pending, and done(arg, rc, data, n,
 * pin) is called exactly once from a cache thread.  On rc 0 data points
 * into the cached block, which stays pinned until the caller's
 * tfs_cache_unpin(c, pin); on an error data and pin are NULL.  done must
 * not block.
 */
typedef void tfs_read_pin_fn(void *arg, int rc, const void *data, size_t n,
                             void *pin);
TFS_API int tfs_file_read_pin_async(struct tfs_file *f, size_t len,
                                    uint64_t off, tfs_read_pin_fn *done,
                                    void *arg, const void **data, size_t *n,
                                    void **pin);
TFS_API uint64_t tfs_file_size(const struct tfs_file *f);
TFS_API const struct tfs_stat *tfs_file_stat(const struct tfs_file *f);
TFS_API void tfs_file_close(struct tfs_file *f);

/*
 * Prefetch hint: the caller will read these keys soon, in this order.
 * Queued behind demand reads; returns at once.  Unknown keys are skipped.
 */
TFS_API int tfs_cache_prefetch(struct tfs_cache *c, const char *const *keys,
                               size_t n);

/*
 * Prefetch hint for one object, for a reader that will open it soon:
 * its blocks that are neither in RAM nor in the disk tier are queued as
 * tfs_cache_prefetch queues them; those the disk tier holds are left
 * there (a disk hit is fast).  st: its version (from a listing), or NULL
 * to stat it.  *size: the object's size; *queued: the bytes queued now
 * (0 when all of it is cached or loading).  Errors: the stat's (-ENOENT
 * for no such object).
 */
TFS_API int tfs_cache_prefetch_misses(struct tfs_cache *c, const char *key,
                                      const struct tfs_stat *st,
                                      uint64_t *size, uint64_t *queued);

/*
 * Prefetch hint for part of an open file: the blocks covering [off,
 * off+len) are queued as tfs_cache_prefetch queues whole objects (behind
 * demand reads; nothing without a RAM tier).  Returns at once.  For
 * readers that know which part of a large object they will need (one
 * worker's share of a dataset shard).
 */
TFS_API int tfs_file_prefetch(struct tfs_file *f, uint64_t off,
                              uint64_t len);

/*
 * Load every block of key into the cache (disk tier when there is one)
 * and wait.  *bytes (may be NULL) receives the object size.  For warmup.
 */
TFS_API int tfs_cache_fill(struct tfs_cache *c, const char *key,
                           uint64_t *bytes);

/* Bytes of key [0, size) present in the disk tier (or RAM without one). */
TFS_API int tfs_cache_cached_bytes(struct tfs_cache *c, const char *key,
                                   uint64_t *bytes);

/*
 * Wait until the blocks already loaded are written to the disk tier
 * (they are written by a background thread).
 */
TFS_API void tfs_cache_flush(struct tfs_cache *c);

/* Drop every cached stat and listing (not data). */
TFS_API void tfs_cache_forget_meta(struct tfs_cache *c);

/*
 * The caller changed key in the store itself (a write-back upload, a
 * move, a delete): st is the object's new stat after a put, or NULL when
 * it was removed or its new stat is unknown.  The metadata cache forgets
 * what it knew of key and of its ancestors ("a", "a/b" for "a/b/c") and
 * their listings, and records st when given, so lookups and listings see
 * the change at once rather than after meta_ttl.  Cached data needs
 * nothing: blocks are keyed by version, so the old version's blocks are
 * never served for the new content.  No effect on an immutable cache's
 * snapshot.  Thread-safe.
 */
TFS_API void tfs_cache_note_put(struct tfs_cache *c, const char *key,
                                const struct tfs_stat *st);

/* ---- statistics ---- */

/*
 * The counters since open, as one JSON object (see docs/metrics.md for
 * the fields; its "meta" member gives each number's type and unit),
 * written to buf.  *len receives the length without the NUL; -ENOSPC
 * (with *len the size needed, and buf holding what fits) when buf is too
 * small; -ENOMEM.
 */
TFS_API int tfs_cache_stats_json(struct tfs_cache *c, char *buf,
                                 size_t size, size_t *len);

/* The same in Prometheus text format. */
TFS_API int tfs_cache_stats_prometheus(struct tfs_cache *c, char *buf,
                                       size_t size, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_CACHE_H */
