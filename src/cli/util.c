/* SPDX-License-Identifier: MIT */
/*
 * Helpers every command calls (cli.h): one-line errors that never show a
 * password, usage errors, and option values parsed into numbers; and the
 * global options main.c parses before the command name.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

const char *cli_store_options;
bool cli_verbose;

/*
 * what as an error shows it: a "user:password@" in it (in a URI, or in an
 * endpoint= of its query: both refused) becomes "***@", so that the
 * password never reaches a terminal or a log (docs/security.md).
 */
static const char *cli_shown(const char *what, char *buf, size_t len)
{
    size_t n = 0;
    size_t start = 0;                   /* in buf: after ://, =, &, ? */

    if (strchr(what, '@') == NULL)
        return what;
    for (const char *p = what; *p != '\0' && n + 4 < len; p++) {
        if (*p == '@' && memchr(buf + start, ':', n - start) != NULL) {
            memcpy(buf + start, "***", 3);
            n = start + 3;
        }
        buf[n++] = *p;
        if (*p == '=' || *p == '&' || *p == '?' ||
            (*p == '/' && n >= 3 && memcmp(buf + n - 3, "://", 3) == 0))
            start = n;
    }
    buf[n] = '\0';
    return buf;
}

int cli_fail(const char *cmd, const char *what, int rc)
{
    const char *detail = tfs_errdetail();
    char shown[1024];

    what = cli_shown(what, shown, sizeof(shown));
    if (detail[0] != '\0')
        fprintf(stderr, "tierfs: %s %s: %s (%s)\n", cmd, what,
                tfs_strerror(rc), detail);
    else
        fprintf(stderr, "tierfs: %s %s: %s\n", cmd, what, tfs_strerror(rc));
    return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "tierfs: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntry 'tierfs %s --help'\n", cmd);
    return CLI_USAGE;
}

int cli_parse_size(const char *cmd, const char *opt, const char *s,
                   uint64_t *out)
{
    if (tfs_parse_size(s, out) < 0)
        return cli_usage_error(cmd, "%s: '%s' is not a size (e.g. 8M)", opt,
                               s);
    return 0;
}

int cli_parse_uint(const char *cmd, const char *opt, const char *s,
                   unsigned min, unsigned max, unsigned *out)
{
    uint64_t v;

    if (tfs_parse_u64(s, &v) < 0 || v < min || v > max)
        return cli_usage_error(cmd, "%s: '%s' is not a number in %u..%u",
                               opt, s, min, max);
    *out = (unsigned)v;
    return 0;
}

int cli_subcommand(const char *cmd, const struct cli_sub *subs, size_t n,
                   void (*help)(FILE *f), int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        help(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], subs[i].name) == 0) {
            optind = 0;
            return subs[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "tierfs: %s: '%s' is not a subcommand\n", cmd, argv[1]);
    help(stderr);
    return CLI_USAGE;
}
