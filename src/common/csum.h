/* SPDX-License-Identifier: MIT */
/*
 * The chunked digest of a block (csum.c): XXH3-64 over the little-endian
 * XXH3-64s of each TFS_CSUM_CHUNK bytes of it (the last chunk may be
 * shorter).  The disk tier keeps exactly those chunk sums in each block
 * file's header (cache/disk.c), so a block loaded from disk has its
 * digest for the cost of hashing 8 bytes a chunk; the cache group sends
 * it with every block it serves, and the receiver computes it chunk by
 * chunk while the bytes arrive, on data still in the CPU's cache.
 */
#ifndef TFS_COMMON_CSUM_H
#define TFS_COMMON_CSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFS_CSUM_CHUNK 65536u

/* XXH3-64 of len bytes, the same value as libxxhash's XXH3_64bits: on a
 * CPU with AVX2, by a copy of it built for AVX2 (xxh3_wide.c), which
 * hashes a block about 1.4-2.4x as fast as the library's SSE2 build.
 * For the bulk hashing of the cache's blocks (chunk sums, the disk
 * tier); tfs_xxh3_is_wide says which one runs. */
uint64_t tfs_xxh3(const void *data, size_t len);
bool tfs_xxh3_is_wide(void);
#if defined(TFS_XXH3_WIDE)
uint64_t tfs_xxh3_wide(const void *data, size_t len);   /* AVX2 only */
#endif

/* The digest of len bytes at data into *out: 0, or -ENOMEM for a block
 * over 64 MiB (up to that the chunk sums are kept on the stack). */
int tfs_csum_digest(const void *data, size_t len, uint64_t *out);

/* The digest from n chunk sums already computed (8 bytes each, LE). */
uint64_t tfs_csum_of_sums(const void *sums, size_t n);

/* Incremental: the bytes of one block of len arrive in order into one
 * buffer; call tfs_csum_feed with how many are there so far. */
struct tfs_csum {
    uint8_t *sums;          /* 8 * n_chunks */
    size_t   len;
    size_t   done;          /* bytes hashed: whole chunks */
};

int tfs_csum_begin(struct tfs_csum *s, size_t len);     /* 0 or -ENOMEM */
void tfs_csum_feed(struct tfs_csum *s, const uint8_t *data, size_t have);
/* The bytes are written again from the start: what was fed is void. */
void tfs_csum_restart(struct tfs_csum *s);
/* The digest once all len bytes are there (feeds what is left). */
uint64_t tfs_csum_end(struct tfs_csum *s, const uint8_t *data);
void tfs_csum_cleanup(struct tfs_csum *s);

#endif /* TFS_COMMON_CSUM_H */
