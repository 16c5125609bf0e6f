/* SPDX-License-Identifier: MIT */
/*
 * The cache's reads that never wait for the store (D7; the FUSE mount's
 * read path): tfs_file_read_try / tfs_file_read_pin_try answer from the
 * RAM and disk tiers or say -EAGAIN at once, and tfs_file_read_async
 * answers from the thread that publishes the block.  The remote is a
 * temporary directory behind the fault store, hung with partition_file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"
#include "common/util.h"

#define BS (64u * 1024)
#define SIZE (3 * BS + 1000)            /* four blocks, the last short */

static char remote[64];
static char cut[96];                    /* partition_file: hangs the store */

struct done {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    int             calls;
    int             rc;
    size_t          n;
    pthread_t       thread;             /* the one that called */
};

static void on_done(void *arg, int rc, size_t n)
{
    struct done *d = arg;

    pthread_mutex_lock(&d->lock);
    d->calls++;
    d->rc = rc;
    d->n = n;
    d->thread = pthread_self();
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

/* What a pin read handed over (pin_done): the bytes, copied at the
 * call, and the pin, kept for the test to check and release. */
struct pdone {
    struct done     d;
    unsigned char   bytes[BS];
    const void     *data;
    void           *pin;
};

static void on_pin_done(void *arg, int rc, const void *data, size_t n,
                        void *pin)
{
    struct pdone *p = arg;

    pthread_mutex_lock(&p->d.lock);
    if (rc == 0 && n <= sizeof(p->bytes))
        memcpy(p->bytes, data, n);
    p->data = data;
    p->pin = pin;
    pthread_mutex_unlock(&p->d.lock);
    on_done(&p->d, rc, n);
}

static void done_init(struct done *d)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
}

/* Calls so far, after waiting up to ms for at least one. */
static int done_wait(struct done *d, unsigned ms)
{
    uint64_t end = tfs_now_ns() + (uint64_t)ms * 1000000u;
    int calls;

    pthread_mutex_lock(&d->lock);
    while (d->calls == 0 && tfs_now_ns() < end) {
        pthread_mutex_unlock(&d->lock);
        usleep(2000);
        pthread_mutex_lock(&d->lock);
    }
    calls = d->calls;
    pthread_mutex_unlock(&d->lock);
    return calls;
}

/* A cache (RAM only, 64 KiB blocks) over the fault store over remote. */
static struct tfs_cache *open_cache(const char *query,
                                    struct tfs_store **st)
{
    struct tfs_cache *c = NULL;
    char uri[400];

    snprintf(uri, sizeof(uri), "fault+file://%s?%s", remote, query);
    CHECK_OK(tfs_store_open(st, uri, NULL));
    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_set(c, "block_size", "64K"));
    CHECK_OK(tfs_cache_set(c, "max_readahead", "0"));
    CHECK_OK(tfs_cache_open(c, *st));
    return c;
}

static unsigned char *setup(const char *name)
{
    struct tfs_store *raw = NULL;
    char uri[96];
    unsigned char *data = test_pattern(SIZE, 7);

    snprintf(remote, sizeof(remote), "/tmp/tfs-aread-XXXXXX");
    CHECK(mkdtemp(remote) != NULL);
    snprintf(cut, sizeof(cut), "%s.cut", remote);
    snprintf(uri, sizeof(uri), "file://%s", remote);
    CHECK_OK(tfs_store_open(&raw, uri, NULL));
    CHECK_OK(tfs_store_put(raw, name, data, SIZE, NULL));
    tfs_store_close(raw);
    return data;
}

static void teardown(unsigned char *data)
{
    char cmd[200];

    unlink(cut);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", remote);
    CHECK(system(cmd) == 0);
    free(data);
}

static void hang(void)
{
    close(open(cut, O_WRONLY | O_CREAT, 0644));
}

/*
 * With the store hung: the try forms say -EAGAIN at once, the async read
 * says pending and is answered only once the store answers, from another
 * thread, with the right bytes; then the try forms answer from RAM.
 */
TEST(try_then_async)
{
    unsigned char *data = setup("obj");
    unsigned char *buf = malloc(SIZE);
    struct tfs_store *st = NULL;
    struct tfs_cache *c;
    struct tfs_file *f = NULL;
    struct done d;
    const void *p;
    void *pin;
    size_t n;
    uint64_t t0;
    char q[160];

    snprintf(q, sizeof(q), "partition_file=%s", cut);
    c = open_cache(q, &st);
    CHECK_OK(tfs_file_open(c, "obj", &f));
    hang();
    done_init(&d);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_file_read_try(f, buf, 2 * BS, BS / 2, &n), -EAGAIN);
    CHECK_RC(tfs_file_read_pin_try(f, 4096, 3 * BS, &p, &n, &pin), -EAGAIN);
    CHECK_RC(tfs_file_read_async(f, buf, SIZE, 0, on_done, &d, &n), 1);
    CHECK(tfs_now_ns() - t0 < 500000000u);     /* none of it waited */
    CHECK_EQ(done_wait(&d, 300), 0);            /* the store is hung */
    unlink(cut);
    CHECK_EQ(done_wait(&d, 10000), 1);
    CHECK_OK(d.rc);
    CHECK_EQ(d.n, SIZE);
    CHECK(!pthread_equal(d.thread, pthread_self()));
    CHECK(memcmp(buf, data, SIZE) == 0);
    usleep(50000);
    CHECK_EQ(d.calls, 1);                       /* exactly once */

    hang();                                     /* cached: no store */
    memset(buf, 0, SIZE);
    CHECK_OK(tfs_file_read_try(f, buf, 2 * BS, BS / 2, &n));
    CHECK_EQ(n, 2 * BS);
    CHECK(memcmp(buf, data + BS / 2, n) == 0);
    CHECK_OK(tfs_file_read_pin_try(f, 4096, 3 * BS, &p, &n, &pin));
    CHECK_EQ(n, 1000);                          /* to the end of file */
    CHECK(memcmp(p, data + 3 * BS, n) == 0);
    tfs_cache_unpin(c, pin);
    CHECK_RC(tfs_file_read_pin_try(f, 4096, BS - 10, &p, &n, &pin), -E2BIG);
    CHECK_OK(tfs_file_read_async(f, buf, 100, SIZE - 50, on_done, &d, &n));
    CHECK_EQ(n, 50);                            /* done now: no call */
    CHECK(memcmp(buf, data + SIZE - 50, 50) == 0);
    CHECK_EQ(d.calls, 1);
    unlink(cut);
    tfs_file_close(f);
    tfs_cache_close(c);
    tfs_store_close(st);
    free(buf);
    teardown(data);
}

/* A failing store: the async read is answered with the error. */
TEST(async_error)
{
    unsigned char *data = setup("obj");
    unsigned char *buf = malloc(SIZE);
    struct tfs_store *st = NULL;
    struct tfs_cache *c = open_cache("error_rate=1", &st);
    struct tfs_file *f = NULL;
    struct done d;
    size_t n;
    int rc;

    done_init(&d);
    CHECK_OK(tfs_file_open_stat(c, "obj", &(struct tfs_stat){
        .size = SIZE, .version = "v"}, &f));
    rc = tfs_file_read_async(f, buf, BS, 0, on_done, &d, &n);
    if (rc == 1) {
        CHECK_EQ(done_wait(&d, 10000), 1);
        rc = d.rc;
    }
    CHECK(rc < 0);
    tfs_file_close(f);
    tfs_cache_close(c);
    tfs_store_close(st);
    free(buf);
    teardown(data);
}

/*
 * The file may be closed while its async reads wait (they hold a
 * reference): the read still lands, and nothing is used after free
 * (ASan builds check that).
 */
TEST(close_while_waiting)
{
    unsigned char *data = setup("obj");
    unsigned char *buf = malloc(SIZE);
    struct tfs_store *st = NULL;
    struct tfs_cache *c;
    struct tfs_file *f = NULL;
    struct done d;
    size_t n;
    char q[160];

    snprintf(q, sizeof(q), "partition_file=%s", cut);
    c = open_cache(q, &st);
    CHECK_OK(tfs_file_open(c, "obj", &f));
    hang();
    done_init(&d);
    CHECK_RC(tfs_file_read_async(f, buf, 3 * BS, BS, on_done, &d, &n), 1);
    tfs_file_close(f);
    unlink(cut);
    CHECK_EQ(done_wait(&d, 10000), 1);
    CHECK_OK(d.rc);
    CHECK_EQ(d.n, SIZE - BS);
    CHECK(memcmp(buf, data + BS, SIZE - BS) == 0);
    tfs_cache_close(c);
    tfs_store_close(st);
    free(buf);
    teardown(data);
}

/*
 * The pin form (the mount's reads of one block): pending while the store
 * hangs, then handed the block itself, pinned, from another thread: the
 * right bytes at the right place, still there after other reads while
 * pinned, the same bytes answered now once cached, -E2BIG across a block
 * boundary, and the store's error with no pin.  The file is closed
 * before the answer.
 */
TEST(pin_async)
{
    unsigned char *data = setup("obj");
    unsigned char *buf = malloc(SIZE);
    struct tfs_store *st = NULL;
    struct tfs_cache *c;
    struct tfs_file *f = NULL;
    struct pdone pd;
    const void *p;
    void *pin;
    size_t n;
    char q[160];

    snprintf(q, sizeof(q), "partition_file=%s", cut);
    c = open_cache(q, &st);
    CHECK_OK(tfs_file_open(c, "obj", &f));
    hang();
    memset(&pd, 0, sizeof(pd));
    done_init(&pd.d);
    CHECK_RC(tfs_file_read_pin_async(f, 8192, BS + 100, on_pin_done, &pd,
                                     &p, &n, &pin), 1);
    CHECK(p == NULL && pin == NULL && n == 0);
    CHECK_RC(tfs_file_read_pin_async(f, 200, BS - 100, on_pin_done, &pd,
                                     &p, &n, &pin), -E2BIG);
    tfs_file_close(f);                          /* the read holds it */
    f = NULL;
    CHECK_EQ(done_wait(&pd.d, 300), 0);
    unlink(cut);
    CHECK_EQ(done_wait(&pd.d, 10000), 1);
    CHECK_OK(pd.d.rc);
    CHECK_EQ(pd.d.n, 8192);
    CHECK(!pthread_equal(pd.d.thread, pthread_self()));
    CHECK(pd.pin != NULL);
    CHECK(memcmp(pd.bytes, data + BS + 100, 8192) == 0);
    CHECK(memcmp(pd.data, data + BS + 100, 8192) == 0);

    CHECK_OK(tfs_file_open(c, "obj", &f));      /* cached now: at once */
    CHECK_OK(tfs_file_read_pin_async(f, 4096, BS + 8192, on_pin_done, &pd,
                                     &p, &n, &pin));
    CHECK_EQ(n, 4096);
    CHECK(pin != NULL && memcmp(p, data + BS + 8192, 4096) == 0);
    tfs_cache_unpin(c, pin);
    CHECK_OK(tfs_file_read(f, buf, SIZE, 0, &n));   /* every block */
    CHECK(memcmp(buf, data, SIZE) == 0);
    CHECK_OK(tfs_file_read_pin_async(f, 4096, 3 * BS, on_pin_done, &pd,
                                     &p, &n, &pin));
    CHECK_EQ(n, 1000);                          /* to the end of file */
    CHECK(memcmp(p, data + 3 * BS, 1000) == 0);
    tfs_cache_unpin(c, pin);
    CHECK_OK(tfs_file_read_pin_async(f, 10, SIZE, on_pin_done, &pd, &p, &n,
                                     &pin));
    CHECK(n == 0 && pin == NULL);               /* past the end */
    CHECK(memcmp(pd.data, data + BS + 100, 8192) == 0); /* still pinned */
    CHECK_EQ(pd.d.calls, 1);
    tfs_cache_unpin(c, pd.pin);
    tfs_file_close(f);
    tfs_cache_close(c);
    tfs_store_close(st);

    c = open_cache("error_rate=1", &st);        /* a failing store */
    CHECK_OK(tfs_file_open_stat(c, "obj", &(struct tfs_stat){
        .size = SIZE, .version = "v"}, &f));
    memset(&pd, 0, sizeof(pd));
    done_init(&pd.d);
    n = 1;
    int rc = tfs_file_read_pin_async(f, 100, 0, on_pin_done, &pd, &p, &n,
                                     &pin);
    if (rc == 1) {
        CHECK_EQ(done_wait(&pd.d, 10000), 1);
        rc = pd.d.rc;
        CHECK(pd.pin == NULL && pd.data == NULL && pd.d.n == 0);
    } else {
        CHECK(pin == NULL && p == NULL && n == 0);
    }
    CHECK(rc < 0);
    tfs_file_close(f);
    tfs_cache_close(c);
    tfs_store_close(st);
    free(buf);
    teardown(data);
}

TESTS(T(try_then_async), T(async_error), T(close_while_waiting),
      T(pin_async));
TEST_MAIN()
