/* SPDX-License-Identifier: MIT */
/*
 * Internals of the pack module (src/pack/), shared by its files and the
 * tests; not installed.  docs/pack.md describes the formats.
 *
 *   tar.c       POSIX ustar member headers: encode (with the prefix field
 *               or a pax header for long names) and parse (ustar, GNU,
 *               pax; the parser libFuzzer runs against)
 *   index.c     the per-shard offset index: encode and parse/validate
 *   manifest.c  the dataset manifest (JSON): encode and parse
 *   plan.c      the packer behind `tierfs pack`: what goes where
 *   write.c     the packer: reading the sources, writing shards
 *   reader.c    struct tfs_pack: shards, lazily loaded indexes, samples
 *   sampler.c   struct tfs_pack_iter: epoch order, partitions, prefetch
 */
#ifndef TFS_PACK_INT_H
#define TFS_PACK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "pack/packer.h"
#include "tierfs/pack.h"
#include "tierfs/store.h"

static inline uint64_t pack_round512(uint64_t n)
{
    return (n + 511) & ~(uint64_t)511;
}

/* ---- tar (tar.c) ---- */

#define TFS_TAR_BLOCK    512u
#define TFS_TAR_RECORD   10240u         /* archives end on a record */
#define TFS_TAR_NAME_MAX 4096u          /* longest member name, bytes */
#define TFS_TAR_HDR_MAX  16384u         /* header blocks of one member */

struct tfs_tar_member {
    char     name[TFS_TAR_NAME_MAX + 1];
    uint64_t size;                      /* bytes of data */
    int64_t  mtime_s;
    char     type;                      /* '0' regular, '5' dir, ... */
    size_t   hdr_len;                   /* header bytes before the data */
};

/*
 * The header blocks of a regular member named name (no NUL, at most
 * TFS_TAR_NAME_MAX bytes) of size bytes, into buf (cap bytes; at most
 * TFS_TAR_HDR_MAX are needed).  Names up to 100 bytes go in the name
 * field, up to 256 in prefix + name split at a '/', longer ones (and
 * sizes of 8 GiB or more) in a pax extended header first.  *len: bytes
 * written, a multiple of 512.  Errors: TFS_EBADKEY (name), -ENOSPC.
 */
int tfs_tar_encode(const char *name, uint64_t size, int64_t mtime_s,
                   unsigned char *buf, size_t cap, size_t *len);

/*
 * Parse the member whose header starts buf[0..len): ustar or GNU
 * headers, with pax ('x', 'g') and GNU long-name ('L', 'K') headers
 * before it.  0: *m filled, data starts at buf + m->hdr_len.  -ENODATA:
 * an all-zero block (end of archive).  -ENOBUFS: len is too short
 * (m->hdr_len says how many bytes to supply, at most TFS_TAR_HDR_MAX).
 * TFS_EFORMAT: malformed, the detail says what and at which offset from
 * buf.  Never reads outside buf.
 */
int tfs_tar_parse(const unsigned char *buf, size_t len,
                  struct tfs_tar_member *m);

/* The two zero blocks and the padding that end an archive of len bytes. */
uint64_t tfs_tar_end_size(uint64_t len);

/* ---- the shard index (index.c) ---- */

#define TFS_PIDX_MAGIC   "TFSPIDX"      /* 8 bytes with the NUL */
#define TFS_PIDX_VERSION 1u
#define TFS_PIDX_HDR     64u
#define TFS_PIDX_SAMPLE  8u
#define TFS_PIDX_MEMBER  40u

struct pack_member {
    uint64_t    hdr_off;                /* first header block */
    uint64_t    data_off;               /* first data byte */
    uint64_t    size;                   /* bytes of data */
    uint64_t    xxh3;                   /* XXH3-64 of the data */
    const char *name;                   /* "key.field", NUL-terminated */
    uint16_t    name_len;
    uint16_t    key_len;                /* name[key_len] == '.' */
};

struct pack_sample_ent {
    uint32_t first;                     /* first member */
    uint32_t n;                         /* members, >= 1 */
};

/* A parsed index; one allocation, freed with tfs_free. */
struct pack_index {
    uint64_t                n_samples;
    uint64_t                n_members;
    uint64_t                tar_size;
    uint64_t                tar_xxh3;
    uint64_t                plan_xxh3;
    struct pack_sample_ent *samples;
    struct pack_member     *members;
    char                   *names;      /* NUL after each name */
};

/*
 * Parse and validate an index file (len bytes).  Every offset, length and
 * count is checked against the others and the file size before use, so a
 * successful parse is safe to walk.  verify_hash: check the trailing
 * XXH3-64.  *out: free with tfs_free.  Errors: TFS_EFORMAT, TFS_ECORRUPT
 * (hash), -ENOMEM; the detail names the byte offset.
 */
int tfs_pack_index_parse(const unsigned char *buf, size_t len,
                         bool verify_hash, struct pack_index **out);

/* Builds an index while a shard is written. */
struct pack_index_builder {
    unsigned char *members;             /* encoded member records */
    size_t         n_members;
    size_t         members_cap;         /* records */
    unsigned char *samples;             /* encoded sample records */
    size_t         n_samples;
    size_t         samples_cap;
    unsigned char *names;
    size_t         names_len;
    size_t         names_cap;
};

void tfs_pack_index_builder_init(struct pack_index_builder *b);
void tfs_pack_index_builder_cleanup(struct pack_index_builder *b);
/* Add a member; new_sample starts a sample with it. */
int tfs_pack_index_add(struct pack_index_builder *b, bool new_sample,
                       const struct pack_member *m);
/* The encoded file; *out (len bytes) is freed with tfs_free. */
int tfs_pack_index_finish(struct pack_index_builder *b, uint64_t tar_size,
                          uint64_t tar_xxh3, uint64_t plan_xxh3,
                          unsigned char **out, size_t *len);

/* ---- the manifest (manifest.c) ---- */

#define TFS_PACK_MANIFEST     "manifest.json"
#define TFS_PACK_FORMAT       "tierfs-pack"
#define TFS_PACK_FORMAT_VER   1
#define TFS_PACK_MANIFEST_MAX (256u << 20)
#define TFS_PACK_MANIFEST_DEPTH_MAX 64u /* nesting of arrays and objects */
#define TFS_PACK_SHARD_NAME_MAX 256u

struct pack_shard_info {
    char     tar[TFS_PACK_SHARD_NAME_MAX];   /* "shard-000000.tar" */
    char     idx[TFS_PACK_SHARD_NAME_MAX];   /* "shard-000000.idx" */
    uint64_t n_samples;
    uint64_t n_members;
    uint64_t tar_size;
    uint64_t idx_size;
    uint64_t tar_xxh3;
    uint64_t idx_xxh3;
};

struct pack_manifest {
    struct pack_shard_info *shards;     /* owned */
    size_t                  n_shards;
    uint64_t                n_samples;  /* sum over shards */
    uint64_t                n_members;
    uint64_t                tar_bytes;
    uint64_t                shard_size; /* as packed */
    bool                    shuffled;
    uint64_t                shuffle_seed;
};

/*
 * Parse a manifest (len bytes of JSON, common/json.c, at most
 * TFS_PACK_MANIFEST_MAX bytes and TFS_PACK_MANIFEST_DEPTH_MAX deep).
 * Strings may hold bytes that are not UTF-8 (file names as they were).
 * Unknown fields are ignored; JSON that does not parse, missing or
 * mistyped required fields, shard names that are not plain file names,
 * and counts that do not add up fail TFS_EFORMAT with a detail.
 */
int tfs_pack_manifest_parse(const char *json, size_t len,
                            struct pack_manifest *out);
void tfs_pack_manifest_cleanup(struct pack_manifest *m);

/* The manifest as JSON; *out is freed with tfs_free. */
int tfs_pack_manifest_encode(const struct pack_manifest *m,
                             const char *fields_json, char **out,
                             size_t *len);

/* ---- the packer (write.c): tfs_pack_write is in pack/packer.h ---- */

/*
 * Check a member name (a path relative to the dataset) the way the packer
 * does: relative, no "." or ".." or empty components, at most
 * TFS_TAR_NAME_MAX bytes, KEY.FIELD in its last component (key and field
 * non-empty), not a WebDataset __metadata__ name.  *key_len: bytes
 * before the field's dot.  TFS_EESCAPE or TFS_EBADKEY, naming it.
 */
int tfs_pack_check_name(const char *name, size_t *key_len);

/* ---- shared by reader.c and sampler.c ---- */

/* A splitmix64 step: deterministic, for shuffles that must replay. */
static inline uint64_t pack_mix(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* In [0, n), n > 0 (modulo: the bias, under n / 2^64, is immaterial). */
static inline uint64_t pack_below(uint64_t *state, uint64_t n)
{
    return pack_mix(state) % n;
}

/* Where the sample with global index i lives. */
int tfs_pack_locate(const struct tfs_pack *p, uint64_t i, size_t *shard,
                    uint64_t *local);
/* Fill s with sample local of shard (loads the index when needed). */
int tfs_pack_fill(struct tfs_pack *p, size_t shard, uint64_t local,
                  struct tfs_pack_sample *s);
/*
 * Hints to the cache, returning at once: the index of shard will be
 * read soon; samples [lo, hi) of shard will be read soon (the part of
 * its tar that holds them).
 */
int tfs_pack_hint_index(struct tfs_pack *p, size_t shard);
int tfs_pack_hint_data(struct tfs_pack *p, size_t shard, uint64_t lo,
                       uint64_t hi);
/* Bytes of all the shards. */
uint64_t tfs_pack_tar_bytes(const struct tfs_pack *p);
/* The cache the dataset reads through. */
struct tfs_cache *tfs_pack_cache(const struct tfs_pack *p);
/* Object keys of shard i (prefix included). */
const char *tfs_pack_tar_key(const struct tfs_pack *p, size_t i);
const char *tfs_pack_idx_key(const struct tfs_pack *p, size_t i);
uint64_t tfs_pack_shard_samples(const struct tfs_pack *p, size_t i);

#endif /* TFS_PACK_INT_H */
