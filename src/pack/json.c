/* SPDX-License-Identifier: MIT */
/*
 * A small, strict JSON reader (RFC 8259) for the dataset manifest: a
 * recursive-descent parser into a tree of struct tfs_pack_json.  Depth is
 * bounded (TFS_PACK_JSON_DEPTH_MAX), strings are decoded to UTF-8 (\\u
 * escapes and surrogate pairs; \\u0000 refused so strings stay C
 * strings), numbers keep their value only when they are whole numbers
 * that fit a u64 (all the manifest needs).  Runs under libFuzzer through
 * tests/fuzz/fuzz_pack_manifest.c.
 */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "pack/pack_int.h"

struct json_in {
    const char *s;
    size_t      len;
    size_t      pos;
};

static int json_value(struct json_in *in, int depth,
                      struct tfs_pack_json **out);

static int json_fail(const struct json_in *in, const char *what)
{
    return tfs_err(TFS_EFORMAT, "JSON: %s at byte %zu", what, in->pos);
}

static void json_ws(struct json_in *in)
{
    while (in->pos < in->len &&
           (in->s[in->pos] == ' ' || in->s[in->pos] == '\t' ||
            in->s[in->pos] == '\n' || in->s[in->pos] == '\r'))
        in->pos++;
}

static bool json_lit(struct json_in *in, const char *lit)
{
    size_t n = strlen(lit);

    if (in->len - in->pos < n || memcmp(in->s + in->pos, lit, n) != 0)
        return false;
    in->pos += n;
    return true;
}

void tfs_pack_json_free(struct tfs_pack_json *j)
{
    while (j != NULL) {
        struct tfs_pack_json *next = j->next;
        tfs_pack_json_free(j->child);
        tfs_free(j->key);
        tfs_free(j->str);
        tfs_free(j);
        j = next;
    }
}

/* ---- strings ---- */

static int json_hex4(struct json_in *in, unsigned *out)
{
    unsigned v = 0;

    if (in->len - in->pos < 4)
        return json_fail(in, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = in->s[in->pos++];
        unsigned d = (c >= '0' && c <= '9')   ? (unsigned)(c - '0')
                     : (c >= 'a' && c <= 'f') ? (unsigned)(c - 'a' + 10)
                     : (c >= 'A' && c <= 'F') ? (unsigned)(c - 'A' + 10)
                                              : 16u;
        if (d == 16)
            return json_fail(in, "bad \\u escape");
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

static int json_utf8(struct tfs_buf *b, unsigned cp)
{
    unsigned char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return tfs_buf_append(b, u, n);
}

/* A \u escape (the backslash and 'u' consumed), pairs included. */
static int json_unicode(struct json_in *in, struct tfs_buf *b)
{
    unsigned cp = 0;                    /* json_hex4 sets both on success */
    unsigned lo = 0;
    int rc = json_hex4(in, &cp);

    if (rc < 0)
        return rc;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return json_fail(in, "lone low surrogate");
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (!json_lit(in, "\\u"))
            return json_fail(in, "lone high surrogate");
        rc = json_hex4(in, &lo);
        if (rc < 0)
            return rc;
        if (lo < 0xdc00 || lo > 0xdfff)
            return json_fail(in, "bad surrogate pair");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0)
        return json_fail(in, "\\u0000 in a string");
    return json_utf8(b, cp);
}

static int json_escape(struct json_in *in, struct tfs_buf *b)
{
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    const char *e;

    if (in->pos >= in->len)
        return json_fail(in, "unterminated string");
    if (in->s[in->pos] == 'u') {
        in->pos++;
        return json_unicode(in, b);
    }
    e = memchr(from, in->s[in->pos], sizeof(from) - 1);
    if (e == NULL)
        return json_fail(in, "bad escape");
    in->pos++;
    return tfs_buf_append(b, &to[e - from], 1);
}

/* A string (at its opening quote); *out owned by the caller. */
static int json_string(struct json_in *in, char **out, size_t *len)
{
    struct tfs_buf b;
    int rc = 0;

    tfs_buf_init(&b, 0);
    in->pos++;
    while (rc == 0) {
        unsigned char c;
        if (in->pos >= in->len) {
            rc = json_fail(in, "unterminated string");
            break;
        }
        c = (unsigned char)in->s[in->pos++];
        if (c == '"')
            break;
        if (c < 0x20)
            rc = json_fail(in, "control character in a string");
        else if (c == '\\')
            rc = json_escape(in, &b);
        else
            rc = tfs_buf_append(&b, &c, 1);
    }
    if (rc < 0) {
        tfs_buf_cleanup(&b);
        return rc;
    }
    *len = b.len;
    *out = tfs_buf_steal(&b);
    return *out != NULL ? 0 : -ENOMEM;
}

/* ---- numbers ---- */

static int json_number(struct json_in *in, struct tfs_pack_json *j)
{
    size_t start = in->pos;
    bool whole = true;
    uint64_t v = 0;

    if (in->s[in->pos] == '-') {
        whole = false;
        in->pos++;
    }
    if (in->pos >= in->len || in->s[in->pos] < '0' || in->s[in->pos] > '9')
        return json_fail(in, "bad number");
    if (in->s[in->pos] == '0' && in->pos + 1 < in->len &&
        in->s[in->pos + 1] >= '0' && in->s[in->pos + 1] <= '9')
        return json_fail(in, "leading zero");
    for (; in->pos < in->len && in->s[in->pos] >= '0' &&
           in->s[in->pos] <= '9'; in->pos++) {
        unsigned d = (unsigned)(in->s[in->pos] - '0');
        if (v > (UINT64_MAX - d) / 10)
            whole = false;
        v = v * 10 + d;
    }
    if (in->pos < in->len && in->s[in->pos] == '.') {
        whole = false;
        in->pos++;
        if (in->pos >= in->len || in->s[in->pos] < '0' ||
            in->s[in->pos] > '9')
            return json_fail(in, "bad fraction");
        while (in->pos < in->len && in->s[in->pos] >= '0' &&
               in->s[in->pos] <= '9')
            in->pos++;
    }
    if (in->pos < in->len && (in->s[in->pos] == 'e' || in->s[in->pos] == 'E')) {
        whole = false;
        in->pos++;
        if (in->pos < in->len && (in->s[in->pos] == '+' ||
                                  in->s[in->pos] == '-'))
            in->pos++;
        if (in->pos >= in->len || in->s[in->pos] < '0' ||
            in->s[in->pos] > '9')
            return json_fail(in, "bad exponent");
        while (in->pos < in->len && in->s[in->pos] >= '0' &&
               in->s[in->pos] <= '9')
            in->pos++;
    }
    j->type = TFS_PACK_JSON_NUMBER;
    j->is_u64 = whole && in->pos > start;
    j->u64 = whole ? v : 0;
    return 0;
}

/* ---- arrays and objects ---- */

/* Members until close; obj: each is "key": value. */
static int json_members(struct json_in *in, int depth, struct tfs_pack_json *j,
                        char close, bool obj)
{
    struct tfs_pack_json **tail = &j->child;

    json_ws(in);
    if (in->pos < in->len && in->s[in->pos] == close) {
        in->pos++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        size_t klen;
        int rc = 0;

        json_ws(in);
        if (obj && (in->pos >= in->len || in->s[in->pos] != '"'))
            return json_fail(in, "expected a member name");
        if (obj)
            rc = json_string(in, &key, &klen);
        json_ws(in);
        if (rc == 0 && obj && !json_lit(in, ":"))
            rc = json_fail(in, "expected ':'");
        if (rc == 0)
            rc = json_value(in, depth + 1, tail);
        if (rc < 0) {
            tfs_free(key);
            return rc;
        }
        (*tail)->key = key;
        tail = &(*tail)->next;
        json_ws(in);
        if (json_lit(in, ","))
            continue;
        if (in->pos < in->len && in->s[in->pos] == close) {
            in->pos++;
            return 0;
        }
        return json_fail(in, obj ? "expected ',' or '}'" : "expected ',' "
                         "or ']'");
    }
}

static int json_scalar(struct json_in *in, struct tfs_pack_json *j)
{
    char c = in->s[in->pos];

    if (c == '"') {
        j->type = TFS_PACK_JSON_STRING;
        return json_string(in, &j->str, &j->str_len);
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return json_number(in, j);
    if (json_lit(in, "true") || json_lit(in, "false")) {
        j->type = TFS_PACK_JSON_BOOL;
        j->b = c == 't';
        return 0;
    }
    if (json_lit(in, "null")) {
        j->type = TFS_PACK_JSON_NULL;
        return 0;
    }
    return json_fail(in, "unexpected character");
}

static int json_value(struct json_in *in, int depth, struct tfs_pack_json **out)
{
    struct tfs_pack_json *j;
    int rc;

    json_ws(in);
    if (depth > TFS_PACK_JSON_DEPTH_MAX)
        return json_fail(in, "nested too deeply");
    if (in->pos >= in->len)
        return json_fail(in, "unexpected end");
    j = tfs_calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    *out = j;
    if (in->s[in->pos] == '{' || in->s[in->pos] == '[') {
        bool obj = in->s[in->pos] == '{';
        j->type = obj ? TFS_PACK_JSON_OBJECT : TFS_PACK_JSON_ARRAY;
        in->pos++;
        rc = json_members(in, depth, j, obj ? '}' : ']', obj);
    } else {
        rc = json_scalar(in, j);
    }
    if (rc < 0) {
        tfs_pack_json_free(j);
        *out = NULL;
    }
    return rc;
}

int tfs_pack_json_parse(const char *s, size_t len, struct tfs_pack_json **out)
{
    struct json_in in = {.s = s, .len = len, .pos = 0};
    struct tfs_pack_json *j = NULL;
    int rc = json_value(&in, 0, &j);

    if (rc < 0)
        return rc;
    json_ws(&in);
    if (in.pos != in.len) {
        tfs_pack_json_free(j);
        return json_fail(&in, "trailing bytes");
    }
    *out = j;
    return 0;
}

const struct tfs_pack_json *tfs_pack_json_get(const struct tfs_pack_json *j,
                                    const char *key)
{
    if (j == NULL || j->type != TFS_PACK_JSON_OBJECT)
        return NULL;
    for (const struct tfs_pack_json *c = j->child; c != NULL; c = c->next) {
        if (c->key != NULL && strcmp(c->key, key) == 0)
            return c;
    }
    return NULL;
}
