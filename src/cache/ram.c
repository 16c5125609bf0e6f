/* SPDX-License-Identifier: MIT */
/*
 * The RAM tier: a hash table of blocks by id (common/hmap.h), each
 * pinned while in use, with an LRU list of READY blocks bounded by
 * mem_cache bytes.
 *
 * The table doubles as the single-flight table: the first thread to miss
 * on a block inserts it LOADING and loads it; every other thread finds
 * the LOADING block and waits on its condition, so concurrent misses on one
 * block cause one load.  A load that fails takes the block out of the
 * table (waiters see the error, later readers try again).  A reader that
 * must not block (the mount's) queues a callback instead
 * (tfs_block_await), called by tfs_block_publish, the one way a load
 * ends, whoever loaded it (the read path, the fetch engine).
 *
 * Admission, with a disk tier under it: a full-size block loaded from
 * the store (a piece of a large object) starts on probation.  Once
 * readers have taken all of its bytes it is spent: it moves to the cold
 * end of the LRU, and only spent_cap bytes of spent blocks are kept (a
 * sixteenth of mem_cache, two blocks at least).  A spent block read
 * again is promoted to an ordinary one.  One is evicted for room only
 * once it is on disk, and comes back from there as an ordinary block.
 *
 * So a large object read once (a cold read, a checkpoint restore, a
 * shard) passes through a small window instead of pushing out the
 * blocks that are read again, and its buffers are recycled through the
 * pool instead of claiming fresh memory for every block (on a VM, the
 * first touch of a fresh page is what a cold read mostly costs:
 * docs/cache.md).  Smaller blocks (small objects, the tail of a large
 * one) are admitted as before: a dataset of small files is read again
 * every epoch, and a second pass from disk would cost every file a disk
 * read.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "cache/cache_int.h"

#define RAM_MIN_BUCKETS (1u << 16)     /* then it doubles at load 1 */

/* ---- the buffer pool ---- */

/* Size class and capacity of a buffer for len bytes. */
static unsigned pool_class(const struct tfs_cache *c, size_t len,
                           size_t *cap)
{
    size_t bs = (size_t)c->cfg.block_size;
    size_t sz = 64u << 10;
    unsigned k = 0;

    while (sz < len && sz < bs && k < TFS_POOL_CLASSES - 2) {
        sz *= 2;
        k++;
    }
    if (sz < len || sz > bs) {          /* the block size itself */
        sz = TFS_MAX(bs, len);
        k = TFS_POOL_CLASSES - 1;
    }
    *cap = sz;
    return k;
}

/*
 * Whether the RAM tier is over its bound (ram_bytes and out_len are
 * changed atomically, so a caller without ram_lock gets an estimate that
 * tfs_ram_trim checks again under it).  dying:
 * bytes the caller took out of the tier that are not yet back in the
 * pool.  The bound covers the block buffers out of the pool, not only
 * the tier's: blocks loading (up to max_inflight of them, from the
 * store, a peer or the disk tier) and evicted blocks a reader still
 * holds take the same memory, so the tier makes room for them, up to
 * half its size (a tier smaller than the loads in flight keeps half for
 * the blocks just loaded, rather than evicting them before they are
 * read).  docs/cache.md, "Memory".
 */
static bool ram_over(const struct tfs_cache *c, uint64_t dying)
{
    uint64_t out = __atomic_load_n(&c->pool.out_len, __ATOMIC_RELAXED);
    uint64_t ram = __atomic_load_n(&c->ram_bytes, __ATOMIC_RELAXED);
    uint64_t held = ram + dying;
    uint64_t other = out > held ? out - held : 0;

    return ram + TFS_MIN(other, c->cfg.mem_cache / 2) > c->cfg.mem_cache;
}

void *tfs_blockbuf_get(struct tfs_cache *c, size_t len)
{
    struct tfs_bufpool *pl = &c->pool;
    size_t cap;
    unsigned k = pool_class(c, len, &cap);
    void *p;

    pthread_mutex_lock(&pl->lock);
    p = pl->free[k];
    if (p != NULL) {
        memcpy(&pl->free[k], p, sizeof(void *));
        pl->idle_bytes -= cap;
    }
    pthread_mutex_unlock(&pl->lock);
    if (p == NULL)
        p = tfs_malloc_faulted(cap);
    if (p == NULL)
        return NULL;
    __atomic_fetch_add(&pl->out_len, len, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pl->out_cap, cap, __ATOMIC_RELAXED);
    /* make room now, not at the next publish: a burst of loads (the
       disk tier's readahead) would otherwise come on top of a full tier */
    if (ram_over(c, 0))
        tfs_ram_trim(c);
    return p;
}

/*
 * May the pool keep one more idle buffer of cap bytes, with out bytes
 * of buffers handed out (pl->lock held)?  Only within the RAM tier's
 * bound (plus two blocks), so the buffers out and the idle ones together
 * stay under mem_cache.
 */
static bool pool_has_room(const struct tfs_cache *c, uint64_t out,
                          size_t cap)
{
    const struct tfs_bufpool *pl = &c->pool;

    return pl->idle_bytes + cap <= pl->max_idle &&
           out + pl->idle_bytes + cap <= c->cfg.mem_cache +
                                         2 * c->cfg.block_size;
}

void tfs_blockbuf_put(struct tfs_cache *c, void *p, size_t len)
{
    struct tfs_bufpool *pl = &c->pool;
    uint64_t out;
    size_t cap;
    unsigned k;

    if (p == NULL)
        return;
    k = pool_class(c, len, &cap);
    __atomic_fetch_sub(&pl->out_len, len, __ATOMIC_RELAXED);
    out = __atomic_sub_fetch(&pl->out_cap, cap, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pl->lock);
    if (pool_has_room(c, out, cap)) {
        memcpy(p, &pl->free[k], sizeof(void *));
        pl->free[k] = p;
        pl->idle_bytes += cap;
        p = NULL;
    }
    pthread_mutex_unlock(&pl->lock);
    tfs_free_faulted(p);
}

/*
 * One faulted buffer for len bytes into the pool, when its size class has
 * none idle and the bound allows one more (as tfs_blockbuf_put keeps
 * one); only below the block size, where the pool seldom holds a spent
 * one.  Fresh memory costs its first touch here (about 35 us for 64 KiB
 * on this VM, docs/performance-cold.md): a fetch pays it while it waits
 * for the store's answer (fetch.c), not before it sends its request.
 */
void tfs_blockbuf_stock(struct tfs_cache *c, size_t len)
{
    struct tfs_bufpool *pl = &c->pool;
    uint64_t out;
    size_t cap;
    unsigned k = pool_class(c, len, &cap);
    bool room;
    void *p;

    if (cap >= c->cfg.block_size)
        return;
    out = __atomic_load_n(&pl->out_cap, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pl->lock);
    room = pl->free[k] == NULL && pool_has_room(c, out, cap);
    if (room)
        pl->idle_bytes += cap;          /* held for it meanwhile */
    pthread_mutex_unlock(&pl->lock);
    if (!room)
        return;
    p = tfs_malloc_faulted(cap);
    pthread_mutex_lock(&pl->lock);
    if (p == NULL) {
        pl->idle_bytes -= cap;
    } else {
        memcpy(p, &pl->free[k], sizeof(void *));
        pl->free[k] = p;
    }
    pthread_mutex_unlock(&pl->lock);
}

static void pool_cleanup(struct tfs_bufpool *pl)
{
    for (unsigned k = 0; k < TFS_POOL_CLASSES; k++) {
        while (pl->free[k] != NULL) {
            void *p = pl->free[k];
            memcpy(&pl->free[k], p, sizeof(void *));
            tfs_free_faulted(p);
        }
    }
    pthread_mutex_destroy(&pl->lock);
}

/* ---- the table ---- */

static struct tfs_block *ram_block_of(struct tfs_hnode *n)
{
    return n ? tfs_container_of(n, struct tfs_block, hnode) : NULL;
}

/* Whether block node n has the id key (TFS_BLOCK_ID_LEN bytes). */
static bool ram_id_eq(const struct tfs_hnode *n, const void *key)
{
    const struct tfs_block *b = tfs_container_of(n, struct tfs_block,
                                                 hnode);

    return memcmp(b->id, key, TFS_BLOCK_ID_LEN) == 0;
}

/*
 * Ids are hashes already (cache.c): the table hashes on bytes 8-15.  It
 * grows with the blocks it holds rather than being sized from mem_cache:
 * blocks are as small as the objects they hold, so mem_cache does not
 * bound their number.
 */
static uint64_t ram_hash(const uint8_t *id)
{
    uint64_t h;

    memcpy(&h, id + 8, sizeof(h));
    return h;
}

int tfs_ram_init(struct tfs_cache *c)
{
    if (tfs_hmap_init(&c->table, RAM_MIN_BUCKETS, ram_id_eq) < 0)
        return -ENOMEM;
    pthread_mutex_init(&c->ram_lock, NULL);
    pthread_mutex_init(&c->pool.lock, NULL);
    c->pool.max_idle = (size_t)TFS_MIN(c->cfg.mem_cache / 4 +
                                       4 * c->cfg.block_size,
                                       (uint64_t)256 << 20);
    pthread_condattr_init(&c->cond_attr);
    pthread_condattr_setclock(&c->cond_attr, CLOCK_MONOTONIC);
    c->lru.lru_prev = &c->lru;
    c->lru.lru_next = &c->lru;
    c->spent_cap = TFS_MIN(TFS_MAX(c->cfg.mem_cache / 16,
                                   2 * c->cfg.block_size),
                           c->cfg.mem_cache);
    return 0;
}

static void ram_free_block(struct tfs_cache *c, struct tfs_block *b)
{
    pthread_cond_destroy(&b->cond);
    tfs_free(b->err_detail);
    tfs_blockbuf_put(c, b->data, b->len);
    tfs_free(b->sums);
    tfs_free(b);
}

void tfs_ram_cleanup(struct tfs_cache *c)
{
    struct tfs_hmap_iter it;
    struct tfs_block *b;

    if (c->table.b == NULL)
        return;
    tfs_hmap_iter_init(&it, &c->table);
    while ((b = ram_block_of(tfs_hmap_iter_next(&it))) != NULL)
        ram_free_block(c, b);
    tfs_hmap_cleanup(&c->table);
    pool_cleanup(&c->pool);
    pthread_condattr_destroy(&c->cond_attr);
    pthread_mutex_destroy(&c->ram_lock);
}

/* ---- table and list helpers; caller holds ram_lock ---- */

static struct tfs_block *ram_lookup(struct tfs_cache *c, const uint8_t *id)
{
    return ram_block_of(tfs_hmap_find(&c->table, ram_hash(id), id));
}

static void ram_unhash(struct tfs_cache *c, struct tfs_block *b)
{
    tfs_hmap_remove(&c->table, &b->hnode);
    b->in_table = false;
}

static void lru_unlink(struct tfs_block *b)
{
    if (b->lru_next == NULL)
        return;
    b->lru_prev->lru_next = b->lru_next;
    b->lru_next->lru_prev = b->lru_prev;
    b->lru_prev = NULL;
    b->lru_next = NULL;
}

static void lru_push_front(struct tfs_cache *c, struct tfs_block *b)
{
    b->lru_next = c->lru.lru_next;
    b->lru_prev = &c->lru;
    c->lru.lru_next->lru_prev = b;
    c->lru.lru_next = b;
}

static void lru_push_back(struct tfs_cache *c, struct tfs_block *b)
{
    b->lru_prev = c->lru.lru_prev;
    b->lru_next = &c->lru;
    c->lru.lru_prev->lru_next = b;
    c->lru.lru_prev = b;
}

/* A hit: most recently used; a spent block stays where it is. */
static void lru_touch(struct tfs_cache *c, struct tfs_block *b)
{
    if (b->lru_next != NULL && !b->spent && c->lru.lru_next != b) {
        lru_unlink(b);
        lru_push_front(c, b);
    }
}

static void ram_unspend(struct tfs_cache *c, struct tfs_block *b)
{
    if (b->spent) {
        b->spent = false;
        c->spent_bytes -= b->len;
    }
}

/* ---- pins ---- */

struct tfs_block *tfs_ram_find(struct tfs_cache *c, const uint8_t *id)
{
    struct tfs_block *b;

    pthread_mutex_lock(&c->ram_lock);
    b = ram_lookup(c, id);
    if (b != NULL) {
        b->refs++;
        lru_touch(c, b);
    }
    pthread_mutex_unlock(&c->ram_lock);
    return b;
}

/*
 * Insert fresh (allocated by the caller) unless id is there already; NULL
 * when the table could not grow to take it (-ENOMEM).
 */
static struct tfs_block *ram_insert(struct tfs_cache *c,
                                    struct tfs_block *fresh, bool *created)
{
    struct tfs_block *b;

    pthread_mutex_lock(&c->ram_lock);
    b = ram_lookup(c, fresh->id);
    *created = b == NULL;
    if (b == NULL) {
        b = fresh;
        if (tfs_hmap_insert(&c->table, &b->hnode, ram_hash(b->id)) < 0) {
            *created = false;
            pthread_mutex_unlock(&c->ram_lock);
            return NULL;
        }
        b->in_table = true;
    } else if (b->state == TFS_BLK_READY) {
        lru_touch(c, b);
    }
    b->refs++;
    pthread_mutex_unlock(&c->ram_lock);
    return b;
}

int tfs_ram_get(struct tfs_cache *c, const uint8_t *id, size_t len,
                struct tfs_block **out, bool *created)
{
    struct tfs_block *fresh;
    struct tfs_block *b = tfs_ram_find(c, id);

    *created = false;
    if (b != NULL) {
        *out = b;
        return 0;
    }
    /* Allocate outside the lock, then insert unless someone beat us. */
    fresh = tfs_calloc(1, sizeof(*fresh));
    if (fresh == NULL)
        return -ENOMEM;
    pthread_cond_init(&fresh->cond, &c->cond_attr);
    memcpy(fresh->id, id, TFS_BLOCK_ID_LEN);
    fresh->len = len;
    fresh->state = TFS_BLK_LOADING;
    fresh->load_start_ns = tfs_now_ns();
    b = ram_insert(c, fresh, created);
    if (b != fresh)
        ram_free_block(c, fresh);
    if (b == NULL)
        return -ENOMEM;
    *out = b;
    return 0;
}

void tfs_ram_publish(struct tfs_cache *c, struct tfs_block *b, int err,
                     int src)
{
    pthread_mutex_lock(&c->ram_lock);
    if (b->state == TFS_BLK_LOADING) {
        if (err < 0) {
            b->state = TFS_BLK_FAILED;
            b->err = err;
            /* The detail is per thread: keep it for the waiters. */
            if (tfs_errdetail()[0] != '\0' && b->err_detail == NULL)
                b->err_detail = tfs_strdup(tfs_errdetail());
            if (b->in_table)
                ram_unhash(c, b);
        } else {
            b->state = TFS_BLK_READY;
            b->src = src;
            b->src_left = b->len;
            b->probation = src >= TFS_SRC_STORE &&
                           c->disk != NULL &&
                           b->len >= c->cfg.block_size;
            if (b->in_table) {
                lru_push_front(c, b);
                __atomic_fetch_add(&c->ram_bytes, b->len, __ATOMIC_RELAXED);
            }
        }
        pthread_cond_broadcast(&b->cond);
    }
    pthread_mutex_unlock(&c->ram_lock);
    if (err == 0)
        tfs_ram_trim(c);
}

/* ---- waiting for a block ---- */

bool tfs_block_await(struct tfs_cache *c, struct tfs_block *b,
                     struct tfs_waiter *w)
{
    bool loading;

    pthread_mutex_lock(&c->ram_lock);
    loading = b->state == TFS_BLK_LOADING;
    if (loading) {
        w->next = b->waiters;
        b->waiters = w;
    }
    pthread_mutex_unlock(&c->ram_lock);
    return loading;
}

void tfs_block_publish(struct tfs_cache *c, struct tfs_block *b, int err,
                       int src)
{
    struct tfs_waiter *w;

    tfs_ram_publish(c, b, err, src);
    pthread_mutex_lock(&c->ram_lock);
    w = b->waiters;
    b->waiters = NULL;
    pthread_mutex_unlock(&c->ram_lock);
    while (w != NULL) {
        struct tfs_waiter *next = w->next;
        w->fn(c, w);                    /* may free w */
        w = next;
    }
}

int tfs_ram_wait(struct tfs_cache *c, struct tfs_block *b,
                 uint64_t timeout_ns)
{
    struct timespec until = tfs_abstime(CLOCK_MONOTONIC, timeout_ns);
    int rc = 0;

    pthread_mutex_lock(&c->ram_lock);
    while (b->state == TFS_BLK_LOADING && rc == 0) {
        if (timeout_ns == 0)
            pthread_cond_wait(&b->cond, &c->ram_lock);
        else if (pthread_cond_timedwait(&b->cond, &c->ram_lock,
                                        &until) == ETIMEDOUT)
            rc = -ETIMEDOUT;
    }
    if (b->state == TFS_BLK_FAILED) {
        rc = b->err;
        if (b->err_detail != NULL)
            tfs_errdetail_set("%s", b->err_detail);
    } else if (b->state == TFS_BLK_READY) {
        rc = 0;
    }
    pthread_mutex_unlock(&c->ram_lock);
    return rc;
}

void tfs_ram_put(struct tfs_cache *c, struct tfs_block *b)
{
    bool free_it;
    bool trim;

    pthread_mutex_lock(&c->ram_lock);
    b->refs--;
    free_it = b->refs == 0 && !b->in_table;
    trim = b->refs == 0 && (ram_over(c, 0) ||
                            (b->spent && c->spent_bytes > c->spent_cap));
    pthread_mutex_unlock(&c->ram_lock);
    if (free_it)
        ram_free_block(c, b);
    else if (trim)
        tfs_ram_trim(c);
}

void tfs_ram_trim(struct tfs_cache *c)
{
    struct tfs_block *dead = NULL;
    struct tfs_block *b;
    uint64_t dying = 0;

    pthread_mutex_lock(&c->ram_lock);
    b = c->lru.lru_prev;
    while (b != &c->lru) {
        struct tfs_block *prev = b->lru_prev;
        /* Spent blocks sit at the cold end: past them, only a full tier
           evicts more; one not on disk (declined, or its write queued) is
           kept while the tier has room. */
        bool full = ram_over(c, dying);

        if (!full && !(b->spent && c->spent_bytes > c->spent_cap))
            break;
        if (b->refs == 0 && (full || b->on_disk)) {
            lru_unlink(b);
            ram_unhash(c, b);
            ram_unspend(c, b);
            __atomic_fetch_sub(&c->ram_bytes, b->len, __ATOMIC_RELAXED);
            dying += b->len;
            TFS_COUNT(&c->ctr, evicted_bytes_ram, b->len);
            if (b->prefetched)
                TFS_COUNT(&c->ctr, prefetch_bytes_wasted, b->len);
            b->lru_next = dead;         /* off the LRU: the dead list */
            dead = b;
        }
        b = prev;
    }
    pthread_mutex_unlock(&c->ram_lock);
    while (dead != NULL) {
        b = dead->lru_next;
        ram_free_block(c, dead);
        dead = b;
    }
}

/* Caller holds ram_lock; b is pinned, READY and on probation. */
static void ram_make_spent(struct tfs_cache *c, struct tfs_block *b)
{
    if (b->spent || b->lru_next == NULL)
        return;
    b->spent = true;
    c->spent_bytes += b->len;
    lru_unlink(b);
    lru_push_back(c, b);
}

void tfs_ram_read_locked(struct tfs_cache *c, struct tfs_block *b,
                         bool again)
{
    if (!b->probation)
        return;
    if (again) {                        /* read a second time: promoted */
        b->probation = false;
        ram_unspend(c, b);
        lru_touch(c, b);
    } else if (b->src_left == 0) {
        ram_make_spent(c, b);
    }
}

void tfs_ram_spend(struct tfs_cache *c, struct tfs_block *b)
{
    pthread_mutex_lock(&c->ram_lock);
    if (b->state == TFS_BLK_READY && b->probation)
        ram_make_spent(c, b);
    pthread_mutex_unlock(&c->ram_lock);
}
