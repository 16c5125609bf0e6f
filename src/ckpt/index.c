/* SPDX-License-Identifier: MIT */
/*
 * The two small JSON documents of the commit protocol.
 *
 * A marker (step-N/rank-RRRRR.done) says that one rank's shards are
 * durable in the store and describes them: files with sizes and
 * checksums, every tensor (or slice) and the file holding it, and the
 * rank's extra document.
 *
 * The index (step-N/model.safetensors.index.json) is what makes a
 * checkpoint exist.  It is a Hugging Face index ("metadata.total_size",
 * "weight_map": name -> file) plus a "tierfs" object: step, world size,
 * run id, creation time, every file with its rank, size, header and data
 * checksums, the tensors saved as slices (dtype and full shape) and each
 * rank's extra document.  Rank 0 builds it by merging the markers, which
 * is where slices from different ranks are checked to tile their tensor.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"

static const struct tfs_json_limits index_limits = {
    .max_len = TFS_CKPT_JSON_MAX,
    .max_depth = 64,
    .max_nodes = 8u << 20,
};

/* ---- shared pieces ---- */

static int ix_put_dims(struct tfs_buf *b, const char *key, int ndim,
                       const int64_t *v)
{
    int rc = tfs_buf_printf(b, ",\"%s\":[", key);

    for (int i = 0; i < ndim && rc == 0; i++)
        rc = tfs_buf_printf(b, "%s%" PRId64, i ? "," : "", v[i]);
    if (rc == 0)
        rc = tfs_buf_puts(b, "]");
    return rc;
}

static int ix_get_dims(const struct tfs_json *a, int64_t *v, int *ndim)
{
    int i = 0;

    if (a == NULL || a->type != TFS_JSON_ARRAY || a->n > TFS_CKPT_MAX_DIMS)
        return TFS_EFORMAT;
    for (const struct tfs_json *e = a->child; e; e = e->next) {
        if (tfs_json_i64(e, &v[i]) < 0 || v[i] < 0)
            return TFS_EFORMAT;
        i++;
    }
    *ndim = i;
    return 0;
}

static int ix_get_hex(const struct tfs_json *v, uint64_t *out)
{
    const char *s = tfs_json_str(v);
    char *end;

    if (s == NULL || v->len != 16 || strspn(s, "0123456789abcdef") != 16)
        return TFS_EFORMAT;
    *out = strtoull(s, &end, 16);
    return 0;
}

static int ix_get_u64(const struct tfs_json *obj, const char *key,
                      uint64_t *out)
{
    return tfs_json_u64(tfs_json_get(obj, key), out);
}

static int ix_get_uint(const struct tfs_json *obj, const char *key,
                       unsigned *out)
{
    uint64_t v;

    if (ix_get_u64(obj, key, &v) < 0 || v > UINT32_MAX)
        return TFS_EFORMAT;
    *out = (unsigned)v;
    return 0;
}

/* A string member copied into *out ("" when absent and optional). */
static int ix_get_strdup(const struct tfs_json *obj, const char *key,
                         bool optional, char **out)
{
    const struct tfs_json *v = tfs_json_get(obj, key);
    const char *s = tfs_json_str(v);

    if (s == NULL && !(optional && v == NULL))
        return TFS_EFORMAT;
    *out = tfs_strdup(s != NULL ? s : "");
    return *out != NULL ? 0 : -ENOMEM;
}

/* A file entry's fields after the name (and rank, for the index). */
static int ix_put_file(struct tfs_buf *b, const struct tfs_ckpt_file_info *f)
{
    return tfs_buf_printf(b, "\"size\":%" PRIu64 ",\"header_size\":%" PRIu64
                          ",\"header_xxh3\":\"%016" PRIx64 "\","
                          "\"data_xxh3\":\"%016" PRIx64 "\",\"tensors\":%zu}",
                          f->size, f->header_size, f->header_xxh3,
                          f->data_xxh3, f->n_tensors);
}

static int ix_get_file(const struct tfs_json *e,
                       struct tfs_ckpt_file_info *f)
{
    uint64_t n;

    if (e->type != TFS_JSON_OBJECT ||
        ix_get_u64(e, "size", &f->size) < 0 ||
        ix_get_u64(e, "header_size", &f->header_size) < 0 ||
        ix_get_hex(tfs_json_get(e, "header_xxh3"), &f->header_xxh3) < 0 ||
        ix_get_hex(tfs_json_get(e, "data_xxh3"), &f->data_xxh3) < 0 ||
        ix_get_u64(e, "tensors", &n) < 0 || f->header_size > f->size)
        return TFS_EFORMAT;
    /* Readers allocate header_size bytes: cap it here, not there. */
    if (f->header_size > 8 + (uint64_t)TFS_CKPT_ST_MAX_HEADER)
        return tfs_err(TFS_EFORMAT, "a header of %" PRIu64 " bytes is over "
                       "the limit of 8 + %u", f->header_size,
                       TFS_CKPT_ST_MAX_HEADER);
    f->n_tensors = (size_t)n;
    return 0;
}

/* A name that is safe as the last part of a store key. */
static bool ix_is_file_name(const char *s)
{
    return s[0] != '\0' && s[0] != '.' && strchr(s, '/') == NULL &&
           strlen(s) < 256;
}

static void ix_files_free(struct tfs_ckpt_file_info *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tfs_free(v[i].name);
    tfs_free(v);
}

/* ---- markers ---- */

static int mk_put_tensor(struct tfs_buf *b,
                         const struct tfs_ckpt_tensor_info *t)
{
    int rc = tfs_buf_puts(b, "{\"name\":");

    if (rc == 0)
        rc = tfs_json_put_str(b, t->name, strlen(t->name));
    if (rc == 0)
        rc = tfs_buf_puts(b, ",\"file\":");
    if (rc == 0)
        rc = tfs_json_put_str(b, t->file, strlen(t->file));
    if (rc == 0)
        rc = tfs_buf_printf(b, ",\"dtype\":\"%s\"",
                            tfs_ckpt_dtype_name(t->dtype));
    if (rc == 0)
        rc = ix_put_dims(b, "shape", t->ndim, t->shape);
    if (rc == 0 && t->sliced)
        rc = ix_put_dims(b, "offsets", t->ndim, t->offsets);
    if (rc == 0 && t->sliced)
        rc = ix_put_dims(b, "full_shape", t->ndim, t->full_shape);
    if (rc == 0)
        rc = tfs_buf_puts(b, "}");
    return rc;
}

int tfs_ckpt_marker_write(struct tfs_buf *b, const struct tfs_ckpt_marker *m)
{
    int rc = tfs_buf_printf(b, "{\"tierfs_marker\":1,\"rank\":%u,"
                            "\"world_size\":%u,\"step\":%" PRIu64
                            ",\"run_id\":", m->rank, m->world_size, m->step);

    if (rc == 0)
        rc = tfs_json_put_str(b, m->run_id, strlen(m->run_id));
    if (rc == 0 && m->attempt[0] != '\0')
        rc = tfs_buf_printf(b, ",\"attempt\":\"%s\"", m->attempt);
    if (rc == 0)
        rc = tfs_buf_puts(b, ",\"files\":[");
    for (size_t i = 0; i < m->n_files && rc == 0; i++) {
        rc = tfs_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        if (rc == 0)
            rc = tfs_json_put_str(b, m->files[i].name,
                                  strlen(m->files[i].name));
        if (rc == 0)
            rc = tfs_buf_puts(b, ",");
        if (rc == 0)
            rc = ix_put_file(b, &m->files[i]);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "],\"tensors\":[");
    for (size_t i = 0; i < m->n_tensors && rc == 0; i++) {
        if (i > 0)
            rc = tfs_buf_puts(b, ",");
        if (rc == 0)
            rc = mk_put_tensor(b, &m->tensors[i]);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "],\"extra\":");
    if (rc == 0)
        rc = tfs_buf_puts(b, m->extra != NULL ? m->extra : "null");
    if (rc == 0)
        rc = tfs_buf_puts(b, "}\n");
    return rc;
}

static int mk_get_tensor(const struct tfs_json *e,
                         struct tfs_ckpt_tensor_info *t)
{
    const struct tfs_json *dt = tfs_json_get(e, "dtype");
    const struct tfs_json *off = tfs_json_get(e, "offsets");
    uint64_t nelem = 0;
    int n = -1;
    int rc;

    if (e->type != TFS_JSON_OBJECT || tfs_json_str(dt) == NULL)
        return TFS_EFORMAT;
    rc = ix_get_strdup(e, "name", false, &t->name);
    if (rc == 0)
        rc = ix_get_strdup(e, "file", false, &t->file);
    if (rc < 0)
        return rc;
    t->dtype = tfs_ckpt_dtype_find(dt->s, dt->len);
    if (t->dtype < 0 ||
        ix_get_dims(tfs_json_get(e, "shape"), t->shape, &t->ndim) < 0 ||
        !ix_is_file_name(t->file) ||
        tfs_ckpt_tensor_size(t->dtype, t->ndim, t->shape, &nelem,
                             &t->nbytes) < 0)
        return TFS_EFORMAT;
    if (off == NULL) {
        memcpy(t->full_shape, t->shape, sizeof(t->shape));
        return 0;
    }
    t->sliced = true;
    if (ix_get_dims(off, t->offsets, &n) < 0 || n != t->ndim ||
        ix_get_dims(tfs_json_get(e, "full_shape"), t->full_shape,
                    &n) < 0 || n != t->ndim)
        return TFS_EFORMAT;
    for (int d = 0; d < n; d++) {
        if (t->offsets[d] > t->full_shape[d] - t->shape[d])
            return TFS_EFORMAT;
    }
    return 0;
}

static int mk_get_files(const struct tfs_json *a,
                        struct tfs_ckpt_file_info **out, size_t *n,
                        unsigned rank)
{
    int rc = 0;

    if (a == NULL || a->type != TFS_JSON_ARRAY)
        return TFS_EFORMAT;
    *out = tfs_calloc(a->n, sizeof(**out));
    if (*out == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = a->child; e && rc == 0; e = e->next) {
        struct tfs_ckpt_file_info *f = &(*out)[(*n)++];

        f->rank = rank;
        rc = ix_get_strdup(e, "name", false, &f->name);
        if (rc == 0 && !ix_is_file_name(f->name))
            rc = TFS_EFORMAT;
        if (rc == 0)
            rc = ix_get_file(e, f);
    }
    return rc;
}

static int mk_get_tensors(const struct tfs_json *a,
                          struct tfs_ckpt_marker *m)
{
    int rc = 0;

    if (a == NULL || a->type != TFS_JSON_ARRAY)
        return TFS_EFORMAT;
    m->tensors = tfs_calloc(a->n, sizeof(*m->tensors));
    if (m->tensors == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = a->child; e && rc == 0; e = e->next)
        rc = mk_get_tensor(e, &m->tensors[m->n_tensors++]);
    return rc;
}

/* The optional attempt nonce: up to 16 hex digits. */
static int mk_get_attempt(const struct tfs_json *v,
                          struct tfs_ckpt_marker *m)
{
    const char *s = tfs_json_str(v);

    if (v == NULL)
        return 0;
    if (s == NULL || strlen(s) > 16 || strspn(s, "0123456789abcdef") !=
                                           strlen(s))
        return TFS_EFORMAT;
    memcpy(m->attempt, s, strlen(s) + 1);
    return 0;
}

static int mk_get(const struct tfs_json *root, struct tfs_ckpt_marker *m)
{
    const struct tfs_json *extra = tfs_json_get(root, "extra");
    struct tfs_buf b;
    int rc;

    if (root->type != TFS_JSON_OBJECT ||
        tfs_json_get(root, "tierfs_marker") == NULL ||
        ix_get_uint(root, "rank", &m->rank) < 0 ||
        ix_get_uint(root, "world_size", &m->world_size) < 0 ||
        ix_get_u64(root, "step", &m->step) < 0 ||
        m->rank >= m->world_size)
        return TFS_EFORMAT;
    rc = ix_get_strdup(root, "run_id", true, &m->run_id);
    if (rc == 0)
        rc = mk_get_attempt(tfs_json_get(root, "attempt"), m);
    if (rc == 0)
        rc = mk_get_files(tfs_json_get(root, "files"), &m->files,
                          &m->n_files, m->rank);
    if (rc == 0)
        rc = mk_get_tensors(tfs_json_get(root, "tensors"), m);
    if (rc < 0 || extra == NULL)
        return rc;
    tfs_buf_init(&b, TFS_CKPT_JSON_MAX);
    rc = tfs_json_write(&b, extra);
    if (rc == 0)
        m->extra = tfs_buf_steal(&b);
    tfs_buf_cleanup(&b);
    return rc == 0 && m->extra == NULL ? -ENOMEM : rc;
}

int tfs_ckpt_marker_parse(const char *text, size_t len, const char *what,
                          struct tfs_ckpt_marker *out)
{
    struct tfs_json_doc doc;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = tfs_json_parse(text, len, &index_limits, &doc);
    if (rc == TFS_EFORMAT || rc == TFS_ETOOBIG)
        return tfs_ckpt_err_in(TFS_EFORMAT, what, NULL);
    if (rc < 0)
        return rc;
    rc = mk_get(doc.root, out);
    tfs_json_cleanup(&doc);
    if (rc == TFS_EFORMAT)
        rc = tfs_err(TFS_EFORMAT, "%s: not a valid marker", what);
    if (rc < 0)
        tfs_ckpt_marker_cleanup(out);
    return rc;
}

void tfs_ckpt_marker_cleanup(struct tfs_ckpt_marker *m)
{
    ix_files_free(m->files, m->n_files);
    for (size_t i = 0; i < m->n_tensors; i++) {
        tfs_free(m->tensors[i].name);
        tfs_free(m->tensors[i].file);
    }
    tfs_free(m->tensors);
    tfs_free(m->run_id);
    tfs_free(m->extra);
    memset(m, 0, sizeof(*m));
}

/* ---- building the index from the markers ---- */

/* One saved piece, while merging: which marker tensor, in what order. */
struct ix_piece {
    const struct tfs_ckpt_tensor_info *t;
    size_t                             order;
};

static int ix_piece_cmp(const void *a, const void *b)
{
    const struct ix_piece *x = a;
    const struct ix_piece *y = b;
    int c = strcmp(x->t->name, y->t->name);

    if (c != 0)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void ix_box(const struct tfs_ckpt_tensor_info *t,
                   struct tfs_ckpt_box *b)
{
    b->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        b->off[d] = t->sliced ? t->offsets[d] : 0;
        b->len[d] = t->shape[d];
    }
}

/* A piece's box, keyed for the sweep by its start in the sweep dimension. */
struct ix_sbox {
    int64_t             key;
    struct tfs_ckpt_box b;
};

static int ix_i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a;
    int64_t y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* Sweep order; equal boxes compare equal, so they end up adjacent. */
static int ix_sbox_cmp(const void *a, const void *b)
{
    const struct ix_sbox *x = a;
    const struct ix_sbox *y = b;
    size_t dims = sizeof(int64_t) * (size_t)x->b.ndim;
    int c;

    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    c = memcmp(x->b.off, y->b.off, dims);
    return c != 0 ? c : memcmp(x->b.len, y->b.len, dims);
}

/* The dimension in which the boxes start at the most distinct offsets. */
static int ix_sweep_dim(const struct ix_sbox *v, size_t n, int64_t *tmp)
{
    size_t best_n = 0;
    int best = 0;

    for (int d = 0; d < v[0].b.ndim; d++) {
        size_t distinct = 0;

        for (size_t i = 0; i < n; i++)
            tmp[i] = v[i].b.off[d];
        qsort(tmp, n, sizeof(*tmp), ix_i64_cmp);
        for (size_t i = 0; i < n; i++)
            distinct += i == 0 || tmp[i] != tmp[i - 1];
        if (distinct > best_n) {
            best_n = distinct;
            best = d;
        }
    }
    return best;
}

/*
 * Whether any two of the sorted, distinct boxes v[0..n) overlap: a sweep
 * along dimension d that compares each box only with the earlier ones
 * still open at its start.  O(n log n) when the slices cut the tensor
 * along one dimension (the sweep picks it), O(n * k) for a grid with k
 * slices across the sweep.
 */
static bool ix_any_overlap(const struct ix_sbox *v, size_t n, int d,
                           size_t *open)
{
    size_t n_open = 0;

    for (size_t i = 0; i < n; i++) {
        size_t keep = 0;

        for (size_t k = 0; k < n_open; k++) {
            const struct tfs_ckpt_box *b = &v[open[k]].b;
            struct tfs_ckpt_box x;

            if (b->off[d] + b->len[d] <= v[i].key)
                continue;               /* closed: drop it */
            if (tfs_ckpt_box_intersect(&v[i].b, b, &x))
                return true;
            open[keep++] = open[k];
        }
        n_open = keep;
        open[n_open++] = i;
    }
    return false;
}

/*
 * The pieces p[0..n) of one tensor: same dtype and full shape, boxes
 * equal or disjoint, together covering the whole tensor.
 */
static int ix_check_group(const struct ix_piece *p, size_t n)
{
    const struct tfs_ckpt_tensor_info *t0 = p[0].t;
    struct tfs_ckpt_box full = {.ndim = t0->ndim};
    struct ix_sbox *v = tfs_calloc(n, sizeof(*v));
    size_t *open = tfs_calloc(n, sizeof(*open));
    int64_t *tmp = tfs_calloc(n, sizeof(*tmp));
    uint64_t covered = 0;
    size_t m = 0;
    int rc = 0;
    int d;

    if (v == NULL || open == NULL || tmp == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(full.len, t0->full_shape, sizeof(full.len));
    for (size_t i = 0; i < n; i++) {
        if (p[i].t->dtype != t0->dtype || p[i].t->ndim != t0->ndim ||
            memcmp(p[i].t->full_shape, t0->full_shape,
                   sizeof(int64_t) * (size_t)t0->ndim) != 0) {
            rc = tfs_err(TFS_EFORMAT, "tensor '%s': ranks disagree on its "
                         "dtype or shape (do all ranks hold the same state?)",
                         t0->name);
            goto out;
        }
        ix_box(p[i].t, &v[i].b);
    }
    d = ix_sweep_dim(v, n, tmp);
    for (size_t i = 0; i < n; i++)
        v[i].key = t0->ndim > 0 ? v[i].b.off[d] : 0;
    qsort(v, n, sizeof(*v), ix_sbox_cmp);
    for (size_t i = 0; i < n; i++)      /* equal boxes count once */
        if (i == 0 || ix_sbox_cmp(&v[i], &v[m - 1]) != 0)
            v[m++] = v[i];
    if (t0->ndim > 0 && ix_any_overlap(v, m, d, open)) {
        rc = tfs_err(TFS_EFORMAT, "tensor '%s': saved slices overlap",
                     t0->name);
        goto out;
    }
    for (size_t i = 0; i < m; i++)
        covered += tfs_ckpt_box_volume(&v[i].b);
    if (covered != tfs_ckpt_box_volume(&full))
        rc = tfs_err(TFS_EFORMAT, "tensor '%s': saved slices cover %" PRIu64
                     " of %" PRIu64 " elements (a rank did not save its "
                     "part: do all ranks hold the same state?)", t0->name,
                     covered, tfs_ckpt_box_volume(&full));
out:
    tfs_free(v);
    tfs_free(open);
    tfs_free(tmp);
    return rc;
}

/* The pieces of one tensor, and where it first appears. */
struct ix_group {
    struct ix_piece *p;
    size_t           n;
    size_t           order;
};

static int ix_group_cmp(const void *a, const void *b)
{
    const struct ix_group *x = a;
    const struct ix_group *y = b;

    return x->order < y->order ? -1 : x->order > y->order;
}

/* Add one tensor (pieces p[0..n)) to the weight map and the sharded list. */
static int ix_add_group(struct tfs_ckpt_index *ix, const struct ix_group *g)
{
    const struct tfs_ckpt_tensor_info *first = g->p[0].t;
    struct tfs_ckpt_sharded *s;
    bool sliced = false;
    uint64_t nelem = 0;
    uint64_t nbytes = 0;

    /* The weight map names the file holding the slice at the origin. */
    for (size_t i = g->n; i-- > 0;) {
        bool origin = true;

        sliced |= g->p[i].t->sliced;
        for (int d = 0; d < g->p[i].t->ndim && g->p[i].t->sliced; d++)
            origin &= g->p[i].t->offsets[d] == 0;
        if (origin)
            first = g->p[i].t;
    }
    ix->wm_names[ix->n_wm] = tfs_strdup(first->name);
    ix->wm_files[ix->n_wm] = tfs_strdup(first->file);
    ix->n_wm++;
    if (ix->wm_names[ix->n_wm - 1] == NULL ||
        ix->wm_files[ix->n_wm - 1] == NULL)
        return -ENOMEM;
    tfs_ckpt_tensor_size(first->dtype, first->ndim, first->full_shape, &nelem,
                         &nbytes);
    ix->total_size += nbytes;
    if (!sliced)
        return 0;
    s = &ix->sharded[ix->n_sharded];
    s->name = tfs_strdup(first->name);
    if (s->name == NULL)
        return -ENOMEM;
    s->dtype = first->dtype;
    s->ndim = first->ndim;
    memcpy(s->shape, first->full_shape, sizeof(s->shape));
    ix->n_sharded++;
    return 0;
}

/* Group the pieces by name, check each group, add them in first-seen order. */
static int ix_merge_tensors(struct tfs_ckpt_index *ix, struct ix_piece *p,
                            size_t n)
{
    struct ix_group *g = tfs_calloc(n + 1, sizeof(*g));
    size_t n_groups = 0;
    int rc = 0;

    ix->wm_names = tfs_calloc(n + 1, sizeof(char *));
    ix->wm_files = tfs_calloc(n + 1, sizeof(char *));
    ix->sharded = tfs_calloc(n + 1, sizeof(*ix->sharded));
    if (g == NULL || ix->wm_names == NULL || ix->wm_files == NULL ||
        ix->sharded == NULL) {
        tfs_free(g);
        return -ENOMEM;
    }
    qsort(p, n, sizeof(*p), ix_piece_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(p[i].t->name, p[i - 1].t->name) != 0) {
            g[n_groups].p = &p[i];
            g[n_groups].order = p[i].order;
            n_groups++;
        }
        g[n_groups - 1].n++;
    }
    for (size_t i = 0; i < n_groups && rc == 0; i++)
        rc = ix_check_group(g[i].p, g[i].n);
    qsort(g, n_groups, sizeof(*g), ix_group_cmp);
    for (size_t i = 0; i < n_groups && rc == 0; i++)
        rc = ix_add_group(ix, &g[i]);
    tfs_free(g);
    return rc;
}

/* Files of every rank, and every rank's extra document. */
static int ix_merge_files(struct tfs_ckpt_index *ix,
                          const struct tfs_ckpt_marker *m, size_t n)
{
    size_t total = 0;

    for (size_t r = 0; r < n; r++)
        total += m[r].n_files;
    ix->files = tfs_calloc(total + 1, sizeof(*ix->files));
    ix->extra = tfs_calloc(n, sizeof(char *));
    if (ix->files == NULL || ix->extra == NULL)
        return -ENOMEM;
    for (size_t r = 0; r < n; r++) {
        ix->extra[r] = tfs_strdup(m[r].extra != NULL ? m[r].extra : "null");
        if (ix->extra[r] == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < m[r].n_files; i++) {
            struct tfs_ckpt_file_info *f = &ix->files[ix->n_files];

            if (tfs_ckpt_index_file(ix, m[r].files[i].name) != NULL)
                return tfs_err(TFS_EFORMAT, "file '%s' named by two ranks",
                               m[r].files[i].name);
            *f = m[r].files[i];
            f->rank = (unsigned)r;
            f->name = tfs_strdup(m[r].files[i].name);
            if (f->name == NULL)
                return -ENOMEM;
            ix->n_files++;
        }
    }
    return 0;
}

static int ix_check_markers(const struct tfs_ckpt_marker *m, size_t n)
{
    for (size_t r = 0; r < n; r++) {
        if (m[r].rank != r || m[r].world_size != n || m[r].step != m[0].step ||
            strcmp(m[r].run_id, m[0].run_id) != 0)
            return tfs_err(TFS_EFORMAT, "marker of rank %zu does not match "
                           "rank 0's (rank, world size, step or run id)", r);
        for (size_t i = 0; i < m[r].n_tensors; i++) {
            bool found = false;

            for (size_t j = 0; j < m[r].n_files && !found; j++)
                found = strcmp(m[r].files[j].name, m[r].tensors[i].file) == 0;
            if (!found)
                return tfs_err(TFS_EFORMAT, "rank %zu: tensor '%s' is in "
                               "file '%s', which it did not list", r,
                               m[r].tensors[i].name, m[r].tensors[i].file);
        }
    }
    return 0;
}

int tfs_ckpt_index_build(const struct tfs_ckpt_marker *m, size_t n,
                         int64_t created_ns, struct tfs_ckpt_index *out)
{
    struct ix_piece *p = NULL;
    size_t total = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (n == 0)
        return -EINVAL;
    rc = ix_check_markers(m, n);
    if (rc < 0)
        return rc;
    out->step = m[0].step;
    out->world_size = (unsigned)n;
    out->created_ns = created_ns;
    out->run_id = tfs_strdup(m[0].run_id);
    for (size_t r = 0; r < n; r++)
        total += m[r].n_tensors;
    p = tfs_calloc(total + 1, sizeof(*p));
    if (out->run_id == NULL || p == NULL) {
        rc = -ENOMEM;
        goto out_free;
    }
    total = 0;
    for (size_t r = 0; r < n; r++) {
        for (size_t i = 0; i < m[r].n_tensors; i++) {
            p[total].t = &m[r].tensors[i];
            p[total].order = total;
            total++;
        }
    }
    rc = ix_merge_files(out, m, n);
    if (rc == 0)
        rc = ix_merge_tensors(out, p, total);
out_free:
    tfs_free(p);
    if (rc < 0)
        tfs_ckpt_index_cleanup(out);
    return rc;
}

const struct tfs_ckpt_file_info *
tfs_ckpt_index_file(const struct tfs_ckpt_index *ix, const char *name)
{
    for (size_t i = 0; i < ix->n_files; i++) {
        if (strcmp(ix->files[i].name, name) == 0)
            return &ix->files[i];
    }
    return NULL;
}

/* ---- the index document ---- */

static int ix_put_weight_map(struct tfs_buf *b, const struct tfs_ckpt_index *ix)
{
    int rc = tfs_buf_printf(b, "{\"metadata\":{\"total_size\":%" PRIu64
                            "},\"weight_map\":{", ix->total_size);

    for (size_t i = 0; i < ix->n_wm && rc == 0; i++) {
        if (i > 0)
            rc = tfs_buf_puts(b, ",");
        if (rc == 0)
            rc = tfs_json_put_str(b, ix->wm_names[i],
                                  strlen(ix->wm_names[i]));
        if (rc == 0)
            rc = tfs_buf_puts(b, ":");
        if (rc == 0)
            rc = tfs_json_put_str(b, ix->wm_files[i],
                                  strlen(ix->wm_files[i]));
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "}");
    return rc;
}

static int ix_put_tierfs(struct tfs_buf *b, const struct tfs_ckpt_index *ix)
{
    int rc = tfs_buf_printf(b, ",\"tierfs\":{\"version\":1,\"step\":%" PRIu64
                            ",\"world_size\":%u,\"created_ns\":%" PRId64
                            ",\"run_id\":", ix->step, ix->world_size,
                            ix->created_ns);

    if (rc == 0)
        rc = tfs_json_put_str(b, ix->run_id, strlen(ix->run_id));
    if (rc == 0)
        rc = tfs_buf_puts(b, ",\"files\":{");
    for (size_t i = 0; i < ix->n_files && rc == 0; i++) {
        rc = tfs_buf_puts(b, i ? "," : "");
        if (rc == 0)
            rc = tfs_json_put_str(b, ix->files[i].name,
                                  strlen(ix->files[i].name));
        if (rc == 0)
            rc = tfs_buf_printf(b, ":{\"rank\":%u,", ix->files[i].rank);
        if (rc == 0)
            rc = ix_put_file(b, &ix->files[i]);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "},\"sharded\":{");
    for (size_t i = 0; i < ix->n_sharded && rc == 0; i++) {
        rc = tfs_buf_puts(b, i ? "," : "");
        if (rc == 0)
            rc = tfs_json_put_str(b, ix->sharded[i].name,
                                  strlen(ix->sharded[i].name));
        if (rc == 0)
            rc = tfs_buf_printf(b, ":{\"dtype\":\"%s\"",
                                tfs_ckpt_dtype_name(ix->sharded[i].dtype));
        if (rc == 0)
            rc = ix_put_dims(b, "shape", ix->sharded[i].ndim,
                             ix->sharded[i].shape);
        if (rc == 0)
            rc = tfs_buf_puts(b, "}");
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "},\"extra\":[");
    for (unsigned r = 0; r < ix->world_size && rc == 0; r++) {
        rc = tfs_buf_puts(b, r ? "," : "");
        if (rc == 0)
            rc = tfs_buf_puts(b, ix->extra[r]);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, "]}}\n");
    return rc;
}

int tfs_ckpt_index_write(struct tfs_buf *b, const struct tfs_ckpt_index *ix)
{
    int rc = ix_put_weight_map(b, ix);

    if (rc == 0)
        rc = ix_put_tierfs(b, ix);
    return rc;
}

static int ix_get_weight_map(const struct tfs_json *wm,
                             struct tfs_ckpt_index *ix)
{
    if (wm == NULL || wm->type != TFS_JSON_OBJECT)
        return TFS_EFORMAT;
    ix->wm_names = tfs_calloc(wm->n + 1, sizeof(char *));
    ix->wm_files = tfs_calloc(wm->n + 1, sizeof(char *));
    if (ix->wm_names == NULL || ix->wm_files == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = wm->child; e; e = e->next) {
        if (e->type != TFS_JSON_STRING)
            return TFS_EFORMAT;
        ix->wm_names[ix->n_wm] = tfs_strdup(e->key);
        ix->wm_files[ix->n_wm] = tfs_strdup(e->s);
        ix->n_wm++;
        if (ix->wm_names[ix->n_wm - 1] == NULL ||
            ix->wm_files[ix->n_wm - 1] == NULL)
            return -ENOMEM;
    }
    return 0;
}

static int ix_get_files(const struct tfs_json *files,
                        struct tfs_ckpt_index *ix)
{
    if (files == NULL || files->type != TFS_JSON_OBJECT)
        return TFS_EFORMAT;
    ix->files = tfs_calloc(files->n + 1, sizeof(*ix->files));
    if (ix->files == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = files->child; e; e = e->next) {
        struct tfs_ckpt_file_info *f = &ix->files[ix->n_files];

        f->name = tfs_strdup(e->key);
        if (f->name == NULL)
            return -ENOMEM;
        ix->n_files++;
        if (!ix_is_file_name(f->name) || ix_get_file(e, f) < 0 ||
            ix_get_uint(e, "rank", &f->rank) < 0 ||
            f->rank >= ix->world_size)
            return TFS_EFORMAT;
    }
    return 0;
}

static int ix_get_sharded(const struct tfs_json *sh,
                          struct tfs_ckpt_index *ix)
{
    if (sh == NULL || sh->type != TFS_JSON_OBJECT)
        return TFS_EFORMAT;
    ix->sharded = tfs_calloc(sh->n + 1, sizeof(*ix->sharded));
    if (ix->sharded == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = sh->child; e; e = e->next) {
        struct tfs_ckpt_sharded *s = &ix->sharded[ix->n_sharded];
        const struct tfs_json *dt = tfs_json_get(e, "dtype");

        s->name = tfs_strdup(e->key);
        if (s->name == NULL)
            return -ENOMEM;
        ix->n_sharded++;
        if (tfs_json_str(dt) == NULL)
            return TFS_EFORMAT;
        s->dtype = tfs_ckpt_dtype_find(dt->s, dt->len);
        if (s->dtype < 0 ||
            ix_get_dims(tfs_json_get(e, "shape"), s->shape,
                        &s->ndim) < 0)
            return TFS_EFORMAT;
    }
    return 0;
}

static int ix_get_extra(const struct tfs_json *a,
                        struct tfs_ckpt_index *ix)
{
    unsigned r = 0;

    if (a == NULL || a->type != TFS_JSON_ARRAY || a->n != ix->world_size)
        return TFS_EFORMAT;
    ix->extra = tfs_calloc(ix->world_size, sizeof(char *));
    if (ix->extra == NULL)
        return -ENOMEM;
    for (const struct tfs_json *e = a->child; e; e = e->next) {
        struct tfs_buf b;
        int rc;

        tfs_buf_init(&b, TFS_CKPT_JSON_MAX);
        rc = tfs_json_write(&b, e);
        ix->extra[r] = rc == 0 ? tfs_buf_steal(&b) : NULL;
        tfs_buf_cleanup(&b);
        if (ix->extra[r++] == NULL)
            return rc < 0 ? rc : -ENOMEM;
    }
    return 0;
}

static int ix_get(const struct tfs_json *root, struct tfs_ckpt_index *ix)
{
    const struct tfs_json *t = tfs_json_get(root, "tierfs");
    const struct tfs_json *c = tfs_json_get(t, "created_ns");
    int rc;

    if (root->type != TFS_JSON_OBJECT || t == NULL ||
        ix_get_u64(tfs_json_get(root, "metadata"), "total_size",
                   &ix->total_size) < 0 ||
        ix_get_u64(t, "step", &ix->step) < 0 ||
        ix_get_uint(t, "world_size", &ix->world_size) < 0 ||
        ix->world_size == 0 || ix->world_size > (1u << 20) ||
        (c != NULL && tfs_json_i64(c, &ix->created_ns) < 0))
        return TFS_EFORMAT;
    rc = ix_get_strdup(t, "run_id", true, &ix->run_id);
    if (rc == 0)
        rc = ix_get_weight_map(tfs_json_get(root, "weight_map"), ix);
    if (rc == 0)
        rc = ix_get_files(tfs_json_get(t, "files"), ix);
    if (rc == 0)
        rc = ix_get_sharded(tfs_json_get(t, "sharded"), ix);
    if (rc == 0)
        rc = ix_get_extra(tfs_json_get(t, "extra"), ix);
    for (size_t i = 0; i < ix->n_wm && rc == 0; i++) {
        if (tfs_ckpt_index_file(ix, ix->wm_files[i]) == NULL)
            return tfs_err(TFS_EFORMAT, "weight_map names '%s' for '%s', "
                           "which is not among the files",
                           ix->wm_files[i], ix->wm_names[i]);
    }
    return rc;
}

int tfs_ckpt_index_parse(const char *text, size_t len, const char *what,
                         struct tfs_ckpt_index *out)
{
    struct tfs_json_doc doc;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = tfs_json_parse(text, len, &index_limits, &doc);
    if (rc == TFS_EFORMAT || rc == TFS_ETOOBIG)
        return tfs_ckpt_err_in(TFS_EFORMAT, what, NULL);
    if (rc < 0)
        return rc;
    tfs_errdetail_clear();
    rc = ix_get(doc.root, out);
    tfs_json_cleanup(&doc);
    if (rc == TFS_EFORMAT && tfs_errdetail()[0] == '\0')
        rc = tfs_err(TFS_EFORMAT, "%s: not a tierfs checkpoint index", what);
    else if (rc == TFS_EFORMAT)
        rc = tfs_ckpt_err_in(TFS_EFORMAT, what, NULL);
    if (rc < 0)
        tfs_ckpt_index_cleanup(out);
    return rc;
}

void tfs_ckpt_index_cleanup(struct tfs_ckpt_index *ix)
{
    ix_files_free(ix->files, ix->n_files);
    for (size_t i = 0; i < ix->n_wm; i++) {
        tfs_free(ix->wm_names[i]);
        tfs_free(ix->wm_files[i]);
    }
    tfs_free(ix->wm_names);
    tfs_free(ix->wm_files);
    for (size_t i = 0; i < ix->n_sharded; i++)
        tfs_free(ix->sharded[i].name);
    tfs_free(ix->sharded);
    for (unsigned r = 0; ix->extra != NULL && r < ix->world_size; r++)
        tfs_free(ix->extra[r]);
    tfs_free(ix->extra);
    tfs_free(ix->run_id);
    memset(ix, 0, sizeof(*ix));
}
