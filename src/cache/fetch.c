/* SPDX-License-Identifier: MIT */
/*
 * The fetch engine's backend reader pool: max_inflight worker threads
 * take block reads from two FIFO queues, demand before prefetch, and
 * prefetches never occupy more than three quarters of the workers, so a
 * reader's miss always finds a worker soon (Redis bio.c: one pool per
 * class of work, FIFO within a class).
 *
 * Hedging: a reader whose block's store read has run longer than the
 * observed p95 latency of block reads asks for a second read of the same
 * block (tfs_fetch_hedge); whichever finishes first publishes the block.
 * A read still waiting in the prefetch queue is not hedged but moved to
 * the demand queue: time spent queued is not the store's tail latency,
 * and a second request then would only add load to a busy store.  For
 * the same reason there is no hedge while more than half the workers
 * are reading: a slow read then says the link or the store is saturated
 * (by us), not that one request met a slow server, and a second request
 * would make every read slower.  Each
 * read lands in its own buffer; the winner's becomes the block's data and
 * the loser frees its own, so a late read never writes into bytes that
 * readers are already using.
 *
 * Spans: a worker that takes a prefetch job also takes the prefetch
 * jobs queued right behind it for the next blocks of the same object
 * (at most fetch_span bytes in all), and reads them with one ranged GET
 * that lands in their buffers in turn (a scattered read: stores with
 * TFS_SCAP_SCATTER, and no group or shared tier to ask first).  A GET
 * costs the server a request's fixed work whatever its size: RGW spends
 * 0.81 CPU s a GiB on 4 MiB GETs and 0.66 on 128 MiB ones here
 * (docs/performance-cold.md), and a cloud store bills by the request.
 * The sequential readahead queues the blocks of a span together
 * (tfs_fetch_batch_*).  The span's blocks are published together once
 * the GET ends; its failure fails each of them, as separate reads that
 * all met the same store would.  Demand reads and hedges are never
 * spanned.
 *
 * Deadlines: a job carries the absolute deadline of the request that
 * queued it (the earlier of the caller's request deadline and the retry
 * layer's overall deadline counted from the submit: tfs_retry_deadline_ms),
 * and runs its store read under it (tfs_deadline_set).  Time queued
 * behind other reads, both checked reads and a hedge (which takes the
 * deadline of the read it doubles) all count against that one deadline,
 * so a read of a hung store fails at it however many were asked at once.
 *
 * A block whose read timed out (after trying: not one that only waited
 * out its deadline in the queue) is not asked of the store again for
 * FETCH_MEMO_NS: a request for it then fails at once with the same
 * -ETIMEDOUT.  The kernel answers a failed readahead by reading the
 * first page again, a second FUSE request for the same block; without
 * this memo it waited a whole deadline more (F2: 20 s for one `cat`
 * with deadline_ms=10000).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_int.h"
#include "common/csum.h"
#include "tierfs/retry.h"
#include "tierfs/log.h"

#define FETCH_LAT_RING 512
#define FETCH_MEMO_N   64               /* blocks whose read timed out */
#define TFS_FETCH_SPAN_MAX 64           /* blocks one request may carry */
#define FETCH_MEMO_NS  1000000000ull    /* how long one is remembered */

struct fetch_job {
    struct fetch_job *next;
    struct tfs_block *b;                /* pinned by the job */
    char             *key;              /* owned */
    char             *version;          /* owned */
    uint64_t          obj_size;
    uint64_t          index;
    uint64_t          off;
    size_t            len;
    unsigned char    *dst;              /* where this read lands; owned
                                           until handed to the block */
    uint8_t          *sums;             /* dst's chunk sums, once whole;
                                           owned until handed over too */
    uint64_t          digest;           /* of sums, when they are set */
    uint64_t          deadline;         /* absolute ns, 0 = none: from
                                           the request that queued it */
    struct fetch_job *run_next;         /* running list; fetch lock */
    bool              hedge;
    bool              fill;             /* warmup writes to disk itself */
    bool              local;            /* ask no peer (the shared tier
                                           still): for a peer, or a
                                           hedge */
    int               src;              /* tfs_block_src of its bytes */
    bool              tried;            /* taken up before its deadline */
    struct fetch_job *span_next;        /* the next block read by the
                                           same request (fetch_span) */
    struct fetch_sent *sent;            /* an opener waiting for the
                                           request to go out; f->lock */
};

/* An opener's wait for its small object's request (tfs_file_sent_*). */
struct fetch_sent {
    pthread_cond_t cond;                /* on CLOCK_MONOTONIC */
    bool           done;                /* f->lock */
};

/* A block whose store read timed out, and when. */
struct fetch_memo {
    uint8_t  id[TFS_BLOCK_ID_LEN];
    uint64_t at_ns;                     /* 0: unused */
};

struct fetch_queue {
    struct fetch_job *head;
    struct fetch_job *tail;
};

struct tfs_fetch {
    pthread_t         *threads;
    unsigned           n_threads;
    pthread_mutex_t    lock;
    pthread_cond_t     cond;
    struct fetch_queue demand;          /* protected by lock */
    struct fetch_queue prefetch;        /* protected by lock */
    unsigned           prefetch_active; /* protected by lock */
    unsigned           active;          /* reads running; lock */
    struct fetch_job  *running;         /* jobs being read; lock */
    struct fetch_memo  memo[FETCH_MEMO_N]; /* protected by lock */
    unsigned           memo_next;       /* protected by lock */
    unsigned           prefetch_max;
    unsigned           span_max;        /* blocks a request may carry */
    bool               stopping;        /* protected by lock */
    /* recent block-read latencies, for the hedging threshold */
    pthread_mutex_t    lat_lock;
    uint64_t           lat[FETCH_LAT_RING]; /* protected by lat_lock */
    unsigned           lat_n;           /* protected by lat_lock */
    atomic_uint_fast64_t p95_ns;
};

/* ---- latency tracking ---- */

static int fetch_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void fetch_note_latency(struct tfs_fetch *f, uint64_t ns)
{
    uint64_t sorted[FETCH_LAT_RING];
    unsigned n;

    pthread_mutex_lock(&f->lat_lock);
    f->lat[f->lat_n % FETCH_LAT_RING] = ns;
    n = ++f->lat_n;
    if (n < 32 || n % 32 != 0) {
        pthread_mutex_unlock(&f->lat_lock);
        return;
    }
    n = TFS_MIN(n, FETCH_LAT_RING);
    memcpy(sorted, f->lat, n * sizeof(uint64_t));
    pthread_mutex_unlock(&f->lat_lock);
    qsort(sorted, n, sizeof(uint64_t), fetch_u64_cmp);
    atomic_store(&f->p95_ns, sorted[(n * 95) / 100]);
}

uint64_t tfs_fetch_hedge_after_ns(struct tfs_cache *c)
{
    uint64_t p95;

    if (!c->cfg.hedge || c->fetch == NULL)
        return 0;
    p95 = atomic_load(&c->fetch->p95_ns);
    if (p95 == 0)
        return 0;                       /* not enough samples yet */
    return TFS_MAX(p95, c->cfg.hedge_min_ns);
}

/* ---- jobs ---- */

static void fetch_job_free(struct tfs_cache *c, struct fetch_job *j)
{
    tfs_blockbuf_put(c, j->dst, j->len);
    tfs_free(j->sums);
    tfs_free(j->key);
    tfs_free(j->version);
    tfs_free(j);
}

static struct fetch_job *fetch_job_new(struct tfs_cache *c,
                                       const struct tfs_block_ref *r,
                                       struct tfs_block *b)
{
    struct fetch_job *j = tfs_calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    j->key = tfs_strdup(r->key);
    j->version = tfs_strdup(r->version);
    j->len = r->len;
    if (j->key == NULL || j->version == NULL) {
        fetch_job_free(c, j);
        return NULL;
    }
    j->b = b;
    j->src = TFS_SRC_STORE;
    j->obj_size = r->obj_size;
    j->index = r->index;
    j->off = r->off;
    j->len = r->len;
    return j;
}

/*
 * The deadline of a read of len bytes asked for now: the earlier of the
 * calling thread's request deadline and the retry layer's overall one.
 */
static uint64_t fetch_deadline(struct tfs_cache *c, size_t len)
{
    uint64_t caller = tfs_deadline_get();
    uint64_t ms = tfs_retry_deadline_ms(c->st, len);
    uint64_t own = ms == 0 ? 0 : tfs_now_ns() + ms * 1000000ull;

    if (caller == 0)
        return own;
    if (own == 0)
        return caller;
    return TFS_MIN(caller, own);
}

static void fetch_enqueue(struct fetch_queue *q, struct fetch_job *j)
{
    j->next = NULL;
    if (q->tail != NULL)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static struct fetch_job *fetch_dequeue(struct fetch_queue *q)
{
    struct fetch_job *j = q->head;

    if (j != NULL) {
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
    }
    return j;
}

/* ---- timed-out blocks ---- */

/* Remember that the read of block id timed out now. */
static void fetch_memo_note(struct tfs_fetch *f, const uint8_t *id)
{
    struct fetch_memo *m = NULL;

    pthread_mutex_lock(&f->lock);
    for (unsigned i = 0; i < FETCH_MEMO_N && m == NULL; i++) {
        if (memcmp(f->memo[i].id, id, TFS_BLOCK_ID_LEN) == 0)
            m = &f->memo[i];
    }
    if (m == NULL)
        m = &f->memo[f->memo_next++ % FETCH_MEMO_N];
    memcpy(m->id, id, TFS_BLOCK_ID_LEN);
    m->at_ns = tfs_now_ns();
    pthread_mutex_unlock(&f->lock);
}

/* Did the read of block id time out less than FETCH_MEMO_NS ago? */
static bool fetch_memo_recent(struct tfs_fetch *f, const uint8_t *id,
                              uint64_t *ago_ns)
{
    uint64_t now = tfs_now_ns();
    bool hit = false;

    pthread_mutex_lock(&f->lock);
    for (unsigned i = 0; i < FETCH_MEMO_N && !hit; i++) {
        const struct fetch_memo *m = &f->memo[i];

        if (m->at_ns != 0 && now - m->at_ns < FETCH_MEMO_NS &&
            memcmp(m->id, id, TFS_BLOCK_ID_LEN) == 0) {
            hit = true;
            *ago_ns = now - m->at_ns;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return hit;
}

/*
 * A read finished with rc.  The first success hands its buffer to the
 * block and publishes it; a failure publishes only when no other read of
 * the block is still running and none has won.  A buffer has one owner
 * at a time: its read until it wins, then the block.  The block stays
 * LOADING between the win (under the lock) and the publish (after it),
 * so a win is told by the block's data, not by its state: a second
 * success in that gap would otherwise replace (and leak) the winner's
 * buffer, and a failure would publish the block as failed.
 */
static void fetch_complete(struct tfs_cache *c, struct fetch_job *j, int rc)
{
    struct tfs_block *b = j->b;
    bool winner = false;
    bool kick = false;
    bool failed = false;

    pthread_mutex_lock(&c->ram_lock);
    b->reads--;
    if (b->state == TFS_BLK_LOADING && b->data == NULL && rc == 0) {
        b->data = j->dst;
        b->sums = j->sums;
        j->dst = NULL;
        j->sums = NULL;
        if (b->sums != NULL && !b->has_digest) {
            b->digest = j->digest;
            b->has_digest = true;
        }
        winner = true;
    } else if (b->state == TFS_BLK_LOADING && b->data == NULL &&
               b->reads == 0) {
        failed = true;
    }
    pthread_mutex_unlock(&c->ram_lock);
    tfs_blockbuf_put(c, j->dst, j->len);
    j->dst = NULL;
    if (failed && rc == -ETIMEDOUT && j->tried)
        fetch_memo_note(c->fetch, b->id);
    if (failed)
        tfs_block_publish(c, b, rc, TFS_SRC_NONE);
    if (!winner)
        return;
    if (j->hedge)
        TFS_COUNT(&c->ctr, hedge_wins, 1);
    /*
     * Queue the disk write before the publish: a reader woken by the
     * publish may call tfs_cache_flush at once, and the flush waits only
     * for what is queued.  Wake a writer after it: woken before, it
     * took a core from the reader's reply on a busy machine (a cold
     * small file's reply came 100 us later, docs/performance-cold.md).
     */
    if (!j->fill) {
        struct tfs_block_ref r = {
            .key = j->key, .version = j->version, .obj_size = j->obj_size,
            .index = j->index, .off = j->off, .len = j->len};
        kick = tfs_disk_store(c, &r, b, false);
    }
    tfs_block_publish(c, b, 0, j->src);
    if (kick)
        tfs_disk_kick(c);
}

/* "block 3" or "blocks 3-6": the k blocks from j on, for messages. */
struct fetch_name {
    char s[64];
};

static struct fetch_name fetch_blocks_name(const struct fetch_job *j,
                                           unsigned k)
{
    struct fetch_name nm;

    if (k == 1)
        snprintf(nm.s, sizeof(nm.s), "block %llu",
                 (unsigned long long)j->index);
    else
        snprintf(nm.s, sizeof(nm.s), "blocks %llu-%llu",
                 (unsigned long long)j->index,
                 (unsigned long long)(j->index + k - 1));
    return nm;
}

/* Count a store GET for the k blocks from j on, and say why it failed. */
static void fetch_counted(struct tfs_cache *c, const struct fetch_job *j,
                          unsigned k, int rc)
{
    TFS_COUNT(&c->ctr, backend_get_count, 1);
    if (rc == 0)
        return;
    TFS_COUNT(&c->ctr, backend_get_errors, 1);
    tfs_log(TFS_LOG_WARNING, "fetch: %s of '%s': %s (%s)",
            fetch_blocks_name(j, k).s, j->key, tfs_strerror(rc),
            tfs_errdetail());
}

/* ---- chunk sums as the bytes land ---- */

/*
 * A read's chunk sums (common/csum.h: XXH3 of each 64 KiB of a block;
 * the disk tier's block files and the group's digests are made of them),
 * taken as the store reports each piece landed (tfs_landing), while the
 * piece is still in the CPU's cache: hashing 64 KiB just written costs a
 * fraction of hashing it again from memory when the disk writer gets to
 * it (docs/performance-cold.md).  Only a run landed in order from the
 * read's start is hashed (tfs_csum_feed, a block at a time).  A report
 * behind the run's end (a retry from the start, a flip) is a rewrite:
 * the run ends there, and every sum is taken again (rare: only these
 * paths rewrite).  What was not hashed as it landed (a store that does
 * not report) is hashed at the end (tfs_csum_end), from the final
 * bytes.  A sum that missed a change could only make the disk tier
 * or a peer refuse the block later (their checks fail), never serve it.
 */
struct fetch_land {
    struct tfs_landing  land;
    const struct iovec *iov;            /* the read's blocks */
    struct tfs_csum    *cs;             /* each block's sums so far */
    unsigned            k;              /* blocks */
    size_t              lo;             /* bytes landed in order from 0 */
    unsigned            seg;            /* the block lo is in */
    size_t              seg_at;         /* where that block starts */
};

static void fetch_landed(void *arg, size_t at, size_t len)
{
    struct fetch_land *l = arg;

    if (at < l->lo) {                   /* a rewrite: sum all again */
        for (unsigned i = 0; i < l->k; i++)
            tfs_csum_restart(&l->cs[i]);
        l->seg = 0;
        l->seg_at = 0;
        l->lo = at;
    }
    if (at != l->lo)
        return;                         /* past lo: a gap, for the end */
    l->lo += len;
    while (l->seg < l->k) {             /* sum what the run now holds */
        size_t seg_len = l->iov[l->seg].iov_len;

        tfs_csum_feed(&l->cs[l->seg], l->iov[l->seg].iov_base,
                      TFS_MIN(l->lo - l->seg_at, seg_len));
        if (l->lo - l->seg_at < seg_len)
            break;
        l->seg_at += seg_len;
        l->seg++;
    }
}

/* Room for the sums of the k blocks: false (none taken) when there is
   no memory, which only costs the hashing later. */
static bool fetch_land_begin(struct fetch_land *l, const struct iovec *iov,
                             unsigned k, struct tfs_csum *cs)
{
    unsigned i;

    *l = (struct fetch_land){.land = {fetch_landed, l}, .iov = iov,
                             .cs = cs, .k = k};
    for (i = 0; i < k && tfs_csum_begin(&cs[i], iov[i].iov_len) == 0; i++)
        ;
    if (i == k)
        return true;
    while (i-- > 0)
        tfs_csum_cleanup(&cs[i]);
    return false;
}

/* The read is over: with rc 0 every block from j on gets its sums, the
   rest hashed now from the final bytes, and their digest; else none. */
static void fetch_land_end(struct fetch_land *l, struct fetch_job *j,
                           int rc)
{
    for (unsigned i = 0; i < l->k; i++, j = j->span_next) {
        if (rc == 0) {
            j->digest = tfs_csum_end(&l->cs[i], l->iov[i].iov_base);
            j->sums = l->cs[i].sums;
        } else {
            tfs_csum_cleanup(&l->cs[i]);
        }
    }
}

/*
 * The one point where store bytes enter the cache: read the k blocks
 * from j on (j alone, or j's span) with one request, into iov, and check
 * them end to end where the store allows (tfs_store_read_verified).  A
 * mismatch is read once more, then fails -EIO; the buffers are never
 * published then, so nothing corrupt reaches RAM or disk (D8).  One
 * block keeps the plain read: not every store scatters.
 */
static int fetch_store_read(struct tfs_cache *c, struct fetch_job *j,
                            const struct iovec *iov, unsigned k,
                            size_t total)
{
    enum tfs_verify_how how = TFS_VERIFIED_NONE;
    bool whole = j->off == 0 && total == j->obj_size;
    uint64_t t0 = tfs_now_ns();
    struct tfs_csum cs[TFS_FETCH_SPAN_MAX];
    struct fetch_land l;
    bool landing = fetch_land_begin(&l, iov, k, cs);
    size_t n = 0;
    int rc = TFS_ECORRUPT;

    for (int i = 0; i < 2 && rc == TFS_ECORRUPT; i++) {
        rc = tfs_store_readv_verified(c->st, j->key, iov, (int)k, j->off,
                                      j->version, whole,
                                      landing ? &l.land : NULL, &n, &how);
        if (rc == TFS_ECORRUPT) {
            TFS_COUNT(&c->ctr, store_checksum_mismatch, 1);
            tfs_log(TFS_LOG_WARNING, "fetch: %s of '%s': %s%s",
                    fetch_blocks_name(j, k).s, j->key, tfs_errdetail(),
                    i > 0 ? "" : k == 1 ? ", reading it again"
                                        : ", reading them again");
        }
    }
    if (rc == TFS_ECORRUPT)
        rc = tfs_err(-EIO, "'%s' %s failed %s end-to-end check twice; not "
                     "cached", j->key, fetch_blocks_name(j, k).s,
                     k == 1 ? "its" : "their");
    if (rc == 0 && n != total)
        rc = tfs_err(TFS_ECHANGED, "'%s' is shorter than its listed size",
                     j->key);
    if (landing)
        fetch_land_end(&l, j, rc);
    if (rc == 0) {
        uint64_t ns = tfs_now_ns() - t0;

        TFS_COUNT(&c->ctr, backend_get_bytes, n);
        tfs_hist_add(&c->get_latency, ns);
        if (k == 1 && j->len >= c->cfg.block_size / 2)
            fetch_note_latency(c->fetch, ns);   /* a block's, for hedges */
        if (k > 1) {
            TFS_COUNT(&c->ctr, span_gets, 1);
            TFS_COUNT(&c->ctr, span_blocks, k);
        }
        if (how != TFS_VERIFIED_NONE)
            TFS_COUNT(&c->ctr, store_verified_blocks, k);
    }
    fetch_counted(c, j, k, rc);
    return rc;
}

/* j's block as the sources name it. */
static struct tfs_peer_block fetch_pb(const struct fetch_job *j)
{
    struct tfs_peer_block pb = {
        .key = j->key, .version = j->version, .obj_size = j->obj_size,
        .index = j->index, .off = j->off, .len = j->len};

    memcpy(pb.id, j->b->id, sizeof(pb.id));
    return pb;
}

/*
 * Ask the other sources for j's block first, in order (the group's
 * owner peer, then the shared tier): 0 when one answered (checked, into
 * j->dst), else the store is read.  Their bytes count as theirs (their
 * own metrics), not as store reads.
 */
static int fetch_from_sources(struct tfs_cache *c, struct fetch_job *j)
{
    struct tfs_peer_block pb = fetch_pb(j);
    int rc = -ENOENT;

    pthread_rwlock_rdlock(&c->source_lock);
    for (unsigned i = 0; i < c->n_sources && rc != 0; i++) {
        const struct tfs_cache_source *s = &c->sources[i];

        if (j->local && s->kind == TFS_SOURCE_PEER)
            continue;                   /* a peer's read, or a hedge */
        tfs_waiting();                  /* fetch_waiting, before a peer */
        rc = s->read(s->arg, &pb, j->deadline, j->dst);
        if (rc == 0 && s->kind == TFS_SOURCE_SHARED) {
            j->src = TFS_SRC_SHARED;
            TFS_COUNT(&c->ctr, shared_blocks, 1);
        } else if (rc == 0) {
            j->src = TFS_SRC_PEER;
            TFS_COUNT(&c->ctr, peer_blocks, 1);
        }
    }
    pthread_rwlock_unlock(&c->source_lock);
    return rc;
}

/* The store gave j's block: tell the sources that keep copies. */
static void fetch_stored(struct tfs_cache *c, struct fetch_job *j)
{
    struct tfs_peer_block pb = fetch_pb(j);

    pthread_rwlock_rdlock(&c->source_lock);
    for (unsigned i = 0; i < c->n_sources; i++) {
        const struct tfs_cache_source *s = &c->sources[i];

        if (s->stored != NULL)
            s->stored(s->arg, &pb, j->dst);
    }
    pthread_rwlock_unlock(&c->source_lock);
}

/* Tell j's opener, if one waits, that its request went out (or that
   the read ended without one); f->lock held. */
static void fetch_sent_notify(struct fetch_job *j)
{
    if (j->sent != NULL) {
        j->sent->done = true;
        pthread_cond_signal(&j->sent->cond);
        j->sent = NULL;
    }
}

/* What a fetch does once its request is out, while it waits for the
   store's answer (the tfs_waiting hook). */
struct fetch_wait {
    struct tfs_cache *c;
    struct fetch_job *j;
};

static void fetch_waiting(void *arg)
{
    struct fetch_wait *w = arg;
    struct tfs_fetch *f = w->c->fetch;

    pthread_mutex_lock(&f->lock);
    fetch_sent_notify(w->j);            /* the open can be answered */
    pthread_mutex_unlock(&f->lock);
    tfs_blockbuf_stock(w->c, w->j->len);    /* the next small block's */
}

static void fetch_run(struct tfs_cache *c, struct fetch_job *j)
{
    struct fetch_wait w = {.c = c, .j = j};
    uint64_t t0 = tfs_now_ns();
    int rc;

    if (!j->hedge) {                    /* the hedging clock starts now */
        pthread_mutex_lock(&c->ram_lock);
        j->b->get_started = true;
        __atomic_store_n(&j->b->load_start_ns, t0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&c->ram_lock);
    }

    j->dst = tfs_blockbuf_get(c, j->len);
    if (j->dst == NULL) {
        rc = tfs_err(-ENOMEM, "fetch: no memory for block %llu of '%s'",
                     (unsigned long long)j->index, j->key);
        fetch_counted(c, j, 1, rc);
    } else {
        uint64_t prev = tfs_deadline_set(j->deadline);
        struct iovec iov = {j->dst, j->len};
        struct tfs_hook prev_hook =
            tfs_waiting_set((struct tfs_hook){fetch_waiting, &w});

        j->tried = j->deadline == 0 || t0 < j->deadline;
        rc = fetch_from_sources(c, j);
        if (rc != 0)
            rc = fetch_store_read(c, j, &iov, 1, j->len);
        tfs_waiting_set(prev_hook);
        tfs_deadline_set(prev);
        if (rc == 0 && j->src == TFS_SRC_STORE)
            fetch_stored(c, j);
    }
    fetch_complete(c, j, rc);
}

/* Can h be read by the same request as a, right after it? */
static bool fetch_span_fits(const struct tfs_cache *c,
                            const struct fetch_job *a,
                            const struct fetch_job *h)
{
    return !a->hedge && !h->hedge && a->fill == h->fill &&
           a->local == h->local && a->len == c->cfg.block_size &&
           h->index == a->index + 1 && h->off == a->off + a->len &&
           h->obj_size == a->obj_size && strcmp(h->key, a->key) == 0 &&
           strcmp(h->version, a->version) == 0;
}

/* Take the prefetch jobs queued right behind j that continue it, onto
   j's span (f->lock held). */
static void fetch_span_gather(struct tfs_cache *c, struct tfs_fetch *f,
                              struct fetch_job *j)
{
    struct fetch_job *last = j;

    for (unsigned n = 1; n < f->span_max; n++) {
        struct fetch_job *h = f->prefetch.head;

        if (h == NULL || !fetch_span_fits(c, last, h))
            break;
        fetch_dequeue(&f->prefetch);
        last->span_next = h;
        h->span_next = NULL;
        last = h;
    }
}

/*
 * One GET for every block of j's span, into their own buffers in turn;
 * each block is then completed as fetch_run completes one.  Where there
 * is a source to ask first (the group, the shared tier), or no memory
 * for a buffer, the blocks are read one by one instead.
 */
static void fetch_run_span(struct tfs_cache *c, struct fetch_job *j)
{
    struct iovec iov[TFS_FETCH_SPAN_MAX];
    uint64_t t0 = tfs_now_ns();
    uint64_t dl = 0;
    size_t total = 0;
    unsigned k = 0;
    bool sources;
    int rc;

    pthread_rwlock_rdlock(&c->source_lock);
    sources = c->n_sources > 0;
    pthread_rwlock_unlock(&c->source_lock);
    for (struct fetch_job *x = j; x != NULL && !sources; x = x->span_next) {
        x->dst = k < TFS_ARRAY_LEN(iov) ? tfs_blockbuf_get(c, x->len) : NULL;
        if (x->dst == NULL)
            sources = true;             /* one by one after all */
        else
            iov[k++] = (struct iovec){x->dst, x->len};
        total += x->len;
        if (x->deadline != 0 && (dl == 0 || x->deadline < dl))
            dl = x->deadline;
    }
    if (sources) {
        for (struct fetch_job *x = j; x != NULL; x = x->span_next) {
            tfs_blockbuf_put(c, x->dst, x->len);
            x->dst = NULL;
            fetch_run(c, x);
        }
        return;
    }
    pthread_mutex_lock(&c->ram_lock);
    for (struct fetch_job *x = j; x != NULL; x = x->span_next) {
        x->b->get_started = true;       /* the hedging clock starts now */
        __atomic_store_n(&x->b->load_start_ns, t0, __ATOMIC_RELAXED);
        x->tried = dl == 0 || t0 < dl;
    }
    pthread_mutex_unlock(&c->ram_lock);
    uint64_t prev = tfs_deadline_set(dl);
    rc = fetch_store_read(c, j, iov, k, total);
    tfs_deadline_set(prev);
    for (struct fetch_job *x = j; x != NULL; x = x->span_next) {
        if (rc == 0)
            fetch_stored(c, x);
        fetch_complete(c, x, rc);
    }
}

static struct fetch_job *fetch_next(struct tfs_fetch *f, bool *is_prefetch)
{
    for (;;) {
        struct fetch_job *j = fetch_dequeue(&f->demand);

        *is_prefetch = false;
        if (j == NULL && f->prefetch_active < f->prefetch_max) {
            j = fetch_dequeue(&f->prefetch);
            *is_prefetch = j != NULL;
        }
        if (j != NULL || f->stopping)
            return j;
        pthread_cond_wait(&f->cond, &f->lock);
    }
}

static void *fetch_worker(void *arg)
{
    struct tfs_cache *c = arg;
    struct tfs_fetch *f = c->fetch;

    pthread_mutex_lock(&f->lock);
    for (;;) {
        bool is_prefetch;
        struct fetch_job *j = fetch_next(f, &is_prefetch);

        if (j == NULL)
            break;
        j->span_next = NULL;
        if (is_prefetch && f->span_max > 1)
            fetch_span_gather(c, f, j);
        f->prefetch_active += is_prefetch;
        f->active++;
        for (struct fetch_job *x = j; x != NULL; x = x->span_next) {
            x->run_next = f->running;
            f->running = x;
        }
        pthread_mutex_unlock(&f->lock);
        if (j->span_next != NULL)
            fetch_run_span(c, j);
        else
            fetch_run(c, j);
        pthread_mutex_lock(&f->lock);
        for (struct fetch_job *x = j; x != NULL; x = x->span_next) {
            fetch_sent_notify(x);       /* ended before it waited */
            for (struct fetch_job **pp = &f->running; *pp != NULL;
                 pp = &(*pp)->run_next) {
                if (*pp == x) {
                    *pp = x->run_next;
                    break;
                }
            }
        }
        pthread_mutex_unlock(&f->lock);
        while (j != NULL) {
            struct fetch_job *next = j->span_next;

            tfs_ram_put(c, j->b);
            fetch_job_free(c, j);
            j = next;
        }
        pthread_mutex_lock(&f->lock);
        f->active--;
        /* The prefetch slot freed here is taken by this worker itself,
           in the fetch_next() it goes on to: no other worker needs a
           wake-up (a broadcast here woke every idle worker, 31 context
           switches and a scramble for the lock per prefetched block). */
        f->prefetch_active -= is_prefetch;
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Prefetch jobs this thread queues between tfs_fetch_batch_begin and
   tfs_fetch_batch_end: queued together at the end, so that a span's
   blocks reach the queue's head together. */
static __thread bool fetch_batching;
static __thread struct fetch_queue fetch_batch;

void tfs_fetch_batch_begin(void)
{
    fetch_batching = true;
}

void tfs_fetch_batch_end(struct tfs_cache *c)
{
    struct tfs_fetch *f = c->fetch;
    struct fetch_job *q = fetch_batch.head;
    struct fetch_job *prev = NULL;
    unsigned wakes = 0;
    unsigned run = 0;

    fetch_batching = false;
    fetch_batch.head = fetch_batch.tail = NULL;
    if (q == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    if (!f->stopping) {
        while (q != NULL) {
            struct fetch_job *next = q->next;

            /* a worker for each span the jobs will form (one a job
               where they do not continue each other) */
            if (prev == NULL || run == f->span_max ||
                !fetch_span_fits(c, prev, q)) {
                wakes++;
                run = 0;
            }
            run++;
            prev = q;
            fetch_enqueue(&f->prefetch, q);
            q = next;
        }
        while (wakes-- > 0)
            pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    while (q != NULL) {                 /* stopping: as fetch_cancel */
        struct fetch_job *next = q->next;

        fetch_complete(c, q, -ESHUTDOWN);
        tfs_ram_put(c, q->b);
        fetch_job_free(c, q);
        q = next;
    }
}

/*
 * An opener's wait for its small object's GET (tfs_file_sent_*).  A
 * small object's open starts loading its one block.  The FUSE thread
 * used to answer the open at once; the reader it woke then ran before
 * the fetch worker that had to send the GET, on a busy two-core machine
 * 150-250 us later (docs/performance-cold.md), on the path of every
 * cold small file a reader opens one after another.  Now the open's
 * answer waits until the worker has the request out (its first wait
 * for the store: tfs_waiting), at most FETCH_SENT_WAIT_NS, and only
 * when a worker is free to take the job at once; the worker's read
 * itself stays where it was, so a store that hangs holds no FUSE
 * thread.
 */
#define FETCH_SENT_WAIT_NS 2000000ull

static __thread bool fetch_sent_armed;
static __thread bool fetch_sent_init;
static __thread struct fetch_sent fetch_sent_own;
static __thread struct fetch_job *fetch_sent_job;   /* f->lock */

void tfs_file_sent_begin(void)
{
    if (!fetch_sent_init)
        fetch_sent_init = tfs_cond_init_mono(&fetch_sent_own.cond) == 0;
    fetch_sent_armed = fetch_sent_init;
    fetch_sent_job = NULL;
}

void tfs_file_sent_wait(struct tfs_cache *c)
{
    struct tfs_fetch *f = c->fetch;
    uint64_t end;

    fetch_sent_armed = false;
    if (fetch_sent_job == NULL)
        return;
    TFS_COUNT(&c->ctr, open_sent_waits, 1);
    end = tfs_now_ns() + FETCH_SENT_WAIT_NS;
    pthread_mutex_lock(&f->lock);
    while (!fetch_sent_own.done) {
        uint64_t now = tfs_now_ns();
        struct timespec ts;

        if (now >= end) {               /* the job lives: not done */
            fetch_sent_job->sent = NULL;
            TFS_COUNT(&c->ctr, open_sent_late, 1);
            break;
        }
        ts = tfs_abstime(CLOCK_MONOTONIC, end - now);
        pthread_cond_timedwait(&fetch_sent_own.cond, &f->lock, &ts);
    }
    pthread_mutex_unlock(&f->lock);
    fetch_sent_job = NULL;
}

/* Let this thread's opener wait for j's request, if a worker takes j at
   once (f->lock held). */
static void fetch_sent_arm(struct tfs_fetch *f, struct fetch_job *j)
{
    if (!fetch_sent_armed || fetch_sent_job != NULL ||
        f->prefetch.head != NULL || f->active >= f->n_threads ||
        f->prefetch_active >= f->prefetch_max)
        return;
    fetch_sent_own.done = false;
    j->sent = &fetch_sent_own;
    fetch_sent_job = j;
}

/* Queue j (its block already pinned for it). */
static int fetch_queue_job(struct tfs_cache *c, struct fetch_job *j,
                           bool prio_demand)
{
    struct tfs_fetch *f = c->fetch;

    if (fetch_batching && !prio_demand) {
        fetch_enqueue(&fetch_batch, j);
        return 0;
    }
    pthread_mutex_lock(&f->lock);
    if (f->stopping) {
        pthread_mutex_unlock(&f->lock);
        return -ESHUTDOWN;
    }
    if (!prio_demand)
        fetch_sent_arm(f, j);
    fetch_enqueue(prio_demand ? &f->demand : &f->prefetch, j);
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

int tfs_fetch_submit(struct tfs_cache *c, const struct tfs_block_ref *r,
                     struct tfs_block *b, enum tfs_want want)
{
    struct fetch_job *j;
    uint64_t ago = 0;
    int rc;

    if (fetch_memo_recent(c->fetch, b->id, &ago))
        return tfs_err(-ETIMEDOUT, "fetch: the read of block %llu of '%s' "
                       "timed out %llu ms ago; not asked again yet",
                       (unsigned long long)r->index, r->key,
                       (unsigned long long)(ago / 1000000));
    j = fetch_job_new(c, r, b);
    if (j == NULL)
        return -ENOMEM;
    j->fill = want == TFS_WANT_FILL;
    j->local = want == TFS_WANT_PEER;
    j->deadline = fetch_deadline(c, j->len);
    pthread_mutex_lock(&c->ram_lock);
    b->refs++;                          /* the job's pin */
    b->reads++;
    pthread_mutex_unlock(&c->ram_lock);
    rc = fetch_queue_job(c, j, want != TFS_WANT_PREFETCH);
    if (rc < 0) {
        pthread_mutex_lock(&c->ram_lock);
        b->reads--;
        pthread_mutex_unlock(&c->ram_lock);
        tfs_ram_put(c, b);
        fetch_job_free(c, j);
    }
    return rc;
}

unsigned tfs_fetch_span_blocks(struct tfs_cache *c)
{
    return c->fetch != NULL ? c->fetch->span_max : 1;
}

/* Are more than half the workers reading? */
static bool fetch_busy(struct tfs_fetch *f)
{
    bool busy;

    pthread_mutex_lock(&f->lock);
    busy = f->active * 2 > f->n_threads;
    pthread_mutex_unlock(&f->lock);
    return busy;
}

/* Move b's queued prefetch job to the demand queue; false if none. */
static bool fetch_promote(struct tfs_fetch *f, struct tfs_block *b)
{
    struct fetch_job *prev = NULL;
    struct fetch_job *j;

    pthread_mutex_lock(&f->lock);
    for (j = f->prefetch.head; j != NULL && j->b != b; j = j->next)
        prev = j;
    if (j != NULL) {
        if (prev != NULL)
            prev->next = j->next;
        else
            f->prefetch.head = j->next;
        if (f->prefetch.tail == j)
            f->prefetch.tail = prev;
        fetch_enqueue(&f->demand, j);
        pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    return j != NULL;
}

/*
 * The deadline of b's running read, for a hedge of it (a hedge is
 * started only once that read runs); now if it has just finished, so
 * the hedge then fails at once and that read's answer stands.
 */
static uint64_t fetch_running_deadline(struct tfs_fetch *f,
                                       struct tfs_block *b)
{
    uint64_t dl = tfs_now_ns();

    pthread_mutex_lock(&f->lock);
    for (struct fetch_job *j = f->running; j != NULL; j = j->run_next) {
        if (j->b == b && !j->hedge) {
            dl = j->deadline;
            break;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return dl;
}

enum tfs_hedge_result tfs_fetch_hedge(struct tfs_cache *c,
                                      const struct tfs_block_ref *r,
                                      struct tfs_block *b)
{
    struct fetch_job *j;
    bool loading;
    bool started;
    bool go;

    pthread_mutex_lock(&c->ram_lock);
    loading = b->state == TFS_BLK_LOADING && b->reads > 0 && b->data == NULL;
    started = b->get_started;
    go = loading && started && !b->hedged;
    if (go)
        b->hedged = true;
    pthread_mutex_unlock(&c->ram_lock);
    if (loading && !started) {
        fetch_promote(c->fetch, b);     /* or already in the demand queue */
        return TFS_HEDGE_QUEUED;
    }
    if (go && fetch_busy(c->fetch)) {
        pthread_mutex_lock(&c->ram_lock);
        b->hedged = false;              /* may hedge once the pool calms */
        pthread_mutex_unlock(&c->ram_lock);
        TFS_COUNT(&c->ctr, hedges_skipped_busy, 1);
        return TFS_HEDGE_BUSY;
    }
    if (!go)
        return TFS_HEDGE_NONE;
    j = fetch_job_new(c, r, b);
    if (j == NULL)
        return TFS_HEDGE_NONE;
    j->hedge = true;
    j->local = true;                    /* a second read: of the store */
    j->deadline = fetch_running_deadline(c->fetch, b);
    pthread_mutex_lock(&c->ram_lock);
    b->refs++;
    b->reads++;
    pthread_mutex_unlock(&c->ram_lock);
    if (fetch_queue_job(c, j, true) < 0) {
        fetch_complete(c, j, -ESHUTDOWN);
        tfs_ram_put(c, b);
        fetch_job_free(c, j);
        return TFS_HEDGE_NONE;
    }
    TFS_COUNT(&c->ctr, hedged_gets, 1);
    return TFS_HEDGE_SENT;
}

/* ---- start and stop ---- */

int tfs_fetch_start(struct tfs_cache *c)
{
    struct tfs_fetch *f = tfs_calloc(1, sizeof(*f));

    if (f == NULL)
        return -ENOMEM;
    f->n_threads = TFS_MAX(1u, c->cfg.max_inflight);
    f->prefetch_max = TFS_MAX(1u, f->n_threads - f->n_threads / 4);
    f->span_max = tfs_store_can_scatter(c->st)
                      ? (unsigned)TFS_MIN(TFS_FETCH_SPAN_MAX,
                                           TFS_MAX(1u, c->cfg.fetch_span /
                                                           c->cfg.block_size))
                      : 1;
    f->threads = tfs_calloc(f->n_threads, sizeof(*f->threads));
    if (f->threads == NULL) {
        tfs_free(f);
        return -ENOMEM;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    pthread_mutex_init(&f->lat_lock, NULL);
    c->fetch = f;
    for (unsigned i = 0; i < f->n_threads; i++) {
        if (pthread_create(&f->threads[i], NULL, fetch_worker, c) != 0) {
            f->n_threads = i;
            tfs_fetch_stop(c);
            return -EAGAIN;
        }
    }
    return 0;
}

/* Fail every queued job: their readers get -ESHUTDOWN. */
static void fetch_cancel(struct tfs_cache *c, struct fetch_queue *q)
{
    struct fetch_job *j;

    while ((j = fetch_dequeue(q)) != NULL) {
        pthread_mutex_lock(&c->fetch->lock);
        fetch_sent_notify(j);
        pthread_mutex_unlock(&c->fetch->lock);
        fetch_complete(c, j, -ESHUTDOWN);
        tfs_ram_put(c, j->b);
        fetch_job_free(c, j);
    }
}

void tfs_fetch_stop(struct tfs_cache *c)
{
    struct tfs_fetch *f = c->fetch;

    if (f == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    for (unsigned i = 0; i < f->n_threads; i++)
        pthread_join(f->threads[i], NULL);
    fetch_cancel(c, &f->demand);
    fetch_cancel(c, &f->prefetch);
    pthread_mutex_destroy(&f->lat_lock);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    tfs_free(f->threads);
    tfs_free(f);
    c->fetch = NULL;
}
