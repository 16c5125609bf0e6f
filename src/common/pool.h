/* SPDX-License-Identifier: MIT */
/*
 * A FIFO pool of worker threads for one class of background work
 * (uploads, checkpoint writes), in the manner of Redis's bio.c: one pool
 * per class, first in first out within it, so one class cannot starve
 * another.  Tasks are embedded in the caller's structures (container_of),
 * so submitting costs no allocation.  Internal (not installed).
 *
 * Thread safety: every function may be called from any thread, except
 * tfs_pool_destroy (once, after the last submit).
 */
#ifndef TFS_COMMON_POOL_H
#define TFS_COMMON_POOL_H

#include <stdint.h>
#include <pthread.h>

struct tfs_pool;
struct tfs_pool_task;

/* Runs on a worker thread, once per successful submit. */
typedef void tfs_pool_fn(struct tfs_pool_task *task);

struct tfs_pool_task {
    struct tfs_pool_task *next;         /* owned by the pool while queued */
    tfs_pool_fn          *fn;
};

/* Start threads workers.  -ENOMEM, -EAGAIN. */
int tfs_pool_create(struct tfs_pool **out, unsigned threads);

/*
 * Queue task (its fn set by the caller; the task must stay valid until
 * fn has run).  -ESHUTDOWN once the pool is stopping: fn never runs.
 */
int tfs_pool_submit(struct tfs_pool *p, struct tfs_pool_task *task);

/* Wait until the queue is empty and no task is running. */
void tfs_pool_drain(struct tfs_pool *p);

/* Tasks queued or running. */
unsigned tfs_pool_pending(struct tfs_pool *p);

/*
 * Stop accepting, run what is queued, join the workers, free.  NULL is a
 * no-op.
 */
void tfs_pool_destroy(struct tfs_pool *p);

/*
 * A bandwidth cap shared by threads: tfs_ratelimit_take(rl, n) sleeps
 * until n more bytes fit under bytes_per_s (0 = no cap).  A token bucket
 * with a burst of 100 ms worth of bytes.
 */
struct tfs_ratelimit {
    pthread_mutex_t lock;
    uint64_t        bytes_per_s;        /* 0: unlimited */
    uint64_t        next_ns;            /* lock: when the link is free */
};

void tfs_ratelimit_init(struct tfs_ratelimit *rl, uint64_t bytes_per_s);
void tfs_ratelimit_cleanup(struct tfs_ratelimit *rl);
void tfs_ratelimit_take(struct tfs_ratelimit *rl, uint64_t bytes);

#endif /* TFS_COMMON_POOL_H */
