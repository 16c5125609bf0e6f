/* SPDX-License-Identifier: MIT */
/*
 * Packed datasets: the reader of what `tierfs pack` writes (docs/pack.md).
 *
 * A packed dataset is a prefix of a store holding WebDataset-style tar
 * shards (shard-000000.tar ...), one offset index per shard
 * (shard-000000.idx) and manifest.json, written last.  A sample is the
 * run of adjacent tar members sharing a key ("train/img001" of
 * "train/img001.jpg" and "train/img001.cls"); each member is a field.
 *
 * The reader goes through a tfs_cache (RAM + disk tiers, shared with
 * other processes and mounts that use the same cache_dir), never through
 * FUSE.  Every sample it returns is checked: the tar header(s) of each
 * member must parse and agree with the index, and the data must match
 * the index's XXH3-64 (option verify).  A mismatch is an error whose
 * detail names the shard and the byte offset; nothing is skipped.
 *
 *   struct tfs_pack         an open dataset: tfs_pack_create, tfs_pack_set,
 *                           tfs_pack_open ... tfs_pack_close.  Thread-safe.
 *   struct tfs_pack_sample  a caller's handle on one sample, refilled by
 *                           tfs_pack_get (map-style: sample i of the
 *                           dataset) or tfs_pack_iter_next; freed by
 *                           tfs_pack_sample_close.  One thread at a time.
 *   struct tfs_pack_iter    one partition of one epoch in a shuffled,
 *                           deterministic order, with shard prefetch;
 *                           freed by tfs_pack_iter_close.  One thread at
 *                           a time.
 */
#ifndef TIERFS_PACK_H
#define TIERFS_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tierfs/api.h"
#include "tierfs/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_pack;
struct tfs_pack_sample;
struct tfs_pack_iter;

/* ---- the dataset ---- */

TFS_API int tfs_pack_create(struct tfs_pack **out);

/*
 * Set an option before open (TFS_EOPTION for a bad name or value, the
 * detail naming the option, the value and the range; -EBUSY after open):
 *
 *   verify        1 (default): check tar headers and data checksums of
 *                 every sample returned; 0: trust the index
 *   max_indexes   shard indexes kept loaded when unused (default 64;
 *                 0..1048576)
 */
TFS_API int tfs_pack_set(struct tfs_pack *p, const char *name,
                         const char *value);

/*
 * Open the dataset under prefix ("" for the store's root, else a
 * directory such as "data/train" with or without the trailing '/') of
 * c's store: reads and checks manifest.json.  c is borrowed until
 * tfs_pack_close.  Errors: -ENOENT (no manifest: not a packed dataset,
 * or packing not finished), TFS_EFORMAT (bad manifest), the cache's.
 */
TFS_API int tfs_pack_open(struct tfs_pack *p, struct tfs_cache *c,
                          const char *prefix);

/* Free everything; samples and iterators must be gone.  NULL: no-op. */
TFS_API void tfs_pack_close(struct tfs_pack *p);

/* Samples in the dataset, and shards. */
TFS_API uint64_t tfs_pack_samples(const struct tfs_pack *p);
TFS_API size_t tfs_pack_shards(const struct tfs_pack *p);
/* The file name of shard i ("shard-000003.tar"), or NULL. */
TFS_API const char *tfs_pack_shard_name(const struct tfs_pack *p, size_t i);

/* ---- samples ---- */

/* A sample handle; empty until filled.  -ENOMEM. */
TFS_API int tfs_pack_sample_create(struct tfs_pack_sample **out);
/* Release what s holds and free it.  NULL is a no-op. */
TFS_API void tfs_pack_sample_close(struct tfs_pack_sample *s);

/*
 * Map-style access: fill s with sample i (0 <= i < tfs_pack_samples, in
 * manifest shard order, then in shard order), checking its headers.
 * -ERANGE for i out of range; TFS_ECORRUPT / TFS_EFORMAT for damage (the
 * detail names the shard and offset); the cache's errors.
 */
TFS_API int tfs_pack_get(struct tfs_pack *p, uint64_t i,
                         struct tfs_pack_sample *s);

/* The global index of the sample in s, and its shard. */
TFS_API uint64_t tfs_pack_sample_index(const struct tfs_pack_sample *s);
TFS_API size_t tfs_pack_sample_shard(const struct tfs_pack_sample *s);
/* Number of fields (members) of the sample in s. */
TFS_API size_t tfs_pack_sample_fields(const struct tfs_pack_sample *s);

/*
 * Describe the sample in s in one call: names receives the key and each
 * field name, each followed by a NUL ("img001\0jpg\0cls\0"), *names_len
 * the bytes used (NULs included); sizes[i] the data bytes of field i;
 * *n_fields the number of fields.  -ENOSPC when names_size or max_fields
 * is too small (*names_len and *n_fields still say what is needed);
 * -EINVAL for an empty s.
 */
TFS_API int tfs_pack_sample_info(const struct tfs_pack_sample *s,
                                 char *names, size_t names_size,
                                 size_t *names_len, uint64_t *sizes,
                                 size_t max_fields, size_t *n_fields);

/*
 * Copy the data of field i into buf (len must be at least its size): the
 * one copy between the cache and the caller.  Checks the data's
 * checksum when verify is on.  Errors: -ERANGE (i), -ENOSPC (len),
 * TFS_ECORRUPT (checksum, truncated shard: the detail names the shard
 * and offset), the cache's.
 */
TFS_API int tfs_pack_sample_read(struct tfs_pack_sample *s, size_t i,
                                 void *buf, size_t len);

/* ---- epoch iterators ---- */

/* An iterator over p (borrowed until tfs_pack_iter_close).  -ENOMEM. */
TFS_API int tfs_pack_iter_create(struct tfs_pack *p,
                                 struct tfs_pack_iter **out);
/* Free it.  NULL is a no-op. */
TFS_API void tfs_pack_iter_close(struct tfs_pack_iter *it);

/*
 * Set an option (TFS_EOPTION for a bad name or value, the detail naming
 * the option, the value and the range); takes effect at the next
 * tfs_pack_iter_start:
 *
 *   seed            shuffle seed (default 0)
 *   shuffle         1 (default): shard order shuffled by (seed, epoch)
 *                   and samples through a shuffle buffer; 0: dataset order
 *   shuffle_buffer  samples in the shuffle buffer (1: none; at most 2^26);
 *                   unset: as many as the RAM tier holds after the
 *                   prefetch window and two blocks, counting 6 x the
 *                   average sample a slot, between 16 and 1000
 *   rank            this process's rank (default 0) ...
 *   world_size      ... of this many (default 1; both at most 2^24)
 *   worker          this loader worker (default 0) ...
 *   num_workers     ... of this many in the rank (default 1; both at
 *                   most 65536)
 *   drop_last       0 (default): every rank gets ceil(N / world_size)
 *                   samples, the last ones padded by wrapping around to
 *                   the epoch's first samples; 1: floor(N / world_size),
 *                   the remainder is not read this epoch
 *   prefetch        shards of lookahead hinted to the cache (default 2;
 *                   0: none; at most 1024): their indexes, and that many
 *                   shards' worth of samples of data ...
 *   prefetch_bytes  ... but at most this much data (unset: a quarter
 *                   of the cache's mem_cache, at most 32M)
 *   warn_ram        1 (default): tfs_pack_iter_start logs a warning, once
 *                   per process, when mem_cache is below
 *                   tfs_pack_iter_ram_need; 0: the caller reports it
 *                   (the Python loader does, through `warnings`)
 */
TFS_API int tfs_pack_iter_set(struct tfs_pack_iter *it, const char *name,
                              const char *value);

/*
 * Begin epoch epoch, skipping the first position samples of this
 * partition's order (mid-epoch resumption; no data is read to skip).
 * -EINVAL for an inconsistent partition (rank >= world_size, ...), -ERANGE
 * for position past the partition's end.
 */
TFS_API int tfs_pack_iter_start(struct tfs_pack_iter *it, uint64_t epoch,
                                uint64_t position);

/*
 * Samples this partition yields per epoch (the same for every epoch; for
 * every rank, and within one for workers up to one apart), from the
 * options set so far.  -EINVAL for an inconsistent partition.
 */
TFS_API int tfs_pack_iter_length(const struct tfs_pack_iter *it,
                                 uint64_t *n);

/*
 * The RAM tier this iterator's stream needs, in bytes, from the options
 * set so far: the prefetch window, the blocks of the samples waiting in
 * the shuffle buffer (a block stays needed until its last sample leaves
 * the buffer, about ln(samples per block) + 0.6 buffer lengths after it
 * entered: counted as 6 x shuffle_buffer x the average sample), and two
 * blocks.  With a smaller mem_cache, blocks are read again (from the disk
 * tier or the store); tfs_pack_iter_start logs a warning, once per
 * process.  With shuffle_buffer and prefetch_bytes unset the need fits
 * mem_cache unless even 16 slots do not.  docs/pack.md.
 */
TFS_API uint64_t tfs_pack_iter_ram_need(const struct tfs_pack_iter *it);

/* Samples yielded since the start of the epoch (position included). */
TFS_API uint64_t tfs_pack_iter_position(const struct tfs_pack_iter *it);

/*
 * The next sample of the epoch into s; *got is false at the end.  After
 * an error the iterator has moved past the failed sample.  Errors: as
 * tfs_pack_get, and -EINVAL before tfs_pack_iter_start.
 */
TFS_API int tfs_pack_iter_next(struct tfs_pack_iter *it,
                               struct tfs_pack_sample *s, bool *got);

/* What tfs_pack_iter_next_info says about the sample besides the names. */
struct tfs_pack_desc {
    uint64_t index;                     /* tfs_pack_sample_index */
    uint64_t shard;                     /* tfs_pack_sample_shard */
    uint64_t names_len;                 /* as tfs_pack_sample_info */
    uint64_t n_fields;                  /* as tfs_pack_sample_info */
    uint64_t described;                 /* 1: names and sizes filled; 0:
                                           names_size or max_fields too
                                           small, names_len and n_fields
                                           say what is needed */
};

/*
 * tfs_pack_iter_next, then tfs_pack_sample_info and the sample's index and
 * shard, in one call: for language bindings, where every call costs.
 * Returns 0 with *got true, the sample in s and d filled; or 0 with *got
 * false at the end; or an error of tfs_pack_iter_next (*got false).
 * When d->described is 0 the sample is in s but names or sizes had too
 * little room: call tfs_pack_sample_info again with d->names_len and
 * d->n_fields of room.
 */
TFS_API int tfs_pack_iter_next_info(struct tfs_pack_iter *it,
                                    struct tfs_pack_sample *s, char *names,
                                    size_t names_size, uint64_t *sizes,
                                    size_t max_fields,
                                    struct tfs_pack_desc *d, bool *got);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_PACK_H */
