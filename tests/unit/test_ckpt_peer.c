/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint's PEER level (src/ckpt/peer.c, src/group/ckpt.c) against
 * a real member serving checkpoint copies on 127.0.0.1 (serve.c,
 * ckstore.c): a save reaches PEER before STORE with the member holding
 * the same bytes; a node that lost its staging gets an uncommitted save
 * back from the member and recovers it, and a committed one is read from
 * the fetched copy; a member down or absent leaves the level at LOCAL
 * with the error named, the store commit unharmed; a copy damaged on the
 * member is never used.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_int.h"
#include "group/group.h"
#include "tierfs/ckpt.h"
#include "tierfs/log.h"
#include "test.h"

static char top[64];                    /* per-run temporary directory */
static char self_[32];                  /* node A: the writer's node */
static char peer_[32];                  /* node B: keeps the copies */
static char dead_[32];                  /* node C: listed, never up */
static unsigned short peer_port;

#define ROWS 768
#define COLS 1024
static float big[ROWS * COLS];          /* 3 MiB: a shard file of its own */
static int32_t small[64];
static const int64_t big_shape[] = {ROWS, COLS};
static const int64_t small_shape[] = {64};

static void fill(void *buf, size_t n, unsigned seed)
{
    unsigned char *p = buf;

    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed * 40503u) >> 7);
}

static void put_file(const char *rel, const char *text, mode_t mode)
{
    char p[160];
    int fd;

    snprintf(p, sizeof(p), "%s/%s", top, rel);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

static unsigned short free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void cleanup(void)
{
    test_rmtree(top);
}

static void setup(void)
{
    char text[256];

    if (top[0] != '\0')
        return;
    snprintf(top, sizeof(top), "/tmp/tfs-ckpeer-XXXXXX");
    CHECK(mkdtemp(top) != NULL);
    atexit(cleanup);
    fill(big, sizeof(big), 1);
    fill(small, sizeof(small), 2);
    peer_port = free_port();
    snprintf(self_, sizeof(self_), "127.0.0.1:%u", (unsigned)free_port());
    snprintf(peer_, sizeof(peer_), "127.0.0.1:%u", (unsigned)peer_port);
    snprintf(dead_, sizeof(dead_), "127.0.0.1:%u", (unsigned)free_port());
    put_file("secret", "0123456789abcdef-group-secret", 0600);
    snprintf(text, sizeof(text), "%s\n%s\n", self_, peer_);
    put_file("list", text, 0644);
    snprintf(text, sizeof(text), "%s\n%s\n", self_, dead_);
    put_file("list-dead", text, 0644);
    snprintf(text, sizeof(text), "%s\n", self_);
    put_file("list-alone", text, 0644);
    snprintf(text, sizeof(text), "%s\n", peer_);
    put_file("list-other", text, 0644);
}

static struct tfs_group *peer_g;        /* node B, while up */

/* Node B: a member with no cache that keeps checkpoint copies (a test
   that failed halfway left it up: closed first). */
static void peer_start(void)
{
    char lpath[128];
    char spath[128];
    char cdir[128];
    struct tfs_group_cfg cfg = {
        .members = lpath, .listen = peer_, .secret_file = spath,
        .serve = true, .ckpt_dir = cdir, .ckpt_max = 1ull << 30,
        .ckpt_keep = 2};

    snprintf(lpath, sizeof(lpath), "%s/list", top);
    snprintf(spath, sizeof(spath), "%s/secret", top);
    snprintf(cdir, sizeof(cdir), "%s/peer-copies", top);
    tfs_group_close(peer_g);
    peer_g = NULL;
    CHECK_OK(tfs_group_open(&peer_g, &cfg, NULL));
}

static void peer_stop(void)
{
    tfs_group_close(peer_g);
    peer_g = NULL;
}

static struct tfs_ckpt_writer *writer(const char *staging, const char *list)
{
    struct tfs_ckpt_writer *w;
    char p[160];

    CHECK_OK(tfs_ckpt_writer_create(&w));
    CHECK_OK(tfs_ckpt_writer_set(w, "shard_size", "1M"));
    snprintf(p, sizeof(p), "%s/%s", top, staging);
    CHECK_OK(tfs_ckpt_writer_set(w, "staging_dir", p));
    CHECK_OK(tfs_ckpt_writer_set(w, "timeout_ms", "20000"));
    if (list != NULL) {
        snprintf(p, sizeof(p), "%s/%s", top, list);
        CHECK_OK(tfs_ckpt_writer_set(w, "group", p));
        snprintf(p, sizeof(p), "%s/secret", top);
        CHECK_OK(tfs_ckpt_writer_set(w, "group_secret_file", p));
        CHECK_OK(tfs_ckpt_writer_set(w, "group_self", self_));
        CHECK_OK(tfs_ckpt_writer_set(w, "group_timeout_ms", "1000"));
    }
    return w;
}

static struct tfs_ckpt_writer *save_async(const char *uri, uint64_t step,
                                          const char *list)
{
    struct tfs_ckpt_writer *w = writer("staging", list);

    CHECK_OK(tfs_ckpt_writer_open(w, uri, step));
    CHECK_OK(tfs_ckpt_writer_add(w, "w.big", "F32", 2, big_shape, big,
                                 sizeof(big)));
    CHECK_OK(tfs_ckpt_writer_add(w, "w.small", "I32", 1, small_shape, small,
                                 sizeof(small)));
    CHECK_OK(tfs_ckpt_writer_save(w));
    return w;
}

/* Read both tensors of step back (staging allowed) and compare. */
static void check_step(const char *uri, uint64_t step, bool *all_local)
{
    struct tfs_ckpt_reader *r;
    char p[160];
    float *b = malloc(sizeof(big));
    int32_t s[64];
    size_t i;
    size_t n = 0;

    CHECK(b != NULL);
    snprintf(p, sizeof(p), "%s/staging", top);
    CHECK_OK(tfs_ckpt_reader_create(&r));
    CHECK_OK(tfs_ckpt_reader_set(r, "staging_dir", p));
    CHECK_OK(tfs_ckpt_reader_open(r, uri, (int64_t)step));
    CHECK_OK(tfs_ckpt_reader_find(r, "w.big", &i));
    CHECK_OK(tfs_ckpt_reader_read(r, i, b, sizeof(big)));
    CHECK(memcmp(b, big, sizeof(big)) == 0);
    CHECK_OK(tfs_ckpt_reader_find(r, "w.small", &i));
    CHECK_OK(tfs_ckpt_reader_read(r, i, s, sizeof(s)));
    CHECK(memcmp(s, small, sizeof(s)) == 0);
    *all_local = true;
    tfs_ckpt_reader_info(r, NULL, NULL, NULL, NULL, &n);
    for (size_t f = 0; f < n; f++) {
        bool local = false;

        CHECK_OK(tfs_ckpt_reader_file(r, f, NULL, NULL, NULL, &local));
        *all_local = *all_local && local;
    }
    tfs_ckpt_reader_close(r);
    free(b);
}

/* Files of step-N on the member (any namespace), by a shell count. */
static int peer_files(uint64_t step)
{
    char cmd[320];
    FILE *p;
    int n = -1;

    snprintf(cmd, sizeof(cmd), "ls %s/peer-copies/*/step-%06" PRIu64
             "/ 2>/dev/null | wc -l", top, step);
    p = popen(cmd, "r");
    CHECK(p != NULL);
    CHECK(fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

static void rm_staging(void)
{
    char p[160];

    snprintf(p, sizeof(p), "%s/staging", top);
    test_rmtree(p);
}

/*
 * A slow store (bw=1M): PEER comes before STORE, and the member holds
 * every file and the manifest, byte for byte the staging copy.
 */
TEST(push)
{
    struct tfs_ckpt_writer *w;
    char uri[200];
    char cmd[512];
    uint64_t t0;
    double peer_s;
    bool local;

    setup();
    peer_start();
    snprintf(uri, sizeof(uri), "fault+file://%s/store?bw=1M", top);
    w = save_async(uri, 1, "list");
    t0 = tfs_now_ns();
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1), 0);
    peer_s = (double)(tfs_now_ns() - t0) / 1e9;
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_PEER);
    CHECK(!tfs_ckpt_writer_is_done(w));
    CHECK_EQ(peer_files(1), 3);         /* 2 shards, the manifest */
    snprintf(cmd, sizeof(cmd), "cd %s/staging/*/step-000001 && for f in "
             "*.safetensors rank-00000.local; do cmp -s $f %s/peer-copies/"
             "*/step-000001/$f || exit 1; done", top, top);
    CHECK(system(cmd) == 0);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    printf("# bw=1M store, 3 MiB: peer after %.3f s, store after %.3f s\n",
           peer_s, (double)(tfs_now_ns() - t0) / 1e9);
    CHECK(peer_s < 1.5);
    tfs_ckpt_writer_close(w);
    check_step(uri, 1, &local);
    CHECK(local);
    peer_stop();
}

/*
 * The node is lost after PEER, before the commit (the upload refused):
 * a new node with an empty staging recovers the step from the member's
 * copy, commits it and reads it bit for bit from the fetched files.
 */
TEST(restore_uncommitted)
{
    struct tfs_ckpt_writer *w;
    char uri[300];
    char healed[200];
    uint64_t step = 0;
    bool local;

    setup();
    peer_start();
    snprintf(uri, sizeof(uri), "fault+file://%s/store?error_rate=1&"
             "error=EACCES&error_ops=put&error_prefix=step-000002/model",
             top);
    w = save_async(uri, 2, "list");
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1), 0);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), -EACCES);
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_PEER);
    tfs_ckpt_writer_close(w);
    rm_staging();                       /* the node and its disk are gone */
    snprintf(healed, sizeof(healed), "file://%s/store", top);
    /* Without the group nothing comes back. */
    w = writer("staging", NULL);
    CHECK_RC(tfs_ckpt_writer_recover(w, healed, &step), 0);
    tfs_ckpt_writer_close(w);
    w = writer("staging", "list");
    CHECK_RC(tfs_ckpt_writer_recover(w, healed, &step), 1);
    CHECK_EQ(step, 2);
    tfs_ckpt_writer_close(w);
    check_step(healed, 2, &local);
    CHECK(local);                       /* from the fetched copy */
    peer_stop();
}

/*
 * Committed, then the node is lost: recovery has nothing to commit, but
 * the member's copy comes back into staging (no manifest) and the reader
 * takes every file from it.  A copy damaged on the member fails its
 * digest and is never used: the store serves.
 */
TEST(restore_committed)
{
    struct tfs_ckpt_writer *w;
    char uri[200];
    char cmd[400];
    uint64_t step = 0;
    bool local;

    setup();
    peer_start();
    snprintf(uri, sizeof(uri), "file://%s/store", top);
    w = save_async(uri, 3, "list");
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1), 0);
    tfs_ckpt_writer_close(w);
    CHECK_EQ(peer_files(3), 3);
    rm_staging();
    w = writer("staging", "list");
    CHECK_RC(tfs_ckpt_writer_recover(w, uri, &step), 0);
    tfs_ckpt_writer_close(w);
    snprintf(cmd, sizeof(cmd), "ls %s/staging/*/step-000003/*.local "
             ">/dev/null 2>&1", top);
    CHECK(system(cmd) != 0);            /* a committed step: no manifest */
    check_step(uri, 3, &local);
    CHECK(local);
    /* Damage a shard on the member: the fetch fails, the store serves. */
    rm_staging();
    snprintf(cmd, sizeof(cmd), "f=$(ls %s/peer-copies/*/step-000003/"
             "model-rank00000-00001.safetensors) && printf 'X' | dd "
             "of=$f bs=1 seek=1000 conv=notrunc 2>/dev/null", top);
    CHECK(system(cmd) == 0);
    w = writer("staging", "list");
    CHECK_RC(tfs_ckpt_writer_recover(w, uri, &step), 0);
    tfs_ckpt_writer_close(w);
    snprintf(cmd, sizeof(cmd), "test -e %s/staging/*/step-000003/"
             "model-rank00000-00001.safetensors", top);
    CHECK(system(cmd) != 0);
    check_step(uri, 3, &local);         /* right bytes, from the store */
    CHECK(!local);
    peer_stop();
}

/*
 * No member to keep a copy: the one listed is down, or this node is the
 * only one.  The level stays LOCAL, waiting for PEER gives the error
 * naming why, and the commit is unharmed.  Bad options are refused at
 * open.
 */
TEST(no_peer)
{
    struct tfs_ckpt_writer *w;
    char uri[200];
    char p[160];

    setup();
    /* A slow store, so the push ends first (a commit satisfies PEER). */
    snprintf(uri, sizeof(uri), "fault+file://%s/store?bw=1M", top);
    w = save_async(uri, 5, "list-dead");
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1),
             -EHOSTUNREACH);
    printf("# %s\n", tfs_errdetail());
    CHECK(strstr(tfs_errdetail(), "step 5: rank 0: peer copy: group: PUT ")
          != NULL);
    CHECK(strstr(tfs_errdetail(), dead_) != NULL);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    tfs_ckpt_writer_close(w);
    w = save_async(uri, 6, "list-alone");
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1),
             -EHOSTUNREACH);
    CHECK(strstr(tfs_errdetail(), "no other member of the group") != NULL);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    CHECK_EQ(tfs_ckpt_writer_level(w), TFS_CKPT_LEVEL_STORE);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, 0), 0);
    tfs_ckpt_writer_close(w);
    /* A group without its secret file: refused at open. */
    CHECK_OK(tfs_ckpt_writer_create(&w));
    snprintf(p, sizeof(p), "%s/list", top);
    CHECK_OK(tfs_ckpt_writer_set(w, "group", p));
    CHECK_RC(tfs_ckpt_writer_open(w, uri, 7), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "group_secret_file") != NULL);
    tfs_ckpt_writer_close(w);
    /* group_self must be one of the list's members. */
    w = writer("staging", "list-other");
    CHECK_RC(tfs_ckpt_writer_open(w, uri, 7), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "is not in the list") != NULL);
    tfs_ckpt_writer_close(w);
    /* Without a group, PEER is not a level to wait for. */
    w = save_async(uri, 8, NULL);
    CHECK_RC(tfs_ckpt_writer_wait_level(w, TFS_CKPT_LEVEL_PEER, -1),
             -ENOTSUP);
    CHECK_RC(tfs_ckpt_writer_wait(w, -1), 0);
    tfs_ckpt_writer_close(w);
}

TESTS(T(push), T(restore_uncommitted), T(restore_committed), T(no_peer));

int main(int argc, char **argv)
{
    if (getenv("TFS_TEST_LOG") != NULL) {
        tfs_log_set_sink(tfs_log_stderr, NULL);
        tfs_log_set_level(TFS_LOG_DEBUG);
    }
    return test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
}
