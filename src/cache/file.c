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
};

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
    if (f == NULL)
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
    if (*ra_to > *ra_from)
        f->ra_end = *ra_to;
    pthread_mutex_unlock(&f->lock);
}

static void file_prefetch(struct tfs_file *f, uint64_t from, uint64_t to)
{
    struct tfs_cache *c = f->c;
    uint64_t bs = c->cfg.block_size;

    for (uint64_t b = from / bs; b * bs < to && b < f->n_blocks; b++) {
        struct tfs_block_ref r;
        tfs_block_ref_init(c, &r, f->key, &f->st, b);
        tfs_cache_block_prefetch(c, &r);
    }
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
    if (len > 0 && off < f->st.size &&
        off / bs != (off + TFS_MIN((uint64_t)len, f->st.size - off) - 1) / bs)
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
