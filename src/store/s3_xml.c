/* SPDX-License-Identifier: MIT */
/*
 * Parsers for the XML bodies S3 answers with, on expat.
 *
 * Every body comes off the network, so every parser is defensive: the
 * body is capped (S3_XML_MAX), each text field is capped (XML_TEXT_MAX),
 * a DOCTYPE is refused outright (S3 never sends one, and without a DTD
 * there are no entity expansion attacks), elements nested deeper than we
 * look are skipped, and expat allocates through tfs_malloc.
 *
 * One small walker (xml_run) tracks the element path and the text of the
 * innermost element, and calls a parser-specific function at each end
 * tag.  On top of it: ListObjectsV2, Error, and the one-element results of
 * multipart uploads and copies (which may hold an <Error> in a 200).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <expat.h>

#include "common/bytes.h"
#include "store/s3_int.h"

#define XML_DEPTH_MAX 4                 /* deeper elements are skipped */
#define XML_NAME_MAX  40                /* longer names never match */
#define XML_TEXT_MAX  (16u << 10)       /* bytes of one text field */

struct xml_ctx;

/* Called at each end tag up to XML_DEPTH_MAX; returns 0 or an error. */
typedef int xml_end_fn(struct xml_ctx *x, const char *text, size_t len);

struct xml_ctx {
    XML_Parser     xp;
    int            depth;               /* of the open element; root = 1 */
    char           names[XML_DEPTH_MAX + 1][XML_NAME_MAX]; /* [1] = root */
    struct tfs_buf text;                /* text of the innermost element */
    int            rc;                  /* first error; stops the parse */
    enum XML_Error xerr;                /* expat's error, when it failed */
    xml_end_fn    *on_end;
    void          *arg;
};

/* ---- the walker ---- */

static void xml_fail(struct xml_ctx *x, int rc)
{
    if (x->rc == 0)
        x->rc = rc;
    XML_StopParser(x->xp, XML_FALSE);
}

/* Is the open element at depth d named name? */
static bool xml_is(const struct xml_ctx *x, int d, const char *name)
{
    return d >= 1 && d <= x->depth && d <= XML_DEPTH_MAX &&
           strcmp(x->names[d], name) == 0;
}

/* Was the root element named name?  (Also after the parse.) */
static bool xml_root_is(const struct xml_ctx *x, const char *name)
{
    return strcmp(x->names[1], name) == 0;
}

static void XMLCALL xml_start(void *arg, const XML_Char *name,
                             const XML_Char **attrs)
{
    struct xml_ctx *x = arg;
    const char *colon = strchr(name, ':');
    size_t len;

    (void)attrs;
    x->depth++;
    tfs_buf_reset(&x->text);
    if (x->depth > XML_DEPTH_MAX)
        return;
    if (colon != NULL)
        name = colon + 1;               /* "s3:Key" is "Key" */
    len = strlen(name);
    if (len >= XML_NAME_MAX)
        len = 0;                        /* matches nothing we look for */
    memcpy(x->names[x->depth], name, len);
    x->names[x->depth][len] = '\0';
}

static void XMLCALL xml_end(void *arg, const XML_Char *name)
{
    struct xml_ctx *x = arg;
    int rc = 0;

    (void)name;
    if (x->depth <= XML_DEPTH_MAX)
        rc = x->on_end(x, tfs_buf_str(&x->text), x->text.len);
    if (rc < 0)
        xml_fail(x, rc);
    tfs_buf_reset(&x->text);
    x->depth--;
}

static void XMLCALL xml_chars(void *arg, const XML_Char *s, int len)
{
    struct xml_ctx *x = arg;
    int rc;

    if (x->depth > XML_DEPTH_MAX)
        return;
    rc = tfs_buf_append(&x->text, s, (size_t)len);
    if (rc < 0)
        xml_fail(x, rc);
}

static void XMLCALL xml_doctype(void *arg, const XML_Char *name,
                               const XML_Char *sysid, const XML_Char *pubid,
                               int has_internal_subset)
{
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)has_internal_subset;
    xml_fail(arg, TFS_EPROTO);
}

static const XML_Memory_Handling_Suite xml_mem = {
    .malloc_fcn = tfs_malloc,
    .realloc_fcn = tfs_realloc,
    .free_fcn = tfs_free,
};

/* Parse body with on_end(arg) at each end tag; x->names[1] is the root. */
static int xml_run(struct xml_ctx *x, const char *body, size_t len,
                   xml_end_fn *on_end, void *arg)
{
    enum XML_Status st;

    memset(x, 0, sizeof(*x));
    if (len > 3 * (size_t)S3_XML_MAX)  /* callers cap; this is a backstop */
        return TFS_ETOOBIG;
    x->on_end = on_end;
    x->arg = arg;
    tfs_buf_init(&x->text, XML_TEXT_MAX);
    x->xp = XML_ParserCreate_MM(NULL, &xml_mem, NULL);
    if (x->xp == NULL)
        return -ENOMEM;
    XML_SetUserData(x->xp, x);
    XML_SetElementHandler(x->xp, xml_start, xml_end);
    XML_SetCharacterDataHandler(x->xp, xml_chars);
    XML_SetStartDoctypeDeclHandler(x->xp, xml_doctype);
    st = XML_Parse(x->xp, body, (int)len, XML_TRUE);
    x->xerr = st != XML_STATUS_OK ? XML_GetErrorCode(x->xp) : XML_ERROR_NONE;
    if (st != XML_STATUS_OK && x->rc == 0)
        x->rc = x->xerr == XML_ERROR_NO_MEMORY ? -ENOMEM : TFS_EPROTO;
    XML_ParserFree(x->xp);
    tfs_buf_cleanup(&x->text);
    return x->rc;
}

/* ---- field helpers ---- */

/* Copy an ETag without its quotes; TFS_ETOOBIG when it does not fit. */
static int xml_etag(char out[TFS_VERSION_MAX], const char *s, size_t len)
{
    if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
        s++;
        len -= 2;
    }
    if (len >= TFS_VERSION_MAX)
        return TFS_ETOOBIG;
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

/* Copy s into out[size], truncated. */
static void xml_copy(char *out, size_t size, const char *s, size_t len)
{
    len = TFS_MIN(len, size - 1);
    memcpy(out, s, len);
    out[len] = '\0';
}

int tfs_s3_parse_iso8601(const char *s, int64_t *out_ns)
{
    struct tm tm = {0};
    int64_t frac_ns = 0;
    int64_t scale = 100000000;
    int n = 0;
    time_t t;

    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
               &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 ||
        n != 19)
        return TFS_EPROTO;
    s += n;
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++, scale /= 10)
            frac_ns += (*s - '0') * scale;
    }
    if (strcmp(s, "Z") != 0 && strcmp(s, "+00:00") != 0)
        return TFS_EPROTO;
    /* int64 nanoseconds end in 2262: refuse years we cannot hold */
    if (tm.tm_year < 1900 || tm.tm_year > 2200 ||
        tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60)
        return TFS_EPROTO;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    t = timegm(&tm);
    *out_ns = (int64_t)t * 1000000000 + frac_ns;
    return 0;
}

/* ---- ListObjectsV2 ---- */

struct xml_list {
    struct tfs_list_page *page;
    size_t                cap_entries;
    size_t                cap_prefixes;
    struct tfs_list_entry cur;          /* the <Contents> being read */
    bool                  truncated;
    bool                  url;          /* EncodingType=url */
    size_t                skipped;      /* names with NUL, left out */
};

static int xml_list_push_entry(struct xml_list *l)
{
    struct tfs_list_page *pg = l->page;

    if (l->cur.key == NULL)
        return TFS_EPROTO;              /* <Contents> without <Key> */
    if (pg->n_entries == l->cap_entries) {
        size_t cap = l->cap_entries ? l->cap_entries * 2 : 64;
        struct tfs_list_entry *v = tfs_realloc(pg->entries,
                                               cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        pg->entries = v;
        l->cap_entries = cap;
    }
    pg->entries[pg->n_entries++] = l->cur;
    memset(&l->cur, 0, sizeof(l->cur));
    return 0;
}

static int xml_list_push_prefix(struct xml_list *l, const char *s,
                                size_t len)
{
    struct tfs_list_page *pg = l->page;
    char *p;

    if (pg->n_prefixes == l->cap_prefixes) {
        size_t cap = l->cap_prefixes ? l->cap_prefixes * 2 : 16;
        char **v = tfs_realloc(pg->prefixes, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        pg->prefixes = v;
        l->cap_prefixes = cap;
    }
    p = tfs_strndup(s, len);
    if (p == NULL)
        return -ENOMEM;
    pg->prefixes[pg->n_prefixes++] = p;
    return 0;
}

/* A field of <Contents>. */
static int xml_list_contents(struct xml_list *l, const char *name,
                             const char *text, size_t len)
{
    int rc;

    if (strcmp(name, "Key") == 0) {
        tfs_free(l->cur.key);
        l->cur.key = tfs_strndup(text, len);
        return l->cur.key != NULL ? 0 : -ENOMEM;
    }
    if (strcmp(name, "Size") == 0)
        return tfs_parse_u64(text, &l->cur.st.size) < 0 ? TFS_EPROTO : 0;
    if (strcmp(name, "ETag") == 0)
        return xml_etag(l->cur.st.version, text, len);
    if (strcmp(name, "LastModified") != 0)
        return 0;
    rc = tfs_s3_parse_iso8601(text, &l->cur.st.mtime_ns);
    /* whole seconds, as HEAD's Last-Modified: stat and list agree */
    l->cur.st.mtime_ns -= l->cur.st.mtime_ns % 1000000000;
    return rc;
}

static int xml_list_end(struct xml_ctx *x, const char *text, size_t len)
{
    struct xml_list *l = x->arg;
    const char *name = x->names[x->depth];

    if (!xml_is(x, 1, "ListBucketResult"))
        return TFS_EPROTO;
    if (x->depth == 2 && strcmp(name, "Contents") == 0)
        return xml_list_push_entry(l);
    if (x->depth == 2 && strcmp(name, "IsTruncated") == 0)
        l->truncated = strcmp(text, "true") == 0;
    if (x->depth == 2 && strcmp(name, "EncodingType") == 0)
        l->url = strcasecmp(text, "url") == 0;
    if (x->depth == 2 && strcmp(name, "NextContinuationToken") == 0) {
        tfs_free(l->page->next_token);
        l->page->next_token = tfs_strndup(text, len);
        return l->page->next_token != NULL ? 0 : -ENOMEM;
    }
    if (x->depth == 3 && xml_is(x, 2, "Contents"))
        return xml_list_contents(l, name, text, len);
    if (x->depth == 3 && xml_is(x, 2, "CommonPrefixes") &&
        strcmp(name, "Prefix") == 0)
        return xml_list_push_prefix(l, text, len);
    return 0;
}

/*
 * %-decode s in place, '+' being a space (S3's form encoding).  1 (s
 * unchanged) when s holds "%00": a key no C string can name, which the
 * caller leaves out and counts rather than fail the page.
 */
static int xml_url_decode(char *s)
{
    if (strstr(s, "%00") != NULL)
        return 1;
    for (char *c = s; *c != '\0'; c++) {
        if (*c == '+')
            *c = ' ';
    }
    return tfs_pct_decode(s) < 0 ? TFS_EPROTO : 0;
}

/*
 * Decode (when url) and strip the store root from *s in place; *keep is
 * false for a name equal to the root, and for one holding NUL (counted in
 * *skipped).  TFS_EPROTO when *s is outside the root.
 */
static int xml_list_fix(char *s, bool url, const char *strip, bool *keep,
                        size_t *skipped)
{
    size_t n = strlen(strip);
    int rc = url ? xml_url_decode(s) : 0;

    if (rc == 1) {
        (*skipped)++;
        *keep = false;
        return 0;
    }
    if (rc < 0)
        return rc;
    if (strncmp(s, strip, n) != 0)
        return TFS_EPROTO;
    memmove(s, s + n, strlen(s + n) + 1);
    *keep = s[0] != '\0';
    return 0;
}

/* Decode and strip every key; drop (and free) those equal to the root. */
static int xml_list_fix_entries(struct tfs_list_page *pg, bool url,
                                const char *strip, size_t *skipped)
{
    size_t w = 0;
    int rc = 0;

    for (size_t i = 0; i < pg->n_entries; i++) {
        bool keep = false;

        if (rc == 0)
            rc = xml_list_fix(pg->entries[i].key, url, strip, &keep,
                              skipped);
        if (keep)
            pg->entries[w++] = pg->entries[i];
        else
            tfs_free(pg->entries[i].key);
    }
    pg->n_entries = w;
    return rc;
}

static int xml_list_fix_prefixes(struct tfs_list_page *pg, bool url,
                                 const char *strip, size_t *skipped)
{
    size_t w = 0;
    int rc = 0;

    for (size_t i = 0; i < pg->n_prefixes; i++) {
        bool keep = false;

        if (rc == 0)
            rc = xml_list_fix(pg->prefixes[i], url, strip, &keep,
                              skipped);
        if (keep)
            pg->prefixes[w++] = pg->prefixes[i];
        else
            tfs_free(pg->prefixes[i]);
    }
    pg->n_prefixes = w;
    return rc;
}

static int xml_list_finish(struct xml_list *l, const char *strip)
{
    struct tfs_list_page *pg = l->page;
    int rc = xml_list_fix_entries(pg, l->url, strip, &l->skipped);

    if (rc == 0)
        rc = xml_list_fix_prefixes(pg, l->url, strip, &l->skipped);
    if (rc == 0 && l->truncated && pg->next_token == NULL)
        rc = TFS_EPROTO;                /* truncated, but no way on */
    if (rc == 0 && !l->truncated) {
        tfs_free(pg->next_token);
        pg->next_token = NULL;
    }
    return rc;
}

/* One parse of a ListObjectsV2 body; page is zeroed on failure. */
static int xml_list_once(const char *body, size_t len, const char *strip,
                         struct tfs_list_page *page, enum XML_Error *xerr,
                         size_t *skipped)
{
    struct xml_list l = {.page = page};
    struct xml_ctx x;
    int rc;

    memset(page, 0, sizeof(*page));
    rc = xml_run(&x, body, len, xml_list_end, &l);
    *xerr = x.xerr;
    if (rc == 0 && !xml_root_is(&x, "ListBucketResult"))
        rc = TFS_EPROTO;
    if (rc == 0)
        rc = xml_list_finish(&l, strip);
    tfs_free(l.cur.key);
    *skipped = rc == 0 ? l.skipped : 0;
    if (rc < 0)
        tfs_list_page_cleanup(page);
    return rc;
}

/*
 * RGW quirk: even with encoding-type=url it writes the continuation
 * token (its last key, in clear) and echoed prefixes unencoded, and a
 * control character of a key as a character reference ("&#x01;") that
 * XML 1.0 forbids, so expat refuses the page.  For a second parse, each
 * such reference becomes one to the private-use code point U+10FF00+c
 * (which xml_unfix_refs maps back in the token); a key that really holds
 * one of those 32 code points would be misread, a risk we accept.
 */
/* The value of a character reference "&#xH;" / "&#D;" at r (n bytes
 * left) and its length in *used; 0 when r holds none. */
static unsigned long xml_char_ref(const char *r, size_t n, size_t *used)
{
    bool hex = n > 2 && r[2] == 'x';
    size_t start = hex ? 3 : 2;
    unsigned long c = 0;
    size_t i = start;

    if (n < 4 || r[0] != '&' || r[1] != '#')
        return 0;
    for (; i < n && i < start + 6; i++) {
        char ch = r[i];
        int d = hex ? tfs_hexval(ch) : ch >= '0' && ch <= '9' ? ch - '0' : -1;

        if (d < 0)
            break;
        c = c * (hex ? 16 : 10) + (unsigned long)d;
    }
    if (i == start || i >= n || r[i] != ';')
        return 0;
    *used = i + 1;
    return c;
}

static char *xml_fix_refs(const char *body, size_t len, size_t *out_len)
{
    char *out = tfs_malloc(3 * len + 1);   /* "&#1;" grows to 10 bytes */
    size_t w = 0;

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        size_t used = 0;
        unsigned long c = xml_char_ref(body + i, len - i, &used);

        if (c >= 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            w += (size_t)snprintf(out + w, 11, "&#x10FF%02lX;", c);
            i += used - 1;
            continue;
        }
        out[w++] = body[i];
    }
    out[w] = '\0';
    *out_len = w;
    return out;
}

/* Turn U+10FF00+c (UTF-8 F4 8F BC 80+c) back into c, in place. */
static void xml_unfix_refs(char *s)
{
    char *w = s;

    for (const char *r = s; *r != '\0'; r++) {
        if ((unsigned char)r[0] == 0xF4 && (unsigned char)r[1] == 0x8F &&
            (unsigned char)r[2] == 0xBC && (unsigned char)r[3] >= 0x80 &&
            (unsigned char)r[3] < 0xA0) {
            *w++ = (char)((unsigned char)r[3] - 0x80);
            r += 3;
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
}

int tfs_s3_xml_parse_list(const char *body, size_t len, const char *strip,
                          struct tfs_list_page *page)
{
    size_t skipped;

    return tfs_s3_xml_parse_list_ex(body, len, strip, page, &skipped);
}

int tfs_s3_xml_parse_list_ex(const char *body, size_t len, const char *strip,
                             struct tfs_list_page *page, size_t *skipped)
{
    enum XML_Error xerr;
    size_t fixed_len;
    char *fixed;
    int rc;

    *skipped = 0;
    if (len > S3_XML_MAX) {
        memset(page, 0, sizeof(*page));
        return TFS_ETOOBIG;
    }
    rc = xml_list_once(body, len, strip, page, &xerr, skipped);
    if (rc != TFS_EPROTO || xerr != XML_ERROR_BAD_CHAR_REF)
        return rc;
    fixed = xml_fix_refs(body, len, &fixed_len);
    if (fixed == NULL)
        return -ENOMEM;
    rc = xml_list_once(fixed, fixed_len, strip, page, &xerr, skipped);
    tfs_free(fixed);
    if (rc == 0 && page->next_token != NULL)
        xml_unfix_refs(page->next_token);
    return rc;
}

/* ---- <Error> and the one-element results ---- */

struct xml_result {
    const char       *root;             /* the root expected on success */
    struct s3_result *out;
};

/* Code and Message of an <Error> at depth 2. */
static void xml_error_field(struct xml_ctx *x, struct s3_error *e,
                            const char *text, size_t len)
{
    if (x->depth != 2 || !xml_is(x, 1, "Error"))
        return;
    if (strcmp(x->names[2], "Code") == 0)
        xml_copy(e->code, sizeof(e->code), text, len);
    else if (strcmp(x->names[2], "Message") == 0)
        xml_copy(e->message, sizeof(e->message), text, len);
}

static int xml_error_end(struct xml_ctx *x, const char *text, size_t len)
{
    if (!xml_is(x, 1, "Error"))
        return TFS_EPROTO;
    xml_error_field(x, x->arg, text, len);
    return 0;
}

int tfs_s3_xml_parse_error(const char *body, size_t len,
                           struct s3_error *out)
{
    struct xml_ctx x;
    int rc;

    memset(out, 0, sizeof(*out));
    if (len > S3_XML_MAX)
        return TFS_ETOOBIG;
    rc = xml_run(&x, body, len, xml_error_end, out);
    if (rc < 0)
        memset(out, 0, sizeof(*out));
    return rc;
}

static int xml_result_end(struct xml_ctx *x, const char *text, size_t len)
{
    struct xml_result *r = x->arg;
    const char *name = x->names[2];

    if (xml_is(x, 1, "Error")) {
        xml_error_field(x, &r->out->err, text, len);
        return 0;
    }
    if (!xml_is(x, 1, r->root))
        return TFS_EPROTO;
    if (x->depth != 2)
        return 0;
    if (strcmp(name, "ETag") == 0)
        return xml_etag(r->out->etag, text, len);
    if (strcmp(name, "LastModified") == 0)
        return tfs_s3_parse_iso8601(text, &r->out->mtime_ns);
    if (strcmp(name, "UploadId") == 0) {
        if (len >= sizeof(r->out->upload_id))
            return TFS_ETOOBIG;
        xml_copy(r->out->upload_id, sizeof(r->out->upload_id), text, len);
    }
    return 0;
}

int tfs_s3_xml_parse_result(const char *body, size_t len, const char *root,
                            struct s3_result *out)
{
    struct xml_result r = {.root = root, .out = out};
    struct xml_ctx x;
    int rc;

    memset(out, 0, sizeof(*out));
    if (len > S3_XML_MAX)
        return TFS_ETOOBIG;
    rc = xml_run(&x, body, len, xml_result_end, &r);
    if (rc == 0)
        out->is_error = xml_root_is(&x, "Error");
    if (rc < 0)
        memset(out, 0, sizeof(*out));
    return rc;
}
