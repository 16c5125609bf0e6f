/* SPDX-License-Identifier: MIT */
/*
 * Growable byte buffers with a hard cap (util.h), so that a body read from
 * the network can never grow without bound (curl's "toobig").  The first
 * failed append is remembered (SQLite's sqlite3_str accError): every later
 * append is a no-op returning it, so a caller that builds a record from
 * many appends checks tfs_buf_error() once, where the record is finished,
 * and tfs_buf_steal() hands out no partial text (NULL).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

void tfs_buf_init(struct tfs_buf *b, size_t max)
{
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
    b->err = 0;
}

void tfs_buf_cleanup(struct tfs_buf *b)
{
    tfs_free(b->p);
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    b->err = 0;
}

void tfs_buf_reset(struct tfs_buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->p != NULL)
        b->p[0] = '\0';
}

int tfs_buf_error(const struct tfs_buf *b)
{
    return b->err;
}

/* Remember the first failure; returns it. */
static int buf_fail(struct tfs_buf *b, int rc)
{
    if (b->err == 0)
        b->err = rc;
    return b->err;
}

/* Make room for extra more bytes plus the NUL; a failure sticks. */
static int buf_reserve(struct tfs_buf *b, size_t extra)
{
    size_t need;
    size_t cap;
    char *p;

    if (b->err < 0)
        return b->err;
    if (b->max > 0 && (extra > b->max || b->len > b->max - extra))
        return buf_fail(b, TFS_ETOOBIG);
    if (extra > SIZE_MAX / 2 - b->len)
        return buf_fail(b, -ENOMEM);
    need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = tfs_realloc(b->p, cap);
    if (p == NULL)
        return buf_fail(b, -ENOMEM);
    b->p = p;
    b->cap = cap;
    return 0;
}

int tfs_buf_reserve(struct tfs_buf *b, size_t extra)
{
    return buf_reserve(b, extra);
}

int tfs_buf_append(struct tfs_buf *b, const void *data, size_t len)
{
    int rc = buf_reserve(b, len);

    if (rc < 0)
        return rc;
    if (len > 0)
        memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return 0;
}

int tfs_buf_puts(struct tfs_buf *b, const char *s)
{
    return tfs_buf_append(b, s, strlen(s));
}

int tfs_buf_printf(struct tfs_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    int rc;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return buf_fail(b, -EINVAL);
    rc = buf_reserve(b, (size_t)n);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

const char *tfs_buf_str(const struct tfs_buf *b)
{
    return b->p != NULL ? b->p : "";
}

char *tfs_buf_steal(struct tfs_buf *b)
{
    char *p = b->p;

    if (b->err != 0) {                  /* never hand out a partial text */
        tfs_free(p);
        p = NULL;
    } else if (p == NULL) {
        p = tfs_strdup("");
    }
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    b->err = 0;
    return p;
}
