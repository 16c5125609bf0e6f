/* SPDX-License-Identifier: MIT */
/*
 * The workloads of `tierfs bench`:
 *
 *   prepare  write a synthetic dataset (files x size) to the target
 *   seq      read every file front to back in --bs requests (1 MiB)
 *   rand     --bs (4 KiB) reads at random offsets of random files
 *   mix      both, a --rand-ratio share of random ops (fio-like)
 *   meta     stat, open+close and readdir ops/s with N threads
 *   small    open + read whole + close per file: latency and files/s
 *   train    a DLIO / MLPerf Storage style emulation: read threads feed
 *            N emulated accelerators that each take a batch and compute
 *            for a fixed time; accelerator utilisation per epoch
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "common/json.h"
#include "common/util.h"

struct run {
    const struct bench_opts *o;
    struct bench_io         *io;
    struct bench_result     *r;
    const struct bench_file *files;
    size_t                   n_files;
    size_t                  *order;     /* file order for list workloads */
    atomic_size_t            next;
    atomic_uint_fast64_t     bytes;
    atomic_uint_fast64_t     ops;
    atomic_uint_fast64_t     errors;
    uint64_t                 deadline_ns;
    uint64_t                 timeline0; /* the timeline's origin */
    atomic_bool              done;
};

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void shuffle(size_t *v, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;

    for (size_t i = 0; i < n; i++)
        v[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(xorshift(&s) % i);
        size_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* Has every file of a list workload been taken by a worker? */
static bool run_all_taken(struct run *x)
{
    return x->deadline_ns == 0 && x->n_files > 0 &&
           atomic_load(&x->next) >= x->n_files;
}

/* Run fn(arg) on n threads while sampling throughput each second. */
static int run_threads(struct run *x, void *(*fn)(void *), void *arg,
                       unsigned n)
{
    pthread_t th[256];
    uint64_t t0 = tfs_now_ns();
    uint64_t last = 0;
    unsigned started;

    n = TFS_MAX(1u, TFS_MIN(n, 256u));
    for (started = 0; started < n; started++)
        if (pthread_create(&th[started], NULL, fn, arg) != 0)
            break;
    if (started == 0)
        return -EAGAIN;
    /*
     * A sampler: one timeline point a second until the workers end.  The
     * points count from the first call's start, so the calls of one run
     * (train's epochs) make one timeline; the wait for the next point
     * ends as soon as the workers have taken every file, or it held each
     * epoch of train to the length of all the epochs before it (2 s for
     * a 1 s warm epoch after a 1 s cold one: the "slow epoch 2").
     */
    if (x->timeline0 == 0)
        x->timeline0 = t0;
    while (!atomic_load(&x->done) && !run_all_taken(x)) {
        uint64_t next = x->timeline0 +
                        (uint64_t)(x->r->timeline_n + 1) * 1000000000u;
        while (tfs_now_ns() < next && !atomic_load(&x->done) &&
               !run_all_taken(x))
            tfs_sleep_ns(10000000u);
        if (x->r->timeline_n < BENCH_TIMELINE &&
            tfs_now_ns() >= next) {
            uint64_t b = atomic_load(&x->bytes);
            x->r->timeline[x->r->timeline_n++] = b - last;
            last = b;
        }
        if (x->deadline_ns != 0 && tfs_now_ns() >= x->deadline_ns)
            break;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    x->r->seconds = (double)(tfs_now_ns() - t0) / 1e9;
    x->r->bytes = atomic_load(&x->bytes);
    x->r->ops = atomic_load(&x->ops);
    x->r->errors = atomic_load(&x->errors);
    return 0;
}

/* Count one finished operation. */
static void run_op(struct run *x, int rc, uint64_t bytes, uint64_t t0)
{
    tfs_hist_add(&x->r->lat, tfs_now_ns() - t0);
    atomic_fetch_add(&x->ops, 1);
    atomic_fetch_add(&x->bytes, bytes);
    if (rc < 0)
        atomic_fetch_add(&x->errors, 1);
}

/* ---- prepare ---- */

static void *prepare_main(void *arg)
{
    struct run *x = arg;
    size_t len = (size_t)x->o->file_size;
    unsigned char *buf = tfs_malloc(len ? len : 1);
    uint64_t s = tfs_rand_u64() | 1;
    size_t i;

    while (buf != NULL && (i = atomic_fetch_add(&x->next, 1)) < x->n_files) {
        char name[64];
        uint64_t t0 = tfs_now_ns();
        for (size_t k = 0; k + 8 <= len; k += 8) {
            uint64_t v = xorshift(&s);
            memcpy(buf + k, &v, 8);
        }
        snprintf(name, sizeof(name), "bench/d%03zu/f%07zu.bin", i % 100, i);
        run_op(x, bench_io_write(x->io, name, buf, len), len, t0);
    }
    tfs_free(buf);
    atomic_store(&x->done, true);
    return NULL;
}

/* ---- seq and small: whole files from a shared list ---- */

static void *files_main(void *arg)
{
    struct run *x = arg;
    size_t bs = (size_t)x->o->bs;
    void *buf = tfs_malloc(bs);
    size_t i;

    while (buf != NULL && (i = atomic_fetch_add(&x->next, 1)) < x->n_files) {
        uint64_t t0 = tfs_now_ns();
        uint64_t got = 0;
        int rc = bench_io_read_file(x->io, x->files[x->order[i]].name, buf,
                                    bs, &got);
        run_op(x, rc, got, t0);
    }
    tfs_free(buf);
    atomic_store(&x->done, true);
    return NULL;
}

/* ---- rand and mix: positional reads until the deadline ---- */

static void *rand_main(void *arg)
{
    struct run *x = arg;
    size_t bs = (size_t)x->o->bs;
    size_t big = 1u << 20;
    void *buf = tfs_malloc(TFS_MAX(bs, big));
    uint64_t s = tfs_rand_u64() | 1;
    size_t seq_file = (size_t)(xorshift(&s) % x->n_files);
    uint64_t seq_off = 0;
    double ratio = strcmp(x->r->workload, "rand") == 0 ? 1.0
                                                       : x->o->rand_ratio;

    while (buf != NULL && tfs_now_ns() < x->deadline_ns) {
        bool random = (double)(xorshift(&s) >> 11) * 0x1.0p-53 < ratio;
        size_t f = random ? (size_t)(xorshift(&s) % x->n_files) : seq_file;
        uint64_t size = x->files[f].size;
        uint64_t off = random && size > bs
                           ? (xorshift(&s) % (size / bs)) * bs : seq_off;
        size_t n = 0;
        uint64_t t0 = tfs_now_ns();
        int rc = bench_io_pread(x->io, f, buf, random ? bs : big, off, &n);

        run_op(x, rc, n, t0);
        if (!random) {
            seq_off += big;
            if (seq_off >= size || n == 0) {
                seq_file = (seq_file + 1) % x->n_files;
                seq_off = 0;
            }
        }
    }
    tfs_free(buf);
    atomic_store(&x->done, true);
    return NULL;
}

/* ---- meta ---- */

enum { META_STAT, META_OPEN, META_READDIR };

struct meta_run {
    struct run  *x;
    int          what;
    const char *const *dirs;
    size_t       n_dirs;
};

static void *meta_main(void *arg)
{
    struct meta_run *m = arg;
    struct run *x = m->x;
    size_t n = m->what == META_READDIR ? m->n_dirs : x->n_files;
    size_t i;

    while ((i = atomic_fetch_add(&x->next, 1)) < n) {
        uint64_t t0 = tfs_now_ns();
        uint64_t size;
        size_t entries;
        int rc;
        if (m->what == META_STAT)
            rc = bench_io_stat(x->io, x->files[i].name, &size);
        else if (m->what == META_OPEN)
            rc = bench_io_open_close(x->io, x->files[i].name);
        else
            rc = bench_io_readdir(x->io, m->dirs[i], &entries);
        if (m->what == META_STAT)
            run_op(x, rc, 0, t0);
        else if (rc < 0)
            atomic_fetch_add(&x->errors, 1);
    }
    atomic_store(&x->done, true);
    return NULL;
}

static int bench_meta(struct run *x)
{
    const char *const *dirs;
    size_t n_dirs;
    struct meta_run m = {.x = x};
    double *out[] = {&x->r->stat_ops_s, &x->r->open_ops_s,
                     &x->r->readdir_ops_s};
    uint64_t errors = 0;
    int rc = bench_io_dirs(x->io, &dirs, &n_dirs);

    m.dirs = dirs;
    m.n_dirs = n_dirs;
    for (int what = META_STAT; rc == 0 && what <= META_READDIR; what++) {
        size_t n = what == META_READDIR ? n_dirs : x->n_files;
        unsigned timeline_n = x->r->timeline_n;
        m.what = what;
        atomic_store(&x->next, 0);
        atomic_store(&x->done, false);
        x->n_files = what == META_READDIR ? n_dirs : x->n_files;
        rc = run_threads(x, meta_main, &m, x->o->threads);
        x->r->timeline_n = timeline_n;
        *out[what] = x->r->seconds > 0 ? (double)n / x->r->seconds : 0;
        errors += x->r->errors;
        atomic_store(&x->errors, 0);
    }
    x->r->errors = errors;
    return rc;
}

/* ---- train: the DLIO-style emulation ---- */

struct train {
    struct run     *x;
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    size_t          queued;             /* samples loaded, not consumed */
    size_t          cap;                /* bound of the queue */
    size_t          produced;
    size_t          consumed;
    double          compute_s;          /* steps after each one's first */
    double          wait_s;
};

static void *train_reader(void *arg)
{
    struct train *t = arg;
    struct run *x = t->x;
    size_t bs = 1u << 20;
    void *buf = tfs_malloc(bs);
    size_t i;

    while (buf != NULL && (i = atomic_fetch_add(&x->next, 1)) < x->n_files) {
        uint64_t t0 = tfs_now_ns();
        uint64_t got = 0;
        int rc = bench_io_read_file(x->io, x->files[x->order[i]].name, buf,
                                    bs, &got);
        run_op(x, rc, got, t0);
        pthread_mutex_lock(&t->lock);
        while (t->queued >= t->cap)
            pthread_cond_wait(&t->cond, &t->lock);
        t->queued++;
        t->produced++;
        pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&t->lock);
    }
    tfs_free(buf);
    return NULL;
}

/* Take up to n samples; returns how many (0: the epoch is over). */
static size_t train_take(struct train *t, size_t n, size_t total)
{
    size_t got;

    pthread_mutex_lock(&t->lock);
    while (t->queued < n && t->produced < total)
        pthread_cond_wait(&t->cond, &t->lock);
    got = TFS_MIN(n, t->queued);
    t->queued -= got;
    t->consumed += got;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return got;
}

static void *train_accel(void *arg)
{
    struct train *t = arg;
    const struct bench_opts *o = t->x->o;
    double compute = 0;
    double wait = 0;
    bool first = true;

    for (;;) {
        uint64_t w0 = tfs_now_ns();
        size_t got = train_take(t, o->batch, t->x->n_files);
        uint64_t w1 = tfs_now_ns();
        if (got == 0)
            break;
        tfs_sleep_ns((uint64_t)(o->compute_ms * 1e6));
        if (!first) {               /* the first step warms up: excluded */
            wait += (double)(w1 - w0) / 1e9;
            compute += (double)(tfs_now_ns() - w1) / 1e9;
        }
        first = false;
    }
    pthread_mutex_lock(&t->lock);
    t->compute_s += compute;
    t->wait_s += wait;
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* A top-level number of a parsed stats object; 0 when there is none. */
static double json_num(const struct tfs_json_doc *doc, const char *name)
{
    const struct tfs_json *v = tfs_json_get(doc->root, name);

    return v != NULL && v->type == TFS_JSON_NUMBER ? strtod(v->s, NULL) : 0;
}

/* The share of read bytes served from the cache between two stats
   texts; -1 when either is missing or does not parse.  Any bytes in
   strings: a mount's control file names keys as they are. */
static double train_hit(const char *a, const char *b)
{
    static const struct tfs_json_limits lim = {
        .max_len = 100000000,
        .max_depth = 64,
        .max_nodes = 16u << 20,
        .any_bytes = true,
    };
    struct tfs_json_doc da;
    struct tfs_json_doc db;
    double read;
    double hit;

    if (a == NULL || b == NULL ||
        tfs_json_parse(a, strlen(a), &lim, &da) < 0)
        return -1.0;
    if (tfs_json_parse(b, strlen(b), &lim, &db) < 0) {
        tfs_json_cleanup(&da);
        return -1.0;
    }
    read = json_num(&db, "read_bytes") - json_num(&da, "read_bytes");
    hit = json_num(&db, "hit_bytes_ram") + json_num(&db, "hit_bytes_disk") -
          json_num(&da, "hit_bytes_ram") - json_num(&da, "hit_bytes_disk");
    tfs_json_cleanup(&da);
    tfs_json_cleanup(&db);
    return read <= 0 ? -1.0 : hit / read;
}

/*
 * --hint: the epoch's order to the order-hint file of the tierfs mount
 * the target is in (absolute paths, docs/fuse.md): an open stream, which
 * the caller closes after the epoch (its fd), or -errno with a detail:
 * the target is in no tierfs mount, or the write failed.
 */
static int train_hint(struct run *x)
{
    char dir[PATH_MAX];
    char path[PATH_MAX + 32];
    struct tfs_buf b;
    int fd = -1;
    int rc = 0;

    if (realpath(x->o->target, dir) == NULL)
        return tfs_err(-errno, "--hint: %s", x->o->target);
    for (char *end = dir + strlen(dir); fd < 0;) {
        snprintf(path, sizeof(path), "%.*s/.tierfs-prefetch",
                 (int)(end - dir), dir);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 || end == dir)
            break;
        while (end > dir && *--end != '/')
            ;
    }
    if (fd < 0)
        return tfs_err(-ENOENT, "--hint: %s is in no tierfs mount (no "
                       ".tierfs-prefetch above it)", x->o->target);
    tfs_buf_init(&b, 0);
    for (size_t i = 0; i < x->n_files && rc == 0; i++) {
        tfs_buf_printf(&b, "%s/%s\n", dir, x->files[x->order[i]].name);
        if (b.len >= (1u << 20) || i + 1 == x->n_files) {
            rc = tfs_buf_error(&b) < 0 ? -ENOMEM
                 : tfs_write_all(fd, b.p, b.len);
            b.len = 0;
        }
    }
    tfs_buf_cleanup(&b);
    if (rc < 0) {
        close(fd);
        return tfs_err(rc, "--hint: writing %s", path);
    }
    return fd;
}

static int train_epoch(struct run *x, unsigned e)
{
    const struct bench_opts *o = x->o;
    struct train t = {.x = x, .cap = (size_t)o->accelerators * o->batch * 2};
    pthread_t acc[64];
    char *before = NULL;
    char *after = NULL;
    uint64_t t0 = tfs_now_ns();
    unsigned n_acc = TFS_MAX(1u, TFS_MIN(o->accelerators, 64u));
    int rc;

    pthread_mutex_init(&t.lock, NULL);
    pthread_cond_init(&t.cond, NULL);
    int hint = -1;

    shuffle(x->order, x->n_files, o->seed + e);
    if (o->hint && (hint = train_hint(x)) < 0)
        return hint;
    atomic_store(&x->next, 0);
    atomic_store(&x->done, false);
    bench_io_stats(x->io, &before);
    for (unsigned i = 0; i < n_acc; i++)
        pthread_create(&acc[i], NULL, train_accel, &t);
    rc = run_threads(x, train_reader, &t, o->threads);
    for (unsigned i = 0; i < n_acc; i++)
        pthread_join(acc[i], NULL);
    bench_io_stats(x->io, &after);
    if (hint >= 0)
        close(hint);                    /* the stream ends */
    x->r->au[e] = t.compute_s + t.wait_s > 0
                      ? t.compute_s / (t.compute_s + t.wait_s) : 0;
    x->r->stall[e] = 1.0 - x->r->au[e];
    x->r->samples_s[e] = (double)x->n_files /
                         ((double)(tfs_now_ns() - t0) / 1e9);
    x->r->hit[e] = train_hit(before, after);
    tfs_free(before);
    tfs_free(after);
    pthread_cond_destroy(&t.cond);
    pthread_mutex_destroy(&t.lock);
    return rc;
}

static int bench_train(struct run *x)
{
    uint64_t t0 = tfs_now_ns();
    uint64_t bytes = 0;
    uint64_t ops = 0;
    int rc = 0;

    x->r->epochs = TFS_MIN(x->o->epochs, (unsigned)BENCH_MAX_EPOCHS);
    for (unsigned e = 0; e < x->r->epochs && rc == 0; e++) {
        rc = train_epoch(x, e);
        bytes += x->r->bytes;
        ops += x->r->ops;
        atomic_store(&x->bytes, 0);
        atomic_store(&x->ops, 0);
    }
    x->r->bytes = bytes;
    x->r->ops = ops;
    x->r->seconds = (double)(tfs_now_ns() - t0) / 1e9;
    return rc;
}

/* ---- dispatch ---- */

static int bench_files(struct run *x, bool shuffled)
{
    if (shuffled)
        shuffle(x->order, x->n_files, x->o->seed);
    else
        for (size_t i = 0; i < x->n_files; i++)
            x->order[i] = i;
    return run_threads(x, files_main, x, x->o->threads);
}

int bench_run(const char *workload, const struct bench_opts *o,
              struct bench_io *io, struct bench_result *r)
{
    struct run x = {.o = o, .io = io, .r = r};
    int rc = 0;

    r->workload = workload;
    if (strcmp(workload, "prepare") == 0) {
        x.n_files = (size_t)o->files;
        return run_threads(&x, prepare_main, &x, o->threads);
    }
    rc = bench_io_list(io, &x.files, &x.n_files);
    if (rc == 0 && x.n_files == 0)
        rc = tfs_err(-ENOENT, "no files under %s (run `tierfs bench "
                     "prepare` first)", o->target);
    x.order = rc == 0 ? tfs_malloc(x.n_files * sizeof(size_t)) : NULL;
    if (rc == 0 && x.order == NULL)
        rc = -ENOMEM;
    if (rc < 0)
        return rc;
    if (strcmp(workload, "seq") == 0 || strcmp(workload, "small") == 0) {
        rc = bench_files(&x, strcmp(workload, "small") == 0);
    } else if (strcmp(workload, "rand") == 0 ||
               strcmp(workload, "mix") == 0) {
        x.deadline_ns = tfs_now_ns() + (uint64_t)(o->duration_s * 1e9);
        rc = bench_io_open_all(io);
        if (rc == 0)
            rc = run_threads(&x, rand_main, &x, o->threads);
    } else if (strcmp(workload, "meta") == 0) {
        rc = bench_meta(&x);
    } else if (strcmp(workload, "train") == 0) {
        rc = bench_train(&x);
    } else {
        rc = tfs_err(-EINVAL, "unknown workload '%s'", workload);
    }
    tfs_free(x.order);
    return rc;
}
