/* SPDX-License-Identifier: MIT */
/*
 * Allocation hooks.  Every allocation in libtierfs goes through these, so
 * an application can route them to its own allocator and tests can fail
 * the Nth allocation to exercise out-of-memory paths.  Out of memory is
 * always reported as -ENOMEM; the library never aborts.
 */
#ifndef TIERFS_MEM_H
#define TIERFS_MEM_H

#include <stddef.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *tfs_malloc_fn(size_t size);
typedef void *tfs_realloc_fn(void *ptr, size_t size);
typedef void *tfs_calloc_fn(size_t count, size_t size);
typedef void tfs_free_fn(void *ptr);

/*
 * Replace the allocator.  All four must be given, or -EINVAL.  Call before
 * any other tierfs function (memory from one allocator must not be freed by
 * another).  Not thread-safe.
 */
TFS_API int tfs_replace_allocator(tfs_malloc_fn *m, tfs_realloc_fn *r,
                                  tfs_calloc_fn *c, tfs_free_fn *f);

TFS_API void *tfs_malloc(size_t size);
TFS_API void *tfs_realloc(void *ptr, size_t size);
TFS_API void *tfs_calloc(size_t count, size_t size);
/* tfs_free(NULL) is a no-op. */
TFS_API void tfs_free(void *ptr);
/* A copy of s in tfs_malloc memory, or NULL when out of memory. */
TFS_API char *tfs_strdup(const char *s);
TFS_API char *tfs_strndup(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_MEM_H */
