/* SPDX-License-Identifier: MIT */
/*
 * The s3 store: objects in a bucket of any S3-compatible object store
 * (AWS S3, Ceph RGW, MinIO, ...), under an optional key prefix.
 *
 *     s3://bucket[/prefix]?endpoint=http://127.0.0.1:7480&region=...
 *
 * Keys given to the ops are relative to the root ("prefix/"), and so are
 * the keys and common prefixes a listing returns.  Settings follow the
 * AWS conventions (environment, ~/.aws/credentials, ~/.aws/config; see
 * docs/s3.md for the order), and secrets never go in the URI.
 *
 * The file is divided into: a small INI reader for the AWS files,
 * configuration (options, endpoint, credentials), open/close, the read
 * side (stat, read, list), the write side (put, multipart uploads and
 * multipart copies on one engine, remove, copy) and the ops table.  HTTP,
 * signing and XML live in s3_http.c, s3_sign.c and s3_xml.c.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "store/s3_int.h"
#include "tierfs/log.h"

#define S3_KEY_MAX       1024           /* bytes of a full key (S3's cap) */
#define S3_INI_MAX       (1u << 20)     /* bytes of an AWS config file */
#define S3_MAX_THREADS   256            /* upload_concurrency cap */
#define S3_AUTO_PART_MIN (8u << 20)     /* default part_size: from ... */
#define S3_AUTO_PART_MAX (64u << 20)    /* ... to, by the object's size */
#define S3_PART_BACKOFF_MS 100u        /* first backoff cap of a part */
#define S3_PART_BACKOFF_MAX_MS 5000u    /* cap of any part backoff */

/* ---- a small INI reader for ~/.aws/credentials and ~/.aws/config ---- */

/* Load the file at path into b; 0 with b empty when it does not exist. */
static int ini_load(const char *path, struct tfs_buf *b)
{
    char chunk[4096];
    FILE *f = fopen(path, "re");
    size_t n;
    int rc = 0;

    if (f == NULL)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = tfs_buf_append(b, chunk, n);
    if (rc == 0 && ferror(f))
        rc = -EIO;
    fclose(f);
    return rc;
}

static char *ini_trim(char *s)
{
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' ||
                       end[-1] == '\r'))
        end--;
    *end = '\0';
    return s;
}

/* Is "[inner]" the section named name ("profile  x" matches "profile x")? */
static bool ini_section_is(const char *inner, const char *name)
{
    const char *sp = strchr(name, ' ');

    if (sp == NULL)
        return strcmp(inner, name) == 0;
    if (strncmp(inner, name, (size_t)(sp - name + 1)) != 0)
        return false;
    inner += sp - name;
    while (*inner == ' ' || *inner == '\t')
        inner++;
    return strcmp(inner, sp + 1) == 0;
}

/*
 * One "k = v" line of a matching section: the key it stands for is k, or
 * "block.k" for an indented line under "block =" (AWS's nested settings,
 * "s3 =\n  endpoint_url = ...").
 */
static bool ini_line_is(char *line, bool indented, char *block,
                        size_t block_size, const char *key, char **value)
{
    char *eq = strchr(line, '=');
    char *k;
    char *v;
    size_t bl = strlen(block);

    if (eq == NULL)
        return false;
    *eq = '\0';
    k = ini_trim(line);
    v = ini_trim(eq + 1);
    if (!indented)
        block[0] = '\0';
    if (indented && bl > 0) {
        *value = v;
        return strncmp(key, block, bl) == 0 && key[bl] == '.' &&
               strcmp(key + bl + 1, k) == 0;
    }
    if (v[0] == '\0' && strlen(k) < block_size) {
        memcpy(block, k, strlen(k) + 1);
        return false;
    }
    *value = v;
    return strcmp(k, key) == 0;
}

/*
 * The value of key in [section] of text (modified: lines are cut), or
 * NULL.  '#' and ';' start comment lines; blank lines are skipped; the
 * first value found wins.
 */
static const char *ini_find(char *text, const char *section, const char *key)
{
    char block[64] = "";
    bool in = false;
    char *save = NULL;

    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        bool indented = line[0] == ' ' || line[0] == '\t';
        char *s = ini_trim(line);
        char *v = NULL;
        size_t len = strlen(s);

        if (s[0] == '\0' || s[0] == '#' || s[0] == ';')
            continue;
        if (s[0] == '[' && s[len - 1] == ']') {
            s[len - 1] = '\0';
            in = ini_section_is(ini_trim(s + 1), section);
            block[0] = '\0';
            continue;
        }
        if (in && ini_line_is(s, indented, block, sizeof(block), key, &v))
            return v;
    }
    return NULL;
}

/* A copy of key in [section] of the loaded file f, or NULL; -ENOMEM. */
static int ini_get(const struct tfs_buf *f, const char *section,
                   const char *key, char **out)
{
    char *text;
    const char *v;

    *out = NULL;
    if (f->len == 0)
        return 0;
    text = tfs_strndup(f->p, f->len);   /* ini_find cuts its input */
    if (text == NULL)
        return -ENOMEM;
    v = ini_find(text, section, key);
    if (v != NULL)
        *out = tfs_strdup(v);
    tfs_free(text);
    return v != NULL && *out == NULL ? -ENOMEM : 0;
}

/* ---- configuration ---- */

/* What open gathers before it fills the priv struct. */
struct s3_conf {
    const char    *profile;             /* the profile in use */
    bool           profile_explicit;    /* given as option: beats env */
    struct tfs_buf cred_path;
    struct tfs_buf conf_path;
    struct tfs_buf cred;                /* credentials file text */
    struct tfs_buf conf;                /* config file text */
    char           conf_section[80];    /* "profile NAME" or "default" */
};

/* An environment variable, NULL when unset or empty. */
static const char *s3_env(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int s3_conf_path(struct tfs_buf *b, const char *env, const char *rel)
{
    const char *v = s3_env(env);
    const char *home = s3_env("HOME");

    if (v != NULL)
        return tfs_buf_puts(b, v);
    if (home == NULL)
        return 0;                       /* nowhere to look */
    return tfs_buf_printf(b, "%s/%s", home, rel);
}

/* Find the profile and load both AWS files (missing ones stay empty). */
static int s3_conf_load(struct tfs_store *st, struct s3_conf *c)
{
    const char *opt = NULL;
    int rc;

    tfs_buf_init(&c->cred_path, 0);
    tfs_buf_init(&c->conf_path, 0);
    tfs_buf_init(&c->cred, S3_INI_MAX);
    tfs_buf_init(&c->conf, S3_INI_MAX);
    rc = tfs_store_opt_str(st, "profile", &opt);
    if (rc < 0)
        return rc;
    c->profile_explicit = opt != NULL;
    c->profile = opt ? opt : s3_env("AWS_PROFILE");
    if (c->profile == NULL)
        c->profile = "default";
    if (strcmp(c->profile, "default") == 0)
        snprintf(c->conf_section, sizeof(c->conf_section), "default");
    else
        snprintf(c->conf_section, sizeof(c->conf_section), "profile %s",
                 c->profile);
    rc = s3_conf_path(&c->cred_path, "AWS_SHARED_CREDENTIALS_FILE",
                      ".aws/credentials");
    if (rc == 0)
        rc = s3_conf_path(&c->conf_path, "AWS_CONFIG_FILE", ".aws/config");
    if (rc == 0 && c->cred_path.len > 0)
        rc = ini_load(tfs_buf_str(&c->cred_path), &c->cred);
    if (rc < 0)
        return tfs_err(rc, "cannot read %s", tfs_buf_str(&c->cred_path));
    if (c->conf_path.len > 0)
        rc = ini_load(tfs_buf_str(&c->conf_path), &c->conf);
    if (rc < 0)
        return tfs_err(rc, "cannot read %s", tfs_buf_str(&c->conf_path));
    return 0;
}

static void s3_conf_cleanup(struct s3_conf *c)
{
    tfs_buf_cleanup(&c->cred_path);
    tfs_buf_cleanup(&c->conf_path);
    if (c->cred.p != NULL)
        OPENSSL_cleanse(c->cred.p, c->cred.len);
    tfs_buf_cleanup(&c->cred);
    tfs_buf_cleanup(&c->conf);
}

/* A setting of the profile: the config file ("[profile NAME]"). */
static int s3_conf_get(struct s3_conf *c, const char *key, char **out)
{
    int rc = ini_get(&c->conf, c->conf_section, key, out);

    if (rc == 0 && *out == NULL && strcmp(c->profile, "default") == 0)
        rc = ini_get(&c->conf, "profile default", key, out);
    return rc;
}

/* Take a copy of the first non-NULL of env1, env2, or the config key. */
static int s3_pick(struct s3_conf *c, const char *opt, const char *env1,
                   const char *env2, const char *key, char **out)
{
    const char *v = opt;

    if (v == NULL && env1 != NULL)
        v = s3_env(env1);
    if (v == NULL && env2 != NULL)
        v = s3_env(env2);
    if (v == NULL)
        return s3_conf_get(c, key, out);
    *out = tfs_strdup(v);
    return *out != NULL ? 0 : -ENOMEM;
}

static void s3_wipe(char *s)
{
    if (s != NULL)
        OPENSSL_cleanse(s, strlen(s));
    tfs_free(s);
}

/* Credentials from the profile: the credentials file, then config. */
static int s3_creds_profile(struct s3_priv *p, struct s3_conf *c)
{
    int rc = ini_get(&c->cred, c->profile, "aws_access_key_id",
                     &p->access_key);
    bool in_cred = p->access_key != NULL;
    const struct tfs_buf *f = in_cred ? &c->cred : &c->conf;
    const char *sec = in_cred ? c->profile : c->conf_section;

    if (rc == 0 && !in_cred)
        rc = s3_conf_get(c, "aws_access_key_id", &p->access_key);
    if (rc == 0 && p->access_key != NULL)
        rc = ini_get(f, sec, "aws_secret_access_key", &p->secret_key);
    if (rc == 0 && p->access_key != NULL)
        rc = ini_get(f, sec, "aws_session_token", &p->session_token);
    return rc;
}

static int s3_creds_env(struct s3_priv *p)
{
    const char *ak = s3_env("AWS_ACCESS_KEY_ID");
    const char *sk = s3_env("AWS_SECRET_ACCESS_KEY");
    const char *tok = s3_env("AWS_SESSION_TOKEN");

    if (ak == NULL || sk == NULL)
        return 0;
    p->access_key = tfs_strdup(ak);
    p->secret_key = tfs_strdup(sk);
    p->session_token = tok ? tfs_strdup(tok) : NULL;
    if (p->access_key == NULL || p->secret_key == NULL ||
        (tok != NULL && p->session_token == NULL))
        return -ENOMEM;
    return 0;
}

/* Credentials by the AWS order; TFS_ENOCRED saying where we looked. */
static int s3_creds(struct s3_priv *p, struct s3_conf *c)
{
    int rc = 0;

    if (p->anonymous)
        return 0;
    if (!c->profile_explicit)
        rc = s3_creds_env(p);
    if (rc == 0 && p->access_key == NULL)
        rc = s3_creds_profile(p, c);
    if (rc < 0)
        return rc;
    if (p->access_key != NULL && p->secret_key != NULL)
        return 0;
    return tfs_err(TFS_ENOCRED, "no S3 credentials: %sprofile '%s' has no "
                   "aws_access_key_id/aws_secret_access_key in %s or %s "
                   "(set them, or anonymous=1 for a public bucket)",
                   c->profile_explicit ? ""
                   : "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set, ",
                   c->profile,
                   c->cred_path.len ? tfs_buf_str(&c->cred_path) : "(no HOME)",
                   c->conf_path.len ? tfs_buf_str(&c->conf_path) : "(no HOME)");
}

/* 3-63 of a-z 0-9 . -, starting and ending with a letter or digit. */
static bool s3_bucket_ok(const char *b, size_t len)
{
    if (len < 3 || len > 63 || b[0] == '.' || b[0] == '-' ||
        b[len - 1] == '.' || b[len - 1] == '-')
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = b[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-'))
            return false;
        if (ch == '.' && i > 0 && b[i - 1] == '.')
            return false;
    }
    return true;
}

/* "bucket[/prefix]" into p->bucket and p->root ("" or "prefix/"). */
static int s3_parse_location(struct s3_priv *p, const char *loc)
{
    const char *slash = strchr(loc, '/');
    size_t blen = slash ? (size_t)(slash - loc) : strlen(loc);
    const char *pre = slash ? slash : "";
    size_t plen;

    if (memchr(loc, '@', blen) != NULL || memchr(loc, ':', blen) != NULL)
        return tfs_err(TFS_EURI, "credentials do not belong in an s3:// URI;"
                       " use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a "
                       "profile");
    if (!s3_bucket_ok(loc, blen))
        return tfs_err(TFS_EURI, "invalid bucket name '%.*s' (3-63 of "
                       "a-z, 0-9, '.' and '-')", (int)TFS_MIN(blen, 80), loc);
    while (*pre == '/')
        pre++;
    plen = strlen(pre);
    while (plen > 0 && pre[plen - 1] == '/')
        plen--;
    if (plen >= S3_KEY_MAX)
        return tfs_err(TFS_EURI, "s3:// prefix longer than %d bytes",
                       S3_KEY_MAX);
    p->bucket = tfs_strndup(loc, blen);
    p->root = tfs_malloc(plen + 2);
    if (p->bucket == NULL || p->root == NULL)
        return -ENOMEM;
    memcpy(p->root, pre, plen);
    memcpy(p->root + plen, "/", plen > 0 ? 2 : 1);
    if (plen == 0)
        p->root[0] = '\0';
    return 0;
}

/* Refuse secrets passed as options (they would end up in logs). */
static int s3_refuse_secret_opts(struct tfs_store *st)
{
    static const char *const names[] = {
        "access_key", "secret_key", "aws_access_key_id",
        "aws_secret_access_key", "session_token", "aws_session_token",
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(names); i++) {
        const char *v = NULL;

        tfs_store_opt_str(st, names[i], &v);
        if (v != NULL)
            return tfs_err(TFS_EOPTION, "option %s: credentials do not "
                           "belong in the store URI; use the AWS_* "
                           "environment or a profile", names[i]);
    }
    return 0;
}

/*
 * url for an error message: everything from after the scheme to the last
 * '@' (user:password, wherever a stray '/' put it) masked as "***".
 */
static const char *s3_url_shown(const char *url, char *buf, size_t len)
{
    const char *s = strstr(url, "://");
    const char *auth = s != NULL ? s + 3 : url;
    const char *at = strrchr(auth, '@');

    if (at == NULL)
        return url;
    snprintf(buf, len, "%.*s***%.200s", (int)(auth - url), url, at);
    return buf;
}

/* Does url start with "https://"?  (The scheme is checked elsewhere.) */
static bool s3_is_https(const char *url)
{
    return strncasecmp(url, "https://", 8) == 0;
}

/*
 * Parse "http[s]://authority[/path]" of where into e's URL parts, in the
 * addressing style p->path_style says (already final).
 */
static int s3_set_endpoint(struct s3_priv *p, struct s3_ep *e,
                           const char *url, const char *where)
{
    bool https = s3_is_https(url);
    const char *auth = url + (https ? 8 : 7);
    size_t alen = strcspn(auth, "/?#");
    const char *path = auth + alen;
    size_t plen = strcspn(path, "?#");
    size_t hlen = strlen(p->bucket) + alen + 2;
    char shown[256];

    if (!https && strncasecmp(url, "http://", 7) != 0)
        return tfs_err(TFS_EOPTION, "S3 endpoint '%s' (%s) must start with "
                       "http:// or https://",
                       s3_url_shown(url, shown, sizeof(shown)), where);
    if (alen == 0 || strchr(url, '@') != NULL || path[plen] != '\0')
        return tfs_err(TFS_EOPTION, "S3 endpoint '%s' (%s) is not a plain "
                       "http[s]://host[:port][/path] URL (no user:password@: "
                       "credentials come from the environment)",
                       s3_url_shown(url, shown, sizeof(shown)), where);
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    e->base_path = tfs_strndup(path, plen);
    e->host = tfs_malloc(hlen);
    e->base_url = tfs_malloc(hlen + 8);
    e->name = tfs_malloc(alen + plen + 9);
    if (e->base_path == NULL || e->host == NULL || e->base_url == NULL ||
        e->name == NULL)
        return -ENOMEM;
    snprintf(e->host, hlen, "%s%s%.*s", p->path_style ? "" : p->bucket,
             p->path_style ? "" : ".", (int)alen, auth);
    for (char *h = e->host; *h; h++)
        *h = *h >= 'A' && *h <= 'Z' ? (char)(*h - 'A' + 'a') : *h;
    snprintf(e->base_url, hlen + 8, "%s://%s", https ? "https" : "http",
             e->host);
    snprintf(e->name, alen + plen + 9, "%s://%s%s", https ? "https" : "http",
             e->host + (p->path_style ? 0 : strlen(p->bucket) + 1),
             e->base_path);
    return 0;
}

/* The count of comma-separated items of list. */
static unsigned s3_list_count(const char *list)
{
    unsigned n = 1;

    for (const char *c = strchr(list, ','); c != NULL; c = strchr(c + 1, ','))
        n++;
    return n;
}

/* Item i of list into a copy, spaces around it trimmed; NULL: -ENOMEM. */
static char *s3_list_item(const char *list, unsigned i)
{
    const char *s = list;
    size_t len;

    for (; i > 0; i--)
        s = strchr(s, ',') + 1;
    while (*s == ' ' || *s == '\t')
        s++;
    len = strcspn(s, ",");
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    return tfs_strndup(s, len);
}

/* Every endpoint of list after the first has its scheme, and none is
   listed twice. */
static int s3_endpoints_check(const struct s3_priv *p, const char *list,
                              const char *where)
{
    const struct s3_ep *ep = p->bal.ep;

    for (unsigned i = 1; i < p->bal.n; i++) {
        if (s3_is_https(ep[i].base_url) != s3_is_https(ep[0].base_url))
            return tfs_err(TFS_EOPTION, "S3 endpoints '%s' and '%s' (%s) "
                           "mix http and https: list gateways of one "
                           "scheme", ep[0].name, ep[i].name, where);
        for (unsigned j = 0; j < i; j++) {
            if (strcmp(ep[i].name, ep[j].name) == 0)
                return tfs_err(TFS_EOPTION, "S3 endpoint '%s' is listed "
                               "twice in '%.200s' (%s)", ep[i].name, list,
                               where);
        }
    }
    return 0;
}

/*
 * The endpoint list of where ("http://a:7480,http://b:7480": gateways of
 * one store) into p->bal, each parsed as one endpoint.  A dotted bucket
 * cannot be a TLS host name: path style then.
 */
static int s3_set_endpoints(struct s3_priv *p, const char *list,
                            const char *where)
{
    unsigned n = s3_list_count(list);
    char *item;
    int rc;

    if (n > S3_MAX_ENDPOINTS)
        return tfs_err(TFS_EOPTION, "%u S3 endpoints (%s): at most %d",
                       n, where, S3_MAX_ENDPOINTS);
    rc = tfs_s3_bal_init(&p->bal, n);
    if (s3_is_https(list) && strchr(p->bucket, '.') != NULL)
        p->path_style = true;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        item = s3_list_item(list, i);
        if (item == NULL)
            return -ENOMEM;
        rc = item[0] == '\0'
                 ? tfs_err(TFS_EOPTION, "empty S3 endpoint in the list "
                           "'%.200s' (%s)", list, where)
                 : s3_set_endpoint(p, &p->bal.ep[i], item, where);
        tfs_free(item);
    }
    return rc < 0 ? rc : s3_endpoints_check(p, list, where);
}

/* Region and endpoint, by the AWS order (docs/s3.md). */
static int s3_where(struct tfs_store *st, struct s3_priv *p,
                    struct s3_conf *c)
{
    const char *opt_region = NULL;
    const char *opt_endpoint = NULL;
    const char *opt_style = NULL;
    char *endpoint = NULL;
    char dflt[128];
    int rc = tfs_store_opt_str(st, "region", &opt_region);

    if (rc == 0)
        rc = tfs_store_opt_str(st, "endpoint", &opt_endpoint);
    if (rc == 0)
        rc = s3_pick(c, opt_region, "AWS_REGION", "AWS_DEFAULT_REGION",
                     "region", &p->region);
    if (rc == 0 && p->region == NULL)
        p->region = tfs_strdup("us-east-1");
    if (rc == 0 && p->region == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = s3_pick(c, opt_endpoint, "AWS_ENDPOINT_URL_S3",
                     "AWS_ENDPOINT_URL", "s3.endpoint_url", &endpoint);
    if (rc == 0 && endpoint == NULL)
        rc = s3_conf_get(c, "endpoint_url", &endpoint);
    if (rc == 0)
        rc = tfs_store_opt_str(st, "path_style", &opt_style);
    p->path_style = endpoint != NULL;   /* self-hosted stores: path style */
    if (rc == 0 && opt_style != NULL)
        rc = tfs_store_opt_bool(st, "path_style", &p->path_style);
    if (rc == 0 && strlen(p->region) > 64)
        rc = tfs_err(TFS_EOPTION, "S3 region '%.64s...' is too long",
                     p->region);
    snprintf(dflt, sizeof(dflt), "https://s3.%s.amazonaws.com", p->region);
    if (rc == 0)
        rc = s3_set_endpoints(p, endpoint ? endpoint : dflt,
                              opt_endpoint ? "option endpoint"
                              : endpoint ? "from the environment or config"
                                         : "default");
    tfs_free(endpoint);
    return rc;
}

/* A number option within [lo, hi]. */
static int s3_opt_range(struct tfs_store *st, const char *name, bool size,
                        uint64_t lo, uint64_t hi, uint64_t *out)
{
    int rc = size ? tfs_store_opt_size(st, name, out)
                  : tfs_store_opt_u64(st, name, out);

    if (rc == 0 && (*out < lo || *out > hi))
        rc = tfs_err(TFS_EOPTION, "option %s=%" PRIu64 ": must be between "
                     "%" PRIu64 " and %" PRIu64, name, *out, lo, hi);
    return rc;
}

/* The options of transfers: stall limit, bandwidth, part retries. */
static int s3_take_transfer(struct tfs_store *st, struct s3_priv *p)
{
    uint64_t retries = p->part_retries;
    int rc = s3_opt_range(st, "stall_ms", false, 1, 86400000, &p->stall_ms);

    if (rc == 0)
        rc = s3_opt_range(st, "conn_bw", true, 0, UINT64_MAX / 2,
                          &p->conn_bw);
    if (rc == 0)
        rc = s3_opt_range(st, "part_retries", false, 0, 100, &retries);
    if (rc == 0)
        rc = s3_opt_range(st, "fail_request", false, 0, UINT64_MAX,
                          &p->fail_request);
    p->fail_count = 1;
    if (rc == 0)
        rc = s3_opt_range(st, "fail_count", false, 1, 1000000,
                          &p->fail_count);
    p->part_retries = (unsigned)retries;
    return rc;
}

/* Whether the environment names a proxy for curl (our own plain-HTTP
   GETs would not go through it, so they stay with curl). */
static bool s3_proxy_env(void)
{
    static const char *const names[] = {"http_proxy", "HTTP_PROXY",
                                        "all_proxy", "ALL_PROXY"};

    for (size_t i = 0; i < TFS_ARRAY_LEN(names); i++) {
        const char *v = getenv(names[i]);

        if (v != NULL && v[0] != '\0')
            return true;
    }
    return false;
}

static int s3_take_numbers(struct tfs_store *st, struct s3_priv *p,
                           uint64_t *max_conns)
{
    uint64_t conc = 4;
    const char *given = NULL;
    int rc;

    (void)tfs_store_opt_str(st, "part_size", &given);
    p->part_size_auto = given == NULL;
    p->part_size = S3_AUTO_PART_MIN;
    p->multipart_threshold = 16u << 20;
    p->copy_threshold = S3_MAX_PART;
    p->copy_part_size = 512u << 20;
    p->connect_timeout_ms = 3000;
    p->timeout_ms = 60000;
    p->stall_ms = 30000;
    p->part_retries = 4;
    *max_conns = 16;
    rc = s3_opt_range(st, "part_size", true, 4096, S3_MAX_PART,
                      &p->part_size);
    if (rc == 0)
        rc = s3_opt_range(st, "multipart_threshold", true, 1, S3_MAX_PART,
                          &p->multipart_threshold);
    if (rc == 0)
        rc = s3_opt_range(st, "multipart_copy_threshold", true, 1,
                          S3_MAX_PART, &p->copy_threshold);
    if (rc == 0)
        rc = s3_opt_range(st, "copy_part_size", true, 4096, S3_MAX_PART,
                          &p->copy_part_size);
    if (rc == 0)
        rc = s3_opt_range(st, "upload_concurrency", false, 1,
                          S3_MAX_THREADS, &conc);
    if (rc == 0)
        rc = s3_opt_range(st, "max_conns", false, 1, 4096, max_conns);
    if (rc == 0)
        rc = s3_opt_range(st, "connect_timeout_ms", false, 1, 3600000,
                          &p->connect_timeout_ms);
    if (rc == 0)
        rc = s3_opt_range(st, "timeout_ms", false, 1, 86400000,
                          &p->timeout_ms);
    if (rc == 0)
        rc = s3_take_transfer(st, p);
    p->upload_concurrency = (unsigned)conc;
    return rc;
}

/* ---- open / close ---- */

static void s3_aborts_close(struct s3_priv *p);   /* the write side */

static void s3_close(struct tfs_store *st)
{
    struct s3_priv *p = tfs_store_priv(st);

    tfs_s3_bal_stop(&p->bal);
    s3_aborts_close(p);
    pthread_mutex_destroy(&p->abort_lock);
    tfs_s3_pool_cleanup(p);
    tfs_s3_bal_cleanup(&p->bal);
    tfs_s3_keycache_cleanup(&p->keys);
    tfs_free(p->bucket);
    tfs_free(p->root);
    tfs_free(p->ident);
    tfs_free(p->region);
    tfs_free(p->ca_file);
    tfs_free(p->access_key);
    s3_wipe(p->secret_key);
    s3_wipe(p->session_token);
}

static int s3_open_conf(struct tfs_store *st, struct s3_priv *p,
                        uint64_t *max_conns)
{
    struct s3_conf c;
    int rc = s3_conf_load(st, &c);

    if (rc == 0)
        rc = s3_refuse_secret_opts(st);
    if (rc == 0)
        rc = s3_take_numbers(st, p, max_conns);
    if (rc == 0)
        rc = tfs_store_opt_bool(st, "tls_verify", &p->tls_verify);
    p->raw_get = !s3_proxy_env();
    if (rc == 0)
        rc = tfs_store_opt_bool(st, "raw_get", &p->raw_get);
    if (rc == 0)
        rc = tfs_store_opt_bool(st, "anonymous", &p->anonymous);
    if (rc == 0)
        rc = s3_where(st, p, &c);
    if (rc == 0)
        rc = s3_creds(p, &c);
    if (rc == 0 && s3_env("AWS_CA_BUNDLE") != NULL) {
        p->ca_file = tfs_strdup(s3_env("AWS_CA_BUNDLE"));
        rc = p->ca_file != NULL ? 0 : -ENOMEM;
    }
    s3_conf_cleanup(&c);
    return rc;
}

/* a then b in one new string; NULL: out of memory. */
static char *s3_concat(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    char *s = tfs_malloc(la + lb + 1);

    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

static int s3_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * "s3://BASE/bucket/root", BASE the endpoint's base URL and path; with
 * several endpoints, those of each, sorted, joined by ',': the same
 * whatever order they are listed in and however many are up.
 */
static int s3_make_ident(struct s3_priv *p)
{
    char *base[S3_MAX_ENDPOINTS] = {NULL};
    unsigned n = p->bal.n;
    struct tfs_buf b;
    int rc = 0;

    for (unsigned i = 0; i < n && rc == 0; i++) {
        base[i] = s3_concat(p->bal.ep[i].base_url, p->bal.ep[i].base_path);
        rc = base[i] != NULL ? 0 : -ENOMEM;
    }
    tfs_buf_init(&b, 0);
    if (rc == 0) {
        qsort(base, n, sizeof(base[0]), s3_cmp_str);
        tfs_buf_puts(&b, "s3://");
        for (unsigned i = 0; i < n; i++)
            tfs_buf_printf(&b, "%s%s", i > 0 ? "," : "", base[i]);
        tfs_buf_printf(&b, "/%s/%s", p->bucket, p->root);
        p->ident = tfs_buf_steal(&b);
    }
    tfs_buf_cleanup(&b);
    for (unsigned i = 0; i < n; i++)
        tfs_free(base[i]);
    return p->ident ? 0 : -ENOMEM;
}

static int s3_open(struct tfs_store *st, const char *location)
{
    struct s3_priv *p = tfs_store_priv(st);
    uint64_t max_conns = 16;
    int rc;

    p->tls_verify = true;
    pthread_mutex_init(&p->abort_lock, NULL);
    tfs_s3_keycache_init(&p->keys);
    rc = s3_parse_location(p, location);
    if (rc == 0)
        rc = s3_open_conf(st, p, &max_conns);
    if (rc == 0)
        rc = tfs_s3_pool_init(p, (unsigned)max_conns);
    if (rc == 0)
        rc = s3_make_ident(p);
    if (rc == 0 && p->bal.n > 1)
        rc = tfs_s3_bal_start(&p->bal, tfs_s3_probe, p);
    if (rc < 0)
        s3_close(st);                   /* the core will not call close */
    return rc;
}

/* The identity: the endpoint too, since bucket names repeat across
 * servers. */
static const char *s3_identity(struct tfs_store *st)
{
    struct s3_priv *p = tfs_store_priv(st);

    return p->ident;
}

/* ---- helpers ---- */

/* root + key into full[S3_KEY_MAX + 1]. */
static int s3_full_key(const struct s3_priv *p, const char *key, char *full)
{
    size_t rl = strlen(p->root);
    size_t kl = strlen(key);

    if (rl + kl > S3_KEY_MAX)
        return tfs_err(TFS_EBADKEY, "key '%.40s...' is longer than %d "
                       "bytes with the store prefix", key, S3_KEY_MAX);
    memcpy(full, p->root, rl);
    memcpy(full + rl, key, kl + 1);
    return 0;
}

/* HEAD a full key. */
static int s3_head(struct s3_priv *p, const char *full, struct tfs_stat *out)
{
    struct s3_req req = {.method = "HEAD", .key = full};
    struct s3_resp resp;
    int rc = tfs_s3_request(p, &req, &resp);

    if (rc < 0)
        return rc;
    if (!resp.has_length || resp.etag[0] == '\0')
        return tfs_err(TFS_EPROTO, "S3 HEAD answer without Content-Length "
                       "or ETag (HEAD /%s/%s)", p->bucket, full);
    out->size = resp.length;
    out->mtime_ns = resp.mtime_ns;
    memcpy(out->version, resp.etag, sizeof(out->version));
    return 0;
}

/* ---- read side ---- */

static int s3_stat(struct tfs_store *st, const char *key,
                   struct tfs_stat *out)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    int rc = s3_full_key(p, key, full);

    return rc < 0 ? rc : s3_head(p, full, out);
}

/* Check a 2xx answer to a GET of len bytes at off; *nread on success. */
static int s3_read_check(const struct s3_priv *p, const char *full,
                         const struct s3_resp *r, uint64_t off, size_t len,
                         size_t *nread)
{
    uint64_t want;                      /* bytes the answer promised */

    if (r->status == 200 && off != 0)
        return tfs_err(TFS_EPROTO, "S3 ignored the Range of a GET at "
                       "offset %" PRIu64 " (GET /%s/%s)", off, p->bucket,
                       full);
    if (r->status == 200) {
        want = r->has_length ? r->length : r->nbody; /* whole object */
    } else if (r->status == 206 && r->has_range && r->range_first == off) {
        want = r->range_last - r->range_first + 1;
    } else {
        return tfs_err(TFS_EPROTO, "S3 answered a ranged GET with HTTP %ld"
                       "%s (GET /%s/%s)", r->status, r->status == 206 ?
                       " and a bad Content-Range" : "", p->bucket, full);
    }
    if (r->nbody < TFS_MIN(want, (uint64_t)len))
        return tfs_err(-ECONNRESET, "S3 body ended after %zu of %" PRIu64
                       " bytes (GET /%s/%s)", r->nbody, want, p->bucket,
                       full);
    /* short only at the end of the object, as the store contract says */
    if (r->status == 206 && want < len && r->range_total != UINT64_MAX &&
        r->range_last + 1 < r->range_total)
        return tfs_err(TFS_EPROTO, "S3 sent bytes %" PRIu64 "-%" PRIu64
                       " of %" PRIu64 " for a longer range (GET /%s/%s)",
                       r->range_first, r->range_last, r->range_total,
                       p->bucket, full);
    *nread = r->nbody;
    return 0;
}

/*
 * A GET, sent again (at most twice) when answered HTTP 500: RGW fails a
 * GET whose object is replaced while it reads it (op status ECANCELED),
 * and a second look finds the new object whole.  GET is idempotent and
 * nothing reached the caller's buffer, so this cannot mix versions.
 */
static int s3_get(struct s3_priv *p, const struct s3_req *req,
                  struct s3_resp *resp)
{
    int rc = tfs_s3_request(p, req, resp);

    for (int i = 0; i < 2 && rc == TFS_ESERVER && resp->status == 500 &&
                    tfs_deadline_left_ms(1) > 0; i++) {
        tfs_sleep_ns(1000000u << (2 * i));      /* 1 ms, then 4 ms */
        rc = tfs_s3_request(p, req, resp);
    }
    return rc;
}

/* 32 hex digits into 16 bytes; false for anything else ("...-N"). */
static bool s3_etag_md5(const char *etag, uint8_t md5[16])
{
    for (int i = 0; i < 32; i++) {
        if (!isxdigit((unsigned char)etag[i]))
            return false;
    }
    if (etag[32] != '\0')
        return false;
    for (int i = 0; i < 16; i++) {
        char hex[3] = {etag[2 * i], etag[2 * i + 1], '\0'};

        md5[i] = (uint8_t)strtoul(hex, NULL, 16);
    }
    return true;
}

/*
 * What a GET answer says about the whole object: its size, and its MD5
 * when the ETag is one (single-part upload, no SSE-KMS/SSE-C; RGW 16
 * returns no x-amz-checksum-* and no Content-MD5, docs/cache.md).
 */
static void s3_read_info(const struct s3_resp *r, struct tfs_read_info *info)
{
    if (r->status == 200 && r->has_length) {
        info->obj_size = r->length;
        info->have |= TFS_RINFO_SIZE;
    } else if (r->status == 206 && r->has_range &&
               r->range_total != UINT64_MAX) {
        info->obj_size = r->range_total;
        info->have |= TFS_RINFO_SIZE;
    }
    if (!r->etag_not_md5 && s3_etag_md5(r->etag, info->md5))
        info->have |= TFS_RINFO_MD5;
}

static int s3_read(struct tfs_store *st, const char *key, void *buf,
                   size_t len, uint64_t off, const char *if_version,
                   size_t *nread, struct tfs_read_info *info)
{
    struct s3_priv *p = tfs_store_priv(st);
    struct s3_req req = {.method = "GET", .dst = buf, .dst_len = len,
                         .dst_prefix = off == 0, .dst_iov = info->iov,
                         .dst_iovcnt = info->iovcnt, .land = info->land};
    char full[S3_KEY_MAX + 1];
    char range[64];
    char match[TFS_VERSION_MAX + 2];
    struct s3_resp resp;
    int rc = s3_full_key(p, key, full);

    if (rc < 0)
        return rc;
    if (len == 0) {
        *nread = 0;
        return 0;
    }
    if (off > UINT64_MAX - len)
        return tfs_err(-EINVAL, "read range past 2^64 ('%s')", key);
    req.key = full;
    /* The whole object at a known version: no range (the server's
       answer is then a 200 of exactly len bytes, or 412).  A longer
       object still fills only len (dst_prefix), a shorter one comes back
       short, as a ranged read would. */
    if (!(info->have & TFS_RINFO_WHOLE) || off != 0 || if_version == NULL) {
        snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off,
                 off + len - 1);
        tfs_s3_req_hdr(&req, "range", range);
    }
    if (if_version != NULL) {
        snprintf(match, sizeof(match), "\"%s\"", if_version);
        tfs_s3_req_hdr(&req, "if-match", match);
    }
    rc = s3_get(p, &req, &resp);
    if (rc < 0 && resp.status == 416) {
        tfs_errdetail_clear();          /* at or past the end: 0 bytes */
        *nread = 0;
        return 0;
    }
    if (rc < 0)
        return rc;
    rc = s3_read_check(p, full, &resp, off, len, nread);
    if (rc == 0)
        s3_read_info(&resp, info);
    return rc;
}

/* Count keys a listing left out (NUL in the name); WARN the first time. */
static void s3_list_skipped(struct tfs_store *st, const struct s3_priv *p,
                            const char *full, size_t n)
{
    static atomic_bool warned;

    tfs_store_count_skipped(st, n);
    if (!atomic_exchange(&warned, true))
        tfs_log(TFS_LOG_WARNING, "s3: left %zu key(s) holding NUL (%%00) "
                "out of a listing of /%s/%s; such keys cannot be named "
                "(counted in the store's list_skipped, logged once)", n,
                p->bucket, full);
}

static int s3_list(struct tfs_store *st, const char *prefix,
                   const char *delim, const char *token, size_t max_keys,
                   struct tfs_list_page *page)
{
    struct s3_priv *p = tfs_store_priv(st);
    struct s3_param q[6];
    struct s3_req req = {.method = "GET", .query = q};
    char full[S3_KEY_MAX + 1];
    char max[24];
    struct s3_resp resp;
    struct tfs_buf xml;
    size_t n = 0;
    size_t skipped = 0;
    int rc = s3_full_key(p, prefix, full);

    if (rc < 0)
        return rc;
    snprintf(max, sizeof(max), "%zu", max_keys);
    q[n++] = (struct s3_param){"list-type", "2"};
    q[n++] = (struct s3_param){"max-keys", max};
    q[n++] = (struct s3_param){"encoding-type", "url"};
    if (full[0] != '\0')
        q[n++] = (struct s3_param){"prefix", full};
    if (delim != NULL)
        q[n++] = (struct s3_param){"delimiter", delim};
    if (token != NULL)
        q[n++] = (struct s3_param){"continuation-token", token};
    req.n_query = n;
    tfs_buf_init(&xml, S3_XML_MAX);
    req.xml = &xml;
    rc = tfs_s3_request(p, &req, &resp);
    if (rc == 0)
        rc = tfs_s3_xml_parse_list_ex(xml.p ? xml.p : "", xml.len,
                                      p->root, page, &skipped);
    if (rc == 0 && skipped > 0)
        s3_list_skipped(st, p, full, skipped);
    if (rc == TFS_EPROTO || rc == TFS_ETOOBIG)
        tfs_err(rc, "%s ListObjectsV2 answer (GET /%s?prefix=%s, HTTP %ld)",
                rc == TFS_EPROTO ? "malformed" : "oversized", p->bucket,
                full, resp.status);
    tfs_buf_cleanup(&xml);
    return rc;
}

/* ---- write side: multipart engine (uploads and copies) ---- */

struct s3_mpu {
    struct s3_priv          *p;
    const char              *key;       /* full key of the new object */
    char                     upload_id[S3_UPLOAD_ID_MAX];
    const struct tfs_source *src;       /* upload: parts come from here */
    const char              *copy_src;  /* copy: "bucket/key", encoded */
    const char              *copy_if;   /* copy: "\"etag\"" of the source */
    uint64_t                 len;       /* bytes of the whole object */
    uint64_t                 part_size;
    unsigned                 n_parts;
    unsigned                 num_base;  /* part i is number num_base+i+1
                                           (0, but for s3_mpu_part_op) */
    char                   (*etags)[TFS_VERSION_MAX]; /* [n_parts] */
    atomic_uint              next;      /* next part index to take */
    atomic_bool              failed;    /* stop taking parts */
    uint64_t                 deadline_ns; /* the caller's, for workers */
    pthread_mutex_t          lock;
    int                      rc;        /* first error; under lock */
    char                     detail[512]; /* its detail; under lock */
};

/* The part size: at least min_part, and few enough parts for S3. */
static uint64_t s3_part_size(uint64_t len, uint64_t min_part)
{
    uint64_t fit = (len + S3_MAX_PARTS - 1) / S3_MAX_PARTS;

    return TFS_MAX(min_part, fit);
}

/*
 * The upload part size when the user gave none: one part per upload thread,
 * rounded up to a MiB, between 8 MiB and 64 MiB.  Every part is a request
 * the server handles on its own (on Ceph RGW, its own head object and
 * multipart bookkeeping), so fewer, larger parts cost it less; against a
 * local RGW on two cores, 64 MiB parts put 256 MiB 15-20% faster than
 * 8 MiB parts (docs/s3.md).  64 MiB keeps a retried part cheap.
 */
static uint64_t s3_upload_part_size(const struct s3_priv *p, uint64_t len)
{
    uint64_t per;

    if (!p->part_size_auto)
        return s3_part_size(len, p->part_size);
    per = (len + p->upload_concurrency - 1) / p->upload_concurrency;
    per = (per + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
    per = TFS_MAX(S3_AUTO_PART_MIN, TFS_MIN(per, S3_AUTO_PART_MAX));
    return s3_part_size(len, per);
}

/* Record the first failure of any thread, with its detail. */
static void s3_mpu_fail(struct s3_mpu *m, int rc)
{
    pthread_mutex_lock(&m->lock);
    if (m->rc == 0) {
        m->rc = rc;
        snprintf(m->detail, sizeof(m->detail), "%s", tfs_errdetail());
    }
    pthread_mutex_unlock(&m->lock);
    atomic_store(&m->failed, true);
}

static int s3_mpu_initiate(struct s3_mpu *m)
{
    struct s3_param q = {"uploads", ""};
    struct s3_req req = {.method = "POST", .key = m->key, .query = &q,
                         .n_query = 1};
    struct s3_result res;
    struct s3_resp resp;
    struct tfs_buf xml;
    int rc;

    tfs_buf_init(&xml, S3_ERRBODY_MAX);
    req.xml = &xml;
    rc = tfs_s3_request(m->p, &req, &resp);
    if (rc == 0)
        rc = tfs_s3_xml_parse_result(xml.p ? xml.p : "", xml.len,
                                     "InitiateMultipartUploadResult", &res);
    if (rc == 0 && (res.is_error || res.upload_id[0] == '\0'))
        rc = TFS_EPROTO;
    if (rc == TFS_EPROTO || rc == TFS_ETOOBIG)
        tfs_err(rc, "bad InitiateMultipartUpload answer (POST /%s/%s)",
                m->p->bucket, m->key);
    if (rc == 0)
        memcpy(m->upload_id, res.upload_id, sizeof(m->upload_id));
    tfs_buf_cleanup(&xml);
    return rc;
}

/* Check a 200 body that may hold an <Error>; fill etag from it. */
static int s3_check_result(struct s3_priv *p, const char *method,
                           const char *key, const struct tfs_buf *xml,
                           const char *root, char *etag)
{
    struct s3_result res;
    int rc = tfs_s3_xml_parse_result(xml->p ? xml->p : "", xml->len, root,
                                     &res);

    if (rc < 0)
        return tfs_err(rc, "bad %s answer (%s /%s/%s, HTTP 200)", root,
                       method, p->bucket, key);
    if (res.is_error)
        return tfs_s3_map_status(p, method, key, 200, &res.err);
    if (etag != NULL)
        memcpy(etag, res.etag, TFS_VERSION_MAX);
    return 0;
}

/* Upload or copy part i (0-based). */
static int s3_mpu_part(struct s3_mpu *m, unsigned i)
{
    uint64_t off = (uint64_t)i * m->part_size;
    uint64_t len = TFS_MIN(m->part_size, m->len - off);
    char num[16];
    char range[64];
    struct s3_param q[2] = {{"partNumber", num}, {"uploadId", m->upload_id}};
    struct s3_req req = {.method = "PUT", .key = m->key, .query = q,
                         .n_query = 2};
    struct s3_resp resp;
    struct tfs_buf xml;
    int rc;

    snprintf(num, sizeof(num), "%u", m->num_base + i + 1);
    tfs_buf_init(&xml, S3_ERRBODY_MAX);
    if (m->src != NULL) {
        req.body = (struct s3_body){.src = m->src, .off = off, .len = len};
    } else {
        snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off,
                 off + len - 1);
        tfs_s3_req_hdr(&req, "x-amz-copy-source", m->copy_src);
        tfs_s3_req_hdr(&req, "x-amz-copy-source-range", range);
        tfs_s3_req_hdr(&req, "x-amz-copy-source-if-match", m->copy_if);
        req.xml = &xml;
    }
    rc = tfs_s3_request(m->p, &req, &resp);
    if (rc == 0 && m->src == NULL)
        rc = s3_check_result(m->p, "PUT", m->key, &xml, "CopyPartResult",
                             m->etags[i]);
    else if (rc == 0)
        memcpy(m->etags[i], resp.etag, TFS_VERSION_MAX);
    if (rc == 0 && m->etags[i][0] == '\0')
        rc = tfs_err(TFS_EPROTO, "S3 gave no ETag for part %u (PUT /%s/%s)",
                     m->num_base + i + 1, m->p->bucket, m->key);
    tfs_buf_cleanup(&xml);
    return rc;
}

/*
 * Sleep before retry n of a part: full jitter under a cap doubling from
 * S3_PART_BACKOFF_MS to S3_PART_BACKOFF_MAX_MS.  False, without sleeping,
 * when the thread's deadline would pass first.
 */
static bool s3_part_backoff(unsigned n)
{
    uint64_t cap_ms = TFS_MIN((uint64_t)S3_PART_BACKOFF_MS << TFS_MIN(n, 16u),
                              S3_PART_BACKOFF_MAX_MS);
    uint64_t ns = tfs_rand_u64() % (cap_ms * 1000000u + 1);
    uint64_t dl = tfs_deadline_get();

    if (dl != 0 && tfs_now_ns() + ns >= dl)
        return false;
    tfs_sleep_ns(ns);
    return true;
}

/*
 * Part i, sent again while it fails with a retryable error, up to
 * part_retries times, so one lost connection costs one part, not the
 * whole upload (the parts already sent stay).
 */
static int s3_mpu_part_retried(struct s3_mpu *m, unsigned i)
{
    int rc = s3_mpu_part(m, i);

    for (unsigned n = 0; rc < 0 && tfs_err_is_retryable(rc) &&
                         n < m->p->part_retries &&
                         !atomic_load(&m->failed); n++) {
        TFS_DEBUG("s3: part %u of /%s/%s failed: %s (%s); retry %u", i + 1,
                  m->p->bucket, m->key, tfs_strerror(rc), tfs_errdetail(),
                  n + 1);
        if (!s3_part_backoff(n))
            break;
        atomic_fetch_add(&m->p->n_part_retries, 1);
        rc = s3_mpu_part(m, i);
    }
    return rc;
}

static void *s3_mpu_worker(void *arg)
{
    struct s3_mpu *m = arg;
    uint64_t prev = tfs_deadline_set(m->deadline_ns);

    while (!atomic_load(&m->failed)) {
        unsigned i = atomic_fetch_add(&m->next, 1);
        int rc;

        if (i >= m->n_parts)
            break;
        rc = s3_mpu_part_retried(m, i);
        if (rc < 0)
            s3_mpu_fail(m, rc);
    }
    tfs_deadline_set(prev);
    return NULL;
}

/* Run the parts on upload_concurrency threads, this one included. */
static int s3_mpu_run(struct s3_mpu *m)
{
    unsigned n = TFS_MIN(m->p->upload_concurrency, m->n_parts);
    pthread_t tid[S3_MAX_THREADS];
    unsigned started = 0;

    m->deadline_ns = tfs_deadline_get();
    for (unsigned i = 1; i < n; i++) {
        if (pthread_create(&tid[started], NULL, s3_mpu_worker, m) != 0)
            break;                      /* go on with fewer threads */
        started++;
    }
    s3_mpu_worker(m);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (m->rc < 0)
        tfs_errdetail_set("%s", m->detail);
    return m->rc;
}

static int s3_mpu_complete(struct s3_mpu *m)
{
    struct s3_param q = {"uploadId", m->upload_id};
    struct s3_req req = {.method = "POST", .key = m->key, .query = &q,
                         .n_query = 1};
    struct tfs_buf body;
    struct tfs_buf xml;
    struct s3_resp resp;
    int rc;

    tfs_buf_init(&body, 0);
    tfs_buf_init(&xml, S3_ERRBODY_MAX);
    rc = tfs_buf_puts(&body, "<CompleteMultipartUpload>");
    for (unsigned i = 0; i < m->n_parts && rc == 0; i++)
        rc = tfs_buf_printf(&body, "<Part><PartNumber>%u</PartNumber>"
                            "<ETag>\"%s\"</ETag></Part>", i + 1,
                            m->etags[i]);
    if (rc == 0)
        rc = tfs_buf_puts(&body, "</CompleteMultipartUpload>");
    req.body = (struct s3_body){.mem = tfs_buf_str(&body), .len = body.len};
    req.xml = &xml;
    if (rc == 0)
        rc = tfs_s3_request(m->p, &req, &resp);
    if (rc == 0)
        rc = s3_check_result(m->p, "POST", m->key, &xml,
                             "CompleteMultipartUploadResult", NULL);
    tfs_buf_cleanup(&body);
    tfs_buf_cleanup(&xml);
    return rc;
}

/*
 * Aborting.  The parts of a failed upload cost storage until it is
 * aborted, and the failure that ended the upload (the server down, 503s,
 * the deadline spent) often ends the abort too.  So an abort has a
 * deadline of its own, and one that fails is kept (at most
 * S3_ABORTS_MAX, the oldest dropped with a warning) and tried again
 * after the next multipart upload that completes, and at close.  (One
 * try inline: more would hold an upload thread while the server is
 * away.)  Only a process killed with uploads in flight leaves parts
 * behind: a lifecycle rule (AbortIncompleteMultipartUpload) covers those
 * (docs/s3.md).
 */
#define S3_ABORTS_MAX 256
#define S3_ABORT_MS   5000ull

/* One DELETE ?uploadId: 0 when the upload is gone (or never was). */
static int s3_abort_once(struct s3_priv *p, const char *key, const char *id)
{
    struct s3_param q = {"uploadId", id};
    struct s3_req req = {.method = "DELETE", .key = key, .query = &q,
                         .n_query = 1};
    struct s3_resp resp;
    uint64_t ms = TFS_MIN(p->timeout_ms ? p->timeout_ms : S3_ABORT_MS,
                          S3_ABORT_MS);
    uint64_t prev = tfs_deadline_set(tfs_now_ns() + ms * 1000000u);
    int rc = tfs_s3_request(p, &req, &resp);

    tfs_deadline_set(prev);
    return rc == -ENOENT ? 0 : rc;
}

/* Keep a (its strings owned by the list from here on) for a later try. */
static void s3_abort_keep(struct s3_priv *p, struct s3_abort a)
{
    pthread_mutex_lock(&p->abort_lock);
    if (p->aborts == NULL)
        p->aborts = tfs_calloc(S3_ABORTS_MAX, sizeof(*p->aborts));
    if (p->aborts == NULL || a.key == NULL || a.upload_id == NULL) {
        pthread_mutex_unlock(&p->abort_lock);
        TFS_WARN("s3: cannot keep the abort of upload %s of /%s/%s for "
                 "later (out of memory): its parts stay",
                 a.upload_id ? a.upload_id : "?", p->bucket,
                 a.key ? a.key : "?");
        tfs_free(a.key);
        tfs_free(a.upload_id);
        return;
    }
    if (p->n_aborts == S3_ABORTS_MAX) {
        TFS_WARN("s3: %d multipart uploads wait for their abort; upload "
                 "%s of /%s/%s is given up (its parts stay)", S3_ABORTS_MAX,
                 p->aborts[0].upload_id, p->bucket, p->aborts[0].key);
        tfs_free(p->aborts[0].key);
        tfs_free(p->aborts[0].upload_id);
        memmove(p->aborts, p->aborts + 1,
                (S3_ABORTS_MAX - 1) * sizeof(*p->aborts));
        p->n_aborts--;
    }
    p->aborts[p->n_aborts++] = a;
    pthread_mutex_unlock(&p->abort_lock);
}

static void s3_abort_later(struct s3_priv *p, const char *key,
                           const char *id)
{
    s3_abort_keep(p, (struct s3_abort){tfs_strdup(key), tfs_strdup(id)});
}

/*
 * Try the kept aborts once each, stopping at the first that fails (the
 * server is not back yet).  Each entry is taken off the list before its
 * try and owned by this thread, put back only if the try fails; one
 * thread drains at a time (the others go on with their uploads).
 */
static void s3_aborts_retry(struct s3_priv *p)
{
    pthread_mutex_lock(&p->abort_lock);
    if (p->aborts_draining || p->n_aborts == 0) {
        pthread_mutex_unlock(&p->abort_lock);
        return;
    }
    p->aborts_draining = true;
    while (p->n_aborts > 0) {
        struct s3_abort a = p->aborts[--p->n_aborts];   /* the newest */
        int rc;

        pthread_mutex_unlock(&p->abort_lock);
        rc = s3_abort_once(p, a.key, a.upload_id);
        if (rc < 0) {
            s3_abort_keep(p, a);                        /* hands a back */
            pthread_mutex_lock(&p->abort_lock);
            break;
        }
        tfs_free(a.key);
        tfs_free(a.upload_id);
        pthread_mutex_lock(&p->abort_lock);
    }
    p->aborts_draining = false;
    pthread_mutex_unlock(&p->abort_lock);
}

static void s3_aborts_close(struct s3_priv *p)
{
    if (p->n_aborts > 0)
        s3_aborts_retry(p);
    if (p->n_aborts > 0)
        TFS_WARN("s3: %zu failed multipart uploads could not be aborted "
                 "(one: upload %s of /%s/%s); their parts cost storage "
                 "until aborted (docs/s3.md: a lifecycle rule)",
                 p->n_aborts, p->aborts[0].upload_id, p->bucket,
                 p->aborts[0].key);
    for (size_t i = 0; i < p->n_aborts; i++) {
        tfs_free(p->aborts[i].key);
        tfs_free(p->aborts[i].upload_id);
    }
    tfs_free(p->aborts);
    p->aborts = NULL;
    p->n_aborts = 0;
}

/* Abort m's upload, or keep it for later.  The error that failed the
 * upload stays the thread's detail. */
static void s3_mpu_abort(struct s3_mpu *m)
{
    char saved[512];

    snprintf(saved, sizeof(saved), "%s", tfs_errdetail());
    if (s3_abort_once(m->p, m->key, m->upload_id) < 0)
        s3_abort_later(m->p, m->key, m->upload_id);
    tfs_errdetail_set("%s", saved);
}

/*
 * Initiate, run every part (each retried on its own), complete; abort
 * when a part fails for good or runs out of retries.
 */
static int s3_mpu(struct s3_mpu *m)
{
    int rc;

    if ((m->len + m->part_size - 1) / m->part_size > S3_MAX_PARTS ||
        m->part_size > S3_MAX_PART)
        return tfs_err(-EFBIG, "object of %" PRIu64 " bytes is too large "
                       "for S3 (/%s/%s)", m->len, m->p->bucket, m->key);
    m->n_parts = (unsigned)((m->len + m->part_size - 1) / m->part_size);
    m->etags = tfs_calloc(m->n_parts, sizeof(*m->etags));
    if (m->etags == NULL)
        return -ENOMEM;
    pthread_mutex_init(&m->lock, NULL);
    rc = s3_mpu_initiate(m);
    if (rc < 0)
        goto out_free;
    rc = s3_mpu_run(m);
    if (rc == 0)
        rc = s3_mpu_complete(m);
    if (rc < 0)
        s3_mpu_abort(m);
    else
        s3_aborts_retry(m->p);          /* the server answers again */
out_free:
    pthread_mutex_destroy(&m->lock);
    tfs_free(m->etags);
    return rc;
}

/* ---- write side: operations ---- */

static int s3_put_single(struct s3_priv *p, const char *full,
                         const struct tfs_source *src, struct tfs_stat *out)
{
    struct s3_req req = {.method = "PUT", .key = full};
    struct s3_resp resp;
    int rc;

    req.body = (struct s3_body){.src = src, .off = 0, .len = src->len};
    rc = tfs_s3_request(p, &req, &resp);
    if (rc < 0 || out == NULL)
        return rc;
    if (resp.etag[0] == '\0')
        return s3_head(p, full, out);   /* no ETag in the answer: ask */
    out->size = src->len;
    out->mtime_ns = resp.mtime_ns ? resp.mtime_ns : resp.date_ns;
    if (out->mtime_ns == 0)
        out->mtime_ns = tfs_wall_ns() / 1000000000 * 1000000000;
    memcpy(out->version, resp.etag, sizeof(out->version));
    return 0;
}

static int s3_put(struct tfs_store *st, const char *key,
                  const struct tfs_source *src, struct tfs_stat *out)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    struct s3_mpu m = {.p = p, .key = full, .src = src, .len = src->len};
    int rc = s3_full_key(p, key, full);

    if (rc < 0)
        return rc;
    if (src->len < p->multipart_threshold)
        return s3_put_single(p, full, src, out);
    m.part_size = s3_upload_part_size(p, src->len);
    rc = s3_mpu(&m);
    /* the completion body's ETag is empty on RGW 16: ask for the stat */
    if (rc == 0 && out != NULL)
        rc = s3_head(p, full, out);
    return rc;
}

static int s3_remove(struct tfs_store *st, const char *key)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    struct s3_req req = {.method = "DELETE", .key = full};
    struct s3_resp resp;
    int rc = s3_full_key(p, key, full);

    if (rc == 0)
        rc = tfs_s3_request(p, &req, &resp);
    if (rc == -ENOENT && resp.status == 404) {
        tfs_errdetail_clear();          /* already gone: S3 semantics */
        rc = 0;
    }
    return rc;
}

/* "bucket/key" with the key %-encoded, for x-amz-copy-source. */
static int s3_copy_source(const struct s3_priv *p, const char *full,
                          struct tfs_buf *b)
{
    int rc = tfs_buf_printf(b, "%s/", p->bucket);

    return rc < 0 ? rc : tfs_pct_encode(b, full, strlen(full), true);
}

static int s3_copy_single(struct s3_priv *p, const char *dst,
                          const char *source)
{
    struct s3_req req = {.method = "PUT", .key = dst};
    struct s3_resp resp;
    struct tfs_buf xml;
    int rc;

    tfs_buf_init(&xml, S3_ERRBODY_MAX);
    req.xml = &xml;
    tfs_s3_req_hdr(&req, "x-amz-copy-source", source);
    rc = tfs_s3_request(p, &req, &resp);
    if (rc == 0)
        rc = s3_check_result(p, "PUT", dst, &xml, "CopyObjectResult", NULL);
    tfs_buf_cleanup(&xml);
    return rc;
}

static int s3_copy(struct tfs_store *st, const char *src_key,
                   const char *dst_key)
{
    struct s3_priv *p = tfs_store_priv(st);
    char src[S3_KEY_MAX + 1];
    char dst[S3_KEY_MAX + 1];
    char match[TFS_VERSION_MAX + 2];
    struct s3_mpu m = {.p = p, .key = dst, .copy_if = match};
    struct tfs_stat sst;
    struct tfs_buf source;
    int rc = s3_full_key(p, src_key, src);

    if (rc == 0)
        rc = s3_full_key(p, dst_key, dst);
    if (rc == 0)
        rc = s3_head(p, src, &sst);
    if (rc < 0)
        return rc;
    tfs_buf_init(&source, 0);
    rc = s3_copy_source(p, src, &source);
    if (rc == 0 && sst.size <= p->copy_threshold)
        rc = s3_copy_single(p, dst, tfs_buf_str(&source));
    else if (rc == 0) {
        snprintf(match, sizeof(match), "\"%s\"", sst.version);
        m.copy_src = tfs_buf_str(&source);
        m.len = sst.size;
        m.part_size = s3_part_size(sst.size, p->copy_part_size);
        rc = s3_mpu(&m);
    }
    tfs_buf_cleanup(&source);
    return rc;
}

/* ---- write side: multipart uploads part by part (the eager upload) ---- */

#define S3_EAGER_PART (16u << 20)       /* part_size when none was given */

_Static_assert(TFS_UPLOAD_ID_MAX == S3_UPLOAD_ID_MAX,
               "an upload id fits the public buffer");

/*
 * The part size of an upload whose length is not known yet: the
 * part_size option when given, else 16 MiB (puts scale theirs with the
 * object, 8 to 64 MiB; here the length is unknown, and a smaller part
 * leaves less to send after the last write).
 */
static uint64_t s3_part_size_op(struct tfs_store *st)
{
    const struct s3_priv *p = tfs_store_priv(st);

    return p->part_size_auto ? S3_EAGER_PART : p->part_size;
}

static int s3_mpu_create_op(struct tfs_store *st, const char *key,
                            char *upload_id)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    struct s3_mpu m = {.p = p, .key = full};
    int rc = s3_full_key(p, key, full);

    if (rc == 0)
        rc = s3_mpu_initiate(&m);
    if (rc == 0)
        memcpy(upload_id, m.upload_id, TFS_UPLOAD_ID_MAX);
    return rc;
}

/* Part part_no, the whole of src, with the retries a put's parts get. */
static int s3_mpu_part_op(struct tfs_store *st, const char *key,
                          const char *upload_id, unsigned part_no,
                          const struct tfs_source *src, char *etag)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    char tag[1][TFS_VERSION_MAX];
    struct s3_mpu m = {.p = p, .key = full, .src = src, .len = src->len,
                       .part_size = src->len, .n_parts = 1,
                       .num_base = part_no - 1, .etags = tag};
    int rc = s3_full_key(p, key, full);

    if (rc < 0)
        return rc;
    if (part_no > S3_MAX_PARTS || src->len > S3_MAX_PART || src->len == 0)
        return tfs_err(-EFBIG, "part %u of %" PRIu64 " bytes is out of S3's "
                       "bounds (/%s/%s)", part_no, src->len, p->bucket, full);
    snprintf(m.upload_id, sizeof(m.upload_id), "%s", upload_id);
    tag[0][0] = '\0';
    rc = s3_mpu_part_retried(&m, 0);
    if (rc == 0)
        memcpy(etag, tag[0], TFS_VERSION_MAX);
    return rc;
}

/* Complete, then HEAD for out (RGW 16 gives no ETag in the answer). */
static int s3_mpu_complete_op(struct tfs_store *st, const char *key,
                              const char *upload_id,
                              const char (*etags)[TFS_VERSION_MAX],
                              unsigned n_parts, struct tfs_stat *out)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    struct s3_mpu m = {.p = p, .key = full, .n_parts = n_parts,
                       .etags = (char (*)[TFS_VERSION_MAX])etags};
    int rc = s3_full_key(p, key, full);

    if (rc < 0)
        return rc;
    snprintf(m.upload_id, sizeof(m.upload_id), "%s", upload_id);
    rc = s3_mpu_complete(&m);
    if (rc == 0)
        s3_aborts_retry(p);             /* the server answers again */
    if (rc == 0 && out != NULL)
        rc = s3_head(p, full, out);
    return rc;
}

static int s3_mpu_abort_op(struct tfs_store *st, const char *key,
                           const char *upload_id)
{
    struct s3_priv *p = tfs_store_priv(st);
    char full[S3_KEY_MAX + 1];
    int rc = s3_full_key(p, key, full);

    return rc < 0 ? rc : s3_abort_once(p, full, upload_id);
}

const struct tfs_store_ops tfs_s3_ops = {
    .version   = TFS_STORE_OPS_VERSION,
    .scheme    = "s3",
    .priv_size = sizeof(struct s3_priv),
    .caps      = TFS_SCAP_RANGE | TFS_SCAP_COPY | TFS_SCAP_SCATTER,
    .open      = s3_open,
    .close     = s3_close,
    .stat      = s3_stat,
    .read_ex   = s3_read,
    .list      = s3_list,
    .put       = s3_put,
    .remove    = s3_remove,
    .copy      = s3_copy,
    .rename    = NULL,                  /* the core copies, then removes */
    .identity  = s3_identity,
    .part_size = s3_part_size_op,
    .mpu_create = s3_mpu_create_op,
    .mpu_part  = s3_mpu_part_op,
    .mpu_complete = s3_mpu_complete_op,
    .mpu_abort = s3_mpu_abort_op,
};
