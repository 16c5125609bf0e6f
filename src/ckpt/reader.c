/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint reader: open a committed checkpoint, then read tensors
 * on demand or stream them in the background, always verified.
 *
 * Opening reads the index, then every shard's header (in parallel on the
 * reader's threads): from the local staging copy when it exists with the
 * index's size and header checksum, else from the store (stat, so a
 * truncated shard is caught here, and a ranged read of the header).  The
 * headers give each tensor its pieces: (file, byte range, box in the full
 * tensor, checksum).
 *
 * A read is a box of a tensor: the whole of it, or the part a rank needs
 * under another world size.  Every piece that intersects it is read whole
 * (straight into the caller's buffer when the box is exactly that piece),
 * its checksum checked before any byte is used, and the intersection
 * copied into place.  A local piece that fails its checksum is read again
 * from the store; a store piece that fails is TFS_ECORRUPT naming the
 * tensor and the file.
 *
 * Streaming: submitted reads wait in a list; start() queues them on the
 * pool in file order (prefetch in file order); wait() on one that no
 * thread has begun reads it on the caller's thread at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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


/* ---- creation and settings ---- */

int tfs_ckpt_reader_create(struct tfs_ckpt_reader **out)
{
    struct tfs_ckpt_reader *r = tfs_calloc(1, sizeof(*r));
    const char *env = getenv("TIERFS_CKPT_STAGING");

    if (r == NULL)
        return -ENOMEM;
    r->threads = 4;
    r->use_staging = true;
    r->staging_dir = env != NULL && env[0] ? tfs_strdup(env)
                                           : tfs_ckpt_staging_default();
    if (r->staging_dir == NULL) {
        tfs_free(r);
        return -ENOMEM;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    *out = r;
    return 0;
}

static int rd_settable(const struct tfs_ckpt_reader *r)
{
    return r->opened ? tfs_err(-EBUSY, "reader already open") : 0;
}

#define RD_OPT(name, kind, field, min, max)                                \
    {name, kind, offsetof(struct tfs_ckpt_reader, field), min, max, NULL,  \
     NULL}

/* The options of tfs_ckpt_reader_set (ckpt.h). */
static const struct tfs_opt_spec rd_opts[] = {
    RD_OPT("staging_dir", TFS_OPT_STR, staging_dir, 1, TFS_OPT_NOMAX),
    RD_OPT("threads", TFS_OPT_UINT, threads, 1, 256),
    RD_OPT("options", TFS_OPT_STR, options, 0, TFS_OPT_NOMAX),
    RD_OPT("use_staging", TFS_OPT_BOOL, use_staging, 0, 1),
    RD_OPT("index", TFS_OPT_STR, index_given, 2, TFS_CKPT_JSON_MAX),
};

int tfs_ckpt_reader_set(struct tfs_ckpt_reader *r, const char *name,
                        const char *value)
{
    int rc = rd_settable(r);

    if (rc < 0)
        return rc;
    return tfs_opt_apply("checkpoint reader", rd_opts,
                         TFS_ARRAY_LEN(rd_opts), r, name, value);
}

/* ---- low-level reads ---- */

/* Read [off, off+len) of file f from the store, exactly. */
int tfs_ckpt_rd_store(struct tfs_ckpt_reader *r, const struct rd_file *f,
                      void *buf, size_t len, uint64_t off)
{
    size_t n = 0;
    int rc = tfs_store_read(r->st, f->key, buf, len, off,
                            f->version[0] ? f->version : NULL, &n);

    if (rc < 0)
        return tfs_ckpt_err_in(rc, f->key, "read");
    if (n < len)
        return tfs_err(TFS_EFORMAT, "%s: truncated: ends before byte %"
                       PRIu64, f->key, off + len);
    return 0;
}

static int rd_local_read(const struct rd_file *f, void *buf, size_t len,
                         uint64_t off)
{
    size_t n = 0;
    int rc = tfs_pread_full(f->local_fd, buf, len, off, &n);

    if (rc < 0)
        return tfs_err(rc, "%s: read failed", f->local_path);
    if (n < len)
        return tfs_err(TFS_EFORMAT, "%s: truncated", f->local_path);
    return 0;
}

/* ---- opening: headers ---- */

/* Use the staging copy of f if it has the index's size and header. */
static void rd_try_local(struct tfs_ckpt_reader *r, struct rd_file *f,
                         char *hdr)
{
    const struct tfs_ckpt_file_info *fi = f->info;
    struct stat sb;
    size_t n = 0;
    int fd;

    if (f->local_path == NULL)
        return;
    fd = open(f->local_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == fi->size &&
        tfs_pread_full(fd, hdr, (size_t)fi->header_size, 0, &n) == 0 &&
        n == fi->header_size &&
        XXH3_64bits(hdr, n) == fi->header_xxh3) {
        f->local_fd = fd;
        return;
    }
    close(fd);
    TFS_DEBUG("ckpt: staging copy %s does not match the index; reading "
              "%s from the store", f->local_path, f->key);
    (void)r;
}

/* Stat the store copy and read its header into hdr. */
static int rd_remote_header(struct tfs_ckpt_reader *r, struct rd_file *f,
                            char *hdr, uint64_t *size)
{
    const struct tfs_ckpt_file_info *fi = f->info;
    struct tfs_stat s;
    int rc = tfs_store_stat(r->st, f->key, &s);

    if (rc == -ENOENT)
        return tfs_err(-ENOENT, "%s: missing (named by the index)", f->key);
    if (rc < 0)
        return tfs_ckpt_err_in(rc, f->key, "stat");
    snprintf(f->version, sizeof(f->version), "%s", s.version);
    *size = s.size;
    if (s.size < fi->header_size)
        return tfs_err(TFS_EFORMAT, "%s: truncated: %" PRIu64 " bytes, "
                       "shorter than its header", f->key, s.size);
    rc = tfs_ckpt_rd_store(r, f, hdr, (size_t)fi->header_size, 0);
    if (rc == 0 && XXH3_64bits(hdr, (size_t)fi->header_size) !=
                       fi->header_xxh3)
        rc = tfs_err(TFS_ECORRUPT, "%s: header checksum mismatch (the file "
                     "does not match the index)", f->key);
    return rc;
}

static int rd_load_header(struct tfs_ckpt_reader *r, struct rd_file *f)
{
    const struct tfs_ckpt_file_info *fi = f->info;
    uint64_t size = fi->size;
    uint64_t n;
    char *hdr = tfs_malloc((size_t)fi->header_size + 1);
    int rc = 0;

    if (hdr == NULL)
        return -ENOMEM;
    rd_try_local(r, f, hdr);
    if (f->local_fd < 0)
        rc = rd_remote_header(r, f, hdr, &size);
    if (rc == 0)
        rc = tfs_ckpt_st_header_len((const unsigned char *)hdr, size,
                                    f->key, &n);
    if (rc == 0 && n + 8 != fi->header_size)
        rc = tfs_err(TFS_EFORMAT, "%s: header length %" PRIu64 ", the index "
                     "says %" PRIu64, f->key, n, fi->header_size - 8);
    if (rc == 0)
        rc = tfs_ckpt_st_decode(hdr + 8, (size_t)n, size, f->key, &f->hdr);
    if (rc == 0 && size != fi->size)
        rc = tfs_err(TFS_EFORMAT, "%s: %" PRIu64 " bytes, the index says %"
                     PRIu64, f->key, size, fi->size);
    tfs_free(hdr);
    return rc;
}

static void rd_header_task(struct tfs_pool_task *task)
{
    struct rd_file *f = tfs_container_of(task, struct rd_file, task);

    f->rc = rd_load_header(f->r, f);
    if (f->rc < 0)
        snprintf(f->detail, sizeof(f->detail), "%s", tfs_errdetail());
}

/* Load every header on the pool; the first failure, in file order. */
static int rd_load_headers(struct tfs_ckpt_reader *r)
{
    for (size_t i = 0; i < r->n_files; i++) {
        r->files[i].task.fn = rd_header_task;
        if (tfs_pool_submit(r->pool, &r->files[i].task) < 0)
            rd_header_task(&r->files[i].task);
    }
    tfs_pool_drain(r->pool);
    for (size_t i = 0; i < r->n_files; i++) {
        if (r->files[i].rc < 0) {
            tfs_errdetail_set("%s", r->files[i].detail);
            return r->files[i].rc;
        }
    }
    return 0;
}

static int rd_files(struct tfs_ckpt_reader *r)
{
    const char *id = tfs_store_identity(r->st);
    struct tfs_buf b;
    char step[32];
    int rc = 0;

    r->files = tfs_calloc(r->ix.n_files + 1, sizeof(*r->files));
    if (r->files == NULL)
        return -ENOMEM;
    tfs_ckpt_step_name(step, sizeof(step), r->step);
    tfs_buf_init(&b, 0);
    for (size_t i = 0; i < r->ix.n_files && rc == 0; i++) {
        struct rd_file *f = &r->files[r->n_files++];

        f->info = &r->ix.files[i];
        f->local_fd = -1;
        f->r = r;
        rc = tfs_ckpt_key(&b, r->step, f->info->name);
        f->key = rc == 0 ? tfs_buf_steal(&b) : NULL;
        if (rc == 0 && r->use_staging)
            rc = tfs_buf_printf(&b, "%s/%016" PRIx64 "/%s/%s",
                                r->staging_dir,
                                (uint64_t)XXH3_64bits(id, strlen(id)), step,
                                f->info->name);
        if (rc == 0 && r->use_staging)
            f->local_path = tfs_buf_steal(&b);
        if (rc == 0 && (f->key == NULL ||
                        (r->use_staging && f->local_path == NULL)))
            rc = -ENOMEM;
    }
    tfs_buf_cleanup(&b);
    return rc < 0 ? rc : rd_load_headers(r);
}

/* ---- opening: the tensor table ---- */

static size_t *rd_name_slot(struct tfs_ckpt_reader *r, const char *name)
{
    size_t i = (size_t)(XXH3_64bits(name, strlen(name)) &
                        (r->cap_names - 1));

    while (r->names[i] != 0 &&
           strcmp(r->tensors[r->names[i] - 1].name, name) != 0)
        i = (i + 1) & (r->cap_names - 1);
    return &r->names[i];
}

static const struct tfs_ckpt_sharded *
rd_sharded(const struct tfs_ckpt_index *ix, const char *name)
{
    for (size_t i = 0; i < ix->n_sharded; i++) {
        if (strcmp(ix->sharded[i].name, name) == 0)
            return &ix->sharded[i];
    }
    return NULL;
}

/* One entry per weight_map name, in its order. */
static int rd_tensors(struct tfs_ckpt_reader *r)
{
    r->tensors = tfs_calloc(r->ix.n_wm + 1, sizeof(*r->tensors));
    r->cap_names = 16;
    while (r->cap_names < 2 * (r->ix.n_wm + 1))
        r->cap_names *= 2;
    r->names = tfs_calloc(r->cap_names, sizeof(*r->names));
    if (r->tensors == NULL || r->names == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < r->ix.n_wm; i++) {
        struct rd_tensor *t = &r->tensors[i];
        size_t *slot;

        t->name = tfs_strdup(r->ix.wm_names[i]);
        if (t->name == NULL)
            return -ENOMEM;
        r->n_tensors++;
        t->dtype = -1;
        slot = rd_name_slot(r, t->name);
        if (*slot != 0)
            return tfs_err(TFS_EFORMAT, "index: '%s' mapped twice", t->name);
        *slot = i + 1;
    }
    return 0;
}

/* Attach header tensor h of file fi as a piece of its tensor. */
static int rd_add_piece(struct tfs_ckpt_reader *r, size_t fi,
                        const struct tfs_ckpt_st_tensor *h)
{
    const struct rd_file *f = &r->files[fi];
    size_t *slot = rd_name_slot(r, h->name);
    const struct tfs_ckpt_sharded *sh = rd_sharded(&r->ix, h->name);
    struct rd_piece *p = &r->pieces[r->n_pieces];
    struct rd_tensor *t;
    uint64_t nelem = 0;

    if (*slot == 0)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s' is not in the index's "
                       "weight_map", f->key, h->name);
    if (!h->has_xxh3)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s' has no checksum",
                       f->key, h->name);
    t = &r->tensors[*slot - 1];
    if (t->dtype < 0) {
        t->dtype = sh ? sh->dtype : h->dtype;
        t->ndim = sh ? sh->ndim : h->ndim;
        memcpy(t->shape, sh ? sh->shape : h->shape, sizeof(t->shape));
        tfs_ckpt_tensor_size(t->dtype, t->ndim, t->shape, &nelem, &t->nbytes);
    }
    p->tensor = *slot - 1;
    p->file = fi;
    p->begin = f->info->header_size + h->begin;
    p->end = f->info->header_size + h->end;
    p->xxh3 = h->xxh3;
    p->box.ndim = h->ndim;
    for (int d = 0; d < h->ndim; d++) {
        p->box.off[d] = h->sliced ? h->offsets[d] : 0;
        p->box.len[d] = h->shape[d];
        if (d >= t->ndim || p->box.off[d] > t->shape[d] - p->box.len[d])
            return tfs_err(TFS_EFORMAT, "%s: tensor '%s' lies outside its "
                           "shape in the index", f->key, h->name);
    }
    if (h->dtype != t->dtype || h->ndim != t->ndim ||
        (sh == NULL && h->sliced))
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s' disagrees with the "
                       "index on its dtype or shape", f->key, h->name);
    t->n_pieces++;
    r->n_pieces++;
    return 0;
}

/* Give each tensor the list of its pieces. */
static int rd_link_pieces(struct tfs_ckpt_reader *r)
{
    for (size_t i = 0; i < r->n_tensors; i++) {
        if (r->tensors[i].n_pieces == 0)
            return tfs_err(TFS_EFORMAT, "index names tensor '%s', which no "
                           "shard holds", r->tensors[i].name);
        r->tensors[i].pieces = tfs_calloc(r->tensors[i].n_pieces,
                                          sizeof(size_t));
        if (r->tensors[i].pieces == NULL)
            return -ENOMEM;
        r->tensors[i].n_pieces = 0;
    }
    for (size_t i = 0; i < r->n_pieces; i++) {
        struct rd_tensor *t = &r->tensors[r->pieces[i].tensor];

        t->pieces[t->n_pieces++] = i;
    }
    return 0;
}

bool tfs_ckpt_rd_box_eq(const struct tfs_ckpt_box *a,
                        const struct tfs_ckpt_box *b)
{
    for (int d = 0; d < a->ndim; d++) {
        if (a->off[d] != b->off[d] || a->len[d] != b->len[d])
            return false;
    }
    return a->ndim == b->ndim;
}

/* Whether piece k of t repeats an earlier one (a replicated save). */
static bool rd_is_dup(const struct tfs_ckpt_reader *r,
                      const struct rd_tensor *t, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        if (tfs_ckpt_rd_box_eq(&r->pieces[t->pieces[j]].box,
                      &r->pieces[t->pieces[k]].box))
            return true;
    }
    return false;
}

/* The pieces of every tensor must cover it, without partial overlaps. */
static int rd_check_cover(const struct tfs_ckpt_reader *r)
{
    for (size_t i = 0; i < r->n_tensors; i++) {
        const struct rd_tensor *t = &r->tensors[i];
        struct tfs_ckpt_box full = {.ndim = t->ndim};
        uint64_t covered = 0;

        memcpy(full.len, t->shape, sizeof(full.len));
        for (size_t k = 0; k < t->n_pieces; k++) {
            const struct tfs_ckpt_box *a = &r->pieces[t->pieces[k]].box;
            struct tfs_ckpt_box x;

            if (rd_is_dup(r, t, k))
                continue;
            for (size_t j = 0; j < k; j++) {
                if (tfs_ckpt_box_intersect(a, &r->pieces[t->pieces[j]].box,
                                           &x) && !rd_is_dup(r, t, j))
                    return tfs_err(TFS_EFORMAT, "tensor '%s': saved slices "
                                   "overlap", t->name);
            }
            covered += tfs_ckpt_box_volume(a);
        }
        if (covered != tfs_ckpt_box_volume(&full))
            return tfs_err(TFS_EFORMAT, "tensor '%s': saved slices cover %"
                           PRIu64 " of %" PRIu64 " elements", t->name,
                           covered, tfs_ckpt_box_volume(&full));
    }
    return 0;
}

static int rd_table(struct tfs_ckpt_reader *r)
{
    size_t total = 0;
    int rc = rd_tensors(r);

    for (size_t i = 0; i < r->n_files; i++)
        total += r->files[i].hdr.n;
    if (rc == 0) {
        r->pieces = tfs_calloc(total + 1, sizeof(*r->pieces));
        if (r->pieces == NULL)
            rc = -ENOMEM;
    }
    for (size_t i = 0; i < r->n_files && rc == 0; i++) {
        for (size_t k = 0; k < r->files[i].hdr.n && rc == 0; k++)
            rc = rd_add_piece(r, i, &r->files[i].hdr.v[k]);
    }
    if (rc == 0)
        rc = rd_link_pieces(r);
    if (rc == 0)
        rc = rd_check_cover(r);
    for (size_t i = 0; i < r->n_files; i++)
        tfs_ckpt_st_cleanup(&r->files[i].hdr);
    return rc;
}

/* ---- opening ---- */

/* Parse text (len bytes, owned from here on) as step's index. */
static int rd_parse_index(struct tfs_ckpt_reader *r, char *text, size_t len,
                          const char *what)
{
    int rc = tfs_ckpt_index_parse(text, len, what, &r->ix);

    if (rc == 0 && r->ix.step != r->step)
        rc = tfs_err(TFS_EFORMAT, "%s: names step %" PRIu64 ", not %"
                     PRIu64, what, r->ix.step, r->step);
    if (rc == 0) {
        r->index_text = text;
        r->index_len = len;
    } else {
        tfs_free(text);
    }
    return rc;
}

static int rd_read_index(struct tfs_ckpt_reader *r)
{
    struct tfs_buf key;
    char *text = NULL;
    size_t len = 0;
    int rc;

    tfs_buf_init(&key, 0);
    rc = tfs_ckpt_key(&key, r->step, TFS_CKPT_INDEX_NAME);
    if (rc == 0)
        rc = tfs_ckpt_get(r->st, tfs_buf_str(&key), TFS_CKPT_JSON_MAX,
                          &text, &len);
    if (rc == -ENOENT || rc == -ENOTDIR)
        rc = tfs_err(-ENOENT, "step %" PRIu64 " is not a committed "
                     "checkpoint", r->step);
    if (rc == 0)
        rc = rd_parse_index(r, text, len, tfs_buf_str(&key));
    else
        tfs_free(text);
    tfs_buf_cleanup(&key);
    return rc;
}

/*
 * The option "index": the text another process read (rank 0, shared by
 * a broadcast) stands for the GET, and is checked exactly as a fetched
 * index: parsed by the same parser, its step the one asked for (when
 * one was), then every shard's header against it.
 */
static int rd_given_index(struct tfs_ckpt_reader *r, int64_t step)
{
    size_t len = strlen(r->index_given);
    char *text = tfs_malloc(len + 1);
    struct tfs_ckpt_index probe;
    int rc;

    if (text == NULL)
        return -ENOMEM;
    memcpy(text, r->index_given, len + 1);
    if (step >= 0) {
        r->step = (uint64_t)step;
        return rd_parse_index(r, text, len, "the given index");
    }
    rc = tfs_ckpt_index_parse(text, len, "the given index", &probe);
    if (rc < 0) {
        tfs_free(text);
        return rc;
    }
    r->step = probe.step;
    tfs_ckpt_index_cleanup(&probe);
    return rd_parse_index(r, text, len, "the given index");
}

/*
 * Find the step and read its index: the index read is the commit check.
 * When `latest` names a step without an index, fall back to the newest
 * committed one.
 */
static int rd_find_index(struct tfs_ckpt_reader *r, int64_t step)
{
    bool checked = true;
    int rc;

    if (r->index_given != NULL)
        return rd_given_index(r, step);
    if (step >= 0) {
        r->step = (uint64_t)step;
        return rd_read_index(r);
    }
    rc = tfs_ckpt_find_latest(r->st, &r->step, &checked);
    if (rc == 0)
        rc = rd_read_index(r);
    if (rc == -ENOENT && !checked) {
        rc = tfs_ckpt_find_latest(r->st, &r->step, NULL);
        if (rc == 0)
            rc = rd_read_index(r);
    }
    return rc;
}

static void rd_unload(struct tfs_ckpt_reader *r)
{
    for (size_t i = 0; i < r->n_files; i++) {
        tfs_ckpt_st_cleanup(&r->files[i].hdr);
        if (r->files[i].local_fd >= 0)
            close(r->files[i].local_fd);
        tfs_free(r->files[i].key);
        tfs_free(r->files[i].local_path);
    }
    tfs_free(r->files);
    for (size_t i = 0; i < r->n_tensors; i++) {
        tfs_free(r->tensors[i].name);
        tfs_free(r->tensors[i].pieces);
    }
    tfs_free(r->tensors);
    tfs_free(r->names);
    tfs_free(r->pieces);
    tfs_ckpt_index_cleanup(&r->ix);
    tfs_free(r->index_text);
    r->index_text = NULL;
    r->index_len = 0;
    r->files = NULL;
    r->tensors = NULL;
    r->names = NULL;
    r->pieces = NULL;
    r->n_files = r->n_tensors = r->n_pieces = 0;
}

int tfs_ckpt_reader_open(struct tfs_ckpt_reader *r, const char *uri,
                         int64_t step)
{
    int rc = rd_settable(r);

    if (rc < 0)
        return rc;
    rc = tfs_ckpt_store_open(uri, r->options, false, &r->st);
    if (rc == 0)
        rc = tfs_pool_create(&r->pool, r->threads);
    if (rc == 0)
        rc = rd_find_index(r, step);
    if (rc == 0)
        rc = rd_files(r);
    if (rc == 0)
        rc = rd_table(r);
    if (rc < 0) {
        tfs_pool_destroy(r->pool);
        r->pool = NULL;
        rd_unload(r);
        tfs_store_close(r->st);
        r->st = NULL;
        return rc;
    }
    r->opened = true;
    return 0;
}

/* ---- facts ---- */

int tfs_ckpt_reader_index(struct tfs_ckpt_reader *r, const char **json,
                          size_t *len)
{
    if (!r->opened)
        return tfs_err(-EINVAL, "checkpoint reader not open");
    *json = r->index_text;
    if (len != NULL)
        *len = r->index_len;
    return 0;
}

void tfs_ckpt_reader_info(struct tfs_ckpt_reader *r, uint64_t *step,
                          unsigned *world_size, uint64_t *total_size,
                          size_t *n_tensors, size_t *n_files)
{
    if (step != NULL)
        *step = r->step;
    if (world_size != NULL)
        *world_size = r->ix.world_size;
    if (total_size != NULL)
        *total_size = r->ix.total_size;
    if (n_tensors != NULL)
        *n_tensors = r->n_tensors;
    if (n_files != NULL)
        *n_files = r->n_files;
}

int tfs_ckpt_reader_tensor(struct tfs_ckpt_reader *r, size_t i,
                           const char **name, const char **dtype, int *ndim,
                           int64_t *shape, uint64_t *nbytes)
{
    const struct rd_tensor *t;

    if (i >= r->n_tensors)
        return -ERANGE;
    t = &r->tensors[i];
    if (name != NULL)
        *name = t->name;
    if (dtype != NULL)
        *dtype = tfs_ckpt_dtype_name(t->dtype);
    if (ndim != NULL)
        *ndim = t->ndim;
    if (shape != NULL)
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (nbytes != NULL)
        *nbytes = t->nbytes;
    return 0;
}

int tfs_ckpt_reader_find(struct tfs_ckpt_reader *r, const char *name,
                         size_t *i)
{
    size_t slot;

    if (!r->opened)
        return -EINVAL;
    slot = *rd_name_slot(r, name);
    if (slot == 0)
        return tfs_err(-ENOENT, "no tensor '%s' in the checkpoint", name);
    *i = slot - 1;
    return 0;
}

int tfs_ckpt_reader_slices(struct tfs_ckpt_reader *r, size_t i,
                           size_t *n_slices)
{
    if (i >= r->n_tensors)
        return -ERANGE;
    *n_slices = r->tensors[i].n_pieces;
    return 0;
}

int tfs_ckpt_reader_slice(struct tfs_ckpt_reader *r, size_t i, size_t j,
                          int64_t *offsets, int64_t *shape)
{
    const struct rd_piece *p;

    if (i >= r->n_tensors || j >= r->tensors[i].n_pieces)
        return -ERANGE;
    p = &r->pieces[r->tensors[i].pieces[j]];
    memcpy(offsets, p->box.off, sizeof(int64_t) * (size_t)p->box.ndim);
    memcpy(shape, p->box.len, sizeof(int64_t) * (size_t)p->box.ndim);
    return 0;
}

int tfs_ckpt_reader_file(struct tfs_ckpt_reader *r, size_t i,
                         const char **name, unsigned *rank, uint64_t *size,
                         bool *local)
{
    if (i >= r->n_files)
        return -ERANGE;
    if (name != NULL)
        *name = r->files[i].info->name;
    if (rank != NULL)
        *rank = r->files[i].info->rank;
    if (size != NULL)
        *size = r->files[i].info->size;
    if (local != NULL)
        *local = r->files[i].local_fd >= 0;
    return 0;
}

int tfs_ckpt_reader_extra(struct tfs_ckpt_reader *r, unsigned rank,
                          const char **json)
{
    if (!r->opened || rank >= r->ix.world_size)
        return -ERANGE;
    *json = r->ix.extra[rank];
    return 0;
}

/* ---- reading ---- */

/* Read piece p whole into dst and check it; the local copy first. */
static int rd_read_piece(struct tfs_ckpt_reader *r, const struct rd_piece *p,
                         void *dst)
{
    const struct rd_file *f = &r->files[p->file];
    const char *tname = r->tensors[p->tensor].name;
    size_t len = (size_t)(p->end - p->begin);
    int rc;

    if (f->local_fd >= 0) {
        rc = rd_local_read(f, dst, len, p->begin);
        if (rc == 0 && XXH3_64bits(dst, len) == p->xxh3)
            return 0;
        tfs_log(TFS_LOG_WARNING, "ckpt: tensor '%s' in staging copy %s is "
                "damaged (%s); reading it from the store", tname,
                f->local_path, rc < 0 ? tfs_errdetail() : "checksum");
    }
    rc = tfs_ckpt_rd_store(r, f, dst, len, p->begin);
    if (rc == 0 && XXH3_64bits(dst, len) != p->xxh3)
        rc = tfs_err(TFS_ECORRUPT, "tensor '%s' in %s: checksum mismatch",
                     tname, f->key);
    return rc;
}

/* Copy the part of piece p inside box into buf (laid out as box). */
static int rd_piece_into(struct tfs_ckpt_reader *r, const struct rd_piece *p,
                         const struct tfs_ckpt_box *box, void *buf,
                         const struct tfs_ckpt_box *part)
{
    unsigned bits = tfs_ckpt_dtype_bits(r->tensors[p->tensor].dtype);
    uint64_t at;
    void *tmp;
    int rc;

    if (tfs_ckpt_rd_box_eq(&p->box, box))
        return rd_read_piece(r, p, buf);
    if (bits % 8 == 0 && tfs_ckpt_rd_box_eq(&p->box, part) &&
        tfs_ckpt_box_run(part, box, &at))
        return rd_read_piece(r, p, (char *)buf + at * (bits / 8));
    if (bits % 8 != 0)
        return tfs_err(-ENOTSUP, "tensor '%s': a sub-byte dtype is read "
                       "only as saved", r->tensors[p->tensor].name);
    tmp = tfs_malloc((size_t)(p->end - p->begin));
    if (tmp == NULL)
        return -ENOMEM;
    rc = rd_read_piece(r, p, tmp);
    if (rc == 0)
        tfs_ckpt_box_copy(buf, box, tmp, &p->box, part, bits / 8);
    tfs_free(tmp);
    return rc;
}

/* Fill buf with box of tensor ti from every piece that intersects it. */
int tfs_ckpt_rd_do(struct tfs_ckpt_reader *r, size_t ti,
                   const struct tfs_ckpt_box *box, void *buf)
{
    const struct rd_tensor *t = &r->tensors[ti];
    uint64_t covered = 0;
    int rc = 0;

    for (size_t k = 0; k < t->n_pieces && rc == 0; k++) {
        const struct rd_piece *p = &r->pieces[t->pieces[k]];
        struct tfs_ckpt_box part;

        if (rd_is_dup(r, t, k) || !tfs_ckpt_box_intersect(&p->box, box,
                                                          &part))
            continue;
        rc = rd_piece_into(r, p, box, buf, &part);
        covered += tfs_ckpt_box_volume(&part);
    }
    if (rc == 0 && covered != tfs_ckpt_box_volume(box) &&
        tfs_ckpt_box_volume(box) != 0)
        rc = tfs_err(TFS_EFORMAT, "tensor '%s': saved slices do not cover "
                     "the box read", t->name);
    return rc;
}

/* Check a box of tensor i and the buffer length it needs. */
int tfs_ckpt_rd_box(struct tfs_ckpt_reader *r, size_t i, int ndim,
                    const int64_t *offsets, const int64_t *sizes, size_t len,
                    struct tfs_ckpt_box *box)
{
    const struct rd_tensor *t;
    uint64_t nelem = 0;
    uint64_t nbytes = 0;

    if (!r->opened || i >= r->n_tensors)
        return tfs_err(-EINVAL, "no tensor %zu", i);
    t = &r->tensors[i];
    box->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        box->off[d] = offsets != NULL ? offsets[d] : 0;
        box->len[d] = offsets != NULL ? sizes[d] : t->shape[d];
        if (box->off[d] < 0 || box->len[d] < 0 ||
            box->off[d] > t->shape[d] - box->len[d])
            return tfs_err(-EINVAL, "tensor '%s': box outside dimension %d "
                           "of %" PRId64, t->name, d, t->shape[d]);
    }
    if (offsets != NULL && ndim != t->ndim)
        return tfs_err(-EINVAL, "tensor '%s' has %d dimensions, not %d",
                       t->name, t->ndim, ndim);
    tfs_ckpt_tensor_size(t->dtype, t->ndim, box->len, &nelem, &nbytes);
    if (nbytes != len)
        return tfs_err(-EINVAL, "tensor '%s': buffer of %zu bytes, the box "
                       "needs %" PRIu64, t->name, len, nbytes);
    return 0;
}

int tfs_ckpt_reader_read(struct tfs_ckpt_reader *r, size_t i, void *buf,
                         size_t len)
{
    return tfs_ckpt_reader_read_box(r, i, 0, NULL, NULL, buf, len);
}

int tfs_ckpt_reader_read_box(struct tfs_ckpt_reader *r, size_t i, int ndim,
                             const int64_t *offsets, const int64_t *sizes,
                             void *buf, size_t len)
{
    struct tfs_ckpt_box box;
    int rc = tfs_ckpt_rd_box(r, i, ndim, offsets, sizes, len, &box);

    if (rc == 0)
        rc = tfs_ckpt_rd_do(r, i, &box, buf);
    return rc;
}

/* ---- the end ---- */

void tfs_ckpt_reader_close(struct tfs_ckpt_reader *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    r->closing = true;
    pthread_mutex_unlock(&r->lock);
    tfs_pool_destroy(r->pool);          /* queued reads see closing */
    for (size_t i = 0; i < r->n_reqs; i++) {
        tfs_free(r->reqs[i]->detail);
        tfs_free(r->reqs[i]);
    }
    tfs_free(r->reqs);
    rd_unload(r);
    tfs_store_close(r->st);
    tfs_free(r->staging_dir);
    tfs_free(r->options);
    tfs_free(r->index_given);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    tfs_free(r);
}
