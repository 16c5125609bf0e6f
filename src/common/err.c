/* SPDX-License-Identifier: MIT */
/*
 * The error space (err.h): messages, names, errno mapping, retryability,
 * and the per-thread detail string set where a foreign error is mapped.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tierfs/err.h"
#include "common/util.h"

static _Thread_local char err_detail[512];

/* Every code lies in [TFS_ERR_LAST_ + 1, TFS_ERR_FIRST_]: with the count
   and the switches below refusing duplicates, the range has no holes. */
#define X(name, code, msg)                                                 \
    _Static_assert(code <= TFS_ERR_FIRST_ && code > TFS_ERR_LAST_,         \
                   #name " lies outside TFS_ERR_FIRST_..TFS_ERR_LAST_");
TFS_ERR_MAP(X)
#undef X

const char *tfs_strerror(int rc)
{
    switch (rc) {
#define X(name, code, msg) case name: return msg;
    TFS_ERR_MAP(X)
#undef X
    default:
        break;
    }
    if (rc == 0)
        return "success";
    if (rc > 0 || rc < -4095)
        return "invalid status";
    return strerror(-rc);
}

const char *tfs_errname(int rc)
{
    switch (rc) {
#define X(name, code, msg) case name: return #name;
    TFS_ERR_MAP(X)
#undef X
    default:
        break;
    }
    if (rc == 0)
        return "OK";
    if (rc > 0 || rc < -4095)
        return "EINVALID";
    return strerrorname_np(-rc) ? strerrorname_np(-rc) : "EUNKNOWN";
}

int tfs_errno(int rc)
{
    if (rc >= 0)
        return 0;
    if (rc > -4096)
        return -rc;
    switch (rc) {
    case TFS_ECHANGED:
        return ESTALE;
    case TFS_EURI:
    case TFS_EOPTION:
    case TFS_EBADKEY:
        return EINVAL;
    case TFS_EESCAPE:
        return EACCES;
    case TFS_ENOCRED:
        return EACCES;
    case TFS_ENETWORK:
        return EHOSTUNREACH;
    default:
        return EIO;
    }
}

int tfs_err_is_retryable(int rc)
{
    switch (rc) {
    case -EAGAIN:
    case -ETIMEDOUT:
    case -ECONNRESET:
    case -ECONNREFUSED:
    case -ECONNABORTED:
    case -EPIPE:
    case -ENETUNREACH:
    case -EHOSTUNREACH:
    case -ENETDOWN:
    case -EINTR:
    case TFS_ESERVER:
    case TFS_ENETWORK:
        return 1;
    default:
        return 0;
    }
}

const char *tfs_errdetail(void)
{
    return err_detail;
}

void tfs_errdetail_set(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err_detail, sizeof(err_detail), fmt, ap);
    va_end(ap);
}

void tfs_errdetail_clear(void)
{
    err_detail[0] = '\0';
}

int tfs_err(int rc, const char *fmt, ...)
{
    char text[sizeof(err_detail)];      /* the old detail may be an arg */
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    memcpy(err_detail, text, sizeof(text));
    return rc;
}
