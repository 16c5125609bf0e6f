/* SPDX-License-Identifier: MIT */
/*
 * The write-back object: open (staging dir, lock, replay, sweep,
 * compaction, uploader), close, and the statistics.  In order:
 *
 *   staging dir  STAGING/{lock,journal,data/}; one mount at a time
 *   recovery     the journal's last op per key rebuilds the overlay;
 *                staged files are checked against their records; data
 *                files nobody references go to lost+found (lost.c); an
 *                empty
 *                journal beside data files refuses the mount
 *   life cycle   wb_open, wb_stop, wb_close
 *   statistics   the "writeback" member of the control file, Prometheus
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tierfs/log.h"
#include "wb/wb_int.h"

static void wb_cond_init(pthread_cond_t *c)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

/* ---- staging dir ---- */

/*
 * Open the staging dir (mkdir -p, 0700), through tfs_dir_open_path: no
 * component below the deepest existing ancestor may be a symlink, another
 * user's, or writable by others, and the dir itself is private
 * (docs/security.md).
 */
static int wb_mkdirs(const char *path, int *out_fd)
{
    return tfs_dir_open_path(path, 0700, 0, out_fd);
}

static int wb_staging_open(struct tfs_wb *wb)
{
    const char *dir = wb->cfg.staging_dir;
    int rc = wb_mkdirs(dir, &wb->j.dir_fd);

    if (rc < 0)
        return rc;
    wb->lock_fd = openat(wb->j.dir_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC,
                         0600);
    if (wb->lock_fd < 0)
        return tfs_err(-errno, "cannot open %s/lock", dir);
    if (flock(wb->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return tfs_err(errno == EWOULDBLOCK ? -EBUSY : -errno, "the staging "
                       "dir %s is in use by another tierfs mount (give each "
                       "mount its own --staging-dir)", dir);
    if (mkdirat(wb->j.dir_fd, "data", 0700) < 0 && errno != EEXIST)
        return tfs_err(-errno, "cannot create %s/data", dir);
    wb->data_fd = openat(wb->j.dir_fd, "data", O_RDONLY | O_DIRECTORY |
                         O_CLOEXEC);
    if (wb->data_fd < 0)
        return tfs_err(-errno, "cannot open %s/data", dir);
    unlinkat(wb->j.dir_fd, "journal.tmp", 0);
    return 0;
}

/* ---- recovery ---- */

/* The last journal op of one key, gathered during replay. */
struct rp_ent {
    struct tfs_hstr h;                  /* in the map; h.key owned */
    struct wb_jent  j;                  /* key and src point below */
    char           *src;                /* owned */
};

struct rp_state {
    struct tfs_hmap map;                /* struct rp_ent by key */
    char         *identity;             /* of the HEAD op, owned */
};

static struct rp_state *rp_of(struct tfs_wb *wb)
{
    return (struct rp_state *)wb->replay;
}

static struct rp_ent *rp_ent_of(struct tfs_hstr *h)
{
    return h ? tfs_container_of(h, struct rp_ent, h) : NULL;
}

static int rp_apply(struct tfs_wb *wb, const struct wb_jent *j)
{
    struct rp_state *rs = rp_of(wb);
    struct rp_ent *r;

    if (j->op == WB_J_HEAD) {
        tfs_free(rs->identity);
        rs->identity = tfs_strdup(j->key);
        return rs->identity ? 0 : -ENOMEM;
    }
    r = rp_ent_of(tfs_hmap_find_str(&rs->map, j->key));
    if (r == NULL) {
        r = tfs_calloc(1, sizeof(*r));
        r->h.key = r ? tfs_strdup(j->key) : NULL;
        if (r == NULL || r->h.key == NULL ||
            tfs_hmap_insert_str(&rs->map, &r->h) < 0) {
            if (r != NULL)
                tfs_free(r->h.key);
            tfs_free(r);
            return -ENOMEM;
        }
    }
    tfs_free(r->src);
    r->src = j->src[0] ? tfs_strdup(j->src) : NULL;
    r->j = *j;
    r->j.key = r->h.key;
    r->j.src = r->src;
    return 0;
}

/*
 * Whether the data file of a FILE op is there, whole: 0 (yes), 1 (no:
 * the entry is dropped, logged; a file of another size stays for the
 * sweep to set aside), or a fatal -errno (EMFILE, EIO, ...: never a
 * reason to drop an entry).
 */
static int rp_check_data(struct tfs_wb *wb, const struct wb_jent *j)
{
    char name[32];
    struct stat sb;

    snprintf(name, sizeof(name), "%016" PRIx64, j->id);
    if (fstatat(wb->data_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
            return tfs_err(-errno, "staging: cannot stat data/%s of '%s'",
                           name, j->key);
        TFS_ERROR("staging: the data file data/%s of '%s' is missing: "
                  "dropping its entry", name, j->key);
        return 1;
    }
    if ((uint64_t)sb.st_size != j->size) {
        TFS_ERROR("staging: data/%s of '%s' is %lld bytes, not %" PRIu64
                  ": dropping its entry (the file goes to lost+found)",
                  name, j->key, (long long)sb.st_size, j->size);
        return 1;
    }
    return 0;
}

/* A staged file from its FILE op: its data must be there, whole. */
static int rp_file(struct tfs_wb *wb, const struct wb_jent *j)
{
    struct wb_node *n = NULL;
    struct wb_ent *e;
    int rc = rp_check_data(wb, j);

    if (rc != 0)
        return rc < 0 ? rc : 0;         /* the others go on */
    rc = wb_node_new(wb, j->id, j->size, j->mtime_ns, &n);
    if (rc < 0)
        return rc;
    e = wb_ent_get(wb, j->key);
    if (e == NULL) {
        n->id = 0;                      /* the data file stays */
        wb_node_put(n);
        return -ENOMEM;
    }
    n->has_sealed = true;
    n->sealed_id = j->id;
    n->sealed_size = j->size;
    n->sealed_mtime_ns = j->mtime_ns;
    n->sealed_gen = 1;
    n->gen = 1;
    n->maybe_in_store = (j->flags & WB_JF_IN_STORE) != 0;
    wb_ent_set(wb, e, WB_NODE, n, NULL, NULL, 0);
    e->ready_ns = 0;                    /* resume at once */
    atomic_fetch_add(&wb->used, (int64_t)j->size);
    return 0;
}

/* Rebuild the overlay from the gathered ops. */
static int rp_build(struct tfs_wb *wb)
{
    struct rp_state *rs = rp_of(wb);
    struct tfs_hmap_iter it;
    struct rp_ent *r;
    int rc = 0;

    tfs_hmap_iter_init(&it, &rs->map);
    while (rc == 0 &&
           (r = rp_ent_of(tfs_hstr_of(tfs_hmap_iter_next(&it)))) != NULL) {
        const struct wb_jent *j = &r->j;
        struct wb_ent *e = NULL;

        if (j->op == WB_J_FILE) {
            rc = rp_file(wb, j);
            continue;
        }
        if (j->op == WB_J_CLEAR)
            continue;
        if (j->op == WB_J_MOVED && wb_ent_get(wb, j->src) == NULL)
            return -ENOMEM;
        e = wb_ent_get(wb, j->key);
        if (e == NULL)
            return -ENOMEM;
        wb_ent_set(wb, e, j->op == WB_J_MOVED ? WB_MOVED
                   : j->op == WB_J_DIR ? WB_DIRENT : WB_WHITEOUT,
                   NULL, j->src, &j->st, j->flags);
        e->ready_ns = 0;                /* resume at once */
        wb_ent_release(wb, e);
    }
    return rc;
}

static void rp_cleanup(struct tfs_wb *wb)
{
    struct rp_state *rs = rp_of(wb);
    struct tfs_hmap_iter it;
    struct rp_ent *r;

    if (rs == NULL)
        return;
    tfs_hmap_iter_init(&it, &rs->map);
    while ((r = rp_ent_of(tfs_hstr_of(tfs_hmap_iter_next(&it)))) != NULL) {
        tfs_free(r->h.key);
        tfs_free(r->src);
        tfs_free(r);
    }
    tfs_hmap_cleanup(&rs->map);
    tfs_free(rs->identity);
    tfs_free(rs);
    wb->replay = NULL;
}

static int id_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The data ids the overlay references, sorted (tfs_free the array). */
static uint64_t *wb_live_ids(struct tfs_wb *wb, size_t *n)
{
    uint64_t *ids = tfs_calloc(tfs_hmap_count(&wb->ents) + 1, sizeof(*ids));
    struct tfs_hmap_iter it;
    const struct wb_ent *e;

    *n = 0;
    if (ids == NULL)
        return NULL;
    tfs_hmap_iter_init(&it, &wb->ents);
    while ((e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (e->kind == WB_NODE)
            ids[(*n)++] = e->node->sealed_id;
    }
    qsort(ids, *n, sizeof(*ids), id_cmp);
    return ids;
}

/* The data ids the overlay references, sorted; -ENOMEM. */
static int wb_sweep_ids(struct tfs_wb *wb, uint64_t **ids, size_t *n)
{
    *ids = wb_live_ids(wb, n);
    return *ids != NULL ? 0 : -ENOMEM;
}

/* A data file's id from its name; false for a name that is none. */
static bool wb_data_id(const char *name, uint64_t *id)
{
    char *end;

    if (name[0] == '.' || name[0] == '\0')
        return false;
    *id = strtoull(name, &end, 16);
    return *end == '\0';
}

static void wb_log_lost(struct tfs_wb *wb, size_t moved, uint64_t bytes)
{
    char b[32];

    TFS_ERROR("staging: set aside %zu data files (%s) that no intact "
              "journal record names, in %s/lost+found/ as data-<id>: %s; "
              "inspect and remove them (docs/writeback.md, Recovery)",
              moved, tfs_fmt_bytes(b, sizeof(b), (double)bytes),
              wb->cfg.staging_dir, wb->j.rp_bad > 0 ?
              "closed files whose record was damaged (see above), files "
              "open at the crash or older contents" :
              "files open at the crash (never closed) or older contents");
}

/* The number of data files in data/. */
static int wb_count_data(struct tfs_wb *wb, size_t *n)
{
    int fd = fcntl(wb->data_fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    uint64_t id;

    *n = 0;
    if (d == NULL) {
        int rc = tfs_err(-errno, "staging: cannot list data/");
        if (fd >= 0)
            close(fd);
        return rc;
    }
    while ((de = readdir(d)) != NULL)
        *n += wb_data_id(de->d_name, &id);
    closedir(d);
    return 0;
}

/*
 * An empty (or missing) journal beside data files: nothing says which
 * file each one is, and a recovery would set every one aside.  Refuse,
 * changing nothing, and say what to do.
 */
static int wb_check_orphans(struct tfs_wb *wb)
{
    const char *dir = wb->cfg.staging_dir;
    size_t n;
    int rc = wb_count_data(wb, &n);

    if (rc < 0 || n == 0)
        return rc;
    return tfs_err(-EUCLEAN, "the staging dir %s holds %zu data files but "
                   "its journal is empty or missing, so nothing says which "
                   "file each one is; nothing was changed: put the journal "
                   "back, or set the files aside with 'mkdir -p "
                   "%s/lost+found && mv %s/data/* %s/lost+found/' and "
                   "mount again", dir, n, dir, dir, dir);
}

/*
 * Move the data files nobody references to lost+found (never delete
 * them: the journal may have lost the record that named one); next ids
 * start above them all.
 */
static int wb_sweep(struct tfs_wb *wb)
{
    int fd = fcntl(wb->data_fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    uint64_t max = 0;
    uint64_t bytes = 0;
    size_t moved = 0;
    size_t n = 0;
    uint64_t *ids = NULL;
    struct dirent *de;
    int rc = d != NULL ? wb_sweep_ids(wb, &ids, &n)
                       : tfs_err(-errno, "staging: cannot list data/");

    while (rc == 0 && (de = readdir(d)) != NULL) {
        uint64_t id;
        if (!wb_data_id(de->d_name, &id))
            continue;
        max = TFS_MAX(max, id);
        if (bsearch(&id, ids, n, sizeof(*ids), id_cmp) != NULL)
            continue;
        rc = wb_lost_move(wb, de->d_name, &bytes);
        moved += rc == 0;
    }
    if (d != NULL)
        closedir(d);
    else if (fd >= 0)
        close(fd);
    tfs_free(ids);
    atomic_store(&wb->next_id, max + 1);
    if (moved > 0 && (fsync(wb->data_fd) < 0 || fsync(wb->lost_fd) < 0) &&
        rc == 0)
        rc = tfs_err(-errno, "staging: cannot fsync after moving files");
    if (moved > 0)
        wb_log_lost(wb, moved, bytes);
    return rc;
}

/* Replay the journal into the overlay; check it is for this store. */
static int wb_recover(struct tfs_wb *wb)
{
    struct rp_state *rs = tfs_calloc(1, sizeof(*rs));
    const char *ident = tfs_store_identity(wb->st);
    int rc;

    if (rs == NULL || tfs_hmap_init(&rs->map, WB_MAP_MIN, tfs_hstr_eq) < 0) {
        tfs_free(rs);
        return -ENOMEM;
    }
    wb->replay = rs;
    rc = wb_journal_open(wb, rp_apply);
    if (rc == 0 && wb->j.rp_empty)
        rc = wb_check_orphans(wb);
    if (rc == 0 && rs->identity != NULL && strcmp(rs->identity, ident) &&
        tfs_hmap_count(&rs->map) > 0)
        rc = tfs_err(TFS_EOPTION, "the staging dir %s holds changes for "
                     "%s, not %s: mount that store over it, or give this "
                     "mount another --staging-dir", wb->cfg.staging_dir,
                     rs->identity, ident);
    if (rc == 0) {
        pthread_mutex_lock(&wb->lock);
        rc = rp_build(wb);
        pthread_mutex_unlock(&wb->lock);
    }
    rp_cleanup(wb);
    if (rc == 0)
        rc = wb_sweep(wb);
    if (rc == 0) {
        pthread_mutex_lock(&wb->lock);
        rc = wb_journal_compact(wb);
        if (tfs_hmap_count(&wb->ents) > 0)
            TFS_LOGL(TFS_LOG_NOTICE, "staging: %zu pending changes from "
                     "the last mount resume now (%s)",
                     tfs_hmap_count(&wb->ents),
                     wb->cfg.staging_dir);
        pthread_mutex_unlock(&wb->lock);
    }
    return rc;
}

/* ---- life cycle ---- */

int wb_open(struct tfs_wb **out, const struct wb_cfg *cfg,
            struct tfs_store *st, struct tfs_cache *c)
{
    struct tfs_wb *wb = tfs_calloc(1, sizeof(*wb));
    int rc;

    if (wb == NULL)
        return -ENOMEM;
    wb->cfg = *cfg;
    wb->cfg.staging_dir = tfs_strdup(cfg->staging_dir);
    wb->cfg.upload_jobs = TFS_MAX(cfg->upload_jobs, 1u);
    wb->st = st;
    wb->cache = c;
    wb->store_dirs = (tfs_store_caps(st) & TFS_SCAP_DIRS) != 0;
    wb->lock_fd = wb->data_fd = wb->j.dir_fd = wb->j.fd = -1;
    wb->lost_fd = -1;
    wb->eager_fd = -1;
    atomic_init(&wb->next_nid, 1);
    atomic_init(&wb->next_id, 1);
    pthread_rwlock_init(&wb->ns_lock, NULL);
    pthread_mutex_init(&wb->lock, NULL);
    wb_cond_init(&wb->changed);
    wb_cond_init(&wb->space);
    wb_cond_init(&wb->kick);
    rc = wb->cfg.staging_dir ? 0 : -ENOMEM;
    if (rc == 0 && (tfs_hmap_init(&wb->ents, WB_MAP_MIN, tfs_hstr_eq) < 0 ||
                    tfs_hmap_init(&wb->pfx, WB_MAP_MIN, tfs_hstr_eq) < 0))
        rc = -ENOMEM;
    if (rc == 0)
        rc = wb_staging_open(wb);
    if (rc == 0)
        rc = wb_recover(wb);
    if (rc == 0)
        rc = wb_eager_open(wb);
    if (rc == 0)
        rc = wb_upload_start(wb);
    wb->opened = rc == 0;
    if (rc < 0) {
        wb_close(wb);
        return rc;
    }
    *out = wb;
    return 0;
}

void wb_stop(struct tfs_wb *wb)
{
    if (wb == NULL)
        return;
    atomic_store(&wb->closing, true);
    wb_upload_stop(wb);
}

/*
 * Nothing pending, nothing staged: remove the staging dir, so that a
 * clean unmount leaves nothing behind.  A directory with anything else
 * in it (data of files still open at the unmount) stays for the next
 * mount's sweep.
 */
static void wb_remove_staging(struct tfs_wb *wb)
{
    if (tfs_hmap_count(&wb->ents) > 0 || wb->j.dir_fd < 0 || wb->data_fd < 0)
        return;
    if (unlinkat(wb->j.dir_fd, "data", AT_REMOVEDIR) < 0)
        return;
    unlinkat(wb->j.dir_fd, "eager", AT_REMOVEDIR);  /* kept when not empty */
    unlinkat(wb->j.dir_fd, "journal", 0);
    unlinkat(wb->j.dir_fd, "lock", 0);
    rmdir(wb->cfg.staging_dir);
}

/* Free every entry and counter, and the two maps. */
static void wb_free_maps(struct tfs_wb *wb)
{
    struct tfs_hmap_iter it;
    struct tfs_hnode *n;
    struct wb_ent *e;

    tfs_hmap_iter_init(&it, &wb->ents);
    while ((e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (e->kind == WB_NODE) {
            e->node->ent = NULL;
            wb_node_put(e->node);
        }
        tfs_free(e->src);
        tfs_free(e->h.key);
        tfs_free(e->last_detail);
        tfs_free(e);
    }
    tfs_hmap_iter_init(&it, &wb->pfx);
    while ((n = tfs_hmap_iter_next(&it)) != NULL) {
        struct wb_pfx *p = tfs_container_of(n, struct wb_pfx, h.node);
        tfs_free(p->h.key);
        tfs_free(p);
    }
    tfs_hmap_cleanup(&wb->ents);
    tfs_hmap_cleanup(&wb->pfx);
}

void wb_close(struct tfs_wb *wb)
{
    if (wb == NULL)
        return;
    wb_stop(wb);
    if (wb->opened)
        wb_remove_staging(wb);
    wb_free_maps(wb);
    wb_journal_close(wb);
    if (wb->data_fd >= 0)
        close(wb->data_fd);
    if (wb->lost_fd >= 0)
        close(wb->lost_fd);
    if (wb->eager_fd >= 0)
        close(wb->eager_fd);
    if (wb->j.dir_fd >= 0)
        close(wb->j.dir_fd);
    if (wb->lock_fd >= 0)
        close(wb->lock_fd);             /* releases the flock */
    tfs_ratelimit_cleanup(&wb->bw);
    pthread_cond_destroy(&wb->changed);
    pthread_cond_destroy(&wb->space);
    pthread_cond_destroy(&wb->kick);
    pthread_mutex_destroy(&wb->lock);
    pthread_rwlock_destroy(&wb->ns_lock);
    tfs_free((char *)wb->cfg.staging_dir);
    tfs_free(wb);
}

/* ---- statistics ---- */

void wb_usage(struct tfs_wb *wb, uint64_t *used, uint64_t *max)
{
    int64_t u = atomic_load(&wb->used);

    *used = u > 0 ? (uint64_t)u : 0;
    *max = wb->cfg.staging_max;
}

static const struct tfs_metric wb_metric_table[] = {
#define X(...) TFS_METRIC_DESC(struct wb_metrics, __VA_ARGS__)
    WB_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_wb = {
    .name = "writeback",
    .prom_prefix = "wb_",
    .when = "writable mounts",
    .m = wb_metric_table,
    .n = TFS_ARRAY_LEN(wb_metric_table),
    .size = sizeof(struct wb_metrics),
};

/* The figures that walk the queue and the entries.  wb->lock held. */
static void wb_metrics_walk(struct tfs_wb *wb, struct wb_metrics *s)
{
    struct tfs_hmap_iter it;
    struct wb_ent *e;

    for (e = wb->qhead; e != NULL; e = e->qnext) {
        if (e->kind == WB_NODE) {
            s->pending_files++;
            s->pending_bytes += e->node->sealed_size;
        } else if (e->kind != WB_DIRENT) {
            s->pending_ops++;
        }
        s->parked += wb_ent_parked(e);
    }
    tfs_hmap_iter_init(&it, &wb->ents);
    while ((e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (e->kind != WB_NODE)
            continue;
        s->staged_files++;
        pthread_mutex_lock(&e->node->lock);
        s->dirty_files += e->node->dirty;
        pthread_mutex_unlock(&e->node->lock);
    }
}

#define WB_N(f) ((uint64_t)atomic_load(&wb->n.f))

void wb_metrics_get(struct tfs_wb *wb, struct wb_metrics *s)
{
    uint64_t now = tfs_now_ns();
    uint64_t seals = WB_N(seals);

    memset(s, 0, sizeof(*s));
    pthread_mutex_lock(&wb->lock);
    wb_metrics_walk(wb, s);
    s->inflight = wb->inflight;
    s->upload_rate_bytes = wb->rate;
    if (wb->rate_t_ns != 0 && now - wb->rate_t_ns > 3000000000ull)
        s->upload_rate_bytes = (double)wb->rate_bytes * 1e9 /
                               (double)(now - wb->rate_t_ns);
    s->journal_bytes = (uint64_t)wb->j.size;
    pthread_mutex_unlock(&wb->lock);
    wb_usage(wb, &s->staging_bytes, &s->staging_max_bytes);
    s->uploaded_files = WB_N(uploaded_files);
    s->uploaded_bytes = WB_N(uploaded_bytes);
    s->moves = WB_N(moves);
    s->removes = WB_N(removes);
    s->upload_errors = WB_N(errors);
    s->upload_retries = WB_N(retries);
    s->writes = WB_N(writes);
    s->write_bytes = WB_N(write_bytes);
    s->early_writeback_bytes = WB_N(kick_bytes);
    s->seals = seals;
    s->seal_us_avg = seals ? (double)WB_N(seal_ns) / 1e3 / (double)seals
                           : 0.0;
    s->copies = WB_N(copies);
    s->backpressure_waits = WB_N(waits);
    s->backpressure_seconds = (double)WB_N(wait_ns) / 1e9;
    s->compactions = WB_N(compactions);
    s->eager_uploads = WB_N(eager_uploads);
    s->eager_completed = WB_N(eager_completed);
    s->eager_bytes = WB_N(eager_bytes);
    s->eager_aborted_rewrite = WB_N(eager_rewrite);
    s->eager_aborted_rename = WB_N(eager_rename);
    s->eager_aborted_error = WB_N(eager_error);
    s->eager_recovered = WB_N(eager_recovered);
}

int wb_metrics_json_more(void *arg, struct tfs_buf *b)
{
    return wb_parked_json(arg, b);
}
