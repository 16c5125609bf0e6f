/* SPDX-License-Identifier: MIT */
/*
 * One chained hash map for every in-memory table of the library (as
 * Redis has one dict.c): intrusive, so an insert allocates nothing but,
 * now and then, a bigger bucket array.
 *
 * A node (struct tfs_hnode) sits inside the caller's object, holds the
 * object's hash and is found again with tfs_container_of.  Keys come in
 * two kinds, or any other the caller likes:
 *
 *   strings   the node is a struct tfs_hstr (node + key pointer, the key
 *             owned by the containing object); the map's eq is
 *             tfs_hstr_eq; use the _str functions
 *   u64       the map's eq is NULL: the hash is tfs_hash_u64(key), a
 *             bijection, so equal hashes mean equal keys; _u64 functions
 *   other     the caller hashes, and its eq compares (cache/ram.c: block
 *             ids)
 *
 * The map keeps at most one node per bucket on average (it doubles when
 * an insert would pass load 1) and never shrinks.  Not thread-safe: each
 * map is guarded by its owner's lock, named where it is declared.
 */
#ifndef TFS_COMMON_HMAP_H
#define TFS_COMMON_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tfs_hnode {
    struct tfs_hnode *next;             /* chain; the map's */
    uint64_t          hash;             /* set by insert; the map's */
};

/* A node keyed by a NUL-terminated string. */
struct tfs_hstr {
    struct tfs_hnode node;
    char            *key;               /* owned by the containing object;
                                           not changed while in a map */
};

/* Whether the key of node (in the map) equals key (as given to find). */
typedef bool tfs_hmap_eq_fn(const struct tfs_hnode *node, const void *key);

struct tfs_hmap {
    struct tfs_hnode **b;               /* nb buckets, owned */
    size_t             nb;              /* a power of two */
    size_t             n;               /* nodes; n <= nb always */
    tfs_hmap_eq_fn    *eq;              /* NULL: the hash is the key */
};

/*
 * Make an empty map with min_buckets buckets (rounded up to a power of
 * two, 16 at least): a map that will hold that many nodes never grows.
 * eq compares keys (NULL: compare hashes only).  -ENOMEM, and *m is then
 * as after tfs_hmap_cleanup.
 */
int tfs_hmap_init(struct tfs_hmap *m, size_t min_buckets,
                  tfs_hmap_eq_fn *eq);
/* Free the buckets; the nodes are the caller's (empty the map first, or
   free them after).  Safe on a zeroed map and twice. */
void tfs_hmap_cleanup(struct tfs_hmap *m);

static inline size_t tfs_hmap_count(const struct tfs_hmap *m)
{
    return m->n;
}

/* The node with this hash whose key eq says is key, or NULL. */
struct tfs_hnode *tfs_hmap_find(const struct tfs_hmap *m, uint64_t hash,
                                const void *key);
/*
 * Link node in under hash; the caller has made sure no node with its key
 * is in the map (find first).  When the map is full (n == nb) it doubles
 * first; if that allocation fails: -ENOMEM, node is not linked, and the
 * map is as it was.  Otherwise 0.
 */
int tfs_hmap_insert(struct tfs_hmap *m, struct tfs_hnode *node,
                    uint64_t hash);
/* Unlink node, which is in m.  Never allocates, never moves other nodes. */
void tfs_hmap_remove(struct tfs_hmap *m, struct tfs_hnode *node);

/*
 * Walk every node, bucket by bucket:
 *
 *     struct tfs_hmap_iter it;
 *     tfs_hmap_iter_init(&it, m);
 *     while ((n = tfs_hmap_iter_next(&it)) != NULL)
 *         ...
 *
 * While walking, the caller may remove (and free) the node just returned,
 * and no other; it must not insert (a doubling would reorder the map).
 */
struct tfs_hmap_iter {
    const struct tfs_hmap *m;
    size_t                 b;           /* next bucket to start */
    struct tfs_hnode      *next;        /* after the one returned */
    size_t                 nb;          /* m->nb at init: no growth */
};

void tfs_hmap_iter_init(struct tfs_hmap_iter *it, const struct tfs_hmap *m);
struct tfs_hnode *tfs_hmap_iter_next(struct tfs_hmap_iter *it);

/* ---- string keys (eq = tfs_hstr_eq) ---- */

uint64_t tfs_hash_str(const char *s);   /* XXH3-64 */
bool tfs_hstr_eq(const struct tfs_hnode *node, const void *key);
struct tfs_hstr *tfs_hmap_find_str(const struct tfs_hmap *m,
                                   const char *key);
/* Insert h under the hash of h->key; as tfs_hmap_insert. */
int tfs_hmap_insert_str(struct tfs_hmap *m, struct tfs_hstr *h);

static inline struct tfs_hstr *tfs_hstr_of(struct tfs_hnode *n)
{
    return n ? (struct tfs_hstr *)(void *)n : NULL;  /* node is first */
}

/* ---- u64 keys (eq = NULL) ---- */

/* A mixing bijection of the 64-bit integers (murmur3's finaliser). */
uint64_t tfs_hash_u64(uint64_t key);
struct tfs_hnode *tfs_hmap_find_u64(const struct tfs_hmap *m, uint64_t key);
/* Insert node under the hash of key; as tfs_hmap_insert. */
int tfs_hmap_insert_u64(struct tfs_hmap *m, struct tfs_hnode *node,
                        uint64_t key);

#endif /* TFS_COMMON_HMAP_H */
