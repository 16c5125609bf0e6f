/* SPDX-License-Identifier: MIT */
/*
 * The shared cache tier (shared.h has the object format): a source of
 * the cache's fetch engine (cache/peer.h) that reads block objects from
 * a store the cluster runs close by, and a writer thread that puts there
 * the blocks the capacity store gave, from a queue bounded in bytes (a
 * full queue drops the copy, counted: the tier is a cache, the capacity
 * store holds the data); and the access log gc reads (shared.h): the ids
 * of the blocks read from the tier, written by the same thread.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
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
    uint8_t            *seen;           /* ids read here since the last
                                           access log, n_seen of them,
                                           room for cap_seen; lock */
    size_t              n_seen;         /* lock */
    size_t              cap_seen;       /* lock */
    uint64_t            seen_since_ns;  /* tfs_now_ns of the first; lock */
    atomic_uint_fast64_t hits, hit_bytes, misses, read_errors, corrupt,
                         writes, write_bytes, write_errors, write_dropped,
                         access_logs, access_log_errors;
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

/* ---- the access log ---- */

/*
 * Note that block id was read from the tier.  Past twice the ids of one
 * log (the writer is behind) the id is left out: the block then looks
 * older to gc than it is, which costs a hit at worst.
 */
static void shared_seen(struct tfs_shared *s, const uint8_t *id)
{
    pthread_mutex_lock(&s->lock);
    if (s->n_seen == s->cap_seen && s->cap_seen < 2 * TFS_SHARED_LOG_IDS) {
        size_t cap = s->cap_seen ? 2 * s->cap_seen : 1024;
        uint8_t *p = tfs_realloc(s->seen, cap * TFS_PEER_ID_LEN);

        if (p != NULL) {
            s->seen = p;
            s->cap_seen = cap;
        }
    }
    if (s->n_seen < s->cap_seen) {
        memcpy(s->seen + s->n_seen * TFS_PEER_ID_LEN, id, TFS_PEER_ID_LEN);
        if (s->n_seen++ == 0)
            s->seen_since_ns = tfs_now_ns();
        if (s->n_seen == 1 || s->n_seen == TFS_SHARED_LOG_IDS)
            pthread_cond_signal(&s->cond);  /* arm the timer, or write */
    }
    pthread_mutex_unlock(&s->lock);
}

static int shared_id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, TFS_PEER_ID_LEN);
}

/* The log's text: the magic line, then each id once, in order. */
static char *shared_log_text(uint8_t *ids, size_t n, size_t *len)
{
    size_t magic = strlen(TFS_SHARED_LOG_MAGIC);
    char *text = tfs_malloc(magic + n * (2 * TFS_PEER_ID_LEN + 1));
    char *p;

    if (text == NULL)
        return NULL;
    qsort(ids, n, TFS_PEER_ID_LEN, shared_id_cmp);
    memcpy(text, TFS_SHARED_LOG_MAGIC, magic);
    p = text + magic;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *id = ids + i * TFS_PEER_ID_LEN;

        if (i > 0 && memcmp(id, id - TFS_PEER_ID_LEN, TFS_PEER_ID_LEN) == 0)
            continue;
        tfs_hex_lower(p, id, TFS_PEER_ID_LEN);
        p[2 * TFS_PEER_ID_LEN] = '\n';
        p += 2 * TFS_PEER_ID_LEN + 1;
    }
    *len = (size_t)(p - text);
    return text;
}

/* access/HOST-PID-UNIXTIME-SEQ: no two writers, no two logs, alike. */
static void shared_log_key(char *key, size_t size)
{
    static atomic_uint seq;
    char host[65] = "";

    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "host");
    for (char *c = host; *c != '\0'; c++) {
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.')
            *c = '_';
    }
    snprintf(key, size, TFS_SHARED_LOG_DIR "%s-%ld-%lld-%u", host,
             (long)getpid(), (long long)(tfs_wall_ns() / 1000000000),
             atomic_fetch_add(&seq, 1));
}

/* Write the ids seen so far as one log; called and returns with lock. */
static void shared_log_write(struct tfs_shared *s)
{
    uint8_t *ids = s->seen;
    size_t n = s->n_seen;
    char key[160];
    char *text;
    size_t len = 0;
    int rc = -ENOMEM;

    s->seen = NULL;
    s->n_seen = 0;
    s->cap_seen = 0;
    pthread_mutex_unlock(&s->lock);
    shared_log_key(key, sizeof(key));
    text = shared_log_text(ids, n, &len);
    if (text != NULL)
        rc = tfs_store_put(s->st, key, text, len, NULL);
    if (rc == 0) {
        atomic_fetch_add(&s->access_logs, 1);
    } else {
        atomic_fetch_add(&s->access_log_errors, 1);
        TFS_WARN("shared tier: writing the access log %s: " TFS_CAUSE_FMT,
                 key, TFS_CAUSE_ARGS(rc, tfs_errdetail()));
    }
    tfs_free(text);
    tfs_free(ids);
    pthread_mutex_lock(&s->lock);
}

/* Is a log due?  With lock. */
static bool shared_log_due(const struct tfs_shared *s)
{
    uint64_t period = TFS_SHARED_LOG_PERIOD_S * 1000000000ull;

    if (s->n_seen == 0)
        return false;
    return (s->stopping && s->head == NULL) ||
           s->n_seen >= TFS_SHARED_LOG_IDS ||
           tfs_now_ns() >= s->seen_since_ns + period;
}

/* Wait for work, or for the next log to fall due.  With lock. */
static void shared_wait(struct tfs_shared *s)
{
    uint64_t due = s->seen_since_ns +
                   TFS_SHARED_LOG_PERIOD_S * 1000000000ull;
    struct timespec ts = {
        .tv_sec = (time_t)(due / 1000000000u),
        .tv_nsec = (long)(due % 1000000000u),
    };

    if (s->n_seen == 0)
        pthread_cond_wait(&s->cond, &s->lock);
    else
        pthread_cond_timedwait(&s->cond, &s->lock, &ts);
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
        shared_seen(s, pb->id);
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

        if (shared_log_due(s)) {
            shared_log_write(s);
            continue;
        }
        if (p == NULL) {
            if (s->stopping)
                break;
            shared_wait(s);
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
    pthread_condattr_t ca;
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->c = c;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* tfs_now_ns */
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    s->uri = tfs_strdup(uri);
    rc = s->uri ? tfs_store_open(&s->st, uri, NULL) : -ENOMEM;
    if (rc < 0 && s->uri != NULL) {
        char why[256];

        snprintf(why, sizeof(why), "%s", tfs_errdetail());  /* not aliased */
        rc = tfs_err(rc, "shared tier '%s': %s", uri, why);
    }
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
    tfs_free(s->seen);
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
    m->access_logs = atomic_load(&s->access_logs);
    m->access_log_errors = atomic_load(&s->access_log_errors);
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
