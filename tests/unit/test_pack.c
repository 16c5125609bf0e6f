/* SPDX-License-Identifier: MIT */
/*
 * The pack formats on their own: tar headers (encode/parse, long names,
 * large sizes, every kind of damage), the shard index (round trip, every
 * byte flipped), the manifest (round trip, bad ones) and member names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "test.h"
#include "common/json.h"
#include "common/util.h"
#include "pack/pack_int.h"

/* ---- tar ---- */

static void tar_roundtrip_one(const char *name, uint64_t size, size_t want)
{
    unsigned char buf[TFS_TAR_HDR_MAX];
    struct tfs_tar_member m;
    size_t len = 0;

    CHECK_OK(tfs_tar_encode(name, size, 1700000000, buf, sizeof(buf),
                            &len));
    CHECK_EQ(len, want);
    CHECK_OK(tfs_tar_parse(buf, len, &m));
    CHECK_STR(m.name, name);
    CHECK_EQ(m.size, size);
    CHECK_EQ(m.type, '0');
    CHECK_EQ(m.mtime_s, 1700000000);
    CHECK_EQ(m.hdr_len, len);
    /* Every shorter buffer asks for more, never reads past it. */
    for (size_t n = 0; n < len; n += 97) {
        CHECK_RC(tfs_tar_parse(buf, n, &m), -ENOBUFS);
        CHECK(m.hdr_len > n && m.hdr_len <= len);
    }
}

TEST(tar_roundtrip)
{
    char name[5000];

    tar_roundtrip_one("a.jpg", 0, 512);
    tar_roundtrip_one("train/class01/img000001.jpg", 123456, 512);
    memset(name, 'n', 100);
    memcpy(name + 96, ".jpg", 5);
    tar_roundtrip_one(name, 1, 512);              /* exactly 100 bytes */
    /* 101..256 bytes with a '/' to split at: the prefix field. */
    snprintf(name, sizeof(name), "%0150d/%090d.cls", 7, 8);
    tar_roundtrip_one(name, 2, 512);
    /* No split possible: a pax header first. */
    memset(name, 'k', 300);
    memcpy(name + 300, ".json", 6);
    tar_roundtrip_one(name, 3, 512 + 512 + 512);
    memset(name, 'q', 4000);
    memcpy(name + 4000, ".x", 3);
    tar_roundtrip_one(name, 4, 512 + 4096 + 512);
    /* 8 GiB and more: pax size, base-256 in the field. */
    tar_roundtrip_one("big.bin", 9ull << 30, 512 + 512 + 512);
    tar_roundtrip_one("edge.bin", 077777777777ull, 512);
}

TEST(tar_refuses)
{
    unsigned char buf[TFS_TAR_HDR_MAX];
    char name[TFS_TAR_NAME_MAX + 2];
    size_t len;

    CHECK_RC(tfs_tar_encode("", 1, 0, buf, sizeof(buf), &len), TFS_EBADKEY);
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    CHECK_RC(tfs_tar_encode(name, 1, 0, buf, sizeof(buf), &len),
             TFS_EBADKEY);
    CHECK_RC(tfs_tar_encode("a.b", 1, 0, buf, 100, &len), -ENOSPC);
}

TEST(tar_damage)
{
    unsigned char buf[2048];
    struct tfs_tar_member m;
    size_t len;

    memset(buf, 0, sizeof(buf));
    CHECK_RC(tfs_tar_parse(buf, 512, &m), -ENODATA);
    CHECK_OK(tfs_tar_encode("k.v", 10, 0, buf, sizeof(buf), &len));
    buf[10] ^= 1;                                 /* in the name */
    CHECK_RC(tfs_tar_parse(buf, len, &m), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "checksum mismatch") != NULL);
    buf[10] ^= 1;
    buf[148] = 'x';                               /* checksum field */
    CHECK_RC(tfs_tar_parse(buf, len, &m), TFS_EFORMAT);
    CHECK_OK(tfs_tar_encode("k.v", 10, 0, buf, sizeof(buf), &len));
    memcpy(buf + 257, "ustaR", 5);                /* magic, fix checksum */
    buf[148] = ' ';
    {
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += (i >= 148 && i < 156) ? ' ' : buf[i];
        snprintf((char *)buf + 148, 8, "%06o", sum);
    }
    CHECK_RC(tfs_tar_parse(buf, len, &m), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "magic") != NULL);
}

/* A pax header whose records are malformed must be refused cleanly. */
TEST(tar_bad_pax)
{
    unsigned char buf[3 * 512];
    char name[400];
    struct tfs_tar_member m;
    size_t len;

    memset(name, 'p', 300);
    memcpy(name + 300, ".v", 3);
    CHECK_OK(tfs_tar_encode(name, 1, 0, buf, sizeof(buf), &len));
    CHECK_EQ(len, 3 * 512);
    buf[512] = '9';                               /* record length */
    CHECK_RC(tfs_tar_parse(buf, len, &m), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "pax") != NULL);
}

TEST(tar_end_size)
{
    CHECK_EQ(tfs_tar_end_size(0), 10240);
    CHECK_EQ((512 + tfs_tar_end_size(512)) % 10240, 0);
    CHECK_EQ(tfs_tar_end_size(10240 - 1024), 1024);
    CHECK(tfs_tar_end_size(12345 * 512) >= 1024);
}

/* ---- the index ---- */

static void build_names(const char *const *names, const bool *starts,
                        size_t n, unsigned char **out, size_t *len)
{
    struct pack_index_builder b;
    uint64_t off = 0;

    tfs_pack_index_builder_init(&b);
    for (size_t i = 0; i < n; i++) {
        struct pack_member m = {
            .hdr_off = off, .data_off = off + 512, .size = 100 * i + 1,
            .xxh3 = i * 77, .name = names[i],
            .name_len = (uint16_t)strlen(names[i]),
            .key_len = (uint16_t)(strchr(strrchr(names[i], '/')
                                             ? strrchr(names[i], '/')
                                             : names[i], '.') - names[i]),
        };
        CHECK_OK(tfs_pack_index_add(&b, starts[i], &m));
        off = m.data_off + pack_round512(m.size);
    }
    CHECK_OK(tfs_pack_index_finish(&b, off + tfs_tar_end_size(off), 11, 22,
                                   out, len));
    tfs_pack_index_builder_cleanup(&b);
}

static void build_index(unsigned char **out, size_t *len)
{
    static const char *const names[] = {"a/x.jpg", "a/x.cls", "b.txt",
                                        "c.p.q", "c.r"};
    static const bool starts[] = {true, false, true, true, false};

    build_names(names, starts, 5, out, len);
}

TEST(index_roundtrip)
{
    struct pack_index *x = NULL;
    unsigned char *buf;
    size_t len;

    build_index(&buf, &len);
    CHECK_OK(tfs_pack_index_parse(buf, len, true, &x));
    CHECK_EQ(x->n_samples, 3);
    CHECK_EQ(x->n_members, 5);
    CHECK_EQ(x->tar_xxh3, 11);
    CHECK_EQ(x->plan_xxh3, 22);
    CHECK_EQ(x->samples[0].n, 2);
    CHECK_EQ(x->samples[2].first, 3);
    CHECK_STR(x->members[1].name, "a/x.cls");
    CHECK_EQ(x->members[1].key_len, 3);
    CHECK_STR(x->members[3].name + x->members[3].key_len + 1, "p.q");
    CHECK_EQ(x->members[4].data_off, x->members[4].hdr_off + 512);
    tfs_free(x);
    tfs_free(buf);
}

/* Every single-byte change is caught by the checksum, and parsing the
 * changed bytes without it never reads out of bounds (ASan). */
TEST(index_damage)
{
    unsigned char *buf;
    size_t len;
    int accepted = 0;

    build_index(&buf, &len);
    for (size_t i = 0; i < len; i++) {
        struct pack_index *x = NULL;
        buf[i] ^= 0x41;
        CHECK(tfs_pack_index_parse(buf, len, true, &x) < 0);
        tfs_put_le64(buf + len - 8, XXH3_64bits(buf, len - 8));
        if (tfs_pack_index_parse(buf, len, true, &x) == 0) {
            accepted++;                 /* a still-consistent index */
            for (uint64_t k = 0; k < x->n_members; k++)
                CHECK(strlen(x->members[k].name) ==
                      x->members[k].name_len);
            tfs_free(x);
        }
        buf[i] ^= 0x41;
        tfs_put_le64(buf + len - 8, XXH3_64bits(buf, len - 8));
    }
    CHECK(accepted < (int)len / 2);
    for (size_t n = 0; n < len; n++) {
        struct pack_index *x = NULL;
        CHECK(tfs_pack_index_parse(buf, n, false, &x) < 0);
    }
    tfs_free(buf);
}

/* Names must lie back to back: one region named twice is refused (the
 * fuzzer found the parser trusting that). */
TEST(index_overlapping_names)
{
    struct pack_index *x = NULL;
    unsigned char *buf;
    size_t len;
    size_t rec1;

    build_index(&buf, &len);
    rec1 = TFS_PIDX_HDR + 3 * TFS_PIDX_SAMPLE + TFS_PIDX_MEMBER;
    tfs_put_le32(buf + rec1 + 32, 0);
    tfs_put_le64(buf + len - 8, XXH3_64bits(buf, len - 8));
    CHECK_RC(tfs_pack_index_parse(buf, len, true, &x), TFS_EFORMAT);
    CHECK(strstr(tfs_errdetail(), "name table") != NULL);
    tfs_free(buf);
}

/* A crafted shard index cannot hand the caller a key that escapes: the
 * writer's rule (plan.c) holds on reading too (R9). */
TEST(index_hostile_names)
{
    static const char *const bad[] = {
        "../x.jpg", "/etc/x.jpg", "a/../../x.jpg", "a/..", "a//x.jpg",
        "./x.jpg", "a/./x.jpg", "a/x/..",
    };
    static const bool starts[] = {true, true};
    struct pack_index *x = NULL;
    unsigned char *buf;
    size_t len;

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        const char *names[2] = {"ok/y.jpg", bad[i]};
        int rc;

        build_names(names, starts, 2, &buf, &len);
        rc = tfs_pack_index_parse(buf, len, true, &x);
        if (rc != TFS_EFORMAT || strstr(tfs_errdetail(), bad[i]) == NULL)
            TEST_FAIL_("'%s': rc %d detail '%s'", bad[i], rc,
                       tfs_errdetail());
        tfs_free(buf);
    }
    CHECK(strstr(tfs_errdetail(), "'..' component") != NULL);
    {
        const char *names[2] = {"a..b/x.jpg", "..a/b.c"};

        build_names(names, starts, 2, &buf, &len);
        CHECK_OK(tfs_pack_index_parse(buf, len, true, &x));
        CHECK_STR(x->members[1].name, "..a/b.c");
        tfs_free(x);
        tfs_free(buf);
    }
}

/* ---- the manifest ---- */

TEST(manifest_roundtrip)
{
    struct pack_shard_info sh[2] = {
        {.tar = "shard-000000.tar", .idx = "shard-000000.idx",
         .n_samples = 3, .n_members = 6, .tar_size = 10240,
         .idx_size = 400, .tar_xxh3 = 0xfedcba9876543210ull,
         .idx_xxh3 = 1},
        {.tar = "shard-000001.tar", .idx = "shard-000001.idx",
         .n_samples = 1, .n_members = 1, .tar_size = 20480,
         .idx_size = 100, .tar_xxh3 = 2, .idx_xxh3 = UINT64_MAX},
    };
    struct pack_manifest m = {.shards = sh, .n_shards = 2, .n_samples = 4,
                              .n_members = 7, .tar_bytes = 30720,
                              .shard_size = 1 << 20, .shuffled = true,
                              .shuffle_seed = 42};
    struct pack_manifest back;
    char *json = NULL;
    size_t len = 0;

    CHECK_OK(tfs_pack_manifest_encode(&m, "{\"a\\\"b\": 1}", &json, &len));
    CHECK_OK(tfs_pack_manifest_parse(json, len, &back));
    CHECK_EQ(back.n_shards, 2);
    CHECK_EQ(back.n_samples, 4);
    CHECK_EQ(back.n_members, 7);
    CHECK_EQ(back.shuffle_seed, 42);
    CHECK(back.shuffled);
    CHECK_STR(back.shards[1].idx, "shard-000001.idx");
    CHECK(back.shards[0].tar_xxh3 == 0xfedcba9876543210ull);
    CHECK(back.shards[1].idx_xxh3 == UINT64_MAX);
    tfs_pack_manifest_cleanup(&back);
    tfs_free(json);
}

static void manifest_bad(const char *json, const char *why)
{
    struct pack_manifest m;

    CHECK_RC(tfs_pack_manifest_parse(json, strlen(json), &m), TFS_EFORMAT);
    if (strstr(tfs_errdetail(), why) == NULL)
        TEST_FAIL_("detail '%s' lacks '%s'", tfs_errdetail(), why);
}

TEST(manifest_refuses)
{
    const char *ok_shard = "{\"name\":\"s.tar\",\"index\":\"s.idx\","
                           "\"samples\":1,\"members\":1,\"bytes\":1024,"
                           "\"index_bytes\":80,\"xxh3\":\"0000000000000000\","
                           "\"index_xxh3\":\"0000000000000001\"}";
    char buf[1024];
    struct pack_manifest m;

    manifest_bad("", "JSON");
    manifest_bad("{\"format\":\"webdataset\"}", "not a");
    manifest_bad("{\"format\":\"tierfs-pack\",\"version\":2}", "version");
    manifest_bad("{\"format\":\"tierfs-pack\",\"version\":1,\"samples\":0}",
                 "shards");
    snprintf(buf, sizeof(buf), "{\"format\":\"tierfs-pack\",\"version\":1,"
             "\"samples\":2,\"shards\":[%s]}", ok_shard);
    manifest_bad(buf, "'samples' says 2");
    snprintf(buf, sizeof(buf), "{\"format\":\"tierfs-pack\",\"version\":1,"
             "\"samples\":1,\"shards\":[%s]}", ok_shard);
    CHECK_OK(tfs_pack_manifest_parse(buf, strlen(buf), &m));
    tfs_pack_manifest_cleanup(&m);
    /* Field names are file name extensions as they were: not UTF-8. */
    snprintf(buf, sizeof(buf), "{\"format\":\"tierfs-pack\",\"version\":1,"
             "\"samples\":1,\"fields\":{\"caf\xe9\":1},\"shards\":[%s]}",
             ok_shard);
    CHECK_OK(tfs_pack_manifest_parse(buf, strlen(buf), &m));
    tfs_pack_manifest_cleanup(&m);
    manifest_bad("{\"format\":\"tierfs-pack\",\"version\":1,\"samples\":1,"
                 "\"shards\":[{\"name\":\"../x.tar\"}]}", "file name");
    manifest_bad("{\"format\":\"tierfs-pack\",\"version\":1,\"samples\":1,"
                 "\"shards\":[{\"name\":\"a\\u0000b\"}]}", "u0000");
    manifest_bad("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                 "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                 "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "deeply");
}

/* The manifest's reader is common/json.c: what the manifest relies on. */
TEST(json_values)
{
    const char *text = " {\"a\": [1, -2, 3.5e2, true, false, null, "
                       "\"\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}} ";
    struct tfs_json_doc doc;
    const struct tfs_json *a;
    const struct tfs_json *e;
    uint64_t u = 0;

    CHECK_OK(tfs_json_parse(text, strlen(text), NULL, &doc));
    a = tfs_json_get(doc.root, "a");
    CHECK(a != NULL && a->type == TFS_JSON_ARRAY);
    e = a->child;
    CHECK(tfs_json_u64(e, &u) == 0 && u == 1);
    e = e->next;
    CHECK_RC(tfs_json_u64(e, &u), TFS_EFORMAT);
    e = e->next->next->next->next->next;
    CHECK_STR(tfs_json_str(e), "\xc3\xa9\xf0\x9f\x98\x80\n");
    CHECK(tfs_json_get(doc.root, "b") != NULL);
    CHECK(tfs_json_get(doc.root, "c") == NULL);
    tfs_json_cleanup(&doc);
    CHECK_RC(tfs_json_parse("[1,]", 4, NULL, &doc), TFS_EFORMAT);
    CHECK_RC(tfs_json_parse("01", 2, NULL, &doc), TFS_EFORMAT);
    CHECK_RC(tfs_json_parse("\"\\ud800\"", 8, NULL, &doc), TFS_EFORMAT);
    CHECK_RC(tfs_json_parse("{} x", 4, NULL, &doc), TFS_EFORMAT);
    CHECK_OK(tfs_json_parse("18446744073709551616", 20, NULL, &doc));
    CHECK_RC(tfs_json_u64(doc.root, &u), TFS_EFORMAT);
    tfs_json_cleanup(&doc);
}

/* ---- names ---- */

TEST(names)
{
    size_t k = 0;

    CHECK_OK(tfs_pack_check_name("train/img1.jpg", &k));
    CHECK_EQ(k, 10);
    CHECK_OK(tfs_pack_check_name("a.b/c.left.png", &k));
    CHECK_EQ(k, 5);
    CHECK_OK(tfs_pack_check_name("x__y__.jpg", &k));
    CHECK_OK(tfs_pack_check_name("d/__m__.jpg", &k));
    CHECK_RC(tfs_pack_check_name("/abs/x.jpg", &k), TFS_EESCAPE);
    CHECK_RC(tfs_pack_check_name("../x.jpg", &k), TFS_EESCAPE);
    CHECK_RC(tfs_pack_check_name("a/../../x.jpg", &k), TFS_EESCAPE);
    CHECK(strstr(tfs_errdetail(), "a/../../x.jpg") != NULL);
    CHECK_RC(tfs_pack_check_name("a//x.jpg", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("./x.jpg", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("README", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("d/.hidden", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("d/x.", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("__meta__", &k), TFS_EBADKEY);
    CHECK_RC(tfs_pack_check_name("__a.b__/x.jpg", &k), TFS_EBADKEY);
}

TESTS(T(tar_roundtrip), T(tar_refuses), T(tar_damage), T(tar_bad_pax),
      T(tar_end_size), T(index_roundtrip), T(index_damage),
      T(index_overlapping_names), T(index_hostile_names),
      T(manifest_roundtrip), T(manifest_refuses), T(json_values),
      T(names));
TEST_MAIN()
