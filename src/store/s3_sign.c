/* SPDX-License-Identifier: MIT */
/*
 * AWS Signature Version 4 for S3, on OpenSSL's SHA-256 and HMAC.
 *
 * We sign ourselves instead of using CURLOPT_AWS_SIGV4 because the curl of
 * Debian 12 (7.88) neither sends x-amz-content-sha256 nor canonicalises the
 * query string, and RGW refuses such requests.  The canonical query built
 * here is also the query put on the wire, so what is signed is what is
 * sent.
 *
 * The file holds: hashing helpers, the canonical query, the canonical
 * request, and the signature with its per-day key cache.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/bytes.h"
#include "store/s3_int.h"

#define SIGN_MAX_ITEMS 16               /* query params or headers */

/* ---- hashing ---- */

static void sign_hex(const unsigned char *in, size_t len, char *out)
{
    tfs_hex_lower(out, in, len);
}

void tfs_s3_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int md_len = 0;

    EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL);
    sign_hex(md, sizeof(md), out);
}

static void sign_hmac(const void *key, size_t key_len, const char *msg,
                      unsigned char out[32])
{
    unsigned int out_len = 32;

    HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg,
         strlen(msg), out, &out_len);
}

void tfs_s3_amz_date(time_t t, char out[17])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* ---- canonical query ---- */

static bool sign_item_less(const char *an, const char *av, const char *bn,
                           const char *bv)
{
    int c = strcmp(an, bn);

    return c < 0 || (c == 0 && strcmp(av, bv) < 0);
}

/* Encode every name and value of q into enc, NUL-separated. */
static int sign_query_encode(struct tfs_buf *enc, const struct s3_param *q,
                             size_t n, size_t *off)
{
    int rc = 0;

    for (size_t i = 0; i < n && rc == 0; i++) {
        off[2 * i] = enc->len;
        rc = tfs_pct_encode(enc, q[i].name, strlen(q[i].name), false);
        if (rc == 0)
            rc = tfs_buf_append(enc, "", 1);
        off[2 * i + 1] = enc->len;
        if (rc == 0)
            rc = tfs_pct_encode(enc, q[i].value, strlen(q[i].value), false);
        if (rc == 0)
            rc = tfs_buf_append(enc, "", 1);
    }
    return rc;
}

int tfs_s3_query(struct tfs_buf *b, const struct s3_param *q, size_t n)
{
    size_t off[2 * SIGN_MAX_ITEMS];
    const char *s[2 * SIGN_MAX_ITEMS];
    struct tfs_buf enc;
    int rc;

    if (n > SIGN_MAX_ITEMS)
        return -EINVAL;
    tfs_buf_init(&enc, 0);
    rc = sign_query_encode(&enc, q, n, off);
    for (size_t i = 0; i < 2 * n && rc == 0; i++)
        s[i] = enc.p + off[i];
    /* insertion sort of (name, value) pairs: n is tiny */
    for (size_t i = 1; i < n && rc == 0; i++) {
        const char *kn = s[2 * i];
        const char *kv = s[2 * i + 1];
        size_t j = i;

        for (; j > 0 && sign_item_less(kn, kv, s[2 * j - 2], s[2 * j - 1]);
             j--) {
            s[2 * j] = s[2 * j - 2];
            s[2 * j + 1] = s[2 * j - 1];
        }
        s[2 * j] = kn;
        s[2 * j + 1] = kv;
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = tfs_buf_printf(b, "%s%s=%s", i ? "&" : "", s[2 * i],
                            s[2 * i + 1]);
    tfs_buf_cleanup(&enc);
    return rc;
}

/* ---- canonical request ---- */

/* Append v without leading/trailing blanks, inner runs as one space. */
static int sign_put_trimmed(struct tfs_buf *b, const char *v)
{
    bool space = false;
    int rc = 0;

    while (*v == ' ' || *v == '\t')
        v++;
    for (; *v != '\0' && rc == 0; v++) {
        if (*v == ' ' || *v == '\t') {
            space = true;
            continue;
        }
        if (space)
            rc = tfs_buf_append(b, " ", 1);
        space = false;
        if (rc == 0)
            rc = tfs_buf_append(b, v, 1);
    }
    return rc;
}

/* Order in->hdrs by name into idx. */
static int sign_sort_hdrs(const struct s3_sign_in *in, size_t *idx)
{
    if (in->n_hdrs > SIGN_MAX_ITEMS)
        return -EINVAL;
    for (size_t i = 0; i < in->n_hdrs; i++) {
        size_t j = i;

        for (; j > 0 && strcmp(in->hdrs[i].name,
                               in->hdrs[idx[j - 1]].name) < 0; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
    return 0;
}

/* Append "a;b;c", the signed header names in order. */
static int sign_put_names(struct tfs_buf *b, const struct s3_sign_in *in,
                          const size_t *idx)
{
    int rc = 0;

    for (size_t i = 0; i < in->n_hdrs && rc == 0; i++)
        rc = tfs_buf_printf(b, "%s%s", i ? ";" : "",
                            in->hdrs[idx[i]].name);
    return rc;
}

int tfs_s3_canonical_request(struct tfs_buf *b, const struct s3_sign_in *in)
{
    size_t idx[SIGN_MAX_ITEMS];
    int rc = sign_sort_hdrs(in, idx);

    if (rc == 0)
        rc = tfs_buf_printf(b, "%s\n%s\n%s\n", in->method, in->uri,
                            in->query ? in->query : "");
    for (size_t i = 0; i < in->n_hdrs && rc == 0; i++) {
        rc = tfs_buf_printf(b, "%s:", in->hdrs[idx[i]].name);
        if (rc == 0)
            rc = sign_put_trimmed(b, in->hdrs[idx[i]].value);
        if (rc == 0)
            rc = tfs_buf_append(b, "\n", 1);
    }
    if (rc == 0)
        rc = tfs_buf_append(b, "\n", 1);
    if (rc == 0)
        rc = sign_put_names(b, in, idx);
    if (rc == 0)
        rc = tfs_buf_printf(b, "\n%s", in->payload_hash);
    return rc;
}

/* ---- signature ---- */

void tfs_s3_keycache_init(struct s3_keycache *kc)
{
    pthread_mutex_init(&kc->lock, NULL);
    kc->day[0] = '\0';
}

void tfs_s3_keycache_cleanup(struct s3_keycache *kc)
{
    OPENSSL_cleanse(kc->key, sizeof(kc->key));
    pthread_mutex_destroy(&kc->lock);
}

/* kDate, kRegion, kService, kSigning of the AWS documentation. */
static void sign_derive_key(const struct s3_sign_in *in, const char *day,
                            unsigned char key[32])
{
    size_t slen = strlen(in->secret_key);
    char k0[4 + 256];
    unsigned char k[32];

    /* secrets are ~40 bytes; tfs_s3_sign refuses any over 256 */
    memcpy(k0, "AWS4", 4);
    memcpy(k0 + 4, in->secret_key, slen);
    sign_hmac(k0, 4 + slen, day, k);
    sign_hmac(k, 32, in->region, k);
    sign_hmac(k, 32, "s3", k);
    sign_hmac(k, 32, "aws4_request", key);
    OPENSSL_cleanse(k0, sizeof(k0));
    OPENSSL_cleanse(k, sizeof(k));
}

/* The signing key of in's day, from the cache when it holds that day. */
static void sign_get_key(const struct s3_sign_in *in, struct s3_keycache *kc,
                         unsigned char key[32])
{
    char day[9];

    memcpy(day, in->amz_date, 8);
    day[8] = '\0';
    if (kc == NULL) {
        sign_derive_key(in, day, key);
        return;
    }
    pthread_mutex_lock(&kc->lock);
    if (strcmp(kc->day, day) != 0) {
        sign_derive_key(in, day, kc->key);
        memcpy(kc->day, day, sizeof(day));
    }
    memcpy(key, kc->key, 32);
    pthread_mutex_unlock(&kc->lock);
}

int tfs_s3_sign(const struct s3_sign_in *in, struct s3_keycache *kc,
                struct tfs_buf *scratch, struct tfs_buf *auth)
{
    size_t idx[SIGN_MAX_ITEMS];
    unsigned char key[32];
    unsigned char sig[32];
    char hash[65];
    char sts[256];
    int rc;

    if (strlen(in->amz_date) != 16 || strlen(in->region) > 64 ||
        strlen(in->secret_key) > 256)
        return -EINVAL;
    tfs_buf_reset(scratch);
    rc = tfs_s3_canonical_request(scratch, in);
    if (rc < 0)
        return rc;
    tfs_s3_sha256_hex(scratch->p, scratch->len, hash);
    snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%.8s/%s/s3/aws4_request"
             "\n%s", in->amz_date, in->amz_date, in->region, hash);
    sign_get_key(in, kc, key);
    sign_hmac(key, sizeof(key), sts, sig);
    OPENSSL_cleanse(key, sizeof(key));
    sign_hex(sig, sizeof(sig), hash);
    rc = tfs_buf_printf(auth, "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/s3/"
                        "aws4_request,SignedHeaders=", in->access_key,
                        in->amz_date, in->region);
    if (rc == 0)
        rc = sign_sort_hdrs(in, idx);
    if (rc == 0)
        rc = sign_put_names(auth, in, idx);
    if (rc == 0)
        rc = tfs_buf_printf(auth, ",Signature=%s", hash);
    return rc;
}
