/* SPDX-License-Identifier: MIT */
/*
 * hmapbench: the metadata cache's stat lookup, before and after it moved
 * to common/hmap.c, side by side in one run.
 *
 *   hmapbench [N ...]          (default: 4096 65536 1000000)
 *
 * For each N it fills two tables with the same N stat entries, laid out
 * as cache/meta.c's struct meta_ent (hash, key, kind, stat, expiry; one
 * allocation each plus the key): the old table, 4096 fixed buckets and
 * the lookup loop meta.c had (copied here), and a tfs_hmap grown from
 * meta's 4096 buckets at load 1.  It then looks up 100,000 keys in one
 * shuffled order (cycling when N is smaller) in the old table, then in
 * the new, five times in turn, and prints the best ns per lookup of
 * each, their ratio and the longest single insert (the last doubling),
 * one line per N.  Both hash with XXH3; the exit status is 1
 * if either missed a key.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/hmap.h"
#include "common/util.h"
#include "tierfs/store.h"

#define OLD_BUCKETS 4096u               /* meta.c's META_BUCKETS */
#define ROUNDS 5
#define LOOKUPS 100000                  /* per table per round */

/* meta.c's entry as it was: chain, hash, key, then the payload. */
struct old_ent {
    struct old_ent *next;
    uint64_t        hash;
    char           *key;
    int             kind;
    struct tfs_stat st;
    uint64_t        expires_ns;
};

/* meta.c's entry now. */
struct new_ent {
    struct tfs_hstr h;
    int             kind;
    struct tfs_stat st;
    uint64_t        expires_ns;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The old meta_get's loop: the kind of key, or -1. */
static int old_get(struct old_ent *const *b, const char *key)
{
    uint64_t h = tfs_hash_str(key);

    for (const struct old_ent *e = b[h % OLD_BUCKETS]; e; e = e->next) {
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e->kind;
    }
    return -1;
}

static int new_get(const struct tfs_hmap *m, const char *key)
{
    struct tfs_hstr *h = tfs_hmap_find_str(m, key);

    return h ? tfs_container_of(h, struct new_ent, h)->kind : -1;
}

static void shuffle(size_t *v, size_t n, uint64_t seed)
{
    for (size_t i = n; i > 1; i--) {
        size_t j;

        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        j = (size_t)(seed % i);
        size_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

struct run {
    char           **keys;
    size_t          *order;
    size_t           n;
    struct old_ent **old_b;
    struct tfs_hmap  map;
    double           pause_ms;          /* longest single insert */
};

static int fill(struct run *r)
{
    char key[64];

    r->old_b = calloc(OLD_BUCKETS, sizeof(*r->old_b));
    if (r->old_b == NULL || tfs_hmap_init(&r->map, OLD_BUCKETS,
                                          tfs_hstr_eq) < 0)
        return -1;
    for (size_t i = 0; i < r->n; i++) {
        struct old_ent *o = calloc(1, sizeof(*o));
        struct new_ent *e = calloc(1, sizeof(*e));
        uint64_t t0;
        double ms;

        snprintf(key, sizeof(key), "train/shard%04zu/img%08zu.jpg",
                 i % 1000, i);
        r->keys[i] = strdup(key);
        if (o == NULL || e == NULL || r->keys[i] == NULL)
            return -1;
        o->key = strdup(key);
        e->h.key = strdup(key);
        if (o->key == NULL || e->h.key == NULL)
            return -1;
        o->kind = e->kind = 1 + (int)(i % 2);
        o->hash = tfs_hash_str(key);
        o->next = r->old_b[o->hash % OLD_BUCKETS];
        r->old_b[o->hash % OLD_BUCKETS] = o;
        t0 = now_ns();
        if (tfs_hmap_insert_str(&r->map, &e->h) < 0)
            return -1;
        ms = (double)(now_ns() - t0) / 1e6;
        if (ms > r->pause_ms)
            r->pause_ms = ms;
        r->order[i] = i;
    }
    shuffle(r->order, r->n, 0x9e3779b97f4a7c15ull);
    return 0;
}

/* ns per lookup of one pass of LOOKUPS; *sum keeps the work live. */
static double time_lookups(struct run *r, bool old, long *sum)
{
    uint64_t t0 = now_ns();

    for (size_t i = 0; i < LOOKUPS; i++) {
        const char *key = r->keys[r->order[i % r->n]];
        *sum += old ? old_get(r->old_b, key) : new_get(&r->map, key);
    }
    return (double)(now_ns() - t0) / LOOKUPS;
}

static void run_free(struct run *r)
{
    struct tfs_hmap_iter it;
    struct tfs_hnode *n;

    for (size_t i = 0; r->old_b != NULL && i < OLD_BUCKETS; i++) {
        while (r->old_b[i] != NULL) {
            struct old_ent *o = r->old_b[i];
            r->old_b[i] = o->next;
            free(o->key);
            free(o);
        }
    }
    free(r->old_b);
    tfs_hmap_iter_init(&it, &r->map);
    while ((n = tfs_hmap_iter_next(&it)) != NULL) {
        struct new_ent *e = tfs_container_of(n, struct new_ent, h.node);
        free(e->h.key);
        free(e);
    }
    tfs_hmap_cleanup(&r->map);
    for (size_t i = 0; i < r->n; i++)
        free(r->keys[i]);
    free(r->keys);
    free(r->order);
}

static int bench_one(size_t n)
{
    struct run r = {.n = n};
    long sum_old = 0;
    long sum_new = 0;
    long want = 0;
    double t_old = 1e30;
    double t_new = 1e30;

    r.keys = calloc(n, sizeof(*r.keys));
    r.order = calloc(n, sizeof(*r.order));
    if (r.keys == NULL || r.order == NULL || fill(&r) < 0) {
        fprintf(stderr, "hmapbench: out of memory at %zu entries\n", n);
        run_free(&r);
        return 1;
    }
    for (size_t i = 0; i < LOOKUPS; i++)
        want += ROUNDS * (1 + (long)(r.order[i % n] % 2));
    for (int k = 0; k < ROUNDS; k++) {  /* in turn: the same noise */
        t_old = TFS_MIN(t_old, time_lookups(&r, true, &sum_old));
        t_new = TFS_MIN(t_new, time_lookups(&r, false, &sum_new));
    }
    printf("%8zu stats  fixed 4096: %7.1f ns/lookup (chains %6.1f)   "
           "hmap: %5.1f ns/lookup (%zu buckets)   %5.1fx   "
           "longest insert %.1f ms\n",
           n, t_old, (double)n / OLD_BUCKETS, t_new, r.map.nb,
           t_old / t_new, r.pause_ms);
    run_free(&r);
    return sum_old == want && sum_new == want ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const size_t def[] = {4096, 65536, 1000000};
    int rc = 0;

    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            rc |= bench_one(strtoul(argv[i], NULL, 10));
    } else {
        for (size_t i = 0; i < TFS_ARRAY_LEN(def); i++)
            rc |= bench_one(def[i]);
    }
    return rc;
}
