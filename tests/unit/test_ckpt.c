/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint engine on a posix store: save and restore, slices from
 * several ranks (threads here; the Python tests use processes) and
 * resharded reads, local staging and its fallback, checksums, the commit
 * protocol (missing and stale markers), retention and gc, streaming,
 * failing allocations in the writer and the reader, durability levels
 * and the recovery of a locally complete, uncommitted save.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ckpt/ckpt_int.h"
#include "tierfs/ckpt.h"
#include "tierfs/mem.h"
#include "test.h"

static char top[64];                    /* per-run temporary directory */

static void path(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", top, rel);
}

/* Deterministic contents: byte i of tensor seed. */
static void fill(void *buf, size_t n, unsigned seed)
{
    unsigned char *p = buf;

    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed * 40503u) >> 7);
}

/* The tensors of the single-rank tests. */
#define BIG_ROWS 512
#define BIG_COLS 1024
static float big[BIG_ROWS * BIG_COLS];  /* 2 MiB */
static int32_t small[20][16];
static int64_t scalar = -42;
static unsigned char flags[7];
static const int64_t big_shape[] = {BIG_ROWS, BIG_COLS};
static const int64_t small_shape[] = {16};
static const int64_t flags_shape[] = {7};
static const int64_t empty_shape[] = {0, 4};

static void data_init(void)
{
    fill(big, sizeof(big), 1);
    fill(small, sizeof(small), 2);
    fill(flags, sizeof(flags), 3);
    for (size_t i = 0; i < sizeof(flags); i++)
        flags[i] &= 1;
}

/* tfs_ckpt_writer_set with a number. */
static int wset_num(struct tfs_ckpt_writer *w, const char *name, uint64_t v)
{
    char buf[24];

    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return tfs_ckpt_writer_set(w, name, buf);
}

static struct tfs_ckpt_writer *writer(unsigned rank, unsigned ws,
                                      unsigned keep)
{
    struct tfs_ckpt_writer *w;
    char staging[128];

    path(staging, sizeof(staging), "staging");
    CHECK_OK(tfs_ckpt_writer_create(&w));
    CHECK_OK(wset_num(w, "rank", rank));
    CHECK_OK(wset_num(w, "world_size", ws));
    CHECK_OK(tfs_ckpt_writer_set(w, "shard_size", "1M"));
    CHECK_OK(tfs_ckpt_writer_set(w, "staging_dir", staging));
    CHECK_OK(wset_num(w, "keep_last", keep));
    CHECK_OK(tfs_ckpt_writer_set(w, "timeout_ms", "20000"));
    return w;
}

static int add_all(struct tfs_ckpt_writer *w)
{
    char name[32];
    int rc = tfs_ckpt_writer_add(w, "w.big", "F32", 2, big_shape, big,
                                 sizeof(big));

    for (int i = 0; i < 20 && rc == 0; i++) {
        snprintf(name, sizeof(name), "layers.%d.small", i);
        rc = tfs_ckpt_writer_add(w, name, "I32", 1, small_shape, small[i],
                                 sizeof(small[i]));
    }
    if (rc == 0)
        rc = tfs_ckpt_writer_add(w, "scalar", "I64", 0, NULL, &scalar, 8);
    if (rc == 0)
        rc = tfs_ckpt_writer_add(w, "flags", "BOOL", 1, flags_shape, flags,
                                 sizeof(flags));
    if (rc == 0)
        rc = tfs_ckpt_writer_add(w, "empty", "F16", 2, empty_shape, flags, 0);
    return rc;
}

/* Save the single-rank state dict as step under the store. */
static int save(const char *uri, uint64_t step, unsigned keep)
{
    struct tfs_ckpt_writer *w = writer(0, 1, keep);
    int rc = tfs_ckpt_writer_open(w, uri, step);

    if (rc == 0)
        rc = add_all(w);
    if (rc == 0)
        rc = tfs_ckpt_writer_save(w);
    if (rc == 0)
        rc = tfs_ckpt_writer_wait(w, -1);
    tfs_ckpt_writer_close(w);
    return rc;
}

static struct tfs_ckpt_reader *reader(const char *uri, int64_t step,
                                      bool staging)
{
    struct tfs_ckpt_reader *r;
    char dir[128];

    path(dir, sizeof(dir), "staging");
    CHECK_OK(tfs_ckpt_reader_create(&r));
    CHECK_OK(tfs_ckpt_reader_set(r, "staging_dir", dir));
    CHECK_OK(tfs_ckpt_reader_set(r, "use_staging", staging ? "1" : "0"));
    CHECK_OK(tfs_ckpt_reader_open(r, uri, step));
    return r;
}

static void *read_all(struct tfs_ckpt_reader *r, const char *name,
                      size_t *len)
{
    uint64_t nbytes;
    size_t i;
    void *buf;

    CHECK_OK(tfs_ckpt_reader_find(r, name, &i));
    CHECK_OK(tfs_ckpt_reader_tensor(r, i, NULL, NULL, NULL, NULL, &nbytes));
    buf = malloc(nbytes + 1);
    CHECK(buf != NULL);
    CHECK_OK(tfs_ckpt_reader_read(r, i, buf, nbytes));
    *len = nbytes;
    return buf;
}

static void check_all(struct tfs_ckpt_reader *r)
{
    char name[32];
    size_t len;
    void *p = read_all(r, "w.big", &len);

    CHECK(len == sizeof(big) && memcmp(p, big, len) == 0);
    free(p);
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "layers.%d.small", i);
        p = read_all(r, name, &len);
        CHECK(len == sizeof(small[i]) && memcmp(p, small[i], len) == 0);
        free(p);
    }
    p = read_all(r, "scalar", &len);
    CHECK(len == 8 && *(int64_t *)p == -42);
    free(p);
    p = read_all(r, "flags", &len);
    CHECK(len == 7 && memcmp(p, flags, 7) == 0);
    free(p);
    p = read_all(r, "empty", &len);
    CHECK_EQ(len, 0);
    free(p);
}

TEST(roundtrip)
{
    struct tfs_ckpt_summary sum;
    struct tfs_ckpt_reader *r;
    int64_t off[2] = {100, 10};
    int64_t sz[2] = {100, 10};
    static float box[100 * 10];
    char uri[128];
    uint64_t steps[4];
    uint64_t step;
    unsigned ws;
    size_t n;
    size_t nf;
    size_t i;
    bool local;

    path(uri, sizeof(uri), "rt");
    CHECK_OK(save(uri, 1, 0));
    r = reader(uri, TFS_CKPT_STEP_LATEST, true);
    tfs_ckpt_reader_info(r, &step, &ws, NULL, &n, &nf);
    CHECK_EQ(step, 1);
    CHECK_EQ(ws, 1);
    CHECK_EQ(n, 24);
    CHECK_EQ(nf, 2);                    /* the big one has its own file */
    CHECK_OK(tfs_ckpt_reader_file(r, 0, NULL, NULL, NULL, &local));
    CHECK(local);
    check_all(r);
    CHECK_OK(tfs_ckpt_reader_find(r, "w.big", &i));
    CHECK_OK(tfs_ckpt_reader_read_box(r, i, 2, off, sz, box, sizeof(box)));
    for (int a = 0; a < 100; a++)
        CHECK(memcmp(&box[a * 10], &big[(100 + a) * BIG_COLS + 10], 40) == 0);
    CHECK_RC(tfs_ckpt_reader_read_box(r, i, 2, off, sz, box, 4), -EINVAL);
    off[0] = 500;
    CHECK_RC(tfs_ckpt_reader_read_box(r, i, 2, off, sz, box, sizeof(box)),
             -EINVAL);
    CHECK_RC(tfs_ckpt_reader_find(r, "nope", &i), -ENOENT);
    tfs_ckpt_reader_close(r);
    /* The same through the store only. */
    r = reader(uri, 1, false);
    check_all(r);
    CHECK_OK(tfs_ckpt_reader_file(r, 0, NULL, NULL, NULL, &local));
    CHECK(!local);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
    CHECK_OK(tfs_ckpt_list(uri, NULL, 0, steps, 4, &n));
    CHECK(n == 1 && steps[0] == 1);
    CHECK_OK(tfs_ckpt_latest(uri, NULL, &step));
    CHECK_EQ(step, 1);
    CHECK_OK(tfs_ckpt_summary(uri, NULL, 1, &sum));
    CHECK_EQ(sum.n_tensors, 24);
    CHECK_EQ(sum.total_size, sizeof(big) + sizeof(small) + 8 + 7);
    CHECK_RC(tfs_ckpt_summary(uri, NULL, 2, &sum), -ENOENT);
}

/* ---- several ranks ---- */

#define M_ROWS 12
static float mfull[M_ROWS * 4 * 3];
static const int64_t m_shape[] = {M_ROWS, 4, 3};

struct rank_arg {
    const char *uri;
    unsigned    rank;
    unsigned    ws;
    const char *run_id;
    uint64_t    timeout_ms;
    int         rc;
    char        detail[512];
    const char *partition;              /* created after open, or NULL */
    double      secs;                   /* from save to the end of wait */
};

static unsigned own_seed;               /* changes the own%u tensors */
static unsigned start_delay_ms[8];      /* per rank, before open */
static const char *rank_staging[8];     /* per rank, or NULL: "staging" */
/* Every rank of run_ranks waits here between its open and its save, or
 * NULL: none (orders a failing save() after the others' opens). */
static pthread_barrier_t *opened;

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    struct tfs_ckpt_writer *w = NULL;
    int64_t rows = M_ROWS / a->ws;
    int64_t off[3] = {rows * a->rank, 0, 0};
    int64_t shape[3] = {rows, 4, 3};
    float own[5];
    char name[32];
    char staging[128];
    int rc;

    path(staging, sizeof(staging), "staging");
    usleep(start_delay_ms[a->rank] * 1000u);
    rc = tfs_ckpt_writer_create(&w);
    if (rc == 0)
        rc = wset_num(w, "rank", a->rank);
    if (rc == 0)
        rc = wset_num(w, "world_size", a->ws);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "staging_dir",
                                 rank_staging[a->rank] != NULL
                                     ? rank_staging[a->rank] : staging);
    if (rc == 0 && a->run_id)
        rc = tfs_ckpt_writer_set(w, "run_id", a->run_id);
    if (rc == 0)
        rc = wset_num(w, "timeout_ms", a->timeout_ms);
    if (rc == 0)
        rc = tfs_ckpt_writer_open(w, a->uri, 10);
    if (rc == 0)
        rc = tfs_ckpt_writer_add_slice(w, "m", "F32", 3, shape, off, m_shape,
                                       &mfull[off[0] * 12],
                                       (size_t)rows * 12 * 4);
    fill(own, sizeof(own), 10 + a->rank + own_seed);
    snprintf(name, sizeof(name), "own%u", a->rank);
    if (rc == 0)
        rc = tfs_ckpt_writer_add(w, name, "F32", 1, (int64_t[]){5}, own, 20);
    if (rc == 0 && a->partition != NULL) {
        FILE *pf = fopen(a->partition, "w");

        if (pf != NULL)
            fclose(pf);
    }
    if (opened != NULL)
        pthread_barrier_wait(opened);
    a->secs = (double)tfs_now_ns() / 1e9;
    if (rc == 0)
        rc = tfs_ckpt_writer_save(w);
    if (rc == 0)
        rc = tfs_ckpt_writer_wait(w, -1);
    a->secs = (double)tfs_now_ns() / 1e9 - a->secs;
    snprintf(a->detail, sizeof(a->detail), "%s", tfs_errdetail());
    tfs_ckpt_writer_close(w);
    a->rc = rc;
    return NULL;
}

static void run_ranks(struct rank_arg *a, unsigned n)
{
    pthread_t t[8];

    for (unsigned i = 0; i < n; i++)
        CHECK(pthread_create(&t[i], NULL, rank_main, &a[i]) == 0);
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

TEST(ranks)
{
    struct rank_arg a[3];
    struct tfs_ckpt_reader *r;
    static float got[M_ROWS * 12];
    int64_t off[3] = {2, 1, 0};
    int64_t sz[3] = {5, 2, 3};
    char uri[128];
    size_t n;
    size_t i;
    float own[5];
    void *p;

    fill(mfull, sizeof(mfull), 9);
    path(uri, sizeof(uri), "ranks");
    for (unsigned k = 0; k < 3; k++)
        a[k] = (struct rank_arg){uri, k, 3, "r1", 20000, 0, "", NULL, 0};
    run_ranks(a, 3);
    for (unsigned k = 0; k < 3; k++)
        CHECK_OK(a[k].rc);
    r = reader(uri, 10, false);
    tfs_ckpt_reader_info(r, NULL, NULL, NULL, &n, NULL);
    CHECK_EQ(n, 4);
    CHECK_OK(tfs_ckpt_reader_find(r, "m", &i));
    CHECK_OK(tfs_ckpt_reader_slices(r, i, &n));
    CHECK_EQ(n, 3);
    CHECK_OK(tfs_ckpt_reader_read(r, i, got, sizeof(mfull)));
    CHECK(memcmp(got, mfull, sizeof(mfull)) == 0);
    /* A box across the slices, as another world size would need. */
    CHECK_OK(tfs_ckpt_reader_read_box(r, i, 3, off, sz, got, 5 * 2 * 3 * 4));
    for (int x = 0; x < 5; x++)
        CHECK(memcmp(&got[x * 6], &mfull[(2 + x) * 12 + 3], 24) == 0);
    for (unsigned k = 0; k < 3; k++) {
        char name[16];
        size_t len;

        snprintf(name, sizeof(name), "own%u", k);
        p = read_all(r, name, &len);
        fill(own, sizeof(own), 10 + k);
        CHECK(len == 20 && memcmp(p, own, 20) == 0);
        free(p);
    }
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
}

TEST(commit_protocol)
{
    struct rank_arg a[2];
    char uri[128];
    uint64_t steps[4];
    uint64_t step;
    size_t n;

    path(uri, sizeof(uri), "proto");
    CHECK_OK(save(uri, 1, 0));
    /* Rank 1 never comes: rank 0 gives up, nothing is committed. */
    a[0] = (struct rank_arg){uri, 0, 2, "x", 300, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    CHECK(strstr(a[0].detail, "step 10: rank 1 put no marker in 0.3 s "
                 "(in the store: 0 of its shard files") != NULL);
    CHECK_OK(tfs_ckpt_list(uri, NULL, 0, steps, 4, &n));
    CHECK(n == 1 && steps[0] == 1);
    CHECK_OK(tfs_ckpt_list(uri, NULL, TFS_CKPT_LIST_INCOMPLETE, steps, 4,
                           &n));
    CHECK(n == 1 && steps[0] == 10);
    CHECK_OK(tfs_ckpt_latest(uri, NULL, &step));
    CHECK_EQ(step, 1);
    /* A stale marker of another run is not taken for this one. */
    a[0] = (struct rank_arg){uri, 1, 2, "old", 200, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    CHECK(strstr(a[0].detail, "step 10: rank 1: no index naming its "
                 "shards") != NULL);
    a[0] = (struct rank_arg){uri, 0, 2, "new", 300, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    CHECK_OK(tfs_ckpt_latest(uri, NULL, &step));
    CHECK_EQ(step, 1);
    /* Both ranks of the same run: committed. */
    a[0] = (struct rank_arg){uri, 0, 2, "new", 20000, 0, "", NULL, 0};
    a[1] = (struct rank_arg){uri, 1, 2, "new", 20000, 0, "", NULL, 0};
    run_ranks(a, 2);
    CHECK_OK(a[0].rc);
    CHECK_OK(a[1].rc);
    CHECK_OK(tfs_ckpt_latest(uri, NULL, &step));
    CHECK_EQ(step, 10);
    /* Saving a committed step again needs overwrite. */
    CHECK_RC(save(uri, 10, 0), -EEXIST);
    struct tfs_ckpt_writer *w = writer(0, 1, 0);
    CHECK_OK(tfs_ckpt_writer_set(w, "overwrite", "1"));
    CHECK_OK(tfs_ckpt_writer_open(w, uri, 10));
    CHECK_OK(add_all(w));
    CHECK_RC(tfs_ckpt_writer_add(w, "scalar", "I64", 0, NULL, &scalar, 8),
             -EEXIST);
    CHECK_RC(tfs_ckpt_writer_add(w, "bad", "F32", 1, (int64_t[]){3}, big, 8),
             -EINVAL);
    CHECK_RC(tfs_ckpt_writer_add(w, "bad", "X9", 1, (int64_t[]){3}, big, 8),
             -EINVAL);
    CHECK_RC(tfs_ckpt_writer_wait(w, 0), -EINVAL);
    CHECK_OK(tfs_ckpt_writer_save(w));
    CHECK_RC(tfs_ckpt_writer_save(w), -EBUSY);
    CHECK_OK(tfs_ckpt_writer_wait(w, -1));
    CHECK(tfs_ckpt_writer_is_done(w));
    tfs_ckpt_writer_close(w);
    struct tfs_ckpt_reader *r = reader(uri, 10, true);
    check_all(r);
    tfs_ckpt_reader_close(r);
}

/*
 * tfs_ckpt_writer_set / tfs_ckpt_reader_set: values out of range are
 * refused naming the option, the value and the range; rank against
 * world_size is checked at open, whatever order they were set in; close
 * frees a writer or reader never opened; nothing is settable once open.
 */
TEST(options)
{
    static const char *const wbad[][3] = {
        {"rank", "100000", "checkpoint writer option rank=100000: expected "
         "a whole number in 0..99999"},
        {"world_size", "0", "checkpoint writer option world_size=0: "
         "expected a whole number in 1..100000"},
        {"shard_size", "512K", "checkpoint writer option shard_size=512K: "
         "expected a size of at least 1M"},
        {"upload_threads", "65", "checkpoint writer option "
         "upload_threads=65: expected a whole number in 1..64"},
        {"upload_bw", "fast", "checkpoint writer option upload_bw=fast: "
         "expected a size such as 8M"},
        {"timeout_ms", "1.5", "checkpoint writer option timeout_ms=1.5: "
         "expected milliseconds"},
        {"staging_keep", "-1", "checkpoint writer option staging_keep=-1: "
         "expected a whole number in 0..4294967295"},
        {"staging_dir", "", "checkpoint writer option staging_dir=: "
         "expected a non-empty string"},
        {"sync", "maybe", "checkpoint writer option sync=maybe: expected 0 "
         "or 1"},
        {"set_rank", "1", "unknown checkpoint writer option 'set_rank'"},
    };
    static const char *const rbad[][3] = {
        {"threads", "0", "checkpoint reader option threads=0: expected a "
         "whole number in 1..256"},
        {"threads", "257", "checkpoint reader option threads=257: expected "
         "a whole number in 1..256"},
        {"use_staging", "2", "checkpoint reader option use_staging=2: "
         "expected 0 or 1"},
        {"staging_dir", "", "checkpoint reader option staging_dir=: "
         "expected a non-empty string"},
    };
    struct tfs_ckpt_writer *w;
    struct tfs_ckpt_reader *r;
    char uri[128];

    path(uri, sizeof(uri), "opts");
    CHECK_OK(tfs_ckpt_writer_create(&w));
    for (size_t i = 0; i < TFS_ARRAY_LEN(wbad); i++) {
        CHECK_RC(tfs_ckpt_writer_set(w, wbad[i][0], wbad[i][1]),
                 TFS_EOPTION);
        CHECK_STR(tfs_errdetail(), wbad[i][2]);
    }
    CHECK_RC(tfs_ckpt_writer_set(w, "extra", "{\"a\": "), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "extra document") != NULL);
    CHECK_OK(tfs_ckpt_writer_set(w, "shard_size", "1M"));
    CHECK_OK(tfs_ckpt_writer_set(w, "upload_bw", "100M"));
    CHECK_OK(tfs_ckpt_writer_set(w, "rank", "3"));      /* before ... */
    CHECK_RC(tfs_ckpt_writer_open(w, uri, 1), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "checkpoint writer option rank=3: expected "
              "below world_size 1");
    CHECK_OK(tfs_ckpt_writer_set(w, "world_size", "4"));  /* ... world */
    tfs_ckpt_writer_close(w);           /* created, set, never opened */

    w = writer(0, 1, 0);
    CHECK_OK(tfs_ckpt_writer_open(w, uri, 1));
    CHECK_RC(tfs_ckpt_writer_set(w, "sync", "1"), -EBUSY);
    tfs_ckpt_writer_close(w);

    CHECK_OK(tfs_ckpt_reader_create(&r));
    for (size_t i = 0; i < TFS_ARRAY_LEN(rbad); i++) {
        CHECK_RC(tfs_ckpt_reader_set(r, rbad[i][0], rbad[i][1]),
                 TFS_EOPTION);
        CHECK_STR(tfs_errdetail(), rbad[i][2]);
    }
    CHECK_OK(tfs_ckpt_reader_set(r, "threads", "256"));
    CHECK_OK(tfs_ckpt_reader_set(r, "options", ""));
    tfs_ckpt_reader_close(r);           /* never opened */
    tfs_ckpt_writer_close(NULL);
    tfs_ckpt_reader_close(NULL);
}

TEST(retention)
{
    char uri[128];
    uint64_t steps[8];
    uint64_t step;
    size_t n;
    size_t removed = 9;
    struct rank_arg a;

    path(uri, sizeof(uri), "keep");
    for (uint64_t s = 1; s <= 4; s++)
        CHECK_OK(save(uri, s, 2));
    CHECK_OK(tfs_ckpt_list(uri, NULL, 0, steps, 8, &n));
    CHECK(n == 2 && steps[0] == 3 && steps[1] == 4);
    /* An abandoned save older than the newest checkpoint. */
    a = (struct rank_arg){uri, 1, 2, "", 100, 0, "", NULL, 0};
    run_ranks(&a, 1);                   /* step 10: rank 1 only */
    CHECK_RC(a.rc, -ETIMEDOUT);
    CHECK_OK(save(uri, 20, 0));
    CHECK_OK(tfs_ckpt_gc(uri, NULL, 1, true, &removed));
    CHECK_EQ(removed, 3);
    CHECK_OK(tfs_ckpt_list(uri, NULL, 0, steps, 8, &n));
    CHECK_EQ(n, 3);
    CHECK_OK(tfs_ckpt_gc(uri, NULL, 1, false, &removed));
    CHECK_EQ(removed, 3);
    CHECK_OK(tfs_ckpt_list(uri, NULL, 0, steps, 8, &n));
    CHECK(n == 1 && steps[0] == 20);
    CHECK_OK(tfs_ckpt_list(uri, NULL, TFS_CKPT_LIST_INCOMPLETE, steps, 8,
                           &n));
    CHECK_EQ(n, 0);
    CHECK_RC(tfs_ckpt_gc(uri, NULL, 0, false, &removed), -EINVAL);
    CHECK_OK(save(uri, 21, 0));
    CHECK_OK(tfs_ckpt_remove(uri, NULL, 21));
    CHECK_OK(tfs_ckpt_latest(uri, NULL, &step));
    CHECK_EQ(step, 20);
    CHECK_RC(tfs_ckpt_remove(uri, NULL, 21), -ENOENT);
    CHECK_OK(tfs_ckpt_remove(uri, NULL, 20));
    CHECK_RC(tfs_ckpt_latest(uri, NULL, &step), -ENOENT);
}

/* Flip one byte of the file at rel (under the test directory). */
static void flip(const char *rel, off_t off)
{
    char p[256];
    unsigned char c;
    int fd;

    path(p, sizeof(p), rel);
    fd = open(p, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pread(fd, &c, 1, off) == 1);
    c ^= 0x40;
    CHECK(pwrite(fd, &c, 1, off) == 1);
    close(fd);
}

/* The staging directory of the store at rel (one namespace per store). */
static void staging_file(char *buf, size_t len, const char *name)
{
    char cmd[512];
    FILE *f;

    snprintf(cmd, sizeof(cmd), "cd %s && ls -d staging/*/step-000001/%s",
             top, name);
    f = popen(cmd, "r");
    CHECK(f != NULL);
    CHECK(fgets(buf, (int)len, f) != NULL);
    buf[strcspn(buf, "\n")] = '\0';
    pclose(f);
}

TEST(checksums)
{
    struct tfs_ckpt_reader *r;
    static float got[BIG_ROWS * BIG_COLS];
    char uri[128];
    char rel[256];
    size_t i;

    path(uri, sizeof(uri), "sum");
    CHECK_OK(save(uri, 1, 0));
    /* A damaged staging copy: read from the store instead. */
    staging_file(rel, sizeof(rel), "model-rank00000-00001.safetensors");
    flip(rel, 5000);
    r = reader(uri, 1, true);
    check_all(r);
    tfs_ckpt_reader_close(r);
    /* A damaged store copy: an error naming tensor and file, no data. */
    flip("sum/step-000001/model-rank00000-00001.safetensors", 5000);
    r = reader(uri, 1, false);
    CHECK_OK(tfs_ckpt_reader_find(r, "w.big", &i));
    memset(got, 0, sizeof(got));
    CHECK_RC(tfs_ckpt_reader_read(r, i, got, sizeof(got)), TFS_ECORRUPT);
    CHECK(strstr(tfs_errdetail(), "'w.big'") != NULL);
    CHECK(strstr(tfs_errdetail(),
                 "step-000001/model-rank00000-00001.safetensors") != NULL);
    CHECK_RC(tfs_ckpt_reader_verify(r, NULL), TFS_ECORRUPT);
    tfs_ckpt_reader_close(r);
    /* A missing shard, and a truncated one. */
    char p[256];
    path(p, sizeof(p), "sum/step-000001/model-rank00000-00002.safetensors");
    CHECK(truncate(p, 100) == 0);
    struct tfs_ckpt_reader *r2;
    CHECK_OK(tfs_ckpt_reader_create(&r2));
    CHECK_OK(tfs_ckpt_reader_set(r2, "use_staging", "0"));
    CHECK_RC(tfs_ckpt_reader_open(r2, uri, 1), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "truncated") != NULL);
    CHECK(unlink(p) == 0);
    CHECK_RC(tfs_ckpt_reader_open(r2, uri, 1), -ENOENT);
    CHECK(strstr(tfs_errdetail(), "missing (named by the index)") != NULL);
    CHECK_RC(tfs_ckpt_reader_open(r2, uri, 2), -ENOENT);
    tfs_ckpt_reader_close(r2);
}

/* Whether path (under the test directory, a shell glob) exists. */
static bool exists(const char *glob)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "cd %s && ls -d %s >/dev/null 2>&1", top,
             glob);
    return system(cmd) == 0;
}

TEST(recycle)
{
    struct tfs_ckpt_reader *r;
    static float old[BIG_ROWS * BIG_COLS];
    char uri[128];
    char id[160];
    char ns[64];
    char glob[128];
    size_t len;
    bool local;
    void *p;

    path(uri, sizeof(uri), "recycle");
    CHECK_OK(save(uri, 1, 0));
    /* This store's staging namespace: the hash of its identity. */
    snprintf(id, sizeof(id), "file://%s", uri);
    snprintf(ns, sizeof(ns), "staging/%016llx",
             (unsigned long long)XXH3_64bits(id, strlen(id)));
    snprintf(glob, sizeof(glob), "%s/step-000001/model-rank00000-00001.*",
             ns);
    CHECK(exists(glob));
    memcpy(old, big, sizeof(big));
    fill(big, sizeof(big), 77);
    /* Step 2 rewrites step 1's staging files in place. */
    CHECK_OK(save(uri, 2, 0));
    snprintf(glob, sizeof(glob), "%s/step-000001", ns);
    CHECK(!exists(glob));
    snprintf(glob, sizeof(glob), "%s/step-000002/model-rank00000-00002.*",
             ns);
    CHECK(exists(glob));
    r = reader(uri, 2, true);
    CHECK_OK(tfs_ckpt_reader_file(r, 0, NULL, NULL, NULL, &local));
    CHECK(local);
    check_all(r);
    tfs_ckpt_reader_close(r);
    /* Step 1 is still whole, from the store. */
    r = reader(uri, 1, true);
    CHECK_OK(tfs_ckpt_reader_file(r, 0, NULL, NULL, NULL, &local));
    CHECK(!local);
    p = read_all(r, "w.big", &len);
    CHECK(len == sizeof(old) && memcmp(p, old, len) == 0);
    free(p);
    tfs_ckpt_reader_close(r);
    memcpy(big, old, sizeof(big));
}

/*
 * Save one odd-sized tensor from an odd address (more than one bounce
 * buffer of it) and a few small ones as step, staged in dir; which of its
 * two files were written with O_DIRECT, in *direct.
 */
static void save_odd(const char *uri, const char *dir, uint64_t step,
                     const unsigned char *odd, size_t odd_len,
                     unsigned direct[2])
{
    const int64_t shape[] = {(int64_t)odd_len};
    struct tfs_ckpt_writer *w;
    char name[32];

    CHECK_OK(tfs_ckpt_writer_create(&w));
    CHECK_OK(tfs_ckpt_writer_set(w, "shard_size", "1048576"));
    CHECK_OK(tfs_ckpt_writer_set(w, "staging_dir", dir));
    CHECK_OK(tfs_ckpt_writer_set(w, "timeout_ms", "20000"));
    CHECK_OK(tfs_ckpt_writer_open(w, uri, step));
    CHECK_OK(tfs_ckpt_writer_add(w, "odd", "U8", 1, shape, odd, odd_len));
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "layers.%d.small", i);
        CHECK_OK(tfs_ckpt_writer_add(w, name, "I32", 1, small_shape,
                                     small[i], sizeof(small[i])));
    }
    CHECK_OK(tfs_ckpt_writer_save(w));
    CHECK_OK(tfs_ckpt_writer_wait(w, -1));
    CHECK_EQ(w->n_files, 2);
    for (size_t i = 0; i < 2; i++)
        direct[i] = w->files[i].direct;
    tfs_ckpt_writer_close(w);
}

static void check_odd(const char *uri, const char *dir, uint64_t step,
                      bool staging, const unsigned char *odd, size_t len)
{
    struct tfs_ckpt_reader *r;
    size_t n;
    bool local;
    void *p;

    CHECK_OK(tfs_ckpt_reader_create(&r));
    CHECK_OK(tfs_ckpt_reader_set(r, "staging_dir", dir));
    CHECK_OK(tfs_ckpt_reader_set(r, "use_staging", staging ? "1" : "0"));
    CHECK_OK(tfs_ckpt_reader_open(r, uri, (int64_t)step));
    CHECK_OK(tfs_ckpt_reader_file(r, 0, NULL, NULL, NULL, &local));
    CHECK(local == staging);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    p = read_all(r, "odd", &n);
    CHECK(n == len && memcmp(p, odd, len) == 0);
    free(p);
    p = read_all(r, "layers.2.small", &n);
    CHECK(n == sizeof(small[2]) && memcmp(p, small[2], n) == 0);
    free(p);
    tfs_ckpt_reader_close(r);
}

/*
 * A first save writes a large file's data with O_DIRECT through a bounce
 * buffer (a header of no aligned size, a source at an odd address, a
 * length past one buffer and not a multiple of a page): every byte and
 * checksum right, from staging and from the store, and the file no
 * longer than it should be.  The next save, recycling it, goes through
 * the page cache; so does a file system that refuses O_DIRECT.
 */
TEST(direct_staging)
{
    size_t len = (9u << 20) + 4097;
    unsigned char *mem = malloc(len + 3);
    unsigned char *odd = mem + 3;
    unsigned direct[2];
    char uri[128];
    char dir[128];
    char shm[64] = "";
    struct stat sb;
    int fd;

    CHECK(mem != NULL);
    fill(odd, len, 21);
    path(uri, sizeof(uri), "direct");
    path(dir, sizeof(dir), "staging-direct");
    save_odd(uri, dir, 1, odd, len, direct);
    CHECK_EQ(direct[0], 1);             /* the big tensor's own file */
    CHECK_EQ(direct[1], 0);             /* 3 small tensors: buffered */
    check_odd(uri, dir, 1, true, odd, len);
    check_odd(uri, dir, 1, false, odd, len);
    {                                   /* padding cut: as long as the store's */
        char staged[256];
        char stored[256];
        char id[160];
        struct stat sb2;

        snprintf(id, sizeof(id), "file://%s", uri);
        snprintf(staged, sizeof(staged),
                 "%s/%016llx/step-000001/model-rank00000-00001.safetensors",
                 dir, (unsigned long long)XXH3_64bits(id, strlen(id)));
        snprintf(stored, sizeof(stored),
                 "%s/step-000001/model-rank00000-00001.safetensors", uri);
        CHECK(stat(staged, &sb) == 0 && stat(stored, &sb2) == 0);
        CHECK(sb.st_size > (off_t)len && sb.st_size == sb2.st_size);
    }
    fill(odd, len, 22);
    save_odd(uri, dir, 2, odd, len, direct);
    CHECK_EQ(direct[0], 0);             /* recycled: cached pages */
    check_odd(uri, dir, 2, true, odd, len);

    /* tmpfs refuses O_DIRECT before Linux 6.6. */
    snprintf(shm, sizeof(shm), "/dev/shm/tfs-ckpt-direct-%d", (int)getpid());
    if (mkdir(shm, 0700) == 0) {
        char probe[96];

        snprintf(probe, sizeof(probe), "%s/probe", shm);
        fd = open(probe, O_WRONLY | O_CREAT | O_DIRECT, 0600);
        bool refused = fd < 0 && errno == EINVAL;
        if (fd >= 0)
            close(fd);
        unlink(probe);
        fill(odd, len, 23);
        save_odd(uri, shm, 3, odd, len, direct);
        if (refused)
            CHECK_EQ(direct[0], 0);
        check_odd(uri, shm, 3, true, odd, len);
        snprintf(probe, sizeof(probe), "rm -rf %s", shm);
        CHECK(system(probe) == 0);
    }
    free(mem);
}

TEST(streaming)
{
    struct tfs_ckpt_reader *r;
    void *bufs[32];
    uint64_t ids[32];
    char uri[128];
    size_t n;

    path(uri, sizeof(uri), "stream");
    CHECK_OK(save(uri, 3, 0));
    for (int round = 0; round < 2; round++) {
        r = reader(uri, 3, round == 0);
        tfs_ckpt_reader_info(r, NULL, NULL, NULL, &n, NULL);
        for (size_t i = 0; i < n; i++) {
            uint64_t nbytes;

            CHECK_OK(tfs_ckpt_reader_tensor(r, i, NULL, NULL, NULL, NULL,
                                            &nbytes));
            bufs[i] = malloc(nbytes + 1);
            CHECK_OK(tfs_ckpt_reader_submit(r, i, 0, NULL, NULL, bufs[i],
                                            nbytes, &ids[i]));
        }
        CHECK_OK(tfs_ckpt_reader_start(r));
        for (size_t i = n; i-- > 0;)
            CHECK_OK(tfs_ckpt_reader_wait(r, ids[i], -1));
        for (size_t i = 0; i < n; i++) {
            const char *name;

            CHECK(tfs_ckpt_reader_is_ready(r, ids[i]));
            CHECK_OK(tfs_ckpt_reader_tensor(r, i, &name, NULL, NULL, NULL,
                                            NULL));
            if (strcmp(name, "w.big") == 0)
                CHECK(memcmp(bufs[i], big, sizeof(big)) == 0);
            if (strcmp(name, "layers.7.small") == 0)
                CHECK(memcmp(bufs[i], small[7], 64) == 0);
            free(bufs[i]);
        }
        CHECK_RC(tfs_ckpt_reader_wait(r, 999, 0), -EINVAL);
        tfs_ckpt_reader_close(r);
    }
    /* Destroy with reads still queued. */
    r = reader(uri, 3, false);
    for (size_t i = 0; i < 4; i++) {
        uint64_t nbytes;

        CHECK_OK(tfs_ckpt_reader_tensor(r, i, NULL, NULL, NULL, NULL,
                                        &nbytes));
        bufs[i] = malloc(nbytes + 1);
        CHECK_OK(tfs_ckpt_reader_submit(r, i, 0, NULL, NULL, bufs[i], nbytes,
                                        &ids[i]));
    }
    CHECK_OK(tfs_ckpt_reader_start(r));
    tfs_ckpt_reader_close(r);
    for (size_t i = 0; i < 4; i++)
        free(bufs[i]);
}

/* ---- failing allocations ---- */

/* One small save and restore; the first error. */
static int mem_round(const char *uri, uint64_t step)
{
    static float v[64];
    static const int64_t shape[] = {4, 16};
    static const int64_t off[] = {0, 0};
    static const int64_t full[] = {4, 16};
    struct tfs_ckpt_writer *w = NULL;
    struct tfs_ckpt_reader *r = NULL;
    uint64_t id;
    size_t i;
    int rc = tfs_ckpt_writer_create(&w);

    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "extra", "{\"a\": [1, 2]}");
    if (rc == 0)
        rc = tfs_ckpt_writer_open(w, uri, step);
    if (rc == 0)
        rc = tfs_ckpt_writer_add(w, "v", "F32", 2, shape, v, sizeof(v));
    if (rc == 0)
        rc = tfs_ckpt_writer_add_slice(w, "s", "F32", 2, shape, off, full, v,
                                       sizeof(v));
    if (rc == 0)
        rc = tfs_ckpt_writer_save(w);
    if (rc == 0)
        rc = tfs_ckpt_writer_wait(w, -1);
    tfs_ckpt_writer_close(w);
    if (rc == 0)
        rc = tfs_ckpt_reader_create(&r);
    if (rc == 0)
        rc = tfs_ckpt_reader_open(r, uri, (int64_t)step);
    if (rc == 0)
        rc = tfs_ckpt_reader_find(r, "s", &i);
    if (rc == 0)
        rc = tfs_ckpt_reader_read_box(r, i, 2, off, shape, v, sizeof(v));
    if (rc == 0)
        rc = tfs_ckpt_reader_submit(r, 0, 0, NULL, NULL, v, sizeof(v), &id);
    if (rc == 0)
        rc = tfs_ckpt_reader_start(r);
    if (rc == 0)
        rc = tfs_ckpt_reader_wait(r, id, -1);
    if (rc == 0)
        rc = tfs_ckpt_reader_verify(r, NULL);
    tfs_ckpt_reader_close(r);
    return rc;
}

TEST(allocation_failures)
{
    char uri[128];
    char staging[128];
    int failures = 0;
    int rc = 0;

    path(uri, sizeof(uri), "mem");
    path(staging, sizeof(staging), "staging");
    setenv("TIERFS_CKPT_STAGING", staging, 1);
    CHECK_OK(test_alloc_hook());
    for (long k = 0; k < 5000; k++) {
        char rel[32];

        /* A root of its own per round: a commit lists the root's steps
         * (R3), which would otherwise grow as fast as the budget. */
        snprintf(rel, sizeof(rel), "mem/%ld", k);
        path(uri, sizeof(uri), rel);
        test_alloc_budget(k);
        rc = mem_round(uri, (uint64_t)k + 100);
        test_alloc_budget(-1);
        if (rc == 0)
            break;
        if (rc != -ENOMEM)
            TEST_FAIL_("round %ld: %d (%s) [%s]", k, rc, tfs_strerror(rc),
                       tfs_errdetail());
        failures++;
    }
    CHECK_OK(rc);
    CHECK(failures > 50);
    CHECK_OK(mem_round(uri, 99999));
    unsetenv("TIERFS_CKPT_STAGING");
}

static void setup(void)
{
    snprintf(top, sizeof(top), "/tmp/tfs-ckpt-XXXXXX");
    if (mkdtemp(top) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    data_init();
}

/* ---- retried steps (R2) ---- */

/* The own1 tensor of step 10 at uri holds the data of seed. */
static void check_own1(const char *uri, unsigned seed)
{
    struct tfs_ckpt_reader *r = reader(uri, 10, false);
    float own[5];
    size_t len;
    void *p = read_all(r, "own1", &len);

    fill(own, sizeof(own), 11 + seed);
    CHECK(len == 20 && memcmp(p, own, 20) == 0);
    free(p);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
}

/*
 * A step retried without a run id: the first attempt left rank 1's
 * marker (rank 0 gave up first).  In the retry rank 0 opens first and
 * waits while rank 1 has not opened yet: it must not commit the stale
 * marker, whose checksums name shards the retry then overwrites.
 */
TEST(stale_marker_retry)
{
    struct rank_arg a[2];
    char uri[128];

    path(uri, sizeof(uri), "retry");
    own_seed = 1;
    a[0] = (struct rank_arg){uri, 0, 2, NULL, 200, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    a[0] = (struct rank_arg){uri, 1, 2, NULL, 200, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);      /* its marker stays behind */
    own_seed = 2;
    start_delay_ms[1] = 400;
    a[0] = (struct rank_arg){uri, 0, 2, NULL, 5000, 0, "", NULL, 0};
    a[1] = (struct rank_arg){uri, 1, 2, NULL, 5000, 0, "", NULL, 0};
    run_ranks(a, 2);
    start_delay_ms[1] = 0;
    CHECK_OK(a[0].rc);
    if (a[1].rc != 0)
        TEST_FAIL_("rank 1: %d (%s) [%s]", a[1].rc, tfs_strerror(a[1].rc),
                   a[1].detail);
    check_own1(uri, 2);
    /* Rank 1 of the retry first: it reads the earlier attempt's nonce,
     * then joins rank 0's when that appears. */
    path(uri, sizeof(uri), "retry2");
    own_seed = 3;
    a[0] = (struct rank_arg){uri, 0, 2, NULL, 200, 0, "", NULL, 0};
    run_ranks(a, 1);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    own_seed = 4;
    start_delay_ms[0] = 400;
    a[0] = (struct rank_arg){uri, 0, 2, NULL, 5000, 0, "", NULL, 0};
    a[1] = (struct rank_arg){uri, 1, 2, NULL, 5000, 0, "", NULL, 0};
    run_ranks(a, 2);
    start_delay_ms[0] = 0;
    own_seed = 0;
    CHECK_OK(a[0].rc);
    CHECK_OK(a[1].rc);
    check_own1(uri, 4);
}

/* ---- a commit that never hangs ---- */

static void show_ranks(const struct rank_arg *a, unsigned n, uint64_t ms)
{
    for (unsigned k = 0; k < n; k++)
        printf("# commit_timeout %.1f s, rank %u ended after %.2f s: %d "
               "(%s)\n", (double)ms / 1000, k, a[k].secs, a[k].rc,
               a[k].detail);
}

/* Nothing of step 10 is visible; `latest` still names step 1. */
static void check_not_committed(const char *dir)
{
    uint64_t steps[4];
    uint64_t step = 0;
    size_t n = 0;

    CHECK_OK(tfs_ckpt_list(dir, NULL, 0, steps, 4, &n));
    CHECK(n == 1 && steps[0] == 1);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 1);
}

/*
 * Four ranks; the stores of ranks 1 and 3 are partitioned (a black hole:
 * every call hangs) once they have opened.  Their uploads hang; each
 * rank's wait ends by its commit_timeout: ranks 1 and 3 naming their
 * upload, rank 0 naming rank 1 (a census of what rank 1 has in the
 * store) and rank 3, rank 2 at once on rank 0's abort note with rank 0's
 * reason.  Nothing is committed.  The retry,
 * rank 1 first (it opens while the old note is still there and must not
 * take it for its own attempt's), commits.
 */
TEST(stalled_rank)
{
    struct rank_arg a[4];
    char dir[128];
    char pf[2][160];
    char u[2][320];
    const uint64_t ms = 1500;

    path(dir, sizeof(dir), "stall");
    path(pf[0], sizeof(pf[0]), "stall.partition1");
    path(pf[1], sizeof(pf[1]), "stall.partition3");
    for (int i = 0; i < 2; i++)
        snprintf(u[i], sizeof(u[i]), "fault+file://%s?partition_file=%s",
                 dir, pf[i]);
    CHECK_OK(save(dir, 1, 0));
    /* Ranks 1 and 3 of 4 partitioned, each after its own open. */
    for (unsigned k = 0; k < 4; k++)
        a[k] = (struct rank_arg){k % 2 ? u[k / 2] : dir, k, 4, NULL, ms, 0,
                                 "", k % 2 ? pf[k / 2] : NULL, 0};
    run_ranks(a, 4);
    show_ranks(a, 4, ms);
    for (unsigned k = 0; k < 4; k++) {
        CHECK_RC(a[k].rc, -ETIMEDOUT);
        CHECK(a[k].secs < (double)ms / 1000 + 1.5);
    }
    CHECK(strstr(a[1].detail, "step 10: rank 1: upload of "
                 "model-rank00001-00001.safetensors did not finish in "
                 "1.5 s (0 B of 492 B of its shards in the store; the "
                 "store: fault: partitioned, deadline passed") != NULL);
    CHECK(strstr(a[3].detail, "step 10: rank 3: upload of ") != NULL);
    CHECK(strstr(a[0].detail, "step 10: rank 1 put no marker in 1.5 s (in "
                 "the store: 0 of its shard files, 0 B); nor rank 3 (1 more "
                 "of 4)") != NULL);
    CHECK(strcmp(a[2].detail, a[0].detail) == 0);
    CHECK(a[2].secs < a[0].secs + 1.2);  /* not its own deadline + 1.5 */
    CHECK(unlink(pf[0]) == 0 && unlink(pf[1]) == 0);
    check_not_committed(dir);
    /* The retry. */
    start_delay_ms[0] = 400;
    for (unsigned k = 0; k < 4; k++)
        a[k] = (struct rank_arg){k % 2 ? u[k / 2] : dir, k, 4, NULL, 20000, 0,
                                 "", NULL, 0};
    run_ranks(a, 4);
    start_delay_ms[0] = 0;
    for (unsigned k = 0; k < 4; k++) {
        if (a[k].rc != 0)
            TEST_FAIL_("retry, rank %u: %d [%s]", k, a[k].rc, a[k].detail);
    }
    struct tfs_ckpt_reader *r = reader(dir, TFS_CKPT_STEP_LATEST, false);
    uint64_t step = 0;

    tfs_ckpt_reader_info(r, &step, NULL, NULL, NULL, NULL);
    CHECK_EQ(step, 10);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
    /* Partitioned before open: open (on the caller's thread) gives up
     * by commit_timeout too. */
    struct tfs_ckpt_writer *w = writer(1, 2, 0);
    FILE *f = fopen(pf[0], "w");
    uint64_t t0;
    int rc;

    CHECK(f != NULL);
    fclose(f);
    CHECK_OK(tfs_ckpt_writer_set(w, "commit_timeout_ms", "500"));
    t0 = tfs_now_ns();
    rc = tfs_ckpt_writer_open(w, u[0], 20);
    printf("# open of a partitioned store ended after %.2f s\n",
           (double)(tfs_now_ns() - t0) / 1e9);
    CHECK_RC(rc, -ETIMEDOUT);
    CHECK(tfs_now_ns() - t0 < 1500000000ull);
    CHECK(strstr(tfs_errdetail(), "step 20: rank 1: open did not finish in "
                 "0.5 s (the store: fault: partitioned") != NULL);
    tfs_ckpt_writer_close(w);
    CHECK(unlink(pf[0]) == 0);
}

/*
 * A rank's own fatal error (its shard put refused) ends every rank's
 * wait at once, long before commit_timeout, with that rank's reason;
 * `ckpt gc` removes the aborted step even though it is the newest.
 * Every rank has opened before any saves: a rank that opens after the
 * note takes it for an earlier attempt's (failed_rank_late_open), and
 * unordered, one did so in 4 runs of 400 (rank 1's upload refused, or
 * rank 2's save(), before the third rank's open) and waited 25 s.
 */
TEST(failed_rank)
{
    struct rank_arg a[3];
    pthread_barrier_t b;
    char dir[128];
    char u1[320];
    uint64_t steps[4];
    size_t removed = 0;
    size_t n = 0;

    path(dir, sizeof(dir), "failed");
    snprintf(u1, sizeof(u1), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000010/model-rank00001", dir);
    CHECK_OK(save(dir, 1, 0));
    for (unsigned k = 0; k < 3; k++)
        a[k] = (struct rank_arg){k == 1 ? u1 : dir, k, 3, NULL, 20000, 0, "",
                                 NULL, 0};
    CHECK(pthread_barrier_init(&b, NULL, 3) == 0);
    opened = &b;
    run_ranks(a, 3);
    opened = NULL;
    show_ranks(a, 3, 20000);
    for (unsigned k = 0; k < 3; k++) {
        CHECK_RC(a[k].rc, -EACCES);
        CHECK(a[k].secs < 3.0);
        CHECK(strstr(a[k].detail, "step 10: rank 1: step-000010/model-"
                     "rank00001-00001.safetensors: upload: ") != NULL);
    }
    check_not_committed(dir);
    CHECK_OK(tfs_ckpt_list(dir, NULL, TFS_CKPT_LIST_INCOMPLETE, steps, 4,
                           &n));
    CHECK(n == 1 && steps[0] == 10);
    CHECK_OK(tfs_ckpt_gc(dir, NULL, 1, false, &removed));
    CHECK_EQ(removed, 1);
    CHECK_OK(tfs_ckpt_list(dir, NULL, TFS_CKPT_LIST_INCOMPLETE, steps, 4,
                           &n));
    CHECK_EQ(n, 0);
    check_not_committed(dir);
    /* A rank whose save() itself fails (its staging cannot be made: a
     * file is in the way) tells the others too. */
    char bad[160];
    FILE *f;

    path(bad, sizeof(bad), "failed.notadir");
    CHECK((f = fopen(bad, "w")) != NULL);
    fclose(f);
    rank_staging[2] = bad;
    for (unsigned k = 0; k < 3; k++)
        a[k] = (struct rank_arg){dir, k, 3, NULL, 20000, 0, "", NULL, 0};
    opened = &b;
    run_ranks(a, 3);
    opened = NULL;
    pthread_barrier_destroy(&b);
    rank_staging[2] = NULL;
    show_ranks(a, 3, 20000);
    for (unsigned k = 0; k < 3; k++) {
        CHECK(a[k].rc < 0 && a[k].rc != -ETIMEDOUT);
        CHECK(a[k].secs < 3.0);
        CHECK(strstr(a[k].detail, "step 10: rank 2: save: ") != NULL);
    }
    check_not_committed(dir);
}

/*
 * Rank 2's save() fails after rank 0 opened but before rank 1 did: rank
 * 1 finds the note naming the current nonce at its open, which is just
 * what a retry's rank 1 opening before the retry's rank 0 finds
 * (stalled_rank), so it takes it for an earlier attempt's.  It ends at
 * its deadline plus the grace for rank 0's note, not at once, and never
 * commits; its detail names the note it ignored.  A retry commits.
 */
TEST(failed_rank_late_open)
{
    const uint64_t ms = 1000;
    struct rank_arg a[3];
    pthread_barrier_t b;
    struct tfs_ckpt_reader *r;
    uint64_t step = 0;
    char dir[128];
    char bad[160];
    FILE *f;

    path(dir, sizeof(dir), "failedlate");
    path(bad, sizeof(bad), "failedlate.notadir");
    CHECK((f = fopen(bad, "w")) != NULL);
    fclose(f);
    CHECK_OK(save(dir, 1, 0));
    /* Ranks 0 and 2, rank 2 saving only once rank 0 has opened (else its
     * note could name the nonce of no attempt yet). */
    rank_staging[2] = bad;
    a[0] = (struct rank_arg){dir, 0, 3, NULL, 20000, 0, "", NULL, 0};
    a[1] = (struct rank_arg){dir, 2, 3, NULL, 20000, 0, "", NULL, 0};
    CHECK(pthread_barrier_init(&b, NULL, 2) == 0);
    opened = &b;
    run_ranks(a, 2);
    opened = NULL;
    pthread_barrier_destroy(&b);
    rank_staging[2] = NULL;
    for (unsigned k = 0; k < 2; k++) {
        CHECK(a[k].rc < 0 && a[k].rc != -ETIMEDOUT);
        CHECK(a[k].secs < 3.0);
        CHECK(strstr(a[k].detail, "step 10: rank 2: save: ") != NULL);
    }
    /* Rank 1, late. */
    a[0] = (struct rank_arg){dir, 1, 3, NULL, ms, 0, "", NULL, 0};
    run_ranks(a, 1);
    printf("# commit_timeout 1.0 s, rank 1 (late) ended after %.2f s: %d "
           "(%s)\n", a[0].secs, a[0].rc, a[0].detail);
    CHECK_RC(a[0].rc, -ETIMEDOUT);
    CHECK(a[0].secs > 1.9 && a[0].secs < 4.0);  /* 1 s + 1 s of grace */
    CHECK(strstr(a[0].detail, "step 10: rank 1: no index naming its shards "
                 "appeared at step-000010/model.safetensors.index.json in "
                 "1 s (and no abort note from rank 0; a note of rank 2 "
                 "naming this attempt predates this rank's open, taken for "
                 "an earlier attempt's: step 10: rank 2: save: ") != NULL);
    check_not_committed(dir);
    /* The retry, rank 1 first again: the note is still there when it
     * opens, and it commits. */
    start_delay_ms[0] = 300;
    for (unsigned k = 0; k < 3; k++)
        a[k] = (struct rank_arg){dir, k, 3, NULL, 20000, 0, "", NULL, 0};
    run_ranks(a, 3);
    start_delay_ms[0] = 0;
    for (unsigned k = 0; k < 3; k++) {
        if (a[k].rc != 0)
            TEST_FAIL_("retry, rank %u: %d [%s]", k, a[k].rc, a[k].detail);
    }
    r = reader(dir, TFS_CKPT_STEP_LATEST, false);
    tfs_ckpt_reader_info(r, &step, NULL, NULL, NULL, NULL);
    CHECK_EQ(step, 10);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
}

/* ---- overlapping commits (R3) ---- */

struct overlap {
    struct tfs_store  *st;
    uint64_t           step;
    pthread_barrier_t *start;
    int                rc;
};

/* Rank 0 of a one-rank checkpoint without files: index, then `latest`. */
static void *overlap_main(void *p)
{
    struct overlap *o = p;
    struct tfs_ckpt_commit c = {.st = o->st, .step = o->step,
                                .world_size = 1, .run_id = ""};
    struct tfs_ckpt_marker m = {.step = o->step, .world_size = 1,
                                .run_id = (char *)""};

    pthread_barrier_wait(o->start);
    o->rc = tfs_ckpt_commit_index(&c, &m);
    return NULL;
}

/* Two commits of different steps at once, the store's calls jittered so
 * that they interleave every way: `latest` always ends on the newer. */
TEST(latest_overlapping_commits)
{
    pthread_barrier_t start;
    int older_won = 0;

    CHECK(pthread_barrier_init(&start, NULL, 2) == 0);
    for (int i = 0; i < 40; i++) {
        struct overlap o[2];
        struct tfs_store *st;
        pthread_t t[2];
        char rel[32];
        char dir[128];
        char uri[160];
        uint64_t step = 0;
        bool checked = true;

        snprintf(rel, sizeof(rel), "overlap/%d", i);
        path(dir, sizeof(dir), rel);
        snprintf(uri, sizeof(uri), "fault+file://%s?jitter_ms=3", dir);
        CHECK_OK(tfs_ckpt_store_open(uri, NULL, true, &st));
        o[0] = (struct overlap){st, 200 + (uint64_t)i, &start, 0};
        o[1] = (struct overlap){st, 100 + (uint64_t)i, &start, 0};
        for (int k = 0; k < 2; k++)
            CHECK(pthread_create(&t[k], NULL, overlap_main, &o[k]) == 0);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        CHECK_OK(o[0].rc);
        CHECK_OK(o[1].rc);
        CHECK_OK(tfs_ckpt_find_latest(st, &step, &checked));
        CHECK(!checked);                /* what `latest` itself names */
        older_won += step != 200 + (uint64_t)i;
        tfs_store_close(st);
    }
    pthread_barrier_destroy(&start);
    printf("# latest left on the older step in %d of 40 runs\n", older_won);
    CHECK_EQ(older_won, 0);
}

/* ---- durability levels and recovery (issue 18 item 6) ---- */

/* Save the single-rank state dict as step at uri, without waiting. */
static struct tfs_ckpt_writer *save_async(const char *uri, uint64_t step)
{
    struct tfs_ckpt_writer *w = writer(0, 1, 0);

    CHECK_OK(tfs_ckpt_writer_open(w, uri, step));
    CHECK_OK(add_all(w));
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_NONE);
    CHECK_OK(tfs_ckpt_writer_save(w));
    return w;
}

/* Recover as rank 0 of 1 under uri: what tfs_ckpt_writer_recover says. */
static int recover1(const char *uri, uint64_t *step)
{
    struct tfs_ckpt_writer *w = writer(0, 1, 0);
    int rc = tfs_ckpt_writer_recover(w, uri, step);

    tfs_ckpt_writer_close(w);
    return rc;
}

/*
 * Uploads slowed (bw=1M, 2.1 MiB): LOCAL comes well before STORE; the
 * peer level is refused; a refused upload leaves the save at LOCAL
 * (wait for LOCAL: 0, for STORE: the error).
 */
TEST(levels)
{
    struct tfs_ckpt_writer *w;
    char dir[128];
    char uri[320];
    uint64_t t0;
    double local_s;
    double store_s;

    path(dir, sizeof(dir), "levels");
    snprintf(uri, sizeof(uri), "fault+file://%s?bw=1M", dir);
    w = save_async(uri, 1);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, -1), 0);
    local_s = (double)(tfs_now_ns() - t0) / 1e9;
    CHECK(!tfs_ckpt_writer_is_done(w));
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_LOCAL);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_STORE, 0),
             -EINPROGRESS);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1),
             -ENOTSUP);
    CHECK(strcmp(tfs_errdetail(), "no cache group configured: the peer "
                 "level needs one (the writer's group options)") == 0);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, 7, -1), -EINVAL);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_STORE, -1), 0);
    store_s = (double)(tfs_now_ns() - t0) / 1e9;
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_STORE);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, 0), 0);
    printf("# bw=1M, 2.1 MiB: local after %.3f s, store after %.3f s\n",
           local_s, store_s);
    CHECK(local_s < 1.0 && store_s > 1.5);
    tfs_ckpt_writer_close(w);
    /* Committed: the local manifest is gone (never recovered again). */
    {
        char cmd[512];

        snprintf(cmd, sizeof(cmd), "ls %s/staging/*/step-000001/"
                 "rank-00000.local >/dev/null 2>&1", top);
        CHECK(system(cmd) != 0);
    }
    /* sync=1: LOCAL when save() returns. */
    snprintf(uri, sizeof(uri), "fault+file://%s?bw=1M", dir);
    w = writer(0, 1, 0);
    CHECK_OK(tfs_ckpt_writer_set(w, "sync", "1"));
    CHECK_OK(tfs_ckpt_writer_open(w, uri, 4));
    CHECK_OK(add_all(w));
    CHECK_OK(tfs_ckpt_writer_save(w));
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_LOCAL);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, 0), 0);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    tfs_ckpt_writer_close(w);
    /* The upload refused: local ok, store fails, the level stays. */
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000002/model", dir);
    w = save_async(uri, 2);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, -1), 0);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_STORE, -1),
             -EACCES);
    CHECK(strstr(tfs_errdetail(), "step 2: rank 0: step-000002/model-"
                 "rank00000-0000") != NULL);
    CHECK(strstr(tfs_errdetail(), ".safetensors: upload: fault: injected "
                 "EACCES") != NULL);
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_LOCAL);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, 0), 0);
    tfs_ckpt_writer_close(w);
    /* A save that failed before LOCAL: every level raises. */
    snprintf(uri, sizeof(uri), "%s", dir);
    w = writer(0, 1, 0);
    CHECK_OK(tfs_ckpt_writer_open(w, uri, 3));
    CHECK_OK(add_all(w));
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, 0),
             -EINVAL);                  /* nothing saved yet */
    tfs_ckpt_writer_close(w);
}

/*
 * A writer "killed" after finishing staging (its uploads refused, so the
 * commit never happened) is recovered on the healed store: committed,
 * `latest` moved, read bit for bit from the staging copy.  A damaged
 * staging copy is not recovered; nothing newer: nothing to do.
 */
TEST(recover)
{
    struct tfs_ckpt_writer *w;
    struct tfs_ckpt_reader *r;
    char dir[128];
    char uri[320];
    char man[400];
    uint64_t step = 0;
    size_t n_files = 0;
    struct stat sb;

    path(dir, sizeof(dir), "recover");
    CHECK_OK(save(dir, 1, 0));
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000005/", dir);
    w = save_async(uri, 5);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), -EACCES);
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_LOCAL);
    tfs_ckpt_writer_close(w);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 1);
    /* The recovery. */
    step = 0;
    CHECK_RC(recover1(dir, &step), 1);
    CHECK_EQ(step, 5);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 5);
    r = reader(dir, TFS_CKPT_STEP_LATEST, true);
    tfs_ckpt_reader_info(r, &step, NULL, NULL, NULL, &n_files);
    CHECK_EQ(step, 5);
    for (size_t i = 0; i < n_files; i++) {
        bool local = false;

        CHECK_OK(tfs_ckpt_reader_file(r, i, NULL, NULL, NULL, &local));
        CHECK(local);
    }
    check_all(r);
    CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
    tfs_ckpt_reader_close(r);
    /* Nothing newer than the newest checkpoint: nothing recovered; nor
     * once step 5 is removed from the store (its manifest went at the
     * commit: a kept staging copy is never resurrected). */
    CHECK_RC(recover1(dir, &step), 0);
    CHECK_OK(tfs_ckpt_remove(dir, NULL, 5));
    CHECK_RC(recover1(dir, &step), 0);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 1);
    /* A damaged copy (one byte of data) is not recovered. */
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000006/", dir);
    w = save_async(uri, 6);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), -EACCES);
    tfs_ckpt_writer_close(w);
    {
        char cmd[512];
        char rel[256];
        FILE *f;

        snprintf(cmd, sizeof(cmd), "cd %s && ls -d staging/*/step-000006/"
                 "model-rank00000-00001.safetensors", top);
        f = popen(cmd, "r");
        CHECK(f != NULL);
        CHECK(fgets(rel, sizeof(rel), f) != NULL);
        rel[strcspn(rel, "\n")] = '\0';
        pclose(f);
        flip(rel, 100000);
        *strrchr(rel, '/') = '\0';
        snprintf(man, sizeof(man), "%s/%s/rank-00000.local", top, rel);
        CHECK(stat(man, &sb) == 0);
    }
    CHECK_RC(recover1(dir, &step), 0);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 1);
    /* A writer that saves again removes the manifest of what it
     * recycles or rewrites: step 6 is retried and committed. */
    CHECK_OK(save(dir, 6, 0));
    CHECK_RC(recover1(dir, &step), 0);
}

struct rec_arg {
    const char *run_id;
    const char *uri;
    unsigned    rank;
    unsigned    ws;
    const char *staging;
    int         rc;
    uint64_t    step;
    double      secs;
    char        detail[512];
};

static void *recover_main(void *p)
{
    struct rec_arg *a = p;
    struct tfs_ckpt_writer *w = NULL;
    uint64_t t0;
    int rc;

    usleep(start_delay_ms[a->rank] * 1000u);
    t0 = tfs_now_ns();
    rc = tfs_ckpt_writer_create(&w);

    if (rc == 0)
        rc = wset_num(w, "rank", a->rank);
    if (rc == 0)
        rc = wset_num(w, "world_size", a->ws);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "staging_dir", a->staging);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "run_id", a->run_id);
    if (rc == 0)
        rc = tfs_ckpt_writer_set(w, "timeout_ms", "20000");
    if (rc == 0)
        rc = tfs_ckpt_writer_recover(w, a->uri, &a->step);
    a->secs = (double)(tfs_now_ns() - t0) / 1e9;
    snprintf(a->detail, sizeof(a->detail), "%s", tfs_errdetail());
    tfs_ckpt_writer_close(w);
    a->rc = rc;
    return NULL;
}

static void run_recover(struct rec_arg *a, unsigned n)
{
    pthread_t t[8];

    for (unsigned i = 0; i < n; i++)
        CHECK(pthread_create(&t[i], NULL, recover_main, &a[i]) == 0);
    for (unsigned i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

/*
 * Two ranks whose uploads were refused (both reached LOCAL): a new pair
 * recovers the step (rank 0 commits after rank 1's marker), read bit for
 * bit.  Then a step that rank 1's staging lacks: rank 1 aborts the
 * attempt at once, nothing is committed, `latest` stays.
 */
TEST(recover_ranks)
{
    struct rank_arg a[2];
    struct rec_arg b[2];
    char dir[128];
    char uri[320];
    char staging[128];
    char other[128];
    uint64_t step = 0;

    path(dir, sizeof(dir), "recranks");
    path(staging, sizeof(staging), "staging");
    path(other, sizeof(other), "staging-empty");
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000010/model", dir);
    CHECK_OK(save(dir, 1, 0));
    for (unsigned k = 0; k < 2; k++)
        a[k] = (struct rank_arg){uri, k, 2, "job1", 20000, 0, "", NULL, 0};
    run_ranks(a, 2);
    for (unsigned k = 0; k < 2; k++)
        CHECK_RC(a[k].rc, -EACCES);
    check_not_committed(dir);
    for (unsigned k = 0; k < 2; k++)
        b[k] = (struct rec_arg){"job2", dir, k, 2, staging, 0, 0, 0, ""};
    run_recover(b, 2);
    for (unsigned k = 0; k < 2; k++) {
        if (b[k].rc != 1 || b[k].step != 10)
            TEST_FAIL_("rank %u: %d step %" PRIu64 " [%s]", k, b[k].rc,
                       b[k].step, b[k].detail);
    }
    printf("# 2 ranks recovered step 10 in %.2f s, %.2f s\n", b[0].secs,
           b[1].secs);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 10);
    {
        struct tfs_ckpt_reader *r = reader(dir, 10, true);
        size_t len;
        void *p = read_all(r, "m", &len);
        size_t n_files = 0;

        CHECK(len == sizeof(mfull) && memcmp(p, mfull, len) == 0);
        free(p);
        tfs_ckpt_reader_info(r, NULL, NULL, NULL, NULL, &n_files);
        for (size_t i = 0; i < n_files; i++) {
            bool local = false;

            CHECK_OK(tfs_ckpt_reader_file(r, i, NULL, NULL, NULL, &local));
            CHECK(local);
        }
        CHECK_OK(tfs_ckpt_reader_verify(r, NULL));
        tfs_ckpt_reader_close(r);
    }
    check_own1(dir, 0);
    /* Step 20: both reach LOCAL, but the new rank 1 has another staging
     * dir (its node's disk is gone). */
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000020/model", dir);
    /* rank_main saves step 10: a run of its own at step 20 instead. */
    for (unsigned k = 0; k < 2; k++) {
        struct tfs_ckpt_writer *w = writer(k, 2, 0);
        float own[5];

        fill(own, sizeof(own), 30 + k);
        CHECK_OK(tfs_ckpt_writer_set(w, "run_id", "job1"));
        CHECK_OK(tfs_ckpt_writer_set(w, "timeout_ms", "2000"));
        CHECK_OK(tfs_ckpt_writer_open(w, uri, 20));
        CHECK_OK(tfs_ckpt_writer_add(w, k ? "own1" : "own0", "F32", 1,
                                     (int64_t[]){5}, own, 20));
        CHECK_OK(tfs_ckpt_writer_save(w));
        CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, -1), 0);
        tfs_ckpt_writer_close(w);
    }
    b[0] = (struct rec_arg){"job3", dir, 0, 2, staging, 0, 0, 0, ""};
    b[1] = (struct rec_arg){"job3", dir, 1, 2, other, 0, 0, 0, ""};
    run_recover(b, 2);
    printf("# step 20 lacking on rank 1: %.2f s, %.2f s [%s]\n", b[0].secs,
           b[1].secs, b[0].detail);
    for (unsigned k = 0; k < 2; k++) {
        CHECK_RC(b[k].rc, 0);
        CHECK(b[k].secs < 5.0);
    }
    CHECK(strstr(b[0].detail, "step 20 not recovered: step 20: rank 1: "
                 "nothing to recover: ") != NULL);
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 10);
    /* A store refusing rank 0's decision: raised, naming it. */
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=recover", dir);
    b[0] = (struct rec_arg){"job4", uri, 0, 2, other, 0, 0, 0, ""};
    run_recover(b, 1);
    CHECK_RC(b[0].rc, -EACCES);
    CHECK(strstr(b[0].detail, "rank 0: cannot put the recovery decision "
                 "recover: fault: injected EACCES") != NULL);
}

/*
 * A rank that comes after rank 0's recovery attempt ended (another rank
 * lacked the step and aborted it): it finds a "none" decision of its run
 * and falls back at once.  Rank 0 used to remove the decision, and such
 * a rank polled for one until commit_timeout (20 s here) while in a
 * torchrun job the other ranks waited in the resume's broadcast.
 */
TEST(recover_late_rank)
{
    struct rec_arg b[3];
    char dir[128], uri[320], staging[128], other[128];
    uint64_t step = 0;

    path(dir, sizeof(dir), "reclate");
    path(staging, sizeof(staging), "staging");
    path(other, sizeof(other), "staging-empty");
    CHECK_OK(save(dir, 1, 0));
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error=EACCES&"
             "error_ops=put&error_prefix=step-000030/model", dir);
    for (unsigned k = 0; k < 3; k++) {
        struct tfs_ckpt_writer *w = writer(k, 3, 0);
        float own[5];
        char name[8];

        fill(own, sizeof(own), 40 + k);
        snprintf(name, sizeof(name), "own%u", k);
        CHECK_OK(tfs_ckpt_writer_set(w, "run_id", "late1"));
        CHECK_OK(tfs_ckpt_writer_set(w, "timeout_ms", "2000"));
        CHECK_OK(tfs_ckpt_writer_open(w, uri, 30));
        CHECK_OK(tfs_ckpt_writer_add(w, name, "F32", 1, (int64_t[]){5}, own,
                                     20));
        CHECK_OK(tfs_ckpt_writer_save(w));
        CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_LOCAL, -1), 0);
        tfs_ckpt_writer_close(w);
    }
    b[0] = (struct rec_arg){"late2", dir, 0, 3, staging, 0, 0, 0, ""};
    b[1] = (struct rec_arg){"late2", dir, 1, 3, staging, 0, 0, 0, ""};
    b[2] = (struct rec_arg){"late2", dir, 2, 3, other, 0, 0, 0, ""};
    start_delay_ms[1] = 1500;           /* after rank 0 gave up */
    run_recover(b, 3);
    start_delay_ms[1] = 0;
    printf("# rank 1 late by 1.5 s: ranks ended after %.2f, %.2f, %.2f s\n",
           b[0].secs, b[1].secs, b[2].secs);
    for (unsigned k = 0; k < 3; k++) {
        CHECK_RC(b[k].rc, 0);
        CHECK(b[k].secs < 5.0);
    }
    CHECK_OK(tfs_ckpt_latest(dir, NULL, &step));
    CHECK_EQ(step, 1);
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", top);
}

/*
 * Rank 0 checks the files each marker names against one listing of the
 * step (not a stat per file): rank 1's shard truncated after its marker
 * was put fails the commit naming the file and both sizes; removed, it
 * fails naming it.  Rank 0 goes through a store 150 ms a call, so that
 * rank 1's marker is in long before rank 0 looks.
 */
TEST(marker_files)
{
    for (int round = 0; round < 2; round++) {
        struct rank_arg a[2];
        pthread_t t[2];
        char dir[128], slow[256], marker[256], shard[256];
        uint64_t step;
        int tries = 0;

        path(dir, sizeof(dir), round ? "mfiles-rm" : "mfiles-trunc");
        CHECK(mkdir(dir, 0700) == 0);
        snprintf(slow, sizeof(slow), "fault+file://%s?latency_ms=150", dir);
        a[0] = (struct rank_arg){slow, 0, 2, "mf", 20000, 0, "", NULL, 0};
        a[1] = (struct rank_arg){dir, 1, 2, "mf", 20000, 0, "", NULL, 0};
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&t[i], NULL, rank_main, &a[i]) == 0);
        snprintf(marker, sizeof(marker), "%s/step-000010/rank-00001.done",
                 dir);
        snprintf(shard, sizeof(shard),
                 "%s/step-000010/model-rank00001-00001.safetensors", dir);
        while (access(marker, F_OK) != 0 && tries++ < 2000)
            usleep(5000);
        CHECK(access(marker, F_OK) == 0);
        if (round == 0)
            CHECK(truncate(shard, 100) == 0);
        else
            CHECK(unlink(shard) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        if (round == 0) {
            CHECK_RC(a[0].rc, TFS_ECORRUPT);
            CHECK(strstr(a[0].detail, "model-rank00001-00001.safetensors "
                         "is 100 bytes, rank 1's marker says") != NULL);
        } else {
            CHECK_RC(a[0].rc, -ENOENT);
            CHECK(strstr(a[0].detail, "model-rank00001-00001.safetensors: "
                         "missing (named by rank 1's marker)") != NULL);
        }
        CHECK(a[1].rc < 0);             /* ends on rank 0's abort note */
        CHECK_RC(tfs_ckpt_latest(dir, NULL, &step), -ENOENT);
    }
}

TESTS(T(roundtrip), T(ranks), T(commit_protocol), T(options), T(retention),
      T(checksums), T(recycle), T(direct_staging), T(streaming),
      T(allocation_failures), T(latest_overlapping_commits),
      T(stale_marker_retry), T(stalled_rank), T(failed_rank),
      T(failed_rank_late_open),
      T(marker_files), T(levels), T(recover), T(recover_ranks),
      T(recover_late_rank));

int main(int argc, char **argv)
{
    int rc;

    setup();
    rc = test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
    teardown();
    return rc;
}
