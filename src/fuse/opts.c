/* SPDX-License-Identifier: MIT */
/*
 * The mount's settings (fs.h): tfs_fs_create with their defaults, and
 * tfs_fs_set, which takes the mount's own options (the write-back's,
 * the session's) and hands every other name to the cache.
 */

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "fuse/fuse_int.h"

#define FS_DEFAULT_THREADS 64
#define FS_DEFAULT_ASYNC_READS 256      /* reads in flight on the store */
#define FS_DEFAULT_KERNEL_RA (4u << 20) /* 4 requests of 1 MiB in flight */

int tfs_fs_create(struct tfs_fs **out)
{
    struct tfs_fs *fs = tfs_calloc(1, sizeof(*fs));
    int rc;

    if (fs == NULL)
        return -ENOMEM;
    rc = tfs_cache_create(&fs->cache);
    if (rc == 0)
        rc = fs_itable_init(&fs->inodes);
    if (rc < 0) {
        tfs_cache_close(fs->cache);
        tfs_free(fs);
        return rc;
    }
    pthread_mutex_init(&fs->hlock, NULL);
    pthread_mutex_init(&fs->async.lock, NULL);
    pthread_mutex_init(&fs->spath.lock, NULL);
    pthread_cond_init(&fs->spath.cond, NULL);
    fs->async.max = FS_DEFAULT_ASYNC_READS;
    tfs_buf_init(&fs->fuse_opts, 64 * 1024);
    fs->max_threads = FS_DEFAULT_THREADS;
    fs->kernel_ra = FS_DEFAULT_KERNEL_RA;
    fs->wcfg.staging_max = 100ull << 30;
    fs->wcfg.staging_wait_ms = 300000;
    fs->wcfg.upload_jobs = 4;
    fs->wcfg.upload_delay_ms = 1000;
    fs->wcfg.retry_max_ms = 30000;
    *out = fs;
    return 0;
}

/* A duration in seconds (fractions allowed) as milliseconds. */
static int fs_parse_ms(const char *name, const char *value, uint64_t *ms)
{
    double d;

    if (tfs_parse_double(value, &d) < 0 || d < 0 || d > 1e7)
        return tfs_err(TFS_EOPTION, "%s: '%s' is not a number of seconds",
                       name, value);
    *ms = (uint64_t)(d * 1000.0 + 0.5);
    return 0;
}

/* The write-back options (fs.h); 1 when name is none of them. */
static int fs_set_wb(struct tfs_fs *fs, const char *name, const char *value)
{
    uint64_t v;

    if (strcmp(name, "read_only") == 0)
        return tfs_parse_bool(value, &fs->read_only) < 0
                   ? tfs_err(TFS_EOPTION, "read_only: '%s' is not 0 or 1",
                             value) : 0;
    if (strcmp(name, "staging_dir") == 0) {
        tfs_free((char *)fs->wcfg.staging_dir);
        fs->wcfg.staging_dir = value[0] ? tfs_strdup(value) : NULL;
        return value[0] && fs->wcfg.staging_dir == NULL ? -ENOMEM : 0;
    }
    if (strcmp(name, "staging_max") == 0 || strcmp(name, "upload_bw") == 0) {
        if (tfs_parse_size(value, &v) < 0)
            return tfs_err(TFS_EOPTION, "%s: '%s' is not a size", name,
                           value);
        *(name[0] == 's' ? &fs->wcfg.staging_max : &fs->wcfg.upload_bw) = v;
        return 0;
    }
    if (strcmp(name, "upload_jobs") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 256)
            return tfs_err(TFS_EOPTION, "upload_jobs: '%s' is not in "
                           "1..256", value);
        fs->wcfg.upload_jobs = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "upload_delay") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.upload_delay_ms);
    if (strcmp(name, "staging_wait") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.staging_wait_ms);
    if (strcmp(name, "upload_retry_max") == 0)
        return fs_parse_ms(name, value, &fs->wcfg.retry_max_ms);
    return 1;
}

int tfs_fs_set(struct tfs_fs *fs, const char *name, const char *value)
{
    uint64_t v;
    int rc;

    if (fs->opened)
        return -EBUSY;
    rc = fs_set_wb(fs, name, value);
    if (rc <= 0)
        return rc;
    if (strcmp(name, "metrics") == 0) {
        tfs_free(fs->metrics);
        fs->metrics = value[0] ? tfs_strdup(value) : NULL;
        return value[0] && fs->metrics == NULL ? -ENOMEM : 0;
    }
    if (strcmp(name, "fuse_opts") == 0) {
        rc = fs->fuse_opts.len ? tfs_buf_puts(&fs->fuse_opts, ",") : 0;
        return rc < 0 ? rc : tfs_buf_puts(&fs->fuse_opts, value);
    }
    if (strcmp(name, "debug") == 0) {
        if (tfs_parse_bool(value, &fs->debug) < 0)
            return tfs_err(TFS_EOPTION, "debug: '%s' is not 0 or 1", value);
        return 0;
    }
    if (strcmp(name, "max_threads") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 4096)
            return tfs_err(TFS_EOPTION, "max_threads: '%s' is not in "
                           "1..4096", value);
        fs->max_threads = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "async_reads") == 0) {
        if (tfs_parse_u64(value, &v) < 0 || v < 1 || v > 65536)
            return tfs_err(TFS_EOPTION, "async_reads: '%s' is not in "
                           "1..65536", value);
        fs->async.max = (unsigned)v;
        return 0;
    }
    if (strcmp(name, "kernel_readahead") == 0) {
        if (tfs_parse_size(value, &v) < 0 || v > (1ull << 30))
            return tfs_err(TFS_EOPTION, "kernel_readahead: '%s' is not a "
                           "size up to 1G", value);
        fs->kernel_ra = v;
        return 0;
    }
    return tfs_cache_set(fs->cache, name, value);
}
