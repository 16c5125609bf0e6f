/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the listing manifest's line parser
 * (src/cache/manifest.c), the layer above the JSON parser (fuzzed by
 * fuzz_json.c).  Each input line is parsed on its own.  Invariants: no
 * crash, no leak; an entry that parses has a key the key rules accept,
 * and writes back to a line that parses to the same key and stat.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_round_trip(const struct tfs_manifest_line *l)
{
    struct tfs_manifest_line back;
    struct tfs_buf b;

    if (tfs_manifest_check_key(l->key) != 0)
        abort();
    tfs_buf_init(&b, 0);
    if (tfs_manifest_put_entry(&b, l->key, &l->st) == 0) {
        if (tfs_manifest_parse_line(b.p, b.len - 1, &back) != 0 ||
            back.kind != TFS_MANIFEST_ENTRY ||
            strcmp(back.key, l->key) != 0 || back.st.size != l->st.size ||
            back.st.mtime_ns != l->st.mtime_ns ||
            strcmp(back.st.version, l->st.version) != 0)
            abort();
    }
    tfs_buf_cleanup(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    const char *end = p + size;
    struct tfs_manifest_line *l = malloc(sizeof(*l));

    if (l == NULL)
        return 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (tfs_manifest_parse_line(p, n, l) == 0 &&
            l->kind == TFS_MANIFEST_ENTRY)
            fuzz_round_trip(l);
        p += n + 1;
    }
    free(l);
    return 0;
}
