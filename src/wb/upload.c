/* SPDX-License-Identifier: MIT */
/*
 * The uploader: brings the store in line with the overlay.  In order:
 *
 *   scheduling  one thread walks the pending queue (FIFO) and submits
 *               what may start to the upload pool (its own workers, so
 *               uploads never take the cache's fetch workers)
 *   operations  put a sealed data file (multipart with parallel parts is
 *               the store's), move an object, remove one, check a hidden
 *               directory; the bandwidth cap is charged per file
 *               (an eager upload of the file, eager.c, only completes)
 *   completion  the metadata cache learns the change first, then the
 *               entry leaves the overlay (a journaled CLEAR); transient
 *               failures back off exponentially and try again, forever;
 *               a permanent one parks the change (kept in staging, not
 *               tried again until it changes or the mount restarts)
 *   sync        waiting for a barrier under a prefix
 *
 * Ordering: one operation per key at a time (busy); nothing changes a
 * key in the store while it is the source of a pending move (pins); a
 * move waits for its source's operations.  Together with the journal's
 * order this keeps the store's end state that of the view.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tierfs/log.h"
#include "common/json.h"
#include "wb/wb_int.h"

#define UP_BACKOFF_MIN_NS 100000000ull  /* 100 ms */
#define UP_HURRY_NS 1000000000ull       /* backoff cap while a sync waits */
#define UP_GONE 1                       /* the work vanished: no error */

enum up_kind {
    UP_PUT,
    UP_MOVE,
    UP_REMOVE,
    UP_CHECK,                           /* may a directory's mark go */
};

struct wb_op {
    struct tfs_pool_task task;
    struct tfs_wb       *wb;
    int                  kind;          /* up_kind */
    struct wb_ent       *e;             /* the key worked on (busy) */
    struct wb_ent       *se;            /* UP_MOVE: its source (busy) */
    char                *key;           /* owned copies */
    char                *src;
    struct wb_node      *node;          /* UP_PUT: a reference */
    uint64_t             id;            /* UP_PUT: the sealed data file */
    uint64_t             size;
    uint64_t             sgen;          /* its sealed_gen */
    uint64_t             seq;           /* e->seq when it started */
    int                  rc;
    char                 detail[256];
    struct tfs_stat      out;           /* UP_PUT: the new object */
    bool                 objects;       /* UP_CHECK: objects under it */
    bool                 exists;        /* UP_CHECK: a real directory */
    char               **subdirs;       /* UP_CHECK: some prefixes under
                                           it (owned) */
    size_t               n_subdirs;
};

/* ---- scheduling ---- */

static bool up_under(const char *key, const char *prefix)
{
    size_t plen = strlen(prefix);

    if (plen == 0)
        return true;
    if (prefix[plen - 1] == '/')
        return strncmp(key, prefix, plen) == 0;
    return strcmp(key, prefix) == 0;
}

/*
 * Whether e's work failed for good and nothing changed since: a newer
 * change to the key (a write sealed, a rename, a delete) bumps e->seq,
 * and a remount rebuilds the entry with parked_seq 0.
 */
static bool up_parked(const struct wb_ent *e)
{
    return wb_ent_parked(e);
}

/* Whether a waiting sync covers e (then no upload delay, short backoff).
   wb->lock held. */
static bool up_hurried(struct tfs_wb *wb, const struct wb_ent *e)
{
    for (const struct wb_hurry *h = wb->hurry; h != NULL; h = h->next) {
        if (e->seq <= h->seq && (up_under(e->h.key, h->prefix) ||
                                 (e->kind == WB_MOVED &&
                                  up_under(e->src, h->prefix))))
            return true;
    }
    return false;
}

/*
 * When e's work may start: 0 now, UINT64_MAX when it waits for another
 * key, else the time.  wb->lock held.
 */
static uint64_t up_ready_at(struct tfs_wb *wb, struct wb_ent *e,
                            uint64_t now)
{
    bool hurry = wb->hurry != NULL && up_hurried(wb, e);
    uint64_t t = hurry ? 0 : e->ready_ns;
    uint64_t retry = e->retry_ns;

    if (e->busy || (e->kind != WB_DIRENT && e->pins > 0) || up_parked(e))
        return UINT64_MAX;
    if (e->kind == WB_MOVED) {
        struct wb_ent *s = wb_ent_find(wb, e->src);
        if (s != NULL && s->busy)
            return UINT64_MAX;
    }
    if (e->kind == WB_DIRENT) {
        const struct wb_pfx *p = wb_pfx_find(wb, e->h.key);
        if (p != NULL && ((e->dflags & WB_D_HIDDEN) ? p->wo : p->all) > 0)
            return UINT64_MAX;          /* what is under it goes first */
    }
    if (hurry && retry > e->fail_ns + UP_HURRY_NS)
        retry = e->fail_ns + UP_HURRY_NS;
    t = TFS_MAX(t, retry);
    return t <= now ? 0 : t;
}

static struct wb_op *up_op_new(struct tfs_wb *wb, struct wb_ent *e)
{
    struct wb_op *op = tfs_calloc(1, sizeof(*op));

    if (op == NULL)
        return NULL;
    op->wb = wb;
    op->e = e;
    op->key = tfs_strdup(e->h.key);
    op->src = e->kind == WB_MOVED ? tfs_strdup(e->src) : NULL;
    if (op->key == NULL || (e->kind == WB_MOVED && op->src == NULL)) {
        tfs_free(op->key);
        tfs_free(op->src);
        tfs_free(op);
        return NULL;
    }
    return op;
}

/* Describe e's work in op and mark the keys busy.  wb->lock held. */
static void up_op_fill(struct tfs_wb *wb, struct wb_ent *e, struct wb_op *op)
{
    struct wb_node *n = e->node;

    switch (e->kind) {
    case WB_NODE:
        op->kind = UP_PUT;
        op->node = wb_node_get(n);
        op->id = n->sealed_id;
        op->size = n->sealed_size;
        op->sgen = n->sealed_gen;
        n->maybe_in_store = true;       /* from now on it may be there */
        break;
    case WB_MOVED:
        op->kind = UP_MOVE;
        op->se = wb_ent_find(wb, e->src);
        if (op->se != NULL)
            op->se->busy = true;
        break;
    case WB_WHITEOUT:
        op->kind = UP_REMOVE;
        break;
    default:
        op->kind = UP_CHECK;
        break;
    }
    op->seq = e->seq;
    e->busy = true;
    wb->inflight++;
}

static void up_run(struct tfs_pool_task *task);

/* Submit what may start; returns when the next waiting entry is due. */
static uint64_t up_schedule(struct tfs_wb *wb)
{
    uint64_t now = tfs_now_ns();
    uint64_t next = UINT64_MAX;

    for (struct wb_ent *e = wb->qhead;
         e != NULL && wb->inflight < wb->cfg.upload_jobs; e = e->qnext) {
        uint64_t t = up_ready_at(wb, e, now);
        struct wb_op *op;

        if (t != 0) {
            next = TFS_MIN(next, t);
            continue;
        }
        op = up_op_new(wb, e);
        if (op == NULL) {
            next = TFS_MIN(next, now + UP_BACKOFF_MIN_NS);
            break;
        }
        up_op_fill(wb, e, op);
        op->task.fn = up_run;
        if (tfs_pool_submit(wb->pool, &op->task) < 0) {
            op->rc = -ESHUTDOWN;        /* stopping: undo */
            e->busy = false;
            if (op->se != NULL)
                op->se->busy = false;
            wb->inflight--;
            wb_node_put(op->node);
            tfs_free(op->key);
            tfs_free(op->src);
            tfs_free(op);
            break;
        }
    }
    return next;
}

static void *up_sched_main(void *arg)
{
    struct tfs_wb *wb = arg;

    pthread_mutex_lock(&wb->lock);
    while (!wb->stopping) {
        uint64_t next;
        uint64_t now;

        if (wb->j.size >= wb->j.compact_at)
            wb_journal_compact(wb);
        next = up_schedule(wb);
        now = tfs_now_ns();
        if (next <= now)
            continue;
        tfs_cond_wait_ms(&wb->kick, &wb->lock,
                        next == UINT64_MAX ? 1000
                        : TFS_MIN((next - now) / 1000000 + 1, 1000));
    }
    pthread_mutex_unlock(&wb->lock);
    return NULL;
}

/* ---- operations ---- */

static int up_put(struct tfs_wb *wb, struct wb_op *op)
{
    struct tfs_source src = {.fd = -1, .off = 0, .len = op->size};
    char path[4200];
    struct stat sb;
    int rc;

    wb_data_path(wb, op->id, path, sizeof(path));
    src.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src.fd < 0 && errno == ENOENT)
        return UP_GONE;                 /* a newer seal replaced it */
    if (src.fd < 0)
        return tfs_err(-errno, "staging: cannot open %s", path);
    if (fstat(src.fd, &sb) < 0 || (uint64_t)sb.st_size != op->size) {
        rc = tfs_err(-EIO, "staging: %s is not %" PRIu64 " bytes", path,
                     op->size);
        goto out_close;
    }
    /* An eager upload sent most of it already (charged part by part). */
    rc = wb_eager_finish(wb, op->node, op->id, op->key, op->size, &op->out);
    if (rc == 0)
        goto out_close;
    tfs_ratelimit_take(&wb->bw, op->size);
    rc = tfs_store_put_source(wb->st, op->key, &src, &op->out);
out_close:
    close(src.fd);
    return rc;
}

static int up_move(struct tfs_wb *wb, struct wb_op *op)
{
    struct tfs_stat st;
    int rc = tfs_store_move(wb->st, op->src, op->key);

    if (rc != -ENOENT)
        return rc;
    /* A crash after the move and before its CLEAR: it is done.  Else the
       source went away (deleted elsewhere): nothing to move. */
    rc = tfs_store_stat(wb->st, op->key, &st);
    if (rc == 0)
        return 0;
    TFS_WARN("upload: rename of '%s' to '%s': the source is gone from the "
             "store; dropped", op->src, op->key);
    return UP_GONE;
}

/*
 * What the store has at directory op->key: objects directly under it,
 * some subdirectories, and whether it exists on its own (a posix store's
 * real directory).  up_check_done decides with the overlay.
 */
static int up_check(struct tfs_wb *wb, struct wb_op *op)
{
    struct tfs_list_page pg;
    struct tfs_stat st;
    char dir[WB_KEY_MAX + 1];
    int rc = tfs_store_list(wb->st, op->key, "/", NULL, 16, &pg);

    if (rc < 0)
        return rc;
    op->objects = pg.n_entries > 0;
    op->subdirs = tfs_calloc(pg.n_prefixes + 1, sizeof(*op->subdirs));
    for (size_t i = 0; op->subdirs != NULL && i < pg.n_prefixes; i++) {
        op->subdirs[i] = tfs_strdup(pg.prefixes[i]);
        op->n_subdirs += op->subdirs[i] != NULL;
    }
    tfs_list_page_cleanup(&pg);
    if (op->subdirs == NULL)
        return -ENOMEM;
    snprintf(dir, sizeof(dir), "%.*s", (int)strlen(op->key) - 1, op->key);
    rc = tfs_store_stat(wb->st, dir, &st);
    op->exists = rc == -EISDIR || rc == 0;
    return rc == -EISDIR || rc == -ENOENT ? 0 : rc;
}

/* ---- completion ---- */

static uint64_t up_backoff_ns(struct tfs_wb *wb, unsigned attempts)
{
    uint64_t max = wb->cfg.retry_max_ms * 1000000;
    uint64_t d = UP_BACKOFF_MIN_NS << TFS_MIN(attempts, 30u);

    d = TFS_MIN(d, TFS_MAX(max, UP_BACKOFF_MIN_NS));
    return d / 2 + (uint64_t)(tfs_rand_double() * (double)(d / 2));
}

static const char *up_verb(int kind)
{
    static const char *verbs[] = {"upload", "rename", "delete", "check"};

    return verbs[kind];
}

/*
 * Whether rc means the store refuses this change for good (EACCES, a bad
 * key, EFBIG, ENAMETOOLONG, EINVAL...): not tfs_err_is_retryable, and
 * not a shortage on this node (memory, descriptors, local space), which
 * passes.
 */
static bool up_is_permanent(int rc)
{
    switch (rc) {
    case -ENOMEM:
    case -EMFILE:
    case -ENFILE:
    case -ENOSPC:
    case -ENOBUFS:
    case -EDQUOT:
        return false;
    default:
        return !tfs_err_is_retryable(rc);
    }
}

/* A permanent failure: park the change until it changes.  wb->lock held. */
static void up_park(struct wb_op *op)
{
    struct wb_ent *e = op->e;

    e->parked_seq = e->seq;
    TFS_WARN("%s of '%s' failed for good: " TFS_CAUSE_FMT "; parked (kept "
             "in staging, tried again after a change to it or a remount)",
             up_verb(op->kind), op->key, TFS_CAUSE_ARGS(op->rc, op->detail));
}

/* A failed attempt: back off, count, log.  wb->lock held. */
static void up_failed(struct tfs_wb *wb, struct wb_op *op)
{
    struct wb_ent *e = op->e;
    uint64_t now = tfs_now_ns();
    uint64_t wait = up_backoff_ns(wb, e->attempts);
    int level;

    e->attempts++;
    e->last_err = op->rc;
    e->fail_ns = now;
    e->retry_ns = now + wait;
    tfs_free(e->last_detail);
    e->last_detail = tfs_strdup(op->detail);
    atomic_fetch_add(&wb->n.errors, 1);
    if (e->seq == op->seq && up_is_permanent(op->rc)) {
        up_park(op);
        return;
    }
    atomic_fetch_add(&wb->n.retries, 1);
    level = e->attempts == 1 || e->attempts % 10 == 0 ? TFS_LOG_WARNING
                                                      : TFS_LOG_INFO;
    TFS_LOGL(level, "%s of '%s' failed (attempt %u, next in %.1f s): "
             TFS_CAUSE_FMT, up_verb(op->kind), op->key, e->attempts,
             (double)wait / 1e9, TFS_CAUSE_ARGS(op->rc, op->detail));
}

/* Count uploaded bytes toward the smoothed rate.  wb->lock held. */
static void up_rate(struct tfs_wb *wb, uint64_t bytes)
{
    uint64_t now = tfs_now_ns();

    wb->rate_bytes += bytes;
    if (wb->rate_t_ns == 0)
        wb->rate_t_ns = now;
    if (now - wb->rate_t_ns >= 1000000000ull) {
        double r = (double)wb->rate_bytes * 1e9 /
                   (double)(now - wb->rate_t_ns);
        wb->rate = wb->rate == 0 ? r : 0.5 * wb->rate + 0.5 * r;
        wb->rate_t_ns = now;
        wb->rate_bytes = 0;
    }
}

/*
 * A put succeeded: the node's content is in the store.  When it is still
 * this key's content and nothing newer waits, it leaves the view.
 * Returns the node to detach, or NULL.  wb->lock held.
 */
static struct wb_node *up_put_done(struct tfs_wb *wb, struct wb_op *op,
                                   struct tfs_buf *rec)
{
    struct wb_node *n = op->node;
    struct wb_ent *e = op->e;
    bool dirty;

    atomic_fetch_add(&wb->n.uploaded_files, 1);
    atomic_fetch_add(&wb->n.uploaded_bytes, op->size);
    up_rate(wb, op->size);
    if (e->kind != WB_NODE || e->node != n)
        return NULL;                    /* renamed or deleted meanwhile */
    pthread_mutex_lock(&n->lock);
    if (n->up_gen < op->sgen) {
        n->up_gen = op->sgen;
        n->up_st = op->out;
    }
    /* A handle open for writing keeps the node in the view: detached,
       its next writes and seal would belong to no key (a file created
       empty, uploaded at once, then written and closed lost its bytes). */
    dirty = n->dirty || n->writers > 0;
    pthread_mutex_unlock(&n->lock);
    if (dirty || n->sealed_gen != op->sgen)
        return NULL;                    /* newer content may follow */
    wb_ent_set(wb, e, WB_NONE, NULL, NULL, NULL, 0);
    wb_jop_ent(wb, rec, e);
    return n;
}

/*
 * A directory's marks after a check.  HIDDEN goes once the store has
 * visible content there (new objects, or a subdirectory we do not hide)
 * or nothing at all; LOCAL (kept alive here) goes once the store shows
 * the directory by itself.  Otherwise the mark stays and is not checked
 * again until the next mount.  wb->lock held.
 */
static void up_check_done(struct tfs_wb *wb, struct wb_op *op,
                          struct tfs_buf *rec)
{
    struct wb_ent *e = op->e;
    bool visible = op->objects;
    unsigned flags;

    for (size_t i = 0; i < op->n_subdirs && !visible; i++)
        visible = !wb_dir_hidden(wb, op->subdirs[i]);
    if (e->kind != WB_DIRENT || e->seq != op->seq)
        return;                         /* changed meanwhile: check again */
    flags = e->dflags;
    if ((flags & WB_D_HIDDEN) && (visible || !op->exists))
        flags &= ~WB_D_HIDDEN;
    else if ((flags & WB_D_LOCAL) && !(flags & WB_D_HIDDEN) &&
             (visible || op->exists))
        flags &= ~WB_D_LOCAL;
    TFS_DEBUG("upload: check of '%s': objects %d, exists %d, visible %d: "
              "flags %u -> %u", op->key, op->objects, op->exists, visible,
              e->dflags, flags);
    if (flags == e->dflags) {
        e->checked = true;
        return;
    }
    wb_ent_set(wb, e, WB_DIRENT, NULL, NULL, NULL, flags);
    wb_jop_ent(wb, rec, e);
}

/*
 * A move landed after its entry moved on (renamed again meanwhile): the
 * object is at op->key now, so the pending moves still naming the old
 * source take it from there.  wb->lock held.
 */
static void up_redirect(struct tfs_wb *wb, struct wb_op *op,
                        struct tfs_buf *rec)
{
    struct wb_ent *s = wb_ent_find(wb, op->src);
    struct wb_ent *found[8];
    struct tfs_hmap_iter it;
    struct wb_ent *e;
    size_t n = 0;

    tfs_hmap_iter_init(&it, &wb->ents);
    while (s != NULL && s->pins > 0 && n < 8 &&
           (e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (e->kind == WB_MOVED && strcmp(e->src, op->src) == 0)
            found[n++] = e;
    }
    for (size_t i = 0; i < n; i++) {    /* may free s: not used below */
        struct wb_ent *m = found[i];
        struct tfs_stat st = m->st;
        if (strcmp(m->h.key, op->key) == 0)
            wb_ent_set(wb, m, WB_NONE, NULL, NULL, NULL, 0);
        else
            wb_ent_set(wb, m, WB_MOVED, NULL, op->key, &st, 0);
        wb_jop_ent(wb, rec, m);
    }
}

/* Apply a successful operation to the overlay.  wb->lock held. */
static struct wb_node *up_done(struct tfs_wb *wb, struct wb_op *op,
                               struct tfs_buf *rec)
{
    struct wb_ent *e = op->e;

    e->attempts = 0;
    e->retry_ns = 0;
    switch (op->kind) {
    case UP_PUT:
        return op->rc == UP_GONE ? NULL : up_put_done(wb, op, rec);
    case UP_MOVE:
        atomic_fetch_add(&wb->n.moves, op->rc == 0);
        if (e->kind == WB_MOVED && strcmp(e->src, op->src) == 0) {
            wb_ent_set(wb, e, WB_NONE, NULL, NULL, NULL, 0);
            wb_jop_ent(wb, rec, e);
        } else if (op->rc == 0) {
            up_redirect(wb, op, rec);
        }
        return NULL;
    case UP_REMOVE:
        atomic_fetch_add(&wb->n.removes, 1);
        if (e->kind == WB_WHITEOUT) {
            wb_ent_set(wb, e, WB_NONE, NULL, NULL, NULL, 0);
            wb_jop_ent(wb, rec, e);
        }
        return NULL;
    default:
        up_check_done(wb, op, rec);
        return NULL;
    }
}

/* Tell the metadata cache first, so the view never shows stale data once
   the entry leaves the overlay. */
static void up_note_cache(struct tfs_wb *wb, struct wb_op *op)
{
    if (op->rc != 0)
        return;
    if (op->kind == UP_PUT)
        tfs_cache_note_put(wb->cache, op->key, &op->out);
    else if (op->kind == UP_MOVE || op->kind == UP_REMOVE)
        tfs_cache_note_put(wb->cache, op->key, NULL);
    if (op->kind == UP_MOVE)
        tfs_cache_note_put(wb->cache, op->src, NULL);
}

static void up_complete(struct tfs_wb *wb, struct wb_op *op)
{
    struct wb_node *detach = NULL;
    struct tfs_buf rec;
    uint64_t end = 0;

    up_note_cache(wb, op);
    tfs_buf_init(&rec, 0);
    pthread_rwlock_rdlock(&wb->ns_lock);
    pthread_mutex_lock(&wb->lock);
    op->e->busy = false;
    if (op->se != NULL)
        op->se->busy = false;
    wb->inflight--;
    if (op->kind == UP_PUT && op->rc == UP_GONE && op->e->kind == WB_NODE &&
        op->e->node == op->node && op->node->sealed_id == op->id) {
        op->rc = -EIO;                  /* not replaced: lost */
        snprintf(op->detail, sizeof(op->detail), "staged data file %016"
                 PRIx64 " is missing", op->id);
    }
    if (op->rc < 0)
        up_failed(wb, op);
    else
        detach = up_done(wb, op, &rec);
    if (wb_journal_append(wb, &rec, &end) < 0)
        end = 0;
    wb_ent_requeue(wb, op->e);
    if (op->se != NULL)
        wb_ent_requeue(wb, op->se);
    wb_ent_release(wb, op->e);
    wb_ent_release(wb, op->se);
    pthread_cond_broadcast(&wb->changed);
    wb_upload_kick(wb);
    pthread_mutex_unlock(&wb->lock);
    pthread_rwlock_unlock(&wb->ns_lock);
    tfs_buf_cleanup(&rec);
    if (detach != NULL && wb_journal_sync(wb, end) == 0)
        wb_node_detached(wb, detach);
    wb_node_put(detach);                /* the view's reference */
}

static void up_run(struct tfs_pool_task *task)
{
    struct wb_op *op = tfs_container_of(task, struct wb_op, task);
    struct tfs_wb *wb = op->wb;

    switch (op->kind) {
    case UP_PUT:
        op->rc = up_put(wb, op);
        break;
    case UP_MOVE:
        op->rc = up_move(wb, op);
        break;
    case UP_REMOVE:
        op->rc = tfs_store_remove(wb->st, op->key);
        break;
    default:
        op->rc = up_check(wb, op);
        break;
    }
    if (op->rc < 0)
        snprintf(op->detail, sizeof(op->detail), "%s", tfs_errdetail());
    up_complete(wb, op);
    wb_node_put(op->node);
    for (size_t i = 0; i < op->n_subdirs; i++)
        tfs_free(op->subdirs[i]);
    tfs_free(op->subdirs);
    tfs_free(op->key);
    tfs_free(op->src);
    tfs_free(op);
}

/* ---- start, stop ---- */

int wb_upload_start(struct tfs_wb *wb)
{
    int rc = tfs_pool_create(&wb->pool, wb->cfg.upload_jobs);

    if (rc == 0)
        rc = wb_eager_start(wb);
    if (rc < 0)
        return rc;
    tfs_ratelimit_init(&wb->bw, wb->cfg.upload_bw);
    if (pthread_create(&wb->sched, NULL, up_sched_main, wb) != 0)
        return -EAGAIN;
    wb->sched_started = true;
    return 0;
}

void wb_upload_stop(struct tfs_wb *wb)
{
    if (wb->sched_started) {
        pthread_mutex_lock(&wb->lock);
        wb->stopping = true;
        pthread_cond_signal(&wb->kick);
        pthread_mutex_unlock(&wb->lock);
        pthread_join(wb->sched, NULL);
        wb->sched_started = false;
    }
    tfs_pool_destroy(wb->pool);         /* operations in flight finish */
    wb->pool = NULL;
    wb_eager_stop(wb);                  /* after the puts that wait on it */
}

/* ---- sync ---- */

uint64_t wb_sync_seq(struct tfs_wb *wb)
{
    uint64_t seq;

    pthread_mutex_lock(&wb->lock);
    seq = wb->seq;
    pthread_mutex_unlock(&wb->lock);
    return seq;
}

static const char *up_kind_verb(const struct wb_ent *e)
{
    return e->kind == WB_NODE ? "upload" : e->kind == WB_MOVED ? "rename"
                                                                : "delete";
}

/*
 * One "upload of 'key': cause" line for a parked entry into b[size],
 * control characters of the key shown as '?'; false when it did not fit.
 */
static bool up_parked_line(const struct wb_ent *e, char *b, size_t size)
{
    char key[WB_KEY_MAX + 1];
    size_t i;
    int n;

    for (i = 0; e->h.key[i] != '\0' && i < WB_KEY_MAX; i++)
        key[i] = (unsigned char)e->h.key[i] < 0x20 ? '?' : e->h.key[i];
    key[i] = '\0';
    n = snprintf(b, size, "%s of '%s': " TFS_CAUSE_FMT "\n",
                 up_kind_verb(e), key,
                 TFS_CAUSE_ARGS(e->last_err, e->last_detail));
    return n >= 0 && (size_t)n < size;
}

/* A parked entry into out's count and list.  wb->lock held. */
static void up_count_parked(const struct wb_ent *e, struct wb_sync *out)
{
    size_t used = strlen(out->parked_list);

    out->parked++;
    if (!up_parked_line(e, out->parked_list + used,
                        sizeof(out->parked_list) - used))
        out->parked_list[used] = '\0';     /* the rest: in the stats */
}

/* Count what remains under prefix up to seq.  wb->lock held. */
static void up_count(struct tfs_wb *wb, const char *prefix, uint64_t seq,
                     struct wb_sync *out)
{
    uint64_t last_fail = 0;

    out->pending = out->bytes = out->errors = out->parked = 0;
    out->parked_list[0] = '\0';
    for (struct wb_ent *e = wb->qhead; e != NULL; e = e->qnext) {
        if (e->kind == WB_DIRENT || e->seq > seq ||
            !up_under(e->h.key, prefix))
            continue;
        if (up_parked(e)) {
            up_count_parked(e, out);
            continue;
        }
        out->pending++;
        out->bytes += e->kind == WB_NODE ? e->node->sealed_size : 0;
        out->errors += e->attempts;
        if (e->attempts > 0 && e->fail_ns >= last_fail) {
            last_fail = e->fail_ns;
            snprintf(out->last_error, sizeof(out->last_error),
                     "%s of '%s': " TFS_CAUSE_FMT, up_kind_verb(e),
                     e->h.key, TFS_CAUSE_ARGS(e->last_err, e->last_detail));
        }
    }
}

/* Files under prefix open with writes not yet sealed.  wb->lock held. */
static uint64_t up_dirty(struct tfs_wb *wb, const char *prefix)
{
    struct tfs_hmap_iter it;
    struct wb_ent *e;
    uint64_t n = 0;

    tfs_hmap_iter_init(&it, &wb->ents);
    while ((e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        bool dirty;

        if (e->kind != WB_NODE || !up_under(e->h.key, prefix))
            continue;
        pthread_mutex_lock(&e->node->lock);
        dirty = e->node->dirty;
        pthread_mutex_unlock(&e->node->lock);
        n += dirty;
    }
    return n;
}

void wb_sync_status(struct tfs_wb *wb, const char *prefix, uint64_t seq,
                    uint64_t wait_ms, struct wb_sync *out)
{
    uint64_t end = tfs_now_ns() + wait_ms * 1000000;
    struct wb_hurry h = {prefix, seq, NULL};
    struct wb_hurry **pp;

    memset(out, 0, sizeof(*out));
    out->seq = seq;
    pthread_mutex_lock(&wb->lock);
    h.next = wb->hurry;
    wb->hurry = &h;
    wb_upload_kick(wb);
    for (;;) {
        uint64_t now;
        up_count(wb, prefix, seq, out);
        now = tfs_now_ns();
        if (out->pending == 0 || now >= end)
            break;
        tfs_cond_wait_ms(&wb->changed, &wb->lock,
                        (end - now) / 1000000 + 1);
    }
    out->dirty = up_dirty(wb, prefix);
    for (pp = &wb->hurry; *pp != &h; pp = &(*pp)->next)
        ;
    *pp = h.next;
    pthread_mutex_unlock(&wb->lock);
}

/* ---- parked changes in the stats ---- */

#define UP_PARKED_LISTED 100            /* entries named in the JSON */

/* {"op": ..., "key": ..., "error": ..., "detail": ...}.  wb->lock held. */
static int up_json_parked(struct tfs_buf *b, const struct wb_ent *e)
{
    int rc = tfs_buf_printf(b, "{\"op\": \"%s\", \"key\": ",
                            up_kind_verb(e));

    if (rc == 0)
        rc = tfs_json_put_cstr(b, e->h.key);
    if (rc == 0)
        rc = tfs_buf_puts(b, ", \"error\": ");
    if (rc == 0)
        rc = tfs_json_put_cstr(b, tfs_strerror(e->last_err));
    if (rc == 0)
        rc = tfs_buf_puts(b, ", \"detail\": ");
    if (rc == 0)
        rc = tfs_json_put_cstr(b, e->last_detail ? e->last_detail : "");
    return rc == 0 ? tfs_buf_puts(b, "}") : rc;
}

int wb_parked_json(struct tfs_wb *wb, struct tfs_buf *b)
{
    uint64_t n = 0;
    int rc = tfs_buf_puts(b, "\"parked_changes\": [");

    pthread_mutex_lock(&wb->lock);
    for (struct wb_ent *e = wb->qhead;
         e != NULL && rc == 0 && n < UP_PARKED_LISTED; e = e->qnext) {
        if (!up_parked(e))
            continue;
        rc = tfs_buf_puts(b, n > 0 ? ",\n    " : "\n    ");
        if (rc == 0)
            rc = up_json_parked(b, e);
        n++;
    }
    pthread_mutex_unlock(&wb->lock);
    return rc == 0 ? tfs_buf_puts(b, "]") : rc;
}
