/* SPDX-License-Identifier: MIT */
/*
 * tierfs ckpt ls|show|verify|rm|gc: look after the checkpoints under a
 * root URI (see tierfs/ckpt.h for the layout).  One command with
 * subcommands, each with its own --help; exit 0 ok, 1 failure, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tierfs/ckpt.h"

#define CKPT_URI_MAX 4096

static void ckpt_help(FILE *f)
{
    fprintf(f,
            "usage: tierfs ckpt COMMAND [OPTIONS] ARGS\n\n"
            "Checkpoints written by tierfs (the C API or tierfs.torch):\n"
            "URI/step-N/ holds each rank's safetensors shards, per-rank\n"
            "markers and model.safetensors.index.json, written last;\n"
            "URI/latest names the newest.  A step without its index is not\n"
            "a checkpoint.\n\n"
            "commands:\n"
            "  ls URI            list the committed checkpoints\n"
            "  show URI/STEP     files and tensors of one checkpoint\n"
            "  verify URI/STEP   read every byte from the store, check every "
            "checksum\n"
            "  rm URI/STEP       remove one checkpoint (its index first)\n"
            "  gc URI --keep N   keep the newest N, remove older and abandoned "
            "ones\n\n"
            "STEP is step-N, N or latest.  'tierfs ckpt COMMAND --help' "
            "describes one.\n");
}

/* getopt for a subcommand with only --help (and the given extras). */
static int ckpt_simple_opts(int argc, char **argv, void (*help)(FILE *))
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            help(stdout);
            return -CLI_OK;
        }
        help(stderr);
        return -CLI_USAGE;
    }
    return optind;
}

/* Split ARG into root and step; a step is required unless may_latest. */
static int ckpt_target(const char *cmd, const char *arg, char *root,
                       int64_t *step)
{
    int rc = tfs_ckpt_split_uri(arg, root, CKPT_URI_MAX, step);

    if (rc < 0)
        return cli_fail(cmd, arg, rc);
    return CLI_OK;
}

/* ---- ls ---- */

static void ls_help(FILE *f)
{
    fprintf(f, "usage: tierfs ckpt ls [-a] [--json] URI\n\n"
               "List the committed checkpoints under URI, oldest first; '*'\n"
               "marks the one 'latest' names.\n\n"
               "  -a, --all   also list step directories without an index\n"
               "              (saves in progress, or abandoned)\n"
               "  --json      one JSON object per line\n");
}

static void ls_print(const char *root, uint64_t step, bool latest,
                     bool json)
{
    struct tfs_ckpt_summary s;
    char size[32];
    char t[40];
    int rc = tfs_ckpt_summary(root, cli_store_options, step, &s);

    if (rc < 0) {
        fprintf(stderr, "tierfs: ckpt ls: step %" PRIu64 ": %s (%s)\n", step,
                tfs_strerror(rc), tfs_errdetail());
        return;
    }
    if (json) {
        printf("{\"step\": %" PRIu64 ", \"latest\": %s, \"world_size\": %u, "
               "\"total_size\": %" PRIu64 ", \"files\": %zu, \"bytes\": %"
               PRIu64 ", \"tensors\": %zu, \"created_ns\": %" PRId64 "}\n",
               step, latest ? "true" : "false", s.world_size, s.total_size,
               s.n_files, s.file_bytes, s.n_tensors, s.created_ns);
        return;
    }
    printf("%c step-%06" PRIu64 "  %10s  %3u rank%s  %4zu files  %s\n",
           latest ? '*' : ' ', step,
           tfs_fmt_bytes(size, sizeof(size), (double)s.file_bytes),
           s.world_size, s.world_size == 1 ? " " : "s", s.n_files,
           cli_fmt_time(t, sizeof(t), s.created_ns));
}

static int ls_run(const char *root, bool all, bool json)
{
    uint64_t *v = NULL;
    uint64_t latest = UINT64_MAX;
    size_t n = 0;
    int rc = tfs_ckpt_list(root, cli_store_options, 0, NULL, 0, &n);

    if (rc == 0) {
        v = tfs_calloc(n + 1, sizeof(*v));
        rc = v != NULL ? tfs_ckpt_list(root, cli_store_options, 0, v, n, &n)
                       : -ENOMEM;
    }
    if (rc == 0 && n > 0)
        rc = tfs_ckpt_latest(root, cli_store_options, &latest);
    for (size_t i = 0; i < n && rc == 0; i++)
        ls_print(root, v[i], v[i] == latest, json);
    tfs_free(v);
    v = NULL;
    if (rc == 0 && all)
        rc = tfs_ckpt_list(root, cli_store_options, TFS_CKPT_LIST_INCOMPLETE,
                           NULL, 0, &n);
    if (rc == 0 && all) {
        v = tfs_calloc(n + 1, sizeof(*v));
        rc = v != NULL ? tfs_ckpt_list(root, cli_store_options,
                                       TFS_CKPT_LIST_INCOMPLETE, v, n, &n)
                       : -ENOMEM;
    }
    for (size_t i = 0; all && i < n && rc == 0; i++) {
        if (json)
            printf("{\"step\": %" PRIu64 ", \"incomplete\": true}\n", v[i]);
        else
            printf("  step-%06" PRIu64 "  (incomplete: no index)\n", v[i]);
    }
    tfs_free(v);
    return rc < 0 ? cli_fail("ckpt ls", root, rc) : CLI_OK;
}

static int ckpt_ls(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"all", no_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool all = false;
    bool json = false;
    int c;

    while ((c = getopt_long(argc, argv, "ah", longopts, NULL)) != -1) {
        if (c == 'a') {
            all = true;
        } else if (c == 'j') {
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
        return cli_usage_error("ckpt ls", "want exactly one URI");
    return ls_run(argv[optind], all, json);
}

/* ---- show and verify: one opened checkpoint ---- */

static void show_help(FILE *f)
{
    fprintf(f, "usage: tierfs ckpt show URI/STEP\n\n"
               "Show one checkpoint: its facts, its files (rank, size, and\n"
               "whether a local staging copy would be read) and its tensors\n"
               "(dtype, full shape, how many slices).  STEP: step-N, N or\n"
               "latest; a URI without a step means latest.\n");
}

static void verify_help(FILE *f)
{
    fprintf(f, "usage: tierfs ckpt verify URI/STEP\n\n"
               "Read every shard of one checkpoint from the store (never a\n"
               "local copy) and check each file's size, its header and data\n"
               "checksums and every tensor's checksum.  Exit 0 when all\n"
               "match, 1 naming the first file or tensor that does not.\n");
}

static int ckpt_open(const char *cmd, const char *arg, bool staging,
                     struct tfs_ckpt_reader **out)
{
    char *root = tfs_malloc(CKPT_URI_MAX);
    int64_t step;
    int rc;

    if (root == NULL)
        return cli_fail(cmd, arg, -ENOMEM);
    if (ckpt_target(cmd, arg, root, &step) != CLI_OK) {
        tfs_free(root);
        return CLI_FAIL;
    }
    rc = tfs_ckpt_reader_create(out);
    if (rc == 0 && cli_store_options != NULL)
        rc = tfs_ckpt_reader_set(*out, "options", cli_store_options);
    if (rc == 0)
        rc = tfs_ckpt_reader_set(*out, "use_staging", staging ? "1" : "0");
    if (rc == 0)
        rc = tfs_ckpt_reader_open(*out, root, step);
    tfs_free(root);
    if (rc < 0) {
        tfs_ckpt_reader_close(*out);
        *out = NULL;
        return cli_fail(cmd, arg, rc);
    }
    return CLI_OK;
}

static void show_shape(int ndim, const int64_t *shape)
{
    printf("[");
    for (int d = 0; d < ndim; d++)
        printf("%s%" PRId64, d ? ", " : "", shape[d]);
    printf("]");
}

static void show_print(struct tfs_ckpt_reader *r)
{
    uint64_t step;
    uint64_t total;
    unsigned ws;
    size_t nt;
    size_t nf;
    char size[32];

    tfs_ckpt_reader_info(r, &step, &ws, &total, &nt, &nf);
    printf("step %" PRIu64 ": world size %u, %zu tensors (%s), %zu files\n",
           step, ws, nt, tfs_fmt_bytes(size, sizeof(size), (double)total),
           nf);
    printf("\nfiles:\n");
    for (size_t i = 0; i < nf; i++) {
        const char *name;
        unsigned rank;
        uint64_t bytes;
        bool local;

        tfs_ckpt_reader_file(r, i, &name, &rank, &bytes, &local);
        printf("  rank %-4u %12" PRIu64 "  %s%s\n", rank, bytes, name,
               local ? "  (local staging copy)" : "");
    }
    printf("\ntensors:\n");
    for (size_t i = 0; i < nt; i++) {
        int64_t shape[TFS_CKPT_MAX_DIMS];
        const char *name;
        const char *dtype;
        size_t slices = 1;
        int ndim;

        tfs_ckpt_reader_tensor(r, i, &name, &dtype, &ndim, shape, NULL);
        tfs_ckpt_reader_slices(r, i, &slices);
        printf("  %-6s ", dtype);
        show_shape(ndim, shape);
        printf("  %s", name);
        if (slices > 1)
            printf("  (%zu slices)", slices);
        printf("\n");
    }
}

static int ckpt_show(int argc, char **argv)
{
    struct tfs_ckpt_reader *r;
    int i = ckpt_simple_opts(argc, argv, show_help);

    if (i <= 0)
        return -i;
    if (argc - i != 1)
        return cli_usage_error("ckpt show", "want exactly one URI/STEP");
    if (ckpt_open("ckpt show", argv[i], true, &r) != CLI_OK)
        return CLI_FAIL;
    show_print(r);
    tfs_ckpt_reader_close(r);
    return CLI_OK;
}

static int ckpt_verify(int argc, char **argv)
{
    struct tfs_ckpt_reader *r;
    uint64_t t0 = tfs_now_ns();
    uint64_t bytes = 0;
    uint64_t step;
    size_t nt;
    size_t nf;
    char size[32];
    double secs;
    int i = ckpt_simple_opts(argc, argv, verify_help);
    int rc;

    if (i <= 0)
        return -i;
    if (argc - i != 1)
        return cli_usage_error("ckpt verify", "want exactly one URI/STEP");
    if (ckpt_open("ckpt verify", argv[i], false, &r) != CLI_OK)
        return CLI_FAIL;
    rc = tfs_ckpt_reader_verify(r, &bytes);
    tfs_ckpt_reader_info(r, &step, NULL, NULL, &nt, &nf);
    tfs_ckpt_reader_close(r);
    if (rc < 0)
        return cli_fail("ckpt verify", argv[i], rc);
    secs = (double)(tfs_now_ns() - t0) / 1e9;
    printf("ok: step %" PRIu64 ": %zu files, %zu tensors, %s verified in "
           "%.2f s\n", step, nf, nt,
           tfs_fmt_bytes(size, sizeof(size), (double)bytes), secs);
    return CLI_OK;
}

/* ---- rm and gc ---- */

static void rm_help(FILE *f)
{
    fprintf(f, "usage: tierfs ckpt rm URI/STEP\n\n"
               "Remove one checkpoint: its index first (from then on it does\n"
               "not exist for readers), then its shards and markers.  If\n"
               "'latest' named it, it moves to the newest remaining one.\n"
               "STEP: step-N or N (latest is refused: name the step).\n");
}

static int ckpt_rm(int argc, char **argv)
{
    char root[CKPT_URI_MAX];
    int64_t step;
    int i = ckpt_simple_opts(argc, argv, rm_help);
    int rc;

    if (i <= 0)
        return -i;
    if (argc - i != 1)
        return cli_usage_error("ckpt rm", "want exactly one URI/STEP");
    if (ckpt_target("ckpt rm", argv[i], root, &step) != CLI_OK)
        return CLI_FAIL;
    if (step < 0)
        return cli_usage_error("ckpt rm", "'%s' does not name a step "
                               "(URI/step-N)", argv[i]);
    rc = tfs_ckpt_remove(root, cli_store_options, (uint64_t)step);
    if (rc < 0)
        return cli_fail("ckpt rm", argv[i], rc);
    printf("removed step-%06" PRId64 "\n", step);
    return CLI_OK;
}

static void gc_help(FILE *f)
{
    fprintf(f, "usage: tierfs ckpt gc --keep N [-n] URI\n\n"
               "Keep the newest N committed checkpoints (and the one\n"
               "'latest' names); remove the older ones, and step directories\n"
               "without an index that are older than the newest checkpoint\n"
               "(abandoned saves).\n\n"
               "  -k, --keep N     how many to keep (at least 1)\n"
               "  -n, --dry-run    only say how many would go\n");
}

static int ckpt_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"keep", required_argument, NULL, 'k'},
        {"dry-run", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned keep = 0;
    bool dry = false;
    size_t removed = 0;
    int c;
    int rc;

    while ((c = getopt_long(argc, argv, "k:nh", longopts, NULL)) != -1) {
        if (c == 'k') {
            rc = cli_parse_uint("ckpt gc", "--keep", optarg, 1, 1000000,
                                &keep);
            if (rc != 0)
                return rc;
        } else if (c == 'n') {
            dry = true;
        } else if (c == 'h') {
            gc_help(stdout);
            return CLI_OK;
        } else {
            gc_help(stderr);
            return CLI_USAGE;
        }
    }
    if (keep == 0)
        return cli_usage_error("ckpt gc", "--keep N is required");
    if (argc - optind != 1)
        return cli_usage_error("ckpt gc", "want exactly one URI");
    rc = tfs_ckpt_gc(argv[optind], cli_store_options, keep, dry, &removed);
    if (rc < 0)
        return cli_fail("ckpt gc", argv[optind], rc);
    printf("%s %zu step%s\n", dry ? "would remove" : "removed", removed,
           removed == 1 ? "" : "s");
    return CLI_OK;
}

/* ---- the command ---- */

static const struct cli_sub ckpt_subs[] = {
    {"ls", ckpt_ls},     {"show", ckpt_show}, {"verify", ckpt_verify},
    {"rm", ckpt_rm},     {"gc", ckpt_gc},
};

int cmd_ckpt(int argc, char **argv)
{
    return cli_subcommand("ckpt", ckpt_subs, TFS_ARRAY_LEN(ckpt_subs), ckpt_help,
                          argc, argv);
}
