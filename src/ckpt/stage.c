/* SPDX-License-Identifier: MIT */
/*
 * Staging files: one rank's shards on local disk, written by the writer
 * (writer.c) before anything leaves the node.
 *
 * A shard is first written as NAME.tmp with its tensors at their final
 * offsets (small ones gathered into large writes, large ones written
 * straight from the caller's memory) and a hole where the header goes,
 * every tensor and the whole buffer hashed from the caller's memory on
 * the way: that copy is all the caller waits for.  Finishing it writes
 * the header with the checksums, fsyncs, renames NAME.tmp to NAME and
 * fsyncs the directory (Redis's rdbSave, SQLite's dirSync).  It used to
 * read the data back to hash it, which held each upload 0.4-0.6 s
 * behind the save (bench/ckpt-nodes) and cost a pass over the bytes.
 * After a commit each rank keeps its newest staging_keep steps, for
 * restores on this node.
 *
 * The next save recycles those files: renamed to its tmp names and
 * rewritten in place.  Their pages are still in the page cache, and
 * rewriting cached pages is many times cheaper than filling new ones
 * (0.3 s against 5-9 s for 2 GB on the test machines), which is most of
 * what the caller waits for.  Until the new save commits, a restore on
 * this node reads the previous checkpoint from the store (the checksums
 * catch a reader that still holds a recycled file open).
 *
 * A file with no older one to recycle (the first save of a run) would
 * fill that many new page-cache pages while the caller waits.  Its data
 * goes to disk with O_DIRECT instead, through one aligned bounce buffer:
 * on the test VM, bench/ckpt's 2 GiB first save blocked for 0.7 s against
 * 3.4 s buffered.  The upload reads it back through the page cache, so
 * the next save finds its recycled file cached.  Where O_DIRECT is
 * refused (tmpfs) the file is written through the page cache as before.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "ckpt/ckpt_int.h"

#define WR_AGG_CAP (4u << 20)           /* bytes gathered before a write */
#define WR_AGG_SMALL (1u << 20)         /* tensors below this are gathered */
#define WR_DIRECT_MIN (1u << 20)        /* less data than this: buffered */
#define WR_DIRECT_BUF (8u << 20)        /* the O_DIRECT bounce buffer */
#define WR_DIRECT_ALIGN 4096u           /* offsets and lengths, O_DIRECT */
#define WR_HASH_PIECE (256u << 10)      /* hashed by both states in turn */

static void wr_entry(const struct wr_item *it, struct tfs_ckpt_st_entry *e)
{
    e->name = it->name;
    e->dtype = it->dtype;
    e->ndim = it->ndim;
    e->shape = it->shape;
    e->offsets = it->sliced ? it->offsets : NULL;
    e->begin = it->begin;
    e->end = it->end;
    e->xxh3 = it->xxh3;
}

/* Encode file f's header into b, from its items' current checksums. */
int tfs_ckpt_stage_header(const struct tfs_ckpt_writer *w,
                          const struct wr_file *f, struct tfs_buf *b)
{
    struct tfs_ckpt_st_entry *e = tfs_calloc(f->n_items + 1, sizeof(*e));
    int rc;

    if (e == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < f->n_items; i++)
        wr_entry(&w->items[f->items[i]], &e[i]);
    tfs_buf_reset(b);
    rc = tfs_ckpt_st_encode(b, e, f->n_items);
    tfs_free(e);
    return rc;
}

/* The last component of a staging path (the name in w->stage_fd). */
static const char *stage_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash != NULL ? slash + 1 : path;
}

/* Read all of [off, off+len); -EIO at an early end. */
static int wr_pread(int fd, void *buf, size_t len, uint64_t off)
{
    size_t n;
    int rc = tfs_pread_full(fd, buf, len, off, &n);

    return rc < 0 ? rc : n == len ? 0 : -EIO;
}

/*
 * Write the data of fresh file f (its fd open, empty) with O_DIRECT: from
 * the aligned offset at or below the end of the header (zeros up to it;
 * the header overwrites them at finish) to the end of the last tensor,
 * padded with zeros to an aligned length and cut back after.  1 when
 * O_DIRECT is refused here, before anything was written: the caller
 * writes the file through the page cache.
 */
static int stage_direct(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    uint64_t pos = f->header_size & ~(uint64_t)(WR_DIRECT_ALIGN - 1);
    size_t fill = (size_t)(f->header_size - pos);
    bool wrote = false;
    char *buf;
    int fd;
    int rc = 0;

    fd = openat(w->stage_fd, stage_name(f->tmp),
                O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == EINVAL ? 1 : tfs_err(-errno, "cannot open %s",
                                              f->tmp);
    buf = tfs_malloc_faulted(WR_DIRECT_BUF);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    memset(buf, 0, fill);
    for (size_t i = 0; i <= f->n_items && rc == 0; i++) {
        const struct wr_item *it = i < f->n_items ? &w->items[f->items[i]]
                                                  : NULL;
        const char *src = it != NULL ? it->data : NULL;
        size_t left = it != NULL ? it->len : 0;

        while (rc == 0 && (left > 0 || (it == NULL && fill > 0))) {
            size_t n = TFS_MIN(left, WR_DIRECT_BUF - fill);
            size_t out;

            if (n > 0) {
                memcpy(buf + fill, src, n);
                fill += n;
                src += n;
                left -= n;
            }
            if (fill < WR_DIRECT_BUF && it != NULL)
                break;                  /* the next tensor fills on */
            out = (fill + WR_DIRECT_ALIGN - 1) &
                  ~(size_t)(WR_DIRECT_ALIGN - 1);
            memset(buf + fill, 0, out - fill);
            rc = tfs_pwrite_all(fd, buf, out, pos);
            if (rc == -EINVAL && !wrote) {
                rc = 1;                 /* no O_DIRECT on this file system */
                break;
            }
            wrote = true;
            pos += out;
            fill = 0;
        }
    }
    tfs_free_faulted(buf);
    close(fd);
    if (rc < 0)
        return tfs_err(rc, "write to %s failed: %s", f->tmp, strerror(-rc));
    if (rc == 0 && ftruncate(f->fd, (off_t)f->size) < 0)
        return tfs_err(-errno, "cannot resize %s", f->tmp);
    if (rc == 0)
        f->direct = true;
    return rc;
}

/*
 * Open f's tmp file in the (private, checked) step directory, never
 * through a symlink: a recycled file is ours, renamed there by
 * stage_recycle_dir (0600 again, in case an older version made it 0644);
 * a new one is created 0600 with O_EXCL after removing any stale name.
 */
static int stage_open_tmp(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    const char *name = stage_name(f->tmp);

    if (f->recycled) {
        f->fd = openat(w->stage_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (f->fd >= 0 && fchmod(f->fd, 0600) < 0)
            return tfs_err(-errno, "cannot chmod %s", f->tmp);
    } else {
        if (unlinkat(w->stage_fd, name, 0) < 0 && errno != ENOENT)
            return tfs_err(-errno, "cannot remove the stale %s", f->tmp);
        f->fd = openat(w->stage_fd, name, O_RDWR | O_CREAT | O_EXCL |
                                              O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (f->fd < 0)
        return tfs_err(-errno, "cannot create %s", f->tmp);
    return 0;
}

/*
 * Hash every tensor of f and its whole data buffer from the caller's
 * memory, which the writer borrows until save() returns: the checksums
 * describe the caller's tensors, so whatever the disk or the page cache
 * does to the staged copy afterwards is caught by every later check
 * (recovery, the reader, the peer), and finishing needs no read-back.
 * Both states take each piece while it is in the CPU's cache.
 */
static void wr_hash_items(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    XXH3_state_t data;
    XXH3_state_t one;

    XXH3_64bits_reset(&data);
    for (size_t i = 0; i < f->n_items; i++) {
        struct wr_item *it = &w->items[f->items[i]];
        const char *p = it->data;

        XXH3_64bits_reset(&one);
        for (size_t done = 0; done < it->len;) {
            size_t n = TFS_MIN(it->len - done, (size_t)WR_HASH_PIECE);

            XXH3_64bits_update(&one, p + done, n);
            XXH3_64bits_update(&data, p + done, n);
            done += n;
        }
        it->xxh3 = XXH3_64bits_digest(&one);
    }
    f->data_xxh3 = XXH3_64bits_digest(&data);
}

/*
 * Copy file f's tensors into its tmp file at their final offsets: a fresh
 * file of some size with O_DIRECT (above); otherwise through the page
 * cache, small tensors gathered into one buffer (they are adjacent in the
 * file), large ones written from the caller's memory.
 */
int tfs_ckpt_stage_file(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    uint64_t off = f->header_size;
    uint64_t agg_off = off;
    size_t agg_len = 0;
    char *agg;
    int rc = stage_open_tmp(w, f);

    if (rc < 0)
        return rc;
    wr_hash_items(w, f);
    /* Every byte of a recycled file is rewritten: data now, header at
     * finish; only its length needs setting. */
    if (f->recycled && ftruncate(f->fd, (off_t)f->size) < 0)
        return tfs_err(-errno, "cannot resize %s", f->tmp);
    if (!f->recycled && f->size - f->header_size >= WR_DIRECT_MIN) {
        rc = stage_direct(w, f);
        if (rc <= 0)
            return rc;
        rc = 0;
    }
    agg = tfs_malloc(WR_AGG_CAP);
    if (agg == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < f->n_items && rc == 0; i++) {
        const struct wr_item *it = &w->items[f->items[i]];

        if (it->len >= WR_AGG_SMALL || agg_len + it->len > WR_AGG_CAP) {
            rc = tfs_pwrite_all(f->fd, agg, agg_len, agg_off);
            agg_len = 0;
        }
        if (rc == 0 && it->len >= WR_AGG_SMALL) {
            rc = tfs_pwrite_all(f->fd, it->data, it->len, off);
        } else if (rc == 0 && it->len > 0) {
            if (agg_len == 0)
                agg_off = off;
            memcpy(agg + agg_len, it->data, it->len);
            agg_len += it->len;
        }
        off += it->len;
    }
    if (rc == 0)
        rc = tfs_pwrite_all(f->fd, agg, agg_len, agg_off);
    if (rc < 0)
        rc = tfs_err(rc, "write to %s failed: %s", f->tmp, strerror(-rc));
    tfs_free(agg);
    return rc;
}

/*
 * Finish a staged file: the real header (with the checksums taken while
 * staging), fsync, rename into place, fsync the directory.
 */
int tfs_ckpt_stage_finish(struct tfs_ckpt_writer *w, struct wr_file *f)
{
    struct tfs_buf hdr;
    int rc;

    if (f->finished)
        return 0;
    tfs_buf_init(&hdr, TFS_CKPT_ST_MAX_HEADER);
    rc = tfs_ckpt_stage_header(w, f, &hdr);
    if (rc == 0 && hdr.len != f->header_size)
        rc = tfs_err(-EIO, "%s: header changed size", f->tmp);
    if (rc == 0) {
        rc = tfs_pwrite_all(f->fd, hdr.p, hdr.len, 0);
        if (rc < 0)
            rc = tfs_err(rc, "write to %s failed", f->tmp);
    }
    if (rc == 0) {
        f->header_xxh3 = XXH3_64bits(hdr.p, hdr.len);
        if (fsync(f->fd) < 0)
            rc = tfs_err(-errno, "fsync of %s failed", f->tmp);
    }
    if (rc == 0 && renameat(w->stage_fd, stage_name(f->tmp), w->stage_fd,
                            stage_name(f->path)) < 0)
        rc = tfs_err(-errno, "rename of %s failed", f->tmp);
    if (rc == 0 && fsync(w->stage_fd) < 0)
        rc = tfs_err(-errno, "fsync of %s failed", w->stage_step);
    if (rc == 0) {
        close(f->fd);
        f->fd = -1;
        f->finished = true;
    }
    tfs_buf_cleanup(&hdr);
    return rc;
}

/* Whether name is one of this rank's shard files or their tmp files. */
static bool wr_is_mine(const struct tfs_ckpt_writer *w, const char *name)
{
    char prefix[32];

    snprintf(prefix, sizeof(prefix), "model-rank%05u-", w->rank);
    return strncmp(name, prefix, strlen(prefix)) == 0;
}

/* Whether name is this rank's local manifest (or its tmp file). */
static bool wr_is_manifest(const struct tfs_ckpt_writer *w, const char *name)
{
    char m[32];

    snprintf(m, sizeof(m), TFS_CKPT_LOCAL_FMT, w->rank);
    return strncmp(name, m, strlen(m)) == 0;
}

void tfs_ckpt_stage_unlink_manifest(struct tfs_ckpt_writer *w, int dfd)
{
    char m[40];

    snprintf(m, sizeof(m), TFS_CKPT_LOCAL_FMT, w->rank);
    (void)unlinkat(dfd, m, 0);
    snprintf(m, sizeof(m), TFS_CKPT_LOCAL_FMT ".tmp", w->rank);
    (void)unlinkat(dfd, m, 0);
}

int tfs_ckpt_stage_manifest(struct tfs_ckpt_writer *w,
                            const struct tfs_ckpt_marker *m)
{
    char name[32];
    char tmp[40];
    struct tfs_buf b;
    int fd;
    int rc;

    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, w->rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    tfs_buf_init(&b, TFS_CKPT_JSON_MAX);
    rc = tfs_ckpt_marker_write(&b, m);
    (void)unlinkat(w->stage_fd, tmp, 0);
    fd = rc < 0 ? -1 : openat(w->stage_fd, tmp, O_WRONLY | O_CREAT | O_EXCL |
                                                    O_NOFOLLOW | O_CLOEXEC,
                              0600);
    if (rc == 0 && fd < 0)
        rc = tfs_err(-errno, "cannot create %s/%s", w->stage_step, tmp);
    if (rc == 0 && (rc = tfs_pwrite_all(fd, b.p, b.len, 0)) < 0)
        rc = tfs_err(rc, "write to %s/%s failed", w->stage_step, tmp);
    if (rc == 0 && fsync(fd) < 0)
        rc = tfs_err(-errno, "fsync of %s/%s failed", w->stage_step, tmp);
    if (fd >= 0)
        close(fd);
    if (rc == 0 && renameat(w->stage_fd, tmp, w->stage_fd, name) < 0)
        rc = tfs_err(-errno, "rename of %s/%s failed", w->stage_step, tmp);
    if (rc == 0 && fsync(w->stage_fd) < 0)
        rc = tfs_err(-errno, "fsync of %s failed", w->stage_step);
    if (rc < 0 && fd >= 0)
        (void)unlinkat(w->stage_fd, tmp, 0);
    tfs_buf_cleanup(&b);
    return rc;
}

/* Check one finished staging file against what the manifest says. */
static int stage_check_file(int dfd, const char *dir,
                            const struct tfs_ckpt_file_info *fi, char *chunk)
{
    XXH3_state_t h;
    struct stat sb;
    uint64_t pos = 0;
    int rc = 0;
    int fd = openat(dfd, fi->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return tfs_err(errno == ENOENT ? -ENOENT : -errno, "%s/%s: %s", dir,
                       fi->name, strerror(errno));
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size != fi->size || fi->header_size > fi->size)
        rc = tfs_err(TFS_ECORRUPT, "%s/%s: %lld bytes, the manifest says %"
                     PRIu64, dir, fi->name, (long long)sb.st_size, fi->size);
    XXH3_64bits_reset(&h);
    while (rc == 0 && pos < fi->size) {
        /* The header alone first, then the data in large chunks. */
        uint64_t end = pos < fi->header_size ? fi->header_size : fi->size;
        size_t n = (size_t)TFS_MIN(end - pos, (uint64_t)WR_AGG_CAP);

        rc = wr_pread(fd, chunk, n, pos);
        if (rc < 0) {
            rc = tfs_err(rc, "read of %s/%s failed", dir, fi->name);
            break;
        }
        XXH3_64bits_update(&h, chunk, n);
        pos += n;
        if (pos == fi->header_size) {
            if (XXH3_64bits_digest(&h) != fi->header_xxh3)
                rc = tfs_err(TFS_ECORRUPT, "%s/%s: header checksum "
                             "mismatch", dir, fi->name);
            XXH3_64bits_reset(&h);
        }
    }
    if (rc == 0 && XXH3_64bits_digest(&h) != fi->data_xxh3)
        rc = tfs_err(TFS_ECORRUPT, "%s/%s: data checksum mismatch", dir,
                     fi->name);
    close(fd);
    return rc;
}

/* Read the small file name in dfd whole (NUL-terminated, tfs_free). */
static int stage_slurp(int dfd, const char *name, char **out, size_t *len)
{
    struct stat sb;
    char *buf;
    int rc;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size > TFS_CKPT_JSON_MAX) {
        close(fd);
        return TFS_EFORMAT;
    }
    buf = tfs_malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    rc = wr_pread(fd, buf, (size_t)sb.st_size, 0);
    close(fd);
    if (rc < 0) {
        tfs_free(buf);
        return rc;
    }
    buf[sb.st_size] = '\0';
    *out = buf;
    *len = (size_t)sb.st_size;
    return 0;
}

int tfs_ckpt_stage_load_manifest(const char *dir, unsigned rank,
                                 struct tfs_ckpt_marker *out)
{
    char name[32];
    char *text = NULL;
    char *chunk = NULL;
    struct tfs_buf p;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    size_t len = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (dfd < 0)
        return tfs_err(-ENOENT, "%s: %s", dir, strerror(errno));
    snprintf(name, sizeof(name), TFS_CKPT_LOCAL_FMT, rank);
    tfs_buf_init(&p, 0);
    rc = tfs_buf_printf(&p, "%s/%s", dir, name);
    if (rc == 0)
        rc = stage_slurp(dfd, name, &text, &len);
    if (rc < 0 && rc != -ENOMEM)
        rc = tfs_err(rc, "%s: no finished local copy (%s)", tfs_buf_str(&p),
                     tfs_strerror(rc));
    if (rc == 0)
        rc = tfs_ckpt_marker_parse(text, len, tfs_buf_str(&p), out);
    if (rc == 0 && out->rank != rank)
        rc = tfs_err(TFS_EFORMAT, "%s: names rank %u", tfs_buf_str(&p),
                     out->rank);
    if (rc == 0 && (chunk = tfs_malloc(WR_AGG_CAP)) == NULL)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < out->n_files; i++)
        rc = stage_check_file(dfd, dir, &out->files[i], chunk);
    if (rc < 0)
        tfs_ckpt_marker_cleanup(out);
    tfs_free(chunk);
    tfs_free(text);
    tfs_buf_cleanup(&p);
    close(dfd);
    return rc;
}

/* Remove this rank's files in one staging step directory. */
static void wr_prune_dir(const struct tfs_ckpt_writer *w, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int dfd;

    if (d == NULL)
        return;
    dfd = dirfd(d);
    while ((e = readdir(d)) != NULL) {
        if (wr_is_mine(w, e->d_name) || wr_is_manifest(w, e->d_name))
            (void)unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
    (void)rmdir(dir);                   /* only if now empty */
}

static int wr_u64_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x > y ? -1 : x < y;
}

static int wr_u64_asc(const void *a, const void *b)
{
    return -wr_u64_desc(a, b);
}

/* The staging steps other than the one being written, oldest first; at
 * most max of them. */
static size_t stage_old_steps(const struct tfs_ckpt_writer *w, uint64_t *v,
                              size_t max)
{
    DIR *d = opendir(w->stage_ns);
    struct dirent *e;
    size_t n = 0;

    while (d != NULL && (e = readdir(d)) != NULL && n < max) {
        uint64_t s;

        if (tfs_ckpt_step_parse(e->d_name, strlen(e->d_name), &s) &&
            s != w->step)
            v[n++] = s;
    }
    if (d != NULL)
        closedir(d);
    qsort(v, n, sizeof(v[0]), wr_u64_asc);
    return n;
}

/* Hand this rank's files in dir to the files still without one. */
static void stage_recycle_dir(struct tfs_ckpt_writer *w, const char *dir,
                              size_t *next)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    struct tfs_buf from;

    /* The manifest goes first: it must never name a recycled file. */
    if (d != NULL)
        tfs_ckpt_stage_unlink_manifest(w, dirfd(d));
    tfs_buf_init(&from, 0);
    while (d != NULL && *next < w->n_files && (e = readdir(d)) != NULL) {
        struct wr_file *f = &w->files[*next];

        if (!wr_is_mine(w, e->d_name))
            continue;
        tfs_buf_reset(&from);
        if (tfs_buf_printf(&from, "%s/%s", dir, e->d_name) == 0 &&
            rename(tfs_buf_str(&from), f->tmp) == 0) {
            f->recycled = true;
            (*next)++;
        }
    }
    if (d != NULL)
        closedir(d);
    tfs_buf_cleanup(&from);
}

void tfs_ckpt_stage_recycle(struct tfs_ckpt_writer *w)
{
    uint64_t steps[256];
    size_t n = stage_old_steps(w, steps, TFS_ARRAY_LEN(steps));
    size_t next = 0;
    struct tfs_buf dir;

    tfs_buf_init(&dir, 0);
    for (size_t i = 0; i < n && next < w->n_files; i++) {
        char name[32];

        tfs_ckpt_step_name(name, sizeof(name), steps[i]);
        tfs_buf_reset(&dir);
        if (tfs_buf_printf(&dir, "%s/%s", w->stage_ns, name) < 0)
            break;
        stage_recycle_dir(w, tfs_buf_str(&dir), &next);
        (void)rmdir(tfs_buf_str(&dir));     /* only if now empty */
    }
    tfs_buf_cleanup(&dir);
}

/*
 * After a commit: keep this rank's staging copies of the newest
 * staging_keep steps up to this one, remove the others (and any older
 * leftovers of failed saves).
 */
void tfs_ckpt_stage_prune(struct tfs_ckpt_writer *w)
{
    DIR *d = opendir(w->stage_ns);
    uint64_t steps[1024];
    size_t n = 0;
    struct dirent *e;
    struct tfs_buf path;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && n < TFS_ARRAY_LEN(steps)) {
        uint64_t s;

        if (tfs_ckpt_step_parse(e->d_name, strlen(e->d_name), &s) &&
            s <= w->step)
            steps[n++] = s;
    }
    closedir(d);
    qsort(steps, n, sizeof(steps[0]), wr_u64_desc);
    tfs_buf_init(&path, 0);
    for (size_t i = w->staging_keep; i < n; i++) {
        char name[32];

        tfs_ckpt_step_name(name, sizeof(name), steps[i]);
        tfs_buf_reset(&path);
        if (tfs_buf_printf(&path, "%s/%s", w->stage_ns, name) == 0)
            wr_prune_dir(w, tfs_buf_str(&path));
    }
    tfs_buf_cleanup(&path);
}

/* Close and remove the staging files of a save that failed. */
void tfs_ckpt_stage_discard(struct tfs_ckpt_writer *w)
{
    for (size_t i = 0; i < w->n_files; i++) {
        if (w->files[i].fd >= 0)
            close(w->files[i].fd);
        w->files[i].fd = -1;
        if (w->files[i].tmp != NULL && w->stage_fd >= 0)
            (void)unlinkat(w->stage_fd, stage_name(w->files[i].tmp), 0);
    }
}
