/* SPDX-License-Identifier: MIT */
/*
 * The inode table of the mount: node id <-> key, with the kernel's lookup
 * count as the reference count (libfuse passthrough_ll).
 *
 * One mutex guards two chained hash maps over the same inodes, one keyed
 * by node id (every request) and one by key (lookup finds the inode a
 * name already has, so the kernel keeps one inode and its page cache per
 * object).  Node ids count up from FS_FIRST_INO and are never reused, so
 * the generation is always 0.  The lock is never held across cache I/O
 * or a FUSE reply: callers copy what they need out.
 *
 * A file inode stands for one version of its object: its stat is fixed
 * when it is created, so its data never changes and the kernel may keep
 * its pages for good.  A lookup that finds a new version gives the name
 * a new inode (node id) and takes the old one out of the key map; open
 * handles keep reading the old version, as after a rename over a local
 * file.
 *
 * Attributes: files 0444 with the object's size and mtime, directories
 * 0555 with nlink 2 and the mount time; everything belongs to the user
 * that mounted.  st_ino is a hash of the key, stable across forget and
 * remount, and the same number readdir reports as d_ino.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/util.h"
#include "fuse/fuse_int.h"

#define ITABLE_MIN_BUCKETS 1024

static size_t itable_key_hash(const char *key)
{
    return (size_t)XXH3_64bits(key, strlen(key));
}

static size_t itable_ino_hash(uint64_t ino)
{
    return (size_t)(ino * 0x9e3779b97f4a7c15ull >> 17);
}

uint64_t fs_key_ino(const char *key, const char *version)
{
    uint64_t h;

    if (key[0] == '\0')
        return FS_ROOT_INO;
    h = XXH3_64bits_withSeed(key, strlen(key),
                             version ? XXH3_64bits(version, strlen(version))
                                     : 0);
    return h < FS_FIRST_INO ? h + FS_FIRST_INO : h;
}

static struct fs_inode *itable_new_inode(const char *key, bool is_dir,
                                        const struct tfs_stat *st)
{
    struct fs_inode *in = tfs_calloc(1, sizeof(*in));

    if (in == NULL)
        return NULL;
    in->key = tfs_strdup(key);
    if (in->key == NULL) {
        tfs_free(in);
        return NULL;
    }
    in->is_dir = is_dir;
    in->keyed = true;
    if (!is_dir)
        in->st = *st;
    return in;
}

static void itable_free_inode(struct fs_inode *in)
{
    if (in == NULL)
        return;
    tfs_free(in->key);
    tfs_free(in);
}

/* Link in into both maps.  Called with t->lock held. */
static void itable_link(struct fs_itable *t, struct fs_inode *in)
{
    size_t mask = t->nbuckets - 1;
    size_t bi = itable_ino_hash(in->ino) & mask;
    size_t bk = itable_key_hash(in->key) & mask;

    in->next_ino = t->by_ino[bi];
    t->by_ino[bi] = in;
    if (in->keyed) {
        in->next_key = t->by_key[bk];
        t->by_key[bk] = in;
    }
    t->count++;
}

/*
 * Take in out of the key map only: its key now names an object of the
 * other kind (a file became a directory or back), but the kernel still
 * holds the old node id until it forgets it.  t->lock held.
 */
static void itable_unkey(struct fs_itable *t, struct fs_inode *in)
{
    struct fs_inode **pp;

    pp = &t->by_key[itable_key_hash(in->key) & (t->nbuckets - 1)];
    while (*pp != in)
        pp = &(*pp)->next_key;
    *pp = in->next_key;
    in->keyed = false;
}

/* Unlink in from both maps.  Called with t->lock held. */
static void itable_unlink(struct fs_itable *t, struct fs_inode *in)
{
    size_t mask = t->nbuckets - 1;
    struct fs_inode **pp = &t->by_ino[itable_ino_hash(in->ino) & mask];

    while (*pp != in)
        pp = &(*pp)->next_ino;
    *pp = in->next_ino;
    if (in->keyed)
        itable_unkey(t, in);
    t->count--;
}

/*
 * Double the buckets when the load passes 1.  On allocation failure the
 * table keeps its size: longer chains, still correct.  t->lock held.
 */
static void itable_grow(struct fs_itable *t)
{
    size_t n = t->nbuckets * 2;
    struct fs_inode **by_ino = tfs_calloc(n, sizeof(*by_ino));
    struct fs_inode **by_key = tfs_calloc(n, sizeof(*by_key));
    struct fs_inode **old = t->by_ino;
    size_t old_n = t->nbuckets;

    if (by_ino == NULL || by_key == NULL) {
        tfs_free(by_ino);
        tfs_free(by_key);
        return;
    }
    tfs_free(t->by_key);
    t->by_ino = by_ino;
    t->by_key = by_key;
    t->nbuckets = n;
    t->count = 0;
    for (size_t i = 0; i < old_n; i++) {
        struct fs_inode *in = old[i];
        while (in != NULL) {
            struct fs_inode *next = in->next_ino;
            itable_link(t, in);
            in = next;
        }
    }
    tfs_free(old);
}

int fs_itable_init(struct fs_itable *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    t->nbuckets = ITABLE_MIN_BUCKETS;
    t->by_ino = tfs_calloc(t->nbuckets, sizeof(*t->by_ino));
    t->by_key = tfs_calloc(t->nbuckets, sizeof(*t->by_key));
    t->root = itable_new_inode("", true, NULL);
    t->ctl = itable_new_inode(FS_CTL_NAME, false, &(struct tfs_stat){0});
    if (t->by_ino == NULL || t->by_key == NULL || t->root == NULL ||
        t->ctl == NULL) {
        fs_itable_cleanup(t);
        return -ENOMEM;
    }
    t->root->ino = FS_ROOT_INO;
    t->root->nlookup = 1;
    t->ctl->ino = FS_CTL_INO;
    t->next_ino = FS_FIRST_INO;
    t->uid = getuid();
    t->gid = getgid();
    t->dir_mtime_ns = tfs_wall_ns();
    itable_link(t, t->root);
    return 0;
}

void fs_itable_cleanup(struct fs_itable *t)
{
    if (t->by_ino != NULL) {
        for (size_t i = 0; i < t->nbuckets; i++) {
            struct fs_inode *in = t->by_ino[i];
            while (in != NULL) {
                struct fs_inode *next = in->next_ino;
                itable_free_inode(in);
                in = next;
            }
        }
    }
    if (t->count == 0)
        itable_free_inode(t->root);     /* init failed before linking */
    itable_free_inode(t->ctl);
    tfs_free(t->by_ino);
    tfs_free(t->by_key);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof(*t));
}

size_t fs_itable_count(struct fs_itable *t)
{
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

/* The inode with node id ino, or NULL.  t->lock held. */
static struct fs_inode *itable_find_ino(struct fs_itable *t, uint64_t ino)
{
    struct fs_inode *in = t->by_ino[itable_ino_hash(ino) & (t->nbuckets - 1)];

    while (in != NULL && in->ino != ino)
        in = in->next_ino;
    return in;
}

/* The inode of key, or NULL.  t->lock held. */
static struct fs_inode *itable_find_key(struct fs_itable *t, const char *key)
{
    size_t b = itable_key_hash(key) & (t->nbuckets - 1);
    struct fs_inode *in = t->by_key[b];

    while (in != NULL && strcmp(in->key, key) != 0)
        in = in->next_key;
    return in;
}

struct fs_inode *fs_inode_get(struct fs_itable *t, uint64_t ino)
{
    struct fs_inode *in;

    if (ino == FS_CTL_INO)
        return t->ctl;
    pthread_mutex_lock(&t->lock);
    in = itable_find_ino(t, ino);
    pthread_mutex_unlock(&t->lock);
    return in;
}

/*
 * The inode of key if it is of the kind is_dir and, for a file, of the
 * version st.  One that is not is taken out of the key map: the name now
 * belongs to a new inode, and the old one lives on for the handles and
 * lookups the kernel still has.  t->lock held.
 */
static struct fs_inode *itable_find_match(struct fs_itable *t,
                                          const char *key, bool is_dir,
                                          const struct tfs_stat *st)
{
    struct fs_inode *in = itable_find_key(t, key);

    if (in != NULL && (in->is_dir != is_dir ||
                       (!is_dir && strcmp(in->st.version, st->version)))) {
        itable_unkey(t, in);
        in = NULL;
    }
    return in;
}

int fs_inode_lookup(struct fs_itable *t, const char *key, bool is_dir,
                    const struct tfs_stat *st, struct fs_inode **out)
{
    struct fs_inode *fresh = NULL;
    struct fs_inode *in;

    pthread_mutex_lock(&t->lock);
    in = itable_find_match(t, key, is_dir, st);
    if (in == NULL) {
        /* Allocate outside the lock, then look again. */
        pthread_mutex_unlock(&t->lock);
        fresh = itable_new_inode(key, is_dir, st);
        if (fresh == NULL)
            return -ENOMEM;
        pthread_mutex_lock(&t->lock);
        in = itable_find_match(t, key, is_dir, st);
    }
    if (in == NULL) {
        in = fresh;
        fresh = NULL;
        in->ino = t->next_ino++;
        if (t->count >= t->nbuckets)
            itable_grow(t);
        itable_link(t, in);
    }
    in->nlookup++;
    pthread_mutex_unlock(&t->lock);
    itable_free_inode(fresh);
    *out = in;
    return 0;
}

void fs_inode_forget(struct fs_itable *t, uint64_t ino, uint64_t n)
{
    struct fs_inode *in;

    if (ino < FS_FIRST_INO)
        return;                         /* root, control file */
    pthread_mutex_lock(&t->lock);
    in = itable_find_ino(t, ino);
    if (in == NULL) {
        pthread_mutex_unlock(&t->lock);
        return;
    }
    assert(in->nlookup >= n);
    in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
    if (in->nlookup > 0) {
        pthread_mutex_unlock(&t->lock);
        return;
    }
    itable_unlink(t, in);
    pthread_mutex_unlock(&t->lock);
    itable_free_inode(in);
}

void fs_attr_fill(const struct fs_itable *t, const struct fs_inode *in,
                  struct stat *out)
{
    const struct tfs_stat *st = &in->st;
    int64_t mtime_ns = in->is_dir ? t->dir_mtime_ns : st->mtime_ns;

    if (mtime_ns < 0)
        mtime_ns = 0;

    memset(out, 0, sizeof(*out));
    if (in == t->ctl)
        mtime_ns = tfs_wall_ns();
    out->st_ino = fs_key_ino(in->key, in->is_dir ? NULL : st->version);
    out->st_uid = t->uid;
    out->st_gid = t->gid;
    out->st_blksize = FS_MAX_READ;
    out->st_mtim.tv_sec = mtime_ns / 1000000000;
    out->st_mtim.tv_nsec = mtime_ns % 1000000000;
    out->st_atim = out->st_mtim;
    out->st_ctim = out->st_mtim;
    if (in->is_dir) {
        out->st_mode = S_IFDIR | 0555;
        out->st_nlink = 2;
        return;
    }
    out->st_mode = S_IFREG | 0444;
    out->st_nlink = 1;
    out->st_size = (off_t)st->size;
    out->st_blocks = (blkcnt_t)((st->size + 511) / 512);
}
