/* SPDX-License-Identifier: MIT */
/*
 * The peer client: the fetch engine's source of blocks before the store
 * (cache/peer.h).  For a block it ranks the members by rendezvous score,
 * skipping suspect ones; when the first is this node (it owns the block)
 * or none is left, the store is read.  Otherwise one HTTP GET goes to
 * that peer on a kept-alive connection, at most cfg inflight at once per
 * peer, signed (auth.c), within the peer timeout and the read's deadline
 * (half of what is left, so the store fallback has the rest).
 *
 * An answer is used only when it is whole and right: status 200, the
 * block's exact length, the block id and version asked for, and the
 * chunked digest (common/csum.h) of the bytes the server sent, computed
 * chunk by chunk as they arrive.  Anything else counts against
 * the peer, which is then suspect: skipped for a back-off (1 s, doubling
 * to 30 s while failures go on), after which one request goes through as
 * a probe.  A lost peer costs hits, never errors: every failure here is
 * a read of the store instead.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/bytes.h"
#include "common/csum.h"
#include "common/util.h"
#include "group/group_int.h"
#include "store/curl.h"
#include "tierfs/log.h"

/* ---- peers ---- */

int gpeer_init(struct gpeer *p, const char *host, uint16_t port, bool tls)
{
    int rc = tfs_curl_global_init();

    if (rc < 0)
        return rc;
    group_key(p->key, sizeof(p->key), host, port);
    snprintf(p->url, sizeof(p->url), "%s://%s", tls ? "https" : "http",
             p->key);
    pthread_mutex_init(&p->lock, NULL);
    tfs_cond_init_mono(&p->cond);
    return 0;
}

void gpeer_cleanup(struct gpeer *p)
{
    for (size_t i = 0; i < p->n_idle; i++)
        curl_easy_cleanup(p->idle[i]);
    tfs_free(p->idle);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
}

bool gpeer_suspect(struct gpeer *p, uint64_t now_ns)
{
    uint64_t until = atomic_load(&p->until);

    return until != 0 && (now_ns < until || atomic_load(&p->probing));
}

/* A request to p failed: suspect for the next back-off. */
void gpeer_fail(struct gpeer *p)
{
    uint64_t now = tfs_now_ns();

    pthread_mutex_lock(&p->lock);
    if (p->suspect_since == 0)
        p->suspect_since = now;
    p->backoff_ns = p->backoff_ns == 0 ? GROUP_BACKOFF_MIN_NS
                    : TFS_MIN(p->backoff_ns * 2, GROUP_BACKOFF_MAX_NS);
    p->suspect_until = now + p->backoff_ns;
    atomic_store(&p->until, p->suspect_until);
    pthread_cond_broadcast(&p->cond);   /* waiters for a slot give up */
    pthread_mutex_unlock(&p->lock);
}

void gpeer_ok(struct gpeer *p)
{
    if (atomic_load(&p->until) == 0)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->suspect_since != 0)
        p->suspect_ns += tfs_now_ns() - p->suspect_since;
    p->suspect_since = 0;
    p->suspect_until = 0;
    p->backoff_ns = 0;
    atomic_store(&p->until, 0);
    pthread_mutex_unlock(&p->lock);
}

/*
 * A slot for one request to p, waiting until end_ns while all are
 * taken: a handle (kept alive from an earlier request, or NULL: make
 * one).  -EBUSY when none came free in time, -EAGAIN when p turned
 * suspect meanwhile or another request is its probe.
 */
int gpeer_take(struct tfs_group *g, struct gpeer *p, uint64_t end_ns,
               CURL **h, bool *probe)
{
    uint64_t now = tfs_now_ns();

    *h = NULL;
    *probe = false;
    pthread_mutex_lock(&p->lock);
    while (p->inflight >= g->inflight) {
        if (now >= end_ns || gpeer_suspect(p, now)) {
            pthread_mutex_unlock(&p->lock);
            return now >= end_ns ? -EBUSY : -EAGAIN;
        }
        tfs_cond_wait_ms(&p->cond, &p->lock,
                         TFS_MAX(1, (end_ns - now) / 1000000));
        now = tfs_now_ns();
    }
    if (p->suspect_until != 0) {
        if (now < p->suspect_until || atomic_load(&p->probing)) {
            pthread_mutex_unlock(&p->lock);
            return -EAGAIN;
        }
        atomic_store(&p->probing, true);  /* this request finds out */
        *probe = true;
    }
    p->inflight++;
    if (p->n_idle > 0)
        *h = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Give the slot back, and the handle when it may be reused. */
void gpeer_give(struct tfs_group *g, struct gpeer *p, CURL *h, bool keep,
                bool probe)
{
    pthread_mutex_lock(&p->lock);
    p->inflight--;
    if (probe)
        atomic_store(&p->probing, false);
    if (h != NULL && keep && p->idle == NULL)
        p->idle = tfs_calloc(g->inflight, sizeof(*p->idle));
    if (h != NULL && keep && p->idle != NULL && p->n_idle < g->inflight) {
        p->idle[p->n_idle++] = h;
        h = NULL;
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (h != NULL)
        curl_easy_cleanup(h);
}

void gpeer_metrics(struct gpeer *p, struct tfs_group_peer_metrics *m)
{
    uint64_t now = tfs_now_ns();

    m->requests = atomic_load(&p->requests);
    m->bytes = atomic_load(&p->bytes);
    m->errors = atomic_load(&p->errors);
    m->timeouts = atomic_load(&p->timeouts);
    m->corrupt = atomic_load(&p->corrupt);
    m->latency = &p->latency;
    pthread_mutex_lock(&p->lock);
    m->inflight = p->inflight;
    m->suspect = p->suspect_until != 0;
    m->suspect_seconds = (double)(p->suspect_ns +
                                  (p->suspect_since ? now - p->suspect_since
                                                    : 0)) / 1e9;
    pthread_mutex_unlock(&p->lock);
}

/* ---- one request ---- */

/* What one answer carried, filled by curl's callbacks. */
struct gpeer_answer {
    unsigned char *dst;
    size_t         len;                 /* wanted */
    size_t         got;
    struct tfs_csum csum;               /* of dst, while it arrives */
    bool           over;                /* more than len came */
    char           block[2 * TFS_PEER_ID_LEN + 1];
    char           version[TFS_VERSION_MAX];
    char           sum[17];
};

static size_t gpeer_body(char *data, size_t size, size_t n, void *arg)
{
    struct gpeer_answer *a = arg;
    size_t len = size * n;

    if (len > a->len - a->got) {
        a->over = true;
        return 0;                       /* aborts the transfer */
    }
    memcpy(a->dst + a->got, data, len);
    a->got += len;
    tfs_csum_feed(&a->csum, a->dst, a->got);    /* still in the cache */
    return len;
}

/* Copy header line's value into out when its name is name. */
static void gpeer_hdr(const char *line, size_t len, const char *name,
                      char *out, size_t size)
{
    size_t nl = strlen(name);
    size_t v;

    if (len <= nl + 1 || strncasecmp(line, name, nl) != 0 ||
        line[nl] != ':')
        return;
    v = nl + 1;
    while (v < len && line[v] == ' ')
        v++;
    while (len > v && (line[len - 1] == '\r' || line[len - 1] == '\n' ||
                       line[len - 1] == ' '))
        len--;
    if (len - v < size) {
        memcpy(out, line + v, len - v);
        out[len - v] = '\0';
    }
}

static size_t gpeer_header(char *line, size_t size, size_t n, void *arg)
{
    struct gpeer_answer *a = arg;
    size_t len = size * n;

    gpeer_hdr(line, len, GROUP_H_BLOCK, a->block, sizeof(a->block));
    gpeer_hdr(line, len, GROUP_H_VERSION, a->version, sizeof(a->version));
    gpeer_hdr(line, len, GROUP_H_SUM, a->sum, sizeof(a->sum));
    return len;
}

/* The request's URL into b: path, block id, and the object's name. */
static int gpeer_url(CURL *h, const struct gpeer *p,
                     const struct tfs_peer_block *pb, const char *hex,
                     struct tfs_buf *b)
{
    char *key = curl_easy_escape(h, pb->key, 0);
    char *ver = curl_easy_escape(h, pb->version, 0);

    if (key != NULL && ver != NULL)
        tfs_buf_printf(b, "%s" GROUP_PATH "%s?key=%s&version=%s&size=%"
                       PRIu64 "&index=%" PRIu64, p->url, hex, key, ver,
                       pb->obj_size, pb->index);
    curl_free(key);
    curl_free(ver);
    return key == NULL || ver == NULL ? -ENOMEM : tfs_buf_error(b);
}

/* The signed headers of a request: method, and what it names. */
struct curl_slist *gpeer_sign(struct tfs_group *g, const char *method,
                              const char *hex)
{
    unsigned char raw[16];
    char nonce[33];
    char sig[65];
    char line[128];
    uint64_t now_s = (uint64_t)tfs_wall_ns() / 1000000000u;
    struct curl_slist *l = NULL;
    struct curl_slist *t;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return NULL;
    tfs_hex_lower(nonce, raw, sizeof(raw));
    tfs_gauth_sign(&g->auth, method, hex, now_s, nonce, sig);
    snprintf(line, sizeof(line), GROUP_H_TIME ": %" PRIu64, now_s);
    l = curl_slist_append(l, line);
    snprintf(line, sizeof(line), GROUP_H_NONCE ": %s", nonce);
    t = l ? curl_slist_append(l, line) : NULL;
    snprintf(line, sizeof(line), GROUP_H_SIG ": %s", sig);
    t = t ? curl_slist_append(t, line) : NULL;
    t = t ? curl_slist_append(t, "Expect:") : NULL;
    if (t == NULL) {
        curl_slist_free_all(l);
        return NULL;
    }
    return t;
}

/*
 * Check an answer: -EPROTO (with a detail) unless it is the block asked
 * for, whole, with the checksum its bytes have.
 */
static int gpeer_check(struct gpeer_answer *a,
                       const struct tfs_peer_block *pb, const char *hex)
{
    char sum[17];

    if (a->over || a->got != pb->len)
        return tfs_err(-EPROTO, "%s bytes, not %zu", a->over ? "more"
                       : "fewer", pb->len);
    if (strcmp(a->block, hex) != 0)
        return tfs_err(-EPROTO, "another block's answer ('%s')", a->block);
    if (strcmp(a->version, pb->version) != 0)
        return tfs_err(-EPROTO, "version '%s', not '%s'", a->version,
                       pb->version);
    snprintf(sum, sizeof(sum), "%016" PRIx64, tfs_csum_end(&a->csum,
                                                           a->dst));
    if (strcmp(a->sum, sum) != 0)
        return tfs_err(-EPROTO, "checksum %s, the bytes' is %s",
                       a->sum[0] ? a->sum : "(none)", sum);
    return 0;
}

void gpeer_wire_opts(const struct tfs_group *g, CURL *h)
{
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L << 10);
    if (g->tls_ca != NULL) {            /* the peer's certificate, checked */
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
        curl_easy_setopt(h, CURLOPT_CAINFO, g->tls_ca);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    } else {
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    }
}

/* Ask p for block pb into dst within budget_ms. */
static int gpeer_get(struct tfs_group *g, struct gpeer *p,
                     const struct tfs_peer_block *pb, uint64_t budget_ms,
                     unsigned char *dst)
{
    struct gpeer_answer a = {.dst = dst, .len = pb->len};
    char hex[2 * TFS_PEER_ID_LEN + 1];
    struct curl_slist *hdrs = NULL;
    struct tfs_buf url;
    uint64_t t0 = tfs_now_ns();
    long status = 0;
    CURLcode cc = CURLE_OK;
    CURL *h;
    bool probe;
    int rc;

    rc = gpeer_take(g, p, t0 + budget_ms * 1000000u, &h, &probe);
    if (rc < 0)
        return rc;
    if (h == NULL)
        h = curl_easy_init();
    else
        curl_easy_reset(h);             /* keeps its live connection */
    tfs_hex_lower(hex, pb->id, TFS_PEER_ID_LEN);
    tfs_buf_init(&url, 0);
    if (h == NULL || tfs_csum_begin(&a.csum, a.len) < 0 ||
        gpeer_url(h, p, pb, hex, &url) < 0 ||
        (hdrs = gpeer_sign(g, "GET", hex)) == NULL) {
        tfs_csum_cleanup(&a.csum);
        tfs_buf_cleanup(&url);
        gpeer_give(g, p, h, false, probe);
        return tfs_err(-ENOMEM, "group: no memory for a request to %s",
                       p->key);
    }
    curl_easy_setopt(h, CURLOPT_URL, url.p);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)budget_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)TFS_MIN(budget_ms, TFS_GROUP_CONNECT_MS));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, gpeer_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, gpeer_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &a);
    gpeer_wire_opts(g, h);
    atomic_fetch_add(&p->requests, 1);
    cc = curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    tfs_buf_cleanup(&url);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && a.over)) {
        rc = tfs_err(cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                     : -ECONNREFUSED, "%s", curl_easy_strerror(cc));
        if (cc == CURLE_OPERATION_TIMEDOUT)
            atomic_fetch_add(&p->timeouts, 1);
    } else if (status != 200) {
        rc = tfs_err(-EPROTO, "HTTP %ld", status);
    } else {
        rc = gpeer_check(&a, pb, hex);
        if (rc < 0)
            atomic_fetch_add(&p->corrupt, 1);
    }
    if (rc == 0) {
        tfs_hist_add(&p->latency, tfs_now_ns() - t0);
        atomic_fetch_add(&p->bytes, pb->len);
        gpeer_ok(p);
    } else {
        atomic_fetch_add(&p->errors, 1);
        TFS_WARN("group: block %" PRIu64 " of '%s' from %s: %s; reading "
                 "the store", pb->index, pb->key, p->key, tfs_errdetail());
        if (status != 404)              /* the object is gone: not p's */
            gpeer_fail(p);
    }
    tfs_csum_cleanup(&a.csum);
    gpeer_give(g, p, h, rc == 0, probe);
    return rc;
}

/* ---- the source ---- */

struct gpeer_usable {
    const struct gview *v;
    uint64_t            now;
};

static bool gpeer_usable(void *arg, size_t i)
{
    const struct gpeer_usable *u = arg;

    return (long)i == u->v->self || !gpeer_suspect(u->v->peer[i], u->now);
}

int gpeer_source(void *arg, const struct tfs_peer_block *pb,
                 uint64_t deadline_ns, unsigned char *dst)
{
    struct tfs_group *g = arg;
    struct gview *v = gview_get(g);
    struct gpeer_usable u = {v, tfs_now_ns()};
    uint64_t budget = g->timeout_ms;
    size_t first;
    int rc = -ENOENT;

    if (tfs_gmembers_rank(&v->m, pb->id, TFS_PEER_ID_LEN, gpeer_usable, &u,
                          &first, 1) == 0) {
        atomic_fetch_add(&g->skipped, 1);
    } else if ((long)first == v->self) {
        atomic_fetch_add(&g->owned, 1);
    } else {
        if (deadline_ns != 0)
            budget = deadline_ns > u.now
                         ? TFS_MIN(budget, (deadline_ns - u.now) / 2000000)
                         : 0;
        atomic_fetch_add(&g->asked, 1);
        rc = budget == 0 ? -ETIMEDOUT
                         : gpeer_get(g, v->peer[first], pb, budget, dst);
        if (rc == 0) {
            atomic_fetch_add(&g->peer_hits, 1);
            atomic_fetch_add(&g->peer_bytes, pb->len);
        } else {
            atomic_fetch_add(&g->fallbacks, 1);
        }
    }
    gview_put(g, v);
    return rc;
}
