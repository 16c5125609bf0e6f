/* SPDX-License-Identifier: MIT */
/*
 * The shared cache tier (shared.h has the object format): a source of
 * the cache's fetch engine (cache/peer.h) that reads block objects from
 * a store the cluster runs close by, and a writer thread that puts there
 * the blocks the capacity store gave, from a queue bounded in bytes (a
 * full queue drops the copy, counted: the tier is a cache, the capacity
 * store holds the data).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "cache/peer.h"
#include "common/bytes.h"
#include "common/util.h"
#include "metrics/hist.h"
#include "tier/shared.h"
#include "tierfs/log.h"
#include "tierfs/store.h"

#define SHARED_MAGIC "TFSBLK1"          /* and its NUL: 8 bytes */

struct shared_put {
    struct shared_put *next;
    uint8_t            id[TFS_PEER_ID_LEN];
    size_t             len;             /* of obj */
    unsigned char      obj[];           /* header and bytes */
};

struct tfs_shared {
    struct tfs_store   *st;             /* owned */
    struct tfs_cache   *c;              /* borrowed */
    char               *uri;            /* owned */
    bool                sourced;
    pthread_t           writer;
    bool                writing;
    pthread_mutex_t     lock;
    pthread_cond_t      cond;           /* work queued, or stopping */
    struct shared_put  *head, *tail;    /* lock */
    size_t              queued;         /* bytes; lock */
    bool                stopping;       /* lock */
    atomic_uint_fast64_t hits, hit_bytes, misses, read_errors, corrupt,
                         writes, write_bytes, write_errors, write_dropped;
    struct tfs_hist     latency;
};

void tfs_shared_key(char *out, size_t size, const uint8_t *id)
{
    char hex[2 * TFS_PEER_ID_LEN + 1];

    tfs_hex_lower(hex, id, TFS_PEER_ID_LEN);
    snprintf(out, size, "v1/%.2s/%s", hex, hex);
}

static void shared_header(unsigned char *h, const uint8_t *id, size_t len,
                          const unsigned char *data)
{
    memcpy(h, SHARED_MAGIC, 8);
    memcpy(h + 8, id, TFS_PEER_ID_LEN);
    tfs_put_le64(h + 24, len);
    tfs_put_le64(h + 32, XXH3_64bits(data, len));
    tfs_put_le64(h + 40, XXH3_64bits(h, 40));
}

/* Is obj (n bytes) the whole, right copy of block pb? */
static bool shared_check(const unsigned char *obj, size_t n,
                         const struct tfs_peer_block *pb)
{
    return n == TFS_SHARED_HDR + pb->len &&
           memcmp(obj, SHARED_MAGIC, 8) == 0 &&
           memcmp(obj + 8, pb->id, TFS_PEER_ID_LEN) == 0 &&
           tfs_get_le64(obj + 24) == pb->len &&
           tfs_get_le64(obj + 40) == XXH3_64bits(obj, 40) &&
           tfs_get_le64(obj + 32) ==
               XXH3_64bits(obj + TFS_SHARED_HDR, pb->len);
}

/* ---- reading (the source) ---- */

static int shared_read(void *arg, const struct tfs_peer_block *pb,
                       uint64_t deadline_ns, unsigned char *dst)
{
    struct tfs_shared *s = arg;
    size_t want = TFS_SHARED_HDR + pb->len;
    unsigned char *obj = tfs_malloc(want + 1);
    uint64_t t0 = tfs_now_ns();
    uint64_t own = t0 + TFS_SHARED_TIMEOUT_MS * 1000000ull;
    uint64_t prev;
    char key[64];
    size_t n = 0;
    int rc;

    if (obj == NULL)
        return -ENOMEM;
    tfs_shared_key(key, sizeof(key), pb->id);
    /* its own bound, within the read's: the capacity store has the rest */
    prev = tfs_deadline_set(deadline_ns != 0 && deadline_ns < own
                                ? deadline_ns : own);
    rc = tfs_store_read(s->st, key, obj, want + 1, 0, NULL, &n);
    tfs_deadline_set(prev);
    if (rc == -ENOENT) {
        atomic_fetch_add(&s->misses, 1);
    } else if (rc < 0) {
        atomic_fetch_add(&s->read_errors, 1);
        TFS_WARN("shared tier: %s: " TFS_CAUSE_FMT "; reading the store",
                 key, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    } else if (!shared_check(obj, n, pb)) {
        atomic_fetch_add(&s->corrupt, 1);
        TFS_WARN("shared tier: %s (block %" PRIu64 " of '%s') failed its "
                 "check (%zu bytes); reading the store, writing it again",
                 key, pb->index, pb->key, n);
        rc = TFS_ECORRUPT;
    } else {
        memcpy(dst, obj + TFS_SHARED_HDR, pb->len);
        atomic_fetch_add(&s->hits, 1);
        atomic_fetch_add(&s->hit_bytes, pb->len);
        tfs_hist_add(&s->latency, tfs_now_ns() - t0);
    }
    tfs_free(obj);
    return rc;
}

/* ---- writing ---- */

static void shared_stored(void *arg, const struct tfs_peer_block *pb,
                          const unsigned char *data)
{
    struct tfs_shared *s = arg;
    size_t len = TFS_SHARED_HDR + pb->len;
    struct shared_put *p;

    pthread_mutex_lock(&s->lock);
    if (s->stopping || s->queued + len > TFS_SHARED_QUEUE_MAX) {
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add(&s->write_dropped, 1);
        return;
    }
    s->queued += len;                   /* room taken before the copy */
    pthread_mutex_unlock(&s->lock);
    p = tfs_malloc(sizeof(*p) + len);
    if (p == NULL) {
        pthread_mutex_lock(&s->lock);
        s->queued -= len;
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add(&s->write_dropped, 1);
        return;
    }
    p->next = NULL;
    memcpy(p->id, pb->id, sizeof(p->id));
    p->len = len;
    shared_header(p->obj, pb->id, pb->len, data);
    memcpy(p->obj + TFS_SHARED_HDR, data, pb->len);
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void *shared_writer(void *arg)
{
    struct tfs_shared *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct shared_put *p = s->head;
        char key[64];
        int rc;

        if (p == NULL) {
            if (s->stopping)
                break;
            pthread_cond_wait(&s->cond, &s->lock);
            continue;
        }
        s->head = p->next;
        if (s->head == NULL)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        tfs_shared_key(key, sizeof(key), p->id);
        rc = tfs_store_put(s->st, key, p->obj, p->len, NULL);
        if (rc == 0) {
            atomic_fetch_add(&s->writes, 1);
            atomic_fetch_add(&s->write_bytes, p->len);
        } else {
            atomic_fetch_add(&s->write_errors, 1);
            TFS_WARN("shared tier: writing %s: " TFS_CAUSE_FMT, key,
                     TFS_CAUSE_ARGS(rc, tfs_errdetail()));
        }
        pthread_mutex_lock(&s->lock);
        s->queued -= p->len;
        tfs_free(p);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- open and close ---- */

int tfs_shared_open(struct tfs_shared **out, const char *uri,
                    struct tfs_cache *c)
{
    struct tfs_shared *s = tfs_calloc(1, sizeof(*s));
    struct tfs_cache_source src;
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->c = c;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->uri = tfs_strdup(uri);
    rc = s->uri ? tfs_store_open(&s->st, uri, NULL) : -ENOMEM;
    if (rc < 0 && s->uri != NULL)
        rc = tfs_err(rc, "shared tier '%s': %s", uri, tfs_errdetail());
    if (rc == 0) {
        rc = -pthread_create(&s->writer, NULL, shared_writer, s);
        s->writing = rc == 0;
    }
    src = (struct tfs_cache_source){.read = shared_read,
                                    .stored = shared_stored, .arg = s,
                                    .kind = TFS_SOURCE_SHARED};
    if (rc == 0)
        rc = tfs_cache_add_source(c, &src);
    if (rc < 0) {
        tfs_shared_close(s);
        return rc;
    }
    s->sourced = true;
    *out = s;
    return 0;
}

void tfs_shared_close(struct tfs_shared *s)
{
    if (s == NULL)
        return;
    if (s->sourced)
        tfs_cache_remove_source(s->c, s);
    if (s->writing) {
        pthread_mutex_lock(&s->lock);
        s->stopping = true;             /* the writer empties the queue */
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->writer, NULL);
    }
    while (s->head != NULL) {
        struct shared_put *p = s->head;

        s->head = p->next;
        tfs_free(p);
    }
    tfs_store_close(s->st);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    tfs_free(s->uri);
    tfs_free(s);
}

/* ---- figures ---- */

void tfs_shared_metrics_get(struct tfs_shared *s,
                            struct tfs_shared_metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->uri = s->uri;
    m->hits = atomic_load(&s->hits);
    m->hit_bytes = atomic_load(&s->hit_bytes);
    m->misses = atomic_load(&s->misses);
    m->read_errors = atomic_load(&s->read_errors);
    m->corrupt = atomic_load(&s->corrupt);
    m->writes = atomic_load(&s->writes);
    m->write_bytes = atomic_load(&s->write_bytes);
    m->write_errors = atomic_load(&s->write_errors);
    m->write_dropped = atomic_load(&s->write_dropped);
    m->latency = &s->latency;
    pthread_mutex_lock(&s->lock);
    m->queued_bytes = s->queued;
    pthread_mutex_unlock(&s->lock);
}

#define X(...) TFS_METRIC_DESC(struct tfs_shared_metrics, __VA_ARGS__)
static const struct tfs_metric shared_metric_table[] = {
    TFS_SHARED_METRICS(X)
};
#undef X

const struct tfs_metric_section tfs_metrics_shared = {
    .name = "shared",
    .prom_prefix = "shared_",
    .when = "mounts with a shared cache tier (--shared-tier)",
    .m = shared_metric_table,
    .n = TFS_ARRAY_LEN(shared_metric_table),
    .size = sizeof(struct tfs_shared_metrics),
};
