/* SPDX-License-Identifier: MIT */
/*
 * grouplat: issue 16's latency target for the cache group, "a group hit
 * served from a peer: p50 <= 2x a local disk-tier hit plus one loopback
 * round trip", measured side by side in one process over one directory
 * store, every node on 127.0.0.1 (as tests/unit/test_group_peer.c).
 *
 *   grouplat [--mib N] [--rounds R] [--rtt N] [--bs SIZE,...] [--dir D]
 *            [--quick]
 *
 * For each block size (default 1M,4M), over one file of N MiB (default
 * 256, whole blocks only), five caches:
 *   local      its cache dir filled, then reopened with mem_cache 0:
 *              every read is a disk-tier hit
 *   owner-d    the same, serving a group of one: every peer request is
 *              served from its disk tier
 *   owner-r    the same with a RAM tier that holds the dataset, warmed
 *              by one pass: every peer request is served from RAM
 *   client-d, client-r   client-only members of owner-d's and owner-r's
 *              groups, no disk tier, mem_cache 0: every read asks the
 *              owner
 * Reads are one whole block at a time through tfs_file_read, one thread,
 * readahead and hedging off, in R shuffled passes (default 4); each block
 * is read by local, client-d and client-r in turn (rotating who goes
 * first), so the three cases share the machine's noise.  The data of a
 * whole block is read from the disk tier with O_DIRECT (cache/disk.c):
 * a disk-tier hit here is a device read, whatever the page cache holds.
 * Round trip: a 1-byte TCP ping-pong on 127.0.0.1 (TCP_NODELAY).  For
 * reference: a block's bare transfer over loopback TCP (the floor under
 * a peer hit), an empty HTTP GET of /nothing (404) to owner-d's server
 * on one curl handle (with a note when the server did not keep the
 * connection alive), and the clients' own latency histograms of their
 * peer requests.  Every read's bytes are compared with the file, and
 * the caches' counters must say that each read came from where it
 * should.
 *
 * Prints p50/p90/p99 per case and the ratio p50(peer disk) /
 * (2 x p50(local disk) + p50(TCP round trip)): PASS at <= 1.  Exit 0:
 * ran, figures sane and (but with --quick) every ratio PASS; 1: an
 * error, a wrong byte or counter, or a FAIL; 2: usage.  --quick (the
 * ctest bench.grouplat): 16 MiB, 2 passes, 200 round trips; the target
 * is printed but not checked.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/peer.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "tierfs/cache.h"
#include "tierfs/err.h"
#include "tierfs/store.h"

#define MAX_BS 8                        /* block sizes in one run */
#define KEY "f.bin"

struct opts {
    uint64_t mib;                       /* the file's size */
    unsigned rounds;                    /* shuffled passes */
    unsigned rtt_rounds;
    uint64_t bs[MAX_BS];
    size_t   n_bs;
    const char *parent;                 /* of the work dir */
    bool     quick;
};

struct node {
    struct tfs_store *st;
    struct tfs_cache *c;
    struct tfs_group *g;
    struct tfs_file  *f;
    char              listen[32];       /* HOST:PORT when serving */
};

/* Latency samples, ns. */
struct lat {
    uint64_t *v;
    size_t    n;
};

/* The cases: three of block reads, then three on loopback. */
enum {
    C_LOCAL, C_PEER_DISK, C_PEER_RAM, C_READS,
    C_RTT = C_READS, C_BULK, C_HTTP, C_N
};

static const char *const case_name[C_N] = {
    "local disk-tier hit", "group hit, peer disk", "group hit, peer RAM",
    "loopback TCP round trip", "loopback TCP, block there",
    "HTTP GET /nothing",
};

static char work[256];                  /* the run's directory */
static const unsigned char *want;       /* the file, mapped */
static size_t want_len;

static void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("grouplat: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void check_ok(int rc, const char *what)
{
    if (rc < 0)
        die("%s: %s (%s)", what, tfs_strerror(rc), tfs_errdetail());
}

/* ---- the work dir, the file ---- */

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    if (work[0] != '\0')
        nftw(work, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", work, name);
}

static void write_file(const char *name, const void *p, size_t len,
                       mode_t mode)
{
    char path[512];
    int fd;

    path_of(path, sizeof(path), name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0 || write(fd, p, len) != (ssize_t)len || fchmod(fd, mode) < 0)
        die("write %s: %s", path, strerror(errno));
    close(fd);
}

/* The dataset: data/f.bin, mib MiB of xorshift bytes, mapped in want. */
static void make_file(uint64_t mib)
{
    char path[512];
    uint64_t buf[(1u << 20) / 8];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    FILE *f;
    int fd;

    path_of(path, sizeof(path), "data");
    if (mkdir(path, 0700) < 0)
        die("mkdir %s: %s", path, strerror(errno));
    path_of(path, sizeof(path), "data/" KEY);
    f = fopen(path, "w");
    for (uint64_t m = 0; f != NULL && m < mib; m++) {
        for (size_t i = 0; i < TFS_ARRAY_LEN(buf); i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = x;
        }
        if (fwrite(buf, 1, sizeof(buf), f) != sizeof(buf))
            die("write %s: %s", path, strerror(errno));
    }
    if (f == NULL || fclose(f) != 0)
        die("write %s: %s", path, strerror(errno));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    want_len = (size_t)(mib << 20);
    want = fd < 0 ? MAP_FAILED
                  : mmap(NULL, want_len, PROT_READ, MAP_SHARED, fd, 0);
    if (want == MAP_FAILED)
        die("map %s: %s", path, strerror(errno));
    close(fd);
}

static uint16_t free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        die("a free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- nodes ---- */

static void cache_set(struct tfs_cache *c, const char *name,
                      const char *value)
{
    check_ok(tfs_cache_set(c, name, value), name);
}

/* Open n over the store with block size bs, cache dir sub of the work
   dir (NULL: none) and a RAM tier of mem; its file open. */
static void node_open(struct node *n, uint64_t bs, const char *sub,
                      uint64_t mem)
{
    char uri[512];
    char v[600];

    memset(n, 0, sizeof(*n));
    snprintf(uri, sizeof(uri), "file://%s/data", work);
    check_ok(tfs_store_open(&n->st, uri, NULL), uri);
    check_ok(tfs_cache_create(&n->c), "cache");
    snprintf(v, sizeof(v), "%" PRIu64, bs);
    cache_set(n->c, "block_size", v);
    snprintf(v, sizeof(v), "%" PRIu64, mem);
    cache_set(n->c, "mem_cache", v);
    if (sub != NULL) {
        path_of(v, sizeof(v), sub);
        cache_set(n->c, "cache_dir", v);
    }
    cache_set(n->c, "max_readahead", "0");  /* one block a read */
    cache_set(n->c, "hedge", "0");          /* no second read */
    cache_set(n->c, "immutable", "1");
    check_ok(tfs_cache_open(n->c, n->st), "cache open");
    check_ok(tfs_file_open(n->c, KEY, &n->f), "open " KEY);
}

static void node_close(struct node *n)
{
    tfs_group_close(n->g);
    tfs_file_close(n->f);
    tfs_cache_close(n->c);
    tfs_store_close(n->st);
    memset(n, 0, sizeof(*n));
}

static struct tfs_cache_metrics node_metrics(struct node *n)
{
    struct tfs_cache_metrics m;

    tfs_cache_metrics_get(n->c, &m);
    return m;
}

static struct tfs_group_metrics group_metrics(struct node *n)
{
    struct tfs_group_snap s;
    struct tfs_group_metrics m;

    check_ok(tfs_group_snap_get(n->g, &s), "group figures");
    m = s.g;
    tfs_group_snap_cleanup(&s);
    return m;
}

/* Fill cache dir sub with the whole file (through the disk tier). */
static void fill(const char *sub, uint64_t bs, size_t nblk)
{
    struct node n;
    struct tfs_cache_metrics m;

    node_open(&n, bs, sub, 64u << 20);
    check_ok(tfs_cache_fill(n.c, KEY, NULL), "fill");
    tfs_cache_flush(n.c);
    m = node_metrics(&n);
    if (m.cache_blocks_disk != nblk)
        die("%s: %" PRIu64 " blocks on disk after the fill, not %zu", sub,
            m.cache_blocks_disk, nblk);
    node_close(&n);
}

/* Serve n's group (a list naming n alone) on a free loopback port. */
static void node_serve(struct node *n, const char *list)
{
    char lpath[512];
    char spath[512];
    char text[64];
    struct tfs_group_cfg cfg = {
        .members = lpath, .listen = n->listen, .secret_file = spath,
        .serve = true};

    snprintf(n->listen, sizeof(n->listen), "127.0.0.1:%u",
             (unsigned)free_port());
    snprintf(text, sizeof(text), "%s\n", n->listen);
    write_file(list, text, strlen(text), 0644);
    path_of(lpath, sizeof(lpath), list);
    path_of(spath, sizeof(spath), "secret");
    check_ok(tfs_group_open(&n->g, &cfg, n->c), "serve");
}

static void node_join(struct node *n, const char *list)
{
    char lpath[512];
    char spath[512];
    struct tfs_group_cfg cfg = {.members = lpath, .secret_file = spath};

    path_of(lpath, sizeof(lpath), list);
    path_of(spath, sizeof(spath), "secret");
    check_ok(tfs_group_open(&n->g, &cfg, n->c), "join");
}

/* Read block idx through n into buf, check it; the ns it took. */
static uint64_t read_block(struct node *n, uint64_t bs, uint64_t idx,
                           unsigned char *buf)
{
    uint64_t off = idx * bs;
    size_t got = 0;
    uint64_t t0 = tfs_now_ns();
    uint64_t ns;

    check_ok(tfs_file_read(n->f, buf, (size_t)bs, off, &got), "read");
    ns = tfs_now_ns() - t0;
    if (got != bs || memcmp(buf, want + off, (size_t)bs) != 0)
        die("block %" PRIu64 ": wrong bytes", idx);
    return ns;
}

/* ---- latency ---- */

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void lat_init(struct lat *l, size_t cap)
{
    l->v = calloc(cap, sizeof(uint64_t));
    l->n = 0;
    if (l->v == NULL)
        die("out of memory");
}

/* The q-quantile (nearest rank) in us; l must be sorted. */
static double lat_q(const struct lat *l, double q)
{
    size_t i = (size_t)(q * (double)l->n + 0.999999);

    i = i == 0 ? 0 : i - 1;
    return (double)l->v[TFS_MIN(i, l->n - 1)] / 1e3;
}

static void lat_print(const char *bs, const char *what, struct lat *l)
{
    qsort(l->v, l->n, sizeof(uint64_t), u64_cmp);
    printf("%-6s %-26s %6zu %10.1f %10.1f %10.1f\n", bs, what, l->n,
           lat_q(l, 0.5), lat_q(l, 0.9), lat_q(l, 0.99));
}

/* Whether a p50 of us microseconds is a figure at all. */
static bool lat_sane(const char *what, double us)
{
    if (us > 0 && us < 5e6)
        return true;
    fprintf(stderr, "grouplat: %s: p50 %.1f us is not sane\n", what, us);
    return false;
}

/* ---- loopback round trips ---- */

/* The far end of a ping-pong: len bytes in, one byte back. */
struct pong {
    int    lfd;                         /* listening */
    size_t len;
};

/* Move len bytes of p over fd, whole: 0 or -errno (-EPIPE at EOF). */
static int io_all(int fd, unsigned char *p, size_t len, bool out)
{
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void *pong_run(void *arg)
{
    struct pong *pg = arg;
    unsigned char *buf = malloc(pg->len);
    int fd = accept(pg->lfd, NULL, NULL);
    int one = 1;

    if (fd >= 0 && buf != NULL) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        while (io_all(fd, buf, pg->len, false) == 0 &&
               io_all(fd, buf, 1, true) == 0)
            ;
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

/*
 * rounds ping-pongs on loopback TCP (TCP_NODELAY) into l, after 20
 * unmeasured: len bytes there, one back.  len 1 is the round trip; len
 * a block size, the floor under a peer hit's transfer.
 */
static void tcp_pingpong(size_t len, unsigned rounds, struct lat *l)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    struct pong pg = {socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), len};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned char *buf = calloc(1, len);
    int one = 1;
    pthread_t t;

    if (pg.lfd < 0 || fd < 0 || buf == NULL ||
        bind(pg.lfd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(pg.lfd, 1) ||
        getsockname(pg.lfd, (struct sockaddr *)&a, &alen) ||
        pthread_create(&t, NULL, pong_run, &pg) ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)))
        die("loopback ping-pong: %s", strerror(errno));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (unsigned i = 0; i < rounds + 20; i++) {
        uint64_t t0 = tfs_now_ns();

        if (io_all(fd, buf, len, true) < 0 || io_all(fd, buf, 1, false) < 0)
            die("loopback ping-pong: %s", strerror(errno));
        if (i >= 20)
            l->v[l->n++] = tfs_now_ns() - t0;
    }
    close(fd);
    pthread_join(t, NULL);
    close(pg.lfd);
    free(buf);
}

static size_t http_sink(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* rounds GETs of /nothing from server listen_at on a kept-alive
   connection (after 10 unmeasured); the status of the last in *status,
   the connections curl made in *connects (1 when it was kept). */
static void http_rtt(const char *listen_at, unsigned rounds, struct lat *l,
                     long *status, uint64_t *connects)
{
    char url[96];
    CURL *h = curl_easy_init();

    if (h == NULL)
        die("curl_easy_init failed");
    snprintf(url, sizeof(url), "http://%s/nothing", listen_at);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_sink);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    for (unsigned i = 0; i < rounds + 10; i++) {
        uint64_t t0 = tfs_now_ns();
        CURLcode cc = curl_easy_perform(h);

        long conns = 0;

        if (cc != CURLE_OK)
            die("GET %s: %s", url, curl_easy_strerror(cc));
        if (i >= 10)
            l->v[l->n++] = tfs_now_ns() - t0;
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &conns);
        *connects += (uint64_t)conns;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
}

/* ---- one block size ---- */

struct run {
    uint64_t     bs;
    size_t       nblk;
    struct node  n[5];                  /* local, owner-d, owner-r, clients */
    unsigned    *seq;                   /* rounds * nblk block indexes */
    size_t       n_seq;
    struct lat   l[C_N];
    long         http_status;           /* of the last GET /nothing */
    uint64_t     http_conns;            /* connections those GETs made */
    unsigned char *buf;
};

enum { N_LOCAL, N_OWNER_D, N_OWNER_R, N_CLIENT_D, N_CLIENT_R };

/* rounds shuffled passes, no block read twice in a row. */
static void make_seq(struct run *r, unsigned rounds, unsigned seed)
{
    r->n_seq = (size_t)rounds * r->nblk;
    r->seq = calloc(r->n_seq, sizeof(unsigned));
    if (r->seq == NULL)
        die("out of memory");
    for (size_t k = 0; k < r->n_seq; k++)
        r->seq[k] = (unsigned)(k % r->nblk);
    for (unsigned p = 0; p < rounds; p++) {
        unsigned *v = r->seq + (size_t)p * r->nblk;

        for (size_t i = r->nblk - 1; i > 0; i--) {
            size_t j = (size_t)rand_r(&seed) % (i + 1);
            unsigned t = v[i];

            v[i] = v[j];
            v[j] = t;
        }
        if (p > 0 && r->nblk > 1 && v[0] == v[-1]) {
            v[0] = v[1];
            v[1] = v[-1];
        }
    }
}

/* The five nodes of r, over their filled cache dirs. */
static void run_open(struct run *r, const char *tag)
{
    char sub[3][64];
    char list[2][64];
    uint64_t size = (uint64_t)r->nblk * r->bs;

    for (int i = 0; i < 3; i++) {
        snprintf(sub[i], sizeof(sub[i]), "%s-%s", tag,
                 (const char *[]){"local", "owner-d", "owner-r"}[i]);
        fill(sub[i], r->bs, r->nblk);
    }
    snprintf(list[0], sizeof(list[0]), "%s-list-d", tag);
    snprintf(list[1], sizeof(list[1]), "%s-list-r", tag);
    node_open(&r->n[N_LOCAL], r->bs, sub[0], 0);
    node_open(&r->n[N_OWNER_D], r->bs, sub[1], 0);
    node_open(&r->n[N_OWNER_R], r->bs, sub[2], 2 * size + (64u << 20));
    node_serve(&r->n[N_OWNER_D], list[0]);
    node_serve(&r->n[N_OWNER_R], list[1]);
    node_open(&r->n[N_CLIENT_D], r->bs, NULL, 0);
    node_open(&r->n[N_CLIENT_R], r->bs, NULL, 0);
    node_join(&r->n[N_CLIENT_D], list[0]);
    node_join(&r->n[N_CLIENT_R], list[1]);
}

/* One unmeasured pass: owner-r's RAM filled through its client, and a
   read by local and client-d of a block the measured run does not start
   with (connections made, buffers pooled). */
static void run_warm(struct run *r)
{
    unsigned b = r->seq[0] == 0 && r->nblk > 1 ? 1 : 0;

    for (size_t i = 0; i < r->nblk; i++)
        read_block(&r->n[N_CLIENT_R], r->bs, i, r->buf);
    read_block(&r->n[N_LOCAL], r->bs, b, r->buf);
    read_block(&r->n[N_CLIENT_D], r->bs, b, r->buf);
}

static void run_measure(struct run *r)
{
    static const int who[C_READS] = {N_LOCAL, N_CLIENT_D, N_CLIENT_R};

    for (int c = 0; c < C_READS; c++)
        lat_init(&r->l[c], r->n_seq);
    for (size_t k = 0; k < r->n_seq; k++) {
        for (int i = 0; i < C_READS; i++) {
            int c = (int)((k + (size_t)i) % C_READS);   /* who goes first */

            r->l[c].v[r->l[c].n++] =
                read_block(&r->n[who[c]], r->bs, r->seq[k], r->buf);
        }
    }
}

static bool expect(const char *what, uint64_t got, uint64_t want_n)
{
    if (got == want_n)
        return true;
    fprintf(stderr, "grouplat: %s: %" PRIu64 ", expected %" PRIu64 "\n",
            what, got, want_n);
    return false;
}

/* Whether every read came from where it should have (warm pass too). */
static bool run_counts_ok(struct run *r)
{
    struct tfs_cache_metrics l = node_metrics(&r->n[N_LOCAL]);
    struct tfs_cache_metrics cd = node_metrics(&r->n[N_CLIENT_D]);
    struct tfs_cache_metrics cr = node_metrics(&r->n[N_CLIENT_R]);
    struct tfs_group_metrics od = group_metrics(&r->n[N_OWNER_D]);
    struct tfs_group_metrics orr = group_metrics(&r->n[N_OWNER_R]);
    uint64_t n = r->n_seq;
    bool ok = true;

    ok &= expect("local: bytes from its disk tier", l.hit_bytes_disk,
                 (n + 1) * r->bs);
    ok &= expect("local: bytes from its RAM tier", l.hit_bytes_ram, 0);
    ok &= expect("client-d: blocks from the peer", cd.peer_blocks, n + 1);
    ok &= expect("client-r: blocks from the peer", cr.peer_blocks,
                 n + r->nblk);
    ok &= expect("store reads of the nodes",
                 l.backend_get_count + cd.backend_get_count +
                 cr.backend_get_count, 0);
    ok &= expect("owner-d: served from disk", od.served_disk, n + 1);
    ok &= expect("owner-d: served from RAM or the store",
                 od.served_ram + od.served_store, 0);
    ok &= expect("owner-r: served from RAM", orr.served_ram, n);
    ok &= expect("owner-r: served from disk (the warm pass)",
                 orr.served_disk, r->nblk);
    return ok;
}

static void run_close(struct run *r)
{
    for (int i = 4; i >= 0; i--)
        node_close(&r->n[i]);
    for (int c = 0; c < C_N; c++)
        free(r->l[c].v);
    free(r->seq);
    free(r->buf);
}

static void size_name(char *out, size_t len, uint64_t bs)
{
    if (bs % (1u << 20) == 0)
        snprintf(out, len, "%" PRIu64 "M", bs >> 20);
    else
        snprintf(out, len, "%" PRIu64 "K", bs >> 10);
}

/* The loopback cases, after the reads. */
static void run_loopback(struct run *r, unsigned rounds)
{
    unsigned bulk = TFS_MIN(rounds, 200u);

    lat_init(&r->l[C_RTT], rounds);
    lat_init(&r->l[C_BULK], bulk);
    lat_init(&r->l[C_HTTP], rounds);
    tcp_pingpong(1, rounds, &r->l[C_RTT]);
    tcp_pingpong((size_t)r->bs, bulk, &r->l[C_BULK]);
    http_rtt(r->n[N_OWNER_D].listen, rounds, &r->l[C_HTTP],
             &r->http_status, &r->http_conns);
}

/* The client's own figure for its peer requests (from taking a
   connection to the checked answer, in the fetch worker): p50 and p99
   in us, from its latency histogram (about 19% resolution). */
static void peer_request_lat(struct node *client, double *p50, double *p99)
{
    struct tfs_group_snap s;

    check_ok(tfs_group_snap_get(client->g, &s), "group figures");
    *p50 = 0;
    *p99 = 0;
    if (s.n == 1) {
        *p50 = (double)tfs_hist_quantile(s.peers[0].latency, 0.5) / 1e3;
        *p99 = (double)tfs_hist_quantile(s.peers[0].latency, 0.99) / 1e3;
    }
    tfs_group_snap_cleanup(&s);
}

static void print_peer_requests(struct run *r, const char *tag)
{
    static const int who[2] = {N_CLIENT_D, N_CLIENT_R};
    double p50;
    double p99;

    for (int i = 0; i < 2; i++) {
        peer_request_lat(&r->n[who[i]], &p50, &p99);
        printf("%-6s   of which the peer request (the client's histogram, "
               "%s): p50 %.0f, p99 %.0f\n", tag, i == 0 ? "disk" : "RAM",
               p50, p99);
    }
}

/* Print r's figures and the ratio; whether the target is met. */
static bool run_report(struct run *r, const char *tag)
{
    double peer = 0;
    double local = 0;
    double rtt = 0;
    double ratio;

    for (int c = 0; c < C_N; c++)
        lat_print(tag, case_name[c], &r->l[c]);
    print_peer_requests(r, tag);
    peer = lat_q(&r->l[C_PEER_DISK], 0.5);
    local = lat_q(&r->l[C_LOCAL], 0.5);
    rtt = lat_q(&r->l[C_RTT], 0.5);
    ratio = peer / (2 * local + rtt);
    printf("%-6s p50(peer disk) / (2 x p50(local disk) + p50(TCP rtt)) = "
           "%.1f / (2 x %.1f + %.1f) = %.3f %s\n", tag, peer, local, rtt,
           ratio, ratio <= 1.0 ? "PASS" : "FAIL");
    if (r->http_conns > 1)
        printf("%-6s note: the peer server closed the connection after "
               "each answer (%" PRIu64 " connections for %zu GETs): no "
               "keep-alive\n", tag, r->http_conns, r->l[C_HTTP].n + 10);
    return ratio <= 1.0;
}

/* Whether r's figures are sane: counters, status, latencies. */
static bool run_sane(struct run *r)
{
    bool ok = run_counts_ok(r);

    ok &= expect("HTTP status of /nothing", (uint64_t)r->http_status, 404);
    for (int c = 0; c < C_N; c++)
        ok &= lat_sane(case_name[c], lat_q(&r->l[c], 0.5));
    return ok;
}

/* Measure block size bs; whether the figures are sane, *pass the target. */
static bool run_bs(const struct opts *o, uint64_t bs, bool *pass)
{
    struct run r = {.bs = bs, .nblk = (size_t)((o->mib << 20) / bs)};
    char tag[24];
    bool ok;

    size_name(tag, sizeof(tag), bs);
    r.buf = aligned_alloc(4096, (size_t)bs);
    if (r.buf == NULL)
        die("out of memory");
    make_seq(&r, o->rounds, (unsigned)bs ^ 0x5eed);
    run_open(&r, tag);
    run_warm(&r);
    run_measure(&r);
    run_loopback(&r, o->rtt_rounds);
    *pass = run_report(&r, tag);
    ok = run_sane(&r);
    run_close(&r);
    return ok;
}

/* ---- options ---- */

static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);

    if (end == s)
        return false;
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end != '\0')
        return false;
    if (*end != '\0' && end[1] != '\0')
        return false;
    *out = v;
    return v > 0;
}

static bool parse_bs(struct opts *o, char *list)
{
    char *save = NULL;

    o->n_bs = 0;
    for (char *t = strtok_r(list, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (o->n_bs == MAX_BS || !parse_size(t, &o->bs[o->n_bs]))
            return false;
        if (o->bs[o->n_bs] < (64u << 10) || o->bs[o->n_bs] > (64u << 20))
            return false;
        o->n_bs++;
    }
    return o->n_bs > 0;
}

static void usage(void)
{
    fputs("usage: grouplat [--mib N] [--rounds R] [--rtt N] "
          "[--bs SIZE,...] [--dir D] [--quick]\n", stderr);
    exit(2);
}

static void parse_opts(struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"mib", required_argument, NULL, 'm'},
        {"rounds", required_argument, NULL, 'r'},
        {"rtt", required_argument, NULL, 't'},
        {"bs", required_argument, NULL, 'b'},
        {"dir", required_argument, NULL, 'd'},
        {"quick", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0}};
    char bs[] = "1M,4M";
    uint64_t v;
    int ch;

    *o = (struct opts){.mib = 256, .rounds = 4, .rtt_rounds = 2000};
    o->parent = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "/var/tmp";
    parse_bs(o, bs);
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        bool good = true;

        if (ch == 'q') {
            o->quick = true;
            o->mib = 16;
            o->rounds = 2;
            o->rtt_rounds = 200;
        } else if (ch == 'b') {
            good = parse_bs(o, optarg);
        } else if (ch == 'd') {
            o->parent = optarg;
        } else if (ch == 'm' || ch == 'r' || ch == 't') {
            good = parse_size(optarg, &v) && v < (1u << 20);
            if (ch == 'm')
                o->mib = v;
            else if (ch == 'r')
                o->rounds = (unsigned)v;
            else
                o->rtt_rounds = (unsigned)v;
        } else {
            good = false;
        }
        if (!good)
            usage();
    }
    if (optind != argc)
        usage();
    for (size_t i = 0; i < o->n_bs; i++)
        if ((o->mib << 20) % o->bs[i] != 0 || (o->mib << 20) < o->bs[i])
            die("--mib %" PRIu64 ": not whole blocks of %" PRIu64,
                o->mib, o->bs[i]);
}

int main(int argc, char **argv)
{
    struct opts o;
    bool ok = true;
    bool all_pass = true;

    parse_opts(&o, argc, argv);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        die("curl_global_init failed");
    snprintf(work, sizeof(work), "%s/tfs-grouplat-XXXXXX", o.parent);
    if (mkdtemp(work) == NULL)
        die("mkdtemp %s: %s", work, strerror(errno));
    atexit(cleanup);
    make_file(o.mib);
    write_file("secret", "0123456789abcdef-grouplat-secret", 32, 0600);
    printf("grouplat: %" PRIu64 " MiB file, %u shuffled passes, one whole "
           "block a read (tfs_file_read), one thread; latencies in us\n",
           o.mib, o.rounds);
    printf("%-6s %-26s %6s %10s %10s %10s\n", "block", "case", "n", "p50",
           "p90", "p99");
    for (size_t i = 0; i < o.n_bs; i++) {
        bool pass;

        ok &= run_bs(&o, o.bs[i], &pass);
        all_pass &= pass;
    }
    munmap((void *)want, want_len);
    if (!ok) {
        printf("grouplat: figures not sane (above)\n");
        return 1;
    }
    if (o.quick) {
        printf("grouplat: sane (--quick: the target is not checked)\n");
        return 0;
    }
    printf("grouplat: target %s\n", all_pass ? "PASS" : "FAIL");
    curl_global_cleanup();
    return all_pass ? 0 : 1;
}
