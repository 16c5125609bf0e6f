/* SPDX-License-Identifier: MIT */
/*
 * The cache group's pieces without a network (src/group): the member
 * list's parser and its errors, weighted rendezvous placement (shares
 * follow weights; a member leaving or joining moves only its share), and
 * request authentication (signatures, the time window, replays, the
 * secret file's mode).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "group/group.h"

static int parse(const char *text, struct tfs_gmembers *g)
{
    return tfs_gmembers_parse(text, strlen(text), "group.txt", g);
}

TEST(parse_members)
{
    struct tfs_gmembers g;

    CHECK_OK(parse("# the cache nodes\n"
                   "node-1.cluster:7700 500G\n"
                   "\n"
                   "10.0.0.2:7700   # weight 1\n"
                   "[fd00::3]:7701 2.5\n", &g));
    CHECK_EQ(g.n, 3);
    CHECK_STR(g.m[0].host, "node-1.cluster");
    CHECK_EQ(g.m[0].port, 7700);
    CHECK(g.m[0].weight == 500.0 * (1ull << 30));
    CHECK_STR(g.m[1].host, "10.0.0.2");
    CHECK(g.m[1].weight == 1.0);
    CHECK_STR(g.m[2].host, "fd00::3");
    CHECK_EQ(g.m[2].port, 7701);
    CHECK(g.m[2].weight == 2.5);
    CHECK(g.m[0].seed != g.m[1].seed && g.m[1].seed != g.m[2].seed);
    CHECK_EQ(tfs_gmembers_find(&g, "10.0.0.2", 7700), 1);
    CHECK_EQ(tfs_gmembers_find(&g, "10.0.0.2", 7701), -1);
    tfs_gmembers_cleanup(&g);
}

TEST(parse_errors)
{
    static const struct {
        const char *text;
        const char *detail;
    } bad[] = {
        {"a:1\nb\n", "group.txt:2: no port (host:port)"},
        {"a:0\n", "group.txt:1: the port is not a number in 1..65535"},
        {"a:70000\n", "group.txt:1: the port is not a number in 1..65535"},
        {"a:x\n", "group.txt:1: the port is not a number in 1..65535"},
        {"a b:1\n", "group.txt:1: no port (host:port)"},
        {"a/b:1\n", "group.txt:1: not a host name or address"},
        {"[fd00::1:7700\n", "group.txt:1: an IPv6 address is \"[addr]:port\""},
        {"a:1 0\n", "group.txt:1: the weight is not a positive number or size"},
        {"a:1 -3\n", "group.txt:1: the weight is not a positive number or size"},
        {"a:1 2 3\n", "group.txt:1: more than \"host:port weight\""},
        {"a:1\n# c\na:1\n", "group.txt:3: a:1 is listed twice"},
        {"# only a comment\n\n", "group.txt: no members"},
    };
    struct tfs_gmembers g = {NULL, 0};

    for (size_t i = 0; i < TFS_ARRAY_LEN(bad); i++) {
        CHECK_RC(parse(bad[i].text, &g), TFS_EFORMAT);
        CHECK_STR(tfs_errdetail(), bad[i].detail);
        CHECK(g.m == NULL);             /* nothing written on failure */
    }
    CHECK_RC(tfs_gmembers_parse("a:1\0b:2\n", 8, "group.txt", &g),
             TFS_EFORMAT);
    CHECK_STR(tfs_errdetail(), "group.txt:1: a NUL byte");
}

/* The owner of n keys under g; counts[i] += keys owned by member i. */
static void owners(const struct tfs_gmembers *g, unsigned n, size_t *own,
                   unsigned *counts)
{
    for (unsigned k = 0; k < n; k++) {
        uint64_t key = k * 0x9e3779b97f4a7c15ull;
        size_t o;

        CHECK_EQ(tfs_gmembers_rank(g, &key, sizeof(key), NULL, NULL, &o, 1),
                 1);
        if (own != NULL)
            own[k] = o;
        if (counts != NULL)
            counts[o]++;
    }
}

TEST(shares_follow_weights)
{
    struct tfs_gmembers g;
    unsigned counts[3] = {0};
    unsigned n = 200000;

    CHECK_OK(parse("a:1 1\nb:1 2\nc:1 5\n", &g));
    owners(&g, n, NULL, counts);
    printf("# shares for weights 1:2:5: %.4f %.4f %.4f\n",
           (double)counts[0] / n, (double)counts[1] / n,
           (double)counts[2] / n);
    CHECK(counts[0] > n / 8 - n / 100 && counts[0] < n / 8 + n / 100);
    CHECK(counts[1] > n / 4 - n / 100 && counts[1] < n / 4 + n / 100);
    CHECK(counts[2] > n * 5 / 8 - n / 100 && counts[2] < n * 5 / 8 + n / 100);
    tfs_gmembers_cleanup(&g);
}

/* Ten members; one leaves, then an eleventh joins. */
TEST(membership_change_moves_one_share)
{
    static size_t before[100000];
    static size_t after[100000];
    struct tfs_gmembers g10;
    struct tfs_gmembers g9;
    struct tfs_gmembers g11;
    char text[400] = "";
    unsigned moved = 0;
    unsigned n = 100000;

    for (int i = 0; i < 10; i++)
        snprintf(text + strlen(text), sizeof(text) - strlen(text),
                 "10.0.0.%d:7700\n", i + 1);
    CHECK_OK(parse(text, &g10));
    owners(&g10, n, before, NULL);
    /* member 3 (10.0.0.4) leaves: exactly its keys move */
    g9.n = 9;
    g9.m = tfs_calloc(9, sizeof(*g9.m));
    CHECK(g9.m != NULL);
    for (size_t i = 0, j = 0; i < 10; i++)
        if (i != 3)
            g9.m[j++] = g10.m[i];
    owners(&g9, n, after, NULL);
    for (unsigned k = 0; k < n; k++) {
        size_t was = before[k];
        size_t now = after[k] >= 3 ? after[k] + 1 : after[k];  /* g10's */
        CHECK(was == 3 ? now != 3 : now == was);
    }
    /* an eleventh joins: it takes about 1/11, all moved keys go to it */
    snprintf(text + strlen(text), sizeof(text) - strlen(text),
             "10.0.0.11:7700\n");
    CHECK_OK(parse(text, &g11));
    owners(&g11, n, after, NULL);
    for (unsigned k = 0; k < n; k++) {
        if (after[k] == before[k])
            continue;
        CHECK_EQ(after[k], 10);
        moved++;
    }
    printf("# an 11th member took %.4f of the keys (1/11 = %.4f)\n",
           (double)moved / n, 1.0 / 11);
    CHECK(moved > n / 11 - n / 100 && moved < n / 11 + n / 100);
    tfs_gmembers_cleanup(&g9);
    tfs_gmembers_cleanup(&g10);
    tfs_gmembers_cleanup(&g11);
}

static bool not_first(void *arg, size_t i)
{
    return i != *(size_t *)arg;
}

TEST(rank_order_and_skips)
{
    struct tfs_gmembers g;
    size_t order[8];
    size_t again[8];
    uint64_t key = 42;
    size_t n;

    CHECK_OK(parse("a:1\nb:1\nc:1\nd:1\ne:1\n", &g));
    n = tfs_gmembers_rank(&g, &key, sizeof(key), NULL, NULL, order, 8);
    CHECK_EQ(n, 5);
    for (size_t i = 1; i < n; i++)
        CHECK(tfs_gmember_score(&g.m[order[i - 1]], &key, sizeof(key)) >=
              tfs_gmember_score(&g.m[order[i]], &key, sizeof(key)));
    /* the best one suspect: the rest keep their order */
    CHECK_EQ(tfs_gmembers_rank(&g, &key, sizeof(key), not_first, &order[0],
                               again, 8), 4);
    for (size_t i = 0; i < 4; i++)
        CHECK_EQ(again[i], order[i + 1]);
    CHECK_EQ(tfs_gmembers_rank(&g, &key, sizeof(key), NULL, NULL, again, 2),
             2);
    CHECK_EQ(again[0], order[0]);
    CHECK_EQ(again[1], order[1]);
    tfs_gmembers_cleanup(&g);
}

#define NONCE "00112233445566778899aabbccddeeff"

TEST(auth)
{
    struct tfs_gauth a;
    struct tfs_gauth other;
    char sig[65];
    char bad[65];
    const char *blk = "5f3e";

    CHECK_RC(tfs_gauth_init(&a, "short", 5, 30), -EINVAL);
    CHECK_OK(tfs_gauth_init(&a, "0123456789abcdef-group", 22, 30));
    CHECK_OK(tfs_gauth_init(&other, "another-group-secret", 20, 30));
    tfs_gauth_sign(&a, "GET", blk, 1000, NONCE, sig);
    CHECK_EQ(strlen(sig), 64);
    /* each field is signed */
    CHECK_RC(tfs_gauth_check(&a, "PUT", blk, 1000, NONCE, sig, 1000),
             -EACCES);
    CHECK_RC(tfs_gauth_check(&a, "GET", "5f3f", 1000, NONCE, sig, 1000),
             -EACCES);
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1001, NONCE, sig, 1000),
             -EACCES);
    CHECK(strstr(tfs_errdetail(), "bad signature") != NULL);
    memcpy(bad, sig, sizeof(bad));
    bad[10] = bad[10] == 'a' ? 'b' : 'a';
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, bad, 1000),
             -EACCES);
    tfs_gauth_sign(&other, "GET", blk, 1000, NONCE, bad);   /* wrong group */
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, bad, 1000),
             -EACCES);
    /* the window: 30 s either way */
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, sig, 1031),
             -EACCES);
    CHECK(strstr(tfs_errdetail(), "31 s off") != NULL);
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, "xyz", sig, 1000),
             -EACCES);
    /* accepted once, then a replay */
    CHECK_OK(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, sig, 1020));
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, sig, 1025),
             -EACCES);
    CHECK(strstr(tfs_errdetail(), "replay") != NULL);
    /* out of the window the time refuses it, and the next request
       accepted forgets its nonce */
    CHECK_RC(tfs_gauth_check(&a, "GET", blk, 1000, NONCE, sig, 1031),
             -EACCES);
    CHECK(strstr(tfs_errdetail(), "off this node's clock") != NULL);
    CHECK_EQ(tfs_hmap_count(&a.seen), 1);
    tfs_gauth_sign(&a, "GET", blk, 1031, NONCE "01", sig);
    CHECK_OK(tfs_gauth_check(&a, "GET", blk, 1031, NONCE "01", sig, 1031));
    CHECK_EQ(tfs_hmap_count(&a.seen), 1);
    tfs_gauth_cleanup(&a);
    tfs_gauth_cleanup(&other);
}

TEST(secret_file)
{
    char path[64];
    struct tfs_gauth a;
    FILE *f;

    test_tmpfile(path, sizeof(path), "secret");
    f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("a-secret-of-the-group-0123\n", f);
    fclose(f);
    CHECK(chmod(path, 0644) == 0);
    CHECK_RC(tfs_gauth_load(&a, path, 30), -EPERM);
    CHECK(strstr(tfs_errdetail(), "mode 644") != NULL);
    CHECK(chmod(path, 0600) == 0);
    CHECK_OK(tfs_gauth_load(&a, path, 30));
    CHECK_EQ(a.key_len, 26);            /* the newline dropped */
    tfs_gauth_cleanup(&a);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("tiny\n", f);
    fclose(f);
    CHECK_RC(tfs_gauth_load(&a, path, 30), -EINVAL);
    CHECK(strstr(tfs_errdetail(), path) != NULL);
    unlink(path);
    CHECK_RC(tfs_gauth_load(&a, path, 30), -ENOENT);
}

/* Every allocation failing in turn: -ENOMEM, nothing kept or leaked. */
TEST(alloc_failures)
{
    char text[2048] = "";
    struct tfs_gmembers g = {NULL, 0};
    struct tfs_gauth a;
    char sig[65];
    char nonce[40];
    int failures = 0;
    int rc = -ENOMEM;

    for (int i = 0; i < 40; i++)        /* the array doubles twice */
        snprintf(text + strlen(text), sizeof(text) - strlen(text),
                 "10.1.0.%d:7700\n", i);
    CHECK_OK(test_alloc_hook());
    for (long k = 0; k < 50 && rc != 0; k++) {
        test_alloc_budget(k);
        rc = parse(text, &g);
        test_alloc_budget(-1);
        if (rc != 0) {
            CHECK_RC(rc, -ENOMEM);
            CHECK(g.m == NULL);
            failures++;
        }
    }
    CHECK_OK(rc);
    CHECK_EQ(g.n, 40);
    CHECK(failures >= 3);
    tfs_gmembers_cleanup(&g);
    CHECK_OK(tfs_gauth_init(&a, "0123456789abcdef-group", 22, 30));
    snprintf(nonce, sizeof(nonce), "%s", NONCE);
    tfs_gauth_sign(&a, "GET", "ab", 5, nonce, sig);
    test_alloc_budget(0);               /* the nonce cannot be kept */
    rc = tfs_gauth_check(&a, "GET", "ab", 5, nonce, sig, 5);
    test_alloc_budget(-1);
    CHECK_RC(rc, -ENOMEM);
    CHECK_OK(tfs_gauth_check(&a, "GET", "ab", 5, nonce, sig, 5));
    CHECK_OK(tfs_replace_allocator(malloc, realloc, calloc, free));
    tfs_gauth_cleanup(&a);
}

TESTS(T(parse_members), T(parse_errors), T(shares_follow_weights),
      T(membership_change_moves_one_share), T(rank_order_and_skips),
      T(auth), T(secret_file), T(alloc_failures));
TEST_MAIN()
