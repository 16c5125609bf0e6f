/* SPDX-License-Identifier: MIT */
/*
 * The epoch iterator: which samples one partition (rank, worker) reads in
 * an epoch, in which order, and which shards to prefetch.
 *
 * The epoch stream.  The shards are put in an order shuffled by (seed,
 * epoch) and their samples concatenated: N positions.  With padding (the
 * default) the stream is extended past N by wrapping around, so that
 * every rank gets M = ceil(N / world_size) positions; with drop_last,
 * M = floor(N / world_size) and the tail is not read.  Rank r owns the
 * contiguous span [r*M, (r+1)*M); worker w of K owns [r*M + w*M/K,
 * r*M + (w+1)*M/K).  Spans are contiguous, so each worker reads whole
 * shards (at most two partial ones) and the union over the workers is
 * the rank's span whatever K is.
 *
 * The shuffle buffer.  Positions of the span enter a buffer of
 * shuffle_buffer slots in stream order; each step emits a slot chosen by
 * a generator seeded with (seed, epoch, span) and refills it with the
 * next position.  The buffer holds positions, not data, so resuming at
 * position P replays P steps without any I/O, and the sample is read
 * only when it is emitted.
 *
 * Prefetch.  Ahead of the buffer's intake, the indexes of the next
 * `prefetch` shards of the span, and the data of the next `prefetch`
 * shards' worth of samples (at most prefetch_bytes), are hinted to the
 * cache, behind demand reads.  Data is hinted as byte ranges of the tars
 * (tfs_file_prefetch), an eighth of the window at a time: only the part a
 * partition reads, so workers sharing a shard do not each fetch all of
 * it, and no single call queues a whole shard.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <xxhash.h>

#include "common/util.h"
#include "pack/pack_int.h"
#include "tierfs/cache.h"
#include "tierfs/log.h"

/* An option left unset: sized from the RAM tier (see above). */
#define IT_AUTO UINT64_MAX
#define IT_WINDOW_MAX ((uint64_t)32 << 20)  /* prefetch_bytes, at most */
#define IT_BUFFER_MIN 16                     /* shuffle_buffer, sized */
#define IT_BUFFER_MAX 1000

struct tfs_pack_iter {
    struct tfs_pack *p;                 /* borrowed */
    /* options, used from the next start */
    uint64_t         seed;
    bool             shuffle;
    uint64_t         buffer;            /* shuffle buffer slots; AUTO */
    uint64_t         rank;
    uint64_t         world;
    uint64_t         worker;
    uint64_t         workers;
    bool             drop_last;
    uint64_t         prefetch;          /* shards ahead (indexes, data) */
    uint64_t         prefetch_bytes;    /* data hinted ahead, at most; AUTO */
    bool             warn_ram;          /* log a RAM tier short of need */
    /* the epoch */
    bool             started;
    uint64_t         epoch;
    uint64_t         n;                 /* samples in the dataset */
    size_t           n_shards;
    size_t          *order;             /* owned: shard permutation */
    uint64_t        *cum;               /* owned: samples before order[t] */
    uint64_t         a;                 /* this partition's span [a, b) */
    uint64_t         b;
    uint64_t         fill;              /* next position into the buffer */
    uint64_t        *buf;               /* owned: positions buffered */
    size_t           n_buf;
    size_t           cap_buf;
    uint64_t         buffer_used;       /* shuffle_buffer of this epoch */
    uint64_t         rng;
    uint64_t         position;          /* emitted this epoch */
    uint64_t         window;            /* positions hinted ahead; 0: off */
    uint64_t         hint_pos;          /* data hinted up to here */
    uint64_t         hint_visit;        /* next visit to hint the index of */
    uint64_t         fill_visit;        /* visit of the position fill */
    uint64_t         last_visit;        /* visit of position b - 1 */
};

int tfs_pack_iter_create(struct tfs_pack *p, struct tfs_pack_iter **out)
{
    struct tfs_pack_iter *it = tfs_calloc(1, sizeof(*it));

    if (it == NULL)
        return -ENOMEM;
    it->p = p;
    it->shuffle = true;
    it->buffer = IT_AUTO;
    it->world = 1;
    it->workers = 1;
    it->prefetch = 2;
    it->prefetch_bytes = IT_AUTO;
    it->warn_ram = true;
    *out = it;
    return 0;
}

void tfs_pack_iter_close(struct tfs_pack_iter *it)
{
    if (it == NULL)
        return;
    tfs_free(it->order);
    tfs_free(it->cum);
    tfs_free(it->buf);
    tfs_free(it);
}

#define ITER_OPT(name, kind, field, max)                                   \
    {name, kind, offsetof(struct tfs_pack_iter, field), 0, max, NULL, NULL}

/* The options of tfs_pack_iter_set (pack.h). */
static const struct tfs_opt_spec iter_opts[] = {
    ITER_OPT("seed", TFS_OPT_U64, seed, TFS_OPT_NOMAX),
    ITER_OPT("shuffle", TFS_OPT_BOOL, shuffle, 1),
    ITER_OPT("shuffle_buffer", TFS_OPT_U64, buffer, 1u << 26),
    ITER_OPT("rank", TFS_OPT_U64, rank, 1u << 24),
    ITER_OPT("world_size", TFS_OPT_U64, world, 1u << 24),
    ITER_OPT("worker", TFS_OPT_U64, worker, 1u << 16),
    ITER_OPT("num_workers", TFS_OPT_U64, workers, 1u << 16),
    ITER_OPT("drop_last", TFS_OPT_BOOL, drop_last, 1),
    ITER_OPT("prefetch", TFS_OPT_U64, prefetch, 1024),
    ITER_OPT("prefetch_bytes", TFS_OPT_U64, prefetch_bytes, 1ull << 48),
    ITER_OPT("warn_ram", TFS_OPT_BOOL, warn_ram, 1),
};

int tfs_pack_iter_set(struct tfs_pack_iter *it, const char *name,
                      const char *value)
{
    return tfs_opt_apply("pack iterator", iter_opts,
                         TFS_ARRAY_LEN(iter_opts), it, name, value);
}

/* [a, b) of this partition over a stream of n samples. */
static int it_span(const struct tfs_pack_iter *it, uint64_t n, uint64_t *a,
                   uint64_t *b)
{
    uint64_t per_rank;

    if (it->world == 0 || it->rank >= it->world || it->workers == 0 ||
        it->worker >= it->workers)
        return tfs_err(-EINVAL, "partition rank %llu of %llu, worker %llu "
                       "of %llu", (unsigned long long)it->rank,
                       (unsigned long long)it->world,
                       (unsigned long long)it->worker,
                       (unsigned long long)it->workers);
    per_rank = it->drop_last ? n / it->world
                             : (n + it->world - 1) / it->world;
    *a = it->rank * per_rank + per_rank * it->worker / it->workers;
    *b = it->rank * per_rank + per_rank * (it->worker + 1) / it->workers;
    return 0;
}

int tfs_pack_iter_length(const struct tfs_pack_iter *it, uint64_t *n)
{
    uint64_t a = 0;                     /* it_span sets both on success */
    uint64_t b = 0;
    int rc = it_span(it, tfs_pack_samples(it->p), &a, &b);

    if (rc == 0)
        *n = b - a;
    return rc;
}

uint64_t tfs_pack_iter_position(const struct tfs_pack_iter *it)
{
    return it->position;
}

/* A generator state from (seed, epoch, what, x, y). */
static uint64_t it_seed(uint64_t seed, uint64_t epoch, uint64_t what,
                        uint64_t x, uint64_t y)
{
    unsigned char b[40];

    tfs_put_le64(b, seed);
    tfs_put_le64(b + 8, epoch);
    tfs_put_le64(b + 16, what);
    tfs_put_le64(b + 24, x);
    tfs_put_le64(b + 32, y);
    return XXH3_64bits(b, sizeof(b));
}

/* The shard order of the epoch and its prefix sums. */
static int it_order(struct tfs_pack_iter *it)
{
    uint64_t state = it_seed(it->seed, it->epoch, 1, 0, 0);
    size_t s = it->n_shards;

    tfs_free(it->order);
    tfs_free(it->cum);
    it->order = tfs_malloc((s ? s : 1) * sizeof(*it->order));
    it->cum = tfs_malloc((s + 1) * sizeof(*it->cum));
    if (it->order == NULL || it->cum == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < s; i++)
        it->order[i] = i;
    for (size_t i = s; it->shuffle && i > 1; i--) {
        size_t j = (size_t)pack_below(&state, i);
        size_t t = it->order[i - 1];
        it->order[i - 1] = it->order[j];
        it->order[j] = t;
    }
    it->cum[0] = 0;
    for (size_t t = 0; t < s; t++)
        it->cum[t + 1] = it->cum[t] + tfs_pack_shard_samples(it->p,
                                                             it->order[t]);
    return 0;
}

/* Slot t of the shard order holding stream offset q (0 <= q < n). */
static size_t it_slot(const struct tfs_pack_iter *it, uint64_t q)
{
    size_t lo = 0;
    size_t hi = it->n_shards;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (it->cum[mid] <= q)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Shard visits are numbered along the extended stream (wraps included). */
static uint64_t it_visit(const struct tfs_pack_iter *it, uint64_t q)
{
    return (q / it->n) * it->n_shards + it_slot(it, q % it->n);
}

/* Hint the data of stream positions [from, to), shard by shard. */
static void it_hint_data(struct tfs_pack_iter *it, uint64_t from,
                         uint64_t to)
{
    while (from < to) {
        uint64_t v = it_visit(it, from);
        size_t t = (size_t)(v % it->n_shards);
        uint64_t start = (v / it->n_shards) * it->n + it->cum[t];
        uint64_t end = TFS_MIN(start + (it->cum[t + 1] - it->cum[t]), to);

        (void)tfs_pack_hint_data(it->p, it->order[t], from - start,
                                 end - start);
        from = end;
    }
}

/*
 * Keep the cache ahead of the buffer's intake: the indexes of the next
 * `prefetch` shard visits, and the data of the next `window` positions,
 * an eighth of the window at a time and at most two eighths per step of
 * the intake, so the window fills over the first few samples (the cache
 * takes and pre-faults a buffer per block hinted, on this thread: a
 * whole window at once would delay the first sample).
 */
static void it_hint(struct tfs_pack_iter *it)
{
    uint64_t step = TFS_MAX(it->window / 8, (uint64_t)1);
    uint64_t want;
    uint64_t target;

    if (it->window == 0 || it->b == it->a)
        return;
    want = TFS_MIN(it->fill_visit + it->prefetch, it->last_visit);
    for (; it->hint_visit <= want; it->hint_visit++)
        (void)tfs_pack_hint_index(it->p,
                                  it->order[it->hint_visit % it->n_shards]);
    target = TFS_MIN(TFS_MIN(it->b, it->fill + it->window),
                     it->hint_pos + 2 * step);
    if (target <= it->hint_pos ||
        (target < it->b && target < it->hint_pos + step))
        return;
    it_hint_data(it, it->hint_pos, target);
    it->hint_pos = target;
}

/* The next position into the buffer (fill < b). */
static uint64_t it_take(struct tfs_pack_iter *it)
{
    uint64_t q = it->fill++;

    if (it->fill < it->b) {
        it->fill_visit = it_visit(it, it->fill);
        if (it->started)
            it_hint(it);
    }
    return q;
}

/* The next position of the epoch's order; false at the end. */
static bool it_pop(struct tfs_pack_iter *it, uint64_t *q)
{
    size_t j;

    if (!it->shuffle || it->cap_buf <= 1) {
        if (it->fill >= it->b)
            return false;
        *q = it_take(it);
        return true;
    }
    while (it->n_buf < it->cap_buf && it->fill < it->b)
        it->buf[it->n_buf++] = it_take(it);
    if (it->n_buf == 0)
        return false;
    j = (size_t)pack_below(&it->rng, it->n_buf);
    *q = it->buf[j];
    if (it->fill < it->b)
        it->buf[j] = it_take(it);
    else
        it->buf[j] = it->buf[--it->n_buf];
    return true;
}

/* prefetch_bytes in force: as set, or a quarter of the RAM tier. */
static uint64_t it_prefetch_bytes(const struct tfs_pack_iter *it)
{
    uint64_t mem;

    if (it->prefetch_bytes != IT_AUTO)
        return it->prefetch_bytes;
    mem = tfs_cache_mem_limit(tfs_pack_cache(it->p));
    return TFS_MIN(mem / 4, IT_WINDOW_MAX);
}

/*
 * The RAM tier a stream needs with a shuffle buffer of `buffer` slots:
 * the prefetch window, 6 x buffer x the average sample, two blocks.
 */
static uint64_t it_need(const struct tfs_pack_iter *it, uint64_t buffer)
{
    uint64_t n = tfs_pack_samples(it->p);
    size_t shards = tfs_pack_shards(it->p);
    uint64_t block = tfs_cache_block_size(tfs_pack_cache(it->p));
    double per_sample;
    double window = 0;
    double buffered = 0;

    if (n == 0 || shards == 0)
        return 2 * block;
    per_sample = (double)tfs_pack_tar_bytes(it->p) / (double)n;
    if (it->prefetch > 0)
        window = TFS_MIN((double)it->prefetch * (double)n / (double)shards *
                             per_sample,
                         (double)it_prefetch_bytes(it));
    if (it->shuffle && buffer > 1)
        buffered = 6.0 * (double)TFS_MIN(buffer, n) * per_sample;
    return (uint64_t)(window + buffered) + 2 * block;
}

/*
 * shuffle_buffer in force: as set, or the slots that the RAM tier holds
 * after the window and two blocks, between IT_BUFFER_MIN and
 * IT_BUFFER_MAX.
 */
static uint64_t it_buffer(const struct tfs_pack_iter *it)
{
    uint64_t n = tfs_pack_samples(it->p);
    uint64_t mem = tfs_cache_mem_limit(tfs_pack_cache(it->p));
    uint64_t base = it_need(it, 0);
    double per_sample;
    double slots;

    if (it->buffer != IT_AUTO)
        return it->buffer;
    if (n == 0)
        return IT_BUFFER_MAX;
    per_sample = (double)tfs_pack_tar_bytes(it->p) / (double)n;
    if (per_sample <= 0)
        return IT_BUFFER_MAX;
    slots = mem > base ? (double)(mem - base) / (6.0 * per_sample) : 0;
    if (slots >= IT_BUFFER_MAX)
        return IT_BUFFER_MAX;
    return TFS_MAX((uint64_t)slots, (uint64_t)IT_BUFFER_MIN);
}

/* Reset the buffer for span [a, b); hinting starts at the intake. */
static int it_reset(struct tfs_pack_iter *it)
{
    uint64_t want;

    it->buffer_used = it_buffer(it);
    want = it->shuffle ? TFS_MIN(it->buffer_used, it->b - it->a) : 0;

    tfs_free(it->buf);
    it->buf = tfs_malloc((size_t)(want ? want : 1) * sizeof(*it->buf));
    if (it->buf == NULL)
        return -ENOMEM;
    it->cap_buf = (size_t)want;
    it->n_buf = 0;
    it->fill = it->a;
    it->position = 0;
    it->rng = it_seed(it->seed, it->epoch, 2, it->a, it->b);
    it->fill_visit = it->b > it->a ? it_visit(it, it->a) : 0;
    it->last_visit = it->b > it->a ? it_visit(it, it->b - 1) : 0;
    return 0;
}

/* The earliest position still to be read (after a fast-forward). */
static uint64_t it_first_needed(const struct tfs_pack_iter *it)
{
    uint64_t low = it->fill;

    for (size_t i = 0; i < it->n_buf; i++)
        low = TFS_MIN(low, it->buf[i]);
    return low;
}

/*
 * Positions to keep hinted ahead: `prefetch` shards' worth of samples,
 * at most prefetch_bytes of them (by the dataset's average sample).
 */
static uint64_t it_window(const struct tfs_pack_iter *it)
{
    uint64_t bytes = it_prefetch_bytes(it);
    double per_shard;
    double per_sample;
    double w;

    if (it->prefetch == 0 || it->n == 0 || bytes == 0)
        return 0;
    per_shard = (double)it->n / (double)it->n_shards;
    per_sample = (double)tfs_pack_tar_bytes(it->p) / (double)it->n;
    w = TFS_MIN((double)it->prefetch * per_shard,
                (double)bytes / per_sample);
    return w < 1 ? 1 : (uint64_t)w;
}

uint64_t tfs_pack_iter_ram_need(const struct tfs_pack_iter *it)
{
    return it_need(it, it_buffer(it));
}

/* Say once per process when the RAM tier is smaller than a stream needs. */
static void it_check_ram(const struct tfs_pack_iter *it)
{
    static atomic_bool warned;
    struct tfs_cache *c = tfs_pack_cache(it->p);
    uint64_t need = it_need(it, it->buffer_used);
    uint64_t have = tfs_cache_mem_limit(c);
    char a[32];
    char b[32];

    if (!it->warn_ram || have >= need || atomic_exchange(&warned, true))
        return;
    TFS_WARN("pack: the RAM tier (mem_cache %s) is smaller than this "
             "epoch stream needs (about %s: the prefetch window and the "
             "blocks of the samples in a shuffle buffer of %llu); blocks "
             "will be read more than once: raise mem_cache",
             tfs_fmt_bytes(a, sizeof(a), (double)have),
             tfs_fmt_bytes(b, sizeof(b), (double)need),
             (unsigned long long)it->buffer_used);
}

int tfs_pack_iter_start(struct tfs_pack_iter *it, uint64_t epoch,
                        uint64_t position)
{
    uint64_t q;
    int rc;

    it->started = false;
    it->epoch = epoch;
    it->n = tfs_pack_samples(it->p);
    it->n_shards = tfs_pack_shards(it->p);
    rc = it_span(it, it->n, &it->a, &it->b);
    if (rc == 0 && position > it->b - it->a)
        rc = tfs_err(-ERANGE, "position %llu past the %llu samples of "
                     "this partition", (unsigned long long)position,
                     (unsigned long long)(it->b - it->a));
    if (rc == 0)
        rc = it_order(it);
    if (rc == 0)
        rc = it_reset(it);
    if (rc < 0)
        return rc;
    while (it->position < position && it_pop(it, &q))
        it->position++;
    it->window = it_window(it);
    it->hint_pos = it_first_needed(it);
    it->hint_visit = it->hint_pos < it->b ? it_visit(it, it->hint_pos)
                                          : it->last_visit + 1;
    it->started = true;
    it_check_ram(it);
    it_hint(it);
    return 0;
}

int tfs_pack_iter_next(struct tfs_pack_iter *it, struct tfs_pack_sample *s,
                       bool *got)
{
    uint64_t q;
    size_t t;
    int rc;

    *got = false;
    if (!it->started)
        return tfs_err(-EINVAL, "iterator not started");
    if (!it_pop(it, &q))
        return 0;
    it->position++;
    q %= it->n;
    t = it_slot(it, q);
    rc = tfs_pack_fill(it->p, it->order[t], q - it->cum[t], s);
    *got = rc == 0;
    return rc;
}

int tfs_pack_iter_next_info(struct tfs_pack_iter *it,
                            struct tfs_pack_sample *s, char *names,
                            size_t names_size, uint64_t *sizes,
                            size_t max_fields, struct tfs_pack_desc *d,
                            bool *got)
{
    size_t len = 0;
    size_t n = 0;
    bool have = false;
    int rc = tfs_pack_iter_next(it, s, &have);

    *got = false;
    if (rc < 0 || !have)
        return rc;
    rc = tfs_pack_sample_info(s, names, names_size, &len, sizes, max_fields,
                              &n);
    if (rc < 0 && rc != -ENOSPC)
        return rc;
    d->index = tfs_pack_sample_index(s);
    d->shard = tfs_pack_sample_shard(s);
    d->names_len = len;
    d->n_fields = n;
    d->described = rc == 0;
    *got = true;
    return 0;
}
