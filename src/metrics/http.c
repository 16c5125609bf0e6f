/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus endpoint: libmicrohttpd with its internal polling
 * thread, serving GET /metrics from a fill callback.
 *
 * The listening socket is made here (parse, resolve, bind, listen) and
 * handed to the daemon, so a port in use fails with -EADDRINUSE and a
 * clear detail rather than libmicrohttpd's bare NULL.  Bodies are built
 * per request in a capped tfs_buf and handed to the response, which frees
 * them with tfs_free.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/util.h"
#include "metrics/http.h"
#include "tierfs/log.h"

#define HTTP_BODY_MAX (16u << 20)       /* cap of one exposition */
#define HTTP_CONN_LIMIT 64
#define HTTP_TIMEOUT_S 10

struct tfs_http {
    struct MHD_Daemon *d;               /* owned */
    tfs_http_fill_fn  *fill;
    void              *arg;             /* borrowed */
    uint16_t           port;            /* bound port */
};

/* Split addr into host and port strings (host "127.0.0.1" when absent). */
static int http_split(const char *addr, const char *what, char *host,
                      size_t hsize, uint64_t *port)
{
    const char *colon = strrchr(addr, ':');
    const char *h = "127.0.0.1";
    size_t hlen = strlen(h);

    if (colon != NULL) {
        h = addr;
        hlen = (size_t)(colon - addr);
        if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
            h++;
            hlen -= 2;
        }
    }
    if (hlen == 0 || hlen >= hsize ||
        tfs_parse_u64(colon ? colon + 1 : addr, port) < 0 || *port > 65535)
        return tfs_err(TFS_EOPTION, "%s address '%s': want HOST:PORT", what,
                       addr);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return 0;
}

int tfs_http_listen(const char *addr, const char *what, int *fd_out,
                    bool *ipv6)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char host[256];
    char port_s[8];
    uint64_t port;
    int one = 1;
    int fd;
    int rc = http_split(addr, what, host, sizeof(host), &port);

    if (rc < 0)
        return rc;
    snprintf(port_s, sizeof(port_s), "%u", (unsigned)port);
    if (getaddrinfo(host, port_s, &hints, &ai) != 0 || ai == NULL)
        return tfs_err(TFS_EOPTION, "%s address '%s': cannot resolve "
                       "'%s'", what, addr, host);
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = tfs_err(-errno, "%s: socket", what);
        goto out_free;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        rc = tfs_err(-errno, "%s: cannot listen on %s", what, addr);
        close(fd);
        goto out_free;
    }
    *ipv6 = ai->ai_family == AF_INET6;
    *fd_out = fd;
out_free:
    freeaddrinfo(ai);
    return rc;
}

uint16_t tfs_http_bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return 0;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void http_free_body(void *p)
{
    tfs_free(p);
}

/* Queue a response with status and body (taken; NULL for empty). */
static enum MHD_Result http_reply(struct MHD_Connection *conn,
                                  unsigned status, char *body, size_t len,
                                  const char *type)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer_with_free_callback(
        len, body, http_free_body);
    if (r == NULL) {
        tfs_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Reply with a short static text (copied). */
static enum MHD_Result http_text(struct MHD_Connection *conn,
                                 unsigned status, const char *text)
{
    char *body = tfs_strdup(text);

    if (body == NULL)
        return MHD_NO;
    return http_reply(conn, status, body, strlen(body),
                      "text/plain; charset=utf-8");
}

static enum MHD_Result http_answer(void *cls, struct MHD_Connection *conn,
                                   const char *url, const char *method,
                                   const char *version,
                                   const char *upload_data,
                                   size_t *upload_data_size, void **con_cls)
{
    struct tfs_http *h = cls;
    struct tfs_buf body;
    int rc;

    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return http_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                         "method not allowed\n");
    if (strcmp(url, "/metrics") != 0)
        return http_text(conn, MHD_HTTP_NOT_FOUND,
                         "not found; try /metrics\n");
    tfs_buf_init(&body, HTTP_BODY_MAX);
    rc = h->fill(h->arg, &body);
    if (rc == 0)
        rc = tfs_buf_error(&body);      /* a partial text is not served */
    if (rc < 0) {
        TFS_WARN("metrics: " TFS_CAUSE_FMT,
                 TFS_CAUSE_ARGS(rc, tfs_errdetail()));
        tfs_buf_cleanup(&body);
        return http_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                         "cannot read the statistics\n");
    }
    return http_reply(conn, MHD_HTTP_OK, body.len ? tfs_buf_steal(&body)
                                                  : NULL, body.len,
                      "text/plain; version=0.0.4; charset=utf-8");
}

int tfs_http_start(const char *addr, tfs_http_fill_fn *fill, void *arg,
                   struct tfs_http **out)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    struct tfs_http *h;
    bool ipv6 = false;
    int fd = -1;
    int rc;

    h = tfs_calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    h->fill = fill;
    h->arg = arg;
    rc = tfs_http_listen(addr, "metrics", &fd, &ipv6);
    if (rc < 0) {
        tfs_free(h);
        return rc;
    }
    h->port = tfs_http_bound_port(fd);
    if (ipv6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, http_answer, h,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)HTTP_CONN_LIMIT,
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_END);
    if (h->d == NULL) {
        close(fd);
        tfs_free(h);
        return tfs_err(-EIO, "metrics: cannot start the HTTP server on %s",
                       addr);
    }
    *out = h;
    return 0;
}

uint16_t tfs_http_port(const struct tfs_http *h)
{
    return h->port;
}

void tfs_http_stop(struct tfs_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->d);
    tfs_free(h);
}
