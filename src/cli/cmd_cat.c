/* SPDX-License-Identifier: MIT */
/*
 * tierfs cat [--range R] URI...: objects, or one byte range, to stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

struct cat_range {
    bool     set;
    uint64_t first;
    uint64_t last;                      /* inclusive; UINT64_MAX: to end */
};

static void cat_help(FILE *f)
{
    fprintf(f, "usage: tierfs cat [--range RANGE] [-j N] URI...\n\n"
               "Write objects to standard output.\n\n"
               "  --range A-B   bytes A..B inclusive (as in HTTP); A- to "
               "the end;\n"
               "  --range A+N   N bytes from A\n"
               "  -j, --jobs N  parallel ranged reads (default 4)\n");
}

/* "A-B", "A-" or "A+N". */
static int cat_parse_range(const char *s, struct cat_range *r)
{
    char *end;
    unsigned long long a;
    unsigned long long b;

    if (*s < '0' || *s > '9')
        return -1;
    a = strtoull(s, &end, 10);
    if (*end == '-' && end[1] == '\0') {
        b = UINT64_MAX;
    } else if ((*end == '-' || *end == '+') && end[1] >= '0' &&
               end[1] <= '9') {
        char op = *end;
        b = strtoull(end + 1, &end, 10);
        if (*end != '\0' || (op == '-' && b < a) || (op == '+' && b == 0))
            return -1;
        if (op == '+')
            b = a + b - 1;
    } else {
        return -1;
    }
    r->set = true;
    r->first = a;
    r->last = b;
    return 0;
}

static int cat_one(const char *uri, const struct cat_range *r,
                   const struct cli_xfer *x)
{
    struct cli_target t;
    struct tfs_stat s;
    uint64_t first = 0;
    uint64_t len;
    int rc;

    if (cli_open_target("cat", uri, &t) != CLI_OK)
        return CLI_FAIL;
    rc = tfs_store_stat(t.st, t.key, &s);
    if (rc == 0) {
        first = r->set ? TFS_MIN(r->first, s.size) : 0;
        len = s.size - first;
        if (r->set && r->last != UINT64_MAX)
            len = TFS_MIN(len, r->last - first + 1);
        rc = cli_xfer_read(t.st, t.key, s.version, first, len,
                           STDOUT_FILENO, x);
    }
    if (rc < 0)
        cli_fail("cat", uri, rc);
    cli_close_target(&t);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}

int cmd_cat(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"range", required_argument, NULL, 'r'},
        {"jobs", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_xfer x = {.jobs = 4, .chunk = 8u << 20};
    struct cat_range r = {0};
    int status = CLI_OK;
    int c;

    while ((c = getopt_long(argc, argv, "j:h", longopts, NULL)) != -1) {
        if (c == 'r' && cat_parse_range(optarg, &r) < 0)
            return cli_usage_error("cat", "bad --range '%s' (want A-B, A- "
                                   "or A+N)", optarg);
        if (c == 'j' && cli_parse_uint("cat", "--jobs", optarg, 1, 64,
                                       &x.jobs) != 0)
            return CLI_USAGE;
        if (c == 'h') {
            cat_help(stdout);
            return CLI_OK;
        }
        if (c == '?') {
            cat_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error("cat", "no URI given");
    for (int i = optind; i < argc; i++) {
        if (cat_one(argv[i], &r, &x) != CLI_OK)
            status = CLI_FAIL;
    }
    return status;
}
