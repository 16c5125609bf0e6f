/* SPDX-License-Identifier: MIT */
/*
 * STAGING/lost+found: what the write-back cannot place goes there, never
 * deleted.  Journal replay puts records it must drop there
 * (wb_lost_put); recovery moves data files that no record references
 * (wb_lost_move).  A name that is taken gets .1, .2, ... appended.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wb/wb_int.h"

/* STAGING/lost+found, created on first use; its descriptor or -errno. */
static int lost_dir(struct tfs_wb *wb)
{
    const char *dir = wb->cfg.staging_dir;

    if (wb->lost_fd >= 0)
        return wb->lost_fd;
    if (mkdirat(wb->j.dir_fd, "lost+found", 0700) < 0 && errno != EEXIST)
        return tfs_err(-errno, "cannot create %s/lost+found", dir);
    wb->lost_fd = openat(wb->j.dir_fd, "lost+found", O_RDONLY |
                         O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wb->lost_fd < 0)
        return tfs_err(-errno, "cannot open %s/lost+found", dir);
    if (fsync(wb->j.dir_fd) < 0)
        return tfs_err(-errno, "cannot fsync %s", dir);
    return wb->lost_fd;
}

/* name, or name.1, name.2, ... for try i. */
static void lost_name(char *buf, size_t size, const char *name, unsigned i)
{
    if (i == 0)
        snprintf(buf, size, "%s", name);
    else
        snprintf(buf, size, "%s.%u", name, i);
}

int wb_lost_put(struct tfs_wb *wb, const char *name, const void *p,
                size_t len, char *where, size_t wsize)
{
    int dfd = lost_dir(wb);
    char nm[128];
    int fd = -1;
    int rc;

    for (unsigned i = 0; dfd >= 0 && fd < 0 && i < 1000; i++) {
        lost_name(nm, sizeof(nm), name, i);
        fd = openat(dfd, nm, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                    O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (dfd < 0)
        return dfd;
    if (fd < 0)
        return tfs_err(-errno, "cannot create %s/lost+found/%s",
                       wb->cfg.staging_dir, name);
    rc = tfs_pwrite_all(fd, p, len, 0);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && fsync(dfd) < 0)
        rc = -errno;
    snprintf(where, wsize, "%s/lost+found/%s", wb->cfg.staging_dir, nm);
    return rc < 0 ? tfs_err(rc, "cannot write %s", where) : 0;
}

/* Move data file data/name to lost+found/data-name; adds its bytes. */
int wb_lost_move(struct tfs_wb *wb, const char *name, uint64_t *bytes)
{
    int dfd = lost_dir(wb);
    char base[64];
    char nm[80];
    struct stat sb;

    if (dfd < 0)
        return dfd;
    if (fstatat(wb->data_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        *bytes += (uint64_t)sb.st_size;
    snprintf(base, sizeof(base), "data-%s", name);
    for (unsigned i = 0; i < 1000; i++) {
        lost_name(nm, sizeof(nm), base, i);
        if (renameat2(wb->data_fd, name, dfd, nm, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno != EEXIST)
            break;
    }
    return tfs_err(-errno, "cannot move %s/data/%s to lost+found",
                   wb->cfg.staging_dir, name);
}
