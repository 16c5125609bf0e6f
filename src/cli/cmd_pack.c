/* SPDX-License-Identifier: MIT */
/*
 * tierfs pack SRC DST [--shard-size N] [--shuffle-seed S] [-j N]: turn a
 * tree of small files into WebDataset tar shards with an offset index per
 * shard and manifest.json (src/pack/write.c does the work; this file
 * parses options and draws the progress bar).  Run it again after an
 * interruption: finished shards are kept.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "pack/packer.h"

static void pack_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs pack [options] SRC DST\n\n"
            "Pack the files under SRC (any store URI or directory) into "
            "WebDataset\ntar shards DST/shard-000000.tar ..., an offset "
            "index per shard\n(shard-000000.idx) and DST/manifest.json, "
            "written last.  Files group\ninto samples by key: "
            "'train/img1.jpg' and 'train/img1.cls' are fields\n'jpg' and "
            "'cls' of sample 'train/img1'.  Run it again after an\n"
            "interruption: finished shards are kept.  See docs/pack.md.\n\n"
            "  -s, --shard-size N   target bytes per shard (default 256M)\n"
            "  --shuffle-seed S     shuffle the order of samples with seed S\n"
            "                       (default: key order)\n"
            "  -j, --jobs N         source files read in parallel "
            "(default 16)\n"
            "  -q, --quiet          no progress bar\n");
}

struct pack_cli {
    struct tfs_pack_write_opts o;
    bool                       quiet;
    struct tfs_pack_progress   last;    /* as last reported */
};

static int pack_parse(int argc, char **argv, struct pack_cli *pc)
{
    static const struct option longopts[] = {
        {"shard-size", required_argument, NULL, 's'},
        {"shuffle-seed", required_argument, NULL, 'S'},
        {"jobs", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "s:j:qh", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 's':
            rc = cli_parse_size("pack", "--shard-size", optarg,
                                &pc->o.shard_size);
            break;
        case 'S':
            pc->o.shuffle = true;
            if (tfs_parse_u64(optarg, &pc->o.shuffle_seed) < 0)
                rc = cli_usage_error("pack", "--shuffle-seed: '%s' is not "
                                     "a number", optarg);
            break;
        case 'j':
            rc = cli_parse_uint("pack", "--jobs", optarg, 1, 256,
                                &pc->o.jobs);
            break;
        case 'q':
            pc->quiet = true;
            break;
        case 'h':
            pack_help(stdout);
            return -1;
        default:
            pack_help(stderr);
            return CLI_USAGE;
        }
        if (rc != 0)
            return rc;
    }
    if (optind + 2 != argc)
        return cli_usage_error("pack", "want SRC and DST");
    return 0;
}

static void pack_progress(void *arg, const struct tfs_pack_progress *pr)
{
    double secs = (double)pr->elapsed_ns / 1e9;
    double rate = secs > 0 ? (double)pr->bytes / secs : 0;
    double left = rate > 0 ? (double)(pr->bytes_total - pr->bytes) / rate
                           : 0;
    struct pack_cli *pc = arg;
    char a[32];
    char b[32];

    pc->last = *pr;
    if (pc->quiet)
        return;
    fprintf(stderr, "\r  shard %zu/%zu  %llu/%llu samples  %s / %s  "
            "%.1f MB/s  ETA %.0f s   %s",
            TFS_MIN(pr->shards + 1, pr->shards_total), pr->shards_total,
            (unsigned long long)pr->samples,
            (unsigned long long)pr->samples_total,
            tfs_fmt_bytes(a, 32, (double)pr->bytes),
            tfs_fmt_bytes(b, 32, (double)pr->bytes_total), rate / 1e6, left,
            pr->done ? "\n" : "");
}

/* Keys under a target are a directory: "" or "dir/". */
static char *pack_prefix(const char *key)
{
    size_t n = strlen(key);
    struct tfs_buf b;

    tfs_buf_init(&b, 0);
    if (tfs_buf_printf(&b, "%s%s", key, n && key[n - 1] != '/' ? "/" : "")
        < 0) {
        tfs_buf_cleanup(&b);
        return NULL;
    }
    return tfs_buf_steal(&b);
}

static int pack_run(struct pack_cli *pc, const char *src_uri,
                    const char *dst_uri)
{
    struct cli_target src;
    struct cli_target dst;
    uint64_t t0 = tfs_now_ns();
    char *sp = NULL;
    int rc;

    if (cli_open_target("pack", src_uri, &src) != 0)
        return CLI_FAIL;
    if (cli_open_target("pack", dst_uri, &dst) != 0) {
        cli_close_target(&src);
        return CLI_FAIL;
    }
    sp = pack_prefix(src.key);
    rc = sp ? tfs_pack_write(src.st, sp, dst.st, dst.key, &pc->o) : -ENOMEM;
    if (rc < 0) {
        if (!pc->quiet)
            fprintf(stderr, "\n");
        cli_fail("pack", src_uri, rc);
    } else {
        fprintf(stderr, "packed %llu samples (%zu shards, %zu kept from "
                "before) into %s in %.1f s\n",
                (unsigned long long)pc->last.samples_total,
                pc->last.shards_total, pc->last.shards_kept, dst_uri,
                (double)(tfs_now_ns() - t0) / 1e9);
    }
    tfs_free(sp);
    cli_close_target(&src);
    cli_close_target(&dst);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}

int cmd_pack(int argc, char **argv)
{
    struct pack_cli pc = {
        .o = {.shard_size = 256u << 20, .jobs = 16},
    };
    int rc = pack_parse(argc, argv, &pc);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    pc.o.progress = pack_progress;
    pc.o.progress_arg = &pc;
    return pack_run(&pc, argv[optind], argv[optind + 1]);
}
