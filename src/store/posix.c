/* SPDX-License-Identifier: MIT */
/*
 * The posix store: objects are regular files under a root directory (a
 * local disk, or any mounted shared file system: Lustre, CephFS, NFS).
 *
 * Safety: every path is resolved with openat2(RESOLVE_BENEATH) against
 * the root's file descriptor, and keys with ".", ".." or empty components
 * are refused up front, so no key can reach outside the root, through
 * ".." or through a symlink.
 *
 * Atomicity: a put writes ".tierfs-tmp.*" beside the target, fsyncs it,
 * renames it over the target and fsyncs the directory, so readers see the
 * old file or the new one, never a prefix.  Listings hide those files.
 *
 * The file is divided into: path resolution, read side (stat, read),
 * listing (a sorted depth-first walk giving S3 byte order), write side
 * (put, remove, copy, rename), and the ops table.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "store/store_int.h"

#define POSIX_TMP_PREFIX ".tierfs-tmp."

struct posix_priv {
    int   root_fd;                      /* O_PATH directory, owned */
    char *root;                         /* realpath, owned (libc) */
    char *ident;                        /* "file://" root, owned */
    bool  fsync;                        /* fsync files and directories */
};

/* ---- path resolution ---- */

static int posix_check_key(const char *key)
{
    const char *c = key;

    while (*c != '\0') {
        const char *end = strchrnul(c, '/');
        size_t len = (size_t)(end - c);

        if (len == 0 || (len == 1 && c[0] == '.') ||
            (len == 2 && c[0] == '.' && c[1] == '.'))
            return tfs_err(TFS_EESCAPE, "key '%s' has an empty, '.' or "
                           "'..' component", key);
        if (strncmp(c, POSIX_TMP_PREFIX, strlen(POSIX_TMP_PREFIX)) == 0)
            return tfs_err(TFS_EBADKEY, "key '%s' uses the reserved name "
                           POSIX_TMP_PREFIX "*", key);
        if (len > NAME_MAX)
            return tfs_err(-ENAMETOOLONG, "key '%s' has a component longer "
                           "than %d bytes", key, NAME_MAX);
        c = *end ? end + 1 : end;
        if (*end == '/' && *c == '\0')
            return tfs_err(TFS_EBADKEY, "key '%s' ends with '/'", key);
    }
    return 0;
}

/* openat2() beneath dirfd; returns an fd or a negative error. */
static int posix_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    long fd;

    do {
        fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
    if (fd >= 0)
        return (int)fd;
    if (errno == EXDEV)
        return tfs_err(TFS_EESCAPE, "'%s' resolves outside the store root",
                       path);
    return -errno;
}

/* Open key under the root, mapping errors with the key in the detail. */
static int posix_open_key(struct posix_priv *p, const char *key, int flags)
{
    int rc = posix_check_key(key);

    if (rc < 0)
        return rc;
    rc = posix_openat(p->root_fd, key, flags, 0);
    if (rc == -ENOENT || rc == -ENOTDIR)
        return tfs_err(-ENOENT, "no such key '%s'", key);
    if (rc < 0 && tfs_errdetail()[0] == '\0')
        return tfs_err(rc, "open of '%s' failed", key);
    return rc;
}

/* Make each missing directory of dir, one component at a time. */
static int posix_mkdirs(struct posix_priv *p, char *dir)
{
    int pfd = posix_openat(p->root_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    char *c = dir;

    while (pfd >= 0) {
        char *end = strchrnul(c, '/');
        char save = *end;
        int fd;

        *end = '\0';
        /* c is one name in pfd, which was itself resolved beneath root. */
        if (mkdirat(pfd, c, 0755) < 0 && errno != EEXIST)
            fd = -errno;
        else
            fd = posix_openat(p->root_fd, dir, O_RDONLY | O_DIRECTORY, 0);
        *end = save;
        close(pfd);
        pfd = fd;
        if (save == '\0')
            break;
        c = end + 1;
    }
    return pfd;
}

/*
 * Open the directory that holds key (creating missing directories when
 * create) for reading and fsync; *base points into key at the last name.
 */
static int posix_open_parent(struct posix_priv *p, const char *key,
                             bool create, const char **base)
{
    const char *slash = strrchr(key, '/');
    char *dir;
    int fd;

    *base = slash ? slash + 1 : key;
    if (slash == NULL)
        return posix_openat(p->root_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    dir = tfs_strndup(key, (size_t)(slash - key));
    if (dir == NULL)
        return -ENOMEM;
    fd = posix_openat(p->root_fd, dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd == -ENOENT && create)
        fd = posix_mkdirs(p, dir);
    tfs_free(dir);
    return fd;
}

static void posix_fill_stat(struct tfs_stat *out, const struct stat *sb)
{
    out->size = (uint64_t)sb->st_size;
    out->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 +
                    sb->st_mtim.tv_nsec;
    tfs_version_from_file(out, out->size, out->mtime_ns,
                          (uint64_t)sb->st_ino,
                          (int64_t)sb->st_ctim.tv_sec * 1000000000 +
                              sb->st_ctim.tv_nsec);
}

/* ---- open / close ---- */

static int posix_open(struct tfs_store *st, const char *location)
{
    struct posix_priv *p = tfs_store_priv(st);
    const char *path = location[0] ? location : ".";
    struct stat sb;
    int rc;

    p->fsync = true;
    rc = tfs_store_opt_bool(st, "fsync", &p->fsync);
    if (rc < 0)
        return rc;
    p->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (p->root_fd < 0)
        return tfs_err(-errno, "store root %s: %s", path, strerror(errno));
    if (fstat(p->root_fd, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        close(p->root_fd);
        return tfs_err(-ENOTDIR, "store root %s is not a directory", path);
    }
    p->root = realpath(path, NULL);
    p->ident = p->root ? tfs_malloc(strlen(p->root) + 8) : NULL;
    if (p->ident == NULL) {
        free(p->root);
        close(p->root_fd);
        return -ENOMEM;
    }
    snprintf(p->ident, strlen(p->root) + 8, "file://%s", p->root);
    return 0;
}

static const char *posix_identity(struct tfs_store *st)
{
    struct posix_priv *p = tfs_store_priv(st);

    return p->ident;
}

static void posix_close(struct tfs_store *st)
{
    struct posix_priv *p = tfs_store_priv(st);

    close(p->root_fd);
    free(p->root);                      /* from realpath(): libc memory */
    tfs_free(p->ident);
}

/* ---- read side ---- */

static int posix_stat(struct tfs_store *st, const char *key,
                      struct tfs_stat *out)
{
    struct posix_priv *p = tfs_store_priv(st);
    struct stat sb;
    int fd = posix_open_key(p, key, O_PATH);
    int rc = 0;

    if (fd < 0)
        return fd;
    if (fstat(fd, &sb) < 0)
        rc = -errno;
    else if (S_ISDIR(sb.st_mode))
        rc = tfs_err(-EISDIR, "key '%s' is a directory", key);
    else if (!S_ISREG(sb.st_mode))
        rc = tfs_err(-EINVAL, "key '%s' is not a regular file", key);
    else
        posix_fill_stat(out, &sb);
    close(fd);
    return rc;
}

/*
 * A write that raced the pread of a pinned read shows in the version
 * (ctime moves on every write): report it as a change, never as bytes of
 * the pinned version.
 */
static int posix_read_unchanged(int fd, const char *key,
                                const struct tfs_stat *before)
{
    struct tfs_stat now;
    struct stat sb;

    if (fstat(fd, &sb) < 0)
        return tfs_err(-errno, "fstat of '%s' failed", key);
    posix_fill_stat(&now, &sb);
    if (strcmp(now.version, before->version) != 0)
        return tfs_err(TFS_ECHANGED, "key '%s' changed while being read "
                       "(version %s, then %s)", key, before->version,
                       now.version);
    return 0;
}

static int posix_read(struct tfs_store *st, const char *key, void *buf,
                      size_t len, uint64_t off, const char *if_version,
                      size_t *nread)
{
    struct posix_priv *p = tfs_store_priv(st);
    struct tfs_stat cur;
    struct stat sb;
    int fd;
    int rc;

    tfs_waiting();                      /* a shared file system may */
    fd = posix_open_key(p, key, O_RDONLY);
    if (fd < 0)
        return fd == -EISDIR ? tfs_err(fd, "key '%s' is a directory", key)
                             : fd;
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        goto out_close;
    }
    if (S_ISDIR(sb.st_mode)) {
        rc = tfs_err(-EISDIR, "key '%s' is a directory", key);
        goto out_close;
    }
    posix_fill_stat(&cur, &sb);
    if (if_version != NULL && strcmp(if_version, cur.version) != 0) {
        rc = tfs_err(TFS_ECHANGED, "key '%s' is now version %s, not %s",
                     key, cur.version, if_version);
        goto out_close;
    }
    rc = tfs_pread_full(fd, buf, len, off, nread);
    if (rc < 0)
        tfs_errdetail_set("read of '%s' failed", key);
    if (rc == 0 && if_version != NULL)
        rc = posix_read_unchanged(fd, key, &cur);
out_close:
    close(fd);
    return rc;
}

/* ---- listing ---- */

struct posix_dirent {
    char       *sortkey;                /* name, plus '/' for directories */
    bool        is_dir;
    struct stat sb;                     /* of the file, links followed */
};

struct posix_lister {
    struct posix_priv    *p;
    const char           *prefix;
    const char           *delim;        /* NULL: no roll-up */
    const char           *token;        /* emit only keys after this */
    size_t                max;
    struct tfs_list_page *page;
    size_t                cap_entries;
    size_t                cap_prefixes;
    const char           *last;         /* last key or prefix emitted */
    bool                  full;         /* page complete, more to come */
};

static int posix_dirent_cmp(const void *a, const void *b)
{
    const struct posix_dirent *x = a;
    const struct posix_dirent *y = b;

    return strcmp(x->sortkey, y->sortkey);
}

static bool str_starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Room for one more item; sets ls->full when the page is complete. */
static bool posix_list_room(struct posix_lister *ls)
{
    struct tfs_list_page *pg = ls->page;

    if (ls->full)
        return false;
    if (pg->n_entries + pg->n_prefixes < ls->max)
        return true;
    ls->full = true;
    return false;
}

/* Emit the common prefix cp[0..len), once, if it lies after the token. */
static int posix_emit_prefix(struct posix_lister *ls, const char *cp,
                             size_t len)
{
    struct tfs_list_page *pg = ls->page;
    char *s;

    s = tfs_strndup(cp, len);
    if (s == NULL)
        return -ENOMEM;
    if ((ls->last != NULL && strcmp(ls->last, s) == 0) ||
        (ls->token != NULL && strcmp(s, ls->token) <= 0) ||
        !posix_list_room(ls)) {
        tfs_free(s);
        return 0;
    }
    if (pg->n_prefixes == ls->cap_prefixes) {
        size_t cap = ls->cap_prefixes ? ls->cap_prefixes * 2 : 16;
        char **v = tfs_realloc(pg->prefixes, cap * sizeof(*v));
        if (v == NULL) {
            tfs_free(s);
            return -ENOMEM;
        }
        pg->prefixes = v;
        ls->cap_prefixes = cap;
    }
    pg->prefixes[pg->n_prefixes++] = s;
    ls->last = s;
    return 0;
}

static int posix_emit_key(struct posix_lister *ls, const char *key,
                          const struct stat *sb)
{
    struct tfs_list_page *pg = ls->page;
    struct tfs_list_entry *e;

    if (ls->token != NULL && strcmp(key, ls->token) <= 0)
        return 0;
    if (!posix_list_room(ls))
        return 0;
    if (pg->n_entries == ls->cap_entries) {
        size_t cap = ls->cap_entries ? ls->cap_entries * 2 : 64;
        e = tfs_realloc(pg->entries, cap * sizeof(*e));
        if (e == NULL)
            return -ENOMEM;
        pg->entries = e;
        ls->cap_entries = cap;
    }
    e = &pg->entries[pg->n_entries];
    e->key = tfs_strdup(key);
    if (e->key == NULL)
        return -ENOMEM;
    posix_fill_stat(&e->st, sb);
    pg->n_entries++;
    ls->last = e->key;
    return 0;
}

static void posix_dirents_free(struct posix_dirent *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tfs_free(v[i].sortkey);
    tfs_free(v);
}

/*
 * Stat entry name of directory dir (dfd): links are followed only when
 * their target lies beneath the root, so a listing reveals nothing outside.
 */
static int posix_stat_dirent(struct posix_priv *p, int dfd, const char *dir,
                             const struct dirent *de, struct stat *sb)
{
    struct tfs_buf path;
    int fd;
    int rc;

    if (de->d_type != DT_LNK && de->d_type != DT_UNKNOWN)
        return fstatat(dfd, de->d_name, sb, AT_SYMLINK_NOFOLLOW) < 0
                   ? -errno : 0;
    tfs_buf_init(&path, 0);
    rc = tfs_buf_puts(&path, dir);
    if (rc == 0)
        rc = tfs_buf_puts(&path, de->d_name);
    fd = rc < 0 ? rc : posix_openat(p->root_fd, tfs_buf_str(&path), O_PATH,
                                    0);
    tfs_buf_cleanup(&path);
    if (fd < 0)
        return fd;
    rc = fstat(fd, sb) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Add one directory entry to the growing array *v. */
static int posix_dirent_add(struct posix_dirent **v, size_t *n, size_t *cap,
                            const char *name, const struct stat *sb)
{
    size_t len = strlen(name);
    struct posix_dirent *e;

    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 32;
        e = tfs_realloc(*v, ncap * sizeof(*e));
        if (e == NULL)
            return -ENOMEM;
        *v = e;
        *cap = ncap;
    }
    e = &(*v)[*n];
    e->is_dir = S_ISDIR(sb->st_mode);
    e->sb = *sb;
    e->sortkey = tfs_malloc(len + 2);
    if (e->sortkey == NULL)
        return -ENOMEM;
    memcpy(e->sortkey, name, len);
    e->sortkey[len] = '/';
    e->sortkey[len + (e->is_dir ? 1 : 0)] = '\0';
    (*n)++;
    return 0;
}

/* Read the files and directories of dir (dfd, consumed), sorted. */
static int posix_read_dir(struct posix_priv *p, int dfd, const char *dir,
                          struct posix_dirent **out, size_t *n_out)
{
    struct posix_dirent *v = NULL;
    size_t n = 0;
    size_t cap = 0;
    struct dirent *de;
    DIR *d = fdopendir(dfd);
    int rc = 0;

    if (d == NULL) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        struct stat sb;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            str_starts(de->d_name, POSIX_TMP_PREFIX))
            continue;
        if (posix_stat_dirent(p, dirfd(d), dir, de, &sb) < 0)
            continue;                   /* vanished, dangling or outside */
        if (S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))
            rc = posix_dirent_add(&v, &n, &cap, de->d_name, &sb);
    }
    if (rc == 0 && de == NULL && errno != 0)
        rc = -errno;
    closedir(d);
    if (rc < 0) {
        posix_dirents_free(v, n);
        return rc;
    }
    if (n > 1)
        qsort(v, n, sizeof(*v), posix_dirent_cmp);
    *out = v;
    *n_out = n;
    return 0;
}

static int posix_list_dir(struct posix_lister *ls, const char *dir);

/* One entry; full is its key (directories: with a trailing '/'). */
static int posix_list_entry(struct posix_lister *ls,
                            const struct posix_dirent *e, const char *full)
{
    size_t plen = strlen(ls->prefix);
    const char *d;

    if (!str_starts(full, ls->prefix) && !str_starts(ls->prefix, full))
        return 0;
    if (!e->is_dir) {
        if (ls->delim != NULL && str_starts(full, ls->prefix)) {
            d = strstr(full + plen, ls->delim);
            if (d != NULL)
                return posix_emit_prefix(ls, full, (size_t)(d - full) +
                                                   strlen(ls->delim));
        }
        return str_starts(full, ls->prefix)
                   ? posix_emit_key(ls, full, &e->sb) : 0;
    }
    /* A directory rolls up without a descent when the delimiter is '/'. */
    if (ls->delim != NULL && strcmp(ls->delim, "/") == 0 &&
        strlen(full) > plen)
        return posix_emit_prefix(ls, full, strlen(full));
    /* Skip subtrees that lie wholly before the token. */
    if (ls->token != NULL && strcmp(full, ls->token) < 0 &&
        !str_starts(ls->token, full))
        return 0;
    return posix_list_dir(ls, full);
}

/* Walk directory dir ("" for the root, else "a/b/") in key order. */
static int posix_list_dir(struct posix_lister *ls, const char *dir)
{
    struct posix_dirent *v = NULL;
    struct tfs_buf full;
    size_t n = 0;
    int dfd;
    int rc;

    dfd = posix_openat(ls->p->root_fd, dir[0] ? dir : ".",
                       O_RDONLY | O_DIRECTORY, 0);
    if (dfd == -ENOENT || dfd == -ENOTDIR)
        return 0;                       /* nothing under this prefix */
    if (dfd < 0)
        return dfd;
    rc = posix_read_dir(ls->p, dfd, dir, &v, &n);
    if (rc < 0)
        return rc;
    tfs_buf_init(&full, 0);
    for (size_t i = 0; i < n && rc == 0 && !ls->full; i++) {
        tfs_buf_reset(&full);
        rc = tfs_buf_puts(&full, dir);
        if (rc == 0)
            rc = tfs_buf_puts(&full, v[i].sortkey);
        if (rc == 0)
            rc = posix_list_entry(ls, &v[i], tfs_buf_str(&full));
    }
    tfs_buf_cleanup(&full);
    posix_dirents_free(v, n);
    return rc;
}

static int posix_list(struct tfs_store *st, const char *prefix,
                      const char *delim, const char *token, size_t max_keys,
                      struct tfs_list_page *page)
{
    struct posix_lister ls = {
        .p = tfs_store_priv(st),
        .prefix = prefix,
        .delim = delim,
        .token = token,
        .max = max_keys,
        .page = page,
    };
    const char *slash = strrchr(prefix, '/');
    char *dir;
    int rc = 0;

    /* Start at the directory part of the prefix ("a/b/" of "a/b/fo"). */
    dir = tfs_strndup(prefix, slash ? (size_t)(slash - prefix) + 1 : 0);
    if (dir == NULL)
        return -ENOMEM;
    if (slash != NULL) {
        dir[slash - prefix] = '\0';
        rc = posix_check_key(dir);
        dir[slash - prefix] = '/';
    }
    if (rc == 0)
        rc = posix_list_dir(&ls, dir);
    tfs_free(dir);
    if (rc == 0 && ls.full) {
        page->next_token = tfs_strdup(ls.last);
        if (page->next_token == NULL)
            rc = -ENOMEM;
    }
    return rc;
}

/* ---- write side ---- */

/* Copy the source into fd: copy_file_range from a file, else write(). */
static int posix_copy_in(int fd, const struct tfs_source *src)
{
    char *chunk;
    uint64_t done = 0;
    int rc = 0;

    while (src->buf == NULL && done < src->len) {
        loff_t in_off = (loff_t)(src->off + done);
        ssize_t n = copy_file_range(src->fd, &in_off, fd, NULL,
                                    src->len - done, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;                      /* unsupported here: fall back */
        done += (uint64_t)n;
    }
    if (done == src->len)
        return 0;
    chunk = tfs_malloc(1 << 20);
    if (chunk == NULL)
        return -ENOMEM;
    while (rc == 0 && done < src->len) {
        size_t len = (size_t)TFS_MIN(src->len - done, (uint64_t)1 << 20);
        const char *p = chunk;
        if (src->buf != NULL)
            p = (const char *)src->buf + done;
        else
            rc = tfs_source_read(src, chunk, len, done);
        for (size_t w = 0; rc == 0 && w < len;) {
            ssize_t n = write(fd, p + w, len - w);
            if (n < 0 && errno != EINTR)
                rc = -errno;
            else if (n > 0)
                w += (size_t)n;
        }
        done += len;
    }
    tfs_free(chunk);
    return rc;
}

/*
 * Write src to a new temp file in dfd; on success *tmp names it and *fdp
 * is its open descriptor (the caller stats it after the rename, which
 * moves its ctime, part of the version).
 */
static int posix_write_tmp(struct posix_priv *p, int dfd,
                           const struct tfs_source *src, char *tmp,
                           size_t tmp_len, int *fdp)
{
    int fd;
    int rc;

    snprintf(tmp, tmp_len, POSIX_TMP_PREFIX "%016llx",
             (unsigned long long)tfs_rand_u64());
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    rc = posix_copy_in(fd, src);
    if (rc == 0 && p->fsync && fsync(fd) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        unlinkat(dfd, tmp, 0);
        return rc;
    }
    *fdp = fd;
    return 0;
}

static int posix_put(struct tfs_store *st, const char *key,
                     const struct tfs_source *src, struct tfs_stat *out)
{
    struct posix_priv *p = tfs_store_priv(st);
    char tmp[64];
    const char *base;
    struct stat sb;
    int fd = -1;
    int dfd;
    int rc = posix_check_key(key);

    if (rc < 0)
        return rc;
    dfd = posix_open_parent(p, key, true, &base);
    if (dfd < 0)
        return tfs_err(dfd, "cannot create the directory of '%s'", key);
    rc = posix_write_tmp(p, dfd, src, tmp, sizeof(tmp), &fd);
    if (rc < 0) {
        tfs_errdetail_set("write of '%s' failed", key);
        goto out_close;
    }
    if (renameat(dfd, tmp, dfd, base) < 0) {
        rc = tfs_err(-errno, "rename into '%s' failed", key);
        unlinkat(dfd, tmp, 0);
        goto out_close;
    }
    if (p->fsync && fsync(dfd) < 0) {
        rc = tfs_err(-errno, "fsync of the directory of '%s' failed", key);
        goto out_close;
    }
    if (out != NULL && fstat(fd, &sb) < 0)
        rc = tfs_err(-errno, "fstat of '%s' failed", key);
    else if (out != NULL)
        posix_fill_stat(out, &sb);
out_close:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

static int posix_remove(struct tfs_store *st, const char *key)
{
    struct posix_priv *p = tfs_store_priv(st);
    const char *base;
    int dfd;
    int rc = posix_check_key(key);

    if (rc < 0)
        return rc;
    dfd = posix_open_parent(p, key, false, &base);
    if (dfd == -ENOENT || dfd == -ENOTDIR)
        return 0;
    if (dfd < 0)
        return tfs_err(dfd, "cannot open the directory of '%s'", key);
    if (unlinkat(dfd, base, 0) < 0 && errno != ENOENT)
        rc = tfs_err(errno == EISDIR ? -EISDIR : -errno,
                     "remove of '%s' failed", key);
    else if (p->fsync)
        fsync(dfd);
    close(dfd);
    return rc;
}

static int posix_copy(struct tfs_store *st, const char *src_key,
                      const char *dst_key)
{
    struct posix_priv *p = tfs_store_priv(st);
    struct tfs_source src = {.fd = -1};
    struct stat sb;
    int rc;

    src.fd = posix_open_key(p, src_key, O_RDONLY);
    if (src.fd < 0)
        return src.fd;
    if (fstat(src.fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        rc = tfs_err(-EINVAL, "'%s' is not a regular file", src_key);
        goto out_close;
    }
    src.len = (uint64_t)sb.st_size;
    rc = posix_put(st, dst_key, &src, NULL);
out_close:
    close(src.fd);
    return rc;
}

static int posix_rename(struct tfs_store *st, const char *src_key,
                        const char *dst_key)
{
    struct posix_priv *p = tfs_store_priv(st);
    const char *src_base;
    const char *dst_base;
    int sfd;
    int dfd;
    int rc = posix_check_key(src_key);

    if (rc == 0)
        rc = posix_check_key(dst_key);
    if (rc < 0)
        return rc;
    sfd = posix_open_parent(p, src_key, false, &src_base);
    if (sfd < 0)
        return tfs_err(sfd == -ENOTDIR ? -ENOENT : sfd, "no such key '%s'",
                       src_key);
    dfd = posix_open_parent(p, dst_key, true, &dst_base);
    if (dfd < 0) {
        rc = tfs_err(dfd, "cannot create the directory of '%s'", dst_key);
        goto out_close_src;
    }
    if (renameat(sfd, src_base, dfd, dst_base) < 0)
        rc = tfs_err(-errno, "rename of '%s' to '%s' failed", src_key,
                     dst_key);
    if (rc == 0 && p->fsync) {
        fsync(dfd);
        fsync(sfd);
    }
    close(dfd);
out_close_src:
    close(sfd);
    return rc;
}

const struct tfs_store_ops tfs_posix_ops = {
    .version   = TFS_STORE_OPS_VERSION,
    .scheme    = "file",
    .priv_size = sizeof(struct posix_priv),
    .caps      = TFS_SCAP_RANGE | TFS_SCAP_RENAME | TFS_SCAP_COPY |
                 TFS_SCAP_DIRS,
    .open      = posix_open,
    .close     = posix_close,
    .stat      = posix_stat,
    .read      = posix_read,
    .list      = posix_list,
    .put       = posix_put,
    .remove    = posix_remove,
    .copy      = posix_copy,
    .rename    = posix_rename,
    .identity  = posix_identity,
};
