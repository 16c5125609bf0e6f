/* SPDX-License-Identifier: MIT */
/*
 * tierfs: the command-line tool.  A git-style table of commands and the
 * global options parsed before the command name.  The helpers every
 * command shares are in util.c (errors, usage, numbers), target.c
 * (a URI as store and key) and fmt.c (output), so that no command
 * depends on this file.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tierfs/log.h"

struct cli_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct cli_cmd cli_cmds[] = {
    {"ls", cmd_ls, "list objects and prefixes under a URI"},
    {"manifest", cmd_manifest, "write the listing of a URI, to mount "
                               "without listing"},
    {"stat", cmd_stat, "show size, mtime and version of objects"},
    {"cat", cmd_cat, "write objects (or a byte range) to stdout"},
    {"get", cmd_get, "download an object to a local file"},
    {"put", cmd_put, "upload a local file (multipart, parallel parts)"},
    {"rm", cmd_rm, "remove objects, or everything under a prefix"},
    {"mount", cmd_mount, "serve a store at a mount point (FUSE)"},
    {"umount", cmd_umount, "unmount a tierfs mount"},
    {"serve", cmd_serve, "run a dedicated cache node of a cache group"},
    {"sync", cmd_sync, "wait until a mount's writes are in the store"},
    {"stats", cmd_stats, "show the cache counters of a mount"},
    {"warmup", cmd_warmup, "fill the cache ahead of a job, with progress"},
    {"pack", cmd_pack, "pack small files into WebDataset tar shards"},
    {"profile", cmd_profile, "profile an access trace or a dataset"},
    {"bench", cmd_bench, "measure: seq, rand, mix, meta, small, train"},
    {"ckpt", cmd_ckpt, "list, show, verify, remove and gc checkpoints"},
    {"tier", cmd_tier, "summarise and gc a shared cache tier"},
    {"version", cmd_version, "print version information"},
};

static void cli_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs [--opt NAME=VALUE]... [-v] COMMAND [ARGS]\n"
            "\n"
            "tierfs makes remote shared storage (S3-compatible object "
            "stores,\nPOSIX shared file systems) feel local to training "
            "jobs.\n\ncommands:\n");
    for (size_t i = 0; i < TFS_ARRAY_LEN(cli_cmds); i++)
        fprintf(f, "  %-10s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
    fprintf(f,
            "\nURIs: s3://bucket/key, file:///abs/path or a plain path; "
            "wrappers\nstack in front: retry+s3://..., "
            "fault+file:///data?latency_ms=2.\nStore options go in the "
            "URI query or in --opt NAME=VALUE.\n"
            "S3 settings follow AWS conventions (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY,\nAWS_REGION, AWS_ENDPOINT_URL, "
            "AWS_PROFILE, ~/.aws/credentials).\n"
            "\n'tierfs COMMAND --help' describes one command; "
            "see also tierfs(1).\n"
            "Exit status: 0 ok, 1 failure, 2 usage error.\n");
}

/* Add --opt NAME=VALUE to the "&"-joined option string. */
static int cli_add_opt(struct tfs_buf *opts, const char *kv)
{
    if (strchr(kv, '=') == NULL || kv[0] == '=') {
        fprintf(stderr, "tierfs: --opt wants NAME=VALUE, not '%s'\n", kv);
        return CLI_USAGE;
    }
    if (opts->len > 0 && tfs_buf_puts(opts, "&") < 0)
        return CLI_FAIL;
    return tfs_buf_puts(opts, kv) < 0 ? CLI_FAIL : 0;
}

/* Global options; returns the index of the command name or -exit. */
static int cli_global_opts(int argc, char **argv, struct tfs_buf *opts)
{
    static const struct option longopts[] = {
        {"opt", required_argument, NULL, 'o'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "+o:vhV", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'o':
            rc = cli_add_opt(opts, optarg);
            break;
        case 'v':
            cli_verbose = true;
            break;
        case 'h':
            cli_help(stdout);
            return -CLI_OK;
        case 'V':
            return -cmd_version(1, argv);
        default:
            cli_help(stderr);
            return -CLI_USAGE;
        }
        if (rc != 0)
            return -rc;
    }
    if (optind >= argc) {
        cli_help(stderr);
        return -CLI_USAGE;
    }
    return optind;
}

static const struct cli_cmd *cli_find(const char *name)
{
    for (size_t i = 0; i < TFS_ARRAY_LEN(cli_cmds); i++) {
        if (strcmp(cli_cmds[i].name, name) == 0)
            return &cli_cmds[i];
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const struct cli_cmd *cmd;
    struct tfs_buf opts;
    int idx;
    int rc;

    tfs_buf_init(&opts, 0);
    idx = cli_global_opts(argc, argv, &opts);
    if (idx <= 0) {
        tfs_buf_cleanup(&opts);
        return -idx;
    }
    cli_store_options = opts.len ? tfs_buf_str(&opts) : NULL;
    tfs_log_set_sink(tfs_log_stderr, NULL);
    tfs_log_set_level(cli_verbose ? TFS_LOG_DEBUG : TFS_LOG_WARNING);
    if (strcmp(argv[idx], "help") == 0 && idx + 1 < argc) {
        cmd = cli_find(argv[idx + 1]);
        char *help_argv[] = {argv[idx + 1], "--help", NULL};
        rc = cmd ? cmd->run(2, help_argv) : CLI_USAGE;
    } else if (strcmp(argv[idx], "help") == 0) {
        cli_help(stdout);
        rc = CLI_OK;
    } else {
        cmd = cli_find(argv[idx]);
        if (cmd == NULL) {
            fprintf(stderr, "tierfs: '%s' is not a command; see "
                    "'tierfs --help'\n", argv[idx]);
            rc = CLI_USAGE;
        } else {
            optind = 0;                 /* reset getopt for the command */
            rc = cmd->run(argc - idx, argv + idx);
        }
    }
    tfs_buf_cleanup(&opts);
    return rc;
}
