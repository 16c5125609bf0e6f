/* SPDX-License-Identifier: MIT */
/*
 * The write-back engine (src/wb/) without FUSE, over a directory store
 * and a RAM cache: the view (overlay over the store), the journal
 * (replay, torn and corrupt tails, compaction, a staging dir of another
 * store), the lock, and sync.  Uploads wait a minute unless a sync
 * hurries them, so every case controls when the store changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/cache.h"
#include "tierfs/log.h"
#include "tierfs/mem.h"
#include "tierfs/store.h"
#include "wb/wb.h"

static char t_dir[256];                 /* scratch: store/, staging/ */

struct env {
    char              root[300];        /* the store's directory */
    char              stg[300];
    struct tfs_store *st;
    struct tfs_cache *c;
    struct tfs_wb    *wb;
};

static uint64_t t_delay_ms = 60000;    /* upload delay of env_open */
static const char *t_wrap = "";         /* store URI prefix, e.g. fault+ */
static const char *t_query = "";        /* store URI query */

static void env_open_wb(struct env *e)
{
    struct wb_cfg cfg = {
        .staging_dir = e->stg,
        .staging_max = 1ull << 30,
        .staging_wait_ms = 5000,
        .upload_jobs = 2,
        .upload_delay_ms = t_delay_ms,
        .retry_max_ms = 500,
    };

    CHECK_OK(wb_open(&e->wb, &cfg, e->st, e->c));
}

/* A store at t_dir/name (created) with a cache and write-back. */
static void env_open(struct env *e, const char *name, const char *stg)
{
    char uri[700];

    snprintf(e->root, sizeof(e->root), "%s/%s", t_dir, name);
    snprintf(e->stg, sizeof(e->stg), "%s/%s", t_dir, stg);
    snprintf(uri, sizeof(uri), "%sfile://%s%s", t_wrap, e->root, t_query);
    mkdir(e->root, 0755);
    CHECK_OK(tfs_store_open(&e->st, uri, NULL));
    CHECK_OK(tfs_cache_create(&e->c));
    CHECK_OK(tfs_cache_set(e->c, "mem_cache", "64M"));
    CHECK_OK(tfs_cache_set(e->c, "meta_ttl", "60"));
    CHECK_OK(tfs_cache_open(e->c, e->st));
    env_open_wb(e);
}

static void env_close(struct env *e)
{
    wb_close(e->wb);
    e->wb = NULL;
    tfs_cache_close(e->c);
    tfs_store_close(e->st);
}

/* Write key through the write-back and close it (sealed). */
static void wb_put_file(struct tfs_wb *wb, const char *key, const char *s)
{
    struct wb_want w = {.create = true, .trunc = true};
    struct wb_node *n;

    CHECK_OK(wb_open_write(wb, key, &w, &n));
    CHECK_OK(wb_node_write(wb, n, s, strlen(s), 0));
    wb_node_close(wb, n, true, true);
    wb_node_put(n);
}

/* What the view holds at key, as a string ("" when nothing). */
static const char *wb_read(struct tfs_wb *wb, struct tfs_cache *c,
                           const char *key)
{
    static char buf[256];
    struct wb_obj o;
    struct tfs_file *f;
    struct tfs_stat st;
    size_t n = 0;

    buf[0] = '\0';
    if (wb_lookup(wb, key, &o) < 0)
        return buf;
    if (o.is_dir) {
        n = (size_t)snprintf(buf, sizeof(buf), "<dir>");
    } else if (o.node != NULL && wb_node_open_read(o.node, &st) == 0) {
        CHECK_OK(wb_node_read(o.node, buf, sizeof(buf) - 1, 0, &n));
        wb_node_close(wb, o.node, false, false);
    } else {
        CHECK_OK(tfs_file_open_stat(c, o.read_key,
                                    o.node ? &st : &o.st, &f));
        CHECK_OK(tfs_file_read(f, buf, sizeof(buf) - 1, 0, &n));
        tfs_file_close(f);
    }
    buf[n] = '\0';
    wb_obj_cleanup(&o);
    return buf;
}

/* The names of directory dir in the view, joined by ','. */
static const char *wb_names(struct tfs_wb *wb, const char *dir)
{
    static char buf[1024];
    struct wb_list *l;
    size_t len = 0;

    buf[0] = '\0';
    if (wb_opendir(wb, dir, &l) < 0)
        return "<none>";
    for (size_t i = 0; i < wb_list_count(l); i++) {
        const struct wb_dirent *d = wb_list_entry(l, i);
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s%s",
                                i ? "," : "", d->name, d->is_dir ? "/" : "");
    }
    wb_list_free(l);
    return buf;
}

/* The store's object key as a string ("-" when missing). */
static const char *store_read(struct env *e, const char *key)
{
    static char buf[256];
    size_t n = 0;

    if (tfs_store_read(e->st, key, buf, sizeof(buf) - 1, 0, NULL, &n) < 0)
        return "-";
    buf[n] = '\0';
    return buf;
}

static void sync_all(struct tfs_wb *wb)
{
    struct wb_sync s;

    wb_sync_status(wb, "", wb_sync_seq(wb), 10000, &s);
    CHECK_EQ(s.pending, 0);
}

static off_t file_size(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* The overlay over store objects: deletes, renames, a directory rename,
   new files; the store follows on sync and only then. */
TEST(view)
{
    struct env e;
    bool is_dir;

    env_open(&e, "v", "v-stg");
    CHECK_OK(tfs_store_put(e.st, "s/a", "A", 1, NULL));
    CHECK_OK(tfs_store_put(e.st, "s/b", "B", 1, NULL));
    CHECK_OK(tfs_store_put(e.st, "s/sub/c", "C", 1, NULL));
    CHECK_STR(wb_names(e.wb, "s/"), "a,b,sub/");
    CHECK_OK(wb_unlink(e.wb, "s/a"));
    wb_put_file(e.wb, "s/n.tmp", "N");
    CHECK_OK(wb_rename(e.wb, "s/n.tmp", "s/n", 0, &is_dir));
    CHECK_OK(wb_rename(e.wb, "s/b", "s/b2", 0, &is_dir));
    CHECK_OK(wb_rename(e.wb, "s/sub", "s/sub2", 0, &is_dir));
    CHECK(is_dir);
    CHECK_RC(wb_rename(e.wb, "s/n", "s/b2", WB_NOREPLACE, &is_dir),
             -EEXIST);
    CHECK_OK(wb_mkdir(e.wb, "s/e"));
    CHECK_RC(wb_mkdir(e.wb, "s/e"), -EEXIST);
    CHECK_STR(wb_names(e.wb, "s/"), "b2,e/,n,sub2/");
    CHECK_STR(wb_names(e.wb, "s/sub2/"), "c");
    CHECK_STR(wb_read(e.wb, e.c, "s/sub2/c"), "C");
    CHECK_STR(wb_read(e.wb, e.c, "s/b2"), "B");
    CHECK_STR(wb_read(e.wb, e.c, "s/n"), "N");
    CHECK_STR(wb_read(e.wb, e.c, "s/a"), "");
    CHECK_RC(wb_rmdir(e.wb, "s/sub2"), -ENOTEMPTY);
    CHECK_OK(wb_rmdir(e.wb, "s/e"));
    CHECK_STR(store_read(&e, "s/a"), "A");      /* nothing uploaded yet */
    CHECK_STR(store_read(&e, "s/n"), "-");
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "s/a"), "-");
    CHECK_STR(store_read(&e, "s/b"), "-");
    CHECK_STR(store_read(&e, "s/b2"), "B");
    CHECK_STR(store_read(&e, "s/n"), "N");
    CHECK_STR(store_read(&e, "s/n.tmp"), "-");
    CHECK_STR(store_read(&e, "s/sub2/c"), "C");
    CHECK_STR(store_read(&e, "s/sub/c"), "-");
    CHECK_STR(wb_names(e.wb, "s/"), "b2,n,sub2/");
    CHECK_STR(wb_read(e.wb, e.c, "s/n"), "N");  /* now from the store */
    env_close(&e);
}

/* Staged changes survive a close (as a crash would leave them) and a
   reopen replays them; a file never closed is dropped. */
TEST(replay)
{
    struct env e;
    struct wb_want w = {.create = true};
    struct wb_node *n;
    bool is_dir;
    char path[400];

    env_open(&e, "r", "r-stg");
    wb_put_file(e.wb, "a", "one");
    CHECK_OK(wb_rename(e.wb, "a", "b", 0, &is_dir));
    wb_put_file(e.wb, "c", "gone");
    CHECK_OK(wb_unlink(e.wb, "c"));
    CHECK_OK(wb_mkdir(e.wb, "d"));
    CHECK_OK(wb_open_write(e.wb, "open", &w, &n));   /* never closed */
    CHECK_OK(wb_node_write(e.wb, n, "half", 4, 0));
    wb_stop(e.wb);
    CHECK_STR(store_read(&e, "b"), "-");
    wb_node_close(e.wb, n, true, false);
    wb_node_put(n);
    env_close(&e);

    env_open(&e, "r", "r-stg");
    CHECK_STR(wb_read(e.wb, e.c, "b"), "one");
    CHECK_STR(wb_read(e.wb, e.c, "a"), "");
    CHECK_STR(wb_read(e.wb, e.c, "c"), "");
    CHECK_STR(wb_read(e.wb, e.c, "d"), "<dir>");
    CHECK_STR(wb_read(e.wb, e.c, "open"), "");
    CHECK_STR(wb_names(e.wb, ""), "b,d/");
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "b"), "one");
    CHECK_STR(store_read(&e, "open"), "-");
    CHECK_OK(wb_rmdir(e.wb, "d"));
    CHECK_STR(wb_names(e.wb, ""), "b");
    env_close(&e);
    snprintf(path, sizeof(path), "%s/r-stg/data", t_dir);
    /* no staged data is left; the staging dir itself is gone when the
       uploader found d/ gone from the store before the close */
    CHECK(rmdir(path) == 0 || errno == ENOENT);
}

/* A torn record (a crash mid-append) and a corrupt one are cut off; the
   records before them replay; the journal is rewritten compact. */
TEST(torn_tail)
{
    static const unsigned char torn[] = {40, 0, 0, 0, 1, 2, 3};
    unsigned char bad[64];
    struct env e;
    char path[400];
    off_t before;
    int fd;

    env_open(&e, "t", "t-stg");
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "f%02d", i);
        wb_put_file(e.wb, key, key);
    }
    env_close(&e);
    snprintf(path, sizeof(path), "%s/t-stg/journal", t_dir);
    before = file_size(path);
    CHECK(before > 0);
    memset(bad, 0, sizeof(bad));
    bad[0] = 40;                        /* length 40, checksum 0: corrupt */
    fd = open(path, O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, bad, 52), 52);
    CHECK_EQ(write(fd, torn, sizeof(torn)), (long long)sizeof(torn));
    close(fd);

    env_open(&e, "t", "t-stg");
    CHECK_STR(wb_read(e.wb, e.c, "f00"), "f00");
    CHECK_STR(wb_read(e.wb, e.c, "f19"), "f19");
    CHECK(file_size(path) <= before);
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "f07"), "f07");
    env_close(&e);
}

/* A second mount of one staging dir is refused; so is a staging dir
   holding changes for another store. */
TEST(exclusive)
{
    struct env e;
    struct env other;
    struct wb_cfg cfg = {.upload_jobs = 1, .upload_delay_ms = 60000};
    struct tfs_wb *wb2;

    env_open(&e, "x", "x-stg");
    cfg.staging_dir = e.stg;
    CHECK_RC(wb_open(&wb2, &cfg, e.st, e.c), -EBUSY);
    wb_put_file(e.wb, "k", "v");
    env_close(&e);
    snprintf(other.root, sizeof(other.root), "%s/y", t_dir);
    mkdir(other.root, 0755);
    CHECK_OK(tfs_store_open(&other.st, other.root, NULL));
    CHECK_OK(tfs_cache_create(&other.c));
    CHECK_OK(tfs_cache_open(other.c, other.st));
    cfg.staging_dir = e.stg;
    CHECK_RC(wb_open(&wb2, &cfg, other.st, other.c), TFS_EOPTION);
    tfs_cache_close(other.c);
    tfs_store_close(other.st);
    env_open(&e, "x", "x-stg");          /* its own store: fine */
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "k"), "v");
    env_close(&e);
}

/* Copy on write: a sealed file's bytes never change, so the journal's
   record stays true while a writer changes the file again. */
TEST(copy_on_write)
{
    struct env e;
    struct wb_want w = {0};
    struct wb_node *n;

    env_open(&e, "c", "c-stg");
    wb_put_file(e.wb, "f", "0123456789");
    CHECK_OK(wb_open_write(e.wb, "f", &w, &n));
    CHECK_OK(wb_node_write(e.wb, n, "AB", 2, 0));
    CHECK_STR(wb_read(e.wb, e.c, "f"), "AB23456789");
    wb_stop(e.wb);                      /* a crash before the close */
    wb_node_close(e.wb, n, true, false);
    wb_node_put(n);
    env_close(&e);
    env_open(&e, "c", "c-stg");
    CHECK_STR(wb_read(e.wb, e.c, "f"), "0123456789");
    CHECK_OK(wb_open_write(e.wb, "f", &w, &n));
    CHECK_OK(wb_node_truncate(e.wb, n, 4));
    wb_node_close(e.wb, n, true, true);
    wb_node_put(n);
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "f"), "0123");
    env_close(&e);
}

/* Renamed again while the first move is in flight: the second move takes
   the object from where the first one put it. */
TEST(double_rename)
{
    struct env e;
    bool is_dir;

    t_delay_ms = 0;
    t_wrap = "fault+";
    t_query = "?latency_ms=300";
    env_open(&e, "d", "d-stg");
    CHECK_OK(tfs_store_put(e.st, "a", "A", 1, NULL));
    CHECK_STR(wb_read(e.wb, e.c, "a"), "A");    /* cache the lookups, */
    CHECK_STR(wb_read(e.wb, e.c, "b"), "");     /* so that the renames */
    CHECK_STR(wb_read(e.wb, e.c, "c"), "");     /* do not wait on them */
    CHECK_OK(wb_rename(e.wb, "a", "b", 0, &is_dir));
    usleep(100000);                     /* the move a -> b is running */
    CHECK_OK(wb_rename(e.wb, "b", "c", 0, &is_dir));
    sync_all(e.wb);
    CHECK_STR(wb_read(e.wb, e.c, "c"), "A");
    CHECK_STR(store_read(&e, "c"), "A");
    CHECK_STR(store_read(&e, "a"), "-");
    CHECK_STR(store_read(&e, "b"), "-");
    CHECK_STR(wb_names(e.wb, ""), "c");
    env_close(&e);
    t_delay_ms = 60000;
    t_wrap = t_query = "";
}

TESTS(T(view), T(replay), T(torn_tail), T(exclusive), T(copy_on_write),
      T(double_rename));

int main(int argc, char **argv)
{
    char cmd[300];
    int rc;

    tfs_log_set_sink(tfs_log_stderr, NULL);
    tfs_log_set_level(getenv("WBDEBUG") ? TFS_LOG_DEBUG : TFS_LOG_WARNING);
    snprintf(t_dir, sizeof(t_dir), "/tmp/tfs-test-wb-XXXXXX");
    if (mkdtemp(t_dir) == NULL)
        return 1;
    rc = test_run(test_cases, sizeof(test_cases) / sizeof(test_cases[0]),
                  argc, argv);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", t_dir);
    return rc;
}
