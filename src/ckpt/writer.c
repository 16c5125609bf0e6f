/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint writer: one rank's part of one checkpoint.
 *
 * add() records tensors (borrowing their memory); save() lays them out in
 * size-capped shard files and copies them into local staging files, the
 * only work the caller waits for.  Small tensors are gathered in one
 * buffer and written in large sequential writes; large ones are written
 * straight from the caller's memory.  Every header's length is known
 * before any checksum (the checksums have a fixed width), so data goes
 * first, at its final offset.
 *
 * The rest runs on the writer's own threads: a commit thread and a pool
 * of upload threads (one class of work, so uploads never queue behind
 * other tierfs work).  Each shard is finished in staging (its header,
 * with the checksums taken while staging, written; fsync, rename,
 * directory fsync, as Redis's rdbSave and SQLite's dirSync do), then
 * uploaded; then this rank's marker is put and the commit protocol of
 * commit.c runs.  The caller polls (is_done) or blocks (wait); nothing
 * calls back into it.
 *
 * Staging lives in STAGING/<hash of the store identity>/step-N/, where a
 * reader on the same node finds it; after a commit each rank keeps its
 * newest staging_keep copies.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "ckpt/ckpt_int.h"
#include "common/pool.h"
#include "tierfs/log.h"

#define WR_DEFAULT_SHARD (512ull << 20)
#define WR_DEFAULT_TIMEOUT_MS 300000ull /* commit_timeout_ms: 5 min */
#define WR_ABANDON_NS (1000000000ull)   /* an upload past the deadline */
#define WR_NONCE_WAIT_NS (2000000000ull) /* for rank 0's nonce, to abort */

/* ---- creation and settings ---- */

int tfs_ckpt_writer_create(struct tfs_ckpt_writer **out)
{
    struct tfs_ckpt_writer *w = tfs_calloc(1, sizeof(*w));
    const char *env = getenv("TIERFS_CKPT_STAGING");

    if (w == NULL)
        return -ENOMEM;
    w->world_size = 1;
    w->shard_size = WR_DEFAULT_SHARD;
    w->staging_keep = 1;
    w->upload_threads = 4;
    w->timeout_ms = WR_DEFAULT_TIMEOUT_MS;
    w->stage_fd = -1;
    w->staging_dir = env != NULL && env[0] ? tfs_strdup(env)
                                           : tfs_ckpt_staging_default();
    w->run_id = tfs_strdup("");
    if (w->staging_dir == NULL || w->run_id == NULL) {
        tfs_free(w->staging_dir);
        tfs_free(w->run_id);
        tfs_free(w);
        return -ENOMEM;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    tfs_ratelimit_init(&w->rl, 0);
    *out = w;
    return 0;
}

static int wr_settable(const struct tfs_ckpt_writer *w)
{
    return w->opened ? tfs_err(-EBUSY, "writer already open") : 0;
}

/* extra: a JSON document, kept as parsed and written back compact. */
static int wr_set_extra(const struct tfs_opt_spec *o, void *base,
                        const char *value)
{
    struct tfs_ckpt_writer *w = base;
    struct tfs_buf b;
    int rc;

    (void)o;
    tfs_buf_init(&b, TFS_CKPT_JSON_MAX / 2);
    rc = tfs_json_copy(&b, value, strlen(value));
    if (rc == TFS_ETOOBIG || rc == TFS_EFORMAT)
        rc = tfs_ckpt_err_in(TFS_EFORMAT, "extra document", NULL);
    if (rc == 0) {
        tfs_free(w->extra);
        w->extra = tfs_buf_steal(&b);
        rc = w->extra != NULL ? 0 : -ENOMEM;
    }
    tfs_buf_cleanup(&b);
    return rc;
}

#define WR_OPT(name, kind, field, min, max)                                \
    {name, kind, offsetof(struct tfs_ckpt_writer, field), min, max, NULL,  \
     NULL}

/* The options of tfs_ckpt_writer_set (ckpt.h). */
static const struct tfs_opt_spec wr_opts[] = {
    WR_OPT("rank", TFS_OPT_UINT, rank, 0, 99999),
    WR_OPT("world_size", TFS_OPT_UINT, world_size, 1, 100000),
    WR_OPT("shard_size", TFS_OPT_SIZE, shard_size, 1u << 20, TFS_OPT_NOMAX),
    WR_OPT("staging_dir", TFS_OPT_STR, staging_dir, 1, TFS_OPT_NOMAX),
    WR_OPT("staging_keep", TFS_OPT_UINT, staging_keep, 0, TFS_OPT_NOMAX),
    WR_OPT("keep_last", TFS_OPT_UINT, keep_last, 0, TFS_OPT_NOMAX),
    WR_OPT("upload_threads", TFS_OPT_UINT, upload_threads, 1, 64),
    WR_OPT("upload_bw", TFS_OPT_SIZE, upload_bw, 0, TFS_OPT_NOMAX),
    WR_OPT("commit_timeout_ms", TFS_OPT_MS, timeout_ms, 0, TFS_OPT_NOMAX),
    WR_OPT("timeout_ms", TFS_OPT_MS, timeout_ms, 0, TFS_OPT_NOMAX),
    WR_OPT("options", TFS_OPT_STR, options, 0, TFS_OPT_NOMAX),
    WR_OPT("sync", TFS_OPT_BOOL, sync, 0, 1),
    WR_OPT("run_id", TFS_OPT_STR, run_id, 0, TFS_OPT_NOMAX),
    WR_OPT("overwrite", TFS_OPT_BOOL, overwrite, 0, 1),
    {"extra", TFS_OPT_CUSTOM, offsetof(struct tfs_ckpt_writer, extra), 0, 0,
     wr_set_extra, "a JSON document"},
    WR_OPT("group", TFS_OPT_STR, group, 0, TFS_OPT_NOMAX),
    WR_OPT("group_secret_file", TFS_OPT_STR, group_secret, 0, TFS_OPT_NOMAX),
    WR_OPT("group_self", TFS_OPT_STR, group_self, 0, TFS_OPT_NOMAX),
    WR_OPT("group_tls_ca", TFS_OPT_STR, group_tls_ca, 0, TFS_OPT_NOMAX),
    WR_OPT("group_timeout_ms", TFS_OPT_MS, group_timeout_ms, 0,
           TFS_OPT_NOMAX),
};

int tfs_ckpt_writer_set(struct tfs_ckpt_writer *w, const char *name,
                        const char *value)
{
    int rc = wr_settable(w);

    if (rc < 0)
        return rc;
    return tfs_opt_apply("checkpoint writer", wr_opts,
                         TFS_ARRAY_LEN(wr_opts), w, name, value);
}

/* ---- open ---- */

int tfs_ckpt_wr_staging_paths(struct tfs_ckpt_writer *w)
{
    const char *id = tfs_store_identity(w->st);
    struct tfs_buf b;
    char step[32];
    int rc;

    tfs_ckpt_step_name(step, sizeof(step), w->step);
    tfs_buf_init(&b, 0);
    rc = tfs_buf_printf(&b, "%s/%016" PRIx64, w->staging_dir,
                        (uint64_t)XXH3_64bits(id, strlen(id)));
    if (rc == 0) {
        w->stage_ns = tfs_buf_steal(&b);
        rc = tfs_buf_printf(&b, "%s/%s", w->stage_ns ? w->stage_ns : "",
                            step);
    }
    if (rc == 0)
        w->stage_step = tfs_buf_steal(&b);
    tfs_buf_cleanup(&b);
    if (rc == 0 && (w->stage_ns == NULL || w->stage_step == NULL))
        rc = -ENOMEM;
    return rc;
}

static int wr_stale_abort(struct tfs_ckpt_writer *w)
{
    char reason[TFS_CKPT_REASON_MAX];
    unsigned who = 0;
    int code = 0;
    int rc = tfs_ckpt_abort_read(w->st, w->step, &code, &who, reason,
                                 w->stale_abort);

    if (rc == 0)
        w->stale_abort[0] = '\0';
    return rc < 0 ? rc : 0;
}

/* Refuse (or, overwriting, uncommit) a step that already has an index. */
static int wr_check_step(struct tfs_ckpt_writer *w)
{
    struct tfs_buf key;
    bool committed;
    char name[32];
    int rc = tfs_ckpt_is_committed(w->st, w->step, &committed);

    if (rc < 0)
        return rc;
    if (committed && !w->overwrite)
        return tfs_err(-EEXIST, "step %" PRIu64 " is already committed",
                       w->step);
    tfs_buf_init(&key, 0);
    if (committed && w->rank == 0) {
        rc = tfs_ckpt_key(&key, w->step, TFS_CKPT_INDEX_NAME);
        if (rc == 0)
            rc = tfs_store_remove(w->st, tfs_buf_str(&key));
    }
    /* A marker of ours left by an earlier attempt must not be seen. */
    tfs_ckpt_marker_name(name, sizeof(name), w->rank);
    if (rc == 0)
        rc = tfs_ckpt_key(&key, w->step, name);
    if (rc == 0)
        rc = tfs_store_remove(w->st, tfs_buf_str(&key));
    /* Nor anyone's: rank 0 opens a new attempt (commit.c), without the
     * abort note of an earlier one. */
    if (rc == 0 && w->rank == 0 && w->world_size > 1) {
        rc = tfs_ckpt_key(&key, w->step, TFS_CKPT_ABORT_NAME);
        if (rc == 0)
            rc = tfs_store_remove(w->st, tfs_buf_str(&key));
        if (rc == -ENOENT)
            rc = 0;
        if (rc == 0)
            rc = tfs_ckpt_attempt_start(w->st, w->step, w->attempt);
    }
    tfs_buf_cleanup(&key);
    /* A note already there when we open is about an earlier attempt
     * (or one that gave up before we came): never ours to act on. */
    if (rc == 0 && w->rank != 0 && w->world_size > 1)
        rc = wr_stale_abort(w);
    return rc;
}

int tfs_ckpt_writer_open(struct tfs_ckpt_writer *w, const char *uri,
                         uint64_t step)
{
    uint64_t prev;
    uint64_t dl;
    int rc = wr_settable(w);

    if (rc < 0)
        return rc;
    if (w->rank >= w->world_size)
        return tfs_err(TFS_EOPTION, "checkpoint writer option rank=%u: "
                       "expected below world_size %u", w->rank,
                       w->world_size);
    rc = tfs_ckpt_store_open(uri, w->options, true, &w->st);
    if (rc < 0)
        return rc;
    w->step = step;
    rc = tfs_ckpt_wr_staging_paths(w);
    if (rc == 0)
        rc = tfs_ckpt_peer_open(w);
    /* The store calls of open, on the caller's thread, are bounded by
     * commit_timeout too (a partitioned store must not hang training). */
    dl = w->timeout_ms > 0 ? tfs_now_ns() + w->timeout_ms * 1000000ull
                           : tfs_deadline_get();
    prev = tfs_deadline_set(dl);
    if (rc == 0)
        rc = wr_check_step(w);
    tfs_deadline_set(prev);
    if (rc < 0 && dl != 0 && tfs_now_ns() >= dl) {
        char t[32];
        char d[256];

        snprintf(d, sizeof(d), "%s", tfs_errdetail());
        tfs_ckpt_fmt_s(t, sizeof(t), w->timeout_ms);
        rc = tfs_err(-ETIMEDOUT, "step %" PRIu64 ": rank %u: open did not "
                     "finish in %s (the store: %s)", w->step, w->rank, t, d);
    }
    if (rc < 0) {
        tfs_ckpt_peer_close(w);
        tfs_store_close(w->st);
        w->st = NULL;
        tfs_free(w->stage_ns);
        tfs_free(w->stage_step);
        w->stage_ns = NULL;
        w->stage_step = NULL;
        return rc;
    }
    w->opened = true;
    return 0;
}

/* ---- adding tensors ---- */

static size_t wr_hash(const char *name, size_t cap)
{
    return (size_t)(XXH3_64bits(name, strlen(name)) & (cap - 1));
}

/* The slot for name in the name table: its item or a free slot. */
static size_t *wr_name_slot(struct tfs_ckpt_writer *w, const char *name)
{
    size_t i = wr_hash(name, w->cap_names);

    while (w->names[i] != 0 &&
           strcmp(w->items[w->names[i] - 1].name, name) != 0)
        i = (i + 1) & (w->cap_names - 1);
    return &w->names[i];
}

/* Make room for one more item (and keep the name table half empty). */
static int wr_grow(struct tfs_ckpt_writer *w)
{
    if (w->n_items == w->cap_items) {
        size_t cap = w->cap_items ? w->cap_items * 2 : 64;
        struct wr_item *v = tfs_realloc(w->items, cap * sizeof(*v));

        if (v == NULL)
            return -ENOMEM;
        w->items = v;
        w->cap_items = cap;
    }
    if (2 * (w->n_items + 1) > w->cap_names) {
        size_t cap = w->cap_names ? w->cap_names * 2 : 128;
        size_t *old = w->names;

        w->names = tfs_calloc(cap, sizeof(*w->names));
        if (w->names == NULL) {
            w->names = old;
            return -ENOMEM;
        }
        w->cap_names = cap;
        for (size_t i = 0; i < w->n_items; i++)
            *wr_name_slot(w, w->items[i].name) = i + 1;
        tfs_free(old);
    }
    return 0;
}

static int wr_check_tensor(const struct tfs_ckpt_writer *w, const char *name,
                           const char *dtype, int ndim, const int64_t *shape,
                           size_t len, int *dt)
{
    uint64_t nelem = 0;
    uint64_t nbytes = 0;

    if (!w->opened || w->saved)
        return tfs_err(-EBUSY, "add '%s': the writer is %s", name,
                       w->saved ? "already saved" : "not open");
    if (name[0] == '\0' || strcmp(name, "__metadata__") == 0)
        return tfs_err(-EINVAL, "invalid tensor name '%s'", name);
    *dt = tfs_ckpt_dtype_find(dtype, strlen(dtype));
    if (*dt < 0)
        return tfs_err(-EINVAL, "tensor '%s': unknown dtype '%s'", name,
                       dtype);
    if (ndim < 0 || ndim > TFS_CKPT_MAX_DIMS || (ndim > 0 && shape == NULL) ||
        tfs_ckpt_tensor_size(*dt, ndim, shape, &nelem, &nbytes) < 0)
        return tfs_err(-EINVAL, "tensor '%s': bad shape", name);
    if (nbytes != len)
        return tfs_err(-EINVAL, "tensor '%s': %zu bytes given, dtype and "
                       "shape need %" PRIu64, name, len, nbytes);
    return 0;
}

static int wr_add(struct tfs_ckpt_writer *w, const char *name,
                  const char *dtype, int ndim, const int64_t *shape,
                  const int64_t *offsets, const int64_t *full_shape,
                  const void *data, size_t len)
{
    struct wr_item *it;
    size_t *slot;
    int dt = -1;
    int rc = wr_check_tensor(w, name, dtype, ndim, shape, len, &dt);

    if (rc == 0)
        rc = wr_grow(w);
    if (rc < 0)
        return rc;
    slot = wr_name_slot(w, name);
    if (*slot != 0)
        return tfs_err(-EEXIST, "tensor '%s' added twice", name);
    it = &w->items[w->n_items];
    memset(it, 0, sizeof(*it));
    it->name = tfs_strdup(name);
    if (it->name == NULL)
        return -ENOMEM;
    it->dtype = dt;
    it->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        it->shape[d] = shape[d];
        it->full_shape[d] = shape[d];
    }
    if (offsets != NULL && ndim > 0) {
        it->sliced = true;
        memcpy(it->offsets, offsets, sizeof(int64_t) * (size_t)ndim);
        memcpy(it->full_shape, full_shape, sizeof(int64_t) * (size_t)ndim);
    }
    it->data = data;
    it->len = len;
    *slot = ++w->n_items;
    return 0;
}

int tfs_ckpt_writer_add(struct tfs_ckpt_writer *w, const char *name,
                        const char *dtype, int ndim, const int64_t *shape,
                        const void *data, size_t len)
{
    return wr_add(w, name, dtype, ndim, shape, NULL, NULL, data, len);
}

int tfs_ckpt_writer_add_slice(struct tfs_ckpt_writer *w, const char *name,
                              const char *dtype, int ndim,
                              const int64_t *shape, const int64_t *offsets,
                              const int64_t *full_shape, const void *data,
                              size_t len)
{
    if (ndim < 0 || ndim > TFS_CKPT_MAX_DIMS ||
        (ndim > 0 && (offsets == NULL || full_shape == NULL || !shape)))
        return tfs_err(-EINVAL, "slice '%s': bad shape", name);
    for (int d = 0; d < ndim; d++) {
        if (offsets[d] < 0 || shape[d] < 0 || full_shape[d] < 0 ||
            offsets[d] > full_shape[d] - shape[d])
            return tfs_err(-EINVAL, "slice '%s': dimension %d (offset %"
                           PRId64 ", size %" PRId64 ") outside the full "
                           "shape %" PRId64, name, d, offsets[d], shape[d],
                           full_shape[d]);
    }
    return wr_add(w, name, dtype, ndim, shape, offsets, full_shape, data,
                  len);
}

/* ---- layout ---- */

static const struct wr_item *wr_sort_base;

/* Within a file: widest dtype first (natural alignment), then add order. */
static int wr_file_order(const void *a, const void *b)
{
    size_t x = *(const size_t *)a;
    size_t y = *(const size_t *)b;
    unsigned bx = tfs_ckpt_dtype_bits(wr_sort_base[x].dtype);
    unsigned by = tfs_ckpt_dtype_bits(wr_sort_base[y].dtype);

    if (bx != by)
        return bx > by ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Count the files and assign each item its file, greedily in add order. */
static int wr_assign_files(struct tfs_ckpt_writer *w)
{
    uint64_t used = 0;
    size_t n = 0;

    for (size_t i = 0; i < w->n_items; i++) {
        if (n == 0 || (used > 0 && used + w->items[i].len > w->shard_size)) {
            n++;
            used = 0;
        }
        w->items[i].file = (unsigned)(n - 1);
        used += w->items[i].len;
    }
    w->files = tfs_calloc(n + 1, sizeof(*w->files));
    if (w->files == NULL)
        return -ENOMEM;
    w->n_files = n;
    for (size_t i = 0; i < n; i++) {
        w->files[i].fd = -1;
        w->files[i].w = w;
        w->files[i].items = tfs_calloc(w->n_items + 1, sizeof(size_t));
        if (w->files[i].items == NULL)
            return -ENOMEM;
    }
    for (size_t i = 0; i < w->n_items; i++) {
        struct wr_file *f = &w->files[w->items[i].file];

        f->items[f->n_items++] = i;
    }
    return 0;
}

static int wr_layout_file(struct tfs_ckpt_writer *w, size_t idx,
                          struct tfs_buf *hdr)
{
    struct wr_file *f = &w->files[idx];
    uint64_t at = 0;
    int rc;

    wr_sort_base = w->items;
    qsort(f->items, f->n_items, sizeof(size_t), wr_file_order);
    for (size_t i = 0; i < f->n_items; i++) {
        struct wr_item *it = &w->items[f->items[i]];

        it->begin = at;
        at += it->len;
        it->end = at;
    }
    tfs_ckpt_shard_name(f->name, sizeof(f->name), w->rank,
                        (unsigned)idx + 1);
    rc = tfs_ckpt_stage_header(w, f, hdr);
    if (rc < 0)
        return rc;
    f->header_size = hdr->len;
    f->size = f->header_size + at;
    w->total += f->size;
    f->path = tfs_malloc(strlen(w->stage_step) + strlen(f->name) + 2);
    f->tmp = tfs_malloc(strlen(w->stage_step) + strlen(f->name) + 6);
    if (f->path == NULL || f->tmp == NULL)
        return -ENOMEM;
    snprintf(f->path, strlen(w->stage_step) + strlen(f->name) + 2, "%s/%s",
             w->stage_step, f->name);
    snprintf(f->tmp, strlen(w->stage_step) + strlen(f->name) + 6,
             "%s/%s.tmp", w->stage_step, f->name);
    return 0;
}

static int wr_layout(struct tfs_ckpt_writer *w)
{
    struct tfs_buf hdr;
    int rc = wr_assign_files(w);

    tfs_buf_init(&hdr, TFS_CKPT_ST_MAX_HEADER);
    for (size_t i = 0; i < w->n_files && rc == 0; i++)
        rc = wr_layout_file(w, i, &hdr);
    tfs_buf_cleanup(&hdr);
    return rc;
}

static void wr_file_task(struct tfs_pool_task *task)
{
    struct wr_file *f = tfs_container_of(task, struct wr_file, task);
    struct tfs_ckpt_writer *w = f->w;
    /* In the background every store call ends by the commit deadline. */
    uint64_t prev = tfs_deadline_set(w->deadline_ns);
    int rc = w->phase(w, f);

    tfs_deadline_set(prev);
    pthread_mutex_lock(&w->lock);
    if (rc < 0 && w->tasks_rc == 0) {
        w->tasks_rc = rc;
        snprintf(w->detail, sizeof(w->detail), "%s", tfs_errdetail());
    }
    if (--w->tasks_left == 0)
        pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Bytes of this rank's files in the store, and of all of them. */
static void wr_sent(struct tfs_ckpt_writer *w, char *buf, size_t len)
{
    char a[32];
    char b[32];

    snprintf(buf, len, "%s of %s of its shards in the store",
             tfs_fmt_bytes(a, sizeof(a), (double)atomic_load(&w->uploaded)),
             tfs_fmt_bytes(b, sizeof(b), (double)w->total));
}

/*
 * The commit deadline passed with uploads still running (a store call
 * that ignores the thread's deadline): they are left behind, to end on
 * their own (close waits for them); the save fails now.  Called with
 * w->lock held.
 */
static int wr_abandon(struct tfs_ckpt_writer *w)
{
    const char *name = "?";
    char t[32];
    char sent[96];

    for (size_t i = 0; i < w->n_files; i++) {
        if (!w->files[i].in_store) {
            name = w->files[i].name;
            break;
        }
    }
    tfs_ckpt_fmt_s(t, sizeof(t), w->timeout_ms);
    wr_sent(w, sent, sizeof(sent));
    return tfs_err(-ETIMEDOUT, "upload of %s did not finish in %s (%s; "
                   "abandoned)", name, t, sent);
}

/*
 * Run phase on every file, in parallel on the upload pool, and wait for
 * all of them (in the background, only until the commit deadline); the
 * first error (with its detail).
 */
static int wr_each_file(struct tfs_ckpt_writer *w, wr_phase_fn *phase)
{
    int rc;

    if (w->n_files == 0)
        return 0;
    pthread_mutex_lock(&w->lock);
    w->phase = phase;
    w->tasks_left = (unsigned)w->n_files;
    w->tasks_rc = 0;
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < w->n_files; i++) {
        w->files[i].task.fn = wr_file_task;
        if (tfs_pool_submit(w->upload_pool, &w->files[i].task) < 0)
            wr_file_task(&w->files[i].task);    /* cannot happen: run it */
    }
    pthread_mutex_lock(&w->lock);
    rc = 0;
    while (w->tasks_left > 0 && rc == 0) {
        if (w->deadline_ns == 0)
            pthread_cond_wait(&w->cond, &w->lock);
        else if (tfs_now_ns() < w->deadline_ns + WR_ABANDON_NS) {
            /* w->cond runs on CLOCK_REALTIME (see tfs_ckpt_writer_wait) */
            struct timespec ts = tfs_abstime(CLOCK_REALTIME, 100000000u);

            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        } else
            rc = -ETIMEDOUT;
    }
    if (rc == 0)
        rc = w->tasks_rc;
    if (rc == -ETIMEDOUT && w->tasks_left > 0)
        rc = wr_abandon(w);
    else if (rc < 0)
        tfs_errdetail_set("%s", w->detail);
    pthread_mutex_unlock(&w->lock);
    return rc;
}

static int wr_marker(struct tfs_ckpt_writer *w, struct tfs_ckpt_marker *m);
static void wr_marker_free(struct tfs_ckpt_marker *m);

/*
 * Every file is finished: write the local manifest (last, fsynced), and
 * the level is LOCAL.  A manifest that cannot be written leaves the level
 * where it was (the commit does not need it): logged.
 */
static void wr_local(struct tfs_ckpt_writer *w)
{
    struct tfs_ckpt_marker m;
    int rc = wr_marker(w, &m);

    if (rc == 0)
        rc = tfs_ckpt_stage_manifest(w, &m);
    wr_marker_free(&m);
    if (rc < 0) {
        tfs_log(TFS_LOG_WARNING, "ckpt: step %" PRIu64 ", rank %u: no "
                "local manifest: %s (%s)", w->step, w->rank,
                tfs_strerror(rc), tfs_errdetail());
        return;
    }
    pthread_mutex_lock(&w->lock);
    if (w->level < TFS_CKPT_LEVEL_LOCAL)
        w->level = TFS_CKPT_LEVEL_LOCAL;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    tfs_ckpt_peer_start(w);             /* beside the upload */
}

/* Copy every file into staging, several at once (the caller waits). */
static int wr_stage(struct tfs_ckpt_writer *w)
{
    const char *sub = w->stage_step + strlen(w->staging_dir) + 1;
    int rc = tfs_ckpt_staging_open(w->staging_dir, sub, &w->stage_fd);

    /* An earlier attempt's manifest must never name our new files. */
    if (rc == 0)
        tfs_ckpt_stage_unlink_manifest(w, w->stage_fd);
    if (rc == 0)
        tfs_ckpt_stage_recycle(w);
    if (rc == 0)
        rc = wr_each_file(w, tfs_ckpt_stage_file);
    if (rc == 0 && w->sync)
        rc = wr_each_file(w, tfs_ckpt_stage_finish);
    if (rc == 0 && w->sync) {
        w->n_finished = w->n_files;
        wr_local(w);
    }
    return rc;
}

/* ---- the background commit ---- */

/* The marker describing this rank's files and tensors. */
static int wr_marker(struct tfs_ckpt_writer *w, struct tfs_ckpt_marker *m)
{
    memset(m, 0, sizeof(*m));
    m->rank = w->rank;
    m->world_size = w->world_size;
    m->step = w->step;
    m->run_id = w->run_id;
    m->extra = w->extra;
    m->files = tfs_calloc(w->n_files + 1, sizeof(*m->files));
    m->tensors = tfs_calloc(w->n_items + 1, sizeof(*m->tensors));
    if (m->files == NULL || m->tensors == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < w->n_files; i++) {
        struct tfs_ckpt_file_info *fi = &m->files[m->n_files++];

        fi->name = w->files[i].name;
        fi->rank = w->rank;
        fi->size = w->files[i].size;
        fi->header_size = w->files[i].header_size;
        fi->header_xxh3 = w->files[i].header_xxh3;
        fi->data_xxh3 = w->files[i].data_xxh3;
        fi->n_tensors = w->files[i].n_items;
    }
    for (size_t i = 0; i < w->n_items; i++) {
        const struct wr_item *it = &w->items[i];
        struct tfs_ckpt_tensor_info *t = &m->tensors[m->n_tensors++];

        t->name = it->name;
        t->file = w->files[it->file].name;
        t->dtype = it->dtype;
        t->ndim = it->ndim;
        memcpy(t->shape, it->shape, sizeof(t->shape));
        t->sliced = it->sliced;
        memcpy(t->offsets, it->offsets, sizeof(t->offsets));
        memcpy(t->full_shape, it->full_shape, sizeof(t->full_shape));
        t->nbytes = it->len;
    }
    return 0;
}

/* The marker's arrays only; every string in it is the writer's. */
static void wr_marker_free(struct tfs_ckpt_marker *m)
{
    tfs_free(m->files);
    tfs_free(m->tensors);
}

/*
 * Recovery: the marker is the local manifest's, with this job's run id
 * (the arrays copied, so that wr_marker_free applies).
 */
static int wr_marker_recovered(struct tfs_ckpt_writer *w,
                               struct tfs_ckpt_marker *m)
{
    const struct tfs_ckpt_marker *r = w->recovered;

    *m = *r;
    m->run_id = w->run_id;
    m->attempt[0] = '\0';
    m->files = tfs_calloc(r->n_files + 1, sizeof(*m->files));
    m->tensors = tfs_calloc(r->n_tensors + 1, sizeof(*m->tensors));
    if (m->files == NULL || m->tensors == NULL)
        return -ENOMEM;
    memcpy(m->files, r->files, r->n_files * sizeof(*m->files));
    memcpy(m->tensors, r->tensors, r->n_tensors * sizeof(*m->tensors));
    return 0;
}

/* Whether the commit deadline has passed, or will in ns. */
static bool wr_past_deadline(const struct tfs_ckpt_writer *w, uint64_t ns)
{
    return w->deadline_ns != 0 && tfs_now_ns() + ns >= w->deadline_ns;
}

/* Finish f in staging (unless done) and upload it. */
static int wr_upload_one(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    struct tfs_buf key;
    bool was = f->finished;
    int rc = tfs_ckpt_stage_finish(w, f);
    bool last = false;

    if (rc == 0 && !was) {
        pthread_mutex_lock(&w->lock);
        last = ++w->n_finished == w->n_files;
        pthread_mutex_unlock(&w->lock);
    }
    if (last)
        wr_local(w);                    /* on the last file's thread */
    tfs_buf_init(&key, 0);
    if (rc == 0)
        rc = tfs_ckpt_key(&key, w->step, f->name);
    for (int attempt = 0; rc == 0; attempt++) {
        tfs_ratelimit_take(&w->rl, f->size);
        rc = tfs_store_put_file(w->st, tfs_buf_str(&key), f->path, NULL);
        if (rc == 0 || attempt == 2 || !tfs_err_is_retryable(rc) ||
            wr_past_deadline(w, 100000000ull << attempt))
            break;
        tfs_sleep_ns(100000000ull << attempt);
        rc = 0;
    }
    if (rc < 0 && wr_past_deadline(w, 0)) {
        char t[32];
        char sent[96];
        char d[256];

        snprintf(d, sizeof(d), "%s", tfs_errdetail());
        tfs_ckpt_fmt_s(t, sizeof(t), w->timeout_ms);
        wr_sent(w, sent, sizeof(sent));
        rc = tfs_err(-ETIMEDOUT, "upload of %s did not finish in %s (%s; "
                     "the store: %s)", f->name, t, sent, d);
    } else if (rc < 0) {
        rc = tfs_ckpt_err_in(rc, tfs_buf_str(&key), "upload");
    } else {
        atomic_fetch_add(&w->uploaded, f->size);
        pthread_mutex_lock(&w->lock);
        f->in_store = true;
        pthread_mutex_unlock(&w->lock);
    }
    tfs_buf_cleanup(&key);
    return rc;
}

/* "step N: rank R: " before the detail of this rank's own failure. */
static int wr_own_err(const struct tfs_ckpt_writer *w, int rc,
                      const char *what)
{
    char d[512];

    snprintf(d, sizeof(d), "%s", tfs_errdetail());
    if (what != NULL)
        return tfs_err(rc, "step %" PRIu64 ": rank %u: %s: %s", w->step,
                       w->rank, what, d);
    return tfs_err(rc, "step %" PRIu64 ": rank %u: %s", w->step, w->rank,
                   d);
}

/*
 * Tell the other ranks that this attempt failed (abort notes, commit.c):
 * rank 0 always; another rank only for an error of its own before its
 * deadline (after it, rank 0 has given up already, and a rank resumed
 * late must not abort a retry).  Under a short deadline of its own; a
 * store that cannot be reached is simply not told.
 */
static void wr_publish(struct tfs_ckpt_writer *w, int rc, const char *nonce)
{
    char reason[TFS_CKPT_REASON_MAX];
    char now[TFS_CKPT_ATTEMPT_LEN] = "";
    uint64_t prev;
    int prc = 0;

    if (w->world_size < 2 || (w->rank != 0 && wr_past_deadline(w, 0)))
        return;
    snprintf(reason, sizeof(reason), "%s", tfs_errdetail());
    prev = tfs_ckpt_grace_begin();
    /* No nonce yet: rank 0 has not opened the step.  Give it a moment
     * (a note without the nonce would be taken for a stale one). */
    for (uint64_t end = tfs_now_ns() + WR_NONCE_WAIT_NS;
         prc == 0 && (nonce == NULL || nonce[0] == '\0') &&
         tfs_now_ns() < end && !wr_past_deadline(w, 0);) {
        prc = tfs_ckpt_attempt_read(w->st, w->step, now);
        nonce = now;
        if (prc == 0 && now[0] == '\0')
            tfs_sleep_ns(50000000);
    }
    if (prc == 0 && strcmp(nonce, w->stale_abort) != 0)
        prc = tfs_ckpt_abort_put(w->st, w->step, nonce, w->rank, rc, reason);
    tfs_deadline_set(prev);
    if (prc < 0)
        TFS_INFO("ckpt: rank %u could not publish the abort of step %"
                 PRIu64 ": %s", w->rank, w->step, tfs_strerror(prc));
    tfs_errdetail_set("%s", reason);
}

/*
 * Committed: the manifest goes (the index describes the copy now), so a
 * kept staging copy is never recovered after its checkpoint was removed
 * from the store.
 */
static void wr_committed_local(struct tfs_ckpt_writer *w)
{
    int dfd = w->stage_fd;

    if (dfd < 0)
        dfd = open(w->stage_step, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                      O_CLOEXEC);
    if (dfd >= 0)
        tfs_ckpt_stage_unlink_manifest(w, dfd);
    if (dfd >= 0 && dfd != w->stage_fd)
        close(dfd);
}

static int wr_commit(struct tfs_ckpt_writer *w)
{
    bool noted = false;                 /* ended by someone's abort note */
    struct tfs_ckpt_commit c = {
        .st = w->st,
        .step = w->step,
        .rank = w->rank,
        .world_size = w->world_size,
        .run_id = w->run_id,
        .attempt = w->rank == 0 && w->world_size > 1 ? w->attempt : NULL,
        .deadline_ns = w->deadline_ns,
        .timeout_ms = w->timeout_ms,
        .grace_ns = TFS_MIN(TFS_CKPT_GRACE_NS, w->timeout_ms * 1000000ull),
        .ignore_abort = w->stale_abort[0] != '\0' ? w->stale_abort : NULL,
        .keep_last = w->keep_last,
        .noted = &noted,
    };
    struct tfs_ckpt_marker m = {0};
    char t[32];
    int rc;

    if (w->n_files == 0 && w->recovered == NULL)
        wr_local(w);
    rc = wr_each_file(w, wr_upload_one);
    tfs_ckpt_fmt_s(t, sizeof(t), w->timeout_ms);
    if (rc < 0)
        rc = wr_own_err(w, rc, NULL);
    if (rc == 0 && w->recovered != NULL)
        rc = wr_marker_recovered(w, &m);
    else if (rc == 0)
        rc = wr_marker(w, &m);
    if (rc == 0 && w->rank == 0)
        memcpy(m.attempt, w->attempt, sizeof(m.attempt));
    else if (rc == 0)
        rc = tfs_ckpt_attempt_read(w->st, w->step, m.attempt);
    if (rc == 0 && wr_past_deadline(w, 0))
        rc = tfs_err(-ETIMEDOUT, "step %" PRIu64 ": rank %u: the commit "
                     "deadline (%s) passed before its marker was put",
                     w->step, w->rank, t);
    else if (rc == 0 && (rc = tfs_ckpt_put_marker(&c, &m)) < 0)
        rc = wr_own_err(w, rc, "marker");
    if (rc == 0 && w->rank == 0)
        rc = tfs_ckpt_commit_index(&c, &m);
    else if (rc == 0)
        rc = tfs_ckpt_await_index(&c, &m);
    if (rc < 0 && strncmp(tfs_errdetail(), "step ", 5) != 0)
        rc = wr_own_err(w, rc, NULL);
    /* Ended by a note: those who wait have been told already. */
    if (rc < 0 && !noted)
        wr_publish(w, rc, m.attempt);
    wr_marker_free(&m);
    if (rc == 0)
        wr_committed_local(w);
    if (rc == 0)
        tfs_ckpt_stage_prune(w);
    return rc;
}

int tfs_ckpt_wr_commit(struct tfs_ckpt_writer *w)
{
    return wr_commit(w);
}

static void wr_commit_task(struct tfs_pool_task *task)
{
    struct tfs_ckpt_writer *w =
        tfs_container_of(task, struct tfs_ckpt_writer, commit_task);
    uint64_t prev = tfs_deadline_set(w->deadline_ns);
    int rc = wr_commit(w);

    tfs_deadline_set(prev);
    tfs_ckpt_wr_end(w, rc);
}

/* The background part ended with rc: log it, wake the waiters. */
void tfs_ckpt_wr_end(struct tfs_ckpt_writer *w, int rc)
{
    char step[32];

    tfs_ckpt_step_name(step, sizeof(step), w->step);
    if (rc < 0)
        tfs_log(TFS_LOG_ERR, "ckpt: save of %s (rank %u) failed: %s (%s)",
                step, w->rank, tfs_strerror(rc), tfs_errdetail());
    else
        TFS_INFO("ckpt: %s committed by rank %u", step, w->rank);
    pthread_mutex_lock(&w->lock);
    w->status = rc;
    snprintf(w->detail, sizeof(w->detail), "%s", rc < 0 ? tfs_errdetail()
                                                        : "");
    w->done = true;
    if (rc == 0)
        w->level = TFS_CKPT_LEVEL_STORE;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* The upload pool stages and uploads; the commit thread runs the rest. */
int tfs_ckpt_wr_pools(struct tfs_ckpt_writer *w)
{
    int rc = tfs_pool_create(&w->upload_pool, w->upload_threads);

    if (rc == 0)
        rc = tfs_pool_create(&w->commit_pool, 1);
    tfs_ratelimit_cleanup(&w->rl);
    tfs_ratelimit_init(&w->rl, w->upload_bw);
    return rc;
}

static int wr_start(struct tfs_ckpt_writer *w)
{
    /* commit_timeout bounds all of the background part, from here. */
    if (w->timeout_ms > 0)
        w->deadline_ns = tfs_now_ns() + w->timeout_ms * 1000000ull;
    w->commit_task.fn = wr_commit_task;
    return tfs_pool_submit(w->commit_pool, &w->commit_task);
}

int tfs_ckpt_writer_save(struct tfs_ckpt_writer *w)
{
    int rc;

    if (!w->opened || w->saved)
        return tfs_err(-EBUSY, "save: the writer is %s",
                       w->saved ? "already saved" : "not open");
    w->saved = true;
    rc = wr_layout(w);
    if (rc == 0)
        rc = tfs_ckpt_wr_pools(w);
    if (rc == 0)
        rc = wr_stage(w);
    for (size_t i = 0; i < w->n_items; i++)
        w->items[i].data = NULL;        /* the caller's memory is back */
    if (rc == 0)
        rc = wr_start(w);
    if (rc < 0) {
        tfs_ckpt_stage_discard(w);
        rc = wr_own_err(w, rc, "save");
        wr_publish(w, rc, w->rank == 0 ? w->attempt : NULL);
        pthread_mutex_lock(&w->lock);
        w->done = true;
        w->status = rc;
        snprintf(w->detail, sizeof(w->detail), "%s", tfs_errdetail());
        pthread_mutex_unlock(&w->lock);
    }
    return rc;
}

/* ---- waiting ---- */

int tfs_ckpt_writer_wait(struct tfs_ckpt_writer *w, int64_t timeout_ms)
{
    struct timespec ts;
    int rc = 0;

    if (!w->saved)
        return tfs_err(-EINVAL, "wait: nothing was saved");
    if (timeout_ms >= 0)
        ts = tfs_abstime(CLOCK_REALTIME, (uint64_t)timeout_ms * 1000000u);
    pthread_mutex_lock(&w->lock);
    while (!w->done && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&w->cond, &w->lock);
        else
            rc = pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    if (w->done) {
        rc = w->status;
        if (rc < 0)
            tfs_errdetail_set("%s", w->detail);
    } else {
        rc = -EINPROGRESS;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

int tfs_ckpt_writer_level(struct tfs_ckpt_writer *w)
{
    int level;

    pthread_mutex_lock(&w->lock);
    level = w->level;
    pthread_mutex_unlock(&w->lock);
    return level;
}

/*
 * Whether level can no longer be reached (w->lock held): the save ended
 * below it.  PEER: the push ended without it, or the save ended before
 * LOCAL (no push started); a store failure alone does not end the wait,
 * the push may still succeed.
 */
static bool wr_level_ended(const struct tfs_ckpt_writer *w, int level)
{
    if (level == TFS_CKPT_LEVEL_PEER)
        return w->peer_ended ||
               (w->done && w->level < TFS_CKPT_LEVEL_LOCAL);
    return w->done;
}

int tfs_ckpt_writer_wait_level(struct tfs_ckpt_writer *w, int level,
                               int64_t timeout_ms)
{
    struct timespec ts;
    int rc = 0;

    if (level == TFS_CKPT_LEVEL_PEER && w->group_h == NULL)
        return tfs_err(-ENOTSUP, "no cache group configured: the peer level "
                       "needs one (the writer's group options)");
    if (level == TFS_CKPT_LEVEL_STORE)
        return tfs_ckpt_writer_wait(w, timeout_ms);
    if (level != TFS_CKPT_LEVEL_LOCAL && level != TFS_CKPT_LEVEL_NONE &&
        level != TFS_CKPT_LEVEL_PEER)
        return tfs_err(-EINVAL, "wait: unknown level %d", level);
    if (!w->saved)
        return tfs_err(-EINVAL, "wait: nothing was saved");
    if (timeout_ms >= 0)
        ts = tfs_abstime(CLOCK_REALTIME, (uint64_t)timeout_ms * 1000000u);
    pthread_mutex_lock(&w->lock);
    while (w->level < level && !wr_level_ended(w, level) && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&w->cond, &w->lock);
        else
            rc = pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    if (w->level >= level) {
        rc = 0;
    } else if (level == TFS_CKPT_LEVEL_PEER && w->peer_rc < 0) {
        rc = w->peer_rc;
        tfs_errdetail_set("%s", w->peer_detail);
    } else if (w->done) {
        rc = w->status < 0 ? w->status : 0;
        if (rc < 0)
            tfs_errdetail_set("%s", w->detail);
    } else {
        rc = -EINPROGRESS;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

bool tfs_ckpt_writer_is_done(struct tfs_ckpt_writer *w)
{
    bool done;

    pthread_mutex_lock(&w->lock);
    done = w->done;
    pthread_mutex_unlock(&w->lock);
    return done;
}

void tfs_ckpt_writer_progress(struct tfs_ckpt_writer *w, uint64_t *uploaded,
                              uint64_t *total)
{
    if (uploaded != NULL)
        *uploaded = atomic_load(&w->uploaded);
    if (total != NULL)
        *total = w->saved ? w->total : 0;
}

void tfs_ckpt_writer_close(struct tfs_ckpt_writer *w)
{
    if (w == NULL)
        return;
    if (w->saved)
        (void)tfs_ckpt_writer_wait(w, -1);
    tfs_pool_destroy(w->commit_pool);
    tfs_pool_destroy(w->upload_pool);
    tfs_ckpt_peer_close(w);
    for (size_t i = 0; i < w->n_files; i++) {
        if (w->files[i].fd >= 0)
            close(w->files[i].fd);
        tfs_free(w->files[i].path);
        tfs_free(w->files[i].tmp);
        tfs_free(w->files[i].items);
    }
    tfs_free(w->files);
    for (size_t i = 0; i < w->n_items; i++)
        tfs_free(w->items[i].name);
    tfs_free(w->items);
    tfs_free(w->names);
    tfs_store_close(w->st);
    if (w->stage_fd >= 0)
        close(w->stage_fd);
    tfs_free(w->stage_step);
    tfs_free(w->stage_ns);
    tfs_free(w->staging_dir);
    tfs_free(w->options);
    tfs_free(w->run_id);
    tfs_free(w->extra);
    tfs_free(w->group);
    tfs_free(w->group_secret);
    tfs_free(w->group_self);
    tfs_free(w->group_tls_ca);
    if (w->recovered != NULL)
        tfs_ckpt_marker_cleanup(w->recovered);
    tfs_free(w->recovered);
    tfs_ratelimit_cleanup(&w->rl);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    tfs_free(w);
}
