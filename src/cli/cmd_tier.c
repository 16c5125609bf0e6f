/* SPDX-License-Identifier: MIT */
/*
 * tierfs tier ls|gc: look after a shared cache tier (mount --shared-tier
 * URI; tier/shared.h has the layout, tier/gc.h the eviction).  One
 * command with subcommands, each with its own --help; exit 0 ok, 1
 * failure, 2 usage.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tier/gc.h"

static void tier_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs tier COMMAND [OPTIONS] URI\n\n"
            "A shared cache tier (tierfs mount --shared-tier URI): each block\n"
            "one object URI/v1/XX/ID, and the nodes' access logs under\n"
            "URI/access/ (docs/group.md, \"Eviction\").\n\n"
            "commands:\n"
            "  ls URI                  block objects, bytes, access logs\n"
            "  gc --max-size SIZE URI  remove the least recently used "
            "blocks\n"
            "                          until the rest total at most SIZE\n\n"
            "'tierfs tier COMMAND --help' describes one.\n");
}

/* One figure line of ls and gc: what is there, and how old. */
static void tier_print_json(const char *uri, const char *verb,
                            const struct tfs_tier_gc_result *r)
{
    printf("{\"uri\": ");
    cli_json_str(stdout, uri);
    printf(", \"objects\": %" PRIu64 ", \"bytes\": %" PRIu64
           ", \"logs\": %" PRIu64 ", \"logs_bad\": %" PRIu64
           ", \"others\": %" PRIu64 ", \"oldest_ns\": %" PRId64
           ", \"newest_ns\": %" PRId64,
           r->objects - r->removed, r->bytes - r->removed_bytes,
           r->logs - r->logs_removed, r->logs_bad, r->others, r->oldest_ns,
           r->newest_ns);
    if (verb != NULL)
        printf(", \"dry_run\": %s, \"removed\": %" PRIu64
               ", \"removed_bytes\": %" PRIu64 ", \"logs_removed\": %" PRIu64
               ", \"errors\": %" PRIu64 ", \"found_objects\": %" PRIu64
               ", \"found_bytes\": %" PRIu64,
               strcmp(verb, "removed") ? "true" : "false", r->removed,
               r->removed_bytes, r->logs_removed, r->errors, r->objects,
               r->bytes);
    printf("}\n");
}

static void tier_print_ages(const struct tfs_tier_gc_result *r)
{
    char t1[40];
    char t2[40];

    if (r->objects == r->removed)
        return;
    printf("last access: oldest %s, newest %s\n",
           cli_fmt_time(t1, sizeof(t1), r->oldest_ns),
           cli_fmt_time(t2, sizeof(t2), r->newest_ns));
}

/* Open uri and gc it as o says: 0, or the error, with *opened. */
static int tier_run(const char *uri, const struct tfs_tier_gc_opts *o,
                    struct tfs_tier_gc_result *r, bool *opened)
{
    struct tfs_store *st;
    int rc = tfs_store_open(&st, uri, cli_store_options);

    *opened = rc == 0;
    if (rc < 0)
        return rc;
    rc = tfs_tier_gc(st, o, r);
    tfs_store_close(st);
    return rc;
}

/* ---- ls ---- */

static void ls_help(FILE *f)
{
    fprintf(f, "usage: tierfs tier ls [--json] URI\n\n"
               "Summarise the shared tier at URI: its block objects and their\n"
               "bytes, the access logs, other keys under v1/, and the oldest\n"
               "and newest last access of a block (what gc would go by).\n\n"
               "  --json   one JSON object\n");
}

static void ls_print(const char *uri, const struct tfs_tier_gc_result *r)
{
    char size[32];

    printf("%s: %" PRIu64 " block object%s, %s (%" PRIu64 " bytes)\n", uri,
           r->objects, r->objects == 1 ? "" : "s",
           tfs_fmt_bytes(size, sizeof(size), (double)r->bytes), r->bytes);
    printf("access logs: %" PRIu64 " (%" PRIu64 " unreadable)\n", r->logs,
           r->logs_bad);
    if (r->others > 0)
        printf("other keys under v1/: %" PRIu64 " (left alone)\n",
               r->others);
    tier_print_ages(r);
}

static int tier_ls(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct tfs_tier_gc_opts o = {.max_size = UINT64_MAX, .dry_run = true};
    struct tfs_tier_gc_result r;
    bool json = false;
    bool opened;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else if (c == 'h') {
            ls_help(stdout);
            return CLI_OK;
        } else {
            ls_help(stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("tier ls", "want exactly one URI");
    c = tier_run(argv[optind], &o, &r, &opened);
    if (c < 0)
        return cli_fail("tier ls", argv[optind], c);
    r.logs_removed = 0;                 /* ls removes nothing, even dry */
    if (json)
        tier_print_json(argv[optind], NULL, &r);
    else
        ls_print(argv[optind], &r);
    return CLI_OK;
}

/* ---- gc ---- */

static void gc_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs tier gc --max-size SIZE [--keep-log AGE] [-n] "
            "[--json] URI\n\n"
            "Remove block objects of the shared tier at URI, least recently\n"
            "used first, until those left under v1/ total at most SIZE.  A\n"
            "block's last use is the latest of its LastModified and of the\n"
            "access logs (URI/access/) that name it: each node writes one\n"
            "a minute, and at unmount, with the blocks it read from the "
            "tier.\nThen the access logs older than the oldest block left "
            "go.\nNo node needs stopping: a block removed under a reader is "
            "a miss\n(read from the store, written again).\n\n"
            "  --max-size SIZE   bytes to leave at most (e.g. 500G, 0)\n"
            "  --keep-log AGE    also remove access logs older than AGE\n"
            "                    (90s, 30m, 12h, 7d), bounding their "
            "number\n"
            "  -n, --dry-run     remove nothing; print what would go\n"
            "  --json            the figures as one JSON object\n"
            "  (tierfs -v tier gc: print each object removed)\n");
}

/* "90", "90s", "30m", "12h", "7d" as nanoseconds. */
static int gc_parse_age(const char *s, int64_t *ns)
{
    static const struct {
        char    unit;
        int64_t ns;
    } units[] = {{'s', 1000000000LL}, {'m', 60000000000LL},
                 {'h', 3600000000000LL}, {'d', 86400000000000LL}};
    size_t len = strlen(s);
    int64_t mult = units[0].ns;
    char num[32];
    uint64_t v;

    for (size_t i = 0; len > 1 && i < TFS_ARRAY_LEN(units); i++) {
        if (s[len - 1] == units[i].unit) {
            mult = units[i].ns;
            len--;
        }
    }
    if (len == 0 || len >= sizeof(num))
        return -1;
    memcpy(num, s, len);
    num[len] = '\0';
    if (tfs_parse_u64(num, &v) < 0 || v == 0 ||
        v > (uint64_t)(INT64_MAX / mult))
        return -1;
    *ns = (int64_t)v * mult;
    return 0;
}

/* Each object gc removes (or would), when it is to be shown. */
static void gc_each(void *arg, const char *key, uint64_t size,
                    int64_t last_ns, bool is_log)
{
    const char *verb = arg;
    char t[40];

    printf("%s %s %" PRIu64 " %s%s\n", verb, key, size,
           cli_fmt_time(t, sizeof(t), last_ns), is_log ? " (access log)" : "");
}

static void gc_print(const char *verb, uint64_t max_size,
                     const struct tfs_tier_gc_result *r)
{
    char a[32];
    char b[32];
    char l[32];
    char m[32];

    printf("%s %" PRIu64 " of %" PRIu64 " block objects (%s of %s); "
           "left %" PRIu64 " (%s), at most %s\n",
           verb, r->removed, r->objects,
           tfs_fmt_bytes(a, sizeof(a), (double)r->removed_bytes),
           tfs_fmt_bytes(b, sizeof(b), (double)r->bytes),
           r->objects - r->removed,
           tfs_fmt_bytes(l, sizeof(l), (double)(r->bytes - r->removed_bytes)),
           tfs_fmt_bytes(m, sizeof(m), (double)max_size));
    printf("%s %" PRIu64 " of %" PRIu64 " access logs%s\n", verb,
           r->logs_removed, r->logs,
           r->logs_bad > 0 ? " (and left the unreadable ones)" : "");
    tier_print_ages(r);
}

struct gc_args {
    struct tfs_tier_gc_opts o;
    bool                    json;
    bool                    have_max;
};

static int gc_opts(int argc, char **argv, struct gc_args *a)
{
    static const struct option longopts[] = {
        {"max-size", required_argument, NULL, 'm'},
        {"keep-log", required_argument, NULL, 'k'},
        {"dry-run", no_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "nh", longopts, NULL)) != -1) {
        if (c == 'm' && cli_parse_size("tier gc", "--max-size", optarg,
                                       &a->o.max_size) != 0)
            return -CLI_USAGE;
        if (c == 'k' && gc_parse_age(optarg, &a->o.keep_log_ns) < 0)
            return -cli_usage_error("tier gc", "--keep-log: '%s' is not an "
                                    "age (90s, 30m, 12h, 7d)", optarg);
        a->have_max |= c == 'm';
        a->o.dry_run |= c == 'n';
        a->json |= c == 'j';
        if (c == 'h') {
            gc_help(stdout);
            return -CLI_OK;
        }
        if (c == '?') {
            gc_help(stderr);
            return -CLI_USAGE;
        }
    }
    if (!a->have_max)
        return -cli_usage_error("tier gc", "--max-size SIZE is required");
    if (argc - optind != 1)
        return -cli_usage_error("tier gc", "want exactly one URI");
    return optind;
}

static int tier_gc(int argc, char **argv)
{
    struct gc_args a = {0};
    struct tfs_tier_gc_result r;
    const char *verb;
    bool opened;
    int i = gc_opts(argc, argv, &a);
    int rc;

    if (i <= 0)
        return -i;
    verb = a.o.dry_run ? "would remove" : "removed";
    if ((a.o.dry_run || cli_verbose) && !a.json) {
        a.o.each = gc_each;
        a.o.arg = (void *)verb;
    }
    rc = tier_run(argv[i], &a.o, &r, &opened);
    if (opened && (rc == 0 || r.removed + r.errors > 0)) {
        if (a.json)                     /* what it did, even if it failed */
            tier_print_json(argv[i], verb, &r);
        else
            gc_print(verb, a.o.max_size, &r);
    }
    return rc < 0 ? cli_fail("tier gc", argv[i], rc) : CLI_OK;
}

/* ---- the command ---- */

static const struct cli_sub tier_subs[] = {
    {"ls", tier_ls},
    {"gc", tier_gc},
};

int cmd_tier(int argc, char **argv)
{
    return cli_subcommand("tier", tier_subs, TFS_ARRAY_LEN(tier_subs), tier_help,
                          argc, argv);
}
