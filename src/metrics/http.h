/* SPDX-License-Identifier: MIT */
/*
 * A tiny HTTP server for the Prometheus /metrics endpoint (libmicrohttpd,
 * its own polling thread).  GET or HEAD /metrics answers with the body the
 * fill callback writes; every other path is 404, other methods 405.
 */
#ifndef TFS_METRICS_HTTP_H
#define TFS_METRICS_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"

struct tfs_http;

/*
 * Write the exposition text into out (empty on entry).  Called on the
 * server's thread, one request at a time.  A failure answers 500.
 */
typedef int tfs_http_fill_fn(void *arg, struct tfs_buf *out);

/*
 * Listen on addr, "HOST:PORT", "[IPV6]:PORT" or "PORT" (meaning
 * 127.0.0.1); port 0 picks a free one (see tfs_http_port).  fill and arg
 * are used until tfs_http_stop.  Errors: TFS_EOPTION (addr does not
 * parse or resolve), -EADDRINUSE or another -errno (bind), -ENOMEM.
 */
int tfs_http_start(const char *addr, tfs_http_fill_fn *fill, void *arg,
                   struct tfs_http **out);
/* The port it listens on. */
uint16_t tfs_http_port(const struct tfs_http *h);
/*
 * A socket bound to addr (as tfs_http_start takes it) and listening:
 * for other servers (the cache group's).  what names it in errors.
 * *ipv6 says which family.
 */
int tfs_http_listen(const char *addr, const char *what, int *fd,
                    bool *ipv6);
/* The port a bound socket listens on (0 when unknown). */
uint16_t tfs_http_bound_port(int fd);
/* Stop the thread, close the socket, free.  NULL is a no-op. */
void tfs_http_stop(struct tfs_http *h);

#endif /* TFS_METRICS_HTTP_H */
