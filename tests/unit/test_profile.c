/* SPDX-License-Identifier: MIT */
/*
 * `tierfs profile` (src/cli/profile.c, linked from the CLI's tfs_profile
 * library): the profile gives known answers on synthetic traces (pure
 * sequential reads; a loop over W bytes, whose miss-ratio curve has its
 * knee at W; uniform random reads, whose re-read fraction is what was
 * constructed), and its tinylfu simulation decides admission as the
 * cache's index does, access for access.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/trace.h"
#include "cache/cache_int.h"
#include "cache/tinylfu.h"
#include "cli/profile.h"
#include "common/util.h"

static char path[64];

static const char *tmp_trace(void)
{
    return test_tmpfile(path, sizeof(path), "trace");
}

/* A number from the profile's JSON. */
static double jnum(const char *json, const char *name)
{
    char pat[80];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\": ", name);
    p = strstr(json, pat);
    CHECK(p != NULL);
    return strtod(p + strlen(pat), NULL);
}

static char *profile(uint64_t bs)
{
    char *out = NULL;

    CHECK_OK(cli_profile_trace(path, bs, true, &out));
    return out;
}

TEST(sequential_is_one)
{
    struct tfs_trace *t = NULL;
    char *out;

    CHECK_OK(tfs_trace_open(&t, tmp_trace()));
    uint32_t f = tfs_trace_file_open(t, "big", 64u << 20);
    for (uint64_t off = 0; off < (64u << 20); off += 1u << 20)
        tfs_trace_read(t, f, off, 1u << 20, 100, TFS_TRACE_STORE);
    tfs_trace_file_close(t, f);
    tfs_trace_close(t);
    out = profile(4u << 20);
    CHECK(jnum(out, "sequential_ratio") == 1.0);
    CHECK(jnum(out, "reread_ratio") == 0.0);
    CHECK_EQ(jnum(out, "working_set_bytes"), 64u << 20);
    tfs_free(out);
    unlink(path);
}

/* The predicted LRU hit rate at the first curve point >= size. */
static double lru_at(const char *json, uint64_t size, bool above)
{
    const char *p = strstr(json, "\"mrc\": [");
    double best = -1;

    CHECK(p != NULL);
    while ((p = strstr(p, "\"cache_bytes\": ")) != NULL) {
        uint64_t c = strtoull(p + 15, NULL, 10);
        double h = jnum(p, "hit_lru");
        if (above && c >= size)
            return h;
        if (!above && c <= size)
            best = h;
        p += 15;
    }
    return best;
}

TEST(loop_knee_at_working_set)
{
    struct tfs_trace *t = NULL;
    const uint64_t w = 64u << 20;
    char key[16];
    char *out;

    CHECK_OK(tfs_trace_open(&t, tmp_trace()));
    for (int pass = 0; pass < 5; pass++) {
        for (int i = 0; i < 16; i++) {
            snprintf(key, sizeof(key), "f%02d", i);
            uint32_t f = tfs_trace_file_open(t, key, 4u << 20);
            tfs_trace_read(t, f, 0, 4u << 20, 100, TFS_TRACE_STORE);
            tfs_trace_file_close(t, f);
        }
    }
    tfs_trace_close(t);
    out = profile(4u << 20);
    CHECK_EQ(jnum(out, "working_set_bytes"), w);
    /* Below W a loop gets nothing from LRU; from W on, 4 passes of 5. */
    CHECK(lru_at(out, w - 1, false) <= 0.01);
    CHECK(lru_at(out, w, true) >= 0.79);
    CHECK(jnum(out, "reread_ratio") > 0.79);
    tfs_free(out);
    unlink(path);
}

TEST(uniform_random_rereads)
{
    struct tfs_trace *t = NULL;
    enum { FILES = 100, READS = 1000 };
    bool seen[FILES] = {false};
    uint64_t x = 12345;
    int unique = 0;
    char key[16];
    char *out;

    CHECK_OK(tfs_trace_open(&t, tmp_trace()));
    for (int r = 0; r < READS; r++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        int i = (int)((x >> 33) % FILES);
        unique += !seen[i];
        seen[i] = true;
        snprintf(key, sizeof(key), "s%03d", i);
        uint32_t f = tfs_trace_file_open(t, key, 65536);
        tfs_trace_read(t, f, 0, 65536, 50, TFS_TRACE_RAM);
        tfs_trace_file_close(t, f);
    }
    tfs_trace_close(t);
    out = profile(4u << 20);
    CHECK(fabs(jnum(out, "reread_ratio") -
               (1.0 - (double)unique / READS)) < 1e-6);
    CHECK_EQ(jnum(out, "files"), unique);
    CHECK_EQ(jnum(out, "size_median"), 65536);
    tfs_free(out);
    unlink(path);
}

/* ---- the simulation against the cache's index ---- */

enum { SIM_N = 1000, SIM_B = 4096 };

/* The block id of test key j: spread over 64 bits, as the profile's
 * hashed ids are (its map keeps ids | 1: 2 and 3 would be one block). */
static uint64_t sim_id(uint64_t j)
{
    return j * 0x9e3779b97f4a7c15u;
}

/* The index and the simulation side by side, plus a mirror of their
 * sketch (the same code fed the same keys) to check the setup. */
struct both {
    struct tfs_index       *ix;
    struct cli_profile_sim *sim;
    uint64_t                cap;
    struct tfs_tinylfu      mirror;
    uint64_t                mirror_ops;
    unsigned                hits;
    unsigned                admits;
    unsigned                rejects;
    uint64_t                last_admitted;  /* test key */
};

static void both_open(struct both *b, const char *ixpath)
{
    uint64_t blocks;
    bool excl;

    memset(b, 0, sizeof(*b));
    b->cap = (uint64_t)SIM_N * SIM_B;
    blocks = tfs_tinylfu_blocks(b->cap);    /* as disk.c sizes it */
    unlink(ixpath);
    CHECK_OK(tfs_index_open(ixpath, blocks, &b->ix, &excl));
    CHECK(excl);
    tfs_index_reset(b->ix);
    CHECK_OK(tfs_index_ready(b->ix));
    CHECK_OK(cli_profile_sim_create(&b->sim, b->cap, 4 * SIM_N));
    b->mirror.width = tfs_tinylfu_width(blocks);
    b->mirror.ops = &b->mirror_ops;
    b->mirror.cells = calloc(TFS_TINYLFU_ROWS * b->mirror.width, 1);
    CHECK(b->mirror.cells != NULL);
}

static void both_close(struct both *b)
{
    tfs_index_close(b->ix);
    cli_profile_sim_destroy(b->sim);
    free(b->mirror.cells);
}

/*
 * One access of test key j through the disk tier's steps (tfs_disk_load's
 * lookup, then tfs_disk_store's admission and commit on a miss) and
 * through the simulation: the same hit, the same admission decision.
 * The index's id carries the simulation's in the half its sketch hashes.
 */
static void both_access(struct both *b, uint64_t j)
{
    struct tfs_victims v = {0};
    uint8_t id[TFS_BLOCK_ID_LEN];
    uint64_t key = sim_id(j);
    uint64_t hi = ~key;
    struct tfs_disk_loc loc;
    bool ix_hit;
    bool ix_admitted = false;
    bool sim_hit;
    bool sim_admitted;

    memcpy(id, &hi, 8);
    memcpy(id + 8, &key, 8);
    ix_hit = tfs_index_lookup(b->ix, id, &loc);
    if (!ix_hit) {
        int rc = tfs_index_admit(b->ix, id, SIM_B, b->cap,
                                 TFS_EVICT_TINYLFU, &v);
        CHECK(rc == 0 || rc == 1);
        ix_admitted = rc == 1;
        if (ix_admitted)
            tfs_index_commit(b->ix, id, true);
        tfs_victims_cleanup(&v);
    }
    sim_hit = cli_profile_sim_access(b->sim, key, SIM_B, &sim_admitted);
    tfs_tinylfu_add(&b->mirror, key);
    CHECK_EQ(sim_hit, ix_hit);
    CHECK_EQ(sim_admitted, ix_admitted);
    b->hits += ix_hit;
    b->admits += ix_admitted;
    if (ix_admitted)
        b->last_admitted = j;
    b->rejects += !ix_hit && !ix_admitted;
}

/*
 * Newcomers keys first..first+99, key j asked for 1 + j % 7 times in a
 * row against a full cache whose residents were all asked for f times:
 * each is admitted at its (f + margin)th access.  Checks both sides saw
 * exactly that many hits, admissions and rejections.
 */
static void both_newcomers(struct both *b, uint64_t first, unsigned f)
{
    unsigned need = f + TFS_TINYLFU_MARGIN;
    unsigned hits = b->hits;
    unsigned admits = b->admits;
    unsigned rejects = b->rejects;

    for (uint64_t j = first; j < first + 100; j++) {
        unsigned g = 1 + (unsigned)(j % 7);
        for (unsigned k = 0; k < g; k++)
            both_access(b, j);
        rejects += g < need ? g : need - 1;
        admits += g >= need;
        hits += g > need ? g - need : 0;
    }
    CHECK_EQ(b->rejects, rejects);
    CHECK_EQ(b->admits, admits);
    CHECK_EQ(b->hits, hits);
}

/*
 * The simulation behind tierfs profile's tinylfu curve and the cache's
 * index, driven with one access sequence, decide every access alike:
 * filling, rejecting newcomers colder than the victim, admitting them at
 * the margin, and again after the sketch has halved its counters (which
 * exact counters, as the simulation had before, do not model: it would
 * then admit at 5 accesses where the cache admits at 3).  The index
 * samples its victim where the simulation takes the LRU one; the
 * sequence makes every possible victim equally frequent (residents all
 * asked for alike, newcomers few and recent), so the decisions must
 * agree whichever it samples.
 */
TEST(sim_admits_as_the_index)
{
    char ixpath[64];
    char lock[80];
    struct both b;
    uint64_t hot;
    uint64_t ops;

    snprintf(ixpath, sizeof(ixpath), "/tmp/tfs-prof-ix-%d", (int)getpid());
    both_open(&b, ixpath);
    for (uint64_t key = 1; key <= SIM_N; key++)
        for (int k = 0; k < 3; k++)
            both_access(&b, key);
    CHECK_EQ(b.admits, SIM_N);
    CHECK_EQ(b.hits, 2 * SIM_N);
    for (uint64_t key = 1; key <= SIM_N; key++)
        CHECK_EQ(tfs_tinylfu_count(&b.mirror, sim_id(key)), 3);
    both_newcomers(&b, 1001, 3);
    CHECK(b.rejects > 0 && b.admits > SIM_N);
    /* Ask for the newcomer admitted last (resident on both sides, and
     * the most recent) until the sketch halves: the residents' 3
     * become 1. */
    hot = b.last_admitted;
    do {
        ops = b.mirror_ops;
        both_access(&b, hot);
    } while (b.mirror_ops > ops);
    for (uint64_t key = 1; key <= SIM_N; key++)
        CHECK_EQ(tfs_tinylfu_count(&b.mirror, sim_id(key)), 1);
    both_newcomers(&b, 2001, 1);
    both_close(&b);
    unlink(ixpath);
    snprintf(lock, sizeof(lock), "%s.lock", ixpath);
    unlink(lock);
}

/*
 * Admission tests the first victim only, as the index does: a newcomer
 * that needs two victims and beats the first evicts the second too,
 * however often that one was asked for.
 */
TEST(sim_tests_first_victim_only)
{
    struct cli_profile_sim *s;
    bool admitted;

    CHECK_OK(cli_profile_sim_create(&s, 2 * SIM_B, 16));
    CHECK(!cli_profile_sim_access(s, sim_id(1), SIM_B, &admitted));
    CHECK(admitted);                    /* cold 1: the LRU end */
    for (int k = 0; k < 9; k++)
        cli_profile_sim_access(s, sim_id(2), SIM_B, &admitted);
    /* 3 (two blocks' worth) needs 1 + margin accesses to beat block 1. */
    for (unsigned k = 1; k < 1 + TFS_TINYLFU_MARGIN; k++) {
        CHECK(!cli_profile_sim_access(s, sim_id(3), 2 * SIM_B,
                                      &admitted));
        CHECK(!admitted);
    }
    CHECK(!cli_profile_sim_access(s, sim_id(3), 2 * SIM_B, &admitted));
    CHECK(admitted);
    CHECK(cli_profile_sim_access(s, sim_id(3), 2 * SIM_B, &admitted));
    /* 2, asked for 9 times, went with 1 untested. */
    CHECK(!cli_profile_sim_access(s, sim_id(2), SIM_B, &admitted));
    cli_profile_sim_destroy(s);
}

TESTS(T(sequential_is_one), T(loop_knee_at_working_set),
      T(uniform_random_rereads), T(sim_admits_as_the_index),
      T(sim_tests_first_victim_only));
TEST_MAIN()
