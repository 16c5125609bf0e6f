/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint formats: the JSON parser and writer, safetensors header
 * encoding and decoding (valid files and every kind of bad one), boxes,
 * markers merged into an index, and URI splitting.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_int.h"
#include "test.h"

static int parse(const char *s, struct tfs_json_doc *doc)
{
    return tfs_json_parse(s, strlen(s), NULL, doc);
}

/* Parse s and write it back; the result must equal want. */
static void roundtrip(const char *s, const char *want)
{
    struct tfs_json_doc doc;
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    CHECK_OK(parse(s, &doc));
    CHECK_OK(tfs_json_write(&b, doc.root));
    CHECK_STR(tfs_buf_str(&b), want);
    tfs_json_cleanup(&doc);
    tfs_buf_cleanup(&b);
}

TEST(json_values)
{
    struct tfs_json_doc doc;
    const struct tfs_json *v;
    uint64_t u;
    int64_t i;

    CHECK_OK(parse(" {\"a\": [1, -2, 3.5e2, true, false, null], \"s\": "
                   "\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9"
                   "\\ud83d\\ude00\", \"big\": 18446744073709551615, "
                   "\"neg\": -9223372036854775808}\n", &doc));
    CHECK_EQ(doc.root->type, TFS_JSON_OBJECT);
    CHECK_EQ(doc.root->n, 4);
    v = tfs_json_get(doc.root, "a");
    CHECK(v != NULL && v->type == TFS_JSON_ARRAY && v->n == 6);
    CHECK_OK(tfs_json_u64(v->child, &u));
    CHECK_EQ(u, 1);
    CHECK_RC(tfs_json_u64(v->child->next, &u), TFS_EFORMAT);
    CHECK_OK(tfs_json_i64(v->child->next, &i));
    CHECK_EQ(i, -2);
    CHECK_RC(tfs_json_u64(v->child->next->next, &u), TFS_EFORMAT);
    CHECK_STR(tfs_json_str(tfs_json_get(doc.root, "s")),
              "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
    CHECK_OK(tfs_json_u64(tfs_json_get(doc.root, "big"), &u));
    CHECK(u == UINT64_MAX);
    CHECK_OK(tfs_json_i64(tfs_json_get(doc.root, "neg"), &i));
    CHECK(i == INT64_MIN);
    CHECK(tfs_json_get(doc.root, "nope") == NULL);
    tfs_json_cleanup(&doc);
    roundtrip("{ \"k\" : [ 1.50 , \"\\u0001\" , {} , [] ] }",
              "{\"k\":[1.50,\"\\u0001\",{},[]]}");
    roundtrip("\"caf\xc3\xa9\"", "\"caf\xc3\xa9\"");
}

TEST(json_errors)
{
    static const char *const bad[] = {
        "", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "[1 2]", "01", "-", "1.",
        "1e", "+1", "nul", "tru", "\"abc", "\"\\x\"", "\"\\u12\"",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\u0000\"",
        "\"a\x01\"", "\"\xff\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
        "{\"a\":1,\"a\":2}", "[1] x", "{1:2}", "[\"\xe2\x82\"]",
    };
    struct tfs_json_doc doc;
    struct tfs_json_limits lim = {100, 3, 5, false};

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        int rc = parse(bad[i], &doc);

        if (rc != TFS_EFORMAT)
            TEST_FAIL_("'%s' parsed: %d", bad[i], rc);
        CHECK(doc.root == NULL && doc.chunks == NULL);
    }
    CHECK_RC(tfs_json_parse("[[[[1]]]]", 9, &lim, &doc), TFS_ETOOBIG);
    CHECK_RC(tfs_json_parse("[1,2,3,4,5,6]", 13, &lim, &doc),
             TFS_ETOOBIG);
    lim.max_len = 4;
    CHECK_RC(tfs_json_parse("[1,2]", 5, &lim, &doc), TFS_ETOOBIG);
    /* Many members, one duplicate: found through the sorted check. */
    struct tfs_buf b;
    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_buf_puts(&b, "{"));
    for (int k = 0; k < 100; k++)
        CHECK_OK(tfs_buf_printf(&b, "\"k%d\":%d,", k, k));
    CHECK_OK(tfs_buf_puts(&b, "\"k42\":0}"));
    CHECK_RC(parse(tfs_buf_str(&b), &doc), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "k42") != NULL);
    tfs_buf_cleanup(&b);
}

TEST(json_strings)
{
    struct tfs_buf b;
    struct tfs_json_doc doc;

    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_json_put_str(&b, "a\"b\\c\n\x01\x1f\xc3\xa9", 10));
    CHECK_STR(tfs_buf_str(&b), "\"a\\\"b\\\\c\\n\\u0001\\u001f\xc3\xa9\"");
    CHECK_OK(parse(tfs_buf_str(&b), &doc));
    CHECK(doc.root->len == 10 &&
          memcmp(doc.root->s, "a\"b\\c\n\x01\x1f\xc3\xa9", 10) == 0);
    tfs_json_cleanup(&doc);
    tfs_buf_reset(&b);
    CHECK_OK(tfs_json_copy(&b, " [ 1 , {\"x\" : null} ] ", 22));
    CHECK_STR(tfs_buf_str(&b), "[1,{\"x\":null}]");
    CHECK_RC(tfs_json_copy(&b, "[1,", 3), TFS_EFORMAT);
    tfs_buf_cleanup(&b);
}

/* ---- safetensors ---- */

static const int64_t shp_a[] = {2, 3};
static const int64_t shp_b[] = {4};
static const int64_t off_b[] = {4};
static const int64_t shp_e[] = {0, 5};

/* A header for: a F32[2,3], b BF16[4] (a slice at 4), c I64 scalar, e
 * BOOL[0,5]; data offsets as laid out back to back. */
static void make_header(struct tfs_buf *b)
{
    struct tfs_ckpt_st_entry v[] = {
        {"a", tfs_ckpt_dtype_find("F32", 3), 2, shp_a, NULL, 0, 24, 0x11},
        {"b", tfs_ckpt_dtype_find("BF16", 4), 1, shp_b, off_b, 24, 32,
         0xdeadbeefcafef00dull},
        {"c", tfs_ckpt_dtype_find("I64", 3), 0, NULL, NULL, 32, 40, 3},
        {"e", tfs_ckpt_dtype_find("BOOL", 4), 2, shp_e, NULL, 40, 40, 4},
    };

    tfs_buf_init(b, 0);
    CHECK_OK(tfs_ckpt_st_encode(b, v, TFS_ARRAY_LEN(v)));
}

TEST(st_roundtrip)
{
    struct tfs_ckpt_st_header h;
    struct tfs_buf b;
    uint64_t n;

    make_header(&b);
    CHECK_EQ(b.len % 8, 0);
    CHECK_OK(tfs_ckpt_st_header_len((const unsigned char *)b.p, b.len + 40,
                                    "f", &n));
    CHECK_EQ(n + 8, b.len);
    CHECK_EQ(b.p[8], '{');
    CHECK(strstr(b.p + 8, "\"format\":\"pt\"") != NULL);
    CHECK(strstr(b.p + 8, "DCP_SHARDING_INFO") != NULL);
    CHECK_OK(tfs_ckpt_st_decode(b.p + 8, (size_t)n, b.len + 40, "f", &h));
    CHECK_EQ(h.n, 4);
    CHECK_EQ(h.data_len, 40);
    CHECK_STR(h.format, "pt");
    CHECK_STR(h.v[0].name, "a");
    CHECK_EQ(h.v[0].ndim, 2);
    CHECK_EQ(h.v[0].shape[1], 3);
    CHECK(h.v[0].has_xxh3 && h.v[0].xxh3 == 0x11 && !h.v[0].sliced);
    CHECK_STR(h.v[1].name, "b");
    CHECK(h.v[1].sliced && h.v[1].offsets[0] == 4);
    CHECK(h.v[1].xxh3 == 0xdeadbeefcafef00dull);
    CHECK_EQ(h.v[2].ndim, 0);
    CHECK_EQ(h.v[2].end - h.v[2].begin, 8);
    CHECK_EQ(h.v[3].begin, h.v[3].end);
    tfs_ckpt_st_cleanup(&h);
    /* The checksums never change the header's length. */
    struct tfs_ckpt_st_entry one = {"x", 0, 0, NULL, NULL, 0, 1, 0};
    struct tfs_buf b2;
    tfs_buf_init(&b2, 0);
    CHECK_OK(tfs_ckpt_st_encode(&b2, &one, 1));
    size_t len0 = b2.len;
    one.xxh3 = UINT64_MAX;
    tfs_buf_reset(&b2);
    CHECK_OK(tfs_ckpt_st_encode(&b2, &one, 1));
    CHECK_EQ(b2.len, len0);
    tfs_buf_cleanup(&b2);
    tfs_buf_cleanup(&b);
}

/* Decode the JSON text as a header of a file of file_size bytes. */
static int decode(const char *json, uint64_t data_len)
{
    struct tfs_ckpt_st_header h;
    size_t n = strlen(json);
    int rc = tfs_ckpt_st_decode(json, n, 8 + n + data_len, "bad.st", &h);

    if (rc == 0)
        tfs_ckpt_st_cleanup(&h);
    return rc;
}

/* decode must fail with TFS_EFORMAT and a detail holding want. */
static void bad(const char *json, uint64_t data_len, const char *want)
{
    int rc = decode(json, data_len);

    if (rc != TFS_EFORMAT || strstr(tfs_errdetail(), want) == NULL ||
        strncmp(tfs_errdetail(), "bad.st: ", 8) != 0)
        TEST_FAIL_("%s: rc %d, detail '%s', want '%s'", json, rc,
                   tfs_errdetail(), want);
}

TEST(st_bad)
{
    unsigned char len8[8] = {0xff, 0, 0, 0, 0, 0, 0, 0};
    uint64_t n;

    CHECK_OK(decode("{\"t\":{\"dtype\":\"U8\",\"shape\":[2],"
                    "\"data_offsets\":[0,2]}}", 2));
    CHECK_RC(tfs_ckpt_st_header_len(len8, 100, "bad.st", &n), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "beyond the file") != NULL);
    CHECK_RC(tfs_ckpt_st_header_len(len8, 5, "bad.st", &n), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "truncated") != NULL);
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 1,
        "truncated");
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3,
        "trailing bytes");
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3,
        "overlaps");
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3,
        "hole");
    bad("{\"t\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
        "unknown dtype 'Q7'");
    bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
        "need 8");
    bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
        0, "bad shape");
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,1]}}", 0,
        "bad data_offsets");
    bad("{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "no dtype");
    bad("{\"t\":3}", 0, "not an object");
    bad("{\"__metadata__\":{\"format\":3}}", 0, "not a string");
    bad("{\"__metadata__\":{\"" TFS_CKPT_CSUM_KEY "\":\"{\\\"z\\\":"
        "\\\"xxh3:0000000000000000\\\"}\"}}", 0, "unknown tensor 'z'");
    bad("{\"__metadata__\":{\"" TFS_CKPT_CSUM_KEY "\":\"[\"}}", 0,
        TFS_CKPT_CSUM_KEY);
    bad("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
        "\"__metadata__\":{\"" TFS_CKPT_SHARDING_KEY "\":\"{\\\"t\\\":"
        "{\\\"saved_offsets\\\":[1,2]}}\"}}", 1, "bad saved_offsets");
    bad("[1]", 0, "does not start with '{'");
    bad("{\"a\":1", 0, "bad header");
    /* Sub-byte dtypes must end on a byte boundary. */
    bad("{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
        "need");
    CHECK_OK(decode("{\"t\":{\"dtype\":\"F4\",\"shape\":[4],"
                    "\"data_offsets\":[0,2]}}", 2));
}

/* ---- boxes ---- */

TEST(boxes)
{
    /* A 4x5x6 tensor of element index values, cut into 2x5x6 halves and
     * 4x5x3 halves; reassemble arbitrary boxes from either cut. */
    enum { A = 4, B = 5, C = 6 };
    int32_t full[A * B * C];
    int32_t half[2][A * B * C / 2];
    struct tfs_ckpt_box fb = {3, {0, 0, 0}, {A, B, C}};
    struct tfs_ckpt_box hb[2] = {{3, {0, 0, 0}, {2, B, C}},
                                 {3, {2, 0, 0}, {2, B, C}}};
    struct tfs_ckpt_box want = {3, {1, 2, 1}, {3, 2, 4}};
    int32_t out[3 * 2 * 4];
    struct tfs_ckpt_box part;

    for (int i = 0; i < A * B * C; i++)
        full[i] = i;
    for (int h = 0; h < 2; h++) {
        CHECK(tfs_ckpt_box_intersect(&fb, &hb[h], &part));
        tfs_ckpt_box_copy(half[h], &hb[h], full, &fb, &part, 4);
    }
    CHECK_EQ(half[1][0], 2 * B * C);
    memset(out, 0xff, sizeof(out));
    for (int h = 0; h < 2; h++) {
        CHECK(tfs_ckpt_box_intersect(&hb[h], &want, &part));
        tfs_ckpt_box_copy(out, &want, half[h], &hb[h], &part, 4);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 4; k++)
                CHECK_EQ(out[(i * 2 + j) * 4 + k],
                         ((1 + i) * B + 2 + j) * C + 1 + k);
    CHECK_EQ(tfs_ckpt_box_volume(&want), 24);
    struct tfs_ckpt_box far = {3, {3, 4, 5}, {1, 1, 1}};
    struct tfs_ckpt_box near = {3, {0, 0, 0}, {1, 1, 1}};
    CHECK(!tfs_ckpt_box_intersect(&far, &near, &part));
    struct tfs_ckpt_box scalar = {0, {0}, {0}};
    CHECK(tfs_ckpt_box_intersect(&scalar, &scalar, &part));
    CHECK_EQ(tfs_ckpt_box_volume(&scalar), 1);
    /* Parts that are one contiguous run of a box, and parts that are not. */
    static const struct {
        struct tfs_ckpt_box part;
        bool                run;
        uint64_t            at;
    } runs[] = {
        {{3, {2, 0, 0}, {2, B, C}}, true, 2 * B * C},
        {{3, {1, 2, 0}, {1, 1, C}}, true, B * C + 2 * C},
        {{3, {1, 2, 0}, {1, 2, C}}, true, B * C + 2 * C},
        {{3, {1, 2, 3}, {1, 1, 2}}, true, B * C + 2 * C + 3},
        {{3, {0, 0, 1}, {A, B, C - 1}}, false, 0},
        {{3, {1, 0, 0}, {2, 2, C}}, false, 0},
    };
    for (size_t i = 0; i < TFS_ARRAY_LEN(runs); i++) {
        uint64_t at = 0;

        CHECK_EQ(tfs_ckpt_box_run(&runs[i].part, &fb, &at), runs[i].run);
        if (runs[i].run)
            CHECK_EQ(at, runs[i].at);
    }
}

/* ---- markers and the index ---- */

static struct tfs_ckpt_tensor_info tinfo(const char *name, const char *file,
                                         int64_t rows, int64_t off,
                                         int64_t full_rows)
{
    struct tfs_ckpt_tensor_info t = {0};

    t.name = (char *)name;
    t.file = (char *)file;
    t.dtype = tfs_ckpt_dtype_find("F32", 3);
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = 3;
    t.full_shape[0] = full_rows;
    t.full_shape[1] = 3;
    t.sliced = full_rows != rows || off != 0;
    t.offsets[0] = off;
    t.nbytes = (uint64_t)rows * 12;
    return t;
}

static struct tfs_ckpt_file_info finfo(const char *name, unsigned rank)
{
    struct tfs_ckpt_file_info f = {(char *)name, rank, 1000, 200, 0x1234,
                                   0xabcd, 2};
    return f;
}

TEST(index_build)
{
    struct tfs_ckpt_tensor_info t0[] = {
        tinfo("w", "f0", 2, 0, 5), tinfo("bias", "f0", 1, 0, 1)};
    struct tfs_ckpt_tensor_info t1[] = {tinfo("w", "f1", 3, 2, 5)};
    struct tfs_ckpt_file_info f0[] = {finfo("f0", 0)};
    struct tfs_ckpt_file_info f1[] = {finfo("f1", 1)};
    struct tfs_ckpt_marker m[2] = {
        {0, 2, 7, (char *)"run", f0, 1, t0, 2, (char *)"{\"a\":1}", ""},
        {1, 2, 7, (char *)"run", f1, 1, t1, 1, NULL, ""},
    };
    struct tfs_ckpt_index ix;
    struct tfs_ckpt_index back;
    struct tfs_ckpt_marker mb;
    struct tfs_buf b;

    t0[1].sliced = false;
    CHECK_OK(tfs_ckpt_index_build(m, 2, 123, &ix));
    CHECK_EQ(ix.n_wm, 2);
    CHECK_STR(ix.wm_names[0], "w");
    CHECK_STR(ix.wm_files[0], "f0");
    CHECK_STR(ix.wm_names[1], "bias");
    CHECK_EQ(ix.total_size, 5 * 12 + 12);
    CHECK_EQ(ix.n_sharded, 1);
    CHECK_EQ(ix.sharded[0].shape[0], 5);
    CHECK_EQ(ix.n_files, 2);
    CHECK_EQ(ix.files[1].rank, 1);
    tfs_buf_init(&b, 0);
    CHECK_OK(tfs_ckpt_index_write(&b, &ix));
    CHECK(strncmp(b.p, "{\"metadata\":{\"total_size\":72},\"weight_map\":"
                  "{\"w\":\"f0\",\"bias\":\"f0\"}", 62) == 0);
    CHECK_OK(tfs_ckpt_index_parse(b.p, b.len, "ix", &back));
    CHECK_EQ(back.step, 7);
    CHECK_EQ(back.world_size, 2);
    CHECK_EQ(back.created_ns, 123);
    CHECK_STR(back.run_id, "run");
    CHECK_STR(back.extra[0], "{\"a\":1}");
    CHECK_STR(back.extra[1], "null");
    CHECK(tfs_ckpt_index_file(&back, "f1")->data_xxh3 == 0xabcd);
    CHECK_EQ(back.n_sharded, 1);
    tfs_ckpt_index_cleanup(&back);
    tfs_ckpt_index_cleanup(&ix);
    /* A marker survives its own round trip. */
    tfs_buf_reset(&b);
    CHECK_OK(tfs_ckpt_marker_write(&b, &m[1]));
    CHECK_OK(tfs_ckpt_marker_parse(b.p, b.len, "mk", &mb));
    CHECK_EQ(mb.rank, 1);
    CHECK_EQ(mb.n_tensors, 1);
    CHECK(mb.tensors[0].sliced && mb.tensors[0].offsets[0] == 2);
    CHECK_EQ(mb.tensors[0].full_shape[0], 5);
    tfs_ckpt_marker_cleanup(&mb);
    /* Slices that overlap, leave a gap, or disagree on the dtype. */
    t1[0] = tinfo("w", "f1", 3, 1, 5);
    CHECK_RC(tfs_ckpt_index_build(m, 2, 0, &ix), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "overlap") != NULL);
    t1[0] = tinfo("w", "f1", 2, 2, 5);
    CHECK_RC(tfs_ckpt_index_build(m, 2, 0, &ix), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "cover 12 of 15") != NULL);
    t1[0] = tinfo("w", "f1", 3, 2, 5);
    t1[0].dtype = tfs_ckpt_dtype_find("F16", 3);
    CHECK_RC(tfs_ckpt_index_build(m, 2, 0, &ix), TFS_EFORMAT);
    t1[0] = tinfo("w", "nofile", 3, 2, 5);
    CHECK_RC(tfs_ckpt_index_build(m, 2, 0, &ix), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "nofile") != NULL);
    m[1].step = 8;
    t1[0] = tinfo("w", "f1", 3, 2, 5);
    CHECK_RC(tfs_ckpt_index_build(m, 2, 0, &ix), TFS_EFORMAT);
    tfs_buf_cleanup(&b);
}

TEST(index_bad)
{
    static const char *const bad[] = {
        "{}",
        "{\"metadata\":{\"total_size\":1},\"weight_map\":{}}",
        "{\"metadata\":{\"total_size\":1},\"weight_map\":{\"a\":\"f\"},"
        "\"tierfs\":{\"step\":1,\"world_size\":1,\"files\":{},\"sharded\":{},"
        "\"extra\":[null]}}",
        "{\"metadata\":{\"total_size\":1},\"weight_map\":{},"
        "\"tierfs\":{\"step\":1,\"world_size\":1,\"files\":{\"../x\":{}},"
        "\"sharded\":{},\"extra\":[null]}}",
        "{\"metadata\":{\"total_size\":1},\"weight_map\":{},"
        "\"tierfs\":{\"step\":1,\"world_size\":1,\"files\":{},\"sharded\":{},"
        "\"extra\":[]}}",
    };
    struct tfs_ckpt_index ix;

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        int rc = tfs_ckpt_index_parse(bad[i], strlen(bad[i]), "ix", &ix);

        if (rc != TFS_EFORMAT || strncmp(tfs_errdetail(), "ix: ", 4) != 0)
            TEST_FAIL_("index %zu: rc %d detail '%s'", i, rc,
                       tfs_errdetail());
    }
    CHECK(strstr(tfs_errdetail(), "not a tierfs checkpoint index") != NULL);
    static const char good[] =
        "{\"metadata\":{\"total_size\":0},\"weight_map\":{},"
        "\"tierfs\":{\"step\":1,\"world_size\":1,\"files\":{},\"sharded\":{},"
        "\"extra\":[{\"x\":[1]}]}}";
    CHECK_OK(tfs_ckpt_index_parse(good, strlen(good), "ix", &ix));
    CHECK_STR(ix.extra[0], "{\"x\":[1]}");
    tfs_ckpt_index_cleanup(&ix);
}

/* An index with one file whose header is hsize bytes (R10). */
static int parse_header_size(uint64_t hsize, struct tfs_ckpt_index *ix)
{
    char text[512];

    snprintf(text, sizeof(text),
             "{\"metadata\":{\"total_size\":0},\"weight_map\":{},"
             "\"tierfs\":{\"step\":1,\"world_size\":1,\"files\":{\"f\":"
             "{\"rank\":0,\"size\":%" PRIu64 ",\"header_size\":%" PRIu64 ","
             "\"header_xxh3\":\"0000000000000001\",\"data_xxh3\":"
             "\"0000000000000002\",\"tensors\":0}},\"sharded\":{},"
             "\"extra\":[null]}}", hsize + 16, hsize);
    return tfs_ckpt_index_parse(text, strlen(text), "ix", ix);
}

TEST(index_header_cap)
{
    struct tfs_ckpt_index ix;

    /* The largest header a reader accepts parses ... */
    CHECK_OK(parse_header_size(8 + (uint64_t)TFS_CKPT_ST_MAX_HEADER, &ix));
    CHECK_EQ(ix.files[0].header_size, 8 + (uint64_t)TFS_CKPT_ST_MAX_HEADER);
    tfs_ckpt_index_cleanup(&ix);
    /* ... one byte more, or a hostile 2^60, is a format error before any
     * reader allocates it. */
    CHECK_RC(parse_header_size(9 + (uint64_t)TFS_CKPT_ST_MAX_HEADER, &ix),
             TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "ix: ") == tfs_errdetail());
    CHECK(strstr(tfs_errdetail(), "over the limit") != NULL);
    CHECK_RC(parse_header_size(1ull << 60, &ix), TFS_EFORMAT);
}

/* n slices of w[rows x cols]: piece i at box (r0, c0, nr, nc). */
static void slice_at(struct tfs_ckpt_tensor_info *t, int64_t r0, int64_t c0,
                     int64_t nr, int64_t nc, int64_t rows, int64_t cols)
{
    memset(t, 0, sizeof(*t));
    t->name = (char *)"w";
    t->file = (char *)"f0";
    t->dtype = tfs_ckpt_dtype_find("F32", 3);
    t->ndim = 2;
    t->shape[0] = nr;
    t->shape[1] = nc;
    t->offsets[0] = r0;
    t->offsets[1] = c0;
    t->full_shape[0] = rows;
    t->full_shape[1] = cols;
    t->sliced = true;
    t->nbytes = (uint64_t)(nr * nc * 4);
}

static int build_one(struct tfs_ckpt_tensor_info *t, size_t n)
{
    struct tfs_ckpt_file_info f[] = {finfo("f0", 0)};
    struct tfs_ckpt_marker m = {0, 1, 7, (char *)"", f, 1, t, n, NULL, ""};
    struct tfs_ckpt_index ix;
    int rc = tfs_ckpt_index_build(&m, 1, 0, &ix);

    if (rc == 0)
        tfs_ckpt_index_cleanup(&ix);
    return rc;
}

TEST(index_slices)
{
    enum { N = 20000 };
    struct tfs_ckpt_tensor_info *t = calloc(N, sizeof(*t));
    uint64_t t0;

    CHECK(t != NULL);
    /* Rows, columns, and a 4 x 5 grid, each in a scrambled order, some
     * slices saved twice (replicas count once). */
    for (int i = 0; i < 8; i++)
        slice_at(&t[i], (i * 5) % 8, 0, 1, 6, 8, 6);
    slice_at(&t[8], 3, 0, 1, 6, 8, 6);
    CHECK_OK(build_one(t, 9));
    for (int i = 0; i < 6; i++)
        slice_at(&t[i], 0, (i * 5) % 6, 8, 1, 8, 6);
    CHECK_OK(build_one(t, 6));
    for (int i = 0; i < 20; i++)
        slice_at(&t[i], ((i * 7) % 20) / 5 * 2, ((i * 7) % 20) % 5, 2, 1,
                 8, 5);
    slice_at(&t[20], 6, 4, 2, 1, 8, 5);
    CHECK_OK(build_one(t, 21));
    /* One cell moved half a cell down: it overlaps the cell below by as
     * much as it leaves uncovered, so only the overlap test can see it. */
    for (int i = 0; i < 20; i++)
        if (t[i].offsets[0] == 0 && t[i].offsets[1] == 0)
            t[i].offsets[0] = 1;
    CHECK_RC(build_one(t, 21), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "overlap") != NULL);
    /* The same across columns (the sweep runs along the other dimension):
     * column 7's slice is two wide, over column 8's, and none has 9. */
    for (int i = 0; i < 9; i++)
        slice_at(&t[i], 0, (i * 4) % 9, 4, 1, 4, 10);
    CHECK_RC(build_one(t, 9), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "cover 36 of 40") != NULL);
    for (int i = 0; i < 9; i++)
        if (t[i].offsets[1] == 7)
            t[i].shape[1] = 2;
    CHECK_RC(build_one(t, 9), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "overlap") != NULL);
    /* 20000 row slices: a sort, not 2 * 10^8 box comparisons. */
    for (int i = 0; i < N; i++)
        slice_at(&t[i], (int64_t)(((uint64_t)i * 7919) % N), 0, 1, 4, N, 4);
    t0 = tfs_now_ns();
    CHECK_OK(build_one(t, N));
    fprintf(stderr, "index_slices: %d slices checked in %.1f ms\n", N,
            (double)(tfs_now_ns() - t0) / 1e6);
    free(t);
}

TEST(uris)
{
    static const struct {
        const char *in;
        const char *root;
        int64_t     step;
    } cases[] = {
        {"s3://b/run/step-000100", "s3://b/run", 100},
        {"s3://b/run/step-7/", "s3://b/run", 7},
        {"s3://b/run/latest", "s3://b/run", -1},
        {"s3://b/run/42?x=1", "s3://b/run?x=1", 42},
        {"s3://b/run", "s3://b/run", -1},
        {"s3://b", "s3://b", -1},
        {"s3://step-1", "s3://step-1", -1},
        {"/tmp/ck/step-000003", "/tmp/ck", 3},
        {"/tmp/ck", "/tmp/ck", -1},
        {"/step-5", "/", 5},
        {"step-5", ".", 5},
        {"ck", "ck", -1},
        {"file:///tmp/x/step-2", "file:///tmp/x", 2},
        {"fault+file:///tmp/x/3?latency_ms=1",
         "fault+file:///tmp/x?latency_ms=1", 3},
    };
    char root[256];
    int64_t step;

    for (size_t i = 0; i < TFS_ARRAY_LEN(cases); i++) {
        CHECK_OK(tfs_ckpt_split_uri(cases[i].in, root, sizeof(root), &step));
        if (strcmp(root, cases[i].root) != 0 || step != cases[i].step)
            TEST_FAIL_("%s: got %s / %lld", cases[i].in, root,
                       (long long)step);
    }
    CHECK_RC(tfs_ckpt_split_uri("/a/very/long/path", root, 8, &step),
             -ENAMETOOLONG);
    uint64_t s;
    CHECK(tfs_ckpt_step_parse("step-000100", 11, &s) && s == 100);
    CHECK(!tfs_ckpt_step_parse("step-", 5, &s));
    CHECK(!tfs_ckpt_step_parse("step-1x", 7, &s));
    CHECK(!tfs_ckpt_step_parse("stop-1", 6, &s));
}

TESTS(T(json_values), T(json_errors), T(json_strings), T(st_roundtrip),
      T(st_bad), T(boxes), T(index_build), T(index_bad), T(index_header_cap),
      T(index_slices), T(uris));
TEST_MAIN()
