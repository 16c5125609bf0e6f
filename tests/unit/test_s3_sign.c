/* SPDX-License-Identifier: MIT */
/*
 * SigV4 signing of the s3 store, checked against the four worked examples
 * of AWS's "Signature Calculations for the Authorization Header" page
 * (GET Object with Range, PUT Object, GET Bucket Lifecycle, GET Bucket),
 * plus the canonical query (sorting, RFC 3986 encoding) and the URI
 * encoding of awkward keys.
 */
#include <errno.h>
#include <string.h>

#include "test.h"
#include "store/s3_int.h"

#define EX_AK     "AKIAIOSFODNN7EXAMPLE"
#define EX_SK     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EX_HOST   "examplebucket.s3.amazonaws.com"
#define EX_DATE   "20130524T000000Z"
#define EX_CRED   "AWS4-HMAC-SHA256 Credential=" EX_AK \
                  "/20130524/us-east-1/s3/aws4_request,"

/* Sign in with and without a key cache; both must agree. */
static void sign_check(const struct s3_sign_in *in, const char *want)
{
    struct s3_keycache kc;
    struct tfs_buf scratch;
    struct tfs_buf a1;
    struct tfs_buf a2;

    tfs_s3_keycache_init(&kc);
    tfs_buf_init(&scratch, 0);
    tfs_buf_init(&a1, 0);
    tfs_buf_init(&a2, 0);
    CHECK_OK(tfs_s3_sign(in, NULL, &scratch, &a1));
    CHECK_OK(tfs_s3_sign(in, &kc, &scratch, &a2));
    CHECK_STR(tfs_buf_str(&a1), want);
    CHECK_STR(tfs_buf_str(&a2), want);
    tfs_buf_reset(&a2);
    CHECK_OK(tfs_s3_sign(in, &kc, &scratch, &a2)); /* from the cache */
    CHECK_STR(tfs_buf_str(&a2), want);
    tfs_buf_cleanup(&scratch);
    tfs_buf_cleanup(&a1);
    tfs_buf_cleanup(&a2);
    tfs_s3_keycache_cleanup(&kc);
}

TEST(get_object_range)
{
    /* headers in no particular order: the signer sorts them */
    const struct s3_hdr h[] = {
        {"x-amz-date", EX_DATE},
        {"range", "bytes=0-9"},
        {"host", EX_HOST},
        {"x-amz-content-sha256", S3_EMPTY_SHA256},
    };
    struct s3_sign_in in = {
        .method = "GET", .uri = "/test.txt", .query = "", .hdrs = h,
        .n_hdrs = 4, .payload_hash = S3_EMPTY_SHA256, .amz_date = EX_DATE,
        .region = "us-east-1", .access_key = EX_AK, .secret_key = EX_SK,
    };
    struct tfs_buf creq;
    char hash[65];

    tfs_buf_init(&creq, 0);
    CHECK_OK(tfs_s3_canonical_request(&creq, &in));
    CHECK_STR(tfs_buf_str(&creq),
              "GET\n/test.txt\n\n"
              "host:examplebucket.s3.amazonaws.com\n"
              "range:bytes=0-9\n"
              "x-amz-content-sha256:" S3_EMPTY_SHA256 "\n"
              "x-amz-date:20130524T000000Z\n\n"
              "host;range;x-amz-content-sha256;x-amz-date\n"
              S3_EMPTY_SHA256);
    tfs_s3_sha256_hex(creq.p, creq.len, hash);
    CHECK_STR(hash,
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    tfs_buf_cleanup(&creq);
    sign_check(&in, EX_CRED "SignedHeaders=host;range;x-amz-content-sha256;"
               "x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0"
               "170aba48dd91039c6036bdb41");
}

TEST(put_object)
{
    const char *body = "Welcome to Amazon S3.";
    char body_hash[65];
    struct s3_hdr h[5] = {
        {"date", "Fri, 24 May 2013 00:00:00 GMT"},
        {"host", EX_HOST},
        {"x-amz-content-sha256", body_hash},
        {"x-amz-date", EX_DATE},
        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
    };
    struct tfs_buf uri;
    struct s3_sign_in in = {
        .method = "PUT", .query = "", .hdrs = h, .n_hdrs = 5,
        .payload_hash = body_hash, .amz_date = EX_DATE,
        .region = "us-east-1", .access_key = EX_AK, .secret_key = EX_SK,
    };

    tfs_s3_sha256_hex(body, strlen(body), body_hash);
    CHECK_STR(body_hash,
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    /* the key "test$file.text" as the store encodes a path */
    tfs_buf_init(&uri, 0);
    CHECK_OK(tfs_buf_puts(&uri, "/"));
    CHECK_OK(tfs_pct_encode(&uri, "test$file.text", 14, true));
    CHECK_STR(tfs_buf_str(&uri), "/test%24file.text");
    in.uri = tfs_buf_str(&uri);
    sign_check(&in, EX_CRED "SignedHeaders=date;host;x-amz-content-sha256;"
               "x-amz-date;x-amz-storage-class,Signature=98ad721746da40c64f1"
               "a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
    tfs_buf_cleanup(&uri);
}

/* Sign a bodiless GET of "/" with query q[0..n) of the AWS examples. */
static void bucket_get(const struct s3_param *q, size_t n,
                       const char *want_query, const char *want_sig)
{
    const struct s3_hdr h[] = {
        {"host", EX_HOST},
        {"x-amz-content-sha256", S3_EMPTY_SHA256},
        {"x-amz-date", EX_DATE},
    };
    struct s3_sign_in in = {
        .method = "GET", .uri = "/", .hdrs = h, .n_hdrs = 3,
        .payload_hash = S3_EMPTY_SHA256, .amz_date = EX_DATE,
        .region = "us-east-1", .access_key = EX_AK, .secret_key = EX_SK,
    };
    struct tfs_buf query;
    char want[512];

    tfs_buf_init(&query, 0);
    CHECK_OK(tfs_s3_query(&query, q, n));
    CHECK_STR(tfs_buf_str(&query), want_query);
    in.query = tfs_buf_str(&query);
    snprintf(want, sizeof(want), EX_CRED "SignedHeaders=host;"
             "x-amz-content-sha256;x-amz-date,Signature=%s", want_sig);
    sign_check(&in, want);
    tfs_buf_cleanup(&query);
}

TEST(get_bucket_lifecycle)
{
    const struct s3_param q[] = {{"lifecycle", ""}};

    bucket_get(q, 1, "lifecycle=",
               "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a01367"
               "83543");
}

TEST(list_objects)
{
    /* given out of order: the canonical query sorts them */
    const struct s3_param q[] = {{"prefix", "J"}, {"max-keys", "2"}};

    bucket_get(q, 2, "max-keys=2&prefix=J",
               "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69"
               "dc6f7");
}

static void query_is(const struct s3_param *q, size_t n, const char *want)
{
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_s3_query(&b, q, n));
    CHECK_STR(tfs_buf_str(&b), want);
    tfs_buf_cleanup(&b);
}

TEST(canonical_query)
{
    const struct s3_param list[] = {
        {"prefix", "dir/sub dir/"},
        {"list-type", "2"},
        {"delimiter", "/"},
        {"encoding-type", "url"},
        {"continuation-token", "a b+c=d&e/f~g"},
        {"max-keys", "1000"},
    };
    const struct s3_param dup[] = {{"a", "2"}, {"a", "1"}, {"a", ""}};
    /* "a" < "a-b" < "aB" by name; '=' would misorder a joined sort */
    const struct s3_param names[] = {
        {"aB", "1"}, {"a-b", "2"}, {"a", "3"}, {"B", "4"}, {"x y", "5"},
    };
    const struct s3_param multi[] = {
        {"uploadId", "2~abc/DEF+"}, {"partNumber", "10"},
    };

    query_is(list, 6, "continuation-token=a%20b%2Bc%3Dd%26e%2Ff~g&"
             "delimiter=%2F&encoding-type=url&list-type=2&max-keys=1000&"
             "prefix=dir%2Fsub%20dir%2F");
    query_is(dup, 3, "a=&a=1&a=2");
    query_is(names, 5, "B=4&a=3&a-b=2&aB=1&x%20y=5");
    query_is(multi, 2, "partNumber=10&uploadId=2~abc%2FDEF%2B");
    query_is(NULL, 0, "");
    {
        /* unicode in a value: UTF-8 bytes, uppercase hex */
        const struct s3_param u[] = {{"prefix", "日本/ü"}};
        query_is(u, 1, "prefix=%E6%97%A5%E6%9C%AC%2F%C3%BC");
    }
}

static void uri_is(const char *key, const char *want)
{
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_buf_puts(&b, "/bucket/"));
    CHECK_OK(tfs_pct_encode(&b, key, strlen(key), true));
    CHECK_STR(tfs_buf_str(&b), want);
    tfs_buf_cleanup(&b);
}

TEST(uri_encoding)
{
    uri_is("plain/key.txt", "/bucket/plain/key.txt");
    uri_is("dir/a b.txt", "/bucket/dir/a%20b.txt");
    uri_is("c++/x+y", "/bucket/c%2B%2B/x%2By");
    uri_is("100%/50%25", "/bucket/100%25/50%2525");
    uri_is("日本語/ファイル", "/bucket/%E6%97%A5%E6%9C%AC%E8%AA%9E/"
           "%E3%83%95%E3%82%A1%E3%82%A4%E3%83%AB");
    uri_is("a~b-c_d.e", "/bucket/a~b-c_d.e");
    uri_is("q?x=1&y=#z", "/bucket/q%3Fx%3D1%26y%3D%23z");
    uri_is("dir//double/", "/bucket/dir//double/");
}

TEST(header_values_trimmed)
{
    const struct s3_hdr h[] = {
        {"x-amz-meta-b", "  two   inner  spaces "},
        {"host", "h"},
        {"x-amz-meta-a", "\tt\t"},
    };
    struct s3_sign_in in = {
        .method = "HEAD", .uri = "/k", .query = "", .hdrs = h, .n_hdrs = 3,
        .payload_hash = S3_UNSIGNED_PAYLOAD,
    };
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_s3_canonical_request(&b, &in));
    CHECK_STR(tfs_buf_str(&b), "HEAD\n/k\n\nhost:h\nx-amz-meta-a:t\n"
              "x-amz-meta-b:two inner spaces\n\n"
              "host;x-amz-meta-a;x-amz-meta-b\nUNSIGNED-PAYLOAD");
    tfs_buf_cleanup(&b);
}

TEST(key_cache_follows_the_day)
{
    const struct s3_hdr h[] = {{"host", "h"}};
    struct s3_sign_in in = {
        .method = "GET", .uri = "/", .query = "", .hdrs = h, .n_hdrs = 1,
        .payload_hash = S3_EMPTY_SHA256, .amz_date = "20130524T000000Z",
        .region = "us-east-1", .access_key = EX_AK, .secret_key = EX_SK,
    };
    struct s3_keycache kc;
    struct tfs_buf s;
    struct tfs_buf a;
    struct tfs_buf b;

    tfs_s3_keycache_init(&kc);
    tfs_buf_init(&s, 0);
    tfs_buf_init(&a, 0);
    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_s3_sign(&in, &kc, &s, &a));
    in.amz_date = "20130525T000000Z";   /* next day: a new key */
    CHECK_OK(tfs_s3_sign(&in, &kc, &s, &b));
    CHECK(strcmp(tfs_buf_str(&a), tfs_buf_str(&b)) != 0);
    tfs_buf_reset(&a);
    CHECK_OK(tfs_s3_sign(&in, NULL, &s, &a));
    CHECK_STR(tfs_buf_str(&a), tfs_buf_str(&b));
    CHECK(strstr(tfs_buf_str(&b), "/20130525/us-east-1/s3/") != NULL);
    CHECK(strstr(tfs_buf_str(&b), EX_SK) == NULL);
    tfs_buf_cleanup(&s);
    tfs_buf_cleanup(&a);
    tfs_buf_cleanup(&b);
    tfs_s3_keycache_cleanup(&kc);
}

TEST(helpers_and_limits)
{
    struct s3_param q[17];
    struct s3_hdr h[17];
    struct s3_sign_in in = {
        .method = "GET", .uri = "/", .query = "", .hdrs = h, .n_hdrs = 17,
        .payload_hash = S3_EMPTY_SHA256, .amz_date = EX_DATE,
        .region = "us-east-1", .access_key = EX_AK, .secret_key = EX_SK,
    };
    struct tfs_buf s;
    struct tfs_buf a;
    char out[65];

    tfs_s3_sha256_hex("", 0, out);
    CHECK_STR(out, S3_EMPTY_SHA256);
    tfs_s3_amz_date(1369353600, out);
    CHECK_STR(out, "20130524T000000Z");
    for (int i = 0; i < 17; i++) {
        q[i] = (struct s3_param){"n", "v"};
        h[i] = (struct s3_hdr){"x-amz-meta-x", "v"};
    }
    tfs_buf_init(&s, 0);
    tfs_buf_init(&a, 0);
    CHECK_RC(tfs_s3_query(&s, q, 17), -EINVAL);
    CHECK_RC(tfs_s3_sign(&in, NULL, &s, &a), -EINVAL);
    in.n_hdrs = 1;
    in.amz_date = "2013";
    CHECK_RC(tfs_s3_sign(&in, NULL, &s, &a), -EINVAL);
    tfs_buf_cleanup(&s);
    tfs_buf_cleanup(&a);
}

TESTS(T(get_object_range), T(put_object), T(get_bucket_lifecycle),
      T(list_objects), T(canonical_query), T(uri_encoding),
      T(header_values_trimmed), T(key_cache_follows_the_day),
      T(helpers_and_limits));
TEST_MAIN()
