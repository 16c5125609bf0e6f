/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the JSON documents of checkpoints: the index
 * (model.safetensors.index.json) and the per-rank marker, the layers
 * above the JSON parser (common/json.c, fuzzed by fuzz_json.c), and
 * splitting "URI/STEP".  Invariants: whatever parses is written
 * canonically, and the canonical text parses again to the same text;
 * markers merge into an index or fail cleanly.  No crash, no leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_index(const char *s, size_t len)
{
    struct tfs_ckpt_index ix;
    struct tfs_ckpt_index back;
    struct tfs_buf a;
    struct tfs_buf b;

    if (tfs_ckpt_index_parse(s, len, "fuzz", &ix) != 0)
        return;
    tfs_buf_init(&a, 0);
    tfs_buf_init(&b, 0);
    if (tfs_ckpt_index_write(&a, &ix) != 0 ||
        tfs_ckpt_index_parse(a.p, a.len, "re", &back) != 0)
        abort();
    if (tfs_ckpt_index_write(&b, &back) != 0 || a.len != b.len ||
        memcmp(a.p, b.p, a.len) != 0 || back.n_wm != ix.n_wm ||
        back.n_files != ix.n_files)
        abort();
    tfs_ckpt_index_cleanup(&back);
    tfs_ckpt_index_cleanup(&ix);
    tfs_buf_cleanup(&a);
    tfs_buf_cleanup(&b);
}

static void check_marker(const char *s, size_t len)
{
    struct tfs_ckpt_marker m;
    struct tfs_ckpt_marker back;
    struct tfs_ckpt_index ix;
    struct tfs_buf a;
    struct tfs_buf b;

    if (tfs_ckpt_marker_parse(s, len, "fuzz", &m) != 0)
        return;
    tfs_buf_init(&a, 0);
    tfs_buf_init(&b, 0);
    if (tfs_ckpt_marker_write(&a, &m) != 0 ||
        tfs_ckpt_marker_parse(a.p, a.len, "re", &back) != 0 ||
        tfs_ckpt_marker_write(&b, &back) != 0 || a.len != b.len ||
        memcmp(a.p, b.p, a.len) != 0)
        abort();
    /* A lone rank-0 marker of a world of one merges, or fails cleanly. */
    if (m.rank == 0 && m.world_size == 1 &&
        tfs_ckpt_index_build(&m, 1, 0, &ix) == 0)
        tfs_ckpt_index_cleanup(&ix);
    tfs_ckpt_marker_cleanup(&back);
    tfs_ckpt_marker_cleanup(&m);
    tfs_buf_cleanup(&a);
    tfs_buf_cleanup(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    char root[256];
    int64_t step;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    check_index(s, size);
    check_marker(s, size);
    if (strlen(s) == size)
        (void)tfs_ckpt_split_uri(s, root, sizeof(root), &step);
    free(s);
    return 0;
}
