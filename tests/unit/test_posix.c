/* SPDX-License-Identifier: MIT */
/*
 * The posix store beyond the conformance suite: keys that would escape the
 * root are refused (.., absolute, symlinks out), links that stay inside
 * work, temp files are hidden, and a failed put leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/store.h"
#include "common/util.h"

static char root[64];
static char outside[64];

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    fputs(s, f);
    fclose(f);
}

static struct tfs_store *open_root(void)
{
    struct tfs_store *st = NULL;
    char tmpl[] = "/tmp/tfs-posix-XXXXXX";
    char otmpl[] = "/tmp/tfs-outside-XXXXXX";
    char path[256];

    CHECK(mkdtemp(tmpl) != NULL);
    CHECK(mkdtemp(otmpl) != NULL);
    snprintf(root, sizeof(root), "%s", tmpl);
    snprintf(outside, sizeof(outside), "%s", otmpl);
    snprintf(path, sizeof(path), "%s/secret", outside);
    write_file(path, "outside the root");
    CHECK_OK(tfs_store_open(&st, root, NULL));
    return st;
}

static void close_root(struct tfs_store *st)
{
    char cmd[200];

    tfs_store_close(st);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", root, outside);
    CHECK(system(cmd) == 0);
}

TEST(dotdot_refused)
{
    struct tfs_store *st = open_root();
    struct tfs_stat s;
    char buf[8];
    size_t n;

    CHECK_RC(tfs_store_stat(st, "../secret", &s), TFS_EESCAPE);
    CHECK_RC(tfs_store_stat(st, "a/../../secret", &s), TFS_EESCAPE);
    CHECK_RC(tfs_store_read(st, "a/./b", buf, 8, 0, NULL, &n), TFS_EESCAPE);
    CHECK_RC(tfs_store_put(st, "x//y", "z", 1, NULL), TFS_EESCAPE);
    CHECK_RC(tfs_store_put(st, "..", "z", 1, NULL), TFS_EESCAPE);
    CHECK(strstr(tfs_errdetail(), "..") != NULL);
    CHECK_RC(tfs_store_remove(st, "../secret"), TFS_EESCAPE);
    CHECK_RC(tfs_store_rename(st, "a", "../b"), TFS_EESCAPE);
    close_root(st);
}

TEST(absolute_refused)
{
    struct tfs_store *st = open_root();
    struct tfs_stat s;

    CHECK_RC(tfs_store_stat(st, "/etc/passwd", &s), TFS_EBADKEY);
    close_root(st);
}

TEST(symlink_out_refused)
{
    struct tfs_store *st = open_root();
    struct tfs_list_page pg;
    struct tfs_stat s;
    char link[128];
    char buf[32];
    size_t n;

    snprintf(link, sizeof(link), "%s/escape", root);
    CHECK(symlink(outside, link) == 0);
    snprintf(link, sizeof(link), "%s/file-out", root);
    CHECK(symlink("/etc/hostname", link) == 0);
    CHECK_RC(tfs_store_read(st, "escape/secret", buf, 32, 0, NULL, &n),
             TFS_EESCAPE);
    CHECK_RC(tfs_store_stat(st, "file-out", &s), TFS_EESCAPE);
    CHECK(strstr(tfs_errdetail(), "outside") != NULL);
    CHECK_RC(tfs_store_put(st, "escape/new", "x", 1, NULL), TFS_EESCAPE);
    snprintf(link, sizeof(link), "%s/new", outside);
    CHECK(access(link, F_OK) != 0);
    /* Listing does not show what lies outside either. */
    CHECK_OK(tfs_store_list(st, "", NULL, NULL, 0, &pg));
    CHECK_EQ(pg.n_entries, 0);
    tfs_list_page_cleanup(&pg);
    close_root(st);
}

TEST(symlink_inside_allowed)
{
    struct tfs_store *st = open_root();
    char path[128];
    char buf[32];
    size_t n;

    CHECK_OK(tfs_store_put(st, "real/data.txt", "inside", 6, NULL));
    snprintf(path, sizeof(path), "%s/alias", root);
    CHECK(symlink("real", path) == 0);
    CHECK_OK(tfs_store_read(st, "alias/data.txt", buf, 32, 0, NULL, &n));
    CHECK_EQ(n, 6);
    close_root(st);
}

TEST(temp_files_hidden)
{
    struct tfs_store *st = open_root();
    struct tfs_list_page pg;
    char path[128];

    snprintf(path, sizeof(path), "%s/.tierfs-tmp.0123", root);
    write_file(path, "half written");
    CHECK_OK(tfs_store_put(st, "visible", "v", 1, NULL));
    CHECK_OK(tfs_store_list(st, "", NULL, NULL, 0, &pg));
    CHECK_EQ(pg.n_entries, 1);
    CHECK_STR(pg.entries[0].key, "visible");
    tfs_list_page_cleanup(&pg);
    CHECK_RC(tfs_store_put(st, ".tierfs-tmp.x", "v", 1, NULL), TFS_EBADKEY);
    close_root(st);
}

TEST(put_creates_dirs_and_no_leftovers)
{
    struct tfs_store *st = open_root();
    char cmd[256];
    char path[128];

    CHECK_OK(tfs_store_put(st, "a/b/c/d", "deep", 4, NULL));
    snprintf(path, sizeof(path), "%s/a/b/c/d", root);
    CHECK(access(path, R_OK) == 0);
    /* A put onto a directory fails and leaves no temp file. */
    CHECK(tfs_store_put(st, "a/b", "x", 1, NULL) < 0);
    snprintf(cmd, sizeof(cmd), "ls -A %s/a | grep -q tierfs-tmp", root);
    CHECK(system(cmd) != 0);
    close_root(st);
}

TEST(root_must_exist)
{
    struct tfs_store *st = NULL;

    CHECK_RC(tfs_store_open(&st, "/nonexistent/dir", NULL), -ENOENT);
    CHECK(strstr(tfs_errdetail(), "/nonexistent/dir") != NULL);
    CHECK_RC(tfs_store_open(&st, "file:///etc/hostname", NULL), -ENOTDIR);
}

TEST(file_uri_decoding)
{
    struct tfs_store *st = open_root();
    struct tfs_store *st2 = NULL;
    char uri[200];
    char buf[8];
    size_t n;

    CHECK_OK(tfs_store_put(st, "sp ace/k", "ok", 2, NULL));
    snprintf(uri, sizeof(uri), "file://%s/sp%%20ace?fsync=0", root);
    CHECK_OK(tfs_store_open(&st2, uri, NULL));
    CHECK_OK(tfs_store_read(st2, "k", buf, 8, 0, NULL, &n));
    CHECK_EQ(n, 2);
    tfs_store_close(st2);
    close_root(st);
}

/*
 * R6: an in-place rewrite that keeps size and mtime (write, then touch -r
 * back) must change the version, or the cache would serve blocks of the
 * old contents under it; a read pinned to the old version then fails
 * TFS_ECHANGED instead of returning the new bytes.
 */
TEST(inplace_rewrite_changes_version)
{
    struct tfs_store *st = open_root();
    struct timespec keep[2];
    struct tfs_stat a;
    struct tfs_stat b;
    struct stat sb;
    char path[256];
    char buf[16];
    size_t n = 0;
    int fd;

    snprintf(path, sizeof(path), "%s/f", root);
    write_file(path, "0123456789");
    CHECK_OK(tfs_store_stat(st, "f", &a));
    CHECK(stat(path, &sb) == 0);
    keep[0] = sb.st_atim;
    keep[1] = sb.st_mtim;
    usleep(20000);                      /* ctime granule: jiffies */
    fd = open(path, O_WRONLY);          /* same inode, same size */
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "ABCDEFGHIJ", 10, 0) == 10);
    CHECK(futimens(fd, keep) == 0);     /* touch -r: mtime as before */
    close(fd);
    CHECK_OK(tfs_store_stat(st, "f", &b));
    CHECK_EQ(b.size, a.size);
    CHECK_EQ(b.mtime_ns, a.mtime_ns);
    CHECK(strcmp(a.version, b.version) != 0);
    CHECK_RC(tfs_store_read(st, "f", buf, sizeof(buf), 0, a.version, &n),
             TFS_ECHANGED);
    CHECK_OK(tfs_store_read(st, "f", buf, sizeof(buf), 0, b.version, &n));
    CHECK_EQ(n, 10);
    CHECK(memcmp(buf, "ABCDEFGHIJ", 10) == 0);
    close_root(st);
}

TESTS(T(dotdot_refused), T(absolute_refused), T(symlink_out_refused),
      T(symlink_inside_allowed), T(temp_files_hidden),
      T(put_creates_dirs_and_no_leftovers), T(root_must_exist),
      T(file_uri_decoding), T(inplace_rewrite_changes_version));
TEST_MAIN()
