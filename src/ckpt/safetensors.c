/* SPDX-License-Identifier: MIT */
/*
 * The safetensors format: dtypes, and the header of a shard file.
 *
 *   u64 N (little-endian) | N bytes of JSON | the tensors' bytes
 *
 * The JSON maps each tensor name to {"dtype", "shape", "data_offsets"}
 * (offsets relative to the byte buffer after the header) plus an optional
 * "__metadata__" of string values.  Sorted by offset the tensors tile the
 * buffer exactly: no holes, no overlaps, no trailing bytes.  We write
 * "format": "pt", our per-tensor checksums as TIERFS_CHECKSUMS (a JSON
 * string {name: "xxh3:<16 hex>"}), and for slices of larger tensors
 * DCP_SHARDING_INFO {name: {"saved_offsets": [...]}} with DCP_VERSION, as
 * PyTorch's Hugging Face storage writer does.
 *
 * Decoding validates everything a reader relies on; encoding pads the
 * JSON with spaces to a multiple of 8 so the data starts aligned.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"
#include "common/bytes.h"

struct ckpt_dtype {
    const char *name;
    unsigned    bits;
};

/* The safetensors dtypes, in the reference's order. */
static const struct ckpt_dtype ckpt_dtypes[] = {
    {"BOOL", 8},        {"F4", 4},          {"F6_E2M3", 6},
    {"F6_E3M2", 6},     {"U8", 8},          {"I8", 8},
    {"F8_E5M2", 8},     {"F8_E4M3", 8},     {"F8_E8M0", 8},
    {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},        {"F16", 16},        {"BF16", 16},
    {"I32", 32},        {"U32", 32},        {"F32", 32},
    {"C64", 64},        {"F64", 64},        {"I64", 64},
    {"U64", 64},
};

int tfs_ckpt_dtype_find(const char *name, size_t len)
{
    for (size_t i = 0; i < TFS_ARRAY_LEN(ckpt_dtypes); i++) {
        if (strlen(ckpt_dtypes[i].name) == len &&
            memcmp(ckpt_dtypes[i].name, name, len) == 0)
            return (int)i;
    }
    return -1;
}

const char *tfs_ckpt_dtype_name(int dtype)
{
    return ckpt_dtypes[dtype].name;
}

unsigned tfs_ckpt_dtype_bits(int dtype)
{
    return ckpt_dtypes[dtype].bits;
}

int tfs_ckpt_tensor_size(int dtype, int ndim, const int64_t *shape,
                         uint64_t *nelem, uint64_t *nbytes)
{
    uint64_t n = 1;
    uint64_t bits;

    if (ndim < 0 || ndim > TFS_CKPT_MAX_DIMS)
        return -EINVAL;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 ||
            __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return -EINVAL;
    }
    if (__builtin_mul_overflow(n, tfs_ckpt_dtype_bits(dtype), &bits) ||
        bits % 8 != 0)
        return -EINVAL;
    *nelem = n;
    *nbytes = bits / 8;
    return 0;
}

/* ---- decoding ---- */

int tfs_ckpt_st_header_len(const unsigned char b[8], uint64_t file_size,
                           const char *what, uint64_t *n)
{
    uint64_t v = tfs_get_le64(b);

    if (file_size < 8)
        return tfs_err(TFS_EFORMAT, "%s: truncated: %" PRIu64 " bytes, "
                       "shorter than the header length", what, file_size);
    if (v > file_size - 8)
        return tfs_err(TFS_EFORMAT, "%s: header length %" PRIu64 " beyond "
                       "the file of %" PRIu64 " bytes", what, v, file_size);
    if (v > TFS_CKPT_ST_MAX_HEADER)
        return tfs_err(TFS_EFORMAT, "%s: header length %" PRIu64 " over "
                       "the limit of %u", what, v, TFS_CKPT_ST_MAX_HEADER);
    if (v < 2)
        return tfs_err(TFS_EFORMAT, "%s: header length %" PRIu64
                       " too small", what, v);
    *n = v;
    return 0;
}

/* An array of at most TFS_CKPT_MAX_DIMS whole numbers >= 0 into out. */
static int st_dims(const struct tfs_json *a, int64_t *out, int *ndim)
{
    int i = 0;

    if (a == NULL || a->type != TFS_JSON_ARRAY || a->n > TFS_CKPT_MAX_DIMS)
        return TFS_EFORMAT;
    for (const struct tfs_json *e = a->child; e; e = e->next) {
        if (tfs_json_i64(e, &out[i]) < 0 || out[i] < 0)
            return TFS_EFORMAT;
        i++;
    }
    *ndim = i;
    return 0;
}

/* One tensor entry {"dtype", "shape", "data_offsets"}. */
static int st_tensor(const struct tfs_json *e, const char *what,
                     struct tfs_ckpt_st_tensor *t)
{
    const struct tfs_json *dt = tfs_json_get(e, "dtype");
    const struct tfs_json *off = tfs_json_get(e, "data_offsets");
    uint64_t nelem = 0;
    uint64_t nbytes = 0;

    t->name = e->key;
    if (e->type != TFS_JSON_OBJECT)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s' is not an object",
                       what, t->name);
    if (tfs_json_str(dt) == NULL)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s' has no dtype", what,
                       t->name);
    t->dtype = tfs_ckpt_dtype_find(dt->s, dt->len);
    if (t->dtype < 0)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s': unknown dtype '%.40s'",
                       what, t->name, dt->s);
    if (st_dims(tfs_json_get(e, "shape"), t->shape, &t->ndim) < 0)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s': bad shape", what,
                       t->name);
    if (off == NULL || off->type != TFS_JSON_ARRAY || off->n != 2 ||
        tfs_json_u64(off->child, &t->begin) < 0 ||
        tfs_json_u64(off->child->next, &t->end) < 0 ||
        t->end < t->begin)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s': bad data_offsets",
                       what, t->name);
    if (tfs_ckpt_tensor_size(t->dtype, t->ndim, t->shape, &nelem,
                             &nbytes) < 0 ||
        nbytes != t->end - t->begin)
        return tfs_err(TFS_EFORMAT, "%s: tensor '%s': data_offsets span "
                       "%" PRIu64 " bytes, dtype and shape need %" PRIu64,
                       what, t->name, t->end - t->begin, nbytes);
    return 0;
}

static int st_by_begin(const void *a, const void *b)
{
    const struct tfs_ckpt_st_tensor *x = a;
    const struct tfs_ckpt_st_tensor *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* For lookups by name while reading the metadata: tensors by name. */
struct st_names {
    struct tfs_ckpt_st_tensor **v;
    size_t                      n;
};

static int st_by_name(const void *a, const void *b)
{
    const struct tfs_ckpt_st_tensor *x =
        *(const struct tfs_ckpt_st_tensor *const *)a;
    const struct tfs_ckpt_st_tensor *y =
        *(const struct tfs_ckpt_st_tensor *const *)b;

    return strcmp(x->name, y->name);
}

static struct tfs_ckpt_st_tensor *st_find(const struct st_names *nm,
                                          const char *name)
{
    size_t lo = 0;
    size_t hi = nm->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(nm->v[mid]->name, name);

        if (c == 0)
            return nm->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Sorted by offset, the tensors must tile [0, data_len) exactly. */
static int st_check_tiling(struct tfs_ckpt_st_header *h, uint64_t file_size,
                           const char *what)
{
    uint64_t at = 0;

    qsort(h->v, h->n, sizeof(h->v[0]), st_by_begin);
    for (size_t i = 0; i < h->n; i++) {
        if (h->v[i].begin < at)
            return tfs_err(TFS_EFORMAT, "%s: tensor '%s' overlaps the "
                           "previous one (offset %" PRIu64 " < %" PRIu64 ")",
                           what, h->v[i].name, h->v[i].begin, at);
        if (h->v[i].begin > at)
            return tfs_err(TFS_EFORMAT, "%s: hole before tensor '%s' "
                           "(offset %" PRIu64 ", expected %" PRIu64 ")",
                           what, h->v[i].name, h->v[i].begin, at);
        at = h->v[i].end;
    }
    h->data_len = at;
    if (8 + h->header_len + at > file_size)
        return tfs_err(TFS_EFORMAT, "%s: truncated: %" PRIu64 " bytes, the "
                       "header says %" PRIu64, what, file_size,
                       8 + h->header_len + at);
    if (8 + h->header_len + at < file_size)
        return tfs_err(TFS_EFORMAT, "%s: %" PRIu64 " trailing bytes after "
                       "the last tensor", what,
                       file_size - 8 - h->header_len - at);
    return 0;
}

/* TIERFS_CHECKSUMS: {name: "xxh3:<16 hex>"} */
static int st_checksums(const struct st_names *nm,
                        const struct tfs_json *m, const char *what)
{
    for (const struct tfs_json *e = m->child; e; e = e->next) {
        struct tfs_ckpt_st_tensor *t = st_find(nm, e->key);
        const char *s = tfs_json_str(e);
        char *end;

        if (t == NULL)
            return tfs_err(TFS_EFORMAT, "%s: checksum for unknown tensor "
                           "'%.100s'", what, e->key);
        if (s == NULL || e->len != 21 || strncmp(s, "xxh3:", 5) != 0 ||
            strspn(s + 5, "0123456789abcdef") != 16)
            return tfs_err(TFS_EFORMAT, "%s: tensor '%s': bad checksum",
                           what, t->name);
        t->xxh3 = strtoull(s + 5, &end, 16);
        t->has_xxh3 = true;
    }
    return 0;
}

/* DCP_SHARDING_INFO: {name: {"saved_offsets": [...]}} */
static int st_sharding(const struct st_names *nm,
                       const struct tfs_json *m, const char *what)
{
    for (const struct tfs_json *e = m->child; e; e = e->next) {
        struct tfs_ckpt_st_tensor *t = st_find(nm, e->key);
        int ndim = -1;

        if (t == NULL)
            return tfs_err(TFS_EFORMAT, "%s: sharding info for unknown "
                           "tensor '%.100s'", what, e->key);
        if (st_dims(tfs_json_get(e, "saved_offsets"), t->offsets,
                    &ndim) < 0 || ndim != t->ndim)
            return tfs_err(TFS_EFORMAT, "%s: tensor '%s': bad saved_offsets",
                           what, t->name);
        t->sliced = true;
    }
    return 0;
}

/* A metadata value that is itself a JSON object, in a string. */
static int st_nested(const struct st_names *nm,
                     const struct tfs_json *meta, const char *key,
                     const char *what)
{
    const char *s = tfs_json_str(tfs_json_get(meta, key));
    struct tfs_json_doc doc;
    int rc;

    if (s == NULL)
        return 0;
    rc = tfs_json_parse(s, strlen(s), NULL, &doc);
    if (rc == TFS_EFORMAT || rc == TFS_ETOOBIG)
        return tfs_ckpt_err_in(TFS_EFORMAT, what, key);
    if (rc < 0)
        return rc;
    if (doc.root->type != TFS_JSON_OBJECT)
        rc = tfs_err(TFS_EFORMAT, "%s: __metadata__ %s is not an object",
                     what, key);
    else if (strcmp(key, TFS_CKPT_CSUM_KEY) == 0)
        rc = st_checksums(nm, doc.root, what);
    else
        rc = st_sharding(nm, doc.root, what);
    tfs_json_cleanup(&doc);
    return rc;
}

static int st_metadata(struct tfs_ckpt_st_header *h,
                       const struct tfs_json *meta, const char *what)
{
    struct st_names nm = {.n = h->n};
    int rc;

    if (meta->type != TFS_JSON_OBJECT)
        return tfs_err(TFS_EFORMAT, "%s: __metadata__ is not an object",
                       what);
    for (const struct tfs_json *e = meta->child; e; e = e->next) {
        if (e->type != TFS_JSON_STRING)
            return tfs_err(TFS_EFORMAT, "%s: __metadata__ value '%.100s' "
                           "is not a string", what, e->key);
    }
    h->format = tfs_json_str(tfs_json_get(meta, "format"));
    nm.v = tfs_malloc(h->n * sizeof(*nm.v));
    if (nm.v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < h->n; i++)
        nm.v[i] = &h->v[i];
    qsort(nm.v, nm.n, sizeof(*nm.v), st_by_name);
    rc = st_nested(&nm, meta, TFS_CKPT_CSUM_KEY, what);
    if (rc == 0)
        rc = st_nested(&nm, meta, TFS_CKPT_SHARDING_KEY, what);
    tfs_free(nm.v);
    return rc;
}

static int st_decode_doc(struct tfs_ckpt_st_header *h, uint64_t file_size,
                         const char *what)
{
    const struct tfs_json *root = h->doc.root;
    const struct tfs_json *meta = NULL;
    size_t i = 0;
    int rc;

    if (root->type != TFS_JSON_OBJECT)
        return tfs_err(TFS_EFORMAT, "%s: header is not a JSON object", what);
    h->v = tfs_calloc(root->n, sizeof(*h->v));
    if (h->v == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") == 0) {
            meta = e;
            continue;
        }
        rc = st_tensor(e, what, &h->v[i]);
        if (rc < 0)
            return rc;
        i++;
    }
    h->n = i;
    rc = st_check_tiling(h, file_size, what);
    if (rc == 0 && meta != NULL)
        rc = st_metadata(h, meta, what);
    return rc;
}

int tfs_ckpt_st_decode(const char *json, size_t n, uint64_t file_size,
                       const char *what, struct tfs_ckpt_st_header *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    out->header_len = n;
    if (n == 0 || json[0] != '{')
        return tfs_err(TFS_EFORMAT, "%s: header does not start with '{'",
                       what);
    rc = tfs_json_parse(json, n, NULL, &out->doc);
    if (rc == TFS_EFORMAT || rc == TFS_ETOOBIG)
        return tfs_ckpt_err_in(TFS_EFORMAT, what, "bad header");
    if (rc == 0)
        rc = st_decode_doc(out, file_size, what);
    if (rc < 0)
        tfs_ckpt_st_cleanup(out);
    return rc;
}

void tfs_ckpt_st_cleanup(struct tfs_ckpt_st_header *h)
{
    tfs_json_cleanup(&h->doc);
    tfs_free(h->v);
    h->v = NULL;
    h->n = 0;
}

/* ---- encoding ---- */

static int st_put_dims(struct tfs_buf *b, int ndim, const int64_t *v)
{
    int rc = tfs_buf_puts(b, "[");

    for (int i = 0; i < ndim && rc == 0; i++)
        rc = tfs_buf_printf(b, "%s%" PRId64, i ? "," : "", v[i]);
    if (rc == 0)
        rc = tfs_buf_puts(b, "]");
    return rc;
}

/* The inner JSON of TIERFS_CHECKSUMS or DCP_SHARDING_INFO. */
static int st_inner(struct tfs_buf *in, const struct tfs_ckpt_st_entry *v,
                    size_t n, bool sharding)
{
    int rc = tfs_buf_puts(in, "{");
    bool first = true;

    for (size_t i = 0; i < n && rc == 0; i++) {
        if (sharding && v[i].offsets == NULL)
            continue;
        if (!first)
            rc = tfs_buf_puts(in, ",");
        first = false;
        if (rc == 0)
            rc = tfs_json_put_str(in, v[i].name, strlen(v[i].name));
        if (rc == 0 && sharding) {
            rc = tfs_buf_puts(in, ":{\"saved_offsets\":");
            if (rc == 0)
                rc = st_put_dims(in, v[i].ndim, v[i].offsets);
            if (rc == 0)
                rc = tfs_buf_puts(in, "}");
        } else if (rc == 0) {
            rc = tfs_buf_printf(in, ":\"xxh3:%016" PRIx64 "\"", v[i].xxh3);
        }
    }
    if (rc == 0)
        rc = tfs_buf_puts(in, "}");
    return rc;
}

/* "__metadata__": {...}, with the nested documents as strings. */
static int st_put_meta(struct tfs_buf *b, const struct tfs_ckpt_st_entry *v,
                       size_t n)
{
    struct tfs_buf in;
    bool sliced = false;
    int rc;

    for (size_t i = 0; i < n; i++)
        sliced |= v[i].offsets != NULL;
    tfs_buf_init(&in, 0);
    rc = tfs_buf_puts(b, "\"__metadata__\":{\"format\":\"pt\",\""
                      TFS_CKPT_CSUM_KEY "\":");
    if (rc == 0)
        rc = st_inner(&in, v, n, false);
    if (rc == 0)
        rc = tfs_json_put_str(b, in.p, in.len);
    if (rc == 0 && sliced) {
        tfs_buf_reset(&in);
        rc = st_inner(&in, v, n, true);
        if (rc == 0)
            rc = tfs_buf_puts(b, ",\"DCP_VERSION\":\"1.0\",\""
                              TFS_CKPT_SHARDING_KEY "\":");
        if (rc == 0)
            rc = tfs_json_put_str(b, in.p, in.len);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "}");
    tfs_buf_cleanup(&in);
    return rc;
}

static int st_put_tensor(struct tfs_buf *b, const struct tfs_ckpt_st_entry *e)
{
    int rc = tfs_buf_puts(b, ",");

    if (rc == 0)
        rc = tfs_json_put_str(b, e->name, strlen(e->name));
    if (rc == 0)
        rc = tfs_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":",
                            tfs_ckpt_dtype_name(e->dtype));
    if (rc == 0)
        rc = st_put_dims(b, e->ndim, e->shape);
    if (rc == 0)
        rc = tfs_buf_printf(b, ",\"data_offsets\":[%" PRIu64 ",%" PRIu64
                            "]}", e->begin, e->end);
    return rc;
}

int tfs_ckpt_st_encode(struct tfs_buf *out,
                       const struct tfs_ckpt_st_entry *v, size_t n)
{
    size_t start = out->len;
    uint64_t len;
    int rc = tfs_buf_append(out, "\0\0\0\0\0\0\0\0{", 9);

    if (rc == 0)
        rc = st_put_meta(out, v, n);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = st_put_tensor(out, &v[i]);
    if (rc == 0)
        rc = tfs_buf_puts(out, "}");
    while (rc == 0 && (out->len - start) % 8 != 0)
        rc = tfs_buf_puts(out, " ");
    if (rc < 0)
        return rc;
    len = out->len - start - 8;
    tfs_put_le64((uint8_t *)out->p + start, len);
    return 0;
}
