/* SPDX-License-Identifier: MIT */
/*
 * A minimal test harness.  A test file defines static void functions with
 * TEST(name), lists them in a TESTS(...) table and ends with TEST_MAIN().
 * CHECK macros print file:line, both values and tfs_strerror() on failure
 * and abandon the current test; the binary exits 1 if any test failed.
 * Run one test with: ./test_x name.
 */
#ifndef TFS_TEST_H
#define TFS_TEST_H

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tierfs/err.h"
#include "tierfs/mem.h"
#include "common/util.h"

struct test_case {
    const char *name;
    void (*fn)(void);
};

static jmp_buf test_jmp;
static int test_failed;

#define TEST(name) static void test_##name(void)
#define T(name) {#name, test_##name}

#define TEST_FAIL_(...)                                                    \
    do {                                                                   \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                    \
        fprintf(stderr, __VA_ARGS__);                                      \
        fprintf(stderr, "\n");                                             \
        longjmp(test_jmp, 1);                                              \
    } while (0)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond))                                                       \
            TEST_FAIL_("CHECK(%s) failed", #cond);                         \
    } while (0)

#define CHECK_EQ(a, b)                                                     \
    do {                                                                   \
        long long a_ = (long long)(a);                                     \
        long long b_ = (long long)(b);                                     \
        if (a_ != b_)                                                      \
            TEST_FAIL_("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, a_, b_);  \
    } while (0)

#define CHECK_STR(a, b)                                                    \
    do {                                                                   \
        const char *a_ = (a);                                              \
        const char *b_ = (b);                                              \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)               \
            TEST_FAIL_("CHECK_STR(%s, %s): \"%s\" != \"%s\"", #a, #b,      \
                       a_ ? a_ : "(null)", b_ ? b_ : "(null)");            \
    } while (0)

#define CHECK_RC(expr, want)                                               \
    do {                                                                   \
        int rc_ = (expr);                                                  \
        int want_ = (want);                                                \
        if (rc_ != want_)                                                  \
            TEST_FAIL_("%s = %d (%s) [%s], want %d (%s)", #expr, rc_,      \
                       tfs_strerror(rc_), tfs_errdetail(), want_,          \
                       tfs_strerror(want_));                               \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

#define TESTS(...) static const struct test_case test_cases[] = {__VA_ARGS__}

/* Run one case; 1 when it failed.  Nothing here changes after setjmp. */
static inline int test_run_one(const struct test_case *tc)
{
    if (setjmp(test_jmp) != 0) {
        printf("FAIL - %s\n", tc->name);
        fflush(stdout);
        return 1;
    }
    tc->fn();
    printf("ok - %s\n", tc->name);
    fflush(stdout);
    return 0;
}

static inline int test_run(const struct test_case *test_cases, size_t n,
                           int argc, char **argv)
{
    int ran = 0;

    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], test_cases[i].name) != 0)
            continue;
        ran++;
        test_failed += test_run_one(&test_cases[i]);
    }
    if (ran == 0) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    printf("%d passed, %d failed\n", ran - test_failed, test_failed);
    return test_failed ? 1 : 0;
}

/* ---- fixtures ---- */

/* Fill p with len bytes fixed by seed (xorshift64): data a test can
 * regenerate to compare with what came back. */
static inline void test_fill(unsigned char *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* test_fill() into fresh memory (one byte for len 0); the caller frees. */
static inline unsigned char *test_pattern(size_t len, uint64_t seed)
{
    unsigned char *p = malloc(len ? len : 1);

    CHECK(p != NULL);
    test_fill(p, len, seed);
    return p;
}

static inline int test_rm_one(const char *path, const struct stat *sb,
                              int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* Remove path and everything below it, following no link; 0 or -errno.
 * Only under /tmp/, so a bad argument cannot take anything else. */
static inline int test_rmtree(const char *path)
{
    if (path == NULL || strncmp(path, "/tmp/", 5) != 0 ||
        strstr(path, "/../") != NULL)
        return -EPERM;
    if (nftw(path, test_rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
        return errno == ENOENT ? 0 : -errno;
    return 0;
}

/* A fresh directory /tmp/tierfs-TAG-XXXXXX written into buf (size bytes);
 * fails the test when it cannot be made. */
static inline char *test_tmpdir(char *buf, size_t size, const char *tag)
{
    int n = snprintf(buf, size, "/tmp/tierfs-%s-XXXXXX", tag);

    CHECK(n > 0 && (size_t)n < size);
    CHECK(mkdtemp(buf) != NULL);
    return buf;
}

/* A fresh empty file /tmp/tierfs-TAG-XXXXXX, its name written into buf. */
static inline char *test_tmpfile(char *buf, size_t size, const char *tag)
{
    int n = snprintf(buf, size, "/tmp/tierfs-%s-XXXXXX", tag);
    int fd;

    CHECK(n > 0 && (size_t)n < size);
    fd = mkstemp(buf);
    CHECK(fd >= 0);
    close(fd);
    return buf;
}

/* The run's scratch directory, made by the first test_subdir() call;
 * "" before. */
static inline char *test_base_dir(void)
{
    static char base[64];

    return base;
}

static inline void test_base_cleanup(void)
{
    if (test_base_dir()[0] != '\0')
        test_rmtree(test_base_dir());
}

/* A fresh directory NAME (written into out) under the run's scratch
 * directory /tmp/tierfs-TAG-XXXXXX, which is removed at exit. */
static inline void test_subdir(const char *tag, const char *name, char *out,
                               size_t size)
{
    int n;

    if (test_base_dir()[0] == '\0') {
        test_tmpdir(test_base_dir(), 64, tag);
        atexit(test_base_cleanup);
    }
    n = snprintf(out, size, "%s/%s", test_base_dir(), name);
    CHECK(n > 0 && (size_t)n < size);
    CHECK_OK(mkdir(out, 0755) < 0 ? -errno : 0);
}

/* ---- time ---- */

/* Seconds since t0 (tfs_now_ns()). */
static inline double test_secs_since(uint64_t t0)
{
    return (double)(tfs_now_ns() - t0) / 1e9;
}

/* Sleep until tfs_now_ns() reaches t (at once when it has). */
static inline void test_sleep_until(uint64_t t)
{
    uint64_t now = tfs_now_ns();

    if (t > now)
        tfs_sleep_ns(t - now);
}

/* ---- failing allocations ---- */

/* Allocations left before every one fails; -1: no limit.  Shared by all
 * threads, so work on a worker thread counts too. */
static inline atomic_long *test_alloc_left(void)
{
    static atomic_long left = -1;

    return &left;
}

static inline bool test_alloc_take(void)
{
    long b = atomic_load(test_alloc_left());

    while (b > 0 &&
           !atomic_compare_exchange_weak(test_alloc_left(), &b, b - 1))
        ;
    return b != 0;
}

static inline void *test_failing_malloc(size_t n)
{
    return test_alloc_take() ? malloc(n) : NULL;
}

static inline void *test_failing_realloc(void *p, size_t n)
{
    return test_alloc_take() ? realloc(p, n) : NULL;
}

static inline void *test_failing_calloc(size_t c, size_t n)
{
    return test_alloc_take() ? calloc(c, n) : NULL;
}

/* Route tfs_malloc and friends through the failing allocator (which
 * fails nothing until test_alloc_budget sets a limit). */
static inline int test_alloc_hook(void)
{
    return tfs_replace_allocator(test_failing_malloc, test_failing_realloc,
                                 test_failing_calloc, free);
}

/* The next k allocations succeed and every later one fails; -1: none. */
static inline void test_alloc_budget(long k)
{
    atomic_store(test_alloc_left(), k);
}

#define TEST_MAIN()                                                        \
    int main(int argc, char **argv)                                        \
    {                                                                      \
        return test_run(test_cases,                                        \
                        sizeof(test_cases) / sizeof(test_cases[0]), argc,  \
                        argv);                                             \
    }

#endif /* TFS_TEST_H */
