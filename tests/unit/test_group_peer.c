/* SPDX-License-Identifier: MIT */
/*
 * The cache group on loopback (src/group: peer.c, serve.c, group.c):
 * several caches in one process over one directory store, each with its
 * group joined on 127.0.0.1, read through the C API.
 *
 *   one_copy       three nodes read one file at once, each in its own
 *                  order: every block leaves the store once in all
 *   peer_lost      a member closed mid-way: the others read every byte
 *                  right, the lost one is suspect, its blocks refetched
 *   corrupt        a peer whose answers fail their checksum: detected,
 *                  read from the store, the peer suspect
 *   hung_peer      a member that accepts and never answers: the request
 *                  times out within the group timeout, the store serves
 *   refused        unsigned, forged, replayed, malformed requests, and a
 *                  block of another store or block size: 403/400/409
 *   other_store    a node of another block size asks: refused (409), it
 *                  reads its own store, right bytes
 *   reload         the member list rewritten: the new member is used
 *   client_only    a node that does not serve, not in the list
 *   dns            members from a DNS name (dns:localhost:PORT)
 *   tls            peers over https, the certificate checked against the
 *                  CA; a wrong CA refused (the store serves); bad options
 *   with_shared_tier  an owner asked by a peer reads the shared tier, not
 *                  its store
 *   open_errors    the list must name a serving node, and not a client
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "cache/peer.h"
#include "common/bytes.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "tier/shared.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

#define BS (256u << 10)                 /* block size of the nodes */
#define NBLK 24
#define FSIZE ((size_t)NBLK * BS - 1000)  /* a short last block */
#define MAXN 4

static char dir[64];                    /* the store, lists, secret */
static unsigned char *want;             /* the file's bytes */

struct node {
    struct tfs_store *st;
    struct tfs_cache *c;
    struct tfs_group *g;
    uint16_t          port;
    char              listen[32];
};

static uint16_t free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void write_file(const char *name, const void *p, size_t len,
                       mode_t mode)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fwrite(p, 1, len, f) == len);
    CHECK(fclose(f) == 0);
    CHECK(chmod(path, mode) == 0);
}

/* The member list of nodes n[0..k) (those with a port). */
static void write_list(const char *name, struct node *n, size_t k)
{
    char text[512] = "# test group\n";

    for (size_t i = 0; i < k; i++) {
        if (n[i].port != 0)
            snprintf(text + strlen(text), sizeof(text) - strlen(text),
                     "127.0.0.1:%u\n", (unsigned)n[i].port);
    }
    write_file(name, text, strlen(text), 0644);
}

static void cleanup(void)
{
    test_rmtree(dir);
    free(want);
}

static void setup(void)
{
    if (want != NULL)
        return;
    atexit(cleanup);
    snprintf(dir, sizeof(dir), "/tmp/tfs-gpeer-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    want = malloc(FSIZE);
    CHECK(want != NULL);
    for (size_t i = 0; i < FSIZE; i++)
        want[i] = (unsigned char)((i * 2654435761u) >> 13);
    {
        char sub[128];

        snprintf(sub, sizeof(sub), "%s/data", dir);
        CHECK(mkdir(sub, 0755) == 0);
    }
    write_file("data/f.bin", want, FSIZE, 0644);
    write_file("secret", "0123456789abcdef-group-secret", 29, 0600);
}

/* Open node n's cache over the store at sub (of dir), block size bs. */
static void node_cache(struct node *n, const char *sub, uint64_t bs)
{
    char uri[128];
    char bss[32];

    snprintf(uri, sizeof(uri), "file://%s/%s", dir, sub);
    snprintf(bss, sizeof(bss), "%" PRIu64, bs);
    CHECK_OK(tfs_store_open(&n->st, uri, NULL));
    CHECK_OK(tfs_cache_create(&n->c));
    CHECK_OK(tfs_cache_set(n->c, "block_size", bss));
    CHECK_OK(tfs_cache_set(n->c, "mem_cache", "64M"));
    CHECK_OK(tfs_cache_open(n->c, n->st));
}

static const char *tls_ca_;            /* node_join's TLS, when set */
static const char *tls_cert_;
static const char *tls_key_;

static int node_join(struct node *n, const char *list, bool serve,
                     unsigned corrupt, uint64_t timeout_ms)
{
    char lpath[160];
    char spath[128];
    struct tfs_group_cfg cfg = {
        .members = lpath, .listen = serve ? n->listen : NULL,
        .secret_file = spath, .serve = serve, .timeout_ms = timeout_ms,
        .reload_ms = 50, .fault_corrupt = corrupt, .tls_ca = tls_ca_,
        .tls_cert = tls_cert_, .tls_key = tls_key_};

    if (strncmp(list, "dns:", 4) == 0)
        snprintf(lpath, sizeof(lpath), "%s", list);
    else
        snprintf(lpath, sizeof(lpath), "%s/%s", dir, list);
    snprintf(spath, sizeof(spath), "%s/secret", dir);
    return tfs_group_open(&n->g, &cfg, n->c);
}

static void node_close(struct node *n)
{
    tfs_group_close(n->g);
    tfs_cache_close(n->c);
    tfs_store_close(n->st);
    memset(n, 0, sizeof(*n));
}

/* Ports for k nodes, before any list is written. */
static void ports(struct node *n, size_t k)
{
    memset(n, 0, k * sizeof(*n));
    for (size_t i = 0; i < k; i++) {
        n[i].port = free_port();
        snprintf(n[i].listen, sizeof(n[i].listen), "127.0.0.1:%u",
                 (unsigned)n[i].port);
    }
}

/* Read the file through n, blocks in the order seed gives; 0 or -errno,
   and every byte checked. */
static int node_read(struct node *n, unsigned seed)
{
    unsigned order[NBLK];
    unsigned char *buf = malloc(BS);
    struct tfs_file *f;
    int rc;

    CHECK(buf != NULL);
    for (unsigned i = 0; i < NBLK; i++)
        order[i] = i;
    for (unsigned i = NBLK - 1; seed != 0 && i > 0; i--) {
        unsigned j = (unsigned)rand_r(&seed) % (i + 1);
        unsigned t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    rc = tfs_file_open(n->c, "f.bin", &f);
    for (unsigned i = 0; rc == 0 && i < NBLK; i++) {
        uint64_t off = (uint64_t)order[i] * BS;
        size_t len = TFS_MIN(BS, FSIZE - off);
        size_t got = 0;

        rc = tfs_file_read(f, buf, len, off, &got);
        if (rc == 0 && (got != len || memcmp(buf, want + off, len) != 0))
            TEST_FAIL_("block %u: wrong bytes through the group", order[i]);
    }
    if (f != NULL && rc >= 0)
        tfs_file_close(f);
    free(buf);
    return rc;
}

static uint64_t store_gets(struct node *n)
{
    struct tfs_cache_metrics m;

    tfs_cache_metrics_get(n->c, &m);
    return m.backend_get_count;
}

static struct tfs_group_snap snap(struct node *n)
{
    struct tfs_group_snap s;

    CHECK_OK(tfs_group_snap_get(n->g, &s));
    return s;
}

/* Row of peer p in s, or NULL. */
static const struct tfs_group_peer_metrics *row(const struct tfs_group_snap *s,
                                               const struct node *p)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->keys[i], p->listen) == 0)
            return &s->peers[i];
    return NULL;
}

/* ---- every block leaves the store once ---- */

struct reader {
    struct node *n;
    unsigned     seed;
    int          rc;
};

static void *reader_run(void *arg)
{
    struct reader *r = arg;

    r->rc = node_read(r->n, r->seed);
    return NULL;
}

TEST(one_copy)
{
    struct node n[3];
    struct reader r[3];
    pthread_t t[3];
    uint64_t gets = 0;
    uint64_t hits = 0;

    setup();
    ports(n, 3);
    write_list("three", n, 3);
    for (int i = 0; i < 3; i++) {
        node_cache(&n[i], "data", BS);
        CHECK_OK(node_join(&n[i], "three", true, 0, 0));
        CHECK_EQ(tfs_group_port(n[i].g), n[i].port);
    }
    for (int i = 0; i < 3; i++) {
        r[i] = (struct reader){&n[i], (unsigned)i + 1, -1};
        CHECK(pthread_create(&t[i], NULL, reader_run, &r[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(r[i].rc);
    }
    for (int i = 0; i < 3; i++) {
        struct tfs_group_snap s = snap(&n[i]);

        gets += store_gets(&n[i]);
        hits += s.g.peer_hits;
        CHECK_EQ(s.g.members, 3);
        CHECK_EQ(s.g.fallbacks, 0);
        CHECK_EQ(s.n, 2);               /* the two others */
        tfs_group_snap_cleanup(&s);
    }
    printf("# 3 nodes, %u blocks: %" PRIu64 " store reads, %" PRIu64
           " from peers\n", NBLK, gets, hits);
    CHECK_EQ(gets, NBLK);               /* one copy out of the store */
    CHECK_EQ(hits, 2 * NBLK);           /* the rest from owners */
    for (int i = 0; i < 3; i++)
        node_close(&n[i]);
}

/* ---- failures ---- */

TEST(peer_lost)
{
    struct node n[3];
    struct tfs_group_snap s;
    const struct tfs_group_peer_metrics *p;

    setup();
    ports(n, 3);
    write_list("lost", n, 3);
    for (int i = 0; i < 3; i++) {
        node_cache(&n[i], "data", BS);
        CHECK_OK(node_join(&n[i], "lost", true, 0, 0));
    }
    node_close(&n[2]);                  /* gone: connections refused */
    n[2].port = 0;
    CHECK_OK(node_read(&n[0], 7));
    CHECK_OK(node_read(&n[1], 8));
    s = snap(&n[0]);
    CHECK_EQ(s.n, 2);
    for (size_t i = 0; i < s.n; i++) {
        if (strcmp(s.keys[i], n[1].listen) == 0)
            continue;
        p = &s.peers[i];
        CHECK(p->errors >= 1);          /* tried once, then skipped */
        CHECK(p->errors < NBLK / 3);
        CHECK_EQ(p->suspect, 1);
    }
    CHECK(s.g.fallbacks >= 1);
    CHECK(s.g.skipped + s.g.fallbacks + s.g.owned + s.g.peer_hits >= NBLK);
    tfs_group_snap_cleanup(&s);
    node_close(&n[0]);
    node_close(&n[1]);
}

TEST(corrupt)
{
    struct node n[2];
    struct tfs_group_snap s;
    const struct tfs_group_peer_metrics *p;

    setup();
    ports(n, 2);
    write_list("corrupt", n, 2);
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    CHECK_OK(node_join(&n[0], "corrupt", true, 0, 0));
    CHECK_OK(node_join(&n[1], "corrupt", true, 1, 0));  /* every answer */
    CHECK_OK(node_read(&n[0], 3));      /* every byte checked */
    s = snap(&n[0]);
    p = row(&s, &n[1]);
    CHECK(p != NULL);
    CHECK(p->corrupt >= 1);
    CHECK_EQ(p->corrupt, p->errors);
    CHECK_EQ(p->bytes, 0);
    CHECK_EQ(s.g.peer_hits, 0);
    CHECK_EQ(p->suspect, 1);
    tfs_group_snap_cleanup(&s);
    node_close(&n[0]);
    node_close(&n[1]);
}

TEST(hung_peer)
{
    struct node n[2];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct tfs_group_snap s;
    const struct tfs_group_peer_metrics *p;
    uint64_t t0;
    uint64_t ms;

    setup();
    ports(n, 2);
    /* node 1: a listener that never accepts, so never answers */
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(fd, 64) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    n[1].port = ntohs(a.sin_port);
    snprintf(n[1].listen, sizeof(n[1].listen), "127.0.0.1:%u",
             (unsigned)n[1].port);
    write_list("hung", n, 2);
    node_cache(&n[0], "data", BS);
    CHECK_OK(node_join(&n[0], "hung", true, 0, 300));
    t0 = tfs_now_ns();
    CHECK_OK(node_read(&n[0], 5));
    ms = (tfs_now_ns() - t0) / 1000000;
    s = snap(&n[0]);
    p = row(&s, &n[1]);
    CHECK(p != NULL);
    printf("# a hung peer: %" PRIu64 " timeouts, the file read in %" PRIu64
           " ms with a 300 ms group timeout\n", p->timeouts, ms);
    CHECK(p->timeouts >= 1);
    CHECK_EQ(p->suspect, 1);
    CHECK(ms < 300 * (p->timeouts + 1) + 2000);     /* not a hang */
    tfs_group_snap_cleanup(&s);
    node_close(&n[0]);
    close(fd);
}

/* ---- requests refused ---- */

static long get(const char *url, const char *const *hdrs)
{
    CURL *h = curl_easy_init();
    struct curl_slist *l = NULL;
    long status = 0;
    FILE *null = fopen("/dev/null", "w");

    CHECK(h != NULL && null != NULL);
    for (size_t i = 0; hdrs != NULL && hdrs[i] != NULL; i++)
        l = curl_slist_append(l, hdrs[i]);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, null);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    CHECK(curl_easy_perform(h) == CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(l);
    curl_easy_cleanup(h);
    fclose(null);
    return status;
}

/* Signed headers for block hex, with secret key (len bytes), into h. */
static void sign(const char *key, const char *hex, const char *nonce,
                 char h[3][128])
{
    struct tfs_gauth a;
    char sig[65];
    uint64_t now = (uint64_t)tfs_wall_ns() / 1000000000u;

    CHECK_OK(tfs_gauth_init(&a, key, strlen(key), 30));
    tfs_gauth_sign(&a, "GET", hex, now, nonce, sig);
    tfs_gauth_cleanup(&a);
    snprintf(h[0], 128, "X-Tierfs-Time: %" PRIu64, now);
    snprintf(h[1], 128, "X-Tierfs-Nonce: %s", nonce);
    snprintf(h[2], 128, "X-Tierfs-Signature: %s", sig);
}

TEST(refused)
{
    static const char secret[] = "0123456789abcdef-group-secret";
    struct node n[1];
    struct tfs_peer_block pb;
    struct tfs_group_snap s;
    char hex[33];
    char url[512];
    char bad_url[512];
    char h[3][128];
    const char *hd[4] = {h[0], h[1], h[2], NULL};

    setup();
    ports(n, 1);
    write_list("one", n, 1);
    node_cache(&n[0], "data", BS);
    CHECK_OK(node_join(&n[0], "one", true, 0, 0));
    /* the right id needs the version the store gives: ask the cache */
    {
        struct tfs_stat st;

        CHECK_OK(tfs_cache_stat(n[0].c, "f.bin", &st));
        CHECK_OK(tfs_cache_peer_ref(n[0].c, "f.bin", st.version, FSIZE, 2,
                                    &pb));
        tfs_hex_lower(hex, pb.id, 16);
        snprintf(url, sizeof(url), "http://%s/v1/block/%s?key=f.bin&"
                 "version=%s&size=%zu&index=2", n[0].listen, hex,
                 st.version, FSIZE);
        snprintf(bad_url, sizeof(bad_url), "http://%s/v1/block/%s?key=f.bin"
                 "&version=%s&size=%zu&index=3", n[0].listen, hex,
                 st.version, FSIZE);
    }
    CHECK_EQ(get(url, NULL), 403);                      /* unsigned */
    sign("another-secret-entirely-0123", hex, "00112233445566778899aabb",
         h);
    CHECK_EQ(get(url, hd), 403);                        /* forged */
    sign(secret, hex, "0123456789abcdef0123", h);
    CHECK_EQ(get(url, hd), 200);                        /* good */
    CHECK_EQ(get(url, hd), 403);                        /* replayed */
    sign(secret, hex, "1123456789abcdef0123", h);
    CHECK_EQ(get(bad_url, hd), 409);    /* the id is not of this block */
    sign(secret, "00zz", "2123456789abcdef0123", h);
    snprintf(bad_url, sizeof(bad_url), "http://%s/v1/block/00zz",
             n[0].listen);
    CHECK_EQ(get(bad_url, hd), 400);
    snprintf(bad_url, sizeof(bad_url), "http://%s/metrics", n[0].listen);
    CHECK_EQ(get(bad_url, NULL), 404);
    s = snap(&n[0]);
    CHECK_EQ(s.g.served, 1);
    CHECK_EQ(s.g.refused, 4);
    CHECK_EQ(s.g.refused_store, 1);
    tfs_group_snap_cleanup(&s);
    node_close(&n[0]);
}

TEST(other_store)
{
    struct node n[2];
    struct tfs_group_snap s;
    const struct tfs_group_peer_metrics *p;

    setup();
    ports(n, 2);
    write_list("bs", n, 2);
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", 2 * BS);  /* other block ids */
    CHECK_OK(node_join(&n[0], "bs", true, 0, 0));
    CHECK_OK(node_join(&n[1], "bs", true, 0, 0));
    CHECK_OK(node_read(&n[0], 11));
    s = snap(&n[0]);
    p = row(&s, &n[1]);
    CHECK(p != NULL && p->errors >= 1 && p->bytes == 0);
    tfs_group_snap_cleanup(&s);
    s = snap(&n[1]);
    CHECK(s.g.refused_store >= 1);
    CHECK_EQ(s.g.served, 0);
    tfs_group_snap_cleanup(&s);
    node_close(&n[0]);
    node_close(&n[1]);
}

/* ---- membership ---- */

TEST(reload)
{
    struct node n[3];
    struct tfs_group_snap s;
    uint64_t t0;

    setup();
    ports(n, 3);
    write_list("grow", n, 2);
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    CHECK_OK(node_join(&n[0], "grow", true, 0, 0));
    CHECK_OK(node_join(&n[1], "grow", true, 0, 0));
    s = snap(&n[0]);
    CHECK_EQ(s.g.members, 2);
    tfs_group_snap_cleanup(&s);
    write_list("three-x", n, 3);        /* renamed in: a new inode */
    {
        char a[128], b[128];

        snprintf(a, sizeof(a), "%s/three-x", dir);
        snprintf(b, sizeof(b), "%s/grow", dir);
        CHECK(rename(a, b) == 0);
    }
    node_cache(&n[2], "data", BS);
    CHECK_OK(node_join(&n[2], "grow", true, 0, 0));
    t0 = tfs_now_ns();
    do {
        tfs_sleep_ns(20000000);
        s = snap(&n[0]);
        if (s.g.members == 3)
            break;
        tfs_group_snap_cleanup(&s);
    } while (tfs_now_ns() - t0 < 5000000000ull);
    CHECK_EQ(s.g.members, 3);
    CHECK(s.g.reloads >= 2);
    tfs_group_snap_cleanup(&s);
    CHECK_OK(node_read(&n[2], 1));
    CHECK_OK(node_read(&n[0], 2));
    s = snap(&n[0]);
    CHECK(row(&s, &n[2]) != NULL && row(&s, &n[2])->bytes > 0);
    tfs_group_snap_cleanup(&s);
    /* a list that does not parse is refused; the old one stays */
    write_file("grow", "not a member\n", 13, 0644);
    CHECK(tfs_group_reload(n[0].g) < 0);
    s = snap(&n[0]);
    CHECK_EQ(s.g.members, 3);
    CHECK(s.g.reload_errors >= 1);
    tfs_group_snap_cleanup(&s);
    for (int i = 0; i < 3; i++)
        node_close(&n[i]);
}

TEST(client_only)
{
    struct node n[2];
    struct tfs_group_snap s;

    setup();
    ports(n, 2);
    write_list("solo", n, 1);           /* node 1 is not listed */
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    CHECK_OK(node_join(&n[0], "solo", true, 0, 0));
    CHECK_OK(node_join(&n[1], "solo", false, 0, 0));
    CHECK_EQ(tfs_group_port(n[1].g), 0);
    CHECK_OK(node_read(&n[1], 4));
    s = snap(&n[1]);
    CHECK_EQ(s.g.peer_hits, NBLK);      /* every block from the one */
    CHECK_EQ(s.g.owned, 0);
    CHECK_STR(s.g.self, "");
    tfs_group_snap_cleanup(&s);
    CHECK_EQ(store_gets(&n[1]), 0);
    node_close(&n[0]);
    node_close(&n[1]);
}

TEST(dns)
{
    struct node n[2];
    struct tfs_group_snap s;
    char list[64];

    setup();
    ports(n, 2);
    snprintf(list, sizeof(list), "dns:localhost:%u", (unsigned)n[0].port);
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    CHECK_OK(node_join(&n[0], list, true, 0, 0));
    CHECK_OK(node_join(&n[1], list, false, 0, 0));
    CHECK_OK(node_read(&n[1], 9));
    s = snap(&n[1]);
    CHECK(s.g.members >= 1);            /* 127.0.0.1, maybe ::1 too */
    CHECK(s.g.peer_hits >= 1);
    tfs_group_snap_cleanup(&s);
    CHECK_RC(node_join(&n[1], "dns:localhost", false, 0, 0), TFS_EOPTION);
    CHECK_RC(node_join(&n[1], "dns:no-such-host.invalid:7", false, 0, 0),
             -EHOSTUNREACH);
    node_close(&n[0]);
    node_close(&n[1]);
}

/* A self-signed certificate for 127.0.0.1 as NAME.crt/NAME.key in dir. */
static void make_cert(const char *name)
{
    char cmd[768];

    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
             "/CN=tierfs-test -addext subjectAltName=IP:127.0.0.1 "
             "-keyout %s/%s.key -out %s/%s.crt >/dev/null 2>&1 && "
             "chmod 600 %s/%s.key", dir, name, dir, name, dir, name);
    CHECK(system(cmd) == 0);
}

/* Node n again as a cold client-only node, over TLS with ca (or not). */
static void tls_client(struct node *n, const char *ca)
{
    tfs_group_close(n->g);
    tfs_cache_close(n->c);
    tfs_store_close(n->st);
    node_cache(n, "data", BS);
    tls_ca_ = ca;
    tls_cert_ = tls_key_ = NULL;
    CHECK_OK(node_join(n, "tls", false, 0, 0));
}

TEST(tls)
{
    struct node n[2];
    struct tfs_group_snap s;
    const struct tfs_group_peer_metrics *p;
    char ca[128], cert[128], key[128], other[128];

    setup();
    make_cert("peer");
    make_cert("other");
    snprintf(ca, sizeof(ca), "%s/peer.crt", dir);
    snprintf(cert, sizeof(cert), "%s/peer.crt", dir);
    snprintf(key, sizeof(key), "%s/peer.key", dir);
    snprintf(other, sizeof(other), "%s/other.crt", dir);
    ports(n, 2);
    write_list("tls", n, 1);            /* node 1: a client only */
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    tls_ca_ = ca;
    tls_cert_ = cert;
    tls_key_ = key;
    CHECK_OK(node_join(&n[0], "tls", true, 0, 0));
    tls_cert_ = tls_key_ = NULL;
    CHECK_OK(node_join(&n[1], "tls", false, 0, 0));
    CHECK_OK(node_read(&n[1], 6));      /* over https, its cert checked */
    s = snap(&n[1]);
    CHECK_EQ(s.g.peer_hits, NBLK);
    tfs_group_snap_cleanup(&s);
    /* a CA that did not sign the peer's certificate: refused, the store
       serves, every byte right */
    tls_client(&n[1], other);
    CHECK_OK(node_read(&n[1], 7));
    s = snap(&n[1]);
    p = row(&s, &n[0]);
    CHECK(p != NULL && p->errors >= 1 && p->bytes == 0);
    CHECK_EQ(s.g.peer_hits, 0);
    tfs_group_snap_cleanup(&s);
    /* plain http to a TLS server: refused likewise */
    tls_client(&n[1], NULL);
    CHECK_OK(node_read(&n[1], 8));
    s = snap(&n[1]);
    p = row(&s, &n[0]);
    CHECK(p != NULL && p->errors >= 1 && p->bytes == 0);
    tfs_group_snap_cleanup(&s);
    /* options that do not go together */
    tls_ca_ = NULL;
    tls_cert_ = cert;
    tls_key_ = key;
    {
        struct tfs_group *g = NULL;
        char lpath[128], spath[128];
        struct tfs_group_cfg cfg = {.members = lpath, .secret_file = spath,
                                    .listen = n[0].listen, .serve = true,
                                    .tls_cert = cert, .tls_key = key};

        snprintf(lpath, sizeof(lpath), "%s/tls", dir);
        snprintf(spath, sizeof(spath), "%s/secret", dir);
        CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), TFS_EOPTION);
        cfg.tls_ca = ca;
        cfg.tls_key = NULL;
        CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), TFS_EOPTION);
        cfg.tls_key = key;
        chmod(key, 0644);
        CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), -EPERM);
        chmod(key, 0600);
        CHECK(g == NULL);
    }
    tls_ca_ = tls_cert_ = tls_key_ = NULL;
    node_close(&n[0]);
    node_close(&n[1]);
}

/* The owner of a block asked by a peer looks in the shared tier before
   its store: a peer's read skips peers, not the tier. */
TEST(with_shared_tier)
{
    struct node n[2];
    struct node w;
    struct tfs_shared *sh[3] = {NULL, NULL, NULL};
    struct tfs_shared_metrics m;
    struct tfs_group_snap s;
    char uri[160];
    char path[128];

    setup();
    snprintf(path, sizeof(path), "%s/tier2", dir);
    CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
    snprintf(uri, sizeof(uri), "file://%s", path);
    memset(&w, 0, sizeof(w));           /* fill the tier, no group */
    node_cache(&w, "data", BS);
    CHECK_OK(tfs_shared_open(&sh[0], uri, w.c));
    CHECK_OK(node_read(&w, 1));
    tfs_shared_close(sh[0]);            /* its queue written */
    tfs_cache_close(w.c);
    tfs_store_close(w.st);
    ports(n, 2);
    write_list("tiered", n, 1);         /* node 0 owns every block */
    node_cache(&n[0], "data", BS);
    node_cache(&n[1], "data", BS);
    CHECK_OK(node_join(&n[0], "tiered", true, 0, 0));
    CHECK_OK(tfs_shared_open(&sh[1], uri, n[0].c));
    CHECK_OK(node_join(&n[1], "tiered", false, 0, 0));
    CHECK_OK(tfs_shared_open(&sh[2], uri, n[1].c));
    CHECK_OK(node_read(&n[1], 2));
    s = snap(&n[1]);
    CHECK_EQ(s.g.peer_hits, NBLK);      /* the peer first */
    tfs_group_snap_cleanup(&s);
    tfs_shared_metrics_get(sh[1], &m);
    CHECK_EQ(m.hits, NBLK);             /* the owner: from the tier */
    CHECK_EQ(store_gets(&n[0]), 0);
    CHECK_EQ(store_gets(&n[1]), 0);
    tfs_shared_close(sh[2]);
    tfs_shared_close(sh[1]);
    node_close(&n[1]);
    node_close(&n[0]);
}

TEST(open_errors)
{
    struct node n[2];
    struct tfs_group *g = NULL;
    char lpath[128];
    char spath[128];
    struct tfs_group_cfg cfg = {.members = lpath, .secret_file = spath};

    setup();
    ports(n, 2);
    write_list("errs", n, 1);
    node_cache(&n[1], "data", BS);
    /* serving, but not in the list */
    CHECK_RC(node_join(&n[1], "errs", true, 0, 0), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "is not in the list") != NULL);
    /* listed, but a client only */
    memcpy(n[1].listen, n[0].listen, sizeof(n[1].listen));
    snprintf(lpath, sizeof(lpath), "%s/errs", dir);
    snprintf(spath, sizeof(spath), "%s/secret", dir);
    cfg.listen = n[0].listen;
    CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "does not serve") != NULL);
    /* serving without an address */
    cfg.listen = NULL;
    cfg.serve = true;
    CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), TFS_EOPTION);
    /* a secret others can read */
    chmod(spath, 0644);
    cfg.serve = false;
    write_list("errs2", n, 0);
    snprintf(lpath, sizeof(lpath), "%s/errs", dir);
    CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), -EPERM);
    chmod(spath, 0600);
    /* a list that does not parse */
    write_file("errs3", "x:y\n", 4, 0644);
    snprintf(lpath, sizeof(lpath), "%s/errs3", dir);
    CHECK_RC(tfs_group_open(&g, &cfg, n[1].c), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "errs3:1:") != NULL);
    CHECK(g == NULL);
    node_close(&n[1]);
}

TESTS(T(one_copy), T(peer_lost), T(corrupt), T(hung_peer), T(refused),
      T(other_store), T(reload), T(client_only), T(dns), T(tls),
      T(with_shared_tier), T(open_errors));
TEST_MAIN()
