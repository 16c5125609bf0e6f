/* SPDX-License-Identifier: MIT */
/*
 * The FUSE mount (fs.h): a libfuse low-level file system over the cache,
 * read-write with write-back (src/wb/) unless mounted read-only.  In
 * order:
 *
 *   options and life cycle     tfs_fs_create/set, open handles
 *   helpers                    keys, errors, entries
 *   INIT                       capabilities, the kernel's readahead
 *   handlers                   one helper returning rc, one reply each
 *   session                    open (mount), run (loop, signals), close
 *
 * The text of the control file and of /metrics is made in ctl.c; the
 * handlers that change things (create, write, rename, ...) are in
 * write.c.  With write-back, lookups, listings and opens go through the
 * view (wb_lookup, wb_opendir): the store overlaid with what was written
 * here and not uploaded yet.
 *
 * Handlers are thin (libfuse passthrough_ll): fs_<op> calls fs_do_<op>,
 * which returns 0 or an error, and replies once.  Errors are logged once,
 * where they are handled, with the op, the key and the detail.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/util.h"
#include "fuse/fuse_int.h"
#include "metrics/http.h"
#include "tierfs/log.h"

#define FS_IMMUTABLE_TTL_S 3600.0       /* kernel timeouts, immutable */
#define FS_DEFAULT_TTL_S 5.0            /* the cache's meta_ttl default */
#define FS_DEFAULT_THREADS 64
#define FS_DEFAULT_ASYNC_READS 256      /* reads in flight on the store */
#define FS_MAX_BACKGROUND 4096          /* the kernel's background requests */
#define FS_DEFAULT_KERNEL_RA (4u << 20) /* 4 requests of 1 MiB in flight */
#define FS_XATTR_CACHED "user.tierfs.cached"
#define FS_XATTR_SYNC "user.tierfs.sync"

/* The mounted file system tfs_fs_run serves, for the signal handler. */
static struct tfs_fs *_Atomic fs_running;

/* ---- options and life cycle ---- */

int tfs_fs_create(struct tfs_fs **out)
{
    struct tfs_fs *fs = tfs_calloc(1, sizeof(*fs));
    int rc;

    if (fs == NULL)
        return -ENOMEM;
    rc = tfs_cache_create(&fs->cache);
    if (rc == 0)
        rc = fs_itable_init(&fs->inodes);
    if (rc < 0) {
        tfs_cache_close(fs->cache);
        tfs_free(fs);
        return rc;
    }
    pthread_mutex_init(&fs->hlock, NULL);
    pthread_mutex_init(&fs->async.lock, NULL);
    pthread_mutex_init(&fs->spath.lock, NULL);
    pthread_cond_init(&fs->spath.cond, NULL);
    fs->async.max = FS_DEFAULT_ASYNC_READS;
    tfs_buf_init(&fs->fuse_opts, 64 * 1024);
    fs->ttl_s = FS_DEFAULT_TTL_S;
    fs->max_threads = FS_DEFAULT_THREADS;
    fs->kernel_ra = FS_DEFAULT_KERNEL_RA;
    fs->cache_size = 10ull << 30;
    fs->mem_cache = 1ull << 30;
    fs->wcfg.staging_max = 100ull << 30;
    fs->wcfg.staging_wait_ms = 300000;
    fs->wcfg.upload_jobs = 4;
    fs->wcfg.upload_delay_ms = 1000;
    fs->wcfg.retry_max_ms = 30000;
    *out = fs;
    return 0;
}

/* Note what the mount itself needs of a cache option the cache took. */
static void fs_note_cache_opt(struct tfs_fs *fs, const char *name,
                              const char *value)
{
    bool b;
    double d;
    uint64_t v;

    if (strcmp(name, "meta_ttl") == 0 && tfs_parse_double(value, &d) == 0)
        fs->ttl_s = d;
    else if (strcmp(name, "immutable") == 0 && tfs_parse_bool(value, &b) == 0)
        fs->immutable = b;
    else if (strcmp(name, "cache_dir") == 0 && value[0] != '\0') {
        fs->has_cache_dir = true;
        tfs_free(fs->cache_dir);
        fs->cache_dir = tfs_strdup(value);
    }
    else if (strcmp(name, "cache_size") == 0 && tfs_parse_size(value, &v) == 0)
        fs->cache_size = v;
    else if (strcmp(name, "mem_cache") == 0 && tfs_parse_size(value, &v) == 0)
        fs->mem_cache = v;
}

/* A duration in seconds (fractions allowed) as milliseconds. */
static int fs_parse_ms(const char *name, const char *value, uint64_t *ms)
{
    double d;

    if (tfs_parse_double(value, &d) < 0 || d < 0 || d > 1e7)
        return tfs_err(TFS_EOPTION, "%s: '%s' is not a number of seconds",
                       name, value);
    *ms = (uint64_t)(d * 1000.0 + 0.5);
    return 0;
}

/* The write-back options (fs.h); 1 when name is none of them. */
static int fs_set_wb(struct tfs_fs *fs, const char *name, const char *value)
{
    uint64_t v;

    if (strcmp(name, "read_only") == 0)
        return tfs_parse_bool(value, &fs->read_only) < 0
                   ? tfs_err(TFS_EOPTION, "read_only: '%s' is not 0 or 1",
                             value) : 0;
    if (strcmp(name, "staging_dir") == 0) {
        tfs_free((char *)fs->wcfg.staging_dir);
        fs->wcfg.staging_dir = value[0] ? tfs_strdup(value) : NULL;
        return value[0] && fs->wcfg.staging_dir == NULL ? -ENOMEM : 0;
    }
    if (strcmp(name, "staging_max") == 0 || strcmp(name, "upload_bw") == 0) {
        if (tfs_parse_size(value, &v) < 0)
            return tfs_err(TFS_EOPTION, "%s: '%s' is not a size", name,
                           value);
        *(name[0] == 's' ? &fs->wcfg.staging_max : &fs->wcfg.upload_bw) = v;
        return 0;
    }
    if (strcmp(name, "upload_jobs") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 256)
            return tfs_err(TFS_EOPTION, "upload_jobs: '%s' is not in "
                           "1..256", value);
        fs->wcfg.upload_jobs = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "upload_delay") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.upload_delay_ms);
    if (strcmp(name, "staging_wait") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.staging_wait_ms);
    if (strcmp(name, "upload_retry_max") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.retry_max_ms);
    return 1;
}

int tfs_fs_set(struct tfs_fs *fs, const char *name, const char *value)
{
    uint64_t v;
    int rc;

    if (fs->opened)
        return -EBUSY;
    rc = fs_set_wb(fs, name, value);
    if (rc <= 0)
        return rc;
    if (strcmp(name, "metrics") == 0) {
        tfs_free(fs->metrics);
        fs->metrics = value[0] ? tfs_strdup(value) : NULL;
        return value[0] && fs->metrics == NULL ? -ENOMEM : 0;
    }
    if (strcmp(name, "fuse_opts") == 0) {
        rc = fs->fuse_opts.len ? tfs_buf_puts(&fs->fuse_opts, ",") : 0;
        return rc < 0 ? rc : tfs_buf_puts(&fs->fuse_opts, value);
    }
    if (strcmp(name, "debug") == 0) {
        if (tfs_parse_bool(value, &fs->debug) < 0)
            return tfs_err(TFS_EOPTION, "debug: '%s' is not 0 or 1", value);
        return 0;
    }
    if (strcmp(name, "max_threads") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 4096)
            return tfs_err(TFS_EOPTION, "max_threads: '%s' is not in "
                           "1..4096", value);
        fs->max_threads = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "async_reads") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 65536)
            return tfs_err(TFS_EOPTION, "async_reads: '%s' is not in "
                           "1..65536", value);
        fs->async.max = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "kernel_readahead") == 0) {
        if (tfs_parse_size(value, &v) < 0 || v > (1ull << 30))
            return tfs_err(TFS_EOPTION, "kernel_readahead: '%s' is not a "
                           "size up to 1G", value);
        fs->kernel_ra = v;
        return 0;
    }
    rc = tfs_cache_set(fs->cache, name, value);
    if (rc == 0)
        fs_note_cache_opt(fs, name, value);
    return rc;
}

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

/* ---- helpers ---- */

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
    TFS_WARN("%s '%s': %s%s%s%s", op, key, tfs_strerror(rc),
             detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
    return rc;
}

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
static void fs_key_add_slash(char *key)
{
    size_t len = strlen(key);

    key[len] = '/';
    key[len + 1] = '\0';
}

double fs_attr_timeout(const struct tfs_fs *fs)
{
    return fs->immutable ? FS_IMMUTABLE_TTL_S : fs->ttl_s;
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

/* ---- INIT and the kernel's readahead ---- */

static void fs_want(struct fuse_conn_info *conn, unsigned cap, bool on)
{
    if (on && (conn->capable & cap))
        conn->want |= cap;
    else if (!on)
        conn->want &= ~cap;
}

/*
 * The device ("0:38") of the newest mount at path, from mountinfo: stat()
 * would wait for the very INIT being answered.
 */
static int fs_mount_dev(const char *path, char *dev, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    char mnt[4096];
    char d[32];
    int rc = -ENOENT;

    if (f == NULL)
        return -errno;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%*s %*s %31s %*s %4095s", d, mnt) != 2)
            continue;
        tfs_mountinfo_unescape(mnt);
        if (strcmp(mnt, path) == 0 && strlen(d) < size) {
            memcpy(dev, d, strlen(d) + 1);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/*
 * Raise the kernel's readahead for this mount.  The bdi starts at 128 KiB
 * and INIT can only lower it (the kernel keeps the smaller of the two),
 * so it is raised through sysfs first and then asked for in INIT.  Only
 * root may write sysfs; others keep 128 KiB (docs/fuse.md).
 */
static void fs_kernel_readahead(struct tfs_fs *fs, struct fuse_conn_info *conn)
{
    char dev[32];
    char path[96];
    int fd = -1;
    int rc;

    if (fs->kernel_ra == 0)
        return;
    rc = fs_mount_dev(fs->mountpoint, dev, sizeof(dev));
    if (rc == 0) {
        snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        rc = fd < 0 ? -errno : 0;
    }
    if (rc == 0 && dprintf(fd, "%" PRIu64, fs->kernel_ra / 1024) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        TFS_INFO("kernel readahead stays at %u KiB: %s",
                 conn->max_readahead / 1024, tfs_strerror(rc));
        return;
    }
    conn->max_readahead = (unsigned)fs->kernel_ra;
}

/*
 * Negotiation.  Reads: libfuse 3.14 answers max_pages from max_write
 * (1 MiB, its buffer), so one read request carries up to 1 MiB once the
 * kernel's readahead allows it (fs_kernel_readahead).  The kernel's own
 * page-cache invalidation on mtime or size change is off: a file inode
 * is one version and never changes (inode.c), and a new version arrives
 * as a new inode, which also covers a same-size replacement.
 */
static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
    fs_kernel_readahead(userdata, conn);
    /* Background requests (readahead, and O_DIRECT reads with async
       DIO) past max_background wait in the kernel, in order: a cached
       read would queue there behind reads hung on the store.  The
       daemon holds them cheaply (fs_aread_*), so the kernel may send
       many. */
    conn->max_background = FS_MAX_BACKGROUND;
    conn->congestion_threshold = FS_MAX_BACKGROUND / 4 * 3;
    conn->time_gran = 1;
    fs_want(conn, FUSE_CAP_ASYNC_READ, true);
    fs_want(conn, FUSE_CAP_PARALLEL_DIROPS, true);
    fs_want(conn, FUSE_CAP_AUTO_INVAL_DATA, false);
    /* Writes go through to the staged file at once (the kernel's own
       write-back cache would delay them past close); O_TRUNC arrives
       with the open, so a truncating open copies nothing. */
    fs_want(conn, FUSE_CAP_WRITEBACK_CACHE, false);
    fs_want(conn, FUSE_CAP_ATOMIC_O_TRUNC,
            ((struct tfs_fs *)userdata)->wb != NULL);
    TFS_INFO("fuse: protocol %u.%u, max_write %u, max_read %u, "
             "max_readahead %u", conn->proto_major, conn->proto_minor,
             conn->max_write, conn->max_read, conn->max_readahead);
}

/* ---- handlers ---- */

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

/* Requests that may wait on the store take the store path (below). */
enum fs_defer_op {
    FS_OP_LOOKUP, FS_OP_OPEN, FS_OP_OPENDIR, FS_OP_GETXATTR, FS_OP_READ,
};

static bool fs_gate_enter(struct tfs_fs *fs);
static void fs_gate_leave(struct tfs_fs *fs);
static void fs_defer_op(struct tfs_fs *fs, enum fs_defer_op op,
                        fuse_req_t req, fuse_ino_t ino,
                        const struct fuse_file_info *fi, size_t size,
                        const char *name);

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct tfs_fs *fs = fs_of(req);
    bool ctl = parent == FS_ROOT_INO && strcmp(name, FS_CTL_NAME) == 0;
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

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fs_inode_forget(&fs_of(req)->inodes, ino, nlookup);
    fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count,
                            struct fuse_forget_data *forgets)
{
    struct tfs_fs *fs = fs_of(req);

    for (size_t i = 0; i < count; i++)
        fs_inode_forget(&fs->inodes, forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

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

static void fs_getattr(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    struct stat attr;
    int rc = fs_do_getattr(fs, ino, &attr);

    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else
        fuse_reply_attr(req, &attr, ino == FS_CTL_INO ? 0 :
                        fs_attr_timeout(fs));
}

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
    fi->cache_readdir = fs->immutable;
    fi->keep_cache = fs->immutable;
    return 0;
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino,
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

/*
 * Entry i of h (0 ".", 1 "..", then the listing): its name and, for
 * readdirplus (e != NULL), a counted lookup in e.  Returns 1 to skip the
 * entry (the shadowed control file, names the kernel cannot take), 0 to
 * add it, -ENOENT past the end, or an error.
 */
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
    if ((h->in->ino == FS_ROOT_INO && strcmp(de.name, FS_CTL_NAME) == 0) ||
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

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                       off_t off, struct fuse_file_info *fi)
{
    fs_readdir_common(req, size, off, fi, false);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                           off_t off, struct fuse_file_info *fi)
{
    fs_readdir_common(req, size, off, fi, true);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
    fs_handle_free(fs_of(req), fs_handle_of(fi), false);
    fuse_reply_err(req, 0);
}

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

    if (fs->immutable)
        return 0;
    rc = tfs_cache_lookup(fs->cache, key, &is_dir, &st);
    if (rc == -EISDIR || rc == -ENOENT || (rc == 0 && is_dir) ||
        (rc == 0 && strcmp(st.version, in->st.version) != 0)) {
        TFS_DEBUG("open '%s': version %s is stale", key, in->st.version);
        return -ESTALE;
    }
    if (rc < 0)
        TFS_INFO("open '%s': cannot revalidate, reading version %s: %s",
                 key, in->st.version, tfs_strerror(rc));
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
    struct wb_obj o;
    int lrc;
    int rc;

    fs_inode_key(&fs->inodes, in, key);
    lrc = wb_lookup(fs->wb, key, &o);
    if (node != NULL) {
        rc = fs_open_node(fs, in, node, lrc == 0 ? &o : NULL, fi);
        wb_node_put(node);
    } else if (lrc == 0 && o.node == NULL && !o.is_dir &&
               strcmp(o.st.version, in->st.version) == 0) {
        rc = fs_open_version(fs, in, o.read_key, &in->st, fi);
    } else if (lrc < 0 && lrc != -ENOENT && tfs_err_is_retryable(lrc)) {
        TFS_INFO("open '%s': cannot revalidate, reading version %s: %s",
                 key, in->st.version, tfs_strerror(lrc));
        rc = fs_open_version(fs, in, key, &in->st, fi);
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
    struct fs_handle *h;
    int rc;

    atomic_fetch_add(&fs->n.opens, 1);
    if (in == NULL)
        return -ESTALE;
    if (in->is_dir)
        return -EISDIR;
    if (ino == FS_CTL_INO)
        return (fi->flags & O_ACCMODE) == O_RDONLY ? fs_ctl_open(fs, fi)
                                                   : -EACCES;
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return fs->wb ? fs_open_write(fs, in, fi) : -EROFS;
    if (fs->wb != NULL)
        return fs_view_open(fs, in, fi);
    fs_inode_key(&fs->inodes, in, key);
    rc = fs_check_current(fs, in, key);
    if (rc < 0)
        return rc;
    h = fs_handle_new(fs, FS_H_FILE, in);
    if (h == NULL)
        return -ENOMEM;
    rc = tfs_file_open_stat(fs->cache, key, &in->st, &h->file);
    if (rc < 0) {
        fs_handle_free(fs, h, false);
        return fs_fail(fs, "open", key, rc);
    }
    fi->keep_cache = 1;
    fi->noflush = 1;
    fi->fh = (uintptr_t)h;
    return 0;
}

static void fs_open(fuse_req_t req, fuse_ino_t ino,
                    struct fuse_file_info *fi)
{
    struct tfs_fs *fs = fs_of(req);
    /* Read-only and immutable, an open asks the store nothing. */
    bool gate = ino != FS_CTL_INO && !(fs->immutable && fs->wb == NULL);
    int rc;

    if (gate && !fs_gate_enter(fs)) {
        fs_defer_op(fs, FS_OP_OPEN, req, ino, fi, 0, NULL);
        return;
    }
    rc = fs_do_open(fs, ino, fi);
    if (rc < 0)
        fuse_reply_err(req, fs_errno(rc));
    else if (fuse_reply_open(req, fi) == -ENOENT)
        fs_handle_free(fs, fs_handle_of(fi), false);   /* interrupted */
    if (gate)
        fs_gate_leave(fs);
}

static pthread_key_t fs_rbuf_key;
static pthread_once_t fs_rbuf_once = PTHREAD_ONCE_INIT;

static void fs_rbuf_free(void *p)
{
    tfs_free(p);
}

static void fs_rbuf_init(void)
{
    pthread_key_create(&fs_rbuf_key, fs_rbuf_free);
}

struct fs_rbuf {
    size_t cap;                         /* bytes of data */
    char   data[];
};

/*
 * A per-thread buffer of at least size bytes, so a read costs no malloc:
 * FS_MAX_READ bytes on first use, grown if the kernel ever asks for more.
 */
static char *fs_read_buf(size_t size)
{
    struct fs_rbuf *b;

    pthread_once(&fs_rbuf_once, fs_rbuf_init);
    b = pthread_getspecific(fs_rbuf_key);
    if (b != NULL && b->cap >= size)
        return b->data;
    tfs_free(b);
    pthread_setspecific(fs_rbuf_key, NULL);
    b = tfs_malloc(sizeof(*b) + TFS_MAX(size, (size_t)FS_MAX_READ));
    if (b == NULL)
        return NULL;
    b->cap = TFS_MAX(size, (size_t)FS_MAX_READ);
    pthread_setspecific(fs_rbuf_key, b);
    return b->data;
}

static void fs_count_read(struct tfs_fs *fs, size_t size, size_t n)
{
    uint_fast64_t max = atomic_load(&fs->n.read_max);

    atomic_fetch_add(&fs->n.reads, 1);
    atomic_fetch_add(&fs->n.read_bytes, n);
    while (size > max &&
           !atomic_compare_exchange_weak(&fs->n.read_max, &max, size))
        ;
}

static int fs_do_read(struct tfs_fs *fs, struct fs_handle *h, size_t size,
                      uint64_t off, const char **data, size_t *n)
{
    char *buf = fs_read_buf(size);
    int rc;

    if (buf == NULL)
        return -ENOMEM;
    *data = buf;
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
        char key[FS_KEY_MAX + 2];
        fs_inode_key(&fs->inodes, h->in, key);
        TFS_WARN("read '%s' [%" PRIu64 ", +%zu): %s%s%s%s", key, off,
                 size, tfs_strerror(rc), tfs_errdetail()[0] ? " (" : "",
                 tfs_errdetail(), tfs_errdetail()[0] ? ")" : "");
        atomic_fetch_add(&fs->n.errors, 1);
        return rc;
    }
    fs_count_read(fs, size, *n);
    return 0;
}

static void fs_read_warn(struct tfs_fs *fs, struct fs_handle *h, size_t size,
                         uint64_t off, int rc)
{
    char key[FS_KEY_MAX + 2];

    fs_inode_key(&fs->inodes, h->in, key);
    TFS_WARN("read '%s' [%" PRIu64 ", +%zu): %s%s%s%s", key, off, size,
             tfs_strerror(rc), tfs_errdetail()[0] ? " (" : "",
             tfs_errdetail(), tfs_errdetail()[0] ? ")" : "");
    atomic_fetch_add(&fs->n.errors, 1);
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

/* ---- the store path: requests that may wait on the store ---- */

/* A request handed to the store-path threads, with what it was given. */
struct fs_defer {
    struct fs_defer      *next;
    enum fs_defer_op      op;
    fuse_req_t            req;
    fuse_ino_t            ino;
    struct fuse_file_info fi;
    size_t                size;
    uint64_t              off;
    char                  name[];       /* lookup's, getxattr's */
};

/* This thread is a store-path thread: it may wait on the store. */
static _Thread_local bool fs_on_spath;

/*
 * May this request wait on the store here?  True on a store-path thread,
 * or while fewer than cap FUSE threads do (then fs_gate_leave after).
 */
static bool fs_gate_enter(struct tfs_fs *fs)
{
    struct fs_spath *sp = &fs->spath;

    if (fs_on_spath)
        return true;
    if (atomic_fetch_add(&sp->busy, 1) < sp->cap)
        return true;
    atomic_fetch_sub(&sp->busy, 1);
    return false;
}

static void fs_gate_leave(struct tfs_fs *fs)
{
    if (!fs_on_spath)
        atomic_fetch_sub(&fs->spath.busy, 1);
}

/* Hand the request to the store-path threads (EIO at close). */
static void fs_defer(struct tfs_fs *fs, const struct fs_defer *tmpl,
                     const char *name)
{
    size_t nl = name ? strlen(name) + 1 : 1;
    struct fs_defer *d = tfs_malloc(sizeof(*d) + nl);
    struct fs_spath *sp = &fs->spath;
    bool stopping;

    if (d == NULL) {
        fuse_reply_err(tmpl->req, ENOMEM);
        return;
    }
    *d = *tmpl;
    d->next = NULL;
    memcpy(d->name, name ? name : "", nl);
    pthread_mutex_lock(&sp->lock);
    stopping = sp->stopping || sp->n_threads == 0;
    if (!stopping) {
        if (sp->tail != NULL)
            sp->tail->next = d;
        else
            sp->head = d;
        sp->tail = d;
        sp->n_queued++;
        pthread_cond_signal(&sp->cond);
    }
    pthread_mutex_unlock(&sp->lock);
    if (stopping) {
        fuse_reply_err(d->req, EIO);
        tfs_free(d);
        return;
    }
    atomic_fetch_add(&fs->n.deferred, 1);
}

static void fs_defer_op(struct tfs_fs *fs, enum fs_defer_op op,
                        fuse_req_t req, fuse_ino_t ino,
                        const struct fuse_file_info *fi, size_t size,
                        const char *name)
{
    struct fs_defer t = {.op = op, .req = req, .ino = ino, .size = size};

    if (fi != NULL)
        t.fi = *fi;
    fs_defer(fs, &t, name);
}

static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        size_t size);
static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi);

static void fs_defer_run(struct fs_defer *d)
{
    switch (d->op) {
    case FS_OP_LOOKUP:
        fs_lookup(d->req, d->ino, d->name);
        break;
    case FS_OP_OPEN:
        fs_open(d->req, d->ino, &d->fi);
        break;
    case FS_OP_OPENDIR:
        fs_opendir(d->req, d->ino, &d->fi);
        break;
    case FS_OP_GETXATTR:
        fs_getxattr(d->req, d->ino, d->name, d->size);
        break;
    case FS_OP_READ:
        fs_read(d->req, d->ino, d->size, (off_t)d->off, &d->fi);
        break;
    }
}

static void *fs_spath_main(void *arg)
{
    struct tfs_fs *fs = arg;
    struct fs_spath *sp = &fs->spath;

    fs_on_spath = true;
    pthread_mutex_lock(&sp->lock);
    for (;;) {
        struct fs_defer *d = sp->head;

        if (d == NULL && sp->stopping)
            break;
        if (d == NULL) {
            pthread_cond_wait(&sp->cond, &sp->lock);
            continue;
        }
        sp->head = d->next;
        if (sp->head == NULL)
            sp->tail = NULL;
        sp->n_queued--;
        pthread_mutex_unlock(&sp->lock);
        fs_defer_run(d);
        tfs_free(d);
        pthread_mutex_lock(&sp->lock);
    }
    pthread_mutex_unlock(&sp->lock);
    return NULL;
}

/*
 * At most max_threads - max(2, max_threads / 4) FUSE threads wait on
 * the store at once: the rest stay free for what the cache can answer.
 */
static int fs_spath_start(struct tfs_fs *fs)
{
    struct fs_spath *sp = &fs->spath;
    unsigned reserve = TFS_MAX(2u, fs->max_threads / 4);

    sp->cap = fs->max_threads > reserve ? fs->max_threads - reserve : 0;
    for (unsigned i = 0; i < FS_SPATH_THREADS; i++) {
        if (pthread_create(&sp->threads[i], NULL, fs_spath_main, fs) != 0)
            return tfs_err(-EAGAIN, "cannot start the store-path threads");
        sp->n_threads = i + 1;
    }
    return 0;
}

/* Answer what is still queued EIO, wait for what runs. */
static void fs_spath_stop(struct tfs_fs *fs)
{
    struct fs_spath *sp = &fs->spath;
    struct fs_defer *d;

    pthread_mutex_lock(&sp->lock);
    sp->stopping = true;
    d = sp->head;
    sp->head = sp->tail = NULL;
    sp->n_queued = 0;
    pthread_cond_broadcast(&sp->cond);
    pthread_mutex_unlock(&sp->lock);
    while (d != NULL) {
        struct fs_defer *next = d->next;
        fuse_reply_err(d->req, EIO);
        tfs_free(d);
        d = next;
    }
    for (unsigned i = 0; i < sp->n_threads; i++)
        pthread_join(sp->threads[i], NULL);
    sp->n_threads = 0;
}

static void fs_defer_read(struct tfs_fs *fs, fuse_req_t req, fuse_ino_t ino,
                          const struct fuse_file_info *fi, size_t size,
                          uint64_t off)
{
    struct fs_defer t = {.op = FS_OP_READ, .req = req, .ino = ino,
                         .fi = *fi, .size = size, .off = off};

    fs_defer(fs, &t, NULL);
}

/* ---- reads that wait for the store: answered from the completion ---- */

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
 * A read of an object moved meanwhile goes to the store path, as a
 * blocking read at the inode's key.
 */
static void fs_aread_finish(struct fs_aread *a, int rc, size_t n)
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
            fuse_reply_buf(a->req, a->buf, n);
        }
    }
    pthread_mutex_lock(&fs->async.lock);
    fs_aread_unlink(&fs->async, a);
    pthread_mutex_unlock(&fs->async.lock);
    tfs_free(a->buf);
    tfs_free(a);
}

static void fs_aread_pump(struct tfs_fs *fs);

/* A fetch completion: a's bytes are in its buffer, or rc says why not. */
static void fs_aread_done(void *arg, int rc, size_t n)
{
    struct tfs_fs *fs = ((struct fs_aread *)arg)->fs;

    fs_aread_finish(arg, rc, n);
    fs_aread_pump(fs);                  /* a slot is free */
}

/* Start a (in flight): false when it finished at once. */
static bool fs_aread_start(struct fs_aread *a)
{
    size_t n = 0;
    int rc;

    a->buf = tfs_malloc(a->size);
    rc = a->buf == NULL ? -ENOMEM
                        : tfs_file_read_async(a->h->file, a->buf, a->size,
                                              a->off, fs_aread_done, a, &n);
    if (rc == 1)
        return true;                    /* a belongs to the completion */
    fs_aread_finish(a, rc, n);
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
static void fs_aread_submit(struct tfs_fs *fs, fuse_req_t req,
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
static void fs_aread_cancel(struct tfs_fs *fs)
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
static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
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
static void fs_release(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    fs_handle_free(fs_of(req), fs_handle_of(fi), true);
    fuse_reply_err(req, 0);
}

/*
 * Sizes in 4 KiB blocks.  Read-only: the cache's bound, nothing free.
 * Writable: the staging bound, and what of it is free (what a writer can
 * put down before it waits for uploads).
 */
static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct tfs_fs *fs = fs_of(req);
    uint64_t cap = fs->has_cache_dir ? fs->cache_size : fs->mem_cache;
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
    if (in->is_dir || ino == FS_CTL_INO || strcmp(name, FS_XATTR_CACHED))
        return -ENODATA;
    fs_inode_key(&fs->inodes, in, key);
    rc = tfs_cache_cached_bytes(fs->cache, key, &bytes);
    if (rc < 0)
        return fs_fail(fs, "getxattr", key, rc);
    *len = (size_t)snprintf(val, size, "%" PRIu64, bytes);
    return 0;
}

static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
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

static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct fs_inode *in = fs_inode_get(&fs_of(req)->inodes, ino);
    size_t len = in && !in->is_dir && ino != FS_CTL_INO
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

static const struct fuse_lowlevel_ops fs_ops = {
    .init = fs_init,
    .lookup = fs_lookup,
    .forget = fs_forget,
    .forget_multi = fs_forget_multi,
    .getattr = fs_getattr,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .readdirplus = fs_readdirplus,
    .releasedir = fs_releasedir,
    .open = fs_open,
    .read = fs_read,
    .release = fs_release,
    .statfs = fs_statfs,
    .getxattr = fs_getxattr,
    .listxattr = fs_listxattr,
    /* write.c: answered EROFS when mounted read-only */
    .create = fs_create,
    .mknod = fs_mknod,
    .mkdir = fs_mkdir,
    .unlink = fs_unlink,
    .rmdir = fs_rmdir,
    .rename = fs_rename,
    .write = fs_write,
    .setattr = fs_setattr,
    .flush = fs_flush,
    .fsync = fs_fsync,
    .fsyncdir = fs_fsyncdir,
};

/* ---- session ---- */

/*
 * libfuse's own messages, into the tierfs log.  libfuse sometimes builds
 * one line from several calls, so pieces gather per thread until '\n'.
 */
static void fs_fuse_log(enum fuse_log_level level, const char *fmt,
                        va_list ap)
{
    static _Thread_local char line[512];
    static _Thread_local size_t len;
    int lvl = level <= FUSE_LOG_ERR ? TFS_LOG_ERR : (int)level;
    const char *msg = line;

    if (len < sizeof(line) - 1)
        vsnprintf(line + len, sizeof(line) - len, fmt, ap);
    len = strlen(line);
    if (len == 0 || (line[len - 1] != '\n' && len < sizeof(line) - 1))
        return;
    while (len > 0 && line[len - 1] == '\n')
        line[--len] = '\0';
    if (strncmp(msg, "fuse: ", 6) == 0)
        msg += 6;
    if (tfs_log_level() >= lvl)
        tfs_log(lvl, "fuse: %s", msg);
    len = 0;
    line[0] = '\0';
}

static int fs_check_mountpoint(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    int rc = 0;

    if (d == NULL && errno == ENOTCONN)
        return tfs_err(-ENOTCONN, "mountpoint %s is a mount whose daemon "
                       "is gone; tierfs umount it first", path);
    if (d == NULL)
        return tfs_err(-errno, "mountpoint %s", path);
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            rc = tfs_err(-ENOTEMPTY, "mountpoint %s is not empty", path);
    }
    closedir(d);
    return rc;
}

/* Create the session with the default options plus the user's, mount. */
static int fs_mount(struct tfs_fs *fs, const char *mountpoint)
{
    struct tfs_buf o;
    char *argv[5] = {"tierfs", "-o", NULL, NULL, NULL};
    struct fuse_args args;
    int rc;

    tfs_buf_init(&o, 0);
    rc = tfs_buf_puts(&o, fs->wb ? "rw," : "ro,");
    if (rc == 0)
        rc = tfs_buf_puts(&o, "default_permissions,fsname=tierfs,"
                          "subtype=tierfs");
    if (rc == 0 && fs->fuse_opts.len > 0)
        rc = tfs_buf_printf(&o, ",%s", tfs_buf_str(&fs->fuse_opts));
    if (rc < 0)
        return rc;
    argv[2] = o.p;
    argv[3] = fs->debug ? "-d" : NULL;
    args = (struct fuse_args)FUSE_ARGS_INIT(fs->debug ? 4 : 3, argv);
    fs->se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), fs);
    fuse_opt_free_args(&args);
    if (fs->se == NULL)
        rc = tfs_err(TFS_EOPTION, "FUSE options '%s' refused",
                     tfs_buf_str(&o));
    else if (fuse_session_mount(fs->se, mountpoint) != 0)
        rc = tfs_err(-EIO, "cannot mount on %s (see the fuse message "
                     "above)", mountpoint);
    else
        fs->mounted = true;
    tfs_buf_cleanup(&o);
    return rc;
}

int tfs_fs_open(struct tfs_fs *fs, struct tfs_store *st,
                const char *mountpoint)
{
    int rc;

    if (fs->opened)
        return -EBUSY;
    fs->opened = true;
    fs->st = st;
    fuse_set_log_func(fs_fuse_log);
    rc = fs_check_mountpoint(mountpoint);
    if (rc == 0) {
        fs->mountpoint = realpath(mountpoint, NULL);
        rc = fs->mountpoint ? 0 : tfs_err(-errno, "mountpoint %s",
                                          mountpoint);
    }
    if (rc == 0)
        rc = tfs_cache_open(fs->cache, st);
    if (rc == 0)
        rc = fs_wb_open(fs);
    if (rc == 0)
        rc = fs_spath_start(fs);
    if (rc == 0 && fs->metrics != NULL)
        rc = tfs_http_start(fs->metrics, fs_metrics_fill, fs, &fs->http);
    if (rc == 0 && fs->http != NULL)
        TFS_INFO("metrics on http://%s/metrics (port %u)", fs->metrics,
                 (unsigned)tfs_http_port(fs->http));
    if (rc == 0)
        rc = fs_mount(fs, mountpoint);
    return rc;
}

/*
 * SIGINT, SIGTERM, SIGHUP: end the loop.  The loop waits in the thread
 * that called tfs_fs_run; a signal that lands on another thread (a cache
 * worker, the metrics thread) is passed on to it so the wait ends now.
 */
static void fs_on_signal(int sig)
{
    struct tfs_fs *fs = atomic_load(&fs_running);

    if (fs == NULL)
        return;
    fuse_session_exit(fs->se);
    if (!pthread_equal(pthread_self(), fs->run_thread))
        pthread_kill(fs->run_thread, sig);
}

static const int fs_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

int tfs_fs_run(struct tfs_fs *fs)
{
    struct sigaction sa = {.sa_handler = fs_on_signal};
    struct sigaction old[TFS_ARRAY_LEN(fs_signals)];
    struct fuse_loop_config *cfg;
    sigset_t mask;
    sigset_t old_mask;
    int rc;

    if (!fs->mounted)
        return -EINVAL;
    cfg = fuse_loop_cfg_create();
    if (cfg == NULL)
        return -ENOMEM;
    fuse_loop_cfg_set_max_threads(cfg, fs->max_threads);
    fs->run_thread = pthread_self();
    atomic_store(&fs_running, fs);
    sigemptyset(&mask);
    for (size_t i = 0; i < TFS_ARRAY_LEN(fs_signals); i++) {
        sa.sa_handler = fs_signals[i] == SIGPIPE ? SIG_IGN : fs_on_signal;
        sigaction(fs_signals[i], &sa, &old[i]);
        sigaddset(&mask, fs_signals[i]);
    }
    pthread_sigmask(SIG_UNBLOCK, &mask, &old_mask);
    rc = fuse_session_loop_mt(fs->se, cfg);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    for (size_t i = 0; i < TFS_ARRAY_LEN(fs_signals); i++)
        sigaction(fs_signals[i], &old[i], NULL);
    atomic_store(&fs_running, NULL);
    fuse_loop_cfg_destroy(cfg);
    if (rc != 0)
        return tfs_err(rc < 0 ? rc : -EIO, "FUSE session ended with an "
                       "error");
    return 0;
}

void tfs_fs_close(struct tfs_fs *fs)
{
    if (fs == NULL)
        return;
    /* The loop has ended: what still waits on the store is answered
       EIO now, while the session can take replies. */
    fs_aread_cancel(fs);
    fs_spath_stop(fs);
    if (fs->se != NULL) {
        if (fs->mounted)
            fuse_session_unmount(fs->se);
        fuse_session_destroy(fs->se);
    }
    tfs_http_stop(fs->http);
    wb_stop(fs->wb);                    /* no more uploads */
    while (fs->handles != NULL)         /* the kernel let go unreleased: */
        fs_handle_free(fs, fs->handles, false);     /* nothing sealed */
    fs_itable_cleanup(&fs->inodes);     /* puts the inodes' nodes */
    wb_close(fs->wb);
    tfs_cache_close(fs->cache);
    pthread_mutex_destroy(&fs->hlock);
    pthread_mutex_destroy(&fs->async.lock);
    pthread_mutex_destroy(&fs->spath.lock);
    pthread_cond_destroy(&fs->spath.cond);
    tfs_buf_cleanup(&fs->fuse_opts);
    tfs_free(fs->cache_dir);
    tfs_free((char *)fs->wcfg.staging_dir);
    free(fs->mountpoint);               /* realpath's malloc */
    tfs_free(fs->metrics);
    tfs_free(fs);
}
