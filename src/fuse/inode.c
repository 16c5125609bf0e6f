/* SPDX-License-Identifier: MIT */
/*
 * The inode table of the mount: node id <-> key, with the kernel's lookup
 * count as the reference count (libfuse passthrough_ll).
 *
 * One mutex guards two hash maps (common/hmap.h) over the same inodes,
 * one keyed by node id (every request) and one by key (lookup finds the
 * inode a name already has, so the kernel keeps one inode and its page
 * cache per object).  Node ids count up from FS_FIRST_INO and are never
 * reused, so the generation is always 0.  The lock is never held across
 * cache I/O or a FUSE reply: callers copy what they need out.
 *
 * A file inode stands for one version of its object: its size, mtime
 * and version are fixed when it is created, so its data never changes
 * and the kernel may keep its pages for good.  On an immutable mount the
 * key and the version are the listing snapshot's own copies, which never
 * change while mounted (tfs_cache_key_stable); elsewhere the version is
 * copied after the struct, at its length, not a whole struct tfs_stat.
 * A lookup that finds a new version gives the name a new inode (node
 * id) and takes the old one out of the key map; open handles keep
 * reading the old version, as after a rename over a local file.
 *
 * With write-back, a file written through the mount stands for its
 * staged file (in->wf, a wb_node) instead: its size and mtime come from
 * there, and a lookup finds it again as long as the name holds that
 * node, or the store holds the version the node was uploaded as.
 * Renames move keys between inodes (fs_itable_rename), so keys are read
 * under the lock.
 *
 * Attributes: files 0444 with the object's size and mtime, directories
 * 0555 with nlink 2 and the mount time (0644 and 0755 when writable);
 * everything belongs to the user that mounted.  st_ino is a hash of the
 * key (and version), stable across forget and remount, and the same
 * number readdir reports as d_ino; a staged file's is a hash of its node.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/util.h"
#include "fuse/fuse_int.h"

#define ITABLE_MIN_BUCKETS 1024

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

uint64_t fs_node_ino(uint64_t nid)
{
    uint64_t h = XXH3_64bits_withSeed(&nid, sizeof(nid), 0x7466737769ull);

    return h < FS_FIRST_INO ? h + FS_FIRST_INO : h;
}

/*
 * A file inode's version: the snapshot's own copy when it is the same
 * (an immutable mount: no 80-byte tfs_stat field per inode, and no copy
 * of the version either), else a copy after the struct (vlen bytes).
 */
static struct fs_inode *itable_alloc(struct fs_itable *t, const char *key,
                                     bool is_dir, const struct tfs_stat *st,
                                     const char **stable)
{
    const char *version = !is_dir && st != NULL ? st->version : "";
    const char *sv = NULL;
    struct fs_inode *in;
    size_t vlen;

    *stable = t->keys && !is_dir ? tfs_cache_key_stable(t->keys, key, &sv)
                                 : NULL;
    if (sv != NULL && strcmp(sv, version) == 0) {
        in = tfs_calloc(1, sizeof(*in));
        if (in != NULL)
            in->version = sv;
        return in;
    }
    vlen = strnlen(version, TFS_VERSION_MAX - 1);
    in = tfs_calloc(1, sizeof(*in) + vlen + 1);
    if (in != NULL) {
        memcpy(in->vbuf, version, vlen);
        in->version = in->vbuf;
    }
    return in;
}

static struct fs_inode *itable_new_inode(struct fs_itable *t,
                                        const char *key, bool is_dir,
                                        const struct tfs_stat *st,
                                        struct wb_node *node)
{
    const char *stable;
    struct fs_inode *in = itable_alloc(t, key, is_dir, st, &stable);
    struct wb_attr a;

    if (in == NULL)
        return NULL;
    /* A million inodes of an immutable mount: no million key copies. */
    in->key_borrowed = stable != NULL;
    in->by_key.key = stable ? (char *)stable : tfs_strdup(key);
    if (in->by_key.key == NULL) {
        tfs_free(in);
        return NULL;
    }
    in->is_dir = is_dir;
    in->keyed = true;
    if (!is_dir && st != NULL) {
        in->size = st->size;
        in->mtime_ns = st->mtime_ns;
    }
    if (node != NULL) {
        atomic_init(&in->wf, wb_node_get(node));
        wb_node_attr(node, &a);
        in->st_ino = fs_node_ino(a.nid);
    } else {
        in->st_ino = fs_key_ino(key, is_dir ? NULL : in->version);
    }
    return in;
}

const struct tfs_stat *fs_inode_stat(const struct fs_inode *in,
                                     struct tfs_stat *buf)
{
    size_t vlen = strnlen(in->version, TFS_VERSION_MAX - 1);

    buf->size = in->size;
    buf->mtime_ns = in->mtime_ns;
    memcpy(buf->version, in->version, vlen);
    buf->version[vlen] = '\0';
    return buf;
}

static void itable_free_inode(struct fs_inode *in)
{
    if (in == NULL)
        return;
    wb_node_put(atomic_load(&in->wf));
    if (!in->key_borrowed)
        tfs_free(in->by_key.key);
    tfs_free(in);
}

/* Link in into the key map; -ENOMEM leaves it unkeyed.  t->lock held. */
static int itable_key(struct fs_itable *t, struct fs_inode *in)
{
    int rc = tfs_hmap_insert_str(&t->by_key, &in->by_key);

    in->keyed = rc == 0;
    return rc;
}

/*
 * Link in into both maps (the key map when in->keyed); -ENOMEM leaves it
 * in neither.  Called with t->lock held.
 */
static int itable_link(struct fs_itable *t, struct fs_inode *in)
{
    int rc = tfs_hmap_insert_u64(&t->by_ino, &in->by_ino, in->ino);

    if (rc == 0 && in->keyed && itable_key(t, in) < 0) {
        tfs_hmap_remove(&t->by_ino, &in->by_ino);
        rc = -ENOMEM;
    }
    return rc;
}

/*
 * Take in out of the key map only: its key now names an object of the
 * other kind (a file became a directory or back), but the kernel still
 * holds the old node id until it forgets it.  t->lock held.
 */
static void itable_unkey(struct fs_itable *t, struct fs_inode *in)
{
    tfs_hmap_remove(&t->by_key, &in->by_key.node);
    in->keyed = false;
}

/* Unlink in from both maps.  Called with t->lock held. */
static void itable_unlink(struct fs_itable *t, struct fs_inode *in)
{
    tfs_hmap_remove(&t->by_ino, &in->by_ino);
    if (in->keyed)
        itable_unkey(t, in);
}

static struct fs_inode *itable_of(struct tfs_hnode *n)
{
    return n ? tfs_container_of(n, struct fs_inode, by_ino) : NULL;
}

int fs_itable_init(struct fs_itable *t)
{
    int rc;

    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    rc = tfs_hmap_init(&t->by_ino, ITABLE_MIN_BUCKETS, NULL);
    if (rc == 0)
        rc = tfs_hmap_init(&t->by_key, ITABLE_MIN_BUCKETS, tfs_hstr_eq);
    t->root = itable_new_inode(t, "", true, NULL, NULL);
    t->ctl = itable_new_inode(t, FS_CTL_NAME, false, &(struct tfs_stat){0},
                              NULL);
    t->hint = itable_new_inode(t, FS_HINT_NAME, false,
                               &(struct tfs_stat){0}, NULL);
    if (rc < 0 || t->root == NULL || t->ctl == NULL || t->hint == NULL) {
        fs_itable_cleanup(t);
        return -ENOMEM;
    }
    t->root->ino = FS_ROOT_INO;
    t->root->nlookup = 1;
    t->ctl->ino = FS_CTL_INO;
    t->hint->ino = FS_HINT_INO;
    t->next_ino = FS_FIRST_INO;
    t->uid = getuid();
    t->gid = getgid();
    t->dir_mtime_ns = tfs_wall_ns();
    rc = itable_link(t, t->root);       /* empty maps: cannot fail */
    if (rc < 0)
        fs_itable_cleanup(t);
    return rc;
}

void fs_itable_cleanup(struct fs_itable *t)
{
    struct tfs_hmap_iter it;
    struct fs_inode *in;

    if (tfs_hmap_count(&t->by_ino) == 0)
        itable_free_inode(t->root);     /* init failed before linking */
    tfs_hmap_iter_init(&it, &t->by_ino);
    while ((in = itable_of(tfs_hmap_iter_next(&it))) != NULL)
        itable_free_inode(in);
    itable_free_inode(t->ctl);
    itable_free_inode(t->hint);
    tfs_hmap_cleanup(&t->by_ino);
    tfs_hmap_cleanup(&t->by_key);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof(*t));
}

size_t fs_itable_count(struct fs_itable *t)
{
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = tfs_hmap_count(&t->by_ino);
    pthread_mutex_unlock(&t->lock);
    return n;
}

/* The inode with node id ino, or NULL.  t->lock held. */
static struct fs_inode *itable_find_ino(struct fs_itable *t, uint64_t ino)
{
    return itable_of(tfs_hmap_find_u64(&t->by_ino, ino));
}

/* The inode of key, or NULL.  t->lock held. */
static struct fs_inode *itable_find_key(struct fs_itable *t, const char *key)
{
    struct tfs_hstr *h = tfs_hmap_find_str(&t->by_key, key);

    return h ? tfs_container_of(h, struct fs_inode, by_key) : NULL;
}

struct fs_inode *fs_inode_get(struct fs_itable *t, uint64_t ino)
{
    struct fs_inode *in;

    if (ino == FS_CTL_INO)
        return t->ctl;
    if (ino == FS_HINT_INO)
        return t->hint;
    pthread_mutex_lock(&t->lock);
    in = itable_find_ino(t, ino);
    pthread_mutex_unlock(&t->lock);
    return in;
}

/* Whether file inode in stands for the staged file node, or (node
   NULL) for version st of the object.  t->lock held. */
static bool itable_same_file(const struct fs_inode *in,
                             const struct tfs_stat *st,
                             struct wb_node *node)
{
    struct wb_node *wf = atomic_load(&in->wf);

    if (node != NULL)
        return wf == node;
    if (wf != NULL)
        return wb_node_is_version(wf, st->version);
    return strcmp(in->version, st->version) == 0;
}

/*
 * The inode of key if it is of the kind is_dir and, for a file, of the
 * version st (or the staged file node).  One that is not is taken out of
 * the key map: the name now belongs to a new inode, and the old one
 * lives on for the handles and lookups the kernel still has.  t->lock
 * held.
 */
static struct fs_inode *itable_find_match(struct fs_itable *t,
                                          const char *key, bool is_dir,
                                          const struct tfs_stat *st,
                                          struct wb_node *node)
{
    struct fs_inode *in = itable_find_key(t, key);

    if (in != NULL && (in->is_dir != is_dir ||
                       (!is_dir && !itable_same_file(in, st, node)))) {
        itable_unkey(t, in);
        in = NULL;
    }
    return in;
}

int fs_inode_lookup(struct fs_itable *t, const char *key, bool is_dir,
                    const struct tfs_stat *st, struct wb_node *node,
                    struct fs_inode **out)
{
    struct fs_inode *fresh = NULL;
    struct fs_inode *in;
    int rc = 0;

    pthread_mutex_lock(&t->lock);
    in = itable_find_match(t, key, is_dir, st, node);
    if (in == NULL) {
        /* Allocate outside the lock, then look again. */
        pthread_mutex_unlock(&t->lock);
        fresh = itable_new_inode(t, key, is_dir, st, node);
        if (fresh == NULL)
            return -ENOMEM;
        pthread_mutex_lock(&t->lock);
        in = itable_find_match(t, key, is_dir, st, node);
    }
    if (in == NULL) {
        fresh->ino = t->next_ino++;
        rc = itable_link(t, fresh);
        if (rc == 0) {
            in = fresh;
            fresh = NULL;
        }
    }
    if (in != NULL)
        in->nlookup++;
    pthread_mutex_unlock(&t->lock);
    itable_free_inode(fresh);
    if (rc < 0)
        return rc;
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

void fs_inode_key(struct fs_itable *t, const struct fs_inode *in,
                  char *buf)
{
    size_t len;

    pthread_mutex_lock(&t->lock);
    len = strnlen(in->by_key.key, FS_KEY_MAX + 1);
    memcpy(buf, in->by_key.key, len);   /* every lookup: no snprintf */
    buf[len] = '\0';
    pthread_mutex_unlock(&t->lock);
}

struct wb_node *fs_inode_node(struct fs_itable *t, struct fs_inode *in)
{
    struct wb_node *n = atomic_load(&in->wf);

    return n ? wb_node_get(n) : NULL;   /* the inode keeps it alive */
}

void fs_inode_link(struct fs_itable *t, struct fs_inode *in,
                   struct wb_node *node)
{
    struct wb_node *none = NULL;

    if (in->is_dir || atomic_load(&in->wf) == node)
        return;
    wb_node_get(node);
    if (!atomic_compare_exchange_strong(&in->wf, &none, node))
        wb_node_put(node);              /* it had one already */
}

void fs_itable_unkey(struct fs_itable *t, const char *key)
{
    struct fs_inode *in;

    pthread_mutex_lock(&t->lock);
    in = itable_find_key(t, key);
    if (in != NULL)
        itable_unkey(t, in);
    pthread_mutex_unlock(&t->lock);
}

/* Give in the key to (unkeyed before); on allocation failure it stays
   unkeyed, and the next lookup makes a new inode.  t->lock held. */
static void itable_rekey(struct fs_itable *t, struct fs_inode *in,
                         const char *to)
{
    char *key = tfs_strdup(to);

    if (key == NULL)
        return;
    if (!in->key_borrowed)
        tfs_free(in->by_key.key);
    in->key_borrowed = false;
    in->by_key.key = key;
    (void)itable_key(t, in);            /* -ENOMEM: stays unkeyed */
}

/* Unkey every inode whose key starts with prefix.  t->lock held. */
static void itable_unkey_prefix(struct fs_itable *t, const char *prefix)
{
    size_t len = strlen(prefix);
    struct tfs_hmap_iter it;
    struct fs_inode *in;

    tfs_hmap_iter_init(&it, &t->by_ino);
    while ((in = itable_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (in->keyed && strncmp(in->by_key.key, prefix, len) == 0)
            itable_unkey(t, in);
    }
}

/* Move every inode under from/ to to/.  t->lock held. */
static void itable_rename_dir(struct fs_itable *t, const char *from,
                              const char *to)
{
    char fp[FS_KEY_MAX + 2];
    char tp[FS_KEY_MAX + 2];
    char key[2 * FS_KEY_MAX + 4];
    struct tfs_hmap_iter it;
    struct fs_inode *in;
    size_t flen;

    snprintf(fp, sizeof(fp), "%s/", from);
    snprintf(tp, sizeof(tp), "%s/", to);
    flen = strlen(fp);
    itable_unkey_prefix(t, tp);
    /* Walks by_ino: the key map changes under the walk. */
    tfs_hmap_iter_init(&it, &t->by_ino);
    while ((in = itable_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (!in->keyed || strncmp(in->by_key.key, fp, flen) != 0)
            continue;
        snprintf(key, sizeof(key), "%s%s", tp, in->by_key.key + flen);
        itable_unkey(t, in);
        if (strlen(key) <= FS_KEY_MAX + 1)
            itable_rekey(t, in, key);
    }
}

void fs_itable_rename(struct fs_itable *t, const char *from, const char *to,
                      bool is_dir)
{
    struct fs_inode *in;

    pthread_mutex_lock(&t->lock);
    if (is_dir) {
        itable_rename_dir(t, from, to);
    } else {
        in = itable_find_key(t, to);
        if (in != NULL)
            itable_unkey(t, in);
        in = itable_find_key(t, from);
        if (in != NULL) {
            itable_unkey(t, in);
            itable_rekey(t, in, to);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

void fs_attr_fill(const struct fs_itable *t, const struct fs_inode *in,
                  struct stat *out)
{
    int64_t mtime_ns = in->is_dir ? t->dir_mtime_ns : in->mtime_ns;
    uint64_t size = in->size;
    struct wb_node *wf = atomic_load(&in->wf);
    struct wb_attr a;

    if (wf != NULL) {                   /* set once, never cleared */
        wb_node_attr(wf, &a);
        mtime_ns = a.mtime_ns;
        size = a.size;
    }
    if (mtime_ns < 0)
        mtime_ns = 0;

    memset(out, 0, sizeof(*out));
    if (in == t->ctl || in == t->hint)
        mtime_ns = tfs_wall_ns();
    out->st_ino = in->st_ino;
    out->st_uid = t->uid;
    out->st_gid = t->gid;
    out->st_blksize = FS_MAX_READ;
    out->st_mtim.tv_sec = mtime_ns / 1000000000;
    out->st_mtim.tv_nsec = mtime_ns % 1000000000;
    out->st_atim = out->st_mtim;
    out->st_ctim = out->st_mtim;
    if (in->is_dir) {
        out->st_mode = S_IFDIR | (t->writable ? 0755 : 0555);
        out->st_nlink = 2;
        return;
    }
    out->st_mode = S_IFREG | (in == t->hint ? 0666
                              : t->writable && in != t->ctl ? 0644 : 0444);
    out->st_nlink = 1;
    out->st_size = (off_t)size;
    out->st_blocks = (blkcnt_t)((size + 511) / 512);
}
