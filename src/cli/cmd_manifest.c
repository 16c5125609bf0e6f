/* SPDX-License-Identifier: MIT */
/*
 * tierfs manifest URI > FILE: the listing of every object under URI as
 * a manifest (cache/manifest.h: JSON lines, a header naming the store,
 * an end line with the count), for `tierfs mount URI MNT --manifest
 * FILE`, which then never lists the store.  The store is opened as the
 * mount opens it, so the keys are the ones the mount will look up.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cache/manifest.h"
#include "cli/cli.h"
#include "common/util.h"

#define MANIFEST_FLUSH (1u << 20)       /* bytes buffered before a write */

struct manifest_out {
    struct tfs_buf b;
    uint64_t       n;                   /* entries written */
    int            err;                 /* first write error, or 0 */
};

static void manifest_help(FILE *f)
{
    fprintf(f,
        "usage: tierfs manifest URI > FILE\n\n"
        "Write the listing of every object under URI (key relative to\n"
        "URI, size, mtime, version) to stdout as JSON lines: a header\n"
        "naming the store, one object a line, an end line with the\n"
        "count.  'tierfs mount URI MNT --manifest FILE' then mounts it\n"
        "without listing the store (an --immutable mount of that\n"
        "listing; see docs/fuse.md, \"Manifests\").\n");
}

static int manifest_flush(struct manifest_out *o)
{
    if (o->err == 0 && o->b.len > 0 &&
        fwrite(o->b.p, 1, o->b.len, stdout) != o->b.len)
        o->err = -EIO;
    tfs_buf_reset(&o->b);
    return o->err;
}

static int manifest_page(void *arg, const struct tfs_list_page *pg)
{
    struct manifest_out *o = arg;
    int rc = 0;

    for (size_t i = 0; i < pg->n_entries && rc == 0; i++) {
        rc = tfs_manifest_put_entry(&o->b, pg->entries[i].key,
                                    &pg->entries[i].st);
        o->n++;
    }
    if (rc == 0 && o->b.len >= MANIFEST_FLUSH)
        rc = manifest_flush(o);
    return rc;
}

/* The URI without its query, for the header (options stay private). */
static int manifest_run(struct tfs_store *st, const char *uri)
{
    struct manifest_out o = {.n = 0};
    char plain[1100];
    int rc;

    snprintf(plain, sizeof(plain), "%.*s", (int)strcspn(uri, "?"), uri);
    tfs_buf_init(&o.b, 0);
    rc = tfs_manifest_put_header(&o.b, plain, tfs_store_identity(st));
    if (rc == 0)
        rc = tfs_store_list_all(st, "", NULL, manifest_page, &o);
    if (rc == 0)
        rc = tfs_manifest_put_end(&o.b, o.n);
    if (rc == 0)
        rc = manifest_flush(&o);
    if (rc == 0 && fflush(stdout) != 0)
        rc = -EIO;
    tfs_buf_cleanup(&o.b);
    if (rc == -EIO && o.err != 0)
        return cli_fail("manifest", "stdout", rc);
    if (rc < 0)
        return cli_fail("manifest", uri, rc);
    fprintf(stderr, "tierfs: manifest: %llu objects\n",
            (unsigned long long)o.n);
    return CLI_OK;
}

int cmd_manifest(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct tfs_store *st = NULL;
    int rc;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            manifest_help(stdout);
            return CLI_OK;
        }
        manifest_help(stderr);
        return CLI_USAGE;
    }
    if (optind + 1 != argc)
        return cli_usage_error("manifest", "want exactly one URI");
    rc = tfs_store_open(&st, argv[optind], cli_store_options);
    if (rc < 0)
        return cli_fail("manifest", argv[optind], rc);
    rc = manifest_run(st, argv[optind]);
    tfs_store_close(st);
    return rc;
}
