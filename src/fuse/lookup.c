/* SPDX-License-Identifier: MIT */
/*
 * The handlers that read names and attributes, never file data.  In
 * order:
 *
 *   lookup       lookup, forget
 *   attributes   getattr, statfs
 *   listings     opendir, readdir(plus), releasedir
 *   xattrs       user.tierfs.cached, user.tierfs.sync (write-back)
 *
 * With write-back, lookups and listings go through the view (wb_lookup,
 * wb_opendir): the store overlaid with what was written here and not
 * uploaded yet.  Those that may wait on the store take the store path
 * (spath.c).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "fuse/fuse_int.h"
#include "tierfs/log.h"

#define FS_XATTR_CACHED "user.tierfs.cached"
#define FS_XATTR_SYNC "user.tierfs.sync"
#define FS_SYNC_WAIT_MS 500             /* one sync poll waits this long */

/* ---- lookup ---- */

/* A lookup through the write-back view: staged files first. */
static int fs_view_lookup(struct tfs_fs *fs, char *key,
                          struct fuse_entry_param *e)
{
    struct wb_obj o;
    int rc = wb_lookup(fs->wb, key, &o);

    if (rc == -ENOENT)
        return 0;                       /* negative entry: ino 0 */
    if (rc < 0)
        return fs_fail(fs, "lookup", key, rc);
    rc = fs_entry_make(fs, key, o.is_dir, &o.st, o.node, e);
    wb_obj_cleanup(&o);
    return rc;
}

static int fs_do_lookup(struct tfs_fs *fs, fuse_ino_t parent,
                        const char *name, struct fuse_entry_param *e)
{
    char key[FS_KEY_MAX + 2];
    struct tfs_stat st = {0};
    bool is_dir = false;
    int rc;
    struct fs_inode *dir = fs_dir_inode(fs, parent, &rc);

    fs_entry_init(fs, e);
    atomic_fetch_add(&fs->n.lookups, 1);
    if (dir == NULL)
        return rc;
    if (parent == FS_ROOT_INO && strcmp(name, FS_CTL_NAME) == 0) {
        e->ino = FS_CTL_INO;
        e->attr_timeout = e->entry_timeout = 0;
        fs_attr_fill(&fs->inodes, fs->inodes.ctl, &e->attr);
        return 0;
    }
    if (parent == FS_ROOT_INO && strcmp(name, FS_HINT_NAME) == 0) {
        e->ino = FS_HINT_INO;
        e->attr_timeout = e->entry_timeout = 0;
        fs_attr_fill(&fs->inodes, fs->inodes.hint, &e->attr);
        return 0;
    }
    rc = fs_child_key(fs, dir, name, key);
    if (rc == 0 && fs->wb != NULL)
        return fs_view_lookup(fs, key, e);
    if (rc == 0)
        rc = tfs_cache_lookup(fs->cache, key, &is_dir, &st);
    if (rc == -EISDIR) {                /* the posix store's stat of a */
        is_dir = true;                  /* directory, passed through */
        rc = 0;
    }
    if (rc == -ENOTDIR)                 /* a parent is a file */
        rc = -ENOENT;
    if (rc == -ENOENT)
        return 0;                       /* negative entry: ino 0 */
    if (rc < 0)
        return fs_fail(fs, "lookup", rc == -ENAMETOOLONG ? name : key, rc);
    return fs_entry_make(fs, key, is_dir, &st, NULL, e);
}

void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct tfs_fs *fs = fs_of(req);
    bool ctl = parent == FS_ROOT_INO && (strcmp(name, FS_CTL_NAME) == 0 ||
                                         strcmp(name, FS_HINT_NAME) == 0);
    struct fuse_entry_param e;
    int rc;

    if (!ctl && !fs_gate_enter(fs)) {
        fs_defer_op(fs, FS_OP_LOOKUP, req, parent, NULL, 0, name);
        return;
    }
    rc = fs_do_lookup(fs, parent, name, &e);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_entry(req, &e);
    if (!ctl)
        fs_gate_leave(fs);
}

void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fs_inode_forget(&fs_of(req)->inodes, ino, nlookup);
    fuse_reply_none(req);
}

void fs_forget_multi(fuse_req_t req, size_t count,
                     struct fuse_forget_data *forgets)
{
    struct tfs_fs *fs = fs_of(req);

    for (size_t i = 0; i < count; i++)
        fs_inode_forget(&fs->inodes, forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

/* ---- attributes ---- */

/*
 * Attributes: those of the inode, with no store call.  A file inode is
 * one version (inode.c); a newer version reaches the kernel through
 * lookup, as a new inode, when its entry times out.
 */
static int fs_do_getattr(struct tfs_fs *fs, fuse_ino_t ino,
                         struct stat *attr)
{
    struct fs_inode *in = fs_inode_get(&fs->inodes, ino);

    if (in == NULL)
        return -ESTALE;
    fs_attr_fill(&fs->inodes, in, attr);
    return 0;
}

void fs_getattr(fuse_req_t req, fuse_ino_t ino,
                struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct stat attr;
    int rc = fs_do_getattr(fs, ino, &attr);

    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_attr(req, &attr, ino == FS_CTL_INO || ino == FS_HINT_INO
                                    ? 0 :
                        fs_attr_timeout(fs));
}

/*
 * Sizes in 4 KiB blocks.  Read-only: the cache's bound, nothing free.
 * Writable: the staging bound, and what of it is free (what a writer can
 * put down before it waits for uploads).
 */
void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct tfs_fs *fs = fs_of(req);
    uint64_t cap = fs_cache_dir(fs) ? tfs_cache_disk_limit(fs->cache)
                                    : tfs_cache_mem_limit(fs->cache);
    uint64_t used = 0;
    struct statvfs sv = {
        .f_bsize = 4096,
        .f_frsize = 4096,
        .f_files = fs_itable_count(&fs->inodes),
        .f_namemax = 255,
        .f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV,
    };

    if (fs->wb != NULL) {
        wb_usage(fs->wb, &used, &cap);
        sv.f_bfree = sv.f_bavail = (cap - TFS_MIN(used, cap)) / 4096;
        sv.f_ffree = sv.f_favail = 1u << 30;
        sv.f_flag &= ~(unsigned long)ST_RDONLY;
    }
    sv.f_blocks = cap / 4096;
    fuse_reply_statfs(req, &sv);
}

/* ---- listings ---- */

static int fs_do_opendir(struct tfs_fs *fs, fuse_ino_t ino,
                         struct fuse_file_info *fi)
{
    char key[FS_KEY_MAX + 2];
    struct tfs_dir *d = NULL;
    struct wb_list *l = NULL;
    struct fs_handle *h;
    int rc;
    struct fs_inode *in = fs_dir_inode(fs, ino, &rc);

    if (in == NULL)
        return rc;
    fs_inode_key(&fs->inodes, in, key);
    if (fs->wb != NULL)
        rc = wb_opendir(fs->wb, key, &l);
    else
        rc = tfs_cache_opendir(fs->cache, key, &d);
    if (rc < 0 && rc != -ENOENT)        /* ENOENT: empty, list . and .. */
        return fs_fail(fs, "opendir", key, rc);
    h = fs_handle_new(fs, FS_H_DIR, in);
    if (h == NULL) {
        tfs_dir_put(d);
        wb_list_free(l);
        return -ENOMEM;
    }
    h->dir = d;
    h->wlist = l;
    fi->fh = (uintptr_t)h;
    fi->cache_readdir = tfs_cache_is_immutable(fs->cache);
    fi->keep_cache = fi->cache_readdir;
    return 0;
}

void fs_opendir(fuse_req_t req, fuse_ino_t ino,
                struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    int rc;

    if (!fs_gate_enter(fs)) {
        fs_defer_op(fs, FS_OP_OPENDIR, req, ino, fi, 0, NULL);
        return;
    }
    rc = fs_do_opendir(fs, ino, fi);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else if (fuse_reply_open(req, fi) == -ENOENT)
        fs_handle_free(fs, fs_handle_of(fi), false);
    fs_gate_leave(fs);
}

/* st_ino of the parent of directory key "a/b/" (or the root). */
static uint64_t fs_parent_ino(const char *key)
{
    char buf[FS_KEY_MAX + 2];
    size_t len = strlen(key);
    char *slash;

    if (len < 2 || len >= sizeof(buf))
        return FS_ROOT_INO;
    memcpy(buf, key, len - 1);          /* drop the trailing '/' */
    buf[len - 1] = '\0';
    slash = strrchr(buf, '/');
    if (slash == NULL)
        return FS_ROOT_INO;
    slash[1] = '\0';
    return fs_key_ino(buf, NULL);
}

/* Entry i of h's listing (the cache's or the view's), or false. */
static bool fs_listing_entry(const struct fs_handle *h, size_t i,
                             struct wb_dirent *out)
{
    const struct tfs_dirent *de;

    if (h->wlist != NULL) {
        if (i >= wb_list_count(h->wlist))
            return false;
        *out = *wb_list_entry(h->wlist, i);
        return true;
    }
    if (h->dir == NULL || i >= tfs_dir_count(h->dir))
        return false;
    de = tfs_dir_entry(h->dir, i);
    *out = (struct wb_dirent){.name = de->name, .is_dir = de->is_dir,
                              .st = de->st};
    return true;
}

/*
 * Entry i of h (0 ".", 1 "..", then the listing): its name and, for
 * readdirplus (e != NULL), a counted lookup in e.  Returns 1 to skip the
 * entry (the shadowed control file, names the kernel cannot take), 0 to
 * add it, -ENOENT past the end, or an error.
 */
static int fs_dir_entry(struct tfs_fs *fs, struct fs_handle *h, size_t i,
                        const char **name, struct stat *st,
                        struct fuse_entry_param *e)
{
    struct wb_dirent de;
    char key[FS_KEY_MAX + 2];
    struct wb_attr a;

    memset(st, 0, sizeof(*st));
    st->st_mode = S_IFDIR;
    if (i < 2) {
        fs_inode_key(&fs->inodes, h->in, key);
        *name = i == 0 ? "." : "..";
        st->st_ino = i == 0 ? fs_key_ino(key, NULL) : fs_parent_ino(key);
        if (e != NULL)
            e->attr = *st;              /* ino 0: no lookup counted */
        return 0;
    }
    if (!fs_listing_entry(h, i - 2, &de))
        return -ENOENT;
    *name = de.name;
    if ((h->in->ino == FS_ROOT_INO && (strcmp(de.name, FS_CTL_NAME) == 0 ||
                                       strcmp(de.name, FS_HINT_NAME) == 0)) ||
        fs_child_key(fs, h->in, de.name, key) < 0)
        return 1;
    if (de.is_dir)
        fs_key_add_slash(key);
    if (de.node != NULL)
        wb_node_attr(de.node, &a);
    st->st_ino = de.node ? fs_node_ino(a.nid)
                         : fs_key_ino(key, de.is_dir ? NULL : de.st.version);
    st->st_mode = de.is_dir ? S_IFDIR : S_IFREG;
    if (e == NULL)
        return 0;
    if (de.is_dir)
        key[strlen(key) - 1] = '\0';
    return fs_entry_make(fs, key, de.is_dir, &de.st, de.node, e);
}

/*
 * Fill buf with entries from offset off (an entry's index; the next one's
 * is its offset).  An entry that does not fit ends the batch; in plus
 * mode its lookup is undone, as the kernel never saw it.
 */
static int fs_do_readdir(fuse_req_t req, struct fs_handle *h, char *buf,
                         size_t size, off_t off, bool plus, size_t *len)
{
    struct tfs_fs *fs = fs_of(req);
    size_t used = 0;
    int rc = 0;

    for (size_t i = (size_t)off; rc == 0 || rc == 1; i++) {
        struct fuse_entry_param e;
        const char *name;
        struct stat st;
        size_t n;

        fs_entry_init(fs, &e);
        rc = fs_dir_entry(fs, h, i, &name, &st, plus ? &e : NULL);
        if (rc != 0)
            continue;
        if (plus)
            n = fuse_add_direntry_plus(req, buf + used, size - used, name,
                                       &e, (off_t)i + 1);
        else
            n = fuse_add_direntry(req, buf + used, size - used, name, &st,
                                  (off_t)i + 1);
        if (n > size - used) {
            if (plus && e.ino != 0)
                fs_inode_forget(&fs->inodes, e.ino, 1);
            break;
        }
        used += n;
    }
    *len = used;
    return rc == -ENOENT ? 0 : rc;
}

static void fs_readdir_common(fuse_req_t req, size_t size, off_t off,
                              struct fuse_file_info *fi, bool plus)
{
    char *buf = tfs_malloc(size);
    size_t len = 0;
    int rc = buf ? fs_do_readdir(req, fs_handle_of(fi), buf, size, off,
                                 plus, &len) : -ENOMEM;

    if (rc < 0 && len == 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_buf(req, buf, len);
    tfs_free(buf);
}

void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                off_t off, struct fuse_file_info *fi)
{
    fs_readdir_common(req, size, off, fi, false);
}

void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                    off_t off, struct fuse_file_info *fi)
{
    fs_readdir_common(req, size, off, fi, true);
}

void fs_releasedir(fuse_req_t req, fuse_ino_t ino,
                   struct fuse_file_info *fi)
{
    fs_handle_free(fs_of(req), fs_handle_of(fi), false);
    fuse_reply_err(req, 0);
}

/* ---- extended attributes ---- */


/*
 * user.tierfs.sync on PATH: what remains to upload under it (the whole
 * mount at the root, a directory's subtree, one file), as text:
 *
 *     seq=S pending=N bytes=B dirty=D errors=E parked=P error=LAST
 *     upload of 'KEY': CAUSE          (one line per parked change, as
 *     ...                              many as fit)
 *
 * The plain name sets the barrier S (everything changed so far); the
 * name user.tierfs.sync.S asks again about that barrier.  Each call
 * waits up to FS_SYNC_WAIT_MS for pending to reach 0 and hurries the
 * uploader, so `tierfs sync` polls without spinning and without tying a
 * request thread for longer.
 */
static int fs_sync_xattr(struct tfs_fs *fs, struct fs_inode *in,
                         const char *name, char *val, size_t size,
                         size_t *len)
{
    const char *suffix = name + strlen("user.tierfs.sync");
    char key[FS_KEY_MAX + 2];
    struct wb_sync s;
    uint64_t seq;
    int n;

    if (suffix[0] != '\0' && suffix[0] != '.')
        return -ENODATA;
    if (suffix[0] == '.' && tfs_parse_u64(suffix + 1, &seq) < 0)
        return -ENODATA;
    if (size == 0) {
        *len = 4095;                    /* an upper bound, no waiting */
        return 0;
    }
    if (suffix[0] == '\0')
        seq = wb_sync_seq(fs->wb);
    if (in == fs->inodes.ctl)
        key[0] = '\0';
    else
        fs_inode_key(&fs->inodes, in, key);
    wb_sync_status(fs->wb, key, seq, FS_SYNC_WAIT_MS, &s);
    n = snprintf(val, size, "seq=%" PRIu64 " pending=%" PRIu64 " bytes=%"
                 PRIu64 " dirty=%" PRIu64 " errors=%" PRIu64 " parked=%"
                 PRIu64 " error=%s\n%s", s.seq, s.pending, s.bytes,
                 s.dirty, s.errors, s.parked, s.last_error, s.parked_list);
    *len = (size_t)n < size ? (size_t)n : size - 1;
    return 0;
}

/*
 * One extended attribute, on files: user.tierfs.cached, the bytes of the
 * object the cache holds, in decimal (tierfs warmup --check reads it).
 * Any other name is ENODATA.
 */
static int fs_do_getxattr(struct tfs_fs *fs, fuse_ino_t ino,
                          const char *name, char *val, size_t size,
                          size_t *len)
{
    struct fs_inode *in = fs_inode_get(&fs->inodes, ino);
    char key[FS_KEY_MAX + 2];
    uint64_t bytes = 0;
    int rc;

    if (in == NULL)
        return -ESTALE;
    if (fs->wb != NULL && strncmp(name, FS_XATTR_SYNC,
                                  strlen(FS_XATTR_SYNC)) == 0)
        return fs_sync_xattr(fs, in, name, val, size, len);
    if (in->is_dir || ino == FS_CTL_INO || ino == FS_HINT_INO ||
        strcmp(name, FS_XATTR_CACHED))
        return -ENODATA;
    fs_inode_key(&fs->inodes, in, key);
    rc = tfs_cache_cached_bytes(fs->cache, key, &bytes);
    if (rc < 0)
        return fs_fail(fs, "getxattr", key, rc);
    *len = (size_t)snprintf(val, size, "%" PRIu64, bytes);
    return 0;
}

void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                 size_t size)
{
    struct tfs_fs *fs = fs_of(req);
    char val[1024];
    size_t len = 0;
    int rc;

    if (!fs_gate_enter(fs)) {
        fs_defer_op(fs, FS_OP_GETXATTR, req, ino, NULL, size, name);
        return;
    }
    rc = fs_do_getxattr(fs, ino, name, val, sizeof(val), &len);
    fs_gate_leave(fs);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, len);
}

void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct fs_inode *in = fs_inode_get(&fs_of(req)->inodes, ino);
    size_t len = in && !in->is_dir && ino != FS_CTL_INO && ino != FS_HINT_INO
                     ? sizeof(FS_XATTR_CACHED) : 0;

    if (in == NULL)
        fuse_reply_err(req, ESTALE);
    else if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, FS_XATTR_CACHED, len);
}
