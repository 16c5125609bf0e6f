/* SPDX-License-Identifier: MIT */
/*
 * The fault store over a posix store in a temporary directory:
 * pass-through, latency, bandwidth, injected errors, flipped bytes,
 * partitions, options (URI and TIERFS_FAULT), live reconfiguration and
 * seeded reproducibility.  Timing checks assert lower bounds on injected
 * stalls; upper bounds are wide, for a loaded machine.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "tierfs/fault.h"
#include "tierfs/store.h"

static char dir[128];                   /* this test's directory */
static char uri[512];

/* ---- fixtures ---- */

/* A fresh directory for this test, under one removed at exit. */
static void use_dir(const char *name)
{
    test_subdir("fault", name, dir, sizeof(dir));
}

/* Open "fault+file://<dir>?query". */
static struct tfs_store *open_fault(const char *query)
{
    struct tfs_store *st = NULL;

    snprintf(uri, sizeof(uri), "fault+file://%s?%s", dir, query);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    return st;
}

static int try_open(const char *query)
{
    struct tfs_store *st = NULL;
    int rc;

    snprintf(uri, sizeof(uri), "fault+file://%s?%s", dir, query);
    rc = tfs_store_open(&st, uri, NULL);
    tfs_store_close(st);
    return rc;
}

/* Put len random bytes at key through the plain posix store. */
static unsigned char *put_plain(const char *key, size_t len)
{
    struct tfs_store *st = NULL;
    unsigned char *data = malloc(len + 1);

    CHECK(data != NULL);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)tfs_rand_u64();
    snprintf(uri, sizeof(uri), "file://%s", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_store_put(st, key, data, len, NULL));
    tfs_store_close(st);
    return data;
}

static void sleep_ms(unsigned ms)
{
    tfs_sleep_ns((uint64_t)ms * 1000000);
}

static void touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

    CHECK(fd >= 0);
    close(fd);
}

static int read_some(struct tfs_store *st, const char *key)
{
    char buf[16];
    size_t n;

    return tfs_store_read(st, key, buf, sizeof(buf), 0, NULL, &n);
}

/* A reader on another thread. */
struct reader {
    pthread_t         tid;
    struct tfs_store *st;
    const char       *key;
    size_t            len;
    int               rc;
    uint64_t          end_ns;           /* when the read returned */
    atomic_int        done;             /* set last, by the reader */
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    char *buf = malloc(r->len ? r->len : 1);
    size_t n;

    r->rc = buf ? tfs_store_read(r->st, r->key, buf, r->len, 0, NULL, &n)
                : -ENOMEM;
    r->end_ns = tfs_now_ns();
    free(buf);
    atomic_store(&r->done, 1);
    return NULL;
}

static void reader_start(struct reader *r, struct tfs_store *st,
                         const char *key, size_t len)
{
    r->st = st;
    r->key = key;
    r->len = len;
    r->rc = 1;
    atomic_init(&r->done, 0);
    CHECK_OK(-pthread_create(&r->tid, NULL, reader_main, r));
}

/* ---- tests ---- */

static int count_keys(void *arg, const struct tfs_list_page *page)
{
    *(size_t *)arg += page->n_entries;
    return 0;
}

TEST(passthrough)
{
    size_t len = (1 << 20) + 3;
    unsigned char *data;
    unsigned char *buf = malloc(len + 10);
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    struct tfs_stat s;
    char path[256];
    size_t n = 0;
    size_t keys = 0;

    use_dir("pass");
    data = put_plain("plain", len);
    st = open_fault("");
    CHECK_STR(tfs_store_scheme(st), "fault");
    CHECK(tfs_store_caps(st) & TFS_SCAP_RANGE);
    CHECK_OK(tfs_store_put(st, "a", data, len, NULL));
    CHECK_OK(tfs_store_read(st, "a", buf, len + 10, 0, NULL, &n));
    CHECK_EQ(n, len);
    CHECK(memcmp(buf, data, len) == 0);
    CHECK_OK(tfs_store_read(st, "plain", buf, 5000, 1000, NULL, &n));
    CHECK_EQ(n, 5000);
    CHECK(memcmp(buf, data + 1000, 5000) == 0);
    CHECK_OK(tfs_store_read(st, "plain", buf, 10, len + 5, NULL, &n));
    CHECK_EQ(n, 0);
    CHECK_OK(tfs_store_stat(st, "plain", &s));
    CHECK_EQ(s.size, len);
    CHECK_RC(tfs_store_read(st, "plain", buf, 10, 0, "other", &n),
             TFS_ECHANGED);
    snprintf(path, sizeof(path), "%s/plain", dir);
    CHECK_OK(tfs_store_put_file(st, "sub/fromfd", path, NULL));
    CHECK_OK(tfs_store_read(st, "sub/fromfd", buf, len, 0, NULL, &n));
    CHECK(n == len && memcmp(buf, data, len) == 0);
    CHECK_OK(tfs_store_copy(st, "a", "b"));
    CHECK_OK(tfs_store_rename(st, "b", "c"));
    CHECK_RC(tfs_store_stat(st, "b", &s), -ENOENT);
    CHECK_OK(tfs_store_list_all(st, "", NULL, count_keys, &keys));
    CHECK_EQ(keys, 4);                  /* a c plain sub/fromfd */
    CHECK_OK(tfs_store_remove(st, "c"));
    CHECK_OK(tfs_store_remove(st, "c"));
    CHECK_RC(tfs_store_stat(st, "c", &s), -ENOENT);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.calls, 15);
    CHECK_EQ(fs.injected_errors + fs.flipped_reads + fs.delayed_calls, 0);
    CHECK_EQ(fs.partition_waits + fs.throttled_bytes + fs.timeouts, 0);
    tfs_store_close(st);
    free(data);
    free(buf);
}

TEST(latency)
{
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    struct tfs_stat s;
    uint64_t t0;
    unsigned char *data;
    unsigned char *buf = malloc(1 << 20);
    size_t n;

    use_dir("latency");
    data = put_plain("obj", 1 << 20);
    st = open_fault("latency_ms=40");
    for (int i = 0; i < 3; i++) {
        t0 = tfs_now_ns();
        CHECK_OK(tfs_store_stat(st, "obj", &s));
        CHECK(test_secs_since(t0) >= 0.039);
    }
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_read(st, "obj", buf, 1 << 20, 0, NULL, &n));
    CHECK(test_secs_since(t0) >= 0.039);
    CHECK(n == 1 << 20 && memcmp(buf, data, n) == 0);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.delayed_calls, 4);      /* a read pays once, any size */
    CHECK(fs.delay_ns_total >= 4 * 39000000ull);
    tfs_store_close(st);

    /* A stall never outlives the caller's deadline. */
    st = open_fault("latency_ms=2000&jitter_ms=10");
    t0 = tfs_now_ns();
    tfs_deadline_set(t0 + 50000000);
    CHECK_RC(tfs_store_stat(st, "obj", &s), -ETIMEDOUT);
    tfs_deadline_set(0);
    CHECK(test_secs_since(t0) >= 0.049 && test_secs_since(t0) < 1.0);
    CHECK(strstr(tfs_errdetail(), "latency (stat 'obj')") != NULL);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.timeouts, 1);
    tfs_store_close(st);
    free(data);
    free(buf);
}

TEST(bandwidth)
{
    size_t len = 2 << 20;
    unsigned char *data;
    unsigned char *buf = malloc(len);
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    struct reader r[2];
    uint64_t t0;
    size_t n;

    use_dir("bw");
    data = put_plain("obj", len);
    st = open_fault("bw=8M");
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_read(st, "obj", buf, len, 0, NULL, &n));
    CHECK(test_secs_since(t0) >= 0.24);      /* 2 MiB at 8 MiB/s: 0.25 s */
    CHECK(n == len && memcmp(buf, data, len) == 0);
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_put(st, "up", data, len / 2, NULL));
    CHECK(test_secs_since(t0) >= 0.12);
    /* Threads share the cap: two 1 MiB reads together take 0.25 s. */
    t0 = tfs_now_ns();
    reader_start(&r[0], st, "obj", len / 2);
    reader_start(&r[1], st, "obj", len / 2);
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    CHECK_OK(r[0].rc);
    CHECK_OK(r[1].rc);
    CHECK(test_secs_since(t0) >= 0.24);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.throttled_bytes, len + len / 2 + len);
    CHECK(fs.throttle_ns_total >= 600000000ull);
    tfs_store_close(st);

    /* A transfer cut by its deadline frees the link for the next one. */
    st = open_fault("bw=1M");
    t0 = tfs_now_ns();
    tfs_deadline_set(t0 + 50000000);
    CHECK_RC(tfs_store_read(st, "obj", buf, len, 0, NULL, &n), -ETIMEDOUT);
    tfs_deadline_set(0);
    CHECK(test_secs_since(t0) < 1.0);
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_read(st, "obj", buf, 16384, 0, NULL, &n));
    CHECK(test_secs_since(t0) >= 0.015 && test_secs_since(t0) < 1.0);
    tfs_store_close(st);
    free(data);
    free(buf);
}

TEST(error_names)
{
    static const struct {
        const char *name;
        int         rc;
    } errs[] = {
        {"EIO", -EIO},
        {"EAGAIN", -EAGAIN},
        {"ETIMEDOUT", -ETIMEDOUT},
        {"ECONNRESET", -ECONNRESET},
        {"ECONNREFUSED", -ECONNREFUSED},
        {"ENOENT", -ENOENT},
        {"EACCES", -EACCES},
        {"server", TFS_ESERVER},
        {"econnreset", -ECONNRESET},
    };
    struct tfs_store_stats ns;
    struct tfs_fault_stats fs;
    char query[64];

    use_dir("errors");
    free(put_plain("obj", 100));
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
        struct tfs_store *st;

        snprintf(query, sizeof(query), "error_rate=1&error=%s",
                 errs[i].name);
        st = open_fault(query);
        CHECK_RC(read_some(st, "obj"), errs[i].rc);
        CHECK(strstr(tfs_errdetail(), "fault: injected ") != NULL);
        CHECK(strstr(tfs_errdetail(), " (read 'obj')") != NULL);
        tfs_fault_get_stats(st, &fs);
        CHECK_EQ(fs.injected_errors, 1);
        tfs_store_get_stats(tfs_store_next(st), &ns);
        CHECK_EQ(ns.reads, 0);          /* never reached the store */
        tfs_store_close(st);
    }
    /* The default error, on every operation. */
    {
        struct tfs_store *st = open_fault("error_rate=1");
        struct tfs_stat s;

        CHECK_RC(read_some(st, "obj"), -ECONNRESET);
        CHECK_STR(tfs_errdetail(), "fault: injected ECONNRESET (read 'obj')");
        CHECK_RC(tfs_store_stat(st, "obj", &s), -ECONNRESET);
        CHECK_RC(tfs_store_remove(st, "obj"), -ECONNRESET);
        CHECK_RC(tfs_store_rename(st, "obj", "x"), -ECONNRESET);
        tfs_store_close(st);
    }
}

TEST(error_ops)
{
    struct tfs_store *st;
    struct tfs_list_page page;
    struct tfs_fault_stats fs;
    struct tfs_stat s;

    use_dir("error_ops");
    free(put_plain("obj", 100));
    st = open_fault("error_rate=1&error=EIO&error_ops=read,list");
    CHECK_OK(tfs_store_stat(st, "obj", &s));
    CHECK_RC(read_some(st, "obj"), -EIO);
    CHECK_RC(tfs_store_list(st, "", NULL, NULL, 10, &page), -EIO);
    CHECK(strstr(tfs_errdetail(), "(list '')") != NULL);
    CHECK_EQ(page.n_entries, 0);
    CHECK_OK(tfs_store_put(st, "new", "xy", 2, NULL));
    CHECK_OK(tfs_store_copy(st, "new", "new2"));
    CHECK_OK(tfs_store_rename(st, "new2", "new3"));
    CHECK_OK(tfs_store_remove(st, "new3"));
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.injected_errors, 2);
    CHECK_EQ(fs.calls, 7);
    tfs_store_close(st);
}

/* The number of bytes where a and b differ. */
static size_t count_diffs(const unsigned char *a, const unsigned char *b,
                          size_t len)
{
    size_t d = 0;

    for (size_t i = 0; i < len; i++)
        d += a[i] != b[i];
    return d;
}

TEST(flip)
{
    size_t len = 65536;
    unsigned char *data;
    unsigned char *buf = malloc(len);
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    size_t n;

    use_dir("flip");
    data = put_plain("obj", len);
    st = open_fault("flip_rate=1");
    for (int i = 0; i < 20; i++) {
        CHECK_OK(tfs_store_read(st, "obj", buf, len, 0, NULL, &n));
        CHECK_EQ(n, len);
        CHECK_EQ(count_diffs(buf, data, len), 1);
    }
    CHECK_OK(tfs_store_read(st, "obj", buf, 16, len, NULL, &n));
    CHECK_EQ(n, 0);                     /* nothing read, nothing flipped */
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.flipped_reads, 20);
    CHECK_OK(tfs_fault_configure(st, "flip_rate=0"));
    CHECK_OK(tfs_store_read(st, "obj", buf, len, 0, NULL, &n));
    CHECK_EQ(count_diffs(buf, data, len), 0);
    tfs_store_close(st);
    free(data);
    free(buf);
}

TEST(partition_file_hang)
{
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    struct reader r;
    char query[256];
    char cut[200];
    uint64_t t0;
    uint64_t lifted;

    use_dir("hang");
    free(put_plain("obj", 100));
    snprintf(cut, sizeof(cut), "%s/cut", test_base_dir());
    touch(cut);
    snprintf(query, sizeof(query), "partition_file=%s", cut);
    st = open_fault(query);
    t0 = tfs_now_ns();
    tfs_deadline_set(t0 + 200000000);
    CHECK_RC(read_some(st, "obj"), -ETIMEDOUT);
    tfs_deadline_set(0);
    CHECK(test_secs_since(t0) >= 0.199 && test_secs_since(t0) < 2.0);
    CHECK(strstr(tfs_errdetail(), "partitioned") != NULL);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.partition_waits, 1);
    CHECK(fs.partition_ns_total >= 199000000ull);
    CHECK_EQ(unlink(cut), 0);
    CHECK_OK(read_some(st, "obj"));

    /* With no deadline a call hangs until the partition ends. */
    touch(cut);
    reader_start(&r, st, "obj", 10);
    sleep_ms(150);
    CHECK_EQ(atomic_load(&r.done), 0);  /* still hanging */
    lifted = tfs_now_ns();
    CHECK_EQ(unlink(cut), 0);
    pthread_join(r.tid, NULL);
    CHECK_OK(r.rc);
    CHECK(r.end_ns >= lifted);
    tfs_store_close(st);
}

TEST(partition_refuse)
{
    struct tfs_store *st;
    char query[256];
    char cut[200];
    uint64_t t0;

    use_dir("refuse");
    free(put_plain("obj", 100));
    snprintf(cut, sizeof(cut), "%s/cut-refuse", test_base_dir());
    touch(cut);
    snprintf(query, sizeof(query), "partition_file=%s&partition_mode=refuse",
             cut);
    st = open_fault(query);
    t0 = tfs_now_ns();
    CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
    CHECK(test_secs_since(t0) < 0.5);
    CHECK(strstr(tfs_errdetail(), "refused (read 'obj')") != NULL);
    CHECK_EQ(unlink(cut), 0);
    CHECK_OK(read_some(st, "obj"));
    tfs_store_close(st);
}

TEST(partition_window)
{
    struct tfs_store *st;
    uint64_t t0;

    use_dir("window");
    free(put_plain("obj", 100));
    t0 = tfs_now_ns();
    st = open_fault("partition=0+250,700+60000&partition_mode=refuse");
    CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
    test_sleep_until(t0 + 350000000);
    CHECK_OK(read_some(st, "obj"));     /* between the windows */
    test_sleep_until(t0 + 800000000);
    CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
    tfs_store_close(st);

    /* Hanging in a window: released when it closes. */
    t0 = tfs_now_ns();
    st = open_fault("partition=0+200");
    CHECK_OK(read_some(st, "obj"));
    CHECK(test_secs_since(t0) >= 0.19);
    tfs_store_close(st);
}

TEST(env)
{
    struct tfs_store *st;

    use_dir("env");
    free(put_plain("obj", 100));
    CHECK_EQ(setenv("TIERFS_FAULT", "error_rate=1&error=EIO", 1), 0);
    st = open_fault("");
    CHECK_RC(read_some(st, "obj"), -EIO);
    tfs_store_close(st);
    st = open_fault("error=EACCES");    /* the URI wins */
    CHECK_RC(read_some(st, "obj"), -EACCES);
    tfs_store_close(st);
    CHECK_EQ(setenv("TIERFS_FAULT", "error_rate=1&bogus=1", 1), 0);
    CHECK_RC(try_open(""), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "'bogus' in TIERFS_FAULT") != NULL);
    CHECK_EQ(setenv("TIERFS_FAULT", "latency_ms=soon", 1), 0);
    CHECK_RC(try_open(""), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "latency_ms=soon (from TIERFS_FAULT)"));
    CHECK_OK(try_open("latency_ms=0"));  /* overridden: not parsed */
    CHECK_EQ(unsetenv("TIERFS_FAULT"), 0);
    st = open_fault("");
    CHECK_OK(read_some(st, "obj"));
    tfs_store_close(st);
}

TEST(bad_options)
{
    static const struct {
        const char *query;
        const char *named;
    } bad[] = {
        {"latency=5", "latency"},
        {"latency_ms=abc", "latency_ms=abc"},
        {"latency_ms=-1", "latency_ms"},
        {"jitter_ms=", "jitter_ms"},
        {"bw=fast", "bw=fast"},
        {"error_rate=1.5", "error_rate"},
        {"flip_rate=-0.1", "flip_rate"},
        {"error=EFOO", "error=EFOO"},
        {"error_ops=read,write", "error_ops"},
        {"error_ops=read,", "error_ops"},
        {"partition=100", "partition=100"},
        {"partition=1+2,x+3", "partition"},
        {"partition_mode=sleep", "partition_mode"},
        {"seed=-3", "seed"},
    };

    use_dir("badopts");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_RC(try_open(bad[i].query), TFS_EOPTION);
        if (strstr(tfs_errdetail(), bad[i].named) == NULL)
            TEST_FAIL_("%s: detail '%s' does not name it", bad[i].query,
                       tfs_errdetail());
    }
    CHECK_OK(try_open("latency_ms=0.5&jitter_ms=1&bw=200M&error_rate=0"
                      "&error=server&error_ops=all&flip_rate=0&partition="
                      "&partition_file=&partition_mode=hang&seed=7"));
}

TEST(configure)
{
    struct tfs_store *st;

    use_dir("configure");
    free(put_plain("obj", 100));
    st = open_fault("");
    CHECK_OK(read_some(st, "obj"));
    CHECK_OK(tfs_fault_configure(st, "error_rate=1&error=EIO"));
    CHECK_RC(read_some(st, "obj"), -EIO);
    CHECK_OK(tfs_fault_configure(st, "error=ENOENT"));  /* rate kept */
    CHECK_RC(read_some(st, "obj"), -ENOENT);
    CHECK_RC(tfs_fault_configure(st, "bogus=1"), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "'bogus'") != NULL);
    /* All or nothing: the valid half of a bad change is not applied. */
    CHECK_RC(tfs_fault_configure(st, "error_rate=0&error_ops=nope"),
             TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "error_ops=nope") != NULL);
    CHECK_RC(read_some(st, "obj"), -ENOENT);
    CHECK_OK(tfs_fault_configure(st, "error_rate=0"));
    CHECK_OK(read_some(st, "obj"));
    CHECK_OK(tfs_fault_configure(st, NULL));
    tfs_store_close(st);
}

TEST(configure_lifts_partition)
{
    struct tfs_store *st;
    struct reader r;
    char opt[256];
    char cut[200];

    use_dir("lift");
    free(put_plain("obj", 100));
    st = open_fault("");
    snprintf(cut, sizeof(cut), "%s/cut-conf", test_base_dir());
    touch(cut);
    snprintf(opt, sizeof(opt), "partition_file=%s", cut);
    CHECK_OK(tfs_fault_configure(st, opt));
    reader_start(&r, st, "obj", 10);
    sleep_ms(100);
    CHECK_EQ(atomic_load(&r.done), 0);
    CHECK_OK(tfs_fault_configure(st, "partition_file="));
    pthread_join(r.tid, NULL);
    CHECK_OK(r.rc);
    unlink(cut);
    tfs_store_close(st);
}

/* Reached through a chain; refused on a store without the layer. */
TEST(configure_chain)
{
    struct tfs_store *st;
    struct tfs_store *plain = NULL;
    struct tfs_fault_stats fs;

    use_dir("chain");
    free(put_plain("obj", 100));
    snprintf(uri, sizeof(uri), "retry+fault+file://%s?retries=0", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_fault_configure(st, "error_rate=1&error=EACCES"));
    CHECK_RC(read_some(st, "obj"), -EACCES);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.injected_errors, 1);
    tfs_store_close(st);
    snprintf(uri, sizeof(uri), "file://%s", dir);
    CHECK_OK(tfs_store_open(&plain, uri, NULL));
    CHECK_RC(tfs_fault_configure(plain, "error_rate=1"), -EINVAL);
    fs.calls = 99;
    tfs_fault_get_stats(plain, &fs);
    CHECK_EQ(fs.calls, 0);
    tfs_store_close(plain);
}

/* Readers that see only the two outcomes configure switches between. */
struct churn {
    pthread_t         tid;
    struct tfs_store *st;
    int               bad;              /* reads with another outcome */
};

static void *churn_main(void *arg)
{
    struct churn *c = arg;

    for (int i = 0; i < 300; i++) {
        int rc = read_some(c->st, "obj");

        c->bad += rc != 0 && rc != -EAGAIN;
    }
    return NULL;
}

TEST(configure_concurrent)
{
    struct tfs_store *st;
    struct churn c[4];

    use_dir("churn");
    free(put_plain("obj", 100));
    st = open_fault("");
    for (int i = 0; i < 4; i++) {
        c[i].st = st;
        c[i].bad = 0;
        CHECK_OK(-pthread_create(&c[i].tid, NULL, churn_main, &c[i]));
    }
    for (int i = 0; i < 100; i++) {
        CHECK_OK(tfs_fault_configure(st, i % 2 ? "error_rate=0.5&error="
                                                 "EAGAIN&partition_file=/x"
                                               : "error_rate=0&"
                                                 "partition_file="));
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(c[i].tid, NULL);
        CHECK_EQ(c[i].bad, 0);
    }
    tfs_store_close(st);
}

/* Which of 64 stat calls fail. */
static uint64_t failure_pattern(struct tfs_store *st)
{
    struct tfs_stat s;
    uint64_t mask = 0;

    for (int i = 0; i < 64; i++) {
        if (tfs_store_stat(st, "obj", &s) < 0)
            mask |= 1ull << i;
    }
    return mask;
}

TEST(seed)
{
    struct tfs_store *st;
    uint64_t a;
    uint64_t b;

    use_dir("seed");
    free(put_plain("obj", 100));
    st = open_fault("error_rate=0.5&seed=42");
    a = failure_pattern(st);
    tfs_store_close(st);
    CHECK(a != 0 && a != ~0ull);
    st = open_fault("error_rate=0.5&seed=42&jitter_ms=0.01");
    b = failure_pattern(st);
    CHECK_EQ(a, b);
    CHECK_OK(tfs_fault_configure(st, "seed=42"));   /* restarts it */
    CHECK_EQ(failure_pattern(st), a);
    CHECK_OK(tfs_fault_configure(st, "seed=43"));
    CHECK(failure_pattern(st) != a);
    tfs_store_close(st);
}

TESTS(T(passthrough), T(latency), T(bandwidth), T(error_names),
      T(error_ops), T(flip), T(partition_file_hang), T(partition_refuse),
      T(partition_window), T(env), T(bad_options), T(configure),
      T(configure_lifts_partition), T(configure_chain),
      T(configure_concurrent), T(seed));
TEST_MAIN()
