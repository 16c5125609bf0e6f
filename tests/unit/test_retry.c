/* SPDX-License-Identifier: MIT */
/*
 * The retry store over a fault store over a posix store in a temporary
 * directory: flaky reads absorbed, non-retryable errors returned at once,
 * the overall deadline, the per-attempt timeout, the caller's deadline,
 * put and list retried, no partial object after a failed put, logging
 * and options.  Timing checks assert lower bounds; upper bounds are wide.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "tierfs/cache.h"
#include "tierfs/fault.h"
#include "tierfs/log.h"
#include "tierfs/retry.h"
#include "tierfs/store.h"

static char dir[128];                   /* this test's directory */
static char uri[512];

/* ---- fixtures ---- */

/* A fresh directory for this test, under one removed at exit. */
static void use_dir(const char *name)
{
    test_subdir("retry", name, dir, sizeof(dir));
}

/* Open "<schemes>://<dir>?query". */
static struct tfs_store *open_at(const char *schemes, const char *query)
{
    struct tfs_store *st = NULL;

    snprintf(uri, sizeof(uri), "%s://%s?%s", schemes, dir, query);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    return st;
}

static struct tfs_store *open_retry(const char *query)
{
    return open_at("retry+fault+file", query);
}

/* Put len random bytes at key through the plain posix store. */
static unsigned char *put_plain(const char *key, size_t len)
{
    struct tfs_store *st = open_at("file", "");
    unsigned char *data = malloc(len + 1);

    CHECK(data != NULL);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)tfs_rand_u64();
    CHECK_OK(tfs_store_put(st, key, data, len, NULL));
    tfs_store_close(st);
    return data;
}

static int read_some(struct tfs_store *st, const char *key)
{
    char buf[16];
    size_t n;

    return tfs_store_read(st, key, buf, sizeof(buf), 0, NULL, &n);
}

/* The entries of the test directory, hidden temp files included. */
static int count_dir_entries(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    CHECK(d != NULL);
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* A partition file under the base directory, created. */
static const char *make_cut(const char *name)
{
    static char cut[200];
    int fd;

    snprintf(cut, sizeof(cut), "%s/%s", test_base_dir(), name);
    fd = open(cut, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    close(fd);
    return cut;
}

/* ---- tests ---- */

TEST(flaky_reads)
{
    size_t len = 65536;
    unsigned char *data;
    unsigned char buf[4096];
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    struct tfs_fault_stats fs;

    use_dir("flaky");
    data = put_plain("obj", len);
    st = open_retry("error_rate=0.5&seed=1&error=ECONNRESET&retries=30"
                    "&retry_base_ms=1&retry_max_ms=2");
    for (int i = 0; i < 200; i++) {
        size_t off = (size_t)i * 293 % (len - sizeof(buf));
        size_t n = 0;

        memset(buf, 0, sizeof(buf));
        CHECK_OK(tfs_store_read(st, "obj", buf, sizeof(buf), off, NULL, &n));
        CHECK_EQ(n, sizeof(buf));
        CHECK(memcmp(buf, data + off, n) == 0);
    }
    tfs_retry_get_stats(st, &rs);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(rs.calls, 200);
    CHECK(rs.retries > 20);
    CHECK_EQ(rs.giveups + rs.deadline_exceeded, 0);
    CHECK_EQ(rs.retries, fs.injected_errors);
    CHECK_EQ(fs.calls, 200 + rs.retries);
    tfs_store_close(st);
    free(data);
}

TEST(non_retryable)
{
    struct tfs_store *st;
    struct tfs_store_stats ns;
    struct tfs_retry_stats rs;
    struct tfs_fault_stats fs;
    struct tfs_stat s;

    use_dir("nonretry");
    free(put_plain("obj", 100));
    st = open_retry("error=ENOENT&error_rate=1&retry_base_ms=1000");
    CHECK_RC(read_some(st, "obj"), -ENOENT);
    CHECK_STR(tfs_errdetail(), "fault: injected ENOENT (read 'obj')");
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.calls, 1);
    tfs_store_get_stats(tfs_store_find(st, "fault"), &ns);
    CHECK_EQ(ns.reads, 1);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.retries + rs.giveups + rs.deadline_exceeded, 0);
    tfs_store_close(st);

    /* A real ENOENT from the store below, likewise. */
    st = open_retry("");
    CHECK_RC(tfs_store_stat(st, "missing", &s), -ENOENT);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.calls, 1);
    CHECK_EQ(rs.retries, 0);
    tfs_store_close(st);
}

TEST(overall_deadline)
{
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    uint64_t t0;
    double secs;

    use_dir("deadline");
    free(put_plain("obj", 100));
    st = open_retry("deadline_ms=300&error_rate=1&error=EAGAIN"
                    "&retries=100000&retry_base_ms=5&retry_max_ms=40");
    t0 = tfs_now_ns();
    CHECK_RC(read_some(st, "obj"), -EAGAIN);
    secs = test_secs_since(t0);
    if (secs < 0.299 || secs > 1.5)
        TEST_FAIL_("gave up after %.3f s, want [0.3, 1.5]", secs);
    CHECK(strstr(tfs_errdetail(), "fault: injected EAGAIN") != NULL);
    CHECK_EQ(tfs_deadline_get(), 0);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.deadline_exceeded, 1);
    CHECK_EQ(rs.giveups, 0);
    CHECK(rs.retries >= 5);
    tfs_store_close(st);
}

TEST(attempt_timeout)
{
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    struct tfs_fault_stats fs;
    char query[300];
    uint64_t t0;
    double secs;

    use_dir("timeout");
    free(put_plain("obj", 100));
    snprintf(query, sizeof(query), "partition_file=%s&timeout_ms=100"
             "&retries=2&retry_base_ms=1&deadline_ms=5000",
             make_cut("cut-timeout"));
    st = open_retry(query);
    t0 = tfs_now_ns();
    CHECK_RC(read_some(st, "obj"), -ETIMEDOUT);
    secs = test_secs_since(t0);
    if (secs < 0.299 || secs > 3.0)
        TEST_FAIL_("gave up after %.3f s, want [0.3, 3]", secs);
    CHECK(strstr(tfs_errdetail(), "partitioned") != NULL);
    CHECK_EQ(tfs_deadline_get(), 0);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.calls, 3);
    CHECK_EQ(fs.timeouts, 3);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.retries, 2);
    CHECK_EQ(rs.giveups, 1);
    tfs_store_close(st);
    unlink(make_cut("cut-timeout"));
}

/*
 * D2: an upload longer than one attempt.  8 MB through a 4 MB/s link
 * take 2 s, four times timeout_ms and more than deadline_ms: the
 * attempt's time grows by bytes / min_rate, so one attempt finishes.
 * With min_rate above the link's speed the allowance is too short and
 * the put fails as before, at about timeout_ms + 8 MB / min_rate.
 */
TEST(transfer_allowance)
{
    const size_t len = 8000000;
    struct tfs_store *st;
    struct tfs_fault_stats fs;
    struct tfs_stat sb;
    unsigned char *data = malloc(len);
    unsigned char *back = malloc(len);
    size_t n = 0;
    uint64_t t0;
    double secs;

    CHECK(data != NULL && back != NULL);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 7 + i / 4096);
    use_dir("allowance");
    st = open_retry("bw=4M&timeout_ms=500&deadline_ms=1500&retries=3"
                    "&retry_base_ms=1");
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_put(st, "big", data, len, NULL));
    secs = test_secs_since(t0);
    if (secs < 1.5)
        TEST_FAIL_("the put took %.3f s: the link was not slow", secs);
    printf("# 8 MB put through bw=4M, timeout_ms=500: %.2f s\n", secs);
    tfs_fault_get_stats(st, &fs);
    CHECK_EQ(fs.calls, 1);              /* one attempt, not cut */
    CHECK_EQ(fs.timeouts, 0);
    /* a large read gets the same allowance */
    CHECK_OK(tfs_store_read(st, "big", back, len, 0, NULL, &n));
    CHECK_EQ(n, len);
    CHECK(memcmp(back, data, len) == 0);
    tfs_store_close(st);
    st = open_at("file", "");
    CHECK_OK(tfs_store_stat(st, "big", &sb));
    CHECK_EQ(sb.size, len);
    tfs_store_close(st);

    st = open_retry("bw=4M&timeout_ms=500&deadline_ms=1500&retries=0"
                    "&min_rate=64M");
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_put(st, "big2", data, len, NULL), -ETIMEDOUT);
    secs = test_secs_since(t0);
    if (secs < 0.55 || secs > 1.4)
        TEST_FAIL_("gave up after %.3f s, want about 0.62", secs);
    CHECK(strstr(tfs_errdetail(), "throttled by bw") != NULL);
    tfs_store_close(st);
    free(data);
    free(back);
}

TEST(caller_deadline)
{
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    struct tfs_fault_stats fs;
    char query[300];
    uint64_t t0;
    uint64_t mine;
    double secs;

    use_dir("caller");
    free(put_plain("obj", 100));
    snprintf(query, sizeof(query), "partition_file=%s&timeout_ms=100"
             "&retries=1000&retry_base_ms=1", make_cut("cut-caller"));
    st = open_retry(query);
    t0 = tfs_now_ns();
    mine = t0 + 250000000;
    tfs_deadline_set(mine);
    CHECK_RC(read_some(st, "obj"), -ETIMEDOUT);
    CHECK_EQ(tfs_deadline_get(), mine);     /* restored */
    secs = test_secs_since(t0);
    if (secs < 0.249 || secs > 1.5)
        TEST_FAIL_("gave up after %.3f s, want [0.25, 1.5]", secs);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.deadline_exceeded, 1);

    /* A deadline already past: no attempt at all. */
    tfs_fault_get_stats(st, &fs);
    CHECK_RC(read_some(st, "obj"), -ETIMEDOUT);
    CHECK(strstr(tfs_errdetail(), "retry: deadline passed") != NULL);
    CHECK_EQ(tfs_deadline_get(), mine);
    tfs_deadline_set(0);
    {
        uint64_t before = fs.calls;

        tfs_fault_get_stats(st, &fs);
        CHECK_EQ(fs.calls, before);
    }
    tfs_store_close(st);
    unlink(make_cut("cut-caller"));
}

static int count_keys(void *arg, const struct tfs_list_page *page)
{
    *(size_t *)arg += page->n_entries;
    return 0;
}

TEST(put_and_list)
{
    struct tfs_store *st;
    struct tfs_store *plain;
    struct tfs_retry_stats rs;
    struct tfs_list_page page;
    char key[32];
    char val[32];
    char buf[32];
    size_t keys = 0;
    size_t n;

    use_dir("putlist");
    st = open_retry("error_rate=0.5&seed=7&error=ECONNRESET"
                    "&error_ops=put,list&retries=30&retry_base_ms=1"
                    "&retry_max_ms=2");
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "d/k%02d", i);
        snprintf(val, sizeof(val), "value %d", i);
        CHECK_OK(tfs_store_put(st, key, val, strlen(val), NULL));
    }
    tfs_retry_get_stats(st, &rs);
    CHECK(rs.retries > 0);
    for (int i = 0; i < 10; i++) {
        CHECK_OK(tfs_store_list(st, "d/", NULL, NULL, 7, &page));
        CHECK_EQ(page.n_entries, 7);
        CHECK(page.next_token != NULL);
        tfs_list_page_cleanup(&page);
    }
    CHECK_OK(tfs_store_list_all(st, "d/", NULL, count_keys, &keys));
    CHECK_EQ(keys, 20);
    tfs_retry_get_stats(st, &rs);
    CHECK(rs.retries > 5);
    CHECK_EQ(rs.giveups, 0);
    tfs_store_close(st);
    plain = open_at("file", "");
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "d/k%02d", i);
        snprintf(val, sizeof(val), "value %d", i);
        CHECK_OK(tfs_store_read(plain, key, buf, sizeof(buf), 0, NULL, &n));
        CHECK(n == strlen(val) && memcmp(buf, val, n) == 0);
    }
    tfs_store_close(plain);
}

TEST(other_ops)
{
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    struct tfs_stat s;

    use_dir("ops");
    free(put_plain("a", 100));
    st = open_retry("error_rate=0.5&seed=5&error=server&retries=30"
                    "&retry_base_ms=1&retry_max_ms=2");
    for (int i = 0; i < 5; i++) {
        CHECK_OK(tfs_store_stat(st, "a", &s));
        CHECK_OK(tfs_store_copy(st, "a", "b"));
        CHECK_OK(tfs_store_rename(st, "b", "c"));
        CHECK_OK(tfs_store_remove(st, "c"));
    }
    CHECK_RC(tfs_store_stat(st, "c", &s), -ENOENT);
    tfs_retry_get_stats(st, &rs);
    CHECK(rs.retries > 0);
    CHECK_EQ(rs.calls, 21);
    tfs_store_close(st);
}

TEST(failed_put_no_partial)
{
    size_t len = 4 << 20;
    unsigned char *data = malloc(len);
    unsigned char *old;
    unsigned char buf[64];
    struct tfs_store *st;
    struct tfs_store *plain;
    struct tfs_retry_stats rs;
    struct tfs_stat s;
    size_t n;

    use_dir("nopartial");
    memset(data, 'x', len);
    st = open_retry("error_rate=1&error=ECONNRESET&error_ops=put"
                    "&retries=2&retry_base_ms=1");
    CHECK_RC(tfs_store_put(st, "k", data, len, NULL), -ECONNRESET);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.giveups, 1);
    tfs_store_close(st);
    CHECK_EQ(count_dir_entries(), 0);

    /* Cut off mid-upload by the per-attempt timeout, twice (min_rate=0:
       no allowance for the bytes). */
    st = open_retry("bw=1M&timeout_ms=100&retries=1&retry_base_ms=1"
                    "&min_rate=0");
    CHECK_RC(tfs_store_put(st, "k", data, len, NULL), -ETIMEDOUT);
    tfs_store_close(st);
    CHECK_EQ(count_dir_entries(), 0);

    /* A failed overwrite leaves the old object whole. */
    old = put_plain("k", sizeof(buf));
    st = open_retry("error_rate=1&error=EAGAIN&error_ops=put&retries=1"
                    "&retry_base_ms=1");
    CHECK_RC(tfs_store_put(st, "k", data, len, NULL), -EAGAIN);
    tfs_store_close(st);
    plain = open_at("file", "");
    CHECK_OK(tfs_store_stat(plain, "k", &s));
    CHECK_EQ(s.size, sizeof(buf));
    CHECK_OK(tfs_store_read(plain, "k", buf, sizeof(buf), 0, NULL, &n));
    CHECK(n == sizeof(buf) && memcmp(buf, old, n) == 0);
    tfs_store_close(plain);
    CHECK_EQ(count_dir_entries(), 1);
    free(old);
    free(data);
}

/* ---- logging ---- */

static int log_debug_retrying;
static int log_info_giveup;
static char log_last[1024];

static void log_capture(void *arg, int level, const char *msg)
{
    (void)arg;
    if (level == TFS_LOG_DEBUG && strstr(msg, "; retrying in ") != NULL)
        log_debug_retrying++;
    if (level == TFS_LOG_INFO) {
        log_info_giveup++;
        snprintf(log_last, sizeof(log_last), "%s", msg);
    }
}

TEST(logging)
{
    struct tfs_store *st;

    use_dir("log");
    free(put_plain("obj", 100));
    st = open_retry("error_rate=1&error=EAGAIN&retries=2&retry_base_ms=1");
    tfs_log_set_sink(log_capture, NULL);
    tfs_log_set_level(TFS_LOG_DEBUG);
    CHECK_RC(read_some(st, "obj"), -EAGAIN);
    tfs_log_set_sink(NULL, NULL);
    tfs_log_set_level(TFS_LOG_WARNING);
    CHECK_EQ(log_debug_retrying, 2);
    CHECK_EQ(log_info_giveup, 1);
    if (strncmp(log_last, "retry: read 'obj' failed after 3 attempts: ",
                43) != 0 || strstr(log_last, "injected EAGAIN") == NULL)
        TEST_FAIL_("unexpected give-up line '%s'", log_last);
    CHECK_STR(tfs_errdetail(), "fault: injected EAGAIN (read 'obj')");
    tfs_store_close(st);
}

TEST(options)
{
    struct tfs_store *st = NULL;
    struct tfs_retry_stats rs;

    use_dir("options");
    free(put_plain("obj", 100));
    st = open_at("retry+file", "");
    CHECK_STR(tfs_store_scheme(st), "retry");
    CHECK(tfs_store_caps(st) & TFS_SCAP_WRAPPER);
    CHECK_OK(read_some(st, "obj"));
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.calls, 1);
    /* The defaults: deadline_ms 120000, min_rate 256K (8M: 32 s more). */
    CHECK_EQ(tfs_retry_deadline_ms(st, 0), 120000);
    CHECK_EQ(tfs_retry_deadline_ms(st, 8u << 20), 152000);
    tfs_store_close(st);
    snprintf(uri, sizeof(uri), "retry+file://%s?deadline_ms=1000&"
             "min_rate=1M", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_EQ(tfs_retry_deadline_ms(st, 8u << 20), 9000);
    tfs_store_close(st);
    st = open_at("file", "");
    rs.calls = 9;
    tfs_retry_get_stats(st, &rs);       /* no retry layer: zeros */
    CHECK_EQ(rs.calls, 0);
    tfs_store_close(st);

    st = NULL;
    snprintf(uri, sizeof(uri), "retry+file://%s?retries=abc", dir);
    CHECK_RC(tfs_store_open(&st, uri, NULL), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "retries=abc") != NULL);
    snprintf(uri, sizeof(uri), "retry+file://%s?retires=3", dir);
    CHECK_RC(tfs_store_open(&st, uri, NULL), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "retires") != NULL);
    snprintf(uri, sizeof(uri), "retry+file://%s?timeout_ms=99999999999", dir);
    CHECK_RC(tfs_store_open(&st, uri, NULL), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "retry option timeout_ms=99999999999: "
              "expected milliseconds in 0..1000000000");
    snprintf(uri, sizeof(uri), "retry+file://%s?min_rate=fast", dir);
    CHECK_RC(tfs_store_open(&st, uri, NULL), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "retry option min_rate=fast: expected a "
              "size such as 8M");
    snprintf(uri, sizeof(uri), "retry+file://%s?deadline_ms=0&timeout_ms=0"
             "&retries=0&retry_base_ms=0&retry_max_ms=0", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(read_some(st, "obj"));
    tfs_store_close(st);
}

/*
 * F2: an uncached read through a cache over retry+fault with the store
 * hung fails within deadline_ms of the caller's request (plus a margin),
 * alone and when more reads than fetch workers ask at once: a read
 * queued behind hung ones does not start its deadline when a worker
 * takes it up; and the same block asked again at once fails at once.
 */
#define CD_FILES   8
#define CD_DL_MS   1000
#define CD_SLACK_S 0.5

struct cd_reader {
    struct tfs_cache *c;
    char              key[16];
    struct tfs_stat   st;
    int               rc;
    double            secs;             /* from the request to the answer */
};

static void *cd_read(void *arg)
{
    struct cd_reader *r = arg;
    struct tfs_file *f = NULL;
    uint64_t t0 = tfs_now_ns();
    char buf[64];
    size_t n = 0;

    r->rc = tfs_file_open_stat(r->c, r->key, &r->st, &f);
    if (r->rc == 0) {
        r->rc = tfs_file_read(f, buf, sizeof(buf), 0, &n);
        tfs_file_close(f);
    }
    r->secs = test_secs_since(t0);
    return NULL;
}

TEST(cache_read_deadline)
{
    struct tfs_store *st;
    struct tfs_cache *c = NULL;
    struct cd_reader rd[CD_FILES + 1];
    pthread_t th[CD_FILES];
    char query[300];
    char cut[200];
    double worst = 0;
    double one;
    double again;

    use_dir("cachedl");
    snprintf(cut, sizeof(cut), "%s/cut-cachedl", test_base_dir());
    unlink(cut);
    snprintf(query, sizeof(query), "partition_file=%s&timeout_ms=200"
             "&deadline_ms=%d&retries=1000&retry_base_ms=1", cut, CD_DL_MS);
    st = open_retry(query);
    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_set(c, "max_inflight", "2"));
    CHECK_OK(tfs_cache_open(c, st));
    for (int i = 0; i <= CD_FILES; i++) {
        rd[i].c = c;
        snprintf(rd[i].key, sizeof(rd[i].key), "f%d", i);
        free(put_plain(rd[i].key, 8192));
        CHECK_OK(tfs_store_stat(st, rd[i].key, &rd[i].st));
    }
    CHECK_STR(make_cut("cut-cachedl"), cut);        /* the store hangs */

    /* One read alone. */
    cd_read(&rd[CD_FILES]);
    CHECK(rd[CD_FILES].rc < 0);
    one = rd[CD_FILES].secs;
    if (one > CD_DL_MS / 1000.0 + CD_SLACK_S)
        TEST_FAIL_("one read failed after %.3f s, want <= %.1f s", one,
                   CD_DL_MS / 1000.0 + CD_SLACK_S);

    /*
     * The same block again at once (as the kernel rereads the first page
     * after a failed readahead): the timeout just seen, not a new wait;
     * once the memo has lapsed, the store is asked again.
     */
    cd_read(&rd[CD_FILES]);
    CHECK_RC(rd[CD_FILES].rc, -ETIMEDOUT);
    again = rd[CD_FILES].secs;
    if (again > 0.2)
        TEST_FAIL_("the same block again failed after %.3f s, want at once",
                   again);
    tfs_sleep_ns(1100000000ull);
    cd_read(&rd[CD_FILES]);
    CHECK(rd[CD_FILES].rc < 0);
    if (rd[CD_FILES].secs < CD_DL_MS / 1000.0 - 0.05)
        TEST_FAIL_("after the memo lapsed: failed after %.3f s, want the "
                   "store asked again (a deadline)", rd[CD_FILES].secs);

    /* Four times as many reads as fetch workers, at once. */
    for (int i = 0; i < CD_FILES; i++)
        CHECK(pthread_create(&th[i], NULL, cd_read, &rd[i]) == 0);
    for (int i = 0; i < CD_FILES; i++) {
        pthread_join(th[i], NULL);
        CHECK(rd[i].rc < 0);
        worst = TFS_MAX(worst, rd[i].secs);
    }
    printf("cache_read_deadline: deadline %d ms, one read %.3f s, "
           "again at once %.3f s, slowest of %d concurrent reads %.3f s\n",
           CD_DL_MS, one, again, CD_FILES, worst);
    if (worst > CD_DL_MS / 1000.0 + CD_SLACK_S)
        TEST_FAIL_("slowest of %d concurrent reads failed after %.3f s, "
                   "want <= %.1f s", CD_FILES, worst,
                   CD_DL_MS / 1000.0 + CD_SLACK_S);
    unlink(cut);
    tfs_cache_close(c);
    tfs_store_close(st);
}

/*
 * A store that answered and then refuses connections (a gateway
 * restarting) is waited for until the deadline, past `retries`; one that
 * never answered, wait_refused=0, or no deadline at all keep the count.
 * The fault layer's clock starts at its open; "R" below is refused.
 */
#define OUTAGE_Q "&partition_mode=refuse&retries=2&retry_base_ms=5" \
                 "&retry_max_ms=40"

TEST(refused_outage)
{
    struct tfs_store *st;
    struct tfs_retry_stats rs;
    struct tfs_stat s;
    static const char *const counted[] = {
        "partition=300+60000&deadline_ms=5000&wait_refused=0" OUTAGE_Q,
        "partition=300+60000&deadline_ms=0" OUTAGE_Q,
    };
    uint64_t t0, t1;
    double secs;

    use_dir("outage");
    free(put_plain("obj", 100));

    /* R from 300 to 800 ms: the second read waits it out. */
    t0 = tfs_now_ns();
    st = open_retry("partition=300+500&deadline_ms=5000" OUTAGE_Q);
    CHECK_OK(read_some(st, "obj"));
    test_sleep_until(t0 + 350000000);
    CHECK_OK(read_some(st, "obj"));
    CHECK(test_secs_since(t0) >= 0.795);
    tfs_retry_get_stats(st, &rs);
    if (rs.retries <= 2)
        TEST_FAIL_("%llu retries through a 0.45 s outage, want > 2",
                   (unsigned long long)rs.retries);
    CHECK_EQ(rs.giveups + rs.deadline_exceeded, 0);
    tfs_store_close(st);

    /* An outage longer than the deadline: refused at the deadline. */
    t0 = tfs_now_ns();
    st = open_retry("partition=300+60000&deadline_ms=400" OUTAGE_Q);
    CHECK_OK(read_some(st, "obj"));
    test_sleep_until(t0 + 350000000);
    t1 = tfs_now_ns();
    CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
    secs = test_secs_since(t1);
    if (secs < 0.399 || secs > 2.0)
        TEST_FAIL_("gave up after %.3f s, want [0.4, 2]", secs);
    CHECK(strstr(tfs_errdetail(), "refused") != NULL);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.deadline_exceeded, 1);
    CHECK_EQ(rs.giveups, 0);
    tfs_store_close(st);

    /* Never answered (a wrong address, a server not up): counted. */
    st = open_retry("partition=0+60000&deadline_ms=5000" OUTAGE_Q);
    CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.retries, 2);
    CHECK_EQ(rs.giveups, 1);
    tfs_store_close(st);

    /* wait_refused=0, and no deadline at all: counted after an answer. */
    for (size_t i = 0; i < TFS_ARRAY_LEN(counted); i++) {
        t0 = tfs_now_ns();
        st = open_retry(counted[i]);
        CHECK_OK(read_some(st, "obj"));
        test_sleep_until(t0 + 350000000);
        CHECK_RC(read_some(st, "obj"), -ECONNREFUSED);
        tfs_retry_get_stats(st, &rs);
        CHECK_EQ(rs.retries, 2);
        CHECK_EQ(rs.giveups, 1);
        tfs_store_close(st);
    }

    /* Other retryable errors still count after an answer. */
    st = open_retry("error=ECONNRESET&error_rate=1&error_ops=read"
                    "&deadline_ms=5000" OUTAGE_Q);
    CHECK_OK(tfs_store_stat(st, "obj", &s));
    CHECK_RC(read_some(st, "obj"), -ECONNRESET);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.retries, 2);
    CHECK_EQ(rs.giveups, 1);
    tfs_store_close(st);
}

TESTS(T(flaky_reads), T(non_retryable), T(overall_deadline),
      T(attempt_timeout), T(transfer_allowance), T(caller_deadline),
      T(put_and_list),
      T(other_ops), T(failed_put_no_partial), T(logging), T(options),
      T(cache_read_deadline), T(refused_outage));
TEST_MAIN()
