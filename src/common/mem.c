/* SPDX-License-Identifier: MIT */
/*
 * Allocation hooks (mem.h).  The four function pointers default to libc
 * and are replaced at most once, before other calls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/util.h"

#ifdef MADV_POPULATE_WRITE
#define TFS_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define TFS_MADV_POPULATE_WRITE 23      /* Linux 5.14; older: EINVAL */
#endif

static tfs_malloc_fn *mem_malloc = malloc;
static tfs_realloc_fn *mem_realloc = realloc;
static tfs_calloc_fn *mem_calloc = calloc;
static tfs_free_fn *mem_free = free;

int tfs_replace_allocator(tfs_malloc_fn *m, tfs_realloc_fn *r,
                          tfs_calloc_fn *c, tfs_free_fn *f)
{
    if (m == NULL || r == NULL || c == NULL || f == NULL)
        return -EINVAL;
    mem_malloc = m;
    mem_realloc = r;
    mem_calloc = c;
    mem_free = f;
    return 0;
}

void *tfs_malloc(size_t size)
{
    return mem_malloc(size ? size : 1);
}

void *tfs_realloc(void *ptr, size_t size)
{
    return mem_realloc(ptr, size ? size : 1);
}

void *tfs_calloc(size_t count, size_t size)
{
    if (count == 0 || size == 0)
        return mem_calloc(1, 1);
    return mem_calloc(count, size);
}

void tfs_free(void *ptr)
{
    if (ptr != NULL)
        mem_free(ptr);
}

void *tfs_malloc_faulted(size_t size)
{
    void *p = tfs_malloc(size);
    uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)p + size) & ~(uintptr_t)4095;

    if (p != NULL && hi > lo)           /* best effort: EINVAL before 5.14 */
        (void)madvise((void *)lo, hi - lo, TFS_MADV_POPULATE_WRITE);
    return p;
}

char *tfs_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = tfs_malloc(len + 1);

    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *tfs_strdup(const char *s)
{
    return tfs_strndup(s, strlen(s));
}
