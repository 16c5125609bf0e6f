/* SPDX-License-Identifier: MIT */
/*
 * The mount's statistics texts: the control file .tierfs-stats (the
 * cache's JSON object plus the mount's own members, the write-back's
 * among them) and the body of the
 * Prometheus /metrics endpoint (the cache's exposition plus the mount's
 * counters).  Both read counters only; nothing here blocks on the store.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "fuse/fuse_int.h"
#include "tierfs/fault.h"
#include "tierfs/retry.h"

typedef int ctl_stats_fn(struct tfs_cache *c, char *buf, size_t size,
                        size_t *len);

/* Append the cache's statistics text (JSON or Prometheus) to out. */
static int ctl_cache_text(struct tfs_fs *fs, ctl_stats_fn *fn,
                         struct tfs_buf *out)
{
    size_t size = 16 * 1024;
    size_t len = 0;

    for (int i = 0; i < 8 && size <= FS_STATS_MAX; i++) {
        char *p = tfs_malloc(size);
        int rc;

        if (p == NULL)
            return -ENOMEM;
        rc = fn(fs->cache, p, size, &len);
        if (rc == 0)
            rc = tfs_buf_append(out, p, len);
        tfs_free(p);
        if (rc != -ENOSPC)
            return rc;
        size = TFS_MAX(len + 1, size * 2);
    }
    return TFS_ETOOBIG;
}

static size_t ctl_handle_count(struct tfs_fs *fs)
{
    size_t n;

    pthread_mutex_lock(&fs->hlock);
    n = fs->nhandles;
    pthread_mutex_unlock(&fs->hlock);
    return n;
}

/* The asynchronous reads and the store path (fs.c), as JSON members. */
static int ctl_json_async(struct tfs_fs *fs, struct tfs_buf *b)
{
    unsigned flight, queued, deferred_now;

    pthread_mutex_lock(&fs->async.lock);
    flight = fs->async.n_flight;
    queued = fs->async.n_queued;
    pthread_mutex_unlock(&fs->async.lock);
    pthread_mutex_lock(&fs->spath.lock);
    deferred_now = fs->spath.n_queued;
    pthread_mutex_unlock(&fs->spath.lock);
    return tfs_buf_printf(b,
        ", \"async_max\": %u, \"async_inflight\": %u, \"async_queued\": %u"
        ", \"async_reads\": %" PRIuFAST64 ", \"async_overflow\": %" PRIuFAST64
        ", \"store_path_max\": %u, \"store_path_busy\": %u"
        ", \"store_path_queued\": %u, \"deferred\": %" PRIuFAST64,
        fs->async.max, flight, queued, atomic_load(&fs->n.async_reads),
        atomic_load(&fs->n.async_overflow), fs->spath.cap,
        (unsigned)atomic_load(&fs->spath.busy), deferred_now,
        atomic_load(&fs->n.deferred));
}

/* The JSON members the mount adds to the cache's object. */
static int ctl_json_extra(struct tfs_fs *fs, struct tfs_buf *b)
{
    struct tfs_store_stats ss;
    struct tfs_fault_stats fst;
    struct tfs_retry_stats rst;
    int rc;

    tfs_store_get_stats(fs->st, &ss);
    rc = tfs_buf_printf(b,
        "\"fuse\": {\"pid\": %d, \"lookups\": %" PRIuFAST64
        ", \"opens\": %" PRIuFAST64
        ", \"reads\": %" PRIuFAST64 ", \"read_bytes\": %" PRIuFAST64
        ", \"read_max\": %" PRIuFAST64 ", \"errors\": %" PRIuFAST64
        ", \"writes\": %" PRIuFAST64 ", \"write_bytes\": %" PRIuFAST64
        ", \"inodes\": %zu, \"handles\": %zu",
        (int)getpid(), atomic_load(&fs->n.lookups), atomic_load(&fs->n.opens),
        atomic_load(&fs->n.reads), atomic_load(&fs->n.read_bytes),
        atomic_load(&fs->n.read_max), atomic_load(&fs->n.errors),
        atomic_load(&fs->n.writes), atomic_load(&fs->n.write_bytes),
        fs_itable_count(&fs->inodes), ctl_handle_count(fs));
    if (rc == 0)
        rc = ctl_json_async(fs, b);
    if (rc == 0)
        rc = tfs_buf_printf(b, "},\n"
        "\"store\": {\"stats\": %" PRIu64 ", \"reads\": %" PRIu64
        ", \"lists\": %" PRIu64 ", \"errors\": %" PRIu64
        ", \"read_bytes\": %" PRIu64 ", \"checksum_mismatches\": %" PRIu64
        ", \"list_skipped\": %" PRIu64 "}", ss.stats, ss.reads,
        ss.lists, ss.errors, ss.read_bytes, ss.checksum_mismatches,
        ss.list_skipped);
    if (rc == 0 && fs->wb != NULL)
        rc = tfs_buf_puts(b, ",\n");
    if (rc == 0 && fs->wb != NULL)
        rc = wb_stats_json(fs->wb, b);
    if (rc == 0 && tfs_store_find(fs->st, "fault") != NULL) {
        tfs_fault_get_stats(fs->st, &fst);
        rc = tfs_buf_printf(b, ",\n\"fault\": {\"calls\": %" PRIu64
                            ", \"injected_errors\": %" PRIu64
                            ", \"flipped_reads\": %" PRIu64
                            ", \"partition_waits\": %" PRIu64
                            ", \"timeouts\": %" PRIu64 "}",
                            fst.calls, fst.injected_errors,
                            fst.flipped_reads, fst.partition_waits,
                            fst.timeouts);
    }
    if (rc == 0 && tfs_store_find(fs->st, "retry") != NULL) {
        tfs_retry_get_stats(fs->st, &rst);
        rc = tfs_buf_printf(b, ",\n\"retry\": {\"calls\": %" PRIu64
                            ", \"retries\": %" PRIu64 ", \"giveups\": %"
                            PRIu64 ", \"deadline_exceeded\": %" PRIu64 "}",
                            rst.calls, rst.retries, rst.giveups,
                            rst.deadline_exceeded);
    }
    return rc;
}

/*
 * The cache's object with "fuse", "store", and "fault"/"retry" (when
 * those layers exist) added before its closing brace.
 */
int fs_ctl_render(struct tfs_fs *fs, struct tfs_buf *out)
{
    char *end;
    bool empty;
    int rc = ctl_cache_text(fs, tfs_cache_stats_json, out);

    if (rc < 0)
        return rc;
    end = out->len ? memrchr(out->p, '}', out->len) : NULL;
    if (end == NULL)
        return tfs_err(TFS_EPROTO, "cache statistics are not an object");
    out->len = (size_t)(end - out->p);
    while (out->len > 0 && strchr(" \t\r\n", out->p[out->len - 1]) != NULL)
        out->len--;
    empty = out->len > 0 && out->p[out->len - 1] == '{';
    out->p[out->len] = '\0';
    rc = tfs_buf_puts(out, empty ? "\n" : ",\n");
    if (rc == 0)
        rc = ctl_json_extra(fs, out);
    return rc == 0 ? tfs_buf_puts(out, "\n}\n") : rc;
}

static int ctl_prom_line(struct tfs_buf *b, const char *name,
                        const char *type, const char *help, uint64_t v)
{
    return tfs_buf_printf(b, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\n"
                          "tierfs_%s %" PRIu64 "\n", name, help, name, type,
                          name, v);
}

/* The /metrics body: the cache's exposition plus the mount's counters. */
int fs_metrics_fill(void *arg, struct tfs_buf *out)
{
    struct tfs_fs *fs = arg;
    int rc = ctl_cache_text(fs, tfs_cache_stats_prometheus, out);

    if (rc == 0)
        rc = ctl_prom_line(out, "fuse_read_requests_total", "counter",
                          "FUSE read requests served",
                          atomic_load(&fs->n.reads));
    if (rc == 0)
        rc = ctl_prom_line(out, "fuse_read_bytes_total", "counter",
                          "bytes returned to FUSE reads",
                          atomic_load(&fs->n.read_bytes));
    if (rc == 0)
        rc = ctl_prom_line(out, "fuse_errors_total", "counter",
                          "FUSE requests answered with an error",
                          atomic_load(&fs->n.errors));
    if (rc == 0)
        rc = ctl_prom_line(out, "fuse_inodes", "gauge",
                          "inodes the kernel holds",
                          fs_itable_count(&fs->inodes));
    if (rc == 0 && fs->wb != NULL)
        rc = wb_stats_prometheus(fs->wb, out);
    return rc;
}
