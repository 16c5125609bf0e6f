/* SPDX-License-Identifier: MIT */
/*
 * The s3 store's balancer over several endpoints (src/store/s3_balance.c),
 * as pure logic on times the test passes: least outstanding picks and
 * their round robin, ejection on a failure, the doubling back-off and its
 * cap, health checks and recovery, every endpoint down, the metrics rows.
 * Then the health thread itself, on real time, with a probe function
 * that answers as the test says (the real one is tests/integ/
 * s3_gateways.sh's, against two RGW gateways).  Last, the endpoint list
 * as the store parses it (an open sends nothing): the identity rule and
 * the one-line errors.
 */
#include <pthread.h>

#include "test.h"
#include "store/s3_int.h"

#define MS 1000000ull                   /* ns */
#define T0 (1000 * MS)                  /* the tests' clock starts here */

static struct s3_bal bal;

static void bal_open(unsigned n)
{
    CHECK_OK(tfs_s3_bal_init(&bal, n));
}

static void bal_close(void)
{
    tfs_s3_bal_cleanup(&bal);
}

/* End the request on i picked at t0, at now. */
static void done(unsigned i, bool failed, uint64_t t0, uint64_t now)
{
    struct s3_ep_result r = {.failed = failed, .t0_ns = t0,
                             .bytes_in = 100, .bytes_out = 10};

    tfs_s3_bal_done(&bal, i, &r, now);
}

/* Pick and end at once: which endpoint took it. */
static unsigned one(bool failed, uint64_t now)
{
    unsigned i = tfs_s3_bal_pick(&bal, now);

    done(i, failed, now, now);
    return i;
}

/* Requests until one lands on bad, which fails; the others succeed. */
static void fail_on(unsigned bad, uint64_t now)
{
    unsigned i;

    do {
        i = tfs_s3_bal_pick(&bal, now);
        done(i, i == bad, now, now);
    } while (i != bad);
}

static struct tfs_s3_ep_metrics row(unsigned i, uint64_t now)
{
    struct tfs_s3_ep_metrics m;

    tfs_s3_bal_metrics(&bal, i, now, &m);
    return m;
}

TEST(least_outstanding)
{
    unsigned a;
    unsigned b;
    unsigned c;

    bal_open(3);
    a = tfs_s3_bal_pick(&bal, T0);      /* all idle: in turn */
    b = tfs_s3_bal_pick(&bal, T0);
    c = tfs_s3_bal_pick(&bal, T0);
    CHECK(a != b && b != c && a != c);
    CHECK_EQ(row(a, T0).outstanding, 1);
    done(b, false, T0, T0 + MS);        /* b is the only idle one */
    CHECK_EQ(tfs_s3_bal_pick(&bal, T0), b);   /* 1 1 1 */
    CHECK_EQ(tfs_s3_bal_pick(&bal, T0), c);   /* ties in turn: 1 1 2 */
    CHECK_EQ(tfs_s3_bal_pick(&bal, T0), a);   /* 2 1 2 */
    done(c, false, T0, T0);
    done(c, false, T0, T0);                   /* 2 1 0 */
    CHECK_EQ(tfs_s3_bal_pick(&bal, T0), c);   /* the fewest: 2 1 1 */
    CHECK_EQ(tfs_s3_bal_pick(&bal, T0), b);   /* b and c tie, b's turn */
    CHECK_EQ(row(a, T0).outstanding, 2);
    CHECK_EQ(row(b, T0).outstanding, 2);
    CHECK_EQ(row(c, T0).outstanding, 1);
    CHECK_EQ(row(a, T0).requests, 2);
    CHECK_EQ(row(b, T0).requests, 3);
    CHECK_EQ(row(c, T0).requests, 3);
    CHECK_EQ(row(b, T0).bytes_in, 100);
    CHECK_EQ(row(b, T0).bytes_out, 10);
    CHECK_EQ(row(b, T0).latency->count, 1);
    bal_close();
}

/* One request at a time (a lone reader) still uses every endpoint. */
TEST(round_robin)
{
    unsigned count[4] = {0};

    bal_open(4);
    for (int i = 0; i < 400; i++)
        count[one(false, T0 + (uint64_t)i * MS)]++;
    for (int i = 0; i < 4; i++)
        CHECK_EQ(count[i], 100);
    bal_close();
}

/* A failure ejects: the next request (the retry) goes to another. */
TEST(eject_and_retry_elsewhere)
{
    unsigned bad;
    unsigned n_bad = 0;

    bal_open(3);
    bad = one(true, T0);
    CHECK_EQ(row(bad, T0).up, 0);
    CHECK_EQ(row(bad, T0).ejections, 1);
    CHECK_EQ(row(bad, T0).errors, 1);
    CHECK(one(false, T0) != bad);
    for (int i = 0; i < 100; i++)
        n_bad += one(false, T0 + (uint64_t)i * MS) == bad;
    CHECK_EQ(n_bad, 0);                 /* skipped for the back-off */
    bal_close();
}

/* The requests in flight when a gateway dies fail one after another: one
   ejection, one back-off, not one doubling each. */
TEST(in_flight_failures)
{
    unsigned got[8];
    unsigned a;
    unsigned due;
    uint64_t wait;

    bal_open(2);
    for (int i = 0; i < 8; i++)
        got[i] = tfs_s3_bal_pick(&bal, T0);
    a = got[0];
    for (int i = 0; i < 8; i++) {
        if (got[i] == a)
            done(a, true, T0, T0 + (uint64_t)(i + 1) * MS);
    }
    CHECK_EQ(row(a, T0).ejections, 1);
    CHECK_EQ(row(a, T0).errors, 4);
    CHECK(!tfs_s3_bal_probe_due(&bal, T0 + 500 * MS, &due, &wait));
    CHECK_EQ(wait, 501 * MS);           /* 1 s after the first failure */
    CHECK(tfs_s3_bal_probe_due(&bal, T0 + 1001 * MS, &due, &wait));
    CHECK_EQ(due, a);
    bal_close();
}

/* Health checks that fail double the back-off, 1 s up to 30 s. */
TEST(backoff_doubles)
{
    static const uint64_t want_ms[] = {1000, 2000, 4000, 8000, 16000,
                                       30000, 30000};
    uint64_t now = T0;
    uint64_t wait;
    unsigned bad;
    unsigned i;

    bal_open(2);
    bad = one(true, now);
    for (size_t k = 0; k < TFS_ARRAY_LEN(want_ms); k++) {
        CHECK(!tfs_s3_bal_probe_due(&bal, now, &i, &wait));
        CHECK_EQ(wait, want_ms[k] * MS);
        now += wait - 1;
        CHECK(!tfs_s3_bal_probe_due(&bal, now, &i, &wait));
        now += 1;
        CHECK(tfs_s3_bal_probe_due(&bal, now, &i, &wait));
        CHECK_EQ(i, bad);
        /* one check at a time: none due while it is out */
        CHECK(!tfs_s3_bal_probe_due(&bal, now + 60000 * MS, &i, &wait));
        CHECK_EQ(wait, UINT64_MAX);
        CHECK_EQ(one(false, now), 1 - bad);     /* still down */
        tfs_s3_bal_probed(&bal, bad, false, now);
    }
    CHECK_EQ(row(bad, now).probes, TFS_ARRAY_LEN(want_ms));
    CHECK_EQ(row(bad, now).ejections, 1);
    bal_close();
}

/* A check that answers brings it back; a flapping endpoint's next back-off
   goes on doubling, a quiet one's starts again at 1 s. */
TEST(recovery)
{
    uint64_t now = T0;
    uint64_t wait;
    unsigned bad;
    unsigned i;
    unsigned n_bad = 0;

    bal_open(2);
    bad = one(true, now);
    now += 1000 * MS;
    CHECK(tfs_s3_bal_probe_due(&bal, now, &i, &wait));
    tfs_s3_bal_probed(&bal, i, true, now);
    CHECK_EQ(row(bad, now).up, 1);
    CHECK(row(bad, now).down_seconds > 0.999 &&
          row(bad, now).down_seconds < 1.001);
    for (int k = 0; k < 10; k++)
        n_bad += one(false, now) == bad;
    CHECK_EQ(n_bad, 5);                 /* its share again */
    CHECK(!tfs_s3_bal_probe_due(&bal, now, &i, &wait));
    CHECK_EQ(wait, UINT64_MAX);         /* none down: nothing to check */
    /* fails again 5 s later: flapping, 2 s */
    now += 5000 * MS;
    fail_on(bad, now);
    CHECK(!tfs_s3_bal_probe_due(&bal, now, &i, &wait));
    CHECK_EQ(wait, 2000 * MS);
    now += wait;
    CHECK(tfs_s3_bal_probe_due(&bal, now, &i, &wait));
    tfs_s3_bal_probed(&bal, i, true, now);
    /* fails again after a minute up: 1 s again */
    now += 60000 * MS;
    fail_on(bad, now);
    CHECK(!tfs_s3_bal_probe_due(&bal, now, &i, &wait));
    CHECK_EQ(wait, 1000 * MS);
    CHECK_EQ(row(bad, now).ejections, 3);
    bal_close();
}

/* Every endpoint down: requests still go out, to the one back first, and
   one that succeeds there brings it back. */
TEST(all_down)
{
    uint64_t now = T0;
    unsigned a;
    unsigned b;
    unsigned i;
    uint64_t wait;

    bal_open(2);
    a = one(true, now);
    now += 100 * MS;
    b = one(true, now);
    CHECK(a != b);
    CHECK_EQ(row(a, now).up + row(b, now).up, 0);
    for (int k = 0; k < 5; k++)
        CHECK_EQ(one(true, now), a);    /* a's back-off ends first */
    CHECK_EQ(row(a, now).ejections, 1); /* not doubled before it ended */
    now += 950 * MS;                    /* past a's back-off, not b's */
    CHECK_EQ(one(true, now), a);        /* failed again: a doubles (2 s) */
    CHECK_EQ(one(true, now), b);        /* now b is back first */
    i = tfs_s3_bal_pick(&bal, now);
    CHECK_EQ(i, b);
    done(i, false, now, now + MS);      /* answered: b is up */
    CHECK_EQ(row(b, now).up, 1);
    CHECK_EQ(one(false, now), b);
    CHECK_EQ(one(false, now), b);
    CHECK(tfs_s3_bal_probe_due(&bal, now + 2000 * MS, &i, &wait));
    CHECK_EQ(i, a);
    bal_close();
}

/* A request in flight since before the ejection that then succeeds does
   not bring the endpoint back (it says nothing of now). */
TEST(old_success_no_revival)
{
    unsigned a;
    unsigned a2;

    bal_open(2);
    a = tfs_s3_bal_pick(&bal, T0);
    (void)tfs_s3_bal_pick(&bal, T0);
    a2 = tfs_s3_bal_pick(&bal, T0);
    CHECK_EQ(a2, a);
    done(a, true, T0, T0 + 10 * MS);
    done(a, false, T0, T0 + 20 * MS);
    CHECK_EQ(row(a, T0 + 20 * MS).up, 0);
    bal_close();
}

/* ---- the health thread, on real time ---- */

static atomic_bool probe_answers;
static atomic_uint probe_calls;

static bool test_probe(void *arg, unsigned i)
{
    (void)arg;
    (void)i;
    atomic_fetch_add(&probe_calls, 1);
    return atomic_load(&probe_answers);
}

/* Up within about a second of it answering again. */
TEST(health_thread)
{
    uint64_t t0;
    unsigned bad;

    bal_open(2);
    bal.base_ms = 20;
    bal.max_ms = 80;
    CHECK_OK(tfs_s3_bal_start(&bal, test_probe, NULL));
    bad = one(true, tfs_now_ns());
    tfs_sleep_ns(300 * MS);             /* 20 + 40 + 80 + 80 ms of checks */
    CHECK(atomic_load(&probe_calls) >= 3);
    CHECK(atomic_load(&probe_calls) <= 6);
    CHECK_EQ(row(bad, tfs_now_ns()).up, 0);
    atomic_store(&probe_answers, true);
    t0 = tfs_now_ns();
    while (row(bad, tfs_now_ns()).up == 0 && tfs_now_ns() - t0 < 2000 * MS)
        tfs_sleep_ns(MS);
    CHECK_EQ(row(bad, tfs_now_ns()).up, 1);
    CHECK(tfs_now_ns() - t0 < 200 * MS);    /* within the 80 ms cap */
    tfs_s3_bal_stop(&bal);
    tfs_s3_bal_stop(&bal);              /* twice is harmless */
    bal_close();
}

/* Stopped while it sleeps with nothing down: no wait for a timeout. */
TEST(health_thread_stops)
{
    uint64_t t0;

    bal_open(3);
    CHECK_OK(tfs_s3_bal_start(&bal, test_probe, NULL));
    tfs_sleep_ns(10 * MS);
    t0 = tfs_now_ns();
    tfs_s3_bal_stop(&bal);
    CHECK(tfs_now_ns() - t0 < 100 * MS);
    bal_close();
}

/* ---- the endpoint list of a store ---- */

/* The identity of s3://bucket/pre with endpoint list eps, into out. */
static void ident_of(const char *eps, char *out, size_t size)
{
    struct tfs_store *st = NULL;
    char opts[4096];

    snprintf(opts, sizeof(opts), "anonymous=1&endpoint=%s", eps);
    CHECK_OK(tfs_store_open(&st, "s3://tier-bucket/pre", opts));
    snprintf(out, size, "%s", tfs_store_identity(st));
    tfs_store_close(st);
}

TEST(identity)
{
    char one[256];
    char ab[512];
    char ba[512];

    /* one endpoint: as before gateways (the disk caches keyed by it) */
    ident_of("http://127.0.0.1:7480", one, sizeof(one));
    CHECK_STR(one, "s3://http://127.0.0.1:7480/tier-bucket/pre/");
    ident_of("HTTP://GW-B:7480/,http://gw-a:7480", ab, sizeof(ab));
    ident_of(" http://gw-a:7480 , http://Gw-B:7480", ba, sizeof(ba));
    CHECK_STR(ab, ba);
    CHECK_STR(ab, "s3://http://gw-a:7480,http://gw-b:7480/tier-bucket/pre/");
}

/* Open with endpoint list eps: the error, and its detail in detail. */
static int open_err(const char *eps, char *detail, size_t size)
{
    struct tfs_store *st = NULL;
    char opts[8192];
    int rc;

    snprintf(opts, sizeof(opts), "anonymous=1&endpoint=%s", eps);
    rc = tfs_store_open(&st, "s3://tier-bucket", opts);
    snprintf(detail, size, "%s", tfs_errdetail());
    if (rc == 0)
        tfs_store_close(st);
    return rc;
}

TEST(list_errors)
{
    char d[1024];
    char many[8192] = "";

    CHECK_RC(open_err("http://a:1,ftp://b:2", d, sizeof(d)), TFS_EOPTION);
    CHECK(strstr(d, "'ftp://b:2'") != NULL && strchr(d, '\n') == NULL);
    CHECK_RC(open_err("http://a:1,https://b:2", d, sizeof(d)), TFS_EOPTION);
    CHECK(strstr(d, "mix http and https") != NULL);
    CHECK_RC(open_err("http://a:1,http://A:1/", d, sizeof(d)), TFS_EOPTION);
    CHECK(strstr(d, "listed twice") != NULL);
    CHECK_RC(open_err("http://a:1,,http://b:1", d, sizeof(d)), TFS_EOPTION);
    CHECK(strstr(d, "empty S3 endpoint") != NULL);
    CHECK_RC(open_err("http://a:1,http://u:p@b:1", d, sizeof(d)),
             TFS_EOPTION);
    CHECK(strstr(d, "u:p") == NULL);    /* masked */
    for (int i = 0; i < 64; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many),
                 "%shttp://10.0.0.%d:7480", i ? "," : "", i);
    CHECK_OK(open_err(many, d, sizeof(d)));
    snprintf(many + strlen(many), sizeof(many) - strlen(many),
             ",http://10.0.1.1:7480");
    CHECK_RC(open_err(many, d, sizeof(d)), TFS_EOPTION);
    CHECK(strstr(d, "at most 64") != NULL);
}

TESTS(T(least_outstanding), T(round_robin), T(eject_and_retry_elsewhere),
      T(in_flight_failures), T(backoff_doubles), T(recovery), T(all_down),
      T(old_success_no_revival), T(health_thread), T(health_thread_stops),
      T(identity), T(list_errors));
TEST_MAIN()
