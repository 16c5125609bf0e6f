/* SPDX-License-Identifier: MIT */
/*
 * The shared cache tier (src/tier/shared.c) over a directory store:
 *
 *   fill_then_hit   a node that misses writes every block to the tier; a
 *                   second node with a cold cache reads them all from it
 *                   and none from the capacity store
 *   bad_copies      copies flipped, cut, or of another block: each is
 *                   detected, read from the capacity store, written again
 *   key             the object names: v1/XX/ID
 *   access_log      the node that read from the tier wrote, at close, one
 *                   access log naming each block it read there, once
 *
 * The same mode against a second bucket of the real S3 server runs in
 * tests/integ/shared_tier.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "cache/peer.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "tier/shared.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

#define BS (128u << 10)
#define NBLK 16
#define FSIZE ((size_t)NBLK * BS - 333)

static char dir[64];
static unsigned char *want;

static void cleanup(void)
{
    test_rmtree(dir);
    free(want);
}

static void setup(void)
{
    char path[128];
    FILE *f;

    if (want != NULL)
        return;
    snprintf(dir, sizeof(dir), "/tmp/tfs-shared-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    atexit(cleanup);
    want = malloc(FSIZE);
    CHECK(want != NULL);
    for (size_t i = 0; i < FSIZE; i++)
        want[i] = (unsigned char)((i * 40503u) >> 7);
    snprintf(path, sizeof(path), "%s/data", dir);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(path, sizeof(path), "%s/tier", dir);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(path, sizeof(path), "%s/data/f.bin", dir);
    f = fopen(path, "w");
    CHECK(f != NULL && fwrite(want, 1, FSIZE, f) == FSIZE);
    CHECK(fclose(f) == 0);
}

struct node {
    struct tfs_store  *st;
    struct tfs_cache  *c;
    struct tfs_shared *sh;
};

static void node_open(struct node *n)
{
    char uri[128];

    snprintf(uri, sizeof(uri), "file://%s/data", dir);
    CHECK_OK(tfs_store_open(&n->st, uri, NULL));
    CHECK_OK(tfs_cache_create(&n->c));
    CHECK_OK(tfs_cache_set(n->c, "block_size", "128K"));
    CHECK_OK(tfs_cache_set(n->c, "mem_cache", "16M"));
    CHECK_OK(tfs_cache_open(n->c, n->st));
    snprintf(uri, sizeof(uri), "file://%s/tier", dir);
    CHECK_OK(tfs_shared_open(&n->sh, uri, n->c));
}

static void node_close(struct node *n)
{
    tfs_shared_close(n->sh);            /* writes what is queued */
    tfs_cache_close(n->c);
    tfs_store_close(n->st);
}

static void node_read(struct node *n)
{
    unsigned char *buf = malloc(FSIZE);
    struct tfs_file *f;
    size_t got = 0;

    CHECK(buf != NULL);
    CHECK_OK(tfs_file_open(n->c, "f.bin", &f));
    CHECK_OK(tfs_file_read(f, buf, FSIZE, 0, &got));
    CHECK_EQ(got, FSIZE);
    CHECK(memcmp(buf, want, FSIZE) == 0);
    tfs_file_close(f);
    free(buf);
}

static uint64_t store_gets(struct node *n)
{
    struct tfs_cache_metrics m;

    tfs_cache_metrics_get(n->c, &m);
    return m.backend_get_count;
}

TEST(fill_then_hit)
{
    struct node a, b;
    struct tfs_shared_metrics m;
    struct tfs_cache_metrics cm;

    setup();
    node_open(&a);
    node_read(&a);
    tfs_shared_metrics_get(a.sh, &m);
    CHECK_EQ(m.hits, 0);
    CHECK_EQ(m.misses, NBLK);
    CHECK_EQ(store_gets(&a), NBLK);
    node_close(&a);                     /* the queue is written out */
    node_open(&b);
    node_read(&b);
    tfs_shared_metrics_get(b.sh, &m);
    tfs_cache_metrics_get(b.c, &cm);
    printf("# cold node: %" PRIu64 " of %u blocks from the shared tier, %"
           PRIu64 " from the store\n", m.hits, NBLK, cm.backend_get_count);
    CHECK_EQ(m.hits, NBLK);
    CHECK_EQ(m.misses, 0);
    CHECK_EQ(m.corrupt, 0);
    CHECK_EQ(cm.backend_get_count, 0);
    CHECK_EQ(cm.shared_blocks, NBLK);
    CHECK_EQ(cm.hit_bytes_shared, FSIZE);
    CHECK_EQ(m.access_logs, 0);         /* written at close */
    node_close(&b);
}

/* The one access log under the tier's access/, into text; its name. */
static size_t read_access_log(char *text, size_t size, char *name,
                              size_t name_size)
{
    char path[512];
    struct dirent *e;
    DIR *d;
    FILE *f;
    size_t n;
    int logs = 0;

    snprintf(path, sizeof(path), "%s/tier/access", dir);
    d = opendir(path);
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(name, name_size, "%s", e->d_name);
        logs++;
    }
    closedir(d);
    CHECK_EQ(logs, 1);
    snprintf(path, sizeof(path), "%s/tier/access/%s", dir, name);
    f = fopen(path, "r");
    CHECK(f != NULL);
    n = fread(text, 1, size - 1, f);
    fclose(f);
    text[n] = '\0';
    return n;
}

TEST(access_log)
{
    struct node a, b;
    char path[256];
    char text[4096];
    char name[256];
    char host[64] = "";
    char want_name[128];
    size_t magic = strlen(TFS_SHARED_LOG_MAGIC);
    size_t n;

    setup();
    snprintf(path, sizeof(path), "%s/tier", dir);
    CHECK(test_rmtree(path) == 0);
    CHECK(mkdir(path, 0755) == 0);
    node_open(&a);
    node_read(&a);                      /* misses: no log */
    node_close(&a);
    node_open(&b);
    node_read(&b);                      /* 16 hits */
    node_close(&b);
    n = read_access_log(text, sizeof(text), name, sizeof(name));
    CHECK(gethostname(host, sizeof(host) - 1) == 0);
    snprintf(want_name, sizeof(want_name), "%s-%ld-", host, (long)getpid());
    CHECK(strncmp(name, want_name, strlen(want_name)) == 0);
    CHECK(strncmp(text, TFS_SHARED_LOG_MAGIC, magic) == 0);
    CHECK_EQ(n, magic + NBLK * 33);     /* each block once */
    for (size_t off = magic; off < n; off += 33) {
        CHECK(text[off + 32] == '\n');
        CHECK(off == magic || memcmp(text + off - 33, text + off, 32) < 0);
        snprintf(path, sizeof(path), "%s/tier/v1/%.2s/%.32s", dir,
                 text + off, text + off);
        CHECK(access(path, F_OK) == 0); /* a block the tier holds */
    }
}

/* The tier's file of block i of f.bin, as node n names it. */
static void block_path(struct node *n, uint64_t i, char *path, size_t size)
{
    struct tfs_stat st;
    struct tfs_peer_block pb;
    char key[64];

    CHECK_OK(tfs_cache_stat(n->c, "f.bin", &st));
    CHECK_OK(tfs_cache_peer_ref(n->c, "f.bin", st.version, FSIZE, i, &pb));
    tfs_shared_key(key, sizeof(key), pb.id);
    snprintf(path, size, "%s/tier/%s", dir, key);
}

TEST(bad_copies)
{
    struct node n;
    struct tfs_shared_metrics m;
    char p1[256], p2[256], p3[256], p4[256];
    FILE *f;

    setup();
    node_open(&n);
    node_read(&n);                      /* the tier holds every block */
    node_close(&n);
    node_open(&n);
    block_path(&n, 1, p1, sizeof(p1));
    block_path(&n, 2, p2, sizeof(p2));
    block_path(&n, 3, p3, sizeof(p3));
    block_path(&n, 4, p4, sizeof(p4));
    f = fopen(p1, "r+");                /* a byte of its data flipped */
    CHECK(f != NULL);
    CHECK(fseek(f, TFS_SHARED_HDR + 1000, SEEK_SET) == 0);
    CHECK(fputc('x' ^ want[BS + 1000], f) != EOF);
    CHECK(fclose(f) == 0);
    CHECK(truncate(p2, TFS_SHARED_HDR + BS / 2) == 0);   /* cut short */
    CHECK(rename(p4, p3) == 0);         /* block 4's copy as block 3's */
    node_read(&n);                      /* every byte right */
    tfs_shared_metrics_get(n.sh, &m);
    CHECK_EQ(m.corrupt, 3);
    CHECK_EQ(m.misses, 1);              /* block 4: gone */
    CHECK_EQ(store_gets(&n), 4);
    node_close(&n);                     /* the four written again */
    node_open(&n);
    node_read(&n);
    tfs_shared_metrics_get(n.sh, &m);
    CHECK_EQ(m.hits, NBLK);             /* healed */
    CHECK_EQ(m.corrupt, 0);
    node_close(&n);
}

TEST(key)
{
    uint8_t id[16];
    char key[64];

    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(0xa0 + i);
    tfs_shared_key(key, sizeof(key), id);
    CHECK_STR(key, "v1/a0/a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
}

TESTS(T(fill_then_hit), T(access_log), T(bad_copies), T(key));
TEST_MAIN()
