/* SPDX-License-Identifier: MIT */
/*
 * The store registry and the single dispatch point.
 *
 * tfs_store_open() turns a URI into a chain of layers (wrappers outside,
 * one real store at the bottom), handing each layer the shared option bag.
 * Every other tfs_store_* function checks its arguments, clears the
 * calling thread's error detail, calls through the ops table and counts
 * the operation: no other file calls st->ops->x.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "metrics/metrics.h"
#include "store/store_int.h"

static const struct tfs_store_ops *const store_registry[] = {
    &tfs_posix_ops,
    &tfs_s3_ops,
    &tfs_fault_ops,
    &tfs_retry_ops,
};

static const struct tfs_store_ops *store_lookup(const char *scheme)
{
    for (size_t i = 0; i < TFS_ARRAY_LEN(store_registry); i++) {
        if (strcmp(store_registry[i]->scheme, scheme) == 0)
            return store_registry[i];
    }
    return NULL;
}

/* ---- opening and closing ---- */

static void store_free(struct tfs_store *st)
{
    tfs_free(st->ident);
    tfs_free(st->priv);
    tfs_free(st);
}

void tfs_store_close(struct tfs_store *st)
{
    while (st != NULL) {
        struct tfs_store *next = st->next;

        st->ops->close(st);
        store_free(st);
        st = next;
    }
}

/* Open one layer over next (NULL for the bottom store). */
static int store_open_layer(const char *scheme, const char *location,
                            struct tfs_store *next, struct tfs_opts *opts,
                            struct tfs_store **out)
{
    const struct tfs_store_ops *ops = store_lookup(scheme);
    bool wrapper;
    struct tfs_store *st;
    int rc;

    if (ops == NULL)
        return tfs_err(TFS_EURI, "unknown store scheme '%s'", scheme);
    wrapper = (ops->caps & TFS_SCAP_WRAPPER) != 0;
    if (wrapper != (next != NULL))
        return tfs_err(TFS_EURI, wrapper ? "'%s' must wrap another store"
                                         : "'%s' cannot wrap a store",
                       scheme);
    st = tfs_calloc(1, sizeof(*st));
    if (st == NULL)
        return -ENOMEM;
    st->ops = ops;
    st->next = next;
    st->opts = opts;
    st->priv = tfs_calloc(1, ops->priv_size);
    st->ident = tfs_malloc(strlen(scheme) + strlen(location) + 4);
    if (st->priv == NULL || st->ident == NULL) {
        store_free(st);
        return -ENOMEM;
    }
    snprintf(st->ident, strlen(scheme) + strlen(location) + 4, "%s://%s",
             scheme, location);
    rc = ops->open(st, location);
    st->opts = NULL;
    if (rc < 0) {
        store_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

static int store_open_chain(const struct tfs_uri *u, struct tfs_opts *opts,
                            struct tfs_store **out)
{
    struct tfs_store *st = NULL;
    int rc = 0;

    for (int i = u->n_schemes - 1; i >= 0; i--) {
        struct tfs_store *layer = NULL;
        bool bottom = i == u->n_schemes - 1;

        rc = store_open_layer(u->schemes[i], bottom ? u->location : "",
                              st, opts, &layer);
        if (rc < 0)
            break;
        st = layer;
    }
    if (rc < 0) {
        tfs_store_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

/* verify=auto|reread|off, a property of the chain: kept by its top. */
static int store_take_verify(struct tfs_store *st, struct tfs_opts *opts)
{
    static const char *const names[] = {"auto", "reread", "off"};
    const char *v = tfs_opts_take(opts, "verify");

    if (v == NULL)
        return 0;
    for (int i = 0; i < (int)TFS_ARRAY_LEN(names); i++) {
        if (strcmp(v, names[i]) == 0) {
            st->verify = i;
            return 0;
        }
    }
    return tfs_err(TFS_EOPTION, "option verify=%s: expected auto, reread "
                   "or off", v);
}

int tfs_store_open(struct tfs_store **out, const char *uri,
                   const char *options)
{
    struct tfs_opts opts = {0};
    struct tfs_uri u;
    struct tfs_store *st = NULL;
    const char *unused;
    int rc;

    assert(out != NULL && uri != NULL);
    tfs_errdetail_clear();
    rc = tfs_uri_parse(uri, &u);
    if (rc < 0)
        return rc;
    rc = tfs_opts_parse(&opts, u.query);
    if (rc == 0)
        rc = tfs_opts_parse(&opts, options);
    if (rc == 0)
        rc = store_open_chain(&u, &opts, &st);
    if (rc < 0)
        goto out;
    rc = store_take_verify(st, &opts);
    if (rc < 0) {
        tfs_store_close(st);
        goto out;
    }
    unused = tfs_opts_unused(&opts);
    if (unused != NULL) {
        rc = tfs_err(TFS_EOPTION, "unknown option '%s'", unused);
        tfs_store_close(st);
        goto out;
    }
    *out = st;
out:
    tfs_opts_cleanup(&opts);
    tfs_uri_cleanup(&u);
    return rc;
}

/* ---- options, during open ---- */

/* Take name from the bag, or NULL (also when not inside open). */
static const char *store_opt(struct tfs_store *st, const char *name)
{
    if (st->opts == NULL)
        return NULL;
    return tfs_opts_take(st->opts, name);
}

/* Parse v with parse(); the detail names the option on failure. */
#define STORE_OPT_PARSE(st, name, out, parse, what)                        \
    do {                                                                   \
        const char *v_ = store_opt(st, name);                              \
        if (v_ != NULL && parse(v_, out) < 0)                              \
            return tfs_err(TFS_EOPTION, "option %s=%s: expected %s",       \
                           name, v_, what);                                \
        return 0;                                                          \
    } while (0)

int tfs_store_opt_str(struct tfs_store *st, const char *name,
                      const char **out)
{
    const char *v = store_opt(st, name);

    if (v != NULL)
        *out = v;
    return 0;
}

int tfs_store_opt_u64(struct tfs_store *st, const char *name, uint64_t *out)
{
    STORE_OPT_PARSE(st, name, out, tfs_parse_u64, "a whole number");
}

int tfs_store_opt_size(struct tfs_store *st, const char *name, uint64_t *out)
{
    STORE_OPT_PARSE(st, name, out, tfs_parse_size, "a size such as 8M");
}

int tfs_store_opt_double(struct tfs_store *st, const char *name,
                         double *out)
{
    STORE_OPT_PARSE(st, name, out, tfs_parse_double, "a number");
}

int tfs_store_opt_bool(struct tfs_store *st, const char *name, bool *out)
{
    STORE_OPT_PARSE(st, name, out, tfs_parse_bool, "0 or 1");
}

/* ---- accessors ---- */

void *tfs_store_priv(struct tfs_store *st)
{
    return st->priv;
}

const char *tfs_store_identity(struct tfs_store *st)
{
    while (st->next != NULL)
        st = st->next;
    if (st->ops->identity != NULL)
        return st->ops->identity(st);
    return st->ident;
}

struct tfs_store *tfs_store_next(struct tfs_store *st)
{
    return st->next;
}

const char *tfs_store_scheme(const struct tfs_store *st)
{
    return st->ops->scheme;
}

unsigned tfs_store_caps(const struct tfs_store *st)
{
    if (st->ops->caps & TFS_SCAP_WRAPPER)
        return TFS_SCAP_WRAPPER | tfs_store_caps(st->next);
    return st->ops->caps;
}

struct tfs_store *tfs_store_find(struct tfs_store *st, const char *scheme)
{
    for (; st != NULL; st = st->next) {
        if (strcmp(st->ops->scheme, scheme) == 0)
            return st;
    }
    return NULL;
}

void tfs_store_get_stats(struct tfs_store *st, struct tfs_store_stats *out)
{
    out->stats = atomic_load(&st->n_stat);
    out->reads = atomic_load(&st->n_read);
    out->lists = atomic_load(&st->n_list);
    out->puts = atomic_load(&st->n_put);
    out->removes = atomic_load(&st->n_remove);
    out->copies = atomic_load(&st->n_copy);
    out->renames = atomic_load(&st->n_rename);
    out->errors = atomic_load(&st->n_error);
    out->read_bytes = atomic_load(&st->read_bytes);
    out->put_bytes = atomic_load(&st->put_bytes);
    out->checksum_mismatches = 0;
    out->verified_reads = 0;
    out->list_skipped = 0;
    for (; st != NULL; st = st->next) {
        out->checksum_mismatches += atomic_load(&st->n_mismatch);
        out->verified_reads += atomic_load(&st->n_verified);
        out->list_skipped += atomic_load(&st->n_skipped);
    }
}

/* The "store" section of the registry: tfs_store_stats of the mount's
   outermost layer. */
#define STORE_METRICS(X)                                                   \
    X(U64, stats, COUNTER, COUNT, NULL, "stats (HEAD) sent to the store")  \
    X(U64, reads, COUNTER, COUNT, NULL, "reads sent to the store")         \
    X(U64, lists, COUNTER, COUNT, NULL, "listings sent to the store")      \
    X(U64, puts, COUNTER, COUNT, NULL, "puts sent to the store")           \
    X(U64, removes, COUNTER, COUNT, NULL, "deletes sent to the store")     \
    X(U64, copies, COUNTER, COUNT, NULL, "copies sent to the store")       \
    X(U64, renames, COUNTER, COUNT, NULL, "renames sent to the store")     \
    X(U64, errors, COUNTER, COUNT, NULL, "store operations that failed")   \
    X(U64, read_bytes, COUNTER, BYTES, NULL, "bytes read from the store")  \
    X(U64, put_bytes, COUNTER, BYTES, NULL, "bytes put to the store")      \
    X(U64, checksum_mismatches, COUNTER, COUNT, NULL,                      \
      "end-to-end checks of store reads that failed (whole chain)")        \
    X(U64, verified_reads, COUNTER, COUNT, NULL,                           \
      "store reads an end-to-end check passed (whole chain)")              \
    X(U64, list_skipped, COUNTER, COUNT, NULL,                             \
      "keys a listing could not hold, left out (whole chain)")

static const struct tfs_metric store_metric_table[] = {
#define X(...) TFS_METRIC_DESC(struct tfs_store_stats, __VA_ARGS__)
    STORE_METRICS(X)
#undef X
};

const struct tfs_metric_section tfs_metrics_store = {
    .name = "store",
    .prom_prefix = "store_",
    .when = "every mount",
    .m = store_metric_table,
    .n = TFS_ARRAY_LEN(store_metric_table),
    .size = sizeof(struct tfs_store_stats),
};

/* ---- shared helpers for implementations ---- */

int tfs_key_check(const char *key)
{
    size_t len = strlen(key);

    if (len == 0)
        return tfs_err(TFS_EBADKEY, "empty key");
    if (len > 1024)
        return tfs_err(TFS_EBADKEY, "key longer than 1024 bytes: %.40s...",
                       key);
    if (key[0] == '/')
        return tfs_err(TFS_EBADKEY, "key '%s' starts with '/'", key);
    return 0;
}

int tfs_source_read(const struct tfs_source *src, void *buf, size_t len,
                    uint64_t off)
{
    size_t done = 0;
    int rc;

    if (src->buf != NULL) {
        memcpy(buf, (const char *)src->buf + off, len);
        return 0;
    }
    rc = tfs_pread_full(src->fd, buf, len, src->off + off, &done);
    if (rc < 0)
        return tfs_err(rc, "read of the source file failed");
    if (done < len)
        return tfs_err(-EIO, "source file shrank while being read");
    return 0;
}

void tfs_version_from_file(struct tfs_stat *st, uint64_t size,
                           int64_t mtime_ns, uint64_t ino, int64_t ctime_ns)
{
    snprintf(st->version, sizeof(st->version), "%llx-%llx-%llx-%llx",
             (unsigned long long)size, (unsigned long long)mtime_ns,
             (unsigned long long)ino, (unsigned long long)ctime_ns);
}

void tfs_store_count_skipped(struct tfs_store *st, uint64_t n)
{
    atomic_fetch_add(&st->n_skipped, n);
}

void tfs_list_page_cleanup(struct tfs_list_page *page)
{
    if (page == NULL)
        return;
    for (size_t i = 0; i < page->n_entries; i++)
        tfs_free(page->entries[i].key);
    for (size_t i = 0; i < page->n_prefixes; i++)
        tfs_free(page->prefixes[i]);
    tfs_free(page->entries);
    tfs_free(page->prefixes);
    tfs_free(page->next_token);
    memset(page, 0, sizeof(*page));
}

/* ---- dispatch ---- */

/* Count the call and, when it failed, the error. */
static int store_count(struct tfs_store *st, atomic_uint_fast64_t *ctr,
                       int rc)
{
    atomic_fetch_add(ctr, 1);
    if (rc < 0)
        atomic_fetch_add(&st->n_error, 1);
    return rc;
}

int tfs_store_stat(struct tfs_store *st, const char *key,
                   struct tfs_stat *out)
{
    int rc;

    assert(st != NULL && key != NULL && out != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = st->ops->stat ? st->ops->stat(st, key, out) : -ENOTSUP;
    return store_count(st, &st->n_stat, rc);
}

/* The ops table's read_ex, when its version has one. */
static bool store_has_read_ex(const struct tfs_store *st)
{
    return st->ops->version >= 2 && st->ops->read_ex != NULL;
}

int tfs_store_read_ex(struct tfs_store *st, const char *key, void *buf,
                      size_t len, uint64_t off, const char *if_version,
                      size_t *nread, struct tfs_read_info *info)
{
    unsigned hint = info->have & TFS_RINFO_WHOLE;
    const struct iovec *iov = info->iov;
    int iovcnt = info->iovcnt;
    const struct tfs_landing *land = info->land;
    size_t n = 0;
    int rc;

    assert(st != NULL && key != NULL && nread != NULL && info != NULL);
    assert(buf != NULL || len == 0 || iov != NULL);
    tfs_errdetail_clear();
    memset(info, 0, sizeof(*info));
    info->have = hint;
    info->iov = iov;
    info->iovcnt = iovcnt;
    info->land = land;
    rc = tfs_key_check(key);
    if (rc == 0 && st->ops->read == NULL && !store_has_read_ex(st))
        rc = -ENOTSUP;
    if (rc == 0 && iov != NULL && !tfs_store_can_scatter(st))
        rc = tfs_err(-ENOTSUP, "store '%s' cannot scatter a read",
                     st->ops->scheme);
    else if (rc == 0 && store_has_read_ex(st))
        rc = st->ops->read_ex(st, key, buf, len, off, if_version, &n, info);
    else if (rc == 0)
        rc = st->ops->read(st, key, buf, len, off, if_version, &n);
    if (rc == 0) {
        assert(n <= len);
        *nread = n;
        atomic_fetch_add(&st->read_bytes, n);
    }
    return store_count(st, &st->n_read, rc);
}

int tfs_store_read(struct tfs_store *st, const char *key, void *buf,
                   size_t len, uint64_t off, const char *if_version,
                   size_t *nread)
{
    struct tfs_read_info info = {0};

    return tfs_store_read_ex(st, key, buf, len, off, if_version, nread,
                             &info);
}

bool tfs_store_can_scatter(struct tfs_store *st)
{
    while (st != NULL && (st->ops->caps & TFS_SCAP_WRAPPER))
        st = tfs_store_next(st);
    return st != NULL && (st->ops->caps & TFS_SCAP_SCATTER) &&
           store_has_read_ex(st);
}

/* ---- end-to-end verification ---- */

/* A mismatch: counted on the layer the caller asked, detail set. */
static int store_mismatch(struct tfs_store *st, const char *key,
                          uint64_t off, size_t n, const char *what)
{
    atomic_fetch_add(&st->n_mismatch, 1);
    return tfs_err(TFS_ECORRUPT, "'%s' bytes %" PRIu64 "+%zu from the "
                   "store fail their end-to-end check (%s)", key, off, n,
                   what);
}

/* The first n bytes of the segments, in turn: fn(arg, p, len) for each
   piece; stops at the first nonzero return. */
static int store_iov_walk(const struct iovec *iov, int iovcnt, size_t n,
                          int (*fn)(void *arg, const void *p, size_t len),
                          void *arg)
{
    int rc = 0;

    for (int i = 0; i < iovcnt && n > 0 && rc == 0; i++) {
        size_t k = TFS_MIN(n, iov[i].iov_len);

        rc = fn(arg, iov[i].iov_base, k);
        n -= k;
    }
    return rc;
}

static int store_md5_piece(void *arg, const void *p, size_t len)
{
    return EVP_DigestUpdate(arg, p, len) == 1 ? 0 : -ENOMEM;
}

static int store_check_md5(struct tfs_store *st, const char *key,
                           const struct tfs_read_info *info,
                           const struct iovec *iov, int iovcnt, size_t n)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_md5(), NULL) == 1
                 ? store_iov_walk(iov, iovcnt, n, store_md5_piece, ctx)
                 : -ENOMEM;

    if (rc == 0 && (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 ||
                    md_len != sizeof(info->md5)))
        rc = -ENOMEM;
    EVP_MD_CTX_free(ctx);
    if (rc < 0)
        return tfs_err(-ENOMEM, "MD5 of '%s' failed", key);
    if (memcmp(md, info->md5, sizeof(info->md5)) != 0)
        return store_mismatch(st, key, 0, n, "MD5 differs from the ETag");
    return 0;
}

struct store_cmp {
    const unsigned char *again;         /* the second read, moving on */
};

static int store_cmp_piece(void *arg, const void *p, size_t len)
{
    struct store_cmp *c = arg;
    int d = memcmp(p, c->again, len);

    c->again += len;
    return d != 0;
}

/* Read [off, off+n) again into a scratch buffer and compare. */
static int store_check_reread(struct tfs_store *st, const char *key,
                              const struct iovec *iov, int iovcnt,
                              size_t n, uint64_t off, const char *if_version)
{
    size_t n2 = 0;
    void *again = n > 0 ? tfs_malloc(n) : NULL;
    struct store_cmp cmp = {again};
    int rc;

    if (n > 0 && again == NULL)
        return -ENOMEM;
    rc = tfs_store_read(st, key, again, n, off, if_version, &n2);
    if (rc == 0 && (n2 != n ||
                    store_iov_walk(iov, iovcnt, n, store_cmp_piece, &cmp)))
        rc = store_mismatch(st, key, off, n, "a second read differs");
    tfs_free(again);
    return rc;
}

/* A verified read into buf, or into iov when buf is NULL. */
static int store_read_verified(struct tfs_store *st, const char *key,
                               void *buf, const struct iovec *iov,
                               int iovcnt, size_t len, uint64_t off,
                               const char *if_version, bool whole_object,
                               const struct tfs_landing *land,
                               size_t *nread, enum tfs_verify_how *how)
{
    struct tfs_read_info info = {
        .have = whole_object && off == 0 ? TFS_RINFO_WHOLE : 0,
        .iov = buf == NULL ? iov : NULL,
        .iovcnt = buf == NULL ? iovcnt : 0,
        .land = land};
    struct iovec one = {buf, len};
    enum tfs_verify_how done = TFS_VERIFIED_NONE;
    bool whole;
    int rc;

    if (buf != NULL) {
        iov = &one;
        iovcnt = 1;
    }
    rc = tfs_store_read_ex(st, key, buf, len, off, if_version, nread,
                           &info);
    if (rc < 0 || st->verify == STORE_VERIFY_OFF)
        goto out;
    whole = off == 0 && (info.have & TFS_RINFO_SIZE) &&
            info.obj_size == *nread;
    if (whole && (info.have & TFS_RINFO_MD5)) {
        rc = store_check_md5(st, key, &info, iov, iovcnt, *nread);
        done = TFS_VERIFIED_MD5;
    } else if (st->verify == STORE_VERIFY_REREAD) {
        rc = store_check_reread(st, key, iov, iovcnt, *nread, off,
                                if_version);
        done = TFS_VERIFIED_REREAD;
    }
    if (rc == 0 && done != TFS_VERIFIED_NONE)
        atomic_fetch_add(&st->n_verified, 1);
out:
    if (how != NULL)
        *how = rc == 0 ? done : TFS_VERIFIED_NONE;
    return rc;
}

int tfs_store_read_verified(struct tfs_store *st, const char *key,
                            void *buf, size_t len, uint64_t off,
                            const char *if_version, bool whole_object,
                            size_t *nread, enum tfs_verify_how *how)
{
    return store_read_verified(st, key, buf, NULL, 0, len, off, if_version,
                               whole_object, NULL, nread, how);
}

int tfs_store_readv_verified(struct tfs_store *st, const char *key,
                             const struct iovec *iov, int iovcnt,
                             uint64_t off, const char *if_version,
                             bool whole_object,
                             const struct tfs_landing *land, size_t *nread,
                             enum tfs_verify_how *how)
{
    size_t len = 0;

    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (iovcnt == 1 && !tfs_store_can_scatter(st))      /* any store */
        return store_read_verified(st, key, iov[0].iov_base, NULL, 0, len,
                                   off, if_version, whole_object, land,
                                   nread, how);
    return store_read_verified(st, key, NULL, iov, iovcnt, len, off,
                               if_version, whole_object, land, nread, how);
}

int tfs_store_list(struct tfs_store *st, const char *prefix,
                   const char *delim, const char *token, size_t max_keys,
                   struct tfs_list_page *page)
{
    int rc;

    assert(st != NULL && page != NULL);
    tfs_errdetail_clear();
    memset(page, 0, sizeof(*page));
    if (prefix == NULL)
        prefix = "";
    if (delim != NULL && delim[0] == '\0')
        delim = NULL;
    if (token != NULL && token[0] == '\0')
        token = NULL;
    if (max_keys == 0 || max_keys > 1000)
        max_keys = 1000;
    if (prefix[0] == '/')
        return store_count(st, &st->n_list,
                           tfs_err(TFS_EBADKEY, "prefix '%s' starts with '/'",
                                   prefix));
    rc = st->ops->list ? st->ops->list(st, prefix, delim, token, max_keys,
                                       page)
                       : -ENOTSUP;
    if (rc < 0)
        tfs_list_page_cleanup(page);
    return store_count(st, &st->n_list, rc);
}

int tfs_store_put_source(struct tfs_store *st, const char *key,
                         const struct tfs_source *src, struct tfs_stat *out)
{
    int rc;

    assert(st != NULL && key != NULL && src != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = st->ops->put ? st->ops->put(st, key, src, out) : -ENOTSUP;
    if (rc == 0)
        atomic_fetch_add(&st->put_bytes, src->len);
    return store_count(st, &st->n_put, rc);
}

int tfs_store_put(struct tfs_store *st, const char *key, const void *buf,
                  size_t len, struct tfs_stat *out)
{
    static const char empty[1];
    struct tfs_source src = {
        .buf = buf != NULL ? buf : empty,
        .fd = -1,
        .len = len,
    };

    assert(buf != NULL || len == 0);
    return tfs_store_put_source(st, key, &src, out);
}

int tfs_store_put_file(struct tfs_store *st, const char *key,
                       const char *path, struct tfs_stat *out)
{
    struct tfs_source src = {.fd = -1};
    struct stat sb;
    int rc;

    src.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src.fd < 0)
        return tfs_err(-errno, "cannot open %s", path);
    if (fstat(src.fd, &sb) < 0) {
        rc = tfs_err(-errno, "cannot stat %s", path);
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = tfs_err(-EINVAL, "%s is not a regular file", path);
        goto out_close;
    }
    src.len = (uint64_t)sb.st_size;
    rc = tfs_store_put_source(st, key, &src, out);
out_close:
    close(src.fd);
    return rc;
}

int tfs_store_remove(struct tfs_store *st, const char *key)
{
    int rc;

    assert(st != NULL && key != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = st->ops->remove ? st->ops->remove(st, key) : -ENOTSUP;
    return store_count(st, &st->n_remove, rc);
}

int tfs_store_copy(struct tfs_store *st, const char *src, const char *dst)
{
    int rc;

    assert(st != NULL && src != NULL && dst != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(src);
    if (rc == 0)
        rc = tfs_key_check(dst);
    if (rc == 0)
        rc = st->ops->copy ? st->ops->copy(st, src, dst) : -ENOTSUP;
    return store_count(st, &st->n_copy, rc);
}

int tfs_store_rename(struct tfs_store *st, const char *src, const char *dst)
{
    int rc;

    assert(st != NULL && src != NULL && dst != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(src);
    if (rc == 0)
        rc = tfs_key_check(dst);
    if (rc == 0)
        rc = st->ops->rename ? st->ops->rename(st, src, dst) : -ENOTSUP;
    return store_count(st, &st->n_rename, rc);
}

int tfs_store_move(struct tfs_store *st, const char *src, const char *dst)
{
    int rc = tfs_store_rename(st, src, dst);

    if (rc != -ENOTSUP)
        return rc;
    rc = tfs_store_copy(st, src, dst);
    if (rc < 0)
        return rc;
    return tfs_store_remove(st, src);
}

/* ---- multipart uploads part by part ---- */

/* The table has the version 3 ops (the five come together). */
static bool store_has_mpu(const struct tfs_store *st)
{
    return st->ops->version >= 3 && st->ops->mpu_create != NULL;
}

/* Count a failure of an op that has no counter of its own. */
static int store_count_err(struct tfs_store *st, int rc)
{
    if (rc < 0)
        atomic_fetch_add(&st->n_error, 1);
    return rc;
}

uint64_t tfs_store_part_size(struct tfs_store *st)
{
    assert(st != NULL);
    if (st->ops->version < 3 || st->ops->part_size == NULL)
        return 0;
    return st->ops->part_size(st);
}

int tfs_store_mpu_create(struct tfs_store *st, const char *key,
                         char *upload_id)
{
    int rc;

    assert(st != NULL && key != NULL && upload_id != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = store_has_mpu(st) ? st->ops->mpu_create(st, key, upload_id)
                               : -ENOTSUP;
    return store_count_err(st, rc);
}

int tfs_store_mpu_part(struct tfs_store *st, const char *key,
                       const char *upload_id, unsigned part_no,
                       const struct tfs_source *src, char *etag)
{
    int rc;

    assert(st != NULL && key != NULL && upload_id != NULL && src != NULL &&
           etag != NULL && part_no > 0);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = store_has_mpu(st) ? st->ops->mpu_part(st, key, upload_id,
                                                   part_no, src, etag)
                               : -ENOTSUP;
    if (rc == 0)
        atomic_fetch_add(&st->put_bytes, src->len);
    return store_count_err(st, rc);
}

int tfs_store_mpu_complete(struct tfs_store *st, const char *key,
                           const char *upload_id,
                           const char (*etags)[TFS_VERSION_MAX],
                           unsigned n_parts, struct tfs_stat *out)
{
    int rc;

    assert(st != NULL && key != NULL && upload_id != NULL &&
           etags != NULL && n_parts > 0);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = store_has_mpu(st) ? st->ops->mpu_complete(st, key, upload_id,
                                                       etags, n_parts, out)
                               : -ENOTSUP;
    return store_count(st, &st->n_put, rc);
}

int tfs_store_mpu_abort(struct tfs_store *st, const char *key,
                        const char *upload_id)
{
    int rc;

    assert(st != NULL && key != NULL && upload_id != NULL);
    tfs_errdetail_clear();
    rc = tfs_key_check(key);
    if (rc == 0)
        rc = store_has_mpu(st) ? st->ops->mpu_abort(st, key, upload_id)
                               : -ENOTSUP;
    return store_count_err(st, rc);
}

int tfs_store_list_all(struct tfs_store *st, const char *prefix,
                       const char *delim, tfs_list_fn *fn, void *arg)
{
    struct tfs_list_page page;
    char *token = NULL;
    int rc;

    do {
        rc = tfs_store_list(st, prefix, delim, token, 1000, &page);
        tfs_free(token);
        token = NULL;
        if (rc < 0)
            break;
        rc = fn(arg, &page);
        token = page.next_token;
        page.next_token = NULL;
        tfs_list_page_cleanup(&page);
    } while (rc == 0 && token != NULL);
    tfs_free(token);
    return rc;
}
