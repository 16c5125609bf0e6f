/* SPDX-License-Identifier: MIT */
/*
 * Open files: an object's version fixed at open, and the sequential
 * readahead that grows while reads continue where the last one ended.
 *
 * Readahead: a read that starts at (or just around) the end of the last
 * one is sequential; the window then starts at one block and doubles on
 * each sequential read up to max_readahead; a jump elsewhere resets it.
 * Blocks in the window are handed to the fetch pool as prefetches, behind
 * every demand read.  The tolerance (a block forward, 128 KiB back)
 * absorbs the kernel issuing FUSE reads slightly out of order.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "cache/cache_int.h"

#define FILE_SEQ_BACK (128u << 10)

struct tfs_file {
    struct tfs_cache *c;
    char             *key;              /* owned */
    struct tfs_stat   st;               /* fixed at open */
    uint64_t          n_blocks;
    pthread_mutex_t   lock;
    uint64_t          next_off;         /* lock: end of the last read */
    uint64_t          window;           /* lock: readahead bytes */
    uint64_t          ra_end;           /* lock: prefetched up to here */
    uint32_t          trace_id;         /* when c->trace */
    atomic_uint       refs;             /* the opener's + one per
                                           asynchronous read */
};

/* Blocks a non-blocking read pins at once; a longer range goes async. */
#define FILE_TRY_BLOCKS 32

int tfs_file_open_stat(struct tfs_cache *c, const char *key,
                       const struct tfs_stat *st, struct tfs_file **out)
{
    struct tfs_file *f = tfs_calloc(1, sizeof(*f));
    uint64_t bs = c->cfg.block_size;

    if (f == NULL || (f->key = tfs_strdup(key)) == NULL) {
        tfs_free(f);
        return -ENOMEM;
    }
    f->c = c;
    f->st = *st;
    if (c->trace != NULL)
        f->trace_id = tfs_trace_file_open(c->trace, key, st->size);
    f->n_blocks = (st->size + bs - 1) / bs;
    atomic_init(&f->refs, 1);
    pthread_mutex_init(&f->lock, NULL);
    /* A small object is one block: start loading it now. */
    if (f->n_blocks == 1 && tfs_cache_can_prefetch(c)) {
        struct tfs_block_ref r;
        tfs_block_ref_init(c, &r, f->key, &f->st, 0);
        tfs_cache_block_prefetch(c, &r);
    }
    *out = f;
    return 0;
}

int tfs_file_open(struct tfs_cache *c, const char *key,
                  struct tfs_file **out)
{
    struct tfs_stat st;
    int rc = tfs_cache_stat(c, key, &st);

    if (rc < 0)
        return rc;
    return tfs_file_open_stat(c, key, &st, out);
}

void tfs_file_close(struct tfs_file *f)
{
    if (f == NULL || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    if (f->c->trace != NULL)
        tfs_trace_file_close(f->c->trace, f->trace_id);
    pthread_mutex_destroy(&f->lock);
    tfs_free(f->key);
    tfs_free(f);
}

uint64_t tfs_file_size(const struct tfs_file *f)
{
    return f->st.size;
}

const struct tfs_stat *tfs_file_stat(const struct tfs_file *f)
{
    return &f->st;
}

/* Update the sequential state for a read of [off, end); returns the
 * range of blocks to prefetch as [*ra_from, *ra_to). */
static void file_readahead(struct tfs_file *f, uint64_t off, uint64_t end,
                           uint64_t *ra_from, uint64_t *ra_to)
{
    struct tfs_cache *c = f->c;
    uint64_t bs = c->cfg.block_size;
    unsigned span_blocks = tfs_fetch_span_blocks(c);
    uint64_t span = span_blocks > 1 ? span_blocks * bs : 0;
    bool seq;

    pthread_mutex_lock(&f->lock);
    seq = off + FILE_SEQ_BACK >= f->next_off && off <= f->next_off + bs &&
          f->next_off > 0;
    if (!seq) {
        f->window = 0;
        f->ra_end = end;
    } else if (f->window == 0) {
        f->window = TFS_MIN(bs, c->cfg.max_readahead);
    } else {
        f->window = TFS_MIN(f->window * 2, c->cfg.max_readahead);
    }
    f->next_off = end;
    *ra_from = TFS_MAX(f->ra_end, end);
    *ra_to = TFS_MIN(end + f->window, f->st.size);
    /* With spans, the full window moves on a span at a time (not a block
       at a time behind each read), so that its blocks go out as one
       request (fetch.c); the end of the object goes at once. */
    if (span > 0 && f->window >= 2 * span && *ra_to < f->st.size &&
        *ra_to - TFS_MIN(*ra_from, *ra_to) < span)
        *ra_to = *ra_from;
    if (*ra_to > *ra_from)
        f->ra_end = *ra_to;
    pthread_mutex_unlock(&f->lock);
}

static void file_prefetch(struct tfs_file *f, uint64_t from, uint64_t to)
{
    struct tfs_cache *c = f->c;
    uint64_t bs = c->cfg.block_size;

    tfs_fetch_batch_begin();
    for (uint64_t b = from / bs; b * bs < to && b < f->n_blocks; b++) {
        struct tfs_block_ref r;
        tfs_block_ref_init(c, &r, f->key, &f->st, b);
        tfs_cache_block_prefetch(c, &r);
    }
    tfs_fetch_batch_end(c);
}

/*
 * Block b, pinned and READY, with [off, off+len) counted as read by a
 * reader (hit/miss accounting); the wait is added to *stall_ns.
 */
static int file_get_block(struct tfs_file *f, uint64_t b, size_t len,
                          struct tfs_block **out, uint64_t *stall_ns,
                          int *src)
{
    struct tfs_cache *c = f->c;
    struct tfs_block_ref r;
    uint64_t waited;
    int rc;

    tfs_block_ref_init(c, &r, f->key, &f->st, b);
    rc = tfs_cache_block(c, &r, TFS_WANT_DEMAND, out, &waited);
    *stall_ns += waited;
    if (rc == 0) {
        int s = tfs_cache_account(c, *out, len);
        *src = *src < 0 || *src == s ? s : TFS_TRACE_MIXED;
    }
    return rc;
}

/* Whether [off, off + len), clipped to the object, crosses a block
   boundary (the pinned reads serve one block). */
static bool file_spans_blocks(const struct tfs_file *f, size_t len,
                              uint64_t off)
{
    uint64_t bs = f->c->cfg.block_size;
    uint64_t last;

    if (len == 0 || off >= f->st.size)
        return false;
    last = off + TFS_MIN((uint64_t)len, f->st.size - off) - 1;
    return off / bs != last / bs;
}

/* Readahead for a read of [off, off+len); the clamped end in *end. */
static bool file_begin(struct tfs_file *f, size_t len, uint64_t off,
                       uint64_t *end)
{
    uint64_t ra_from;
    uint64_t ra_to;

    if (off >= f->st.size || len == 0)
        return false;
    *end = off + TFS_MIN((uint64_t)len, f->st.size - off);
    file_readahead(f, off, *end, &ra_from, &ra_to);
    if (ra_to > ra_from && tfs_cache_can_prefetch(f->c))
        file_prefetch(f, ra_from, ra_to);
    return true;
}

static int file_finish(struct tfs_file *f, int rc, uint64_t off,
                       uint64_t n, uint64_t t0, uint64_t stall, int src)
{
    struct tfs_cache *c = f->c;
    uint64_t ns = tfs_now_ns() - t0;

    TFS_COUNT(&c->ctr, stall_ns, stall);
    TFS_COUNT(&c->ctr, read_calls, 1);
    if (rc < 0)
        return rc;
    TFS_COUNT(&c->ctr, read_bytes, n);
    tfs_hist_add(&c->read_latency, ns);
    if (c->trace != NULL)
        tfs_trace_read(c->trace, f->trace_id, off, (uint32_t)n,
                       (uint32_t)TFS_MIN(ns / 1000, (uint64_t)UINT32_MAX),
                       src < 0 ? TFS_TRACE_RAM : src);
    return 0;
}

int tfs_file_read(struct tfs_file *f, void *buf, size_t len, uint64_t off,
                  size_t *nread)
{
    uint64_t bs = f->c->cfg.block_size;
    uint64_t t0 = tfs_now_ns();
    uint64_t stall = 0;
    uint64_t end;
    uint64_t pos;
    int src = -1;
    int rc = 0;

    *nread = 0;
    if (!file_begin(f, len, off, &end))
        return 0;
    for (pos = off; pos < end && rc == 0;) {
        uint64_t b = pos / bs;
        size_t n = (size_t)(TFS_MIN(end, (b + 1) * bs) - pos);
        struct tfs_block *blk;

        rc = file_get_block(f, b, n, &blk, &stall, &src);
        if (rc < 0)
            break;
        memcpy((unsigned char *)buf + (pos - off), blk->data + (pos - b * bs),
               n);
        tfs_ram_put(f->c, blk);
        pos += n;
    }
    rc = file_finish(f, rc, off, end - off, t0, stall, src);
    if (rc == 0)
        *nread = (size_t)(end - off);
    return rc;
}

int tfs_file_read_pin(struct tfs_file *f, size_t len, uint64_t off,
                      const void **data, size_t *n, void **pin)
{
    uint64_t bs = f->c->cfg.block_size;
    uint64_t t0 = tfs_now_ns();
    uint64_t stall = 0;
    struct tfs_block *blk = NULL;
    uint64_t end;
    int src = -1;
    int rc;

    *n = 0;
    *pin = NULL;
    *data = NULL;
    if (file_spans_blocks(f, len, off))
        return -E2BIG;
    if (!file_begin(f, len, off, &end))
        return 0;
    rc = file_get_block(f, off / bs, (size_t)(end - off), &blk, &stall,
                        &src);
    rc = file_finish(f, rc, off, end - off, t0, stall, src);
    if (rc < 0)
        return rc;
    *data = blk->data + (off - (off / bs) * bs);
    *n = (size_t)(end - off);
    *pin = blk;
    return 0;
}

void tfs_cache_unpin(struct tfs_cache *c, void *pin)
{
    if (pin != NULL)
        tfs_ram_put(c, pin);
}

int tfs_file_prefetch(struct tfs_file *f, uint64_t off, uint64_t len)
{
    if (off < f->st.size && len > 0 && tfs_cache_can_prefetch(f->c))
        file_prefetch(f, off, off + TFS_MIN(len, f->st.size - off));
    return 0;
}

/* ---- without waiting: the event-driven read (the FUSE mount) ---- */

/* Count n bytes of READY blk as read, as file_get_block does. */
static void file_account(struct tfs_file *f, struct tfs_block *blk,
                         size_t n, int *src)
{
    int s = tfs_cache_account(f->c, blk, n);

    *src = *src < 0 || *src == s ? s : TFS_TRACE_MIXED;
}

/*
 * Pin every block of [off, end) READY in blks, starting the loads of
 * those that are not: 0, or -EAGAIN (nothing pinned) when one is still
 * loading or the range spans more than FILE_TRY_BLOCKS blocks.
 */
static int file_pin_now(struct tfs_file *f, uint64_t off, uint64_t end,
                        struct tfs_block **blks, size_t *nb)
{
    struct tfs_cache *c = f->c;
    uint64_t bs = c->cfg.block_size;
    uint64_t first = off / bs;
    size_t n = (size_t)((end - 1) / bs - first + 1);
    int rc = 0;
    size_t i;

    if (n > FILE_TRY_BLOCKS)
        return -EAGAIN;
    for (i = 0; i < n && rc == 0; i++) {
        struct tfs_block_ref r;
        tfs_block_ref_init(c, &r, f->key, &f->st, first + i);
        rc = tfs_cache_block_start(c, &r, &blks[i]);
        if (rc == 1) {                  /* loading: the async read waits */
            tfs_ram_put(c, blks[i]);
            rc = -EAGAIN;
        }
    }
    if (rc < 0) {
        for (size_t k = 0; k + 1 < i; k++)
            tfs_ram_put(c, blks[k]);
        return rc;
    }
    *nb = n;
    return 0;
}

int tfs_file_read_try(struct tfs_file *f, void *buf, size_t len,
                      uint64_t off, size_t *nread)
{
    struct tfs_block *blks[FILE_TRY_BLOCKS];
    uint64_t bs = f->c->cfg.block_size;
    uint64_t t0 = tfs_now_ns();
    uint64_t end;
    uint64_t pos = off;
    size_t nb = 0;
    int src = -1;
    int rc;

    *nread = 0;
    if (!file_begin(f, len, off, &end))
        return 0;
    rc = file_pin_now(f, off, end, blks, &nb);
    if (rc == -EAGAIN)
        return rc;                      /* counted when it completes */
    for (size_t i = 0; i < nb; i++) {
        uint64_t b = pos / bs;
        size_t n = (size_t)(TFS_MIN(end, (b + 1) * bs) - pos);

        file_account(f, blks[i], n, &src);
        memcpy((unsigned char *)buf + (pos - off),
               blks[i]->data + (pos - b * bs), n);
        tfs_ram_put(f->c, blks[i]);
        pos += n;
    }
    rc = file_finish(f, rc, off, end - off, t0, 0, src);
    if (rc == 0)
        *nread = (size_t)(end - off);
    return rc;
}

int tfs_file_read_pin_try(struct tfs_file *f, size_t len, uint64_t off,
                          const void **data, size_t *n, void **pin)
{
    uint64_t bs = f->c->cfg.block_size;
    uint64_t t0 = tfs_now_ns();
    struct tfs_block *blk = NULL;
    uint64_t end;
    size_t nb;
    int src = -1;
    int rc;

    *n = 0;
    *pin = NULL;
    *data = NULL;
    if (file_spans_blocks(f, len, off))
        return -E2BIG;
    if (!file_begin(f, len, off, &end))
        return 0;
    rc = file_pin_now(f, off, end, &blk, &nb);
    if (rc == -EAGAIN)
        return rc;
    if (rc == 0)
        file_account(f, blk, (size_t)(end - off), &src);
    rc = file_finish(f, rc, off, end - off, t0, 0, src);
    if (rc < 0)
        return rc;
    *data = blk->data + (off - (off / bs) * bs);
    *n = (size_t)(end - off);
    *pin = blk;
    return 0;
}

/*
 * One asynchronous read: it walks its range block by block; at a block
 * still loading it queues itself on the block (w) and returns, and the
 * thread that publishes the block carries it on.  It holds a reference
 * on its file, and a pin on the block it waits for.
 */
struct file_aread {
    struct tfs_waiter  w;               /* first: the waiter is the read */
    struct tfs_file   *f;
    unsigned char     *buf;
    uint64_t           off;
    uint64_t           end;
    uint64_t           pos;             /* copied up to here */
    uint64_t           t0;
    uint64_t           wait_t0;         /* when the wait for blk began */
    uint64_t           stall;
    int                src;
    struct tfs_block  *blk;             /* waited for; pinned */
    tfs_read_done_fn  *done;
    tfs_read_pin_fn   *pin_done;        /* instead of done: no buf, one
                                           block, handed over pinned */
    void              *arg;
    const void        *pdata;           /* pin_done's bytes, in kept */
    struct tfs_block  *kept;            /* pinned for pin_done */
};

/* Copy what the read wants of READY blk, unpin it, move on. */
static void aread_copy(struct file_aread *a, struct tfs_block *blk)
{
    uint64_t bs = a->f->c->cfg.block_size;
    uint64_t b = a->pos / bs;
    size_t n = (size_t)(TFS_MIN(a->end, (b + 1) * bs) - a->pos);

    file_account(a->f, blk, n, &a->src);
    if (a->pin_done != NULL) {          /* the range is in this block */
        a->pdata = blk->data + (a->pos - b * bs);
        a->kept = blk;                  /* its pin goes to the caller */
    } else {
        memcpy(a->buf + (a->pos - a->off), blk->data + (a->pos - b * bs),
               n);
        tfs_ram_put(a->f->c, blk);
    }
    a->pos += n;
}

/* Go on until done (0), an error, or queued on a loading block (1). */
static int aread_step(struct file_aread *a)
{
    struct tfs_cache *c = a->f->c;
    uint64_t bs = c->cfg.block_size;

    while (a->pos < a->end) {
        struct tfs_block_ref r;
        struct tfs_block *blk;
        int rc;

        tfs_block_ref_init(c, &r, a->f->key, &a->f->st, a->pos / bs);
        rc = tfs_cache_block_start(c, &r, &blk);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            a->blk = blk;
            a->wait_t0 = tfs_now_ns();
            if (tfs_block_await(c, blk, &a->w))
                return 1;               /* a belongs to the publisher */
            a->blk = NULL;
            rc = tfs_ram_wait(c, blk, 0);       /* published meanwhile */
            a->stall += tfs_now_ns() - a->wait_t0;
            if (rc < 0) {
                tfs_ram_put(c, blk);
                return rc;
            }
        }
        aread_copy(a, blk);
    }
    return 0;
}

/*
 * The read is over: count it, tell the caller (done, or pin_done with
 * the kept block, which is the caller's to unpin then), free it.  Not
 * called (a synchronous end), a pin read leaves the kept block in
 * *kept for its caller; a failed one has none.
 */
static int aread_end(struct file_aread *a, int rc, bool call,
                     struct tfs_block **kept)
{
    struct tfs_file *f = a->f;
    size_t n = (size_t)(a->end - a->off);

    rc = file_finish(f, rc, a->off, n, a->t0, a->stall, a->src);
    if (rc < 0 && a->kept != NULL) {
        tfs_ram_put(f->c, a->kept);
        a->kept = NULL;
    }
    if (call && a->pin_done != NULL)
        a->pin_done(a->arg, rc, rc == 0 ? a->pdata : NULL, rc == 0 ? n : 0,
                    a->kept);
    else if (call)
        a->done(a->arg, rc, rc == 0 ? n : 0);
    if (kept != NULL)
        *kept = a->kept;
    tfs_free(a);
    tfs_file_close(f);                  /* the read's reference */
    return rc;
}

/* w's block was published (a fetch worker or a disk load calls this). */
static void aread_wake(struct tfs_cache *c, struct tfs_waiter *w)
{
    struct file_aread *a = (struct file_aread *)w;
    struct tfs_block *blk = a->blk;
    int rc = tfs_ram_wait(c, blk, 0);

    a->blk = NULL;
    a->stall += tfs_now_ns() - a->wait_t0;
    if (rc < 0) {
        tfs_ram_put(c, blk);
    } else {
        aread_copy(a, blk);
        rc = aread_step(a);
        if (rc == 1)
            return;
    }
    aread_end(a, rc, true, NULL);
}

/* A new asynchronous read of [off, off + len), len > 0, off < size. */
static struct file_aread *aread_new(struct tfs_file *f, size_t len,
                                    uint64_t off, void *arg)
{
    struct file_aread *a = tfs_calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    atomic_fetch_add(&f->refs, 1);
    a->w.fn = aread_wake;
    a->f = f;
    a->off = a->pos = off;
    a->end = off + TFS_MIN((uint64_t)len, f->st.size - off);
    a->t0 = tfs_now_ns();
    a->src = -1;
    a->arg = arg;
    return a;
}

int tfs_file_read_async(struct tfs_file *f, void *buf, size_t len,
                        uint64_t off, tfs_read_done_fn *done, void *arg,
                        size_t *nread)
{
    struct file_aread *a;
    int rc;

    *nread = 0;
    if (off >= f->st.size || len == 0)
        return 0;
    a = aread_new(f, len, off, arg);
    if (a == NULL)
        return -ENOMEM;
    a->buf = buf;
    a->done = done;
    *nread = (size_t)(a->end - off);
    rc = aread_step(a);
    if (rc == 1)
        return 1;                       /* a may be gone already */
    rc = aread_end(a, rc, false, NULL);
    if (rc < 0)
        *nread = 0;
    return rc;
}

int tfs_file_read_pin_async(struct tfs_file *f, size_t len, uint64_t off,
                            tfs_read_pin_fn *done, void *arg,
                            const void **data, size_t *n, void **pin)
{
    struct tfs_block *kept = NULL;
    struct file_aread *a;
    const void *p;
    size_t got;
    int rc;

    *data = NULL;
    *n = 0;
    *pin = NULL;
    if (file_spans_blocks(f, len, off))
        return -E2BIG;
    if (off >= f->st.size || len == 0)
        return 0;
    a = aread_new(f, len, off, arg);
    if (a == NULL)
        return -ENOMEM;
    a->pin_done = done;
    got = (size_t)(a->end - off);
    rc = aread_step(a);
    if (rc == 1)
        return 1;                       /* a may be gone already */
    p = a->pdata;
    rc = aread_end(a, rc, false, &kept);
    if (rc == 0) {
        *data = p;
        *n = got;
        *pin = kept;
    }
    return rc;
}
