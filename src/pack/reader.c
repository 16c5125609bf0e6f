/* SPDX-License-Identifier: MIT */
/*
 * Reading a packed dataset through the cache: the manifest at open, each
 * shard's index on first use (checked against the manifest, kept while
 * pinned and then in a bounded LRU), and samples: map-style by global
 * index, or filled by the epoch iterator (sampler.c).
 *
 * A sample's members are checked when the sample is filled (their tar
 * header blocks are read and parsed, and must name the member, size and
 * type the index gives) and each member's data when it is read (XXH3-64
 * against the index).  Every failure names the shard and the byte
 * offset.  The data is copied once, from the cached block into the
 * caller's buffer: a sample's bytes (headers and data of all its members,
 * adjacent in the shard) are pinned in the cache when they lie in one
 * block, and headers are parsed in place; otherwise each read is a
 * tfs_file_read into the caller's buffer.
 *
 * Locking: p->lock guards each shard's index, file, pins and LRU links;
 * loads run without it (one loader per shard, others wait on p->cond).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/util.h"
#include "pack/pack_int.h"

struct pack_shard {
    struct pack_shard_info info;        /* from the manifest */
    char                  *tar_key;     /* owned: prefix + info.tar */
    char                  *idx_key;     /* owned: prefix + info.idx */
    uint64_t               first;       /* global index of sample 0 */
    struct pack_index     *idx;         /* p->lock; owned when loaded */
    struct tfs_file       *file;        /* p->lock; the tar, with idx */
    unsigned               pins;        /* p->lock */
    bool                   loading;     /* p->lock */
    struct pack_shard     *lru_prev;    /* p->lock: loaded, unpinned */
    struct pack_shard     *lru_next;    /* p->lock */
};

struct tfs_pack {
    struct tfs_cache     *c;            /* borrowed */
    char                 *prefix;       /* owned: "" or "dir/" */
    struct pack_manifest  mf;
    struct pack_shard    *shards;       /* mf.n_shards, owned */
    bool                  opened;
    bool                  verify;
    uint64_t              max_indexes;
    pthread_mutex_t       lock;
    pthread_cond_t        cond;         /* a load finished */
    struct pack_shard    *lru_head;     /* lock: most recently used */
    struct pack_shard    *lru_tail;     /* lock */
    size_t                n_lru;        /* lock */
};

struct tfs_pack_sample {
    struct tfs_pack          *p;        /* NULL while empty */
    struct pack_shard        *sh;       /* pinned while filled */
    size_t                    shard;
    uint64_t                  index;    /* global */
    const struct pack_member *m;        /* its members, in the index */
    size_t                    n;
    void                     *pin;      /* the cached block holding ... */
    const unsigned char      *region;   /* ... the sample's bytes, or NULL */
    uint64_t                  region_off;   /* shard offset of region[0] */
    unsigned char            *hdr;      /* owned: TFS_TAR_HDR_MAX bytes */
    struct tfs_tar_member     tm;       /* scratch for header checks */
};

/* ---- options, open, close ---- */

int tfs_pack_create(struct tfs_pack **out)
{
    struct tfs_pack *p = tfs_calloc(1, sizeof(*p));

    if (p == NULL)
        return -ENOMEM;
    p->verify = true;
    p->max_indexes = 64;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    *out = p;
    return 0;
}

/* The options of tfs_pack_set (pack.h). */
static const struct tfs_opt_spec pack_opts[] = {
    {"verify", TFS_OPT_BOOL, offsetof(struct tfs_pack, verify), 0, 1, NULL,
     NULL},
    {"max_indexes", TFS_OPT_U64, offsetof(struct tfs_pack, max_indexes), 0,
     1u << 20, NULL, NULL},
};

int tfs_pack_set(struct tfs_pack *p, const char *name, const char *value)
{
    if (p->opened)
        return -EBUSY;
    return tfs_opt_apply("pack", pack_opts, TFS_ARRAY_LEN(pack_opts), p, name,
                         value);
}

static char *pack_join(const char *prefix, const char *name)
{
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    if (tfs_buf_printf(&b, "%s%s", prefix, name) < 0) {
        tfs_buf_cleanup(&b);
        return NULL;
    }
    return tfs_buf_steal(&b);
}

/* The whole object key into a new buffer (at most max bytes). */
static int pack_slurp(struct tfs_cache *c, const char *key, uint64_t max,
                      unsigned char **out, size_t *len)
{
    struct tfs_file *f = NULL;
    unsigned char *buf = NULL;
    size_t n = 0;
    int rc = tfs_file_open(c, key, &f);

    if (rc == 0 && tfs_file_size(f) > max)
        rc = tfs_err(TFS_EFORMAT, "%s: %llu bytes, more than %llu", key,
                     (unsigned long long)tfs_file_size(f),
                     (unsigned long long)max);
    if (rc == 0 && (buf = tfs_malloc(tfs_file_size(f) + 1)) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = tfs_file_read(f, buf, tfs_file_size(f), 0, &n);
    if (rc == 0 && n != tfs_file_size(f))
        rc = tfs_err(TFS_ECHANGED, "%s: short read", key);
    tfs_file_close(f);
    if (rc < 0) {
        tfs_free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int pack_shards_init(struct tfs_pack *p)
{
    uint64_t first = 0;

    p->shards = tfs_calloc(p->mf.n_shards ? p->mf.n_shards : 1,
                           sizeof(*p->shards));
    if (p->shards == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < p->mf.n_shards; i++) {
        struct pack_shard *sh = &p->shards[i];
        sh->info = p->mf.shards[i];
        sh->first = first;
        first += sh->info.n_samples;
        sh->tar_key = pack_join(p->prefix, sh->info.tar);
        sh->idx_key = pack_join(p->prefix, sh->info.idx);
        if (sh->tar_key == NULL || sh->idx_key == NULL)
            return -ENOMEM;
    }
    return 0;
}

int tfs_pack_open(struct tfs_pack *p, struct tfs_cache *c,
                  const char *prefix)
{
    size_t plen = strlen(prefix);
    unsigned char *json = NULL;
    char *key = NULL;
    size_t len = 0;
    int rc;

    if (p->opened)
        return -EBUSY;
    p->c = c;
    p->prefix = pack_join(prefix, plen && prefix[plen - 1] != '/' ? "/"
                                                                   : "");
    key = p->prefix ? pack_join(p->prefix, TFS_PACK_MANIFEST) : NULL;
    rc = key ? pack_slurp(c, key, TFS_PACK_MANIFEST_MAX, &json, &len)
             : -ENOMEM;
    if (rc == -ENOENT)
        rc = tfs_err(-ENOENT, "%s: no %s: not a packed dataset, or "
                     "packing has not finished", prefix[0] ? prefix : "/",
                     TFS_PACK_MANIFEST);
    if (rc == 0)
        rc = tfs_pack_manifest_parse((const char *)json, len, &p->mf);
    if (rc == 0)
        rc = pack_shards_init(p);
    tfs_free(json);
    tfs_free(key);
    p->opened = rc == 0;
    return rc;
}

void tfs_pack_close(struct tfs_pack *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; p->shards != NULL && i < p->mf.n_shards; i++) {
        tfs_file_close(p->shards[i].file);
        tfs_free(p->shards[i].idx);
        tfs_free(p->shards[i].tar_key);
        tfs_free(p->shards[i].idx_key);
    }
    tfs_free(p->shards);
    tfs_pack_manifest_cleanup(&p->mf);
    tfs_free(p->prefix);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    tfs_free(p);
}

uint64_t tfs_pack_samples(const struct tfs_pack *p)
{
    return p->mf.n_samples;
}

uint64_t tfs_pack_tar_bytes(const struct tfs_pack *p)
{
    return p->mf.tar_bytes;
}

size_t tfs_pack_shards(const struct tfs_pack *p)
{
    return p->mf.n_shards;
}

const char *tfs_pack_shard_name(const struct tfs_pack *p, size_t i)
{
    return i < p->mf.n_shards ? p->shards[i].info.tar : NULL;
}

struct tfs_cache *tfs_pack_cache(const struct tfs_pack *p)
{
    return p->c;
}

const char *tfs_pack_tar_key(const struct tfs_pack *p, size_t i)
{
    return p->shards[i].tar_key;
}

const char *tfs_pack_idx_key(const struct tfs_pack *p, size_t i)
{
    return p->shards[i].idx_key;
}

uint64_t tfs_pack_shard_samples(const struct tfs_pack *p, size_t i)
{
    return p->shards[i].info.n_samples;
}

/* ---- prefetch hints ---- */

/*
 * The bytes of samples [lo, hi) of shard sh: exact when its index is
 * loaded, else in proportion to the shard's size with two average
 * samples of margin (a hint need not be exact).
 */
static void pack_hint_range(struct tfs_pack *p, struct pack_shard *sh,
                            uint64_t lo, uint64_t hi, uint64_t *off,
                            uint64_t *end)
{
    uint64_t size = sh->info.tar_size;
    double per = (double)size / (double)sh->info.n_samples;

    pthread_mutex_lock(&p->lock);
    if (sh->idx != NULL) {
        const struct pack_index *x = sh->idx;
        const struct pack_sample_ent *e = &x->samples[hi - 1];
        const struct pack_member *m = &x->members[e->first + e->n - 1];
        *off = x->members[x->samples[lo].first].hdr_off;
        *end = m->data_off + m->size;
    } else {
        double a = (double)lo * per - 2 * per;
        double b = (double)hi * per + 2 * per;
        *off = a > 0 ? (uint64_t)a : 0;
        *end = b < (double)size ? (uint64_t)b : size;
    }
    pthread_mutex_unlock(&p->lock);
}

int tfs_pack_hint_index(struct tfs_pack *p, size_t shard)
{
    const char *key = p->shards[shard].idx_key;

    return tfs_cache_prefetch(p->c, &key, 1);
}

int tfs_pack_hint_data(struct tfs_pack *p, size_t shard, uint64_t lo,
                       uint64_t hi)
{
    struct pack_shard *sh = &p->shards[shard];
    struct tfs_file *f = NULL;
    uint64_t off;
    uint64_t end;

    if (lo >= hi || hi > sh->info.n_samples ||
        tfs_file_open(p->c, sh->tar_key, &f) < 0) {
        tfs_errdetail_clear();          /* a hint: the read will tell */
        return 0;
    }
    pack_hint_range(p, sh, lo, hi, &off, &end);
    (void)tfs_file_prefetch(f, off, end - off);
    tfs_file_close(f);
    return 0;
}

/* ---- loading a shard: its index and its tar, checked ---- */

/* The tar's size against the manifest: truncation is named here. */
static int pack_check_tar(const struct pack_shard *sh, struct tfs_file *f)
{
    uint64_t have = tfs_file_size(f);
    uint64_t want = sh->info.tar_size;

    if (have < want)
        return tfs_err(TFS_ECORRUPT, "%s is truncated at offset %llu: the "
                       "manifest says %llu bytes", sh->info.tar,
                       (unsigned long long)have, (unsigned long long)want);
    if (have > want)
        return tfs_err(TFS_ECORRUPT, "%s has %llu bytes, the manifest says "
                       "%llu", sh->info.tar, (unsigned long long)have,
                       (unsigned long long)want);
    return 0;
}

/* The index bytes against the manifest, then parsed and matched. */
static int pack_check_idx(const struct pack_shard *sh,
                          const unsigned char *buf, size_t len,
                          struct pack_index **out)
{
    char detail[512];
    struct pack_index *x = NULL;
    int rc;

    if (len != sh->info.idx_size || XXH3_64bits(buf, len) !=
                                        sh->info.idx_xxh3)
        return tfs_err(TFS_ECORRUPT, "%s does not match the manifest "
                       "(index/shard mismatch: %zu bytes, manifest %llu)",
                       sh->info.idx, len,
                       (unsigned long long)sh->info.idx_size);
    rc = tfs_pack_index_parse(buf, len, true, &x);
    if (rc < 0) {
        snprintf(detail, sizeof(detail), "%s", tfs_errdetail());
        return tfs_err(rc, "%s: %s", sh->info.idx, detail);
    }
    if (x->tar_size != sh->info.tar_size ||
        x->tar_xxh3 != sh->info.tar_xxh3 ||
        x->n_samples != sh->info.n_samples ||
        x->n_members != sh->info.n_members) {
        tfs_free(x);
        return tfs_err(TFS_ECORRUPT, "%s describes another shard than %s "
                       "of the manifest (index/shard mismatch)",
                       sh->info.idx, sh->info.tar);
    }
    *out = x;
    return 0;
}

static int pack_load(struct tfs_pack *p, struct pack_shard *sh,
                     struct pack_index **idx, struct tfs_file **file)
{
    unsigned char *buf = NULL;
    char detail[512];
    size_t len = 0;
    int rc = tfs_file_open(p->c, sh->tar_key, file);

    if (rc == 0)
        rc = pack_check_tar(sh, *file);
    if (rc == 0) {
        rc = pack_slurp(p->c, sh->idx_key, TFS_PACK_MANIFEST_MAX, &buf,
                        &len);
        if (rc < 0) {
            snprintf(detail, sizeof(detail), "%s", tfs_errdetail());
            rc = tfs_err(rc, "%s: %s", sh->info.idx, detail);
        }
    }
    if (rc == 0)
        rc = pack_check_idx(sh, buf, len, idx);
    tfs_free(buf);
    if (rc < 0) {
        tfs_file_close(*file);
        *file = NULL;
    }
    return rc;
}

/* ---- pins and the LRU of loaded, unpinned shards (p->lock held) ---- */

static void pack_lru_unlink(struct tfs_pack *p, struct pack_shard *sh)
{
    if (sh->lru_prev != NULL)
        sh->lru_prev->lru_next = sh->lru_next;
    else
        p->lru_head = sh->lru_next;
    if (sh->lru_next != NULL)
        sh->lru_next->lru_prev = sh->lru_prev;
    else
        p->lru_tail = sh->lru_prev;
    sh->lru_prev = sh->lru_next = NULL;
    p->n_lru--;
}

static void pack_lru_push(struct tfs_pack *p, struct pack_shard *sh)
{
    sh->lru_prev = NULL;
    sh->lru_next = p->lru_head;
    if (p->lru_head != NULL)
        p->lru_head->lru_prev = sh;
    else
        p->lru_tail = sh;
    p->lru_head = sh;
    p->n_lru++;
}

static int pack_pin(struct tfs_pack *p, size_t i, struct pack_shard **out)
{
    struct pack_shard *sh = &p->shards[i];
    struct pack_index *idx = NULL;
    struct tfs_file *file = NULL;
    int rc = 0;

    pthread_mutex_lock(&p->lock);
    while (sh->loading)
        pthread_cond_wait(&p->cond, &p->lock);
    if (sh->idx == NULL) {
        sh->loading = true;
        pthread_mutex_unlock(&p->lock);
        rc = pack_load(p, sh, &idx, &file);
        pthread_mutex_lock(&p->lock);
        sh->loading = false;
        sh->idx = idx;
        sh->file = file;
        pthread_cond_broadcast(&p->cond);
    } else if (sh->pins == 0) {
        pack_lru_unlink(p, sh);
    }
    if (rc == 0)
        sh->pins++;
    pthread_mutex_unlock(&p->lock);
    *out = sh;
    return rc;
}

static void pack_unpin(struct tfs_pack *p, struct pack_shard *sh)
{
    struct pack_index *idx = NULL;
    struct tfs_file *file = NULL;

    pthread_mutex_lock(&p->lock);
    if (--sh->pins == 0) {
        pack_lru_push(p, sh);
        if (p->n_lru > p->max_indexes) {
            struct pack_shard *old = p->lru_tail;
            pack_lru_unlink(p, old);
            idx = old->idx;
            file = old->file;
            old->idx = NULL;
            old->file = NULL;
        }
    }
    pthread_mutex_unlock(&p->lock);
    tfs_file_close(file);
    tfs_free(idx);
}

/* ---- samples ---- */

int tfs_pack_sample_create(struct tfs_pack_sample **out)
{
    struct tfs_pack_sample *s = tfs_calloc(1, sizeof(*s));

    if (s == NULL)
        return -ENOMEM;
    s->hdr = tfs_malloc(TFS_TAR_HDR_MAX);
    if (s->hdr == NULL) {
        tfs_free(s);
        return -ENOMEM;
    }
    *out = s;
    return 0;
}

/* Let go of the sample's pinned block, if any. */
static void pack_region_clear(struct tfs_pack_sample *s)
{
    if (s->pin != NULL)
        tfs_cache_unpin(s->p->c, s->pin);
    s->pin = NULL;
    s->region = NULL;
}

static void pack_sample_clear(struct tfs_pack_sample *s)
{
    if (s->p != NULL)
        pack_region_clear(s);
    if (s->sh != NULL)
        pack_unpin(s->p, s->sh);
    s->sh = NULL;
    s->p = NULL;
    s->m = NULL;
    s->n = 0;
}

void tfs_pack_sample_close(struct tfs_pack_sample *s)
{
    if (s == NULL)
        return;
    pack_sample_clear(s);
    tfs_free(s->hdr);
    tfs_free(s);
}

/* Re-label the last error as happening in shard sh at offset off. */
static int pack_at(const struct pack_shard *sh, uint64_t off, int rc)
{
    char detail[512];

    snprintf(detail, sizeof(detail), "%s", tfs_errdetail());
    return tfs_err(rc, "%s at offset %llu: %s", sh->info.tar,
                   (unsigned long long)off, detail);
}

/* The header blocks of member m: in the pinned region, or read. */
static int pack_member_header(struct tfs_pack_sample *s,
                              const struct pack_member *m,
                              const unsigned char **hdr)
{
    size_t want = (size_t)(m->data_off - m->hdr_off);
    size_t n = 0;
    int rc;

    if (s->region != NULL) {
        *hdr = s->region + (m->hdr_off - s->region_off);
        return 0;
    }
    rc = tfs_file_read(s->sh->file, s->hdr, want, m->hdr_off, &n);
    if (rc < 0)
        return pack_at(s->sh, m->hdr_off, rc);
    if (n < want)
        return tfs_err(TFS_ECORRUPT, "%s is truncated at offset %llu "
                       "(header of '%s')", s->sh->info.tar,
                       (unsigned long long)(m->hdr_off + n), m->name);
    *hdr = s->hdr;
    return 0;
}

/* The header blocks of member m must describe m. */
static int pack_check_member(struct tfs_pack_sample *s,
                             const struct pack_member *m)
{
    struct tfs_tar_member *tm = &s->tm;
    size_t want = (size_t)(m->data_off - m->hdr_off);
    const unsigned char *hdr = NULL;
    int rc = pack_member_header(s, m, &hdr);

    if (rc < 0)
        return rc;
    rc = tfs_tar_parse(hdr, want, tm);
    if (rc == -ENODATA || rc == -ENOBUFS)
        rc = tfs_err(TFS_ECORRUPT, "%s where the index has '%s'",
                     rc == -ENODATA ? "end of archive" : "short header",
                     m->name);
    if (rc < 0)
        return pack_at(s->sh, m->hdr_off, rc == TFS_EFORMAT ? TFS_ECORRUPT
                                                            : rc);
    if (tm->hdr_len != want || tm->type != '0' || tm->size != m->size ||
        strcmp(tm->name, m->name) != 0)
        return tfs_err(TFS_ECORRUPT, "%s at offset %llu: the tar has '%s' "
                       "(%llu bytes, type %c), the index '%s' (%llu bytes) "
                       "(index/shard mismatch)", s->sh->info.tar,
                       (unsigned long long)m->hdr_off, tm->name,
                       (unsigned long long)tm->size, tm->type, m->name,
                       (unsigned long long)m->size);
    return 0;
}

/*
 * Pin the bytes of the sample in s (from its first header to its last
 * data byte) when they lie in one cached block: one cache lookup per
 * sample instead of two per member.  Otherwise (-E2BIG), or when the
 * shard is shorter (the reads then name the truncation), reads go
 * through tfs_file_read.
 */
static int pack_pin_region(struct tfs_pack_sample *s)
{
    const struct pack_member *last = &s->m[s->n - 1];
    uint64_t off = s->m[0].hdr_off;
    size_t len = (size_t)(last->data_off + last->size - off);
    const void *data = NULL;
    size_t n = 0;
    int rc = tfs_file_read_pin(s->sh->file, len, off, &data, &n, &s->pin);

    if (rc == -E2BIG) {
        tfs_errdetail_clear();
        return 0;
    }
    if (rc < 0)
        return pack_at(s->sh, off, rc);
    if (n < len) {
        tfs_cache_unpin(s->p->c, s->pin);
        s->pin = NULL;
        return 0;
    }
    s->region = data;
    s->region_off = off;
    return 0;
}

int tfs_pack_fill(struct tfs_pack *p, size_t shard, uint64_t local,
                  struct tfs_pack_sample *s)
{
    const struct pack_sample_ent *e;
    struct pack_shard *sh = s->sh;
    int rc = 0;

    if (sh == NULL || s->p != p || s->shard != shard) {
        pack_sample_clear(s);
        rc = pack_pin(p, shard, &sh);
        if (rc < 0)
            return rc;
        s->p = p;
        s->sh = sh;
        s->shard = shard;
    }
    pack_region_clear(s);
    e = &sh->idx->samples[local];
    s->index = sh->first + local;
    s->m = &sh->idx->members[e->first];
    s->n = e->n;
    rc = pack_pin_region(s);
    for (size_t i = 0; rc == 0 && p->verify && i < s->n; i++)
        rc = pack_check_member(s, &s->m[i]);
    if (rc < 0)
        pack_sample_clear(s);
    return rc;
}

int tfs_pack_locate(const struct tfs_pack *p, uint64_t i, size_t *shard,
                    uint64_t *local)
{
    size_t lo = 0;
    size_t hi = p->mf.n_shards;

    if (i >= p->mf.n_samples)
        return -ERANGE;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->shards[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    *shard = lo;
    *local = i - p->shards[lo].first;
    return 0;
}

int tfs_pack_get(struct tfs_pack *p, uint64_t i, struct tfs_pack_sample *s)
{
    size_t shard;
    uint64_t local;
    int rc = tfs_pack_locate(p, i, &shard, &local);

    if (rc < 0)
        return tfs_err(rc, "sample %llu of %llu", (unsigned long long)i,
                       (unsigned long long)p->mf.n_samples);
    return tfs_pack_fill(p, shard, local, s);
}

uint64_t tfs_pack_sample_index(const struct tfs_pack_sample *s)
{
    return s->index;
}

size_t tfs_pack_sample_shard(const struct tfs_pack_sample *s)
{
    return s->shard;
}

size_t tfs_pack_sample_fields(const struct tfs_pack_sample *s)
{
    return s->n;
}

int tfs_pack_sample_info(const struct tfs_pack_sample *s, char *names,
                         size_t names_size, size_t *names_len,
                         uint64_t *sizes, size_t max_fields,
                         size_t *n_fields)
{
    size_t key = s->m != NULL ? s->m[0].key_len : 0;
    size_t need = key + 1;
    size_t pos = key + 1;

    if (s->m == NULL)
        return -EINVAL;
    *n_fields = s->n;
    for (size_t i = 0; i < s->n; i++)
        need += (size_t)(s->m[i].name_len - key);
    *names_len = need;
    if (need > names_size || s->n > max_fields)
        return -ENOSPC;
    memcpy(names, s->m[0].name, key);
    names[key] = '\0';
    for (size_t i = 0; i < s->n; i++) {
        size_t flen = (size_t)(s->m[i].name_len - key - 1);
        memcpy(names + pos, s->m[i].name + key + 1, flen + 1);
        pos += flen + 1;
        sizes[i] = s->m[i].size;
    }
    return 0;
}

static int pack_check_data(const struct tfs_pack_sample *s,
                           const struct pack_member *m, const void *buf)
{
    if (s->p->verify && XXH3_64bits(buf, (size_t)m->size) != m->xxh3)
        return tfs_err(TFS_ECORRUPT, "%s at offset %llu: the data of '%s' "
                       "does not match its checksum", s->sh->info.tar,
                       (unsigned long long)m->data_off, m->name);
    return 0;
}

int tfs_pack_sample_read(struct tfs_pack_sample *s, size_t i, void *buf,
                         size_t len)
{
    const struct pack_member *m;
    size_t n = 0;
    int rc;

    if (s->m == NULL || i >= s->n)
        return -ERANGE;
    m = &s->m[i];
    if (len < m->size)
        return -ENOSPC;
    if (s->region != NULL) {
        memcpy(buf, s->region + (m->data_off - s->region_off),
               (size_t)m->size);
        return pack_check_data(s, m, buf);
    }
    rc = tfs_file_read(s->sh->file, buf, (size_t)m->size, m->data_off, &n);
    if (rc < 0)
        return pack_at(s->sh, m->data_off, rc);
    if (n < m->size)
        return tfs_err(TFS_ECORRUPT, "%s is truncated at offset %llu "
                       "(data of '%s')", s->sh->info.tar,
                       (unsigned long long)(m->data_off + n), m->name);
    return pack_check_data(s, m, buf);
}
