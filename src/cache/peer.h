/* SPDX-License-Identifier: MIT */
/*
 * What the cache offers the cache group (src/group/, docs/group.md), and
 * nothing more: one more source a block can come from, tried by the
 * fetch engine before the store, and the blocks a peer server hands out.
 * The group never sees the tiers' internals.
 */
#ifndef TFS_CACHE_PEER_H
#define TFS_CACHE_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "tierfs/cache.h"

#define TFS_PEER_ID_LEN 16              /* TFS_BLOCK_ID_LEN */

/* A block as the group names it: its id and where its bytes are. */
struct tfs_peer_block {
    uint8_t     id[TFS_PEER_ID_LEN];    /* store identity, key, version,
                                           index, block size, hashed */
    const char *key;                    /* borrowed */
    const char *version;                /* borrowed */
    uint64_t    obj_size;
    uint64_t    index;
    uint64_t    off;                    /* index * block size */
    size_t      len;                    /* bytes of this block */
};

/*
 * Another source of blocks, tried by the fetch engine before the store
 * (the cache group's peers, a shared cache tier).  read fills dst with
 * pb's len bytes, checked, before deadline_ns (absolute, 0: none): 0 when
 * dst holds the block; -ENOENT when not asked (this node owns the block,
 * no member may be asked now, the shared tier lacks it): the next source
 * or the store is read; another error: asked and failed (counted and
 * logged by the source), likewise.  stored (may be NULL) is told of
 * every block the store itself gave (a shared tier keeps a copy).  Both
 * are called from fetch workers, at once by many.
 */
typedef int tfs_cache_source_fn(void *arg, const struct tfs_peer_block *pb,
                                uint64_t deadline_ns, unsigned char *dst);
typedef void tfs_cache_stored_fn(void *arg, const struct tfs_peer_block *pb,
                                 const unsigned char *data);

enum tfs_source_kind {
    TFS_SOURCE_PEER,                    /* counted as hit_bytes_peer */
    TFS_SOURCE_SHARED,                  /* counted as hit_bytes_shared */
};

struct tfs_cache_source {
    tfs_cache_source_fn  *read;
    tfs_cache_stored_fn  *stored;       /* or NULL */
    void                 *arg;
    enum tfs_source_kind  kind;
};

#define TFS_CACHE_SOURCES 2             /* the group, then a shared tier */

/*
 * Add a source after those there (-ENOSPC past TFS_CACHE_SOURCES), or
 * remove the one with arg, at any time: either returns once no call of
 * a source is in flight, so arg may be freed after removing it.
 */
int tfs_cache_add_source(struct tfs_cache *c,
                         const struct tfs_cache_source *s);
void tfs_cache_remove_source(struct tfs_cache *c, void *arg);

/*
 * Name block index of object key (version, obj_size bytes) as this
 * cache does: pb's id, off and len.  TFS_EFORMAT when the object has no
 * such block.  key and version are borrowed into pb.
 */
int tfs_cache_peer_ref(struct tfs_cache *c, const char *key,
                       const char *version, uint64_t obj_size,
                       uint64_t index, struct tfs_peer_block *pb);

/* Where a served block's bytes came from (the server's answer). */
enum tfs_peer_src {
    TFS_PEER_FROM_RAM, TFS_PEER_FROM_DISK, TFS_PEER_FROM_STORE,
};

/*
 * For a peer's request: block pb pinned and READY in this node's tiers,
 * loaded on a miss from the disk tier or the store, never from another
 * peer (so views of the member list that differ cannot send a request
 * round in circles).  Concurrent requests for one block share one load
 * (single flight).  *data: its pb->len bytes, valid until
 * tfs_cache_peer_put(c, *pin); *digest: their tfs_csum_digest
 * (common/csum.h), computed once a block and kept with it (a block from
 * the disk tier has it from its chunk sums).  Errors: the store's.
 */
int tfs_cache_peer_get(struct tfs_cache *c, const struct tfs_peer_block *pb,
                       void **pin, const unsigned char **data,
                       uint64_t *digest, enum tfs_peer_src *from);
void tfs_cache_peer_put(struct tfs_cache *c, void *pin);

#endif /* TFS_CACHE_PEER_H */
