/* SPDX-License-Identifier: MIT */
/*
 * Small utilities (util.h): a per-thread PRNG, RFC 3986 percent-encoding,
 * and strict whole-string number parsers for options.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/util.h"

#define UTIL_IO_MAX ((size_t)1 << 30)   /* bytes per read or write call */

/* Write all of buf at off, or at the file's position when at_pos. */
static int util_write_all(int fd, const void *buf, size_t len, uint64_t off,
                          bool at_pos)
{
    while (len > 0) {
        size_t want = TFS_MIN(len, UTIL_IO_MAX);
        ssize_t n = at_pos ? write(fd, buf, want)
                           : pwrite(fd, buf, want, (off_t)off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        buf = (const char *)buf + n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int tfs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    return util_write_all(fd, buf, len, off, false);
}

int tfs_write_all(int fd, const void *buf, size_t len)
{
    return util_write_all(fd, buf, len, 0, true);
}

int tfs_pread_full(int fd, void *buf, size_t len, uint64_t off,
                   size_t *nread)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done,
                          TFS_MIN(len - done, UTIL_IO_MAX),
                          (off_t)(off + done));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *nread = done;
    return 0;
}

static _Thread_local uint64_t rand_s[4];
static _Thread_local bool rand_seeded;

static uint64_t rand_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rand_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t tfs_rand_u64(void)
{
    uint64_t r;
    uint64_t t;

    if (!rand_seeded) {
        uint64_t seed = tfs_now_ns() ^ ((uint64_t)getpid() << 32) ^
                        (uint64_t)(uintptr_t)&rand_seeded;
        for (int i = 0; i < 4; i++)
            rand_s[i] = rand_splitmix(&seed);
        rand_seeded = true;
    }
    r = rand_rotl(rand_s[1] * 5, 7) * 9;
    t = rand_s[1] << 17;
    rand_s[2] ^= rand_s[0];
    rand_s[3] ^= rand_s[1];
    rand_s[1] ^= rand_s[2];
    rand_s[0] ^= rand_s[3];
    rand_s[2] ^= t;
    rand_s[3] = rand_rotl(rand_s[3], 45);
    return r;
}

double tfs_rand_double(void)
{
    return (double)(tfs_rand_u64() >> 11) * 0x1.0p-53;
}

static bool pct_is_unreserved(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

int tfs_pct_encode(struct tfs_buf *b, const char *s, size_t len,
                   bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char esc[3];
    int rc = 0;

    for (size_t i = 0; i < len && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        if (pct_is_unreserved(c) || (keep_slash && c == '/')) {
            rc = tfs_buf_append(b, &s[i], 1);
            continue;
        }
        esc[0] = '%';
        esc[1] = hex[c >> 4];
        esc[2] = hex[c & 15];
        rc = tfs_buf_append(b, esc, 3);
    }
    return rc;
}

int tfs_pct_decode(char *s)
{
    char *w = s;

    for (const char *r = s; *r != '\0'; r++) {
        int hi;
        int lo;

        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        hi = tfs_hexval(r[1]);
        lo = hi < 0 ? -1 : tfs_hexval(r[2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return TFS_EURI;
        *w++ = (char)(hi * 16 + lo);
        r += 2;
    }
    *w = '\0';
    return 0;
}

int tfs_parse_u64(const char *s, uint64_t *out)
{
    unsigned long long v;
    char *end;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return TFS_EOPTION;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return TFS_EOPTION;
    *out = v;
    return 0;
}

/* The multiplier of a size suffix, or 0 when unknown. */
static uint64_t parse_size_unit(const char *u)
{
    static const struct {
        const char *name;
        uint64_t mult;
    } units[] = {
        {"", 1}, {"B", 1},
        {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000ull},
        {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000ull},
        {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
        {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull},
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(units); i++) {
        if (strcasecmp(u, units[i].name) == 0 &&
            (strlen(u) < 2 || strcmp(u + 1, units[i].name + 1) == 0))
            return units[i].mult;
    }
    return 0;
}

int tfs_parse_size(const char *s, uint64_t *out)
{
    uint64_t mult;
    double v;
    char *end;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return TFS_EOPTION;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(v))
        return TFS_EOPTION;
    mult = parse_size_unit(end);
    if (mult == 0 || v * (double)mult >= 18446744073709551615.0)
        return TFS_EOPTION;
    *out = (uint64_t)(v * (double)mult + 0.5);
    return 0;
}

int tfs_parse_double(const char *s, double *out)
{
    double v;
    char *end;

    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return TFS_EOPTION;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return TFS_EOPTION;
    *out = v;
    return 0;
}

int tfs_parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "true", "yes", "on", ""};
    static const char *no[] = {"0", "false", "no", "off"};

    for (size_t i = 0; i < TFS_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
    }
    for (size_t i = 0; i < TFS_ARRAY_LEN(no); i++) {
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return TFS_EOPTION;
}

const char *tfs_fmt_bytes(char *buf, size_t len, double bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    size_t i = 0;

    while (bytes >= 1024.0 && i + 1 < TFS_ARRAY_LEN(units)) {
        bytes /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.1f %s", bytes, units[i]);
    return buf;
}
