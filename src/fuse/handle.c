/* SPDX-License-Identifier: MIT */
/*
 * The mount's common ground, under every handler file: open handles
 * (fi->fh, listed so close can reap them), errors (the errno of a reply,
 * the one log line of a failed request, of a failed read), the read
 * counters, keys and entries (a counted lookup filled into a
 * fuse_entry_param).  Calls only inode.c.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "fuse/fuse_int.h"
#include "tierfs/log.h"

#define FS_IMMUTABLE_TTL_S 3600.0       /* kernel timeouts, immutable */

/* ---- handles ---- */

struct fs_handle *fs_handle_new(struct tfs_fs *fs, enum fs_handle_kind kind,
                                struct fs_inode *in)
{
    struct fs_handle *h = tfs_calloc(1, sizeof(*h));

    if (h == NULL)
        return NULL;
    h->kind = kind;
    h->in = in;
    tfs_buf_init(&h->ctl, FS_STATS_MAX);
    pthread_mutex_lock(&fs->hlock);
    h->next = fs->handles;
    if (h->next != NULL)
        h->next->prev = h;
    fs->handles = h;
    fs->nhandles++;
    pthread_mutex_unlock(&fs->hlock);
    return h;
}

void fs_handle_free(struct tfs_fs *fs, struct fs_handle *h, bool seal)
{
    pthread_mutex_lock(&fs->hlock);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        fs->handles = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    fs->nhandles--;
    pthread_mutex_unlock(&fs->hlock);
    tfs_file_close(h->file);
    if (h->dir != NULL)
        tfs_dir_put(h->dir);
    wb_list_free(h->wlist);
    if (h->node != NULL) {
        wb_node_close(fs->wb, h->node, h->writer, seal);
        wb_node_put(h->node);
    }
    fs_hint_close(fs, h->hint);
    tfs_buf_cleanup(&h->ctl);
    tfs_free(h);
}

struct fs_handle *fs_handle_of(const struct fuse_file_info *fi)
{
    return (struct fs_handle *)(uintptr_t)fi->fh;
}

struct tfs_fs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- errors and counts ---- */

/*
 * rc as the errno of a reply.  A store that stayed unreachable past the
 * retries (timeout, refused, reset: the retryable kinds) gives EIO, the
 * errno programs expect from read(2); the rest map as tfs_errno does
 * (ESTALE for a changed object, ENOENT, EACCES, ...).
 */
int fs_errno(int rc)
{
    if (tfs_err_is_retryable(rc) || rc == TFS_ENETWORK)
        return EIO;
    return tfs_errno(rc);
}

/* Log a failed request once, with op, key and detail; returns rc. */
int fs_fail(struct tfs_fs *fs, const char *op, const char *key, int rc)
{
    const char *detail = tfs_errdetail();

    atomic_fetch_add(&fs->n.errors, 1);
    if (rc == -ENOENT) {
        TFS_DEBUG("%s '%s': %s", op, key, tfs_strerror(rc));
        return rc;
    }
    TFS_WARN("%s '%s': " TFS_CAUSE_FMT, op, key, TFS_CAUSE_ARGS(rc, detail));
    return rc;
}

void fs_read_warn(struct tfs_fs *fs, struct fs_handle *h, size_t size,
                  uint64_t off, int rc)
{
    char key[FS_KEY_MAX + 2];

    fs_inode_key(&fs->inodes, h->in, key);
    TFS_WARN("read '%s' [%" PRIu64 ", +%zu): " TFS_CAUSE_FMT, key, off,
             size, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    atomic_fetch_add(&fs->n.errors, 1);
}

void fs_count_read(struct tfs_fs *fs, size_t size, size_t n)
{
    uint_fast64_t max = atomic_load(&fs->n.read_max);

    atomic_fetch_add(&fs->n.reads, 1);
    atomic_fetch_add(&fs->n.read_bytes, n);
    while (size > max &&
           !atomic_compare_exchange_weak(&fs->n.read_max, &max, size))
        ;
}

/* ---- keys and entries ---- */

/* buf = dir's key + name (+ "/" for a directory later): FS_KEY_MAX + 2. */
int fs_child_key(struct tfs_fs *fs, const struct fs_inode *dir,
                 const char *name, char *buf)
{
    size_t nl = strlen(name);
    size_t dl;

    if (nl == 0 || strchr(name, '/') != NULL)
        return -EINVAL;
    fs_inode_key(&fs->inodes, dir, buf);
    dl = strlen(buf);
    if (dl + nl + 1 > FS_KEY_MAX)
        return -ENAMETOOLONG;
    memcpy(buf + dl, name, nl + 1);
    return 0;
}

/* "a/b" -> "a/b/" in a buffer fs_child_key filled (room is left). */
void fs_key_add_slash(char *key)
{
    size_t len = strlen(key);

    key[len] = '/';
    key[len + 1] = '\0';
}

double fs_attr_timeout(const struct tfs_fs *fs)
{
    if (tfs_cache_is_immutable(fs->cache))
        return FS_IMMUTABLE_TTL_S;
    return (double)tfs_cache_meta_ttl_ns(fs->cache) / 1e9;
}

const char *fs_cache_dir(const struct tfs_fs *fs)
{
    const char *dir = tfs_cache_dir(fs->cache);

    return dir != NULL && dir[0] != '\0' ? dir : NULL;
}

void fs_entry_init(const struct tfs_fs *fs, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->attr_timeout = fs_attr_timeout(fs);
    e->entry_timeout = e->attr_timeout;
}

int fs_entry_make(struct tfs_fs *fs, char *key, bool is_dir,
                  const struct tfs_stat *st, struct wb_node *node,
                  struct fuse_entry_param *e)
{
    struct fs_inode *in;
    int rc;

    if (is_dir)
        fs_key_add_slash(key);
    rc = fs_inode_lookup(&fs->inodes, key, is_dir, is_dir ? NULL : st,
                         is_dir ? NULL : node, &in);
    if (rc < 0)
        return rc;
    e->ino = in->ino;
    fs_attr_fill(&fs->inodes, in, &e->attr);
    return 0;
}

struct fs_inode *fs_dir_inode(struct tfs_fs *fs, fuse_ino_t ino, int *rc)
{
    struct fs_inode *in = fs_inode_get(&fs->inodes, ino);

    *rc = in == NULL ? -ESTALE : !in->is_dir ? -ENOTDIR : 0;
    return *rc == 0 ? in : NULL;
}
