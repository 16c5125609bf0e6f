/* SPDX-License-Identifier: MIT */
/*
 * The packer behind `tierfs pack` (write.c): the one part of src/pack/
 * the command-line tool calls.  An internal header, not installed, named
 * for that use (as curl's tool uses lib/curlx): src/cli/ includes this
 * and never pack_int.h.  It stays out of the public tierfs/pack.h
 * because its options hold a callback run on the packing thread and
 * its progress is a struct read field by field: the public API keeps to
 * opaque handles and setters, and calls nothing from C threads (the
 * Python binding packs by running `tierfs pack`).
 */
#ifndef TFS_PACK_PACKER_H
#define TFS_PACK_PACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierfs/store.h"

struct tfs_pack_progress {
    uint64_t samples;                   /* samples written or kept */
    uint64_t samples_total;
    uint64_t bytes;                     /* source bytes written or kept */
    uint64_t bytes_total;
    size_t   shards;                    /* shards done (written or kept) */
    size_t   shards_kept;               /* of those, kept from a former run */
    size_t   shards_total;
    uint64_t elapsed_ns;
    bool     done;
};

/* Called on the packing thread, at most 4 times a second and at the end. */
typedef void tfs_pack_progress_fn(void *arg,
                                  const struct tfs_pack_progress *pr);

struct tfs_pack_write_opts {
    uint64_t              shard_size;   /* target bytes per shard */
    bool                  shuffle;      /* shuffle sample order ... */
    uint64_t              shuffle_seed; /* ... with this seed */
    unsigned              jobs;         /* parallel source reads */
    tfs_pack_progress_fn *progress;     /* may be NULL */
    void                 *progress_arg;
};

/*
 * Pack every object under src_prefix ("" or "dir/") of src into shards,
 * indexes and a manifest under dst_prefix of dst.  Shards a former run
 * completed with the same plan are kept.  Errors: the stores', or
 * TFS_EESCAPE / TFS_EBADKEY for names that cannot be packed (the detail
 * names them), -ENOENT when src_prefix holds nothing.
 */
int tfs_pack_write(struct tfs_store *src, const char *src_prefix,
                   struct tfs_store *dst, const char *dst_prefix,
                   const struct tfs_pack_write_opts *o);

#endif /* TFS_PACK_PACKER_H */
