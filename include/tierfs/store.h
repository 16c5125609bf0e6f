/* SPDX-License-Identifier: MIT */
/*
 * The store layer: one interface over every place objects can live.
 *
 * A store is opened from a URI:
 *
 *     s3://bucket/prefix          an S3-compatible object store
 *     file:///abs/path            a directory (local disk, Lustre, NFS, ...)
 *     /abs/path, rel/path         the same as file://
 *     fault+URI, retry+URI        stackable wrappers, themselves stores
 *
 * followed by an optional "?key=value&key=value" query holding options for
 * any layer of the chain (docs/store.md lists them).  An option no layer
 * understands is an error, never ignored.
 *
 * Keys are relative to the store's root ("train/000123.jpg"), never begin
 * with '/', and use '/' as separator.  Every store implements the same
 * contract, checked by one conformance suite (tests/store/test_store_conf.c):
 *
 *  - read() fills the caller's buffer; *nread < len only at the end of the
 *    object.  A range starting at or past the end reads 0 bytes.
 *  - put() is atomic: readers see the old object or the new one, never a
 *    mix or a prefix.
 *  - remove() of a missing key succeeds (S3 semantics).
 *  - list() returns keys in byte order, one page at a time.
 *
 * Thread safety: a store handle may be used by many threads at once; its
 * operations are thread-safe.  Open and close are not.
 */
#ifndef TIERFS_STORE_H
#define TIERFS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "tierfs/api.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tfs_store;

#define TFS_VERSION_MAX 80 /* bytes, with the NUL */

struct tfs_stat {
    uint64_t size;                      /* bytes */
    int64_t  mtime_ns;                  /* since the epoch, UTC */
    char     version[TFS_VERSION_MAX];  /* ETag, or size-mtime-inode-ctime */
};

struct tfs_list_entry {
    char           *key;                /* owned by the page */
    struct tfs_stat st;
};

struct tfs_list_page {
    struct tfs_list_entry *entries;     /* in byte order of key */
    size_t                 n_entries;
    char                 **prefixes;    /* common prefixes, each ends in
                                           the delimiter */
    size_t                 n_prefixes;
    char                  *next_token;  /* NULL on the last page */
};

/* Frees what a list call put in page and zeroes it.  NULL is a no-op. */
TFS_API void tfs_list_page_cleanup(struct tfs_list_page *page);

/* What a put reads from: a buffer, or a file descriptor at an offset. */
struct tfs_source {
    const void *buf;                    /* when not NULL: read from here */
    int         fd;                     /* else pread() from fd */
    uint64_t    off;                    /* first byte in fd */
    uint64_t    len;                    /* bytes */
};

/* Capabilities (tfs_store_ops.caps). */
#define TFS_SCAP_RANGE   0x01u          /* ranged reads are cheap */
#define TFS_SCAP_RENAME  0x02u          /* native atomic rename */
#define TFS_SCAP_COPY    0x04u          /* server-side copy */
#define TFS_SCAP_WRAPPER 0x08u          /* wraps another store */
#define TFS_SCAP_DIRS    0x10u          /* directories exist on their own */
#define TFS_SCAP_SCATTER 0x20u          /* reads land in info->iov */

/*
 * What a store knows about the bytes one read returned, for end-to-end
 * checks (tfs_store_read_verified).  The caller zeroes it; the bottom
 * store fills what it learnt from the answer; wrappers pass it up
 * unchanged, even when they change the bytes (the fault layer's flips
 * are meant to be caught).  Checksums describe the whole object, so they
 * check a read only when that read returned the whole object.
 *
 * One bit goes the other way: TFS_RINFO_WHOLE, set by the caller of
 * tfs_store_read_ex (kept while the rest is zeroed), says the read's
 * range is the whole object as listed at if_version.  A store may then
 * ask for the object without a range (S3: RGW answers a plain GET of a
 * small object measurably cheaper than a ranged one, docs/performance-
 * cold.md).  It is a hint: a store that ignores it, or an object that
 * turns out longer, still returns the range asked for.
 *
 * Also in, and kept: iov (iovcnt segments, their lengths summing to the
 * read's len), where the bytes land in order instead of buf (which is
 * then NULL): one request for the blocks of a span (cache/fetch.c).
 * Only a chain whose bottom store has TFS_SCAP_SCATTER may be asked
 * (tfs_store_can_scatter); wrappers that touch the bytes (the fault
 * layer's flips) walk the segments.
 *
 * Also in, and kept: land (may be NULL), a landing report.  A store that
 * writes the bytes itself calls land->fn(land->arg, at, len) right after
 * it wrote bytes [at, at+len) of the read (counted across iov), in the
 * order it wrote them; a wrapper that changes bytes after they landed
 * (the fault layer's flips) reports them again.  The caller can work on
 * each piece while it is still in the CPU's cache (the cache's chunk
 * sums).  A store that does not report is fine: the caller treats what
 * was not reported as not yet seen, and a report behind an earlier one
 * (a retry from the start) as a rewrite.
 */
#define TFS_RINFO_SIZE   0x01u          /* obj_size is known */
#define TFS_RINFO_MD5    0x02u          /* md5 is the whole object's MD5 */
#define TFS_RINFO_WHOLE  0x04u          /* in: the range is the object */

struct tfs_landing {
    void  (*fn)(void *arg, size_t at, size_t len);
    void   *arg;
};

struct tfs_read_info {
    unsigned have;                      /* TFS_RINFO_* */
    uint64_t obj_size;                  /* bytes of the whole object */
    uint8_t  md5[16];                   /* S3: single-part ETag */
    const struct iovec *iov;            /* in: where the bytes land */
    int      iovcnt;
    const struct tfs_landing *land;     /* in: told as they land */
};

/*
 * 1: the first table.  2: adds read_ex.  3: adds part_size and the mpu_*
 * ops.  A table of an older version simply has no members past its own;
 * the core checks version first.
 */
#define TFS_STORE_OPS_VERSION 3

/* Bytes of a multipart upload's id (tfs_store_mpu_create), with the NUL. */
#define TFS_UPLOAD_ID_MAX 512

/*
 * The operations table a store implements.  Only src/store/store.c calls
 * through it; everyone else calls the tfs_store_* functions below, which
 * check arguments, clear the error detail and count statistics.  A NULL
 * optional op makes the call return -ENOTSUP.
 *
 * For a wrapper (TFS_SCAP_WRAPPER), the wrapped store is opened first and
 * reached with tfs_store_next().
 */
struct tfs_store_ops {
    int         version;                /* TFS_STORE_OPS_VERSION */
    const char *scheme;                 /* "file", "s3", "fault", ... */
    size_t      priv_size;              /* zeroed, owned by the core */
    unsigned    caps;                   /* TFS_SCAP_* */

    /*
     * location: the URI without scheme and query ("bucket/prefix" for s3,
     * the path for file; empty for wrappers).  Options are taken with
     * tfs_store_opt_*(); on failure close is not called, so open frees
     * what it allocated.
     */
    int  (*open)(struct tfs_store *st, const char *location);
    void (*close)(struct tfs_store *st);

    int  (*stat)(struct tfs_store *st, const char *key, struct tfs_stat *out);
    /*
     * Read up to len bytes at off.  if_version, when not NULL, is the
     * version the caller expects: a different object fails TFS_ECHANGED
     * instead of returning bytes of another version.
     */
    int  (*read)(struct tfs_store *st, const char *key, void *buf,
                 size_t len, uint64_t off, const char *if_version,
                 size_t *nread);
    /*
     * One page of keys under prefix, after token (NULL: from the start).
     * delim (NULL or "") rolls keys up into common prefixes.  At most
     * max_keys entries plus prefixes.  On success page is filled (the
     * caller frees it with tfs_list_page_cleanup); on failure it is left
     * zeroed.
     */
    int  (*list)(struct tfs_store *st, const char *prefix, const char *delim,
                 const char *token, size_t max_keys,
                 struct tfs_list_page *page);
    /* out (may be NULL) receives the new object's stat. */
    int  (*put)(struct tfs_store *st, const char *key,
                const struct tfs_source *src, struct tfs_stat *out);
    int  (*remove)(struct tfs_store *st, const char *key);
    int  (*copy)(struct tfs_store *st, const char *src, const char *dst);
    int  (*rename)(struct tfs_store *st, const char *src, const char *dst);
    /*
     * Optional: a string naming where the objects live, the same for
     * every handle on the same data ("file:///abs/root",
     * "s3://endpoint/bucket/prefix").  Caches key their blocks with it.
     * NULL: scheme "://" location as opened.  Valid until close.
     */
    const char *(*identity)(struct tfs_store *st);

    /* ---- version 2 ---- */
    /*
     * Optional: read() that also fills info (zeroed by the caller, never
     * NULL).  When present it is called instead of read().  Wrappers
     * forward info with tfs_store_read_ex().
     */
    int  (*read_ex)(struct tfs_store *st, const char *key, void *buf,
                    size_t len, uint64_t off, const char *if_version,
                    size_t *nread, struct tfs_read_info *info);

    /* ---- version 3 ---- */
    /*
     * Optional, all five or none: a multipart upload that the caller
     * drives part by part (the mount's eager upload of a file being
     * written, docs/writeback.md).  part_size: the part size the store
     * wants when the object's length is not known yet (0: none).
     * mpu_create starts an upload of key and fills upload_id
     * (TFS_UPLOAD_ID_MAX bytes).  mpu_part sends part number part_no
     * (1-based) from src and fills etag (TFS_VERSION_MAX bytes); sending a
     * number again replaces that part.  mpu_complete makes the object of
     * parts 1..n_parts (etags in order) visible at key, out (may be NULL)
     * receiving its stat; nothing is visible at key before it returns.
     * mpu_abort drops the upload and its parts; 0 when it is gone already
     * (completed or aborted).  Wrappers pass all five through.
     */
    uint64_t (*part_size)(struct tfs_store *st);
    int  (*mpu_create)(struct tfs_store *st, const char *key,
                       char *upload_id);
    int  (*mpu_part)(struct tfs_store *st, const char *key,
                     const char *upload_id, unsigned part_no,
                     const struct tfs_source *src, char *etag);
    int  (*mpu_complete)(struct tfs_store *st, const char *key,
                         const char *upload_id,
                         const char (*etags)[TFS_VERSION_MAX],
                         unsigned n_parts, struct tfs_stat *out);
    int  (*mpu_abort)(struct tfs_store *st, const char *key,
                      const char *upload_id);
};

/*
 * Open the store named by uri.  options (may be NULL) is an extra
 * "key=value&..." string merged over the URI's own query.  On success
 * *out owns the store until tfs_store_close().  Errors: TFS_EURI (bad
 * URI or unknown scheme), TFS_EOPTION (bad or unknown option), -ENOENT /
 * -ENOTDIR (posix root missing), TFS_ENOCRED, -ENOMEM, ...; the detail
 * names the part that was wrong.
 */
TFS_API int tfs_store_open(struct tfs_store **out, const char *uri,
                           const char *options);
/* NULL is a no-op.  Waits for nothing: callers stop using st first. */
TFS_API void tfs_store_close(struct tfs_store *st);

TFS_API int tfs_store_stat(struct tfs_store *st, const char *key,
                           struct tfs_stat *out);
TFS_API int tfs_store_read(struct tfs_store *st, const char *key, void *buf,
                           size_t len, uint64_t off, const char *if_version,
                           size_t *nread);
/* tfs_store_read that also says what the store knows (info zeroed but
   for the caller's TFS_RINFO_WHOLE). */
TFS_API int tfs_store_read_ex(struct tfs_store *st, const char *key,
                              void *buf, size_t len, uint64_t off,
                              const char *if_version, size_t *nread,
                              struct tfs_read_info *info);

/* How tfs_store_read_verified checked a read (*how). */
enum tfs_verify_how {
    TFS_VERIFIED_NONE = 0,              /* nothing to check it against */
    TFS_VERIFIED_MD5,                   /* the whole object, against MD5 */
    TFS_VERIFIED_REREAD,                /* a second read was the same */
};

/*
 * tfs_store_read, then an end-to-end check where one is possible: when
 * the read returned the whole object and the store gave its MD5 (S3's
 * single-part ETag), the bytes are hashed and compared; otherwise, when
 * the chain was opened with verify=reread, the range is read a second
 * time and compared.  verify=off turns both off.  A mismatch returns
 * TFS_ECORRUPT (the detail names the key and the check) and is counted
 * in the outermost layer's checksum_mismatches; nothing is retried here.
 * whole: the caller knows [off, off+len) is the whole object at
 * if_version (TFS_RINFO_WHOLE).  how (may be NULL) receives the check
 * that passed.
 */
TFS_API int tfs_store_read_verified(struct tfs_store *st, const char *key,
                                    void *buf, size_t len, uint64_t off,
                                    const char *if_version, bool whole,
                                    size_t *nread,
                                    enum tfs_verify_how *how);
/* The same into iov[0..iovcnt) (TFS_SCAP_SCATTER chains only, or one
 * segment on any chain), for len = the segments' lengths summed; land
 * (may be NULL) is told as the bytes land (tfs_read_info.land). */
TFS_API int tfs_store_readv_verified(struct tfs_store *st, const char *key,
                                     const struct iovec *iov, int iovcnt,
                                     uint64_t off, const char *if_version,
                                     bool whole,
                                     const struct tfs_landing *land,
                                     size_t *nread,
                                     enum tfs_verify_how *how);
/* Whether the bottom store of st's chain takes scattered reads. */
TFS_API bool tfs_store_can_scatter(struct tfs_store *st);

TFS_API int tfs_store_list(struct tfs_store *st, const char *prefix,
                           const char *delim, const char *token,
                           size_t max_keys, struct tfs_list_page *page);
TFS_API int tfs_store_put(struct tfs_store *st, const char *key,
                          const void *buf, size_t len, struct tfs_stat *out);
/* Streams the file at path (multipart above the store's threshold). */
TFS_API int tfs_store_put_file(struct tfs_store *st, const char *key,
                               const char *path, struct tfs_stat *out);
TFS_API int tfs_store_put_source(struct tfs_store *st, const char *key,
                                 const struct tfs_source *src,
                                 struct tfs_stat *out);
TFS_API int tfs_store_remove(struct tfs_store *st, const char *key);
/* -ENOTSUP where the store has no native copy/rename. */
TFS_API int tfs_store_copy(struct tfs_store *st, const char *src,
                           const char *dst);
TFS_API int tfs_store_rename(struct tfs_store *st, const char *src,
                             const char *dst);
/* Rename where native, else copy then remove (not atomic). */
TFS_API int tfs_store_move(struct tfs_store *st, const char *src,
                           const char *dst);

/*
 * Multipart uploads part by part (the ops above): -ENOTSUP where the
 * store has none (posix), and tfs_store_part_size returns 0 there.  A
 * part adds its bytes to put_bytes; a completion counts as a put.
 * upload_id: TFS_UPLOAD_ID_MAX bytes; etag: TFS_VERSION_MAX bytes.
 */
TFS_API uint64_t tfs_store_part_size(struct tfs_store *st);
TFS_API int tfs_store_mpu_create(struct tfs_store *st, const char *key,
                                 char *upload_id);
TFS_API int tfs_store_mpu_part(struct tfs_store *st, const char *key,
                               const char *upload_id, unsigned part_no,
                               const struct tfs_source *src, char *etag);
TFS_API int tfs_store_mpu_complete(struct tfs_store *st, const char *key,
                                   const char *upload_id,
                                   const char (*etags)[TFS_VERSION_MAX],
                                   unsigned n_parts, struct tfs_stat *out);
TFS_API int tfs_store_mpu_abort(struct tfs_store *st, const char *key,
                                const char *upload_id);

/*
 * Walk every page of a listing, calling fn once per page.  fn returns 0
 * to go on, or a non-zero value that stops the walk and is returned.
 */
typedef int tfs_list_fn(void *arg, const struct tfs_list_page *page);
TFS_API int tfs_store_list_all(struct tfs_store *st, const char *prefix,
                               const char *delim, tfs_list_fn *fn, void *arg);

/* Operation counts of one store (each layer of a chain has its own). */
struct tfs_store_stats {
    uint64_t stats;
    uint64_t reads;
    uint64_t lists;
    uint64_t puts;
    uint64_t removes;
    uint64_t copies;
    uint64_t renames;
    uint64_t errors;
    uint64_t read_bytes;
    uint64_t put_bytes;
    /* over the whole chain below this layer too: */
    uint64_t checksum_mismatches;       /* tfs_store_read_verified */
    uint64_t verified_reads;            /* reads a check passed */
    uint64_t list_skipped;              /* keys a listing could not hold
                                           (S3 keys with NUL), left out */
};
TFS_API void tfs_store_get_stats(struct tfs_store *st,
                                 struct tfs_store_stats *out);

/* The scheme of the outermost layer and its caps. */
TFS_API const char *tfs_store_scheme(const struct tfs_store *st);
TFS_API unsigned tfs_store_caps(const struct tfs_store *st);
/*
 * Where the bottom store's objects live, for keying caches: equal for
 * every handle on the same data.  Valid until tfs_store_close.
 */
TFS_API const char *tfs_store_identity(struct tfs_store *st);
/* The next layer of a wrapper, or NULL. */
TFS_API struct tfs_store *tfs_store_next(struct tfs_store *st);
/* The first layer whose scheme is scheme, or NULL. */
TFS_API struct tfs_store *tfs_store_find(struct tfs_store *st,
                                         const char *scheme);

/* For implementations: per-instance state (ops->priv_size bytes). */
TFS_API void *tfs_store_priv(struct tfs_store *st);

/*
 * For implementations, during open: take an option.  Each returns 0 and
 * leaves *out unchanged when the option is absent, TFS_EOPTION (with the
 * detail naming it) when its value does not parse.  Sizes accept K/M/G/T
 * (binary) and KB/MB/GB/TB (decimal) suffixes; durations are numbers of
 * milliseconds.
 */
TFS_API int tfs_store_opt_str(struct tfs_store *st, const char *name,
                              const char **out);
TFS_API int tfs_store_opt_u64(struct tfs_store *st, const char *name,
                              uint64_t *out);
TFS_API int tfs_store_opt_size(struct tfs_store *st, const char *name,
                               uint64_t *out);
TFS_API int tfs_store_opt_double(struct tfs_store *st, const char *name,
                                 double *out);
TFS_API int tfs_store_opt_bool(struct tfs_store *st, const char *name,
                               bool *out);

#ifdef __cplusplus
}
#endif
#endif /* TIERFS_STORE_H */
