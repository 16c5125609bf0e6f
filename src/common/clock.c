/* SPDX-License-Identifier: MIT */
/*
 * Clocks, sleeping, timed condition waits and the per-thread request
 * deadline (util.h).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "common/util.h"

static _Thread_local uint64_t clock_deadline_ns;
static _Thread_local struct tfs_hook clock_waiting;  /* tfs_waiting */

uint64_t tfs_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t tfs_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void tfs_sleep_ns(uint64_t ns)
{
    struct timespec ts;

    tfs_waiting();
    ts.tv_sec = (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

struct timespec tfs_abstime(clockid_t clk, uint64_t ns)
{
    struct timespec ts;
    uint64_t t;

    clock_gettime(clk, &ts);
    t = (uint64_t)ts.tv_nsec + ns % 1000000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u + t / 1000000000u);
    ts.tv_nsec = (long)(t % 1000000000u);
    return ts;
}

int tfs_cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t a;
    int rc;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
    return -rc;
}

void tfs_cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ms)
{
    struct timespec ts = tfs_abstime(CLOCK_MONOTONIC, ms * 1000000u);

    pthread_cond_timedwait(c, m, &ts);
}

uint64_t tfs_deadline_get(void)
{
    return clock_deadline_ns;
}

uint64_t tfs_deadline_set(uint64_t abs_ns)
{
    uint64_t prev = clock_deadline_ns;

    clock_deadline_ns = abs_ns;
    return prev;
}

struct tfs_hook tfs_waiting_set(struct tfs_hook h)
{
    struct tfs_hook prev = clock_waiting;

    clock_waiting = h;
    return prev;
}

void tfs_waiting(void)
{
    struct tfs_hook h = clock_waiting;

    if (h.fn != NULL) {
        clock_waiting = (struct tfs_hook){NULL, NULL};
        h.fn(h.arg);
    }
}

uint64_t tfs_deadline_left_ms(uint64_t dflt_ms)
{
    uint64_t now;
    uint64_t left_ms;

    if (clock_deadline_ns == 0)
        return dflt_ms;
    now = tfs_now_ns();
    if (now >= clock_deadline_ns)
        return 0;
    left_ms = (clock_deadline_ns - now + 999999) / 1000000;
    if (dflt_ms > 0 && left_ms > dflt_ms)
        left_ms = dflt_ms;
    return left_ms;
}
