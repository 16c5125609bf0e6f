/* SPDX-License-Identifier: MIT */
/*
 * tierfs umount [-l] MOUNTPOINT: unmount a tierfs mount.  Only mounts of
 * type fuse.tierfs are touched.  As root it calls umount2() itself,
 * otherwise fusermount3 -u.  The daemon sees the unmount, closes its
 * cache and exits on its own; without -l, umount waits for that exit
 * (the daemon's pid is in its control file), so that a script may remove
 * the cache directory or mount it again as soon as umount returns.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/util.h"

static void umount_help(FILE *f)
{
    fprintf(f, "usage: tierfs umount [-l] MOUNTPOINT\n\n"
               "Unmount a file system mounted with 'tierfs mount' and "
               "wait for its\ndaemon to exit (it closes the cache "
               "first).\n\n"
               "  -l, --lazy   detach now even if files are open; the "
               "daemon\n               exits once they are closed\n");
}

/*
 * The absolute path of the mount point, resolving its parent only (the
 * mount point itself may be a dead mount that stat cannot enter).
 */
static int umount_path(const char *arg, char *out, size_t size)
{
    char tmp[PATH_MAX];
    char dir[PATH_MAX];
    const char *parent = ".";
    const char *base = tmp;
    char *slash;
    size_t len = strlen(arg);

    while (len > 1 && arg[len - 1] == '/')
        len--;
    if (len >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, arg, len);
    tmp[len] = '\0';
    slash = strrchr(tmp, '/');
    if (slash != NULL) {
        *slash = '\0';
        parent = slash == tmp ? "/" : tmp;
        base = slash + 1;
    }
    if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return realpath(arg, out) ? 0 : -errno;   /* size: PATH_MAX */
    if (realpath(parent, dir) == NULL)
        return -errno;
    if ((size_t)snprintf(out, size, "%s/%s", strcmp(dir, "/") ? dir : "",
                         base) >= size)
        return -ENAMETOOLONG;
    return 0;
}

/* The file system type mounted at path ("" when none; the last wins). */
static void umount_fstype(const char *path, char *type, size_t size)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];

    type[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char mnt[PATH_MAX];
        char fstype[64];
        const char *sep = strstr(line, " - ");

        if (sep == NULL || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
            sscanf(sep + 3, "%63s", fstype) != 1)
            continue;
        tfs_mountinfo_unescape(mnt);
        if (strcmp(mnt, path) == 0)
            snprintf(type, size, "%s", fstype);
    }
    fclose(f);
}

#define UMOUNT_WAIT_MS 60000           /* for the daemon to exit */

#define UMOUNT_ASK_MS 2000             /* for the control file to answer */
#define UMOUNT_CTL_MAX (1u << 20)      /* bytes of the control file read */

/*
 * The "pid" of the "fuse" object of a control file's text; 0 when none.
 * Any bytes in strings: the file names keys of parked changes as they are.
 */
static long umount_parse_pid(const struct tfs_buf *text)
{
    static const struct tfs_json_limits lim = {
        .max_len = UMOUNT_CTL_MAX,
        .max_depth = 64,
        .max_nodes = UMOUNT_CTL_MAX,
        .any_bytes = true,
    };
    struct tfs_json_doc doc;
    int64_t pid = 0;

    if (text->len == 0 || tfs_json_parse(text->p, text->len, &lim, &doc) < 0)
        return 0;
    if (tfs_json_i64(tfs_json_get(tfs_json_get(doc.root, "fuse"), "pid"),
                     &pid) < 0 || pid < 0 || pid > LONG_MAX)
        pid = 0;
    tfs_json_cleanup(&doc);
    return (long)pid;
}

/* The "pid" in the control file of the mount at path; 0 when none. */
static long umount_read_pid(const char *path)
{
    char ctl[PATH_MAX + 32];
    char chunk[16384];
    struct tfs_buf text;
    long pid;
    int fd;

    snprintf(ctl, sizeof(ctl), "%s/.tierfs-stats", path);
    fd = open(ctl, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    tfs_buf_init(&text, UMOUNT_CTL_MAX);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || tfs_buf_append(&text, chunk, (size_t)n) < 0)
            break;
    }
    close(fd);
    pid = umount_parse_pid(&text);
    tfs_buf_cleanup(&text);
    return pid;
}

/*
 * A pidfd for the daemon serving path, from the pid its control file
 * reports; -1 when there is none to be had (an older daemon, no pidfd,
 * or no answer).  The file is read by a child that is given
 * UMOUNT_ASK_MS: a hung daemon would never answer, and umount must
 * still work then.  Taken before the unmount, the pidfd names that
 * process even if the pid is reused after it exits.
 */
static int umount_daemon_pidfd(const char *path)
{
    struct pollfd pf;
    long pid = 0;
    pid_t child;
    int p[2];

    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    child = fork();
    if (child == 0) {
        pid = umount_read_pid(path);
        _exit(write(p[1], &pid, sizeof(pid)) == sizeof(pid) ? 0 : 1);
    }
    close(p[1]);
    pf = (struct pollfd){.fd = p[0], .events = POLLIN};
    if (child < 0 || poll(&pf, 1, UMOUNT_ASK_MS) <= 0 ||
        read(p[0], &pid, sizeof(pid)) != sizeof(pid))
        pid = 0;
    close(p[0]);
    if (child > 0 && pid > 0) {
        (void)waitpid(child, NULL, 0);  /* it has written: it is exiting */
    } else if (child > 0) {
        /* Its request, not yet taken by the daemon, ends with it; a
           child still inside the mount would make the unmount EBUSY. */
        kill(child, SIGKILL);
        for (int i = 0; i < 100 && waitpid(child, NULL, WNOHANG) == 0; i++)
            usleep(10000);
    }
    return pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
}

/* Wait until the process behind pidfd has exited: 0, or -ETIMEDOUT. */
static int umount_wait(int pidfd, int timeout_ms)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    int rc;

    do {
        rc = poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    return rc > 0 ? 0 : rc == 0 ? -ETIMEDOUT : -errno;
}

/* Not root: fusermount3 -u [-z] path. */
static int umount_fusermount(const char *path, bool lazy)
{
    pid_t pid = fork();
    int ws;

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        char *argv[] = {"fusermount3", "-u", "-z", NULL, NULL};
        argv[lazy ? 3 : 2] = (char *)path;
        execvp(argv[0], argv);
        perror("tierfs: umount: cannot run fusermount3");
        _exit(127);
    }
    if (waitpid(pid, &ws, 0) != pid)
        return -errno;
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -EIO;
}

int cmd_umount(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"lazy", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char path[PATH_MAX];
    char type[64];
    bool lazy = false;
    int pidfd;
    int rc;
    int c;

    while ((c = getopt_long(argc, argv, "lh", longopts, NULL)) != -1) {
        if (c == 'l') {
            lazy = true;
        } else if (c == 'h') {
            umount_help(stdout);
            return CLI_OK;
        } else {
            umount_help(stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("umount", "want MOUNTPOINT");
    rc = umount_path(argv[optind], path, sizeof(path));
    if (rc < 0)
        return cli_fail("umount", argv[optind], rc);
    umount_fstype(path, type, sizeof(type));
    if (type[0] == '\0') {
        fprintf(stderr, "tierfs: umount %s: not mounted\n", argv[optind]);
        return CLI_FAIL;
    }
    if (strcmp(type, "fuse.tierfs") != 0) {
        fprintf(stderr, "tierfs: umount %s: not a tierfs mount (%s)\n",
                argv[optind], type);
        return CLI_FAIL;
    }
    pidfd = lazy ? -1 : umount_daemon_pidfd(path);
    if (geteuid() == 0)
        rc = umount2(path, lazy ? MNT_DETACH : 0) < 0 ? -errno : 0;
    else
        rc = umount_fusermount(path, lazy);
    if (rc == 0 && pidfd >= 0 &&
        umount_wait(pidfd, UMOUNT_WAIT_MS) == -ETIMEDOUT) {
        fprintf(stderr, "tierfs: umount %s: unmounted, but the daemon is "
                "still running after %d s\n", argv[optind],
                UMOUNT_WAIT_MS / 1000);
        rc = CLI_FAIL;
    } else if (rc == -EBUSY) {
        fprintf(stderr, "tierfs: umount %s: busy (files open, or a "
                "process inside); -l detaches anyway\n", argv[optind]);
        rc = CLI_FAIL;
    } else {
        rc = rc < 0 ? cli_fail("umount", argv[optind], rc) : CLI_OK;
    }
    if (pidfd >= 0)
        close(pidfd);
    return rc;
}
