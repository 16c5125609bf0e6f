/* SPDX-License-Identifier: MIT */
/*
 * The overlay and the view it makes of the store.  In order:
 *
 *   entries      one per key with local state: a staged file, a pending
 *                move or deletion, directory flags; pins of move sources
 *   counters     per directory: entries under it (live, all, whiteouts),
 *                so "is there anything of ours under a/b/" is O(1)
 *   lookup       what a key is: the overlay first, then the cache
 *   listing      a directory: the cache's listing with the overlay applied
 *
 * A directory in the view exists when it is local (WB_D_LOCAL: made or
 * emptied here), when a live entry (staged file, move, local directory)
 * lies under it, or when the store lists it and it is not hidden
 * (WB_D_HIDDEN: removed or renamed here while the store still has it).
 * Everything here runs under wb->lock except the cache calls.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tierfs/log.h"
#include "wb/wb_int.h"

/* ---- prefix counters ---- */

static struct wb_pfx *pfx_of(struct tfs_hstr *h)
{
    return h ? tfs_container_of(h, struct wb_pfx, h) : NULL;
}

static bool ent_is_live(const struct wb_ent *e)
{
    return e->kind == WB_NODE || e->kind == WB_MOVED ||
           (e->kind == WB_DIRENT && (e->dflags & WB_D_LOCAL));
}

/* Nothing (or no deletion) left under directory dir: its own entry may
   have work now (a check of its marks). */
static void pfx_emptied(struct tfs_wb *wb, const char *dir)
{
    struct wb_ent *d = dir[0] ? wb_ent_find(wb, dir) : NULL;

    if (d != NULL && d->kind == WB_DIRENT && !d->queued)
        wb_ent_requeue(wb, d);
}

/* New zero counters for directory dir, in wb->pfx; NULL: -ENOMEM. */
static struct wb_pfx *pfx_new(struct tfs_wb *wb, const char *dir)
{
    struct wb_pfx *p = tfs_calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->h.key = tfs_strdup(dir);
    if (p->h.key == NULL || tfs_hmap_insert_str(&wb->pfx, &p->h) < 0) {
        tfs_free(p->h.key);
        tfs_free(p);
        return NULL;
    }
    return p;
}

/* Add (delta 1) or remove (-1) e in the counters of every ancestor. */
static void pfx_count(struct tfs_wb *wb, struct wb_ent *e, int delta)
{
    const char *key = e->h.key;
    size_t len = strlen(key);
    char buf[WB_KEY_MAX + 2];

    if (e->kind == WB_NONE || len > WB_KEY_MAX)
        return;
    for (size_t i = 0; i < len; i++) {
        struct wb_pfx *p;
        size_t plen = i;

        if (i > 0 && (key[i - 1] != '/' || i == len))
            continue;
        memcpy(buf, key, plen);
        buf[plen] = '\0';
        p = pfx_of(tfs_hmap_find_str(&wb->pfx, buf));
        if (p == NULL && delta > 0)
            p = pfx_new(wb, buf);
        if (p == NULL)
            continue;                   /* counts stay low: best effort */
        p->live += (uint64_t)(int64_t)(ent_is_live(e) ? delta : 0);
        p->all += (uint64_t)(int64_t)delta;
        p->wo += (uint64_t)(int64_t)(e->kind == WB_WHITEOUT ? delta : 0);
        if (p->all == 0 || p->wo == 0)
            pfx_emptied(wb, buf);
        if (p->all == 0) {
            tfs_hmap_remove(&wb->pfx, &p->h.node);
            tfs_free(p->h.key);
            tfs_free(p);
        }
    }
    e->counted = delta > 0;
}

const struct wb_pfx *wb_pfx_find(struct tfs_wb *wb, const char *dir)
{
    return pfx_of(tfs_hmap_find_str(&wb->pfx, dir));
}

/* ---- entries ---- */

struct wb_ent *wb_ent_find(struct tfs_wb *wb, const char *key)
{
    struct tfs_hstr *h = tfs_hmap_find_str(&wb->ents, key);

    return h ? wb_ent_of(&h->node) : NULL;
}

struct wb_ent *wb_ent_get(struct tfs_wb *wb, const char *key)
{
    struct wb_ent *e = wb_ent_find(wb, key);

    if (e != NULL)
        return e;
    e = tfs_calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->h.key = tfs_strdup(key);
    if (e->h.key == NULL || tfs_hmap_insert_str(&wb->ents, &e->h) < 0) {
        tfs_free(e->h.key);
        tfs_free(e);
        return NULL;
    }
    return e;
}

static void ent_unpin(struct tfs_wb *wb, const char *src)
{
    struct wb_ent *s = wb_ent_find(wb, src);

    if (s == NULL || s->pins == 0)
        return;
    s->pins--;
    wb_ent_requeue(wb, s);
    wb_ent_release(wb, s);
}

struct wb_node *wb_ent_set(struct tfs_wb *wb, struct wb_ent *e, int kind,
                           struct wb_node *node, const char *src,
                           const struct tfs_stat *st, unsigned dflags)
{
    char *copy = kind == WB_MOVED ? tfs_strdup(src) : NULL;

    if (kind == WB_MOVED && copy == NULL)
        kind = WB_WHITEOUT;             /* ENOMEM: the move is lost */
    return wb_ent_set_own(wb, e, kind, node, copy, st, dflags);
}

struct wb_node *wb_ent_set_own(struct tfs_wb *wb, struct wb_ent *e, int kind,
                               struct wb_node *node, char *src,
                               const struct tfs_stat *st, unsigned dflags)
{
    struct wb_node *old = NULL;
    struct wb_ent *s;

    if (e->counted)
        pfx_count(wb, e, -1);
    if (e->kind == WB_NODE && !(kind == WB_NODE && node == e->node)) {
        old = e->node;
        old->ent = NULL;
        wb_eager_cancel(old, WB_EAGER_RENAME, false);  /* left its key */
    }
    if (kind == WB_MOVED && (s = wb_ent_find(wb, src)) != NULL)
        s->pins++;                      /* before unpinning the old one */
    if (e->kind == WB_MOVED) {
        ent_unpin(wb, e->src);
        tfs_free(e->src);
    }
    e->src = NULL;
    e->node = NULL;
    e->dflags = 0;
    if (kind == WB_DIRENT && dflags == 0)
        kind = WB_NONE;
    e->kind = kind;
    if (kind == WB_NODE) {
        e->node = node;
        node->ent = e;
    } else if (kind == WB_MOVED) {
        e->src = src;
        e->st = *st;
    } else if (kind == WB_DIRENT) {
        e->dflags = dflags;
    }
    e->seq = ++wb->seq;
    e->attempts = 0;
    e->last_err = 0;
    e->checked = false;
    e->ready_ns = tfs_now_ns() + wb->cfg.upload_delay_ms * 1000000;
    pfx_count(wb, e, 1);
    wb_ent_requeue(wb, e);
    pthread_cond_broadcast(&wb->changed);
    return old;
}

void wb_ent_release(struct tfs_wb *wb, struct wb_ent *e)
{
    if (e == NULL || e->kind != WB_NONE || e->pins > 0 || e->busy ||
        e->queued)
        return;
    tfs_hmap_remove(&wb->ents, &e->h.node);
    tfs_free(e->h.key);
    tfs_free(e->last_detail);
    tfs_free(e);
}

bool wb_ent_needs_work(struct tfs_wb *wb, struct wb_ent *e)
{
    struct wb_node *n = e->node;
    bool needs;

    switch (e->kind) {
    case WB_NODE:
        if (!n->has_sealed)
            return false;
        pthread_mutex_lock(&n->lock);
        needs = n->up_gen < n->sealed_gen;
        pthread_mutex_unlock(&n->lock);
        return needs;
    case WB_MOVED:
    case WB_WHITEOUT:
        return true;
    case WB_DIRENT:
        return !e->checked && (e->dflags & (WB_D_HIDDEN | WB_D_LOCAL));
    default:
        return false;
    }
}

void wb_ent_requeue(struct tfs_wb *wb, struct wb_ent *e)
{
    bool needs = wb_ent_needs_work(wb, e);

    if (needs && !e->queued) {
        e->qnext = NULL;
        e->qprev = wb->qtail;
        if (wb->qtail != NULL)
            wb->qtail->qnext = e;
        else
            wb->qhead = e;
        wb->qtail = e;
        e->queued = true;
        /* The scheduler walks the whole queue when kicked and looks
           again within a second anyway: waking it for an entry due
           later made every close of N pending files cost O(N). */
        if (e->ready_ns < tfs_now_ns() + WB_KICK_NS)
            wb_upload_kick(wb);
    } else if (!needs && e->queued) {
        if (e->qprev != NULL)
            e->qprev->qnext = e->qnext;
        else
            wb->qhead = e->qnext;
        if (e->qnext != NULL)
            e->qnext->qprev = e->qprev;
        else
            wb->qtail = e->qprev;
        e->queued = false;
    }
}

/* key's parent directory key into buf ("" for a top-level key). */
static void parent_of(const char *key, char *buf)
{
    size_t len = strlen(key);

    if (len > 0 && key[len - 1] == '/')
        len--;                          /* a directory: its own slash */
    while (len > 0 && key[len - 1] != '/')
        len--;
    memcpy(buf, key, len);
    buf[len] = '\0';
}

void wb_unhide_parents(struct tfs_wb *wb, const char *key,
                       struct tfs_buf *rec)
{
    char buf[WB_KEY_MAX + 2];
    size_t len = strlen(key);

    if (len > WB_KEY_MAX)
        return;
    for (size_t i = 1; i < len; i++) {
        struct wb_ent *e;

        if (key[i - 1] != '/')
            continue;
        memcpy(buf, key, i);
        buf[i] = '\0';
        e = wb_ent_find(wb, buf);
        if (e == NULL || e->kind != WB_DIRENT ||
            !(e->dflags & WB_D_HIDDEN))
            continue;
        wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL,
                   e->dflags & ~WB_D_HIDDEN);
        wb_jop_ent(wb, rec, e);
        wb_ent_release(wb, e);
    }
}

void wb_keep_parent(struct tfs_wb *wb, const char *key, struct tfs_buf *rec)
{
    char parent[WB_KEY_MAX + 2];
    struct wb_ent *e;

    if (strlen(key) > WB_KEY_MAX)
        return;
    parent_of(key, parent);
    if (parent[0] == '\0')
        return;
    e = wb_ent_get(wb, parent);
    if (e == NULL || (e->kind == WB_DIRENT && (e->dflags & WB_D_LOCAL)))
        return;
    wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL, WB_D_LOCAL);
    wb_jop_ent(wb, rec, e);
}

/* ---- lookup ---- */

enum wb_dstate {
    WB_DIR_STORE,                       /* ask the store */
    WB_DIR_YES,                         /* exists here */
    WB_DIR_HIDDEN,                      /* hidden unless live */
};

/* What the overlay says of directory dkey ("a/b/").  wb->lock held. */
static int dir_state(struct tfs_wb *wb, const char *dkey)
{
    struct wb_ent *e = wb_ent_find(wb, dkey);
    const struct wb_pfx *p = wb_pfx_find(wb, dkey);

    if ((e != NULL && e->kind == WB_DIRENT && (e->dflags & WB_D_LOCAL)) ||
        (p != NULL && p->live > 0))
        return WB_DIR_YES;
    if (e != NULL && e->kind == WB_DIRENT && (e->dflags & WB_D_HIDDEN))
        return WB_DIR_HIDDEN;
    return WB_DIR_STORE;
}

bool wb_dir_hidden(struct tfs_wb *wb, const char *dkey)
{
    return dir_state(wb, dkey) == WB_DIR_HIDDEN;
}

/* Whether the store has directory dkey (listed, or a real directory). */
static bool store_has_dir(struct tfs_wb *wb, const char *dkey)
{
    struct tfs_dir *d = NULL;
    int rc = tfs_cache_opendir(wb->cache, dkey, &d);

    tfs_dir_put(d);
    return rc == 0;
}

void wb_obj_cleanup(struct wb_obj *o)
{
    wb_node_put(o->node);
    o->node = NULL;
}

/* The overlay's answer for key, or WB_DIR_STORE-like "ask the store". */
static int lookup_overlay(struct tfs_wb *wb, const char *key,
                          const char *dkey, struct wb_obj *o,
                          bool *whiteout, int *dstate)
{
    struct wb_ent *e;
    int rc = 1;

    pthread_mutex_lock(&wb->lock);
    e = wb_ent_find(wb, key);
    if (e != NULL && e->kind == WB_NODE) {
        o->node = wb_node_get(e->node);
        rc = 0;
    } else if (e != NULL && e->kind == WB_MOVED) {
        o->st = e->st;
        snprintf(o->read_key, sizeof(o->read_key), "%s", e->src);
        rc = 0;
    }
    *whiteout = e != NULL && e->kind == WB_WHITEOUT;
    *dstate = dir_state(wb, dkey);
    pthread_mutex_unlock(&wb->lock);
    return rc;
}

int wb_lookup(struct tfs_wb *wb, const char *key, struct wb_obj *o)
{
    char dkey[WB_KEY_MAX + 2];
    bool whiteout;
    bool is_dir = false;
    int dstate;
    int rc;

    memset(o, 0, offsetof(struct wb_obj, read_key) + 1);
    if (strlen(key) > WB_KEY_MAX)
        return -ENAMETOOLONG;
    snprintf(dkey, sizeof(dkey), "%s/", key);
    rc = lookup_overlay(wb, key, dkey, o, &whiteout, &dstate);
    if (rc == 0)
        return 0;
    if (dstate == WB_DIR_YES) {
        o->is_dir = true;
        return 0;
    }
    if (whiteout) {
        o->is_dir = dstate != WB_DIR_HIDDEN && store_has_dir(wb, dkey);
        return o->is_dir ? 0 : -ENOENT;
    }
    rc = tfs_cache_lookup(wb->cache, key, &is_dir, &o->st);
    if (rc == -EISDIR)
        is_dir = true;
    else if (rc == -ENOTDIR)
        return -ENOENT;
    else if (rc < 0)
        return rc;
    if (is_dir && dstate == WB_DIR_HIDDEN)
        return -ENOENT;
    o->is_dir = is_dir;
    if (!is_dir)
        snprintf(o->read_key, sizeof(o->read_key), "%s", key);
    return 0;
}

/* ---- listing ---- */

struct wb_list {
    struct wb_dirent *ents;             /* name = offset until finished */
    size_t            n;
    size_t            cap;
    struct tfs_buf    names;            /* NUL-separated */
};

size_t wb_list_count(const struct wb_list *l)
{
    return l->n;
}

const struct wb_dirent *wb_list_entry(const struct wb_list *l, size_t i)
{
    return i < l->n ? &l->ents[i] : NULL;
}

void wb_list_free(struct wb_list *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        wb_node_put(l->ents[i].node);
    tfs_free(l->ents);
    tfs_buf_cleanup(&l->names);
    tfs_free(l);
}

/* Add an entry; node is a new reference the list owns. */
static int list_add(struct wb_list *l, const char *name, size_t len,
                    bool is_dir, const struct tfs_stat *st,
                    struct wb_node *node)
{
    struct wb_dirent *d;
    size_t off = l->names.len;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        d = tfs_realloc(l->ents, cap * sizeof(*d));
        if (d == NULL)
            goto err_put;
        l->ents = d;
        l->cap = cap;
    }
    if (tfs_buf_append(&l->names, name, len) < 0 ||
        tfs_buf_append(&l->names, "", 1) < 0)
        goto err_put;
    d = &l->ents[l->n++];
    memset(d, 0, sizeof(*d));
    d->name = (const char *)(uintptr_t)off;
    d->is_dir = is_dir;
    d->node = node;
    if (st != NULL)
        d->st = *st;
    return 0;
err_put:
    wb_node_put(node);
    return -ENOMEM;
}

static int wb_dirent_cmp(const void *a, const void *b)
{
    const struct wb_dirent *x = a;
    const struct wb_dirent *y = b;
    int c = strcmp(x->name, y->name);

    return c != 0 ? c : (int)y->is_dir - (int)x->is_dir;
}

/* Resolve the names, sort, drop duplicates (a directory wins). */
static void list_finish(struct wb_list *l)
{
    size_t w = 0;

    for (size_t i = 0; i < l->n; i++)
        l->ents[i].name = l->names.p + (uintptr_t)l->ents[i].name;
    if (l->n > 1)
        qsort(l->ents, l->n, sizeof(*l->ents), wb_dirent_cmp);
    for (size_t i = 0; i < l->n; i++) {
        if (w > 0 && strcmp(l->ents[w - 1].name, l->ents[i].name) == 0) {
            wb_node_put(l->ents[i].node);
            continue;
        }
        l->ents[w++] = l->ents[i];
    }
    l->n = w;
}

/* The store's entries of dir that the overlay leaves visible. */
static int list_store(struct tfs_wb *wb, const char *dir,
                      const struct tfs_dir *d, bool filter,
                      struct wb_list *l)
{
    char key[WB_KEY_MAX + 2];
    int rc = 0;

    for (size_t i = 0; d != NULL && i < tfs_dir_count(d) && rc == 0; i++) {
        const struct tfs_dirent *de = tfs_dir_entry(d, i);
        struct wb_ent *e;

        if (filter) {
            if ((size_t)snprintf(key, sizeof(key), "%s%s%s", dir, de->name,
                                 de->is_dir ? "/" : "") >= sizeof(key))
                continue;
            e = wb_ent_find(wb, key);
            if (!de->is_dir && e != NULL && e->kind != WB_NONE)
                continue;               /* the overlay decides */
            if (de->is_dir && dir_state(wb, key) == WB_DIR_HIDDEN)
                continue;
        }
        rc = list_add(l, de->name, strlen(de->name), de->is_dir, &de->st,
                      NULL);
    }
    return rc;
}

/* The overlay's entries directly under dir (files, directories). */
static int list_overlay(struct tfs_wb *wb, const char *dir,
                        struct wb_list *l)
{
    size_t dlen = strlen(dir);
    struct tfs_hmap_iter it;
    struct wb_ent *e;
    int rc = 0;

    tfs_hmap_iter_init(&it, &wb->ents);
    while (rc == 0 && (e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        const char *rest = e->h.key + dlen;
        const char *slash;

        if (strncmp(e->h.key, dir, dlen) != 0 || rest[0] == '\0' ||
            !ent_is_live(e))
            continue;
        slash = strchr(rest, '/');
        if (slash != NULL)
            rc = list_add(l, rest, (size_t)(slash - rest), true, NULL,
                          NULL);
        else if (e->kind == WB_NODE)
            rc = list_add(l, rest, strlen(rest), false, NULL,
                          wb_node_get(e->node));
        else
            rc = list_add(l, rest, strlen(rest), false, &e->st, NULL);
    }
    return rc;
}

/* Merge the store's listing d (may be NULL) with the overlay. */
static int list_merge(struct tfs_wb *wb, const char *dir,
                      const struct tfs_dir *d, int store_rc,
                      struct wb_list *l)
{
    const struct wb_pfx *p;
    int dstate;
    int rc;

    pthread_mutex_lock(&wb->lock);
    p = wb_pfx_find(wb, dir);
    dstate = dir[0] ? dir_state(wb, dir) : WB_DIR_YES;
    rc = list_store(wb, dir, d, p != NULL, l);
    if (rc == 0 && p != NULL)
        rc = list_overlay(wb, dir, l);
    pthread_mutex_unlock(&wb->lock);
    if (rc == 0 && store_rc == -ENOENT && l->n == 0 && dstate != WB_DIR_YES)
        rc = -ENOENT;
    return rc;
}

int wb_opendir(struct tfs_wb *wb, const char *dir, struct wb_list **out)
{
    struct tfs_dir *d = NULL;
    struct wb_list *l;
    int store_rc = tfs_cache_opendir(wb->cache, dir, &d);
    int rc = store_rc == -ENOENT ? 0 : store_rc;

    if (rc < 0)
        return rc;
    l = tfs_calloc(1, sizeof(*l));
    if (l == NULL) {
        tfs_dir_put(d);
        return -ENOMEM;
    }
    tfs_buf_init(&l->names, 0);
    rc = list_merge(wb, dir, d, store_rc, l);
    tfs_dir_put(d);
    if (rc < 0) {
        wb_list_free(l);
        return rc;
    }
    list_finish(l);
    *out = l;
    return 0;
}
