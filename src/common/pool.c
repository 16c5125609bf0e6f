/* SPDX-License-Identifier: MIT */
/*
 * Worker pools and the shared bandwidth cap (pool.h).
 */
#include <errno.h>
#include <stdbool.h>

#include "common/pool.h"
#include "common/util.h"

struct tfs_pool {
    pthread_mutex_t       lock;
    pthread_cond_t        work;         /* a task was queued, or stopping */
    pthread_cond_t        idle;         /* queue empty and nothing runs */
    struct tfs_pool_task *head;         /* protected by lock */
    struct tfs_pool_task *tail;         /* protected by lock */
    unsigned              queued;       /* protected by lock */
    unsigned              running;      /* protected by lock */
    bool                  stopping;     /* protected by lock */
    unsigned              n_threads;
    pthread_t            *threads;
};

static void *pool_worker(void *arg)
{
    struct tfs_pool *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        struct tfs_pool_task *t = p->head;

        if (t == NULL && p->stopping)
            break;
        if (t == NULL) {
            pthread_cond_wait(&p->work, &p->lock);
            continue;
        }
        p->head = t->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        t->fn(t);
        pthread_mutex_lock(&p->lock);
        p->running--;
        if (p->queued == 0 && p->running == 0)
            pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int tfs_pool_create(struct tfs_pool **out, unsigned threads)
{
    struct tfs_pool *p = tfs_calloc(1, sizeof(*p));

    if (p == NULL)
        return -ENOMEM;
    p->threads = tfs_calloc(TFS_MAX(threads, 1u), sizeof(pthread_t));
    if (p->threads == NULL) {
        tfs_free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (p->n_threads = 0; p->n_threads < TFS_MAX(threads, 1u);
         p->n_threads++) {
        if (pthread_create(&p->threads[p->n_threads], NULL, pool_worker,
                           p) != 0) {
            tfs_pool_destroy(p);
            return -EAGAIN;
        }
    }
    *out = p;
    return 0;
}

int tfs_pool_submit(struct tfs_pool *p, struct tfs_pool_task *task)
{
    pthread_mutex_lock(&p->lock);
    if (p->stopping) {
        pthread_mutex_unlock(&p->lock);
        return -ESHUTDOWN;
    }
    task->next = NULL;
    if (p->tail != NULL)
        p->tail->next = task;
    else
        p->head = task;
    p->tail = task;
    p->queued++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void tfs_pool_drain(struct tfs_pool *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->queued > 0 || p->running > 0)
        pthread_cond_wait(&p->idle, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

unsigned tfs_pool_pending(struct tfs_pool *p)
{
    unsigned n;

    pthread_mutex_lock(&p->lock);
    n = p->queued + p->running;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void tfs_pool_destroy(struct tfs_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    tfs_free(p->threads);
    tfs_free(p);
}

void tfs_ratelimit_init(struct tfs_ratelimit *rl, uint64_t bytes_per_s)
{
    pthread_mutex_init(&rl->lock, NULL);
    rl->bytes_per_s = bytes_per_s;
    rl->next_ns = 0;
}

void tfs_ratelimit_cleanup(struct tfs_ratelimit *rl)
{
    pthread_mutex_destroy(&rl->lock);
}

void tfs_ratelimit_take(struct tfs_ratelimit *rl, uint64_t bytes)
{
    uint64_t now = tfs_now_ns();
    uint64_t burst;
    uint64_t wait = 0;

    if (rl->bytes_per_s == 0 || bytes == 0)
        return;
    burst = 100000000u;                 /* 100 ms of credit */
    pthread_mutex_lock(&rl->lock);
    if (rl->next_ns + burst < now)
        rl->next_ns = now - burst;
    rl->next_ns += (uint64_t)((double)bytes * 1e9 /
                              (double)rl->bytes_per_s);
    if (rl->next_ns > now)
        wait = rl->next_ns - now;
    pthread_mutex_unlock(&rl->lock);
    if (wait > 0)
        tfs_sleep_ns(wait);
}
