/* SPDX-License-Identifier: MIT */
/*
 * tierfs rm [-r] [-f] URI...: remove objects, or with -r every object
 * under a prefix.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

struct rm_walk {
    struct tfs_store *st;
    size_t            n;                /* removed */
    int               rc;               /* first failure */
};

static void rm_help(FILE *f)
{
    fprintf(f, "usage: tierfs rm [-r] [-f] URI...\n\n"
               "Remove objects.\n\n"
               "  -r, --recursive  remove every object under the prefix\n"
               "  -f, --force      no error for objects that do not exist\n");
}

static int rm_page(void *arg, const struct tfs_list_page *pg)
{
    struct rm_walk *w = arg;

    for (size_t i = 0; i < pg->n_entries; i++) {
        int rc = tfs_store_remove(w->st, pg->entries[i].key);
        if (rc < 0) {
            w->rc = rc;
            cli_fail("rm", pg->entries[i].key, rc);
            continue;
        }
        w->n++;
    }
    return 0;
}

static int rm_one(const char *uri, bool recursive, bool force)
{
    struct rm_walk w = {0};
    struct cli_target t;
    struct tfs_stat s;
    struct tfs_buf prefix;
    int rc;

    if (cli_open_target("rm", uri, &t) != CLI_OK)
        return CLI_FAIL;
    w.st = t.st;
    tfs_buf_init(&prefix, 0);
    if (recursive) {
        size_t len = strlen(t.key);
        rc = tfs_buf_printf(&prefix, "%s%s", t.key,
                            len && t.key[len - 1] != '/' ? "/" : "");
        if (rc == 0)
            rc = tfs_store_list_all(t.st, tfs_buf_str(&prefix), NULL,
                                    rm_page, &w);
        if (rc == 0)
            rc = w.rc;
        if (rc == 0 && w.n == 0 && !force)
            rc = tfs_err(-ENOENT, "nothing under '%s'", tfs_buf_str(&prefix));
    } else {
        /* Stores remove missing keys silently; rm(1) users expect ENOENT. */
        rc = tfs_store_stat(t.st, t.key, &s);
        if (rc == -ENOENT && force)
            rc = 0;
        else if (rc == 0)
            rc = tfs_store_remove(t.st, t.key);
    }
    if (rc < 0)
        cli_fail("rm", uri, rc);
    tfs_buf_cleanup(&prefix);
    cli_close_target(&t);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}

int cmd_rm(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"recursive", no_argument, NULL, 'r'},
        {"force", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool recursive = false;
    bool force = false;
    int status = CLI_OK;
    int c;

    while ((c = getopt_long(argc, argv, "rfh", longopts, NULL)) != -1) {
        if (c == 'r') {
            recursive = true;
        } else if (c == 'f') {
            force = true;
        } else if (c == 'h') {
            rm_help(stdout);
            return CLI_OK;
        } else {
            rm_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error("rm", "no URI given");
    for (int i = optind; i < argc; i++) {
        if (rm_one(argv[i], recursive, force) != CLI_OK)
            status = CLI_FAIL;
    }
    return status;
}
