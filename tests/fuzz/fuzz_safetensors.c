/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the safetensors header: the input is a whole shard
 * file.  Invariants checked when it decodes: the tensors tile the data
 * buffer exactly up to the end of the file, every byte count matches its
 * dtype and shape, and encoding the decoded tensors again gives a header
 * that decodes to the same tensors.  No crash, no leak, no read outside
 * the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tiling(const struct tfs_ckpt_st_header *h, size_t size)
{
    uint64_t at = 0;

    for (size_t i = 0; i < h->n; i++) {
        uint64_t nelem;
        uint64_t nbytes;

        if (h->v[i].begin != at || h->v[i].end < h->v[i].begin)
            abort();
        if (tfs_ckpt_tensor_size(h->v[i].dtype, h->v[i].ndim, h->v[i].shape,
                                 &nelem, &nbytes) < 0 ||
            nbytes != h->v[i].end - h->v[i].begin)
            abort();
        at = h->v[i].end;
    }
    if (at != h->data_len || 8 + h->header_len + at != size)
        abort();
}

/* Encode h's tensors again and decode the result: the same tensors. */
static void check_reencode(const struct tfs_ckpt_st_header *h)
{
    struct tfs_ckpt_st_entry *e = calloc(h->n + 1, sizeof(*e));
    struct tfs_ckpt_st_header back;
    struct tfs_buf b;
    uint64_t n;

    if (e == NULL)
        return;
    for (size_t i = 0; i < h->n; i++) {
        e[i].name = h->v[i].name;
        e[i].dtype = h->v[i].dtype;
        e[i].ndim = h->v[i].ndim;
        e[i].shape = h->v[i].shape;
        e[i].offsets = h->v[i].sliced ? h->v[i].offsets : NULL;
        e[i].begin = h->v[i].begin;
        e[i].end = h->v[i].end;
        e[i].xxh3 = h->v[i].xxh3;
    }
    tfs_buf_init(&b, 0);
    if (tfs_ckpt_st_encode(&b, e, h->n) == 0) {
        if (tfs_ckpt_st_header_len((const unsigned char *)b.p,
                                   b.len + h->data_len, "re", &n) != 0 ||
            tfs_ckpt_st_decode(b.p + 8, (size_t)n, b.len + h->data_len, "re",
                               &back) != 0)
            abort();
        if (back.n != h->n)
            abort();
        for (size_t i = 0; i < h->n; i++) {
            if (strcmp(back.v[i].name, h->v[i].name) != 0 ||
                back.v[i].begin != h->v[i].begin ||
                back.v[i].dtype != h->v[i].dtype ||
                back.v[i].ndim != h->v[i].ndim ||
                back.v[i].sliced != h->v[i].sliced)
                abort();
        }
        tfs_ckpt_st_cleanup(&back);
    }
    tfs_buf_cleanup(&b);
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tfs_ckpt_st_header h;
    uint64_t n;

    if (size < 8 || tfs_ckpt_st_header_len(data, size, "fuzz", &n) != 0)
        return 0;
    if (tfs_ckpt_st_decode((const char *)data + 8, (size_t)n, size, "fuzz",
                           &h) != 0)
        return 0;
    check_tiling(&h, size);
    check_reencode(&h);
    tfs_ckpt_st_cleanup(&h);
    return 0;
}
