/* SPDX-License-Identifier: MIT */
/*
 * The packer's plan (`tierfs pack`): what goes where.  The source tree is
 * listed once; every name is checked (nothing absolute, no "..", a key
 * and a field in each file name, no field twice in a sample); members are
 * sorted by (key, field) so a sample's are adjacent; the sample order is
 * optionally shuffled with a seed; the sequence is cut into shards of at
 * most shard_size bytes (a larger sample gets a shard alone), each with
 * the XXH3 of what goes in (plan_xxh3).  The plan depends only on the
 * listing, so it is the same in every run, and a shard whose index
 * carries the same plan_xxh3 (and whose tar has the planned size) is
 * kept: that is resumption.  write.c does the I/O.
 */
#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "pack/write_int.h"

/* ---- listing and checking names ---- */

static int plan_add(struct pack_job *w, const struct tfs_list_entry *e)
{
    struct pack_item *it;
    size_t plen = strlen(w->src_prefix);

    if (e->key[strlen(e->key) - 1] == '/')
        return 0;                       /* an S3 "directory" marker */
    if (w->n_items == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        struct pack_item *v = tfs_realloc(w->items, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        w->items = v;
        w->cap = cap;
    }
    it = &w->items[w->n_items];
    memset(it, 0, sizeof(*it));
    it->key = tfs_strdup(e->key);
    if (it->key == NULL)
        return -ENOMEM;
    w->n_items++;
    it->name = it->key + plen;
    it->size = e->st.size;
    it->mtime_s = e->st.mtime_ns / 1000000000;
    snprintf(it->version, sizeof(it->version), "%s", e->st.version);
    return 0;
}

static int plan_list_page(void *arg, const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = plan_add(arg, &pg->entries[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Absolute, "..", "." or empty components: refused, naming the file. */
static int plan_check_path(const char *name)
{
    const char *c = name;

    if (name[0] == '/')
        return tfs_err(TFS_EESCAPE, "'%s': absolute name", name);
    while (*c != '\0') {
        const char *end = strchrnul(c, '/');
        size_t len = (size_t)(end - c);

        if (len == 2 && c[0] == '.' && c[1] == '.')
            return tfs_err(TFS_EESCAPE, "'%s': a '..' component would "
                           "escape the dataset", name);
        if (len == 0 || (len == 1 && c[0] == '.'))
            return tfs_err(TFS_EBADKEY, "'%s': empty or '.' component",
                           name);
        c = *end ? end + 1 : end;
    }
    return 0;
}

/* WebDataset readers skip __NAME__ and __NAME__/... as metadata. */
static bool plan_is_meta(const char *name)
{
    const char *e;
    const char *slash = strchr(name, '/');

    if (strncmp(name, "__", 2) != 0)
        return false;
    for (e = strstr(name + 2, "__"); e != NULL && (slash == NULL ||
                                                   e < slash);
         e = strstr(e + 1, "__")) {
        if (e[2] == '\0' || e[2] == '/')
            return true;
    }
    return false;
}

int tfs_pack_check_name(const char *name, size_t *key_len)
{
    size_t len = strlen(name);
    const char *base = strrchr(name, '/');
    const char *dot;
    int rc = plan_check_path(name);

    if (rc < 0)
        return rc;
    if (len > TFS_TAR_NAME_MAX)
        return tfs_err(TFS_EBADKEY, "'%.64s...': name longer than %u bytes",
                       name, TFS_TAR_NAME_MAX);
    base = base ? base + 1 : name;
    dot = strchr(base, '.');
    if (dot == NULL || dot == base || dot[1] == '\0')
        return tfs_err(TFS_EBADKEY, "'%s': not KEY.FIELD (WebDataset "
                       "needs a key and an extension in the file name)",
                       name);
    if (plan_is_meta(name))
        return tfs_err(TFS_EBADKEY, "'%s': WebDataset readers skip "
                       "__NAME__ entries as metadata", name);
    *key_len = (size_t)(dot - name);
    return 0;
}

static int plan_check_item(struct pack_item *it)
{
    size_t key_len = 0;
    int rc = tfs_pack_check_name(it->name, &key_len);

    if (rc < 0)
        return rc;
    it->name_len = (uint16_t)strlen(it->name);
    it->key_len = (uint16_t)key_len;
    return 0;
}

/* ---- planning ---- */

static int plan_cmp(const void *a, const void *b)
{
    const struct pack_item *x = a;
    const struct pack_item *y = b;
    size_t n = TFS_MIN(x->key_len, y->key_len);
    int c = memcmp(x->name, y->name, n);

    if (c != 0)
        return c;
    if (x->key_len != y->key_len)
        return x->key_len < y->key_len ? -1 : 1;
    return strcmp(x->name + x->key_len, y->name + y->key_len);
}

static bool plan_same_key(const struct pack_item *a, const struct pack_item *b)
{
    return a->key_len == b->key_len &&
           memcmp(a->name, b->name, a->key_len) == 0;
}

/* Mark sample starts; a field twice in a sample (any case) is refused. */
static int plan_group(struct pack_job *w, size_t *n_samples)
{
    size_t start = 0;

    *n_samples = 0;
    for (size_t i = 0; i < w->n_items; i++) {
        struct pack_item *it = &w->items[i];
        if (i == 0 || !plan_same_key(&w->items[i - 1], it)) {
            start = i;
            it->sample_start = true;
            ++*n_samples;
        }
        for (size_t j = start; j < i; j++) {
            const struct pack_item *o = &w->items[j];
            if (strcasecmp(o->name + o->key_len, it->name + it->key_len))
                continue;
            return tfs_err(TFS_EBADKEY, "sample '%.*s' has the field '%s' "
                           "twice ('%s' and '%s')", (int)it->key_len,
                           it->name, it->name + it->key_len + 1, o->name,
                           it->name);
        }
    }
    return 0;
}

/* Reorder the samples by a seeded Fisher-Yates shuffle. */
static int plan_shuffle(struct pack_job *w, size_t n_samples)
{
    size_t *start = tfs_malloc((n_samples + 1) * sizeof(*start));
    struct pack_item *out = tfs_malloc(w->n_items * sizeof(*out));
    uint64_t state = w->o->shuffle_seed;
    size_t k = 0;

    if (start == NULL || out == NULL) {
        tfs_free(start);
        tfs_free(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < w->n_items; i++)
        if (w->items[i].sample_start)
            start[k++] = i;
    for (size_t i = n_samples; i > 1; i--) {
        size_t j = (size_t)pack_below(&state, i);
        size_t t = start[i - 1];
        start[i - 1] = start[j];
        start[j] = t;
    }
    k = 0;
    for (size_t s = 0; s < n_samples; s++)
        for (size_t i = start[s]; i < w->n_items &&
             (i == start[s] || !w->items[i].sample_start); i++)
            out[k++] = w->items[i];
    tfs_free(w->items);
    tfs_free(start);
    w->items = out;
    w->cap = w->n_items;
    return 0;
}

/* Bytes a member takes in the tar: header blocks and padded data. */
static int plan_member_bytes(const struct pack_item *it, uint64_t *out)
{
    unsigned char hdr[TFS_TAR_HDR_MAX];
    size_t len;
    int rc = tfs_tar_encode(it->name, it->size, it->mtime_s, hdr,
                            sizeof(hdr), &len);

    if (rc == 0)
        *out = len + pack_round512(it->size);
    return rc;
}

static void plan_hash_item(XXH3_state_t *h, const struct pack_item *it)
{
    unsigned char num[16];

    tfs_put_le64(num, it->size);
    tfs_put_le64(num + 8, (uint64_t)it->mtime_s);
    XXH3_64bits_update(h, it->name, it->name_len + 1u);
    XXH3_64bits_update(h, num, sizeof(num));
    XXH3_64bits_update(h, it->version, strlen(it->version) + 1);
}

static int plan_shard_add(struct pack_job *w, const struct pack_plan_shard *s)
{
    struct pack_plan_shard *v = tfs_realloc(w->shards,
                                            (w->n_shards + 1) * sizeof(*v));

    if (v == NULL)
        return -ENOMEM;
    w->shards = v;
    w->shards[w->n_shards++] = *s;
    return 0;
}

/* Bytes of the sample starting at item i; *end: the item after it. */
static int plan_sample_bytes(const struct pack_job *w, size_t i, size_t *end,
                             uint64_t *bytes)
{
    *bytes = 0;
    for (*end = i; *end < w->n_items &&
         (*end == i || !w->items[*end].sample_start); ++*end) {
        uint64_t b = 0;
        int rc = plan_member_bytes(&w->items[*end], &b);
        if (rc < 0)
            return rc;
        *bytes += b;
    }
    return 0;
}

/* Close shard s (items [s->first, end)): its size and plan hash. */
static int plan_shard_close(struct pack_job *w, struct pack_plan_shard *s,
                            size_t end, uint64_t body)
{
    XXH3_state_t h;

    s->n_items = end - s->first;
    s->tar_size = body + tfs_tar_end_size(body);
    XXH3_64bits_reset(&h);
    XXH3_64bits_update(&h, "tierfs-pack-1", 14);
    for (size_t i = s->first; i < end; i++)
        plan_hash_item(&h, &w->items[i]);
    s->plan_xxh3 = XXH3_64bits_digest(&h);
    return plan_shard_add(w, s);
}

static int plan_cut(struct pack_job *w)
{
    struct pack_plan_shard cur = {.first = 0};
    uint64_t body = 0;
    size_t i = 0;
    int rc = 0;

    while (rc == 0 && i < w->n_items) {
        uint64_t bytes;
        size_t end;
        rc = plan_sample_bytes(w, i, &end, &bytes);
        if (rc < 0)
            break;
        if (cur.n_samples > 0 && body + bytes +
            tfs_tar_end_size(body + bytes) > w->o->shard_size) {
            rc = plan_shard_close(w, &cur, i, body);
            memset(&cur, 0, sizeof(cur));
            cur.first = i;
            body = 0;
        }
        cur.n_samples++;
        for (size_t k = i; k < end; k++)
            cur.src_bytes += w->items[k].size;
        body += bytes;
        i = end;
    }
    if (rc == 0 && cur.n_samples > 0)
        rc = plan_shard_close(w, &cur, w->n_items, body);
    return rc;
}

static int plan_samples(struct pack_job *w)
{
    size_t n_samples;
    int rc = 0;

    if (w->n_items == 0)
        return tfs_err(-ENOENT, "nothing to pack under '%s'",
                       w->src_prefix);
    for (size_t i = 0; i < w->n_items && rc == 0; i++)
        rc = plan_check_item(&w->items[i]);
    if (rc < 0)
        return rc;
    qsort(w->items, w->n_items, sizeof(*w->items), plan_cmp);
    rc = plan_group(w, &n_samples);
    if (rc == 0 && w->o->shuffle)
        rc = plan_shuffle(w, n_samples);
    if (rc == 0)
        rc = plan_cut(w);
    w->pr.samples_total = n_samples;
    w->pr.shards_total = w->n_shards;
    for (size_t i = 0; i < w->n_items; i++)
        w->pr.bytes_total += w->items[i].size;
    return rc;
}

/* ---- resuming ---- */

int tfs_pack_shard_key(const struct pack_job *w, size_t shard, const char *ext,
                       struct tfs_buf *out)
{
    tfs_buf_reset(out);
    return tfs_buf_printf(out, "%sshard-%06zu.%s",
                          tfs_buf_str(&w->dst_prefix), shard, ext);
}

/* The manifest entry of shard i from its index file's bytes. */
void tfs_pack_shard_done(struct pack_plan_shard *s, size_t i,
                         const unsigned char *idx, size_t idx_len,
                         uint64_t tar_xxh3)
{
    snprintf(s->info.tar, sizeof(s->info.tar), "shard-%06zu.tar", i);
    snprintf(s->info.idx, sizeof(s->info.idx), "shard-%06zu.idx", i);
    s->info.n_samples = s->n_samples;
    s->info.n_members = s->n_items;
    s->info.tar_size = s->tar_size;
    s->info.idx_size = idx_len;
    s->info.tar_xxh3 = tar_xxh3;
    s->info.idx_xxh3 = XXH3_64bits(idx, idx_len);
}

/* Is shard i complete from a former run with the same plan? */
static bool plan_kept(struct pack_job *w, size_t i, struct tfs_buf *key)
{
    struct pack_plan_shard *s = &w->shards[i];
    struct pack_index *x = NULL;
    unsigned char *buf = NULL;
    struct tfs_stat st;
    size_t n = 0;
    bool keep = false;

    if (tfs_pack_shard_key(w, i, "idx", key) < 0 ||
        tfs_store_stat(w->dst, tfs_buf_str(key), &st) < 0 ||
        st.size > (64u << 20) || (buf = tfs_malloc(st.size + 1)) == NULL)
        return false;
    if (tfs_store_read(w->dst, tfs_buf_str(key), buf, st.size, 0,
                       st.version, &n) == 0 && n == st.size &&
        tfs_pack_index_parse(buf, n, true, &x) == 0 &&
        x->plan_xxh3 == s->plan_xxh3 && x->tar_size == s->tar_size &&
        x->n_members == s->n_items && x->n_samples == s->n_samples &&
        tfs_pack_shard_key(w, i, "tar", key) == 0 &&
        tfs_store_stat(w->dst, tfs_buf_str(key), &st) == 0 &&
        st.size == s->tar_size) {
        tfs_pack_shard_done(s, i, buf, n, x->tar_xxh3);
        keep = true;
    }
    tfs_free(x);
    tfs_free(buf);
    tfs_errdetail_clear();
    return keep;
}

/* Decide which shards are kept; drop the manifest if any must change. */
int tfs_pack_plan_resume(struct pack_job *w)
{
    struct tfs_buf key;
    bool all = true;
    int rc = 0;

    tfs_buf_init(&key, 0);
    for (size_t i = 0; i < w->n_shards; i++) {
        struct pack_plan_shard *s = &w->shards[i];
        s->keep = plan_kept(w, i, &key);
        all = all && s->keep;
        if (!s->keep)
            continue;
        w->pr.shards++;
        w->pr.shards_kept++;
        w->pr.samples += s->n_samples;
        w->pr.bytes += s->src_bytes;
    }
    if (!all)
        rc = tfs_buf_printf(&key, "%s%s", tfs_buf_str(&w->dst_prefix),
                            TFS_PACK_MANIFEST);
    if (!all && rc == 0)
        rc = tfs_store_remove(w->dst, tfs_buf_str(&key));
    tfs_buf_cleanup(&key);
    return rc;
}


int tfs_pack_plan(struct pack_job *w)
{
    int rc = tfs_store_list_all(w->src, w->src_prefix, NULL, plan_list_page,
                                w);

    return rc == 0 ? plan_samples(w) : rc;
}
