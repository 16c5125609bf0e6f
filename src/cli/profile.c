/* SPDX-License-Identifier: MIT */
/*
 * `tierfs profile`: what a trace (or a dataset) says about the access
 * pattern, and what to do about it.
 *
 * From a trace the reads are turned into a stream of block accesses
 * (consecutive reads of one block by one open file count once, as the
 * cache's RAM tier would serve them), and for that stream we compute:
 *
 *   - reuse distances in bytes (the bytes of distinct blocks touched in
 *     between), exactly, with a Fenwick tree over access positions;
 *     the LRU miss-ratio curve follows directly;
 *   - the miss-ratio curve of the tinylfu policy, by simulating it at
 *     each cache size with the cache's own sketch and admission rule
 *     (cache/tinylfu.h: a newcomer must have two more accesses than the
 *     first block it would evict), in LRU order;
 *   - sizes, the sequential ratio, re-reads, the working set, latency by
 *     source; and advice (pack small files, cache size for 80% hits,
 *     readahead).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "tierfs/store.h"
#include "tierfs/trace.h"
#include "cache/tinylfu.h"
#include "cli/profile.h"
#include "common/hmap.h"
#include "common/util.h"

#define PROF_MRC_POINTS 24
#define PROF_SIZE_BUCKETS 16

struct prof_file {
    char    *key;                       /* owned */
    uint64_t size;
    uint64_t next_off;                  /* end of the last read */
    uint64_t last_block;                /* last block this open read */
    bool     have_block;
    bool     read_once;
};

struct prof_obj {
    uint64_t hash;
    uint64_t size;
};

struct prof_access {
    uint64_t id;                        /* hash of key and block */
    uint32_t size;                      /* block bytes */
    uint32_t bytes;                     /* bytes read by this access */
};

struct prof {
    uint64_t            block_size;
    /* open files by trace file number */
    struct prof_file   *files;
    size_t              n_files;
    /* every open's object (key hash, size), deduplicated later */
    struct prof_obj    *objs;
    size_t              n_objs;
    size_t              obj_cap;
    /* the access stream */
    struct prof_access *acc;
    size_t              n_acc;
    size_t              acc_cap;
    /* read statistics */
    uint64_t            reads;
    uint64_t            read_bytes;
    uint64_t            seq_bytes;
    uint64_t            src_reads[4];
    uint64_t           *lat_us;         /* per read */
    size_t              lat_cap;
    int                 rc;
};

/* ---- a map u64 -> u64 for at most n keys (common/hmap.h) ---- */

struct u64ent {
    struct tfs_hnode node;              /* in the map, by key */
    uint64_t         val;
};

struct u64map {
    struct tfs_hmap  map;               /* u64 keys; >= max buckets */
    struct u64ent   *ents;              /* max of them, owned */
    size_t           n;                 /* ents used: keys */
    size_t           max;
    size_t           cap;               /* power of two >= 2 max, 1024
                                           at least: sim_count's aging
                                           period is 8 cap accesses */
};

/* Room for n keys, allocated now: an insert never grows the map. */
static int u64map_init(struct u64map *m, size_t n)
{
    m->cap = 1024;
    while (m->cap < n * 2)
        m->cap <<= 1;
    m->n = 0;
    m->max = n;
    m->ents = tfs_calloc(n, sizeof(*m->ents));
    if (tfs_hmap_init(&m->map, n, NULL) < 0 || m->ents == NULL)
        return -ENOMEM;
    return 0;
}

static void u64map_cleanup(struct u64map *m)
{
    tfs_free(m->ents);
    tfs_hmap_cleanup(&m->map);
}

/* The value of key (inserting it with val 0 when absent). */
static uint64_t *u64map_slot(struct u64map *m, uint64_t key, bool *fresh)
{
    struct tfs_hnode *n = tfs_hmap_find_u64(&m->map, key);
    struct u64ent *e;
    int rc;

    *fresh = n == NULL;
    if (n != NULL)
        return &tfs_container_of(n, struct u64ent, node)->val;
    assert(m->n < m->max);
    e = &m->ents[m->n++];
    e->val = 0;
    rc = tfs_hmap_insert_u64(&m->map, &e->node, key);
    assert(rc == 0);                    /* buckets >= max: no doubling */
    (void)rc;
    return &e->val;
}

/* ---- collecting ---- */

static int prof_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 1024;
    void *np;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    np = tfs_realloc(*p, c * elem);
    if (np == NULL)
        return -ENOMEM;
    *p = np;
    *cap = c;
    return 0;
}

static int prof_open(struct prof *pf, const struct tfs_trace_event *ev)
{
    size_t cap = pf->n_files;
    uint64_t h = XXH3_64bits(ev->key, strlen(ev->key));
    int rc;

    if (ev->file >= pf->n_files) {
        rc = prof_grow((void **)&pf->files, &cap, (size_t)ev->file + 1,
                       sizeof(*pf->files));
        if (rc < 0)
            return rc;
        memset(pf->files + pf->n_files, 0,
               (cap - pf->n_files) * sizeof(*pf->files));
        pf->n_files = cap;
    }
    tfs_free(pf->files[ev->file].key);
    pf->files[ev->file] = (struct prof_file){.size = ev->size};
    pf->files[ev->file].key = tfs_strdup(ev->key);
    if (pf->files[ev->file].key == NULL)
        return -ENOMEM;
    rc = prof_grow((void **)&pf->objs, &pf->obj_cap, pf->n_objs + 1,
                   sizeof(*pf->objs));
    if (rc == 0)
        pf->objs[pf->n_objs++] = (struct prof_obj){h, ev->size};
    return rc;
}

/* Add the block accesses of one read. */
static int prof_blocks(struct prof *pf, struct prof_file *f,
                       const struct tfs_trace_event *ev)
{
    uint64_t bs = pf->block_size;
    uint64_t end = ev->off + ev->len;

    for (uint64_t b = ev->off / bs; b * bs < end; b++) {
        uint64_t lo = TFS_MAX(ev->off, b * bs);
        uint64_t hi = TFS_MIN(end, (b + 1) * bs);
        struct prof_access *a;
        int rc;

        if (f->have_block && f->last_block == b && pf->n_acc > 0) {
            pf->acc[pf->n_acc - 1].bytes += (uint32_t)(hi - lo);
            continue;                   /* the RAM tier's job */
        }
        rc = prof_grow((void **)&pf->acc, &pf->acc_cap, pf->n_acc + 1,
                       sizeof(*pf->acc));
        if (rc < 0)
            return rc;
        a = &pf->acc[pf->n_acc++];
        a->id = XXH3_64bits_withSeed(f->key, strlen(f->key), b);
        a->size = (uint32_t)TFS_MIN(bs, f->size > b * bs ? f->size - b * bs
                                                         : 1);
        a->bytes = (uint32_t)(hi - lo);
        f->last_block = b;
        f->have_block = true;
    }
    return 0;
}

static int prof_read(struct prof *pf, const struct tfs_trace_event *ev)
{
    struct prof_file *f;
    int rc;

    if (ev->file >= pf->n_files || pf->files[ev->file].key == NULL)
        return tfs_err(TFS_EFORMAT, "trace: read of file %u before its "
                       "open", ev->file);
    f = &pf->files[ev->file];
    pf->reads++;
    pf->read_bytes += ev->len;
    if (ev->off == f->next_off)
        pf->seq_bytes += ev->len;
    f->next_off = ev->off + ev->len;
    pf->src_reads[ev->src & 3]++;
    rc = prof_grow((void **)&pf->lat_us, &pf->lat_cap, pf->reads,
                   sizeof(uint64_t));
    if (rc < 0)
        return rc;
    pf->lat_us[pf->reads - 1] = ev->latency_us;
    return ev->len > 0 ? prof_blocks(pf, f, ev) : 0;
}

static int prof_event(void *arg, const struct tfs_trace_event *ev)
{
    struct prof *pf = arg;

    if (ev->type == 1)
        return prof_open(pf, ev);
    if (ev->type == 2)
        return prof_read(pf, ev);
    return 0;
}

/* ---- reuse distances and the LRU curve ---- */

/* Fenwick tree over access positions, weighted by block bytes. */
static void bit_add(uint64_t *t, size_t n, size_t i, int64_t v)
{
    for (i++; i <= n; i += i & (~i + 1))
        t[i - 1] += (uint64_t)v;
}

static uint64_t bit_sum(const uint64_t *t, size_t i)   /* [0, i) */
{
    uint64_t s = 0;

    for (; i > 0; i -= i & (~i + 1))
        s += t[i - 1];
    return s;
}

/*
 * dist[i]: bytes of distinct blocks touched since the previous access to
 * the same block (UINT64_MAX for a first access).
 */
static int prof_reuse(const struct prof *pf, uint64_t *dist, uint64_t *ws)
{
    uint64_t *tree = tfs_calloc(pf->n_acc + 1, sizeof(uint64_t));
    struct u64map last;
    int rc = u64map_init(&last, pf->n_acc);

    if (tree == NULL || rc < 0) {
        tfs_free(tree);
        u64map_cleanup(&last);
        return -ENOMEM;
    }
    *ws = 0;
    for (size_t i = 0; i < pf->n_acc; i++) {
        bool fresh;
        uint64_t *slot = u64map_slot(&last, pf->acc[i].id, &fresh);
        size_t prev = (size_t)*slot - 1;

        if (fresh) {
            dist[i] = UINT64_MAX;
            *ws += pf->acc[i].size;
        } else {
            dist[i] = bit_sum(tree, i) - bit_sum(tree, prev + 1);
            bit_add(tree, pf->n_acc, prev, -(int64_t)pf->acc[i].size);
        }
        bit_add(tree, pf->n_acc, i, pf->acc[i].size);
        *slot = i + 1;
    }
    tfs_free(tree);
    u64map_cleanup(&last);
    return 0;
}

/* Hit fraction (of bytes read) of LRU with a cache of c bytes. */
static double prof_lru_hit(const struct prof *pf, const uint64_t *dist,
                           uint64_t c)
{
    uint64_t hit = 0;
    uint64_t all = 0;

    for (size_t i = 0; i < pf->n_acc; i++) {
        all += pf->acc[i].bytes;
        if (dist[i] != UINT64_MAX && dist[i] + pf->acc[i].size <= c)
            hit += pf->acc[i].bytes;
    }
    return all ? (double)hit / (double)all : 0.0;
}

/* ---- the tinylfu simulation ---- */

/*
 * The disk tier at one cache size, run as the cache runs it: the cache's
 * own frequency sketch (cache/tinylfu.h, sized as the cache sizes it for
 * that capacity, halvings included), the admission test against the
 * first victim only, eviction by bytes and by entry count.  Where the
 * index evicts the least recent of 16 sampled entries, this evicts the
 * least recent of all (strict LRU, which the sample approximates), so
 * the prediction is deterministic.
 */
struct sim_ent {
    uint64_t id;
    uint32_t size;
    uint32_t prev;                      /* LRU list, indices; 0 = none */
    uint32_t next;
};

struct cli_profile_sim {
    struct sim_ent    *e;               /* 1-based; e[0] the sentinel */
    uint32_t           n;
    uint32_t           free;            /* free list through next */
    struct u64map      where;           /* id -> index */
    struct tfs_tinylfu freq;            /* cells owned */
    uint64_t           freq_ops;        /* freq.ops points here */
    uint64_t           cap;             /* bytes */
    uint64_t           used;            /* bytes resident */
    uint64_t           n_res;           /* entries resident */
    uint64_t           max_res;         /* the index's entry bound */
};

static void sim_unlink(struct cli_profile_sim *s, uint32_t i)
{
    s->e[s->e[i].prev].next = s->e[i].next;
    s->e[s->e[i].next].prev = s->e[i].prev;
}

static void sim_front(struct cli_profile_sim *s, uint32_t i)
{
    s->e[i].next = s->e[0].next;
    s->e[i].prev = 0;
    s->e[s->e[0].next].prev = i;
    s->e[0].next = i;
}

/* Remove a resident entry from the map (set its index to 0). */
static void sim_forget(struct cli_profile_sim *s, uint64_t id)
{
    bool fresh;

    *u64map_slot(&s->where, id, &fresh) = 0;
}

static void sim_evict(struct cli_profile_sim *s, uint32_t v)
{
    sim_unlink(s, v);
    sim_forget(s, s->e[v].id);
    s->used -= s->e[v].size;
    s->n_res--;
    s->e[v].next = s->free;
    s->free = v;
}

static bool sim_over(const struct cli_profile_sim *s, uint32_t size)
{
    return s->used + size > s->cap || s->n_res + 1 > s->max_res;
}

/* Make room for size bytes, as the index does; false when declined. */
static bool sim_make_room(struct cli_profile_sim *s, uint64_t id,
                          uint32_t size)
{
    bool checked = false;

    while (sim_over(s, size)) {
        uint32_t v = s->e[0].prev;

        if (v == 0)
            return false;
        if (!checked &&
            !tfs_tinylfu_admits(tfs_tinylfu_count(&s->freq, id),
                                tfs_tinylfu_count(&s->freq, s->e[v].id)))
            return false;
        checked = true;
        sim_evict(s, v);
    }
    return true;
}

bool cli_profile_sim_access(struct cli_profile_sim *s, uint64_t id,
                            uint32_t size, bool *admitted)
{
    bool fresh;
    uint64_t *w = u64map_slot(&s->where, id, &fresh);
    uint32_t i;

    tfs_tinylfu_add(&s->freq, id);
    *admitted = false;
    if (*w != 0) {
        i = (uint32_t)*w;
        sim_unlink(s, i);
        sim_front(s, i);
        return true;
    }
    if (size > s->cap || !sim_make_room(s, id, size))
        return false;
    i = s->free ? s->free : ++s->n;
    if (s->free)
        s->free = s->e[i].next;
    s->e[i].id = id;
    s->e[i].size = size;
    sim_front(s, i);
    s->used += size;
    s->n_res++;
    w = u64map_slot(&s->where, id, &fresh);
    *w = i;
    *admitted = true;
    return false;
}

void cli_profile_sim_destroy(struct cli_profile_sim *s)
{
    if (s == NULL)
        return;
    tfs_free(s->e);
    tfs_free(s->freq.cells);
    u64map_cleanup(&s->where);
    tfs_free(s);
}

int cli_profile_sim_create(struct cli_profile_sim **out, uint64_t capacity,
                           size_t max_ids)
{
    struct cli_profile_sim *s = tfs_calloc(1, sizeof(*s));
    uint64_t width = tfs_tinylfu_width(tfs_tinylfu_blocks(capacity));

    if (s == NULL)
        return -ENOMEM;
    s->cap = capacity;
    s->max_res = tfs_tinylfu_max_entries(width);
    s->freq = (struct tfs_tinylfu){.width = width, .ops = &s->freq_ops};
    s->freq.cells = tfs_calloc(TFS_TINYLFU_ROWS * width, 1);
    s->e = tfs_calloc(max_ids + 2, sizeof(*s->e));
    if (u64map_init(&s->where, max_ids) < 0 || s->freq.cells == NULL ||
        s->e == NULL) {
        cli_profile_sim_destroy(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

static double prof_tinylfu_hit(const struct prof *pf, uint64_t cap)
{
    struct cli_profile_sim *s;
    uint64_t hit = 0;
    uint64_t all = 0;
    bool admitted;

    if (cli_profile_sim_create(&s, cap, pf->n_acc) < 0)
        return -1.0;
    for (size_t i = 0; i < pf->n_acc; i++) {
        all += pf->acc[i].bytes;
        if (cli_profile_sim_access(s, pf->acc[i].id, pf->acc[i].size,
                                   &admitted))
            hit += pf->acc[i].bytes;
    }
    cli_profile_sim_destroy(s);
    return all ? (double)hit / (double)all : 0.0;
}

/* ---- the report ---- */

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

struct sizes {
    uint64_t n;
    uint64_t total;
    double   mean;
    uint64_t median;
    uint64_t p99;
    uint64_t hist[PROF_SIZE_BUCKETS];   /* < 4K, < 16K, ... */
};

static void sizes_of(uint64_t *v, size_t n, struct sizes *s)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    if (n == 0)
        return;
    if (n > 1)
        qsort(v, n, sizeof(uint64_t), u64_cmp);
    for (size_t i = 0; i < n; i++) {
        unsigned b = 0;
        s->total += v[i];
        while (b + 1 < PROF_SIZE_BUCKETS && v[i] >= (4096ull << (2 * b)))
            b++;
        s->hist[b]++;
    }
    s->mean = (double)s->total / (double)n;
    s->median = v[n / 2];
    s->p99 = v[(size_t)((double)(n - 1) * 0.99)];
}

/* Sizes of the distinct objects of the trace (dedup by key hash). */
static int prof_objects(struct prof *pf, struct sizes *s)
{
    struct u64map seen;
    uint64_t *v = tfs_malloc((pf->n_objs + 1) * sizeof(uint64_t));
    size_t n = 0;

    if (v == NULL || u64map_init(&seen, pf->n_objs) < 0) {
        tfs_free(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < pf->n_objs; i++) {
        bool fresh;
        u64map_slot(&seen, pf->objs[i].hash, &fresh);
        if (fresh)
            v[n++] = pf->objs[i].size;
    }
    sizes_of(v, n, s);
    u64map_cleanup(&seen);
    tfs_free(v);
    return 0;
}

static void put_sizes(struct tfs_buf *b, bool json, const struct sizes *s)
{
    char x[32];
    char y[32];
    char z[32];
    char w[32];

    if (json) {
        tfs_buf_printf(b, "\"files\": %llu, \"bytes\": %llu, "
                       "\"size_mean\": %.0f, \"size_median\": %llu, "
                       "\"size_p99\": %llu, \"size_histogram\": [",
                       (unsigned long long)s->n,
                       (unsigned long long)s->total, s->mean,
                       (unsigned long long)s->median,
                       (unsigned long long)s->p99);
        for (int i = 0; i < PROF_SIZE_BUCKETS; i++)
            tfs_buf_printf(b, "%s%llu", i ? ", " : "",
                           (unsigned long long)s->hist[i]);
        tfs_buf_puts(b, "]");
        return;
    }
    tfs_buf_printf(b, "files          %llu, %s in all\n"
                   "file size      mean %s, median %s, p99 %s\n"
                   "size histogram", (unsigned long long)s->n,
                   tfs_fmt_bytes(x, 32, (double)s->total),
                   tfs_fmt_bytes(y, 32, s->mean),
                   tfs_fmt_bytes(z, 32, (double)s->median),
                   tfs_fmt_bytes(w, 32, (double)s->p99));
    for (int i = 0; i < PROF_SIZE_BUCKETS; i++) {
        if (s->hist[i] == 0)
            continue;
        tfs_buf_printf(b, "  <%s: %llu",
                       tfs_fmt_bytes(x, 32, (double)(4096ull << (2 * i))),
                       (unsigned long long)s->hist[i]);
    }
    tfs_buf_puts(b, "\n");
}

/* Advice on packing, from the object sizes. */
static void put_pack_advice(struct tfs_buf *b, bool json,
                            const struct sizes *s)
{
    bool pack = s->n >= 1000 && s->median < (1u << 20);
    double shards = ceil((double)s->total / (256.0 * (1 << 20)));

    if (json) {
        tfs_buf_printf(b, ", \"advice_pack\": %s, \"requests_unpacked\": "
                       "%llu, \"requests_packed\": %.0f", pack ? "true"
                                                                : "false",
                       (unsigned long long)s->n, shards);
        return;
    }
    if (pack)
        tfs_buf_printf(b, "advice: pack the small files (`tierfs pack`): "
                       "one epoch then needs ~%.0f requests for 256 MiB "
                       "shards instead of %llu, one per file; at a few ms "
                       "per request that is the difference between %.0f s "
                       "and %.1f s of request latency per reader\n",
                       shards, (unsigned long long)s->n,
                       (double)s->n * 0.003, shards * 0.003);
    else
        tfs_buf_puts(b, "advice: files are large enough; packing would "
                        "gain little\n");
}

struct curve {
    uint64_t size[PROF_MRC_POINTS];
    double   lru[PROF_MRC_POINTS];
    double   tiny[PROF_MRC_POINTS];
    int      n;
};

static void prof_curves(const struct prof *pf, const uint64_t *dist,
                        uint64_t ws, struct curve *cv)
{
    uint64_t c = TFS_MAX(pf->block_size, ws / 64);

    cv->n = 0;
    while (cv->n < PROF_MRC_POINTS) {
        cv->size[cv->n] = c;
        cv->lru[cv->n] = prof_lru_hit(pf, dist, c);
        cv->tiny[cv->n] = prof_tinylfu_hit(pf, c);
        cv->n++;
        if (c >= 2 * ws)
            break;
        c = c * 3 / 2 + 1;
    }
}

static void put_curves(struct tfs_buf *b, bool json, const struct curve *cv)
{
    char x[32];

    if (json) {
        tfs_buf_puts(b, ", \"mrc\": [");
        for (int i = 0; i < cv->n; i++)
            tfs_buf_printf(b, "%s{\"cache_bytes\": %llu, \"hit_lru\": %.4f, "
                           "\"hit_tinylfu\": %.4f}", i ? ", " : "",
                           (unsigned long long)cv->size[i], cv->lru[i],
                           cv->tiny[i]);
        tfs_buf_puts(b, "]");
        return;
    }
    tfs_buf_puts(b, "miss-ratio curve (predicted hit rate of bytes read)\n"
                    "  cache size        lru   tinylfu\n");
    for (int i = 0; i < cv->n; i++)
        tfs_buf_printf(b, "  %-12s  %6.1f%%  %6.1f%%\n",
                       tfs_fmt_bytes(x, 32, (double)cv->size[i]),
                       100 * cv->lru[i], 100 * cv->tiny[i]);
}

static void put_cache_advice(struct tfs_buf *b, bool json,
                             const struct curve *cv, uint64_t ws)
{
    uint64_t need = 0;
    char x[32];
    char y[32];

    for (int i = 0; i < cv->n && need == 0; i++)
        if (cv->tiny[i] >= 0.8)
            need = cv->size[i];
    if (json) {
        tfs_buf_printf(b, ", \"cache_for_80pct\": %llu",
                       (unsigned long long)need);
        return;
    }
    if (need)
        tfs_buf_printf(b, "advice: a cache of %s (of a %s working set) "
                       "gives 80%% hits with the default eviction\n",
                       tfs_fmt_bytes(x, 32, (double)need),
                       tfs_fmt_bytes(y, 32, (double)ws));
    else
        tfs_buf_printf(b, "advice: no cache size reaches 80%% hits: most "
                       "reads are first touches (working set %s); warm "
                       "the cache (`tierfs warmup`) before the job\n",
                       tfs_fmt_bytes(x, 32, (double)ws));
}

static void put_reads(struct tfs_buf *b, bool json, struct prof *pf,
                      uint64_t rereads, uint64_t acc_bytes)
{
    double seq = pf->read_bytes ? (double)pf->seq_bytes /
                                      (double)pf->read_bytes : 0;
    double re = acc_bytes ? (double)rereads / (double)acc_bytes : 0;
    uint64_t p50 = 0;
    uint64_t p99 = 0;

    if (pf->reads > 0) {
        qsort(pf->lat_us, pf->reads, sizeof(uint64_t), u64_cmp);
        p50 = pf->lat_us[pf->reads / 2];
        p99 = pf->lat_us[(size_t)((double)(pf->reads - 1) * 0.99)];
    }
    if (json) {
        tfs_buf_printf(b, ", \"reads\": %llu, \"read_bytes\": %llu, "
                       "\"sequential_ratio\": %.4f, \"reread_ratio\": %.4f, "
                       "\"read_latency_p50_us\": %llu, "
                       "\"read_latency_p99_us\": %llu, \"reads_ram\": %llu, "
                       "\"reads_disk\": %llu, \"reads_store\": %llu",
                       (unsigned long long)pf->reads,
                       (unsigned long long)pf->read_bytes, seq, re,
                       (unsigned long long)p50, (unsigned long long)p99,
                       (unsigned long long)pf->src_reads[0],
                       (unsigned long long)pf->src_reads[1],
                       (unsigned long long)pf->src_reads[2]);
        return;
    }
    tfs_buf_printf(b, "reads          %llu, sequential %.1f%% of bytes, "
                   "re-read %.1f%% of bytes\nread latency   p50 %llu us, "
                   "p99 %llu us (RAM %llu, disk %llu, store %llu reads)\n",
                   (unsigned long long)pf->reads, 100 * seq, 100 * re,
                   (unsigned long long)p50, (unsigned long long)p99,
                   (unsigned long long)pf->src_reads[0],
                   (unsigned long long)pf->src_reads[1],
                   (unsigned long long)pf->src_reads[2]);
    if (seq > 0.7)
        tfs_buf_puts(b, "advice: reads are sequential: a larger "
                        "--max-readahead (256M) keeps the store busy\n");
    else if (seq < 0.3)
        tfs_buf_puts(b, "advice: reads are random: readahead rarely "
                        "helps; keep --max-readahead small (8M) and use "
                        "prefetch hints or packing\n");
}

static int prof_report(struct prof *pf, bool json, struct tfs_buf *b)
{
    uint64_t *dist = tfs_malloc((pf->n_acc + 1) * sizeof(uint64_t));
    struct sizes sz;
    struct curve cv;
    uint64_t ws = 0;
    uint64_t rereads = 0;
    uint64_t acc_bytes = 0;
    char x[32];
    int rc = dist ? prof_reuse(pf, dist, &ws) : -ENOMEM;

    if (rc == 0)
        rc = prof_objects(pf, &sz);
    if (rc < 0) {
        tfs_free(dist);
        return rc;
    }
    for (size_t i = 0; i < pf->n_acc; i++) {
        acc_bytes += pf->acc[i].bytes;
        if (dist[i] != UINT64_MAX)
            rereads += pf->acc[i].bytes;
    }
    prof_curves(pf, dist, ws, &cv);
    tfs_buf_puts(b, json ? "{" : "");
    put_sizes(b, json, &sz);
    put_reads(b, json, pf, rereads, acc_bytes);
    if (json)
        tfs_buf_printf(b, ", \"working_set_bytes\": %llu, "
                       "\"block_size\": %llu", (unsigned long long)ws,
                       (unsigned long long)pf->block_size);
    else
        tfs_buf_printf(b, "working set    %s (blocks of %s)\n",
                       tfs_fmt_bytes(x, 16, (double)ws),
                       tfs_fmt_bytes(x + 16, 16, (double)pf->block_size));
    put_curves(b, json, &cv);
    put_pack_advice(b, json, &sz);
    put_cache_advice(b, json, &cv, ws);
    tfs_buf_puts(b, json ? "}\n" : "");
    tfs_free(dist);
    return 0;
}

static void prof_cleanup(struct prof *pf)
{
    for (size_t i = 0; i < pf->n_files; i++)
        tfs_free(pf->files[i].key);
    tfs_free(pf->files);
    tfs_free(pf->objs);
    tfs_free(pf->acc);
    tfs_free(pf->lat_us);
}

static int prof_load(const char *path, void **buf, size_t *len)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return tfs_err(-errno, "cannot open the trace %s", path);
    if (fstat(fd, &sb) < 0 || (*buf = tfs_malloc((size_t)sb.st_size + 1))
                                   == NULL) {
        close(fd);
        return -ENOMEM;
    }
    *len = 0;
    while (*len < (size_t)sb.st_size) {
        ssize_t n = read(fd, (char *)*buf + *len, (size_t)sb.st_size - *len);
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        *len += (size_t)n;
    }
    close(fd);
    return rc;
}

int cli_profile_trace(const char *path, uint64_t block_size, bool json,
                      char **out)
{
    struct prof pf = {.block_size = block_size ? block_size : 4u << 20};
    struct tfs_buf b;
    void *buf = NULL;
    size_t len = 0;
    int rc = prof_load(path, &buf, &len);

    if (rc == 0)
        rc = tfs_trace_parse(buf, len, true, prof_event, &pf);
    tfs_free(buf);
    tfs_buf_init(&b, 0);
    if (rc == 0)
        rc = prof_report(&pf, json, &b);
    prof_cleanup(&pf);
    if (rc < 0) {
        tfs_buf_cleanup(&b);
        return rc;
    }
    *out = tfs_buf_steal(&b);
    return *out ? 0 : -ENOMEM;
}

/* ---- a dataset without a trace ---- */

struct store_sizes {
    uint64_t *v;
    size_t    n;
    size_t    cap;
};

static int store_sizes_page(void *arg, const struct tfs_list_page *pg)
{
    struct store_sizes *s = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = prof_grow((void **)&s->v, &s->cap, s->n + 1,
                           sizeof(uint64_t));
        if (rc < 0)
            return rc;
        s->v[s->n++] = pg->entries[i].st.size;
    }
    return 0;
}

int cli_profile_store(const char *uri, const char *options, bool json,
                      char **out)
{
    struct store_sizes ss = {0};
    struct tfs_store *st = NULL;
    struct tfs_buf b;
    struct sizes sz;
    char x[32];
    int rc = tfs_store_open(&st, uri, options);

    if (rc < 0)
        return rc;
    rc = tfs_store_list_all(st, "", NULL, store_sizes_page, &ss);
    tfs_store_close(st);
    if (rc < 0) {
        tfs_free(ss.v);
        return rc;
    }
    sizes_of(ss.v, ss.n, &sz);
    tfs_free(ss.v);
    tfs_buf_init(&b, 0);
    tfs_buf_puts(&b, json ? "{" : "");
    put_sizes(&b, json, &sz);
    put_pack_advice(&b, json, &sz);
    if (json)
        tfs_buf_puts(&b, "}\n");
    else
        tfs_buf_printf(&b, "advice: a cache of %s holds all of it; record "
                       "a trace (`tierfs mount --trace FILE`) to size a "
                       "smaller one\n",
                       tfs_fmt_bytes(x, 32, (double)sz.total));
    *out = tfs_buf_steal(&b);
    return *out ? 0 : -ENOMEM;
}
