/* SPDX-License-Identifier: MIT */
/*
 * tierfs profile TRACE | DIR | URI: the access pattern of a recorded trace
 * (or the shape of a dataset) and what to do about it.
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/profile.h"
#include "common/util.h"

static void profile_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs profile [--json] [--block-size SIZE] "
            "TRACE|DIR|URI\n\n"
            "Profile the data access pattern before building anything.\n\n"
            "TRACE (from `tierfs mount --trace FILE`): file count and size\n"
            "distribution, sequential-read ratio, re-reads, read latency "
            "by\nsource, working-set size, a miss-ratio curve (cache size "
            "-> predicted\nhit rate) for LRU and for tinylfu, and advice: "
            "packing small files,\nthe cache size for 80%% hits, "
            "readahead.\n"
            "DIR or URI: the size distribution of the objects and packing "
            "advice.\n\n"
            "  --json             one JSON object\n"
            "  --block-size SIZE  cache block size to model (default 4M)\n");
}

/* Does path hold a trace (by its magic)? */
static bool profile_is_trace(const char *path)
{
    char magic[8];
    struct stat sb;
    int fd;
    bool yes;

    if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
        return false;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    yes = read(fd, magic, 8) == 8 && memcmp(magic, "TFSTRC1\n", 8) == 0;
    close(fd);
    return yes;
}

int cmd_profile(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"block-size", required_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t bs = 4u << 20;
    bool json = false;
    char *out = NULL;
    int rc;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'b') {
            if (cli_parse_size("profile", "--block-size", optarg, &bs) != 0)
                return CLI_USAGE;
        } else if (c == 'h') {
            profile_help(stdout);
            return CLI_OK;
        } else {
            profile_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("profile", "want one TRACE, DIR or URI");
    if (profile_is_trace(argv[optind]))
        rc = cli_profile_trace(argv[optind], bs, json, &out);
    else
        rc = cli_profile_store(argv[optind], cli_store_options, json, &out);
    if (rc < 0)
        return cli_fail("profile", argv[optind], rc);
    fputs(out, stdout);
    tfs_free(out);
    return CLI_OK;
}
