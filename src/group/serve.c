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

/* A refusal: counted, logged once in a while, answered with why. */
static enum MHD_Result serve_refuse(struct gserve *s,
                                    struct MHD_Connection *conn,
                                    unsigned status, const char *why)
{
    char text[320];

    atomic_fetch_add(status == MHD_HTTP_CONFLICT ? &s->g->refused_store
                     : &s->g->refused, 1);
    snprintf(text, sizeof(text), "%s\n", why);
    if (tfs_now_ns() - atomic_load(&s->logged_ns) >= 1000000000ull) {
        atomic_store(&s->logged_ns, tfs_now_ns());  /* one a second: a
                                                       flood stays out */
        TFS_WARN("group: refused a peer request (%u): %s (more are "
                 "counted in group.refused)", status, why);
    }
    return serve_text(conn, status, text);
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

static enum MHD_Result serve_answer(void *cls, struct MHD_Connection *conn,
                                    const char *url, const char *method,
                                    const char *version,
                                    const char *upload_data,
                                    size_t *upload_data_size, void **con_cls)
{
    struct gserve *s = cls;
    struct tfs_group *g = s->g;
    const char *hex = url + strlen(GROUP_PATH);
    const char *t, *nonce, *sig, *key, *ver, *size_s, *index_s;
    uint8_t id[TFS_PEER_ID_LEN];
    struct tfs_peer_block pb;
    uint64_t time_s, size, index;
    char why[300];
    int rc;

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    /*
     * libmicrohttpd calls this once when the headers are in and again
     * for the body; an answer queued on the first call closes the
     * connection after it (0.9.75), which cost every peer request a new
     * connection.  So the first call only marks the request.
     */
    if (*con_cls == NULL) {
        static int seen;

        *con_cls = &seen;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0)
        return serve_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "method not allowed\n");
    if (strncmp(url, GROUP_PATH, strlen(GROUP_PATH)) != 0)
        return serve_text(conn, MHD_HTTP_NOT_FOUND,
                          "not found; a tierfs group peer serves "
                          GROUP_PATH "<block id>\n");
    t = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_TIME);
    nonce = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_NONCE);
    sig = serve_arg(conn, MHD_HEADER_KIND, GROUP_H_SIG);
    if (t == NULL || nonce == NULL || sig == NULL ||
        tfs_parse_u64(t, &time_s) < 0)
        return serve_refuse(s, conn, MHD_HTTP_FORBIDDEN,
                            "unsigned request: " GROUP_H_TIME ", "
                            GROUP_H_NONCE " and " GROUP_H_SIG " wanted");
    rc = tfs_gauth_check(&g->auth, "GET", hex, time_s, nonce, sig,
                         (uint64_t)tfs_wall_ns() / 1000000000u);
    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", tfs_errdetail());
        return serve_refuse(s, conn, rc == -EAGAIN
                            ? MHD_HTTP_SERVICE_UNAVAILABLE
                            : MHD_HTTP_FORBIDDEN, why);
    }
    /* signed first: nothing of a request is looked at before that */
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
                                MHD_OPTION_HTTPS_MEM_CERT, g->tls_cert,
                                MHD_OPTION_HTTPS_MEM_KEY, g->tls_key,
                                MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, serve_answer, s,
                                MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                MHD_OPTION_CONNECTION_LIMIT,
                                (unsigned)SERVE_CONN_LIMIT,
                                MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)SERVE_IDLE_S, MHD_OPTION_END);
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
