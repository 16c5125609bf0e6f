/* SPDX-License-Identifier: MIT */
/*
 * The write-back engine (src/wb/) without FUSE, over a directory store
 * and a RAM cache: the view (overlay over the store), the journal
 * (replay, torn and corrupt tails, compaction, a staging dir of another
 * store), the lock, and sync.  Uploads wait a minute unless a sync
 * hurries them, so every case controls when the store changes.
 *
 * Recovery (docs/writeback.md): a damaged record costs only itself
 * (resync), every byte offset of a journal flipped in turn never loses a
 * data file, an empty journal beside data files refuses the mount, a
 * failed journal fdatasync sticks, a record is never sealed with a field
 * missing (failing allocations), replayed files hold no descriptor.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/cache.h"
#include "tierfs/log.h"
#include "tierfs/mem.h"
#include "tierfs/store.h"
#include "wb/wb.h"
#include "wb/wb_int.h"

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
static uint64_t t_early;                /* early_writeback of env_open */

static void env_open_wb(struct env *e)
{
    struct wb_cfg cfg = {
        .staging_dir = e->stg,
        .staging_max = 1ull << 30,
        .staging_wait_ms = 5000,
        .upload_jobs = 2,
        .upload_delay_ms = t_delay_ms,
        .retry_max_ms = 500,
        .early_writeback = t_early,
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


/* ---- recovery ---- */

/* The whole of path into buf (at most size); its length or -1. */
static long slurp(const char *path, unsigned char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    long n;

    if (fd < 0)
        return -1;
    n = (long)read(fd, buf, size);
    close(fd);
    return n;
}

static void spit(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    CHECK(fd >= 0);
    CHECK_EQ(write(fd, buf, len), (long long)len);
    close(fd);
}

/* Files in dir whose names start with prefix ("" for all). */
static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.' &&
             strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* The offset of the payload of the k-th record (0: the HEAD) of journal
   image img, by its framing. */
static size_t record_payload(const unsigned char *img, size_t len, int k)
{
    size_t off = 8;

    for (int i = 0; i <= k; i++) {
        size_t rlen = img[off] | (size_t)img[off + 1] << 8 |
                      (size_t)img[off + 2] << 16 | (size_t)img[off + 3] << 24;
        if (i == k)
            return off + 12;
        off += 12 + rlen;
        CHECK(off < len);
    }
    return 0;
}

/* E2 of the review: one byte flipped inside the first FILE record of
   three costs that record only; the other two files replay and upload,
   and the first one's data is kept in lost+found, never deleted. */
TEST(corrupt_record)
{
    unsigned char img[4096];
    char path[400];
    char lost[400];
    struct env e;
    long len;
    size_t p;

    env_open(&e, "k", "k-stg");
    wb_put_file(e.wb, "f1", "one");
    wb_put_file(e.wb, "f2", "two");
    wb_put_file(e.wb, "f3", "three");
    env_close(&e);
    snprintf(path, sizeof(path), "%s/k-stg/journal", t_dir);
    len = slurp(path, img, sizeof(img));
    CHECK(len > 0);
    p = record_payload(img, (size_t)len, 1);    /* FILE f1 */
    CHECK_EQ(img[p], 2);                        /* WB_J_FILE */
    img[p + 10] ^= 0xff;                        /* inside its data id */
    spit(path, img, (size_t)len);

    env_open(&e, "k", "k-stg");
    CHECK_STR(wb_read(e.wb, e.c, "f2"), "two");
    CHECK_STR(wb_read(e.wb, e.c, "f3"), "three");
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "f2"), "two");
    CHECK_STR(store_read(&e, "f3"), "three");
    env_close(&e);
    snprintf(lost, sizeof(lost), "%s/k-stg/lost+found", t_dir);
    CHECK_EQ(count_files(lost, "data-"), 1);    /* f1's bytes */
    CHECK_EQ(count_files(lost, "journal-"), 1); /* its record */
}

/* E2b: an empty journal beside staged data refuses the mount and
   changes nothing; the data files stay where they are. */
TEST(empty_journal)
{
    struct wb_cfg cfg = {.upload_jobs = 1, .upload_delay_ms = 60000};
    char path[400];
    char data[400];
    struct env e;
    struct tfs_wb *wb;

    env_open(&e, "m", "m-stg");
    wb_put_file(e.wb, "g1", "one");
    wb_put_file(e.wb, "g2", "two");
    env_close(&e);
    snprintf(path, sizeof(path), "%s/m-stg/journal", t_dir);
    snprintf(data, sizeof(data), "%s/m-stg/data", t_dir);
    CHECK_EQ(count_files(data, ""), 2);
    CHECK_OK(truncate(path, 0));
    env_open(&e, "m", "other-stg");     /* the store and cache only */
    cfg.staging_dir = e.stg;
    snprintf(e.stg, sizeof(e.stg), "%s/m-stg", t_dir);
    CHECK_RC(wb_open(&wb, &cfg, e.st, e.c), -EUCLEAN);
    CHECK(strstr(tfs_errdetail(), "2 data files") != NULL);
    CHECK_EQ(count_files(data, ""), 2);
    unlink(path);                       /* missing: the same */
    CHECK_RC(wb_open(&wb, &cfg, e.st, e.c), -EUCLEAN);
    CHECK_EQ(count_files(data, ""), 2);
    env_close(&e);
}

/* Move lost+found/data-<id> files back to data/ and drop the rest. */
static void flip_restore(const char *stg)
{
    char lost[400];
    char from[700];
    char to[700];
    DIR *d;
    struct dirent *de;

    snprintf(lost, sizeof(lost), "%s/lost+found", stg);
    d = opendir(lost);
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(from, sizeof(from), "%s/%s", lost, de->d_name);
        snprintf(to, sizeof(to), "%s/data/%s", stg, de->d_name + 5);
        if (strncmp(de->d_name, "data-", 5) == 0)
            CHECK_OK(rename(from, to));
        else
            CHECK_OK(unlink(from));
    }
    closedir(d);
}

/*
 * Every byte offset of a journal of 21 records (HEAD + 20 files) flipped
 * in turn, each time from the same state: recovery never loses a data
 * file (referenced ones replay, the others are in lost+found), and a
 * flip costs at most the record it hits.  Uploads fail (fault+), so
 * that only recovery moves files.  The staging dir is on /dev/shm when
 * there is one, for speed.  A row of docs/reliability.md.
 */
TEST(flip_every_byte)
{
    unsigned char img[8192];
    char path[400];
    char data[400];
    char lost[400];
    struct env e;
    long len;
    size_t tried = 0;
    size_t refused = 0;
    size_t rec_min = SIZE_MAX;
    size_t rec_sum = 0;
    size_t lost_files = 0;
    char shm[] = "/dev/shm/tfs-test-wb-flip-XXXXXX";
    bool on_shm = mkdtemp(shm) != NULL;

    t_wrap = "fault+";
    t_query = "?error_rate=1&error_ops=put,copy,rename,remove";
    env_open(&e, "p", "p-stg");
    if (on_shm)
        snprintf(e.stg, sizeof(e.stg), "%s/stg", shm);
    wb_close(e.wb);
    env_open_wb(&e);
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "f%02d", i);
        wb_put_file(e.wb, key, key);
    }
    wb_close(e.wb);
    snprintf(path, sizeof(path), "%s/journal", e.stg);
    snprintf(data, sizeof(data), "%s/data", e.stg);
    snprintf(lost, sizeof(lost), "%s/lost+found", e.stg);
    len = slurp(path, img, sizeof(img));
    CHECK(len > 8 && len < (long)sizeof(img));
    CHECK_EQ(count_files(data, ""), 20);
    tfs_log_set_level(TFS_LOG_ERR - 1); /* quiet: each flip logs */
    for (long off = 0; off < len; off++) {
        size_t files;
        int rc;

        img[off] ^= 0xff;
        spit(path, img, (size_t)len);
        img[off] ^= 0xff;
        rc = wb_open(&e.wb, &(struct wb_cfg){.staging_dir = e.stg,
                     .upload_jobs = 1, .upload_delay_ms = 60000,
                     .retry_max_ms = 60000}, e.st, e.c);
        tried++;
        if (rc < 0) {                   /* the magic: refused, all kept */
            CHECK_RC(rc, TFS_EFORMAT);
            CHECK(off < 8);
            CHECK_EQ(count_files(data, ""), 20);
            refused++;
            continue;
        }
        files = (size_t)count_files(data, "");
        CHECK_EQ(files + (size_t)count_files(lost, "data-"), 20);
        CHECK(files >= 19);             /* at most the record hit */
        CHECK(e.wb->j.rp_records >= 20);
        rec_min = TFS_MIN(rec_min, e.wb->j.rp_records);
        rec_sum += e.wb->j.rp_records;
        lost_files += 20 - files - (size_t)count_files(lost, "data-");
        wb_close(e.wb);
        e.wb = NULL;
        flip_restore(e.stg);
        CHECK_EQ(count_files(data, ""), 20);
    }
    tfs_log_set_level(getenv("TFS_TEST_DEBUG") ? TFS_LOG_DEBUG
                                                : TFS_LOG_WARNING);
    printf("journal flip: %zu offsets of a %ld-byte journal (21 records) "
           "each flipped, %zu refused (magic, data kept); records "
           "recovered min %zu avg %.2f of 21; files lost %zu\n", tried, len,
           refused, rec_min, (double)rec_sum / (double)(tried - refused),
           lost_files);
    CHECK_EQ(lost_files, 0);
    CHECK_EQ(rec_min, 20);
    spit(path, img, (size_t)len);
    env_open_wb(&e);
    env_close(&e);
    t_wrap = t_query = "";
    if (on_shm) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shm);
        CHECK_EQ(system(cmd), 0);
    }
}

/* R1: a failed journal fdatasync fails the change that waited on it and
   every later one, even once syncs work again, until compaction; the
   bytes that failed seal stay as they were (a later write copies), so
   the compaction's record of them stays true. */
TEST(sync_error_sticks)
{
    struct wb_want w = {.create = true, .trunc = true};
    struct wb_node *n;
    struct env e;
    int real;
    int null;

    env_open(&e, "s", "s-stg");
    wb_stop(e.wb);                      /* no scheduler: no compaction */
    real = dup(e.wb->j.fd);
    null = open("/dev/null", O_RDWR);
    CHECK(real >= 0 && null >= 0);
    CHECK(dup2(null, e.wb->j.fd) >= 0); /* writes work, fdatasync fails */
    CHECK_OK(wb_open_write(e.wb, "a", &w, &n));
    CHECK_OK(wb_node_write(e.wb, n, "A", 1, 0));
    CHECK_RC(wb_node_seal(e.wb, n), -EINVAL);
    wb_node_close(e.wb, n, true, false);
    wb_node_put(n);
    CHECK(dup2(real, e.wb->j.fd) >= 0); /* the disk is back */
    CHECK_OK(wb_open_write(e.wb, "b", &w, &n));
    CHECK_OK(wb_node_write(e.wb, n, "B", 1, 0));
    CHECK_RC(wb_node_seal(e.wb, n), -EINVAL);   /* the append failed */
    CHECK_OK(wb_node_write(e.wb, n, "B2", 2, 1));  /* on a copy */
    wb_node_close(e.wb, n, true, false);
    wb_node_put(n);
    CHECK_RC(wb_mkdir(e.wb, "d"), -EINVAL);
    pthread_mutex_lock(&e.wb->lock);
    CHECK_OK(wb_journal_compact(e.wb));
    pthread_mutex_unlock(&e.wb->lock);
    wb_put_file(e.wb, "c", "C");        /* works again */
    CHECK_OK(wb_mkdir(e.wb, "d2"));
    close(real);
    close(null);
    env_close(&e);
    env_open(&e, "s", "s-stg");
    CHECK_STR(wb_read(e.wb, e.c, "a"), "A");   /* what the seals saw */
    CHECK_STR(wb_read(e.wb, e.c, "b"), "B");
    CHECK_STR(wb_read(e.wb, e.c, "c"), "C");
    CHECK_STR(wb_read(e.wb, e.c, "d2"), "<dir>");
    env_close(&e);
}

/* Allocation number t_fail_at of this thread fails; the others work. */
static _Thread_local long t_fail_at = -1;
static _Thread_local long t_allocs;

static bool fail_now(void)
{
    return t_fail_at >= 0 && t_allocs++ == t_fail_at;
}

static void *fail_malloc(size_t n)
{
    return fail_now() ? NULL : malloc(n);
}

static void *fail_calloc(size_t c, size_t n)
{
    return fail_now() ? NULL : calloc(c, n);
}

static void *fail_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : realloc(p, n);
}

/* One record of every op, with keys long enough to grow the buffer
   several times. */
static void build_record(struct tfs_buf *b)
{
    static char k1[900];
    static char k2[600];
    struct tfs_stat st = {.size = 7, .mtime_ns = 9};

    memset(k1, 'k', sizeof(k1) - 1);
    memset(k2, 'm', sizeof(k2) - 1);
    snprintf(st.version, sizeof(st.version), "v1");
    wb_jop_key(b, WB_J_WHITEOUT, "w");
    wb_jop_file(b, k1, 5, 3, 11, 0);
    wb_jop_moved(b, k2, k1, &st);
    wb_jop_dir(b, "dir/", 1);
    wb_jop_file(b, "tail", 6, 4, 12, WB_JF_IN_STORE);
}

/*
 * Every allocation of the journal encoders failing in turn (only the
 * Nth: later ones succeed): a record that lost a field is never
 * appended with a valid checksum; what is appended is the whole record.
 */
TEST(alloc_failures)
{
    struct tfs_buf ref;
    struct env e;
    long n;

    tfs_buf_init(&ref, 0);
    build_record(&ref);
    env_open(&e, "a", "a-stg");
    for (n = 0; n < 64; n++) {
        struct tfs_buf b;
        uint64_t before;
        uint64_t end;
        int rc;

        tfs_buf_init(&b, 0);
        t_allocs = 0;
        t_fail_at = n;
        CHECK_OK(tfs_replace_allocator(fail_malloc, fail_realloc,
                                       fail_calloc, free));
        build_record(&b);
        CHECK_OK(tfs_replace_allocator(malloc, realloc, calloc, free));
        t_fail_at = -1;
        if (t_allocs <= n) {            /* nothing failed: done */
            tfs_buf_cleanup(&b);
            break;
        }
        CHECK(b.len != ref.len || memcmp(b.p, ref.p, ref.len) != 0 ||
              n > 0);
        pthread_mutex_lock(&e.wb->lock);
        before = e.wb->j.size;
        rc = wb_journal_append(e.wb, &b, &end);
        pthread_mutex_unlock(&e.wb->lock);
        if (rc == 0)                    /* only a whole record */
            CHECK(e.wb->j.size == before + 12 + ref.len);
        else
            CHECK_RC(rc, -ENOMEM);
        tfs_buf_cleanup(&b);
    }
    CHECK(n > 3 && n < 64);             /* the loop met every allocation */
    env_close(&e);
    tfs_buf_cleanup(&ref);
    env_open(&e, "a", "a-stg");         /* every record replays whole */
    CHECK(e.wb->j.rp_bad == 0);
    env_close(&e);
}

/* A create, write, seal and rename with allocation n failing (this
 * thread only); returns how many allocations they made. */
static long ops_failing_at(struct env *e, long n, int *rc_seal,
                           int *rc_rename)
{
    struct wb_want w = {.create = true, .trunc = true};
    struct wb_node *nd = NULL;
    bool is_dir;
    long made;
    int rc;

    t_allocs = 0;
    t_fail_at = n;
    CHECK_OK(tfs_replace_allocator(fail_malloc, fail_realloc, fail_calloc,
                                   free));
    rc = wb_open_write(e->wb, "dir/x", &w, &nd);
    if (rc == 0)
        rc = wb_node_write(e->wb, nd, "data", 4, 0);
    if (rc == 0)
        rc = wb_node_seal(e->wb, nd);
    *rc_seal = rc;
    if (nd != NULL) {
        wb_node_close(e->wb, nd, true, false);
        wb_node_put(nd);
    }
    *rc_rename = wb_rename(e->wb, "a-long-name-to-grow-the-record",
                           "b-long-name-to-grow-the-record", 0, &is_dir);
    CHECK_OK(tfs_replace_allocator(malloc, realloc, calloc, free));
    t_fail_at = -1;
    made = t_allocs;
    return made;
}

/*
 * wb_node_seal and wb_rename with every allocation failing in turn: each
 * fails with -ENOMEM or succeeds; a rename that failed changed nothing in
 * the live view, and after a remount (the journal replayed) what
 * succeeded is there and what failed left nothing half done.
 */
TEST(ops_alloc_failures)
{
    const char *a = "a-long-name-to-grow-the-record";
    const char *b = "b-long-name-to-grow-the-record";
    long n;

    for (n = 0; n < 400; n++) {
        char root[32];
        char stg[32];
        struct env e;
        int rc_seal;
        int rc_rename;
        long made;

        snprintf(root, sizeof(root), "oa-%ld", n);  /* each its own */
        snprintf(stg, sizeof(stg), "oa-stg-%ld", n);
        env_open(&e, root, stg);
        wb_put_file(e.wb, a, "one");
        made = ops_failing_at(&e, n, &rc_seal, &rc_rename);
        if (rc_seal != 0)
            CHECK_RC(rc_seal, -ENOMEM);
        if (rc_rename != 0) {
            CHECK_RC(rc_rename, -ENOMEM);
            /* a failed rename changed nothing, in the live view too */
            CHECK_STR(wb_read(e.wb, e.c, a), "one");
            CHECK_STR(wb_read(e.wb, e.c, b), "");
        }
        wb_stop(e.wb);
        env_close(&e);
        env_open(&e, root, stg);        /* replay */
        CHECK(e.wb->j.rp_bad == 0);
        if (rc_seal == 0)
            CHECK_STR(wb_read(e.wb, e.c, "dir/x"), "data");
        else
            CHECK(strcmp(wb_read(e.wb, e.c, "dir/x"), "") == 0 ||
                  strcmp(wb_read(e.wb, e.c, "dir/x"), "data") == 0);
        if (rc_rename == 0) {
            CHECK_STR(wb_read(e.wb, e.c, b), "one");
            CHECK_STR(wb_read(e.wb, e.c, a), "");
        } else {
            CHECK_STR(wb_read(e.wb, e.c, a), "one");
            CHECK_STR(wb_read(e.wb, e.c, b), "");
        }
        env_close(&e);
        if (made <= n)                  /* nothing failed: every one met */
            break;
    }
    CHECK(n > 5 && n < 400);
    printf("# %ld allocations of create, write, seal and rename failed in "
           "turn\n", n);
}

/* The tfs_buf error sticks: appends after a failure change nothing. */
TEST(buf_sticky)
{
    struct tfs_buf b;

    tfs_buf_init(&b, 8);
    CHECK_OK(tfs_buf_append(&b, "1234", 4));
    CHECK_RC(tfs_buf_append(&b, "56789", 5), TFS_ETOOBIG);
    CHECK_RC(tfs_buf_append(&b, "5", 1), TFS_ETOOBIG);
    CHECK_RC(tfs_buf_puts(&b, "x"), TFS_ETOOBIG);
    CHECK_RC(tfs_buf_printf(&b, "%d", 1), TFS_ETOOBIG);
    CHECK_EQ(b.len, 4);
    CHECK_RC(tfs_buf_error(&b), TFS_ETOOBIG);
    tfs_buf_reset(&b);
    CHECK_OK(tfs_buf_error(&b));
    CHECK_OK(tfs_buf_append(&b, "5", 1));
    tfs_buf_cleanup(&b);
}

/* Descriptors open in this process. */
static int open_fds(void)
{
    return count_files("/proc/self/fd", "") - 1;    /* the opendir's */
}

/*
 * D3: staged files hold no descriptor: 300 written and closed, then
 * replayed, under a soft RLIMIT_NOFILE of what is open plus 48; all
 * readable, written and uploaded.
 */
TEST(fds_on_demand)
{
    struct rlimit old;
    struct rlimit low;
    struct env e;
    char key[16];
    int base;

    env_open(&e, "n", "n-stg");
    CHECK_OK(getrlimit(RLIMIT_NOFILE, &old));
    base = open_fds();
    low = old;
    low.rlim_cur = (rlim_t)base + 48;
    CHECK_OK(setrlimit(RLIMIT_NOFILE, &low));
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "g%03d", i);
        wb_put_file(e.wb, key, key);
    }
    CHECK(open_fds() <= base + 2);
    env_close(&e);
    /* replays 300 FILE records; their uploads start at once, and each
       of the 2 jobs holds a few descriptors while it runs */
    env_open(&e, "n", "n-stg");
    CHECK(open_fds() <= base + 16);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "g%03d", i);
        CHECK_STR(wb_read(e.wb, e.c, key), key);
    }
    CHECK(open_fds() <= base + 16);
    CHECK_OK(setrlimit(RLIMIT_NOFILE, &old));
    sync_all(e.wb);
    CHECK_STR(store_read(&e, "g000"), "g000");
    CHECK_STR(store_read(&e, "g299"), "g299");
    env_close(&e);
}

/*
 * early_writeback: a sequential writer's data is sent to disk every
 * early_writeback bytes before the seal; writes behind the last start
 * start nothing; the bytes are the same; 0 turns it off.
 */
static uint64_t early_run(struct env *e, const char *key)
{
    static char chunk[256 << 10];
    static char back[256 << 10];
    struct wb_want w = {.create = true, .trunc = true};
    struct wb_metrics m;
    struct wb_node *n;
    size_t got;

    CHECK_OK(wb_open_write(e->wb, key, &w, &n));
    for (unsigned i = 0; i < 16; i++) {        /* 4 MiB, in order */
        memset(chunk, 'a' + (int)i, sizeof(chunk));
        CHECK_OK(wb_node_write(e->wb, n, chunk, sizeof(chunk),
                               (uint64_t)i * sizeof(chunk)));
    }
    memset(chunk, 'Z', sizeof(chunk));          /* behind: nothing more */
    CHECK_OK(wb_node_write(e->wb, n, chunk, sizeof(chunk), 0));
    CHECK_OK(wb_node_seal(e->wb, n));
    CHECK_OK(wb_node_read(n, back, sizeof(back), 0, &got));
    CHECK(got == sizeof(back) && memcmp(back, chunk, got) == 0);
    CHECK_OK(wb_node_read(n, back, sizeof(back), 15 * sizeof(back), &got));
    memset(chunk, 'p', sizeof(chunk));
    CHECK(got == sizeof(back) && memcmp(back, chunk, got) == 0);
    wb_node_close(e->wb, n, true, true);
    wb_node_put(n);
    wb_metrics_get(e->wb, &m);
    return m.early_writeback_bytes;
}

TEST(early_writeback)
{
    struct env e;

    t_early = 1u << 20;
    env_open(&e, "ew", "ew-stg");
    CHECK(early_run(&e, "f") == 4u << 20);      /* at 1, 2, 3 and 4 MiB */
    env_close(&e);
    t_early = 0;
    env_open(&e, "ew0", "ew0-stg");
    CHECK(early_run(&e, "f") == 0);
    env_close(&e);
}

TESTS(T(view), T(replay), T(torn_tail), T(exclusive), T(copy_on_write),
      T(double_rename), T(corrupt_record), T(empty_journal),
      T(flip_every_byte), T(sync_error_sticks), T(alloc_failures),
      T(ops_alloc_failures), T(buf_sticky), T(fds_on_demand),
      T(early_writeback));

int main(int argc, char **argv)
{
    char cmd[300];
    int rc;

    tfs_log_set_sink(tfs_log_stderr, NULL);
    tfs_log_set_level(getenv("TFS_TEST_DEBUG") ? TFS_LOG_DEBUG
                                                : TFS_LOG_WARNING);
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
