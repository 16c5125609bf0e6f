/* SPDX-License-Identifier: MIT */
/*
 * Staged files.  In order:
 *
 *   data files   STAGING/data/<id>: one per content, never reused
 *   room         the staging bound: writers wait for uploads to drain
 *   life cycle   new, references, detaching, freeing
 *   I/O          read, write, truncate, copy on write
 *   sealing      flush/fsync/release: data and journal record durable
 *
 * The rule that makes crashes safe: a sealed data file is never written
 * again.  The first change after a seal works on a copy (copy on write;
 * an empty new file for a truncation to 0), so the journal's record of
 * the last seal always describes bytes that are complete on disk, and the
 * uploader reads sealed files without any lock.
 *
 * Descriptors: a node holds its data file open only while it has open
 * handles (opened at its first read or write, closed when the last
 * handle closes), so staged files waiting for upload hold none; the
 * uploader opens its own for each put.  The daemon needs one descriptor
 * per file open on the mount, as any passthrough file system does.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "tierfs/log.h"
#include "wb/wb_int.h"

#define WB_COPY_CHUNK (1u << 20)

/* ---- data files ---- */

void wb_data_path(const struct tfs_wb *wb, uint64_t id, char *buf,
                  size_t size)
{
    snprintf(buf, size, "%s/data/%016" PRIx64, wb->cfg.staging_dir, id);
}

uint64_t wb_new_id(struct tfs_wb *wb)
{
    return atomic_fetch_add(&wb->next_id, 1);
}

void wb_data_unlink(struct tfs_wb *wb, uint64_t id, uint64_t size)
{
    char name[32];

    if (id == 0)
        return;
    snprintf(name, sizeof(name), "%016" PRIx64, id);
    if (unlinkat(wb->data_fd, name, 0) < 0 && errno != ENOENT)
        TFS_WARN("staging: cannot remove data/%s: %s", name,
                 tfs_strerror(-errno));
    wb_space_add(wb, -(int64_t)size);
}

static int data_create(struct tfs_wb *wb, uint64_t *id)
{
    char name[32];
    int fd;

    *id = wb_new_id(wb);
    snprintf(name, sizeof(name), "%016" PRIx64, *id);
    fd = openat(wb->data_fd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                0600);
    if (fd < 0)
        return tfs_err(-errno, "staging: cannot create data/%s", name);
    return fd;
}

/* Copy len bytes of in into out (both from offset 0). */
static int data_copy(int in, int out, uint64_t len)
{
    off_t ioff = 0;
    off_t ooff = 0;

    while ((uint64_t)ioff < len) {
        ssize_t n = copy_file_range(in, &ioff, out, &ooff,
                                    (size_t)TFS_MIN(len - (uint64_t)ioff,
                                                    (uint64_t)1 << 30), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tfs_err(-errno, "staging: copy failed");
        if (n == 0)
            return tfs_err(-EIO, "staging: data file shorter than recorded");
    }
    return 0;
}

/*
 * n's data file, opened on first use and kept until the last handle
 * closes (node_idle_close); -ESTALE when n has none.  n->rw held,
 * shared or exclusive (n->lock serialises the opening).
 */
static int node_fd(struct tfs_wb *wb, struct wb_node *n)
{
    char name[32];
    int fd;

    pthread_mutex_lock(&n->lock);
    fd = n->fd;
    if (fd < 0 && n->id == 0)
        fd = -ESTALE;
    if (fd < 0 && n->id != 0) {
        snprintf(name, sizeof(name), "%016" PRIx64, n->id);
        fd = openat(wb->data_fd, name, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            fd = tfs_err(-errno, "staging: cannot open data/%s", name);
        else
            n->fd = fd;
    }
    pthread_mutex_unlock(&n->lock);
    return fd;
}

/* Close n's descriptor if no handle is open.  n->rw exclusive. */
static void node_idle_close(struct wb_node *n)
{
    pthread_mutex_lock(&n->lock);
    if (n->opens == 0 && n->fd >= 0) {
        close(n->fd);
        n->fd = -1;
    }
    pthread_mutex_unlock(&n->lock);
}

/* ---- room ---- */

void wb_space_add(struct tfs_wb *wb, int64_t delta)
{
    atomic_fetch_add(&wb->used, delta);
    if (delta < 0) {
        pthread_mutex_lock(&wb->lock);
        pthread_cond_broadcast(&wb->space);
        pthread_mutex_unlock(&wb->lock);
    }
}

/* Whether uploads in flight or queued can free room.  wb->lock held. */
static bool space_drainable(struct tfs_wb *wb)
{
    if (wb->inflight > 0)
        return true;
    for (struct wb_ent *e = wb->qhead; e != NULL; e = e->qnext) {
        if (e->kind == WB_NODE)
            return true;
    }
    return false;
}

/*
 * How far used may grow on the staging disk: used plus the disk's free
 * bytes less a reserve (1/32 of the disk, at most 64 MiB: room for the
 * journal and for whoever shares the disk), read at most every 50 ms
 * (or now, with fresh).  Staged bytes written since the reading count
 * against it through used, so a fast writer cannot outrun the sample.
 * UINT64_MAX when statvfs fails: then only staging_max bounds.
 */
#define WB_DISK_RESERVE_MAX (64ull << 20)
#define WB_DISK_EVERY_NS    50000000ull

static uint64_t disk_limit(struct tfs_wb *wb, bool fresh)
{
    uint64_t now = tfs_now_ns();
    uint64_t used = (uint64_t)atomic_load(&wb->used);
    struct statvfs sv;
    uint64_t avail, reserve, limit;

    if (!fresh && now - atomic_load(&wb->disk_at_ns) < WB_DISK_EVERY_NS)
        return atomic_load(&wb->disk_limit);
    if (fstatvfs(wb->data_fd, &sv) != 0 || sv.f_frsize == 0) {
        limit = UINT64_MAX;
    } else {
        avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        reserve = (uint64_t)sv.f_blocks * sv.f_frsize / 32;
        if (reserve > WB_DISK_RESERVE_MAX)
            reserve = WB_DISK_RESERVE_MAX;
        limit = used + (avail > reserve ? avail - reserve : 0);
    }
    atomic_store(&wb->disk_limit, limit);
    atomic_store(&wb->disk_at_ns, now);
    return limit;
}

/* Whether need more staged bytes would pass staging_max or the disk. */
static bool space_short(struct tfs_wb *wb, uint64_t need, bool fresh)
{
    uint64_t max = wb->cfg.staging_max;
    uint64_t used = (uint64_t)atomic_load(&wb->used);

    if (max != 0 && used + need > max)
        return true;
    return used + need > disk_limit(wb, fresh);
}

int wb_space_wait(struct tfs_wb *wb, uint64_t need, const char *why)
{
    uint64_t t0 = 0;
    int rc = 0;

    if (!space_short(wb, need, false))
        return 0;
    pthread_mutex_lock(&wb->lock);
    while (space_short(wb, need, t0 != 0)) {
        uint64_t now = tfs_now_ns();
        char a[32];
        char b[32];
        char c[32];

        if (!space_drainable(wb))
            break;                      /* only open files: soft bound */
        if (t0 == 0) {
            uint64_t lim = atomic_load(&wb->disk_limit);
            uint64_t used = (uint64_t)atomic_load(&wb->used);

            t0 = now;
            TFS_LOGL(TFS_LOG_NOTICE, "staging full (%s of %s staged, %s "
                     "free on its disk): %s waits for uploads",
                     tfs_fmt_bytes(a, sizeof(a),
                                   (double)atomic_load(&wb->used)),
                     tfs_fmt_bytes(b, sizeof(b),
                                   (double)wb->cfg.staging_max),
                     lim == UINT64_MAX ? "?" :
                     tfs_fmt_bytes(c, sizeof(c), lim > used ?
                                   (double)(lim - used) : 0.0), why);
        }
        if (now - t0 >= wb->cfg.staging_wait_ms * 1000000) {
            TFS_WARN("staging full for %" PRIu64 " s: %s fails with "
                     "ENOSPC (the uploads are not draining; see the "
                     "upload errors)", wb->cfg.staging_wait_ms / 1000, why);
            rc = -ENOSPC;
            break;
        }
        tfs_cond_wait_ms(&wb->space, &wb->lock, 1000);
    }
    pthread_mutex_unlock(&wb->lock);
    if (t0 != 0) {
        atomic_fetch_add(&wb->n.waits, 1);
        atomic_fetch_add(&wb->n.wait_ns, tfs_now_ns() - t0);
    }
    return rc;
}

/* ---- life cycle ---- */

int wb_node_new(struct tfs_wb *wb, uint64_t id, uint64_t size,
                int64_t mtime_ns, struct wb_node **out)
{
    struct wb_node *n = tfs_calloc(1, sizeof(*n));

    if (n == NULL)
        return -ENOMEM;
    n->fd = -1;                         /* a replayed one: opened on use */
    n->id = id;
    if (id == 0)
        n->fd = data_create(wb, &n->id);
    if (n->fd < 0 && id == 0) {
        int rc = n->fd;
        tfs_free(n);
        return rc;
    }
    atomic_init(&n->refs, 1);
    n->wb = wb;
    n->nid = atomic_fetch_add(&wb->next_nid, 1);
    pthread_rwlock_init(&n->rw, NULL);
    pthread_mutex_init(&n->lock, NULL);
    n->size = size;
    n->mtime_ns = mtime_ns ? mtime_ns : tfs_wall_ns();
    n->cur_sealed = id != 0;
    n->dir_synced = id != 0;
    n->dirty = id == 0;                 /* a new file: its close seals it */
    *out = n;
    return 0;
}

struct wb_node *wb_node_get(struct wb_node *n)
{
    atomic_fetch_add(&n->refs, 1);
    return n;
}

/*
 * The last reference: close, and remove the node's data files unless the
 * mount is closing (then the next mount's sweep decides; a node still in
 * the view is referenced by the journal).
 */
void wb_node_put(struct wb_node *n)
{
    struct tfs_wb *wb;

    if (n == NULL || atomic_fetch_sub(&n->refs, 1) != 1)
        return;
    wb = n->wb;
    wb_eager_cancel(n, WB_EAGER_QUIET, true);
    if (n->fd >= 0)
        close(n->fd);
    if (!atomic_load(&wb->closing)) {
        wb_data_unlink(wb, n->id, n->size);
        if (n->has_sealed && n->sealed_id != n->id)
            wb_data_unlink(wb, n->sealed_id, n->sealed_size);
    }
    pthread_rwlock_destroy(&n->rw);
    pthread_mutex_destroy(&n->lock);
    tfs_free(n);
}

void wb_node_attr(struct wb_node *n, struct wb_attr *out)
{
    out->nid = n->nid;
    pthread_mutex_lock(&n->lock);
    out->size = n->size;
    out->mtime_ns = n->mtime_ns;
    pthread_mutex_unlock(&n->lock);
}

bool wb_node_is_version(struct wb_node *n, const char *version)
{
    bool same;

    pthread_mutex_lock(&n->lock);
    same = n->up_gen > 0 && strcmp(n->up_st.version, version) == 0;
    pthread_mutex_unlock(&n->lock);
    return same;
}

/*
 * Remove n's data files (current and sealed) and forget them; n is out
 * of the view, so the journal references neither.  n->rw exclusive.
 */
static void node_forget_files(struct tfs_wb *wb, struct wb_node *n)
{
    uint64_t sid = 0;
    uint64_t ssize = 0;
    uint64_t size;

    pthread_mutex_lock(&wb->lock);
    if (n->has_sealed && n->sealed_id != n->id) {
        sid = n->sealed_id;
        ssize = n->sealed_size;
    }
    n->has_sealed = false;
    n->sealed_id = 0;
    pthread_mutex_unlock(&wb->lock);
    pthread_mutex_lock(&n->lock);
    size = n->size;
    pthread_mutex_unlock(&n->lock);
    wb_data_unlink(wb, n->id, size);
    wb_data_unlink(wb, sid, ssize);
    n->id = 0;
}

void wb_node_detached(struct tfs_wb *wb, struct wb_node *n)
{
    bool drop;

    pthread_rwlock_wrlock(&n->rw);
    pthread_mutex_lock(&wb->lock);
    pthread_mutex_lock(&n->lock);
    drop = n->ent == NULL && n->opens == 0 && n->id != 0;
    pthread_mutex_unlock(&n->lock);
    pthread_mutex_unlock(&wb->lock);
    node_idle_close(n);
    if (drop)
        node_forget_files(wb, n);
    pthread_rwlock_unlock(&n->rw);
}

/* ---- I/O ---- */

int wb_node_open_read(struct wb_node *n, struct tfs_stat *st)
{
    int rc = 0;

    pthread_rwlock_rdlock(&n->rw);
    pthread_mutex_lock(&n->lock);
    if (n->id != 0)
        n->opens++;
    else if (n->up_gen > 0)
        *st = n->up_st;
    rc = n->id != 0 ? 0 : n->up_gen > 0 ? -ENODATA : -ESTALE;
    pthread_mutex_unlock(&n->lock);
    pthread_rwlock_unlock(&n->rw);
    return rc;
}

int wb_node_read(struct wb_node *n, void *buf, size_t len, uint64_t off,
                 size_t *nread)
{
    size_t done = 0;
    int rc;
    int fd;

    pthread_rwlock_rdlock(&n->rw);
    fd = node_fd(n->wb, n);
    rc = fd < 0 ? fd : tfs_pread_full(fd, buf, len, off, &done);
    if (fd >= 0 && rc < 0)
        rc = tfs_err(rc, "staging: read failed");
    pthread_rwlock_unlock(&n->rw);
    *nread = done;
    return rc;
}

/*
 * Give n a writable data file of its current size: a copy of the sealed
 * one (or an empty one when keep is 0 bytes).  n->rw held exclusive.
 */
static int node_unseal(struct tfs_wb *wb, struct wb_node *n, uint64_t keep)
{
    uint64_t id;
    int old = keep > 0 ? node_fd(wb, n) : 0;
    int fd;
    int rc = 0;

    if (old == -ESTALE)
        return tfs_err(-EIO, "staging: no local data to copy");
    if (old < 0)
        return old;
    fd = data_create(wb, &id);
    if (fd < 0)
        return fd;
    if (keep > 0)
        rc = data_copy(old, fd, keep);
    if (rc < 0) {
        close(fd);
        wb_data_unlink(wb, id, 0);
        return rc;
    }
    if (n->fd >= 0)
        close(n->fd);
    wb_eager_cancel(n, WB_EAGER_REWRITE, true);     /* of the old file */
    /* The old file stays: it is the sealed one, or unreferenced (a node
       out of the view), in which case it goes now. */
    pthread_mutex_lock(&wb->lock);
    if (n->id != 0 && !(n->has_sealed && n->sealed_id == n->id)) {
        pthread_mutex_unlock(&wb->lock);
        wb_data_unlink(wb, n->id, n->size);
    } else {
        pthread_mutex_unlock(&wb->lock);
    }
    n->fd = fd;
    n->id = id;
    n->cur_sealed = false;
    n->dir_synced = false;
    pthread_mutex_lock(&n->lock);
    n->kicked = 0;
    n->size = keep;
    n->dirty = true;
    n->gen++;
    pthread_mutex_unlock(&n->lock);
    wb_space_add(wb, (int64_t)keep);
    atomic_fetch_add(&wb->n.copies, keep > 0);
    return 0;
}

/* Take n->rw for a change of content: shared, or exclusive after making
   the data file writable (copy on write). */
static int node_lock_write(struct tfs_wb *wb, struct wb_node *n)
{
    uint64_t size;
    int rc;

    pthread_rwlock_rdlock(&n->rw);
    if (!n->cur_sealed && n->id != 0)
        return 0;
    pthread_rwlock_unlock(&n->rw);
    pthread_mutex_lock(&n->lock);
    size = n->size;
    pthread_mutex_unlock(&n->lock);
    rc = wb_space_wait(wb, size, "a copy on write");
    if (rc < 0)
        return rc;
    pthread_rwlock_wrlock(&n->rw);
    pthread_mutex_lock(&n->lock);
    size = n->size;                     /* a truncate may have run */
    pthread_mutex_unlock(&n->lock);
    rc = n->cur_sealed || n->id == 0 ? node_unseal(wb, n, size) : 0;
    if (rc < 0)
        pthread_rwlock_unlock(&n->rw);
    return rc;
}

/* Record a change of content that ends at end (grows the size). */
static void node_changed(struct tfs_wb *wb, struct wb_node *n, uint64_t end,
                         bool set_size)
{
    int64_t delta;

    pthread_mutex_lock(&n->lock);
    delta = (int64_t)((set_size || end > n->size) ? end : n->size) -
            (int64_t)n->size;
    n->size += (uint64_t)delta;
    n->mtime_ns = tfs_wall_ns();
    n->dirty = true;
    n->gen++;
    pthread_mutex_unlock(&n->lock);
    if (delta != 0)
        wb_space_add(wb, delta);
}

/*
 * Start writing back what a writer has put in the data file, every
 * early_writeback bytes past the last start (sync_file_range,
 * asynchronous): the disk works while the writer goes on, and the seal's
 * fdatasync finds little left to write.  The seal still syncs
 * everything; this only moves the disk's work earlier.  A write behind
 * the last start (a rewrite, or requests arriving out of order) starts
 * nothing: the seal covers it.  n->rw held (shared).
 */
static void node_kick(struct tfs_wb *wb, struct wb_node *n, int fd,
                      uint64_t end)
{
    uint64_t every = wb->cfg.early_writeback;
    uint64_t from;

    if (every == 0)
        return;
    pthread_mutex_lock(&n->lock);
    from = n->kicked;
    if (end < from + every) {
        pthread_mutex_unlock(&n->lock);
        return;
    }
    n->kicked = end;
    pthread_mutex_unlock(&n->lock);
    if (sync_file_range(fd, (off_t)from, (off_t)(end - from),
                        SYNC_FILE_RANGE_WRITE) == 0)
        atomic_fetch_add(&wb->n.kick_bytes, end - from);
}

int wb_node_write(struct tfs_wb *wb, struct wb_node *n, const void *buf,
                  size_t len, uint64_t off)
{
    size_t done = 0;
    uint64_t size;
    int rc;
    int fd;

    pthread_mutex_lock(&n->lock);
    size = n->size;
    pthread_mutex_unlock(&n->lock);
    if (off + len > size) {
        rc = wb_space_wait(wb, off + len - size, "a write");
        if (rc < 0)
            return rc;
    }
    rc = node_lock_write(wb, n);
    if (rc < 0)
        return rc;
    fd = node_fd(wb, n);
    if (fd < 0)
        rc = fd;
    while (fd >= 0 && done < len) {
        ssize_t w = pwrite(fd, (const char *)buf + done, len - done,
                           (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = tfs_err(-errno, "staging: write failed");
            break;
        }
        done += (size_t)w;
    }
    if (done > 0)
        node_changed(wb, n, off + done, false);
    if (done > 0)
        node_kick(wb, n, fd, off + done);
    if (done > 0)
        wb_eager_wrote(wb, n, off, off + done);
    pthread_rwlock_unlock(&n->rw);
    atomic_fetch_add(&wb->n.writes, 1);
    atomic_fetch_add(&wb->n.write_bytes, done);
    return rc;
}

int wb_node_truncate(struct tfs_wb *wb, struct wb_node *n, uint64_t size)
{
    uint64_t cur;
    int rc = 0;
    int fd;

    pthread_mutex_lock(&n->lock);
    cur = n->size;
    pthread_mutex_unlock(&n->lock);
    if (size > cur)
        rc = wb_space_wait(wb, size - cur, "a truncate");
    if (rc < 0)
        return rc;
    pthread_rwlock_wrlock(&n->rw);
    wb_eager_cancel(n, WB_EAGER_REWRITE, false);
    if (n->cur_sealed || n->id == 0)
        rc = node_unseal(wb, n, TFS_MIN(size, cur));
    fd = rc == 0 ? node_fd(wb, n) : -1;
    if (rc == 0 && fd < 0)
        rc = fd;
    if (rc == 0 && ftruncate(fd, (off_t)size) < 0)
        rc = tfs_err(-errno, "staging: truncate failed");
    if (rc == 0)
        node_changed(wb, n, size, true);
    node_idle_close(n);                 /* a truncate without a handle */
    pthread_rwlock_unlock(&n->rw);
    return rc;
}

void wb_node_set_mtime(struct wb_node *n, int64_t mtime_ns)
{
    pthread_mutex_lock(&n->lock);
    n->mtime_ns = mtime_ns;
    pthread_mutex_unlock(&n->lock);
}

/* Copy key@st, read through the cache, into fd. */
static int copy_from_store(struct tfs_wb *wb, int fd, const char *key,
                           const struct tfs_stat *st)
{
    struct tfs_file *f = NULL;
    char *buf = tfs_malloc(WB_COPY_CHUNK);
    uint64_t off = 0;
    int rc = buf ? tfs_file_open_stat(wb->cache, key, st, &f) : -ENOMEM;

    while (rc == 0 && off < st->size) {
        size_t got = 0;
        rc = tfs_file_read(f, buf, WB_COPY_CHUNK, off, &got);
        if (rc == 0 && got == 0)
            rc = tfs_err(-EIO, "'%s' ended early", key);
        if (rc == 0 && pwrite(fd, buf, got, (off_t)off) != (ssize_t)got)
            rc = tfs_err(-EIO, "staging: write failed");
        off += got;
    }
    tfs_file_close(f);
    tfs_free(buf);
    return rc;
}

int wb_node_replace(struct tfs_wb *wb, struct wb_node *n, const char *key,
                    const struct tfs_stat *st)
{
    uint64_t size = st ? st->size : 0;
    bool attached;
    bool local;
    uint64_t id;
    int old;
    int fd;
    int rc = wb_space_wait(wb, size, "a copy for writing");

    if (rc < 0)
        return rc;
    pthread_rwlock_wrlock(&n->rw);
    pthread_mutex_lock(&wb->lock);
    attached = n->ent != NULL;
    pthread_mutex_unlock(&wb->lock);
    if (attached) {
        pthread_rwlock_unlock(&n->rw);
        return 1;
    }
    local = st != NULL && n->id != 0 && wb_node_is_version(n, st->version);
    old = local ? node_fd(wb, n) : -1;
    local = local && old >= 0;          /* else from the store */
    fd = data_create(wb, &id);
    rc = fd < 0 ? fd : 0;
    if (rc == 0 && local)
        rc = data_copy(old, fd, size);
    else if (rc == 0 && st != NULL)
        rc = copy_from_store(wb, fd, key, st);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        if (fd >= 0)
            wb_data_unlink(wb, id, 0);
        pthread_rwlock_unlock(&n->rw);
        return rc;
    }
    if (n->fd >= 0)
        close(n->fd);
    wb_eager_cancel(n, WB_EAGER_REWRITE, true);     /* of the old file */
    node_forget_files(wb, n);           /* out of the view: unreferenced */
    n->fd = fd;
    n->id = id;
    n->cur_sealed = false;
    n->dir_synced = false;
    pthread_mutex_lock(&n->lock);
    n->size = size;
    n->mtime_ns = tfs_wall_ns();
    n->dirty = true;
    n->gen++;
    pthread_mutex_unlock(&n->lock);
    wb_space_add(wb, (int64_t)size);
    node_idle_close(n);
    pthread_rwlock_unlock(&n->rw);
    return 0;
}

/* ---- sealing ---- */

/* The journal op of n's content at its key; n->ent set.  wb->lock held. */
static void seal_record(struct tfs_wb *wb, struct wb_node *n,
                        struct tfs_buf *rec, uint64_t size, int64_t mtime,
                        uint64_t *old_id, uint64_t *old_size)
{
    *old_id = 0;
    if (n->has_sealed && n->sealed_id != n->id) {
        *old_id = n->sealed_id;
        *old_size = n->sealed_size;
    }
    n->has_sealed = true;
    n->sealed_id = n->id;
    n->sealed_size = size;
    n->sealed_mtime_ns = mtime;
    n->sealed_gen++;
    n->ent->ready_ns = tfs_now_ns() + wb->cfg.upload_delay_ms * 1000000;
    wb_jop_ent(wb, rec, n->ent);
    n->ent->seq = ++wb->seq;
    wb_ent_requeue(wb, n->ent);
    pthread_cond_broadcast(&wb->changed);
}

/* Seal under n->rw (exclusive); *end receives the journal offset. */
static int node_seal_locked(struct tfs_wb *wb, struct wb_node *n,
                            uint64_t *old_id, uint64_t *old_size,
                            uint64_t *end)
{
    struct tfs_buf rec;
    uint64_t size;
    int64_t mtime;
    int rc = 0;
    int fd;

    pthread_mutex_lock(&n->lock);
    size = n->size;
    mtime = n->mtime_ns;
    pthread_mutex_unlock(&n->lock);
    pthread_mutex_lock(&wb->lock);
    rc = n->ent == NULL ? 1 : 0;        /* deleted: nothing to keep */
    pthread_mutex_unlock(&wb->lock);
    if (rc == 1)
        return 0;
    fd = node_fd(wb, n);
    if (fd < 0)
        return fd;
    if (fdatasync(fd) < 0)
        return tfs_err(-errno, "staging: fdatasync failed");
    if (!n->dir_synced && fsync(wb->data_fd) < 0)
        return tfs_err(-errno, "staging: fsync of data/ failed");
    n->dir_synced = true;
    tfs_buf_init(&rec, 0);
    pthread_mutex_lock(&wb->lock);
    if (n->ent != NULL) {
        seal_record(wb, n, &rec, size, mtime, old_id, old_size);
        rc = wb_journal_append(wb, &rec, end);
    }
    pthread_mutex_unlock(&wb->lock);
    tfs_buf_cleanup(&rec);
    /* Even when the append failed: the overlay names these bytes now,
       and a compaction will record them, so they must not change. */
    n->cur_sealed = true;
    return rc;
}

int wb_node_seal(struct tfs_wb *wb, struct wb_node *n)
{
    uint64_t t0 = tfs_now_ns();
    uint64_t old_id = 0;
    uint64_t old_size = 0;
    uint64_t end = 0;
    bool dirty;
    int rc = 0;

    pthread_rwlock_wrlock(&n->rw);
    pthread_mutex_lock(&n->lock);
    dirty = n->dirty && n->id != 0;
    end = n->seal_end;
    pthread_mutex_unlock(&n->lock);
    if (dirty)
        rc = node_seal_locked(wb, n, &old_id, &old_size, &end);
    if (dirty && rc == 0)
        wb_eager_sealed(n);
    if (rc == 0 && dirty) {
        pthread_mutex_lock(&n->lock);
        n->dirty = false;
        n->seal_end = end;
        pthread_mutex_unlock(&n->lock);
    }
    pthread_rwlock_unlock(&n->rw);
    if (rc == 0)
        rc = wb_journal_sync(wb, end);
    if (rc == 0)
        wb_data_unlink(wb, old_id, old_size);
    if (dirty && rc == 0) {
        atomic_fetch_add(&wb->n.seals, 1);
        atomic_fetch_add(&wb->n.seal_ns, tfs_now_ns() - t0);
    }
    return rc;
}

void wb_node_close(struct tfs_wb *wb, struct wb_node *n, bool writer,
                   bool seal)
{
    unsigned opens;
    int rc;

    if (writer && seal) {
        rc = wb_node_seal(wb, n);
        if (rc < 0)
            TFS_WARN("release: sealing a staged file failed: %s",
                     tfs_strerror(rc));
    }
    pthread_mutex_lock(&n->lock);
    n->opens--;
    n->writers -= writer;
    opens = n->opens;
    pthread_mutex_unlock(&n->lock);
    if (opens == 0)
        wb_node_detached(wb, n);
}
