/* SPDX-License-Identifier: MIT */
/*
 * The reader's background work (reader.c opens and reads).
 *
 * Streaming: submitted reads wait in a list; start() hands them to the
 * reader's threads in file order, so a restore streams the shards front
 * to back; wait() on a read no thread has begun runs it on the caller's
 * thread at once, so the tensor a caller needs is never queued behind
 * the others.  Nothing calls back into the caller: it polls or blocks.
 *
 * Verification: every shard read from the store in large chunks, its
 * header and data checksums and every tensor's checked in one pass.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "ckpt/ckpt_int.h"

#define RD_CHUNK (8u << 20)             /* bytes per read when verifying */

/* Run req on this thread if nobody has begun it; false if taken. */
static bool rd_claim(struct tfs_ckpt_reader *r, struct rd_req *q)
{
    bool mine;

    pthread_mutex_lock(&r->lock);
    mine = q->state == RD_QUEUED && !r->closing;
    if (mine)
        q->state = RD_RUNNING;
    pthread_mutex_unlock(&r->lock);
    return mine;
}

static void rd_run(struct tfs_ckpt_reader *r, struct rd_req *q)
{
    int rc = tfs_ckpt_rd_do(r, q->tensor, &q->box, q->buf);
    char *detail = rc < 0 ? tfs_strdup(tfs_errdetail()) : NULL;

    pthread_mutex_lock(&r->lock);
    q->rc = rc;
    q->detail = detail;
    q->state = RD_DONE;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void rd_req_task(struct tfs_pool_task *task)
{
    struct rd_req *q = tfs_container_of(task, struct rd_req, task);

    if (rd_claim(q->r, q))
        rd_run(q->r, q);
}

/* The first piece a box needs: where a file-order prefetch reaches it. */
static void rd_sort_key(const struct tfs_ckpt_reader *r, struct rd_req *q)
{
    const struct rd_tensor *t = &r->tensors[q->tensor];

    q->sort_file = UINT64_MAX;
    q->sort_off = UINT64_MAX;
    for (size_t k = 0; k < t->n_pieces; k++) {
        const struct rd_piece *p = &r->pieces[t->pieces[k]];
        struct tfs_ckpt_box part;

        if (!tfs_ckpt_box_intersect(&p->box, &q->box, &part))
            continue;
        if (p->file < q->sort_file ||
            (p->file == q->sort_file && p->begin < q->sort_off)) {
            q->sort_file = p->file;
            q->sort_off = p->begin;
        }
    }
}

static int rd_push(struct tfs_ckpt_reader *r, struct rd_req *q)
{
    if (r->n_reqs == r->cap_reqs) {
        size_t cap = r->cap_reqs ? r->cap_reqs * 2 : 64;
        struct rd_req **v = tfs_realloc(r->reqs, cap * sizeof(*v));

        if (v == NULL)
            return -ENOMEM;
        r->reqs = v;
        r->cap_reqs = cap;
    }
    r->reqs[r->n_reqs++] = q;
    q->id = r->n_reqs;
    return 0;
}

int tfs_ckpt_reader_submit(struct tfs_ckpt_reader *r, size_t i, int ndim,
                           const int64_t *offsets, const int64_t *sizes,
                           void *buf, size_t len, uint64_t *id)
{
    struct rd_req *q = tfs_calloc(1, sizeof(*q));
    int rc;

    if (q == NULL)
        return -ENOMEM;
    rc = tfs_ckpt_rd_box(r, i, ndim, offsets, sizes, len, &q->box);
    if (rc < 0) {
        tfs_free(q);
        return rc;
    }
    q->tensor = i;
    q->buf = buf;
    q->len = len;
    q->r = r;
    q->task.fn = rd_req_task;
    rd_sort_key(r, q);
    pthread_mutex_lock(&r->lock);
    rc = r->closing ? -ESHUTDOWN : rd_push(r, q);
    if (rc == 0 && r->started) {
        q->queued = true;
        (void)tfs_pool_submit(r->pool, &q->task);
    }
    pthread_mutex_unlock(&r->lock);
    if (rc < 0) {
        tfs_free(q);
        return rc;
    }
    *id = q->id;
    return 0;
}

static int rd_req_order(const void *a, const void *b)
{
    const struct rd_req *x = *(const struct rd_req *const *)a;
    const struct rd_req *y = *(const struct rd_req *const *)b;

    if (x->sort_file != y->sort_file)
        return x->sort_file < y->sort_file ? -1 : 1;
    if (x->sort_off != y->sort_off)
        return x->sort_off < y->sort_off ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tfs_ckpt_reader_start(struct tfs_ckpt_reader *r)
{
    struct rd_req **order;
    size_t n;

    if (!r->opened)
        return tfs_err(-EINVAL, "start: the reader is not open");
    pthread_mutex_lock(&r->lock);
    n = r->n_reqs;
    order = tfs_malloc((n + 1) * sizeof(*order));
    if (order == NULL) {
        pthread_mutex_unlock(&r->lock);
        return -ENOMEM;
    }
    memcpy(order, r->reqs, n * sizeof(*order));
    qsort(order, n, sizeof(*order), rd_req_order);
    for (size_t i = 0; i < n; i++) {
        if (!order[i]->queued && order[i]->state == RD_QUEUED) {
            order[i]->queued = true;
            (void)tfs_pool_submit(r->pool, &order[i]->task);
        }
    }
    r->started = true;
    pthread_mutex_unlock(&r->lock);
    tfs_free(order);
    return 0;
}

static struct rd_req *rd_req_get(struct tfs_ckpt_reader *r, uint64_t id)
{
    struct rd_req *q = NULL;

    pthread_mutex_lock(&r->lock);
    if (id >= 1 && id <= r->n_reqs)
        q = r->reqs[id - 1];
    pthread_mutex_unlock(&r->lock);
    return q;
}

int tfs_ckpt_reader_wait(struct tfs_ckpt_reader *r, uint64_t id,
                         int64_t timeout_ms)
{
    struct rd_req *q = rd_req_get(r, id);
    struct timespec ts;
    int rc = 0;

    if (q == NULL)
        return tfs_err(-EINVAL, "no read with id %" PRIu64, id);
    if (rd_claim(r, q))
        rd_run(r, q);
    ts = tfs_abstime(CLOCK_REALTIME,
                     timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000u : 0);
    pthread_mutex_lock(&r->lock);
    while (q->state != RD_DONE && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&r->cond, &r->lock);
        else
            rc = pthread_cond_timedwait(&r->cond, &r->lock, &ts);
    }
    if (q->state == RD_DONE) {
        rc = q->rc;
        if (rc < 0)
            tfs_errdetail_set("%s", q->detail ? q->detail : "");
    } else {
        rc = -EINPROGRESS;
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

bool tfs_ckpt_reader_is_ready(struct tfs_ckpt_reader *r, uint64_t id)
{
    struct rd_req *q = rd_req_get(r, id);
    bool done;

    if (q == NULL)
        return false;
    pthread_mutex_lock(&r->lock);
    done = q->state == RD_DONE;
    pthread_mutex_unlock(&r->lock);
    return done;
}

/* ---- verification ---- */

/* Check the pieces of file fi (r->pieces from *k on) against chunk. */
static int rd_verify_pieces(struct tfs_ckpt_reader *r, size_t fi, size_t *k,
                            XXH3_state_t *one, const char *chunk,
                            uint64_t pos, size_t n)
{
    while (*k < r->n_pieces && r->pieces[*k].file == fi) {
        const struct rd_piece *p = &r->pieces[*k];
        uint64_t from = TFS_MAX(p->begin, pos);
        uint64_t to = TFS_MIN(p->end, pos + n);

        if (to > from)
            XXH3_64bits_update(one, chunk + (from - pos), (size_t)(to - from));
        if (p->end > pos + n)
            break;
        if (XXH3_64bits_digest(one) != p->xxh3)
            return tfs_err(TFS_ECORRUPT, "tensor '%s' in %s: checksum "
                           "mismatch", r->tensors[p->tensor].name,
                           r->files[fi].key);
        XXH3_64bits_reset(one);
        (*k)++;
    }
    return 0;
}

/*
 * Read file fi from the store in chunks: its header checksum, its data
 * checksum and every tensor's, in one pass.
 */
static int rd_verify_file(struct tfs_ckpt_reader *r, size_t fi, size_t *k,
                          char *chunk, uint64_t *bytes)
{
    const struct rd_file *f = &r->files[fi];
    const struct tfs_ckpt_file_info *info = f->info;
    XXH3_state_t head;
    XXH3_state_t data;
    XXH3_state_t one;
    uint64_t pos = 0;
    int rc = 0;

    XXH3_64bits_reset(&head);
    XXH3_64bits_reset(&data);
    XXH3_64bits_reset(&one);
    while (rc == 0 && (pos < info->size || pos == 0)) {
        size_t n = (size_t)TFS_MIN(info->size - pos, (uint64_t)RD_CHUNK);
        uint64_t split = TFS_MIN(TFS_MAX(info->header_size, pos), pos + n);

        rc = tfs_ckpt_rd_store(r, f, chunk, n, pos);
        if (rc < 0)
            break;
        *bytes += n;
        XXH3_64bits_update(&head, chunk, (size_t)(split - pos));
        XXH3_64bits_update(&data, chunk + (split - pos),
                           (size_t)(pos + n - split));
        rc = rd_verify_pieces(r, fi, k, &one, chunk, pos, n);
        pos += n;
        if (n == 0)
            break;
    }
    if (rc == 0 && XXH3_64bits_digest(&head) != info->header_xxh3)
        rc = tfs_err(TFS_ECORRUPT, "%s: header checksum mismatch", f->key);
    if (rc == 0 && XXH3_64bits_digest(&data) != info->data_xxh3)
        rc = tfs_err(TFS_ECORRUPT, "%s: data checksum mismatch", f->key);
    return rc;
}

int tfs_ckpt_reader_verify(struct tfs_ckpt_reader *r, uint64_t *bytes)
{
    uint64_t total = 0;
    size_t k = 0;
    char *chunk;
    int rc = 0;

    if (!r->opened)
        return tfs_err(-EINVAL, "verify: the reader is not open");
    chunk = tfs_malloc(RD_CHUNK);
    if (chunk == NULL)
        return -ENOMEM;
    for (size_t fi = 0; fi < r->n_files && rc == 0; fi++) {
        struct tfs_stat s;

        rc = tfs_store_stat(r->st, r->files[fi].key, &s);
        if (rc < 0) {
            rc = tfs_ckpt_err_in(rc, r->files[fi].key, "stat");
            break;
        }
        if (s.size != r->files[fi].info->size) {
            rc = tfs_err(TFS_EFORMAT, "%s: %" PRIu64 " bytes, the index says "
                         "%" PRIu64, r->files[fi].key, s.size,
                         r->files[fi].info->size);
            break;
        }
        snprintf(r->files[fi].version, sizeof(r->files[fi].version), "%s",
                 s.version);
        rc = rd_verify_file(r, fi, &k, chunk, &total);
    }
    tfs_free(chunk);
    if (rc == 0 && bytes != NULL)
        *bytes = total;
    return rc;
}
