/* SPDX-License-Identifier: MIT */
/*
 * The one JSON parser and writer of tierfs (not installed): checkpoint
 * markers, indexes and safetensors headers, the dataset manifest, and the
 * CLI's readers of the control file (tierfs stats, umount, bench).
 *
 * A parse is capped (bytes of text, nesting depth, number of values) and
 * builds a tree of struct tfs_json in an arena owned by the document,
 * freed at once by tfs_json_cleanup.  Strings are unescaped, valid UTF-8
 * and free of NUL; numbers are kept as written (tfs_json_u64/i64 convert
 * whole ones), so a document written back never changes a number.
 * Duplicate member names are refused.
 *
 * Threads: a document is read-only after the parse; any number of threads
 * may read one, and separate documents are independent.
 */
#ifndef TFS_COMMON_JSON_H
#define TFS_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

enum tfs_json_type {
    TFS_JSON_NULL,
    TFS_JSON_FALSE,
    TFS_JSON_TRUE,
    TFS_JSON_NUMBER,
    TFS_JSON_STRING,
    TFS_JSON_ARRAY,
    TFS_JSON_OBJECT,
};

/* One value of a parsed document; every pointer points into its arena. */
struct tfs_json {
    enum tfs_json_type type;
    const char        *key;             /* member name in an object */
    size_t             key_len;         /* bytes, without the NUL */
    const char        *s;               /* string (unescaped) or number
                                           (as written), NUL-terminated */
    size_t             len;             /* bytes of s */
    struct tfs_json   *child;           /* first element or member */
    struct tfs_json   *next;            /* next sibling */
    size_t             n;               /* number of children */
};

struct tfs_json_chunk;

/* A parsed document: caller-embedded, emptied by tfs_json_cleanup. */
struct tfs_json_doc {
    struct tfs_json       *root;
    struct tfs_json_chunk *chunks;      /* the arena, owned */
};

struct tfs_json_limits {
    size_t   max_len;                   /* bytes of text */
    unsigned max_depth;                 /* nesting of arrays and objects */
    size_t   max_nodes;                 /* values in the document */
    bool     any_bytes;                 /* strings may hold bytes that are
                                           not UTF-8 (kept as they are) */
};

/*
 * Parse len bytes of text (no NUL needed) as one JSON value followed only
 * by whitespace.  Strings must be valid UTF-8 (unless lim->any_bytes)
 * without NUL; duplicate member names are refused.  lim NULL: 100 MB,
 * depth 64, 16M values, UTF-8 only.
 * TFS_EFORMAT ("JSON: expected ',' or '}' at byte 42"), TFS_ETOOBIG
 * (past a limit), -ENOMEM, each with a detail (tfs_errdetail).  On
 * failure out is left empty; on success free it with tfs_json_cleanup.
 */
int tfs_json_parse(const char *text, size_t len,
                   const struct tfs_json_limits *lim,
                   struct tfs_json_doc *out);
/* Free doc's arena (every value of it); doc is left empty. */
void tfs_json_cleanup(struct tfs_json_doc *doc);

/* Member key of object obj, or NULL (also when obj is not an object). */
const struct tfs_json *tfs_json_get(const struct tfs_json *obj,
                                    const char *key);
/* A number that is a whole value in range; TFS_EFORMAT (no detail)
   otherwise, also when v is NULL or not a number. */
int tfs_json_u64(const struct tfs_json *v, uint64_t *out);
int tfs_json_i64(const struct tfs_json *v, int64_t *out);
/* The string value, or NULL when v is missing or not a string. */
const char *tfs_json_str(const struct tfs_json *v);

/*
 * Append s (len bytes) as a JSON string literal: '"' and '\\' escaped
 * with a backslash, '\n' as \n, other bytes below 0x20 as \u00XX, the
 * rest as they are.  The one JSON string escaper of tierfs.  Errors as
 * tfs_buf_append.
 */
int tfs_json_put_str(struct tfs_buf *b, const char *s, size_t len);
/* The same, of a NUL-terminated string. */
int tfs_json_put_cstr(struct tfs_buf *b, const char *s);
/* Append v serialised compactly (numbers as written). */
int tfs_json_write(struct tfs_buf *b, const struct tfs_json *v);
/*
 * Parse text and append it re-serialised: a check that text is one JSON
 * value and a canonical copy of it.  Errors as parse.
 */
int tfs_json_copy(struct tfs_buf *b, const char *text, size_t len);

#endif /* TFS_COMMON_JSON_H */
