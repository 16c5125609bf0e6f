/* SPDX-License-Identifier: MIT */
/*
 * The FUSE mount's inode table (src/fuse/inode.c) without a mount: lookup
 * counts, forget, one inode per version, growth, failing allocations, and
 * the keys and versions an immutable mount's inodes borrow from the
 * cache's snapshot.  The mounted behaviour is tests/integ/fuse_mount.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fuse/fuse_int.h"
#include "tierfs/fs.h"
#include "test.h"
#include "test_remote.h"

static struct tfs_stat st_of(uint64_t size, const char *version)
{
    struct tfs_stat st = {.size = size, .mtime_ns = 1500000000000000000};

    snprintf(st.version, sizeof(st.version), "%s", version);
    return st;
}

TEST(lookup_forget)
{
    struct fs_itable t;
    struct fs_inode *a, *b;
    struct tfs_stat st = st_of(10, "v1");
    uint64_t ino;

    CHECK_OK(fs_itable_init(&t));
    CHECK_EQ(fs_itable_count(&t), 1);   /* the root */
    CHECK(fs_inode_get(&t, FS_ROOT_INO) == t.root);
    CHECK(fs_inode_get(&t, FS_CTL_INO) == t.ctl);
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &st, NULL, &a));
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &st, NULL, &b));
    CHECK(a == b);
    CHECK(a->ino >= FS_FIRST_INO);
    ino = a->ino;
    CHECK_EQ(a->nlookup, 2);
    fs_inode_forget(&t, ino, 1);
    CHECK(fs_inode_get(&t, ino) == a);
    fs_inode_forget(&t, ino, 1);
    CHECK(fs_inode_get(&t, ino) == NULL);
    fs_inode_forget(&t, ino, 1);        /* unknown: ignored */
    fs_inode_forget(&t, FS_ROOT_INO, 5);
    fs_inode_forget(&t, FS_CTL_INO, 5);
    CHECK(fs_inode_get(&t, FS_ROOT_INO) == t.root);
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &st, NULL, &a));
    CHECK(a->ino != ino);               /* node ids are never reused */
    fs_itable_cleanup(&t);
}

TEST(new_version_new_inode)
{
    struct fs_itable t;
    struct fs_inode *old, *cur, *again;
    struct tfs_stat v1 = st_of(10, "v1");
    struct tfs_stat v2 = st_of(10, "v2");
    struct stat a1, a2;

    CHECK_OK(fs_itable_init(&t));
    CHECK_OK(fs_inode_lookup(&t, "x", false, &v1, NULL, &old));
    CHECK_OK(fs_inode_lookup(&t, "x", false, &v2, NULL, &cur));
    CHECK(old != cur);
    CHECK_STR(old->version, "v1");      /* the old one lives on */
    CHECK(fs_inode_get(&t, old->ino) == old);
    CHECK_OK(fs_inode_lookup(&t, "x", false, &v2, NULL, &again));
    CHECK(again == cur);
    fs_attr_fill(&t, old, &a1);
    fs_attr_fill(&t, cur, &a2);
    CHECK(a1.st_ino != a2.st_ino);
    CHECK_EQ(a2.st_size, 10);
    CHECK_EQ(a2.st_mode, S_IFREG | 0444);
    /* The name became a directory. */
    CHECK_OK(fs_inode_lookup(&t, "x/", true, NULL, NULL, &again));
    CHECK(again->is_dir);
    fs_attr_fill(&t, again, &a1);
    CHECK_EQ(a1.st_mode, S_IFDIR | 0555);
    CHECK_EQ(a1.st_nlink, 2);
    fs_inode_forget(&t, old->ino, 1);   /* unkeyed: still freed cleanly */
    CHECK(fs_inode_get(&t, cur->ino) == cur);
    fs_itable_cleanup(&t);
}

TEST(grow)
{
    struct fs_itable t;
    struct fs_inode *in;
    struct tfs_stat st = st_of(1, "v");
    char key[32];
    uint64_t first = 0;

    CHECK_OK(fs_itable_init(&t));
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        CHECK_OK(fs_inode_lookup(&t, key, false, &st, NULL, &in));
        if (i == 0)
            first = in->ino;
    }
    CHECK_EQ(fs_itable_count(&t), 5001);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        CHECK_OK(fs_inode_lookup(&t, key, false, &st, NULL, &in));
        CHECK_EQ(in->ino, first + (uint64_t)i);
        CHECK_EQ(in->nlookup, 2);
        fs_inode_forget(&t, in->ino, 2);
    }
    CHECK_EQ(fs_itable_count(&t), 1);
    fs_itable_cleanup(&t);
}

TEST(key_ino)
{
    CHECK_EQ(fs_key_ino("", NULL), FS_ROOT_INO);
    CHECK(fs_key_ino("a", "v1") == fs_key_ino("a", "v1"));
    CHECK(fs_key_ino("a", "v1") != fs_key_ino("a", "v2"));
    CHECK(fs_key_ino("a/", NULL) != fs_key_ino("a", NULL));
    CHECK(fs_key_ino("a", NULL) >= FS_FIRST_INO);
}

/*
 * An immutable cache's inodes borrow the key and the version from its
 * listing snapshot; the object replaced in the store changes neither.
 * A version that is not the snapshot's (and a directory) is copied.
 */
TEST(borrowed_version)
{
    struct fs_itable t;
    struct fs_inode *a, *b, *d;
    struct tfs_stat sb, sb2, got;
    struct tfs_stat other = st_of(6, "v-other");
    struct tfs_cache *c = NULL;
    struct tfs_store *st = NULL;
    const char *sv = NULL;
    const char *sk;
    struct stat attr;
    bool is_dir;

    remote_setup("inode");
    CHECK_OK(tfs_store_put(raw, "d/f", "one", 3, NULL));
    CHECK_OK(tfs_store_put(raw, "d/h", "aitch", 5, NULL));
    CHECK_OK(tfs_store_open(&st, base_uri, NULL));
    CHECK_OK(tfs_cache_create(&c));
    CHECK_OK(tfs_cache_set(c, "immutable", "1"));
    CHECK_OK(tfs_cache_set(c, "cache_dir", cdir));
    CHECK_OK(tfs_cache_open(c, st));
    CHECK_OK(tfs_cache_lookup(c, "d/f", &is_dir, &sb));
    CHECK(!is_dir);
    sk = tfs_cache_key_stable(c, "d/f", &sv);
    CHECK(sk != NULL && sv != NULL);
    CHECK_STR(sv, sb.version);
    CHECK(tfs_cache_key_stable(c, "d/", &sv) == NULL);  /* not a file */
    CHECK(tfs_cache_key_stable(c, "d/g", NULL) == NULL);
    /* Right after the lookup of another key (the cache remembers the
       last one found): that key's copies, not the last one's. */
    CHECK_OK(tfs_cache_lookup(c, "d/f", &is_dir, &got));
    CHECK_STR(tfs_cache_key_stable(c, "d/h", NULL), "d/h");
    CHECK(tfs_cache_key_stable(c, "d/f", NULL) == sk);

    CHECK_OK(fs_itable_init(&t));
    t.keys = c;
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &sb, NULL, &a));
    CHECK(a->key_borrowed && a->by_key.key == sk);
    CHECK(a->version == sv);            /* no copy */
    CHECK_EQ(fs_inode_stat(a, &got)->size, 3);
    CHECK_STR(got.version, sb.version);
    CHECK_EQ(got.mtime_ns, sb.mtime_ns);
    fs_attr_fill(&t, a, &attr);
    CHECK_EQ(attr.st_size, 3);
    CHECK(attr.st_ino == fs_key_ino("d/f", sb.version));

    /* Replaced in the store: the snapshot, and the inode, keep "one". */
    CHECK_OK(tfs_store_put(raw, "d/f", "other!", 6, NULL));
    CHECK_OK(tfs_store_stat(raw, "d/f", &got));
    CHECK(strcmp(got.version, sb.version) != 0);    /* the store's is new */
    CHECK_OK(tfs_cache_lookup(c, "d/f", &is_dir, &sb2));
    CHECK_STR(sb2.version, sb.version);
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &sb2, NULL, &b));
    CHECK(b == a);
    CHECK_STR(a->version, sb.version);

    /* Another version than the snapshot's: a new inode with its copy. */
    CHECK_OK(fs_inode_lookup(&t, "d/f", false, &other, NULL, &b));
    CHECK(b != a);
    CHECK(b->version == b->vbuf);
    CHECK_STR(b->version, "v-other");
    CHECK_EQ(fs_inode_stat(b, &got)->size, 6);
    CHECK_STR(got.version, "v-other");
    CHECK_STR(a->version, sb.version);  /* the old one unchanged */
    CHECK_OK(fs_inode_lookup(&t, "d/", true, NULL, NULL, &d));
    CHECK(!d->key_borrowed);
    CHECK_STR(d->version, "");

    fs_itable_cleanup(&t);              /* before the cache it borrows */
    tfs_cache_close(c);
    tfs_store_close(st);
    remote_remove();
}

static unsigned alloc_budget;

static void *fail_malloc(size_t n)
{
    return alloc_budget-- == 0 ? NULL : malloc(n);
}

static void *fail_calloc(size_t c, size_t n)
{
    return alloc_budget-- == 0 ? NULL : calloc(c, n);
}

static void *fail_realloc(void *p, size_t n)
{
    return alloc_budget-- == 0 ? NULL : realloc(p, n);
}

/* Every allocation failing in turn: -ENOMEM, nothing leaked (ASan). */
TEST(alloc_failures)
{
    struct tfs_stat st = st_of(1, "v");

    for (unsigned n = 0; n < 12; n++) {
        struct fs_itable t;
        struct fs_inode *in;
        int rc;

        alloc_budget = n;
        CHECK_OK(tfs_replace_allocator(fail_malloc, fail_realloc,
                                       fail_calloc, free));
        rc = fs_itable_init(&t);
        if (rc == 0) {
            rc = fs_inode_lookup(&t, "a", false, &st, NULL, &in);
            CHECK(rc == 0 || rc == -ENOMEM);
            fs_itable_cleanup(&t);
        } else {
            CHECK_EQ(rc, -ENOMEM);
        }
        CHECK_OK(tfs_replace_allocator(malloc, realloc, calloc, free));
    }
}

/* tfs_fs_set: the mount's option table, and every other name to the
 * cache's. */
TEST(fs_options)
{
    struct tfs_fs *fs = NULL;

    CHECK_OK(tfs_fs_create(&fs));
    CHECK_OK(tfs_fs_set(fs, "upload_jobs", "8"));
    CHECK_EQ(fs->wcfg.upload_jobs, 8);
    CHECK_RC(tfs_fs_set(fs, "upload_jobs", "0"), TFS_EOPTION);
    CHECK_STR(tfs_errdetail(), "mount option upload_jobs=0: expected a "
              "whole number in 1..256");
    CHECK_EQ(fs->wcfg.upload_jobs, 8);          /* unchanged */
    CHECK_OK(tfs_fs_set(fs, "upload_delay", "0.25"));
    CHECK_EQ(fs->wcfg.upload_delay_ms, 250);
    CHECK_RC(tfs_fs_set(fs, "staging_wait", "-1"), TFS_EOPTION);
    CHECK_OK(tfs_fs_set(fs, "kernel_readahead", "1G"));
    CHECK_EQ(fs->kernel_ra, 1u << 30);
    CHECK_RC(tfs_fs_set(fs, "kernel_readahead", "2G"), TFS_EOPTION);
    CHECK_OK(tfs_fs_set(fs, "staging_dir", "/tmp/x"));
    CHECK_STR(fs->wcfg.staging_dir, "/tmp/x");
    CHECK_OK(tfs_fs_set(fs, "staging_dir", ""));
    CHECK(fs->wcfg.staging_dir == NULL);
    CHECK_OK(tfs_fs_set(fs, "fuse_opts", "allow_other"));
    CHECK_OK(tfs_fs_set(fs, "fuse_opts", "default_permissions"));
    CHECK_STR(tfs_buf_str(&fs->fuse_opts), "allow_other,default_permissions");
    CHECK_RC(tfs_fs_set(fs, "read_only", "maybe"), TFS_EOPTION);
    /* not the mount's: the cache's table answers */
    CHECK_OK(tfs_fs_set(fs, "block_size", "1M"));
    CHECK_RC(tfs_fs_set(fs, "block_size", "1K"), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "cache option block_size=1K") != NULL);
    CHECK_RC(tfs_fs_set(fs, "no_such", "1"), TFS_EOPTION);
    CHECK(strstr(tfs_errdetail(), "'no_such'") != NULL);
    tfs_fs_close(fs);
}

TESTS(T(lookup_forget), T(new_version_new_inode), T(grow), T(key_ino),
      T(borrowed_version), T(alloc_failures), T(fs_options));
TEST_MAIN()
