/* SPDX-License-Identifier: MIT */
/*
 * The mount's settings (fs.h): tfs_fs_create with their defaults, and
 * tfs_fs_set, which takes the mount's own options (the write-back's,
 * the session's) and hands every other name to the cache.
 */

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
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
    fs_hints_init(fs);
    fs->async.max = FS_DEFAULT_ASYNC_READS;
    tfs_buf_init(&fs->fuse_opts, 64 * 1024);
    fs->max_threads = FS_DEFAULT_THREADS;
    fs->gcfg.serve = true;
    fs->gcfg.ckpt_max = 64ull << 30;    /* checkpoint copies for peers */
    fs->gcfg.ckpt_keep = 2;
    fs->kernel_ra = FS_DEFAULT_KERNEL_RA;
    fs->wcfg.staging_max = 100ull << 30;
    fs->wcfg.staging_wait_ms = 300000;
    fs->wcfg.upload_jobs = 4;
    fs->wcfg.upload_delay_ms = 1000;
    fs->wcfg.retry_max_ms = 30000;
    fs->wcfg.early_writeback = 8u << 20;
    fs->wcfg.eager_parts = 1;           /* 2 slowed the writer: docs/
                                           performance-write.md */
    *out = fs;
    return 0;
}

/* A string option where "" means none: NULL, not an empty copy. */
static int fs_set_or_none(const struct tfs_opt_spec *o, void *base,
                          const char *value)
{
    char **field = (char **)(void *)((char *)base + o->offset);

    if (value[0] != '\0')
        return tfs_opt_store(o, base, value);
    tfs_free(*field);
    *field = NULL;
    return 0;
}

/* fuse_opts: each value is appended, ","-joined. */
static int fs_set_fuse_opts(const struct tfs_opt_spec *o, void *base,
                            const char *value)
{
    struct tfs_fs *fs = base;
    int rc = fs->fuse_opts.len ? tfs_buf_puts(&fs->fuse_opts, ",") : 0;

    (void)o;
    return rc < 0 ? rc : tfs_buf_puts(&fs->fuse_opts, value);
}

#define FS_OPT(name, kind, field, min, max)                                \
    {name, kind, offsetof(struct tfs_fs, field), min, max, NULL, NULL}

/* The mount's own options (fs.h), over struct tfs_fs; every other name
 * is the cache's. */
static const struct tfs_opt_spec fs_opts[] = {
    FS_OPT("read_only", TFS_OPT_BOOL, read_only, 0, 1),
    FS_OPT("hint_window_files", TFS_OPT_UINT, hints.window_files, 1,
           1u << 20),
    FS_OPT("hint_window_bytes", TFS_OPT_SIZE, hints.window_bytes, 1,
           TFS_OPT_NOMAX),
    FS_OPT("hint_idle", TFS_OPT_SEC_MS, hints.idle_ms, 1, 1e9),
    {"staging_dir", TFS_OPT_STR, offsetof(struct tfs_fs, wcfg.staging_dir),
     0, TFS_OPT_NOMAX, fs_set_or_none, NULL},
    FS_OPT("staging_max", TFS_OPT_SIZE, wcfg.staging_max, 0, TFS_OPT_NOMAX),
    FS_OPT("upload_bw", TFS_OPT_SIZE, wcfg.upload_bw, 0, TFS_OPT_NOMAX),
    FS_OPT("upload_jobs", TFS_OPT_UINT, wcfg.upload_jobs, 1, 256),
    FS_OPT("upload_delay", TFS_OPT_SEC_MS, wcfg.upload_delay_ms, 0, 1e7),
    FS_OPT("staging_wait", TFS_OPT_SEC_MS, wcfg.staging_wait_ms, 0, 1e7),
    FS_OPT("upload_retry_max", TFS_OPT_SEC_MS, wcfg.retry_max_ms, 0, 1e7),
    FS_OPT("eager_parts", TFS_OPT_UINT, wcfg.eager_parts, 0, 16),
    FS_OPT("early_writeback", TFS_OPT_SIZE, wcfg.early_writeback, 0,
           TFS_OPT_NOMAX),
    {"metrics", TFS_OPT_STR, offsetof(struct tfs_fs, metrics), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"group", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.members), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"group_listen", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.listen), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"group_secret_file", TFS_OPT_STR,
     offsetof(struct tfs_fs, gcfg.secret_file), 0, TFS_OPT_NOMAX,
     fs_set_or_none, NULL},
    FS_OPT("group_serve", TFS_OPT_BOOL, gcfg.serve, 0, 1),
    {"group_tls_ca", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.tls_ca), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"group_tls_cert", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.tls_cert),
     0, TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"group_tls_key", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.tls_key), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    FS_OPT("group_timeout_ms", TFS_OPT_MS, gcfg.timeout_ms, 1, 600000),
    FS_OPT("group_inflight", TFS_OPT_UINT, gcfg.inflight, 1, 1024),
    FS_OPT("group_fault_corrupt", TFS_OPT_UINT, gcfg.fault_corrupt, 0,
           1e9),
    {"group_ckpt_dir", TFS_OPT_STR, offsetof(struct tfs_fs, gcfg.ckpt_dir),
     0, TFS_OPT_NOMAX, fs_set_or_none, NULL},
    FS_OPT("group_ckpt_max", TFS_OPT_SIZE, gcfg.ckpt_max, 0, TFS_OPT_NOMAX),
    FS_OPT("group_ckpt_keep", TFS_OPT_UINT, gcfg.ckpt_keep, 1, 1000000),
    {"shared_tier", TFS_OPT_STR, offsetof(struct tfs_fs, shared_uri), 0,
     TFS_OPT_NOMAX, fs_set_or_none, NULL},
    {"fuse_opts", TFS_OPT_CUSTOM, 0, 0, 0, fs_set_fuse_opts,
     "mount options"},
    FS_OPT("debug", TFS_OPT_BOOL, debug, 0, 1),
    FS_OPT("max_threads", TFS_OPT_UINT, max_threads, 1, 4096),
    FS_OPT("async_reads", TFS_OPT_UINT, async.max, 1, 65536),
    FS_OPT("kernel_readahead", TFS_OPT_SIZE, kernel_ra, 0, 1u << 30),
};

int tfs_fs_set(struct tfs_fs *fs, const char *name, const char *value)
{
    if (fs->opened)
        return -EBUSY;
    for (size_t i = 0; i < TFS_ARRAY_LEN(fs_opts); i++)
        if (strcmp(name, fs_opts[i].name) == 0)
            return tfs_opt_apply("mount", &fs_opts[i], 1, fs, name, value);
    return tfs_cache_set(fs->cache, name, value);
}
