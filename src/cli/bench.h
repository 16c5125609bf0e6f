/* SPDX-License-Identifier: MIT */
/*
 * `tierfs bench`: workloads, the target they run against, and the plots.
 *
 *   bench_io.c    a target: a directory or mount (POSIX calls), or a
 *                 store URI (the library, through a cache when a cache
 *                 dir or RAM tier is given)
 *   bench_run.c   the workloads (prepare, seq, rand, mix, meta, small,
 *                 train) and their results
 *   bench_ckpt.c  ckpt: save and restore of a synthetic checkpoint
 *   svg.c         line plots as SVG files
 *   cmd_bench.c   options, dispatch, the table and JSON output
 */
#ifndef TFS_CLI_BENCH_H
#define TFS_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "metrics/hist.h"

struct bench_opts {
    const char *target;
    unsigned    threads;                /* -j */
    double      duration_s;             /* time-bounded workloads */
    uint64_t    files;                  /* prepare */
    uint64_t    file_size;              /* prepare; ckpt: its total */
    unsigned    shards;                 /* ckpt: shard files to aim for */
    uint64_t    bs;                     /* request size: seq 1M, rand 4K */
    double      rand_ratio;             /* mix: share of random ops */
    bool        drop;                   /* fadvise DONTNEED after a file */
    bool        json;
    const char *plot_dir;               /* SVG files here, or NULL */
    /* store URI targets */
    const char *cache_dir;
    const char *cache_size;
    const char *mem_cache;
    /* train */
    unsigned    accelerators;
    unsigned    batch;
    double      compute_ms;
    bool        hint;                   /* tell a mount each epoch's order */
    unsigned    epochs;
    uint64_t    seed;
};

/* ---- targets (bench_io.c) ---- */

struct bench_io;

struct bench_file {
    char    *name;                      /* relative to the target */
    uint64_t size;
};

int bench_io_open(struct bench_io **out, const struct bench_opts *o);
void bench_io_close(struct bench_io *io);
/* Every file under the target (sorted); owned by io. */
int bench_io_list(struct bench_io *io, const struct bench_file **files,
                  size_t *n);
/* Directories under the target, for readdir ("" = the root). */
int bench_io_dirs(struct bench_io *io, const char *const **dirs, size_t *n);
/* Open + read everything + close; *bytes read. */
int bench_io_read_file(struct bench_io *io, const char *name, void *buf,
                       size_t bufsz, uint64_t *bytes);
/* Keep files open for positional reads: handles 0..n-1. */
int bench_io_open_all(struct bench_io *io);
int bench_io_pread(struct bench_io *io, size_t file, void *buf, size_t len,
                   uint64_t off, size_t *n);
int bench_io_stat(struct bench_io *io, const char *name, uint64_t *size);
int bench_io_open_close(struct bench_io *io, const char *name);
int bench_io_readdir(struct bench_io *io, const char *dir, size_t *entries);
/* Write a file (prepare). */
int bench_io_write(struct bench_io *io, const char *name, const void *buf,
                   size_t len);
/* The cache's stats JSON (a mount's .tierfs-stats, or the library's);
 * -ENOENT when the target has no tierfs cache.  Free with tfs_free. */
int bench_io_stats(struct bench_io *io, char **json);
const char *bench_io_kind(const struct bench_io *io);

/* ---- results (bench_run.c) ---- */

#define BENCH_MAX_EPOCHS 64
#define BENCH_TIMELINE 600

struct bench_result {
    const char     *workload;
    double          seconds;
    uint64_t        ops;
    uint64_t        bytes;
    uint64_t        errors;
    struct tfs_hist lat;                /* per operation */
    /* throughput per second of the run, for the plot */
    uint64_t        timeline[BENCH_TIMELINE];
    unsigned        timeline_n;
    /* meta */
    double          stat_ops_s;
    double          open_ops_s;
    double          readdir_ops_s;
    /* train */
    unsigned        epochs;
    double          au[BENCH_MAX_EPOCHS];
    double          stall[BENCH_MAX_EPOCHS];
    double          hit[BENCH_MAX_EPOCHS];      /* -1 when unknown */
    double          samples_s[BENCH_MAX_EPOCHS];
    /* ckpt */
    double          ckpt_blocked_s;     /* save() returned */
    double          ckpt_durable_s;     /* committed in the store */
    double          ckpt_first_s;       /* restore: first tensor in */
    double          ckpt_restore_s;     /* restore: all of it */
    size_t          ckpt_files;         /* shard files written */
};

int bench_run(const char *workload, const struct bench_opts *o,
              struct bench_io *io, struct bench_result *r);
/* ckpt (bench_ckpt.c): no bench_io; the checkpoint library opens the
   target itself. */
int bench_ckpt(const struct bench_opts *o, struct bench_result *r);

/* ---- plots (svg.c) ---- */

struct svg_series {
    const char   *name;
    const double *x;
    const double *y;
    size_t        n;
};

/* A line plot; log_x for latency CDFs.  -errno on write failure. */
int svg_plot(const char *path, const char *title, const char *xlabel,
             const char *ylabel, const struct svg_series *s, size_t n,
             bool log_x);

#endif /* TFS_CLI_BENCH_H */
