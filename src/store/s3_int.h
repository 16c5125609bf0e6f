/* SPDX-License-Identifier: MIT */
/*
 * Internals of the s3 store, shared by its five files (not installed):
 *
 *   s3.c         the ops table, configuration and credentials, operations
 *   s3_http.c    the pool of keep-alive curl handles, one request end to
 *                end (build, sign, send, parse headers), error mapping,
 *                the health check of an ejected endpoint
 *   s3_balance.c the endpoints of the store and the client-side balancer
 *                over them (least outstanding, ejection, back-off), and
 *                their "endpoints" metrics; no network
 *   s3_sign.c    AWS Signature Version 4 on OpenSSL, URI/query encoding
 *   s3_xml.c     expat parsers for S3's XML response bodies
 *
 * Thread safety: the priv struct is written during open only; afterwards
 * its pool, balancer and signing-key cache carry their own locks and
 * everything else is read-only, so every function here may be called from
 * many threads.
 */
#ifndef TFS_S3_INT_H
#define TFS_S3_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "metrics/hist.h"
#include "store/s3_metrics.h"
#include "store/store_int.h"

#define S3_XML_MAX      (16u << 20)     /* cap of any XML body we parse */
#define S3_ERRBODY_MAX  (64u << 10)     /* bytes of an error body kept */
#define S3_UPLOAD_ID_MAX 512            /* bytes, with the NUL */
#define S3_MAX_PARTS    10000u          /* S3's limit per upload */
#define S3_MAX_PART     (5ull << 30)    /* bytes per part (and CopyObject) */
#define S3_MAX_HDRS     8               /* extra headers of one request */
#define S3_SMALL_GET    (1u << 20)      /* GETs up to this: timeout_ms */

/* SHA-256 of the empty string, hex: the payload hash of bodiless requests */
#define S3_EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/* One query parameter or header, both strings borrowed. */
struct s3_param {
    const char *name;                   /* raw (not yet encoded) */
    const char *value;                  /* raw; "" for a bare name */
};

struct s3_hdr {
    const char *name;                   /* lowercase */
    const char *value;
};

/* ---- signing (s3_sign.c) ---- */

/* The derived SigV4 key of one day, cached: it changes once a day. */
struct s3_keycache {
    pthread_mutex_t lock;
    char            day[9];             /* "YYYYMMDD"; protected by lock */
    unsigned char   key[32];            /* protected by lock */
};

struct s3_sign_in {
    const char          *method;        /* "GET" */
    const char          *uri;           /* canonical URI, already encoded */
    const char          *query;         /* canonical query (tfs_s3_query) */
    const struct s3_hdr *hdrs;          /* every signed header, host too */
    size_t               n_hdrs;
    const char          *payload_hash;  /* hex SHA-256 or UNSIGNED-PAYLOAD */
    const char          *amz_date;      /* "YYYYMMDDTHHMMSSZ" */
    const char          *region;
    const char          *access_key;
    const char          *secret_key;
};

void tfs_s3_keycache_init(struct s3_keycache *kc);
void tfs_s3_keycache_cleanup(struct s3_keycache *kc);

/*
 * Append the canonical query string of q[0..n) to b: names and values
 * RFC 3986-encoded ('/' too), sorted by encoded name then value, joined
 * with '&', bare names as "name=".  The same string goes on the wire.
 */
int tfs_s3_query(struct tfs_buf *b, const struct s3_param *q, size_t n);

/*
 * Append the SigV4 canonical request of in to b (exposed for tests).
 * Header names must be lowercase; values are trimmed here.
 */
int tfs_s3_canonical_request(struct tfs_buf *b, const struct s3_sign_in *in);

/*
 * Append the Authorization header value for in to auth.  kc (may be NULL)
 * caches the derived key; scratch is reset and used for the canonical
 * request, so a caller can reuse its memory.  -ENOMEM, TFS_ETOOBIG or
 * -EINVAL (too many headers).  Thread-safe.
 */
int tfs_s3_sign(const struct s3_sign_in *in, struct s3_keycache *kc,
                struct tfs_buf *scratch, struct tfs_buf *auth);

/* Lowercase hex SHA-256 of data into out[65]. */
void tfs_s3_sha256_hex(const void *data, size_t len, char out[65]);

/* t as "YYYYMMDDTHHMMSSZ" (UTC) into out[17]. */
void tfs_s3_amz_date(time_t t, char out[17]);

/* ---- XML bodies (s3_xml.c) ---- */

struct s3_error {
    char code[64];                      /* "NoSuchKey"; "" when none */
    char message[256];                  /* truncated to fit */
};

/* The answer of the one-element results (upload, complete, copy). */
struct s3_result {
    bool            is_error;           /* the root was <Error> */
    struct s3_error err;                /* when is_error */
    char            etag[TFS_VERSION_MAX]; /* unquoted; may be "" */
    char            upload_id[S3_UPLOAD_ID_MAX];
    int64_t         mtime_ns;           /* LastModified; 0 when absent */
};

/*
 * Parse a ListObjectsV2 result.  Keys and common prefixes are %-decoded
 * when the body says <EncodingType>url</EncodingType> ('+' means space,
 * as S3 writes it), must start with strip, and are returned without it;
 * a key equal to strip (a "directory marker" at the root) is dropped.
 * mtimes are cut to whole seconds, like HEAD's Last-Modified.
 * next_token is set only when IsTruncated is true.  On failure page is
 * left zeroed.  Errors: TFS_EPROTO (malformed, or an unexpected root),
 * TFS_ETOOBIG (len over S3_XML_MAX, or a field over its cap), -ENOMEM.
 */
int tfs_s3_xml_parse_list(const char *body, size_t len, const char *strip,
                          struct tfs_list_page *page);
/* The same, and *skipped: names holding NUL ("%00"), left out. */
int tfs_s3_xml_parse_list_ex(const char *body, size_t len, const char *strip,
                             struct tfs_list_page *page, size_t *skipped);

/*
 * Parse an <Error> body into out.  TFS_EPROTO when the body is not one,
 * TFS_ETOOBIG, -ENOMEM.  Over-long fields are truncated, not refused.
 */
int tfs_s3_xml_parse_error(const char *body, size_t len,
                           struct s3_error *out);

/*
 * Parse a body whose root is root ("InitiateMultipartUploadResult",
 * "CompleteMultipartUploadResult", "CopyObjectResult", "CopyPartResult")
 * or <Error> (S3 may answer 200 with an error inside for the last three).
 * Errors: TFS_EPROTO (malformed or another root), TFS_ETOOBIG, -ENOMEM.
 */
int tfs_s3_xml_parse_result(const char *body, size_t len, const char *root,
                            struct s3_result *out);

/* "2009-10-12T17:50:30.000Z" to nanoseconds; TFS_EPROTO when malformed. */
int tfs_s3_parse_iso8601(const char *s, int64_t *out_ns);

/* ---- endpoints and the balancer (s3_balance.c) ---- */

#define S3_MAX_ENDPOINTS   TFS_S3_MAX_ENDPOINTS
#define S3_EJECT_BASE_MS   1000u        /* first back-off of an ejection */
#define S3_EJECT_MAX_MS    30000u       /* cap of a doubling back-off */

/*
 * One endpoint (gateway) of the store.  The URL parts are written during
 * open only; the balancer state is under bal->lock; the counters are
 * relaxed atomics any thread adds to.
 */
struct s3_ep {
    char    *name;                      /* "http://host:port[/path]",
                                           host lowercased: metrics key */
    char    *base_url;                  /* "http://[bucket.]host:port" */
    char    *base_path;                 /* "" or "/path" */
    char    *host;                      /* Host header value */
    unsigned outstanding;               /* requests in flight; lock */
    bool     down;                      /* ejected; lock */
    bool     probing;                   /* a health check in flight; lock */
    uint64_t down_until_ns;             /* end of the back-off; lock */
    uint64_t backoff_ms;                /* the last back-off; lock */
    uint64_t ejected_ns;                /* last ejection, 0 never; lock */
    uint64_t up_ns;                     /* last came back; lock */
    uint64_t down_ns;                   /* time spent down before the
                                           current period; lock */
    uint64_t last_pick_ns;              /* last request sent here; lock */
    atomic_uint_fast64_t n_requests;
    atomic_uint_fast64_t bytes_in;      /* 2xx body bytes received */
    atomic_uint_fast64_t bytes_out;     /* body bytes sent */
    atomic_uint_fast64_t n_errors;      /* requests that failed here */
    atomic_uint_fast64_t n_ejections;
    atomic_uint_fast64_t n_probes;      /* health checks sent */
    struct tfs_hist      latency;       /* of every request here */
};

/* What one request did to its endpoint (tfs_s3_bal_done). */
struct s3_ep_result {
    bool     failed;                    /* connect error, timeout, reset,
                                           a 5xx but 501 */
    uint64_t t0_ns;                     /* when it was picked */
    uint64_t bytes_in;
    uint64_t bytes_out;
};

/* Send a health check to endpoint i; true when it answered. */
typedef bool s3_probe_fn(void *arg, unsigned i);

struct s3_bal {
    pthread_mutex_t lock;
    pthread_cond_t  cond;               /* wakes the health thread */
    struct s3_ep   *ep;                 /* [n], owned */
    unsigned        n;
    unsigned        rr;                 /* next to look at first; lock */
    uint64_t        base_ms;            /* back-off: first ... */
    uint64_t        max_ms;             /* ... and cap */
    bool            stop;               /* health thread: quit; lock */
    bool            started;            /* a health thread runs */
    pthread_t       thread;
    s3_probe_fn    *probe;              /* for the health thread */
    void           *probe_arg;
};

/* n (1..S3_MAX_ENDPOINTS) endpoints, all up, names NULL.  -ENOMEM. */
int tfs_s3_bal_init(struct s3_bal *b, unsigned n);
/* Free the endpoints; the health thread must be stopped. */
void tfs_s3_bal_cleanup(struct s3_bal *b);

/*
 * The endpoint for the next request, counted as outstanding until
 * tfs_s3_bal_done: of those up, the one with the fewest requests in
 * flight, ties taken in turn (round robin); when every endpoint is down,
 * the one whose back-off ends first, so requests still go out and the
 * store's own errors reach the caller.  Thread-safe.
 */
unsigned tfs_s3_bal_pick(struct s3_bal *b, uint64_t now_ns);

/*
 * The request picked on endpoint i ended with r.  A failure ejects an
 * endpoint that is up: marked down for a back-off that doubles from
 * base_ms (1 s) up to max_ms (30 s) while it keeps failing, and starts
 * again from base_ms after a quiet 2 * max_ms.  A request sent to a down
 * endpoint (all were down) that succeeds brings it back; one that fails
 * after its back-off ended doubles the back-off.  Thread-safe.
 */
void tfs_s3_bal_done(struct s3_bal *b, unsigned i,
                     const struct s3_ep_result *r, uint64_t now_ns);

/*
 * A health check due: a down endpoint whose back-off has ended and that
 * no check is probing yet.  True with *i set (and marked probing: report
 * with tfs_s3_bal_probed); otherwise false with *wait_ns the time until
 * the next back-off ends (UINT64_MAX when none is down).  Thread-safe.
 */
bool tfs_s3_bal_probe_due(struct s3_bal *b, uint64_t now_ns, unsigned *i,
                          uint64_t *wait_ns);
/* The check of i answered (ok: up again) or not (back-off doubled). */
void tfs_s3_bal_probed(struct s3_bal *b, unsigned i, bool ok,
                       uint64_t now_ns);

/*
 * Start the health thread: it sleeps until a back-off ends, then calls
 * probe(arg, i) for that endpoint (probes of one endpoint never overlap).
 * Only worth it with more than one endpoint.  -EAGAIN (no thread).
 */
int tfs_s3_bal_start(struct s3_bal *b, s3_probe_fn *probe, void *arg);
/* Stop and join it (waits for a probe in flight); no-op if none. */
void tfs_s3_bal_stop(struct s3_bal *b);

/* Endpoint i's figures now, for the "endpoints" metrics section. */
void tfs_s3_bal_metrics(struct s3_bal *b, unsigned i, uint64_t now_ns,
                        struct tfs_s3_ep_metrics *out);

/* ---- the store's state (filled by s3.c during open) ---- */

struct s3_conn;

struct s3_pool {
    pthread_mutex_t lock;
    pthread_cond_t  cond;               /* signalled when a conn is freed */
    struct s3_conn *free;               /* idle handles; protected by lock */
    unsigned        n_conns;            /* created; protected by lock */
    unsigned        max_conns;          /* immutable after open */
    void           *share;              /* CURLSH: DNS and TLS sessions */
    pthread_mutex_t share_lock[4];      /* one per curl_lock_data used */
};

/* A multipart upload whose abort failed: tried again later (s3.c). */
struct s3_abort {
    char *key;                          /* full key, owned */
    char *upload_id;                    /* owned */
};

struct s3_priv {
    char    *bucket;                    /* owned */
    char    *root;                      /* "" or "prefix/", owned */
    char    *ident;                     /* "s3://base_url/bucket/root";
                                           several: "s3://a,b/bucket/root",
                                           the endpoints sorted */
    char    *region;                    /* owned */
    char    *ca_file;                   /* AWS_CA_BUNDLE or NULL, owned */
    char    *access_key;                /* NULL when anonymous, owned */
    char    *secret_key;                /* owned, wiped on close */
    char    *session_token;             /* or NULL, owned, wiped on close */
    bool     path_style;                /* /bucket/key, else bucket.host */
    bool     tls_verify;
    bool     raw_get;                   /* GETs into a buffer over plain
                                           HTTP on our own sockets
                                           (s3_http.c); raw_get=0 */
    bool     anonymous;                 /* unsigned requests */
    uint64_t part_size;                 /* bytes */
    bool     part_size_auto;            /* not given: scale with the size */
    uint64_t multipart_threshold;       /* bytes */
    uint64_t copy_threshold;            /* bytes; above: UploadPartCopy */
    uint64_t copy_part_size;            /* bytes */
    unsigned upload_concurrency;
    uint64_t connect_timeout_ms;
    uint64_t timeout_ms;                /* total, of a small request */
    uint64_t stall_ms;                  /* a transfer this long without
                                           progress fails */
    uint64_t conn_bw;                   /* bytes/s each way per
                                           connection; 0 = no cap */
    unsigned part_retries;              /* per multipart part */
    uint64_t fail_request;              /* tests: this request (1-based)
                                           fails once; 0 = none */
    uint64_t fail_count;                /* tests: and the fail_count - 1
                                           after it */
    atomic_uint_fast64_t n_requests;    /* sent or refused, all kinds */
    atomic_uint_fast64_t n_part_retries;
    pthread_mutex_t    abort_lock;      /* the two below */
    struct s3_abort   *aborts;          /* uploads to abort later (s3.c) */
    size_t             n_aborts;
    bool               aborts_draining; /* a thread retries them */
    struct s3_keycache keys;
    struct s3_pool     pool;
    struct s3_bal      bal;             /* the endpoints */
};

/* ---- requests (s3_http.c) ---- */

/* Where the body of a PUT comes from: a slice of a tfs_source. */
struct s3_body {
    const struct tfs_source *src;       /* NULL: no body, or mem below */
    uint64_t                 off;       /* first byte within src */
    uint64_t                 len;       /* bytes to send */
    const char              *mem;       /* POST body (XML), when not NULL */
};

struct s3_req {
    const char            *method;      /* GET HEAD PUT POST DELETE */
    const char            *key;         /* full key; NULL for the bucket */
    const struct s3_param *query;       /* any order */
    size_t                 n_query;
    struct s3_hdr          hdrs[S3_MAX_HDRS]; /* extra headers, signed */
    size_t                 n_hdrs;
    struct s3_body         body;
    void                  *dst;         /* a 2xx body goes here (GET) */
    const struct iovec    *dst_iov;     /* or here, in order (dst NULL) */
    int                    dst_iovcnt;
    const struct tfs_landing *land;     /* told as bytes land, or NULL */
    size_t                 dst_len;     /* either way */
    bool                   dst_prefix;  /* a 200 may be longer: keep the
                                           first dst_len bytes, stop */
    struct tfs_buf        *xml;         /* or here, capped (may be NULL) */
};

struct s3_resp {
    long     status;                    /* HTTP status */
    bool     has_length;
    uint64_t length;                    /* Content-Length */
    bool     has_range;
    uint64_t range_first;               /* Content-Range: bytes F-L/T */
    uint64_t range_last;
    uint64_t range_total;               /* UINT64_MAX when '*' */
    char     etag[TFS_VERSION_MAX];     /* unquoted; "" when absent */
    bool     etag_not_md5;              /* SSE-KMS or SSE-C: never an MD5 */
    int64_t  mtime_ns;                  /* Last-Modified; 0 when absent */
    int64_t  date_ns;                   /* Date; 0 when absent */
    size_t   nbody;                     /* bytes written to dst */
    struct s3_error err;                /* parsed from an error body */
};

/* Set up p->pool (and curl, once per process).  -ENOMEM. */
int tfs_s3_pool_init(struct s3_priv *p, unsigned max_conns);
/* Free every handle.  No request may be in flight. */
void tfs_s3_pool_cleanup(struct s3_priv *p);

/*
 * Send req and wait for the answer.  A transfer (a PUT with a body, a
 * GET of more than S3_SMALL_GET bytes, a server-side copy) is bounded by
 * progress: it fails when it moves nothing for stall_ms, and otherwise
 * only at the calling thread's deadline.  Every other request has a
 * total limit, timeout_ms or the thread's deadline if earlier.  resp is
 * always filled as far as the exchange got.  Returns 0 for a 2xx status;
 * otherwise the mapped error (the same mapping as tfs_s3_map_status)
 * with the detail set.  A status the caller handles itself (404 on
 * DELETE, 416 on GET) still returns the mapped error: check resp->status.
 */
int tfs_s3_request(struct s3_priv *p, const struct s3_req *req,
                   struct s3_resp *resp);

/*
 * The health check of endpoint i (an s3_probe_fn, arg the priv): HEAD
 * of the bucket there, under a deadline of its own (at most 5 s).  True
 * when it answered at all below 500: any status but a 5xx means the
 * gateway serves (403 or 404 are the store's answers, not its failure).
 */
bool tfs_s3_probe(void *arg, unsigned i);

/*
 * Map an S3 failure (status, and the S3 code when known) to an error
 * code and set the detail "S3 Code: Message (METHOD /bucket/key, HTTP N)".
 */
int tfs_s3_map_status(const struct s3_priv *p, const char *method,
                      const char *key, long status,
                      const struct s3_error *err);

/* Add a header to req (name lowercase); -EINVAL when full. */
int tfs_s3_req_hdr(struct s3_req *req, const char *name, const char *value);

/*
 * "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 7231 IMF-fixdate) to nanoseconds;
 * TFS_EPROTO when malformed.
 */
int tfs_s3_parse_http_date(const char *s, int64_t *out_ns);

/* ---- plain-HTTP GETs (s3_http.c, s3_sock.c) ---- */

#define S3_HEAD_MAX 16384u              /* bytes of a response head */

/* What a response head says beyond s3_resp. */
struct s3_head {
    size_t len;                         /* bytes of the head, its blank
                                           line included */
    bool   chunked;                     /* a Transfer-Encoding */
    bool   close;                       /* Connection: close */
};

/*
 * Parse the head of an HTTP/1.x response from b[0..n): status line and
 * headers, into resp (as the curl path fills it) and h.  1 when the head
 * is whole (h->len), 0 when more bytes are needed, TFS_EPROTO with the
 * detail set when it is malformed or longer than S3_HEAD_MAX.
 */
int tfs_s3_head_parse(const char *b, size_t n, struct s3_resp *resp,
                      struct s3_head *h);

/* The limits of one exchange on a socket: absolute ns, 0 for none. */
struct s3_io {
    uint64_t end_ns;                    /* the whole exchange */
    uint64_t stall_ns;                  /* each wait for progress */
};

/* A connected non-blocking TCP socket to base_url's host and port. */
int tfs_s3_sock_connect(const char *base_url, const struct s3_io *io,
                        int *out);
int tfs_s3_sock_send(const struct s3_io *io, int fd, const void *b,
                     size_t n);
/* Bytes received (> 0), 0 when the peer closed, or an error. */
ssize_t tfs_s3_sock_recv(const struct s3_io *io, int fd, void *b,
                         size_t n);
ssize_t tfs_s3_sock_readv(const struct s3_io *io, int fd,
                          const struct iovec *iov, int cnt);

#endif /* TFS_S3_INT_H */
