/* SPDX-License-Identifier: MIT */
/*
 * Internals of the FUSE mount shared by fs.c (session, handlers),
 * inode.c (the inode table) and ctl.c (the statistics texts).
 *
 * Inodes follow libfuse's passthrough_ll: an inode lives while the kernel
 * holds lookups on it (nlookup, dropped by forget); the root and the
 * control file are never freed.  A handler may use an inode it got from
 * fs_inode_get() without a reference for the length of the request: the
 * kernel does not forget an inode while a request on it is in flight.
 * The immutable fields (ino, key, is_dir, st) are read without the lock;
 * the others only under it.  A file inode is one version of its object
 * (inode.c), which is what lets the kernel keep its pages across opens.
 */
#ifndef TFS_FUSE_INT_H
#define TFS_FUSE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/util.h"
#include "tierfs/cache.h"
#include "tierfs/fs.h"

#define FS_ROOT_INO 1                   /* FUSE_ROOT_ID */
#define FS_CTL_INO 2                    /* the control file */
#define FS_FIRST_INO 3                  /* the first one handed out */
#define FS_CTL_NAME ".tierfs-stats"
#define FS_KEY_MAX 1024                 /* bytes, as the store checks */
#define FS_MAX_READ (1u << 20)          /* the largest read request */

struct fs_inode {
    uint64_t         ino;               /* node id; immutable */
    char            *key;               /* "", "a/b/" or "a/b/c"; owned,
                                           immutable */
    bool             is_dir;            /* immutable */
    bool             keyed;             /* in the key map; t->lock */
    struct tfs_stat  st;                /* files: the version this inode
                                           stands for; immutable */
    uint64_t         nlookup;           /* protected by t->lock */
    struct fs_inode *next_ino;          /* hash chain; t->lock */
    struct fs_inode *next_key;          /* hash chain; t->lock */
};

struct fs_itable {
    pthread_mutex_t   lock;
    struct fs_inode **by_ino;           /* buckets; protected by lock */
    struct fs_inode **by_key;           /* buckets; protected by lock */
    size_t            nbuckets;         /* power of two; lock */
    size_t            count;            /* inodes; lock */
    uint64_t          next_ino;         /* lock */
    struct fs_inode  *root;             /* never freed */
    struct fs_inode  *ctl;              /* never freed, not in the maps */
    uid_t             uid;              /* owner of every inode */
    gid_t             gid;
    int64_t           dir_mtime_ns;     /* directories' mtime: mount time */
};

/* ---- inode.c ---- */

int fs_itable_init(struct fs_itable *t);
void fs_itable_cleanup(struct fs_itable *t);
size_t fs_itable_count(struct fs_itable *t);

/* The inode with node id ino, or NULL (never looked up, or forgotten). */
struct fs_inode *fs_inode_get(struct fs_itable *t, uint64_t ino);

/*
 * Find or create the inode of key, for a file of version st (st may be
 * NULL for a directory), and count one kernel lookup on it.  A file
 * inode of another version is replaced (inode.c).  -ENOMEM.
 */
int fs_inode_lookup(struct fs_itable *t, const char *key, bool is_dir,
                    const struct tfs_stat *st, struct fs_inode **out);

/* Drop n lookups of ino; frees it at 0 (never the root or control file). */
void fs_inode_forget(struct fs_itable *t, uint64_t ino, uint64_t n);

/*
 * The st_ino reported for key (and version, files; NULL for a directory):
 * a 64-bit hash, stable across forget and remount, 1 for the root.
 */
uint64_t fs_key_ino(const char *key, const char *version);

/* The attributes of in. */
void fs_attr_fill(const struct fs_itable *t, const struct fs_inode *in,
                  struct stat *out);

/* ---- fs.c ---- */

/* Counters of the FUSE layer, shown beside the cache's statistics. */
struct fs_counters {
    atomic_uint_fast64_t lookups;
    atomic_uint_fast64_t opens;
    atomic_uint_fast64_t reads;         /* read requests */
    atomic_uint_fast64_t read_bytes;    /* bytes replied */
    atomic_uint_fast64_t read_max;      /* largest request size seen */
    atomic_uint_fast64_t errors;        /* requests answered with an error */
};

enum fs_handle_kind {
    FS_H_FILE,
    FS_H_DIR,
    FS_H_CTL,
};

/* One open file or directory: fi->fh.  Listed so close can reap them. */
struct fs_handle {
    enum fs_handle_kind kind;
    struct fs_inode    *in;             /* borrowed: the kernel keeps it */
    struct tfs_file    *file;           /* FS_H_FILE; owned */
    struct tfs_dir     *dir;            /* FS_H_DIR; owned, NULL: empty */
    struct tfs_buf      ctl;            /* FS_H_CTL: the text */
    struct fs_handle   *prev;           /* protected by fs->hlock */
    struct fs_handle   *next;           /* protected by fs->hlock */
};

struct fuse_session;
struct tfs_http;

/* The mount (fs.h). */
struct tfs_fs {
    struct tfs_cache    *cache;         /* owned */
    struct tfs_store    *st;            /* borrowed, open to close */
    struct fuse_session *se;            /* owned after open */
    bool                 mounted;
    struct tfs_http     *http;          /* owned; NULL: no endpoint */
    struct fs_itable     inodes;
    struct fs_counters   n;
    pthread_mutex_t      hlock;
    struct fs_handle    *handles;       /* open handles; hlock */
    size_t               nhandles;      /* hlock */
    pthread_t            run_thread;    /* in tfs_fs_run */
    bool                 opened;        /* tfs_fs_open was called */
    /* settings */
    char                *metrics;       /* owned; NULL: none */
    struct tfs_buf       fuse_opts;     /* ","-joined */
    double               ttl_s;         /* entry and attr timeouts */
    bool                 immutable;
    bool                 debug;
    unsigned             max_threads;
    uint64_t             kernel_ra;     /* bytes of kernel readahead; 0:
                                           leave the kernel's default */
    char                *mountpoint;    /* owned; canonical, after open */
    bool                 has_cache_dir;
    uint64_t             cache_size;    /* bytes, for statfs */
    uint64_t             mem_cache;     /* bytes, for statfs */
};

/* ---- ctl.c ---- */

#define FS_STATS_MAX (4u << 20)         /* cap of one statistics text */

/*
 * The control file's text: the cache's JSON object with the mount's own
 * members added.  -ENOMEM, TFS_ETOOBIG, the cache's errors.
 */
int fs_ctl_render(struct tfs_fs *fs, struct tfs_buf *out);
/* The /metrics body (a tfs_http_fill_fn; arg is the fs). */
int fs_metrics_fill(void *arg, struct tfs_buf *out);

#endif /* TFS_FUSE_INT_H */
