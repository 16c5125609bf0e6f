/* SPDX-License-Identifier: MIT */
/*
 * tierfs sync [--timeout S] MOUNTPOINT [PATH]: wait until every change
 * made through a mount before the call (or those under PATH: a file, or
 * a directory's subtree) is in the store.
 *
 * It talks to the daemon through one extended attribute
 * (docs/writeback.md): getxattr(PATH, "user.tierfs.sync") sets a barrier
 * and answers "seq=S pending=N bytes=B dirty=D errors=E parked=P
 * error=...", then one line per parked change ("upload of 'k': cause");
 * "user.tierfs.sync.S" asks again about barrier S.  Each answer waits up
 * to half a second in the daemon for pending to reach 0, so polling costs
 * little and no request thread is tied up for long.  Exit 0 when nothing
 * is pending or parked; 1 when changes are parked after a permanent error
 * (each named with its cause), when the timeout passes first (with what
 * is left and the last upload error) or the path is not a writable tierfs
 * mount; 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

#define SYNC_XATTR "user.tierfs.sync"

struct sync_state {
    uint64_t seq;
    uint64_t pending;
    uint64_t bytes;
    uint64_t dirty;
    uint64_t errors;
    uint64_t parked;                    /* refused for good, not retried */
    char     error[1024];
    char     parked_list[2048];         /* one line per parked change */
};

static void sync_help(FILE *f)
{
    fprintf(f, "usage: tierfs sync [--timeout SECONDS] [-q] MOUNTPOINT "
               "[PATH]\n\n"
               "Wait until the writes, renames and deletions made through a "
               "tierfs\nmount so far are in the store: all of them, or those "
               "under PATH (a\nfile or a directory, relative to MOUNTPOINT "
               "or absolute).\n\n"
               "  --timeout SECONDS  give up after this long: exit 1 with "
               "what is left\n                     and the last upload error "
               "(default: wait)\n"
               "  -q, --quiet        no progress line\n\n"
               "A change the store refuses for good (permission denied, a "
               "key it rejects)\nis parked: kept in staging, not retried "
               "until it changes or the mount\nrestarts.  sync then exits 1 "
               "naming each parked change and its cause.\n");
}

/* The value of name= in text, as a number. */
static uint64_t sync_field(const char *text, const char *name)
{
    const char *p = strstr(text, name);

    return p ? strtoull(p + strlen(name), NULL, 10) : 0;
}

/* Ask the daemon; -errno (ENODATA/ENOTSUP: not a writable mount). */
static int sync_ask(const char *path, uint64_t seq, struct sync_state *s)
{
    char name[64];
    char text[4096];
    const char *err;
    const char *nl;
    ssize_t n;

    if (seq == 0)
        snprintf(name, sizeof(name), "%s", SYNC_XATTR);
    else
        snprintf(name, sizeof(name), "%s.%" PRIu64, SYNC_XATTR, seq);
    n = getxattr(path, name, text, sizeof(text) - 1);
    if (n < 0)
        return -errno;
    text[n] = '\0';
    s->seq = sync_field(text, "seq=");
    s->pending = sync_field(text, "pending=");
    s->bytes = sync_field(text, "bytes=");
    s->dirty = sync_field(text, "dirty=");
    s->errors = sync_field(text, "errors=");
    s->parked = sync_field(text, "parked=");
    err = strstr(text, "error=");
    err = err ? err + 6 : "";
    nl = strchr(err, '\n');
    snprintf(s->error, sizeof(s->error), "%.*s",
             (int)(nl ? (size_t)(nl - err) : strlen(err)), err);
    snprintf(s->parked_list, sizeof(s->parked_list), "%s", nl ? nl + 1 : "");
    return 0;
}

/* MOUNTPOINT/PATH, or PATH when absolute. */
static int sync_path(const char *mnt, const char *sub, char *out,
                     size_t size)
{
    int n;

    if (sub == NULL || sub[0] == '/')
        n = snprintf(out, size, "%s", sub ? sub : mnt);
    else
        n = snprintf(out, size, "%s/%s", mnt, sub);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int sync_fail_ask(const char *path, int rc)
{
    if (rc == -ENODATA || rc == -ENOTSUP)
        fprintf(stderr, "tierfs: sync %s: not a writable tierfs mount "
                "(mounted --read-only, or not tierfs)\n", path);
    else
        fprintf(stderr, "tierfs: sync %s: %s\n", path, strerror(-rc));
    return CLI_FAIL;
}

static void sync_progress(const struct sync_state *s, uint64_t t0)
{
    char b[32];

    fprintf(stderr, "\r%" PRIu64 " changes pending (%s), %.0f s%s   ",
            s->pending, tfs_fmt_bytes(b, sizeof(b), (double)s->bytes),
            (double)(tfs_now_ns() - t0) / 1e9,
            s->errors ? ", retrying after errors" : "");
}

/* Name each parked change (as many as the answer held); CLI_FAIL. */
static int sync_report_parked(const char *path, const struct sync_state *s)
{
    uint64_t shown = 0;

    fprintf(stderr, "tierfs: sync %s: %" PRIu64 " changes parked after a "
            "permanent error (kept in staging; tried again once changed or "
            "after a remount):\n", path, s->parked);
    for (const char *l = s->parked_list; *l != '\0'; shown++) {
        const char *nl = strchr(l, '\n');
        int len = (int)(nl ? (size_t)(nl - l) : strlen(l));

        fprintf(stderr, "  %.*s\n", len, l);
        l += len + (nl != NULL);
    }
    if (shown < s->parked)
        fprintf(stderr, "  ... and %" PRIu64 " more (tierfs stats %s)\n",
                s->parked - shown, path);
    return CLI_FAIL;
}

static int sync_wait(const char *path, double timeout_s, bool quiet)
{
    struct sync_state s = {0};
    uint64_t t0 = tfs_now_ns();
    bool shown = false;
    char b[32];
    int rc = sync_ask(path, 0, &s);

    quiet = quiet || !isatty(STDERR_FILENO);
    while (rc == 0 && s.pending > 0) {
        if (timeout_s > 0 && (double)(tfs_now_ns() - t0) / 1e9 >= timeout_s)
            break;
        if (!quiet) {
            sync_progress(&s, t0);
            shown = true;
        }
        rc = sync_ask(path, s.seq, &s);
    }
    if (shown)
        fprintf(stderr, "\n");
    if (rc < 0)
        return sync_fail_ask(path, rc);
    if (s.dirty > 0)
        fprintf(stderr, "tierfs: sync %s: %" PRIu64 " files are open with "
                "writes not yet closed; they upload once closed\n", path,
                s.dirty);
    if (s.pending == 0)
        return s.parked > 0 ? sync_report_parked(path, &s) : CLI_OK;
    fprintf(stderr, "tierfs: sync %s: %" PRIu64 " changes (%s) still not "
            "in the store after %.0f s%s%s\n", path, s.pending,
            tfs_fmt_bytes(b, sizeof(b), (double)s.bytes), timeout_s,
            s.error[0] ? "; last error: " : "", s.error);
    if (s.parked > 0)
        sync_report_parked(path, &s);
    return CLI_FAIL;
}

int cmd_sync(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"timeout", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char path[PATH_MAX];
    double timeout_s = 0;
    bool quiet = false;
    int c;

    while ((c = getopt_long(argc, argv, "t:qh", longopts, NULL)) != -1) {
        if (c == 't' && (tfs_parse_double(optarg, &timeout_s) < 0 ||
                         timeout_s < 0))
            return cli_usage_error("sync", "--timeout: '%s' is not a "
                                   "number of seconds", optarg);
        if (c == 'q')
            quiet = true;
        if (c == 'h') {
            sync_help(stdout);
            return CLI_OK;
        }
        if (c == '?') {
            sync_help(stderr);
            return CLI_USAGE;
        }
    }
    if (argc - optind < 1 || argc - optind > 2)
        return cli_usage_error("sync", "want MOUNTPOINT [PATH]");
    if (sync_path(argv[optind], argc - optind == 2 ? argv[optind + 1]
                                                   : NULL,
                  path, sizeof(path)) < 0)
        return cli_usage_error("sync", "path too long");
    return sync_wait(path, timeout_s, quiet);
}
