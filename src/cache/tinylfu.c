/* SPDX-License-Identifier: MIT */
/*
 * The tinylfu frequency sketch and the disk tier's geometry (tinylfu.h):
 * shared by the cache's index and `tierfs profile`'s simulation.
 */
#include "cache/tinylfu.h"

static uint64_t tinylfu_mix(uint64_t x, uint64_t seed)
{
    x ^= seed;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 29);
}

static uint8_t *tinylfu_cell(const struct tfs_tinylfu *t, unsigned r,
                             uint64_t key)
{
    return &t->cells[r * t->width + (tinylfu_mix(key, r + 1) &
                                     (t->width - 1))];
}

unsigned tfs_tinylfu_count(const struct tfs_tinylfu *t, uint64_t key)
{
    unsigned min = 255;

    for (unsigned r = 0; r < TFS_TINYLFU_ROWS; r++) {
        uint8_t v = *tinylfu_cell(t, r, key);
        if (v < min)
            min = v;
    }
    return min;
}

/* Conservative update: only the rows at the minimum grow. */
void tfs_tinylfu_add(struct tfs_tinylfu *t, uint64_t key)
{
    unsigned min = tfs_tinylfu_count(t, key);

    for (unsigned r = 0; r < TFS_TINYLFU_ROWS && min < 255; r++) {
        uint8_t *v = tinylfu_cell(t, r, key);
        if (*v == min)
            (*v)++;
    }
    if (++*t->ops < 16 * t->width)
        return;
    for (uint64_t i = 0; i < TFS_TINYLFU_ROWS * t->width; i++)
        t->cells[i] >>= 1;
    *t->ops = 0;
}

uint64_t tfs_tinylfu_blocks(uint64_t cache_bytes)
{
    return cache_bytes / (256u << 10) + 1024;
}

uint64_t tfs_tinylfu_width(uint64_t max_blocks)
{
    uint64_t n = 1u << 14;

    while (n < max_blocks * 2 && n < (1u << 24))
        n <<= 1;
    return n;
}

uint64_t tfs_tinylfu_max_entries(uint64_t width)
{
    return width - width / 4;
}
