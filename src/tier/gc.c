/* SPDX-License-Identifier: MIT */
/*
 * Eviction of a shared cache tier (gc.h): list the block objects, list
 * and read the access logs, give each block its last access, remove the
 * oldest until the rest fit, then the logs nothing left needs.
 *
 * A block costs 40 bytes here (its id, size and time), so a tier of ten
 * million blocks (40 TB of 4 MiB blocks) is gc'ed in 400 MB.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/peer.h"
#include "common/bytes.h"
#include "common/util.h"
#include "tier/gc.h"
#include "tier/shared.h"
#include "tierfs/log.h"
#include "tierfs/store.h"

#define GC_LOG_MAX (16u << 20)          /* bytes of one access log read */
#define GC_ID_HEX (2 * TFS_PEER_ID_LEN)

struct gc_obj {
    uint8_t  id[TFS_PEER_ID_LEN];
    bool     gone;                      /* removed (or would be) */
    uint64_t size;
    int64_t  last_ns;                   /* LastModified, or a later log */
};

struct gc_log {
    char    *key;                       /* owned */
    int64_t  mtime_ns;
    uint64_t size;
    bool     bad;                       /* did not read or parse: left */
};

struct gc_run {
    struct tfs_store          *st;
    const struct tfs_tier_gc_opts *o;
    struct tfs_tier_gc_result *r;
    struct gc_obj             *objs;    /* owned; by id once listed */
    size_t                     n_objs;
    size_t                     cap_objs;
    struct gc_log             *logs;    /* owned */
    size_t                     n_logs;
    size_t                     cap_logs;
    int                        rc;      /* the first failed removal */
};

/* Room for one more element of size elem in *p (n used, *cap room). */
static int gc_grow(void **p, size_t *cap, size_t n, size_t elem)
{
    size_t want = *cap ? 2 * *cap : 1024;
    void *q;

    if (n < *cap)
        return 0;
    q = tfs_realloc(*p, want * elem);
    if (q == NULL)
        return -ENOMEM;
    *p = q;
    *cap = want;
    return 0;
}

/* GC_ID_HEX lowercase hex digits at hex as an id. */
static bool gc_parse_id(const char *hex, uint8_t *id)
{
    for (size_t i = 0; i < TFS_PEER_ID_LEN; i++) {
        int hi = tfs_hexval_lower(hex[2 * i]);
        int lo = tfs_hexval_lower(hex[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return false;
        id[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* Is key a block's name, v1/XX/ID?  Its id in id. */
static bool gc_block_key(const char *key, uint8_t *id)
{
    return strlen(key) == 6 + GC_ID_HEX && memcmp(key, "v1/", 3) == 0 &&
           key[5] == '/' && memcmp(key + 3, key + 6, 2) == 0 &&
           gc_parse_id(key + 6, id);
}

static int gc_block_page(void *arg, const struct tfs_list_page *pg)
{
    struct gc_run *g = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        const struct tfs_list_entry *e = &pg->entries[i];
        struct gc_obj *ob;

        if (gc_grow((void **)&g->objs, &g->cap_objs, g->n_objs,
                    sizeof(*g->objs)) < 0)
            return -ENOMEM;
        ob = &g->objs[g->n_objs];
        if (!gc_block_key(e->key, ob->id)) {
            g->r->others++;
            continue;
        }
        ob->gone = false;
        ob->size = e->st.size;
        ob->last_ns = e->st.mtime_ns;
        g->n_objs++;
        g->r->objects++;
        g->r->bytes += e->st.size;
    }
    return 0;
}

static int gc_log_page(void *arg, const struct tfs_list_page *pg)
{
    struct gc_run *g = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        const struct tfs_list_entry *e = &pg->entries[i];
        struct gc_log *l;

        if (gc_grow((void **)&g->logs, &g->cap_logs, g->n_logs,
                    sizeof(*g->logs)) < 0)
            return -ENOMEM;
        l = &g->logs[g->n_logs];
        l->key = tfs_strdup(e->key);
        if (l->key == NULL)
            return -ENOMEM;
        l->mtime_ns = e->st.mtime_ns;
        l->size = e->st.size;
        l->bad = false;
        g->n_logs++;
    }
    return 0;
}

static int gc_id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, TFS_PEER_ID_LEN);   /* id is the first member */
}

/* Is text (n bytes) a whole access log: the magic, then id lines? */
static bool gc_log_valid(const char *text, size_t n)
{
    size_t magic = strlen(TFS_SHARED_LOG_MAGIC);
    uint8_t id[TFS_PEER_ID_LEN];

    if (n < magic || memcmp(text, TFS_SHARED_LOG_MAGIC, magic) != 0 ||
        (n - magic) % (GC_ID_HEX + 1) != 0)
        return false;
    for (size_t off = magic; off < n; off += GC_ID_HEX + 1) {
        if (text[off + GC_ID_HEX] != '\n' || !gc_parse_id(text + off, id))
            return false;
    }
    return true;
}

/* Each block the (valid) log names was read at mtime_ns at least. */
static void gc_log_apply(struct gc_run *g, const char *text, size_t n,
                         int64_t mtime_ns)
{
    for (size_t off = strlen(TFS_SHARED_LOG_MAGIC); off < n;
         off += GC_ID_HEX + 1) {
        uint8_t id[TFS_PEER_ID_LEN];
        struct gc_obj *ob;

        gc_parse_id(text + off, id);
        ob = bsearch(id, g->objs, g->n_objs, sizeof(*g->objs), gc_id_cmp);
        if (ob != NULL && ob->last_ns < mtime_ns)
            ob->last_ns = mtime_ns;
    }
}

/* Read one log and apply it; one that fails is marked bad, not fatal. */
static int gc_read_log(struct gc_run *g, struct gc_log *l)
{
    char *text;
    size_t n = 0;
    int rc;

    l->bad = true;
    if (l->size > GC_LOG_MAX) {
        TFS_WARN("tier gc: %s: %llu bytes, more than an access log; left",
                 l->key, (unsigned long long)l->size);
        return 0;
    }
    text = tfs_malloc(l->size + 1);
    if (text == NULL)
        return -ENOMEM;
    rc = tfs_store_read(g->st, l->key, text, l->size + 1, 0, NULL, &n);
    if (rc < 0 && rc != -ENOENT)
        TFS_WARN("tier gc: reading %s: " TFS_CAUSE_FMT "; left", l->key,
                 TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    else if (rc == 0 && !gc_log_valid(text, n))
        TFS_WARN("tier gc: %s is not an access log; left", l->key);
    else if (rc == 0)
        l->bad = false;
    if (!l->bad)
        gc_log_apply(g, text, n, l->mtime_ns);
    tfs_free(text);
    return 0;
}

/* Oldest last access first; ties by id, so that runs agree. */
static int gc_age_cmp(const void *a, const void *b)
{
    const struct gc_obj *x = *(const struct gc_obj *const *)a;
    const struct gc_obj *y = *(const struct gc_obj *const *)b;

    if (x->last_ns != y->last_ns)
        return x->last_ns < y->last_ns ? -1 : 1;
    return memcmp(x->id, y->id, TFS_PEER_ID_LEN);
}

/* Remove key (dry: only tell), counting a failure. */
static bool gc_remove(struct gc_run *g, const char *key, uint64_t size,
                      int64_t last_ns, bool is_log)
{
    int rc = g->o->dry_run ? 0 : tfs_store_remove(g->st, key);

    if (rc < 0) {
        char why[256];

        snprintf(why, sizeof(why), "%s", tfs_errdetail());  /* not aliased */
        g->r->errors++;
        if (g->rc == 0)
            g->rc = tfs_err(rc, "removing %s: %s", key, why);
        return false;
    }
    if (g->o->each != NULL)
        g->o->each(g->o->arg, key, size, last_ns, is_log);
    return true;
}

/* Remove blocks oldest first until the rest fit in max_size. */
static int gc_evict(struct gc_run *g)
{
    struct gc_obj **by_age = tfs_calloc(g->n_objs + 1, sizeof(*by_age));
    uint64_t left = g->r->bytes;
    char key[64];

    if (by_age == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < g->n_objs; i++)
        by_age[i] = &g->objs[i];
    qsort(by_age, g->n_objs, sizeof(*by_age), gc_age_cmp);
    for (size_t i = 0; i < g->n_objs && left > g->o->max_size; i++) {
        struct gc_obj *ob = by_age[i];

        tfs_shared_key(key, sizeof(key), ob->id);
        if (!gc_remove(g, key, ob->size, ob->last_ns, false))
            continue;
        ob->gone = true;
        left -= ob->size;
        g->r->removed++;
        g->r->removed_bytes += ob->size;
    }
    tfs_free(by_age);
    return 0;
}

/* The oldest and newest last access left; then the logs that go. */
static void gc_prune_logs(struct gc_run *g)
{
    struct tfs_tier_gc_result *r = g->r;
    int64_t now = g->o->now_ns ? g->o->now_ns : tfs_wall_ns();
    bool any = false;

    for (size_t i = 0; i < g->n_objs; i++) {
        const struct gc_obj *ob = &g->objs[i];

        if (ob->gone)
            continue;
        if (!any || ob->last_ns < r->oldest_ns)
            r->oldest_ns = ob->last_ns;
        if (!any || ob->last_ns > r->newest_ns)
            r->newest_ns = ob->last_ns;
        any = true;
    }
    for (size_t i = 0; i < g->n_logs; i++) {
        const struct gc_log *l = &g->logs[i];
        bool old = !any || l->mtime_ns < r->oldest_ns ||
                   (g->o->keep_log_ns > 0 &&
                    l->mtime_ns < now - g->o->keep_log_ns);

        if (l->bad || !old)
            continue;
        if (gc_remove(g, l->key, l->size, l->mtime_ns, true))
            r->logs_removed++;
    }
}

int tfs_tier_gc(struct tfs_store *st, const struct tfs_tier_gc_opts *o,
                struct tfs_tier_gc_result *r)
{
    struct gc_run g = {.st = st, .o = o, .r = r};
    int rc;

    memset(r, 0, sizeof(*r));
    rc = tfs_store_list_all(st, "v1/", NULL, gc_block_page, &g);
    if (rc == 0)
        rc = tfs_store_list_all(st, TFS_SHARED_LOG_DIR, NULL, gc_log_page,
                                &g);
    if (rc == 0)
        qsort(g.objs, g.n_objs, sizeof(*g.objs), gc_id_cmp);
    for (size_t i = 0; i < g.n_logs && rc == 0; i++) {
        rc = gc_read_log(&g, &g.logs[i]);
        r->logs += !g.logs[i].bad;
        r->logs_bad += g.logs[i].bad;
    }
    if (rc == 0)
        rc = gc_evict(&g);
    if (rc == 0) {
        gc_prune_logs(&g);
        rc = g.rc;
    }
    for (size_t i = 0; i < g.n_logs; i++)
        tfs_free(g.logs[i].key);
    tfs_free(g.logs);
    tfs_free(g.objs);
    return rc;
}
