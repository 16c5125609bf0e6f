/* SPDX-License-Identifier: MIT */
/*
 * URI splitting and option bags (util.h).
 *
 * A store URI is "scheme[+scheme...]://location[?query]" or a plain path.
 * The query is a bag of "name=value" pairs shared by every layer of the
 * chain: each layer takes the names it knows, and whatever is left over
 * at the end is reported as an unknown option.
 */
#include <ctype.h>
#include <errno.h>
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
