/* SPDX-License-Identifier: MIT */
/*
 * lazyfs: a FUSE passthrough that loses what was not fsynced, for the
 * fault matrix's disk rows (bench/faults power-loss and cache-eio,
 * docs/reliability.md).  This kernel has no device-mapper; LazyFS's idea
 * stands in for dm-log-writes/dm-flakey: a layer over the staging or
 * cache dir that keeps written data in memory until fsync.
 *
 *   lazyfs [-e EIO_FLAG_FILE] [-E read|write|all] [-m MIB] [-t SECONDS]
 *          UNDER MNT
 *
 * The model (LazyFS's default): data is lazy, metadata is not.
 *   - write() is kept in memory, as dirty extents per file; fsync() and
 *     fdatasync() write that file's extents to UNDER and fsync the fd
 *     there.  close() persists nothing (it does not on Linux either), and
 *     syncfs()/sync() never reach a FUSE daemon.  A file opened O_SYNC or
 *     O_DSYNC is written through at every write.
 *   - reads merge the dirty extents over UNDER's bytes; sizes are
 *     max(UNDER's size, end of the dirty extents).
 *   - every metadata call (create, mkdir, unlink, rename, link, chmod,
 *     truncate, utimens, ...) goes to UNDER at once and is durable.
 * Dirty state is keyed by UNDER's (st_dev, st_ino), so rename and link
 * keep it and every handle of a file sees the same bytes; it is dropped
 * when the last name and handle of the inode go.
 *
 * SIGUSR1 is a power loss: every un-fsynced byte is dropped (never
 * written) and every later call answers EIO until MNT is unmounted.
 * SIGTERM, SIGINT, an unmount, -t SECONDS (default 3600) and the death of
 * the parent end it the same way: dirty data is never written at exit.
 * While EIO_FLAG_FILE exists (looked at every 50 ms) reads, writes or
 * both (-E; default read) of regular files answer EIO.  Dirty data is
 * capped at -m MIB (default 1024): a write past it answers ENOSPC.
 *
 * Locks: tab_lock guards the inode table and each inode's refs; an
 * inode's lock guards its extents and is held across that file's I/O to
 * UNDER (a read's pread and overlay, an fsync's write-out) so that no
 * read sees an extent gone but its bytes not yet in UNDER.  Order:
 * tab_lock, then an inode's lock; tab_lock is never held across I/O
 * itself, but the last put of an inode and the power loss wait, under it,
 * for an inode's lock (a test tool: simple beats fast there).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define LZ_BUCKETS    1024
#define LZ_FLAG_MS    50                /* EIO flag looked at this often */
#define LZ_TICK_MS    100               /* signal, deadline, parent */
#define LZ_GROW_MAX   (64u << 20)       /* an extent grows by this at most */

enum { LZ_EIO_READ = 1, LZ_EIO_WRITE = 2 };

/* Bytes written but not yet fsynced, at off in the file. */
struct lz_ext {
    uint64_t       off;
    size_t         len;
    size_t         cap;                 /* bytes allocated at data */
    unsigned char *data;                /* owned */
};

struct lz_inode {
    dev_t            dev;               /* UNDER's, immutable */
    ino_t            ino;               /* UNDER's, immutable */
    struct lz_inode *next;              /* protected by tab_lock */
    unsigned         refs;              /* handles and calls; tab_lock */
    pthread_mutex_t  lock;
    struct lz_ext   *ext;               /* sorted, disjoint; lock */
    size_t           n;                 /* extents in use; lock */
    size_t           cap;               /* extents allocated; lock */
    atomic_uint_fast64_t end;           /* end of the last extent */
    atomic_uint_fast64_t bytes;         /* sum of extent lengths */
};

/* One open file: UNDER's fd and the inode's dirty state. */
struct lz_file {
    int              fd;
    bool             sync;              /* O_SYNC/O_DSYNC: write through */
    struct lz_inode *ino;               /* a reference */
};

static struct {
    int                  under_fd;      /* O_PATH of UNDER */
    const char          *flag;          /* -e, or NULL */
    int                  eio_kinds;     /* LZ_EIO_* */
    uint64_t             max_dirty;     /* -m, bytes */
    pthread_mutex_t      tab_lock;
    struct lz_inode     *tab[LZ_BUCKETS];   /* protected by tab_lock */
    atomic_uint_fast64_t dirty;         /* bytes in every extent */
    atomic_bool          crashed;       /* SIGUSR1 came: all is EIO */
    atomic_uint_fast64_t eio_count;     /* injected EIOs */
    atomic_uint_fast64_t flag_ms;       /* when the flag was looked at */
    atomic_bool          flag_on;
} lz = {.tab_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- small helpers ---- */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A FUSE path ("/a/b") as a name relative to under_fd ("a/b", "."). */
static const char *rel(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

static struct lz_file *file_of(struct fuse_file_info *fi)
{
    return (struct lz_file *)(uintptr_t)fi->fh;
}

/* Does an EIO of this kind come now?  Counts the ones that do. */
static bool eio_now(int kind)
{
    uint64_t t;

    if (lz.flag == NULL || !(lz.eio_kinds & kind))
        return false;
    t = now_ms();
    if (t - atomic_load(&lz.flag_ms) >= LZ_FLAG_MS) {
        atomic_store(&lz.flag_on, access(lz.flag, F_OK) == 0);
        atomic_store(&lz.flag_ms, t);
    }
    if (!atomic_load(&lz.flag_on))
        return false;
    atomic_fetch_add(&lz.eio_count, 1);
    return true;
}

static int pwrite_all(int fd, const unsigned char *buf, size_t len,
                      uint64_t off)
{
    while (len > 0) {
        ssize_t n = pwrite(fd, buf, len, (off_t)off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        buf += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* ---- the inode table ---- */

static size_t tab_slot(dev_t dev, ino_t ino)
{
    return (size_t)((ino * 0x9e3779b97f4a7c15ull) ^ dev) % LZ_BUCKETS;
}

static struct lz_inode *tab_find_locked(dev_t dev, ino_t ino)
{
    struct lz_inode *p;

    for (p = lz.tab[tab_slot(dev, ino)]; p != NULL; p = p->next)
        if (p->dev == dev && p->ino == ino)
            return p;
    return NULL;
}

/* The inode of st, with a reference; created when absent.  NULL: ENOMEM. */
static struct lz_inode *inode_get(const struct stat *st)
{
    struct lz_inode *p;
    size_t slot = tab_slot(st->st_dev, st->st_ino);

    pthread_mutex_lock(&lz.tab_lock);
    p = tab_find_locked(st->st_dev, st->st_ino);
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p != NULL) {
            p->dev = st->st_dev;
            p->ino = st->st_ino;
            pthread_mutex_init(&p->lock, NULL);
            p->next = lz.tab[slot];
            lz.tab[slot] = p;
        }
    }
    if (p != NULL)
        p->refs++;
    pthread_mutex_unlock(&lz.tab_lock);
    return p;
}

/* Free every extent of p.  p->lock held. */
static void ext_clear_locked(struct lz_inode *p)
{
    size_t i;

    for (i = 0; i < p->n; i++)
        free(p->ext[i].data);
    free(p->ext);
    p->ext = NULL;
    p->n = 0;
    p->cap = 0;
    atomic_fetch_sub(&lz.dirty, atomic_load(&p->bytes));
    atomic_store(&p->bytes, 0);
    atomic_store(&p->end, 0);
}

static void tab_unlink_locked(struct lz_inode *p)
{
    struct lz_inode **pp = &lz.tab[tab_slot(p->dev, p->ino)];

    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
}

/* Drop a reference.  An inode with none and no dirty bytes goes; with
   drop, its dirty bytes go too (its last name and handle are gone). */
static void inode_put(struct lz_inode *p, bool drop)
{
    bool gone = false;

    pthread_mutex_lock(&lz.tab_lock);
    p->refs--;
    if (p->refs == 0) {
        pthread_mutex_lock(&p->lock);
        if (drop)
            ext_clear_locked(p);
        gone = p->n == 0;
        pthread_mutex_unlock(&p->lock);
        if (gone)
            tab_unlink_locked(p);
    }
    pthread_mutex_unlock(&lz.tab_lock);
    if (gone) {
        pthread_mutex_destroy(&p->lock);
        free(p->ext);                   /* emptied, perhaps not freed */
        free(p);
    }
}

/* End of the dirty data of (dev, ino), 0 when it has none. */
static uint64_t dirty_end(const struct stat *st)
{
    struct lz_inode *p;
    uint64_t end = 0;

    pthread_mutex_lock(&lz.tab_lock);
    p = tab_find_locked(st->st_dev, st->st_ino);
    if (p != NULL)
        end = atomic_load(&p->end);
    pthread_mutex_unlock(&lz.tab_lock);
    return end;
}

/* The file at st lost its last name: with no handle open its dirty bytes
   go now, else at the last release. */
static void inode_unlinked(const struct stat *st)
{
    struct lz_inode *p;

    if (!S_ISREG(st->st_mode) || st->st_nlink != 1)
        return;
    p = inode_get(st);
    if (p != NULL)
        inode_put(p, true);
}

/* ---- extents ---- */

static void ext_set_end_locked(struct lz_inode *p)
{
    struct lz_ext *e = p->n ? &p->ext[p->n - 1] : NULL;

    atomic_store(&p->end, e ? e->off + e->len : 0);
}

/* Index of the first extent that ends at or after off. */
static size_t ext_first(const struct lz_inode *p, uint64_t off)
{
    size_t lo = 0, hi = p->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (p->ext[mid].off + p->ext[mid].len < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Make e hold need bytes. */
static int ext_reserve(struct lz_ext *e, size_t need)
{
    size_t cap = e->cap;
    unsigned char *d;

    if (need <= cap)
        return 0;
    cap = cap < LZ_GROW_MAX ? cap * 2 : cap + LZ_GROW_MAX;
    if (cap < need)
        cap = need;
    d = realloc(e->data, cap);
    if (d == NULL)
        return -ENOMEM;
    e->data = d;
    e->cap = cap;
    return 0;
}

/* Count the dirty bytes a write of [off, off+len) adds, or -ENOSPC. */
static int ext_charge(struct lz_inode *p, size_t i, size_t j, uint64_t lo,
                      uint64_t hi)
{
    uint64_t old = 0, add;
    size_t k;

    for (k = i; k < j; k++)
        old += p->ext[k].len;
    add = hi - lo - old;
    if (atomic_load(&lz.dirty) + add > lz.max_dirty)
        return -ENOSPC;
    atomic_fetch_add(&lz.dirty, add);
    atomic_fetch_add(&p->bytes, add);
    return 0;
}

/* Extents i..j-1 touch [off, off+len): merge them and the write into
   extent i.  When extent i starts the merged range its buffer grows in
   place (a file written front to back stays one extent and what it
   holds is not copied again). */
static int ext_merge_locked(struct lz_inode *p, size_t i, size_t j,
                            const void *buf, size_t len, uint64_t off)
{
    struct lz_ext *e = &p->ext[i];
    uint64_t lo = e->off < off ? e->off : off;
    uint64_t hi = p->ext[j - 1].off + p->ext[j - 1].len;
    bool in_place = e->off == lo;
    struct lz_ext m = {.off = lo};
    size_t k;
    int rc;

    if (hi < off + len)
        hi = off + len;
    if (in_place)
        m = *e;
    rc = ext_reserve(&m, (size_t)(hi - lo));
    if (rc == 0)
        rc = ext_charge(p, i, j, lo, hi);
    if (rc < 0) {
        if (in_place)
            *e = m;                     /* perhaps moved, bytes kept */
        else
            free(m.data);
        return rc;
    }
    for (k = in_place ? i + 1 : i; k < j; k++) {
        memcpy(m.data + (p->ext[k].off - lo), p->ext[k].data, p->ext[k].len);
        free(p->ext[k].data);
    }
    memcpy(m.data + (off - lo), buf, len);
    m.len = (size_t)(hi - lo);
    p->ext[i] = m;
    memmove(&p->ext[i + 1], &p->ext[j], (p->n - j) * sizeof(*p->ext));
    p->n -= j - i - 1;
    return 0;
}

/* Insert a new extent at index i holding [off, off+len). */
static int ext_insert_locked(struct lz_inode *p, size_t i, const void *buf,
                             size_t len, uint64_t off)
{
    struct lz_ext e = {.off = off, .len = len, .cap = len};
    int rc;

    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        struct lz_ext *x = realloc(p->ext, cap * sizeof(*x));

        if (x == NULL)
            return -ENOMEM;
        p->ext = x;
        p->cap = cap;
    }
    e.data = malloc(len ? len : 1);
    if (e.data == NULL)
        return -ENOMEM;
    rc = ext_charge(p, i, i, off, off + len);
    if (rc < 0) {
        free(e.data);
        return rc;
    }
    memcpy(e.data, buf, len);
    memmove(&p->ext[i + 1], &p->ext[i], (p->n - i) * sizeof(*p->ext));
    p->ext[i] = e;
    p->n++;
    return 0;
}

/* Keep len bytes at off as dirty data of p. */
static int ext_write(struct lz_inode *p, const void *buf, size_t len,
                     uint64_t off)
{
    size_t i, j;
    int rc;

    if (len == 0)
        return 0;
    pthread_mutex_lock(&p->lock);
    i = ext_first(p, off);
    for (j = i; j < p->n && p->ext[j].off <= off + len; j++)
        ;
    if (j > i)
        rc = ext_merge_locked(p, i, j, buf, len, off);
    else
        rc = ext_insert_locked(p, i, buf, len, off);
    ext_set_end_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* Cut every dirty byte at or past size (a truncate). */
static void ext_truncate(struct lz_inode *p, uint64_t size)
{
    size_t i;
    uint64_t cut = 0;

    pthread_mutex_lock(&p->lock);
    for (i = p->n; i > 0 && p->ext[i - 1].off + p->ext[i - 1].len > size;
         i--) {
        struct lz_ext *e = &p->ext[i - 1];

        if (e->off >= size) {
            cut += e->len;
            free(e->data);
            p->n--;
            continue;
        }
        cut += e->off + e->len - size;
        e->len = (size_t)(size - e->off);
        break;
    }
    atomic_fetch_sub(&lz.dirty, cut);
    atomic_fetch_sub(&p->bytes, cut);
    ext_set_end_locked(p);
    pthread_mutex_unlock(&p->lock);
}

/* Copy the dirty bytes in [off, off+len) over buf.  p->lock held. */
static void ext_overlay_locked(struct lz_inode *p, char *buf, size_t len,
                               uint64_t off)
{
    size_t i;

    for (i = ext_first(p, off); i < p->n; i++) {
        struct lz_ext *e = &p->ext[i];
        uint64_t lo = e->off > off ? e->off : off;
        uint64_t hi = e->off + e->len;

        if (e->off >= off + len)
            break;
        if (hi > off + len)
            hi = off + len;
        if (lo < hi)
            memcpy(buf + (lo - off), e->data + (lo - e->off), hi - lo);
    }
}

/* Write p's extents to fd, fsync it, forget them.  Stops at a power
   loss: what was not written then is lost, and the caller gets EIO. */
static int ext_flush(struct lz_inode *p, int fd, bool datasync)
{
    uint64_t done = 0;
    size_t k = 0;
    int rc = 0;

    pthread_mutex_lock(&p->lock);
    for (; k < p->n && rc == 0; k++) {
        if (atomic_load(&lz.crashed))
            rc = -EIO;
        else
            rc = pwrite_all(fd, p->ext[k].data, p->ext[k].len,
                            p->ext[k].off);
        if (rc < 0)
            break;
        done += p->ext[k].len;
        free(p->ext[k].data);
    }
    memmove(&p->ext[0], &p->ext[k], (p->n - k) * sizeof(*p->ext));
    p->n -= k;
    atomic_fetch_sub(&lz.dirty, done);
    atomic_fetch_sub(&p->bytes, done);
    ext_set_end_locked(p);
    if (rc == 0 && (datasync ? fdatasync(fd) : fsync(fd)) < 0)
        rc = -errno;
    pthread_mutex_unlock(&p->lock);
    if (rc == 0 && atomic_load(&lz.crashed))
        rc = -EIO;
    return rc;
}

/* SIGUSR1: drop every dirty byte of every inode; count what went. */
static void crash(void)
{
    uint64_t files = 0, bytes = 0;
    size_t b;

    atomic_store(&lz.crashed, true);
    pthread_mutex_lock(&lz.tab_lock);
    for (b = 0; b < LZ_BUCKETS; b++) {
        struct lz_inode *p;

        for (p = lz.tab[b]; p != NULL; p = p->next) {
            pthread_mutex_lock(&p->lock);
            files += p->n > 0;
            bytes += atomic_load(&p->bytes);
            ext_clear_locked(p);
            pthread_mutex_unlock(&p->lock);
        }
    }
    pthread_mutex_unlock(&lz.tab_lock);
    fprintf(stderr, "lazyfs: power loss: dropped %llu bytes of un-fsynced "
            "data in %llu files; every call now answers EIO\n",
            (unsigned long long)bytes, (unsigned long long)files);
}

/* At exit: free every inode (their dirty bytes are never written). */
static void tab_free(void)
{
    size_t b;

    for (b = 0; b < LZ_BUCKETS; b++) {
        while (lz.tab[b] != NULL) {
            struct lz_inode *p = lz.tab[b];

            lz.tab[b] = p->next;
            ext_clear_locked(p);        /* the FUSE loop is over */
            pthread_mutex_destroy(&p->lock);
            free(p);
        }
    }
}

/* ---- FUSE handlers: metadata, straight to UNDER ---- */

#define LZ_ALIVE()                                                          \
    do {                                                                    \
        if (atomic_load(&lz.crashed))                                       \
            return -EIO;                                                    \
    } while (0)

#define LZ_RC(x) ((x) < 0 ? -errno : 0)

static void *lz_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    cfg->hard_remove = 1;               /* no .fuse_hidden files in UNDER */
    cfg->nullpath_ok = 1;
    cfg->use_ino = 1;
    return NULL;
}

static int lz_getattr(const char *path, struct stat *st,
                      struct fuse_file_info *fi)
{
    uint64_t end;
    int rc;

    LZ_ALIVE();
    if (fi != NULL)
        rc = LZ_RC(fstat(file_of(fi)->fd, st));
    else
        rc = LZ_RC(fstatat(lz.under_fd, rel(path), st, AT_SYMLINK_NOFOLLOW));
    if (rc < 0 || !S_ISREG(st->st_mode))
        return rc;
    end = dirty_end(st);
    if ((uint64_t)st->st_size < end)
        st->st_size = (off_t)end;
    return 0;
}

static int lz_access(const char *path, int mask)
{
    LZ_ALIVE();
    return LZ_RC(faccessat(lz.under_fd, rel(path), mask, 0));
}

static int lz_readlink(const char *path, char *buf, size_t size)
{
    ssize_t n;

    LZ_ALIVE();
    n = readlinkat(lz.under_fd, rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int lz_mknod(const char *path, mode_t mode, dev_t rdev)
{
    LZ_ALIVE();
    return LZ_RC(mknodat(lz.under_fd, rel(path), mode, rdev));
}

static int lz_mkdir(const char *path, mode_t mode)
{
    LZ_ALIVE();
    return LZ_RC(mkdirat(lz.under_fd, rel(path), mode));
}

static int lz_unlink(const char *path)
{
    struct stat st;
    bool known;

    LZ_ALIVE();
    known = fstatat(lz.under_fd, rel(path), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (unlinkat(lz.under_fd, rel(path), 0) < 0)
        return -errno;
    if (known)
        inode_unlinked(&st);
    return 0;
}

static int lz_rmdir(const char *path)
{
    LZ_ALIVE();
    return LZ_RC(unlinkat(lz.under_fd, rel(path), AT_REMOVEDIR));
}

static int lz_symlink(const char *target, const char *path)
{
    LZ_ALIVE();
    return LZ_RC(symlinkat(target, lz.under_fd, rel(path)));
}

static int lz_rename(const char *from, const char *to, unsigned int flags)
{
    struct stat st;
    bool over;

    LZ_ALIVE();
    over = !(flags & RENAME_EXCHANGE) &&
           fstatat(lz.under_fd, rel(to), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (renameat2(lz.under_fd, rel(from), lz.under_fd, rel(to), flags) < 0)
        return -errno;
    if (over)
        inode_unlinked(&st);
    return 0;
}

static int lz_link(const char *from, const char *to)
{
    LZ_ALIVE();
    return LZ_RC(linkat(lz.under_fd, rel(from), lz.under_fd, rel(to), 0));
}

static int lz_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    LZ_ALIVE();
    if (fi != NULL)
        return LZ_RC(fchmod(file_of(fi)->fd, mode));
    return LZ_RC(fchmodat(lz.under_fd, rel(path), mode, 0));
}

static int lz_chown(const char *path, uid_t uid, gid_t gid,
                    struct fuse_file_info *fi)
{
    LZ_ALIVE();
    if (fi != NULL)
        return LZ_RC(fchown(file_of(fi)->fd, uid, gid));
    return LZ_RC(fchownat(lz.under_fd, rel(path), uid, gid,
                          AT_SYMLINK_NOFOLLOW));
}

static int lz_utimens(const char *path, const struct timespec tv[2],
                      struct fuse_file_info *fi)
{
    LZ_ALIVE();
    if (fi != NULL)
        return LZ_RC(futimens(file_of(fi)->fd, tv));
    return LZ_RC(utimensat(lz.under_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

/* truncate(2) goes to UNDER (metadata, durable) and cuts the extents. */
static int lz_truncate(const char *path, off_t size,
                       struct fuse_file_info *fi)
{
    struct stat st;
    struct lz_inode *p;
    int fd;
    int rc;

    LZ_ALIVE();
    if (eio_now(LZ_EIO_WRITE))
        return -EIO;
    if (fi != NULL) {
        if (ftruncate(file_of(fi)->fd, size) < 0)
            return -errno;
        ext_truncate(file_of(fi)->ino, (uint64_t)size);
        return 0;
    }
    fd = openat(lz.under_fd, rel(path), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = fstat(fd, &st) < 0 || ftruncate(fd, size) < 0 ? -errno : 0;
    p = rc == 0 ? inode_get(&st) : NULL;
    if (p != NULL) {
        ext_truncate(p, (uint64_t)size);
        inode_put(p, false);
    }
    close(fd);
    return rc;
}

static int lz_statfs(const char *path, struct statvfs *sv)
{
    int fd;
    int rc;

    LZ_ALIVE();
    fd = openat(lz.under_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = LZ_RC(fstatvfs(fd, sv));
    close(fd);
    return rc;
}

/* ---- FUSE handlers: files ---- */

/* UNDER's fd for a FUSE open: read-write when it can be (an fsync through
   a read-only handle must still write the dirty data), never O_APPEND
   (offsets are the kernel's) nor O_DIRECT (alignment). */
static int file_open_fd(const char *path, int flags, mode_t mode)
{
    int base = flags & ~(O_ACCMODE | O_APPEND | O_DIRECT | O_NOCTTY |
                         O_SYNC | O_DSYNC);
    int fd;

    fd = openat(lz.under_fd, rel(path), base | O_RDWR | O_CLOEXEC, mode);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == ETXTBSY ||
                   errno == EISDIR))
        fd = openat(lz.under_fd, rel(path),
                    (base & ~O_TRUNC) | (flags & O_ACCMODE) | O_CLOEXEC,
                    mode);
    return fd < 0 ? -errno : fd;
}

static int file_open(const char *path, struct fuse_file_info *fi,
                     mode_t mode)
{
    struct lz_file *f;
    struct stat st;
    int rc;

    LZ_ALIVE();
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->fd = file_open_fd(path, fi->flags, mode);
    rc = f->fd < 0 ? f->fd : LZ_RC(fstat(f->fd, &st));
    if (rc == 0) {
        f->ino = inode_get(&st);
        rc = f->ino == NULL ? -ENOMEM : 0;
    }
    if (rc < 0) {
        if (f->fd >= 0)
            close(f->fd);
        free(f);
        return rc;
    }
    if (fi->flags & O_TRUNC)
        ext_truncate(f->ino, 0);
    f->sync = (fi->flags & (O_SYNC | O_DSYNC)) != 0;
    fi->fh = (uint64_t)(uintptr_t)f;
    return 0;
}

static int lz_open(const char *path, struct fuse_file_info *fi)
{
    return file_open(path, fi, 0);
}

static int lz_create(const char *path, mode_t mode,
                     struct fuse_file_info *fi)
{
    fi->flags |= O_CREAT;
    return file_open(path, fi, mode);
}

/* UNDER's bytes, zeros up to the end of the dirty data, the dirty data
   over both. */
static int lz_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    struct lz_file *f = file_of(fi);
    uint64_t end;
    ssize_t n = 0;
    size_t got = 0;

    LZ_ALIVE();
    if (eio_now(LZ_EIO_READ))
        return -EIO;
    pthread_mutex_lock(&f->ino->lock);
    while (got < size) {
        n = pread(f->fd, buf + got, size - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (n < 0 && got == 0) {
        pthread_mutex_unlock(&f->ino->lock);
        return -errno;
    }
    end = atomic_load(&f->ino->end);
    if (end > (uint64_t)off + got) {
        size_t want = end - (uint64_t)off < size ? end - (uint64_t)off : size;

        memset(buf + got, 0, want - got);
        got = want;
    }
    ext_overlay_locked(f->ino, buf, got, (uint64_t)off);
    pthread_mutex_unlock(&f->ino->lock);
    return (int)got;
}

static int lz_write(const char *path, const char *buf, size_t size,
                    off_t off, struct fuse_file_info *fi)
{
    struct lz_file *f = file_of(fi);
    int rc;

    LZ_ALIVE();
    if (eio_now(LZ_EIO_WRITE))
        return -EIO;
    rc = ext_write(f->ino, buf, size, (uint64_t)off);
    if (rc == 0 && f->sync)
        rc = ext_flush(f->ino, f->fd, false);
    return rc < 0 ? rc : (int)size;
}

static int lz_flush(const char *path, struct fuse_file_info *fi)
{
    LZ_ALIVE();
    return 0;                           /* close(2) persists nothing */
}

static int lz_release(const char *path, struct fuse_file_info *fi)
{
    struct lz_file *f = file_of(fi);
    struct stat st;
    bool gone;

    gone = fstat(f->fd, &st) == 0 && st.st_nlink == 0;
    close(f->fd);
    inode_put(f->ino, gone);
    free(f);
    return 0;
}

static int lz_fsync(const char *path, int datasync,
                    struct fuse_file_info *fi)
{
    struct lz_file *f = file_of(fi);

    LZ_ALIVE();
    if (eio_now(LZ_EIO_WRITE))
        return -EIO;
    return ext_flush(f->ino, f->fd, datasync != 0);
}

/* Only what keeps the dirty data right: allocation, not punching. */
static int lz_fallocate(const char *path, int mode, off_t off, off_t len,
                        struct fuse_file_info *fi)
{
    LZ_ALIVE();
    if (mode & ~FALLOC_FL_KEEP_SIZE)
        return -EOPNOTSUPP;
    return LZ_RC(fallocate(file_of(fi)->fd, mode, off, len));
}

/* ---- FUSE handlers: directories ---- */

static int lz_opendir(const char *path, struct fuse_file_info *fi)
{
    DIR *d;
    int fd;

    LZ_ALIVE();
    fd = openat(lz.under_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (d == NULL) {
        int rc = -errno;

        close(fd);
        return rc;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    return 0;
}

static int lz_readdir(const char *path, void *buf, fuse_fill_dir_t fill,
                      off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags)
{
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    struct dirent *de;

    LZ_ALIVE();
    if (off != 0)
        seekdir(d, off);
    for (;;) {
        struct stat st = {0};

        errno = 0;
        de = readdir(d);
        if (de == NULL)
            return -errno;
        st.st_ino = de->d_ino;
        st.st_mode = (mode_t)DTTOIF(de->d_type);
        if (fill(buf, de->d_name, &st, telldir(d), 0))
            return 0;
    }
}

static int lz_releasedir(const char *path, struct fuse_file_info *fi)
{
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int lz_fsyncdir(const char *path, int datasync,
                       struct fuse_file_info *fi)
{
    LZ_ALIVE();
    return LZ_RC(fsync(dirfd((DIR *)(uintptr_t)fi->fh)));
}

static const struct fuse_operations lz_ops = {
    .init       = lz_init,
    .getattr    = lz_getattr,
    .access     = lz_access,
    .readlink   = lz_readlink,
    .mknod      = lz_mknod,
    .mkdir      = lz_mkdir,
    .unlink     = lz_unlink,
    .rmdir      = lz_rmdir,
    .symlink    = lz_symlink,
    .rename     = lz_rename,
    .link       = lz_link,
    .chmod      = lz_chmod,
    .chown      = lz_chown,
    .utimens    = lz_utimens,
    .truncate   = lz_truncate,
    .statfs     = lz_statfs,
    .open       = lz_open,
    .create     = lz_create,
    .read       = lz_read,
    .write      = lz_write,
    .flush      = lz_flush,
    .release    = lz_release,
    .fsync      = lz_fsync,
    .fallocate  = lz_fallocate,
    .opendir    = lz_opendir,
    .readdir    = lz_readdir,
    .releasedir = lz_releasedir,
    .fsyncdir   = lz_fsyncdir,
};

/* ---- the watcher thread and main ---- */

struct lz_watch {
    uint64_t deadline_ms;
    pid_t    parent;
    atomic_bool stop;
};

/* SIGUSR1 (the power loss), the -t deadline and the parent's death; the
   last two end the mount the way SIGTERM does. */
static void *lz_watch(void *arg)
{
    struct lz_watch *w = arg;
    struct timespec tick = {0, LZ_TICK_MS * 1000000L};
    sigset_t usr1;

    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    while (!atomic_load(&w->stop)) {
        if (sigtimedwait(&usr1, NULL, &tick) == SIGUSR1 &&
            !atomic_load(&lz.crashed))
            crash();
        if (now_ms() >= w->deadline_ms || getppid() != w->parent) {
            kill(getpid(), SIGTERM);
            break;
        }
    }
    return NULL;
}

static int usage(FILE *out, int rc)
{
    fprintf(out,
        "usage: lazyfs [-e EIO_FLAG_FILE] [-E read|write|all] [-m MIB]\n"
        "              [-t SECONDS] UNDER MNT\n"
        "\n"
        "Mount UNDER at MNT (foreground) and lose what was not fsynced:\n"
        "writes stay in memory until fsync/fdatasync of their file writes\n"
        "them to UNDER; close() persists nothing.  Metadata (create,\n"
        "rename, unlink, truncate, chmod, ...) goes to UNDER at once\n"
        "(LazyFS's default model: un-fsynced data is lost, metadata not).\n"
        "\n"
        "  SIGUSR1          power loss: drop every un-fsynced byte, print\n"
        "                   how much, answer EIO to everything after it\n"
        "  SIGTERM, SIGINT, unmount, -t, parent death: exit without\n"
        "                   writing dirty data (a power loss too)\n"
        "  -e FILE          while FILE exists, answer EIO (see -E)\n"
        "  -E KIND          which calls on regular files -e fails: read\n"
        "                   (default), write (write, fsync, truncate), all\n"
        "  -m MIB           dirty data cap; writes past it: ENOSPC\n"
        "                   (default 1024)\n"
        "  -t SECONDS       exit after this long (default 3600)\n"
        "  -h, --help       this text\n");
    return rc;
}

static int parse_kind(const char *s)
{
    if (strcmp(s, "read") == 0)
        return LZ_EIO_READ;
    if (strcmp(s, "write") == 0)
        return LZ_EIO_WRITE;
    if (strcmp(s, "all") == 0)
        return LZ_EIO_READ | LZ_EIO_WRITE;
    return 0;
}

/* Options into lz and *seconds; 0, or an exit status. */
static int parse_args(int argc, char **argv, long *seconds)
{
    static const struct option longs[] = {
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    char *end;
    long v;
    int c;

    lz.eio_kinds = LZ_EIO_READ;
    lz.max_dirty = 1024ull << 20;
    while ((c = getopt_long(argc, argv, "+e:E:m:t:h", longs, NULL)) != -1) {
        switch (c) {
        case 'e': lz.flag = optarg; break;
        case 'E':
            lz.eio_kinds = parse_kind(optarg);
            if (lz.eio_kinds == 0) {
                fprintf(stderr, "lazyfs: -E: read, write or all\n");
                return 2;
            }
            break;
        case 'm':
        case 't':
            v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v <= 0) {
                fprintf(stderr, "lazyfs: -%c: a positive number\n", c);
                return 2;
            }
            if (c == 'm')
                lz.max_dirty = (uint64_t)v << 20;
            else
                *seconds = v;
            break;
        case 'h': return usage(stdout, 1);
        default: return usage(stderr, 2);
        }
    }
    if (argc - optind != 2)
        return usage(stderr, 2);
    return 0;
}

/* Mount, serve until unmounted or told to stop, unmount.  0 or 1. */
static int lz_serve(const char *mnt, struct lz_watch *w)
{
    char *fargv[] = {"lazyfs", "-o", "fsname=lazyfs,subtype=lazyfs", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    sigset_t all, old;
    pthread_t th;
    struct fuse *fuse;
    int rc = 1;

    fuse = fuse_new(&args, &lz_ops, sizeof(lz_ops), NULL);
    if (fuse == NULL)
        return 1;
    if (fuse_mount(fuse, mnt) != 0)
        goto out_destroy;
    if (fuse_set_signal_handlers(fuse_get_session(fuse)) != 0)
        goto out_unmount;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&th, NULL, lz_watch, w) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        goto out_signals;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    rc = fuse_loop_mt(fuse, 0) == 0 ? 0 : 1;
    atomic_store(&w->stop, true);
    pthread_join(th, NULL);
out_signals:
    fuse_remove_signal_handlers(fuse_get_session(fuse));
out_unmount:
    fuse_unmount(fuse);
out_destroy:
    fuse_destroy(fuse);
    fuse_opt_free_args(&args);
    return rc;
}

int main(int argc, char **argv)
{
    struct lz_watch w = {.parent = getppid()};
    sigset_t usr1;
    long seconds = 3600;
    int rc;

    rc = parse_args(argc, argv, &seconds);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    lz.under_fd = open(argv[optind], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lz.under_fd < 0) {
        fprintf(stderr, "lazyfs: %s: %s\n", argv[optind], strerror(errno));
        return 1;
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != w.parent)
        return 1;
    w.deadline_ms = now_ms() + (uint64_t)seconds * 1000;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);   /* the watcher waits for it */
    rc = lz_serve(argv[optind + 1], &w);
    fprintf(stderr, "lazyfs: exit: %llu bytes of un-fsynced data not "
            "written; %llu EIO injected\n",
            (unsigned long long)atomic_load(&lz.dirty),
            (unsigned long long)atomic_load(&lz.eio_count));
    tab_free();
    close(lz.under_fd);
    return rc;
}
