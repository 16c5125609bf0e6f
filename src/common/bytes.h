/* SPDX-License-Identifier: MIT */
/*
 * Byte-level helpers shared by every module (not installed), header only:
 *
 *   little-endian fields  tfs_put_le16/32/64, tfs_get_le16/32/64, and
 *                         tfs_put_le/tfs_get_le for a width chosen at run
 *                         time (1 to 8 bytes)
 *   hex digits            tfs_hexval (either case), tfs_hexval_lower,
 *                         tfs_hex_lower (encode)
 *
 * The on-disk and on-wire formats (trace, disk cache, metadata snapshot,
 * write-back journal, pack index) are little-endian whatever the host;
 * these read and write them a byte at a time, so p needs no alignment.
 */
#ifndef TFS_COMMON_BYTES_H
#define TFS_COMMON_BYTES_H

#include <stdint.h>

/* ---- little-endian fields ---- */

/* The low n bytes of v at p[0..n-1], least significant first; n <= 8. */
static inline void tfs_put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The n-byte little-endian value at p; n <= 8. */
static inline uint64_t tfs_get_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void tfs_put_le16(uint8_t *p, uint16_t v)
{
    tfs_put_le(p, v, 2);
}

static inline void tfs_put_le32(uint8_t *p, uint32_t v)
{
    tfs_put_le(p, v, 4);
}

static inline void tfs_put_le64(uint8_t *p, uint64_t v)
{
    tfs_put_le(p, v, 8);
}

static inline uint16_t tfs_get_le16(const uint8_t *p)
{
    return (uint16_t)tfs_get_le(p, 2);
}

static inline uint32_t tfs_get_le32(const uint8_t *p)
{
    return (uint32_t)tfs_get_le(p, 4);
}

static inline uint64_t tfs_get_le64(const uint8_t *p)
{
    return tfs_get_le(p, 8);
}

/* ---- hex digits ---- */

/* The value of hex digit c ('0'-'9', 'a'-'f', 'A'-'F'); -1 for any other. */
static inline int tfs_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* As tfs_hexval, but uppercase is refused (-1): for names and sums that
 * tierfs writes itself in lowercase, where one value has one spelling. */
static inline int tfs_hexval_lower(int c)
{
    return c >= 'A' && c <= 'F' ? -1 : tfs_hexval(c);
}

/* len bytes of in as 2*len lowercase hex digits and a NUL into out. */
static inline void tfs_hex_lower(char *out, const void *in, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)in;

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * len] = '\0';
}

#endif /* TFS_COMMON_BYTES_H */
