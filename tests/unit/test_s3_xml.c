/* SPDX-License-Identifier: MIT */
/*
 * The s3 store's XML parsers: ListObjectsV2 (url encoding, paging, common
 * prefixes, the store root), <Error> bodies, the one-element results of
 * multipart uploads and copies (with an <Error> inside a 200), and every
 * way a hostile or broken body must fail: malformed, oversized, DOCTYPE,
 * out of memory.  Also the two date formats S3 uses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "store/s3_int.h"

#define LIST_HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>" \
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

/* A real RGW 16 answer to list-type=2&prefix=enc/&encoding-type=url. */
static const char rgw_list[] =
    LIST_HEAD "<EncodingType>url</EncodingType><Name>tierfs-test</Name>"
    "<Prefix>enc/</Prefix><MaxKeys>1000</MaxKeys>"
    "<IsTruncated>false</IsTruncated>"
    "<Contents><Key>enc%2Fa%20b%2Bc%25d%E6%97%A5%01</Key>"
    "<LastModified>2026-11-29T19:20:33.845Z</LastModified>"
    "<ETag>&quot;9dd4e461268c8034f5c8564e155c67a6&quot;</ETag>"
    "<Size>1</Size><StorageClass>STANDARD</StorageClass>"
    "<Type>Normal</Type></Contents>"
    "<KeyCount>1</KeyCount></ListBucketResult>";

/* AWS style: pretty-printed, a truncated page, prefixes, '+' = space. */
static const char aws_page[] =
    LIST_HEAD "\n"
    "  <Name>bucket</Name>\n"
    "  <Prefix>data%2F</Prefix>\n"
    "  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
    "</NextContinuationToken>\n"
    "  <KeyCount>4</KeyCount>\n"
    "  <MaxKeys>4</MaxKeys>\n"
    "  <Delimiter>%2F</Delimiter>\n"
    "  <EncodingType>url</EncodingType>\n"
    "  <IsTruncated>true</IsTruncated>\n"
    "  <Contents>\n"
    "    <Key>data%2Fmy+file.txt</Key>\n"
    "    <LastModified>2009-10-12T17:50:30.000Z</LastModified>\n"
    "    <ETag>\"fba9dede5f27731c9771645a39863328\"</ETag>\n"
    "    <Size>434234</Size>\n"
    "    <StorageClass>STANDARD</StorageClass>\n"
    "  </Contents>\n"
    "  <Contents>\n"
    "    <Key>data%2Fbig.bin</Key>\n"
    "    <LastModified>2023-01-02T03:04:05Z</LastModified>\n"
    "    <ETag>\"d41d8cd98f00b204e9800998ecf8427e-12\"</ETag>\n"
    "    <Size>5368709121</Size>\n"
    "  </Contents>\n"
    "  <CommonPrefixes><Prefix>data%2Fsub+dir%2F</Prefix></CommonPrefixes>\n"
    "  <CommonPrefixes><Prefix>data%2Fz%2F</Prefix></CommonPrefixes>\n"
    "</ListBucketResult>\n";

TEST(list_rgw_url_encoded)
{
    struct tfs_list_page pg;

    CHECK_OK(tfs_s3_xml_parse_list(rgw_list, strlen(rgw_list), "enc/",
                                   &pg));
    CHECK_EQ(pg.n_entries, 1);
    CHECK_EQ(pg.n_prefixes, 0);
    CHECK(pg.next_token == NULL);
    CHECK_STR(pg.entries[0].key, "a b+c%d\xe6\x97\xa5\x01");
    CHECK_EQ(pg.entries[0].st.size, 1);
    CHECK_STR(pg.entries[0].st.version, "9dd4e461268c8034f5c8564e155c67a6");
    /* 2026-11-29T19:20:33Z, cut to whole seconds */
    CHECK_EQ(pg.entries[0].st.mtime_ns, 1795980033ll * 1000000000);
    tfs_list_page_cleanup(&pg);
    CHECK(pg.entries == NULL && pg.n_entries == 0);
}

TEST(list_truncated_page_with_prefixes)
{
    struct tfs_list_page pg;

    CHECK_OK(tfs_s3_xml_parse_list(aws_page, strlen(aws_page), "data/",
                                   &pg));
    CHECK_EQ(pg.n_entries, 2);
    CHECK_STR(pg.entries[0].key, "my file.txt");
    CHECK_EQ(pg.entries[0].st.size, 434234);
    CHECK_EQ(pg.entries[0].st.mtime_ns, 1255369830ll * 1000000000);
    CHECK_STR(pg.entries[1].key, "big.bin");
    CHECK_EQ(pg.entries[1].st.size, 5368709121ull);
    CHECK_STR(pg.entries[1].st.version,
              "d41d8cd98f00b204e9800998ecf8427e-12");
    CHECK_EQ(pg.n_prefixes, 2);
    CHECK_STR(pg.prefixes[0], "sub dir/");
    CHECK_STR(pg.prefixes[1], "z/");
    /* the token is opaque: never decoded */
    CHECK_STR(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    tfs_list_page_cleanup(&pg);
}

static int parse_list_str(const char *body, const char *strip,
                          struct tfs_list_page *pg)
{
    return tfs_s3_xml_parse_list(body, strlen(body), strip, pg);
}

TEST(list_paging_rules)
{
    struct tfs_list_page pg;

    /* truncated, but no token: no way to go on */
    CHECK_RC(parse_list_str(LIST_HEAD "<IsTruncated>true</IsTruncated>"
                            "<Contents><Key>a</Key></Contents>"
                            "</ListBucketResult>", "", &pg), TFS_EPROTO);
    CHECK(pg.entries == NULL && pg.next_token == NULL);
    /* a token on the last page is ignored; RGW's token is a clear key */
    CHECK_OK(parse_list_str(LIST_HEAD "<IsTruncated>false</IsTruncated>"
                            "<NextContinuationToken>x</NextContinuationToken>"
                            "</ListBucketResult>", "", &pg));
    CHECK(pg.next_token == NULL);
    CHECK_EQ(pg.n_entries, 0);
    tfs_list_page_cleanup(&pg);
    CHECK_OK(parse_list_str(LIST_HEAD "<IsTruncated>true</IsTruncated>"
                            "<NextContinuationToken>p/a b%2F</Next"
                            "ContinuationToken></ListBucketResult>", "",
                            &pg));
    CHECK_STR(pg.next_token, "p/a b%2F");
    tfs_list_page_cleanup(&pg);
}

TEST(list_root_handling)
{
    struct tfs_list_page pg;

    /* without EncodingType the names are taken as they are */
    CHECK_OK(parse_list_str(LIST_HEAD "<Contents><Key>r/a%20b+c</Key>"
                            "</Contents><Contents><Key>r/</Key></Contents>"
                            "<CommonPrefixes><Prefix>r/d/</Prefix>"
                            "</CommonPrefixes></ListBucketResult>", "r/",
                            &pg));
    CHECK_EQ(pg.n_entries, 1);          /* "r/" itself is dropped */
    CHECK_STR(pg.entries[0].key, "a%20b+c");
    CHECK_EQ(pg.n_prefixes, 1);
    CHECK_STR(pg.prefixes[0], "d/");
    tfs_list_page_cleanup(&pg);
    /* a key outside the root is a protocol error */
    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Key>r/a</Key></Contents>"
                            "<Contents><Key>other/b</Key></Contents>"
                            "</ListBucketResult>", "r/", &pg), TFS_EPROTO);
    CHECK(pg.entries == NULL && pg.n_entries == 0);
    CHECK_RC(parse_list_str(LIST_HEAD "<CommonPrefixes><Prefix>x/</Prefix>"
                            "</CommonPrefixes></ListBucketResult>", "r/",
                            &pg), TFS_EPROTO);
    /* bad escapes under url encoding (%00: list_nul_key_skipped) */
    CHECK_RC(parse_list_str(LIST_HEAD "<EncodingType>url</EncodingType>"
                            "<Contents><Key>a%zz</Key></Contents>"
                            "</ListBucketResult>", "", &pg), TFS_EPROTO);
}

/*
 * R8: a key (or common prefix) that decodes to NUL cannot be named by a
 * C string; it is left out and counted, and the rest of the page, its
 * token included, is returned as usual.
 */
TEST(list_nul_key_skipped)
{
    static const char page[] =
        LIST_HEAD "<EncodingType>url</EncodingType>"
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>tok</NextContinuationToken>"
        "<Contents><Key>d%2Fa</Key><Size>1</Size></Contents>"
        "<Contents><Key>d%2Fb%00c</Key><Size>2</Size></Contents>"
        "<Contents><Key>d%2Fz</Key><Size>3</Size></Contents>"
        "<CommonPrefixes><Prefix>d%2Fp%00%2F</Prefix></CommonPrefixes>"
        "<CommonPrefixes><Prefix>d%2Fq%2F</Prefix></CommonPrefixes>"
        "</ListBucketResult>";
    struct tfs_list_page pg;
    size_t skipped = 99;

    CHECK_OK(tfs_s3_xml_parse_list_ex(page, strlen(page), "d/", &pg,
                                      &skipped));
    CHECK_EQ(skipped, 2);
    CHECK_EQ(pg.n_entries, 2);
    CHECK_STR(pg.entries[0].key, "a");
    CHECK_STR(pg.entries[1].key, "z");
    CHECK_EQ(pg.entries[1].st.size, 3);
    CHECK_EQ(pg.n_prefixes, 1);
    CHECK_STR(pg.prefixes[0], "q/");
    CHECK_STR(pg.next_token, "tok");
    tfs_list_page_cleanup(&pg);
    /* the old entry point still lists the page */
    CHECK_OK(parse_list_str(page, "d/", &pg));
    CHECK_EQ(pg.n_entries, 2);
    tfs_list_page_cleanup(&pg);
}

TEST(list_rgw_control_char_token)
{
    /* RGW 16: the token is its last key in clear, control characters as
     * references XML 1.0 forbids; the page must still parse */
    static const char page[] =
        LIST_HEAD "<EncodingType>url</EncodingType>"
        "<Prefix>p/&#x02;dir/</Prefix><IsTruncated>true</IsTruncated>"
        "<Contents><Key>p%2Fctrl%01char</Key><Size>3</Size></Contents>"
        "<Contents><Key>p%2Fx%1F%09y</Key><Size>4</Size></Contents>"
        "<NextContinuationToken>p/x&#x1f;&#9;y&#1;&#x1F600;&amp;"
        "</NextContinuationToken></ListBucketResult>";
    /* the worst growth of the rewrite: every byte in a short reference */
    char many[4 * 50 + sizeof(LIST_HEAD) + 120];
    struct tfs_list_page pg;
    size_t n;

    CHECK_OK(parse_list_str(page, "p/", &pg));
    CHECK_EQ(pg.n_entries, 2);
    CHECK_STR(pg.entries[0].key, "ctrl\x01" "char");
    CHECK_STR(pg.entries[1].key, "x\x1f\ty");
    CHECK_STR(pg.next_token, "p/x\x1f\ty\x01\xf0\x9f\x98\x80&");
    tfs_list_page_cleanup(&pg);
    n = (size_t)snprintf(many, sizeof(many), LIST_HEAD "<IsTruncated>true"
                         "</IsTruncated><NextContinuationToken>");
    for (int i = 0; i < 50; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "&#%d;",
                              1 + i % 8);
    n += (size_t)snprintf(many + n, sizeof(many) - n,
                          "</NextContinuationToken></ListBucketResult>");
    CHECK_OK(tfs_s3_xml_parse_list(many, n, "", &pg));
    CHECK_EQ(strlen(pg.next_token), 50);
    CHECK_EQ(pg.next_token[49], 2);
    tfs_list_page_cleanup(&pg);
    /* a forbidden reference elsewhere is still an error */
    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Key>&#0;</Key>"
                            "</Contents></ListBucketResult>", "", &pg),
             TFS_EPROTO);
}

TEST(list_bad_fields)
{
    struct tfs_list_page pg;

    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Size>1</Size></Contents>"
                            "</ListBucketResult>", "", &pg), TFS_EPROTO);
    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Key>a</Key><Size>12x"
                            "</Size></Contents></ListBucketResult>", "", &pg),
             TFS_EPROTO);
    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Key>a</Key><LastModified>"
                            "yesterday</LastModified></Contents>"
                            "</ListBucketResult>", "", &pg), TFS_EPROTO);
    CHECK_RC(parse_list_str(LIST_HEAD "<Contents><Key>a</Key><ETag>\""
                            "0123456789012345678901234567890123456789012345"
                            "678901234567890123456789012345678901234567\""
                            "</ETag></Contents></ListBucketResult>", "", &pg),
             TFS_ETOOBIG);
    CHECK(pg.entries == NULL);
}

TEST(malformed_bodies)
{
    struct tfs_list_page pg;
    struct s3_error e;
    struct s3_result r;
    static const char *const bad[] = {
        "",
        "   ",
        "not xml at all",
        LIST_HEAD "<Contents><Key>a</Key>",             /* cut short */
        LIST_HEAD "<Contents><Key>a</Size></Contents></ListBucketResult>",
        LIST_HEAD "</ListBucketResult><Extra/>",
        "<ListBucketResult><Key>&bogus;</Key></ListBucketResult>",
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\x01<a/>",
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        CHECK_RC(parse_list_str(bad[i], "", &pg), TFS_EPROTO);
        CHECK_RC(tfs_s3_xml_parse_error(bad[i], strlen(bad[i]), &e),
                 TFS_EPROTO);
        CHECK_RC(tfs_s3_xml_parse_result(bad[i], strlen(bad[i]),
                                         "CopyObjectResult", &r),
                 TFS_EPROTO);
    }
    /* the wrong root for each parser */
    CHECK_RC(parse_list_str("<Error><Code>X</Code></Error>", "", &pg),
             TFS_EPROTO);
    CHECK_RC(tfs_s3_xml_parse_error(rgw_list, strlen(rgw_list), &e),
             TFS_EPROTO);
    CHECK_STR(e.code, "");
    CHECK_RC(tfs_s3_xml_parse_result(rgw_list, strlen(rgw_list),
                                     "CopyObjectResult", &r), TFS_EPROTO);
}

TEST(doctype_refused)
{
    /* a billion-laughs body: refused at the DOCTYPE, nothing expanded */
    static const char laughs[] =
        "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
        "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
        "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">]>"
        "<Error><Code>&lol3;</Code></Error>";
    static const char ext[] =
        "<?xml version=\"1.0\"?><!DOCTYPE e SYSTEM \"file:///etc/passwd\">"
        "<Error><Code>x</Code></Error>";
    struct s3_error e;

    CHECK_RC(tfs_s3_xml_parse_error(laughs, strlen(laughs), &e), TFS_EPROTO);
    CHECK_RC(tfs_s3_xml_parse_error(ext, strlen(ext), &e), TFS_EPROTO);
}

TEST(oversize)
{
    size_t big = S3_XML_MAX + 1;
    char *body = malloc(big);
    struct tfs_list_page pg;
    struct s3_error e;
    struct s3_result r;
    size_t n;

    CHECK(body != NULL);
    memset(body, ' ', big);
    CHECK_RC(tfs_s3_xml_parse_list(body, big, "", &pg), TFS_ETOOBIG);
    CHECK_RC(tfs_s3_xml_parse_error(body, big, &e), TFS_ETOOBIG);
    CHECK_RC(tfs_s3_xml_parse_result(body, big, "CopyObjectResult", &r),
             TFS_ETOOBIG);
    /* one text field over its 16 KiB cap, in a small body */
    n = (size_t)snprintf(body, big, "<Error><Message>");
    memset(body + n, 'm', 20000);
    n += 20000;
    n += (size_t)snprintf(body + n, big - n, "</Message></Error>");
    CHECK_RC(tfs_s3_xml_parse_error(body, n, &e), TFS_ETOOBIG);
    /* an UploadId that does not fit */
    n = (size_t)snprintf(body, big, "<InitiateMultipartUploadResult>"
                         "<UploadId>");
    memset(body + n, 'u', S3_UPLOAD_ID_MAX);
    n += S3_UPLOAD_ID_MAX;
    n += (size_t)snprintf(body + n, big - n, "</UploadId>"
                          "</InitiateMultipartUploadResult>");
    CHECK_RC(tfs_s3_xml_parse_result(body, n,
                                     "InitiateMultipartUploadResult", &r),
             TFS_ETOOBIG);
    free(body);
}

TEST(error_bodies)
{
    static const char aws[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n"
        "  <Code>NoSuchKey</Code>\n"
        "  <Message>The resource you requested does not exist</Message>\n"
        "  <Resource>/mybucket/myfoto.jpg</Resource>\n"
        "  <RequestId>4442587FB7D0A2F9</RequestId>\n</Error>";
    static const char rgw[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket"
        "</Code><BucketName>nope</BucketName><RequestId>tx0000088d-0065-"
        "default</RequestId><HostId>1c1e-default-default</HostId></Error>";
    char longmsg[600];
    struct s3_error e;

    CHECK_OK(tfs_s3_xml_parse_error(aws, strlen(aws), &e));
    CHECK_STR(e.code, "NoSuchKey");
    CHECK_STR(e.message, "The resource you requested does not exist");
    CHECK_OK(tfs_s3_xml_parse_error(rgw, strlen(rgw), &e));
    CHECK_STR(e.code, "NoSuchBucket");
    CHECK_STR(e.message, "");
    /* an over-long message is cut, not refused */
    snprintf(longmsg, sizeof(longmsg), "<Error><Code>SlowDown</Code>"
             "<Message>%0500d</Message></Error>", 7);
    CHECK_OK(tfs_s3_xml_parse_error(longmsg, strlen(longmsg), &e));
    CHECK_STR(e.code, "SlowDown");
    CHECK_EQ(strlen(e.message), sizeof(e.message) - 1);
}

TEST(multipart_results)
{
    static const char init[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/"
        "2006-03-01/\"><Bucket>tierfs-test</Bucket><Key>k</Key><UploadId>"
        "2~yJRFlgUWkTsaY3pP1gV0pZQb3qhCqdo</UploadId>"
        "</InitiateMultipartUploadResult>";
    /* RGW 16: the completion ETag is empty (so the store HEADs) */
    static const char done_rgw[] =
        "<CompleteMultipartUploadResult><Location>http://h/b/k</Location>"
        "<Bucket>b</Bucket><Key>k</Key><ETag></ETag>"
        "</CompleteMultipartUploadResult>";
    static const char done_aws[] =
        "<CompleteMultipartUploadResult><Location>x</Location><Bucket>b"
        "</Bucket><Key>k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\""
        "</ETag></CompleteMultipartUploadResult>";
    /* a 200 whose body is an error: the upload did NOT complete */
    static const char done_err[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error>"
        "<Code>InternalError</Code><Message>We encountered an internal "
        "error. Please try again.</Message><RequestId>656c76696e672</Request"
        "Id></Error>";
    struct s3_result r;

    CHECK_OK(tfs_s3_xml_parse_result(init, strlen(init),
                                     "InitiateMultipartUploadResult", &r));
    CHECK(!r.is_error);
    CHECK_STR(r.upload_id, "2~yJRFlgUWkTsaY3pP1gV0pZQb3qhCqdo");
    CHECK_OK(tfs_s3_xml_parse_result(done_rgw, strlen(done_rgw),
                                     "CompleteMultipartUploadResult", &r));
    CHECK(!r.is_error);
    CHECK_STR(r.etag, "");
    CHECK_OK(tfs_s3_xml_parse_result(done_aws, strlen(done_aws),
                                     "CompleteMultipartUploadResult", &r));
    CHECK_STR(r.etag, "3858f62230ac3c915f300c664312c11f-9");
    CHECK_OK(tfs_s3_xml_parse_result(done_err, strlen(done_err),
                                     "CompleteMultipartUploadResult", &r));
    CHECK(r.is_error);
    CHECK_STR(r.err.code, "InternalError");
    CHECK(strstr(r.err.message, "internal error") != NULL);
    /* the right body for the wrong question */
    CHECK_RC(tfs_s3_xml_parse_result(done_aws, strlen(done_aws),
                                     "InitiateMultipartUploadResult", &r),
             TFS_EPROTO);
}

TEST(copy_results)
{
    static const char obj[] =
        "<CopyObjectResult><LastModified>2009-10-28T22:32:00.123Z"
        "</LastModified><ETag>\"9b2cf535f27731c974343645a3985328\"</ETag>"
        "</CopyObjectResult>";
    static const char part[] =
        "<CopyPartResult><LastModified>2011-04-11T20:34:56Z</LastModified>"
        "<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>"
        "</CopyPartResult>";
    static const char err[] =
        "<Error><Code>SlowDown</Code><Message>Reduce your request rate."
        "</Message></Error>";
    struct s3_result r;

    CHECK_OK(tfs_s3_xml_parse_result(obj, strlen(obj), "CopyObjectResult",
                                     &r));
    CHECK_STR(r.etag, "9b2cf535f27731c974343645a3985328");
    CHECK_EQ(r.mtime_ns, 1256769120123000000ll);
    CHECK_OK(tfs_s3_xml_parse_result(part, strlen(part), "CopyPartResult",
                                     &r));
    CHECK_STR(r.etag, "9b2cf535f27731c974343645a3985328");
    CHECK_OK(tfs_s3_xml_parse_result(err, strlen(err), "CopyPartResult",
                                     &r));
    CHECK(r.is_error);
    CHECK_STR(r.err.code, "SlowDown");
}

TEST(dates)
{
    int64_t t = 0;

    CHECK_OK(tfs_s3_parse_iso8601("1970-01-01T00:00:00Z", &t));
    CHECK_EQ(t, 0);
    CHECK_OK(tfs_s3_parse_iso8601("2009-10-12T17:50:30.5Z", &t));
    CHECK_EQ(t, 1255369830500000000ll);
    CHECK_OK(tfs_s3_parse_iso8601("2009-10-12T17:50:30.000+00:00", &t));
    CHECK_EQ(t, 1255369830000000000ll);
    CHECK_RC(tfs_s3_parse_iso8601("2009-10-12 17:50:30Z", &t), TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_iso8601("2009-13-12T17:50:30Z", &t), TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_iso8601("2009-10-12T17:50:30", &t), TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_iso8601("", &t), TFS_EPROTO);
    /* found by fuzzing: years whose nanoseconds overflow int64 */
    CHECK_RC(tfs_s3_parse_iso8601("4022-01-01T00:00:00Z", &t), TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_iso8601("-999-01-01T00:00:00Z", &t), TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_http_date("Sun, 06 Nov 9999 08:49:37 GMT", &t),
             TFS_EPROTO);
    CHECK_OK(tfs_s3_parse_iso8601("2200-12-31T23:59:59Z", &t));
    CHECK_OK(tfs_s3_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", &t));
    CHECK_EQ(t, 784111777ll * 1000000000);
    CHECK_OK(tfs_s3_parse_http_date("Sun, 29 Nov 2026 19:20:33 GMT", &t));
    CHECK_EQ(t, 1795980033ll * 1000000000);
    CHECK_RC(tfs_s3_parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", &t),
             TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_http_date("Sun, 06 Nox 1994 08:49:37 GMT", &t),
             TFS_EPROTO);
    CHECK_RC(tfs_s3_parse_http_date("Sun, 06 Nov 1994 08:49:37", &t),
             TFS_EPROTO);
}

/* ---- out of memory: every failing allocation gives -ENOMEM ---- */

TEST(out_of_memory)
{
    struct tfs_list_page pg;
    int failures = 0;
    int rc = -ENOMEM;

    CHECK_OK(test_alloc_hook());
    for (long k = 0; k < 200 && rc != 0; k++) {
        test_alloc_budget(k);
        rc = tfs_s3_xml_parse_list(aws_page, strlen(aws_page), "data/",
                                   &pg);
        test_alloc_budget(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, -ENOMEM);
        CHECK(pg.entries == NULL && pg.prefixes == NULL);
        failures++;
    }
    CHECK_OK(rc);
    CHECK(failures > 3);
    CHECK_EQ(pg.n_entries, 2);
    tfs_list_page_cleanup(&pg);
}

TESTS(T(list_rgw_url_encoded), T(list_truncated_page_with_prefixes),
      T(list_paging_rules), T(list_root_handling),
      T(list_rgw_control_char_token), T(list_bad_fields),
      T(list_nul_key_skipped),
      T(malformed_bodies), T(doctype_refused), T(oversize),
      T(error_bodies), T(multipart_results), T(copy_results), T(dates),
      T(out_of_memory));
TEST_MAIN()
