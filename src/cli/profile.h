/* SPDX-License-Identifier: MIT */
/*
 * `tierfs profile`'s analysis (profile.c): tooling of the command-line
 * tool, not of the library.  It reads traces with the library's format
 * reader (tierfs/trace.h) and models the disk tier's admission with the
 * cache's own rule (cache/tinylfu.h).  Linked into the tierfs binary and
 * into the unit tests that check it, never into libtierfs.
 */
#ifndef TFS_CLI_PROFILE_H
#define TFS_CLI_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Profile a trace file, or (with a store URI or directory) the objects
 * under it: sizes, sequential ratio, re-reads and reuse distances, the
 * working set, miss-ratio curves for LRU and for tinylfu, and advice.
 * The report is written to *out as JSON (json) or text (free with
 * tfs_free).  block_size is the cache block size to model.  -ENOMEM,
 * TFS_EFORMAT for a damaged trace, or the store's error.
 */
int cli_profile_trace(const char *path, uint64_t block_size, bool json,
                      char **out);
int cli_profile_store(const char *uri, const char *options, bool json,
                      char **out);

/*
 * The tinylfu curve's simulation at one cache size (exposed so that
 * test_profile can drive it beside the cache's index): the disk tier's
 * policy as the index runs it, with the cache's own sketch and
 * admission rule (cache/tinylfu.h), in strict LRU order where the index
 * samples.  One thread at a time.
 *
 * create: a disk tier of capacity bytes, for at most max_ids distinct
 * block ids; -ENOMEM.  access: one access of block id (size bytes);
 * true on a hit; on a miss *admitted says whether the block went in.
 */
struct cli_profile_sim;
int cli_profile_sim_create(struct cli_profile_sim **out, uint64_t capacity,
                           size_t max_ids);
bool cli_profile_sim_access(struct cli_profile_sim *s, uint64_t id,
                            uint32_t size, bool *admitted);
/* NULL is a no-op. */
void cli_profile_sim_destroy(struct cli_profile_sim *s);

#endif /* TFS_CLI_PROFILE_H */
