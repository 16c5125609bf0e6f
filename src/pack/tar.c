/* SPDX-License-Identifier: MIT */
/*
 * POSIX ustar member headers (POSIX.1-2001 pax interchange format).
 *
 * Encoding writes what every reader accepts (GNU tar, Python's tarfile
 * and so the webdataset library, DALI): a 512-byte ustar header with the
 * name in the name field (up to 100 bytes) or split at a '/' between the
 * prefix and name fields (up to 256 bytes); longer names, and sizes the
 * 11-digit octal field cannot hold, go in a pax extended header ('x')
 * before it.  Mode 0644, uid/gid 0, owner "tierfs", the source mtime.
 *
 * Parsing accepts ustar and GNU headers, pax 'x'/'g' and GNU 'L'/'K'
 * extension headers, octal and base-256 numbers, and checks every
 * header's checksum.  It is the code libFuzzer runs (tests/fuzz/
 * fuzz_tar.c): it never reads outside the buffer it is given and bounds
 * the header blocks of one member to TFS_TAR_HDR_MAX.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "pack/pack_int.h"

#define TAR_NAME      0
#define TAR_MODE      100
#define TAR_UID       108
#define TAR_GID       116
#define TAR_SIZE      124
#define TAR_MTIME     136
#define TAR_CHKSUM    148
#define TAR_TYPE      156
#define TAR_MAGIC     257
#define TAR_VERSION   263
#define TAR_UNAME     265
#define TAR_GNAME     297
#define TAR_DEVMAJOR  329
#define TAR_DEVMINOR  337
#define TAR_PREFIX    345
#define TAR_OCTAL_MAX 077777777777ull   /* 11 octal digits */
#define TAR_PAX_NAME  "././@PaxHeader"

/* ---- encoding ---- */

/* v as width-1 zero-padded octal digits and a NUL. */
static void tar_octal(unsigned char *f, size_t width, uint64_t v)
{
    f[width - 1] = '\0';
    for (size_t i = width - 1; i > 0; i--) {
        f[i - 1] = (unsigned char)('0' + (v & 7));
        v >>= 3;
    }
}

/* GNU base-256: 0x80, then the value big-endian in the other bytes. */
static void tar_base256(unsigned char *f, size_t width, uint64_t v)
{
    f[0] = 0x80;
    for (size_t i = width - 1; i > 0; i--) {
        f[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* The header's checksum: its bytes summed, the checksum field as spaces. */
static unsigned tar_sum(const unsigned char *h)
{
    unsigned sum = 8 * ' ';

    for (size_t i = 0; i < TAR_CHKSUM; i++)
        sum += h[i];
    for (size_t i = TAR_CHKSUM + 8; i < TFS_TAR_BLOCK; i++)
        sum += h[i];
    return sum;
}

/* One header block: name split by the caller into prefix and name. */
static void tar_header(unsigned char *h, const char *prefix, size_t plen,
                       const char *name, size_t nlen, uint64_t size,
                       int64_t mtime_s, char type)
{
    uint64_t mtime = mtime_s < 0 ? 0 : (uint64_t)mtime_s;

    memset(h, 0, TFS_TAR_BLOCK);
    memcpy(h + TAR_NAME, name, nlen);
    memcpy(h + TAR_PREFIX, prefix, plen);
    tar_octal(h + TAR_MODE, 8, 0644);
    tar_octal(h + TAR_UID, 8, 0);
    tar_octal(h + TAR_GID, 8, 0);
    if (size > TAR_OCTAL_MAX)
        tar_base256(h + TAR_SIZE, 12, size);
    else
        tar_octal(h + TAR_SIZE, 12, size);
    tar_octal(h + TAR_MTIME, 12, TFS_MIN(mtime, TAR_OCTAL_MAX));
    h[TAR_TYPE] = (unsigned char)type;
    memcpy(h + TAR_MAGIC, "ustar", 6);
    memcpy(h + TAR_VERSION, "00", 2);
    memcpy(h + TAR_UNAME, "tierfs", 6);
    memcpy(h + TAR_GNAME, "tierfs", 6);
    tar_octal(h + TAR_DEVMAJOR, 8, 0);
    tar_octal(h + TAR_DEVMINOR, 8, 0);
    tar_octal(h + TAR_CHKSUM, 7, tar_sum(h));
    h[TAR_CHKSUM + 7] = ' ';
}

/* Where to split name into prefix '/' rest, or 0 when it cannot be. */
static size_t tar_split(const char *name, size_t len)
{
    for (size_t i = TFS_MIN(len, (size_t)156); i-- > 0;) {
        if (name[i] == '/' && i <= 155 && len - i - 1 <= 100 &&
            len - i - 1 > 0)
            return i;
    }
    return 0;
}

/* One "LEN key=value\n" pax record, LEN counting the whole record. */
static size_t tar_pax_record(char *out, size_t cap, const char *key,
                             const char *val, size_t vlen)
{
    size_t body = 1 + strlen(key) + 1 + vlen + 1;   /* " k=v\n" */
    size_t n = body + 1;
    int w;

    while ((size_t)snprintf(NULL, 0, "%zu", n) + body != n)
        n = (size_t)snprintf(NULL, 0, "%zu", n) + body;
    if (n > cap)
        return 0;
    w = snprintf(out, cap, "%zu %s=", n, key);
    memcpy(out + w, val, vlen);
    out[n - 1] = '\n';
    return n;
}

/* The pax header ('x' block and its data) for name and size. */
static int tar_pax(const char *name, size_t nlen, uint64_t size,
                   int64_t mtime_s, unsigned char *buf, size_t cap,
                   size_t *len)
{
    char data[TFS_TAR_NAME_MAX + 64];
    char num[24];
    size_t dlen = 0;
    size_t n;

    if (nlen > 100) {
        dlen = tar_pax_record(data, sizeof(data), "path", name, nlen);
        if (dlen == 0)
            return tfs_err(TFS_EBADKEY, "member name too long");
    }
    if (size > TAR_OCTAL_MAX) {
        n = (size_t)snprintf(num, sizeof(num), "%llu",
                             (unsigned long long)size);
        dlen += tar_pax_record(data + dlen, sizeof(data) - dlen, "size",
                               num, n);
    }
    *len = TFS_TAR_BLOCK + pack_round512(dlen);
    if (*len > cap)
        return -ENOSPC;
    tar_header(buf, "", 0, TAR_PAX_NAME, strlen(TAR_PAX_NAME), dlen,
               mtime_s, 'x');
    memset(buf + TFS_TAR_BLOCK, 0, *len - TFS_TAR_BLOCK);
    memcpy(buf + TFS_TAR_BLOCK, data, dlen);
    return 0;
}

int tfs_tar_encode(const char *name, uint64_t size, int64_t mtime_s,
                   unsigned char *buf, size_t cap, size_t *len)
{
    size_t nlen = strlen(name);
    size_t split = nlen > 100 ? tar_split(name, nlen) : 0;
    size_t pax = 0;
    int rc;

    if (nlen == 0 || nlen > TFS_TAR_NAME_MAX)
        return tfs_err(TFS_EBADKEY, "member name of %zu bytes", nlen);
    if ((nlen > 100 && split == 0) || size > TAR_OCTAL_MAX) {
        rc = tar_pax(name, split ? 0 : nlen, size, mtime_s, buf, cap, &pax);
        if (rc < 0)
            return rc;
    }
    if (pax + TFS_TAR_BLOCK > cap)
        return -ENOSPC;
    if (split > 0)
        tar_header(buf + pax, name, split, name + split + 1,
                   nlen - split - 1, size, mtime_s, '0');
    else
        tar_header(buf + pax, "", 0, name, TFS_MIN(nlen, (size_t)100),
                   size, mtime_s, '0');
    *len = pax + TFS_TAR_BLOCK;
    return 0;
}

uint64_t tfs_tar_end_size(uint64_t len)
{
    uint64_t end = len + 2 * TFS_TAR_BLOCK;

    return 2 * TFS_TAR_BLOCK + (TFS_TAR_RECORD - end % TFS_TAR_RECORD) %
                                   TFS_TAR_RECORD;
}

/* ---- parsing ---- */

/* A numeric field: octal (space/NUL padded) or GNU base-256. */
static int tar_number(const unsigned char *f, size_t width, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    if (f[0] == 0x80) {
        for (i = 1; i < width; i++) {
            if (v >> 55)
                return -ERANGE;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    while (i < width && f[i] == ' ')
        i++;
    for (; i < width && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -ERANGE;
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    for (; i < width; i++) {
        if (f[i] != ' ' && f[i] != '\0')
            return -EINVAL;
    }
    *out = v;
    return 0;
}

static bool tar_is_zero(const unsigned char *h)
{
    for (size_t i = 0; i < TFS_TAR_BLOCK; i++) {
        if (h[i] != 0)
            return false;
    }
    return true;
}

/* The signed-byte sum some old tars wrote (with the field as spaces). */
static int tar_signed_sum(const unsigned char *h)
{
    int sum = 0;

    for (size_t i = 0; i < TFS_TAR_BLOCK; i++)
        sum += (i >= TAR_CHKSUM && i < TAR_CHKSUM + 8) ? ' '
                                                       : (signed char)h[i];
    return sum;
}

/* Checksum (unsigned, or the signed sum old tars wrote) and magic. */
static int tar_check(const unsigned char *h, size_t off, bool *posix)
{
    uint64_t stored;
    unsigned sum = tar_sum(h);

    if (tar_number(h + TAR_CHKSUM, 8, &stored) < 0)
        return tfs_err(TFS_EFORMAT, "tar header at +%zu: unreadable "
                       "checksum field", off);
    if (stored != sum && (int64_t)stored != tar_signed_sum(h))
        return tfs_err(TFS_EFORMAT, "tar header at +%zu: checksum "
                       "mismatch (stored %llo, computed %o)", off,
                       (unsigned long long)stored, sum);
    *posix = memcmp(h + TAR_MAGIC, "ustar\0" "00", 8) == 0;
    if (!*posix && memcmp(h + TAR_MAGIC, "ustar  \0", 8) != 0)
        return tfs_err(TFS_EFORMAT, "tar header at +%zu: not a ustar "
                       "header (bad magic)", off);
    return 0;
}

/* A NUL-padded text field as a C string; returns its length. */
static size_t tar_field(char *out, const unsigned char *f, size_t width)
{
    size_t n = strnlen((const char *)f, width);

    memcpy(out, f, n);
    out[n] = '\0';
    return n;
}

/* State gathered from extension headers for the member that follows. */
struct tar_ext {
    char     name[TFS_TAR_NAME_MAX + 1];
    bool     has_name;
    uint64_t size;
    bool     has_size;
};

/* One pax record at p (at most left bytes); *used: its length. */
static int tar_pax_one(const char *p, size_t left, struct tar_ext *x,
                       size_t *used)
{
    uint64_t n = 0;
    size_t i = 0;
    const char *kv;
    const char *eq;
    size_t vlen;

    for (; i < left && i < 19 && p[i] >= '0' && p[i] <= '9'; i++)
        n = n * 10 + (uint64_t)(p[i] - '0');
    if (i == 0 || i >= left || p[i] != ' ' || n <= i + 1 || n > left ||
        p[n - 1] != '\n')
        return -EINVAL;
    kv = p + i + 1;
    eq = memchr(kv, '=', (size_t)(p + n - 1 - kv));
    if (eq == NULL)
        return -EINVAL;
    vlen = (size_t)(p + n - 1 - (eq + 1));
    if ((size_t)(eq - kv) == 4 && memcmp(kv, "path", 4) == 0) {
        if (vlen == 0 || vlen > TFS_TAR_NAME_MAX ||
            memchr(eq + 1, '\0', vlen) != NULL)
            return -EINVAL;
        memcpy(x->name, eq + 1, vlen);
        x->name[vlen] = '\0';
        x->has_name = true;
    } else if ((size_t)(eq - kv) == 4 && memcmp(kv, "size", 4) == 0) {
        char num[24];
        if (vlen == 0 || vlen >= sizeof(num))
            return -EINVAL;
        memcpy(num, eq + 1, vlen);
        num[vlen] = '\0';
        if (tfs_parse_u64(num, &x->size) < 0)
            return -EINVAL;
        x->has_size = true;
    }
    *used = (size_t)n;
    return 0;
}

static int tar_pax_parse(const unsigned char *d, size_t len, size_t off,
                         struct tar_ext *x)
{
    size_t pos = 0;

    while (pos < len) {
        size_t used = 0;
        if (tar_pax_one((const char *)d + pos, len - pos, x, &used) < 0)
            return tfs_err(TFS_EFORMAT, "pax header at +%zu: bad record "
                           "at +%zu", off, off + TFS_TAR_BLOCK + pos);
        pos += used;
    }
    return 0;
}

/* Apply one extension header (type t, data d of n bytes). */
static int tar_extension(char t, const unsigned char *d, size_t n,
                         size_t off, struct tar_ext *x)
{
    if (t == 'x')
        return tar_pax_parse(d, n, off, x);
    if (t == 'L') {
        size_t len = strnlen((const char *)d, n);
        if (len == 0 || len > TFS_TAR_NAME_MAX)
            return tfs_err(TFS_EFORMAT, "GNU long name at +%zu: %zu "
                           "bytes", off, len);
        memcpy(x->name, d, len);
        x->name[len] = '\0';
        x->has_name = true;
    }
    return 0;                           /* 'g' and 'K': nothing we use */
}

static bool tar_is_extension(char t)
{
    return t == 'x' || t == 'g' || t == 'L' || t == 'K';
}

/* The real header at h (offset off): fill m. */
static int tar_final(const unsigned char *h, size_t off, bool posix,
                     const struct tar_ext *x, struct tfs_tar_member *m)
{
    uint64_t size;
    uint64_t mtime = 0;
    size_t n = 0;

    if (tar_number(h + TAR_SIZE, 12, &size) < 0)
        return tfs_err(TFS_EFORMAT, "tar header at +%zu: bad size field",
                       off);
    (void)tar_number(h + TAR_MTIME, 12, &mtime);
    if (x->has_name) {
        memcpy(m->name, x->name, strlen(x->name) + 1);
    } else {
        if (posix && h[TAR_PREFIX] != '\0') {
            n = tar_field(m->name, h + TAR_PREFIX, 155);
            m->name[n++] = '/';
        }
        tar_field(m->name + n, h + TAR_NAME, 100);
    }
    m->size = x->has_size ? x->size : size;
    m->mtime_s = (int64_t)TFS_MIN(mtime, (uint64_t)INT64_MAX);
    m->type = h[TAR_TYPE] == '\0' ? '0' : (char)h[TAR_TYPE];
    m->hdr_len = off + TFS_TAR_BLOCK;
    return 0;
}

/* Bytes needed beyond len, or a header region that grew too long. */
static int tar_need(size_t need, size_t len, struct tfs_tar_member *m)
{
    if (need > TFS_TAR_HDR_MAX)
        return tfs_err(TFS_EFORMAT, "member headers longer than %u bytes",
                       TFS_TAR_HDR_MAX);
    if (need > len) {
        m->hdr_len = need;
        return -ENOBUFS;
    }
    return 0;
}

int tfs_tar_parse(const unsigned char *buf, size_t len,
                  struct tfs_tar_member *m)
{
    struct tar_ext x = {.has_name = false};
    size_t off = 0;

    memset(m, 0, sizeof(*m));
    for (;;) {
        const unsigned char *h = buf + off;
        uint64_t size;
        bool posix;
        int rc = tar_need(off + TFS_TAR_BLOCK, len, m);

        if (rc < 0)
            return rc;
        if (tar_is_zero(h))
            return off == 0 ? -ENODATA
                            : tfs_err(TFS_EFORMAT, "end of archive at +%zu "
                                      "after an extension header", off);
        rc = tar_check(h, off, &posix);
        if (rc < 0)
            return rc;
        if (!tar_is_extension((char)h[TAR_TYPE]))
            return tar_final(h, off, posix, &x, m);
        if (tar_number(h + TAR_SIZE, 12, &size) < 0 ||
            size > TFS_TAR_HDR_MAX)
            return tfs_err(TFS_EFORMAT, "extension header at +%zu: bad "
                           "size", off);
        rc = tar_need(off + TFS_TAR_BLOCK + (size_t)pack_round512(size),
                      len, m);
        if (rc == 0)
            rc = tar_extension((char)h[TAR_TYPE], h + TFS_TAR_BLOCK,
                               (size_t)size, off, &x);
        if (rc < 0)
            return rc;
        off += TFS_TAR_BLOCK + (size_t)pack_round512(size);
    }
}
