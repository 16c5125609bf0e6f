/* SPDX-License-Identifier: MIT */
/*
 * Turning a command-line URI into (store, key).  For S3 the bucket is the
 * store and the rest of the path the key; for files the store is "/" and
 * the key the absolute, lexically normalised path, so "tierfs get
 * /data/x" and "tierfs put f file:///new/dir/f" need no other root.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

/* Normalise an absolute path: drop "." and empty parts, resolve "..". */
static int target_normalise(const char *path, struct tfs_buf *out)
{
    const char *c = path;
    int rc = 0;

    while (*c != '\0' && rc == 0) {
        const char *end = strchrnul(c, '/');
        size_t len = (size_t)(end - c);

        if (len == 2 && c[0] == '.' && c[1] == '.') {
            char *slash = out->len ? memrchr(out->p, '/', out->len) : NULL;
            out->len = slash ? (size_t)(slash - out->p) : 0;
            if (out->p != NULL)
                out->p[out->len] = '\0';
        } else if (len > 0 && !(len == 1 && c[0] == '.')) {
            if (out->len > 0)
                rc = tfs_buf_puts(out, "/");
            if (rc == 0)
                rc = tfs_buf_append(out, c, len);
        }
        c = *end ? end + 1 : end;
    }
    /* Keep a trailing '/': it means "the prefix", for ls and put. */
    if (rc == 0 && out->len > 0 && path[strlen(path) - 1] == '/')
        rc = tfs_buf_puts(out, "/");
    return rc;
}

/* The key of a file location: the absolute path without its first '/'. */
static int target_file_key(const char *loc, struct tfs_buf *key)
{
    char cwd[PATH_MAX];
    struct tfs_buf abs;
    int rc;

    tfs_buf_init(&abs, 0);
    if (loc[0] == '/') {
        rc = tfs_buf_puts(&abs, loc);
    } else if (getcwd(cwd, sizeof(cwd)) == NULL) {
        rc = tfs_err(-errno, "cannot get the current directory");
    } else {
        rc = tfs_buf_printf(&abs, "%s/%s", cwd, loc);
    }
    if (rc == 0)
        rc = target_normalise(tfs_buf_str(&abs), key);
    tfs_buf_cleanup(&abs);
    return rc;
}

/* Build store URI and key from a parsed URI. */
static int target_split(const struct tfs_uri *u, struct tfs_buf *store,
                        struct tfs_buf *key)
{
    const char *bottom = u->schemes[u->n_schemes - 1];
    int rc = 0;

    for (int i = 0; i < u->n_schemes && rc == 0; i++)
        rc = tfs_buf_printf(store, "%s%s", i ? "+" : "", u->schemes[i]);
    if (rc < 0)
        return rc;
    if (strcmp(bottom, "file") == 0) {
        rc = tfs_buf_puts(store, ":///");
        if (rc == 0)
            rc = target_file_key(u->location, key);
    } else {
        const char *slash = strchr(u->location, '/');
        size_t blen = slash ? (size_t)(slash - u->location)
                            : strlen(u->location);
        rc = tfs_buf_printf(store, "://%.*s", (int)blen, u->location);
        if (rc == 0 && slash != NULL)
            rc = tfs_buf_puts(key, slash + 1);
    }
    if (rc == 0 && u->query != NULL)
        rc = tfs_buf_printf(store, "?%s", u->query);
    return rc;
}

int cli_open_target(const char *cmd, const char *uri, struct cli_target *out)
{
    struct tfs_buf store;
    struct tfs_buf key;
    struct tfs_uri u;
    int rc;

    memset(out, 0, sizeof(*out));
    tfs_buf_init(&store, 0);
    tfs_buf_init(&key, 0);
    rc = tfs_uri_parse(uri, &u);
    if (rc < 0)
        return cli_fail(cmd, uri, rc);
    rc = target_split(&u, &store, &key);
    tfs_uri_cleanup(&u);
    if (rc == 0)
        rc = tfs_store_open(&out->st, tfs_buf_str(&store),
                            cli_store_options);
    if (rc < 0) {
        cli_fail(cmd, uri, rc);
        tfs_buf_cleanup(&store);
        tfs_buf_cleanup(&key);
        return CLI_FAIL;
    }
    out->store_uri = tfs_buf_steal(&store);
    out->key = tfs_buf_steal(&key);
    if (out->store_uri == NULL || out->key == NULL) {
        cli_close_target(out);
        return cli_fail(cmd, uri, -ENOMEM);
    }
    return CLI_OK;
}

void cli_close_target(struct cli_target *t)
{
    tfs_store_close(t->st);
    tfs_free(t->key);
    tfs_free(t->store_uri);
    memset(t, 0, sizeof(*t));
}
