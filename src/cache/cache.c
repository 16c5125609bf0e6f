/* SPDX-License-Identifier: MIT */
/*
 * The cache object: options, open and close, block identity, and the
 * block read path that ties the tiers together:
 *
 *   RAM tier hit ─────────────────────────────► READY
 *   miss: first thread inserts a LOADING block (single flight)
 *         ├─ disk tier hit (checksums verified) ► READY
 *         └─ else queued to the fetch pool ─────► READY, then written
 *                                                 to the disk tier
 *   every other thread waits on the LOADING block; a reader that waits
 *   longer than the p95 read latency asks for a hedged second read.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "cache/cache_int.h"
#include "common/bytes.h"
#include "common/csum.h"
#include "tierfs/log.h"
#include "tierfs/retry.h"

/* ---- options ---- */

int tfs_cache_create(struct tfs_cache **out)
{
    struct tfs_cache *c = tfs_calloc(1, sizeof(*c));

    if (c == NULL)
        return -ENOMEM;
    c->cfg.block_size = 4u << 20;
    c->cfg.mem_cache = 1u << 30;
    c->cfg.cache_size = 10ull << 30;
    c->cfg.cache_mode = TFS_CACHE_MODE_PRIVATE;
    c->cfg.free_space_pct = 5.0;
    c->cfg.eviction = TFS_EVICT_TINYLFU;
    c->cfg.max_inflight = 32;
    c->cfg.max_readahead = 64u << 20;
    c->cfg.fetch_span = 16u << 20;
    c->cfg.meta_ttl_ns = 5000000000u;
    c->cfg.hedge = true;
    c->cfg.disk_packs = true;
    c->cfg.hedge_min_ns = 20000000u;
    {
        pthread_rwlockattr_t a;

        pthread_rwlockattr_init(&a);
        pthread_rwlockattr_setkind_np(
            &a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&c->source_lock, &a);
        pthread_rwlockattr_destroy(&a);
    }
    *out = c;
    return 0;
}

/* cache_mode: private (0700/0600) or group (02770/0660, never other). */
static int cache_set_mode(const struct tfs_opt_spec *o, void *base,
                          const char *value)
{
    struct tfs_cache_cfg *cfg = base;

    (void)o;
    if (strcmp(value, "private") == 0 || strcmp(value, "0700") == 0)
        cfg->cache_mode = TFS_CACHE_MODE_PRIVATE;
    else if (strcmp(value, "group") == 0 || strcmp(value, "0770") == 0)
        cfg->cache_mode = TFS_CACHE_MODE_GROUP;
    else
        return TFS_EOPTION;
    return 0;
}

static int cache_set_eviction(const struct tfs_opt_spec *o, void *base,
                              const char *value)
{
    struct tfs_cache_cfg *cfg = base;

    (void)o;
    if (strcmp(value, "tinylfu") == 0)
        cfg->eviction = TFS_EVICT_TINYLFU;
    else if (strcmp(value, "lru") == 0)
        cfg->eviction = TFS_EVICT_LRU;
    else
        return TFS_EOPTION;
    return 0;
}

/* free_space: a size, or a percentage of the file system below 100. */
static int cache_set_free_space(const struct tfs_opt_spec *o, void *base,
                                const char *value)
{
    struct tfs_cache_cfg *cfg = base;
    size_t len = strlen(value);
    uint64_t bytes;
    double pct;
    char num[32];

    (void)o;
    if (len > 1 && len < sizeof(num) && value[len - 1] == '%') {
        memcpy(num, value, len - 1);
        num[len - 1] = '\0';
        if (tfs_parse_double(num, &pct) < 0 || pct < 0 || pct >= 100)
            return TFS_EOPTION;
        cfg->free_space = 0;
        cfg->free_space_pct = pct;
        return 0;
    }
    if (tfs_parse_size(value, &bytes) < 0)
        return TFS_EOPTION;
    cfg->free_space = bytes;
    cfg->free_space_pct = 0;
    return 0;
}

/* block_size and cache_size: remember that the user chose them. */
static int cache_set_chosen(const struct tfs_opt_spec *o, void *base,
                            const char *value)
{
    struct tfs_cache_cfg *cfg = base;
    int rc = tfs_opt_store(o, base, value);

    if (rc == 0 && o->offset == offsetof(struct tfs_cache_cfg, block_size))
        cfg->set_block_size = true;
    else if (rc == 0)
        cfg->set_cache_size = true;
    return rc;
}

#define CACHE_OPT(name, kind, field, min, max)                             \
    {name, kind, offsetof(struct tfs_cache_cfg, field), min, max, NULL,    \
     NULL}
#define CACHE_OPT_FN(name, field, fn, expect)                              \
    {name, TFS_OPT_CUSTOM, offsetof(struct tfs_cache_cfg, field), 0, 0,    \
     fn, expect}

/* The options of tfs_cache_set (cache.h), over struct tfs_cache_cfg. */
static const struct tfs_opt_spec cache_opts[] = {
    {"block_size", TFS_OPT_SIZE, offsetof(struct tfs_cache_cfg, block_size),
     64u << 10, 64u << 20, cache_set_chosen, NULL},
    CACHE_OPT("mem_cache", TFS_OPT_SIZE, mem_cache, 0, TFS_OPT_NOMAX),
    CACHE_OPT("cache_dir", TFS_OPT_STR, cache_dir, 0, TFS_OPT_NOMAX),
    CACHE_OPT_FN("cache_mode", cache_mode, cache_set_mode,
                 "private or group"),
    {"cache_size", TFS_OPT_SIZE, offsetof(struct tfs_cache_cfg, cache_size),
     1u << 20, TFS_OPT_NOMAX, cache_set_chosen, NULL},
    CACHE_OPT("max_blocks", TFS_OPT_U64, max_blocks, 1024, 1u << 23),
    CACHE_OPT_FN("free_space", free_space, cache_set_free_space,
                 "a size or 0-99%"),
    CACHE_OPT_FN("eviction", eviction, cache_set_eviction,
                 "tinylfu or lru"),
    CACHE_OPT("max_inflight", TFS_OPT_UINT, max_inflight, 1, 1024),
    CACHE_OPT("max_readahead", TFS_OPT_SIZE, max_readahead, 0, 4ull << 30),
    CACHE_OPT("fetch_span", TFS_OPT_SIZE, fetch_span, 0, 1ull << 30),
    CACHE_OPT("meta_ttl", TFS_OPT_SEC_NS, meta_ttl_ns, 0, 1e7),
    CACHE_OPT("immutable", TFS_OPT_BOOL, immutable, 0, 1),
    CACHE_OPT("hedge", TFS_OPT_BOOL, hedge, 0, 1),
    CACHE_OPT("disk_packs", TFS_OPT_BOOL, disk_packs, 0, 1),
    CACHE_OPT("hedge_min_ms", TFS_OPT_MS_NS, hedge_min_ns, 0, 600000),
    CACHE_OPT("trace", TFS_OPT_STR, trace_path, 0, TFS_OPT_NOMAX),
    CACHE_OPT("manifest", TFS_OPT_STR, manifest, 0, TFS_OPT_NOMAX),
};

int tfs_cache_set(struct tfs_cache *c, const char *name, const char *value)
{
    if (c->opened)
        return -EBUSY;
    return tfs_opt_apply("cache", cache_opts, TFS_ARRAY_LEN(cache_opts),
                         &c->cfg, name, value);
}

/* ---- open and close ---- */

int tfs_cache_open(struct tfs_cache *c, struct tfs_store *st)
{
    const char *ident = tfs_store_identity(st);
    XXH128_hash_t h = XXH3_128bits(ident, strlen(ident));
    int rc;

    if (c->opened)
        return -EBUSY;
    c->st = st;
    memcpy(c->ns, &h.high64, 8);
    memcpy(c->ns + 8, &h.low64, 8);
    c->open_ns = tfs_now_ns();
    if (c->cfg.manifest != NULL)
        c->cfg.immutable = true;        /* a listing fixed in a file */
    rc = c->cfg.trace_path ? tfs_trace_open(&c->trace, c->cfg.trace_path)
                           : 0;
    if (rc == 0)
        rc = tfs_ram_init(c);
    if (rc == 0)
        rc = tfs_disk_open(c);
    if (rc == 0)
        rc = tfs_meta_open(c);
    if (rc == 0)
        rc = tfs_fetch_start(c);
    if (rc < 0) {
        tfs_meta_close(c);
        tfs_disk_close(c);
        tfs_ram_cleanup(c);
        tfs_trace_close(c->trace);
        c->trace = NULL;
        return rc;
    }
    c->opened = true;
    return 0;
}

uint64_t tfs_cache_mem_limit(const struct tfs_cache *c)
{
    return c->cfg.mem_cache;
}

uint64_t tfs_cache_block_size(const struct tfs_cache *c)
{
    return c->cfg.block_size;
}

uint64_t tfs_cache_disk_limit(const struct tfs_cache *c)
{
    return c->cfg.cache_size;
}

uint64_t tfs_cache_meta_ttl_ns(const struct tfs_cache *c)
{
    return c->cfg.meta_ttl_ns;
}

bool tfs_cache_is_immutable(const struct tfs_cache *c)
{
    return c->cfg.immutable;
}

const char *tfs_cache_dir(const struct tfs_cache *c)
{
    return c->cfg.cache_dir;
}

void tfs_cache_close(struct tfs_cache *c)
{
    if (c == NULL)
        return;
    if (c->opened) {
        tfs_fetch_stop(c);
        tfs_disk_close(c);
        tfs_meta_close(c);
        tfs_ram_cleanup(c);
        tfs_trace_close(c->trace);
    }
    pthread_rwlock_destroy(&c->source_lock);
    tfs_free(c->cfg.trace_path);
    tfs_free(c->cfg.manifest);
    tfs_free(c->cfg.cache_dir);
    tfs_free(c);
}

/* ---- block identity ---- */

void tfs_block_ref_init(struct tfs_cache *c, struct tfs_block_ref *r,
                        const char *key, const struct tfs_stat *st,
                        uint64_t index)
{
    uint64_t bs = c->cfg.block_size;

    r->key = key;
    r->version = st->version;
    r->obj_size = st->size;
    r->index = index;
    r->off = index * bs;
    r->len = r->off >= st->size ? 0 : (size_t)TFS_MIN(bs, st->size - r->off);
}

void tfs_block_id(struct tfs_cache *c, const struct tfs_block_ref *r,
                  uint8_t *id)
{
    XXH3_state_t s;
    uint8_t tail[16];
    XXH128_hash_t h;

    tfs_put_le64(tail, r->index);
    tfs_put_le64(tail + 8, c->cfg.block_size);
    XXH3_128bits_reset(&s);
    XXH3_128bits_update(&s, c->ns, sizeof(c->ns));
    XXH3_128bits_update(&s, r->key, strlen(r->key) + 1);
    XXH3_128bits_update(&s, r->version, strlen(r->version) + 1);
    XXH3_128bits_update(&s, tail, sizeof(tail));
    h = XXH3_128bits_digest(&s);
    memcpy(id, &h.high64, 8);
    memcpy(id + 8, &h.low64, 8);
}

/* ---- the block read path ---- */

/* We created b (LOADING): load it from disk, or queue a store read. */
static int cache_load(struct tfs_cache *c, const struct tfs_block_ref *r,
                      const uint8_t *id, struct tfs_block *b,
                      enum tfs_want want)
{
    int rc = -ENOENT;

    if (c->disk != NULL)
        rc = tfs_disk_load(c, r, id, b);
    if (rc == 0) {
        tfs_block_publish(c, b, 0, TFS_SRC_DISK);
        return 0;
    }
    if (rc != -ENOENT && rc != TFS_ECORRUPT)
        tfs_log(TFS_LOG_WARNING, "cache: disk tier read of '%s' failed: "
                "%s; reading from the store", r->key, tfs_strerror(rc));
    if (want == TFS_WANT_PREFETCH) {
        pthread_mutex_lock(&c->ram_lock);
        b->prefetched = true;
        pthread_mutex_unlock(&c->ram_lock);
        TFS_COUNT(&c->ctr, prefetch_bytes_issued, r->len);
    }
    rc = tfs_fetch_submit(c, r, b, want);
    if (rc < 0)
        tfs_block_publish(c, b, rc, TFS_SRC_NONE);
    return rc;
}

static bool cache_is_loading(struct tfs_cache *c, struct tfs_block *b)
{
    bool loading;

    pthread_mutex_lock(&c->ram_lock);
    loading = b->state == TFS_BLK_LOADING;
    pthread_mutex_unlock(&c->ram_lock);
    return loading;
}

/*
 * Wait for b; once its store read has run past the hedging threshold,
 * ask for a second read (or, while it is still queued behind
 * prefetches, for it to be moved ahead of them).
 */
static int cache_wait(struct tfs_cache *c, const struct tfs_block_ref *r,
                      struct tfs_block *b)
{
    uint64_t after = tfs_fetch_hedge_after_ns(c);

    if (after == 0)
        return tfs_ram_wait(c, b, 0);
    for (;;) {
        uint64_t start = __atomic_load_n(&b->load_start_ns,
                                         __ATOMIC_RELAXED);
        uint64_t now = tfs_now_ns();
        int rc;

        if (now < start + after) {
            rc = tfs_ram_wait(c, b, start + after - now);
            if (rc != -ETIMEDOUT)
                return rc;
            continue;                   /* its read may have started since */
        }
        switch (tfs_fetch_hedge(c, r, b)) {
        case TFS_HEDGE_QUEUED:          /* look again once it could run */
        case TFS_HEDGE_BUSY:            /* or once the pool is less busy */
            rc = tfs_ram_wait(c, b, after);
            if (rc != -ETIMEDOUT)
                return rc;
            break;
        case TFS_HEDGE_SENT:
        case TFS_HEDGE_NONE:
            return tfs_ram_wait(c, b, 0);
        }
    }
}

int tfs_cache_block(struct tfs_cache *c, const struct tfs_block_ref *r,
                    enum tfs_want want, struct tfs_block **out,
                    uint64_t *waited_ns)
{
    uint8_t id[TFS_BLOCK_ID_LEN];
    struct tfs_block *b;
    uint64_t t0 = tfs_now_ns();
    bool created;
    int rc;

    if (waited_ns != NULL)
        *waited_ns = 0;
    tfs_block_id(c, r, id);
    rc = tfs_ram_get(c, id, r->len, &b, &created);
    if (rc < 0)
        return rc;
    if (created)
        cache_load(c, r, id, b, want);
    if (want == TFS_WANT_PREFETCH) {
        tfs_ram_put(c, b);
        return 0;
    }
    if (cache_is_loading(c, b) && want != TFS_WANT_PEER) {
        rc = cache_wait(c, r, b);
        if (waited_ns != NULL)
            *waited_ns = tfs_now_ns() - t0;
    } else {
        rc = tfs_ram_wait(c, b, 0);
    }
    if (rc < 0) {
        tfs_ram_put(c, b);
        return rc;
    }
    *out = b;
    return 0;
}

int tfs_cache_block_start(struct tfs_cache *c, const struct tfs_block_ref *r,
                          struct tfs_block **out)
{
    uint8_t id[TFS_BLOCK_ID_LEN];
    struct tfs_block *b;
    bool created;
    int rc;

    tfs_block_id(c, r, id);
    rc = tfs_ram_get(c, id, r->len, &b, &created);
    if (rc < 0)
        return rc;
    if (created)
        cache_load(c, r, id, b, TFS_WANT_DEMAND);
    if (cache_is_loading(c, b)) {
        *out = b;
        return 1;
    }
    rc = tfs_ram_wait(c, b, 0);         /* READY or FAILED: no wait */
    if (rc < 0) {
        tfs_ram_put(c, b);
        return rc;
    }
    *out = b;
    return 0;
}

/* Queue block r unless it is in RAM (or loading), or, with skip_disk,
   in the disk tier; the bytes queued. */
static size_t cache_block_prefetch(struct tfs_cache *c,
                                   const struct tfs_block_ref *r,
                                   bool skip_disk)
{
    uint8_t id[TFS_BLOCK_ID_LEN];
    struct tfs_block *b;

    tfs_block_id(c, r, id);
    b = tfs_ram_find(c, id);
    if (b != NULL) {
        tfs_ram_put(c, b);
        return 0;
    }
    if (skip_disk && c->disk != NULL && tfs_disk_has(c, id))
        return 0;
    return tfs_cache_block(c, r, TFS_WANT_PREFETCH, &b, NULL) == 0 ? r->len
                                                                  : 0;
}

void tfs_cache_block_prefetch(struct tfs_cache *c,
                              const struct tfs_block_ref *r)
{
    cache_block_prefetch(c, r, false);
}

/* Every block of key (version st) to cache_block_prefetch; bytes queued. */
static uint64_t cache_prefetch_object(struct tfs_cache *c, const char *key,
                                      const struct tfs_stat *st,
                                      bool skip_disk)
{
    uint64_t n_blocks = (st->size + c->cfg.block_size - 1) /
                        c->cfg.block_size;
    uint64_t queued = 0;

    tfs_fetch_batch_begin();            /* together: spans (fetch.c) */
    for (uint64_t i = 0; i < n_blocks; i++) {
        struct tfs_block_ref r;

        tfs_block_ref_init(c, &r, key, st, i);
        queued += cache_block_prefetch(c, &r, skip_disk);
    }
    tfs_fetch_batch_end(c);
    return queued;
}

/* ---- the cache group's view (peer.h) ---- */

int tfs_cache_add_source(struct tfs_cache *c,
                         const struct tfs_cache_source *s)
{
    int rc = 0;

    pthread_rwlock_wrlock(&c->source_lock);     /* no call in flight */
    if (c->n_sources == TFS_CACHE_SOURCES)
        rc = -ENOSPC;
    else
        c->sources[c->n_sources++] = *s;
    pthread_rwlock_unlock(&c->source_lock);
    return rc;
}

void tfs_cache_remove_source(struct tfs_cache *c, void *arg)
{
    pthread_rwlock_wrlock(&c->source_lock);
    for (unsigned i = 0; i < c->n_sources; i++) {
        if (c->sources[i].arg == arg) {
            memmove(&c->sources[i], &c->sources[i + 1],
                    (c->n_sources - i - 1) * sizeof(c->sources[0]));
            c->n_sources--;
            break;
        }
    }
    pthread_rwlock_unlock(&c->source_lock);
}

int tfs_cache_peer_ref(struct tfs_cache *c, const char *key,
                       const char *version, uint64_t obj_size,
                       uint64_t index, struct tfs_peer_block *pb)
{
    struct tfs_stat st = {.size = obj_size};
    struct tfs_block_ref r;

    if (index >= (obj_size + c->cfg.block_size - 1) / c->cfg.block_size)
        return tfs_err(TFS_EFORMAT, "block %llu of '%s' (%llu bytes): past "
                       "its end", (unsigned long long)index, key,
                       (unsigned long long)obj_size);
    snprintf(st.version, sizeof(st.version), "%s", version);
    if (strcmp(st.version, version) != 0)
        return tfs_err(TFS_EFORMAT, "version of '%s': too long", key);
    tfs_block_ref_init(c, &r, key, &st, index);
    r.version = version;
    memset(pb, 0, sizeof(*pb));
    tfs_block_id(c, &r, pb->id);
    pb->key = key;
    pb->version = version;
    pb->obj_size = obj_size;
    pb->index = index;
    pb->off = r.off;
    pb->len = r.len;
    return 0;
}

int tfs_cache_peer_get(struct tfs_cache *c, const struct tfs_peer_block *pb,
                       void **pin, const unsigned char **data,
                       uint64_t *digest, enum tfs_peer_src *from)
{
    struct tfs_block_ref r = {
        .key = pb->key, .version = pb->version, .obj_size = pb->obj_size,
        .index = pb->index, .off = pb->off, .len = pb->len};
    struct tfs_block *b = tfs_ram_find(c, pb->id);
    int rc;

    *from = TFS_PEER_FROM_RAM;
    if (b != NULL) {
        rc = tfs_ram_wait(c, b, 0);
        tfs_ram_put(c, b);
        b = NULL;
        if (rc < 0)
            *from = TFS_PEER_FROM_STORE;    /* it is loaded again below */
    } else {
        *from = c->disk != NULL && tfs_disk_has(c, pb->id)
                    ? TFS_PEER_FROM_DISK : TFS_PEER_FROM_STORE;
    }
    rc = tfs_cache_block(c, &r, TFS_WANT_PEER, &b, NULL);
    if (rc < 0)
        return rc;
    if (b->len != pb->len) {
        tfs_ram_put(c, b);
        return tfs_err(TFS_ECHANGED, "block %llu of '%s': %zu bytes, not "
                       "%zu", (unsigned long long)pb->index, pb->key, b->len,
                       pb->len);
    }
    pthread_mutex_lock(&c->ram_lock);
    rc = b->has_digest ? 1 : 0;
    *digest = b->digest;
    pthread_mutex_unlock(&c->ram_lock);
    if (rc == 0) {                      /* first served: hash it once */
        rc = tfs_csum_digest(b->data, b->len, digest);
        if (rc < 0) {
            tfs_ram_put(c, b);
            return rc;
        }
        pthread_mutex_lock(&c->ram_lock);
        b->digest = *digest;
        b->has_digest = true;
        pthread_mutex_unlock(&c->ram_lock);
    }
    *pin = b;
    *data = b->data;
    return 0;
}

void tfs_cache_peer_put(struct tfs_cache *c, void *pin)
{
    tfs_ram_put(c, pin);
}

int tfs_cache_account(struct tfs_cache *c, struct tfs_block *b, size_t n)
{
    bool again;
    size_t from_src;
    int src;

    pthread_mutex_lock(&c->ram_lock);
    src = b->src;
    again = b->src_left == 0;
    from_src = TFS_MIN(n, b->src_left);
    b->src_left -= from_src;
    if (b->src_left == 0)
        b->src = TFS_SRC_NONE;
    tfs_ram_read_locked(c, b, again);
    if (b->prefetched) {
        b->prefetched = false;
        TFS_COUNT(&c->ctr, prefetch_bytes_used, b->len);
    }
    pthread_mutex_unlock(&c->ram_lock);
    if (src == TFS_SRC_STORE)
        TFS_COUNT(&c->ctr, miss_bytes, from_src);
    else if (src == TFS_SRC_PEER)
        TFS_COUNT(&c->ctr, hit_bytes_peer, from_src);
    else if (src == TFS_SRC_SHARED)
        TFS_COUNT(&c->ctr, hit_bytes_shared, from_src);
    else if (src == TFS_SRC_DISK)
        TFS_COUNT(&c->ctr, hit_bytes_disk, from_src);
    else
        from_src = 0;
    TFS_COUNT(&c->ctr, hit_bytes_ram, n - from_src);
    if (from_src == 0)
        return TFS_TRACE_RAM;
    return src == TFS_SRC_DISK ? TFS_TRACE_DISK : TFS_TRACE_STORE;
}

/* ---- warmup support ---- */

int tfs_cache_fill(struct tfs_cache *c, const char *key, uint64_t *bytes)
{
    struct tfs_stat st;
    uint64_t n_blocks;
    int rc = tfs_cache_stat(c, key, &st);

    if (rc < 0)
        return rc;
    n_blocks = (st.size + c->cfg.block_size - 1) / c->cfg.block_size;
    for (uint64_t i = 0; i < TFS_MAX(n_blocks, 1) && rc == 0; i++) {
        struct tfs_block_ref r;
        struct tfs_block *b;
        uint8_t id[TFS_BLOCK_ID_LEN];

        tfs_block_ref_init(c, &r, key, &st, i);
        tfs_block_id(c, &r, id);
        if (tfs_disk_has(c, id))
            continue;
        rc = tfs_cache_block(c, &r, TFS_WANT_FILL, &b, NULL);
        if (rc < 0)
            break;
        tfs_disk_store(c, &r, b, true);
        tfs_ram_spend(c, b);
        TFS_COUNT(&c->ctr, warmup_bytes, r.len);
        tfs_ram_put(c, b);
    }
    if (rc == 0 && bytes != NULL)
        *bytes = st.size;
    return rc;
}

int tfs_cache_cached_bytes(struct tfs_cache *c, const char *key,
                           uint64_t *bytes)
{
    struct tfs_stat st;
    uint64_t n_blocks;
    int rc = tfs_cache_stat(c, key, &st);

    if (rc < 0)
        return rc;
    *bytes = 0;
    n_blocks = (st.size + c->cfg.block_size - 1) / c->cfg.block_size;
    for (uint64_t i = 0; i < n_blocks; i++) {
        struct tfs_block_ref r;
        struct tfs_block *b = NULL;
        uint8_t id[TFS_BLOCK_ID_LEN];

        tfs_block_ref_init(c, &r, key, &st, i);
        tfs_block_id(c, &r, id);
        if (c->disk == NULL)
            b = tfs_ram_find(c, id);
        if (b != NULL || tfs_disk_has(c, id))
            *bytes += r.len;
        if (b != NULL)
            tfs_ram_put(c, b);
    }
    return 0;
}

int tfs_cache_prefetch(struct tfs_cache *c, const char *const *keys,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tfs_stat st;

        if (tfs_cache_stat(c, keys[i], &st) == 0)
            cache_prefetch_object(c, keys[i], &st, false);
    }
    return 0;
}

int tfs_cache_prefetch_misses(struct tfs_cache *c, const char *key,
                              const struct tfs_stat *given, uint64_t *size,
                              uint64_t *queued)
{
    struct tfs_stat st;
    int rc = 0;

    *size = *queued = 0;
    if (given != NULL)
        st = *given;
    else
        rc = tfs_cache_stat(c, key, &st);
    if (rc < 0)
        return rc;
    *size = st.size;
    if (c->cfg.mem_cache > 0)           /* prefetch needs a RAM tier */
        *queued = cache_prefetch_object(c, key, &st, true);
    return 0;
}

void tfs_cache_flush(struct tfs_cache *c)
{
    tfs_disk_flush(c);
}

/* ---- statistics ---- */

/* The cache's section of the registry: the counters, then the rest. */
static const struct tfs_metric cache_metric_table[] = {
#define X(name, unit, help)                                                \
    TFS_METRIC_DESC(struct tfs_cache_metrics, U64, name, COUNTER, unit,    \
                    NULL, help)
    TFS_COUNTERS(X)
#undef X
#define X(...) TFS_METRIC_DESC(struct tfs_cache_metrics, __VA_ARGS__)
    TFS_CACHE_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_cache = {
    .name = NULL,
    .prom_prefix = "",
    .when = "every mount, and alone in tfs_cache_stats_json and "
            "tfs_cache_stats_prometheus",
    .m = cache_metric_table,
    .n = TFS_ARRAY_LEN(cache_metric_table),
    .size = sizeof(struct tfs_cache_metrics),
};

void tfs_cache_metrics_get(struct tfs_cache *c, struct tfs_cache_metrics *out)
{
    struct tfs_retry_stats rs;

    memset(out, 0, sizeof(*out));
#define X(name, unit, help)                                                \
    out->name = atomic_load_explicit(&c->ctr.name, memory_order_relaxed);
    TFS_COUNTERS(X)
#undef X
    out->stall_seconds = (double)out->stall_ns / 1e9;
    tfs_retry_get_stats(c->st, &rs);
    out->retries = rs.retries;
    pthread_mutex_lock(&c->ram_lock);
    out->cache_bytes_ram = c->ram_bytes;
    out->cache_capacity_ram = c->cfg.mem_cache;
    pthread_mutex_unlock(&c->ram_lock);
    pthread_mutex_lock(&c->pool.lock);
    out->ram_pool_idle_bytes = c->pool.idle_bytes;
    out->ram_pool_out_bytes = __atomic_load_n(&c->pool.out_cap,
                                              __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->pool.lock);
    tfs_disk_usage(c, &out->cache_bytes_disk, &out->cache_blocks_disk,
                   &out->cache_capacity_disk);
    out->disk_tier = c->disk != NULL ? "on"
                     : c->disk_off[0] != '\0' ? c->disk_off : "none";
    out->backend_get_latency = &c->get_latency;
    out->read_latency = &c->read_latency;
    out->uptime_seconds = (double)(tfs_now_ns() - c->open_ns) / 1e9;
}

/* The cache's section alone, rendered into buf (the C API's contract). */
static int cache_render(struct tfs_cache *c, bool prom, char *buf,
                        size_t size, size_t *len)
{
    struct tfs_cache_metrics m;
    struct tfs_metric_src src = {.sec = &tfs_metrics_cache, .data = &m};
    struct tfs_buf b;
    int rc;

    tfs_cache_metrics_get(c, &m);
    tfs_buf_init(&b, SIZE_MAX);
    rc = prom ? tfs_metrics_prometheus(&b, &src, 1)
              : tfs_metrics_json(&b, &src, 1);
    if (rc == 0) {
        *len = b.len;
        if (b.len >= size)
            rc = -ENOSPC;
        if (size > 0) {
            size_t n = TFS_MIN(b.len, size - 1);
            memcpy(buf, tfs_buf_str(&b), n);
            buf[n] = '\0';
        }
    }
    tfs_buf_cleanup(&b);
    return rc;
}

int tfs_cache_stats_json(struct tfs_cache *c, char *buf, size_t size,
                         size_t *len)
{
    return cache_render(c, false, buf, size, len);
}

int tfs_cache_stats_prometheus(struct tfs_cache *c, char *buf, size_t size,
                               size_t *len)
{
    return cache_render(c, true, buf, size, len);
}
