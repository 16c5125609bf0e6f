/* SPDX-License-Identifier: MIT */
/*
 * Reads that wait for the store, answered from the fetch completion:
 * started without a thread (tfs_file_read_pin_async: answered from the
 * block itself, pinned; tfs_file_read_async with a reply buffer of its
 * own for a read across two blocks), at most async.max in flight; the
 * rest wait in a FIFO that completions drain.  A read whose object was
 * moved meanwhile goes to the store path (spath.c).  At close every one
 * still unanswered is answered EIO.
 */

#include <errno.h>
#include <pthread.h>

#include "fuse/fuse_int.h"

struct fs_aread {
    struct fs_aread  *prev;             /* fs->async.lock */
    struct fs_aread  *next;             /* fs->async.lock */
    struct tfs_fs    *fs;
    fuse_req_t        req;
    fuse_ino_t        ino;
    struct fs_handle *h;                /* the kernel keeps it open until
                                           the read is answered */
    struct fuse_file_info fi;           /* for a read moved to the store
                                           path */
    size_t            size;
    uint64_t          off;
    bool              overflow;         /* waited past the bound */
    char             *buf;              /* size bytes once started */
    atomic_bool       answered;         /* replied, or cancelled at close */
};

static void fs_aread_unlink(struct fs_async *as, struct fs_aread *a)
{
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        as->flight = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    as->n_flight--;
}

static void fs_aread_link(struct fs_async *as, struct fs_aread *a)
{
    a->prev = NULL;
    a->next = as->flight;
    if (a->next != NULL)
        a->next->prev = a;
    as->flight = a;
    as->n_flight++;
}

/*
 * Reply to a finished read (once: close may have answered it), free it.
 * The bytes are in data (a cached block, pinned by pin: unpinned once
 * replied), or in a->buf.  A read of an object moved meanwhile goes to
 * the store path, as a blocking read at the inode's key.
 */
static void fs_aread_finish(struct fs_aread *a, int rc, const void *data,
                            size_t n, void *pin)
{
    struct tfs_fs *fs = a->fs;

    if (!atomic_exchange(&a->answered, true)) {
        if (rc == -ENOENT && fs->wb != NULL) {
            atomic_store(&a->h->moved, true);
            fs_defer_read(fs, a->req, a->ino, &a->fi, a->size, a->off);
        } else if (rc < 0) {
            fs_read_warn(fs, a->h, a->size, a->off, rc);
            fuse_reply_err(a->req, fs_errno(rc));
        } else {
            fs_count_read(fs, a->size, n);
            atomic_fetch_add(&fs->n.async_reads, 1);
            atomic_fetch_add(&fs->n.async_overflow, a->overflow);
            /* from the block itself: libfuse writes it to /dev/fuse
               as it is, no copy in between */
            fuse_reply_buf(a->req, data != NULL ? data : a->buf, n);
        }
    }
    tfs_cache_unpin(fs->cache, pin);
    pthread_mutex_lock(&fs->async.lock);
    fs_aread_unlink(&fs->async, a);
    pthread_mutex_unlock(&fs->async.lock);
    if (a->buf != NULL)
        atomic_fetch_sub(&fs->async.buf_bytes, a->size);
    tfs_free(a->buf);
    tfs_free(a);
}

static void fs_aread_pump(struct tfs_fs *fs);

/* A fetch completion: a's bytes are in its buffer, or rc says why not. */
static void fs_aread_done(void *arg, int rc, size_t n)
{
    struct tfs_fs *fs = ((struct fs_aread *)arg)->fs;

    fs_aread_finish(arg, rc, NULL, n, NULL);
    fs_aread_pump(fs);                  /* a slot is free */
}

/* The same for a read answered from its block, pinned. */
static void fs_aread_pin_done(void *arg, int rc, const void *data, size_t n,
                              void *pin)
{
    struct tfs_fs *fs = ((struct fs_aread *)arg)->fs;

    fs_aread_finish(arg, rc, data, n, pin);
    fs_aread_pump(fs);
}

/*
 * Start a (in flight): false when it finished at once.  A read inside
 * one block (all of a sequential reader's, the block size being a
 * multiple of the kernel's request size) is answered from the block
 * itself once it is published; one that crosses a block boundary is
 * copied into a buffer of its own.
 */
static bool fs_aread_start(struct fs_aread *a)
{
    const void *data = NULL;
    void *pin = NULL;
    size_t n = 0;
    int rc;

    rc = tfs_file_read_pin_async(a->h->file, a->size, a->off,
                                 fs_aread_pin_done, a, &data, &n, &pin);
    if (rc == 1)
        return true;                    /* a belongs to the completion */
    if (rc != -E2BIG) {
        fs_aread_finish(a, rc, data, n, pin);
        return false;
    }
    a->buf = tfs_malloc(a->size);
    if (a->buf != NULL)
        atomic_fetch_add(&a->fs->async.buf_bytes, a->size);
    rc = a->buf == NULL ? -ENOMEM
                        : tfs_file_read_async(a->h->file, a->buf, a->size,
                                              a->off, fs_aread_done, a, &n);
    if (rc == 1)
        return true;                    /* a belongs to the completion */
    fs_aread_finish(a, rc, NULL, n, NULL);
    return false;
}

/* Start queued reads while there is room. */
static void fs_aread_pump(struct tfs_fs *fs)
{
    struct fs_async *as = &fs->async;

    for (;;) {
        struct fs_aread *a;

        pthread_mutex_lock(&as->lock);
        a = as->closing || as->n_flight >= as->max ? NULL : as->head;
        if (a != NULL) {
            as->head = a->next;
            if (as->head == NULL)
                as->tail = NULL;
            as->n_queued--;
            fs_aread_link(as, a);
        }
        pthread_mutex_unlock(&as->lock);
        if (a == NULL)
            return;
        fs_aread_start(a);
    }
}

/*
 * A read the cache cannot answer now: start it without a thread, or,
 * past the bound, queue it; a completion starts it when a slot frees.
 * The FUSE thread returns at once either way.
 */
void fs_aread_submit(struct tfs_fs *fs, fuse_req_t req,
                     fuse_ino_t ino, struct fuse_file_info *fi,
                     size_t size, uint64_t off)
{
    struct fs_async *as = &fs->async;
    struct fs_aread *a = tfs_calloc(1, sizeof(*a));
    bool start;

    if (a == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    a->fs = fs;
    a->req = req;
    a->ino = ino;
    a->h = fs_handle_of(fi);
    a->fi = *fi;
    a->size = size;
    a->off = off;
    pthread_mutex_lock(&as->lock);
    start = !as->closing && as->n_flight < as->max && as->head == NULL;
    if (start) {
        fs_aread_link(as, a);
    } else if (!as->closing) {
        a->overflow = true;
        if (as->tail != NULL)
            as->tail->next = a;
        else
            as->head = a;
        as->tail = a;
        as->n_queued++;
    }
    pthread_mutex_unlock(&as->lock);
    if (!a->overflow && !start) {       /* closing */
        fuse_reply_err(req, EIO);
        tfs_free(a);
        return;
    }
    if (start && !fs_aread_start(a))
        fs_aread_pump(fs);
}

/* At close: answer every read in flight or queued EIO. */
void fs_aread_cancel(struct tfs_fs *fs)
{
    struct fs_async *as = &fs->async;
    struct fs_aread *q;

    pthread_mutex_lock(&as->lock);
    as->closing = true;
    for (struct fs_aread *a = as->flight; a != NULL; a = a->next) {
        if (!atomic_exchange(&a->answered, true))
            fuse_reply_err(a->req, EIO);
    }
    q = as->head;
    as->head = as->tail = NULL;
    as->n_queued = 0;
    pthread_mutex_unlock(&as->lock);
    while (q != NULL) {
        struct fs_aread *next = q->next;
        fuse_reply_err(q->req, EIO);
        tfs_free(q);
        q = next;
    }
}
