/* SPDX-License-Identifier: MIT */
/*
 * End-to-end verification of store bytes (D8): a corrupt transfer,
 * emulated by the fault layer flipping a byte after the store's read, is
 * read once more, then fails EIO, is counted, and never reaches the RAM
 * or disk tier; once the fault is gone the right bytes come back.
 *
 * S3 checks whole-object reads against the single-part ETag (MD5); any
 * store can re-read and compare with verify=reread.  The remote is a
 * temporary directory, or, with TFS_TEST_REMOTE=s3://bucket/prefix, a
 * fresh prefix on the S3 server (the S3-only cases skip without it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_remote.h"
#include "tierfs/cache.h"
#include "tierfs/err.h"
#include "tierfs/fault.h"
#include "tierfs/store.h"
#include "common/util.h"

static void setup_dirs(void)
{
    remote_setup("verify");
}

static void remove_dirs(void)
{
    remote_remove();
}

/* fault+remote with opts ("a=b&c=d"). */
static struct tfs_store *open_remote(const char *opts)
{
    struct tfs_store *st = NULL;
    char uri[300];

    snprintf(uri, sizeof(uri), "fault+%s", base_uri);
    CHECK_OK(tfs_store_open(&st, uri, opts));
    return st;
}

static struct tfs_cache *open_cache(struct tfs_store *st)
{
    struct tfs_cache *c = NULL;

    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_set(c, "block_size", "1M"));
    CHECK_OK(tfs_cache_set(c, "mem_cache", "64M"));
    CHECK_OK(tfs_cache_set(c, "cache_dir", cdir));
    /* each block read once (and reread as verify= says): the counts the
     * tests check; a hedged second read on a slow machine adds to them */
    CHECK_OK(tfs_cache_set(c, "hedge", "0"));
    CHECK_OK(tfs_cache_open(c, st));
    return c;
}

/* A counter from the stats JSON. */
static uint64_t stat_of(struct tfs_cache *c, const char *name)
{
    char buf[8192];
    char pat[80];
    size_t len;
    const char *p;

    CHECK_OK(tfs_cache_stats_json(c, buf, sizeof(buf), &len));
    snprintf(pat, sizeof(pat), "\"%s\": ", name);
    p = strstr(buf, pat);
    CHECK(p != NULL);
    return strtoull(p + strlen(pat), NULL, 10);
}

/* Read key whole through c: the rc of the first failing read, or 0. */
static int read_whole(struct tfs_cache *c, const char *key,
                      unsigned char *buf, size_t len)
{
    struct tfs_file *f = NULL;
    size_t chunk = 256u << 10;
    size_t n = 0;
    int rc = tfs_file_open(c, key, &f);

    for (size_t off = 0; rc == 0 && off < len; off += chunk) {
        rc = tfs_file_read(f, buf + off, TFS_MIN(chunk, len - off), off, &n);
        if (rc == 0 && n != TFS_MIN(chunk, len - off))
            rc = -EPIPE;
    }
    if (f != NULL)
        tfs_file_close(f);
    return rc;
}

static uint64_t flipped(struct tfs_store *st)
{
    struct tfs_fault_stats s;

    tfs_fault_get_stats(st, &s);
    return s.flipped_reads;
}

/*
 * E14 on S3: every read comes back with a flipped byte.  The block (the
 * whole object) fails its ETag check twice, the read fails EIO, nothing
 * is cached; without the fault the next read has the right bytes, and a
 * cache reopened over the store without the fault layer finds those.
 */
TEST(s3_flip_is_eio_and_never_cached)
{
    size_t len = 1000000;               /* one 1 MiB block: a whole read */
    unsigned char *data = test_pattern(len, 1);
    unsigned char *got = malloc(len);
    struct tfs_store *st;
    struct tfs_cache *c;

    if (!on_s3()) {
        printf("# skipped: needs TFS_TEST_REMOTE=s3://...\n");
        free(data);
        free(got);
        return;
    }
    setup_dirs();
    CHECK_OK(tfs_store_put(raw, "obj", data, len, NULL));
    st = open_remote("flip_rate=1&seed=1");
    c = open_cache(st);
    CHECK_RC(read_whole(c, "obj", got, len), -EIO);
    CHECK(flipped(st) >= 2);            /* the read and its retry */
    CHECK_EQ(stat_of(c, "store_checksum_mismatch"), flipped(st));
    tfs_cache_flush(c);
    CHECK_EQ(stat_of(c, "cache_blocks_disk"), 0);
    CHECK_EQ(stat_of(c, "disk_write_bytes"), 0);
    /* the fault is gone: the failed block was not kept in RAM either */
    CHECK_OK(tfs_fault_configure(st, "flip_rate=0"));
    CHECK_OK(read_whole(c, "obj", got, len));
    CHECK(memcmp(got, data, len) == 0);
    CHECK_EQ(stat_of(c, "store_verified_blocks"), 1);
    tfs_cache_close(c);
    tfs_store_close(st);
    /* a fresh cache over the plain store: the disk tier has good bytes */
    c = open_cache(raw);
    memset(got, 0, len);
    CHECK_OK(read_whole(c, "obj", got, len));
    CHECK(memcmp(got, data, len) == 0);
    CHECK_EQ(stat_of(c, "hit_bytes_disk"), len);
    CHECK_EQ(stat_of(c, "store_checksum_mismatch"), 0);
    tfs_cache_close(c);
    free(data);
    free(got);
    remove_dirs();
}

/*
 * Which S3 reads are checked (docs/cache.md): a read of the whole
 * single-part object is, against its ETag; a range of it is not; nor is
 * a multipart object (its ETag is "MD5-of-MD5s-N").
 */
TEST(s3_what_is_verified)
{
    size_t len = 1500000;
    unsigned char *data = test_pattern(len, 2);
    unsigned char *got = malloc(len + 10);
    struct tfs_store_stats ss;
    enum tfs_verify_how how = TFS_VERIFIED_NONE;
    struct tfs_store *st;
    struct tfs_stat sst;
    char uri[300];
    size_t n = 0;

    if (!on_s3()) {
        printf("# skipped: needs TFS_TEST_REMOTE=s3://...\n");
        free(data);
        free(got);
        return;
    }
    setup_dirs();
    snprintf(uri, sizeof(uri), "%s?multipart_threshold=1M&part_size=512K",
             base_uri);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_store_put(raw, "single", data, len, NULL));
    CHECK_OK(tfs_store_put(st, "multi", data, len, NULL));
    CHECK_OK(tfs_store_read_verified(st, "single", got, len + 10, 0, NULL,
                                     false, &n, &how));
    CHECK_EQ(n, len);
    CHECK_EQ(how, TFS_VERIFIED_MD5);
    CHECK_OK(tfs_store_read_verified(st, "single", got, 1000, 0, NULL,
                                     false, &n, &how));
    CHECK_EQ(how, TFS_VERIFIED_NONE);   /* a prefix: nothing to check */
    CHECK_OK(tfs_store_read_verified(st, "multi", got, len, 0, NULL,
                                     false, &n, &how));
    CHECK_EQ(n, len);
    CHECK_EQ(how, TFS_VERIFIED_NONE);
    CHECK(memcmp(got, data, len) == 0);
    /* the whole object at its version, asked without a range: the same
       bytes, checked; a stale version fails as a ranged read does; a
       "whole" hint for a prefix still returns only the prefix */
    CHECK_OK(tfs_store_stat(st, "single", &sst));
    memset(got, 0, len);
    CHECK_OK(tfs_store_read_verified(st, "single", got, len, 0, sst.version,
                                     true, &n, &how));
    CHECK_EQ(n, len);
    CHECK_EQ(how, TFS_VERIFIED_MD5);
    CHECK(memcmp(got, data, len) == 0);
    CHECK_RC(tfs_store_read_verified(st, "single", got, len, 0,
                                     "0123456789abcdef0123456789abcdef",
                                     true, &n, &how), TFS_ECHANGED);
    memset(got, 0, len);
    CHECK_OK(tfs_store_read_verified(st, "single", got, 1000, 0, sst.version,
                                     true, &n, &how));
    CHECK_EQ(n, 1000);
    CHECK_EQ(how, TFS_VERIFIED_NONE);
    CHECK(memcmp(got, data, 1000) == 0 && got[1000] == 0);
    tfs_store_close(st);
    /* through fault(retry(s3)): info comes up the chain; flips are caught */
    snprintf(uri, sizeof(uri), "fault+retry+%s?flip_rate=1", base_uri);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_RC(tfs_store_read_verified(st, "single", got, len, 0, NULL,
                                     false, &n, &how), TFS_ECORRUPT);
    tfs_store_get_stats(st, &ss);
    CHECK_EQ(ss.checksum_mismatches, 1);
    CHECK_EQ(ss.verified_reads, 0);
    /* verify=off: the caller asked for no check */
    tfs_store_close(st);
    snprintf(uri, sizeof(uri), "fault+%s?flip_rate=1&verify=off", base_uri);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_OK(tfs_store_read_verified(st, "single", got, len, 0, NULL,
                                     false, &n, &how));
    CHECK_EQ(how, TFS_VERIFIED_NONE);
    CHECK(memcmp(got, data, len) != 0);
    tfs_store_close(st);
    free(data);
    free(got);
    remove_dirs();
}

/*
 * verify=reread, any store: the one flipped read (flip_max=1) differs
 * from its second read, so the block is read again, and the reader gets
 * the right bytes.  Without verify=reread the same flip is served (posix
 * has no checksum to compare with): that case is the control.
 */
TEST(reread_catches_one_flip)
{
    size_t len = (2u << 20) + 12345;    /* three blocks: no whole read */
    unsigned char *data = test_pattern(len, 3);
    unsigned char *got = malloc(len);
    struct tfs_store *st;
    struct tfs_cache *c;

    setup_dirs();
    CHECK_OK(tfs_store_put(raw, "obj", data, len, NULL));
    st = open_remote("flip_rate=1&flip_max=1&verify=reread");
    c = open_cache(st);
    CHECK_OK(read_whole(c, "obj", got, len));
    CHECK(memcmp(got, data, len) == 0);
    CHECK_EQ(flipped(st), 1);
    CHECK_EQ(stat_of(c, "store_checksum_mismatch"), 1);
    CHECK_EQ(stat_of(c, "store_verified_blocks"), 3);
    tfs_cache_close(c);
    tfs_store_close(st);
    /* the control: no reread, the flip reaches the reader */
    st = open_remote("flip_rate=1&flip_max=1&verify=off");
    CHECK_OK(tfs_store_read_verified(st, "obj", got, len, 0, NULL, false,
                                     &(size_t){0}, NULL));
    CHECK(memcmp(got, data, len) != 0);
    tfs_store_close(st);
    free(data);
    free(got);
    remove_dirs();
}

/* verify=reread with every read flipped: EIO, nothing cached, then fine. */
TEST(reread_flip_always_is_eio)
{
    size_t len = 300000;
    unsigned char *data = test_pattern(len, 4);
    unsigned char *got = malloc(len);
    struct tfs_store *st;
    struct tfs_cache *c;
    uint64_t mismatch;

    setup_dirs();
    CHECK_OK(tfs_store_put(raw, "obj", data, len, NULL));
    st = open_remote("flip_rate=1&verify=reread");
    c = open_cache(st);
    CHECK_RC(read_whole(c, "obj", got, len), -EIO);
    /* each fetch of the block: the read and its reread, both bad; the
     * readahead and the demand read can each fetch it once */
    mismatch = stat_of(c, "store_checksum_mismatch");
    CHECK(mismatch == 2 || mismatch == 4);
    tfs_cache_flush(c);
    CHECK_EQ(stat_of(c, "cache_blocks_disk"), 0);
    CHECK_OK(tfs_fault_configure(st, "flip_rate=0"));
    CHECK_OK(read_whole(c, "obj", got, len));
    CHECK(memcmp(got, data, len) == 0);
    tfs_cache_close(c);
    tfs_store_close(st);
    free(data);
    free(got);
    remove_dirs();
}

TEST(verify_option_values)
{
    struct tfs_store *st = NULL;

    setup_dirs();
    CHECK_RC(tfs_store_open(&st, base_uri, "verify=maybe"), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "verify=maybe") != NULL);
    CHECK_OK(tfs_store_open(&st, base_uri, "verify=auto"));
    tfs_store_close(st);
    remove_dirs();
}

/*
 * Scattered reads (the fetch engine's spans): only a chain whose bottom
 * store takes them may be asked (S3 here; posix says -ENOTSUP); the
 * bytes land in the segments in order, a whole single-part object is
 * checked against its ETag across them, a flip anywhere in them is
 * caught (fault layer over S3), and verify=reread compares across them.
 */
TEST(scattered_reads)
{
    size_t len = 1500000;
    unsigned char *data = test_pattern(len, 5);
    unsigned char *a = calloc(1, 700000), *b = calloc(1, 500000);
    unsigned char *cc = calloc(1, 300000 + 100);
    struct iovec iov[3] = {{a, 700000}, {b, 500000}, {cc, 300000 + 100}};
    enum tfs_verify_how how = TFS_VERIFIED_NONE;
    struct tfs_store *st;
    char uri[300];
    size_t n = 0;

    setup_dirs();
    CHECK_OK(tfs_store_put(raw, "obj", data, len, NULL));
    if (!on_s3()) {
        CHECK(!tfs_store_can_scatter(raw));
        CHECK_RC(tfs_store_readv_verified(raw, "obj", iov, 3, 0, NULL, false,
                                          NULL, &n, &how), -ENOTSUP);
        goto out;
    }
    CHECK(tfs_store_can_scatter(raw));
    CHECK_OK(tfs_store_readv_verified(raw, "obj", iov, 3, 0, NULL, false,
                                      NULL, &n, &how));
    CHECK_EQ(n, len);                   /* short at the end of the object */
    CHECK_EQ(how, TFS_VERIFIED_MD5);
    CHECK(memcmp(a, data, 700000) == 0 && memcmp(b, data + 700000,
                                                 500000) == 0);
    CHECK(memcmp(cc, data + 1200000, 300000) == 0);
    memset(b, 0, 500000);               /* a range: bytes, no check */
    CHECK_OK(tfs_store_readv_verified(raw, "obj", iov + 1, 1, 1000, NULL,
                                      false, NULL, &n, &how));
    CHECK_EQ(n, 500000);
    CHECK_EQ(how, TFS_VERIFIED_NONE);
    CHECK(memcmp(b, data + 1000, 500000) == 0);
    snprintf(uri, sizeof(uri), "fault+retry+%s?flip_rate=1", base_uri);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK(tfs_store_can_scatter(st));
    CHECK_RC(tfs_store_readv_verified(st, "obj", iov, 3, 0, NULL, false,
                                      NULL, &n, &how), TFS_ECORRUPT);
    tfs_store_close(st);
    snprintf(uri, sizeof(uri), "fault+%s?flip_rate=1&flip_max=1&"
             "verify=reread", base_uri);
    CHECK_OK(tfs_store_open(&st, uri, NULL));
    CHECK_RC(tfs_store_readv_verified(st, "obj", iov, 2, 7, NULL, false,
                                      NULL, &n, &how), TFS_ECORRUPT);
    CHECK_OK(tfs_store_readv_verified(st, "obj", iov, 2, 7, NULL, false,
                                      NULL, &n, &how));   /* the one flip is spent */
    CHECK_EQ(how, TFS_VERIFIED_REREAD);
    CHECK(memcmp(a, data + 7, 700000) == 0 && memcmp(b, data + 700007,
                                                     500000) == 0);
    tfs_store_close(st);
out:
    free(a);
    free(b);
    free(cc);
    free(data);
    remove_dirs();
}

TESTS(T(s3_flip_is_eio_and_never_cached), T(s3_what_is_verified),
      T(reread_catches_one_flip), T(reread_flip_always_is_eio),
      T(verify_option_values), T(scattered_reads));
TEST_MAIN()
