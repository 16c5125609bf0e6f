/* SPDX-License-Identifier: MIT */
/*
 * The disk tier's admission policy (tinylfu), written once: a count-min
 * sketch of access frequencies, the test a newcomer must pass against
 * the block it would evict, and the geometry the index sizes both by.
 *
 * Two callers run it: the cache's index (index.c), whose sketch lives in
 * the shared mapping, and `tierfs profile`'s simulation
 * (src/cli/profile.c), over memory of its own, so that the profile
 * predicts the policy the cache runs.  An internal header (not
 * installed) that the CLI's profile may include, as curl's tool uses its
 * lib/curlx headers; nothing else outside src/cache/ does.
 *
 * One thread at a time per sketch: the caller serialises (the index
 * under its mutex).
 */
#ifndef TFS_CACHE_TINYLFU_H
#define TFS_CACHE_TINYLFU_H

#include <stdbool.h>
#include <stdint.h>

#define TFS_TINYLFU_ROWS 4              /* rows of the sketch */
/* A newcomer must have been asked for this many more times than its
 * victim. */
#define TFS_TINYLFU_MARGIN 2

/*
 * A sketch: TFS_TINYLFU_ROWS rows of width 8-bit counters, updated
 * conservatively and all halved after 16 x width additions.  The struct
 * only points at its memory (zeroed to start empty); the caller owns it.
 */
struct tfs_tinylfu {
    uint8_t  *cells;                    /* ROWS * width; not owned */
    uint64_t  width;                    /* counters per row, power of 2 */
    uint64_t *ops;                      /* additions since the last
                                           halving; not owned */
};

/* Estimated accesses of key (0..255). */
unsigned tfs_tinylfu_count(const struct tfs_tinylfu *t, uint64_t key);
/* Count one access of key; every 16 x width calls halve all counters. */
void tfs_tinylfu_add(struct tfs_tinylfu *t, uint64_t key);

/*
 * The admission rule: may a block asked for new_freq times evict one
 * asked for victim_freq times?  The cache tests only the first victim
 * a newcomer needs; once that one goes, further victims follow without
 * a test.
 */
static inline bool tfs_tinylfu_admits(unsigned new_freq,
                                      unsigned victim_freq)
{
    return new_freq >= victim_freq + TFS_TINYLFU_MARGIN;
}

/*
 * Geometry.  Blocks the disk tier sizes its index for when the cache's
 * max_blocks option is not set (cache_bytes in blocks of 256 KiB, plus
 * slack); the sketch's width for max_blocks blocks, which is also the
 * index's slot count (2^14..2^24); and the most entries an index of
 * width slots holds (3/4 of them): past it the index evicts by count.
 */
uint64_t tfs_tinylfu_blocks(uint64_t cache_bytes);
uint64_t tfs_tinylfu_width(uint64_t max_blocks);
uint64_t tfs_tinylfu_max_entries(uint64_t width);

#endif /* TFS_CACHE_TINYLFU_H */
