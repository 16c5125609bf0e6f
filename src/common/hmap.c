/* SPDX-License-Identifier: MIT */
/*
 * The chained hash map (hmap.h).  In order: the map (init, find, insert
 * with its doubling, remove), iteration, then the two key kinds.
 *
 * Growth is a whole rehash, not Redis's incremental one: every map here
 * is used under its owner's mutex, and a doubling moves each node once,
 * so an insert costs O(1) amortised.  The price is one pause per
 * doubling, linear in the map and bound by memory latency: the insert
 * that takes a map from 2^19 to 2^20 buckets took 0.1-0.5 s on a loaded
 * 2-core VM (bench/tools/hmapbench.c prints it), the pauses before it
 * half as long each.  The inode table and write-back's map grew so
 * before they moved here.  An incremental rehash would spread the pause
 * but makes every find look in two tables, and walking and removal
 * subtle, for a pause that comes once per power of two.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "common/hmap.h"
#include "common/util.h"

#define HMAP_MIN_BUCKETS 16u

static struct tfs_hnode **hmap_slot(const struct tfs_hmap *m, uint64_t hash)
{
    return &m->b[hash & (m->nb - 1)];
}

int tfs_hmap_init(struct tfs_hmap *m, size_t min_buckets,
                  tfs_hmap_eq_fn *eq)
{
    size_t nb = HMAP_MIN_BUCKETS;

    memset(m, 0, sizeof(*m));
    while (nb < min_buckets && nb <= SIZE_MAX / 2 / sizeof(*m->b))
        nb *= 2;
    m->b = tfs_calloc(nb, sizeof(*m->b));
    if (m->b == NULL)
        return -ENOMEM;
    m->nb = nb;
    m->eq = eq;
    return 0;
}

void tfs_hmap_cleanup(struct tfs_hmap *m)
{
    tfs_free(m->b);
    memset(m, 0, sizeof(*m));
}

struct tfs_hnode *tfs_hmap_find(const struct tfs_hmap *m, uint64_t hash,
                                const void *key)
{
    struct tfs_hnode *p = *hmap_slot(m, hash);

    while (p != NULL && (p->hash != hash ||
                         (m->eq != NULL && !m->eq(p, key))))
        p = p->next;
    return p;
}

/*
 * Move every node into twice the buckets.  The new array is allocated
 * before anything moves, so a failure leaves the map untouched.
 */
static int hmap_grow(struct tfs_hmap *m)
{
    size_t nb = m->nb * 2;
    struct tfs_hnode **b;

    if (m->nb > SIZE_MAX / 2 / sizeof(*b))
        return -ENOMEM;
    b = tfs_calloc(nb, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m->nb; i++) {
        while (m->b[i] != NULL) {
            struct tfs_hnode *p = m->b[i];
            m->b[i] = p->next;
            p->next = b[p->hash & (nb - 1)];
            b[p->hash & (nb - 1)] = p;
        }
    }
    tfs_free(m->b);
    m->b = b;
    m->nb = nb;
    return 0;
}

int tfs_hmap_insert(struct tfs_hmap *m, struct tfs_hnode *node,
                    uint64_t hash)
{
    struct tfs_hnode **slot;

    if (m->n >= m->nb && hmap_grow(m) < 0)
        return -ENOMEM;
    slot = hmap_slot(m, hash);
    node->hash = hash;
    node->next = *slot;
    *slot = node;
    m->n++;
    return 0;
}

void tfs_hmap_remove(struct tfs_hmap *m, struct tfs_hnode *node)
{
    struct tfs_hnode **pp = hmap_slot(m, node->hash);

    while (*pp != node) {
        assert(*pp != NULL);            /* node is not in m */
        pp = &(*pp)->next;
    }
    *pp = node->next;
    node->next = NULL;
    m->n--;
}

/* ---- iteration ---- */

void tfs_hmap_iter_init(struct tfs_hmap_iter *it, const struct tfs_hmap *m)
{
    it->m = m;
    it->b = 0;
    it->next = NULL;
    it->nb = m->nb;
}

struct tfs_hnode *tfs_hmap_iter_next(struct tfs_hmap_iter *it)
{
    struct tfs_hnode *p = it->next;

    assert(it->m->nb == it->nb);        /* nothing inserted meanwhile */
    while (p == NULL && it->b < it->nb)
        p = it->m->b[it->b++];
    if (p != NULL)
        it->next = p->next;             /* before the caller frees p */
    return p;
}

/* ---- string keys ---- */

uint64_t tfs_hash_str(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

bool tfs_hstr_eq(const struct tfs_hnode *node, const void *key)
{
    const struct tfs_hstr *h = (const struct tfs_hstr *)(const void *)node;

    return strcmp(h->key, key) == 0;
}

struct tfs_hstr *tfs_hmap_find_str(const struct tfs_hmap *m,
                                   const char *key)
{
    assert(m->eq == tfs_hstr_eq);
    return tfs_hstr_of(tfs_hmap_find(m, tfs_hash_str(key), key));
}

int tfs_hmap_insert_str(struct tfs_hmap *m, struct tfs_hstr *h)
{
    assert(m->eq == tfs_hstr_eq);
    return tfs_hmap_insert(m, &h->node, tfs_hash_str(h->key));
}

/* ---- u64 keys ---- */

uint64_t tfs_hash_u64(uint64_t key)
{
    /* Each step is invertible (xor-shift, odd multiplier), so is all. */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return key;
}

struct tfs_hnode *tfs_hmap_find_u64(const struct tfs_hmap *m, uint64_t key)
{
    assert(m->eq == NULL);
    return tfs_hmap_find(m, tfs_hash_u64(key), NULL);
}

int tfs_hmap_insert_u64(struct tfs_hmap *m, struct tfs_hnode *node,
                        uint64_t key)
{
    assert(m->eq == NULL);
    return tfs_hmap_insert(m, node, tfs_hash_u64(key));
}
