/* SPDX-License-Identifier: MIT */
/*
 * The journal: STAGING/journal, an append-only log of the overlay's
 * changes, so that staged work survives kill -9 and a reboot.  In order:
 *
 *   encoding     ops, little-endian, field by field
 *   appending    one record per change, under wb->lock (keeps the order)
 *   group commit one fdatasync covers every record appended before it
 *   compaction   rewrite as one op per live entry, atomically (rename)
 *   replay       at open: every intact record; after damage, the next
 *                intact one (resync); bad bytes kept in lost+found
 *
 * Format (docs/writeback.md):
 *
 *   file    "TFSWBJ1\n", then records
 *   record  u32 length | u64 XXH3-64 of the payload | payload
 *   payload one or more ops, applied in order; a record is atomic
 *   op      u8 type | u16 key length | key | body
 *     HEAD      (key: the store's identity) u64 created (ns since epoch)
 *     FILE      u64 data id | u64 size | i64 mtime_ns | u8 flags
 *     MOVED     u16 source length | source | u64 size | i64 mtime_ns |
 *               u8 version length | version
 *     WHITEOUT  -
 *     DIR       u8 flags (1 local, 2 hidden)
 *     CLEAR     -
 *
 * The last op about a key is its state.  A FILE op is appended only after
 * its data file is fdatasynced, so it always names complete bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "tierfs/log.h"
#include "wb/wb_int.h"

#define J_MAGIC "TFSWBJ1\n"
#define J_HDR 12                        /* u32 length + u64 checksum */
#define J_REC_MAX (256u << 20)          /* a record larger is corrupt */
#define J_COMPACT_MIN (8u << 20)

/* ---- encoding ---- */

static void put_le(struct tfs_buf *b, uint64_t v, unsigned n)
{
    uint8_t p[8];

    tfs_put_le(p, v, n);
    tfs_buf_append(b, p, n);
}

static void put_str(struct tfs_buf *b, const char *s, unsigned lenbytes)
{
    size_t len = strlen(s);

    put_le(b, len, lenbytes);
    tfs_buf_append(b, s, len);
}

void wb_jop_key(struct tfs_buf *b, int op, const char *key)
{
    put_le(b, (uint64_t)op, 1);
    put_str(b, key, 2);
}

void wb_jop_file(struct tfs_buf *b, const char *key, uint64_t id,
                 uint64_t size, int64_t mtime_ns, unsigned flags)
{
    wb_jop_key(b, WB_J_FILE, key);
    put_le(b, id, 8);
    put_le(b, size, 8);
    put_le(b, (uint64_t)mtime_ns, 8);
    put_le(b, flags, 1);
}

void wb_jop_moved(struct tfs_buf *b, const char *key, const char *src,
                  const struct tfs_stat *st)
{
    wb_jop_key(b, WB_J_MOVED, key);
    put_str(b, src, 2);
    put_le(b, st->size, 8);
    put_le(b, (uint64_t)st->mtime_ns, 8);
    put_str(b, st->version, 1);
}

void wb_jop_dir(struct tfs_buf *b, const char *key, unsigned dflags)
{
    wb_jop_key(b, WB_J_DIR, key);
    put_le(b, dflags, 1);
}

void wb_jop_ent(struct tfs_wb *wb, struct tfs_buf *b, const struct wb_ent *e)
{
    const struct wb_node *n = e->node;

    switch (e->kind) {
    case WB_NODE:
        if (n->has_sealed)
            wb_jop_file(b, e->h.key, n->sealed_id, n->sealed_size,
                        n->sealed_mtime_ns,
                        n->maybe_in_store ? WB_JF_IN_STORE : 0);
        else                            /* not closed yet: what was here */
            wb_jop_key(b, n->maybe_in_store ? WB_J_WHITEOUT : WB_J_CLEAR,
                       e->h.key);
        break;
    case WB_MOVED:
        wb_jop_moved(b, e->h.key, e->src, &e->st);
        break;
    case WB_WHITEOUT:
        wb_jop_key(b, WB_J_WHITEOUT, e->h.key);
        break;
    case WB_DIRENT:
        wb_jop_dir(b, e->h.key, e->dflags);
        break;
    default:
        wb_jop_key(b, WB_J_CLEAR, e->h.key);
        break;
    }
}

/* ---- appending and group commit ---- */

static void j_fail(struct tfs_wb *wb, int rc);

/* Write all of iov at off; -errno. */
static int j_pwritev(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        off += (uint64_t)w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static void j_header(uint8_t *hdr, const struct tfs_buf *b)
{
    uint64_t sum = XXH3_64bits(b->p, b->len);

    tfs_put_le32(hdr, (uint32_t)b->len);
    tfs_put_le64(hdr + 4, sum);
}

int wb_journal_append(struct tfs_wb *wb, struct tfs_buf *b, uint64_t *end)
{
    struct wb_journal *j = &wb->j;
    uint8_t hdr[J_HDR];
    struct iovec iov[2];
    int rc;

    if (end != NULL)
        *end = j->end;
    rc = tfs_buf_error(b);
    if (rc < 0) {                       /* an op is missing a field */
        tfs_buf_reset(b);
        return tfs_err(rc, "journal: cannot build a record");
    }
    if (b->len == 0)
        return 0;
    rc = atomic_load(&j->err);
    if (rc < 0)
        return tfs_err(rc, "journal: an earlier write or sync failed; "
                       "changes fail until the journal is rewritten");
    if (b->len > J_REC_MAX)
        return tfs_err(-E2BIG, "journal: record of %zu bytes", b->len);
    j_header(hdr, b);
    iov[0] = (struct iovec){hdr, J_HDR};
    iov[1] = (struct iovec){b->p, b->len};
    rc = j_pwritev(j->fd, iov, 2, j->size);
    if (rc < 0) {
        TFS_ERROR("journal: write failed: %s", tfs_strerror(rc));
        if (ftruncate(j->fd, (off_t)j->size) < 0)
            j_fail(wb, -EIO);           /* a torn record may follow */
        return rc;
    }
    j->size += J_HDR + b->len;
    j->end += J_HDR + b->len;
    if (end != NULL)
        *end = j->end;
    tfs_buf_reset(b);
    if (j->size >= j->compact_at)
        wb_upload_kick(wb);             /* the scheduler compacts */
    return 0;
}

/* Raise j->synced to at least v. */
static void j_synced_max(struct wb_journal *j, uint64_t v)
{
    uint_fast64_t cur = atomic_load(&j->synced);

    while (cur < v && !atomic_compare_exchange_weak(&j->synced, &cur, v))
        ;
}

/*
 * Make the journal refuse every append and sync from now on (the first
 * error is kept), until a compaction has written a fresh, synced file;
 * the scheduler compacts at its next pass.  wb->lock held.
 */
static void j_fail(struct tfs_wb *wb, int rc)
{
    int zero = 0;

    atomic_compare_exchange_strong(&wb->j.err, &zero, rc);
    wb->j.compact_at = 0;
    wb_upload_kick(wb);
}

/* One fdatasync for everyone who appended before target; sticky on
   failure.  sync_lock held. */
static int j_sync_locked(struct wb_journal *j, int fd, uint64_t target)
{
    int rc = atomic_load(&j->err);
    int zero = 0;

    if (rc < 0)
        return tfs_err(rc, "journal: an earlier sync failed; changes fail "
                       "until the journal is rewritten");
    if (fdatasync(fd) < 0) {
        rc = tfs_err(-errno, "journal: fdatasync failed");
        atomic_compare_exchange_strong(&j->err, &zero, rc);
        TFS_ERROR("journal: fdatasync failed: %s: changes fail until the "
                  "journal is rewritten", tfs_strerror(rc));
        return rc;
    }
    j_synced_max(j, target);
    return 0;
}

/*
 * Group commit: whoever holds sync_lock fdatasyncs for everyone who
 * appended before it.  The descriptor is a dup, so a compaction swapping
 * the file meanwhile (it syncs everything itself) cannot make this sync
 * another file.  A failed fdatasync is never forgotten (the kernel may
 * have dropped the pages it failed to write, and a later fdatasync
 * would succeed without them): it fails this caller, every caller
 * waiting on the same range and every later change, until compaction
 * has rewritten the journal from the overlay.
 */
int wb_journal_sync(struct tfs_wb *wb, uint64_t end)
{
    struct wb_journal *j = &wb->j;
    uint64_t target;
    int fd;
    int rc = 0;

    if (atomic_load(&j->synced) >= end)
        return 0;
    pthread_mutex_lock(&wb->lock);
    target = j->end;
    fd = fcntl(j->fd, F_DUPFD_CLOEXEC, 0);
    pthread_mutex_unlock(&wb->lock);
    if (fd < 0)
        return tfs_err(-errno, "journal: dup failed");
    pthread_mutex_lock(&j->sync_lock);
    if (atomic_load(&j->synced) < end)
        rc = j_sync_locked(j, fd, target);
    pthread_mutex_unlock(&j->sync_lock);
    close(fd);
    if (rc < 0) {
        pthread_mutex_lock(&wb->lock);
        j_fail(wb, rc);
        pthread_mutex_unlock(&wb->lock);
    }
    return rc;
}

/* ---- compaction ---- */

static int j_write_file(int fd, const struct tfs_buf *b)
{
    struct iovec iov = {b->p, b->len};

    if (j_pwritev(fd, &iov, 1, 0) < 0 || fsync(fd) < 0)
        return tfs_err(-errno, "journal: cannot write journal.tmp");
    return 0;
}

/* Append one record holding ops to file image img. */
static int j_put_record(struct tfs_buf *img, struct tfs_buf *ops)
{
    uint8_t hdr[J_HDR];
    int rc;

    rc = tfs_buf_error(ops);            /* never seal a partial record */
    if (rc == 0 && ops->len > 0) {
        j_header(hdr, ops);
        tfs_buf_append(img, hdr, J_HDR);
        tfs_buf_append(img, ops->p, ops->len);
        rc = tfs_buf_error(img);
    }
    tfs_buf_reset(ops);
    return rc;
}

/* The whole journal as it would be written now: head + live entries. */
static int j_image(struct tfs_wb *wb, struct tfs_buf *img)
{
    struct tfs_hmap_iter it;
    const struct wb_ent *e;
    struct tfs_buf ops;
    int rc;

    tfs_buf_init(&ops, 0);
    tfs_buf_append(img, J_MAGIC, 8);
    wb_jop_key(&ops, WB_J_HEAD, tfs_store_identity(wb->st));
    put_le(&ops, (uint64_t)tfs_wall_ns(), 8);
    rc = j_put_record(img, &ops);
    tfs_hmap_iter_init(&it, &wb->ents);
    while (rc == 0 && (e = wb_ent_of(tfs_hmap_iter_next(&it))) != NULL) {
        if (e->kind == WB_NONE ||
            (e->kind == WB_NODE && !e->node->has_sealed &&
             !e->node->maybe_in_store))
            continue;
        wb_jop_ent(wb, &ops, e);
        if (ops.len >= (1u << 20))
            rc = j_put_record(img, &ops);
    }
    if (rc == 0)
        rc = j_put_record(img, &ops);
    tfs_buf_cleanup(&ops);
    return rc < 0 ? rc : tfs_buf_error(img);
}

int wb_journal_compact(struct tfs_wb *wb)
{
    struct wb_journal *j = &wb->j;
    struct tfs_buf img;
    int fd;
    int rc;

    tfs_buf_init(&img, 0);
    rc = j_image(wb, &img);
    fd = rc == 0 ? openat(j->dir_fd, "journal.tmp", O_RDWR | O_CREAT |
                          O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (rc == 0 && fd < 0)
        rc = tfs_err(-errno, "journal: cannot create journal.tmp");
    if (rc == 0)
        rc = j_write_file(fd, &img);
    if (rc == 0 && renameat(j->dir_fd, "journal.tmp", j->dir_fd,
                            "journal") < 0)
        rc = tfs_err(-errno, "journal: cannot rename journal.tmp");
    if (rc == 0 && fsync(j->dir_fd) < 0)
        rc = tfs_err(-errno, "journal: cannot fsync the staging dir");
    if (rc == 0) {
        close(j->fd);
        j->fd = fd;
        j->size = img.len;
        j_synced_max(j, j->end);
        atomic_store(&j->err, 0);       /* a fresh, synced file */
        j->compact_at = TFS_MAX((uint64_t)J_COMPACT_MIN, 4 * img.len);
        atomic_fetch_add(&wb->n.compactions, 1);
    } else if (fd >= 0) {
        close(fd);
        unlinkat(j->dir_fd, "journal.tmp", 0);
        /* try again later: at the next pass while changes fail */
        j->compact_at = atomic_load(&j->err) < 0 ? j->size
                                                 : j->size * 2;
    }
    tfs_buf_cleanup(&img);
    return rc;
}

/* ---- replay ---- */

struct j_cur {
    const uint8_t *p;
    const uint8_t *end;
    bool           bad;
};

static uint64_t get_le(struct j_cur *c, unsigned n)
{
    uint64_t v;

    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = true;
        return 0;
    }
    v = tfs_get_le(c->p, n);
    c->p += n;
    return v;
}

/* A string of lenbytes-long length into buf (size max+1). */
static void get_str(struct j_cur *c, unsigned lenbytes, char *buf,
                    size_t max)
{
    size_t len = (size_t)get_le(c, lenbytes);

    if (c->bad || len > max || (size_t)(c->end - c->p) < len ||
        memchr(c->p, '\0', len) != NULL) {
        c->bad = true;
        buf[0] = '\0';
        return;
    }
    memcpy(buf, c->p, len);
    buf[len] = '\0';
    c->p += len;
}

/* Decode one op; the body per type.  c->bad on anything malformed. */
static void j_decode_op(struct j_cur *c, struct wb_jent *j, char *key,
                        char *src)
{
    memset(j, 0, sizeof(*j));
    j->op = (int)get_le(c, 1);
    get_str(c, 2, key, WB_KEY_MAX);
    j->key = key;
    j->src = src;
    src[0] = '\0';
    if (j->op == WB_J_HEAD) {
        j->mtime_ns = (int64_t)get_le(c, 8);
    } else if (j->op == WB_J_FILE) {
        j->id = get_le(c, 8);
        j->size = get_le(c, 8);
        j->mtime_ns = (int64_t)get_le(c, 8);
        j->flags = (unsigned)get_le(c, 1);
    } else if (j->op == WB_J_MOVED) {
        get_str(c, 2, src, WB_KEY_MAX);
        j->st.size = get_le(c, 8);
        j->st.mtime_ns = (int64_t)get_le(c, 8);
        get_str(c, 1, j->st.version, TFS_VERSION_MAX - 1);
    } else if (j->op == WB_J_DIR) {
        j->flags = (unsigned)get_le(c, 1);
    } else if (j->op != WB_J_WHITEOUT && j->op != WB_J_CLEAR) {
        c->bad = true;
    }
}

/* Whether a payload is whole ops to its end. */
static bool j_payload_ok(const uint8_t *p, size_t len)
{
    struct j_cur c = {p, p + len, false};
    char key[WB_KEY_MAX + 1];
    char src[WB_KEY_MAX + 1];
    struct wb_jent j;

    while (!c.bad && c.p < c.end)
        j_decode_op(&c, &j, key, src);
    return !c.bad;
}

/* Feed the ops of one record's payload (checked whole) to fn. */
static int j_replay_record(struct tfs_wb *wb, const uint8_t *p, size_t len,
                           wb_replay_fn *fn)
{
    struct j_cur c = {p, p + len, false};
    char key[WB_KEY_MAX + 1];
    char src[WB_KEY_MAX + 1];
    struct wb_jent j;
    int rc = 0;

    while (rc == 0 && c.p < c.end) {
        j_decode_op(&c, &j, key, src);
        rc = c.bad ? TFS_EFORMAT : fn(wb, &j);
    }
    return rc;
}

/*
 * The length of the intact record at off (header included), or 0: its
 * length fits, its payload matches its checksum and decodes whole.  The
 * cheap tests come first, since resynchronising tries every offset.
 */
static size_t j_record_at(const uint8_t *img, size_t len, size_t off)
{
    const uint8_t *p = img + off + J_HDR;
    uint64_t rlen;

    if (len - off < J_HDR + 3)
        return 0;
    rlen = tfs_get_le32(img + off);
    if (rlen < 3 || rlen > J_REC_MAX || rlen > len - off - J_HDR)
        return 0;
    if (p[0] < WB_J_HEAD || p[0] > WB_J_CLEAR ||
        tfs_get_le16(p + 1) > rlen - 3)
        return 0;
    if (XXH3_64bits(p, rlen) != tfs_get_le64(img + off + 4) ||
        !j_payload_ok(p, rlen))
        return 0;
    return J_HDR + (size_t)rlen;
}

/* The offset of the next intact record after a bad one at off, or len. */
static size_t j_resync(const uint8_t *img, size_t len, size_t off)
{
    for (size_t o = off + 1; o + J_HDR < len; o++) {
        if (j_record_at(img, len, o) > 0)
            return o;
    }
    return len;
}

/*
 * Bytes [off, off + n) of the journal are no intact record: keep them
 * in lost+found (what they recorded is lost from the overlay, and the
 * data files only they name are set aside by the sweep).  A range that
 * reaches the end is a torn tail, the normal trace of a crash during an
 * append, logged as such.
 */
static int j_set_aside(struct tfs_wb *wb, const uint8_t *img, size_t len,
                       size_t off, size_t n)
{
    char name[80];
    char where[160];
    int rc;

    snprintf(name, sizeof(name), "journal-%zu-%zu.bin", off, n);
    rc = wb_lost_put(wb, name, img + off, n, where, sizeof(where));
    if (rc < 0)
        return rc;
    wb->j.rp_bad++;
    wb->j.rp_bad_bytes += n;
    if (off + n == len)
        TFS_WARN("journal: cut off a torn tail of %zu bytes at offset %zu "
                 "(a change in progress at the crash), kept as %s", n, off,
                 where);
    else
        TFS_ERROR("journal: %zu bytes at offset %zu are no intact record "
                  "(damaged); replay went on at offset %zu; the bytes are "
                  "kept as %s", n, off, off + n, where);
    return 0;
}

/* Walk the records of the image, resynchronising after damage. */
static int j_replay(struct tfs_wb *wb, const uint8_t *img, size_t len,
                    wb_replay_fn *fn)
{
    size_t off = 8;
    int rc = 0;

    while (rc == 0 && off < len) {
        size_t n = j_record_at(img, len, off);
        size_t next;

        if (n > 0) {
            rc = j_replay_record(wb, img + off + J_HDR, n - J_HDR, fn);
            wb->j.rp_records++;
            off += n;
            continue;
        }
        next = j_resync(img, len, off);
        rc = j_set_aside(wb, img, len, off, next - off);
        off = next;
    }
    return rc;
}

static int j_read_all(int fd, struct tfs_buf *b)
{
    char chunk[65536];
    ssize_t n;

    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tfs_err(-errno, "journal: read failed");
        if (tfs_buf_append(b, chunk, (size_t)n) < 0)
            return -ENOMEM;
    }
    return 0;
}

int wb_journal_open(struct tfs_wb *wb, wb_replay_fn *fn)
{
    struct wb_journal *j = &wb->j;
    struct tfs_buf img;
    int rc;

    pthread_mutex_init(&j->sync_lock, NULL);
    j->compact_at = J_COMPACT_MIN;
    j->fd = openat(j->dir_fd, "journal", O_RDWR | O_CREAT | O_CLOEXEC,
                   0600);
    if (j->fd < 0)
        return tfs_err(-errno, "cannot open %s/journal",
                       wb->cfg.staging_dir);
    tfs_buf_init(&img, 0);
    rc = j_read_all(j->fd, &img);
    if (rc == 0 && img.len > 0 &&
        (img.len < 8 || memcmp(img.p, J_MAGIC, 8) != 0))
        rc = tfs_err(TFS_EFORMAT, "%s/journal is not a tierfs journal",
                     wb->cfg.staging_dir);
    j->rp_empty = img.len == 0;
    if (rc == 0 && img.len > 0)
        rc = j_replay(wb, (const uint8_t *)img.p, img.len, fn);
    j->size = img.len;
    tfs_buf_cleanup(&img);
    return rc;
}

void wb_journal_close(struct tfs_wb *wb)
{
    if (wb->j.fd >= 0)
        close(wb->j.fd);
    wb->j.fd = -1;
    pthread_mutex_destroy(&wb->j.sync_lock);
}
