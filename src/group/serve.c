/* SPDX-License-Identifier: MIT */
/*
 * The peer server: answers GET /v1/block/<id>?key=&version=&size=&index=
 * from this node's tiers (cache/peer.h: RAM, disk, or one read of the
 * store shared by every requester of the block), on libmicrohttpd with
 * a thread per connection (a request may wait for the store; peers keep
 * their connections alive).
 *
 * A request is served only when it is signed with the group secret
 * within the time window and not replayed (auth.c: 403 otherwise), is
 * well formed (400), and names a block of this node's store: the id it
 * asks for must be the one this node computes from the object's name,
 * version and index with its own store identity and block size (409
 * otherwise), so a peer configured for another store, or another block
 * size, is refused rather than served the wrong bytes.  The answer
 * carries the block id, the version and the block's chunked digest
 * (common/csum.h: kept with the block, so it is hashed at most once a
 * block, and not at all when it came from the disk tier), which the
 * requester checks (peer.c).
 *
 * It also keeps checkpoint copies for its peers under /v1/ckpt/ (PUT a
 * file, GET it back, GET a namespace's list; docs/group.md): this file
 * is only their HTTP side, ckstore.c keeps them.  A PUT is checked when
 * its headers are in, its body streamed to the store piece by piece as
 * libmicrohttpd hands it over, and answered once it is durable; a
 * request that ends any other way (its client gone) drops what it wrote
 * (serve_completed).  A member with no cache answers block requests 503.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/bytes.h"
#include "common/util.h"
#include "group/group_int.h"
#include "metrics/http.h"
#include "tierfs/log.h"

#define SERVE_CONN_LIMIT 1024
#define SERVE_IDLE_S 60                 /* an idle kept-alive connection */

struct gserve {
    struct MHD_Daemon *d;
    struct tfs_group  *g;               /* borrowed */
    uint16_t           port;
    atomic_uint_fast64_t logged_ns;     /* the last refusal logged */
};

/* A block being sent: pinned until the response is freed, which
   libmicrohttpd does once the last byte is sent or the connection gone. */
struct serve_body {
    struct tfs_group    *g;
    void                *pin;
    const unsigned char *data;
    size_t               len;
    unsigned char       *spoilt;        /* fault_corrupt's copy, owned */
};

static void serve_free(void *cls)
{
    struct serve_body *b = cls;

    tfs_cache_peer_put(b->g->c, b->pin);
    tfs_free(b->spoilt);
    tfs_free(b);
}

static enum MHD_Result serve_text(struct MHD_Connection *conn,
                                  unsigned status, const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; charset=utf-8");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A refusal: counted in n (group.NAME), logged once in a while,
   answered with why. */
static enum MHD_Result serve_refuse_as(struct gserve *s,
                                       struct MHD_Connection *conn,
                                       unsigned status, const char *why,
                                       atomic_uint_fast64_t *n,
                                       const char *name)
{
    char text[320];

    atomic_fetch_add(n, 1);
    snprintf(text, sizeof(text), "%s\n", why);
    if (tfs_now_ns() - atomic_load(&s->logged_ns) >= 1000000000ull) {
        atomic_store(&s->logged_ns, tfs_now_ns());  /* one a second: a
                                                       flood stays out */
        TFS_WARN("group: refused a peer request (%u): %s (more are "
                 "counted in group.%s)", status, why, name);
    }
    return serve_text(conn, status, text);
}

static enum MHD_Result serve_refuse(struct gserve *s,
                                    struct MHD_Connection *conn,
                                    unsigned status, const char *why)
{
    if (status == MHD_HTTP_CONFLICT)
        return serve_refuse_as(s, conn, status, why, &s->g->refused_store,
                               "refused_store");
    return serve_refuse_as(s, conn, status, why, &s->g->refused, "refused");
}

static const char *serve_arg(struct MHD_Connection *conn,
                             enum MHD_ValueKind kind, const char *name)
{
    return MHD_lookup_connection_value(conn, kind, name);
}

/* The 32 lowercase hex digits of a block id at p into id; false if not. */
static bool serve_id(const char *p, uint8_t *id)
{
    for (size_t i = 0; i < TFS_PEER_ID_LEN; i++) {
        int hi = tfs_hexval_lower(p[2 * i]);
        int lo = hi < 0 ? -1 : tfs_hexval_lower(p[2 * i + 1]);

        if (lo < 0)
            return false;
        id[i] = (uint8_t)(hi << 4 | lo);
    }
    return p[2 * TFS_PEER_ID_LEN] == '\0';
}

static unsigned serve_status(int rc)
{
    if (rc == -ENOENT)
        return MHD_HTTP_NOT_FOUND;
    if (rc == -ETIMEDOUT)
        return MHD_HTTP_GATEWAY_TIMEOUT;
    if (rc == -ENOMEM || rc == -EAGAIN)
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    return MHD_HTTP_BAD_GATEWAY;
}

/* Send block pb (asked for as hex) from this node's tiers. */
static enum MHD_Result serve_block(struct gserve *s,
                                   struct MHD_Connection *conn,
                                   const struct tfs_peer_block *pb,
                                   const char *hex)
{
    static const char *const from_name[] = {"ram", "disk", "store"};
    struct tfs_group *g = s->g;
    struct serve_body *b = tfs_calloc(1, sizeof(*b));
    struct MHD_Response *r;
    enum tfs_peer_src from = TFS_PEER_FROM_STORE;
    enum MHD_Result ret;
    uint64_t digest;
    char sum[17];
    char text[320];
    int rc;

    if (b == NULL)
        return serve_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "no memory\n");
    b->g = g;
    b->len = pb->len;
    rc = tfs_cache_peer_get(g->c, pb, &b->pin, &b->data, &digest, &from);
    if (rc < 0) {
        atomic_fetch_add(&g->serve_errors, 1);
        snprintf(text, sizeof(text), "%s: %s\n", tfs_strerror(rc),
                 tfs_errdetail());
        tfs_free(b);
        return serve_text(conn, serve_status(rc), text);
    }
    snprintf(sum, sizeof(sum), "%016" PRIx64, digest);
    if (g->fault_corrupt != 0 && b->len > 0 &&
        (atomic_fetch_add(&g->answers, 1) + 1) % g->fault_corrupt == 0 &&
        (b->spoilt = tfs_malloc(b->len)) != NULL) {
        memcpy(b->spoilt, b->data, b->len);     /* the checksum stays */
        b->spoilt[b->len / 2] ^= 0x40;
        b->data = b->spoilt;
    }
    /* sent from the pinned block itself (or the spoilt copy): no copy */
    r = MHD_create_response_from_buffer_with_free_callback_cls(
        b->len, (void *)b->data, serve_free, b);
    if (r == NULL) {
        serve_free(b);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/octet-stream");
    MHD_add_response_header(r, GROUP_H_BLOCK, hex);
    MHD_add_response_header(r, GROUP_H_VERSION, pb->version);
    MHD_add_response_header(r, GROUP_H_SUM, sum);
    MHD_add_response_header(r, GROUP_H_SOURCE, from_name[from]);
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&g->served, 1);
    atomic_fetch_add(&g->served_bytes, pb->len);
    atomic_fetch_add(from == TFS_PEER_FROM_RAM ? &g->served_ram
                     : from == TFS_PEER_FROM_DISK ? &g->served_disk
                     : &g->served_store, 1);
    return ret;
}

/*
 * Is the request signed with the group secret for method and block (the
 * path after its prefix), within the window and not replayed?  If not,
 * the refusal is queued and its result put in *ret.  Nothing else of a
 * request is looked at before this.
 */
static bool serve_signed(struct gserve *s, struct MHD_Connection *conn,
                         const char *method, const char *block,
                         enum MHD_Result *ret)
{
    const char *t = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_TIME);
    const char *nonce = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_NONCE);
    const char *sig = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_SIG);
    uint64_t time_s;
    char why[300];
    int rc;

    if (t == NULL || nonce == NULL || sig == NULL ||
        tfs_parse_u64(t, &time_s) < 0) {
        *ret = serve_refuse(s, conn, MHD_HTTP_FORBIDDEN,
                            "unsigned request: " GROUP_H_TIME ", "
                            GROUP_H_NONCE " and " GROUP_H_SIG " wanted");
        return false;
    }
    rc = tfs_gauth_check(&s->g->auth, method, block, time_s, nonce, sig,
                         (uint64_t)tfs_wall_ns() / 1000000000u);
    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", tfs_errdetail());
        *ret = serve_refuse(s, conn, rc == -EAGAIN
                            ? MHD_HTTP_SERVICE_UNAVAILABLE
                            : MHD_HTTP_FORBIDDEN, why);
        return false;
    }
    return true;
}

/* GET /v1/block/<id>?key=&version=&size=&index= */
static enum MHD_Result serve_blocks(struct gserve *s,
                                    struct MHD_Connection *conn,
                                    const char *url)
{
    struct tfs_group *g = s->g;
    const char *hex = url + strlen(GROUP_PATH);
    const char *key, *ver, *size_s, *index_s;
    uint8_t id[TFS_PEER_ID_LEN];
    struct tfs_peer_block pb;
    uint64_t size, index;
    enum MHD_Result ret;
    char why[300];
    int rc;

    if (!serve_signed(s, conn, "GET", hex, &ret))
        return ret;
    if (g->c == NULL) {
        atomic_fetch_add(&g->serve_errors, 1);
        return serve_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                          "this member has no cache\n");
    }
    if (!serve_id(hex, id))
        return serve_refuse(s, conn, MHD_HTTP_BAD_REQUEST,
                            "bad block id: want 32 lowercase hex digits");
    key = serve_arg(conn, MHD_GET_ARGUMENT_KIND, "key");
    ver = serve_arg(conn, MHD_GET_ARGUMENT_KIND, "version");
    size_s = serve_arg(conn, MHD_GET_ARGUMENT_KIND, "size");
    index_s = serve_arg(conn, MHD_GET_ARGUMENT_KIND, "index");
    if (key == NULL || ver == NULL || size_s == NULL || index_s == NULL ||
        key[0] == '\0' || tfs_parse_u64(size_s, &size) < 0 ||
        tfs_parse_u64(index_s, &index) < 0)
        return serve_refuse(s, conn, MHD_HTTP_BAD_REQUEST,
                            "want key, version, size and index");
    rc = tfs_cache_peer_ref(g->c, key, ver, size, index, &pb);
    if (rc < 0) {                       /* past the end in our blocks */
        snprintf(why, sizeof(why), "%s (another block size?)",
                 tfs_errdetail());
        return serve_refuse(s, conn, MHD_HTTP_CONFLICT, why);
    }
    if (memcmp(pb.id, id, sizeof(id)) != 0)
        return serve_refuse(s, conn, MHD_HTTP_CONFLICT,
                            "not a block of this node's store: its store "
                            "identity or block size differ");
    return serve_block(s, conn, &pb, hex);
}

/* ---- checkpoint copies (ckstore.c keeps them) ---- */

/* A checkpoint copy's body on its way: the request's, freed when it
   completes (serve_completed), the tmp file dropped if it never ended. */
struct serve_put {
    struct gck_put *p;                  /* NULL once ended or dropped */
    uint64_t        len;                /* its Content-Length */
    int             rc;                 /* the first failure, or 0 */
    char            why[320];           /* and its reason */
};

/* The first call's mark on every other request (serve_answer). */
static int serve_seen;

/* A failed checkpoint copy request: its status, counted, with why. */
static enum MHD_Result serve_ckpt_fail(struct gserve *s,
                                       struct MHD_Connection *conn, int rc,
                                       const char *why)
{
    struct tfs_group *g = s->g;
    char text[340];

    if (rc == -EINVAL || rc == -EBADMSG)
        return serve_refuse_as(s, conn, MHD_HTTP_BAD_REQUEST, why,
                               &g->ckpt_bad, "ckpt_bad");
    if (rc == -EDQUOT)
        return serve_refuse_as(s, conn, MHD_HTTP_INSUFFICIENT_STORAGE, why,
                               &g->ckpt_full, "ckpt_full");
    snprintf(text, sizeof(text), "%s\n", why);
    if (rc == -ENOENT)
        return serve_text(conn, MHD_HTTP_NOT_FOUND, text);
    atomic_fetch_add(&g->serve_errors, 1);
    TFS_WARN("group: a checkpoint copy request failed: %s", why);
    if (rc == -ENOSPC)
        return serve_text(conn, MHD_HTTP_INSUFFICIENT_STORAGE, text);
    if (rc == -ENOMEM)
        return serve_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, text);
    return serve_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text);
}

/* X-Tierfs-Checksum: exactly 16 lowercase hex digits. */
static bool serve_digest(const char *p, uint64_t *out)
{
    uint64_t v = 0;

    if (p == NULL || strlen(p) != 16)
        return false;
    for (size_t i = 0; i < 16; i++) {
        int d = tfs_hexval_lower(p[i]);

        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* The key, length and digest of a PUT, checked; its put begun into sp.
   -EMSGSIZE: no Content-Length (411). */
static int serve_put_begin(struct gserve *s, struct MHD_Connection *conn,
                           const char *path, struct serve_put *sp)
{
    const char *cl = serve_arg(conn, MHD_HEADER_KIND,
                               MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *sum = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_SUM);
    struct gck_key k;
    uint64_t digest;
    bool is_list;
    int rc = gck_key_parse(path, &k, &is_list);

    if (rc == 0 && is_list)
        rc = tfs_err(-EINVAL, "a PUT wants NS/STEP/NAME, not a list");
    if (rc < 0)
        return rc;
    if (cl == NULL)
        return tfs_err(-EMSGSIZE, "Content-Length wanted");
    if (tfs_parse_u64(cl, &sp->len) < 0)
        return tfs_err(-EINVAL, "bad Content-Length");
    if (!serve_digest(sum, &digest))
        return tfs_err(-EINVAL, GROUP_H_SUM " wanted: the body's XXH3-64, "
                       "16 lowercase hex digits");
    return gck_put_begin(s->g->ck, &k, sp->len, digest, &sp->p);
}

/*
 * PUT /v1/ckpt/NS/STEP/NAME, its headers in: checked now, so that a
 * refusal is answered before the body is sent (a client that asked
 * "Expect: 100-continue" never sends it; libmicrohttpd closes the
 * connection after an early answer).  Accepted, the request carries its
 * put in *con_cls for the body's calls.
 */
static enum MHD_Result serve_ckpt_put(struct gserve *s,
                                      struct MHD_Connection *conn,
                                      const char *path, void **con_cls)
{
    struct serve_put *sp;
    enum MHD_Result ret;
    int rc;

    if (!serve_signed(s, conn, "PUT", path, &ret))
        return ret;
    if (s->g->ck == NULL)
        return serve_refuse(s, conn, MHD_HTTP_FORBIDDEN,
                            "this member keeps no checkpoint copies");
    sp = tfs_calloc(1, sizeof(*sp));
    if (sp == NULL)
        return serve_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "no memory\n");
    rc = serve_put_begin(s, conn, path, sp);
    if (rc == -EMSGSIZE) {
        tfs_free(sp);
        atomic_fetch_add(&s->g->ckpt_bad, 1);
        return serve_text(conn, MHD_HTTP_LENGTH_REQUIRED,
                          "Content-Length wanted\n");
    }
    if (rc < 0) {
        char why[320];

        snprintf(why, sizeof(why), "%s", tfs_errdetail());
        tfs_free(sp);
        return serve_ckpt_fail(s, conn, rc, why);
    }
    *con_cls = sp;
    return MHD_YES;
}

static void serve_put_failed(struct serve_put *sp, int rc)
{
    sp->rc = rc;
    snprintf(sp->why, sizeof(sp->why), "%s", tfs_errdetail());
}

/*
 * A piece of a PUT's body (*size bytes at data), or its end (*size 0),
 * when it is answered.  A piece that fails drops the put; the rest of
 * the body is read and dropped, and the end answers why.
 */
static enum MHD_Result serve_ckpt_body(struct gserve *s,
                                       struct MHD_Connection *conn,
                                       struct serve_put *sp,
                                       const char *data, size_t *size)
{
    int rc;

    if (*size > 0) {
        rc = sp->p != NULL ? gck_put_feed(sp->p, data, *size) : 0;
        if (rc < 0) {
            serve_put_failed(sp, rc);
            gck_put_abort(sp->p);
            sp->p = NULL;
        }
        *size = 0;
        return MHD_YES;
    }
    if (sp->p != NULL) {
        rc = gck_put_end(sp->p);        /* frees it */
        sp->p = NULL;
        if (rc < 0)
            serve_put_failed(sp, rc);
    }
    if (sp->rc < 0)
        return serve_ckpt_fail(s, conn, sp->rc, sp->why);
    atomic_fetch_add(&s->g->ckpt_puts, 1);
    atomic_fetch_add(&s->g->ckpt_put_bytes, sp->len);
    return serve_text(conn, MHD_HTTP_CREATED, "stored\n");
}

/* GET /v1/ckpt/NS/STEP/NAME: the file itself, sent from its fd. */
static enum MHD_Result serve_ckpt_get(struct gserve *s,
                                      struct MHD_Connection *conn,
                                      const struct gck_key *k)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    uint64_t size;
    uint64_t digest;
    char sum[17];
    int fd;
    int rc = gck_get(s->g->ck, k, &fd, &size, &digest);

    if (rc < 0)
        return serve_ckpt_fail(s, conn, rc, tfs_errdetail());
    r = MHD_create_response_from_fd((size_t)size, fd);     /* owns fd */
    if (r == NULL) {
        close(fd);
        return MHD_NO;
    }
    snprintf(sum, sizeof(sum), "%016" PRIx64, digest);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/octet-stream");
    MHD_add_response_header(r, GROUP_H_SUM, sum);
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&s->g->ckpt_gets, 1);
    atomic_fetch_add(&s->g->ckpt_get_bytes, size);
    return ret;
}

/* GET /v1/ckpt/NS/: what is kept of namespace ns. */
static enum MHD_Result serve_ckpt_list(struct gserve *s,
                                       struct MHD_Connection *conn,
                                       const char *ns)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    struct tfs_buf b;
    size_t len;
    char *text;
    int rc = gck_list(s->g->ck, ns, &b);

    if (rc < 0)
        return serve_ckpt_fail(s, conn, rc, tfs_errdetail());
    len = b.len;
    text = tfs_buf_steal(&b);
    if (text == NULL)
        return serve_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "no memory\n");
    r = MHD_create_response_from_buffer_with_free_callback(len, text,
                                                           tfs_free);
    if (r == NULL) {
        tfs_free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&s->g->ckpt_lists, 1);
    return ret;
}

/* GET /v1/ckpt/...: path is what follows the prefix. */
static enum MHD_Result serve_ckpt(struct gserve *s,
                                  struct MHD_Connection *conn,
                                  const char *method, const char *path)
{
    enum MHD_Result ret;
    struct gck_key k;
    bool is_list;
    int rc;

    if (strcmp(method, "GET") != 0)
        return serve_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "method not allowed: GET or PUT\n");
    if (!serve_signed(s, conn, "GET", path, &ret))
        return ret;
    if (s->g->ck == NULL)
        return serve_refuse(s, conn, MHD_HTTP_FORBIDDEN,
                            "this member keeps no checkpoint copies");
    rc = gck_key_parse(path, &k, &is_list);
    if (rc < 0)
        return serve_ckpt_fail(s, conn, rc, tfs_errdetail());
    return is_list ? serve_ckpt_list(s, conn, k.ns)
                   : serve_ckpt_get(s, conn, &k);
}

static bool serve_is_ckpt(const char *url)
{
    return strncmp(url, GCK_PATH, strlen(GCK_PATH)) == 0;
}

/* A request is over (answered, or its client gone): a put that never
   ended leaves nothing behind. */
static void serve_completed(void *cls, struct MHD_Connection *conn,
                            void **con_cls,
                            enum MHD_RequestTerminationCode toe)
{
    struct serve_put *sp = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (sp == NULL || *con_cls == (void *)&serve_seen)
        return;
    gck_put_abort(sp->p);
    tfs_free(sp);
    *con_cls = NULL;
}

static enum MHD_Result serve_answer(void *cls, struct MHD_Connection *conn,
                                    const char *url, const char *method,
                                    const char *version,
                                    const char *upload_data,
                                    size_t *upload_data_size, void **con_cls)
{
    struct gserve *s = cls;

    (void)version;
    /*
     * libmicrohttpd calls this once when the headers are in and again
     * for the body; an answer queued on the first call closes the
     * connection after it (0.9.75), which cost every peer request a new
     * connection.  So the first call only marks the request, but for a
     * checkpoint copy's PUT, whose body is better refused unsent.
     */
    if (*con_cls == NULL && serve_is_ckpt(url) && strcmp(method, "PUT") == 0)
        return serve_ckpt_put(s, conn, url + strlen(GCK_PATH), con_cls);
    if (*con_cls == NULL) {
        *con_cls = &serve_seen;
        return MHD_YES;
    }
    if (*con_cls != (void *)&serve_seen)
        return serve_ckpt_body(s, conn, *con_cls, upload_data,
                               upload_data_size);
    if (serve_is_ckpt(url))
        return serve_ckpt(s, conn, method, url + strlen(GCK_PATH));
    if (strcmp(method, "GET") != 0)
        return serve_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "method not allowed\n");
    if (strncmp(url, GROUP_PATH, strlen(GROUP_PATH)) != 0)
        return serve_text(conn, MHD_HTTP_NOT_FOUND,
                          "not found; a tierfs group peer serves "
                          GROUP_PATH "<block id> and " GCK_PATH "\n");
    return serve_blocks(s, conn, url);
}

int gserve_start(struct tfs_group *g, struct gserve **out)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
    struct gserve *s = tfs_calloc(1, sizeof(*s));
    bool ipv6 = false;
    int fd = -1;
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->g = g;
    rc = tfs_http_listen(g->listen, "group", &fd, &ipv6);
    if (rc < 0) {
        tfs_free(s);
        return rc;
    }
    s->port = tfs_http_bound_port(fd);
    if (ipv6)
        flags |= MHD_USE_IPv6;
    if (g->tls_cert != NULL && !MHD_is_feature_supported(MHD_FEATURE_TLS)) {
        close(fd);
        tfs_free(s);
        return tfs_err(TFS_EOPTION, "group: this libmicrohttpd has no TLS");
    }
    if (g->tls_cert != NULL)
        s->d = MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL,
                                serve_answer, s, MHD_OPTION_LISTEN_SOCKET,
                                (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                                (unsigned)SERVE_CONN_LIMIT,
                                MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)SERVE_IDLE_S,
                                MHD_OPTION_NOTIFY_COMPLETED,
                                serve_completed, s,
                                MHD_OPTION_HTTPS_MEM_CERT, g->tls_cert,
                                MHD_OPTION_HTTPS_MEM_KEY, g->tls_key,
                                MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, serve_answer, s,
                                MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                MHD_OPTION_CONNECTION_LIMIT,
                                (unsigned)SERVE_CONN_LIMIT,
                                MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)SERVE_IDLE_S,
                                MHD_OPTION_NOTIFY_COMPLETED,
                                serve_completed, s, MHD_OPTION_END);
    if (s->d == NULL) {
        close(fd);
        tfs_free(s);
        return tfs_err(-EIO, "group: cannot start the peer server on %s%s",
                       g->listen, g->tls_cert ? " (check the TLS "
                       "certificate and key: they must be a pair)" : "");
    }
    *out = s;
    return 0;
}

uint16_t gserve_port(const struct gserve *s)
{
    return s->port;
}

void gserve_stop(struct gserve *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->d);
    tfs_free(s);
}
