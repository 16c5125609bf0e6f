/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint copies on peers, the client side: the checkpoint writer's
 * "peer" durability level (docs/ckpt.md) sends each rank's finished
 * staging files to another member of the cache group, which keeps them
 * on its disk (serve.c and ckstore.c, docs/group.md); a job resumed on
 * a node that lost its staging fetches them back.
 *
 * Where a rank's copies go is rendezvous order over the member list for
 * a key of the rank's own (its namespace and rank), so every node agrees
 * and a job resumed on any node asks the same members, skipping this
 * node: the member the writer was told it is (listen), or, when it was
 * not told, every member at an address of this machine (a copy on the
 * same machine would not survive its loss).
 *
 * Requests go on the peers' kept-alive handles and slots (peer.c), signed
 * like block requests over the method and the key.  A file is sent with
 * its XXH3-64 (read once to hash it, once to send it: it was just
 * written, so both come from the page cache), and the member answers 201
 * only once it has checked it and fsynced it.  A file fetched back is
 * checked against the digest the member kept, as it arrives; the caller
 * then checks it against the rank's manifest as well.
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/util.h"
#include "group/group_int.h"
#include "tierfs/log.h"

#define CK_PATH "/v1/ckpt/"
#define CK_ERR_MAX 512                  /* bytes of an error answer kept */
#define CK_LOW_SPEED 65536L             /* bytes/s: slower for the group
                                           timeout is a dead transfer */

/* ---- which members ---- */

/* Whether address a is one of this machine's interfaces' (ifs). */
static bool ck_addr_local(const struct ifaddrs *ifs,
                          const struct sockaddr *a)
{
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        const struct sockaddr *b = i->ifa_addr;

        if (b == NULL || b->sa_family != a->sa_family)
            continue;
        if (a->sa_family == AF_INET &&
            memcmp(&((const struct sockaddr_in *)(const void *)a)->sin_addr,
                   &((const struct sockaddr_in *)(const void *)b)->sin_addr,
                   sizeof(struct in_addr)) == 0)
            return true;
        if (a->sa_family == AF_INET6 &&
            memcmp(&((const struct sockaddr_in6 *)(const void *)a)
                        ->sin6_addr,
                   &((const struct sockaddr_in6 *)(const void *)b)
                        ->sin6_addr, sizeof(struct in6_addr)) == 0)
            return true;
    }
    return false;
}

/* Whether host names an address of this machine (any it resolves to). */
static bool ck_host_local(const struct ifaddrs *ifs, const char *host)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    bool local = false;

    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    for (struct addrinfo *r = res; r != NULL && !local; r = r->ai_next)
        local = ck_addr_local(ifs, r->ai_addr);
    freeaddrinfo(res);
    return local;
}

struct ck_usable {
    const struct gview *v;
    const bool         *local;          /* per member: on this machine */
    uint64_t            now;
};

static bool ck_usable(void *arg, size_t i)
{
    const struct ck_usable *u = arg;

    if ((long)i == u->v->self || u->v->peer[i] == NULL)
        return false;
    if (u->local != NULL && u->local[i])
        return false;
    return !gpeer_suspect(u->v->peer[i], u->now);
}

size_t tfs_group_ckpt_members(struct tfs_group *g, const char *place,
                              char (*out)[TFS_GROUP_KEY_MAX], size_t max)
{
    struct gview *v = gview_get(g);
    struct ifaddrs *ifs = NULL;
    bool *local = NULL;
    size_t *order = tfs_calloc(v->m.n, sizeof(*order));
    struct ck_usable u = {v, NULL, tfs_now_ns()};
    size_t n = 0;

    /* Not told which member this node is: none on this machine. */
    if (order != NULL && v->self < 0 && getifaddrs(&ifs) == 0 &&
        (local = tfs_calloc(v->m.n, sizeof(*local))) != NULL) {
        for (size_t i = 0; i < v->m.n; i++)
            local[i] = ck_host_local(ifs, v->m.m[i].host);
        u.local = local;
    }
    if (order != NULL && (v->self >= 0 || local != NULL))
        n = tfs_gmembers_rank(&v->m, place, strlen(place), ck_usable, &u,
                              order, TFS_MIN(max, v->m.n));
    for (size_t i = 0; i < n; i++)
        snprintf(out[i], TFS_GROUP_KEY_MAX, "%s", v->peer[order[i]]->key);
    if (ifs != NULL)
        freeifaddrs(ifs);
    tfs_free(local);
    tfs_free(order);
    gview_put(g, v);
    return n;
}

/* ---- one request ---- */

/* What one transfer reads from or writes to, filled by curl's callbacks. */
struct ck_xfer {
    int           fd;                   /* the body's source or sink */
    uint64_t      size;                 /* to send; or the most to take */
    uint64_t      off;
    XXH3_state_t *xs;                   /* of what arrives */
    int           err;                  /* a failed read or write */
    bool          over;                 /* more than size came */
    long          status;
    char          sum[17];              /* the answer's X-Tierfs-Checksum */
    char          text[CK_ERR_MAX];     /* an answer that is not 2xx */
    size_t        text_len;
    struct tfs_buf *mem;                /* a list: the body, into memory */
};

static size_t ck_read(char *buf, size_t size, size_t n, void *arg)
{
    struct ck_xfer *x = arg;
    size_t want = (size_t)TFS_MIN((uint64_t)(size * n), x->size - x->off);
    ssize_t got;

    if (want == 0)
        return 0;
    do
        got = pread(x->fd, buf, want, (off_t)x->off);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
        x->err = got < 0 ? errno : EIO;     /* shrank under us */
        return CURL_READFUNC_ABORT;
    }
    x->off += (uint64_t)got;
    return (size_t)got;
}

/* Keep the answer's checksum header; learn the status before the body. */
static size_t ck_header(char *line, size_t size, size_t n, void *arg)
{
    struct ck_xfer *x = arg;
    size_t len = size * n;
    size_t nl = strlen(GROUP_H_SUM);
    int code;

    if (len > 9 && strncmp(line, "HTTP/", 5) == 0 &&
        sscanf(line, "HTTP/%*s %d", &code) == 1) {
        x->status = code;
        x->sum[0] = '\0';
    } else if (len > nl + 1 && strncasecmp(line, GROUP_H_SUM, nl) == 0 &&
               line[nl] == ':') {
        size_t v = nl + 1;

        while (v < len && line[v] == ' ')
            v++;
        if (len - v >= 16) {
            memcpy(x->sum, line + v, 16);
            x->sum[16] = '\0';
        }
    }
    return len;
}

/*
 * An answer's body: for a 200 into the sink (the file, or the list's
 * buffer), hashed as it goes, at most size bytes; for anything else
 * (201, an error) the first CK_ERR_MAX bytes of its text are kept.
 */
static size_t ck_body(char *data, size_t size, size_t n, void *arg)
{
    struct ck_xfer *x = arg;
    size_t len = size * n;

    if (x->status != 200) {
        size_t k = TFS_MIN(len, sizeof(x->text) - 1 - x->text_len);

        memcpy(x->text + x->text_len, data, k);
        x->text_len += k;
        x->text[x->text_len] = '\0';
        return len;
    }
    if (len > x->size - x->off) {
        x->over = true;
        return 0;                       /* aborts the transfer */
    }
    if (x->mem != NULL) {
        if (tfs_buf_append(x->mem, data, len) < 0) {
            x->err = ENOMEM;
            return 0;
        }
    } else {
        int rc = tfs_pwrite_all(x->fd, data, len, x->off);

        if (rc < 0) {
            x->err = -rc;
            return 0;
        }
    }
    XXH3_64bits_update(x->xs, data, len);
    x->off += len;
    return len;
}

/* The peer of member in the current view (pinned by v), or NULL. */
static struct gpeer *ck_peer(struct gview *v, const char *member)
{
    for (size_t i = 0; i < v->m.n; i++)
        if (v->peer[i] != NULL && strcmp(v->peer[i]->key, member) == 0)
            return v->peer[i];
    return NULL;
}

/*
 * One request of method for what (the path after /v1/ckpt/) to member:
 * with x->size bytes of x->fd as the body of a PUT (digest sum), or the
 * answer's body into x.  0 for a 2xx; -errno with a detail.
 */
static int ck_request(struct tfs_group *g, const char *member,
                      const char *method, const char *what,
                      const char *sum, uint64_t deadline_ns,
                      struct ck_xfer *x)
{
    struct gview *v = gview_get(g);
    struct gpeer *p = ck_peer(v, member);
    struct curl_slist *hdrs = NULL;
    struct tfs_buf url;
    uint64_t now = tfs_now_ns();
    uint64_t budget_ms = 0;
    CURLcode cc = CURLE_OK;
    CURL *h = NULL;
    bool probe = false;
    bool put = strcmp(method, "PUT") == 0;
    int rc;

    if (p == NULL) {
        gview_put(g, v);
        return tfs_err(-ENOENT, "group: %s is not in the member list",
                       member);
    }
    if (deadline_ns != 0 && deadline_ns <= now) {
        gview_put(g, v);
        return tfs_err(-ETIMEDOUT, "group: %s: no time left for %s %s",
                       member, method, what);
    }
    if (deadline_ns != 0)
        budget_ms = TFS_MAX(1, (deadline_ns - now) / 1000000);
    rc = gpeer_take(g, p, deadline_ns != 0 ? deadline_ns
                    : now + g->timeout_ms * 1000000ull, &h, &probe);
    if (rc < 0) {
        gview_put(g, v);
        return tfs_err(rc == -EBUSY ? -ETIMEDOUT : -EHOSTUNREACH,
                       "group: %s: %s", member, rc == -EBUSY
                       ? "every request slot stayed busy"
                       : "suspect after a failure (backing off)");
    }
    if (h == NULL)
        h = curl_easy_init();
    else
        curl_easy_reset(h);
    tfs_buf_init(&url, 0);
    if (h == NULL ||
        tfs_buf_printf(&url, "%s" CK_PATH "%s", p->url, what) < 0 ||
        (hdrs = gpeer_sign(g, method, what)) == NULL) {
        tfs_buf_cleanup(&url);
        gpeer_give(g, p, h, false, probe);
        gview_put(g, v);
        return tfs_err(-ENOMEM, "group: no memory for a request to %s",
                       member);
    }
    if (put) {
        char line[64];
        struct curl_slist *t;

        snprintf(line, sizeof(line), GROUP_H_SUM ": %s", sum);
        t = curl_slist_append(hdrs, line);
        hdrs = t != NULL ? t : hdrs;
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->size);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, ck_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
    }
    curl_easy_setopt(h, CURLOPT_URL, url.p);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (budget_ms != 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)budget_ms);
    /* A big file takes long; a stalled one is cut by the group timeout. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, CK_LOW_SPEED);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     (long)TFS_MAX(1, g->timeout_ms / 1000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)TFS_GROUP_CONNECT_MS);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ck_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, ck_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 256L << 10);
    gpeer_wire_opts(g, h);
    cc = curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    tfs_buf_cleanup(&url);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
    while (x->text_len > 0 && (x->text[x->text_len - 1] == '\n' ||
                               x->text[x->text_len - 1] == '\r'))
        x->text[--x->text_len] = '\0';
    if (x->err != 0)
        rc = tfs_err(-x->err, "group: %s %s %s: %s", method, member, what,
                     put ? "reading the file" : "writing the copy");
    else if (x->over)
        rc = tfs_err(-EFBIG, "group: %s %s: more than %" PRIu64 " bytes",
                     member, what, x->size);
    else if (cc != CURLE_OK)
        rc = tfs_err(cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                     : -EHOSTUNREACH, "group: %s %s %s: %s", method, member,
                     what, curl_easy_strerror(cc));
    else if (x->status == 404)
        rc = tfs_err(-ENOENT, "group: %s holds no %s", member, what);
    else if (x->status / 100 != 2)
        rc = tfs_err(x->status == 507 ? -ENOSPC : x->status == 403
                     ? -EACCES : -EPROTO, "group: %s %s %s: HTTP %ld%s%s",
                     method, member, what, x->status, x->text_len ? ": " : "",
                     x->text);
    else
        rc = 0;
    /* A member that cannot be reached is suspect for the block path too;
       one that answered (an error, a full disk) is not. */
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_OPERATION_TIMEDOUT)
        gpeer_fail(p);
    else if (cc == CURLE_OK)
        gpeer_ok(p);
    gpeer_give(g, p, h, cc == CURLE_OK && rc == 0, probe);
    gview_put(g, v);
    return rc;
}

/* ---- the calls ---- */

/* XXH3-64 of the size bytes of fd, with the state xs. */
static int ck_hash_fd(XXH3_state_t *xs, int fd, uint64_t size,
                      uint64_t *out)
{
    size_t cap = 1u << 20;
    char *buf = tfs_malloc(cap);
    uint64_t off = 0;
    int rc = 0;

    if (buf == NULL)
        return -ENOMEM;
    XXH3_64bits_reset(xs);
    while (off < size && rc == 0) {
        ssize_t got = pread(fd, buf, (size_t)TFS_MIN(cap, size - off),
                            (off_t)off);

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            rc = got < 0 ? -errno : -EIO;
        else {
            XXH3_64bits_update(xs, buf, (size_t)got);
            off += (uint64_t)got;
        }
    }
    *out = XXH3_64bits_digest(xs);
    tfs_free(buf);
    return rc;
}

int tfs_group_ckpt_put(struct tfs_group *g, const char *member,
                       const char *key, int fd, uint64_t deadline_ns)
{
    struct ck_xfer x = {.fd = fd};
    struct stat sb;
    uint64_t digest = 0;
    char sum[17];
    int rc;

    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
        return tfs_err(-EINVAL, "group: %s: not a regular file", key);
    x.size = (uint64_t)sb.st_size;
    x.xs = XXH3_createState();
    rc = x.xs == NULL ? -ENOMEM : ck_hash_fd(x.xs, fd, x.size, &digest);
    if (rc < 0 && rc != -ENOMEM)
        rc = tfs_err(rc, "group: %s: cannot read it: %s", key,
                     tfs_strerror(rc));
    if (rc == 0) {
        snprintf(sum, sizeof(sum), "%016" PRIx64, digest);
        rc = ck_request(g, member, "PUT", key, sum, deadline_ns, &x);
    }
    XXH3_freeState(x.xs);
    return rc;
}

int tfs_group_ckpt_get(struct tfs_group *g, const char *member,
                       const char *key, int fd, uint64_t max,
                       uint64_t deadline_ns, uint64_t *len)
{
    struct ck_xfer x = {.fd = fd, .size = max};
    char sum[17];
    int rc;

    x.xs = XXH3_createState();
    if (x.xs == NULL)
        return -ENOMEM;
    XXH3_64bits_reset(x.xs);
    rc = ck_request(g, member, "GET", key, NULL, deadline_ns, &x);
    snprintf(sum, sizeof(sum), "%016" PRIx64, XXH3_64bits_digest(x.xs));
    if (rc == 0 && strcmp(sum, x.sum) != 0)
        rc = tfs_err(TFS_ECORRUPT, "group: %s of %s: checksum %s, the "
                     "bytes' is %s", key, member, x.sum[0] ? x.sum
                     : "(none)", sum);
    XXH3_freeState(x.xs);
    *len = x.off;
    return rc;
}

int tfs_group_ckpt_list(struct tfs_group *g, const char *member,
                        const char *ns, uint64_t deadline_ns, char **text,
                        size_t *len)
{
    struct tfs_buf b;
    struct ck_xfer x = {.fd = -1, .size = 64u << 20, .mem = &b};
    char what[64];
    int rc;

    tfs_buf_init(&b, 64u << 20);
    x.xs = XXH3_createState();
    if (x.xs == NULL)
        return -ENOMEM;
    XXH3_64bits_reset(x.xs);
    snprintf(what, sizeof(what), "%s/", ns);
    rc = ck_request(g, member, "GET", what, NULL, deadline_ns, &x);
    XXH3_freeState(x.xs);
    if (rc == 0 && tfs_buf_append(&b, "", 1) < 0)
        rc = -ENOMEM;
    if (rc == 0) {
        *len = b.len - 1;
        *text = tfs_buf_steal(&b);
        rc = *text != NULL ? 0 : -ENOMEM;
    }
    tfs_buf_cleanup(&b);
    return rc;
}
