/* SPDX-License-Identifier: MIT */
/*
 * The listing manifest (src/cache/manifest.c): the line parser's good
 * and bad lines, the key rules, the file reader's header, end line and
 * line numbers, and a cache opened over a posix store from a manifest:
 * every lookup and listing answered, the store never listed, a bad
 * manifest (duplicates, another store, cut short) refusing the open.
 */
#include <fcntl.h>

#include "cache/manifest.h"
#include "common/util.h"
#include "test.h"
#include "tierfs/cache.h"
#include "tierfs/store.h"

#define HDR "{\"tierfs_manifest\": 1, \"uri\": \"u\", \"identity\": \"id\"}"

static int parse(const char *line, struct tfs_manifest_line *l)
{
    return tfs_manifest_parse_line(line, strlen(line), l);
}

/* line fails TFS_EFORMAT with a detail that contains want. */
static void check_bad(const char *line, const char *want)
{
    struct tfs_manifest_line l;
    int rc = parse(line, &l);

    if (rc != TFS_EFORMAT || strstr(tfs_errdetail(), want) == NULL)
        TEST_FAIL_("'%s': rc %d, detail '%s', want '%s'", line, rc,
                   tfs_errdetail(), want);
}

TEST(good_lines)
{
    struct tfs_manifest_line l;

    CHECK_OK(parse("{\"key\": \"a/b.jpg\", \"size\": 12, \"mtime_ns\": -5, "
                   "\"version\": \"\\\"e\\\"\", \"later\": [1]}", &l));
    CHECK_EQ(l.kind, TFS_MANIFEST_ENTRY);
    CHECK_STR(l.key, "a/b.jpg");
    CHECK_EQ(l.st.size, 12);
    CHECK_EQ(l.st.mtime_ns, -5);
    CHECK_STR(l.st.version, "\"e\"");
    CHECK_OK(parse("{\"version\": \"\", \"mtime_ns\": 0, \"size\": 0, "
                   "\"key\": \"caf\\u00e9 x/..a/.b\"}", &l));
    CHECK_STR(l.key, "caf\xc3\xa9 x/..a/.b");
    CHECK_OK(parse(HDR, &l));
    CHECK_EQ(l.kind, TFS_MANIFEST_HEADER);
    CHECK_STR(l.identity, "id");
    CHECK_OK(parse("  {\"end\": true, \"objects\": 7}  ", &l));
    CHECK_EQ(l.kind, TFS_MANIFEST_END);
    CHECK_EQ(l.objects, 7);
}

TEST(bad_lines)
{
    char big[1200];

    check_bad("{\"key\": \"a\", \"size\": 1,", "JSON");
    check_bad("", "JSON");
    check_bad("[1, 2]", "not a JSON object");
    check_bad("{\"size\": 1}", "no \"key\"");
    check_bad("{\"key\": \"a\", \"mtime_ns\": 1, \"version\": \"v\"}",
              "no \"size\"");
    check_bad("{\"key\": \"a\", \"size\": 1, \"version\": \"v\"}",
              "no \"mtime_ns\"");
    check_bad("{\"key\": \"a\", \"size\": 1, \"mtime_ns\": 1}",
              "no \"version\"");
    check_bad("{\"key\": \"a\", \"size\": -3, \"mtime_ns\": 1, "
              "\"version\": \"v\"}", "size is negative");
    check_bad("{\"key\": \"a\", \"size\": 1.5, \"mtime_ns\": 1, "
              "\"version\": \"v\"}", "size is not a whole number");
    check_bad("{\"key\": \"a\", \"size\": \"1\", \"mtime_ns\": 1, "
              "\"version\": \"v\"}", "size is not a whole number");
    check_bad("{\"key\": 5, \"size\": 1, \"mtime_ns\": 1, \"version\": "
              "\"v\"}", "\"key\" is not a string");
    check_bad("{\"key\": \"a\", \"key\": \"b\"}", "duplicate");
    check_bad("{\"tierfs_manifest\": 2, \"identity\": \"x\"}",
              "manifest version 2");
    check_bad("{\"tierfs_manifest\": 1}", "no \"identity\"");
    check_bad("{\"end\": true}", "without \"objects\"");
    memset(big, 'v', sizeof(big));
    snprintf(big, sizeof(big), "{\"key\": \"a\", \"size\": 1, \"mtime_ns\":"
             " 1, \"version\": \"%090d\"}", 0);
    check_bad(big, "\"version\" is longer than 79 bytes");
}

TEST(key_rules)
{
    static const char *const bad[][2] = {
        {"/abs/x", "is absolute"},
        {"../x", "is outside the URI"},
        {"a/../../x", "is outside the URI"},
        {"a/../b", "'..' component"},
        {"a//b", "empty"},
        {"./a", "'.'"},
        {"a/.", "'.'"},
        {"a/", "empty"},
        {"", "empty key"},
    };
    char line[200];
    char longkey[1100];

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        snprintf(line, sizeof(line), "{\"key\": \"%s\", \"size\": 1, "
                 "\"mtime_ns\": 1, \"version\": \"v\"}", bad[i][0]);
        check_bad(line, bad[i][1]);
    }
    CHECK_OK(tfs_manifest_check_key("a..b/...c/d."));
    memset(longkey, 'k', 1025);
    longkey[1025] = '\0';
    CHECK_RC(tfs_manifest_check_key(longkey), TFS_EFORMAT);
    longkey[1024] = '\0';
    CHECK_OK(tfs_manifest_check_key(longkey));
}

/* Write text to a fresh file; its name in path. */
static void write_file(char *path, size_t size, const char *text)
{
    int fd;

    test_tmpfile(path, size, "manifest");
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);
}

static int count_fn(void *arg, const char *key, const struct tfs_stat *st,
                    uint64_t line_no)
{
    (void)key;
    (void)st;
    (void)line_no;
    (*(uint64_t *)arg)++;
    return 0;
}

/* The reader fails path's text with a detail containing want. */
static void check_file(const char *text, const char *ident, int want_rc,
                       const char *want)
{
    char path[64];
    uint64_t n = 0;
    int rc;

    write_file(path, sizeof(path), text);
    rc = tfs_manifest_read(path, ident, count_fn, &n);
    unlink(path);
    if (rc != want_rc || (want != NULL &&
                          strstr(tfs_errdetail(), want) == NULL))
        TEST_FAIL_("rc %d (%s), detail '%s', want %d '%s'", rc,
                   tfs_strerror(rc), tfs_errdetail(), want_rc, want);
}

#define E(k) "{\"key\": \"" k "\", \"size\": 1, \"mtime_ns\": 1, "     \
             "\"version\": \"v\"}\n"

TEST(file_rules)
{
    char *big = malloc(20000);

    check_file(HDR "\n" E("a") E("b") "{\"end\": true, \"objects\": 2}\n",
               "id", 0, NULL);
    check_file(HDR "\n" E("a") "{\"end\": true, \"objects\": 1}", NULL, 0,
               NULL);                   /* no newline at the end */
    check_file(HDR "\n" E("a") E("b") "{\"end\": true, \"objects\": 2}\n",
               "other", TFS_EFORMAT, "line 1: a manifest of id, not of "
               "other");
    check_file("", "id", TFS_EFORMAT, "empty: no header");
    check_file(E("a"), "id", TFS_EFORMAT, "line 1: not a tierfs manifest");
    check_file(HDR "\n" E("a") E("b"), "id", TFS_EFORMAT,
               "cut short: no end line after 2 objects");
    check_file(HDR "\n" E("a") "{\"end\": true, \"objects\": 2}\n", "id",
               TFS_EFORMAT, "line 3: the end line counts 2 objects, the "
               "manifest has 1");
    check_file(HDR "\n{\"end\": true, \"objects\": 0}\n" E("a"), "id",
               TFS_EFORMAT, "line 3: a line after the end line");
    check_file(HDR "\n" HDR "\n", "id", TFS_EFORMAT, "line 2: a second "
               "header");
    check_file(HDR "\n" E("a") E("../b") "{\"end\": true, \"objects\": 2}\n",
               "id", TFS_EFORMAT, "line 3: key '../b' is outside the URI");
    check_file(HDR "\n" E("a") "\n" E("b"), "id", TFS_EFORMAT, "line 3: ");
    CHECK(big != NULL);
    memset(big, 'x', 19999);
    big[19999] = '\0';
    memcpy(big, HDR "\n", sizeof(HDR));
    check_file(big, "id", TFS_ETOOBIG, "line 2: a line longer than 16384");
    free(big);
}

/* ---- a cache opened from a manifest ---- */

struct fixture {
    char              dir[64];
    char              path[64];         /* the manifest */
    struct tfs_store *st;
    struct tfs_cache *c;
};

static void fixture_store(struct fixture *f)
{
    char p[160];

    test_tmpdir(f->dir, sizeof(f->dir), "manifest-store");
    CHECK_OK(tfs_store_open(&f->st, f->dir, NULL));
    snprintf(p, sizeof(p), "%s/sub", f->dir);
    CHECK(mkdir(p, 0700) == 0);
}

/* Open a cache over f->st from a manifest of text ("ID" stands for the
   store's identity); the open's rc. */
static int fixture_open(struct fixture *f, const char *text)
{
    const char *ident = tfs_store_identity(f->st);
    struct tfs_buf b;
    const char *at;
    int rc;

    tfs_buf_init(&b, 0);
    while ((at = strstr(text, "ID")) != NULL) {
        tfs_buf_append(&b, text, (size_t)(at - text));
        tfs_buf_puts(&b, ident);
        text = at + 2;
    }
    tfs_buf_puts(&b, text);
    write_file(f->path, sizeof(f->path), tfs_buf_str(&b));
    tfs_buf_cleanup(&b);
    CHECK_OK(tfs_cache_create(&f->c));
    CHECK_OK(tfs_cache_set(f->c, "manifest", f->path));
    rc = tfs_cache_open(f->c, f->st);
    if (rc < 0) {
        tfs_cache_close(f->c);
        f->c = NULL;
    }
    return rc;
}

static void fixture_cleanup(struct fixture *f)
{
    tfs_cache_close(f->c);
    tfs_store_close(f->st);
    unlink(f->path);
    test_rmtree(f->dir);
}

#define MHDR "{\"tierfs_manifest\": 1, \"uri\": \"x\", \"identity\": \"ID\"}\n"
#define F(k, n) "{\"key\": \"" k "\", \"size\": " #n ", \"mtime_ns\": 9, " \
                "\"version\": \"v" #n "\"}\n"

TEST(cache_from_manifest)
{
    struct fixture f = {.st = NULL};
    struct tfs_store_stats ss;
    const struct tfs_dirent *e;
    struct tfs_stat st;
    struct tfs_dir *d;
    bool is_dir;

    fixture_store(&f);
    /* Out of order on purpose: the cache sorts it. */
    CHECK_OK(fixture_open(&f, MHDR F("z/b", 2) F("z/a", 1) F("top", 3)
                          F("z/deep/c", 4)
                          "{\"end\": true, \"objects\": 4}\n"));
    CHECK(tfs_cache_is_immutable(f.c));
    CHECK_OK(tfs_cache_stat(f.c, "z/a", &st));
    CHECK_EQ(st.size, 1);
    CHECK_EQ(st.mtime_ns, 9);
    CHECK_STR(st.version, "v1");
    CHECK_OK(tfs_cache_lookup(f.c, "z/deep", &is_dir, NULL));
    CHECK(is_dir);
    CHECK_RC(tfs_cache_stat(f.c, "sub", &st), -ENOENT); /* in the store */
    CHECK_OK(tfs_cache_opendir(f.c, "z/", &d));
    CHECK_EQ(tfs_dir_count(d), 3);
    e = tfs_dir_entry(d, 0);
    CHECK_STR(e->name, "a");
    e = tfs_dir_find(d, "deep");
    CHECK(e != NULL && e->is_dir);
    tfs_dir_put(d);
    CHECK_OK(tfs_cache_opendir(f.c, "", &d));
    CHECK_EQ(tfs_dir_count(d), 2);
    tfs_dir_put(d);
    tfs_store_get_stats(f.st, &ss);
    CHECK_EQ(ss.lists, 0);              /* the store was never listed */
    CHECK_EQ(ss.stats, 0);
    fixture_cleanup(&f);
}

TEST(cache_refuses_bad_manifests)
{
    static const char *const bad[][2] = {
        {MHDR F("a", 1) F("a", 2) "{\"end\": true, \"objects\": 2}\n",
         "line 3: duplicate key 'a' (also on line 2)"},
        {MHDR F("b", 1) F("a", 1) F("b", 3) "{\"end\": true, "
         "\"objects\": 3}\n", "line 4: duplicate key 'b' (also on line 2)"},
        {"{\"tierfs_manifest\": 1, \"uri\": \"x\", \"identity\": "
         "\"file:///elsewhere\"}\n{\"end\": true, \"objects\": 0}\n",
         "line 1: a manifest of file:///elsewhere, not of file:///tmp/"},
        {MHDR F("a", 1), "cut short"},
        {MHDR F("/etc/passwd", 1) "{\"end\": true, \"objects\": 1}\n",
         "line 2: key '/etc/passwd' is absolute"},
    };

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        struct fixture f = {.st = NULL};
        struct tfs_store_stats ss;
        int rc;

        fixture_store(&f);
        rc = fixture_open(&f, bad[i][0]);
        if (rc != TFS_EFORMAT || strstr(tfs_errdetail(), bad[i][1]) == NULL ||
            strstr(tfs_errdetail(), f.path) == NULL)
            TEST_FAIL_("case %zu: rc %d, detail '%s', want '%s'", i, rc,
                       tfs_errdetail(), bad[i][1]);
        tfs_store_get_stats(f.st, &ss);
        CHECK_EQ(ss.lists, 0);
        fixture_cleanup(&f);
    }
}

TEST(write_parse_round_trip)
{
    struct tfs_stat st = {.size = 1ull << 40, .mtime_ns = -1};
    struct tfs_manifest_line l;
    struct tfs_buf b;
    const char *key = "we\"ird\\/k\x01y\xff";

    snprintf(st.version, sizeof(st.version), "\"abc\"\n");
    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_manifest_put_entry(&b, key, &st));
    CHECK(b.len > 0 && b.p[b.len - 1] == '\n');
    CHECK_OK(tfs_manifest_parse_line(b.p, b.len - 1, &l));
    CHECK_STR(l.key, key);
    CHECK_EQ(l.st.size, st.size);
    CHECK_EQ(l.st.mtime_ns, -1);
    CHECK_STR(l.st.version, st.version);
    tfs_buf_reset(&b);
    CHECK_OK(tfs_manifest_put_header(&b, "s3://b/p", "s3://h:1/b/p"));
    CHECK_OK(tfs_manifest_parse_line(b.p, b.len - 1, &l));
    CHECK_STR(l.identity, "s3://h:1/b/p");
    tfs_buf_cleanup(&b);
}

TESTS(T(good_lines), T(bad_lines), T(key_rules), T(file_rules),
      T(cache_from_manifest), T(cache_refuses_bad_manifests),
      T(write_parse_round_trip));
TEST_MAIN()
