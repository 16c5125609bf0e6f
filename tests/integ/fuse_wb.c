/* SPDX-License-Identifier: MIT */
/*
 * Mounted tests of write-back (docs/writeback.md): each case mounts the
 * real tierfs binary over a remote, writes through the kernel, and checks
 * the remote itself, opened with the library, byte for byte.
 *
 *   TFS_TEST_BIN=build/tierfs TFS_TEST_REMOTE=posix|s3://bucket/prefix \
 *       fuse_wb [CASE]
 *
 * Cases:
 *   semantics     create, write, read-your-writes, write-then-rename,
 *                 a write-only handle's writes (past the page cache)
 *                 seen by a reader and an mmap that cached the page,
 *                 truncate, append, overwrite, unlink, mkdir, rmdir,
 *                 renames of staged files, of store objects and of a
 *                 directory, mtime; nothing reaches the store before
 *                 `tierfs sync` (long upload delay), then exactly the
 *                 view does; a clean remount resumes a pending upload
 *   backpressure  staging-max 4M, 22 MiB written: the writer waits for
 *                 uploads (bandwidth-capped) and completes
 *   crash         kill -9 of the daemon at random points of a workload,
 *                 TFS_TEST_WB_CRASH_RUNS times (20): after remount and sync,
 *                 every file whose close() returned is in the store with
 *                 its bytes, and no object has wrong or partial bytes
 *   failure       injected put errors are retried; a refused store makes
 *                 `tierfs sync --timeout` fail with the error, and the
 *                 uploads complete once it heals
 *   journal       E2/E2b of the reliability review: kill -9 with 3
 *                 closed files pending, one byte of the first FILE record
 *                 flipped: after remount and sync the other 2 are in the
 *                 store, the first too or its data in lost+found; an
 *                 emptied journal beside 2 data files refuses the mount,
 *                 data kept
 *   eager         eager uploads (S3): a 72 MiB sequential write's parts go
 *                 before its close (the metric), the object appears only
 *                 at the complete, byte-exact; a write behind the parts
 *                 sent, a rename before the complete and a failing part
 *                 (fault store) cancel it and the whole file goes; kill
 *                 -9 with one under way: recovery aborts it (its upload
 *                 id takes no part) and puts the file.  posix: nothing
 *                 eager, the file goes whole
 *   many_files    TFS_TEST_WB_MANY_FILES (3000; S3: 600, each new name costs
 *                 a lookup there) files pending in a daemon under
 *                 RLIMIT_NOFILE TFS_TEST_WB_NOFILE (512; S3: 256, soft and
 *                 hard), `ls` works, a remount under the same limit
 *                 uploads them all
 *
 * Every wait is bounded; a mount that fails is a failure, never a skip.
 * TFS_TEST_KEEP=1 keeps the scratch directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integ_util.h"
#include "test.h"
#include "tierfs/mem.h"
#include "tierfs/store.h"

#define KIB 1024u
#define MIB (1024u * 1024u)



/* ---- helpers ---- */

static bool file_has(const char *path, const char *needle)
{
    char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* A prefix of its own on the remote (for posix, its directory). */
static void new_prefix(char *out, size_t size)
{
    char dir[PATH_MAX + 64];

    sfmt(out, size, "w%u-%u", ++t_seq, (unsigned)getpid());
    sfmt(dir, sizeof(dir), "%s/%s", t_base, out);
    if (!t_s3)
        CHECK(mkdir(dir, 0755) == 0);
}

/* "fault+" + the remote's URI for prefix sub + "?query". */
static void remote_uri(char *out, size_t size, const char *sub,
                       const char *query)
{
    sfmt(out, size, "fault+%s%s/%s%s%s", t_s3 ? "" : "file://", t_base, sub,
         query && query[0] ? "?" : "", query ? query : "");
}

/* ---- the remote ---- */

static void put_obj(const char *key, const void *buf, size_t len)
{
    CHECK_OK(tfs_store_put(t_st, key, buf, len, NULL));
}

/* The whole object at key (malloc'd) and its length, or NULL. */
static unsigned char *store_get(const char *key, size_t *len)
{
    struct tfs_stat st;
    unsigned char *p;
    size_t n = 0;

    if (tfs_store_stat(t_st, key, &st) < 0)
        return NULL;
    p = malloc(st.size + 1);
    if (p != NULL && st.size > 0 &&
        tfs_store_read(t_st, key, p, st.size, 0, NULL, &n) < 0) {
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

static bool store_has(const char *pre, const char *name)
{
    char key[512];
    struct tfs_stat st;

    sfmt(key, sizeof(key), "%s/%s", pre, name);
    return tfs_store_stat(t_st, key, &st) == 0;
}

/* The object pre/name holds exactly want (len bytes). */
static bool store_equals(const char *pre, const char *name,
                         const unsigned char *want, size_t len)
{
    char key[512];
    size_t n = 0;
    unsigned char *got;
    bool same;

    sfmt(key, sizeof(key), "%s/%s", pre, name);
    got = store_get(key, &n);
    same = got != NULL && n == len && (len == 0 || !memcmp(got, want, len));
    if (!same)
        fprintf(stderr, "    store %s: %s%zu of %zu bytes%s\n", key,
                got ? "" : "missing; ", n, len,
                got && n == len ? ", different" : "");
    free(got);
    return same;
}

struct keylist {
    char   names[256][128];
    size_t n;
    size_t plen;
};

static int keys_page(void *arg, const struct tfs_list_page *pg)
{
    struct keylist *k = arg;

    for (size_t i = 0; i < pg->n_entries && k->n < 256; i++)
        sfmt(k->names[k->n++], 128, "%s", pg->entries[i].key + k->plen);
    return 0;
}

/* Every key under pre/ (names relative to it), sorted. */
static void store_keys(const char *pre, struct keylist *k)
{
    char p[256];

    sfmt(p, sizeof(p), "%s/", pre);
    k->n = 0;
    k->plen = strlen(p);
    CHECK_OK(tfs_store_list_all(t_st, p, NULL, keys_page, k));
}

/* ---- mounting ---- */

static void mp(char *out, size_t size, const char *name)
{
    sfmt(out, size, "%s/%s", t_mnt.dir, name);
}

/* tierfs sync [--timeout S] MNT [PATH]; its exit status, output in log. */
static int sync_cmd(const char *sub, unsigned timeout_s, char *log,
                    size_t log_size)
{
    char t[16];
    char *argv[] = {(char *)t_bin, "sync", "--timeout", t, t_mnt.dir,
                    (char *)sub, NULL};

    sfmt(t, sizeof(t), "%u", timeout_s);
    sfmt(log, log_size, "%s.sync-%u", t_mnt.dir, ++t_seq);
    return run_cmd(argv, log, (timeout_s + 30) * 1000);
}

static void sync_ok(const char *sub)
{
    char log[PATH_MAX + 32];
    int rc = sync_cmd(sub, 60, log, sizeof(log));

    if (rc != 0) {
        print_file(log);
        print_file(t_mnt.log);
    }
    CHECK_EQ(rc, 0);
}

/* The number at "a.b" in the control file's JSON; -1 when absent. */
static double stat_num(const char *path)
{
    static char buf[64 * 1024];
    char ctl[PATH_MAX + 32];
    char name[128];
    const char *p = buf;
    ssize_t n;
    size_t len = 0;
    int fd;

    mp(ctl, sizeof(ctl), ".tierfs-stats");
    fd = open(ctl, O_RDONLY);
    CHECK(fd >= 0);
    while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    while (p != NULL && *path != '\0') {
        size_t l = strcspn(path, ".");
        sfmt(name, sizeof(name), "\"%.*s\":", (int)l, path);
        p = strstr(p, name);
        p = p ? p + strlen(name) : NULL;
        path += l + (path[l] == '.');
    }
    return p ? strtod(p, NULL) : -1;
}

/* ---- files through the mount ---- */

/* Write len bytes of data to path (flags: O_TRUNC or O_APPEND) in
   chunks of chunk bytes; 0 or -errno of the first failure. */
static int write_file(const char *path, const unsigned char *data,
                      size_t len, int flags, size_t chunk)
{
    int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
    size_t done = 0;
    int rc = 0;

    if (fd < 0)
        return -errno;
    while (done < len && rc == 0) {
        size_t n = len - done < chunk ? len - done : chunk;
        ssize_t w = write(fd, data + done, n);
        if (w < 0)
            rc = -errno;
        else
            done += (size_t)w;
    }
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

static bool mnt_equals(const char *name, const unsigned char *want,
                       size_t len)
{
    char path[PATH_MAX + 64];
    unsigned char *got = malloc(len + 1);
    size_t done = 0;
    ssize_t n = 1;
    bool same;
    int fd;

    mp(path, sizeof(path), name);
    fd = open(path, O_RDONLY);
    while (fd >= 0 && n > 0 && done < len + 1) {
        n = read(fd, got + done, len + 1 - done);
        if (n > 0)
            done += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    same = fd >= 0 && n >= 0 && done == len && !memcmp(got, want, len);
    if (!same)
        fprintf(stderr, "    mount %s: read %zu of %zu bytes (%s)\n", name,
                done, len, fd < 0 ? strerror(errno) : "compared");
    free(got);
    return same;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The names in directory name of the mount, sorted, joined by ','. */
static void mnt_list(const char *name, char *out, size_t size)
{
    char path[PATH_MAX + 64];
    char names[64][64];
    size_t n = 0;
    struct dirent *de;
    DIR *d;

    mp(path, sizeof(path), name);
    d = opendir(path);
    CHECK(d != NULL);
    while ((de = readdir(d)) != NULL && n < 64) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            sfmt(names[n++], 64, "%s", de->d_name);
    }
    closedir(d);
    qsort(names, n, 64, name_cmp);
    out[0] = '\0';
    for (size_t i = 0, len = 0; i < n; i++) {
        sfmt(out + len, size - len, "%s%s", i ? "," : "", names[i]);
        len = strlen(out);
    }
}

/* ---- cases ---- */

/* The first part of semantics: changes visible here, not in the store. */
static void sem_changes(const char *pre, unsigned char *const *d)
{
    char path[PATH_MAX + 64], path2[PATH_MAX + 64], list[1024];
    struct stat sb;
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1700000000, 5}};
    int fd;

    /* create, read back, not in the store */
    mp(path, sizeof(path), "a.bin");
    CHECK_OK(write_file(path, d[0], 200001, O_TRUNC, 65536));
    CHECK(stat(path, &sb) == 0 && sb.st_size == 200001);
    CHECK(S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0644);
    CHECK(mnt_equals("a.bin", d[0], 200001));
    CHECK(!store_has(pre, "a.bin"));
    /* write-then-rename into a new directory */
    mp(path, sizeof(path), "d");
    CHECK(mkdir(path, 0755) == 0);
    mp(path, sizeof(path), "d/x.tmp");
    CHECK_OK(write_file(path, d[1], MIB + 3, O_TRUNC, 1u << 20));
    mp(path2, sizeof(path2), "d/x");
    CHECK(rename(path, path2) == 0);
    mnt_list("d", list, sizeof(list));
    CHECK_STR(list, "x");
    CHECK(mnt_equals("d/x", d[1], MIB + 3));
    /* truncate by path, then extend through a handle */
    mp(path, sizeof(path), "t.bin");
    CHECK_OK(write_file(path, d[2], 100000, O_TRUNC, 4096));
    CHECK(truncate(path, 50000) == 0);
    fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && ftruncate(fd, 60000) == 0 && close(fd) == 0);
    memset(d[2] + 50000, 0, 10000);
    CHECK(mnt_equals("t.bin", d[2], 60000));
    /* append to a store object, overwrite another, delete a third */
    mp(path, sizeof(path), "old.bin");
    CHECK_OK(write_file(path, (const unsigned char *)"tail", 4, O_APPEND,
                        4));
    memcpy(d[3] + 300000, "tail", 4);
    CHECK(mnt_equals("old.bin", d[3], 300004));
    mp(path, sizeof(path), "keep/k1");
    CHECK_OK(write_file(path, (const unsigned char *)"new k1", 6, O_TRUNC,
                        6));
    CHECK(mnt_equals("keep/k1", (const unsigned char *)"new k1", 6));
    mp(path, sizeof(path), "del.bin");
    CHECK(unlink(path) == 0);
    CHECK(stat(path, &sb) < 0 && errno == ENOENT);
    /* a staged file deleted before upload */
    mp(path, sizeof(path), "u.bin");
    CHECK_OK(write_file(path, d[4], 5000, O_TRUNC, 5000));
    CHECK(unlink(path) == 0);
    /* mkdir, rmdir, a non-empty rmdir */
    mp(path, sizeof(path), "e");
    CHECK(mkdir(path, 0755) == 0 && rmdir(path) == 0);
    CHECK(stat(path, &sb) < 0 && errno == ENOENT);
    mp(path, sizeof(path), "f");
    CHECK(mkdir(path, 0755) == 0);
    mp(path2, sizeof(path2), "f/z");
    CHECK_OK(write_file(path2, (const unsigned char *)"z", 1, O_TRUNC, 1));
    CHECK(rmdir(path) < 0 && errno == ENOTEMPTY);
    /* rename over an existing staged file */
    mp(path, sizeof(path), "r1");
    CHECK_OK(write_file(path, d[5], 7777, O_TRUNC, 1000));
    mp(path2, sizeof(path2), "r2");
    CHECK_OK(write_file(path2, d[4], 1234, O_TRUNC, 1000));
    CHECK(rename(path, path2) == 0);
    CHECK(mnt_equals("r2", d[5], 7777));
    CHECK(stat(path, &sb) < 0 && errno == ENOENT);
    mp(path, sizeof(path), "a.bin");
    CHECK(renameat2(AT_FDCWD, path, AT_FDCWD, path2, RENAME_NOREPLACE) < 0 &&
          errno == EEXIST);
    /* rename a directory of store objects; read it before the move */
    mp(path, sizeof(path), "mv");
    mp(path2, sizeof(path2), "mv2");
    CHECK(rename(path, path2) == 0);
    mnt_list("mv2", list, sizeof(list));
    CHECK_STR(list, "m1,sub");
    CHECK(mnt_equals("mv2/sub/m2", d[6], 70000));
    CHECK(stat(path, &sb) < 0 && errno == ENOENT);
    /* mtime of a staged file */
    mp(path, sizeof(path), "a.bin");
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
    CHECK(stat(path, &sb) == 0 && sb.st_mtim.tv_sec == 1700000000);
    mnt_list("", list, sizeof(list));
    CHECK_STR(list, "a.bin,d,f,keep,mv2,old.bin,r2,t.bin");
    CHECK(!store_has(pre, "d/x") && !store_has(pre, "a.bin") &&
          store_has(pre, "del.bin") && store_has(pre, "mv/m1"));
}

/* After sync: the store holds exactly the view. */
static void sem_check_store(const char *pre, unsigned char *const *d)
{
    static const char *want =
        "a.bin,d/x,f/z,keep/k1,mv2/m1,mv2/sub/m2,old.bin,r2,t.bin";
    struct keylist *k = calloc(1, sizeof(*k));
    char got[4096] = "";

    store_keys(pre, k);
    for (size_t i = 0, len = 0; i < k->n; i++) {
        sfmt(got + len, sizeof(got) - len, "%s%s", i ? "," : "",
             k->names[i]);
        len = strlen(got);
    }
    free(k);
    CHECK_STR(got, want);
    CHECK(store_equals(pre, "a.bin", d[0], 200001));
    CHECK(store_equals(pre, "d/x", d[1], MIB + 3));
    CHECK(store_equals(pre, "t.bin", d[2], 60000));
    CHECK(store_equals(pre, "old.bin", d[3], 300004));
    CHECK(store_equals(pre, "keep/k1", (const unsigned char *)"new k1", 6));
    CHECK(store_equals(pre, "f/z", (const unsigned char *)"z", 1));
    CHECK(store_equals(pre, "r2", d[5], 7777));
    CHECK(store_equals(pre, "mv2/m1", d[7], 5));
    CHECK(store_equals(pre, "mv2/sub/m2", d[6], 70000));
}

/*
 * Writes through a write-only handle skip the kernel's page cache
 * (write.c): a reader that cached the page before, and a shared mmap,
 * still see them.
 */
static void sem_coherent(void)
{
    char path[PATH_MAX + 64];
    char buf[32] = {0};
    unsigned char *m;
    int w, r, rw;

    mp(path, sizeof(path), "coh.txt");
    w = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(w >= 0);
    CHECK(pwrite(w, "hello ", 6, 0) == 6 && fsync(w) == 0);
    r = open(path, O_RDONLY);
    CHECK(r >= 0);
    CHECK(pread(r, buf, sizeof(buf), 0) == 6);      /* cached now */
    CHECK(pwrite(w, "world", 5, 6) == 5 && pwrite(w, "J", 1, 0) == 1);
    memset(buf, 0, sizeof(buf));
    CHECK(pread(r, buf, sizeof(buf), 0) == 11);
    CHECK_STR(buf, "Jello world");
    rw = open(path, O_RDWR);
    CHECK(rw >= 0);
    m = mmap(NULL, 11, PROT_READ, MAP_SHARED, rw, 0);
    CHECK(m != MAP_FAILED);
    CHECK(memcmp(m, "Jello world", 11) == 0);
    CHECK(pwrite(w, "H", 1, 0) == 1);
    CHECK(memcmp(m, "Hello world", 11) == 0);
    munmap(m, 11);
    close(rw);
    close(r);
    CHECK(close(w) == 0);
    CHECK(unlink(path) == 0);
}

TEST(semantics)
{
    char pre[64], key[256], uri[2048], cache[PATH_MAX], stg[PATH_MAX];
    char path[PATH_MAX + 64];
    const char *args[] = {"--cache-dir", cache, "--staging-dir", stg,
                          "--upload-delay", "30", "--meta-ttl", "1", NULL};
    unsigned char *d[8];
    struct statvfs sv;

    for (int i = 0; i < 8; i++)
        d[i] = gen_data(2 * MIB, 10 + (uint64_t)i);
    new_prefix(pre, sizeof(pre));
    sfmt(key, sizeof(key), "%s/old.bin", pre);
    put_obj(key, d[3], 300000);
    sfmt(key, sizeof(key), "%s/keep/k1", pre);
    put_obj(key, "old k1", 6);
    sfmt(key, sizeof(key), "%s/del.bin", pre);
    put_obj(key, d[4], 999);
    sfmt(key, sizeof(key), "%s/mv/m1", pre);
    put_obj(key, d[7], 5);
    sfmt(key, sizeof(key), "%s/mv/sub/m2", pre);
    put_obj(key, d[6], 70000);
    new_dir(cache, sizeof(cache), "cache");
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, args);

    sem_changes(pre, d);
    sem_coherent();
    CHECK(statvfs(t_mnt.dir, &sv) == 0 && sv.f_bavail > 0 &&
          !(sv.f_flag & ST_RDONLY));
    mp(path, sizeof(path), ".tierfs-stats");
    CHECK(open(path, O_WRONLY) < 0);
    CHECK(stat_num("writeback.pending_files") >= 5);
    /* a subtree first: d/ is in the store, a.bin not yet */
    sync_ok("d");
    CHECK(store_equals(pre, "d/x", d[1], MIB + 3));
    CHECK(!store_has(pre, "a.bin"));
    sync_ok(NULL);
    sem_check_store(pre, d);
    CHECK(mnt_equals("a.bin", d[0], 200001));     /* now from the store */
    CHECK(mnt_equals("mv2/sub/m2", d[6], 70000));
    CHECK_EQ(stat_num("writeback.pending_files"), 0);
    CHECK(stat_num("writeback.uploaded_files") >= 7);
    CHECK(stat_num("writeback.moves") >= 2);
    CHECK(stat_num("writeback.removes") >= 1);

    /* a clean unmount with an upload pending; the remount resumes it */
    mp(path, sizeof(path), "p.bin");
    CHECK_OK(write_file(path, d[0], 4321, O_TRUNC, 4321));
    mnt_stop();
    CHECK(!store_has(pre, "p.bin"));
    mnt_start(uri, args);
    CHECK(mnt_equals("p.bin", d[0], 4321));
    sync_ok(NULL);
    CHECK(store_equals(pre, "p.bin", d[0], 4321));
    mnt_stop();
    for (int i = 0; i < 8; i++)
        free(d[i]);
}

/* staging-max 4M: a writer of 22 MiB waits for the capped uploads. */
TEST(backpressure)
{
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64], name[32];
    const char *args[] = {"--staging-dir", stg, "--staging-max", "4M",
                          "--upload-bw", "16M", "--upload-delay", "0",
                          NULL};
    unsigned char *data = gen_data(6 * MIB, 77);
    uint64_t t0;
    double max_staged = 0;

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, args);
    t0 = now_ms();
    for (int i = 0; i < 16; i++) {
        sfmt(name, sizeof(name), "w%02d", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, data + i * 4096, MIB, O_TRUNC, 128 * KIB));
        if (stat_num("writeback.staging_bytes") > max_staged)
            max_staged = stat_num("writeback.staging_bytes");
    }
    mp(path, sizeof(path), "big");      /* alone larger than the bound */
    CHECK_OK(write_file(path, data, 6 * MIB, O_TRUNC, MIB));
    fprintf(stderr, "    22 MiB written in %.2f s, at most %.1f MiB staged "
            "between files, %g waits\n", (double)(now_ms() - t0) / 1e3,
            max_staged / MIB, stat_num("writeback.backpressure_waits"));
    CHECK(stat_num("writeback.backpressure_waits") > 0);
    CHECK(max_staged <= 5 * MIB);
    sync_ok(NULL);
    for (int i = 0; i < 16; i++) {
        sfmt(name, sizeof(name), "w%02d", i);
        CHECK(store_equals(pre, name, data + i * 4096, MIB));
    }
    CHECK(store_equals(pre, "big", data, 6 * MIB));
    CHECK(stat_num("writeback.upload_rate_bytes") <= 20.0 * MIB);
    mnt_stop();
    free(data);
}

/*
 * The crash workload, in a child: files named f<i>-<size>-<seed> (half
 * written as NAME.tmp and renamed), in random chunks; after each close
 * (and rename) returns, its name is appended to the log and fsynced.
 * Runs until the mount fails under it.
 */
static void crash_writer(const char *dir, const char *logpath, uint64_t seed)
{
    int lfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    uint64_t s = seed;

    if (lfd < 0)
        _exit(1);
    for (unsigned i = 0;; i++) {
        size_t size = (size_t)(rng_next(&s) % (384 * KIB));
        uint64_t fseed = seed * 100000 + i;
        bool tmp = rng_next(&s) & 1;
        char name[96], path[PATH_MAX + 128], final[PATH_MAX + 128];
        unsigned char *p;
        int rc;

        if (i % 7 == 0)
            size = (size_t)(rng_next(&s) % 100);
        sfmt(name, sizeof(name), "f%u-%zu-%llu", i, size,
             (unsigned long long)fseed);
        sfmt(final, sizeof(final), "%s/%s", dir, name);
        sfmt(path, sizeof(path), "%s%s", final, tmp ? ".tmp" : "");
        p = gen_data(size, fseed);
        rc = write_file(path, p, size, O_TRUNC,
                        1 + (size_t)(rng_next(&s) % (128 * KIB)));
        free(p);
        if (rc == 0 && tmp && rename(path, final) < 0)
            rc = -errno;
        if (rc < 0)
            _exit(0);
        dprintf(lfd, "%s\n", name);
        fdatasync(lfd);
    }
    _exit(1);
}

/* An object's bytes must be those its name says (f<i>-<size>-<seed>). */
static bool crash_obj_ok(const char *pre, const char *name)
{
    unsigned long long size, seed;
    unsigned i;
    char key[256];
    unsigned char *want;
    unsigned char *got;
    size_t n = 0;
    bool ok;

    if (sscanf(name, "f%u-%llu-%llu", &i, &size, &seed) != 3)
        return false;
    sfmt(key, sizeof(key), "%s/%s", pre, name);
    got = store_get(key, &n);
    want = gen_data((size_t)size, seed);
    ok = got != NULL && n == size && (n == 0 || !memcmp(got, want, n));
    if (!ok)
        fprintf(stderr, "    %s: %s (%zu of %llu bytes)\n", key,
                got ? "wrong bytes" : "missing", n, size);
    free(got);
    free(want);
    return ok;
}

/* One crash run: workload, kill -9, remount on the staging dir, sync. */
static void crash_run(unsigned run, uint64_t *rs, size_t *n_closed,
                      size_t *n_objs, double *n_resumed)
{
    char pre[64], uri[2048], stg[PATH_MAX], logp[PATH_MAX + 16];
    char line[256];
    const char *args[] = {"--staging-dir", stg, "--upload-delay", "0.05",
                          NULL};
    struct keylist *k = calloc(1, sizeof(*k));
    char *um[] = {"/bin/fusermount3", "-u", "-z", t_mnt.dir, NULL};
    unsigned kill_ms = 150 + (unsigned)(rng_next(rs) % 700);
    pid_t writer;
    FILE *f;

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    /* on S3, files over 256K go up as multipart uploads of 128K parts */
    remote_uri(uri, sizeof(uri), pre, t_s3 ? "latency_ms=1&multipart_"
               "threshold=256K&part_size=128K" : "latency_ms=1");
    mnt_start(uri, args);
    sfmt(logp, sizeof(logp), "%s.closed", t_mnt.dir);
    writer = fork();
    if (writer == 0)
        crash_writer(t_mnt.dir, logp, 1000 + run);
    sleep_ms(kill_ms);
    CHECK_EQ(kill(t_mnt.pid, SIGKILL), 0);
    waitpid(t_mnt.pid, NULL, 0);
    t_mnt.pid = 0;
    if (wait_pid(writer, 10000) == -1) {
        kill(writer, SIGKILL);
        waitpid(writer, NULL, 0);
        TEST_FAIL_("the writer hung after the daemon died");
    }
    sfmt(line, sizeof(line), "%s.fusermount", t_mnt.dir);
    um[3] = t_mnt.dir;
    CHECK_EQ(run_cmd(um, line, 10000), 0);
    mnt_start(uri, args);
    sync_ok(NULL);
    *n_resumed += stat_num("writeback.uploaded_files") +
                  stat_num("writeback.moves") + stat_num("writeback.removes");
    f = fopen(logp, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        CHECK(crash_obj_ok(pre, line));
        (*n_closed)++;
    }
    if (f != NULL)
        fclose(f);
    store_keys(pre, k);
    for (size_t i = 0; i < k->n; i++)       /* NAME.tmp: NAME's bytes */
        CHECK(crash_obj_ok(pre, k->names[i]));
    *n_objs += k->n;
    free(k);
    mnt_stop();
}

TEST(crash)
{
    const char *e = getenv("TFS_TEST_WB_CRASH_RUNS");
    unsigned runs = e ? (unsigned)strtoul(e, NULL, 10) : 20;
    uint64_t rs = (uint64_t)time(NULL);
    size_t closed = 0;
    size_t objs = 0;
    double resumed = 0;
    uint64_t t0 = now_ms();

    fprintf(stderr, "    seed %llu\n", (unsigned long long)rs);
    for (unsigned r = 0; r < runs; r++)
        crash_run(r, &rs, &closed, &objs, &resumed);
    fprintf(stderr, "    %u runs in %.1f s: %zu closed files checked, %zu "
            "objects checked, %.0f store changes resumed from journals\n",
            runs, (double)(now_ms() - t0) / 1e3, closed, objs, resumed);
    CHECK(closed > 0);
    CHECK(resumed > 0);
}

/* Injected put errors are retried; a refused store fails a bounded sync
   with the error; the uploads complete once it heals. */
TEST(failure)
{
    char pre[64], uri[2048], q[PATH_MAX + 128], stg[PATH_MAX], cut[PATH_MAX];
    char path[PATH_MAX + 64], name[32], log[PATH_MAX + 32];
    const char *args[] = {"--staging-dir", stg, "--upload-delay", "1",
                          "--set", "upload_retry_max=0.5", NULL};
    unsigned char *data = gen_data(256 * KIB, 99);
    int fd;

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    sfmt(cut, sizeof(cut), "%s/cut-%u", t_work, ++t_seq);
    sfmt(q, sizeof(q), "error_rate=0.4&error_ops=put&seed=7&"
         "partition_mode=refuse&partition_file=%s", cut);
    remote_uri(uri, sizeof(uri), pre, q);
    mnt_start(uri, args);
    for (int i = 0; i < 10; i++) {
        sfmt(name, sizeof(name), "e%02d", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, data + i, 100 * KIB, O_TRUNC, 32 * KIB));
    }
    sync_ok(NULL);
    CHECK(stat_num("writeback.upload_retries") > 0);
    for (int i = 0; i < 10; i++) {
        sfmt(name, sizeof(name), "e%02d", i);
        CHECK(store_equals(pre, name, data + i, 100 * KIB));
    }
    /* cut the store before the next uploads start (upload delay 1 s) */
    for (int i = 0; i < 3; i++) {
        sfmt(name, sizeof(name), "p%02d", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, data + 100 + i, 50 * KIB, O_TRUNC,
                            50 * KIB));
    }
    fd = open(cut, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ(sync_cmd(NULL, 2, log, sizeof(log)), 1);
    if (!file_has(log, "still not in the store"))
        print_file(log);
    CHECK(file_has(log, "still not in the store") &&
          file_has(log, "refused"));
    CHECK(!store_has(pre, "p00"));
    unlink(cut);
    sync_ok(NULL);
    for (int i = 0; i < 3; i++) {
        sfmt(name, sizeof(name), "p%02d", i);
        CHECK(store_equals(pre, name, data + 100 + i, 50 * KIB));
    }
    CHECK(stat_num("writeback.upload_errors") > 0);
    mnt_stop();
    free(data);
}


/* kill -9 of the daemon, then unmount what is left of the mount. */
static void mnt_crash(void)
{
    char *um[] = {"/bin/fusermount3", "-u", "-z", t_mnt.dir, NULL};
    char log[PATH_MAX + 16];

    CHECK_EQ(kill(t_mnt.pid, SIGKILL), 0);
    waitpid(t_mnt.pid, NULL, 0);
    t_mnt.pid = 0;
    sfmt(log, sizeof(log), "%s.fusermount", t_mnt.dir);
    CHECK_EQ(run_cmd(um, log, 10000), 0);
}

/* Entries of dir whose names start with prefix. */
static int dir_count(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    while (d != NULL && (de = readdir(d)) != NULL)
        n += de->d_name[0] != '.' &&
             strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

/* Flip one byte in the payload of the first FILE record (op 2) of the
   journal at path, found by the record framing. */
static void flip_first_file_record(const char *path)
{
    static unsigned char img[65536];
    int fd = open(path, O_RDWR);
    ssize_t len = fd >= 0 ? read(fd, img, sizeof(img)) : -1;
    size_t off = 8;

    CHECK(len > 8);
    while (off + 12 < (size_t)len && img[off + 12] != 2)
        off += 12 + (img[off] | (size_t)img[off + 1] << 8 |
                     (size_t)img[off + 2] << 16);
    CHECK(off + 24 < (size_t)len);
    img[off + 12 + 10] ^= 0xff;         /* inside the data id */
    CHECK(pwrite(fd, img + off + 22, 1, (off_t)(off + 22)) == 1);
    close(fd);
}

/* tierfs mount -f that must fail: its exit status, 0 if it mounted. */
static int mnt_refused(const char *uri, const char *const args[],
                       const char *needle)
{
    char *argv[16] = {(char *)t_bin, "mount", "-f", (char *)uri, NULL};
    char dir[PATH_MAX];
    char log[PATH_MAX + 16];
    size_t n = 5;
    int rc;

    new_dir(dir, sizeof(dir), "mnt");
    argv[4] = dir;
    for (size_t i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    sfmt(log, sizeof(log), "%s.log", dir);
    rc = run_cmd(argv, log, 10000);
    if (is_mounted(dir))
        umount2(dir, MNT_DETACH);
    if (rc == 0 || !file_has(log, needle))
        print_file(log);
    return rc != 0 && file_has(log, needle) ? rc : 0;
}

/* E2 and E2b of the reliability review, through the mount. */
TEST(journal)
{
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64];
    char name[16], jpath[PATH_MAX + 16], lost[PATH_MAX + 16];
    const char *slow[] = {"--staging-dir", stg, "--upload-delay", "600",
                          NULL};
    const char *now[] = {"--staging-dir", stg, "--upload-delay", "0",
                         NULL};
    unsigned char *data = gen_data(100000, 5);
    int in_store = 0;

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, slow);
    for (int i = 1; i <= 3; i++) {
        sfmt(name, sizeof(name), "f%d", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, data + i, 90000, O_TRUNC, 65536));
    }
    mnt_crash();
    sfmt(jpath, sizeof(jpath), "%s/journal", stg);
    sfmt(lost, sizeof(lost), "%s/lost+found", stg);
    flip_first_file_record(jpath);
    mnt_start(uri, now);
    sync_ok(NULL);
    CHECK(store_equals(pre, "f2", data + 2, 90000));
    CHECK(store_equals(pre, "f3", data + 3, 90000));
    in_store = store_has(pre, "f1");
    CHECK(in_store ? store_equals(pre, "f1", data + 1, 90000)
                   : dir_count(lost, "data-") == 1);
    CHECK(file_has(t_mnt.log, "lost+found"));
    fprintf(stderr, "    one flipped byte: f2, f3 uploaded, f1 %s\n",
            in_store ? "uploaded" : "kept in lost+found");
    mnt_stop();

    /* E2b: the journal emptied after a crash with 2 files pending */
    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, slow);
    for (int i = 1; i <= 2; i++) {
        sfmt(name, sizeof(name), "g%d", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, data + i, 1000, O_TRUNC, 1000));
    }
    mnt_crash();
    sfmt(jpath, sizeof(jpath), "%s/journal", stg);
    CHECK(truncate(jpath, 0) == 0);
    CHECK(mnt_refused(uri, now, "2 data files") != 0);
    sfmt(path, sizeof(path), "%s/data", stg);
    CHECK_EQ(dir_count(path, ""), 2);
    free(data);
}

/* ---- eager uploads ---- */

/* Wait up to ms for the figure at path to reach min. */
static bool stat_wait(const char *path, double min, unsigned ms)
{
    uint64_t end = now_ms() + ms;

    while (stat_num(path) < min && now_ms() < end)
        sleep_ms(20);
    if (stat_num(path) < min)
        fprintf(stderr, "    %s: %g, not %g after %u ms\n", path,
                stat_num(path), min, ms);
    return stat_num(path) >= min;
}

/* pwrite len bytes at off in chunk-byte writes. */
static void fd_write(int fd, const unsigned char *p, size_t len,
                     uint64_t off, size_t chunk)
{
    for (size_t done = 0; done < len;) {
        size_t n = len - done < chunk ? len - done : chunk;
        ssize_t w = pwrite(fd, p + done, n, (off_t)(off + done));
        CHECK(w > 0);
        done += (size_t)w;
    }
}

/* The key and upload id of the one side file in STAGING/eager. */
static void eager_side(const char *stg, char *key, size_t ksize, char *id,
                       size_t isize)
{
    char dir[PATH_MAX + 16], path[PATH_MAX + 64];
    unsigned char b[2048];
    struct dirent *de;
    size_t klen, ilen;
    ssize_t n = -1;
    DIR *d;

    sfmt(dir, sizeof(dir), "%s/eager", stg);
    CHECK_EQ(dir_count(dir, ""), 1);
    d = opendir(dir);
    CHECK(d != NULL);
    while ((de = readdir(d)) != NULL && n < 0) {
        int fd;
        if (de->d_name[0] == '.')
            continue;
        sfmt(path, sizeof(path), "%s/%s", dir, de->d_name);
        fd = open(path, O_RDONLY);
        n = fd >= 0 ? read(fd, b, sizeof(b)) : -1;
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
    CHECK(n > 12 && memcmp(b, "TFSEAG1\n", 8) == 0);
    klen = b[8] | (size_t)b[9] << 8;
    CHECK(klen < ksize && 10 + klen + 2 <= (size_t)n);
    ilen = b[10 + klen] | (size_t)b[11 + klen] << 8;
    CHECK(ilen < isize && 12 + klen + ilen == (size_t)n);
    sfmt(key, ksize, "%.*s", (int)klen, (const char *)b + 10);
    sfmt(id, isize, "%.*s", (int)ilen, (const char *)b + 12 + klen);
}

/* A sequential write's parts go before the close, the object appears
   only at the complete, byte-exact; a rewrite behind and a rename
   cancel it and the whole file goes. */
static void eager_cases(const char *pre, unsigned char *d, size_t big,
                        size_t mid)
{
    char path[PATH_MAX + 64], path2[PATH_MAX + 64];
    unsigned char *d2 = malloc(mid);
    int fd;

    mp(path, sizeof(path), "seq");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    fd_write(fd, d, big, 0, MIB);
    CHECK(stat_wait("writeback.eager_bytes", 64.0 * MIB, 30000));
    CHECK(!store_has(pre, "seq"));
    CHECK(close(fd) == 0);
    CHECK(!store_has(pre, "seq"));      /* the upload delay holds it */
    sync_ok("seq");
    CHECK(store_equals(pre, "seq", d, big));
    CHECK_EQ(stat_num("writeback.eager_completed"), 1);
    CHECK_EQ(stat_num("writeback.eager_bytes"), big);
    /* a write into a part already sent */
    memcpy(d2, d + MIB, mid);
    mp(path, sizeof(path), "rw");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    fd_write(fd, d2, mid, 0, MIB);
    CHECK(stat_wait("writeback.eager_bytes", (double)big + 16.0 * MIB,
                    30000));
    memset(d2 + 1000, 0x5a, 1000);
    fd_write(fd, d2 + 1000, 1000, 1000, 1000);
    CHECK(close(fd) == 0);
    sync_ok("rw");
    CHECK(store_equals(pre, "rw", d2, mid));
    CHECK_EQ(stat_num("writeback.eager_aborted_rewrite"), 1);
    CHECK_EQ(stat_num("writeback.eager_completed"), 1);
    /* write-then-rename: the upload at the old key never completes */
    mp(path, sizeof(path), "x.tmp");
    CHECK_OK(write_file(path, d + 2 * MIB, mid, O_TRUNC, MIB));
    CHECK(stat_wait("writeback.eager_uploads", 3, 30000));
    mp(path2, sizeof(path2), "x");
    CHECK(rename(path, path2) == 0);
    sync_ok(NULL);
    CHECK(store_equals(pre, "x", d + 2 * MIB, mid));
    CHECK(!store_has(pre, "x.tmp"));
    CHECK_EQ(stat_num("writeback.eager_aborted_rename"), 1);
    CHECK_EQ(stat_num("writeback.eager_completed"), 1);
    free(d2);
}

/* kill -9 with an eager upload under way: recovery aborts it (its
   upload id no longer takes parts) and puts the sealed file whole. */
static void eager_crash(unsigned char *d, size_t mid)
{
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64];
    char key[1100], id[600], full[1200], dir[PATH_MAX + 16];
    const char *slow[] = {"--staging-dir", stg, "--upload-delay", "600",
                          NULL};
    const char *now[] = {"--staging-dir", stg, "--upload-delay", "0",
                         NULL};
    struct tfs_source src = {.buf = "x", .fd = -1, .len = 1};
    char etag[TFS_VERSION_MAX];

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, slow);
    mp(path, sizeof(path), "k");
    CHECK_OK(write_file(path, d + 3 * MIB, mid, O_TRUNC, MIB));
    CHECK(stat_wait("writeback.eager_bytes", 16.0 * MIB, 30000));
    eager_side(stg, key, sizeof(key), id, sizeof(id));
    CHECK_STR(key, "k");
    mnt_crash();
    mnt_start(uri, now);
    sync_ok(NULL);
    CHECK(store_equals(pre, "k", d + 3 * MIB, mid));
    CHECK_EQ(stat_num("writeback.eager_recovered"), 1);
    sfmt(dir, sizeof(dir), "%s/eager", stg);
    CHECK_EQ(dir_count(dir, ""), 0);
    sfmt(full, sizeof(full), "%s/%s", pre, key);
    CHECK_RC(tfs_store_mpu_part(t_st, full, id, 1, &src, etag), -ENOENT);
    mnt_stop();
}

/*
 * Eager uploads (docs/writeback.md).  S3: the cases above, a part that
 * fails (the fault store) falls back to the whole-file put, a crash.
 * posix: no multipart, the whole file goes, nothing eager.
 */
TEST(eager)
{
    size_t big = 72 * MIB;
    size_t mid = 40 * MIB;
    unsigned char *d = gen_data(big, 31);
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64];
    const char *args[] = {"--staging-dir", stg, "--upload-delay", "600",
                          NULL};

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, args);
    if (!t_s3) {
        mp(path, sizeof(path), "seq");
        CHECK_OK(write_file(path, d, mid, O_TRUNC, MIB));
        sync_ok(NULL);
        CHECK(store_equals(pre, "seq", d, mid));
        CHECK_EQ(stat_num("writeback.eager_uploads"), 0);
        CHECK_EQ(stat_num("writeback.eager_bytes"), 0);
        mnt_stop();
        free(d);
        return;
    }
    eager_cases(pre, d, big, mid);
    mnt_stop();
    /* every part fails: the whole file goes at the upload */
    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, "error_ops=part&error_rate=1");
    mnt_start(uri, args);
    mp(path, sizeof(path), "pf");
    CHECK_OK(write_file(path, d + 4 * MIB, mid, O_TRUNC, MIB));
    sync_ok(NULL);
    CHECK(store_equals(pre, "pf", d + 4 * MIB, mid));
    CHECK_EQ(stat_num("writeback.eager_aborted_error"), 1);
    CHECK_EQ(stat_num("writeback.eager_completed"), 0);
    CHECK_EQ(stat_num("writeback.uploaded_files"), 1);
    mnt_stop();
    eager_crash(d, mid);
    free(d);
}

/* D3: many closed files pending under a low descriptor limit. */
TEST(many_files)
{
    const char *e = getenv("TFS_TEST_WB_MANY_FILES");
    const char *l = getenv("TFS_TEST_WB_NOFILE");
    unsigned n = e ? (unsigned)strtoul(e, NULL, 10) : t_s3 ? 600 : 3000;
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64], name[32];
    const char *slow[] = {"--staging-dir", stg, "--upload-delay", "600",
                          NULL};
    const char *now[] = {"--staging-dir", stg, "--upload-delay", "0",
                         NULL};
    uint64_t t0;
    double t_create, t_mount, t_upload;
    struct dirent *de;
    DIR *d;
    unsigned listed = 0;

    t_nofile = l ? (rlim_t)strtoul(l, NULL, 10) : t_s3 ? 256 : 512;
    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, slow);
    t0 = now_ms();
    for (unsigned i = 0; i < n; i++) {
        sfmt(name, sizeof(name), "m%06u", i);
        mp(path, sizeof(path), name);
        CHECK_OK(write_file(path, (const unsigned char *)name,
                            strlen(name), O_TRUNC, 64));
    }
    t_create = (double)(now_ms() - t0) / 1e3;
    CHECK_EQ(stat_num("writeback.pending_files"), n);
    d = opendir(t_mnt.dir);
    CHECK(d != NULL);
    while ((de = readdir(d)) != NULL)
        listed += de->d_name[0] == 'm';
    closedir(d);
    CHECK_EQ(listed, n);
    mnt_stop();
    t0 = now_ms();
    mnt_start(uri, now);
    t_mount = (double)(now_ms() - t0) / 1e3;
    t0 = now_ms();
    sync_ok(NULL);
    t_upload = (double)(now_ms() - t0) / 1e3;
    for (unsigned i = 0; i < n; i++) {
        sfmt(name, sizeof(name), "m%06u", i);
        CHECK(store_equals(pre, name, (const unsigned char *)name,
                           strlen(name)));
    }
    mnt_stop();
    fprintf(stderr, "    %u files under RLIMIT_NOFILE %llu: created in "
            "%.1f s (%.0f/s), remount %.2f s, all uploaded in %.1f s\n", n,
            (unsigned long long)t_nofile, t_create, n / t_create, t_mount,
            t_upload);
    t_nofile = 0;
}

/*
 * A forked child's exit closes the descriptor it inherited, and the
 * kernel sends the daemon a flush for it.  Such a close sealed the
 * parent's half-written file, which then went to the store as a
 * complete version while the parent was still writing (any fork while
 * a file is open for writing: DataLoader workers forked while a
 * checkpoint thread writes).  Now only the opening process's closes, or
 * the closes of the process that wrote last, seal.
 */
TEST(fork_close)
{
    unsigned char *d = gen_data(2 * MIB, 41);
    char pre[64], uri[2048], stg[PATH_MAX], path[PATH_MAX + 64];
    const char *args[] = {"--staging-dir", stg, "--upload-delay", "0",
                          NULL};
    double seals, other;
    int fd, status;
    pid_t pid;

    new_prefix(pre, sizeof(pre));
    new_dir(stg, sizeof(stg), "staging");
    remote_uri(uri, sizeof(uri), pre, NULL);
    mnt_start(uri, args);
    /* the child only exits: its close does not seal */
    mp(path, sizeof(path), "half");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    fd_write(fd, d, MIB, 0, MIB);
    seals = stat_num("writeback.seals");
    other = stat_num("fuse.flushes_other");
    pid = fork();
    if (pid == 0)
        _exit(0);
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    CHECK_EQ(stat_num("writeback.seals"), seals);
    usleep(300 * 1000);                 /* an upload would start at once */
    CHECK(!store_has(pre, "half"));
    CHECK_EQ(stat_num("fuse.flushes_other"), other + 1);
    fd_write(fd, d + MIB, MIB, MIB, MIB);
    CHECK_OK(close(fd));
    CHECK_EQ(stat_num("writeback.seals"), seals + 1);
    sync_ok(NULL);
    CHECK(store_equals(pre, "half", d, 2 * MIB));
    /* the child writes last: its close seals what it wrote */
    mp(path, sizeof(path), "child");
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    fd_write(fd, d, MIB, 0, MIB);
    seals = stat_num("writeback.seals");
    pid = fork();
    if (pid == 0)
        _exit(pwrite(fd, d + MIB, MIB, MIB) == (ssize_t)MIB ? 0 : 1);
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid &&
          WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(stat_num("writeback.seals"), seals + 1);
    CHECK_EQ(stat_num("fuse.flushes_other"), other + 1);
    CHECK_OK(close(fd));
    sync_ok(NULL);
    CHECK(store_equals(pre, "child", d, 2 * MIB));
    mnt_stop();
    free(d);
}

TESTS(T(semantics), T(backpressure), T(crash), T(failure), T(journal),
      T(eager), T(many_files), T(fork_close));

/* ---- setup ---- */

int main(int argc, char **argv)
{
    int rc = integ_setup("wb", mnt_cleanup);

    if (rc != 0)
        return rc;
    rc = test_run(test_cases, sizeof(test_cases) / sizeof(test_cases[0]),
                  argc, argv);
    return integ_finish(rc, mnt_cleanup);
}
