/* SPDX-License-Identifier: MIT */
/*
 * Process limits a daemon raises for itself at start (util.h).  The
 * library never calls these: an application's limits are its own.
 */
#include <errno.h>
#include <sys/resource.h>

#include "common/util.h"
#include "tierfs/log.h"

int tfs_nofile_raise(uint64_t *soft)
{
    struct rlimit r;
    rlim_t was;

    if (getrlimit(RLIMIT_NOFILE, &r) < 0)
        return -errno;
    was = r.rlim_cur;
    if (r.rlim_cur != r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) < 0)
            return -errno;
        TFS_DEBUG("raised the soft RLIMIT_NOFILE from %llu to %llu",
                  (unsigned long long)was, (unsigned long long)r.rlim_cur);
    }
    if (soft != NULL)
        *soft = (uint64_t)r.rlim_cur;
    return 0;
}
