/* SPDX-License-Identifier: MIT */
/*
 * The packer behind `tierfs pack SRC DST`: a tree of small files becomes
 * WebDataset tar shards, one offset index per shard and manifest.json.
 *
 *   1. plan     (plan.c) list SRC, check names, group samples, cut shards
 *   2. resume   (plan.c) keep the shards a former run finished
 *   3. write    `jobs` threads read the source files (each read pinned
 *               to the listed version) into a window of slots; the
 *               calling thread writes members in order into a temporary
 *               file, hashing as it goes, then puts the shard and then
 *               its index (each put is atomic).  Files above 64 MiB are
 *               streamed by the writer in chunks instead.
 *   4. commit   manifest.json last; stale shards of a former, larger
 *               run are removed after it.
 */
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/json.h"
#include "pack/write_int.h"

#define PW_STREAM_MIN  (64u << 20)      /* larger files: streamed */
#define PW_CHUNK       (8u << 20)       /* stream chunk */
#define PW_INFLIGHT    (256u << 20)     /* bytes read ahead of the writer */
#define PW_OUTBUF      (1u << 20)       /* write buffer */
#define PW_PROGRESS_NS 250000000u

/* ---- the read pipeline (reader threads) ---- */

static void pw_fail(struct pack_job *w, int rc)
{
    pthread_mutex_lock(&w->lock);
    if (w->rc == 0) {
        w->rc = rc;
        snprintf(w->detail, sizeof(w->detail), "%s", tfs_errdetail());
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static bool pw_streamed(const struct pack_item *it)
{
    return it->size > PW_STREAM_MIN;
}

/* The next file to read, once the window has room; false when done. */
static bool pw_claim(struct pack_job *w, size_t *t)
{
    bool ok;

    pthread_mutex_lock(&w->lock);
    while (w->rc == 0 && w->next < w->n_todo &&
           (w->next >= w->written + w->n_slots ||
            (w->inflight > PW_INFLIGHT && w->next > w->written)))
        pthread_cond_wait(&w->cond, &w->lock);
    ok = w->rc == 0 && w->next < w->n_todo;
    if (ok) {
        const struct pack_item *it = &w->items[w->todo[w->next]];
        *t = w->next++;
        w->inflight += pw_streamed(it) ? 0 : it->size;
    }
    pthread_mutex_unlock(&w->lock);
    return ok;
}

static int pw_read_whole(struct pack_job *w, const struct pack_item *it,
                         unsigned char **out)
{
    unsigned char *buf = tfs_malloc(it->size ? it->size : 1);
    size_t n = 0;
    int rc;

    if (buf == NULL)
        return -ENOMEM;
    rc = tfs_store_read(w->src, it->key, buf, it->size, 0, it->version, &n);
    if (rc == 0 && n != it->size)
        rc = tfs_err(TFS_ECHANGED, "'%s' has %zu bytes, listed with %llu",
                     it->key, n, (unsigned long long)it->size);
    if (rc < 0) {
        tfs_free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

static void *pw_reader(void *arg)
{
    struct pack_job *w = arg;
    size_t t;

    while (pw_claim(w, &t)) {
        const struct pack_item *it = &w->items[w->todo[t]];
        struct pack_slot *s = &w->slots[t % w->n_slots];
        unsigned char *buf = NULL;
        int rc = pw_streamed(it) ? 0 : pw_read_whole(w, it, &buf);

        if (rc < 0) {
            pw_fail(w, rc);
            break;
        }
        pthread_mutex_lock(&w->lock);
        s->buf = buf;
        s->todo = t;
        s->ready = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
    }
    return NULL;
}

/* Writer side: wait for todo entry t; NULL slot on error. */
static struct pack_slot *pw_take(struct pack_job *w, size_t t)
{
    struct pack_slot *s = &w->slots[t % w->n_slots];

    pthread_mutex_lock(&w->lock);
    while (w->rc == 0 && !(s->ready && s->todo == t))
        pthread_cond_wait(&w->cond, &w->lock);
    if (w->rc != 0)
        s = NULL;
    pthread_mutex_unlock(&w->lock);
    return s;
}

static void pw_release(struct pack_job *w, struct pack_slot *s, uint64_t size)
{
    pthread_mutex_lock(&w->lock);
    tfs_free(s->buf);
    s->buf = NULL;
    s->ready = false;
    w->inflight -= size;
    w->written++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* ---- writing one shard ---- */

struct pw_out {
    int            fd;
    unsigned char *buf;                 /* PW_OUTBUF bytes, owned */
    size_t         len;
    uint64_t       off;                 /* bytes written so far */
    XXH3_state_t   hash;                /* of the whole shard */
};

static int pw_flush(struct pw_out *o)
{
    size_t done = 0;

    while (done < o->len) {
        ssize_t n = write(o->fd, o->buf + done, o->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tfs_err(-errno, "writing the temporary shard file");
        done += (size_t)n;
    }
    o->len = 0;
    return 0;
}

static int pw_emit(struct pw_out *o, const void *p, size_t n)
{
    const unsigned char *c = p;

    XXH3_64bits_update(&o->hash, p, n);
    o->off += n;
    while (n > 0) {
        size_t k = TFS_MIN(n, PW_OUTBUF - o->len);
        memcpy(o->buf + o->len, c, k);
        o->len += k;
        c += k;
        n -= k;
        if (o->len == PW_OUTBUF) {
            int rc = pw_flush(o);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int pw_zeros(struct pw_out *o, uint64_t n)
{
    static const unsigned char zero[TFS_TAR_BLOCK];
    int rc = 0;

    while (rc == 0 && n > 0) {
        size_t k = (size_t)TFS_MIN(n, (uint64_t)sizeof(zero));
        rc = pw_emit(o, zero, k);
        n -= k;
    }
    return rc;
}

/* Data of a large file, read in chunks at its listed version. */
static int pw_stream(struct pack_job *w, struct pw_out *o,
                     const struct pack_item *it, XXH3_state_t *h)
{
    unsigned char *buf = tfs_malloc(PW_CHUNK);
    uint64_t off = 0;
    int rc = buf ? 0 : -ENOMEM;

    while (rc == 0 && off < it->size) {
        size_t want = (size_t)TFS_MIN((uint64_t)PW_CHUNK, it->size - off);
        size_t n = 0;
        rc = tfs_store_read(w->src, it->key, buf, want, off, it->version,
                            &n);
        if (rc == 0 && n != want)
            rc = tfs_err(TFS_ECHANGED, "'%s' ended at %llu, listed with "
                         "%llu bytes", it->key,
                         (unsigned long long)(off + n),
                         (unsigned long long)it->size);
        if (rc == 0)
            rc = pw_emit(o, buf, n);
        XXH3_64bits_update(h, buf, n);
        off += n;
    }
    tfs_free(buf);
    return rc;
}

/* One member: header, data, padding; its index record. */
static int pw_member(struct pack_job *w, struct pw_out *o, size_t t,
                     struct pack_index_builder *b)
{
    const struct pack_item *it = &w->items[w->todo[t]];
    unsigned char hdr[TFS_TAR_HDR_MAX];
    struct pack_slot *s = pw_take(w, t);
    struct pack_member m = {.hdr_off = o->off, .size = it->size,
                            .name = it->name, .name_len = it->name_len,
                            .key_len = it->key_len};
    XXH3_state_t h;
    size_t len;
    int rc;

    if (s == NULL)
        return -ECANCELED;              /* a reader failed: see w->rc */
    rc = tfs_tar_encode(it->name, it->size, it->mtime_s, hdr, sizeof(hdr),
                        &len);
    if (rc == 0)
        rc = pw_emit(o, hdr, len);
    m.data_off = o->off;
    XXH3_64bits_reset(&h);
    if (rc == 0 && pw_streamed(it)) {
        rc = pw_stream(w, o, it, &h);
    } else if (rc == 0) {
        XXH3_64bits_update(&h, s->buf, it->size);
        rc = pw_emit(o, s->buf, it->size);
    }
    m.xxh3 = XXH3_64bits_digest(&h);
    if (rc == 0)
        rc = pw_zeros(o, pack_round512(it->size) - it->size);
    if (rc == 0)
        rc = tfs_pack_index_add(b, it->sample_start, &m);
    pw_release(w, s, pw_streamed(it) ? 0 : it->size);
    return rc;
}

static int pw_tmpfile(int *out)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    int fd;

    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(path, sizeof(path), "%s/tierfs-pack-XXXXXX", dir);
        fd = mkstemp(path);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0)
        return tfs_err(-errno, "cannot create a temporary file in %s", dir);
    *out = fd;
    return 0;
}

static void pw_progress(struct pack_job *w, bool force)
{
    uint64_t now = tfs_now_ns();

    if (w->o->progress == NULL ||
        (!force && now - w->last_progress < PW_PROGRESS_NS))
        return;
    w->last_progress = now;
    w->pr.elapsed_ns = now - w->t0;
    w->o->progress(w->o->progress_arg, &w->pr);
}

/* Put the finished temporary file and the index; fill the entry. */
static int pw_publish(struct pack_job *w, size_t i, struct pw_out *o,
                      struct pack_index_builder *b)
{
    struct pack_plan_shard *s = &w->shards[i];
    struct tfs_source src = {.buf = NULL, .fd = o->fd, .off = 0,
                             .len = o->off};
    uint64_t tar_xxh3 = XXH3_64bits_digest(&o->hash);
    unsigned char *idx = NULL;
    struct tfs_buf key;
    size_t idx_len = 0;
    int rc;

    if (o->off != s->tar_size)
        return tfs_err(-EIO, "shard %zu: wrote %llu bytes, planned %llu",
                       i, (unsigned long long)o->off,
                       (unsigned long long)s->tar_size);
    tfs_buf_init(&key, 0);
    rc = tfs_pack_index_finish(b, s->tar_size, tar_xxh3, s->plan_xxh3,
                               &idx, &idx_len);
    if (rc == 0)
        rc = tfs_pack_shard_key(w, i, "tar", &key);
    if (rc == 0)
        rc = tfs_store_put_source(w->dst, tfs_buf_str(&key), &src, NULL);
    if (rc == 0)
        rc = tfs_pack_shard_key(w, i, "idx", &key);
    if (rc == 0)
        rc = tfs_store_put(w->dst, tfs_buf_str(&key), idx, idx_len, NULL);
    if (rc == 0)
        tfs_pack_shard_done(s, i, idx, idx_len, tar_xxh3);
    tfs_free(idx);
    tfs_buf_cleanup(&key);
    return rc;
}

static int pw_write_shard(struct pack_job *w, size_t i, size_t *t)
{
    struct pack_plan_shard *s = &w->shards[i];
    struct pack_index_builder b;
    struct pw_out o = {.fd = -1};
    int rc = pw_tmpfile(&o.fd);

    tfs_pack_index_builder_init(&b);
    XXH3_64bits_reset(&o.hash);
    o.buf = rc == 0 ? tfs_malloc(PW_OUTBUF) : NULL;
    if (rc == 0 && o.buf == NULL)
        rc = -ENOMEM;
    for (size_t k = 0; rc == 0 && k < s->n_items; k++) {
        const struct pack_item *it = &w->items[s->first + k];
        rc = pw_member(w, &o, (*t)++, &b);
        w->pr.samples += it->sample_start;
        w->pr.bytes += it->size;
        pw_progress(w, false);
    }
    if (rc == 0)
        rc = pw_zeros(&o, tfs_tar_end_size(o.off));
    if (rc == 0)
        rc = pw_flush(&o);
    if (rc == 0)
        rc = pw_publish(w, i, &o, &b);
    tfs_pack_index_builder_cleanup(&b);
    tfs_free(o.buf);
    if (o.fd >= 0)
        close(o.fd);
    return rc;
}

/* ---- the whole job ---- */

static int pw_start_readers(struct pack_job *w, pthread_t *th,
                            unsigned *started)
{
    unsigned jobs = TFS_MAX(1u, TFS_MIN(w->o->jobs, 256u));
    size_t k = 0;

    for (size_t i = 0; i < w->n_shards; i++)
        k += w->shards[i].keep ? 0 : w->shards[i].n_items;
    w->todo = tfs_malloc((k ? k : 1) * sizeof(*w->todo));
    w->n_slots = (size_t)jobs * 4;
    w->slots = tfs_calloc(w->n_slots, sizeof(*w->slots));
    if (w->todo == NULL || w->slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < w->n_shards; i++)
        for (size_t j = 0; !w->shards[i].keep && j < w->shards[i].n_items;
             j++)
            w->todo[w->n_todo++] = w->shards[i].first + j;
    for (*started = 0; *started < jobs && *started < w->n_todo; ++*started)
        if (pthread_create(&th[*started], NULL, pw_reader, w) != 0)
            break;
    return *started == 0 && w->n_todo > 0 ? -EAGAIN : 0;
}

/*
 * Stop and join the readers.  Returns the first error of the job (the
 * writer's rc, or a reader's when the writer only saw -ECANCELED), with
 * its detail restored on this thread.
 */
static int pw_stop_readers(struct pack_job *w, pthread_t *th, unsigned n,
                           int rc)
{
    if (rc < 0 && rc != -ECANCELED)
        pw_fail(w, rc);
    pthread_mutex_lock(&w->lock);
    rc = w->rc;
    if (w->rc == 0)
        w->rc = -ECANCELED;             /* wakes readers in pw_claim */
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; w->slots != NULL && i < w->n_slots; i++)
        tfs_free(w->slots[i].buf);
    if (rc < 0)
        tfs_errdetail_set("%s", w->detail);
    return rc;
}

static int pw_write_all(struct pack_job *w)
{
    pthread_t th[256];
    unsigned started = 0;
    size_t t = 0;
    int rc = pw_start_readers(w, th, &started);

    for (size_t i = 0; rc == 0 && i < w->n_shards; i++) {
        if (w->shards[i].keep)
            continue;
        rc = pw_write_shard(w, i, &t);
        w->pr.shards += rc == 0;
    }
    return pw_stop_readers(w, th, started, rc);
}

static int pw_strcmp_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The fields and how many members each has, as a JSON object. */
static int pw_fields_json(const struct pack_job *w, struct tfs_buf *b)
{
    const char **f = tfs_malloc((w->n_items + 1) * sizeof(*f));
    int rc = tfs_buf_puts(b, "{");
    bool first = true;
    size_t run = 0;

    if (f == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < w->n_items; i++)
        f[i] = w->items[i].name + w->items[i].key_len + 1;
    qsort(f, w->n_items, sizeof(*f), pw_strcmp_p);
    for (size_t i = 0; rc == 0 && i < w->n_items; i++) {
        run++;
        if (i + 1 < w->n_items && strcmp(f[i], f[i + 1]) == 0)
            continue;
        rc = tfs_buf_puts(b, first ? "" : ", ");
        if (rc == 0)
            rc = tfs_json_put_cstr(b, f[i]);
        if (rc == 0)
            rc = tfs_buf_printf(b, ": %zu", run);
        first = false;
        run = 0;
    }
    tfs_free(f);
    return rc == 0 ? tfs_buf_puts(b, "}") : rc;
}

static int pw_prune_page(void *arg, const struct tfs_list_page *pg)
{
    struct pack_job *w = arg;
    size_t plen = w->dst_prefix.len;

    for (size_t i = 0; i < pg->n_entries; i++) {
        const char *name = pg->entries[i].key + plen;
        char ext[4] = "";
        unsigned long n = 0;
        int used = 0;

        if (sscanf(name, "shard-%6lu.%3[a-z]%n", &n, ext, &used) != 2 ||
            name[used] != '\0' || strlen(name) != 16 || n < w->n_shards ||
            (strcmp(ext, "tar") != 0 && strcmp(ext, "idx") != 0))
            continue;
        (void)tfs_store_remove(w->dst, pg->entries[i].key);
    }
    return 0;
}

/* manifest.json, last; then shards of a former, larger run go. */
static int pw_commit(struct pack_job *w)
{
    struct pack_manifest m = {.n_shards = w->n_shards,
                              .shard_size = w->o->shard_size,
                              .shuffled = w->o->shuffle,
                              .shuffle_seed = w->o->shuffle_seed};
    struct tfs_buf fields;
    struct tfs_buf key;
    char *json = NULL;
    size_t len = 0;
    int rc;

    tfs_buf_init(&fields, 0);
    tfs_buf_init(&key, 0);
    m.shards = tfs_calloc(w->n_shards, sizeof(*m.shards));
    rc = m.shards ? pw_fields_json(w, &fields) : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < w->n_shards; i++) {
        m.shards[i] = w->shards[i].info;
        m.n_samples += m.shards[i].n_samples;
        m.n_members += m.shards[i].n_members;
        m.tar_bytes += m.shards[i].tar_size;
    }
    if (rc == 0)
        rc = tfs_pack_manifest_encode(&m, tfs_buf_str(&fields), &json, &len);
    if (rc == 0)
        rc = tfs_buf_printf(&key, "%s%s", tfs_buf_str(&w->dst_prefix),
                            TFS_PACK_MANIFEST);
    if (rc == 0)
        rc = tfs_store_put(w->dst, tfs_buf_str(&key), json, len, NULL);
    if (rc == 0)
        (void)tfs_store_list_all(w->dst, tfs_buf_str(&w->dst_prefix), "/",
                                 pw_prune_page, w);
    tfs_errdetail_clear();
    tfs_free(json);
    tfs_free(m.shards);
    tfs_buf_cleanup(&fields);
    tfs_buf_cleanup(&key);
    return rc;
}

/* The destination may not lie inside the source. */
static int pw_check_places(struct pack_job *w)
{
    const char *dp = tfs_buf_str(&w->dst_prefix);

    if (strcmp(tfs_store_identity(w->src), tfs_store_identity(w->dst)) == 0
        && strncmp(dp, w->src_prefix, strlen(w->src_prefix)) == 0)
        return tfs_err(-EINVAL, "the destination '%s' lies inside the "
                       "source '%s'", dp, w->src_prefix);
    return 0;
}

static void pw_cleanup(struct pack_job *w)
{
    for (size_t i = 0; i < w->n_items; i++)
        tfs_free(w->items[i].key);
    tfs_free(w->items);
    tfs_free(w->shards);
    tfs_free(w->todo);
    tfs_free(w->slots);
    tfs_buf_cleanup(&w->dst_prefix);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

int tfs_pack_write(struct tfs_store *src, const char *src_prefix,
                   struct tfs_store *dst, const char *dst_prefix,
                   const struct tfs_pack_write_opts *o)
{
    struct pack_job w = {.src = src, .dst = dst, .src_prefix = src_prefix,
                   .o = o};
    int rc = 0;

    assert(src_prefix[0] == '\0' ||
           src_prefix[strlen(src_prefix) - 1] == '/');
    if (o->shard_size < TFS_TAR_RECORD)
        return tfs_err(-EINVAL, "shard size %llu is below %u bytes",
                       (unsigned long long)o->shard_size,
                       TFS_TAR_RECORD);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    tfs_buf_init(&w.dst_prefix, 0);
    w.t0 = tfs_now_ns();
    w.last_progress = w.t0;
    rc = tfs_buf_printf(&w.dst_prefix, "%s%s", dst_prefix,
                        dst_prefix[0] && dst_prefix[strlen(dst_prefix) - 1]
                        != '/' ? "/" : "");
    if (rc == 0)
        rc = pw_check_places(&w);
    if (rc == 0)
        rc = tfs_pack_plan(&w);
    if (rc == 0)
        rc = tfs_pack_plan_resume(&w);
    if (rc == 0)
        rc = pw_write_all(&w);
    if (rc == 0)
        rc = pw_commit(&w);
    w.pr.done = rc == 0;
    if (rc == 0)
        pw_progress(&w, true);
    pw_cleanup(&w);
    return rc;
}
