/* SPDX-License-Identifier: MIT */
/*
 * The group's member list (group.h): parsing "host:port [weight]" lines,
 * and weighted rendezvous hashing over them.
 *
 * Rendezvous: member m's score for a key is -w / ln(u), u the key's hash
 * under m's seed mapped into (0, 1).  The largest score owns the key.
 * Scores of different members are independent, so removing a member
 * moves only the keys it owned (to their second choice) and adding one
 * takes from every other member in proportion, w / sum(w) of all keys;
 * the -w/ln(u) form makes a member's share its weight's share (the
 * weighted HRW of Schindelhauer and Schomaker).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/util.h"
#include "group/group.h"

#define GM_FILE_MAX (4u << 20)

/* A host: a DNS name or IPv4 (letters, digits, '-', '.') or an IPv6
 * address (hex digits, ':', '.'). */
static bool gm_host_ok(const char *h, bool v6)
{
    if (h[0] == '\0')
        return false;
    for (const char *p = h; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (v6 ? !(isxdigit(c) || c == ':' || c == '.')
               : !(isalnum(c) || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* Split "host:port" or "[v6]:port" (tok, NUL-terminated) into m. */
static int gm_addr(char *tok, struct tfs_gmember *m, const char **why)
{
    char *host = tok;
    char *colon;
    bool v6 = false;
    uint64_t port;

    if (tok[0] == '[') {
        char *end = strchr(tok, ']');
        if (end == NULL || end[1] != ':')
            return *why = "an IPv6 address is \"[addr]:port\"", -1;
        *end = '\0';
        host = tok + 1;
        colon = end + 1;
        v6 = true;
    } else {
        colon = strrchr(tok, ':');
        if (colon == NULL)
            return *why = "no port (host:port)", -1;
        *colon = '\0';
    }
    if (!gm_host_ok(host, v6) || strlen(host) >= TFS_GROUP_HOST_MAX)
        return *why = "not a host name or address", -1;
    if (tfs_parse_u64(colon + 1, &port) < 0 || port < 1 || port > 65535)
        return *why = "the port is not a number in 1..65535", -1;
    snprintf(m->host, sizeof(m->host), "%s", host);
    m->port = (uint16_t)port;
    return 0;
}

/* A weight: a positive number ("2.5"), or a size ("500G"). */
static int gm_weight(const char *s, double *w)
{
    uint64_t v;

    if (tfs_parse_double(s, w) == 0)
        return *w > 0 && isfinite(*w) ? 0 : -1;
    if (tfs_parse_size(s, &v) == 0 && v > 0) {
        *w = (double)v;
        return 0;
    }
    return -1;
}

/* One line (NUL-terminated, comment cut): 0 and a member in *m, 1 when
 * blank, -1 with *why. */
static int gm_line(char *line, struct tfs_gmember *m, const char **why)
{
    char *save = NULL;
    char *addr = strtok_r(line, " \t\r", &save);
    char *w = addr ? strtok_r(NULL, " \t\r", &save) : NULL;
    char buf[16];

    if (addr == NULL)
        return 1;
    if (w != NULL && strtok_r(NULL, " \t\r", &save) != NULL)
        return *why = "more than \"host:port weight\"", -1;
    memset(m, 0, sizeof(*m));
    m->weight = 1;
    if (gm_addr(addr, m, why) < 0)
        return -1;
    if (w != NULL && gm_weight(w, &m->weight) < 0)
        return *why = "the weight is not a positive number or size", -1;
    snprintf(buf, sizeof(buf), ":%u", (unsigned)m->port);
    m->seed = XXH3_64bits_withSeed(m->host, strlen(m->host),
                                   XXH3_64bits(buf, strlen(buf)));
    return 0;
}

long tfs_gmembers_find(const struct tfs_gmembers *g, const char *host,
                       uint16_t port)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->m[i].port == port && strcmp(g->m[i].host, host) == 0)
            return (long)i;
    return -1;
}

/* Append m to g (growing g->m; *cap its room); -ENOMEM. */
static int gm_push(struct tfs_gmembers *g, size_t *cap,
                   const struct tfs_gmember *m)
{
    if (g->n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct tfs_gmember *p = tfs_realloc(g->m, c * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        g->m = p;
        *cap = c;
    }
    g->m[g->n++] = *m;
    return 0;
}

/* Parse line number no (len bytes at s) into g. */
static int gm_parse_line(const char *s, size_t len, const char *what,
                         unsigned no, struct tfs_gmembers *g, size_t *cap)
{
    char line[1024];
    struct tfs_gmember m;
    const char *why = NULL;
    const char *hash = memchr(s, '#', len);
    long dup;
    int rc;

    if (hash != NULL)
        len = (size_t)(hash - s);
    if (len >= sizeof(line))
        return tfs_err(TFS_EFORMAT, "%s:%u: line too long", what, no);
    memcpy(line, s, len);
    line[len] = '\0';
    rc = gm_line(line, &m, &why);
    if (rc > 0)
        return 0;
    if (rc < 0)
        return tfs_err(TFS_EFORMAT, "%s:%u: %s", what, no, why);
    dup = tfs_gmembers_find(g, m.host, m.port);
    if (dup >= 0)
        return tfs_err(TFS_EFORMAT, "%s:%u: %s:%u is listed twice", what,
                       no, m.host, (unsigned)m.port);
    if (g->n == TFS_GROUP_MAX_MEMBERS)
        return tfs_err(TFS_EFORMAT, "%s:%u: more than %u members", what, no,
                       TFS_GROUP_MAX_MEMBERS);
    return gm_push(g, cap, &m);
}

int tfs_gmembers_parse(const char *text, size_t len, const char *what,
                       struct tfs_gmembers *out)
{
    struct tfs_gmembers g = {NULL, 0};
    size_t cap = 0;
    unsigned no = 0;
    int rc = 0;

    for (size_t off = 0; off < len && rc == 0;) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t n = nl ? (size_t)(nl - (text + off)) : len - off;

        if (memchr(text + off, '\0', n) != NULL)
            rc = tfs_err(TFS_EFORMAT, "%s:%u: a NUL byte", what, no + 1);
        else
            rc = gm_parse_line(text + off, n, what, ++no, &g, &cap);
        off += n + 1;
    }
    if (rc == 0 && g.n == 0)
        rc = tfs_err(TFS_EFORMAT, "%s: no members", what);
    if (rc < 0) {
        tfs_gmembers_cleanup(&g);
        return rc;
    }
    *out = g;
    return 0;
}

int tfs_gmembers_load(const char *path, struct tfs_gmembers *out)
{
    FILE *f = fopen(path, "r");
    char *buf;
    size_t n;
    int rc;

    if (f == NULL)
        return tfs_err(-errno, "cannot open the member list %s", path);
    buf = tfs_malloc(GM_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return -ENOMEM;
    }
    n = fread(buf, 1, GM_FILE_MAX + 1, f);
    rc = ferror(f) ? tfs_err(-EIO, "cannot read %s", path)
         : n > GM_FILE_MAX
             ? tfs_err(TFS_EFORMAT, "%s: larger than %u bytes", path,
                       GM_FILE_MAX)
             : tfs_gmembers_parse(buf, n, path, out);
    fclose(f);
    tfs_free(buf);
    return rc;
}

void tfs_gmembers_cleanup(struct tfs_gmembers *g)
{
    tfs_free(g->m);
    g->m = NULL;
    g->n = 0;
}

double tfs_gmember_score(const struct tfs_gmember *m, const void *key,
                         size_t len)
{
    uint64_t h = XXH3_64bits_withSeed(key, len, m->seed);
    double u = ((double)(h >> 11) + 0.5) * 0x1p-53;     /* in (0, 1) */

    return -m->weight / log(u);
}

size_t tfs_gmembers_rank(const struct tfs_gmembers *g, const void *key,
                         size_t len, tfs_gmember_usable_fn *usable,
                         void *arg, size_t *order, size_t max)
{
    double best[64];
    size_t n = 0;

    if (max > TFS_ARRAY_LEN(best))
        max = TFS_ARRAY_LEN(best);
    for (size_t i = 0; i < g->n; i++) {   /* insertion into the top max */
        double s;
        size_t j;

        if (usable != NULL && !usable(arg, i))
            continue;
        s = tfs_gmember_score(&g->m[i], key, len);
        if (n == max && (max == 0 || s <= best[n - 1]))
            continue;
        j = n < max ? n++ : n - 1;
        for (; j > 0 && best[j - 1] < s; j--) {
            best[j] = best[j - 1];
            order[j] = order[j - 1];
        }
        best[j] = s;
        order[j] = i;
    }
    return n;
}
