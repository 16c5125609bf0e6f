/* SPDX-License-Identifier: MIT */
/*
 * Packing and reading back through the cache: every byte round-trips;
 * epoch orders are deterministic and partition the dataset exactly; a
 * resumed epoch continues where it stopped; damaged shards, headers,
 * data and indexes fail with the shard and offset named, and nothing is
 * skipped; a re-run keeps finished shards; every failed allocation gives
 * -ENOMEM.  The packed dataset lives in a temporary directory, or with
 * TFS_TEST_REMOTE=s3://bucket/prefix under a fresh prefix on S3.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "pack/pack_int.h"
#include "tierfs/cache.h"
#include "tierfs/mem.h"
#include "tierfs/pack.h"
#include "tierfs/store.h"

#define N_SAMPLES  120
#define MAX_FIELDS 4

struct exp_sample {
    char   key[400];
    size_t n;
    char   field[MAX_FIELDS][16];
    size_t size[MAX_FIELDS];
    int    seed[MAX_FIELDS];
};

static struct exp_sample exp_[N_SAMPLES];
static char srcdir[64];
static char dst_uri[300];
static char dst_dir[64];                /* "" on S3 */
static struct tfs_store *src;
static struct tfs_store *dst;
/* the reader */
static struct tfs_store *rst;
static struct tfs_cache *rcache;
static struct tfs_pack *rp;

static void fill(unsigned char *p, size_t len, int seed)
{
    uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* Sample i: jpg (0..3000 bytes), cls, sometimes meta.json or an empty
 * txt; a few with long names (prefix field, pax header). */
static void make_expect(size_t i)
{
    struct exp_sample *e = &exp_[i];

    if (i == 7)
        snprintf(e->key, sizeof(e->key), "d0/%0150d/s%04zu", 0, i);
    else if (i == 11)
        snprintf(e->key, sizeof(e->key), "d0/s%0200zu", i);
    else
        snprintf(e->key, sizeof(e->key), "d%zu/s%04zu", i / 30, i);
    e->n = 0;
    snprintf(e->field[e->n], 16, "jpg");
    e->size[e->n++] = (i * 137) % 3000 + (i == 5 ? 70000 : 0);
    snprintf(e->field[e->n], 16, "cls");
    e->size[e->n++] = 1 + i % 3;
    if (i % 5 == 0) {
        snprintf(e->field[e->n], 16, "meta.json");
        e->size[e->n++] = 40;
    }
    if (i % 17 == 3) {
        snprintf(e->field[e->n], 16, "txt");
        e->size[e->n++] = 0;
    }
    for (size_t f = 0; f < e->n; f++)
        e->seed[f] = (int)(i * 10 + f);
}

static void write_source(void)
{
    char name[500];
    unsigned char *buf = malloc(100000);

    for (size_t i = 0; i < N_SAMPLES; i++) {
        make_expect(i);
        for (size_t f = 0; f < exp_[i].n; f++) {
            snprintf(name, sizeof(name), "%.400s.%.15s", exp_[i].key,
                     exp_[i].field[f]);
            fill(buf, exp_[i].size[f], exp_[i].seed[f]);
            CHECK_OK(tfs_store_put(src, name, buf, exp_[i].size[f], NULL));
        }
    }
    free(buf);
}

static void setup_at(bool local)
{
    static int n;
    const char *s3 = local ? NULL : getenv("TFS_TEST_REMOTE");
    char uri[128];

    snprintf(srcdir, sizeof(srcdir), "/tmp/tfs-pack-src-XXXXXX");
    CHECK(mkdtemp(srcdir) != NULL);
    snprintf(uri, sizeof(uri), "file://%s?fsync=0", srcdir);
    CHECK_OK(tfs_store_open(&src, uri, NULL));
    dst_dir[0] = '\0';
    if (s3 != NULL && s3[0] != '\0') {
        snprintf(dst_uri, sizeof(dst_uri), "%s/p%d-%d-%d", s3,
                 (int)getpid(), (int)(tfs_rand_u64() % 100000), n++);
    } else {
        snprintf(dst_dir, sizeof(dst_dir), "/tmp/tfs-pack-dst-XXXXXX");
        CHECK(mkdtemp(dst_dir) != NULL);
        snprintf(dst_uri, sizeof(dst_uri), "file://%s", dst_dir);
    }
    CHECK_OK(tfs_store_open(&dst, dst_uri, dst_dir[0] ? "fsync=0" : NULL));
    write_source();
}

static void setup(void)
{
    setup_at(false);
}

static int remove_page(void *arg, const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++)
        tfs_store_remove(arg, pg->entries[i].key);
    return 0;
}

static void teardown(void)
{
    char cmd[200];

    CHECK_OK(tfs_store_list_all(dst, "", NULL, remove_page, dst));
    tfs_store_close(dst);
    tfs_store_close(src);
    dst = src = NULL;
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", srcdir, dst_dir);
    CHECK(system(cmd) == 0);
}

static struct tfs_pack_progress last_pr;

static void on_progress(void *arg, const struct tfs_pack_progress *pr)
{
    (void)arg;
    last_pr = *pr;
}

static void do_pack(uint64_t shard_size, bool shuffle)
{
    struct tfs_pack_write_opts o = {.shard_size = shard_size,
                                    .shuffle = shuffle, .shuffle_seed = 5,
                                    .jobs = 4, .progress = on_progress};

    CHECK_OK(tfs_pack_write(src, "", dst, "", &o));
    CHECK(last_pr.done);
}

static void open_reader(const char *verify)
{
    CHECK_OK(tfs_store_open(&rst, dst_uri, NULL));
    CHECK_OK(tfs_cache_create(&rcache));
    CHECK_OK(tfs_cache_set(rcache, "mem_cache", "64M"));
    CHECK_OK(tfs_cache_set(rcache, "block_size", "64K"));
    CHECK_OK(tfs_cache_open(rcache, rst));
    CHECK_OK(tfs_pack_create(&rp));
    CHECK_OK(tfs_pack_set(rp, "verify", verify));
    CHECK_OK(tfs_pack_set(rp, "max_indexes", "2"));
    CHECK_OK(tfs_pack_open(rp, rcache, ""));
    CHECK_RC(tfs_pack_set(rp, "verify", verify), -EBUSY);
}

static void close_reader(void)
{
    tfs_pack_close(rp);
    tfs_cache_close(rcache);
    tfs_store_close(rst);
    rp = NULL;
    rcache = NULL;
    rst = NULL;
}

static const struct exp_sample *find_expect(const char *key)
{
    for (size_t i = 0; i < N_SAMPLES; i++)
        if (strcmp(exp_[i].key, key) == 0)
            return &exp_[i];
    return NULL;
}

/* Every field of s has exactly the bytes it was packed from. */
static void check_sample(struct tfs_pack_sample *s)
{
    char names[2048];
    uint64_t sizes[8];
    unsigned char want[80000];
    unsigned char got[80000];
    const struct exp_sample *e;
    const char *f;
    size_t nlen = 0;
    size_t n = 0;

    CHECK_OK(tfs_pack_sample_info(s, names, sizeof(names), &nlen, sizes, 8,
                                  &n));
    CHECK(nlen > strlen(names) + n);
    CHECK_EQ(names[nlen - 1], '\0');
    e = find_expect(names);
    CHECK(e != NULL);
    CHECK_EQ(n, e->n);
    CHECK_EQ(tfs_pack_sample_fields(s), n);
    f = names + strlen(names) + 1;
    for (size_t i = 0; i < n; i++, f += strlen(f) + 1) {
        size_t k = 0;
        while (k < e->n && strcmp(e->field[k], f) != 0)
            k++;
        CHECK(k < e->n);
        CHECK_EQ(sizes[i], e->size[k]);
        fill(want, e->size[k], e->seed[k]);
        memset(got, 0xee, sizeof(got));
        CHECK_OK(tfs_pack_sample_read(s, i, got, sizeof(got)));
        CHECK(memcmp(got, want, e->size[k]) == 0);
    }
}

TEST(roundtrip)
{
    struct tfs_pack_sample *s = NULL;
    char names[8];
    uint64_t sizes[1];
    size_t n;

    setup();
    do_pack(64 << 10, false);
    CHECK_EQ(last_pr.samples_total, N_SAMPLES);
    CHECK(last_pr.shards_total >= 4);
    open_reader("1");
    CHECK_EQ(tfs_pack_samples(rp), N_SAMPLES);
    CHECK_EQ(tfs_pack_shards(rp), last_pr.shards_total);
    CHECK_STR(tfs_pack_shard_name(rp, 1), "shard-000001.tar");
    CHECK_OK(tfs_pack_sample_create(&s));
    CHECK_RC(tfs_pack_sample_info(s, names, 8, &n, sizes, 1, &n), -EINVAL);
    for (uint64_t i = 0; i < N_SAMPLES; i++) {
        CHECK_OK(tfs_pack_get(rp, i, s));
        CHECK_EQ(tfs_pack_sample_index(s), i);
        check_sample(s);
    }
    CHECK_RC(tfs_pack_get(rp, N_SAMPLES, s), -ERANGE);
    CHECK_OK(tfs_pack_get(rp, 0, s));
    CHECK_RC(tfs_pack_sample_info(s, names, 2, &n, sizes, 1, &n), -ENOSPC);
    CHECK_RC(tfs_pack_sample_read(s, 9, names, 8), -ERANGE);
    CHECK_RC(tfs_pack_sample_read(s, 0, names, 0), -ENOSPC);
    tfs_pack_sample_close(s);
    close_reader();
    teardown();
}

/* Packed with a shuffled sample order: still every byte. */
TEST(roundtrip_shuffled)
{
    struct tfs_pack_sample *s = NULL;

    setup();
    do_pack(32 << 10, true);
    open_reader("1");
    CHECK_OK(tfs_pack_sample_create(&s));
    for (uint64_t i = 0; i < N_SAMPLES; i++) {
        CHECK_OK(tfs_pack_get(rp, i, s));
        check_sample(s);
    }
    tfs_pack_sample_close(s);
    close_reader();
    teardown();
}

/* ---- epochs ---- */

/* Global indices in the order partition (opts) yields them. */
static size_t run_iter(const char *const *opts, uint64_t epoch,
                       uint64_t pos, uint64_t *out, size_t max)
{
    struct tfs_pack_iter *it = NULL;
    struct tfs_pack_sample *s = NULL;
    uint64_t len = 0;
    size_t n = 0;
    bool got = true;

    CHECK_OK(tfs_pack_iter_create(rp, &it));
    CHECK_OK(tfs_pack_sample_create(&s));
    for (; opts != NULL && opts[0] != NULL; opts += 2)
        CHECK_OK(tfs_pack_iter_set(it, opts[0], opts[1]));
    CHECK_OK(tfs_pack_iter_start(it, epoch, pos));
    CHECK_OK(tfs_pack_iter_length(it, &len));
    while (got) {
        CHECK_OK(tfs_pack_iter_next(it, s, &got));
        if (got) {
            CHECK(n < max);
            out[n++] = tfs_pack_sample_index(s);
        }
    }
    CHECK_EQ(n + pos, len);
    CHECK_EQ(tfs_pack_iter_position(it), len);
    tfs_pack_sample_close(s);
    tfs_pack_iter_close(it);
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

TEST(order_deterministic)
{
    static const char *const seq[] = {"shuffle", "0", NULL};
    static const char *const shuf[] = {"seed", "7", "shuffle_buffer", "16",
                                       NULL};
    uint64_t a[N_SAMPLES];
    uint64_t b[N_SAMPLES];

    setup();
    do_pack(16 << 10, false);
    open_reader("1");
    CHECK_EQ(run_iter(seq, 0, 0, a, N_SAMPLES), N_SAMPLES);
    for (size_t i = 0; i < N_SAMPLES; i++)
        CHECK_EQ(a[i], i);                        /* dataset order */
    run_iter(shuf, 3, 0, a, N_SAMPLES);
    run_iter(shuf, 3, 0, b, N_SAMPLES);
    CHECK(memcmp(a, b, sizeof(a)) == 0);          /* same (seed, epoch) */
    run_iter(shuf, 4, 0, b, N_SAMPLES);
    CHECK(memcmp(a, b, sizeof(a)) != 0);          /* another epoch */
    qsort(a, N_SAMPLES, sizeof(a[0]), cmp_u64);
    for (size_t i = 0; i < N_SAMPLES; i++)
        CHECK_EQ(a[i], i);                        /* each once */
    close_reader();
    teardown();
}

/*
 * tfs_pack_iter_next_info: the same order as tfs_pack_iter_next, and the
 * description tfs_pack_sample_info and the getters give; buffers too
 * small give described 0 with the sizes needed, the sample still filled.
 */
TEST(next_info)
{
    static const char *const shuf[] = {"seed", "7", "shuffle_buffer", "16",
                                       NULL};
    uint64_t order[N_SAMPLES];
    struct tfs_pack_iter *it = NULL;
    struct tfs_pack_sample *s = NULL;
    struct tfs_pack_desc d;
    bool got = true;
    char names[2048];
    char names2[2048];
    uint64_t sizes[8];
    uint64_t sizes2[8];
    size_t n = 0;
    int rc;

    setup();
    do_pack(16 << 10, false);
    open_reader("1");
    CHECK_EQ(run_iter(shuf, 2, 0, order, N_SAMPLES), N_SAMPLES);
    CHECK_OK(tfs_pack_iter_create(rp, &it));
    CHECK_OK(tfs_pack_sample_create(&s));
    for (const char *const *o = shuf; o[0] != NULL; o += 2)
        CHECK_OK(tfs_pack_iter_set(it, o[0], o[1]));
    CHECK_RC(tfs_pack_iter_next_info(it, s, names, sizeof(names), sizes, 8,
                                     &d, &got), -EINVAL);   /* not started */
    CHECK(!got);
    CHECK_OK(tfs_pack_iter_start(it, 2, 0));
    while ((rc = tfs_pack_iter_next_info(it, s, names, sizeof(names), sizes,
                                         8, &d, &got)) == 0 && got) {
        size_t len2 = 0;
        size_t n2 = 0;

        CHECK(n < N_SAMPLES);
        CHECK_EQ(d.described, 1);
        CHECK_EQ(d.index, order[n]);
        CHECK_EQ(d.index, tfs_pack_sample_index(s));
        CHECK_EQ(d.shard, tfs_pack_sample_shard(s));
        CHECK_OK(tfs_pack_sample_info(s, names2, sizeof(names2), &len2,
                                      sizes2, 8, &n2));
        CHECK_EQ(d.names_len, len2);
        CHECK_EQ(d.n_fields, n2);
        CHECK(memcmp(names, names2, len2) == 0);
        CHECK(memcmp(sizes, sizes2, n2 * sizeof(uint64_t)) == 0);
        check_sample(s);
        n++;
    }
    CHECK_EQ(rc, 0);
    CHECK(!got);
    CHECK_EQ(n, N_SAMPLES);
    CHECK_OK(tfs_pack_iter_start(it, 2, 0));
    got = false;
    CHECK_OK(tfs_pack_iter_next_info(it, s, names, 2, sizes, 8, &d, &got));
    CHECK(got);
    CHECK_EQ(d.described, 0);
    CHECK(d.names_len > 2);
    CHECK_EQ(d.index, order[0]);
    check_sample(s);                    /* filled all the same */
    tfs_pack_sample_close(s);
    tfs_pack_iter_close(it);
    close_reader();
    teardown();
}

/* All the samples the ranks (and their workers) read in one epoch. */
static size_t run_ranks(unsigned world, unsigned workers, bool drop_last,
                        uint64_t epoch, uint64_t *all, size_t *per_rank)
{
    size_t total = 0;

    for (unsigned r = 0; r < world; r++) {
        size_t in_rank = 0;
        for (unsigned w = 0; w < workers; w++) {
            char rs[16], ws[16], rk[16], wk[16];
            const char *opts[] = {"seed", "11", "rank", rk, "world_size", ws,
                                  "worker", wk, "num_workers", rs,
                                  "drop_last", drop_last ? "1" : "0",
                                  "shuffle_buffer", "8", NULL};
            snprintf(rk, sizeof(rk), "%u", r);
            snprintf(ws, sizeof(ws), "%u", world);
            snprintf(wk, sizeof(wk), "%u", w);
            snprintf(rs, sizeof(rs), "%u", workers);
            in_rank += run_iter(opts, epoch, 0, all + total + in_rank,
                                4 * N_SAMPLES);
        }
        per_rank[r] = in_rank;
        total += in_rank;
    }
    return total;
}

TEST(partitions)
{
    uint64_t all[4 * N_SAMPLES];
    uint64_t ref[4 * N_SAMPLES];
    size_t per[8];

    setup();
    do_pack(16 << 10, false);
    open_reader("1");
    for (unsigned world = 1; world <= 7; world += 2) {
        size_t m = (N_SAMPLES + world - 1) / world;
        size_t n = run_ranks(world, 1, false, 2, ref, per);
        /* Padding: every rank ceil(N/W); all samples at least once. */
        CHECK_EQ(n, m * world);
        for (unsigned r = 0; r < world; r++)
            CHECK_EQ(per[r], m);
        qsort(ref, n, sizeof(ref[0]), cmp_u64);
        for (size_t i = 0, k = 0; i < N_SAMPLES; i++) {
            CHECK(k < n && ref[k] == i);
            while (k < n && ref[k] == i)
                k++;
        }
        /* Any number of workers: the same samples per rank. */
        for (unsigned workers = 2; workers <= 4; workers++) {
            CHECK_EQ(run_ranks(world, workers, false, 2, all, per), n);
            qsort(all, n, sizeof(all[0]), cmp_u64);
            CHECK(memcmp(all, ref, n * sizeof(all[0])) == 0);
        }
        /* drop_last: floor(N/W) each, disjoint. */
        n = run_ranks(world, 3, true, 2, all, per);
        CHECK_EQ(n, (N_SAMPLES / world) * world);
        qsort(all, n, sizeof(all[0]), cmp_u64);
        for (size_t i = 1; i < n; i++)
            CHECK(all[i] != all[i - 1]);
    }
    close_reader();
    teardown();
}

TEST(resume)
{
    static const char *const opts[] = {"seed", "3", "rank", "1",
                                       "world_size", "2", "shuffle_buffer",
                                       "20", NULL};
    uint64_t full[N_SAMPLES];
    uint64_t rest[N_SAMPLES];
    size_t n;
    struct tfs_pack_iter *it = NULL;

    setup();
    do_pack(16 << 10, false);
    open_reader("1");
    n = run_iter(opts, 5, 0, full, N_SAMPLES);
    CHECK_EQ(n, N_SAMPLES / 2);
    for (uint64_t pos = 0; pos <= n; pos += 13) {
        size_t k = run_iter(opts, 5, pos, rest, N_SAMPLES);
        CHECK_EQ(k, n - pos);
        CHECK(memcmp(rest, full + pos, k * sizeof(rest[0])) == 0);
    }
    CHECK_OK(tfs_pack_iter_create(rp, &it));
    CHECK_RC(tfs_pack_iter_next(it, NULL, &(bool){false}), -EINVAL);
    CHECK_OK(tfs_pack_iter_set(it, "world_size", "2"));
    CHECK_RC(tfs_pack_iter_start(it, 0, n + 1), -ERANGE);
    CHECK_OK(tfs_pack_iter_set(it, "rank", "2"));
    CHECK_RC(tfs_pack_iter_start(it, 0, 0), -EINVAL);
    CHECK_RC(tfs_pack_iter_set(it, "bogus", "1"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "unknown pack iterator option 'bogus'");
    CHECK_RC(tfs_pack_iter_set(it, "seed", "x"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "pack iterator option seed=x: expected a "
              "whole number");
    CHECK_RC(tfs_pack_iter_set(it, "prefetch", "1025"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "pack iterator option prefetch=1025: "
              "expected a whole number in 0..1024");
    CHECK_RC(tfs_pack_iter_set(it, "shuffle_buffer", "67108865"),
             TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "shuffle_buffer=67108865") != NULL);
    CHECK_RC(tfs_pack_iter_set(it, "drop_last", "2"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "pack iterator option drop_last=2: expected "
              "0 or 1");
    CHECK_OK(tfs_pack_iter_set(it, "shuffle_buffer", "67108864"));
    CHECK_OK(tfs_pack_iter_set(it, "drop_last", "yes"));
    tfs_pack_iter_close(it);
    close_reader();
    teardown();
}

/* Bytes of key in the cache, waiting up to wait_ms for want of them. */
static uint64_t cached(const char *key, uint64_t want, int wait_ms)
{
    uint64_t n = 0;

    for (int t = 0; t <= wait_ms; t += 10) {
        CHECK_OK(tfs_cache_cached_bytes(rcache, key, &n));
        if (n >= want)
            break;
        usleep(10000);
    }
    return n;
}

/* Iterating hints what comes next: the indexes of `prefetch` shards
 * ahead, and the data of that many shards' worth of samples. */
TEST(prefetch_hints)
{
    struct tfs_pack_sample *s = NULL;
    struct tfs_pack_iter *it = NULL;
    struct tfs_stat st;
    bool got;

    setup();
    do_pack(16 << 10, false);
    CHECK_OK(tfs_store_stat(dst, "shard-000003.tar", &st));
    CHECK_OK(tfs_pack_sample_create(&s));
    for (int k = 0; k <= 3; k += 3) {
        open_reader("1");
        CHECK_OK(tfs_pack_iter_create(rp, &it));
        CHECK_OK(tfs_pack_iter_set(it, "shuffle", "0"));
        CHECK_OK(tfs_pack_iter_set(it, "prefetch", k ? "3" : "0"));
        CHECK_OK(tfs_pack_iter_start(it, 0, 0));
        for (int i = 0; i < 4; i++)
            CHECK_OK(tfs_pack_iter_next(it, s, &got));
        if (k == 0) {
            CHECK_EQ(cached("shard-000003.tar", 1, 100), 0);
            CHECK_EQ(cached("shard-000003.idx", 1, 100), 0);
        } else {
            CHECK_EQ(cached("shard-000003.tar", st.size, 5000), st.size);
            CHECK_EQ(cached("shard-000004.idx", 1, 5000) > 0, 1);
            CHECK_EQ(cached("shard-000009.tar", 1, 100), 0);
            CHECK_EQ(cached("shard-000009.idx", 1, 100), 0);
        }
        tfs_pack_sample_close(s);
        CHECK_OK(tfs_pack_sample_create(&s));
        tfs_pack_iter_close(it);
        close_reader();
    }
    tfs_pack_sample_close(s);
    /* A byte cap: one sample ahead, so the second shard waits. */
    open_reader("1");
    CHECK_OK(tfs_pack_iter_create(rp, &it));
    CHECK_OK(tfs_pack_iter_set(it, "shuffle", "0"));
    CHECK_OK(tfs_pack_iter_set(it, "prefetch_bytes", "1"));
    CHECK_OK(tfs_pack_iter_start(it, 0, 0));
    CHECK(cached("shard-000000.tar", 1, 5000) > 0);
    CHECK_EQ(cached("shard-000001.tar", 1, 100), 0);
    tfs_pack_iter_close(it);
    close_reader();
    teardown();
}

/* ---- damage ---- */

static unsigned char *get_object(const char *key, size_t *len)
{
    struct tfs_stat st;
    unsigned char *buf;
    size_t n = 0;

    CHECK_OK(tfs_store_stat(dst, key, &st));
    buf = malloc(st.size + 1);
    CHECK_OK(tfs_store_read(dst, key, buf, st.size, 0, NULL, &n));
    CHECK_EQ(n, st.size);
    *len = n;
    return buf;
}

static void put_object(const char *key, const void *buf, size_t len)
{
    CHECK_OK(tfs_store_put(dst, key, buf, len, NULL));
}

/* The index of shard i, parsed. */
static struct pack_index *shard_index(int i)
{
    char key[64];
    struct pack_index *x = NULL;
    size_t len;
    unsigned char *buf;

    snprintf(key, sizeof(key), "shard-%06d.idx", i);
    buf = get_object(key, &len);
    CHECK_OK(tfs_pack_index_parse(buf, len, true, &x));
    free(buf);
    return x;
}

static void flip(const char *key, uint64_t off)
{
    size_t len;
    unsigned char *buf = get_object(key, &len);

    buf[off] ^= 0x20;
    put_object(key, buf, len);
    free(buf);
}

/* Read every sample map-style; the failures' codes and details. */
static int read_all(int *rc_out, char *detail, size_t dlen)
{
    struct tfs_pack_sample *s = NULL;
    unsigned char buf[80000];
    int failed = 0;

    CHECK_OK(tfs_pack_sample_create(&s));
    for (uint64_t i = 0; i < N_SAMPLES; i++) {
        int rc = tfs_pack_get(rp, i, s);
        for (size_t f = 0; rc == 0 && f < tfs_pack_sample_fields(s); f++)
            rc = tfs_pack_sample_read(s, f, buf, sizeof(buf));
        if (rc < 0) {
            failed++;
            *rc_out = rc;
            snprintf(detail, dlen, "%s", tfs_errdetail());
        }
    }
    tfs_pack_sample_close(s);
    return failed;
}

static void expect_detail(const char *detail, const char *fmt,
                          unsigned long long off)
{
    char want[200];

    snprintf(want, sizeof(want), fmt, off);
    if (strstr(detail, want) == NULL)
        TEST_FAIL_("detail '%s' lacks '%s'", detail, want);
}

TEST(damaged_header)
{
    struct pack_index *x;
    char detail[600];
    uint64_t off;
    int rc = 0;

    setup();
    do_pack(16 << 10, false);
    x = shard_index(1);
    off = x->members[3].hdr_off;
    tfs_free(x);
    flip("shard-000001.tar", off + 2);            /* in the name */
    open_reader("1");
    CHECK_EQ(read_all(&rc, detail, sizeof(detail)), 1);
    CHECK_EQ(rc, TFS_ECORRUPT);
    expect_detail(detail, "shard-000001.tar at offset %llu: tar header",
                  (unsigned long long)off);
    CHECK(strstr(detail, "checksum mismatch") != NULL);
    close_reader();
    teardown();
}

TEST(damaged_data)
{
    struct pack_index *x;
    char detail[600];
    uint64_t off;
    int rc = 0;

    setup();
    do_pack(16 << 10, false);
    x = shard_index(2);
    off = x->members[0].data_off;
    CHECK(x->members[0].size > 0);
    tfs_free(x);
    flip("shard-000002.tar", off);
    open_reader("1");
    CHECK_EQ(read_all(&rc, detail, sizeof(detail)), 1);
    CHECK_EQ(rc, TFS_ECORRUPT);
    expect_detail(detail, "shard-000002.tar at offset %llu: the data of",
                  (unsigned long long)off);
    close_reader();
    /* Without verification the flipped byte is not noticed. */
    open_reader("0");
    CHECK_EQ(read_all(&rc, detail, sizeof(detail)), 0);
    close_reader();
    teardown();
}

TEST(truncated_shard)
{
    struct tfs_pack_sample *s = NULL;
    struct pack_index *x;
    unsigned char *buf;
    size_t len;
    char detail[600];
    int rc = 0;

    setup();
    do_pack(16 << 10, false);
    x = shard_index(3);
    buf = get_object("shard-000003.tar", &len);
    put_object("shard-000003.tar", buf, (size_t)x->members[2].data_off);
    open_reader("1");
    CHECK_EQ(read_all(&rc, detail, sizeof(detail)), (int)x->n_samples);
    CHECK_EQ(rc, TFS_ECORRUPT);
    expect_detail(detail, "shard-000003.tar is truncated at offset %llu",
                  (unsigned long long)x->members[2].data_off);
    /* The iterator reports it too, sample by sample, skipping nothing. */
    CHECK_OK(tfs_pack_sample_create(&s));
    {
        struct tfs_pack_iter *it = NULL;
        size_t ok = 0;
        size_t bad = 0;
        bool got = true;
        CHECK_OK(tfs_pack_iter_create(rp, &it));
        CHECK_OK(tfs_pack_iter_start(it, 0, 0));
        while (got || tfs_pack_iter_position(it) < N_SAMPLES) {
            rc = tfs_pack_iter_next(it, s, &got);
            ok += got;
            bad += rc < 0;
            CHECK(rc == 0 || rc == TFS_ECORRUPT);
            if (!got && rc == 0)
                break;
        }
        CHECK_EQ(bad, x->n_samples);
        CHECK_EQ(ok + bad, N_SAMPLES);
        tfs_pack_iter_close(it);
    }
    tfs_pack_sample_close(s);
    tfs_free(x);
    free(buf);
    close_reader();
    teardown();
}

TEST(index_mismatch)
{
    unsigned char *buf;
    size_t len;
    char detail[600];
    int rc = 0;

    setup();
    do_pack(16 << 10, false);
    buf = get_object("shard-000000.idx", &len);
    put_object("shard-000002.idx", buf, len);
    free(buf);
    open_reader("1");
    CHECK(read_all(&rc, detail, sizeof(detail)) > 0);
    CHECK_EQ(rc, TFS_ECORRUPT);
    CHECK(strstr(detail, "shard-000002.idx") != NULL);
    CHECK(strstr(detail, "index/shard mismatch") != NULL);
    close_reader();
    teardown();
}

/* An index and manifest that agree, over a tar that does not. */
TEST(tar_mismatch)
{
    unsigned char *a;
    unsigned char *b;
    size_t alen;
    size_t blen;
    char detail[600];
    int rc = 0;

    setup();
    do_pack(16 << 10, false);
    a = get_object("shard-000001.tar", &alen);
    b = get_object("shard-000002.tar", &blen);
    memcpy(a + 512 * 3, b + 512 * 3, TFS_MIN(alen, blen) / 2);
    put_object("shard-000001.tar", a, alen);
    free(a);
    free(b);
    open_reader("1");
    CHECK(read_all(&rc, detail, sizeof(detail)) > 0);
    CHECK_EQ(rc, TFS_ECORRUPT);
    CHECK(strstr(detail, "shard-000001.tar at offset") != NULL);
    close_reader();
    teardown();
}

/* ---- packing again ---- */

TEST(pack_resumes)
{
    unsigned char buf[4];
    size_t total;

    setup();
    do_pack(16 << 10, false);
    total = last_pr.shards_total;
    CHECK_EQ(last_pr.shards_kept, 0);
    do_pack(16 << 10, false);
    CHECK_EQ(last_pr.shards_kept, total);         /* nothing to do */
    CHECK_OK(tfs_store_remove(dst, "shard-000001.tar"));
    CHECK_OK(tfs_store_remove(dst, TFS_PACK_MANIFEST));
    do_pack(16 << 10, false);
    CHECK_EQ(last_pr.shards_kept, total - 1);
    /* A changed source file: only its shard is written again. */
    fill(buf, 3, 999);
    CHECK_OK(tfs_store_put(src, "d3/s0119.cls", buf, 3, NULL));
    exp_[119].seed[1] = 999;
    do_pack(16 << 10, false);
    CHECK_EQ(last_pr.shards_kept, total - 1);
    open_reader("1");
    {
        int rc = 0;
        char detail[600];
        CHECK_EQ(read_all(&rc, detail, sizeof(detail)), 0);
    }
    close_reader();
    /* A bigger shard size: fewer shards, the stale ones removed. */
    do_pack(1 << 20, false);
    CHECK_EQ(last_pr.shards_total, 1);
    CHECK_RC(tfs_store_stat(dst, "shard-000001.tar", &(struct tfs_stat){0}),
             -ENOENT);
    exp_[119].seed[1] = 119 * 10 + 1;
    teardown();
}

TEST(pack_refuses)
{
    struct tfs_pack_write_opts o = {.shard_size = 1 << 20, .jobs = 2};
    struct tfs_pack *p = NULL;

    setup();
    CHECK_OK(tfs_store_put(src, "d0/s0001.JPG", "x", 1, NULL));
    CHECK_RC(tfs_pack_write(src, "", dst, "", &o), TFS_EBADKEY);
    CHECK(strstr(tfs_errdetail(), "'jpg' twice") != NULL);
    CHECK_OK(tfs_store_remove(src, "d0/s0001.JPG"));
    CHECK_OK(tfs_store_put(src, "d0/README", "x", 1, NULL));
    CHECK_RC(tfs_pack_write(src, "", dst, "", &o), TFS_EBADKEY);
    CHECK(strstr(tfs_errdetail(), "d0/README") != NULL);
    CHECK_RC(tfs_pack_write(src, "nothing/", dst, "", &o), -ENOENT);
    o.shard_size = 1000;
    CHECK_RC(tfs_pack_write(src, "", dst, "", &o), -EINVAL);
    /* No manifest yet: not a dataset. */
    CHECK_OK(tfs_store_open(&rst, dst_uri, NULL));
    CHECK_OK(tfs_cache_create(&rcache));
    CHECK_OK(tfs_cache_open(rcache, rst));
    CHECK_OK(tfs_pack_create(&p));
    CHECK_RC(tfs_pack_set(p, "verify", "maybe"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "pack option verify=maybe: expected 0 or 1");
    CHECK_RC(tfs_pack_set(p, "max_indexes", "1048577"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "pack option max_indexes=1048577: expected a "
              "whole number in 0..1048576");
    CHECK_OK(tfs_pack_set(p, "max_indexes", "1048576"));
    CHECK_RC(tfs_pack_open(p, rcache, "sub"), -ENOENT);
    CHECK(strstr(tfs_errdetail(), "manifest.json") != NULL);
    tfs_pack_close(p);
    close_reader();
    teardown();
}

/* A file larger than the writer's in-memory limit is streamed, and a
 * sample larger than the shard size gets a shard of its own. */
TEST(pack_large_member)
{
    const size_t big = (64u << 20) + 12345;
    unsigned char *buf = malloc(big);
    unsigned char *back = malloc(big);
    struct tfs_pack_sample *s = NULL;
    size_t found = 0;

    setup_at(true);
    fill(buf, big, 77);
    CHECK_OK(tfs_store_put(src, "d9/big.bin", buf, big, NULL));
    do_pack(1 << 20, false);
    open_reader("1");
    CHECK_OK(tfs_pack_sample_create(&s));
    for (uint64_t i = 0; i < tfs_pack_samples(rp); i++) {
        char names[600];
        uint64_t sizes[4];
        size_t nlen;
        size_t n;
        CHECK_OK(tfs_pack_get(rp, i, s));
        CHECK_OK(tfs_pack_sample_info(s, names, sizeof(names), &nlen, sizes,
                                      4, &n));
        if (strcmp(names, "d9/big") != 0)
            continue;
        CHECK_EQ(sizes[0], big);
        CHECK_OK(tfs_pack_sample_read(s, 0, back, big));
        CHECK(memcmp(back, buf, big) == 0);
        CHECK_EQ(tfs_pack_sample_shard(s) + 1, tfs_pack_shards(rp));
        found++;
    }
    CHECK_EQ(found, 1);
    tfs_pack_sample_close(s);
    close_reader();
    free(buf);
    free(back);
    teardown();
}

/* ---- allocation failures ---- */

/* Pack, open, read an epoch; the first error. */
static int mem_round(void)
{
    struct tfs_pack_write_opts o = {.shard_size = 32 << 10, .jobs = 2};
    struct tfs_pack_sample *s = NULL;
    struct tfs_pack_iter *it = NULL;
    unsigned char buf[80000];
    bool got = true;
    int rc = tfs_pack_write(src, "d3/", dst, "m/", &o);

    rst = NULL;
    if (rc == 0)
        rc = tfs_store_open(&rst, dst_uri, NULL);
    if (rc == 0)
        rc = tfs_cache_create(&rcache);
    if (rc == 0)
        rc = tfs_cache_open(rcache, rst);
    if (rc == 0)
        rc = tfs_pack_create(&rp);
    if (rc == 0)
        rc = tfs_pack_open(rp, rcache, "m");
    if (rc == 0)
        rc = tfs_pack_sample_create(&s);
    if (rc == 0)
        rc = tfs_pack_iter_create(rp, &it);
    if (rc == 0)
        rc = tfs_pack_iter_start(it, 1, 0);
    while (rc == 0 && got) {
        rc = tfs_pack_iter_next(it, s, &got);
        for (size_t f = 0; rc == 0 && got && f < tfs_pack_sample_fields(s);
             f++)
            rc = tfs_pack_sample_read(s, f, buf, sizeof(buf));
    }
    tfs_pack_iter_close(it);
    tfs_pack_sample_close(s);
    close_reader();
    return rc;
}

TEST(allocation_failures)
{
    int failures = 0;
    int rc;

    setup_at(true);                     /* the pack code's paths, not S3's */
    CHECK_OK(test_alloc_hook());
    for (long k = 0; k < 100000; k += 1 + k / 64) {
        test_alloc_budget(k);
        rc = mem_round();
        test_alloc_budget(-1);
        if (rc == 0)
            break;
        if (rc != -ENOMEM)
            TEST_FAIL_("allocation %ld: %s (%s)", k, tfs_strerror(rc),
                       tfs_errdetail());
        failures++;
    }
    CHECK(failures > 20);
    CHECK_OK(mem_round());
    teardown();
}

TESTS(T(roundtrip), T(roundtrip_shuffled), T(order_deterministic),
      T(next_info), T(partitions), T(resume), T(prefetch_hints),
      T(damaged_header), T(damaged_data), T(truncated_shard),
      T(index_mismatch), T(tar_mismatch), T(pack_resumes), T(pack_refuses),
      T(pack_large_member), T(allocation_failures));
TEST_MAIN()
