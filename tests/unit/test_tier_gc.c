/* SPDX-License-Identifier: MIT */
/*
 * Eviction of a shared cache tier (src/tier/gc.c) over a directory tier
 * whose objects' LastModified are set by hand (utimensat):
 *
 *   by_access   blocks go oldest last access first, the access logs
 *               outranking LastModified; exactly the logs no block left
 *               needs go (strictly older than the oldest left); a dry
 *               run removes nothing and names exactly what would go
 *   keep_log    --keep-log's window removes older logs too
 *   to_zero     max 0: every block and every readable log go; what is
 *               not a block or not a log is left alone
 *   figures     ls's figures (max UINT64_MAX): nothing removed
 *
 * The CLI over the S3 server runs in tests/integ/shared_tier.sh.
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tier/gc.h"
#include "tier/shared.h"
#include "tierfs/store.h"

#define T0 1700000000LL                 /* seconds: the times' base */
#define S 1000000000LL

static char dir[64];

static void cleanup(void)
{
    if (dir[0] != '\0')
        test_rmtree(dir);
}

/* Write name (under the tier) with len bytes of text, mtime T0 + t s. */
static void put(const char *name, const char *text, size_t len, long t)
{
    struct timespec ts[2] = {{.tv_sec = T0 + t}, {.tv_sec = T0 + t}};
    char path[256];
    char sub[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (char *p = strchr(path + strlen(dir) + 1, '/'); p != NULL;
         p = strchr(p + 1, '/')) {
        snprintf(sub, sizeof(sub), "%.*s", (int)(p - path), path);
        mkdir(sub, 0755);
    }
    f = fopen(path, "w");
    CHECK(f != NULL);
    for (size_t i = 0; i < len; i++)
        CHECK(fputc(text ? text[i] : 'b', f) != EOF);
    CHECK(fclose(f) == 0);
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static bool exists(const char *name)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Block c's id: 32 times the hex digit c; key v1/cc/cccc... */
static const char *blk(char c)
{
    static char key[8][64];
    static int k;
    char *out = key[k++ % 8];

    snprintf(out, 64, "v1/%c%c/", c, c);
    memset(out + 6, c, 32);
    out[38] = '\0';
    return out;
}

static void put_log(const char *name, const char *ids, long t)
{
    char text[512];
    size_t n;

    n = (size_t)snprintf(text, sizeof(text), "%s", TFS_SHARED_LOG_MAGIC);
    for (const char *c = ids; *c != '\0'; c++) {
        memset(text + n, *c, 32);
        text[n + 32] = '\n';
        n += 33;
    }
    put(name, text, n, t);
}

/*
 * Blocks a..f (LastModified, size, logs naming them):
 *   a 100 1000        -> last 100
 *   b 200 2000 L1     -> last 600
 *   c 300 3000        -> last 300
 *   d 400 4000 L2     -> last 500
 *   e 700 5000        -> last 700
 *   f  50 6000 L1 L3  -> last 800
 * Logs: L1 at 600 (b, f, and 9: no such block), L2 at 500 (d), L3 at 800
 * (f); access/junk at 10 is no log; v1/zz/other is no block.
 */
static void setup(void)
{
    static const struct {
        char c;
        long t;
        size_t size;
    } b[] = {{'a', 100, 1000}, {'b', 200, 2000}, {'c', 300, 3000},
             {'d', 400, 4000}, {'e', 700, 5000}, {'f', 50, 6000}};

    if (dir[0] == '\0')
        atexit(cleanup);
    cleanup();
    snprintf(dir, sizeof(dir), "/tmp/tfs-tiergc-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
        put(blk(b[i].c), NULL, b[i].size, b[i].t);
    put_log("access/n1-1-1700000600-0", "bf9", 600);
    put_log("access/n2-7-1700000500-0", "d", 500);
    put_log("access/n1-1-1700000800-1", "f", 800);
    put("access/junk", "not a log\n", 10, 10);
    put("v1/zz/other", "x", 1, 1);
}

struct seen {
    char keys[16][64];
    int  n;
};

static void note(void *arg, const char *key, uint64_t size, int64_t last_ns,
                 bool is_log)
{
    struct seen *s = arg;

    (void)size;
    (void)last_ns;
    (void)is_log;
    if (s->n < 16)
        snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", key);
    s->n++;
}

static void gc(struct tfs_tier_gc_opts *o, struct tfs_tier_gc_result *r)
{
    struct tfs_store *st;
    char uri[128];

    snprintf(uri, sizeof(uri), "file://%s", dir);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_tier_gc(st, o, r));
    tfs_store_close(st);
}

TEST(by_access)
{
    struct seen s = {0};
    struct tfs_tier_gc_opts o = {.max_size = 16000, .dry_run = true,
                                 .each = note, .arg = &s};
    struct tfs_tier_gc_result r;

    setup();
    gc(&o, &r);                         /* dry: names a, c, d, then L2 */
    CHECK_EQ(s.n, 4);
    CHECK_STR(s.keys[0], blk('a'));
    CHECK_STR(s.keys[1], blk('c'));
    CHECK_STR(s.keys[2], blk('d'));
    CHECK_STR(s.keys[3], "access/n2-7-1700000500-0");
    CHECK_EQ(r.removed, 3);
    CHECK(exists(blk('a')) && exists(blk('c')) && exists(blk('d')));
    CHECK(exists("access/n2-7-1700000500-0"));

    o.dry_run = false;
    s.n = 0;
    gc(&o, &r);
    CHECK_EQ(s.n, 4);
    CHECK_EQ(r.objects, 6);
    CHECK_EQ(r.bytes, 21000);
    CHECK_EQ(r.removed, 3);             /* a, c, d: 13000 bytes left */
    CHECK_EQ(r.removed_bytes, 8000);
    CHECK_EQ(r.logs, 3);
    CHECK_EQ(r.logs_bad, 1);
    CHECK_EQ(r.others, 1);
    CHECK_EQ(r.logs_removed, 1);
    CHECK_EQ(r.errors, 0);
    CHECK_EQ(r.oldest_ns, (T0 + 600) * S);  /* b, by L1 */
    CHECK_EQ(r.newest_ns, (T0 + 800) * S);  /* f, by L3 */
    CHECK(!exists(blk('a')) && !exists(blk('c')) && !exists(blk('d')));
    CHECK(exists(blk('b')) && exists(blk('e')) && exists(blk('f')));
    CHECK(!exists("access/n2-7-1700000500-0"));  /* d's: d went */
    CHECK(exists("access/n1-1-1700000600-0"));   /* decides b's age */
    CHECK(exists("access/n1-1-1700000800-1"));
    CHECK(exists("access/junk") && exists("v1/zz/other"));
}

TEST(keep_log)
{
    struct seen s = {0};
    struct tfs_tier_gc_opts o = {.max_size = UINT64_MAX,
                                 .keep_log_ns = 300 * S,
                                 .now_ns = (T0 + 1000) * S};
    struct tfs_tier_gc_result r;

    setup();
    gc(&o, &r);                         /* logs before 700 go: L1, L2 */
    CHECK_EQ(r.removed, 0);
    CHECK_EQ(r.logs_removed, 2);
    CHECK(!exists("access/n1-1-1700000600-0"));
    CHECK(!exists("access/n2-7-1700000500-0"));
    CHECK(exists("access/n1-1-1700000800-1"));
    o.max_size = 18000;                 /* b's age is its own again: */
    o.dry_run = true;                   /* a and b would go now */
    o.each = note;
    o.arg = &s;
    gc(&o, &r);
    CHECK_EQ(r.logs, 1);
    CHECK_EQ(s.n, 2);
    CHECK_STR(s.keys[0], blk('a'));
    CHECK_STR(s.keys[1], blk('b'));
}

TEST(to_zero)
{
    struct tfs_tier_gc_opts o = {.max_size = 0};
    struct tfs_tier_gc_result r;

    setup();
    gc(&o, &r);
    CHECK_EQ(r.removed, 6);
    CHECK_EQ(r.removed_bytes, 21000);
    CHECK_EQ(r.logs_removed, 3);
    CHECK_EQ(r.oldest_ns, 0);
    for (char c = 'a'; c <= 'f'; c++)
        CHECK(!exists(blk(c)));
    CHECK(exists("access/junk") && exists("v1/zz/other"));
    gc(&o, &r);
    CHECK_EQ(r.objects, 0);
    CHECK_EQ(r.logs, 0);
}

TEST(figures)
{
    struct tfs_tier_gc_opts o = {.max_size = UINT64_MAX, .dry_run = true};
    struct tfs_tier_gc_result r;

    setup();
    gc(&o, &r);
    CHECK_EQ(r.objects, 6);
    CHECK_EQ(r.bytes, 21000);
    CHECK_EQ(r.removed, 0);
    CHECK_EQ(r.oldest_ns, (T0 + 100) * S);
    CHECK_EQ(r.newest_ns, (T0 + 800) * S);
    for (char c = 'a'; c <= 'f'; c++)
        CHECK(exists(blk(c)));
}

TESTS(T(by_access), T(keep_log), T(to_zero), T(figures));
TEST_MAIN()
