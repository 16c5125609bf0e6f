/* SPDX-License-Identifier: MIT */
/*
 * One S3 request end to end, over a pool of keep-alive curl handles.
 *
 * Pool: a mutex-guarded free list of easy handles, created on demand up
 * to max_conns; a thread takes one for one request and gives it back, so
 * each handle (and its kept-alive connection) belongs to one thread at a
 * time.  The handles share DNS answers and TLS sessions (CURLSH).  Options
 * that never change are set when a handle is made; each request sets the
 * rest, so the download buffer and connection survive between requests.
 *
 * Request: the canonical URI and query built here are both signed (with
 * s3_sign.c) and sent.  Response headers are parsed as they arrive; a 2xx
 * body goes straight into the caller's buffer (GET) or into a capped
 * buffer (XML), an error body into a small capped buffer for its <Error>.
 *
 * Endpoints: each request goes to the endpoint the balancer picks
 * (s3_balance.c) and reports back how it went there: a network error, a
 * timeout or a 5xx counts against the endpoint, any other answer for it.
 * The health check of an ejected endpoint (tfs_s3_probe) is a request
 * like the others, sent to that endpoint alone.
 *
 * Errors are mapped here, once: curl codes and HTTP status/S3 codes to
 * our error space, with the detail naming the S3 code, method and path.
 * Nothing here ever logs or reports a header value we sent: the
 * Authorization header, the secret and the session token stay inside.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

#include "store/curl.h"
#include "store/s3_int.h"
#include "tierfs/log.h"

#define HTTP_BUFFER_SIZE (256L << 10)   /* curl download buffer */
#define HTTP_UPLOAD_BUFFER_SIZE (256L << 10)

struct s3_conn {
    CURL           *curl;
    struct s3_conn *next;               /* in the free list */
    struct tfs_buf  path;               /* canonical URI of this request */
    struct tfs_buf  query;              /* canonical query */
    struct tfs_buf  url;
    struct tfs_buf  line;               /* one header line being built */
    struct tfs_buf  scratch;            /* canonical request, for signing */
    struct tfs_buf  auth;               /* Authorization value */
    char            errbuf[CURL_ERROR_SIZE];
    int             raw_fd;             /* our own socket, or -1 */
    unsigned        raw_ep;             /* the endpoint it talks to */
    struct tfs_buf  raw_req;            /* the request as sent */
    char           *raw_head;           /* S3_HEAD_MAX bytes, or NULL */
};

/* The state of one transfer, shared with the curl callbacks. */
struct s3_xfer {
    const struct s3_req *req;
    struct s3_resp      *resp;
    struct tfs_buf       errbody;       /* a non-2xx body, capped */
    uint64_t             sent;          /* body bytes handed to curl */
    uint64_t             recvd;         /* body bytes taken from curl */
    uint64_t             bw;            /* conn_bw: bytes/s, 0 = any */
    uint64_t             t0_ns;         /* start, for the pacing */
    int                  cb_rc;         /* error raised in a callback */
    bool                 full;          /* dst_prefix: stopped on purpose */
};

/* ---- process-wide curl setup ---- */

static pthread_once_t http_once = PTHREAD_ONCE_INIT;
static CURLcode http_global_rc = CURLE_FAILED_INIT;

static void http_global_init(void)
{
    http_global_rc = curl_global_init_mem(CURL_GLOBAL_DEFAULT, tfs_malloc,
                                          tfs_free, tfs_realloc, tfs_strdup,
                                          tfs_calloc);
}

int tfs_curl_global_init(void)
{
    pthread_once(&http_once, http_global_init);
    if (http_global_rc != CURLE_OK)
        return tfs_err(-ENOMEM, "curl_global_init failed: %s",
                       curl_easy_strerror(http_global_rc));
    return 0;
}

/* ---- the pool ---- */

static pthread_mutex_t *http_share_mutex(struct s3_pool *pool,
                                         curl_lock_data data)
{
    switch (data) {
    case CURL_LOCK_DATA_DNS:
        return &pool->share_lock[0];
    case CURL_LOCK_DATA_SSL_SESSION:
        return &pool->share_lock[1];
    case CURL_LOCK_DATA_SHARE:
        return &pool->share_lock[2];
    default:
        return &pool->share_lock[3];
    }
}

static void http_share_lock(CURL *h, curl_lock_data data,
                            curl_lock_access access, void *arg)
{
    (void)h;
    (void)access;
    pthread_mutex_lock(http_share_mutex(arg, data));
}

static void http_share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    (void)h;
    pthread_mutex_unlock(http_share_mutex(arg, data));
}

int tfs_s3_pool_init(struct s3_priv *p, unsigned max_conns)
{
    struct s3_pool *pool = &p->pool;
    pthread_condattr_t ca;
    CURLSH *sh;

    if (tfs_curl_global_init() < 0)
        return -ENOMEM;
    sh = curl_share_init();
    if (sh == NULL)
        return -ENOMEM;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < TFS_ARRAY_LEN(pool->share_lock); i++)
        pthread_mutex_init(&pool->share_lock[i], NULL);
    curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, http_share_lock);
    curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, http_share_unlock);
    curl_share_setopt(sh, CURLSHOPT_USERDATA, pool);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    pool->share = sh;
    pool->max_conns = max_conns;
    return 0;
}

static void http_raw_close(struct s3_conn *c);

static void http_conn_destroy(struct s3_conn *c)
{
    http_raw_close(c);
    tfs_buf_cleanup(&c->raw_req);
    tfs_free(c->raw_head);
    curl_easy_cleanup(c->curl);
    tfs_buf_cleanup(&c->path);
    tfs_buf_cleanup(&c->query);
    tfs_buf_cleanup(&c->url);
    tfs_buf_cleanup(&c->line);
    tfs_buf_cleanup(&c->scratch);
    tfs_buf_cleanup(&c->auth);
    tfs_free(c);
}

void tfs_s3_pool_cleanup(struct s3_priv *p)
{
    struct s3_pool *pool = &p->pool;

    if (pool->share == NULL)
        return;                         /* never set up */
    while (pool->free != NULL) {
        struct s3_conn *c = pool->free;

        pool->free = c->next;
        http_conn_destroy(c);
    }
    curl_share_cleanup(pool->share);
    pool->share = NULL;
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->lock);
    for (size_t i = 0; i < TFS_ARRAY_LEN(pool->share_lock); i++)
        pthread_mutex_destroy(&pool->share_lock[i]);
}

static size_t http_on_header(char *b, size_t size, size_t n, void *arg);
static size_t http_on_body(char *b, size_t size, size_t n, void *arg);
static size_t http_on_read(char *b, size_t size, size_t n, void *arg);
static int http_on_seek(void *arg, curl_off_t off, int origin);

/* The options every request of this store shares. */
static void http_conn_setup(struct s3_priv *p, struct s3_conn *c)
{
    CURL *h = c->curl;

    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* "a/../b" is a key like any other: never squash dot segments */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, HTTP_BUFFER_SIZE);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, HTTP_UPLOAD_BUFFER_SIZE);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(h, CURLOPT_SHARE, p->pool.share);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, http_on_header);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_on_body);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, http_on_read);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, http_on_seek);
    /* a kept-alive connection to each endpoint (curl keeps 5) */
    curl_easy_setopt(h, CURLOPT_MAXCONNECTS, (long)TFS_MAX(5u, p->bal.n));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, p->tls_verify ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, p->tls_verify ? 2L : 0L);
    if (p->ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, p->ca_file);
}

static struct s3_conn *http_conn_create(struct s3_priv *p)
{
    struct s3_conn *c = tfs_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->curl = curl_easy_init();
    if (c->curl == NULL) {
        tfs_free(c);
        return NULL;
    }
    tfs_buf_init(&c->path, 0);
    tfs_buf_init(&c->query, 0);
    tfs_buf_init(&c->url, 0);
    tfs_buf_init(&c->line, 0);
    tfs_buf_init(&c->scratch, 0);
    tfs_buf_init(&c->auth, 0);
    tfs_buf_init(&c->raw_req, 0);
    c->raw_fd = -1;
    http_conn_setup(p, c);
    return c;
}

/* Wait until deadline_ns (monotonic) for a handle to come back. */
static int http_pool_wait(struct s3_pool *pool, uint64_t deadline_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(deadline_ns / 1000000000u),
        .tv_nsec = (long)(deadline_ns % 1000000000u),
    };

    return pthread_cond_timedwait(&pool->cond, &pool->lock, &ts);
}

/* Take a handle: an idle one, a new one, or wait up to wait_ms. */
static int http_pool_get(struct s3_priv *p, uint64_t wait_ms,
                         struct s3_conn **out)
{
    struct s3_pool *pool = &p->pool;
    uint64_t deadline_ns = tfs_now_ns() + wait_ms * 1000000u;
    struct s3_conn *c = NULL;
    bool create = false;
    int wrc = 0;

    pthread_mutex_lock(&pool->lock);
    if (pool->free == NULL && pool->n_conns >= pool->max_conns) {
        pthread_mutex_unlock(&pool->lock);
        tfs_waiting();                  /* the caller's hook, unlocked */
        pthread_mutex_lock(&pool->lock);
    }
    while (pool->free == NULL && pool->n_conns >= pool->max_conns &&
           wrc == 0)
        wrc = http_pool_wait(pool, deadline_ns);
    if (pool->free != NULL) {
        c = pool->free;
        pool->free = c->next;
    } else if (pool->n_conns < pool->max_conns) {
        pool->n_conns++;
        create = true;
    }
    pthread_mutex_unlock(&pool->lock);
    if (create)
        c = http_conn_create(p);
    if (create && c == NULL) {
        pthread_mutex_lock(&pool->lock);
        pool->n_conns--;
        pthread_cond_signal(&pool->cond);
        pthread_mutex_unlock(&pool->lock);
        return -ENOMEM;
    }
    if (c == NULL)
        return tfs_err(-ETIMEDOUT, "all %u S3 connections stayed busy",
                       pool->max_conns);
    *out = c;
    return 0;
}

static void http_pool_put(struct s3_priv *p, struct s3_conn *c)
{
    struct s3_pool *pool = &p->pool;

    pthread_mutex_lock(&pool->lock);
    c->next = pool->free;
    pool->free = c;
    pthread_cond_signal(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
}

/* ---- response headers ---- */

static const char *const http_months[12] = {
    "Jan", "Feb", "Mar", "Apr", "May", "Jun",
    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
};

int tfs_s3_parse_http_date(const char *s, int64_t *out_ns)
{
    struct tm tm = {0};
    char mon[4];
    int n = 0;

    if (sscanf(s, "%*3[A-Za-z], %2d %3s %4d %2d:%2d:%2d GMT%n", &tm.tm_mday,
               mon, &tm.tm_year, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
               &n) != 6 || n == 0)
        return TFS_EPROTO;
    tm.tm_mon = -1;
    for (int i = 0; i < 12; i++) {
        if (strcmp(mon, http_months[i]) == 0)
            tm.tm_mon = i;
    }
    /* int64 nanoseconds end in 2262: refuse years we cannot hold */
    if (tm.tm_mon < 0 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60 ||
        tm.tm_year < 1900 || tm.tm_year > 2200)
        return TFS_EPROTO;
    tm.tm_year -= 1900;
    *out_ns = (int64_t)timegm(&tm) * 1000000000;
    return 0;
}

/* "bytes F-L/T", T a number or '*'; false when malformed. */
static bool http_parse_range(const char *v, struct s3_resp *r)
{
    char *end;

    if (strncasecmp(v, "bytes ", 6) != 0 || v[6] < '0' || v[6] > '9')
        return false;
    r->range_first = strtoull(v + 6, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return false;
    r->range_last = strtoull(end + 1, &end, 10);
    if (*end != '/' || r->range_last < r->range_first)
        return false;
    if (strcmp(end + 1, "*") == 0) {
        r->range_total = UINT64_MAX;
        return true;
    }
    r->range_total = strtoull(end + 1, &end, 10);
    return *end == '\0';
}

static void http_set_etag(struct s3_resp *r, const char *v)
{
    size_t len = strlen(v);

    if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
        v++;
        len -= 2;
    }
    if (len >= sizeof(r->etag))
        len = 0;                        /* not an S3 ETag: report none */
    memcpy(r->etag, v, len);
    r->etag[len] = '\0';
}

/* One header "name: value" (value trimmed) into r. */
static void http_header(struct s3_resp *r, const char *name, const char *v)
{
    char *end;

    if (strcasecmp(name, "content-length") == 0) {
        r->length = strtoull(v, &end, 10);
        r->has_length = *v >= '0' && *v <= '9' && *end == '\0';
    } else if (strcasecmp(name, "content-range") == 0) {
        r->has_range = http_parse_range(v, r);
    } else if (strcasecmp(name, "etag") == 0) {
        http_set_etag(r, v);
    } else if ((strcasecmp(name, "x-amz-server-side-encryption") == 0 &&
                strncasecmp(v, "aws:kms", 7) == 0) ||
               strcasecmp(name, "x-amz-server-side-encryption-customer-"
                          "algorithm") == 0) {
        r->etag_not_md5 = true;         /* its ETag is no MD5 */
    } else if (strcasecmp(name, "last-modified") == 0) {
        if (tfs_s3_parse_http_date(v, &r->mtime_ns) < 0)
            r->mtime_ns = 0;
    } else if (strcasecmp(name, "date") == 0) {
        if (tfs_s3_parse_http_date(v, &r->date_ns) < 0)
            r->date_ns = 0;
    }
}

/* A status line starts a new response (after a 1xx): forget the last. */
static void http_status_line(struct s3_resp *r, const char *line)
{
    const char *sp = strchr(line, ' ');

    memset(r, 0, offsetof(struct s3_resp, err));
    r->status = sp != NULL ? strtol(sp + 1, NULL, 10) : 0;
}

/* [b, e) without spaces and tabs at either end into out (max bytes with
   the NUL); false when it does not fit. */
static bool http_trim_copy(const char *b, const char *e, char *out,
                           size_t max)
{
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if ((size_t)(e - b) >= max)
        return false;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = '\0';
    return true;
}

/* One header line [b, e) into name and v, trimmed: 1, 0 when either is
   too long for us (no header we parse is), -1 when it is no header. */
static int http_field_split(const char *b, const char *e, char *name,
                            size_t nmax, char *v, size_t vmax)
{
    const char *colon = memchr(b, ':', (size_t)(e - b));

    if (colon == NULL || colon == b || *b == ' ' || *b == '\t')
        return -1;
    return http_trim_copy(b, colon, name, nmax) &&
           http_trim_copy(colon + 1, e, v, vmax);
}

static size_t http_on_header(char *b, size_t size, size_t n, void *arg)
{
    struct s3_xfer *x = arg;
    size_t len = size * n;
    char name[64];
    char v[1024];

    while (len > 0 && (b[len - 1] == '\r' || b[len - 1] == '\n'))
        len--;
    if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
        char line[64];

        len = TFS_MIN(len, sizeof(line) - 1);
        memcpy(line, b, len);
        line[len] = '\0';
        http_status_line(x->resp, line);
    } else if (http_field_split(b, b + len, name, sizeof(name), v,
                                sizeof(v)) > 0) {
        http_header(x->resp, name, v);
    }                                   /* curl judged the rest */
    return size * n;
}

/* ---- response heads we read ourselves (plain-HTTP GETs) ---- */

static bool http_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* "HTTP/1.x DDD[ reason]" (without its CRLF, n bytes) into resp. */
static int http_head_status(const char *b, size_t n, struct s3_resp *resp)
{
    char line[64];

    if (n < 12 || memcmp(b, "HTTP/1.", 7) != 0 || !http_digit(b[7]) ||
        b[8] != ' ' || !http_digit(b[9]) || !http_digit(b[10]) ||
        !http_digit(b[11]) || (n > 12 && b[12] != ' ') || b[9] == '0')
        return tfs_err(TFS_EPROTO, "S3 sent a malformed status line");
    memcpy(line, b, 12);
    line[12] = '\0';
    http_status_line(resp, line);
    return 0;
}

/* One header line [b, e) of a head into resp and h. */
static int http_head_field(const char *b, const char *e, struct s3_resp *resp,
                           struct s3_head *h)
{
    char name[64];
    char v[1024];
    int rc = http_field_split(b, e, name, sizeof(name), v, sizeof(v));

    if (rc < 0)
        return tfs_err(TFS_EPROTO, "S3 sent a malformed header line");
    if (rc == 0)
        return 0;                       /* no header we parse is that long */
    if (strcasecmp(name, "transfer-encoding") == 0) {
        h->chunked |= strcasecmp(v, "identity") != 0;
    } else if (strcasecmp(name, "connection") == 0) {
        h->close |= strcasestr(v, "close") != NULL;
    } else if (strcasecmp(name, "content-length") == 0) {
        uint64_t len = 0;
        size_t i = 0;

        for (; http_digit(v[i]) && i < 19; i++)
            len = len * 10 + (uint64_t)(v[i] - '0');
        if (i == 0 || v[i] != '\0' ||
            (resp->has_length && resp->length != len))
            return tfs_err(TFS_EPROTO, "S3 sent a bad Content-Length "
                           "('%.40s')", v);
        resp->length = len;
        resp->has_length = true;
    } else {
        http_header(resp, name, v);
    }
    return 0;
}

int tfs_s3_head_parse(const char *b, size_t n, struct s3_resp *resp,
                      struct s3_head *h)
{
    const char *end = memmem(b, TFS_MIN(n, (size_t)S3_HEAD_MAX), "\r\n\r\n",
                             4);
    const char *p;
    const char *eol;
    int rc;

    if (end == NULL)
        return n >= S3_HEAD_MAX
                   ? tfs_err(TFS_EPROTO, "S3 sent a response head over %u "
                             "bytes", S3_HEAD_MAX)
                   : 0;
    *h = (struct s3_head){.len = (size_t)(end - b) + 4};
    if (memchr(b, '\0', h->len) != NULL)
        return tfs_err(TFS_EPROTO, "S3 sent a NUL in a response head");
    eol = memmem(b, h->len, "\r\n", 2);
    rc = http_head_status(b, (size_t)(eol - b), resp);
    for (p = eol + 2; rc == 0 && p < end + 2; p = eol + 2) {
        eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
        rc = http_head_field(p, eol, resp, h);
    }
    return rc < 0 ? rc : 1;
}

/* ---- bodies ---- */

/*
 * The conn_bw cap: wait until moved bytes are due at bw since the start.
 * Done here rather than with curl's MAX_RECV_SPEED, which curl 7.88
 * applies only between bursts of up to 100 reads of its buffer.
 */
static void http_pace(const struct s3_xfer *x, uint64_t moved)
{
    uint64_t due;
    uint64_t now;

    if (x->bw == 0)
        return;
    due = x->t0_ns + (uint64_t)((double)moved * 1e9 / (double)x->bw);
    now = tfs_now_ns();
    if (due > now)
        tfs_sleep_ns(due - now);
}

/* The pieces of req's destination for its bytes [at, at + len): at most
   max of them, as far as they go. */
static int http_dst_slice(const struct s3_req *req, size_t at, size_t len,
                          struct iovec *v, int max)
{
    int n = 0;

    if (req->dst != NULL) {
        v[0] = (struct iovec){(char *)req->dst + at, len};
        return 1;
    }
    for (int i = 0; i < req->dst_iovcnt && len > 0 && n < max; i++) {
        size_t seg = req->dst_iov[i].iov_len;
        size_t k;

        if (at >= seg) {
            at -= seg;
            continue;
        }
        k = TFS_MIN(len, seg - at);
        v[n++] = (struct iovec){(char *)req->dst_iov[i].iov_base + at, k};
        len -= k;
        at = 0;
    }
    return n;
}

/* len bytes of the body at its offset at, into dst or across dst_iov;
   then the caller is told (req->land). */
static void http_land(const struct s3_req *req, size_t at, const char *b,
                      size_t len)
{
    size_t done = 0;

    while (done < len) {
        struct iovec v[16];
        int n = http_dst_slice(req, at + done, len - done, v, 16);

        if (n == 0)
            break;                      /* past the destination: never */
        for (int i = 0; i < n; i++) {
            memcpy(v[i].iov_base, b + done, v[i].iov_len);
            done += v[i].iov_len;
        }
    }
    if (req->land != NULL && len > 0)
        req->land->fn(req->land->arg, at, len);
}

/* A 2xx body for the caller's buffer; 0 stops the transfer. */
static size_t http_body_dst(struct s3_xfer *x, const char *b, size_t len)
{
    const struct s3_req *req = x->req;
    size_t room = req->dst_len - x->resp->nbody;

    if (len > room && req->dst_prefix) {
        http_land(req, x->resp->nbody, b, room);
        x->resp->nbody += room;
        x->full = true;                 /* we have all we asked for */
        return 0;
    }
    if (len > room) {
        x->cb_rc = tfs_err(TFS_EPROTO, "S3 sent more bytes than the range "
                           "asked for");
        return 0;
    }
    http_land(req, x->resp->nbody, b, len);
    x->resp->nbody += len;
    return len;
}

static size_t http_on_body(char *b, size_t size, size_t n, void *arg)
{
    struct s3_xfer *x = arg;
    size_t len = size * n;
    int rc;

    if (x->resp->status < 200 || x->resp->status > 299) {
        size_t keep = TFS_MIN(len, S3_ERRBODY_MAX - x->errbody.len);
        if (keep > 0 && tfs_buf_append(&x->errbody, b, keep) < 0)
            tfs_buf_reset(&x->errbody); /* no memory: lose the detail */
        return len;
    }
    x->recvd += len;
    http_pace(x, x->recvd);
    if (x->req->dst != NULL || x->req->dst_iov != NULL)
        return http_body_dst(x, b, len);
    if (x->req->xml == NULL)
        return len;
    rc = tfs_buf_append(x->req->xml, b, len);
    if (rc < 0) {
        x->cb_rc = rc == TFS_ETOOBIG
                       ? tfs_err(rc, "S3 response body over %zu bytes",
                                 x->req->xml->max)
                       : rc;
        return 0;
    }
    return len;
}

/* Upload: fill curl's buffer straight from the source. */
static size_t http_on_read(char *b, size_t size, size_t n, void *arg)
{
    struct s3_xfer *x = arg;
    const struct s3_body *body = &x->req->body;
    size_t len = (size_t)TFS_MIN((uint64_t)(size * n),
                                 body->len - x->sent);
    int rc;

    if (len == 0)
        return 0;
    rc = tfs_source_read(body->src, b, len, body->off + x->sent);
    if (rc < 0) {
        x->cb_rc = rc;                  /* the detail is set */
        return CURL_READFUNC_ABORT;
    }
    x->sent += len;
    http_pace(x, x->sent);
    return len;
}

/* curl rewinds a body to resend it on a fresh connection. */
static int http_on_seek(void *arg, curl_off_t off, int origin)
{
    struct s3_xfer *x = arg;

    if (origin != SEEK_SET || off < 0 ||
        (uint64_t)off > x->req->body.len)
        return CURL_SEEKFUNC_CANTSEEK;
    x->sent = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

/* ---- error mapping ---- */

static int http_map_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_FAIL_REWIND:
        return -ECONNRESET;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        return -EACCES;                 /* we do not trust the server */
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CIPHER:
    case CURLE_USE_SSL_FAILED:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return -EPROTO;                 /* no common protocol */
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_URL_MALFORMAT:
        return -EINVAL;
    default:
        return TFS_ENETWORK;
    }
}

/* Errors told by their S3 code, whatever the status. */
static int http_map_code(const char *code)
{
    static const struct {
        const char *code;
        int rc;
    } codes[] = {
        {"SlowDown", -EAGAIN},
        {"ServiceUnavailable", -EAGAIN},
        {"RequestTimeout", -ETIMEDOUT},
        {"RequestTimeTooSkewed", -EACCES},
        {"ExpiredToken", -EACCES},
        {"InvalidToken", -EACCES},
        {"TokenRefreshRequired", -EACCES},
        {"AuthorizationHeaderMalformed", -EACCES},
        {"PreconditionFailed", TFS_ECHANGED},
        {"InternalError", TFS_ESERVER},
        {"OperationAborted", -EAGAIN},
        {"NotImplemented", -ENOTSUP},
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(codes); i++) {
        if (strcmp(code, codes[i].code) == 0)
            return codes[i].rc;
    }
    return 0;
}

static int http_map_http(long status, const char **name)
{
    static const struct {
        long status;
        const char *name;
        int rc;
    } table[] = {
        {400, "BadRequest", -EINVAL},
        {403, "Forbidden", -EACCES},
        {404, "NotFound", -ENOENT},
        {405, "MethodNotAllowed", -ENOTSUP},
        {409, "Conflict", -EEXIST},
        {412, "PreconditionFailed", TFS_ECHANGED},
        {416, "InvalidRange", TFS_EHTTP},
        {429, "TooManyRequests", -EAGAIN},
        {500, "InternalError", TFS_ESERVER},
        {501, "NotImplemented", -ENOTSUP},
        {502, "BadGateway", TFS_ESERVER},
        {503, "ServiceUnavailable", -EAGAIN},
        {504, "GatewayTimeout", TFS_ESERVER},
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(table); i++) {
        if (table[i].status == status) {
            *name = table[i].name;
            return table[i].rc;
        }
    }
    *name = "UnexpectedStatus";
    /* an <Error> inside a 200 (complete, copy) is the server's failure */
    return status >= 200 && status <= 299 ? TFS_ESERVER : TFS_EHTTP;
}

int tfs_s3_map_status(const struct s3_priv *p, const char *method,
                      const char *key, long status,
                      const struct s3_error *err)
{
    const char *code = err != NULL ? err->code : "";
    const char *msg = err != NULL ? err->message : "";
    const char *name;
    int rc = http_map_http(status, &name);
    int by_code = code[0] != '\0' ? http_map_code(code) : 0;

    if (by_code != 0)
        rc = by_code;
    return tfs_err(rc, "S3 %s%s%s (%s /%s%s%s, HTTP %ld)",
                   code[0] ? code : name, msg[0] ? ": " : "", msg, method,
                   p->bucket, key ? "/" : "", key ? key : "", status);
}

/* Set the detail of a failed transfer: the curl text, method and URL. */
static int http_fail_curl(const struct s3_ep *e, struct s3_conn *c,
                          const struct s3_req *req, CURLcode cc)
{
    const char *text = c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc);

    return tfs_err(http_map_curl(cc), "%s (%s %s%s)", text, req->method,
                   e->base_url, tfs_buf_str(&c->path));
}

/* ---- building and sending ---- */

int tfs_s3_req_hdr(struct s3_req *req, const char *name, const char *value)
{
    if (req->n_hdrs == S3_MAX_HDRS)
        return -EINVAL;
    req->hdrs[req->n_hdrs].name = name;
    req->hdrs[req->n_hdrs].value = value;
    req->n_hdrs++;
    return 0;
}

/* The canonical URI, query and URL of req at e into c's buffers. */
static int http_build_url(struct s3_priv *p, const struct s3_ep *e,
                          struct s3_conn *c, const struct s3_req *req)
{
    int rc;

    tfs_buf_reset(&c->path);
    tfs_buf_reset(&c->query);
    tfs_buf_reset(&c->url);
    rc = tfs_buf_puts(&c->path, e->base_path);
    if (rc == 0 && p->path_style)
        rc = tfs_buf_printf(&c->path, "/%s", p->bucket);
    if (rc == 0 && (req->key != NULL || !p->path_style))
        rc = tfs_buf_puts(&c->path, "/");
    if (rc == 0 && req->key != NULL)
        rc = tfs_pct_encode(&c->path, req->key, strlen(req->key), true);
    if (rc == 0)
        rc = tfs_s3_query(&c->query, req->query, req->n_query);
    if (rc == 0)
        rc = tfs_buf_printf(&c->url, "%s%s%s%s", e->base_url,
                            tfs_buf_str(&c->path), c->query.len ? "?" : "",
                            tfs_buf_str(&c->query));
    return rc;
}

/* Append "name: value" to *list (curl copies the line). */
static int http_add(struct s3_conn *c, struct curl_slist **list,
                    const char *name, const char *value)
{
    struct curl_slist *l;
    int rc;

    tfs_buf_reset(&c->line);
    rc = tfs_buf_printf(&c->line, "%s: %s", name, value);
    if (rc < 0)
        return rc;
    l = curl_slist_append(*list, tfs_buf_str(&c->line));
    if (l == NULL)
        return -ENOMEM;
    *list = l;
    return 0;
}

/* Sign req: fills the signed headers into *list, then Authorization. */
static int http_sign(struct s3_priv *p, const struct s3_ep *e,
                     struct s3_conn *c, const struct s3_req *req,
                     const char *payload_hash, struct curl_slist **list)
{
    struct s3_hdr h[S3_MAX_HDRS + 4];
    struct s3_sign_in in = {
        .method = req->method,
        .uri = tfs_buf_str(&c->path),
        .query = tfs_buf_str(&c->query),
        .hdrs = h,
        .payload_hash = payload_hash,
        .region = p->region,
        .access_key = p->access_key,
        .secret_key = p->secret_key,
    };
    char date[17];
    size_t n = 0;
    int rc = 0;

    tfs_s3_amz_date(time(NULL), date);
    in.amz_date = date;
    h[n++] = (struct s3_hdr){"host", e->host};
    h[n++] = (struct s3_hdr){"x-amz-content-sha256", payload_hash};
    h[n++] = (struct s3_hdr){"x-amz-date", date};
    if (p->session_token != NULL)
        h[n++] = (struct s3_hdr){"x-amz-security-token", p->session_token};
    for (size_t i = 0; i < req->n_hdrs; i++)
        h[n++] = req->hdrs[i];
    in.n_hdrs = n;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = http_add(c, list, h[i].name, h[i].value);
    if (rc < 0)
        return rc;
    tfs_buf_reset(&c->auth);
    rc = tfs_s3_sign(&in, &p->keys, &c->scratch, &c->auth);
    if (rc == 0)
        rc = http_add(c, list, "Authorization", tfs_buf_str(&c->auth));
    tfs_buf_reset(&c->auth);            /* no copy lingers past the call */
    return rc;
}

/* All request headers: signed ones (or plain ones when anonymous). */
static int http_headers(struct s3_priv *p, const struct s3_ep *e,
                        struct s3_conn *c, const struct s3_req *req,
                        struct curl_slist **list)
{
    char hash[65];
    const char *payload = S3_EMPTY_SHA256;
    int rc = 0;

    if (req->body.mem != NULL) {
        tfs_s3_sha256_hex(req->body.mem, req->body.len, hash);
        payload = hash;
    } else if (req->body.src != NULL) {
        payload = S3_UNSIGNED_PAYLOAD;
    }
    if (p->anonymous) {
        rc = http_add(c, list, "Host", e->host);
        for (size_t i = 0; i < req->n_hdrs && rc == 0; i++)
            rc = http_add(c, list, req->hdrs[i].name, req->hdrs[i].value);
    } else {
        rc = http_sign(p, e, c, req, payload, list);
    }
    if (rc == 0)
        rc = http_add(c, list, "Expect", "");
    if (rc == 0 && strcmp(req->method, "POST") == 0)
        rc = http_add(c, list, "Content-Type",
                      req->body.mem ? "application/xml" : "");
    return rc;
}

/*
 * Whether req moves a body whose time grows with its size: a PUT with
 * one, a large GET, a server-side copy (the server sends progress while
 * it copies).  These are bounded by progress, not by a total time.
 */
static bool http_is_transfer(const struct s3_req *req)
{
    if (req->body.src != NULL ||
        ((req->dst != NULL || req->dst_iov != NULL) &&
         req->dst_len > S3_SMALL_GET))
        return true;
    for (size_t i = 0; i < req->n_hdrs; i++) {
        if (strcmp(req->hdrs[i].name, "x-amz-copy-source") == 0)
            return true;
    }
    return false;
}

/* curl's stall limit: under 1 byte/s for stall_ms (whole seconds). */
static void http_set_limits(struct s3_priv *p, CURL *h, bool transfer,
                            uint64_t left_ms)
{
    uint64_t conn_ms = p->connect_timeout_ms;

    if (left_ms != 0)
        conn_ms = TFS_MIN(left_ms, conn_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)conn_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, transfer ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     transfer ? (long)((p->stall_ms + 999) / 1000) : 0L);
}

/*
 * Per-request options: method, body, timeouts, callback data.  left_ms
 * is the total limit, 0 for none (a transfer without a deadline).
 */
static void http_set_request(struct s3_priv *p, struct s3_conn *c,
                             struct s3_xfer *x, uint64_t left_ms)
{
    const struct s3_req *req = x->req;
    CURL *h = c->curl;

    curl_easy_setopt(h, CURLOPT_URL, tfs_buf_str(&c->url));
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);  /* no stale pointer */
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);  /* resets the method */
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)(req->body.src ? req->body.len : 0));
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)(req->body.mem ? req->body.len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS,
                         req->body.mem ? req->body.mem : "");
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    http_set_limits(p, h, http_is_transfer(req), left_ms);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_READDATA, x);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
}

/*
 * Whether a transfer that ended with cc counts against its endpoint:
 * it could not connect, timed out, or lost the connection (a gateway
 * killed or hung).  An error our callbacks raised is ours.
 */
static bool http_ep_failed_curl(const struct s3_xfer *x, CURLcode cc)
{
    int rc;

    if (x->cb_rc != 0 || cc == CURLE_OK ||
        (cc == CURLE_WRITE_ERROR && x->full))
        return false;
    rc = http_map_curl(cc);
    return rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -ECONNRESET ||
           rc == -EHOSTUNREACH || rc == -EPROTO || rc == TFS_ENETWORK;
}

/* A status that counts against the endpoint: a 5xx, but 501 (Not
   Implemented is the store's answer, the same from every gateway). */
static bool http_ep_failed_status(long status)
{
    return status >= 500 && status != 501;
}

/* Turn the outcome of a finished transfer into our error space. */
static int http_outcome(struct s3_priv *p, const struct s3_ep *e,
                        struct s3_conn *c, struct s3_xfer *x, CURLcode cc)
{
    const struct s3_req *req = x->req;
    struct s3_resp *resp = x->resp;
    long status = 0;

    if (x->cb_rc != 0)
        return x->cb_rc;
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && x->full))
        return http_fail_curl(e, c, req, cc);
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    resp->status = status;
    if (status >= 200 && status <= 299)
        return 0;
    if (x->errbody.len > 0)
        tfs_s3_xml_parse_error(x->errbody.p, x->errbody.len, &resp->err);
    return tfs_s3_map_status(p, req->method, req->key, status, &resp->err);
}

/* Run req on handle c at endpoint e; *res says how it went there. */
static int http_perform(struct s3_priv *p, const struct s3_ep *e,
                        struct s3_conn *c, const struct s3_req *req,
                        struct s3_resp *resp, uint64_t left_ms,
                        struct s3_ep_result *res)
{
    struct s3_xfer x = {.req = req, .resp = resp, .bw = p->conn_bw,
                        .t0_ns = tfs_now_ns()};
    struct curl_slist *hdrs = NULL;
    CURLcode cc;
    int rc;

    tfs_buf_init(&x.errbody, 0);
    c->errbuf[0] = '\0';
    rc = http_build_url(p, e, c, req);
    if (rc == 0)
        rc = http_headers(p, e, c, req, &hdrs);
    if (rc < 0)
        goto out_free;
    http_set_request(p, c, &x, left_ms);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdrs);
    tfs_waiting();
    cc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
    rc = http_outcome(p, e, c, &x, cc);
    res->failed = http_ep_failed_curl(&x, cc) ||
                  (x.cb_rc == 0 && http_ep_failed_status(resp->status));
    res->bytes_in = x.recvd;
    res->bytes_out = x.sent + (req->body.mem != NULL ? req->body.len : 0);
out_free:
    curl_slist_free_all(hdrs);
    tfs_buf_cleanup(&x.errbody);
    return rc;
}

/*
 * The total time req may still take into *ms, 0 meaning none (a transfer
 * without a deadline); false when the thread's deadline has passed.
 */
static bool http_time_left(const struct s3_priv *p, bool transfer,
                           uint64_t *ms)
{
    if (transfer && tfs_deadline_get() == 0) {
        *ms = 0;
        return true;
    }
    *ms = tfs_deadline_left_ms(transfer ? 0 : p->timeout_ms);
    return *ms > 0;
}

/* The fail_request option: an injected reset before sending, of
 * requests fail_request .. fail_request + fail_count - 1. */
static int http_injected(struct s3_priv *p, const struct s3_req *req)
{
    uint64_t nth = atomic_fetch_add(&p->n_requests, 1) + 1;

    if (p->fail_request == 0 || nth < p->fail_request ||
        nth - p->fail_request >= p->fail_count)
        return 0;
    return tfs_err(-ECONNRESET, "s3: injected reset of request %" PRIu64
                   " (fail_request; %s /%s%s%s)", nth, req->method,
                   p->bucket, req->key ? "/" : "", req->key ? req->key : "");
}

/* ---- plain-HTTP GETs into the caller's buffers ---- */

/*
 * libcurl hands a body to its write callback from its own buffer, so
 * every byte of a GET was copied twice: by the kernel into curl's
 * buffer, then by us into the block (15-17% of the daemon's CPU in a
 * cold read, docs/performance-cold.md).  A GET into a buffer over plain
 * HTTP (no TLS) goes instead on a socket of the handle's own
 * (s3_sock.c): the request is the one curl would send (the same URL and
 * signed headers, built by the same code), the head is read into a
 * small buffer and parsed here (tfs_s3_head_parse, fuzzed), and the
 * body is read with readv() straight into the destination, each piece
 * reported as it lands.  The socket is kept alive to the endpoint it
 * talks to; a kept one the server has closed is replaced once, before
 * any answer came.  A body without a Content-Length (chunked) is asked
 * again through curl.  Limits are curl's: the total (left_ms), the
 * connect timeout, and for a transfer stall_ms without progress.
 * raw_get=0, or a proxy in the environment, leaves every GET to curl.
 */
#define HTTP_RAW_CURL 1                 /* ask this one through curl */
/* At most this much a readv(): a piece is then still in the CPU's cache
   when its landing is reported (the chunk sums, cache/fetch.c). */
#define HTTP_RAW_PIECE ((size_t)256 << 10)

static void http_raw_close(struct s3_conn *c)
{
    if (c->raw_fd >= 0)
        close(c->raw_fd);
    c->raw_fd = -1;
}

static bool http_raw_ok(const struct s3_priv *p, const struct s3_ep *e,
                        const struct s3_req *req)
{
    return p->raw_get && strcmp(req->method, "GET") == 0 &&
           (req->dst != NULL || req->dst_iov != NULL) && req->dst_len > 0 &&
           strncmp(e->base_url, "http://", 7) == 0;
}

/* The request line and headers into c->raw_req (hdrs: curl's list, where
   "Name:" with no value means "send none"). */
static int http_raw_request(struct s3_conn *c, const struct curl_slist *hdrs)
{
    struct tfs_buf *b = &c->raw_req;
    int rc;

    tfs_buf_reset(b);
    rc = tfs_buf_printf(b, "GET %s%s%s HTTP/1.1\r\n", tfs_buf_str(&c->path),
                        c->query.len ? "?" : "", tfs_buf_str(&c->query));
    for (const struct curl_slist *l = hdrs; l != NULL && rc == 0;
         l = l->next) {
        const char *colon = strchr(l->data, ':');

        if (strpbrk(l->data, "\r\n") != NULL)
            return tfs_err(-EINVAL, "a line break in a request header");
        if (colon == NULL || colon[strspn(colon + 1, " ") + 1] == '\0')
            continue;
        rc = tfs_buf_printf(b, "%s\r\n", l->data);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "\r\n");
    return rc;
}

/* Read the answer's head into c->raw_head: 0 with *have bytes there (the
   head, h->len, then maybe the body's start), -EPIPE when the connection
   ended before any byte, or an error. */
static int http_raw_head(const struct s3_io *io, struct s3_conn *c,
                         struct s3_resp *resp, struct s3_head *h,
                         size_t *have)
{
    size_t n = 0;

    for (;;) {
        size_t room = TFS_MIN((size_t)S3_HEAD_MAX - n, (size_t)4096);
        ssize_t k = tfs_s3_sock_recv(io, c->raw_fd, c->raw_head + n, room);
        int rc = 0;

        if (k < 0)
            return n == 0 && k == -ECONNRESET ? -EPIPE : (int)k;
        if (k == 0)
            return n == 0 ? -EPIPE
                          : tfs_err(-ECONNRESET, "the connection closed "
                                    "inside a response head");
        n += (size_t)k;
        while (n > 0 && (rc = tfs_s3_head_parse(c->raw_head, n, resp, h)) > 0) {
            if (resp->status >= 200) {
                *have = n;
                return 0;
            }
            memmove(c->raw_head, c->raw_head + h->len, n - h->len);
            n -= h->len;                /* a 1xx: the answer follows */
        }
        if (rc < 0)
            return rc;
    }
}

/* A 2xx body of take bytes into the destination, the first npre of them
   already read (pre). */
static int http_raw_body(struct s3_xfer *x, const struct s3_io *io, int fd,
                         const char *pre, size_t npre, size_t take)
{
    const struct s3_req *req = x->req;
    size_t got = TFS_MIN(npre, take);

    if (got > 0) {
        http_land(req, 0, pre, got);
        x->recvd += got;
        http_pace(x, x->recvd);
    }
    while (got < take) {
        struct iovec v[16];
        int cnt = http_dst_slice(req, got,
                                 TFS_MIN(take - got, HTTP_RAW_PIECE), v, 16);
        ssize_t k = tfs_s3_sock_readv(io, fd, v, cnt);

        if (k < 0)
            return (int)k;
        if (k == 0)
            return tfs_err(-ECONNRESET, "the connection closed after %zu "
                           "of %zu bytes", got, take);
        if (req->land != NULL)
            req->land->fn(req->land->arg, got, (size_t)k);
        got += (size_t)k;
        x->recvd += (uint64_t)k;
        http_pace(x, x->recvd);
    }
    x->resp->nbody = got;
    return 0;
}

/* An error body of len bytes into x->errbody (capped), the first npre
   already read; *whole when all of it was read. */
static int http_raw_errbody(struct s3_xfer *x, const struct s3_io *io,
                            int fd, const char *pre, size_t npre,
                            uint64_t len, bool *whole)
{
    size_t keep = (size_t)TFS_MIN(len, (uint64_t)S3_ERRBODY_MAX);
    size_t got = TFS_MIN(npre, keep);
    char buf[4096];

    if (tfs_buf_append(&x->errbody, pre, got) < 0)
        return -ENOMEM;
    while (got < keep) {
        ssize_t k = tfs_s3_sock_recv(io, fd, buf,
                                     TFS_MIN(sizeof(buf), keep - got));

        if (k <= 0)
            return k < 0 ? (int)k
                         : tfs_err(-ECONNRESET, "the connection closed "
                                   "inside an error body");
        if (tfs_buf_append(&x->errbody, buf, (size_t)k) < 0)
            return -ENOMEM;
        got += (size_t)k;
    }
    *whole = keep == len && npre <= len;
    return 0;
}

/* Send req and take the answer's head, on the kept socket or a new one. */
static int http_raw_exchange(struct s3_priv *p, unsigned ei,
                             struct s3_conn *c, const struct s3_io *io,
                             struct s3_resp *resp, struct s3_head *h,
                             size_t *have)
{
    const struct s3_ep *e = &p->bal.ep[ei];
    struct s3_io cio = *io;             /* the connect's own limit */
    uint64_t conn_end = tfs_now_ns() + p->connect_timeout_ms * 1000000u;
    int rc = 0;

    cio.stall_ns = 0;
    if (cio.end_ns == 0 || conn_end < cio.end_ns)
        cio.end_ns = conn_end;
    if (c->raw_fd >= 0 && c->raw_ep != ei)
        http_raw_close(c);
    for (int tries = 0; tries < 2; tries++) {
        bool reused = c->raw_fd >= 0;

        if (!reused) {
            rc = tfs_s3_sock_connect(e->base_url, &cio, &c->raw_fd);
            if (rc < 0)
                return rc;
            c->raw_ep = ei;
        }
        rc = tfs_s3_sock_send(io, c->raw_fd, c->raw_req.p, c->raw_req.len);
        if (rc == 0)
            rc = http_raw_head(io, c, resp, h, have);
        if (rc == 0 || !reused || (rc != -EPIPE && rc != -ECONNRESET))
            break;
        http_raw_close(c);              /* the server let it go: anew */
        tfs_errdetail_clear();
    }
    if (rc == -EPIPE)
        rc = tfs_err(-ECONNRESET, "the connection closed before an answer");
    return rc;
}

/* http_perform on our own socket; HTTP_RAW_CURL when curl must. */
static int http_raw_perform(struct s3_priv *p, unsigned ei, struct s3_conn *c,
                            const struct s3_req *req, struct s3_resp *resp,
                            uint64_t left_ms, struct s3_ep_result *res)
{
    const struct s3_ep *e = &p->bal.ep[ei];
    struct s3_xfer x = {.req = req, .resp = resp, .bw = p->conn_bw,
                        .t0_ns = tfs_now_ns()};
    struct s3_io io = {
        .end_ns = left_ms != 0 ? x.t0_ns + left_ms * 1000000u : 0,
        .stall_ns = http_is_transfer(req) ? p->stall_ms * 1000000u : 0};
    const char *pre;
    struct curl_slist *hdrs = NULL;
    struct s3_head h = {0};
    size_t have = 0;
    bool net = false;                   /* the endpoint failed us */
    bool keep = false;
    int rc = 0;

    tfs_buf_init(&x.errbody, 0);
    if (c->raw_head == NULL && (c->raw_head = tfs_malloc(S3_HEAD_MAX)) == NULL)
        return -ENOMEM;
    rc = http_build_url(p, e, c, req);
    if (rc == 0)
        rc = http_headers(p, e, c, req, &hdrs);
    if (rc == 0)
        rc = http_raw_request(c, hdrs);
    curl_slist_free_all(hdrs);
    if (rc < 0)
        goto out;
    rc = http_raw_exchange(p, ei, c, &io, resp, &h, &have);
    net = rc < 0;
    pre = c->raw_head + h.len;
    if (rc == 0 && (h.chunked || !resp->has_length)) {
        rc = HTTP_RAW_CURL;
    } else if (rc == 0 && resp->status >= 200 && resp->status <= 299) {
        size_t take = (size_t)TFS_MIN(resp->length, (uint64_t)req->dst_len);

        if (resp->length > req->dst_len && !req->dst_prefix) {
            rc = tfs_err(TFS_EPROTO, "S3 sent more bytes than the range "
                         "asked for");
        } else {
            rc = http_raw_body(&x, &io, c->raw_fd, pre, have - h.len, take);
            net = rc < 0;
            x.full = take < resp->length;
            keep = rc == 0 && !x.full && have - h.len <= take;
        }
    } else if (rc == 0) {
        rc = http_raw_errbody(&x, &io, c->raw_fd, pre, have - h.len,
                              resp->length, &keep);
        net = rc < 0;
        if (rc == 0 && x.errbody.len > 0)
            tfs_s3_xml_parse_error(x.errbody.p, x.errbody.len, &resp->err);
        if (rc == 0)
            rc = tfs_s3_map_status(p, req->method, req->key, resp->status,
                                   &resp->err);
    }
    if (net) {
        char why[256];

        snprintf(why, sizeof(why), "%s", tfs_errdetail());
        rc = tfs_err(rc, "%s (GET %s%s)", why, e->base_url,
                     tfs_buf_str(&c->path));
    }
    if (!keep || h.close)
        http_raw_close(c);
    res->failed = net || (rc != HTTP_RAW_CURL &&
                          http_ep_failed_status(resp->status));
    res->bytes_in = x.recvd;
    res->bytes_out = 0;
out:
    tfs_buf_cleanup(&x.errbody);
    return rc;
}

/*
 * Send req on c at the endpoint the balancer picks, or at endpoint
 * forced (a health check: outside the balancer, *probe_ok says whether
 * it answered).
 */
static int http_at_endpoint(struct s3_priv *p, struct s3_conn *c,
                            const struct s3_req *req, struct s3_resp *resp,
                            uint64_t left_ms, int forced, bool *probe_ok)
{
    struct s3_ep_result res = {.failed = false};
    unsigned i;
    int rc;

    res.t0_ns = tfs_now_ns();
    i = forced >= 0 ? (unsigned)forced : tfs_s3_bal_pick(&p->bal, res.t0_ns);
    rc = http_raw_ok(p, &p->bal.ep[i], req)
             ? http_raw_perform(p, i, c, req, resp, left_ms, &res)
             : HTTP_RAW_CURL;
    if (rc == HTTP_RAW_CURL) {          /* not for us, or chunked */
        memset(resp, 0, sizeof(*resp));
        tfs_errdetail_clear();
        rc = http_perform(p, &p->bal.ep[i], c, req, resp, left_ms, &res);
    }
    TFS_DEBUG("s3: %s /%s/%s at %s -> %ld %s (%.1f ms)", req->method,
              p->bucket, req->key ? req->key : "", p->bal.ep[i].name,
              resp->status, tfs_errname(rc),
              (double)(tfs_now_ns() - res.t0_ns) / 1e6);
    if (forced >= 0)
        *probe_ok = !res.failed && resp->status != 0;   /* it answered */
    else
        tfs_s3_bal_done(&p->bal, i, &res, tfs_now_ns());
    return rc;
}

/* tfs_s3_request, at endpoint forced (-1: the balancer's pick). */
static int http_request(struct s3_priv *p, const struct s3_req *req,
                        struct s3_resp *resp, int forced, bool *probe_ok)
{
    bool transfer = http_is_transfer(req);
    struct s3_conn *c = NULL;
    uint64_t left_ms;
    int rc;

    memset(resp, 0, sizeof(*resp));
    if (!http_time_left(p, transfer, &left_ms))
        return tfs_err(-ETIMEDOUT, "deadline passed before sending (%s /%s"
                       "%s%s)", req->method, p->bucket, req->key ? "/" : "",
                       req->key ? req->key : "");
    rc = forced >= 0 ? 0 : http_injected(p, req);
    if (rc < 0)
        return rc;
    rc = http_pool_get(p, left_ms ? left_ms : p->timeout_ms, &c);
    if (rc < 0)
        return rc;
    rc = !http_time_left(p, transfer, &left_ms)
             ? tfs_err(-ETIMEDOUT, "deadline passed waiting for an S3 "
                       "connection")
             : http_at_endpoint(p, c, req, resp, left_ms, forced, probe_ok);
    http_pool_put(p, c);
    return rc;
}

int tfs_s3_request(struct s3_priv *p, const struct s3_req *req,
                   struct s3_resp *resp)
{
    return http_request(p, req, resp, -1, NULL);
}

#define HTTP_PROBE_MS 5000u             /* a health check's deadline */

bool tfs_s3_probe(void *arg, unsigned i)
{
    struct s3_priv *p = arg;
    struct s3_req req = {.method = "HEAD"};     /* the bucket */
    struct s3_resp resp;
    uint64_t ms = TFS_MIN(p->timeout_ms, (uint64_t)HTTP_PROBE_MS);
    uint64_t prev = tfs_deadline_set(tfs_now_ns() + ms * 1000000u);
    bool ok = false;

    http_request(p, &req, &resp, (int)i, &ok);
    tfs_deadline_set(prev);
    TFS_DEBUG("s3: health check of %s: %s", p->bal.ep[i].name,
              ok ? "up" : "still down");
    return ok;
}
