/* SPDX-License-Identifier: MIT */
/*
 * Logging.  Library code never prints: it calls tfs_log(), which formats
 * the message and hands it to the sink set by the application.  With no
 * sink set, messages are dropped.  Levels are syslog's.
 */
#ifndef TIERFS_LOG_H
#define TIERFS_LOG_H

#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tfs_log_level {
    TFS_LOG_ERR     = 3,
    TFS_LOG_WARNING = 4,
    TFS_LOG_NOTICE  = 5,
    TFS_LOG_INFO    = 6,
    TFS_LOG_DEBUG   = 7,
};

/* Called with one formatted line (no trailing newline), on any thread. */
typedef void tfs_log_fn(void *arg, int level, const char *msg);

/*
 * Set the sink (NULL drops everything) and the most verbose level passed
 * to it.  Call before starting threads that log; the sink itself must be
 * thread-safe.
 */
TFS_API void tfs_log_set_sink(tfs_log_fn *fn, void *arg);
TFS_API void tfs_log_set_level(int level);
TFS_API int tfs_log_level(void);

/* A sink writing "tierfs: LEVEL: msg\n" to stderr, for programs. */
TFS_API void tfs_log_stderr(void *arg, int level, const char *msg);

TFS_API void tfs_log(int level, const char *fmt, ...) TFS_PRINTF(2, 3);

/* Test the level before formatting, so disabled debug lines cost nothing. */
#define TFS_LOGL(level, ...)                                               \
    do {                                                                   \
        if (tfs_log_level() >= (level))                                    \
            tfs_log((level), __VA_ARGS__);                                 \
    } while (0)
#define TFS_DEBUG(...) TFS_LOGL(TFS_LOG_DEBUG, __VA_ARGS__)
#define TFS_INFO(...)  TFS_LOGL(TFS_LOG_INFO, __VA_ARGS__)
#define TFS_WARN(...)  TFS_LOGL(TFS_LOG_WARNING, __VA_ARGS__)
#define TFS_ERROR(...) TFS_LOGL(TFS_LOG_ERR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_LOG_H */
