/* SPDX-License-Identifier: MIT */
/*
 * Access traces (the library's format): the writer and parser
 * round-trip, damaged traces fail with the offset named, a cache writes
 * a trace of what its readers did.  `tierfs profile`'s analysis of them
 * is tested in test_profile.c.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/cache.h"
#include "tierfs/trace.h"
#include "common/util.h"

static char path[64];

/* A trace names every key read: created 0600 whatever the umask. */
TEST(trace_file_is_private)
{
    struct tfs_trace *t = NULL;
    struct stat sb;
    mode_t old = umask(022);

    snprintf(path, sizeof(path), "/tmp/tfs-trace-mode-%d", (int)getpid());
    unlink(path);
    CHECK_OK(tfs_trace_open(&t, path));
    tfs_trace_close(t);
    umask(old);
    CHECK(stat(path, &sb) == 0);
    CHECK_EQ(sb.st_mode & 0777, 0600);
    unlink(path);
}

static const char *tmp_trace(void)
{
    return test_tmpfile(path, sizeof(path), "trace");
}

struct counts {
    int opens;
    int reads;
    int closes;
    uint64_t bytes;
    char first_key[64];
};

static int count_ev(void *arg, const struct tfs_trace_event *ev)
{
    struct counts *c = arg;

    if (ev->type == 1 && c->opens++ == 0)
        snprintf(c->first_key, sizeof(c->first_key), "%s", ev->key);
    if (ev->type == 2) {
        c->reads++;
        c->bytes += ev->len;
    }
    if (ev->type == 3)
        c->closes++;
    return 0;
}

static void *slurp(const char *p, size_t *len)
{
    FILE *f = fopen(p, "rb");
    char *buf = malloc(64u << 20);

    CHECK(f != NULL && buf != NULL);
    *len = fread(buf, 1, 64u << 20, f);
    fclose(f);
    return buf;
}

TEST(round_trip_and_damage)
{
    struct tfs_trace *t = NULL;
    struct counts c = {0};
    unsigned char *buf;
    size_t len;

    CHECK_OK(tfs_trace_open(&t, tmp_trace()));
    uint32_t f = tfs_trace_file_open(t, "a/b.jpg", 1000);
    tfs_trace_read(t, f, 0, 600, 12, TFS_TRACE_STORE);
    tfs_trace_read(t, f, 600, 400, 3, TFS_TRACE_RAM);
    tfs_trace_file_close(t, f);
    tfs_trace_close(t);
    buf = slurp(path, &len);
    CHECK_OK(tfs_trace_parse(buf, len, false, count_ev, &c));
    CHECK_EQ(c.opens, 1);
    CHECK_EQ(c.reads, 2);
    CHECK_EQ(c.closes, 1);
    CHECK_EQ(c.bytes, 1000);
    CHECK_STR(c.first_key, "a/b.jpg");
    /* Cut in the middle of the last record. */
    CHECK_RC(tfs_trace_parse(buf, len - 5, false, count_ev, &c),
             TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "offset") != NULL);
    CHECK_OK(tfs_trace_parse(buf, len - 5, true, count_ev, &c));
    /* A bad record type. */
    buf[16] = 9;
    CHECK_RC(tfs_trace_parse(buf, len, true, count_ev, &c), TFS_EFORMAT);
    CHECK_RC(tfs_trace_parse("nope", 4, true, count_ev, &c), TFS_EFORMAT);
    free(buf);
    unlink(path);
}

TEST(cache_writes_a_trace)
{
    char dir[] = "/tmp/tfs-trace-dir-XXXXXX";
    char file[128];
    struct tfs_store *st = NULL;
    struct tfs_cache *c = NULL;
    struct tfs_file *f = NULL;
    struct counts n = {0};
    unsigned char buf[4096];
    unsigned char *raw;
    size_t len;
    size_t got;
    FILE *fp;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(file, sizeof(file), "%s/obj", dir);
    fp = fopen(file, "wb");
    CHECK(fp != NULL);
    for (int i = 0; i < 10; i++)
        fwrite(buf, 1, sizeof(buf), fp);
    fclose(fp);
    CHECK_OK(tfs_store_open(&st, dir, NULL));
    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_set(c, "trace", tmp_trace()));
    CHECK_OK(tfs_cache_open(c, st));
    CHECK_OK(tfs_file_open(c, "obj", &f));
    for (int i = 0; i < 10; i++)
        CHECK_OK(tfs_file_read(f, buf, sizeof(buf), (uint64_t)i * 4096,
                               &got));
    tfs_file_close(f);
    tfs_cache_close(c);
    tfs_store_close(st);
    raw = slurp(path, &len);
    CHECK_OK(tfs_trace_parse(raw, len, false, count_ev, &n));
    CHECK_EQ(n.opens, 1);
    CHECK_EQ(n.reads, 10);
    CHECK_EQ(n.closes, 1);
    CHECK_EQ(n.bytes, 40960);
    CHECK_STR(n.first_key, "obj");
    free(raw);
    unlink(path);
    snprintf(file, sizeof(file), "rm -rf %s", dir);
    CHECK(system(file) == 0);
}

/* The writer's allocations failing in turn: -ENOMEM and nothing held
 * (ASan); once they succeed, every record reaches the file whole. */
TEST(writer_alloc_failures)
{
    struct tfs_trace *t = NULL;
    struct counts c = {0};
    void *buf;
    size_t len;
    long k;
    int rc = -ENOMEM;

    tmp_trace();
    CHECK_OK(test_alloc_hook());
    for (k = 0; k < 16 && rc != 0; k++) {
        test_alloc_budget(k);
        rc = tfs_trace_open(&t, path);
        test_alloc_budget(-1);
        if (rc != 0)
            CHECK_RC(rc, -ENOMEM);
    }
    CHECK_OK(tfs_replace_allocator(malloc, realloc, calloc, free));
    CHECK_OK(rc);
    CHECK(k > 1);                       /* at least one failure seen */
    for (uint32_t f = 0; f < 3000; f++) {   /* past one 256 KiB buffer */
        char key[32];
        uint32_t id;

        snprintf(key, sizeof(key), "d/file-%u", f);
        id = tfs_trace_file_open(t, key, 1000);
        tfs_trace_read(t, id, 0, 100, 5, 1);
        tfs_trace_file_close(t, id);
    }
    tfs_trace_close(t);
    buf = slurp(path, &len);
    CHECK(buf != NULL);
    CHECK_OK(tfs_trace_parse(buf, len, false, count_ev, &c));
    CHECK_EQ(c.opens, 3000);
    CHECK_EQ(c.reads, 3000);
    CHECK_EQ(c.closes, 3000);
    CHECK_STR(c.first_key, "d/file-0");
    free(buf);
    unlink(path);
}

TESTS(T(round_trip_and_damage), T(cache_writes_a_trace),
      T(trace_file_is_private), T(writer_alloc_failures));
TEST_MAIN()
