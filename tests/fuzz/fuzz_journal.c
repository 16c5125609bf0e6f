/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for write-back recovery (src/wb/journal.c replay and
 * the wb.c sweep): the input is written as STAGING/journal beside four
 * data files (ids 1-4, of 1-4 bytes), and wb_open recovers from it, as
 * is and again with the magic and every framed record's checksum
 * patched in, so that the op decoders are reached.  Uploads fail (a
 * fault+ store refusing every change), so only recovery moves files.
 * Invariants: no crash, no leak (ASan); a recovery that succeeds keeps
 * every data file, in data/ or in lost+found/data-<id>, bytes intact;
 * a refused one leaves all four in data/.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "tierfs/cache.h"
#include "tierfs/log.h"
#include "tierfs/store.h"
#include "wb/wb.h"

#define N_DATA 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char f_root[128];                /* store/, stg/ */
static char f_stg[160];
static struct tfs_store *f_st;
static struct tfs_cache *f_c;

static void f_die(const char *what)
{
    fprintf(stderr, "fuzz_journal: %s\n", what);
    abort();
}

static void f_path(char *buf, size_t size, const char *sub, unsigned id)
{
    if (id == 0)
        snprintf(buf, size, "%s/%s", f_stg, sub);
    else
        snprintf(buf, size, "%s/%s%016x", f_stg, sub, id);
}

static void f_write(const char *path, const void *p, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd < 0 || (len > 0 && write(fd, p, len) != (ssize_t)len))
        f_die(path);
    close(fd);
}

/* Whether path holds exactly id bytes of 'a' + id - 1. */
static bool f_intact(const char *path, unsigned id)
{
    char buf[16];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;

    if (fd >= 0)
        close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] != (char)('a' + id - 1))
            return false;
    return n == (ssize_t)id;
}

static int f_rm(const char *path, const struct stat *sb, int type,
                struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* At exit: the scratch dir goes (the fuzzer runs until killed or done). */
static void f_teardown(void)
{
    tfs_cache_close(f_c);
    tfs_store_close(f_st);
    nftw(f_root, f_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void f_setup(void)
{
    char uri[300];
    char path[300];

    snprintf(f_root, sizeof(f_root), "%s/tfs-fuzz-journal-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (mkdtemp(f_root) == NULL)
        f_die("mkdtemp");
    snprintf(path, sizeof(path), "%s/store", f_root);
    snprintf(f_stg, sizeof(f_stg), "%s/stg", f_root);
    if (mkdir(path, 0700) < 0 || mkdir(f_stg, 0700) < 0)
        f_die("mkdir");
    snprintf(uri, sizeof(uri), "fault+file://%s?error_rate=1&error_ops="
             "put,copy,rename,remove", path);
    tfs_log_set_level(TFS_LOG_ERR - 1);
    if (tfs_store_open(&f_st, uri, NULL) < 0 ||
        tfs_cache_create(&f_c) < 0 ||
        tfs_cache_set(f_c, "mem_cache", "16M") < 0 ||
        tfs_cache_open(f_c, f_st) < 0)
        f_die("store");
    atexit(f_teardown);
}

/* STAGING afresh: data/1..4, lost+found emptied, the journal. */
static void f_reset(const uint8_t *img, size_t len)
{
    char path[300];
    char buf[8];
    DIR *d;
    struct dirent *de;

    f_path(path, sizeof(path), "data", 0);
    mkdir(path, 0700);
    for (unsigned id = 1; id <= N_DATA; id++) {
        memset(buf, 'a' + (int)id - 1, sizeof(buf));
        f_path(path, sizeof(path), "data/", id);
        f_write(path, buf, id);
    }
    f_path(path, sizeof(path), "lost+found", 0);
    d = opendir(path);
    while (d != NULL && (de = readdir(d)) != NULL) {
        char p2[600];
        if (de->d_name[0] == '.')
            continue;
        snprintf(p2, sizeof(p2), "%s/%s", path, de->d_name);
        unlink(p2);
    }
    if (d != NULL)
        closedir(d);
    f_path(path, sizeof(path), "journal", 0);
    f_write(path, img, len);
}

/* Data file id in data/ or in lost+found (under data-<id>[.N]). */
static bool f_kept(unsigned id, bool in_data_only)
{
    char path[300];
    char name[64];
    size_t nlen;
    DIR *d;
    struct dirent *de;
    bool found = false;

    f_path(path, sizeof(path), "data/", id);
    if (f_intact(path, id))
        return true;
    if (in_data_only)
        return false;
    nlen = (size_t)snprintf(name, sizeof(name), "data-%016x", id);
    f_path(path, sizeof(path), "lost+found", 0);
    d = opendir(path);
    while (d != NULL && !found && (de = readdir(d)) != NULL) {
        char p2[600];
        if (strncmp(de->d_name, name, nlen) != 0)
            continue;
        snprintf(p2, sizeof(p2), "%s/%s", path, de->d_name);
        found = f_intact(p2, id);
    }
    if (d != NULL)
        closedir(d);
    return found;
}

static void f_recover(const uint8_t *img, size_t len)
{
    struct wb_cfg cfg = {
        .staging_dir = f_stg,
        .upload_jobs = 1,
        .upload_delay_ms = 600000,
        .retry_max_ms = 600000,
    };
    struct tfs_wb *wb = NULL;
    int rc;

    f_reset(img, len);
    rc = wb_open(&wb, &cfg, f_st, f_c);
    for (unsigned id = 1; id <= N_DATA; id++)
        if (!f_kept(id, rc < 0))
            f_die("a data file was lost");
    if (rc == 0)
        wb_close(wb);
}

/* The image with the magic and every framed record's checksum right. */
static void f_patch(uint8_t *img, size_t len)
{
    size_t off = 8;

    memcpy(img, "TFSWBJ1\n", 8);
    while (len - off >= 12) {
        uint32_t rlen = tfs_get_le32(img + off);
        uint64_t sum;
        if (rlen > len - off - 12)
            break;
        sum = XXH3_64bits(img + off + 12, rlen);
        tfs_put_le64(img + off + 4, sum);
        off += 12 + rlen;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy;

    if (f_st == NULL)
        f_setup();
    if (size > 65536)
        return 0;
    f_recover(data, size);
    if (size < 8)
        return 0;
    copy = malloc(size);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    f_patch(copy, size);
    f_recover(copy, size);
    free(copy);
    return 0;
}
