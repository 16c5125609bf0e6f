/* SPDX-License-Identifier: MIT */
/*
 * tierfs bench WORKLOAD [options] TARGET: fio- and DLIO-like measurements
 * on a mountpoint, a directory or a store URI, printed as a table or JSON,
 * with SVG plots on request.  The workloads are in bench_run.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"

static void bench_help(FILE *f)
{
    fprintf(f,
        "usage: tierfs bench WORKLOAD [options] TARGET\n\n"
        "TARGET: a mountpoint or directory (read with POSIX calls), or a "
        "store URI\n(read through libtierfs; through a cache with "
        "--cache-dir or --mem-cache).\n\n"
        "workloads:\n"
        "  prepare  write a synthetic dataset: --files N of --size SIZE\n"
        "  seq      read every file sequentially in --bs requests (1M)\n"
        "  rand     --bs (4K) reads at random offsets for --duration\n"
        "  mix      random 4K and sequential 1M reads, --rand-ratio of "
        "them random\n"
        "  meta     stat, open+close and readdir ops/s\n"
        "  small    open + read + close per file: latency and files/s\n"
        "  train    emulated training: read threads feed --accelerators "
        "that take\n           --batch samples and compute --compute-ms "
        "each step; accelerator\n           utilisation (AU) per epoch\n"
        "  ckpt     save a synthetic checkpoint of --size bytes (256M) in "
        "--shards\n           files (4) under TARGET/tierfs-bench-ckpt, "
        "then restore it from\n           the store: time save() "
        "blocked, time to durable, restore\n           time; the step "
        "is removed afterwards\n\n"
        "options:\n"
        "  -j, --threads N      reader threads (default 8)\n"
        "  --duration S         seconds for rand and mix (default 10)\n"
        "  --files N, --size S  prepare (default 1000 x 1M)\n"
        "  --size S, --shards N ckpt (default 256M in 4 shards)\n"
        "  --bs SIZE            request size\n"
        "  --rand-ratio R       mix (default 0.5)\n"
        "  --drop               drop each file from the page cache after "
        "reading it\n"
        "  --accelerators N     train (default 1)\n"
        "  --batch N            train (default 32)\n"
        "  --compute-ms MS      train (default 50)\n"
        "  --epochs N           train (default 3)\n"
        "  --hint               train: tell the tierfs mount the target is "
        "in\n                       each epoch's order (order hints)\n"
        "  --seed N             shuffle seed (default 1)\n"
        "  --cache-dir DIR, --cache-size S, --mem-cache S   URI targets\n"
        "  --json               one JSON object\n"
        "  --plot DIR           write SVG plots there\n");
}

enum {
    OPT_DURATION = 1000, OPT_FILES, OPT_SIZE, OPT_BS, OPT_RATIO, OPT_DROP,
    OPT_ACCEL, OPT_BATCH, OPT_COMPUTE, OPT_EPOCHS, OPT_SEED, OPT_CDIR,
    OPT_CSIZE, OPT_MEM, OPT_JSON, OPT_PLOT, OPT_SHARDS, OPT_HINT,
};

static int bench_double(const char *opt, const char *s, double *out)
{
    if (tfs_parse_double(s, out) < 0 || *out < 0)
        return cli_usage_error("bench", "%s: '%s' is not a number", opt, s);
    return 0;
}

static int bench_opt(struct bench_opts *o, int c)
{
    uint64_t v;

    switch (c) {
    case 'j':
        return cli_parse_uint("bench", "--threads", optarg, 1, 256,
                              &o->threads);
    case OPT_DURATION:
        return bench_double("--duration", optarg, &o->duration_s);
    case OPT_FILES:
        return cli_parse_size("bench", "--files", optarg, &o->files);
    case OPT_SIZE:
        return cli_parse_size("bench", "--size", optarg, &o->file_size);
    case OPT_BS:
        return cli_parse_size("bench", "--bs", optarg, &o->bs);
    case OPT_RATIO:
        return bench_double("--rand-ratio", optarg, &o->rand_ratio);
    case OPT_DROP:
        o->drop = true;
        return 0;
    case OPT_ACCEL:
        return cli_parse_uint("bench", "--accelerators", optarg, 1, 64,
                              &o->accelerators);
    case OPT_BATCH:
        return cli_parse_uint("bench", "--batch", optarg, 1, 100000,
                              &o->batch);
    case OPT_COMPUTE:
        return bench_double("--compute-ms", optarg, &o->compute_ms);
    case OPT_EPOCHS:
        return cli_parse_uint("bench", "--epochs", optarg, 1,
                              BENCH_MAX_EPOCHS, &o->epochs);
    case OPT_SEED:
        if (tfs_parse_u64(optarg, &v) < 0)
            return cli_usage_error("bench", "--seed wants a number");
        o->seed = v;
        return 0;
    case OPT_SHARDS:
        return cli_parse_uint("bench", "--shards", optarg, 1, 1024,
                              &o->shards);
    case OPT_CDIR: o->cache_dir = optarg; return 0;
    case OPT_CSIZE: o->cache_size = optarg; return 0;
    case OPT_MEM: o->mem_cache = optarg; return 0;
    case OPT_JSON: o->json = true; return 0;
    case OPT_HINT: o->hint = true; return 0;
    case OPT_PLOT: o->plot_dir = optarg; return 0;
    default:
        bench_help(stderr);
        return CLI_USAGE;
    }
}

static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    static const struct option lo[] = {
        {"threads", required_argument, NULL, 'j'},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"files", required_argument, NULL, OPT_FILES},
        {"size", required_argument, NULL, OPT_SIZE},
        {"bs", required_argument, NULL, OPT_BS},
        {"rand-ratio", required_argument, NULL, OPT_RATIO},
        {"drop", no_argument, NULL, OPT_DROP},
        {"accelerators", required_argument, NULL, OPT_ACCEL},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"compute-ms", required_argument, NULL, OPT_COMPUTE},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"cache-dir", required_argument, NULL, OPT_CDIR},
        {"cache-size", required_argument, NULL, OPT_CSIZE},
        {"mem-cache", required_argument, NULL, OPT_MEM},
        {"json", no_argument, NULL, OPT_JSON},
        {"plot", required_argument, NULL, OPT_PLOT},
        {"shards", required_argument, NULL, OPT_SHARDS},
        {"hint", no_argument, NULL, OPT_HINT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "j:h", lo, NULL)) != -1) {
        int rc;
        if (c == 'h') {
            bench_help(stdout);
            return -1;
        }
        rc = bench_opt(o, c);
        if (rc != 0)
            return rc;
    }
    if (argc - optind != 2)
        return cli_usage_error("bench", "want WORKLOAD TARGET");
    o->target = argv[optind + 1];
    return 0;
}

/* ---- output ---- */

static double us(const struct tfs_hist *h, double q)
{
    return (double)tfs_hist_quantile(h, q) / 1e3;
}

static void print_json(const struct bench_opts *o, struct bench_io *io,
                       const struct bench_result *r)
{
    printf("{\"workload\": \"%s\", \"target\": ", r->workload);
    cli_json_str(stdout, o->target);
    printf(", \"kind\": \"%s\", \"threads\": %u, \"seconds\": %.3f, "
           "\"ops\": %llu, \"bytes\": %llu, \"errors\": %llu, "
           "\"ops_per_s\": %.1f, \"mb_per_s\": %.2f, \"lat_p50_us\": %.1f, "
           "\"lat_p95_us\": %.1f, \"lat_p99_us\": %.1f, "
           "\"lat_p999_us\": %.1f",
           io != NULL ? bench_io_kind(io) : "checkpoint", o->threads,
           r->seconds, (unsigned long long)r->ops,
           (unsigned long long)r->bytes, (unsigned long long)r->errors,
           r->seconds > 0 ? (double)r->ops / r->seconds : 0,
           r->seconds > 0 ? (double)r->bytes / r->seconds / 1e6 : 0,
           us(&r->lat, 0.5), us(&r->lat, 0.95), us(&r->lat, 0.99),
           us(&r->lat, 0.999));
    if (strcmp(r->workload, "meta") == 0)
        printf(", \"stat_ops_per_s\": %.1f, \"open_ops_per_s\": %.1f, "
               "\"readdir_ops_per_s\": %.1f", r->stat_ops_s, r->open_ops_s,
               r->readdir_ops_s);
    if (strcmp(r->workload, "ckpt") == 0)
        printf(", \"files\": %zu, \"save_blocked_s\": %.4f, "
               "\"save_durable_s\": %.4f, \"restore_first_s\": %.4f, "
               "\"restore_s\": %.4f, \"save_mb_per_s\": %.2f, "
               "\"restore_mb_per_s\": %.2f", r->ckpt_files,
               r->ckpt_blocked_s, r->ckpt_durable_s, r->ckpt_first_s,
               r->ckpt_restore_s,
               (double)r->bytes / TFS_MAX(r->ckpt_durable_s, 1e-9) / 1e6,
               (double)r->bytes / TFS_MAX(r->ckpt_restore_s, 1e-9) / 1e6);
    if (strcmp(r->workload, "train") == 0) {
        printf(", \"epochs\": [");
        for (unsigned e = 0; e < r->epochs; e++)
            printf("%s{\"epoch\": %u, \"au\": %.4f, \"stall_share\": %.4f, "
                   "\"samples_per_s\": %.1f, \"hit_rate\": %.4f}",
                   e ? ", " : "", e + 1, r->au[e], r->stall[e],
                   r->samples_s[e], r->hit[e]);
        printf("]");
    }
    printf("}\n");
}

static void print_ckpt(const struct bench_opts *o,
                       const struct bench_result *r)
{
    double mb = (double)r->bytes / 1e6;

    printf("ckpt on %s: %.0f MB in %u tensors, %zu files, %u threads\n",
           o->target, mb, (unsigned)r->ops, r->ckpt_files, o->threads);
    printf("  %-30s %9.3f s\n", "save: blocked", r->ckpt_blocked_s);
    printf("  %-30s %9.3f s  %8.1f MB/s\n", "save: durable (committed)",
           r->ckpt_durable_s, mb / TFS_MAX(r->ckpt_durable_s, 1e-9));
    printf("  %-30s %9.3f s\n", "restore: first tensor",
           r->ckpt_first_s);
    printf("  %-30s %9.3f s  %8.1f MB/s\n", "restore: all (verified)",
           r->ckpt_restore_s, mb / TFS_MAX(r->ckpt_restore_s, 1e-9));
}

static void print_table(const struct bench_opts *o, struct bench_io *io,
                        const struct bench_result *r)
{
    printf("%s on %s (%s), %u threads: %.2f s\n", r->workload, o->target,
           bench_io_kind(io), o->threads, r->seconds);
    printf("  %-22s %12.1f\n  %-22s %12.1f\n", "MB/s",
           r->seconds > 0 ? (double)r->bytes / r->seconds / 1e6 : 0,
           "ops/s", r->seconds > 0 ? (double)r->ops / r->seconds : 0);
    printf("  %-22s %6.0f %6.0f %6.0f %6.0f\n", "latency us p50/95/99/99.9",
           us(&r->lat, 0.5), us(&r->lat, 0.95), us(&r->lat, 0.99),
           us(&r->lat, 0.999));
    if (strcmp(r->workload, "meta") == 0)
        printf("  %-22s %12.0f\n  %-22s %12.0f\n  %-22s %12.0f\n",
               "stat/s", r->stat_ops_s, "open+close/s", r->open_ops_s,
               "readdir/s", r->readdir_ops_s);
    if (strcmp(r->workload, "train") == 0) {
        printf("  %5s %8s %10s %11s %9s\n", "epoch", "AU", "stall",
               "samples/s", "hit rate");
        for (unsigned e = 0; e < r->epochs; e++) {
            char hit[16];
            snprintf(hit, sizeof(hit), r->hit[e] < 0 ? "-" : "%.0f%%",
                     100 * r->hit[e]);
            printf("  %5u %7.1f%% %9.1f%% %11.0f %9s\n", e + 1,
                   100 * r->au[e], 100 * r->stall[e], r->samples_s[e], hit);
        }
    }
    if (r->errors)
        printf("  %-22s %12llu\n", "ERRORS",
               (unsigned long long)r->errors);
}

/* The latency CDF, throughput over time, and per-epoch figures. */
static int bench_plots(const struct bench_opts *o,
                       const struct bench_result *r)
{
    static double x[TFS_HIST_BUCKETS + BENCH_TIMELINE];
    static double y[TFS_HIST_BUCKETS + BENCH_TIMELINE];
    static double y2[BENCH_MAX_EPOCHS];
    char path[4200];
    uint64_t total = atomic_load(&r->lat.count);
    uint64_t seen = 0;
    size_t n = 0;
    int rc;

    for (unsigned b = 0; b < TFS_HIST_BUCKETS && total > 0; b++) {
        uint64_t c = atomic_load(&r->lat.b[b]);
        if (c == 0)
            continue;
        seen += c;
        x[n] = (double)tfs_hist_bucket_mid(b) / 1e3;
        y[n++] = (double)seen / (double)total;
    }
    snprintf(path, sizeof(path), "%s/%s-latency-cdf.svg", o->plot_dir,
             r->workload);
    rc = svg_plot(path, "latency CDF", "latency (us, log)", "fraction",
                  &(struct svg_series){r->workload, x, y, n}, 1, true);
    for (n = 0; rc == 0 && n < r->timeline_n; n++) {
        x[n] = (double)n + 1;
        y[n] = (double)r->timeline[n] / 1e6;
    }
    snprintf(path, sizeof(path), "%s/%s-throughput.svg", o->plot_dir,
             r->workload);
    if (rc == 0 && r->timeline_n > 1)
        rc = svg_plot(path, "throughput over time", "seconds", "MB/s",
                      &(struct svg_series){r->workload, x, y, n}, 1, false);
    if (rc != 0 || strcmp(r->workload, "train") != 0)
        return rc;
    for (n = 0; n < r->epochs; n++) {
        x[n] = (double)n + 1;
        y[n] = 100 * r->au[n];
        y2[n] = 100 * (r->hit[n] < 0 ? 0 : r->hit[n]);
    }
    snprintf(path, sizeof(path), "%s/train-epochs.svg", o->plot_dir);
    return svg_plot(path, "accelerator utilisation and hit rate per epoch",
                    "epoch", "%",
                    (struct svg_series[]){{"AU %", x, y, n},
                                          {"hit rate %", x, y2, n}},
                    2, false);
}

int cmd_bench(int argc, char **argv)
{
    struct bench_opts o = {
        .threads = 8, .duration_s = 10, .files = 1000, .shards = 4,
        .rand_ratio = 0.5, .accelerators = 1, .batch = 32, .compute_ms = 50,
        .epochs = 3, .seed = 1,
    };
    struct bench_result *r;
    struct bench_io *io = NULL;
    bool ckpt;
    int rc = bench_parse(argc, argv, &o);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    /* ckpt opens its target through the checkpoint library, and has no
       distribution to plot. */
    ckpt = strcmp(argv[optind], "ckpt") == 0;
    if (o.bs == 0)
        o.bs = strcmp(argv[optind], "rand") == 0 ? 4096 : 1u << 20;
    if (o.file_size == 0)
        o.file_size = ckpt ? 256u << 20 : 1u << 20;
    r = tfs_calloc(1, sizeof(*r));
    if (r == NULL)
        return cli_fail("bench", o.target, -ENOMEM);
    rc = ckpt ? bench_ckpt(&o, r) : bench_io_open(&io, &o);
    if (rc == 0 && !ckpt)
        rc = bench_run(argv[optind], &o, io, r);
    if (rc == 0 && !ckpt && o.plot_dir != NULL)
        rc = bench_plots(&o, r);
    if (rc < 0) {
        cli_fail("bench", o.target, rc);
    } else if (o.json) {
        print_json(&o, io, r);
    } else if (ckpt) {
        print_ckpt(&o, r);
    } else {
        print_table(&o, io, r);
    }
    bench_io_close(io);
    if (rc == 0 && r->errors)
        rc = CLI_FAIL;
    tfs_free(r);
    if (rc < 0)
        return rc == -EINVAL ? CLI_USAGE : CLI_FAIL;
    return rc == 0 ? CLI_OK : CLI_FAIL;
}
