/* SPDX-License-Identifier: MIT */
/*
 * The listing manifest (not installed): a store's listing written once
 * by `tierfs manifest URI > FILE` and mounted with `tierfs mount URI MNT
 * --manifest FILE`, so a mount of a dataset of 100M objects never lists
 * the store (docs/fuse.md "Manifests").  JSON lines, one value a line:
 *
 *   {"tierfs_manifest": 1, "uri": "s3://b/ds", "identity": "s3://..."}
 *   {"key": "train/a.jpg", "size": 123, "mtime_ns": 17..., "version": ".."}
 *   ...
 *   {"end": true, "objects": 2}
 *
 * The header comes first (identity: tfs_store_identity of the store the
 * listing was taken of; a mount of another store refuses it), the end
 * line last (a manifest cut short is refused).  Keys are relative to the
 * URI: not empty, at most 1024 bytes, no leading '/', no empty, "." or
 * ".." component.  Members not named here are ignored (later versions
 * may add some).  Parsed with the one JSON reader (common/json.c).
 *
 * Threads: every function is reentrant; none keeps state.
 */
#ifndef TFS_CACHE_MANIFEST_H
#define TFS_CACHE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "tierfs/store.h"

#define TFS_MANIFEST_VERSION 1
#define TFS_MANIFEST_KEY_MAX 1024       /* bytes, as the stores check */
#define TFS_MANIFEST_IDENT_MAX 1100     /* bytes of the identity, NUL */
#define TFS_MANIFEST_LINE_MAX 16384     /* bytes of one line */

enum tfs_manifest_kind {
    TFS_MANIFEST_HEADER,
    TFS_MANIFEST_ENTRY,
    TFS_MANIFEST_END,
};

/* One parsed line. */
struct tfs_manifest_line {
    int             kind;               /* tfs_manifest_kind */
    char            key[TFS_MANIFEST_KEY_MAX + 1];    /* entry */
    struct tfs_stat st;                 /* entry */
    char            identity[TFS_MANIFEST_IDENT_MAX]; /* header */
    uint64_t        objects;            /* end: entries before it */
};

/*
 * Parse one line (len bytes, no newline) into *out.  TFS_EFORMAT with a
 * detail that says what is wrong ("size is negative", "key '../x' is
 * outside the URI"), -ENOMEM.  *out is undefined on failure.
 */
int tfs_manifest_parse_line(const char *line, size_t len,
                            struct tfs_manifest_line *out);

/* Why key cannot be a manifest key (TFS_EFORMAT with a detail), or 0. */
int tfs_manifest_check_key(const char *key);

/*
 * Called for each entry in file order; line_no counts from 1.  A
 * failure (a negative code, its detail set) stops the read and is
 * returned with "FILE line N: " put before the detail; a positive
 * return stops it with success (the rest of the file is not checked).
 */
typedef int tfs_manifest_fn(void *arg, const char *key,
                            const struct tfs_stat *st, uint64_t line_no);

/*
 * Read the manifest at path: the header (its identity must equal
 * identity unless that is NULL), every entry to fn, the end line (its
 * count must match).  Errors: -errno opening or reading it, TFS_EFORMAT
 * (a bad line, the header missing, another store's manifest, cut
 * short), TFS_ETOOBIG (a line over TFS_MANIFEST_LINE_MAX), fn's; the
 * detail names the file and the line.
 */
int tfs_manifest_read(const char *path, const char *identity,
                      tfs_manifest_fn *fn, void *arg);

/* Append the header, one entry, or the end line, each with its '\n'.
   Errors as tfs_buf_append (they stick in b). */
int tfs_manifest_put_header(struct tfs_buf *b, const char *uri,
                            const char *identity);
int tfs_manifest_put_entry(struct tfs_buf *b, const char *key,
                           const struct tfs_stat *st);
int tfs_manifest_put_end(struct tfs_buf *b, uint64_t objects);

#endif /* TFS_CACHE_MANIFEST_H */
