/* SPDX-License-Identifier: MIT */
/*
 * tierfs put SRC URI: upload a local file ('-': standard input, spooled
 * to a temporary file first so the upload can be multipart and retried).
 * A URI ending in '/' receives SRC's file name.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

static void put_help(FILE *f)
{
    fprintf(f, "usage: tierfs put [-q] SRC URI\n\n"
               "Upload the local file SRC ('-' for standard input) to URI.\n"
               "Large files go up as a multipart upload with parts in\n"
               "parallel (store options part_size, multipart_threshold,\n"
               "upload_concurrency).  Readers never see a partial object.\n"
               "\n  -q, --quiet   no summary line\n");
}

/* Copy standard input into an unlinked temporary file. */
static int put_spool_stdin(int *fd_out)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char buf[1 << 16];
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

    if (fd < 0)
        return tfs_err(-errno, "cannot create a temporary file in %s", dir);
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                break;
            close(fd);
            return tfs_err(-errno, "read of standard input failed");
        }
        if (write(fd, buf, (size_t)n) != n) {
            close(fd);
            return tfs_err(-EIO, "spooling standard input failed");
        }
    }
    *fd_out = fd;
    return 0;
}

static int put_source(const char *src, struct tfs_source *s)
{
    struct stat sb;
    int rc = 0;

    s->buf = NULL;
    s->off = 0;
    if (strcmp(src, "-") == 0)
        rc = put_spool_stdin(&s->fd);
    else if ((s->fd = open(src, O_RDONLY | O_CLOEXEC)) < 0)
        rc = tfs_err(-errno, "cannot open %s", src);
    if (rc < 0)
        return rc;
    if (fstat(s->fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(s->fd);
        return tfs_err(-EINVAL, "%s is not a regular file", src);
    }
    s->len = (uint64_t)sb.st_size;
    return 0;
}

/* The key: as given, or with SRC's base name added after a '/'. */
static int put_key(const char *key, const char *src, struct tfs_buf *out)
{
    const char *slash = strrchr(src, '/');
    const char *name = slash ? slash + 1 : src;
    size_t klen = strlen(key);

    if (klen > 0 && key[klen - 1] != '/')
        return tfs_buf_puts(out, key);
    if (strcmp(src, "-") == 0 || name[0] == '\0')
        return tfs_err(-EINVAL, "the destination needs an object name");
    return tfs_buf_printf(out, "%s%s", key, name);
}

int cmd_put(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct tfs_source src = {.fd = -1};
    struct cli_target t;
    struct tfs_buf key;
    bool quiet = false;
    uint64_t t0 = tfs_now_ns();
    int rc;
    int c;

    while ((c = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
        if (c == 'q') {
            quiet = true;
        } else if (c == 'h') {
            put_help(stdout);
            return CLI_OK;
        } else {
            put_help(stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("put", "want SRC URI");
    if (cli_open_target("put", argv[optind + 1], &t) != CLI_OK)
        return CLI_FAIL;
    tfs_buf_init(&key, 0);
    rc = put_key(t.key, argv[optind], &key);
    if (rc == 0)
        rc = put_source(argv[optind], &src);
    if (rc == 0) {
        rc = tfs_store_put_source(t.st, tfs_buf_str(&key), &src, NULL);
        close(src.fd);
    }
    if (rc < 0)
        cli_fail("put", argv[optind + 1], rc);
    else if (!quiet)
        cli_print_rate("put", src.len, tfs_now_ns() - t0);
    tfs_buf_cleanup(&key);
    cli_close_target(&t);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}
