/* SPDX-License-Identifier: MIT */
/*
 * manifest.json, the dataset's commit point: written after every shard
 * and index is in place, so a dataset without it is not finished.  One
 * object:
 *
 *   format "tierfs-pack", version 1, generator, samples, members, bytes
 *   (of all shards), shard_size, shuffle_seed (null: key order), fields
 *   ({field: members}), and shards: [{name, index, samples, members,
 *   bytes, index_bytes, xxh3, index_xxh3}], the checksums being XXH3-64
 *   of the whole shard and of its index file as 16 hex digits.
 *
 * Readers ignore fields they do not know, so later versions may add
 * some; a change that old readers would misread bumps "version".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "common/json.h"
#include "common/util.h"
#include "pack/pack_int.h"

/* ---- encoding ---- */

static int mf_shard(struct tfs_buf *b, const struct pack_shard_info *s,
                    bool last)
{
    int rc = tfs_buf_puts(b, "    {\"name\": ");

    if (rc == 0)
        rc = tfs_json_put_str(b, s->tar, strlen(s->tar));
    if (rc == 0)
        rc = tfs_buf_puts(b, ", \"index\": ");
    if (rc == 0)
        rc = tfs_json_put_str(b, s->idx, strlen(s->idx));
    if (rc == 0)
        rc = tfs_buf_printf(
            b,
            ", \"samples\": %" PRIu64 ", \"members\": %" PRIu64
            ", \"bytes\": %" PRIu64 ", \"index_bytes\": %" PRIu64
            ", \"xxh3\": \"%016" PRIx64 "\", \"index_xxh3\": \"%016" PRIx64
            "\"}%s\n",
            s->n_samples, s->n_members, s->tar_size, s->idx_size,
            s->tar_xxh3, s->idx_xxh3, last ? "" : ",");
    return rc;
}

int tfs_pack_manifest_encode(const struct pack_manifest *m,
                             const char *fields_json, char **out,
                             size_t *len)
{
    struct tfs_buf b;
    char seed[24] = "null";
    int rc;

    tfs_buf_init(&b, 0);
    if (m->shuffled)
        snprintf(seed, sizeof(seed), "%" PRIu64, m->shuffle_seed);
    rc = tfs_buf_printf(
        &b,
        "{\n  \"format\": \"%s\",\n  \"version\": %d,\n"
        "  \"generator\": \"tierfs %s\",\n  \"samples\": %" PRIu64 ",\n"
        "  \"members\": %" PRIu64 ",\n  \"bytes\": %" PRIu64 ",\n"
        "  \"shard_size\": %" PRIu64 ",\n  \"shuffle_seed\": %s,\n"
        "  \"fields\": %s,\n  \"shards\": [\n",
        TFS_PACK_FORMAT, TFS_PACK_FORMAT_VER, TFS_VERSION_STRING,
        m->n_samples, m->n_members, m->tar_bytes, m->shard_size, seed,
        fields_json ? fields_json : "{}");
    for (size_t i = 0; rc == 0 && i < m->n_shards; i++)
        rc = mf_shard(&b, &m->shards[i], i + 1 == m->n_shards);
    if (rc == 0)
        rc = tfs_buf_puts(&b, "  ]\n}\n");
    if (rc < 0) {
        tfs_buf_cleanup(&b);
        return rc;
    }
    *len = b.len;
    *out = tfs_buf_steal(&b);
    return *out != NULL ? 0 : -ENOMEM;
}

/* ---- parsing ---- */

static int mf_u64(const struct tfs_json *o, const char *key, size_t i,
                  uint64_t *out)
{
    if (tfs_json_u64(tfs_json_get(o, key), out) < 0)
        return i == SIZE_MAX
                   ? tfs_err(TFS_EFORMAT, "manifest: '%s' is missing or "
                             "not a whole number", key)
                   : tfs_err(TFS_EFORMAT, "manifest: shard %zu: '%s' is "
                             "missing or not a whole number", i, key);
    return 0;
}

static int mf_hex(const struct tfs_json *o, const char *key, size_t i,
                  uint64_t *out)
{
    const struct tfs_json *v = tfs_json_get(o, key);
    uint64_t x = 0;

    if (v == NULL || v->type != TFS_JSON_STRING || v->len != 16)
        return tfs_err(TFS_EFORMAT, "manifest: shard %zu: '%s' is not 16 "
                       "hex digits", i, key);
    for (size_t k = 0; k < 16; k++) {
        int d = tfs_hexval_lower(v->s[k]);

        if (d < 0)
            return tfs_err(TFS_EFORMAT, "manifest: shard %zu: '%s' is not "
                           "16 hex digits", i, key);
        x = (x << 4) | (unsigned)d;
    }
    *out = x;
    return 0;
}

/* A plain file name beside the manifest: no '/', not "." or "..". */
static int mf_name(const struct tfs_json *o, const char *key, size_t i,
                   char *out)
{
    const struct tfs_json *v = tfs_json_get(o, key);

    if (v == NULL || v->type != TFS_JSON_STRING || v->len == 0 ||
        v->len >= TFS_PACK_SHARD_NAME_MAX || strchr(v->s, '/') ||
        strcmp(v->s, ".") == 0 || strcmp(v->s, "..") == 0)
        return tfs_err(TFS_EFORMAT, "manifest: shard %zu: '%s' is not a "
                       "file name", i, key);
    memcpy(out, v->s, v->len + 1);
    return 0;
}

static int mf_shard_parse(const struct tfs_json *o, size_t i,
                          struct pack_shard_info *s)
{
    int rc;

    if (o->type != TFS_JSON_OBJECT)
        return tfs_err(TFS_EFORMAT, "manifest: shard %zu is not an object",
                       i);
    rc = mf_name(o, "name", i, s->tar);
    if (rc == 0)
        rc = mf_name(o, "index", i, s->idx);
    if (rc == 0)
        rc = mf_u64(o, "samples", i, &s->n_samples);
    if (rc == 0)
        rc = mf_u64(o, "members", i, &s->n_members);
    if (rc == 0)
        rc = mf_u64(o, "bytes", i, &s->tar_size);
    if (rc == 0)
        rc = mf_u64(o, "index_bytes", i, &s->idx_size);
    if (rc == 0)
        rc = mf_hex(o, "xxh3", i, &s->tar_xxh3);
    if (rc == 0)
        rc = mf_hex(o, "index_xxh3", i, &s->idx_xxh3);
    if (rc == 0 && (s->n_samples == 0 || s->n_members < s->n_samples))
        rc = tfs_err(TFS_EFORMAT, "manifest: shard %zu: %llu samples in "
                     "%llu members", i, (unsigned long long)s->n_samples,
                     (unsigned long long)s->n_members);
    return rc;
}

static int mf_shards(const struct tfs_json *arr, struct pack_manifest *m)
{
    size_t n = arr->n;
    size_t i = 0;

    m->shards = tfs_calloc(n ? n : 1, sizeof(*m->shards));
    if (m->shards == NULL)
        return -ENOMEM;
    m->n_shards = n;
    for (const struct tfs_json *c = arr->child; c != NULL; c = c->next) {
        struct pack_shard_info *s = &m->shards[i];
        int rc = mf_shard_parse(c, i++, s);
        if (rc < 0)
            return rc;
        if (s->n_samples > UINT64_MAX - m->n_samples)
            return tfs_err(TFS_EFORMAT, "manifest: too many samples");
        m->n_samples += s->n_samples;
        m->n_members += s->n_members;
        m->tar_bytes += s->tar_size;
    }
    return 0;
}

static int mf_root(const struct tfs_json *root, struct pack_manifest *m)
{
    const struct tfs_json *f = tfs_json_get(root, "format");
    const struct tfs_json *arr = tfs_json_get(root, "shards");
    uint64_t version = 0;
    uint64_t samples = 0;
    int rc;

    if (f == NULL || f->type != TFS_JSON_STRING ||
        strcmp(f->s, TFS_PACK_FORMAT) != 0)
        return tfs_err(TFS_EFORMAT, "manifest: not a %s manifest",
                       TFS_PACK_FORMAT);
    rc = mf_u64(root, "version", SIZE_MAX, &version);
    if (rc == 0 && version != TFS_PACK_FORMAT_VER)
        rc = tfs_err(TFS_EFORMAT, "manifest: version %llu not supported",
                     (unsigned long long)version);
    if (rc == 0)
        rc = mf_u64(root, "samples", SIZE_MAX, &samples);
    if (rc == 0 && (arr == NULL || arr->type != TFS_JSON_ARRAY))
        rc = tfs_err(TFS_EFORMAT, "manifest: 'shards' is not an array");
    if (rc == 0)
        rc = mf_shards(arr, m);
    if (rc == 0 && samples != m->n_samples)
        rc = tfs_err(TFS_EFORMAT, "manifest: 'samples' says %llu, the "
                     "shards hold %llu", (unsigned long long)samples,
                     (unsigned long long)m->n_samples);
    /* Optional: left 0 unless whole numbers (u64 writes only on success). */
    (void)tfs_json_u64(tfs_json_get(root, "shard_size"), &m->shard_size);
    m->shuffled = tfs_json_u64(tfs_json_get(root, "shuffle_seed"),
                               &m->shuffle_seed) == 0;
    return rc;
}

/*
 * The manifest's JSON limits: its byte cap and the depth the manifest
 * reader always had; one value per byte is no further cap.  Strings may
 * hold bytes that are not UTF-8: "fields" holds the extensions of the
 * source file names as they were, and manifests written so are read.
 */
static const struct tfs_json_limits mf_limits = {
    .max_len = TFS_PACK_MANIFEST_MAX,
    .max_depth = TFS_PACK_MANIFEST_DEPTH_MAX,
    .max_nodes = TFS_PACK_MANIFEST_MAX,
    .any_bytes = true,
};

int tfs_pack_manifest_parse(const char *json, size_t len,
                            struct pack_manifest *out)
{
    struct tfs_json_doc doc;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = tfs_json_parse(json, len, &mf_limits, &doc);
    if (rc == TFS_ETOOBIG)
        rc = TFS_EFORMAT;               /* the detail says which cap */
    if (rc == 0)
        rc = mf_root(doc.root, out);
    tfs_json_cleanup(&doc);
    if (rc < 0)
        tfs_pack_manifest_cleanup(out);
    return rc;
}

void tfs_pack_manifest_cleanup(struct pack_manifest *m)
{
    tfs_free(m->shards);
    memset(m, 0, sizeof(*m));
}
