/* SPDX-License-Identifier: MIT */
/*
 * The log sink (log.h).  Messages are formatted into a stack buffer and
 * handed to the application's sink; with no sink they are dropped.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tierfs/log.h"

static tfs_log_fn *log_sink;            /* set before threads start */
static void *log_arg;
static atomic_int log_max = TFS_LOG_WARNING;

void tfs_log_set_sink(tfs_log_fn *fn, void *arg)
{
    log_sink = fn;
    log_arg = arg;
}

void tfs_log_set_level(int level)
{
    atomic_store(&log_max, level);
}

int tfs_log_level(void)
{
    if (log_sink == NULL)
        return -1;
    return atomic_load(&log_max);
}

static const char *log_level_name(int level)
{
    switch (level) {
    case TFS_LOG_ERR:
        return "error";
    case TFS_LOG_WARNING:
        return "warning";
    case TFS_LOG_NOTICE:
        return "notice";
    case TFS_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

void tfs_log_stderr(void *arg, int level, const char *msg)
{
    (void)arg;
    fprintf(stderr, "tierfs: %s: %s\n", log_level_name(level), msg);
}

void tfs_log(int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    if (log_sink == NULL || level > atomic_load(&log_max))
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    log_sink(log_arg, level, line);
}
