/* SPDX-License-Identifier: MIT */
/*
 * tierfs get URI [DEST]: download one object to a local file.  The bytes
 * go to a temporary file beside DEST, which is fsynced and renamed into
 * place only when complete: no partial file ever carries DEST's name.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

static void get_help(FILE *f)
{
    fprintf(f, "usage: tierfs get [-j N] [--chunk SIZE] [-q] URI [DEST]\n\n"
               "Download an object.  DEST defaults to the object's name in\n"
               "the current directory; a directory DEST receives that "
               "name;\n'-' writes to standard output.\n\n"
               "  -j, --jobs N     parallel ranged reads (default 4)\n"
               "  --chunk SIZE     bytes per read (default 8M)\n"
               "  -q, --quiet      no progress or summary\n");
}

/* Where to write: DEST, DEST/name, or ./name. */
static int get_dest(const char *key, const char *dest, struct tfs_buf *out)
{
    const char *slash = strrchr(key, '/');
    const char *name = slash ? slash + 1 : key;
    struct stat sb;

    if (name[0] == '\0')
        return tfs_err(-EISDIR, "'%s' names a prefix, not an object", key);
    if (dest == NULL)
        return tfs_buf_puts(out, name);
    if (stat(dest, &sb) == 0 && S_ISDIR(sb.st_mode))
        return tfs_buf_printf(out, "%s/%s", dest, name);
    return tfs_buf_puts(out, dest);
}

/* Download into a temp file beside path, then rename it into place. */
static int get_to_file(struct cli_target *t, const struct tfs_stat *s,
                       const char *path, const struct cli_xfer *x)
{
    struct tfs_buf tmp;
    int fd;
    int rc;

    tfs_buf_init(&tmp, 0);
    rc = tfs_buf_printf(&tmp, "%s.tierfs-part-XXXXXX", path);
    if (rc < 0)
        return rc;
    fd = mkstemp(tmp.p);
    if (fd < 0) {
        rc = tfs_err(-errno, "cannot create %s", tmp.p);
        tfs_buf_cleanup(&tmp);
        return rc;
    }
    rc = cli_xfer_read(t->st, t->key, s->version, 0, s->size, fd, x);
    if (rc == 0 && fsync(fd) < 0)
        rc = tfs_err(-errno, "fsync of %s failed", tmp.p);
    if (close(fd) < 0 && rc == 0)
        rc = tfs_err(-errno, "close of %s failed", tmp.p);
    if (rc == 0 && rename(tmp.p, path) < 0)
        rc = tfs_err(-errno, "cannot rename into %s", path);
    if (rc < 0)
        unlink(tmp.p);
    tfs_buf_cleanup(&tmp);
    return rc;
}

static int get_parse(int argc, char **argv, struct cli_xfer *x)
{
    static const struct option longopts[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"chunk", required_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "j:qh", longopts, NULL)) != -1) {
        if (c == 'j' &&
            cli_parse_uint("get", "--jobs", optarg, 1, 64, &x->jobs) != 0)
            return CLI_USAGE;
        if (c == 'c' && (cli_parse_size("get", "--chunk", optarg,
                                        &x->chunk) != 0 ||
                         x->chunk == 0 || x->chunk > (1u << 30)))
            return cli_usage_error("get", "--chunk must be 1..1G");
        if (c == 'q')
            x->progress = false;
        if (c == 'h') {
            get_help(stdout);
            return -1;
        }
        if (c == '?') {
            get_help(stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc || argc - optind > 2)
        return cli_usage_error("get", "want URI [DEST]");
    return 0;
}

int cmd_get(int argc, char **argv)
{
    struct cli_xfer x = {.jobs = 4, .chunk = 8u << 20, .progress = true};
    const char *dest;
    struct cli_target t;
    struct tfs_buf path;
    struct tfs_stat s;
    uint64_t t0 = tfs_now_ns();
    bool quiet;
    int rc = get_parse(argc, argv, &x);

    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    dest = optind + 1 < argc ? argv[optind + 1] : NULL;
    quiet = !x.progress;
    x.progress = x.progress && isatty(STDERR_FILENO);
    if (cli_open_target("get", argv[optind], &t) != CLI_OK)
        return CLI_FAIL;
    tfs_buf_init(&path, 0);
    rc = tfs_store_stat(t.st, t.key, &s);
    if (rc == 0 && dest != NULL && strcmp(dest, "-") == 0)
        rc = cli_xfer_read(t.st, t.key, s.version, 0, s.size, STDOUT_FILENO,
                           &x);
    else if (rc == 0)
        rc = get_dest(t.key, dest, &path);
    if (rc == 0 && path.len > 0)
        rc = get_to_file(&t, &s, tfs_buf_str(&path), &x);
    if (rc < 0)
        cli_fail("get", argv[optind], rc);
    else if (!quiet)
        cli_print_rate("got", s.size, tfs_now_ns() - t0);
    tfs_buf_cleanup(&path);
    cli_close_target(&t);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}
