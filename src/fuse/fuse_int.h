/* SPDX-License-Identifier: MIT */
/*
 * Internals of the FUSE mount, shared by its files.  Calls run one way,
 * top to bottom (libuv's src/unix: feature files over a core):
 *
 *   session.c    the ops table, INIT, open (mount), run, close
 *   opts.c       tfs_fs_create, tfs_fs_set
 *   lookup.c     lookup, getattr, readdir, statfs, xattrs
 *   read.c       open, read, release
 *   write.c      the handlers that change things (write-back)
 *   aread.c      reads that wait for the store, answered later
 *   spath.c      the store path: requests that may wait on the store
 *   ctl.c        the statistics texts (control file, /metrics)
 *   handle.c     handles, errors, keys, entries
 *   inode.c      the inode table
 *
 * Inodes follow libfuse's passthrough_ll: an inode lives while the kernel
 * holds lookups on it (nlookup, dropped by forget); the root and the
 * control file are never freed.  A handler may use an inode it got from
 * fs_inode_get() without a reference for the length of the request: the
 * kernel does not forget an inode while a request on it is in flight.
 * The immutable fields (ino, is_dir, size, mtime_ns, version, st_ino)
 * are read without the lock; the others (the key: renames change it)
 * only under it.  A file inode is one version of its object (inode.c),
 * which is what lets the kernel keep its pages across opens, or, with
 * write-back, one staged file (a wb_node, src/wb/wb.h) once it was
 * written through the mount.
 *
 * FUSE_USE_VERSION is pinned here, once for the module, to the oldest
 * libfuse supported (Debian 12 ships 3.14).
 */
#ifndef TFS_FUSE_INT_H
#define TFS_FUSE_INT_H

#define FUSE_USE_VERSION 314       /* FUSE_MAKE_VERSION(3, 14): Debian 12 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#include "common/hmap.h"
#include "common/util.h"
#include "group/group.h"
#include "tierfs/cache.h"
#include "tierfs/fs.h"
#include "wb/wb.h"

#define FS_ROOT_INO 1                   /* FUSE_ROOT_ID */
#define FS_CTL_INO 2                    /* the control file */
#define FS_HINT_INO 3                   /* the order-hint file */
#define FS_FIRST_INO 4                  /* the first one handed out */
#define FS_CTL_NAME ".tierfs-stats"
#define FS_HINT_NAME ".tierfs-prefetch"
#define FS_KEY_MAX 1024                 /* bytes, as the store checks */
#define FS_MAX_READ (1u << 20)          /* the largest read request */

struct fs_inode {
    uint64_t         ino;               /* node id; immutable */
    struct tfs_hnode by_ino;            /* in t->by_ino; t->lock */
    struct tfs_hstr  by_key;            /* in t->by_key while keyed;
                                           by_key.key: "", "a/b/" or
                                           "a/b/c", owned; t->lock
                                           (renames change it) */
    bool             is_dir;            /* immutable */
    bool             keyed;             /* in the key map; t->lock */
    bool             key_borrowed;      /* by_key.key is t->keys' (not
                                           freed); t->lock */
    /* files: the version this inode stands for; immutable */
    uint64_t         size;              /* bytes */
    int64_t          mtime_ns;
    const char      *version;           /* the snapshot's copy (t->keys),
                                           or vbuf; "" for none */
    struct wb_node *_Atomic wf;         /* its staged file (a reference),
                                           set once, never cleared */
    uint64_t         st_ino;            /* reported st_ino; immutable */
    uint64_t         nlookup;           /* protected by t->lock */
    char             vbuf[];            /* the version, when not the
                                           snapshot's */
};

struct fs_itable {
    pthread_mutex_t   lock;
    struct tfs_hmap   by_ino;           /* every inode but ctl, by node
                                           id (u64 keys); lock */
    struct tfs_hmap   by_key;           /* the keyed ones, by key; lock */
    uint64_t          next_ino;         /* lock */
    struct fs_inode  *root;             /* never freed */
    struct fs_inode  *ctl;              /* never freed, not in the maps */
    struct fs_inode  *hint;             /* the same */
    uid_t             uid;              /* owner of every inode */
    gid_t             gid;
    int64_t           dir_mtime_ns;     /* directories' mtime: mount time */
    bool              writable;         /* modes 0644/0755, else 0444/0555 */
    struct tfs_cache *keys;             /* immutable mounts: file keys
                                           and versions borrowed from
                                           its snapshot
                                           (tfs_cache_key_stable), or
                                           NULL; set before the mount */
};

/* ---- inode.c ---- */

int fs_itable_init(struct fs_itable *t);
void fs_itable_cleanup(struct fs_itable *t);
size_t fs_itable_count(struct fs_itable *t);

/* The inode with node id ino, or NULL (never looked up, or forgotten). */
struct fs_inode *fs_inode_get(struct fs_itable *t, uint64_t ino);

/*
 * Find or create the inode of key, for a file of version st or the
 * staged file node (both NULL for a directory), and count one kernel
 * lookup on it.  A file inode of another version or node is replaced
 * (inode.c).  -ENOMEM.
 */
int fs_inode_lookup(struct fs_itable *t, const char *key, bool is_dir,
                    const struct tfs_stat *st, struct wb_node *node,
                    struct fs_inode **out);

/* The version file inode in stands for, as a tfs_stat in buf: buf. */
const struct tfs_stat *fs_inode_stat(const struct fs_inode *in,
                                     struct tfs_stat *buf);

/* in's key, copied into buf (FS_KEY_MAX + 2 bytes). */
void fs_inode_key(struct fs_itable *t, const struct fs_inode *in,
                  char *buf);
/* in's staged file (a new reference), or NULL. */
struct wb_node *fs_inode_node(struct fs_itable *t, struct fs_inode *in);
/* From now on in stands for the staged file node (no-op if it does). */
void fs_inode_link(struct fs_itable *t, struct fs_inode *in,
                   struct wb_node *node);
/* key no longer names its inode (unlinked, removed): the next lookup
   makes a new one.  The inode lives on for the kernel's references. */
void fs_itable_unkey(struct fs_itable *t, const char *key);
/*
 * Follow a rename in the key map: the inode of from (and, for a
 * directory, every inode under it) now has the key to; whatever had to
 * is unkeyed.  Keys without a trailing '/'.
 */
void fs_itable_rename(struct fs_itable *t, const char *from, const char *to,
                      bool is_dir);

/* Drop n lookups of ino; frees it at 0 (never the root or control file). */
void fs_inode_forget(struct fs_itable *t, uint64_t ino, uint64_t n);

/*
 * The st_ino reported for key (and version, files; NULL for a directory):
 * a 64-bit hash, stable across forget and remount, 1 for the root.
 */
uint64_t fs_key_ino(const char *key, const char *version);
/* The st_ino of a staged file: a hash of its node id, stable across
   renames. */
uint64_t fs_node_ino(uint64_t nid);

/* The attributes of in. */
void fs_attr_fill(const struct fs_itable *t, const struct fs_inode *in,
                  struct stat *out);

/* ---- the mount (every file) ---- */

/* Counters of the FUSE layer, shown beside the cache's statistics. */
struct fs_counters {
    atomic_uint_fast64_t lookups;
    atomic_uint_fast64_t opens;
    atomic_uint_fast64_t reads;         /* read requests */
    atomic_uint_fast64_t read_bytes;    /* bytes replied */
    atomic_uint_fast64_t read_max;      /* largest request size seen */
    atomic_uint_fast64_t errors;        /* requests answered with an error */
    atomic_uint_fast64_t writes;        /* write requests */
    atomic_uint_fast64_t write_bytes;   /* bytes written */
    atomic_uint_fast64_t flushes_other; /* closes of a writing handle by
                                           another process, not sealed */
    atomic_uint_fast64_t async_reads;   /* reads answered from a fetch
                                           completion */
    atomic_uint_fast64_t async_overflow; /* of them, queued past the
                                           bound first */
    atomic_uint_fast64_t deferred;      /* requests handed to the
                                           store-path threads */
};

struct fs_aread;

/*
 * Reads that wait for the store (aread.c): started without a thread,
 * answered from the fetch completion.  At most max in flight (each holds
 * a reply buffer); the rest wait in a FIFO that completions drain.
 */
struct fs_async {
    pthread_mutex_t  lock;
    struct fs_aread *flight;            /* started, unanswered; lock */
    struct fs_aread *head;              /* past the bound; lock */
    struct fs_aread *tail;              /* lock */
    unsigned         n_flight;          /* lock */
    unsigned         n_queued;          /* lock */
    unsigned         max;               /* async_reads */
    bool             closing;           /* lock */
    atomic_uint_fast64_t buf_bytes;     /* reply buffers held now */
};

#define FS_SPATH_THREADS 4

/* Requests that may wait on the store take the store path (spath.c). */
enum fs_defer_op {
    FS_OP_LOOKUP, FS_OP_OPEN, FS_OP_OPENDIR, FS_OP_GETXATTR, FS_OP_READ,
};

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

/* Run a deferred request on a store-path thread (session.c's dispatch). */
typedef void fs_defer_fn(struct fs_defer *d);

/*
 * The store path: requests that may wait on the store's metadata (lookup,
 * open, opendir, getxattr, reads of moved files).  At most cap FUSE
 * threads run them at once; past that they go to FS_SPATH_THREADS
 * threads of their own, so a hung HEAD or LIST cannot take every FUSE
 * thread.
 */
struct fs_spath {
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    struct fs_defer *head;              /* lock */
    struct fs_defer *tail;              /* lock */
    unsigned         n_queued;          /* lock */
    bool             stopping;          /* lock */
    atomic_uint      busy;              /* FUSE threads in the store path */
    unsigned         cap;
    fs_defer_fn     *run;               /* set at start */
    pthread_t        threads[FS_SPATH_THREADS];
    unsigned         n_threads;
};

enum fs_handle_kind {
    FS_H_FILE,
    FS_H_DIR,
    FS_H_CTL,
    FS_H_HINT,                          /* a stream of order hints */
    FS_H_NODE,                          /* a staged file (write-back) */
};

/* One open file or directory: fi->fh.  Listed so close can reap them. */
struct fs_handle {
    enum fs_handle_kind kind;
    struct fs_inode    *in;             /* borrowed: the kernel keeps it */
    struct tfs_file    *file;           /* FS_H_FILE; owned */
    struct tfs_dir     *dir;            /* FS_H_DIR; owned, NULL: empty */
    struct wb_list     *wlist;          /* FS_H_DIR with write-back */
    struct wb_node     *node;           /* FS_H_NODE; a reference */
    bool                writer;         /* FS_H_NODE: open for writing */
    pid_t               opener;         /* writer: the opening process
                                           (thread group), 0: unknown */
    pid_t               opener_tid;     /* writer: the opening thread */
    atomic_int          last_write_tid; /* writer: the last write's thread */
    atomic_bool         moved;          /* FS_H_FILE: a pending move of its
                                           object landed; read at the
                                           inode's key (read.c) */
    struct tfs_buf      ctl;            /* FS_H_CTL: the text */
    struct fs_hstream  *hint;           /* FS_H_HINT; hint.c frees it */
    struct fs_handle   *prev;           /* protected by fs->hlock */
    struct fs_handle   *next;           /* protected by fs->hlock */
};

/* ---- order hints (hint.c) ---- */

#define FS_HINT_IDLE_MS 60000           /* a stream unfollowed this long is
                                           dropped */
#define FS_HINT_WINDOW_FILES 256        /* hinted files issued ahead */
#define FS_HINT_WINDOW_MAX (1ull << 30) /* bytes ahead, at most (default:
                                           half the RAM tier) */

struct fs_hint_entry;

/* One open of the hint file: its paths in order; fs->hints.lock. */
struct fs_hstream {
    struct fs_hstream     *prev, *next; /* fs->hints.streams */
    struct fs_hint_entry **e;           /* n hinted files, in order */
    size_t                 n, cap;
    struct tfs_hmap        by_key;      /* first occurrence of each key */
    struct tfs_hmap        dirs;        /* directories listed for it; the
                                           hint thread's alone */
    size_t                 consumed;    /* the reader is past [0, this) */
    size_t                 issued;      /* [0, this) issued or passed */
    size_t                 dirs_seen;   /* [0, this): directories listed
                                           or being listed; the thread's */
    uint64_t               ahead;       /* bytes fetched ahead for the
                                           files at >= consumed */
    uint64_t               last_ns;     /* last write or hinted open */
    bool                   closed;      /* released: the thread frees it */
    bool                   dropped;     /* not followed: emptied */
    bool                   part_nul;    /* part holds a NUL byte */
    uint64_t               mem;         /* bytes its entries hold */
    size_t                 plen;        /* bytes of an unfinished line */
    char                   part[FS_KEY_MAX + 512];
};

/* The mount's figures of its hints (the "hints" section). */
struct fs_hint_counters {
    uint64_t streams;                   /* open now */
    uint64_t streams_opened;
    uint64_t streams_dropped;
    uint64_t paths;                     /* hinted paths taken */
    uint64_t bad_writes;                /* writes refused */
    uint64_t opens_hinted;              /* opens of hinted files */
    uint64_t files_issued;              /* their misses asked for */
    uint64_t files_cached;              /* of those, nothing to fetch */
    uint64_t files_missing;             /* no such file */
    uint64_t files_passed;              /* opened before their turn */
    uint64_t bytes_queued;              /* asked of the fetch engine */
    uint64_t bytes_used;                /* fetched ahead, then opened */
    uint64_t bytes_abandoned;           /* fetched ahead, never opened */
    uint64_t window_files;
    uint64_t window_bytes;
    uint64_t mem_bytes;                 /* what the streams hold */
};

struct fs_hints {
    pthread_mutex_t         lock;
    pthread_cond_t          cond;       /* work for the thread */
    pthread_t               thread;
    bool                    started;    /* lock */
    bool                    stopping;   /* lock */
    struct fs_hstream      *streams;    /* lock */
    atomic_uint             live;       /* streams open: opens look */
    uint64_t                window_bytes; /* settings (0: the default) */
    unsigned                window_files;
    uint64_t                idle_ms;
    struct fs_hint_counters c;          /* lock */
};

struct fuse_session;
struct tfs_http;
struct tfs_group;
struct tfs_shared;

/* The mount (fs.h). */
struct tfs_fs {
    struct tfs_cache    *cache;         /* owned */
    struct tfs_store    *st;            /* borrowed, open to close */
    struct fuse_session *se;            /* owned after open */
    bool                 mounted;
    struct tfs_http     *http;          /* owned; NULL: no endpoint */
    struct tfs_wb       *wb;            /* owned; NULL: read-only */
    struct fs_itable     inodes;
    struct fs_counters   n;
    struct fs_async      async;
    struct fs_spath      spath;
    struct fs_hints      hints;
    pthread_mutex_t      hlock;
    struct fs_handle    *handles;       /* open handles; hlock */
    size_t               nhandles;      /* hlock */
    pthread_t            run_thread;    /* in tfs_fs_run */
    bool                 opened;        /* tfs_fs_open was called */
    /* settings; the cache's own (meta_ttl, immutable, cache_dir, sizes)
       are asked of the cache, never copied */
    char                *metrics;       /* owned; NULL: none */
    struct tfs_group_cfg gcfg;          /* the cache group's: its strings
                                           owned; members NULL: none */
    struct tfs_group    *group;         /* owned; NULL: not in a group */
    char                *shared_uri;    /* owned; NULL: no shared tier */
    struct tfs_shared   *shared;        /* owned */
    struct tfs_buf       fuse_opts;     /* ","-joined */
    bool                 debug;
    unsigned             max_threads;
    uint64_t             kernel_ra;     /* bytes of kernel readahead; 0:
                                           leave the kernel's default */
    char                *mountpoint;    /* owned; canonical, after open */
    bool                 read_only;     /* no write-back */
    struct wb_cfg        wcfg;          /* staging_dir owned */
};

/* ---- handle.c ---- */

struct tfs_fs *fs_of(fuse_req_t req);
struct fs_handle *fs_handle_of(const struct fuse_file_info *fi);
struct fs_handle *fs_handle_new(struct tfs_fs *fs, enum fs_handle_kind kind,
                                struct fs_inode *in);
/* Release what h holds and free it; seal: a writer's release seals. */
void fs_handle_free(struct tfs_fs *fs, struct fs_handle *h, bool seal);
int fs_errno(int rc);
int fs_fail(struct tfs_fs *fs, const char *op, const char *key, int rc);
/* Log a failed read of h once and count it. */
void fs_read_warn(struct tfs_fs *fs, struct fs_handle *h, size_t size,
                  uint64_t off, int rc);
/* Count a read of size bytes that returned n. */
void fs_count_read(struct tfs_fs *fs, size_t size, size_t n);
/* buf = dir's key + name: FS_KEY_MAX + 2 bytes. */
int fs_child_key(struct tfs_fs *fs, const struct fs_inode *dir,
                 const char *name, char *buf);
/* "a/b" -> "a/b/" in a buffer fs_child_key filled (room is left). */
void fs_key_add_slash(char *key);
void fs_entry_init(const struct tfs_fs *fs, struct fuse_entry_param *e);
/* Count a lookup of key (a directory when is_dir) and fill e. */
int fs_entry_make(struct tfs_fs *fs, char *key, bool is_dir,
                  const struct tfs_stat *st, struct wb_node *node,
                  struct fuse_entry_param *e);
struct fs_inode *fs_dir_inode(struct tfs_fs *fs, fuse_ino_t ino, int *rc);
double fs_attr_timeout(const struct tfs_fs *fs);
/* The cache's cache_dir, or NULL for none (an empty one is none). */
const char *fs_cache_dir(const struct tfs_fs *fs);

/* ---- spath.c: the store path ---- */

/*
 * May this request wait on the store here?  True on a store-path thread,
 * or while fewer than cap FUSE threads do (then fs_gate_leave after).
 */
bool fs_gate_enter(struct tfs_fs *fs);
void fs_gate_leave(struct tfs_fs *fs);
/* Hand the request to the store-path threads (EIO at close). */
void fs_defer_op(struct tfs_fs *fs, enum fs_defer_op op, fuse_req_t req,
                 fuse_ino_t ino, const struct fuse_file_info *fi,
                 size_t size, const char *name);
void fs_defer_read(struct tfs_fs *fs, fuse_req_t req, fuse_ino_t ino,
                   const struct fuse_file_info *fi, size_t size,
                   uint64_t off);
/* Start the threads, which hand each request to run. */
int fs_spath_start(struct tfs_fs *fs, fs_defer_fn *run);
/* Answer what is still queued EIO, wait for what runs. */
void fs_spath_stop(struct tfs_fs *fs);

/* ---- aread.c: reads answered from the fetch completion ---- */

/* Start a read the cache cannot answer now, or queue it past the bound. */
void fs_aread_submit(struct tfs_fs *fs, fuse_req_t req, fuse_ino_t ino,
                     struct fuse_file_info *fi, size_t size, uint64_t off);
/* At close: answer every read in flight or queued EIO. */
void fs_aread_cancel(struct tfs_fs *fs);

/* ---- lookup.c: the handlers of names and attributes ---- */

void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void fs_forget_multi(fuse_req_t req, size_t count,
                     struct fuse_forget_data *forgets);
void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_statfs(fuse_req_t req, fuse_ino_t ino);
void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                struct fuse_file_info *fi);
void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi);
void fs_releasedir(fuse_req_t req, fuse_ino_t ino,
                   struct fuse_file_info *fi);
void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                 size_t size);
void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);

/* ---- read.c: the handlers of file data ---- */

void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             struct fuse_file_info *fi);
void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Bytes of the FUSE threads' read buffers (one per thread that read). */
uint64_t fs_read_buf_bytes(void);

/* ---- write.c: the write-back handlers ---- */

void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
               mode_t mode, struct fuse_file_info *fi);
void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
              mode_t mode, dev_t rdev);
void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
              mode_t mode);
void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
               fuse_ino_t newparent, const char *newname, unsigned flags);
void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
              off_t off, struct fuse_file_info *fi);
void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                int to_set, struct fuse_file_info *fi);
void fs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
              struct fuse_file_info *fi);
void fs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                 struct fuse_file_info *fi);
/*
 * Open ino for writing through the write-back (open with O_WRONLY or
 * O_RDWR): fills fi for a FS_H_NODE handle.
 */
int fs_open_write(struct tfs_fs *fs, struct fs_inode *in,
                  struct fuse_file_info *fi);
/* A handle just opened (or created) for writing: note who opened it
   (fs_flush; a no-op for other handles). */
void fs_write_opened(struct fs_handle *h, fuse_req_t req);
/* Start the write-back when the mount is writable (tfs_fs_open). */
int fs_wb_open(struct tfs_fs *fs);

/* ---- hint.c: order hints ---- */

void fs_hints_init(struct tfs_fs *fs);
/* Size the window from the cache (after its open). */
void fs_hints_size(struct tfs_fs *fs);
/* Stop the thread (at close, before the cache's), then, once no handle
   is left, free every stream. */
void fs_hints_stop(struct tfs_fs *fs);
void fs_hints_cleanup(struct fs_hints *hs);
/* A new stream for handle h (an open of the hint file); -ENOMEM. */
int fs_hint_open(struct tfs_fs *fs, struct fs_handle *h);
/* The stream's file was closed: it ends (the thread frees it). */
void fs_hint_close(struct tfs_fs *fs, struct fs_hstream *s);
/* A write to the hint file: taken, or refused with a logged reason. */
void fs_hint_write(struct tfs_fs *fs, fuse_req_t req, struct fs_handle *h,
                   const char *buf, size_t size);
/* key was opened for reading: the readers' position in every stream. */
void fs_hint_opened(struct tfs_fs *fs, const char *key);
/* The stream's state as one JSON line into buf: its length, -ENOMEM. */
int fs_hint_render(struct tfs_fs *fs, const struct fs_hstream *s,
                   char *buf, size_t size);
void fs_hints_get(struct tfs_fs *fs, struct fs_hint_counters *out);

/* ---- ctl.c ---- */

#define FS_STATS_MAX (4u << 20)         /* cap of one statistics text */

/*
 * The control file's text: the registry's JSON of the cache, the mount
 * and its layers (ctl.c).  -ENOMEM, TFS_ETOOBIG.
 */
int fs_ctl_render(struct tfs_fs *fs, struct tfs_buf *out);
/* The /metrics body (a tfs_http_fill_fn; arg is the fs). */
int fs_metrics_fill(void *arg, struct tfs_buf *out);

#endif /* TFS_FUSE_INT_H */
