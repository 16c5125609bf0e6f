/* SPDX-License-Identifier: MIT */
/*
 * The s3 store's plain-HTTP GETs (s3_http.c, "plain-HTTP GETs into the
 * caller's buffers"; s3_sock.c) against a fake HTTP server in a thread of
 * the test itself, on 127.0.0.1 at an ephemeral port: no S3 server.
 *
 * The fake server is scripted per test: a list of answers, taken in turn
 * by the requests as they come, whatever their connection.  Each answer
 * is bytes sent as they are (a head, then maybe a body, maybe shorter or
 * longer than its head says), in pieces with pauses if asked, and then
 * the connection is kept for the next request, closed, or left silent.
 * Every request head is recorded with the number of the connection it
 * came on, so a test can check its Range, and whether curl sent it (curl
 * adds its default Accept header, any type; the plain-HTTP path sends
 * only the store's headers).  The store is opened anonymous (nothing
 * signed), path style, at s3://bkt/pre, so an object "k" is GET
 * /bkt/pre/k.  A case that fails leaves its server running: the next
 * case's fake_start() stops it first.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "store/s3_int.h"
#include "tierfs/store.h"

/* ---- the fake server ---- */

#define FAKE_MAX_ANS  16
#define FAKE_MAX_REQ  128
#define FAKE_MAX_CONN 16
#define FAKE_REQ_MAX  8192              /* bytes of a request head */
#define FAKE_TICK_MS  20                /* how often threads look at stop */
#define FAKE_STALL_MS 5000              /* a silent connection's limit */

enum fake_after {
    AFTER_KEEP,                         /* read the next request */
    AFTER_CLOSE,                        /* close the connection */
    AFTER_RESET,                        /* close it with a reset (RST) */
    AFTER_STALL,                        /* say nothing until the client
                                           closes (or FAKE_STALL_MS) */
};

struct fake_ans {
    char           *bytes;              /* as sent, owned */
    size_t          len;
    size_t          piece;              /* bytes a send(); 0: all at once */
    unsigned        pause_us;           /* between pieces */
    enum fake_after after;
};

struct fake_req {
    char head[FAKE_REQ_MAX];            /* NUL-terminated */
    int  conn;                          /* the accept it came on, from 1 */
};

struct fake_conn_arg {
    int fd;
    int conn;
};

struct fake {
    bool            running;
    int             lfd;
    int             port;
    atomic_bool     stop;
    pthread_t       acceptor;
    pthread_mutex_t lock;
    struct fake_ans ans[FAKE_MAX_ANS];
    int             n_ans;
    int             next_ans;
    struct fake_req req[FAKE_MAX_REQ];
    int             n_req;
    int             n_accept;
    int             live;               /* connection threads running */
    pthread_t       tid[FAKE_MAX_CONN];
    int             n_tid;
    const unsigned char *obj;           /* past the script: 206s of it */
    size_t          obj_len;
};

static struct fake fk = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool fake_stopping(void)
{
    return atomic_load(&fk.stop);
}

/* Wait until fd is ready for ev: 1, 0 at the time limit (ms, -1: none)
   or when the server stops, -1 on an error. */
static int fake_wait(int fd, short ev, int limit_ms)
{
    uint64_t end = limit_ms < 0 ? 0
                                : tfs_now_ns() + (uint64_t)limit_ms * 1000000u;

    while (!fake_stopping()) {
        struct pollfd pf = {.fd = fd, .events = ev};
        int r = poll(&pf, 1, FAKE_TICK_MS);

        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (end != 0 && tfs_now_ns() >= end)
            return 0;
    }
    return 0;
}

/* All of b[0..n) on the non-blocking fd; false when the peer is gone. */
static bool fake_send_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

        if (k > 0) {
            b += k;
            n -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                             errno == EINTR)) {
            if (fake_wait(fd, POLLOUT, -1) <= 0)
                return false;
        } else {
            return false;
        }
    }
    return true;
}

static void fake_pause(unsigned us)
{
    if (us > 0 && !fake_stopping())
        tfs_sleep_ns((uint64_t)us * 1000u);
}

/* After an AFTER_STALL answer: silent until the client closes. */
static void fake_stall(int fd)
{
    char sink[4096];
    uint64_t end = tfs_now_ns() + (uint64_t)FAKE_STALL_MS * 1000000u;

    while (tfs_now_ns() < end) {
        int w = fake_wait(fd, POLLIN, FAKE_STALL_MS);
        ssize_t k;

        if (w <= 0)
            return;
        k = recv(fd, sink, sizeof(sink), 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            return;                     /* the client closed */
    }
}

/* A 206 of fk.obj for the Range of the request head b[0..n) (a 400
   without one); its bytes are the caller's to free. */
static struct fake_ans fake_serve_range(const char *b, size_t n)
{
    struct fake_ans a = {.after = AFTER_KEEP};
    char head[4096];
    const char *r;
    size_t first = 0;
    size_t last = 0;
    int hl;

    memcpy(head, b, TFS_MIN(n, sizeof(head) - 1));
    head[TFS_MIN(n, sizeof(head) - 1)] = '\0';
    r = strcasestr(head, "\r\nrange: bytes=");
    if (r == NULL || sscanf(r + 15, "%zu-%zu", &first, &last) != 2 ||
        first > last || last >= fk.obj_len) {
        static const char bad[] = "HTTP/1.1 400 Bad Request\r\n"
                                  "Content-Length: 0\r\n\r\n";

        a.bytes = malloc(sizeof(bad));
        if (a.bytes != NULL)
            memcpy(a.bytes, bad, a.len = sizeof(bad) - 1);
        return a;
    }
    hl = snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
                  "Content-Length: %zu\r\n"
                  "Content-Range: bytes %zu-%zu/%zu\r\n\r\n",
                  last - first + 1, first, last, fk.obj_len);
    a.bytes = malloc((size_t)hl + last - first + 1);
    if (a.bytes != NULL) {
        memcpy(a.bytes, head, (size_t)hl);
        memcpy(a.bytes + hl, fk.obj + first, last - first + 1);
        a.len = (size_t)hl + last - first + 1;
    }
    return a;
}

/* One answer, in its pieces; false when the client is gone. */
static bool fake_send_ans(int fd, const struct fake_ans *ans)
{
    for (size_t at = 0; at < ans->len;) {
        size_t k = ans->piece ? TFS_MIN(ans->piece, ans->len - at)
                              : ans->len - at;

        if (at > 0)
            fake_pause(ans->pause_us);
        if (!fake_send_all(fd, ans->bytes + at, k))
            return false;
        at += k;
    }
    return true;
}

static void *fake_conn_main(void *arg)
{
    struct fake_conn_arg a = *(struct fake_conn_arg *)arg;
    char *buf = malloc(FAKE_REQ_MAX);
    size_t n = 0;

    free(arg);
    while (buf != NULL) {
        struct fake_ans ans = {.bytes = NULL};
        bool owned = false;             /* ans.bytes are this thread's */
        bool sent;
        char *end;
        size_t hl;
        int ai;

        /* one request head */
        while ((end = memmem(buf, n, "\r\n\r\n", 4)) == NULL) {
            ssize_t k;

            if (n == FAKE_REQ_MAX - 1 || fake_wait(a.fd, POLLIN, -1) <= 0)
                goto out;
            k = recv(a.fd, buf + n, FAKE_REQ_MAX - 1 - n, 0);
            if (k < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (k <= 0)
                goto out;               /* the client closed */
            n += (size_t)k;
        }
        hl = (size_t)(end - buf) + 4;
        pthread_mutex_lock(&fk.lock);
        if (fk.n_req < FAKE_MAX_REQ) {
            memcpy(fk.req[fk.n_req].head, buf, hl);
            fk.req[fk.n_req].head[hl] = '\0';
            fk.req[fk.n_req].conn = a.conn;
        }
        fk.n_req++;
        ai = fk.next_ans++;
        if (ai < fk.n_ans)
            ans = fk.ans[ai];           /* its bytes live until fake_stop */
        else if ((owned = fk.obj != NULL))
            ans = fake_serve_range(buf, hl);
        pthread_mutex_unlock(&fk.lock);
        memmove(buf, buf + hl, n - hl);
        n -= hl;
        if (ans.bytes == NULL)
            break;                      /* out of script: hang up */
        sent = fake_send_ans(a.fd, &ans);
        if (owned)
            free(ans.bytes);
        if (sent && ans.after == AFTER_RESET) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};

            (void)setsockopt(a.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        if (!sent || ans.after == AFTER_CLOSE || ans.after == AFTER_RESET)
            break;
        if (ans.after == AFTER_STALL) {
            fake_stall(a.fd);
            break;
        }
    }
out:
    close(a.fd);
    free(buf);
    pthread_mutex_lock(&fk.lock);
    fk.live--;
    pthread_mutex_unlock(&fk.lock);
    return NULL;
}

static void *fake_accept_main(void *arg)
{
    (void)arg;
    while (!fake_stopping()) {
        struct pollfd pf = {.fd = fk.lfd, .events = POLLIN};
        struct fake_conn_arg *a;
        int one = 1;
        int fd;

        if (poll(&pf, 1, FAKE_TICK_MS) <= 0)
            continue;
        fd = accept4(fk.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        a = malloc(sizeof(*a));
        pthread_mutex_lock(&fk.lock);
        fk.n_accept++;
        if (a != NULL && fk.n_tid < FAKE_MAX_CONN) {
            a->fd = fd;
            a->conn = fk.n_accept;
            if (pthread_create(&fk.tid[fk.n_tid], NULL, fake_conn_main, a) ==
                0) {
                fk.n_tid++;
                fk.live++;
                a = NULL;
                fd = -1;
            }
        }
        pthread_mutex_unlock(&fk.lock);
        free(a);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

/* Stop the server: every thread joined, every answer freed.  Also what
   the next test does first when a failed one left its server running. */
static void fake_stop(void)
{
    if (!fk.running)
        return;
    atomic_store(&fk.stop, true);
    pthread_join(fk.acceptor, NULL);
    for (int i = 0; i < fk.n_tid; i++)
        pthread_join(fk.tid[i], NULL);
    close(fk.lfd);
    for (int i = 0; i < fk.n_ans; i++)
        free(fk.ans[i].bytes);
    fk.running = false;
}

static void fake_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);

    fake_stop();
    fk.n_ans = fk.next_ans = fk.n_req = fk.n_accept = fk.live = fk.n_tid = 0;
    fk.obj = NULL;
    fk.obj_len = 0;
    atomic_store(&fk.stop, false);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fk.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fk.lfd >= 0);
    CHECK(bind(fk.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(fk.lfd, 16) == 0);
    CHECK(getsockname(fk.lfd, (struct sockaddr *)&a, &alen) == 0);
    fk.port = ntohs(a.sin_port);
    CHECK(pthread_create(&fk.acceptor, NULL, fake_accept_main, NULL) == 0);
    fk.running = true;
}

/* Script the next answer: head, then body[0..blen) (may be NULL). */
static void fake_add(enum fake_after after, size_t piece, unsigned pause_us,
                     const char *head, const void *body, size_t blen)
{
    size_t hlen = strlen(head);
    char *b = malloc(hlen + blen + 1);

    CHECK(b != NULL);
    memcpy(b, head, hlen);
    if (blen > 0)
        memcpy(b + hlen, body, blen);
    pthread_mutex_lock(&fk.lock);
    if (fk.n_ans == FAKE_MAX_ANS) {
        pthread_mutex_unlock(&fk.lock);
        free(b);
        TEST_FAIL_("more than %d scripted answers", FAKE_MAX_ANS);
    }
    fk.ans[fk.n_ans++] = (struct fake_ans){.bytes = b, .len = hlen + blen,
                                           .piece = piece,
                                           .pause_us = pause_us,
                                           .after = after};
    pthread_mutex_unlock(&fk.lock);
}

/* A 206 of obj's bytes [off, off + len) (obj total bytes), and
   extra header lines (may be ""). */
static void fake_206(enum fake_after after, size_t piece, unsigned pause_us,
                     const unsigned char *obj, size_t total, size_t off,
                     size_t len, const char *extra)
{
    char head[512];

    snprintf(head, sizeof(head),
             "HTTP/1.1 206 Partial Content\r\n"
             "Content-Length: %zu\r\n"
             "Content-Range: bytes %zu-%zu/%zu\r\n"
             "ETag: \"0123456789abcdef0123456789abcdef\"\r\n"
             "%s\r\n", len, off, off + len - 1, total, extra);
    fake_add(after, piece, pause_us, head, obj + off, len);
}

/* Past the script, answer each request with its Range of obj (which
   lives until fake_stop). */
static void fake_serve(const unsigned char *obj, size_t len)
{
    pthread_mutex_lock(&fk.lock);
    fk.obj = obj;
    fk.obj_len = len;
    pthread_mutex_unlock(&fk.lock);
}

/* One of the server's counts, read under its lock. */
static int fake_count(const int *field)
{
    int n;

    pthread_mutex_lock(&fk.lock);
    n = *field;
    pthread_mutex_unlock(&fk.lock);
    return n;
}

#define fake_accepts() fake_count(&fk.n_accept)
#define fake_requests() fake_count(&fk.n_req)
#define fake_live() fake_count(&fk.live)

/* Request i's head (recorded before its answer went out, so complete
   once the client has the answer). */
static const char *fake_req(int i)
{
    CHECK(i >= 0 && i < fake_requests() && i < FAKE_MAX_REQ);
    return fk.req[i].head;
}

static int fake_req_conn(int i)
{
    CHECK(i >= 0 && i < fake_requests() && i < FAKE_MAX_REQ);
    return fk.req[i].conn;
}

/* Whether request i has the header line "name: value" (any case). */
static bool req_has(int i, const char *line)
{
    char want[512];

    snprintf(want, sizeof(want), "\r\n%s\r\n", line);
    return strcasestr(fake_req(i), want) != NULL;
}

/* Whether curl sent request i (its default Accept header). */
static bool req_by_curl(int i)
{
    return req_has(i, "Accept: */*");
}

/* Request i is a GET of /bkt/pre/KEY with Range bytes=first-last. */
static void check_get(int i, const char *key, size_t first, size_t last)
{
    char line[256];

    snprintf(line, sizeof(line), "GET /bkt/pre/%s HTTP/1.1\r\n", key);
    if (strncmp(fake_req(i), line, strlen(line)) != 0)
        TEST_FAIL_("request %d is not GET /bkt/pre/%s:\n%s", i, key,
                   fake_req(i));
    snprintf(line, sizeof(line), "range: bytes=%zu-%zu", first, last);
    if (!req_has(i, line))
        TEST_FAIL_("request %d has no '%s':\n%s", i, line, fake_req(i));
    snprintf(line, sizeof(line), "Host: 127.0.0.1:%d", fk.port);
    if (!req_has(i, line))
        TEST_FAIL_("request %d has no '%s':\n%s", i, line, fake_req(i));
}

static void check_raw(int i)
{
    if (req_by_curl(i))
        TEST_FAIL_("request %d went through curl:\n%s", i, fake_req(i));
}

/* Open s3://bkt/pre at the fake server; extra options may be NULL. */
static struct tfs_store *fake_store(const char *extra)
{
    struct tfs_store *st = NULL;
    char opts[512];

    snprintf(opts, sizeof(opts), "endpoint=http://127.0.0.1:%d&anonymous=1"
             "&path_style=1&timeout_ms=5000%s%s", fk.port,
             extra != NULL ? "&" : "", extra != NULL ? extra : "");
    CHECK_OK(tfs_store_open(&st, "s3://bkt/pre", opts));
    return st;
}

/* Read [off, off + len) of key and compare with obj's bytes there. */
static void read_ok(struct tfs_store *st, const char *key,
                    const unsigned char *obj, size_t off, size_t len)
{
    unsigned char *buf = malloc(len);
    size_t n = 0;

    CHECK(buf != NULL);
    memset(buf, 0xee, len);
    CHECK_OK(tfs_store_read(st, key, buf, len, off, NULL, &n));
    CHECK_EQ(n, len);
    if (memcmp(buf, obj + off, len) != 0) {
        free(buf);
        TEST_FAIL_("bytes [%zu, %zu) of %s differ", off, off + len, key);
    }
    free(buf);
}

#define OBJ_LEN ((size_t)200000)

/* ---- answers that arrive well ---- */

/* 1: a 206 in 997-byte writes: exact bytes, the right Range, no curl. */
TEST(pieces_206)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 1);
    struct tfs_store *st;

    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_KEEP, 997, 200, obj, OBJ_LEN, 1000, 100000, "");
    read_ok(st, "k", obj, 1000, 100000);
    CHECK_EQ(fake_requests(), 1);
    check_get(0, "k", 1000, 100999);
    check_raw(0);
    CHECK(!req_has(0, "Expect:"));      /* an empty header is not sent */
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* The landing reports of one read, checked as they come. */
struct landings {
    const struct iovec *iov;
    int                 iovcnt;
    const unsigned char *want;         /* what [0, len) must hold */
    size_t              at[4096];
    size_t              len[4096];
    int                 n;
    int                 early;          /* reported before it landed */
};

/* Whether bytes [at, at + len) of the segments equal want's. */
static bool iov_equal(const struct iovec *iov, int iovcnt, size_t at,
                      size_t len, const unsigned char *want)
{
    for (int i = 0; i < iovcnt && len > 0; i++) {
        size_t seg = iov[i].iov_len;
        size_t k;

        if (at >= seg) {
            at -= seg;
            continue;
        }
        k = TFS_MIN(len, seg - at);
        if (memcmp((const char *)iov[i].iov_base + at, want, k) != 0)
            return false;
        want += k;
        len -= k;
        at = 0;
    }
    return len == 0;
}

static void on_land(void *arg, size_t at, size_t len)
{
    struct landings *l = arg;

    /* no CHECK here: this runs inside the store */
    if (l->n < (int)TFS_ARRAY_LEN(l->at)) {
        l->at[l->n] = at;
        l->len[l->n] = len;
    }
    l->n++;
    if (!iov_equal(l->iov, l->iovcnt, at, len, l->want + at))
        l->early++;
}

/* 2: a scattered read into 3 segments with landing reports. */
TEST(scattered_landing)
{
    static const size_t seg[3] = {1000, 70001, 28999};
    size_t off = 5000;
    size_t len = seg[0] + seg[1] + seg[2];
    unsigned char *obj = test_pattern(OBJ_LEN, 2);
    unsigned char *dst[3];
    struct iovec iov[3];
    struct landings *l = calloc(1, sizeof(*l));
    struct tfs_landing land = {on_land, l};
    struct tfs_read_info info = {0};
    struct tfs_store *st;
    size_t n = 0;
    size_t next = 0;

    CHECK(l != NULL);
    for (int i = 0; i < 3; i++) {
        dst[i] = malloc(seg[i]);
        CHECK(dst[i] != NULL);
        memset(dst[i], 0xee, seg[i]);
        iov[i] = (struct iovec){dst[i], seg[i]};
    }
    *l = (struct landings){.iov = iov, .iovcnt = 3, .want = obj + off};
    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_KEEP, 4093, 100, obj, OBJ_LEN, off, len, "");
    info.iov = iov;
    info.iovcnt = 3;
    info.land = &land;
    CHECK(tfs_store_can_scatter(st));
    CHECK_OK(tfs_store_read_ex(st, "s", NULL, len, off, NULL, &n, &info));
    CHECK_EQ(n, len);
    CHECK(memcmp(dst[0], obj + off, seg[0]) == 0);
    CHECK(memcmp(dst[1], obj + off + seg[0], seg[1]) == 0);
    CHECK(memcmp(dst[2], obj + off + seg[0] + seg[1], seg[2]) == 0);
    CHECK(info.have & TFS_RINFO_SIZE);
    CHECK_EQ(info.obj_size, OBJ_LEN);
    /* the reports: [0, len) in order, no gap, no overlap, each piece
       already in place when reported */
    CHECK(l->n > 1 && l->n <= (int)TFS_ARRAY_LEN(l->at));
    for (int i = 0; i < l->n; i++) {
        if (l->at[i] != next || l->len[i] == 0)
            TEST_FAIL_("landing %d: (%zu, %zu), want at %zu", i, l->at[i],
                       l->len[i], next);
        next += l->len[i];
    }
    CHECK_EQ(next, len);
    CHECK_EQ(l->early, 0);
    CHECK_EQ(fake_requests(), 1);
    check_get(0, "s", off, off + len - 1);
    check_raw(0);
    printf("# %d landing reports\n", l->n);
    tfs_store_close(st);
    fake_stop();
    for (int i = 0; i < 3; i++)
        free(dst[i]);
    free(l);
    free(obj);
}

/* 3: two reads in a row on one kept connection. */
TEST(keep_alive)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 3);
    struct tfs_store *st;

    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 5000, "");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 5000, 7000, "");
    read_ok(st, "k", obj, 0, 5000);
    read_ok(st, "k", obj, 5000, 7000);
    CHECK_EQ(fake_accepts(), 1);
    CHECK_EQ(fake_requests(), 2);
    CHECK_EQ(fake_req_conn(1), fake_req_conn(0));
    check_get(0, "k", 0, 4999);
    check_get(1, "k", 5000, 11999);
    check_raw(0);
    check_raw(1);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* 4: the server closes the kept connection after an answer: the next
   read goes on a new one, without an error.  Once with the close seen
   before the next request (a pause), once racing it. */
TEST(kept_conn_closed_by_server)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 4);
    struct tfs_store *st;

    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_CLOSE, 0, 0, obj, OBJ_LEN, 0, 3000, "");
    fake_206(AFTER_CLOSE, 0, 0, obj, OBJ_LEN, 3000, 3000, "");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 6000, 3000, "");
    read_ok(st, "k", obj, 0, 3000);
    tfs_sleep_ns(50000000u);            /* its FIN has come */
    read_ok(st, "k", obj, 3000, 3000);
    read_ok(st, "k", obj, 6000, 3000);  /* no pause */
    CHECK_EQ(fake_accepts(), 3);
    CHECK_EQ(fake_requests(), 3);
    CHECK(fake_req_conn(0) != fake_req_conn(1));
    CHECK(fake_req_conn(1) != fake_req_conn(2));
    for (int i = 0; i < 3; i++) {
        check_get(i, "k", 3000 * (size_t)i, 3000 * (size_t)i + 2999);
        check_raw(i);
    }
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* The server takes the next request on the kept connection and resets
   it without an answer: the read is sent again on a new connection. */
TEST(kept_conn_reset)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 20);
    struct tfs_store *st;

    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 3000, "");
    fake_add(AFTER_RESET, 0, 0, "", NULL, 0);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 3000, 3000, "");
    read_ok(st, "k", obj, 0, 3000);
    read_ok(st, "k", obj, 3000, 3000);
    printf("# detail after the read that recovered: '%s'\n",
           tfs_errdetail());
    CHECK_EQ(fake_accepts(), 2);
    CHECK_EQ(fake_requests(), 3);
    CHECK_EQ(fake_req_conn(1), fake_req_conn(0));
    CHECK(fake_req_conn(2) != fake_req_conn(1));
    check_get(1, "k", 3000, 5999);
    check_get(2, "k", 3000, 5999);
    for (int i = 0; i < 3; i++)
        check_raw(i);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* Connection: close in an answer: the client does not reuse it. */
TEST(connection_close_header)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 16);
    struct tfs_store *st;

    fake_start();
    st = fake_store(NULL);
    /* the server would keep it: only the header says close */
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 1000, "Connection: close\r\n");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 1000, 1000, "");
    read_ok(st, "k", obj, 0, 1000);
    read_ok(st, "k", obj, 1000, 1000);
    CHECK_EQ(fake_accepts(), 2);
    CHECK_EQ(fake_requests(), 2);
    check_raw(0);
    check_raw(1);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* 11: 100 Continue (and a 102) before the 206, split or whole. */
TEST(continue_then_206)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 11);
    struct tfs_store *st;
    char head[512];

    fake_start();
    st = fake_store(NULL);
    snprintf(head, sizeof(head),
             "HTTP/1.1 100 Continue\r\n\r\n"
             "HTTP/1.1 206 Partial Content\r\n"
             "Content-Range: bytes 100-1099/%zu\r\n"
             "Content-Length: 1000\r\n\r\n", OBJ_LEN);
    fake_add(AFTER_KEEP, 7, 50, head, obj + 100, 1000);    /* 7-byte pieces */
    snprintf(head, sizeof(head),
             "HTTP/1.1 100 Continue\r\n\r\n"
             "HTTP/1.1 102 Processing\r\n\r\n"
             "HTTP/1.1 206 Partial Content\r\n"
             "Content-Range: bytes 2000-2999/%zu\r\n"
             "Content-Length: 1000\r\n\r\n", OBJ_LEN);
    fake_add(AFTER_KEEP, 0, 0, head, obj + 2000, 1000);
    read_ok(st, "k", obj, 100, 1000);
    read_ok(st, "k", obj, 2000, 1000);
    CHECK_EQ(fake_requests(), 2);
    CHECK_EQ(fake_accepts(), 1);
    check_raw(0);
    check_raw(1);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* 15: a 200 longer than a read from 0 asked for: its first len bytes
   (dst_prefix), and the rest of it left on a connection not reused. */
TEST(whole_object_prefix)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 15);
    struct tfs_read_info info = {.have = TFS_RINFO_WHOLE};
    unsigned char buf[1000];
    struct tfs_store *st;
    char head[256];
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: 1500"
             "\r\nETag: \"0123456789abcdef0123456789abcdef\"\r\n\r\n");
    /* in pieces: the head comes before most of the body, so what is
       left of it after len bytes is still to come on that connection */
    fake_add(AFTER_KEEP, 250, 2000, head, obj, 1500);
    fake_add(AFTER_KEEP, 250, 2000, head, obj, 1500);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 500, "");
    /* a plain read of the length the object was listed at */
    memset(buf, 0xee, sizeof(buf));
    CHECK_OK(tfs_store_read(st, "w", buf, sizeof(buf), 0, NULL, &n));
    CHECK_EQ(n, sizeof(buf));
    CHECK(memcmp(buf, obj, sizeof(buf)) == 0);
    CHECK_EQ(fake_requests(), 1);
    check_get(0, "w", 0, 999);
    check_raw(0);
    /* the whole object at a version: no Range, an If-Match */
    memset(buf, 0xee, sizeof(buf));
    CHECK_OK(tfs_store_read_ex(st, "w", buf, sizeof(buf), 0, "v1", &n,
                               &info));
    CHECK_EQ(n, sizeof(buf));
    CHECK(memcmp(buf, obj, sizeof(buf)) == 0);
    CHECK(info.have & TFS_RINFO_SIZE);
    CHECK_EQ(info.obj_size, 1500);
    CHECK_EQ(fake_requests(), 2);
    CHECK(strncmp(fake_req(1), "GET /bkt/pre/w HTTP/1.1\r\n", 25) == 0);
    CHECK(strcasestr(fake_req(1), "\r\nrange:") == NULL);
    CHECK(req_has(1, "if-match: \"v1\""));
    check_raw(1);
    CHECK_EQ(fake_accepts(), 2);        /* the first one was not reused */
    read_ok(st, "k", obj, 0, 500);
    CHECK_EQ(fake_accepts(), 3);        /* nor the second */
    CHECK_EQ(fake_requests(), 3);
    check_raw(2);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* ---- answers that fail ---- */

/* 5: the server closes inside a body: -ECONNRESET, and the detail says
   where. */
TEST(close_mid_body)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 5);
    unsigned char buf[1000];
    struct tfs_store *st;
    char head[256];
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
             "Content-Length: 1000\r\nContent-Range: bytes 0-999/%zu\r\n\r\n",
             OBJ_LEN);
    fake_add(AFTER_CLOSE, 0, 0, head, obj, 400);
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n),
             -ECONNRESET);
    if (strstr(tfs_errdetail(), "closed after 400 of 1000 bytes") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    CHECK(strstr(tfs_errdetail(), "/bkt/pre/k") != NULL);
    CHECK_EQ(fake_requests(), 1);
    check_raw(0);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* A new connection the server closes without a word: -ECONNRESET at
   once, asked once (only a kept connection is tried again). */
TEST(closed_before_answer)
{
    unsigned char buf[100];
    struct tfs_store *st;
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    fake_add(AFTER_CLOSE, 0, 0, "", NULL, 0);
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n),
             -ECONNRESET);
    if (strstr(tfs_errdetail(), "closed before an answer") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    CHECK_EQ(fake_requests(), 1);
    CHECK_EQ(fake_accepts(), 1);
    tfs_store_close(st);
    fake_stop();
}

/* 6: a transfer (over 1 MiB) whose server goes silent mid-body fails
   after stall_ms, and lets the connection go. */
TEST(stall_times_out)
{
    size_t len = 2u << 20;
    unsigned char *obj = test_pattern(len, 6);
    unsigned char *buf = malloc(len);
    struct tfs_store *st;
    char head[256];
    uint64_t t0;
    double secs;
    size_t n = 0;

    CHECK(buf != NULL);
    fake_start();
    st = fake_store("stall_ms=1000");
    snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
             "Content-Length: %zu\r\nContent-Range: bytes 0-%zu/%zu\r\n\r\n",
             len, len - 1, 2 * len);
    fake_add(AFTER_STALL, 0, 0, head, obj, 64u << 10);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "big", buf, len, 0, NULL, &n), -ETIMEDOUT);
    secs = test_secs_since(t0);
    printf("# stalled GET failed after %.2f s: %s\n", secs, tfs_errdetail());
    if (secs < 0.9 || secs > 3.0)
        TEST_FAIL_("the stalled GET failed after %.2f s, want ~1", secs);
    CHECK_EQ(fake_requests(), 1);
    check_raw(0);
    /* the client hung up: the server's side ends by itself */
    t0 = tfs_now_ns();
    while (fake_live() > 0 && test_secs_since(t0) < 2.0)
        tfs_sleep_ns(10000000u);
    CHECK_EQ(fake_live(), 0);
    tfs_store_close(st);
    fake_stop();
    free(buf);
    free(obj);
}

/* 7: a chunked answer has no length: asked again through curl. */
TEST(chunked_goes_to_curl)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 7);
    char *body = malloc(2000);
    struct tfs_store *st;
    char head[256];
    size_t blen = 0;

    CHECK(body != NULL);
    /* 1000 bytes at 3000 in chunks of 256, 256, 488 */
    for (size_t at = 0, k; at < 1000; at += k) {
        k = at < 512 ? 256 : 1000 - at;
        blen += (size_t)snprintf(body + blen, 16, "%zx\r\n", k);
        memcpy(body + blen, obj + 3000 + at, k);
        blen += k;
        memcpy(body + blen, "\r\n", 2);
        blen += 2;
    }
    memcpy(body + blen, "0\r\n\r\n", 5);
    blen += 5;
    snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\n"
             "Transfer-Encoding: chunked\r\n"
             "Content-Range: bytes 3000-3999/%zu\r\n\r\n", OBJ_LEN);
    fake_start();
    st = fake_store(NULL);
    fake_add(AFTER_KEEP, 0, 0, head, body, blen);
    fake_add(AFTER_KEEP, 0, 0, head, body, blen);
    read_ok(st, "k", obj, 3000, 1000);
    CHECK_EQ(fake_requests(), 2);
    check_get(0, "k", 3000, 3999);
    check_get(1, "k", 3000, 3999);
    check_raw(0);
    if (!req_by_curl(1))
        TEST_FAIL_("the second request was not curl's:\n%s", fake_req(1));
    tfs_store_close(st);
    fake_stop();
    free(body);
    free(obj);
}

static const char nosuchkey[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<Error><Code>NoSuchKey</Code>"
    "<Message>The specified key does not exist.</Message>"
    "<Key>pre/missing</Key><RequestId>tx0001</RequestId></Error>";

/* 8: a 404 with its <Error>: -ENOENT, and the connection kept. */
TEST(not_found_keeps_conn)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 8);
    unsigned char buf[100];
    struct tfs_store *st;
    char head[256];
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    snprintf(head, sizeof(head), "HTTP/1.1 404 Not Found\r\n"
             "Content-Type: application/xml\r\nContent-Length: %zu\r\n\r\n",
             strlen(nosuchkey));
    fake_add(AFTER_KEEP, 0, 0, head, nosuchkey, strlen(nosuchkey));
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 100, "");
    CHECK_RC(tfs_store_read(st, "missing", buf, sizeof(buf), 0, NULL, &n),
             -ENOENT);
    if (strstr(tfs_errdetail(), "NoSuchKey") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    read_ok(st, "k", obj, 0, 100);
    CHECK_EQ(fake_requests(), 2);
    CHECK_EQ(fake_accepts(), 1);
    check_raw(0);
    check_raw(1);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* 9: 503 SlowDown: -EAGAIN, asked once (the retry layer's job). */
TEST(slow_down)
{
    static const char body[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        "<Error><Code>SlowDown</Code>"
        "<Message>Please reduce your request rate.</Message></Error>";
    unsigned char buf[100];
    struct tfs_store *st;
    char head[256];
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    snprintf(head, sizeof(head), "HTTP/1.1 503 Slow Down\r\n"
             "Content-Length: %zu\r\n\r\n", strlen(body));
    fake_add(AFTER_KEEP, 0, 0, head, body, strlen(body));
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n), -EAGAIN);
    if (strstr(tfs_errdetail(), "SlowDown") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    CHECK_EQ(fake_requests(), 1);
    check_raw(0);
    tfs_store_close(st);
    fake_stop();
}

/* 10: a malformed status line: an error at once, and the connection
   dropped (the next read makes a new one). */
TEST(malformed_status)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 10);
    unsigned char buf[10];
    struct tfs_store *st;
    uint64_t t0;
    size_t n = 0;
    int rc;

    fake_start();
    st = fake_store(NULL);
    fake_add(AFTER_KEEP, 0, 0, "HTTP/1.1 2x0 OK\r\nContent-Length: 10\r\n\r\n",
             obj, 10);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 10, "");
    t0 = tfs_now_ns();
    rc = tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n);
    CHECK(test_secs_since(t0) < 2.0);
    CHECK(rc < 0);
    CHECK_RC(rc, TFS_EPROTO);
    CHECK(strstr(tfs_errdetail(), "malformed status line") != NULL);
    read_ok(st, "k", obj, 0, 10);
    CHECK_EQ(fake_requests(), 2);
    CHECK_EQ(fake_accepts(), 2);
    check_raw(0);
    check_raw(1);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* 12: a 206 longer than the range asked (not a read from 0): refused,
   and the connection with the rest of it dropped. */
TEST(longer_than_range)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 12);
    unsigned char buf[1000];
    struct tfs_store *st;
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 500, 2000, "");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 500, 1000, "");
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 500, NULL, &n),
             TFS_EPROTO);
    if (strstr(tfs_errdetail(), "more bytes than the range") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    check_get(0, "k", 500, 1499);
    check_raw(0);
    read_ok(st, "k", obj, 500, 1000);
    CHECK_EQ(fake_accepts(), 2);
    CHECK_EQ(fake_requests(), 2);
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* A head of exactly hlen bytes (hlen >= 512): a 206 of 100 bytes,
   padded with X-Pad lines of at most 200 bytes. */
static char *padded_head(size_t hlen)
{
    char *h = malloc(hlen + 1);
    size_t n;
    size_t left;
    int i = 0;

    CHECK(h != NULL);
    n = (size_t)snprintf(h, hlen + 1, "HTTP/1.1 206 Partial Content\r\n"
                         "Content-Length: 100\r\n"
                         "Content-Range: bytes 0-99/%zu\r\n", OBJ_LEN);
    left = hlen - 2 - n;                /* the blank line's CRLF last */
    while (left > 0) {
        size_t line = left > 200 ? 100 : left;
        int k = snprintf(h + n, hlen + 1 - n, "X-Pad-%04d: ", i++);

        memset(h + n + k, 'p', line - (size_t)k - 2);
        memcpy(h + n + line - 2, "\r\n", 2);
        n += line;
        left -= line;
    }
    memcpy(h + n, "\r\n", 2);
    h[n + 2] = '\0';
    CHECK_EQ(strlen(h), hlen);
    return h;
}

/* 13: a head over S3_HEAD_MAX fails at once; one of exactly that many
   bytes is taken. */
TEST(head_too_long)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 13);
    char *fits = padded_head(S3_HEAD_MAX);
    char *over = padded_head(S3_HEAD_MAX + 1);
    char *big = padded_head(20000);
    unsigned char buf[100];
    struct tfs_store *st;
    uint64_t t0;
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    fake_add(AFTER_KEEP, 0, 0, big, obj, 100);
    fake_add(AFTER_KEEP, 0, 0, over, obj, 100);
    fake_add(AFTER_KEEP, 0, 0, fits, obj, 100);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n),
             TFS_EPROTO);
    CHECK(test_secs_since(t0) < 2.0);
    if (strstr(tfs_errdetail(), "over 16384 bytes") == NULL)
        TEST_FAIL_("detail: %s", tfs_errdetail());
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n),
             TFS_EPROTO);
    CHECK(test_secs_since(t0) < 2.0);
    read_ok(st, "k", obj, 0, 100);
    CHECK_EQ(fake_requests(), 3);
    CHECK_EQ(fake_accepts(), 3);        /* each bad one dropped */
    for (int i = 0; i < 3; i++)
        check_raw(i);
    tfs_store_close(st);
    fake_stop();
    free(fits);
    free(over);
    free(big);
    free(obj);
}

/* ---- who sends ---- */

/* 14: raw_get=0: the same read through curl. */
TEST(raw_get_off)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 14);
    struct tfs_store *st;

    fake_start();
    st = fake_store("raw_get=0");
    fake_206(AFTER_KEEP, 997, 200, obj, OBJ_LEN, 1000, 100000, "");
    read_ok(st, "k", obj, 1000, 100000);
    CHECK_EQ(fake_requests(), 1);
    check_get(0, "k", 1000, 100999);
    if (!req_by_curl(0))
        TEST_FAIL_("raw_get=0, yet not curl's:\n%s", fake_req(0));
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* A proxy in the environment leaves GETs to curl (which would use it),
   unless raw_get=1 says otherwise. */
TEST(proxy_env_leaves_curl)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 17);
    struct tfs_store *st;
    struct tfs_store *st2;

    fake_start();
    /* a proxy nothing listens at; the store decides when it opens */
    setenv("http_proxy", "http://127.0.0.1:9", 1);
    st = fake_store(NULL);
    st2 = fake_store("raw_get=1");
    unsetenv("http_proxy");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 1000, "");
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 0, 1000, "");
    read_ok(st, "k", obj, 0, 1000);
    read_ok(st2, "k", obj, 0, 1000);
    CHECK_EQ(fake_requests(), 2);
    if (!req_by_curl(0))
        TEST_FAIL_("a proxy is set, yet not curl's:\n%s", fake_req(0));
    check_raw(1);
    tfs_store_close(st);
    tfs_store_close(st2);
    fake_stop();
    free(obj);
}

/* Requests signed as usual go the same way, their signed headers
   sent as they are. */
TEST(signed_request)
{
    static const char *const names[] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    };
    unsigned char *obj = test_pattern(OBJ_LEN, 18);
    char *saved[3];
    struct tfs_store *st = NULL;
    char opts[256];
    int rc;

    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);

        saved[i] = v != NULL ? strdup(v) : NULL;
    }
    fake_start();
    setenv(names[0], "AKIDRAWTEST", 1);
    setenv(names[1], "raw-test-secret-not-a-real-one", 1);
    unsetenv(names[2]);
    snprintf(opts, sizeof(opts), "endpoint=http://127.0.0.1:%d&path_style=1"
             "&timeout_ms=5000&region=us-east-1", fk.port);
    rc = tfs_store_open(&st, "s3://bkt/pre", opts);
    for (int i = 0; i < 3; i++) {      /* read when it opened */
        if (saved[i] != NULL)
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
    CHECK_OK(rc);
    fake_206(AFTER_KEEP, 0, 0, obj, OBJ_LEN, 10, 1000, "");
    read_ok(st, "k", obj, 10, 1000);
    CHECK_EQ(fake_requests(), 1);
    check_get(0, "k", 10, 1009);
    check_raw(0);
    CHECK(strcasestr(fake_req(0), "\r\nauthorization: AWS4-HMAC-SHA256 "
                     "Credential=AKIDRAWTEST/") != NULL);
    CHECK(strcasestr(fake_req(0), "\r\nx-amz-date: ") != NULL);
    CHECK(req_has(0, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb9"
                  "2427ae41e4649b934ca495991b7852b855"));
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

/* Nothing listens: -ECONNREFUSED at once. */
TEST(refused)
{
    struct tfs_store *st;
    unsigned char buf[100];
    uint64_t t0;
    size_t n = 0;

    fake_start();
    st = fake_store(NULL);
    fake_stop();                        /* its port is closed now */
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "k", buf, sizeof(buf), 0, NULL, &n),
             -ECONNREFUSED);
    CHECK(test_secs_since(t0) < 2.0);
    CHECK(strstr(tfs_errdetail(), "127.0.0.1") != NULL);
    tfs_store_close(st);
}

struct reader {
    struct tfs_store    *st;
    const unsigned char *obj;
    uint64_t             seed;
    int                  reads;
    int                  failed;        /* reads that failed */
    int                  wrong;         /* reads with wrong bytes */
    int                  first_rc;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    unsigned char *buf = malloc(40000);
    uint64_t x = r->seed;

    for (int i = 0; i < r->reads && buf != NULL; i++) {
        size_t off;
        size_t len;
        size_t n = 0;
        int rc;

        x = x * 6364136223846793005u + 1442695040888963407u;
        off = (size_t)(x >> 33) % (OBJ_LEN - 1);
        len = 1 + (size_t)(x >> 13) % TFS_MIN((size_t)40000, OBJ_LEN - off);
        rc = tfs_store_read(r->st, "k", buf, len, off, NULL, &n);
        if (rc < 0) {
            if (r->failed++ == 0)
                r->first_rc = rc;
        } else if (n != len || memcmp(buf, r->obj + off, len) != 0) {
            r->wrong++;
        }
    }
    free(buf);
    return NULL;
}

/* Four threads on a pool of four: each handle its own socket, kept. */
TEST(concurrent_readers)
{
    unsigned char *obj = test_pattern(OBJ_LEN, 19);
    struct reader r[4];
    pthread_t tid[4];
    struct tfs_store *st;
    int total = 0;

    fake_start();
    fake_serve(obj, OBJ_LEN);
    st = fake_store("max_conns=4");
    for (int i = 0; i < 4; i++) {
        r[i] = (struct reader){.st = st, .obj = obj, .seed = 100 + i,
                               .reads = 25};
        CHECK(pthread_create(&tid[i], NULL, reader_main, &r[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(tid[i], NULL);     /* all, before any CHECK */
    for (int i = 0; i < 4; i++) {
        if (r[i].failed > 0)
            TEST_FAIL_("reader %d: %d reads failed, the first %d (%s)", i,
                       r[i].failed, r[i].first_rc,
                       tfs_strerror(r[i].first_rc));
        CHECK_EQ(r[i].wrong, 0);
        total += r[i].reads;
    }
    CHECK_EQ(fake_requests(), total);
    CHECK(fake_accepts() >= 1 && fake_accepts() <= 4);
    for (int i = 0; i < TFS_MIN(total, FAKE_MAX_REQ); i++)
        check_raw(i);
    printf("# %d reads on %d connections\n", total, fake_accepts());
    tfs_store_close(st);
    fake_stop();
    free(obj);
}

TESTS(T(pieces_206), T(scattered_landing), T(keep_alive),
      T(kept_conn_closed_by_server), T(kept_conn_reset),
      T(connection_close_header), T(continue_then_206),
      T(whole_object_prefix), T(close_mid_body), T(closed_before_answer),
      T(stall_times_out), T(chunked_goes_to_curl), T(not_found_keeps_conn),
      T(slow_down), T(malformed_status), T(longer_than_range),
      T(head_too_long), T(raw_get_off), T(proxy_env_leaves_curl),
      T(signed_request), T(refused), T(concurrent_readers));

int main(int argc, char **argv)
{
    static const char *const proxies[] = {
        "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
        "NO_PROXY",
    };
    int rc;

    /* the store's defaults as they are without a proxy: these tests
       count the connections they make */
    for (size_t i = 0; i < TFS_ARRAY_LEN(proxies); i++)
        unsetenv(proxies[i]);
    rc = test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
    fake_stop();
    return rc;
}
