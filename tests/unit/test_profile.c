/* SPDX-License-Identifier: MIT */
/*
 * `tierfs profile` (src/cli/profile.c, linked from the CLI's tfs_profile
 * library): the profile gives known answers on synthetic traces (pure
 * sequential reads; a loop over W bytes, whose miss-ratio curve has its
 * knee at W; uniform random reads, whose re-read fraction is what was
 * constructed).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tierfs/trace.h"
#include "cli/profile.h"
#include "common/util.h"

static char path[64];

static const char *tmp_trace(void)
{
    int fd;

    snprintf(path, sizeof(path), "/tmp/tfs-trace-XXXXXX");
    fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    return path;
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

TESTS(T(sequential_is_one), T(loop_knee_at_working_set),
      T(uniform_random_rereads));
TEST_MAIN()
