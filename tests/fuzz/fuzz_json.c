/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the one JSON parser and writer (common/json.c),
 * under the default limits, tight ones, and with any bytes allowed in
 * strings (the manifest's reading).  Invariants: no crash,
 * no leak; whatever parses is written canonically, and the canonical
 * text parses again to the same text; every string escapes and parses
 * back to its bytes; the number accessors agree with the text.  The
 * layers above it have their own targets (fuzz_ckpt_index.c,
 * fuzz_pack_manifest.c, fuzz_safetensors.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The default caps, with or without bytes that are not UTF-8. */
static const struct tfs_json_limits fuzz_loose = {
    .max_len = 100000000,
    .max_depth = 64,
    .max_nodes = 16u << 20,
    .any_bytes = true,
};

/* Parse text with the default caps (any: any bytes) and write it out. */
static int fuzz_rewrite(const char *s, size_t len, bool any,
                        struct tfs_buf *out)
{
    struct tfs_json_doc doc;
    int rc = tfs_json_parse(s, len, any ? &fuzz_loose : NULL, &doc);

    if (rc == 0)
        rc = tfs_json_write(out, doc.root);
    tfs_json_cleanup(&doc);
    return rc;
}

/* A string value's escape parses back to the same bytes. */
static void fuzz_string(const struct tfs_json *v, bool any)
{
    struct tfs_json_doc doc;
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    if (tfs_json_put_str(&b, v->s, v->len) != 0 ||
        tfs_json_parse(b.p, b.len, any ? &fuzz_loose : NULL, &doc) != 0 ||
        doc.root->type != TFS_JSON_STRING || doc.root->len != v->len ||
        memcmp(doc.root->s, v->s, v->len) != 0)
        abort();
    tfs_json_cleanup(&doc);
    tfs_buf_cleanup(&b);
}

/* Every value: strings round-trip, whole numbers convert as written. */
static void fuzz_walk(const struct tfs_json *v, bool any)
{
    uint64_t u;
    int64_t i;

    if (v->type == TFS_JSON_STRING)
        fuzz_string(v, any);
    if (v->type == TFS_JSON_NUMBER && tfs_json_u64(v, &u) == 0 &&
        (tfs_json_i64(v, &i) == 0) != (u <= INT64_MAX))
        abort();
    if (v->type != TFS_JSON_NUMBER && tfs_json_u64(v, &u) == 0)
        abort();
    for (const struct tfs_json *c = v->child; c != NULL; c = c->next) {
        if ((v->type == TFS_JSON_OBJECT) != (c->key != NULL))
            abort();
        if (v->type == TFS_JSON_OBJECT && tfs_json_get(v, c->key) != c)
            abort();
        fuzz_walk(c, any);
    }
}

static void fuzz_parse(const char *s, size_t len,
                       const struct tfs_json_limits *lim)
{
    struct tfs_json_doc doc;
    struct tfs_buf a;
    struct tfs_buf b;

    if (tfs_json_parse(s, len, lim, &doc) != 0) {
        if (doc.root != NULL || doc.chunks != NULL)
            abort();                    /* a failed parse leaves it empty */
        return;
    }
    tfs_buf_init(&a, 0);
    tfs_buf_init(&b, 0);
    if (tfs_json_write(&a, doc.root) != 0 ||
        fuzz_rewrite(tfs_buf_str(&a), a.len, lim && lim->any_bytes, &b) ||
        a.len != b.len || memcmp(tfs_buf_str(&a), tfs_buf_str(&b), a.len))
        abort();
    if (lim == NULL && tfs_json_copy(&b, tfs_buf_str(&a), a.len) != 0)
        abort();
    fuzz_walk(doc.root, lim && lim->any_bytes);
    tfs_buf_cleanup(&a);
    tfs_buf_cleanup(&b);
    tfs_json_cleanup(&doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct tfs_json_limits tight = {
        .max_len = 4096,
        .max_depth = 4,
        .max_nodes = 64,
    };

    fuzz_parse((const char *)data, size, NULL);
    fuzz_parse((const char *)data, size, &tight);
    fuzz_parse((const char *)data, size, &fuzz_loose);
    return 0;
}
