/* SPDX-License-Identifier: MIT */
/*
 * Namespace changes of the view: open for writing (create, truncate,
 * copy up), unlink, mkdir, rmdir, rename of files and directories.
 *
 * Each one looks the names up in the view (outside wb->lock: the cache
 * may ask the store), then changes the overlay and appends one journal
 * record under wb->lock, then waits for the record to be durable before
 * returning.  The kernel serialises changes within a directory, and a
 * change of an entry the uploader completed meanwhile is handled from
 * the entry's state under the lock, not from the earlier lookup.
 *
 * A rename never copies data: a staged file moves with its node (upload
 * later under the new key), an object already in the store becomes a
 * pending move (tfs_store_move later) whose source is pinned until then,
 * and a directory renames entry by entry, its store objects listed once.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tierfs/log.h"
#include "wb/wb_int.h"

/* ---- open for writing ---- */

/* One more open of n for writing; truncate it when asked. */
static int ns_open_node(struct tfs_wb *wb, struct wb_node *n, bool trunc)
{
    pthread_mutex_lock(&n->lock);
    n->opens++;
    n->writers++;
    pthread_mutex_unlock(&n->lock);
    if (!trunc)
        return 0;
    return wb_node_truncate(wb, n, 0);
}

/* Put n (prepared, one open counted) in the view at key. */
static int ns_attach(struct tfs_wb *wb, const char *key, struct wb_node *n,
                     bool store_had)
{
    struct tfs_buf rec;
    struct wb_ent *e;
    int rc = 0;

    tfs_buf_init(&rec, 0);
    pthread_mutex_lock(&wb->lock);
    e = wb_ent_get(wb, key);
    if (e == NULL)
        rc = -ENOMEM;
    else if (e->kind == WB_NODE)
        rc = -ESTALE;                   /* another open won: retry */
    if (rc == 0) {
        bool maybe = store_had || e->kind == WB_WHITEOUT ||
                     e->kind == WB_MOVED;
        wb_ent_set(wb, e, WB_NODE, wb_node_get(n), NULL, NULL, 0);
        n->maybe_in_store = maybe;
        wb_unhide_parents(wb, key, &rec);
        rc = wb_journal_append(wb, &rec, NULL);
    }
    pthread_mutex_unlock(&wb->lock);
    tfs_buf_cleanup(&rec);
    return rc;
}

/*
 * A node for key at the view object o (NULL: none): m (the caller's
 * inode's node, out of the view) or a new one; empty when trunc or no
 * object, else a copy of the object, sealed at once since it is complete.
 */
static int ns_new(struct tfs_wb *wb, const char *key, const struct wb_obj *o,
                  struct wb_node *m, bool trunc, struct wb_node **out)
{
    bool copy = o != NULL && !trunc;
    struct wb_node *n = m ? wb_node_get(m) : NULL;
    int rc = n ? 0 : wb_node_new(wb, 0, 0, 0, &n);

    if (rc < 0)
        return rc;
    pthread_mutex_lock(&n->lock);
    n->opens++;                         /* keeps wb_node_detached away */
    n->writers++;
    pthread_mutex_unlock(&n->lock);
    if (m != NULL || copy)
        rc = wb_node_replace(wb, n, copy ? o->read_key : key,
                             copy ? &o->st : NULL);
    if (rc == 1)
        rc = -ESTALE;                   /* attached meanwhile: retry */
    if (rc == 0)
        rc = ns_attach(wb, key, n, o != NULL);
    if (rc == 0 && copy)
        rc = wb_node_seal(wb, n);
    if (rc < 0) {
        wb_node_close(wb, n, true, false);
        wb_node_put(n);
        return rc;
    }
    *out = n;
    return 0;
}

int wb_open_write(struct tfs_wb *wb, const char *key,
                  const struct wb_want *w, struct wb_node **out)
{
    bool has_inode = w->node != NULL || w->version != NULL;
    struct wb_obj o;
    int rc = wb_lookup(wb, key, &o);

    if (rc == -ENOENT && !w->create)
        return has_inode ? -ESTALE : -ENOENT;
    if (rc == -ENOENT)
        return ns_new(wb, key, NULL, NULL, true, out);
    if (rc < 0)
        return rc;
    if (o.is_dir || w->excl) {
        wb_obj_cleanup(&o);
        return o.is_dir ? -EISDIR : -EEXIST;
    }
    if (o.node != NULL) {
        if ((w->node != NULL && w->node != o.node) ||
            (w->node == NULL && w->version != NULL))
            rc = -ESTALE;
        if (rc == 0)
            rc = ns_open_node(wb, o.node, w->trunc);
        if (rc == 0)
            *out = wb_node_get(o.node);
        else if (rc != -ESTALE)
            wb_node_close(wb, o.node, true, false);
        wb_obj_cleanup(&o);
        return rc;
    }
    if ((w->node != NULL && !wb_node_is_version(w->node, o.st.version)) ||
        (w->node == NULL && w->version != NULL &&
         strcmp(w->version, o.st.version) != 0))
        return -ESTALE;
    return ns_new(wb, key, &o, w->node, w->trunc, out);
}

/* ---- unlink, mkdir, rmdir ---- */

int wb_unlink(struct tfs_wb *wb, const char *key)
{
    struct wb_node *old = NULL;
    struct tfs_buf rec;
    struct wb_ent *e;
    struct wb_obj o;
    uint64_t end = 0;
    int rc = wb_lookup(wb, key, &o);

    if (rc < 0)
        return rc;
    wb_obj_cleanup(&o);
    if (o.is_dir)
        return -EISDIR;
    tfs_buf_init(&rec, 0);
    pthread_mutex_lock(&wb->lock);
    e = wb_ent_get(wb, key);
    if (e == NULL || e->kind == WB_WHITEOUT) {
        rc = e ? -ENOENT : -ENOMEM;
    } else {
        bool gone = e->kind == WB_NODE && !e->node->maybe_in_store;
        old = wb_ent_set(wb, e, gone ? WB_NONE : WB_WHITEOUT, NULL, NULL,
                         NULL, 0);
        wb_jop_ent(wb, &rec, e);
        wb_keep_parent(wb, key, &rec);
        rc = wb_journal_append(wb, &rec, &end);
        wb_ent_release(wb, e);
    }
    pthread_mutex_unlock(&wb->lock);
    tfs_buf_cleanup(&rec);
    if (rc == 0)
        rc = wb_journal_sync(wb, end);
    if (old != NULL) {
        wb_node_detached(wb, old);
        wb_node_put(old);
    }
    return rc;
}

/* Set the flags of directory dkey ("a/b/") and journal the change. */
static int ns_set_dir(struct tfs_wb *wb, const char *dkey, unsigned dflags,
                      bool keep_parent)
{
    struct tfs_buf rec;
    struct wb_ent *e;
    uint64_t end = 0;
    int rc;

    tfs_buf_init(&rec, 0);
    pthread_mutex_lock(&wb->lock);
    e = wb_ent_get(wb, dkey);
    rc = e ? 0 : -ENOMEM;
    if (rc == 0) {
        wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL, dflags);
        wb_jop_ent(wb, &rec, e);
        if (keep_parent)
            wb_keep_parent(wb, dkey, &rec);
        else
            wb_unhide_parents(wb, dkey, &rec);
        rc = wb_journal_append(wb, &rec, &end);
        wb_ent_release(wb, e);
    }
    pthread_mutex_unlock(&wb->lock);
    tfs_buf_cleanup(&rec);
    return rc == 0 ? wb_journal_sync(wb, end) : rc;
}

int wb_mkdir(struct tfs_wb *wb, const char *key)
{
    char dkey[WB_KEY_MAX + 2];
    struct wb_obj o;
    int rc = wb_lookup(wb, key, &o);

    if (rc == 0) {
        wb_obj_cleanup(&o);
        return -EEXIST;
    }
    if (rc != -ENOENT)
        return rc;
    snprintf(dkey, sizeof(dkey), "%s/", key);
    return ns_set_dir(wb, dkey, WB_D_LOCAL, false);
}

int wb_rmdir(struct tfs_wb *wb, const char *key)
{
    char dkey[WB_KEY_MAX + 2];
    struct wb_list *l = NULL;
    struct wb_obj o;
    int rc = wb_lookup(wb, key, &o);

    if (rc < 0)
        return rc;
    wb_obj_cleanup(&o);
    if (!o.is_dir)
        return -ENOTDIR;
    snprintf(dkey, sizeof(dkey), "%s/", key);
    rc = wb_opendir(wb, dkey, &l);
    if (rc == 0 && wb_list_count(l) > 0)
        rc = -ENOTEMPTY;
    wb_list_free(l);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    /* Hidden whether or not the store has it: asking would miss an empty
       directory of a posix store, and the uploader drops the mark once
       the store has nothing there. */
    return ns_set_dir(wb, dkey, WB_D_HIDDEN, true);
}

/* ---- rename ---- */

/*
 * Move the file state of entry f to entry t: a staged file moves with
 * its node; a pending move keeps its source; a store object (st) becomes
 * a pending move.  t_maybe: the store may hold an object at t's key.
 * Returns the node t held before, to release.  wb->lock held.
 */
static struct wb_node *ns_move_one(struct tfs_wb *wb, struct wb_ent *f,
                                   struct wb_ent *t,
                                   const struct tfs_stat *st, bool t_maybe,
                                   char **own_src, struct tfs_buf *rec)
{
    struct wb_node *old = NULL;

    if (f->kind == WB_NODE) {
        struct wb_node *n = f->node;
        wb_ent_set(wb, f, n->maybe_in_store ? WB_WHITEOUT : WB_NONE, NULL,
                   NULL, NULL, 0);
        old = wb_ent_set(wb, t, WB_NODE, n, NULL, NULL, 0);
        n->maybe_in_store = t_maybe;
        pthread_mutex_lock(&n->lock);
        n->up_gen = 0;                  /* not at this key yet */
        pthread_mutex_unlock(&n->lock);
        t->ready_ns = tfs_now_ns() + wb->cfg.upload_delay_ms * 1000000;
        wb_ent_requeue(wb, t);
    } else {
        const char *src = f->kind == WB_MOVED ? f->src : f->h.key;
        const struct tfs_stat *sst = f->kind == WB_MOVED ? &f->st : st;
        if (strcmp(src, t->h.key) == 0) {   /* back where it is */
            old = wb_ent_set(wb, t, WB_NONE, NULL, NULL, NULL, 0);
        } else if (own_src != NULL && *own_src != NULL) {
            old = wb_ent_set_own(wb, t, WB_MOVED, NULL, *own_src, sst, 0);
            *own_src = NULL;
        } else {
            old = wb_ent_set(wb, t, WB_MOVED, NULL, src, sst, 0);
        }
        wb_ent_set(wb, f, WB_WHITEOUT, NULL, NULL, NULL, 0);
    }
    wb_jop_ent(wb, rec, f);
    wb_jop_ent(wb, rec, t);
    return old;
}

/* Whether the store may hold an object at t's key (before the move). */
static bool ns_target_maybe(const struct wb_ent *t, bool store_file)
{
    if (t->kind == WB_NODE)
        return t->node->maybe_in_store;
    return store_file || t->kind == WB_MOVED || t->kind == WB_WHITEOUT;
}

/* The most bytes a file rename's record takes: the two entries, the
 * source's parent kept, the target's parents unhidden. */
static size_t ns_rename_rec_max(const char *from, const char *to)
{
    size_t ops = 3;

    for (const char *p = to; *p != '\0'; p++)
        ops += *p == '/';
    return ops * (strlen(from) + strlen(to) + WB_KEY_MAX + 256);
}

/*
 * What a file rename allocates, taken before it changes anything (the
 * record's room, the copy of a move's source), so that once the view
 * changes the journal record is whole: a rename that fails for memory
 * has changed nothing, and one that changed the view is written.
 */
static int ns_rename_prepare(const struct wb_ent *f, const struct wb_ent *t,
                             const char *from, const char *to,
                             char **own_src, struct tfs_buf *rec)
{
    const char *src = f->kind == WB_MOVED ? f->src : f->h.key;

    *own_src = NULL;
    if (f->kind != WB_NODE && strcmp(src, t->h.key) != 0 &&
        (*own_src = tfs_strdup(src)) == NULL)
        return -ENOMEM;
    return tfs_buf_reserve(rec, ns_rename_rec_max(from, to));
}

static int ns_rename_file(struct tfs_wb *wb, const char *from,
                          const char *to, const struct wb_obj *of,
                          bool to_store_file)
{
    struct wb_node *old = NULL;
    struct wb_ent *f;
    struct wb_ent *t;
    struct tfs_buf rec;
    char *own_src = NULL;
    uint64_t end = 0;
    int rc = 0;

    tfs_buf_init(&rec, 0);
    pthread_mutex_lock(&wb->lock);
    f = wb_ent_get(wb, from);
    t = f ? wb_ent_get(wb, to) : NULL;
    if (t == NULL)
        rc = -ENOMEM;
    else if (f->kind == WB_WHITEOUT || f->kind == WB_DIRENT)
        rc = -ENOENT;                   /* deleted meanwhile */
    if (rc == 0)
        rc = ns_rename_prepare(f, t, from, to, &own_src, &rec);
    if (rc == 0) {
        struct tfs_stat st = of->st;
        if (f->kind == WB_NONE && of->node != NULL) {  /* uploaded */
            pthread_mutex_lock(&of->node->lock);
            st = of->node->up_st;
            pthread_mutex_unlock(&of->node->lock);
        }
        old = ns_move_one(wb, f, t, &st, ns_target_maybe(t, to_store_file),
                          &own_src, &rec);
        wb_keep_parent(wb, from, &rec);
        wb_unhide_parents(wb, to, &rec);
        rc = wb_journal_append(wb, &rec, &end);
    }
    wb_ent_release(wb, f);
    wb_ent_release(wb, t);
    pthread_mutex_unlock(&wb->lock);
    tfs_free(own_src);
    tfs_buf_cleanup(&rec);
    if (rc == 0)
        rc = wb_journal_sync(wb, end);
    if (old != NULL) {
        wb_node_detached(wb, old);
        wb_node_put(old);
    }
    return rc;
}

/* The store's objects under a directory, for a directory rename. */
struct ns_objs {
    char           **keys;              /* owned */
    struct tfs_stat *st;
    size_t           n;
    size_t           cap;
};

static int ns_objs_page(void *arg, const struct tfs_list_page *pg)
{
    struct ns_objs *o = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        if (o->n == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 256;
            char **k = tfs_realloc(o->keys, cap * sizeof(*k));
            struct tfs_stat *s = k ? tfs_realloc(o->st, cap * sizeof(*s))
                                   : NULL;
            if (k != NULL)
                o->keys = k;
            if (s == NULL)
                return -ENOMEM;
            o->st = s;
            o->cap = cap;
        }
        o->keys[o->n] = tfs_strdup(pg->entries[i].key);
        if (o->keys[o->n] == NULL)
            return -ENOMEM;
        o->st[o->n++] = pg->entries[i].st;
    }
    return 0;
}

static void ns_objs_cleanup(struct ns_objs *o)
{
    for (size_t i = 0; i < o->n; i++)
        tfs_free(o->keys[i]);
    tfs_free(o->keys);
    tfs_free(o->st);
}

/* Hide directory dkey and every directory between it and key. */
static void ns_hide_dirs(struct tfs_wb *wb, const char *dkey,
                         const char *key, struct tfs_buf *rec)
{
    char buf[WB_KEY_MAX + 2];
    size_t dlen = strlen(dkey);
    size_t len = strlen(key);

    for (size_t i = dlen; i <= len && i <= WB_KEY_MAX; i++) {
        struct wb_ent *e;
        if (key[i - 1] != '/')
            continue;
        memcpy(buf, key, i);
        buf[i] = '\0';
        e = wb_ent_get(wb, buf);
        if (e == NULL || (e->kind == WB_DIRENT &&
                          (e->dflags & WB_D_HIDDEN)))
            continue;
        wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL,
                   (e->kind == WB_DIRENT ? e->dflags : 0) | WB_D_HIDDEN);
        wb_jop_ent(wb, rec, e);
    }
}

/* Rename one overlay entry (by key) under fromd to the same place in tod. */
static void ns_move_overlay(struct tfs_wb *wb, const char *key,
                            const char *fromd, const char *tod,
                            struct tfs_buf *rec)
{
    char dst[WB_KEY_MAX + 2];
    struct wb_ent *e = wb_ent_find(wb, key);
    struct wb_ent *t;

    if (e == NULL || e->kind == WB_NONE || e->kind == WB_WHITEOUT ||
        (size_t)snprintf(dst, sizeof(dst), "%s%s", tod,
                         key + strlen(fromd)) >= sizeof(dst) ||
        (t = wb_ent_get(wb, dst)) == NULL)
        return;
    if (e->kind == WB_DIRENT) {
        if (!(e->dflags & WB_D_LOCAL))
            return;
        wb_ent_set(wb, t, WB_DIRENT, NULL, NULL, NULL, WB_D_LOCAL);
        wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL,
                   e->dflags & ~WB_D_LOCAL);
        wb_jop_ent(wb, rec, t);
        wb_jop_ent(wb, rec, e);
        wb_ent_release(wb, e);
        return;
    }
    if (ns_move_one(wb, e, t, NULL, ns_target_maybe(t, false), NULL, rec))
        assert(!"a staged file in the empty target directory");
    wb_ent_release(wb, e);
}

/* The keys of the overlay entries under dkey (a snapshot). */
static int ns_overlay_keys(struct tfs_wb *wb, const char *dkey,
                           struct ns_objs *o)
{
    size_t dlen = strlen(dkey);
    struct tfs_list_page pg = {0};
    struct tfs_list_entry le = {0};
    struct tfs_hmap_iter it;
    struct wb_ent *e;
    int rc = 0;

    pg.entries = &le;
    pg.n_entries = 1;
    tfs_hmap_iter_init(&it, &wb->ents);
    while (rc == 0 && (e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (strncmp(e->h.key, dkey, dlen) != 0 || e->h.key[dlen] == '\0')
            continue;
        le.key = e->h.key;
        rc = ns_objs_page(o, &pg);
    }
    return rc;
}

/*
 * Apply a directory rename to the overlay: the store's objects that the
 * overlay leaves alone become pending moves (first, while the overlay
 * still tells them apart), then the overlay's own entries move.
 * wb->lock held.
 */
static int ns_rename_dir_locked(struct tfs_wb *wb, const char *fromd,
                                const char *tod, const struct ns_objs *objs,
                                struct tfs_buf *rec)
{
    struct ns_objs ov = {0};
    size_t flen = strlen(fromd);
    int rc = ns_overlay_keys(wb, fromd, &ov);

    for (size_t i = 0; i < objs->n && rc == 0; i++) {
        char dst[WB_KEY_MAX + 2];
        struct wb_ent *f = wb_ent_get(wb, objs->keys[i]);
        struct wb_ent *t = NULL;

        if (f == NULL) {
            rc = -ENOMEM;
            break;
        }
        ns_hide_dirs(wb, fromd, objs->keys[i], rec);
        if (f->kind == WB_NONE &&
            (size_t)snprintf(dst, sizeof(dst), "%s%s", tod,
                             objs->keys[i] + flen) < sizeof(dst))
            t = wb_ent_get(wb, dst);
        if (t != NULL &&
            ns_move_one(wb, f, t, &objs->st[i], false, NULL, rec))
            assert(!"a staged file in the empty target directory");
        wb_ent_release(wb, f);
    }
    for (size_t i = 0; i < ov.n && rc == 0; i++)
        ns_move_overlay(wb, ov.keys[i], fromd, tod, rec);
    ns_objs_cleanup(&ov);
    return rc;
}

static int ns_rename_dir(struct tfs_wb *wb, const char *from, const char *to)
{
    char fromd[WB_KEY_MAX + 2];
    char tod[WB_KEY_MAX + 2];
    struct ns_objs objs = {0};
    struct tfs_buf rec;
    uint64_t end = 0;
    int rc;

    snprintf(fromd, sizeof(fromd), "%s/", from);
    snprintf(tod, sizeof(tod), "%s/", to);
    tfs_buf_init(&rec, 0);
    pthread_rwlock_wrlock(&wb->ns_lock);
    rc = tfs_store_list_all(wb->st, fromd, NULL, ns_objs_page, &objs);
    if (rc == -ENOENT)
        rc = 0;
    pthread_mutex_lock(&wb->lock);
    if (rc == 0)
        rc = ns_rename_dir_locked(wb, fromd, tod, &objs, &rec);
    if (rc == 0) {
        struct wb_ent *f = wb_ent_get(wb, fromd);
        struct wb_ent *t = wb_ent_get(wb, tod);
        if (f != NULL && t != NULL) {
            wb_ent_set(wb, t, WB_DIRENT, NULL, NULL, NULL, WB_D_LOCAL);
            wb_ent_set(wb, f, WB_DIRENT, NULL, NULL, NULL, WB_D_HIDDEN);
            wb_jop_ent(wb, &rec, t);
            wb_jop_ent(wb, &rec, f);
        }
        wb_keep_parent(wb, fromd, &rec);
        wb_unhide_parents(wb, tod, &rec);
        rc = wb_journal_append(wb, &rec, &end);
    }
    pthread_mutex_unlock(&wb->lock);
    pthread_rwlock_unlock(&wb->ns_lock);
    ns_objs_cleanup(&objs);
    tfs_buf_cleanup(&rec);
    if (rc < 0)
        TFS_WARN("rename of directory '%s' to '%s' failed: %s", from, to,
                 tfs_strerror(rc));
    return rc == 0 ? wb_journal_sync(wb, end) : rc;
}

/* Whether directory key is empty in the view. */
static int ns_dir_empty(struct tfs_wb *wb, const char *key)
{
    char dkey[WB_KEY_MAX + 2];
    struct wb_list *l = NULL;
    int rc;

    snprintf(dkey, sizeof(dkey), "%s/", key);
    rc = wb_opendir(wb, dkey, &l);
    if (rc == 0 && wb_list_count(l) > 0)
        rc = -ENOTEMPTY;
    wb_list_free(l);
    return rc == -ENOENT ? 0 : rc;
}

int wb_rename(struct tfs_wb *wb, const char *from, const char *to,
              unsigned flags, bool *is_dir)
{
    size_t flen = strlen(from);
    struct wb_obj of;
    struct wb_obj ot;
    bool t_exists;
    int rc;

    *is_dir = false;
    if (strcmp(from, to) == 0)
        return 0;
    if (strncmp(to, from, flen) == 0 && to[flen] == '/')
        return -EINVAL;                 /* into itself */
    rc = wb_lookup(wb, from, &of);
    if (rc < 0)
        return rc;
    *is_dir = of.is_dir;
    rc = wb_lookup(wb, to, &ot);
    t_exists = rc == 0;
    wb_obj_cleanup(&ot);
    if (rc == -ENOENT)
        rc = 0;
    if (rc == 0 && t_exists && (flags & WB_NOREPLACE))
        rc = -EEXIST;
    if (rc == 0 && t_exists && of.is_dir != ot.is_dir)
        rc = of.is_dir ? -ENOTDIR : -EISDIR;
    if (rc == 0 && t_exists && of.is_dir)
        rc = ns_dir_empty(wb, to);
    if (rc == 0 && of.is_dir)
        rc = ns_rename_dir(wb, from, to);
    else if (rc == 0)
        rc = ns_rename_file(wb, from, to, &of,
                            t_exists && ot.node == NULL && !ot.is_dir);
    wb_obj_cleanup(&of);
    return rc;
}
