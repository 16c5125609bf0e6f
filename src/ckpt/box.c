/* SPDX-License-Identifier: MIT */
/*
 * Boxes: the hyper-rectangles of a tensor that a slice holds or a reader
 * asks for.  Resharding is copying the intersection of a saved slice and
 * a wanted box from one C-ordered buffer to another; trailing dimensions
 * that both buffers hold whole are merged into one memcpy run, so
 * splitting along dimension 0 costs a single copy.  A slice that lies in
 * the wanted box as one contiguous run needs no copy at all: the reader
 * reads it straight into place (tfs_ckpt_box_run).
 */
#include <string.h>

#include "ckpt/ckpt_int.h"

uint64_t tfs_ckpt_box_volume(const struct tfs_ckpt_box *b)
{
    uint64_t v = 1;

    for (int d = 0; d < b->ndim; d++)
        v *= (uint64_t)b->len[d];
    return v;
}

bool tfs_ckpt_box_intersect(const struct tfs_ckpt_box *a,
                            const struct tfs_ckpt_box *b,
                            struct tfs_ckpt_box *out)
{
    out->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        int64_t lo = TFS_MAX(a->off[d], b->off[d]);
        int64_t hi = TFS_MIN(a->off[d] + a->len[d], b->off[d] + b->len[d]);

        if (hi <= lo)
            return false;
        out->off[d] = lo;
        out->len[d] = hi - lo;
    }
    return true;
}

/* Elements between consecutive indices of dimension d of box b. */
static uint64_t box_stride(const struct tfs_ckpt_box *b, int d)
{
    uint64_t s = 1;

    for (int i = d + 1; i < b->ndim; i++)
        s *= (uint64_t)b->len[i];
    return s;
}

/* Where element idx (absolute, over dims 0..k) of part lies in box b. */
static uint64_t box_at(const struct tfs_ckpt_box *b, const int64_t *idx,
                       int k)
{
    uint64_t at = 0;

    for (int d = 0; d <= k; d++)
        at += (uint64_t)(idx[d] - b->off[d]) * box_stride(b, d);
    return at;
}

void tfs_ckpt_box_copy(void *dst, const struct tfs_ckpt_box *dst_box,
                       const void *src, const struct tfs_ckpt_box *src_box,
                       const struct tfs_ckpt_box *part, size_t elem)
{
    int64_t idx[TFS_CKPT_MAX_DIMS];
    uint64_t run;
    int k = part->ndim - 1;

    if (part->ndim == 0) {
        memcpy(dst, src, elem);
        return;
    }
    if (tfs_ckpt_box_volume(part) == 0)
        return;
    /* Merge trailing dimensions that all three boxes hold whole. */
    while (k > 0 && part->len[k] == src_box->len[k] &&
           part->len[k] == dst_box->len[k])
        k--;
    run = (uint64_t)part->len[k] * box_stride(part, k) * elem;
    for (int d = 0; d < part->ndim; d++)
        idx[d] = part->off[d];
    for (;;) {
        int d = k - 1;

        memcpy((char *)dst + box_at(dst_box, idx, k) * elem,
               (const char *)src + box_at(src_box, idx, k) * elem, run);
        /* The next index over dimensions 0..k-1 (an odometer). */
        while (d >= 0 && ++idx[d] == part->off[d] + part->len[d]) {
            idx[d] = part->off[d];
            d--;
        }
        if (d < 0)
            break;
    }
}

bool tfs_ckpt_box_run(const struct tfs_ckpt_box *part,
                      const struct tfs_ckpt_box *box, uint64_t *at)
{
    int k = 0;

    /* Leading dimensions of one index, then one partial dimension, then
     * only dimensions the box holds whole. */
    while (k < part->ndim && part->len[k] == 1)
        k++;
    for (int d = k + 1; d < part->ndim; d++) {
        if (part->len[d] != box->len[d] || part->off[d] != box->off[d])
            return false;
    }
    *at = box_at(box, part->off, part->ndim - 1);
    return true;
}
