/* SPDX-License-Identifier: MIT */
/*
 * The mount: a FUSE file system over a cache (cache.h) over a store
 * (store.h).  Objects appear as files, '/'-separated key prefixes as
 * directories; a control file ".tierfs-stats" at the root (not listed)
 * reads as the cache's statistics in JSON.  Unless read-only, writes are
 * staged on local disk and uploaded in the background (write-back).
 * docs/fuse.md describes the semantics (timeouts, kernel caching,
 * errors), docs/writeback.md the write side.
 *
 * Life cycle (LMDB style):
 *
 *     tfs_fs_create(&fs);
 *     tfs_fs_set(fs, "cache_dir", "/nvme/tierfs");     any number
 *     tfs_fs_open(fs, st, "/mnt/data");                mounts
 *     tfs_fs_run(fs);                                  serves until unmounted
 *     tfs_fs_close(fs);                                unmounts, frees
 *
 * Thread safety: one thread at a time calls these functions.  The file
 * system itself serves requests on a pool of threads inside tfs_fs_run.
 */
#ifndef TIERFS_FS_H
#define TIERFS_FS_H

#include "tierfs/api.h"
#include "tierfs/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_fs;

/* A new, unmounted file system with its cache created.  -ENOMEM. */
TFS_API int tfs_fs_create(struct tfs_fs **out);

/*
 * Set one option before open.  Every cache option (cache.h: block_size,
 * mem_cache, cache_dir, cache_size, free_space, eviction, max_inflight,
 * max_readahead, meta_ttl, immutable, hedge, hedge_min_ms) is passed to
 * the cache, and these belong to the mount:
 *
 *   metrics      ADDR:PORT (or PORT, meaning 127.0.0.1) of a Prometheus
 *                /metrics endpoint; default none
 *   fuse_opts    comma-separated FUSE mount options added to the
 *                defaults ("allow_other", "max_read=N", ...); may be
 *                given several times
 *   debug        1: libfuse's request trace on stderr
 *   max_threads  most threads serving requests at once (default 64)
 *   kernel_readahead
 *                the kernel's readahead window for the mount (default
 *                4M; 0 leaves the kernel's 128K).  Raising it takes
 *                root; it is what lets reads arrive as 1 MiB requests
 *   read_only    1: no writes (EROFS), no staging; immutable implies it
 *   staging_dir  staged writes and their journal (default
 *                CACHE_DIR/staging/ID, or /var/tmp/tierfs-UID/staging/ID,
 *                ID a hash of the store's identity); one mount at a time
 *   staging_max  staged bytes before writers wait for uploads (100G)
 *   staging_wait seconds a writer waits for room before ENOSPC (300)
 *   upload_bw    upload cap, bytes per second (default none)
 *   upload_jobs  store operations of the uploader at once (4)
 *   upload_delay seconds after a close before uploading (1)
 *   upload_retry_max
 *                longest backoff between upload attempts, seconds (30)
 *
 * Errors: TFS_EOPTION (bad name or value; the detail names it), -EBUSY
 * after open, -ENOMEM.
 */
TFS_API int tfs_fs_set(struct tfs_fs *fs, const char *name,
                       const char *value);

/*
 * Open the cache over st (borrowed until tfs_fs_close), the staging dir
 * (replaying its journal: pending uploads resume), start the metrics
 * endpoint when asked, and mount on mountpoint, which must be an empty
 * directory.  Requests wait in the kernel until tfs_fs_run.  Errors:
 * -ENOTEMPTY, -ENOTDIR, -ENOENT (mountpoint), the cache's, -EBUSY (the
 * staging dir is another mount's), TFS_EOPTION (it holds changes for
 * another store), -EADDRINUSE (metrics), -EIO (mount failed; the detail
 * says why), -ENOMEM.  On failure nothing stays mounted and fs may only
 * be closed.
 */
TFS_API int tfs_fs_open(struct tfs_fs *fs, struct tfs_store *st,
                        const char *mountpoint);

/*
 * Serve requests on a pool of threads until the file system is unmounted
 * (umount, fusermount3 -u, tierfs umount) or the process gets SIGINT,
 * SIGTERM or SIGHUP.  For the duration of the call it installs handlers
 * for those three (restoring the previous ones on return) and ignores
 * SIGPIPE, so one mounted file system per process.  Returns 0 on a
 * clean end, else the session's error.
 */
TFS_API int tfs_fs_run(struct tfs_fs *fs);

/*
 * Unmount if still mounted, stop the metrics endpoint and the uploader
 * (uploads in flight finish; queued ones stay in the journal for the next
 * mount), close open files and the cache, free everything.  The store is
 * not closed.  NULL is a no-op.
 */
TFS_API void tfs_fs_close(struct tfs_fs *fs);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_FS_H */
