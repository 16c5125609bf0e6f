/* SPDX-License-Identifier: MIT */
/*
 * The handlers of file data: open (a store version through the cache, a
 * staged file, the control file; opens for writing go to write.c),
 * read and release.  Reads never wait on the store in a FUSE thread:
 * what the cache holds is answered now, from a pinned block or a
 * per-thread buffer, the rest from the fetch completion (aread.c).
 * Reads of a moved object, the control file and staged files read at
 * once, moved ones on the store path (spath.c).
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include "fuse/fuse_int.h"
#include "tierfs/log.h"

/* ---- open ---- */

/* Open the control file: render the statistics now (direct I/O). */
static int fs_ctl_open(struct tfs_fs *fs, struct fuse_file_info *fi)
{
    struct fs_handle *h = fs_handle_new(fs, FS_H_CTL, fs->inodes.ctl);
    int rc;

    if (h == NULL)
        return -ENOMEM;
    rc = fs_ctl_render(fs, &h->ctl);
    if (rc < 0) {
        fs_handle_free(fs, h, false);
        return fs_fail(fs, "open", FS_CTL_NAME, rc);
    }
    fi->fh = (uintptr_t)h;
    fi->direct_io = 1;
    return 0;
}

/* Open the order-hint file: a new stream (any access mode; direct I/O,
   so every write reaches hint.c and every read renders anew). */
static int fs_hint_file_open(struct tfs_fs *fs, struct fuse_file_info *fi)
{
    struct fs_handle *h = fs_handle_new(fs, FS_H_HINT, fs->inodes.hint);
    int rc;

    if (h == NULL)
        return -ENOMEM;
    rc = fs_hint_open(fs, h);
    if (rc < 0) {
        fs_handle_free(fs, h, false);
        return fs_fail(fs, "open", FS_HINT_NAME, rc);
    }
    fi->fh = (uintptr_t)h;
    fi->direct_io = 1;
    fi->nonseekable = 1;
    return 0;
}

/*
 * Whether the inode still names what its key holds: -ESTALE when the
 * metadata cache knows a newer version (or none), which makes the kernel
 * walk the path again with a fresh lookup (LOOKUP_REVAL) and retry the
 * open on the new inode.  When the store cannot be asked, the inode's own
 * version is used, so cached data stays readable through an outage.
 */
static int fs_check_current(struct tfs_fs *fs, const struct fs_inode *in,
                            const char *key)
{
    struct tfs_stat st;
    bool is_dir = false;
    int rc;

    if (tfs_cache_is_immutable(fs->cache))
        return 0;
    rc = tfs_cache_lookup(fs->cache, key, &is_dir, &st);
    if (rc == -EISDIR || rc == -ENOENT || (rc == 0 && is_dir) ||
        (rc == 0 && strcmp(st.version, in->version) != 0)) {
        TFS_DEBUG("open '%s': version %s is stale", key, in->version);
        return -ESTALE;
    }
    if (rc < 0)
        TFS_INFO("open '%s': cannot revalidate, reading version %s: %s",
                 key, in->version, tfs_strerror(rc));
    return 0;
}

/* Open the store's version st of the object whose bytes are at read_key
   (a pending move's source, or key itself) through the cache. */
static int fs_open_version(struct tfs_fs *fs, struct fs_inode *in,
                           const char *read_key, const struct tfs_stat *st,
                           struct fuse_file_info *fi)
{
    struct fs_handle *h = fs_handle_new(fs, FS_H_FILE, in);
    int rc;

    if (h == NULL)
        return -ENOMEM;
    rc = tfs_file_open_stat(fs->cache, read_key, st, &h->file);
    if (rc < 0) {
        fs_handle_free(fs, h, false);
        return fs_fail(fs, "open", read_key, rc);
    }
    fi->keep_cache = 1;
    fi->noflush = 1;
    fi->fh = (uintptr_t)h;
    if (atomic_load(&fs->hints.live) > 0) {     /* a reader's position */
        char key[FS_KEY_MAX + 2];

        fs_inode_key(&fs->inodes, in, key);
        fs_hint_opened(fs, key);
    }
    return 0;
}

/* Read-only open of a staged file's inode: its local bytes, or the
   version it was uploaded as. */
static int fs_open_node(struct tfs_fs *fs, struct fs_inode *in,
                        struct wb_node *node, const struct wb_obj *o,
                        struct fuse_file_info *fi)
{
    struct fs_handle *h;
    struct tfs_stat st;
    int rc = wb_node_open_read(node, &st);

    if (rc == -ENODATA) {               /* uploaded: read the store's */
        if (o == NULL || o->node != NULL || o->is_dir ||
            strcmp(o->st.version, st.version) != 0)
            return -ESTALE;
        return fs_open_version(fs, in, o->read_key, &st, fi);
    }
    if (rc < 0)
        return rc;
    h = fs_handle_new(fs, FS_H_NODE, in);
    if (h == NULL) {
        wb_node_close(fs->wb, node, false, false);
        return -ENOMEM;
    }
    h->node = wb_node_get(node);
    fi->noflush = 1;
    fi->fh = (uintptr_t)h;
    return 0;
}

/*
 * Read-only open through the write-back view.  A store version's inode
 * must still be what the view holds (else ESTALE: the kernel looks the
 * name up again); when the store cannot be asked it reads its version.
 */
static int fs_view_open(struct tfs_fs *fs, struct fs_inode *in,
                        struct fuse_file_info *fi)
{
    char key[FS_KEY_MAX + 2];
    struct wb_node *node = fs_inode_node(&fs->inodes, in);
    struct tfs_stat st;
    struct wb_obj o;
    int lrc;
    int rc;

    fs_inode_key(&fs->inodes, in, key);
    lrc = wb_lookup(fs->wb, key, &o);
    if (node != NULL) {
        rc = fs_open_node(fs, in, node, lrc == 0 ? &o : NULL, fi);
        wb_node_put(node);
    } else if (lrc == 0 && o.node == NULL && !o.is_dir &&
               strcmp(o.st.version, in->version) == 0) {
        rc = fs_open_version(fs, in, o.read_key, fs_inode_stat(in, &st),
                             fi);
    } else if (lrc < 0 && lrc != -ENOENT && tfs_err_is_retryable(lrc)) {
        TFS_INFO("open '%s': cannot revalidate, reading version %s: %s",
                 key, in->version, tfs_strerror(lrc));
        rc = fs_open_version(fs, in, key, fs_inode_stat(in, &st), fi);
    } else {
        rc = -ESTALE;
    }
    if (lrc == 0)
        wb_obj_cleanup(&o);
    return rc;
}

/*
 * Open a file at the version of its inode.  That version's bytes never
 * change, so the kernel keeps its cached pages across opens (keep_cache)
 * and a replaced object is never read as a mix of old and new.
 */
static int fs_do_open(struct tfs_fs *fs, fuse_ino_t ino,
                      struct fuse_file_info *fi)
{
    struct fs_inode *in = fs_inode_get(&fs->inodes, ino);
    char key[FS_KEY_MAX + 2];
    struct tfs_stat st;
    int rc;

    atomic_fetch_add(&fs->n.opens, 1);
    if (in == NULL)
        return -ESTALE;
    if (in->is_dir)
        return -EISDIR;
    if (ino == FS_CTL_INO)
        return (fi->flags & O_ACCMODE) == O_RDONLY ? fs_ctl_open(fs, fi)
                                                   : -EACCES;
    if (ino == FS_HINT_INO)
        return fs_hint_file_open(fs, fi);
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return fs->wb ? fs_open_write(fs, in, fi) : -EROFS;
    if (fs->wb != NULL)
        return fs_view_open(fs, in, fi);
    fs_inode_key(&fs->inodes, in, key);
    rc = fs_check_current(fs, in, key);
    if (rc < 0)
        return rc;
    return fs_open_version(fs, in, key, fs_inode_stat(in, &st), fi);
}

void fs_open(fuse_req_t req, fuse_ino_t ino,
             struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    /* Read-only and immutable, an open asks the store nothing. */
    bool gate = ino != FS_CTL_INO && ino != FS_HINT_INO &&
                !(tfs_cache_is_immutable(fs->cache) && fs->wb == NULL);
    int rc;

    if (gate && !fs_gate_enter(fs)) {
        fs_defer_op(fs, FS_OP_OPEN, req, ino, fi, 0, NULL);
        return;
    }
    tfs_file_sent_begin();
    rc = fs_do_open(fs, ino, fi);
    if (rc == 0)
        fs_write_opened(fs_handle_of(fi), req);
    /* a small file's GET goes out before the reader wakes (fetch.c) */
    tfs_file_sent_wait(fs->cache);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else if (fuse_reply_open(req, fi) == -ENOENT)
        fs_handle_free(fs, fs_handle_of(fi), false);   /* interrupted */
    if (gate)
        fs_gate_leave(fs);
}
/* ---- read ---- */

static pthread_key_t fs_rbuf_key;
static pthread_once_t fs_rbuf_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t fs_rbuf_bytes;  /* every thread's, now */

struct fs_rbuf {
    size_t cap;                         /* bytes of data */
    char   data[];
};

static void fs_rbuf_free(void *p)
{
    if (p != NULL)
        atomic_fetch_sub(&fs_rbuf_bytes, ((struct fs_rbuf *)p)->cap);
    tfs_free(p);
}

uint64_t fs_read_buf_bytes(void)
{
    return atomic_load(&fs_rbuf_bytes);
}

static void fs_rbuf_init(void)
{
    pthread_key_create(&fs_rbuf_key, fs_rbuf_free);
}

/*
 * A per-thread buffer of at least size bytes, so a read costs no malloc:
 * size rounded up to 64 KiB, grown when a thread is asked for more.  Not
 * FS_MAX_READ at once: every FUSE thread that ever answered a read of
 * the stats file kept a 1 MiB buffer for it (38 MiB of them with a
 * reader polling the stats, docs/cache.md "Memory").
 */
static char *fs_read_buf(size_t size)
{
    struct fs_rbuf *b;

    pthread_once(&fs_rbuf_once, fs_rbuf_init);
    b = pthread_getspecific(fs_rbuf_key);
    if (b != NULL && b->cap >= size)
        return b->data;
    fs_rbuf_free(b);
    pthread_setspecific(fs_rbuf_key, NULL);
    size = TFS_MAX((size + 65535) & ~(size_t)65535, (size_t)65536);
    b = tfs_malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    b->cap = size;
    atomic_fetch_add(&fs_rbuf_bytes, b->cap);
    pthread_setspecific(fs_rbuf_key, b);
    return b->data;
}


/*
 * The handle's file reads a pending move's source, which the uploader
 * has since moved to the inode's key: the same version is there now
 * (posix rename keeps it; S3 keeps the ETag of a copied single-part
 * object; otherwise the read fails ESTALE rather than mix versions).
 */
static int fs_read_moved(struct tfs_fs *fs, struct fs_handle *h, char *buf,
                         size_t size, uint64_t off, size_t *n)
{
    char key[FS_KEY_MAX + 2];
    struct tfs_file *f = NULL;
    struct tfs_stat st;
    int rc;

    fs_inode_key(&fs->inodes, h->in, key);
    rc = tfs_file_open_stat(fs->cache, key, fs_inode_stat(h->in, &st), &f);
    if (rc == 0) {
        rc = tfs_file_read(f, buf, size, off, n);
        tfs_file_close(f);
    }
    return rc == -ENOENT || rc == TFS_ECHANGED ? -ESTALE : rc;
}


static int fs_do_read(struct tfs_fs *fs, struct fs_handle *h, size_t size,
                      uint64_t off, const char **data, size_t *n)
{
    char *buf;
    int rc;

    if (h->kind == FS_H_HINT)           /* no more than the render */
        size = TFS_MIN(size, (size_t)512);
    else if (h->kind == FS_H_CTL)       /* no more than the text left */
        size = TFS_MIN(size, h->ctl.len - TFS_MIN(off, h->ctl.len));
    buf = fs_read_buf(size);

    if (buf == NULL)
        return -ENOMEM;
    *data = buf;
    if (h->kind == FS_H_HINT) {
        /* The stream's state, rendered anew by every read, whatever the
           offset (the file is a stream: writes move it). */
        char text[512];
        int len = fs_hint_render(fs, h->hint, text, sizeof(text));

        if (len < 0)
            return len;
        *n = TFS_MIN(size, (size_t)len);
        memcpy(buf, text, *n);
        return 0;
    }
    if (h->kind == FS_H_CTL) {
        /* Copied: the reader may close, and release free the text, as
           soon as the kernel has the reply, before fuse_reply_buf
           returns. */
        off = TFS_MIN(off, h->ctl.len);
        *n = TFS_MIN(size, h->ctl.len - off);
        memcpy(buf, h->ctl.p + off, *n);
        return 0;
    }
    if (h->kind == FS_H_NODE)
        rc = wb_node_read(h->node, buf, size, off, n);
    else if (atomic_load(&h->moved))
        rc = fs_read_moved(fs, h, buf, size, off, n);
    else
        rc = tfs_file_read(h->file, buf, size, off, n);
    if (rc == -ENOENT && h->kind == FS_H_FILE && fs->wb != NULL) {
        atomic_store(&h->moved, true);
        rc = fs_read_moved(fs, h, buf, size, off, n);
    }
    if (rc < 0) {
        fs_read_warn(fs, h, size, off, rc);
        return rc;
    }
    fs_count_read(fs, size, *n);
    return 0;
}

/*
 * Answer a read of a cached range now, without waiting on the store: one
 * inside a block straight from the block, pinned while the reply is
 * written (no copy in user space), anything else through a per-thread
 * buffer.  0: answered; -EAGAIN: a block must come from the store (its
 * load has started; nothing answered); another error: not answered.
 */
static int fs_read_now(struct tfs_fs *fs, fuse_req_t req, struct fs_handle *h,
                       size_t size, uint64_t off)
{
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
    uint64_t bs = tfs_cache_block_size(fs->cache);
    const void *data;
    void *pin;
    char *buf;
    size_t n;
    int rc;

    if (size == 0 || off / bs != (off + size - 1) / bs) {
        buf = fs_read_buf(size);
        if (buf == NULL)
            return -ENOMEM;
        rc = tfs_file_read_try(h->file, buf, size, off, &n);
        if (rc == 0) {
            fs_count_read(fs, size, n);
            fuse_reply_buf(req, buf, n);
        }
        return rc;
    }
    rc = tfs_file_read_pin_try(h->file, size, off, &data, &n, &pin);
    if (rc < 0)
        return rc;
    fs_count_read(fs, size, n);
    bv.buf[0].size = n;
    bv.buf[0].mem = (void *)data;
    /* Once replied, the file may be released (and h freed) at once. */
    fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
    tfs_cache_unpin(fs->cache, pin);
    return 0;
}

/* Reads of a moved object and of the control file or a staged file. */
static void fs_read_blocking(struct tfs_fs *fs, fuse_req_t req,
                             struct fs_handle *h, size_t size, uint64_t off)
{
    const char *data = NULL;
    size_t n = 0;
    int rc = fs_do_read(fs, h, size, off, &data, &n);

    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_buf(req, data, n);
}

/*
 * Reads never wait on the store in a FUSE thread: what the cache holds
 * is answered now, the rest from the fetch completion (fs_aread_*).
 * Reads of a moved object (a blocking read at the inode's key) take the
 * store path.
 */
void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct fs_handle *h = fs_handle_of(fi);
    int rc;

    if (h->kind != FS_H_FILE) {
        fs_read_blocking(fs, req, h, size, (uint64_t)off);
        return;
    }
    if (atomic_load(&h->moved)) {
        if (!fs_gate_enter(fs)) {
            fs_defer_read(fs, req, ino, fi, size, (uint64_t)off);
            return;
        }
        fs_read_blocking(fs, req, h, size, (uint64_t)off);
        fs_gate_leave(fs);
        return;
    }
    rc = fs_read_now(fs, req, h, size, (uint64_t)off);
    if (rc == -EAGAIN) {
        fs_aread_submit(fs, req, ino, fi, size, (uint64_t)off);
    } else if (rc == -ENOENT && fs->wb != NULL) {
        atomic_store(&h->moved, true);
        fs_read(req, ino, size, off, fi);
    } else if (rc < 0) {
        fs_read_warn(fs, h, size, (uint64_t)off, rc);
        fuse_reply_err(req, fs_errno(rc));
    }
}

/* The last close of a handle; a writer's seals what it wrote (mmap). */
void fs_release(fuse_req_t req, fuse_ino_t ino,
                struct fuse_file_info *fi)
{
    fs_handle_free(fs_of(req), fs_handle_of(fi), true);
    fuse_reply_err(req, 0);
}
