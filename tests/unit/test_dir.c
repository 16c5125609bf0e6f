/* SPDX-License-Identifier: MIT */
/*
 * Private directories (src/common/dir.c): what is created, and every
 * kind of component that is refused: symlinks, foreign owners, group or
 * other write bits, an unsafe root.  The ownership cases chown to uid
 * 65534 and need root; as another user they are skipped.  Also the plain
 * mkdir -p for user-chosen paths (src/common/fsutil.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "common/fsutil.h"
#include "common/util.h"

#define OTHER_UID 65534

static char base[128];

/* A fresh scratch dir, 0755, as a user's home dir would be. */
static const char *scratch(const char *name)
{
    char cmd[512];

    snprintf(base, sizeof(base), "/tmp/priv-test-dir-%d-%s", (int)getpid(),
             name);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && chmod 755 %s",
             base, base, base);
    CHECK_EQ(system(cmd), 0);
    return base;
}

static void cleanup(void)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    (void)system(cmd);
}

static unsigned mode_of(const char *fmt, const char *a, const char *b)
{
    char p[512];
    struct stat st;

    snprintf(p, sizeof(p), fmt, a, b);
    CHECK_EQ(lstat(p, &st), 0);
    return st.st_mode & 07777;
}

static bool detail_has(const char *s)
{
    return strstr(tfs_errdetail(), s) != NULL;
}

TEST(creates_private)
{
    const char *b = scratch("create");
    mode_t old = umask(022);
    int fd = -1;

    CHECK_OK(tfs_dir_open(b, "x/y/z", 0700, 0, &fd));
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "x"), 0700);
    CHECK_EQ(mode_of("%s/%s", b, "x/y/z"), 0700);
    /* Group mode: exactly 0770 in spite of the umask. */
    CHECK_OK(tfs_dir_open(b, "g/h", 0770, 0, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "g/h"), 0770);
    /* Opening it again passes its own checks. */
    CHECK_OK(tfs_dir_open(b, "x/y/z", 0700, 0, &fd));
    close(fd);
    umask(old);
    cleanup();
}

TEST(symlink_refused)
{
    const char *b = scratch("link");
    char p[512];
    char t[256];
    int fd = -1;

    snprintf(t, sizeof(t), "%s/target", b);
    CHECK_EQ(mkdir(t, 0700), 0);
    CHECK_OK(tfs_dir_open(b, "a", 0700, 0, &fd));
    close(fd);
    snprintf(p, sizeof(p), "%s/a/leaf", b);
    CHECK_EQ(symlink(t, p), 0);
    CHECK_RC(tfs_dir_open(b, "a/leaf", 0700, 0, &fd), -ELOOP);
    CHECK(detail_has("/a/leaf: a symbolic link: refusing to use it"));
    /* An intermediate link too, and nothing is created through it. */
    CHECK_RC(tfs_dir_open(b, "a/leaf/sub", 0700, 0, &fd), -ELOOP);
    snprintf(p, sizeof(p), "%s/sub", t);
    CHECK(access(p, F_OK) < 0);
    cleanup();
}

TEST(foreign_owner_refused)
{
    const char *b = scratch("owner");
    char p[512];
    int fd = -1;

    if (geteuid() != 0) {
        printf("skip: needs root to chown\n");
        cleanup();
        return;
    }
    snprintf(p, sizeof(p), "%s/theirs", b);
    CHECK_EQ(mkdir(p, 0700), 0);
    CHECK_EQ(chown(p, OTHER_UID, OTHER_UID), 0);
    CHECK_RC(tfs_dir_open(b, "theirs", 0700, 0, &fd), -EPERM);
    CHECK(detail_has("theirs: owned by uid 65534, not 0: refusing"));
    CHECK_RC(tfs_dir_open(b, "theirs/mine", 0700, 0, &fd), -EPERM);
    CHECK_RC(tfs_dir_open_path(p, 0700, TFS_DIR_TIGHTEN, &fd), -EPERM);
    /* A root owned by someone else is refused as well. */
    CHECK_RC(tfs_dir_open(p, "x", 0700, 0, &fd), -EPERM);
    CHECK(detail_has("not 0 or root"));
    cleanup();
}

TEST(modes_refused_or_tightened)
{
    const char *b = scratch("modes");
    char p[512];
    int fd = -1;

    snprintf(p, sizeof(p), "%s/open", b);
    CHECK_EQ(mkdir(p, 0700), 0);
    CHECK_EQ(chmod(p, 0777), 0);
    /* Others may write in an intermediate: never accepted. */
    CHECK_RC(tfs_dir_open(b, "open/x", 0700, TFS_DIR_TIGHTEN, &fd), -EPERM);
    CHECK(detail_has("mode 777 lets others in"));
    /* A leaf with group/other bits: refused, or tightened when asked. */
    CHECK_EQ(chmod(p, 0755), 0);
    CHECK_RC(tfs_dir_open(b, "open", 0700, 0, &fd), -EPERM);
    CHECK(detail_has("mode 755 lets group or others in"));
    CHECK_OK(tfs_dir_open(b, "open", 0700, TFS_DIR_TIGHTEN, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "open"), 0700);
    /* Group mode never accepts other bits. */
    CHECK_EQ(chmod(p, 0775), 0);
    CHECK_RC(tfs_dir_open(b, "open", 0770, 0, &fd), -EPERM);
    CHECK_OK(tfs_dir_open(b, "open", 0770, TFS_DIR_TIGHTEN, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "open"), 0770);
    cleanup();
}

TEST(group_leaf_of_another_member)
{
    const char *b = scratch("group");
    char p[512];
    int fd = -1;

    if (geteuid() != 0) {
        printf("skip: needs root to chown\n");
        cleanup();
        return;
    }
    snprintf(p, sizeof(p), "%s/shared", b);
    CHECK_EQ(mkdir(p, 0700), 0);
    CHECK_EQ(chmod(p, 0770), 0);
    CHECK_EQ(chown(p, OTHER_UID, getegid()), 0);
    CHECK_OK(tfs_dir_open(b, "shared", 0770, 0, &fd));
    close(fd);
    /* The same dir is not private, and with other bits not shareable. */
    CHECK_RC(tfs_dir_open(b, "shared", 0700, TFS_DIR_TIGHTEN, &fd), -EPERM);
    CHECK_EQ(chmod(p, 0771), 0);
    CHECK_RC(tfs_dir_open(b, "shared", 0770, 0, &fd), -EPERM);
    cleanup();
}

TEST(group_dir_kept)
{
    const char *b = scratch("keep");
    char p[512];
    int fd = -1;

    /* A group-shared (setgid) dir of ours is never made private. */
    CHECK_OK(tfs_dir_open(b, "g", 02770, 0, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "g"), 02770);
    CHECK_RC(tfs_dir_open(b, "g", 0700, TFS_DIR_TIGHTEN, &fd), -EPERM);
    CHECK(detail_has("a group-shared dir (mode 2770): refusing"));
    CHECK_EQ(mode_of("%s/%s", b, "g"), 02770);
    /* A private one asked to be shared is opened up to the group. */
    snprintf(p, sizeof(p), "%s/p", b);
    CHECK_EQ(mkdir(p, 0700), 0);
    CHECK_OK(tfs_dir_open(b, "p", 02770, TFS_DIR_TIGHTEN, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "p"), 02770);
    cleanup();
}

TEST(unsafe_root)
{
    const char *b = scratch("root");
    int fd = -1;

    CHECK_EQ(chmod(b, 0777), 0);
    CHECK_RC(tfs_dir_open(b, "x", 0700, 0, &fd), -EPERM);
    CHECK(detail_has("writable by others and not sticky"));
    CHECK_EQ(chmod(b, 01777), 0);          /* like /var/tmp */
    CHECK_OK(tfs_dir_open(b, "x", 0700, 0, &fd));
    close(fd);
    cleanup();
}

TEST(user_path)
{
    const char *b = scratch("path");
    char p[512];
    int fd = -1;

    /* mkdir -p below the deepest existing ancestor. */
    snprintf(p, sizeof(p), "%s/one/two/three/", b);
    CHECK_OK(tfs_dir_open_path(p, 0700, 0, &fd));
    close(fd);
    CHECK_EQ(mode_of("%s/%s", b, "one"), 0700);
    CHECK_EQ(mode_of("%s/%s", b, "one/two/three"), 0700);
    /* The leaf itself may not be a link, even one the user made. */
    snprintf(p, sizeof(p), "%s/one/link", b);
    CHECK_EQ(symlink("two", p), 0);
    CHECK_RC(tfs_dir_open_path(p, 0700, 0, &fd), -ELOOP);
    /* Links above the leaf are the user's: followed. */
    snprintf(p, sizeof(p), "%s/one/link/three", b);
    CHECK_OK(tfs_dir_open_path(p, 0700, 0, &fd));
    close(fd);
    cleanup();
}

TEST(mkdirs)
{
    const char *b = scratch("mkdirs");
    mode_t old = umask(022);
    char p[512];
    char f[512];

    /* Every missing component, with the mode less the umask. */
    snprintf(p, sizeof(p), "%s/m/n//o/", b);
    CHECK_OK(tfs_mkdirs(p, 0777));
    CHECK_EQ(mode_of("%s/%s", b, "m"), 0755);
    CHECK_EQ(mode_of("%s/%s", b, "m/n/o"), 0755);
    snprintf(p, sizeof(p), "%s/m/n/p", b);
    CHECK_OK(tfs_mkdirs(p, 0700));
    CHECK_EQ(mode_of("%s/%s", b, "m/n/p"), 0700);
    /* All there already. */
    CHECK_OK(tfs_mkdirs(p, 0700));
    CHECK_OK(tfs_mkdirs("/", 0777));
    CHECK_RC(tfs_mkdirs("", 0777), -ENOENT);
    /* A file in the way, as a parent or as the leaf. */
    snprintf(f, sizeof(f), "%s/file", b);
    close(open(f, O_CREAT | O_WRONLY, 0600));
    snprintf(p, sizeof(p), "%s/file/sub", b);
    CHECK_RC(tfs_mkdirs(p, 0777), -ENOTDIR);
    CHECK_RC(tfs_mkdirs(f, 0777), -ENOTDIR);
    CHECK(detail_has("/file: not a directory"));
    /* Links on the way are followed (the user's own paths). */
    snprintf(p, sizeof(p), "%s/link", b);
    CHECK_EQ(symlink("m/n", p), 0);
    snprintf(p, sizeof(p), "%s/link/q/r", b);
    CHECK_OK(tfs_mkdirs(p, 0777));
    CHECK_EQ(mode_of("%s/%s", b, "m/n/q/r"), 0755);
    umask(old);
    cleanup();
}

TESTS(T(creates_private), T(symlink_refused), T(foreign_owner_refused),
      T(modes_refused_or_tightened), T(group_leaf_of_another_member),
      T(group_dir_kept),
      T(unsafe_root), T(user_path), T(mkdirs));
TEST_MAIN()
