/* SPDX-License-Identifier: MIT */
/*
 * One error space for all of tierfs.
 *
 * Every function that can fail returns int: 0 is success, a negative errno
 * (-ENOENT, -EACCES, ...) or one of the TFS_E* codes below, which live in a
 * reserved range under -20000 so they never collide with errno values.
 * Foreign errors (HTTP status, S3 error codes, curl codes) are mapped once,
 * at the edge where they arise; the original detail (for example the S3
 * error code and message) is kept in a per-thread detail string that the
 * code handling the error puts in its log line.
 */
#ifndef TIERFS_ERR_H
#define TIERFS_ERR_H

#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFS_ERR_MAP(X)                                                     \
    X(TFS_ENOTCACHED, -20001, "block not in cache")                        \
    X(TFS_ECORRUPT,   -20002, "checksum mismatch")                         \
    X(TFS_ECHANGED,   -20003, "object changed in the store")               \
    X(TFS_EURI,       -20004, "invalid store URI")                         \
    X(TFS_EOPTION,    -20005, "invalid option")                            \
    X(TFS_EBADKEY,    -20006, "invalid object key")                        \
    X(TFS_EESCAPE,    -20007, "path escapes the store root")               \
    X(TFS_EPROTO,     -20008, "malformed response from the store")         \
    X(TFS_ETOOBIG,    -20009, "response larger than the limit")            \
    X(TFS_ESERVER,    -20010, "store server error")                        \
    X(TFS_ENOCRED,    -20011, "no credentials found")                      \
    X(TFS_EHTTP,      -20012, "unexpected HTTP status")                    \
    X(TFS_ENETWORK,   -20013, "network error talking to the store")        \
    X(TFS_EFORMAT,    -20014, "invalid file format")

enum tfs_err {
#define TFS_ERR_ENUM_(name, code, msg) name = code,
    TFS_ERR_MAP(TFS_ERR_ENUM_)
#undef TFS_ERR_ENUM_
};

/*
 * The TFS_E* codes run from TFS_ERR_FIRST_ down, one apart (err.c checks
 * it at compile time); TFS_ERR_LAST_ is one past the last code, never a
 * code itself, for walking the range: for (rc = TFS_ERR_FIRST_;
 * rc > TFS_ERR_LAST_; rc--).
 */
enum {
#define TFS_ERR_ONE_(name, code, msg) + 1
    TFS_ERR_COUNT_ = 0 TFS_ERR_MAP(TFS_ERR_ONE_),
#undef TFS_ERR_ONE_
    TFS_ERR_FIRST_ = -20001,
    TFS_ERR_LAST_ = TFS_ERR_FIRST_ - TFS_ERR_COUNT_
};

/*
 * A short, static, human message for rc (0, -errno or TFS_E*).  Never
 * NULL.  Thread-safe.
 */
TFS_API const char *tfs_strerror(int rc);

/*
 * The symbolic name of rc ("ENOENT", "TFS_ECHANGED"), for logs and for
 * scripts.  Never NULL.  Thread-safe.
 */
TFS_API const char *tfs_errname(int rc);

/*
 * rc as a positive errno, for FUSE replies and errno-minded callers:
 * -errno gives errno, TFS_ECHANGED gives ESTALE, TFS_ECORRUPT and the
 * other TFS_E* codes give EIO (EINVAL for URI/option/key errors, EACCES for
 * escapes).
 */
TFS_API int tfs_errno(int rc);

/*
 * True when an operation that failed with rc may succeed if retried
 * unchanged (timeouts, resets, throttling, 5xx).
 */
TFS_API int tfs_err_is_retryable(int rc);

/*
 * The detail of the last failure on the calling thread: for example
 * "S3 NoSuchBucket: The specified bucket does not exist (HEAD /b/k)".
 * Empty string when none.  Valid until the next tierfs call on this
 * thread.  Never contains secrets.
 */
TFS_API const char *tfs_errdetail(void);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_ERR_H */
