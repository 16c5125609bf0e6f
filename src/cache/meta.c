/* SPDX-License-Identifier: MIT */
/*
 * The metadata cache: stats (positive and negative) and directory
 * listings, each trusted for meta_ttl, so a mount does not send a HEAD
 * per open or a LIST per `ls`.
 *
 * In immutable mode (datasets), the whole listing of the store is read
 * once with one recursive LIST walk, kept as a sorted array, and saved in
 * CACHE_DIR/meta/<store>.snap; a later mount loads that file instead of
 * listing again, so a million-object dataset mounts in seconds and every
 * stat, lookup and readdir is answered from memory.  Remove the file (or
 * mount without --immutable) to see changes.
 *
 * With a manifest (cfg.manifest, manifest.c), the snapshot comes from that
 * file instead, read once at open so that a bad one fails the mount, and
 * the store is never listed.
 *
 * Snapshot format (little-endian): "TFSSNAP1", u64 count, then per object
 * u16 key length, key, u64 size, i64 mtime_ns, u8 version length,
 * version; then the XXH3-64 of every byte before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/cache_int.h"
#include "cache/manifest.h"
#include "common/bytes.h"
#include "common/hmap.h"
#include "tierfs/log.h"

#define META_MIN_BUCKETS 4096u         /* each map's first bucket array */
#define META_MAX_STATS 1000000u         /* then the stat map is emptied */
#define SNAP_MAGIC "TFSSNAP1"
/*
 * How long a lookup whose entry expired waits for the store before it
 * answers from the expired entry (stale-if-error); the store's answer
 * still lands when it comes.
 */
#define META_STALE_NS (1000 * 1000000ull)
#define META_MAX_REVALS 256u            /* threads; past it, wait inline */

enum meta_kind {
    META_NONE,                          /* negative: no such key */
    META_FILE,
    META_DIR,
};

struct meta_ent {
    struct tfs_hstr  h;                 /* in m->stats; h.key owned */
    int              kind;              /* meta_kind */
    struct tfs_stat  st;                /* META_FILE only */
    uint64_t         expires_ns;
};

struct tfs_dir {
    struct tfs_hstr   h;                /* in m->dirs; h.key: its path,
                                           owned; meta lock */
    atomic_uint       refs;
    uint64_t          expires_ns;
    struct tfs_dirent *ents;            /* owned, sorted by name */
    size_t            n;
    char             *names;            /* owned blob the names point in */
};

/* One revalidation of an expired entry, in flight on its own thread. */
struct meta_reval {
    struct meta_reval *next;            /* meta revals list */
    char              *key;             /* owned */
    unsigned           refs;            /* thread + waiters; meta lock */
    bool               done;            /* meta lock */
    bool               late;            /* a waiter gave up; meta lock */
    int                rc;              /* the store's answer, once done */
    bool               is_dir;
    struct tfs_stat    st;
    struct tfs_cache  *c;
};

/*
 * One object of the snapshot: 24 bytes, its key and version in the
 * names blob ("key\0version\0"), not a struct tfs_stat (96 bytes with
 * its fixed version field) per object (docs/performance-meta.md).
 */
struct snap_ent {
    char           *key;                /* points into snap names; the
                                           version follows its NUL */
    uint64_t        size;
    int64_t         mtime_ns;
};

struct tfs_meta {
    pthread_mutex_t   lock;
    struct tfs_hmap   stats;            /* meta_ent by key; lock */
    struct tfs_hmap   dirs;             /* tfs_dir by path; lock */
    struct meta_reval *revals;          /* in flight; protected by lock */
    unsigned          n_reval_threads;  /* protected by lock */
    pthread_cond_t    reval_cond;       /* a reval done; CLOCK_MONOTONIC */
    /* immutable mode */
    pthread_mutex_t   snap_lock;        /* loads the snapshot once */
    atomic_bool       snap_ready;       /* set once, under snap_lock;
                                           read without it (the fast
                                           path of every lookup) */
    struct snap_ent  *snap;             /* sorted by key */
    size_t            n_snap;
    struct snap_chunk *snap_names;      /* owned; the keys point in */
    char             *snap_path;        /* owned, or NULL */
    unsigned          mode;             /* cfg.cache_mode */
};

/* ---- the stat table ---- */

static struct meta_ent *meta_ent_of(struct tfs_hstr *h)
{
    return h ? tfs_container_of(h, struct meta_ent, h) : NULL;
}

static void meta_ent_free(struct meta_ent *e)
{
    tfs_free(e->h.key);
    tfs_free(e);
}

static void meta_clear_stats(struct tfs_meta *m)
{
    struct tfs_hmap_iter it;
    struct meta_ent *e;

    tfs_hmap_iter_init(&it, &m->stats);
    while ((e = meta_ent_of(tfs_hstr_of(tfs_hmap_iter_next(&it)))) != NULL) {
        tfs_hmap_remove(&m->stats, &e->h.node);
        meta_ent_free(e);
    }
}

/*
 * The entry for key (kind and stat copied out), under m->lock: only a
 * fresh one, or also an expired one when stale_ok (the store is down).
 */
static bool meta_get(struct tfs_meta *m, const char *key, int *kind,
                     struct tfs_stat *st, bool stale_ok)
{
    struct meta_ent *e = meta_ent_of(tfs_hmap_find_str(&m->stats, key));

    if (e == NULL || (e->expires_ns < tfs_now_ns() && !stale_ok))
        return false;
    *kind = e->kind;
    if (e->kind == META_FILE && st != NULL)
        *st = e->st;
    return true;
}

/* Record what key is, under m->lock; out of memory just skips it. */
static void meta_put(struct tfs_meta *m, const char *key, int kind,
                     const struct tfs_stat *st, uint64_t ttl_ns)
{
    uint64_t h = tfs_hash_str(key);
    struct meta_ent *e = meta_ent_of(tfs_hstr_of(tfs_hmap_find(&m->stats, h,
                                                              key)));

    if (e == NULL) {
        if (tfs_hmap_count(&m->stats) >= META_MAX_STATS)
            meta_clear_stats(m);
        e = tfs_calloc(1, sizeof(*e));
        if (e == NULL || (e->h.key = tfs_strdup(key)) == NULL ||
            tfs_hmap_insert(&m->stats, &e->h.node, h) < 0) {
            if (e != NULL)
                tfs_free(e->h.key);
            tfs_free(e);
            return;
        }
    }
    e->kind = kind;
    if (st != NULL)
        e->st = *st;
    e->expires_ns = tfs_now_ns() + ttl_ns;
}

/* ---- directories ---- */

static struct tfs_dir *dir_of(struct tfs_hstr *h)
{
    return h ? tfs_container_of(h, struct tfs_dir, h) : NULL;
}

static void dir_free(struct tfs_dir *d)
{
    tfs_free(d->h.key);
    tfs_free(d->ents);
    tfs_free(d->names);
    tfs_free(d);
}

void tfs_dir_put(struct tfs_dir *d)
{
    if (d != NULL && atomic_fetch_sub(&d->refs, 1) == 1)
        dir_free(d);
}

size_t tfs_dir_count(const struct tfs_dir *d)
{
    return d->n;
}

const struct tfs_dirent *tfs_dir_entry(const struct tfs_dir *d, size_t i)
{
    return i < d->n ? &d->ents[i] : NULL;
}

const struct tfs_dirent *tfs_dir_find(const struct tfs_dir *d,
                                      const char *name)
{
    size_t lo = 0;
    size_t hi = d->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(d->ents[mid].name, name);
        if (cmp == 0)
            return &d->ents[mid];
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Entries being collected for a directory. */
struct dir_build {
    struct tfs_buf names;               /* NUL-separated */
    struct tfs_dirent *ents;            /* name = offset until finished */
    size_t n;
    size_t cap;
};

static int dir_build_add(struct dir_build *b, const char *name, size_t len,
                         bool is_dir, const struct tfs_stat *st)
{
    struct tfs_dirent *e;
    size_t off = b->names.len;

    if (len == 0)
        return 0;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        e = tfs_realloc(b->ents, cap * sizeof(*e));
        if (e == NULL)
            return -ENOMEM;
        b->ents = e;
        b->cap = cap;
    }
    if (tfs_buf_append(&b->names, name, len) < 0 ||
        tfs_buf_append(&b->names, "", 1) < 0)
        return -ENOMEM;
    e = &b->ents[b->n++];
    memset(e, 0, sizeof(*e));
    e->name = (const char *)(uintptr_t)off;
    e->is_dir = is_dir;
    if (st != NULL)
        e->st = *st;
    return 0;
}

static int dirent_cmp(const void *a, const void *b)
{
    const struct tfs_dirent *x = a;
    const struct tfs_dirent *y = b;
    int c = strcmp(x->name, y->name);

    /* A name that is both a file and a prefix: the directory first. */
    return c != 0 ? c : (int)y->is_dir - (int)x->is_dir;
}

/* Turn the collected entries into a tfs_dir (one reference). */
static int dir_build_finish(struct dir_build *b, const char *path,
                            struct tfs_dir **out)
{
    struct tfs_dir *d = tfs_calloc(1, sizeof(*d));
    size_t w = 0;

    if (d == NULL || (d->h.key = tfs_strdup(path)) == NULL) {
        tfs_free(d);
        return -ENOMEM;
    }
    d->names = tfs_buf_steal(&b->names);
    for (size_t i = 0; i < b->n; i++)
        b->ents[i].name = d->names + (uintptr_t)b->ents[i].name;
    if (b->n > 1)
        qsort(b->ents, b->n, sizeof(*b->ents), dirent_cmp);
    for (size_t i = 0; i < b->n; i++) {
        if (w > 0 && strcmp(b->ents[w - 1].name, b->ents[i].name) == 0)
            continue;                   /* file shadowed by a prefix */
        b->ents[w++] = b->ents[i];
    }
    d->ents = b->ents;
    d->n = w;
    b->ents = NULL;
    atomic_init(&d->refs, 1);
    *out = d;
    return 0;
}

static void dir_build_cleanup(struct dir_build *b)
{
    tfs_buf_cleanup(&b->names);
    tfs_free(b->ents);
}

/* ---- the immutable snapshot ---- */

static const char *snap_version(const struct snap_ent *e)
{
    return e->key + strlen(e->key) + 1;
}

/* e's stat, as the rest of the cache wants it. */
static void snap_stat(const struct snap_ent *e, struct tfs_stat *st)
{
    const char *v = snap_version(e);
    size_t vlen = strnlen(v, TFS_VERSION_MAX - 1);

    st->size = e->size;
    st->mtime_ns = e->mtime_ns;
    memcpy(st->version, v, vlen);
    st->version[vlen] = '\0';
}

static int snap_cmp(const void *a, const void *b)
{
    return strcmp(((const struct snap_ent *)a)->key,
                  ((const struct snap_ent *)b)->key);
}

/* Index of the first entry whose key is >= key. */
static size_t snap_lower(const struct tfs_meta *m, const char *key)
{
    size_t lo = 0;
    size_t hi = m->n_snap;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->snap[mid].key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * The snapshot's keys and versions, "key\0version\0" each, in chunks
 * that never move: no copy as they grow, and no freed smaller copies
 * left in the heap (which a growing buffer leaves, and which count in
 * the daemon's RSS).
 */
#define SNAP_CHUNK (1u << 20)           /* bytes of names per chunk */

struct snap_chunk {
    struct snap_chunk *next;            /* older chunk */
    size_t             used;            /* bytes of p */
    char               p[];             /* SNAP_CHUNK bytes */
};

static void snap_chunks_free(struct snap_chunk *ch)
{
    while (ch != NULL) {
        struct snap_chunk *next = ch->next;
        tfs_free(ch);
        ch = next;
    }
}

struct snap_collect {
    struct snap_chunk *names;           /* newest first */
    struct snap_ent   *ents;
    size_t             n;
    size_t             cap;
};

/* key and version copied into sc's names; NULL when out of memory. */
static char *snap_store(struct snap_collect *sc, const char *key,
                        const char *version)
{
    size_t kl = strlen(key) + 1;
    size_t vl = strlen(version) + 1;
    struct snap_chunk *ch = sc->names;
    char *p;

    if (ch == NULL || SNAP_CHUNK - ch->used < kl + vl) {
        ch = tfs_malloc(sizeof(*ch) + SNAP_CHUNK);  /* kl + vl < 2 KiB */
        if (ch == NULL)
            return NULL;
        ch->next = sc->names;
        ch->used = 0;
        sc->names = ch;
    }
    p = ch->p + ch->used;
    memcpy(p, key, kl);
    memcpy(p + kl, version, vl);
    ch->used += kl + vl;
    return p;
}

static int snap_add(struct snap_collect *sc, const char *key,
                    const struct tfs_stat *st)
{
    char *name;

    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 1024;
        struct snap_ent *e = tfs_realloc(sc->ents, cap * sizeof(*e));
        if (e == NULL)
            return -ENOMEM;
        sc->ents = e;
        sc->cap = cap;
    }
    name = snap_store(sc, key, st->version);
    if (name == NULL)
        return -ENOMEM;
    sc->ents[sc->n].key = name;
    sc->ents[sc->n].size = st->size;
    sc->ents[sc->n].mtime_ns = st->mtime_ns;
    sc->n++;
    return 0;
}

static int snap_list_page(void *arg, const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = snap_add(arg, pg->entries[i].key, &pg->entries[i].st);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Make sc the snapshot; sorted: its keys are in order already. */
static void snap_install(struct tfs_meta *m, struct snap_collect *sc,
                         bool sorted)
{
    m->snap_names = sc->names;
    sc->names = NULL;
    if (sc->n > 1 && !sorted)
        qsort(sc->ents, sc->n, sizeof(*sc->ents), snap_cmp);
    m->snap = sc->ents;
    m->n_snap = sc->n;
    sc->ents = NULL;
}

static void put_le(struct tfs_buf *b, uint64_t v, unsigned n)
{
    uint8_t p[8];

    tfs_put_le(p, v, n);
    tfs_buf_append(b, p, n);            /* errors stick in b */
}

/* Encode the snapshot and write it atomically to m->snap_path. */
static int snap_save(struct tfs_meta *m)
{
    struct tfs_buf b;
    char tmp[4200];
    int rc;
    int fd;

    tfs_buf_init(&b, 0);
    tfs_buf_append(&b, SNAP_MAGIC, 8);
    put_le(&b, m->n_snap, 8);
    for (size_t i = 0; i < m->n_snap && tfs_buf_error(&b) == 0; i++) {
        const struct snap_ent *e = &m->snap[i];
        size_t vlen = strlen(snap_version(e));
        put_le(&b, strlen(e->key), 2);
        tfs_buf_puts(&b, e->key);
        put_le(&b, e->size, 8);
        put_le(&b, (uint64_t)e->mtime_ns, 8);
        put_le(&b, vlen, 1);
        tfs_buf_append(&b, snap_version(e), vlen);
    }
    rc = tfs_buf_error(&b);             /* never write a partial image */
    if (rc == 0)
        put_le(&b, XXH3_64bits(b.p, b.len), 8);
    rc = tfs_buf_error(&b);
    snprintf(tmp, sizeof(tmp), "%s.tmp-%d", m->snap_path, (int)getpid());
    if (rc == 0)
        (void)unlink(tmp);              /* a stale one, never followed */
    fd = rc == 0 ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                 O_CLOEXEC, TFS_CACHE_FILE_MODE(m->mode))
                 : -1;
    if (fd >= 0 && (m->mode & 070))
        (void)fchmod(fd, TFS_CACHE_FILE_MODE(m->mode));  /* past umask */
    if (fd >= 0) {
        ssize_t n = write(fd, b.p, b.len);
        rc = n == (ssize_t)b.len && fsync(fd) == 0 ? 0 : -EIO;
        close(fd);
        if (rc == 0 && rename(tmp, m->snap_path) < 0)
            rc = -errno;
        if (rc < 0)
            unlink(tmp);
    } else if (rc == 0) {
        rc = -errno;
    }
    tfs_buf_cleanup(&b);
    return rc;
}

/* Decode a snapshot file body; TFS_EFORMAT when anything is off. */
static int snap_decode(const uint8_t *p, size_t len, struct snap_collect *sc)
{
    const uint8_t *end = p + len - 8;
    uint64_t count;

    if (len < 24 || memcmp(p, SNAP_MAGIC, 8) != 0 ||
        tfs_get_le64(end) != XXH3_64bits(p, len - 8))
        return TFS_EFORMAT;
    count = tfs_get_le64(p + 8);
    p += 16;
    if (count > (uint64_t)(end - p) / 19)  /* an entry is 19+ bytes */
        return TFS_EFORMAT;
    if (count > 0) {                    /* exactly: no doubling */
        sc->ents = tfs_malloc((size_t)count * sizeof(*sc->ents));
        if (sc->ents == NULL)
            return -ENOMEM;
        sc->cap = (size_t)count;
    }
    for (uint64_t i = 0; i < count; i++) {
        struct tfs_stat st;
        char key[1025];
        size_t klen;
        size_t vlen;

        if (end - p < 2 || (klen = tfs_get_le16(p)) > 1024 ||
            (size_t)(end - p) < 2 + klen + 17)
            return TFS_EFORMAT;
        memcpy(key, p + 2, klen);
        key[klen] = '\0';
        p += 2 + klen;
        st.size = tfs_get_le64(p);
        st.mtime_ns = (int64_t)tfs_get_le64(p + 8);
        vlen = p[16];
        p += 17;
        if (vlen >= TFS_VERSION_MAX || (size_t)(end - p) < vlen)
            return TFS_EFORMAT;
        memcpy(st.version, p, vlen);
        st.version[vlen] = '\0';
        p += vlen;
        if (snap_add(sc, key, &st) < 0)
            return -ENOMEM;
    }
    return p == end ? 0 : TFS_EFORMAT;
}

static int snap_load_file(struct tfs_meta *m, struct snap_collect *sc)
{
    struct stat sb;
    uint8_t *p;
    int fd = open(m->snap_path, O_RDONLY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &sb) < 0 || sb.st_size < 24) {
        close(fd);
        return TFS_EFORMAT;
    }
    p = tfs_malloc((size_t)sb.st_size);
    rc = p == NULL ? -ENOMEM
         : read(fd, p, (size_t)sb.st_size) == sb.st_size
             ? snap_decode(p, (size_t)sb.st_size, sc)
             : -EIO;
    tfs_free(p);
    close(fd);
    return rc;
}

/* Load the snapshot: from its file, else by listing the store. */
static int snap_ensure(struct tfs_cache *c)
{
    struct tfs_meta *m = c->meta;
    struct snap_collect sc;
    int rc = 0;

    if (atomic_load_explicit(&m->snap_ready, memory_order_acquire))
        return 0;                       /* no lock: 8 threads stat */
    pthread_mutex_lock(&m->snap_lock);
    if (atomic_load(&m->snap_ready))
        goto out;
    memset(&sc, 0, sizeof(sc));
    rc = m->snap_path ? snap_load_file(m, &sc) : -ENOENT;
    if (rc < 0) {
        if (rc != -ENOENT)
            tfs_log(TFS_LOG_WARNING, "cache: listing snapshot %s is "
                    "unusable (%s); listing the store again", m->snap_path,
                    tfs_strerror(rc));
        snap_chunks_free(sc.names);
        sc.names = NULL;
        sc.n = 0;
        TFS_COUNT(&c->ctr, meta_misses, 1);
        rc = tfs_store_list_all(c->st, "", NULL, snap_list_page, &sc);
        if (rc == 0) {
            snap_install(m, &sc, false);
            if (m->snap_path != NULL && snap_save(m) < 0)
                tfs_log(TFS_LOG_WARNING, "cache: cannot save the listing "
                        "snapshot %s", m->snap_path);
        }
    } else {
        snap_install(m, &sc, false);
    }
    atomic_store_explicit(&m->snap_ready, rc == 0, memory_order_release);
    tfs_free(sc.ents);
    snap_chunks_free(sc.names);
out:
    pthread_mutex_unlock(&m->snap_lock);
    return rc;
}

/* ---- the manifest instead of a listing ---- */

struct manifest_ctx {
    struct snap_collect *sc;
    bool                 sorted;        /* every key after the last */
    const char          *dup;           /* second pass: the key to find */
    uint64_t             lines[2];      /* second pass: where it is */
};

static int manifest_add(void *arg, const char *key,
                        const struct tfs_stat *st, uint64_t line_no)
{
    struct manifest_ctx *x = arg;
    struct snap_collect *sc = x->sc;

    if (sc->n > 0 && x->sorted) {
        const char *last = sc->ents[sc->n - 1].key;
        int cmp = strcmp(last, key);
        if (cmp == 0)
            return tfs_err(TFS_EFORMAT, "duplicate key '%s' (also on "
                           "line %llu)", key,
                           (unsigned long long)line_no - 1);
        x->sorted = cmp < 0;
    }
    return snap_add(sc, key, st);
}

/* Second pass of a manifest out of order: the lines of x->dup. */
static int manifest_find(void *arg, const char *key,
                         const struct tfs_stat *st, uint64_t line_no)
{
    struct manifest_ctx *x = arg;

    (void)st;
    if (strcmp(key, x->dup) == 0)
        x->lines[x->lines[0] != 0] = line_no;
    return x->lines[1] != 0 ? 1 : 0;    /* both found: stop */
}

/* A key twice in the (sorted) snapshot: TFS_EFORMAT naming its lines. */
static int manifest_dups(struct tfs_meta *m, const char *path)
{
    struct manifest_ctx x = {0};

    for (size_t i = 1; i < m->n_snap; i++) {
        if (strcmp(m->snap[i - 1].key, m->snap[i].key) == 0) {
            x.dup = m->snap[i].key;
            break;
        }
    }
    if (x.dup == NULL)
        return 0;
    (void)tfs_manifest_read(path, NULL, manifest_find, &x);
    return tfs_err(TFS_EFORMAT, "manifest %s line %llu: duplicate key '%s' "
                   "(also on line %llu)", path,
                   (unsigned long long)x.lines[1], x.dup,
                   (unsigned long long)x.lines[0]);
}

/* Install the manifest at cfg.manifest as the snapshot; the mount's
   identity must be the one it was taken of. */
static int manifest_load(struct tfs_cache *c)
{
    struct tfs_meta *m = c->meta;
    struct snap_collect sc;
    struct manifest_ctx x = {.sc = &sc, .sorted = true};
    const char *path = c->cfg.manifest;
    int rc;

    memset(&sc, 0, sizeof(sc));
    rc = tfs_manifest_read(path, tfs_store_identity(c->st), manifest_add,
                           &x);
    if (rc == 0) {
        snap_install(m, &sc, x.sorted);
        rc = x.sorted ? 0 : manifest_dups(m, path);
    }
    tfs_free(sc.ents);
    snap_chunks_free(sc.names);
    if (rc < 0)
        return rc;
    atomic_store(&m->snap_ready, true);
    tfs_log(TFS_LOG_INFO, "cache: %zu objects from the manifest %s",
            m->n_snap, path);
    return 0;
}

/*
 * The file this thread's last snap_lookup found, as (snapshot, index):
 * the mount asks tfs_cache_key_stable for the same key right after each
 * lookup, which then needs no second binary search.  An index, checked
 * against the snapshot it is used on, never a pointer that could
 * outlive its cache.
 */
static _Thread_local const struct tfs_meta *snap_last_m;
static _Thread_local size_t snap_last_i;

/* The index of file key in the snapshot, or m->n_snap. */
static size_t snap_find(const struct tfs_meta *m, const char *key)
{
    size_t i = snap_last_i;

    if (snap_last_m == m && i < m->n_snap && strcmp(m->snap[i].key, key) == 0)
        return i;
    i = snap_lower(m, key);
    return i < m->n_snap && strcmp(m->snap[i].key, key) == 0 ? i : m->n_snap;
}

/* What key is, from the snapshot. */
static int snap_lookup(struct tfs_meta *m, const char *key, bool *is_dir,
                       struct tfs_stat *st)
{
    size_t i = snap_lower(m, key);
    size_t klen = strlen(key);

    *is_dir = false;
    if (i < m->n_snap && strcmp(m->snap[i].key, key) == 0) {
        if (st != NULL)
            snap_stat(&m->snap[i], st);
        snap_last_m = m;
        snap_last_i = i;
        return 0;
    }
    /* A directory: some key starts with key + "/". */
    for (; i < m->n_snap && strncmp(m->snap[i].key, key, klen) == 0; i++) {
        if (m->snap[i].key[klen] == '/') {
            *is_dir = true;
            return 0;
        }
        if ((unsigned char)m->snap[i].key[klen] > '/')
            break;
    }
    return tfs_err(-ENOENT, "no such key '%s'", key);
}

/* Build the directory dir ("" or "a/b/") from the snapshot. */
static int snap_dir(struct tfs_meta *m, const char *dir,
                    struct dir_build *b)
{
    size_t dlen = strlen(dir);
    const char *last_sub = NULL;
    size_t last_len = 0;
    int rc = 0;

    for (size_t i = snap_lower(m, dir);
         i < m->n_snap && rc == 0 && strncmp(m->snap[i].key, dir, dlen) == 0;
         i++) {
        const char *rest = m->snap[i].key + dlen;
        const char *slash = strchr(rest, '/');
        if (slash == NULL) {
            struct tfs_stat st;
            snap_stat(&m->snap[i], &st);
            rc = dir_build_add(b, rest, strlen(rest), false, &st);
            continue;
        }
        if (last_sub != NULL && (size_t)(slash - rest) == last_len &&
            strncmp(last_sub, rest, last_len) == 0)
            continue;
        last_sub = rest;
        last_len = (size_t)(slash - rest);
        rc = dir_build_add(b, rest, last_len, true, NULL);
    }
    return rc;
}

/* ---- listing from the store ---- */

struct list_ctx {
    struct tfs_cache *c;
    struct dir_build *b;
    size_t            dlen;
};

static int list_page(void *arg, const struct tfs_list_page *pg)
{
    struct list_ctx *x = arg;
    int rc = 0;

    pthread_mutex_lock(&x->c->meta->lock);
    for (size_t i = 0; i < pg->n_entries; i++)
        meta_put(x->c->meta, pg->entries[i].key, META_FILE,
                 &pg->entries[i].st, x->c->cfg.meta_ttl_ns);
    pthread_mutex_unlock(&x->c->meta->lock);
    for (size_t i = 0; i < pg->n_entries && rc == 0; i++) {
        const char *name = pg->entries[i].key + x->dlen;
        rc = dir_build_add(x->b, name, strlen(name), false,
                           &pg->entries[i].st);
    }
    for (size_t i = 0; i < pg->n_prefixes && rc == 0; i++) {
        const char *name = pg->prefixes[i] + x->dlen;
        rc = dir_build_add(x->b, name, strlen(name) - 1, true, NULL);
    }
    return rc;
}

/* ---- public metadata API ---- */

static struct tfs_dir *meta_dir_cached(struct tfs_meta *m, const char *dir,
                                       bool stale_ok)
{
    struct tfs_dir *d;

    pthread_mutex_lock(&m->lock);
    d = dir_of(tfs_hmap_find_str(&m->dirs, dir));
    if (d != NULL && (stale_ok || d->expires_ns >= tfs_now_ns()))
        atomic_fetch_add(&d->refs, 1);
    else
        d = NULL;
    pthread_mutex_unlock(&m->lock);
    return d;
}

static struct tfs_dir *meta_take_dir(struct tfs_meta *m, const char *dir);

/*
 * Put d in the table (replacing an older listing) with a reference of
 * the table's; out of memory leaves it out (the next opendir lists
 * again).
 */
static void meta_dir_insert(struct tfs_meta *m, struct tfs_dir *d)
{
    struct tfs_dir *old;

    pthread_mutex_lock(&m->lock);
    old = meta_take_dir(m, d->h.key);
    if (tfs_hmap_insert_str(&m->dirs, &d->h) == 0)
        atomic_fetch_add(&d->refs, 1);
    pthread_mutex_unlock(&m->lock);
    tfs_dir_put(old);
}

int tfs_cache_opendir(struct tfs_cache *c, const char *dir,
                      struct tfs_dir **out)
{
    struct dir_build b = {0};
    struct tfs_dir *d = meta_dir_cached(c->meta, dir, false);
    int rc;

    if (d != NULL) {
        TFS_COUNT(&c->ctr, meta_hits, 1);
        *out = d;
        return 0;
    }
    tfs_buf_init(&b.names, 0);
    if (c->cfg.immutable) {
        rc = snap_ensure(c);
        if (rc == 0)
            rc = snap_dir(c->meta, dir, &b);
    } else {
        struct list_ctx x = {c, &b, strlen(dir)};
        TFS_COUNT(&c->ctr, meta_misses, 1);
        rc = tfs_store_list_all(c->st, dir, "/", list_page, &x);
    }
    if (rc == 0 && b.n == 0 && dir[0] != '\0')
        rc = tfs_err(-ENOENT, "no such directory '%s'", dir);
    if (rc == 0)
        rc = dir_build_finish(&b, dir, &d);
    dir_build_cleanup(&b);
    if (tfs_err_is_retryable(rc) &&
        (d = meta_dir_cached(c->meta, dir, true)) != NULL) {
        tfs_log(TFS_LOG_INFO, "cache: store unreachable (%s); using the "
                "expired listing of '%s'", tfs_strerror(rc), dir);
        *out = d;
        return 0;
    }
    if (rc < 0)
        return rc;
    /*
     * An immutable listing is not kept: the snapshot already holds it,
     * cutting it out again costs less than a second copy of every
     * entry's stat (docs/performance-meta.md), and the kernel keeps the
     * listing it was given (cache_readdir).
     */
    d->expires_ns = c->cfg.immutable ? UINT64_MAX
                                     : tfs_now_ns() + c->cfg.meta_ttl_ns;
    if (!c->cfg.immutable)
        meta_dir_insert(c->meta, d);
    *out = d;
    return 0;
}

int tfs_cache_stat(struct tfs_cache *c, const char *key,
                   struct tfs_stat *out)
{
    bool is_dir;
    int rc = tfs_cache_lookup(c, key, &is_dir, out);

    if (rc == 0 && is_dir)
        rc = tfs_err(-EISDIR, "'%s' is a directory", key);
    return rc;
}

/* Lookup through the parent's cached listing; false when none. */
static bool meta_lookup_parent(struct tfs_cache *c, const char *key,
                               bool *is_dir, struct tfs_stat *st, int *rc)
{
    const char *slash = strrchr(key, '/');
    size_t plen = slash ? (size_t)(slash - key) + 1 : 0;
    const struct tfs_dirent *e;
    struct tfs_dir *d;
    char parent[1100];

    if (plen >= sizeof(parent))
        return false;
    memcpy(parent, key, plen);
    parent[plen] = '\0';
    d = meta_dir_cached(c->meta, parent, false);
    if (d == NULL)
        return false;
    e = tfs_dir_find(d, key + plen);
    *rc = e ? 0 : tfs_err(-ENOENT, "no such key '%s'", key);
    if (e != NULL) {
        *is_dir = e->is_dir;
        if (!e->is_dir && st != NULL)
            *st = e->st;
    }
    tfs_dir_put(d);
    return true;
}

/* Ask the store: HEAD the key, else look for anything under key/. */
static int meta_lookup_store(struct tfs_cache *c, const char *key,
                             bool *is_dir, struct tfs_stat *st)
{
    struct tfs_list_page pg;
    struct tfs_stat s;
    char prefix[1100];
    int rc;

    TFS_COUNT(&c->ctr, meta_misses, 1);
    rc = tfs_store_stat(c->st, key, &s);
    if (rc == -EISDIR) {                /* a store with real directories */
        *is_dir = true;
        return 0;
    }
    if (rc == 0 || rc != -ENOENT) {
        *is_dir = false;
        if (rc == 0 && st != NULL)
            *st = s;
        return rc;
    }
    snprintf(prefix, sizeof(prefix), "%s/", key);
    rc = tfs_store_list(c->st, prefix, "/", NULL, 1, &pg);
    if (rc < 0)
        return rc;
    *is_dir = pg.n_entries + pg.n_prefixes > 0;
    tfs_list_page_cleanup(&pg);
    return *is_dir ? 0 : tfs_err(-ENOENT, "no such key '%s'", key);
}

/*
 * The store is unreachable: answer from an expired entry if there is one
 * (stale-if-error), so cached data stays readable during an outage.  The
 * stat's version still pins every read (If-Match), so a changed object
 * gives TFS_ECHANGED, never its old bytes.
 */
static int meta_stale(struct tfs_cache *c, const char *key, bool *is_dir,
                      struct tfs_stat *st, int rc)
{
    struct tfs_meta *m = c->meta;
    bool found;
    int kind;

    pthread_mutex_lock(&m->lock);
    found = meta_get(m, key, &kind, st, true);
    pthread_mutex_unlock(&m->lock);
    if (!found || kind == META_NONE)
        return rc;
    tfs_log(TFS_LOG_INFO, "cache: store unreachable (%s); using the "
            "expired metadata of '%s'", tfs_strerror(rc), key);
    TFS_COUNT(&c->ctr, meta_stale_served, 1);
    *is_dir = kind == META_DIR;
    return 0;
}

/* Keep the store's answer about key if it is a definite one; m->lock. */
static void meta_record(struct tfs_cache *c, const char *key, int rc,
                        bool is_dir, const struct tfs_stat *st)
{
    if (rc == 0 || rc == -ENOENT)
        meta_put(c->meta, key, rc < 0 ? META_NONE
                               : is_dir ? META_DIR : META_FILE,
                 rc == 0 && !is_dir ? st : NULL, c->cfg.meta_ttl_ns);
}

/* Drop one reference to r, under m->lock. */
static void meta_reval_put(struct meta_reval *r)
{
    if (--r->refs == 0) {
        tfs_free(r->key);
        tfs_free(r);
    }
}

/* The revalidation thread: ask the store, record and post the answer. */
static void *meta_reval_main(void *arg)
{
    struct meta_reval *r = arg;
    struct tfs_cache *c = r->c;
    struct tfs_meta *m = c->meta;
    struct tfs_stat st;
    bool is_dir = false;
    int rc;

    memset(&st, 0, sizeof(st));
    rc = meta_lookup_store(c, r->key, &is_dir, &st);
    pthread_mutex_lock(&m->lock);
    meta_record(c, r->key, rc, is_dir, &st);
    r->rc = rc;
    r->is_dir = is_dir;
    r->st = st;
    r->done = true;
    for (struct meta_reval **pp = &m->revals; *pp != NULL;
         pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    meta_reval_put(r);
    m->n_reval_threads--;
    pthread_cond_broadcast(&m->reval_cond);
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/*
 * key's entry expired: ask the store on a thread of its own (one per key
 * at a time) and wait up to META_STALE_NS for the answer; once one waiter
 * has given up on a revalidation, later ones do not wait for it.  1 when
 * the store did not answer in time (the caller serves the expired entry;
 * the answer is recorded when it comes); -EAGAIN when no thread could
 * start (or META_MAX_REVALS are in flight): the caller asks inline.
 */
static int meta_revalidate(struct tfs_cache *c, const char *key,
                           bool *is_dir, struct tfs_stat *st, int *rc)
{
    struct tfs_meta *m = c->meta;
    struct meta_reval *r;
    struct timespec ts;
    bool done;

    pthread_mutex_lock(&m->lock);
    for (r = m->revals; r != NULL; r = r->next) {
        if (strcmp(r->key, key) == 0)
            break;
    }
    if (r == NULL && m->n_reval_threads >= META_MAX_REVALS) {
        pthread_mutex_unlock(&m->lock);
        return -EAGAIN;
    }
    if (r == NULL) {
        pthread_attr_t attr;
        pthread_t tid;
        int err = -1;

        r = tfs_calloc(1, sizeof(*r));
        if (r != NULL && (r->key = tfs_strdup(key)) != NULL) {
            r->c = c;
            r->refs = 1;                /* the thread's */
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            err = pthread_create(&tid, &attr, meta_reval_main, r);
            pthread_attr_destroy(&attr);
        }
        if (err != 0) {
            pthread_mutex_unlock(&m->lock);
            if (r != NULL)
                tfs_free(r->key);
            tfs_free(r);
            return -EAGAIN;
        }
        r->next = m->revals;
        m->revals = r;
        m->n_reval_threads++;
    }
    r->refs++;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(META_STALE_NS / 1000000000u);
    ts.tv_nsec += (long)(META_STALE_NS % 1000000000u);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (!r->done && !r->late &&
           pthread_cond_timedwait(&m->reval_cond, &m->lock, &ts) == 0)
        ;
    done = r->done;
    r->late = r->late || !done;
    if (done) {
        *rc = r->rc;
        *is_dir = r->is_dir;
        if (r->rc == 0 && st != NULL)
            *st = r->st;
    }
    meta_reval_put(r);
    pthread_mutex_unlock(&m->lock);
    return done ? 0 : 1;
}

int tfs_cache_lookup(struct tfs_cache *c, const char *key, bool *is_dir,
                     struct tfs_stat *st)
{
    struct tfs_meta *m = c->meta;
    bool stale;
    int kind;
    int rc;

    if (c->cfg.immutable) {
        rc = snap_ensure(c);
        return rc < 0 ? rc : snap_lookup(m, key, is_dir, st);
    }
    pthread_mutex_lock(&m->lock);
    rc = meta_get(m, key, &kind, st, false) ? 1 : 0;
    stale = rc == 0 && meta_get(m, key, &kind, NULL, true) &&
            kind != META_NONE;
    pthread_mutex_unlock(&m->lock);
    if (rc == 1) {
        TFS_COUNT(&c->ctr, meta_hits, 1);
        *is_dir = kind == META_DIR;
        return kind == META_NONE ? tfs_err(-ENOENT, "no such key '%s'", key)
                                 : 0;
    }
    if (meta_lookup_parent(c, key, is_dir, st, &rc)) {
        TFS_COUNT(&c->ctr, meta_hits, 1);
        return rc;
    }
    if (stale) {
        /* A definite answer within the bound wins; else the old entry. */
        int w = meta_revalidate(c, key, is_dir, st, &rc);
        if (w == 1)
            return meta_stale(c, key, is_dir, st, -ETIMEDOUT);
        if (w == 0 && rc == -ENOENT)
            return tfs_err(-ENOENT, "no such key '%s'", key);
        if (w == 0)
            return tfs_err_is_retryable(rc)
                       ? meta_stale(c, key, is_dir, st, rc) : rc;
    }
    rc = meta_lookup_store(c, key, is_dir, st);
    if (rc == 0 || rc == -ENOENT) {
        pthread_mutex_lock(&m->lock);
        meta_record(c, key, rc, *is_dir, st);
        pthread_mutex_unlock(&m->lock);
    } else if (tfs_err_is_retryable(rc)) {
        rc = meta_stale(c, key, is_dir, st, rc);
    }
    return rc;
}

const char *tfs_cache_key_stable(struct tfs_cache *c, const char *key,
                                 const char **version)
{
    struct tfs_meta *m = c->meta;
    size_t i;

    if (!c->cfg.immutable || snap_ensure(c) < 0)
        return NULL;
    i = snap_find(m, key);
    if (i == m->n_snap)
        return NULL;
    if (version != NULL)
        *version = snap_version(&m->snap[i]);
    return m->snap[i].key;
}

void tfs_cache_forget_meta(struct tfs_cache *c)
{
    struct tfs_meta *m = c->meta;

    struct tfs_hmap_iter it;
    struct tfs_dir *d;

    pthread_mutex_lock(&m->lock);
    meta_clear_stats(m);
    tfs_hmap_iter_init(&it, &m->dirs);
    while ((d = dir_of(tfs_hstr_of(tfs_hmap_iter_next(&it)))) != NULL) {
        tfs_hmap_remove(&m->dirs, &d->h.node);
        tfs_dir_put(d);
    }
    pthread_mutex_unlock(&m->lock);
}

/* Drop the stat entry of key, under m->lock. */
static void meta_drop_stat(struct tfs_meta *m, const char *key)
{
    struct meta_ent *e = meta_ent_of(tfs_hmap_find_str(&m->stats, key));

    if (e != NULL) {
        tfs_hmap_remove(&m->stats, &e->h.node);
        meta_ent_free(e);
    }
}

/* Take the listing of dir out of the table, under m->lock. */
static struct tfs_dir *meta_take_dir(struct tfs_meta *m, const char *dir)
{
    struct tfs_dir *d = dir_of(tfs_hmap_find_str(&m->dirs, dir));

    if (d != NULL)
        tfs_hmap_remove(&m->dirs, &d->h.node);
    return d;
}

/*
 * A copy of d with entry name set (is_dir, or a file with *st) or, when
 * remove, taken out; NULL when out of memory or d is too large to copy
 * for one change (the caller then drops the listing instead).
 */
static struct tfs_dir *meta_dir_patched(const struct tfs_dir *d,
                                        const char *name, bool is_dir,
                                        const struct tfs_stat *st,
                                        bool remove)
{
    struct dir_build b = {0};
    struct tfs_dir *nd = NULL;
    bool found = false;
    int rc = 0;

    if (d->n > 10000)
        return NULL;
    tfs_buf_init(&b.names, 0);
    for (size_t i = 0; i < d->n && rc == 0; i++) {
        const struct tfs_dirent *e = &d->ents[i];
        bool same = strcmp(e->name, name) == 0 && e->is_dir == is_dir;
        found = found || same;
        if (same && (remove || !is_dir))
            continue;                   /* dropped, or re-added below */
        rc = dir_build_add(&b, e->name, strlen(e->name), e->is_dir,
                           e->is_dir ? NULL : &e->st);
    }
    if (rc == 0 && !remove && (!found || !is_dir))
        rc = dir_build_add(&b, name, strlen(name), is_dir, st);
    if (rc == 0 && dir_build_finish(&b, d->h.key, &nd) == 0)
        nd->expires_ns = d->expires_ns;
    dir_build_cleanup(&b);
    return nd;
}

/*
 * Apply one change to the cached listing of dir, if there is one: the
 * listing is replaced by a patched copy (readers holding the old one keep
 * it), or dropped when it cannot be patched.  Under m->lock; the old
 * listing is returned for the caller to release outside the lock.
 */
static struct tfs_dir *meta_dir_apply(struct tfs_meta *m, const char *dir,
                                      const char *name, bool is_dir,
                                      const struct tfs_stat *st, bool remove)
{
    struct tfs_dir *old = meta_take_dir(m, dir);
    struct tfs_dir *nd;

    if (old == NULL)
        return NULL;
    nd = meta_dir_patched(old, name, is_dir, st, remove);
    if (nd != NULL && tfs_hmap_insert_str(&m->dirs, &nd->h) < 0)
        tfs_dir_put(nd);                /* dropped, as when unpatched */
    return old;
}

void tfs_cache_note_put(struct tfs_cache *c, const char *key,
                        const struct tfs_stat *st)
{
    struct tfs_meta *m = c->meta;
    struct tfs_dir *old[64];
    size_t n_old = 0;
    size_t start = 0;
    char dir[1100];
    char name[1100];
    size_t len = strlen(key);

    if (len + 2 > sizeof(dir))
        return;
    pthread_mutex_lock(&m->lock);
    /*
     * Each level from the root down: a put adds the next component to
     * the listing (a directory on the way, the file at the end); a
     * removal takes the file out of its directory's listing and drops
     * the listings above (a directory may have become empty).
     */
    for (size_t i = 0; i <= len && n_old < TFS_ARRAY_LEN(old); i++) {
        bool last = i == len;
        if (!last && key[i] != '/')
            continue;
        memcpy(dir, key, start);
        dir[start] = '\0';
        memcpy(name, key + start, i - start);
        name[i - start] = '\0';
        if (st == NULL && !last)
            old[n_old++] = meta_take_dir(m, dir);
        else
            old[n_old++] = meta_dir_apply(m, dir, name, !last, st,
                                          st == NULL);
        if (!last) {
            memcpy(dir, key, i);
            dir[i] = '\0';
            meta_drop_stat(m, dir);     /* "a", then "a/b" */
        }
        start = i + 1;
    }
    meta_drop_stat(m, key);
    if (st != NULL)
        meta_put(m, key, META_FILE, st, c->cfg.meta_ttl_ns);
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n_old; i++)
        tfs_dir_put(old[i]);
}

/* ---- open and close ---- */

int tfs_meta_open(struct tfs_cache *c)
{
    struct tfs_meta *m = tfs_calloc(1, sizeof(*m));
    char path[4200];
    int top;
    int fd;
    int rc;

    if (m == NULL)
        return -ENOMEM;
    if (tfs_hmap_init(&m->stats, META_MIN_BUCKETS, tfs_hstr_eq) < 0 ||
        tfs_hmap_init(&m->dirs, META_MIN_BUCKETS, tfs_hstr_eq) < 0) {
        tfs_hmap_cleanup(&m->stats);
        tfs_free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->snap_lock, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->reval_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    c->meta = m;
    if (c->cfg.manifest != NULL)
        return manifest_load(c);        /* no snapshot file */
    if (c->cfg.cache_dir == NULL || !c->cfg.immutable)
        return 0;
    m->mode = c->cfg.cache_mode;
    rc = tfs_dir_open_path(c->cfg.cache_dir, m->mode, TFS_DIR_TIGHTEN, &top);
    if (rc == 0) {
        rc = tfs_dir_openat(top, c->cfg.cache_dir, "meta", m->mode,
                            TFS_DIR_TIGHTEN, &fd);
        close(top);
    }
    if (rc == -EROFS || rc == -EACCES) {
        /* A cache dir that cannot be written (as in tfs_disk_open):
           no listing snapshot, the listing comes from the store. */
        tfs_log(TFS_LOG_WARNING, "cache: cannot create %s/meta (%s: %s): "
                "running without the listing snapshot", c->cfg.cache_dir,
                tfs_strerror(rc), tfs_errdetail());
        tfs_errdetail_clear();
        return 0;
    }
    if (rc < 0)
        return rc;
    close(fd);
    snprintf(path, sizeof(path), "%s/meta/%016llx%016llx.snap",
             c->cfg.cache_dir, (unsigned long long)tfs_get_le64(c->ns),
             (unsigned long long)tfs_get_le64(c->ns + 8));
    m->snap_path = tfs_strdup(path);
    return m->snap_path ? 0 : -ENOMEM;
}

void tfs_meta_close(struct tfs_cache *c)
{
    struct tfs_meta *m = c->meta;

    if (m == NULL)
        return;
    /* Revalidations in flight use the cache and its store: wait. */
    pthread_mutex_lock(&m->lock);
    while (m->n_reval_threads > 0)
        pthread_cond_wait(&m->reval_cond, &m->lock);
    pthread_mutex_unlock(&m->lock);
    tfs_cache_forget_meta(c);
    tfs_hmap_cleanup(&m->stats);
    tfs_hmap_cleanup(&m->dirs);
    tfs_free(m->snap);
    snap_chunks_free(m->snap_names);
    tfs_free(m->snap_path);
    pthread_mutex_destroy(&m->snap_lock);
    pthread_cond_destroy(&m->reval_cond);
    pthread_mutex_destroy(&m->lock);
    tfs_free(m);
    c->meta = NULL;
}
