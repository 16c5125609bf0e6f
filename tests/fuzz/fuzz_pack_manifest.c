/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the dataset manifest (src/pack/manifest.c), the
 * layer above the JSON parser (common/json.c, fuzzed by fuzz_json.c).
 * Invariants: no crash, no leak; a manifest that parses encodes and
 * parses back to the same shards and counts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pack/pack_int.h"
#include "tierfs/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_same(const struct pack_manifest *a,
                      const struct pack_manifest *b)
{
    if (a->n_shards != b->n_shards || a->n_samples != b->n_samples ||
        a->n_members != b->n_members)
        abort();
    for (size_t i = 0; i < a->n_shards; i++) {
        if (strcmp(a->shards[i].tar, b->shards[i].tar) != 0 ||
            a->shards[i].tar_xxh3 != b->shards[i].tar_xxh3 ||
            a->shards[i].idx_size != b->shards[i].idx_size)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pack_manifest m;
    struct pack_manifest back;
    char *json = NULL;
    size_t len = 0;

    if (tfs_pack_manifest_parse((const char *)data, size, &m) != 0)
        return 0;
    if (tfs_pack_manifest_encode(&m, NULL, &json, &len) == 0) {
        if (tfs_pack_manifest_parse(json, len, &back) != 0)
            abort();
        fuzz_same(&m, &back);
        tfs_pack_manifest_cleanup(&back);
        tfs_free(json);
    }
    tfs_pack_manifest_cleanup(&m);
    return 0;
}
