/* SPDX-License-Identifier: MIT */
/*
 * Access traces (trace.h): the writer, a buffered append under one lock
 * (a read record is 34 bytes; a 256 KiB buffer is written out about
 * every 7,700 reads), and the parser, which checks every record's bounds
 * and type so a damaged file fails with the offset named.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "tierfs/trace.h"
#include "common/bytes.h"
#include "common/util.h"

#define TRACE_MAGIC "TFSTRC1\n"
#define TRACE_BUF (256u << 10)
#define TRACE_HDR 16u

struct tfs_trace {
    int             fd;
    uint64_t        start_wall_ns;
    uint64_t        start_ns;           /* tfs_now_ns() at open */
    atomic_uint     next_file;
    pthread_mutex_t lock;
    unsigned char  *buf;                /* protected by lock */
    size_t          len;                /* protected by lock */
    uint64_t        lost;               /* records lost to write errors */
};

/* Write the buffer out; caller holds the lock. */
static void trace_flush(struct tfs_trace *t)
{
    size_t done = 0;

    while (done < t->len) {
        ssize_t n = write(t->fd, t->buf + done, t->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            t->lost++;
            break;
        }
        done += (size_t)n;
    }
    t->len = 0;
}

/* Append one encoded record (at most a few KiB). */
static void trace_put(struct tfs_trace *t, const unsigned char *rec,
                      size_t len)
{
    pthread_mutex_lock(&t->lock);
    if (t->len + len > TRACE_BUF)
        trace_flush(t);
    memcpy(t->buf + t->len, rec, len);
    t->len += len;
    pthread_mutex_unlock(&t->lock);
}

int tfs_trace_open(struct tfs_trace **out, const char *path)
{
    struct tfs_trace *t = tfs_calloc(1, sizeof(*t));
    unsigned char hdr[TRACE_HDR];

    if (t == NULL || (t->buf = tfs_malloc(TRACE_BUF)) == NULL) {
        tfs_free(t);
        return -ENOMEM;
    }
    /* 0600: a trace names every key read (dataset paths) */
    t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (t->fd < 0) {
        int rc = tfs_err(-errno, "cannot create the trace %s", path);
        tfs_free(t->buf);
        tfs_free(t);
        return rc;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->start_ns = tfs_now_ns();
    t->start_wall_ns = (uint64_t)tfs_wall_ns();
    memcpy(hdr, TRACE_MAGIC, 8);
    tfs_put_le64(hdr + 8, t->start_wall_ns);
    trace_put(t, hdr, sizeof(hdr));
    *out = t;
    return 0;
}

void tfs_trace_close(struct tfs_trace *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    trace_flush(t);
    pthread_mutex_unlock(&t->lock);
    close(t->fd);
    pthread_mutex_destroy(&t->lock);
    tfs_free(t->buf);
    tfs_free(t);
}

uint32_t tfs_trace_file_open(struct tfs_trace *t, const char *key,
                             uint64_t size)
{
    unsigned char rec[23 + 1024];
    size_t klen = TFS_MIN(strlen(key), (size_t)1024);
    uint32_t file = atomic_fetch_add(&t->next_file, 1);

    rec[0] = 1;
    tfs_put_le32(rec + 1, file);
    tfs_put_le64(rec + 5, tfs_now_ns() - t->start_ns);
    tfs_put_le64(rec + 13, size);
    tfs_put_le16(rec + 21, klen);
    memcpy(rec + 23, key, klen);
    trace_put(t, rec, 23 + klen);
    return file;
}

void tfs_trace_read(struct tfs_trace *t, uint32_t file, uint64_t off,
                    uint32_t len, uint32_t latency_us, int src)
{
    unsigned char rec[34];

    rec[0] = 2;
    tfs_put_le32(rec + 1, file);
    tfs_put_le64(rec + 5, tfs_now_ns() - t->start_ns);
    tfs_put_le64(rec + 13, off);
    tfs_put_le32(rec + 21, len);
    tfs_put_le32(rec + 25, latency_us);
    rec[29] = (unsigned char)src;
    memset(rec + 30, 0, 4);             /* reserved */
    trace_put(t, rec, sizeof(rec));
}

void tfs_trace_file_close(struct tfs_trace *t, uint32_t file)
{
    unsigned char rec[13];

    rec[0] = 3;
    tfs_put_le32(rec + 1, file);
    tfs_put_le64(rec + 5, tfs_now_ns() - t->start_ns);
    trace_put(t, rec, sizeof(rec));
}

/* ---- parsing ---- */

/* Decode the record at p (n bytes left); its length, 0 if cut short. */
static size_t trace_decode(const unsigned char *p, size_t n,
                           struct tfs_trace_event *ev, char *key)
{
    size_t klen;

    if (n < 13)
        return 0;
    memset(ev, 0, sizeof(*ev));
    ev->type = p[0];
    ev->file = tfs_get_le32(p + 1);
    ev->t_ns = tfs_get_le64(p + 5);
    switch (p[0]) {
    case 1:
        if (n < 23)
            return 0;
        ev->size = tfs_get_le64(p + 13);
        klen = tfs_get_le16(p + 21);
        if (klen > 1024 || n < 23 + klen)
            return klen > 1024 ? SIZE_MAX : 0;
        memcpy(key, p + 23, klen);
        key[klen] = '\0';
        ev->key = key;
        return 23 + klen;
    case 2:
        if (n < 34)
            return 0;
        ev->off = tfs_get_le64(p + 13);
        ev->len = tfs_get_le32(p + 21);
        ev->latency_us = tfs_get_le32(p + 25);
        ev->src = p[29];
        return ev->src > 3 ? SIZE_MAX : 34;
    case 3:
        return 13;
    default:
        return SIZE_MAX;
    }
}

int tfs_trace_parse(const void *buf, size_t len, bool allow_tail,
                    tfs_trace_fn *fn, void *arg)
{
    const unsigned char *p = buf;
    size_t off = TRACE_HDR;
    char key[1025];

    if (len < TRACE_HDR || memcmp(p, TRACE_MAGIC, 8) != 0)
        return tfs_err(TFS_EFORMAT, "not a tierfs trace (bad header)");
    while (off < len) {
        struct tfs_trace_event ev;
        size_t n = trace_decode(p + off, len - off, &ev, key);
        int rc;

        if (n == SIZE_MAX)
            return tfs_err(TFS_EFORMAT, "bad trace record at offset %zu",
                           off);
        if (n == 0)
            return allow_tail ? 0
                              : tfs_err(TFS_EFORMAT, "trace truncated at "
                                        "offset %zu", off);
        rc = fn(arg, &ev);
        if (rc != 0)
            return rc;
        off += n;
    }
    return 0;
}
