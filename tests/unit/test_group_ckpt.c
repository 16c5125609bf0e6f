/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint copies a group member keeps for its peers (src/group:
 * ckstore.c, serve.c): a serving group with no cache (c NULL) on
 * 127.0.0.1 (ports 7900-7949), its copy directory in a temp dir, spoken
 * to with libcurl (and a raw socket) signed with the group secret.
 *
 *   round_trip   PUT, GET the same bytes and digest, the list (by step
 *                number, then name), the files and sidecars on disk, a
 *                replacement, an empty file, 404s, the figures
 *   big_body     4 MiB streamed (far past libmicrohttpd's buffer)
 *   refused      bad keys (400), unsigned or forged (403), no digest or
 *                a bad one (400, nothing kept), no Content-Length (411),
 *                other methods (405): nothing made outside the dir
 *   quota        507 past ckpt_max; a client gone mid-body leaves no
 *                tmp file and gives its reservation back
 *   copies_off   ckpt_max 0: 403
 *   retention    manifests of steps 1, 2, 3 with keep 2 leave 2 and 3
 *   links        a namespace or a file that is a symlink: never followed
 *   reopen       the bytes kept scanned at open, a crash's tmp removed;
 *                a directory whose parent is missing refused
 *   concurrent   puts from several threads at once: all kept, the gauge
 *                exact
 *   no_cache     a block request to the cache-less member: 503
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "test.h"
#include "common/util.h"
#include "group/group.h"

#define SECRET "0123456789abcdef-ckpt-secret"
#define NS "0123456789abcdef"
#define NS2 "fedcba9876543210"
#define PORT_FIRST 7900                 /* this test's range: 7900-7949 */
#define PORT_LAST 7949

static char base[64];                   /* the temp dir */
static char ckdir[128];                 /* base/ckpt: the copies */
static uint16_t port;                   /* the member serving now */
static struct tfs_group *grp;

/* ---- the member ---- */

/* The first port of the range with no listener now (SO_REUSEADDR, as
   the server binds: the connections it closed wait in TIME_WAIT). */
static uint16_t pick_port(void)
{
    for (unsigned p = PORT_FIRST; p <= PORT_LAST; p++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)p),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        int ok;

        CHECK(fd >= 0);
        CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                         sizeof(one)) == 0);
        ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
             listen(fd, 1) == 0;
        close(fd);
        if (ok)
            return (uint16_t)p;
    }
    TEST_FAIL_("no free port in %d-%d", PORT_FIRST, PORT_LAST);
    return 0;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    CHECK(fputs(text, f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK(chmod(path, mode) == 0);
}

static void setup(void)
{
    char path[160];

    if (base[0] != '\0')
        return;
    test_tmpdir(base, sizeof(base), "gckpt");
    snprintf(path, sizeof(path), "%s/secret", base);
    write_text(path, SECRET, 0600);
}

static void cleanup(void)
{
    if (base[0] != '\0')
        test_rmtree(base);
}

/* Open the member: serving, no cache, copies in dir (max, keep). */
static int member_open(const char *dir, uint64_t max, unsigned keep)
{
    char list[160];
    char secret[160];
    char listen[32];
    char text[64];
    struct tfs_group_cfg cfg = {.members = list, .listen = listen,
                                .secret_file = secret, .serve = true,
                                .reload_ms = 50, .ckpt_dir = dir,
                                .ckpt_max = max, .ckpt_keep = keep};

    setup();
    port = pick_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    snprintf(list, sizeof(list), "%s/list", base);
    snprintf(secret, sizeof(secret), "%s/secret", base);
    snprintf(text, sizeof(text), "%s\n", listen);
    write_text(list, text, 0644);
    return tfs_group_open(&grp, &cfg, NULL);
}

/* A fresh member over a fresh copy directory name (under base). */
static void member_fresh(const char *name, uint64_t max, unsigned keep)
{
    setup();
    snprintf(ckdir, sizeof(ckdir), "%s/%s", base, name);
    CHECK_OK(member_open(ckdir, max, keep));
}

static void member_close(void)
{
    tfs_group_close(grp);
    grp = NULL;
}

static struct tfs_group_metrics figures(void)
{
    struct tfs_group_snap s;
    struct tfs_group_metrics m;

    CHECK_OK(tfs_group_snap_get(grp, &s));
    m = s.g;
    tfs_group_snap_cleanup(&s);
    return m;
}

/* ---- requests ---- */

struct reply {
    long   status;
    char  *body;                        /* NUL-terminated, malloc'd */
    size_t len;
    char   sum[17];                     /* X-Tierfs-Checksum, or "" */
};

struct upload {
    const unsigned char *p;
    size_t               len;
    size_t               off;
};

static size_t up_read(char *buf, size_t size, size_t n, void *arg)
{
    struct upload *u = arg;
    size_t k = TFS_MIN(size * n, u->len - u->off);

    memcpy(buf, u->p + u->off, k);
    u->off += k;
    return k;
}

static size_t down_write(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    char *b = realloc(r->body, r->len + size * n + 1);

    CHECK(b != NULL);
    memcpy(b + r->len, p, size * n);
    r->len += size * n;
    b[r->len] = '\0';
    r->body = b;
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    static const char h[] = "X-Tierfs-Checksum: ";

    if (size * n >= sizeof(h) - 1 + 16 &&
        strncasecmp(p, h, sizeof(h) - 1) == 0)
        snprintf(r->sum, sizeof(r->sum), "%.16s", p + sizeof(h) - 1);
    return size * n;
}

static void reply_free(struct reply *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* The signature headers for method and block (secret key) into l. */
static struct curl_slist *sign(struct curl_slist *l, const char *key,
                               const char *method, const char *block)
{
    static unsigned seq;
    struct tfs_gauth a;
    uint64_t now = (uint64_t)tfs_wall_ns() / 1000000000u;
    char nonce[40];
    char sig[65];
    char h[128];

    snprintf(nonce, sizeof(nonce), "%08x%016" PRIx64, ++seq,
             tfs_rand_u64());
    CHECK_OK(tfs_gauth_init(&a, key, strlen(key), 30));
    tfs_gauth_sign(&a, method, block, now, nonce, sig);
    tfs_gauth_cleanup(&a);
    snprintf(h, sizeof(h), "X-Tierfs-Time: %" PRIu64, now);
    l = curl_slist_append(l, h);
    snprintf(h, sizeof(h), "X-Tierfs-Nonce: %s", nonce);
    l = curl_slist_append(l, h);
    snprintf(h, sizeof(h), "X-Tierfs-Signature: %s", sig);
    return curl_slist_append(l, h);
}

/* What a request carries besides its method and path. */
struct req {
    const void *body;                   /* PUT: its bytes */
    long long   len;                    /* PUT: -1 chunked (no length) */
    const char *sum;                    /* X-Tierfs-Checksum, or NULL */
    const char *key;                    /* the secret; NULL: unsigned */
    const char *as;                     /* the block signed; NULL: path */
    const char *as_method;              /* the method signed; NULL: its */
    const char *prefix;                 /* NULL: "/v1/ckpt/" */
};

static struct reply call(const char *method, const char *path,
                         const struct req *q)
{
    struct reply r = {0};
    struct upload u = {q->body, q->len > 0 ? (size_t)q->len : 0, 0};
    const char *prefix = q->prefix ? q->prefix : "/v1/ckpt/";
    struct curl_slist *l = NULL;
    CURL *h = curl_easy_init();
    char url[1024];
    char hdr[64];

    CHECK(h != NULL);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s%s", (unsigned)port,
             prefix, path);
    if (q->key != NULL)
        l = sign(l, q->key, q->as_method ? q->as_method : method,
                 q->as ? q->as : path);
    if (q->sum != NULL) {
        snprintf(hdr, sizeof(hdr), "X-Tierfs-Checksum: %s", q->sum);
        l = curl_slist_append(l, hdr);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);    /* ".." sent as is */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, down_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    if (strcmp(method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, up_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &u);
        if (q->len >= 0)
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                             (curl_off_t)q->len);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    CHECK(curl_easy_perform(h) == CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(l);
    curl_easy_cleanup(h);
    if (r.body == NULL)
        r.body = calloc(1, 1);
    return r;
}

static void hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016" PRIx64, v);
}

/* PUT len bytes of p at path, signed, with their right digest. */
static long put(const char *path, const void *p, size_t len)
{
    char sum[17];
    struct req q = {.body = p, .len = (long long)len, .sum = sum,
                    .key = SECRET};
    struct reply r;
    long status;

    hex64(sum, XXH3_64bits(p, len));
    r = call("PUT", path, &q);
    status = r.status;
    if (status == 201)
        CHECK_STR(r.body, "stored\n");
    reply_free(&r);
    return status;
}

static struct reply get(const char *path)
{
    struct req q = {.key = SECRET};

    return call("GET", path, &q);
}

/* ---- the disk ---- */

static bool exists(const char *rel)
{
    char path[512];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", ckdir, rel);
    return lstat(path, &st) == 0;
}

/* Entries of directory rel (of ckdir) whose name ends in ".tmp". */
static int count_tmp(const char *rel)
{
    char path[512];
    struct dirent *de;
    DIR *d;
    int n = 0;

    snprintf(path, sizeof(path), "%s/%s", ckdir, rel);
    d = opendir(path);
    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        n += len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0;
    }
    closedir(d);
    return n;
}

/* Every entry below path, recursively (a tree's size, for "nothing new"). */
static int count_tree(const char *path)
{
    struct dirent *de;
    DIR *d = opendir(path);
    int n = 0;

    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL) {
        char sub[1024];

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        n += 1 + (de->d_type == DT_DIR ? count_tree(sub) : 0);
    }
    closedir(d);
    return n;
}

static void read_text(const char *rel, char *out, size_t size)
{
    char path[512];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/%s", ckdir, rel);
    f = fopen(path, "r");
    CHECK(f != NULL);
    n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* ---- the tests ---- */

TEST(round_trip)
{
    const char *shard = NS "/step-000001/model-rank00001-00000.safetensors";
    unsigned char *a = test_pattern(100000, 1);
    unsigned char *b = test_pattern(5000, 2);
    struct tfs_group_metrics m;
    struct reply r;
    char sum[17];
    char side[64];
    struct stat st;

    member_fresh("rt", 64u << 20, 0);
    CHECK_EQ(put(shard, a, 100000), 201);
    r = get(shard);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.len, 100000);
    CHECK(memcmp(r.body, a, 100000) == 0);
    hex64(sum, XXH3_64bits(a, 100000));
    CHECK_STR(r.sum, sum);
    reply_free(&r);
    /* on disk: the file and its sidecar, 0700 directories */
    CHECK(exists(NS "/step-000001/model-rank00001-00000.safetensors"));
    read_text(NS "/step-000001/.model-rank00001-00000.safetensors.xxh3",
              side, sizeof(side));
    CHECK(strlen(side) == 17 && side[16] == '\n' &&
          strncmp(side, sum, 16) == 0);
    CHECK_EQ(count_tmp(NS "/step-000001"), 0);
    {
        char path[256];

        snprintf(path, sizeof(path), "%s/%s/step-000001", ckdir, NS);
        CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
        CHECK(stat(ckdir, &st) == 0 && (st.st_mode & 0777) == 0700);
    }
    /* more steps: the list goes by step number, then name */
    CHECK_EQ(put(NS "/step-1000000/z.bin", b, 10), 201);
    CHECK_EQ(put(NS "/step-999999/y.bin", b, 20), 201);
    CHECK_EQ(put(NS "/step-000001/a.bin", b, 0), 201);      /* empty */
    CHECK_EQ(put(NS "/step-000001/model-rank00001", b, 1), 201);
    CHECK_EQ(put(NS2 "/step-000001/other.bin", b, 7), 201);
    r = get(NS "/");
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "tierfs-ckpt-list 1\n"
                      "step-000001 a.bin 0\n"
                      "step-000001 model-rank00001 1\n"
                      "step-000001 model-rank00001-00000.safetensors "
                      "100000\n"
                      "step-999999 y.bin 20\n"
                      "step-1000000 z.bin 10\n");
    reply_free(&r);
    r = get(NS "/step-000001/a.bin");
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.len, 0);
    hex64(sum, XXH3_64bits(b, 0));
    CHECK_STR(r.sum, sum);
    reply_free(&r);
    /* a replacement: the new bytes, the new digest, the gauge follows */
    CHECK_EQ(put(shard, b, 5000), 201);
    r = get(shard);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.len, 5000);
    CHECK(memcmp(r.body, b, 5000) == 0);
    hex64(sum, XXH3_64bits(b, 5000));
    CHECK_STR(r.sum, sum);
    reply_free(&r);
    /* missing things */
    r = get(NS "/step-000001/nothing.bin");
    CHECK_EQ(r.status, 404);
    reply_free(&r);
    r = get(NS "/step-000002/a.bin");
    CHECK_EQ(r.status, 404);
    reply_free(&r);
    r = get("00000000000000aa/");
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "tierfs-ckpt-list 1\n");
    reply_free(&r);
    /* a missing sidecar: not served, not listed */
    {
        char path[256];

        snprintf(path, sizeof(path), "%s/%s/step-000001/.a.bin.xxh3",
                 ckdir, NS);
        CHECK(unlink(path) == 0);
    }
    r = get(NS "/step-000001/a.bin");
    CHECK_EQ(r.status, 404);
    reply_free(&r);
    r = get(NS "/");
    CHECK(strstr(r.body, "a.bin") == NULL);
    reply_free(&r);
    m = figures();
    CHECK_EQ(m.ckpt_puts, 7);
    CHECK_EQ(m.ckpt_put_bytes, 100000 + 10 + 20 + 0 + 1 + 7 + 5000);
    CHECK_EQ(m.ckpt_gets, 3);
    CHECK_EQ(m.ckpt_get_bytes, 100000 + 0 + 5000);
    CHECK_EQ(m.ckpt_lists, 3);
    CHECK_EQ(m.ckpt_bytes, 5000 + 10 + 20 + 0 + 1 + 7);
    CHECK_EQ(m.ckpt_bad, 0);
    member_close();
    free(a);
    free(b);
}

TEST(big_body)
{
    size_t len = 4u << 20;
    unsigned char *a = test_pattern(len, 3);
    struct reply r;

    member_fresh("big", 64u << 20, 0);
    CHECK_EQ(put(NS "/step-000004/big.bin", a, len), 201);
    r = get(NS "/step-000004/big.bin");
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.len, len);
    CHECK(memcmp(r.body, a, len) == 0);
    reply_free(&r);
    CHECK_EQ(figures().ckpt_bytes, len);
    member_close();
    free(a);
}

/* A signed PUT of path (a 10-byte body, its right digest): its status. */
static long put_bad(const char *path, const char *as)
{
    static const char body[] = "0123456789";
    char sum[17];
    struct req q = {.body = body, .len = 10, .sum = sum, .key = SECRET,
                    .as = as};
    struct reply r;
    long status;

    hex64(sum, XXH3_64bits(body, 10));
    r = call("PUT", path, &q);
    status = r.status;
    reply_free(&r);
    return status;
}

TEST(refused)
{
    static const char *const bad[] = {
        "../" NS "/step-000001/a",
        NS "/../step-000001/a",
        NS "/step-000001/..",
        NS "/step-000001/../a",
        NS "/step-000001/a/b",
        NS "/step-000001/",
        NS "/step-000001",
        NS "//a",
        NS,
        "0123456789ABCDEF/step-000001/a",       /* uppercase NS */
        "0123456789abcde/step-000001/a",        /* 15 digits */
        "0123456789abcdef0/step-000001/a",      /* 17 digits */
        "0123456789abcdeg/step-000001/a",
        NS "/step-x/a",
        NS "/step-00001/a",                     /* 5 digits */
        NS "/step-0000001/a",                   /* not as %06 writes */
        NS "/step-123456789012345678901/a",     /* 21 digits */
        NS "/step-99999999999999999999/a",      /* past uint64_t */
        NS "/STEP-000001/a",
        NS "/step-000001/a.tmp",
        NS "/step-000001/.hidden",
        NS "/step-000001/a%20b",
        NS "/step-000001/a%2fb",
        NS "/step-000001/%2e%2e",
    };
    char longname[300];
    int before_parent;
    struct tfs_group_metrics m;
    struct reply r;
    int entries;
    size_t i;

    member_fresh("ref", 64u << 20, 0);
    CHECK_EQ(put(NS "/step-000001/ok.bin", "x", 1), 201);
    entries = count_tree(ckdir);
    before_parent = count_tree(base);
    for (i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        const char *as = NULL;

        if (strstr(bad[i], "%20") != NULL)
            as = NS "/step-000001/a b";
        if (strstr(bad[i], "%2f") != NULL)
            as = NS "/step-000001/a/b";         /* what the server sees */
        if (strstr(bad[i], "%2e") != NULL)
            as = NS "/step-000001/..";
        if (put_bad(bad[i], as) != 400)
            TEST_FAIL_("PUT %s: not refused 400", bad[i]);
    }
    snprintf(longname, sizeof(longname), NS "/step-000001/%.*s", 201,
             "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
             "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
             "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
             "nnnnnnnnnnnnnnnn");
    CHECK_EQ(put_bad(longname, NULL), 400);     /* 201 bytes */
    longname[strlen(longname) - 1] = '\0';
    CHECK_EQ(put_bad(longname, NULL), 201);     /* 200: fine */
    entries += 2;                               /* it and its sidecar */
    r = get("../etc/");
    CHECK_EQ(r.status, 400);
    reply_free(&r);
    r = get(NS "/step-000001/../../x");
    CHECK_EQ(r.status, 400);
    reply_free(&r);
    /* unsigned, forged, replayed-looking: 403 */
    {
        static const char body[] = "0123456789";
        char sum[17];
        struct req q = {.body = body, .len = 10, .sum = sum};

        hex64(sum, XXH3_64bits(body, 10));
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 403);
        reply_free(&r);
        q.key = "another-secret-entirely-0123";
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 403);
        reply_free(&r);
        q.key = SECRET;
        q.as = NS "/step-000001/other.bin";     /* signed for another */
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 403);
        reply_free(&r);
        q.as = NULL;
        r = call("GET", NS "/step-000001/ok.bin", &(struct req){0});
        CHECK_EQ(r.status, 403);
        reply_free(&r);
        /* signed as a GET, sent as a PUT */
        q.as_method = "GET";
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 403);
        reply_free(&r);
        q.as_method = NULL;
        /* no digest, a malformed one, a wrong one */
        q.sum = NULL;
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 400);
        reply_free(&r);
        q.sum = "0123456789ABCDEF";
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 400);
        reply_free(&r);
        q.sum = "0123456789abcdef";
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 400);
        CHECK(strstr(r.body, "checksum mismatch") != NULL);
        reply_free(&r);
        /* no Content-Length (chunked) */
        q.sum = sum;
        q.len = -1;
        r = call("PUT", NS "/step-000001/u.bin", &q);
        CHECK_EQ(r.status, 411);
        reply_free(&r);
        /* other methods */
        r = call("DELETE", NS "/step-000001/ok.bin",
                 &(struct req){.key = SECRET});
        CHECK_EQ(r.status, 405);
        reply_free(&r);
        r = call("POST", NS "/step-000001/ok.bin",
                 &(struct req){.key = SECRET});
        CHECK_EQ(r.status, 405);
        reply_free(&r);
    }
    CHECK(!exists(NS "/step-000001/u.bin"));
    CHECK_EQ(count_tmp(NS "/step-000001"), 0);
    CHECK_EQ(count_tree(ckdir), entries);       /* nothing new in it */
    CHECK_EQ(count_tree(base), before_parent + 2);  /* nor outside */
    r = get(NS "/step-000001/ok.bin");
    CHECK_EQ(r.status, 200);                    /* the good one stays */
    CHECK_STR(r.body, "x");
    reply_free(&r);
    m = figures();
    CHECK_EQ(m.ckpt_bad, TFS_ARRAY_LEN(bad) + 1 + 2 + 3 + 1);
    CHECK(m.refused >= 5);
    CHECK_EQ(m.ckpt_puts, 2);
    member_close();
}

/* A raw PUT of path claiming len bytes, of which only part are sent. */
static int put_half(const char *path, size_t len, size_t part)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct curl_slist *l = sign(NULL, SECRET, "PUT", path);
    unsigned char *body = test_pattern(part, 9);
    struct tfs_buf b;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    tfs_buf_init(&b, 0);
    tfs_buf_printf(&b, "PUT /v1/ckpt/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Length: %zu\r\nX-Tierfs-Checksum: "
                   "0123456789abcdef\r\n", path, len);
    for (struct curl_slist *p = l; p != NULL; p = p->next)
        tfs_buf_printf(&b, "%s\r\n", p->data);
    tfs_buf_puts(&b, "\r\n");
    CHECK_OK(tfs_buf_error(&b));
    CHECK_OK(tfs_write_all(fd, b.p, b.len));
    CHECK_OK(tfs_write_all(fd, body, part));
    tfs_buf_cleanup(&b);
    curl_slist_free_all(l);
    free(body);
    return fd;
}

/* Wait (at most 5 s) until cond() holds. */
static bool wait_for(bool (*cond)(void))
{
    for (int i = 0; i < 500; i++) {
        if (cond())
            return true;
        usleep(10000);
    }
    return false;
}

/* A tmp file that holds the part of the body sent, or none left. */
static bool half_streamed(void)
{
    char path[256];
    struct dirent *de;
    bool found = false;
    DIR *d;

    snprintf(path, sizeof(path), "%s/%s/step-000001", ckdir, NS);
    d = opendir(path);
    while (d != NULL && (de = readdir(d)) != NULL) {
        struct stat st;

        if (strncmp(de->d_name, ".half.bin.", 10) == 0 &&
            fstatat(dirfd(d), de->d_name, &st, 0) == 0 &&
            st.st_size == 200000)
            found = true;
    }
    if (d != NULL)
        closedir(d);
    return found;
}

static bool no_tmp_left(void)
{
    return count_tmp(NS "/step-000001") == 0;
}

TEST(quota)
{
    unsigned char *a = test_pattern(600000, 4);
    struct tfs_group_metrics m;
    struct reply r;
    char sum[17];
    int fd;

    member_fresh("quota", 1u << 20, 0);
    /* a body on its way reserves its Content-Length */
    fd = put_half(NS "/step-000001/half.bin", 1u << 20, 200000);
    CHECK(wait_for(half_streamed));     /* streamed to disk as it came */
    CHECK_EQ(put(NS "/step-000001/small.bin", a, 1000), 507);
    close(fd);                          /* the client goes */
    CHECK(wait_for(no_tmp_left));
    CHECK(!exists(NS "/step-000001/half.bin"));
    /* its reservation given back: 600000 fits, twice does not */
    CHECK_EQ(put(NS "/step-000001/a.bin", a, 600000), 201);
    hex64(sum, XXH3_64bits(a, 600000));
    r = call("PUT", NS "/step-000001/b.bin", &(struct req){
        .body = a, .len = 600000, .sum = sum, .key = SECRET});
    CHECK_EQ(r.status, 507);
    CHECK_STR(r.body, "checkpoint copies: 600000 of 1048576 bytes used\n");
    reply_free(&r);
    CHECK(!exists(NS "/step-000001/b.bin"));
    CHECK_EQ(count_tmp(NS "/step-000001"), 0);
    CHECK_EQ(put(NS "/step-000001/c.bin", a, 448576), 201);     /* full */
    CHECK_EQ(put(NS "/step-000001/d.bin", a, 1), 507);
    m = figures();
    CHECK_EQ(m.ckpt_full, 3);
    CHECK_EQ(m.ckpt_bytes, 1u << 20);
    member_close();
    free(a);
}

TEST(copies_off)
{
    struct reply r;

    member_fresh("off", 0, 0);
    CHECK_EQ(put(NS "/step-000001/a.bin", "abc", 3), 403);
    r = get(NS "/");
    CHECK_EQ(r.status, 403);
    CHECK(strstr(r.body, "keeps no checkpoint copies") != NULL);
    reply_free(&r);
    CHECK(!exists(""));                 /* not even made */
    member_close();
}

TEST(retention)
{
    unsigned char *a = test_pattern(3000, 5);
    struct tfs_group_metrics m;
    struct reply r;

    member_fresh("keep", 64u << 20, 2);
    CHECK_EQ(put(NS2 "/step-000001/x.bin", a, 100), 201);
    for (int step = 1; step <= 3; step++) {
        char shard[128];
        char man[128];

        snprintf(shard, sizeof(shard), NS "/step-%06d/model-rank00001-"
                 "00000.safetensors", step);
        snprintf(man, sizeof(man), NS "/step-%06d/rank-00001.local", step);
        CHECK_EQ(put(shard, a, 1000 * (size_t)step), 201);
        CHECK_EQ(put(man, a, 10), 201);
        if (step == 2)
            CHECK(exists(NS "/step-000001"));  /* 2 steps: both kept */
    }
    r = get(NS "/");
    CHECK_STR(r.body, "tierfs-ckpt-list 1\n"
                      "step-000002 model-rank00001-00000.safetensors 2000\n"
                      "step-000002 rank-00001.local 10\n"
                      "step-000003 model-rank00001-00000.safetensors 3000\n"
                      "step-000003 rank-00001.local 10\n");
    reply_free(&r);
    CHECK(!exists(NS "/step-000001"));
    CHECK(exists(NS2 "/step-000001/x.bin"));    /* another namespace */
    m = figures();
    CHECK_EQ(m.ckpt_removed, 2);
    CHECK_EQ(m.ckpt_bytes, 100 + 2000 + 10 + 3000 + 10);
    member_close();
    free(a);
}

TEST(links)
{
    char outside[160];
    char path[512];
    char target[200];
    struct reply r;

    member_fresh("links", 64u << 20, 0);
    snprintf(outside, sizeof(outside), "%s/outside", base);
    CHECK(mkdir(outside, 0700) == 0);
    /* a namespace that is a link to a directory outside */
    snprintf(path, sizeof(path), "%s/%s", ckdir, NS2);
    CHECK(symlink(outside, path) == 0);
    CHECK(put(NS2 "/step-000001/a.bin", "abc", 3) != 201);
    CHECK_EQ(count_tree(outside), 0);
    r = get(NS2 "/step-000001/a.bin");
    CHECK(r.status != 200);
    reply_free(&r);
    r = get(NS2 "/");
    CHECK_STR(r.body, "tierfs-ckpt-list 1\n");
    reply_free(&r);
    /* a file that is a link to one outside, with a sidecar of its own */
    snprintf(target, sizeof(target), "%s/secret-data", outside);
    write_text(target, "do not serve me", 0600);
    CHECK_EQ(put(NS "/step-000001/real.bin", "abc", 3), 201);
    snprintf(path, sizeof(path), "%s/%s/step-000001/link.bin", ckdir, NS);
    CHECK(symlink(target, path) == 0);
    snprintf(path, sizeof(path), "%s/%s/step-000001/.link.bin.xxh3", ckdir,
             NS);
    write_text(path, "0123456789abcdef\n", 0600);
    r = get(NS "/step-000001/link.bin");
    CHECK(r.status != 200);
    CHECK(strstr(r.body, "do not serve me") == NULL);
    reply_free(&r);
    r = get(NS "/");
    CHECK_STR(r.body, "tierfs-ckpt-list 1\nstep-000001 real.bin 3\n");
    reply_free(&r);
    /* a PUT over the link replaces the link, not what it points to */
    CHECK_EQ(put(NS "/step-000001/link.bin", "new", 3), 201);
    read_text("../outside/secret-data", path, sizeof(path));
    CHECK_STR(path, "do not serve me");
    member_close();
}

TEST(reopen)
{
    char path[512];
    char bad[200];
    struct stat st;

    member_fresh("again", 64u << 20, 0);
    CHECK_EQ(put(NS "/step-000007/a.bin", "abcdef", 6), 201);
    CHECK_EQ(put(NS2 "/step-000008/b.bin", "abc", 3), 201);
    member_close();
    /* a crash's leftovers: removed at open, never counted */
    snprintf(path, sizeof(path), "%s/%s/step-000007/.a.bin.00aa.tmp",
             ckdir, NS);
    write_text(path, "partial", 0600);
    CHECK(chmod(ckdir, 0755) == 0);     /* tightened at open */
    CHECK_OK(member_open(ckdir, 64u << 20, 0));
    CHECK_EQ(figures().ckpt_bytes, 9);
    CHECK(!exists(NS "/step-000007/.a.bin.00aa.tmp"));
    CHECK(stat(ckdir, &st) == 0 && (st.st_mode & 0777) == 0700);
    member_close();
    /* its parent must exist */
    snprintf(bad, sizeof(bad), "%s/no-such-dir/ckpt", base);
    CHECK_RC(member_open(bad, 64u << 20, 0), -ENOENT);
    CHECK(grp == NULL);
}

struct putter {
    int  id;
    long status[8];
};

static void *putter_run(void *arg)
{
    struct putter *p = arg;

    for (int i = 0; i < 8; i++) {
        char path[128];
        unsigned char body[4096];

        snprintf(path, sizeof(path), NS "/step-000001/t%d-%d.bin", p->id, i);
        test_fill(body, sizeof(body), (uint64_t)(p->id * 8 + i));
        p->status[i] = put(path, body, 1000 + (size_t)i);
    }
    return NULL;
}

TEST(concurrent)
{
    struct putter p[4];
    pthread_t t[4];
    struct reply r;
    int lines = 0;

    member_fresh("many", 64u << 20, 0);
    for (int i = 0; i < 4; i++) {
        p[i].id = i;
        CHECK(pthread_create(&t[i], NULL, putter_run, &p[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        for (int j = 0; j < 8; j++)
            CHECK_EQ(p[i].status[j], 201);
    }
    r = get(NS "/");
    for (char *c = r.body; *c != '\0'; c++)
        lines += *c == '\n';
    CHECK_EQ(lines, 1 + 32);
    reply_free(&r);
    CHECK_EQ(figures().ckpt_bytes, 4 * (8 * 1000 + 28));
    member_close();
}

TEST(no_cache)
{
    const char *id = "00112233445566778899aabbccddeeff";
    char path[128];
    struct reply r;

    member_fresh("nocache", 64u << 20, 0);
    snprintf(path, sizeof(path), "%s?key=f&version=v&size=1&index=0", id);
    r = call("GET", path, &(struct req){.key = SECRET, .as = id,
                                        .prefix = "/v1/block/"});
    CHECK_EQ(r.status, 503);
    CHECK(strstr(r.body, "this member has no cache") != NULL);
    reply_free(&r);
    r = call("GET", path, &(struct req){.prefix = "/v1/block/"});
    CHECK_EQ(r.status, 403);            /* signed first, still */
    reply_free(&r);
    member_close();
}

TESTS(T(round_trip), T(big_body), T(refused), T(quota), T(copies_off),
      T(retention), T(links), T(reopen), T(concurrent), T(no_cache));

int main(int argc, char **argv)
{
    int rc;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
    cleanup();
    curl_global_cleanup();
    return rc;
}
