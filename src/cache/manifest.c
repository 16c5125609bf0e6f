/* SPDX-License-Identifier: MIT */
/*
 * The listing manifest (manifest.h): the line parser and the key rules,
 * the file reader (lines, header, end, the file and line in every
 * error), and the writer the CLI's `tierfs manifest` uses.  The mount
 * installs what the reader yields as its immutable listing snapshot
 * (meta.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache/manifest.h"
#include "common/json.h"

#define MANIFEST_BUF (1u << 20)         /* bytes read at a time */

/* ---- one line ---- */

int tfs_manifest_check_key(const char *key)
{
    size_t len = strlen(key);
    const char *c = key;
    bool odd = false;                   /* an empty, "." or ".." part */
    bool outside = false;               /* ".." past the top */
    long depth = 0;

    if (len == 0)
        return tfs_err(TFS_EFORMAT, "empty key");
    if (len > TFS_MANIFEST_KEY_MAX)
        return tfs_err(TFS_EFORMAT, "key '%.40s...' is longer than %d "
                       "bytes", key, TFS_MANIFEST_KEY_MAX);
    if (key[0] == '/')
        return tfs_err(TFS_EFORMAT, "key '%s' is absolute", key);
    for (;;) {
        const char *end = strchrnul(c, '/');
        size_t n = (size_t)(end - c);
        bool up = n == 2 && c[0] == '.' && c[1] == '.';
        odd = odd || up || n == 0 || (n == 1 && c[0] == '.');
        depth += up ? -1 : n == 0 || (n == 1 && c[0] == '.') ? 0 : 1;
        outside = outside || depth < 0;
        if (*end == '\0')
            break;
        c = end + 1;
    }
    if (outside)
        return tfs_err(TFS_EFORMAT, "key '%s' is outside the URI", key);
    if (odd)
        return tfs_err(TFS_EFORMAT, "key '%s' has an empty, '.' or '..' "
                       "component", key);
    return 0;
}

/* The string member name of o into buf[cap]; TFS_EFORMAT naming it. */
static int manifest_str(const struct tfs_json *o, const char *name,
                        char *buf, size_t cap)
{
    const struct tfs_json *v = tfs_json_get(o, name);

    if (v == NULL)
        return tfs_err(TFS_EFORMAT, "no \"%s\"", name);
    if (v->type != TFS_JSON_STRING)
        return tfs_err(TFS_EFORMAT, "\"%s\" is not a string", name);
    if (v->len >= cap)
        return tfs_err(TFS_EFORMAT, "\"%s\" is longer than %zu bytes", name,
                       cap - 1);
    memcpy(buf, v->s, v->len + 1);
    return 0;
}

static int manifest_entry(const struct tfs_json *o,
                          struct tfs_manifest_line *out)
{
    const struct tfs_json *size = tfs_json_get(o, "size");
    const struct tfs_json *mtime = tfs_json_get(o, "mtime_ns");
    int rc;

    out->kind = TFS_MANIFEST_ENTRY;
    rc = manifest_str(o, "key", out->key, sizeof(out->key));
    if (rc == 0)
        rc = tfs_manifest_check_key(out->key);
    if (rc == 0)
        rc = manifest_str(o, "version", out->st.version,
                          sizeof(out->st.version));
    if (rc < 0)
        return rc;
    if (size == NULL || mtime == NULL)
        return tfs_err(TFS_EFORMAT, "no \"%s\"", size ? "mtime_ns" : "size");
    if (size->type == TFS_JSON_NUMBER && size->s[0] == '-')
        return tfs_err(TFS_EFORMAT, "size is negative");
    if (tfs_json_u64(size, &out->st.size) < 0)
        return tfs_err(TFS_EFORMAT, "size is not a whole number of bytes");
    if (tfs_json_i64(mtime, &out->st.mtime_ns) < 0)
        return tfs_err(TFS_EFORMAT, "mtime_ns is not a whole number");
    return 0;
}

static int manifest_header(const struct tfs_json *o,
                           struct tfs_manifest_line *out)
{
    uint64_t v;

    out->kind = TFS_MANIFEST_HEADER;
    if (tfs_json_u64(tfs_json_get(o, "tierfs_manifest"), &v) < 0)
        return tfs_err(TFS_EFORMAT, "tierfs_manifest is not a version");
    if (v != TFS_MANIFEST_VERSION)
        return tfs_err(TFS_EFORMAT, "manifest version %" PRIu64 " (this "
                       "tierfs reads %d)", v, TFS_MANIFEST_VERSION);
    return manifest_str(o, "identity", out->identity,
                        sizeof(out->identity));
}

int tfs_manifest_parse_line(const char *line, size_t len,
                            struct tfs_manifest_line *out)
{
    static const struct tfs_json_limits lim = {
        .max_len = TFS_MANIFEST_LINE_MAX,
        .max_depth = 4,
        .max_nodes = 64,
        .any_bytes = true,
    };
    struct tfs_json_doc doc;
    int rc = tfs_json_parse(line, len, &lim, &doc);

    if (rc < 0)
        return rc;
    if (doc.root->type != TFS_JSON_OBJECT)
        rc = tfs_err(TFS_EFORMAT, "not a JSON object");
    else if (tfs_json_get(doc.root, "key") != NULL)
        rc = manifest_entry(doc.root, out);
    else if (tfs_json_get(doc.root, "tierfs_manifest") != NULL)
        rc = manifest_header(doc.root, out);
    else if (tfs_json_get(doc.root, "end") != NULL) {
        out->kind = TFS_MANIFEST_END;
        if (tfs_json_u64(tfs_json_get(doc.root, "objects"),
                         &out->objects) < 0)
            rc = tfs_err(TFS_EFORMAT, "end line without \"objects\"");
    } else {
        rc = tfs_err(TFS_EFORMAT, "no \"key\"");
    }
    tfs_json_cleanup(&doc);
    return rc;
}

/* ---- the file ---- */

struct manifest_reader {
    const char               *path;
    const char               *identity; /* expected, or NULL */
    tfs_manifest_fn          *fn;
    void                     *arg;
    uint64_t                  line_no;
    uint64_t                  entries;
    bool                      have_header;
    bool                      have_end;
    uint64_t                  err_line; /* the line that failed, or 0 */
    struct tfs_manifest_line  l;        /* the current line's */
};

/* One line through the parser and the order rules. */
static int manifest_line(struct manifest_reader *r, const char *p,
                         size_t len)
{
    int rc;

    r->line_no++;
    if (r->have_end)
        return tfs_err(TFS_EFORMAT, "a line after the end line");
    rc = tfs_manifest_parse_line(p, len, &r->l);
    if (rc < 0)
        return rc;
    if (!r->have_header && r->l.kind != TFS_MANIFEST_HEADER)
        return tfs_err(TFS_EFORMAT, "not a tierfs manifest (the first "
                       "line is no {\"tierfs_manifest\": ...} header)");
    switch (r->l.kind) {
    case TFS_MANIFEST_HEADER:
        if (r->have_header)
            return tfs_err(TFS_EFORMAT, "a second header");
        r->have_header = true;
        if (r->identity != NULL && strcmp(r->l.identity, r->identity) != 0)
            return tfs_err(TFS_EFORMAT, "a manifest of %s, not of %s",
                           r->l.identity, r->identity);
        return 0;
    case TFS_MANIFEST_END:
        r->have_end = true;
        if (r->l.objects != r->entries)
            return tfs_err(TFS_EFORMAT, "the end line counts %" PRIu64
                           " objects, the manifest has %" PRIu64,
                           r->l.objects, r->entries);
        return 0;
    default:
        r->entries++;
        return r->fn(r->arg, r->l.key, &r->l.st, r->line_no);
    }
}

/* Every whole line in buf[0, *len); what is left moves to the front. */
static int manifest_lines(struct manifest_reader *r, char *buf, size_t *len,
                          bool eof)
{
    size_t off = 0;
    int rc = 0;

    while (rc == 0 && off < *len) {
        char *nl = memchr(buf + off, '\n', *len - off);
        size_t n = nl ? (size_t)(nl - (buf + off)) : *len - off;
        if (nl == NULL && !eof)
            break;
        rc = manifest_line(r, buf + off, n);
        if (rc < 0)
            r->err_line = r->line_no;
        off += n + (nl != NULL);
    }
    if (rc == 0 && *len - off > TFS_MANIFEST_LINE_MAX) {
        r->err_line = r->line_no + 1;
        return tfs_err(TFS_ETOOBIG, "a line longer than %d bytes",
                       TFS_MANIFEST_LINE_MAX);
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
    return rc;
}

static int manifest_read_fd(struct manifest_reader *r, int fd, char *buf)
{
    size_t len = 0;
    int rc = 0;

    for (;;) {
        ssize_t n = read(fd, buf + len, MANIFEST_BUF - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tfs_err(-errno, "cannot read it");
        len += (size_t)n;
        rc = manifest_lines(r, buf, &len, n == 0);
        if (rc != 0 || n == 0)
            break;
    }
    if (rc > 0)
        return rc;
    if (rc == 0 && !r->have_header)
        rc = tfs_err(TFS_EFORMAT, "empty: no header");
    else if (rc == 0 && !r->have_end)
        rc = tfs_err(TFS_EFORMAT, "cut short: no end line after %" PRIu64
                     " objects", r->entries);
    return rc;
}

int tfs_manifest_read(const char *path, const char *identity,
                      tfs_manifest_fn *fn, void *arg)
{
    struct manifest_reader r = {
        .path = path, .identity = identity, .fn = fn, .arg = arg,
    };
    char detail[512];
    char *buf;
    int fd;
    int rc;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tfs_err(-errno, "manifest %s: cannot open it", path);
    buf = tfs_malloc(MANIFEST_BUF);
    rc = buf ? manifest_read_fd(&r, fd, buf) : -ENOMEM;
    tfs_free(buf);
    close(fd);
    if (rc >= 0)
        return 0;                       /* > 0: fn stopped it */
    snprintf(detail, sizeof(detail), "%s", tfs_errdetail());
    if (r.err_line > 0)
        return tfs_err(rc, "manifest %s line %" PRIu64 ": %s", path,
                       r.err_line, detail);
    return tfs_err(rc, "manifest %s: %s", path, detail);
}

/* ---- writing ---- */

int tfs_manifest_put_header(struct tfs_buf *b, const char *uri,
                            const char *identity)
{
    tfs_buf_printf(b, "{\"tierfs_manifest\": %d, \"uri\": ",
                   TFS_MANIFEST_VERSION);
    tfs_json_put_cstr(b, uri);
    tfs_buf_puts(b, ", \"identity\": ");
    tfs_json_put_cstr(b, identity);
    return tfs_buf_puts(b, "}\n");
}

int tfs_manifest_put_entry(struct tfs_buf *b, const char *key,
                           const struct tfs_stat *st)
{
    tfs_buf_puts(b, "{\"key\": ");
    tfs_json_put_cstr(b, key);
    tfs_buf_printf(b, ", \"size\": %" PRIu64 ", \"mtime_ns\": %" PRId64
                   ", \"version\": ", st->size, st->mtime_ns);
    tfs_json_put_cstr(b, st->version);
    return tfs_buf_puts(b, "}\n");
}

int tfs_manifest_put_end(struct tfs_buf *b, uint64_t objects)
{
    return tfs_buf_printf(b, "{\"end\": true, \"objects\": %" PRIu64 "}\n",
                          objects);
}
