/* SPDX-License-Identifier: MIT */
/*
 * XXH3-64 built for AVX2, chosen at run time by tfs_xxh3 (csum.c) on a
 * CPU that has it.  Debian's libxxhash is built for the x86-64 baseline
 * (SSE2); the same xxhash.h compiled here with -mavx2 takes 0.10 s a GiB
 * of a block just written where the library takes 0.14, and 0.05 where
 * it takes 0.12 on data still in L2 (docs/performance-cold.md).  XXH3's
 * value does not depend on the vector width: the unit tests compare the
 * two on every length that changes the code path.
 *
 * This file alone is compiled with -mavx2 (CMakeLists.txt), so nothing
 * in it may run before the caller has checked the CPU.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/csum.h"

#if defined(TFS_XXH3_WIDE)
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

uint64_t tfs_xxh3_wide(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}
#endif
