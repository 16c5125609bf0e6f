/* SPDX-License-Identifier: MIT */
/* Worker pools and the bandwidth cap. */
#include <stdatomic.h>
#include <unistd.h>

#include "test.h"
#include "common/pool.h"
#include "common/util.h"

struct job {
    struct tfs_pool_task task;
    atomic_int          *count;
    int                  order;
    int                 *log;
    atomic_int          *pos;
};

static void job_run(struct tfs_pool_task *t)
{
    struct job *j = tfs_container_of(t, struct job, task);

    usleep(100);
    j->log[atomic_fetch_add(j->pos, 1)] = j->order;
    atomic_fetch_add(j->count, 1);
}

TEST(runs_everything_once)
{
    struct tfs_pool *p = NULL;
    struct job jobs[500];
    int log[500];
    atomic_int count = 0;
    atomic_int pos = 0;

    CHECK_OK(tfs_pool_create(&p, 4));
    for (int i = 0; i < 500; i++) {
        jobs[i] = (struct job){.task.fn = job_run, .count = &count,
                               .order = i, .log = log, .pos = &pos};
        CHECK_OK(tfs_pool_submit(p, &jobs[i].task));
    }
    tfs_pool_drain(p);
    CHECK_EQ(atomic_load(&count), 500);
    CHECK_EQ(tfs_pool_pending(p), 0);
    tfs_pool_destroy(p);
}

TEST(fifo_with_one_worker)
{
    struct tfs_pool *p = NULL;
    struct job jobs[50];
    int log[50];
    atomic_int count = 0;
    atomic_int pos = 0;

    CHECK_OK(tfs_pool_create(&p, 1));
    for (int i = 0; i < 50; i++) {
        jobs[i] = (struct job){.task.fn = job_run, .count = &count,
                               .order = i, .log = log, .pos = &pos};
        CHECK_OK(tfs_pool_submit(p, &jobs[i].task));
    }
    tfs_pool_destroy(p);                /* runs what is queued */
    CHECK_EQ(atomic_load(&count), 50);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(log[i], i);
}

TEST(ratelimit)
{
    struct tfs_ratelimit rl;
    uint64_t t0;

    tfs_ratelimit_init(&rl, 10u << 20);     /* 10 MiB/s */
    t0 = tfs_now_ns();
    for (int i = 0; i < 30; i++)
        tfs_ratelimit_take(&rl, 100u << 10);   /* 3 MiB in all */
    /* 3 MiB at 10 MiB/s: 0.3 s, less the 0.1 s burst. */
    CHECK(tfs_now_ns() - t0 >= 180000000u);
    tfs_ratelimit_cleanup(&rl);
    tfs_ratelimit_init(&rl, 0);
    t0 = tfs_now_ns();
    tfs_ratelimit_take(&rl, 1u << 30);
    CHECK(tfs_now_ns() - t0 < 10000000u);
    tfs_ratelimit_cleanup(&rl);
}

TESTS(T(runs_everything_once), T(fifo_with_one_worker), T(ratelimit));
TEST_MAIN()
