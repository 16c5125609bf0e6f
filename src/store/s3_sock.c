/* SPDX-License-Identifier: MIT */
/*
 * Plain TCP for the S3 layer's own GETs (s3_http.c, "plain-HTTP GETs"):
 * connect to an endpoint's base URL, send, receive and receive scattered,
 * each bounded by a total limit and a stall limit.  No HTTP here.
 *
 * Sockets are non-blocking; every wait is a poll() until the earlier of
 * the total end and the stall limit from the wait's start, so a server
 * that stops sending fails the call with -ETIMEDOUT instead of hanging
 * its thread.  Errors come back in the layer's space: -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH, -ECONNRESET, with a detail naming the peer.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store/s3_int.h"

/* Wait until fd is ready for ev: 0, or -ETIMEDOUT at the limits. */
static int sock_wait(const struct s3_io *io, int fd, short ev)
{
    uint64_t now = tfs_now_ns();
    uint64_t until = io->stall_ns != 0 ? now + io->stall_ns : 0;

    if (io->end_ns != 0 && (until == 0 || io->end_ns < until))
        until = io->end_ns;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = ev};
        int ms = -1;
        int r;

        if (until != 0) {
            if (now >= until)
                return -ETIMEDOUT;
            ms = (int)TFS_MIN((until - now + 999999) / 1000000,
                              (uint64_t)INT_MAX);
        }
        tfs_waiting();
        r = poll(&pf, 1, ms);
        if (r > 0)
            return 0;                   /* ready, or an error to read */
        if (r < 0 && errno != EINTR)
            return -errno;
        now = tfs_now_ns();
    }
}

/* "http://host[:port][/...]" into host (brackets of an IPv6 address
   dropped) and port. */
static int sock_split(const char *url, char *host, size_t hmax, char *port,
                      size_t pmax)
{
    const char *h = url + 7;            /* after "http://" */
    const char *end;
    const char *colon;
    size_t n;

    if (strncmp(url, "http://", 7) != 0)
        return -EINVAL;
    if (*h == '[') {
        end = strchr(h, ']');
        if (end == NULL)
            return -EINVAL;
        n = (size_t)(end - h - 1);
        h++;
        colon = end[1] == ':' ? end + 1 : NULL;
        end++;
    } else {
        end = h + strcspn(h, ":/");
        n = (size_t)(end - h);
        colon = *end == ':' ? end : NULL;
    }
    if (n == 0 || n >= hmax)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    n = colon != NULL ? strcspn(colon + 1, "/") : 2;
    if (n == 0 || n >= pmax)
        return -EINVAL;
    if (colon != NULL) {
        memcpy(port, colon + 1, n);
        port[n] = '\0';
    } else {
        memcpy(port, "80", 3);
    }
    return 0;
}

/* One address: a connected socket in *out, or an error. */
static int sock_try(const struct addrinfo *ai, const struct s3_io *io,
                    int *out)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                                       SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    int err = 0;
    socklen_t elen = sizeof(err);
    int rc;

    if (fd < 0)
        return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        rc = 0;
    } else if (errno != EINPROGRESS) {
        rc = -errno;
    } else {
        rc = sock_wait(io, fd, POLLOUT);
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
            rc = -errno;
        else if (rc == 0 && err != 0)
            rc = -err;
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    *out = fd;
    return 0;
}

int tfs_s3_sock_connect(const char *base_url, const struct s3_io *io,
                        int *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char host[256];
    char port[16];
    int rc = sock_split(base_url, host, sizeof(host), port, sizeof(port));
    size_t n;
    int g;

    if (rc < 0)
        return tfs_err(-EINVAL, "not a plain-HTTP endpoint: '%s'", base_url);
    /* every name under .localhost is the loopback (RFC 6761), as curl
       has it: a virtual-hosted bucket on a local server */
    n = strlen(host);
    if (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0)
        memmove(host, host + n - 9, 10);
    g = getaddrinfo(host, port, &hints, &res);
    if (g != 0)
        return tfs_err(-EHOSTUNREACH, "cannot resolve '%s': %s", host,
                       gai_strerror(g));
    rc = -ECONNREFUSED;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        rc = sock_try(ai, io, out);
        if (rc == 0 || rc == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    if (rc == -ETIMEDOUT)
        return tfs_err(rc, "connect to %s timed out", base_url);
    if (rc < 0)
        return tfs_err(rc == -ECONNREFUSED ? rc : -ECONNREFUSED,
                       "cannot connect to %s: %s", base_url, strerror(-rc));
    return 0;
}

int tfs_s3_sock_send(const struct s3_io *io, int fd, const void *b,
                     size_t n)
{
    const char *p = b;

    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        int rc;

        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return tfs_err(-ECONNRESET, "send: %s", strerror(errno));
        rc = sock_wait(io, fd, POLLOUT);
        if (rc < 0)
            return tfs_err(rc, "send: no progress in time");
    }
    return 0;
}

ssize_t tfs_s3_sock_readv(const struct s3_io *io, int fd,
                          const struct iovec *iov, int cnt)
{
    for (;;) {
        ssize_t k = readv(fd, iov, cnt);
        int rc;

        if (k >= 0)
            return k;                   /* 0: the peer closed */
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return tfs_err(-ECONNRESET, "receive: %s", strerror(errno));
        rc = sock_wait(io, fd, POLLIN);
        if (rc < 0)
            return tfs_err(rc, "receive: nothing came in time");
    }
}

ssize_t tfs_s3_sock_recv(const struct s3_io *io, int fd, void *b, size_t n)
{
    struct iovec v = {b, n};

    return tfs_s3_sock_readv(io, fd, &v, 1);
}
