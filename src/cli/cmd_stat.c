/* SPDX-License-Identifier: MIT */
/*
 * tierfs stat [--json] URI...: size, modification time and version.
 */
#include <getopt.h>
#include <stdio.h>

#include "cli/cli.h"
#include "common/util.h"

static void stat_help(FILE *f)
{
    fprintf(f, "usage: tierfs stat [--json] URI...\n\n"
               "Show the size, modification time and version (ETag, or\n"
               "size-mtime-inode-ctime for files) of each object.\n\n"
               "  --json   one JSON object per line\n");
}

static void stat_print(const char *uri, const struct tfs_stat *s, bool json)
{
    char t[40];
    char b[32];

    cli_fmt_time(t, sizeof(t), s->mtime_ns);
    if (json) {
        printf("{\"uri\": ");
        cli_json_str(stdout, uri);
        printf(", \"size\": %llu, \"mtime_ns\": %lld, \"mtime\": \"%s\", "
               "\"version\": ", (unsigned long long)s->size,
               (long long)s->mtime_ns, t);
        cli_json_str(stdout, s->version);
        printf("}\n");
        return;
    }
    printf("%s\n  size:    %llu (%s)\n  mtime:   %s\n  version: %s\n", uri,
           (unsigned long long)s->size,
           tfs_fmt_bytes(b, sizeof(b), (double)s->size), t, s->version);
}

int cmd_stat(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int status = CLI_OK;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'h') {
            stat_help(stdout);
            return CLI_OK;
        } else {
            stat_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error("stat", "no URI given");
    for (int i = optind; i < argc; i++) {
        struct cli_target t;
        struct tfs_stat s;
        int rc;

        if (cli_open_target("stat", argv[i], &t) != CLI_OK) {
            status = CLI_FAIL;
            continue;
        }
        rc = tfs_store_stat(t.st, t.key, &s);
        if (rc < 0)
            status = cli_fail("stat", argv[i], rc);
        else
            stat_print(argv[i], &s, json);
        cli_close_target(&t);
    }
    return status;
}
