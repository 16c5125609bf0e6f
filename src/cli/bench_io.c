/* SPDX-License-Identifier: MIT */
/*
 * The target of a benchmark: a directory (a tierfs mount, another mount,
 * local disk), driven with plain POSIX calls as any framework would; or a
 * store URI, driven through libtierfs (through a cache when --cache-dir
 * or --mem-cache is given, else straight at the store).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

struct bench_io {
    bool               posix;
    bool               drop;            /* fadvise DONTNEED after a file */
    char               root[PATH_MAX];  /* posix: the directory */
    char               mnt[PATH_MAX];   /* posix: tierfs mount root or "" */
    struct tfs_store  *st;              /* URI */
    struct tfs_cache  *cache;           /* URI with a cache, or NULL */
    struct bench_file *files;
    size_t             n_files;
    size_t             cap_files;
    char             **dirs;
    size_t             n_dirs;
    size_t             cap_dirs;
    int               *fds;             /* open_all, posix */
    struct tfs_file  **tf;              /* open_all, cache */
};

const char *bench_io_kind(const struct bench_io *io)
{
    if (io->posix)
        return io->mnt[0] ? "tierfs mount" : "directory";
    return io->cache ? "store + cache" : "store";
}

/* ---- listing ---- */

static int io_add_file(struct bench_io *io, const char *name, uint64_t size)
{
    if (io->n_files == io->cap_files) {
        size_t cap = io->cap_files ? io->cap_files * 2 : 1024;
        void *p = tfs_realloc(io->files, cap * sizeof(*io->files));
        if (p == NULL)
            return -ENOMEM;
        io->files = p;
        io->cap_files = cap;
    }
    io->files[io->n_files].name = tfs_strdup(name);
    if (io->files[io->n_files].name == NULL)
        return -ENOMEM;
    io->files[io->n_files++].size = size;
    return 0;
}

static int io_add_dir(struct bench_io *io, const char *name)
{
    if (io->n_dirs == io->cap_dirs) {
        size_t cap = io->cap_dirs ? io->cap_dirs * 2 : 64;
        void *p = tfs_realloc(io->dirs, cap * sizeof(*io->dirs));
        if (p == NULL)
            return -ENOMEM;
        io->dirs = p;
        io->cap_dirs = cap;
    }
    io->dirs[io->n_dirs] = tfs_strdup(name);
    return io->dirs[io->n_dirs++] ? 0 : -ENOMEM;
}

static struct bench_io *io_walking;

static int io_walk(const char *path, const struct stat *sb, int type,
                   struct FTW *ftw)
{
    const char *rel = path + strlen(io_walking->root);

    (void)ftw;
    while (*rel == '/')
        rel++;
    if (strncmp(rel, ".tierfs-", 8) == 0)
        return 0;
    if (type == FTW_D)
        return io_add_dir(io_walking, rel) < 0;
    if (type == FTW_F && S_ISREG(sb->st_mode))
        return io_add_file(io_walking, rel, (uint64_t)sb->st_size) < 0;
    return 0;
}

static int io_list_page(void *arg, const struct tfs_list_page *pg)
{
    struct bench_io *io = arg;
    int rc = 0;

    for (size_t i = 0; i < pg->n_entries && rc == 0; i++)
        rc = io_add_file(io, pg->entries[i].key, pg->entries[i].st.size);
    return rc;
}

static int file_cmp(const void *a, const void *b)
{
    return strcmp(((const struct bench_file *)a)->name,
                  ((const struct bench_file *)b)->name);
}

/* Directories of a store: every prefix of every key. */
static int io_store_dirs(struct bench_io *io)
{
    int rc = io_add_dir(io, "");

    for (size_t i = 0; i < io->n_files && rc == 0; i++) {
        const char *k = io->files[i].name;
        const char *s = strrchr(k, '/');
        char dir[1100];
        if (s == NULL || (size_t)(s - k) + 2 > sizeof(dir))
            continue;
        snprintf(dir, sizeof(dir), "%.*s/", (int)(s - k), k);
        if (strcmp(io->dirs[io->n_dirs - 1], dir) != 0)
            rc = io_add_dir(io, dir);
    }
    return rc;
}

int bench_io_list(struct bench_io *io, const struct bench_file **files,
                  size_t *n)
{
    int rc = 0;

    if (io->n_files == 0 && io->n_dirs == 0) {
        if (io->posix) {
            io_walking = io;
            if (nftw(io->root, io_walk, 32, FTW_PHYS) != 0)
                rc = tfs_err(-EIO, "cannot walk %s", io->root);
        } else {
            rc = tfs_store_list_all(io->st, "", NULL, io_list_page, io);
        }
        if (rc == 0 && io->n_files > 1)
            qsort(io->files, io->n_files, sizeof(*io->files), file_cmp);
        if (rc == 0 && !io->posix)
            rc = io_store_dirs(io);
    }
    *files = io->files;
    *n = io->n_files;
    return rc;
}

int bench_io_dirs(struct bench_io *io, const char *const **dirs, size_t *n)
{
    const struct bench_file *f;
    size_t nf;
    int rc = bench_io_list(io, &f, &nf);

    *dirs = (const char *const *)io->dirs;
    *n = io->n_dirs;
    return rc;
}

/* ---- opening ---- */

/* The root of the tierfs mount holding path, or "". */
static void io_find_mount(const char *path, char *mnt, size_t len)
{
    char line[8192];
    size_t best = 0;
    FILE *f = fopen("/proc/self/mounts", "r");

    mnt[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char dev[4096];
        char dir[4096];
        char type[256];
        size_t l;

        if (sscanf(line, "%4095s %4095s %255s", dev, dir, type) != 3)
            continue;
        l = strlen(dir);
        if (strncmp(path, dir, l) != 0 ||
            (path[l] != '/' && path[l] != '\0') || l < best)
            continue;
        best = l;
        if (strstr(type, "tierfs") != NULL)
            snprintf(mnt, len, "%s", dir);
        else
            mnt[0] = '\0';
    }
    if (f != NULL)
        fclose(f);
}

static int io_open_cache(struct bench_io *io, const struct bench_opts *o)
{
    int rc = tfs_cache_create(&io->cache);

    if (rc == 0 && o->cache_dir != NULL)
        rc = tfs_cache_set(io->cache, "cache_dir", o->cache_dir);
    if (rc == 0 && o->cache_size != NULL)
        rc = tfs_cache_set(io->cache, "cache_size", o->cache_size);
    if (rc == 0 && o->mem_cache != NULL)
        rc = tfs_cache_set(io->cache, "mem_cache", o->mem_cache);
    if (rc == 0)
        rc = tfs_cache_open(io->cache, io->st);
    if (rc < 0) {
        tfs_cache_close(io->cache);
        io->cache = NULL;
    }
    return rc;
}

int bench_io_open(struct bench_io **out, const struct bench_opts *o)
{
    struct bench_io *io = tfs_calloc(1, sizeof(*io));
    struct stat sb;
    int rc = 0;

    if (io == NULL)
        return -ENOMEM;
    io->drop = o->drop;
    if (strstr(o->target, "://") == NULL && stat(o->target, &sb) == 0 &&
        S_ISDIR(sb.st_mode)) {
        io->posix = true;
        if (realpath(o->target, io->root) == NULL)
            rc = tfs_err(-errno, "%s", o->target);
        else
            io_find_mount(io->root, io->mnt, sizeof(io->mnt));
    } else {
        rc = tfs_store_open(&io->st, o->target, cli_store_options);
        if (rc == 0 && (o->cache_dir != NULL || o->mem_cache != NULL))
            rc = io_open_cache(io, o);
    }
    if (rc < 0) {
        bench_io_close(io);
        return rc;
    }
    *out = io;
    return 0;
}

void bench_io_close(struct bench_io *io)
{
    if (io == NULL)
        return;
    for (size_t i = 0; i < io->n_files; i++) {
        if (io->fds != NULL && io->fds[i] >= 0)
            close(io->fds[i]);
        if (io->tf != NULL)
            tfs_file_close(io->tf[i]);
        tfs_free(io->files[i].name);
    }
    for (size_t i = 0; i < io->n_dirs; i++)
        tfs_free(io->dirs[i]);
    tfs_free(io->fds);
    tfs_free(io->tf);
    tfs_free(io->files);
    tfs_free(io->dirs);
    tfs_cache_close(io->cache);
    tfs_store_close(io->st);
    tfs_free(io);
}

/* ---- operations ---- */

static void io_path(const struct bench_io *io, const char *name, char *buf,
                    size_t len)
{
    snprintf(buf, len, "%s/%s", io->root, name);
}

static int io_posix_read_file(struct bench_io *io, const char *name,
                              void *buf, size_t bufsz, uint64_t *bytes,
                              bool drop)
{
    char path[PATH_MAX + 1100];
    ssize_t n;
    int fd;

    io_path(io, name, path, sizeof(path));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *bytes = 0;
    while ((n = read(fd, buf, bufsz)) > 0)
        *bytes += (uint64_t)n;
    if (drop)
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return n < 0 ? -EIO : 0;
}

static int io_lib_read_file(struct bench_io *io, const char *name, void *buf,
                            size_t bufsz, uint64_t *bytes)
{
    struct tfs_file *f = NULL;
    struct tfs_stat st;
    size_t n = 0;
    int rc;

    *bytes = 0;
    if (io->cache == NULL) {
        rc = tfs_store_stat(io->st, name, &st);
        for (uint64_t off = 0; rc == 0 && off < st.size; off += n) {
            rc = tfs_store_read(io->st, name, buf, bufsz, off, st.version,
                                &n);
            *bytes += n;
            if (n == 0)
                break;
        }
        return rc;
    }
    rc = tfs_file_open(io->cache, name, &f);
    for (uint64_t off = 0; rc == 0; off += n) {
        rc = tfs_file_read(f, buf, bufsz, off, &n);
        if (rc < 0 || n == 0)
            break;
        *bytes += n;
    }
    tfs_file_close(f);
    return rc;
}

int bench_io_read_file(struct bench_io *io, const char *name, void *buf,
                       size_t bufsz, uint64_t *bytes)
{
    if (io->posix)
        return io_posix_read_file(io, name, buf, bufsz, bytes, io->drop);
    return io_lib_read_file(io, name, buf, bufsz, bytes);
}

int bench_io_open_all(struct bench_io *io)
{
    char path[PATH_MAX + 1100];
    int rc = 0;

    if (io->posix) {
        io->fds = tfs_malloc((io->n_files + 1) * sizeof(int));
        if (io->fds == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < io->n_files; i++) {
            io_path(io, io->files[i].name, path, sizeof(path));
            io->fds[i] = open(path, O_RDONLY | O_CLOEXEC);
            if (io->fds[i] < 0 && rc == 0)
                rc = tfs_err(-errno, "%s", path);
        }
        return rc;
    }
    if (io->cache == NULL)
        return 0;
    io->tf = tfs_calloc(io->n_files + 1, sizeof(*io->tf));
    if (io->tf == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < io->n_files && rc == 0; i++)
        rc = tfs_file_open(io->cache, io->files[i].name, &io->tf[i]);
    return rc;
}

int bench_io_pread(struct bench_io *io, size_t file, void *buf, size_t len,
                   uint64_t off, size_t *n)
{
    ssize_t r;

    if (io->posix) {
        do {
            r = pread(io->fds[file], buf, len, (off_t)off);
        } while (r < 0 && errno == EINTR);
        if (r < 0)
            return -errno;
        *n = (size_t)r;
        return 0;
    }
    if (io->cache != NULL)
        return tfs_file_read(io->tf[file], buf, len, off, n);
    return tfs_store_read(io->st, io->files[file].name, buf, len, off, NULL,
                          n);
}

int bench_io_stat(struct bench_io *io, const char *name, uint64_t *size)
{
    char path[PATH_MAX + 1100];
    struct tfs_stat st;
    struct stat sb;
    int rc;

    if (io->posix) {
        io_path(io, name, path, sizeof(path));
        if (stat(path, &sb) < 0)
            return -errno;
        *size = (uint64_t)sb.st_size;
        return 0;
    }
    rc = io->cache ? tfs_cache_stat(io->cache, name, &st)
                   : tfs_store_stat(io->st, name, &st);
    if (rc == 0)
        *size = st.size;
    return rc;
}

int bench_io_open_close(struct bench_io *io, const char *name)
{
    char path[PATH_MAX + 1100];
    struct tfs_file *f = NULL;
    uint64_t size;
    int fd;
    int rc;

    if (io->posix) {
        io_path(io, name, path, sizeof(path));
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -errno;
        close(fd);
        return 0;
    }
    if (io->cache == NULL)
        return bench_io_stat(io, name, &size);
    rc = tfs_file_open(io->cache, name, &f);
    tfs_file_close(f);
    return rc;
}

static int io_count_page(void *arg, const struct tfs_list_page *pg)
{
    *(size_t *)arg += pg->n_entries + pg->n_prefixes;
    return 0;
}

int bench_io_readdir(struct bench_io *io, const char *dir, size_t *entries)
{
    char path[PATH_MAX + 1100];
    struct tfs_dir *d = NULL;
    DIR *dp;
    int rc;

    *entries = 0;
    if (io->posix) {
        io_path(io, dir, path, sizeof(path));
        dp = opendir(path);
        if (dp == NULL)
            return -errno;
        while (readdir(dp) != NULL)
            (*entries)++;
        closedir(dp);
        return 0;
    }
    if (io->cache == NULL)
        return tfs_store_list_all(io->st, dir, "/", io_count_page, entries);
    rc = tfs_cache_opendir(io->cache, dir, &d);
    if (rc == 0)
        *entries = tfs_dir_count(d);
    tfs_dir_put(d);
    return rc;
}

int bench_io_write(struct bench_io *io, const char *name, const void *buf,
                   size_t len)
{
    char path[PATH_MAX + 1100];
    ssize_t n;
    int fd;

    if (!io->posix)
        return tfs_store_put(io->st, name, buf, len, NULL);
    io_path(io, name, path, sizeof(path));
    for (char *s = strchr(path + strlen(io->root) + 1, '/'); s != NULL;
         s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return tfs_err(-errno, "%s", path);
    n = write(fd, buf, len);
    close(fd);
    return n == (ssize_t)len ? 0 : tfs_err(-EIO, "short write to %s", path);
}

/* The cache's statistics JSON into a new buffer: sized, then rendered
 * again if it grew in between (-ENOSPC says by how much). */
static int bench_cache_stats(struct tfs_cache *c, char **json)
{
    size_t size = 8192;

    for (int tries = 0; tries < 8; tries++) {
        size_t len = 0;
        char *buf = tfs_malloc(size);
        int rc;

        if (buf == NULL)
            return -ENOMEM;
        rc = tfs_cache_stats_json(c, buf, size, &len);
        if (rc == 0) {
            *json = buf;
            return 0;
        }
        tfs_free(buf);
        if (rc != -ENOSPC)
            return rc;
        size = len + 1024;
    }
    return -ENOSPC;
}

int bench_io_stats(struct bench_io *io, char **json)
{
    char path[PATH_MAX + 32];
    struct tfs_buf b;
    char chunk[8192];
    size_t n;
    FILE *f;
    int rc = 0;

    if (io->cache != NULL)
        return bench_cache_stats(io->cache, json);
    if (!io->posix || io->mnt[0] == '\0')
        return -ENOENT;
    snprintf(path, sizeof(path), "%s/.tierfs-stats", io->mnt);
    f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    tfs_buf_init(&b, 1u << 20);         /* the control file is ~10 KB */
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = tfs_buf_append(&b, chunk, n);
    if (rc == 0 && ferror(f))
        rc = -EIO;
    fclose(f);
    *json = rc == 0 ? tfs_buf_steal(&b) : NULL;
    tfs_buf_cleanup(&b);
    return rc < 0 ? rc : *json != NULL ? 0 : -ENOMEM;
}
