/* SPDX-License-Identifier: MIT */
/*
 * The FUSE session (fs.h): the ops table over the handler files
 * (lookup.c, read.c, write.c), INIT and the kernel's readahead, open
 * (mount), run (the loop, signals) and close.  In order:
 *
 *   INIT         capabilities, the kernel's readahead
 *   ops          the table, and the store path's dispatch to it
 *   session      open (mount), run (loop, signals), close
 *
 * Handlers are thin (libfuse passthrough_ll): fs_<op> calls fs_do_<op>,
 * which returns 0 or an error, and replies once.  Errors are logged once,
 * where they are handled, with the op, the key and the detail.  The text
 * of the control file and of /metrics is made in ctl.c.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "fuse/fuse_int.h"
#include "metrics/http.h"
#include "tier/shared.h"
#include "tierfs/log.h"

#define FS_MAX_BACKGROUND 4096          /* the kernel's background requests */

/* The mounted file system tfs_fs_run serves, for the signal handler. */
static struct tfs_fs *_Atomic fs_running;

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
    /* Writes go through to the staged file at once, in requests of
       max_write (1 MiB, libfuse's buffer); the staged file starts its
       disk writes early (wb_cfg.early_writeback), which is what made a
       1 GiB write + fsync as fast as the same on the staging disk.  The
       kernel's write-back cache stays off: measured beside it, it
       gained nothing more there (docs/performance-write.md), and it
       would hold writes to the control files until close, move ENOSPC
       from write() to close(), and send a FLUSH on every read-only
       close.  O_TRUNC arrives with the open, so a truncating open
       copies nothing. */
    fs_want(conn, FUSE_CAP_WRITEBACK_CACHE, false);
    fs_want(conn, FUSE_CAP_ATOMIC_O_TRUNC,
            ((struct tfs_fs *)userdata)->wb != NULL);
    TFS_INFO("fuse: protocol %u.%u, max_write %u, max_read %u, "
             "max_readahead %u", conn->proto_major, conn->proto_minor,
             conn->max_write, conn->max_read, conn->max_readahead);
}

/* ---- ops ---- */

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

/* What a store-path thread does with a deferred request (spath.c). */
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
    /* rw even without write-back: the order-hint file takes writes;
       every other write is answered EROFS (write.c) */
    rc = tfs_buf_puts(&o, "rw,");
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

/*
 * Join the cache group.  Its checkpoint copies go, unless told, to
 * CACHE_DIR/ckpt-peer (the disk tier's dir), or nowhere without one: a
 * RAM-only node has no disk of its own to promise them to.
 */
static int fs_group_open(struct tfs_fs *fs)
{
    const char *dir = tfs_cache_dir(fs->cache);

    if (fs->gcfg.ckpt_dir == NULL && dir != NULL) {
        struct tfs_buf b;

        tfs_buf_init(&b, 0);
        tfs_buf_printf(&b, "%s/ckpt-peer", dir);
        fs->gcfg.ckpt_dir = tfs_buf_steal(&b);
        if (fs->gcfg.ckpt_dir == NULL)
            return -ENOMEM;
    }
    return tfs_group_open(&fs->group, &fs->gcfg, fs->cache);
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
        fs_hints_size(fs);
    if (rc == 0 && tfs_cache_is_immutable(fs->cache))
        fs->inodes.keys = fs->cache;    /* before any lookup */
    if (rc == 0 && fs->gcfg.members != NULL)
        rc = fs_group_open(fs);
    if (rc == 0 && fs->shared_uri != NULL)
        rc = tfs_shared_open(&fs->shared, fs->shared_uri, fs->cache);
    if (rc == 0)
        rc = fs_wb_open(fs);
    if (rc == 0)
        rc = fs_spath_start(fs, fs_defer_run);
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
    fs_hints_stop(fs);                  /* no prefetch past here */
    tfs_http_stop(fs->http);
    tfs_group_close(fs->group);         /* before the cache it serves */
    tfs_shared_close(fs->shared);       /* writes what is queued */
    wb_stop(fs->wb);                    /* no more uploads */
    while (fs->handles != NULL)         /* the kernel let go unreleased: */
        fs_handle_free(fs, fs->handles, false);     /* nothing sealed */
    fs_hints_cleanup(&fs->hints);
    fs_itable_cleanup(&fs->inodes);     /* puts the inodes' nodes */
    wb_close(fs->wb);
    tfs_cache_close(fs->cache);
    pthread_mutex_destroy(&fs->hlock);
    pthread_mutex_destroy(&fs->async.lock);
    pthread_mutex_destroy(&fs->spath.lock);
    pthread_cond_destroy(&fs->spath.cond);
    tfs_buf_cleanup(&fs->fuse_opts);
    tfs_free((char *)fs->wcfg.staging_dir);
    free(fs->mountpoint);               /* realpath's malloc */
    tfs_free(fs->metrics);
    tfs_free((char *)fs->gcfg.members);
    tfs_free((char *)fs->gcfg.listen);
    tfs_free((char *)fs->gcfg.secret_file);
    tfs_free((char *)fs->gcfg.tls_ca);
    tfs_free((char *)fs->gcfg.tls_cert);
    tfs_free((char *)fs->gcfg.tls_key);
    tfs_free((char *)fs->gcfg.ckpt_dir);
    tfs_free(fs->shared_uri);
    tfs_free(fs);
}
