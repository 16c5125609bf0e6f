/* SPDX-License-Identifier: MIT */
/*
 * Two real RGW gateways of one Ceph cluster behind one s3 store, and one
 * of them killed -9 while readers stream objects through both
 * (tests/integ/s3_gateways.sh starts the second gateway and runs this).
 *
 * Four reader threads read 256 KiB ranges of eight 2 MiB objects through
 * retry+s3://, each checked byte for byte.  After 2 s (both gateways
 * have taken requests: the per-endpoint metrics say how many) the second
 * gateway is killed with SIGKILL.  The readers must see no error and no
 * wrong byte; the dead gateway must take its last request and have none
 * outstanding within 2 s (both figures printed); the health checks keep
 * failing while it is dead.  Then the gateway is started again and must
 * be taken back (up, and taking requests) by the health check.
 *
 * Needs the AWS_* variables with AWS_ENDPOINT_URL listing both gateways,
 * TFS_TEST_S3_BUCKET, TFS_TEST_RGW2_URL and TFS_TEST_RGW2_PID (the second
 * gateway, killed by that pid), TFS_TEST_RGW2_RESTART (the command that
 * starts it again).  Keys live under "gw-PID-RAND/", removed at the end.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "store/s3_int.h"
#include "tierfs/retry.h"

#define GW_OBJECTS   8
#define GW_OBJ_LEN   (2u << 20)
#define GW_READ_LEN  (256u << 10)
#define GW_READERS   4
#define GW_MS        1000000ull
#define GW_BEFORE_MS 2000               /* reading before the kill */
#define GW_AFTER_MS  4000               /* watched after the kill */
#define GW_TAKE_MS   2000               /* the target: survivor takes all */

static char gw_uri[256];
static unsigned char *gw_data[GW_OBJECTS];

struct gw_reader {
    struct tfs_store *st;
    atomic_bool      *stop;
    unsigned          seed;
    uint64_t          reads;
    uint64_t          errors;
    uint64_t          wrong;            /* reads with a wrong byte */
    int               first_rc;
    char              first_detail[256];
};

static void *gw_read_main(void *arg)
{
    struct gw_reader *r = arg;
    unsigned char *buf = malloc(GW_READ_LEN);
    char key[32];

    while (buf != NULL && !atomic_load(r->stop)) {
        unsigned obj = (unsigned)rand_r(&r->seed) % GW_OBJECTS;
        uint64_t off = (uint64_t)((unsigned)rand_r(&r->seed) %
                                  (GW_OBJ_LEN / GW_READ_LEN)) * GW_READ_LEN;
        size_t n = 0;
        int rc;

        snprintf(key, sizeof(key), "obj-%u", obj);
        rc = tfs_store_read(r->st, key, buf, GW_READ_LEN, off, NULL, &n);
        r->reads++;
        if (rc < 0 && r->errors++ == 0) {
            r->first_rc = rc;
            snprintf(r->first_detail, sizeof(r->first_detail), "%s",
                     tfs_errdetail());
        }
        if (rc == 0 && (n != GW_READ_LEN ||
                        memcmp(buf, gw_data[obj] + off, GW_READ_LEN) != 0))
            r->wrong++;
    }
    free(buf);
    return NULL;
}

/* The s3 layer's balancer, and which endpoint is the second gateway. */
static struct s3_bal *gw_bal(struct tfs_store *st, unsigned *dead)
{
    struct s3_priv *p = tfs_store_priv(tfs_store_find(st, "s3"));
    const char *url = getenv("TFS_TEST_RGW2_URL");

    CHECK_EQ(p->bal.n, 2);
    *dead = strcmp(p->bal.ep[1].name, url) == 0 ? 1 : 0;
    CHECK_STR(p->bal.ep[*dead].name, url);
    return &p->bal;
}

static struct tfs_s3_ep_metrics gw_row(struct s3_bal *b, unsigned i)
{
    struct tfs_s3_ep_metrics m;

    tfs_s3_bal_metrics(b, i, tfs_now_ns(), &m);
    return m;
}

static uint64_t gw_last_pick(struct s3_bal *b, unsigned i)
{
    uint64_t t;

    pthread_mutex_lock(&b->lock);
    t = b->ep[i].last_pick_ns;
    pthread_mutex_unlock(&b->lock);
    return t;
}

/* SIGKILL the second gateway, after checking the pid is a radosgw. */
static void gw_kill(void)
{
    const char *s = getenv("TFS_TEST_RGW2_PID");
    char path[64];
    char cmd[256] = "";
    pid_t pid = (pid_t)strtol(s, NULL, 10);
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK(fread(cmd, 1, sizeof(cmd) - 1, f) > 0);
    fclose(f);
    CHECK(strstr(cmd, "radosgw") != NULL);
    CHECK_OK(kill(pid, SIGKILL) < 0 ? -errno : 0);
}

/* What happened to the dead endpoint after the kill at t_kill. */
struct gw_watch {
    bool     picked;                    /* a request went there after it */
    uint64_t last_pick_ms;              /* the last one, after the kill */
    uint64_t drained_ms;                /* none outstanding from here on */
    bool     drained;
};

/* Watch the dead endpoint every millisecond for ms after t_kill. */
static void gw_watch(struct s3_bal *b, unsigned dead, uint64_t t_kill,
                     uint64_t ms, struct gw_watch *w)
{
    uint64_t end = t_kill + ms * GW_MS;

    memset(w, 0, sizeof(*w));
    while (tfs_now_ns() < end) {
        uint64_t now = tfs_now_ns();
        uint64_t pick = gw_last_pick(b, dead);

        if (pick > t_kill) {
            w->picked = true;
            w->last_pick_ms = (pick - t_kill) / GW_MS;
        }
        if (gw_row(b, dead).outstanding == 0 && !w->drained) {
            w->drained = true;
            w->drained_ms = (now - t_kill) / GW_MS;
        } else if (gw_row(b, dead).outstanding > 0) {
            w->drained = false;
        }
        tfs_sleep_ns(GW_MS);
    }
}

static void gw_readers(struct gw_reader *r, pthread_t *tid,
                       struct tfs_store *st, atomic_bool *stop)
{
    for (unsigned i = 0; i < GW_READERS; i++) {
        r[i] = (struct gw_reader){.st = st, .stop = stop, .seed = i + 1};
        CHECK(pthread_create(&tid[i], NULL, gw_read_main, &r[i]) == 0);
    }
}

/* Join the readers; the reads, errors and wrong reads of all. */
static void gw_join(struct gw_reader *r, pthread_t *tid, uint64_t sum[3])
{
    memset(sum, 0, 3 * sizeof(sum[0]));
    for (unsigned i = 0; i < GW_READERS; i++) {
        pthread_join(tid[i], NULL);
        sum[0] += r[i].reads;
        sum[1] += r[i].errors;
        sum[2] += r[i].wrong;
        if (r[i].errors > 0)
            printf("# reader %u: %" PRIu64 " errors, first %s (%s)\n", i,
                   r[i].errors, tfs_strerror(r[i].first_rc),
                   r[i].first_detail);
    }
}

/* Wait up to ms for endpoint i to be up and to have taken requests. */
static uint64_t gw_wait_back(struct s3_bal *b, unsigned i, uint64_t ms)
{
    uint64_t t0 = tfs_now_ns();
    uint64_t req0 = gw_row(b, i).requests;

    while (tfs_now_ns() - t0 < ms * GW_MS &&
           !(gw_row(b, i).up && gw_row(b, i).requests > req0 + 10))
        tfs_sleep_ns(10 * GW_MS);
    return (tfs_now_ns() - t0) / GW_MS;
}

static void gw_put_objects(struct tfs_store *st)
{
    char key[32];

    for (unsigned i = 0; i < GW_OBJECTS; i++) {
        snprintf(key, sizeof(key), "obj-%u", i);
        CHECK_OK(tfs_store_put(st, key, gw_data[i], GW_OBJ_LEN, NULL));
    }
}

TEST(kill_one_gateway)
{
    struct tfs_store *st = NULL;
    struct gw_reader r[GW_READERS];
    pthread_t tid[GW_READERS];
    atomic_bool stop = false;
    struct tfs_s3_ep_metrics before[2];
    struct tfs_s3_ep_metrics after[2];
    struct tfs_retry_stats rs;
    struct gw_watch w;
    struct s3_bal *b;
    unsigned dead;
    uint64_t sum[3];
    uint64_t t_kill;
    uint64_t back_ms;

    CHECK_OK(tfs_store_open(&st, gw_uri, NULL));
    b = gw_bal(st, &dead);
    gw_put_objects(st);
    gw_readers(r, tid, st, &stop);
    tfs_sleep_ns(GW_BEFORE_MS * GW_MS);
    before[0] = gw_row(b, 0);
    before[1] = gw_row(b, 1);
    t_kill = tfs_now_ns();
    gw_kill();
    gw_watch(b, dead, t_kill, GW_AFTER_MS, &w);
    after[0] = gw_row(b, 0);
    after[1] = gw_row(b, 1);
    CHECK_EQ(system(getenv("TFS_TEST_RGW2_RESTART")), 0);
    back_ms = gw_wait_back(b, dead, 20000);
    atomic_store(&stop, true);
    gw_join(r, tid, sum);
    tfs_retry_get_stats(st, &rs);

    printf("# before the kill: %s took %" PRIu64 " requests, %s %" PRIu64
           " (the one killed)\n", b->ep[1 - dead].name,
           before[1 - dead].requests, b->ep[dead].name,
           before[dead].requests);
    if (w.picked)
        printf("# after the kill: last request to the dead gateway at +%"
               PRIu64 " ms", w.last_pick_ms);
    else
        printf("# after the kill: no request to the dead gateway");
    printf(", none outstanding there from +%" PRIu64 " ms: the survivor "
           "takes all from +%" PRIu64 " ms (target %d ms)\n", w.drained_ms,
           TFS_MAX(w.last_pick_ms, w.drained_ms), GW_TAKE_MS);
    printf("# in the %d ms after: survivor %" PRIu64 " requests, dead %"
           PRIu64 " (errors %" PRIu64 ", ejections %" PRIu64 ", probes %"
           PRIu64 ")\n", GW_AFTER_MS,
           after[1 - dead].requests - before[1 - dead].requests,
           after[dead].requests - before[dead].requests, after[dead].errors,
           after[dead].ejections, after[dead].probes);
    printf("# readers: %" PRIu64 " reads, %" PRIu64 " errors, %" PRIu64
           " wrong; retry layer: %" PRIu64 " retries\n", sum[0], sum[1],
           sum[2], rs.retries);
    printf("# restarted: taken back after %" PRIu64 " ms\n", back_ms);

    CHECK(before[0].requests >= 20 && before[1].requests >= 20);
    CHECK_EQ(sum[1], 0);
    CHECK_EQ(sum[2], 0);
    CHECK(w.drained && w.drained_ms <= GW_TAKE_MS);
    CHECK(w.last_pick_ms <= GW_TAKE_MS);
    CHECK(after[1 - dead].requests - before[1 - dead].requests >= 20);
    CHECK_EQ(after[dead].up, 0);
    CHECK(after[dead].ejections >= 1);
    CHECK(after[dead].probes >= 1);
    CHECK(gw_row(b, dead).up);          /* the health check took it back */
    CHECK(gw_row(b, dead).requests > after[dead].requests + 10);
    tfs_store_close(st);
}

static int gw_remove_page(void *arg, const struct tfs_list_page *pg)
{
    for (size_t i = 0; i < pg->n_entries; i++)
        tfs_store_remove(arg, pg->entries[i].key);
    return 0;
}

static void gw_cleanup(void)
{
    struct tfs_store *st = NULL;

    if (tfs_store_open(&st, gw_uri, NULL) < 0)
        return;
    tfs_store_list_all(st, "", NULL, gw_remove_page, st);
    tfs_store_close(st);
}

TESTS(T(kill_one_gateway));

int main(int argc, char **argv)
{
    static const char *const need[] = {
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL",
        "TFS_TEST_S3_BUCKET", "TFS_TEST_RGW2_URL", "TFS_TEST_RGW2_PID",
        "TFS_TEST_RGW2_RESTART",
    };
    int rc;

    for (size_t i = 0; i < TFS_ARRAY_LEN(need); i++) {
        if (getenv(need[i]) == NULL || getenv(need[i])[0] == '\0') {
            fprintf(stderr, "test_s3_gateways: %s is not set: run it with "
                    "tests/integ/s3_gateways.sh\n", need[i]);
            return 1;                   /* a failure, not a skip */
        }
    }
    for (unsigned i = 0; i < GW_OBJECTS; i++)
        gw_data[i] = test_pattern(GW_OBJ_LEN, 100 + i);
    snprintf(gw_uri, sizeof(gw_uri), "retry+s3://%s/gw-%d-%04x",
             getenv("TFS_TEST_S3_BUCKET"), (int)getpid(),
             (unsigned)(tfs_rand_u64() & 0xffff));
    printf("# %s over %s\n", gw_uri, getenv("AWS_ENDPOINT_URL"));
    rc = test_run(test_cases, TFS_ARRAY_LEN(test_cases), argc, argv);
    gw_cleanup();
    for (unsigned i = 0; i < GW_OBJECTS; i++)
        free(gw_data[i]);
    return rc;
}
