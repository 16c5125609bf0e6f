/* SPDX-License-Identifier: MIT */
/*
 * tierfs ls [-l] [-R] [--json] URI: the objects and prefixes under a URI.
 * A URI that names a prefix lists what is under it; one that names an
 * object shows that object.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

struct ls_opts {
    bool long_fmt;
    bool recursive;
    bool json;
    size_t base_len;                    /* bytes of the key to hide */
    size_t n;                           /* entries printed */
};

static void ls_help(FILE *f)
{
    fprintf(f, "usage: tierfs ls [-l] [-R] [--json] URI\n\n"
               "List the objects and prefixes (shown with a trailing '/')\n"
               "directly under URI.\n\n"
               "  -l, --long       size, modification time and name\n"
               "  -R, --recursive  every object below, no prefixes\n"
               "  --json           one JSON object per line\n");
}

static void ls_print_entry(struct ls_opts *o, const struct tfs_list_entry *e)
{
    const char *name = e->key + o->base_len;
    char t[40];

    o->n++;
    if (o->json) {
        printf("{\"key\": ");
        cli_json_str(stdout, e->key);
        printf(", \"size\": %llu, \"mtime_ns\": %lld, \"version\": ",
               (unsigned long long)e->st.size, (long long)e->st.mtime_ns);
        cli_json_str(stdout, e->st.version);
        printf("}\n");
    } else if (o->long_fmt) {
        printf("%14llu  %s  %s\n", (unsigned long long)e->st.size,
               cli_fmt_time(t, sizeof(t), e->st.mtime_ns), name);
    } else {
        printf("%s\n", name);
    }
}

static void ls_print_prefix(struct ls_opts *o, const char *prefix)
{
    o->n++;
    if (o->json) {
        printf("{\"prefix\": ");
        cli_json_str(stdout, prefix);
        printf("}\n");
    } else if (o->long_fmt) {
        printf("%14s  %24s  %s\n", "PRE", "", prefix + o->base_len);
    } else {
        printf("%s\n", prefix + o->base_len);
    }
}

static int ls_page(void *arg, const struct tfs_list_page *pg)
{
    struct ls_opts *o = arg;
    size_t e = 0;
    size_t p = 0;

    /* Merge entries and prefixes back into one sorted listing. */
    while (e < pg->n_entries || p < pg->n_prefixes) {
        if (p >= pg->n_prefixes ||
            (e < pg->n_entries &&
             strcmp(pg->entries[e].key, pg->prefixes[p]) < 0))
            ls_print_entry(o, &pg->entries[e++]);
        else
            ls_print_prefix(o, pg->prefixes[p++]);
    }
    return 0;
}

static int ls_parse(int argc, char **argv, struct ls_opts *o)
{
    static const struct option longopts[] = {
        {"long", no_argument, NULL, 'l'},
        {"recursive", no_argument, NULL, 'R'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "lRh", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            o->long_fmt = true;
            break;
        case 'R':
            o->recursive = true;
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            ls_help(stdout);
            return -1;
        default:
            ls_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error("ls", "want exactly one URI");
    return 0;
}

/* List key as a prefix; an empty result for a non-'/' key tries stat. */
static int ls_run(struct cli_target *t, struct ls_opts *o, const char *uri)
{
    size_t klen = strlen(t->key);
    bool is_prefix = klen == 0 || t->key[klen - 1] == '/';
    struct tfs_buf prefix;
    struct tfs_list_entry e;
    int rc;

    tfs_buf_init(&prefix, 0);
    rc = tfs_buf_printf(&prefix, "%s%s", t->key, is_prefix ? "" : "/");
    o->base_len = o->json ? 0 : prefix.len;
    if (rc == 0)
        rc = tfs_store_list_all(t->st, tfs_buf_str(&prefix),
                                o->recursive ? NULL : "/", ls_page, o);
    tfs_buf_cleanup(&prefix);
    if (rc < 0 || o->n > 0 || is_prefix)
        return rc < 0 ? cli_fail("ls", uri, rc) : CLI_OK;
    rc = tfs_store_stat(t->st, t->key, &e.st);
    if (rc < 0)
        return cli_fail("ls", uri, rc);
    e.key = t->key;
    o->base_len = o->json ? 0 : (size_t)(strrchr(t->key, '/')
                                         ? strrchr(t->key, '/') - t->key + 1
                                         : 0);
    ls_print_entry(o, &e);
    return CLI_OK;
}

int cmd_ls(int argc, char **argv)
{
    struct ls_opts o = {0};
    struct cli_target t;
    int rc = ls_parse(argc, argv, &o);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    if (cli_open_target("ls", argv[optind], &t) != CLI_OK)
        return CLI_FAIL;
    rc = ls_run(&t, &o, argv[optind]);
    cli_close_target(&t);
    return rc;
}
