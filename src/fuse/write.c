/* SPDX-License-Identifier: MIT */
/*
 * The mount's write side: the handlers that change things, over the
 * write-back engine (src/wb/wb.h, docs/writeback.md).  In order:
 *
 *   start        the staging dir and its default, at tfs_fs_open
 *   opens        create, open for writing, mknod
 *   data         write, setattr (truncate, mtime), flush, fsync
 *   namespace    mkdir, unlink, rmdir, rename
 *
 * Durability: flush (every close(2)) and fsync seal the staged file:
 * data and journal record are fdatasynced before the reply, so close()
 * returns once the bytes are durable on local disk.  Namespace changes
 * are journaled and synced before their reply.  Release seals too, for
 * writes that arrive after the last close (mmap).  A close by a process
 * that neither opened the file nor wrote to it last (a forked child
 * exiting with the descriptor it inherited) does not seal: the writer is
 * still writing, and a seal then would upload its half-written file as a
 * complete version (fs_flush_is_other).  Write-only handles write past
 * the kernel's page cache (fs_write_is_direct).
 *
 * On a read-only mount every request here is answered EROFS (the mount
 * is rw at the kernel's level so that the order-hint file, whose writes
 * go to hint.c, takes writes).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fuse/fuse_int.h"
#include "tierfs/log.h"

#define FS_STAGING_ROOT "/var/tmp"      /* of the default staging dir */

/* ---- start ---- */

/*
 * The default staging dir: CACHE_DIR/staging/ID, or
 * /var/tmp/tierfs-UID/staging/ID without a cache dir or with a cache dir
 * shared with a group (whose members must not reach the journal), where
 * ID hashes the store's identity, so a remount of the same store finds
 * its journal and mounts of different stores never share one.
 */
static char *fs_staging_default(struct tfs_fs *fs, bool *in_var_tmp)
{
    const char *ident = tfs_store_identity(fs->st);
    uint64_t h = XXH3_64bits(ident, strlen(ident));
    const char *cache_dir = fs_cache_dir(fs);
    struct stat st;
    struct tfs_buf b;

    *in_var_tmp = cache_dir == NULL ||
                  (stat(cache_dir, &st) == 0 && (st.st_mode & 070));
    tfs_buf_init(&b, 0);
    if (!*in_var_tmp)
        tfs_buf_printf(&b, "%s/staging/%016" PRIx64, cache_dir, h);
    else
        tfs_buf_printf(&b, FS_STAGING_ROOT "/tierfs-%u/staging/%016" PRIx64,
                       (unsigned)geteuid(), h);
    return tfs_buf_steal(&b);
}

/*
 * Check the default staging dir from /var/tmp down (tfs_dir_open): a
 * tierfs-UID or staging made by another user, or a symlink anywhere in
 * it, refuses the mount instead of handing them the journal.
 */
static int fs_staging_check(const char *dir)
{
    const char *sub = dir + strlen(FS_STAGING_ROOT "/");
    int fd;
    int rc = tfs_dir_open(FS_STAGING_ROOT, sub, 0700, 0, &fd);

    if (rc == 0)
        close(fd);
    return rc;
}

int fs_wb_open(struct tfs_fs *fs)
{
    char a[32];
    char b[32];
    int rc;

    if (fs->read_only)
        return 0;
    if (tfs_cache_is_immutable(fs->cache)) {
        TFS_INFO("--immutable: the mount is read-only");
        return 0;
    }
    if (fs->wcfg.staging_dir == NULL) {
        bool in_var_tmp;

        fs->wcfg.staging_dir = fs_staging_default(fs, &in_var_tmp);
        if (fs->wcfg.staging_dir == NULL)
            return -ENOMEM;
        rc = in_var_tmp ? fs_staging_check(fs->wcfg.staging_dir) : 0;
        if (rc < 0)
            return rc;
    }
    rc = wb_open(&fs->wb, &fs->wcfg, fs->st, fs->cache);
    if (rc < 0)
        return rc;
    fs->inodes.writable = true;
    TFS_INFO("write-back: staging in %s (at most %s), %u upload jobs, "
             "upload cap %s/s", fs->wcfg.staging_dir,
             tfs_fmt_bytes(a, sizeof(a), (double)fs->wcfg.staging_max),
             fs->wcfg.upload_jobs, fs->wcfg.upload_bw
             ? tfs_fmt_bytes(b, sizeof(b), (double)fs->wcfg.upload_bw)
             : "no");
    return 0;
}

/* ---- opens ---- */

/*
 * A handle open for writing only writes past the kernel's page cache
 * (FOPEN_DIRECT_IO): the writer's bytes go from its own pages to the
 * daemon, which skips one copy and a second page-cache page per byte
 * (docs/performance-write.md).  Such a descriptor cannot be mmapped
 * (mmap needs read access), so nothing else changes for it; O_RDWR
 * handles stay cached for mmap.  fs_write then drops the range from
 * the page cache that other handles of the inode may hold.
 */
static bool fs_write_is_direct(const struct fuse_file_info *fi)
{
    return (fi->flags & O_ACCMODE) == O_WRONLY;
}

/* A writing handle on node n (a reference the handle takes over). */
static int fs_node_handle(struct tfs_fs *fs, struct fs_inode *in,
                          struct wb_node *n, struct fuse_file_info *fi)
{
    struct fs_handle *h = fs_handle_new(fs, FS_H_NODE, in);

    if (h == NULL) {
        wb_node_close(fs->wb, n, true, false);
        wb_node_put(n);
        return -ENOMEM;
    }
    h->node = n;
    h->writer = true;
    fi->fh = (uintptr_t)h;
    fi->keep_cache = 0;
    fi->direct_io = fs_write_is_direct(fi);
    return 0;
}

/* Open in's name for writing; trunc empties it. */
static int fs_node_for(struct tfs_fs *fs, struct fs_inode *in, bool trunc,
                       struct wb_node **out)
{
    char key[FS_KEY_MAX + 2];
    struct wb_node *node = fs_inode_node(&fs->inodes, in);
    struct wb_want w = {
        .node = node,
        .version = node ? NULL : in->version,
        .trunc = trunc,
    };
    int rc;

    fs_inode_key(&fs->inodes, in, key);
    rc = wb_open_write(fs->wb, key, &w, out);
    wb_node_put(node);
    if (rc == 0)
        fs_inode_link(&fs->inodes, in, *out);
    else if (rc != -ESTALE && rc != -ENOENT)
        fs_fail(fs, "open for writing", key, rc);
    return rc;
}

int fs_open_write(struct tfs_fs *fs, struct fs_inode *in,
                  struct fuse_file_info *fi)
{
    struct wb_node *n;
    int rc = fs_node_for(fs, in, (fi->flags & O_TRUNC) != 0, &n);

    return rc < 0 ? rc : fs_node_handle(fs, in, n, fi);
}

static int fs_do_create(struct tfs_fs *fs, fuse_ino_t parent,
                        const char *name, struct fuse_file_info *fi,
                        struct fuse_entry_param *e)
{
    char key[FS_KEY_MAX + 2];
    struct wb_want w = {
        .create = true,
        .excl = (fi->flags & O_EXCL) != 0,
        .trunc = (fi->flags & O_TRUNC) != 0,
    };
    struct wb_node *n;
    int rc;
    struct fs_inode *dir = fs_dir_inode(fs, parent, &rc);

    fs_entry_init(fs, e);
    if (dir == NULL)
        return rc;
    if (fs->wb == NULL)
        return -EROFS;
    rc = fs_child_key(fs, dir, name, key);
    if (rc == 0)
        rc = wb_open_write(fs->wb, key, &w, &n);
    if (rc < 0)
        return rc == -EEXIST || rc == -EISDIR ? rc
                                              : fs_fail(fs, "create", key, rc);
    rc = fs_entry_make(fs, key, false, &(struct tfs_stat){0}, n, e);
    if (rc < 0) {
        wb_node_close(fs->wb, n, true, false);
        wb_node_put(n);
        return rc;
    }
    rc = fs_node_handle(fs, fs_inode_get(&fs->inodes, e->ino), n, fi);
    if (rc < 0)
        fs_inode_forget(&fs->inodes, e->ino, 1);
    return rc;
}

void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
               mode_t mode, struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct fuse_entry_param e;
    int rc = fs_do_create(fs, parent, name, fi, &e);

    if (rc == 0)
        fs_write_opened(fs_handle_of(fi), req);
    if (rc < 0) {
        fuse_reply_err(req, fs_errno(rc));
    } else if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        fs_handle_free(fs, fs_handle_of(fi), false);  /* interrupted */
        fs_inode_forget(&fs->inodes, e.ino, 1);
    }
}

/* mknod of a regular file: an empty file, sealed at once. */
void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
              mode_t mode, dev_t rdev)
{
    struct tfs_fs *fs = fs_of(req);
    struct fuse_file_info fi = {.flags = O_WRONLY | O_CREAT | O_EXCL};
    struct fuse_entry_param e;
    int rc = S_ISREG(mode) ? fs_do_create(fs, parent, name, &fi, &e)
                           : -EPERM;

    if (rc < 0) {
        fuse_reply_err(req, fs_errno(rc));
        return;
    }
    fs_handle_free(fs, fs_handle_of(&fi), true);
    fuse_reply_entry(req, &e);
}

/* ---- data ---- */

void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
              off_t off, struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct fs_handle *h = fs_handle_of(fi);
    int rc;

    if (h->kind == FS_H_HINT) {         /* order hints: hint.c answers */
        fs_hint_write(fs, req, h, buf, size);
        return;
    }
    rc = h->kind == FS_H_NODE && h->writer
                 ? wb_node_write(fs->wb, h->node, buf, size, (uint64_t)off)
                 : -EBADF;
    if (rc >= 0)                        /* a writing node's handle */
        atomic_store_explicit(&h->last_write_tid, (int)fuse_req_ctx(req)->pid,
                              memory_order_relaxed);

    if (rc < 0) {
        char key[FS_KEY_MAX + 2];
        fs_inode_key(&fs->inodes, h->in, key);
        fuse_reply_err(req, fs_errno(fs_fail(fs, "write", key, rc)));
        return;
    }
    atomic_fetch_add(&fs->n.writes, 1);
    atomic_fetch_add(&fs->n.write_bytes, size);
    /* A direct write did not pass the page cache: pages other handles
       read before are stale now (6.18 drops them itself; older kernels
       may not).  Never blocks: no page is dirty without the kernel's
       write-back cache. */
    if (fs_write_is_direct(fi))
        (void)fuse_lowlevel_notify_inval_inode(fs->se, ino, off,
                                               (off_t)size);
    fuse_reply_write(req, size);
}

/* truncate(2) by path, or ftruncate of a handle not open for writing:
   open, truncate, seal, close. */
static int fs_truncate_path(struct tfs_fs *fs, struct fs_inode *in,
                            uint64_t size)
{
    struct wb_node *n;
    int rc = fs_node_for(fs, in, size == 0, &n);

    if (rc < 0)
        return rc;
    if (size > 0)
        rc = wb_node_truncate(fs->wb, n, size);
    if (rc == 0)
        rc = wb_node_seal(fs->wb, n);
    wb_node_close(fs->wb, n, true, false);
    wb_node_put(n);
    return rc;
}

static int fs_do_setattr(struct tfs_fs *fs, struct fs_inode *in,
                         const struct stat *attr, int to_set,
                         struct fuse_file_info *fi)
{
    struct fs_handle *h = fi ? fs_handle_of(fi) : NULL;
    struct wb_node *n;
    int rc = 0;

    if (in->is_dir || in == fs->inodes.ctl || in == fs->inodes.hint)
        return 0;                       /* modes, times: not kept */
    if (fs->wb == NULL)
        return -EROFS;
    if ((to_set & FUSE_SET_ATTR_SIZE) && h != NULL &&
        h->kind == FS_H_NODE && h->writer)
        rc = wb_node_truncate(fs->wb, h->node, (uint64_t)attr->st_size);
    else if (to_set & FUSE_SET_ATTR_SIZE)
        rc = fs_truncate_path(fs, in, (uint64_t)attr->st_size);
    n = rc == 0 ? fs_inode_node(&fs->inodes, in) : NULL;
    if (n != NULL && (to_set & FUSE_SET_ATTR_MTIME_NOW))
        wb_node_set_mtime(n, tfs_wall_ns());
    else if (n != NULL && (to_set & FUSE_SET_ATTR_MTIME))
        wb_node_set_mtime(n, (int64_t)attr->st_mtim.tv_sec * 1000000000 +
                                 attr->st_mtim.tv_nsec);
    wb_node_put(n);
    return rc;
}

/*
 * Size (truncate) and mtime of a staged file are kept; mode, owner and
 * atime changes are accepted and not kept (the store has no place for
 * them).  A store object's mtime is the store's.
 */
void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                int to_set, struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct fs_inode *in = fs_inode_get(&fs->inodes, ino);
    char key[FS_KEY_MAX + 2];
    struct stat st;
    int rc = in ? fs_do_setattr(fs, in, attr, to_set, fi) : -ESTALE;

    if (rc < 0 && in != NULL && rc != -EROFS && rc != -ESTALE) {
        fs_inode_key(&fs->inodes, in, key);
        rc = fs_fail(fs, "setattr", key, rc);
    }
    if (rc < 0) {
        fuse_reply_err(req, fs_errno(rc));
        return;
    }
    fs_attr_fill(&fs->inodes, in, &st);
    fuse_reply_attr(req, &st, fs_attr_timeout(fs));
}

/* The thread group (process) of thread tid, from /proc; 0: unknown. */
static pid_t fs_tgid(pid_t tid)
{
    char path[64];
    char line[128];
    int tgid = 0;
    FILE *f;

    if (tid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Tgid: %d", &tgid) == 1)
            break;
    fclose(f);
    return (pid_t)tgid;
}

void fs_write_opened(struct fs_handle *h, fuse_req_t req)
{
    pid_t tid = fuse_req_ctx(req)->pid;

    if (h == NULL || h->kind != FS_H_NODE || !h->writer)
        return;
    h->opener_tid = tid;
    h->opener = fs_tgid(tid);
    atomic_store(&h->last_write_tid, (int)tid);
}

/*
 * Is this close (thread tid's flush) of a writing handle by another
 * process than the one that opened it and than the one that wrote to it
 * last?  That is a forked child closing the copy of the descriptor it
 * inherited (at its exit or exec) while the parent goes on writing: it
 * must not seal.  Anything unknown (a pid the daemon cannot see, a
 * thread gone) is not "other": the close seals, as every close did.
 */
static bool fs_flush_is_other(const struct fs_handle *h, pid_t tid)
{
    pid_t closer, wrote;

    if (h == NULL || h->kind != FS_H_NODE || !h->writer || h->opener == 0 ||
        tid <= 0 || tid == h->opener_tid)
        return false;
    closer = fs_tgid(tid);
    if (closer == 0 || closer == h->opener)
        return false;
    wrote = (pid_t)atomic_load(&h->last_write_tid);
    return wrote != tid && (wrote == 0 || fs_tgid(wrote) != closer);
}

/* Seal a writing handle's staged file: durable locally when it returns. */
static int fs_seal(struct tfs_fs *fs, struct fs_handle *h)
{
    char key[FS_KEY_MAX + 2];
    int rc;

    if (h->kind != FS_H_NODE || !h->writer)
        return 0;
    rc = wb_node_seal(fs->wb, h->node);
    if (rc < 0) {
        fs_inode_key(&fs->inodes, h->in, key);
        rc = fs_fail(fs, "close", key, rc);
    }
    return rc;
}

/* Every close(2): the bytes written are durable on local disk when it
   returns; but for another process's close of its inherited copy. */
void fs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct fs_handle *h = fs_handle_of(fi);

    if (fs_flush_is_other(h, fuse_req_ctx(req)->pid)) {
        atomic_fetch_add(&fs->n.flushes_other, 1);
        fuse_reply_err(req, 0);
        return;
    }
    fuse_reply_err(req, fs_errno(fs_seal(fs, h)));
}

void fs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
              struct fuse_file_info *fi)
{
    fuse_reply_err(req, fs_errno(fs_seal(fs_of(req), fs_handle_of(fi))));
}

/* Namespace changes are durable when they return: nothing to do. */
void fs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                 struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

/* ---- namespace ---- */

/* The key of name in directory parent, for a change. */
static int fs_change_key(struct tfs_fs *fs, fuse_ino_t parent,
                         const char *name, char *key)
{
    int rc;
    struct fs_inode *dir = fs_dir_inode(fs, parent, &rc);

    if (dir == NULL)
        return rc;
    if (fs->wb == NULL)
        return -EROFS;
    if (parent == FS_ROOT_INO && (strcmp(name, FS_CTL_NAME) == 0 ||
                                  strcmp(name, FS_HINT_NAME) == 0))
        return -EPERM;
    return fs_child_key(fs, dir, name, key);
}

/* Log what is not a plain answer to the caller's mistake. */
static int fs_change_fail(struct tfs_fs *fs, const char *op,
                          const char *key, int rc)
{
    if (rc == 0 || rc == -ENOENT || rc == -EEXIST || rc == -ENOTEMPTY ||
        rc == -ENOTDIR || rc == -EISDIR || rc == -EINVAL || rc == -EPERM ||
        rc == -EROFS)
        return rc;
    return fs_fail(fs, op, key, rc);
}

void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
              mode_t mode)
{
    struct tfs_fs *fs = fs_of(req);
    char key[FS_KEY_MAX + 2];
    struct fuse_entry_param e;
    int rc = fs_change_key(fs, parent, name, key);

    fs_entry_init(fs, &e);
    if (rc == 0)
        rc = fs_change_fail(fs, "mkdir", key, wb_mkdir(fs->wb, key));
    if (rc == 0)
        rc = fs_entry_make(fs, key, true, NULL, NULL, &e);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_entry(req, &e);
}

void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct tfs_fs *fs = fs_of(req);
    char key[FS_KEY_MAX + 2];
    int rc = fs_change_key(fs, parent, name, key);

    if (rc == 0)
        rc = fs_change_fail(fs, "unlink", key, wb_unlink(fs->wb, key));
    if (rc == 0)
        fs_itable_unkey(&fs->inodes, key);
    fuse_reply_err(req, fs_errno(rc));
}

void fs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct tfs_fs *fs = fs_of(req);
    char key[FS_KEY_MAX + 2];
    int rc = fs_change_key(fs, parent, name, key);

    if (rc == 0)
        rc = fs_change_fail(fs, "rmdir", key, wb_rmdir(fs->wb, key));
    if (rc == 0) {
        fs_key_add_slash(key);          /* room: fs_child_key checked */
        fs_itable_unkey(&fs->inodes, key);
    }
    fuse_reply_err(req, fs_errno(rc));
}

void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
               fuse_ino_t newparent, const char *newname, unsigned flags)
{
    struct tfs_fs *fs = fs_of(req);
    char from[FS_KEY_MAX + 2];
    char to[FS_KEY_MAX + 2];
    bool is_dir = false;
    int rc = fs_change_key(fs, parent, name, from);

    if (rc == 0)
        rc = fs_change_key(fs, newparent, newname, to);
    if (rc == 0 && (flags & ~(unsigned)RENAME_NOREPLACE) != 0)
        rc = -EINVAL;                   /* RENAME_EXCHANGE, _WHITEOUT */
    if (rc == 0)
        rc = fs_change_fail(fs, "rename", from,
                            wb_rename(fs->wb, from, to,
                                      (flags & RENAME_NOREPLACE)
                                          ? WB_NOREPLACE : 0, &is_dir));
    if (rc == 0)
        fs_itable_rename(&fs->inodes, from, to, is_dir);
    fuse_reply_err(req, fs_errno(rc));
}
