/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the shard index parser (src/pack/index.c).  The
 * input is parsed as is (the trailing checksum must then reject nearly
 * everything) and again with a correct checksum patched in, so the
 * structural checks are reached.  Invariants: no crash, no read outside
 * the input; a parsed index is self-consistent (every sample's members
 * in range and sharing its key, names NUL-terminated at their length,
 * offsets increasing and inside the shard, no name absolute or with a
 * ".." component).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "pack/pack_int.h"
#include "tierfs/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether name has a leading '/' or a ".." component. */
static bool fuzz_escapes(const char *name)
{
    size_t n = strlen(name);

    if (name[0] == '/' || strcmp(name, "..") == 0 ||
        strncmp(name, "../", 3) == 0 ||
        (n >= 3 && strcmp(name + n - 3, "/..") == 0))
        return true;
    return strstr(name, "/../") != NULL;
}

static void fuzz_walk(const struct pack_index *x)
{
    uint64_t end = 0;

    for (uint64_t i = 0; i < x->n_samples; i++) {
        const struct pack_sample_ent *s = &x->samples[i];
        if (s->n == 0 || (uint64_t)s->first + s->n > x->n_members)
            abort();
        for (uint32_t j = 0; j < s->n; j++) {
            const struct pack_member *m = &x->members[s->first + j];
            if (strlen(m->name) != m->name_len ||
                m->name[m->key_len] != '.' ||
                memcmp(m->name, x->members[s->first].name, m->key_len) ||
                fuzz_escapes(m->name))
                abort();
            if (m->hdr_off < end || m->data_off + m->size > x->tar_size)
                abort();
            end = m->data_off + m->size;
        }
    }
}

static void fuzz_one(const unsigned char *buf, size_t len, bool verify)
{
    struct pack_index *x = NULL;

    if (tfs_pack_index_parse(buf, len, verify, &x) == 0) {
        fuzz_walk(x);
        tfs_free(x);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy;

    fuzz_one(data, size, true);
    fuzz_one(data, size, false);
    if (size < 8)
        return 0;
    copy = malloc(size);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    tfs_put_le64(copy + size - 8, XXH3_64bits(copy, size - 8));
    fuzz_one(copy, size, true);
    free(copy);
    return 0;
}
