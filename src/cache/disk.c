/* SPDX-License-Identifier: MIT */
/*
 * The disk tier: one file per block under CACHE_DIR/blocks/XX/ID, small
 * blocks packed as records into CACHE_DIR/blocks/packs/PPPPPPPP-GGGGGGGG
 * (below), the shared index (index.c) that bounds them, writer threads,
 * and the scan that rebuilds the index when the first process opens the
 * cache dir.
 *
 * Block file format (little-endian, field by field):
 *
 *   0   8  magic "TFSBLK1\n"
 *   8   4  header length H (bytes before the data)
 *   12  4  data length L
 *   16 16  block id
 *   32  8  block index in the object
 *   40  8  object size
 *   48  4  checksum chunk size C (65536)
 *   52  2  key length K
 *   54  1  version length V
 *   55  1  zero
 *   56  K  key, then V bytes of version
 *   ..  8 * ceil(L / C)  XXH3-64 of each data chunk
 *   ..     zeros, padding H to a multiple of 4096 (or none)
 *   H-8 8  XXH3-64 of every header byte before it
 *   H   L  data
 *
 * A block is written to ".tmp-*" and renamed into place, so a reader
 * never sees a half-written file under a block's name; the checksums
 * catch anything the disk or a crash mangled later.  Key and version are
 * compared too, so even a hash collision cannot serve the wrong object.
 *
 * A block whose data can go to disk with O_DIRECT (its buffer and length
 * page-aligned: every block of a large object but the last) gets the
 * padded header, so its data starts on a page, and is written and read
 * around the page cache.  Copying it through the page cache would fill
 * new page-cache pages with a second copy of what the RAM tier holds;
 * on the test VM that filling was a fifth of a cold read's CPU.  Other
 * blocks, and every block where O_DIRECT is refused, use the page cache.
 *
 * Packs.  A new file costs the file system an inode, and on a journal-
 * less ext4 that has freed many recently a new inode cost 0.3 ms of CPU
 * (a third of a cold 48 KiB file's; docs/performance-cold.md).  So a
 * block whose record (header + data) takes at most DISK_PACK_RECORD is
 * appended to this process's open pack instead: a file of at most
 * DISK_PACK_MAX bytes (DISK_PACK_SMALL in caches below DISK_PACK_BIG),
 * written by its owner only, never rewritten, its pages written out in
 * one go when the owner moves on to its next pack.
 *
 *   page 0:  magic "TFSPACK1", page size (le32, 4096), pack index (le32),
 *            generation (le32), zero (le32), salt (le64), zeros, and at
 *            4088 the XXH3-64 of the page's bytes before it
 *   then:    records, each starting on a multiple of DISK_UNIT (512):
 *            the block format above with its exact header, whose last 8
 *            bytes are the header's XXH3-64 xor the salt
 *
 * The index gives a record's place (pack, generation, unit) when it is
 * admitted; the owner writes it there and commits it.  A load reads and
 * checks it as it does a file (id, key, version, chunk sums, the salted
 * header sum), so a torn append is a miss, never served.  The rebuild
 * reads each pack record by record: where no valid header starts, it
 * tries the next unit, and the salt (random per pack, kept in
 * the index and the pack's first page) keeps the data of a record that
 * lost its header from passing for a header.  A pack leaves whole: the
 * index evicts it as one region or frees it when no entry names it, and
 * unlinks its file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/cache_int.h"
#include "cache/tinylfu.h"
#include "common/csum.h"
#include "common/bytes.h"
#include "tierfs/log.h"

#define DISK_MAGIC "TFSBLK1\n"
#define DISK_CHUNK 65536u
_Static_assert(DISK_CHUNK == TFS_CSUM_CHUNK,
               "a block file's chunk sums are its digest's (common/csum.h)");
#define DISK_FIXED 56u
#define DISK_QUEUE_MAX 64
/*
 * Writer threads.  One waits for the device on every block
 * (sync_file_range below) and fell behind a cold stream on the test VM:
 * its queue filled, blocks after it were never written, and a spent
 * block not on disk stays in RAM while the tier has room, so the RAM
 * tier grew to 400-580 MiB over two cold 1 GiB reads (64 MiB with two:
 * the spent window), every block of it fresh memory, and the next epoch
 * would have read the dropped blocks from the store again
 * (docs/performance-cold.md).  Two overlap one's wait with the other's
 * checksums; 0 writes dropped in the same reads.
 */
#define DISK_WRITERS 2
#define DISK_PAGE 4096u                 /* O_DIRECT alignment */
_Static_assert(DISK_PAGE == TFS_INDEX_PAGE, "a pack's first page");
#define DISK_UNIT TFS_INDEX_UNIT        /* pack records start on these */
#define DISK_PACK_MAGIC "TFSPACK1"
#define DISK_PACK_MAX (4u << 20)        /* a pack's bytes, at most, */
#define DISK_PACK_SMALL (1u << 20)      /* or this below DISK_PACK_BIG */
#define DISK_PACK_BIG (1ull << 30)
#define DISK_PACK_RECORD (128u << 10)   /* a packed record's extent, at most */
#define DISK_PACK_CACHE (64ull << 20)   /* no packs in smaller caches */
#define DISK_PACK_SCAN (16u << 20)      /* records the rebuild believes */
/*
 * A writer woken for a queue of small blocks waits this long for more
 * before it writes them, unless DISK_LINGER_BYTES or DISK_LINGER_JOBS
 * are queued (a large block is more than that alone), a flush asks, or
 * the tier closes.
 * One wake-up then writes the blocks of several cold small files: a
 * wake-up for each cost the daemon two futex calls and two context
 * switches a file, on the cores the reader and the server share
 * (docs/performance-cold.md).  A block waiting there is in the RAM tier
 * already; only its copy on disk comes later.
 */
#define DISK_LINGER_MS 4
#define DISK_LINGER_BYTES (1u << 20)
#define DISK_LINGER_JOBS (DISK_QUEUE_MAX / 4)   /* far from a full queue */

struct disk_job {
    struct disk_job  *next;
    struct tfs_block *b;                /* pinned until written */
    char             *key;              /* owned */
    char             *version;          /* owned */
    uint64_t          obj_size;
    uint64_t          index;
};

struct tfs_disk {
    char             *dir;              /* CACHE_DIR/blocks, owned */
    struct tfs_index *ix;
    pthread_t         writer[DISK_WRITERS];
    unsigned          n_writers;
    pthread_mutex_t   lock;
    pthread_cond_t    cond;
    pthread_cond_t    idle;             /* queue empty, writer idle */
    unsigned          busy;             /* writers at work; lock */
    struct disk_job  *head;             /* protected by lock */
    struct disk_job  *tail;             /* protected by lock */
    unsigned          queued;           /* protected by lock */
    uint64_t          queued_bytes;     /* protected by lock */
    unsigned          lingering;        /* writers in DISK_LINGER_MS; lock */
    unsigned          flushing;         /* flushes waiting; lock */
    bool              stopping;         /* protected by lock */
    uint64_t          cap_checked_ns;   /* protected by lock */
    uint64_t          capacity;         /* protected by lock */
    bool              no_direct;        /* O_DIRECT refused here */
    unsigned          mode;             /* cfg.cache_mode of the dirs */
    char             *packs;            /* CACHE_DIR/blocks/packs, owned */
    uint64_t          pack_max;         /* 0: no packs */
    pthread_mutex_t   pack_lock;        /* the open pack's descriptor */
    int               pack_fd;          /* protected by pack_lock */
    uint32_t          pack_no;          /* its index + 1; pack_lock */
    uint32_t          pack_gen;         /* protected by pack_lock */
};

static size_t disk_header_len(size_t key_len, size_t ver_len,
                              size_t data_len)
{
    size_t chunks = (data_len + DISK_CHUNK - 1) / DISK_CHUNK;

    return DISK_FIXED + key_len + ver_len + 8 * chunks + 8;
}

static size_t disk_page_up(size_t n)
{
    return (n + DISK_PAGE - 1) & ~(size_t)(DISK_PAGE - 1);
}

static size_t disk_unit_up(size_t n)
{
    return (n + DISK_UNIT - 1) & ~(size_t)(DISK_UNIT - 1);
}

/* Can len bytes at data move with O_DIRECT at file offset off (all three
 * page-aligned)? */
static bool disk_direct_ok(const struct tfs_disk *d, const void *data,
                           size_t len, uint64_t off)
{
    return !__atomic_load_n(&d->no_direct, __ATOMIC_RELAXED) && len > 0 &&
           len % DISK_PAGE == 0 && (uintptr_t)data % DISK_PAGE == 0 &&
           off % DISK_PAGE == 0;
}

static void disk_path(const struct tfs_disk *d, const uint8_t *id,
                      char *buf, size_t len)
{
    char hex[2 * TFS_BLOCK_ID_LEN + 1];

    for (int i = 0; i < TFS_BLOCK_ID_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", id[i]);
    snprintf(buf, len, "%s/%.2s/%s", d->dir, hex, hex);
}

/* Build the header of block r into h (hlen bytes: disk_header_len, or
 * that padded to a page). */
static void disk_encode(uint8_t *h, size_t hlen, const uint8_t *id,
                        const struct tfs_block_ref *r, const uint8_t *data,
                        const uint8_t *sums, uint64_t salt)
{
    size_t klen = strlen(r->key);
    size_t vlen = strlen(r->version);
    uint8_t *p = h + DISK_FIXED + klen + vlen;

    memcpy(h, DISK_MAGIC, 8);
    tfs_put_le32(h + 8, hlen);
    tfs_put_le32(h + 12, r->len);
    memcpy(h + 16, id, TFS_BLOCK_ID_LEN);
    tfs_put_le64(h + 32, r->index);
    tfs_put_le64(h + 40, r->obj_size);
    tfs_put_le32(h + 48, DISK_CHUNK);
    tfs_put_le16(h + 52, klen);
    h[54] = (uint8_t)vlen;
    h[55] = 0;
    memcpy(h + DISK_FIXED, r->key, klen);
    memcpy(h + DISK_FIXED + klen, r->version, vlen);
    if (sums != NULL) {                 /* taken as the block landed */
        size_t n = 8 * ((r->len + DISK_CHUNK - 1) / DISK_CHUNK);

        memcpy(p, sums, n);
        p += n;
    }
    for (size_t off = 0; sums == NULL && off < r->len;
         off += DISK_CHUNK, p += 8)
        tfs_put_le64(p, tfs_xxh3(data + off,
                                    TFS_MIN(DISK_CHUNK, r->len - off)));
    memset(p, 0, (size_t)(h + hlen - 8 - p));       /* padding, if any */
    tfs_put_le64(h + hlen - 8, tfs_xxh3(h, hlen - 8) ^ salt);
}

/*
 * Check a header (its sum xor'ed with salt: a pack's, or 0 in a file of
 * its own) and the data against block r: 0, TFS_ECORRUPT, or
 * -ESTALE for the intact header of another block (the file was evicted
 * and reused for another block while we were opening it).
 */
static int disk_verify(const uint8_t *h, size_t hlen, const uint8_t *id,
                       const struct tfs_block_ref *r, const uint8_t *data,
                       uint64_t salt, uint64_t *digest)
{
    size_t klen = strlen(r->key);
    size_t vlen = strlen(r->version);
    size_t exact = disk_header_len(klen, vlen, r->len);
    const uint8_t *p = h + DISK_FIXED + klen + vlen;

    if (hlen >= 32 && memcmp(h, DISK_MAGIC, 8) == 0 &&
        memcmp(h + 16, id, TFS_BLOCK_ID_LEN) != 0)
        return -ESTALE;
    if ((hlen != exact && hlen != disk_page_up(exact)) ||
        memcmp(h, DISK_MAGIC, 8) != 0 || tfs_get_le32(h + 8) != hlen ||
        tfs_get_le32(h + 12) != r->len ||
        memcmp(h + 16, id, TFS_BLOCK_ID_LEN) != 0 ||
        tfs_get_le64(h + 32) != r->index ||
        tfs_get_le64(h + 40) != r->obj_size ||
        tfs_get_le32(h + 48) != DISK_CHUNK || tfs_get_le16(h + 52) != klen ||
        h[54] != vlen || memcmp(h + DISK_FIXED, r->key, klen) != 0 ||
        memcmp(h + DISK_FIXED + klen, r->version, vlen) != 0)
        return TFS_ECORRUPT;
    if (tfs_get_le64(h + hlen - 8) != (tfs_xxh3(h, hlen - 8) ^ salt))
        return TFS_ECORRUPT;
    for (size_t off = 0; off < r->len; off += DISK_CHUNK, p += 8) {
        size_t n = TFS_MIN(DISK_CHUNK, r->len - off);
        if (tfs_get_le64(p) != tfs_xxh3(data + off, n))
            return TFS_ECORRUPT;
    }
    *digest = tfs_csum_of_sums(h + DISK_FIXED + klen + vlen,
                               (r->len + DISK_CHUNK - 1) / DISK_CHUNK);
    return 0;
}

/* ---- capacity ---- */

/* The byte bound now: cache_size, less whatever the free-space floor
 * takes back.  Re-read from statvfs at most once a second. */
static uint64_t disk_capacity(struct tfs_cache *c)
{
    struct tfs_disk *d = c->disk;
    uint64_t now = tfs_now_ns();
    uint64_t cap;

    pthread_mutex_lock(&d->lock);
    if (d->capacity == 0 || now - d->cap_checked_ns > 1000000000u) {
        struct statvfs vfs;
        uint64_t used;
        uint64_t blocks;

        cap = c->cfg.cache_size;
        tfs_index_usage(d->ix, &used, &blocks);
        if (statvfs(d->dir, &vfs) == 0) {
            uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
            uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
            uint64_t floor = c->cfg.free_space
                                 ? c->cfg.free_space
                                 : (uint64_t)(c->cfg.free_space_pct *
                                              (double)total / 100.0);
            uint64_t room = used + avail > floor ? used + avail - floor : 0;
            cap = TFS_MIN(cap, room);
        }
        d->capacity = TFS_MAX(cap, 1);
        d->cap_checked_ns = now;
    }
    cap = d->capacity;
    pthread_mutex_unlock(&d->lock);
    return cap;
}

/* ---- load ---- */

/* Drop a block whose file or record is bad or gone: a record only from
 * the index (its pack holds others), and only if still at loc. */
static void disk_drop(struct tfs_cache *c, const uint8_t *id,
                      const char *path, const struct tfs_disk_loc *loc)
{
    tfs_index_remove(c->disk->ix, id, loc->pack != 0 ? loc : NULL);
    if (loc->pack == 0)
        unlink(path);
}

/*
 * Turn O_DIRECT on or off for fd: 0, or -EINVAL where the file system
 * refuses it (then remembered: the disk tier stops asking).
 */
static int disk_set_direct(struct tfs_disk *d, int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, on ? fl | O_DIRECT
                                        : fl & ~O_DIRECT) < 0) {
        if (on && errno == EINVAL)
            __atomic_store_n(&d->no_direct, true, __ATOMIC_RELAXED);
        return -errno;
    }
    return 0;
}

/* All of [off, off+len): 0, -errno, or TFS_ECORRUPT if the file is short. */
static int disk_pread(int fd, void *buf, size_t len, uint64_t off)
{
    size_t n;
    int rc = tfs_pread_full(fd, buf, len, off, &n);

    return rc < 0 ? rc : n == len ? 0 : TFS_ECORRUPT;
}

/* Header and data, h then data, from off: 0, -errno or TFS_ECORRUPT. */
static int disk_pread_hd(int fd, uint8_t *h, size_t hlen, uint8_t *data,
                         size_t len, uint64_t off)
{
    struct iovec iov[2] = {{h, hlen}, {data, len}};
    ssize_t n;

    do {
        n = preadv(fd, iov, 2, (off_t)off);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n == (ssize_t)(hlen + len) ? 0 : TFS_ECORRUPT;
}

/*
 * Read header and data of a block file; 0 or -errno/TFS_ECORRUPT.  With
 * direct, the data (page-aligned at a page-aligned hlen) is read with
 * O_DIRECT, the header through the page cache.  *st: the file read (its
 * st_ino 0 when unknown).  tfs_disk_load_hook: tests only, NULL else.
 */
void (*tfs_disk_load_hook)(const char *path);

static int disk_read_file(struct tfs_disk *d, const char *path,
                          uint8_t *h, size_t hlen, uint8_t *data, size_t len,
                          bool direct, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return -errno;
    if (fstat(fd, st) < 0)
        st->st_ino = 0;
    if (tfs_disk_load_hook != NULL)
        tfs_disk_load_hook(path);
    if (direct) {
        rc = disk_pread(fd, h, hlen, 0);
        if (rc == 0 && disk_set_direct(d, fd, true) == 0) {
            rc = disk_pread(fd, data, len, hlen);
            close(fd);
            return rc;
        }
        if (rc < 0) {
            close(fd);
            return rc;
        }
    }
    rc = disk_pread_hd(fd, h, hlen, data, len, 0);
    close(fd);
    return rc;
}

/* Read a packed record (header and data) at unit of pack file path. */
static int disk_read_record(const char *path, uint8_t *h, size_t hlen,
                            uint8_t *data, size_t len, uint32_t unit)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return -errno;
    rc = disk_pread_hd(fd, h, hlen, data, len, (uint64_t)unit * DISK_UNIT);
    close(fd);
    return rc;
}

/*
 * Is the file read (st) no longer the one at path?  The block was evicted
 * while it was read, and its file removed or reused for another block
 * (renamed away, truncated, rewritten: disk_open_tmp), so what was read
 * is short or another block's, not damaged: a miss, not a corrupt block
 * (whose drop would remove whatever now has the path).
 */
static bool disk_moved(const char *path, const struct stat *st)
{
    struct stat now;

    return st->st_ino != 0 &&
           (stat(path, &now) != 0 || now.st_ino != st->st_ino ||
            now.st_dev != st->st_dev);
}

int tfs_disk_load(struct tfs_cache *c, const struct tfs_block_ref *r,
                  const uint8_t *id, struct tfs_block *b)
{
    struct tfs_disk *d = c->disk;
    struct tfs_disk_loc loc;
    struct stat st = {0};
    char path[4200];
    uint8_t *h = NULL;
    uint8_t *data = NULL;
    size_t hlen;
    int rc;

    if (!tfs_index_lookup(d->ix, id, &loc))
        return -ENOENT;
    if (loc.pack != 0)
        tfs_index_pack_path(d->packs, loc.pack, loc.gen, path, sizeof(path));
    else
        disk_path(d, id, path, sizeof(path));
    hlen = loc.size > r->len ? loc.size - r->len : 0;
    rc = hlen < DISK_FIXED || hlen > (1u << 20) ? TFS_ECORRUPT : 0;
    if (rc == 0) {
        h = tfs_malloc(hlen);
        data = tfs_blockbuf_get(c, r->len);
        rc = h == NULL || data == NULL ? -ENOMEM
             : loc.pack != 0
                 ? disk_read_record(path, h, hlen, data, r->len, loc.unit)
                 : disk_read_file(d, path, h, hlen, data, r->len,
                                  disk_direct_ok(d, data, r->len, hlen), &st);
    }
    if (rc == 0)
        rc = disk_verify(h, hlen, id, r, data, loc.salt, &b->digest);
    if (rc == -ESTALE && loc.pack != 0)
        rc = TFS_ECORRUPT;              /* records are never reused */
    if (rc == TFS_ECORRUPT && loc.pack == 0 && disk_moved(path, &st))
        rc = -ESTALE;
    tfs_free(h);
    if (rc == 0) {
        b->data = data;
        b->has_digest = true;           /* from the chunk sums: free */
        return 0;
    }
    tfs_blockbuf_put(c, data, r->len);
    if (rc == -ESTALE)
        return -ENOENT;                 /* reused under us: just a miss */
    if (rc == -ENOENT)
        disk_drop(c, id, path, &loc);
    if (rc != TFS_ECORRUPT)
        return rc;
    TFS_COUNT(&c->ctr, corrupt_blocks, 1);
    tfs_log(TFS_LOG_WARNING, "cache: block %llu of '%s' failed its "
            "checksum in %s; dropped", (unsigned long long)r->index, r->key,
            loc.pack != 0 ? path : d->dir);
    disk_drop(c, id, path, &loc);
    return TFS_ECORRUPT;
}

bool tfs_disk_has(struct tfs_cache *c, const uint8_t *id)
{
    return c->disk != NULL && tfs_index_contains(c->disk->ix, id);
}

/* ---- store ---- */

/*
 * A temp file to write a block into: an evicted block's file when there
 * is one (renamed and truncated), else a new one.  Reusing the inode
 * matters: with blocks evicted and admitted all the time, ext4 spends a
 * fifth of the daemon's CPU looking for free inodes it may reuse.
 */
static int disk_open_tmp(const char *tmp, const char *reuse, unsigned mode)
{
    unsigned fmode = TFS_CACHE_FILE_MODE(mode);
    int fd;

    if (reuse != NULL && rename(reuse, tmp) == 0) {
        fd = open(tmp, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd >= 0)
            return fd;
        unlink(tmp);
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              fmode);
    if (fd < 0)
        return -errno;
    if ((fmode & 060) && fchmod(fd, fmode) < 0) {   /* past the umask */
        int rc = -errno;
        close(fd);
        unlink(tmp);
        return rc;
    }
    return fd;
}

/*
 * Write the data (page-aligned, at page-aligned offset hlen) with
 * O_DIRECT, then the header through the page cache: 0, -errno, or 1 when
 * O_DIRECT was refused (fd is back as it was; the caller writes it all).
 */
static int disk_write_direct(struct tfs_disk *d, int fd, const uint8_t *h,
                             size_t hlen, const uint8_t *data, size_t len)
{
    int rc = disk_set_direct(d, fd, true);

    if (rc == -EINVAL)
        return 1;
    if (rc == 0)
        rc = tfs_pwrite_all(fd, data, len, hlen);
    if (rc == -EINVAL) {                /* refused at the write: page cache */
        __atomic_store_n(&d->no_direct, true, __ATOMIC_RELAXED);
        return disk_set_direct(d, fd, false) == 0 ? 1 : -EINVAL;
    }
    if (rc == 0)
        rc = disk_set_direct(d, fd, false);
    if (rc == 0)
        rc = tfs_pwrite_all(fd, h, hlen, 0);
    return rc;
}

/* Write header + data to a temp file and rename it to path. */
static int disk_write_file(struct tfs_disk *d, const char *path,
                           const char *reuse, const uint8_t *h, size_t hlen,
                           const uint8_t *data, size_t len)
{
    char tmp[4300];
    const char *slash = strrchr(path, '/');
    struct iovec iov[2] = {{(void *)h, hlen}, {(void *)data, len}};
    ssize_t n;
    int fd;
    int rc = 1;

    snprintf(tmp, sizeof(tmp), "%.*s/.tmp-%016llx", (int)(slash - path),
             path, (unsigned long long)tfs_rand_u64());
    fd = disk_open_tmp(tmp, reuse, d->mode);
    if (fd < 0)
        return fd;
    if (disk_direct_ok(d, data, len, hlen))
        rc = disk_write_direct(d, fd, h, hlen, data, len);
    if (rc == 1) {                      /* through the page cache */
        rc = 0;
        do {
            n = writev(fd, iov, 2);
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)(hlen + len))
            rc = n < 0 ? -errno : -ENOSPC;
    }
    /*
     * Write the block out and drop its pages from the kernel's page
     * cache: the RAM tier is the in-memory copy of hot blocks, and a
     * second copy in the page cache would only take memory from it and
     * from the training job (and, on a VM, keep touching fresh memory,
     * which costs more than the copy).  The writer is a background
     * thread, so waiting for the device here holds up no reader.
     */
    if (rc == 0 && sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE |
                                   SYNC_FILE_RANGE_WAIT_AFTER) == 0)
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* Unlink the evicted files, but for the first (reused) when keep_first. */
static void disk_unlink_victims(struct tfs_cache *c, struct tfs_victims *v,
                                bool keep_first)
{
    char path[4200];

    for (size_t i = keep_first ? 1 : 0; i < v->n; i++) {
        disk_path(c->disk, v->ids[i], path, sizeof(path));
        unlink(path);
    }
    TFS_COUNT(&c->ctr, evicted_bytes, v->bytes);
}

/* Encode block b and write it to its path, reusing reuse if given. */
static int disk_put_file(struct tfs_cache *c, const struct tfs_block_ref *r,
                         const struct tfs_block *b, size_t hlen,
                         const char *reuse)
{
    char path[4200];
    uint8_t *h = tfs_malloc(hlen);
    int rc;

    if (h == NULL)
        return -ENOMEM;
    disk_encode(h, hlen, b->id, r, b->data, b->sums, 0);
    disk_path(c->disk, b->id, path, sizeof(path));
    rc = disk_write_file(c->disk, path, reuse, h, hlen, b->data, r->len);
    tfs_free(h);
    return rc;
}

/* Write a pack's first page (the file is new: empty). */
static int disk_pack_head(int fd, const struct tfs_disk_loc *loc)
{
    uint8_t page[DISK_PAGE] = {0};

    memcpy(page, DISK_PACK_MAGIC, 8);
    tfs_put_le32(page + 8, DISK_PAGE);
    tfs_put_le32(page + 12, loc->pack - 1);
    tfs_put_le32(page + 16, loc->gen);
    tfs_put_le64(page + 24, loc->salt);
    tfs_put_le64(page + DISK_PAGE - 8, tfs_xxh3(page, DISK_PAGE - 8));
    return tfs_pwrite_all(fd, page, DISK_PAGE, 0);
}

/*
 * A pack this process is done appending to: its pages written out and
 * dropped from the page cache, as a block file's are (one write of the
 * whole pack, not one a record), then closed.
 */
static void disk_pack_done(int fd)
{
    if (fd < 0)
        return;
    if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE |
                        SYNC_FILE_RANGE_WRITE |
                        SYNC_FILE_RANGE_WAIT_AFTER) == 0)
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/*
 * A descriptor of the pack loc names, to write a record into (the
 * caller closes it).  This process's writers share one open pack's
 * descriptor; whichever comes first creates the file and its first page.
 * The descriptor it replaces is handed back in *done (disk_pack_done).
 */
static int disk_pack_fd(struct tfs_disk *d, const struct tfs_disk_loc *loc,
                        int *done)
{
    unsigned fmode = TFS_CACHE_FILE_MODE(d->mode);
    int fd;
    int rc = 0;

    *done = -1;
    pthread_mutex_lock(&d->pack_lock);
    if (d->pack_fd < 0 || d->pack_no != loc->pack ||
        d->pack_gen != loc->gen) {
        char path[4200];
        struct stat st;

        tfs_index_pack_path(d->packs, loc->pack, loc->gen, path,
                            sizeof(path));
        fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, fmode);
        if (fd < 0)
            rc = -errno;
        else if (fstat(fd, &st) < 0)
            rc = -errno;
        else if (st.st_size == 0 && (fmode & 060) && fchmod(fd, fmode) < 0)
            rc = -errno;                /* past the umask */
        else if (st.st_size == 0)
            rc = disk_pack_head(fd, loc);
        if (rc < 0 && fd >= 0)
            close(fd);
        if (rc == 0) {
            *done = d->pack_fd;
            d->pack_fd = fd;
            d->pack_no = loc->pack;
            d->pack_gen = loc->gen;
        }
    }
    fd = rc < 0 ? rc : fcntl(d->pack_fd, F_DUPFD_CLOEXEC, 0);
    if (fd == -1)
        fd = -errno;
    pthread_mutex_unlock(&d->pack_lock);
    return fd;
}

/*
 * Encode block b and write it as a record where loc says.  Its pages go
 * out with the rest of the pack when the process moves on to the next
 * one (disk_pack_done), or when the kernel writes them back.
 */
static int disk_put_record(struct tfs_cache *c, const struct tfs_block_ref *r,
                           const struct tfs_block *b, size_t hlen,
                           const struct tfs_disk_loc *loc)
{
    struct tfs_disk *d = c->disk;
    uint8_t *h = tfs_malloc(hlen);
    off_t off = (off_t)loc->unit * DISK_UNIT;
    struct iovec iov[2] = {{h, hlen}, {(void *)b->data, r->len}};
    ssize_t n;
    int done;
    int fd;
    int rc;

    if (h == NULL)
        return -ENOMEM;
    disk_encode(h, hlen, b->id, r, b->data, b->sums, loc->salt);
    fd = disk_pack_fd(d, loc, &done);
    rc = fd < 0 ? fd : 0;
    if (rc == 0) {
        do {
            n = pwritev(fd, iov, 2, off);
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)(hlen + r->len))
            rc = n < 0 ? -errno : -ENOSPC;
    }
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = -errno;
    disk_pack_done(done);
    tfs_free(h);
    return rc;
}

/* Admit and write a small block as a record of this process's pack. */
static bool disk_write_packed(struct tfs_cache *c,
                              const struct tfs_block_ref *r,
                              const struct tfs_block *b, size_t hlen)
{
    struct tfs_disk *d = c->disk;
    struct tfs_victims v = {0};
    struct tfs_disk_loc loc;
    uint32_t size = (uint32_t)(hlen + r->len);
    int admit;
    int rc;

    admit = tfs_index_admit_packed(d->ix, b->id, size,
                                   (uint32_t)disk_unit_up(size), d->pack_max,
                                   disk_capacity(c), c->cfg.eviction, &v,
                                   &loc);
    disk_unlink_victims(c, &v, false);
    tfs_victims_cleanup(&v);
    if (admit == 0)
        TFS_COUNT(&c->ctr, admission_rejects, 1);
    if (admit != 1)                     /* declined, present, or -ENOMEM */
        return admit == -EEXIST;
    rc = disk_put_record(c, r, b, hlen, &loc);
    if (tfs_index_commit(d->ix, b->id, rc == 0)) {
        TFS_COUNT(&c->ctr, disk_write_bytes, size);
        return true;
    }
    if (rc == 0)
        return false;                   /* its pack was evicted meanwhile */
    TFS_COUNT(&c->ctr, disk_write_dropped, 1);
    tfs_log(TFS_LOG_WARNING, "cache: cannot write a block of '%s' to %s: "
            "%s", r->key, d->packs, tfs_strerror(rc));
    return false;
}

/*
 * Admit and write one block (the calling thread does the I/O); true when
 * the block is on disk afterwards (written now, or there already).
 */
static bool disk_write_block(struct tfs_cache *c,
                             const struct tfs_block_ref *r,
                             const struct tfs_block *b)
{
    struct tfs_disk *d = c->disk;
    size_t hlen = disk_header_len(strlen(r->key), strlen(r->version), r->len);
    struct tfs_victims v = {0};
    char reuse[4200];
    int admit;
    int rc;

    if (d->pack_max != 0 && disk_unit_up(hlen + r->len) <= DISK_PACK_RECORD)
        return disk_write_packed(c, r, b, hlen);
    if (disk_direct_ok(d, b->data, r->len, 0))
        hlen = disk_page_up(hlen);      /* data on a page: O_DIRECT */
    admit = tfs_index_admit(d->ix, b->id, (uint32_t)(hlen + r->len),
                            disk_capacity(c), c->cfg.eviction, &v);
    disk_unlink_victims(c, &v, admit == 1);
    if (admit == 0)
        TFS_COUNT(&c->ctr, admission_rejects, 1);
    if (admit != 1) {                   /* declined, present, or -ENOMEM */
        tfs_victims_cleanup(&v);
        return admit == -EEXIST;
    }
    if (v.n > 0)
        disk_path(d, v.ids[0], reuse, sizeof(reuse));
    rc = disk_put_file(c, r, b, hlen, v.n > 0 ? reuse : NULL);
    tfs_victims_cleanup(&v);
    tfs_index_commit(d->ix, b->id, rc == 0);
    if (rc == 0) {
        TFS_COUNT(&c->ctr, disk_write_bytes, hlen + r->len);
        return true;
    }
    TFS_COUNT(&c->ctr, disk_write_dropped, 1);
    tfs_log(TFS_LOG_WARNING, "cache: cannot write a block of '%s' to %s: "
            "%s", r->key, d->dir, tfs_strerror(rc));
    return false;
}

/* Write b and note whether it is on disk (ram.c evicts spent blocks only
   then). */
static void disk_write_note(struct tfs_cache *c,
                            const struct tfs_block_ref *r,
                            struct tfs_block *b)
{
    bool on_disk = disk_write_block(c, r, b);

    pthread_mutex_lock(&c->ram_lock);
    b->on_disk = on_disk;
    pthread_mutex_unlock(&c->ram_lock);
}

static void disk_job_free(struct tfs_cache *c, struct disk_job *j)
{
    tfs_ram_put(c, j->b);
    tfs_free(j->key);
    tfs_free(j->version);
    tfs_free(j);
}

/* Enough queued to write without lingering for more (d->lock held). */
static bool disk_linger_full(const struct tfs_disk *d)
{
    return d->queued_bytes >= DISK_LINGER_BYTES ||
           d->queued >= DISK_LINGER_JOBS;
}

static void *disk_writer(void *arg)
{
    struct tfs_cache *c = arg;
    struct tfs_disk *d = c->disk;
    bool lingered = false;              /* once a batch */
    bool batch = false;                 /* taking jobs since a wait */

    pthread_mutex_lock(&d->lock);
    for (;;) {
        struct disk_job *j = d->head;
        struct tfs_block_ref r;

        if (j == NULL && d->stopping)
            break;
        if (j == NULL) {
            lingered = false;
            batch = false;
            pthread_cond_broadcast(&d->idle);
            pthread_cond_wait(&d->cond, &d->lock);
            continue;
        }
        if (!lingered && !d->stopping && d->flushing == 0 &&
            !disk_linger_full(d)) {
            lingered = true;
            d->lingering++;
            tfs_cond_wait_ms(&d->cond, &d->lock, DISK_LINGER_MS);
            d->lingering--;
            continue;
        }
        if (!batch) {
            batch = true;
            TFS_COUNT(&c->ctr, disk_write_batches, 1);
        }
        lingered = true;
        d->head = j->next;
        if (d->head == NULL)
            d->tail = NULL;
        d->queued--;
        d->queued_bytes -= j->b->len;
        d->busy++;
        pthread_mutex_unlock(&d->lock);
        r = (struct tfs_block_ref){.key = j->key, .version = j->version,
                                   .obj_size = j->obj_size,
                                   .index = j->index, .len = j->b->len};
        disk_write_note(c, &r, j->b);
        disk_job_free(c, j);
        pthread_mutex_lock(&d->lock);
        d->busy--;
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

bool tfs_disk_store(struct tfs_cache *c, const struct tfs_block_ref *r,
                    struct tfs_block *b, bool sync)
{
    struct tfs_disk *d = c->disk;
    struct disk_job *j;
    bool kick;

    if (d == NULL)
        return false;
    if (sync) {
        disk_write_note(c, r, b);
        return false;
    }
    j = tfs_calloc(1, sizeof(*j));
    if (j != NULL) {
        j->key = tfs_strdup(r->key);
        j->version = tfs_strdup(r->version);
    }
    if (j == NULL || j->key == NULL || j->version == NULL) {
        TFS_COUNT(&c->ctr, disk_write_dropped, 1);
        if (j != NULL) {
            tfs_free(j->key);
            tfs_free(j->version);
            tfs_free(j);
        }
        return false;
    }
    j->b = b;
    j->obj_size = r->obj_size;
    j->index = r->index;
    pthread_mutex_lock(&c->ram_lock);
    b->refs++;                          /* the queue's pin */
    pthread_mutex_unlock(&c->ram_lock);
    pthread_mutex_lock(&d->lock);
    if (d->queued >= DISK_QUEUE_MAX || d->stopping) {
        pthread_mutex_unlock(&d->lock);
        TFS_COUNT(&c->ctr, disk_write_dropped, 1);
        disk_job_free(c, j);
        return false;
    }
    if (d->tail != NULL)
        d->tail->next = j;
    else
        d->head = j;
    d->tail = j;
    d->queued++;
    d->queued_bytes += b->len;
    /* a writer at work or lingering gets to it without a wake-up */
    kick = disk_linger_full(d) || (d->busy == 0 && d->lingering == 0);
    pthread_mutex_unlock(&d->lock);
    return kick;
}

/* A writer checks the queue under d->lock before it waits, so a signal
   after the job was queued cannot be lost; none needs the lock. */
void tfs_disk_kick(struct tfs_cache *c)
{
    if (c->disk != NULL)
        pthread_cond_signal(&c->disk->cond);
}

/* ---- open, recovery, close ---- */

static bool disk_parse_id(const char *name, uint8_t *id)
{
    if (strlen(name) != 2 * TFS_BLOCK_ID_LEN)
        return false;
    for (int i = 0; i < TFS_BLOCK_ID_LEN; i++) {
        int hi = tfs_hexval_lower(name[2 * i]);
        int lo = tfs_hexval_lower(name[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        id[i] = (uint8_t)(hi * 16 + lo);
    }
    return true;
}

/* Call fn for every entry of directory fd (taken: closed after). */
static void disk_scan_dir(struct tfs_index *ix, int fd,
                          void (*fn)(struct tfs_index *ix, int dfd,
                                     const char *name))
{
    DIR *dir = fdopendir(fd);
    struct dirent *de;

    if (dir == NULL) {
        close(fd);
        return;
    }
    while ((de = readdir(dir)) != NULL)
        fn(ix, dirfd(dir), de->d_name);
    closedir(dir);
}

/* Index block file name of an XX directory; remove a leftover. */
static void disk_scan_file(struct tfs_index *ix, int dfd, const char *name)
{
    uint8_t id[TFS_BLOCK_ID_LEN];
    struct stat sb;

    if (strncmp(name, ".tmp-", 5) == 0) {
        unlinkat(dfd, name, 0);
        return;
    }
    if (disk_parse_id(name, id) &&
        fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(sb.st_mode))
        tfs_index_add(ix, id, (uint32_t)sb.st_size);
}

/* "PPPPPPPP-GGGGGGGG": a pack's index and generation. */
static bool disk_parse_pack(const char *name, uint32_t *pack, uint32_t *gen)
{
    uint64_t v[2] = {0, 0};

    if (strlen(name) != 17 || name[8] != '-')
        return false;
    for (int i = 0; i < 17; i++) {
        int x = i == 8 ? 0 : tfs_hexval_lower(name[i]);
        if (x < 0)
            return false;
        if (i != 8)
            v[i > 8] = v[i > 8] * 16 + (uint64_t)x;
    }
    *pack = (uint32_t)v[0] + 1;
    *gen = (uint32_t)v[1];
    return *pack != 0;
}

/*
 * The record whose header starts unit (buf: DISK_PAGE bytes from there,
 * zeros past the file's end) in a pack of file_len bytes: its size
 * (header + data) and id, or 0 when no valid header starts there.
 */
static uint32_t disk_scan_record(int fd, const uint8_t *buf, uint64_t unit,
                                 uint64_t file_len, uint64_t salt,
                                 uint8_t *id)
{
    uint64_t off = unit * DISK_UNIT;
    uint32_t hlen = tfs_get_le32(buf + 8);
    uint32_t len = tfs_get_le32(buf + 12);
    uint8_t *h;
    bool ok;

    if (memcmp(buf, DISK_MAGIC, 8) != 0 || len > DISK_PACK_SCAN ||
        hlen != disk_header_len(tfs_get_le16(buf + 52), buf[54], len) ||
        off + hlen + len > file_len)
        return 0;
    h = hlen <= DISK_PAGE ? (uint8_t *)buf : tfs_malloc(hlen);
    if (h == NULL)
        return 0;
    ok = h == buf || disk_pread(fd, h, hlen, off) == 0;
    ok = ok && tfs_get_le64(h + hlen - 8) == (tfs_xxh3(h, hlen - 8) ^ salt);
    memcpy(id, buf + 16, TFS_BLOCK_ID_LEN);
    if (h != buf)
        tfs_free(h);
    return ok ? hlen + len : 0;
}

/*
 * Index the records of pack file name in packs dir pfd, record by record
 * (where a unit holds no valid header, the next unit is tried); remove
 * it when it is not a pack of ours, its number is taken, or it holds no
 * valid record.
 */
static void disk_scan_pack(struct tfs_index *ix, int pfd, const char *name)
{
    uint8_t buf[DISK_PAGE];
    uint32_t pack;
    uint32_t gen;
    struct stat sb;
    uint64_t salt = 0;
    uint64_t len = 0;
    bool keep = false;
    int fd;

    if (!disk_parse_pack(name, &pack, &gen))
        return;                         /* not ours: left alone */
    fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
        disk_pread(fd, buf, DISK_PAGE, 0) == 0 &&
        memcmp(buf, DISK_PACK_MAGIC, 8) == 0 &&
        tfs_get_le32(buf + 8) == DISK_PAGE &&
        tfs_get_le32(buf + 12) == pack - 1 && tfs_get_le32(buf + 16) == gen &&
        tfs_get_le64(buf + DISK_PAGE - 8) == tfs_xxh3(buf, DISK_PAGE - 8)) {
        len = (uint64_t)sb.st_size;
        salt = tfs_get_le64(buf + 24);
        keep = tfs_index_add_pack(ix, pack, gen, disk_unit_up(len), salt) == 0;
    }
    /* Headers only: no readahead of the data between them. */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    for (uint64_t unit = DISK_PAGE / DISK_UNIT; keep && unit * DISK_UNIT < len;) {
        uint8_t id[TFS_BLOCK_ID_LEN];
        size_t n = 0;
        uint32_t size = 0;

        memset(buf, 0, sizeof(buf));
        if (tfs_pread_full(fd, buf, DISK_PAGE, unit * DISK_UNIT, &n) == 0 &&
            n >= 64)
            size = disk_scan_record(fd, buf, unit, len, salt, id);
        if (size == 0) {
            unit++;
            continue;
        }
        tfs_index_add_record(ix, id, size, pack, (uint32_t)unit);
        unit += disk_unit_up(size) / DISK_UNIT;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (!keep || !tfs_index_pack_loaded(ix, pack))
        unlinkat(pfd, name, 0);
}

/*
 * Give subdirectory name of dfd exactly mode if it is ours: a new one
 * past the umask (group mode), an old one made 0755 by an older version.
 */
static void disk_fix_mode(int dfd, const char *name, unsigned mode)
{
    struct stat st;

    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
        (st.st_mode & 07777) != mode)
        (void)fchmodat(dfd, name, mode, 0);
}

/* Create the 256 subdirectories and index what they hold. */
static int disk_scan(struct tfs_disk *d, bool rebuild)
{
    int dfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (dfd < 0)
        return tfs_err(-errno, "cannot open %s", d->dir);
    for (int i = 0; i < 256; i++) {
        char name[3];
        int sub;

        snprintf(name, sizeof(name), "%02x", i);
        if (mkdirat(dfd, name, d->mode) < 0 && errno != EEXIST) {
            int rc = tfs_err(-errno, "cannot create %s/%s", d->dir, name);
            close(dfd);
            return rc;
        }
        disk_fix_mode(dfd, name, d->mode);
        if (!rebuild)
            continue;
        sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sub >= 0)
            disk_scan_dir(d->ix, sub, disk_scan_file);
    }
    if (mkdirat(dfd, "packs", d->mode) < 0 && errno != EEXIST) {
        int rc = tfs_err(-errno, "cannot create %s/packs", d->dir);
        close(dfd);
        return rc;
    }
    disk_fix_mode(dfd, "packs", d->mode);
    if (rebuild) {
        int pfd = openat(dfd, "packs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                         O_CLOEXEC);
        if (pfd >= 0)
            disk_scan_dir(d->ix, pfd, disk_scan_pack);
    }
    close(dfd);
    return 0;
}

/*
 * Create or check the cache dir and CACHE_DIR/blocks (tfs_dir_open:
 * no symlinks, ours or, in group mode, our group's; an old 0755 one of
 * ours is tightened to the mode, logged once).
 */
static int disk_mkdirs(const struct tfs_cache *c)
{
    unsigned mode = c->cfg.cache_mode;
    int top;
    int fd;
    int rc = tfs_dir_open_path(c->cfg.cache_dir, mode, TFS_DIR_TIGHTEN,
                               &top);

    if (rc < 0)
        return rc;
    rc = tfs_dir_openat(top, c->cfg.cache_dir, "blocks", mode,
                        TFS_DIR_TIGHTEN, &fd);
    if (rc == 0)
        close(fd);
    close(top);
    return rc;
}

/* Open the index, rebuilding it when this is the only user. */
static int disk_open_index(struct tfs_cache *c, struct tfs_disk *d)
{
    char path[4200];
    bool exclusive;
    uint64_t max_blocks = c->cfg.max_blocks
                              ? c->cfg.max_blocks
                              : tfs_tinylfu_blocks(c->cfg.cache_size);
    int rc;

    snprintf(path, sizeof(path), "%s/index", c->cfg.cache_dir);
    rc = tfs_index_open(path, max_blocks, &d->ix, &exclusive);
    if (rc == 0)
        rc = tfs_index_set_pack_dir(d->ix, d->packs);
    if (rc < 0)
        return rc;
    if (exclusive)
        tfs_index_reset(d->ix);
    rc = disk_scan(d, exclusive);
    if (rc == 0 && exclusive)
        rc = tfs_index_ready(d->ix);
    return rc;
}

/* A new file at path (a stale one removed first), mode exactly. */
static FILE *disk_create_file(const char *path, unsigned mode)
{
    int fd;
    FILE *f;

    (void)unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              mode);
    if (fd < 0)
        return NULL;
    f = fchmod(fd, mode) == 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int err = errno;
        close(fd);
        unlink(path);
        errno = err;
    }
    return f;
}

/* fsync directory dir: its entries (a rename) durable.  -errno. */
static int disk_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return tfs_err(-errno, "cannot open %s", dir);
    if (fsync(fd) != 0)
        rc = tfs_err(-errno, "cannot fsync %s", dir);
    close(fd);
    return rc;
}

/*
 * CACHE_DIR/settings remembers the block and cache sizes of the first
 * user, so that a later process (warmup, a DataLoader worker) shares the
 * blocks without repeating every flag: a size it did not set is adopted;
 * a block size it set differently is refused, since its blocks would
 * never match.  Sizes given explicitly are written back.
 */
static int disk_settings(struct tfs_cache *c)
{
    char path[4200];
    char tmp[4300];
    char line[128];
    unsigned long long bs = 0;
    unsigned long long cs = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/settings", c->cfg.cache_dir);
    f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "block_size=%llu", &bs) != 1)
            sscanf(line, "cache_size=%llu", &cs);
    }
    if (f != NULL)
        fclose(f);
    /* The option parser's ranges (cache.c): a damaged file is refused. */
    if ((bs != 0 && (bs < (64u << 10) || bs > (64u << 20))) ||
        (cs != 0 && cs < (1u << 20)))
        return tfs_err(TFS_EFORMAT, "%s: block_size=%llu cache_size=%llu "
                       "is out of range (block_size 64K..64M, cache_size "
                       ">= 1M): a damaged file; fix or remove it", path, bs,
                       cs);
    if (bs != 0 && !c->cfg.set_block_size)
        c->cfg.block_size = bs;
    else if (bs != 0 && bs != c->cfg.block_size)
        return tfs_err(TFS_EOPTION, "cache dir %s holds blocks of %llu "
                       "bytes, not %llu: use its block size or another "
                       "cache dir", c->cfg.cache_dir, bs,
                       (unsigned long long)c->cfg.block_size);
    if (cs != 0 && !c->cfg.set_cache_size)
        c->cfg.cache_size = cs;
    if (bs == c->cfg.block_size && cs == c->cfg.cache_size)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
    f = disk_create_file(tmp, TFS_CACHE_FILE_MODE(c->cfg.cache_mode));
    if (f == NULL)
        return tfs_err(-errno, "cannot write %s", tmp);
    fprintf(f, "block_size=%llu\ncache_size=%llu\n",
            (unsigned long long)c->cfg.block_size,
            (unsigned long long)c->cfg.cache_size);
    /* durable before and after the rename: a power loss must not leave
     * an empty settings file (found with bench/tools/lazyfs) */
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;

        fclose(f);
        unlink(tmp);
        return tfs_err(-e, "cannot write %s", tmp);
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return tfs_err(-EIO, "cannot write %s", path);
    }
    return disk_fsync_dir(c->cfg.cache_dir);
}

/*
 * A cache dir we may not write (EROFS: a read-only mount; EACCES) or
 * whose disk fails (EIO): the cache runs without its disk tier, from RAM
 * and the store, said once in the log and in the stats ("disk_tier").
 * Every other error, and a refusal of the dir checks (EPERM, ELOOP,
 * ENOTDIR), stays fatal.
 */
static int disk_off(struct tfs_cache *c, int rc)
{
    if (rc != -EROFS && rc != -EACCES && rc != -EIO)
        return rc;
    snprintf(c->disk_off, sizeof(c->disk_off), "off: %s",
             rc == -EROFS ? "read-only file system" :
             rc == -EIO ? "input/output error" : "permission denied");
    TFS_WARN("cache: cache dir %s cannot be written (%s: %s): running "
             "without the disk tier, reading from the store",
             c->cfg.cache_dir, strerror(-rc), tfs_errdetail());
    tfs_errdetail_clear();
    return 0;
}

int tfs_disk_open(struct tfs_cache *c)
{
    struct tfs_disk *d;
    char path[4200];
    char packs[4300];
    int rc;

    c->disk_off[0] = '\0';
    if (c->cfg.cache_dir == NULL)
        return 0;
    rc = disk_mkdirs(c);
    if (rc == 0)
        rc = disk_settings(c);
    snprintf(path, sizeof(path), "%s/blocks", c->cfg.cache_dir);
    snprintf(packs, sizeof(packs), "%s/packs", path);
    if (rc < 0)
        return disk_off(c, rc);
    d = tfs_calloc(1, sizeof(*d));
    if (d == NULL || (d->dir = tfs_strdup(path)) == NULL ||
        (d->packs = tfs_strdup(packs)) == NULL) {
        if (d != NULL)
            tfs_free(d->dir);
        tfs_free(d);
        return -ENOMEM;
    }
    d->mode = c->cfg.cache_mode;
    d->pack_fd = -1;
    /* Packs are evicted whole: a cache holds 64 of them or more. */
    d->pack_max = !c->cfg.disk_packs || c->cfg.cache_size < DISK_PACK_CACHE
                      ? 0
                  : c->cfg.cache_size < DISK_PACK_BIG ? DISK_PACK_SMALL
                                                      : DISK_PACK_MAX;
    pthread_mutex_init(&d->pack_lock, NULL);
    pthread_mutex_init(&d->lock, NULL);
    rc = tfs_cond_init_mono(&d->cond);  /* the writers' linger */
    pthread_cond_init(&d->idle, NULL);
    c->disk = d;
    if (rc == 0)
        rc = disk_open_index(c, d);
    for (unsigned i = 0; rc == 0 && i < DISK_WRITERS; i++)
        if (pthread_create(&d->writer[i], NULL, disk_writer, c) == 0)
            d->n_writers++;
    if (rc == 0 && d->n_writers == 0)
        rc = -EAGAIN;
    if (rc < 0) {
        tfs_index_close(d->ix);
        d->ix = NULL;
        pthread_mutex_destroy(&d->pack_lock);
        tfs_free(d->packs);
        tfs_free(d->dir);
        tfs_free(d);
        c->disk = NULL;
        if (rc != -EAGAIN)
            rc = disk_off(c, rc);
    }
    return rc;
}

void tfs_disk_close(struct tfs_cache *c)
{
    struct tfs_disk *d = c->disk;

    if (d == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    for (unsigned i = 0; i < d->n_writers; i++)
        pthread_join(d->writer[i], NULL);   /* they drain the queue first */
    tfs_index_close(d->ix);
    disk_pack_done(d->pack_fd);
    pthread_mutex_destroy(&d->pack_lock);
    tfs_free(d->packs);
    pthread_cond_destroy(&d->idle);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->lock);
    tfs_free(d->dir);
    tfs_free(d);
    c->disk = NULL;
}

void tfs_disk_flush(struct tfs_cache *c)
{
    struct tfs_disk *d = c->disk;

    if (d == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    d->flushing++;                      /* no writer lingers meanwhile */
    if (d->head != NULL)                /* queued, not yet kicked */
        pthread_cond_broadcast(&d->cond);
    while (d->head != NULL || d->busy > 0)
        pthread_cond_wait(&d->idle, &d->lock);
    d->flushing--;
    pthread_mutex_unlock(&d->lock);
}

void tfs_disk_usage(struct tfs_cache *c, uint64_t *bytes, uint64_t *blocks,
                    uint64_t *capacity)
{
    *bytes = 0;
    *blocks = 0;
    *capacity = 0;
    if (c->disk == NULL)
        return;
    tfs_index_usage(c->disk->ix, bytes, blocks);
    *capacity = disk_capacity(c);
}
