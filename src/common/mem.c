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
#define MEM_PAGE  ((uintptr_t)4096)
#define MEM_TAG_MAP  UINT64_C(0x544653206d617021)  /* "TFS map!" */
#define MEM_TAG_HEAP UINT64_C(0x5446532068656170)  /* "TFS heap" */

/* What sits just below a faulted buffer: how to give it back. */
struct mem_hdr {
    void    *base;                      /* what to free or munmap */
    size_t   len;                       /* bytes mapped from base */
    uint64_t tag;                       /* MEM_TAG_*, last: at p - 8 */
};

/* Map size bytes aligned to align, with one page below for the header. */
static void *mem_map(size_t size, uintptr_t align)
{
    size_t span = (size + MEM_PAGE - 1) & ~(size_t)(MEM_PAGE - 1);
    size_t want;
    uintptr_t raw;
    uintptr_t p;
    struct mem_hdr h;

    if (span > SIZE_MAX - align - MEM_PAGE)
        return NULL;
    want = span + align + MEM_PAGE;
    raw = (uintptr_t)mmap(NULL, want, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((void *)raw == MAP_FAILED)
        return NULL;
    p = (raw + MEM_PAGE + align - 1) & ~(align - 1);
    /* keep [p - page, p + span): the header page and the buffer */
    if (p - MEM_PAGE > raw)
        munmap((void *)raw, p - MEM_PAGE - raw);
    if (raw + want > p + span)
        munmap((void *)(p + span), raw + want - p - span);
    h = (struct mem_hdr){(void *)(p - MEM_PAGE), span + MEM_PAGE,
                         MEM_TAG_MAP};
    memcpy((void *)(p - sizeof(h)), &h, sizeof(h));
    return (void *)p;
}

/*
 * Buffers of 2 MiB and more are 2 MiB-aligned and asked for huge pages.
 * On the paravirtualised VMs we run on, every 4 KiB page a process maps
 * for the first time costs a trip through the hypervisor: filling 1 GiB
 * of fresh 4 KiB pages took 4.5-5.4 s, of huge pages 0.15 s (memory the
 * guest had used before) to 2.7 s (memory the host had taken back).
 * Buffers from 256 KiB are page-aligned at least, so the disk tier can
 * move them with O_DIRECT.
 *
 * Those are mapped on their own (mmap), not taken from malloc, and go
 * back to the kernel when freed.  From malloc, once glibc had raised its
 * mmap threshold past them (it does when one is freed), they came from
 * its heaps and arenas, which kept the memory after the free, and with
 * it the alignment slack a reused chunk had touched before: with a 1 GiB
 * RAM tier full, the daemon's RSS was 1.6 GiB, 0.55 GiB of it freed
 * buffers (docs/cache.md, "Memory").  Under a replaced allocator (the
 * tests' failing one) they still come from it, so its failures reach
 * these buffers too.  The header below the buffer says which it was.
 */
void *tfs_malloc_faulted(size_t size)
{
    uintptr_t align = size >= MEM_HUGE    ? MEM_HUGE
                      : size >= MEM_PAGED ? MEM_PAGE
                                          : MEM_ALIGN;
    struct mem_hdr h;
    void *raw = NULL;
    uintptr_t p;
    uintptr_t lo;
    uintptr_t hi;

    if (size >= MEM_PAGED && mem_malloc == malloc) {
        p = (uintptr_t)mem_map(size, align);
        if (p == 0)
            return NULL;
    } else {
        if (size > SIZE_MAX - align - sizeof(h))
            return NULL;
        raw = tfs_malloc(size + align + sizeof(h));
        if (raw == NULL)
            return NULL;
        p = ((uintptr_t)raw + sizeof(h) + align - 1) & ~(align - 1);
        h = (struct mem_hdr){raw, 0, MEM_TAG_HEAP};
        memcpy((void *)(p - sizeof(h)), &h, sizeof(h));
    }
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
    struct mem_hdr h;

    if (p == NULL)
        return;
    memcpy(&h, (char *)p - sizeof(h), sizeof(h));
    if (h.tag == MEM_TAG_MAP)
        munmap(h.base, h.len);
    else
        tfs_free(h.base);
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
