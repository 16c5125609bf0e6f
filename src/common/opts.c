/* SPDX-License-Identifier: MIT */
/*
 * URI splitting and option bags (util.h).
 *
 * A store URI is "scheme[+scheme...]://location[?query]" or a plain path.
 * The query is a bag of "name=value" pairs shared by every layer of the
 * chain: each layer takes the names it knows, and whatever is left over
 * at the end is reported as an unknown option.
 *
 * Option tables (struct tfs_opt_spec) are what the name/value setters of
 * the public API and the retry layer's URI options are made of: one
 * parser, one range check and one error detail per kind of value.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

void tfs_uri_cleanup(struct tfs_uri *u)
{
    for (int i = 0; i < u->n_schemes; i++)
        tfs_free(u->schemes[i]);
    tfs_free(u->location);
    tfs_free(u->query);
    memset(u, 0, sizeof(*u));
}

/* Split "a+b+c" (len bytes) into lowercase scheme names. */
static int uri_split_schemes(const char *s, size_t len, struct tfs_uri *u)
{
    size_t start = 0;

    for (size_t i = 0; i <= len; i++) {
        char *name;

        if (i < len && s[i] != '+') {
            unsigned char c = (unsigned char)s[i];
            if (!isalnum(c) && c != '-')
                return tfs_err(TFS_EURI, "bad character in URI scheme");
            continue;
        }
        if (i == start)
            return tfs_err(TFS_EURI, "empty URI scheme");
        if (u->n_schemes == TFS_URI_MAX_LAYERS)
            return tfs_err(TFS_EURI, "too many URI layers");
        name = tfs_strndup(s + start, i - start);
        if (name == NULL)
            return -ENOMEM;
        for (char *p = name; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        u->schemes[u->n_schemes++] = name;
        start = i + 1;
    }
    return 0;
}

/* Fill location and query from rest ("loc?query"). */
static int uri_split_rest(const char *rest, bool decode, struct tfs_uri *u)
{
    const char *q = strchr(rest, '?');
    size_t loc_len = q ? (size_t)(q - rest) : strlen(rest);
    int rc;

    u->location = tfs_strndup(rest, loc_len);
    if (u->location == NULL)
        return -ENOMEM;
    if (q != NULL) {
        u->query = tfs_strdup(q + 1);
        if (u->query == NULL)
            return -ENOMEM;
    }
    if (!decode)
        return 0;
    rc = tfs_pct_decode(u->location);
    if (rc < 0)
        return tfs_err(rc, "bad %%-escape in URI location");
    return 0;
}

int tfs_uri_parse(const char *s, struct tfs_uri *out)
{
    const char *sep = strstr(s, "://");
    const char *colon = strchr(s, ':');
    const char *slash = strchr(s, '/');
    int rc;

    memset(out, 0, sizeof(*out));
    if (*s == '\0')
        return tfs_err(TFS_EURI, "empty URI");
    /* A plain path: no "://", or a ':' that comes after a '/'. */
    if (sep == NULL || colon != sep || (slash != NULL && slash < sep)) {
        out->schemes[0] = tfs_strdup("file");
        out->n_schemes = out->schemes[0] ? 1 : 0;
        out->location = tfs_strdup(s);
        if (out->n_schemes == 0 || out->location == NULL) {
            tfs_uri_cleanup(out);
            return -ENOMEM;
        }
        return 0;
    }
    rc = uri_split_schemes(s, (size_t)(sep - s), out);
    if (rc == 0)
        rc = uri_split_rest(sep + 3, true, out);
    if (rc < 0)
        tfs_uri_cleanup(out);
    return rc;
}

void tfs_opts_cleanup(struct tfs_opts *o)
{
    for (size_t i = 0; i < o->n; i++) {
        tfs_free(o->v[i].name);
        tfs_free(o->v[i].value);
    }
    tfs_free(o->v);
    o->v = NULL;
    o->n = 0;
}

static struct tfs_opt *opts_find(const struct tfs_opts *o, const char *name)
{
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->v[i].name, name) == 0)
            return &o->v[i];
    }
    return NULL;
}

/* Add or replace name=value; takes ownership of both on success. */
static int opts_set(struct tfs_opts *o, char *name, char *value)
{
    struct tfs_opt *old = opts_find(o, name);
    struct tfs_opt *v;

    if (old != NULL) {
        tfs_free(name);
        tfs_free(old->value);
        old->value = value;
        return 0;
    }
    v = tfs_realloc(o->v, (o->n + 1) * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    o->v = v;
    v[o->n].name = name;
    v[o->n].value = value;
    v[o->n].used = false;
    o->n++;
    return 0;
}

/* Parse one "name[=value]" item of len bytes. */
static int opts_parse_item(struct tfs_opts *o, const char *s, size_t len)
{
    const char *eq = memchr(s, '=', len);
    size_t name_len = eq ? (size_t)(eq - s) : len;
    char *name = tfs_strndup(s, name_len);
    char *value = eq ? tfs_strndup(eq + 1, len - name_len - 1)
                     : tfs_strdup("");
    int rc = -ENOMEM;

    if (name == NULL || value == NULL)
        goto err_free;
    rc = tfs_pct_decode(name);
    if (rc == 0)
        rc = tfs_pct_decode(value);
    if (rc < 0 || name[0] == '\0') {
        rc = tfs_err(TFS_EOPTION, "malformed option '%.*s'",
                     (int)TFS_MIN(len, 64), s);
        goto err_free;
    }
    rc = opts_set(o, name, value);
    if (rc == 0)
        return 0;
err_free:
    tfs_free(name);
    tfs_free(value);
    return rc;
}

int tfs_opts_parse(struct tfs_opts *o, const char *query)
{
    const char *p = query;

    if (query == NULL)
        return 0;
    while (*p != '\0') {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        int rc;

        if (len > 0) {
            rc = opts_parse_item(o, p, len);
            if (rc < 0)
                return rc;
        }
        p += len;
        if (*p == '&')
            p++;
    }
    return 0;
}

const char *tfs_opts_take(struct tfs_opts *o, const char *name)
{
    struct tfs_opt *opt = opts_find(o, name);

    if (opt == NULL)
        return NULL;
    opt->used = true;
    return opt->value;
}

const char *tfs_opts_unused(const struct tfs_opts *o)
{
    for (size_t i = 0; i < o->n; i++) {
        if (!o->v[i].used)
            return o->v[i].name;
    }
    return NULL;
}

/* ---- option tables ---- */

/* o's bounds as whole numbers; hi is capped at what the field holds. */
static void opt_bounds(const struct tfs_opt_spec *o, uint64_t *lo,
                       uint64_t *hi)
{
    uint64_t cap = UINT64_MAX;

    if (o->kind == TFS_OPT_UINT)
        cap = UINT_MAX;
    else if (o->kind == TFS_OPT_MS_NS)
        cap = UINT64_MAX / 1000000u;
    *lo = o->min > 0 ? (uint64_t)o->min : 0;
    *hi = o->max >= TFS_OPT_NOMAX ? cap : TFS_MIN((uint64_t)o->max, cap);
}

/* A whole number of o's kind, checked against o's range. */
static int opt_whole(const struct tfs_opt_spec *o, const char *value,
                     uint64_t *out)
{
    uint64_t lo;
    uint64_t hi;
    uint64_t v;
    int rc;

    opt_bounds(o, &lo, &hi);
    rc = o->kind == TFS_OPT_SIZE ? tfs_parse_size(value, &v)
                                 : tfs_parse_u64(value, &v);
    if (rc < 0 || v < lo || v > hi)
        return TFS_EOPTION;
    *out = v;
    return 0;
}

/* A finite number within o's range (and, as ns, within a uint64_t). */
static int opt_real(const struct tfs_opt_spec *o, const char *value,
                    double *out)
{
    double v;

    if (tfs_parse_double(value, &v) < 0 || v < o->min || v > o->max)
        return TFS_EOPTION;
    if (o->kind == TFS_OPT_SEC_NS && (v < 0 || v >= 0x1p64 / 1e9))
        return TFS_EOPTION;
    if (o->kind == TFS_OPT_SEC_MS && (v < 0 || v >= 0x1p64 / 1e3))
        return TFS_EOPTION;
    *out = v;
    return 0;
}

static int opt_store_str(const struct tfs_opt_spec *o, char **field,
                         const char *value)
{
    size_t len = strlen(value);
    char *copy;

    if ((double)len < o->min || (double)len > o->max)
        return TFS_EOPTION;
    copy = tfs_strdup(value);
    if (copy == NULL)
        return -ENOMEM;
    tfs_free(*field);
    *field = copy;
    return 0;
}

int tfs_opt_store(const struct tfs_opt_spec *o, void *base,
                  const char *value)
{
    void *field = (char *)base + o->offset;
    uint64_t v = 0;
    double d = 0;
    int rc;

    switch (o->kind) {
    case TFS_OPT_BOOL:
        return tfs_parse_bool(value, field) < 0 ? TFS_EOPTION : 0;
    case TFS_OPT_STR:
        return opt_store_str(o, field, value);
    case TFS_OPT_DOUBLE:
    case TFS_OPT_SEC_NS:
    case TFS_OPT_SEC_MS:
        rc = opt_real(o, value, &d);
        if (rc == 0 && o->kind == TFS_OPT_DOUBLE)
            *(double *)field = d;
        else if (rc == 0 && o->kind == TFS_OPT_SEC_NS)
            *(uint64_t *)field = (uint64_t)(d * 1e9);
        else if (rc == 0)
            *(uint64_t *)field = (uint64_t)(d * 1e3 + 0.5);
        return rc;
    case TFS_OPT_CUSTOM:
        return TFS_EOPTION;
    default:
        break;
    }
    rc = opt_whole(o, value, &v);
    if (rc < 0)
        return rc;
    if (o->kind == TFS_OPT_UINT)
        *(unsigned *)field = (unsigned)v;
    else
        *(uint64_t *)field = o->kind == TFS_OPT_MS_NS ? v * 1000000u : v;
    return 0;
}

/* A whole bound as written: sizes with the largest exact suffix ("64K"). */
static void opt_fmt_whole(const struct tfs_opt_spec *o, uint64_t v,
                          char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (o->kind == TFS_OPT_SIZE && v >= 1024 && v % 1024 == 0 && u < 3) {
        v /= 1024;
        u++;
    }
    if (u >= 0)
        snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* o's range as written, into lo and hi; false when it has no bound. */
static bool opt_fmt_range(const struct tfs_opt_spec *o, char *lo, char *hi,
                          size_t len)
{
    uint64_t a;
    uint64_t b;

    if (o->kind == TFS_OPT_DOUBLE || o->kind == TFS_OPT_SEC_NS ||
        o->kind == TFS_OPT_SEC_MS) {
        snprintf(lo, len, "%g", o->min);
        snprintf(hi, len, "%g", o->max);
        return o->max < TFS_OPT_NOMAX;
    }
    opt_bounds(o, &a, &b);
    opt_fmt_whole(o, a, lo, len);
    opt_fmt_whole(o, b, hi, len);
    return b < UINT64_MAX;
}

/* What a value of o must be: "a size in 64K..64M". */
static void opt_describe(const struct tfs_opt_spec *o, char *buf,
                         size_t len)
{
    static const char *nouns[] = {
        [TFS_OPT_UINT] = "a whole number", [TFS_OPT_U64] = "a whole number",
        [TFS_OPT_SIZE] = "a size",         [TFS_OPT_MS] = "milliseconds",
        [TFS_OPT_MS_NS] = "milliseconds",  [TFS_OPT_SEC_NS] = "seconds",
        [TFS_OPT_SEC_MS] = "seconds",
        [TFS_OPT_DOUBLE] = "a number",
    };
    char lo[32];
    char hi[32];
    bool bounded;

    if (o->expect != NULL || o->kind == TFS_OPT_CUSTOM) {
        snprintf(buf, len, "%s", o->expect ? o->expect : "a valid value");
        return;
    }
    if (o->kind == TFS_OPT_BOOL || o->kind == TFS_OPT_STR) {
        snprintf(buf, len, "%s", o->kind == TFS_OPT_BOOL ? "0 or 1"
                                 : "a non-empty string");
        return;
    }
    bounded = opt_fmt_range(o, lo, hi, sizeof(lo));
    if (bounded)
        snprintf(buf, len, "%s in %s..%s", nouns[o->kind], lo, hi);
    else if (o->min > 0)
        snprintf(buf, len, "%s of at least %s", nouns[o->kind], lo);
    else
        snprintf(buf, len, "%s%s", nouns[o->kind],
                 o->kind == TFS_OPT_SIZE ? " such as 8M" : "");
}

int tfs_opt_apply(const char *what, const struct tfs_opt_spec *t, size_t n,
                  void *base, const char *name, const char *value)
{
    const struct tfs_opt_spec *o = NULL;
    char expect[96];
    int rc;

    for (size_t i = 0; name != NULL && i < n && o == NULL; i++) {
        if (strcmp(t[i].name, name) == 0)
            o = &t[i];
    }
    if (o == NULL)
        return tfs_err(TFS_EOPTION, "unknown %s option '%.64s'", what,
                       name ? name : "(null)");
    if (value == NULL)
        return tfs_err(TFS_EOPTION, "%s option %s: no value", what, name);
    rc = o->set != NULL ? o->set(o, base, value)
                        : tfs_opt_store(o, base, value);
    if (rc != TFS_EOPTION)
        return rc;
    opt_describe(o, expect, sizeof(expect));
    return tfs_err(TFS_EOPTION, "%s option %s=%.100s: expected %s", what,
                   name, value, expect);
}
