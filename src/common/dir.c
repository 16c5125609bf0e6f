/* SPDX-License-Identifier: MIT */
/*
 * Private directories: open a directory below a trusted root, creating
 * what is missing, so that no other local user can have made, replaced
 * or redirected any part of it (docs/security.md).
 *
 *   checks       what a component found on disk must be
 *   the walk     openat(O_NOFOLLOW) one component at a time from the
 *                root's descriptor: what is checked (fstat of the open
 *                descriptor) is what is used, no TOCTOU window
 *   entry points a root path, or a user-given path whose deepest
 *                existing ancestor is the root
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "tierfs/log.h"

#define DIR_PATH_MAX 4096

/* ---- checks ---- */

static bool dir_in_groups(gid_t gid)
{
    gid_t v[256];
    int n;

    if (gid == getegid())
        return true;
    n = getgroups((int)TFS_ARRAY_LEN(v), v);
    for (int i = 0; i < n; i++) {
        if (v[i] == gid)
            return true;
    }
    return false;
}

/*
 * The root: owned by us or by root (the system's /var/tmp), and if
 * others may write in it, sticky, so that they cannot rename or remove
 * what we create there.
 */
static int dir_check_root(int fd, const char *name)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return tfs_err(-errno, "%s: cannot stat it", name);
    if (st.st_uid != geteuid() && st.st_uid != 0)
        return tfs_err(-EPERM, "%s: owned by uid %u, not %u or root: "
                       "refusing to use it", name, (unsigned)st.st_uid,
                       (unsigned)geteuid());
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        return tfs_err(-EPERM, "%s: writable by others and not sticky: "
                       "refusing to use it", name);
    return 0;
}

/*
 * A component below the root: ours (the leaf of a group mode may be
 * another member's: its group is one of ours and it gives others
 * nothing), nobody else may write in it, and the leaf gives no access
 * beyond mode.  With TFS_DIR_TIGHTEN a leaf of ours gets exactly mode
 * instead (an older version's 0755; a private one asked to be shared),
 * except a group-shared one (setgid) asked to be private: refused, the
 * other members would lose it.
 */
static int dir_check(int fd, const char *name, bool leaf, unsigned mode,
                     unsigned flags)
{
    struct stat st;
    unsigned bad = (S_IWGRP | S_IWOTH) & ~mode;
    unsigned now;
    bool mine;

    if (fstat(fd, &st) < 0)
        return tfs_err(-errno, "%s: cannot stat it", name);
    now = st.st_mode & 07777;
    mine = st.st_uid == geteuid();
    if (leaf)
        bad = 0777 & ~mode;
    if (!mine && !(leaf && (mode & 070) && !(st.st_mode & 07) &&
                   dir_in_groups(st.st_gid)))
        return tfs_err(-EPERM, "%s: owned by uid %u, not %u: refusing to "
                       "use it", name, (unsigned)st.st_uid,
                       (unsigned)geteuid());
    if (leaf && mine && (flags & TFS_DIR_TIGHTEN) && now != mode) {
        if ((now & S_ISGID) && !(mode & 070))
            return tfs_err(-EPERM, "%s: a group-shared dir (mode %04o): "
                           "refusing to make it private", name, now);
        if (fchmod(fd, mode) < 0)
            return tfs_err(-errno, "%s: cannot chmod it to %04o", name,
                           mode);
        TFS_INFO("%s: mode %04o set to %04o", name, now, mode);
        return 0;
    }
    if ((st.st_mode & bad) != 0)
        return tfs_err(-EPERM, "%s: mode %03o lets %s in: refusing to use "
                       "it", name, now & 0777,
                       leaf ? "group or others" : "others");
    return 0;
}

/* ---- the walk ---- */

/* Why openat(O_NOFOLLOW | O_DIRECTORY) of name in dfd failed. */
static int dir_open_error(int dfd, const char *name, const char *path,
                          int err)
{
    struct stat st;

    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode))
        return tfs_err(-ELOOP, "%s: a symbolic link: refusing to use it",
                       path);
    if (err == ENOTDIR)
        return tfs_err(-ENOTDIR, "%s: not a directory", path);
    return tfs_err(-err, "cannot open %s: %s", path, strerror(err));
}

/* Open (making it, mode exactly, if missing) component name of dfd. */
static int dir_step(int dfd, const char *name, const char *path,
                    unsigned mode, bool *made)
{
    for (int tries = 0; tries < 8; tries++) {
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                       O_CLOEXEC);

        if (fd >= 0)
            return fd;
        if (errno != ENOENT)
            return dir_open_error(dfd, name, path, errno);
        if (mkdirat(dfd, name, mode) < 0) {
            if (errno == EEXIST)
                continue;               /* made meanwhile: open, check */
            return tfs_err(-errno, "cannot create %s: %s", path,
                           strerror(errno));
        }
        *made = true;
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                   O_CLOEXEC);
        if (fd < 0)
            return dir_open_error(dfd, name, path, errno);
        if (fchmod(fd, mode) < 0) {         /* undo the umask */
            int rc = tfs_err(-errno, "cannot chmod %s", path);
            close(fd);
            return rc;
        }
        return fd;
    }
    return tfs_err(-EAGAIN, "cannot create %s: it keeps changing", path);
}

int tfs_dir_openat(int root_fd, const char *root_name, const char *sub,
                   unsigned mode, unsigned flags, int *out_fd)
{
    char path[DIR_PATH_MAX];
    char name[256];
    int fd = root_fd;
    int rc = 0;
    size_t plen = (size_t)snprintf(path, sizeof(path), "%s", root_name);

    while (rc == 0 && *sub != '\0') {
        size_t n = strcspn(sub, "/");
        const char *next = sub + n + strspn(sub + n, "/");
        bool made = false;
        int sfd;

        if (n == 0 || n >= sizeof(name) || plen + n + 2 > sizeof(path))
            rc = tfs_err(-ENAMETOOLONG, "%s/%s: bad path", root_name, sub);
        if (rc < 0)
            break;
        memcpy(name, sub, n);
        name[n] = '\0';
        plen += (size_t)snprintf(path + plen, sizeof(path) - plen, "%s%s",
                                 plen > 0 && path[plen - 1] == '/' ? ""
                                                                   : "/",
                                 name);
        sfd = strcmp(name, "..") == 0
                  ? tfs_err(-EINVAL, "%s: '..' in a private path", path)
                  : dir_step(fd, name, path, mode, &made);
        if (sfd < 0)
            rc = sfd;
        if (rc == 0 && !made)
            rc = dir_check(sfd, path, *next == '\0', mode, flags);
        if (fd != root_fd)
            close(fd);
        fd = sfd;
        sub = next;
    }
    if (rc < 0) {
        if (fd >= 0 && fd != root_fd)
            close(fd);
        return rc;
    }
    if (fd == root_fd) {
        fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
    }
    *out_fd = fd;
    return 0;
}

/* ---- entry points ---- */

int tfs_dir_open(const char *root, const char *sub, unsigned mode,
                 unsigned flags, int *out_fd)
{
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;

    if (rfd < 0)
        return tfs_err(-errno, "cannot open %s: %s", root, strerror(errno));
    rc = dir_check_root(rfd, root);
    if (rc == 0)
        rc = tfs_dir_openat(rfd, root, sub, mode, flags, out_fd);
    close(rfd);
    return rc;
}

/*
 * The user chose path: its existing ancestors are trusted as named
 * (symlinks in them followed), the deepest one must pass the root's
 * check, and everything below it is walked.
 */
int tfs_dir_open_path(const char *path, unsigned mode, unsigned flags,
                      int *out_fd)
{
    char root[DIR_PATH_MAX];
    size_t len = strlen(path);
    struct stat st;

    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= sizeof(root))
        return tfs_err(-ENAMETOOLONG, "bad directory path '%s'", path);
    memcpy(root, path, len);
    root[len] = '\0';
    if (strcmp(root, "/") == 0)
        return tfs_err(-EINVAL, "refusing to use / as a private directory");
    /* Cut the leaf, then every missing ancestor. */
    do {
        char *slash = strrchr(root, '/');

        if (slash == NULL) {
            snprintf(root, sizeof(root), ".");
            break;
        }
        slash[slash == root ? 1 : 0] = '\0';
    } while (strcmp(root, "/") != 0 && stat(root, &st) < 0 &&
             errno == ENOENT);
    len = strcmp(root, ".") == 0 ? 0 : strlen(root);
    return tfs_dir_open(root, path + len + (path[len] == '/'), mode, flags,
                        out_fd);
}
