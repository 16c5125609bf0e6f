/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the store implementations (not installed).
 */
#ifndef TFS_STORE_INT_H
#define TFS_STORE_INT_H

#include <stdatomic.h>

#include "tierfs/store.h"
#include "common/util.h"

struct tfs_store {
    const struct tfs_store_ops *ops;    /* first member, never NULL */
    void                *priv;          /* ops->priv_size bytes, owned */
    struct tfs_store    *next;          /* wrapped store, owned, or NULL */
    struct tfs_opts     *opts;          /* during open only, borrowed */
    char                *ident;         /* "scheme://location", owned */
    /* operation counts, updated by the dispatch functions */
    atomic_uint_fast64_t n_stat;
    atomic_uint_fast64_t n_read;
    atomic_uint_fast64_t n_list;
    atomic_uint_fast64_t n_put;
    atomic_uint_fast64_t n_remove;
    atomic_uint_fast64_t n_copy;
    atomic_uint_fast64_t n_rename;
    atomic_uint_fast64_t n_error;
    atomic_uint_fast64_t read_bytes;
    atomic_uint_fast64_t put_bytes;
    atomic_uint_fast64_t n_mismatch;    /* end-to-end checks that failed */
    atomic_uint_fast64_t n_verified;    /* end-to-end checks that passed */
    atomic_uint_fast64_t n_skipped;     /* listed keys left out */
    int                  verify;        /* STORE_VERIFY_*, outermost only */
};

/* The verify= option of a chain (docs/store.md). */
#define STORE_VERIFY_AUTO   0           /* check what the store offers */
#define STORE_VERIFY_REREAD 1           /* and re-read what it does not */
#define STORE_VERIFY_OFF    2

extern const struct tfs_store_ops tfs_posix_ops;
extern const struct tfs_store_ops tfs_s3_ops;
extern const struct tfs_store_ops tfs_fault_ops;
extern const struct tfs_store_ops tfs_retry_ops;

/*
 * Check a key against the rules every store shares: not empty, no leading
 * '/', no NUL, at most 1024 bytes (S3's limit).  TFS_EBADKEY with the
 * detail naming the key otherwise.
 */
int tfs_key_check(const char *key);

/* pread() the whole range [off, off+len) of a source into buf. */
int tfs_source_read(const struct tfs_source *src, void *buf, size_t len,
                    uint64_t off);

/* Count n keys a listing left out (tfs_store_stats.list_skipped). */
void tfs_store_count_skipped(struct tfs_store *st, uint64_t n);

/*
 * Fill st->version for a file ("size-mtime-inode-ctime", hex).  ctime
 * catches an in-place rewrite that keeps size and mtime (cp -p, touch -r,
 * rsync -t --inplace): the kernel sets ctime on every write and utimes.
 */
void tfs_version_from_file(struct tfs_stat *st, uint64_t size,
                           int64_t mtime_ns, uint64_t ino, int64_t ctime_ns);

#endif /* TFS_STORE_INT_H */
