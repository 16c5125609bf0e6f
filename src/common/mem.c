/* SPDX-License-Identifier: MIT */
/*
 * Allocation hooks (mem.h).  The four function pointers default to libc
 * and are replaced at most once, before other calls.
 */
#include <errno.h>
#include <stdint.h>
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

#define MEM_HUGE  ((uintptr_t)2 << 20)
#define MEM_PAGED ((uintptr_t)256 << 10)  /* from here page-aligned */
#define MEM_ALIGN ((uintptr_t)64)

/*
 * Buffers of 2 MiB and more are 2 MiB-aligned and asked for huge pages.
 * On the paravirtualised VMs we run on, every 4 KiB page a process maps
 * for the first time costs a trip through the hypervisor: filling 1 GiB
 * of fresh 4 KiB pages took 4.5-5.4 s, of huge pages 0.15 s (memory the
 * guest had used before) to 2.7 s (memory the host had taken back).
 * Buffers from 256 KiB are page-aligned at least, so the disk tier can
 * move them with O_DIRECT.  The pointer malloc gave sits just below the
 * buffer, for tfs_free_faulted.
 */
void *tfs_malloc_faulted(size_t size)
{
    uintptr_t align = size >= MEM_HUGE    ? MEM_HUGE
                      : size >= MEM_PAGED ? (uintptr_t)4096
                                          : MEM_ALIGN;
    void *raw;
    uintptr_t p;
    uintptr_t lo;
    uintptr_t hi;

    if (size > SIZE_MAX - align - sizeof(void *))
        return NULL;
    raw = tfs_malloc(size + align + sizeof(void *));
    if (raw == NULL)
        return NULL;
    p = ((uintptr_t)raw + sizeof(void *) + align - 1) & ~(align - 1);
    memcpy((void *)(p - sizeof(void *)), &raw, sizeof(void *));
    if (align == MEM_HUGE)              /* best effort, like the next */
        (void)madvise((void *)p, size & ~(size_t)(MEM_HUGE - 1),
                      MADV_HUGEPAGE);
    lo = (p + 4095) & ~(uintptr_t)4095;
    hi = (p + size) & ~(uintptr_t)4095;
    if (hi > lo)                        /* EINVAL before Linux 5.14 */
        (void)madvise((void *)lo, hi - lo, TFS_MADV_POPULATE_WRITE);
    return (void *)p;
}

void tfs_free_faulted(void *p)
{
    void *raw;

    if (p == NULL)
        return;
    memcpy(&raw, (char *)p - sizeof(void *), sizeof(void *));
    tfs_free(raw);
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
