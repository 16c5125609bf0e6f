/* SPDX-License-Identifier: MIT */
/*
 * The s3 store against a real S3 server (the local Ceph RGW of
 * scripts/s3-server), for what the generic conformance suite does not
 * reach: multipart uploads with small parts and their abort path,
 * multipart copies, If-Match, credential and bucket errors and their
 * details, time-outs against a server that never answers, awkward keys,
 * the AWS credential/config files, and the connection pool under load.
 *
 * Needs AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL and
 * TFS_TEST_S3_BUCKET (". $S3_DIR/env" after "scripts/s3-server start");
 * without them it fails, it does not skip.  Every key lives under a
 * per-run prefix "live-PID-RAND/", emptied at the end (kept when
 * TFS_TEST_KEEP is set, to look at with other tools).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "store/s3_int.h"
#include "tierfs/retry.h"

static const char *live_bucket;
static char live_prefix[64];            /* "live-PID-RAND" */
static char live_uri[256];              /* s3://bucket/live-PID-RAND */

/* Open the run's store with extra options (may be NULL). */
static struct tfs_store *live_open(const char *opts)
{
    struct tfs_store *st = NULL;

    CHECK_OK(tfs_store_open(&st, live_uri, opts));
    return st;
}

static void check_content(struct tfs_store *st, const char *key,
                          const unsigned char *want, size_t len)
{
    unsigned char *got = malloc(len + 100);
    size_t n = 0;

    CHECK(got != NULL);
    CHECK_OK(tfs_store_read(st, key, got, len + 100, 0, NULL, &n));
    CHECK_EQ(n, len);
    CHECK(memcmp(got, want, len) == 0);
    free(got);
}

/* A temp file holding data[0..len); returns its path in path[64]. */
static void temp_file(char *path, const unsigned char *data, size_t len)
{
    int fd;

    snprintf(path, 64, "/tmp/tfs-s3-live-XXXXXX");
    fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, data, len) == (ssize_t)len);
    close(fd);
}

/* ---- multipart ---- */

#define SMALL_PARTS "part_size=64K&multipart_threshold=128K"

TEST(multipart_round_trip)
{
    struct tfs_store *st = live_open(SMALL_PARTS "&upload_concurrency=4");
    size_t len = (1u << 20) + 12345;    /* 17 parts, the last one short */
    unsigned char *data = test_pattern(len, 1);
    unsigned char buf[4000];
    struct tfs_stat out;
    struct tfs_stat s;
    char path[64];
    size_t n = 0;

    CHECK_OK(tfs_store_put(st, "mp/buf", data, len, &out));
    CHECK_OK(tfs_store_stat(st, "mp/buf", &s));
    CHECK_EQ(out.size, len);
    CHECK_EQ(s.size, len);
    CHECK_STR(out.version, s.version);
    CHECK(strstr(s.version, "-17") != NULL);    /* really multipart */
    check_content(st, "mp/buf", data, len);
    /* a range across the boundary of parts 1 and 2 */
    CHECK_OK(tfs_store_read(st, "mp/buf", buf, sizeof(buf),
                            (64u << 10) - 1000, s.version, &n));
    CHECK_EQ(n, sizeof(buf));
    CHECK(memcmp(buf, data + (64u << 10) - 1000, n) == 0);
    /* from a file, streamed part by part */
    temp_file(path, data, len - 1);
    CHECK_OK(tfs_store_put_file(st, "mp/file", path, &out));
    unlink(path);
    CHECK_EQ(out.size, len - 1);
    check_content(st, "mp/file", data, len - 1);
    /* just below the threshold: one plain PUT (an md5 ETag, no "-N") */
    CHECK_OK(tfs_store_put(st, "mp/single", data, (128u << 10) - 1, &out));
    CHECK(strchr(out.version, '-') == NULL);
    check_content(st, "mp/single", data, (128u << 10) - 1);
    free(data);
    tfs_store_close(st);
}

/* The multipart uploads in progress under key, as raw XML. */
static void list_uploads(struct tfs_store *st, const char *key,
                         struct tfs_buf *xml)
{
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    char full[1100];
    struct s3_param q[2] = {{"uploads", ""}, {"prefix", full}};
    struct s3_req req = {.method = "GET", .query = q, .n_query = 2,
                         .xml = xml};
    struct s3_resp resp;

    snprintf(full, sizeof(full), "%s%s", p->root, key);
    tfs_buf_reset(xml);
    CHECK_OK(tfs_s3_request(p, &req, &resp));
    CHECK(strstr(tfs_buf_str(xml), "ListMultipartUploadsResult") != NULL);
}

/* Start an upload by hand, so the listing is known to show one. */
static void start_upload(struct tfs_store *st, const char *key,
                         char *upload_id)
{
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    struct s3_param q = {"uploads", ""};
    char full[1100];
    struct s3_req req = {.method = "POST", .key = full, .query = &q,
                         .n_query = 1};
    struct s3_resp resp;
    struct s3_result res;
    struct tfs_buf xml;

    snprintf(full, sizeof(full), "%s%s", p->root, key);
    tfs_buf_init(&xml, S3_XML_MAX);
    req.xml = &xml;
    CHECK_OK(tfs_s3_request(p, &req, &resp));
    CHECK_OK(tfs_s3_xml_parse_result(xml.p, xml.len,
                                     "InitiateMultipartUploadResult", &res));
    snprintf(upload_id, S3_UPLOAD_ID_MAX, "%s", res.upload_id);
    tfs_buf_cleanup(&xml);
}

static void abort_upload(struct tfs_store *st, const char *key,
                         const char *upload_id)
{
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    struct s3_param q = {"uploadId", upload_id};
    char full[1100];
    struct s3_req req = {.method = "DELETE", .key = full, .query = &q,
                         .n_query = 1};
    struct s3_resp resp;

    snprintf(full, sizeof(full), "%s%s", p->root, key);
    CHECK_OK(tfs_s3_request(p, &req, &resp));
}

TEST(multipart_failure_aborts)
{
    struct tfs_store *st = live_open(SMALL_PARTS);
    size_t len = 300u << 10;
    unsigned char *data = test_pattern(len, 2);
    char upload_id[S3_UPLOAD_ID_MAX];
    struct tfs_source src = {.fd = -1};
    struct tfs_stat s;
    struct tfs_buf xml;
    char path[64];

    tfs_buf_init(&xml, S3_XML_MAX);
    /* the check below can see an upload in progress */
    start_upload(st, "abort/probe", upload_id);
    list_uploads(st, "abort/probe", &xml);
    CHECK(strstr(tfs_buf_str(&xml), upload_id) != NULL);
    abort_upload(st, "abort/probe", upload_id);
    /* a source that claims twice the bytes its file holds */
    temp_file(path, data, len);
    src.fd = open(path, O_RDONLY);
    CHECK(src.fd >= 0);
    src.len = 2 * len;
    CHECK_RC(tfs_store_put_source(st, "abort/obj", &src, NULL), -EIO);
    CHECK(strstr(tfs_errdetail(), "shrank") != NULL);
    close(src.fd);
    unlink(path);
    /* no object, and no upload left behind */
    CHECK_RC(tfs_store_stat(st, "abort/obj", &s), -ENOENT);
    list_uploads(st, "abort/", &xml);
    CHECK(strstr(tfs_buf_str(&xml), "<UploadId>") == NULL);
    tfs_buf_cleanup(&xml);
    free(data);
    tfs_store_close(st);
}

/*
 * R14: a part that fails is sent again on its own.  fail_request=3 makes
 * the third request (a part: the first is the initiation) fail once with
 * a reset, as a dropped connection would; the upload completes with that
 * one part sent twice and the others once: 1 + 5 + 1 + 1 requests.
 * Through retry+ the upload is not restarted either.  With
 * part_retries=0 the same failure aborts the upload, as before.
 */
TEST(multipart_part_retried)
{
    const char *opts = "part_size=256K&multipart_threshold=1M"
                       "&upload_concurrency=2&fail_request=3";
    size_t len = (1u << 20) + 1000;     /* 5 parts */
    unsigned char *data = test_pattern(len, 7);
    struct tfs_source src = {.buf = data, .fd = -1, .len = len};
    char uri[300];
    struct tfs_store *st = live_open(opts);
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    struct tfs_retry_stats rs;
    struct tfs_buf xml;

    CHECK_OK(tfs_store_put_source(st, "part/one", &src, NULL));
    CHECK_EQ(atomic_load(&p->n_part_retries), 1);
    CHECK_EQ(atomic_load(&p->n_requests), 8);
    check_content(st, "part/one", data, len);
    tfs_store_close(st);

    snprintf(uri, sizeof(uri), "retry+%s", live_uri);
    st = NULL;
    CHECK_OK(tfs_store_open(&st, uri, opts));
    p = tfs_store_priv(tfs_store_find(st, "s3"));
    CHECK_OK(tfs_store_put_source(st, "part/retry", &src, NULL));
    CHECK_EQ(atomic_load(&p->n_part_retries), 1);
    CHECK_EQ(atomic_load(&p->n_requests), 8);
    tfs_retry_get_stats(st, &rs);
    CHECK_EQ(rs.retries, 0);            /* the put itself did not fail */
    check_content(st, "part/retry", data, len);
    tfs_store_close(st);

    snprintf(uri, sizeof(uri), "%s&part_retries=0", opts);
    st = live_open(uri);
    CHECK_RC(tfs_store_put_source(st, "part/none", &src, NULL),
             -ECONNRESET);
    CHECK(strstr(tfs_errdetail(), "fail_request") != NULL);
    CHECK_RC(tfs_store_stat(st, "part/none", &(struct tfs_stat){0}),
             -ENOENT);
    tfs_buf_init(&xml, S3_XML_MAX);
    list_uploads(st, "part/none", &xml);
    CHECK(strstr(tfs_buf_str(&xml), "<UploadId>") == NULL);
    tfs_buf_cleanup(&xml);
    tfs_store_close(st);
    free(data);
}

/* ---- copy ---- */

/* An upload that fails and whose abort fails too (the server down):
 * the abort is kept and done after the next upload completes (F8). */
TEST(failed_abort_done_later)
{
    const char *opts = "part_size=256K&multipart_threshold=1M"
                       "&upload_concurrency=1&part_retries=0"
                       "&fail_request=2&fail_count=2";
    size_t len = (1u << 20) + 1000;     /* 5 parts */
    unsigned char *data = test_pattern(len, 9);
    struct tfs_source src = {.buf = data, .fd = -1, .len = len};
    struct tfs_store *st = live_open(opts);
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    struct tfs_buf xml;

    /* 1 initiates, 2 (the first part) and 3 (the abort) fail */
    CHECK_RC(tfs_store_put_source(st, "abort/kept", &src, NULL),
             -ECONNRESET);
    CHECK(strstr(tfs_errdetail(), "fail_request") != NULL);
    CHECK_EQ(atomic_load(&p->n_requests), 3);
    CHECK_EQ(p->n_aborts, 1);
    tfs_buf_init(&xml, S3_XML_MAX);
    list_uploads(st, "abort/kept", &xml);
    CHECK(strstr(tfs_buf_str(&xml), "<UploadId>") != NULL);
    /* the next multipart upload completes: the kept abort goes out */
    CHECK_OK(tfs_store_put_source(st, "abort/next", &src, NULL));
    CHECK_EQ(p->n_aborts, 0);
    tfs_buf_reset(&xml);
    list_uploads(st, "abort/kept", &xml);
    CHECK(strstr(tfs_buf_str(&xml), "<UploadId>") == NULL);
    check_content(st, "abort/next", data, len);
    CHECK_OK(tfs_store_remove(st, "abort/next"));
    tfs_buf_cleanup(&xml);
    tfs_store_close(st);
    free(data);
}

/* Kept aborts drained by uploads completing at once: each entry is
 * tried by one thread (ASan: no double free), none is lost. */
struct put_job {
    struct tfs_store        *st;
    const struct tfs_source *src;
    char                     key[64];
    int                      rc;
};

static void *put_worker(void *arg)
{
    struct put_job *j = arg;

    j->rc = tfs_store_put_source(j->st, j->key, j->src, NULL);
    return NULL;
}

TEST(kept_aborts_drained_concurrently)
{
    const char *opts = "part_size=256K&multipart_threshold=256K"
                       "&upload_concurrency=2";
    size_t len = (512u << 10) + 10;     /* 3 parts */
    unsigned char *data = test_pattern(len, 11);
    struct tfs_source src = {.buf = data, .fd = -1, .len = len};
    struct tfs_store *st = live_open(opts);
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    struct put_job jobs[4];
    pthread_t th[4];
    struct tfs_buf xml;
    char id[S3_UPLOAD_ID_MAX];
    char full[1100];

    /* six real uploads whose abort "failed": kept, as s3.c keeps them */
    p->aborts = tfs_calloc(256, sizeof(*p->aborts));
    CHECK(p->aborts != NULL);
    for (int i = 0; i < 6; i++) {
        char key[32];

        snprintf(key, sizeof(key), "kept/u%d", i);
        start_upload(st, key, id);
        snprintf(full, sizeof(full), "%s%s", p->root, key);
        p->aborts[p->n_aborts].key = tfs_strdup(full);
        p->aborts[p->n_aborts++].upload_id = tfs_strdup(id);
    }
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct put_job){.st = st, .src = &src};
        snprintf(jobs[i].key, sizeof(jobs[i].key), "kept/put%d", i);
        CHECK(pthread_create(&th[i], NULL, put_worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_OK(jobs[i].rc);
    }
    CHECK_EQ(p->n_aborts, 0);
    tfs_buf_init(&xml, S3_XML_MAX);
    list_uploads(st, "kept/u", &xml);
    CHECK(strstr(tfs_buf_str(&xml), "<UploadId>") == NULL);
    for (int i = 0; i < 4; i++)
        CHECK_OK(tfs_store_remove(st, jobs[i].key));
    tfs_buf_cleanup(&xml);
    tfs_store_close(st);
    free(data);
}

TEST(copy_single_and_multipart)
{
    struct tfs_store *st = live_open(SMALL_PARTS "&multipart_copy_threshold="
                                     "100K&copy_part_size=64K");
    size_t len = 300u << 10;
    unsigned char *data = test_pattern(len, 3);
    struct tfs_stat s;

    CHECK_OK(tfs_store_put(st, "cp/small", data, 1000, NULL));
    CHECK_OK(tfs_store_copy(st, "cp/small", "cp/small copy"));
    check_content(st, "cp/small copy", data, 1000);
    /* over multipart_copy_threshold: UploadPartCopy, 5 parts */
    CHECK_OK(tfs_store_put(st, "cp/big", data, len, NULL));
    CHECK_OK(tfs_store_copy(st, "cp/big", "cp/big+copy"));
    check_content(st, "cp/big+copy", data, len);
    CHECK_OK(tfs_store_stat(st, "cp/big+copy", &s));
    CHECK(strstr(s.version, "-5") != NULL);
    /* move = copy + remove here (no native rename) */
    CHECK_OK(tfs_store_move(st, "cp/small copy", "cp/moved"));
    CHECK_RC(tfs_store_stat(st, "cp/small copy", &s), -ENOENT);
    check_content(st, "cp/moved", data, 1000);
    CHECK_RC(tfs_store_copy(st, "cp/missing", "cp/x"), -ENOENT);
    free(data);
    tfs_store_close(st);
}

/* ---- conditional reads ---- */

TEST(if_match)
{
    struct tfs_store *st = live_open(NULL);
    struct tfs_stat v1;
    struct tfs_stat v2;
    char buf[16];
    size_t n = 0;

    CHECK_OK(tfs_store_put(st, "ifm/obj", "version one", 11, &v1));
    CHECK_OK(tfs_store_read(st, "ifm/obj", buf, 7, 4, v1.version, &n));
    CHECK_EQ(n, 7);
    CHECK(memcmp(buf, "ion one", 7) == 0);
    CHECK_OK(tfs_store_put(st, "ifm/obj", "version two", 11, &v2));
    CHECK(strcmp(v1.version, v2.version) != 0);
    CHECK_RC(tfs_store_read(st, "ifm/obj", buf, 7, 4, v1.version, &n),
             TFS_ECHANGED);
    CHECK(strstr(tfs_errdetail(), "PreconditionFailed") != NULL);
    CHECK(strstr(tfs_errdetail(), "HTTP 412") != NULL);
    /* past the end with the right version: 0 bytes, not an error */
    CHECK_OK(tfs_store_read(st, "ifm/obj", buf, 4, 100, v2.version, &n));
    CHECK_EQ(n, 0);
    tfs_store_close(st);
}

/* ---- credentials, buckets, URIs ---- */

/* setenv(name, value), or unsetenv when value is NULL; saves the old. */
static char *env_swap(const char *name, const char *value)
{
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;

    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
    return saved;
}

static void env_restore(const char *name, char *saved)
{
    if (saved != NULL)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

TEST(bad_credentials)
{
    static const char wrong[] = "wrong-secret-0123456789abcdefghijklmnop";
    const char *real = getenv("AWS_SECRET_ACCESS_KEY");
    char *real_copy = strdup(real);
    char *saved = env_swap("AWS_SECRET_ACCESS_KEY", wrong);
    struct tfs_store *st = live_open(NULL);
    char buf[4];
    size_t n;

    CHECK_RC(tfs_store_read(st, "any", buf, 4, 0, NULL, &n), -EACCES);
    CHECK(strstr(tfs_errdetail(), "SignatureDoesNotMatch") != NULL);
    CHECK(strstr(tfs_errdetail(), "HTTP 403") != NULL);
    CHECK(strstr(tfs_errdetail(), wrong) == NULL);
    CHECK(strstr(tfs_errdetail(), real_copy) == NULL);
    CHECK(strstr(tfs_errdetail(), "Signature=") == NULL);
    tfs_store_close(st);
    env_restore("AWS_SECRET_ACCESS_KEY", saved);
    saved = env_swap("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000");
    st = live_open(NULL);
    CHECK_RC(tfs_store_put(st, "x", "y", 1, NULL), -EACCES);
    CHECK(strstr(tfs_errdetail(), "InvalidAccessKeyId") != NULL);
    CHECK(strstr(tfs_errdetail(), real_copy) == NULL);
    tfs_store_close(st);
    env_restore("AWS_ACCESS_KEY_ID", saved);
    /* anonymous requests to a private bucket are refused */
    st = live_open("anonymous=1");
    CHECK_RC(tfs_store_read(st, "any", buf, 4, 0, NULL, &n), -EACCES);
    CHECK(strstr(tfs_errdetail(), "AccessDenied") != NULL);
    tfs_store_close(st);
    free(real_copy);
}

TEST(missing_bucket)
{
    struct tfs_store *st = NULL;
    struct tfs_list_page pg;
    char buf[4];
    size_t n;

    CHECK_OK(tfs_store_open(&st, "s3://tierfs-no-such-bucket-live/p", NULL));
    CHECK_RC(tfs_store_read(st, "k", buf, 4, 0, NULL, &n), -ENOENT);
    CHECK(strstr(tfs_errdetail(), "NoSuchBucket") != NULL);
    CHECK(strstr(tfs_errdetail(), "/tierfs-no-such-bucket-live/p/k") !=
          NULL);
    CHECK_RC(tfs_store_list(st, "", "/", NULL, 0, &pg), -ENOENT);
    CHECK(strstr(tfs_errdetail(), "NoSuchBucket") != NULL);
    CHECK_RC(tfs_store_put(st, "k", "v", 1, NULL), -ENOENT);
    tfs_store_close(st);
}

TEST(no_credentials)
{
    char *ak = env_swap("AWS_ACCESS_KEY_ID", NULL);
    char *sk = env_swap("AWS_SECRET_ACCESS_KEY", NULL);
    char *cf = env_swap("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds");
    char *cc = env_swap("AWS_CONFIG_FILE", "/nonexistent/config");
    struct tfs_store *st = NULL;
    int rc = tfs_store_open(&st, live_uri, NULL);

    env_restore("AWS_ACCESS_KEY_ID", ak);
    env_restore("AWS_SECRET_ACCESS_KEY", sk);
    env_restore("AWS_SHARED_CREDENTIALS_FILE", cf);
    env_restore("AWS_CONFIG_FILE", cc);
    CHECK_RC(rc, TFS_ENOCRED);
    CHECK(st == NULL);
    CHECK(strstr(tfs_errdetail(), "/nonexistent/creds") != NULL);
    CHECK(strstr(tfs_errdetail(), "/nonexistent/config") != NULL);
    CHECK(strstr(tfs_errdetail(), "AWS_ACCESS_KEY_ID") != NULL);
    /* anonymous needs none */
    CHECK_OK(tfs_store_open(&st, live_uri, "anonymous=1"));
    tfs_store_close(st);
}

/* Write text to a new temp file; its path into path[64]. */
static void temp_text(char *path, const char *text)
{
    temp_file(path, (const unsigned char *)text, strlen(text));
}

TEST(profile_files)
{
    char creds[64];
    char config[64];
    char text[1024];
    const char *endpoint = getenv("AWS_ENDPOINT_URL");
    char *vars[6];
    static const char *const names[6] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL",
        "AWS_REGION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
    };
    struct tfs_store *st = NULL;
    struct tfs_stat s;
    int rc;

    /* comments, blanks, odd spacing, a decoy profile, a nested block */
    snprintf(text, sizeof(text), "# test credentials\n\n[default]\n"
             "aws_access_key_id=WRONG\naws_secret_access_key = WRONG\n"
             "  [ live ]  \n; a comment\naws_access_key_id  =  %s\r\n"
             "aws_secret_access_key=%s\n", getenv("AWS_ACCESS_KEY_ID"),
             getenv("AWS_SECRET_ACCESS_KEY"));
    temp_text(creds, text);
    snprintf(text, sizeof(text), "[default]\nregion = eu-west-9\n"
             "[profile   live]\nregion = us-east-1\ns3 =\n"
             "    endpoint_url = %s\n    addressing_style = path\n"
             "output = json\n", endpoint);
    temp_text(config, text);
    for (int i = 0; i < 4; i++)
        vars[i] = env_swap(names[i], NULL);
    vars[4] = env_swap(names[4], creds);
    vars[5] = env_swap(names[5], config);
    rc = tfs_store_open(&st, live_uri, "profile=live");
    if (rc == 0) {
        rc = tfs_store_put(st, "profile/obj", "p", 1, NULL);
        if (rc == 0)
            rc = tfs_store_stat(st, "profile/obj", &s);
        tfs_store_close(st);
    }
    for (int i = 0; i < 6; i++)
        env_restore(names[i], vars[i]);
    unlink(creds);
    unlink(config);
    CHECK_OK(rc);
    CHECK_EQ(s.size, 1);
}

TEST(uri_errors)
{
    struct tfs_store *st = NULL;
    const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
    char uri[256];

    snprintf(uri, sizeof(uri), "s3://AKIAX:%s@%s/p", sk, live_bucket);
    CHECK_RC(tfs_store_open(&st, uri, NULL), TFS_EURI);
    CHECK(strstr(tfs_errdetail(), sk) == NULL);
    snprintf(uri, sizeof(uri), "secret_key=%s", sk);
    CHECK_RC(tfs_store_open(&st, live_uri, uri), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), sk) == NULL);
    CHECK_RC(tfs_store_open(&st, "s3://Bad_Bucket/p", NULL), TFS_EURI);
    CHECK_RC(tfs_store_open(&st, "s3://ab", NULL), TFS_EURI);
    CHECK_RC(tfs_store_open(&st, live_uri, "endpoint=ftp://x"), TFS_EOPTION);
    CHECK_RC(tfs_store_open(&st, live_uri, "part_size=1"), TFS_EOPTION);
    CHECK_RC(tfs_store_open(&st, live_uri, "max_conns=0"), TFS_EOPTION);
    CHECK_RC(tfs_store_open(&st, live_uri, "path_style=maybe"), TFS_EOPTION);
    CHECK(st == NULL);
}

/* ---- network failures ---- */

/* A listening socket on 127.0.0.1 that never accepts; its port. */
static int silent_listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(fd, 16) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

TEST(unresponsive_server_times_out)
{
    struct tfs_store *st = NULL;
    char opts[128];
    char buf[4];
    size_t n;
    uint64_t t0;
    uint64_t ms;
    int port;
    int fd = silent_listener(&port);

    snprintf(opts, sizeof(opts), "endpoint=http://127.0.0.1:%d&"
             "timeout_ms=500", port);
    CHECK_OK(tfs_store_open(&st, live_uri, opts));
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "k", buf, 4, 0, NULL, &n), -ETIMEDOUT);
    ms = (tfs_now_ns() - t0) / 1000000;
    CHECK(ms >= 400 && ms < 2000);
    CHECK(strstr(tfs_errdetail(), "GET http://127.0.0.1:") != NULL);
    CHECK(tfs_err_is_retryable(-ETIMEDOUT));
    /* a deadline that has passed: no request at all */
    tfs_deadline_set(1);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_stat(st, "k", &(struct tfs_stat){0}), -ETIMEDOUT);
    tfs_deadline_set(0);
    CHECK((tfs_now_ns() - t0) / 1000000 < 100);
    tfs_store_close(st);
    close(fd);
}

/*
 * D2: a transfer is bounded by progress, not by timeout_ms.  Each
 * connection capped at 1 MB/s (conn_bw), a 3 MiB PUT and GET take about
 * 3 s, three times timeout_ms, and succeed; timeout_ms still bounds the
 * small requests.
 */
TEST(slow_transfer_outlasts_timeout)
{
    struct tfs_store *st = live_open("timeout_ms=1000&stall_ms=2000"
                                     "&conn_bw=1M");
    size_t len = 3u << 20;
    unsigned char *data = test_pattern(len, 9);
    unsigned char *back = malloc(len);
    uint64_t t0 = tfs_now_ns();
    double secs;
    size_t n = 0;

    CHECK(back != NULL);
    CHECK_OK(tfs_store_put(st, "slow/obj", data, len, NULL));
    secs = (double)(tfs_now_ns() - t0) / 1e9;
    if (secs < 2.0)
        TEST_FAIL_("the 3 MiB PUT took %.2f s: not throttled", secs);
    printf("# 3 MiB PUT at conn_bw=1M: %.2f s\n", secs);
    t0 = tfs_now_ns();
    CHECK_OK(tfs_store_read(st, "slow/obj", back, len, 0, NULL, &n));
    secs = (double)(tfs_now_ns() - t0) / 1e9;
    if (secs < 2.0)
        TEST_FAIL_("the 3 MiB GET took %.2f s: not throttled", secs);
    printf("# 3 MiB GET at conn_bw=1M: %.2f s\n", secs);
    CHECK_EQ(n, len);
    CHECK(memcmp(back, data, len) == 0);
    tfs_store_close(st);
    free(back);
    free(data);
}

/*
 * ... and a stalled transfer fails after stall_ms without progress, long
 * before timeout_ms (a server that accepts and never answers).
 */
TEST(stalled_transfer_fails)
{
    struct tfs_store *st = NULL;
    size_t len = 8u << 20;
    unsigned char *buf = malloc(len);
    char opts[160];
    size_t n;
    uint64_t t0;
    double secs;
    int port;
    int fd = silent_listener(&port);

    CHECK(buf != NULL);
    memset(buf, 'x', len);
    snprintf(opts, sizeof(opts), "endpoint=http://127.0.0.1:%d&"
             "timeout_ms=60000&stall_ms=1000&multipart_threshold=1G",
             port);
    CHECK_OK(tfs_store_open(&st, live_uri, opts));
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_read(st, "k", buf, len, 0, NULL, &n), -ETIMEDOUT);
    secs = (double)(tfs_now_ns() - t0) / 1e9;
    if (secs < 0.9 || secs > 5.0)
        TEST_FAIL_("the stalled GET failed after %.2f s, want ~1", secs);
    printf("# stalled GET failed after %.2f s\n", secs);
    t0 = tfs_now_ns();
    CHECK_RC(tfs_store_put(st, "k", buf, len, NULL), -ETIMEDOUT);
    secs = (double)(tfs_now_ns() - t0) / 1e9;
    if (secs < 0.9 || secs > 10.0)
        TEST_FAIL_("the stalled PUT failed after %.2f s, want < 10", secs);
    printf("# stalled PUT failed after %.2f s\n", secs);
    tfs_store_close(st);
    close(fd);
    free(buf);
}

TEST(refused_connection)
{
    struct tfs_store *st = NULL;
    char opts[128];
    char buf[4];
    size_t n;
    int port;
    int fd = silent_listener(&port);

    close(fd);                          /* nothing listens there now */
    snprintf(opts, sizeof(opts), "endpoint=http://127.0.0.1:%d", port);
    CHECK_OK(tfs_store_open(&st, live_uri, opts));
    CHECK_RC(tfs_store_read(st, "k", buf, 4, 0, NULL, &n), -ECONNREFUSED);
    tfs_store_close(st);
    CHECK_OK(tfs_store_open(&st, live_uri,
                            "endpoint=http://no-such-host.invalid"));
    CHECK_RC(tfs_store_read(st, "k", buf, 4, 0, NULL, &n), -EHOSTUNREACH);
    tfs_store_close(st);
}

/* ---- keys ---- */

static const char *const odd_keys[] = {
    "a b.txt",
    "c+d",
    "e%f",
    "pct%25literal",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e/\xe3\x83\x95\xe3\x82\xa1.bin",
    "\xc3\xbcmlaut \xc3\xa9",
    "tilde~bang!quote'paren()star*",
    "eq=amp&q?hash#",
    "semi;colon:comma,at@dollar$",
    "ctrl\001char",
    "tab\there",
    "back\\slash",
    "dir with space/inner +plus",
    "emoji \xf0\x9f\x98\x80",
    "trailing space ",
    "dots/./one",
    "dots/../two",
    "dots//three",
    "./lead",
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

TEST(odd_keys_round_trip)
{
    struct tfs_store *st = live_open(NULL);
    const char *sorted[TFS_ARRAY_LEN(odd_keys)];
    struct tfs_list_page pg;
    char key[256];
    bool seen_dir = false;

    for (size_t i = 0; i < TFS_ARRAY_LEN(odd_keys); i++) {
        snprintf(key, sizeof(key), "keys/%s", odd_keys[i]);
        CHECK_OK(tfs_store_put(st, key, odd_keys[i], strlen(odd_keys[i]),
                               NULL));
        check_content(st, key, (const unsigned char *)odd_keys[i],
                      strlen(odd_keys[i]));
        sorted[i] = odd_keys[i];
    }
    qsort(sorted, TFS_ARRAY_LEN(sorted), sizeof(sorted[0]), cmp_str);
    CHECK_OK(tfs_store_list(st, "keys/", NULL, NULL, 0, &pg));
    CHECK_EQ(pg.n_entries, TFS_ARRAY_LEN(odd_keys));
    for (size_t i = 0; i < pg.n_entries; i++) {
        snprintf(key, sizeof(key), "keys/%s", sorted[i]);
        CHECK_STR(pg.entries[i].key, key);
        CHECK_EQ(pg.entries[i].st.size, strlen(sorted[i]));
    }
    tfs_list_page_cleanup(&pg);
    /* paged two at a time, with the delimiter rolling up directories */
    CHECK_OK(tfs_store_list(st, "keys/", "/", NULL, 2, &pg));
    while (1) {
        char *token = pg.next_token ? strdup(pg.next_token) : NULL;
        for (size_t i = 0; i < pg.n_prefixes; i++)
            seen_dir |= strcmp(pg.prefixes[i], "keys/dir with space/") == 0;
        CHECK(pg.n_entries + pg.n_prefixes <= 2);
        tfs_list_page_cleanup(&pg);
        if (token == NULL)
            break;
        CHECK_OK(tfs_store_list(st, "keys/", "/", token, 2, &pg));
        free(token);
    }
    CHECK(seen_dir);
    tfs_store_close(st);
}

TEST(virtual_host_style)
{
    /* RGW answers bucket.localhost (rgw dns name = localhost); curl maps
     * every *.localhost name to the loopback address itself */
    const char *ep = getenv("AWS_ENDPOINT_URL");
    const char *lo = "http://127.0.0.1:";
    struct tfs_store *st = NULL;
    char opts[128];
    char buf[8];
    size_t n = 0;

    if (strncmp(ep, lo, strlen(lo)) != 0) {
        printf("# virtual_host_style: endpoint is not 127.0.0.1, "
               "nothing to check\n");
        return;
    }
    snprintf(opts, sizeof(opts), "endpoint=http://localhost:%s&"
             "path_style=0", ep + strlen(lo));
    CHECK_OK(tfs_store_open(&st, live_uri, opts));
    CHECK_OK(tfs_store_put(st, "vhost/a b+c", "vhost", 5, NULL));
    CHECK_OK(tfs_store_read(st, "vhost/a b+c", buf, sizeof(buf), 0, NULL,
                            &n));
    CHECK_EQ(n, 5);
    CHECK(memcmp(buf, "vhost", 5) == 0);
    tfs_store_close(st);
}

/* ---- the pool under load ---- */

struct pool_job {
    struct tfs_store *st;
    int               id;
    int               rc;
};

static void *pool_worker(void *arg)
{
    struct pool_job *j = arg;
    size_t len = (400u << 10) + (size_t)j->id;
    unsigned char *data = test_pattern(len, 100 + (uint64_t)j->id);
    unsigned char *back = malloc(len);
    char key[64];
    size_t n = 0;

    snprintf(key, sizeof(key), "pool/obj-%d", j->id);
    j->rc = tfs_store_put(j->st, key, data, len, NULL);
    if (j->rc == 0)
        j->rc = tfs_store_read(j->st, key, back, len, 0, NULL, &n);
    if (j->rc == 0 && (n != len || memcmp(back, data, len) != 0))
        j->rc = -EIO;
    free(data);
    free(back);
    return NULL;
}

TEST(pool_smaller_than_demand)
{
    /* 6 multipart puts of 4 threads each share 2 connections */
    struct tfs_store *st = live_open(SMALL_PARTS "&upload_concurrency=4&"
                                     "max_conns=2");
    struct pool_job jobs[6];
    pthread_t th[6];

    for (int i = 0; i < 6; i++) {
        jobs[i] = (struct pool_job){.st = st, .id = i};
        CHECK(pthread_create(&th[i], NULL, pool_worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 6; i++)
        CHECK_OK(jobs[i].rc);
    tfs_store_close(st);
}

/* ---- set-up and tear-down ---- */

static int live_remove_page(void *arg, const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++)
        tfs_store_remove(arg, pg->entries[i].key);
    return 0;
}

static void live_cleanup(void)
{
    struct tfs_store *st = NULL;

    if (tfs_store_open(&st, live_uri, NULL) < 0)
        return;
    tfs_store_list_all(st, "", NULL, live_remove_page, st);
    tfs_store_close(st);
}

TESTS(T(multipart_round_trip), T(multipart_failure_aborts),
      T(multipart_part_retried), T(failed_abort_done_later),
      T(kept_aborts_drained_concurrently),
      T(copy_single_and_multipart), T(if_match), T(bad_credentials),
      T(missing_bucket), T(no_credentials), T(profile_files), T(uri_errors),
      T(unresponsive_server_times_out), T(slow_transfer_outlasts_timeout),
      T(stalled_transfer_fails), T(refused_connection),
      T(odd_keys_round_trip), T(virtual_host_style),
      T(pool_smaller_than_demand));

int main(int argc, char **argv)
{
    static const char *const need[] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL",
        "TFS_TEST_S3_BUCKET",
    };
    int rc;

    for (size_t i = 0; i < TFS_ARRAY_LEN(need); i++) {
        if (getenv(need[i]) == NULL || getenv(need[i])[0] == '\0') {
            fprintf(stderr, "test_s3_live: %s is not set: this test needs a "
                    "running S3 server (scripts/s3-server start; then "
                    ". $S3_DIR/env)\n", need[i]);
            return 1;                   /* a failure, not a skip */
        }
    }
    live_bucket = getenv("TFS_TEST_S3_BUCKET");
    snprintf(live_prefix, sizeof(live_prefix), "live-%d-%04x", (int)getpid(),
             (unsigned)(tfs_rand_u64() & 0xffff));
    snprintf(live_uri, sizeof(live_uri), "s3://%s/%s", live_bucket,
             live_prefix);
    printf("# %s\n", live_uri);
    rc = test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
    if (getenv("TFS_TEST_KEEP") == NULL)
        live_cleanup();
    return rc;
}
