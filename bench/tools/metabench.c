/* SPDX-License-Identifier: MIT */
/*
 * The helpers of bench/meta-million (docs/performance-meta.md):
 *
 *   metabench put URI N PREFIXES THREADS [START]
 *       objects START..N-1 of 16 bytes, key pNNN/oNNNNNNN (object i in
 *       prefix i % PREFIXES), PUT by THREADS threads through the tierfs
 *       store layer (one store handle; its connection pool); prints the
 *       rate.
 *   metabench stat LIST THREADS
 *       stat(2) every path of the file LIST (one a line) with THREADS
 *       threads, each taking the next 256 paths; prints stats/s and the
 *       failures (a failure makes the exit status 1).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tierfs/err.h"
#include "tierfs/store.h"

#define MB_BATCH 256u

static double mb_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct mb_put {
    struct tfs_store *st;
    unsigned long     n;
    unsigned long     prefixes;
    atomic_ulong      next;
    atomic_ulong      failed;
};

static void *mb_put_main(void *arg)
{
    struct mb_put *p = arg;
    char key[64];
    char body[32];
    unsigned long i;

    while ((i = atomic_fetch_add(&p->next, 1)) < p->n) {
        snprintf(key, sizeof(key), "p%03lu/o%07lu", i % p->prefixes, i);
        snprintf(body, sizeof(body), "%015lu\n", i);
        for (int t = 0; t < 5; t++) {
            int rc = tfs_store_put(p->st, key, body, 16, NULL);
            if (rc == 0)
                break;
            if (t == 4) {
                fprintf(stderr, "put %s: %s\n", key, tfs_strerror(rc));
                atomic_fetch_add(&p->failed, 1);
            }
        }
    }
    return NULL;
}

static int mb_put_run(int argc, char **argv)
{
    struct mb_put p = {.n = 0};
    pthread_t tids[256];
    unsigned long threads;
    unsigned long start;
    double t0;
    double dt;
    int rc;

    if (argc != 6 && argc != 7)
        return 2;
    p.n = strtoul(argv[3], NULL, 10);
    p.prefixes = strtoul(argv[4], NULL, 10);
    threads = strtoul(argv[5], NULL, 10);
    start = argc == 7 ? strtoul(argv[6], NULL, 10) : 0;
    atomic_init(&p.next, start);
    if (threads == 0 || threads > 256 || p.prefixes == 0)
        return 2;
    rc = tfs_store_open(&p.st, argv[2], NULL);
    if (rc < 0) {
        fprintf(stderr, "open %s: %s (%s)\n", argv[2], tfs_strerror(rc),
                tfs_errdetail());
        return 1;
    }
    t0 = mb_now();
    for (unsigned long i = 0; i < threads; i++)
        pthread_create(&tids[i], NULL, mb_put_main, &p);
    for (unsigned long i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    dt = mb_now() - t0;
    printf("put %lu objects in %.1f s (%.0f/s), %lu failed\n",
           p.n - start, dt, (double)(p.n - start) / dt,
           (unsigned long)atomic_load(&p.failed));
    tfs_store_close(p.st);
    return atomic_load(&p.failed) ? 1 : 0;
}

struct mb_stat {
    char        **paths;
    size_t        n;
    atomic_size_t next;
    atomic_size_t failed;
};

static void *mb_stat_main(void *arg)
{
    struct mb_stat *s = arg;
    struct stat sb;
    size_t i;

    while ((i = atomic_fetch_add(&s->next, MB_BATCH)) < s->n) {
        size_t end = i + MB_BATCH < s->n ? i + MB_BATCH : s->n;
        for (; i < end; i++) {
            if (stat(s->paths[i], &sb) != 0)
                atomic_fetch_add(&s->failed, 1);
        }
    }
    return NULL;
}

static int mb_stat_run(int argc, char **argv)
{
    struct mb_stat s = {.n = 0};
    pthread_t tids[256];
    unsigned long threads;
    size_t cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    FILE *f;
    double t0;
    double dt;

    if (argc != 4)
        return 2;
    threads = strtoul(argv[3], NULL, 10);
    f = fopen(argv[2], "r");
    if (f == NULL || threads == 0 || threads > 256)
        return 2;
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (s.n == cap) {
            cap = cap ? cap * 2 : 1024;
            s.paths = realloc(s.paths, cap * sizeof(*s.paths));
            if (s.paths == NULL)
                return 1;
        }
        line[len - 1] = line[len - 1] == '\n' ? '\0' : line[len - 1];
        s.paths[s.n++] = strdup(line);
    }
    fclose(f);
    free(line);
    t0 = mb_now();
    for (unsigned long i = 0; i < threads; i++)
        pthread_create(&tids[i], NULL, mb_stat_main, &s);
    for (unsigned long i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    dt = mb_now() - t0;
    printf("%zu stats in %.3f s: %.0f/s, %zu failed\n", s.n, dt,
           (double)s.n / dt, (size_t)atomic_load(&s.failed));
    for (size_t i = 0; i < s.n; i++)
        free(s.paths[i]);
    free(s.paths);
    return atomic_load(&s.failed) ? 1 : 0;
}

int main(int argc, char **argv)
{
    int rc = 2;

    if (argc > 1 && strcmp(argv[1], "put") == 0)
        rc = mb_put_run(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "stat") == 0)
        rc = mb_stat_run(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: metabench put URI N PREFIXES THREADS "
                        "[START]\n"
                        "       metabench stat LIST THREADS\n");
    return rc;
}
