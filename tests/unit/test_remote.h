/* SPDX-License-Identifier: MIT */
/*
 * The remote of the cache-level tests (test_cache.c, test_verify.c): a
 * fresh temporary directory, or, with TFS_TEST_REMOTE=s3://bucket/prefix,
 * a fresh prefix under it; a cache directory beside it.  Included once by
 * each test program, after test.h.
 */
#ifndef TFS_TEST_REMOTE_H
#define TFS_TEST_REMOTE_H

#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "common/util.h"
#include "tierfs/store.h"

static char remote[64];                 /* local remote dir, or "" */
static char base_uri[256];              /* the remote's URI */
static char cdir[64];
static struct tfs_store *raw;           /* the remote, unwrapped */

static inline bool on_s3(void)
{
    const char *s3 = getenv("TFS_TEST_REMOTE");

    return s3 != NULL && s3[0] != '\0';
}

/* A fresh remote and cache dir, named for tag; raw open on the remote. */
static inline void remote_setup(const char *tag)
{
    static int n;
    char what[32];

    snprintf(what, sizeof(what), "%s-cache", tag);
    test_tmpdir(cdir, sizeof(cdir), what);
    remote[0] = '\0';
    if (on_s3()) {
        snprintf(base_uri, sizeof(base_uri), "%s/%s%d-%d-%d",
                 getenv("TFS_TEST_REMOTE"), tag, (int)getpid(),
                 (int)(tfs_rand_u64() % 100000), n++);
    } else {
        snprintf(what, sizeof(what), "%s-remote", tag);
        test_tmpdir(remote, sizeof(remote), what);
        snprintf(base_uri, sizeof(base_uri), "file://%s", remote);
    }
    CHECK_OK(tfs_store_open(&raw, base_uri, NULL));
}

static inline int remote_remove_page(void *arg,
                                     const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++)
        tfs_store_remove(arg, pg->entries[i].key);
    return 0;
}

/* Empty the remote, close raw, remove both directories. */
static inline void remote_remove(void)
{
    CHECK_OK(tfs_store_list_all(raw, "", NULL, remote_remove_page, raw));
    tfs_store_close(raw);
    raw = NULL;
    if (remote[0] != '\0')
        CHECK_OK(test_rmtree(remote));
    CHECK_OK(test_rmtree(cdir));
}

#endif /* TFS_TEST_REMOTE_H */
