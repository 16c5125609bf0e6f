/* SPDX-License-Identifier: MIT */
/*
 * The one JSON parser and writer (RFC 8259, nothing more): safetensors
 * headers, checkpoint markers and indexes, the dataset manifest, and the
 * CLI's readers of the control file.
 *
 * The parser is recursive descent over a byte range, with caps on the
 * text length, the nesting depth and the number of values, so hostile
 * input costs bounded memory and stack.  Values and unescaped strings are
 * carved from an arena (a list of chunks) freed at once.  Strings must be
 * valid UTF-8 and free of NUL (names become C strings); numbers are kept
 * as written, so re-serialising a document never changes a number.
 *
 * The writer appends to a capped tfs_buf: string literals with escapes,
 * and whole parsed values.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/json.h"

#define JSON_CHUNK_MIN (64u << 10)

struct tfs_json_chunk {
    struct tfs_json_chunk *next;
    size_t                 used;        /* bytes of data handed out */
    size_t                 cap;         /* bytes of data */
    max_align_t            data[];      /* cap bytes */
};

struct json_parser {
    const char            *p;           /* text */
    size_t                 len;         /* bytes of text */
    size_t                 pos;         /* next byte */
    unsigned               depth;
    size_t                 nodes;
    struct tfs_json_limits lim;
    struct tfs_json_doc   *doc;
};

static void *json_alloc(struct tfs_json_doc *doc, size_t len)
{
    struct tfs_json_chunk *c = doc->chunks;
    size_t align = alignof(max_align_t);
    void *p;

    len = (len + align - 1) & ~(align - 1);
    if (c == NULL || c->cap - c->used < len) {
        size_t cap = TFS_MAX(len, (size_t)JSON_CHUNK_MIN);

        c = tfs_malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = doc->chunks;
        doc->chunks = c;
    }
    p = (char *)c->data + c->used;
    c->used += len;
    return p;
}

void tfs_json_cleanup(struct tfs_json_doc *doc)
{
    struct tfs_json_chunk *c = doc->chunks;

    while (c != NULL) {
        struct tfs_json_chunk *next = c->next;

        tfs_free(c);
        c = next;
    }
    doc->chunks = NULL;
    doc->root = NULL;
}

/* ---- the parser ---- */

static int json_fail(const struct json_parser *jp, const char *what)
{
    return tfs_err(TFS_EFORMAT, "JSON: %s at byte %zu", what, jp->pos);
}

static void json_skip_ws(struct json_parser *jp)
{
    while (jp->pos < jp->len) {
        char c = jp->p[jp->pos];

        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        jp->pos++;
    }
}

static int json_peek(const struct json_parser *jp)
{
    return jp->pos < jp->len ? (unsigned char)jp->p[jp->pos] : -1;
}

static int json_new(struct json_parser *jp, enum tfs_json_type type,
                    struct tfs_json **out)
{
    struct tfs_json *v;

    if (++jp->nodes > jp->lim.max_nodes)
        return tfs_err(TFS_ETOOBIG, "JSON: more than %zu values",
                       jp->lim.max_nodes);
    v = json_alloc(jp->doc, sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    memset(v, 0, sizeof(*v));
    v->type = type;
    *out = v;
    return 0;
}

/* Length of the UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t json_utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4;
    else
        return 0;
    if (n < len)
        return 0;
    cp = s[0] & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static size_t json_put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int json_hex4(struct json_parser *jp, unsigned *out)
{
    unsigned v = 0;

    if (jp->len - jp->pos < 4)
        return json_fail(jp, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        int d = tfs_hexval((unsigned char)jp->p[jp->pos++]);

        if (d < 0)
            return json_fail(jp, "bad \\u escape");
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A \uXXXX escape (the "\u" consumed), pairing surrogates. */
static int json_unicode(struct json_parser *jp, unsigned *cp)
{
    unsigned lo = 0;                    /* set by json_hex4 when it succeeds */
    int rc = json_hex4(jp, cp);

    if (rc < 0)
        return rc;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return json_fail(jp, "lone low surrogate");
    if (*cp < 0xd800 || *cp > 0xdbff)
        return *cp == 0 ? json_fail(jp, "\\u0000 (NUL) in string") : 0;
    if (jp->len - jp->pos < 2 || jp->p[jp->pos] != '\\' ||
        jp->p[jp->pos + 1] != 'u')
        return json_fail(jp, "lone high surrogate");
    jp->pos += 2;
    rc = json_hex4(jp, &lo);
    if (rc < 0)
        return rc;
    if (lo < 0xdc00 || lo > 0xdfff)
        return json_fail(jp, "bad surrogate pair");
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return 0;
}

static int json_escape(struct json_parser *jp, char *out, size_t *n)
{
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    const char *hit;
    unsigned cp = 0;                    /* set by json_unicode when it succeeds */
    int rc;

    if (jp->pos >= jp->len)
        return json_fail(jp, "unterminated string");
    if (jp->p[jp->pos] == 'u') {
        jp->pos++;
        rc = json_unicode(jp, &cp);
        if (rc < 0)
            return rc;
        *n += json_put_utf8(out + *n, cp);
        return 0;
    }
    hit = jp->p[jp->pos] ? strchr(from, jp->p[jp->pos]) : NULL;
    if (hit == NULL)
        return json_fail(jp, "bad escape");
    out[(*n)++] = to[hit - from];
    jp->pos++;
    return 0;
}

/*
 * A string literal (at the opening quote) into arena memory.  Unescaping
 * never grows the text, so the raw length bounds the result.
 */
static int json_string(struct json_parser *jp, const char **s, size_t *slen)
{
    size_t end = ++jp->pos;
    size_t n = 0;
    char *out;

    while (end < jp->len && jp->p[end] != '"')
        end += jp->p[end] == '\\' ? 2 : 1;
    if (end >= jp->len)
        return json_fail(jp, "unterminated string");
    out = json_alloc(jp->doc, end - jp->pos + 1);
    if (out == NULL)
        return -ENOMEM;
    while (jp->p[jp->pos] != '"') {
        const unsigned char *c = (const unsigned char *)jp->p + jp->pos;
        size_t ulen;
        int rc;

        if (*c == '\\') {
            jp->pos++;
            rc = json_escape(jp, out, &n);
            if (rc < 0)
                return rc;
            continue;
        }
        if (*c < 0x20)
            return json_fail(jp, "control character in string");
        ulen = json_utf8_len(c, jp->len - jp->pos);
        if (ulen == 0 && jp->lim.any_bytes)
            ulen = 1;                   /* a byte that is not UTF-8, kept */
        if (ulen == 0)
            return json_fail(jp, "invalid UTF-8");
        memcpy(out + n, c, ulen);
        n += ulen;
        jp->pos += ulen;
    }
    jp->pos++;
    out[n] = '\0';
    *s = out;
    *slen = n;
    return 0;
}

static size_t json_digits(const struct json_parser *jp, size_t pos)
{
    while (pos < jp->len && jp->p[pos] >= '0' && jp->p[pos] <= '9')
        pos++;
    return pos;
}

static int json_number(struct json_parser *jp, struct tfs_json *v)
{
    size_t start = jp->pos;
    size_t pos = start;
    size_t d;
    char *s;

    if (pos < jp->len && jp->p[pos] == '-')
        pos++;
    d = json_digits(jp, pos);
    if (d == pos || (jp->p[pos] == '0' && d > pos + 1))
        return json_fail(jp, "bad number");
    pos = d;
    if (pos < jp->len && jp->p[pos] == '.') {
        d = json_digits(jp, pos + 1);
        if (d == pos + 1)
            return json_fail(jp, "bad fraction");
        pos = d;
    }
    if (pos < jp->len && (jp->p[pos] == 'e' || jp->p[pos] == 'E')) {
        pos++;
        if (pos < jp->len && (jp->p[pos] == '+' || jp->p[pos] == '-'))
            pos++;
        d = json_digits(jp, pos);
        if (d == pos)
            return json_fail(jp, "bad exponent");
        pos = d;
    }
    s = json_alloc(jp->doc, pos - start + 1);
    if (s == NULL)
        return -ENOMEM;
    memcpy(s, jp->p + start, pos - start);
    s[pos - start] = '\0';
    v->s = s;
    v->len = pos - start;
    jp->pos = pos;
    return 0;
}

static int json_literal(struct json_parser *jp, const char *word,
                        enum tfs_json_type type,
                        struct tfs_json *v)
{
    size_t n = strlen(word);

    if (jp->len - jp->pos < n || memcmp(jp->p + jp->pos, word, n) != 0)
        return json_fail(jp, "unexpected character");
    jp->pos += n;
    v->type = type;
    return 0;
}

static int json_value(struct json_parser *jp, struct tfs_json **out);

static int json_key_cmp(const void *a, const void *b)
{
    const struct tfs_json *x = *(const struct tfs_json *const *)a;
    const struct tfs_json *y = *(const struct tfs_json *const *)b;
    int c = memcmp(x->key, y->key, TFS_MIN(x->key_len, y->key_len));

    if (c != 0)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

/* Refuse duplicate member names: pairwise when few, sorted when many. */
static int json_check_dups(struct json_parser *jp,
                           const struct tfs_json *obj)
{
    const struct tfs_json **v;
    size_t i = 0;
    int rc = 0;

    if (obj->n < 2)
        return 0;
    v = tfs_malloc(obj->n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (const struct tfs_json *m = obj->child; m; m = m->next)
        v[i++] = m;
    qsort(v, obj->n, sizeof(*v), json_key_cmp);
    for (i = 1; i < obj->n && rc == 0; i++) {
        if (json_key_cmp(&v[i - 1], &v[i]) == 0)
            rc = tfs_err(TFS_EFORMAT, "JSON: duplicate key '%.100s' in "
                         "object ending at byte %zu", v[i]->key, jp->pos);
    }
    tfs_free(v);
    return rc;
}

/* The members or elements of an object or array (at its bracket). */
static int json_container(struct json_parser *jp, struct tfs_json *v)
{
    bool obj = v->type == TFS_JSON_OBJECT;
    char close = obj ? '}' : ']';
    struct tfs_json **tail = &v->child;

    if (++jp->depth > jp->lim.max_depth)
        return tfs_err(TFS_ETOOBIG, "JSON: nested too deeply (more "
                       "than %u)", jp->lim.max_depth);
    jp->pos++;
    json_skip_ws(jp);
    if (json_peek(jp) == close) {
        jp->pos++;
        jp->depth--;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        int rc;

        json_skip_ws(jp);
        if (obj) {
            if (json_peek(jp) != '"')
                return json_fail(jp, "expected a member name");
            rc = json_string(jp, &key, &key_len);
            if (rc < 0)
                return rc;
            json_skip_ws(jp);
            if (json_peek(jp) != ':')
                return json_fail(jp, "expected ':'");
            jp->pos++;
        }
        rc = json_value(jp, tail);
        if (rc < 0)
            return rc;
        (*tail)->key = key;
        (*tail)->key_len = key_len;
        tail = &(*tail)->next;
        v->n++;
        json_skip_ws(jp);
        if (json_peek(jp) == close)
            break;
        if (json_peek(jp) != ',')
            return json_fail(jp, obj ? "expected ',' or '}'"
                                     : "expected ',' or ']'");
        jp->pos++;
    }
    jp->pos++;
    jp->depth--;
    return obj ? json_check_dups(jp, v) : 0;
}

static int json_value(struct json_parser *jp, struct tfs_json **out)
{
    struct tfs_json *v = NULL;
    int c;
    int rc;

    json_skip_ws(jp);
    c = json_peek(jp);
    if (c < 0)
        return json_fail(jp, "unexpected end");
    rc = json_new(jp, TFS_JSON_NULL, &v);
    if (rc < 0)
        return rc;
    *out = v;
    if (c == '{' || c == '[') {
        v->type = c == '{' ? TFS_JSON_OBJECT : TFS_JSON_ARRAY;
        return json_container(jp, v);
    }
    if (c == '"') {
        v->type = TFS_JSON_STRING;
        return json_string(jp, &v->s, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = TFS_JSON_NUMBER;
        return json_number(jp, v);
    }
    if (c == 't')
        return json_literal(jp, "true", TFS_JSON_TRUE, v);
    if (c == 'f')
        return json_literal(jp, "false", TFS_JSON_FALSE, v);
    return json_literal(jp, "null", TFS_JSON_NULL, v);
}

int tfs_json_parse(const char *text, size_t len,
                   const struct tfs_json_limits *lim,
                   struct tfs_json_doc *out)
{
    static const struct tfs_json_limits dflt = {
        .max_len = 100000000,
        .max_depth = 64,
        .max_nodes = 16u << 20,
    };
    struct json_parser jp = {.p = text, .len = len};
    int rc;

    memset(out, 0, sizeof(*out));
    jp.lim = lim != NULL ? *lim : dflt;
    jp.doc = out;
    if (len > jp.lim.max_len)
        return tfs_err(TFS_ETOOBIG, "JSON: %zu bytes, more than %zu", len,
                       jp.lim.max_len);
    rc = json_value(&jp, &out->root);
    if (rc == 0) {
        json_skip_ws(&jp);
        if (jp.pos != jp.len)
            rc = json_fail(&jp, "trailing characters");
    }
    if (rc < 0)
        tfs_json_cleanup(out);
    return rc;
}

/* ---- accessors ---- */

const struct tfs_json *tfs_json_get(const struct tfs_json *obj,
                                    const char *key)
{
    size_t len;

    if (obj == NULL || obj->type != TFS_JSON_OBJECT)
        return NULL;
    len = strlen(key);
    for (const struct tfs_json *m = obj->child; m; m = m->next) {
        if (m->key_len == len && memcmp(m->key, key, len) == 0)
            return m;
    }
    return NULL;
}

const char *tfs_json_str(const struct tfs_json *v)
{
    return v != NULL && v->type == TFS_JSON_STRING ? v->s : NULL;
}

int tfs_json_u64(const struct tfs_json *v, uint64_t *out)
{
    uint64_t n = 0;

    if (v == NULL || v->type != TFS_JSON_NUMBER || v->s[0] == '-')
        return TFS_EFORMAT;
    for (size_t i = 0; i < v->len; i++) {
        unsigned d = (unsigned)(v->s[i] - '0');

        if (d > 9 || n > (UINT64_MAX - d) / 10)
            return TFS_EFORMAT;         /* fraction, exponent, overflow */
        n = n * 10 + d;
    }
    *out = n;
    return 0;
}

int tfs_json_i64(const struct tfs_json *v, int64_t *out)
{
    struct tfs_json pos;
    uint64_t n;
    bool neg;

    if (v == NULL || v->type != TFS_JSON_NUMBER)
        return TFS_EFORMAT;
    neg = v->s[0] == '-';
    pos = *v;
    pos.s += neg;
    pos.len -= neg;
    if (tfs_json_u64(&pos, &n) < 0 || n > (uint64_t)INT64_MAX + neg)
        return TFS_EFORMAT;
    *out = neg ? (int64_t)(0 - n) : (int64_t)n;
    return 0;
}

/* ---- the writer ---- */

int tfs_json_put_str(struct tfs_buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;
    int rc = tfs_buf_append(b, "\"", 1);

    for (size_t i = 0; i < len && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        rc = tfs_buf_append(b, s + run, i - run);
        run = i + 1;
        if (rc < 0)
            break;
        if (c == '"' || c == '\\') {
            esc[1] = (char)c;
            rc = tfs_buf_append(b, esc, 2);
        } else if (c == '\n') {
            rc = tfs_buf_append(b, "\\n", 2);
        } else {
            rc = tfs_buf_append(b, esc, 6);
        }
    }
    if (rc == 0)
        rc = tfs_buf_append(b, s + run, len - run);
    if (rc == 0)
        rc = tfs_buf_append(b, "\"", 1);
    return rc;
}

int tfs_json_put_cstr(struct tfs_buf *b, const char *s)
{
    return tfs_json_put_str(b, s, strlen(s));
}

int tfs_json_write(struct tfs_buf *b, const struct tfs_json *v)
{
    bool obj = v->type == TFS_JSON_OBJECT;
    int rc = 0;

    switch (v->type) {
    case TFS_JSON_NULL:
        return tfs_buf_puts(b, "null");
    case TFS_JSON_FALSE:
        return tfs_buf_puts(b, "false");
    case TFS_JSON_TRUE:
        return tfs_buf_puts(b, "true");
    case TFS_JSON_NUMBER:
        return tfs_buf_append(b, v->s, v->len);
    case TFS_JSON_STRING:
        return tfs_json_put_str(b, v->s, v->len);
    case TFS_JSON_ARRAY:
    case TFS_JSON_OBJECT:
        break;
    }
    rc = tfs_buf_puts(b, obj ? "{" : "[");
    for (const struct tfs_json *m = v->child; m && rc == 0; m = m->next) {
        if (m != v->child)
            rc = tfs_buf_puts(b, ",");
        if (rc == 0 && obj)
            rc = tfs_json_put_str(b, m->key, m->key_len);
        if (rc == 0 && obj)
            rc = tfs_buf_puts(b, ":");
        if (rc == 0)
            rc = tfs_json_write(b, m);
    }
    if (rc == 0)
        rc = tfs_buf_puts(b, obj ? "}" : "]");
    return rc;
}

int tfs_json_copy(struct tfs_buf *b, const char *text, size_t len)
{
    struct tfs_json_doc doc;
    int rc = tfs_json_parse(text, len, NULL, &doc);

    if (rc < 0)
        return rc;
    rc = tfs_json_write(b, doc.root);
    tfs_json_cleanup(&doc);
    return rc;
}
