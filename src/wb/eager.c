/* SPDX-License-Identifier: MIT */
/*
 * Eager uploads: the parts of a staged file go to the store while the
 * file is still being written, and the uploader only sends the tail and
 * completes (docs/writeback.md, "Eager upload").  In order:
 *
 *   side files  STAGING/eager/<id>: the key and upload id of every upload
 *               created, so that a crash leaves none behind: the next
 *               mount (and an unmount) aborts what they name
 *   life cycle  start (once the writer has passed the first part),
 *               cancel (a write behind the parts sent, a truncate, a new
 *               data file, a rename or unlink, an error), the abort
 *   parts       a pool of eager_parts workers sends each part once the
 *               writer has moved past it, at most eager_parts of one
 *               file at a time; the writer only queues them, never waits
 *   finish      the uploader (up_put, after the seal and the upload
 *               delay) sends the tail (from its own thread and up to
 *               3 it starts, at the uploader's priority:
 *               the part workers run below the writer's) and completes;
 *               anything wrong there falls back to the whole-file put
 *
 * The rule that keeps the object right: a part is read from the data
 * file only after the writer has moved past it, and any later change to
 * a byte below the end of the parts queued cancels the upload, which then
 * never completes.  Every change to a data file's bytes goes through
 * wb_node_write or wb_node_truncate (or makes a new data file), and all
 * of them are hooked, before the seal that the completion waits for.
 *
 * Lock order: node->lock, then e->lock (a leaf but for the pool's lock).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tierfs/log.h"
#include "wb/wb_int.h"

#define EG_MIN_PART   (8ull << 20)      /* bytes: the smallest part used */
#define EG_MAGIC      "TFSEAG1\n"       /* side file: magic, then fields */
#define EG_ABORT_NS   10000000000ull    /* deadline of one abort */
#define EG_GAPS       8                 /* ranges written out of order */
#define EG_TAIL_THREADS 4               /* senders of a sealed file's tail */
#ifndef EG_NICE
#define EG_NICE       10                /* the part workers' nice value */
#endif

enum eg_state {
    EG_IDLE,                            /* following the writer; nothing
                                           in the store yet */
    EG_CREATING,                        /* the create is in flight */
    EG_RUNNING,                         /* parts go as the writer moves */
    EG_COMPLETING,                      /* the uploader completes it */
    EG_DONE,                            /* the object is in the store */
    EG_ABORTING,                        /* cancelled: abort when idle */
    EG_ABORTED,                         /* nothing of it left (or kept in
                                           its side file for recovery) */
};

struct wb_eager {
    atomic_uint      refs;
    struct tfs_wb   *wb;                /* immutable */
    char            *key;               /* owned, immutable */
    uint64_t         id;                /* the data file, immutable */
    uint64_t         psize;             /* part size, immutable */
    pthread_mutex_t  lock;
    pthread_cond_t   cond;              /* a part or the state changed */
    int              state;             /* eg_state; lock */
    bool             created;           /* upload_id is set and recorded
                                           in its side file; lock */
    bool             abort_queued;      /* lock */
    bool             finishing;         /* final is the size; lock */
    char             upload_id[TFS_UPLOAD_ID_MAX]; /* set before created */
    uint64_t         hi;                /* bytes [0, hi) all written; lock */
    uint64_t         gaps[EG_GAPS][2];  /* written ranges past hi, apart
                                           (requests that arrived out of
                                           order); lock */
    unsigned         n_gaps;            /* lock */
    uint64_t         final;             /* size to complete at; lock */
    unsigned         next;              /* parts queued so far; lock */
    unsigned         done;              /* parts sent; lock */
    unsigned         inflight;          /* parts queued or sending; lock */
    unsigned         cap;               /* length of etags; lock */
    char           (*etags)[TFS_VERSION_MAX]; /* [cap], owned; lock */
};

enum eg_kind {
    EG_T_CREATE,
    EG_T_PART,
    EG_T_ABORT,
};

struct eg_task {
    struct tfs_pool_task task;
    struct wb_eager     *e;             /* a reference */
    int                  kind;          /* eg_kind */
    unsigned             idx;           /* EG_T_PART: 0-based */
    uint64_t             off;
    uint64_t             len;
};

static void eg_put(struct wb_eager *e)
{
    if (e == NULL || atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    tfs_free(e->etags);
    tfs_free(e->key);
    tfs_free(e);
}

static struct wb_eager *eg_get(struct wb_eager *e)
{
    atomic_fetch_add(&e->refs, 1);
    return e;
}

/* ---- side files ---- */

/* "eager/<id>" names under the staging dir. */
static void eg_side_name(uint64_t id, char *buf, size_t size)
{
    snprintf(buf, size, "%016" PRIx64, id);
}

static void eg_put_u16(unsigned char *p, size_t v)
{
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

/*
 * Write STAGING/eager/<id>: magic | u16 key length | key | u16 upload id
 * length | upload id (little-endian), made durable before any part goes.
 */
static int eg_record(struct wb_eager *e)
{
    struct tfs_wb *wb = e->wb;
    size_t klen = strlen(e->key);
    size_t ilen = strlen(e->upload_id);
    size_t len = sizeof(EG_MAGIC) - 1 + 2 + klen + 2 + ilen;
    unsigned char *b = tfs_malloc(len);
    unsigned char *p = b;
    char name[32];
    int rc = 0;
    int fd;

    if (b == NULL)
        return -ENOMEM;
    memcpy(p, EG_MAGIC, sizeof(EG_MAGIC) - 1);
    p += sizeof(EG_MAGIC) - 1;
    eg_put_u16(p, klen);
    memcpy(p + 2, e->key, klen);
    p += 2 + klen;
    eg_put_u16(p, ilen);
    memcpy(p + 2, e->upload_id, ilen);
    eg_side_name(e->id, name, sizeof(name));
    fd = openat(wb->eager_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                0600);
    if (fd < 0)
        rc = tfs_err(-errno, "staging: cannot create eager/%s", name);
    if (fd >= 0 && (tfs_write_all(fd, b, len) < 0 || fdatasync(fd) < 0))
        rc = tfs_err(-EIO, "staging: cannot write eager/%s", name);
    if (fd >= 0)
        close(fd);
    if (rc == 0 && fsync(wb->eager_fd) < 0)
        rc = tfs_err(-errno, "staging: cannot fsync eager/");
    if (rc < 0 && fd >= 0)
        unlinkat(wb->eager_fd, name, 0);
    tfs_free(b);
    return rc;
}

static void eg_unrecord(struct tfs_wb *wb, uint64_t id)
{
    char name[32];

    eg_side_name(id, name, sizeof(name));
    if (unlinkat(wb->eager_fd, name, 0) < 0 && errno != ENOENT)
        TFS_WARN("staging: cannot remove eager/%s: %s", name,
                 tfs_strerror(-errno));
}

/* Parse a side file of len bytes into key and id (NUL-terminated). */
static int eg_parse(const unsigned char *b, size_t len, char *key,
                    size_t ksize, char *id, size_t isize)
{
    size_t m = sizeof(EG_MAGIC) - 1;
    size_t klen, ilen;

    if (len < m + 4 || memcmp(b, EG_MAGIC, m) != 0)
        return TFS_EFORMAT;
    klen = b[m] | (size_t)b[m + 1] << 8;
    if (klen == 0 || klen >= ksize || m + 2 + klen + 2 > len)
        return TFS_EFORMAT;
    ilen = b[m + 2 + klen] | (size_t)b[m + 3 + klen] << 8;
    if (ilen == 0 || ilen >= isize || m + 4 + klen + ilen != len)
        return TFS_EFORMAT;
    memcpy(key, b + m + 2, klen);
    key[klen] = '\0';
    memcpy(id, b + m + 4 + klen, ilen);
    id[ilen] = '\0';
    return 0;
}

/* Abort the upload a side file names; 0 when it is gone (removed). */
static int eg_recover_one(struct tfs_wb *wb, const char *name)
{
    static const size_t max = 8 + 4 + WB_KEY_MAX + TFS_UPLOAD_ID_MAX;
    unsigned char *b = tfs_malloc(max + 1);
    char *key = tfs_malloc(WB_KEY_MAX + 1);
    char *id = tfs_malloc(TFS_UPLOAD_ID_MAX);
    size_t len = 0;
    uint64_t prev;
    int fd = openat(wb->eager_fd, name, O_RDONLY | O_CLOEXEC);
    int rc = fd < 0 ? -errno : 0;

    if (rc == 0 && (b == NULL || key == NULL || id == NULL))
        rc = -ENOMEM;
    if (rc == 0)
        rc = tfs_pread_full(fd, b, max + 1, 0, &len);
    if (rc == 0)
        rc = eg_parse(b, len, key, WB_KEY_MAX + 1, id, TFS_UPLOAD_ID_MAX);
    if (fd >= 0)
        close(fd);
    if (rc == TFS_EFORMAT)
        TFS_WARN("staging: eager/%s is not a side file; removed", name);
    if (rc == 0) {
        prev = tfs_deadline_set(tfs_now_ns() + EG_ABORT_NS);
        rc = tfs_store_mpu_abort(wb->st, key, id);
        tfs_deadline_set(prev);
        if (rc < 0)
            TFS_WARN("staging: cannot abort the eager upload of '%s' (kept "
                     "in eager/%s for the next mount): " TFS_CAUSE_FMT,
                     key, name, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    }
    if (rc == 0 || rc == TFS_EFORMAT)
        unlinkat(wb->eager_fd, name, 0);
    tfs_free(b);
    tfs_free(key);
    tfs_free(id);
    return rc == TFS_EFORMAT ? 0 : rc;
}

int wb_eager_recover(struct tfs_wb *wb)
{
    int fd = wb->eager_fd >= 0 ? fcntl(wb->eager_fd, F_DUPFD_CLOEXEC, 0)
                               : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    unsigned done = 0;
    unsigned kept = 0;

    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (kept > 0 || eg_recover_one(wb, de->d_name) < 0)
            kept++;                     /* the store is away: next time */
        else
            done++;
    }
    closedir(d);
    if (done > 0)
        TFS_LOGL(TFS_LOG_NOTICE, "staging: aborted %u eager uploads of "
                 "files no longer being uploaded", done);
    atomic_fetch_add(&wb->n.eager_recovered, done);
    return kept > 0 ? -EAGAIN : 0;
}

/* ---- life cycle ---- */

/* Queue a task of e on the eager pool.  e->lock held (the pool's lock is
   taken under it). */
static int eg_submit(struct wb_eager *e, int kind, unsigned idx,
                     uint64_t off, uint64_t len);

/* Count a cancellation. */
static void eg_count(struct tfs_wb *wb, int why)
{
    if (why == WB_EAGER_REWRITE)
        atomic_fetch_add(&wb->n.eager_rewrite, 1);
    else if (why == WB_EAGER_RENAME)
        atomic_fetch_add(&wb->n.eager_rename, 1);
    else if (why == WB_EAGER_ERROR)
        atomic_fetch_add(&wb->n.eager_error, 1);
}

/* Queue the abort once nothing of e is in flight.  e->lock held. */
static void eg_settle(struct wb_eager *e)
{
    if (e->state != EG_ABORTING || !e->created || e->inflight > 0 ||
        e->abort_queued)
        return;
    e->abort_queued = true;
    if (eg_submit(e, EG_T_ABORT, 0, 0, 0) < 0)
        e->state = EG_ABORTED;          /* stopping: the side file stays */
}

/* Stop e for good (why: WB_EAGER_*); a no-op once it completes or is
   cancelled.  e->lock held. */
static void eg_cancel_locked(struct wb_eager *e, int why)
{
    if (e->state == EG_IDLE)
        e->state = EG_ABORTED;          /* nothing started: not counted */
    if (e->state != EG_CREATING && e->state != EG_RUNNING)
        return;
    eg_count(e->wb, why);
    TFS_DEBUG("eager upload of '%s': cancelled (%d) at part %u of %u "
              "queued", e->key, why, e->done, e->next);
    e->state = EG_ABORTING;
    eg_settle(e);
    pthread_cond_broadcast(&e->cond);
}

/* Room for part next in etags.  e->lock held. */
static int eg_grow(struct wb_eager *e)
{
    unsigned cap = e->cap ? e->cap * 2 : 64;
    void *p;

    if (e->next < e->cap)
        return 0;
    p = tfs_realloc(e->etags, (size_t)cap * sizeof(*e->etags));
    if (p == NULL)
        return -ENOMEM;
    e->etags = p;
    e->cap = cap;
    return 0;
}

/*
 * Queue the parts the writer has moved past, up to eager_parts in
 * flight; none once finishing (the uploader sends the tail).  e->lock
 * held.
 */
static void eg_pump(struct wb_eager *e)
{
    struct tfs_wb *wb = e->wb;

    while (e->state == EG_RUNNING && !e->finishing &&
           e->inflight < wb->cfg.eager_parts) {
        uint64_t off = (uint64_t)e->next * e->psize;
        uint64_t len = e->psize;

        if (off + e->psize > e->hi)
            break;
        if (eg_grow(e) < 0 || eg_submit(e, EG_T_PART, e->next, off, len)) {
            eg_cancel_locked(e, WB_EAGER_ERROR);
            break;
        }
        e->next++;
        e->inflight++;
    }
}

/* ---- the tasks, on the eager pool ---- */

static void eg_do_create(struct wb_eager *e)
{
    struct tfs_wb *wb = e->wb;
    int rc = tfs_store_mpu_create(wb->st, e->key, e->upload_id);
    int rc2 = rc == 0 ? eg_record(e) : 0;

    if (rc2 < 0)
        tfs_store_mpu_abort(wb->st, e->key, e->upload_id);
    rc = rc < 0 ? rc : rc2;
    if (rc < 0 && rc != -ENOTSUP)
        TFS_INFO("eager upload of '%s': cannot start: " TFS_CAUSE_FMT,
                 e->key, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    if (rc == -ENOTSUP)
        atomic_store(&wb->eager_off, true);     /* the store has none */
    if (rc == 0)
        atomic_fetch_add(&wb->n.eager_uploads, 1);
    pthread_mutex_lock(&e->lock);
    if (rc < 0 && e->state == EG_CREATING)
        eg_count(wb, rc == -ENOTSUP ? WB_EAGER_QUIET : WB_EAGER_ERROR);
    e->created = rc == 0;
    if (rc < 0)
        e->state = EG_ABORTED;
    else if (e->state == EG_CREATING)
        e->state = EG_RUNNING;
    eg_pump(e);
    eg_settle(e);                       /* cancelled meanwhile */
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

/* Send one part from the data file (read now: the writer is past it). */
static int eg_send(struct wb_eager *e, const struct eg_task *t, char *etag)
{
    struct tfs_wb *wb = e->wb;
    struct tfs_source src = {.fd = -1, .off = t->off, .len = t->len};
    char path[4200];
    int rc;

    wb_data_path(wb, e->id, path, sizeof(path));
    src.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src.fd < 0)
        return tfs_err(-errno, "staging: cannot open %s", path);
    tfs_ratelimit_take(&wb->bw, t->len);
    rc = tfs_store_mpu_part(wb->st, e->key, e->upload_id, t->idx + 1, &src,
                            etag);
    close(src.fd);
    return rc;
}

/* Part t went (rc 0, etag) or not: record it, queue more.  e->lock
   held. */
static void eg_part_done(struct wb_eager *e, const struct eg_task *t,
                         int rc, const char *etag)
{
    if (rc < 0 && rc != -ECANCELED)
        TFS_INFO("eager upload of '%s': part %u failed: " TFS_CAUSE_FMT,
                 e->key, t->idx + 1, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    e->inflight--;
    if (rc == 0) {
        memcpy(e->etags[t->idx], etag, TFS_VERSION_MAX);
        e->done++;
        atomic_fetch_add(&e->wb->n.eager_bytes, t->len);
    } else {
        eg_cancel_locked(e, WB_EAGER_ERROR);
    }
    eg_pump(e);
    eg_settle(e);
    pthread_cond_broadcast(&e->cond);
}

static void eg_do_part(struct wb_eager *e, const struct eg_task *t)
{
    char etag[TFS_VERSION_MAX] = "";
    int rc = 0;

    pthread_mutex_lock(&e->lock);
    if (e->state != EG_RUNNING)
        rc = -ECANCELED;                /* no use sending it */
    pthread_mutex_unlock(&e->lock);
    if (rc == 0)
        rc = eg_send(e, t, etag);
    pthread_mutex_lock(&e->lock);
    eg_part_done(e, t, rc, etag);
    pthread_mutex_unlock(&e->lock);
}

static void eg_do_abort(struct wb_eager *e)
{
    struct tfs_wb *wb = e->wb;
    uint64_t prev = tfs_deadline_set(tfs_now_ns() + EG_ABORT_NS);
    int rc = tfs_store_mpu_abort(wb->st, e->key, e->upload_id);

    tfs_deadline_set(prev);
    if (rc == 0)
        eg_unrecord(wb, e->id);
    else
        TFS_INFO("eager upload of '%s': abort failed (eager/%016" PRIx64
                 " kept for the next mount): " TFS_CAUSE_FMT, e->key, e->id,
                 TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    pthread_mutex_lock(&e->lock);
    e->state = EG_ABORTED;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

/*
 * Run this worker below the writer: a part's send (and, on a store on
 * the same machine, its receipt) competes with the writer for the CPU,
 * and the writer must not slow down for it; an idle CPU still sends at
 * full speed.  Once per thread; this thread only (Linux: a tid).
 */
static void eg_lower_priority(void)
{
    static _Thread_local bool done;

    if (done)
        return;
    done = true;
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
                    EG_NICE) < 0)
        TFS_DEBUG("eager: cannot lower the part workers' priority: %s",
                  tfs_strerror(-errno));
}

static void eg_run(struct tfs_pool_task *task)
{
    struct eg_task *t = tfs_container_of(task, struct eg_task, task);

    eg_lower_priority();
    if (t->kind == EG_T_CREATE)
        eg_do_create(t->e);
    else if (t->kind == EG_T_PART)
        eg_do_part(t->e, t);
    else
        eg_do_abort(t->e);
    eg_put(t->e);
    tfs_free(t);
}

static int eg_submit(struct wb_eager *e, int kind, unsigned idx,
                     uint64_t off, uint64_t len)
{
    struct eg_task *t;

    if (e->wb->epool == NULL)
        return -ESHUTDOWN;
    t = tfs_calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->task.fn = eg_run;
    t->e = eg_get(e);
    t->kind = kind;
    t->idx = idx;
    t->off = off;
    t->len = len;
    if (tfs_pool_submit(e->wb->epool, &t->task) < 0) {
        atomic_fetch_sub(&e->refs, 1);  /* the caller holds another */
        tfs_free(t);
        return -ESHUTDOWN;
    }
    return 0;
}

/* ---- what the rest of the write-back calls ---- */

/* The part size of this mount's eager uploads: the store's, at least
   8 MiB; 0 when they are off (eager_parts 0, or a store without). */
static uint64_t eg_part_size(struct tfs_wb *wb)
{
    uint64_t ps;

    if (wb->cfg.eager_parts == 0 || atomic_load(&wb->eager_off))
        return 0;
    ps = tfs_store_part_size(wb->st);
    return ps == 0 ? 0 : TFS_MAX(ps, EG_MIN_PART);
}

int wb_eager_open(struct tfs_wb *wb)
{
    wb->eager_part = eg_part_size(wb);
    if (wb->eager_part == 0)
        atomic_store(&wb->eager_off, true);
    if (mkdirat(wb->j.dir_fd, "eager", 0700) < 0 && errno != EEXIST)
        return tfs_err(-errno, "cannot create %s/eager",
                       wb->cfg.staging_dir);
    wb->eager_fd = openat(wb->j.dir_fd, "eager", O_RDONLY | O_DIRECTORY |
                          O_CLOEXEC);
    if (wb->eager_fd < 0)
        return tfs_err(-errno, "cannot open %s/eager", wb->cfg.staging_dir);
    if (wb_eager_recover(wb) < 0)
        TFS_WARN("staging: eager uploads of the last mount are kept for "
                 "the next one (the store does not answer)");
    return 0;
}

int wb_eager_start(struct tfs_wb *wb)
{
    if (atomic_load(&wb->eager_off))
        return 0;
    return tfs_pool_create(&wb->epool, wb->cfg.eager_parts);
}

void wb_eager_stop(struct tfs_wb *wb)
{
    tfs_pool_destroy(wb->epool);        /* what is queued runs first */
    wb->epool = NULL;
    if (wb->eager_fd >= 0 && !atomic_load(&wb->eager_off))
        wb_eager_recover(wb);           /* files still open: abort */
}

/*
 * A new eager upload of n's data file at its key, or NULL (out of the
 * view, out of memory).  n->rw held (n->id is stable), not n->lock.
 */
static struct wb_eager *eg_new(struct tfs_wb *wb, struct wb_node *n)
{
    struct wb_eager *e;
    char *key = NULL;

    pthread_mutex_lock(&wb->lock);
    if (n->ent != NULL)
        key = tfs_strdup(n->ent->h.key);
    pthread_mutex_unlock(&wb->lock);
    e = key ? tfs_calloc(1, sizeof(*e)) : NULL;
    if (e == NULL) {
        tfs_free(key);
        return NULL;
    }
    atomic_init(&e->refs, 1);
    e->wb = wb;
    e->key = key;
    e->id = n->id;
    e->psize = wb->eager_part;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    return e;
}

/*
 * n's eager upload for its data file, made at the file's first write
 * (one per data file, never twice): NULL when there is none.  Called
 * and returns with n->lock held, dropping it to make one.
 */
static struct wb_eager *eg_of(struct tfs_wb *wb, struct wb_node *n)
{
    struct wb_eager *e;

    if (n->eager != NULL || n->eager_tried == n->id)
        return n->eager;
    pthread_mutex_unlock(&n->lock);
    e = eg_new(wb, n);
    pthread_mutex_lock(&n->lock);
    if (e != NULL && n->eager == NULL && n->eager_tried != n->id) {
        n->eager = e;
        e = NULL;
    }
    n->eager_tried = n->id;
    eg_put(e);
    return n->eager;
}

/*
 * Note a write of [off, end): hi grows over what is written from 0 on,
 * ranges past it wait in gaps (requests of one write(2) may arrive out
 * of order) until hi reaches them.  With the gaps full, hi stops: the
 * rest goes at the finish.  e->lock held.
 */
static void eg_track(struct wb_eager *e, uint64_t off, uint64_t end)
{
    bool grew = true;

    if (off > e->hi) {
        if (e->n_gaps < EG_GAPS) {
            e->gaps[e->n_gaps][0] = off;
            e->gaps[e->n_gaps][1] = end;
            e->n_gaps++;
        }
        return;
    }
    e->hi = TFS_MAX(e->hi, end);
    while (grew) {
        grew = false;
        for (unsigned i = 0; i < e->n_gaps; i++) {
            if (e->gaps[i][0] > e->hi)
                continue;
            e->hi = TFS_MAX(e->hi, e->gaps[i][1]);
            e->gaps[i][0] = e->gaps[--e->n_gaps][0];
            e->gaps[i][1] = e->gaps[e->n_gaps][1];
            grew = true;
            break;
        }
    }
}

void wb_eager_wrote(struct tfs_wb *wb, struct wb_node *n, uint64_t off,
                    uint64_t end)
{
    struct wb_eager *e;

    if (wb->eager_part == 0 || atomic_load(&wb->eager_off))
        return;
    pthread_mutex_lock(&n->lock);
    e = eg_of(wb, n);
    if (e != NULL) {
        pthread_mutex_lock(&e->lock);
        if (off < (uint64_t)e->next * e->psize)
            eg_cancel_locked(e, WB_EAGER_REWRITE);
        eg_track(e, off, end);
        if (e->state == EG_IDLE && e->hi >= e->psize) {
            e->state = EG_CREATING;     /* the writer passed a part */
            if (eg_submit(e, EG_T_CREATE, 0, 0, 0) < 0)
                e->state = EG_ABORTED;
        }
        eg_pump(e);
        pthread_mutex_unlock(&e->lock);
    }
    pthread_mutex_unlock(&n->lock);
}

void wb_eager_sealed(struct wb_node *n)
{
    struct wb_eager *e;
    bool live = true;

    pthread_mutex_lock(&n->lock);
    e = n->eager;
    if (e != NULL) {
        pthread_mutex_lock(&e->lock);
        live = e->state == EG_CREATING || e->state == EG_RUNNING;
        if (!live)
            eg_cancel_locked(e, WB_EAGER_QUIET);
        pthread_mutex_unlock(&e->lock);
    }
    if (!live)
        n->eager = NULL;
    pthread_mutex_unlock(&n->lock);
    if (!live)
        eg_put(e);
}

void wb_eager_cancel(struct wb_node *n, int why, bool drop)
{
    struct wb_eager *e;

    pthread_mutex_lock(&n->lock);
    e = n->eager;
    if (drop)
        n->eager = NULL;
    if (e != NULL) {
        pthread_mutex_lock(&e->lock);
        eg_cancel_locked(e, why);
        pthread_mutex_unlock(&e->lock);
    }
    pthread_mutex_unlock(&n->lock);
    if (drop)
        eg_put(e);
}

/* The number of parts of an object of size bytes. */
static unsigned eg_parts(const struct wb_eager *e, uint64_t size)
{
    return (unsigned)((size + e->psize - 1) / e->psize);
}

/*
 * Send the next part of e (of an object of size bytes) from this thread,
 * the uploader's: the part workers run below the writer's priority
 * (eg_lower_priority), and once the file is sealed its tail must not
 * wait behind other work.  e->lock held, dropped while sending.
 */
static void eg_send_here(struct wb_eager *e, uint64_t size)
{
    struct eg_task t = {.e = e, .kind = EG_T_PART, .idx = e->next};
    char etag[TFS_VERSION_MAX] = "";
    int rc = eg_grow(e);

    t.off = (uint64_t)t.idx * e->psize;
    t.len = TFS_MIN(e->psize, size - t.off);
    if (rc < 0) {
        eg_cancel_locked(e, WB_EAGER_ERROR);
        return;
    }
    e->next++;
    e->inflight++;
    pthread_mutex_unlock(&e->lock);
    rc = eg_send(e, &t, etag);
    pthread_mutex_lock(&e->lock);
    eg_part_done(e, &t, rc, etag);
}

/* Send parts of the tail until none is left.  e->lock held. */
static void eg_tail_loop(struct wb_eager *e)
{
    while (e->state == EG_RUNNING && e->next < eg_parts(e, e->final))
        eg_send_here(e, e->final);
}

static void *eg_tail_main(void *arg)
{
    struct wb_eager *e = arg;

    pthread_mutex_lock(&e->lock);
    eg_tail_loop(e);
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/*
 * The tail: what the part workers have not queued, sent by this thread
 * and up to EG_TAIL_THREADS - 1 threads it starts, at its priority, as
 * a put's part threads are (4 by default, upload_concurrency): the file
 * is sealed, the writer is done, so this goes at full speed.  e->lock
 * held, dropped inside.
 */
static void eg_tail(struct wb_eager *e)
{
    unsigned left = eg_parts(e, e->final) - e->next;
    unsigned n = TFS_MIN(EG_TAIL_THREADS, left);
    pthread_t tid[EG_TAIL_THREADS];
    unsigned started = 0;

    pthread_mutex_unlock(&e->lock);
    for (unsigned i = 1; i < n; i++) {
        if (pthread_create(&tid[started], NULL, eg_tail_main, e) != 0)
            break;                      /* go on with fewer */
        started++;
    }
    pthread_mutex_lock(&e->lock);
    eg_tail_loop(e);
    pthread_mutex_unlock(&e->lock);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_lock(&e->lock);
}

/*
 * Send what remains of e for an object of size bytes (the tail from
 * the uploader's thread and threads it starts) and wait for every part: 0 when all went,
 * else the upload is cancelled.  e->lock held.
 */
static int eg_drain(struct wb_eager *e, const char *key, uint64_t size)
{
    if (strcmp(e->key, key) != 0)
        eg_cancel_locked(e, WB_EAGER_RENAME);
    while (e->state == EG_CREATING)
        pthread_cond_wait(&e->cond, &e->lock);
    if (e->state == EG_RUNNING && size < (uint64_t)e->next * e->psize)
        eg_cancel_locked(e, WB_EAGER_ERROR);    /* cannot be: truncated */
    if (e->state != EG_RUNNING)
        return -ECANCELED;
    e->finishing = true;
    e->final = size;
    eg_tail(e);
    while (e->state == EG_RUNNING &&
           (e->done < eg_parts(e, size) || e->inflight > 0))
        pthread_cond_wait(&e->cond, &e->lock);
    if (e->state != EG_RUNNING)
        return -ECANCELED;
    e->state = EG_COMPLETING;
    return 0;
}

/* Complete e (COMPLETING, so nothing changes under us). */
static int eg_complete(struct wb_eager *e, uint64_t size,
                       struct tfs_stat *out)
{
    struct tfs_wb *wb = e->wb;
    int rc = tfs_store_mpu_complete(wb->st, e->key, e->upload_id,
                                    (const char (*)[TFS_VERSION_MAX])e->etags,
                                    eg_parts(e, size), out);

    if (rc == 0 && out->size != size)
        rc = tfs_err(-EIO, "eager upload of '%s': the store holds %" PRIu64
                     " bytes, not %" PRIu64, e->key, out->size, size);
    if (rc < 0)
        TFS_INFO("eager upload of '%s': complete failed: " TFS_CAUSE_FMT,
                 e->key, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    pthread_mutex_lock(&e->lock);
    if (rc == 0) {
        e->state = EG_DONE;
    } else {
        e->state = EG_RUNNING;          /* so that the cancel counts */
        eg_cancel_locked(e, WB_EAGER_ERROR);
    }
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (rc == 0) {
        eg_unrecord(wb, e->id);
        atomic_fetch_add(&wb->n.eager_completed, 1);
    }
    return rc;
}

int wb_eager_finish(struct tfs_wb *wb, struct wb_node *n, uint64_t id,
                    const char *key, uint64_t size, struct tfs_stat *out)
{
    struct wb_eager *e = NULL;
    int rc;

    pthread_mutex_lock(&n->lock);
    if (n->eager != NULL && n->eager->id == id)
        e = eg_get(n->eager);
    pthread_mutex_unlock(&n->lock);
    if (e == NULL)
        return 1;
    pthread_mutex_lock(&e->lock);
    rc = eg_drain(e, key, size);
    pthread_mutex_unlock(&e->lock);
    if (rc == 0)
        rc = eg_complete(e, size, out);
    eg_put(e);
    (void)wb;
    return rc == 0 ? 0 : 1;
}
