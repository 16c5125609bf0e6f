/* SPDX-License-Identifier: MIT */
/*
 * tierfs warmup URI|PATH [--list FILE] [-j N] [--check]: fill the cache
 * ahead of a job.
 *
 * With a store URI, warmup opens the same cache dir as the mount (its
 * block and cache sizes are adopted from the dir) and loads every object
 * under the URI, or those named in --list, straight into the disk tier.
 * Give it the URI the mount uses: blocks are keyed by the store's root.
 * With a path inside a tierfs mount, it reads the files through the
 * mount, so the daemon caches them.  --check reports what fraction is
 * cached instead of loading anything.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tierfs/cache.h"

#define WARM_XATTR "user.tierfs.cached"

struct warm_item {
    char    *name;                      /* key, or path in mount mode */
    uint64_t size;
};

struct warm {
    /* what to warm */
    struct warm_item *items;
    size_t            n;
    size_t            cap;
    uint64_t          total_bytes;
    bool              via_mount;        /* read through a tierfs mount */
    struct tfs_cache *cache;            /* URI mode */
    /* progress, updated by the workers */
    atomic_size_t     next;
    atomic_size_t     done;
    atomic_size_t     failed;
    atomic_uint_fast64_t bytes;
    atomic_uint_fast64_t cached;        /* --check: bytes found cached */
    atomic_size_t     complete;         /* --check: files fully cached */
    bool              check;
};

static void warm_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs warmup [options] URI|PATH\n\n"
            "Fill the cache ahead of a job, with a progress bar.\n\n"
            "URI (s3://..., file://..., a directory): load every object "
            "under it\ninto the disk tier of --cache-dir (use the URI and "
            "cache dir of the\nmount).  PATH inside a tierfs mount: read "
            "the files through the mount.\n\n"
            "  --list FILE        only these keys (or paths), one per line,\n"
            "                     relative to URI|PATH\n"
            "  -j, --jobs N       files in parallel (default 8)\n"
            "  --check            report what fraction is cached; load "
            "nothing\n"
            "  --cache-dir DIR    the cache dir (URI mode; required)\n"
            "  --cache-size N     its bound (default: the dir's own)\n"
            "  --cache-mode MODE  private (default) or group: as the "
            "mount has it\n"
            "  --block-size N     block size (default: the dir's own)\n"
            "  -q, --quiet        no progress bar\n");
}

static int warm_add(struct warm *w, const char *name, uint64_t size)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        struct warm_item *v = tfs_realloc(w->items, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        w->items = v;
        w->cap = cap;
    }
    w->items[w->n].name = tfs_strdup(name);
    if (w->items[w->n].name == NULL)
        return -ENOMEM;
    w->items[w->n++].size = size;
    w->total_bytes += size;
    return 0;
}

/* ---- building the list ---- */

static int warm_list_page(void *arg, const struct tfs_list_page *pg)
{
    struct warm *w = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = warm_add(w, pg->entries[i].key, pg->entries[i].st.size);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static struct warm *warm_walk_target;

static int warm_walk_fn(const char *path, const struct stat *sb, int type,
                        struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !S_ISREG(sb->st_mode))
        return 0;
    return warm_add(warm_walk_target, path, (uint64_t)sb->st_size) < 0;
}

/* Names from --list: keys under the store, or paths under root. */
static int warm_read_list(struct warm *w, const char *file, const char *root)
{
    char line[4200];
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
    int rc = 0;

    if (f == NULL)
        return tfs_err(-errno, "cannot open the list %s", file);
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        char path[8400];
        struct stat sb;

        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        if (!w->via_mount) {
            rc = warm_add(w, line, 0);
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", root, line);
        if (stat(path, &sb) < 0)
            rc = tfs_err(-errno, "%s", path);
        else
            rc = warm_add(w, path, (uint64_t)sb.st_size);
    }
    if (f != stdin)
        fclose(f);
    return rc;
}

/* Is path inside a mounted tierfs file system? */
static bool warm_on_tierfs(const char *path)
{
    char real[4096];
    char line[8192];
    size_t best = 0;
    bool is_tierfs = false;
    FILE *f;

    if (realpath(path, real) == NULL)
        return false;
    f = fopen("/proc/self/mounts", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char dev[4096];
        char mnt[4096];
        char type[256];
        size_t len;

        if (sscanf(line, "%4095s %4095s %255s", dev, mnt, type) != 3)
            continue;
        len = strlen(mnt);
        if (strncmp(real, mnt, len) != 0 ||
            (real[len] != '/' && real[len] != '\0' && len > 1) ||
            len < best)
            continue;
        best = len;
        is_tierfs = strstr(type, "tierfs") != NULL;
    }
    if (f != NULL)
        fclose(f);
    return is_tierfs;
}

/* ---- the work ---- */

static int warm_one_mount(struct warm *w, struct warm_item *it, char *buf,
                          size_t bufsz, uint64_t *bytes)
{
    char val[32];
    ssize_t n;
    int fd;

    if (w->check) {
        n = getxattr(it->name, WARM_XATTR, val, sizeof(val) - 1);
        if (n < 0)
            return tfs_err(-errno, "%s: cannot ask the mount (%s)",
                           it->name, WARM_XATTR);
        val[n] = '\0';
        *bytes = strtoull(val, NULL, 10);
        return 0;
    }
    fd = open(it->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tfs_err(-errno, "%s", it->name);
    *bytes = 0;
    while ((n = read(fd, buf, bufsz)) > 0)
        *bytes += (uint64_t)n;
    close(fd);
    return n < 0 ? tfs_err(-EIO, "%s: read failed", it->name) : 0;
}

static void *warm_worker(void *arg)
{
    struct warm *w = arg;
    size_t bufsz = 1u << 20;
    char *buf = w->via_mount ? tfs_malloc(bufsz) : NULL;
    size_t i;

    /* A thread-local buffer would be in every thread of the process (the
       static TLS of the executable), the mount daemon's included. */
    if (w->via_mount && buf == NULL)
        return NULL;
    while ((i = atomic_fetch_add(&w->next, 1)) < w->n) {
        struct warm_item *it = &w->items[i];
        uint64_t bytes = 0;
        int rc;

        if (w->via_mount)
            rc = warm_one_mount(w, it, buf, bufsz, &bytes);
        else if (w->check)
            rc = tfs_cache_cached_bytes(w->cache, it->name, &bytes);
        else
            rc = tfs_cache_fill(w->cache, it->name, &bytes);
        if (rc < 0) {
            fprintf(stderr, "\ntierfs: warmup %s: %s (%s)\n", it->name,
                    tfs_strerror(rc), tfs_errdetail());
            atomic_fetch_add(&w->failed, 1);
        } else if (w->check) {
            atomic_fetch_add(&w->cached, bytes);
            if (bytes >= it->size)
                atomic_fetch_add(&w->complete, 1);
        }
        atomic_fetch_add(&w->bytes, w->check ? it->size : bytes);
        atomic_fetch_add(&w->done, 1);
    }
    tfs_free(buf);
    return NULL;
}

static void warm_progress(struct warm *w, uint64_t t0, bool final)
{
    double secs = (double)(tfs_now_ns() - t0) / 1e9;
    uint64_t bytes = atomic_load(&w->bytes);
    double rate = secs > 0 ? (double)bytes / secs : 0;
    double left = rate > 0 && w->total_bytes > bytes
                      ? (double)(w->total_bytes - bytes) / rate : 0;
    char b[32];
    char t[32];

    fprintf(stderr, "\r  %zu/%zu files  %s / %s  %.1f MB/s  ETA %.0f s   %s",
            atomic_load(&w->done), w->n, tfs_fmt_bytes(b, 32, (double)bytes),
            tfs_fmt_bytes(t, 32, (double)w->total_bytes), rate / 1e6, left,
            final ? "\n" : "");
}

static int warm_run(struct warm *w, unsigned jobs, bool progress)
{
    pthread_t th[256];
    uint64_t t0 = tfs_now_ns();
    unsigned started = 0;

    jobs = (unsigned)TFS_MIN((size_t)jobs, TFS_MAX(w->n, (size_t)1));
    for (; started < jobs; started++)
        if (pthread_create(&th[started], NULL, warm_worker, w) != 0)
            break;
    while (started > 0 && atomic_load(&w->done) < w->n) {
        if (progress)
            warm_progress(w, t0, false);
        usleep(250000);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (progress)
        warm_progress(w, t0, true);
    return started == 0 && w->n > 0 ? -EAGAIN : 0;
}

/* ---- the command ---- */

struct warm_opts {
    const char *list;
    const char *cache_dir;
    const char *cache_size;
    const char *block_size;
    const char *cache_mode;
    unsigned    jobs;
    bool        quiet;
    bool        check;
};

static int warm_parse(int argc, char **argv, struct warm_opts *o)
{
    static const struct option longopts[] = {
        {"list", required_argument, NULL, 'l'},
        {"jobs", required_argument, NULL, 'j'},
        {"check", no_argument, NULL, 'c'},
        {"cache-dir", required_argument, NULL, 'D'},
        {"cache-size", required_argument, NULL, 'S'},
        {"block-size", required_argument, NULL, 'B'},
        {"cache-mode", required_argument, NULL, 'M'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "j:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->list = optarg; break;
        case 'c': o->check = true; break;
        case 'D': o->cache_dir = optarg; break;
        case 'S': o->cache_size = optarg; break;
        case 'B': o->block_size = optarg; break;
        case 'M': o->cache_mode = optarg; break;
        case 'q': o->quiet = true; break;
        case 'j':
            if (cli_parse_uint("warmup", "--jobs", optarg, 1, 256,
                               &o->jobs) != 0)
                return CLI_USAGE;
            break;
        case 'h':
            warm_help(stdout);
            return -1;
        default:
            warm_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("warmup", "want one URI or PATH");
    return 0;
}

/* URI mode: open the store and a cache over the same cache dir. */
static int warm_open_cache(const char *uri, const struct warm_opts *o,
                           struct tfs_store **st, struct warm *w)
{
    int rc = tfs_store_open(st, uri, cli_store_options);

    if (rc < 0)
        return rc;
    rc = tfs_cache_create(&w->cache);
    if (rc == 0)
        rc = tfs_cache_set(w->cache, "cache_dir", o->cache_dir);
    if (rc == 0 && o->cache_size != NULL)
        rc = tfs_cache_set(w->cache, "cache_size", o->cache_size);
    if (rc == 0 && o->block_size != NULL)
        rc = tfs_cache_set(w->cache, "block_size", o->block_size);
    if (rc == 0 && o->cache_mode != NULL)
        rc = tfs_cache_set(w->cache, "cache_mode", o->cache_mode);
    if (rc == 0)
        rc = tfs_cache_set(w->cache, "mem_cache", "64M");
    if (rc == 0)
        rc = tfs_cache_open(w->cache, *st);
    if (rc == 0 && o->list != NULL)
        rc = warm_read_list(w, o->list, NULL);
    else if (rc == 0)
        rc = tfs_store_list_all(*st, "", NULL, warm_list_page, w);
    /* Sizes for --list entries come from the cache's metadata. */
    for (size_t i = 0; rc == 0 && o->list != NULL && i < w->n; i++) {
        struct tfs_stat s;
        if (tfs_cache_stat(w->cache, w->items[i].name, &s) == 0) {
            w->items[i].size = s.size;
            w->total_bytes += s.size;
        }
    }
    return rc;
}

static int warm_build(const char *target, const struct warm_opts *o,
                      struct tfs_store **st, struct warm *w)
{
    struct stat sb;

    if (stat(target, &sb) == 0 && warm_on_tierfs(target)) {
        w->via_mount = true;
        if (o->list != NULL)
            return warm_read_list(w, o->list, target);
        warm_walk_target = w;
        if (nftw(target, warm_walk_fn, 32, FTW_PHYS) != 0)
            return tfs_err(-EIO, "cannot walk %s", target);
        return 0;
    }
    if (o->cache_dir == NULL)
        return tfs_err(-EINVAL, "%s is not inside a tierfs mount: give "
                       "the store URI with --cache-dir", target);
    return warm_open_cache(target, o, st, w);
}

static void warm_report(const struct warm *w, const char *target)
{
    char a[32];
    char b[32];
    double pct = w->total_bytes ? 100.0 * (double)atomic_load(&w->cached) /
                                      (double)w->total_bytes
                                : 100.0;

    if (w->check) {
        printf("%s: %s of %s cached (%.1f%%), %zu of %zu files complete\n",
               target, tfs_fmt_bytes(a, 32, (double)atomic_load(&w->cached)),
               tfs_fmt_bytes(b, 32, (double)w->total_bytes), pct,
               atomic_load(&w->complete), w->n);
        return;
    }
    printf("%s: warmed %zu files, %s%s\n", target,
           w->n - atomic_load(&w->failed),
           tfs_fmt_bytes(a, 32, (double)atomic_load(&w->bytes)),
           atomic_load(&w->failed) ? "; some failed (see above)" : "");
}

int cmd_warmup(int argc, char **argv)
{
    struct warm_opts o = {.jobs = 8};
    struct tfs_store *st = NULL;
    struct warm w;
    int rc = warm_parse(argc, argv, &o);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    memset(&w, 0, sizeof(w));
    w.check = o.check;
    rc = warm_build(argv[optind], &o, &st, &w);
    if (rc == 0)
        rc = warm_run(&w, o.jobs, !o.quiet && isatty(STDERR_FILENO));
    if (rc < 0)
        cli_fail("warmup", argv[optind], rc);
    else
        warm_report(&w, argv[optind]);
    tfs_cache_close(w.cache);
    tfs_store_close(st);
    for (size_t i = 0; i < w.n; i++)
        tfs_free(w.items[i].name);
    tfs_free(w.items);
    if (rc < 0)
        return CLI_FAIL;
    return atomic_load(&w.failed) ? CLI_FAIL : CLI_OK;
}
