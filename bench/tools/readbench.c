/* SPDX-License-Identifier: MIT */
/*
 * readbench: read a set of files the way a data loader does and report
 * per-file latency (open + read everything + close) and throughput, as
 * one JSON object.  Used by bench/read-small and bench/epochs.
 *
 *   readbench [-t THREADS] [-r ROUNDS] [--shuffle SEED] [--drop]
 *             [--bs SIZE] FILE_LIST
 *
 * FILE_LIST holds one path per line.  --drop evicts each file's pages
 * from the kernel page cache after reading it (posix_fadvise DONTNEED),
 * so a later round measures what lies below the page cache.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rb {
    char         **paths;
    size_t         n;
    size_t        *order;
    uint64_t      *lat_ns;              /* per read of this round */
    atomic_size_t  next;
    atomic_ullong  bytes;
    atomic_int     errors;
    size_t         bs;
    int            drop;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int read_one(struct rb *r, const char *path, char *buf)
{
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    while ((n = read(fd, buf, r->bs)) > 0)
        atomic_fetch_add(&r->bytes, (unsigned long long)n);
    if (r->drop)
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return n < 0 ? -1 : 0;
}

static void *worker(void *arg)
{
    struct rb *r = arg;
    char *buf = malloc(r->bs);
    size_t i;

    while ((i = atomic_fetch_add(&r->next, 1)) < r->n) {
        uint64_t t0 = now_ns();
        if (read_one(r, r->paths[r->order[i]], buf) < 0)
            atomic_fetch_add(&r->errors, 1);
        r->lat_ns[i] = now_ns() - t0;
    }
    free(buf);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);

    return (double)v[i] / 1e3;
}

static void shuffle(size_t *v, size_t n, unsigned seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % (i + 1));
        size_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static int load_list(struct rb *r, const char *file)
{
    FILE *f = fopen(file, "r");
    char line[4096];
    size_t cap = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '\0')
            continue;
        if (r->n == cap) {
            cap = cap ? cap * 2 : 1024;
            r->paths = realloc(r->paths, cap * sizeof(char *));
        }
        r->paths[r->n++] = strdup(line);
    }
    fclose(f);
    return 0;
}

static void run_round(struct rb *r, int threads, int round, int seed)
{
    pthread_t th[256];
    uint64_t t0;
    double secs;

    for (size_t i = 0; i < r->n; i++)
        r->order[i] = i;
    if (seed >= 0)
        shuffle(r->order, r->n, (unsigned)(seed + round));
    atomic_store(&r->next, 0);
    atomic_store(&r->bytes, 0);
    t0 = now_ns();
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, r);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    secs = (double)(now_ns() - t0) / 1e9;
    qsort(r->lat_ns, r->n, sizeof(uint64_t), cmp_u64);
    printf("%s{\"round\": %d, \"files\": %zu, \"seconds\": %.3f, "
           "\"files_per_s\": %.0f, \"mb_per_s\": %.1f, \"p50_us\": %.1f, "
           "\"p95_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
           "\"max_us\": %.1f, \"errors\": %d}", round ? ",\n " : "[",
           round, r->n, secs, (double)r->n / secs,
           (double)atomic_load(&r->bytes) / secs / 1e6,
           pct(r->lat_ns, r->n, 0.50), pct(r->lat_ns, r->n, 0.95),
           pct(r->lat_ns, r->n, 0.99), pct(r->lat_ns, r->n, 0.999),
           pct(r->lat_ns, r->n, 1.0), atomic_load(&r->errors));
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"shuffle", required_argument, NULL, 's'},
        {"drop", no_argument, NULL, 'd'},
        {"bs", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    struct rb r = {.bs = 1 << 20};
    int threads = 1;
    int rounds = 1;
    int seed = -1;
    int c;

    while ((c = getopt_long(argc, argv, "t:r:", opts, NULL)) != -1) {
        if (c == 't')
            threads = (int)strtol(optarg, NULL, 10);
        else if (c == 'r')
            rounds = (int)strtol(optarg, NULL, 10);
        else if (c == 's')
            seed = (int)strtol(optarg, NULL, 10);
        else if (c == 'd')
            r.drop = 1;
        else if (c == 'b')
            r.bs = (size_t)strtoull(optarg, NULL, 10);
        else
            return 2;
    }
    if (optind + 1 != argc || threads < 1 || threads > 256 || r.bs == 0 ||
        load_list(&r, argv[optind]) < 0 || r.n == 0) {
        fprintf(stderr, "usage: readbench [-t N] [-r N] [--shuffle SEED] "
                "[--drop] [--bs BYTES] FILE_LIST\n");
        return 2;
    }
    r.order = calloc(r.n, sizeof(size_t));
    r.lat_ns = calloc(r.n, sizeof(uint64_t));
    for (int i = 0; i < rounds; i++)
        run_round(&r, threads, i, seed);
    printf("]\n");
    return atomic_load(&r.errors) ? 1 : 0;
}
