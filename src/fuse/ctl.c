/* SPDX-License-Identifier: MIT */
/*
 * The mount's statistics texts: the control file .tierfs-stats (JSON)
 * and the body of the Prometheus /metrics endpoint.  Both are one
 * snapshot of the registry's sections (metrics/metrics.h) that a mount
 * has, rendered by the registry's renderers: the cache's figures, this
 * file's "fuse" section, the store's, the s3 store's endpoints (a table),
 * the write-back's when writable, and the fault and retry layers' when the
 * URI has them.  Both read counters only; nothing here blocks on the store.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuse/fuse_int.h"
#include "metrics/metrics.h"
#include "store/s3_metrics.h"
#include "tier/shared.h"
#include "tierfs/fault.h"
#include "tierfs/retry.h"

/* The "fuse" section: X(kind, name, type, unit, prom, help). */
#define CTL_FUSE_METRICS(X)                                                \
    X(U64, pid, GAUGE, NONE, NULL, "process id of the mount's daemon")     \
    X(U64, lookups, COUNTER, COUNT, NULL, "lookups answered")              \
    X(U64, opens, COUNTER, COUNT, NULL, "files opened")                    \
    X(U64, reads, COUNTER, COUNT, "fuse_read_requests_total",              \
      "FUSE read requests served")                                         \
    X(U64, read_bytes, COUNTER, BYTES, NULL, "bytes returned to FUSE reads") \
    X(U64, read_max, GAUGE, BYTES, "fuse_read_max_bytes",                  \
      "largest read request seen")                                         \
    X(U64, errors, COUNTER, COUNT, NULL,                                   \
      "FUSE requests answered with an error")                              \
    X(U64, writes, COUNTER, COUNT, "fuse_write_requests_total",            \
      "FUSE write requests")                                               \
    X(U64, write_bytes, COUNTER, BYTES, NULL, "bytes written through FUSE") \
    X(U64, flushes_other, COUNTER, COUNT, NULL,                            \
      "closes of a file open for writing by a process that neither "     \
      "opened it nor wrote last (a forked child's copy): not sealed")    \
    X(U64, inodes, GAUGE, COUNT, NULL, "inodes the kernel holds")          \
    X(U64, handles, GAUGE, COUNT, NULL, "open files and directories")      \
    X(U64, async_max, GAUGE, COUNT, NULL,                                  \
      "bound of the reads waiting on the store at once")                   \
    X(U64, async_inflight, GAUGE, COUNT, NULL,                             \
      "reads waiting on the store now")                                    \
    X(U64, async_queued, GAUGE, COUNT, NULL,                               \
      "reads queued past the bound now")                                   \
    X(U64, async_reads, COUNTER, COUNT, NULL,                              \
      "reads answered from a fetch completion")                            \
    X(U64, async_overflow, COUNTER, COUNT, NULL,                           \
      "of those, reads queued past the bound first")                       \
    X(U64, store_path_max, GAUGE, COUNT, NULL,                             \
      "FUSE threads allowed in the store path at once")                    \
    X(U64, store_path_busy, GAUGE, COUNT, NULL,                            \
      "FUSE threads in the store path now")                                \
    X(U64, store_path_queued, GAUGE, COUNT, NULL,                          \
      "requests waiting for the store-path threads now")                   \
    X(U64, deferred, COUNTER, COUNT, NULL,                                 \
      "requests handed to the store-path threads")                         \
    X(U64, mem_read_buffers, GAUGE, BYTES, "fuse_read_buffer_bytes",       \
      "memory of the FUSE threads' read buffers (one per thread)")         \
    X(U64, mem_async_buffers, GAUGE, BYTES, "fuse_async_buffer_bytes",     \
      "memory of the reply buffers of reads waiting on the store")         \
    X(U64, rss, GAUGE, BYTES, "fuse_resident_bytes",                       \
      "the daemon's resident memory now")                                  \
    X(U64, rss_peak, GAUGE, BYTES, "fuse_resident_peak_bytes",             \
      "the daemon's largest resident memory so far")

struct ctl_fuse {
    CTL_FUSE_METRICS(TFS_METRIC_FIELD)
};

static const struct tfs_metric ctl_fuse_table[] = {
#define X(...) TFS_METRIC_DESC(struct ctl_fuse, __VA_ARGS__)
    CTL_FUSE_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_fuse = {
    .name = "fuse",
    .prom_prefix = "fuse_",
    .when = "every mount",
    .m = ctl_fuse_table,
    .n = TFS_ARRAY_LEN(ctl_fuse_table),
    .size = sizeof(struct ctl_fuse),
};

/* The "hints" section (hint.c): X(kind, name, type, unit, prom, help). */
#define CTL_HINT_METRICS(X)                                                \
    X(U64, streams, GAUGE, COUNT, NULL, "order-hint streams open now")     \
    X(U64, streams_opened, COUNTER, COUNT, NULL,                           \
      "opens of " FS_HINT_NAME)                                            \
    X(U64, streams_dropped, COUNTER, COUNT, NULL,                          \
      "streams dropped: their reader stopped following them")              \
    X(U64, paths, COUNTER, COUNT, NULL, "hinted paths taken")              \
    X(U64, bad_writes, COUNTER, COUNT, NULL,                               \
      "writes refused (a bad path; nothing of the write taken)")           \
    X(U64, opens_hinted, COUNTER, COUNT, NULL,                             \
      "opens of hinted files (the readers' position)")                     \
    X(U64, files_issued, COUNTER, COUNT, NULL,                             \
      "hinted files whose misses were asked for ahead of the reader")      \
    X(U64, files_cached, COUNTER, COUNT, NULL,                             \
      "of those, all cached already: nothing to fetch")                    \
    X(U64, files_missing, COUNTER, COUNT, NULL,                            \
      "hinted paths that name no file")                                    \
    X(U64, files_passed, COUNTER, COUNT, NULL,                             \
      "hinted files opened before their turn came (read on demand)")       \
    X(U64, bytes_queued, COUNTER, BYTES, "fuse_hint_queued_bytes_total",        \
      "bytes the hints asked of the fetch engine")                         \
    X(U64, bytes_used, COUNTER, BYTES, "fuse_hint_used_bytes_total",       \
      "bytes fetched ahead for files that were then opened")                       \
    X(U64, bytes_abandoned, COUNTER, BYTES, "fuse_hint_abandoned_bytes_total",  \
      "bytes fetched ahead for files not opened before their stream ended")      \
    X(U64, window_files, GAUGE, COUNT, NULL,                               \
      "hinted files a stream keeps issued ahead of its reader, at most")   \
    X(U64, window_bytes, GAUGE, BYTES, NULL,                               \
      "bytes a stream keeps fetched ahead of its reader, at most")         \
    X(U64, mem_bytes, GAUGE, BYTES, "fuse_hint_memory_bytes",              \
      "memory the streams' hinted paths hold")

static const struct tfs_metric ctl_hint_table[] = {
#define X(...) TFS_METRIC_DESC(struct fs_hint_counters, __VA_ARGS__)
    CTL_HINT_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_hints = {
    .name = "hints",
    .prom_prefix = "fuse_hint_",
    .when = "every mount",
    .m = ctl_hint_table,
    .n = TFS_ARRAY_LEN(ctl_hint_table),
    .size = sizeof(struct fs_hint_counters),
};

/* One snapshot of every section the mount has. */
struct ctl_snap {
    struct tfs_cache_metrics cache;
    struct ctl_fuse          fuse;
    struct fs_hint_counters  hints;
    struct tfs_store_stats   store;
    struct wb_metrics        wb;
    struct tfs_fault_stats   fault;
    struct tfs_retry_stats   retry;
    struct tfs_group_snap    group;
    struct tfs_shared_metrics shared;
    struct tfs_s3_ep_metrics ep[TFS_S3_MAX_ENDPOINTS];
    const char              *ep_keys[TFS_S3_MAX_ENDPOINTS];
    struct tfs_metric_src    src[12];
    size_t                   n;
};

#define CTL_N(f) ((uint64_t)atomic_load(&fs->n.f))

/* VmRSS and VmHWM of this process, in bytes (0 where unreadable). */
static void ctl_rss(uint64_t *rss, uint64_t *peak)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");

    *rss = *peak = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long kb;

        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            *rss = kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            *peak = kb * 1024;
    }
    fclose(f);
}

static void ctl_fuse_get(struct tfs_fs *fs, struct ctl_fuse *f)
{
    f->pid = (uint64_t)getpid();
    f->lookups = CTL_N(lookups);
    f->opens = CTL_N(opens);
    f->reads = CTL_N(reads);
    f->read_bytes = CTL_N(read_bytes);
    f->read_max = CTL_N(read_max);
    f->errors = CTL_N(errors);
    f->writes = CTL_N(writes);
    f->write_bytes = CTL_N(write_bytes);
    f->flushes_other = CTL_N(flushes_other);
    f->inodes = fs_itable_count(&fs->inodes);
    pthread_mutex_lock(&fs->hlock);
    f->handles = fs->nhandles;
    pthread_mutex_unlock(&fs->hlock);
    f->async_max = fs->async.max;
    pthread_mutex_lock(&fs->async.lock);
    f->async_inflight = fs->async.n_flight;
    f->async_queued = fs->async.n_queued;
    pthread_mutex_unlock(&fs->async.lock);
    f->async_reads = CTL_N(async_reads);
    f->async_overflow = CTL_N(async_overflow);
    f->store_path_max = fs->spath.cap;
    f->store_path_busy = atomic_load(&fs->spath.busy);
    pthread_mutex_lock(&fs->spath.lock);
    f->store_path_queued = fs->spath.n_queued;
    pthread_mutex_unlock(&fs->spath.lock);
    f->deferred = CTL_N(deferred);
    f->mem_read_buffers = fs_read_buf_bytes();
    f->mem_async_buffers = atomic_load(&fs->async.buf_bytes);
    ctl_rss(&f->rss, &f->rss_peak);
}

static void ctl_add(struct ctl_snap *s, const struct tfs_metric_section *sec,
                    const void *data)
{
    s->src[s->n++] = (struct tfs_metric_src){.sec = sec, .data = data};
}

/* Take the snapshot (the cache's section first: the top level);
   -ENOMEM (then s holds nothing to free). */
static int ctl_snapshot(struct tfs_fs *fs, struct ctl_snap *s)
{
    size_t rows;

    memset(s, 0, sizeof(*s));
    tfs_cache_metrics_get(fs->cache, &s->cache);
    ctl_add(s, &tfs_metrics_cache, &s->cache);
    ctl_fuse_get(fs, &s->fuse);
    ctl_add(s, &tfs_metrics_fuse, &s->fuse);
    fs_hints_get(fs, &s->hints);
    ctl_add(s, &tfs_metrics_hints, &s->hints);
    tfs_store_get_stats(fs->st, &s->store);
    ctl_add(s, &tfs_metrics_store, &s->store);
    rows = tfs_s3_endpoint_metrics(fs->st, s->ep, s->ep_keys,
                                   TFS_S3_MAX_ENDPOINTS);
    if (rows > 0) {
        ctl_add(s, &tfs_metrics_endpoint, s->ep);
        s->src[s->n - 1].keys = s->ep_keys;
        s->src[s->n - 1].rows = rows;
    }
    if (fs->wb != NULL) {
        wb_metrics_get(fs->wb, &s->wb);
        ctl_add(s, &tfs_metrics_wb, &s->wb);
        s->src[s->n - 1].more = wb_metrics_json_more;
        s->src[s->n - 1].arg = fs->wb;
    }
    if (tfs_store_find(fs->st, "fault") != NULL) {
        tfs_fault_get_stats(fs->st, &s->fault);
        ctl_add(s, &tfs_metrics_fault, &s->fault);
    }
    if (tfs_store_find(fs->st, "retry") != NULL) {
        tfs_retry_get_stats(fs->st, &s->retry);
        ctl_add(s, &tfs_metrics_retry, &s->retry);
    }
    if (fs->group != NULL) {
        if (tfs_group_snap_get(fs->group, &s->group) < 0)
            return -ENOMEM;
        ctl_add(s, &tfs_metrics_group, &s->group.g);
        ctl_add(s, &tfs_metrics_peers, s->group.peers);
        s->src[s->n - 1].keys = (const char *const *)s->group.keys;
        s->src[s->n - 1].rows = s->group.n;
    }
    if (fs->shared != NULL) {
        tfs_shared_metrics_get(fs->shared, &s->shared);
        ctl_add(s, &tfs_metrics_shared, &s->shared);
    }
    return 0;
}

static void ctl_snap_free(struct ctl_snap *s)
{
    tfs_group_snap_cleanup(&s->group);
    tfs_free(s);
}

int fs_ctl_render(struct tfs_fs *fs, struct tfs_buf *out)
{
    struct ctl_snap *s = tfs_malloc(sizeof(*s));
    int rc;

    if (s == NULL)
        return -ENOMEM;
    rc = ctl_snapshot(fs, s);
    if (rc == 0)
        rc = tfs_metrics_json(out, s->src, s->n);
    ctl_snap_free(s);
    return rc;
}

int fs_metrics_fill(void *arg, struct tfs_buf *out)
{
    struct tfs_fs *fs = arg;
    struct ctl_snap *s = tfs_malloc(sizeof(*s));
    int rc;

    if (s == NULL)
        return -ENOMEM;
    rc = ctl_snapshot(fs, s);
    if (rc == 0)
        rc = tfs_metrics_prometheus(out, s->src, s->n);
    ctl_snap_free(s);
    return rc;
}
