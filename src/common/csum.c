/* SPDX-License-Identifier: MIT */
/* The chunked block digest (csum.h). */
#include <errno.h>
#include <stdbool.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "common/csum.h"
#include "common/util.h"

#if defined(TFS_XXH3_WIDE)
/* 0: not yet asked, 1: the library's, 2: tfs_xxh3_wide. */
static int xxh3_which;

static int xxh3_choose(void)
{
    int w = __atomic_load_n(&xxh3_which, __ATOMIC_RELAXED);

    if (w == 0) {
        __builtin_cpu_init();
        w = __builtin_cpu_supports("avx2") ? 2 : 1;
        __atomic_store_n(&xxh3_which, w, __ATOMIC_RELAXED);
    }
    return w;
}

uint64_t tfs_xxh3(const void *data, size_t len)
{
    return xxh3_choose() == 2 ? tfs_xxh3_wide(data, len)
                              : XXH3_64bits(data, len);
}

bool tfs_xxh3_is_wide(void)
{
    return xxh3_choose() == 2;
}
#else
uint64_t tfs_xxh3(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

bool tfs_xxh3_is_wide(void)
{
    return false;
}
#endif

static size_t csum_chunks(size_t len)
{
    return len == 0 ? 0 : (len - 1) / TFS_CSUM_CHUNK + 1;
}

uint64_t tfs_csum_of_sums(const void *sums, size_t n)
{
    return tfs_xxh3(sums, 8 * n);
}

int tfs_csum_begin(struct tfs_csum *s, size_t len)
{
    s->len = len;
    s->done = 0;
    s->sums = tfs_malloc(TFS_MAX(8 * csum_chunks(len), (size_t)8));
    return s->sums != NULL ? 0 : -ENOMEM;
}

void tfs_csum_feed(struct tfs_csum *s, const uint8_t *data, size_t have)
{
    have = TFS_MIN(have, s->len);
    while (have - s->done >= TFS_CSUM_CHUNK ||
           (have == s->len && s->done < have)) {
        size_t n = TFS_MIN((size_t)TFS_CSUM_CHUNK, have - s->done);

        tfs_put_le64(s->sums + 8 * (s->done / TFS_CSUM_CHUNK),
                     tfs_xxh3(data + s->done, n));
        s->done += n;
    }
}

void tfs_csum_restart(struct tfs_csum *s)
{
    s->done = 0;
}

uint64_t tfs_csum_end(struct tfs_csum *s, const uint8_t *data)
{
    tfs_csum_feed(s, data, s->len);
    return tfs_csum_of_sums(s->sums, csum_chunks(s->len));
}

void tfs_csum_cleanup(struct tfs_csum *s)
{
    tfs_free(s->sums);
    s->sums = NULL;
}

int tfs_csum_digest(const void *data, size_t len, uint64_t *out)
{
    uint8_t stack[8 * 1024];            /* 64 MiB of chunks */
    struct tfs_csum s = {.sums = stack, .len = len};

    if (csum_chunks(len) <= TFS_ARRAY_LEN(stack) / 8) {
        *out = tfs_csum_end(&s, data);
        return 0;
    }
    if (tfs_csum_begin(&s, len) < 0)
        return -ENOMEM;
    *out = tfs_csum_end(&s, data);
    tfs_csum_cleanup(&s);
    return 0;
}
