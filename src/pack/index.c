/* SPDX-License-Identifier: MIT */
/*
 * The per-shard offset index (shard-NNNNNN.idx), little-endian, field by
 * field:
 *
 *   header (64 bytes)
 *     0  magic      "TFSPIDX\0"
 *     8  version    u32 (1)
 *    12  flags      u32 (0; an index with unknown flags is refused)
 *    16  n_samples  u64
 *    24  n_members  u64
 *    32  tar_size   u64  bytes of the shard, end blocks included
 *    40  names_size u64  bytes of the name table
 *    48  tar_xxh3   u64  XXH3-64 of the whole shard
 *    56  plan_xxh3  u64  XXH3-64 of what went in (names, sizes, versions)
 *   samples: n_samples x 8 bytes: first member u32, members u32
 *   members: n_members x 40 bytes: header offset u64, data offset u64,
 *            size u64, XXH3-64 of the data u64, name offset u32 (in the
 *            name table), name length u16, key length u16
 *   name table: the member names "key.field", back to back in member
 *            order, no NULs (each name starts where the one before ends)
 *   trailer: XXH3-64 of every byte before it, u64
 *
 * Parsing validates everything against everything else before anything
 * is used (tests/fuzz/fuzz_shard_index.c runs it), so a parsed index can
 * be walked without further checks.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "common/util.h"
#include "pack/pack_int.h"

/* ---- parsing ---- */

struct idx_hdr {
    uint64_t n_samples;
    uint64_t n_members;
    uint64_t tar_size;
    uint64_t names_size;
};

static int idx_header(const unsigned char *b, size_t len, struct idx_hdr *h)
{
    uint64_t fixed;

    if (len < TFS_PIDX_HDR + 8 || memcmp(b, TFS_PIDX_MAGIC, 8) != 0)
        return tfs_err(TFS_EFORMAT, "not a shard index (bad magic)");
    if (tfs_get_le32(b + 8) != TFS_PIDX_VERSION ||
        tfs_get_le32(b + 12) != 0)
        return tfs_err(TFS_EFORMAT, "shard index version %u flags %#x "
                       "not supported", (unsigned)tfs_get_le32(b + 8),
                       (unsigned)tfs_get_le32(b + 12));
    h->n_samples = tfs_get_le64(b + 16);
    h->n_members = tfs_get_le64(b + 24);
    h->tar_size = tfs_get_le64(b + 32);
    h->names_size = tfs_get_le64(b + 40);
    if (h->n_members > len / TFS_PIDX_MEMBER || h->n_members > UINT32_MAX ||
        h->n_samples > h->n_members || h->names_size > len)
        return tfs_err(TFS_EFORMAT, "shard index counts do not fit its "
                       "%zu bytes", len);
    fixed = TFS_PIDX_HDR + h->n_samples * TFS_PIDX_SAMPLE +
            h->n_members * TFS_PIDX_MEMBER + h->names_size + 8;
    if (fixed != len)
        return tfs_err(TFS_EFORMAT, "shard index is %zu bytes, its header "
                       "says %llu", len, (unsigned long long)fixed);
    if (h->tar_size % TFS_TAR_BLOCK != 0 ||
        h->tar_size < 2 * TFS_TAR_BLOCK)
        return tfs_err(TFS_EFORMAT, "shard index: shard size %llu is not "
                       "a tar archive's", (unsigned long long)h->tar_size);
    return 0;
}

static int idx_samples(const unsigned char *p, struct pack_index *x)
{
    uint64_t next = 0;

    for (uint64_t i = 0; i < x->n_samples; i++) {
        struct pack_sample_ent *s = &x->samples[i];
        s->first = tfs_get_le32(p + i * TFS_PIDX_SAMPLE);
        s->n = tfs_get_le32(p + i * TFS_PIDX_SAMPLE + 4);
        if (s->first != next || s->n == 0 ||
            s->n > x->n_members - next)
            return tfs_err(TFS_EFORMAT, "shard index: sample %llu at +%llu "
                           "does not follow the one before",
                           (unsigned long long)i,
                           (unsigned long long)(TFS_PIDX_HDR +
                                                i * TFS_PIDX_SAMPLE));
        next += s->n;
    }
    if (next != x->n_members)
        return tfs_err(TFS_EFORMAT, "shard index: samples hold %llu of %llu "
                       "members", (unsigned long long)next,
                       (unsigned long long)x->n_members);
    return 0;
}

/* Offsets of member m, given the end of the member before it. */
static int idx_offsets(const struct pack_member *m, uint64_t prev_end,
                       uint64_t tar_size, uint64_t at)
{
    uint64_t limit = tar_size - 2 * TFS_TAR_BLOCK;

    if (m->hdr_off % TFS_TAR_BLOCK != 0 || m->data_off % TFS_TAR_BLOCK != 0 ||
        m->hdr_off < prev_end || m->data_off <= m->hdr_off ||
        m->data_off - m->hdr_off > TFS_TAR_HDR_MAX || m->size > limit ||
        m->data_off > limit - m->size)
        return tfs_err(TFS_EFORMAT, "shard index: member record at +%llu "
                       "has impossible offsets (header %llu, data %llu, "
                       "size %llu)", (unsigned long long)at,
                       (unsigned long long)m->hdr_off,
                       (unsigned long long)m->data_off,
                       (unsigned long long)m->size);
    return 0;
}

/*
 * What is wrong with the path s[0..len) as tierfs pack would write it
 * (plan.c: no leading '/', no empty, "." or ".." component), or NULL.
 */
static const char *idx_path_fault(const char *s, size_t len)
{
    size_t at = 0;

    if (len > 0 && s[0] == '/')
        return "is absolute";
    while (at <= len) {
        const char *slash = memchr(s + at, '/', len - at);
        size_t end = slash != NULL ? (size_t)(slash - s) : len;
        size_t n = end - at;

        if (n == 2 && s[at] == '.' && s[at + 1] == '.')
            return "has a '..' component";
        if (n == 0 || (n == 1 && s[at] == '.'))
            return "has an empty or '.' component";
        at = end + 1;
    }
    return NULL;
}

static int idx_name(const struct pack_member *m, uint64_t at)
{
    const char *fault;

    if (m->name_len < 3 || m->name_len > TFS_TAR_NAME_MAX ||
        m->key_len == 0 || (size_t)m->key_len + 1 >= m->name_len ||
        m->name[m->key_len] != '.' ||
        memchr(m->name, '\0', m->name_len) != NULL)
        return tfs_err(TFS_EFORMAT, "shard index: member record at +%llu "
                       "has a bad name", (unsigned long long)at);
    /* Sample keys reach the caller's code, which may join them to paths. */
    fault = idx_path_fault(m->name, m->name_len);
    if (fault != NULL)
        return tfs_err(TFS_EFORMAT, "shard index: member record at +%llu: "
                       "name '%.*s' %s", (unsigned long long)at,
                       (int)TFS_MIN(m->name_len, 200u), m->name, fault);
    return 0;
}

static bool idx_same_key(const struct pack_member *a,
                         const struct pack_member *b)
{
    return a->key_len == b->key_len &&
           memcmp(a->name, b->name, a->key_len) == 0;
}

/*
 * Decode the member record at rec; its name, which must start at
 * *name_off in the table (names are back to back), is copied to *names
 * with a NUL.
 */
static int idx_member(const unsigned char *rec, const unsigned char *table,
                      uint64_t names_size, struct pack_member *m,
                      char **names, uint64_t *name_off, uint64_t at)
{

    m->hdr_off = tfs_get_le64(rec);
    m->data_off = tfs_get_le64(rec + 8);
    m->size = tfs_get_le64(rec + 16);
    m->xxh3 = tfs_get_le64(rec + 24);
    m->name_len = tfs_get_le16(rec + 36);
    m->key_len = tfs_get_le16(rec + 38);
    if (tfs_get_le32(rec + 32) != *name_off ||
        m->name_len > names_size - *name_off)
        return tfs_err(TFS_EFORMAT, "shard index: member record at +%llu "
                       "names bytes out of place in the name table",
                       (unsigned long long)at);
    memcpy(*names, table + *name_off, m->name_len);
    *name_off += m->name_len;
    (*names)[m->name_len] = '\0';
    m->name = *names;
    *names += m->name_len + 1;
    return idx_name(m, at);
}

static int idx_members(const unsigned char *b, struct pack_index *x,
                       uint64_t names_size)
{
    uint64_t base = TFS_PIDX_HDR + x->n_samples * TFS_PIDX_SAMPLE;
    const unsigned char *table = b + base + x->n_members * TFS_PIDX_MEMBER;
    char *names = x->names;
    uint64_t name_off = 0;
    uint64_t prev_end = 0;

    for (uint64_t i = 0; i < x->n_members; i++) {
        uint64_t at = base + i * TFS_PIDX_MEMBER;
        struct pack_member *m = &x->members[i];
        int rc = idx_member(b + at, table, names_size, m, &names, &name_off,
                            at);

        if (rc == 0)
            rc = idx_offsets(m, prev_end, x->tar_size, at);
        if (rc < 0)
            return rc;
        prev_end = m->data_off + pack_round512(m->size);
    }
    if (name_off != names_size)
        return tfs_err(TFS_EFORMAT, "shard index: %llu bytes of the name "
                       "table unused", (unsigned long long)(names_size -
                                                             name_off));
    return 0;
}

/* Members of one sample share its key; neighbouring samples do not. */
static int idx_keys(const struct pack_index *x)
{
    for (uint64_t i = 0; i < x->n_samples; i++) {
        const struct pack_sample_ent *s = &x->samples[i];
        const struct pack_member *first = &x->members[s->first];

        for (uint32_t j = 1; j < s->n; j++) {
            if (!idx_same_key(first, &x->members[s->first + j]))
                return tfs_err(TFS_EFORMAT, "shard index: sample %llu mixes "
                               "keys", (unsigned long long)i);
        }
        if (i > 0 && idx_same_key(first, &x->members[s->first - 1]))
            return tfs_err(TFS_EFORMAT, "shard index: samples %llu and %llu "
                           "share a key", (unsigned long long)i - 1,
                           (unsigned long long)i);
    }
    return 0;
}

static struct pack_index *idx_alloc(const struct idx_hdr *h)
{
    size_t size = sizeof(struct pack_index) +
                  h->n_samples * sizeof(struct pack_sample_ent) +
                  h->n_members * sizeof(struct pack_member) +
                  h->names_size + h->n_members;
    struct pack_index *x = tfs_malloc(size);

    if (x == NULL)
        return NULL;
    x->n_samples = h->n_samples;
    x->n_members = h->n_members;
    x->tar_size = h->tar_size;
    x->members = (struct pack_member *)(void *)(x + 1);
    x->samples = (struct pack_sample_ent *)(void *)(x->members +
                                                    h->n_members);
    x->names = (char *)(x->samples + h->n_samples);
    return x;
}

int tfs_pack_index_parse(const unsigned char *buf, size_t len,
                         bool verify_hash, struct pack_index **out)
{
    struct idx_hdr h = {0};
    struct pack_index *x;
    int rc = idx_header(buf, len, &h);

    if (rc < 0)
        return rc;
    if (verify_hash && XXH3_64bits(buf, len - 8) !=
                           tfs_get_le64(buf + len - 8))
        return tfs_err(TFS_ECORRUPT, "shard index does not match its "
                       "checksum");
    x = idx_alloc(&h);
    if (x == NULL)
        return -ENOMEM;
    x->tar_xxh3 = tfs_get_le64(buf + 48);
    x->plan_xxh3 = tfs_get_le64(buf + 56);
    rc = idx_samples(buf + TFS_PIDX_HDR, x);
    if (rc == 0)
        rc = idx_members(buf, x, h.names_size);
    if (rc == 0)
        rc = idx_keys(x);
    if (rc < 0) {
        tfs_free(x);
        return rc;
    }
    *out = x;
    return 0;
}

/* ---- building ---- */

void tfs_pack_index_builder_init(struct pack_index_builder *b)
{
    memset(b, 0, sizeof(*b));
}

void tfs_pack_index_builder_cleanup(struct pack_index_builder *b)
{
    tfs_free(b->members);
    tfs_free(b->samples);
    tfs_free(b->names);
    memset(b, 0, sizeof(*b));
}

/* Room for one more item of size bytes in a growable array. */
static int idx_grow(void *pp, size_t n, size_t *cap, size_t size,
                    size_t more)
{
    unsigned char **p = pp;
    size_t want = n + more;
    size_t c = *cap ? *cap : 64;
    unsigned char *q;

    if (want <= *cap)
        return 0;
    while (c < want)
        c *= 2;
    q = tfs_realloc(*p, c * size);
    if (q == NULL)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int tfs_pack_index_add(struct pack_index_builder *b, bool new_sample,
                       const struct pack_member *m)
{
    unsigned char *rec;
    int rc;

    if (b->n_members >= UINT32_MAX || b->names_len > UINT32_MAX ||
        (!new_sample && b->n_samples == 0))
        return -EINVAL;
    rc = idx_grow(&b->members, b->n_members, &b->members_cap,
                  TFS_PIDX_MEMBER, 1);
    if (rc == 0)
        rc = idx_grow(&b->samples, b->n_samples, &b->samples_cap,
                      TFS_PIDX_SAMPLE, 1);
    if (rc == 0)
        rc = idx_grow(&b->names, b->names_len, &b->names_cap, 1, m->name_len);
    if (rc < 0)
        return rc;
    rec = b->members + b->n_members * TFS_PIDX_MEMBER;
    tfs_put_le64(rec, m->hdr_off);
    tfs_put_le64(rec + 8, m->data_off);
    tfs_put_le64(rec + 16, m->size);
    tfs_put_le64(rec + 24, m->xxh3);
    tfs_put_le32(rec + 32, b->names_len);
    tfs_put_le16(rec + 36, m->name_len);
    tfs_put_le16(rec + 38, m->key_len);
    memcpy(b->names + b->names_len, m->name, m->name_len);
    b->names_len += m->name_len;
    if (new_sample) {
        tfs_put_le32(b->samples + b->n_samples * TFS_PIDX_SAMPLE,
                     b->n_members);
        tfs_put_le32(b->samples + b->n_samples * TFS_PIDX_SAMPLE + 4, 0);
        b->n_samples++;
    }
    rec = b->samples + (b->n_samples - 1) * TFS_PIDX_SAMPLE + 4;
    tfs_put_le32(rec, tfs_get_le32(rec) + 1);
    b->n_members++;
    return 0;
}

int tfs_pack_index_finish(struct pack_index_builder *b, uint64_t tar_size,
                          uint64_t tar_xxh3, uint64_t plan_xxh3,
                          unsigned char **out, size_t *len)
{
    size_t ssz = b->n_samples * TFS_PIDX_SAMPLE;
    size_t msz = b->n_members * TFS_PIDX_MEMBER;
    size_t total = TFS_PIDX_HDR + ssz + msz + b->names_len + 8;
    unsigned char *p = tfs_malloc(total);

    if (p == NULL)
        return -ENOMEM;
    memcpy(p, TFS_PIDX_MAGIC, 8);
    tfs_put_le32(p + 8, TFS_PIDX_VERSION);
    tfs_put_le32(p + 12, 0);
    tfs_put_le64(p + 16, b->n_samples);
    tfs_put_le64(p + 24, b->n_members);
    tfs_put_le64(p + 32, tar_size);
    tfs_put_le64(p + 40, b->names_len);
    tfs_put_le64(p + 48, tar_xxh3);
    tfs_put_le64(p + 56, plan_xxh3);
    if (ssz > 0)
        memcpy(p + TFS_PIDX_HDR, b->samples, ssz);
    if (msz > 0)
        memcpy(p + TFS_PIDX_HDR + ssz, b->members, msz);
    if (b->names_len > 0)
        memcpy(p + TFS_PIDX_HDR + ssz + msz, b->names, b->names_len);
    tfs_put_le64(p + total - 8, XXH3_64bits(p, total - 8));
    *out = p;
    *len = total;
    return 0;
}
